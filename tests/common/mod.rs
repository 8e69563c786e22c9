//! Helpers shared by the integration tests. Each test binary compiles this
//! module on its own and uses only part of it, hence the allowance below.
#![allow(dead_code)]

pub mod dashboard;
pub mod fake_cuda;
pub mod fake_nvml;
pub mod screen;
pub mod skip;
pub mod tmux;
pub mod walkthrough;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;

use vramtop::app::viewer::ViewerState;
use vramtop::snapshot::read_snapshot_file;

/// A simulated GPU of 1 GiB with three training processes: two 500 MiB
/// CUDA contexts fill it, so the third trainer cannot start, and the two
/// that run share GPU 0 and meet OOMs.
pub const SIM_GPU_FULL_AT_TWO_TRAINERS: [&str; 6] = [
    "--backend",
    "sim",
    "--sim-memory",
    "1GiB",
    "--sim-training",
    "3",
];

/// Runs the vramtop binary with `args` (and `LD_LIBRARY_PATH` when given);
/// returns (exit code, stdout, stderr).
pub fn run_vramtop(args: &[&str], ld_library_path: Option<&Path>) -> (i32, String, String) {
    run_vramtop_with_env(args, ld_library_path, &[])
}

/// [`run_vramtop`] with the environment variables `env` set as well.
pub fn run_vramtop_with_env(
    args: &[&str],
    ld_library_path: Option<&Path>,
    env: &[(&str, &str)],
) -> (i32, String, String) {
    let mut cmd = vramtop_command(args);
    no_terminal_width(&mut cmd);
    cmd.envs(env.iter().copied());
    if let Some(dir) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    outcome(cmd.output().expect("the binary runs"))
}

/// The vramtop binary with `args`, reading no config file of the user's:
/// the user's own (~/.config/vramtop/config.toml) must not change what a
/// test sees, so the default location is an empty folder.
///
/// It also looks for probes in a private empty folder only
/// ([`isolate_probes`]); a test that starts a probe points
/// `VRAMTOP_PROBE_DIR` at that probe's folder after this.
pub fn vramtop_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtop"));
    cmd.args(args).env(
        "XDG_CONFIG_HOME",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-user-config"),
    );
    isolate_probes(&mut cmd);
    cmd
}

/// The variable that replaces the folders probes listen in, for vramtop
/// and the Python probe alike.
pub const PROBE_DIR_ENV: &str = vramtop::probe::discovery::PROBE_DIR_ENV;

/// A private (0700), empty folder no probe listens in: what the tests'
/// vramtop scans unless a test starts a probe of its own, so that a
/// probed process of the same user running on the machine (in
/// `/tmp/vramtop-<user>` or `$XDG_RUNTIME_DIR/vramtop`) changes no test's
/// output.
pub fn no_probes_dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-probes");
    std::fs::create_dir_all(&dir).expect("the no-probes folder can be made");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .expect("the no-probes folder can be made private");
    dir
}

/// Points `cmd` (vramtop, or a probe it starts) at [`no_probes_dir`], and
/// the snapshots it writes itself (`c` on a simulated process, the stress
/// panel's `W`) at [`test_snapshots_dir`], not the user's state folder.
pub fn isolate_probes(cmd: &mut Command) {
    cmd.env(PROBE_DIR_ENV, no_probes_dir());
    cmd.env(SNAPSHOT_DIR_ENV, test_snapshots_dir());
}

/// The variable that names the folder snapshots are written into, for
/// vramtop and the Python probe alike.
pub const SNAPSHOT_DIR_ENV: &str = "VRAMTOP_SNAPSHOT_DIR";

/// Where the tests' vramtop writes its own snapshots (never the user's
/// `~/.local/state/vramtop/snapshots`).
pub fn test_snapshots_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("snapshots")
}

/// Gives `cmd` the help's width for no terminal (`COLUMNS`, which the
/// help honours first where stdout is a pipe): without it, a developer's
/// `cargo test` in a terminal would wrap the help to that terminal's width
/// (the help asks the controlling terminal), where CI has none. A test's
/// own `COLUMNS` is set after this one.
pub fn no_terminal_width(cmd: &mut Command) {
    cmd.env(
        vramtop::cli::help::COLUMNS_ENV,
        vramtop::cli::help::DEFAULT_HELP_WIDTH.to_string(),
    );
}

/// A finished process's (exit code, stdout, stderr); -1 for a signal.
pub fn outcome(out: std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`run_vramtop`] with `input` on the binary's standard input.
pub fn run_vramtop_with_stdin(args: &[&str], input: &[u8]) -> (i32, String, String) {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut command = vramtop_command(args);
    no_terminal_width(&mut command);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramtop starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    // A command that refuses early may close its end first.
    let _ = stdin.write_all(input);
    drop(stdin);
    outcome(child.wait_with_output().expect("vramtop ends"))
}

