//! The segment map of the selected GPU's allocator: one line per segment,
//! its blocks drawn as a strip proportional to their sizes and styled by
//! state, so splitting and cached holes are visible at a glance. The
//! selected block (`ui.selected_block`, in layout order) is highlighted and
//! described on the footer line. A segment of a private memory pool (a
//! CUDA graph's or a `MemPool`'s) is marked `P` in a column of its own,
//! drawn only where there are private pools.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, right};
use super::format;
use super::theme::{Glyphs, Theme};
use crate::alloc::{BlockState, PoolKind, SegmentInfo};
use crate::app::state::{AppState, Pane, SegmentsAge};

/// The fewest columns a strip keeps beside the address column: with
/// fewer the address is dropped. A width rule (50 columns) dropped it
/// from the map beside the stress panel at 120×40, whose strips had
/// room for it ("S     2MiB ###…" told no segment from the next).
const MIN_STRIP_WITH_ADDRESS: usize = 20;
/// From this width the glyph legend goes in the title.
const LEGEND_WIDTH: u16 = 70;
/// The mark of a segment in a private memory pool, in the column after
/// `E`; ASCII, so `--ascii` draws it as it is.
const PRIVATE_POOL_MARK: &str = "P";
/// What the legend says of [`PRIVATE_POOL_MARK`].
const PRIVATE_POOL_WORDS: &str = " private pool ";

/// The segment-map pane of one frame.
pub struct SegmentsPane<'a> {
    state: &'a AppState,
    theme: &'a Theme,
    left_border: bool,
    /// Addresses of blocks drawn highlighted (ascending): the snapshot
    /// viewer's selected allocation site.
    highlight: &'a [u64],
    /// Said instead of "the allocator holds no memory" when no segment is
    /// shown: the snapshot viewer's filters can hide every one.
    empty_note: Option<&'a str>,
    /// Said in the title after the GPU: the snapshot viewer's filters, or
    /// that the map is the file's final state.
    title_notes: &'a [String],
    /// Whether to draw the private-pool column and its legend entry; `None`:
    /// where a shown segment is in a private pool.
    private_pools: Option<bool>,
}

impl<'a> SegmentsPane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        SegmentsPane {
            state,
            theme,
            left_border: false,
            highlight: &[],
            empty_note: None,
            title_notes: &[],
            private_pools: None,
        }
    }

    /// Draws the private-pool column (and its legend entry) or not,
    /// whatever the segments shown: the snapshot viewer's, where the file
    /// has private pools, so that the strips keep their width and the
    /// legend its entry while the cursor moves through segments that come
    /// and go.
    pub fn with_private_pools(mut self, shown: bool) -> Self {
        self.private_pools = Some(shown);
        self
    }

    /// What to say when no segment is shown (see `empty_note`), or no
    /// allocator at all (the viewer on a file without a GPU).
    pub fn with_empty_note(mut self, note: Option<&'a str>) -> Self {
        self.empty_note = note;
        self
    }

    /// What the title says after the GPU (see `title_notes`).
    pub fn with_title_notes(mut self, notes: &'a [String]) -> Self {
        self.title_notes = notes;
        self
    }

    /// Draws a left border: the pane sits right of another one (the
    /// stress panel).
    pub fn beside(mut self) -> Self {
        self.left_border = true;
        self
    }

    /// Highlights the blocks at `addresses` (ascending).
    pub fn with_highlight(mut self, addresses: &'a [u64]) -> Self {
        self.highlight = addresses;
        self
    }

    /// Rows this pane would like: title, one per segment, footer.
    pub fn preferred_height(state: &AppState) -> u16 {
        let segments = state
            .selected()
            .and_then(|g| g.allocator.as_ref())
            .map_or(0, |a| a.layout.len());
        u16::try_from(segments.max(1))
            .unwrap_or(u16::MAX)
            .saturating_add(2)
    }
}

