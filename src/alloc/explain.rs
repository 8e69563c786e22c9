//! Why the allocator's figures moved as they did after an action: the
//! lessons `vramtop demo` prints under its steps and the stress panel
//! under its messages, as data with one wording for both (the rules are
//! the spec's: §1.4 for segment sizes, §4.3 for what `empty_cache`
//! releases).

use serde::Serialize;

use super::layout::{BlockState, SegmentInfo};
use super::sizing::{MIN_LARGE_ALLOC, SMALL_SIZE, display_bytes};

/// Why reserved memory moved (or did not) after an allocation or an
/// `empty_cache()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Why {
    /// `empty_cache()` released nothing although free blocks are cached:
    /// every segment also holds a live block, and only whole free segments
    /// are released.
    EverySegmentHoldsALiveBlock,
    /// `empty_cache()` released nothing: no free block is cached.
    NothingCached,
    /// `empty_cache()` released whole free segments (and free pages of
    /// expandable segments); segments that hold a live block stay.
    FreeSegmentsReleased,
    /// An allocation found no cached free block of `request` bytes (the
    /// rounded request) or more, so new segments were cudaMalloc'd, of
    /// `segment` bytes each: `several` when reserved grew by more than one.
    NewSegment {
        request: u64,
        segment: u64,
        several: bool,
    },
    /// An allocation of several sizes grew reserved: some request found no
    /// cached free block large enough.
    NoCachedBlockFitsAll,
    /// Expandable segments: no mapped free block held the request, so
    /// pages were mapped (20 MiB each in the large pool, 2 MiB in the
    /// small).
    PagesMapped,
    /// An allocation was served from cached free blocks: reserved did not
    /// grow.
    ServedFromCache,
    /// The process's first allocation also created its CUDA context:
    /// `bytes` the driver holds outside reserved (nvidia-smi and the GPU's
    /// used memory count it; `memory_reserved()` never does).
    ContextCreated { bytes: u64 },
    /// Between two moments the GPU's used memory (driver used) moved
    /// `bytes` more than reserved did, `context` of them the CUDA context
    /// the process's first allocation created: driver used is the whole
    /// GPU's, other processes and contexts included.
    DriverPastReserved { bytes: i64, context: Option<u64> },
}

impl Why {
    /// Why `empty_cache()` released what it did from `layout`, the
    /// segments after it, given the bytes it `released`.
    pub fn empty_cache(layout: &[SegmentInfo], released: u64) -> Self {
        let cached_free = layout
            .iter()
            .flat_map(|s| &s.blocks)
            .any(|b| b.state == BlockState::Inactive);
        if released > 0 {
            Why::FreeSegmentsReleased
        } else if cached_free {
            Why::EverySegmentHoldsALiveBlock
        } else {
            Why::NothingCached
        }
    }

    /// The lesson in full.
    pub fn text(self) -> String {
        match self {
            Why::NewSegment {
                request, segment, ..
            } => format!("{}{}", self.short(), segment_rule(request, segment)),
            Why::EverySegmentHoldsALiveBlock => {
                format!("{} (only whole free segments are released)", self.short())
            }
            _ => self.short(),
        }
    }

