//! The dashboard's drawing: pure functions of [`AppState`], one file per
//! pane. Nothing here reads a clock, a terminal or the machine; the same
//! state always draws the same screen.
//!
//! Layout at 80×24 (each pane costs one title row; the pane right of the
//! middle band also a left border):
//!
//! ```text
//!  GPUs ────────────────────────────────────────────────────────────────────────
//! #  name                memory       used/total util temp     power       clocks
//! ▶0 Simulated H100 80GB █░░░░░░░░░ 1.0/80.0 GiB  92% 64°C 649/700 W 1980/2619 MHz
//!  1 …                                                             (one per GPU)
//!  Memory breakdown  GPU 0 · pid 4242 (simulated training) ─────────────────────
//! █▓▒░░░░░░░░░░░░░░░░░░░░░░░░░ allocated|reserved but unallocated|context…|free
//! █ allocated 397 MiB 0.5%   ▓ reserved but unallocated 163 MiB 0.2% (legend)
//!  Timeline  GPU 0 · last 1m ──────────────┌ Fragmentation  GPU 0 ─────────────
//! 1.2 GiB│        driver used, reserved,  │frag 88%  largest 20.0 MiB
//!        │        allocated; ┊ empty_cache│ext free …  non-rel …  int free …
//!    0 B └─────── ┃ OOM ──────────────────│ ≤2MiB ███    2   3.32 MiB
//!      -1m          -30s              now │≤32MiB ██████ 7    140 MiB
//!  Segments  GPU 0 · 28 segments · 110 blocks ──────█ allocated ▓ free ▚ pending
//! L  0x7f0000000000   20MiB ████████▓▓▓▓████    (one strip per segment, scrolls)
//! block 1/110 4.00 MiB (req 4.00 MiB) allocated · 0x7f… · stream 0 · segment 1/28
//!  Processes  tree ─────────────────────────────────────────────────────────────
//!     PID USER     GPU    MEMORY     alloc/res COMMAND      (+ unattributed/GPU)
//! sim │ 1s │ 30 samples       q quit  ? help  Tab pane  a stress  p pause  0…9 GPU
//! ```
//!
//! Rows are handed out in two passes: every shown pane gets its minimum,
//! then the breakdown, GPUs, segments and processes grow to what their
//! content needs (segments and processes up to about a fifth of the
//! screen; the breakdown before the GPU list, even a focused one, since
//! the list scrolls to keep the selected GPU in view) and the middle band
//! takes the rest. A focused list whose rows all fit in half the body
//! (or that fifth) gets them all first, the panes after it making way,
//! the breakdown's figures kept. Smaller terminals drop panes,
//! keeping the focused one first, then GPUs, breakdown, timeline,
//! processes, fragmentation and segments, in that order; fragmentation
//! and segments, unless focused, are left out rather than leave the
//! breakdown a bar with no row of figures under it. Narrower than 60
//! columns, the timeline and fragmentation are stacked instead of side by
//! side. While the selected GPU shows no allocator (and the stress panel
//! is closed), fragmentation and segments, unless focused, fold into one
//! row that says how to get one ([`CollapsedPanes`]), ranked after the
//! timeline; the breakdown leaves its allocator note to that row and the
//! process list grows past its fifth once every other band has its rows.
//! Below [`MIN_WIDTH`]×[`MIN_HEIGHT`] only a "terminal too small" line is
//! drawn. The stress panel (`a`/F2, off by default) is drawn over the
//! lower part of the body; the process detail (Enter in Processes) over
//! the panes, the signal prompt over it, and the help overlay last, over
//! everything.

mod breakdown;
mod chrome;
mod collapsed;
mod fragmentation;
mod gpus;
mod help;
#[cfg(test)]
mod layout_tests;
mod process_detail;
mod processes;
mod segments;
mod status;
mod stress;
mod timeline;
mod viewer;

pub mod format;
pub mod theme;

