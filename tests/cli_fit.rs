//! The text reports of `diff`, `open --summary`, `replay` (its what-if
//! mode too), `doctor` and `check` fit an 80-column terminal, measured in
//! terminal cells, whatever the files give them: frame names of CJK
//! characters (two cells each), a path under a deep folder. So do `-h`,
//! `--help` and `help COMMAND` of vramtop and every command, wrapped to
//! `COLUMNS=80` (the width the help honours into a pipe; docs/cli.md).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vramtop::cli::text::cells;
use vramtop::snapshot::synth::{LargeShape, large};
use vramtop::snapshot::types::{Frame, Frames, Snapshot};
use vramtop::snapshot::write_snapshot_file;

/// A frame name of 51 cells that a reader could not shorten by a word.
fn cjk_name() -> String {
    "训练步骤_前向传播".repeat(3)
}

/// `frames` with every name CJK and every file in a CJK folder.
fn cjk_frames(frames: &Frames) -> Frames {
    frames
        .iter()
        .map(|f| Frame {
            filename: Arc::from(format!(
                "/数据/模型/{}",
                f.filename.rsplit('/').next().unwrap_or_default()
            )),
            line: f.line,
            name: Arc::from(cjk_name()),
        })
        .collect::<Vec<_>>()
        .into()
}

/// A small training-like snapshot whose every stack is of CJK frames.
fn cjk_snapshot(trace_entries: usize) -> Snapshot {
    let mut s = large(&LargeShape {
        trace_entries,
        stacks: 40,
        min_depth: 2,
        max_depth: 4,
        frames: 30,
        layers: 2,
        ..LargeShape::default()
    });
    for seg in &mut s.segments {
        seg.frames = cjk_frames(&seg.frames);
        for b in &mut seg.blocks {
            b.frames = cjk_frames(&b.frames);
        }
    }
    for e in s.device_traces.iter_mut().flatten() {
        e.frames = cjk_frames(&e.frames);
    }
    s
}

/// A folder deep enough that a path in it passes 80 columns on its own.
fn deep_dir(test: &str) -> PathBuf {
    let mut dir = std::env::temp_dir().join(format!("vramtop-fit-{test}-{}", std::process::id()));
    for k in 0..6 {
        dir = dir.join(format!("a-folder-of-snapshot-copies-{k}"));
    }
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn remove(dir: &Path) {
    if let Some(top) = dir.ancestors().find(|d| {
        d.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("vramtop-fit-"))
    }) {
        let _ = std::fs::remove_dir_all(top);
    }
}

/// [`common::run_vramtop`] as on a terminal: the reports lay out their
/// file's path for 80 columns (piped, they print it whole).
fn run_on_terminal(args: &[&str], ld_library_path: Option<&Path>) -> (i32, String, String) {
    common::run_vramtop_with_env(
        args,
        ld_library_path,
        &[(vramtop::cli::DEBUG_STDOUT_TERMINAL_ENV, "1")],
    )
}

/// Asserts every line of `report` fits 80 terminal cells.
fn assert_fits_80_cells(what: &str, report: &str) {
    for line in report.lines() {
        assert!(
            cells(line) <= 80,
            "{what}: {} cells: {line:?}\n{report}",
            cells(line)
        );
    }
}

