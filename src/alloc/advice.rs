//! What an allocator state suggests doing: data, worded by `ui`.
//!
//! PyTorch's caching allocator keeps freed blocks reserved. A large
//! reserved − allocated gap is memory other processes cannot use and, when
//! it is split into pieces, memory this process cannot use for big tensors
//! either (the classic "reserved but unallocated" OOM message). The remedies
//! are the spec's: `expandable_segments:True` maps and unmaps pages instead
//! of caching whole segments, and `max_split_size_mb` stops big blocks being
//! split.

use serde::Serialize;

use super::layout::{BlockState, PoolKind, SegmentInfo};

const MIB: u64 = 1 << 20;

/// The smallest `max_split_size_mb` PyTorch accepts (MiB).
pub const MIN_MAX_SPLIT_SIZE_MB: u64 = 20;

/// Warn when reserved − allocated is more than this share of reserved …
pub const WARN_CACHED_FRACTION: f64 = 0.20;
/// … and more than this many bytes (1 GiB): small caches are normal.
pub const WARN_CACHED_BYTES: u64 = 1 << 30;
/// Free bytes inside split large-pool segments above this share of the
/// cached-free bytes point at big-block fragmentation (`max_split_size_mb`).
pub const SPLIT_SHARE_FOR_MAX_SPLIT: f64 = 0.5;

/// A large reserved-but-unallocated cache, and what would shrink it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedFreeAdvice {
    /// reserved − allocated (bytes).
    pub cached: u64,
    /// `cached` as a share of reserved (0–100).
    pub percent_of_reserved: f64,
    /// Most of the cache is free space inside split large-pool segments:
    /// `max_split_size_mb` would help as well as `expandable_segments`.
    /// `None`: it would not (the cache is not mostly split large blocks,
    /// or the split segments are too small for any value PyTorch takes).
    pub max_split_size: Option<MaxSplitAdvice>,
}

/// The `max_split_size_mb` part of [`CachedFreeAdvice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxSplitAdvice {
    /// A value (MiB) that would keep the split segments whole: the largest
    /// power of two below their typical size (never under
    /// [`MIN_MAX_SPLIT_SIZE_MB`]). `None` when the segments are unknown
    /// (a probe's stats before its segments came).
    pub example_mb: Option<u64>,
}

/// The advice for an allocator with `allocated` and `reserved` bytes and
/// `large_split_free` bytes free inside split large-pool segments
/// (`inactive_split_bytes.large_pool.current`), if its cache deserves one.
/// `layout` (its segments, empty when unknown) gives the sizes a
/// `max_split_size_mb` example is drawn from.
pub fn cached_free_advice(
    allocated: u64,
    reserved: u64,
    large_split_free: u64,
    layout: &[SegmentInfo],
) -> Option<CachedFreeAdvice> {
    let cached = reserved.saturating_sub(allocated);
    if reserved == 0
        || cached <= WARN_CACHED_BYTES
        || (cached as f64) <= WARN_CACHED_FRACTION * reserved as f64
    {
        return None;
    }
    let mostly_split = (large_split_free as f64) > SPLIT_SHARE_FOR_MAX_SPLIT * cached as f64;
    let max_split_size = if !mostly_split {
        None
    } else if layout.is_empty() {
        Some(MaxSplitAdvice { example_mb: None })
    } else {
        // Known segments none of which a value would keep whole: no advice.
        typical_split_segment(layout)
            .and_then(max_split_below)
            .map(|mb| MaxSplitAdvice {
                example_mb: Some(mb),
            })
    };
    Some(CachedFreeAdvice {
        cached,
        percent_of_reserved: cached as f64 / reserved as f64 * 100.0,
        max_split_size,
    })
}

/// The typical size (bytes) of the ordinary large-pool segments that are
/// split (a free block beside a live one): the size at which half their
/// free bytes lie in segments at least as big. These segments are each one
/// cudaMalloc'd block, the blocks `max_split_size_mb` would keep whole.
/// `None` when there are none.
pub fn typical_split_segment(layout: &[SegmentInfo]) -> Option<u64> {
    let mut split: Vec<(u64, u64)> = layout
        .iter()
        .filter(|s| !s.is_expandable && s.segment_type == PoolKind::Large)
        .filter(|s| s.blocks.iter().any(|b| b.state.is_active()))
        .map(|s| {
            let free = s
                .blocks
                .iter()
                .filter(|b| b.state == BlockState::Inactive)
                .map(|b| b.size)
                .fold(0, u64::saturating_add);
            (s.total_size, free)
        })
        .filter(|&(_, free)| free > 0)
        .collect();
    split.sort_unstable_by_key(|&(size, _)| std::cmp::Reverse(size));
    let total = split.iter().map(|s| s.1).fold(0, u64::saturating_add);
    let mut seen = 0u64;
    for (size, free) in split {
        seen = seen.saturating_add(free);
        if seen >= total.div_ceil(2) {
            return Some(size);
        }
    }
    None
}

