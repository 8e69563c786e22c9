//! `vramtop replay FILE --verify [--json]` and the what-if replay
//! `vramtop replay FILE --alloc-conf CONF… [--capacity SIZE] [--json]`.

use super::text::{REPORT_WIDTH, cells, path_heading, wrap, wrap_under};
use crate::ui::format::count_of;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::{EXIT_BAD_INPUT, EXIT_MISMATCH};
use crate::alloc::{AllocatorConfig, human_bytes};
use crate::snapshot::Stacks;
use crate::snapshot::invariants::Finding;
use crate::snapshot::peak::event_at_index;
use crate::snapshot::replay::{
    DeviceReplay, ReplayStart, VerifyReport, config_from_settings, verify,
};
use crate::snapshot::summary::OomStack;
use crate::snapshot::types::skipped_trace_text;
use crate::snapshot::whatif::{
    DeviceWhatIf, OriginalFigures, RECORDED_LABEL, RunFigures, WhatIfError, WhatIfReport,
    WhatIfSetting, recorded_capacity, whatif,
};

pub fn run(file: &Path, json: bool, ascii: bool) -> color_eyre::Result<ExitCode> {
    // The verdict compares addresses, sizes and streams: no stack is shown.
    let snapshot = match super::read_snapshot_arg_with(file, Stacks::Skip) {
        Ok(s) => s,
        Err(e) => {
            super::say_error(super::snapshot_read_error(
                file,
                &e,
                super::Reads::Snapshots,
            ));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let report = verify(&snapshot);
    let verdict = Verdict::of(&report);
    if json {
        let text = serde_json::to_string_pretty(&JsonReport {
            result: verdict.label(),
            why: verdict.why(),
            report: &report,
        })
        .wrap_err("cannot encode the report")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        super::emit_text(&render_report(&super::input_name(file), &report), ascii)
            .wrap_err("cannot write the output")?;
    }
    super::leave_to_exit(snapshot);
    Ok(ExitCode::from(verdict.exit_code()))
}

/// The one verdict of a verify replay, the same in text and JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every invariant holds and every device's trace replayed in full;
    /// with what it does not cover (entries left out, GPUs without a
    /// trace) when there is something.
    FullMatch(Option<String>),
    /// An invariant failed or a replay diverged: the first divergence.
    Mismatch(String),
    /// A device's trace could not be replayed: why.
    NotReplayable(String),
    /// The file contradicts itself (its blocks do not add up to their
    /// segment, a segment's sums are not its blocks'): bad input, nothing
    /// vramtop's model could be checked against. Why, from "the file's final
    /// layout is inconsistent: ".
    InconsistentFile(String),
    /// A state-only file: invariants checked, nothing replayed; with the
    /// trace entries left out, if any (then the file had a trace, none of
    /// it readable here).
    NoTrace(Option<String>),
}

impl Verdict {
    pub fn of(report: &VerifyReport) -> Verdict {
        // Before any mismatch: a replay of a file that contradicts itself
        // fails for the file's sake, not the model's.
        if let Some(why) = inconsistency(&report.findings) {
            return Verdict::InconsistentFile(why);
        }
        if let Some(f) = report.findings.first() {
            return Verdict::Mismatch(format!(
                "invariant: segment {:#x} (GPU {}): {}",
                f.address, f.device, f.message
            ));
        }
        if let Some(r) = report.replays.iter().find(|r| !r.full_match()) {
            return Verdict::Mismatch(match &r.divergence {
                Some(d) => format!(
                    "GPU {}: {}: PyTorch {} / model {}",
                    r.device,
                    event_at_index(d.event_index, r.events_in_trace),
                    d.expected,
                    d.model
                ),
                None => format!("GPU {}: the final state differs", r.device),
            });
        }
        if let Some(u) = report.unreplayable.first() {
            return Verdict::NotReplayable(format!("GPU {}: {}", u.device, u.reason));
        }
        let left_out = (report.skipped_trace_entries > 0).then(|| {
            format!(
                "{} left out, {} unknown to this vramtop",
                count_of(report.skipped_trace_entries, "trace entry", "trace entries"),
                if report.skipped_trace_entries == 1 {
                    "its action"
                } else {
                    "their actions"
                }
            )
        });
        if report.replays.is_empty() {
            return Verdict::NoTrace(left_out);
        }
        // What a FULL MATCH does not cover: it is said, not left for the
        // reader to notice from the lines above.
        let mut caveats = Vec::new();
        if let Some(left_out) = left_out {
            caveats.push(format!("of the trace entries read only: {left_out}"));
        }
        if !report.unverified.is_empty() {
            let gpus = report
                .unverified
                .iter()
                .map(|u| u.device.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let gpus = if report.unverified.len() == 1 {
                format!("GPU {gpus}")
            } else {
                format!("GPUs {gpus}")
            };
            caveats.push(format!("{gpus} not verified: no trace to replay"));
        }
        Verdict::FullMatch((!caveats.is_empty()).then(|| caveats.join("; ")))
    }

    /// FULL MATCH, MISMATCH, NOT REPLAYABLE or NO TRACE.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::FullMatch(_) => "FULL MATCH",
            Verdict::Mismatch(_) => "MISMATCH",
            Verdict::NotReplayable(_) | Verdict::InconsistentFile(_) => "NOT REPLAYABLE",
            Verdict::NoTrace(_) => "NO TRACE",
        }
    }

    /// What the label stands on (the first divergence, why not replayable),
    /// or what a full match does not cover.
    pub fn why(&self) -> Option<String> {
        match self {
            Verdict::Mismatch(why)
            | Verdict::NotReplayable(why)
            | Verdict::InconsistentFile(why) => Some(why.clone()),
            Verdict::NoTrace(None) => {
                Some("state-only snapshot: invariants checked, nothing replayed".to_string())
            }
            Verdict::NoTrace(Some(left_out)) => Some(format!(
                "no allocator call read: invariants checked, nothing replayed ({left_out})"
            )),
            Verdict::FullMatch(caveat) => caveat.clone(),
        }
    }

    /// 0 when nothing was found wrong (a state-only file's invariants
    /// held), 1 when the model and the recording
    /// disagree (or the model could not replay the trace), 2 for a file
    /// that contradicts itself: bad input, as an unreadable one is.
    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::FullMatch(_) | Verdict::NoTrace(_) => 0,
            Verdict::Mismatch(_) | Verdict::NotReplayable(_) => EXIT_MISMATCH,
            Verdict::InconsistentFile(_) => EXIT_BAD_INPUT,
        }
    }

    /// The verdict when it finds something wrong with the file (a
    /// mismatch, a trace that cannot be replayed, a file that contradicts
    /// itself): what what-if mode reports and exits with as verify does.
    /// `None` for a full match or a file without a trace.
    pub fn finding(self) -> Option<Verdict> {
        match self {
            Verdict::FullMatch(_) | Verdict::NoTrace(_) => None,
            found => Some(found),
        }
    }

    /// What the verdict is about, for the line before it in the text.
    fn meaning(&self) -> &'static str {
        match self {
            Verdict::InconsistentFile(_) => INCONSISTENT_MEANING,
            _ => VERDICT_MEANING,
        }
    }
}

