//! Live attach end to end: a fake probe written here (a Unix socket server
//! that speaks protocol v1) in a private `$XDG_RUNTIME_DIR`, and
//! `vramtop --once --json` run with that directory's `vramtop` folder as
//! `VRAMTOP_PROBE_DIR` (so that no probe running on the machine is met;
//! the tests of the default folders say so), must list the probe
//! with the pid the kernel gives for the socket's peer (this test process)
//! and put its allocator figures on the GPU. When `python3` and
//! `python/vramtop_probe` are both here, the real probe (with the stand-in
//! torch) is attached the same way.

mod common;

use common::skip::{Prerequisite, skip};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A private runtime dir with the `vramtop` subdirectory (mode 0700).
fn runtime_dir() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("vramtop");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    (root, dir)
}

/// Serves `lines` to every client, then holds the connection until the
/// client hangs up (as a probe does).
fn fake_probe(path: &Path, lines: Vec<String>) {
    let listener = UnixListener::bind(path).expect("bind the fake probe");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in &lines {
                    if conn.write_all(l.as_bytes()).is_err() {
                        return;
                    }
                }
                let mut sink = [0u8; 64];
                while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
}

fn hello(pid: u32) -> String {
    format!(
        "{{\"v\":1,\"type\":\"hello\",\"pid\":{pid},\"host\":\"node7\",\"argv\":[\"train.py\",\"--lr\",\"3e-4\"],\"torch\":\"2.5.1\",\"devices\":[0],\"stats_interval_s\":1.0,\"segments_interval_s\":5.0,\"time\":1764489600.1}}\n"
    )
}

fn stats() -> String {
    let s = serde_json::json!({
        "v": 1, "type": "stats", "time": 1764489600.2, "device": 0,
        "stats": {
            "allocated_bytes.all.current": GIB,
            "reserved_bytes.all.current": 3 * GIB / 2,
            "active_bytes.all.current": GIB + 127 * MIB,
            "segment.all.current": 3,
            "num_ooms": 1,
            "num_alloc_retries": 2,
            "max_split_size": -1,
        }
    });
    format!("{s}\n")
}

fn segments() -> String {
    let s = serde_json::json!({
        "v": 1, "type": "segments", "time": 1764489600.3, "device": 0,
        "segments": [
            {"address": 0x7f00_0000_0000u64, "total_size": GIB, "stream": 0, "segment_type": "large",
             "allocated_size": 768 * MIB, "active_size": 768 * MIB, "requested_size": 768 * MIB,
             "is_expandable": false,
             "blocks": [[768 * MIB, 768 * MIB, "active_allocated"], [256 * MIB, 0, "inactive"]]},
            {"address": 0x7f00_4000_0000u64, "total_size": 510 * MIB, "stream": 0, "segment_type": "large",
             "allocated_size": 255 * MIB, "active_size": 382 * MIB, "requested_size": 255 * MIB,
             "blocks": [[255 * MIB, 255 * MIB, "active_allocated"], [127 * MIB, 127 * MIB, "active_pending_free"], [128 * MIB, 0, "inactive"]]},
            {"address": 0x7f00_8000_0000u64, "total_size": 2 * MIB, "stream": 0, "segment_type": "small",
             "blocks": [[MIB, 1000 * 1024, "active_allocated"], [MIB, 0, "inactive"]]}
        ]
    });
    format!("{s}\n")
}

const OOM: &str = "{\"v\":1,\"type\":\"oom\",\"time\":1764489600.4,\"device\":0,\"alloc_bytes\":4294967296,\"device_allocated\":1073741824,\"device_free\":0,\"message\":\"tried to allocate 4.00 GiB on cuda:0\"}\n";

/// `vramtop --backend sim --sim-gpus 1 --once --json` with `runtime` as
/// `$XDG_RUNTIME_DIR`; the parsed output.
fn once_json(runtime: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(["--backend", "sim", "--sim-gpus", "1", "--once", "--json"])
        .env("XDG_RUNTIME_DIR", runtime)
        .env(common::PROBE_DIR_ENV, runtime.join("vramtop"))
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vramtop failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The probe entry whose socket is `path`.
fn probe_at<'a>(sample: &'a Value, path: &Path) -> &'a Value {
    let want = path.display().to_string();
    sample["probes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["socket"] == want.as_str()))
        .unwrap_or_else(|| panic!("no probe at {want} in {sample:#}"))
}

