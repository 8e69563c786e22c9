//! `vramtop open REC.jsonl --summary [--json]`: a `vramtop record` file
//! read back, told from a snapshot by its content, whole or cut mid-write.

mod common;

use std::path::Path;

use common::{assert_ascii_twin, run_vramtop, run_vramtop_with_stdin};

/// Records `duration` of the simulated GPU at 100 ms into `file`.
fn record(file: &Path, duration: &str) {
    let path = file.to_str().expect("a UTF-8 path");
    let (code, _, err) = run_vramtop(
        &[
            "record",
            "--backend",
            "sim",
            "--interval",
            "100ms",
            "--duration",
            duration,
            path,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_recording_is_summed_up_per_gpu_in_text_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    // No .jsonl: the content says it is a recording.
    let file = dir.path().join("night.log");
    record(&file, "1s");
    let path = file.to_str().expect("a UTF-8 path");
    let text = assert_ascii_twin(&["open", path, "--summary"]);
    assert!(text.contains("10 samples, 1 GPU"), "{text}");
    assert!(text.contains("GPU 0  Simulated H100 80GB"), "{text}");
    // About 100 ms: the sampler ticks late under load.
    assert!(text.contains(" ms (median)"), "{text}");
    assert!(text.contains("memory used          peak "), "{text}");
    assert!(text.contains("pid 4242  sim  python train.py"), "{text}");
    assert!(
        text.contains("allocator pid 4242   highest sample allocated "),
        "{text}"
    );
    let (code, out, err) = run_vramtop(&["open", path, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["kind"], "recording");
    assert_eq!(json["samples"], 10);
    let gpu = &json["gpus"][0];
    assert_eq!(gpu["index"], 0);
    assert!(
        gpu["memory_used"]["peak"]["bytes"].as_u64().is_some(),
        "{out}"
    );
    assert_eq!(gpu["allocators"][0]["pid"], 4242);
}

#[test]
fn a_recording_cut_mid_write_is_summed_up_and_the_cut_said() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("cut.jsonl");
    record(&file, "500ms");
    let bytes = std::fs::read(&file).expect("the recording");
    std::fs::write(&file, &bytes[..bytes.len() - 100]).expect("cut it");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, out, err) = run_vramtop(&["open", path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("4 samples, 1 GPU"), "{out}");
    assert!(out.contains("the last line cut mid-write"), "{out}");
}

#[test]
fn a_recording_on_standard_input_is_told_by_its_first_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("r.jsonl");
    record(&file, "300ms");
    let bytes = std::fs::read(&file).expect("the recording");
    let (code, out, err) = run_vramtop_with_stdin(&["open", "-", "--summary"], &bytes);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("standard input: 3 samples, 1 GPU"), "{out}");
}