/// A `max_split_size_mb` value (MiB) that keeps blocks of `size` bytes
/// whole: the largest power of two MiB below it, or PyTorch's minimum
/// where that is under it; `None` when even the minimum is not below it.
pub fn max_split_below(size: u64) -> Option<u64> {
    let size_mb = size / MIB;
    // Strictly below the blocks' size, so that they are oversize with room
    // to spare (whole MiB: PyTorch takes the value in MiB).
    let below = size_mb.checked_sub(u64::from(size.is_multiple_of(MIB)))?;
    if below < MIN_MAX_SPLIT_SIZE_MB {
        return None;
    }
    // The largest power of two at most `below` (below ≥ 20, so ≥ 16).
    let power = 1u64 << (63 - below.leading_zeros());
    Some(power.max(MIN_MAX_SPLIT_SIZE_MB))
}

/// What an out-of-memory moment's figures say about its cause. PyTorch
/// frees the cached segments it can (those with no live block) before it
/// gives up, so the free bytes still cached at an OOM sit in segments that
/// also hold live blocks: memory only this process's allocator can use,
/// and only in pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OomCause {
    /// The cache alone held at least the request free, but no free block
    /// was big enough: fragmentation, what `expandable_segments:True`
    /// (pages mapped and unmapped instead of split segments) answers.
    FragmentedCache,
    /// Neither the device's free memory nor the cache's free bytes held the
    /// request, both together would have: split between the two, which
    /// `expandable_segments:True` answers too (a cached free page can be
    /// unmapped and the range mapped again as one).
    SplitBetweenCacheAndDevice,
    /// The device's free memory and the cache's free bytes together fell
    /// short of the request by `short` bytes: the memory was held by live
    /// blocks (or outside this allocator: other processes, the CUDA
    /// context); fewer or smaller tensors, not settings, make room.
    Exhausted { short: u64 },
}

