//! Replays a snapshot's recorded trace through the allocator model and
//! compares, event by event, what the model does with what PyTorch did.
//!
//! The device side is scripted from the trace itself: cudaMalloc returns the
//! address of the recorded `segment_alloc`, and fails when the recording shows
//! that PyTorch had to release cached segments (or gave up with an OOM)
//! first. Everything else — best fit, splitting, merging, which segments a
//! release frees, the stats — is the model's own decision, so every event
//! the model emits is a check.
//!
//! Traces that begin mid-run are replayed from a reconstructed start state:
//! the final layout with the trace undone (segments allocated during the
//! trace removed, segments freed during it restored, blocks allocated during
//! it freed, blocks freed during it made live again).

use std::collections::BTreeMap;

use rangemap::RangeSet;

use serde::Serialize;

use super::invariants::{Finding, check_invariants};
use super::types::{AllocatorSettings, Snapshot};
use crate::alloc::{
    AllocatorConfig, BlockInfo, BlockState, CachingAllocator, DeviceError, DeviceMemory, MemInfo,
    PoolKind, TraceAction, round_size,
    sizing::{MAX_DEVICE_BYTES, MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE},
};

/// A recorded event reduced to what the model reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    pub action: TraceAction,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
}

impl Event {
    fn matches(&self, other: &Event) -> bool {
        // An oom entry's address is the device's free memory at the time,
        // which a scripted device cannot know.
        let addr_ok = self.action == TraceAction::Oom || self.addr == other.addr;
        self.action == other.action
            && addr_ok
            && self.size == other.size
            && self.stream == other.stream
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "{}(addr={:#x}, size={}, stream={})",
            self.action.as_str(),
            self.addr,
            self.size,
            self.stream
        )
    }
}

/// How the replay of one device started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ReplayStart {
    /// The trace starts with an empty allocator (full history).
    Empty,
    /// The trace starts mid-run: the start state was rebuilt from the final
    /// layout. `guessed_block_sizes` blocks were live before the trace and
    /// freed in it, so their size was inferred from the request.
    Reconstructed {
        segments: usize,
        live_blocks: usize,
        guessed_block_sizes: usize,
        /// Inferred sizes corrected after a replay showed them wrong.
        corrected_block_sizes: usize,
    },
}

/// Where the model first did something other than PyTorch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Index into the replayed events (trace without `snapshot` entries).
    pub event_index: usize,
    pub expected: String,
    pub model: String,
    #[serde(skip)]
    expected_event: Option<Event>,
    #[serde(skip)]
    model_event: Option<Event>,
}

/// The replay of one device's trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceReplay {
    pub device: u32,
    pub start: ReplayStart,
    pub events_in_trace: usize,
    pub events_matched: usize,
    pub allocations_replayed: usize,
    pub addresses_matched: usize,
    pub segment_allocs: usize,
    pub ooms: usize,
    pub divergence: Option<Divergence>,
    /// Segments, block sizes, states and active requested sizes equal the
    /// snapshot's.
    pub final_layout_matches: bool,
    /// Also the stale requested sizes of inactive blocks (only knowable when
    /// the replay started from an empty allocator).
    pub stale_requested_sizes_match: Option<bool>,
    pub layout_differences: Vec<String>,
    pub reserved_model: u64,
    pub reserved_snapshot: u64,
    pub allocated_model: u64,
    pub allocated_snapshot: u64,
    /// Why the model's own consistency check failed at the end (None = passed).
    pub model_invariant_error: Option<String>,
}

impl DeviceReplay {
    pub fn full_match(&self) -> bool {
        self.divergence.is_none()
            && self.addresses_matched == self.allocations_replayed
            && self.final_layout_matches
            && self.stale_requested_sizes_match != Some(false)
            && self.reserved_model == self.reserved_snapshot
            && self.allocated_model == self.allocated_snapshot
            && self.model_invariant_error.is_none()
    }
}

/// A device that could not be replayed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreplayable {
    pub device: u32,
    pub reason: String,
}

/// The verification of a whole snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    pub segments: usize,
    pub blocks: usize,
    pub reserved: u64,
    pub allocated: u64,
    pub trace_entries: usize,
    pub findings: Vec<Finding>,
    pub replays: Vec<DeviceReplay>,
    pub unreplayable: Vec<Unreplayable>,
}

impl VerifyReport {
    /// Every invariant holds and every replayed trace matched in full.
    pub fn full_match(&self) -> bool {
        self.findings.is_empty()
            && self.unreplayable.is_empty()
            && self.replays.iter().all(DeviceReplay::full_match)
    }
}

