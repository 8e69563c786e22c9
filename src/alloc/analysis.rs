//! Derived views of an allocator layout: the free-block size histogram,
//! internal vs external free memory, the largest free block and a
//! fragmentation figure. Pure functions of a layout, shared by the dashboard,
//! the stress panel and the snapshot viewer.

use serde::Serialize;

use super::layout::{BlockInfo, BlockState, PoolKind, SegmentInfo};
use super::sizing::{LARGE_BUFFER, SMALL_BUFFER};

/// The smallest histogram bucket holds blocks of at most 512 B (2^9); each
/// next bucket doubles; the last holds everything of 1 GiB (2^30) and more.
pub const FIRST_BUCKET_LOG2: u32 = 9;
pub const LAST_BUCKET_LOG2: u32 = 30;
pub const BUCKETS: usize = (LAST_BUCKET_LOG2 - FIRST_BUCKET_LOG2 + 1) as usize;

/// One histogram bucket: free blocks with `lower < size ≤ upper` (the first
/// bucket starts at 0, the last has no upper bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Upper bound of the bucket in bytes (for the last: its lower bound).
    pub bound: u64,
    /// Whether this is the open-ended last bucket (≥ `bound`).
    pub open_ended: bool,
    pub count: u64,
    pub bytes: u64,
}

/// Free-memory figures of a layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fragmentation {
    /// Free (inactive) blocks by size, log2 buckets 512 B … ≥ 1 GiB.
    pub histogram: Vec<Bucket>,
    /// Bytes lost to rounding inside allocated blocks (size − requested).
    pub internal_free: u64,
    /// Bytes of inactive blocks: cached, free, in segments.
    pub external_free: u64,
    /// The part of `external_free` that `empty_cache` cannot release: every
    /// free block of a segment that also holds an active block (PyTorch's
    /// "non-releasable"), and in expandable segments the parts of free
    /// blocks short of a whole page (whole pages are unmapped).
    pub non_releasable: u64,
    /// The part of `external_free` in segments every block of which is
    /// free: `empty_cache` returns them, and PyTorch frees them and
    /// retries before it raises an OOM, so they never cause one. A
    /// fragmentation of free memory all in such segments is no threat.
    pub free_in_whole_segments: u64,
    /// The segments of `free_in_whole_segments`.
    pub whole_free_segments: u64,
    pub largest_free_block: u64,
    /// The largest free block outside wholly free segments (bytes): of the
    /// split segments, whose free blocks `empty_cache` keeps.
    pub largest_split_free_block: u64,
    pub free_blocks: u64,
    /// 1 − largest free block / external free: 0 when all free memory is one
    /// block (or there is none), close to 1 when it is scattered in crumbs.
    pub fragmentation: f64,
}

impl Fragmentation {
    /// Whether more than half of the free bytes lie in wholly free
    /// segments: `empty_cache` returns most of it, and the fragmentation
    /// figure says more about that cache than about fragmentation.
    pub fn mostly_whole_free_segments(&self) -> bool {
        self.free_in_whole_segments
            > self
                .external_free
                .saturating_sub(self.free_in_whole_segments)
    }

    /// The fragmentation of the split segments alone (0 … 1): 1 − their
    /// largest free block / their free bytes, 0 where they have none.
    /// What stays fragmented after `empty_cache`.
    pub fn split_fragmentation(&self) -> f64 {
        let split_free = self
            .external_free
            .saturating_sub(self.free_in_whole_segments);
        if split_free == 0 {
            return 0.0;
        }
        1.0 - self.largest_split_free_block.min(split_free) as f64 / split_free as f64
    }
}

fn bucket_index(size: u64) -> usize {
    if size <= 1 << FIRST_BUCKET_LOG2 {
        return 0;
    }
    // ceil(log2(size)) without floating point.
    let log2_ceil = 64 - (size - 1).leading_zeros();
    (log2_ceil.min(LAST_BUCKET_LOG2) - FIRST_BUCKET_LOG2) as usize
}

/// Bytes of a segment's page: expandable segments map 2 MiB pages in the
/// small pool and 20 MiB pages in the large one.
pub fn expandable_page_size(kind: PoolKind) -> u64 {
    match kind {
        PoolKind::Small => SMALL_BUFFER,
        PoolKind::Large => LARGE_BUFFER,
    }
}

