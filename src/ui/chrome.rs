//! Pieces every pane uses: the titled top border, line placement that
//! cannot write outside its area, proportional bars, and flowing short
//! items ("label value") over as many lines as the width needs.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Widget};

use super::theme::Theme;
use crate::app::state::Pane;

/// The frame of a pane: a top border carrying the title (and a left border
/// when the pane sits right of another), so a pane costs one row of chrome.
/// The focused pane's title is drawn in the focus style.
pub(crate) fn pane_block<'a>(
    pane: Pane,
    detail: Vec<Span<'a>>,
    focused: bool,
    left_border: bool,
    theme: &Theme,
) -> Block<'a> {
    pane_block_within(pane, detail, focused, left_border, theme, usize::MAX)
}

/// [`pane_block`] over a pane `width` cells wide: its title cut by
/// [`fit_title`] to the cells the top border gives it, so that a part of
/// it is kept whole or left out, never cut inside a figure.
pub(crate) fn pane_block_within<'a>(
    pane: Pane,
    detail: Vec<Span<'a>>,
    focused: bool,
    left_border: bool,
    theme: &Theme,
    width: usize,
) -> Block<'a> {
    let (title_style, border_style) = if focused {
        (theme.title_focused, theme.border_focused)
    } else {
        (theme.title, theme.border)
    };
    let mut spans = vec![Span::styled(format!(" {} ", pane.title()), title_style)];
    if !detail.is_empty() {
        spans.push(Span::raw(" "));
        spans.extend(detail);
        spans.push(Span::raw(" "));
    }
    let borders = if left_border {
        Borders::TOP | Borders::LEFT
    } else {
        Borders::TOP
    };
    // The left border's corner takes the title's first cell.
    let room = width.saturating_sub(usize::from(left_border));
    Block::new()
        .borders(borders)
        .border_style(border_style)
        .title(Line::from(fit_title(spans, room)))
}