/// The allocator configuration a snapshot recorded (defaults when absent).
pub fn config_from_settings(settings: Option<&AllocatorSettings>) -> AllocatorConfig {
    let mut config = AllocatorConfig::default();
    let Some(s) = settings else {
        return config;
    };
    config.max_split_size = u64::try_from(s.max_split_size).ok();
    config.garbage_collection_threshold = s.garbage_collection_threshold;
    config.expandable_segments = s.expandable_segments;
    config.release_lock_on_cudamalloc = s.release_lock_on_cudamalloc;
    for &(key_mib, divisions) in &s.roundup_power2_divisions {
        if key_mib.is_power_of_two() {
            let slot =
                (key_mib.trailing_zeros() as usize).min(config.roundup_power2_divisions.len() - 1);
            config.roundup_power2_divisions[slot] = divisions;
        }
    }
    config.last_settings = s.conf.clone();
    config
}

/// Checks the snapshot's invariants and replays every device's trace.
pub fn verify(snapshot: &Snapshot) -> VerifyReport {
    let findings = check_invariants(snapshot);
    let config = config_from_settings(snapshot.allocator_settings.as_ref());
    let mut replays = Vec::new();
    let mut unreplayable = Vec::new();
    for (device, _, events) in devices_with_calls(snapshot) {
        match replay_device(snapshot, device, &events, &config) {
            Ok(r) => replays.push(r),
            Err(reason) => unreplayable.push(Unreplayable { device, reason }),
        }
    }
    VerifyReport {
        segments: snapshot.segments.len(),
        blocks: snapshot.segments.iter().map(|s| s.blocks.len()).sum(),
        reserved: saturating_sum(snapshot.segments.iter().map(|s| s.total_size)),
        allocated: saturating_sum(
            snapshot
                .segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size),
        ),
        trace_entries: snapshot.device_traces.iter().map(Vec::len).sum(),
        findings,
        replays,
        unreplayable,
    }
}

/// Σ of input-derived byte counts, pinned at `u64::MAX` rather than
/// wrapping (only a damaged file gets there).
pub(crate) fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

fn replayable_events(trace: &[super::types::TraceEntry]) -> Vec<Event> {
    trace
        .iter()
        .filter(|e| !matches!(e.action, TraceAction::Snapshot | TraceAction::Annotate))
        .map(|e| Event {
            action: e.action,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
        })
        .collect()
}

/// Each device whose trace holds an allocator call: its index, its trace as
/// stored and the events to replay. A trace without a call is what the
/// "state" recording mode leaves behind (one ring-buffer slot): nothing to
/// replay.
pub(crate) fn devices_with_calls(
    snapshot: &Snapshot,
) -> impl Iterator<Item = (u32, &[super::types::TraceEntry], Vec<Event>)> {
    snapshot
        .device_traces
        .iter()
        .enumerate()
        .filter_map(|(device, trace)| {
            let events = replayable_events(trace);
            let has_calls = events
                .iter()
                .any(|e| !matches!(e.action, TraceAction::FreeCompleted));
            has_calls.then_some((device as u32, trace.as_slice(), events))
        })
}

// --------------------------------------------------------------------- reading calls
//
// How the trace is cut into the calls the program made; shared with the
// what-if replay (`super::whatif`), which must read the trace the same way.

/// The device returned memory (`segment_free` / `segment_unmap`).
pub(crate) fn is_release(e: &Event) -> bool {
    matches!(
        e.action,
        TraceAction::SegmentFree | TraceAction::SegmentUnmap
    )
}

/// The device handed out memory (`segment_alloc` / `segment_map`).
pub(crate) fn is_obtain(e: &Event) -> bool {
    matches!(
        e.action,
        TraceAction::SegmentAlloc | TraceAction::SegmentMap
    )
}

/// Whether `part` returned memory to the device.
pub(crate) fn releases(part: &[Event]) -> bool {
    part.iter().any(is_release)
}

/// Whether `part` obtained memory from the device.
pub(crate) fn obtains(part: &[Event]) -> bool {
    part.iter().any(is_obtain)
}

/// The index of the next call the program made from `k` on: an allocation
/// (or its OOM) or a free; `None` when only device events are left.
pub(crate) fn next_call(events: &[Event], k: usize) -> Option<usize> {
    (k..events.len()).find(|&j| {
        matches!(
            events[j].action,
            TraceAction::Alloc | TraceAction::Oom | TraceAction::FreeRequested
        )
    })
}

/// How many events of `prefix` (the events before a call) an
/// `empty_cache()` before that call accounts for: up to its last release.
pub(crate) fn empty_cache_len(prefix: &[Event]) -> usize {
    prefix.iter().rposition(is_release).map_or(0, |p| p + 1)
}

/// Whether the free at `events[anchor]` was deferred: its completion does
/// not follow right after it (the block had uses on other streams).
pub(crate) fn free_is_deferred(events: &[Event], anchor: usize) -> bool {
    let addr = events[anchor].addr;
    events
        .get(anchor + 1)
        .is_none_or(|n| !(n.action == TraceAction::FreeCompleted && n.addr == addr))
}

