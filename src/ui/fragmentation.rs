//! Fragmentation of the selected GPU's allocator: how its cached free
//! memory is scattered. The figures on top (fragmentation, largest free
//! block, external/non-releasable/internal free), then a histogram of free
//! block sizes in log2 buckets, one line per bucket (a pane too short for
//! bars: "count×bound" items on a line or two).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, right};
use super::format;
use super::theme::{Glyphs, Theme};
use crate::alloc::Fragmentation;
use crate::alloc::analysis::Bucket;
use crate::app::state::{AllocatorView, AppState, Pane, SegmentTotals, SegmentsAge};

/// Below this width the figures use short labels.
const LONG_LABELS_WIDTH: u16 = 60;

/// Fragmentation (0 … 1) from which its figure is in the warning colour:
/// the largest free block is less than half the free memory.
const FRAGMENTATION_WARNING: f64 = 0.5;

/// The segments with no live block, in the pane's words and short.
const WHOLE_FREE: &str = "wholly free segments";
const WHOLE_FREE_SHORT: &str = "free segs";

/// The fragmentation pane of one frame.
pub struct FragmentationPane<'a> {
    state: &'a AppState,
    theme: &'a Theme,
    left_border: bool,
    /// Said instead of [`NOTHING_RESERVED`] when there is nothing to show:
    /// the snapshot viewer's filters can hide every segment of an
    /// allocator that holds memory.
    empty_note: Option<&'a str>,
    /// Filters the figures are of, said in the title ("large pool")
    /// where it has the room for them whole: the snapshot viewer's status
    /// row says them too, so they go before a word is cut.
    filters: &'a [String],
    /// The filters short ("stream 0 · small"), said where the whole ones
    /// do not fit, and "filtered" where neither does: the figures are of
    /// the filtered segments, and a title without a word of it read as
    /// the whole allocator's beside the breakdown's filtered one.
    short_filters: &'a [String],
    /// Other words of the title after the filters ("final state"): kept.
    notes: &'a [String],
}

/// What the fragmentation pane's title says of filters that do not fit
/// it in words.
pub const FILTERED_NOTE: &str = "filtered";

impl<'a> FragmentationPane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        FragmentationPane {
            state,
            theme,
            left_border: false,
            empty_note: None,
            filters: &[],
            short_filters: &[],
            notes: &[],
        }
    }

    /// Says in the title which filters the figures are of, where they
    /// fit whole, then the `notes` on the figures.
    /// `short`: the same filters in fewer words, for a narrow pane.
    pub fn with_filters(
        mut self,
        filters: &'a [String],
        short: &'a [String],
        notes: &'a [String],
    ) -> Self {
        self.filters = filters;
        self.short_filters = short;
        self.notes = notes;
        self
    }

    /// What to say when no segment is shown (see `empty_note`), or no
    /// allocator at all (the viewer on a file without a GPU).
    pub fn with_empty_note(mut self, note: Option<&'a str>) -> Self {
        self.empty_note = note;
        self
    }

    /// Draws a left border: the pane sits right of another one.
    pub fn beside(mut self) -> Self {
        self.left_border = true;
        self
    }
}

/// A bucket's label: "≤2MiB" for the range up to its bound, "≥1GiB" for the
/// open-ended last one.
pub(crate) fn bucket_label(b: &Bucket, glyphs: &Glyphs) -> String {
    let sign = if b.open_ended {
        glyphs.at_least
    } else {
        glyphs.at_most
    };
    format!("{sign}{}", format::bytes_short(b.bound))
}

/// What the pane says when the allocator holds no memory: a process that
/// has not allocated yet, after `empty_cache()` released every segment, or
/// a snapshot before its first segment.
const NOTHING_RESERVED: &str =
    "nothing reserved: the allocator holds no memory, so there is nothing to fragment";

/// Whether the allocator holds no memory: no segments and 0 B reserved
/// (a probe whose segments have not come yet, with memory reserved, is
/// not that).
fn nothing_reserved(view: &AllocatorView) -> bool {
    view.layout.iter().all(|s| s.total_size == 0) && view.known_reserved() == Some(0)
}

/// What the pane says while a probe's stats have come and its segments
/// not yet (they come every 5 s by default).
/// The Fragmentation and Segments panes' note where no allocator is
/// visible: what `needs` one ("fragmentation needs") and how to get one
/// on this backend. Only the simulation has simulated training; under a
/// driver it is a process run with the probe attached.
pub(crate) fn no_allocator_view_note(backend: &str, needs: &str) -> String {
    let how = if backend == "sim" {
        "(simulated training shows one)"
    } else {
        "(run it as `python -m vramtop_probe train.py`: docs/attach.md)"
    };
    format!("allocator view: n/a — {needs} a process's allocator {how}")
}

pub const SEGMENTS_NOT_YET: &str =
    "segments not received yet: the probe sends them every few seconds";

