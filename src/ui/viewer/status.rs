//! The viewer's two-row status line: where the cursor is (event, action,
//! stream, time, peaks, marks, filters) and the keys that fit.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::{elapsed, filters};
use crate::app::keymap::Keymap;
use crate::app::viewer::ViewerState;
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

/// The status text: "event i/N · action … · stream s · t+… · filters".
pub fn status_text(v: &ViewerState) -> String {
    let Some(d) = v.device() else {
        return format!("{}: no GPUs", v.file);
    };
    let n = d.len();
    let c = v.cursor();
    let mut parts = Vec::new();
    match v.current_event() {
        Some(e) => {
            parts.push(format!("event {c}/{n}"));
            parts.push(describe_event(e));
            parts.push(format!("stream {}", e.stream));
            let first = d.events().first().and_then(|e| e.time_us);
            parts.push(elapsed(first, e.time_us));
        }
        None if n == 0 => parts.push(match trace_reading_text(v) {
            Some(reading) => format!("the final state · {reading}"),
            None => "no trace: the final state".to_string(),
        }),
        None => parts.push(format!("event 0/{n} · before the first event")),
    }
    if let Some(p) = v.device_peaks().filter(|_| n > 0) {
        let at = |cursor: usize| {
            if cursor == c {
                "here".to_string()
            } else {
                format!("@{cursor}")
            }
        };
        parts.push(format!(
            "peak alloc {} {} · reserved {} {}",
            format::bytes(p.allocated.bytes),
            at(p.allocated.cursor),
            format::bytes(p.reserved.bytes),
            at(p.reserved.cursor)
        ));
    }
    match (v.mark_a, v.mark_b) {
        (None, None) => {}
        (a, b) => {
            let show = |m: Option<usize>| m.map_or_else(|| "-".to_string(), |m| m.to_string());
            parts.push(format!("A {} B {}", show(a), show(b)));
        }
    }
    for f in filters(v) {
        parts.push(format!("only {f}"));
    }
    parts.join(" · ")
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
        None => Line::styled(status_text(v), theme.header),
    };
    chrome::line_at(buf, area, 0, &first);
    let trace_less = v.trace_reading.is_none() && v.device().is_some_and(|d| d.is_empty());
    let all = if trace_less {
        keymap.viewer_hints_without_trace()
    } else {
        keymap.viewer_hints()
    };
    let hints = chrome::key_hints(&all, usize::from(area.width), theme);
    chrome::line_at(buf, area, 1, &hints);
    theme.finish(area, buf);
}