/// Whether releases before the allocation `call` come from malloc's retry
/// path: only if the cache of `model` (standing for the original) could not
/// serve it. Otherwise the program called empty_cache() first.
pub(crate) fn reads_as_retry_path<D: DeviceMemory>(
    model: &CachingAllocator<D>,
    prefix: &[Event],
    call: &Event,
) -> bool {
    matches!(call.action, TraceAction::Alloc | TraceAction::Oom)
        && (obtains(prefix) || call.action == TraceAction::Oom)
        && !model.would_reuse_cached_block(call.size, call.stream)
}

/// How many of the completions at the start of `prefix` came from malloc's
/// own event processing (before its cache search) rather than from the
/// retry path's synchronisation (`went_to_device`), where the pool was not
/// searched again, so they could not serve the request. A probe on a copy of
/// `model` tells the two apart: if completing them first would let the
/// cache serve `call`, PyTorch cannot have completed them first.
/// `complete` marks one recorded `free_completed` done on the probe.
pub(crate) fn completions_before_search<D: DeviceMemory + Clone>(
    model: &CachingAllocator<D>,
    prefix: &[Event],
    call: &Event,
    went_to_device: bool,
    complete: impl Fn(&mut CachingAllocator<D>, &Event),
) -> usize {
    let leading = prefix
        .iter()
        .take_while(|e| e.action == TraceAction::FreeCompleted)
        .count();
    if leading == 0 || !went_to_device {
        return leading;
    }
    let mut probe = model.clone();
    for e in &prefix[..leading] {
        complete(&mut probe, e);
    }
    probe.process_events();
    if probe.would_reuse_cached_block(call.size, call.stream) {
        0
    } else {
        leading
    }
}

// --------------------------------------------------------------------- scripted device

/// A device whose answers come from the recorded trace.
#[derive(Debug, Clone)]
struct ScriptedDevice {
    script: std::rc::Rc<[Event]>,
    /// The recorded event the current top-level call starts at.
    pos: usize,
    /// Segments and pages the model returned during the current call.
    released: Vec<u64>,
    total: u64,
}

impl ScriptedDevice {
    /// Finds the next recorded `want` event from `pos`, and whether releases
    /// the recording shows before it are still outstanding.
    fn next_device_event(&self, want: TraceAction) -> Option<(usize, bool)> {
        let mut outstanding_release = false;
        for (j, e) in self.script.iter().enumerate().skip(self.pos) {
            match e.action {
                TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                    if !self.released.contains(&e.addr) {
                        outstanding_release = true;
                    }
                }
                a if a == want => return Some((j, outstanding_release)),
                TraceAction::FreeCompleted
                | TraceAction::SegmentMap
                | TraceAction::SegmentAlloc => {}
                // The call's events end at its anchor.
                _ => return None,
            }
        }
        None
    }
}

impl DeviceMemory for ScriptedDevice {
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError> {
        match self.next_device_event(TraceAction::SegmentAlloc) {
            Some((j, false)) if self.script[j].size == size => {
                self.pos = j + 1;
                Ok(self.script[j].addr)
            }
            _ => Err(DeviceError::OutOfMemory),
        }
    }

    fn free(&mut self, ptr: u64, _size: u64) {
        self.released.push(ptr);
    }

    fn mem_get_info(&self) -> MemInfo {
        MemInfo {
            free: 0,
            total: self.total,
        }
    }

    fn reserve_address_range(&mut self, _size: u64) -> Result<u64, DeviceError> {
        // A new expandable segment is mapped from its base first.
        self.script
            .iter()
            .skip(self.pos)
            .find(|e| e.action == TraceAction::SegmentMap)
            .map(|e| e.addr)
            .ok_or(DeviceError::OutOfMemory)
    }

    fn release_address_range(&mut self, _base: u64, _size: u64) {}

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        match self.next_device_event(TraceAction::SegmentMap) {
            Some((j, false)) if self.script[j].addr == addr && self.script[j].size == size => {
                self.pos = j + 1;
                Ok(())
            }
            _ => Err(DeviceError::OutOfMemory),
        }
    }

    fn unmap(&mut self, addr: u64, _size: u64) {
        self.released.push(addr);
    }
}

// --------------------------------------------------------------------- start state

#[derive(Debug, Clone, Copy)]
struct LiveAtStart {
    size: Option<u64>,
    requested: u64,
    state: BlockState,
}

#[derive(Debug, Clone, Copy)]
struct SegmentAtStart {
    size: u64,
    stream: u64,
    kind: PoolKind,
}

struct StartState {
    segments: BTreeMap<u64, SegmentAtStart>,
    live: BTreeMap<u64, LiveAtStart>,
    /// Byte ranges of expandable segments mapped at the start. Kept as
    /// ranges, not pages, so that a recorded size costs nothing to apply.
    expandable_mapped: RangeSet<u64>,
}

/// `[addr, addr + size)`, clamped at the top of the address space (an
/// overflowing event is reported by the replay itself).
fn byte_range(addr: u64, size: u64) -> std::ops::Range<u64> {
    addr..addr.saturating_add(size)
}

