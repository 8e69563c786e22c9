//! The centred text popup the block detail and the A/B comparison use.

use std::cell::Cell;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use crate::ui::chrome;
use crate::ui::theme::Theme;

/// A centred popup at most `max_width` wide and as high as its lines,
/// `lines` made for the width inside its border.
pub(super) fn render_text_popup<'a>(
    area: Rect,
    buf: &mut Buffer,
    (max_width, title, hint): (u16, &str, &str),
    theme: &Theme,
    lines: impl FnOnce(u16) -> Vec<Line<'a>>,
) {
    render_scrolled_popup(area, buf, (max_width, title, hint), theme, None, lines);
}

/// [`render_text_popup`] scrolled `scroll.0` rows down, when its lines do
/// not fit: the largest useful scroll goes to `scroll.1`, and the bottom
/// border says which rows are shown and how to scroll.
pub(super) fn render_scrolled_popup<'a>(
    area: Rect,
    buf: &mut Buffer,
    (max_width, title, hint): (u16, &str, &str),
    theme: &Theme,
    scroll: Option<(usize, &Cell<usize>)>,
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
    let Some((wanted, limit)) = scroll else {
        let (popup, inner) =
            chrome::popup(buf, area, (width, height), title, hint, lines.len(), theme);
        chrome::lines_at(buf, inner, &lines);
        theme.finish(popup, buf);
        return;
    };
    let rows = usize::from(height.saturating_sub(2));
    let most = lines.len().saturating_sub(rows);
    limit.set(most);
    let first = wanted.min(most);
    let (popup, inner) = chrome::popup(buf, area, (width, height), title, hint, rows, theme);
    let shown = lines.get(first..).unwrap_or_default();
    chrome::lines_at(buf, inner, shown);
    if most > 0 {
        let last = (first + rows).min(lines.len());
        let how = match (first == 0, first == most) {
            (true, _) => "↓ j scrolls",
            (false, true) => "↑ k scrolls back",
            (false, false) => "↑ k ↓ j scroll",
        };
        let note = format!(" rows {}–{last} of {} · {how} ", first + 1, lines.len());
        chrome::bottom_note(buf, popup, &note, theme);
    }
    theme.finish(popup, buf);
}