#[test]
fn once_json_shows_a_fake_probes_allocator_on_its_gpu_under_the_host_pid() {
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    // The OOM (and the fresh stats a probe sends after one) comes before
    // the first segments: `--once` samples as soon as each listed device
    // has stats and segments, so a line after those may not be read yet.
    fake_probe(
        &path,
        vec![hello(4242), stats(), OOM.to_string(), stats(), segments()],
    );
    let sample = once_json(root.path());
    let p = probe_at(&sample, &path);
    assert_eq!(p["status"], "attached", "{p:#}");
    // The fake probe is this process: SO_PEERCRED says so, whatever the
    // hello claims.
    assert_eq!(p["pid"], std::process::id());
    assert_eq!(p["probe_pid"], 4242);
    assert_eq!(p["pid_source"], "peer_cred");
    assert_eq!(p["command"], "train.py --lr 3e-4");
    let a = &p["devices"][0]["allocator"];
    assert_eq!(p["devices"][0]["gpu"], 0);
    assert_eq!(a["allocated"], GIB);
    assert_eq!(a["reserved"], 3 * GIB / 2);
    assert_eq!(a["segments"], 3);
    assert_eq!(a["num_alloc_retries"], 2);
    // 256 + 128 MiB large and 1 MiB small free blocks, from the segments.
    assert_eq!(a["fragmentation"]["external_free"], 385 * MIB);
    assert_eq!(p["oom_total"], 1);
    assert_eq!(
        p["ooms"][0]["message"],
        "tried to allocate 4.00 GiB on cuda:0"
    );
    // The GPU's allocator is the probe's, not the simulated trainer's.
    let gpu = &sample["gpus"][0]["allocator"];
    assert_eq!(gpu["pid"], std::process::id(), "{gpu:#}");
    assert_eq!(gpu["allocated"], GIB);
    assert!(
        gpu["source"].as_str().is_some_and(|s| s.contains("probe")),
        "{gpu:#}"
    );
}

#[test]
fn once_says_how_much_older_the_segments_are_than_the_stats_as_the_pane_does() {
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    // The segments at t, the stats 4.5 s later: the fragmentation is of
    // the allocator 4.5 s before the allocated and reserved beside it.
    let later = stats().replace("1764489600.2", "1764489604.8");
    assert_ne!(later, stats());
    fake_probe(&path, vec![hello(4242), segments(), later]);
    let sample = once_json(root.path());
    let a = &probe_at(&sample, &path)["devices"][0]["allocator"];
    let age = a["segments_age_s"].as_f64().expect("an age");
    assert!((age - 4.5).abs() < 0.01, "{a:#}");
    assert_eq!(a["segments_received"], true, "{a:#}");
    assert_eq!(
        sample["gpus"][0]["allocator"]["segments_age_s"],
        a["segments_age_s"]
    );

    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(["--backend", "sim", "--sim-gpus", "1", "--once"])
        .env("XDG_RUNTIME_DIR", root.path())
        .env(common::PROBE_DIR_ENV, root.path().join("vramtop"))
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("; segments 4 s old)"), "{text}");

    // Stats and segments of one moment: 0, and nothing said.
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    fake_probe(&path, vec![hello(4242), segments(), stats()]);
    let sample = once_json(root.path());
    let a = &probe_at(&sample, &path)["devices"][0]["allocator"];
    assert_eq!(a["segments_age_s"], 0.0, "{a:#}");
}

