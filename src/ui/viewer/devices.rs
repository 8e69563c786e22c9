//! The viewer's devices pane: one row per GPU of the snapshot with its
//! events, reserved and allocated bytes at the cursor and their peaks.

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

pub(super) fn render_devices(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    let block = pane_block(
        Pane::Gpus,
        vec![Span::styled(v.file.clone(), theme.text)],
        focused(v, Pane::Gpus),
        false,
        theme,
    );
    let inner = block.inner(area);
    block.render(area, buf);
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
    for (row, (i, d)) in v
        .scrub
        .devices
        .iter()
        .enumerate()
        .skip(first)
        .take(usize::from(inner.height))
        .enumerate()
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
        let mut spans = vec![
            Span::styled(format!("{pointer}{} ", d.device), style),
            Span::styled(format!("GPU {}", d.device), style),
            Span::styled(
                match v.trace_reading {
                    Some(_) => "  trace being read".to_string(),
                    None if d.is_empty() => "  no trace".to_string(),
                    None => format!("  {}", format::count_of(d.len(), "event", "events")),
                },
                theme.dim,
            ),
        ];
        // Without a trace the final state is all there is: no peak to name.
        if let Some(p) = p
            && d.is_empty()
        {
            spans.push(Span::raw(format!(
                "  reserved {}  allocated {}",
                format::bytes(p.reserved),
                format::bytes(p.allocated)
            )));
        } else if let (Some(p), Some(pk)) = (p, peaks) {
            spans.push(Span::raw(format!(
                "  reserved {} (peak {} @{})  allocated {} (peak {} @{})",
                format::bytes(p.reserved),
                format::bytes(pk.reserved.bytes),
                pk.reserved.cursor,
                format::bytes(p.allocated),
                format::bytes(pk.allocated.bytes),
                pk.allocated.cursor
            )));
        }
        let ooms = d.count(MarkKind::Oom);
        if ooms > 0 {
            spans.push(Span::styled(format!("  {ooms} OOM"), theme.critical));
        }
        chrome::line_at(
            buf,
            inner,
            u16::try_from(row).unwrap_or(u16::MAX),
            &Line::from(spans),
        );
    }
    theme.finish(area, buf);
}
