//! Capture end to end: a stand-in training run (python/tests/standin_train.py
//! on the stand-in torch) under `python -m vramtop_probe --record-history`,
//! and the vramtop binary asking its probe for a snapshot. The file must
//! replay as a FULL MATCH; an OOM must leave a snapshot of the moment of the
//! failure (its trace ends at the OOM, before the exception freed anything).
//! Skipped (said once) without Python.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::skip::{Prerequisite, skip};
use vramtop::alloc::TraceAction;
use vramtop::snapshot::read_snapshot_file;
use vramtop::snapshot::replay::verify;

/// The Python to run the probe with, when it runs and the probe is here.
fn python(test: &str) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !root.join("python/vramtop_probe").is_dir()
        || !root.join("python/tests/standin_train.py").is_file()
    {
        skip(
            test,
            "python/vramtop_probe or the stand-in run is not in this tree",
            Prerequisite::ProvidedByCi,
        );
        return None;
    }
    let python = std::env::var("VRAMTOP_PYTHON").unwrap_or_else(|_| "python3".to_string());
    if Command::new(&python).arg("--version").output().is_err() {
        skip(
            test,
            &format!("{python} cannot be run"),
            Prerequisite::ProvidedByCi,
        );
        return None;
    }
    Some(python)
}

/// A private `$XDG_RUNTIME_DIR` (its `vramtop` folder 0700) and a snapshot folder.
struct Run {
    root: tempfile::TempDir,
    snapshots: PathBuf,
}

