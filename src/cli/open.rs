//! `vramtop open FILE` (the interactive viewer) and
//! `vramtop open FILE --summary [--json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::{DisplayArgs, EXIT_BAD_INPUT};
use crate::alloc::human_bytes;
use crate::app::viewer_run::{FOREGROUND_LOAD_BYTES, ViewerExit, run_viewer};
use crate::snapshot::read_snapshot_file;
use crate::snapshot::summary::{Figures, SizeCount, SnapshotSummary, summarize};

/// Segments listed in the text output (all of them are in the JSON).
const SEGMENT_LINES: usize = 20;

pub fn run(
    file: &Path,
    summary: bool,
    json: bool,
    background_load: bool,
    display: &DisplayArgs,
) -> color_eyre::Result<ExitCode> {
    if !summary {
        if json {
            super::say_error(format_args!("--json needs --summary"));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        return viewer(file, background_load, display);
    }
    let snapshot = match read_snapshot_file(file) {
        Ok(s) => s,
        Err(e) => {
            super::say_error(e);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let report = summarize(&snapshot);
    if json {
        let text = serde_json::to_string_pretty(&report).wrap_err("cannot encode the summary")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        super::emit(&render_summary(&file.display().to_string(), &report))
            .wrap_err("cannot write the output")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The interactive viewer: refuses a non-terminal stdout (as the dashboard
/// does), reports a bad file in one line with exit code 2.
fn viewer(
    file: &Path,
    background_load: bool,
    display: &DisplayArgs,
) -> color_eyre::Result<ExitCode> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        super::say_error(format_args!(
            "the snapshot viewer needs a terminal on stdout; for text output use \
             `vramtop open {} --summary [--json]`",
            file.display()
        ));
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let no_color = display.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let theme = if no_color {
        crate::ui::Theme::monochrome()
    } else {
        crate::ui::Theme::colored()
    }
    .with_ascii(display.ascii);
    let foreground_limit = if background_load {
        0
    } else {
        FOREGROUND_LOAD_BYTES
    };
    match run_viewer(file, theme, foreground_limit)? {
        ViewerExit::Done => Ok(ExitCode::SUCCESS),
        ViewerExit::BadFile(e) => {
            super::say_error(e);
            Ok(ExitCode::from(EXIT_BAD_INPUT))
        }
    }
}

fn bytes(n: u64) -> String {
    format!("{} ({n} B)", human_bytes(n))
}

fn sizes(list: &[SizeCount]) -> String {
    if list.is_empty() {
        return "-".to_string();
    }
    list.iter()
        .map(|e| format!("{} x{}", human_bytes(e.size), e.count))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_figures(out: &mut String, f: &Figures) {
    let _ = writeln!(out, "  segments             {}", f.segments);
    let _ = writeln!(out, "  reserved             {}", bytes(f.reserved));
    let _ = writeln!(out, "  allocated            {}", bytes(f.allocated));
    let _ = writeln!(out, "  active               {}", bytes(f.active));
    let _ = writeln!(out, "  requested            {}", bytes(f.requested));
    let _ = writeln!(
        out,
        "  blocks               {} active_allocated, {} active_pending_free, {} inactive",
        f.blocks.active_allocated, f.blocks.active_pending_free, f.blocks.inactive
    );
    let s = &f.segment_sizes;
    let _ = writeln!(out, "  segment sizes small  {}", sizes(&s.small));
    let _ = writeln!(out, "                large  {}", sizes(&s.large));
    let _ = writeln!(out, "           expandable  {}", sizes(&s.expandable));
    let g = &f.segsum;
    let _ = writeln!(
        out,
        "  segsum               total_reserved {}, total_allocated {}, total_free {} ({:.2}% internal)",
        human_bytes(g.total_reserved),
        human_bytes(g.total_allocated),
        human_bytes(g.total_free),
        g.internal_percent
    );
    if g.unaccounted != 0 {
        let _ = writeln!(
            out,
            "                       {} B of the segments are not covered by their blocks (not a valid allocator dump)",
            g.unaccounted
        );
    }
    let fr = &f.fragmentation;
    let _ = writeln!(
        out,
        "  fragmentation        {:.3}: {} free in {} inactive blocks, largest {}, {} non-releasable, {} internal",
        fr.fragmentation,
        human_bytes(fr.external_free),
        fr.free_blocks,
        human_bytes(fr.largest_free_block),
        human_bytes(fr.non_releasable),
        human_bytes(fr.internal_free)
    );
}

/// The human-readable summary.
pub fn render_summary(name: &str, report: &SnapshotSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name}: {} segments on {} device(s)",
        report.total.segments,
        report.devices.len()
    );
    for d in &report.devices {
        let _ = writeln!(out, "device {}:", d.device);
        render_figures(&mut out, &d.figures);
    }
    if report.devices.len() != 1 {
        let _ = writeln!(out, "total:");
        render_figures(&mut out, &report.total);
    }
    if !report.segments.is_empty() {
        let _ = writeln!(
            out,
            "segments (segsum: allocated / internal free / external free):"
        );
    }
    for s in report.segments.iter().take(SEGMENT_LINES) {
        let _ = writeln!(
            out,
            "  {:#x} dev {} {}{} {}: {} / {} / {}",
            s.address,
            s.device,
            s.segment_type.as_str(),
            if s.is_expandable { " expandable" } else { "" },
            human_bytes(s.total_size),
            human_bytes(s.allocated),
            human_bytes(s.internal_free),
            human_bytes(s.external_free)
        );
    }
    if report.segments.len() > SEGMENT_LINES {
        let _ = writeln!(
            out,
            "  … {} more (all are in --json)",
            report.segments.len() - SEGMENT_LINES
        );
    }
    out
}
