//! `vramtop open FILE` (the interactive viewer) and
//! `vramtop open FILE --summary [--json]`.

use crate::ui::format::{count, count_of, pool_id};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::text::{REPORT_WIDTH, cells, path_heading, wrap_phrases_under, wrap_under};
use super::{DisplayArgs, EXIT_BAD_INPUT};
use crate::alloc::human_bytes;
use crate::app::keymap::Keymap;
use crate::shell::viewer_run::{FOREGROUND_LOAD_BYTES, ViewerExit, run_viewer};
use std::sync::Arc;

use serde::Serialize;

use crate::snapshot::peak::At;
use crate::snapshot::read_snapshot_file_final_state;
use crate::snapshot::sites::Grouping;
use crate::snapshot::summary::{
    DeviceSites, Figures, MAX_LISTED_MARKERS, MAX_LISTED_OOMS, SitesAt, SitesReport, SizeCount,
    SnapshotSummary, oom_segment, sites_report, sites_report_at, summarize,
};
use crate::snapshot::types::{AllocatorSettings, SnapshotFormat, UnknownActions};

/// `vramtop open --help`'s description: what the command does, then the
/// viewer's keys for finding whose memory the bytes are (at the peak, at
/// the OOM), one a line, named from the viewer's keymap
/// ([`Keymap::viewer_guide`]), then what --summary prints.
pub fn long_about() -> String {
    let keymap = Keymap::default();
    let guide = keymap.viewer_guide();
    let width = guide.iter().map(|(keys, _)| cells(keys)).max().unwrap_or(0);
    let mut keys = String::new();
    for (k, what) in &guide {
        let pad = " ".repeat(width.saturating_sub(cells(k)));
        let _ = write!(keys, "\n  {k}{pad}  {what}");
    }
    format!(
        "Open a memory snapshot in the viewer, or print its summary.\n\n\
         The interactive viewer scrubs through the snapshot's trace and says whose memory \
         it is: which code holds the bytes at the peak, at an OOM, at any event. Its keys:\
         {keys}\n\n\
         With --summary: print per device and in total the segments, reserved/allocated \
         bytes, block states, segment sizes, `_memory_viz.py segsum` figures and \
         fragmentation, then the top allocation sites at the end and at the peak of \
         allocated bytes, and the file's allocator settings.\n\n\
         A `vramtop record` file (told by its content) is read back with --summary: per GPU \
         the time span and sampling gaps, memory used at its peak with the processes \
         holding it (--top of them), its minimum and median, each allocator's peaks, every \
         OOM and allocation retry with its time, and the most fragmented moment. A last \
         line cut mid-write is counted and skipped."
    )
}

/// Segments listed in the text output (all of them are in the JSON).
const SEGMENT_LINES: usize = 20;

/// What `--summary` prints, and from how much of the file.
#[derive(Debug, Clone, Copy)]
pub struct SummaryOptions {
    pub json: bool,
    /// Sites listed per moment.
    pub top: usize,
    /// Only the final state: the trace is not read.
    pub no_trace: bool,
    /// How the sites are grouped.
    pub grouping: Grouping,
    /// Also the sites at this moment of every trace (`--at`); of a
    /// recording, its sample there.
    pub at: Option<At>,
    /// `--at` as a time, which only a recording has.
    pub at_time: Option<crate::device::recording::RecordingTime>,
}

