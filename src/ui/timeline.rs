//! The timeline of the selected GPU: allocated, reserved and driver-used
//! bytes over the zoom window, with empty_cache and OOM events marked as
//! vertical lines. Time runs from "-window" on the left to "now" (or the
//! moment of the pause) on the right.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Widget};

use super::chrome::{self, LegendForm, LegendWords};
use super::format;
use super::theme::Theme;
use crate::app::state::{AppState, HistoryPoint, MarkerKind, Pane, PlottedDevice};
use crate::device::GpuReading;

/// The timeline pane of one frame.
pub struct TimelinePane<'a> {
    state: &'a AppState,
    theme: &'a Theme,
}

/// The smallest y-axis maximum (bytes): an idle GPU or an empty trace
/// still gets a readable scale (0 … 1 MiB, not 0 … 1 B).
pub(super) const MIN_SCALE_BYTES: u64 = 1 << 20;

/// Chart rows (the x axis and its labels take two) the legend gives way
/// to: three rows of plot. Rows beyond them go to the legend.
pub(super) const FULL_CHART_ROWS: u16 = 5;

/// The fewest chart rows drawn: two rows of plot. A one-row plot shows a
/// line with no scale to read it by; a shorter pane shows the legend with
/// the latest values instead.
pub(super) const MIN_CHART_ROWS: u16 = 4;

/// The rows a timeline's legend may take in a pane `inner_rows` high that
/// draws a chart: those beyond [`FULL_CHART_ROWS`], or one where the pane
/// is a row taller than [`MIN_CHART_ROWS`]. The legend gives way before
/// the chart does: three legend rows over a pane of six left no room for
/// a chart at all.
pub(super) fn legend_room(inner_rows: u16) -> u16 {
    match inner_rows.checked_sub(FULL_CHART_ROWS) {
        Some(extra) if extra > 0 => extra,
        _ => u16::from(inner_rows > MIN_CHART_ROWS),
    }
}

impl<'a> TimelinePane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        TimelinePane { state, theme }
    }

    /// The right edge of the window (ms): now, or when the timeline was paused.
    fn end_ms(&self) -> u64 {
        let ui = &self.state.ui;
        match (ui.paused, ui.paused_at_ms) {
            (true, Some(t)) => t.min(self.state.now_ms),
            _ => self.state.now_ms,
        }
    }
}

/// A timeline legend item's name in full and in the short words a
/// narrow legend gives way to ([`LegendWords::Short`] and
/// [`LegendWords::Bare`]): the legends take their names from these, and
/// the help says from the same what each short word stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegendName {
    pub full: &'static str,
    pub short: &'static str,
}

impl LegendName {
    /// The name in `words`.
    pub(crate) fn in_words(self, words: LegendWords) -> &'static str {
        match words {
            LegendWords::Full => self.full,
            LegendWords::Short | LegendWords::Bare => self.short,
        }
    }
}

pub(crate) const DRIVER_USED: LegendName = LegendName {
    full: "driver used",
    short: "used",
};
pub(crate) const RESERVED: LegendName = LegendName {
    full: "reserved",
    short: "res",
};
pub(crate) const ALLOCATED: LegendName = LegendName {
    full: "allocated",
    short: "alloc",
};
/// The dashboard's release marks: it sees cached memory go back to the
/// driver (`empty_cache()`, or PyTorch freeing its cache to retry a
/// failed cudaMalloc) and cannot tell which.
pub(crate) const CACHE_RELEASED: LegendName = LegendName {
    full: "cache released",
    short: "released",
};
/// The viewer's release marks: it knows empty_cache points from the trace.
pub(crate) const EMPTY_CACHE: LegendName = LegendName {
    full: "empty_cache",
    short: "released",
};
pub(crate) const OOM: LegendName = LegendName {
    full: "OOM",
    short: "OOM",
};

/// In a pane too short for a chart (under [`MIN_CHART_ROWS`] inside):
/// draws the legend's values in full words in `inner`, finishes `area`
/// and says so (`true`); else draws nothing.
pub(super) fn values_instead_of_chart(
    buf: &mut Buffer,
    area: Rect,
    inner: Rect,
    theme: &Theme,
    legend_items: impl Fn(LegendForm) -> Vec<Line<'static>>,
) -> bool {
    if inner.height >= MIN_CHART_ROWS {
        return false;
    }
    let summary = chrome::flow(
        legend_items(LegendForm {
            values: Some(format::bytes),
            words: LegendWords::Full,
        }),
        inner.width,
        2,
    );
    chrome::lines_at(buf, inner, &summary);
    theme.finish(area, buf);
    true
}

