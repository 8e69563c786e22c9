//! The centred text popup the block detail and the A/B comparison use.

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
    if area.width < 10 || area.height < 5 {
        return;
    }
    let width = area.width.saturating_sub(4).min(max_width);
    let lines = lines(width.saturating_sub(2));
    let height = u16::try_from(lines.len() + 2)
        .unwrap_or(u16::MAX)
        .min(area.height.saturating_sub(2));
    let (popup, inner) = chrome::popup(buf, area, (width, height), title, hint, lines.len(), theme);
    chrome::lines_at(buf, inner, &lines);
    theme.finish(popup, buf);
}
