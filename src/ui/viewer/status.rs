//! The viewer's two-row status line: where the cursor is (event, action,
//! stream, time, peaks, marks, filters) and the keys that fit.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::{elapsed, filters};
use crate::app::keymap::Keymap;
use crate::app::viewer::{MarkHere, ViewerState};
use crate::snapshot::TraceEntry;
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

/// "alloc 4.00 MiB at 0x7f…" for an event.
fn describe_event(e: &TraceEntry) -> String {
    let action = e.action.as_str();
    match e.action {
        crate::alloc::TraceAction::Oom => format!(
            "{action} {} requested, {} free on the device",
            format::bytes(e.size),
            format::bytes(e.addr)
        ),
        crate::alloc::TraceAction::Snapshot => {
            format!("{action} ({} active)", format::bytes(e.size))
        }
        crate::alloc::TraceAction::Annotate => action.to_string(),
        _ => format!("{action} {} at {:#x}", format::bytes(e.size), e.addr),
    }
}

/// "reading trace: X of Y", while the viewer shows a file's segments stage;
/// once every byte is parsed, that the events are being built (seconds on a
/// GB file, which a "Y of Y" would show as stuck).
pub fn trace_reading_text(v: &ViewerState) -> Option<String> {
    v.trace_reading.map(|r| {
        if r.total > 0 && r.read >= r.total {
            format!(
                "reading trace: {} parsed, building the events",
                format::bytes(r.total)
            )
        } else {
            format!(
                "reading trace: {} of {}",
                format::bytes(r.read.min(r.total)),
                format::bytes(r.total)
            )
        }
    })
}

/// How readily a part of the status text goes when the line is too narrow:
/// the lowest first. Where the cursor is, the marks and the filters (what
/// the user set) stay; the peaks ("here" at one) before the event's words,
/// the event's time before its stream (almost always the default one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Keep {
    Stream,
    Time,
    Peaks,
    Event,
    Always,
}

/// The parts of the status text in their order, each with how readily it
/// goes.
fn status_parts(v: &ViewerState) -> Vec<(Keep, String)> {
    let Some(d) = v.device() else {
        return vec![(Keep::Always, format!("{}: no GPUs", v.file))];
    };
    let n = d.len();
    let c = v.cursor();
    let mut parts = Vec::new();
    match v.current_event() {
        Some(e) => {
            // The event's count from 1, as `--summary` gives peaks, and its
            // index in the file's trace, as `replay` and what-if name events.
            let index = c.saturating_sub(1);
            parts.push((Keep::Always, format!("event {c}/{n} (#{index})")));
            parts.push((Keep::Event, describe_event(e)));
            parts.push((Keep::Stream, format!("stream {}", e.stream)));
            let first = d.events().first().and_then(|e| e.time_us());
            parts.push((Keep::Time, elapsed(first, e.time_us())));
        }
        None if n == 0 => parts.push((
            Keep::Always,
            match (trace_reading_text(v), &v.trace_error) {
                (Some(reading), _) => format!("the final state · {reading}"),
                (None, Some(_)) => "the final state · the trace could not be read".to_string(),
                (None, None) => "no trace: the final state".to_string(),
            },
        )),
        None => parts.push((
            Keep::Always,
            format!("event 0/{n} · before the first event"),
        )),
    }
    if let Some(p) = v.device_peaks().filter(|_| n > 0) {
        let at = |cursor: usize| {
            if cursor == c {
                "here".to_string()
            } else {
                format!("@{cursor}")
            }
        };
        // A peak the cursor is at (after P or R) stays on the narrowest
        // line: it is what the key was pressed for. The reserved peak
        // names itself in full where the allocated one may have gone.
        let keep = |cursor: usize| {
            if cursor == c {
                Keep::Always
            } else {
                Keep::Peaks
            }
        };
        parts.push((
            keep(p.allocated.cursor),
            format!(
                "peak alloc {} {}",
                format::bytes(p.allocated.bytes),
                at(p.allocated.cursor)
            ),
        ));
        // `B`'s moment, said where the cursor is at it: the event's own
        // words say an allocation, not that it is the biggest.
        if p.biggest_allocation.is_some_and(|b| b.cursor == c) {
            parts.push((Keep::Always, "the biggest allocation".to_string()));
        }
        let reserved_here = p.reserved.cursor == c && p.allocated.cursor != c;
        parts.push((
            keep(p.reserved.cursor),
            format!(
                "{} {} {}",
                if reserved_here {
                    "peak reserved"
                } else {
                    "reserved"
                },
                format::bytes(p.reserved.bytes),
                at(p.reserved.cursor)
            ),
        ));
    }
    if v.mark_a.is_some() || v.mark_b.is_some() {
        // A mark set on another GPU is no moment of this one's trace: it
        // says where it is rather than an event number of that trace.
        let show = |m| match v.mark_here(m) {
            MarkHere::Unset => "-".to_string(),
            MarkHere::Here(c) => c.to_string(),
            MarkHere::Elsewhere(g) => format!("(on GPU {g})"),
        };
        parts.push((
            Keep::Always,
            format!("A {} B {}", show(v.mark_a), show(v.mark_b)),
        ));
    }
    for f in filters(v) {
        parts.push((Keep::Always, format!("only {f}")));
    }
    parts
}