/// Runs vramtop with `args`, then with `args` and `--ascii`, and checks
/// that `--ascii` prints pure ASCII one character for one: each line as
/// many terminal cells wide as without it, the same exit code (0, 1 or 2
/// with a report). Returns what the run without `--ascii` printed.
pub fn assert_ascii_twin(args: &[&str]) -> String {
    use unicode_width::UnicodeWidthStr as _;
    // Laid out as on a terminal (a path's folders elided to 80 columns),
    // where the layout that --ascii must keep matters.
    let terminal = [(vramtop::cli::DEBUG_STDOUT_TERMINAL_ENV, "1")];
    let (code, plain, err) = run_vramtop_with_env(args, None, &terminal);
    // 2 with a report: `replay` of a file that contradicts itself.
    assert!(
        matches!(code, 0..=2) && !plain.is_empty(),
        "{args:?}: {err}"
    );
    let with_ascii: Vec<&str> = args.iter().copied().chain(["--ascii"]).collect();
    let (ascii_code, ascii, err) = run_vramtop_with_env(&with_ascii, None, &terminal);
    assert_eq!(ascii_code, code, "{with_ascii:?}: {err}");
    let odd: Vec<&str> = ascii.lines().filter(|l| !l.is_ascii()).collect();
    assert!(odd.is_empty(), "{with_ascii:?}: not ASCII: {odd:#?}");
    let widths = |text: &str| text.lines().map(|l| l.width()).collect::<Vec<_>>();
    assert_eq!(widths(&ascii), widths(&plain), "{with_ascii:?}");
    plain
}

/// `../shared/snapshots/NAME`, or None with a note when it is absent (the
/// test then skips).
pub fn shared_snapshot(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/snapshots")
        .join(name);
    if p.exists() {
        Some(p)
    } else {
        skip::skip(
            &format!("a check on the shared snapshot {name}"),
            &format!("{} not found (../shared is absent)", p.display()),
            skip::Prerequisite::ProvidedByCi,
        );
        None
    }
}

/// The viewer opened on the shared snapshot `name`, or None (skip) when it
/// is absent.
pub fn shared_viewer(name: &str) -> Option<ViewerState> {
    let p = shared_snapshot(name)?;
    let snapshot = read_snapshot_file(&p).expect("shared snapshot loads");
    Some(ViewerState::new(name.to_string(), snapshot))
}

/// `../shared/snapshots`, or None with a note when it is absent (the
/// checks against real snapshots then skip).
pub fn shared_snapshots_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots");
    if dir.is_dir() {
        Some(dir)
    } else {
        skip::skip(
            "the checks against real snapshots",
            &format!("{} is absent", dir.display()),
            skip::Prerequisite::ProvidedByCi,
        );
        None
    }
}

/// Every snapshot file (`.pickle` / `.pkl`) in `dir` as (file name, path),
/// sorted by name.
pub fn snapshot_files_in(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("pickle" | "pkl")
            )
        })
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                path,
            )
        })
        .collect();
    files.sort();
    files
}

/// Bytes in allocated blocks over `segments`, summed here block by block so
/// that a test does not take the figure from the code it checks.
pub fn allocated_in(segments: &[vramtop::snapshot::Segment]) -> u64 {
    segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == vramtop::alloc::BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum()
}

/// Asserts that `error` (what `what` said) is one line of at most
/// `max_bytes`: how every refusal of input reads.
pub fn assert_one_line(
    what: &str,
    error: &str,
    max_bytes: usize,
) -> Result<(), proptest::test_runner::TestCaseError> {
    proptest::prop_assert!(!error.contains('\n'), "{what}: more than one line: {error}");
    proptest::prop_assert!(error.len() <= max_bytes, "{what}: {} bytes", error.len());
    Ok(())
}

/// `bytes`, a written snapshot, with its one `from` string (an action name
/// the writer wrote once and refers back to) renamed `to`, of the same
/// length: how a newer PyTorch's action this reader does not know is made
/// (the writer writes only known actions).
pub fn renamed_action(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(
        from.len(),
        to.len(),
        "a same-length name keeps the pickle whole"
    );
    let at: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{from:?} written once");
    let mut out = bytes.to_vec();
    out[at[0]..at[0] + to.len()].copy_from_slice(to.as_bytes());
    out
}

/// `snapshot` with every traceback emptied: what a read that skips the
/// stacks must give, field for field.
pub fn without_stacks(mut snapshot: vramtop::snapshot::Snapshot) -> vramtop::snapshot::Snapshot {
    let empty: vramtop::snapshot::Frames = std::sync::Arc::from(Vec::new());
    for segment in &mut snapshot.segments {
        segment.frames = empty.clone();
        for block in &mut segment.blocks {
            block.frames = empty.clone();
        }
    }
    for entry in snapshot.device_traces.iter_mut().flatten() {
        entry.frames = empty.clone();
    }
    snapshot
}
