//! Every parser of text a user or another process hands vramtop, fed
//! arbitrary input: probe lines, the config file, `PYTORCH_CUDA_ALLOC_CONF`,
//! the stress panel's fields, size and duration options, `/proc` status,
//! `CUDA_VISIBLE_DEVICES` and text handed over as a snapshot. Nothing may panic, and every refusal is one line
//! of bounded length (input is quoted cut short).

use proptest::prelude::*;
use vramtop::alloc::AllocatorConfig;
use vramtop::app::stress::{parse_settings, parse_typed_size};
use vramtop::cli::config::parse_text;
use vramtop::cli::{duration_arg, size_arg};
use vramtop::probe::pid::{VisibleDevices, parse_nspid};
use vramtop::probe::protocol::parse_line;

/// The longest refusal any of them may give.
const MAX_ERROR_BYTES: usize = 1_000;

fn assert_one_line(what: &str, error: &str) -> Result<(), TestCaseError> {
    prop_assert!(!error.contains('\n'), "{what}: more than one line: {error}");
    prop_assert!(
        error.len() <= MAX_ERROR_BYTES,
        "{what}: {} bytes",
        error.len()
    );
    Ok(())
}

/// Text near the inputs' own shapes: keys, separators, numbers and units.
fn near_miss() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("max_split_size_mb".to_string()),
            Just("expandable_segments".to_string()),
            Just("roundup_power2_divisions".to_string()),
            Just("garbage_collection_threshold".to_string()),
            Just("backend:".to_string()),
            Just(":".to_string()),
            Just(",".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just(">".to_string()),
            Just("=".to_string()),
            Just("\"".to_string()),
            Just("\n".to_string()),
            Just("True".to_string()),
            Just("-1".to_string()),
            Just("1e309".to_string()),
            Just("18446744073709551616".to_string()),
            Just("GiB".to_string()),
            Just("ms".to_string()),
            Just("NSpid:".to_string()),
            Just("GPU-".to_string()),
            "[0-9]{1,25}",
            "\\PC{0,8}",
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{0,200}", near_miss()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn probe_lines_of_any_bytes_parse_or_are_refused_in_one_line(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        if let Err(e) = parse_line(&bytes) {
            assert_one_line("probe line", &e.to_string())?;
        }
    }

    #[test]
    fn json_shaped_probe_lines_parse_or_are_refused_in_one_line(
        kind in prop_oneof![Just("hello"), Just("stats"), Just("oom"), Just("snapshot_done"), Just("x")],
        body in "\\PC{0,120}",
    ) {
        let line = format!("{{\"v\": 2, \"type\": \"{kind}\", {body}}}");
        if let Err(e) = parse_line(line.as_bytes()) {
            assert_one_line("probe line", &e.to_string())?;
        }
    }

    #[test]
    fn allocator_settings_of_any_text_parse_or_are_refused_in_one_line(text in any_text()) {
        if let Err(e) = AllocatorConfig::parse(&text) {
            assert_one_line("PYTORCH_CUDA_ALLOC_CONF", &e.to_string())?;
        }
        if let Err(e) = parse_settings(&text) {
            assert_one_line("stress settings field", &e)?;
        }
    }

    #[test]
    fn sizes_and_durations_of_any_text_parse_or_are_refused_in_one_line(text in any_text()) {
        for (what, result) in [
            ("size option", size_arg(&text).map(|_| ())),
            ("duration option", duration_arg(&text).map(|_| ())),
            ("stress size field", parse_typed_size(&text).map(|_| ())),
            ("diff --devices", vramtop::cli::diff::parse_device_pair(&text).map(|_| ())),
        ] {
            if let Err(e) = result {
                assert_one_line(what, &e)?;
            }
        }
    }

    #[test]
    fn config_files_of_any_text_parse_or_are_refused_in_one_line(
        text in prop_oneof![
            any_text(),
            (
                prop_oneof![
                    Just("interval"), Just("backend"), Just("sim_gpus"), Just("sim_memory"),
                    Just("sim_seed"), Just("sim_training"), Just("sim_dataloader_workers"),
                    Just("no_color"), Just("ascii"), Just("nope"),
                ],
                prop_oneof![
                    Just("\"2s\"".to_string()), Just("4".to_string()), Just("-4".to_string()),
                    Just("true".to_string()), Just("\"sim\"".to_string()),
                    Just("9223372036854775807".to_string()), Just("[1, 2]".to_string()),
                    "\"\\PC{0,40}\"",
                ],
            )
                .prop_map(|(k, v)| format!("{k} = {v}\n")),
        ],
    ) {
        if let Err(e) = parse_text("config.toml", &text) {
            assert_one_line("config file", &e.to_string())?;
        }
    }

    #[test]
    fn text_for_the_terminal_keeps_no_control_character_but_lines_and_tabs(
        text in prop::collection::vec(
            prop_oneof![any::<char>(), prop::char::range('\u{0}', '\u{9f}')],
            0..200,
        )
        .prop_map(|chars| chars.into_iter().collect::<String>())
    ) {
        let shown = vramtop::quote::for_terminal(&text);
        prop_assert!(
            !shown.contains(|c: char| c.is_control() && c != '\n' && c != '\t'),
            "{shown:?}"
        );
        // Nothing is lost: the text's other characters are all there, in
        // order (the escapes come between them).
        let mut rest = shown.chars();
        for c in text.chars().filter(|c| !c.is_control() || *c == '\n' || *c == '\t') {
            prop_assert!(rest.any(|s| s == c), "{c:?} of {text:?} in {shown:?}");
        }
    }

    #[test]
    fn text_read_as_a_snapshot_is_refused_in_one_line(text in any_text()) {
        if let Err(e) = vramtop::snapshot::read_snapshot(text.as_bytes()) {
            assert_one_line("text as a snapshot", &e.to_string())?;
        }
    }

    #[test]
    fn proc_status_and_visible_devices_of_any_text_never_panic(text in any_text()) {
        let pids = parse_nspid(&text);
        prop_assert!(pids.len() <= text.len());
        let _ = VisibleDevices::parse(&text);
    }
}

