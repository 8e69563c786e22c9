//! `vramtop scenario`: run a built-in (or file) scenario headless and print
//! its per-step figures and outcome, as a table or JSON.

use crate::ui::format::count_of;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use crate::alloc::human_bytes;
use crate::scenario::engine::{STEP_TIME_US, run_variant_model};
use crate::scenario::{self, Scenario, ScenarioResult};
use crate::snapshot::capture::{snapshot_with_frames, synthetic_frames};
use crate::snapshot::{Frames, Snapshot, write_snapshot_file};

/// Runs the `scenario` command.
pub fn run(
    name: Option<&str>,
    json: bool,
    list: bool,
    save_snapshot: Option<&Path>,
    force: bool,
) -> color_eyre::Result<ExitCode> {
    if list {
        return print_list(json);
    }
    let Some(name) = name else {
        super::say_error(format_args!(
            "name a scenario (or a .toml file); the built-in ones are:\n{}",
            names_block()
        ));
        return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
    };
    let parsed = match scenario::builtin(name) {
        Some(p) => p,
        None if looks_like_path(name) => match std::fs::read_to_string(name) {
            Ok(text) => scenario::parse(&text),
            Err(e) => {
                super::say_error(format_args!("cannot read {name}: {e}"));
                return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
            }
        },
        None => {
            super::say_error(format_args!(
                "no scenario named '{name}'; the built-in ones are:\n{}",
                names_block()
            ));
            return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
        }
    };
    let ran = parsed.and_then(|s| scenario::run(&s).map(|r| (s, r)));
    let (parsed, result) = match ran {
        Ok(r) => r,
        Err(e) => {
            super::say_error(format_args!("{name}: {e}"));
            return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
        }
    };
    if let Some(path) = save_snapshot {
        let snapshots = match variant_snapshots(&parsed) {
            Ok(s) => s,
            Err(e) => {
                super::say_error(format_args!("{name}: {e}"));
                return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
            }
        };
        let single = snapshots.len() == 1;
        let file_of = |variant: &str| {
            if single {
                path.to_path_buf()
            } else {
                variant_path(path, variant)
            }
        };
        // Every file is checked before any is written: no half-written set.
        if let Some(problem) = snapshots
            .iter()
            .find_map(|(variant, _)| super::output_file_problem(&file_of(variant), force))
        {
            super::say_error(problem);
            return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
        }
        for (variant, snapshot) in snapshots {
            let file = file_of(&variant);
            match write_snapshot_file(&snapshot, &file) {
                Ok(bytes) => eprintln!(
                    "vramtop scenario: wrote {} (variant {variant}: {}, {}, {bytes} bytes)",
                    file.display(),
                    count_of(snapshot.segments.len(), "segment", "segments"),
                    count_of(
                        snapshot.device_traces.iter().map(Vec::len).sum::<usize>(),
                        "trace entry",
                        "trace entries"
                    ),
                ),
                Err(e) => {
                    super::say_error(e);
                    return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
                }
            }
        }
    }
    let text = if json {
        let mut t = serde_json::to_string_pretty(&result).wrap_err("cannot encode the scenario")?;
        t.push('\n');
        t
    } else {
        render(&result)
    };
    super::emit(&text).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// Each variant's model at the end of its run as a snapshot: every trace
/// entry carries a one-frame traceback naming its step
/// (`<vramtop scenario NAME>`, line = step number, name = step label).
pub fn variant_snapshots(
    scenario: &Scenario,
) -> Result<Vec<(String, Snapshot)>, scenario::ScenarioError> {
    let file = format!("<vramtop scenario {}>", scenario.name);
    scenario
        .variants
        .iter()
        .map(|variant| {
            let (result, model) = run_variant_model(scenario, variant)?;
            let frames: Vec<Frames> = result
                .steps
                .iter()
                .map(|s| synthetic_frames(&file, s.step as u64, &s.label))
                .collect();
            let snapshot = snapshot_with_frames(&model, 0, |entry| {
                // Step n ran at n × STEP_TIME_US; entries before step 1: none.
                let step = (entry.time_us / STEP_TIME_US) as usize;
                step.checked_sub(1)
                    .and_then(|i| frames.get(i))
                    .cloned()
                    .unwrap_or_else(|| Frames::from(Vec::new()))
            });
            Ok((variant.name.clone(), snapshot))
        })
        .collect()
}

/// `out.pickle` → `out-VARIANT.pickle` (the variant name made file-safe).
fn variant_path(path: &Path, variant: &str) -> PathBuf {
    let safe: String = variant
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{safe}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{safe}"),
    };
    path.with_file_name(name)
}

