//! The summary of a snapshot's final state (`vramtop open FILE --summary`):
//! per device and in total the segment and block counts, reserved /
//! allocated / active / requested bytes, the segment size histogram, the
//! figures `torch/cuda/_memory_viz.py segsum` prints, and the fragmentation
//! figures of [`crate::alloc::analysis`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::invariants::{BackwardsTime, check_trace_times};
use super::peak::{At, AtError, Moment, Peaks, peaks};
use super::scrub::{DeviceScrub, EndMismatch, MarkKind, ScrubState, scrub_devices};
use super::sites::{
    Grouping, NoStackReason, NoTraceCause, Site, SiteKey, Sites, callers, file_line, frame_label,
    is_python, no_trace_cause, site_key, sites_of_snapshot, sites_of_state,
    snapshot_no_stack_reason, user_facing,
};
use super::types::{AllocatorSettings, Frame, Segment, Snapshot, TraceEntry};
use crate::alloc::advice::{OomCause, oom_cause};
use crate::alloc::human_bytes;
use crate::alloc::{BlockInfo, BlockState, Fragmentation, PoolKind, SegmentInfo, fragmentation};

/// Converts a snapshot segment to the allocator's [`SegmentInfo`]; sums the
/// file does not record are computed from the blocks.
pub fn segment_info(segment: &Segment) -> SegmentInfo {
    let sum = |keep: fn(BlockState) -> bool, requested: bool| -> u64 {
        segment
            .blocks
            .iter()
            .filter(|b| keep(b.state))
            .map(|b| if requested { b.requested_size } else { b.size })
            .fold(0, u64::saturating_add)
    };
    SegmentInfo {
        device: segment.device,
        address: segment.address,
        total_size: segment.total_size,
        allocated_size: segment
            .allocated_size
            .unwrap_or_else(|| sum(|s| s == BlockState::ActiveAllocated, false)),
        active_size: segment
            .active_size
            .unwrap_or_else(|| sum(BlockState::is_active, false)),
        requested_size: segment
            .requested_size
            .unwrap_or_else(|| sum(BlockState::is_active, true)),
        stream: segment.stream,
        segment_type: segment.segment_type,
        segment_pool_id: segment.segment_pool_id,
        is_expandable: segment.is_expandable,
        blocks: segment
            .blocks
            .iter()
            .map(|b| BlockInfo {
                address: b.address,
                size: b.size,
                requested_size: b.requested_size,
                state: b.state,
            })
            .collect(),
    }
}

/// Number of blocks in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlockCounts {
    pub active_allocated: u64,
    pub active_pending_free: u64,
    pub inactive: u64,
}

/// One histogram entry: `count` segments of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeCount {
    pub size: u64,
    pub count: u64,
}

/// Segment sizes by kind, each sorted by size. Expandable segments are
/// counted only under `expandable`, whatever their pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SegmentSizes {
    pub small: Vec<SizeCount>,
    pub large: Vec<SizeCount>,
    pub expandable: Vec<SizeCount>,
}

/// What `_memory_viz.py segsum` totals: allocated = Σ requested sizes of
/// allocated blocks, internal free = Σ (size − requested) of those blocks,
/// external free = Σ sizes of every other block (pending-free included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Segsum {
    pub total_reserved: u64,
    pub total_allocated: u64,
    pub internal_free: u64,
    pub external_free: u64,
    pub total_free: u64,
    /// internal_free / total_free in percent (0 when nothing is free).
    pub internal_percent: f64,
    /// total_reserved − (total_allocated + internal_free + external_free):
    /// 0 in a real allocator dump (which `_memory_viz.py` asserts); not 0 in
    /// a broken or hand-made file (negative when a requested size is more
    /// than its block's size).
    pub unaccounted: i64,
}

/// The figures of a set of segments (one device, or all).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub segments: u64,
    /// Σ total_size.
    pub reserved: u64,
    /// Σ sizes of active_allocated blocks.
    pub allocated: u64,
    /// Σ sizes of active (allocated or pending free) blocks.
    pub active: u64,
    /// Σ requested sizes of active blocks.
    pub requested: u64,
    pub blocks: BlockCounts,
    pub segment_sizes: SegmentSizes,
    pub segsum: Segsum,
    /// Free (inactive) blocks only; see [`crate::alloc::analysis`].
    pub fragmentation: Fragmentation,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    pub device: u32,
    #[serde(flatten)]
    pub figures: Figures,
}