#[test]
fn diff_of_snapshots_with_cjk_frame_names_under_a_deep_folder_fits_80_cells() {
    let dir = deep_dir("diff");
    let before = dir.join("before-the-step.pickle");
    let after = dir.join("after-the-step.pickle");
    write_snapshot_file(&cjk_snapshot(400), &before).expect("write");
    write_snapshot_file(&cjk_snapshot(900), &after).expect("write");
    let (b, a) = (before.display().to_string(), after.display().to_string());
    let (code, out, err) = run_on_terminal(&["diff", &b, &a], None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("diff", &out);
    // The paths keep their file names; the rows keep their figures.
    let paths: Vec<&str> = out.lines().take(2).collect();
    assert!(
        paths[0].starts_with("before: ") && paths[0].ends_with("/before-the-step.pickle"),
        "{out}"
    );
    assert!(paths.iter().all(|p| p.contains('…')), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.ends_with("  site"))
        .skip(1)
        .filter(|l| !l.starts_with("  …"))
        .collect();
    assert!(!rows.is_empty(), "{out}");
    // A 51-cell name wraps under the label column, none of it cut: its
    // lines joined give it whole.
    assert!(rows.iter().all(|row| !row.contains('…')), "{out}");
    let label_column = " ".repeat(50);
    let joined = rows.join("\n").replace(&format!("\n{label_column}"), "");
    assert!(joined.contains(&cjk_name()), "{out}");
}

#[test]
fn diff_of_two_moments_and_summary_at_a_moment_with_cjk_frames_fit_80_cells() {
    let dir = deep_dir("moments");
    let file = dir.join("a-training-step-with-cjk-frame-names.pickle");
    write_snapshot_file(&cjk_snapshot(900), &file).expect("write");
    let f = file.display().to_string();
    let runs: Vec<(i32, String, String)> = [
        &["diff", &f, "--at", "100", "--at", "peak"][..],
        &[
            "diff",
            &f,
            "--at",
            "start",
            "--at",
            "end",
            "--group",
            "whole-stack",
        ],
        &[
            "open",
            &f,
            "--summary",
            "--at",
            "450",
            "--group",
            "whole-stack",
        ],
    ]
    .iter()
    .map(|args| run_on_terminal(args, None))
    .collect();
    remove(&dir);
    for (code, out, err) in &runs {
        assert_eq!(*code, 0, "{err}");
        assert_fits_80_cells("diff --at / open --summary --at", out);
    }
    // The file's path keeps its name, the GPU after it.
    let first: Vec<&str> = runs[0].1.lines().take(3).collect();
    assert!(
        first
            .iter()
            .any(|l| l.ends_with("/a-training-step-with-cjk-frame-names.pickle (GPU 0)")),
        "{}",
        runs[0].1
    );
    assert!(runs[2].1.contains("  at event 450/"), "{}", runs[2].1);
}

#[test]
fn diff_keeps_a_long_file_name_whole_on_a_line_of_its_own() {
    let dir = deep_dir("diff-name");
    // 76 cells: no room for it beside `before: ` with a folder.
    let name = "the-model-after-its-first-training-step-with-activation-checkpointing.pickle";
    assert_eq!(cells(name), 76);
    let before = dir.join(name);
    let after = dir.join("after.pickle");
    write_snapshot_file(&cjk_snapshot(400), &before).expect("write");
    // One trace entry fewer: two files of the same bytes are said first.
    let mut later = cjk_snapshot(400);
    if let Some(trace) = later.device_traces.first_mut() {
        trace.pop();
    }
    write_snapshot_file(&later, &after).expect("write");
    let (b, a) = (before.display().to_string(), after.display().to_string());
    let (code, out, err) = run_on_terminal(&["diff", &b, &a], None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("diff", &out);
    let lines: Vec<&str> = out.lines().take(3).collect();
    assert_eq!(lines[0], "before:", "{out}");
    // Under it, 2 cells in: the folders elided, the name whole.
    assert_eq!(lines[1], format!("  …/{name}"), "{out}");
    // A usual name still shares its label's line, shortened by the same
    // rule: its last folders whole after a `…`.
    assert!(
        lines[2].starts_with("after:  …/a-folder") && lines[2].ends_with("/after.pickle"),
        "{out}"
    );
}

#[test]
fn summary_of_a_snapshot_with_cjk_frame_names_under_a_deep_folder_fits_80_cells() {
    let dir = deep_dir("summary");
    let file = dir.join("a-training-step-with-cjk-frame-names.pickle");
    write_snapshot_file(&cjk_snapshot(900), &file).expect("write");
    let f = file.display().to_string();
    let (code, out, err) = run_on_terminal(&["open", &f, "--summary"], None);
    let (fast_code, fast, fast_err) =
        run_on_terminal(&["open", &f, "--summary", "--no-trace"], None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fast_code, 0, "{fast_err}");
    assert_fits_80_cells("open --summary", &out);
    assert_fits_80_cells("open --summary --no-trace", &fast);
    // The path on a line of its own, its folders elided, its name whole.
    let mut lines = out.lines();
    let first = lines.next().unwrap_or_default();
    assert!(
        first.contains('…') && first.ends_with("/a-training-step-with-cjk-frame-names.pickle:"),
        "{out}"
    );
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("  ") && l.ends_with(" on 1 device")),
        "{out}"
    );
    // The sites' rows keep their figures and wrap the CJK name under
    // the label column, none of it cut.
    assert!(
        out.lines().any(|l| l.contains(" blocks  ")) && !out.contains("训练步骤_前向传播…"),
        "{out}"
    );
    let joined = out.replace(&format!("\n{}", " ".repeat(37)), "");
    assert!(joined.contains(&cjk_name()), "{out}");
}

