//! The viewer's timeline: reserved and allocated bytes over the trace's
//! events, with the cursor, empty_cache, OOM and `snapshot`/`annotate`
//! events as vertical lines.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Widget};

use super::focused;
use super::status::trace_reading_text;
use crate::app::state::Pane;
use crate::app::viewer::ViewerState;
use crate::snapshot::scrub::{MarkKind, Point};
use crate::snapshot::sites::no_trace_cause;
use crate::ui::chrome::{self, LegendForm, LegendWords, pane_block};
use crate::ui::format;
use crate::ui::theme::Theme;
use crate::ui::timeline::{
    ALLOCATED, EMPTY_CACHE, LegendName, MIN_SCALE_BYTES, OOM, RESERVED, byte_axis_labels_from,
    dataset, exact_axis_number, layered_datasets, legend_room, nice_ceiling,
    values_instead_of_chart, vertical_line_from, with_mark_legend,
};

/// The cursor's mark, one word however narrow the legend.
const CURSOR: LegendName = LegendName {
    full: "cursor",
    short: "cursor",
};

/// The `snapshot`/`annotate` entries' marks: a loop that snapshots each
/// step leaves one per iteration.
const MARKER: LegendName = LegendName {
    full: "snapshot/annotate",
    short: "marker",
};

/// The names of the legend's items, in the order it lists them in full
/// words: the legend takes its names from here, and the viewer's help
/// says from here what its short words stand for.
pub const LEGEND_NAMES: [LegendName; 6] = [RESERVED, ALLOCATED, CURSOR, MARKER, EMPTY_CACHE, OOM];

/// The legend's items in `form`: the series with their values at the
/// cursor (`now`; "n/a" without one), the cursor, and the marks there are
/// (`notes` snapshot/annotate entries, `releases` empty_cache points,
/// `ooms` OOMs). The values as everywhere
/// ("3.52 GiB") where they fit, else none; in shorter words
/// where the rows the chart leaves need them.
fn legend_items(
    form: LegendForm,
    now: Option<Point>,
    (notes, releases, ooms): (usize, usize, usize),
    theme: &Theme,
) -> Vec<Line<'static>> {
    let g = theme.glyphs();
    let [reserved, allocated, cursor, note, released, oom] = LEGEND_NAMES;
    let shown = |v: fn(&Point) -> u64| match (form.values, now) {
        (Some(f), Some(p)) => format!(" {}", f(v(&p))),
        (None, Some(_)) => String::new(),
        (_, None) => format!(" {}", format::NA),
    };
    let series = |marker, style, name: LegendName, v: fn(&Point) -> u64| {
        Line::from(vec![
            Span::styled(theme.series_glyph(marker), style),
            Span::raw(format!(" {}{}", name.in_words(form.words), shown(v))),
        ])
    };
    let mut items = vec![
        series(g.series_reserved, theme.cached_free, reserved, |p| {
            p.reserved
        }),
        series(g.series_allocated, theme.allocated, allocated, |p| {
            p.allocated
        }),
        Line::from(vec![
            Span::styled(g.timeline_cursor.to_string(), theme.key),
            Span::raw(format!(" {}", cursor.in_words(form.words))),
        ]),
    ];
    if notes > 0 {
        let glyph = match g.note_mark {
            Marker::Custom(c) => c.to_string(),
            _ => ":".to_string(),
        };
        let count = match form.words {
            LegendWords::Bare => String::new(),
            _ => format!(" ×{notes}"),
        };
        items.push(Line::from(vec![
            Span::styled(glyph, theme.marker_note),
            Span::raw(format!(" {}{count}", note.in_words(form.words))),
        ]));
    }
    with_mark_legend(items, (released, releases), (oom, ooms), form.words, theme)
}