/// One segment's `segsum` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentSummary {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub segment_type: PoolKind,
    /// `(0, 0)` for the default pools; else the private pool (a CUDA
    /// graph's or a `MemPool`'s) the segment belongs to.
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub allocated: u64,
    pub internal_free: u64,
    pub external_free: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotSummary {
    pub devices: Vec<DeviceSummary>,
    pub total: Figures,
    /// In file order.
    pub segments: Vec<SegmentSummary>,
    /// The memory pools' shares, by device then pool id (the default
    /// `(0, 0)` first): one entry per device for a file without private
    /// pools.
    pub pools: Vec<PoolFigures>,
}

/// The segments of one memory pool of one device. A private pool's
/// segments serve only its allocations (a CUDA graph's, a `MemPool`'s):
/// their free bytes are not free for the rest of the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolFigures {
    pub device: u32,
    /// `(0, 0)`: the default pools.
    pub segment_pool_id: (i64, i64),
    pub segments: u64,
    /// Σ total_size, bytes.
    pub reserved: u64,
    /// Σ sizes of active_allocated blocks, bytes.
    pub allocated: u64,
}

impl SnapshotSummary {
    /// Whether any segment is in a private pool.
    pub fn has_private_pools(&self) -> bool {
        self.pools.iter().any(|p| p.segment_pool_id != (0, 0))
    }
}

/// The [`PoolFigures`] of `segments`, by device then pool id.
fn pool_figures(segments: &[Segment]) -> Vec<PoolFigures> {
    let mut by_pool: BTreeMap<(u32, (i64, i64)), PoolFigures> = BTreeMap::new();
    for s in segments {
        let p = by_pool
            .entry((s.device, s.segment_pool_id))
            .or_insert(PoolFigures {
                device: s.device,
                segment_pool_id: s.segment_pool_id,
                segments: 0,
                reserved: 0,
                allocated: 0,
            });
        p.segments = p.segments.saturating_add(1);
        p.reserved = p.reserved.saturating_add(s.total_size);
        let allocated = s
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .fold(0, u64::saturating_add);
        p.allocated = p.allocated.saturating_add(allocated);
    }
    by_pool.into_values().collect()
}

fn segment_summary(s: &Segment) -> SegmentSummary {
    let mut out = SegmentSummary {
        device: s.device,
        address: s.address,
        total_size: s.total_size,
        segment_type: s.segment_type,
        segment_pool_id: s.segment_pool_id,
        is_expandable: s.is_expandable,
        allocated: 0,
        internal_free: 0,
        external_free: 0,
    };
    for b in &s.blocks {
        if b.state == BlockState::ActiveAllocated {
            out.allocated += b.requested_size;
            out.internal_free += b.size.saturating_sub(b.requested_size);
        } else {
            out.external_free += b.size;
        }
    }
    out
}

fn histogram(map: BTreeMap<u64, u64>) -> Vec<SizeCount> {
    map.into_iter()
        .map(|(size, count)| SizeCount { size, count })
        .collect()
}

/// The figures of `segments`.
pub fn figures<'a>(segments: impl IntoIterator<Item = &'a Segment>) -> Figures {
    let mut blocks = BlockCounts::default();
    let (mut small, mut large, mut expandable) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let mut segsum = Segsum::default();
    let mut infos = Vec::new();
    let (mut reserved, mut allocated, mut active, mut requested) = (0u64, 0u64, 0u64, 0u64);
    for s in segments {
        reserved = reserved.saturating_add(s.total_size);
        for b in &s.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    blocks.active_allocated += 1;
                    allocated = allocated.saturating_add(b.size);
                }
                BlockState::ActivePendingFree => blocks.active_pending_free += 1,
                BlockState::Inactive => blocks.inactive += 1,
            }
            if b.state.is_active() {
                active = active.saturating_add(b.size);
                requested = requested.saturating_add(b.requested_size);
            }
        }
        let histogram = match (s.is_expandable, s.segment_type) {
            (true, _) => &mut expandable,
            (false, PoolKind::Small) => &mut small,
            (false, PoolKind::Large) => &mut large,
        };
        *histogram.entry(s.total_size).or_insert(0u64) += 1;
        let line = segment_summary(s);
        segsum.total_allocated = segsum.total_allocated.saturating_add(line.allocated);
        segsum.internal_free = segsum.internal_free.saturating_add(line.internal_free);
        segsum.external_free = segsum.external_free.saturating_add(line.external_free);
        infos.push(segment_info(s));
    }
    segsum.total_reserved = reserved;
    let covered = segsum
        .total_allocated
        .saturating_add(segsum.internal_free)
        .saturating_add(segsum.external_free);
    let unaccounted = i128::from(reserved) - i128::from(covered);
    segsum.unaccounted =
        i64::try_from(unaccounted).unwrap_or(if unaccounted < 0 { i64::MIN } else { i64::MAX });
    segsum.total_free = segsum.internal_free.saturating_add(segsum.external_free);
    if segsum.total_free > 0 {
        segsum.internal_percent = segsum.internal_free as f64 * 100.0 / segsum.total_free as f64;
    }
    Figures {
        segments: infos.len() as u64,
        reserved,
        allocated,
        active,
        requested,
        blocks,
        segment_sizes: SegmentSizes {
            small: histogram(small),
            large: histogram(large),
            expandable: histogram(expandable),
        },
        segsum,
        fragmentation: fragmentation(&infos),
    }
}