#[test]
fn summary_called_from_lines_break_only_between_frames_with_the_separator_leading() {
    let Some(file) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let f = file.display().to_string();
    let (code, out, err) = run_on_terminal(&["open", &f, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("open --summary", &out);
    // A frame too long for the room wraps under its own start; the next
    // frame starts a line, its `<` in the margin before it.
    let (called_from, frames, next) = (" ".repeat(32), " ".repeat(44), " ".repeat(42));
    assert!(
        out.contains(&format!(
            "{called_from}called from trace_peak_memory.py:19\n\
             {frames}custom_scaled_dot_product_attention\n\
             {next}< trace_peak_memory.py:43 main\n"
        )),
        "{out}"
    );
    // A separator is never left at the end of a line, nor starts a line
    // anywhere but in that margin.
    for line in out.lines() {
        assert!(!line.ends_with(" <"), "{line:?}\n{out}");
        let text = line.trim_start();
        if text.starts_with("< ") {
            assert_eq!(line.len() - text.len(), 42, "{line:?}\n{out}");
        }
    }
}

#[test]
fn replay_of_a_snapshot_under_a_deep_folder_fits_80_cells() {
    let dir = deep_dir("replay");
    let file = dir.join("a-training-step-with-cjk-frame-names.pickle");
    write_snapshot_file(&cjk_snapshot(900), &file).expect("write");
    let f = file.display().to_string();
    let (code, out, err) = run_on_terminal(&["replay", &f], None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("replay", &out);
    assert!(out.contains("result: FULL MATCH"), "{out}");
    // The verdict's meaning wraps, whole.
    let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains(vramtop::cli::replay::VERDICT_MEANING),
        "{out}"
    );
}

/// Settings whose column cannot share a group: 54 cells in one word.
const LONG_CONF: &str = "max_split_size_mb:128,garbage_collection_threshold:0.8";

#[test]
fn whatif_of_a_snapshot_under_a_deep_folder_fits_80_cells_in_groups_of_columns() {
    let dir = deep_dir("whatif");
    let file = dir.join("a-training-step-with-cjk-frame-names.pickle");
    write_snapshot_file(&cjk_snapshot(900), &file).expect("write");
    let f = file.display().to_string();
    let args = [
        "replay",
        &f,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        LONG_CONF,
        "--alloc-conf",
        "",
        "--capacity",
        "64MiB",
    ];
    let (code, out, err) = run_on_terminal(&args, None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("replay --alloc-conf", &out);
    // The path on a line of its own, its name whole.
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.ends_with("/a-training-step-with-cjk-frame-names.pickle:"),
        "{out}"
    );
    // A group per run that does not fit beside another, each with the
    // original's column first; the long settings break after their comma.
    let headers: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("original  "))
        .collect();
    assert!(headers.len() >= 2, "{out}");
    assert!(out.contains("  max_split_size_mb:128,\n"), "{out}");
    let settings_rows = out.lines().filter(|l| l.starts_with("  settings "));
    assert!(
        headers
            .iter()
            .copied()
            .chain(settings_rows)
            .all(|l| !l.contains(LONG_CONF)),
        "{out}"
    );
    let peaks = out
        .lines()
        .filter(|l| l.starts_with("  peak reserved "))
        .count();
    assert_eq!(peaks, headers.len(), "{out}");
}

#[test]
fn whatif_oom_stacks_read_as_the_summarys_sites_within_80_cells() {
    let Some(file) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let f = file.display().to_string();
    let args = [
        "replay",
        &f,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        LONG_CONF,
        "--capacity",
        "8GiB",
    ];
    let (code, out, err) = run_on_terminal(&args, None);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("replay --alloc-conf", &out);
    // The code that asked as `open --summary` labels a site (a file's
    // name, not its long path), its callers lined up under it.
    assert!(
        out.contains(
            "      asked by _backends.py:288 einsum\n\
             \x20              called from einops.py:916 einsum\n\
             \x20                        < model.py:41 forward\n"
        ),
        "{out}"
    );
    assert!(!out.contains("/.venv/lib/python3.12/"), "{out}");
    // PyTorch's message wraps under its start, whole.
    let unwrapped = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains(
            "CUDA out of memory. Tried to allocate 14.00 MiB. GPU 0 has a total capacity of \
             8.00 GiB"
        ),
        "{out}"
    );
}

