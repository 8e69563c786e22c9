//! The allocator figures the panel shows and compares (A | B | Δ, the
//! free-block histogram), and what an OOM's advice says from the layout.

use serde::Serialize;

use crate::alloc::analysis::{
    BUCKETS, FIRST_BUCKET_LOG2, LAST_BUCKET_LOG2, released_by_empty_cache,
};
use crate::alloc::sizing::{LARGE_BUFFER, SMALL_SIZE};
use crate::alloc::{BlockState, DeviceStats, PoolKind, SegmentInfo, fragmentation};

use super::{MIB, OomRoom};

/// The figures the compare view puts side by side (bytes, except
/// `segments` and `fragmentation_bp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    pub allocated: u64,
    pub reserved: u64,
    pub driver_used: u64,
    pub segments: u64,
    pub inactive_split_bytes: u64,
    pub largest_free_block: u64,
    /// Fragmentation in basis points (1/100 of a percent), kept integral
    /// so figures compare exactly.
    pub fragmentation_bp: u64,
    /// Free blocks per log2 size bucket (`analysis::Fragmentation::histogram`):
    /// (count, bytes), bucket `i` holding sizes up to 2^(9 + i) bytes, the
    /// last one 1 GiB and more.
    pub free_histogram: [(u64, u64); BUCKETS],
}

/// Non-negative stat counter as bytes (a negative counter would be a model
/// bug; show 0 rather than wrap).
fn counter(v: i64) -> u64 {
    v.max(0) as u64
}

impl Figures {
    /// The figures of an allocator state.
    pub fn of(stats: &DeviceStats, layout: &[SegmentInfo], driver_used: u64) -> Self {
        let f = fragmentation(layout);
        let mut free_histogram = [(0, 0); BUCKETS];
        for (slot, bucket) in free_histogram.iter_mut().zip(&f.histogram) {
            *slot = (bucket.count, bucket.bytes);
        }
        Figures {
            free_histogram,
            allocated: counter(stats.allocated_bytes.all.current),
            reserved: counter(stats.reserved_bytes.all.current),
            driver_used,
            // The layout's segments: an expandable segment is one mapped
            // range there, while `memory_stats()`'s segment counter only
            // counts cudaMalloc'd segments.
            segments: layout.len() as u64,
            inactive_split_bytes: counter(stats.inactive_split_bytes.all.current),
            largest_free_block: f.largest_free_block,
            fragmentation_bp: (f.fragmentation.clamp(0.0, 1.0) * 10_000.0).round() as u64,
        }
    }
}

/// How a compare row's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FigureUnit {
    Bytes,
    Count,
    /// Basis points, shown as a percentage.
    BasisPoints,
}

/// One row of the compare view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompareRow {
    pub name: &'static str,
    pub unit: FigureUnit,
    pub a: u64,
    pub b: u64,
}

impl CompareRow {
    /// B − A.
    pub fn delta(&self) -> i128 {
        i128::from(self.b) - i128::from(self.a)
    }
}

/// The compare view's rows, in the order.
pub fn compare_rows(a: &Figures, b: &Figures) -> Vec<CompareRow> {
    let row = |name, unit, f: fn(&Figures) -> u64| CompareRow {
        name,
        unit,
        a: f(a),
        b: f(b),
    };
    vec![
        row("allocated", FigureUnit::Bytes, |f| f.allocated),
        row("reserved", FigureUnit::Bytes, |f| f.reserved),
        row("driver used", FigureUnit::Bytes, |f| f.driver_used),
        row("segments", FigureUnit::Count, |f| f.segments),
        row("inactive split", FigureUnit::Bytes, |f| {
            f.inactive_split_bytes
        }),
        row("largest free block", FigureUnit::Bytes, |f| {
            f.largest_free_block
        }),
        row("fragmentation", FigureUnit::BasisPoints, |f| {
            f.fragmentation_bp
        }),
    ]
}

/// One bucket of the compare view's free-block histogram difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HistogramRow {
    /// The bucket's upper bound (bytes; for the last: its lower bound).
    pub bound: u64,
    /// Whether this is the open-ended last bucket (≥ `bound`).
    pub open_ended: bool,
    pub a_count: u64,
    pub a_bytes: u64,
    pub b_count: u64,
    pub b_bytes: u64,
}