/// Summarises a snapshot's segments, per device (ascending) and in total.
/// A device whose trace records memory events but that has no segment left
/// (its cache emptied at the end) is listed with zero figures: it was used.
/// One with only `snapshot` or annotation entries is not
/// ([`Snapshot::devices`]).
pub fn summarize(snapshot: &Snapshot) -> SnapshotSummary {
    let mut by_device: BTreeMap<u32, Vec<&Segment>> = BTreeMap::new();
    for s in &snapshot.segments {
        by_device.entry(s.device).or_default().push(s);
    }
    for device in snapshot.devices() {
        by_device.entry(device).or_default();
    }
    let devices: Vec<DeviceSummary> = by_device
        .into_iter()
        .map(|(device, segs)| DeviceSummary {
            device,
            figures: figures(segs),
        })
        .collect();
    // One device holding every segment (in file order, as the total
    // lists them) has the total's figures: they are not worked out twice.
    let total = match devices.as_slice() {
        [only] if only.figures.segments == snapshot.segments.len() as u64 => only.figures.clone(),
        _ => figures(&snapshot.segments),
    };
    SnapshotSummary {
        devices,
        total,
        segments: snapshot.segments.iter().map(segment_summary).collect(),
        pools: pool_figures(&snapshot.segments),
    }
}

/// Sites listed by default (`--top`).
pub const DEFAULT_TOP_SITES: usize = 10;

/// The largest sites at one moment, and what the rest add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SitesAt {
    /// Events applied (`None`: the file's own final state).
    pub cursor: Option<usize>,
    pub time_us: Option<i64>,
    /// Allocated bytes there (= Σ of every site's bytes, listed or not).
    pub allocated: u64,
    /// The largest sites, largest first.
    pub sites: Vec<Site>,
    /// Sites not listed, and their bytes and blocks.
    pub other_sites: usize,
    pub other_bytes: u64,
    pub other_blocks: u64,
    /// What each listed group of blocks without a stack means, in the
    /// order they are listed (absent when none is): the text's legend
    /// under the list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub no_stack_legend: Vec<NoStackLegend>,
}

/// What a group of blocks without a stack means (see [`SitesAt`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoStackLegend {
    pub reason: NoStackReason,
    /// The case in a few words ("history was off").
    pub case: &'static str,
    pub meaning: &'static str,
}

impl SitesAt {
    /// The largest `top` of `sites`, at `cursor` (and `time_us`).
    pub fn new(sites: Sites, top: usize, cursor: Option<usize>, time_us: Option<i64>) -> Self {
        let allocated = sites.allocated;
        let mut list = sites.sites;
        let rest = list.split_off(top.min(list.len()));
        let mut no_stack_legend: Vec<NoStackLegend> = Vec::new();
        for s in &list {
            if let SiteKey::NoStack(reason) = s.key
                && no_stack_legend.iter().all(|l| l.reason != reason)
            {
                no_stack_legend.push(NoStackLegend {
                    reason,
                    case: reason.short(),
                    meaning: reason.meaning(),
                });
            }
        }
        SitesAt {
            no_stack_legend,
            cursor,
            time_us,
            allocated,
            sites: list,
            other_sites: rest.len(),
            other_bytes: rest.iter().map(|s| s.bytes).sum(),
            other_blocks: rest.iter().map(|s| s.blocks).sum(),
        }
    }
}

