//! The snapshot viewer's screen (`vramtop open FILE`): pure functions of a
//! [`ViewerState`]. The fragmentation and segment panes are the dashboard's
//! own, drawn from the viewer's [`crate::app::state::AppState`]; the devices,
//! breakdown and timeline panes are the viewer's own because a snapshot has
//! no driver figures and its time axis is the trace's events.
//!
//! ```text
//!  GPUs  silmont_mem_snapshot.pickle ──────────────────────────────────────────
//! ▶0 GPU 0  97 events  reserved 2.52 GiB (peak 3.52 GiB @52)  allocated …
//!  Memory breakdown  GPU 0 ────────────────────────────────────────────────────
//! ████████████▓▓▓▓▓▓▓▓  allocated | pending free | external free (of reserved)
//!  Timeline  GPU 0 · events 0…97 · cursor 48 ───┌ Fragmentation  GPU 0 ───────
//! 4 GiB│ reserved, allocated; ▌ cursor          │frag 50%  largest 512 MiB
//!  Segments  GPU 0 · 7 segments · 20 blocks ──────█ allocated ▓ free ▚ pending
//! L  0x7f2140000000  512MiB ██████████████████████  (one strip per segment)
//! event 48/97 · segment_alloc 512 MiB at 0x7f… · stream 0 · t+943.889 ms · …
//! q quit  ? help  → event  PgDn step  o OOM  n segment  e empty_cache …
//! ```
//!
//! Enter opens the selected block's detail (sizes, state, stream, segment,
//! the stack of its allocation, innermost first) over the panes.
//!
//! This file lays the screen out and draws it; each pane and overlay is a
//! file of its own: `devices`, `breakdown`, `timeline`, `sites`, `status`,
//! `detail` and `compare` (both drawn in a `popup`), and `loading` (the
//! screen shown while the file is read).

mod breakdown;
mod compare;
mod detail;
mod devices;
mod loading;
mod popup;
mod sites;
mod status;
mod timeline;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::Widget;

use super::format;
use super::help::HelpOverlay;
use super::theme::Theme;
use super::{
    FragmentationPane, SPLIT_WIDTH, SegmentsPane, fragmentation_width, render_too_small, too_small,
};
use crate::app::keymap::{Action, Keymap};
use crate::app::state::{Overlay, Pane};
use crate::app::viewer::{PoolFilter, ViewerAction, ViewerState};

pub use compare::{compare_lines, largest_changes_first};
pub use detail::detail_lines;
pub use devices::device_at;
pub use loading::render_loading;
pub use sites::{oom_row_at, site_at, site_detail_lines};
pub use status::{status_text, status_text_within};
pub use timeline::LEGEND_NAMES;

use breakdown::render_breakdown;
use compare::render_compare;
use detail::render_detail;
use devices::render_devices;
use sites::render_sites;
use status::render_status;
use timeline::render_timeline;

/// Where the viewer's panes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewerLayout {
    pub panes: Vec<(Pane, Rect)>,
    /// The sites pane, while it is open (beside the timeline on wide
    /// terminals, in its place on narrow ones; the fragmentation pane
    /// gives way).
    pub sites: Option<Rect>,
    pub status: Rect,
    pub too_small: bool,
}

/// From this width the sites pane sits beside the timeline.
const SITES_BESIDE_WIDTH: u16 = 100;

