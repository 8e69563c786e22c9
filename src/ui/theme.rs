//! Named styles and glyphs. No pane uses a raw colour or a drawing
//! character of its own: they ask the theme, so a 16-colour terminal, a
//! NO_COLOR terminal and an ASCII-only terminal all get a readable screen.

use std::borrow::Cow;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;

/// The styles of the dashboard, by meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    /// No braille, block or box-drawing glyphs: charts use ASCII markers,
    /// bars '#' and '=', borders '-' '|' '+'.
    pub ascii: bool,
    /// No colours (`--no-color`, NO_COLOR): the chart's series are told
    /// apart by their markers, as in ASCII, not by colour.
    pub colorless: bool,
    /// Ordinary text.
    pub text: Style,
    /// Secondary text: units, empty bar cells, explanations.
    pub dim: Style,
    /// Table headers.
    pub header: Style,
    pub title: Style,
    /// The title of the pane that has the keyboard focus.
    pub title_focused: Style,
    pub border: Style,
    pub border_focused: Style,
    /// The selected GPU row and the selected block.
    pub selected: Style,
    /// A memory bar below the warning threshold.
    pub bar_ok: Style,
    /// A memory bar at or above [`WARNING_FRACTION`].
    pub bar_warning: Style,
    /// A memory bar at or above [`CRITICAL_FRACTION`].
    pub bar_critical: Style,
    /// The unused part of a bar.
    pub bar_empty: Style,
    /// Memory handed out to tensors (`memory_allocated()`).
    pub allocated: Style,
    /// Reserved but free: cached blocks (and the reserved series).
    pub cached_free: Style,
    /// Driver-used memory outside the allocator (and the driver-used series).
    pub context: Style,
    /// Memory nobody uses.
    pub free: Style,
    /// Memory the driver keeps for itself, in no process (NVML's
    /// `total − used − free`).
    pub driver_held: Style,
    /// Blocks freed by the client but waiting for stream events.
    pub pending_free: Style,
    pub histogram: Style,
    /// The empty_cache marker on the timeline.
    pub marker_release: Style,
    /// The OOM marker on the timeline.
    pub marker_oom: Style,
    /// The viewer timeline's `snapshot`/`annotate` marks.
    pub marker_note: Style,
    /// Things to look at: a child with its own CUDA context, a fallback banner.
    pub warning: Style,
    /// Things that are wrong: a lost GPU, the last error.
    pub critical: Style,
    /// Keys in hints and in the help.
    pub key: Style,
}

/// Memory bars turn to the warning style at 80 % used.
pub const WARNING_FRACTION: f64 = 0.80;
/// Memory bars turn to the critical style at 95 % used.
pub const CRITICAL_FRACTION: f64 = 0.95;

/// The characters a theme draws with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glyphs {
    pub bar_fill: &'static str,
    pub bar_empty: &'static str,
    pub allocated: &'static str,
    pub cached_free: &'static str,
    pub context: &'static str,
    pub free: &'static str,
    pub driver_held: &'static str,
    pub pending_free: &'static str,
    pub histogram: &'static str,
    /// The cursor after the process filter while it is edited.
    pub cursor: &'static str,
    /// Marks the selected GPU row.
    pub pointer: &'static str,
    /// Marks a process tagged for `K` (Space), before its pid.
    pub tag: &'static str,
    /// Tree branch in front of a child process or a MIG instance: the
    /// last of its parent's.
    pub branch: &'static str,
    /// Tree branch in front of a child with a sibling below it.
    pub branch_more: &'static str,
    /// Separator between status items.
    pub separator: &'static str,
    /// Legend sample of a line series.
    pub line: &'static str,
    /// In front of a histogram bucket's upper bound ("≤2MiB").
    pub at_most: &'static str,
    /// In front of the open-ended last bucket's bound ("≥1GiB").
    pub at_least: &'static str,
    /// After the process list's sort column: largest (last) first.
    pub sort_descending: &'static str,
    /// After it: smallest (first) first.
    pub sort_ascending: &'static str,
    pub series_allocated: Marker,
    pub series_reserved: Marker,
    pub series_driver: Marker,
    pub release_mark: Marker,
    pub oom_mark: Marker,
    /// The viewer timeline's `snapshot`/`annotate` marks.
    pub note_mark: Marker,
    /// The viewer timeline's cursor column: a glyph no border or other
    /// mark uses, so beside a pane's border it is still one mark (a "│"
    /// cursor there read as "││").
    pub timeline_cursor: char,
}

