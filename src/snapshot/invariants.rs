//! Structural rules that every segment of a real allocator dump obeys.
//!
//! They follow from how the caching allocator carves segments (see
//! `shared/reference/pytorch-caching-allocator.md` §2 and §9): blocks tile
//! their segment exactly, sizes are rounded to 512 bytes, free neighbours are
//! always merged, and segments come in 2 MiB units. A finding therefore
//! means a hand-made or corrupted snapshot, or a PyTorch behaviour this
//! project does not model yet.

use std::fmt;

use serde::Serialize;

use super::types::{Segment, Snapshot};
use crate::alloc::{BlockState, PoolKind};

/// Every block size is a multiple of this (PyTorch's `kMinBlockSize`).
const BLOCK_ALIGNMENT: u64 = 512;
/// Small-pool segments are exactly this big; large ones a multiple of it.
const SEGMENT_GRANULARITY: u64 = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Σ block sizes ≠ `total_size`.
    BlockSizesDoNotSumToTotal,
    /// A block does not start where the previous one ends (or the first
    /// block not at the segment address).
    NonContiguousBlocks,
    /// A block size is not a multiple of 512.
    UnalignedBlockSize,
    /// Two neighbouring inactive blocks: the allocator would have merged them.
    AdjacentInactiveBlocks,
    /// `allocated_size` ≠ Σ sizes of `active_allocated` blocks.
    AllocatedSizeMismatch,
    /// `active_size` ≠ Σ sizes of active blocks.
    ActiveSizeMismatch,
    /// `requested_size` ≠ Σ requested sizes of active blocks.
    RequestedSizeMismatch,
    /// An active block's requested size is more than its size (the
    /// allocator rounds a request up, never down).
    RequestedOverSize,
    /// A non-expandable small segment that is not exactly 2 MiB.
    SmallSegmentNot2MiB,
    /// A non-expandable large segment that is not a multiple of 2 MiB.
    LargeSegmentNotMultipleOf2MiB,
}

impl FindingKind {
    /// Whether the file contradicts itself here: its blocks do not tile
    /// their segment, or a segment's recorded sums are not its blocks'.
    /// PyTorch never writes such a layout, whatever its allocator did, so
    /// the file is bad input (hand-made or damaged), not something vramtop's
    /// model could have got wrong. The other rules (alignment, merged
    /// neighbours, 2 MiB segments, rounding up) are the allocator's
    /// behaviour: one broken there may be a PyTorch this project does not
    /// model yet.
    pub fn contradicts_the_file(self) -> bool {
        matches!(
            self,
            FindingKind::BlockSizesDoNotSumToTotal
                | FindingKind::NonContiguousBlocks
                | FindingKind::AllocatedSizeMismatch
                | FindingKind::ActiveSizeMismatch
                | FindingKind::RequestedSizeMismatch
        )
    }
}

/// One broken rule in one segment. Rules that concern blocks are reported
/// once per segment, naming the first offending block and the count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Index into [`Snapshot::segments`].
    pub segment_index: usize,
    pub device: u32,
    /// The segment's address.
    pub address: u64,
    pub kind: FindingKind,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "segment {} (device {}, 0x{:x}): {}",
            self.segment_index, self.device, self.address, self.message
        )
    }
}

/// Checks every segment; an empty result means the snapshot is consistent.
pub fn check_invariants(snapshot: &Snapshot) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (index, segment) in snapshot.segments.iter().enumerate() {
        let mut report = |kind, message| {
            findings.push(Finding {
                segment_index: index,
                device: segment.device,
                address: segment.address,
                kind,
                message,
            })
        };
        check_segment(segment, &mut report);
    }
    findings
}

/// Where a device's trace goes back in time: an entry whose `time_us` is
/// earlier than that of the timed entry before it (entries without a time
/// are passed over). The file is still read and replayed in its order;
/// its times there are not to be trusted (a clock step, an edited or
/// merged file). Reported once per device: the first, and the count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackwardsTime {
    pub device: u32,
    /// Index of the first such entry in the device's trace as read.
    pub entry_index: usize,
    /// Its time and the time of the entry before it, µs as recorded.
    pub time_us: i64,
    pub previous_time_us: i64,
    /// Entries earlier than the one before them, the first included.
    pub count: usize,
    pub message: String,
}