/// Computes the viewer's layout: devices, breakdown, timeline beside
/// fragmentation, segments, a two-row status line (more while a notice
/// longer than a row answers the last key: it wraps onto the rows it needs,
/// up to a quarter of the screen, as the dashboard's messages do). Short
/// terminals drop the devices, then the breakdown, then the fragmentation.
/// Nothing here depends on the cursor: stepping through the trace keeps
/// every pane where it is.
pub fn viewer_layout(area: Rect, v: &ViewerState) -> ViewerLayout {
    if too_small(area) {
        return ViewerLayout {
            panes: Vec::new(),
            sites: None,
            status: Rect::default(),
            too_small: true,
        };
    }
    // The position (or the notice answering the last key, on the rows it
    // needs to be read whole), then the key hints.
    let status_h = u16::try_from(status::first_rows(v, area.width, area.height).len())
        .unwrap_or(1)
        .saturating_add(1)
        .min(area.height);
    let body = area.height - status_h;
    let devices_h = u16::try_from(v.scrub.devices.len().clamp(1, 4)).unwrap_or(4) + 1;
    let breakdown_h = 3;
    let cap = (body * 3 / 10).max(3);
    let mut segments_h = segments_height(v).clamp(3, cap);
    let mut show_devices = true;
    let mut show_breakdown = true;
    let middle_min = 6;
    let used = |d: bool, b: bool, s: u16| u16::from(d) * devices_h + u16::from(b) * breakdown_h + s;
    if used(show_devices, show_breakdown, segments_h) + middle_min > body {
        segments_h = 3;
    }
    if used(show_devices, show_breakdown, segments_h) + middle_min > body {
        show_devices = false;
    }
    if used(show_devices, show_breakdown, segments_h) + middle_min > body {
        show_breakdown = false;
    }
    let middle_h = body.saturating_sub(used(show_devices, show_breakdown, segments_h));
    let mut panes = Vec::new();
    let mut y = area.y;
    let mut push = |pane: Pane, x: u16, w: u16, h: u16, y: u16| {
        panes.push((pane, Rect::new(x, y, w, h)));
    };
    if show_devices {
        push(Pane::Gpus, area.x, area.width, devices_h, y);
        y += devices_h;
    }
    if show_breakdown {
        push(Pane::Breakdown, area.x, area.width, breakdown_h, y);
        y += breakdown_h;
    }
    let mut sites = None;
    if v.sites_open {
        if area.width >= SITES_BESIDE_WIDTH {
            let right_w = area.width * 60 / 100;
            push(Pane::Timeline, area.x, area.width - right_w, middle_h, y);
            sites = Some(Rect::new(
                area.x + area.width - right_w,
                y,
                right_w,
                middle_h,
            ));
        } else {
            sites = Some(Rect::new(area.x, y, area.width, middle_h));
        }
    } else if area.width >= SPLIT_WIDTH {
        let right_w = fragmentation_width(area.width);
        push(Pane::Timeline, area.x, area.width - right_w, middle_h, y);
        push(
            Pane::Fragmentation,
            area.x + area.width - right_w,
            right_w,
            middle_h,
            y,
        );
    } else {
        push(Pane::Timeline, area.x, area.width, middle_h, y);
    }
    y += middle_h;
    push(Pane::Segments, area.x, area.width, segments_h, y);
    ViewerLayout {
        panes,
        sites,
        status: Rect::new(area.x, area.y + body, area.width, status_h),
        too_small: false,
    }
}

/// Rows the segments pane asks for: title, one per segment, footer, for
/// the most segments the selected device has at any cursor, so that the
/// panes keep their heights while the cursor moves (sized by the segments
/// at the cursor, the timeline grew and shrank under the user as
/// segments came and went). A filter, which shows fewer, keeps them too.
fn segments_height(v: &ViewerState) -> u16 {
    let most = v.device().map_or(0, |d| d.most_segments());
    // The current count too: never fewer rows than the pane has segments
    // to list, whatever the bound says.
    let shown = SegmentsPane::preferred_height(&v.app);
    u16::try_from(most.max(1))
        .unwrap_or(u16::MAX)
        .saturating_add(2)
        .max(shown)
}