impl Run {
    fn new() -> Run {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("vramtop");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let snapshots = root.path().join("snapshots");
        Run { root, snapshots }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// The stand-in run under the probe with history on, and `args`.
    fn start(&self, python: &str, args: &[&str]) -> Child {
        Command::new(python)
            .args(["-m", "vramtop_probe", "--record-history", "--snapshot-dir"])
            .arg(&self.snapshots)
            .arg("python/tests/standin_train.py")
            .args(["--capacity", "1GiB", "--ready-file"])
            .arg(self.path("ready"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PYTHONPATH", "python:python/tests/stand_in")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("XDG_RUNTIME_DIR", self.root.path())
            // Its default folder under the private runtime dir, whatever
            // the caller's shell set; vramtop is pointed at that folder.
            .env_remove(common::PROBE_DIR_ENV)
            .env("XDG_STATE_HOME", self.path("state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python runs")
    }

    fn vramtop(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_vramtop"))
            .args(args)
            .current_dir(self.root.path())
            .env("XDG_RUNTIME_DIR", self.root.path())
            .env(common::PROBE_DIR_ENV, self.path("vramtop"))
            .env("XDG_STATE_HOME", self.path("state"))
            .output()
            .expect("vramtop runs")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits (bounded) until `ready` holds; the caller's assertion decides.
fn wait_until(ready: impl Fn() -> bool) {
    for _ in 0..600 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_snapshot_of_a_stand_in_run_under_record_history_replays_as_a_full_match() {
    let test = "a_snapshot_of_a_stand_in_run_under_record_history_replays_as_a_full_match";
    let Some(python) = python(test) else { return };
    let run = Run::new();
    let stop = run.path("stop");
    let stop_arg = stop.to_string_lossy().to_string();
    let child = run.start(
        &python,
        &[
            "--steps",
            "0",
            "--step-sleep",
            "0.02",
            "--stop-file",
            &stop_arg,
        ],
    );
    let pid = child.id();
    let socket = run.path("vramtop").join(format!("{pid}.sock"));
    wait_until(|| socket.exists() && run.path("ready").exists());
    let out = run.vramtop(&[
        "snapshot",
        &pid.to_string(),
        "--output",
        "live.pickle",
        "--timeout",
        "60s",
    ]);
    std::fs::write(&stop, b"").expect("write the stop file");
    let ended = child.wait_with_output().expect("python ends");
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "vramtop snapshot failed: {stderr}\nprobe: {}",
        text(&ended.stderr)
    );
    assert!(!stderr.contains("segments only"), "history is on: {stderr}");
    // The probe's own file is gone once copied: one copy, the one asked for.
    let left: Vec<_> = std::fs::read_dir(&run.snapshots)
        .expect("the probe's folder")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in the probe's folder: {left:?}");
    let replay = run.vramtop(&["replay", "live.pickle"]);
    let report = text(&replay.stdout);
    assert!(
        report.contains("FULL MATCH"),
        "{report}{}",
        text(&replay.stderr)
    );
    assert!(replay.status.success());
    let snapshot = read_snapshot_file(&run.path("live.pickle")).expect("a snapshot");
    assert!(
        snapshot.device_traces.iter().any(|t| !t.is_empty()),
        "the trace of the run is in it"
    );
}

#[test]
fn an_oom_writes_a_snapshot_of_the_state_at_the_oom() {
    let test = "an_oom_writes_a_snapshot_of_the_state_at_the_oom";
    let Some(python) = python(test) else { return };
    let run = Run::new();
    let child = run.start(&python, &["--steps", "5", "--oom-at-step", "3"]);
    let ended = child.wait_with_output().expect("python ends");
    assert_eq!(
        ended.status.code(),
        Some(1),
        "the OOM ends the run: {}",
        text(&ended.stderr)
    );
    let oom_files: Vec<PathBuf> = std::fs::read_dir(&run.snapshots)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with("-oom.pickle"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        oom_files.len(),
        1,
        "one OOM snapshot in {}: {}",
        run.snapshots.display(),
        text(&ended.stderr)
    );
    let snapshot = read_snapshot_file(&oom_files[0]).expect("a snapshot");
    let trace = snapshot
        .device_traces
        .iter()
        .find(|t| !t.is_empty())
        .expect("history was on: a trace");
    // Taken inside the OOM observer: nothing the unwinding freed is in it.
    assert_eq!(
        trace.last().map(|e| e.action),
        Some(TraceAction::Oom),
        "the trace ends at the OOM"
    );
    let report = verify(&snapshot);
    assert!(report.full_match(), "{report:?}");
    // The step's live activations (at least two of at least 512 bytes) are
    // still allocated: more than the weights alone (4 MiB, 300 000 B
    // rounded up to 300 032 B, 16 MiB).
    let allocated: u64 = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state.is_active())
        .map(|b| b.size)
        .sum();
    assert!(
        allocated > (20 << 20) + 300_032,
        "{allocated} bytes allocated"
    );
    let replay = run.vramtop(&["replay", &oom_files[0].to_string_lossy()]);
    assert!(
        text(&replay.stdout).contains("FULL MATCH"),
        "{}",
        text(&replay.stdout)
    );
}

#[test]
fn the_dashboard_shows_the_oom_banner_and_capital_o_opens_that_snapshot_at_its_oom() {
    let test = "the_dashboard_shows_the_oom_banner_and_capital_o_opens_that_snapshot_at_its_oom";
    let Some(python) = python(test) else { return };
    let run = Run::new();
    let (stop, oom) = (run.path("stop"), run.path("oom-now"));
    let (stop_arg, oom_arg) = (
        stop.to_string_lossy().to_string(),
        oom.to_string_lossy().to_string(),
    );
    let child = run.start(
        &python,
        &[
            "--steps",
            "0",
            "--step-sleep",
            "0.05",
            "--catch-oom",
            "--stop-file",
            &stop_arg,
            "--oom-file",
            &oom_arg,
        ],
    );
    let pid = child.id();
    let socket = run.path("vramtop").join(format!("{pid}.sock"));
    wait_until(|| socket.exists() && run.path("ready").exists());
    let runtime = run.root.path().to_string_lossy().to_string();
    let probes = run.path("vramtop").to_string_lossy().to_string();
    let state = run.path("state").to_string_lossy().to_string();
    let Some(s) = common::tmux::Session::start_with_env(
        "vramtop-e2e",
        "oom-banner",
        (120, 40),
        &[
            ("XDG_RUNTIME_DIR", &runtime),
            (common::PROBE_DIR_ENV, &probes),
            ("XDG_STATE_HOME", &state),
        ],
        "",
    ) else {
        std::fs::write(&stop, b"").expect("write the stop file");
        let _ = child.wait_with_output();
        return;
    };
    // A probe's OOM reaches the vramtops connected at that moment: ask for an
    // OOM (one per file written) until the dashboard has seen one.
    let banner =
        |sc: &str| sc.contains(&format!("OOM in pid {pid}")) && sc.contains("O opens its snapshot");
    for _ in 0..40 {
        if banner(&s.screen()) {
            break;
        }
        if !oom.exists() {
            std::fs::write(&oom, b"").expect("write the OOM file");
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
    let screen = s.wait_for("the OOM banner", banner);
    assert!(
        screen.contains("snapshots/"),
        "the banner names the file: {screen}"
    );
    s.keys(&["O"]);
    let viewer = s.wait_for("the viewer at the OOM with its sites", |sc| {
        sc.contains(" Sites ") && sc.contains("OOM")
    });
    assert!(
        viewer.contains("oom"),
        "the viewer shows the OOM snapshot: {viewer}"
    );
    s.keys(&["q"]);
    s.wait_for("the live dashboard again", |sc| sc.contains(" GPUs "));
    s.keys(&["q"]);
    s.exited();
    s.assert_restored();
    std::fs::write(&stop, b"").expect("write the stop file");
    let ended = child.wait_with_output().expect("python ends");
    assert!(ended.status.success(), "{}", text(&ended.stderr));
}

/// The sample count on the dashboard's status line ("… │ 42 samples │ …").
fn samples_on(screen: &str) -> Option<u64> {
    screen.lines().rev().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "samples")?;
        words.get(at.checked_sub(1)?)?.parse().ok()
    })
}

#[test]
fn the_dashboard_keeps_sampling_while_the_snapshot_viewer_is_open() {
    let test = "the_dashboard_keeps_sampling_while_the_snapshot_viewer_is_open";
    let Some(python) = python(test) else { return };
    let run = Run::new();
    let stop = run.path("stop");
    let stop_arg = stop.to_string_lossy().to_string();
    let child = run.start(
        &python,
        &[
            "--steps",
            "0",
            "--step-sleep",
            "0.05",
            "--stop-file",
            &stop_arg,
        ],
    );
    let socket = run.path("vramtop").join(format!("{}.sock", child.id()));
    wait_until(|| socket.exists() && run.path("ready").exists());
    let runtime = run.root.path().to_string_lossy().to_string();
    let probes = run.path("vramtop").to_string_lossy().to_string();
    let state = run.path("state").to_string_lossy().to_string();
    let Some(s) = common::tmux::Session::start_with_env(
        "vramtop-e2e",
        "viewer-sampling",
        (80, 24),
        &[
            ("XDG_RUNTIME_DIR", &runtime),
            (common::PROBE_DIR_ENV, &probes),
            ("XDG_STATE_HOME", &state),
        ],
        "--backend sim --interval 250ms",
    ) else {
        std::fs::write(&stop, b"").expect("write the stop file");
        let _ = child.wait_with_output();
        return;
    };
    // Its figures on the GPU: its hello (v2, which takes snapshots) was read.
    // At 80 columns the title's words after "(probe," give way whole.
    s.wait_for("the probe's allocator", |sc| sc.contains("(probe,"));
    s.keys(&["c"]);
    // The whole frame: a screen read while a frame is written may lack it.
    let taken = s.wait_for("the snapshot", |sc| {
        sc.contains("(o opens it)") && samples_on(sc).is_some()
    });
    let before = samples_on(&taken).unwrap_or_default();
    s.keys(&["o"]);
    s.wait_for("the viewer", |sc| sc.contains("q back"));
    // 6 s in the viewer at 4 samples a second: about 24 samples. A loop
    // that stops reading meanwhile gets only what its queues held (the
    // sampler's 4, the bridge's 1 and the loop's 4).
    std::thread::sleep(Duration::from_secs(6));
    s.keys(&["q"]);
    let back = s.wait_for("the live dashboard again", |sc| {
        sc.contains(" GPUs ") && samples_on(sc).is_some()
    });
    let after = samples_on(&back).unwrap_or_default();
    assert!(
        after >= before + 16,
        "{before} samples before the viewer, {after} after 6 s in it:\n{back}"
    );
    s.keys(&["q"]);
    s.exited();
    s.assert_restored();
    std::fs::write(&stop, b"").expect("write the stop file");
    let ended = child.wait_with_output().expect("python ends");
    assert!(ended.status.success(), "{}", text(&ended.stderr));
}