/// A title's `spans` in at most `room` cells: whole when they fit, else
/// cut where a part ends (at the end of a span or before a " · " inside
/// one) and ended by "…", the parts after it left out whole. Cut at the
/// border's edge, "21 sites · 23.2 GiB allocated" read "21 sites · 23.2"
/// (the unit lost: another size) or "638 b…". A title whose first part
/// alone is too wide is left to the border's cut ([`mark_cut_title`]).
pub(crate) fn fit_title(spans: Vec<Span<'_>>, room: usize) -> Vec<Span<'_>> {
    use unicode_width::UnicodeWidthStr as _;
    let whole: usize = spans.iter().map(Span::width).sum();
    if whole <= room {
        return spans;
    }
    // The last cut that fits with its ending: (span, bytes of it kept,
    // whether the kept text ends in a space).
    let mut cut = None;
    let mut before = 0usize;
    for (i, span) in spans.iter().enumerate() {
        let content = span.content.as_ref();
        let ends = content
            .match_indices(" · ")
            .map(|(at, _)| at)
            .chain(std::iter::once(content.len()));
        for at in ends.filter(|&at| at > 0) {
            let kept = &content[..at];
            let spaced = kept.ends_with(' ');
            // A lone separator span ("GPU 0 · ") is no part's end.
            if kept.trim_end().ends_with('·') {
                continue;
            }
            let ending = if spaced { 2 } else { 3 };
            if before + kept.width() + ending <= room {
                cut = Some((i, at, spaced));
            }
        }
        before += span.width();
    }
    let Some((i, at, spaced)) = cut else {
        return spans;
    };
    // The ending in the style of what it stands for: the rest of the cut
    // span, or the span after it.
    let style = match spans.get(i) {
        Some(span) if at < span.content.len() => span.style,
        _ => spans.get(i + 1).map_or(Style::default(), |s| s.style),
    };
    let mut out: Vec<Span<'_>> = spans.into_iter().take(i + 1).collect();
    if let Some(last) = out.last_mut() {
        let kept = last.content[..at].to_string();
        last.content = kept.into();
    }
    out.push(Span::styled(if spaced { "… " } else { " … " }, style));
    out
}

/// The cells [`pane_block`]'s title of `pane` and `detail` takes: a
/// title wider than its row is cut, so a pane can leave words out first.
pub(crate) fn title_width(pane: Pane, detail: &[Span<'_>]) -> usize {
    let own = pane.title().chars().count().saturating_add(2);
    if detail.is_empty() {
        own
    } else {
        detail.iter().fold(own.saturating_add(2), |sum, s| {
            sum.saturating_add(s.width())
        })
    }
}

/// Renders a pane's `block` over `area` and returns the area inside it;
/// `None` when nothing fits inside, the pane then finished in `theme`'s
/// style, so the caller just returns.
pub(crate) fn inside(
    block: Block<'_>,
    area: Rect,
    buf: &mut Buffer,
    theme: &Theme,
) -> Option<Rect> {
    let inner = block.inner(area);
    block.render(area, buf);
    mark_cut_title(area, buf);
    if inner.height == 0 || inner.width == 0 {
        theme.finish(area, buf);
        return None;
    }
    Some(inner)
}

/// Ends a title the top border of `area` cut short with "…": ratatui cuts
/// a title too long for its border without a mark. The border's last cell
/// holds a border line or the title's closing space unless the title ran
/// past it.
pub(crate) fn mark_cut_title(area: Rect, buf: &mut Buffer) {
    if area.width < 2 || area.height == 0 {
        return;
    }
    let last = (area.right() - 1, area.y);
    if let Some(cell) = buf.cell_mut(last)
        && !matches!(cell.symbol(), "─" | " ")
    {
        cell.set_symbol("…");
    }
}

/// Draws an overlay: clears a popup of `(width, height)` cells centred in
/// `area` (neither larger than it), frames it in the focus style with `title` on
/// the left and `hint` on the right of the top border, and says at the
/// bottom when `content_rows` rows do not fit inside. Returns the popup
/// and the area inside its frame.
pub(crate) fn popup(
    buf: &mut Buffer,
    area: Rect,
    (width, height): (u16, u16),
    title: &str,
    hint: &str,
    content_rows: usize,
    theme: &Theme,
) -> (Rect, Rect) {
    let popup = Rect::new(
        area.x + (area.width - width) / 2,
        area.y + (area.height - height) / 2,
        width,
        height,
    );
    Clear.render(popup, buf);
    let mut block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme.border_focused)
        .title(Line::styled(title, theme.title_focused))
        .title(Line::styled(hint, theme.dim).right_aligned());
    if content_rows + 2 > usize::from(height) {
        block = block.title_bottom(Line::styled(
            " … a taller terminal shows the rest ",
            theme.dim,
        ));
    }
    let inner = block.inner(popup);
    block.render(popup, buf);
    (popup, inner)
}

/// The bottom note of a popup whose `total` rows scroll, `rows` of them
/// shown from `first`: which rows show and the keys that scroll it ("rows
/// 3–12 of 40 · ↑ ↓ scroll"; `back` and `on` are the up and down keys'
/// names), only the rows where the popup is too narrow for the keys.
/// Nothing where every row shows.
pub(crate) fn scroll_note(
    buf: &mut Buffer,
    popup: Rect,
    (first, rows, total): (usize, usize, usize),
    (back, on): (&str, &str),
    theme: &Theme,
) {
    let most = total.saturating_sub(rows);
    if most == 0 {
        return;
    }
    let last = first.saturating_add(rows).min(total);
    let how = if first == 0 {
        format!("{on} scrolls")
    } else if first >= most {
        format!("{back} scrolls back")
    } else {
        format!("{back} {on} scroll")
    };
    let how = theme.key(&how);
    let shown = first.saturating_add(1);
    let note = format!(" rows {shown}–{last} of {total} · {how} ");
    let room = usize::from(popup.width.saturating_sub(2));
    let note = if note.chars().count() <= room {
        note
    } else {
        format!(" {shown}–{last}/{total} ")
    };
    bottom_note(buf, popup, &note, theme);
}

/// Writes `note` on the bottom border of `popup`, after its corner (cut to
/// fit): where a scrolled popup says which rows it shows.
pub(crate) fn bottom_note(buf: &mut Buffer, popup: Rect, note: &str, theme: &Theme) {
    if popup.width < 4 || popup.height < 2 {
        return;
    }
    let y = popup.y + popup.height - 1;
    let room = usize::from(popup.width - 2);
    buf.set_stringn(popup.x + 1, y, note, room, theme.dim);
}

/// Renders `line` on row `row` of `area`, ending it with "…" when it is
/// cut; rows outside the area are skipped, so callers can write past the
/// bottom without checks.
pub(crate) fn line_at(buf: &mut Buffer, area: Rect, row: u16, line: &Line<'_>) {
    if row >= area.height {
        return;
    }
    let rect = Rect::new(area.x, area.y.saturating_add(row), area.width, 1);
    if line.width() > usize::from(area.width) {
        fit(line, area.width).render(rect, buf);
    } else {
        line.render(rect, buf);
    }
}

/// `line` cut to `width` cells, the last one an "…" in the style of the
/// span it cuts.
pub(crate) fn fit<'a>(line: &Line<'a>, width: u16) -> Line<'a> {
    let width = usize::from(width);
    if line.width() <= width {
        return line.clone();
    }
    let Some(room) = width.checked_sub(1) else {
        return Line::default();
    };
    let mut used = 0usize;
    let mut spans: Vec<Span<'a>> = Vec::new();
    let mut last_style = line.style;
    for span in &line.spans {
        last_style = span.style;
        let w = span.width();
        if used + w <= room {
            spans.push(span.clone());
            used += w;
            continue;
        }
        let mut cut = String::new();
        for c in span.content.chars() {
            let cw = Span::raw(c.to_string()).width();
            if used + cw > room {
                break;
            }
            cut.push(c);
            used += cw;
        }
        spans.push(Span::styled(cut, span.style));
        break;
    }
    spans.push(Span::styled("…", last_style));
    Line::from(spans).style(line.style)
}

