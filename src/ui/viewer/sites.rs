//! The sites pane (`w`): the live allocated memory at the cursor by
//! allocation site, and the selected site's stack and blocks.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

use crate::app::keymap::{Action, Keymap, first_key};
use crate::app::viewer::{ViewerAction, ViewerState};
use crate::snapshot::sites::{FrameCounts, Site, frame_counts, frame_label, listed_frames};
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

fn share(bytes: u64, of: u64) -> String {
    if of == 0 {
        return "   -".to_string();
    }
    // Never rounded onto all or none it is not (as the summary's column).
    let p = bytes as f64 * 100.0 / of as f64;
    if bytes > 0 && p < 0.05 {
        " <0.1%".to_string()
    } else if bytes < of && p >= 99.95 {
        ">99.9%".to_string()
    } else {
        format!("{p:>5.1}%")
    }
}

/// One site's row in `width` columns: bytes, share, blocks, and the
/// label in what is left (cut so that it still reads unlike the others',
/// [`Site::label_within`]).
pub(super) fn site_row(site: &Site, allocated: u64, width: usize) -> String {
    let figures = format!(
        "{:>10} {} {:>5} blk  ",
        format::bytes(site.bytes),
        share(site.bytes, allocated),
        site.blocks,
    );
    let label_room = width.saturating_sub(figures.chars().count());
    format!("{figures}{}", site.label_within(label_room))
}

/// The keys the sites pane's texts name, as the keymap binds them.
#[derive(Debug, Clone, Copy)]
struct SiteKeys {
    /// The dashboard's ↑/↓ (whole labels: "↑ k"), which move in the pane.
    up: &'static str,
    down: &'static str,
    /// Esc: folds the expanded site.
    back: &'static str,
    /// Shows the C++ frames.
    cpp: &'static str,
}

impl SiteKeys {
    fn of(keymap: &Keymap) -> Self {
        SiteKeys {
            up: keymap.key_label(Action::Up).unwrap_or_default(),
            down: keymap.key_label(Action::Down).unwrap_or_default(),
            back: keymap.key_name(Action::Back).unwrap_or_default(),
            cpp: keymap
                .viewer_key_name(ViewerAction::ToggleCppFrames)
                .unwrap_or_default(),
        }
    }
}

/// The heading of an expanded site's stack: what is listed and what is
/// not, with the counts `--summary --json` gives (`python_frames`,
/// `cpp_frames`, `dropped_frames`); `cpp_key` shows the hidden frames.
fn stack_heading(c: FrameCounts, with_cpp: bool, cpp_key: &str) -> String {
    let dropped = dropped_note(c);
    let python = format::count_of(c.python, "Python frame", "Python frames");
    let cpp = format::count_of(c.cpp, "C++ frame", "C++ frames");
    if c.cpp == 0 && c.python > 0 {
        // No C++ frame to hide or show: "0 C++ frames hidden, x shows
        // them" offered a key that shows nothing.
        format!("stack, innermost first ({python}{dropped}):")
    } else if !with_cpp {
        format!("stack, innermost first ({python}; {cpp} hidden, {cpp_key} shows them):")
    } else if c.python == 0 {
        format!("stack, innermost first ({cpp}{dropped}):")
    } else {
        format!("stack, innermost first ({python}, {cpp}{dropped}):")
    }
}

/// "; N unwinder/allocator frames dropped" (nothing when none is), as the
/// sites pane and the block detail word the frames never listed; the
/// launcher's frames (runpy) are named apart: they are not the
/// allocator's.
pub(super) fn dropped_note(c: FrameCounts) -> String {
    let launcher = c.launcher.min(c.dropped);
    let plumbing = c.dropped - launcher;
    let launched = format::count_of(launcher, "launcher frame", "launcher frames");
    match (plumbing, launcher) {
        (0, 0) => String::new(),
        (_, 0) => format!("; {plumbing} unwinder/allocator frames dropped"),
        (0, _) => format!("; {launched} (runpy) dropped"),
        (_, _) => format!("; {plumbing} unwinder/allocator and {launched} (runpy) dropped"),
    }
}