/// The title's words for segments older than the stats ("segments 4 s
/// old", "segments <1 s old", "stale segments" when the messages
/// came without times), and whether their figures differ from the
/// stats'; `None` when they are as new as the stats.
pub(crate) fn segments_age_note(view: &AllocatorView) -> Option<(String, bool)> {
    let Some(SegmentsAge::Older { age_s, then }) = view.segments_age else {
        return None;
    };
    Some((segments_age_words(age_s), then.is_some()))
}

/// "segments 4 s old" for segments `age_s` seconds older than the stats,
/// "segments <1 s old", or "stale segments" where the age is unknown:
/// the pane's words, which `--once` says too.
pub fn segments_age_words(age_s: Option<f64>) -> String {
    match age_s {
        // Whole seconds, rounded down (4.9 s is "4 s old"): never older
        // than they are. The cast saturates.
        Some(s) if s >= 1.0 => format!("segments {} s old", s.floor() as u64),
        Some(_) => "segments <1 s old".to_string(),
        // Only the figures say they are of another moment; the segments
        // are the slower of the two feeds.
        None => "stale segments".to_string(),
    }
}

/// "reserved then 352 MiB, now 124 MiB": the figure in which the
/// segments and the stats differ (reserved where it does, else
/// allocated), so that the dimmed figures below it are read as the
/// allocator's then; "reserved then 352 MiB" where the whole is wider
/// than `width` (the breakdown and the process row say the figure now).
fn then_and_now(then: SegmentTotals, view: &AllocatorView, width: usize) -> String {
    let (what, then, now) = if Some(then.reserved) != view.known_reserved() {
        ("reserved", then.reserved, view.known_reserved())
    } else {
        ("allocated", then.allocated, view.known_allocated())
    };
    let short = format!("{what} then {}", format::bytes(then));
    let long = format!(
        "{short}, now {}",
        now.map_or(format::NA.to_string(), format::bytes)
    );
    if long.chars().count() <= width {
        long
    } else {
        short
    }
}

/// The fewest histogram rows drawn as bars. The form follows the rows
/// the pane has, never the buckets a sample fills: at 80×24 the
/// dashboard's pane has 3 or 4, and the simulated training run's free
/// blocks fill 4 or 5 sizes from one second to the next, so choosing by
/// the data flipped it between bars and one "count×bound" line a second.
const BAR_ROWS: usize = 3;

/// How the histogram fits in `rows` lines.
#[derive(Debug, PartialEq)]
enum Histogram<'f> {
    /// One bar line per bucket: every bucket from the smallest to the
    /// largest non-empty one when they fit, else only the non-empty ones;
    /// where even those do not fit, the `rows - 1` holding most free
    /// bytes (in size order), and a last line for the rest (`left_out`).
    Bars {
        buckets: Vec<&'f Bucket>,
        left_out: Vec<&'f Bucket>,
    },
    /// Fewer than [`BAR_ROWS`] lines: "count×bound" items, flowed.
    Compact(Vec<&'f Bucket>),
}

fn histogram(f: &Fragmentation, rows: usize) -> Histogram<'_> {
    let non_empty: Vec<&Bucket> = f.histogram.iter().filter(|b| b.count > 0).collect();
    if rows < BAR_ROWS {
        return Histogram::Compact(non_empty);
    }
    let first = f.histogram.iter().position(|b| b.count > 0);
    let last = f.histogram.iter().rposition(|b| b.count > 0);
    if let (Some(first), Some(last)) = (first, last)
        && last - first < rows
    {
        return Histogram::Bars {
            buckets: f.histogram[first..=last].iter().collect(),
            left_out: Vec::new(),
        };
    }
    if non_empty.len() <= rows {
        return Histogram::Bars {
            buckets: non_empty,
            left_out: Vec::new(),
        };
    }
    // Buckets by the bytes they hold, most first (ties: the larger bound),
    // as the compact line keeps them: the bucket holding most of the free
    // memory is never the one left out.
    let mut by_bytes: Vec<usize> = (0..non_empty.len()).collect();
    by_bytes.sort_by_key(|&i| std::cmp::Reverse((non_empty[i].bytes, i)));
    let mut keep = vec![false; non_empty.len()];
    for &i in by_bytes.iter().take(rows - 1) {
        keep[i] = true;
    }
    let (buckets, left_out) = non_empty
        .iter()
        .zip(&keep)
        .partition::<Vec<_>, _>(|&(_, &k)| k);
    Histogram::Bars {
        buckets: buckets.into_iter().map(|(b, _)| *b).collect(),
        left_out: left_out.into_iter().map(|(b, _)| *b).collect(),
    }
}

/// The last item or line of a histogram cut short: how many sizes are
/// left out and the free bytes they hold ("+3 sizes: 37.3 MiB").
fn left_out_line<'t>(left_out: &[&Bucket], theme: &'t Theme) -> Line<'t> {
    let bytes = left_out
        .iter()
        .fold(0u64, |sum, b| sum.saturating_add(b.bytes));
    // Size buckets, as the items before it are ("12×≤8MiB": 12 blocks of
    // that size): "+3 more" read as three more blocks.
    let sizes = if left_out.len() == 1 { "size" } else { "sizes" };
    Line::from(Span::styled(
        format!("+{} {sizes}: {}", left_out.len(), format::bytes(bytes)),
        theme.dim,
    ))
}