/// Renders one line per row from the top of `area` (extra lines dropped).
pub(crate) fn lines_at(buf: &mut Buffer, area: Rect, lines: &[Line<'_>]) {
    for (i, line) in lines.iter().enumerate() {
        let Ok(row) = u16::try_from(i) else { break };
        line_at(buf, area, row, line);
    }
}

/// Like [`lines_at`], but where `lines` has more lines than `area` has
/// rows the last row shown ends in "…": a wrapped sentence cut at a row's
/// end read as whole ("… (25% of reserved): try").
pub(crate) fn lines_at_marking_cut(buf: &mut Buffer, area: Rect, lines: &[Line<'_>]) {
    let rows = usize::from(area.height);
    if lines.len() <= rows {
        lines_at(buf, area, lines);
        return;
    }
    let Some(last) = rows.checked_sub(1) else {
        return;
    };
    lines_at(buf, area, &lines[..last]);
    if let (Some(line), Ok(row)) = (lines.get(last), u16::try_from(last)) {
        line_at(buf, area, row, &ending_in_ellipsis(line, area.width));
    }
}

/// `line` with an "…" after it, cut to `width` cells (the "…" kept) where
/// the two do not fit.
pub(crate) fn ending_in_ellipsis<'a>(line: &Line<'a>, width: u16) -> Line<'a> {
    let style = line.spans.last().map_or(line.style, |s| s.style);
    let mut marked = line.clone();
    marked.spans.push(Span::styled("…", style));
    // Wider than `width`: `fit` cuts within `line` and ends in its own "…".
    fit(&marked, width)
}

/// Renders `text` word-wrapped to `area`'s width in `style` (the panes'
/// "n/a, because …" notes).
pub(crate) fn note_at(buf: &mut Buffer, area: Rect, text: &str, style: Style) {
    let lines: Vec<Line> = wrap(text, area.width)
        .into_iter()
        .map(|l| Line::styled(l, style))
        .collect();
    lines_at(buf, area, &lines);
}

/// Sets one cell, ignoring positions outside the buffer.
pub(crate) fn set_cell(buf: &mut Buffer, x: u16, y: u16, symbol: &str, style: Style) {
    if let Some(cell) = buf.cell_mut((x, y)) {
        cell.set_symbol(symbol).set_style(style);
    }
}

/// Splits `width` cells among parts of `sizes` bytes in proportion
/// (largest remainder, ties to the earlier part, so the cells sum to
/// `width` and the result is deterministic). Then every non-zero part left
/// without a cell takes one from the part with the most cells, when the
/// width allows it: a 500 MiB CUDA context on an 80 GiB GPU, or a 512 B
/// free block in a 20 MiB segment, must not vanish from the bar. All sizes
/// 0: no cells.
pub(crate) fn split_cells(sizes: &[u64], width: u16) -> Vec<u16> {
    let total: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
    if total == 0 {
        return vec![0; sizes.len()];
    }
    let w = u128::from(width);
    let mut cells = Vec::with_capacity(sizes.len());
    let mut remainders = Vec::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        // ≤ 2^64 × 2^16: no overflow in u128; the quotient is ≤ width.
        let exact = u128::from(s) * w;
        cells.push(u16::try_from(exact / total).unwrap_or(width));
        remainders.push((exact % total, i));
    }
    let given: u32 = cells.iter().map(|&c| u32::from(c)).sum();
    let mut left = u32::from(width).saturating_sub(given);
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in remainders {
        if left == 0 {
            break;
        }
        cells[i] += 1;
        left -= 1;
    }
    let non_zero = sizes.iter().filter(|&&s| s > 0).count();
    if non_zero <= usize::from(width) {
        for i in 0..sizes.len() {
            if sizes[i] > 0 && cells[i] == 0 {
                let richest = (0..cells.len())
                    .max_by(|&a, &b| cells[a].cmp(&cells[b]).then(b.cmp(&a)))
                    .unwrap_or(i);
                if cells[richest] > 1 {
                    cells[richest] -= 1;
                    cells[i] = 1;
                }
            }
        }
    }
    cells
}

/// Draws a horizontal bar of parts `(bytes, glyph, style)` on the first row
/// of `area`, sized by [`split_cells`]; `total` is the whole the parts are
/// fractions of (bytes): what they do not cover stays blank.
pub(crate) fn bar(buf: &mut Buffer, area: Rect, parts: &[(u64, &str, Style)], total: u64) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let mut sizes: Vec<u64> = parts.iter().map(|p| p.0).collect();
    let covered = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    sizes.push(total.saturating_sub(covered));
    let cells = split_cells(&sizes, area.width);
    let mut x = area.x;
    for (&(_, glyph, style), &n) in parts.iter().zip(&cells) {
        for _ in 0..n {
            set_cell(buf, x, area.y, glyph, style);
            x = x.saturating_add(1);
        }
    }
}

/// How a legend writes its byte values: a formatter, or none (names only).
pub(crate) type LegendValues = Option<fn(u64) -> String>;

/// How a timeline legend names its items, the longest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegendWords {
    /// "driver used", "cache released ×6".
    Full,
    /// Shorter names ("used", "alloc"), the counts kept.
    Short,
    /// The short names without the marks' counts.
    Bare,
}