pub use breakdown::{BreakdownPane, DRIVER_HELD, DRIVER_HELD_SHORT, NO_ALLOCATOR_NOTE};
pub use collapsed::CollapsedLine;
pub use fragmentation::{FragmentationPane, SEGMENTS_NOT_YET, segments_age_words};
pub use gpus::GpusPane;
pub use help::{DASHBOARD_ONLY, DEFINITIONS, HelpOverlay, VIEWER_DEFINITIONS, VIEWER_MEANINGS};
pub use process_detail::{process_detail_lines, render_process_detail};
pub use processes::ProcessesPane;
pub use segments::SegmentsPane;
pub use status::{StatusLine, oom_banner, probe_note};
pub use stress::{
    StressPane, highlighted_wrap, oom_advice_text, oom_advice_wordings, oom_summary,
    stress_message, why_wordings,
};
pub use theme::Theme;
pub use timeline::{LegendName, TimelinePane};
pub use viewer::{
    LEGEND_NAMES as VIEWER_LEGEND_NAMES, ViewerLayout, compare_lines, detail_lines, device_at,
    largest_changes_first, oom_row_at, render_loading, render_viewer, site_at, site_detail_lines,
    status_text, status_text_within, viewer_layout,
};

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::Widget;

use crate::app::keymap::{Action, Keymap};
use crate::app::state::{AppState, Overlay, Pane, UiState};

/// The smallest terminal the dashboard draws panes in (columns).
pub const MIN_WIDTH: u16 = crate::app::state::MIN_SCREEN.0;
/// The smallest terminal the dashboard draws panes in (rows).
pub const MIN_HEIGHT: u16 = crate::app::state::MIN_SCREEN.1;
/// From this width the timeline and fragmentation sit side by side.
const SPLIT_WIDTH: u16 = 60;

pub use crate::app::state::STRESS_BESIDE_MAP;
/// The segment map's share of the width beside the stress panel (percent)
/// and its bounds (columns).
const MAP_PERCENT: u16 = 40;
const MAP_MIN_WIDTH: u16 = 40;
const MAP_MAX_WIDTH: u16 = 80;

/// Where everything goes on one screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenLayout {
    /// The panes shown, top to bottom, left to right.
    pub panes: Vec<(Pane, Rect)>,
    /// The stress panel, while it is open and shown.
    pub stress: Option<Rect>,
    pub status: Rect,
    /// The allocator panes folded into one row, while the selected GPU
    /// shows no allocator (see [`CollapsedPanes`]).
    pub collapsed: Option<CollapsedPanes>,
    /// The terminal is below the minimum: only a message is drawn.
    pub too_small: bool,
}

/// The allocator panes (fragmentation, segment map) that have nothing to
/// show, folded into one row that says how to give them data: the rows
/// they would spend saying so go to the GPU and process lists. A focused
/// pane is never folded (it shows why it is empty, and Tab goes on
/// through the panes in their one order); the row is not a pane, so a
/// click on it focuses none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollapsedPanes {
    /// The panes the row stands for, in Tab order.
    pub panes: Vec<Pane>,
    pub area: Rect,
}

impl ScreenLayout {
    /// The area of `pane`, if it is shown.
    pub fn area_of(&self, pane: Pane) -> Option<Rect> {
        self.panes.iter().find(|(p, _)| *p == pane).map(|&(_, r)| r)
    }
}

/// Draws the dashboard into the frame.
pub fn draw(frame: &mut Frame, state: &AppState, keymap: &Keymap, theme: &Theme) {
    let area = frame.area();
    render(area, frame.buffer_mut(), state, keymap, theme);
}

