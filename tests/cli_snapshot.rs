//! `vramtop snapshot PID` against a fake probe written here: a Unix socket
//! server in a private `$XDG_RUNTIME_DIR` (vramtop is pointed at its
//! `vramtop` folder alone with `VRAMTOP_PROBE_DIR`, so no probe running on
//! the machine is met) that speaks protocol v2 and, when
//! asked, writes a real snapshot (the crate's writer) into a folder of its
//! own and names it in `snapshot_done`, as `vramtop_probe` does. The socket
//! is named for this test process, which is also its peer (SO_PEERCRED).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
use vramtop::app::stress::StressCommand;
use vramtop::app::stress_worker::StressExecutor;
use vramtop::snapshot::{Snapshot, write_snapshot_file};

const MIB: u64 = 1 << 20;

/// What the fake probe does with a request.
#[derive(Clone)]
enum Answer {
    /// Writes `snapshot` to `file` and says so.
    Write {
        snapshot: Box<Snapshot>,
        file: PathBuf,
    },
    /// Says `path` is written, `bytes` long, whatever is there.
    Claim {
        path: PathBuf,
        bytes: u64,
    },
    Fail(&'static str),
    /// Reads the request and says nothing.
    Silent,
    /// Acknowledges the request (`snapshot_started`) and says nothing more.
    StartedOnly,
    /// As [`Answer::StartedOnly`], its `snapshot_started` naming the
    /// folder the file goes into, as `vramtop_probe` does.
    StartedIn(PathBuf),
}

/// A private runtime dir with the `vramtop` subdirectory (mode 0700).
fn runtime_dir() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("vramtop");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    (root, dir)
}

fn hello(version: u32) -> String {
    format!(
        "{{\"v\":{version},\"type\":\"hello\",\"pid\":{},\"argv\":[\"train.py\"],\"devices\":[0],\"rank\":0,\"local_rank\":0,\"world_size\":1,\"record_history\":100000,\"capabilities\":[\"snapshot\"]}}\n",
        std::process::id()
    )
}

/// Serves every client: the hello, a stats line, then the answer to the
/// first request line.
fn fake_probe(dir: &Path, version: u32, answer: Answer) {
    let socket = dir.join(format!("{}.sock", std::process::id()));
    let listener = UnixListener::bind(socket).expect("bind the fake probe");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let hello = hello(version);
                let stats = "{\"v\":2,\"type\":\"stats\",\"device\":0,\"stats\":{}}\n";
                if conn.write_all(hello.as_bytes()).is_err()
                    || conn.write_all(stats.as_bytes()).is_err()
                {
                    return;
                }
                let Ok(read_half) = conn.try_clone() else {
                    return;
                };
                let mut line = String::new();
                if BufReader::new(read_half).read_line(&mut line).is_err() || line.is_empty() {
                    return;
                }
                let Ok(request) = serde_json::from_str::<serde_json::Value>(line.trim_end()) else {
                    return;
                };
                let id = request["id"].as_str().unwrap_or_default().to_string();
                let started = match &answer {
                    Answer::StartedIn(dir) => format!(
                        "{}\n",
                        serde_json::json!({
                            "v": 2, "type": "snapshot_started", "id": id, "dir": dir,
                        })
                    ),
                    _ => format!("{{\"v\":2,\"type\":\"snapshot_started\",\"id\":\"{id}\"}}\n"),
                };
                let reply = match &answer {
                    Answer::Write { snapshot, file } => {
                        let bytes = write_snapshot_file(snapshot, file).expect("write");
                        let traced = snapshot.device_traces.iter().any(|t| !t.is_empty());
                        let entries: usize = snapshot.device_traces.iter().map(Vec::len).sum();
                        serde_json::json!({
                            "v": 2, "type": "snapshot_done", "id": id, "time": 1.0,
                            "path": file, "bytes": bytes, "has_trace": traced,
                            "trace_entries": entries, "segments": snapshot.segments.len(),
                        })
                        .to_string()
                    }
                    Answer::Claim { path, bytes } => serde_json::json!({
                        "v": 2, "type": "snapshot_done", "id": id, "time": 1.0,
                        "path": path, "bytes": bytes, "has_trace": true,
                        "trace_entries": 1, "segments": 1,
                    })
                    .to_string(),
                    Answer::Fail(reason) => serde_json::json!({
                        "v": 2, "type": "snapshot_failed", "id": id, "reason": reason,
                    })
                    .to_string(),
                    Answer::Silent | Answer::StartedOnly | Answer::StartedIn(_) => String::new(),
                };
                if !matches!(answer, Answer::Silent) {
                    let _ = conn.write_all(started.as_bytes());
                }
                if !matches!(
                    answer,
                    Answer::Silent | Answer::StartedOnly | Answer::StartedIn(_)
                ) {
                    let _ = conn.write_all(format!("{reply}\n").as_bytes());
                }
                // Hold the connection until the client hangs up.
                let mut sink = String::new();
                let _ = BufReader::new(conn).read_line(&mut sink);
            });
        }
    });
}