/// One device's sites at the end of the trace and at its peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSites {
    pub device: u32,
    /// Events in the device's trace (0: state only).
    pub events: usize,
    /// The trace's first recorded time (µs), the origin of "t+".
    pub first_time_us: Option<i64>,
    /// Whether the trace's clock counts whole milliseconds (see
    /// [`crate::snapshot::scrub::whole_ms_clock`]): how "t+" is written,
    /// not a figure of the file, so not in the JSON.
    #[serde(skip)]
    pub whole_ms_clock: bool,
    /// Whether the trace begins mid-run (PyTorch's ring buffer kept only
    /// its last `max_entries` events; blocks were live before its first):
    /// the peaks and the sites at the peak are then of the recorded window
    /// only, and PyTorch's own `max_memory_allocated()` may be higher.
    /// Read off the scrub's start state, which the summary builds anyway.
    pub starts_mid_run: bool,
    /// `None` without a trace.
    pub peaks: Option<Peaks>,
    pub at_end: SitesAt,
    /// At the peak of allocated bytes (`None` without a trace).
    pub at_peak_allocated: Option<SitesAt>,
    /// OOM events in the trace.
    pub ooms: usize,
    /// The last OOM of the trace, with the sites the failed request met.
    pub at_last_oom: Option<OomMoment>,
    /// Every OOM event of the trace, in order, up to [`MAX_LISTED_OOMS`]
    /// (`ooms` counts them all).
    pub oom_events: Vec<OomEvent>,
    /// `snapshot` and `annotate` entries in the trace (a loop that
    /// snapshots each step leaves one per iteration).
    pub markers: usize,
    /// Every such entry, in order, up to [`MAX_LISTED_MARKERS`] (`markers`
    /// counts them all): where to point `--at` for an iteration boundary.
    pub marker_events: Vec<MarkerEvent>,
    /// Events of the trace that do not fit the file's own state (a free of
    /// a block it never had, more allocated than reserved, …): the peaks
    /// and the sites over the trace are then approximate. 0 for a
    /// consistent file.
    pub inconsistent_events: usize,
    /// How the trace's replayed end differs from the file's recorded final
    /// state (`null`: it leads there, or there is no trace).
    pub end_mismatch: Option<EndMismatch>,
    /// Where the trace's times first go backwards (an entry stamped
    /// earlier than the one before it), as `replay` finds it: the times
    /// the summary gives are as recorded. `null` for a trace in order.
    pub backwards_time: Option<BackwardsTime>,
    /// The sites at the moment `--at` names (absent without `--at`, and
    /// for a device without a trace unless it names the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_cursor: Option<AtCursor>,
}

/// OOM events listed per device: a trace of thousands of failed requests
/// (a retry loop) still makes a bounded report.
pub const MAX_LISTED_OOMS: usize = 100;

/// `snapshot`/`annotate` entries listed per device: a run of a million
/// iterations still makes a bounded report.
pub const MAX_LISTED_MARKERS: usize = 100;

/// One `snapshot` or `annotate` entry of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MarkerEvent {
    /// The cursor just after the entry (as the viewer's `i` lands on it,
    /// and the event number `--at` takes).
    pub cursor: usize,
    pub time_us: Option<i64>,
    /// `snapshot` or `annotate`.
    pub action: &'static str,
}

/// One OOM event of a trace: where it is, what it asked and which code
/// asked it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomEvent {
    /// The cursor just after the OOM event (as `--at oom` and the viewer's
    /// `o` land on it).
    pub cursor: usize,
    pub time_us: Option<i64>,
    /// Bytes the failed request asked for.
    pub requested: u64,
    /// Free bytes on the device as the driver said at the OOM.
    pub device_free: u64,
    /// The failed request's stack, flattened: `frames`, `site`,
    /// `called_from`.
    #[serde(flatten)]
    pub stack: OomStack,
}

/// Which code asked for an OOM's failed request, from the stack its
/// `oom` trace entry records (the Python stack of the failing call).
/// Named as the sites listing names a site by user frame: the frame that
/// asked, then the user's frames that called it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomStack {
    /// The frames worth reading first, innermost first: the user's own,
    /// else the Python ones, else the informative C++ ones (as `replay`'s
    /// `first_oom` gives them). Empty when the entry records none.
    pub frames: Vec<Frame>,
    /// The frame that asked, labelled as a site by user frame is
    /// (`train.py:40 step`); `null` without a stack.
    pub site: Option<String>,
    /// The user's frames that called it, innermost first, as labels (a
    /// site's `called_from`).
    pub called_from: Vec<String>,
    /// The frame that asked (for the short forms).
    #[serde(skip)]
    head: Option<Frame>,
    /// Whether the file records stacks at all: a request without one is
    /// then said as recorded without stacks.
    #[serde(skip)]
    file_records_stacks: bool,
}

impl OomStack {
    /// The stack of an `oom` entry's `frames`, in a file that records
    /// stacks or not.
    pub fn of(frames: &[Frame], file_records_stacks: bool) -> OomStack {
        let key = site_key(frames, Grouping::UserFrame);
        let head = key.as_ref().and_then(SiteKey::frame).cloned();
        let called_from = head
            .as_ref()
            .map(|h| callers(frames, h).into_iter().map(frame_label).collect())
            .unwrap_or_default();
        OomStack {
            frames: user_facing(frames).into_iter().cloned().collect(),
            site: key.map(|k| k.label()),
            called_from,
            head,
            file_records_stacks,
        }
    }

