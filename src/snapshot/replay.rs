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

use serde::Serialize;
use std::rc::Rc;

use super::invariants::{BackwardsTime, Finding, check_invariants, check_trace_times};
use super::start_state::{ASSUMED_DEVICE_MEMORY, replay_from_best_start};
pub use super::start_state::{StartLayout, StartReservation, StartSegment, start_layout};
use super::types::{AllocatorSettings, Snapshot, UnknownActions};
use crate::alloc::{
    AllocatorConfig, BlockInfo, BlockState, CachingAllocator, DeviceError, DeviceMemory, MemInfo,
    TraceAction, sizing::MAX_DEVICE_BYTES,
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
        /// Expandable segments mapped before the trace, whose address
        /// reservations were rebuilt.
        expandable_reservations: usize,
        /// Each inference beyond the rounded request, in words.
        inferences: Vec<String>,
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
    pub(crate) expected_event: Option<Event>,
    #[serde(skip)]
    pub(crate) model_event: Option<Event>,
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

/// A device whose final state no replay checked (only its segments'
/// invariants), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unverified {
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
    /// The trace's entries by action (`alloc`, `snapshot`, …), over every
    /// device, in the actions' order.
    pub trace_actions: Vec<(TraceAction, usize)>,
    pub findings: Vec<Finding>,
    pub replays: Vec<DeviceReplay>,
    pub unreplayable: Vec<Unreplayable>,
    /// Devices with segments that were neither replayed nor found
    /// unreplayable: their trace has no allocator call, or there is none.
    pub unverified: Vec<Unverified>,
    /// Trace entries the reader left out (actions it does not know): the
    /// replays ran without them.
    pub skipped_trace_entries: usize,
    pub skipped_trace_actions: UnknownActions,
    /// Where a trace goes back in time (not a mismatch: the replay follows
    /// the file's order).
    pub backwards_times: Vec<BackwardsTime>,
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
    // The snapshot's settings dict has no entry for the oversize slack; the
    // settings string it records does.
    if let Ok(parsed) = AllocatorConfig::parse(&s.conf) {
        config.max_non_split_rounding_size = parsed.max_non_split_rounding_size;
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
    let checked = |device: u32| {
        replays.iter().any(|r: &DeviceReplay| r.device == device)
            || unreplayable.iter().any(|u| u.device == device)
    };
    let mut unverified: Vec<Unverified> = Vec::new();
    for segment in &snapshot.segments {
        let device = segment.device;
        if checked(device) || unverified.iter().any(|u| u.device == device) {
            continue;
        }
        let has_entries = usize::try_from(device)
            .ok()
            .and_then(|d| snapshot.device_traces.get(d))
            .is_some_and(|trace| !trace.is_empty());
        let reason = if has_entries {
            "its trace has no allocator call"
        } else {
            "no trace"
        };
        unverified.push(Unverified {
            device,
            reason: reason.to_string(),
        });
    }
    unverified.sort_by_key(|u| u.device);
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
        trace_actions: count_actions(snapshot.device_traces.iter().flatten().map(|e| e.action)),
        findings,
        replays,
        unreplayable,
        unverified,
        skipped_trace_entries: snapshot.skipped_trace_entries,
        skipped_trace_actions: snapshot.skipped_trace_actions.clone(),
        backwards_times: check_trace_times(snapshot),
    }
}

/// Σ of input-derived byte counts, pinned at `u64::MAX` rather than
/// wrapping (only a damaged file gets there).
pub(crate) fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

pub(crate) fn replayable_events(trace: &[super::types::TraceEntry]) -> Vec<Event> {
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
    script: Rc<[Event]>,
    /// The recorded event the current top-level call starts at.
    pos: usize,
    /// Segments and pages the model returned during the current call.
    released: Vec<u64>,
    /// The last device request of the current call the recording does not
    /// show (what, bytes): the model reports it as an OOM, which it is not.
    refused: Option<(&'static str, u64)>,
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
            _ => {
                self.refused = Some(("cudaMalloc", size));
                Err(DeviceError::OutOfMemory)
            }
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
            _ => {
                self.refused = Some(("a map", size));
                Err(DeviceError::OutOfMemory)
            }
        }
    }

    fn unmap(&mut self, addr: u64, _size: u64) {
        self.released.push(addr);
    }
}

// --------------------------------------------------------------------- the replay

/// `events` into `out` (cleared first), each run of completions and of
/// releases in address order.
fn normalise_into(events: &[Event], out: &mut Vec<Event>) {
    // PyTorch completes pending frees in hash-map order and frees cached
    // segments in pool order; compare runs of the same action as sets.
    out.clear();
    out.extend_from_slice(events);
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
}