#[test]
fn doctor_and_check_on_the_simulated_gpu_fit_80_cells() {
    // A config file under a deep folder: its path breaks after a folder,
    // its file name whole.
    let dir = deep_dir("doctor");
    let config = dir.join("vramtop-configuration-for-the-h100-nodes.toml");
    std::fs::write(&config, "backend = \"sim\"\n").expect("write config");
    let c = config.display().to_string();
    let (code, out, err) = run_on_terminal(&["doctor", "--config", &c, "--sim-gpus", "12"], None);
    remove(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_cells("doctor", &out);
    assert!(
        out.contains("\n            vramtop-configuration-for-the-h100-nodes.toml"),
        "{out}"
    );
    assert!(out.contains("\nGPU 11      Simulated"), "{out}");
    // A label's value wraps under its start (12 cells in), a process's
    // libraries under its command, a piece of advice under its text.
    // The note of simulated processes that could not start wraps under its
    // label's value too.
    let not_started = [
        &["doctor"][..],
        &common::SIM_GPU_FULL_AT_TWO_TRAINERS,
        &["--sim-dataloader-workers", "2"],
    ]
    .concat();
    for args in [&["doctor"][..], &not_started] {
        let (code, out, err) = run_on_terminal(args, None);
        assert_eq!(code, 0, "{err}");
        assert_fits_80_cells("doctor", &out);
        for line in out.lines().filter(|l| l.starts_with(' ')) {
            assert!(
                ["  pid ", "  - ", "    "]
                    .iter()
                    .any(|lead| line.starts_with(lead)),
                "{line:?}\n{out}"
            );
        }
    }

    for args in [&["check"][..], &["check", "--backend", "sim"]] {
        let (code, out, err) = run_on_terminal(args, None);
        assert_eq!(code, 0, "{out}\n{err}");
        assert_fits_80_cells("check", &out);
        assert_fits_80_cells("check (stderr)", &err);
        // A step's detail wraps under its name, as the simulation's own
        // processes ("others: ") wrap under theirs.
        for line in out.lines().skip(1).filter(|l| !l.starts_with("result")) {
            assert!(
                line.starts_with("  [ ok ] ")
                    || line.starts_with("  others: ")
                    || line.starts_with("         "),
                "{line:?}\n{out}"
            );
        }
    }
}

#[test]
fn piped_reports_print_a_deep_path_whole_for_grep() {
    let dir = deep_dir("piped");
    let file = dir.join("a-training-step-with-cjk-frame-names.pickle");
    write_snapshot_file(&cjk_snapshot(400), &file).expect("write");
    let f = file.display().to_string();
    assert!(cells(&f) > 80, "{f}");
    let runs = [
        vec!["open", &f, "--summary"],
        vec!["replay", &f],
        vec!["replay", &f, "--capacity", "1GiB"],
        vec!["diff", &f, &f],
    ]
    .map(|args| (common::run_vramtop(&args, None), args));
    let (_, on_terminal, _) = run_on_terminal(&["open", &f, "--summary"], None);
    remove(&dir);
    for ((code, out, err), args) in &runs {
        assert_eq!(*code, 0, "{args:?}: {err}");
        let first = out.lines().next().unwrap_or_default();
        if args[0] == "diff" {
            // The files' lines follow a note that the two are one file.
            assert!(out.contains(&format!("\nbefore: {f}\n")), "{out}");
            assert!(out.contains(&format!("\nafter:  {f}\n")), "{out}");
        } else {
            assert_eq!(first, format!("{f}:"), "{args:?}: {out}");
        }
    }
    // The same report on a terminal elides the folders.
    assert!(
        on_terminal
            .lines()
            .next()
            .is_some_and(|l| l.starts_with('…')),
        "{on_terminal}"
    );
}

#[test]
fn the_readmes_replay_example_is_the_real_output_in_80_columns() {
    // The README shows `replay` of a shared snapshot as the command prints
    // it; its lines were once unwrapped (up to 150 columns) while the real
    // report wraps at 80.
    const COMMAND: &str = "replay ../shared/snapshots/silmont_mem_snapshot.pickle";
    if common::shared_snapshot("silmont_mem_snapshot.pickle").is_none() {
        return;
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let shown = readme
        .split(&format!("$ cargo run --release -- {COMMAND}\n"))
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README's replay example");
    // The path as the README writes it, from the checkout's root.
    let out = common::vramtop_command(&COMMAND.split(' ').collect::<Vec<_>>())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("vramtop runs");
    assert_eq!(out.status.code(), Some(0));
    let real = String::from_utf8(out.stdout).expect("UTF-8");
    assert_fits_80_cells("the README's replay example", shown);
    assert_eq!(
        shown, real,
        "regenerate the README's example from this output"
    );
}

/// Every help the binary prints, as `vramtop ARGS` asks for it: `-h` and
/// `--help` of vramtop and of every command under it (enumerated from the
/// clap definition, so that a new command is checked too), and `help
/// COMMAND`.
fn every_help_invocation() -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, path: &[String], out: &mut Vec<Vec<String>>) {
        for flag in ["-h", "--help"] {
            let mut args = path.to_vec();
            args.push(flag.to_string());
            out.push(args);
        }
        if !path.is_empty() {
            let mut args = vec!["help".to_string()];
            args.extend(path.iter().cloned());
            out.push(args);
        }
        for sub in command.get_subcommands() {
            let mut sub_path = path.to_vec();
            sub_path.push(sub.get_name().to_string());
            walk(sub, &sub_path, out);
        }
    }
    use clap::CommandFactory as _;
    let mut out = Vec::new();
    walk(&vramtop::cli::Cli::command(), &[], &mut out);
    out
}

