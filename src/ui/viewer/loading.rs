//! The loading screen shown while `vramtop open` reads the file.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use crate::app::keymap::{Action, Keymap};
use crate::snapshot::peak::At;
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

/// The loading screen: "loading FILE: X MiB of Y MiB", a bar, and the key
/// that quits; with `at` (`open FILE --at peak`), above them that the
/// viewer opens at that moment once the trace is read, as it waits for it.
#[allow(clippy::too_many_arguments)]
pub fn render_loading(
    area: Rect,
    buf: &mut Buffer,
    file: &str,
    done: u64,
    total: u64,
    at: Option<At>,
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
    if let Some(at) = at {
        chrome::line_at(
            buf,
            area,
            row.saturating_sub(3),
            &Line::styled(
                format!("--at {at}: the viewer opens there once the trace is read"),
                theme.dim,
            ),
        );
    }
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