/// The "count×bound" items of `buckets` (in size order) flowed into at most
/// `rows` lines of `width` cells. When they do not all fit, the buckets
/// holding the fewest free bytes give way first and a last item says how
/// many are left out and what they hold: a cut line must never hide the
/// bucket that holds most of the free memory.
fn compact_lines<'t>(
    buckets: &[&Bucket],
    width: u16,
    rows: usize,
    theme: &'t Theme,
) -> Vec<Line<'t>> {
    let g = theme.glyphs();
    let item = |b: &Bucket| {
        Line::from(vec![
            Span::styled(format!("{}×", b.count), theme.text),
            Span::styled(bucket_label(b, &g), theme.dim),
        ])
    };
    // Buckets by the bytes they hold, most first (ties: the larger bound).
    let mut by_bytes: Vec<usize> = (0..buckets.len()).collect();
    by_bytes.sort_by_key(|&i| std::cmp::Reverse((buckets[i].bytes, i)));
    for kept in (0..=buckets.len()).rev() {
        let mut keep = vec![false; buckets.len()];
        for &i in &by_bytes[..kept] {
            keep[i] = true;
        }
        let mut items: Vec<Line<'t>> = buckets
            .iter()
            .zip(&keep)
            .filter(|&(_, &k)| k)
            .map(|(b, _)| item(b))
            .collect();
        if kept < buckets.len() {
            let left_out: Vec<&Bucket> = buckets
                .iter()
                .zip(&keep)
                .filter(|&(_, &k)| !k)
                .map(|(b, _)| *b)
                .collect();
            items.push(left_out_line(&left_out, theme));
        }
        let lines = chrome::flow(items, width, 2);
        if lines.len() <= rows || kept == 0 {
            return lines;
        }
    }
    Vec::new()
}