/// Adds or removes `range` (an empty range changes nothing).
fn mark_mapped(set: &mut RangeSet<u64>, range: std::ops::Range<u64>, mapped: bool) {
    if range.is_empty() {
        return;
    }
    if mapped {
        set.insert(range);
    } else {
        set.remove(range);
    }
}

fn undo_trace(snapshot: &Snapshot, device: u32, events: &[Event]) -> StartState {
    let mut segments: BTreeMap<u64, SegmentAtStart> = BTreeMap::new();
    let mut live: BTreeMap<u64, LiveAtStart> = BTreeMap::new();
    let mut expandable_mapped = RangeSet::new();
    for s in snapshot.segments.iter().filter(|s| s.device == device) {
        if s.is_expandable {
            mark_mapped(
                &mut expandable_mapped,
                byte_range(s.address, s.total_size),
                true,
            );
        } else {
            segments.insert(
                s.address,
                SegmentAtStart {
                    size: s.total_size,
                    stream: s.stream,
                    kind: s.segment_type,
                },
            );
        }
        for b in s.blocks.iter().filter(|b| b.state.is_active()) {
            live.insert(
                b.address,
                LiveAtStart {
                    size: Some(b.size),
                    requested: b.requested_size,
                    state: b.state,
                },
            );
        }
    }
    for e in events.iter().rev() {
        match e.action {
            TraceAction::Alloc => {
                live.remove(&e.addr);
            }
            TraceAction::FreeRequested => {
                live.entry(e.addr)
                    .or_insert(LiveAtStart {
                        size: None,
                        requested: e.size,
                        state: BlockState::ActiveAllocated,
                    })
                    .state = BlockState::ActiveAllocated;
            }
            TraceAction::FreeCompleted => {
                // Completed in the trace: pending (or allocated, if its
                // free_requested is earlier in the trace) at the start.
                live.entry(e.addr).or_insert(LiveAtStart {
                    size: None,
                    requested: e.size,
                    state: BlockState::ActivePendingFree,
                });
            }
            TraceAction::SegmentAlloc => {
                segments.remove(&e.addr);
            }
            TraceAction::SegmentMap => {
                mark_mapped(&mut expandable_mapped, byte_range(e.addr, e.size), false);
            }
            TraceAction::SegmentUnmap => {
                mark_mapped(&mut expandable_mapped, byte_range(e.addr, e.size), true);
            }
            TraceAction::SegmentFree => {
                segments.insert(
                    e.addr,
                    SegmentAtStart {
                        size: e.size,
                        stream: e.stream,
                        kind: if e.size == SMALL_BUFFER {
                            PoolKind::Small
                        } else {
                            PoolKind::Large
                        },
                    },
                );
            }
            _ => {}
        }
    }
    StartState {
        segments,
        live,
        expandable_mapped,
    }
}

fn starts_empty(start: &StartState) -> bool {
    start.segments.is_empty() && start.live.is_empty() && start.expandable_mapped.is_empty()
}

type AdoptedBlocks = Vec<(u64, u64, BlockState)>;

/// One segment of a rebuilt start state, ready for
/// [`CachingAllocator::adopt_segment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartSegment {
    pub address: u64,
    pub stream: u64,
    pub kind: PoolKind,
    /// `(size, requested_size, state)` in address order.
    pub blocks: AdoptedBlocks,
}

/// The allocator state at the first event of a device's trace: empty for a
/// full history, else rebuilt from the final layout with the trace undone.
/// Shared by `verify` and the what-if replay (`super::whatif`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartLayout {
    pub start: ReplayStart,
    pub segments: Vec<StartSegment>,
    /// Blocks whose size was inferred from a request: (address, size).
    guessed: Vec<(u64, u64)>,
}

impl StartLayout {
    /// Adopts the start segments into a fresh `model` and checks the result.
    pub fn adopt_into<D: DeviceMemory>(
        &self,
        model: &mut CachingAllocator<D>,
    ) -> Result<(), String> {
        if self.segments.is_empty() {
            return Ok(());
        }
        for s in &self.segments {
            model.adopt_segment(s.address, s.stream, s.kind, &s.blocks);
        }
        model
            .check_invariants()
            .map_err(|e| format!("reconstructed start state is inconsistent: {e}"))
    }
}