fn glyph_and_style(state: BlockState, g: &Glyphs, theme: &Theme) -> (&'static str, Style) {
    match state {
        BlockState::ActiveAllocated => (g.allocated, theme.allocated),
        BlockState::Inactive => (g.cached_free, theme.cached_free),
        BlockState::ActivePendingFree => (g.pending_free, theme.pending_free),
    }
}

/// The glyph of a highlighted block: ASCII, because a reversed full block
/// would look like an empty cell.
fn highlight_glyph(state: BlockState) -> &'static str {
    match state {
        BlockState::ActiveAllocated => "#",
        BlockState::Inactive => "=",
        BlockState::ActivePendingFree => "~",
    }
}

fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::ActiveAllocated => "allocated",
        BlockState::Inactive => "free (cached)",
        BlockState::ActivePendingFree => "pending free (stream events)",
    }
}

fn pool_letter(seg: &SegmentInfo) -> &'static str {
    match seg.segment_type {
        PoolKind::Small => "S",
        PoolKind::Large => "L",
    }
}

/// Whether `seg` is in a private memory pool: `(0, 0)` is the default
/// pools' id.
fn in_private_pool(seg: &SegmentInfo) -> bool {
    seg.segment_pool_id != (0, 0)
}

/// The footer line describing the selected block, within `width` columns.
fn detail_line(
    view: &[SegmentInfo],
    at: (usize, usize),
    index: usize,
    count: usize,
    width: u16,
    theme: &Theme,
) -> Line<'static> {
    let (Some(seg), Some(block)) = (
        view.get(at.0),
        view.get(at.0).and_then(|s| s.blocks.get(at.1)),
    ) else {
        return Line::default();
    };
    // PyTorch leaves the last request on a free block; one never used (a
    // segment's remainder) has none, as the block detail says.
    let requested = if block.state == BlockState::Inactive && block.requested_size == 0 {
        String::new()
    } else if block.state == BlockState::Inactive {
        format!(" (last req {})", format::bytes(block.requested_size))
    } else {
        format!(" (req {})", format::bytes(block.requested_size))
    };
    let (_, style) = glyph_and_style(block.state, &theme.glyphs(), theme);
    // Most telling first; a narrow pane leaves out whole parts from the
    // end (the segment, whose row is highlighted above anyway, then the
    // stream, the address, the requested size) instead of cutting one
    // mid-word ("· se…" at 80 columns).
    let tail = [
        format!(" · {:#x}", block.address),
        format!(" · stream {}", seg.stream),
        format!(
            " · segment {}/{}{}",
            at.0 + 1,
            view.len(),
            if seg.is_expandable {
                " (expandable)"
            } else {
                ""
            }
        ),
    ];
    let line = |with_requested: bool, parts: usize| {
        let requested = if with_requested {
            requested.as_str()
        } else {
            ""
        };
        Line::from(vec![
            Span::styled(format!("block {}/{count} ", index + 1), theme.header),
            Span::styled(format::bytes(block.size), theme.text),
            Span::styled(format!("{requested} "), theme.dim),
            Span::styled(state_name(block.state), style),
            Span::styled(tail[..parts].concat(), theme.dim),
        ])
    };
    (0..=tail.len())
        .rev()
        .map(|parts| line(true, parts))
        .chain(std::iter::once(line(false, 0)))
        .find(|l| l.width() <= usize::from(width))
        .unwrap_or_else(|| line(false, 0))
}