/// The status text: "event i/N · action … · stream s · t+… · filters".
pub fn status_text(v: &ViewerState) -> String {
    join(status_parts(v).iter().map(|(_, p)| p.as_str()))
}

/// [`status_text`] for a row of `width` columns: the parts that always
/// stay, then the others that still fit, those that go last first (what
/// still does not fit is cut).
pub fn status_text_within(v: &ViewerState, width: usize) -> String {
    let parts = status_parts(v);
    let text = |shown: &[bool]| {
        join(
            parts
                .iter()
                .zip(shown)
                .filter(|(_, s)| **s)
                .map(|((_, p), _)| p.as_str()),
        )
    };
    let mut shown: Vec<bool> = parts
        .iter()
        .map(|(keep, _)| *keep == Keep::Always)
        .collect();
    for level in [Keep::Event, Keep::Peaks, Keep::Time, Keep::Stream] {
        // A stream without the event it belongs to reads as a filter.
        let event_shown = parts
            .iter()
            .zip(&shown)
            .any(|((keep, _), s)| *s && *keep == Keep::Event);
        if level == Keep::Stream && !event_shown {
            continue;
        }
        let with: Vec<bool> = parts
            .iter()
            .zip(&shown)
            .map(|((keep, _), s)| *s || *keep == level)
            .collect();
        if text(&with).chars().count() <= width {
            shown = with;
        }
    }
    text(&shown)
}

fn join<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts.collect::<Vec<_>>().join(" · ")
}

pub(super) fn render_status(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    if area.height == 0 {
        return;
    }
    // Why the last key did nothing, in place of the position until the next key.
    let first = match &v.app.ui.notice {
        Some(n) => Line::styled(n.clone(), theme.warning),
        None => Line::styled(status_text_within(v, usize::from(area.width)), theme.header),
    };
    chrome::line_at(buf, area, 0, &first);
    let trace_less = v.trace_reading.is_none() && v.device().is_some_and(|d| d.is_empty());
    let sites = v.sites_take_keys();
    // The comparison takes the keys over the block detail too.
    let mut all = if v.compare.is_some() {
        keymap.compare_hints()
    } else if v.detail_open {
        keymap.detail_hints()
    } else if trace_less {
        keymap.viewer_hints_without_trace(sites)
    } else {
        keymap.viewer_hints(sites)
    };
    if v.returns_to_dashboard {
        // Opened from the dashboard: `q` goes back there, not out of vramtop.
        for hint in all.iter_mut().filter(|h| h.1 == "quit") {
            hint.1 = "back";
        }
    }
    let hints = chrome::key_hints(&all, usize::from(area.width), theme);
    chrome::line_at(buf, area, 1, &hints);
    theme.finish(area, buf);
}