/// A small snapshot with a trace: a few allocations, a free, empty_cache.
fn traced_snapshot() -> Snapshot {
    let device = InMemoryDevice::new(256 * MIB);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(device, 0, AllocatorConfig::default()),
        false,
    );
    exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB, 3 * MIB, 30 * MIB, 512],
        cap: None,
    });
    exec.execute(&StressCommand::EmptyCache);
    exec.snapshot()
}

/// The variable that points vramtop at one probe folder.
const PROBE_DIR_ENV: &str = vramtop::probe::discovery::PROBE_DIR_ENV;

fn vramtop(root: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", root)
        .env(PROBE_DIR_ENV, root.join("vramtop"))
        .env("XDG_STATE_HOME", root.join("state"))
        .output()
        .expect("run vramtop")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The bytes the fake probe writes for `snapshot`.
fn probe_bytes(snapshot: &Snapshot) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("same.pickle");
    write_snapshot_file(snapshot, &file).expect("write");
    std::fs::read(&file).expect("read")
}

/// A v2 probe for this process that writes `snapshot` to `file` when
/// asked; the runtime root to run vramtop with, and the pid to ask.
fn probe_writing(snapshot: Snapshot, file: &Path) -> (tempfile::TempDir, String) {
    let (root, dir) = runtime_dir();
    fake_probe(
        &dir,
        2,
        Answer::Write {
            snapshot: Box::new(snapshot),
            file: file.to_path_buf(),
        },
    );
    (root, std::process::id().to_string())
}

#[test]
fn snapshot_copies_the_probes_file_0600_and_it_replays_as_a_full_match() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let written = probe_files
        .path()
        .join("node7-1-rank0-20261201T120000Z-demand.pickle");
    let snapshot = traced_snapshot();
    let expected = probe_bytes(&snapshot);
    let (root, pid) = probe_writing(snapshot, &written);
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--output", "s.pickle"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout).trim_end(), "s.pickle");
    assert!(stderr.contains("asked the probe of"), "{stderr}");
    assert!(stderr.contains("wrote s.pickle ("), "{stderr}");
    assert!(!stderr.contains("segments only"), "{stderr}");
    let copy = cwd.path().join("s.pickle");
    assert_eq!(std::fs::read(&copy).expect("read the copy"), expected);
    let mode = std::fs::metadata(&copy).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        !written.exists(),
        "the probe's file is removed once copied: no second copy is left"
    );
    let replay = vramtop(root.path(), cwd.path(), &["replay", "s.pickle"]);
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    assert!(
        text(&replay.stdout).contains("FULL MATCH"),
        "{}",
        text(&replay.stdout)
    );
    // A second run refuses to overwrite the copy; --force replaces it.
    let again = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--output", "s.pickle"],
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("s.pickle exists: add --force"),
        "{}",
        text(&again.stderr)
    );
    let forced = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--output", "s.pickle", "--force"],
    );
    assert!(forced.status.success(), "{}", text(&forced.stderr));
}