/// `items` (a timeline's series) with the legend entries of its event
/// marks, each only when there is one: `releases` marks of memory given
/// back to the driver, named `release` ([`CACHE_RELEASED`] on the
/// dashboard, [`EMPTY_CACHE`] in the viewer), and `ooms` OOMs, named
/// `oom`. The marks
/// come after the series, or first in the fewest words, where even those
/// may not fit the legend's rows and what an OOM mark is says more than a
/// line's name, which its colour and the breakdown tell too.
pub(super) fn with_mark_legend(
    mut items: Vec<Line<'static>>,
    (release, releases): (LegendName, usize),
    (oom, ooms): (LegendName, usize),
    words: LegendWords,
    theme: &Theme,
) -> Vec<Line<'static>> {
    let g = theme.glyphs();
    let mark = |m: Marker| match m {
        Marker::Custom(c) => c.to_string(),
        _ => "|".to_string(),
    };
    let counted = |word: &str, n: usize| match words {
        LegendWords::Bare => format!(" {word}"),
        _ => format!(" {word} ×{n}"),
    };
    let mut marks = Vec::new();
    if releases > 0 {
        marks.push(Line::from(vec![
            Span::styled(mark(g.release_mark), theme.marker_release),
            Span::raw(counted(release.in_words(words), releases)),
        ]));
    }
    if ooms > 0 {
        marks.push(Line::from(vec![
            Span::styled(mark(g.oom_mark), theme.marker_oom),
            Span::raw(counted(oom.in_words(words), ooms)),
        ]));
    }
    if words == LegendWords::Bare {
        items.splice(0..0, marks);
    } else {
        items.extend(marks);
    }
    items
}

/// The smallest "nice" axis maximum ≥ `v` (1, 1.2, 1.5, 2, 2.5, 3, 4, 5,
/// 6, 8 × a power of ten), so labels read as round numbers.
pub(crate) fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    let f = v / magnitude;
    let step = [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .find(|&s| s >= f - 1e-9)
        .unwrap_or(10.0);
    step * magnitude
}

/// An axis label number: no decimals when whole, else one.
pub(super) fn axis_number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The y-axis labels of a byte chart from 0 to `top` (in the unit of
/// `exp`) `chart_rows` high (its x axis and labels included): "0 B", the
/// middle and the top, every one with its unit. Under three plot rows the
/// middle has no row of its own (the chart puts it on the bottom one, over
/// "0 B", where the zero series is drawn), so only "0 B" and the top are
/// given. All are padded to one width: a shorter one drawn over a longer
/// one left "1 MiBiB".
pub(super) fn byte_axis_labels(
    top: f64,
    exp: usize,
    chart_rows: u16,
    theme: &Theme,
) -> Vec<Span<'static>> {
    byte_axis_labels_from(0.0, top, exp, chart_rows, theme)
}