fn start_layout_from(
    start: &StartState,
    config: &AllocatorConfig,
    known: &BTreeMap<u64, u64>,
) -> Result<StartLayout, String> {
    if !start.expandable_mapped.is_empty() {
        return Err(
            "the trace starts mid-run with expandable segments already mapped; their address \
             reservations cannot be rebuilt from a snapshot"
                .to_string(),
        );
    }
    if starts_empty(start) {
        return Ok(StartLayout {
            start: ReplayStart::Empty,
            segments: Vec::new(),
            guessed: Vec::new(),
        });
    }
    let mut guessed_all = Vec::new();
    let mut segments = Vec::new();
    for (&address, seg) in &start.segments {
        let (blocks, guessed) = start_blocks(address, seg, &start.live, config, known)?;
        guessed_all.extend(guessed);
        segments.push(StartSegment {
            address,
            stream: seg.stream,
            kind: seg.kind,
            blocks,
        });
    }
    let in_segments = start
        .live
        .keys()
        .filter(|&&a| {
            start
                .segments
                .range(..=a)
                .next_back()
                .is_some_and(|(&s, seg)| a < s.saturating_add(seg.size))
        })
        .count();
    if in_segments != start.live.len() {
        return Err(format!(
            "{} blocks live at the start of the trace lie outside every segment",
            start.live.len() - in_segments
        ));
    }
    Ok(StartLayout {
        start: ReplayStart::Reconstructed {
            segments: start.segments.len(),
            live_blocks: start.live.len(),
            guessed_block_sizes: guessed_all.len() + known.len(),
            corrected_block_sizes: known.len(),
        },
        segments,
        guessed: guessed_all,
    })
}

/// The start state of `device`'s trace under the recorded settings `config`,
/// with inferred block sizes corrected exactly as [`verify`] corrects them
/// (by replaying the trace against the recording).
pub fn start_layout(
    snapshot: &Snapshot,
    device: u32,
    config: &AllocatorConfig,
) -> Result<StartLayout, String> {
    let events = replayable_events(
        snapshot
            .device_traces
            .get(device as usize)
            .map_or(&[][..], Vec::as_slice),
    );
    let start = undo_trace(snapshot, device, &events);
    let first = start_layout_from(&start, config, &BTreeMap::new())?;
    if first.guessed.is_empty() {
        // Every size is known: nothing for a replay to correct.
        return Ok(first);
    }
    let (_, known) = replay_device_with_corrections(snapshot, device, &events, config, &start)?;
    start_layout_from(&start, config, &known)
}

/// Lays out one start segment's blocks; returns them and the (address, size)
/// of each block whose size had to be inferred. `known` holds sizes learnt
/// from earlier attempts.
fn start_blocks(
    address: u64,
    seg: &SegmentAtStart,
    live: &BTreeMap<u64, LiveAtStart>,
    config: &AllocatorConfig,
    known: &BTreeMap<u64, u64>,
) -> Result<(AdoptedBlocks, Vec<(u64, u64)>), String> {
    let end = address.checked_add(seg.size).ok_or_else(|| {
        format!(
            "segment at {address:#x} of {} bytes runs past the end of the address space",
            seg.size
        )
    })?;
    let inside: Vec<(u64, LiveAtStart)> = live.range(address..end).map(|(&a, &l)| (a, l)).collect();
    let mut blocks = Vec::new();
    let mut guessed = Vec::new();
    let mut cursor = address;
    for (i, &(addr, l)) in inside.iter().enumerate() {
        if addr < cursor {
            return Err(format!("live blocks overlap at {addr:#x}"));
        }
        if addr > cursor {
            blocks.push((addr - cursor, 0, BlockState::Inactive));
        }
        let next = inside.get(i + 1).map_or(end, |n| n.0);
        let size = match (l.size, known.get(&addr)) {
            (Some(s), _) => s,
            (None, Some(&s)) => s,
            (None, None) => {
                let rounded = round_size(l.requested, config).min(next - addr);
                let gap = next - addr - rounded;
                // The remainder was too small to split off: the block took it.
                let unsplit = match seg.kind {
                    PoolKind::Small => gap < MIN_BLOCK_SIZE,
                    PoolKind::Large => {
                        gap <= SMALL_SIZE || rounded >= config.max_split_size_bytes()
                    }
                };
                let size = if unsplit { next - addr } else { rounded };
                guessed.push((addr, size));
                size
            }
        };
        let block_end = addr
            .checked_add(size)
            .filter(|&block_end| block_end <= end)
            .ok_or_else(|| format!("block at {addr:#x} runs past its segment"))?;
        blocks.push((size, l.requested, l.state));
        cursor = block_end;
    }
    if cursor < end {
        blocks.push((end - cursor, 0, BlockState::Inactive));
    }
    Ok((blocks, guessed))
}

// --------------------------------------------------------------------- the replay

fn normalised(events: &[Event]) -> Vec<Event> {
    // PyTorch completes pending frees in hash-map order and frees cached
    // segments in pool order; compare runs of the same action as sets.
    let mut out = events.to_vec();
    let mut i = 0;
    while i < out.len() {
        let action = out[i].action;
        let mut j = i;
        while j < out.len() && out[j].action == action {
            j += 1;
        }
        if matches!(
            action,
            TraceAction::FreeCompleted | TraceAction::SegmentFree | TraceAction::SegmentUnmap
        ) {
            out[i..j].sort_by_key(|e| (e.addr, e.size));
        }
        i = j;
    }
    out
}

/// How many inferred block sizes a replay may correct before it reports.
const MAX_SIZE_CORRECTIONS: usize = 256;