#[test]
fn a_snapshot_without_a_trace_is_written_and_said_to_be_segments_only() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let mut snapshot = traced_snapshot();
    for t in &mut snapshot.device_traces {
        t.clear();
    }
    let written = probe_files.path().join("x-demand.pickle");
    let (root, pid) = probe_writing(snapshot, &written);
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("segments only: no trace (start the probe with --record-history to get one)"),
        "{stderr}"
    );
    // The default name: PID-<UTC time>.pickle in the current folder.
    let name = text(&out.stdout).trim_end().to_string();
    assert!(name.starts_with(&format!("{pid}-")), "{name}");
    assert!(name.ends_with("Z.pickle"), "{name}");
    assert!(cwd.path().join(&name).is_file());
    assert!(
        !written.exists(),
        "the default name is a copy too: one is left"
    );
}

#[test]
fn an_output_in_a_missing_folder_is_refused_before_the_probe_takes_a_snapshot() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let probe_file = probe_files.path().join("taken.pickle");
    let (root, pid) = probe_writing(traced_snapshot(), &probe_file);
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--output", "no/such/folder/s.pickle"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("vramtop: error: cannot write no/such/folder/s.pickle: its folder"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!probe_file.exists(), "the probe was asked for nothing");
}

#[test]
fn an_output_that_is_a_folder_is_refused_before_the_probe_even_with_force() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let probe_file = probe_files.path().join("taken.pickle");
    let (root, pid) = probe_writing(traced_snapshot(), &probe_file);
    let cwd = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(cwd.path().join("adir")).expect("mkdir");
    for args in [
        vec!["snapshot", &pid, "-o", "adir"],
        vec!["snapshot", &pid, "-o", "adir", "--force"],
    ] {
        let out = vramtop(root.path(), cwd.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(
                "vramtop: error: cannot write adir: it is a folder; name a file in it"
            ),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert!(!probe_file.exists(), "the probe was asked for nothing");
}

#[test]
fn output_dash_writes_the_snapshot_to_stdout_and_no_file_named_dash() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let written = probe_files.path().join("x-demand.pickle");
    let snapshot = traced_snapshot();
    let expected = probe_bytes(&snapshot);
    let (root, pid) = probe_writing(snapshot, &written);
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid, "-o", "-"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(out.stdout, expected, "stdout is the snapshot itself");
    assert!(stderr.contains("wrote it to stdout"), "{stderr}");
    assert!(!cwd.path().join("-").exists(), "no file named -");
    assert!(
        !written.exists(),
        "the probe's file is removed once copied: the pipe got the only copy"
    );
}

/// A v2 probe for this process that answers every request with
/// `snapshot_done` naming `path`, `bytes` long.
fn probe_claiming(path: &Path, bytes: u64) -> (tempfile::TempDir, String) {
    let (root, dir) = runtime_dir();
    fake_probe(
        &dir,
        2,
        Answer::Claim {
            path: path.to_path_buf(),
            bytes,
        },
    );
    (root, std::process::id().to_string())
}

#[test]
fn the_bytes_said_are_the_bytes_copied_not_the_probes_claim() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let file = probe_files
        .path()
        .join("node7-1-rank0-20261201T120000Z-demand.pickle");
    let written = write_snapshot_file(&traced_snapshot(), &file).expect("write");
    let (root, pid) = probe_claiming(&file, 5);
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "-o", "s.pickle"],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("wrote s.pickle ({written} bytes, 1 segment")),
        "{stderr}"
    );
    assert!(!stderr.contains("(5 bytes"), "{stderr}");
}