impl fmt::Display for BackwardsTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU {}: {}", self.device, self.message)
    }
}

/// Checks that each device's trace times never go backwards; one finding
/// per device that does (none for a trace without times).
pub fn check_trace_times(snapshot: &Snapshot) -> Vec<BackwardsTime> {
    let mut findings = Vec::new();
    for (device, trace) in snapshot.device_traces.iter().enumerate() {
        let Ok(device) = u32::try_from(device) else {
            break;
        };
        let mut previous: Option<i64> = None;
        let mut first: Option<(usize, i64, i64)> = None;
        let mut count = 0usize;
        for (index, entry) in trace.iter().enumerate() {
            let Some(time) = entry.time_us() else {
                continue;
            };
            if let Some(before) = previous
                && time < before
            {
                first.get_or_insert((index, time, before));
                count += 1;
            }
            previous = Some(time);
        }
        if let Some((entry_index, time_us, previous_time_us)) = first {
            // i128: the times are any i64 a file holds.
            let back = i128::from(previous_time_us) - i128::from(time_us);
            let others = match count {
                1 => String::new(),
                n => format!(" ({} more like it)", n - 1),
            };
            findings.push(BackwardsTime {
                device,
                entry_index,
                time_us,
                previous_time_us,
                count,
                message: format!(
                    "time goes backwards at trace entry #{entry_index}, {} earlier than the \
                     entry before it{others}",
                    duration(back)
                ),
            });
        }
    }
    findings
}

/// Microseconds for people: "0.250 ms" under a second, "2.500 s" from one.
fn duration(us: i128) -> String {
    if us >= 1_000_000 {
        format!("{:.3} s", us as f64 / 1e6)
    } else {
        format!("{:.3} ms", us as f64 / 1e3)
    }
}

/// The first offending block index and how many there are.
#[derive(Default)]
struct Offenders {
    first: Option<(usize, String)>,
    count: usize,
}

impl Offenders {
    fn note(&mut self, block_index: usize, what: impl FnOnce() -> String) {
        if self.first.is_none() {
            self.first = Some((block_index, what()));
        }
        self.count += 1;
    }

    fn message(self) -> Option<String> {
        let (index, what) = self.first?;
        Some(match self.count {
            1 => format!("block {index} {what}"),
            n => format!("block {index} {what} ({} more like it)", n - 1),
        })
    }
}