/// Draws the dashboard into `area` of a buffer (what [`draw`] does with
/// the whole frame).
pub fn render(area: Rect, buf: &mut Buffer, state: &AppState, keymap: &Keymap, theme: &Theme) {
    let area = area.intersection(buf.area);
    state.ui.screen.set(Some((area.width, area.height)));
    let screen = layout(area, state, keymap, theme);
    if screen.too_small {
        let quit = keymap.key_name(Action::Quit).map(|q| format!("{q} quits"));
        render_too_small(area, buf, quit.as_deref(), theme);
        return;
    }
    for &(pane, rect) in &screen.panes {
        match pane {
            Pane::Gpus => GpusPane::new(state, theme).render(rect, buf),
            Pane::Breakdown => {
                let pane = BreakdownPane::new(state, theme).with_keymap(keymap);
                // The collapsed row says how to get an allocator.
                if screen.collapsed.is_some() {
                    pane.without_allocator_note().render(rect, buf);
                } else {
                    pane.render(rect, buf);
                }
            }
            Pane::Timeline => TimelinePane::new(state, theme).render(rect, buf),
            Pane::Fragmentation => {
                let pane = FragmentationPane::new(state, theme);
                if rect.x > area.x {
                    pane.beside().render(rect, buf);
                } else {
                    pane.render(rect, buf);
                }
            }
            Pane::Segments => {
                let pane = SegmentsPane::new(state, theme);
                if rect.x > area.x {
                    pane.beside().render(rect, buf);
                } else {
                    pane.render(rect, buf);
                }
            }
            Pane::Processes => ProcessesPane::new(state, theme).render(rect, buf),
        }
    }
    if let Some(collapsed) = &screen.collapsed {
        CollapsedLine::new(state, keymap, theme, &collapsed.panes).render(collapsed.area, buf);
    }
    if let Some(panel) = screen.stress {
        StressPane::new(&state.stress, keymap, theme).render(panel, buf);
    }
    // Over the panes, the status line (whose hints are its keys, read
    // from how it was drawn) left in view; under the prompt `K` opens
    // from it, and the help `?` opens over it.
    let body = Rect {
        height: screen.status.y.saturating_sub(area.y),
        ..area
    };
    render_process_detail(body, buf, state, keymap, theme);
    StatusLine::new(state, keymap, theme)
        .on_screen(area.height)
        .render(screen.status, buf);
    if let Some(prompt) = &state.ui.signal_prompt {
        processes::render_signal_prompt(area, buf, prompt, theme);
    }
    if state.ui.overlay == Overlay::Help {
        HelpOverlay::new(keymap, theme)
            .with_offers(state.offers())
            .with_stress(state.ui.stress_open)
            .with_stress_view(state.ui.stress_view())
            .with_scenario(
                state
                    .stress
                    .scenario
                    .as_ref()
                    .filter(|_| state.ui.stress_open)
                    .map(|run| {
                        (
                            run.scenario.name.as_str(),
                            run.scenario.explanation.as_str(),
                        )
                    }),
            )
            .with_scroll(state.ui.help_scroll)
            .with_scroll_limit(&state.ui.help_scroll_limit)
            .with_page_rows(&state.ui.help_page_rows)
            .render(area, buf);
    }
    // Every pane finishes its own area; this catches what is drawn
    // between them (the status line, the stress panel's text).
    theme.finish(area, buf);
}

/// The width of the fragmentation pane beside the timeline on a screen
/// `width` columns wide: it needs about 30 columns, and more than 60 only
/// pad it.
fn fragmentation_width(width: u16) -> u16 {
    (width * 45 / 100).clamp(30, 60).min(width)
}

/// Whether `area` is below the smallest terminal the panes are drawn in.
fn too_small(area: Rect) -> bool {
    area.width < MIN_WIDTH || area.height < MIN_HEIGHT
}

/// What a terminal below [`MIN_WIDTH`]×[`MIN_HEIGHT`] shows instead of
/// panes: its size, the size needed and, where a row is left for it,
/// `quit` ("q quits"), the one key that acts there.
fn render_too_small(area: Rect, buf: &mut Buffer, quit: Option<&str>, theme: &Theme) {
    let mut lines = too_small_lines(area.width, area.height);
    if let Some(quit) = quit
        && lines.len() < usize::from(area.height)
        && quit.chars().count() <= usize::from(area.width)
    {
        lines.push(quit.to_string());
    }
    let n = u16::try_from(lines.len()).unwrap_or(u16::MAX);
    let top = area.height.saturating_sub(n) / 2;
    let rows = Rect {
        y: area.y + top,
        height: area.height - top,
        ..area
    };
    let lines: Vec<Line> = lines
        .into_iter()
        .map(|l| Line::styled(l, theme.warning))
        .collect();
    chrome::lines_at(buf, rows, &lines);
    theme.finish(area, buf);
}

/// The longest way of saying the terminal's size and the size needed
/// that fits one row of `width` columns; on a narrower one the shortest,
/// word-wrapped (what the rows and columns cannot hold is cut when drawn):
/// "need 40x10" alone did not say the terminal was the problem, nor how
/// far off it was. `×` reads `x` with `--ascii`.
fn too_small_lines(width: u16, height: u16) -> Vec<String> {
    let (have, need) = (
        format!("{width}×{height}"),
        format!("{MIN_WIDTH}×{MIN_HEIGHT}"),
    );
    let tiers = [
        format!("terminal {have}: vramtop needs at least {need}"),
        format!("terminal {have}: needs at least {need}"),
        format!("{have}: needs at least {need}"),
        format!("{have}: needs {need}"),
    ];
    let fits = |t: &String| t.chars().count() <= usize::from(width);
    match tiers.iter().find(|t| fits(t)) {
        Some(t) => vec![t.clone()],
        None => chrome::wrap(&tiers[tiers.len() - 1], width),
    }
}