#[test]
fn a_path_the_probe_could_not_have_written_is_refused_and_nothing_is_copied() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let secret = probe_files.path().join("x-demand.pickle");
    std::fs::write(&secret, "root:$6$secret:19000:0:99999:7:::\n").expect("write");
    for (path, why) in [
        (PathBuf::from("/etc/shadow"), "not a probe's snapshot name"),
        (PathBuf::from("/etc/passwd"), "not a probe's snapshot name"),
        (secret.clone(), "it is not a pickle"),
    ] {
        let (root, pid) = probe_claiming(&path, 5);
        let cwd = tempfile::tempdir().expect("temp dir");
        let out = vramtop(
            root.path(),
            cwd.path(),
            &["snapshot", &pid, "-o", "fake.pickle"],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{path:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("vramtop: error: the probe named "),
            "{stderr}"
        );
        assert!(last.contains(why), "{path:?}: {stderr}");
        assert!(!stderr.contains("root:"), "never quoted: {stderr}");
        assert!(!stderr.contains("wrote"), "{stderr}");
        assert!(!cwd.path().join("fake.pickle").exists(), "{path:?}");
        let to_stdout = vramtop(root.path(), cwd.path(), &["snapshot", &pid, "-o", "-"]);
        assert_eq!(to_stdout.status.code(), Some(1), "{path:?}");
        assert!(to_stdout.stdout.is_empty(), "{path:?}: nothing on stdout");
    }
}

#[test]
fn output_dash_into_a_closed_pipe_ends_quietly_with_success() {
    let probe_files = tempfile::tempdir().expect("temp dir");
    let written = probe_files.path().join("x-demand.pickle");
    let (root, pid) = probe_writing(traced_snapshot(), &written);
    let cwd = tempfile::tempdir().expect("temp dir");
    // `vramtop snapshot PID -o - | head -0`: the reader is gone before the
    // first byte is written, so every write meets a closed pipe.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(["snapshot", &pid, "-o", "-"])
        .current_dir(cwd.path())
        .env("XDG_RUNTIME_DIR", root.path())
        .env(PROBE_DIR_ENV, root.path().join("vramtop"))
        .env("XDG_STATE_HOME", root.path().join("state"))
        .stdout(writer)
        .output()
        .expect("run vramtop");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The progress lines come before the copy; no error follows them, and
    // no claim that the snapshot was written.
    assert!(!stderr.contains("error"), "{stderr}");
    assert!(!stderr.contains("wrote it"), "{stderr}");
    // The pipe took none of it: the probe's file, the only whole copy, is
    // kept, and said where.
    assert!(written.exists(), "the probe's file is kept");
    assert!(
        stderr.contains(&format!(
            "vramtop: warning: stdout took only part of the snapshot; the probe's copy is kept: {}",
            written.display()
        )),
        "{stderr}"
    );
}

