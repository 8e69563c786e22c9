//! `vramtop replay FILE --verify [--json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::{EXIT_BAD_INPUT, EXIT_MISMATCH};
use crate::alloc::human_bytes;
use crate::snapshot::read_snapshot_file;
use crate::snapshot::replay::{DeviceReplay, ReplayStart, VerifyReport, verify};

pub fn run(file: &Path, json: bool) -> color_eyre::Result<ExitCode> {
    let snapshot = match read_snapshot_file(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vramtop: {e}");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let report = verify(&snapshot);
    if json {
        let text = serde_json::to_string_pretty(&report).wrap_err("cannot encode the report")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        super::emit(&render_report(&file.display().to_string(), &report))
            .wrap_err("cannot write the output")?;
    }
    Ok(if report.full_match() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_MISMATCH)
    })
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
        } => format!(
            "mid-run: start state rebuilt from the final layout ({segments} segments, \
             {live_blocks} live blocks, {guessed_block_sizes} sizes inferred from requests, \
             {corrected_block_sizes} of them corrected by the trace)"
        ),
    };
    let _ = writeln!(out, "device {}: trace {start}", r.device);
    let _ = writeln!(
        out,
        "  events matched       {}/{} ({} segment allocs, {} OOMs in the trace)",
        r.events_matched, r.events_in_trace, r.segment_allocs, r.ooms
    );
    let _ = writeln!(
        out,
        "  addresses matched    {}/{} allocations",
        r.addresses_matched, r.allocations_replayed
    );
    if let Some(d) = &r.divergence {
        let _ = writeln!(
            out,
            "  first divergence     event #{}: PyTorch {} / model {}",
            d.event_index, d.expected, d.model
        );
    }
    let layout = match (r.final_layout_matches, r.stale_requested_sizes_match) {
        (true, Some(true)) => "identical (including stale requested sizes of free blocks)",
        (true, Some(false)) => "identical blocks, but stale requested sizes differ",
        (true, None) => "identical (sizes, states, active requested sizes)",
        (false, _) => "DIFFERENT",
    };
    let _ = writeln!(out, "  final layout         {layout}");
    for d in r.layout_differences.iter().take(5) {
        let _ = writeln!(out, "    {d}");
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
        let _ = writeln!(out, "  model self-check     FAILED: {e}");
    }
}

/// The human-readable report.
pub fn render_report(name: &str, report: &VerifyReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: {} segments, {} blocks, reserved {} ({} B), allocated {} ({} B), {} trace entries",
        report.segments,
        report.blocks,
        human_bytes(report.reserved),
        report.reserved,
        human_bytes(report.allocated),
        report.allocated,
        report.trace_entries
    );
    let _ = writeln!(
        out,
        "invariants: {} ({} findings)",
        verdict(report.findings.is_empty()),
        report.findings.len()
    );
    for f in report.findings.iter().take(10) {
        let _ = writeln!(
            out,
            "  segment {:#x} (device {}): {}",
            f.address, f.device, f.message
        );
    }
    if report.findings.len() > 10 {
        let _ = writeln!(out, "  … {} more", report.findings.len() - 10);
    }
    if report.replays.is_empty() && report.unreplayable.is_empty() {
        let _ = writeln!(out, "trace: none to replay (state-only snapshot)");
    }
    for r in &report.replays {
        render_device(&mut out, r);
    }
    for u in &report.unreplayable {
        let _ = writeln!(out, "device {}: not replayable: {}", u.device, u.reason);
    }
    let _ = writeln!(
        out,
        "result: {}",
        if report.full_match() {
            "FULL MATCH"
        } else {
            "MISMATCH"
        }
    );
    out
}