const UNICODE_GLYPHS: Glyphs = Glyphs {
    bar_fill: "█",
    bar_empty: "░",
    allocated: "█",
    cached_free: "▓",
    context: "▒",
    free: "░",
    driver_held: "╱",
    pending_free: "▚",
    histogram: "█",
    cursor: "▏",
    pointer: "▶",
    tag: "●",
    branch: "└ ",
    branch_more: "├ ",
    separator: " │ ",
    line: "─",
    at_most: "≤",
    at_least: "≥",
    sort_descending: "▼",
    sort_ascending: "▲",
    series_allocated: Marker::Braille,
    series_reserved: Marker::Braille,
    series_driver: Marker::Braille,
    release_mark: Marker::Custom('┊'),
    oom_mark: Marker::Custom('┃'),
    note_mark: Marker::Custom('╎'),
    timeline_cursor: '▌',
};

const ASCII_GLYPHS: Glyphs = Glyphs {
    bar_fill: "#",
    bar_empty: ".",
    allocated: "#",
    cached_free: "=",
    context: "+",
    free: ".",
    driver_held: "/",
    pending_free: "~",
    histogram: "#",
    cursor: "_",
    pointer: ">",
    tag: "*",
    branch: "`-",
    branch_more: "|-",
    separator: " | ",
    line: "-",
    at_most: "<=",
    at_least: ">=",
    sort_descending: "v",
    sort_ascending: "^",
    series_allocated: Marker::Custom('*'),
    series_reserved: Marker::Custom('+'),
    series_driver: Marker::Custom('.'),
    release_mark: Marker::Custom('|'),
    oom_mark: Marker::Custom('!'),
    note_mark: Marker::Custom(':'),
    timeline_cursor: '#',
};

impl Default for Theme {
    fn default() -> Self {
        Theme::colored()
    }
}

impl Theme {
    /// Colours from the 16 basic ANSI colours only, so that 16-colour
    /// terminals and any palette the user picked show them.
    pub fn colored() -> Self {
        let fg = |c: Color| Style::new().fg(c);
        let bold = Modifier::BOLD;
        Theme {
            ascii: false,
            colorless: false,
            text: Style::new(),
            dim: fg(Color::DarkGray),
            header: Style::new().add_modifier(bold),
            title: Style::new().add_modifier(bold),
            title_focused: Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(bold),
            border: fg(Color::DarkGray),
            border_focused: fg(Color::Cyan),
            selected: Style::new().add_modifier(Modifier::REVERSED | bold),
            bar_ok: fg(Color::Cyan),
            bar_warning: fg(Color::Yellow),
            bar_critical: fg(Color::Red).add_modifier(bold),
            bar_empty: fg(Color::DarkGray),
            allocated: fg(Color::Green),
            cached_free: fg(Color::Yellow),
            context: fg(Color::Magenta),
            free: fg(Color::DarkGray),
            driver_held: fg(Color::Blue),
            pending_free: fg(Color::Cyan),
            histogram: fg(Color::Blue),
            marker_release: fg(Color::Cyan),
            marker_oom: fg(Color::Red).add_modifier(bold),
            marker_note: fg(Color::Magenta),
            warning: fg(Color::Yellow).add_modifier(bold),
            critical: fg(Color::Red).add_modifier(bold),
            key: fg(Color::Cyan).add_modifier(bold),
        }
    }

    /// For NO_COLOR and `--no-color`: modifiers only. Meaning is carried by
    /// glyphs (the bars and strips use a different character per part) and
    /// by bold/underline/reverse.
    pub fn monochrome() -> Self {
        let m = |m: Modifier| Style::new().add_modifier(m);
        let plain = Style::new();
        Theme {
            ascii: false,
            colorless: true,
            text: plain,
            dim: m(Modifier::DIM),
            header: m(Modifier::BOLD | Modifier::UNDERLINED),
            title: m(Modifier::BOLD),
            title_focused: m(Modifier::BOLD | Modifier::REVERSED),
            border: m(Modifier::DIM),
            border_focused: m(Modifier::BOLD),
            selected: m(Modifier::REVERSED | Modifier::BOLD),
            bar_ok: plain,
            bar_warning: m(Modifier::BOLD),
            // Not REVERSED: a reversed full block would look empty.
            bar_critical: m(Modifier::BOLD | Modifier::UNDERLINED),
            bar_empty: m(Modifier::DIM),
            allocated: m(Modifier::BOLD),
            cached_free: plain,
            context: plain,
            free: m(Modifier::DIM),
            // The glyph tells it from free.
            driver_held: m(Modifier::DIM),
            pending_free: m(Modifier::ITALIC),
            histogram: plain,
            marker_release: m(Modifier::BOLD),
            marker_oom: m(Modifier::BOLD),
            // The glyph tells it from the others.
            marker_note: plain,
            warning: m(Modifier::BOLD),
            critical: m(Modifier::BOLD | Modifier::REVERSED),
            key: m(Modifier::BOLD),
        }
    }

