//! Derived views of an allocator layout: the free-block size histogram,
//! internal vs external free memory, the largest free block and a
//! fragmentation figure. Pure functions of a layout, shared by the dashboard,
//! the stress panel and the snapshot viewer.

use serde::Serialize;

use super::layout::{BlockState, SegmentInfo};

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
    /// The part of `external_free` in segments that also hold an active
    /// block: empty_cache cannot release it (PyTorch's "non-releasable").
    pub non_releasable: u64,
    pub largest_free_block: u64,
    pub free_blocks: u64,
    /// 1 − largest free block / external free: 0 when all free memory is one
    /// block (or there is none), close to 1 when it is scattered in crumbs.
    pub fragmentation: f64,
}

fn bucket_index(size: u64) -> usize {
    if size <= 1 << FIRST_BUCKET_LOG2 {
        return 0;
    }
    // ceil(log2(size)) without floating point.
    let log2_ceil = 64 - (size - 1).leading_zeros();
    (log2_ceil.min(LAST_BUCKET_LOG2) - FIRST_BUCKET_LOG2) as usize
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
        largest_free_block: 0,
        free_blocks: 0,
        fragmentation: 0.0,
    };
    for seg in segments {
        let has_active = seg.blocks.iter().any(|b| b.state.is_active());
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    f.internal_free += b.size.saturating_sub(b.requested_size);
                }
                BlockState::ActivePendingFree => {}
                BlockState::Inactive => {
                    let bucket = &mut histogram[bucket_index(b.size)];
                    bucket.count += 1;
                    bucket.bytes += b.size;
                    f.external_free += b.size;
                    f.free_blocks += 1;
                    f.largest_free_block = f.largest_free_block.max(b.size);
                    if has_active {
                        f.non_releasable += b.size;
                    }
                }
            }
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
    }
}