/// Where the cursor's column covers a mark (an empty_cache point under
/// the cursor at the trace's end, an OOM it stands on): the mark's glyph
/// drawn back in the cursor's colours reversed, so the legend's count of
/// marks can be found on the chart, and the cursor's column still reads as
/// the cursor. `uncovered`: the same chart drawn without the cursor.
fn show_marks_under_cursor(buf: &mut Buffer, uncovered: &Buffer, area: Rect, theme: &Theme) {
    let g = theme.glyphs();
    let glyph = |m: Marker| match m {
        Marker::Custom(c) => Some(c.to_string()),
        _ => None,
    };
    let cursor = g.timeline_cursor.to_string();
    let marks: Vec<String> = [g.release_mark, g.oom_mark, g.note_mark]
        .into_iter()
        .filter_map(glyph)
        .collect();
    let area = area.intersection(buf.area).intersection(uncovered.area);
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            let under = uncovered[(x, y)].symbol();
            if buf[(x, y)].symbol() == cursor && marks.iter().any(|m| m == under) {
                let under = under.to_string();
                buf[(x, y)]
                    .set_symbol(&under)
                    .set_style(theme.key.add_modifier(Modifier::REVERSED));
            }
        }
    }
}

/// Downsamples a series of `n` values to at most `columns` × 2 points: per
/// bucket of events, the maximum (`highest` of a range of indices: peaks
/// must not vanish between samples), then the last value.
fn bucketed(
    n: usize,
    highest: impl Fn(std::ops::Range<usize>) -> u64,
    columns: usize,
    exp: usize,
) -> Vec<(f64, f64)> {
    if n == 0 {
        return Vec::new();
    }
    let buckets = (columns * 2).max(1);
    let per = n.div_ceil(buckets).max(1);
    (0..n.div_ceil(per))
        .map(|k| {
            let start = k * per;
            let max = highest(start..(start + per).min(n));
            (start as f64, format::in_unit(max, exp))
        })
        .chain(std::iter::once((
            (n - 1) as f64,
            format::in_unit(highest(n - 1..n), exp),
        )))
        .collect()
}

