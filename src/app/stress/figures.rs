//! The allocator figures the panel shows and compares (A | B | Δ, the
//! free-block histogram), and what an OOM's advice says from the layout.

use serde::Serialize;

use crate::alloc::analysis::{
    BUCKETS, FIRST_BUCKET_LOG2, LAST_BUCKET_LOG2, released_by_empty_cache,
};
use crate::alloc::{DeviceStats, SegmentInfo, fragmentation};

use super::MIB;

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
}

/// Splits the cached free memory of `layout` into what `empty_cache` could
/// release and what it could not (it synchronises the streams first, so
/// blocks waiting for stream events count as free).
pub fn reclaim(layout: &[SegmentInfo]) -> Reclaim {
    let mut r = Reclaim::default();
    for s in layout {
        let released = released_by_empty_cache(s, true);
        r.releasable += released;
        r.non_releasable += s
            .total_size
            .saturating_sub(s.allocated_size)
            .saturating_sub(released);
    }
    r
}

/// The lines under an OOM message saying what would have helped, from the
/// current layout and the allocator's `settings`: how much `empty_cache`
/// could release and how much is non-releasable, and, when the latter is
/// at least [`LARGE_NON_RELEASABLE`], the settings that let it be reused.
/// None when nothing is releasable and little is stranded (plain lack of
/// capacity).
pub fn oom_advice(layout: &[SegmentInfo], settings: &str) -> Vec<String> {
    let r = reclaim(layout);
    if r.releasable == 0 && r.non_releasable < LARGE_NON_RELEASABLE {
        return Vec::new();
    }
    let fmt = crate::alloc::sizing::display_bytes;
    let mut lines = vec![format!(
        "empty_cache() could release {} (whole free segments and pages); {} is \
         non-releasable (free blocks in segments with live tensors)",
        fmt(r.releasable),
        fmt(r.non_releasable)
    )];
    if r.non_releasable >= LARGE_NON_RELEASABLE {
        let expandable = settings.contains("expandable_segments:True");
        lines.push(if expandable {
            format!(
                "expandable segments are on: max_split_size_mb would keep large blocks \
                 from being split, so {} could be reused (press S to try)",
                fmt(r.non_releasable)
            )
        } else {
            format!(
                "expandable_segments:True or max_split_size_mb would let those {} be \
                 reused (press S to try)",
                fmt(r.non_releasable)
            )
        });
    }
    lines
}