/// The cause of an OOM that asked for `requested` bytes (the rounded
/// request, as the trace's `oom` entry records it) when the device had
/// `device_free` bytes free and the allocator `cached_free` bytes reserved
/// but not allocated.
pub fn oom_cause(requested: u64, device_free: u64, cached_free: u64) -> OomCause {
    if cached_free >= requested {
        OomCause::FragmentedCache
    } else if cached_free.saturating_add(device_free) >= requested {
        OomCause::SplitBetweenCacheAndDevice
    } else {
        OomCause::Exhausted {
            short: requested - cached_free.saturating_add(device_free),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn advises_only_when_both_thresholds_are_passed() {
        assert_eq!(cached_free_advice(10 * GIB, 10 * GIB, 0, &[]), None);
        // 0.9 GiB cached, 90 %: small in bytes.
        assert_eq!(cached_free_advice(GIB / 10, GIB, 0, &[]), None);
        // 2 GiB of 40 GiB cached: 5 %, small in share.
        assert_eq!(cached_free_advice(38 * GIB, 40 * GIB, 0, &[]), None);
        assert_eq!(cached_free_advice(0, 0, 0, &[]), None);
        let advice = cached_free_advice(6 * GIB, 9 * GIB, 0, &[]).expect("3 GiB, 33 %");
        assert_eq!(advice.cached, 3 * GIB);
        assert_eq!(advice.percent_of_reserved.round(), 33.0);
        assert_eq!(advice.max_split_size, None);
    }

    #[test]
    fn an_oom_the_cache_alone_could_hold_is_fragmentation() {
        assert_eq!(oom_cause(GIB, 0, 2 * GIB), OomCause::FragmentedCache);
        assert_eq!(oom_cause(GIB, 0, GIB), OomCause::FragmentedCache);
    }

    #[test]
    fn an_oom_only_device_and_cache_together_could_hold_is_split_between_them() {
        assert_eq!(
            oom_cause(2 * GIB, GIB, GIB),
            OomCause::SplitBetweenCacheAndDevice
        );
        assert_eq!(
            oom_cause(2 * GIB, GIB + 1, GIB - 1),
            OomCause::SplitBetweenCacheAndDevice
        );
    }

    #[test]
    fn an_oom_past_device_and_cache_together_is_exhaustion_by_the_shortfall() {
        assert_eq!(
            oom_cause(3 * GIB, GIB, GIB / 2),
            OomCause::Exhausted {
                short: GIB + GIB / 2
            }
        );
        // Free figures from a damaged file cannot overflow the sum.
        assert_eq!(
            oom_cause(u64::MAX, u64::MAX, 1),
            OomCause::SplitBetweenCacheAndDevice
        );
    }

    #[test]
    fn split_large_blocks_of_unknown_size_add_the_max_split_advice_without_a_value() {
        let advice = cached_free_advice(6 * GIB, 9 * GIB, 2 * GIB, &[]).expect("advises");
        assert_eq!(
            advice.max_split_size,
            Some(MaxSplitAdvice { example_mb: None })
        );
    }

    /// `count` ordinary large-pool segments of `size` bytes, each with a
    /// live block of `live` bytes and the rest free.
    fn split_segments(count: u64, size: u64, live: u64) -> Vec<SegmentInfo> {
        use super::super::layout::BlockInfo;
        (0..count)
            .map(|i| SegmentInfo {
                device: 0,
                address: i * size,
                total_size: size,
                allocated_size: live,
                active_size: live,
                requested_size: live,
                stream: 0,
                segment_type: PoolKind::Large,
                segment_pool_id: (0, 0),
                is_expandable: false,
                blocks: vec![
                    BlockInfo {
                        address: i * size,
                        size: live,
                        requested_size: live,
                        state: BlockState::ActiveAllocated,
                    },
                    BlockInfo {
                        address: i * size + live,
                        size: size - live,
                        requested_size: 0,
                        state: BlockState::Inactive,
                    },
                ],
            })
            .collect()
    }

    #[test]
    fn the_max_split_example_is_below_the_split_segments_size() {
        // fragmentation_oom: 30 segments of 200 MiB, 150 MiB live in each.
        let layout = split_segments(30, 200 * MIB, 150 * MIB);
        assert_eq!(typical_split_segment(&layout), Some(200 * MIB));
        let advice =
            cached_free_advice(4500 * MIB, 6000 * MIB, 1500 * MIB, &layout).expect("advises");
        assert_eq!(
            advice.max_split_size,
            Some(MaxSplitAdvice {
                example_mb: Some(128)
            })
        );
    }

    #[test]
    fn the_typical_split_segment_is_where_half_the_free_bytes_lie() {
        // 1 GiB free in 2 GiB segments, 3 × 50 MiB in 200 MiB ones.
        let mut layout = split_segments(1, 2 * GIB, GIB);
        layout.extend(split_segments(3, 200 * MIB, 150 * MIB));
        assert_eq!(typical_split_segment(&layout), Some(2 * GIB));
        layout.extend(split_segments(30, 200 * MIB, 150 * MIB));
        assert_eq!(typical_split_segment(&layout), Some(200 * MIB));
    }

    #[test]
    fn max_split_values_are_powers_of_two_below_the_size_and_at_least_20() {
        assert_eq!(max_split_below(200 * MIB), Some(128));
        assert_eq!(max_split_below(256 * MIB), Some(128));
        assert_eq!(max_split_below(257 * MIB), Some(256));
        assert_eq!(max_split_below(30 * MIB), Some(20));
        assert_eq!(max_split_below(21 * MIB), Some(20));
        assert_eq!(max_split_below(20 * MIB), None);
        assert_eq!(max_split_below(2 * MIB), None);
        assert_eq!(max_split_below(0), None);
        assert_eq!(max_split_below(u64::MAX), Some(1 << 43));
    }

    #[test]
    fn split_segments_too_small_for_any_value_give_no_max_split_advice() {
        let layout = split_segments(100, 20 * MIB, 2 * MIB);
        let advice =
            cached_free_advice(200 * MIB, 2000 * MIB, 1800 * MIB, &layout).expect("advises");
        assert_eq!(advice.max_split_size, None);
    }
}
