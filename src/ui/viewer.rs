//! The snapshot viewer's screen (`vramtop open FILE`): pure functions of a
//! [`ViewerState`]. The fragmentation and segment panes are the dashboard's
//! own, drawn from the viewer's [`crate::app::state::AppState`]; the devices,
//! breakdown and timeline panes are drawn here because a snapshot has no
//! driver figures and its time axis is the trace's events.
//!
//! ```text
//!  GPUs  silmont_mem_snapshot.pickle ──────────────────────────────────────────
//! ▶0 device 0   97 events   reserved 86.0 MiB (peak 86.0 MiB)   allocated …
//!  Memory breakdown  device 0 ──────────────────────────────────────────────────
//! ████████████▓▓▓▓▓▓▓▓  allocated | pending free | cached but free (of reserved)
//!  Timeline  events 0…97 ─────────────────┌ Fragmentation  GPU 0 ─────────────
//! 86 MiB│ reserved, allocated; │ cursor   │ frag …
//!  Segments  GPU 0 · 9 segments · 30 blocks ───────────────────────────────────
//! event 60/97 · alloc 4.00 MiB at 0x7f… · stream 0 · t+1.234 ms
//! q quit  ? help  → event  PgDn step  o OOM  n segment  e empty_cache …
//! ```
//!
//! Enter opens the selected block's detail (sizes, state, stream, segment,
//! the stack of its allocation, innermost first) over the panes.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Widget};

use super::chrome::{self, pane_block};
use super::format;
use super::help::HelpOverlay;
use super::theme::Theme;
use super::timeline::{mark_legend, nice_ceiling};
use super::{FragmentationPane, MIN_HEIGHT, MIN_WIDTH, SegmentsPane};
use crate::alloc::{BlockState, PoolKind};
use crate::app::keymap::Keymap;
use crate::app::state::{Overlay, Pane};
use crate::app::viewer::ViewerState;
use crate::snapshot::TraceEntry;
use crate::snapshot::diff::SiteChangeKind;
use crate::snapshot::scrub::{MarkKind, Point};
use crate::snapshot::sites::{Site, frame_label, informative, is_allocator, is_python, site_key};

/// From this width the timeline and fragmentation sit side by side.
const SPLIT_WIDTH: u16 = 60;

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
/// fragmentation, segments, a two-row status line. Short terminals drop
/// the devices, then the breakdown, then the fragmentation.
pub fn viewer_layout(area: Rect, v: &ViewerState) -> ViewerLayout {
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        return ViewerLayout {
            panes: Vec::new(),
            sites: None,
            status: Rect::default(),
            too_small: true,
        };
    }
    let status_h = 2;
    let body = area.height - status_h;
    let devices_h = u16::try_from(v.scrub.devices.len().clamp(1, 4)).unwrap_or(4) + 1;
    let breakdown_h = 3;
    let cap = (body * 3 / 10).max(3);
    let mut segments_h = SegmentsPane::preferred_height(&v.app).clamp(3, cap);
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
        let right_w = (area.width * 45 / 100).clamp(30, 60).min(area.width);
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

/// Draws the viewer into `area` of a buffer.
pub fn render_viewer(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    let screen = viewer_layout(area, v);
    if screen.too_small {
        let text = format!("terminal too small (need {MIN_WIDTH}×{MIN_HEIGHT})");
        chrome::line_at(
            buf,
            area,
            area.height / 2,
            &Line::styled(text, theme.warning),
        );
        theme.finish(area, buf);
        return;
    }
    for &(pane, rect) in &screen.panes {
        match pane {
            Pane::Gpus => render_devices(rect, buf, v, theme),
            Pane::Breakdown => render_breakdown(rect, buf, v, theme),
            Pane::Timeline => render_timeline(rect, buf, v, theme),
            Pane::Fragmentation => {
                let pane = FragmentationPane::new(&v.app, theme);
                if rect.x > area.x {
                    pane.beside().render(rect, buf);
                } else {
                    pane.render(rect, buf);
                }
            }
            Pane::Segments => SegmentsPane::new(&v.app, theme)
                .with_highlight(v.highlighted())
                .render(rect, buf),
            Pane::Processes => {}
        }
    }
    if let Some(rect) = screen.sites {
        render_sites(rect, rect.x > area.x, buf, v, theme);
    }
    render_status(screen.status, buf, v, keymap, theme);
    if v.detail_open {
        render_detail(area, buf, v, theme);
    }
    if v.compare.is_some() {
        render_compare(area, buf, v, theme);
    }
    if v.app.ui.overlay == Overlay::Help {
        HelpOverlay::new(keymap, theme)
            .with_viewer(true)
            .with_scroll(v.app.ui.help_scroll)
            .with_scroll_limit(&v.app.ui.help_scroll_limit)
            .render(area, buf);
    }
    theme.finish(area, buf);
}