impl Widget for SegmentsPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let g = theme.glyphs();
        let view = self.state.selected().and_then(|gpu| gpu.allocator.as_ref());
        let blocks: Vec<(usize, usize)> = view
            .map(|v| {
                v.layout
                    .iter()
                    .enumerate()
                    .flat_map(|(s, seg)| (0..seg.blocks.len()).map(move |b| (s, b)))
                    .collect()
            })
            .unwrap_or_default();
        let gpu = self
            .state
            .selected()
            .map(|gpu| Span::styled(gpu.label(), theme.text));
        let counts = view.map(|v| {
            format!(
                "{} · {}",
                format::count_of(v.layout.len(), "segment", "segments"),
                format::count_of(blocks.len(), "block", "blocks")
            )
        });
        // A probe's segments behind its stats: said as the fragmentation
        // pane says it, the map being drawn from the same segments, where
        // the title has the room for it (below).
        let age_note =
            view.and_then(super::fragmentation::segments_age_note)
                .map(|(words, differs)| {
                    Span::styled(words, if differs { theme.warning } else { theme.dim })
                });
        let notes: Vec<Span<'static>> = (self.title_notes.iter())
            .map(|n| Span::styled(n.clone(), theme.warning))
            .collect();
        let with_age: Vec<Span<'static>> = notes.iter().cloned().chain(age_note).collect();
        // The GPU, the notes (before the counts: a narrow title cuts its
        // end), the counts, each after " · " but the first.
        let detail = |with_gpu: bool, notes: &[Span<'static>]| {
            let parts = (gpu.clone().filter(|_| with_gpu).into_iter())
                .chain(notes.iter().cloned())
                .chain(counts.clone().map(|c| Span::styled(c, theme.dim)));
            let mut spans: Vec<Span<'static>> = Vec::new();
            for part in parts {
                if !spans.is_empty() {
                    spans.push(Span::styled(" · ", part.style));
                }
                spans.push(part);
            }
            spans
        };
        let pool_column = self
            .private_pools
            .unwrap_or_else(|| view.is_some_and(|v| v.layout.iter().any(in_private_pool)));
        let pool_entry = || {
            [
                Span::styled(PRIVATE_POOL_MARK, theme.key),
                Span::raw(PRIVATE_POOL_WORDS),
            ]
        };
        // The legends the title may take, the fullest first: with private
        // pools, then their entry alone (the breakdown's legend names the
        // block states too; nothing else says what `P` is).
        let legends: Vec<Line<'static>> = if area.width >= LEGEND_WIDTH && view.is_some() {
            let states = vec![
                Span::styled(g.allocated, theme.allocated),
                Span::raw(" allocated "),
                Span::styled(g.cached_free, theme.cached_free),
                Span::raw(" free "),
                Span::styled(g.pending_free, theme.pending_free),
                Span::raw(" pending "),
            ];
            if pool_column {
                let mut full = states;
                full.extend(pool_entry());
                vec![Line::from(full), Line::from(pool_entry().to_vec())]
            } else {
                vec![Line::from(states)]
            }
        } else {
            Vec::new()
        };
        // The title and the legend share the top border with at least one
        // cell of it between them: where they do not fit, the GPU gives
        // way first when there are notes (the GPUs pane and the panes
        // beside name it, as the fragmentation pane's title leaves it),
        // then the legend (to the private pools' entry alone, then
        // whole); a title longer than the row alone is cut with
        // "…". Drawn over each other, the counts ran into the legend
        // ("22 bl█ allocated").
        let row = usize::from(area.width.saturating_sub(u16::from(self.left_border)));
        let title_w = |spans: &[Span<'_>]| {
            let detail: usize = spans.iter().map(Span::width).sum();
            // " Segments " and, with a detail, a space either side of it.
            Pane::Segments.title().chars().count() + 2 + if detail > 0 { detail + 2 } else { 0 }
        };
        // (with the GPU, the index of one of `legends` or none) for a
        // title of `notes`, in the order they are tried: each legend with
        // the GPU, then without it where it may go; then no legend.
        let pick = |notes: &[Span<'static>]| {
            let may_drop_gpu = gpu.is_some() && !notes.is_empty();
            let choices = (0..legends.len())
                .map(Some)
                .chain(std::iter::once(None))
                .flat_map(|l| [(true, l), (false, l)]);
            choices
                .filter(|&(g, _)| g || may_drop_gpu)
                .find(|&(g, l)| {
                    let w = title_w(&detail(g, notes));
                    match l.and_then(|l| legends.get(l)) {
                        Some(l) => w + 1 + l.width() <= row,
                        None => w <= row,
                    }
                })
                .unwrap_or((!may_drop_gpu, None))
        };
        // The segments' age only where the GPU and the legend stay as
        // they are without it: the fragmentation pane's title says it
        // too, and a legend that went and came back with each segments
        // message (every 5 s, older for 4 of them) would blink.
        let bare = pick(&notes);
        let aged = pick(&with_age);
        let (notes, (with_gpu, legend)) = if aged == bare {
            (with_age, aged)
        } else {
            (notes, bare)
        };
        let legend = legend.and_then(|l| legends.get(l));
        let mut block = chrome::pane_block_within(
            Pane::Segments,
            detail(with_gpu, &notes),
            self.state.ui.focus == Pane::Segments,
            self.left_border,
            theme,
            usize::from(area.width),
        );
        if let Some(legend) = legend {
            block = block.title(legend.clone().right_aligned());
        }
        let Some(inner) = chrome::inside(block, area, buf, theme) else {
            return;
        };
        let Some(view) = view else {
            let note = self.empty_note.map_or_else(
                || {
                    super::fragmentation::no_allocator_view_note(
                        &self.state.status.backend,
                        "the segment map needs",
                    )
                },
                str::to_string,
            );
            chrome::note_at(buf, inner, &note, theme.dim);
            theme.finish(area, buf);
            return;
        };
        let Some(last) = blocks.len().checked_sub(1) else {
            chrome::line_at(
                buf,
                inner,
                0,
                &Line::styled(
                    // A probe's stats come before its first segments:
                    // memory may be reserved that no segment shows yet.
                    if view.segments_age == Some(SegmentsAge::NotYet) {
                        super::fragmentation::SEGMENTS_NOT_YET
                    } else {
                        self.empty_note
                            .unwrap_or("no segments: the allocator holds no memory")
                    },
                    theme.dim,
                ),
            );
            theme.finish(area, buf);
            return;
        };
        let selected = self.state.ui.selected_block.min(last);
        let (sel_seg, sel_blk) = blocks[selected];

        // The footer needs a second row; with one row only the strip of
        // the selected block's segment is shown.
        let footer = inner.height >= 2;
        let strip_rows = usize::from(inner.height - u16::from(footer));
        let first = chrome::first_shown(sel_seg, strip_rows);
        let addr_w = view
            .layout
            .iter()
            .map(|s| format!("{:#x}", s.address).len())
            .max()
            .unwrap_or(0);
        // Pool letter, E, [P,] space, size (7), space; then the address
        // and a space where the strips keep their room.
        let bare_w = 3 + usize::from(pool_column) + 8;
        let show_address = usize::from(inner.width) >= bare_w + addr_w + 1 + MIN_STRIP_WITH_ADDRESS;
        let prefix_w = bare_w + if show_address { addr_w + 1 } else { 0 };
        let strip_w = inner
            .width
            .saturating_sub(u16::try_from(prefix_w).unwrap_or(u16::MAX));
        for (row, (s, seg)) in view
            .layout
            .iter()
            .enumerate()
            .skip(first)
            .take(strip_rows)
            .enumerate()
        {
            let y = inner.y + u16::try_from(row).unwrap_or(u16::MAX);
            let marker_style = if s == sel_seg {
                theme.selected
            } else {
                theme.header
            };
            let mut spans = vec![
                Span::styled(pool_letter(seg), marker_style),
                Span::styled(if seg.is_expandable { "E" } else { " " }, marker_style),
            ];
            if pool_column {
                spans.push(if !in_private_pool(seg) {
                    Span::raw(" ")
                } else if s == sel_seg {
                    Span::styled(PRIVATE_POOL_MARK, theme.selected)
                } else {
                    Span::styled(PRIVATE_POOL_MARK, theme.key)
                });
            }
            spans.push(Span::raw(" "));
            if show_address {
                let style = if s == sel_seg {
                    theme.header
                } else {
                    theme.dim
                };
                spans.push(Span::styled(format!("{:#x}", seg.address), style));
                spans.push(Span::raw(
                    " ".repeat(addr_w + 1 - format!("{:#x}", seg.address).len()),
                ));
            }
            spans.push(Span::raw(right(&format::bytes_short(seg.total_size), 7)));
            spans.push(Span::raw(" "));
            chrome::line_at(buf, inner, y - inner.y, &Line::from(spans));
            let x0 = inner.x + inner.width - strip_w;
            let mut sizes: Vec<u64> = seg.blocks.iter().map(|b| b.size).collect();
            let covered = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
            sizes.push(seg.total_size.saturating_sub(covered));
            let cells = chrome::split_cells(&sizes, strip_w);
            let mut x = x0;
            // Where the selected block starts when it got no cell of its own.
            let mut cellless_selection = None;
            for (b, (blk, &n)) in seg.blocks.iter().zip(&cells).enumerate() {
                let selected = s == sel_seg && b == sel_blk;
                let (glyph, style) = if selected {
                    (highlight_glyph(blk.state), theme.selected)
                } else if self.highlight.binary_search(&blk.address).is_ok() {
                    (highlight_glyph(blk.state), theme.warning)
                } else {
                    glyph_and_style(blk.state, &g, theme)
                };
                if selected && n == 0 {
                    cellless_selection = Some((x, glyph));
                }
                for k in 0..n {
                    chrome::set_cell(buf, x.saturating_add(k), y, glyph, style);
                }
                x = x.saturating_add(n);
            }
            // With more blocks than cells (a 12.8 GiB expandable segment of
            // hundreds of blocks) a block may get none; the selected one
            // still shows, over the cell of the neighbour drawn after it,
            // so it is drawn last (and inside the strip at its end).
            if let Some((at, glyph)) = cellless_selection
                && strip_w > 0
            {
                let last = x0.saturating_add(strip_w - 1);
                chrome::set_cell(buf, at.min(last), y, glyph, theme.selected);
            }
        }
        if footer {
            let line = detail_line(
                &view.layout,
                (sel_seg, sel_blk),
                selected,
                blocks.len(),
                inner.width,
                theme,
            );
            chrome::line_at(buf, inner, inner.height - 1, &line);
        }
        theme.finish(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::BlockInfo;

    fn text(line: &Line<'_>) -> String {
        line.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn a_free_block_never_used_has_no_last_request_in_the_footer() {
        let block = |requested_size| BlockInfo {
            address: 0x1000,
            size: 2 << 20,
            requested_size,
            state: BlockState::Inactive,
        };
        let segment = |b| SegmentInfo {
            device: 0,
            address: 0x1000,
            total_size: 2 << 20,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Small,
            segment_pool_id: (0, 0),
            is_expandable: false,
            blocks: vec![b],
        };
        let theme = Theme::default();
        let never = text(&detail_line(
            &[segment(block(0))],
            (0, 0),
            0,
            1,
            200,
            &theme,
        ));
        assert!(!never.contains("last req"), "{never}");
        assert!(never.contains("free (cached)"), "{never}");
        let used = text(&detail_line(
            &[segment(block(4096))],
            (0, 0),
            0,
            1,
            200,
            &theme,
        ));
        assert!(used.contains("(last req 4.00 KiB)"), "{used}");
    }

    /// The map's strip row of an expandable segment of one 97.7 MiB block
    /// then 299 of 43.6 MiB (12.8 GiB), block `selected` selected.
    fn huge_segment_row(selected: usize, width: u16) -> String {
        use crate::device::{GpuReading, GpuSample};
        const MIB: u64 = 1 << 20;
        let base = 0x3_0200_0000u64;
        let sizes: Vec<u64> = std::iter::once(97 * MIB + 700 * 1024)
            .chain(std::iter::repeat_n(43 * MIB + 600 * 1024, 299))
            .collect();
        let mut address = base;
        let blocks: Vec<BlockInfo> = sizes
            .iter()
            .map(|&size| {
                let b = BlockInfo {
                    address,
                    size,
                    requested_size: size,
                    state: BlockState::ActiveAllocated,
                };
                address += size;
                b
            })
            .collect();
        let total: u64 = sizes.iter().sum();
        let segment = SegmentInfo {
            device: 0,
            address: base,
            total_size: total,
            allocated_size: total,
            active_size: total,
            requested_size: total,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: true,
            blocks,
        };
        let mut stats = crate::alloc::DeviceStats::default();
        stats.reserved_bytes.all.current = i64::try_from(total).unwrap_or(i64::MAX);
        let view =
            crate::app::state::AllocatorView::new("file".into(), Some(1), stats, vec![segment]);
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        state.gpus[0].allocator = Some(view);
        state.ui.selected_block = selected;
        let theme = Theme::colored();
        let area = Rect::new(0, 0, width, 4);
        let mut buf = Buffer::empty(area);
        SegmentsPane::new(&state, &theme).render(area, &mut buf);
        (0..width)
            .map(|x| buf[(x, 1)].symbol().to_string())
            .collect()
    }

    /// The rows of a map `width` columns wide of two 20 MiB segments, the
    /// second in private pool `pool` (the first in the default one).
    fn map_rows(pool: (i64, i64), private_pools: Option<bool>, width: u16) -> Vec<String> {
        use crate::device::{GpuReading, GpuSample};
        let segment = |address: u64, segment_pool_id| SegmentInfo {
            device: 0,
            address,
            total_size: 20 << 20,
            allocated_size: 4 << 20,
            active_size: 4 << 20,
            requested_size: 4 << 20,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id,
            is_expandable: false,
            blocks: vec![BlockInfo {
                address,
                size: 4 << 20,
                requested_size: 4 << 20,
                state: BlockState::ActiveAllocated,
            }],
        };
        let segments = vec![
            segment(0x7f00_0000_0000, (0, 0)),
            segment(0x7f00_0140_0000, pool),
        ];
        let view = crate::app::state::AllocatorView::new(
            "file".into(),
            Some(1),
            crate::alloc::DeviceStats::default(),
            segments,
        );
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        state.gpus[0].allocator = Some(view);
        let theme = Theme::colored();
        let area = Rect::new(0, 0, width, 4);
        let mut buf = Buffer::empty(area);
        let pane = SegmentsPane::new(&state, &theme);
        match private_pools {
            Some(shown) => pane.with_private_pools(shown).render(area, &mut buf),
            None => pane.render(area, &mut buf),
        }
        (0..area.height)
            .map(|y| (0..width).map(|x| buf[(x, y)].symbol()).collect())
            .collect()
    }

    #[test]
    fn a_private_pools_segment_is_marked_p_and_the_legend_says_what_p_is() {
        for width in [80, 120] {
            let rows = map_rows((0, 1), None, width);
            assert!(rows[0].contains("P private pool"), "{width}: {rows:?}");
            // The legend keeps a cell of border from the title's counts.
            assert!(rows[0].contains("2 blocks ─"), "{width}: {rows:?}");
            assert!(
                rows[1].starts_with("L   0x7f0000000000 "),
                "{width}: {rows:?}"
            );
            assert!(
                rows[2].starts_with("L P 0x7f0001400000 "),
                "{width}: {rows:?}"
            );
        }
        // From 120 columns the block states' legend too; at 80 the pool's
        // entry alone (nothing else says what P is).
        assert!(map_rows((0, 1), None, 120)[0].contains("▚ pending P private pool"));
        assert!(!map_rows((0, 1), None, 80)[0].contains("allocated"));
    }

    #[test]
    fn a_map_as_narrow_as_the_one_beside_the_stress_panel_keeps_its_addresses() {
        // 47 columns at 120×40: 14 of address leave the strips 22.
        let rows = map_rows((0, 0), None, 47);
        assert!(
            rows[1].starts_with("L  0x7f0000000000   20MiB "),
            "{rows:?}"
        );
        // Where the strips would keep fewer than 20 columns, they go.
        let rows = map_rows((0, 0), None, 40);
        assert!(rows[1].starts_with("L    20MiB "), "{rows:?}");
    }

    #[test]
    fn without_private_pools_the_map_has_no_pool_column_and_no_legend_entry() {
        let rows = map_rows((0, 0), None, 120);
        assert!(!rows[0].contains("private"), "{rows:?}");
        assert!(rows[0].contains("▚ pending "), "{rows:?}");
        assert!(rows[1].starts_with("L  0x7f0000000000 "), "{rows:?}");
        assert!(rows[2].starts_with("L  0x7f0001400000 "), "{rows:?}");
    }

    #[test]
    fn the_viewer_keeps_the_pool_column_where_no_shown_segment_is_private() {
        // The viewer says whether the file has private pools: the strips
        // keep their width while segments come and go with the cursor.
        let rows = map_rows((0, 0), Some(true), 80);
        assert!(rows[0].contains("P private pool"), "{rows:?}");
        assert!(rows[2].starts_with("L   0x7f0001400000 "), "{rows:?}");
        let rows = map_rows((0, 1), Some(false), 80);
        assert!(!rows[0].contains("private"), "{rows:?}");
        assert!(rows[2].starts_with("L  0x7f0001400000 "), "{rows:?}");
    }

    #[test]
    fn a_selected_block_too_small_for_a_cell_of_a_huge_segment_still_shows() {
        // 300 blocks on fewer than 100 cells: most get none, and the next
        // block's cells used to cover the selected one.
        for width in [80, 120] {
            for selected in [0, 1, 150, 299] {
                let row = huge_segment_row(selected, width);
                assert_eq!(row.matches('#').count(), 1, "{width}, {selected}: {row}");
            }
        }
    }

    #[test]
    fn the_footer_leaves_out_whole_parts_from_the_end_to_fit_its_width() {
        let block = BlockInfo {
            address: 0x7f00_0000_0000,
            size: 4 << 20,
            requested_size: 4 << 20,
            state: BlockState::ActiveAllocated,
        };
        let segment = SegmentInfo {
            device: 0,
            address: 0x7f00_0000_0000,
            total_size: 20 << 20,
            allocated_size: 4 << 20,
            active_size: 4 << 20,
            requested_size: 4 << 20,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: true,
            blocks: vec![block],
        };
        let theme = Theme::default();
        let at = |width| {
            text(&detail_line(
                std::slice::from_ref(&segment),
                (0, 0),
                0,
                110,
                width,
                &theme,
            ))
        };
        let full = "block 1/110 4.00 MiB (req 4.00 MiB) allocated · 0x7f0000000000 · \
                    stream 0 · segment 1/1 (expandable)";
        assert_eq!(at(118), full);
        // The 78 columns of an 80-column pane: the segment goes, whole.
        assert_eq!(
            at(78),
            "block 1/110 4.00 MiB (req 4.00 MiB) allocated · 0x7f0000000000 · stream 0"
        );
        assert_eq!(at(60), "block 1/110 4.00 MiB (req 4.00 MiB) allocated");
        assert_eq!(at(40), "block 1/110 4.00 MiB allocated");
        for width in 0..130 {
            let line = at(width);
            let shortest = "block 1/110 4.00 MiB allocated".len();
            assert!(
                line.chars().count() <= usize::from(width).max(shortest),
                "{width}: {line}"
            );
        }
    }
}
