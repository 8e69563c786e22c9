//! `vramtop scenario`: run a built-in (or file) scenario headless and print
//! its per-step figures and outcome, as a table or JSON.

use crate::ui::format::count_of;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::text::{REPORT_WIDTH, cells, wrap, wrap_hanging, wrap_words};
use crate::alloc::sizing::display_bytes;
use crate::alloc::{TraceAction, human_bytes};
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
    ascii: bool,
) -> color_eyre::Result<ExitCode> {
    if list {
        return print_list(json, ascii);
    }
    // clap requires a name without --list; this is for a caller that did not.
    let Some(name) = name else {
        super::say_error(format_args!(
            "name a scenario (or a .toml file); {}",
            builtin_names_line()
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
                "no scenario named '{}'; {}",
                crate::quote::cut(name),
                builtin_names_line()
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
        if let Some(problem) = snapshots.iter().find_map(|(variant, _)| {
            super::output_file_problem(&file_of(variant), force, super::OutputKind::Snapshot)
        }) {
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
    super::emit_text(&text, ascii).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// Each variant's model at the end of its run as a snapshot: every trace
/// entry carries a one-frame traceback naming its step
/// (`<vramtop scenario NAME>`, line = step number, name = step label),
/// but the `annotate` entry each `empty_cache()` step records, named
/// `empty_cache()`.
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
                if entry.action == TraceAction::Annotate {
                    return synthetic_frames(&file, step as u64, super::demo::EMPTY_CACHE_MARK);
                }
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

/// The built-in scenarios' names, for a one-line error: "the built-in
/// ones are a, b, c (see `vramtop scenario --list`)".
fn builtin_names_line() -> String {
    format!(
        "the built-in ones are {} (see `vramtop scenario --list`)",
        scenario::builtin_names().join(", ")
    )
}

fn print_list(json: bool, ascii: bool) -> color_eyre::Result<ExitCode> {
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
    super::emit_text(&text, ascii).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// Columns the report's prose is wrapped to: it reads whole on an
/// 80-column terminal.
const TEXT_WIDTH: usize = 78;

/// Columns a table row takes, its label wrapped within them.
const TABLE_WIDTH: usize = REPORT_WIDTH;

/// The human-readable report: explanation, then one table per variant.
pub fn render(r: &ScenarioResult) -> String {
    let mut out = String::new();
    // A file's name and title may be of any length: what runs over hangs
    // under the first line.
    let heading = format!("{}: {}", r.name, r.title);
    let _ = writeln!(out, "{}\n", wrap_hanging(&heading, TEXT_WIDTH, 2));
    let _ = writeln!(out, "{}\n", wrap(&r.explanation, TEXT_WIDTH));
    // Phrases, not words, so that a figure stays with its unit when a
    // large device's figures push the line past the width.
    // Both figures are the scenario's own (`device_memory`, `context`),
    // not the simulated GPU's that the demo and the dashboard assume.
    // Driver used counts a context per process: where a variant has
    // workers with contexts of their own, its header gives its count.
    let formula = if r.variants.iter().any(|v| v.worker_contexts > 0) {
        "(driver used = reserved + a context per process)"
    } else {
        "(driver used = reserved + context)"
    };
    let device = [
        "the scenario's".to_string(),
        format!("device {},", human_bytes(r.device_memory)),
        format!("CUDA context {}", human_bytes(r.context)),
        formula.to_string(),
    ];
    let _ = writeln!(
        out,
        "{}",
        wrap_words(device.iter().map(String::as_str), TEXT_WIDTH, 2)
    );
    // The `free segs` column, once: frag% counts the bytes of wholly
    // free segments too, and step 2 of fragmentation_oom (frag% 96.7
    // with 0 B allocated) read as an alarm about memory that is only
    // cached.
    let _ = writeln!(
        out,
        "{}",
        wrap(
            "free segs: how many of the segs hold no live block; empty_cache() \
             returns those, and PyTorch frees them before it reports out of \
             memory",
            TEXT_WIDTH
        )
    );
    for v in &r.variants {
        let conf = if v.alloc_conf.is_empty() {
            "PyTorch defaults".to_string()
        } else {
            format!("PYTORCH_CUDA_ALLOC_CONF={}", v.alloc_conf)
        };
        // The main process's context and one per worker.
        let workers = match v.worker_contexts {
            0 => String::new(),
            n => format!(
                "; {n} workers with a CUDA context each: driver used = reserved + {} contexts",
                u64::from(n) + 1
            ),
        };
        // A variant's name and alloc_conf come from the file: the header
        // wraps, hanging under the variant's name.
        let header = format!("== {} ({conf}{workers})", v.variant);
        let _ = writeln!(out, "\n{}", wrap_hanging(&header, TEXT_WIDTH, 3));
        // The figures first, in columns that fit 80: the label, of any
        // length, ends the row (a long one wraps there, not in the middle
        // of the figures).
        // Two-word names on two rows, each word over its column: the
        // names the other screens use ("driver used", "free segs"), in
        // the columns that leave the label its room.
        let _ = writeln!(
            out,
            "{:>4} {:>9} {:>9} {:>9} {:>4} {:>4} {:>5}  label",
            "step", "allocated", "reserved", "driver", "segs", "free", "frag%"
        );
        let _ = writeln!(
            out,
            "{}",
            format!(
                "{:>4} {:>9} {:>9} {:>9} {:>4} {:>4}",
                "", "", "", "used", "", "segs"
            )
            .trim_end()
        );
        for s in &v.steps {
            // The whole label, as `--json` gives it: its column wraps it.
            let mut label = s.label.clone();
            if s.released > 0 {
                let _ = write!(label, " · released {}", display_bytes(s.released));
            }
            if s.oom.is_some() {
                label.push_str(" · OUT OF MEMORY");
            }
            // Three significant digits, as the screens write bytes: at
            // most 9 cells, where the reports' two decimals ran to 11
            // ("530.00 MiB" for 530 MiB + 4 KiB pushed its row's label
            // out of its column, under a "530 MiB" that was exact). The
            // labels' released bytes and the summary's peaks the same.
            let figures = format!(
                "{:>4} {:>9} {:>9} {:>9} {:>4} {:>4} {:>5.1}  ",
                s.step,
                display_bytes(s.allocated),
                display_bytes(s.reserved),
                display_bytes(s.driver_used),
                s.segments,
                // Of `segs`, those wholly free: beside frag% so that a
                // high figure of only cached memory (empty_cache returns
                // it, an OOM's retry frees it first) reads as that.
                s.whole_free_segments,
                s.fragmentation * 100.0
            );
            // The label wraps in its own column, under itself.
            let indent = " ".repeat(cells(&figures));
            let room = TABLE_WIDTH.saturating_sub(cells(&figures)).max(12);
            // `split`, not `lines`: a label of spaces only wraps to
            // nothing, and its row of figures still shows.
            for (k, line) in wrap(&label, room).split('\n').enumerate() {
                let lead = if k == 0 {
                    figures.as_str()
                } else {
                    indent.as_str()
                };
                let row = format!("{lead}{line}");
                let _ = writeln!(out, "{}", row.trim_end());
            }
        }
        let sm = &v.summary;
        // The table's precision: "peak allocated 11 GiB" beside a row's
        // "11.0 GiB" and a "12.50 GiB" peak read as three kinds of figure
        // (`--json` has the bytes).
        let peaks = [
            format!("peak allocated {},", display_bytes(sm.peak_allocated)),
            format!("peak reserved {},", display_bytes(sm.peak_reserved)),
            format!(
                "empty_cache released {}",
                display_bytes(sm.empty_cache_released)
            ),
        ];
        let _ = writeln!(
            out,
            "{}",
            wrap_words(peaks.iter().map(String::as_str), TEXT_WIDTH, 2)
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