fn replay_device(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
) -> Result<DeviceReplay, String> {
    let start = undo_trace(snapshot, device, events);
    replay_device_with_corrections(snapshot, device, events, config, &start).map(|(r, _)| r)
}

/// Replays from `start`, correcting inferred block sizes; returns the last
/// replay and the corrected sizes (address → bytes).
fn replay_device_with_corrections(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
    start: &StartState,
) -> Result<(DeviceReplay, BTreeMap<u64, u64>), String> {
    let mut known = BTreeMap::new();
    let (mut report, mut guessed) = replay_once(snapshot, device, events, config, start, &known)?;
    // Bounded by attempts, not by distinct addresses: a correction may
    // change a size learnt before and come back to it.
    for _ in 0..MAX_SIZE_CORRECTIONS {
        let Some((addr, size)) = correction(&report, &guessed, config) else {
            break;
        };
        if known.get(&addr) == Some(&size) {
            break;
        }
        let mut attempt = known.clone();
        attempt.insert(addr, size);
        // A correction that makes the start state impossible is dropped.
        let Ok(next) = replay_once(snapshot, device, events, config, start, &attempt) else {
            break;
        };
        known = attempt;
        (report, guessed) = next;
    }
    Ok((report, known))
}

/// A block live before the trace was freed in it, so its size was inferred
/// from its request. When PyTorch then placed an allocation where the model
/// had no free block to offer, the recorded address shows the block's real
/// end: a little further than guessed (it had taken a cached block whole, the
/// remainder too small to split), or before the guess ended.
fn correction(
    report: &DeviceReplay,
    guessed: &[(u64, u64)],
    config: &AllocatorConfig,
) -> Option<(u64, u64)> {
    let d = report.divergence.as_ref()?;
    let want = d.expected_event?;
    if want.action != TraceAction::Alloc {
        return None;
    }
    let &(addr, size) = guessed
        .iter()
        .filter(|&&(a, _)| a <= want.addr)
        .max_by_key(|&&(a, _)| a)?;
    if addr == want.addr {
        // Reused in place after its free: it was at least as big as the new
        // request (the model found the freed space too small).
        let needed = round_size(want.size, config);
        return (needed > size).then_some((addr, needed));
    }
    let end = addr.checked_add(size)?;
    if want.addr < end {
        // The allocation starts inside the guessed block: it was smaller.
        return Some((addr, want.addr - addr));
    }
    let allowed = if size >= config.max_split_size_bytes() {
        config.max_non_split_rounding_size
    } else {
        SMALL_SIZE
    };
    (want.addr - end <= allowed && want.addr > end).then_some((addr, want.addr - addr))
}

