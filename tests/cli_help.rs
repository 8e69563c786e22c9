//! The `--help` of vramtop and of every command, pinned: a command lists
//! only its own options, under headings.

use clap::CommandFactory as _;
use vramtop::cli::Cli;

#[test]
fn every_commands_help_is_pinned() {
    let mut root = Cli::command();
    root.build();
    insta::assert_snapshot!("help_vramtop", root.clone().render_long_help().to_string());
    for sub in root.get_subcommands() {
        let name = sub.get_name().to_string();
        if name == "help" {
            continue;
        }
        let help = sub.clone().render_long_help().to_string();
        insta::assert_snapshot!(format!("help_{name}"), help);
    }
}

#[test]
fn open_help_lists_the_viewer_keys_that_find_whose_memory_it_is() {
    let help = Cli::command()
        .find_subcommand_mut("open")
        .expect("open")
        .render_long_help()
        .to_string();
    let keys: Vec<&str> = help
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split("  ").next())
        .collect();
    // The sites, the peaks and jumps, the marks and compare were found
    // only behind `?` in the viewer.
    for want in [
        "←/→/PgUp/PgDn",
        "o/n/e",
        "P/R/B",
        "w",
        "Enter",
        "m/M/c",
        "?",
    ] {
        assert!(keys.contains(&want), "{want} not listed: {keys:?}\n{help}");
    }
    assert!(help.contains("whose memory"), "{help}");
}

#[test]
fn replay_help_lists_only_replays_options() {
    let help = Cli::command()
        .find_subcommand_mut("replay")
        .expect("replay")
        .render_long_help()
        .to_string();
    for foreign in [
        "--backend",
        "--sim-gpus",
        "--sim-memory",
        "--interval",
        "--no-color",
        "--config",
        "--stress-cap",
    ] {
        assert!(
            !help.contains(foreign),
            "{foreign} in replay's help:\n{help}"
        );
    }
    for own in [
        "--verify",
        "--alloc-conf",
        "--capacity",
        "--json",
        "--ascii",
        "Verify mode",
        "What-if mode",
    ] {
        assert!(help.contains(own), "{own} missing:\n{help}");
    }
}

#[test]
fn docs_cli_table_lists_every_command_with_its_own_options() {
    // The headings shared by several commands have columns of their own.
    const SHARED: [&str; 6] = [
        "Telemetry",
        "Simulated GPU",
        "Sampling",
        "Display",
        "Config file",
        "Global options",
    ];
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    let mut root = Cli::command();
    root.build();
    for sub in root.get_subcommands() {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        let row = doc
            .lines()
            .filter(|l| l.starts_with("| `"))
            .find(|l| {
                let first = l.split('|').nth(1).unwrap_or_default();
                first.contains(&format!("`{name}`")) || first.contains(&format!("`{name} "))
            })
            .unwrap_or_else(|| panic!("no row for `{name}` in docs/cli.md's table"));
        let own = row.split('|').nth(2).unwrap_or_default();
        for arg in sub.get_arguments() {
            let (Some(long), false) = (arg.get_long(), arg.is_hide_set()) else {
                continue;
            };
            if long == "help" || arg.get_help_heading().is_some_and(|h| SHARED.contains(&h)) {
                continue;
            }
            assert!(
                own.contains(&format!("`--{long}`")),
                "`{name}`'s row lacks --{long}: {row}"
            );
        }
    }
}

/// `--capacity` is not the card's size: the help, the README and
/// docs/whatif.md say what to leave out, with the same example.
#[test]
fn capacity_is_the_cards_memory_less_the_cuda_context_in_help_readme_and_docs() {
    let help = Cli::command()
        .find_subcommand_mut("replay")
        .expect("replay")
        .render_long_help()
        .to_string();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let whatif = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/whatif.md"))
        .expect("docs/whatif.md");
    for (name, text) in [
        ("replay --help", &help),
        ("README.md", &readme),
        ("docs/whatif.md", &whatif),
    ] {
        for said in ["CUDA context (~0.5 GiB)", "--capacity 23GiB", "24 GB card"] {
            assert!(text.contains(said), "{name} does not say {said:?}");
        }
        assert!(
            !text.contains("--capacity 24GiB"),
            "{name} gives a 24 GB card's whole size as the capacity"
        );
    }
}

#[test]
fn replay_help_says_only_the_verify_mode_has_a_verdict() {
    let help = Cli::command()
        .find_subcommand_mut("replay")
        .expect("replay")
        .render_long_help()
        .to_string();
    for said in [
        "Verify mode ends with a verdict, one of FULL MATCH, MISMATCH, NOT REPLAYABLE or NO TRACE",
        "not whether the program is right",
        "What-if mode prints a comparison table and no verdict",
        "in verify mode its `result` is the verdict; the what-if report has no `result`",
    ] {
        assert!(help.contains(said), "{said:?} missing:\n{help}");
    }
}

/// The exit codes vramtop exits with are the ones docs/cli.md's table,
/// the README, `vramtop --help` and `vramtop check --help` give.
#[test]
fn exit_codes_in_the_help_and_docs_are_the_ones_vramtop_uses() {
    use vramtop::cli::{EXIT_BAD_INPUT, EXIT_MISMATCH, EXIT_NOTHING_CHECKED};
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md"))
        .expect("docs/cli.md");
    let table = docs
        .split("## Exit status and messages")
        .nth(1)
        .expect("docs/cli.md has the exit status table");
    let root = Cli::command().render_long_help().to_string();
    for code in [0, EXIT_MISMATCH, EXIT_BAD_INPUT, EXIT_NOTHING_CHECKED] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("| {code} |"))),
            "docs/cli.md's table has no row for exit {code}"
        );
        assert!(
            root.contains(&format!(" {code} ")),
            "vramtop --help does not say exit {code}:\n{root}"
        );
    }
    let check = Cli::command()
        .find_subcommand_mut("check")
        .expect("check")
        .render_long_help()
        .to_string();
    for said in [
        "0 on PASS".to_string(),
        format!("{EXIT_MISMATCH} on FAIL"),
        format!("{EXIT_NOTHING_CHECKED} on SKIP"),
        format!("{EXIT_BAD_INPUT} on bad usage"),
    ] {
        assert!(check.contains(&said), "check --help does not say {said:?}");
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    assert!(
        readme.contains(&format!("`check` {EXIT_NOTHING_CHECKED} when nothing")),
        "README.md does not say check's exit when nothing was checked"
    );
}

#[test]
fn group_help_says_the_user_frame_may_be_a_librarys_and_functions_of_one_name_merge() {
    // The user frame is not always the user's line (einops' einsum is
    // Hyperion's second site), and frames carry no class: every
    // module's forward in one file is one `function` site.
    for command in ["open", "diff"] {
        let help = Cli::command()
            .find_subcommand_mut(command)
            .expect(command)
            .render_long_help()
            .to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for said in [
            "outside PyTorch, the standard library and launchers",
            "your line, or a library's that your code called",
            "open --summary lists the callers",
            "functions of one name in one file merge: every module's forward in model.py is \
             one site",
        ] {
            assert!(help.contains(said), "{command}: {said:?} missing:\n{help}");
        }
        assert!(
            !help.contains("your line that asked for the memory"),
            "{command}: {help}"
        );
    }
}
