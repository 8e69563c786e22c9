//! Scrubbing through a snapshot's trace: the allocator state of a device at
//! any point of its recorded trace, and the allocated / reserved bytes after
//! every event (the viewer's timeline).
//!
//! Reconstruction follows PyTorch's `_memory_viz.py`: the snapshot's
//! segments are the state at the END of the trace, so the trace is undone
//! backwards from there to find the state before its first event (a trace
//! may start mid-run: blocks alive before it began are either still in the
//! final layout or freed in the trace). That start state is then replayed
//! forwards, event by event. The last cursor shows the snapshot's own
//! segments: where a consistent trace leads, and what the file records
//! when its trace leads elsewhere (a hand-made or damaged file; how the two
//! differ is [`DeviceScrub::end_mismatch`]).
//!
//! Block sizes: a trace records the requested size, not the block size.
//! Blocks alive at the end take their size from the final layout (exact);
//! other blocks are sized as the allocator would carve them: the request
//! rounded (`round_size`), or the whole free gap when the remainder would
//! be too small to split off (≥ 512 B in the small pool, > 1 MiB in the
//! large one, never for oversize blocks). Such sizes are counted in
//! [`DeviceScrub::inferred_sizes`].
//!
//! Seeking: the forward replay stores a full copy of the state every
//! [`DeviceScrub::checkpoint_every`] events (1024, or more for traces over
//! 256 Ki events, so at most 256 checkpoints are kept). The state at a
//! cursor is the nearest checkpoint at or before it plus at most that many
//! events applied: O(live blocks + K · log(live blocks)). Memory: one state
//! per checkpoint (about 100 bytes per live block and segment), one
//! [`Point`] (16 bytes) per event and 16 bytes per allocation whose block
//! size the final layout gives.
//!
//! PyTorch records no `empty_cache` action. A run of `segment_free` /
//! `segment_unmap` events that is not the allocator's own release-and-retry
//! (a run followed by `segment_alloc`, `segment_map` or `oom` is the retry
//! path of a failed cudaMalloc) is shown as an empty_cache point. The two
//! cannot always be told apart: an `empty_cache()` directly followed by an
//! allocation that needs a new segment looks like a retry and is not marked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::replay::config_from_settings;
use super::types::{Block, Frames, Segment, Snapshot, TraceEntry, is_marker};
use crate::alloc::{
    AllocatorConfig, BlockState, PoolKind, TraceAction, round_size,
    sizing::{LARGE_BUFFER, MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE},
};

/// Events between two stored states, at least.
pub const CHECKPOINT_EVERY: usize = 1024;
/// The most checkpoints kept per device (longer traces space them out).
pub const MAX_CHECKPOINTS: usize = 256;
/// Points per block of [`DeviceScrub::highest`]'s table of maxima: a
/// timeline of millions of events is drawn from a few thousand of them.
const PEAK_BLOCK: usize = 1024;

/// What last held a free range, as [`DeviceScrub::last_held`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastHeld {
    /// A block freed in the trace: at `address`, of `requested` bytes,
    /// allocated at event index `allocated` (`None`: before the trace
    /// began) and freed (`free_completed`) at event index `freed`.
    Freed {
        address: u64,
        requested: u64,
        allocated: Option<usize>,
        freed: usize,
    },
    /// Nothing since its segment was made, at this event index.
    NotSinceSegment(usize),
    /// Nothing the trace records: free since before it began.
    NotInTrace,
}

/// A block the reconstruction holds (active: allocated or pending free;
/// inactive space is whatever no block covers).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveBlock {
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub stream: u64,
    /// The stack of the allocation, innermost first; empty when unknown
    /// (allocated before the trace began and not recorded).
    pub frames: Frames,
    /// The size was inferred from the request (see the module docs).
    pub size_inferred: bool,
    /// Alive before the trace began and freed in it: the file holds its
    /// stack nowhere (a free's frames are the free's), so `frames` is
    /// empty for want of a record, not because its allocation had none.
    pub stack_lost: bool,
}

/// A cudaMalloc'd segment, or one mapped range of an expandable segment.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRange {
    pub size: u64,
    pub stream: u64,
    pub segment_type: PoolKind,
    pub segment_pool_id: (i64, i64),
    pub is_expandable: bool,
    pub frames: Frames,
}

/// The allocator state at one cursor, with running totals (bytes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrubState {
    pub segments: BTreeMap<u64, SegmentRange>,
    pub blocks: BTreeMap<u64, LiveBlock>,
    pub reserved: u64,
    pub allocated: u64,
    pub active: u64,
}

impl ScrubState {
    fn insert_block(&mut self, addr: u64, b: LiveBlock) {
        self.add_totals(&b, true);
        if let Some(old) = self.blocks.insert(addr, b) {
            self.add_totals(&old, false);
        }
    }

    fn remove_block(&mut self, addr: u64) -> Option<LiveBlock> {
        let old = self.blocks.remove(&addr)?;
        self.add_totals(&old, false);
        Some(old)
    }

    fn set_block_state(&mut self, addr: u64, state: BlockState) -> bool {
        // In place: the block keeps its address, only the totals move.
        let Some(b) = self.blocks.get_mut(&addr) else {
            return false;
        };
        let (size, old) = (b.size, b.state);
        b.state = state;
        self.add_block_totals(size, old, false);
        self.add_block_totals(size, state, true);
        true
    }

    fn add_totals(&mut self, b: &LiveBlock, add: bool) {
        self.add_block_totals(b.size, b.state, add);
    }

    /// Adds (or takes away) a block of `size` bytes in `state` to the totals.
    fn add_block_totals(&mut self, size: u64, state: BlockState, add: bool) {
        let apply = |v: &mut u64, n: u64| {
            *v = if add {
                v.saturating_add(n)
            } else {
                v.saturating_sub(n)
            }
        };
        if state == BlockState::ActiveAllocated {
            apply(&mut self.allocated, size);
        }
        if state.is_active() {
            apply(&mut self.active, size);
        }
    }

    fn insert_segment(&mut self, addr: u64, s: SegmentRange) {
        self.reserved = self.reserved.saturating_add(s.size);
        if let Some(old) = self.segments.insert(addr, s) {
            self.reserved = self.reserved.saturating_sub(old.size);
        }
    }

    fn remove_segment(&mut self, addr: u64) -> bool {
        match self.segments.remove(&addr) {
            Some(old) => {
                self.reserved = self.reserved.saturating_sub(old.size);
                true
            }
            None => false,
        }
    }

    /// Removes `[addr, addr + size)` from the expandable ranges (splitting
    /// ranges it cuts); the removed ranges' properties are returned.
    fn unmap(&mut self, addr: u64, size: u64) -> Option<SegmentRange> {
        let end = addr.saturating_add(size);
        let hit: Vec<u64> = self
            .segments
            .range(..end)
            .rev()
            .take_while(|&(&a, s)| a.saturating_add(s.size) > addr)
            .filter(|(_, s)| s.is_expandable)
            .map(|(&a, _)| a)
            .collect();
        let mut template = None;
        for a in hit {
            let Some(s) = self.segments.get(&a).cloned() else {
                continue;
            };
            self.remove_segment(a);
            let s_end = a.saturating_add(s.size);
            if a < addr {
                self.insert_segment(
                    a,
                    SegmentRange {
                        size: addr - a,
                        ..s.clone()
                    },
                );
            }
            if s_end > end {
                self.insert_segment(
                    end,
                    SegmentRange {
                        size: s_end - end,
                        ..s.clone()
                    },
                );
            }
            template = Some(s);
        }
        template
    }

    /// The segment (or contiguous run of mapped expandable ranges) that
    /// holds `addr`: (start, end, expandable).
    fn extent_of(&self, addr: u64) -> Option<(u64, u64, bool)> {
        let (&start, seg) = self.segments.range(..=addr).next_back()?;
        let mut end = start.saturating_add(seg.size);
        if addr >= end {
            return None;
        }
        if seg.is_expandable {
            // Each step moves `end` up by a non-zero size, so the walk ends.
            while let Some(next) = self
                .segments
                .get(&end)
                .filter(|n| n.is_expandable && n.size > 0)
            {
                let Some(next_end) = end.checked_add(next.size) else {
                    end = u64::MAX;
                    break;
                };
                end = next_end;
            }
        }
        Some((start, end, seg.is_expandable))
    }