/// Why the file contradicts itself, from its first finding that says so
/// ("the file's final layout is inconsistent: segment 0x…"), if one does:
/// verify's verdict then, and what-if's exit 2, for one reason.
fn inconsistency(findings: &[Finding]) -> Option<String> {
    let f = findings.iter().find(|f| f.kind.contradicts_the_file())?;
    Some(format!(
        "the file's final layout is inconsistent: segment {:#x} (GPU {}): {}",
        f.address, f.device, f.message
    ))
}

/// `replay --json`: the verdict on top, then the report's fields.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
    #[serde(flatten)]
    report: &'a VerifyReport,
}

/// "12 segments, 2 expandable segments, 294 live blocks": the start state
/// rebuilt for a trace that begins mid-run (each kind of segment only when
/// there are some, the plain ones also when there are none at all).
fn start_counts(segments: usize, expandable: usize, live_blocks: usize) -> String {
    let mut parts = Vec::new();
    // "0 segments, 2 expandable segments" reads as a contradiction.
    if segments > 0 || expandable == 0 {
        parts.push(count_of(segments, "segment", "segments"));
    }
    if expandable > 0 {
        parts.push(count_of(
            expandable,
            "expandable segment",
            "expandable segments",
        ));
    }
    parts.push(count_of(live_blocks, "live block", "live blocks"));
    parts.join(", ")
}

/// `lead` then `text` wrapped under its start, within 80 columns.
fn line_under(out: &mut String, lead: &str, text: &str) {
    let _ = writeln!(out, "{}", wrap_under(lead, text, REPORT_WIDTH));
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISMATCH" }
}

fn render_device(out: &mut String, r: &DeviceReplay) {
    let start = match &r.start {
        ReplayStart::Empty => "from an empty allocator (full history)".to_string(),
        ReplayStart::Reconstructed {
            segments,
            live_blocks,
            guessed_block_sizes,
            corrected_block_sizes,
            expandable_reservations,
            ..
        } => format!(
            "mid-run: start state rebuilt from the final layout ({}, \
             {guessed_block_sizes} sizes inferred from requests, {corrected_block_sizes} of them \
             decided by the trace)",
            start_counts(*segments, *expandable_reservations, *live_blocks)
        ),
    };
    line_under(
        out,
        &format!("GPU {}: ", r.device),
        &format!("trace {start}"),
    );
    if let ReplayStart::Reconstructed { inferences, .. } = &r.start {
        for inference in inferences {
            line_under(out, "  inferred: ", inference);
        }
    }
    let _ = writeln!(
        out,
        "  events matched       {}/{} ({}, {} in the trace)",
        r.events_matched,
        r.events_in_trace,
        count_of(r.segment_allocs, "segment alloc", "segment allocs"),
        count_of(r.ooms, "OOM", "OOMs")
    );
    let _ = writeln!(
        out,
        "  addresses matched    {}/{} allocations",
        r.addresses_matched, r.allocations_replayed
    );
    if let Some(d) = &r.divergence {
        line_under(
            out,
            "  first divergence     ",
            &format!(
                "{}: PyTorch {} / model {}",
                event_at_index(d.event_index, r.events_in_trace),
                d.expected,
                d.model
            ),
        );
        if matches!(r.start, ReplayStart::Reconstructed { .. }) {
            line_under(
                out,
                "                       ",
                "(no start state the trace allows, of those tried, explains this event)",
            );
        }
    }
    let layout = match (r.final_layout_matches, r.stale_requested_sizes_match) {
        (true, Some(true)) => "identical (including stale requested sizes of free blocks)",
        (true, Some(false)) => "identical blocks, but stale requested sizes differ",
        (true, None) => "identical (sizes, states, active requested sizes)",
        (false, _) => "DIFFERENT",
    };
    line_under(out, "  final layout         ", layout);
    for d in r.layout_differences.iter().take(5) {
        line_under(out, "    ", d);
    }
    let cmp = |a: u64, b: u64| if a == b { "=" } else { "≠" };
    let _ = writeln!(
        out,
        "  reserved             model {} {} snapshot {}",
        r.reserved_model,
        cmp(r.reserved_model, r.reserved_snapshot),
        r.reserved_snapshot
    );
    let _ = writeln!(
        out,
        "  allocated            model {} {} snapshot {}",
        r.allocated_model,
        cmp(r.allocated_model, r.allocated_snapshot),
        r.allocated_snapshot
    );
    if let Some(e) = &r.model_invariant_error {
        line_under(out, "  model self-check     ", &format!("FAILED: {e}"));
    }
}

/// The line before the verdict in the text report (not in `--json`): what
/// the verdict is about.
pub const VERDICT_MEANING: &str =
    "verdict: checks vramtop's allocator model against this recording, not your program";

/// [`VERDICT_MEANING`] for a file that contradicts itself: there is nothing
/// to check the model against, and the fault is the file's.
pub const INCONSISTENT_MEANING: &str = "verdict: the file contradicts itself (hand-made or \
     damaged?) and PyTorch writes no such layout: bad input, not a finding about vramtop's \
     allocator model or your program";