    /// The same styles without braille, block or box-drawing glyphs.
    pub fn with_ascii(mut self, ascii: bool) -> Self {
        self.ascii = ascii;
        self
    }

    pub fn glyphs(&self) -> Glyphs {
        if self.ascii {
            ASCII_GLYPHS
        } else if self.colorless {
            // One braille line per series looks the same in every series
            // without colour: each keeps the ASCII marker of its own.
            Glyphs {
                series_allocated: ASCII_GLYPHS.series_allocated,
                series_reserved: ASCII_GLYPHS.series_reserved,
                series_driver: ASCII_GLYPHS.series_driver,
                ..UNICODE_GLYPHS
            }
        } else {
            UNICODE_GLYPHS
        }
    }

    /// The legend's sample of a chart series drawn with `marker`: its own
    /// character when it has one, else a line.
    pub fn series_glyph(&self, marker: Marker) -> String {
        match marker {
            Marker::Custom(c) => c.to_string(),
            _ => self.glyphs().line.to_string(),
        }
    }

    /// The memory-bar style for a used fraction (0.0 … 1.0).
    pub fn bar_for(&self, used_fraction: f64) -> Style {
        if used_fraction >= CRITICAL_FRACTION {
            self.bar_critical
        } else if used_fraction >= WARNING_FRACTION {
            self.bar_warning
        } else {
            self.bar_ok
        }
    }

    /// A key's name (or a text naming keys: "↓ j", "↑/↓", a key's
    /// notice) as the screen shows it: in ASCII mode the arrow keys by their names ("Up",
    /// "Down", "Left", "Right"), where [`Theme::finish`] would leave "^",
    /// "v", "<" and ">", keys that do something else or nothing. Applied
    /// to the text before it is measured and laid out; unchanged
    /// otherwise.
    pub fn key<'a>(&self, name: &'a str) -> Cow<'a, str> {
        if !self.ascii || !name.chars().any(|c| arrow_key_word(c).is_some()) {
            return Cow::Borrowed(name);
        }
        let mut out = String::with_capacity(name.len() + 8);
        let mut after_arrow = false;
        for c in name.chars() {
            match arrow_key_word(c) {
                Some(word) => {
                    // "↑↓" names two keys: "Up/Down", not "UpDown".
                    if after_arrow {
                        out.push('/');
                    }
                    out.push_str(word);
                    after_arrow = true;
                }
                None => {
                    out.push(c);
                    after_arrow = false;
                }
            }
        }
        Cow::Owned(out)
    }

    /// In ASCII mode, replaces every non-ASCII character drawn in `area`
    /// with a one-cell ASCII stand-in: what ratatui's own widgets drew
    /// with box-drawing, block or braille characters (chart axes,
    /// borders) and the punctuation of the text ("…", "·", "→", "×",
    /// "−"), so `--ascii` leaves only ASCII on the screen. One cell for
    /// one cell: the layout measured in the Unicode text stays right. A
    /// no-op otherwise.
    pub fn finish(&self, area: Rect, buf: &mut Buffer) {
        if !self.ascii {
            return;
        }
        let area = area.intersection(buf.area);
        for y in area.top()..area.bottom() {
            for x in area.left()..area.right() {
                if let Some(cell) = buf.cell_mut((x, y))
                    && let Some(plain) = ascii_for(cell.symbol())
                {
                    cell.set_symbol(plain);
                }
            }
        }
    }
}

/// `text` with every character [`Theme::finish`] replaces on screen
/// replaced alike (one cell for one cell, so a report laid out in cells
/// keeps its columns): `--ascii` for the text a command prints.
pub fn ascii_text(text: &str) -> String {
    let mut buf = [0u8; 4];
    text.chars()
        .map(|c| {
            ascii_for(c.encode_utf8(&mut buf)).map_or(c, |plain| plain.chars().next().unwrap_or(c))
        })
        .collect()
}