    /// The frame that asked in short: `file:line` of a Python frame, the
    /// label of a C++ one.
    pub fn short_site(&self) -> Option<String> {
        let head = self.head.as_ref()?;
        Some(if is_python(head) {
            file_line(head)
        } else {
            frame_label(head)
        })
    }

    /// Why there is no stack to show, `None` when there is one: a file
    /// recorded without stacks says so as the sites do; in one that
    /// records them, the entry has none.
    pub fn no_stack(&self) -> Option<&'static str> {
        if self.site.is_some() {
            None
        } else if self.file_records_stacks {
            Some("no stack recorded for the request")
        } else {
            Some(NoStackReason::WithoutStacks.describe())
        }
    }
}

/// The segment PyTorch's OOM message names ("Tried to allocate 20.00
/// MiB") for a failed `requested` bytes, where it is not the request: the
/// trace records the rounded request, and the allocator then asked
/// cudaMalloc for a whole segment. `None` where they are the same, and
/// with expandable segments, which map pages instead (or without the
/// settings, when that is unknown).
pub fn oom_segment(requested: u64, settings: Option<&AllocatorSettings>) -> Option<u64> {
    let expandable = settings.is_none_or(|s| s.expandable_segments);
    let segment = crate::alloc::sizing::allocation_size(requested);
    (!expandable && segment != requested).then_some(segment)
}

/// The sites at the cursor `--at` names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtCursor {
    /// The moment as it was asked (`40`, `peak`, `end`, `oom`, `start`,
    /// `mark:3`, `mark:last`).
    pub asked: String,
    /// Reserved bytes there.
    pub reserved: u64,
    #[serde(flatten)]
    pub sites: SitesAt,
}

/// An OOM of the trace: what was asked, what the device had free, and the
/// sites at that moment (the state right after the OOM event, which
/// changes nothing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomMoment {
    /// Bytes the failed request asked for.
    pub requested: u64,
    /// Free bytes on the device as the driver said at the OOM (PyTorch
    /// writes them in the event's address field).
    pub device_free: u64,
    /// What the allocator held and what that says of the cause:
    /// `reserved`, `cached_free`, `largest_free_block`, `free_blocks`,
    /// `cause`, flattened where the JSON has always had them.
    #[serde(flatten)]
    pub memory: OomMemory,
    /// Which code asked: `frames`, `site`, `called_from`, as an
    /// [`OomEvent`]'s.
    #[serde(flatten)]
    pub stack: OomStack,
    /// Flattened, as [`AtCursor`]'s: the JSON gives the OOM's `cursor`,
    /// `time_us` and `allocated` beside its other figures, as the text
    /// heads the moment with them.
    #[serde(flatten)]
    pub sites: SitesAt,
}

/// What the allocator held at an OOM and what that says about its cause:
/// the figures an OOM investigation starts from (PyTorch's message gives
/// reserved and "reserved but unallocated" too, not the pieces). One
/// computation and one text for `open --summary` and the viewer's OOM
/// detail, so the two never tell different causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OomMemory {
    /// Reserved bytes right after the OOM (PyTorch released every cached
    /// segment it could before giving up).
    pub reserved: u64,
    /// Reserved but unallocated (PyTorch's words; the text says them):
    /// reserved − allocated, the free blocks and those waiting for stream
    /// events. Named `cached_free` in the JSON since it was first written.
    pub cached_free: u64,
    /// The largest free block and how many there were: the request did
    /// not fit any of them.
    pub largest_free_block: u64,
    pub free_blocks: u64,
    /// What the figures say about the OOM's cause.
    pub cause: OomCause,
}

impl OomMemory {
    /// The figures of the OOM event `e` (its `size` the request, its
    /// `addr` the device's free bytes) from the state right after it and
    /// that state's whole layout (every stream's and pool's segments: the
    /// allocator searched them all).
    pub fn of(e: &TraceEntry, state: &ScrubState, layout: &[Segment]) -> OomMemory {
        let layout: Vec<SegmentInfo> = layout.iter().map(segment_info).collect();
        let free = fragmentation(&layout);
        let cached_free = state.reserved.saturating_sub(state.allocated);
        OomMemory {
            reserved: state.reserved,
            cached_free,
            largest_free_block: free.largest_free_block,
            free_blocks: free.free_blocks,
            cause: oom_cause(e.size, e.addr, cached_free),
        }
    }

    /// The figures in words, then the cause they point to: "1.46 GiB
    /// reserved but unallocated of 3.00 GiB reserved, in 30 blocks,
    /// largest 50 MiB; the cache alone held the request, …". `sites` says
    /// where the live blocks' sites are listed ("the sites below"), for
    /// an OOM the live blocks caused.
    pub fn describe(&self, sites: &str) -> String {
        format!("{}; {}", self.held_text(), self.cause_text(sites))
    }

