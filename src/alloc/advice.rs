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
    pub suggest_max_split_size: bool,
}

/// The advice for an allocator with `allocated` and `reserved` bytes and
/// `large_split_free` bytes free inside split large-pool segments
/// (`inactive_split_bytes.large_pool.current`), if its cache deserves one.
pub fn cached_free_advice(
    allocated: u64,
    reserved: u64,
    large_split_free: u64,
) -> Option<CachedFreeAdvice> {
    let cached = reserved.saturating_sub(allocated);
    if reserved == 0
        || cached <= WARN_CACHED_BYTES
        || (cached as f64) <= WARN_CACHED_FRACTION * reserved as f64
    {
        return None;
    }
    Some(CachedFreeAdvice {
        cached,
        percent_of_reserved: cached as f64 / reserved as f64 * 100.0,
        suggest_max_split_size: (large_split_free as f64)
            > SPLIT_SHARE_FOR_MAX_SPLIT * cached as f64,
    })
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
        assert_eq!(cached_free_advice(10 * GIB, 10 * GIB, 0), None);
        // 0.9 GiB cached, 90 %: small in bytes.
        assert_eq!(cached_free_advice(GIB / 10, GIB, 0), None);
        // 2 GiB of 40 GiB cached: 5 %, small in share.
        assert_eq!(cached_free_advice(38 * GIB, 40 * GIB, 0), None);
        assert_eq!(cached_free_advice(0, 0, 0), None);
        let advice = cached_free_advice(6 * GIB, 9 * GIB, 0).expect("3 GiB, 33 %");
        assert_eq!(advice.cached, 3 * GIB);
        assert_eq!(advice.percent_of_reserved.round(), 33.0);
        assert!(!advice.suggest_max_split_size);
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
    fn split_large_blocks_add_the_max_split_advice() {
        let advice = cached_free_advice(6 * GIB, 9 * GIB, 2 * GIB).expect("advises");
        assert!(advice.suggest_max_split_size);
    }
}