/// The help clap renders for `args` before any wrapping, laid out for 80
/// columns as the binary lays it out with `COLUMNS=80`.
fn unwrapped_help(args: &[String]) -> String {
    use clap::CommandFactory as _;
    let argv = std::iter::once("vramtop".to_string()).chain(args.iter().cloned());
    match vramtop::cli::Cli::command()
        .term_width(80)
        .try_get_matches_from(argv)
    {
        Err(e) => e.render().to_string(),
        Ok(_) => panic!("{args:?} parsed as a command, not a help request"),
    }
}

/// With `COLUMNS=80` and stdout a pipe, every help of every command fits
/// 80 cells, each line broken between words: its words are clap's, in
/// clap's order, none split or lost.
#[test]
fn every_help_fits_80_cells_with_no_word_split() {
    let invocations = every_help_invocation();
    // vramtop and its 12 commands, -h and --help each, and `help COMMAND`
    // (clap's `help` command takes no -h).
    assert!(invocations.len() > 30, "{invocations:?}");
    for args in invocations {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = common::run_vramtop_with_env(
            &argv,
            None,
            &[(vramtop::cli::help::COLUMNS_ENV, "80"), ("NO_COLOR", "1")],
        );
        assert_eq!(code, 0, "{args:?}: {err}");
        let what = format!("vramtop {}", args.join(" "));
        for line in out.lines() {
            assert!(
                vramtop::cli::help::cells(line) <= 80,
                "{what}: {} cells: {line:?}\n{out}",
                vramtop::cli::help::cells(line)
            );
        }
        let words: Vec<&str> = out.split_whitespace().collect();
        let unwrapped = unwrapped_help(&args);
        let clap_words: Vec<&str> = unwrapped.split_whitespace().collect();
        assert_eq!(words, clap_words, "{what}: words changed\n{out}");
        // Something was there to wrap: the long help of every command
        // has lines clap did not break.
        if args.iter().any(|a| a == "--help") && args.len() > 1 {
            assert!(
                unwrapped.lines().any(|l| l.len() > 80),
                "{what}: nothing to wrap\n{unwrapped}"
            );
        }
    }
}

/// `vramtop -h` at 80 columns gives every command its one-line summary,
/// whole on its row; `--help` of the command still says the rest.
#[test]
fn short_help_gives_every_command_a_one_line_summary() {
    use clap::CommandFactory as _;
    let (code, out, err) = common::run_vramtop_with_env(
        &["-h"],
        None,
        &[(vramtop::cli::help::COLUMNS_ENV, "80"), ("NO_COLOR", "1")],
    );
    assert_eq!(code, 0, "{err}");
    let root = vramtop::cli::Cli::command();
    for sub in root.get_subcommands() {
        let name = sub.get_name();
        let about = sub.get_about().expect("a summary").to_string();
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{out}"));
        assert!(row.ends_with(&about), "{name}'s summary is cut:\n{out}");
        let long = sub.get_long_about().map(ToString::to_string);
        if let Some(long) = long {
            assert!(long.len() > about.len(), "{name}: {long}");
        }
    }
}

/// `vramtop help COMMAND` is `vramtop COMMAND --help`, wrapped alike.
#[test]
fn help_command_and_help_flag_print_the_same_wrapped_help() {
    use clap::CommandFactory as _;
    for sub in vramtop::cli::Cli::command().get_subcommands() {
        let name = sub.get_name();
        let env = [(vramtop::cli::help::COLUMNS_ENV, "80"), ("NO_COLOR", "1")];
        let (_, by_flag, _) = common::run_vramtop_with_env(&[name, "--help"], None, &env);
        let (_, by_command, _) = common::run_vramtop_with_env(&["help", name], None, &env);
        assert_eq!(by_flag, by_command, "{name}");
    }
}