/// The loading screen: "loading FILE: X MiB of Y MiB" and a bar.
pub fn render_loading(
    area: Rect,
    buf: &mut Buffer,
    file: &str,
    done: u64,
    total: u64,
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
    chrome::line_at(buf, area, row + 1, &Line::styled("q quits", theme.dim));
    theme.finish(area, buf);
}

fn focused(v: &ViewerState, pane: Pane) -> bool {
    v.app.ui.focus == pane
}

fn render_devices(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    let block = pane_block(
        Pane::Gpus,
        vec![Span::styled(v.file.clone(), theme.text)],
        focused(v, Pane::Gpus),
        false,
        theme,
    );
    let inner = block.inner(area);
    block.render(area, buf);
    if v.scrub.devices.is_empty() {
        chrome::line_at(
            buf,
            inner,
            0,
            &Line::styled(
                "no GPUs: the snapshot has no segments and no trace",
                theme.dim,
            ),
        );
    }
    let selected = v.device_index();
    let first = (selected + 1).saturating_sub(usize::from(inner.height));
    for (row, (i, d)) in v
        .scrub
        .devices
        .iter()
        .enumerate()
        .skip(first)
        .take(usize::from(inner.height))
        .enumerate()
    {
        let cursor = v.cursors.get(i).copied().unwrap_or(0);
        let p = d.points.get(cursor).copied();
        let peaks = v.peaks.get(i);
        let pointer = if i == selected { g.pointer } else { " " };
        let style = if i == selected {
            theme.header
        } else {
            theme.text
        };
        let mut spans = vec![
            Span::styled(format!("{pointer}{} ", d.device), style),
            Span::styled(format!("GPU {}", d.device), style),
            Span::styled(
                match v.trace_reading {
                    Some(_) => "  trace being read".to_string(),
                    None => format!("  {} events", d.len()),
                },
                theme.dim,
            ),
        ];
        if let (Some(p), Some(pk)) = (p, peaks) {
            spans.push(Span::raw(format!(
                "  reserved {} (peak {} @{})  allocated {} (peak {} @{})",
                format::bytes(p.reserved),
                format::bytes(pk.reserved.bytes),
                pk.reserved.cursor,
                format::bytes(p.allocated),
                format::bytes(pk.allocated.bytes),
                pk.allocated.cursor
            )));
        }
        let ooms = d.count(MarkKind::Oom);
        if ooms > 0 {
            spans.push(Span::styled(format!("  {ooms} OOM"), theme.critical));
        }
        chrome::line_at(
            buf,
            inner,
            u16::try_from(row).unwrap_or(u16::MAX),
            &Line::from(spans),
        );
    }
    theme.finish(area, buf);
}

/// The filters in words ("stream 7 · large pool"), empty when none.
fn filters(v: &ViewerState) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = v.stream_filter {
        out.push(format!("stream {s}"));
    }
    if let Some(p) = v.pool_filter {
        out.push(format!("{} pool", p.as_str()));
    }
    out
}