/// A zoomed axis's number: the fewest decimals (up to six) that write
/// `v` whole. Its ends are whole steps of a narrow range (12.72 GiB …
/// 12.82 GiB): with [`axis_number`]'s one decimal the middle and the top
/// both read "12.8 GiB".
pub(super) fn exact_axis_number(v: f64) -> String {
    let decimals = (0..6)
        .find(|&d| {
            let scaled = v * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(6);
    format!("{v:.prec$}", prec = decimals as usize)
}

/// [`byte_axis_labels`] of a chart from `bottom` (in the unit of `exp`;
/// the viewer's zoomed timeline) to `top`: the lowest label is `bottom`
/// with its unit ("490 MiB"), "0 B" only where it is 0.
pub(super) fn byte_axis_labels_from(
    bottom: f64,
    top: f64,
    exp: usize,
    chart_rows: u16,
    theme: &Theme,
) -> Vec<Span<'static>> {
    let unit = format::unit_name(exp);
    let mut texts = if bottom > 0.0 {
        [bottom, (bottom + top) / 2.0, top]
            .map(|v| format!("{} {unit}", exact_axis_number(v)))
            .to_vec()
    } else {
        vec![
            "0 B".to_string(),
            format!("{} {unit}", axis_number(top / 2.0)),
            format!("{} {unit}", axis_number(top)),
        ]
    };
    // The x axis's line and its labels take two of the chart's rows.
    if chart_rows.saturating_sub(2) < 3 {
        texts.remove(1);
    }
    let width = texts.iter().map(|t| t.chars().count()).max().unwrap_or(0);
    texts
        .iter()
        .map(|t| Span::styled(format!("{t:<width$}"), theme.dim))
        .collect()
}

/// A vertical line at `x` from 0 to `top` for a chart `chart_rows` high:
/// one point per row, so a one-cell marker draws the full height.
pub(super) fn vertical_line(x: f64, chart_rows: u16, top: f64) -> impl Iterator<Item = (f64, f64)> {
    vertical_line_from(x, chart_rows, 0.0, top)
}

/// [`vertical_line`] from `bottom` to `top` (the viewer's zoomed
/// timeline): a point per row within the axis's bounds, which a chart
/// draws all of (from 0 the rows under `bottom` were off the chart, and
/// the line had gaps).
pub(super) fn vertical_line_from(
    x: f64,
    chart_rows: u16,
    bottom: f64,
    top: f64,
) -> impl Iterator<Item = (f64, f64)> {
    let rows = f64::from(chart_rows.max(1));
    (0..=chart_rows).map(move |k| (x, bottom + (top - bottom) * f64::from(k) / rows))
}

/// One series: its runs of points (seconds before the end, value in the
/// axis unit), each drawn as a line of its own.
struct Series {
    runs: Vec<Vec<(f64, f64)>>,
    latest: Option<u64>,
}

impl Series {
    fn is_empty(&self) -> bool {
        self.runs.iter().all(Vec::is_empty)
    }
}

/// Samples further apart than this many intervals leave a gap in the line
/// (sampling stalled or fell behind): a line drawn
/// across it would show figures nobody measured.
const GAP_INTERVALS: u64 = 3;

/// `value` of the points of `points` on `device` as a series; a new run
/// starts after a gap of more than `gap_ms` and after points of another
/// device (the line never joins two devices' figures).
fn series(
    points: &[&HistoryPoint],
    device: PlottedDevice,
    end_ms: u64,
    exp: usize,
    gap_ms: u64,
    value: fn(&HistoryPoint) -> Option<u64>,
) -> Series {
    let mut s = Series {
        runs: Vec::new(),
        latest: None,
    };
    let mut last_t: Option<u64> = None;
    for p in points {
        if p.device != device {
            last_t = None;
            continue;
        }
        if let Some(v) = value(p) {
            let gap = last_t.is_none_or(|t| p.t_ms.saturating_sub(t) > gap_ms);
            if gap {
                s.runs.push(Vec::new());
            }
            // Seconds relative to the end: −window … 0.
            let x = (p.t_ms as f64 - end_ms as f64) / 1000.0;
            if let Some(run) = s.runs.last_mut() {
                run.push((x, format::in_unit(v, exp)));
            }
            s.latest = Some(v);
            last_t = Some(p.t_ms);
        }
    }
    s
}

/// A chart dataset: `data` drawn as a line or scattered points.
pub(super) fn dataset<'d>(
    kind: GraphType,
    marker: Marker,
    style: Style,
    data: &'d [(f64, f64)],
) -> Dataset<'d> {
    Dataset::default()
        .marker(marker)
        .graph_type(kind)
        .style(style)
        .data(data)
}

/// A timeline chart's datasets in the order they are drawn, each over the
/// ones before it: `lines`, then the marks (`releases`, the points of the
/// empty_cache marks, and `ooms`, the OOMs'), then `on_top` (the viewer's
/// cursor). The marks come after the lines: in a chart of two or three
/// rows nearly every cell of a mark's column is also a line's, and an OOM
/// drawn first was lost under them. The dashboard's chart and the
/// viewer's share this order.
pub(super) fn layered_datasets<'d>(
    lines: Vec<Dataset<'d>>,
    releases: &'d [(f64, f64)],
    ooms: &'d [(f64, f64)],
    on_top: Option<Dataset<'d>>,
    theme: &Theme,
) -> Vec<Dataset<'d>> {
    let g = theme.glyphs();
    let mut datasets = lines;
    datasets.push(dataset(
        GraphType::Scatter,
        g.release_mark,
        theme.marker_release,
        releases,
    ));
    datasets.push(dataset(
        GraphType::Scatter,
        g.oom_mark,
        theme.marker_oom,
        ooms,
    ));
    datasets.extend(on_top);
    datasets
}

