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
        "--ascii",
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
        "Verify mode",
        "What-if mode",
    ] {
        assert!(help.contains(own), "{own} missing:\n{help}");
    }
}