    /// The lesson in a few words, for one row beside other words.
    pub fn short(self) -> String {
        match self {
            Why::EverySegmentHoldsALiveBlock => {
                "nothing freed: every segment holds a live block".to_string()
            }
            Why::NothingCached => "nothing freed: no free block is cached".to_string(),
            Why::FreeSegmentsReleased => {
                "whole free segments released; those with a live block stay".to_string()
            }
            Why::NewSegment {
                request,
                segment,
                several,
            } => {
                let request = display_bytes(request);
                let segment = display_bytes(segment);
                if several {
                    format!("no cached block was {request} or more: new {segment} segments")
                } else {
                    format!("no cached block was {request} or more: a new {segment} segment")
                }
            }
            Why::NoCachedBlockFitsAll => {
                "no cached block fit every request: new segments".to_string()
            }
            Why::PagesMapped => {
                "no mapped free block was large enough: pages were mapped".to_string()
            }
            Why::ServedFromCache => "cached free blocks held it: no new segment".to_string(),
            Why::DriverPastReserved {
                context: Some(context),
                ..
            } => format!(
                "driver used is the whole GPU: {} of its Δ is the CUDA context the first \
                 allocation created",
                display_bytes(context)
            ),
            Why::DriverPastReserved {
                bytes,
                context: None,
            } => format!(
                "driver used is the whole GPU: other processes and contexts moved it {}{} \
                 past reserved",
                if bytes < 0 { "-" } else { "+" },
                display_bytes(bytes.unsigned_abs())
            ),
            Why::ContextCreated { bytes } => format!(
                "the first allocation also created the CUDA context: {} outside reserved",
                display_bytes(bytes)
            ),
        }
    }
}

/// Why a `request`-byte (rounded) allocation got a `segment`-byte segment
/// (spec §1.4), as words to follow the lesson: " (requests of 1–10 MiB get
/// a whole 20 MiB one)"; empty where the segment is not the rule's (a
/// setting changed it).
fn segment_rule(request: u64, segment: u64) -> String {
    let rule = super::sizing::allocation_size(request);
    if rule != segment {
        return String::new();
    }
    if request <= SMALL_SIZE {
        " (requests of 1 MiB or less share 2 MiB segments)".to_string()
    } else if request < MIN_LARGE_ALLOC {
        " (requests of 1–10 MiB get a whole 20 MiB one)".to_string()
    } else {
        " (requests of 10 MiB or more get their size rounded up to a multiple of 2 MiB)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_7_mib_request_says_no_cached_block_fit_and_the_20_mib_rule() {
        let why = Why::NewSegment {
            request: 7 * MIB,
            segment: 20 * MIB,
            several: false,
        };
        assert_eq!(
            why.short(),
            "no cached block was 7.00 MiB or more: a new 20.0 MiB segment"
        );
        assert_eq!(
            why.text(),
            "no cached block was 7.00 MiB or more: a new 20.0 MiB segment \
             (requests of 1–10 MiB get a whole 20 MiB one)"
        );
    }

    #[test]
    fn a_segment_other_than_the_rules_gets_no_rule() {
        // 30 MiB asked, 20 MiB segments: a setting (large_segment_size)
        // or expandable pages, not §1.4.
        let why = Why::NewSegment {
            request: 30 * MIB,
            segment: 20 * MIB,
            several: true,
        };
        assert_eq!(
            why.text(),
            "no cached block was 30.0 MiB or more: new 20.0 MiB segments"
        );
    }

    #[test]
    fn empty_cache_releasing_nothing_says_whether_anything_was_cached() {
        assert_eq!(Why::empty_cache(&[], 0), Why::NothingCached);
        assert_eq!(Why::empty_cache(&[], MIB), Why::FreeSegmentsReleased);
        // A segment with a live block and a cached free one: nothing goes,
        // because the segment is not wholly free.
        let block = |address: u64, state: BlockState| crate::alloc::layout::BlockInfo {
            address,
            size: MIB,
            requested_size: MIB,
            state,
        };
        let segment = SegmentInfo {
            device: 0,
            address: 0,
            total_size: 2 * MIB,
            allocated_size: MIB,
            active_size: MIB,
            requested_size: MIB,
            stream: 0,
            segment_type: crate::alloc::PoolKind::Small,
            segment_pool_id: (0, 0),
            is_expandable: false,
            blocks: vec![
                block(0, BlockState::ActiveAllocated),
                block(MIB, BlockState::Inactive),
            ],
        };
        assert_eq!(
            Why::empty_cache(std::slice::from_ref(&segment), 0),
            Why::EverySegmentHoldsALiveBlock
        );
    }
}
