//! The allocator figures the panel shows and compares (A | B | Δ, the
//! free-block histogram), and what an OOM's advice says from the layout
//! (as data: the ui words it).

use serde::Serialize;

use crate::alloc::advice::{max_split_below, typical_split_segment};
use crate::alloc::analysis::{
    BUCKETS, FIRST_BUCKET_LOG2, LAST_BUCKET_LOG2, released_by_empty_cache,
};
use crate::alloc::sizing::{LARGE_BUFFER, SMALL_SIZE};
use crate::alloc::{BlockState, DeviceStats, PoolKind, SegmentInfo, fragmentation};

use super::{MIB, OomRoom, StressAction};

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

/// A compare row's name in full and in the fewer columns of the two-up
/// view (a panel narrower than 90 columns): the one table both the view
/// and the help's definitions of the short names read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FigureName {
    pub full: &'static str,
    /// At most 11 columns.
    pub short: &'static str,
}

/// The compare view's row names, in its order.
pub const COMPARE_NAMES: [FigureName; 7] = {
    const fn n(full: &'static str, short: &'static str) -> FigureName {
        FigureName { full, short }
    }
    [
        n("allocated", "allocated"),
        n("reserved", "reserved"),
        // The whole GPU's used memory (`cudaMemGetInfo`), other processes
        // and the panel's own CUDA context included: "(GPU)" where it fits
        // says so, as every other row is the panel's allocator (its first
        // allocation adds the context, hundreds of MiB, to a 10 MiB one).
        // The short names are the ones every other screen abbreviates
        // them to (the names table of docs/keys.md).
        n("driver used (GPU)", "driver used"),
        n("segments", "segments"),
        n("inactive split", "inact split"),
        n("largest free block", "largest"),
        n("fragmentation", "frag"),
    ]
};

/// One row of the compare view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompareRow {
    pub name: &'static str,
    /// The name in the two-up view ([`FigureName::short`]).
    pub short: &'static str,
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

/// The compare view's rows, named from [`COMPARE_NAMES`].
pub fn compare_rows(a: &Figures, b: &Figures) -> Vec<CompareRow> {
    type Figure = (FigureUnit, fn(&Figures) -> u64);
    let figures: [Figure; 7] = [
        (FigureUnit::Bytes, |f| f.allocated),
        (FigureUnit::Bytes, |f| f.reserved),
        (FigureUnit::Bytes, |f| f.driver_used),
        (FigureUnit::Count, |f| f.segments),
        (FigureUnit::Bytes, |f| f.inactive_split_bytes),
        (FigureUnit::Bytes, |f| f.largest_free_block),
        (FigureUnit::BasisPoints, |f| f.fragmentation_bp),
    ];
    COMPARE_NAMES
        .iter()
        .zip(figures)
        .map(|(n, (unit, f))| CompareRow {
            name: n.full,
            short: n.short,
            unit,
            a: f(a),
            b: f(b),
        })
        .collect()
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
    /// of the large pool: memory that expandable segments (unmapping its
    /// whole free pages) or `max_split_size_mb` (not splitting big blocks
    /// in the first place) could leave reusable for a large request.
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
/// them) could turn into room for a large request. Holes smaller than a
/// page stay holes under that setting. (`max_split_size_mb` works on whole
/// blocks instead: it keeps big ones from being split at all.)
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

/// Where the memory `empty_cache` cannot release lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Stranded {
    /// Free blocks in segments that also hold live tensors.
    BesideTensors,
    /// Free parts of expandable segments' pages that also hold live
    /// tensors.
    InPages,
    /// Some of each.
    Both,
}