fn looks_like_path(name: &str) -> bool {
    name.ends_with(".toml") || name.contains('/') || Path::new(name).is_file()
}

fn names_block() -> String {
    scenario::builtin_names()
        .iter()
        .map(|n| format!("  {n}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn print_list(json: bool) -> color_eyre::Result<ExitCode> {
    let mut rows = Vec::new();
    for (name, text) in scenario::BUILTIN {
        let title = match scenario::parse(text) {
            Ok(s) => s.title,
            Err(e) => format!("(does not parse: {e})"),
        };
        rows.push((name, title));
    }
    let text = if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(n, t)| serde_json::json!({ "name": n, "title": t }))
            .collect();
        let mut t = serde_json::to_string_pretty(&list).wrap_err("cannot encode the list")?;
        t.push('\n');
        t
    } else {
        let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        rows.iter()
            .map(|(n, t)| format!("{n:<width$}  {t}\n"))
            .collect()
    };
    super::emit(&text).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// Columns the report's prose is wrapped to: it reads whole on an
/// 80-column terminal.
const TEXT_WIDTH: usize = 78;

/// The most of a step's label a row shows (a scenario file may give a
/// long one).
const MAX_LABEL_CHARS: usize = 60;

/// Columns a table row takes, its label wrapped within them.
const TABLE_WIDTH: usize = 80;

/// The human-readable report: explanation, then one table per variant.
pub fn render(r: &ScenarioResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}\n", r.name, r.title);
    let _ = writeln!(out, "{}\n", wrap(&r.explanation, TEXT_WIDTH));
    let _ = writeln!(
        out,
        "device {}, CUDA context {} (driver used = reserved + context)",
        human_bytes(r.device_memory),
        human_bytes(r.context)
    );
    for v in &r.variants {
        let conf = if v.alloc_conf.is_empty() {
            "PyTorch defaults".to_string()
        } else {
            format!("PYTORCH_CUDA_ALLOC_CONF={}", v.alloc_conf)
        };
        let workers = match v.worker_contexts {
            0 => String::new(),
            n => format!("; {n} workers with a CUDA context each"),
        };
        let _ = writeln!(out, "\n== {} ({conf}{workers})", v.variant);
        // The figures first, in columns that fit 80: the label, of any
        // length, ends the row (a long one wraps there, not in the middle
        // of the figures).
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>9} {:>9} {:>4} {:>5}  label",
            "step", "allocated", "reserved", "driver", "segs", "frag%"
        );
        for s in &v.steps {
            let mut label: String = s.label.chars().take(MAX_LABEL_CHARS).collect();
            if s.released > 0 {
                let _ = write!(label, " · released {}", human_bytes(s.released));
            }
            if s.oom.is_some() {
                label.push_str(" · OUT OF MEMORY");
            }
            let figures = format!(
                "{:>4} {:>9} {:>9} {:>9} {:>4} {:>5.1}  ",
                s.step,
                human_bytes(s.allocated),
                human_bytes(s.reserved),
                human_bytes(s.driver_used),
                s.segments,
                s.fragmentation * 100.0
            );
            // The label wraps in its own column, under itself.
            let indent = " ".repeat(figures.chars().count());
            let room = TABLE_WIDTH.saturating_sub(figures.chars().count()).max(12);
            for (k, line) in wrap(&label, room).lines().enumerate() {
                let lead = if k == 0 {
                    figures.as_str()
                } else {
                    indent.as_str()
                };
                let _ = writeln!(out, "{lead}{line}");
            }
        }
        let sm = &v.summary;
        let _ = writeln!(
            out,
            "peak allocated {}, peak reserved {}, empty_cache released {}",
            human_bytes(sm.peak_allocated),
            human_bytes(sm.peak_reserved),
            human_bytes(sm.empty_cache_released)
        );
        match (sm.oom_step, v.steps.last().and_then(|s| s.oom.as_deref())) {
            (Some(step), Some(msg)) => {
                let _ = writeln!(out, "outcome: out of memory at step {step}, the run stops:");
                let _ = writeln!(out, "{}", wrap(msg, TEXT_WIDTH));
            }
            _ => {
                let _ = writeln!(out, "outcome: completed without running out of memory");
            }
        }
    }
    out
}