pub(super) fn render_timeline(area: Rect, buf: &mut Buffer, v: &ViewerState, theme: &Theme) {
    let g = theme.glyphs();
    let Some(d) = v.device() else {
        // A file with no GPU (no segments, no trace): nothing to chart.
        let title = vec![Span::styled("no trace", theme.text)];
        let block = pane_block(
            Pane::Timeline,
            title,
            focused(v, Pane::Timeline),
            false,
            theme,
        );
        if let Some(inner) = chrome::inside(block, area, buf, theme) {
            chrome::note_at(
                buf,
                inner,
                "the file has no trace: no events to step through",
                theme.dim,
            );
            theme.finish(area, buf);
        }
        return;
    };
    let n = d.len();
    let cursor = v.cursor();
    let zoom = v.timeline_zoom();
    // The title is cut by the border's width: a cut number would read as
    // another number, so the longest variant that fits whole is shown.
    let room = usize::from(area.width).saturating_sub(Pane::Timeline.title().chars().count() + 5);
    // A file without a trace has no events to be at.
    let detail = if n == 0 && v.trace_reading.is_none() {
        vec![
            format!("GPU {} · no trace", d.device),
            "no trace".to_string(),
        ]
    } else {
        let where_ = [
            format!("GPU {} · events 0…{n} · cursor {cursor}", d.device),
            format!("GPU {} · cursor {cursor}/{n}", d.device),
            format!("cursor {cursor}/{n}"),
            format!("{cursor}/{n}"),
        ];
        match zoom {
            None => where_.to_vec(),
            // Zoomed, that 0 B is off the chart outranks where the cursor
            // is (the status line says that too): its bottom in full
            // where it fits, else "zoomed" alone.
            Some(z) => {
                let from = format!(
                    "zoomed: from {} {}",
                    exact_axis_number(z.bottom),
                    format::unit_name(z.exp)
                );
                (where_.iter().map(|w| format!("{w} · {from}")))
                    .chain(where_.iter().map(|w| format!("{w} · zoomed")))
                    .chain([from.clone(), "zoomed".to_string()])
                    .collect()
            }
        }
    }
    .into_iter()
    // While a filter is on, the lines are still every segment's (the panes
    // beside name the filter): the title says so in each form, before the
    // cursor's words go.
    .flat_map(|t| {
        if super::filters(v).is_empty() {
            vec![t]
        } else {
            vec![format!("{t} · {}", super::UNFILTERED_NOTE)]
        }
    })
    .chain((!super::filters(v).is_empty() && n > 0).then(|| super::UNFILTERED_NOTE.to_string()))
    .into_iter()
    .find(|t| t.chars().count() <= room)
    .map(|t| vec![Span::styled(t, theme.text)])
    .unwrap_or_default();
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
        let note = match (trace_reading_text(v), &v.trace_error) {
            (Some(reading), _) => format!(
                "{reading}: the final state is shown; the timeline, stepping and marks \
                 come with the trace"
            ),
            (None, Some(e)) => format!(
                "the trace could not be read, so the final state is all there is (no \
                 timeline, stepping or marks): {e}"
            ),
            (None, None) => format!(
                "no trace: the snapshot holds only its final state ({})",
                no_trace_cause(&v.scrub.snapshot).how_to_get_a_trace()
            ),
        };
        chrome::note_at(buf, inner, &note, theme.dim);
        theme.finish(area, buf);
        return;
    }
    // From the scrub's table of maxima: a frame costs the same for a trace
    // of millions of events as for a short one.
    let n_points = d.points.len();
    let (bottom, top, exp) = match zoom {
        Some(z) => (z.bottom, z.top, z.exp),
        None => {
            let (peak_r, peak_a) = d.peaks();
            let max = peak_r.max(peak_a).max(MIN_SCALE_BYTES);
            let exp = format::unit_exp(max);
            (0.0, nice_ceiling(format::in_unit(max, exp)), exp)
        }
    };
    let columns = usize::from(inner.width);
    let reserved_pts = bucketed(n_points, |r| d.highest(r).0, columns, exp);
    let allocated_pts = bucketed(n_points, |r| d.highest(r).1, columns, exp);
    let now = d.points.get(cursor).copied();
    let marks = (
        d.count(MarkKind::Marker),
        d.count(MarkKind::EmptyCache),
        d.count(MarkKind::Oom),
    );
    let legend_items = |form: LegendForm| legend_items(form, now, marks, theme);
    // Too short for a chart: the values at the cursor.
    if values_instead_of_chart(buf, area, inner, theme, legend_items) {
        return;
    }
    let legend = chrome::fit_legend(legend_items, inner.width, legend_room(inner.height));
    let legend_rows = u16::try_from(legend.len()).unwrap_or(u16::MAX);
    let chart_rows = inner.height.saturating_sub(legend_rows);
    let column = |xs: Vec<f64>| -> Vec<(f64, f64)> {
        xs.into_iter()
            .flat_map(|x| vertical_line_from(x, chart_rows, bottom, top))
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
    let note_pts = column(at(MarkKind::Marker));
    let cursor_pts = column(vec![cursor as f64]);
    let cursor_marker = Marker::Custom(g.timeline_cursor);
    let lines = || {
        vec![
            // Under the lines: a loop of a thousand iterations marks every
            // column, and the lines must still show over them.
            dataset(
                GraphType::Scatter,
                g.note_mark,
                theme.marker_note,
                &note_pts,
            ),
            dataset(
                GraphType::Line,
                g.series_reserved,
                theme.cached_free,
                &reserved_pts,
            ),
            dataset(
                GraphType::Line,
                g.series_allocated,
                theme.allocated,
                &allocated_pts,
            ),
        ]
    };
    let chart_area = Rect {
        height: chart_rows,
        ..inner
    };
    let draw = |datasets: Vec<Dataset<'_>>, target: &mut Buffer| {
        Chart::new(datasets)
            .x_axis(
                Axis::default()
                    .bounds([0.0, n as f64])
                    // Events applied, the N of the status line's "event N/M"
                    // and the GPUs row's "@N", 0 before the first event: no
                    // "#", which names an event by its index in the file (one
                    // less). The middle one blank where it is no count of its
                    // own (a one-event trace read "0 0 1"). Three labels
                    // either way: ratatui drew none of two here.
                    .labels(vec![
                        Span::styled("0", theme.dim),
                        Span::styled(
                            if n >= 2 {
                                (n / 2).to_string()
                            } else {
                                String::new()
                            },
                            theme.dim,
                        ),
                        Span::styled(n.to_string(), theme.dim),
                    ])
                    .style(theme.dim),
            )
            .y_axis(
                Axis::default()
                    .bounds([bottom, top])
                    // Every label carries its unit and all share one width,
                    // as on the dashboard; zoomed, the lowest is not "0 B".
                    .labels(byte_axis_labels_from(bottom, top, exp, chart_rows, theme))
                    .style(theme.dim),
            )
            .legend_position(None)
            .render(chart_area, target);
    };
    // The chart without the cursor first, aside: the marks its column
    // covers are drawn back into it below.
    let mut uncovered = Buffer::empty(chart_area);
    draw(
        layered_datasets(lines(), &release_pts, &oom_pts, None, theme),
        &mut uncovered,
    );
    // The cursor on top: where it is on a mark, the status line names the
    // event.
    draw(
        layered_datasets(
            lines(),
            &release_pts,
            &oom_pts,
            Some(dataset(
                GraphType::Scatter,
                cursor_marker,
                theme.key,
                &cursor_pts,
            )),
            theme,
        ),
        buf,
    );
    show_marks_under_cursor(buf, &uncovered, chart_area, theme);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_names_its_items_only_with_the_listed_names() {
        // The help defines the short words from `LEGEND_NAMES`: a name the
        // legend wrote from anywhere else would go undefined.
        let theme = Theme::colored();
        let now = Some(Point {
            allocated: 1 << 30,
            reserved: 2 << 30,
        });
        for words in [LegendWords::Full, LegendWords::Short, LegendWords::Bare] {
            let form = LegendForm {
                values: None,
                words,
            };
            let items = legend_items(form, now, (5, 3, 1), &theme);
            let names: Vec<String> = items
                .iter()
                .map(|item| {
                    // "▌ cursor", "┊ released ×3": the words after the glyph,
                    // before the count.
                    let text = item.to_string();
                    let text = text.split_once(' ').map_or("", |(_, rest)| rest);
                    text.split(" ×").next().unwrap_or_default().to_string()
                })
                .collect();
            let mut listed: Vec<String> = LEGEND_NAMES
                .iter()
                .map(|n| n.in_words(words).to_string())
                .collect();
            // In the fewest words the marks go first.
            if words == LegendWords::Bare {
                listed.rotate_right(2);
            }
            assert_eq!(names, listed, "{words:?}");
        }
    }

    /// [`bucketed`] of a plain list of values.
    fn bucketed_values(values: &[u64], columns: usize, exp: usize) -> Vec<(f64, f64)> {
        let highest = |r: std::ops::Range<usize>| values[r].iter().copied().max().unwrap_or(0);
        bucketed(values.len(), highest, columns, exp)
    }

    #[test]
    fn bucketed_keeps_every_buckets_peak_and_ends_on_the_last_value() {
        // Ten events into one column (two buckets of five): the spike at
        // event 3 survives the downsampling, and the line ends at event 9.
        let values = [1, 2, 3, 90, 4, 5, 6, 7, 8, 9];
        assert_eq!(
            bucketed_values(&values, 1, 0),
            vec![(0.0, 90.0), (5.0, 9.0), (9.0, 9.0)]
        );
    }

    #[test]
    fn bucketed_draws_every_event_when_the_columns_outnumber_them() {
        let values = [4 << 20, 8 << 20, 2 << 20];
        assert_eq!(
            bucketed_values(&values, 80, 2),
            vec![(0.0, 4.0), (1.0, 8.0), (2.0, 2.0), (2.0, 2.0)]
        );
        assert!(bucketed_values(&[], 80, 2).is_empty(), "no events, no line");
        assert_eq!(
            bucketed_values(&[7], 0, 0),
            vec![(0.0, 7.0), (0.0, 7.0)],
            "no columns still draws"
        );
    }
}
