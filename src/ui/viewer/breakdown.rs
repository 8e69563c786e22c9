//! The viewer's memory breakdown: allocated, pending free and cached but
//! free bytes of the selected GPU's reserved memory at the cursor.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::focused;
use crate::alloc::BlockState;
use crate::app::keymap::Keymap;
use crate::app::state::Pane;
use crate::app::viewer::{ViewerAction, ViewerState};
use crate::ui::breakdown::legend_item;
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

pub(super) fn render_breakdown(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let g = theme.glyphs();
    let with_filters = |filters: bool| {
        let mut detail = Vec::new();
        if let Some(d) = v.device() {
            detail.push(Span::styled(format!("GPU {}", d.device), theme.text));
        }
        let notes = if filters {
            super::title_notes(v)
        } else {
            super::final_state_note(v)
        };
        for f in notes {
            detail.push(Span::styled(format!(" · {f}"), theme.warning));
        }
        detail
    };
    // The filters leave the title before it is cut mid-word: the status
    // row says them too.
    let mut detail = with_filters(true);
    if chrome::title_width(Pane::Breakdown, &detail) > usize::from(area.width) {
        detail = with_filters(false);
    }
    let block = chrome::pane_block_within(
        Pane::Breakdown,
        detail,
        focused(v, Pane::Breakdown),
        false,
        theme,
        usize::from(area.width),
    );
    let inner = block.inner(area);
    block.render(area, buf);
    chrome::mark_cut_title(area, buf);
    if inner.height == 0 {
        theme.finish(area, buf);
        return;
    }
    // Sizes come from the file: the sums saturate rather than overflow.
    let blocks = v.segments.iter().flat_map(|s| &s.blocks);
    let (mut allocated, mut pending) = (0u64, 0u64);
    for b in blocks {
        match b.state {
            BlockState::ActiveAllocated => allocated = allocated.saturating_add(b.size),
            BlockState::ActivePendingFree => pending = pending.saturating_add(b.size),
            BlockState::Inactive => {}
        }
    }
    let reserved = v
        .segments
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.total_size));
    let cached = reserved.saturating_sub(allocated.saturating_add(pending));
    if reserved == 0 {
        // The title names the filter; the words must not claim the
        // allocator is empty when the filter hid its segments.
        let text = if v.scrub.devices.is_empty() {
            format!("nothing reserved: {}", super::NO_SEGMENTS_NOTE)
        } else if v.device().is_some_and(|d| d.is_empty()) && !super::filter_hides(v) {
            "nothing reserved in the file's final state".to_string()
        } else if !super::filter_hides(v) {
            // At the end of a trace that freed everything (the demo's, a
            // run that released its memory before the dump) the viewer
            // opens on an empty screen: say so, and where the memory was.
            let at_end = v.device().is_some_and(|d| v.cursor() == d.len());
            let held = v.device_peaks().is_some_and(|p| p.reserved.bytes > 0);
            match keymap.viewer_key_name(ViewerAction::PeakAllocated) {
                Some(peak) if at_end && held => format!(
                    "nothing reserved at the last event (all freed); {peak} goes to the peak"
                ),
                _ => "nothing reserved at this point of the trace".to_string(),
            }
        } else {
            format!(
                "nothing reserved in the filtered segments here; {} cycle the filter",
                super::filter_keys(keymap)
            )
        };
        chrome::line_at(buf, inner, 0, &Line::styled(text, theme.dim));
        theme.finish(area, buf);
        return;
    }
    chrome::bar(
        buf,
        Rect { height: 1, ..inner },
        &[
            (allocated, g.allocated, theme.allocated),
            (pending, g.pending_free, theme.pending_free),
            (cached, g.cached_free, theme.cached_free),
        ],
        reserved,
    );
    let rows = Rect {
        y: inner.y + 1,
        height: inner.height.saturating_sub(1),
        ..inner
    };
    // Every part the bar draws is named, in the rows there are: the loosest
    // legend that fits (figures with shares, the reserved total after
    // them), then tighter ones down to one-word labels; the tightest if
    // none does.
    // Each part's name and, for the tightest legend, its short form. The
    // third part is the free blocks (reserved − allocated − pending free),
    // the Fragmentation pane's external free: one name for one figure.
    let mut parts = vec![(
        g.allocated,
        theme.allocated,
        ("allocated", "allocated"),
        allocated,
    )];
    if pending > 0 {
        parts.push((
            g.pending_free,
            theme.pending_free,
            ("pending free", "pending"),
            pending,
        ));
    }
    parts.push((
        g.cached_free,
        theme.cached_free,
        ("external free", "ext free"),
        cached,
    ));
    let legend = |shares: bool, note: bool, short: bool| {
        let mut items: Vec<Line<'static>> = parts
            .iter()
            .map(|&(glyph, style, (label, short_label), bytes)| {
                let label = if short { short_label } else { label };
                if shares {
                    legend_item(glyph, style, label, bytes, reserved)
                } else {
                    Line::from(vec![
                        Span::styled(glyph, style),
                        Span::raw(format!(" {label} {}", format::bytes(bytes))),
                    ])
                }
            })
            .collect();
        if note {
            items.push(Line::styled(
                format!("of {} reserved", format::bytes(reserved)),
                theme.dim,
            ));
        }
        items
    };
    let candidates = [
        (legend(true, true, false), 3),
        (legend(true, false, false), 3),
        (legend(true, false, false), 2),
        (legend(false, true, false), 2),
        (legend(false, false, false), 2),
        (legend(false, false, true), 2),
    ];
    let fitting = usize::from(rows.height.max(1));
    let flowed: Vec<Vec<Line<'static>>> = candidates
        .into_iter()
        .map(|(items, gap)| chrome::flow(items, inner.width, gap))
        .collect();
    if let Some(lines) = flowed
        .iter()
        .find(|lines| lines.len() <= fitting)
        .or(flowed.last())
    {
        chrome::lines_at(buf, rows, lines);
    }
    theme.finish(area, buf);
}