fn check_segment(segment: &Segment, report: &mut impl FnMut(FindingKind, String)) {
    // u128 sums: a corrupted file must not overflow the checker.
    let mut total: u128 = 0;
    let mut allocated: u128 = 0;
    let mut active: u128 = 0;
    let mut requested: u128 = 0;
    let mut expected_address = u128::from(segment.address);
    let mut gaps = Offenders::default();
    let mut unaligned = Offenders::default();
    let mut merged_neighbours = Offenders::default();
    let mut over_requested = Offenders::default();
    let mut previous_inactive = false;

    for (index, block) in segment.blocks.iter().enumerate() {
        if u128::from(block.address) != expected_address {
            gaps.note(index, || {
                format!(
                    "starts at 0x{:x}, expected 0x{expected_address:x}",
                    block.address
                )
            });
        }
        expected_address = u128::from(block.address) + u128::from(block.size);
        if !block.size.is_multiple_of(BLOCK_ALIGNMENT) {
            unaligned.note(index, || {
                format!(
                    "has size {}, not a multiple of {BLOCK_ALIGNMENT}",
                    block.size
                )
            });
        }
        let inactive = block.state == BlockState::Inactive;
        if inactive && previous_inactive {
            merged_neighbours.note(index, || {
                "and the block before it are both inactive (free neighbours are always merged)"
                    .to_string()
            });
        }
        previous_inactive = inactive;

        total += u128::from(block.size);
        if block.state == BlockState::ActiveAllocated {
            allocated += u128::from(block.size);
        }
        if block.state.is_active() {
            active += u128::from(block.size);
            requested += u128::from(block.requested_size);
            if block.requested_size > block.size {
                over_requested.note(index, || {
                    format!(
                        "has requested_size {}, more than its size {}",
                        block.requested_size, block.size
                    )
                });
            }
        }
    }

    if total != u128::from(segment.total_size) {
        report(
            FindingKind::BlockSizesDoNotSumToTotal,
            format!(
                "{} blocks sum to {total} bytes, total_size is {}",
                segment.blocks.len(),
                segment.total_size
            ),
        );
    }
    for (offenders, kind) in [
        (gaps, FindingKind::NonContiguousBlocks),
        (unaligned, FindingKind::UnalignedBlockSize),
        (merged_neighbours, FindingKind::AdjacentInactiveBlocks),
        (over_requested, FindingKind::RequestedOverSize),
    ] {
        if let Some(message) = offenders.message() {
            report(kind, message);
        }
    }
    let recorded_sums = [
        (
            segment.allocated_size,
            allocated,
            "allocated_size",
            "active_allocated blocks' sizes",
            FindingKind::AllocatedSizeMismatch,
        ),
        (
            segment.active_size,
            active,
            "active_size",
            "active blocks' sizes",
            FindingKind::ActiveSizeMismatch,
        ),
        (
            segment.requested_size,
            requested,
            "requested_size",
            "active blocks' requested sizes",
            FindingKind::RequestedSizeMismatch,
        ),
    ];
    for (recorded, computed, field, what, kind) in recorded_sums {
        if let Some(recorded) = recorded
            && u128::from(recorded) != computed
        {
            report(
                kind,
                format!("{field} is {recorded}, the {what} sum to {computed}"),
            );
        }
    }

    // Expandable segments grow and shrink page by page, so their size says
    // nothing about the pool.
    if !segment.is_expandable {
        match segment.segment_type {
            PoolKind::Small if segment.total_size != SEGMENT_GRANULARITY => report(
                FindingKind::SmallSegmentNot2MiB,
                format!(
                    "small-pool segment of {} bytes, expected exactly 2 MiB",
                    segment.total_size
                ),
            ),
            PoolKind::Large if !segment.total_size.is_multiple_of(SEGMENT_GRANULARITY) => report(
                FindingKind::LargeSegmentNotMultipleOf2MiB,
                format!(
                    "large-pool segment of {} bytes, not a multiple of 2 MiB",
                    segment.total_size
                ),
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::snapshot::types::{Block, SnapshotFormat};

    fn block(address: u64, size: u64, state: BlockState) -> Block {
        Block {
            address,
            size,
            requested_size: size,
            state,
            frames: Arc::from([]),
        }
    }

    fn snapshot_of(segment: Segment) -> Snapshot {
        Snapshot::of_segments(SnapshotFormat::SegmentList, vec![segment])
    }

    fn small_segment(blocks: Vec<Block>) -> Segment {
        Segment {
            device: 0,
            address: 1 << 20,
            total_size: 2 << 20,
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stream: 0,
            segment_type: PoolKind::Small,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: Arc::from([]),
            blocks,
        }
    }

    fn kinds(findings: &[Finding]) -> Vec<FindingKind> {
        findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn a_consistent_segment_has_no_findings() {
        let base = 1 << 20;
        let mut segment = small_segment(vec![
            block(base, 512, BlockState::ActiveAllocated),
            block(base + 512, 1024, BlockState::ActivePendingFree),
            block(base + 1536, (2 << 20) - 1536, BlockState::Inactive),
        ]);
        segment.allocated_size = Some(512);
        segment.active_size = Some(1536);
        segment.requested_size = Some(1536);
        assert_eq!(check_invariants(&snapshot_of(segment)), vec![]);
    }

    #[test]
    fn adjacent_inactive_blocks_and_gaps_are_reported_once_per_segment() {
        let base = 1 << 20;
        let segment = small_segment(vec![
            block(base, 1 << 20, BlockState::Inactive),
            block(base + (1 << 20), 512, BlockState::Inactive),
            block(base + (1 << 20) + 1024, 512, BlockState::Inactive),
            block(
                base + (1 << 20) + 4096,
                (1 << 20) - 1024,
                BlockState::Inactive,
            ),
        ]);
        let findings = check_invariants(&snapshot_of(segment));
        assert_eq!(
            kinds(&findings),
            vec![
                FindingKind::NonContiguousBlocks,
                FindingKind::AdjacentInactiveBlocks
            ]
        );
        assert!(findings[1].message.contains("block 1"), "{}", findings[1]);
        assert!(findings[1].message.contains("2 more"), "{}", findings[1]);
    }

    #[test]
    fn recorded_sums_and_segment_sizes_are_checked() {
        let mut segment = small_segment(vec![block(
            1 << 20,
            (4 << 20) + 100,
            BlockState::ActiveAllocated,
        )]);
        segment.allocated_size = Some(1);
        segment.active_size = Some(2);
        segment.requested_size = Some(3);
        let findings = check_invariants(&snapshot_of(segment.clone()));
        assert_eq!(
            kinds(&findings),
            vec![
                FindingKind::BlockSizesDoNotSumToTotal,
                FindingKind::UnalignedBlockSize,
                FindingKind::AllocatedSizeMismatch,
                FindingKind::ActiveSizeMismatch,
                FindingKind::RequestedSizeMismatch,
            ]
        );
        segment.segment_type = PoolKind::Large;
        segment.total_size = 3 << 20;
        let findings = check_invariants(&snapshot_of(segment));
        assert!(kinds(&findings).contains(&FindingKind::LargeSegmentNotMultipleOf2MiB));
    }

    #[test]
    fn expandable_segments_are_exempt_from_the_2mib_rules() {
        let mut segment = small_segment(vec![block(1 << 20, 4 << 20, BlockState::ActiveAllocated)]);
        segment.total_size = 4 << 20;
        segment.is_expandable = true;
        assert_eq!(check_invariants(&snapshot_of(segment)), vec![]);
    }

    #[test]
    fn an_active_block_requesting_more_than_its_size_is_a_finding() {
        let base = 1 << 20;
        let mut live = block(base, 512, BlockState::ActiveAllocated);
        live.requested_size = 1024;
        let segment = small_segment(vec![
            live,
            block(base + 512, (2 << 20) - 512, BlockState::Inactive),
        ]);
        let findings = check_invariants(&snapshot_of(segment));
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].kind, FindingKind::RequestedOverSize);
        assert!(findings[0].message.contains("more than its size"));
    }

    fn trace_at(times: &[Option<i64>]) -> Vec<crate::snapshot::types::TraceEntry> {
        use crate::alloc::TraceAction;
        use crate::snapshot::types::{EntryTime, TraceEntry};
        times
            .iter()
            .map(|&t| TraceEntry {
                action: TraceAction::Alloc,
                addr: 1 << 20,
                size: 512,
                stream: 0,
                time: EntryTime::new(t),
                frames: Arc::from([]),
                extra: None,
            })
            .collect()
    }

    #[test]
    fn a_trace_going_back_in_time_is_one_finding_per_device_naming_the_first() {
        let mut snapshot = snapshot_of(small_segment(vec![block(
            1 << 20,
            2 << 20,
            BlockState::Inactive,
        )]));
        // GPU 0: back at entry 2 (by 250 µs) and at entry 5; an entry
        // without a time between is passed over. GPU 1: equal times only.
        snapshot.device_traces = vec![
            trace_at(&[
                Some(1_000),
                Some(1_250),
                Some(1_000),
                None,
                Some(2_000),
                Some(1_999),
            ]),
            trace_at(&[Some(5), Some(5), None, Some(6)]),
        ];
        let findings = check_trace_times(&snapshot);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let f = &findings[0];
        assert_eq!(
            (
                f.device,
                f.entry_index,
                f.time_us,
                f.previous_time_us,
                f.count
            ),
            (0, 2, 1_000, 1_250, 2)
        );
        assert!(
            f.message
                .contains("trace entry #2, 0.250 ms earlier than the entry before it (1 more"),
            "{}",
            f.message
        );
    }

    #[test]
    fn trace_times_at_the_ends_of_i64_are_said_without_overflow() {
        let mut snapshot = snapshot_of(small_segment(vec![]));
        snapshot.device_traces = vec![trace_at(&[Some(i64::MAX), Some(i64::MIN + 1)])];
        let findings = check_trace_times(&snapshot);
        assert_eq!(findings.len(), 1);
        assert!(
            findings[0].message.contains(" s earlier"),
            "{}",
            findings[0].message
        );
    }
}
