//! Each command takes only its own options, conflicting options are
//! refused, sizes need a unit, one error prefix and exit-code table, replay's
//! verdicts, doctor's backend and broken config, completions and man page.

mod common;

use vramtop::cli::ERROR_PREFIX;

fn vramtop(args: &[&str]) -> (i32, String, String) {
    common::run_vramtop(args, None)
}

/// Asserts exit 2 with clap's usage error under the one prefix, on one
/// line.
fn usage_error(args: &[&str]) -> String {
    let (code, out, err) = vramtop(args);
    assert_eq!(code, 2, "{args:?}: {out}\n{err}");
    assert!(err.starts_with(ERROR_PREFIX), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

#[test]
fn a_usage_error_is_one_line_with_clap_s_message_and_the_command_s_help() {
    for (args, says, help) in [
        (
            &["--bogus"][..],
            "unexpected argument '--bogus' found",
            "vramtop --help",
        ),
        (
            &["open"],
            "the following required arguments were not provided: <FILE>",
            "vramtop open --help",
        ),
        (
            &["open", "a", "b", "c"],
            "unexpected argument 'b' found",
            "vramtop open --help",
        ),
        // clap's tips and lists stay, on the line.
        (
            &["open", "x.pickle", "--jsn"],
            "unexpected argument '--jsn' found; tip: a similar argument exists: '--json'",
            "vramtop open --help",
        ),
        (
            &["completions", "tcsh"],
            "[possible values: bash, elvish, fish, powershell, zsh]; tip: a similar value",
            "vramtop completions --help",
        ),
    ] {
        let (code, out, err) = vramtop(args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        assert_eq!(
            err.lines().count(),
            1,
            "{args:?}: one line, not clap's block:\n{err}"
        );
        assert!(err.starts_with(ERROR_PREFIX), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            err.ends_with(&format!(" (see '{help}')\n")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("Usage:"), "{args:?}: {err}");
    }
    // An argument clap quotes whole is cut short, its newline escaped.
    let long = "y".repeat(300);
    let err = usage_error(&["open", "x.pickle", &long]);
    assert!(err.contains("… (300 bytes)' found"), "{err}");
    let err = usage_error(&["open", "x.pickle", "c\nd"]);
    assert!(err.contains("unexpected argument 'c\\nd' found"), "{err}");
    // Help and the version are not errors: printed in full, exit 0.
    for args in [&["--help"][..], &["open", "--help"], &["--version"]] {
        let (code, out, err) = vramtop(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
        assert!(out.contains("vramtop"), "{args:?}: {out}");
    }
    let (_, help, _) = vramtop(&["open", "--help"]);
    assert!(help.contains("Usage: vramtop open"), "{help}");
    assert!(help.lines().count() > 10, "{help}");
}

#[test]
fn a_usage_error_quotes_an_argument_with_every_control_character_escaped() {
    // Terminal escape sequences (a colour, a window title ended by BEL), a
    // tab and a newline, alone and together: each control character shows
    // as its escape and the printable characters around it stay, so the
    // quote reads as what was typed and nothing reaches the terminal.
    for (args, says) in [
        (
            &["open", "x.pickle", "a\u{1b}[31mred\u{1b}]0;TITLE\u{7}b"][..],
            "unexpected argument 'a\\u{1b}[31mred\\u{1b}]0;TITLE\\u{7}b' found",
        ),
        (
            &["open", "x.pickle", "a\tb"],
            "unexpected argument 'a\\tb' found",
        ),
        (
            &["open", "x.pickle", "a\u{1b}[31m\tb\nc"],
            "unexpected argument 'a\\u{1b}[31m\\tb\\nc' found",
        ),
        // An invalid value, quoted by clap and by the value's parser.
        (
            &["demo", "--sim-memory", "1\u{1b}[2JGiB\u{7}"],
            "invalid value '1\\u{1b}[2JGiB\\u{7}' for '--sim-memory <SIZE>': \
             '1\\u{1b}[2JGiB\\u{7}' is not a size",
        ),
        (
            &["completions", "\u{1b}[31mbash\t"],
            "invalid value '\\u{1b}[31mbash\\t' for '<SHELL>'",
        ),
    ] {
        let err = usage_error(args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !err.trim_end_matches('\n').chars().any(char::is_control),
            "{args:?}: {err:?}"
        );
    }
    // A long argument is still cut short, escapes and all.
    let long = "\u{1b}[31m".repeat(40);
    let err = usage_error(&["open", "x.pickle", &long]);
    let shown = "\\u{1b}[31m".repeat(12);
    assert!(
        err.contains(&format!("unexpected argument '{shown}… (200 bytes)' found")),
        "{err}"
    );
    assert!(
        !err.trim_end_matches('\n').chars().any(char::is_control),
        "{err:?}"
    );
}

#[test]
fn an_option_a_command_cannot_use_is_a_usage_error() {
    for args in [
        &["replay", "x.pickle", "--backend", "nvml"][..],
        &["replay", "x.pickle", "--sim-gpus", "8"],
        &["replay", "x.pickle", "--interval", "5s"],
        &["replay", "x.pickle", "--no-color"],
        &["diff", "a.pickle", "b.pickle", "--no-color"],
        &["demo", "--sim-gpus", "2"],
        &["demo", "--backend", "sim"],
        &["doctor", "--interval", "1s"],
        &["scenario", "--sim-memory", "8GiB"],
        &["open", "x.pickle", "--backend", "sim"],
        &["record", "r.jsonl", "--ascii"],
    ] {
        let err = usage_error(args);
        // clap's tip for an unknown option ("to pass '--backend' as a
        // value, use '-- --backend'") does not apply: the command does not
        // take it.
        assert!(!err.contains("as a value"), "{args:?}: {err}");
    }
}

#[test]
fn a_summary_option_without_summary_says_it_applies_to_the_summary() {
    // clap said "the following required arguments were not provided:
    // --summary", as if `open` always needed it.
    let err = usage_error(&["open", "x.pickle", "--top", "3"]);
    assert!(
        err.contains("--top applies to the summary, not the viewer: add --summary"),
        "{err}"
    );
    assert!(!err.contains("required arguments"), "{err}");
    assert!(err.ends_with("(see 'vramtop open --help')\n"), "{err}");
    let err = usage_error(&["open", "x.pickle", "--group", "function", "--top", "3"]);
    assert!(
        err.contains("--top and --group apply to the summary"),
        "{err}"
    );
    // JSON is not the text summary.
    let err = usage_error(&["open", "x.pickle", "--json"]);
    assert!(
        err.contains("--json prints the summary as JSON: add --summary"),
        "{err}"
    );
    assert!(!err.contains("text summary"), "{err}");
}

#[test]
fn open_at_without_summary_is_the_viewers_and_no_usage_error() {
    // The viewer starts at the moment: off a terminal it says it needs one.
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, _, err) = vramtop(&["open", &path, "--at", "peak"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the snapshot viewer needs a terminal"),
        "{err}"
    );
    assert!(!err.contains("--summary, not the viewer"), "{err}");
}

#[test]
fn diff_of_two_files_refuses_device_which_is_for_one_files_two_moments() {
    // --device picks the GPU of `diff FILE --at A --at B`; with two files
    // it was accepted and ignored.
    // The refusal says what each form takes, not only what clashed, and
    // names the options as given.
    for (args, given) in [
        (
            &["diff", "a.pickle", "b.pickle", "--device", "0"][..],
            "--device is for one file, and two were given",
        ),
        (
            &["diff", "a.pickle", "b.pickle", "--at", "5"],
            "--at is for one file, and two were given",
        ),
        (
            &[
                "diff",
                "a.pickle",
                "--at",
                "1",
                "--at",
                "2",
                "--devices",
                "0:1",
            ],
            "--devices pairs the GPUs of two files, and --at is for one file",
        ),
        (
            &["diff", "a.pickle", "--devices", "0:1", "--device", "1"],
            "--devices pairs the GPUs of two files, and --device is for one file",
        ),
        (
            &[
                "diff", "a.pickle", "b.pickle", "--at", "1", "--at", "2", "--device", "0",
            ],
            "--at and --device are for one file, and two were given",
        ),
    ] {
        let err = usage_error(args);
        // The whole line: checked by vramtop after parsing, not read out
        // of clap's conflict message.
        assert!(
            err.starts_with(&format!("vramtop: error: {given}: diff ")),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("diff FILE --at A --at B") && err.contains("--devices GPU:GPU"),
            "{args:?}: {err}"
        );
        assert!(err.ends_with("(see 'vramtop diff --help')\n"), "{err}");
    }
    // One file and nothing else: both forms said, not clap's "<AFTER>".
    assert_eq!(
        usage_error(&["diff", "a.pickle"]),
        "vramtop: error: diff compares two snapshots or two moments of one, and AFTER was not \
         provided: diff BEFORE AFTER, or diff FILE --at A --at B (see 'vramtop diff --help')\n"
    );
    let err = usage_error(&["diff", "a.pickle", "--device", "0"]);
    assert!(err.contains("not provided"), "{err}");
    assert_eq!(
        err,
        "vramtop: error: --device picks the GPU of two moments of one file, and --at was not \
         provided: diff FILE --at A --at B --device N (see 'vramtop diff --help')\n"
    );
}

#[test]
fn dashboard_options_before_a_command_are_refused_not_ignored() {
    let err = usage_error(&["--sim-memory", "24GiB", "demo"]);
    assert!(
        err.contains("tip: a command's options come after it: vramtop demo --sim-memory"),
        "{err}"
    );
    usage_error(&["--backend", "sim", "doctor"]);
}

/// The tip for options written before their command names a command
/// line only where that command line parses, for every command and
/// every option written before it; a command that takes no such option
/// is said to take none. The tip named `vramtop record --ascii`, itself
/// refused, and `vramtop help --no-color`.
#[test]
fn the_tip_for_an_option_before_its_command_never_names_a_refused_command_line() {
    use clap::{CommandFactory as _, Parser as _};
    let mut root = vramtop::cli::Cli::command();
    root.build();
    let commands: Vec<String> = root
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    assert!(commands.iter().any(|c| c == "help"), "{commands:?}");
    let options: [&[&str]; 9] = [
        &["--no-color"],
        &["--ascii"],
        &["--once"],
        &["--sim-memory", "24GiB"],
        &["--interval", "2s"],
        &["--backend", "sim"],
        &["--config", "c.toml"],
        &["--stress-cap=2GiB"],
        &["--no-color", "--ascii"],
    ];
    let mut named = 0;
    for command in &commands {
        for option in options {
            // The command alone, and with an argument (its FILE).
            for tail in [&[][..], &["x.pickle"]] {
                let mut args: Vec<String> = option.iter().map(|a| (*a).to_string()).collect();
                args.push(command.clone());
                args.extend(tail.iter().map(|a| (*a).to_string()));
                let Some(tip) = vramtop::cli::misplaced_options_tip(&args) else {
                    panic!("{args:?}: no tip");
                };
                if let Some(line) = tip.strip_prefix("a command's options come after it: vramtop ")
                {
                    named += 1;
                    let argv = std::iter::once("vramtop").chain(line.split(' '));
                    let parsed = vramtop::cli::help::help_command_args(
                        argv.map(std::ffi::OsString::from).collect(),
                    );
                    match vramtop::cli::Cli::try_parse_from(parsed) {
                        Ok(cli) => assert_eq!(cli.usage_problem(), None, "{args:?}: {tip}"),
                        Err(e) => assert_eq!(
                            e.kind(),
                            clap::error::ErrorKind::DisplayHelp,
                            "{args:?}: {tip}: {e}"
                        ),
                    }
                } else if !tip.starts_with("a command's options come after it: write ") {
                    let sub = root.find_subcommand(command).expect("the command");
                    let taken = |o: &str| {
                        let long = o.split('=').next().unwrap_or(o).trim_start_matches('-');
                        sub.get_arguments().any(|a| a.get_long() == Some(long))
                    };
                    assert!(
                        tip.starts_with(&format!("'{command}' takes no --")),
                        "{args:?}: {tip}"
                    );
                    assert!(
                        option.iter().any(|o| o.starts_with('-') && !taken(o)),
                        "{args:?}: {tip}"
                    );
                }
            }
        }
    }
    // Some command lines are named (`vramtop open --no-color x.pickle`).
    assert!(named > 5, "{named}");
    // As the binary says it.
    let err = usage_error(&["--ascii", "record", "x.jsonl"]);
    assert!(
        err.contains("; tip: 'record' takes no --ascii (see"),
        "{err}"
    );
    let err = usage_error(&["--no-color", "open", "my file.pickle"]);
    assert!(
        err.contains(
            "tip: a command's options come after it: vramtop open --no-color 'my file.pickle' (see"
        ),
        "{err}"
    );
}

#[test]
fn demo_runs_on_the_simulated_memory_it_is_given() {
    let (code, out, err) = vramtop(&["demo", "--sim-memory", "24GiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("simulated 24 GiB GPU"), "{out}");
    let (code, out, _) = vramtop(&["demo"]);
    assert_eq!(code, 0);
    assert!(out.contains("simulated 80 GiB GPU"), "{out}");
    let (code, _, err) = vramtop(&["demo", "--sim-memory", "100MiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(ERROR_PREFIX) && err.contains("too small"),
        "{err}"
    );
}

#[test]
fn every_command_taking_sim_memory_has_one_least_size_and_one_wording() {
    // The demo accepted 600 MiB while the dashboard and check refused
    // anything under 1 GiB, each in its own words.
    for args in [
        &["demo", "--sim-memory", "600MiB"][..],
        &["--once", "--sim-memory", "600MiB"],
        &["check", "--sim-memory", "600MiB"],
    ] {
        let err = usage_error(args);
        assert!(
            err.contains("'600MiB' is too small for a simulated GPU: the least is 1GiB"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_negative_count_of_simulated_processes_is_a_range_error() {
    let err = usage_error(&["--once", "--sim-training", "-1"]);
    assert!(
        err.contains("'-1' is negative: write a whole number in 0..=64"),
        "{err}"
    );
    let err = usage_error(&["--once", "--sim-gpus", "-3"]);
    assert!(
        err.contains("'-3' is negative: write a whole number in 1..=64"),
        "{err}"
    );
    let err = usage_error(&["--once", "--sim-dataloader-workers", "-2"]);
    assert!(
        err.contains("'-2' is negative: write a whole number in 0..=64"),
        "{err}"
    );
}

#[test]
fn a_count_of_simulated_gpus_or_processes_past_any_integer_says_its_range() {
    // Past u32 and u64 alike: the range, never the standard library's
    // "number too large to fit in target type".
    for huge in ["300", "4294967296", "99999999999999999999"] {
        for (flag, range) in [
            ("--sim-gpus", "1..=64"),
            ("--sim-training", "0..=64"),
            ("--sim-dataloader-workers", "0..=64"),
        ] {
            for command in [&["--once"][..], &["check"], &["doctor"]] {
                let mut args = command.to_vec();
                args.extend([flag, huge]);
                let err = usage_error(&args);
                assert!(
                    err.contains(&format!("'{huge}' is not in {range}")),
                    "{args:?}: {err}"
                );
                assert!(!err.contains("too large to fit"), "{args:?}: {err}");
            }
        }
    }
    let err = usage_error(&["--once", "--sim-gpus", "x"]);
    assert!(
        err.contains("'x' is not a whole number: write one in 1..=64"),
        "{err}"
    );
}

#[test]
fn a_count_or_moment_too_large_for_any_integer_says_its_range_not_what_it_is_not() {
    let most = u64::MAX;
    for (args, says) in [
        (
            &[
                "open",
                "x.pickle",
                "--summary",
                "--top",
                "99999999999999999999",
            ][..],
            format!("for '--top <N>': '99999999999999999999' is not in 0..={most}"),
        ),
        (
            &[
                "diff",
                "a.pickle",
                "b.pickle",
                "--top",
                "99999999999999999999",
            ],
            format!("'99999999999999999999' is not in 0..={most}"),
        ),
        (
            &[
                "open",
                "x.pickle",
                "--summary",
                "--at",
                "18446744073709551616",
            ],
            format!("for '--at <MOMENT>': '18446744073709551616' is not in 0..={most}"),
        ),
        (
            &[
                "diff",
                "x.pickle",
                "--at",
                "18446744073709551616",
                "--at",
                "1",
            ],
            format!("'18446744073709551616' is not in 0..={most}"),
        ),
        (
            &["diff", "a.pickle", "b.pickle", "--devices", "99999999999:0"],
            "'99999999999' is not in 0..=4294967295 (a GPU number of --devices)".to_string(),
        ),
    ] {
        let err = usage_error(args);
        assert!(err.contains(&says), "{args:?}: {err}");
        for flaw in ["is not a count", "is not a moment", "is not GPU:GPU"] {
            assert!(!err.contains(flaw), "{args:?}: {err}");
        }
    }
}

#[test]
fn a_negative_or_non_numeric_seed_device_or_pid_is_a_range_error_naming_the_flag() {
    for (args, says) in [
        (
            &["--once", "--sim-seed", "-1"][..],
            "for '--sim-seed <SEED>': '-1' is negative: write a whole number in \
             0..=9223372036854775807",
        ),
        (
            &["--once", "--sim-seed", "x"],
            "for '--sim-seed <SEED>': 'x' is not a whole number: write one in 0..=",
        ),
        (
            &["--once", "--sim-seed", "9223372036854775808"],
            "'9223372036854775808' is not in 0..=9223372036854775807",
        ),
        (
            &["check", "--device", "-1"],
            "for '--device <INDEX>': '-1' is negative: write a whole number in 0..=4294967295",
        ),
        (
            &[
                "diff", "x.pickle", "--at", "1", "--at", "2", "--device", "-2",
            ],
            "for '--device <N>': '-2' is negative",
        ),
        (
            &["--once", "--sim-seed", "-01"],
            "for '--sim-seed <SEED>': '-01' is negative",
        ),
        (
            &["snapshot", "-5"],
            "for '<PID>': '-5' is negative: write a whole number in 0..=4294967295",
        ),
    ] {
        let err = usage_error(args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

#[test]
fn a_seed_of_minus_zero_is_zero_not_negative() {
    let (code, out, err) = vramtop(&["--once", "--json", "--sim-seed", "-0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"backend\": \"sim\""), "{out}");
}

#[test]
fn a_size_or_duration_without_a_unit_asks_for_one() {
    let err = usage_error(&["replay", "x.pickle", "--capacity", "24"]);
    assert!(err.contains("24 what? write e.g. 24GiB"), "{err}");
    let err = usage_error(&["check", "--budget", "512"]);
    assert!(err.contains("512 what?"), "{err}");
    let err = usage_error(&["--stress-cap", "2"]);
    assert!(err.contains("2 what?"), "{err}");
    let err = usage_error(&["record", "r.jsonl", "--duration", "10"]);
    assert!(err.contains("10 what?"), "{err}");
}

#[test]
fn replay_verify_and_what_if_options_conflict() {
    for what_if in [
        &["--capacity", "24GiB"][..],
        &["--alloc-conf", "expandable_segments:True"],
    ] {
        let mut args = vec!["replay", "x.pickle", "--verify"];
        args.extend_from_slice(what_if);
        let err = usage_error(&args);
        assert!(
            err.contains("--verify") && err.contains("cannot be used"),
            "{err}"
        );
    }
}

#[test]
fn open_json_without_summary_is_a_usage_error() {
    usage_error(&["open", "x.pickle", "--json"]);
}

#[test]
fn scenario_list_with_a_name_or_a_snapshot_to_save_is_a_usage_error() {
    let err = usage_error(&["scenario", "fragmentation_oom", "--list"]);
    assert!(err.contains("--list"), "{err}");
    usage_error(&["scenario", "--list", "--save-snapshot", "x.pickle"]);
    let (code, out, err) = vramtop(&["scenario", "--list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert!(list.as_array().is_some_and(|l| !l.is_empty()), "{out}");
}

#[test]
fn an_unknown_scenario_name_is_one_line_naming_the_built_in_ones() {
    let (code, out, err) = vramtop(&["scenario", "nope"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "vramtop: error: no scenario named 'nope'; the built-in ones are no_grad_inference, "
        ) && err.ends_with(" (see `vramtop scenario --list`)\n"),
        "{err}"
    );
}

#[test]
fn scenario_without_a_name_or_list_is_a_one_line_usage_error() {
    let err = usage_error(&["scenario"]);
    assert!(
        err.contains("required arguments were not provided: <NAME>")
            && err.contains("(see 'vramtop scenario --help')"),
        "{err}"
    );
    usage_error(&["scenario", "--json"]);
}

#[test]
fn open_top_without_summary_is_a_usage_error() {
    let err = usage_error(&["open", "x.pickle", "--top", "3"]);
    assert!(err.contains("--summary"), "{err}");
    // The help still names the default the summary uses.
    let (code, out, err) = vramtop(&["open", "--help"]);
    assert_eq!(code, 0, "{err}");
    let default = vramtop::snapshot::summary::DEFAULT_TOP_SITES;
    assert!(out.contains(&format!("[default: {default}]")), "{out}");
}

#[test]
fn open_no_trace_without_summary_is_a_usage_error() {
    let err = usage_error(&["open", "x.pickle", "--no-trace"]);
    assert!(err.contains("--summary"), "{err}");
}

#[test]
fn group_and_at_options_are_usage_errors_where_they_cannot_apply() {
    for args in [
        // --group and --at belong to the summary, not the viewer.
        &["open", "x.pickle", "--group", "function"][..],
        &["open", "x.pickle", "--at", "3"],
        // Two files, or two moments of one: not both.
        &["diff", "a.pickle", "b.pickle", "--at", "1", "--at", "2"],
        &[
            "diff",
            "a.pickle",
            "--at",
            "1",
            "--at",
            "2",
            "--devices",
            "0:1",
        ],
        &["diff", "a.pickle", "b.pickle", "--device", "0"],
        // No AFTER and no --at.
        &["diff", "a.pickle"],
    ] {
        usage_error(args);
    }
    // A grouping by another name, a moment that is none: the error names
    // what is accepted.
    let err = usage_error(&["diff", "a.pickle", "b.pickle", "--group", "line"]);
    for name in [
        "user-frame",
        "python-frame",
        "file-line",
        "function",
        "whole-stack",
    ] {
        assert!(err.contains(name), "{err}");
    }
    for bad in ["x", "4.5", "+4", ""] {
        let err = usage_error(&["open", "x.pickle", "--summary", "--at", bad]);
        // `+4` is a recording's offset without its unit, said as such.
        let moment = if bad.starts_with('+') {
            "is not a duration after the first sample"
        } else {
            "is not a moment"
        };
        assert!(err.contains(moment) && err.contains("peak"), "{err}");
        let err = usage_error(&["diff", "x.pickle", "--at", bad, "--at", "1"]);
        assert!(err.contains("is not a moment"), "{err}");
    }
    let err = usage_error(&["diff", "x.pickle", "--at", "-3", "--at", "1"]);
    assert!(err.contains("'-3' is negative"), "{err}");
}

#[test]
fn diff_at_given_once_or_thrice_is_one_line_asking_for_two_before_reading() {
    // The file does not exist: the count is said first.
    for args in [
        &["diff", "/nonexistent/x.pickle", "--at", "1"][..],
        &[
            "diff",
            "/nonexistent/x.pickle",
            "--at",
            "1",
            "--at",
            "2",
            "--at",
            "3",
        ],
    ] {
        let err = usage_error(args);
        assert!(err.contains("give it twice"), "{err}");
    }
}

#[test]
fn bad_input_and_usage_share_the_prefix_and_exit_2() {
    let (code, _, err) = vramtop(&["replay", "/nonexistent/x.pickle"]);
    assert_eq!(code, 2);
    assert!(err.starts_with(ERROR_PREFIX), "{err}");
    let (code, _, err) = vramtop(&["scenario", "no-such-scenario"]);
    assert_eq!(code, 2);
    assert!(err.starts_with(ERROR_PREFIX), "{err}");
    let err = usage_error(&["--no-such-flag"]);
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn replay_verdict_is_full_match_in_text_and_json() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, _) = vramtop(&["replay", &path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("result: FULL MATCH\n"), "{out}");
    let (code, out, _) = vramtop(&["replay", &path, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["result"], "FULL MATCH");
    assert!(v.get("why").is_none(), "{out}");
}

#[test]
fn replay_text_says_the_verdict_checks_the_model_not_the_program_and_json_does_not() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let meaning = "verdict: checks vramtop's allocator model against this recording, not your \
                   program";
    let (_, out, _) = vramtop(&["replay", &path]);
    let lines: Vec<&str> = out.lines().collect();
    // The verdict stays the last line; the sentence, wrapped within 80
    // columns, comes right before it.
    assert_eq!(lines.last(), Some(&"result: FULL MATCH"), "{out}");
    let sentence = lines
        .iter()
        .rposition(|l| l.starts_with("verdict: "))
        .and_then(|at| lines.get(at..lines.len() - 1))
        .map(|l| {
            l.iter()
                .flat_map(|l| l.split_whitespace())
                .collect::<Vec<_>>()
                .join(" ")
        });
    assert_eq!(sentence.as_deref(), Some(meaning), "{out}");
    let (_, out, _) = vramtop(&["replay", &path, "--json"]);
    assert!(!out.contains("not your program"), "text only: {out}");
}

/// What `replay --help` says of the what-if mode: no verdict line, no
/// `result` key.
#[test]
fn whatif_output_has_no_verdict_line_and_no_result_key() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (_, out, _) = vramtop(&["replay", &path, "--capacity", "2GiB"]);
    assert!(
        !out.contains("result:") && !out.contains("verdict"),
        "{out}"
    );
    let (_, out, _) = vramtop(&["replay", &path, "--capacity", "2GiB", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert!(v.get("result").is_none(), "{out}");
}

/// The demo's snapshot written to `dir` with its first allocation moved
/// 1 TiB up (every entry at its address), where the model would not put
/// it: a consistent file the model disagrees with. Its path.
fn demo_with_first_allocation_moved(dir: &std::path::Path) -> String {
    let file = dir.join("moved.pickle");
    let mut snapshot = vramtop::cli::demo::snapshot(80 << 30).expect("the demo runs");
    let trace = snapshot.device_traces.first_mut().expect("a trace");
    let moved = trace
        .iter()
        .find(|e| e.action == vramtop::alloc::TraceAction::Alloc)
        .expect("an allocation")
        .addr;
    for e in trace.iter_mut().filter(|e| e.addr == moved) {
        e.addr += 1 << 40;
    }
    vramtop::snapshot::write_snapshot_file(&snapshot, &file).expect("written");
    file.display().to_string()
}

#[test]
fn replay_verdict_mismatch_names_the_first_divergence_with_exit_1() {
    // A consistent file whose trace puts its first allocation where the
    // model would not: the model and the recording disagree.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = demo_with_first_allocation_moved(dir.path());
    let (code, out, _) = vramtop(&["replay", &file, "--json"]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["result"], "MISMATCH", "{out}");
    let why = v["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("GPU 0: event ")
            && why.contains(" (#")
            && why.contains("): PyTorch alloc("),
        "{out}"
    );
    let (code, out, _) = vramtop(&["replay", &file]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("verdict: checks vramtop's allocator model against this recording"),
        "{out}"
    );
}

#[test]
fn replay_of_a_file_whose_blocks_do_not_add_up_is_not_replayable_with_exit_2() {
    // The hand-made sample's segments hold fewer bytes of blocks than
    // their size: no PyTorch writes that, so it is bad input.
    let Some(path) = common::shared_snapshot("snapviewer_memory.pickle") else {
        return;
    };
    let path = path.display().to_string();
    for verify in [&[][..], &["--verify"][..]] {
        let (code, out, _) = vramtop(&[&["replay", &path, "--json"][..], verify].concat());
        assert_eq!(code, 2, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["result"], "NOT REPLAYABLE", "{out}");
        let why = v["why"].as_str().unwrap_or_default();
        assert!(
            why.starts_with("the file's final layout is inconsistent: segment 0x")
                && why.contains("blocks sum to"),
            "{out}"
        );
        let (code, out, _) = vramtop(&[&["replay", &path][..], verify].concat());
        assert_eq!(code, 2, "{out}");
        let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            unwrapped.contains("result: NOT REPLAYABLE (the file's final layout is inconsistent:"),
            "{out}"
        );
        assert!(
            unwrapped.contains(vramtop::cli::replay::INCONSISTENT_MEANING),
            "{out}"
        );
        // Nothing reads as the model failing.
        assert!(!out.contains("MISMATCH"), "{out}");
        assert!(
            !unwrapped.contains("checks vramtop's allocator model"),
            "{out}"
        );
    }
}

#[test]
fn whatif_of_a_file_that_contradicts_itself_exits_2_with_the_verify_verdict() {
    use vramtop::snapshot::capture::{recording_model, snapshot_of};
    // One live 512 B block, its segment made 2 MiB larger than its blocks:
    // no PyTorch writes that, so it is bad input in both modes.
    let dir = tempfile::tempdir().expect("temp dir");
    let mut model = recording_model("", 8 << 30).expect("defaults");
    model.malloc(512, 0).expect("fits");
    let consistent = snapshot_of(&model, 0);
    let mut snapshot = consistent.clone();
    snapshot.segments.first_mut().expect("a segment").total_size += 2 << 20;
    let file = dir.path().join("contradicts.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot, &file).expect("written");
    let file = file.display().to_string();
    let (code, out, _) = vramtop(&["replay", &file, "--verify"]);
    assert_eq!(code, 2, "{out}");
    let whatif = ["replay", &file, "--alloc-conf", "expandable_segments:True"];
    let (code, out, err) = vramtop(&whatif);
    assert_eq!(code, 2, "{out}{err}");
    let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains("result: NOT REPLAYABLE (the file's final layout is inconsistent:"),
        "{out}"
    );
    let (code, out, _) = vramtop(&[&whatif[..], &["--json"]].concat());
    assert_eq!(code, 2, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["result"], "NOT REPLAYABLE", "{out}");
    assert!(
        v["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("the file's final layout is inconsistent: segment 0x")),
        "{out}"
    );
    // The report's own keys are still there.
    assert!(
        v["unreplayable"].is_array() && v["devices"].is_array(),
        "{out}"
    );
    // A what-if of a consistent file still has no verdict and exits 0.
    let good = dir.path().join("good.pickle");
    vramtop::snapshot::write_snapshot_file(&consistent, &good).expect("written");
    let good = good.display().to_string();
    let (code, out, _) = vramtop(&["replay", &good, "--alloc-conf", "expandable_segments:True"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("result:"), "{out}");
    // The hand-made sample in ../shared contradicts itself too.
    if let Some(path) = common::shared_snapshot("snapviewer_memory.pickle") {
        let path = path.display().to_string();
        let (code, out, _) =
            vramtop(&["replay", &path, "--alloc-conf", "expandable_segments:True"]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("result: NOT REPLAYABLE"), "{out}");
    }
}

#[test]
fn whatif_of_a_trace_the_model_cannot_replay_exits_1_with_the_verify_verdict() {
    // The demo's trace with its first allocation moved where the model
    // would not put it: verify says MISMATCH (exit 1), and what-if of the
    // same file says so and exits so, not 0 under a table.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = demo_with_first_allocation_moved(dir.path());
    let (verify_code, out, _) = vramtop(&["replay", &file, "--verify", "--json"]);
    assert_eq!(verify_code, 1, "{out}");
    let verified: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    for whatif in [
        &["--alloc-conf", "expandable_segments:True"][..],
        &["--capacity", "80GiB"][..],
    ] {
        let args = [&["replay", &file][..], whatif].concat();
        let (code, out, err) = vramtop(&args);
        assert_eq!(code, verify_code, "{out}{err}");
        let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
        let why = verified["why"].as_str().unwrap_or_default();
        assert!(
            unwrapped.contains(&format!("result: MISMATCH ({why})")),
            "{out}"
        );
        assert!(
            unwrapped.contains("verdict: checks vramtop's allocator model against this recording"),
            "{out}"
        );
        let (code, out, _) = vramtop(&[&args[..], &["--json"]].concat());
        assert_eq!(code, verify_code, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["result"], verified["result"], "{out}");
        assert_eq!(v["why"], verified["why"], "{out}");
        assert!(v["devices"].is_array(), "the report's own keys: {out}");
    }
}

/// The heading of the what-if table's first column, from the text report.
fn first_column_heading(out: &str) -> Option<String> {
    // The heading line is the one before the "settings" row.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("settings "))?;
    let heading = lines.get(at.checked_sub(1)?)?;
    // Columns are two or more spaces apart.
    heading
        .trim()
        .split("  ")
        .next()
        .map(|h| h.trim().to_string())
}

#[test]
fn whatif_of_a_trace_the_model_does_not_replay_marks_the_original_as_the_models() {
    // The original column is the model's re-run of the trace; where the
    // model does not replay it exactly its figures are not the
    // recording's, and the heading, a note and the JSON say so.
    let dir = tempfile::tempdir().expect("temp dir");
    let moved = demo_with_first_allocation_moved(dir.path());
    let exact = dir.path().join("exact.pickle");
    let snapshot = vramtop::cli::demo::snapshot(80 << 30).expect("the demo runs");
    vramtop::snapshot::write_snapshot_file(&snapshot, &exact).expect("written");
    let exact = exact.display().to_string();
    let whatif = ["--alloc-conf", "expandable_segments:True"];
    let (code, out, _) = vramtop(&[&["replay", &moved][..], &whatif].concat());
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        first_column_heading(&out).as_deref(),
        Some("original (model re-run)"),
        "{out}"
    );
    let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains(
            "note: original (model re-run): the model's figures for this trace under the \
             recorded settings, not the recording's"
        ),
        "{out}"
    );
    let (_, out, _) = vramtop(&[&["replay", &moved, "--json"][..], &whatif].concat());
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["devices"][0]["original_figures"], "model", "{out}");
    // A trace the model replays exactly: the original is the recording's.
    let (code, out, _) = vramtop(&[&["replay", &exact][..], &whatif].concat());
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        first_column_heading(&out).as_deref(),
        Some("original"),
        "{out}"
    );
    assert!(!out.contains("re-run"), "{out}");
    let (_, out, _) = vramtop(&[&["replay", &exact, "--json"][..], &whatif].concat());
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["devices"][0]["original_figures"], "recording", "{out}");
}

#[test]
fn replay_of_a_state_only_file_is_no_trace_not_full_match() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("state-only.pickle");
    let mut snapshot = vramtop::cli::demo::snapshot(80 << 30).expect("the demo runs");
    snapshot.device_traces.clear();
    vramtop::snapshot::write_snapshot_file(&snapshot, &file).expect("written");
    let file = file.display().to_string();
    let (code, out, err) = vramtop(&["replay", &file]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("result: NO TRACE"), "{out}");
    assert!(!out.contains("FULL MATCH"), "{out}");
    let (_, out, _) = vramtop(&["replay", &file, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["result"], "NO TRACE", "{out}");
}

#[test]
fn doctor_with_backend_sim_says_it_was_chosen() {
    let (code, out, err) = vramtop(&["doctor", "--backend", "sim"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Backend     sim (chosen: backend sim)"),
        "{out}"
    );
    assert!(!out.contains("fell back"), "{out}");
}

/// Runs vramtop with `config_home` as `$XDG_CONFIG_HOME`.
fn vramtop_with_config_home(config_home: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env("NO_COLOR", "1")
        .output()
        .expect("run vramtop");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_config_key_is_a_warning_for_open_and_refused_by_the_dashboard() {
    let Some(snapshot) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let snapshot = snapshot.display().to_string();
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("vramtop");
    std::fs::create_dir(&dir).expect("mkdir");
    let config = dir.join("config.toml");
    std::fs::write(&config, "ascii = true\nintervall = \"2s\"\n").expect("write");
    let (code, out, err) = vramtop_with_config_home(home.path(), &["open", "--summary", &snapshot]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("segments"), "{out}");
    assert!(out.is_ascii(), "the file's ascii = true applies: {out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with(&format!(
            "vramtop: warning: {}: line 2: unknown key 'intervall' (did you mean 'interval'?)",
            config.display()
        )),
        "{err}"
    );
    // doctor uses the rest of the file too, and says the key the same way.
    let (code, out, err) = vramtop_with_config_home(home.path(), &["doctor", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("unknown key 'intervall'"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("doctor's JSON");
    assert!(v["config_error"].is_null(), "its values apply: {out}");
    // The dashboard samples at the interval the key meant: it refuses.
    let (code, _, err) = vramtop_with_config_home(home.path(), &["--once", "--backend", "sim"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with(ERROR_PREFIX), "{err}");
    assert!(
        err.contains("line 2: unknown key 'intervall' (did you mean 'interval'?)"),
        "{err}"
    );
}

#[test]
fn doctor_runs_with_a_broken_config_file_and_warns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    // An unknown key and a bad value: the bad value breaks the file.
    std::fs::write(&config, "intervl = \"2s\"\nsim_gpus = 0\n").expect("write");
    let config = config.display().to_string();
    let (code, out, err) = vramtop(&["doctor", "--json", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.starts_with("vramtop: warning: ") && err.contains("intervl"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("doctor's JSON");
    assert!(v["nvml"]["ok"].is_boolean(), "{out}");
    assert!(!out.contains("\"Err\"") && !out.contains("\"Ok\""), "{out}");
    // The report names the file and why its values do not apply.
    assert_eq!(v["config_file"], config.as_str(), "{out}");
    let why = v["config_error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("line 1: ") && why.contains("intervl"),
        "{out}"
    );
    let (_, out, _) = vramtop(&["doctor", "--config", &config]);
    let line = out
        .lines()
        .find(|l| l.starts_with("Config"))
        .unwrap_or_default();
    assert!(
        line.starts_with("Config      ") && line.contains(": not used (line 1: "),
        "{out}"
    );
    assert!(!out.contains("its values apply"), "{out}");
    // Any other command refuses the same file.
    let (code, _, err) = vramtop(&["--once", "--json", "--config", &config]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with(ERROR_PREFIX), "{err}");
}

#[test]
fn doctor_says_a_missing_config_file_is_not_used_and_why() {
    let (code, out, err) = vramtop(&["doctor", "--config", "/nonexist.toml"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("cannot read /nonexist.toml"), "{err}");
    assert!(
        out.contains("Config      /nonexist.toml: not used (cannot read it: "),
        "{out}"
    );
    assert!(!out.contains("its values apply"), "{out}");
    let (_, out, _) = vramtop(&["doctor", "--json", "--config", "/nonexist.toml"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("doctor's JSON");
    assert_eq!(v["config_file"], "/nonexist.toml", "{out}");
    assert!(
        v["config_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("cannot read it: ")),
        "{out}"
    );
}

#[test]
fn doctor_names_a_broken_default_config_file() {
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("vramtop");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("config.toml"), "backend = \"gpu\"\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .args(["doctor", "--json"])
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .expect("run vramtop");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).expect("doctor's JSON");
    let path = dir.join("config.toml").display().to_string();
    assert_eq!(v["config_file"], path.as_str(), "{text}");
    assert!(
        v["config_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("line 1: ")),
        "{text}"
    );
}

#[test]
fn completions_come_for_bash_zsh_and_fish() {
    for (shell, mark) in [
        ("bash", "_vramtop"),
        ("zsh", "#compdef vramtop"),
        ("fish", "complete -c vramtop"),
    ] {
        let (code, out, err) = vramtop(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(
            out.contains(mark),
            "{shell}: {}",
            &out[..out.len().min(400)]
        );
        assert!(
            out.contains("replay") && out.contains("sim-memory"),
            "{shell}"
        );
        assert!(
            !out.contains("debug-"),
            "{shell}: a test hook is offered to users"
        );
    }
    usage_error(&["completions", "tcsh"]);
}

#[test]
fn man_page_is_roff_and_names_every_command() {
    let (code, out, err) = vramtop(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(".TH vramtop"),
        "{}",
        &out[..out.len().min(400)]
    );
    for command in ["replay", "open", "doctor", "demo", "serve", "completions"] {
        assert!(out.contains(command), "{command}");
    }
}

#[test]
fn man_with_a_command_prints_that_commands_page_with_its_options() {
    // The main page lists vramtop-record(1) and the others: each exists.
    let (code, out, err) = vramtop(&["man", "record"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(".TH vramtop-record"),
        "{}",
        &out[..out.len().min(400)]
    );
    for option in ["duration", "interval"] {
        assert!(out.contains(option), "{option}: {out}");
    }
    // The global option and the version, as on the main page; the help
    // command the main page lists has its page too.
    assert!(out.contains("log\\-file"), "{out}");
    assert!(
        out.contains(env!("CARGO_PKG_VERSION")),
        "{}",
        &out[..out.len().min(300)]
    );
    let (code, out, err) = vramtop(&["man", "help"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(".TH vramtop-help"),
        "{}",
        &out[..out.len().min(300)]
    );
    let (code, _, err) = vramtop(&["man", "nope"]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no command named 'nope'; man pages: ") && err.contains("record"),
        "{err}"
    );
}

#[test]
fn save_snapshot_refuses_to_replace_a_file_without_force_and_names_a_missing_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("demo.pickle");
    std::fs::write(&file, b"keep me").expect("write");
    let path = file.display().to_string();
    let (code, out, err) = vramtop(&["demo", "--save-snapshot", &path]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("exists: add --force"), "{err}");
    assert_eq!(std::fs::read(&file).expect("read"), b"keep me");
    // A scenario of several variants writes one file each: a second run
    // finds them and replaces none.
    let set = dir.path().join("frag.pickle").display().to_string();
    let scenario = ["scenario", "fragmentation_oom", "--save-snapshot", &set];
    let (code, _, err) = vramtop(&scenario);
    assert!(code == 0 || code == 1, "{err}");
    let written = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("frag"))
        .count();
    assert!(written > 0, "{err}");
    let (code, _, err) = vramtop(&scenario);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("exists: add --force"), "{err}");
    let (code, _, err) = vramtop(&["demo", "--save-snapshot", &path, "--force"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(std::fs::read(&file).expect("read"), b"keep me");
    let nowhere = dir.path().join("no/such/folder/d.pickle");
    let (code, _, err) = vramtop(&["demo", "--save-snapshot", &nowhere.display().to_string()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("does not exist (vramtop creates no folders)"),
        "{err}"
    );
    usage_error(&["demo", "--force"]);
}

#[test]
fn ascii_with_json_is_refused_by_replay_and_diff() {
    // --ascii changes a text report; JSON has none to change.
    for args in [
        &["replay", "x.pickle", "--json", "--ascii"][..],
        &[
            "replay",
            "x.pickle",
            "--capacity",
            "1GiB",
            "--json",
            "--ascii",
        ],
        &["diff", "a.pickle", "b.pickle", "--json", "--ascii"],
    ] {
        let err = usage_error(args);
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
    }
}

#[test]
fn the_docs_name_every_command_that_refuses_ascii_with_json() {
    // Every command with both options, and whether it refuses the two
    // together; the docs' sentence must say the same.
    let snapshot = "x.pickle";
    let mut refused = Vec::new();
    for (name, args) in [
        ("open --summary", &["open", snapshot, "--summary"][..]),
        ("replay", &["replay", snapshot]),
        ("diff", &["diff", snapshot, snapshot]),
        ("scenario", &["scenario", "fragmentation_oom"]),
        ("demo", &["demo"]),
        ("vramtop --once", &["--once", "--backend", "sim"]),
    ] {
        let mut args = args.to_vec();
        args.extend(["--json", "--ascii"]);
        let (code, _, err) = vramtop(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        if err.contains("'--json' cannot be used with '--ascii'") {
            refused.push(name);
        }
    }
    // The same rule everywhere: the dashboard's `--once --json` too.
    assert_eq!(
        refused,
        [
            "open --summary",
            "replay",
            "diff",
            "scenario",
            "demo",
            "vramtop --once"
        ]
    );
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    let docs = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    let said = docs
        .split(" refuse it with `--json`")
        .next()
        .and_then(|before| before.rsplit("It changes only the text: ").next())
        .expect("the sentence on --ascii with --json");
    assert_eq!(
        said, "`open --summary`, `replay`, `diff`, `scenario`, `demo` and `vramtop --once`",
        "{said}"
    );
}

#[test]
fn the_dashboards_once_json_refuses_ascii_on_the_command_line_only() {
    // `vramtop --once --json --ascii` printed the JSON as without --ascii,
    // where every other command with both refuses them together.
    for args in [
        &["--once", "--json", "--ascii", "--backend", "sim"][..],
        &["--ascii", "--once", "--json", "--backend", "sim"],
    ] {
        // Clap names the later option first.
        let err = usage_error(args);
        assert!(
            err.contains("'--json' cannot be used with '--ascii'")
                || err.contains("'--ascii' cannot be used with '--json'"),
            "{args:?}: {err}"
        );
    }
    // A config file's `ascii = true` is a default for the screen, not the
    // option: `--once --json` with it prints the JSON.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "ascii = true\n").expect("write");
    let config = config.display().to_string();
    let (code, out, err) = vramtop(&["--config", &config, "--once", "--json", "--backend", "sim"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"gpus\""), "{out}");
}

#[test]
fn a_missing_snapshot_names_the_files_save_snapshot_wrote_beside_it() {
    // `scenario … --save-snapshot frag.pickle` writes frag-default.pickle,
    // frag-expandable_segments.pickle, …: not frag.pickle.
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["frag-default.pickle", "frag-expandable_segments.pickle"] {
        std::fs::write(dir.path().join(name), b"x").expect("write");
    }
    let missing = dir.path().join("frag.pickle").display().to_string();
    let other = dir.path().join("frag-default.pickle").display().to_string();
    let hint = format!(
        "; did you mean {} or {}?",
        dir.path().join("frag-default.pickle").display(),
        dir.path().join("frag-expandable_segments.pickle").display()
    );
    for args in [
        &["open", &missing][..],
        &["open", &missing, "--summary"],
        &["open", &missing, "--summary", "--no-trace"],
        &["replay", &missing],
        &["diff", &missing, &other],
        &["diff", &missing, "--at", "start", "--at", "end"],
    ] {
        let (code, _, err) = vramtop(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("No such file or directory"), "{args:?}: {err}");
        assert!(err.contains(&hint), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // Nothing like it: the error as it was.
    let lone = dir.path().join("elsewhere.pickle").display().to_string();
    let (code, _, err) = vramtop(&["replay", &lone]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("did you mean"), "{err}");
}
