//! What an allocator state suggests doing: data, worded by `ui`.
//!
//! PyTorch's caching allocator keeps freed blocks reserved. A large
//! reserved − allocated gap is memory other processes cannot use and, when
//! it is split into pieces, memory this process cannot use for big tensors
//! either (the classic "reserved but unallocated" OOM message). The remedies
//! are the spec's: `expandable_segments:True` maps and unmaps pages instead
//! of caching whole segments, and `max_split_size_mb` stops big blocks being
//! split.

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
    fn split_large_blocks_add_the_max_split_advice() {
        let advice = cached_free_advice(6 * GIB, 9 * GIB, 2 * GIB).expect("advises");
        assert!(advice.suggest_max_split_size);
    }
}