#[test]
fn no_probe_for_the_pid_is_exit_2_and_says_so_and_where_it_looked() {
    let (root, dir) = runtime_dir();
    let cwd = tempfile::tempdir().expect("temp dir");
    // A running process without a probe: this test.
    let pid = std::process::id().to_string();
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("vramtop: error: no probe found for pid {pid}")),
        "{stderr}"
    );
    assert!(stderr.contains("python -m vramtop_probe"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The one folder looked in, and why only that one.
    assert!(
        stderr.contains(&format!(
            "(looked in {} (from VRAMTOP_PROBE_DIR))",
            dir.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_pid_no_process_has_is_exit_2_and_says_no_process_is_running() {
    if !std::path::Path::new("/proc/self").exists() || !std::path::Path::new("/proc/1").exists() {
        eprintln!("skipped: no /proc to tell a process is running");
        return;
    }
    let (root, _dir) = runtime_dir();
    let cwd = tempfile::tempdir().expect("temp dir");
    // Above Linux's largest pid_max (2^22): no process has it.
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", "999999999", "-o", "x.pickle"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr,
        "vramtop: error: no process 999999999 is running (give the pid as ps shows it here)\n"
    );
    assert!(!cwd.path().join("x.pickle").exists());
}

#[test]
fn a_missing_pid_in_the_simulations_range_is_said_to_be_maybe_simulated_with_what_works() {
    if !std::path::Path::new("/proc/self").exists() || !std::path::Path::new("/proc/1").exists() {
        eprintln!("skipped: no /proc to tell a process is running");
        return;
    }
    // A pid the simulation gives (4242 up) that no process has here.
    let Some(pid) = (4242..14_242u32)
        .rev()
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
    else {
        eprintln!("skipped: every pid of the simulation's range runs here");
        return;
    };
    let (root, _dir) = runtime_dir();
    let cwd = tempfile::tempdir().expect("temp dir");
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid.to_string()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "if {pid} is a row of vramtop's simulated GPU (shown where no NVIDIA driver is \
             found), it is a simulated process with a made-up pid and no probe: in the \
             dashboard, c on its GPU writes its allocator as a snapshot"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("python -m vramtop_probe train.py"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_v1_probe_is_exit_2_and_asked_to_upgrade() {
    let (root, dir) = runtime_dir();
    fake_probe(&dir, 1, Answer::Silent);
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id().to_string();
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "the probe of {pid} speaks protocol v1 (figures only): upgrade vramtop_probe to \
             capture snapshots"
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(cwd.path()).expect("ls").count(), 0);
}

#[test]
fn a_probe_failure_is_exit_1_with_its_reason() {
    let (root, dir) = runtime_dir();
    fake_probe(&dir, 2, Answer::Fail("torch is not imported"));
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id().to_string();
    let out = vramtop(root.path(), cwd.path(), &["snapshot", &pid]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("could not take a snapshot: torch is not imported"),
        "{stderr}"
    );
}

#[test]
fn a_probe_that_does_not_answer_is_exit_1_after_the_timeout() {
    let (root, dir) = runtime_dir();
    fake_probe(&dir, 2, Answer::Silent);
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id().to_string();
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--timeout", "300ms"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no snapshot from the probe of"), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
}

#[test]
fn a_probe_that_acknowledged_but_did_not_finish_says_so_and_asks_for_a_longer_timeout() {
    let (root, dir) = runtime_dir();
    fake_probe(&dir, 2, Answer::StartedOnly);
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id().to_string();
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "--timeout", "300ms"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("is taking it"), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("vramtop: error: "))
        .unwrap_or_default();
    assert!(
        error.contains("within 300ms (the probe acknowledged the request and had not finished")
            && error.ends_with("give it longer with --timeout"),
        "{stderr}"
    );
    assert!(!error.contains("did not answer"), "{stderr}");
    // A probe that did not say its folder: the default one is named.
    assert!(
        error.contains(
            "it may still write into its snapshot folder (~/.local/state/vramtop/snapshots unless"
        ),
        "{stderr}"
    );
}

#[test]
fn a_timeout_after_the_probe_began_names_the_file_it_may_still_write() {
    let (root, dir) = runtime_dir();
    let snapshots = tempfile::tempdir().expect("temp dir");
    fake_probe(&dir, 2, Answer::StartedIn(snapshots.path().to_path_buf()));
    let cwd = tempfile::tempdir().expect("temp dir");
    let pid = std::process::id().to_string();
    let out = vramtop(
        root.path(),
        cwd.path(),
        &["snapshot", &pid, "-o", "step.pickle", "--timeout", "300ms"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("vramtop: error: "))
        .unwrap_or_default();
    // The fake's hello: host absent, so the name's known end only.
    let file = snapshots.path().join("*-demand.pickle");
    assert!(
        error.contains(&format!(
            "; it may still write {}, which is kept: give it longer with --timeout",
            file.display()
        )),
        "{stderr}"
    );
    assert!(!cwd.path().join("step.pickle").exists(), "{stderr}");
}