/// One line of what an OOM's advice says, as data: its figures (bytes)
/// and, where the panel has keys for it, the actions it suggests
/// ([`OomAdvice::actions`]). The ui words it and names each action by the
/// key the keymap binds to it, so that the advice and the help cannot name
/// different keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OomAdvice {
    /// What `empty_cache()` could release (whole free segments and pages)
    /// and what it could not, and where that lies.
    Reclaim {
        releasable: u64,
        non_releasable: u64,
        stranded: Stranded,
    },
    /// Enough was freed since: a `largest`-byte block is free in `pool`
    /// now, so the same request fits.
    FreedSince { largest: u64, pool: PoolKind },
    /// The panel's own live tensors (`live` bytes) are what fills the GPU:
    /// the `tried` bytes asked would not fit in the `room` that would be
    /// free even with every cached byte reused (the device's free memory
    /// at the OOM, with what the panel gave back since: other processes
    /// are not measured again); freeing some of them is the remedy.
    FreeLiveTensors { live: u64, tried: u64, room: u64 },
    /// The GPU is too small for `tried` bytes whatever the settings: `room`
    /// would be free even with every cached byte reused (as of the OOM).
    GpuTooSmall { tried: u64, room: u64 },
    /// Expandable segments are on: the `non_releasable` bytes left share
    /// pages with live tensors, which no setting returns.
    ExpandableOn { non_releasable: u64 },
    /// A setting would make room of the stranded memory, each by its own
    /// mechanism: `expandable_segments:True` unmaps the `reusable` bytes
    /// of whole free 20 MiB pages and maps them again where the request
    /// needs them; `max_split_size_mb:N` (`max_split_mb`, where the split
    /// segments are large enough for a value PyTorch takes) keeps blocks
    /// of N MiB or more whole, never split for smaller requests, so that a
    /// freed one is a whole cached segment the OOM path releases (and
    /// `empty_cache` too) instead of a sliver beside a live tensor. The
    /// settings field is the way to try.
    TrySettings {
        reusable: u64,
        max_split_mb: Option<u64>,
    },
    /// [`OomAdvice::TrySettings`] in a scenario: the settings field would
    /// start a fresh allocator and leave the scenario's steps behind, so
    /// the way to try is the scenario's variant that sets them, `presses`
    /// of the next-variant key away.
    TryVariant {
        reusable: u64,
        max_split_mb: Option<u64>,
        presses: usize,
    },
    /// [`OomAdvice::TrySettings`] in a scenario none of whose variants
    /// sets them: they can only be tried on the panel's own tensors, out
    /// of the scenario.
    NoVariantSets {
        reusable: u64,
        max_split_mb: Option<u64>,
    },
    /// No setting makes room of the large pool's `stranded` bytes: its
    /// holes between live tensors are too small or too few for `request`.
    HolesTooSmall { stranded: u64, request: u64 },
    /// The small pool's `stranded` bytes serve only requests of 1 MiB or
    /// less.
    SmallPoolOnly { stranded: u64 },
}

impl OomAdvice {
    /// The panel's actions the advice suggests, in the order it names
    /// their keys.
    pub fn actions(self) -> &'static [StressAction] {
        use StressAction as S;
        match self {
            OomAdvice::FreeLiveTensors { .. } => {
                &[S::FreeSelected, S::FreeOldest, S::FreeRandom, S::FreeAll]
            }
            OomAdvice::TrySettings { .. } => &[S::TypeSettings],
            OomAdvice::TryVariant { .. } => &[S::ScenarioNextVariant],
            OomAdvice::NoVariantSets { .. } => &[S::UnloadScenario, S::TypeSettings],
            _ => &[],
        }
    }
}

/// What would have helped, under an OOM message, from the current layout,
/// the allocator's `settings`, the room there was at the OOM and the bytes
/// reserved now (`empty_cache()` after the OOM gave the difference back):
/// how much `empty_cache` could release and how much is non-releasable
/// (when any of it is worth a word); then the first that holds of: enough
/// was freed since for the same request; the request would not fit even if
/// every cached byte were reused (the panel's own tensors fill the GPU, or
/// the GPU is too small); and, when at least [`LARGE_NON_RELEASABLE`] is
/// stranded, whether a setting could make room of it.
pub fn oom_advice(
    layout: &[SegmentInfo],
    settings: &str,
    oom: &OomRoom,
    reserved_now: u64,
) -> Vec<OomAdvice> {
    let r = reclaim(layout);
    let mut lines = Vec::new();
    if r.releasable > 0 || r.non_releasable >= LARGE_NON_RELEASABLE {
        let stranded = if r.stranded_expandable == 0 {
            Stranded::BesideTensors
        } else if r.stranded_expandable == r.non_releasable {
            Stranded::InPages
        } else {
            Stranded::Both
        };
        lines.push(OomAdvice::Reclaim {
            releasable: r.releasable,
            non_releasable: r.non_releasable,
            stranded,
        });
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
        lines.push(OomAdvice::FreedSince { largest, pool });
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
        lines.push(if everything.saturating_add(live) >= oom.tried {
            OomAdvice::FreeLiveTensors {
                live,
                tried: oom.tried,
                room: everything,
            }
        } else {
            OomAdvice::GpuTooSmall {
                tried: oom.tried,
                room: everything,
            }
        });
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
        lines.push(OomAdvice::ExpandableOn {
            non_releasable: r.non_releasable,
        });
    } else if large_request
        && in_pages >= LARGE_NON_RELEASABLE
        && oom.tried <= free_with_cache.saturating_add(in_pages)
    {
        // The value that would have kept the split segments whole; none
        // once it is set (it did not keep these) or where they are too
        // small for any value PyTorch takes.
        let max_split_mb = if settings.contains("max_split_size_mb") {
            None
        } else {
            typical_split_segment(layout).and_then(max_split_below)
        };
        lines.push(OomAdvice::TrySettings {
            reusable: in_pages,
            max_split_mb,
        });
    } else if large_request && r.stranded_large_pool >= LARGE_NON_RELEASABLE {
        lines.push(OomAdvice::HolesTooSmall {
            stranded: r.stranded_large_pool,
            request: oom.request,
        });
    } else if large_request && stranded_small_pool >= LARGE_NON_RELEASABLE {
        lines.push(OomAdvice::SmallPoolOnly {
            stranded: stranded_small_pool,
        });
    }
    lines
}