/// Draws the viewer into `area` of a buffer.
pub fn render_viewer(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    // Keys below the smallest size only quit (`UiState::too_small`).
    v.app.ui.screen.set(Some((area.width, area.height)));
    let screen = viewer_layout(area, v);
    if screen.too_small {
        let quit = keymap.key_name(Action::Quit).map(|q| {
            // Opened from the dashboard, `q` goes back there.
            let does = if v.returns_to_dashboard {
                "goes back"
            } else {
                "quits"
            };
            format!("{q} {does}")
        });
        render_too_small(area, buf, quit.as_deref(), theme);
        return;
    }
    // With a filter on, an empty map is what the filter left, not an
    // allocator without memory.
    let shown = filters(v);
    let short = filters_short(v);
    // Every pane drawn from the filtered segments names the filters in
    // its title, as the breakdown does; the GPUs row and the timeline,
    // which count every segment, say "unfiltered" while a filter is on.
    let final_state = final_state_note(v);
    let notes = title_notes(v);
    let filtered_empty = if v.scrub.devices.is_empty() {
        Some(NO_SEGMENTS_NOTE.to_string())
    } else {
        filter_hides(v).then(|| {
            format!(
                "no segments match the filter ({}); {} cycle it",
                shown.join(" · "),
                filter_keys(keymap)
            )
        })
    };
    for &(pane, rect) in &screen.panes {
        match pane {
            Pane::Gpus => render_devices(rect, buf, v, theme),
            Pane::Breakdown => render_breakdown(rect, buf, v, keymap, theme),
            Pane::Timeline => render_timeline(rect, buf, v, theme),
            Pane::Fragmentation => {
                let pane = FragmentationPane::new(&v.app, theme)
                    .with_empty_note(filtered_empty.as_deref())
                    .with_filters(&shown, &short, &final_state);
                if rect.x > area.x {
                    pane.beside().render(rect, buf);
                } else {
                    pane.render(rect, buf);
                }
            }
            Pane::Segments => SegmentsPane::new(&v.app, theme)
                .with_private_pools(v.has_private_pools())
                .with_highlight(v.highlighted())
                .with_empty_note(filtered_empty.as_deref())
                .with_title_notes(&notes)
                .render(rect, buf),
            Pane::Processes => {}
        }
    }
    if let Some(rect) = screen.sites {
        render_sites(rect, rect.x > area.x, buf, v, keymap, theme);
    }
    let popups = |buf: &mut Buffer| {
        if v.detail_open {
            render_detail(area, buf, v, keymap, theme);
        }
        if v.compare.is_some() {
            render_compare(area, buf, v, keymap, theme);
        }
    };
    // The status line hints only the scroll keys that move the block
    // detail or the comparison from where it stands, which their drawing
    // finds out (how many rows fit): drawn once before the status line
    // for that, then again over the rows of it they cover.
    if v.detail_open || v.compare.is_some() {
        popups(buf);
    }
    render_status(screen.status, area.height, buf, v, keymap, theme);
    popups(buf);
    if v.app.ui.overlay == Overlay::Help {
        // The keys the hints leave out say why in the help.
        let unavailable = |a: ViewerAction| v.unavailable(a);
        HelpOverlay::new(keymap, theme)
            .with_viewer(true)
            .with_viewer_unavailable(&unavailable)
            .with_detail_open(
                // An OOM's detail has no blocks: the help does not say
                // where in the map it stands.
                (v.detail_open && !v.detail_oom).then(|| (v.detail_scrolled(), v.detail_blocks())),
            )
            .with_compare_open(v.compare.as_ref().map(|_| v.compare_scrolled()))
            .with_quit_returns(v.returns_to_dashboard)
            .with_scroll(v.app.ui.help_scroll)
            .with_scroll_limit(&v.app.ui.help_scroll_limit)
            .with_page_rows(&v.app.ui.help_page_rows)
            .render(area, buf);
    }
    theme.finish(area, buf);
}

pub(super) fn focused(v: &ViewerState, pane: Pane) -> bool {
    v.app.ui.focus == pane
}

/// The keys that cycle the filters, as the keymap binds them ("s and p").
pub(super) fn filter_keys(keymap: &Keymap) -> String {
    let key = |a| keymap.viewer_key_name(a).unwrap_or_default();
    format!(
        "{} and {}",
        key(ViewerAction::CycleStream),
        key(ViewerAction::CyclePool)
    )
}

/// What the fragmentation and segments panes say of a file with no GPU: a
/// valid snapshot with no segments and no trace (the dashboard's "needs a
/// process's allocator" would point at the wrong thing).
pub const NO_SEGMENTS_NOTE: &str = "the file has no segments";

/// What the breakdown, fragmentation and segments panes say in their
/// titles where an inconsistent trace leaves them on the file's final
/// state ([`ViewerState::shows_final_state`]): the GPUs row and the
/// timeline, which follow the trace, read otherwise.
pub const FINAL_STATE_NOTE: &str = "final state";

/// What the titles of the panes drawn from the state at the cursor say
/// besides the GPU: the filters, and [`FINAL_STATE_NOTE`] when it holds.
pub(super) fn title_notes(v: &ViewerState) -> Vec<String> {
    let mut out = filters(v);
    if v.shows_final_state {
        out.push(FINAL_STATE_NOTE.to_string());
    }
    out
}