fn replay_device(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
) -> Result<DeviceReplay, String> {
    replay_from_best_start(snapshot, device, events, config).map(|(r, _, _)| r)
}

/// A replay of the start-state search: compared with the file's final
/// layout at once when it explains every event, else only if it is the
/// one kept (most candidates diverge early, and the comparison of a model
/// stopped there with the final layout writes out hundreds of
/// differences).
pub(crate) struct SearchReplay {
    pub(crate) report: DeviceReplay,
    /// The model at the divergence, while the comparison is still to make.
    unfinished: Option<Box<CachingAllocator<ScriptedDevice>>>,
}

impl SearchReplay {
    /// Bytes of the free block the model served its diverging allocation
    /// from (the block it allocated and any remainder split off after it),
    /// as the model stood right after that call. `None` when the model's
    /// side of the divergence is no allocation.
    pub(crate) fn free_block_taken(&self) -> Option<u64> {
        let got = self
            .report
            .divergence
            .as_ref()?
            .model_event
            .filter(|e| e.action == TraceAction::Alloc)?;
        self.unfinished
            .as_ref()?
            .allocation_with_free_after(got.addr)
    }

    /// The complete report, compared with the final layout.
    pub(crate) fn finish(self, snapshot: &Snapshot, device: u32) -> DeviceReplay {
        let mut report = self.report;
        if let Some(model) = self.unfinished {
            finish_report(snapshot, device, &model, &mut report);
        }
        report
    }
}

/// Replays `events` once from the start state `layout`. The report's
/// divergence and [`DeviceReplay::full_match`] are final at once (a replay
/// that diverged is no full match whatever the comparison finds); the rest
/// after [`SearchReplay::finish`].
pub(crate) fn replay_for_search(
    snapshot: &Snapshot,
    device: u32,
    script: &Rc<[Event]>,
    config: &AllocatorConfig,
    layout: &StartLayout,
) -> Result<SearchReplay, String> {
    let (mut report, model) = replay_model(device, script, config, layout)?;
    if report.divergence.is_none() {
        finish_report(snapshot, device, &model, &mut report);
        return Ok(SearchReplay {
            report,
            unfinished: None,
        });
    }
    Ok(SearchReplay {
        report,
        unfinished: Some(Box::new(model)),
    })
}