impl HistogramRow {
    /// B − A free blocks.
    pub fn count_delta(&self) -> i128 {
        i128::from(self.b_count) - i128::from(self.a_count)
    }

    /// B − A free bytes.
    pub fn bytes_delta(&self) -> i128 {
        i128::from(self.b_bytes) - i128::from(self.a_bytes)
    }
}

/// The free-block histogram of A and B side by side, smallest bucket
/// first, only the buckets where A or B has a free block.
pub fn histogram_rows(a: &Figures, b: &Figures) -> Vec<HistogramRow> {
    (0..BUCKETS)
        .filter_map(|i| {
            let log2 = FIRST_BUCKET_LOG2 + i as u32;
            let ((a_count, a_bytes), (b_count, b_bytes)) =
                (a.free_histogram[i], b.free_histogram[i]);
            (a_count > 0 || b_count > 0).then_some(HistogramRow {
                bound: 1 << log2,
                open_ended: log2 == LAST_BUCKET_LOG2,
                a_count,
                a_bytes,
                b_count,
                b_bytes,
            })
        })
        .collect()
}

/// Non-releasable bytes from which the OOM advice suggests settings that
/// let split segments be reused.
pub const LARGE_NON_RELEASABLE: u64 = 64 * MIB;

/// What `empty_cache` could do with the cached free memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reclaim {
    /// Segments without a live block, returned whole, and the whole free
    /// pages of expandable segments, unmapped.
    pub releasable: u64,
    /// Free memory that stays: free blocks inside segments that also hold a
    /// live block, and parts of free pages of expandable segments.
    pub non_releasable: u64,
    /// The part of `non_releasable` in ordinary (not expandable) segments
    /// of the large pool: the memory expandable segments or
    /// `max_split_size_mb` could make reusable for a large request.
    pub stranded_large_pool: u64,
    /// The part of `non_releasable` in expandable segments: parts of pages
    /// that also hold live tensors, which no setting returns.
    pub stranded_expandable: u64,
}

/// Splits the cached free memory of `layout` into what `empty_cache` could
/// release and what it could not (it synchronises the streams first, so
/// blocks waiting for stream events count as free).
pub fn reclaim(layout: &[SegmentInfo]) -> Reclaim {
    let mut r = Reclaim::default();
    for s in layout {
        let released = released_by_empty_cache(s, true);
        let stays = s
            .total_size
            .saturating_sub(s.allocated_size)
            .saturating_sub(released);
        r.releasable += released;
        r.non_releasable += stays;
        if s.is_expandable {
            r.stranded_expandable += stays;
        } else if s.segment_type == PoolKind::Large {
            r.stranded_large_pool += stays;
        }
    }
    r
}

/// Bytes of free blocks in ordinary large-pool segments that also hold a
/// live block, counted in whole 20 MiB pages: what expandable segments
/// (which unmap whole free pages and map them again where a request needs
/// them) or `max_split_size_mb` (which keeps big blocks whole) could turn
/// into room for a large request. Holes smaller than a page stay holes
/// under any setting.
fn stranded_in_whole_pages(layout: &[SegmentInfo]) -> u64 {
    layout
        .iter()
        .filter(|s| !s.is_expandable && s.segment_type == PoolKind::Large)
        .filter(|s| s.blocks.iter().any(|b| b.state.is_active()))
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size / LARGE_BUFFER * LARGE_BUFFER)
        .fold(0, u64::saturating_add)
}

/// The largest free block of `pool`.
fn largest_free_in(layout: &[SegmentInfo], pool: PoolKind) -> u64 {
    layout
        .iter()
        .filter(|s| s.segment_type == pool)
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
        .max()
        .unwrap_or(0)
}