#[test]
fn a_long_diff_devices_value_is_quoted_cut() {
    let long = "7:".repeat(100_000);
    let e = vramtop::cli::diff::parse_device_pair(&long).expect_err("not GPU:GPU");
    assert!(e.len() < MAX_ERROR_BYTES, "{} bytes", e.len());
    assert!(!e.contains('\n'));
}

/// Text a user may hand over as a snapshot, and what the refusal starts
/// with: what the text is, not the pickle opcode its first bytes happen to
/// be ('T' BINSTRING, 'L' LONG, 'N' NONE then 'a' APPEND).
#[test]
fn text_handed_over_as_a_snapshot_is_said_as_text() {
    let status = std::fs::read("/proc/self/status").unwrap_or_else(|_| b"Name:\tx\n".to_vec());
    let cases: [(&[u8], &str); 6] = [
        (
            b"Traceback (most recent call last):\n  File \"train.py\", line 3\n",
            "not a pickle: this is a Python traceback",
        ),
        (b"Loading model...\n", "not a pickle: looks like text"),
        (b"Name: foo\n", "not a pickle: looks like text"),
        (status.as_slice(), "not a pickle: looks like text"),
        (b"hello world\n", "not a pickle: looks like text"),
        (b"{\"segments\": []}\n", "not a pickle: looks like JSON"),
    ];
    for (text, said) in cases {
        let e = vramtop::snapshot::read_snapshot(text).expect_err("text is no snapshot");
        let e = e.to_string();
        assert!(
            e.starts_with(said),
            "{:?}: {e}",
            String::from_utf8_lossy(text)
        );
        assert!(!e.contains(" at byte "), "{e}");
        assert!(!e.contains('\n') && e.len() <= MAX_ERROR_BYTES, "{e}");
    }
}