    /// The figures in words: "1.46 GiB reserved but unallocated of 3.00
    /// GiB reserved, in 30 blocks, largest 50 MiB".
    pub fn held_text(&self) -> String {
        // "reserved but unallocated" in PyTorch's OOM message's words, as
        // every screen names reserved − allocated.
        if self.cached_free == 0 {
            format!(
                "reserved {}, all of it allocated",
                human_bytes(self.reserved)
            )
        } else {
            format!(
                "{} reserved but unallocated of {} reserved, in {} {}, largest {}",
                human_bytes(self.cached_free),
                human_bytes(self.reserved),
                self.free_blocks,
                if self.free_blocks == 1 {
                    "block"
                } else {
                    "blocks"
                },
                human_bytes(self.largest_free_block)
            )
        }
    }

    /// The cause the figures point to, in words, with what answers it
    /// (`sites` as [`OomMemory::describe`] takes it).
    pub fn cause_text(&self, sites: &str) -> String {
        match self.cause {
            OomCause::FragmentedCache => "the cache alone held the request, in pieces too small: \
                 fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps pages \
                 instead of splitting segments)"
                .to_string(),
            OomCause::SplitBetweenCacheAndDevice => "the device's free memory and the cache's \
                 free blocks together held the request, neither alone: fragmentation \
                 (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets cached pages be \
                 unmapped and mapped again as one range)"
                .to_string(),
            OomCause::Exhausted { short } => format!(
                "{} short of the request with every free byte of the device and the cache: \
                 live blocks held the memory ({sites}); settings make no room",
                human_bytes(short)
            ),
        }
    }
}

/// Who holds the memory: per device, the top sites at the end and at the
/// peak of allocated bytes, and the file's allocator settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SitesReport {
    pub grouping: Grouping,
    pub top: usize,
    /// Per device, ascending.
    pub sites: Vec<DeviceSites>,
    pub allocator_settings: Option<AllocatorSettings>,
    /// For a device without trace events: what the file says of how it
    /// was recorded (the text's advice on getting a trace).
    #[serde(skip)]
    pub no_trace: NoTraceCause,
}

/// The sites report of `snapshot`, `top` sites per moment.
pub fn sites_report(snapshot: &Arc<Snapshot>, grouping: Grouping, top: usize) -> SitesReport {
    report(snapshot, grouping, top, None).0
}

/// [`sites_report`] with the sites at the moment `at` of every device that
/// has a trace, and at `end` of every device (the file's own final state,
/// which a device without a trace has too). An error when `at` is a moment
/// of the trace and no device has one, or when `at` names no moment of one
/// of them (an event past its end, an OOM it lacks). `end` of a file
/// with no GPU is its empty final state: the report, with no device.
pub fn sites_report_at(
    snapshot: &Arc<Snapshot>,
    grouping: Grouping,
    top: usize,
    at: At,
) -> Result<SitesReport, AtError> {
    let (report, errors) = report(snapshot, grouping, top, Some(at));
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    // The end is every file's, a file with no GPU too (its final state
    // holds nothing): only the trace's moments need a device with a trace.
    if at != At::End && report.sites.iter().all(|d| d.at_cursor.is_none()) {
        return Err(no_moment(snapshot, at));
    }
    Ok(report)
}

/// Why `at`, a moment of the trace, names none in `snapshot`, where no
/// device has a trace.
fn no_moment(snapshot: &Snapshot, at: At) -> AtError {
    if snapshot.trace_not_read {
        AtError::TraceNotRead { at }
    } else {
        AtError::NoTrace {
            at,
            cause: no_trace_cause(snapshot),
        }
    }
}