/// Greedy word wrap for the terminal: every line at most `width`
/// characters. A word longer than that (a Python call in a step's label:
/// `optimizer.zero_grad(set_to_none=True)`) is broken where it reads best
/// ([`break_long_word`]), each piece after the first on a line of its
/// own, not left to run past.
fn wrap(text: &str, width: usize) -> String {
    let width = width.max(1);
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        let pieces = break_long_word(word, width);
        for (k, piece) in pieces.iter().enumerate() {
            let len = piece.chars().count();
            // A broken word's later pieces always start a line.
            if line > 0 && (k > 0 || line + 1 + len > width) {
                out.push('\n');
                line = 0;
            } else if line > 0 {
                out.push(' ');
                line += 1;
            }
            out.push_str(piece);
            line += len;
        }
    }
    out
}

/// Characters a long word is best broken after, most readable first: a
/// call's opening parenthesis or an argument's comma, a path's slash, a
/// dotted name's dot; then the joints inside a name.
const WORD_BREAKS: [&[char]; 2] = [&['(', ',', '/', '.'], &['_', '=', '-', ':']];

/// `word` in pieces of at most `width` characters (`width` ≥ 1): each
/// piece ends after the last character of the most readable kind of
/// [`WORD_BREAKS`] that leaves it at least half the width, else at
/// `width` characters.
fn break_long_word(word: &str, width: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = word;
    while rest.chars().count() > width {
        // Byte offsets just past each of the first `width` characters.
        let ends: Vec<(usize, char)> = rest
            .char_indices()
            .take(width)
            .map(|(at, c)| (at + c.len_utf8(), c))
            .collect();
        let hard = ends.last().map_or(rest.len(), |&(end, _)| end);
        let half = width.div_ceil(2);
        let soft = WORD_BREAKS.iter().find_map(|breaks| {
            ends.iter()
                .enumerate()
                .rev()
                .take_while(|&(chars, _)| chars + 1 >= half)
                .find(|(_, (_, c))| breaks.contains(c))
                .map(|(_, &(end, _))| end)
        });
        let (piece, after) = rest.split_at(soft.unwrap_or(hard));
        pieces.push(piece);
        rest = after;
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_longer_than_its_column_breaks_after_punctuation_else_at_the_width() {
        assert_eq!(
            break_long_word("optimizer.zero_grad(set_to_none=True)", 33),
            ["optimizer.zero_grad(", "set_to_none=True)"]
        );
        // No place that reads well: at the width, whole characters.
        assert_eq!(break_long_word("ab×cd×ef", 3), ["ab×", "cd×", "ef"]);
        assert_eq!(break_long_word("short", 33), ["short"]);
        assert_eq!(
            wrap("a optimizer.zero_grad(set_to_none=True) b", 20),
            "a\noptimizer.zero_grad(\nset_to_none=True) b"
        );
    }
}