/// Bytes `empty_cache` would give back to the device from `segment`. A
/// segment goes back only whole, when every block in it is free; an
/// expandable segment unmaps, in every run of adjacent free blocks, the
/// whole pages strictly inside the run, counted from the mapped range's
/// start (a range begins on a page). With `pending_complete`, blocks
/// waiting for stream events count as free: `empty_cache` synchronises the
/// streams first.
pub fn released_by_empty_cache(segment: &SegmentInfo, pending_complete: bool) -> u64 {
    let is_free = |b: &BlockInfo| match b.state {
        BlockState::Inactive => true,
        BlockState::ActivePendingFree => pending_complete,
        BlockState::ActiveAllocated => false,
    };
    if !segment.is_expandable {
        return if segment.blocks.iter().all(is_free) {
            segment.total_size
        } else {
            0
        };
    }
    let page = expandable_page_size(segment.segment_type);
    let whole_pages = |(start, end): (u64, u64)| {
        (end / page)
            .saturating_sub(start.div_ceil(page))
            .saturating_mul(page)
    };
    let mut released = 0u64;
    // The current run of free blocks as offsets into the range.
    let mut run: Option<(u64, u64)> = None;
    for b in &segment.blocks {
        let span = b
            .address
            .checked_sub(segment.address)
            .and_then(|start| Some((start, start.checked_add(b.size)?)));
        match (span, run) {
            (Some((start, end)), Some((first, last))) if is_free(b) && start == last => {
                run = Some((first, end));
            }
            (Some(span), _) if is_free(b) => {
                released = released.saturating_add(run.map_or(0, whole_pages));
                run = Some(span);
            }
            _ => {
                released = released.saturating_add(run.map_or(0, whole_pages));
                run = None;
            }
        }
    }
    released.saturating_add(run.map_or(0, whole_pages))
}