fn render_breakdown(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    let mut detail = Vec::new();
    if let Some(d) = v.device() {
        detail.push(Span::styled(format!("GPU {}", d.device), theme.text));
    }
    for f in filters(v) {
        detail.push(Span::styled(format!(" · {f}"), theme.warning));
    }
    let block = pane_block(
        Pane::Breakdown,
        detail,
        focused(v, Pane::Breakdown),
        false,
        theme,
    );
    let inner = block.inner(area);
    block.render(area, buf);
    if inner.height == 0 {
        theme.finish(area, buf);
        return;
    }
    let blocks = v.segments.iter().flat_map(|s| &s.blocks);
    let (mut allocated, mut pending, mut reserved) = (0u64, 0u64, 0u64);
    for b in blocks {
        match b.state {
            BlockState::ActiveAllocated => allocated += b.size,
            BlockState::ActivePendingFree => pending += b.size,
            BlockState::Inactive => {}
        }
    }
    for s in &v.segments {
        reserved += s.total_size;
    }
    let cached = reserved.saturating_sub(allocated + pending);
    if reserved == 0 {
        chrome::line_at(
            buf,
            inner,
            0,
            &Line::styled("nothing reserved at this point of the trace", theme.dim),
        );
        theme.finish(area, buf);
        return;
    }
    chrome::bar(
        buf,
        Rect { height: 1, ..inner },
        &[
            (allocated, g.allocated, theme.allocated),
            (pending, g.pending_free, theme.pending_free),
            (cached, g.cached_free, theme.cached_free),
        ],
        reserved,
    );
    let item = |glyph: &'static str, style: Style, label: &str, b: u64| {
        Line::from(vec![
            Span::styled(glyph, style),
            Span::raw(format!(
                " {label} {} {}",
                format::bytes(b),
                format::percent_of(b, reserved)
            )),
        ])
    };
    let mut items = vec![
        item(g.allocated, theme.allocated, "allocated", allocated),
        item(g.cached_free, theme.cached_free, "cached but free", cached),
    ];
    if pending > 0 {
        items.insert(
            1,
            item(g.pending_free, theme.pending_free, "pending free", pending),
        );
    }
    items.push(Line::styled(
        format!("of {} reserved", format::bytes(reserved)),
        theme.dim,
    ));
    let rows = Rect {
        y: inner.y + 1,
        height: inner.height.saturating_sub(1),
        ..inner
    };
    chrome::lines_at(buf, rows, &chrome::flow(items, inner.width, 3));
    theme.finish(area, buf);
}

/// Downsamples a series to at most `columns` × 2 points: per bucket of
/// events, the maximum (peaks must not vanish between samples).
fn bucketed(values: &[u64], columns: usize, exp: usize) -> Vec<(f64, f64)> {
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let buckets = (columns * 2).max(1);
    let per = n.div_ceil(buckets).max(1);
    values
        .chunks(per)
        .enumerate()
        .map(|(k, chunk)| {
            let max = chunk.iter().copied().max().unwrap_or(0);
            ((k * per) as f64, format::in_unit(max, exp))
        })
        .chain(std::iter::once((
            (n - 1) as f64,
            format::in_unit(values[n - 1], exp),
        )))
        .collect()
}