/// The lines under an OOM message saying what would have helped, from the
/// current layout, the allocator's `settings`, the room there was at the
/// OOM and the bytes reserved now (`empty_cache()` after the OOM gave the
/// difference back): how much `empty_cache` could release and how much is
/// non-releasable (when any of it is worth a word); then the first that
/// holds of: enough was freed since for the same request; the request
/// would not fit even if every cached byte were reused (the GPU is too
/// small); and, when at least [`LARGE_NON_RELEASABLE`] is stranded, whether
/// a setting could make room of it.
pub fn oom_advice(
    layout: &[SegmentInfo],
    settings: &str,
    oom: &OomRoom,
    reserved_now: u64,
) -> Vec<String> {
    let r = reclaim(layout);
    let fmt = crate::alloc::sizing::display_bytes;
    let mut lines = Vec::new();
    if r.releasable > 0 || r.non_releasable >= LARGE_NON_RELEASABLE {
        let why = if r.stranded_expandable == 0 {
            "free blocks in segments with live tensors"
        } else if r.stranded_expandable == r.non_releasable {
            "free parts of pages that also hold live tensors"
        } else {
            "free blocks beside live tensors"
        };
        lines.push(format!(
            "empty_cache() could release {} (whole free segments and pages); {} is \
             non-releasable ({why})",
            fmt(r.releasable),
            fmt(r.non_releasable)
        ));
    }
    // Requests above 1 MiB are served from the large pool only.
    let large_request = oom.request > SMALL_SIZE;
    let pool = if large_request {
        PoolKind::Large
    } else {
        PoolKind::Small
    };
    let largest = largest_free_in(layout, pool);
    if oom.request > 0 && largest >= oom.request {
        lines.push(format!(
            "freed since: a {} block is free in the {} pool now, so the same request fits",
            fmt(largest),
            pool.as_str()
        ));
        return lines;
    }
    // Free on the device now: what was free at the OOM and what has been
    // given back since, then what empty_cache() would give back.
    let free_now = oom
        .device_free
        .saturating_add(oom.reserved.saturating_sub(reserved_now));
    let free_with_cache = free_now.saturating_add(r.releasable);
    let everything = free_with_cache.saturating_add(r.non_releasable);
    if oom.tried > everything {
        // The panel's own live tensors: freeing them is the remedy when
        // they are what fills the GPU.
        let live: u64 = layout
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .fold(0, u64::saturating_add);
        // What to do first: a line cut to one row still says it.
        let line = if everything.saturating_add(live) >= oom.tried {
            format!(
                "free some of the panel's live tensors (d, o, x, D): they hold {}, and the {} \
                 asked would not fit in the {} free even with every cached byte reused",
                fmt(live),
                fmt(oom.tried),
                fmt(everything)
            )
        } else {
            format!(
                "the GPU is too small for {}, whatever the settings: {} would be free even \
                 with every cached byte reused",
                fmt(oom.tried),
                fmt(everything)
            )
        };
        lines.push(line);
        return lines;
    }
    if r.non_releasable < LARGE_NON_RELEASABLE {
        return lines;
    }
    let expandable = settings.contains("expandable_segments:True");
    let stranded_small_pool = r
        .non_releasable
        .saturating_sub(r.stranded_large_pool)
        .saturating_sub(r.stranded_expandable);
    let in_pages = stranded_in_whole_pages(layout);
    if expandable {
        // Blocks of expandable segments are split whatever
        // max_split_size_mb says; what stays shares pages with tensors.
        lines.push(format!(
            "expandable segments are on: the {} left shares pages with live tensors, which \
             no setting returns; freeing those tensors does",
            fmt(r.non_releasable)
        ));
    } else if large_request
        && in_pages >= LARGE_NON_RELEASABLE
        && oom.tried <= free_with_cache.saturating_add(in_pages)
    {
        lines.push(format!(
            "expandable_segments:True or max_split_size_mb would let {} of it be reused \
             (press S to try)",
            fmt(in_pages)
        ));
    } else if large_request && r.stranded_large_pool >= LARGE_NON_RELEASABLE {
        lines.push(format!(
            "no setting makes room of the large pool's {}: its holes between live tensors are \
             too small or too few for {}; freeing the tensors beside them does",
            fmt(r.stranded_large_pool),
            fmt(oom.request)
        ));
    } else if large_request && stranded_small_pool >= LARGE_NON_RELEASABLE {
        lines.push(format!(
            "the small pool's {} serves only requests of 1 MiB or less: no setting lets \
             this one use it",
            fmt(stranded_small_pool)
        ));
    }
    lines
}