/// The lines of an expanded site: what it is, its stack (Python frames,
/// C++ frames counted or shown), its blocks.
pub fn site_detail_lines(v: &ViewerState, keymap: &Keymap, site: &Site, width: u16) -> Vec<String> {
    // The heading and the stack's title wrap (a cut one loses the "x shows
    // them" hint); frames and blocks stay one a row.
    let mut lines = chrome::wrap(
        &format!(
            "{} · {} requested of {} in blocks",
            site.label,
            format::bytes(site.requested_bytes),
            format::bytes(site.bytes)
        ),
        width,
    );
    if let crate::snapshot::sites::SiteKey::NoStack(reason) = &site.key {
        let why = match reason {
            crate::snapshot::sites::NoStackReason::BeforeRecording => {
                "_record_memory_history was not recording when these blocks were allocated: \
                 it began after them (typically the weights and the optimizer state, when \
                 a script turns it on after building its model) or was off at the time. The \
                 file has no stack for them."
            }
            crate::snapshot::sites::NoStackReason::WithoutStacks => {
                "The file records no stacks: record with \
                 _record_memory_history(stacks=\"python\") or \"all\" to see sites."
            }
            crate::snapshot::sites::NoStackReason::BeforeTrace => {
                "These blocks were live before the trace's first event and are freed within \
                 it (a free records the free's stack, not the allocation's): allocated before \
                 _record_memory_history began, or in events the trace no longer holds (it \
                 keeps the last max_entries): the file has no stack for them."
            }
            crate::snapshot::sites::NoStackReason::TraceNotRead => {
                "No block of the final state has a stack; the trace, not read yet, says \
                 whether they predate _record_memory_history or the file has no stacks."
            }
        };
        lines.extend(chrome::wrap(why, width));
    } else {
        let counts = frame_counts(&site.stack);
        let with_cpp = v.show_cpp || counts.python == 0;
        let cpp_key = SiteKeys::of(keymap).cpp;
        lines.extend(chrome::wrap(
            &stack_heading(counts, with_cpp, cpp_key),
            width,
        ));
        v.site_frames_row.set(lines.len());
        for f in listed_frames(&site.stack, with_cpp) {
            lines.push(format!("  {}", frame_label(f)));
        }
    }
    lines.push(format!("blocks ({}):", site.blocks));
    let sizes: std::collections::HashMap<u64, (u64, u64)> = v
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| (b.address, (b.size, b.requested_size)))
        .collect();
    for addr in &site.addresses {
        let (size, req) = sizes.get(addr).copied().unwrap_or((0, 0));
        lines.push(format!(
            "  {addr:#x}  {} (req {})",
            format::bytes(size),
            format::bytes(req)
        ));
    }
    lines
}

/// The rows of a sites pane's inner area `height` rows tall that list its
/// `sites` sites: all of them, or with a site expanded a third of the pane
/// (fewer when there are fewer sites: rows left blank would push the
/// stack down).
fn list_height(v: &ViewerState, sites: usize, height: u16) -> u16 {
    if v.site_expanded {
        let sites_n = u16::try_from(sites).unwrap_or(u16::MAX);
        (height / 3).max(2).min(sites_n).max(1).min(height)
    } else {
        height
    }
}

/// The site (index into the listed sites) drawn on screen row `row` of the
/// sites pane drawn in `area`, for mouse clicks: the list's rows under the
/// title, scrolled as `render_sites` scrolls them. `None` on the title,
/// on the row counting the sites not shown, on an expanded site's stack
/// and blocks, below the last site, and while the pane lists nothing.
pub fn site_at(v: &ViewerState, area: Rect, row: u16) -> Option<usize> {
    let total = v.sites.as_ref().map_or(0, |s| s.sites.len());
    if total == 0 {
        return None;
    }
    // The title is the pane's one row of chrome (its top border); the
    // OOM row, where shown, is above the list.
    let above = 1 + u16::from(v.sites_oom_row());
    let top = area.y.checked_add(above)?;
    let height = area.height.checked_sub(above)?;
    let offset = usize::from(row.checked_sub(top)?);
    let cut = ListCut::of(
        total,
        usize::from(list_height(v, total, height)),
        v.selected_site,
    );
    let index = cut.first.checked_add(offset)?;
    (offset < cut.rows && index < total).then_some(index)
}

