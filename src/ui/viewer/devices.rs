//! The viewer's devices pane: one row per GPU of the snapshot with its
//! events, reserved and allocated bytes at the cursor and their peaks, its
//! OOMs, and the events an inconsistent file's trace could not place.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::focused;
use crate::app::state::Pane;
use crate::app::viewer::ViewerState;
use crate::snapshot::scrub::MarkKind;
use crate::ui::chrome::{self, pane_block};
use crate::ui::format;
use crate::ui::theme::Theme;

/// The GPU (index into `scrub.devices`) drawn on screen row `row` of the
/// devices pane drawn in `area`, for mouse clicks: the rows under the
/// title, scrolled as `render_devices` scrolls them. `None` on the title
/// or below the last GPU.
pub fn device_at(v: &ViewerState, area: Rect, row: u16) -> Option<usize> {
    // The pane's title is its one row of chrome (`pane_block`).
    let top = area.y.checked_add(1)?;
    let rows = area.height.saturating_sub(1);
    if row < top || row >= top.saturating_add(rows) {
        return None;
    }
    let first = chrome::first_shown(v.device_index(), usize::from(rows));
    let index = first.checked_add(usize::from(row - top))?;
    (index < v.scrub.devices.len()).then_some(index)
}

pub(super) fn render_devices(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    // While a filter is on the row's figures are still every segment's:
    // the title says so, the file name giving way (middle first) to it.
    let title = if super::filters(v).is_empty() {
        vec![Span::styled(v.file.clone(), theme.text)]
    } else {
        let note = format!(" · {}", super::UNFILTERED_NOTE);
        let bare = chrome::title_width(Pane::Gpus, &[Span::raw(note.as_str())]);
        // A cell of the border after the title.
        let room = usize::from(area.width).saturating_sub(bare.saturating_add(1));
        vec![
            Span::styled(format::elide_middle(&v.file, room), theme.text),
            Span::styled(note, theme.warning),
        ]
    };
    let block = pane_block(Pane::Gpus, title, focused(v, Pane::Gpus), false, theme);
    let inner = block.inner(area);
    block.render(area, buf);
    chrome::mark_cut_title(area, buf);
    if v.scrub.devices.is_empty() {
        chrome::line_at(
            buf,
            inner,
            0,
            &Line::styled(
                "no GPUs: the snapshot has no segments and no trace",
                theme.dim,
            ),
        );
    }
    let selected = v.device_index();
    let first = chrome::first_shown(selected, usize::from(inner.height));
    let width = usize::from(inner.width);
    // Each row's wordings, widest first; all rows then take the widest
    // wording every one of them fits, so two GPUs' rows read alike ("res"
    // on one row and "reserved" on the next read as different figures).
    let mut rows: Vec<Vec<Line<'static>>> = Vec::new();
    for (i, d) in v
        .scrub
        .devices
        .iter()
        .enumerate()
        .skip(first)
        .take(usize::from(inner.height))
    {
        let cursor = v.cursors.get(i).copied().unwrap_or(0);
        let p = d.points.get(cursor).copied();
        let peaks = v.peaks.get(i);
        let pointer = if i == selected { g.pointer } else { " " };
        let style = if i == selected {
            theme.header
        } else {
            theme.text
        };
        let head = vec![
            Span::styled(format!("{pointer}{} ", d.device), style),
            Span::styled(format!("GPU {}", d.device), style),
        ];
        let events = Span::styled(
            match v.trace_reading {
                Some(_) => "  trace being read".to_string(),
                None if d.is_empty() && v.trace_error.is_some() => "  trace unreadable".to_string(),
                None if d.is_empty() => "  no trace".to_string(),
                None => format!("  {}", format::count_of(d.len(), "event", "events")),
            },
            theme.dim,
        );
        // Without a trace the final state is all there is: no peak to name.
        // The figures in words where they fit, else shorter (the status
        // line counts the events), so a narrow row keeps both peaks; the
        // narrowest drops the peaks' cursors (`P` and `R` jump there).
        let figures = |short: bool, cursors: bool| -> Option<String> {
            let (res, alloc, peak) = if short {
                ("res", "alloc", "pk")
            } else {
                ("reserved", "allocated", "peak")
            };
            let at = |cursor: usize| {
                if cursors {
                    format!(" @{cursor}")
                } else {
                    String::new()
                }
            };
            match (p, peaks) {
                (Some(p), _) if d.is_empty() => Some(format!(
                    "  {res} {}  {alloc} {}",
                    format::bytes(p.reserved),
                    format::bytes(p.allocated)
                )),
                (Some(p), Some(pk)) => Some(format!(
                    "  {res} {} ({peak} {}{})  {alloc} {} ({peak} {}{})",
                    format::bytes(p.reserved),
                    format::bytes(pk.reserved.bytes),
                    at(pk.reserved.cursor),
                    format::bytes(p.allocated),
                    format::bytes(pk.allocated.bytes),
                    at(pk.allocated.cursor)
                )),
                _ => None,
            }
        };
        let ooms = d.count(MarkKind::Oom);
        let oom = (ooms > 0).then(|| Span::styled(format!("  {ooms} OOM"), theme.critical));
        // Events the reconstruction could not place (a free of a block the
        // file never had, …): the figures shown are then approximate, and
        // `vramtop replay FILE` names what is wrong. It matters more than
        // the peaks' cursors, so a narrow row drops those first.
        let misfit = |short: bool| {
            (d.misfits > 0).then(|| {
                let count = if short {
                    d.misfits.to_string()
                } else {
                    format::count_of(d.misfits, "event", "events")
                };
                Span::styled(format!("  {count} inconsistent"), theme.warning)
            })
        };
        // How the row begins: "▶0 GPU 0" (`Head::Both`); "▶GPU 0", the
        // label without the row's number that repeats it, one row of
        // SnapViewer's 233 inconsistent events at 80 columns short
        // (`Head::Label`); "▶0" only where nothing else is left to drop.
        let line_of =
            |with_events: bool, short: bool, cursors: bool, terse: bool, head_as: Head| {
                let mut spans = match head_as {
                    Head::Both => head.clone(),
                    Head::Label => vec![Span::styled(format!("{pointer}GPU {}", d.device), style)],
                    Head::Number => vec![Span::styled(format!("{pointer}{}", d.device), style)],
                };
                if with_events {
                    spans.push(events.clone());
                }
                spans.extend(figures(short, cursors).map(Span::raw));
                spans.extend(oom.clone());
                spans.extend(misfit(terse));
                Line::from(spans)
            };
        // (with events, short words, peaks' cursors, "N inconsistent"
        // without "events", how the row begins), widest first: the
        // cursors go before the label (`P` and `R` jump there), so a row
        // with an OOM or inconsistent badge keeps "GPU N" as the others
        // do; the number alone only where nothing else is left to drop.
        let tiers = [
            (true, false, true, false, Head::Both),
            (false, false, true, false, Head::Both),
            (false, true, true, false, Head::Both),
            (false, true, false, false, Head::Both),
            (false, true, false, true, Head::Both),
            (false, true, false, true, Head::Label),
            (false, true, false, true, Head::Number),
        ];
        rows.push(
            tiers
                .into_iter()
                .map(|(with_events, short, cursors, terse, head_as)| {
                    line_of(with_events, short, cursors, terse, head_as)
                })
                .collect(),
        );
    }
    let tier = rows
        .iter()
        .map(|wordings| {
            wordings
                .iter()
                .position(|l| l.width() <= width)
                .unwrap_or(wordings.len().saturating_sub(1))
        })
        .max()
        .unwrap_or(0);
    for (row, wordings) in rows.iter().enumerate() {
        if let Some(line) = wordings.get(tier).or(wordings.last()) {
            chrome::line_at(buf, inner, u16::try_from(row).unwrap_or(u16::MAX), line);
        }
    }
    theme.finish(area, buf);
}

/// How a GPUs row of the viewer begins (see `render_devices`'s tiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// The row's number, then "GPU N": "▶0 GPU 0".
    Both,
    /// "GPU N" alone: "▶GPU 0".
    Label,
    /// The row's number alone: "▶0".
    Number,
}
