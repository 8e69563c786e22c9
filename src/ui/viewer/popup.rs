//! The centred text popup the block detail and the A/B comparison use.

use std::cell::Cell;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use crate::ui::chrome;
use crate::ui::theme::Theme;

/// How a popup taller than the screen scrolls: the rows it is scrolled
/// down, where it stores the largest useful scroll and the rows it shows
/// as drawn (for the page keys), and the keys that scroll it back and on
/// ("↑ k", "↓ j").
pub(super) struct PopupScroll<'s> {
    pub offset: usize,
    pub limit: &'s Cell<usize>,
    pub rows: &'s Cell<usize>,
    pub keys: (&'static str, &'static str),
}

/// A centred popup at most `max_width` wide and as high as its lines,
/// `lines` made for the width inside its border. Lines that do not fit are
/// scrolled to as `scroll` says, and the bottom border says which rows are
/// shown and how to scroll.
pub(super) fn render_text_popup<'a>(
    area: Rect,
    buf: &mut Buffer,
    (max_width, title, hint): (u16, &str, &str),
    theme: &Theme,
    scroll: &PopupScroll<'_>,
    lines: impl FnOnce(u16) -> Vec<Line<'a>>,
) {
    if area.width < 10 || area.height < 5 {
        return;
    }
    let width = area.width.saturating_sub(4).min(max_width);
    let lines = lines(width.saturating_sub(2));
    let height = u16::try_from(lines.len() + 2)
        .unwrap_or(u16::MAX)
        .min(area.height.saturating_sub(2));
    let rows = usize::from(height.saturating_sub(2));
    let most = lines.len().saturating_sub(rows);
    scroll.limit.set(most);
    scroll.rows.set(rows);
    let first = scroll.offset.min(most);
    let (popup, inner) = chrome::popup(buf, area, (width, height), title, hint, rows, theme);
    chrome::lines_at(buf, inner, lines.get(first..).unwrap_or_default());
    let (back, on) = scroll.keys;
    chrome::scroll_note(buf, popup, (first, rows, lines.len()), (back, on), theme);
    theme.finish(popup, buf);
}