impl Widget for FragmentationPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let g = theme.glyphs();
        let gpu = self.state.selected();
        let view = gpu.and_then(|g| g.allocator.as_ref());
        // A probe's segments behind its stats: the title says how old
        // they are, in the warning colour where their figures are not the
        // breakdown's (see `segments_age_note`).
        let age_note = view.and_then(segments_age_note);
        let mut detail = Vec::new();
        let words = |notes: &[String]| -> usize {
            notes
                .iter()
                .map(|f| f.chars().count().saturating_add(3))
                .sum()
        };
        // The filters, where they fit beside the GPU whole, else where
        // they fit without it (the panes beside name the GPU), else short,
        // else "filtered"; cut ("large p…") they read as noise, and the
        // status row says them.
        let room = usize::from(area.width.saturating_sub(u16::from(self.left_border)));
        let age_words: Vec<String> = age_note.iter().map(|(n, _)| n.clone()).collect();
        let rest = words(self.notes).saturating_add(words(&age_words));
        let filtered = [FILTERED_NOTE.to_string()];
        let filters: &[String] = if self.filters.is_empty() {
            &[]
        } else {
            // " Fragmentation " and a corner either side: 24 columns with
            // " GPU 0 ", 17 without.
            let fits = |f: &[String], base: usize| base + words(f) + rest <= room;
            [self.filters, self.short_filters]
                .into_iter()
                .filter(|f| !f.is_empty())
                .find(|f| fits(f, 17))
                .unwrap_or(&filtered)
        };
        let mut notes: Vec<(&String, ratatui::style::Style)> = filters
            .iter()
            .chain(self.notes)
            .map(|n| (n, theme.warning))
            .collect();
        if let Some((note, differs)) = &age_note {
            notes.push((note, if *differs { theme.warning } else { theme.dim }));
        }
        let notes_width: usize = notes.iter().map(|(f, _)| f.chars().count() + 3).sum();
        // " Fragmentation  GPU 0" and the corners: where the notes
        // ("final state") would be cut, they keep the room and the GPU is
        // left to the panes beside, whose titles name it.
        let gpu_fits = 24 + notes_width <= usize::from(area.width);
        if let Some(gpu) = gpu
            && (gpu_fits || notes.is_empty())
        {
            detail.push(Span::styled(gpu.label(), theme.text));
        }
        for (i, (f, style)) in notes.iter().enumerate() {
            let lead = if detail.is_empty() && i == 0 {
                ""
            } else {
                " · "
            };
            detail.push(Span::styled(format!("{lead}{f}"), *style));
        }
        let block = chrome::pane_block_within(
            Pane::Fragmentation,
            detail,
            self.state.ui.focus == Pane::Fragmentation,
            self.left_border,
            theme,
            usize::from(area.width),
        );
        let Some(inner) = chrome::inside(block, area, buf, theme) else {
            return;
        };
        let Some(view) = view else {
            let note = self.empty_note.map_or_else(
                || no_allocator_view_note(&self.state.status.backend, "fragmentation needs"),
                str::to_string,
            );
            chrome::note_at(buf, inner, &note, theme.dim);
            theme.finish(area, buf);
            return;
        };
        if nothing_reserved(view) {
            // All figures would be 0 and "every cached byte is in use"
            // would claim a cache there is not.
            let note = self.empty_note.unwrap_or(NOTHING_RESERVED);
            chrome::note_at(buf, inner, note, theme.dim);
            theme.finish(area, buf);
            return;
        }
        if view.segments_age == Some(SegmentsAge::NotYet) {
            // Figures of an empty layout would read "ext free 0 B" beside
            // the breakdown's cached-free bytes.
            chrome::note_at(buf, inner, SEGMENTS_NOT_YET, theme.dim);
            theme.finish(area, buf);
            return;
        }
        let f = &view.fragmentation;
        let long = inner.width >= LONG_LABELS_WIDTH;
        // Segments of another moment than the stats: their figures are
        // dimmed, after a line that says what the allocator held then and
        // holds now, so that "ext free 231 MiB" beside "reserved but
        // unallocated 103 MiB" reads as the older figure it is.
        let then = match view.segments_age {
            Some(SegmentsAge::Older { then, .. }) => then,
            _ => None,
        };
        let value_style = if then.is_some() {
            theme.dim
        } else {
            theme.text
        };
        let figure = |long_label: &str, short_label: &str, value: String| {
            let label = if long { long_label } else { short_label };
            Line::from(vec![
                Span::styled(format!("{label} "), theme.dim),
                Span::styled(value, value_style),
            ])
        };
        // Free memory mostly in wholly free segments is cache that
        // empty_cache() (and PyTorch, before it reports out of memory)
        // returns: the warning is then for the split segments' own
        // fragmentation, what stays after it.
        let mostly_whole = f.mostly_whole_free_segments();
        let warned = if mostly_whole {
            f.split_fragmentation()
        } else {
            f.fragmentation
        };
        let frag_style = if warned >= FRAGMENTATION_WARNING && then.is_none() {
            theme.warning
        } else {
            value_style
        };
        let mut items = Vec::new();
        if let Some(then) = then {
            items.push(Line::from(Span::styled(
                then_and_now(then, view, usize::from(inner.width)),
                theme.warning,
            )));
        }
        items.extend([
            Line::from(vec![
                Span::styled(if long { "fragmentation " } else { "frag " }, theme.dim),
                Span::styled(format::percent(f.fragmentation), frag_style),
            ]),
            figure(
                "largest free block",
                "largest",
                format::bytes(f.largest_free_block),
            ),
            figure("external free", "ext free", format::bytes(f.external_free)),
        ]);
        // The part of the free bytes that empty_cache() returns and
        // PyTorch frees before it reports out of memory: a high frag of
        // only such memory is cached memory, not a threat. Said only where
        // there is some, after ext free (of which it is a part).
        // Where most of the free bytes are such memory, it is said first
        // in a sentence that says what empty_cache() does with them, in
        // the figures' colour (it is why the figure is not a warning),
        // else as a figure: the wordings in the order they are tried.
        let whole_bytes = format::bytes(f.free_in_whole_segments);
        let wordings: Vec<Line> = if f.whole_free_segments == 0 {
            Vec::new()
        } else if mostly_whole {
            let returns = format!("empty_cache() returns {whole_bytes}");
            let fits = |t: &String| t.chars().count() <= usize::from(inner.width);
            // "mostly in": most of the free bytes are in such segments.
            // "mostly free segs" read as segments that are mostly free,
            // which these are not: they are wholly free.
            let mut sentences: Vec<Line> = [
                format!("mostly in {WHOLE_FREE}: {returns}"),
                format!("mostly in {WHOLE_FREE_SHORT}: {returns}"),
                format!("mostly in {WHOLE_FREE_SHORT}: {whole_bytes}"),
            ]
            .into_iter()
            .filter(fits)
            .map(|t| Line::from(Span::styled(t, value_style)))
            .collect();
            // Where none has the room, the figure as it is said when
            // it is not most: a row of the histogram is worth more.
            sentences.push(figure("", WHOLE_FREE_SHORT, whole_bytes.clone()));
            sentences
        } else if long {
            vec![figure(
                WHOLE_FREE,
                "",
                format!("{}, {whole_bytes}", f.whole_free_segments),
            )]
        } else {
            vec![figure("", WHOLE_FREE_SHORT, whole_bytes)]
        };
        let at = items.len();
        items.extend([
            figure("non-releasable", "non-rel", format::bytes(f.non_releasable)),
            figure(
                "internal free",
                "int free",
                // Blocks without their requested size (PyTorch < 2.1).
                if view.knows(crate::app::state::REQUESTED_SIZE) {
                    format::bytes(f.internal_free)
                } else {
                    format::NA.to_string()
                },
            ),
        ]);
        if long {
            items.push(figure("free blocks", "blocks", f.free_blocks.to_string()));
        }
        let without = chrome::flow(items.clone(), inner.width, 2);
        let with = |line: &Line<'static>| {
            let mut items = items.clone();
            items.insert(at, line.clone());
            chrome::flow(items, inner.width, 2)
        };
        // Where room allows: a row it adds must leave a row for every
        // size of free block (the stress panel at 80×24 kept only its
        // figures, its one histogram line gone).
        let sizes = f.histogram.iter().filter(|b| b.count > 0).count();
        let room = usize::from(inner.height);
        let fits = |lines: &Vec<Line<'static>>| {
            lines.len() <= without.len() || lines.len().saturating_add(sizes) <= room
        };
        // Where none fits, the histogram keeps its rows: its bars show
        // the big free blocks as well.
        let figures = wordings.iter().map(with).find(fits).unwrap_or(without);
        chrome::lines_at(buf, inner, &figures);
        let used = u16::try_from(figures.len()).unwrap_or(u16::MAX);
        let hist = Rect {
            y: inner.y.saturating_add(used),
            height: inner.height.saturating_sub(used),
            ..inner
        };
        if hist.height == 0 {
            theme.finish(area, buf);
            return;
        }
        if f.free_blocks == 0 {
            // Wrapped: the pane is about 36 columns at 80×24, where one
            // line read "no free blocks: every cached byte …".
            chrome::note_at(
                buf,
                hist,
                "no free blocks: every cached byte is in use",
                theme.dim,
            );
            theme.finish(area, buf);
            return;
        }
        let (buckets, left_out) = match histogram(f, usize::from(hist.height)) {
            Histogram::Bars { buckets, left_out } => (buckets, left_out),
            Histogram::Compact(b) => {
                let lines = compact_lines(&b, hist.width, usize::from(hist.height), theme);
                chrome::lines_at(buf, hist, &lines);
                theme.finish(area, buf);
                return;
            }
        };
        let label_w = buckets
            .iter()
            .map(|b| bucket_label(b, &g).chars().count())
            .max()
            .unwrap_or(4);
        let count_w = buckets
            .iter()
            .map(|b| b.count.to_string().len())
            .max()
            .unwrap_or(1)
            + 1;
        let bytes_w = 10;
        let width = usize::from(hist.width);
        let show_bytes = width >= label_w + count_w + bytes_w + 8;
        let bar_w = width
            .saturating_sub(label_w + 1 + count_w + if show_bytes { bytes_w + 1 } else { 0 })
            .max(1);
        let max_bytes = buckets.iter().map(|b| b.bytes).max().unwrap_or(1).max(1);
        let mut lines = Vec::new();
        for b in &buckets {
            // Bars scale with the bucket's free bytes, what a request can
            // use (a thousand 512 B crumbs are not a 1 GiB block); the
            // count is the number beside it. A non-empty bucket gets at
            // least one cell so that it is never mistaken for an empty one.
            let cells = if b.count == 0 {
                0
            } else {
                let c = u128::from(b.bytes) * bar_w as u128 / u128::from(max_bytes);
                usize::try_from(c).unwrap_or(bar_w).max(1)
            };
            let mut spans = vec![
                Span::styled(right(&bucket_label(b, &g), label_w), theme.dim),
                Span::raw(" "),
                Span::styled(g.histogram.repeat(cells), theme.histogram),
                Span::raw(" ".repeat(bar_w - cells.min(bar_w))),
                Span::raw(right(&b.count.to_string(), count_w)),
            ];
            if show_bytes {
                spans.push(Span::styled(
                    right(&format::bytes(b.bytes), bytes_w + 1),
                    theme.dim,
                ));
            }
            lines.push(Line::from(spans));
        }
        if !left_out.is_empty() {
            lines.push(left_out_line(&left_out, theme));
        }
        chrome::lines_at(buf, hist, &lines);
        theme.finish(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fragmentation;

    /// A large-pool segment at `address` made of `blocks` (size, state) laid
    /// end to end; an active block's requested size is its size.
    fn large_segment(
        address: u64,
        blocks: &[(u64, crate::alloc::BlockState)],
    ) -> crate::alloc::SegmentInfo {
        use crate::alloc::{BlockInfo, BlockState, PoolKind, SegmentInfo};
        let mut at = address;
        let blocks: Vec<BlockInfo> = blocks
            .iter()
            .map(|&(size, state)| {
                let requested_size = if state == BlockState::Inactive {
                    0
                } else {
                    size
                };
                let b = BlockInfo {
                    address: at,
                    size,
                    requested_size,
                    state,
                };
                at += size;
                b
            })
            .collect();
        let active: u64 = blocks
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.size)
            .sum();
        SegmentInfo {
            device: 0,
            address,
            total_size: at - address,
            allocated_size: active,
            active_size: active,
            requested_size: active,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            blocks,
        }
    }

    #[test]
    fn bucket_labels_show_the_bound_and_its_direction() {
        let f = fragmentation(&[]);
        let g = Theme::colored().glyphs();
        assert_eq!(bucket_label(&f.histogram[0], &g), "≤512B");
        assert_eq!(bucket_label(&f.histogram[12], &g), "≤2MiB");
        let last = f.histogram.last().expect("22 buckets");
        assert_eq!(bucket_label(last, &g), "≥1GiB");
        let ascii = Theme::colored().with_ascii(true).glyphs();
        assert_eq!(bucket_label(last, &ascii), ">=1GiB");
    }

    fn pane_text(view: AllocatorView, width: u16, height: u16) -> String {
        use crate::device::{GpuReading, GpuSample};
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        state.gpus[0].allocator = Some(view);
        let theme = Theme::colored();
        let area = Rect::new(0, 0, width, height);
        let mut buf = Buffer::empty(area);
        FragmentationPane::new(&state, &theme).render(area, &mut buf);
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn an_allocator_with_nothing_reserved_says_so_instead_of_zero_figures() {
        let empty = AllocatorView::new(
            "pid 1 (not allocated yet)".into(),
            Some(1),
            crate::alloc::DeviceStats::default(),
            Vec::new(),
        );
        let drawn = pane_text(empty, 64, 8);
        assert!(
            drawn.contains("nothing reserved: the allocator holds no memory, so there is"),
            "{drawn}"
        );
        assert!(!drawn.contains("every cached byte is in use"), "{drawn}");
        assert!(!drawn.contains("largest free block"), "{drawn}");
    }

    #[test]
    fn reserved_memory_whose_segments_have_not_come_yet_is_not_called_nothing_reserved() {
        // A probe sends its stats at once and its segments every 5 s.
        let mut stats = crate::alloc::DeviceStats::default();
        stats.reserved_bytes.all.current = 20 << 20;
        let view = AllocatorView::new("probe".into(), Some(1), stats, Vec::new());
        let drawn = pane_text(view, 64, 8);
        assert!(!drawn.contains("nothing reserved"), "{drawn}");
    }

    #[test]
    fn no_free_blocks_note_wraps_in_a_narrow_pane() {
        use crate::alloc::BlockState;
        const MIB: u64 = 1 << 20;
        let mut stats = crate::alloc::DeviceStats::default();
        stats.reserved_bytes.all.current = 20 << 20;
        let full = large_segment(0x7f00_0000_0000, &[(20 * MIB, BlockState::ActiveAllocated)]);
        let view = AllocatorView::new("pid 1".into(), Some(1), stats, vec![full]);
        let drawn = pane_text(view, 36, 6);
        let flat = drawn.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("no free blocks: every cached byte is in use"),
            "{drawn}"
        );
    }

    /// A view of `layout` with its reserved bytes in the stats.
    fn view_of(layout: Vec<crate::alloc::SegmentInfo>) -> AllocatorView {
        let mut stats = crate::alloc::DeviceStats::default();
        let reserved: u64 = layout.iter().map(|s| s.total_size).sum();
        stats.reserved_bytes.all.current = i64::try_from(reserved).unwrap_or(i64::MAX);
        AllocatorView::new("pid 1".into(), Some(1), stats, layout)
    }

    /// The colour of the fragmentation figure ("50%") as drawn.
    fn frag_figure_colour(view: AllocatorView, width: u16) -> Option<ratatui::style::Color> {
        use crate::device::{GpuReading, GpuSample};
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        state.gpus[0].allocator = Some(view);
        let theme = Theme::colored();
        let area = Rect::new(0, 0, width, 10);
        let mut buf = Buffer::empty(area);
        FragmentationPane::new(&state, &theme).render(area, &mut buf);
        let row = (0..area.height)
            .find(|&y| {
                (0..width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .contains("frag")
            })
            .expect("a fragmentation row");
        let x = (0..width)
            .find(|&x| {
                buf[(x, row)].symbol().chars().all(|c| c.is_ascii_digit()) && {
                    let s = buf[(x, row)].symbol();
                    !s.is_empty() && s != " "
                }
            })
            .expect("the figure's first digit");
        Some(buf[(x, row)].fg)
    }

    /// Two free 512 MiB segments beside a 20 MiB one split by a live
    /// 10 MiB block: frag 50.5 %, 1 GiB of the free memory in segments
    /// empty_cache() returns (as an OOM's retry does first).
    fn mostly_whole_layout() -> Vec<crate::alloc::SegmentInfo> {
        use crate::alloc::BlockState;
        const MIB: u64 = 1 << 20;
        vec![
            large_segment(0x7f00_0000_0000, &[(512 * MIB, BlockState::Inactive)]),
            large_segment(0x7f10_0000_0000, &[(512 * MIB, BlockState::Inactive)]),
            large_segment(
                0x7f20_0000_0000,
                &[
                    (10 * MIB, BlockState::ActiveAllocated),
                    (10 * MIB, BlockState::Inactive),
                ],
            ),
        ]
    }

    #[test]
    fn mostly_wholly_free_segments_say_what_empty_cache_returns_instead_of_a_warning() {
        let layout = mostly_whole_layout();
        let wide = pane_text(view_of(layout.clone()), 64, 10);
        assert!(wide.contains("fragmentation 50%"), "{wide}");
        assert!(
            wide.contains("mostly in wholly free segments: empty_cache() returns 1.00 GiB"),
            "{wide}"
        );
        let narrow = pane_text(view_of(layout.clone()), 53, 10);
        assert!(
            narrow.contains("mostly in free segs: empty_cache() returns 1.00 GiB"),
            "{narrow}"
        );
        let narrower = pane_text(view_of(layout.clone()), 36, 10);
        assert!(
            narrower.contains("mostly in free segs: 1.00 GiB"),
            "{narrower}"
        );
        // Said where it leaves a row for each size of free block; where
        // it would take one, the histogram keeps it.
        let short = pane_text(view_of(layout.clone()), 36, 7);
        assert!(short.contains("mostly in free segs: 1.00 GiB"), "{short}");
        assert!(short.contains("≤512MiB"), "{short}");
        let shorter = pane_text(view_of(layout.clone()), 36, 6);
        assert!(!shorter.contains("free segs"), "{shorter}");
        assert!(shorter.contains("≤512MiB"), "{shorter}");
        // The split segment alone is one free block: not fragmented, so
        // the 50 % is in the figures' colour.
        let theme = Theme::colored();
        assert_ne!(frag_figure_colour(view_of(layout), 64), theme.warning.fg);
    }

    #[test]
    fn fragmented_split_segments_stay_a_warning_beside_mostly_whole_free_ones() {
        use crate::alloc::BlockState;
        const MIB: u64 = 1 << 20;
        // The split segment's 30 MiB free in three 10 MiB holes: 67 % of
        // it fragmented, what empty_cache() leaves.
        let mut layout = mostly_whole_layout();
        layout[2] = large_segment(
            0x7f20_0000_0000,
            &[
                (10 * MIB, BlockState::Inactive),
                (2 * MIB, BlockState::ActiveAllocated),
                (10 * MIB, BlockState::Inactive),
                (2 * MIB, BlockState::ActiveAllocated),
                (10 * MIB, BlockState::Inactive),
            ],
        );
        let wide = pane_text(view_of(layout.clone()), 64, 10);
        assert!(wide.contains("mostly in wholly free segments"), "{wide}");
        let theme = Theme::colored();
        assert_eq!(frag_figure_colour(view_of(layout), 64), theme.warning.fg);
    }

    #[test]
    fn wholly_free_segments_are_said_beside_the_fragmentation_where_there_are_some() {
        use crate::alloc::BlockState;
        const MIB: u64 = 1 << 20;
        // A free 20 MiB segment beside a 100 MiB one with 60 MiB free in
        // six 10 MiB holes: frag 88 %, a quarter of the free memory in a
        // segment an OOM's retry frees first, the rest fragmented.
        let mut blocks = Vec::new();
        for _ in 0..6 {
            blocks.push((10 * MIB, BlockState::Inactive));
            blocks.push((10 * MIB, BlockState::ActiveAllocated));
        }
        let layout = vec![
            large_segment(0x7f00_0000_0000, &[(20 * MIB, BlockState::Inactive)]),
            large_segment(0x7f20_0000_0000, &blocks[..10]),
        ];
        let wide = pane_text(view_of(layout.clone()), 64, 10);
        assert!(wide.contains("wholly free segments 1, 20.0 MiB"), "{wide}");
        assert!(!wide.contains("mostly"), "{wide}");
        let narrow = pane_text(view_of(layout.clone()), 36, 10);
        assert!(narrow.contains("free segs 20.0 MiB"), "{narrow}");
        let theme = Theme::colored();
        assert_eq!(
            frag_figure_colour(view_of(layout.clone()), 64),
            theme.warning.fg
        );
        // A pane too short for it and a row per size of free block
        // keeps the histogram instead.
        let short = pane_text(view_of(layout.clone()), 36, 4);
        assert!(!short.contains("free segs"), "{short}");
        // Only the split segment: nothing to say.
        let split = pane_text(view_of(layout[1..].to_vec()), 64, 10);
        assert!(!split.contains("free seg"), "{split}");
    }

    #[test]
    fn histogram_bars_are_as_long_as_the_buckets_bytes_not_their_block_counts() {
        use crate::alloc::BlockState;
        const MIB: u64 = 1 << 20;
        // Ten free 1 MiB blocks between allocated ones, then one free
        // 1 GiB block: by count the 1 MiB bucket's bar would be ten times
        // the 1 GiB one's; by bytes it is about a hundredth of it.
        let mut blocks = Vec::new();
        for _ in 0..10 {
            blocks.push((MIB, BlockState::Inactive));
            blocks.push((MIB, BlockState::ActiveAllocated));
        }
        blocks.push((1024 * MIB, BlockState::Inactive));
        let total = 1044 * MIB;
        let segment = large_segment(0x7f00_0000_0000, &blocks);
        let mut stats = crate::alloc::DeviceStats::default();
        stats.reserved_bytes.all.current = i64::try_from(total).unwrap_or(i64::MAX);
        let view = AllocatorView::new("pid 1".into(), Some(1), stats, vec![segment]);
        let drawn = pane_text(view, 60, 8);
        let bar = |label: &str| {
            let row = drawn.lines().find(|l| l.trim_start().starts_with(label));
            row.unwrap_or_default().matches('█').count()
        };
        let (small, big) = (bar("≤1MiB"), bar("≥1GiB"));
        assert_eq!(small, 1, "{drawn}");
        assert!(big > 10 * small, "{drawn}");
        // The counts stay the labels.
        let count = |label: &str| {
            let row = drawn.lines().find(|l| l.trim_start().starts_with(label));
            let row = row.unwrap_or_default().replace('█', " ");
            row.split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            (count("≤1MiB"), count("≥1GiB")),
            ("10".into(), "1".into()),
            "{drawn}"
        );
    }

    #[test]
    fn histogram_skips_empty_buckets_only_when_space_is_short() {
        let mut f = fragmentation(&[]);
        f.histogram[2].count = 1;
        f.histogram[5].count = 3;
        f.histogram[9].count = 2;
        let lens = |h: Histogram| match h {
            Histogram::Bars { buckets, .. } => ("bars", buckets.len()),
            Histogram::Compact(b) => ("compact", b.len()),
        };
        assert_eq!(
            lens(histogram(&f, 10)),
            ("bars", 8),
            "2..=9, empties included"
        );
        assert_eq!(
            lens(histogram(&f, 3)),
            ("bars", 3),
            "only the non-empty ones"
        );
        assert_eq!(lens(histogram(&f, 2)), ("compact", 3), "count×bound items");
        assert_eq!(lens(histogram(&f, 0)), ("compact", 3));
    }

    #[test]
    fn histogram_form_follows_the_rows_not_how_many_sizes_are_filled() {
        // Sizes far apart (no run of empties fits), 1 to 8 of them, each
        // holding more bytes than the one before.
        let with_sizes = |n: usize| {
            let mut f = fragmentation(&[]);
            for k in 0..n {
                f.histogram[2 * k].count = 1;
                f.histogram[2 * k].bytes = (k as u64 + 1) << 20;
            }
            f
        };
        for rows in 0..8 {
            let forms: Vec<&str> = (1..=8)
                .map(|n| match histogram(&with_sizes(n), rows) {
                    Histogram::Bars { .. } => "bars",
                    Histogram::Compact(_) => "compact",
                })
                .collect();
            let want = if rows < BAR_ROWS { "compact" } else { "bars" };
            assert!(forms.iter().all(|&f| f == want), "{rows} rows: {forms:?}");
        }
        // Five sizes in four rows: the three holding most, in size order,
        // and a line for the two left out.
        let f = with_sizes(5);
        let Histogram::Bars { buckets, left_out } = histogram(&f, 4) else {
            panic!("four rows are bars");
        };
        let bytes = |b: &[&Bucket]| b.iter().map(|b| b.bytes >> 20).collect::<Vec<_>>();
        assert_eq!(bytes(&buckets), [3, 4, 5]);
        assert_eq!(bytes(&left_out), [1, 2]);
        let theme = Theme::default();
        assert_eq!(
            left_out_line(&left_out, &theme).to_string(),
            "+2 sizes: 3.00 MiB"
        );
    }

    #[test]
    fn compact_histogram_that_does_not_fit_keeps_the_buckets_with_most_bytes() {
        let mut f = fragmentation(&[]);
        // Small buckets first in size order, the one with most free bytes
        // last: a line cut at its width would drop it.
        for (i, count) in [(12, 1), (13, 2), (14, 1), (15, 10), (16, 6)] {
            f.histogram[i].count = count;
        }
        f.histogram[12].bytes = 2 << 20;
        f.histogram[13].bytes = 6 << 20;
        f.histogram[14].bytes = 8 << 20;
        f.histogram[15].bytes = 40 << 20;
        f.histogram[16].bytes = 180 << 20;
        let theme = Theme::default();
        let buckets: Vec<&Bucket> = f.histogram.iter().filter(|b| b.count > 0).collect();
        let text = |width, rows| -> Vec<String> {
            compact_lines(&buckets, width, rows, &theme)
                .iter()
                .map(|l| l.to_string())
                .collect()
        };
        let all = text(200, 1);
        assert_eq!(all.len(), 1);
        assert!(!all[0].contains('+'), "{all:?}");
        let cut = text(34, 1);
        assert_eq!(cut.len(), 1, "{cut:?}");
        let largest = bucket_label(&f.histogram[16], &theme.glyphs());
        assert!(cut[0].contains(&format!("6×{largest}")), "{cut:?}");
        // The buckets left out are counted as sizes, with their bytes:
        // the four holding least (2 + 6 + 8 + 40 MiB).
        assert!(cut[0].ends_with("+4 sizes: 56.0 MiB"), "{cut:?}");
        assert!(cut[0].chars().count() <= 34, "{cut:?}");
        let three = text(40, 1);
        assert!(three[0].ends_with("+3 sizes: 16.0 MiB"), "{three:?}");
    }
}
