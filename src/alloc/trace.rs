//! Trace entries with PyTorch's action names (`_record_memory_history`).

use serde::Serialize;

/// One action in an allocator trace, named as PyTorch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block was handed out; `size` is the unrounded request.
    Alloc,
    /// `free()` was called; `size` is the block's requested size.
    FreeRequested,
    /// The block went back to its pool (after stream events, if any).
    FreeCompleted,
    /// cudaMalloc of a new segment.
    SegmentAlloc,
    /// cudaFree of a whole segment.
    SegmentFree,
    /// Expandable segments: pages mapped.
    SegmentMap,
    /// Expandable segments: pages unmapped.
    SegmentUnmap,
    /// A snapshot was taken; `size` is the active bytes at that time.
    Snapshot,
    /// Out of memory; `addr` holds the device's free bytes, `size` the rounded request.
    Oom,
    /// A user annotation (newest PyTorch).
    Annotate,
}

impl TraceAction {
    pub const ALL: [TraceAction; 10] = [
        TraceAction::Alloc,
        TraceAction::FreeRequested,
        TraceAction::FreeCompleted,
        TraceAction::SegmentAlloc,
        TraceAction::SegmentFree,
        TraceAction::SegmentMap,
        TraceAction::SegmentUnmap,
        TraceAction::Snapshot,
        TraceAction::Oom,
        TraceAction::Annotate,
    ];

    /// The action string PyTorch writes.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
            TraceAction::Annotate => "annotate",
        }
    }

    /// Parses PyTorch's action string.
    pub fn parse(s: &str) -> Option<Self> {
        TraceAction::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One entry of the model's own trace. `addr` is the device free bytes for
/// [`TraceAction::Oom`], as in PyTorch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    pub action: TraceAction,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// Microseconds, from the clock the caller feeds the allocator.
    pub time_us: u64,
}