fn render_timeline(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    let Some(d) = v.device() else {
        let block = pane_block(Pane::Timeline, Vec::new(), false, false, theme);
        block.render(area, buf);
        theme.finish(area, buf);
        return;
    };
    let n = d.len();
    let cursor = v.cursor();
    let detail = vec![Span::styled(
        format!("GPU {} · events 0…{n} · cursor {cursor}", d.device),
        theme.text,
    )];
    let block = pane_block(
        Pane::Timeline,
        detail,
        focused(v, Pane::Timeline),
        false,
        theme,
    );
    let Some(inner) = chrome::inside(block, area, buf, theme) else {
        return;
    };
    if n == 0 {
        let note = match trace_reading_text(v) {
            Some(reading) => format!(
                "{reading}: the final state is shown; the timeline, stepping and marks \
                 come with the trace"
            ),
            None => "no trace: the snapshot holds only its final state (record with \
                     torch.cuda.memory._record_memory_history() to get one)"
                .to_string(),
        };
        chrome::note_at(buf, inner, &note, theme.dim);
        theme.finish(area, buf);
        return;
    }
    let reserved: Vec<u64> = d.points.iter().map(|p| p.reserved).collect();
    let allocated: Vec<u64> = d.points.iter().map(|p| p.allocated).collect();
    let (peak_r, peak_a) = d.peaks();
    let max = peak_r.max(peak_a).max(1 << 20);
    let exp = format::unit_exp(max);
    let top = nice_ceiling(format::in_unit(max, exp));
    let columns = usize::from(inner.width);
    let reserved_pts = bucketed(&reserved, columns, exp);
    let allocated_pts = bucketed(&allocated, columns, exp);
    let now = d.points.get(cursor).copied();
    let (ooms, releases) = (d.count(MarkKind::Oom), d.count(MarkKind::EmptyCache));
    // The values at the cursor as everywhere ("3.52 GiB"), else packed
    // ("3.52GiB"), else none: the legend keeps one row.
    type Values = chrome::LegendValues;
    let legend_items = |values: Values| {
        let shown = |v: fn(&Point) -> u64| match (values, now) {
            (Some(f), Some(p)) => format!(" {}", f(v(&p))),
            (None, Some(_)) => String::new(),
            (_, None) => format!(" {}", format::NA),
        };
        let mut items = vec![
            Line::from(vec![
                Span::styled(g.line, theme.cached_free),
                Span::raw(format!(" reserved{}", shown(|p| p.reserved))),
            ]),
            Line::from(vec![
                Span::styled(g.line, theme.allocated),
                Span::raw(format!(" allocated{}", shown(|p| p.allocated))),
            ]),
            Line::from(vec![
                Span::styled(if theme.ascii { "|" } else { "│" }, theme.key),
                Span::raw(" cursor"),
            ]),
        ];
        items.extend(mark_legend(releases, ooms, theme));
        items
    };
    let legend = chrome::fit_legend(legend_items, inner.width);
    let legend_rows = u16::try_from(legend.len()).unwrap_or(u16::MAX);
    let chart_rows = inner.height.saturating_sub(legend_rows);
    if chart_rows < 3 {
        chrome::lines_at(buf, inner, &legend);
        theme.finish(area, buf);
        return;
    }
    let rows = f64::from(chart_rows);
    let column = |xs: Vec<f64>| -> Vec<(f64, f64)> {
        xs.into_iter()
            .flat_map(|x| (0..=chart_rows).map(move |k| (x, top * f64::from(k) / rows)))
            .collect()
    };
    let at = |kind: MarkKind| -> Vec<f64> {
        d.marks
            .iter()
            .filter(|m| m.1 == kind)
            .map(|m| (m.0 + 1) as f64)
            .collect()
    };
    let oom_pts = column(at(MarkKind::Oom));
    let release_pts = column(at(MarkKind::EmptyCache));
    let cursor_pts = column(vec![cursor as f64]);
    let cursor_marker = Marker::Custom(if theme.ascii { '|' } else { '│' });
    let ds = |kind: GraphType, marker: Marker, style: Style, data| {
        Dataset::default()
            .graph_type(kind)
            .marker(marker)
            .style(style)
            .data(data)
    };
    let datasets = vec![
        ds(
            GraphType::Scatter,
            g.release_mark,
            theme.marker_release,
            &release_pts,
        ),
        ds(GraphType::Scatter, g.oom_mark, theme.marker_oom, &oom_pts),
        ds(
            GraphType::Line,
            g.series_reserved,
            theme.cached_free,
            &reserved_pts,
        ),
        ds(
            GraphType::Line,
            g.series_allocated,
            theme.allocated,
            &allocated_pts,
        ),
        ds(GraphType::Scatter, cursor_marker, theme.key, &cursor_pts),
    ];
    let axis_number = |x: f64| {
        if (x - x.round()).abs() < 1e-9 {
            format!("{x:.0}")
        } else {
            format!("{x:.1}")
        }
    };
    let chart = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .bounds([0.0, n as f64])
                // Event indices, as "#52" in the peaks and replay's report.
                .labels(vec![
                    Span::styled("#0", theme.dim),
                    Span::styled(format!("#{}", n / 2), theme.dim),
                    Span::styled(format!("#{n}"), theme.dim),
                ])
                .style(theme.dim),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, top])
                // Every label carries its unit, as on the dashboard.
                .labels(vec![
                    Span::styled("0 B", theme.dim),
                    Span::styled(
                        format!("{} {}", axis_number(top / 2.0), format::unit_name(exp)),
                        theme.dim,
                    ),
                    Span::styled(
                        format!("{} {}", axis_number(top), format::unit_name(exp)),
                        theme.dim,
                    ),
                ])
                .style(theme.dim),
        )
        .legend_position(None);
    chart.render(
        Rect {
            height: chart_rows,
            ..inner
        },
        buf,
    );
    chrome::lines_at(
        buf,
        Rect {
            y: inner.y + chart_rows,
            height: legend_rows,
            ..inner
        },
        &legend,
    );
    theme.finish(area, buf);
}