fn replay_once(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
    start: &StartState,
    known: &BTreeMap<u64, u64>,
) -> Result<(DeviceReplay, Vec<(u64, u64)>), String> {
    let layout = start_layout_from(start, config, known)?;
    let device_impl = ScriptedDevice {
        script: events.into(),
        pos: 0,
        released: Vec::new(),
        total: 1 << 40,
    };
    let mut model = CachingAllocator::new(device_impl, device, config.clone());
    model.record_history(Some(usize::MAX));
    layout.adopt_into(&mut model)?;
    let guessed_all = layout.guessed;
    let replay_start = layout.start;

    let mut report = DeviceReplay {
        device,
        start: replay_start,
        events_in_trace: events.len(),
        events_matched: 0,
        allocations_replayed: 0,
        addresses_matched: 0,
        segment_allocs: events
            .iter()
            .filter(|e| e.action == TraceAction::SegmentAlloc)
            .count(),
        ooms: events
            .iter()
            .filter(|e| e.action == TraceAction::Oom)
            .count(),
        divergence: None,
        final_layout_matches: false,
        stale_requested_sizes_match: None,
        layout_differences: Vec::new(),
        reserved_model: 0,
        reserved_snapshot: 0,
        allocated_model: 0,
        allocated_snapshot: 0,
        model_invariant_error: None,
    };

    let mut k = 0;
    while k < events.len() {
        let step_start = k;
        // The next call the program made: an allocation (or its OOM) or a free.
        let call_end = next_call(events, k).map_or(events.len(), |anchor| anchor + 1);
        if let Some((index, why)) = first_impossible(events, k..call_end) {
            report.divergence = Some(Divergence {
                event_index: index,
                expected: events[index].describe(),
                model: why,
                expected_event: Some(events[index]),
                model_event: None,
            });
            break;
        }
        let Some(anchor) = next_call(events, k) else {
            // Trailing device events: an empty_cache at the end.
            let rest = &events[k..];
            let released = releases(rest);
            run_step(&mut model, events, &mut k, &mut report, |m| {
                complete_recorded(m, rest);
                if released {
                    m.empty_cache();
                } else {
                    m.process_events();
                }
                Ok(())
            });
            if report.divergence.is_none() && k < events.len() {
                report.divergence = Some(Divergence {
                    event_index: k,
                    expected: events[k].describe(),
                    model: "nothing".to_string(),
                    expected_event: Some(events[k]),
                    model_event: None,
                });
            }
            break;
        };
        let prefix = &events[k..anchor];
        let a = events[anchor];
        let is_malloc = matches!(a.action, TraceAction::Alloc | TraceAction::Oom);
        let retry_path = reads_as_retry_path(&model, prefix, &a);
        if releases(prefix) && !retry_path {
            // The program called empty_cache() before this call.
            let cut = empty_cache_len(prefix);
            let part = &events[k..k + cut];
            run_step(&mut model, events, &mut k, &mut report, |m| {
                complete_recorded(m, part);
                m.empty_cache();
                Ok(())
            });
            if report.divergence.is_some() || stalled(events, step_start, k, &mut report) {
                break;
            }
            continue;
        }
        if !is_malloc && !prefix.is_empty() {
            // Completions with nothing released: the allocator noticed
            // finished stream work (a sync that found nothing to release, or
            // a free whose request lies before a truncated trace).
            run_step(&mut model, events, &mut k, &mut report, |m| {
                complete_recorded(m, prefix);
                m.process_events();
                Ok(())
            });
            if report.divergence.is_some() || stalled(events, step_start, k, &mut report) {
                break;
            }
            continue;
        }
        // Completions before the first device event come from malloc's own
        // event processing, unless the malloc went down the retry path and
        // release_cached_blocks' sync completed them.
        let went_to_device = retry_path || a.action == TraceAction::Oom;
        let leading = completions_before_search(&model, prefix, &a, went_to_device, |m, e| {
            m.complete_pending_free(e.addr);
        });
        complete_recorded(&mut model, &prefix[..leading]);
        let mut returned = None;
        match a.action {
            TraceAction::Alloc => {
                report.allocations_replayed += 1;
                run_step(&mut model, events, &mut k, &mut report, |m| {
                    returned = Some(m.malloc(a.size, a.stream).map_err(|e| e.to_string())?);
                    Ok(())
                });
                if returned == Some(a.addr) {
                    report.addresses_matched += 1;
                }
            }
            TraceAction::Oom => {
                run_step(&mut model, events, &mut k, &mut report, |m| {
                    match m.malloc(a.size, a.stream) {
                        Err(e) if e.as_oom().is_some() => Ok(()),
                        Err(e) => Err(e.to_string()),
                        Ok(p) => Err(format!("allocation succeeded at {p:#x}")),
                    }
                });
            }
            _ => {
                let deferred = free_is_deferred(events, anchor);
                run_step(&mut model, events, &mut k, &mut report, |m| {
                    if deferred {
                        m.record_stream(a.addr, u64::MAX)
                            .map_err(|e| e.to_string())?;
                    }
                    m.free(a.addr).map_err(|e| e.to_string())
                });
            }
        }
        if report.divergence.is_some() || stalled(events, step_start, k, &mut report) {
            break;
        }
    }

    finish_report(snapshot, device, &model, &mut report);
    Ok((report, guessed_all))
}

/// Whether a step that started at `step_start` left `k` where it was: the
/// model did nothing with the recorded event at `k`, so the trace cannot go
/// on from there. Then the divergence names that event. Every step of the
/// replay either advances `k` or ends it.
fn stalled(events: &[Event], step_start: usize, k: usize, report: &mut DeviceReplay) -> bool {
    if k > step_start {
        return false;
    }
    let Some(&stuck) = events.get(k) else {
        return false;
    };
    report.divergence = Some(Divergence {
        event_index: k,
        expected: stuck.describe(),
        model: format!("nothing: {}", unapplied(&stuck)),
        expected_event: Some(stuck),
        model_event: None,
    });
    true
}

/// What the model lacked to apply the recorded event `e`.
fn unapplied(e: &Event) -> String {
    match e.action {
        TraceAction::FreeCompleted => format!("no pending free at {:#x} to complete", e.addr),
        TraceAction::SegmentFree => {
            format!("no cached segment at {:#x} to release", e.addr)
        }
        TraceAction::SegmentUnmap => format!(
            "no free mapped pages at {:#x} ({} bytes) to unmap",
            e.addr, e.size
        ),
        TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
            "no allocation that needed new device memory".to_string()
        }
        _ => "the call changed nothing".to_string(),
    }
}

/// The first event of `events[range]` that no device could have produced,
/// with why: a size beyond [`MAX_DEVICE_BYTES`] or a range past the end of
/// the address space. An `oom` entry's size is the request that failed, and
/// its address the device's free bytes, so only its free bytes are bounded.
pub(crate) fn first_impossible(
    events: &[Event],
    range: std::ops::Range<usize>,
) -> Option<(usize, String)> {
    let end = range.end.min(events.len());
    (range.start.min(end)..end).find_map(|i| {
        let e = &events[i];
        let why = if e.action == TraceAction::Oom {
            (e.addr > MAX_DEVICE_BYTES)
                .then(|| format!("{} bytes free is beyond any device", e.addr))
        } else if e.size > MAX_DEVICE_BYTES {
            Some(format!("{} bytes is beyond any device", e.size))
        } else if e.addr.checked_add(e.size).is_none() {
            Some(format!(
                "{:#x} + {} bytes runs past the end of the address space",
                e.addr, e.size
            ))
        } else {
            None
        };
        why.map(|why| (i, format!("nothing: {why}")))
    })
}