/// The cursor `at` names on each of `devices` (the scrubs of
/// `snapshot`'s devices, in [`scrub_devices`] order), `None` for a device
/// without a trace, as [`sites_report_at`] resolves it for the summary's
/// `--at`, with its errors: the first device's whose trace lacks the
/// moment, else, for a moment of the trace, that no device has one. The
/// viewer's `open FILE --at` starts there.
pub fn cursors_at(
    snapshot: &Snapshot,
    devices: &[DeviceScrub],
    at: At,
) -> Result<Vec<Option<usize>>, AtError> {
    let cursors = devices
        .iter()
        .map(|d| {
            if d.is_empty() {
                Ok(None)
            } else {
                at.cursor(d).map(Some)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if at != At::End && cursors.iter().all(Option::is_none) {
        return Err(no_moment(snapshot, at));
    }
    Ok(cursors)
}

/// Bytes of `device`'s segments in the file's final state.
fn final_reserved(snapshot: &Snapshot, device: u32) -> u64 {
    snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .fold(0u64, |sum, s| sum.saturating_add(s.total_size))
}

/// The report, and why `at` names no moment of some devices' traces.
fn report(
    snapshot: &Arc<Snapshot>,
    grouping: Grouping,
    top: usize,
    at: Option<At>,
) -> (SitesReport, Vec<AtError>) {
    let reason = snapshot_no_stack_reason(snapshot);
    let records_stacks = reason != NoStackReason::WithoutStacks;
    let backwards_times = check_trace_times(snapshot);
    let mut errors = Vec::new();
    let sites = scrub_devices(snapshot)
        .into_iter()
        .map(|(device, trace)| {
            let at_end = SitesAt::new(
                sites_of_snapshot(snapshot, Some(device), grouping),
                top,
                None,
                None,
            );
            // A device without a trace (or a file read with --no-trace)
            // has its final state only: no scrub to build, no peak; of the
            // moments --at names, only the end.
            let Some(trace) = trace else {
                let at_cursor = (at == Some(At::End)).then(|| AtCursor {
                    asked: At::End.to_string(),
                    reserved: final_reserved(snapshot, device),
                    sites: at_end.clone(),
                });
                return DeviceSites {
                    device,
                    events: 0,
                    first_time_us: None,
                    whole_ms_clock: false,
                    starts_mid_run: false,
                    peaks: None,
                    at_end,
                    at_peak_allocated: None,
                    ooms: 0,
                    at_last_oom: None,
                    oom_events: Vec::new(),
                    markers: 0,
                    marker_events: Vec::new(),
                    inconsistent_events: 0,
                    end_mismatch: None,
                    backwards_time: None,
                    at_cursor,
                };
            };
            let d = DeviceScrub::new(Arc::clone(snapshot), device, Some(trace));
            let d = &d;
            let (peaks, at_peak) = if d.is_empty() {
                (None, None)
            } else {
                let p = peaks(d);
                let Moment {
                    cursor, time_us, ..
                } = p.allocated;
                let state = d.state_at(cursor);
                let sites = sites_of_state(&state, grouping, reason);
                (
                    Some(p),
                    Some(SitesAt::new(sites, top, Some(cursor), time_us)),
                )
            };
            let at_last_oom = d.prev_mark(MarkKind::Oom, usize::MAX).and_then(|cursor| {
                let e = d.events().get(cursor.checked_sub(1)?)?;
                let state = d.state_at(cursor);
                let memory = OomMemory::of(e, &state, &d.layout_of(&state));
                let sites = sites_of_state(&state, grouping, reason);
                Some(OomMoment {
                    requested: e.size,
                    device_free: e.addr,
                    memory,
                    stack: OomStack::of(&e.frames, records_stacks),
                    sites: SitesAt::new(sites, top, Some(cursor), e.time_us()),
                })
            });
            let oom_events = d
                .mark_events(MarkKind::Oom)
                .take(MAX_LISTED_OOMS)
                .filter_map(|i| {
                    let e = d.events().get(i)?;
                    Some(OomEvent {
                        cursor: i.saturating_add(1),
                        time_us: e.time_us(),
                        requested: e.size,
                        device_free: e.addr,
                        stack: OomStack::of(&e.frames, records_stacks),
                    })
                })
                .collect();
            let marker_events = d
                .mark_events(MarkKind::Marker)
                .take(MAX_LISTED_MARKERS)
                .filter_map(|i| {
                    let e = d.events().get(i)?;
                    Some(MarkerEvent {
                        cursor: i.saturating_add(1),
                        time_us: e.time_us(),
                        action: e.action.as_str(),
                    })
                })
                .collect();
            let at_cursor = at.and_then(|at| match at.cursor(d) {
                Ok(cursor) => {
                    let state = d.state_at(cursor);
                    let sites = sites_of_state(&state, grouping, reason);
                    Some(AtCursor {
                        asked: at.to_string(),
                        reserved: state.reserved,
                        sites: SitesAt::new(sites, top, Some(cursor), d.time_at(cursor)),
                    })
                }
                Err(e) => {
                    errors.push(e);
                    None
                }
            });
            DeviceSites {
                device,
                events: d.len(),
                first_time_us: d.events().iter().find_map(|e| e.time_us()),
                whole_ms_clock: d.whole_ms(),
                starts_mid_run: d.starts_mid_run(),
                peaks,
                at_end,
                at_peak_allocated: at_peak,
                ooms: d.count(MarkKind::Oom),
                at_last_oom,
                oom_events,
                markers: d.count(MarkKind::Marker),
                marker_events,
                inconsistent_events: d.misfits,
                end_mismatch: d.end_mismatch(),
                backwards_time: backwards_times.iter().find(|b| b.device == device).cloned(),
                at_cursor,
            }
        })
        .collect();
    let report = SitesReport {
        grouping,
        top,
        sites,
        allocator_settings: snapshot.allocator_settings.clone(),
        no_trace: no_trace_cause(snapshot),
    };
    (report, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::types::{Block, SnapshotFormat};
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;

    fn block(address: u64, size: u64, requested_size: u64, state: BlockState) -> Block {
        Block {
            address,
            size,
            requested_size,
            state,
            frames: Arc::from(Vec::new()),
        }
    }

    fn segment(device: u32, address: u64, blocks: Vec<Block>) -> Segment {
        Segment {
            device,
            address,
            total_size: blocks.iter().map(|b| b.size).sum(),
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: Arc::from(Vec::new()),
            blocks,
        }
    }

    #[test]
    fn segsum_and_totals_follow_memory_viz() {
        let a = 1 << 40;
        let snapshot = Snapshot::of_segments(
            SnapshotFormat::DumpSnapshot,
            vec![
                segment(
                    0,
                    a,
                    vec![
                        block(a, 6 * MIB, 6 * MIB - 100, BlockState::ActiveAllocated),
                        block(a + 6 * MIB, 4 * MIB, 4 * MIB, BlockState::ActivePendingFree),
                        block(a + 10 * MIB, 10 * MIB, 1, BlockState::Inactive),
                    ],
                ),
                segment(
                    1,
                    2 * a,
                    vec![block(2 * a, 20 * MIB, 0, BlockState::Inactive)],
                ),
            ],
        );
        let s = summarize(&snapshot);
        assert_eq!(s.devices.len(), 2);
        let d0 = &s.devices[0].figures;
        assert_eq!(
            (d0.reserved, d0.allocated, d0.active),
            (20 * MIB, 6 * MIB, 10 * MIB)
        );
        assert_eq!(d0.requested, 10 * MIB - 100);
        assert_eq!(d0.segsum.total_allocated, 6 * MIB - 100);
        assert_eq!(d0.segsum.internal_free, 100);
        assert_eq!(d0.segsum.external_free, 14 * MIB);
        assert_eq!(d0.fragmentation.external_free, 10 * MIB);
        assert_eq!(d0.fragmentation.internal_free, 100);
        let t = &s.total;
        assert_eq!((t.segments, t.reserved), (2, 40 * MIB));
        assert_eq!(
            t.blocks,
            BlockCounts {
                active_allocated: 1,
                active_pending_free: 1,
                inactive: 2
            }
        );
        assert_eq!(
            t.segment_sizes.large,
            vec![SizeCount {
                size: 20 * MIB,
                count: 2
            }]
        );
        assert_eq!(
            t.segsum.total_free + t.segsum.total_allocated,
            t.segsum.total_reserved
        );
        assert_eq!(t.segsum.unaccounted, 0);
        assert_eq!(s.segments[1].external_free, 20 * MIB);
        assert!(!s.has_private_pools());
        let info = segment_info(&snapshot.segments[0]);
        assert_eq!(
            (info.allocated_size, info.active_size, info.requested_size),
            (6 * MIB, 10 * MIB, 10 * MIB - 100)
        );
    }

    #[test]
    fn pools_count_each_pools_segments_reserved_and_allocated_bytes() {
        let a = 1 << 40;
        let mut graph = segment(
            0,
            2 * a,
            vec![
                block(2 * a, 2 * MIB, 2 * MIB, BlockState::ActiveAllocated),
                block(2 * a + 2 * MIB, 2 * MIB, 0, BlockState::Inactive),
            ],
        );
        graph.segment_pool_id = (0, 1);
        let snapshot = Snapshot::of_segments(
            SnapshotFormat::DumpSnapshot,
            vec![
                segment(
                    0,
                    a,
                    vec![block(a, 6 * MIB, 6 * MIB, BlockState::ActiveAllocated)],
                ),
                graph,
            ],
        );
        let s = summarize(&snapshot);
        assert!(s.has_private_pools());
        let shares: Vec<_> = s
            .pools
            .iter()
            .map(|p| (p.segment_pool_id, p.segments, p.reserved, p.allocated))
            .collect();
        assert_eq!(
            shares,
            vec![((0, 0), 1, 6 * MIB, 6 * MIB), ((0, 1), 1, 4 * MIB, 2 * MIB)]
        );
        assert_eq!(s.segments[1].segment_pool_id, (0, 1));
    }
}