    /// The block size the allocator would carve at `addr` for a request of
    /// `requested` bytes, given the blocks around it.
    fn infer_size(&self, addr: u64, requested: u64, config: &AllocatorConfig) -> u64 {
        let rounded = round_size(requested, config);
        let Some((_, seg_end, expandable)) = self.extent_of(addr) else {
            return rounded;
        };
        // The pool follows the request, as in the allocator; with expandable
        // segments every pool splits off any remainder of 512 B or more.
        let small_rule = rounded <= SMALL_SIZE || expandable || config.expandable_segments;
        let next = self
            .blocks
            .range(addr.saturating_add(1)..seg_end)
            .next()
            .map_or(seg_end, |(&a, _)| a);
        let room = next.saturating_sub(addr);
        let rounded = rounded.min(room);
        let gap = room - rounded;
        let unsplit = if small_rule {
            gap < MIN_BLOCK_SIZE
        } else {
            gap <= SMALL_SIZE || rounded >= config.max_split_size_bytes()
        };
        if unsplit { room } else { rounded }
    }

    /// (reserved, allocated, active) recomputed from the segments and
    /// blocks, to check the running totals.
    pub fn recomputed_totals(&self) -> (u64, u64, u64) {
        let sum = |sizes: &mut dyn Iterator<Item = u64>| sizes.fold(0, u64::saturating_add);
        let reserved = sum(&mut self.segments.values().map(|s| s.size));
        let allocated = sum(&mut self
            .blocks
            .values()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size));
        let active = sum(&mut self
            .blocks
            .values()
            .filter(|b| b.state.is_active())
            .map(|b| b.size));
        (reserved, allocated, active)
    }
}

/// The figures after one event (bytes): one per event of a trace of
/// millions, so only what the timeline draws. Its time is the event's own
/// ([`DeviceScrub::time_at`]); active bytes are in the state
/// ([`DeviceScrub::state_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    pub allocated: u64,
    pub reserved: u64,
}

/// Events worth jumping to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    Oom,
    /// `segment_alloc` (and `segment_map`: new memory from the driver).
    SegmentAlloc,
    /// The last release of a run of `segment_free`/`segment_unmap` that is
    /// not a release-and-retry (see the module docs).
    EmptyCache,
    /// A `snapshot` or `annotate` entry: a moment the program marked
    /// (PyTorch records a `snapshot` entry each time one is taken, once
    /// per iteration in a loop that snapshots every step).
    Marker,
}

impl MarkKind {
    pub fn name(self) -> &'static str {
        match self {
            MarkKind::Oom => "OOM",
            MarkKind::SegmentAlloc => "segment_alloc",
            MarkKind::EmptyCache => "empty_cache",
            MarkKind::Marker => "snapshot/annotate",
        }
    }
}

/// How the state a trace's replay ends in differs from the state the file
/// records (its `segments`): a hand-made or damaged file whose trace does
/// not lead to its own final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EndMismatch {
    /// Addresses of active blocks alive in one state and not the other,
    /// or alive in both with another size, state or requested size.
    pub blocks: usize,
    /// Segment addresses in one state and not the other, or in both with
    /// another size (contiguous mapped ranges of an expandable segment
    /// are one segment, as PyTorch reports them).
    pub segments: usize,
}

/// What differs between `replayed` and `recorded`, two states of one
/// device ([`EndMismatch`]); `None` when they agree.
fn end_mismatch(
    d: &DeviceScrub,
    replayed: &ScrubState,
    recorded: &ScrubState,
) -> Option<EndMismatch> {
    let differs = |a: Option<&LiveBlock>, b: Option<&LiveBlock>| match (a, b) {
        (Some(a), Some(b)) => {
            (a.size, a.state, a.requested_size) != (b.size, b.state, b.requested_size)
        }
        _ => true,
    };
    let blocks = replayed
        .blocks
        .keys()
        .chain(
            recorded
                .blocks
                .keys()
                .filter(|a| !replayed.blocks.contains_key(a)),
        )
        .filter(|a| differs(replayed.blocks.get(a), recorded.blocks.get(a)))
        .count();
    // Whole segments, as the viewer lists them: a replay holds an
    // expandable segment as its mapped ranges, the file as one.
    let extents = |s: &ScrubState| -> BTreeMap<u64, u64> {
        d.layout_of(s)
            .into_iter()
            .map(|seg| (seg.address, seg.total_size))
            .collect()
    };
    let (a, b) = (extents(replayed), extents(recorded));
    let segments = a
        .iter()
        .filter(|&(addr, size)| b.get(addr) != Some(size))
        .count()
        .saturating_add(b.keys().filter(|addr| !a.contains_key(addr)).count());
    (blocks > 0 || segments > 0).then_some(EndMismatch { blocks, segments })
}

/// Each figure's highest value over `points` (zeros when empty).
fn highest_of(points: &[Point]) -> Point {
    points.iter().fold(
        Point {
            allocated: 0,
            reserved: 0,
        },
        |m, p| Point {
            allocated: m.allocated.max(p.allocated),
            reserved: m.reserved.max(p.reserved),
        },
    )
}

/// The exact sizes of [`DeviceScrub`] read in step with events visited in
/// ascending order.
struct ExactSizes<'a> {
    sizes: &'a [(usize, u64)],
    next: usize,
}

impl<'a> ExactSizes<'a> {
    /// For a walk that begins at event `first`.
    fn from(sizes: &'a [(usize, u64)], first: usize) -> Self {
        ExactSizes {
            sizes,
            next: sizes.partition_point(|&(event, _)| event < first),
        }
    }

    /// The exact size of event `event`'s block, if recorded; events must
    /// be asked in ascending order.
    fn of(&mut self, event: usize) -> Option<u64> {
        while let Some(&(at, size)) = self.sizes.get(self.next) {
            if at > event {
                return None;
            }
            self.next += 1;
            if at == event {
                return Some(size);
            }
        }
        None
    }
}

/// One device's trace, ready to scrub.
#[derive(Debug, Clone)]
pub struct DeviceScrub {
    snapshot: Arc<Snapshot>,
    pub device: u32,
    /// Index into `snapshot.device_traces`; `None`: no trace (state only).
    trace: Option<usize>,
    config: AllocatorConfig,
    checkpoint_every: usize,
    /// `checkpoints[k]` is the state at cursor `k * checkpoint_every`.
    checkpoints: Vec<ScrubState>,
    /// Exact block sizes of the trace's allocations whose block is still
    /// in the final layout, as (event index, bytes) ascending:
    /// read in step with the events (a hash map of millions of entries
    /// cost a cache miss an allocation, and its growth as much again).
    exact_sizes: Vec<(usize, u64)>,
    /// `points[c]`: the figures at cursor `c` (after `c` events), 0…=N.
    pub points: Vec<Point>,
    /// Per block of [`PEAK_BLOCK`] points, each figure's highest value.
    peak_blocks: Vec<Point>,
    /// (event index, kind), in trace order.
    pub marks: Vec<(usize, MarkKind)>,
    /// The most segment ranges alive at any cursor (see
    /// [`DeviceScrub::most_segments`]).
    most_segments: usize,
    /// The first `alloc` event of the largest request, if any.
    biggest_allocation: Option<usize>,
    /// The streams the trace's events name, ascending.
    trace_streams: Vec<u64>,
    /// Final-layout inactive blocks by (address, size): their stale
    /// requested size and frames, so gaps that match one show them.
    stale: HashMap<(u64, u64), (u64, Frames)>,
    /// Final-layout segments by address: frames and pool id.
    final_segments: HashMap<u64, SegmentRange>,
    /// Block sizes inferred from requests (see the module docs).
    pub inferred_sizes: usize,
    /// Events that did not fit the reconstruction (a free of an unknown
    /// block, one after which more is allocated than reserved, …): 0 for a
    /// consistent file.
    pub misfits: usize,
    /// The file's recorded final state, kept while the trace is replayed
    /// and after only when the replay does not end in it: the last cursor
    /// shows it (what PyTorch recorded) rather than where the trace leads.
    recorded_end: Option<ScrubState>,
    /// How the replay's end differs from the recorded state, if it does.
    end_mismatch: Option<EndMismatch>,
    /// Whether the trace's clock counts whole milliseconds
    /// ([`whole_ms_clock`]).
    whole_ms: bool,
}

/// Whether every recorded time of `events` is a whole number of
/// milliseconds (a multiple of 1000 µs), at least one being recorded: a
/// clock as coarse as that (`vramtop scenario --save-snapshot` stamps step
/// n at n × 1000 µs, a made-up clock) is shown without a fraction of a
/// millisecond. PyTorch's own clock counts microseconds, so a real trace
/// is all whole milliseconds only by chance, and then shows what it holds.
pub fn whole_ms_clock(events: &[TraceEntry]) -> bool {
    let mut times = events.iter().filter_map(TraceEntry::time_us).peekable();
    times.peek().is_some() && times.all(|t| t % 1000 == 0)
}

fn empty_frames() -> Frames {
    Arc::from(Vec::new())
}