/// The sites pane's OOM row in `width` columns, while the cursor is on an
/// OOM event: the failed request and the code that asked, then, unless
/// the row is selected (the status line then hints the key), how to see
/// its stack: "OOM 256 MiB asked by train.py:72 step · ↑ then Enter: its
/// stack", in short ("↑, Enter: stack") where that does not fit, then
/// beside the asker's file:line alone, and left out where none does. The keys as `theme` shows them (in words
/// with `--ascii`), measured so.
pub(super) fn oom_row(
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
    width: usize,
) -> Option<String> {
    let event = v.current_event()?;
    let stack = v.oom_stack()?;
    let size = format::bytes(event.size);
    let what = match &stack.site {
        Some(site) => format!("OOM {size} asked by {site}"),
        None => format!("OOM {size} requested"),
    };
    if v.sites_oom_selected {
        return Some(what);
    }
    let up = first_key(SiteKeys::of(keymap).up);
    let enter = keymap
        .viewer_key_name(ViewerAction::ExpandSite)
        .unwrap_or_default();
    // The longest form that fits: the hint in words, in short, then with
    // the asker in short (file:line, as the status line's 80-column
    // form): the hint is what makes the stack reachable. None last.
    let short = match stack.short_site() {
        Some(short) => format!("OOM {size} by {short}"),
        None => what.clone(),
    };
    let forms = [
        format!("{what} · {up} then {enter}: its stack"),
        format!("{what} · {up}, {enter}: stack"),
        format!("{short} · {up}, {enter}: stack"),
    ];
    Some(
        forms
            .iter()
            .map(|f| theme.key(f).into_owned())
            .find(|f| f.chars().count() <= width)
            .unwrap_or(what),
    )
}

/// Whether screen row `row` of the sites pane drawn in `area` is its OOM
/// row (shown while the cursor is on an OOM event), for mouse clicks.
pub fn oom_row_at(v: &ViewerState, area: Rect, row: u16) -> bool {
    v.sites_oom_row() && area.height >= 2 && area.y.checked_add(1) == Some(row)
}