#[test]
fn a_recording_whose_start_is_cut_off_is_summed_up_from_a_file_or_standard_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("r.jsonl");
    record(&file, "500ms");
    let bytes = std::fs::read(&file).expect("the recording");
    // `tail -c`: the first line starts inside a sample.
    let tail = &bytes[bytes.len() / 3..];
    let (code, out, err) = run_vramtop_with_stdin(&["open", "-", "--summary"], tail);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 GPU"), "{out}");
    assert!(out.contains("not JSON"), "{out}");
    // Saved under a name that says nothing, with junk in front.
    let saved = dir.path().join("tail.log");
    let mut junk = b"Last login: Mon Dec  7 03:00:00 2026\n".to_vec();
    junk.extend_from_slice(tail);
    std::fs::write(&saved, &junk).expect("write");
    let path = saved.to_str().expect("a UTF-8 path");
    let (code, out, err) = run_vramtop(&["open", path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1 GPU"), "{out}");
}

#[test]
fn text_that_is_neither_a_snapshot_nor_a_recording_says_what_a_recording_needs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "_mw\":628266, cut\nsome notes\n").expect("write");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, _, err) = run_vramtop(&["open", path, "--summary"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a pickle: looks like text"), "{err}");
    assert!(
        err.contains("if this is a `vramtop record` file, no line of its first 16 KiB"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_pickle_named_jsonl_is_opened_as_the_snapshot_its_content_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("renamed.jsonl");
    std::fs::copy("tests/fixtures/fuzz-nan-in-unknown-setting.pickle", &file).expect("copy");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, out, err) = run_vramtop(&["open", path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 segments on 2 devices"), "{out}");
}

#[test]
fn a_recording_without_samples_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, content, why) in [
        ("empty.jsonl", &b""[..], "the file is empty"),
        (
            "binary.jsonl",
            &b"\x7fELF\x02\x01\x01\0\0\n\0\xff"[..],
            "not JSON",
        ),
        (
            "other.json",
            &b"{\"a\": 1}\n"[..],
            "neither a `vramtop record` file nor a memory snapshot",
        ),
        (
            "first.jsonl",
            &b"{\"time_unix_ms\":17966"[..],
            "cut mid-write",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, content).expect("write");
        let path = file.to_str().expect("a UTF-8 path");
        let (code, out, err) = run_vramtop(&["open", path, "--summary"], None);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(why), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
    }
}

/// Every way of opening `path` (`-`: `stdin` piped in): the viewer, the
/// summary, its JSON, `--at`, `--no-trace`.
fn every_way_of_opening(path: &str) -> [Vec<&str>; 5] {
    [
        vec!["open", path],
        vec!["open", path, "--summary"],
        vec!["open", path, "--summary", "--json"],
        vec!["open", path, "--at", "1"],
        vec!["open", path, "--summary", "--no-trace"],
    ]
}

#[test]
fn an_empty_file_and_empty_standard_input_are_said_alike_in_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["empty.jsonl", "empty.pickle", "empty"] {
        let file = dir.path().join(name);
        std::fs::write(&file, b"").expect("write");
        let path = file.to_str().expect("a UTF-8 path");
        for args in every_way_of_opening(path) {
            let (code, out, err) = run_vramtop(&args, None);
            assert_eq!(code, 2, "{args:?}: {out}{err}");
            assert!(
                err.contains(&format!(
                    "{name}: the file is empty: no memory snapshot and no `vramtop record` sample"
                )),
                "{args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        }
    }
    for args in every_way_of_opening("-") {
        let (code, out, err) = run_vramtop_with_stdin(&args, b"");
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        // Not "not a pickle" here and "no samples" there: the same words.
        assert!(
            err.contains(
                "standard input: it is empty: no memory snapshot and no `vramtop record` sample"
            ),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn json_without_a_sample_is_neither_a_recording_nor_a_snapshot_however_opened() {
    let dir = tempfile::tempdir().expect("temp dir");
    // An array was refused as a snapshot ("looks like JSON") and an
    // object summed up as a recording, or called one by the viewer's
    // refusal: both are neither, in the same words, whatever the name.
    for (name, content) in [
        ("array.json", &b"[1,2]"[..]),
        ("object.json", &b"{\"a\":1}"[..]),
        ("array.jsonl", &b"[1,2]\n"[..]),
        ("object.jsonl", &b"{\"a\":1}\n"[..]),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, content).expect("write");
        let path = file.to_str().expect("a UTF-8 path");
        for (args, stdin) in every_way_of_opening(path)
            .into_iter()
            .map(|a| (a, None))
            .chain(
                every_way_of_opening("-")
                    .into_iter()
                    .map(|a| (a, Some(content))),
            )
        {
            let (code, out, err) = match stdin {
                Some(bytes) => run_vramtop_with_stdin(&args, bytes),
                None => run_vramtop(&args, None),
            };
            assert_eq!(code, 2, "{name} {args:?}: {out}{err}");
            assert!(
                err.contains(": neither a `vramtop record` file nor a memory snapshot: no line is a recorded sample (1 line JSON but no sample;"),
                "{name} {args:?}: {err}"
            );
            assert!(
                !err.contains("is a `vramtop record` file"),
                "{name} {args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{name} {args:?}: {err}");
        }
    }
}

#[test]
fn the_viewer_and_snapshot_options_refuse_a_recording_in_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("r.jsonl");
    record(&file, "200ms");
    let path = file.to_str().expect("a UTF-8 path");
    for (args, why) in [
        (vec!["open", path], "the viewer opens snapshots"),
        (
            vec!["open", path, "--summary", "--no-trace"],
            "file: --no-trace is for snapshots",
        ),
        (
            vec!["open", path, "--summary", "--group", "file-line"],
            "file: --group is for snapshots",
        ),
        (
            vec![
                "open",
                path,
                "--summary",
                "--no-trace",
                "--group",
                "file-line",
            ],
            "file: --no-trace and --group are for snapshots",
        ),
    ] {
        let (code, _, err) = run_vramtop(&args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("is a `vramtop record` file"),
            "{args:?}: {err}"
        );
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_summary_option_without_summary_on_a_recording_says_its_summary_not_the_viewer() {
    let dir = tempfile::tempdir().expect("temp dir");
    // No .jsonl: the content says it is a recording, as `open` reads it.
    let file = dir.path().join("night.log");
    record(&file, "200ms");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, _, err) = run_vramtop(&["open", path, "--top", "3", "--at", "2"], None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "night.log is a `vramtop record` file: --top applies to its summary: add --summary ("
        ),
        "{err}"
    );
    assert!(err.contains(" --summary --top 3 --at 2)"), "{err}");
    assert!(!err.contains("viewer"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // The line it gives is one that works.
    let (code, out, err) = run_vramtop(
        &["open", path, "--summary", "--top", "3", "--at", "2"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(line 2 of"), "{out}");
    let (code, _, err) = run_vramtop(&["open", path, "--group", "function", "--at", "2"], None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--group is for snapshots: leave it out (vramtop open "),
        "{err}"
    );
    assert!(
        err.ends_with(" --at 2) (see 'vramtop open --help')\n"),
        "{err}"
    );
}

#[test]
fn an_offset_of_several_units_is_read_and_junk_or_overflow_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("r.jsonl");
    record(&file, "300ms");
    let path = file.to_str().expect("a UTF-8 path");
    // 1h30m after a 300 ms recording: its last sample, 1h30m less a
    // fraction of a second before the time asked.
    let (code, out, err) = run_vramtop(&["open", path, "--at", "+1h30m"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(line 3 of"), "{out}");
    assert!(out.contains("before the time asked"), "{out}");
    for (offset, why) in [
        (
            "+1h30",
            "is not a duration after the first sample: write e.g. +90s, +2m30s",
        ),
        ("+2m30x", "is not a duration after the first sample"),
        (
            "+99999999999999999999h",
            "is too long: the most is 277777777h",
        ),
        (
            "+200000000h200000000h",
            "is too long: the most is 277777777h",
        ),
    ] {
        let (code, _, err) = run_vramtop(&["open", path, "--at", offset], None);
        assert_eq!(code, 2, "{offset}: {err}");
        assert!(err.contains(why), "{offset}: {err}");
        // A recording's form: not said to be no moment of a trace.
        assert!(!err.contains("is not a moment"), "{offset}: {err}");
        assert_eq!(err.lines().count(), 1, "{offset}: {err}");
    }
}

#[test]
fn at_prints_a_samples_probes_and_their_allocator_figures_as_once_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("probed.jsonl");
    let allocator = serde_json::json!({
        "source": "pid 4242 (probe)", "pid": 4242, "allocated": 3u64 << 30,
        "reserved": 4u64 << 30, "num_ooms": 1, "num_alloc_retries": 2,
        "fragmentation": {"fragmentation": 0.5, "external_free": 1u64 << 30,
                          "largest_free_block": 512u64 << 20},
        "segments_received": true,
    });
    let sample = serde_json::json!({
        "time_unix_ms": 1_796_613_245_000u64, "backend": "nvml",
        "gpus": [{"status": "ok", "index": 0, "name": "H100", "memory_used": 5u64 << 30,
                  "processes": [{"pid": 4242, "command": "python train.py",
                                 "used_memory": 5u64 << 30}],
                  "allocator": allocator, "allocators": [allocator]}],
        "probes": [{"socket": "/run/user/1/vramtop/4242.sock", "pid": 4242,
                    "status": "connected", "command": "python train.py",
                    "devices": [{"device": 0, "gpu": 0, "allocator": allocator},
                                {"device": 1, "gpu": null, "allocator": allocator}]}],
    });
    std::fs::write(&file, format!("{sample}\n")).expect("write");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, out, err) = run_vramtop(&["open", path, "--at", "1"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\nprobe: pid 4242, connected, python train.py\n"),
        "{out}"
    );
    // The device no GPU is mapped to: only the probe's lines show it.
    assert!(
        out.contains("  CUDA device 1: allocated 3.00 GiB, reserved 4.00 GiB"),
        "{out}"
    );
    assert!(!out.contains("not shown"), "{out}");
}

#[test]
fn at_prints_the_sample_there_as_once_prints_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("r.jsonl");
    record(&file, "500ms");
    let path = file.to_str().expect("a UTF-8 path");
    let (code, out, err) = run_vramtop(&["open", path, "--at", "peak"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("at: the sample of "), "{out}");
    assert!(
        out.contains("\nbackend: sim\nGPU 0  Simulated H100 80GB\n"),
        "{out}"
    );
    assert!(out.contains("  allocator: pid 4242"), "{out}");
    // With --summary: the summary, then the sample.
    let (code, out, err) = run_vramtop(&["open", path, "--summary", "--at", "start"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("5 samples, 1 GPU"), "{out}");
    assert!(out.contains("(line 1 of"), "{out}");
    // A time of day or an offset: the sample nearest it, whichever that is.
    let (code, out, err) = run_vramtop(&["open", path, "--at", "+200ms"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("at: the sample of "), "{out}");
    let (code, out, err) = run_vramtop(&["open", path, "--summary", "--json", "--at", "2"], None);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["at"]["line"], 2);
    assert_eq!(json["at"]["sample"]["backend"], "sim");
    // A sample's number past the last, or 0, is an error naming how many.
    for n in ["0", "6"] {
        let (code, out, err) = run_vramtop(&["open", path, "--at", n], None);
        assert_eq!(code, 2, "--at {n}: {out}{err}");
        assert!(
            err.contains("the recording has 5 samples (--at takes 1 to 5,"),
            "{err}"
        );
    }
    // A recording read twice cannot come from standard input.
    let bytes = std::fs::read(&file).expect("the recording");
    let (code, _, err) = run_vramtop_with_stdin(&["open", "-", "--at", "end"], &bytes);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("save standard input to a file first"), "{err}");
    // No summary was asked: none is named.
    assert!(
        err.contains("(where the moment is, then the sample)"),
        "{err}"
    );
    let (code, _, err) = run_vramtop_with_stdin(&["open", "-", "--summary", "--at", "end"], &bytes);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("(the summary, then the sample)"), "{err}");
    // A time is a recording's.
    let (code, _, err) = run_vramtop(&["open", "x.pickle", "--summary", "--at", "03:14"], None);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn replay_and_diff_of_a_recording_say_what_it_is_and_which_command_reads_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rec.jsonl");
    record(&file, "300ms");
    let path = file.to_str().expect("a UTF-8 path");
    let said = format!(
        "{path}: a `vramtop record` file, not a memory snapshot: `vramtop open {path} --summary` \
         summarises it"
    );
    for args in [vec!["replay", path], vec!["diff", path, path]] {
        let (code, _, err) = run_vramtop(&args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(&said), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // Other JSON stays refused as before: not a recording.
    let other = dir.path().join("other.json");
    std::fs::write(&other, "{\"a\": 1}\n").expect("write");
    let other = other.to_str().expect("a UTF-8 path");
    let (code, _, err) = run_vramtop(&["replay", other], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a pickle: looks like JSON"), "{err}");
    assert!(!err.contains("vramtop record"), "{err}");
}
