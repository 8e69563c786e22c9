//! The loading screen shown while `vramtop open` reads the file.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use crate::app::keymap::{Action, Keymap};
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

/// The loading screen: "loading FILE: X MiB of Y MiB", a bar, and the key
/// that quits.
pub fn render_loading(
    area: Rect,
    buf: &mut Buffer,
    file: &str,
    done: u64,
    total: u64,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    if area.width == 0 || area.height == 0 {
        return;
    }
    let g = theme.glyphs();
    let text = format!(
        "loading {file}: {} of {}",
        format::bytes(done.min(total)),
        format::bytes(total)
    );
    let row = area.height / 2;
    chrome::line_at(
        buf,
        area,
        row.saturating_sub(1),
        &Line::styled(text, theme.header),
    );
    let bar_w = area.width.saturating_sub(4).min(60);
    let bar = Rect::new(area.x + (area.width - bar_w) / 2, area.y + row, bar_w, 1);
    chrome::bar(
        buf,
        bar,
        &[
            (done.min(total), g.bar_fill, theme.bar_ok),
            (total.saturating_sub(done), g.bar_empty, theme.bar_empty),
        ],
        total.max(1),
    );
    let quit = keymap.key_name(Action::Quit).unwrap_or_default();
    chrome::line_at(
        buf,
        area,
        row + 1,
        &Line::styled(format!("{quit} quits"), theme.dim),
    );
    theme.finish(area, buf);
}