/// [`FINAL_STATE_NOTE`] where it holds, else nothing: the words of
/// [`title_notes`] other than the filters.
pub(super) fn final_state_note(v: &ViewerState) -> Vec<String> {
    v.shows_final_state
        .then(|| FINAL_STATE_NOTE.to_string())
        .into_iter()
        .collect()
}

/// The filters in words ("stream 7 · large pool"), empty when none.
pub(super) fn filters(v: &ViewerState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = v.stream_filter {
        out.push(format!("stream {s}"));
    }
    if let Some(p) = v.pool_filter {
        out.push(pool_words(p));
    }
    out
}

/// [`filters`] in fewer words ("stream 7 · large", "pool (0,1)"), for a
/// narrow title.
pub(super) fn filters_short(v: &ViewerState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = v.stream_filter {
        out.push(format!("stream {s}"));
    }
    if let Some(p) = v.pool_filter {
        out.push(pool_words_short(p));
    }
    out
}

/// What the titles of the panes that count every segment (the GPUs row,
/// the timeline) say while a filter is on: the filtered panes beside
/// them name the filter, and figures that do not follow it read as if
/// they did.
pub const UNFILTERED_NOTE: &str = "unfiltered";

/// A pool filter in words: "large pool" (a size class, as PyTorch names
/// it), "private pool (0,1)" and "default pool (0,0)" (memory pools, as
/// the summary, the block detail and the segment map's legend name them).
pub(super) fn pool_words(p: PoolFilter) -> String {
    match p {
        PoolFilter::Size(kind) => format!("{} pool", kind.as_str()),
        PoolFilter::Memory(id) => {
            let which = if id == (0, 0) { "default" } else { "private" };
            format!("{which} pool {}", format::pool_id(id))
        }
    }
}

/// [`pool_words`] short, beside a stream filter: "large", "pool (0,1)".
pub(super) fn pool_words_short(p: PoolFilter) -> String {
    match p {
        PoolFilter::Size(kind) => kind.as_str().to_string(),
        PoolFilter::Memory(id) => format!("pool {}", format::pool_id(id)),
    }
}

/// Whether a filter is on and there are segments at the cursor for it to
/// hide: with none at all the empty map is the allocator's, not the
/// filter's, and the panes say so rather than "cycle the filter".
pub(super) fn filter_hides(v: &ViewerState) -> bool {
    !filters(v).is_empty() && v.unfiltered_segments > 0
}

/// Microseconds as "t+12.345 ms" from the first event of the trace ("t+12
/// ms" on a clock of whole milliseconds, `whole_ms`).
pub(super) fn elapsed(first: Option<i64>, t: Option<i64>, whole_ms: bool) -> String {
    match (first, t) {
        (Some(f), Some(t)) => format::since_start_on(t.saturating_sub(f), whole_ms),
        _ => format!("time {}", format::NA),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_reads_milliseconds_below_a_second_and_seconds_from_one() {
        assert_eq!(elapsed(Some(1_000), Some(13_345), false), "t+12.345 ms");
        assert_eq!(elapsed(Some(0), Some(2_500_000), false), "t+2.500 s");
        assert_eq!(elapsed(Some(0), Some(999_999), false), "t+999.999 ms");
    }

    #[test]
    fn elapsed_on_a_whole_millisecond_clock_has_no_fraction_under_a_second() {
        assert_eq!(elapsed(Some(1_000), Some(13_000), true), "t+12 ms");
        assert_eq!(elapsed(Some(0), Some(2_500_000), true), "t+2.500 s");
    }

    #[test]
    fn elapsed_without_both_times_is_na_and_extreme_times_do_not_overflow() {
        assert_eq!(
            elapsed(None, Some(5), false),
            format!("time {}", format::NA)
        );
        assert_eq!(
            elapsed(Some(5), None, false),
            format!("time {}", format::NA)
        );
        assert!(elapsed(Some(i64::MIN), Some(i64::MAX), false).ends_with(" s"));
        // An event stamped i64::MIN after one at 1 µs: the difference
        // saturates at i64::MIN, whose absolute value has no i64.
        assert!(elapsed(Some(1), Some(i64::MIN), false).ends_with(" s"));
    }
}