/// Marks the pending frees that the recording completed in `part` as done.
fn complete_recorded(model: &mut CachingAllocator<ScriptedDevice>, part: &[Event]) {
    for e in part
        .iter()
        .filter(|e| e.action == TraceAction::FreeCompleted)
    {
        model.complete_pending_free(e.addr);
    }
}

/// Runs one program call on the model and compares the events it emits with
/// the recording from `*k`; advances `*k` past the matched events.
fn run_step(
    model: &mut CachingAllocator<ScriptedDevice>,
    events: &[Event],
    k: &mut usize,
    report: &mut DeviceReplay,
    call: impl FnOnce(&mut CachingAllocator<ScriptedDevice>) -> Result<(), String>,
) {
    model.device_mut().pos = *k;
    model.device_mut().released.clear();
    let before = model.trace_len();
    let outcome = call(model);
    let emitted: Vec<Event> = model
        .trace()
        .skip(before)
        .filter(|e| e.action != TraceAction::Snapshot)
        .map(|e| Event {
            action: e.action,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
        })
        .collect();
    let end = (*k + emitted.len()).min(events.len());
    let want = normalised(&events[*k..end]);
    let got = normalised(&emitted);
    for (i, g) in got.iter().enumerate() {
        match want.get(i) {
            Some(w) if w.matches(g) => report.events_matched += 1,
            other => {
                report.divergence = Some(Divergence {
                    event_index: *k + i,
                    expected: other.map_or("end of trace".to_string(), Event::describe),
                    model: g.describe(),
                    expected_event: other.copied(),
                    model_event: Some(*g),
                });
                return;
            }
        }
    }
    if let Err(why) = outcome {
        report.divergence = Some(Divergence {
            event_index: end,
            expected: events
                .get(end)
                .map_or("end of trace".to_string(), Event::describe),
            model: why,
            expected_event: events.get(end).copied(),
            model_event: None,
        });
        return;
    }
    *k = end;
}

fn finish_report(
    snapshot: &Snapshot,
    device: u32,
    model: &CachingAllocator<ScriptedDevice>,
    report: &mut DeviceReplay,
) {
    let mine = model.layout();
    let mut real: Vec<&super::types::Segment> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .collect();
    real.sort_by_key(|s| s.address);
    report.reserved_model = model.memory_reserved();
    report.allocated_model = model.memory_allocated();
    report.reserved_snapshot = saturating_sum(real.iter().map(|s| s.total_size));
    report.allocated_snapshot = saturating_sum(
        real.iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size),
    );
    report.model_invariant_error = model.check_invariants().err();

    let mut diffs = Vec::new();
    let mut stale_ok = true;
    if mine.len() != real.len() {
        diffs.push(format!(
            "model has {} segments, snapshot {}",
            mine.len(),
            real.len()
        ));
    }
    for (m, r) in mine.iter().zip(real.iter()) {
        let head = (m.address, m.total_size, m.segment_type, m.is_expandable);
        let want = (r.address, r.total_size, r.segment_type, r.is_expandable);
        if head != want {
            diffs.push(format!(
                "segment at {:#x}: model {} bytes {:?}, snapshot {:#x} {} bytes {:?}",
                m.address, m.total_size, m.segment_type, r.address, r.total_size, r.segment_type
            ));
            continue;
        }
        // Sizes, states and the requested size of active blocks must agree;
        // a free block's stale requested size is compared separately.
        let key = |b: &BlockInfo| {
            (
                b.address,
                b.size,
                b.state,
                b.state.is_active().then_some(b.requested_size),
            )
        };
        let mb: Vec<_> = m.blocks.iter().map(key).collect();
        let rb: Vec<_> = r
            .blocks
            .iter()
            .map(|b| {
                key(&BlockInfo {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                })
            })
            .collect();
        if mb != rb {
            diffs.push(format!(
                "segment at {:#x}: blocks differ (model {mb:?}, snapshot {rb:?})",
                m.address
            ));
        } else if m
            .blocks
            .iter()
            .zip(&r.blocks)
            .any(|(x, y)| x.requested_size != y.requested_size)
        {
            stale_ok = false;
        }
    }
    report.final_layout_matches = diffs.is_empty();
    report.layout_differences = diffs;
    report.stale_requested_sizes_match = match report.start {
        ReplayStart::Empty if report.final_layout_matches => Some(stale_ok),
        _ => None,
    };
}