/// The sites pane: the live allocated memory at the cursor by site,
/// largest first; the selected site expands below the list. On an OOM
/// event the failed request's row is first, above the sites.
pub(super) fn render_sites(
    area: Rect,
    beside: bool,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let keys = SiteKeys::of(keymap);
    let group = keymap
        .viewer_key_name(ViewerAction::CycleGrouping)
        .unwrap_or_default();
    use ratatui::widgets::{Block, Borders};
    let Some(sites) = &v.sites else {
        return;
    };
    // The left border's corner, beside the segments, takes a cell.
    let room = usize::from(area.width).saturating_sub(usize::from(beside));
    let title = Line::from(chrome::fit_title(
        vec![
            Span::styled(" Sites ", theme.title_focused),
            Span::styled(
                format!(
                    " {}by {} · {} · {} allocated · {group} groups ",
                    // The sites are of the filtered segments, as the
                    // breakdown's figures are: named as it names them.
                    super::filters(v)
                        .iter()
                        .map(|f| format!("{f} · "))
                        .collect::<String>(),
                    v.grouping.name(),
                    format::count_of(sites.sites.len(), "site", "sites"),
                    format::bytes(sites.allocated)
                ),
                theme.text,
            ),
        ],
        room,
    ));
    let borders = if beside {
        Borders::TOP | Borders::LEFT
    } else {
        Borders::TOP
    };
    let block = Block::new()
        .borders(borders)
        .border_style(theme.border_focused)
        .title(title);
    let Some(mut inner) = chrome::inside(block, area, buf, theme) else {
        return;
    };
    // The OOM row takes the list's first row; `↑` from the first site
    // selects it, as a site.
    if v.sites_oom_row() {
        let selected = v.sites_oom_selected;
        let pointer = if selected {
            theme.glyphs().pointer
        } else {
            " "
        };
        let row_width = usize::from(inner.width).saturating_sub(1);
        let text = oom_row(v, keymap, theme, row_width).unwrap_or_default();
        let style = if selected {
            theme.selected
        } else {
            theme.warning
        };
        chrome::line_at(
            buf,
            inner,
            0,
            &Line::styled(format!("{pointer}{text}"), style),
        );
        inner.y = inner.y.saturating_add(1);
        inner.height = inner.height.saturating_sub(1);
        if inner.height == 0 {
            theme.finish(area, buf);
            return;
        }
    }
    if sites.sites.is_empty() {
        chrome::line_at(
            buf,
            inner,
            0,
            &Line::styled("nothing allocated at this cursor", theme.dim),
        );
        theme.finish(area, buf);
        return;
    }
    let list_h = list_height(v, sites.sites.len(), inner.height);
    // A list longer than its rows keeps its last row to say how many
    // sites it does not show: the title's count alone left a hidden site
    // unmentioned until the list was scrolled.
    let cut = ListCut::of(sites.sites.len(), usize::from(list_h), v.selected_site);
    let (first, rows) = (cut.first, cut.rows);
    for (row, (i, site)) in sites
        .sites
        .iter()
        .enumerate()
        .skip(first)
        .take(rows)
        .enumerate()
    {
        let selected = i == v.selected_site && !v.sites_oom_selected;
        let pointer = if selected {
            theme.glyphs().pointer
        } else {
            " "
        };
        let style = if selected {
            theme.selected
        } else if site.key.is_no_stack() {
            theme.dim
        } else {
            theme.text
        };
        // The pointer takes one column of the row.
        let row_width = usize::from(inner.width).saturating_sub(1);
        let line = Line::styled(
            format!("{pointer}{}", site_row(site, sites.allocated, row_width)),
            style,
        );
        chrome::line_at(buf, inner, u16::try_from(row).unwrap_or(u16::MAX), &line);
    }
    if let Some(marker) = cut.marker(v.site_expanded, keys) {
        let row = u16::try_from(rows).unwrap_or(u16::MAX);
        let marker = theme.key(&marker).into_owned();
        chrome::line_at(buf, inner, row, &Line::styled(marker, theme.dim));
    }
    if v.site_expanded
        && let Some(site) = v.selected_site()
    {
        let detail = Rect::new(
            inner.x,
            inner.y + list_h,
            inner.width,
            inner.height - list_h,
        );
        let lines: Vec<Line> = site_detail_lines(v, keymap, site, detail.width)
            .into_iter()
            .enumerate()
            .map(|(k, l)| {
                if k == 0 {
                    Line::styled(l, theme.header)
                } else {
                    Line::styled(l, theme.text)
                }
            })
            .collect();
        let shown = scrolled(lines.len(), usize::from(detail.height), v.site_scroll);
        v.site_scroll_limit.set(shown.limit);
        let rows: Vec<Line> = lines
            .into_iter()
            .skip(shown.first)
            .take(shown.rows)
            .collect();
        chrome::lines_at(buf, detail, &rows);
        if let Some(marker) = shown.marker(keys) {
            let row = u16::try_from(shown.rows).unwrap_or(u16::MAX);
            let marker = theme.key(&marker).into_owned();
            chrome::line_at(buf, detail, row, &Line::styled(marker, theme.dim));
        }
    }
    theme.finish(area, buf);
}

/// Which sites a list of `height` rows shows: when they do not all fit,
/// the last row says how many are above and below, and how to reach them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListCut {
    /// The first site shown.
    first: usize,
    /// Sites shown (the marker row not counted).
    rows: usize,
    total: usize,
    /// Whether the last row is the marker's.
    marked: bool,
}

impl ListCut {
    fn of(total: usize, height: usize, selected: usize) -> ListCut {
        // One row is no room for a site and a marker: the selected site.
        let marked = total > height && height >= 2;
        let rows = height - usize::from(marked);
        ListCut {
            first: chrome::first_shown(selected, rows),
            rows,
            total,
            marked,
        }
    }