/// The human-readable report.
pub fn render_report(name: &str, report: &VerifyReport) -> String {
    let mut out = String::new();
    // A path of any depth keeps its file name whole; the figures wrap
    // under the text after it, or under the path on a line of its own.
    let _ = writeln!(
        out,
        "{}",
        path_heading(
            name,
            &format!(
                "{}, {}, reserved {} ({} B), allocated {} ({} B), {}",
                count_of(report.segments, "segment", "segments"),
                count_of(report.blocks, "block", "blocks"),
                human_bytes(report.reserved),
                report.reserved,
                human_bytes(report.allocated),
                report.allocated,
                count_of(report.trace_entries, "trace entry", "trace entries")
            ),
            REPORT_WIDTH
        )
    );
    let inconsistent = report
        .findings
        .iter()
        .any(|f| f.kind.contradicts_the_file());
    let _ = writeln!(
        out,
        "invariants: {} ({})",
        // A layout that does not add up is the file's fault: it matches
        // nothing, rather than mismatching the model.
        if inconsistent {
            "INCONSISTENT FILE"
        } else {
            verdict(report.findings.is_empty())
        },
        count_of(report.findings.len(), "finding", "findings")
    );
    for f in report.findings.iter().take(10) {
        line_under(
            &mut out,
            &format!("  segment {:#x} (GPU {}): ", f.address, f.device),
            &f.message,
        );
    }
    if report.findings.len() > 10 {
        let _ = writeln!(out, "  … {} more", report.findings.len() - 10);
    }
    // Not a mismatch: the replay follows the file's order, whatever its
    // times say (one line per device at most).
    for b in &report.backwards_times {
        line_under(
            &mut out,
            "trace times: ",
            &format!(
                "GPU {}: {}; its times are as recorded, replayed in the file's order",
                b.device, b.message
            ),
        );
    }
    if let Some(left_out) =
        skipped_trace_text(report.skipped_trace_entries, &report.skipped_trace_actions)
    {
        line_under(
            &mut out,
            "trace: ",
            &format!("{left_out}; the rest is replayed without them"),
        );
    }
    if report.replays.is_empty() && report.unreplayable.is_empty() {
        if report.trace_entries == 0 {
            let _ = writeln!(out, "trace: none to replay (state-only snapshot)");
        } else {
            // The "state" recording mode leaves a marker or two behind;
            // anything else (a lone free's completion) is a trace the
            // summary and the viewer step through, only too short to hold
            // a call.
            let markers_only = report
                .trace_actions
                .iter()
                .all(|&(action, _)| crate::snapshot::types::is_marker(action));
            line_under(
                &mut out,
                "trace: ",
                &format!(
                    "none to replay: {} an allocator call ({}; {})",
                    if report.trace_entries == 1 {
                        "its 1 entry is not".to_string()
                    } else {
                        format!("none of its {} entries is", report.trace_entries)
                    },
                    report
                        .trace_actions
                        .iter()
                        .map(|(action, n)| format!("{n} {}", action.as_str()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if markers_only {
                        "state-only snapshot"
                    } else {
                        "a replay starts at an allocation"
                    }
                ),
            );
        }
    }
    // "events matched 5794/5794" beside "5803 trace entries" says why.
    let replayed: usize = report.replays.iter().map(|r| r.events_in_trace).sum();
    let left_out = report.trace_entries.saturating_sub(replayed);
    if !report.replays.is_empty() && report.unreplayable.is_empty() && left_out > 0 {
        line_under(
            &mut out,
            "trace: ",
            &format!(
                "{left_out} of its {} entries not replayed: markers (snapshot, annotate), or on \
                 a GPU without an allocator call",
                report.trace_entries
            ),
        );
    }
    for r in &report.replays {
        render_device(&mut out, r);
    }
    for u in &report.unreplayable {
        let lead = format!("GPU {}: ", u.device);
        line_under(&mut out, &lead, &format!("not replayable: {}", u.reason));
    }
    // Beside a replayed GPU, one without a trace is said, not left out
    // (a state-only file says so above).
    if !report.replays.is_empty() || !report.unreplayable.is_empty() {
        for u in &report.unverified {
            let lead = format!("GPU {}: ", u.device);
            line_under(
                &mut out,
                &lead,
                &format!(
                    "not verified: {}; only its segments' invariants were checked",
                    u.reason
                ),
            );
        }
    }
    let verdict = Verdict::of(report);
    // A newcomer reads "FULL MATCH" as a verdict on their program.
    let meaning = verdict.meaning().trim_start_matches("verdict: ");
    line_under(&mut out, "verdict: ", meaning);
    result_line(&mut out, &verdict);
    out
}

/// The last line of a report: `result: LABEL (why)`, wrapped under its
/// lead, or `result: LABEL` when nothing qualifies it.
fn result_line(out: &mut String, verdict: &Verdict) {
    match verdict.why() {
        Some(why) => line_under(out, "result: ", &format!("{} ({why})", verdict.label())),
        None => {
            let _ = writeln!(out, "result: {}", verdict.label());
        }
    }
}

// --------------------------------------------------------------------- what-if

/// `vramtop replay FILE --alloc-conf CONF… [--capacity SIZE] [--json]`.
pub fn run_whatif(
    file: &Path,
    confs: &[String],
    capacity: Option<super::CapacityArg>,
    json: bool,
    ascii: bool,
) -> color_eyre::Result<ExitCode> {
    let mut settings = Vec::new();
    for conf in confs {
        match AllocatorConfig::parse_modelled(conf) {
            Ok(config) => settings.push(WhatIfSetting {
                conf: conf.clone(),
                config,
            }),
            Err(e) => {
                super::say_error(format_args!("--alloc-conf '{conf}': {e}"));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        }
    }
    let snapshot = match super::read_snapshot_arg(file) {
        Ok(s) => s,
        Err(e) => {
            super::say_error(super::snapshot_read_error(
                file,
                &e,
                super::Reads::Snapshots,
            ));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    // What verify mode finds wrong with the file is found in what-if mode
    // too, with the same verdict and exit status: a file that contradicts
    // itself is bad input (exit 2), a trace the model cannot replay (a
    // divergence, a failed invariant, an impossible event) exit 1, whatever
    // the what-if runs show; their table alone read as a clean answer.
    let verified = verify(&snapshot);
    let finding = Verdict::of(&verified).finding();
    // Unlimited, a file that ran out of memory would run out under no
    // setting: every what-if column would read as the fix. Without
    // --capacity, the recording's own capacity at its OOM: only where the
    // trace is of that one GPU (the what-if takes one capacity for all its
    // GPUs, and another GPU's could be larger) and no setting asks for
    // per_process_memory_fraction (a share of the device's total, which
    // reserved + free at the OOM is not: it lacks the CUDA context).
    let fraction_asked = settings
        .iter()
        .any(|s| s.config.per_process_memory_fraction.is_some());
    let from_recording = match capacity {
        None if !fraction_asked => recorded_capacity(&snapshot).filter(|r| {
            snapshot
                .device_traces
                .iter()
                .enumerate()
                .filter(|(_, trace)| !trace.is_empty())
                .all(|(device, _)| device == r.device as usize)
        }),
        _ => None,
    };
    let capacity = match capacity {
        Some(super::CapacityArg::Bytes(bytes)) => Some(bytes),
        Some(super::CapacityArg::Unlimited) => None,
        None => from_recording.map(|r| r.bytes),
    };
    // Under a capacity, the recorded settings at that capacity too, first:
    // the original ran on whatever the recorded device had, and settings
    // compared only with it would read as the cause of an OOM that is the
    // capacity's. (`--capacity` alone gets that column from `whatif`.)
    if capacity.is_some() && !settings.is_empty() {
        let config = config_from_settings(snapshot.allocator_settings.as_ref());
        settings.insert(
            0,
            WhatIfSetting {
                conf: RECORDED_LABEL.to_string(),
                config,
            },
        );
    }
    let mut report = match whatif(&snapshot, &settings, capacity) {
        Ok(r) => r,
        // The same verdict as the verify mode gives a state-only file.
        Err(WhatIfError::NoTrace) => {
            let verdict = finding.unwrap_or(Verdict::NoTrace(None));
            let text = if json {
                let value = serde_json::json!({
                    "result": verdict.label(),
                    "why": verdict.why(),
                });
                serde_json::to_string_pretty(&value).wrap_err("cannot encode the report")? + "\n"
            } else {
                let mut text = path_heading(
                    &super::input_name(file),
                    &WhatIfError::NoTrace.to_string(),
                    REPORT_WIDTH,
                );
                text.push('\n');
                result_line(&mut text, &verdict);
                text
            };
            super::emit_text(&text, ascii).wrap_err("cannot write the output")?;
            return Ok(ExitCode::from(verdict.exit_code()));
        }
        Err(e) => {
            super::say_error(format_args!("{}: {e}", super::input_name(file)));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    report.capacity_from_recording = from_recording;
    // The original column is the model's re-run: where verify does not
    // match the recording, its figures are not the recording's.
    report.check_original(&verified);
    if json {
        let text = serde_json::to_string_pretty(&WhatIfJson {
            result: finding.as_ref().map(Verdict::label),
            why: finding.as_ref().and_then(Verdict::why),
            report: &report,
        })
        .wrap_err("cannot encode the report")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        let mut text = render_whatif(&super::input_name(file), &report);
        if let Some(verdict) = &finding {
            // As verify's report ends: MISMATCH alone reads as a verdict
            // on the program.
            let meaning = verdict.meaning().trim_start_matches("verdict: ");
            line_under(&mut text, "verdict: ", meaning);
            result_line(&mut text, verdict);
        }
        super::emit_text(&text, ascii).wrap_err("cannot write the output")?;
    }
    Ok(ExitCode::from(finding.map_or(0, |v| v.exit_code())))
}

/// `replay --alloc-conf … --json`: the report, with verify's verdict on
/// top only where verify finds something wrong with the file (MISMATCH,
/// NOT REPLAYABLE): what-if has no verdict of its own.
#[derive(serde::Serialize)]
struct WhatIfJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
    #[serde(flatten)]
    report: &'a WhatIfReport,
}

fn settings_label(settings: &str) -> String {
    if settings.is_empty() {
        "(defaults)".to_string()
    } else {
        settings.to_string()
    }
}

/// Marks the column of a run that skipped allocations (out of memory
/// where the original got them) in its header, not beside each figure: a
/// mark beside a figure equal to the original's read as "differs". The
/// footnote under the table says what it means.
const PARTIAL_MARK: &str = " *";

/// A row that does not apply to a run (pages of a run without expandable
/// segments): nothing to mark.
const NOT_APPLICABLE: &str = "n/a";

/// The row of the largest reserved − allocated gap, in PyTorch's words
/// for that gap (its OOM message's "If reserved but unallocated memory is
/// large"): "peak reserved−allocated" read as the peak of reserved less
/// allocated. 25 cells at most: wider, the name column left no room in
/// 80 for a run's OOM, "2×, first at event 51/97 (#50)", beside
/// "defaults (recorded)" (nor for "expandable_segments:True" beside
/// "not recorded: defaults" from 29).
const UNALLOCATED_ROW: &str = "most reserved unallocated";

/// The comparison table rows: (row name, one cell per run).
fn whatif_rows(d: &DeviceWhatIf, recorded: Option<&str>) -> Vec<(&'static str, Vec<String>)> {
    let runs = &d.runs;
    let cells = |f: &dyn Fn(&RunFigures) -> String| runs.iter().map(f).collect::<Vec<_>>();
    // The figures of a run that skipped allocations are partial (a lower
    // peak there is the missing allocations, not the settings): its
    // column's header says so ([`PARTIAL_MARK`]).
    let figures = cells;
    let event = |index: usize| event_at_index(index, d.trace_entries);
    vec![
        (
            "settings",
            cells(&|r| match (r.label.as_str(), recorded) {
                ("original", Some("")) => "defaults (recorded)".to_string(),
                ("original", Some(s)) => format!("{s} (recorded)"),
                ("original", None) => "not recorded: defaults".to_string(),
                _ => settings_label(&r.settings),
            }),
        ),
        (
            "capacity",
            cells(&|r| match (r.label.as_str(), r.capacity) {
                ("original", _) => "as recorded".to_string(),
                (_, Some(c)) => human_bytes(c),
                (_, None) => "unlimited".to_string(),
            }),
        ),
        ("peak reserved", figures(&|r| human_bytes(r.peak_reserved))),
        (
            "peak allocated",
            figures(&|r| human_bytes(r.peak_allocated)),
        ),
        (
            UNALLOCATED_ROW,
            figures(&|r| human_bytes(r.peak_unallocated)),
        ),
        // Two rows, not "99.0% (largest free 24.41 MiB)" in one: a column
        // as wide as that left no room for a second beside it in 80.
        // Indented under the row above: "the peak" alone read as the peak
        // of allocated or reserved, whose fragmentation differs.
        (
            "  fragmentation there",
            figures(&|r| format!("{:.1}%", r.fragmentation_at_peak * 100.0)),
        ),
        (
            "  largest free there",
            figures(&|r| human_bytes(r.largest_free_at_peak)),
        ),
        (
            "final reserved",
            figures(&|r| human_bytes(r.final_reserved)),
        ),
        (
            "final allocated",
            figures(&|r| human_bytes(r.final_allocated)),
        ),
        (
            "final fragmentation",
            figures(&|r| format!("{:.1}%", r.final_fragmentation * 100.0)),
        ),
        (
            "segments peak / final",
            figures(&|r| format!("{} / {}", r.peak_segments, r.final_segments)),
        ),
        (
            "cudaMalloc / cudaFree",
            figures(&|r| format!("{} / {}", r.segment_allocs, r.segment_frees)),
        ),
        (
            "pages mapped / unmapped",
            figures(&|r| {
                // A run that starts from expandable segments can unmap
                // their pages (empty_cache) whatever its setting.
                if r.expandable_segments || r.segment_maps > 0 || r.start_expandable_segments > 0 {
                    format!("{} / {}", r.segment_maps, r.segment_unmaps)
                } else {
                    NOT_APPLICABLE.to_string()
                }
            }),
        ),
        (
            "out of memory",
            cells(&|r| match &r.first_oom {
                None => "no".to_string(),
                Some(o) if r.ooms == 1 => format!("at {}", event(o.event_index)),
                Some(o) => format!("{}×, first at {}", r.ooms, event(o.event_index)),
            }),
        ),
        (
            "first divergence",
            cells(&|r| match (&r.divergence, r.label.as_str()) {
                (_, "original") => "—".to_string(),
                (None, _) => "none".to_string(),
                (Some(d), _) => format!("at {}", event(d.event_index)),
            }),
        ),
    ]
}

/// Cells of the indent and of the gap before each column.
const GAP: usize = 2;

/// The what-if table in 80 columns: a row name, then a column per run
/// (`header`). Columns that do not all fit beside the names are laid out
/// in groups, each with the original's column (the first) again for
/// comparison and as many runs as fit; a group whose columns still do not
/// fit wraps the widest cells (a long settings string breaks after its
/// commas) over lines of their own within the column.
fn render_table(out: &mut String, header: &[String], rows: &[(&str, Vec<String>)]) {
    if header.is_empty() {
        return;
    }
    let name_width = rows.iter().map(|(n, _)| cells(n)).max().unwrap_or(0);
    let room = REPORT_WIDTH.saturating_sub(GAP + name_width);
    // Each column's texts: its heading and its cells.
    let texts: Vec<Vec<&str>> = (0..header.len())
        .map(|k| {
            header
                .get(k)
                .into_iter()
                .chain(rows.iter().filter_map(|(_, row)| row.get(k)))
                .map(String::as_str)
                .collect()
        })
        .collect();
    let natural: Vec<usize> = texts
        .iter()
        .map(|t| t.iter().map(|c| cells(c)).max().unwrap_or(0))
        .collect();
    let span = |columns: &[usize]| columns.iter().map(|&k| GAP + natural[k]).sum::<usize>();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group = vec![0];
    for k in 1..header.len() {
        let wider = [group.as_slice(), &[k]].concat();
        // A run too wide to share a group with another goes beside the
        // original alone.
        if group.len() > 1 && span(&wider) > room {
            groups.push(std::mem::replace(&mut group, vec![0, k]));
        } else {
            group = wider;
        }
    }
    groups.push(group);
    for (g, columns) in groups.iter().enumerate() {
        if g > 0 {
            out.push('\n');
        }
        let group_texts: Vec<Vec<&str>> = columns.iter().map(|&k| texts[k].clone()).collect();
        let widths = fitted_widths(&group_texts, room);
        let in_group = |row: &[String]| -> Vec<String> {
            columns
                .iter()
                .map(|&k| row.get(k).cloned().unwrap_or_default())
                .collect()
        };
        table_row(out, "", name_width, &widths, &in_group(header));
        for (name, row) in rows {
            table_row(out, name, name_width, &widths, &in_group(row));
        }
    }
}

/// Column widths, for the texts of each column, that fit `room` with a
/// gap before each: the texts' own widths where they fit; else every
/// column cut to a common width, each then narrowed to what its wrapped
/// texts take, and the room that frees given back to the widest columns
/// first (a settings string that broke at that width may fit whole).
fn fitted_widths(columns: &[Vec<&str>], room: usize) -> Vec<usize> {
    let taken = |texts: &[&str], width: usize| {
        texts
            .iter()
            .flat_map(|t| wrap(t, width).lines().map(cells).collect::<Vec<_>>())
            .max()
            .unwrap_or(0)
    };
    let natural: Vec<usize> = columns
        .iter()
        .map(|texts| taken(texts, usize::MAX))
        .collect();
    let budget = room.saturating_sub(GAP * columns.len());
    if natural.iter().sum::<usize>() <= budget {
        return natural;
    }
    // The largest common cap under which the columns fit.
    let mut cap = natural.iter().copied().max().unwrap_or(0);
    while cap > 1 && natural.iter().map(|&w| w.min(cap)).sum::<usize>() > budget {
        cap -= 1;
    }
    let mut widths: Vec<usize> = columns
        .iter()
        .zip(&natural)
        .map(|(texts, &w)| taken(texts, w.min(cap)))
        .collect();
    let mut widest_first: Vec<usize> = (0..columns.len()).collect();
    widest_first.sort_by_key(|&k| std::cmp::Reverse(natural[k]));
    for k in widest_first {
        let slack = budget.saturating_sub(widths.iter().sum::<usize>());
        if slack > 0 && natural[k] > widths[k] {
            widths[k] = taken(&columns[k], natural[k].min(widths[k] + slack));
        }
    }
    widths
}

/// One row of the table, over as many lines as its tallest cell needs:
/// the name on the first, each cell wrapped within its column's width.
fn table_row(out: &mut String, name: &str, name_width: usize, widths: &[usize], texts: &[String]) {
    let lines: Vec<Vec<String>> = texts
        .iter()
        .zip(widths)
        .map(|(text, &width)| wrap(text, width).lines().map(str::to_string).collect())
        .collect();
    let height = lines.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let pad = |text: &str, width: usize| {
        format!("{text}{}", " ".repeat(width.saturating_sub(cells(text))))
    };
    for line in 0..height {
        let mut text = " ".repeat(GAP);
        text.push_str(&pad(if line == 0 { name } else { "" }, name_width));
        for (cell, &width) in lines.iter().zip(widths) {
            text.push_str(&" ".repeat(GAP));
            text.push_str(&pad(cell.get(line).map_or("", String::as_str), width));
        }
        let _ = writeln!(out, "{}", text.trim_end());
    }
}

/// The lead of a note under the what-if table: its text wraps under
/// the text's start.
const NOTE: &str = "  note: ";

fn render_whatif_device(out: &mut String, d: &DeviceWhatIf, recorded: Option<&str>) {
    let start = match &d.start {
        ReplayStart::Empty => "starts from an empty allocator (full history)".to_string(),
        ReplayStart::Reconstructed {
            segments,
            live_blocks,
            expandable_reservations,
            ..
        } => format!(
            "starts mid-run, from the state rebuilt for the trace's start ({})",
            start_counts(*segments, *expandable_reservations, *live_blocks)
        ),
    };
    line_under(
        out,
        &format!("GPU {}: ", d.device),
        &format!(
            "{}, {}; {start}",
            count_of(d.trace_entries, "trace entry", "trace entries"),
            count_of(d.calls, "program call", "program calls")
        ),
    );
    // Before the table: a column left out of it must not go unnoticed.
    for refused in &d.not_replayed {
        line_under(
            out,
            &format!("  {}: ", settings_label(&refused.label)),
            &format!("not replayed: {}", refused.reason),
        );
    }
    let label = |r: &RunFigures| column_label(r, d.original_figures);
    let header: Vec<String> = d
        .runs
        .iter()
        .map(|r| {
            if r.figures_partial_after.is_some() {
                label(r) + PARTIAL_MARK
            } else {
                label(r)
            }
        })
        .collect();
    render_table(out, &header, &whatif_rows(d, recorded));
    render_partial_footnotes(out, &d.runs, d.original_figures, d.trace_entries);
    if d.original_figures == OriginalFigures::Model {
        line_under(
            out,
            NOTE,
            &format!(
                "{ORIGINAL_MODEL}: the model's figures for this trace under the recorded \
                 settings, not the recording's: vramtop's model does not replay this trace \
                 exactly (the result below)"
            ),
        );
    }
    if let Some(&first) = d.releases_read_as_retry.first() {
        line_under(
            out,
            NOTE,
            &format!(
                "{} released cached segments first (first at {}); read as malloc's \
                 retry path on a full device, not empty_cache(): if the program called \
                 empty_cache() there, runs with more room diverge there",
                count_of(d.releases_read_as_retry.len(), "allocation", "allocations"),
                event_at_index(first, d.trace_entries)
            ),
        );
    }
    if let ReplayStart::Reconstructed {
        segments,
        expandable_reservations: 0,
        ..
    } = &d.start
    {
        for r in d
            .runs
            .iter()
            .filter(|r| r.label != "original" && r.expandable_segments && r.segment_maps == 0)
        {
            line_under(
                out,
                NOTE,
                &format!(
                    "{} mapped no page: the trace needed no new memory, and the {} of its \
                     start are ordinary ones made under the recorded settings, so the setting \
                     had nothing to act on here",
                    settings_label(&r.label),
                    count_of(*segments, "segment", "segments")
                ),
            );
        }
    }
    // A run with expandable segments off still starts from the trace's
    // start state, expandable segments and all: a trace that begins
    // mid-run holds blocks allocated before it, which a fresh process
    // would not have, so it cannot be re-run as one.
    for r in d
        .runs
        .iter()
        .filter(|r| !r.expandable_segments && r.start_expandable_segments > 0)
    {
        line_under(
            out,
            NOTE,
            &format!(
                "{} starts from the state rebuilt for the trace's start, which keeps its {}:                  a trace that begins mid-run cannot be re-run as a fresh process; only the                  memory obtained after the start follows the setting",
                settings_label(&r.label),
                count_of(
                    r.start_expandable_segments,
                    "expandable segment",
                    "expandable segments"
                )
            ),
        );
    }
    if let Some(original) = d.runs.first() {
        for r in d.runs.iter().skip(1) {
            if let Some(why) = allocated_differs_by_carving(original, r) {
                line_under(out, NOTE, &format!("{}: {why}", label(r)));
            }
        }
    }
    if let Some(div) = &d.replica_divergence {
        line_under(
            out,
            NOTE,
            &format!(
                "the model with the recorded settings decided otherwise than the recording on \
                 the {} at {}: {}; the original column is approximate from there",
                div.call,
                event_at_index(div.event_index, d.trace_entries),
                div.summary
            ),
        );
    }
    for r in &d.runs {
        render_run_details(out, r, &label(r), d.trace_entries);
    }
}

/// Why `run`'s allocated figures differ from the `original`'s though both
/// hold the same allocations (none skipped or kept, the same bytes
/// requested at the end): `memory_allocated()` counts whole blocks, and the
/// settings carve requests into blocks otherwise. `None` when the figures
/// agree or the allocations differ.
fn allocated_differs_by_carving(original: &RunFigures, run: &RunFigures) -> Option<String> {
    let same_allocations = [original, run]
        .iter()
        .all(|r| r.allocations_skipped == 0 && r.allocations_kept == 0)
        && run.final_requested == original.final_requested;
    let allocated_differs = run.peak_allocated != original.peak_allocated
        || run.final_allocated != original.final_allocated;
    if !same_allocations || !allocated_differs {
        return None;
    }
    // PyTorch's should_split: with expandable segments any remainder of
    // 512 B or more is split off; without, a large-pool block is split
    // only when more than 1 MiB would remain.
    let how = if run.expandable_segments == original.expandable_segments {
        "these settings round requests or split blocks otherwise"
    } else {
        "with expandable segments a block is split when 512 B or more would be left, without \
         them a large block keeps a remainder of up to 1 MiB"
    };
    Some(format!(
        "allocated differs from the original's though the same allocations are live ({} requested \
         at the end): allocated counts whole blocks, and {how}",
        human_bytes(run.final_requested)
    ))
}

/// One footnote per trace index where columns began to skip allocations,
/// whose headers carry [`PARTIAL_MARK`]: "* ran out of memory at #48
/// (expandable_segments:True): every figure of the column leaves out …".
fn render_partial_footnotes(
    out: &mut String,
    runs: &[RunFigures],
    original: OriginalFigures,
    events: usize,
) {
    let mut columns_by_index: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for r in runs {
        if let Some(index) = r.figures_partial_after {
            columns_by_index
                .entry(index)
                .or_default()
                .push(column_label(r, original));
        }
    }
    for (index, columns) in columns_by_index {
        line_under(
            out,
            "  * ",
            &format!(
                "{} ran out of memory at {}: every figure of {} leaves out the \
                 allocations that failed there and later",
                columns.join(", "),
                event_at_index(index, events),
                if columns.len() == 1 {
                    "the column"
                } else {
                    "these columns"
                }
            ),
        );
    }
}

/// The original column's name where its figures are the model's re-run,
/// not the recording's ([`OriginalFigures::Model`]).
pub const ORIGINAL_MODEL: &str = "original (model re-run)";

/// The name of a run's column: "original" ([`ORIGINAL_MODEL`] where its
/// figures are not the recording's), or its settings string.
fn column_label(r: &RunFigures, original: OriginalFigures) -> String {
    match (r.label.as_str(), original) {
        ("original", OriginalFigures::Model) => ORIGINAL_MODEL.to_string(),
        ("original", _) => r.label.clone(),
        _ => settings_label(&r.label),
    }
}

/// Said under a replayed OOM's message: whose "total capacity" it names.
pub const REPLAY_TOTAL_CAPACITY: &str = "(its \"total capacity\" is this replay's cudaMalloc \
     capacity; PyTorch's names the whole card, its CUDA context included)";

/// The lead of a detail line under a run's name.
const DETAIL: &str = "    ";
/// The lead of a line under a detail (an OOM's frames and message).
const SUB_DETAIL: &str = "      ";

/// `events`: the entries of the device's trace, for the events' names.
fn render_run_details(out: &mut String, r: &RunFigures, name: &str, events: usize) {
    // Each entry already wrapped in 80 columns under its lead.
    let mut lines: Vec<String> = Vec::new();
    let say = |lines: &mut Vec<String>, lead: &str, text: &str| {
        lines.push(wrap_under(lead, text, REPORT_WIDTH));
    };
    if let Some(div) = &r.divergence {
        say(
            &mut lines,
            DETAIL,
            &format!(
                "first divergence: {} at {}; {}",
                div.call,
                event_at_index(div.event_index, events),
                div.summary
            ),
        );
    }
    if let Some(o) = &r.first_oom {
        // PyTorch's message names what cudaMalloc was asked for (the
        // request rounded up to a segment), which the request is not.
        let message_says = if o.message.is_some() {
            "; PyTorch's message below names the segment it tried to reserve for it"
        } else {
            ""
        };
        say(
            &mut lines,
            DETAIL,
            &format!(
                "out of memory at {}: a {} request on stream {}{message_says}",
                event_at_index(o.event_index, events),
                crate::alloc::format_size(o.size),
                o.stream
            ),
        );
        // Which code asked, as `open --summary` names an OOM's: the frame
        // that asked as a site label (a C++-only stack's autograd node,
        // `BmmBackward0::apply (C++, backward pass)`) and the user's frames that called it.
        // The frames are those worth reading already; a run's trace
        // records stacks where its OOM has none.
        let stack = OomStack::of(&o.frames, true);
        let mut asked = String::new();
        super::open::render_oom_stack_under(&mut asked, &stack, SUB_DETAIL);
        lines.push(asked.trim_end_matches('\n').to_string());
        if let Some(m) = &o.message {
            say(&mut lines, SUB_DETAIL, m);
            // The replayed device is the cudaMalloc capacity alone: the
            // recording does not hold the card's total, so the message's
            // "total capacity" is smaller than the one PyTorch printed by
            // the CUDA context (the same OOM, two totals, otherwise).
            say(&mut lines, SUB_DETAIL, REPLAY_TOTAL_CAPACITY);
        }
        if let Some(free) = o.device_free {
            say(
                &mut lines,
                SUB_DETAIL,
                &format!("the device had {} free then (recorded)", human_bytes(free)),
            );
        }
    }
    if r.allocations_skipped > 0 {
        say(
            &mut lines,
            DETAIL,
            &format!(
                "{} the original got {} skipped here (out of memory); later figures assume \
                 the program carried on without {}",
                count_of(r.allocations_skipped, "allocation", "allocations"),
                if r.allocations_skipped == 1 {
                    "was"
                } else {
                    "were"
                },
                if r.allocations_skipped == 1 {
                    "it"
                } else {
                    "them"
                }
            ),
        );
    }
    if r.allocations_kept > 0 {
        say(
            &mut lines,
            DETAIL,
            &format!(
                "{} that ran out of memory in the original succeeded here and {} allocated \
                 to the end",
                count_of(r.allocations_kept, "allocation", "allocations"),
                if r.allocations_kept == 1 {
                    "stays"
                } else {
                    "stay"
                }
            ),
        );
    }
    if let Some(e) = &r.first_model_error {
        say(
            &mut lines,
            DETAIL,
            &format!(
                "{} the model refused (first: {e})",
                count_of(r.model_errors, "call", "calls")
            ),
        );
    }
    if lines.is_empty() {
        return;
    }
    // The run's name whole: a long settings string breaks after a comma.
    let _ = writeln!(
        out,
        "{}",
        wrap_under("  ", &format!("{name}:"), REPORT_WIDTH)
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}

/// The human-readable what-if report: one table per device, one column
/// per run (the original first).
pub fn render_whatif(name: &str, report: &WhatIfReport) -> String {
    let mut out = String::new();
    let capacity = report.capacity.map_or("unlimited".to_string(), |c| {
        format!("{} ({c} B)", human_bytes(c))
    });
    let _ = writeln!(
        out,
        "{}",
        path_heading(
            name,
            &format!(
                "what-if replay (allocation sizes, streams and order from the trace; \
                 cudaMalloc capacity {capacity})"
            ),
            REPORT_WIDTH
        )
    );
    if let Some(r) = &report.capacity_from_recording {
        line_under(
            &mut out,
            "capacity: ",
            &format!(
                "{}, the recording's at its out of memory (GPU {} {}: {} reserved + {} free on \
                 the device); --capacity SIZE sets another, --capacity unlimited none",
                human_bytes(r.bytes),
                r.device,
                crate::snapshot::peak::event_at_index(r.index, r.events),
                human_bytes(r.reserved),
                human_bytes(r.device_free),
            ),
        );
    }
    for d in &report.devices {
        render_whatif_device(&mut out, d, report.recorded_settings.as_deref());
    }
    for u in &report.unreplayable {
        line_under(
            &mut out,
            &format!("GPU {}: ", u.device),
            &format!("not replayable: {}", u.reason),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{REPORT_WIDTH, UNALLOCATED_ROW, cells, fitted_widths, render_table, start_counts};

    fn table(header: &[&str], rows: &[(&'static str, Vec<&str>)]) -> String {
        let header: Vec<String> = header.iter().map(ToString::to_string).collect();
        let rows: Vec<(&str, Vec<String>)> = rows
            .iter()
            .map(|(n, row)| (*n, row.iter().map(ToString::to_string).collect()))
            .collect();
        let mut out = String::new();
        render_table(&mut out, &header, &rows);
        for line in out.lines() {
            assert!(cells(line) <= REPORT_WIDTH, "{line:?}\n{out}");
        }
        out
    }

    #[test]
    fn the_commonest_comparisons_fit_80_columns_beside_the_widest_row_name() {
        // The original of a file that recorded no settings beside
        // expandable_segments:True, and a run's OOM at a capacity beside
        // recorded defaults: each cell on one line.
        for (header, cells) in [
            (
                ["original", "expandable_segments:True"],
                ["not recorded: defaults", "expandable_segments:True"],
            ),
            (
                ["original", "recorded settings *"],
                ["defaults (recorded)", "2×, first at event 51/97 (#50)"],
            ),
        ] {
            let out = table(&header, &[(UNALLOCATED_ROW, cells.to_vec())]);
            assert_eq!(out.lines().count(), 2, "{out}");
        }
    }

    #[test]
    fn a_table_that_fits_80_columns_is_one_table() {
        let out = table(
            &["original", "expandable_segments:True"],
            &[("peak reserved", vec!["128 MiB", "108 MiB"])],
        );
        assert_eq!(
            out,
            "                 original  expandable_segments:True\n\
             \x20 peak reserved  128 MiB   108 MiB\n"
        );
    }

    #[test]
    fn columns_past_80_go_in_groups_each_beside_the_original_again() {
        let name = UNALLOCATED_ROW;
        let out = table(
            &[
                "original",
                "expandable_segments:True",
                "max_split_size_mb:20",
            ],
            &[(name, vec!["81.50 MiB", "61.50 MiB", "821.50 MiB"])],
        );
        let pad = " ".repeat(2 + cells(name));
        assert_eq!(
            out,
            format!(
                "{pad}  original   expandable_segments:True\n  \
                 {name}  81.50 MiB  61.50 MiB\n\
                 \n\
                 {pad}  original   max_split_size_mb:20\n  \
                 {name}  81.50 MiB  821.50 MiB\n"
            )
        );
    }

    #[test]
    fn a_column_too_wide_for_any_group_wraps_its_cells_within_it() {
        let conf = "max_split_size_mb:128,garbage_collection_threshold:0.8";
        let out = table(
            &["original", conf],
            &[
                (
                    "settings",
                    vec!["expandable_segments:True (recorded)", conf],
                ),
                ("peak reserved", vec!["8.35 GiB", "8.35 GiB"]),
            ],
        );
        // The settings break after their comma, a row's figures stay on
        // its first line.
        assert!(
            out.contains(
                "  settings       expandable_segments:True  max_split_size_mb:128,\n\
                 \x20                (recorded)                garbage_collection_threshold:0.8\n"
            ),
            "{out}"
        );
        assert!(out.contains("\n  peak reserved  8.35 GiB "), "{out}");
        // Narrower columns keep their width; the widest are cut to fit.
        let (a, b) = ("a".repeat(60), "b".repeat(70));
        let columns = [vec!["0123456789"], vec![a.as_str()], vec![b.as_str()]];
        assert_eq!(fitted_widths(&columns, 80), [10, 32, 32]);
        assert_eq!(fitted_widths(&columns[..1], 80), [10]);
    }

    #[test]
    fn start_counts_name_each_kind_of_segment_there_is() {
        assert_eq!(start_counts(12, 0, 3), "12 segments, 3 live blocks");
        assert_eq!(
            start_counts(0, 2, 294),
            "2 expandable segments, 294 live blocks"
        );
        assert_eq!(
            start_counts(1, 1, 1),
            "1 segment, 1 expandable segment, 1 live block"
        );
        assert_eq!(start_counts(0, 0, 0), "0 segments, 0 live blocks");
    }
}
