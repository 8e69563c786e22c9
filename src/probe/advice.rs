//! The "cached but free is large" warning and what to try about it.
//!
//! PyTorch's caching allocator keeps freed blocks reserved. A large
//! reserved − allocated gap is memory other processes cannot use and, when
//! it is split into pieces, memory this process cannot use for big tensors
//! either (the classic "reserved but unallocated" OOM message).

use crate::ui::format::bytes;

/// Warn when reserved − allocated is more than this share of reserved …
pub const WARN_CACHED_FRACTION: f64 = 0.20;
/// … and more than this many bytes (1 GiB): small caches are normal.
pub const WARN_CACHED_BYTES: u64 = 1 << 30;
/// Free bytes inside split large-pool segments above this share of the
/// cached-free bytes point at big-block fragmentation (`max_split_size_mb`).
pub const SPLIT_SHARE_FOR_MAX_SPLIT: f64 = 0.5;

/// The warning for an allocator with `allocated` and `reserved` bytes and
/// `large_split_free` bytes free inside split large-pool segments
/// (`inactive_split_bytes.large_pool.current`), if it deserves one.
pub fn cached_free_warning(allocated: u64, reserved: u64, large_split_free: u64) -> Option<String> {
    let cached = reserved.saturating_sub(allocated);
    if reserved == 0
        || cached <= WARN_CACHED_BYTES
        || (cached as f64) <= WARN_CACHED_FRACTION * reserved as f64
    {
        return None;
    }
    let share = (cached as f64 / reserved as f64 * 100.0).round();
    let mut text = format!(
        "{} reserved but unallocated ({share:.0} % of reserved): try \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        bytes(cached)
    );
    if (large_split_free as f64) > SPLIT_SHARE_FOR_MAX_SPLIT * cached as f64 {
        text.push_str(
            "; most of it is in split large blocks: max_split_size_mb:N (e.g. 512) \
             stops big blocks being split",
        );
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn warns_only_when_both_thresholds_are_passed() {
        assert_eq!(cached_free_warning(10 * GIB, 10 * GIB, 0), None);
        // 0.9 GiB cached, 90 %: small in bytes.
        assert_eq!(cached_free_warning(GIB / 10, GIB, 0), None);
        // 2 GiB of 40 GiB cached: 5 %, small in share.
        assert_eq!(cached_free_warning(38 * GIB, 40 * GIB, 0), None);
        let w = cached_free_warning(6 * GIB, 9 * GIB, 0).expect("3 GiB, 33 %");
        assert!(w.contains("expandable_segments:True"), "{w}");
        assert!(w.contains("33 %"), "{w}");
        assert!(!w.contains("max_split_size_mb"), "{w}");
        assert_eq!(cached_free_warning(0, 0, 0), None);
    }

    #[test]
    fn split_large_blocks_add_the_max_split_advice() {
        let w = cached_free_warning(6 * GIB, 9 * GIB, 2 * GIB).expect("warns");
        assert!(w.contains("max_split_size_mb"), "{w}");
    }
}