impl Widget for TimelinePane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let g = theme.glyphs();
        let ui = &self.state.ui;
        let window_ms = ui.window_ms();
        let window_s = window_ms / 1000;
        let end = self.end_ms();
        let gpu = self.state.selected();
        // The device plotted: the one of the latest point shown, else the
        // one the allocator runs on now. The stress panel's scenario device
        // stands in for the GPU's figures while a scenario runs, as in the
        // breakdown; the other device's points are not drawn, nor counted
        // in the scale.
        let device = gpu.map(|g| {
            g.history
                .device_at(end)
                .unwrap_or_else(|| PlottedDevice::of(g.allocator.as_ref()))
        });

        let mut detail = Vec::new();
        if let Some(gpu) = gpu {
            let on = match device {
                Some(PlottedDevice::Scenario { .. }) => "scenario device · ",
                _ => "",
            };
            detail.push(Span::styled(format!("{} · {on}", gpu.label()), theme.text));
        }
        detail.push(Span::styled(
            format!("last {}", format::seconds(window_s)),
            theme.text,
        ));
        // A lost GPU's chart ends where its samples did: said in the title,
        // and its legend gives no latest values (they would read as now).
        // "NO ACCESS" for a GPU this user may not read: "LOST" is for one
        // that is gone.
        let unanswered = gpu.and_then(|g| match g.reading {
            GpuReading::Lost { cause, .. } => Some(cause),
            GpuReading::Ok(_) => None,
        });
        let lost = unanswered.is_some();
        if let Some(cause) = unanswered {
            let word = cause.label().to_uppercase();
            detail.push(Span::styled(format!(" · {word}"), theme.critical));
        }
        if ui.paused {
            detail.push(Span::styled(" · PAUSED", theme.warning));
        }
        let block = chrome::pane_block_within(
            Pane::Timeline,
            detail,
            ui.focus == Pane::Timeline,
            false,
            theme,
            usize::from(area.width),
        );
        let Some(inner) = chrome::inside(block, area, buf, theme) else {
            return;
        };
        let Some(gpu) = gpu else {
            chrome::line_at(
                buf,
                inner,
                0,
                &Line::styled(super::format::no_gpu(self.state), theme.dim),
            );
            theme.finish(area, buf);
            return;
        };

        let device = device.unwrap_or(PlottedDevice::Gpu);
        let from = end.saturating_sub(window_ms);
        let points: Vec<&HistoryPoint> = gpu
            .history
            .points
            .iter()
            .filter(|p| p.t_ms >= from && p.t_ms <= end)
            .collect();
        let max = points
            .iter()
            .filter(|p| p.device == device)
            .flat_map(|p| [p.allocated, p.reserved, p.driver_used])
            .flatten()
            .max();
        let Some(max) = max else {
            let text = if points.iter().all(|p| p.device != device) {
                format!("no samples in the last {}", format::seconds(window_s))
            } else {
                "driver used: n/a (the driver does not report memory for this GPU)".to_string()
            };
            chrome::line_at(buf, inner, 0, &Line::styled(text, theme.dim));
            theme.finish(area, buf);
            return;
        };
        let max = max.max(MIN_SCALE_BYTES);
        let exp = format::unit_exp(max);
        let top = nice_ceiling(format::in_unit(max, exp));
        let gap_ms = self
            .state
            .status
            .sample_interval_ms
            .max(1)
            .saturating_mul(GAP_INTERVALS);
        let mut driver = series(&points, device, end, exp, gap_ms, |p| p.driver_used);
        let mut reserved = series(&points, device, end, exp, gap_ms, |p| p.reserved);
        let mut allocated = series(&points, device, end, exp, gap_ms, |p| p.allocated);
        if lost {
            for s in [&mut driver, &mut reserved, &mut allocated] {
                s.latest = None;
            }
        }

        // A mark is of the device of the point it was made with.
        let shown_marks: Vec<&crate::app::state::Marker> = gpu
            .history
            .markers
            .iter()
            .filter(|m| m.t_ms >= from && m.t_ms <= end)
            .filter(|m| gpu.history.device_at(m.t_ms).is_none_or(|d| d == device))
            .collect();
        let markers: Vec<(f64, MarkerKind)> = shown_marks
            .iter()
            .map(|m| ((m.t_ms as f64 - end as f64) / 1000.0, m.kind))
            .collect();
        // The legend counts releases by their marks and OOMs one by one:
        // a mark stands for every OOM between two samples ("OOM ×16" over
        // a loop that failed 1,600 times read as 16).
        let releases = shown_marks
            .iter()
            .filter(|m| m.kind == MarkerKind::EmptyCache)
            .count();
        let ooms = shown_marks
            .iter()
            .filter(|m| m.kind == MarkerKind::Oom)
            .fold(0u64, |n, m| n.saturating_add(m.count.max(1)));
        let ooms = usize::try_from(ooms).unwrap_or(usize::MAX);

        // The legend, with latest values when they fit on one line, as
        // everywhere ("1.04 GiB"), else without them; in shorter words
        // where the rows the chart leaves need them.
        let item = |marker: Marker, style: Style, name: &str, v: Option<u64>, form: LegendForm| {
            let mut spans = vec![
                Span::styled(theme.series_glyph(marker), style),
                Span::raw(format!(" {name}")),
            ];
            if let (Some(shown), Some(v)) = (form.values, v) {
                spans.push(Span::raw(format!(" {}", shown(v))));
            }
            Line::from(spans)
        };
        let legend_items = |form: LegendForm| {
            let mut items = vec![item(
                g.series_driver,
                theme.context,
                DRIVER_USED.in_words(form.words),
                driver.latest,
                form,
            )];
            if reserved.is_empty() && allocated.is_empty() {
                let na = if form.words == LegendWords::Full {
                    format!("{}, {}: n/a", ALLOCATED.full, RESERVED.full)
                } else {
                    format!("{}: n/a", ALLOCATED.short)
                };
                items.push(Line::styled(na, theme.dim));
            } else {
                items.push(item(
                    g.series_reserved,
                    theme.cached_free,
                    RESERVED.in_words(form.words),
                    reserved.latest,
                    form,
                ));
                items.push(item(
                    g.series_allocated,
                    theme.allocated,
                    ALLOCATED.in_words(form.words),
                    allocated.latest,
                    form,
                ));
            }
            with_mark_legend(
                items,
                (CACHE_RELEASED, releases),
                (OOM, ooms),
                form.words,
                theme,
            )
        };
        // Too short for a chart: the latest values.
        if values_instead_of_chart(buf, area, inner, theme, legend_items) {
            return;
        }
        let legend = chrome::fit_legend(legend_items, inner.width, legend_room(inner.height));
        let legend_rows = u16::try_from(legend.len()).unwrap_or(u16::MAX);
        let chart_rows = inner.height.saturating_sub(legend_rows);
        let chart_area = Rect {
            height: chart_rows,
            ..inner
        };
        let legend_area = Rect {
            y: inner.y + chart_rows,
            height: legend_rows,
            ..inner
        };

        let column = |kind: MarkerKind| -> Vec<(f64, f64)> {
            markers
                .iter()
                .filter(|m| m.1 == kind)
                .flat_map(|&(x, _)| vertical_line(x, chart_rows, top))
                .collect()
        };
        let release_points = column(MarkerKind::EmptyCache);
        let oom_points = column(MarkerKind::Oom);

        // One line per run, so that gaps stay gaps; allocated drawn last
        // of the lines, on top of them.
        let mut lines = Vec::new();
        for (series, marker, style) in [
            (&driver, g.series_driver, theme.context),
            (&reserved, g.series_reserved, theme.cached_free),
            (&allocated, g.series_allocated, theme.allocated),
        ] {
            for run in &series.runs {
                lines.push(dataset(GraphType::Line, marker, style, run));
            }
        }
        let datasets = layered_datasets(lines, &release_points, &oom_points, None, theme);
        let half = window_s / 2;
        let right_label = if ui.paused { "paused" } else { "now" };
        let x_labels = vec![
            Span::styled(format!("-{}", format::seconds(window_s)), theme.dim),
            Span::styled(format!("-{}", format::seconds(half)), theme.dim),
            Span::styled(right_label, theme.dim),
        ];
        // Every label carries its unit, as the figures elsewhere do.
        let y_labels = byte_axis_labels(top, exp, chart_rows, theme);
        let chart = Chart::new(datasets)
            .x_axis(
                Axis::default()
                    .bounds([-(window_s as f64), 0.0])
                    .labels(x_labels)
                    .style(theme.dim),
            )
            .y_axis(
                Axis::default()
                    .bounds([0.0, top])
                    .labels(y_labels)
                    .style(theme.dim),
            )
            .legend_position(None);
        chart.render(chart_area, buf);
        chrome::lines_at(buf, legend_area, &legend);
        theme.finish(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceiling_rounds_up_to_a_readable_axis_maximum() {
        assert_eq!(nice_ceiling(21.3), 25.0);
        assert_eq!(nice_ceiling(20.0), 20.0);
        assert_eq!(nice_ceiling(0.7), 0.8);
        assert_eq!(nice_ceiling(810.0), 1000.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
    }

    #[test]
    fn a_gap_in_the_samples_breaks_the_line_instead_of_bridging_it() {
        let at = |t_ms: u64, v: u64| HistoryPoint {
            t_ms,
            allocated: Some(v),
            reserved: None,
            driver_used: None,
            device: PlottedDevice::Gpu,
        };
        // 1 s samples, then nothing for 20 s (the viewer was open).
        let points = [
            at(0, 1),
            at(1000, 2),
            at(2000, 3),
            at(22_000, 4),
            at(23_000, 5),
        ];
        let refs: Vec<&HistoryPoint> = points.iter().collect();
        let s = series(&refs, PlottedDevice::Gpu, 23_000, 0, 3000, |p| p.allocated);
        let lengths: Vec<usize> = s.runs.iter().map(Vec::len).collect();
        assert_eq!(lengths, vec![3, 2]);
        assert_eq!(s.latest, Some(5));
        // Unknown figures are no gap; late samples within 3 intervals are none either.
        let unknown = HistoryPoint {
            allocated: None,
            ..at(1500, 0)
        };
        let points = [at(0, 1), unknown, at(2900, 2)];
        let refs: Vec<&HistoryPoint> = points.iter().collect();
        let s = series(&refs, PlottedDevice::Gpu, 3000, 0, 3000, |p| p.allocated);
        assert_eq!(s.runs.len(), 1);
        assert!(!s.is_empty());
        let none = series(&[], PlottedDevice::Gpu, 0, 0, 3000, |p| p.allocated);
        assert!(none.is_empty());
    }

    #[test]
    fn a_series_draws_one_devices_points_and_breaks_where_the_device_changed() {
        let on = |t_ms: u64, v: u64, device: PlottedDevice| HistoryPoint {
            t_ms,
            allocated: Some(v),
            reserved: None,
            driver_used: None,
            device,
        };
        let scenario = PlottedDevice::Scenario { capacity: 24 };
        let gpu = PlottedDevice::Gpu;
        // One sample on the scenario device between two runs on the GPU,
        // all 1 s apart: no time gap, but the GPU's line must not bridge it.
        let points = [
            on(0, 62, gpu),
            on(1000, 62, gpu),
            on(2000, 5, scenario),
            on(3000, 1, gpu),
        ];
        let refs: Vec<&HistoryPoint> = points.iter().collect();
        let s = series(&refs, gpu, 3000, 0, 3000, |p| p.allocated);
        let lengths: Vec<usize> = s.runs.iter().map(Vec::len).collect();
        assert_eq!(lengths, vec![2, 1]);
        let s = series(&refs, scenario, 3000, 0, 3000, |p| p.allocated);
        assert_eq!(s.runs, vec![vec![(-1.0, 5.0)]]);
        assert_eq!(s.latest, Some(5));
    }

    #[test]
    fn the_legend_has_rows_only_beyond_a_chart_of_two_or_three_plot_rows() {
        let room: Vec<u16> = (0..=9).map(legend_room).collect();
        // Four rows inside: the chart alone (two rows of plot); five: one
        // legend row under the same chart; six: a row of plot more; then
        // every row more goes to the legend.
        assert_eq!(room, vec![0, 0, 0, 0, 0, 1, 1, 2, 3, 4]);
    }

    #[test]
    fn axis_numbers_drop_decimals_when_whole() {
        assert_eq!(axis_number(25.0), "25");
        assert_eq!(axis_number(12.5), "12.5");
    }

    #[test]
    fn a_vertical_line_has_one_point_per_chart_row_from_zero_to_the_top() {
        let points: Vec<(f64, f64)> = vertical_line(7.0, 4, 20.0).collect();
        assert_eq!(
            points,
            vec![
                (7.0, 0.0),
                (7.0, 5.0),
                (7.0, 10.0),
                (7.0, 15.0),
                (7.0, 20.0)
            ]
        );
        let flat: Vec<(f64, f64)> = vertical_line(1.0, 0, 8.0).collect();
        assert_eq!(
            flat,
            vec![(1.0, 0.0)],
            "no rows: one point, no division by 0"
        );
    }
}