/// Microseconds as "t+12.345 ms" from the first event of the trace.
fn elapsed(first: Option<i64>, t: Option<i64>) -> String {
    match (first, t) {
        (Some(f), Some(t)) => {
            let us = t.saturating_sub(f);
            if us.abs() >= 1_000_000 {
                format!("t+{:.3} s", us as f64 / 1e6)
            } else {
                format!("t+{:.3} ms", us as f64 / 1e3)
            }
        }
        _ => format!("time {}", format::NA),
    }
}

/// "alloc 4.00 MiB at 0x7f…" for an event.
fn describe_event(e: &TraceEntry) -> String {
    let action = e.action.as_str();
    match e.action {
        crate::alloc::TraceAction::Oom => format!(
            "{action} {} requested, {} free on the device",
            format::bytes(e.size),
            format::bytes(e.addr)
        ),
        crate::alloc::TraceAction::Snapshot => {
            format!("{action} ({} active)", format::bytes(e.size))
        }
        crate::alloc::TraceAction::Annotate => action.to_string(),
        _ => format!("{action} {} at {:#x}", format::bytes(e.size), e.addr),
    }
}

/// "reading trace: X of Y", while the viewer shows a file's segments stage.
pub fn trace_reading_text(v: &ViewerState) -> Option<String> {
    v.trace_reading.map(|r| {
        format!(
            "reading trace: {} of {}",
            format::bytes(r.read.min(r.total)),
            format::bytes(r.total)
        )
    })
}

/// The status text: "event i/N · action … · stream s · t+… · filters".
pub fn status_text(v: &ViewerState) -> String {
    let Some(d) = v.device() else {
        return format!("{}: no GPUs", v.file);
    };
    let n = d.len();
    let c = v.cursor();
    let mut parts = Vec::new();
    match v.current_event() {
        Some(e) => {
            parts.push(format!("event {c}/{n}"));
            parts.push(describe_event(e));
            parts.push(format!("stream {}", e.stream));
            let first = d.events().first().and_then(|e| e.time_us);
            parts.push(elapsed(first, e.time_us));
        }
        None if n == 0 => parts.push(match trace_reading_text(v) {
            Some(reading) => format!("the final state · {reading}"),
            None => "no trace: the final state".to_string(),
        }),
        None => parts.push(format!("event 0/{n} · before the first event")),
    }
    if let Some(p) = v.device_peaks().filter(|_| n > 0) {
        let at = |cursor: usize| {
            if cursor == c {
                "here".to_string()
            } else {
                format!("@{cursor}")
            }
        };
        parts.push(format!(
            "peak alloc {} {} · reserved {} {}",
            format::bytes(p.allocated.bytes),
            at(p.allocated.cursor),
            format::bytes(p.reserved.bytes),
            at(p.reserved.cursor)
        ));
    }
    match (v.mark_a, v.mark_b) {
        (None, None) => {}
        (a, b) => {
            let show = |m: Option<usize>| m.map_or_else(|| "-".to_string(), |m| m.to_string());
            parts.push(format!("A {} B {}", show(a), show(b)));
        }
    }
    for f in filters(v) {
        parts.push(format!("only {f}"));
    }
    parts.join(" · ")
}

fn render_status(area: Rect, buf: &mut Buffer, v: &ViewerState, keymap: &Keymap, theme: &Theme) {
    let area = area.intersection(buf.area);
    if area.height == 0 {
        return;
    }
    // Why the last key did nothing, in place of the position until the next key.
    let first = match &v.app.ui.notice {
        Some(n) => Line::styled(n.clone(), theme.warning),
        None => Line::styled(status_text(v), theme.header),
    };
    chrome::line_at(buf, area, 0, &first);
    let all = keymap.viewer_hints();
    let line = |k: usize| {
        let mut spans = Vec::new();
        for &(key, hint) in all.iter().take(k) {
            if !spans.is_empty() {
                spans.push(Span::raw("  "));
            }
            spans.push(Span::styled(key, theme.key));
            spans.push(Span::styled(format!(" {hint}"), theme.text));
        }
        Line::from(spans)
    };
    let mut k = all.len();
    while k > 2 && line(k).width() > usize::from(area.width) {
        k -= 1;
    }
    chrome::line_at(buf, area, 1, &line(k));
    theme.finish(area, buf);
}