/// One way of writing a legend's items: values, and the words.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LegendForm {
    pub values: LegendValues,
    pub words: LegendWords,
}

/// A timeline legend in at most `rows` lines of `width`: with values
/// ("1.04 GiB") on one line if it can, else with one-space gaps, else
/// names only; then names only over up to `rows` lines, then shorter
/// words, then without the marks' counts (the marks first), and last the
/// shortest form cut to `rows` lines ("…" at its end). The legend gives
/// way to the chart: a chart of a pane's rows says more than the names
/// of its lines, which their colours and the breakdown already tell.
pub(crate) fn fit_legend<'a>(
    items: impl Fn(LegendForm) -> Vec<Line<'a>>,
    width: u16,
    rows: u16,
) -> Vec<Line<'a>> {
    use LegendWords::{Bare, Full, Short};
    let rows = usize::from(rows);
    if rows == 0 {
        return Vec::new();
    }
    let form = |values, words| LegendForm { values, words };
    // A figure keeps the space before its unit, as everywhere on screen:
    // a packed "3.52GiB" beside the GPUs row's "3.52 GiB" read as another
    // style, and the values are on that row anyway.
    let one_line: [(LegendForm, usize); 2] = [
        (form(Some(super::format::bytes), Full), 2),
        (form(Some(super::format::bytes), Full), 1),
    ];
    for (f, gap) in one_line {
        let legend = flow(items(f), width, gap);
        if legend.len() <= 1 {
            return legend;
        }
    }
    let within = [(Full, 2), (Short, 2), (Short, 1), (Bare, 2), (Bare, 1)];
    for (words, gap) in within {
        let legend = flow(items(form(None, words)), width, gap);
        if legend.len() <= rows {
            return legend;
        }
    }
    // The items that fit, and a "…" where it fits too: the rest are left
    // out, not cut mid-word.
    let mut legend = flow(items(form(None, Bare)), width, 1);
    legend.truncate(rows);
    if let Some(last) = legend.last_mut()
        && last.width() + 2 <= usize::from(width)
    {
        last.spans.push(Span::raw(" …"));
    }
    legend
}

/// Packs short items onto lines of at most `width` cells, `gap` spaces
/// apart; an item wider than the line gets a line of its own (and is cut
/// when rendered).
pub(crate) fn flow<'a>(items: Vec<Line<'a>>, width: u16, gap: usize) -> Vec<Line<'a>> {
    let width = usize::from(width);
    let mut lines: Vec<Line<'a>> = Vec::new();
    let mut current: Vec<Span<'a>> = Vec::new();
    let mut used = 0usize;
    for item in items {
        let w = item.width();
        if !current.is_empty() && used + gap + w > width {
            lines.push(Line::from(std::mem::take(&mut current)));
            used = 0;
        }
        if !current.is_empty() {
            current.push(Span::raw(" ".repeat(gap)));
            used += gap;
        }
        used += w;
        current.extend(item.spans);
    }
    if !current.is_empty() {
        lines.push(Line::from(current));
    }
    lines
}

/// Breaks `text` into lines of at most `width` terminal cells at spaces,
/// never between a figure and its unit ("3.72 GiB"); a word longer than
/// the line gets a line of its own, which the pane then cuts. For
/// explanations whose height the layout must know before drawing.
pub(crate) fn wrap(text: &str, width: u16) -> Vec<String> {
    wrap_words(super::format::unit_words(text), width)
}

/// [`wrap`], with `keep` (a command to copy, "vramtop replay FILE"), where
/// `text` has it, as one word: the rows break before it, never inside it
/// (a row ending "…: vramtop" over "replay FILE" cannot be copied in one
/// go). Wider than a row, it is broken as [`wrap_breaking`] breaks a word,
/// so that all of it is shown.
pub(crate) fn wrap_keeping(text: &str, keep: Option<&str>, width: u16) -> Vec<String> {
    use unicode_width::UnicodeWidthStr as _;
    let Some((at, keep)) = keep
        .filter(|k| !k.is_empty() && k.width() <= usize::from(width.max(1)))
        .and_then(|k| text.rfind(k).map(|at| (at, k)))
    else {
        return if keep.is_some_and(|k| text.contains(k)) {
            wrap_breaking(text, width)
        } else {
            wrap(text, width)
        };
    };
    let (before, after) = (&text[..at], &text[at + keep.len()..]);
    let mut words = super::format::unit_words(before);
    // Punctuation right after the command (";" of a note) stays on its row.
    let (glued, after) = match after.find(char::is_whitespace) {
        Some(end) => after.split_at(end),
        None => (after, ""),
    };
    let whole = &text[at..at + keep.len() + glued.len()];
    if whole.width() <= usize::from(width.max(1)) {
        words.push(whole);
    } else {
        words.push(keep);
        if !glued.is_empty() {
            words.push(glued);
        }
    }
    words.extend(super::format::unit_words(after));
    wrap_words(words, width)
}

