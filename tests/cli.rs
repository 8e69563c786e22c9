//! The binary as a user runs it: exit codes, messages, JSON.

use std::path::PathBuf;
use std::process::Command;

fn vramtop(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn shared(name: &str) -> Option<String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/snapshots")
        .join(name);
    p.exists().then(|| p.display().to_string())
}

#[test]
fn help_lists_the_commands() {
    let (code, out, _) = vramtop(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("replay") && out.contains("demo"), "{out}");
}

#[test]
fn unknown_flag_is_a_usage_error_with_exit_2() {
    let (code, _, err) = vramtop(&["--no-such-flag"]);
    assert_eq!(code, 2);
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn no_command_runs_the_demo_and_ends_with_reserved_zero() {
    let (code, out, _) = vramtop(&[]);
    assert_eq!(code, 0);
    assert!(out.contains("empty_cache()"), "{out}");
    let (code, json, _) = vramtop(&["demo", "--json"]);
    assert_eq!(code, 0);
    let steps: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let last = steps.as_array().and_then(|a| a.last()).expect("steps");
    assert_eq!(last["reserved"], 0);
    assert_eq!(last["driver_used"], 500u64 << 20);
}

#[test]
fn replay_of_a_real_snapshot_is_a_full_match_with_exit_0() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let (code, out, _) = vramtop(&["replay", &path, "--verify"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("addresses matched    36/36"), "{out}");
    assert!(out.contains("result: FULL MATCH"), "{out}");
    let (code, json, _) = vramtop(&["replay", &path, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["replays"][0]["addresses_matched"], 36);
    assert_eq!(v["replays"][0]["allocations_replayed"], 36);
    assert_eq!(v["replays"][0]["final_layout_matches"], true);
}

#[test]
fn replay_of_a_hand_made_sample_reports_findings_with_exit_1() {
    let Some(path) = shared("snapviewer_memory.pickle") else {
        return;
    };
    let (code, out, _) = vramtop(&["replay", &path]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("MISMATCH"), "{out}");
}

#[test]
fn replay_of_bad_input_is_one_line_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("vramtop-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let evil = dir.join("evil.pickle");
    // pickle.dumps(os.system) style: GLOBAL 'os system' then STOP.
    std::fs::write(&evil, b"cos\nsystem\n.").expect("write");
    let (code, out, err) = vramtop(&["replay", &evil.display().to_string()]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("GLOBAL") && err.contains("os.system"), "{err}");

    let truncated = dir.join("truncated.pickle");
    if let Some(path) = shared("silmont_mem_snapshot.pickle") {
        let bytes = std::fs::read(path).expect("read");
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
        let (code, _, err) = vramtop(&["replay", &truncated.display().to_string()]);
        assert_eq!(code, 2);
        assert!(err.contains("truncated"), "{err}");
    }
    let (code, _, err) = vramtop(&["replay", "/definitely/not/here.pickle"]);
    assert_eq!(code, 2);
    assert!(err.contains("not/here.pickle"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