    /// "… 1 more (↓ scrolls)" when sites are not shown. `expanded`: ↑/↓
    /// scroll the expanded site's stack, so the list is reached after Esc.
    fn marker(&self, expanded: bool, keys: SiteKeys) -> Option<String> {
        let above = self.first;
        let below = self.total.saturating_sub(self.first + self.rows);
        if !self.marked {
            return None;
        }
        let counts = match (above, below) {
            (0, _) => format!("… {below} more"),
            (_, 0) => format!("… {above} above"),
            _ => format!("… {below} more, {above} above"),
        };
        let (up, down, back) = (first_key(keys.up), first_key(keys.down), keys.back);
        let keys = match (expanded, above > 0, below > 0) {
            (false, false, _) => format!("{down} scrolls"),
            (false, true, false) => format!("{up} scrolls back"),
            (false, true, true) => format!("{up} {down} scroll"),
            (true, false, _) => format!("{back}, then {down}"),
            (true, true, false) => format!("{back}, then {up}"),
            (true, true, true) => format!("{back}, then {up} {down}"),
        };
        Some(format!("{counts} ({keys})"))
    }
}

/// Which rows of an expanded site's `total` lines a detail area of
/// `height` rows shows, scrolled `scroll` rows down: when they do not all
/// fit, the last row says how many are cut and how to scroll to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scrolled {
    /// The first line shown.
    first: usize,
    /// Lines shown (the marker row not counted).
    rows: usize,
    total: usize,
    /// The largest useful scroll (0: everything fits).
    limit: usize,
}

fn scrolled(total: usize, height: usize, scroll: usize) -> Scrolled {
    if total <= height || height < 2 {
        return Scrolled {
            first: 0,
            rows: total.min(height),
            total,
            limit: 0,
        };
    }
    // One row for the marker.
    let rows = height - 1;
    let limit = total - rows;
    Scrolled {
        first: scroll.min(limit),
        rows,
        total,
        limit,
    }
}