/// `words` on lines of at most `width` cells, one space apart.
fn wrap_words<'t>(words: impl IntoIterator<Item = &'t str>, width: u16) -> Vec<String> {
    use unicode_width::UnicodeWidthStr as _;
    let width = usize::from(width.max(1));
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in words {
        let needed = current.width() + usize::from(!current.is_empty()) + word.width();
        if !current.is_empty() && needed > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// The most rows a status line's messages take on a screen `height` rows
/// tall: a quarter of it from 40 rows (ten at 120×40), so a long message
/// is read whole while the panes keep the rest of the screen; below, what
/// the screen has over [`MESSAGE_ROWS_FREE`] rows, halved, at least one:
/// two at 80×24, where a quarter (six) left the panes a row or two each.
/// A message longer still ends in "…".
pub(crate) fn message_rows_cap(height: u16) -> usize {
    let quarter = height / 4;
    let short_screen = height.saturating_sub(MESSAGE_ROWS_FREE) / 2;
    usize::from(quarter.min(short_screen)).max(1)
}

/// The rows a screen keeps for its panes before the status line's
/// messages take any beyond their first (see [`message_rows_cap`]).
const MESSAGE_ROWS_FREE: u16 = 20;

/// Lays out a status line's messages, in order, on at most `max_rows` rows
/// of `width` cells: a message joins the row before it (after `sep`) where
/// it fits there whole, else it starts a row; one wider than a row wraps at
/// spaces over as many rows as it needs (a word wider than a row, a path,
/// is broken at the row's end). Where the rows run out, the last one ends
/// in "…". Cut at the edge instead, a message longer than the terminal lost
/// its end, and nothing showed it.
pub(crate) fn message_lines(
    items: &[Span<'static>],
    sep: &Span<'static>,
    width: u16,
    max_rows: usize,
) -> Vec<Line<'static>> {
    let cells = usize::from(width);
    let mut rows: Vec<Vec<Span<'static>>> = Vec::new();
    let mut used = 0usize;
    for item in items.iter().filter(|i| i.width() > 0) {
        let w = item.width();
        match rows.last_mut() {
            Some(row) if !row.is_empty() && used + sep.width() + w <= cells => {
                row.push(sep.clone());
                row.push(item.clone());
                used += sep.width() + w;
            }
            _ => {
                for piece in wrap_breaking(&item.content, width) {
                    used = Span::raw(piece.as_str()).width();
                    rows.push(vec![Span::styled(piece, item.style)]);
                }
            }
        }
    }
    let more = rows.len() > max_rows;
    rows.truncate(max_rows);
    let mut lines: Vec<Line<'static>> = rows.into_iter().map(Line::from).collect();
    if more && let Some(last) = lines.last_mut() {
        // An "…" says the rows ran out: after the last row's text and a
        // space ([`MORE_MARK_CELLS`]; so it is not read as the end of a
        // word or a file name cut short), or in its last cell where the
        // row has no room for both.
        let style = last.spans.last().map_or_else(Style::default, |s| s.style);
        let mark = if last.width() + usize::from(MORE_MARK_CELLS) <= cells {
            " …"
        } else {
            "…"
        };
        last.spans.push(Span::styled(mark, style));
        *last = fit(last, width);
    }
    lines
}

/// The cells the "rows ran out" mark of [`message_lines`] takes after a
/// row's text: a space and "…". A one-row wording made that much narrower
/// than the row keeps its end whole beside it.
pub(crate) const MORE_MARK_CELLS: u16 = 2;

/// [`wrap`], with a word wider than the line broken at the line's end
/// rather than left to be cut (what follows it goes on after its last
/// piece): every cell of `text` is on some line. A path wider than the
/// line is broken after its folders' slashes, its first folders on the
/// line before where they fit, so that its file name stays whole where it
/// fits a line ("…/snapshots/" then "vm-17-demand.pickle"): broken at the
/// line's end, a snapshot's name read "…20261206T2" over "15639Z-…".
/// Allocator settings are broken after their commas likewise, each
/// setting whole where it fits a line.
pub(crate) fn wrap_breaking(text: &str, width: u16) -> Vec<String> {
    use unicode_width::UnicodeWidthStr as _;
    let cells = usize::from(width.max(1));
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in super::format::unit_words(text) {
        let needed = current.width() + usize::from(!current.is_empty()) + word.width();
        if needed <= cells {
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
            continue;
        }
        let mut rest = word;
        if !current.is_empty() {
            // A longer word's first folders may join this line.
            let room = cells.saturating_sub(current.width() + 1);
            if word.width() > cells
                && let Some(at) = separator_cut(rest, room)
            {
                current.push(' ');
                current.push_str(&rest[..at]);
                rest = &rest[at..];
            }
            lines.push(std::mem::take(&mut current));
        }
        // A word that fits a line of its own starts one; a longer one
        // fills lines, its last piece left for what follows.
        while rest.width() > cells {
            let at = separator_cut(rest, cells).unwrap_or_else(|| width_cut(rest, cells));
            lines.push(rest[..at].to_string());
            rest = &rest[at..];
        }
        current.push_str(rest);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// The byte offset just past the last `/` (a path's folder) or `,` (an
/// allocator setting) of `word` within its first `cells` cells, where
/// something of `word` follows it (`None`: no such separator).
fn separator_cut(word: &str, cells: usize) -> Option<usize> {
    use unicode_width::UnicodeWidthChar as _;
    let mut used = 0usize;
    let mut cut = None;
    for (at, c) in word.char_indices() {
        used += c.width().unwrap_or(0);
        if used > cells {
            break;
        }
        let end = at + c.len_utf8();
        if matches!(c, '/' | ',') && end < word.len() {
            cut = Some(end);
        }
    }
    cut
}

/// The byte offset just past the characters of `word` within `cells`
/// cells, at least one character (a wide one in a one-cell line).
fn width_cut(word: &str, cells: usize) -> usize {
    use unicode_width::UnicodeWidthChar as _;
    let mut used = 0usize;
    for (at, c) in word.char_indices() {
        used += c.width().unwrap_or(0);
        if used > cells && at > 0 {
            return at;
        }
    }
    word.len()
}

/// `text` padded with spaces on the left to `width` characters (cut with
/// "…" when longer).
pub(crate) fn right(text: &str, width: usize) -> String {
    let t = super::format::truncate(text, width);
    format!("{t:>width$}")
}

/// `text` padded with spaces on the right to `width` characters (cut with
/// "…" when longer).
pub(crate) fn left(text: &str, width: usize) -> String {
    let t = super::format::truncate(text, width);
    format!("{t:<width$}")
}

/// The first item a list `rows` high shows so that item `selected` is
/// on screen: the top until the selection passes the last row, then the
/// list scrolls with the selection on its last row.
pub(crate) fn first_shown(selected: usize, rows: usize) -> usize {
    (selected + 1).saturating_sub(rows)
}

/// Key hints ("q quit  ? help  …"), as many of `all` as fit `width`
/// cells, but at least the first two (quit and help); the keys named as
/// the theme names them ([`Theme::key`]).
pub(crate) fn key_hints(
    all: &[(&'static str, &'static str)],
    width: usize,
    theme: &Theme,
) -> Line<'static> {
    let line = |n: usize| {
        let mut spans = Vec::new();
        for &(key, hint) in all.iter().take(n) {
            if !spans.is_empty() {
                spans.push(Span::raw("  "));
            }
            // Named before measuring: "Down" in ASCII mode is wider than "↓".
            spans.push(Span::styled(theme.key(key), theme.key));
            spans.push(Span::styled(format!(" {hint}"), theme.text));
        }
        Line::from(spans)
    };
    let mut n = all.len();
    while n > 2 && line(n).width() > width {
        n -= 1;
    }
    line(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn messages_share_a_row_where_they_fit_and_a_long_one_wraps_whole() {
        let sep = Span::raw(" · ");
        let items = [
            Span::raw("no GPU 9"),
            Span::raw("ok"),
            Span::raw("error: the driver stopped answering while the figures were read"),
        ];
        let lines = message_lines(&items, &sep, 30, 10);
        assert_eq!(
            texts(&lines),
            [
                "no GPU 9 · ok",
                "error: the driver stopped",
                "answering while the figures",
                "were read",
            ]
        );
        // A word wider than the row (a path) is broken after its
        // folders' slashes, its first on the row before: nothing of it is
        // lost, and its file name is whole. It read "/some/snapshot.pickl"
        // over "e failed".
        let path = Span::raw("open /a/very/long/path/to/some/snapshot.pickle failed");
        let lines = texts(&message_lines(&[path], &sep, 20, 10));
        assert_eq!(
            lines,
            [
                "open /a/very/long/",
                "path/to/some/",
                "snapshot.pickle",
                "failed"
            ]
        );
        // A word without a slash, or a name wider than the row, is broken
        // at the row's end.
        let word = Span::raw("see /x/an-extremely-long-file-name.pickle now");
        let lines = texts(&message_lines(&[word], &sep, 20, 10));
        assert_eq!(
            lines,
            ["see /x/", "an-extremely-long-fi", "le-name.pickle now"]
        );
        let lines = texts(&message_lines(&[Span::raw("abcdefghij")], &sep, 4, 10));
        assert_eq!(lines, ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn messages_past_the_rows_given_end_in_an_ellipsis_within_the_width() {
        let long = Span::raw("one two three four five six seven eight nine ten");
        let lines = message_lines(&[long], &Span::raw(" · "), 10, 2);
        assert_eq!(texts(&lines), ["one two", "three fou…"]);
        assert!(lines.iter().all(|l| l.width() <= 10));
        // Where the last row has room, the mark follows a space: after a
        // file name, "a.pickle…" read as a name cut short.
        let items = [Span::raw("a.pickle"), Span::raw("more")];
        let lines = message_lines(&items, &Span::raw(" · "), 10, 1);
        assert_eq!(texts(&lines), ["a.pickle …"]);
        assert_eq!(message_rows_cap(40), 10);
        assert_eq!(message_rows_cap(3), 1);
    }

    #[test]
    fn a_short_screen_gives_the_messages_two_rows_and_a_tall_one_a_quarter() {
        assert_eq!(message_rows_cap(24), 2, "80×24: the facts row and two");
        assert_eq!(message_rows_cap(20), 1);
        assert_eq!(message_rows_cap(30), 5);
        assert_eq!(message_rows_cap(40), 10, "a quarter, as before");
        assert_eq!(message_rows_cap(60), 15);
        assert_eq!(message_rows_cap(u16::MAX), usize::from(u16::MAX / 4));
        // Never fewer rows for a taller screen.
        assert!((1..200).all(|h| message_rows_cap(h) <= message_rows_cap(h + 1)));
    }

    #[test]
    fn split_cells_gives_every_non_zero_part_a_cell() {
        let gib = 1u64 << 30;
        let cells = split_cells(&[397 << 20, 163 << 20, 500 << 20, 79 * gib], 80);
        assert!(cells[..3].iter().all(|&c| c >= 1), "{cells:?}");
        assert_eq!(cells.iter().sum::<u16>(), 80);
        assert_eq!(
            split_cells(&[1, 1, 1], 2).iter().sum::<u16>(),
            2,
            "too narrow: proportional"
        );
        assert_eq!(split_cells(&[0, 0], 10), vec![0, 0]);
        assert_eq!(split_cells(&[3, 1], 4), vec![3, 1]);
        assert_eq!(
            split_cells(&[397 << 20, 163 << 20, 500 << 20, 79 * gib], 80),
            vec![1, 1, 1, 77],
            "the small parts get one cell each, taken from the largest"
        );
        assert_eq!(
            split_cells(&[u64::MAX, u64::MAX], u16::MAX)
                .iter()
                .map(|&c| u32::from(c))
                .sum::<u32>(),
            65535
        );
    }

    #[test]
    fn flow_wraps_items_that_do_not_fit() {
        let items = vec![Line::from("aaaa"), Line::from("bbbb"), Line::from("cc")];
        let lines = flow(items, 10, 2);
        let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        assert_eq!(text, vec!["aaaa  bbbb", "cc"]);
        assert!(flow(Vec::new(), 10, 2).is_empty());
    }

    /// Legend items as a timeline writes them: "long"/"s" names, counts
    /// but in the fewest words, values when asked.
    fn legend(form: LegendForm) -> Vec<Line<'static>> {
        let name = |long: &str, short: &str| match form.words {
            LegendWords::Full => long.to_string(),
            _ => short.to_string(),
        };
        let value = form
            .values
            .map_or(String::new(), |f| format!(" {}", f(1 << 30)));
        let count = match form.words {
            LegendWords::Bare => String::new(),
            _ => " ×6".to_string(),
        };
        vec![
            Line::from(format!("─ {}{value}", name("driver used", "used"))),
            Line::from(format!("─ {}{value}", name("allocated", "alloc"))),
            Line::from(format!("┊ {}{count}", name("cache released", "released"))),
        ]
    }

    fn legend_text(width: u16, rows: u16) -> Vec<String> {
        fit_legend(legend, width, rows)
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    #[test]
    fn a_legend_takes_shorter_words_before_more_rows_than_it_is_given() {
        assert_eq!(
            legend_text(80, 1),
            vec!["─ driver used 1.00 GiB  ─ allocated 1.00 GiB  ┊ cache released ×6"]
        );
        // Names only need two rows: with two, they take them.
        assert_eq!(
            legend_text(40, 2),
            vec!["─ driver used  ─ allocated", "┊ cache released ×6"]
        );
        // With one: shorter words, the counts kept, then dropped.
        assert_eq!(legend_text(40, 1), vec!["─ used  ─ alloc  ┊ released ×6"]);
        assert_eq!(legend_text(28, 1), vec!["─ used ─ alloc ┊ released ×6"]);
        assert_eq!(legend_text(27, 1), vec!["─ used  ─ alloc  ┊ released"]);
        assert_eq!(legend_text(25, 1), vec!["─ used ─ alloc ┊ released"]);
        // Still too wide: the items that fit, and "…" for the rest.
        assert_eq!(legend_text(18, 1), vec!["─ used ─ alloc …"]);
        assert!(legend_text(80, 0).is_empty(), "no rows, no legend");
    }

    #[test]
    fn a_legend_keeps_the_space_between_a_figure_and_its_unit_or_drops_the_figures() {
        // One-space gaps before a packed figure: 63 columns take the
        // values with their spaces, 62 the names alone.
        assert_eq!(
            legend_text(63, 1),
            vec!["─ driver used 1.00 GiB ─ allocated 1.00 GiB ┊ cache released ×6"]
        );
        assert_eq!(
            legend_text(62, 1),
            vec!["─ driver used  ─ allocated  ┊ cache released ×6"]
        );
        for width in 0..=100 {
            for rows in 1..=3 {
                for line in legend_text(width, rows) {
                    assert!(!line.contains("1.00GiB"), "{width}×{rows}: {line}");
                }
            }
        }
    }

    #[test]
    fn wrap_never_parts_a_figure_from_its_unit_and_counts_cells() {
        assert_eq!(
            wrap("3.62 GiB requested of 3.72 GiB in blocks", 26),
            vec!["3.62 GiB requested of", "3.72 GiB in blocks"]
        );
        // Wide characters take two cells each: 训练 is four.
        assert_eq!(wrap("训练 abc", 6), vec!["训练", "abc"]);
        assert_eq!(wrap("12 % done", 4), vec!["12 %", "done"]);
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("one two three", 7), vec!["one two", "three"]);
        assert_eq!(wrap("", 7), Vec::<String>::new());
        assert_eq!(
            wrap("abc", 0),
            vec!["abc"],
            "a zero width still yields the text"
        );
    }

    #[test]
    fn wrap_keeping_breaks_before_a_command_never_inside_it() {
        let text = "wrote a.pickle (10 entries): vramtop replay a.pickle; 2 keys dropped";
        let keep = Some("vramtop replay a.pickle");
        assert_eq!(
            wrap_keeping(text, keep, 40),
            vec![
                "wrote a.pickle (10 entries):",
                "vramtop replay a.pickle; 2 keys dropped"
            ]
        );
        // Plain wrapping parts it.
        assert_eq!(wrap(text, 40)[0], "wrote a.pickle (10 entries): vramtop");
        // Not in the text, or none: as wrap.
        assert_eq!(wrap_keeping(text, Some("vramtop open"), 40), wrap(text, 40));
        assert_eq!(wrap_keeping(text, None, 40), wrap(text, 40));
        // Wider than a row: broken, every character shown.
        let narrow = wrap_keeping(text, keep, 12);
        assert!(narrow.iter().all(|l| l.chars().count() <= 12), "{narrow:?}");
        assert_eq!(narrow.concat().replace(' ', ""), text.replace(' ', ""));
    }

    #[test]
    fn a_title_too_wide_drops_whole_parts_never_a_figures_unit() {
        let spans = || {
            vec![
                Span::raw(" Sites "),
                Span::raw(" by user frame · 21 sites · 23.2 GiB allocated · g groups "),
            ]
        };
        let text = |spans: Vec<Span<'_>>| Line::from(spans).to_string();
        let whole = text(spans());
        assert_eq!(text(fit_title(spans(), 80)), whole);
        // 40 cells: cut at the edge it read "· 21 sites · 23.2".
        assert_eq!(
            text(fit_title(spans(), 40)),
            " Sites  by user frame · 21 sites … "
        );
        for room in 30..whole.chars().count() {
            let fitted = text(fit_title(spans(), room));
            assert!(fitted.chars().count() <= room, "{room}: {fitted}");
            assert!(!fitted.contains("23.2 …"), "{room}: {fitted}");
        }
        // Parts in spans of their own, separators apart: no "· …".
        let parts = vec![
            Span::raw(" Segments "),
            Span::raw(" "),
            Span::raw("GPU 0"),
            Span::raw(" · "),
            Span::raw("127 segments · 638 blocks"),
            Span::raw(" "),
        ];
        assert_eq!(
            text(fit_title(parts, 38)),
            " Segments  GPU 0 · 127 segments … "
        );
        // Nothing fits but a cut inside the first part: left to the border.
        assert_eq!(text(fit_title(spans(), 5)), whole);
    }

    #[test]
    fn wrap_breaking_breaks_allocator_settings_after_a_comma() {
        let text = "fresh allocator with expandable_segments:True,max_split_size_mb:128";
        assert_eq!(
            wrap_breaking(text, 30),
            vec![
                "fresh allocator with",
                "expandable_segments:True,",
                "max_split_size_mb:128"
            ]
        );
    }

    #[test]
    fn fit_cuts_long_lines_with_an_ellipsis() {
        let line = Line::from(vec![Span::raw("abc"), Span::raw("defgh")]);
        assert_eq!(fit(&line, 20).to_string(), "abcdefgh");
        assert_eq!(fit(&line, 5).to_string(), "abcd…");
        assert_eq!(fit(&line, 3).to_string(), "ab…");
        assert_eq!(fit(&line, 1).to_string(), "…");
        assert_eq!(fit(&line, 0).to_string(), "");
    }

    #[test]
    fn padding_cuts_long_text() {
        assert_eq!(right("42", 4), "  42");
        assert_eq!(left("abcdef", 4), "abc…");
    }

    #[test]
    fn a_list_scrolls_only_once_the_selection_passes_its_last_row() {
        assert_eq!(first_shown(0, 5), 0);
        assert_eq!(first_shown(4, 5), 0, "the fifth item is on the last row");
        assert_eq!(first_shown(5, 5), 1);
        assert_eq!(first_shown(9, 5), 5);
        assert_eq!(first_shown(3, 0), 4, "no rows: nothing is shown");
    }

    #[test]
    fn key_hints_drop_the_last_that_do_not_fit_but_keep_quit_and_help() {
        let all = [
            ("q", "quit"),
            ("?", "help"),
            ("Tab", "pane"),
            ("p", "pause"),
        ];
        let theme = Theme::colored();
        let text = |w: usize| key_hints(&all, w, &theme).to_string();
        assert_eq!(text(80), "q quit  ? help  Tab pane  p pause");
        assert_eq!(text(26), "q quit  ? help  Tab pane");
        assert_eq!(
            text(3),
            "q quit  ? help",
            "quit and help stay, cut when drawn"
        );
    }
}