pub fn run(
    file: &Path,
    summary: bool,
    options: SummaryOptions,
    display: &DisplayArgs,
) -> color_eyre::Result<ExitCode> {
    let background_load =
        std::env::var_os(super::DEBUG_BACKGROUND_LOAD_ENV).is_some_and(|v| !v.is_empty());
    match super::recording::opened(file) {
        // Said alike whatever the flags and wherever the nothing came from.
        super::recording::Opened::Empty => {
            super::say_error(super::recording::empty_input(
                file,
                super::Reads::SnapshotsAndRecordings,
            ));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        // A `vramtop record` file, told by its content: summed up, not viewed.
        super::recording::Opened::Recording => {
            return recording(file, summary, options, display);
        }
        super::recording::Opened::Snapshot => {}
    }
    if options.at_time.is_some() {
        super::say_error(format_args!(
            "{}: --at takes a time of a `vramtop record` file; of a snapshot's trace, an event \
             number or {}",
            super::input_name(file),
            crate::snapshot::peak::AT_FORMS
        ));
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    if !summary {
        if options.json {
            super::say_error("--json prints the summary as JSON: add --summary");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        if file.as_os_str() == super::STDIN_ARG {
            // The viewer reads its file in stages, from the disk.
            super::say_error(
                "the viewer opens a file, not standard input: save the snapshot first, or read \
                 standard input with --summary",
            );
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        return viewer(file, background_load, display, options.at);
    }
    let from_stdin = file.as_os_str() == super::STDIN_ARG;
    let read = if options.no_trace && from_stdin {
        // As far as the final state, as from a file: the rest of the
        // stream is left unread (its writer may get SIGPIPE).
        super::piped_stdin().and_then(super::read_stdin_final_state)
    } else if options.no_trace {
        read_snapshot_file_final_state(file)
    } else {
        // The summary shows the stacks of what is live at a moment: the
        // allocations' and segments', never a free's.
        super::read_snapshot_arg_with(file, crate::snapshot::Stacks::OfAllocations)
    };
    let snapshot = match read {
        Ok(s) => s,
        Err(e) if options.no_trace => {
            // As the whole read says it, less the pointer to --no-trace.
            let mut said = super::ends_early(&e, from_stdin).unwrap_or_else(|| e.to_string());
            super::recording_hint(&mut said);
            super::say_error(said);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        Err(e) => {
            super::say_error(super::snapshot_read_error(
                file,
                &e,
                super::Reads::SnapshotsAndRecordings,
            ));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    // A file whose trace comes first is read whole even with --no-trace.
    let trace_read = !snapshot.trace_not_read;
    let snapshot = Arc::new(snapshot);
    let report = summarize(&snapshot);
    let sites = match options.at {
        None => sites_report(&snapshot, options.grouping, options.top),
        Some(at) => match sites_report_at(&snapshot, options.grouping, options.top, at) {
            Ok(sites) => sites,
            Err(e) => {
                super::say_error(format_args!("{}: {e}", super::input_name(file)));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        },
    };
    if options.json {
        let full = FullSummary {
            trace_read,
            skipped_trace_entries: snapshot.skipped_trace_entries,
            skipped_trace_actions: &snapshot.skipped_trace_actions,
            summary: &report,
            sites: &sites,
        };
        let text = serde_json::to_string_pretty(&full).wrap_err("cannot encode the summary")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        let mut text = render_summary(&super::input_name(file), &report);
        if options.at == Some(At::End) && sites.sites.is_empty() {
            // No GPU, so no per-GPU sites to list the end under: the end
            // still answers, with the nothing the file holds.
            line_under(
                &mut text,
                "allocation sites: ",
                &format!(
                    "at {} (--at end): nothing allocated, the file has no GPU",
                    moment(None, 0, None, None, false)
                ),
            );
        }
        text.push_str(&render_sites(&sites, trace_read, snapshot.format));
        if !trace_read {
            let body = NO_TRACE_UNCHECKED.trim_start_matches("note: ");
            line_under(&mut text, "note: ", body);
        }
        if let Some(left_out) = snapshot.skipped_trace_text() {
            line_under(
                &mut text,
                "note: ",
                &format!("{left_out}; the peaks and sites are of the rest"),
            );
        }
        if display.ascii {
            text = crate::ui::theme::ascii_text(&text);
        }
        super::emit(&text).wrap_err("cannot write the output")?;
    }
    super::leave_to_exit(snapshot);
    Ok(ExitCode::SUCCESS)
}

/// `open` of a recording: its summary (`--summary`, `--json`, `--top`);
/// the viewer and the snapshot-only options are refused in one line.
fn recording(
    file: &Path,
    summary: bool,
    options: SummaryOptions,
    display: &DisplayArgs,
) -> color_eyre::Result<ExitCode> {
    let name = super::input_name(file);
    let at = match (options.at, options.at_time) {
        (_, Some(t)) => Some(super::recording::RecordingAt::Time(t)),
        (Some(m), None) => Some(super::recording::RecordingAt::Moment(m)),
        (None, None) => None,
    };
    let refused = if !summary && at.is_none() {
        Some(format!(
            "{name} is a `vramtop record` file: the viewer opens snapshots; summarise it with \
             `vramtop open {} --summary`",
            crate::quote::shell_path(&file.display().to_string())
        ))
    } else if options.no_trace || options.grouping != Grouping::default() {
        // The flag given, named: a recording has neither.
        let given = match (options.no_trace, options.grouping != Grouping::default()) {
            (true, true) => "--no-trace and --group are",
            (true, false) => "--no-trace is",
            _ => "--group is",
        };
        Some(format!(
            "{name} is a `vramtop record` file: {given} for snapshots"
        ))
    } else {
        None
    };
    if let Some(why) = refused {
        // Said of a recording only: JSON without a sample is neither.
        let why = super::recording::not_a_recording(file).unwrap_or(why);
        super::say_error(why);
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    super::recording::run(
        file,
        super::recording::RecordingOptions {
            summary,
            json: options.json,
            top: options.top,
            ascii: display.ascii,
            at,
        },
    )
}

/// What `--no-trace` leaves unsaid: the file past its final state was not
/// read, so neither its trace nor its end was checked.
pub const NO_TRACE_UNCHECKED: &str = "note: --no-trace read the file only as far as its final \
     state; the rest (the trace, the settings after it) was not read, so a file cut or damaged \
     there still gives this summary (without --no-trace it is read whole and checked)";

/// The JSON of `--summary --json`: `trace_read` (false when `--no-trace`
/// read only the final state: no peaks, no sites at the peak, allocator
/// settings only if they come before the trace), the trace entries left
/// out and their actions' names, the summary's keys, then
/// `sites` (per device, at the end and at the peak) and
/// `allocator_settings`.
#[derive(Serialize)]
struct FullSummary<'a> {
    trace_read: bool,
    /// Trace entries left out, their actions unknown to this reader.
    skipped_trace_entries: usize,
    skipped_trace_actions: &'a UnknownActions,
    #[serde(flatten)]
    summary: &'a SnapshotSummary,
    #[serde(flatten)]
    sites: &'a SitesReport,
}

/// The interactive viewer: refuses a non-terminal stdout (as the dashboard
/// does), reports a bad file in one line with exit code 2. `at`: the
/// moment its cursors start at (`--at`), found as the summary finds it and
/// refused with the summary's one line when the file has none.
fn viewer(
    file: &Path,
    background_load: bool,
    display: &DisplayArgs,
    at: Option<At>,
) -> color_eyre::Result<ExitCode> {
    use std::io::IsTerminal as _;
    // A file that cannot be read, or is no pickle (its first bytes say
    // so), is said first, as --summary would say it: pointing to
    // --summary, which then fails on the same file, costs a second try.
    // A file cut inside its first frame is said as --summary says it,
    // unless its final state is whole before the cut: the viewer shows
    // that, and says why the trace is not.
    if let Err(e) = crate::snapshot::check_file_start(file)
        && crate::snapshot::read_snapshot_file_final_state(file).is_err()
    {
        let mut said = super::ends_early(&e, false).unwrap_or_else(|| e.to_string());
        super::recording_hint(&mut said);
        super::say_error(said);
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    if !std::io::stdout().is_terminal() {
        // A wrong file is said before the terminal: the summary that the
        // line below points to would only refuse it next.
        if let Some(said) = not_a_snapshot(file) {
            super::say_error(said);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        // Quoted for a shell, to be pasted (a space, a `$` in the name).
        super::say_error(format_args!(
            "the snapshot viewer needs a terminal on stdout; for text output use \
             `vramtop open {} --summary [--json]`",
            crate::quote::shell_path(&file.display().to_string())
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
    // The end is where the viewer opens: it needs no trace.
    let at = at.filter(|&at| at != At::End);
    match run_viewer(file, theme, foreground_limit, at)? {
        ViewerExit::Done | ViewerExit::QuitVramtop => Ok(ExitCode::SUCCESS),
        ViewerExit::Stopped(signal) => Ok(super::signal_exit_code(signal)),
        // A moment of the trace needs the whole file: said as the
        // summary, which reads it whole, says it.
        ViewerExit::BadFile(e) if at.is_some() => {
            super::say_error(super::snapshot_read_error(
                file,
                &e,
                super::Reads::SnapshotsAndRecordings,
            ));
            Ok(ExitCode::from(EXIT_BAD_INPUT))
        }
        ViewerExit::BadFile(e) => {
            super::say_error(e);
            Ok(ExitCode::from(EXIT_BAD_INPUT))
        }
        ViewerExit::NoMoment(e) => {
            super::say_error(format_args!("{}: {e}", super::input_name(file)));
            Ok(ExitCode::from(EXIT_BAD_INPUT))
        }
    }
}

/// The most bytes [`not_a_snapshot`] reads of a file: a snapshot's final
/// state usually ends within them; a larger file is not read twice.
const SNAPSHOT_CHECK_BYTES: u64 = 4 << 20;

/// Why `file`, whose first bytes pass as a pickle, is no snapshot, as the
/// summary says it: its final state read from at most
/// [`SNAPSHOT_CHECK_BYTES`] bytes. `None` where it reads as one, and for a
/// larger file whose read only ran out of bytes (nothing known yet).
fn not_a_snapshot(file: &Path) -> Option<String> {
    use std::io::Read as _;
    let opened = std::fs::File::open(file).ok()?;
    let len = opened.metadata().ok()?.len();
    let error =
        crate::snapshot::read_snapshot_from_final_state(opened.take(SNAPSHOT_CHECK_BYTES), file)
            .err()?;
    let cut = super::ends_early(&error, false);
    if cut.is_some() && len > SNAPSHOT_CHECK_BYTES {
        return None;
    }
    let mut said = cut.unwrap_or_else(|| error.to_string());
    super::recording_hint(&mut said);
    Some(said)
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

/// `lead` then `text` wrapped under its start, within 80 columns.
fn line_under(out: &mut String, lead: &str, text: &str) {
    let _ = writeln!(out, "{}", wrap_under(lead, text, REPORT_WIDTH));
}

/// `across_gpus`: the figures are the total of several GPUs, whose free
/// blocks never combine: no fragmentation or largest block is said for them.
fn render_figures(out: &mut String, f: &Figures, across_gpus: bool) {
    let _ = writeln!(out, "  segments             {}", f.segments);
    let _ = writeln!(out, "  reserved             {}", bytes(f.reserved));
    let _ = writeln!(out, "  allocated            {}", bytes(f.allocated));
    let _ = writeln!(out, "  active               {}", bytes(f.active));
    // What the active blocks asked for, pending frees among them: above
    // allocated where those outweigh the rounding, which read as a
    // contradiction without the words.
    line_under(
        out,
        "  requested            ",
        &format!("{} by the active blocks", bytes(f.requested)),
    );
    // What runs past 80 columns wraps under the figures' column.
    line_under(
        out,
        "  blocks               ",
        &format!(
            "{} active_allocated, {} active_pending_free, {} inactive",
            f.blocks.active_allocated, f.blocks.active_pending_free, f.blocks.inactive
        ),
    );
    let s = &f.segment_sizes;
    line_under(out, "  segment sizes small  ", &sizes(&s.small));
    line_under(out, "                large  ", &sizes(&s.large));
    line_under(out, "           expandable  ", &sizes(&s.expandable));
    let g = &f.segsum;
    line_under(
        out,
        "  segsum               ",
        &format!(
            "total_reserved {}, total_allocated {} (requested bytes, as _memory_viz counts \
             them), total_free {} ({}% internal{})",
            human_bytes(g.total_reserved),
            human_bytes(g.total_allocated),
            human_bytes(g.total_free),
            // Never "0.00%" for bytes that are there: "<0.1%".
            percent_of(g.internal_free, g.total_free),
            pending_note(f)
        ),
    );
    if g.unaccounted != 0 {
        let what = if g.unaccounted > 0 {
            format!(
                "{} B of the segments are not covered by their blocks",
                g.unaccounted
            )
        } else {
            format!(
                "the figures add up to {} B more than the segments (a requested size over its \
                 block's size)",
                g.unaccounted.unsigned_abs()
            )
        };
        line_under(
            out,
            "                       ",
            &format!("{what} (not a valid allocator dump)"),
        );
    }
    let fr = &f.fragmentation;
    if across_gpus {
        line_under(
            out,
            "  fragmentation        ",
            &format!(
                "per GPU, above; in all {} external free in {}, {} non-releasable, {} internal \
                 free{}",
                human_bytes(fr.external_free),
                count(fr.free_blocks, "inactive block", "inactive blocks"),
                human_bytes(fr.non_releasable),
                human_bytes(fr.internal_free),
                whole_segments_note(fr)
            ),
        );
        return;
    }
    line_under(
        out,
        "  fragmentation        ",
        // A percentage, as the viewer's "frag 60%" and the segsum line's
        // internal share above (`--json` keeps the fraction).
        &format!(
            "{:.1}%: {} external free in {}, largest {}, {} non-releasable, {} internal free{}",
            fr.fragmentation * 100.0,
            human_bytes(fr.external_free),
            count(fr.free_blocks, "inactive block", "inactive blocks"),
            human_bytes(fr.largest_free_block),
            human_bytes(fr.non_releasable),
            human_bytes(fr.internal_free),
            whole_segments_note(fr)
        ),
    );
}

/// The segsum line's note on pending-free blocks: `_memory_viz` counts
/// them in `total_free` (and not in `total_allocated`), the fragmentation
/// line below does not count them free, and `allocated` above leaves them
/// out while `active` counts them: without it the two free figures and
/// the two allocated ones read as disagreeing. Empty where there are none.
fn pending_note(f: &Figures) -> String {
    let pending = f.active.saturating_sub(f.allocated);
    if f.blocks.active_pending_free == 0 || pending == 0 {
        return String::new();
    }
    format!(", {} pending free", human_bytes(pending))
}

/// The fragmentation line's note on free bytes in wholly free segments:
/// the fragmentation counts them, yet `empty_cache()` returns them and
/// PyTorch frees them and retries before it raises an OOM, so they never
/// cause one; a high figure of only cached memory read as an alarm.
/// Empty where there are none.
fn whole_segments_note(fr: &crate::alloc::Fragmentation) -> String {
    if fr.whole_free_segments == 0 {
        return String::new();
    }
    format!(
        "; {} of the free bytes in {}, which empty_cache() returns and PyTorch \
         frees before it reports out of memory",
        human_bytes(fr.free_in_whole_segments),
        count(
            fr.whole_free_segments,
            "wholly free segment",
            "wholly free segments"
        )
    )
}

/// The human-readable summary.
pub fn render_summary(name: &str, report: &SnapshotSummary) -> String {
    let mut out = String::new();
    let counts = format!(
        "{} on {}",
        count(report.total.segments, "segment", "segments"),
        count_of(report.devices.len(), "device", "devices")
    );
    // A path of any depth keeps its file name whole within 80 columns:
    // on a line of its own where the counts leave it too little room.
    let _ = writeln!(out, "{}", path_heading(name, &counts, REPORT_WIDTH));
    for d in &report.devices {
        let _ = writeln!(out, "GPU {}:", d.device);
        render_figures(&mut out, &d.figures, false);
    }
    if report.devices.len() != 1 {
        let _ = writeln!(out, "total:");
        render_figures(&mut out, &report.total, report.devices.len() > 1);
    }
    if report.has_private_pools() {
        // A private pool's free bytes serve only its own allocations: the
        // figures above do not tell which pool holds them.
        let _ = writeln!(
            out,
            "memory pools (segment_pool_id; {} is the default):",
            pool_id((0, 0))
        );
        for p in &report.pools {
            let _ = writeln!(
                out,
                "  GPU {} pool {}{}: {}, {} reserved, {} allocated",
                p.device,
                pool_id(p.segment_pool_id),
                if p.segment_pool_id == (0, 0) {
                    " default"
                } else {
                    " private"
                },
                count(p.segments, "segment", "segments"),
                human_bytes(p.reserved),
                human_bytes(p.allocated)
            );
        }
    }
    if !report.segments.is_empty() {
        let _ = writeln!(
            out,
            // _memory_viz's per-segment external free counts pending-free
            // blocks too; the help's external free is free blocks alone (the
            // fragmentation line's, the viewer's): both terms, one figure.
            "segments (segsum: requested / internal free / external free + pending free):"
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

/// A moment for the text: "event 40/97, t+1.250 s", "event 0/97, before
/// the first event" (as the viewer says cursor 0, with no time: no event
/// has happened), or the file's own state for `None`.
pub(crate) fn moment(
    cursor: Option<usize>,
    events: usize,
    time_us: Option<i64>,
    first_us: Option<i64>,
    whole_ms: bool,
) -> String {
    let Some(c) = cursor else {
        return "the end (the file's own state)".to_string();
    };
    let mut out = format!("event {c}/{events}");
    if c == 0 {
        out.push_str(", before the first event");
    } else if let (Some(t), Some(t0)) = (time_us, first_us) {
        let _ = write!(
            out,
            ", {}",
            crate::ui::format::since_start_on(t.saturating_sub(t0), whole_ms)
        );
    }
    out
}

/// Whether two moments' sites read the same in the text: the same bytes
/// allocated, the same sites listed and the same left out.
fn same_sites(a: &SitesAt, b: &SitesAt) -> bool {
    a.allocated == b.allocated && a.sites == b.sites && a.other_bytes == b.other_bytes
}

/// "block" or "blocks" after a count of `n`.
fn blocks_word(n: u64) -> &'static str {
    if n == 1 { "block" } else { "blocks" }
}

/// The words before a site's callers.
const CALLED_FROM: &str = "called from ";
/// Cells before `called from`: its frames start near the site's label.
const CALLERS_AT: usize = 32;

/// A site's `called from` line: its frames on it, ` < ` between them,
/// where they all fit; else one frame a line, each after the first led by
/// `< ` in the margin so that the frames' text lines up. A frame too long
/// for its line wraps between its words under its own start, so a line
/// never starts or ends with a separator that belongs to a broken frame.
fn render_callers(out: &mut String, frames: &[String]) {
    render_callers_at(out, frames, CALLERS_AT);
}

/// [`render_callers`] with `called from` `at` cells in.
fn render_callers_at(out: &mut String, frames: &[String], at: usize) {
    if frames.is_empty() {
        return;
    }
    let lead = format!("{:at$}{CALLED_FROM}", "");
    let joined = frames.join(" < ");
    if cells(&lead) + cells(&joined) <= REPORT_WIDTH {
        let _ = writeln!(out, "{lead}{joined}");
        return;
    }
    let next = format!("{:1$}< ", "", at + CALLED_FROM.len() - 2);
    for (k, frame) in frames.iter().enumerate() {
        let lead = if k == 0 { &lead } else { &next };
        let _ = writeln!(
            out,
            "{}",
            wrap_phrases_under(lead, [frame.as_str()], REPORT_WIDTH)
        );
    }
}

/// The words before the code that asked for an OOM's request.
const ASKED_BY: &str = "asked by ";
/// The summary's indent of an OOM's stack, under the OOM's line.
const OOM_STACK_INDENT: &str = "    ";
/// Callers of an OOM's request listed under it (the text's; `--json`
/// gives them all).
const OOM_CALLERS: usize = 6;

/// Which code asked for an OOM's failed request, under the OOM's line:
/// the frame that asked and its callers, as a site and its callers are
/// listed; or why there is no stack.
fn render_oom_stack(out: &mut String, stack: &crate::snapshot::summary::OomStack) {
    render_oom_stack_under(out, stack, OOM_STACK_INDENT);
}

/// [`render_oom_stack`] `indent` cells in: `replay`'s what-if names the
/// code that asked for a run's OOM in the same words, under its own line.
pub(crate) fn render_oom_stack_under(
    out: &mut String,
    stack: &crate::snapshot::summary::OomStack,
    indent: &str,
) {
    let asked_by = format!("{indent}{ASKED_BY}");
    match &stack.site {
        Some(site) => {
            let _ = writeln!(
                out,
                "{}",
                wrap_phrases_under(&asked_by, [site.as_str()], REPORT_WIDTH)
            );
            let callers: Vec<String> = stack
                .called_from
                .iter()
                .take(OOM_CALLERS)
                .cloned()
                .collect();
            render_callers_at(out, &callers, asked_by.len());
            let more = stack.called_from.len().saturating_sub(callers.len());
            if more > 0 {
                let _ = writeln!(
                    out,
                    "{:1$}… {more} more in --json",
                    "",
                    asked_by.len() + CALLED_FROM.len()
                );
            }
        }
        None => line_under(out, indent, stack.no_stack().unwrap_or_default()),
    }
}

/// `part` as a percentage of `whole` to one decimal, never rounded to
/// what it is not: "100.0" only for all of it (">99.9" short of it), "0.0"
/// only for none ("<0.1" above it). 0 of 0 is "0.0".
fn percent_of(part: u64, whole: u64) -> String {
    if whole == 0 || part == 0 {
        return "0.0".to_string();
    }
    if part >= whole {
        return "100.0".to_string();
    }
    let percent = part as f64 * 100.0 / whole as f64;
    if percent >= 99.95 {
        ">99.9".to_string()
    } else if percent < 0.05 {
        "<0.1".to_string()
    } else {
        format!("{percent:.1}")
    }
}

/// Cells of the sites' size column at the least: "512.50 MiB".
const SIZE_CELLS: usize = 10;

/// The rows of the sites at one moment, each with its callers, and the
/// legend of the groups without a stack among them.
pub(crate) fn render_sites_at(out: &mut String, at: &SitesAt) {
    render_sites_explaining(out, at, &mut Vec::new());
}

/// [`render_sites_at`], the legend only of the groups without a stack
/// that `explained` does not hold (a list above explained them), which it
/// then holds too: a device's lists say each once.
fn render_sites_explaining(
    out: &mut String,
    at: &SitesAt,
    explained: &mut Vec<crate::snapshot::sites::NoStackReason>,
) {
    // The sizes' column is as wide as its widest figure ("1022.99 MiB" is
    // 11 cells), 10 at the least, so that every row's columns line up.
    let size_cells = at
        .sites
        .iter()
        .map(|s| s.bytes)
        .chain((at.other_sites > 0).then_some(at.other_bytes))
        .map(|b| cells(&human_bytes(b)))
        .fold(SIZE_CELLS, usize::max);
    for s in &at.sites {
        let figures = format!(
            "    {:>size_cells$} {:>5}% {:>6} {:<6}  ",
            human_bytes(s.bytes),
            percent_of(s.bytes, at.allocated),
            s.blocks,
            blocks_word(s.blocks),
        );
        // The figures stay in their columns; a site's label longer than
        // the room left wraps under its start, whole.
        let _ = writeln!(
            out,
            "{}",
            wrap_phrases_under(&figures, [s.label.as_str()], REPORT_WIDTH)
        );
        // The next user frames (callers) say how the site was reached:
        // through the path that holds most of its bytes, and how much.
        let callers: Vec<String> = s.called_from.iter().take(2).cloned().collect();
        render_callers(out, &callers);
        if !callers.is_empty() && s.caller_paths > 1 {
            let _ = writeln!(
                out,
                "{:CALLERS_AT$}({}% of it this way; {} caller paths)",
                "",
                percent_of(s.called_from_bytes, s.bytes),
                s.caller_paths
            );
        }
    }
    if at.other_sites > 0 {
        // One wording whether some are listed or none (--top 0): "not
        // listed" is true of both, where "more" was not.
        let _ = writeln!(
            out,
            "    {:>size_cells$} {:>5}% {:>6} {:<6}  … {} not listed",
            human_bytes(at.other_bytes),
            percent_of(at.other_bytes, at.allocated),
            at.other_blocks,
            blocks_word(at.other_blocks),
            count_of(at.other_sites, "site", "sites")
        );
    }
    // The "no stack: …" rows name a case the viewer's Enter explains;
    // here one line each says what it is.
    let mut lead = NO_STACK_LEAD;
    for l in &at.no_stack_legend {
        if explained.contains(&l.reason) {
            continue;
        }
        explained.push(l.reason);
        line_under(out, lead, &format!("{}: {}", l.case, l.meaning));
        lead = NO_STACK_LEAD_MORE;
    }
}

/// The lead of the legend under a list of sites, then of its next lines.
const NO_STACK_LEAD: &str = "  no stack, ";
const NO_STACK_LEAD_MORE: &str = "            ";

fn render_settings(out: &mut String, s: &AllocatorSettings) {
    let conf = if s.conf.is_empty() {
        "(empty)"
    } else {
        &s.conf
    };
    let split = if s.max_split_size < 0 {
        "unlimited".to_string()
    } else {
        human_bytes(u64::try_from(s.max_split_size).unwrap_or(0))
    };
    line_under(
        out,
        "allocator_settings: ",
        &format!(
            "PYTORCH_CUDA_ALLOC_CONF {conf}; max_split_size {split}, expandable_segments {}, \
             garbage_collection_threshold {}, release_lock_on_cudamalloc {}",
            s.expandable_segments, s.garbage_collection_threshold, s.release_lock_on_cudamalloc
        ),
    );
}

/// OOM events the text lists (`--json` lists [`MAX_LISTED_OOMS`]).
const OOM_LINES: usize = 10;

/// A device's OOM events in one wrapped line: "3 OOMs: event 12, 2 GiB
/// requested; event 40, …", the first [`OOM_LINES`] of them.
fn oom_list(d: &DeviceSites) -> String {
    let listed: Vec<String> = d
        .oom_events
        .iter()
        .take(OOM_LINES)
        .map(|o| {
            // Which code asked, in short: the last OOM's whole stack is
            // listed under its own line.
            let by = o
                .stack
                .short_site()
                .map(|s| format!(" by {s}"))
                .unwrap_or_default();
            format!(
                "event {}, {} requested{by}",
                o.cursor,
                human_bytes(o.requested)
            )
        })
        .collect();
    let mut text = format!("{} OOMs: {}", d.ooms, listed.join("; "));
    let more = d.ooms.saturating_sub(listed.len());
    if more > 0 {
        let json = if d.ooms > MAX_LISTED_OOMS {
            format!("the first {MAX_LISTED_OOMS} are in --json")
        } else {
            "all are in --json".to_string()
        };
        let _ = write!(text, "; … {more} more ({json})");
    }
    text
}

/// Marker entries the text lists (`--json` lists [`MAX_LISTED_MARKERS`]).
const MARKER_LINES: usize = 10;

/// A device's `snapshot`/`annotate` entries in one wrapped line: "41
/// snapshot/annotate entries (--at mark:1 … mark:41, or the events): 583,
/// 1164, …", the first [`MARKER_LINES`] of them.
fn marker_list(d: &DeviceSites) -> String {
    let listed: Vec<String> = d
        .marker_events
        .iter()
        .take(MARKER_LINES)
        .map(|m| m.cursor.to_string())
        .collect();
    let what = count_of(
        d.markers,
        "snapshot/annotate entry",
        "snapshot/annotate entries",
    );
    // The two ways `--at` names them: mark:N counts them, the events are
    // where they are in the trace.
    let at = match d.markers {
        1 => "--at mark:1, or the event".to_string(),
        n => format!("--at mark:1 … mark:{n}, or the events"),
    };
    let mut text = format!("{what} ({at}): {}", listed.join(", "));
    let more = d.markers.saturating_sub(listed.len());
    if more > 0 {
        let json = if d.markers > MAX_LISTED_MARKERS {
            format!("the first {MAX_LISTED_MARKERS} are in --json")
        } else {
            "all are in --json".to_string()
        };
        let _ = write!(text, ", … {more} more ({json})");
    }
    text
}

/// The human-readable sites part of the summary: per device the peaks
/// and the top sites at the end and at the peak of allocated bytes
/// (without `trace_read`, a line saying they were not read instead).
pub fn render_sites(report: &SitesReport, trace_read: bool, format: SnapshotFormat) -> String {
    let mut out = String::new();
    for d in &report.sites {
        let t0 = d.first_time_us;
        let _ = writeln!(
            out,
            "allocation sites, GPU {} (by {}; sizes are block sizes):",
            d.device,
            report.grouping.name()
        );
        if d.inconsistent_events > 0 {
            line_under(
                &mut out,
                "  warning: ",
                &format!(
                    "{} of the trace's {} {} not fit the file's own state (a free of a block it \
                     never had, more allocated than reserved, …): the peaks and the sites over \
                     the trace are approximate; `vramtop replay` names the first",
                    d.inconsistent_events,
                    count_of(d.events, "event", "events"),
                    if d.inconsistent_events == 1 {
                        "does"
                    } else {
                        "do"
                    }
                ),
            );
        }
        if let Some(m) = d.end_mismatch {
            let mut differ = Vec::new();
            if m.blocks > 0 {
                differ.push(count_of(m.blocks, "block", "blocks"));
            }
            if m.segments > 0 {
                differ.push(count_of(m.segments, "segment", "segments"));
            }
            line_under(
                &mut out,
                "  warning: ",
                &format!(
                    "the trace does not lead to the file's final state ({} {}): \
                     \"the end\" below is the file's own state, what PyTorch recorded",
                    differ.join(" and "),
                    if m.blocks + m.segments == 1 {
                        "differs"
                    } else {
                        "differ"
                    }
                ),
            );
        }
        if let Some(b) = &d.backwards_time {
            // Not a mismatch (`replay` says the same): the order is the
            // file's, and the times below are as recorded.
            line_under(
                &mut out,
                "  warning: ",
                &format!(
                    "{}: the times below are as recorded, the events in the file's order",
                    b.message
                ),
            );
        }
        if trace_read && d.events == 0 {
            line_under(
                &mut out,
                "  ",
                &format!(
                    "no trace of memory events for this GPU in the file: no peaks and no OOMs \
                     to show, the sites are the final state's ({})",
                    report.no_trace.how_to_get_a_trace()
                ),
            );
        }
        if d.starts_mid_run && d.peaks.is_some() {
            // "peak reserved 436 MiB at event 0/100000, before the first
            // event" read as the run's own peak; it is the window's.
            line_under(
                &mut out,
                "  note: ",
                "the trace begins mid-run (PyTorch's ring buffer kept only its last \
                 max_entries events): the peaks and the sites at the peak are of the recorded \
                 window only; torch.cuda.max_memory_allocated() may be higher",
            );
        }
        if let Some(p) = &d.peaks {
            let at = |m: &crate::snapshot::peak::Moment| {
                moment(Some(m.cursor), d.events, m.time_us, t0, d.whole_ms_clock)
            };
            line_under(
                &mut out,
                "  ",
                &format!(
                    "peak allocated {} at {}; peak reserved {} at {}",
                    human_bytes(p.allocated.bytes),
                    at(&p.allocated),
                    human_bytes(p.reserved.bytes),
                    at(&p.reserved)
                ),
            );
            if let Some(b) = &p.biggest_allocation {
                line_under(
                    &mut out,
                    "  ",
                    &format!(
                        "biggest allocation in the trace {} (requested) at {}",
                        human_bytes(b.bytes),
                        at(b)
                    ),
                );
            }
        }
        let _ = writeln!(
            out,
            "  at {}: {} allocated",
            moment(d.at_end.cursor, d.events, None, None, false),
            human_bytes(d.at_end.allocated)
        );
        let mut explained = Vec::new();
        render_sites_explaining(&mut out, &d.at_end, &mut explained);
        if let Some(at) = &d.at_peak_allocated {
            // The same blocks as at the end (a trace that changed nothing
            // the sites show): said, not listed twice.
            let as_at_end = same_sites(at, &d.at_end);
            line_under(
                &mut out,
                "  ",
                &format!(
                    "at the peak of allocated, {}: {} allocated{}",
                    moment(at.cursor, d.events, at.time_us, t0, d.whole_ms_clock),
                    human_bytes(at.allocated),
                    if as_at_end {
                        ", the same sites as at the end"
                    } else {
                        ""
                    }
                ),
            );
            if !as_at_end {
                render_sites_explaining(&mut out, at, &mut explained);
            }
        }
        if d.markers > 0 {
            line_under(&mut out, "  ", &marker_list(d));
        }
        if d.ooms > 1 {
            line_under(&mut out, "  ", &oom_list(d));
        }
        if let Some(oom) = &d.at_last_oom {
            let which = if d.ooms > 1 {
                format!("the last of {} OOMs", d.ooms)
            } else {
                "the OOM".to_string()
            };
            // A request and a device's free bytes that read the same in
            // rounded figures (1023.99 MiB each) say nothing of why it
            // failed: then in bytes too.
            let (mut requested, mut free) =
                (human_bytes(oom.requested), human_bytes(oom.device_free));
            if requested == free && oom.requested != oom.device_free {
                requested = format!("{requested} ({} B)", oom.requested);
                free = format!("{free} ({} B)", oom.device_free);
            }
            // The trace records the rounded request; PyTorch's error
            // message names the segment it then asked cudaMalloc for ("Tried
            // to allocate 40.00 MiB" of a 39.68 MiB request): said, so that
            // the two figures are not read as a disagreement. Expandable
            // segments map pages instead (or without settings: unknown).
            requested = match oom_segment(oom.requested, report.allocator_settings.as_ref()) {
                Some(segment) => format!(
                    "{requested} requested (a {} segment: the size PyTorch's error message \
                     names)",
                    human_bytes(segment)
                ),
                None => format!("{requested} requested"),
            };
            line_under(
                &mut out,
                "  ",
                &format!(
                    "at {which}, {}: {}, {} free on the device; {} allocated",
                    moment(
                        oom.sites.cursor,
                        d.events,
                        oom.sites.time_us,
                        t0,
                        d.whole_ms_clock
                    ),
                    requested,
                    free,
                    human_bytes(oom.sites.allocated)
                ),
            );
            render_oom_stack(&mut out, &oom.stack);
            line_under(&mut out, "    ", &oom.memory.describe("the sites below"));
            render_sites_explaining(&mut out, &oom.sites, &mut explained);
        }
        if let Some(at) = &d.at_cursor {
            // A word names the moment it found; a number is the moment.
            let asked = if at.asked.parse::<usize>().is_ok() {
                String::new()
            } else {
                format!(" (--at {})", at.asked)
            };
            // The end of a file without a trace is the state listed at
            // the end, and a moment whose blocks are the end's lists the
            // end's sites: said, not listed twice.
            let listed = if at.sites.cursor.is_none() {
                ", the state listed above"
            } else if same_sites(&at.sites, &d.at_end) {
                ", the same sites as at the end"
            } else if d
                .at_peak_allocated
                .as_ref()
                .is_some_and(|p| p.cursor == at.sites.cursor)
            {
                ", the moment of the peak above"
            } else if d
                .at_last_oom
                .as_ref()
                .is_some_and(|o| o.sites.cursor == at.sites.cursor)
            {
                ", the moment of the OOM above"
            } else {
                ""
            };
            line_under(
                &mut out,
                "  ",
                &format!(
                    "at {}{asked}: {} allocated, {} reserved{listed}",
                    moment(
                        at.sites.cursor,
                        d.events,
                        at.sites.time_us,
                        t0,
                        d.whole_ms_clock
                    ),
                    human_bytes(at.sites.allocated),
                    human_bytes(at.reserved)
                ),
            );
            if listed.is_empty() {
                render_sites_explaining(&mut out, &at.sites, &mut explained);
            }
        }
        if !trace_read {
            line_under(
                &mut out,
                "  ",
                "peaks: not read (--no-trace); they and the sites at the peak come from the trace",
            );
        }
    }
    match &report.allocator_settings {
        Some(s) => render_settings(&mut out, s),
        None if !trace_read => {
            line_under(
                &mut out,
                "allocator_settings: ",
                "not read (--no-trace; a _dump_snapshot file keeps them after the trace)",
            );
        }
        None if format == SnapshotFormat::SegmentList => {
            line_under(
                &mut out,
                "allocator_settings: ",
                "not in the file (a bare segment list, as torch.cuda.memory_snapshot() returns, \
                 has none)",
            );
        }
        None => {
            let _ = writeln!(out, "allocator_settings: not in the file (torch < 2.3)");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_wider_than_ten_cells_widens_the_column_for_every_row() {
        use crate::alloc::{BlockState, PoolKind};
        use crate::snapshot::sites::sites_of_snapshot;
        use crate::snapshot::types::{Block, Frame, Segment, Snapshot};
        const MIB: u64 = 1 << 20;
        // 1022.99 MiB: 11 cells, one more than the usual column.
        let sizes = [1023 * MIB - 10 * 1024, 2 * MIB];
        let mut address = 1u64 << 40;
        let blocks = sizes
            .iter()
            .enumerate()
            .map(|(k, &size)| {
                let frame = Frame {
                    filename: Arc::from("train.py"),
                    line: 10 + k as u64,
                    name: Arc::from("step"),
                };
                let block = Block {
                    address,
                    size,
                    requested_size: size,
                    state: BlockState::ActiveAllocated,
                    frames: Arc::from(vec![frame]),
                };
                address += size;
                block
            })
            .collect();
        let snapshot = Snapshot::of_segments(
            SnapshotFormat::DumpSnapshot,
            vec![Segment {
                device: 0,
                address: 1 << 40,
                total_size: sizes.iter().sum(),
                allocated_size: None,
                active_size: None,
                requested_size: None,
                stream: 0,
                segment_type: PoolKind::Large,
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: Arc::from(Vec::new()),
                blocks,
            }],
        );
        let sites = sites_of_snapshot(&snapshot, Some(0), Grouping::UserFrame);
        // One site listed, one left for the "more" row: both row kinds.
        let at = SitesAt::new(sites, 1, None, None);
        let mut out = String::new();
        render_sites_at(&mut out, &at);
        let rows: Vec<&str> = out.lines().collect();
        assert_eq!(rows.len(), 2, "{out}");
        assert!(rows[0].starts_with("    1022.99 MiB "), "{out}");
        assert!(rows[1].starts_with("          2 MiB "), "{out}");
        // The percentages line up under each other.
        let percent = |row: &str| row.find('%');
        assert_eq!(percent(rows[0]), percent(rows[1]), "{out}");
    }

    fn callers_of(frames: &[&str]) -> String {
        let frames: Vec<String> = frames.iter().map(ToString::to_string).collect();
        let mut out = String::new();
        render_callers(&mut out, &frames);
        out
    }

    #[test]
    fn a_percentage_is_never_rounded_to_all_or_none_it_is_not() {
        assert_eq!(percent_of(0, 0), "0.0");
        assert_eq!(percent_of(0, 10), "0.0");
        assert_eq!(percent_of(10, 10), "100.0");
        assert_eq!(percent_of(9_999, 10_000), ">99.9");
        assert_eq!(percent_of(1, 10_000), "<0.1");
        assert_eq!(percent_of(1, 3), "33.3");
        assert_eq!(percent_of(u64::MAX, u64::MAX), "100.0");
    }

    #[test]
    fn callers_that_fit_share_the_called_from_line() {
        assert_eq!(
            callers_of(&["model.py:397 fwd", "model.py:384 fwd"]),
            format!("{:32}called from model.py:397 fwd < model.py:384 fwd\n", "")
        );
        assert_eq!(callers_of(&[]), "");
    }

    #[test]
    fn callers_too_long_for_one_line_break_only_between_frames_each_led_by_its_separator() {
        let out = callers_of(&[
            "trace_peak_memory.py:19 custom_scaled_dot_product_attention",
            "trace_peak_memory.py:43 main",
        ]);
        let frames = " ".repeat(44);
        assert_eq!(
            out,
            format!(
                "{:32}called from trace_peak_memory.py:19\n\
                 {frames}custom_scaled_dot_product_attention\n\
                 {:42}< trace_peak_memory.py:43 main\n",
                "", ""
            )
        );
        // Two frames that fit a line each: a line each, the second's `<`
        // before it in the margin, never at the end of the first.
        let out = callers_of(&["einops.py:916 einsum", "trace_peak_memory.py:12 attention"]);
        assert_eq!(
            out,
            format!(
                "{:32}called from einops.py:916 einsum\n{:42}< trace_peak_memory.py:12 attention\n",
                "", ""
            )
        );
        for line in out.lines() {
            assert!(cells(line) <= REPORT_WIDTH && !line.ends_with('<'), "{out}");
        }
    }
}
