//! The binary's handling of awkward input: long invalid arguments, bad
//! config values the command line overrides, and files in folders that
//! do not exist or cannot be written.

mod common;

use common::skip::{Prerequisite, skip};
use std::path::Path;
use std::process::Command;

/// Runs vramtop with `args`, no config file of the user's and `env` set;
/// (exit code, stdout, stderr).
fn vramtop(args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let home = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtop"));
    common::isolate_probes(&mut cmd);
    cmd.args(args)
        .env("XDG_CONFIG_HOME", home.path())
        .env("XDG_STATE_HOME", home.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::outcome(cmd.output().expect("the binary runs"))
}

#[test]
fn a_long_invalid_argument_is_quoted_cut_short() {
    let long = "7".repeat(100_000) + "parsecs";
    for flag in ["--interval", "--sim-memory", "--sim-training"] {
        let (code, _, err) = vramtop(&[flag, &long, "--once"], &[]);
        assert_eq!(code, 2, "{flag}");
        assert!(err.len() < 1000, "{flag}: {} bytes of stderr", err.len());
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(err.contains("100007 bytes"), "{flag}: {err}");
    }
}

#[test]
fn a_bad_config_value_overridden_on_the_command_line_is_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "interval = \"soon\"\n").expect("write");
    let config = config.display().to_string();
    let (code, _, err) = vramtop(
        &[
            "--config",
            &config,
            "--interval",
            "2s",
            "--backend",
            "sim",
            "--once",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("line 1: 'interval': 'soon' is not a duration"),
        "{err}"
    );
}