/// The name of the arrow key `c` stands for in a key label, `None` for
/// other characters.
fn arrow_key_word(c: char) -> Option<&'static str> {
    Some(match c {
        '↑' => "Up",
        '↓' => "Down",
        '←' => "Left",
        '→' => "Right",
        _ => return None,
    })
}

/// The one-cell ASCII stand-in for a drawing or punctuation character,
/// `None` for ASCII and for characters without one.
fn ascii_for(symbol: &str) -> Option<&'static str> {
    let mut chars = symbol.chars();
    let c = chars.next()?;
    if chars.next().is_some() {
        return None;
    }
    Some(match c {
        '─' | '━' | '═' | '╌' | '╍' | '┄' | '┈' => "-",
        '│' | '┃' | '║' | '╎' | '╏' | '┆' | '┊' => "|",
        '\u{2500}'..='\u{257F}' => "+",
        '\u{2580}'..='\u{259F}' => "#",
        '\u{2800}'..='\u{28FF}' => "*",
        '▶' | '→' | '►' => ">",
        '◀' | '←' => "<",
        '↑' | '▲' => "^",
        '↓' | '▼' => "v",
        '≤' => "<",
        '≥' => ">",
        '≠' => "#",
        '×' => "x",
        // Minus sign, en and em dashes.
        '−' | '–' | '—' => "-",
        '·' | '•' => "-",
        // An ellipsis marks a cut; "~" keeps it one cell.
        '…' => "~",
        '°' => " ",
        'Δ' => "D",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_style_turns_warning_at_80_and_critical_at_95_percent() {
        let t = Theme::colored();
        assert_eq!(t.bar_for(0.79), t.bar_ok);
        assert_eq!(t.bar_for(0.80), t.bar_warning);
        assert_eq!(t.bar_for(0.949), t.bar_warning);
        assert_eq!(t.bar_for(0.95), t.bar_critical);
        assert_eq!(t.bar_for(1.0), t.bar_critical);
    }

    #[test]
    fn ascii_glyphs_are_ascii() {
        let g = Theme::colored().with_ascii(true).glyphs();
        for s in [
            g.bar_fill,
            g.bar_empty,
            g.allocated,
            g.cached_free,
            g.context,
            g.free,
            g.driver_held,
            g.pending_free,
            g.histogram,
            g.cursor,
            g.pointer,
            g.tag,
            g.branch,
            g.branch_more,
            g.separator,
            g.line,
            g.at_most,
            g.at_least,
            g.sort_descending,
            g.sort_ascending,
        ] {
            assert!(s.is_ascii(), "{s:?}");
        }
    }

    #[test]
    fn ascii_mode_names_arrow_keys_in_words_and_leaves_other_keys_alone() {
        let ascii = Theme::colored().with_ascii(true);
        assert_eq!(ascii.key("↓ j"), "Down j");
        assert_eq!(ascii.key("↑/↓"), "Up/Down");
        assert_eq!(ascii.key("↑↓ scrolls"), "Up/Down scrolls");
        assert_eq!(ascii.key("←"), "Left");
        assert_eq!(ascii.key("→ l"), "Right l");
        assert_eq!(ascii.key("PgDn"), "PgDn");
        assert_eq!(Theme::colored().key("↓ j"), "↓ j", "unchanged in Unicode");
    }

    #[test]
    fn finish_replaces_drawing_characters_only_in_ascii_mode() {
        let area = Rect::new(0, 0, 4, 1);
        let mut buf = Buffer::with_lines(["┌─⣿a"]);
        Theme::colored().finish(area, &mut buf);
        assert_eq!(buf, Buffer::with_lines(["┌─⣿a"]));
        Theme::colored().with_ascii(true).finish(area, &mut buf);
        assert_eq!(buf, Buffer::with_lines(["+-*a"]));
    }

    #[test]
    fn finish_turns_text_punctuation_into_one_ascii_cell_each() {
        let line = "a…b·c→d×e−f≤g≥h°C";
        let width = u16::try_from(line.chars().count()).expect("short");
        let area = Rect::new(0, 0, width, 1);
        let mut buf = Buffer::with_lines([line]);
        Theme::colored().with_ascii(true).finish(area, &mut buf);
        assert_eq!(buf, Buffer::with_lines(["a~b-c>dxe-f<g>h C"]));
    }
}
