//! Drawing into ratatui's `TestBackend` and reading the result as text.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::widgets::Widget;
use vramtop::app::keymap::Keymap;
use vramtop::app::state::AppState;
use vramtop::ui::{self, Theme};

/// The whole dashboard for `state` on a `w`×`h` test terminal.
pub fn draw(state: &AppState, theme: &Theme, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, state, &Keymap::default(), theme))
        .expect("the test backend cannot fail");
    terminal
}

/// One widget filling a `w`×`h` test terminal.
pub fn draw_widget(widget: impl Widget, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| f.render_widget(widget, f.area()))
        .expect("the test backend cannot fail");
    terminal
}

/// The buffer as plain text, one line per row.
pub fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            out.push_str(buf.cell((x, y)).map_or(" ", |c| c.symbol()));
        }
        out.push('\n');
    }
    out
}

/// Every cell holding a non-ASCII character, as (column, row, symbol): what
/// `--ascii` must leave empty.
pub fn non_ascii(buf: &Buffer) -> Vec<(u16, u16, String)> {
    let area = buf.area;
    let mut out = Vec::new();
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            if let Some(cell) = buf.cell((x, y))
                && !cell.symbol().is_ascii()
            {
                out.push((x, y, cell.symbol().to_string()));
            }
        }
    }
    out
}

/// Whether `message` can be read whole on `screen` (text, one line per
/// row): its words in order, across as many rows as it wraps onto (a row's
/// end reads as a space).
pub fn reads_whole(screen: &str, message: &str) -> bool {
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    let flowed = screen
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join(" ");
    words(&flowed).contains(&words(message))
}

/// The help's row of `keys` on a drawn screen: its text inside the
/// popup's left border with the row below (where a reason that does not
/// fit goes), and whether its description is drawn in `theme.dim`.
pub fn help_row(buf: &Buffer, keys: &str, theme: &Theme) -> Option<(String, bool)> {
    let area = buf.area;
    let inside = |y: u16| -> Option<(usize, String)> {
        let cells: Vec<&str> = (area.x..area.right())
            .map(|x| buf[(x, y)].symbol())
            .collect();
        let border = cells.iter().position(|c| *c == "│")?;
        Some((border, cells[border + 1..].concat()))
    };
    (area.y..area.bottom()).find_map(|y| {
        let (border, row) = inside(y)?;
        let rest = row.strip_prefix(keys)?;
        let pad = rest.chars().take_while(|c| *c == ' ').count();
        if pad == 0 {
            return None;
        }
        // The description starts after the keys' column.
        let at = border + 1 + keys.chars().count() + pad;
        let x = area.x + u16::try_from(at).ok()?;
        let below = inside(y + 1).map(|(_, r)| r).unwrap_or_default();
        let dim = buf[(x, y)].style().fg == theme.dim.fg;
        Some((format!("{row}\n{below}"), dim))
    })
}
