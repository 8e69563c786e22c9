//! Shared vocabulary for allocator layouts: pool kinds, block states and the
//! segment/block view shaped like `torch.cuda.memory_snapshot()`.

use serde::Serialize;

/// Which of the two global pools a block or segment belongs to.
///
/// PyTorch puts rounded requests of at most 1 MiB in the small pool (2 MiB
/// segments) and everything else in the large pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    /// The `segment_type` string PyTorch writes in snapshots.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }

    /// Parses PyTorch's `segment_type` string.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "small" => Some(PoolKind::Small),
            "large" => Some(PoolKind::Large),
            _ => None,
        }
    }

    /// The `memory_stats()` key component for this pool.
    pub fn stat_key(self) -> &'static str {
        match self {
            PoolKind::Small => "small_pool",
            PoolKind::Large => "large_pool",
        }
    }
}

/// The state of a block as PyTorch names it in snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Handed out to a client.
    ActiveAllocated,
    /// Freed by the client but waiting for `record_stream` events.
    ActivePendingFree,
    /// Cached free memory.
    Inactive,
}

impl BlockState {
    /// The string PyTorch writes in snapshots.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// Parses PyTorch's block state string (including the docstring's
    /// `active_awaiting_free` spelling).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active_allocated" => Some(BlockState::ActiveAllocated),
            "active_pending_free" | "active_awaiting_free" => Some(BlockState::ActivePendingFree),
            "inactive" => Some(BlockState::Inactive),
            _ => None,
        }
    }

    /// Allocated or pending free: counted in `active_bytes`.
    pub fn is_active(self) -> bool {
        !matches!(self, BlockState::Inactive)
    }
}

/// One block of a segment, as `memory_snapshot()` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockInfo {
    pub address: u64,
    pub size: u64,
    /// The unrounded request; stale (last request served) for inactive blocks.
    pub requested_size: u64,
    pub state: BlockState,
}

/// One segment (or one contiguous mapped range of an expandable segment),
/// as `memory_snapshot()` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentInfo {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    pub segment_type: PoolKind,
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub blocks: Vec<BlockInfo>,
}