/// A frame as "file:line name", the file cut from the left to fit.
fn frame_line(f: &crate::snapshot::Frame, width: usize) -> String {
    let tail = format!(":{} {}", f.shown_line(), f.name);
    let room = width.saturating_sub(tail.chars().count()).max(8);
    let file: String = if f.filename.chars().count() > room {
        let skip = f.filename.chars().count() - (room - 1);
        format!("…{}", f.filename.chars().skip(skip).collect::<String>())
    } else {
        f.filename.to_string()
    };
    format!("{file}{tail}")
}

/// When the selected block was allocated: "event k/N (t+… ms)", "before
/// the trace began", or n/a for a free block.
fn allocated_at(v: &ViewerState, b: &crate::snapshot::Block) -> String {
    let Some(d) = v.device() else {
        return format::NA.to_string();
    };
    if b.state == BlockState::Inactive {
        return format!("{} (a free block)", format::NA);
    }
    match d.allocated_by(v.cursor(), b.address) {
        Some(i) => {
            let first = d.events().first().and_then(|e| e.time_us);
            let t = d.events().get(i).and_then(|e| e.time_us);
            format!("at event {}/{} ({})", i + 1, d.len(), elapsed(first, t))
        }
        None => "before the trace began".to_string(),
    }
}

/// The allocation site of a block, in the viewer's grouping.
fn site_of_block(v: &ViewerState, b: &crate::snapshot::Block) -> String {
    if b.state == BlockState::Inactive {
        return format!("{} (a free block)", format::NA);
    }
    match site_key(&b.frames, v.grouping) {
        Some(k) => format!("{} (by {})", k.label(), v.grouping.name()),
        None => v.no_stack.describe().to_string(),
    }
}

/// The lines of the block-detail overlay for `width` columns.
pub fn detail_lines(v: &ViewerState, width: u16) -> Vec<Line<'static>> {
    let Some((seg, b)) = v.selected_block() else {
        return vec![Line::raw("no block selected")];
    };
    // Detail theme-independent words; styles come from the caller.
    let kv = |k: &str, val: String| Line::from(vec![Span::raw(format!("{k:<14}")), Span::raw(val)]);
    let state = match b.state {
        BlockState::ActiveAllocated => "allocated",
        BlockState::ActivePendingFree => "pending free (freed, waiting on stream events)",
        BlockState::Inactive => "free (cached in its segment)",
    };
    let seg_index = v
        .segments
        .iter()
        .position(|s| s.address == seg.address)
        .map_or(0, |i| i + 1);
    let mut lines = vec![
        kv("address", format!("{:#x}", b.address)),
        kv(
            "size",
            format!(
                "{} ({} B){}",
                format::bytes(b.size),
                b.size,
                if v.selected_size_inferred() {
                    " — inferred from the request (the trace records requests only)"
                } else {
                    ""
                }
            ),
        ),
        kv(
            if b.state == BlockState::Inactive {
                "last request"
            } else {
                "requested"
            },
            if b.state == BlockState::Inactive && b.requested_size == 0 {
                format::NA.to_string()
            } else {
                format!(
                    "{} ({} B)",
                    format::bytes(b.requested_size),
                    b.requested_size
                )
            },
        ),
        kv("state", state.to_string()),
        kv("stream", seg.stream.to_string()),
        kv("allocated", allocated_at(v, b)),
        kv("site", site_of_block(v, b)),
        kv(
            "segment",
            format!(
                "{seg_index}/{} at {:#x}, {} {} pool{}",
                v.segments.len(),
                seg.address,
                format::bytes(seg.total_size),
                match seg.segment_type {
                    PoolKind::Large => "large",
                    PoolKind::Small => "small",
                },
                if seg.is_expandable {
                    ", expandable"
                } else {
                    ""
                }
            ),
        ),
        Line::raw(""),
    ];
    if b.frames.is_empty() {
        let why = match b.state {
            BlockState::Inactive => "stack: n/a (a free block; no allocation recorded for it)",
            _ => {
                "stack: n/a (allocated before the trace began, or recorded without stacks; \
                 record with _record_memory_history(stacks=\"python\") or \"all\")"
            }
        };
        for l in chrome::wrap(why, width) {
            lines.push(Line::raw(l));
        }
    } else {
        let title = if b.state == BlockState::Inactive {
            "stack of its last allocation, innermost first"
        } else {
            "stack of the allocation, innermost first"
        };
        // Python frames answer "which line of my program"; the C++ frames
        // of stacks="all" recordings would bury them, so they are counted.
        let python: Vec<&crate::snapshot::Frame> = b
            .frames
            .iter()
            .filter(|f| f.filename.ends_with(".py"))
            .collect();
        let hidden = if python.is_empty() {
            0
        } else {
            b.frames.len() - python.len()
        };
        let shown: Vec<&crate::snapshot::Frame> = if python.is_empty() {
            b.frames.iter().collect()
        } else {
            python
        };
        let title = if hidden > 0 {
            format!("{title} (Python frames; {hidden} C++ frames not shown):")
        } else {
            format!("{title}:")
        };
        lines.push(Line::raw(title));
        for f in shown {
            lines.push(Line::raw(format!(
                "  {}",
                frame_line(f, usize::from(width).saturating_sub(2))
            )));
        }
    }
    lines
}