/// The replay itself: the report without the comparison with the final
/// layout, and the model as the replay left it.
fn replay_model(
    device: u32,
    script: &Rc<[Event]>,
    config: &AllocatorConfig,
    layout: &StartLayout,
) -> Result<(DeviceReplay, CachingAllocator<ScriptedDevice>), String> {
    let events: &[Event] = script;
    let device_impl = ScriptedDevice {
        script: Rc::clone(script),
        pos: 0,
        released: Vec::new(),
        refused: None,
        total: ASSUMED_DEVICE_MEMORY,
    };
    let mut model = CachingAllocator::new(device_impl, device, config.clone());
    model.record_history(Some(usize::MAX));
    // Each event the model replays adds about one trace entry. Splits add
    // blocks: room for as many again as the start has (what the first
    // doubling of the vector would reach), so the replay rarely copies them.
    let start_blocks = layout.block_count();
    model.reserve(
        start_blocks.saturating_add(start_blocks.min(events.len())),
        events.len(),
    );
    layout.adopt_into(&mut model)?;
    let mut scratch = StepScratch::default();
    let replay_start = layout.start.clone();

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
            run_step(&mut model, events, &mut k, &mut report, &mut scratch, |m| {
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
            run_step(&mut model, events, &mut k, &mut report, &mut scratch, |m| {
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
            run_step(&mut model, events, &mut k, &mut report, &mut scratch, |m| {
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
                run_step(&mut model, events, &mut k, &mut report, &mut scratch, |m| {
                    returned = Some(m.malloc(a.size, a.stream).map_err(|e| e.to_string())?);
                    Ok(())
                });
                if returned == Some(a.addr) {
                    report.addresses_matched += 1;
                }
            }
            TraceAction::Oom => {
                run_step(
                    &mut model,
                    events,
                    &mut k,
                    &mut report,
                    &mut scratch,
                    |m| match m.malloc(a.size, a.stream) {
                        Err(e) if e.as_oom().is_some() => Ok(()),
                        Err(e) => Err(e.to_string()),
                        Ok(p) => Err(format!("allocation succeeded at {p:#x}")),
                    },
                );
            }
            _ => {
                let deferred = free_is_deferred(events, anchor);
                run_step(&mut model, events, &mut k, &mut report, &mut scratch, |m| {
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

    Ok((report, model))
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

/// Buffers [`run_step`] fills at every step, kept for the next one.
#[derive(Default)]
struct StepScratch {
    emitted: Vec<Event>,
    want: Vec<Event>,
    got: Vec<Event>,
}

/// Runs one program call on the model and compares the events it emits with
/// the recording from `*k`; advances `*k` past the matched events.
fn run_step(
    model: &mut CachingAllocator<ScriptedDevice>,
    events: &[Event],
    k: &mut usize,
    report: &mut DeviceReplay,
    scratch: &mut StepScratch,
    call: impl FnOnce(&mut CachingAllocator<ScriptedDevice>) -> Result<(), String>,
) {
    model.device_mut().pos = *k;
    model.device_mut().released.clear();
    model.device_mut().refused = None;
    let before = model.trace_len();
    let outcome = call(model);
    let StepScratch { emitted, want, got } = scratch;
    emitted.clear();
    emitted.extend(
        model
            .trace()
            .skip(before)
            .filter(|e| e.action != TraceAction::Snapshot)
            .map(|e| Event {
                action: e.action,
                addr: e.addr,
                size: e.size,
                stream: e.stream,
            }),
    );
    let end = (*k + emitted.len()).min(events.len());
    normalise_into(&events[*k..end], want);
    normalise_into(emitted, got);
    for (i, g) in got.iter().enumerate() {
        match want.get(i) {
            Some(w) if w.matches(g) => report.events_matched += 1,
            other => {
                report.divergence = Some(Divergence {
                    event_index: *k + i,
                    expected: other.map_or("end of trace".to_string(), Event::describe),
                    model: model_side(g, model.device().refused),
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

/// The model's side of a divergence at its event `got`. An OOM that
/// follows a device request the recording does not show is said as that
/// request: the replay's device only grants the recorded ones, so the
/// model did not run out of memory, it asked for another size.
fn model_side(got: &Event, refused: Option<(&'static str, u64)>) -> String {
    match refused {
        Some((what, bytes)) if got.action == TraceAction::Oom => format!(
            "{what} of {bytes} B, which the recording does not have here (so the model \
             reports {})",
            got.describe()
        ),
        _ => got.describe(),
    }
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
            "model has {} segment{}, snapshot {}",
            mine.len(),
            if mine.len() == 1 { "" } else { "s" },
            real.len()
        ));
    }
    for (m, r) in mine.iter().zip(real.iter()) {
        let head = (m.address, m.total_size, m.segment_type, m.is_expandable);
        let want = (r.address, r.total_size, r.segment_type, r.is_expandable);
        if head != want {
            diffs.push(format!(
                "segment at {:#x}: model {} bytes {}, snapshot {:#x} {} bytes {}",
                m.address,
                m.total_size,
                m.segment_type.as_str(),
                r.address,
                r.total_size,
                r.segment_type.as_str()
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
            diffs.push(blocks_differ(m.address, &mb, &rb));
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

/// A block as [`finish_report`] compares it: address, size, state and the
/// requested size of an active block.
type ComparedBlock = (u64, u64, BlockState, Option<u64>);

/// Where two segments' block lists first part, in words: the block each
/// side has there (or that it has none), and how many blocks each has.
fn blocks_differ(segment: u64, model: &[ComparedBlock], snapshot: &[ComparedBlock]) -> String {
    let first = model
        .iter()
        .zip(snapshot)
        .position(|(a, b)| a != b)
        .unwrap_or(model.len().min(snapshot.len()));
    let describe = |blocks: &[ComparedBlock]| match blocks.get(first) {
        Some(&(address, size, state, requested)) => {
            let requested = requested.map_or(String::new(), |r| format!(", requested {r} B"));
            format!("{address:#x} {size} B {}{requested}", state.as_str())
        }
        None => "no block".to_string(),
    };
    format!(
        "segment at {segment:#x}: blocks differ from block {first}: model {}, snapshot {} \
         ({} and {} blocks)",
        describe(model),
        describe(snapshot),
        model.len(),
        snapshot.len()
    )
}

/// How many of `actions` each action is, in [`TraceAction`]'s order.
fn count_actions(actions: impl Iterator<Item = TraceAction>) -> Vec<(TraceAction, usize)> {
    // A handful of distinct actions: a short list costs less than a map.
    let mut counts: Vec<(TraceAction, usize)> = Vec::new();
    for a in actions {
        match counts.iter_mut().find(|(b, _)| *b == a) {
            Some((_, n)) => *n += 1,
            None => counts.push((a, 1)),
        }
    }
    counts.sort_unstable();
    counts
}