#[test]
fn once_json_reports_a_version_3_probe_and_a_garbage_line_without_failing() {
    let (root, dir) = runtime_dir();
    let v2 = dir.join("1.sock");
    let noisy = dir.join("2.sock");
    fake_probe(
        &v2,
        vec!["{\"v\":3,\"type\":\"hello\",\"pid\":1}\n".to_string()],
    );
    fake_probe(
        &noisy,
        vec![
            hello(2),
            "this is not JSON\n".to_string(),
            stats(),
            segments(),
        ],
    );
    let sample = once_json(root.path());
    assert_eq!(
        probe_at(&sample, &v2)["status"],
        "rejected: protocol version 3 not supported"
    );
    let p = probe_at(&sample, &noisy);
    assert_eq!(p["status"], "attached");
    assert!(
        p["problem"]
            .as_str()
            .is_some_and(|s| s.starts_with("line 2: not JSON")),
        "{p:#}"
    );
    assert_eq!(
        p["devices"][0]["allocator"]["allocated"], GIB,
        "later lines still count"
    );
}

#[test]
fn once_json_skips_a_world_writable_probe_directory() {
    let (root, dir) = runtime_dir();
    let path = dir.join("7.sock");
    fake_probe(&path, vec![hello(7), stats(), segments()]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let sample = once_json(root.path());
    let listed = sample["probes"].as_array().is_some_and(|ps| {
        ps.iter()
            .any(|p| p["socket"] == path.display().to_string().as_str())
    });
    assert!(!listed, "{sample:#}");
    let skipped = sample["probes_skipped"].to_string();
    assert!(skipped.contains("group- or world-writable"), "{skipped}");
}

#[test]
fn the_python_probe_with_the_stand_in_torch_is_attached() {
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !crate_root.join("python/vramtop_probe").is_dir() {
        skip(
            "the_python_probe_with_the_stand_in_torch_is_attached",
            "python/vramtop_probe is not in this tree",
            Prerequisite::ProvidedByCi,
        );
        return;
    }
    let python = std::env::var("VRAMTOP_PYTHON").unwrap_or_else(|_| "python3".to_string());
    if Command::new(&python).arg("--version").output().is_err() {
        skip(
            "the_python_probe_with_the_stand_in_torch_is_attached",
            &format!("{python} cannot be run"),
            Prerequisite::ProvidedByCi,
        );
        return;
    }
    let (root, dir) = runtime_dir();
    let script = root.path().join("train.py");
    let ready = root.path().join("torch-imported");
    // The probe reports a device only once torch is imported and CUDA
    // initialised (the stand-in is initialised on import): the script says
    // when, so vramtop does not connect before and see no device.
    std::fs::write(
        &script,
        format!(
            "import time\nimport torch\nopen({:?}, 'w').close()\ntime.sleep(20)\n",
            ready.display().to_string()
        ),
    )
    .expect("write the script");
    let mut child = Command::new(&python)
        .args(["-m", "vramtop_probe"])
        .arg(&script)
        .current_dir(crate_root)
        .env("PYTHONPATH", "python:python/tests/stand_in")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("XDG_RUNTIME_DIR", root.path())
        // The probe's own default folder under the private runtime dir
        // (the one vramtop is pointed at), whatever the caller's shell set.
        .env_remove(common::PROBE_DIR_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let path = dir.join(format!("{}.sock", child.id()));
    // Wait for the probe to listen and torch to be imported (bounded; the
    // assertion below decides).
    for _ in 0..400 {
        if path.exists() && ready.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let sample = if path.exists() && ready.exists() {
        Some(once_json(root.path()))
    } else {
        None
    };
    let _ = child.kill();
    let out = child.wait_with_output().expect("python ends");
    let Some(sample) = sample else {
        panic!(
            "the probe never listened on {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = probe_at(&sample, &path);
    assert_eq!(p["status"], "attached", "{p:#}");
    assert_eq!(p["pid"], out_pid(&path));
    let devices = p["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1, "{p:#}");
    let a = &devices[0]["allocator"];
    assert_eq!(a["allocated"], GIB, "{a:#}");
    assert_eq!(a["reserved"], 3 * GIB / 2, "{a:#}");
    assert_eq!(a["segments"], 3, "{a:#}");
}

/// The pid in a socket's file name.
fn out_pid(path: &Path) -> u32 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("<pid>.sock")
}

/// The login name the probe uses for `/tmp/vramtop-<user>`: the passwd
/// name of the effective uid, else the number (as `id` prints them).
fn login_name() -> String {
    let id = |flag: &str| {
        Command::new("id")
            .arg(flag)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    id("-un").or_else(|| id("-u")).expect("`id` names the user")
}

#[test]
fn once_json_finds_a_probe_in_the_tmp_fallback_whether_or_not_tmpdir_is_set() {
    // Without XDG_RUNTIME_DIR the probe listens in /tmp/vramtop-<user>
    // whatever TMPDIR says (schedulers such as SLURM set TMPDIR per job).
    // A test of the default folders: vramtop scans the real one (no
    // VRAMTOP_PROBE_DIR), and only this test's own socket is asserted, so
    // other probes of the user's there change nothing.
    let dir = PathBuf::from(format!("/tmp/vramtop-{}", login_name()));
    if !dir.exists() {
        std::fs::create_dir(&dir).expect("mkdir the fallback directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let path = dir.join(format!("{}-tmpdir-test.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    fake_probe(&path, vec![hello(31), stats(), segments()]);
    let job_tmp = tempfile::tempdir().expect("temp dir");
    for tmpdir in [Some(job_tmp.path()), None] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtop"));
        cmd.args(["--backend", "sim", "--sim-gpus", "1", "--once", "--json"])
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove(common::PROBE_DIR_ENV);
        match tmpdir {
            Some(t) => cmd.env("TMPDIR", t),
            None => cmd.env_remove("TMPDIR"),
        };
        let out = cmd.output().expect("the binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        let sample: Value = serde_json::from_str(&stdout).expect("JSON");
        let p = probe_at(&sample, &path);
        assert_eq!(p["status"], "attached", "TMPDIR {tmpdir:?}: {p:#}");
    }
    let _ = std::fs::remove_file(&path);
}

/// The sockets `sample` lists.
fn sockets(sample: &Value) -> Vec<String> {
    sample["probes"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["socket"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn vramtop_probe_dir_replaces_the_default_dirs_for_once_and_doctor() {
    // A probe in the default /tmp/vramtop-<user> (this test's own socket)
    // and one in the override folder: with VRAMTOP_PROBE_DIR set only the
    // second is seen, without it only the first (the premise).
    let default_dir = PathBuf::from(format!("/tmp/vramtop-{}", login_name()));
    if !default_dir.exists() {
        std::fs::create_dir(&default_dir).expect("mkdir the fallback directory");
        std::fs::set_permissions(&default_dir, std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
    }
    let in_default = default_dir.join(format!("{}-override-test.sock", std::process::id()));
    let _ = std::fs::remove_file(&in_default);
    fake_probe(&in_default, vec![hello(41), stats(), segments()]);
    let (_root, chosen) = runtime_dir();
    let in_chosen = chosen.join("4343.sock");
    fake_probe(&in_chosen, vec![hello(4343), stats(), segments()]);

    let once = |probe_dir: Option<&Path>| -> Value {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtop"));
        cmd.args(["--backend", "sim", "--sim-gpus", "1", "--once", "--json"])
            .env_remove("XDG_RUNTIME_DIR");
        match probe_dir {
            Some(d) => cmd.env(common::PROBE_DIR_ENV, d),
            None => cmd.env_remove(common::PROBE_DIR_ENV),
        };
        let out = cmd.output().expect("the binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        serde_json::from_str(&stdout).expect("JSON")
    };
    let with = once(Some(&chosen));
    assert_eq!(
        sockets(&with),
        vec![in_chosen.display().to_string()],
        "{with:#}"
    );
    assert_eq!(probe_at(&with, &in_chosen)["status"], "attached");
    // Set but empty: the defaults, as unset.
    for unset in [None, Some(Path::new(""))] {
        let without = once(unset);
        let seen = sockets(&without);
        assert!(
            seen.contains(&in_default.display().to_string()),
            "{unset:?}: {without:#}"
        );
        assert!(
            !seen.contains(&in_chosen.display().to_string()),
            "{unset:?}: {without:#}"
        );
    }

    // doctor says where it looked and where that came from.
    let (empty_root, empty) = runtime_dir();
    let doctor = |json: bool| {
        let mut args = vec!["doctor", "--backend", "sim"];
        if json {
            args.push("--json");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
            .args(&args)
            .env("XDG_CONFIG_HOME", empty_root.path())
            .env(common::PROBE_DIR_ENV, &empty)
            .output()
            .expect("the binary runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report: Value = serde_json::from_str(&doctor(true)).expect("JSON");
    assert_eq!(
        report["probe_dirs"],
        serde_json::json!([empty.display().to_string()])
    );
    assert_eq!(report["probe_dirs_source"], "VRAMTOP_PROBE_DIR");
    let text = doctor(false);
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!(
            "none found (looked in {} (from VRAMTOP_PROBE_DIR))",
            empty.display()
        )),
        "{text}"
    );
    let _ = std::fs::remove_file(&in_default);
}

#[test]
fn once_json_keeps_an_old_pytorchs_segments_with_null_requested_sizes() {
    // PyTorch < 2.1 reports no requested sizes: the probe sends null. The
    // 1 GiB cached-but-free block must still count.
    let (root, dir) = runtime_dir();
    let path = dir.join("21.sock");
    let old = serde_json::json!({
        "v": 1, "type": "segments", "device": 0,
        "segments": [{"address": 0x7f00_0000_0000u64, "total_size": 2 * GIB, "stream": 0,
            "segment_type": "large", "allocated_size": GIB, "active_size": GIB,
            "requested_size": null, "is_expandable": false,
            "blocks": [[GIB, null, "active_allocated"], [GIB, null, "inactive"]]}]
    });
    let nan_stat = serde_json::json!({
        "v": 1, "type": "stats", "device": 0,
        "stats": {"allocated_bytes.all.current": GIB, "reserved_bytes.all.current": 2 * GIB,
                  "requested_bytes.all.current": null, "num_ooms": null}
    });
    fake_probe(
        &path,
        vec![hello(21), format!("{nan_stat}\n"), format!("{old}\n")],
    );
    let sample = once_json(root.path());
    let p = probe_at(&sample, &path);
    assert_eq!(p["problem"], Value::Null, "{p:#}");
    let a = &p["devices"][0]["allocator"];
    assert_eq!(a["fragmentation"]["external_free"], GIB, "{a:#}");
    assert_eq!(a["fragmentation"]["free_blocks"], 1, "{a:#}");
    assert_eq!(a["reserved"], 2 * GIB);
    let unknown: Vec<&str> = a["unknown"]
        .as_array()
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        unknown,
        vec!["num_ooms", "requested_bytes.all.current", "requested_size"],
        "{a:#}"
    );
    // An unknown count is null (n/a), never 0.
    assert_eq!(a["num_ooms"], Value::Null, "{a:#}");
    assert_eq!(a["num_alloc_retries"], 0, "absent is PyTorch's 0");
}

#[test]
fn once_json_flags_figures_that_cannot_be_true_on_this_machine() {
    let (root, dir) = runtime_dir();
    let path = dir.join("22.sock");
    let line = |device: u32, allocated: u64, reserved: u64| {
        let s = serde_json::json!({
            "v": 1, "type": "stats", "device": device,
            "stats": {"allocated_bytes.all.current": allocated,
                      "reserved_bytes.all.current": reserved}
        });
        format!("{s}\n")
    };
    let hello2 = hello(22).replace("\"devices\":[0]", "\"devices\":[0,3]");
    let empty = |device: u32| {
        format!("{{\"v\":1,\"type\":\"segments\",\"device\":{device},\"segments\":[]}}\n")
    };
    // The simulated GPU has 80 GiB; there is no GPU 3.
    fake_probe(
        &path,
        vec![
            hello2,
            line(0, GIB, 100 * GIB),
            empty(0),
            line(3, 1, 1),
            empty(3),
        ],
    );
    let sample = once_json(root.path());
    let p = probe_at(&sample, &path);
    let devices = p["devices"].as_array().expect("devices");
    let invalid = |d: u64| {
        devices
            .iter()
            .find(|x| x["device"] == d)
            .map(|x| x["invalid"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(invalid(0).contains("more than GPU 0's"), "{p:#}");
    assert!(invalid(3).contains("does not have"), "{p:#}");
    assert!(devices.iter().all(|d| d["allocator"].is_null()), "{p:#}");
    // The GPU does not show the impossible figures (another test's probe
    // in /tmp may be shown: only this one's namespace pid is excluded).
    let gpu = &sample["gpus"][0]["allocator"];
    assert!(
        !gpu["source"]
            .as_str()
            .unwrap_or_default()
            .contains("pid 22 in its namespace"),
        "{gpu:#}"
    );
}

#[test]
fn once_json_lists_a_v2_probes_oom_with_its_snapshot_path() {
    let (root, dir) = runtime_dir();
    let path = dir.join("31.sock");
    let hello = hello(31).replace("\"v\":1", "\"v\":2");
    let snaps = tempfile::tempdir().expect("temp dir");
    let file = snaps
        .path()
        .join("node7-31-rank0-20261201T120002Z-oom.pickle");
    // PROTO 4, EMPTY_DICT, STOP: a pickle, as the probe's files are.
    std::fs::write(&file, b"\x80\x04}.").expect("write");
    let oom = serde_json::json!({
        "v": 2, "type": "oom", "time": 1764489600.4, "device": 0,
        "alloc_bytes": 4 * GIB, "device_allocated": GIB, "device_free": 0,
        "message": "tried to allocate 4.00 GiB on cuda:0",
        "snapshot": file, "snapshot_error": null,
    });
    let without = serde_json::json!({
        "v": 2, "type": "oom", "device": 0, "message": "again",
        "snapshot": null, "snapshot_error": "disk full",
    });
    let elsewhere = serde_json::json!({
        "v": 2, "type": "oom", "device": 0, "message": "a third",
        "snapshot": "/etc/passwd", "snapshot_error": null,
    });
    fake_probe(
        &path,
        vec![
            hello,
            stats(),
            format!("{oom}\n"),
            format!("{without}\n"),
            format!("{elsewhere}\n"),
            stats(),
            segments(),
        ],
    );
    let sample = once_json(root.path());
    let ooms = sample["ooms"].as_array().cloned().unwrap_or_default();
    assert_eq!(ooms.len(), 3, "{sample:#}");
    assert_eq!(ooms[0]["pid"], std::process::id());
    assert_eq!(ooms[0]["gpu"], 0);
    assert_eq!(ooms[0]["device"], 0);
    assert_eq!(ooms[0]["alloc_bytes"], 4 * GIB);
    assert_eq!(ooms[0]["time"], 1764489600.4);
    assert_eq!(ooms[0]["message"], "tried to allocate 4.00 GiB on cuda:0");
    assert_eq!(ooms[0]["snapshot"], file.display().to_string());
    assert_eq!(ooms[1]["snapshot"], Value::Null, "no snapshot is null");
    assert_eq!(ooms[1]["snapshot_error"], "disk full");
    assert_eq!(
        ooms[2]["snapshot"],
        Value::Null,
        "a file the probe could not have written is not offered"
    );
    let why = ooms[2]["snapshot_error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("the probe named /etc/passwd as its snapshot, which vramtop does not open"),
        "{why}"
    );
}

/// `stats()` with PyTorch's own peaks: 216 MiB allocated, 2 GiB reserved.
fn stats_with_peaks() -> String {
    let mut s: Value = serde_json::from_str(stats().trim_end()).expect("stats() is JSON");
    s["stats"]["allocated_bytes.all.peak"] = (GIB + 216 * MIB).into();
    s["stats"]["reserved_bytes.all.peak"] = (2 * GIB).into();
    format!("{s}\n")
}

/// vramtop with `runtime` as `$XDG_RUNTIME_DIR`: its stdout.
fn vramtop_out(runtime: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env(common::PROBE_DIR_ENV, runtime.join("vramtop"))
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "vramtop {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn once_json_and_text_give_pytorchs_own_peak_beside_the_sampled_figures() {
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    fake_probe(&path, vec![hello(4242), stats_with_peaks(), segments()]);
    let sample = once_json(root.path());
    let a = &probe_at(&sample, &path)["devices"][0]["allocator"];
    assert_eq!(a["allocated"], GIB, "the sample: {a:#}");
    assert_eq!(a["torch_peak"]["allocated"], GIB + 216 * MIB, "{a:#}");
    assert_eq!(a["torch_peak"]["reserved"], 2 * GIB, "{a:#}");
    assert_eq!(
        a["torch_peak"]["since"],
        "the process started or its last reset_peak_memory_stats()"
    );
    assert_eq!(
        sample["gpus"][0]["allocator"]["torch_peak"],
        a["torch_peak"]
    );
    let text = vramtop_out(
        root.path(),
        &["--backend", "sim", "--sim-gpus", "1", "--once"],
    );
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("PyTorch's own peak: allocated 1.21 GiB, reserved 2.00 GiB (since the"),
        "{text}"
    );

    // A probe that sends no peaks (the other tests' stats()) gets none,
    // and the simulated trainers never have one.
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    fake_probe(&path, vec![hello(4242), stats(), segments()]);
    let sample = once_json(root.path());
    let a = &probe_at(&sample, &path)["devices"][0]["allocator"];
    assert!(a.get("torch_peak").is_none(), "{a:#}");
    let trainers: Vec<&Value> = sample["gpus"][0]["allocators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            a["source"]
                .as_str()
                .is_some_and(|s| s.contains("simulated"))
        })
        .collect();
    assert!(!trainers.is_empty(), "{sample:#}");
    assert!(
        trainers.iter().all(|a| a.get("torch_peak").is_none()),
        "{sample:#}"
    );
}

#[test]
fn doctor_lists_the_probe_in_once_s_words_and_counts_its_memory_as_once_does() {
    let (root, dir) = runtime_dir();
    let path = dir.join("4242.sock");
    fake_probe(&path, vec![hello(4242), stats(), segments()]);
    let args = ["--backend", "sim", "--sim-gpus", "1"];
    let once = once_json(root.path());
    let doctor: Value = serde_json::from_str(&vramtop_out(
        root.path(),
        &[&["doctor", "--json"][..], &args[..]].concat(),
    ))
    .expect("doctor --json is JSON");
    assert_eq!(
        doctor["gpus"][0]["memory_used"], once["gpus"][0]["memory_used"],
        "doctor's used memory is --once's, the probe's included: {doctor:#}"
    );
    let probe = &doctor["probes"][0];
    assert_eq!(probe["pid"], std::process::id(), "{doctor:#}");
    assert_eq!(probe["status"], "attached");
    assert_eq!(probe["devices"][0]["gpu"], 0);
    // The probed process is real: its libraries are looked for.
    let row = doctor["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == std::process::id()))
        .unwrap_or_else(|| panic!("the probed process is listed: {doctor:#}"));
    assert_eq!(row["simulated"], false, "{row:#}");

    let text = vramtop_out(root.path(), &[&["doctor"][..], &args[..]].concat());
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // The probe in `--once`'s words: one wording for one fact.
    let head = format!("pid {}, attached, train.py --lr 3e-4", std::process::id());
    assert!(
        flat.contains(&format!("Probes - {head}: GPU 0 (cuda:0); socket")),
        "{text}"
    );
    let once_text = vramtop_out(root.path(), &[&["--once"][..], &args[..]].concat());
    let once_flat = once_text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        once_flat.contains(&format!("probe: {head} GPU 0: ")),
        "{once_text}"
    );
    // Where it looked, and why there only, with a probe found too.
    assert!(
        flat.contains(&format!(
            "looked in {} (from VRAMTOP_PROBE_DIR)",
            dir.display()
        )),
        "{text}"
    );
    for l in text.lines() {
        assert!(l.chars().count() <= 80, "{l}");
    }
}
