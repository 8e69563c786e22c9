//! The binary as a user runs it: exit codes, messages, JSON.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn vramtop(args: &[&str]) -> (i32, String, String) {
    common::run_vramtop(args, None)
}

/// A shared snapshot's path; `None`, saying the test is skipped, when
/// ../shared is absent.
fn shared(name: &str) -> Option<String> {
    common::shared_snapshot(name).map(|p| p.display().to_string())
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
fn demo_walks_through_the_allocator_and_ends_with_reserved_zero() {
    let (code, out, _) = vramtop(&["demo"]);
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
fn replay_of_a_trace_without_allocator_calls_says_why_its_entries_are_not_replayed() {
    let Some(path) = shared("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    let (code, out, _) = vramtop(&["replay", &path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 trace entries"), "{out}");
    assert!(
        out.contains("none of its 2 entries is an allocator call"),
        "not a bare \"none to replay\" beside 2 entries: {out}"
    );
    // Which entries they are: GPU 1's free_completed is not left unsaid.
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("(1 free_completed, 1 snapshot;"), "{out}");
    // A free's completion is a memory event the summary steps through: not
    // called a state-only snapshot, which only leaves markers behind.
    assert!(
        flat.contains("1 snapshot; a replay starts at an allocation)"),
        "{out}"
    );
    let (code, json, _) = vramtop(&["replay", "--json", &path]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(
        v["trace_actions"][0],
        serde_json::json!(["free_completed", 1])
    );
}

#[test]
fn replay_says_how_many_trace_entries_are_markers_it_does_not_replay() {
    let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let (code, out, _) = vramtop(&["replay", &path]);
    assert_eq!(code, 0, "{out}");
    // 5803 entries, 9 of them `snapshot` markers (the Python inspector's
    // count of actions): 5794 replayed.
    assert!(out.contains("5803 trace entries"), "{out}");
    assert!(out.contains("9 of its 5803 entries not replayed"), "{out}");
    assert!(out.contains("events matched       5794/5794"), "{out}");
    // A trace with no marker says nothing of it.
    let Some(silmont) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let (_, out, _) = vramtop(&["replay", &silmont]);
    assert!(!out.contains("not replayed"), "{out}");
}

#[test]
fn replay_of_a_hand_made_sample_reports_its_findings_as_an_inconsistent_file_with_exit_2() {
    let Some(path) = shared("snapviewer_memory.pickle") else {
        return;
    };
    let (code, out, _) = vramtop(&["replay", &path]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("invariants: INCONSISTENT FILE (20 findings)"),
        "{out}"
    );
    assert!(out.contains("result: NOT REPLAYABLE"), "{out}");
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

#[test]
fn a_small_truncated_file_says_first_that_it_ends_early_in_one_line_with_exit_2() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = std::fs::read(path).expect("read");
    let cut = dir.path().join("t.pickle");
    std::fs::write(&cut, &bytes[..5000]).expect("write");
    let cut = cut.display().to_string();
    for command in [
        &["open", &cut, "--summary"][..],
        &["open", &cut, "--summary", "--no-trace"][..],
        &["replay", &cut][..],
    ] {
        let (code, out, err) = vramtop(command);
        assert_eq!(code, 2, "{command:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        // What a user needs first; the parser's detail kept at the end.
        assert_eq!(
            err.trim_end(),
            format!(
                "vramtop: error: {cut}: the file ends early: 5000 bytes, cut inside its first \
                 64.00 KiB frame (60550 more bytes were expected); was it copied whole? \
                 (truncated pickle: the FRAME opcode at byte 2)"
            ),
            "{command:?}"
        );
    }
    // Piped, it is the input that ends early.
    let (code, _, err) = common::run_vramtop_with_stdin(&["replay", "-"], &bytes[..5]);
    assert_eq!(code, 2);
    assert_eq!(
        err.trim_end(),
        "vramtop: error: standard input: the input ends early: 5 bytes, cut inside a frame's \
         header (6 more bytes were expected); did its writer stop early? (truncated pickle: the \
         FRAME opcode at byte 2)"
    );
}

#[test]
fn a_file_cut_in_its_trace_is_said_as_a_cut_file_with_its_readable_final_state() {
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = std::fs::read(path).expect("read");
    let cut = dir.path().join("t.pickle");
    // Past the final state (segments end near byte 457,000), in the trace.
    std::fs::write(&cut, &bytes[..1_500_000]).expect("write");
    let cut = cut.display().to_string();
    for command in [&["open", &cut, "--summary"][..], &["replay", &cut][..]] {
        let (code, _, err) = vramtop(command);
        assert_eq!(code, 2, "{command:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        // Worded as a cut at the start is, then what still reads.
        assert!(
            err.starts_with(&format!(
                "vramtop: error: {cut}: the file ends early: 1500000 bytes, cut inside a 64.00 KiB \
                 frame ("
            )),
            "{command:?}: {err}"
        );
        assert!(
            err.contains("was it copied whole? (truncated pickle: the FRAME opcode at byte "),
            "{err}"
        );
        assert!(
            err.contains("this command reads the whole file, but its final state, before the damage, is readable"),
            "{err}"
        );
    }
}

#[test]
fn once_json_prints_one_full_sample_with_gpus_processes_and_allocator() {
    let (code, out, err) = vramtop(&["--backend", "sim", "--sim-gpus", "2", "--once", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["backend"], "sim");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2);
    for key in [
        "status",
        "index",
        "name",
        "memory_total",
        "memory_used",
        "processes",
        "allocator",
        "breakdown",
    ] {
        assert!(gpus[0].get(key).is_some(), "missing {key}: {out}");
    }
    assert_eq!(
        gpus[0]["fan_percent"],
        serde_json::Value::Null,
        "n/a is null, not 0"
    );
    let alloc = &gpus[0]["allocator"];
    assert!(alloc["reserved"].as_u64().is_some_and(|r| r > 0), "{out}");
    assert!(alloc["reserved"].as_u64() >= alloc["allocated"].as_u64());
    assert!(
        gpus[0]["breakdown"]["context_and_other"]
            .as_u64()
            .is_some_and(|c| c >= 500 << 20)
    );
    let (code, _, err) = vramtop(&["--json"]);
    assert_eq!(code, 2, "--json needs --once: {err}");
}

#[test]
fn record_appends_one_flushed_json_line_per_sample() {
    let file = std::env::temp_dir().join(format!("vramtop-record-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let path = file.display().to_string();
    let (code, _, err) = vramtop(&[
        "record",
        "--backend",
        "sim",
        &path,
        "--interval",
        "100ms",
        "--duration",
        "700ms",
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&file).expect("the file exists");
    let lines: Vec<&str> = text.lines().collect();
    // Ticks at 0, 100, …, 600 ms: 7 at most (a late tick is skipped).
    assert!((4..=7).contains(&lines.len()), "{} lines", lines.len());
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert_eq!(v["gpus"].as_array().map(Vec::len), Some(1));
    }
    // Appends, never truncates.
    let (code, _, _) = vramtop(&[
        "record",
        "--backend",
        "sim",
        &path,
        "--duration",
        "300ms",
        "--interval",
        "100ms",
    ]);
    assert_eq!(code, 0);
    let more = std::fs::read_to_string(&file)
        .expect("the file exists")
        .lines()
        .count();
    assert!(more > lines.len());
    let _ = std::fs::remove_file(&file);
}

/// `vramtop record ARGS…` with `--backend sim` in `cwd`: exit code,
/// stdout, stderr.
fn record_in(cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = common::vramtop_command(&["record", "--backend", "sim"])
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn record_writes_duration_over_interval_samples_the_first_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, _, err) = record_in(
        dir.path(),
        &["r.jsonl", "--duration", "300ms", "--interval", "100ms"],
    );
    assert_eq!(code, 0, "{err}");
    let n = std::fs::read_to_string(dir.path().join("r.jsonl"))
        .expect("the file exists")
        .lines()
        .count();
    // Ticks at 0, 100 and 200 ms: the one at 300 ms is past the duration.
    assert!((1..=3).contains(&n), "{n} lines");
    assert!(err.contains(&format!("{n} sample")), "{err}");
    // One interval's worth: one sample, said in the singular.
    let (code, _, err) = record_in(
        dir.path(),
        &["one.jsonl", "--duration", "1s", "--interval", "1s"],
    );
    assert_eq!(code, 0, "{err}");
    let n = std::fs::read_to_string(dir.path().join("one.jsonl"))
        .expect("the file exists")
        .lines()
        .count();
    assert_eq!(n, 1);
    assert!(
        err.contains("vramtop record: 1 sample written to one.jsonl"),
        "{err}"
    );
}

#[test]
fn record_to_dash_writes_the_samples_to_stdout_and_no_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, out, err) = record_in(
        dir.path(),
        &["-", "--duration", "200ms", "--interval", "100ms"],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!((1..=2).contains(&lines.len()), "{out}");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert!(v["gpus"].is_array(), "{line}");
    }
    assert!(err.contains("written to stdout"), "{err}");
    assert!(!dir.path().join("-").exists(), "no file named '-'");
}

#[test]
fn a_record_file_that_cannot_be_written_is_named_in_the_error() {
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (code, _, err) = record_in(dir.path(), &["/dev/full", "--duration", "100ms"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot write /dev/full: "), "{err}");
}

#[test]
fn closed_stdout_pipe_is_not_a_panic() {
    use std::io::Read as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .args(["--backend", "sim", "--once", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut first = [0u8; 8];
    let mut stdout = child.stdout.take().expect("piped");
    let _ = stdout.read(&mut first);
    drop(stdout);
    let out = child.wait_with_output().expect("it exits");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0));
}

/// Runs vramtop with `args` writing into a pipe whose reader is gone
/// before the first byte (`vramtop … | head -0`): (exit code, stderr).
fn into_a_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = common::vramtop_command(args)
        .stdout(writer)
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_report_written_into_a_closed_pipe_ends_quietly_with_success() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("demo.pickle");
    let file = file.to_str().expect("utf-8 path");
    let (code, _, err) = vramtop(&["demo", "--save-snapshot", file]);
    assert_eq!(code, 0, "{err}");
    for args in [
        vec!["open", "--summary", file],
        vec!["open", "--summary", "--json", file],
        vec!["replay", file],
        vec!["diff", file, file],
        vec!["diff", "--json", file, file],
        vec!["demo"],
        vec!["man"],
    ] {
        let (code, err) = into_a_closed_pipe(&args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}: nothing on stderr");
    }
}

#[test]
fn dashboard_without_a_terminal_explains_the_headless_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .args(["--backend", "sim"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the binary runs");
    // Without a TTY ratatui cannot start; the message says what to do.
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) {
        assert!(
            err.contains("--once --json") && err.contains("record"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn docs_keys_lists_every_binding_of_the_keymap() {
    let doc =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/keys.md"))
            .expect("docs/keys.md exists");
    for b in vramtop::app::keymap::Keymap::default().bindings {
        assert!(
            doc.contains(&format!("`{}`", b.keys)),
            "`{}` missing from docs/keys.md",
            b.keys
        );
    }
}

#[test]
fn the_simulated_gpu_is_named_for_its_size_and_doctor_lists_its_processes() {
    let (code, out, err) = vramtop(&[
        "--backend",
        "sim",
        "--sim-memory",
        "24GiB",
        "--once",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Simulated GPU 24GB"), "{out}");
    assert!(!out.contains("H100 80GB"), "{out}");
    let (code, out, err) = vramtop(&["doctor", "--backend", "sim", "--sim-memory", "24GiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GPU 0       Simulated GPU 24GB"), "{out}");
    // The dashboard's simulated training process, there too.
    assert!(out.contains("pid 4242 on GPU 0 (python train.py"), "{out}");
    let (_, out, _) = vramtop(&["doctor", "--backend", "sim"]);
    assert!(
        out.contains("Simulated H100 80GB"),
        "the default keeps its name: {out}"
    );
}

#[test]
fn demo_ends_by_suggesting_its_own_snapshot_which_saves_and_opens() {
    let (code, out, _) = vramtop(&["demo"]);
    assert_eq!(code, 0);
    let suggestion = "vramtop demo --save-snapshot demo.pickle && vramtop open demo.pickle";
    let last = out.lines().last().unwrap_or_default();
    assert!(last.ends_with(suggestion), "{out}");
    // Every column is explained under the table, in the table's units.
    for column in [
        "allocated =",
        "reserved =",
        "driver used =",
        "segs =",
        "inact split =",
    ] {
        assert!(out.contains(column), "{column}: {out}");
    }
    assert!(
        out.contains("(500 MiB CUDA context, as every simulated GPU assumes)"),
        "{out}"
    );
    assert!(
        !out.contains("../shared"),
        "no neighbour's files needed: {out}"
    );
    // The suggestion works as written (the viewer's --summary stands in for
    // the interactive screen).
    let dir = std::env::temp_dir().join(format!("vramtop-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("demo.pickle");
    let file = file.to_str().expect("utf-8 path");
    let (code, _, err) = vramtop(&["demo", "--save-snapshot", file]);
    assert_eq!(code, 0, "{err}");
    let (code, summary, err) = vramtop(&["open", file, "--summary"]);
    assert_eq!(code, 0, "{err}");
    // Its cache is emptied at the end, so no segment is left; the device
    // the trace ran on is still the file's.
    assert!(
        summary.starts_with(&format!("{file}: 0 segments on 1 device\nGPU 0:\n")),
        "{summary}"
    );
    assert!(
        !summary.contains("total:"),
        "one device, no total: {summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let section = readme
        .split("Open a snapshot in the terminal")
        .nth(1)
        .expect("the snapshot section");
    let first_command = section
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .nth(1)
        .unwrap_or_default();
    assert_eq!(first_command, suggestion, "the section starts there");
}

#[test]
fn a_summary_of_two_gpus_gives_fragmentation_per_gpu_only() {
    // Free blocks of two GPUs never combine: the total says none.
    let Some(file) = shared("albi2_thesis-text-to-SQL_dump_snapshot.pickle") else {
        return;
    };
    let (code, summary, err) = vramtop(&["open", &file, "--summary"]);
    assert_eq!(code, 0, "{err}");
    let (per_gpu, total) = summary.split_once("\ntotal:\n").expect("a total section");
    // Each fragmentation line with the lines it wraps onto (under its
    // figures' column), as one.
    let lines = |text: &str| -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        let mut in_fragmentation = false;
        for l in text.lines() {
            if l.trim_start().starts_with("fragmentation") {
                found.push(l.to_string());
                in_fragmentation = true;
            } else if in_fragmentation && l.starts_with(&" ".repeat(23)) {
                if let Some(last) = found.last_mut() {
                    last.push(' ');
                    last.push_str(l.trim_start());
                }
            } else {
                in_fragmentation = false;
            }
        }
        found
    };
    let gpus = lines(per_gpu);
    assert_eq!(gpus.len(), 2, "{summary}");
    assert!(
        gpus.iter()
            .all(|l| l.contains("%:") && l.contains("largest")),
        "{gpus:?}"
    );
    let total = lines(total);
    assert_eq!(total.len(), 1, "{summary}");
    assert!(total[0].contains("per GPU, above"), "{total:?}");
    assert!(
        !total[0].contains('%') && !total[0].contains("largest"),
        "{total:?}"
    );
}

#[test]
fn replay_counts_one_oom_in_the_singular() {
    // fragmentation_oom runs out of memory once; its saved snapshot has
    // that OOM in its trace.
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("fo.pickle");
    let base = base.to_str().expect("utf-8 temp path");
    let (code, _, err) = vramtop(&["scenario", "fragmentation_oom", "--save-snapshot", base]);
    assert_eq!(code, 0, "{err}");
    let saved = dir.path().join("fo-default.pickle");
    let (code, out, err) = vramtop(&["replay", saved.to_str().expect("utf-8 temp path")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(", 1 OOM in the trace)"), "{out}");
}

/// A saved scenario's clock is made up (step n at n × 1000 µs): the
/// summary and `diff` write its times in whole milliseconds, not with a
/// precision of a microsecond the file never had.
#[test]
fn a_saved_scenarios_synthetic_clock_is_shown_in_whole_milliseconds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("fo.pickle");
    let base = base.to_str().expect("utf-8 temp path");
    let (code, _, err) = vramtop(&["scenario", "fragmentation_oom", "--save-snapshot", base]);
    assert_eq!(code, 0, "{err}");
    let saved = dir.path().join("fo-default.pickle");
    let saved = saved.to_str().expect("utf-8 temp path");
    let (code, out, err) = vramtop(&["open", saved, "--summary"]);
    assert_eq!(code, 0, "{err}");
    // The OOM is step 4's: 3 ms after step 1's first event.
    assert!(out.contains(", t+3 ms: 2 GiB requested"), "{out}");
    assert!(!out.contains(".000 ms"), "{out}");
    let (code, out, err) = vramtop(&["diff", saved, "--at", "1", "--at", "peak"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("t+0 ms"), "{out}");
    assert!(!out.contains(".000 ms"), "{out}");
}

#[test]
fn replay_words_a_mismatch_within_80_columns_without_debug_output() {
    use vramtop::snapshot::capture::snapshot_of;
    use vramtop::snapshot::write_snapshot_file;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut m = common::workload::model("", 8 << 30);
    m.malloc(512, 0).expect("fits");
    let recorded = snapshot_of(&m, 0);
    // The final state's live block 512 B larger than the model's, its free
    // neighbour 512 B smaller: the blocks differ. The segment's sums grow
    // with it: a file that contradicts itself would be bad input instead.
    let mut grown = recorded.clone();
    let segment = &mut grown.segments[0];
    segment.blocks[0].size += 512;
    segment.blocks[1].address += 512;
    segment.blocks[1].size -= 512;
    for sum in [&mut segment.allocated_size, &mut segment.active_size] {
        *sum = sum.map(|bytes| bytes + 512);
    }
    // One allocation, and a final state without it.
    let mut lone = recorded;
    lone.segments.clear();
    lone.device_traces[0].retain(|e| e.action.as_str() == "alloc");
    for (name, snapshot, says) in [
        (
            "grown.pickle",
            grown,
            "blocks differ from block 0: model 0x",
        ),
        (
            "lone.pickle",
            lone,
            "first divergence     event 1/1 (#0): PyTorch alloc(",
        ),
    ] {
        let path = dir.path().join(name);
        write_snapshot_file(&snapshot, &path).expect("writes");
        let (code, out, err) = vramtop(&["replay", path.to_str().expect("utf-8 temp path")]);
        assert_eq!(code, 1, "{name}: a mismatch: {out}{err}");
        assert!(out.contains("result: MISMATCH"), "{name}: {out}");
        assert!(out.contains(says), "{name}: {out}");
        assert!(
            !out.contains("Some(") && !out.contains("Active"),
            "{name}: {out}"
        );
        for line in out.lines() {
            assert!(line.chars().count() <= 80, "{name}: {line:?}\n{out}");
        }
    }
}

#[test]
fn a_dash_reads_the_snapshot_from_standard_input() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let bytes = std::fs::read(&path).expect("shared snapshot reads");
    // The summary of the piped file is the file's, under another name.
    let (code, piped, err) = common::run_vramtop_with_stdin(&["open", "--summary", "-"], &bytes);
    assert_eq!(code, 0, "{err}");
    let (code, direct, err) = vramtop(&["open", "--summary", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(piped.starts_with("standard input: 9 segments"), "{piped}");
    // The heading (a long path may wrap it) up to the first GPU's figures.
    let body = |s: &str| s.get(s.find("\nGPU 0:").unwrap_or(0)..).map(str::to_string);
    assert_eq!(body(&piped), body(&direct));
    let (code, out, err) = common::run_vramtop_with_stdin(&["replay", "-"], &bytes);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("result: FULL MATCH"), "{out}");
    // Damaged input names standard input.
    let (code, _, err) = common::run_vramtop_with_stdin(&["replay", "-"], &bytes[..1000]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("vramtop: error: standard input: the input ends early: 1000 bytes,"),
        "{err}"
    );
    // What cannot read it says so.
    let (code, _, err) = common::run_vramtop_with_stdin(&["open", "-"], &bytes);
    assert_eq!(code, 2);
    assert!(
        err.contains("the viewer opens a file, not standard input"),
        "{err}"
    );
    let (code, _, err) = common::run_vramtop_with_stdin(&["diff", "-", "-"], &bytes);
    assert_eq!(code, 2);
    assert!(err.contains("only one of BEFORE and AFTER"), "{err}");
}

#[test]
fn no_trace_from_standard_input_reads_the_final_state_of_a_stream_cut_in_its_trace() {
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let bytes = std::fs::read(&path).expect("the shared file reads");
    let dir = tempfile::tempdir().expect("temp dir");
    // Its trace starts a few hundred KB in: cut well past the segments,
    // well before the end.
    let cut_bytes = &bytes[..bytes.len() * 5 / 8];
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, cut_bytes).expect("write the cut file");
    let cut = cut.display().to_string();
    let (code, from_file, err) = vramtop(&["open", &cut, "--summary", "--no-trace"]);
    assert_eq!(code, 0, "{err}");
    let (code, piped, err) =
        common::run_vramtop_with_stdin(&["open", "--summary", "--no-trace", "-"], cut_bytes);
    assert_eq!(code, 0, "the final state is whole before the cut: {err}");
    assert!(err.is_empty(), "{err}");
    // The same summary as the file's, under another name: no peaks, the
    // note that the rest was not read.
    let body = |s: &str| s.get(s.find("\nGPU 0:").unwrap_or(0)..).map(str::to_string);
    assert_eq!(body(&piped), body(&from_file));
    assert!(piped.starts_with("standard input: "), "{piped}");
    assert!(piped.contains("peaks: not read (--no-trace)"), "{piped}");
    // And the whole file as standard input is read only as far: its trace
    // is not read. (Redirected from the file: a helper that writes all of a
    // pipe before it reads the output would wait on a reader that stopped
    // reading, while the reader waits on it to take its output.)
    let out = common::vramtop_command(&["open", "--summary", "--no-trace", "--json", "-"])
        .stdin(std::fs::File::open(&path).expect("open the shared file"))
        .output()
        .expect("vramtop runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["trace_read"], false);
    assert!(v["sites"][0]["peaks"].is_null());
}

#[test]
fn a_stream_cut_before_its_final_state_is_said_the_one_way_with_or_without_no_trace() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let bytes = std::fs::read(path).expect("read");
    let expected = "vramtop: error: standard input: the input ends early: 5000 bytes, cut inside \
                    its first 64.00 KiB frame (60550 more bytes were expected); did its writer \
                    stop early? (truncated pickle: the FRAME opcode at byte 2)";
    for args in [
        &["open", "--summary", "--no-trace", "-"][..],
        &["open", "--summary", "-"][..],
    ] {
        let (code, out, err) = common::run_vramtop_with_stdin(args, &bytes[..5000]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end(), expected, "{args:?}");
    }
}

#[test]
fn no_trace_from_standard_input_stops_reading_at_the_final_state() {
    use std::io::Write as _;
    use std::process::Stdio;
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let bytes = std::fs::read(&path).expect("the shared file reads");
    let mut child = common::vramtop_command(&["open", "--summary", "--no-trace", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("vramtop starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    // A writer that writes the whole snapshot and then keeps the pipe open
    // (a run still going): no end of input ever comes, so only a reader
    // that stops at the final state ends.
    let (done, hold) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        // The reader may stop and close its end first: EPIPE, expected.
        let _ = stdin.write_all(&bytes);
        let _ = hold.recv();
        drop(stdin);
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    if status.is_none() {
        let _ = child.kill();
    }
    let _ = done.send(());
    writer.join().expect("the writer ends");
    let out = child.wait_with_output().expect("vramtop ends");
    let status = status.expect("vramtop ended before its input did");
    assert!(status.success(), "{status}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("peaks: not read (--no-trace)"), "{text}");
}

#[test]
fn a_block_requesting_more_than_its_size_is_a_finding_and_no_negative_count() {
    use vramtop::snapshot::capture::snapshot_of;
    use vramtop::snapshot::write_snapshot_file;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut m = common::workload::model("", 8 << 30);
    m.malloc(4 << 20, 0).expect("fits");
    let mut snapshot = snapshot_of(&m, 0);
    snapshot.device_traces.clear();
    let segment = &mut snapshot.segments[0];
    segment.requested_size = None;
    let live = &mut segment.blocks[0];
    live.requested_size = live.size * 2;
    let path = dir.path().join("over.pickle");
    write_snapshot_file(&snapshot, &path).expect("writes");
    let path = path.to_str().expect("utf-8 temp path");
    let (code, out, err) = vramtop(&["replay", path]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("more than its size"), "{out}");
    let (code, out, err) = vramtop(&["open", "--summary", path]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("B more than the segments"), "{out}");
    assert!(!flat.contains(" -4"), "no negative count: {out}");
    // One free block is one.
    assert!(flat.contains("external free in 1 inactive block,"), "{out}");
}

#[test]
fn a_peak_with_the_ends_sites_says_so_instead_of_listing_them_twice() {
    // muduard's b: GPU 1's trace is one free_completed of a pending block;
    // its peak holds the same allocated blocks as the end.
    let Some(path) = shared("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    let (code, out, err) = vramtop(&["open", "--summary", &path]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("allocated, the same sites as at the end"),
        "{out}"
    );
    assert_eq!(out.matches("lora.py:430 forward").count(), 1, "{out}");
    // A peak with other sites lists them.
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let (_, out, _) = vramtop(&["open", "--summary", &path]);
    assert!(!out.contains("the same sites as at the end"), "{out}");
}

#[test]
fn at_peak_says_it_is_the_peak_above_instead_of_listing_its_sites_twice() {
    let Some(path) = shared("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    let (code, out, err) = vramtop(&["open", "--summary", &path]);
    assert_eq!(code, 0, "{err}");
    let (code, at_peak, err) = vramtop(&["open", "--summary", "--at", "peak", &path]);
    assert_eq!(code, 0, "{err}");
    let flat = at_peak.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("(--at peak): "), "{at_peak}");
    assert!(flat.contains("the moment of the peak above"), "{at_peak}");
    // No site row beyond the summary's without --at.
    let site_rows = |text: &str| {
        text.lines()
            .filter(|l| l.contains('%') && l.contains(" blocks "))
            .count()
    };
    assert!(site_rows(&out) > 0, "{out}");
    assert_eq!(site_rows(&at_peak), site_rows(&out), "{at_peak}");
}

/// A model's recorded snapshot of a few calls on GPU 0, its entries one
/// millisecond apart, with an `annotate` marker after the first: a full
/// match when replayed.
fn small_recording() -> vramtop::snapshot::Snapshot {
    use vramtop::alloc::TraceAction;
    use vramtop::snapshot::capture::snapshot_of;
    let mut m = common::workload::model("", 8 << 30);
    let a = m.malloc(4 << 20, 0).expect("fits");
    m.malloc(512, 0).expect("fits");
    m.free(a).expect("live");
    let mut snapshot = snapshot_of(&m, 0);
    let trace = &mut snapshot.device_traces[0];
    let mut marker = trace[0].clone();
    marker.action = TraceAction::Annotate;
    trace.insert(1, marker);
    for (i, e) in trace.iter_mut().enumerate() {
        e.time = vramtop::snapshot::EntryTime::new(Some(1_000 * i as i64));
    }
    snapshot
}

#[test]
fn trace_entries_of_unknown_actions_are_said_by_replay_and_summary_not_only_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = vramtop::snapshot::snapshot_to_bytes(&small_recording());
    // A newer PyTorch's action in place of the marker.
    let path = dir.path().join("newer.pickle");
    std::fs::write(
        &path,
        common::renamed_action(&bytes, "annotate", "teleport"),
    )
    .expect("write");
    let path = path.to_str().expect("utf-8 temp path");

    let (code, out, err) = vramtop(&["replay", path]);
    assert_eq!(code, 0, "the entries read match: {out}{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("trace: 1 trace entry left out: its action (teleport) is unknown to this"),
        "{out}"
    );
    // Not an unqualified FULL MATCH: it covers the entries read.
    assert!(
        flat.contains("result: FULL MATCH (of the trace entries read only: 1 trace entry left out"),
        "{out}"
    );
    let (code, json, _) = vramtop(&["replay", "--json", path]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["result"], "FULL MATCH");
    assert!(
        v["why"]
            .as_str()
            .is_some_and(|w| w.contains("1 trace entry left out")),
        "{json}"
    );
    assert_eq!(v["skipped_trace_entries"], 1);
    assert_eq!(
        v["skipped_trace_actions"]["names"],
        serde_json::json!(["teleport"])
    );

    let (code, out, err) = vramtop(&["open", "--summary", path]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("note: 1 trace entry left out: its action (teleport) is unknown"),
        "{out}"
    );
    let (code, json, _) = vramtop(&["open", "--summary", "--json", path]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["skipped_trace_entries"], 1);
    assert_eq!(
        v["skipped_trace_actions"]["names"],
        serde_json::json!(["teleport"])
    );
    assert_eq!(v["skipped_trace_actions"]["more"], false);

    // A file the reader reads whole says nothing of it.
    let whole = dir.path().join("whole.pickle");
    std::fs::write(&whole, &bytes).expect("write");
    let whole = whole.to_str().expect("utf-8 temp path");
    let (_, out, _) = vramtop(&["replay", whole]);
    assert!(!out.contains("left out"), "{out}");
    assert!(out.contains("result: FULL MATCH\n"), "{out}");
    let (_, out, _) = vramtop(&["open", "--summary", whole]);
    assert!(!out.contains("left out"), "{out}");
}

#[test]
fn replay_finds_a_trace_going_back_in_time_without_calling_it_a_mismatch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut snapshot = small_recording();
    let trace = &mut snapshot.device_traces[0];
    // Entry 3 stamped 2.5 ms before entry 2, entry 5 before entry 4.
    trace[3].time = vramtop::snapshot::EntryTime::new(Some(-500));
    let before = trace[4].time_us().expect("timed");
    trace[5].time = vramtop::snapshot::EntryTime::new(Some(before - 1));
    let path = dir.path().join("clock.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot, &path).expect("writes");
    let path = path.to_str().expect("utf-8 temp path");

    let (code, out, err) = vramtop(&["replay", path]);
    assert_eq!(
        code, 0,
        "the file is still readable and replays: {out}{err}"
    );
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "trace times: GPU 0: time goes backwards at trace entry #3, 2.500 ms earlier than \
             the entry before it (1 more like it)"
        ),
        "{out}"
    );
    assert_eq!(
        out.matches("time goes backwards").count(),
        1,
        "one line: {out}"
    );
    assert!(out.contains("result: FULL MATCH"), "{out}");
    for line in out.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    let (_, json, _) = vramtop(&["replay", "--json", path]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let back = &v["backwards_times"];
    assert_eq!(back.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(back[0]["device"], 0);
    assert_eq!(back[0]["entry_index"], 3);
    assert_eq!(back[0]["time_us"], -500);
    assert_eq!(back[0]["previous_time_us"], 2_000);
    assert_eq!(back[0]["count"], 2);
}

#[test]
fn summary_warns_of_a_trace_going_back_in_time_as_replay_finds_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut snapshot = small_recording();
    let trace = &mut snapshot.device_traces[0];
    // Entry 3 stamped 2.5 ms before entry 2, entry 5 before entry 4.
    trace[3].time = vramtop::snapshot::EntryTime::new(Some(-500));
    let before = trace[4].time_us().expect("timed");
    trace[5].time = vramtop::snapshot::EntryTime::new(Some(before - 1));
    let path = dir.path().join("clock.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot, &path).expect("writes");
    let path = path.to_str().expect("utf-8 temp path");

    let (code, out, err) = vramtop(&["open", "--summary", path]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "warning: time goes backwards at trace entry #3, 2.500 ms earlier than the entry \
             before it (1 more like it)"
        ),
        "{out}"
    );
    assert_eq!(out.matches("time goes backwards").count(), 1, "{out}");
    for line in out.lines() {
        assert!(line.chars().count() <= 80, "{line:?}");
    }
    let (code, json, err) = vramtop(&["open", "--summary", "--json", path]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let back = &v["sites"][0]["backwards_time"];
    assert_eq!(back["entry_index"], 3, "{json}");
    assert_eq!(back["count"], 2);
    assert_eq!(back["time_us"], -500);

    // A trace in order says nothing of it (`null` in the JSON).
    let in_order = dir.path().join("in-order.pickle");
    vramtop::snapshot::write_snapshot_file(&small_recording(), &in_order).expect("writes");
    let in_order = in_order.to_str().expect("utf-8 temp path");
    let (_, out, _) = vramtop(&["open", "--summary", in_order]);
    assert!(!out.contains("backwards"), "{out}");
    let (_, json, _) = vramtop(&["open", "--summary", "--json", in_order]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(v["sites"][0]["backwards_time"].is_null(), "{json}");
}

#[test]
fn replay_names_a_gpu_whose_segments_have_no_trace_as_not_verified() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut snapshot = small_recording();
    // GPU 1 holds a segment; only GPU 0 has a trace.
    let mut other = snapshot.segments[0].clone();
    other.device = 1;
    snapshot.segments.push(other);
    assert_eq!(snapshot.device_traces.len(), 1);
    let path = dir.path().join("two.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot, &path).expect("writes");
    let path = path.to_str().expect("utf-8 temp path");

    let (code, out, err) = vramtop(&["replay", path]);
    assert_eq!(code, 0, "{out}{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("GPU 1: not verified: no trace; only its segments' invariants were checked"),
        "{out}"
    );
    assert!(
        flat.contains("result: FULL MATCH (GPU 1 not verified: no trace to replay)"),
        "{out}"
    );
    let (_, json, _) = vramtop(&["replay", "--json", path]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(
        v["unverified"],
        serde_json::json!([{"device": 1, "reason": "no trace"}])
    );
    assert_eq!(v["replays"].as_array().map(Vec::len), Some(1));
}

#[test]
fn no_color_leaves_the_help_unstyled_on_a_terminal_too() {
    // `script` gives the command a terminal, where the help is styled.
    let Some(script) = script_for("the help's styles on a terminal") else {
        return;
    };
    let exe = env!("CARGO_BIN_EXE_vramtop");
    let styled = |args: &str| -> bool {
        let out = std::process::Command::new(&script)
            .args(["-qec", &format!("{exe} {args}"), "/dev/null"])
            .env(common::PROBE_DIR_ENV, common::no_probes_dir())
            .env_remove("NO_COLOR")
            .output()
            .expect("script runs");
        assert!(out.status.success(), "{args}: {out:?}");
        String::from_utf8_lossy(&out.stdout).contains('\u{1b}')
    };
    assert!(styled("-h"), "styled on a terminal by default");
    for args in ["--no-color -h", "-h --no-color", "open --no-color --help"] {
        assert!(!styled(args), "{args}");
    }
}

/// The system tool `name` (in /usr/bin or /bin); `None`, saying the test
/// of `what` is skipped and `why` the tool was wanted, where there is none.
fn system_tool(name: &str, what: &str, why: &str) -> Option<String> {
    let found = ["/usr/bin", "/bin"]
        .into_iter()
        .map(|dir| format!("{dir}/{name}"))
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        common::skip::skip(
            what,
            &format!("no `{name}` {why}"),
            common::skip::Prerequisite::OnlySomeMachines,
        );
    }
    found
}

/// `script`, which gives a command a terminal; `None`, saying the test is
/// skipped, where there is none.
fn script_for(what: &str) -> Option<String> {
    system_tool("script", what, "to give the command a terminal")
}

#[test]
fn no_color_before_or_among_the_help_commands_words_prints_the_help_unstyled() {
    let env = [(vramtop::cli::help::COLUMNS_ENV, "80"), ("NO_COLOR", "1")];
    let (code, by_flag, err) = common::run_vramtop_with_env(&["open", "--help"], None, &env);
    assert_eq!(code, 0, "{err}");
    for args in [
        &["--no-color", "help", "open"][..],
        &["help", "--no-color", "open"],
        &["help", "open", "--no-color"],
        &["--log-file", "x.log", "--no-color", "help", "open"],
    ] {
        let (code, out, err) = common::run_vramtop_with_env(args, None, &env);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
        assert_eq!(out, by_flag, "{args:?}");
    }
    // On a terminal, where the help is styled without it.
    let Some(script) = script_for("the help command's styles on a terminal") else {
        return;
    };
    let exe = env!("CARGO_BIN_EXE_vramtop");
    let run = |args: &str| {
        let out = std::process::Command::new(&script)
            .args(["-qec", &format!("{exe} {args}"), "/dev/null"])
            .env(common::PROBE_DIR_ENV, common::no_probes_dir())
            .env_remove("NO_COLOR")
            .output()
            .expect("script runs");
        assert!(out.status.success(), "{args}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run("help open").contains('\u{1b}'), "styled by default");
    for args in ["--no-color help open", "help --no-color open"] {
        let out = run(args);
        assert!(out.contains("Usage: vramtop open"), "{args}: {out}");
        assert!(!out.contains('\u{1b}'), "{args}: {out:?}");
    }
}

#[test]
fn help_of_the_help_command_is_printed_as_git_and_cargo_print_it() {
    for args in [
        &["help", "--help"][..],
        &["help", "-h"],
        &["--no-color", "help", "--help"],
        &["help", "help"],
    ] {
        let (code, out, err) = vramtop(args);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
        assert!(
            out.contains("Usage: vramtop help [COMMAND]"),
            "{args:?}: {out}"
        );
    }
}

/// The widest line of `text`, in terminal cells, `script`'s carriage
/// returns left out.
fn widest_line(text: &str) -> usize {
    text.lines()
        .map(|l| vramtop::cli::help::cells(l.trim_end_matches('\r')))
        .max()
        .unwrap_or(0)
}

#[test]
fn help_piped_into_a_pager_is_wrapped_to_the_users_terminal_unless_columns_says() {
    let Some(script) = script_for("the help's width in a pipe from a terminal") else {
        return;
    };
    let exe = env!("CARGO_BIN_EXE_vramtop");
    // A 60-column terminal, stdout a pipe (`| cat`, as `| less`), no
    // COLUMNS in the environment (bash does not export it).
    let widest = |shell: &str| {
        let out = std::process::Command::new(&script)
            .args(["-qec", &format!("stty cols 60; {shell}"), "/dev/null"])
            .env(common::PROBE_DIR_ENV, common::no_probes_dir())
            .env_remove(vramtop::cli::help::COLUMNS_ENV)
            .env("NO_COLOR", "1")
            .output()
            .expect("script runs");
        assert!(out.status.success(), "{shell}: {out:?}");
        widest_line(&String::from_utf8_lossy(&out.stdout))
    };
    // stderr the terminal; then only the controlling terminal.
    for shell in [
        format!("{exe} open --help | cat"),
        format!("{exe} open --help 2>/dev/null | cat"),
    ] {
        let w = widest(&shell);
        assert!((50..=60).contains(&w), "{shell}: {w} columns");
    }
    // COLUMNS says the width first.
    let w = widest(&format!("COLUMNS=72 {exe} open --help | cat"));
    assert!((62..=72).contains(&w), "COLUMNS=72: {w} columns");
}

#[test]
fn help_into_a_pipe_with_no_terminal_anywhere_is_100_columns() {
    // `setsid` leaves no controlling terminal; stdin, stdout and stderr
    // are pipes.
    let Some(setsid) = system_tool(
        "setsid",
        "the help's width with no terminal",
        "to leave the controlling terminal",
    ) else {
        return;
    };
    let out = std::process::Command::new(setsid)
        .args(["-w", env!("CARGO_BIN_EXE_vramtop"), "open", "--help"])
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .env_remove(vramtop::cli::help::COLUMNS_ENV)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("setsid runs");
    assert!(out.status.success(), "{out:?}");
    let w = widest_line(&String::from_utf8_lossy(&out.stdout));
    assert!(
        (90..=vramtop::cli::help::DEFAULT_HELP_WIDTH).contains(&w),
        "{w} columns"
    );
}

#[test]
fn demo_and_scenario_ascii_print_their_text_in_ascii_one_character_for_one() {
    // They print "×" and "·" as `diff` and `replay` print "…": --ascii
    // is the same flag with the same stand-ins.
    let plain = common::assert_ascii_twin(&["demo"]);
    assert!(!plain.is_ascii(), "the demo has non-ASCII to stand in for");
    let (code, out, _) = vramtop(&["scenario", "--list"]);
    assert_eq!(code, 0);
    let mut non_ascii = 0;
    for name in out.lines().filter_map(|l| l.split_whitespace().next()) {
        let plain = common::assert_ascii_twin(&["scenario", name]);
        non_ascii += usize::from(!plain.is_ascii());
    }
    assert!(non_ascii > 0, "some scenario's text has non-ASCII");
    common::assert_ascii_twin(&["scenario", "--list"]);
}

#[test]
fn demo_and_scenario_refuse_ascii_with_json() {
    for args in [
        &["demo", "--json", "--ascii"][..],
        &["scenario", "fragmentation_oom", "--json", "--ascii"],
        &["scenario", "--list", "--json", "--ascii"],
    ] {
        let (code, _, err) = vramtop(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("'--json' cannot be used with '--ascii'"),
            "{args:?}: {err}"
        );
    }
}