/// The GPU (index into `state.gpus`) drawn on screen row `row` of a GPUs
/// pane drawn in `gpus_area` (see [`ScreenLayout::area_of`]), for mouse
/// clicks: accounts for the header, MIG rows and scrolling. `None` on the
/// title, the header or below the last GPU.
pub fn gpu_at(state: &AppState, gpus_area: Rect, row: u16) -> Option<usize> {
    gpus::gpu_at(state, gpus_area, row)
}

/// The smallest useful height of a pane, title row included.
fn min_height(pane: Pane) -> u16 {
    match pane {
        Pane::Gpus | Pane::Breakdown => 2,
        Pane::Timeline => 5,
        Pane::Fragmentation => 4,
        Pane::Segments | Pane::Processes => 3,
    }
}

/// A horizontal band of the screen: one pane, or timeline and
/// fragmentation side by side.
struct Band {
    panes: Vec<Pane>,
    min: u16,
    /// The height the content asks for; `None`: takes what is left.
    preferred: Option<u16>,
    /// The height it grows to after every band has its `preferred`:
    /// the process list beyond its fifth, while the allocator panes are
    /// collapsed (the rows they freed are its, not a GPU row's).
    later: Option<u16>,
}

/// Rows a scrolling list (Segments, Processes) grows to, unfocused, in a
/// body `height` rows tall: about a fifth of the screen (a bit more on
/// tall ones); the charts get the rest.
fn list_cap(height: u16) -> u16 {
    (height * 3 / 10).saturating_sub(2).max(3)
}

/// The rows of the focused list `focus`, when all of them fit in a body
/// `height` rows tall: its whole content (title and header included)
/// where that is at most [`list_cap`] or half the body, the others
/// giving way to it; `None` for a list too long for that (it scrolls in
/// its capped rows, as unfocused), or a focus that is no list. At 80×24
/// with the stress panel open, the focused Processes list had 3 rows,
/// title and header included: one of the simulated GPU's two processes.
fn whole_focused_list(focus: Pane, height: u16, state: &AppState) -> Option<u16> {
    let content = match focus {
        Pane::Segments => SegmentsPane::preferred_height(state),
        Pane::Processes => ProcessesPane::preferred_height(state),
        _ => return None,
    };
    (content > min_height(focus) && content <= list_cap(height).max(height / 2)).then_some(content)
}

/// `line`: the pane that stands for the collapsed allocator panes' row
/// in `included` (see [`CollapsedPanes`]): a band of one row, in their
/// place; while it is there the breakdown leaves its allocator note to
/// it and the process list grows to its content, not a fifth.
fn bands(
    included: &[Pane],
    (width, height): (u16, u16),
    map_first: bool,
    whole_list: Option<(Pane, u16)>,
    line: Option<Pane>,
    state: &AppState,
    theme: &Theme,
) -> Vec<Band> {
    let line = line.filter(|&p| included.contains(&p));
    let has = |p: Pane| included.contains(&p) && Some(p) != line;
    let cap = list_cap(height);
    // The segment map shown in place of the stress panel takes what it needs.
    let segments_cap = if map_first { height } else { cap };
    let fixed = |pane: Pane, preferred: u16| match whole_list {
        // A focused list that fits whole asks for all its rows as its
        // least, so that the panes included after it make way.
        Some((list, rows)) if list == pane => Band {
            panes: vec![pane],
            min: rows,
            preferred: Some(rows),
            later: None,
        },
        _ => Band {
            panes: vec![pane],
            min: min_height(pane),
            preferred: Some(preferred.max(min_height(pane))),
            later: None,
        },
    };
    let flex = |panes: Vec<Pane>| Band {
        min: panes.iter().map(|&p| min_height(p)).max().unwrap_or(0),
        panes,
        preferred: None,
        later: None,
    };
    let mut out = Vec::new();
    if has(Pane::Gpus) {
        out.push(fixed(Pane::Gpus, GpusPane::preferred_height(state)));
    }
    if has(Pane::Breakdown) {
        let pane = BreakdownPane::new(state, theme);
        let pane = if line.is_some() {
            pane.without_allocator_note()
        } else {
            pane
        };
        out.push(fixed(Pane::Breakdown, pane.rows_wanted(width)));
    }
    match (has(Pane::Timeline), has(Pane::Fragmentation)) {
        (true, true) if width >= SPLIT_WIDTH => {
            out.push(flex(vec![Pane::Timeline, Pane::Fragmentation]));
        }
        (t, f) => {
            if t {
                out.push(flex(vec![Pane::Timeline]));
            }
            if f {
                out.push(flex(vec![Pane::Fragmentation]));
            }
        }
    }
    if let Some(pane) = line {
        out.push(Band {
            panes: vec![pane],
            min: 1,
            preferred: Some(1),
            later: None,
        });
    }
    if has(Pane::Segments) {
        out.push(fixed(
            Pane::Segments,
            SegmentsPane::preferred_height(state).min(segments_cap),
        ));
    }
    if has(Pane::Processes) {
        let content = ProcessesPane::preferred_height(state);
        let mut band = fixed(Pane::Processes, content.min(cap));
        // The rows the allocator panes would have taken go to the list.
        if line.is_some() {
            band.later = Some(content);
        }
        out.push(band);
    }
    out
}