#[test]
fn record_into_a_missing_folder_refuses_and_says_the_folder_is_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("not-yet/runs/a.jsonl");
    let (code, _, err) = vramtop(
        &[
            "record",
            "--backend",
            "sim",
            &file.display().to_string(),
            "--duration",
            "200ms",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not-yet/runs") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!dir.path().join("not-yet").exists(), "no folder is made");
}

#[test]
fn record_into_a_folder_suggests_a_json_lines_file_in_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().display().to_string();
    let (code, _, err) = vramtop(
        &["record", "--backend", "sim", &folder, "--duration", "200ms"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("it is a folder"), "{err}");
    assert!(
        err.contains("NAME.jsonl"),
        "record writes JSON lines: {err}"
    );
    assert!(!err.contains(".pickle"), "{err}");
}

#[test]
fn a_log_file_in_a_missing_folder_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("logs/vramtop.log");
    let (code, _, err) = vramtop(
        &[
            "--log-file",
            &log.display().to_string(),
            "--backend",
            "sim",
            "--once",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("logs") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!dir.path().join("logs").exists(), "no folder is made");
}

#[test]
fn a_log_that_cannot_be_written_is_said_once() {
    if !Path::new("/dev/full").exists() {
        skip(
            "a_log_that_cannot_be_written_is_said_once",
            "no /dev/full here",
            Prerequisite::OnlySomeMachines,
        );
        return;
    }
    // Every write to /dev/full fails with ENOSPC.
    let (code, out, err) = vramtop(
        &[
            "--log-file",
            "/dev/full",
            "--backend",
            "sim",
            "--once",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"gpus\""), "the sample is still printed");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot write the log"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("/dev/full"), "{err}");
}

#[test]
fn an_endless_device_is_refused_at_its_first_bytes_by_every_reading_command() {
    let zero = Path::new("/dev/zero");
    if !zero.exists() {
        skip(
            "an_endless_device_is_refused_at_its_first_bytes_by_every_reading_command",
            "no /dev/zero on this machine",
            Prerequisite::OnlySomeMachines,
        );
        return;
    }
    let commands: [&[&str]; 5] = [
        &["open", "/dev/zero", "--summary"],
        &["open", "/dev/zero", "--summary", "--json"],
        &["open", "/dev/zero", "--summary", "--no-trace"],
        &["replay", "/dev/zero"],
        &["diff", "/dev/zero", "/dev/zero"],
    ];
    for args in commands {
        let (code, _, err) = vramtop(args, &[]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("first byte 0x00 is not a pickle opcode"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_negative_or_garbled_top_is_a_count_error_and_json_refuses_ascii() {
    for (args, said) in [
        (
            vec!["open", "x.pickle", "--summary", "--top", "-1"],
            "'-1' is negative: a count is 0 or more",
        ),
        (
            vec!["diff", "a.pickle", "b.pickle", "--top", "x3"],
            "'x3' is not a count",
        ),
        (
            vec!["open", "x.pickle", "--summary", "--json", "--ascii"],
            "'--json' cannot be used with '--ascii'",
        ),
    ] {
        let (code, out, err) = vramtop(&args, &[]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_folder_given_as_a_snapshot_is_said_without_the_systems_error_number() {
    // "cannot read DIR: Is a directory (os error 21)": the number is the
    // system's and says nothing the words do not.
    let dir = std::env::temp_dir();
    let dir = dir.display().to_string();
    for args in [
        &["open", &dir][..],
        &["open", &dir, "--summary"],
        &["replay", &dir],
        &["diff", &dir, &dir],
        &["--config", &dir, "--once"],
    ] {
        let (code, _, err) = common::run_vramtop(args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(": Is a directory"), "{args:?}: {err}");
        assert!(!err.contains("os error"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// Every command that reads a snapshot says a bad file in the same one
/// line (but for what `open` adds on recordings) with the same exit code: an empty file, a folder, text, a cut
/// pickle and a pickle that is no snapshot, whichever command met it
/// (`open` with stdout not a terminal included: the file is said before
/// the terminal).
#[test]
fn every_snapshot_command_says_a_bad_file_in_the_same_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.pickle");
    // {'segments': []}, protocol 2: a snapshot of nothing.
    std::fs::write(
        &good,
        b"\x80\x02}q\x00X\x08\x00\x00\x00segmentsq\x01]q\x02s.",
    )
    .unwrap();
    let folder = dir.path().join("folder.pickle");
    std::fs::create_dir(&folder).unwrap();
    let bad: [(&str, Option<&[u8]>, &str); 8] = [
        ("empty.pickle", Some(b""), "the file is empty"),
        ("folder.pickle", None, "Is a directory"),
        (
            "notes.txt",
            Some(b"hello world\n"),
            "not a pickle: looks like text",
        ),
        // Text whose first bytes are opcodes that can start a pickle ('T'
        // BINSTRING, 'L' LONG, 'N' NONE then 'a' APPEND) is text all the same.
        (
            "oom.txt",
            Some(b"Traceback (most recent call last):\n  File \"train.py\", line 3\n"),
            "not a pickle: this is a Python traceback, not a memory snapshot: save one",
        ),
        (
            "log.txt",
            Some(b"Loading model...\n"),
            "not a pickle: looks like text",
        ),
        (
            "status.txt",
            Some(b"Name: foo\nState: R (running)\n"),
            "not a pickle: looks like text",
        ),
        (
            "cut.pickle",
            // Cut inside its first 16-byte frame.
            Some(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94"),
            "the file ends early",
        ),
        (
            "dict.pickle",
            // {'a': 1}, protocol 2.
            Some(b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."),
            "not a PyTorch memory snapshot: top level is a dict without a 'segments' key",
        ),
    ];
    let good = good.display().to_string();
    for (name, bytes, expected) in bad {
        let path = dir.path().join(name);
        if let Some(bytes) = bytes {
            std::fs::write(&path, bytes).unwrap();
        }
        let path = path.display().to_string();
        let commands: [Vec<&str>; 7] = [
            vec!["open", &path],
            vec!["open", &path, "--summary"],
            vec!["open", &path, "--summary", "--no-trace"],
            vec!["replay", &path],
            vec!["replay", &path, "--alloc-conf", "expandable_segments:True"],
            vec!["diff", &good, &path],
            vec!["diff", &path, &good],
        ];
        // `open` reads `vramtop record` files too, and its line may say
        // so; `replay` and `diff` read snapshots only, and never do: one
        // line per kind.
        let (mut said_by_open, mut said_by_others): (Option<String>, Option<String>) = (None, None);
        for args in commands {
            let (code, out, err) = vramtop(&args, &[]);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(out.is_empty(), "{args:?}: {out}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.contains(expected), "{args:?}: {err}");
            assert!(err.contains(name), "{args:?} names the file: {err}");
            let said = if args[0] == "open" {
                &mut said_by_open
            } else {
                assert!(!err.contains("record"), "{args:?}: {err}");
                &mut said_by_others
            };
            match said {
                None => *said = Some(err),
                Some(first) => assert_eq!(&err, first, "{args:?} against {}", args[0]),
            }
        }
    }
}