/// A centred popup at most `max_width` wide and as high as its lines,
/// `lines` made for the width inside its border.
fn render_text_popup<'a>(
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

fn render_detail(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let hint = " ↑/↓ block · Esc closes ";
    render_text_popup(area, buf, (110, " Block ", hint), theme, |width| {
        detail_lines(v, width)
            .into_iter()
            .map(|l| {
                if l.spans.len() == 2 {
                    Line::from(vec![
                        Span::styled(l.spans[0].content.to_string(), theme.key),
                        Span::styled(l.spans[1].content.to_string(), theme.text),
                    ])
                } else {
                    l.style(theme.text)
                }
            })
            .collect()
    });
}

fn share(bytes: u64, of: u64) -> String {
    if of == 0 {
        return "   -".to_string();
    }
    format!("{:>5.1}%", bytes as f64 * 100.0 / of as f64)
}

/// One site's row: bytes, share, blocks, label.
fn site_row(site: &Site, allocated: u64) -> String {
    format!(
        "{:>10} {} {:>5} blk  {}",
        format::bytes(site.bytes),
        share(site.bytes, allocated),
        site.blocks,
        site.label
    )
}

/// The lines of an expanded site: what it is, its stack (Python frames,
/// C++ frames counted or shown), its blocks.
pub fn site_detail_lines(v: &ViewerState, site: &Site, width: u16) -> Vec<String> {
    let width = usize::from(width);
    let mut lines = Vec::new();
    lines.push(format!(
        "{} · {} requested of {} in blocks",
        site.label,
        format::bytes(site.requested_bytes),
        format::bytes(site.bytes)
    ));
    if site.key.is_no_stack() {
        let why = match v.no_stack {
            crate::snapshot::sites::NoStackReason::BeforeRecording => {
                "These blocks were allocated before _record_memory_history began (typically \
                 the weights and the optimizer state): the file has no stack for them."
            }
            crate::snapshot::sites::NoStackReason::WithoutStacks => {
                "The file records no stacks: record with \
                 _record_memory_history(stacks=\"python\") or \"all\" to see sites."
            }
        };
        lines.extend(chrome::wrap(why, u16::try_from(width).unwrap_or(u16::MAX)));
    } else {
        let kept: Vec<&crate::snapshot::Frame> = informative(&site.stack)
            .filter(|f| !is_allocator(f))
            .collect();
        let python = kept.iter().filter(|f| is_python(f)).count();
        let cpp = kept.len() - python;
        let dropped = site.stack.len() - kept.len();
        let how = if v.show_cpp || python == 0 {
            format!(
                "stack, innermost first ({dropped} unwinder, allocator and interpreter frames \
                 dropped):"
            )
        } else {
            format!("stack, innermost first ({cpp} C++ frames not shown, x shows them):")
        };
        lines.push(how);
        for f in kept {
            if !v.show_cpp && python > 0 && !is_python(f) {
                continue;
            }
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

/// The sites pane: the live allocated memory at the cursor by site,
/// largest first; the selected site expands below the list.
fn render_sites(area: Rect, beside: bool, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    use ratatui::widgets::{Block, Borders};
    let Some(sites) = &v.sites else {
        return;
    };
    let title = Line::from(vec![
        Span::styled(" Sites ", theme.title_focused),
        Span::styled(
            format!(
                " by {} · {} sites · {} allocated · g groups ",
                v.grouping.name(),
                sites.sites.len(),
                format::bytes(sites.allocated)
            ),
            theme.text,
        ),
    ]);
    let borders = if beside {
        Borders::TOP | Borders::LEFT
    } else {
        Borders::TOP
    };
    let block = Block::new()
        .borders(borders)
        .border_style(theme.border_focused)
        .title(title);
    let Some(inner) = chrome::inside(block, area, buf, theme) else {
        return;
    };
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
    let list_h = if v.site_expanded {
        (inner.height / 3).max(2).min(inner.height)
    } else {
        inner.height
    };
    let rows = usize::from(list_h);
    let first = (v.selected_site + 1).saturating_sub(rows);
    for (row, (i, site)) in sites
        .sites
        .iter()
        .enumerate()
        .skip(first)
        .take(rows)
        .enumerate()
    {
        let selected = i == v.selected_site;
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
        let line = Line::styled(
            format!("{pointer}{}", site_row(site, sites.allocated)),
            style,
        );
        chrome::line_at(buf, inner, u16::try_from(row).unwrap_or(u16::MAX), &line);
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
        let lines: Vec<Line> = site_detail_lines(v, site, detail.width)
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
        chrome::lines_at(buf, detail, &lines);
    }
    theme.finish(area, buf);
}

/// The lines of the A/B comparison.
pub fn compare_lines(v: &ViewerState, width: u16) -> Vec<String> {
    let Some(c) = &v.compare else {
        return Vec::new();
    };
    let n = v.device().map_or(0, |d| d.len());
    let d = &c.diff;
    let signed = |x: i64| {
        let m = format::bytes(x.unsigned_abs());
        match x.signum() {
            1 => format!("+{m}"),
            -1 => format!("-{m}"),
            _ => m,
        }
    };
    let mut lines = vec![
        format!("A = event {}/{n}   B = event {}/{n}", c.a, c.b),
        format!("{:<11}{:>12}{:>12}{:>12}", "", "A", "B", "change"),
        format!(
            "{:<11}{:>12}{:>12}{:>12}",
            "reserved",
            format::bytes(d.reserved.before),
            format::bytes(d.reserved.after),
            signed(d.reserved.change)
        ),
        format!(
            "{:<11}{:>12}{:>12}{:>12}",
            "allocated",
            format::bytes(d.allocated.before),
            format::bytes(d.allocated.after),
            signed(d.allocated.change)
        ),
        format!(
            "{:<11}{:>12}{:>12}{:>+12}",
            "segments", d.segments.before, d.segments.after, d.segments.change
        ),
        format!(
            "segments only at A: {} ({}) · only at B: {} ({})",
            d.only_before.len(),
            format::bytes(d.only_before.iter().map(|s| s.total_size).sum()),
            d.only_after.len(),
            format::bytes(d.only_after.iter().map(|s| s.total_size).sum())
        ),
        String::new(),
        format!("live bytes by site (by {}), by change:", d.grouping.name()),
    ];
    let changed: Vec<_> = d
        .sites
        .iter()
        .filter(|s| s.kind != SiteChangeKind::Same)
        .collect();
    if changed.is_empty() {
        lines.push("  no site changed".to_string());
    }
    for s in changed.iter().take(8) {
        lines.push(format!(
            "  {:>11} {:<6} {:>10} → {:>10}  {}",
            signed(s.bytes.change),
            s.kind.name(),
            format::bytes(s.bytes.before),
            format::bytes(s.bytes.after),
            s.label
        ));
    }
    if changed.len() > 8 {
        lines.push(format!("  … {} more changed sites", changed.len() - 8));
    }
    lines.push(String::new());
    lines.push(format!(
        "allocated between A and B and still alive at B: {} in {} sites",
        format::bytes(c.between.allocated),
        c.between.sites.len()
    ));
    for s in c.between.sites.iter().take(8) {
        lines.push(format!("  {}", site_row(s, c.between.allocated)));
    }
    if c.between.sites.len() > 8 {
        lines.push(format!("  … {} more sites", c.between.sites.len() - 8));
    }
    let w = usize::from(width);
    lines
        .into_iter()
        .map(|l| {
            if l.chars().count() > w {
                let mut t: String = l.chars().take(w.saturating_sub(1)).collect();
                t.push('…');
                t
            } else {
                l
            }
        })
        .collect()
}

fn render_compare(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    render_text_popup(area, buf, (120, " A/B ", " Esc closes "), theme, |width| {
        compare_lines(v, width)
            .into_iter()
            .map(|l| Line::styled(l, theme.text))
            .collect()
    });
}