impl Scrolled {
    /// "… 12 more (rows 1–8 of 20; ↓ j scrolls)" when lines are cut. The
    /// figures count rows (heading, stack and blocks), which the "blocks
    /// (N)" heading above does not: "of 20" alone read as a block count
    /// that disagreed with it.
    fn marker(&self, keys: SiteKeys) -> Option<String> {
        if self.limit == 0 {
            return None;
        }
        let (first, last) = (self.first + 1, self.first + self.rows);
        let below = self.total - last;
        let total = self.total;
        let (up, down) = (keys.up, keys.down);
        Some(match (self.first > 0, below > 0) {
            (false, _) => {
                format!("… {below} more (rows {first}–{last} of {total}; {down} scrolls)")
            }
            (true, true) => {
                format!("… {below} more (rows {first}–{last} of {total}; {up} {down} scroll)")
            }
            (true, false) => format!(
                "… {} above (rows {first}–{last} of {total}; {up} scrolls back)",
                self.first
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> SiteKeys {
        SiteKeys::of(&Keymap::default())
    }

    #[test]
    fn a_stack_without_cpp_frames_says_nothing_of_them() {
        let python_only = FrameCounts {
            python: 3,
            cpp: 0,
            dropped: 2,
            launcher: 0,
        };
        for with_cpp in [false, true] {
            assert_eq!(
                stack_heading(python_only, with_cpp, "x"),
                "stack, innermost first (3 Python frames; 2 unwinder/allocator frames dropped):"
            );
        }
        let both = FrameCounts {
            python: 3,
            cpp: 1,
            dropped: 0,
            launcher: 0,
        };
        assert_eq!(
            stack_heading(both, false, "x"),
            "stack, innermost first (3 Python frames; 1 C++ frame hidden, x shows them):"
        );
        // The launcher's frames are not the allocator's.
        let launched = FrameCounts {
            python: 8,
            cpp: 0,
            dropped: 2,
            launcher: 2,
        };
        assert_eq!(
            stack_heading(launched, false, "x"),
            "stack, innermost first (8 Python frames; 2 launcher frames (runpy) dropped):"
        );
        let mixed = FrameCounts {
            launcher: 1,
            ..python_only
        };
        assert_eq!(
            dropped_note(mixed),
            "; 1 unwinder/allocator and 1 launcher frame (runpy) dropped"
        );
    }

    #[test]
    fn an_expanded_site_too_long_for_its_rows_keeps_the_last_row_for_a_more_marker() {
        // 20 lines in 9 rows: 8 lines and the marker.
        let top = scrolled(20, 9, 0);
        assert_eq!((top.first, top.rows, top.limit), (0, 8, 12));
        assert_eq!(
            top.marker(keys()).as_deref(),
            Some("… 12 more (rows 1–8 of 20; ↓ j scrolls)")
        );
        let middle = scrolled(20, 9, 5);
        assert_eq!(
            middle.marker(keys()).as_deref(),
            Some("… 7 more (rows 6–13 of 20; ↑ k ↓ j scroll)")
        );
        // Scrolled past the end (a taller pane since): the last lines.
        let end = scrolled(20, 9, 99);
        assert_eq!((end.first, end.rows), (12, 8));
        assert_eq!(
            end.marker(keys()).as_deref(),
            Some("… 12 above (rows 13–20 of 20; ↑ k scrolls back)")
        );
        // Lines that fit: all of them, no marker, nothing to scroll.
        let fits = scrolled(9, 9, 3);
        assert_eq!((fits.first, fits.rows, fits.limit), (0, 9, 0));
        assert_eq!(fits.marker(keys()), None);
    }

    #[test]
    fn a_site_list_longer_than_its_rows_says_how_many_it_does_not_show() {
        // Eleven sites in ten rows: nine sites and the marker.
        let top = ListCut::of(11, 10, 0);
        assert_eq!((top.first, top.rows), (0, 9));
        assert_eq!(
            top.marker(false, keys()).as_deref(),
            Some("… 2 more (↓ scrolls)")
        );
        let middle = ListCut::of(11, 10, 9);
        assert_eq!((middle.first, middle.rows), (1, 9));
        assert_eq!(
            middle.marker(false, keys()).as_deref(),
            Some("… 1 more, 1 above (↑ ↓ scroll)")
        );
        let end = ListCut::of(11, 10, 10);
        assert_eq!(
            end.marker(false, keys()).as_deref(),
            Some("… 2 above (↑ scrolls back)")
        );
        // Expanded, ↑/↓ scroll the stack: the list is reached after Esc.
        assert_eq!(
            top.marker(true, keys()).as_deref(),
            Some("… 2 more (Esc, then ↓)")
        );
        // Sites that fit: all of them, no marker; one row keeps its site.
        let fits = ListCut::of(10, 10, 9);
        assert_eq!(
            (fits.first, fits.rows, fits.marker(false, keys())),
            (0, 10, None)
        );
        let one = ListCut::of(5, 1, 3);
        assert_eq!(
            (one.first, one.rows, one.marker(false, keys())),
            (3, 1, None)
        );
    }

    #[test]
    fn a_sites_share_keeps_its_column_width_and_has_none_of_nothing() {
        assert_eq!(share(1, 4), " 25.0%");
        assert_eq!(share(4, 4), "100.0%");
        assert_eq!(share(1, 1 << 30), " <0.1%");
        assert_eq!(share((1 << 30) - 1, 1 << 30), ">99.9%");
        assert_eq!(share(0, 4), "  0.0%");
        assert_eq!(share(5, 0), "   -", "nothing allocated: no share");
    }

    #[test]
    fn the_sites_pane_names_its_keys_as_the_keymap_binds_them() {
        let mut moved = Keymap::default();
        for b in &mut moved.bindings {
            match b.action {
                Action::Down => b.keys = "F5 J",
                Action::Back => b.keys = "F6",
                _ => {}
            }
        }
        for b in &mut moved.viewer {
            if b.action == ViewerAction::ToggleCppFrames {
                b.keys = "F7";
            }
        }
        let keys = SiteKeys::of(&moved);
        let top = ListCut::of(11, 10, 0);
        assert_eq!(
            top.marker(false, keys).as_deref(),
            Some("… 2 more (F5 scrolls)")
        );
        assert_eq!(
            top.marker(true, keys).as_deref(),
            Some("… 2 more (F6, then F5)")
        );
        assert_eq!(
            scrolled(20, 9, 0).marker(keys).as_deref(),
            Some("… 12 more (rows 1–8 of 20; F5 J scrolls)")
        );
        let counts = FrameCounts {
            python: 2,
            cpp: 3,
            dropped: 0,
            launcher: 0,
        };
        assert!(stack_heading(counts, false, keys.cpp).contains("F7 shows them"));
    }
}