/// Computes where each pane goes in `area` (see the module docs).
pub fn layout(area: Rect, state: &AppState, keymap: &Keymap, theme: &Theme) -> ScreenLayout {
    if too_small(area) {
        return ScreenLayout {
            panes: Vec::new(),
            stress: None,
            status: Rect::default(),
            collapsed: None,
            too_small: true,
        };
    }
    // The status line's messages wrap onto the rows they need (a quarter
    // of the screen at most), which the panes give up.
    let status_h = StatusLine::new(state, keymap, theme).height(area.width, area.height);
    let full_body_h = area.height - status_h;
    let status = Rect::new(area.x, area.y + full_body_h, area.width, status_h);
    let body = Rect::new(area.x, area.y, area.width, full_body_h);

    // The stress panel takes the lower part of the body: beside the segment
    // map where both fit, alone (or the map alone, `M`) where they do not.
    let beside = UiState::stress_beside_map_at((area.width, area.height));
    let map_only = state.ui.stress_open && !beside && state.ui.stress_map;
    let (body_h, stress_rect, map_rect) = if state.ui.stress_open && !map_only {
        let panel = stress::panel_area(body);
        let upper = panel.y - body.y;
        if beside {
            let map_w = (area.width * MAP_PERCENT / 100).clamp(MAP_MIN_WIDTH, MAP_MAX_WIDTH);
            let panel_w = area.width - map_w;
            let map = Rect::new(area.x + panel_w, panel.y, map_w, panel.height);
            (
                upper,
                Some(Rect {
                    width: panel_w,
                    ..panel
                }),
                Some(map),
            )
        } else {
            (upper, Some(panel), None)
        }
    } else {
        (full_body_h, None, None)
    };

    // The map replacing the panel comes first, as if focused.
    let focus = if map_only {
        Pane::Segments
    } else {
        state.ui.focus
    };
    // The allocator panes with nothing to show fold into one row, unless
    // focused; with the stress panel open the layout is the panel's.
    // Before the first sample (no GPU yet) nothing folds: the simulated
    // GPU's allocator comes with it, and the first frame would fold the
    // panes only to unfold them a second later.
    let no_allocator = state.selected().is_some_and(|g| g.allocator.is_none());
    let collapsed: Vec<Pane> = if state.ui.stress_open || !no_allocator {
        Vec::new()
    } else {
        [Pane::Fragmentation, Pane::Segments]
            .into_iter()
            .filter(|&p| p != focus)
            .collect()
    };
    // The row goes in under the first of them, after the timeline (a
    // chart of the GPU's memory even without an allocator) and before
    // the process list.
    let line = collapsed.first().copied();
    let mut priority = vec![focus];
    for p in [
        Pane::Gpus,
        Pane::Breakdown,
        Pane::Timeline,
        Pane::Processes,
        Pane::Fragmentation,
        Pane::Segments,
    ] {
        if p != focus && !collapsed.contains(&p) {
            priority.push(p);
        }
        if p == Pane::Timeline
            && let Some(line) = line
        {
            priority.push(line);
        }
    }
    if map_rect.is_some() {
        // The segment map has its place beside the panel.
        priority.retain(|&p| p != Pane::Segments);
    }
    let total_min = |bands: &[Band]| bands.iter().map(|b| u32::from(b.min)).sum::<u32>();
    // The breakdown's figures (a legend row under its bar) outrank the
    // panes below Processes: an unfocused segment map or fragmentation
    // pane squeezed in at its least does not take that row. At 80×24
    // with the stress panel open and Processes focused, a one-strip
    // segment map left the breakdown a bar with no numbers.
    let breakdown_wants_figures =
        BreakdownPane::preferred_height(state, theme, area.width) > min_height(Pane::Breakdown);
    // The map shown in place of the panel takes what it needs already.
    let whole_list = (!map_only)
        .then(|| whole_focused_list(focus, body_h, state).map(|rows| (focus, rows)))
        .flatten();
    let bands = |included: &[Pane]| {
        bands(
            included,
            (area.width, body_h),
            map_only,
            whole_list,
            line,
            state,
            theme,
        )
    };
    let mut included: Vec<Pane> = Vec::new();
    for &p in &priority {
        let mut trial = included.clone();
        trial.push(p);
        let need = total_min(&bands(&trial));
        // Beside a whole focused list every pane after the breakdown gives
        // way to its figures, the timeline and processes too: the list's
        // rows come out of theirs, not of the breakdown's.
        let gives_way = p != focus
            && Some(p) != line
            && (matches!(p, Pane::Fragmentation | Pane::Segments) || whole_list.is_some())
            && breakdown_wants_figures
            && included.contains(&Pane::Breakdown);
        let need = need.saturating_add(u32::from(gives_way));
        if need <= u32::from(body_h) {
            included = trial;
        }
    }
    let bands = bands(&included);
    let mut heights: Vec<u16> = bands.iter().map(|b| b.min).collect();
    let mut extra = body_h.saturating_sub(heights.iter().sum());
    let band_of = |p: Pane| bands.iter().position(|b| b.panes.contains(&p));
    // Pass one: lists and bars grow to their content, in priority order,
    // except that the breakdown grows before the GPU list even when the
    // list is focused: the list scrolls to keep the selected GPU in view,
    // the breakdown's figures have nowhere else to go (eight GPUs at 80×24
    // would otherwise leave it a bare bar).
    let mut growth = priority.clone();
    if let (Some(b), Some(g)) = (
        growth.iter().position(|&p| p == Pane::Breakdown),
        growth.iter().position(|&p| p == Pane::Gpus),
    ) && b > g
    {
        growth.remove(b);
        growth.insert(g, Pane::Breakdown);
    }
    for &p in &growth {
        if let Some(i) = band_of(p)
            && let Some(pref) = bands[i].preferred
        {
            let grow = pref.saturating_sub(heights[i]).min(extra);
            heights[i] += grow;
            extra -= grow;
        }
    }
    // Then what the lists grow to later (see `Band::later`).
    for (i, band) in bands.iter().enumerate() {
        if let Some(later) = band.later {
            let grow = later.saturating_sub(heights[i]).min(extra);
            heights[i] += grow;
            extra -= grow;
        }
    }
    // Pass two: the charts share the rest; without charts, the focused
    // pane (or the first) takes it.
    let flexible: Vec<usize> = (0..bands.len())
        .filter(|&i| bands[i].preferred.is_none())
        .collect();
    if flexible.is_empty() {
        if let Some(i) = band_of(focus).or(if bands.is_empty() { None } else { Some(0) }) {
            heights[i] += extra;
        }
    } else {
        let n = u16::try_from(flexible.len()).unwrap_or(1);
        let share = extra / n;
        for (k, &i) in flexible.iter().enumerate() {
            heights[i] += share + u16::from(k == 0) * (extra % n);
        }
    }

    let mut panes = Vec::new();
    let mut collapsed_row = None;
    let mut y = area.y;
    for (band, &h) in bands.iter().zip(&heights) {
        match band.panes.as_slice() {
            [only] if Some(*only) == line => {
                collapsed_row = Some(CollapsedPanes {
                    panes: collapsed.clone(),
                    area: Rect::new(area.x, y, area.width, h),
                });
            }
            [left, right] => {
                let right_w = fragmentation_width(area.width);
                let left_w = area.width - right_w;
                panes.push((*left, Rect::new(area.x, y, left_w, h)));
                panes.push((*right, Rect::new(area.x + left_w, y, right_w, h)));
            }
            [only] => panes.push((*only, Rect::new(area.x, y, area.width, h))),
            _ => {}
        }
        y += h;
    }
    if let Some(map) = map_rect {
        panes.push((Pane::Segments, map));
    }
    ScreenLayout {
        panes,
        stress: stress_rect,
        status,
        collapsed: collapsed_row,
        too_small: false,
    }
}