/// Computes the free-memory figures of `segments`.
pub fn fragmentation(segments: &[SegmentInfo]) -> Fragmentation {
    let mut histogram: Vec<Bucket> = (0..BUCKETS)
        .map(|i| {
            let log2 = FIRST_BUCKET_LOG2 + i as u32;
            Bucket {
                bound: 1 << log2,
                open_ended: log2 == LAST_BUCKET_LOG2,
                count: 0,
                bytes: 0,
            }
        })
        .collect();
    let mut f = Fragmentation {
        histogram: Vec::new(),
        internal_free: 0,
        external_free: 0,
        non_releasable: 0,
        free_in_whole_segments: 0,
        whole_free_segments: 0,
        largest_free_block: 0,
        largest_split_free_block: 0,
        free_blocks: 0,
        fragmentation: 0.0,
    };
    // Sizes come from files: a damaged one may list more bytes than a u64
    // holds, so every sum saturates.
    for seg in segments {
        let mut segment_free = 0u64;
        let mut segment_largest = 0u64;
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    f.internal_free = f
                        .internal_free
                        .saturating_add(b.size.saturating_sub(b.requested_size));
                }
                BlockState::ActivePendingFree => {}
                BlockState::Inactive => {
                    let bucket = &mut histogram[bucket_index(b.size)];
                    bucket.count += 1;
                    bucket.bytes = bucket.bytes.saturating_add(b.size);
                    f.external_free = f.external_free.saturating_add(b.size);
                    f.free_blocks += 1;
                    f.largest_free_block = f.largest_free_block.max(b.size);
                    segment_largest = segment_largest.max(b.size);
                    segment_free = segment_free.saturating_add(b.size);
                }
            }
        }
        // As things stand: a block waiting for its stream events is not free.
        let kept = segment_free.saturating_sub(released_by_empty_cache(seg, false));
        f.non_releasable = f.non_releasable.saturating_add(kept);
        // As above, a block waiting for its stream events is not free: its
        // segment is not wholly free yet.
        let wholly_free =
            !seg.blocks.is_empty() && seg.blocks.iter().all(|b| b.state == BlockState::Inactive);
        if wholly_free {
            f.free_in_whole_segments = f.free_in_whole_segments.saturating_add(segment_free);
            f.whole_free_segments += 1;
        } else {
            f.largest_split_free_block = f.largest_split_free_block.max(segment_largest);
        }
    }
    if f.external_free > 0 {
        f.fragmentation = 1.0 - f.largest_free_block as f64 / f.external_free as f64;
    }
    f.histogram = histogram;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice, PoolKind};

    const MIB: u64 = 1 << 20;

    #[test]
    fn bucket_edges_are_inclusive_upper_bounds() {
        assert_eq!(bucket_index(1), 0);
        assert_eq!(bucket_index(512), 0);
        assert_eq!(bucket_index(513), 1);
        assert_eq!(bucket_index(1024), 1);
        assert_eq!(bucket_index(MIB), 11);
        assert_eq!(bucket_index(1 << 30), BUCKETS - 1);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn empty_layout_has_no_free_memory_and_zero_fragmentation() {
        let f = fragmentation(&[]);
        assert_eq!(f.external_free, 0);
        assert_eq!(f.fragmentation, 0.0);
        assert_eq!(f.histogram.len(), BUCKETS);
        assert!(f.histogram.iter().all(|b| b.count == 0));
    }

    #[test]
    fn holes_between_live_blocks_count_as_external_non_releasable_free() {
        let mut m =
            CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
        let a = m.malloc(6 * MIB, 0).expect("fits");
        let _b = m.malloc(6 * MIB, 0).expect("fits");
        let _c = m.malloc(6 * MIB - 100, 0).expect("fits");
        m.free(a).expect("live");
        let f = fragmentation(&m.layout());
        // [6f, 6A, 6A (requested 100 B less), 2f]
        assert_eq!(f.external_free, 8 * MIB);
        assert_eq!(f.non_releasable, 8 * MIB);
        assert_eq!(f.largest_free_block, 6 * MIB);
        assert_eq!(f.free_blocks, 2);
        assert_eq!(f.internal_free, 100, "6 MiB − 100 B rounds up to 6 MiB");
        assert!((f.fragmentation - 0.25).abs() < 1e-12);
        let six = bucket_index(6 * MIB);
        assert_eq!(f.histogram[six].count, 1);
        assert_eq!(f.histogram[bucket_index(2 * MIB)].bytes, 2 * MIB);
        assert_eq!(m.layout()[0].segment_type, PoolKind::Large);
    }

    #[test]
    fn a_whole_free_segment_is_releasable() {
        let mut m =
            CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
        let a = m.malloc(30 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        let f = fragmentation(&m.layout());
        assert_eq!(f.external_free, 30 * MIB);
        assert_eq!(f.non_releasable, 0);
        assert_eq!(f.fragmentation, 0.0);
        assert_eq!(f.free_in_whole_segments, 30 * MIB);
        assert_eq!(f.whole_free_segments, 1);
    }

    #[test]
    fn split_fragmentation_leaves_out_the_wholly_free_segments() {
        let mut m =
            CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
        // A freed 60 MiB segment beside a 30 MiB one split by a live 6 MiB
        // block and a live 4 MiB one after a free 10 MiB: 84 MiB free,
        // 60 MiB of it whole.
        let a = m.malloc(60 * MIB, 0).expect("fits");
        let b = m.malloc(30 * MIB, 0).expect("fits");
        m.free(b).expect("live");
        let _c = m.malloc(6 * MIB, 0).expect("fits");
        let d = m.malloc(10 * MIB, 0).expect("fits");
        let _e = m.malloc(4 * MIB, 0).expect("fits");
        m.free(d).expect("live");
        m.free(a).expect("live");
        let f = fragmentation(&m.layout());
        assert_eq!(f.external_free, 80 * MIB);
        assert_eq!(f.free_in_whole_segments, 60 * MIB);
        assert!(f.mostly_whole_free_segments());
        // The split segment's free bytes: 10 MiB and the 10 MiB tail.
        assert_eq!(f.largest_split_free_block, 10 * MIB);
        assert!((f.split_fragmentation() - 0.5).abs() < 1e-12);
        // Overall the 60 MiB block is the largest of 80 MiB.
        assert!((f.fragmentation - 0.25).abs() < 1e-12);
        // None free: nothing fragmented, nothing whole.
        let none = fragmentation(&[]);
        assert!(!none.mostly_whole_free_segments());
        assert_eq!(none.split_fragmentation(), 0.0);
    }

    #[test]
    fn free_in_whole_segments_counts_only_segments_with_no_live_block() {
        let mut m =
            CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
        // Three 30 MiB segments: one freed whole, one split by a live
        // 6 MiB block, one live.
        let a = m.malloc(30 * MIB, 0).expect("fits");
        let b = m.malloc(30 * MIB, 0).expect("fits");
        let _c = m.malloc(30 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        m.free(b).expect("live");
        let _d = m.malloc(6 * MIB, 0).expect("fits");
        let f = fragmentation(&m.layout());
        assert_eq!(f.external_free, 54 * MIB);
        assert_eq!(f.non_releasable, 24 * MIB);
        // 1 − 30/54: a fragmentation of 44 % with most of the free bytes
        // in a segment empty_cache returns.
        assert!((f.fragmentation - 24.0 / 54.0).abs() < 1e-12);
        assert_eq!(f.free_in_whole_segments, 30 * MIB);
        assert_eq!(f.whole_free_segments, 1);
    }

    /// Runs `ops` (a size in KiB to allocate, or an index of a live block to
    /// free) through a model with `settings`, then checks the figures of its
    /// layout against what the model's own `empty_cache` releases.
    fn empty_cache_releases_what_the_figures_say(settings: &str, ops: &[(bool, u64)]) {
        let config = AllocatorConfig::parse(settings).expect("valid settings");
        let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 40), 0, config);
        let mut live = Vec::new();
        for &(alloc, n) in ops {
            if alloc || live.is_empty() {
                live.push(m.malloc(n << 10, 0).expect("fits"));
            } else {
                let ptr = live.swap_remove((n as usize) % live.len());
                m.free(ptr).expect("live");
            }
        }
        let layout = m.layout();
        let f = fragmentation(&layout);
        let reserved = |l: &[SegmentInfo]| l.iter().map(|s| s.total_size).sum::<u64>();
        let released: u64 = layout
            .iter()
            .map(|s| released_by_empty_cache(s, true))
            .sum();
        let before = reserved(&layout);
        m.empty_cache();
        let after = reserved(&m.layout());
        assert_eq!(before - after, released, "{settings}: released bytes");
        assert_eq!(
            f.external_free - f.non_releasable,
            released,
            "{settings}: free memory empty_cache can give back"
        );
        // Wholly free segments go back whole; an expandable segment also
        // gives back the pages of free blocks beside live ones.
        assert!(f.free_in_whole_segments <= released, "{settings}");
        if settings.is_empty() {
            assert_eq!(f.free_in_whole_segments, released, "{settings}");
        }
    }

    proptest::proptest! {
        #[test]
        fn non_releasable_is_what_empty_cache_keeps(
            ops in proptest::collection::vec((proptest::bool::weighted(0.6), 1u64..80_000), 1..60),
        ) {
            empty_cache_releases_what_the_figures_say("", &ops);
            empty_cache_releases_what_the_figures_say("expandable_segments:True", &ops);
        }
    }

    #[test]
    fn an_expandable_free_block_gives_back_its_whole_pages() {
        let config = AllocatorConfig::parse("expandable_segments:True").expect("valid");
        let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 40), 0, config);
        // 3 MiB at the range's start, 50 MiB after it: 60 MiB mapped
        // (three 20 MiB pages), then the 50 MiB freed.
        let _a = m.malloc(3 * MIB, 0).expect("fits");
        let b = m.malloc(50 * MIB, 0).expect("fits");
        m.free(b).expect("live");
        let f = fragmentation(&m.layout());
        assert_eq!(f.external_free, 57 * MIB);
        // Pages 2 and 3 ([20, 60) MiB) lie wholly in the free block [3, 60).
        assert_eq!(f.non_releasable, 17 * MIB);
    }

    #[test]
    fn sizes_past_what_a_u64_holds_saturate_instead_of_overflowing() {
        use super::super::layout::BlockInfo;
        let huge = |state| BlockInfo {
            address: 0,
            size: 1 << 62,
            requested_size: 0,
            state,
        };
        let seg = SegmentInfo {
            device: 0,
            address: 0,
            total_size: u64::MAX,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            blocks: vec![
                huge(BlockState::ActiveAllocated),
                huge(BlockState::Inactive),
                huge(BlockState::Inactive),
                huge(BlockState::Inactive),
                huge(BlockState::Inactive),
                huge(BlockState::Inactive),
            ],
        };
        let f = fragmentation(&[seg.clone(), seg]);
        assert_eq!(f.external_free, u64::MAX);
        assert_eq!(f.non_releasable, u64::MAX);
        assert_eq!(f.internal_free, 1 << 63);
    }
}