/// A block alive before the trace began, met while undoing a free of it:
/// its size (sized later, see `undo_trace`) and allocation stack are unknown
/// (`no_frames`: one empty list shared by all, not an allocation a free).
fn unsized_block(e: &TraceEntry, state: BlockState, no_frames: &Frames) -> LiveBlock {
    LiveBlock {
        size: 0,
        requested_size: e.size,
        state,
        stream: e.stream,
        frames: Arc::clone(no_frames),
        size_inferred: true,
        stack_lost: true,
    }
}

fn guess_pool(size: u64, expandable: bool) -> PoolKind {
    // Small-pool segments are 2 MiB; a large segment of exactly 2 MiB cannot
    // exist (1–10 MiB requests get 20 MiB). Large expandable segments map
    // 20 MiB pages, small ones 2 MiB pages.
    let small = if expandable {
        !size.is_multiple_of(LARGE_BUFFER)
    } else {
        size == SMALL_BUFFER
    };
    if small {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

impl DeviceScrub {
    pub(crate) fn new(snapshot: Arc<Snapshot>, device: u32, trace: Option<usize>) -> Self {
        let config = config_from_settings(snapshot.allocator_settings.as_ref());
        let n = trace
            .and_then(|t| snapshot.device_traces.get(t))
            .map_or(0, Vec::len);
        let checkpoint_every = CHECKPOINT_EVERY.max(n.div_ceil(MAX_CHECKPOINTS));
        let mut me = DeviceScrub {
            snapshot,
            device,
            trace,
            config,
            checkpoint_every,
            checkpoints: Vec::new(),
            exact_sizes: Vec::new(),
            points: Vec::with_capacity(n + 1),
            peak_blocks: Vec::new(),
            marks: Vec::new(),
            most_segments: 0,
            biggest_allocation: None,
            trace_streams: Vec::new(),
            stale: HashMap::new(),
            final_segments: HashMap::new(),
            inferred_sizes: 0,
            misfits: 0,
            recorded_end: None,
            end_mismatch: None,
            whole_ms: false,
        };
        me.whole_ms = whole_ms_clock(me.events());
        let start = me.undo_trace();
        me.replay_forward(start);
        me.find_marks();
        me
    }

    /// Whether the trace's clock counts whole milliseconds
    /// ([`whole_ms_clock`]), computed once.
    pub fn whole_ms(&self) -> bool {
        self.whole_ms
    }

    /// The device's trace (empty without one).
    pub fn events(&self) -> &[TraceEntry] {
        self.trace
            .and_then(|t| self.snapshot.device_traces.get(t))
            .map_or(&[], Vec::as_slice)
    }

    /// Number of events: cursors run from 0 (before the first) to this.
    pub fn len(&self) -> usize {
        self.events().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether blocks were live before the first event: the trace starts
    /// mid-run (its start is inferred from the final state).
    pub fn starts_mid_run(&self) -> bool {
        self.checkpoints
            .first()
            .is_some_and(|s| !s.blocks.is_empty())
    }

    /// Events between stored states.
    pub fn checkpoint_every(&self) -> usize {
        self.checkpoint_every
    }

    /// The final layout, as state.
    fn final_state(&mut self) -> ScrubState {
        let mut state = ScrubState::default();
        let device = self.device;
        let snapshot = Arc::clone(&self.snapshot);
        for s in snapshot.segments.iter().filter(|s| s.device == device) {
            let range = SegmentRange {
                size: s.total_size,
                stream: s.stream,
                segment_type: s.segment_type,
                segment_pool_id: s.segment_pool_id,
                is_expandable: s.is_expandable,
                frames: s.frames.clone(),
            };
            self.final_segments.insert(s.address, range.clone());
            state.insert_segment(s.address, range);
            for b in &s.blocks {
                if b.state.is_active() {
                    state.insert_block(
                        b.address,
                        LiveBlock {
                            size: b.size,
                            requested_size: b.requested_size,
                            state: b.state,
                            stream: s.stream,
                            frames: b.frames.clone(),
                            size_inferred: false,
                            stack_lost: false,
                        },
                    );
                } else {
                    self.stale
                        .insert((b.address, b.size), (b.requested_size, b.frames.clone()));
                }
            }
        }
        state
    }

    /// The state before the first event: the final layout with the trace
    /// undone. Blocks freed in the trace but alive before it get an
    /// inferred size (their size is recorded nowhere).
    fn undo_trace(&mut self) -> ScrubState {
        let mut state = self.final_state();
        // Compared with where the replay ends (`replay_forward`).
        self.recorded_end = Some(state.clone());
        let snapshot = Arc::clone(&self.snapshot);
        let events = self
            .trace
            .and_then(|t| snapshot.device_traces.get(t))
            .map_or(&[][..], Vec::as_slice);
        // While the trace is undone, blocks are only inserted, removed and
        // changed by address: a hash map, ordered (and totalled) once at the
        // end, costs a fraction of a B-tree step per event.
        let mut blocks: FxHashMap<u64, LiveBlock> =
            std::mem::take(&mut state.blocks).into_iter().collect();
        state.allocated = 0;
        state.active = 0;
        // A block of unknown size (alive before the trace, freed in it) is
        // one `unsized_block` made: `size_inferred` marks it until undone.
        let no_frames = empty_frames();
        for (i, e) in events.iter().enumerate().rev() {
            match e.action {
                TraceAction::Alloc => {
                    if let Some(b) = blocks.remove(&e.addr) {
                        if !b.size_inferred {
                            self.exact_sizes.push((i, b.size));
                        }
                    } else {
                        self.misfits += 1;
                    }
                }
                TraceAction::FreeRequested => {
                    if let Some(b) = blocks.get_mut(&e.addr) {
                        b.state = BlockState::ActiveAllocated;
                    } else {
                        // Allocated before the trace; its size and stack
                        // are unknown (a free's frames are the free's).
                        blocks.insert(
                            e.addr,
                            unsized_block(e, BlockState::ActiveAllocated, &no_frames),
                        );
                    }
                }
                TraceAction::FreeCompleted => {
                    blocks.insert(
                        e.addr,
                        unsized_block(e, BlockState::ActivePendingFree, &no_frames),
                    );
                }
                TraceAction::SegmentAlloc => {
                    if !state.remove_segment(e.addr) {
                        self.misfits += 1;
                    }
                }
                TraceAction::SegmentFree => {
                    let range = self.new_segment(e, false, &state);
                    state.insert_segment(e.addr, range);
                }
                TraceAction::SegmentMap => {
                    if state.unmap(e.addr, e.size).is_none() {
                        self.misfits += 1;
                    }
                }
                TraceAction::SegmentUnmap => {
                    let range = self.new_segment(e, true, &state);
                    state.insert_segment(e.addr, range);
                }
                TraceAction::Snapshot | TraceAction::Oom | TraceAction::Annotate => {}
            }
        }
        // Pushed walking back: ascending from here.
        self.exact_sizes.reverse();
        let mut ordered: Vec<(u64, LiveBlock)> = blocks.into_iter().collect();
        ordered.sort_unstable_by_key(|&(addr, _)| addr);
        for (_, b) in &ordered {
            state.add_totals(b, true);
        }
        // Sizes still unknown at the start, by address.
        let unknown: Vec<u64> = ordered
            .iter()
            .filter(|(_, b)| b.size_inferred)
            .map(|&(addr, _)| addr)
            .collect();
        state.blocks = ordered.into_iter().collect();
        // Blocks of unknown size at the start: sized in address order, each
        // bounded by the next block (sizes of later ones are known or
        // inferred the same way).
        // The replay's start state decides what the trace shows of them
        // (`start_state`); the split rule sizes the rest.
        let decided = if unknown.is_empty() {
            BTreeMap::new()
        } else {
            super::start_state::start_layout(&snapshot, self.device, &self.config)
                .map(|l| l.block_sizes())
                .unwrap_or_default()
        };
        for &addr in unknown.iter().rev() {
            let Some(mut b) = state.remove_block(addr) else {
                continue;
            };
            // In the pre-trace state the block may be allocated or pending;
            // its frames stay unknown.
            b.size = match decided.get(&addr) {
                Some(&size) => size,
                None => state.infer_size(addr, b.requested_size, &self.config),
            };
            b.size_inferred = true;
            self.inferred_sizes += 1;
            state.insert_block(addr, b);
        }
        // Blocks that lost their "unknown" mark to a later alloc were freed
        // and reallocated in the trace; the ones left with size 0 are
        // sized above, so none stays at 0 unless outside every segment.
        state
    }

    /// A segment (or mapped range) that appears at event `e`: the final
    /// layout's properties when it is there, else guessed from the size.
    fn new_segment(&self, e: &TraceEntry, expandable: bool, state: &ScrubState) -> SegmentRange {
        if let Some(f) = self.final_segments.get(&e.addr)
            && f.is_expandable == expandable
        {
            return SegmentRange {
                size: e.size,
                ..f.clone()
            };
        }
        // A mapped range next to another one of the same expandable
        // segment shares its pool and stream.
        if expandable {
            let neighbour = state
                .segments
                .range(..e.addr)
                .next_back()
                .filter(|&(&a, s)| s.is_expandable && a.saturating_add(s.size) == e.addr)
                .map(|(_, s)| s)
                .or_else(|| {
                    state
                        .segments
                        .get(&e.addr.saturating_add(e.size))
                        .filter(|s| s.is_expandable)
                });
            if let Some(n) = neighbour {
                return SegmentRange {
                    size: e.size,
                    frames: empty_frames(),
                    ..n.clone()
                };
            }
        }
        SegmentRange {
            size: e.size,
            stream: e.stream,
            segment_type: guess_pool(e.size, expandable),
            segment_pool_id: (0, 0),
            is_expandable: expandable,
            frames: e.frames.clone(),
        }
    }

    /// Applies event `i` to `state` (forwards).
    #[cfg(test)]
    fn apply(&self, state: &mut ScrubState, i: usize) -> bool {
        let mut exact = ExactSizes::from(&self.exact_sizes, i);
        self.apply_with(state, i, &mut exact)
    }

    /// Applies event `i` to `state` (forwards), its exact size (if any)
    /// from `exact`, which walks the events in ascending order.
    fn apply_with(&self, state: &mut ScrubState, i: usize, exact: &mut ExactSizes<'_>) -> bool {
        let Some(e) = self.events().get(i) else {
            return false;
        };
        match e.action {
            TraceAction::Alloc => {
                let (size, inferred) = match exact.of(i) {
                    Some(s) => (s, false),
                    None => (state.infer_size(e.addr, e.size, &self.config), true),
                };
                state.insert_block(
                    e.addr,
                    LiveBlock {
                        size,
                        requested_size: e.size,
                        state: BlockState::ActiveAllocated,
                        stream: e.stream,
                        frames: e.frames.clone(),
                        size_inferred: inferred,
                        stack_lost: false,
                    },
                );
                true
            }
            TraceAction::FreeRequested => {
                state.set_block_state(e.addr, BlockState::ActivePendingFree)
            }
            TraceAction::FreeCompleted => state.remove_block(e.addr).is_some(),
            TraceAction::SegmentAlloc => {
                let range = self.new_segment(e, false, state);
                state.insert_segment(e.addr, range);
                true
            }
            TraceAction::SegmentFree => state.remove_segment(e.addr),
            TraceAction::SegmentMap => {
                let range = self.new_segment(e, true, state);
                state.insert_segment(e.addr, range);
                true
            }
            TraceAction::SegmentUnmap => state.unmap(e.addr, e.size).is_some(),
            TraceAction::Snapshot | TraceAction::Oom | TraceAction::Annotate => true,
        }
    }

    fn point(state: &ScrubState) -> Point {
        Point {
            allocated: state.allocated,
            reserved: state.reserved,
        }
    }

    /// Microseconds as recorded at `cursor` (the time of the event just
    /// applied); `None` when the file has no time, and at 0, before the
    /// first event, which has no time of its own (the viewer says "before
    /// the first event" there, with none).
    pub fn time_at(&self, cursor: usize) -> Option<i64> {
        self.events()
            .get(cursor.checked_sub(1)?)
            .and_then(|e| e.time_us())
    }

    fn replay_forward(&mut self, start: ScrubState) {
        let mut state = start;
        let mut points = std::mem::take(&mut self.points);
        let mut checkpoints = std::mem::take(&mut self.checkpoints);
        points.push(Self::point(&state));
        checkpoints.push(state.clone());
        let mut most_segments = state.segments.len();
        let mut misfits = 0;
        let mut exact = ExactSizes::from(&self.exact_sizes, 0);
        for i in 0..self.len() {
            // An event that fits but leaves more allocated than reserved
            // placed a block outside every segment: no allocator does that.
            let fits = self.apply_with(&mut state, i, &mut exact);
            if !fits || state.allocated > state.reserved {
                misfits += 1;
            }
            points.push(Self::point(&state));
            most_segments = most_segments.max(state.segments.len());
            if (i + 1).is_multiple_of(self.checkpoint_every) {
                checkpoints.push(state.clone());
            }
        }
        // The last cursor is the file's own state: where the trace leads
        // when the file is consistent, else what the file records (and
        // `end_mismatch` says how the two differ).
        let recorded = self.recorded_end.take();
        self.end_mismatch = recorded
            .as_ref()
            .and_then(|recorded| end_mismatch(self, &state, recorded));
        if self.end_mismatch.is_some()
            && let Some(recorded) = recorded
        {
            if let Some(last) = points.last_mut() {
                *last = Self::point(&recorded);
            }
            most_segments = most_segments.max(recorded.segments.len());
            self.recorded_end = Some(recorded);
        }
        self.peak_blocks = points.chunks(PEAK_BLOCK).map(highest_of).collect();
        self.points = points;
        self.checkpoints = checkpoints;
        self.most_segments = most_segments;
        self.misfits += misfits;
    }

    /// The highest reserved and allocated bytes (in that order) at the
    /// cursors `range` (clamped to 0…=N; zeros when empty): whole blocks
    /// from their table, only the ends point by point.
    pub fn highest(&self, range: std::ops::Range<usize>) -> (u64, u64) {
        let end = range.end.min(self.points.len());
        let start = range.start.min(end);
        let points = |r: std::ops::Range<usize>| self.points.get(r).unwrap_or_default();
        let (first_block, last_block) = (start.div_ceil(PEAK_BLOCK), end / PEAK_BLOCK);
        let best = if first_block >= last_block {
            highest_of(points(start..end))
        } else {
            let blocks = self
                .peak_blocks
                .get(first_block..last_block)
                .unwrap_or_default();
            highest_of(&[
                highest_of(points(start..first_block * PEAK_BLOCK)),
                highest_of(blocks),
                highest_of(points(last_block * PEAK_BLOCK..end)),
            ])
        };
        (best.reserved, best.allocated)
    }

    fn find_marks(&mut self) {
        let events = self.events();
        let mut marks = Vec::new();
        let mut biggest: Option<(usize, u64)> = None;
        // A trace of millions of events names a few streams, mostly the
        // same one event after event: the set is fed on a change only.
        let mut streams = std::collections::BTreeSet::new();
        let mut last_stream = None;
        let is_release =
            |a: TraceAction| matches!(a, TraceAction::SegmentFree | TraceAction::SegmentUnmap);
        for (i, e) in events.iter().enumerate() {
            if last_stream != Some(e.stream) {
                streams.insert(e.stream);
                last_stream = Some(e.stream);
            }
            match e.action {
                TraceAction::Alloc if biggest.is_none_or(|(_, size)| e.size > size) => {
                    biggest = Some((i, e.size));
                }
                TraceAction::Oom => marks.push((i, MarkKind::Oom)),
                a if is_marker(a) => marks.push((i, MarkKind::Marker)),
                TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                    marks.push((i, MarkKind::SegmentAlloc));
                }
                a if is_release(a) => {
                    let next = events.get(i + 1).map(|n| n.action);
                    let run_ends = !next.is_some_and(is_release);
                    let retry = matches!(
                        next,
                        Some(
                            TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::Oom
                        )
                    );
                    if run_ends && !retry {
                        marks.push((i, MarkKind::EmptyCache));
                    }
                }
                _ => {}
            }
        }
        self.marks = marks;
        self.biggest_allocation = biggest.map(|(i, _)| i);
        self.trace_streams = streams.into_iter().collect();
    }

    /// The streams the trace's events name, ascending (found while the
    /// scrub is built: no walk of the trace again).
    pub fn trace_streams(&self) -> &[u64] {
        &self.trace_streams
    }

    /// The first `alloc` event of the largest request (the first of equal
    /// ones), if the trace allocates at all.
    pub fn biggest_allocation(&self) -> Option<usize> {
        self.biggest_allocation
    }

    /// The first cursor whose figure (`pick` of its point) is at least
    /// `bytes`: the blocks of maxima skipped whole until one reaches it.
    pub fn first_reaching(&self, pick: fn(&Point) -> u64, bytes: u64) -> Option<usize> {
        self.first_reaching_from(pick, bytes, 0)
    }

    /// [`DeviceScrub::first_reaching`] among the cursors `from` on: the
    /// rest of `from`'s block of maxima point by point, then whole blocks.
    pub fn first_reaching_from(
        &self,
        pick: fn(&Point) -> u64,
        bytes: u64,
        from: usize,
    ) -> Option<usize> {
        let next_block = from / PEAK_BLOCK + 1;
        let head_end = next_block.saturating_mul(PEAK_BLOCK).min(self.points.len());
        let head = self.points.get(from..head_end).unwrap_or_default();
        if let Some(i) = head.iter().position(|p| pick(p) >= bytes) {
            return Some(from + i);
        }
        let block = self
            .peak_blocks
            .iter()
            .skip(next_block)
            .position(|b| pick(b) >= bytes)?
            + next_block;
        let start = block * PEAK_BLOCK;
        let points = self.points.get(start..).unwrap_or_default();
        points
            .iter()
            .take(PEAK_BLOCK)
            .position(|p| pick(p) >= bytes)
            .map(|i| start + i)
    }

    /// The indices of the trace's `kind` events, in order.
    pub fn mark_events(&self, kind: MarkKind) -> impl Iterator<Item = usize> + '_ {
        self.marks.iter().filter(move |m| m.1 == kind).map(|m| m.0)
    }

    /// The state at `cursor` (after `cursor` events; clamped to 0…=N). At
    /// N it is the file's recorded final state, also where the trace does
    /// not lead there ([`DeviceScrub::end_mismatch`]).
    pub fn state_at(&self, cursor: usize) -> ScrubState {
        let cursor = cursor.min(self.len());
        if cursor == self.len()
            && let Some(recorded) = &self.recorded_end
        {
            return recorded.clone();
        }
        let k = (cursor / self.checkpoint_every).min(self.checkpoints.len().saturating_sub(1));
        let mut state = self.checkpoints.get(k).cloned().unwrap_or_default();
        let from = k * self.checkpoint_every;
        let mut exact = ExactSizes::from(&self.exact_sizes, from);
        for i in from..cursor {
            self.apply_with(&mut state, i, &mut exact);
        }
        state
    }

    /// The state at `cursor` in the snapshot's own shape: segments in
    /// address order (contiguous mapped ranges of an expandable segment
    /// merged, as PyTorch reports them), each covered by its blocks, with
    /// the gaps between active blocks as inactive blocks.
    pub fn segments_at(&self, cursor: usize) -> Vec<Segment> {
        self.layout_of(&self.state_at(cursor))
    }

    /// [`DeviceScrub::segments_at`] for an already computed state.
    pub fn layout_of(&self, state: &ScrubState) -> Vec<Segment> {
        let mut groups: Vec<(u64, u64, &SegmentRange)> = Vec::new();
        for (&addr, s) in &state.segments {
            if let Some(last) = groups.last_mut()
                && s.is_expandable
                && last.2.is_expandable
                && last.1 == addr
                && last.2.segment_type == s.segment_type
                && last.2.stream == s.stream
            {
                last.1 = addr.saturating_add(s.size);
                continue;
            }
            groups.push((addr, addr.saturating_add(s.size), s));
        }
        groups
            .into_iter()
            .map(|(start, end, s)| self.segment(state, start, end, s))
            .collect()
    }

    fn segment(&self, state: &ScrubState, start: u64, end: u64, s: &SegmentRange) -> Segment {
        let mut blocks = Vec::new();
        let mut at = start;
        let gap = |from: u64, to: u64, blocks: &mut Vec<Block>| {
            if to > from {
                let (requested, frames) = self
                    .stale
                    .get(&(from, to - from))
                    .cloned()
                    .unwrap_or_else(|| (0, empty_frames()));
                blocks.push(Block {
                    address: from,
                    size: to - from,
                    requested_size: requested,
                    state: BlockState::Inactive,
                    frames,
                });
            }
        };
        let (mut allocated, mut active, mut requested) = (0u64, 0u64, 0u64);
        for (&addr, b) in state.blocks.range(start..end) {
            gap(at, addr, &mut blocks);
            blocks.push(Block {
                address: addr,
                size: b.size,
                requested_size: b.requested_size,
                state: b.state,
                frames: b.frames.clone(),
            });
            // Sizes are input-derived: pin the sums rather than wrap.
            if b.state == BlockState::ActiveAllocated {
                allocated = allocated.saturating_add(b.size);
            }
            active = active.saturating_add(b.size);
            requested = requested.saturating_add(b.requested_size);
            at = at.max(addr.saturating_add(b.size));
        }
        gap(at, end, &mut blocks);
        let frames = self
            .final_segments
            .get(&start)
            .map_or_else(|| s.frames.clone(), |f| f.frames.clone());
        Segment {
            device: self.device,
            address: start,
            total_size: end - start,
            allocated_size: Some(allocated),
            active_size: Some(active),
            requested_size: Some(requested),
            stream: s.stream,
            segment_type: s.segment_type,
            segment_pool_id: s.segment_pool_id,
            is_expandable: s.is_expandable,
            frames,
            blocks,
        }
    }

    /// The block state of the live block at `addr` at `cursor`, if any:
    /// whether its size was inferred, for the detail view.
    pub fn block_at(&self, cursor: usize, addr: u64) -> Option<LiveBlock> {
        self.state_at(cursor).blocks.get(&addr).cloned()
    }

    /// The index of the event that allocated the block live at `addr` at
    /// `cursor`: the last `alloc` at that address before the cursor.
    /// `None` when the block was allocated before the trace began (or no
    /// block lives there). Cost: a scan of the events before the cursor.
    pub fn allocated_by(&self, cursor: usize, addr: u64) -> Option<usize> {
        let end = cursor.min(self.len());
        self.events()[..end]
            .iter()
            .rposition(|e| e.action == TraceAction::Alloc && e.addr == addr)
    }

    /// What last held the free range `addr..addr + size` at `cursor`: the
    /// most recent block freed there before the cursor and the event that
    /// allocated it, found by searching backwards from the cursor. The
    /// search stops at the first such free, or at the event that made the
    /// range's segment (nothing held it since), so a range freed a moment
    /// ago costs a moment's events; one never held costs the events back
    /// to its segment's creation, or to the trace's start.
    ///
    /// A freed block is placed by its address and its request (the trace
    /// records requests, not block sizes): a block whose request lay
    /// before `addr` and only its rounding inside the range is not seen.
    pub fn last_held(&self, cursor: usize, addr: u64, size: u64) -> LastHeld {
        let end = cursor.min(self.len());
        let events = &self.events()[..end];
        let range_end = addr.saturating_add(size.max(1));
        let overlaps =
            |from: u64, bytes: u64| from < range_end && addr < from.saturating_add(bytes.max(1));
        for (i, e) in events.iter().enumerate().rev() {
            match e.action {
                TraceAction::FreeCompleted if overlaps(e.addr, e.size) => {
                    let allocated = events[..i]
                        .iter()
                        .rposition(|a| a.action == TraceAction::Alloc && a.addr == e.addr);
                    return LastHeld::Freed {
                        address: e.addr,
                        requested: e.size,
                        allocated,
                        freed: i,
                    };
                }
                TraceAction::SegmentAlloc | TraceAction::SegmentMap
                    if e.addr <= addr && addr < e.addr.saturating_add(e.size) =>
                {
                    return LastHeld::NotSinceSegment(i);
                }
                _ => {}
            }
        }
        LastHeld::NotInTrace
    }

    /// The cursor just after the next `kind` event after `cursor`.
    pub fn next_mark(&self, kind: MarkKind, cursor: usize) -> Option<usize> {
        // The marks are in event order (`find_marks`): start at the first
        // past the cursor, not at the trace's start (the viewer's hints ask
        // this on every draw).
        let from = self.marks.partition_point(|m| m.0 < cursor);
        self.marks[from..]
            .iter()
            .find(|m| m.1 == kind)
            .map(|m| m.0 + 1)
    }

    /// The cursor just after the previous `kind` event before `cursor`.
    pub fn prev_mark(&self, kind: MarkKind, cursor: usize) -> Option<usize> {
        let before = self.marks.partition_point(|m| m.0 + 1 < cursor);
        self.marks[..before]
            .iter()
            .rev()
            .find(|m| m.1 == kind)
            .map(|m| m.0 + 1)
    }

    /// How many `kind` events the trace holds.
    pub fn count(&self, kind: MarkKind) -> usize {
        self.marks.iter().filter(|m| m.1 == kind).count()
    }

    /// Peak reserved and allocated over the trace (bytes).
    pub fn peaks(&self) -> (u64, u64) {
        self.highest(0..self.points.len())
    }

    /// The most segments at any cursor, 0…=N: what a pane listing the
    /// segments needs at worst, so it can keep one height while the cursor
    /// moves. The mapped ranges of an expandable segment count one each
    /// ([`DeviceScrub::segments_at`] merges contiguous ones): a bound, not
    /// always reached, counted in O(1) an event.
    pub fn most_segments(&self) -> usize {
        self.most_segments
    }

    /// How the state the trace's replay ends in differs from the file's
    /// recorded final state; `None` for a consistent file. The last
    /// cursor shows the recorded state either way.
    pub fn end_mismatch(&self) -> Option<EndMismatch> {
        self.end_mismatch
    }
}

/// Every device of a snapshot, ready to scrub.
#[derive(Debug, Clone)]
pub struct Scrub {
    pub snapshot: Arc<Snapshot>,
    /// Ascending by device index: [`Snapshot::devices`].
    pub devices: Vec<DeviceScrub>,
}

impl Scrub {
    pub fn new(snapshot: Arc<Snapshot>) -> Self {
        let devices = scrub_devices(&snapshot)
            .into_iter()
            .map(|(d, trace)| DeviceScrub::new(Arc::clone(&snapshot), d, trace))
            .collect();
        Scrub { snapshot, devices }
    }
}

/// The devices a [`Scrub`] of `snapshot` has ([`Snapshot::devices`]),
/// with the index of its trace in `device_traces` when the trace records
/// memory events: one of only `snapshot` markers (PyTorch writes one when
/// the snapshot is taken, recording or not) has no moment to step to.
pub fn scrub_devices(snapshot: &Snapshot) -> Vec<(u32, Option<usize>)> {
    snapshot
        .devices()
        .into_iter()
        .map(|d| {
            let trace = usize::try_from(d).ok().filter(|&t| {
                snapshot
                    .device_traces
                    .get(t)
                    .is_some_and(|t| t.iter().any(|e| !is_marker(e.action)))
            });
            (d, trace)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{CachingAllocator, InMemoryDevice};
    use crate::snapshot::capture::{mixed_workload, recording_model, snapshot_of};
    use crate::snapshot::read_snapshot_file;
    use crate::snapshot::summary::segment_info;
    use std::path::PathBuf;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn shared(name: &str) -> Option<Snapshot> {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/snapshots")
            .join(name);
        if !p.exists() {
            eprintln!("skipping: {} not found", p.display());
            return None;
        }
        Some(read_snapshot_file(&p).expect("shared snapshot loads"))
    }

    /// The scrub of the shared snapshot `name` (`None`: not found).
    fn shared_scrub(name: &str) -> Option<Scrub> {
        shared(name).map(|s| Scrub::new(Arc::new(s)))
    }

    /// The snapshots of [`WITH_TRACES`] in order, loaded one at a time;
    /// ends at the first one not found (the shared files are absent
    /// outside the project's machines).
    fn shared_with_traces() -> impl Iterator<Item = (&'static str, Snapshot)> {
        WITH_TRACES
            .into_iter()
            .map_while(|name| shared(name).map(|s| (name, s)))
    }

    /// Real traces (snapviewer_memory.pickle is hand-made and inconsistent:
    /// see `hand_made_inconsistent_file_is_scrubbed_without_panicking`).
    const WITH_TRACES: [&str; 5] = [
        "JasperSolt_EoR_NN_snapshot.pickle",
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
        "silmont_fwd_fp32_128.pickle",
        "silmont_mem_snapshot.pickle",
    ];

    /// Segments compared as `memory_snapshot()` would list them: addresses,
    /// sizes, states, and requested sizes of active blocks.
    fn comparable(segments: &[Segment]) -> Vec<crate::alloc::SegmentInfo> {
        segments
            .iter()
            .map(|s| {
                let mut info = segment_info(s);
                for b in &mut info.blocks {
                    if !b.state.is_active() {
                        b.requested_size = 0;
                    }
                }
                info
            })
            .collect()
    }

    fn final_layout(snapshot: &Snapshot, device: u32) -> Vec<Segment> {
        let mut segs: Vec<Segment> = snapshot
            .segments
            .iter()
            .filter(|s| s.device == device)
            .cloned()
            .collect();
        segs.sort_by_key(|s| s.address);
        segs
    }

    fn check_consistency(d: &DeviceScrub, what: &str, every: usize) {
        for c in (0..=d.len()).step_by(every.max(1)).chain([d.len()]) {
            let state = d.state_at(c);
            assert_eq!(
                state.recomputed_totals(),
                (state.reserved, state.allocated, state.active),
                "{what}: running totals at cursor {c}"
            );
            let segs = d.layout_of(&state);
            let reserved: u64 = segs.iter().map(|s| s.total_size).sum();
            let allocated: u64 = segs
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size)
                .sum();
            let p = d.points[c];
            assert_eq!(
                (p.reserved, p.allocated),
                (reserved, allocated),
                "{what}: cursor {c}"
            );
            for s in &segs {
                let covered: u64 = s.blocks.iter().map(|b| b.size).sum();
                assert_eq!(covered, s.total_size, "{what}: cursor {c} {:#x}", s.address);
            }
        }
    }

    #[test]
    fn last_cursor_of_every_shared_trace_is_the_final_layout() {
        for (name, snapshot) in shared_with_traces() {
            let scrub = Scrub::new(Arc::new(snapshot.clone()));
            assert!(!scrub.devices.is_empty(), "{name}");
            for d in &scrub.devices {
                let at_end = d.segments_at(d.len());
                assert_eq!(
                    comparable(&at_end),
                    comparable(&final_layout(&snapshot, d.device)),
                    "{name} device {}",
                    d.device
                );
                assert_eq!(d.misfits, 0, "{name}: every event fits");
            }
        }
    }

    #[test]
    fn shared_traces_keep_totals_equal_to_the_blocks_at_every_cursor() {
        for (name, snapshot) in shared_with_traces() {
            let scrub = Scrub::new(Arc::new(snapshot));
            for d in &scrub.devices {
                check_consistency(d, name, 1);
            }
        }
    }

    /// The state at `cursor` as a snapshot of its own, for the invariant
    /// checker of real allocator dumps.
    fn as_snapshot(d: &DeviceScrub, cursor: usize) -> Snapshot {
        Snapshot::of_segments(
            crate::snapshot::SnapshotFormat::DumpSnapshot,
            d.segments_at(cursor),
        )
    }

    #[test]
    fn every_reconstructed_state_obeys_the_rules_of_a_real_allocator_dump() {
        for (name, snapshot) in shared_with_traces() {
            let scrub = Scrub::new(Arc::new(snapshot));
            for d in &scrub.devices {
                for c in (0..=d.len()).step_by(37).chain([0, d.len()]) {
                    let findings = crate::snapshot::check_invariants(&as_snapshot(d, c));
                    assert!(findings.is_empty(), "{name} cursor {c}: {findings:?}");
                }
            }
        }
        let mut m = model("expandable_segments:True", 2 * GIB);
        workload(&mut m, 1500, 0x2545_f491);
        let d = &Scrub::new(Arc::new(snapshot_of(&m, 0))).devices[0];
        for c in (0..=d.len()).step_by(11) {
            let findings = crate::snapshot::check_invariants(&as_snapshot(d, c));
            assert!(findings.is_empty(), "model cursor {c}: {findings:?}");
        }
    }

    #[test]
    fn full_history_trace_starts_empty_and_first_event_is_undone() {
        let Some(scrub) = shared_scrub("silmont_mem_snapshot.pickle") else {
            return;
        };
        let d = &scrub.devices[0];
        assert!(
            d.state_at(0).segments.is_empty(),
            "nothing before the trace"
        );
        assert_eq!(d.points[0].reserved, 0);
        let first = &d.events()[0];
        assert_eq!(first.action, TraceAction::SegmentAlloc);
        assert_eq!(d.points[1].reserved, first.size);
        assert_eq!(d.count(MarkKind::SegmentAlloc), 9);
    }

    #[test]
    fn stepping_forward_then_back_is_identity() {
        let Some(scrub) = shared_scrub("JasperSolt_EoR_NN_snapshot.pickle") else {
            return;
        };
        let d = &scrub.devices[0];
        for c in [0, 1, 1023, 1024, 1025, 2500, d.len() - 1] {
            let here = d.state_at(c);
            let _ = d.state_at(c + 1);
            assert_eq!(d.state_at(c), here, "cursor {c}");
            // Forward from a checkpoint equals the one-by-one replay.
            let mut stepped = d.state_at(c);
            d.apply(&mut stepped, c);
            assert_eq!(stepped, d.state_at(c + 1), "cursor {c} + 1");
        }
    }

    fn model(settings: &str, capacity: u64) -> CachingAllocator<InMemoryDevice> {
        recording_model(settings, capacity).expect("valid")
    }

    /// A workload with OOMs, empty_cache calls and pending frees; returns
    /// the model's layout after each call, keyed by trace length, and how
    /// many empty_cache calls released memory.
    fn workload(
        m: &mut CachingAllocator<InMemoryDevice>,
        steps: usize,
        seed: u64,
    ) -> (Vec<(usize, Vec<crate::alloc::SegmentInfo>)>, usize) {
        let mut layouts = Vec::new();
        let empty_caches = mixed_workload(m, steps, seed, 29, |m| {
            layouts.push((m.trace_len(), m.layout()));
        })
        .expect("the workload frees only live blocks");
        (layouts, empty_caches)
    }

    fn check_model_trace(settings: &str, seed: u64, skip_fraction: usize) {
        let mut m = model(settings, 2 * GIB);
        let (layouts, empty_caches) = workload(&mut m, 2000, seed);
        let skip = m.trace_len() / skip_fraction.max(1) * usize::from(skip_fraction > 1);
        let snapshot = snapshot_of(&m, skip);
        let scrub = Scrub::new(Arc::new(snapshot.clone()));
        let d = &scrub.devices[0];
        let what = format!("{settings:?} seed {seed} skip {skip}");
        assert_eq!(d.misfits, 0, "{what}");
        assert_eq!(
            comparable(&d.segments_at(d.len())),
            comparable(&final_layout(&snapshot, 0)),
            "{what}: end"
        );
        check_consistency(d, &what, 7);
        // Totals match the model's own after every call.
        for (len, layout) in &layouts {
            if *len < skip {
                continue;
            }
            let c = len - skip;
            let reserved: u64 = layout.iter().map(|s| s.total_size).sum();
            let allocated: u64 = layout.iter().map(|s| s.allocated_size).sum();
            assert_eq!(d.points[c].reserved, reserved, "{what}: reserved at {c}");
            if skip == 0 {
                assert_eq!(d.points[c].allocated, allocated, "{what}: allocated at {c}");
            }
        }
        if skip == 0 {
            assert!(d.count(MarkKind::Oom) > 0, "{what}: the workload ran out");
            // An empty_cache() directly followed by a cudaMalloc reads as
            // the allocator's release-and-retry (see the module docs).
            let found = d.count(MarkKind::EmptyCache);
            assert!(
                found > 0 || empty_caches == 0,
                "{what}: {found} of {empty_caches}"
            );
            if settings.is_empty() {
                assert!(found <= empty_caches, "{what}: {found} of {empty_caches}");
            }
        }
    }

    #[test]
    fn highest_over_any_range_is_the_maximum_of_its_points() {
        let mut m = model("", 2 * GIB);
        let _ = workload(&mut m, 6000, 0x5eed);
        let scrub = Scrub::new(Arc::new(snapshot_of(&m, 0)));
        let d = &scrub.devices[0];
        let n = d.points.len();
        assert!(
            n > 3 * PEAK_BLOCK,
            "the trace spans several blocks ({n} points)"
        );
        let naive = |r: std::ops::Range<usize>| {
            let points = d.points.get(r).unwrap_or_default();
            (
                points.iter().map(|p| p.reserved).max().unwrap_or(0),
                points.iter().map(|p| p.allocated).max().unwrap_or(0),
            )
        };
        let b = PEAK_BLOCK;
        let mut ranges = vec![
            0..n,
            0..0,
            0..1,
            b - 1..b + 1,
            b..2 * b,
            b..3 * b + 1,
            1..n - 1,
            n - 1..n,
        ];
        // Pseudo-random pairs (a fixed LCG: the test is repeatable).
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..500 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let a = (x >> 33) as usize % n;
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let z = (x >> 33) as usize % n;
            ranges.push(a.min(z)..a.max(z) + 1);
        }
        for r in ranges.clone() {
            assert_eq!(d.highest(r.clone()), naive(r.clone()), "range {r:?}");
        }
        // The first cursor of a range at its highest allocated, from the
        // table as a walk of the points finds it.
        for r in ranges.iter().filter(|r| !r.is_empty()) {
            let (_, top) = d.highest(r.clone());
            let walked = d.points[r.clone()]
                .iter()
                .position(|q| q.allocated >= top)
                .map(|i| r.start + i);
            assert_eq!(
                d.first_reaching_from(|q| q.allocated, top, r.start),
                walked,
                "range {r:?}"
            );
        }
        assert_eq!(d.first_reaching_from(|q| q.allocated, 0, n + 5), None);
        // Out of range: clamped; backwards: nothing.
        assert_eq!(d.highest(n - 1..n + 10), naive(n - 1..n));
        assert_eq!(d.highest(std::ops::Range { start: 5, end: 2 }), (0, 0));
        assert_eq!(d.peaks(), naive(0..n));
        // The peaks' moments: the first cursor at each maximum, and the
        // first allocation of the largest request, as a walk finds them.
        let p = crate::snapshot::peak::peaks(d);
        let first_at = |pick: fn(&Point) -> u64| {
            let top = d.points.iter().map(pick).max().unwrap_or(0);
            d.points.iter().position(|q| pick(q) == top)
        };
        assert_eq!(Some(p.allocated.cursor), first_at(|q| q.allocated));
        assert_eq!(Some(p.reserved.cursor), first_at(|q| q.reserved));
        let mut biggest: Option<(usize, u64)> = None;
        for (i, e) in d.events().iter().enumerate() {
            if e.action == TraceAction::Alloc && biggest.is_none_or(|(_, b)| e.size > b) {
                biggest = Some((i + 1, e.size));
            }
        }
        assert_eq!(p.biggest_allocation.map(|m| (m.cursor, m.bytes)), biggest);
        assert!(
            p.allocated.cursor > PEAK_BLOCK,
            "the peak is past the first block"
        );
        let mut streams: Vec<u64> = d.events().iter().map(|e| e.stream).collect();
        streams.sort_unstable();
        streams.dedup();
        assert_eq!(d.trace_streams(), streams);
    }

    #[test]
    fn model_traces_reconstruct_the_models_totals_at_every_call() {
        for seed in 1..=3u64 {
            check_model_trace("", seed * 0x9e37_79b9, 1);
            check_model_trace("expandable_segments:True", seed * 0x1234_5677, 1);
            check_model_trace("max_split_size_mb:64", seed * 0xdead_beef, 1);
        }
    }

    #[test]
    fn model_traces_starting_mid_run_reconstruct_the_end_and_totals() {
        for seed in 1..=3u64 {
            check_model_trace("", seed * 0x5151_5151, 2);
            check_model_trace("expandable_segments:True", seed * 0x7777_1111, 3);
        }
    }

    #[test]
    fn cursor_zero_is_the_state_before_the_first_event() {
        let mut m = model("", 8 * GIB);
        let a = m.malloc(30 * MIB, 0).expect("fits");
        let skip = m.trace_len();
        let b = m.malloc(4 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        let snapshot = snapshot_of(&m, skip);
        let d = &Scrub::new(Arc::new(snapshot)).devices[0];
        let start = d.state_at(0);
        assert_eq!(start.blocks.len(), 1, "only a was live");
        let live = start.blocks.get(&a).expect("a live at the start");
        assert_eq!(live.size, 30 * MIB, "inferred as the rounded request");
        assert!(live.size_inferred);
        assert!(!start.blocks.contains_key(&b));
        assert_eq!(d.inferred_sizes, 1);
        assert_eq!(d.points[0].allocated, 30 * MIB);
        assert_eq!(d.allocated_by(d.len(), a), None, "before the trace");
        let by = d
            .allocated_by(d.len(), b)
            .expect("b's alloc is in the trace");
        assert_eq!(d.events()[by].action, TraceAction::Alloc);
        assert_eq!(by, 1, "after the segment_alloc that made room for it");
        assert_eq!(d.points[d.len()].allocated, 4 * MIB);
    }

    #[test]
    fn last_held_names_the_block_last_freed_in_a_free_range_or_why_none() {
        let mut m = model("", 8 * GIB);
        // Before the trace: a small block (its 2 MiB segment's rest free
        // ever since) and a large one the trace frees.
        let small = m.malloc(512 * 1024, 0).expect("fits");
        let early = m.malloc(30 * MIB, 0).expect("fits");
        let skip = m.trace_len();
        let a = m.malloc(4 * MIB, 0).expect("fits");
        let _b = m.malloc(4 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        m.free(early).expect("live");
        let snapshot = snapshot_of(&m, skip);
        let d = &Scrub::new(Arc::new(snapshot)).devices[0];
        let free: Vec<Block> = d
            .segments_at(d.len())
            .into_iter()
            .flat_map(|s| s.blocks)
            .filter(|b| b.state == BlockState::Inactive)
            .collect();
        let held = |addr: u64| {
            let b = free
                .iter()
                .find(|b| b.address == addr)
                .expect("a free block");
            d.last_held(d.len(), b.address, b.size)
        };
        let LastHeld::Freed {
            address,
            allocated: Some(i),
            freed,
            ..
        } = held(a)
        else {
            panic!("a was allocated and freed in the trace: {:?}", held(a));
        };
        assert_eq!(address, a);
        assert_eq!(d.events()[i].action, TraceAction::Alloc);
        assert_eq!(d.events()[freed].action, TraceAction::FreeCompleted);
        assert!(i < freed && d.events()[freed].addr == a);
        assert!(
            matches!(
                held(early),
                LastHeld::Freed {
                    allocated: None,
                    ..
                }
            ),
            "allocated before the trace, freed in it: {:?}",
            held(early)
        );
        // The rest of a's segment, after b: nothing held it since the
        // segment was made.
        let rest = free
            .iter()
            .find(|b| b.address > a && b.address < a + 20 * MIB)
            .expect("the rest of a's 20 MiB segment");
        let LastHeld::NotSinceSegment(made) = d.last_held(d.len(), rest.address, rest.size) else {
            panic!("{:?}", d.last_held(d.len(), rest.address, rest.size));
        };
        assert_eq!(d.events()[made].action, TraceAction::SegmentAlloc);
        let small_rest = free
            .iter()
            .find(|b| b.address > small && b.address < small + 2 * MIB)
            .expect("the rest of the small segment");
        assert_eq!(
            d.last_held(d.len(), small_rest.address, small_rest.size),
            LastHeld::NotInTrace
        );
        // Before a's free, what last held its range is older than the
        // cursor: nothing, since its segment was made.
        assert_eq!(
            d.last_held(freed, a, 4 * MIB),
            LastHeld::NotSinceSegment(made)
        );
    }

    #[test]
    fn marks_find_ooms_segment_allocs_and_empty_cache_points() {
        let mut m = model("", GIB);
        let a = m.malloc(300 * MIB, 0).expect("fits");
        let b = m.malloc(300 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        // Retry path: the cached 300 MiB is released, then cudaMalloc.
        let c = m.malloc(500 * MIB, 0).expect("fits after a release");
        assert!(m.malloc(800 * MIB, 0).is_err(), "OOM");
        m.free(b).expect("live");
        m.empty_cache();
        m.free(c).expect("live");
        let snapshot = snapshot_of(&m, 0);
        let d = &Scrub::new(Arc::new(snapshot)).devices[0];
        assert_eq!(d.count(MarkKind::Oom), 1);
        assert_eq!(d.count(MarkKind::EmptyCache), 1, "{:?}", d.marks);
        assert_eq!(d.count(MarkKind::SegmentAlloc), 3);
        let oom = d.next_mark(MarkKind::Oom, 0).expect("an OOM");
        assert_eq!(d.events()[oom - 1].action, TraceAction::Oom);
        assert_eq!(d.prev_mark(MarkKind::Oom, oom), None);
        assert_eq!(d.prev_mark(MarkKind::Oom, oom + 1), Some(oom));
        let ec = d.next_mark(MarkKind::EmptyCache, 0).expect("empty_cache");
        assert!(ec > oom);
        assert_eq!(d.events()[ec - 1].action, TraceAction::SegmentFree);
        assert!(d.points[ec].reserved < d.points[ec - 1].reserved);
        // From every cursor, the next and previous mark of each kind are
        // the nearest such mark strictly after / before it.
        for kind in [MarkKind::Oom, MarkKind::SegmentAlloc, MarkKind::EmptyCache] {
            let at: Vec<usize> = d.mark_events(kind).map(|i| i + 1).collect();
            for cursor in 0..=d.len() + 1 {
                let next = at.iter().copied().find(|&c| c > cursor);
                let prev = at.iter().rev().copied().find(|&c| c < cursor);
                assert_eq!(d.next_mark(kind, cursor), next, "{kind:?} after {cursor}");
                assert_eq!(d.prev_mark(kind, cursor), prev, "{kind:?} before {cursor}");
            }
        }
    }

    /// A model trace whose file is then made to disagree with it: the
    /// second block is recorded free though the trace never frees it.
    fn self_contradictory() -> (Snapshot, u64) {
        let mut m = model("", 8 * GIB);
        let _a = m.malloc(30 * MIB, 0).expect("fits");
        let b = m.malloc(4 * MIB, 0).expect("fits");
        let _c = m.malloc(30 * MIB, 0).expect("fits");
        let mut snapshot = snapshot_of(&m, 0);
        // b is alone in its 20 MiB segment: the file records it empty.
        let segment = snapshot
            .segments
            .iter_mut()
            .find(|s| s.blocks.iter().any(|blk| blk.address == b))
            .expect("b is in the layout");
        let mut free = segment.blocks[0].clone();
        free.size = segment.total_size;
        free.state = BlockState::Inactive;
        segment.blocks = vec![free];
        (segment.allocated_size, segment.active_size) = (Some(0), Some(0));
        segment.requested_size = Some(0);
        (snapshot, b)
    }

    #[test]
    fn the_last_cursor_shows_the_files_recorded_state_where_the_trace_leads_elsewhere() {
        let (snapshot, b) = self_contradictory();
        let d = &Scrub::new(Arc::new(snapshot.clone())).devices[0];
        let end = d.segments_at(d.len());
        assert_eq!(comparable(&end), comparable(&final_layout(&snapshot, 0)));
        assert!(!d.state_at(d.len()).blocks.contains_key(&b), "b is free");
        assert_eq!(
            d.end_mismatch(),
            Some(EndMismatch {
                blocks: 1,
                segments: 0
            })
        );
        // The figures agree with what is shown; the cursor before the end
        // is the trace's, b allocated.
        let state = d.state_at(d.len());
        assert_eq!(
            (d.points[d.len()].reserved, d.points[d.len()].allocated),
            (state.reserved, state.allocated)
        );
        assert_eq!(d.points[d.len()].allocated, 60 * MIB);
        assert!(d.state_at(d.len() - 1).blocks.contains_key(&b));
        // A consistent file: no mismatch.
        let mut m = model("", 8 * GIB);
        let _ = workload(&mut m, 500, 7);
        let d = &Scrub::new(Arc::new(snapshot_of(&m, 0))).devices[0];
        assert_eq!(d.end_mismatch(), None);
    }

    #[test]
    fn a_segment_recorded_with_another_size_than_the_trace_maps_differs() {
        let (mut snapshot, b) = self_contradictory();
        // b's segment, recorded twice as large as its segment_alloc.
        let segment = snapshot
            .segments
            .iter_mut()
            .find(|s| s.address == b)
            .expect("b's segment starts at b");
        segment.total_size *= 2;
        segment.blocks[0].size = segment.total_size;
        let d = &Scrub::new(Arc::new(snapshot.clone())).devices[0];
        assert_eq!(
            d.end_mismatch(),
            Some(EndMismatch {
                blocks: 1,
                segments: 1
            })
        );
        let shown = d.segments_at(d.len());
        let size = shown.iter().find(|s| s.address == b).map(|s| s.total_size);
        assert_eq!(size, Some(40 * MIB), "the file's size, not the trace's");
        assert_eq!(d.points[d.len()].reserved, 100 * MIB);
    }

    #[test]
    fn hand_made_inconsistent_file_is_scrubbed_without_panicking() {
        let Some(scrub) = shared_scrub("snapviewer_memory.pickle") else {
            return;
        };
        let d = &scrub.devices[0];
        for c in [0, d.len() / 2, d.len()] {
            assert!(!d.segments_at(c).is_empty());
        }
        // Its trace allocates far more than it ever reserves: said, not
        // shown as if it were so.
        assert!(d.points.iter().any(|p| p.allocated > p.reserved));
        assert!(d.misfits > 0);
    }

    #[test]
    fn every_real_trace_fits_its_reconstruction() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            eprintln!("skipping: {} not found", dir.display());
            return;
        };
        let mut checked = 0;
        for path in entries.flatten().map(|e| e.path()) {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(name) = name.filter(|n| n.ends_with(".pickle") || n.ends_with(".pkl")) else {
                continue;
            };
            // The hand-made one is inconsistent on purpose (above).
            if name == "snapviewer_memory.pickle" {
                continue;
            }
            let scrub = Scrub::new(Arc::new(read_snapshot_file(&path).expect("loads")));
            for d in &scrub.devices {
                assert_eq!(d.misfits, 0, "{name} GPU {}", d.device);
            }
            checked += 1;
        }
        assert!(checked >= WITH_TRACES.len(), "{checked} files");
    }

    #[test]
    fn state_only_snapshots_have_one_cursor_showing_the_layout() {
        let Some(snapshot) = shared("muduard_dump_snapshot_a.pickle") else {
            return;
        };
        let scrub = Scrub::new(Arc::new(snapshot.clone()));
        assert_eq!(scrub.devices.len(), 1);
        let d = &scrub.devices[0];
        assert_eq!(d.len(), 0);
        assert_eq!(
            comparable(&d.segments_at(0)),
            comparable(&final_layout(&snapshot, d.device))
        );
    }

    #[test]
    fn most_segments_is_the_most_any_cursor_lists_and_no_fewer() {
        // Traces without expandable segments: the bound is reached.
        for (name, snapshot) in shared_with_traces() {
            let scrub = Scrub::new(Arc::new(snapshot));
            for d in &scrub.devices {
                let most = (0..=d.len())
                    .map(|c| d.segments_at(c).len())
                    .max()
                    .unwrap_or(0);
                assert_eq!(d.most_segments(), most, "{name} GPU {}", d.device);
            }
        }
    }
}
