//! What-if replay: the allocation sequence of a snapshot's trace (sizes,
//! streams, order — not addresses) run through fresh allocator models under
//! other settings and/or a device capacity, side by side with the original.
//!
//! The trace is cut into the calls the program made (an allocation, a free,
//! an `empty_cache()`, a synchronisation that only completed stream work),
//! with the same reading of the trace as `replay::verify`. A *replica* — the
//! model with the recorded settings on a device that refuses exactly where
//! the recording shows refusals — classifies the ambiguous spots (a release
//! before an allocation: retry path or `empty_cache()`?) and gives the
//! original column its figures. Every what-if model then gets the same calls.
//!
//! Each run's *decision* per call is compared with the original's; the first
//! call where they differ is the divergence (docs/whatif.md defines it).
//! Pure: no I/O.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::replay::{
    Event, ReplayStart, StartLayout, Unreplayable, VerifyReport, completions_before_search,
    config_from_settings, devices_with_calls, empty_cache_len, first_impossible, free_is_deferred,
    is_obtain, is_release, next_call, obtains, reads_as_retry_path, releases, saturating_sum,
    start_layout,
};
use super::types::{Frame, Snapshot};
use crate::alloc::{
    AllocatorConfig, BlockState, CachingAllocator, DeviceError, DeviceMemory, MemInfo, TraceAction,
    fragmentation, human_bytes,
};

/// The device total an unlimited run reports to `cudaMemGetInfo` (1 TiB):
/// it sizes expandable segments' address reservations (9/8 of the total).
pub const UNLIMITED_TOTAL: u64 = 1 << 40;

/// Stream handle that holds back frees whose completion the recording shows
/// later (as `verify` does): completed with `complete_pending_free`.
const DEFERRED_STREAM: u64 = u64::MAX;

/// The label of the column that replays the recorded settings under a
/// capacity (`--capacity` without `--alloc-conf`).
pub const RECORDED_LABEL: &str = "recorded settings";

/// One what-if setting: a `PYTORCH_CUDA_ALLOC_CONF` string and its parse.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIfSetting {
    /// The string as given (the column label).
    pub conf: String,
    pub config: AllocatorConfig,
}

/// How a program call went in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// An allocation served from a cached block.
    CachedBlock,
    /// An allocation that obtained device memory (cudaMalloc or page mapping).
    NewMemory,
    /// An allocation that ran out of memory.
    OutOfMemory,
    /// Not an allocation (a free, `empty_cache()`, a synchronisation).
    NoAllocation,
}

/// The decision a run made in one call; two runs diverge where these differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub outcome: Outcome,
    /// Whether the call returned memory to the device (segment_free/unmap).
    pub released: bool,
}

impl Decision {
    /// A call that allocated nothing (a free, `empty_cache()`, a sync).
    fn no_allocation(released: bool) -> Self {
        Decision {
            outcome: Outcome::NoAllocation,
            released,
        }
    }

    fn describe(self) -> String {
        let what = match self.outcome {
            Outcome::CachedBlock => "reused a cached block",
            Outcome::NewMemory => "obtained new device memory",
            Outcome::OutOfMemory => "ran out of memory",
            Outcome::NoAllocation => "",
        };
        match (what.is_empty(), self.released) {
            (true, true) => "released cached segments".to_string(),
            (true, false) => "released nothing".to_string(),
            (false, true) => format!("released cached segments, then {what}"),
            (false, false) => what.to_string(),
        }
    }
}

/// The first call where a run decided otherwise than the original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Index of the call's entry in the device's trace as stored (0-based,
    /// every entry counted, `snapshot` entries included).
    pub event_index: usize,
    /// The call, e.g. "alloc of 12.00 MiB on stream 0".
    pub call: String,
    pub original: Decision,
    pub whatif: Decision,
    /// One line: "original: …; what-if: …".
    pub summary: String,
}

/// Where a run first ran out of memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomPoint {
    /// Index in the device's trace as stored (see [`Divergence::event_index`]).
    pub event_index: usize,
    /// The request (bytes): the `alloc` entry's size, or an `oom` entry's
    /// rounded size.
    pub size: u64,
    pub stream: u64,
    /// The Python frames of the allocation (all frames if none is Python),
    /// innermost first as recorded.
    pub frames: Vec<Frame>,
    /// Whether `frames` are Python frames (false: none was recorded, the
    /// C++ frames are given instead).
    pub python_frames: bool,
    /// PyTorch's OutOfMemoryError text as the model renders it; `None` for
    /// the original (the recording keeps no device total).
    pub message: Option<String>,
    /// For the original: the device's free bytes the `oom` entry recorded.
    pub device_free: Option<u64>,
}

/// The figures of one run (the original or a what-if).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFigures {
    /// "original" or the `--alloc-conf` string ("" = PyTorch defaults).
    pub label: String,
    /// Settings string the run used (for the original: the recorded one).
    pub settings: String,
    pub expandable_segments: bool,
    /// Expandable segments of the start state the run starts from (0 for
    /// a trace from an empty allocator): every run starts from the state
    /// rebuilt for the trace's start, whatever its settings, as a trace
    /// that begins mid-run holds blocks allocated before it that it may
    /// free. A run with `expandable_segments` off keeps those segments;
    /// only the memory it obtains follows its setting.
    pub start_expandable_segments: usize,
    /// Bytes cudaMalloc may take; `None` = unlimited (or, for the original,
    /// whatever the recorded device allowed).
    pub capacity: Option<u64>,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    /// Peak of reserved − allocated (bytes), taken after each call.
    pub peak_unallocated: u64,
    /// `alloc::analysis` fragmentation (1 − largest free / free) at the
    /// moment of `peak_unallocated`.
    pub fragmentation_at_peak: f64,
    pub largest_free_at_peak: u64,
    pub final_reserved: u64,
    pub final_allocated: u64,
    /// Bytes the live allocations asked for at the end (before rounding):
    /// equal across runs that hold the same allocations, whatever the
    /// blocks they were carved into.
    pub final_requested: u64,
    pub final_fragmentation: f64,
    /// Segments as `memory_snapshot()` lists them (an expandable segment
    /// counts once per contiguous mapped range).
    pub peak_segments: usize,
    pub final_segments: usize,
    /// cudaMalloc calls (`segment_alloc`) during the trace.
    pub segment_allocs: usize,
    pub segment_frees: usize,
    /// Expandable segments: page mappings (`segment_map`) and unmappings.
    pub segment_maps: usize,
    pub segment_unmaps: usize,
    pub ooms: usize,
    pub first_oom: Option<OomPoint>,
    /// Allocations the original got that this run could not (out of
    /// memory): skipped, and their frees ignored.
    pub allocations_skipped: usize,
    /// Trace index of the first allocation skipped (see
    /// `allocations_skipped`): from there every figure leaves the skipped
    /// allocations out, so the figures are partial. `None`: complete.
    pub figures_partial_after: Option<usize>,
    /// Allocations that ran out of memory in the original but succeeded
    /// here: kept to the end (the program never freed what it never got).
    pub allocations_kept: usize,
    /// `None` for the original column.
    pub divergence: Option<Divergence>,
    /// Calls the model refused with something else than an OOM (first one).
    pub model_errors: usize,
    pub first_model_error: Option<String>,
}

/// A what-if run that was not replayed: the trace's start state holds
/// more than the run may reserve, so the program could not have reached
/// the trace under that limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotReplayed {
    /// The `--alloc-conf` string, or [`RECORDED_LABEL`].
    pub label: String,
    /// Settings string the run would have used.
    pub settings: String,
    /// Bytes the run may reserve: the capacity, or the share of it a
    /// `per_process_memory_fraction` allows.
    pub limit: u64,
    /// One line: the start's reserved bytes against the limit.
    pub reason: String,
}

/// The what-if replay of one device's trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceWhatIf {
    pub device: u32,
    pub start: ReplayStart,
    /// Bytes reserved at the trace's start (0 for a full history):
    /// segments plus the mapped pages of expandable segments.
    pub start_reserved: u64,
    /// Entries in the device's trace as stored.
    pub trace_entries: usize,
    /// Program calls replayed (allocations, OOMs, frees, empty_cache, syncs).
    pub calls: usize,
    /// Where the replica with the recorded settings decided otherwise than
    /// the recording (then the original column is approximate).
    pub replica_divergence: Option<Divergence>,
    /// Allocations (trace indices) with segment_frees right before them that
    /// were read as malloc's retry path (the device was full) rather than an
    /// `empty_cache()` call: the trace cannot tell the two apart there.
    pub releases_read_as_retry: Vec<usize>,
    /// The original first, then one run per setting in order, less those
    /// in `not_replayed`.
    pub runs: Vec<RunFigures>,
    /// Settings whose run was not replayed: the start does not fit.
    pub not_replayed: Vec<NotReplayed>,
    /// Whose figures the original column (`runs[0]`) holds: the
    /// recording's, or only the model's re-run of the trace.
    pub original_figures: OriginalFigures,
}

/// Whose figures a device's original column holds. The column is always
/// the model's re-run of the trace with the recorded settings; only where
/// `replay::verify` replays that trace exactly (every event, the final
/// layout) are its figures the recording's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginalFigures {
    /// Not checked against `replay::verify`: [`whatif`] alone does not
    /// verify ([`WhatIfReport::check_original`] does).
    Unchecked,
    /// The model replays the trace exactly: the figures are the
    /// recording's.
    Recording,
    /// The model does not replay it exactly (a divergence, a failed
    /// invariant, a final state that differs): the figures are the
    /// model's, not the recording's.
    Model,
}

/// The what-if replay of a whole snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIfReport {
    /// The snapshot's `allocator_settings` string (`None`: not recorded,
    /// PyTorch's defaults assumed).
    pub recorded_settings: Option<String>,
    pub capacity: Option<u64>,
    /// Where `capacity` came from when no `--capacity` was given: the
    /// recording's out-of-memory ([`recorded_capacity`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_from_recording: Option<RecordedCapacity>,
    pub devices: Vec<DeviceWhatIf>,
    pub unreplayable: Vec<Unreplayable>,
}

impl WhatIfReport {
    /// Says of each device whose figures its original column holds, from
    /// `verify` of the same snapshot: the recording's where verify replayed
    /// the device's trace exactly, with no invariant finding on it, and the
    /// replica never decided otherwise than the recording; else the
    /// model's.
    pub fn check_original(&mut self, verify: &VerifyReport) {
        for d in &mut self.devices {
            let exact = d.replica_divergence.is_none()
                && !verify.findings.iter().any(|f| f.device == d.device)
                && verify
                    .replays
                    .iter()
                    .any(|r| r.device == d.device && r.full_match());
            d.original_figures = if exact {
                OriginalFigures::Recording
            } else {
                OriginalFigures::Model
            };
        }
    }
}

/// Why a what-if replay cannot run at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhatIfError {
    #[error(
        "the snapshot has no allocation trace to replay (record one with \
         torch.cuda.memory._record_memory_history(), or the probe's --record-history)"
    )]
    NoTrace,
    #[error("'{0}' sets per_process_memory_fraction, which needs a device size: give --capacity")]
    FractionWithoutCapacity(String),
}

/// Replays every device's trace of `snapshot` under each of `settings`
/// (and, for a capacity, under the recorded settings when `settings` is
/// empty) with cudaMalloc limited to `capacity` bytes (`None` = unlimited).
pub fn whatif(
    snapshot: &Snapshot,
    settings: &[WhatIfSetting],
    capacity: Option<u64>,
) -> Result<WhatIfReport, WhatIfError> {
    let own = config_from_settings(snapshot.allocator_settings.as_ref());
    let mut settings = settings.to_vec();
    if settings.is_empty() {
        settings.push(WhatIfSetting {
            conf: RECORDED_LABEL.to_string(),
            config: own.clone(),
        });
    }
    if capacity.is_none()
        && let Some(s) = settings
            .iter()
            .find(|s| s.config.per_process_memory_fraction.is_some())
    {
        return Err(WhatIfError::FractionWithoutCapacity(s.conf.clone()));
    }
    let mut devices = Vec::new();
    let mut unreplayable = Vec::new();
    for (device, trace, events) in devices_with_calls(snapshot) {
        let raw_index: Vec<usize> = trace
            .iter()
            .enumerate()
            .filter(|(_, e)| !matches!(e.action, TraceAction::Snapshot | TraceAction::Annotate))
            .map(|(i, _)| i)
            .collect();
        if let Some((index, why)) = first_impossible(&events, 0..events.len()) {
            let raw = raw_index.get(index).copied().unwrap_or(index);
            unreplayable.push(Unreplayable {
                device,
                reason: format!("event #{raw} {}: {why}", events[index].describe()),
            });
            continue;
        }
        let layout = match start_layout(snapshot, device, &own) {
            Ok(l) => l,
            Err(reason) => {
                unreplayable.push(Unreplayable { device, reason });
                continue;
            }
        };
        let ctx = Context {
            events: &events,
            raw_index: &raw_index,
            trace,
        };
        devices.push(replay_device(
            &ctx, device, &layout, &own, &settings, capacity,
        ));
    }
    if devices.is_empty() && unreplayable.is_empty() {
        return Err(WhatIfError::NoTrace);
    }
    Ok(WhatIfReport {
        recorded_settings: snapshot.allocator_settings.as_ref().map(|s| s.conf.clone()),
        capacity,
        capacity_from_recording: None,
        devices,
        unreplayable,
    })
}

/// The capacity a recording shows its cudaMalloc had, read at an
/// out-of-memory: the bytes the process's allocator had reserved right
/// then (after the retry path's releases) plus the device's free bytes the
/// `oom` entry records. A what-if without `--capacity` of a file that ran
/// out of memory replays at it: unlimited, every setting would "fix" the
/// OOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecordedCapacity {
    /// reserved + device_free (bytes).
    pub bytes: u64,
    pub device: u32,
    /// The `oom` entry's index in the device's trace (event `index + 1`
    /// as the viewer and the summary count).
    pub index: usize,
    /// Events in the device's trace.
    pub events: usize,
    /// Bytes reserved at the OOM.
    pub reserved: u64,
    /// The device's free bytes at the OOM (recorded).
    pub device_free: u64,
}

/// The tightest capacity the out-of-memory entries of `snapshot` show:
/// of every `oom` of every device, the least reserved + device free.
/// Reserved at an entry is the device's final reserved bytes with the
/// segment events after it undone. `None` when no trace records an OOM,
/// or the figures do not add up (a trace the final state contradicts).
/// Cost: one pass over the traces, backwards.
pub fn recorded_capacity(snapshot: &Snapshot) -> Option<RecordedCapacity> {
    let mut best: Option<RecordedCapacity> = None;
    for (device, trace) in snapshot.device_traces.iter().enumerate() {
        let Ok(device) = u32::try_from(device) else {
            break;
        };
        if !trace.iter().any(|e| e.action == TraceAction::Oom) {
            continue;
        }
        let mut reserved: Option<u64> = Some(
            snapshot
                .segments
                .iter()
                .filter(|s| s.device == device)
                .fold(0u64, |sum, s| sum.saturating_add(s.total_size)),
        );
        // This device's tightest, kept only if its walk adds up.
        let mut tightest: Option<RecordedCapacity> = None;
        for (index, e) in trace.iter().enumerate().rev() {
            let Some(now) = reserved else {
                break;
            };
            match e.action {
                TraceAction::Oom => {
                    if let Some(bytes) = now.checked_add(e.addr)
                        && tightest.is_none_or(|b| bytes < b.bytes)
                    {
                        tightest = Some(RecordedCapacity {
                            bytes,
                            device,
                            index,
                            events: trace.len(),
                            reserved: now,
                            device_free: e.addr,
                        });
                    }
                }
                TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                    reserved = now.checked_sub(e.size);
                }
                TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                    reserved = now.checked_add(e.size);
                }
                _ => {}
            }
        }
        if reserved.is_some()
            && let Some(t) = tightest
            && best.is_none_or(|b| t.bytes < b.bytes)
        {
            best = Some(t);
        }
    }
    best
}

// --------------------------------------------------------------------- device

/// What the device does in the current call.
#[derive(Debug, Clone, Default)]
struct CallScript {
    /// The original's segment_alloc / segment_map of this call, (addr, size):
    /// handed out again when free, so that a run deciding like the original
    /// gets the original's addresses (best fit breaks ties by address).
    hints: Vec<(TraceAction, u64, u64)>,
    /// Replica only: refuse until this many releases happened in the call.
    releases_before_obtain: usize,
    /// Replica only: the original ran out of memory in this call.
    oom: bool,
    /// Replica only: the free bytes the `oom` entry recorded.
    free_at_oom: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// Refuse where the recording shows refusals (the replica).
    Recorded,
    /// Refuse beyond this many bytes (`None` = never).
    Capacity(Option<u64>),
}

/// The device of a what-if run: capacity accounting, and addresses that
/// follow the recording where they can.
#[derive(Debug, Clone)]
struct WhatIfDevice {
    limit: Limit,
    /// Physical bytes held (segments + mapped pages).
    used: u64,
    /// Live segments and reservations, base → size.
    live: BTreeMap<u64, u64>,
    /// Next address for requests no hint serves (above every recorded one).
    fresh: u64,
    script: CallScript,
    used_hints: Vec<bool>,
    released_in_call: usize,
}

const ALIGN: u64 = 2 << 20;

impl WhatIfDevice {
    fn new(limit: Limit, fresh: u64) -> Self {
        WhatIfDevice {
            limit,
            used: 0,
            live: BTreeMap::new(),
            fresh,
            script: CallScript::default(),
            used_hints: Vec::new(),
            released_in_call: 0,
        }
    }

    fn begin_call(&mut self, script: CallScript) {
        self.used_hints = vec![false; script.hints.len()];
        self.script = script;
        self.released_in_call = 0;
    }

    fn overlaps(&self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        self.live
            .range(..end)
            .next_back()
            .is_some_and(|(&b, &s)| b.saturating_add(s) > addr)
    }

    fn refuses(&self, size: u64) -> bool {
        match self.limit {
            Limit::Recorded => {
                self.script.oom || self.released_in_call < self.script.releases_before_obtain
            }
            Limit::Capacity(None) => false,
            Limit::Capacity(Some(c)) => self.used.saturating_add(size) > c,
        }
    }

    fn place(&mut self, action: TraceAction, size: u64, match_size: bool) -> u64 {
        let hint = self
            .script
            .hints
            .iter()
            .enumerate()
            .find(|&(i, &(a, addr, s))| {
                !self.used_hints[i]
                    && a == action
                    && (!match_size || s == size)
                    && !self.overlaps(addr, size)
            })
            .map(|(i, &(_, addr, _))| (i, addr));
        let addr = match hint {
            Some((i, addr)) => {
                self.used_hints[i] = true;
                addr
            }
            None => {
                let addr = self.fresh;
                self.fresh = self
                    .fresh
                    .saturating_add(size.div_ceil(ALIGN).saturating_mul(ALIGN));
                addr
            }
        };
        self.live.insert(addr, size);
        addr
    }

    fn total(&self) -> u64 {
        match self.limit {
            Limit::Capacity(Some(c)) => c,
            _ => UNLIMITED_TOTAL,
        }
    }
}

impl DeviceMemory for WhatIfDevice {
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError> {
        if self.refuses(size) {
            return Err(DeviceError::OutOfMemory);
        }
        self.used = self.used.saturating_add(size);
        Ok(self.place(TraceAction::SegmentAlloc, size, true))
    }

    fn free(&mut self, ptr: u64, size: u64) {
        self.released_in_call += 1;
        if self.live.remove(&ptr).is_some() {
            self.used = self.used.saturating_sub(size);
        }
    }

    fn mem_get_info(&self) -> MemInfo {
        let total = self.total();
        let free = match self.limit {
            Limit::Recorded => self.script.free_at_oom,
            Limit::Capacity(_) => total.saturating_sub(self.used),
        };
        MemInfo { free, total }
    }

    fn reserve_address_range(&mut self, size: u64) -> Result<u64, DeviceError> {
        // A new expandable segment is mapped from its base first.
        Ok(self.place(TraceAction::SegmentMap, size, false))
    }

    fn release_address_range(&mut self, base: u64, _size: u64) {
        self.live.remove(&base);
    }

    fn map(&mut self, _addr: u64, size: u64) -> Result<(), DeviceError> {
        if self.refuses(size) {
            return Err(DeviceError::OutOfMemory);
        }
        self.used = self.used.saturating_add(size);
        Ok(())
    }

    fn unmap(&mut self, _addr: u64, size: u64) {
        self.released_in_call += 1;
        self.used = self.used.saturating_sub(size);
    }
}

// --------------------------------------------------------------------- runs

struct Context<'a> {
    /// The trace without snapshot/annotate entries.
    events: &'a [Event],
    /// `events[i]` is entry `raw_index[i]` of the stored trace.
    raw_index: &'a [usize],
    trace: &'a [super::types::TraceEntry],
}

/// One model run and how it maps the original's addresses to its own.
struct Run {
    model: CachingAllocator<WhatIfDevice>,
    /// Original address → this run's address, for live allocations.
    live: FxHashMap<u64, u64>,
    /// Original address → this run's address, for frees still pending.
    pending: FxHashMap<u64, u64>,
    pending_rev: FxHashMap<u64, u64>,
    figures: RunFigures,
    /// Mapped ranges of expandable segments (recounted when pages change).
    expandable_ranges: usize,
}

/// `alloc::analysis::fragmentation`'s figure and largest free block without
/// building the layout: the free (inactive) bytes are reserved − active.
fn quick_fragmentation<D: DeviceMemory>(model: &CachingAllocator<D>) -> (f64, u64) {
    let stats = model.stats();
    let free = u64::try_from(stats.reserved_bytes.all.current - stats.active_bytes.all.current)
        .unwrap_or(0);
    let largest = model.largest_free_block();
    if free == 0 {
        (0.0, largest)
    } else {
        (1.0 - largest as f64 / free as f64, largest)
    }
}

/// The frames worth reading first (and whether they are Python): the
/// user's own frames, or the Python frames, or the informative C++ frames
/// outside the allocator ([`super::sites::user_facing`]).
fn python_frames(frames: &[Frame]) -> (Vec<Frame>, bool) {
    let shown = super::sites::user_facing(frames);
    let python = shown.first().is_some_and(|f| super::sites::is_python(f));
    (shown.into_iter().cloned().collect(), python)
}

impl Run {
    fn new(
        label: String,
        config: &AllocatorConfig,
        limit: Limit,
        capacity: Option<u64>,
        device: u32,
        layout: &StartLayout,
        fresh: u64,
    ) -> Run {
        let mut dev = WhatIfDevice::new(limit, fresh);
        let mut live = FxHashMap::default();
        let mut pending = FxHashMap::default();
        let mut pending_rev = FxHashMap::default();
        // The live and pending blocks of a start segment (or mapped range)
        // at `address`, laid end to end; sums saturate on a damaged layout.
        let mut note_live_blocks = |address: u64, blocks: &[(u64, u64, BlockState)]| {
            let mut addr = address;
            for &(size, _, state) in blocks {
                match state {
                    BlockState::ActiveAllocated => {
                        live.insert(addr, addr);
                    }
                    BlockState::ActivePendingFree => {
                        pending.insert(addr, addr);
                        pending_rev.insert(addr, addr);
                    }
                    BlockState::Inactive => {}
                }
                addr = addr.saturating_add(size);
            }
        };
        for s in &layout.segments {
            let total = saturating_sum(s.blocks.iter().map(|b| b.0));
            dev.live.insert(s.address, total);
            dev.used = dev.used.saturating_add(total);
            note_live_blocks(s.address, &s.blocks);
        }
        for r in &layout.reservations {
            dev.live.insert(r.base, r.size);
            dev.used = dev.used.saturating_add(r.mapped());
            for s in &r.ranges {
                note_live_blocks(s.address, &s.blocks);
            }
        }
        let mut model = CachingAllocator::new(dev, device, config.clone());
        // The layout was adopted without error by the replay that built it.
        let adopt_error = layout.adopt_into(&mut model).err();
        let figures = RunFigures {
            label,
            settings: config.last_settings.clone(),
            expandable_segments: config.expandable_segments,
            start_expandable_segments: layout.reservations.len(),
            capacity,
            peak_reserved: 0,
            peak_allocated: 0,
            peak_unallocated: 0,
            fragmentation_at_peak: 0.0,
            largest_free_at_peak: 0,
            final_reserved: 0,
            final_allocated: 0,
            final_requested: 0,
            final_fragmentation: 0.0,
            peak_segments: 0,
            final_segments: 0,
            segment_allocs: 0,
            segment_frees: 0,
            segment_maps: 0,
            segment_unmaps: 0,
            ooms: 0,
            first_oom: None,
            allocations_skipped: 0,
            figures_partial_after: None,
            allocations_kept: 0,
            divergence: None,
            model_errors: usize::from(adopt_error.is_some()),
            first_model_error: adopt_error,
        };
        let mut run = Run {
            model,
            live,
            pending,
            pending_rev,
            figures,
            expandable_ranges: 0,
        };
        run.model.record_history(Some(usize::MAX));
        run.observe(true);
        run
    }

    /// Updates the figures after a call; `pages_changed` (pages of an
    /// expandable segment were mapped or unmapped) forces a recount of the
    /// expandable segments' mapped ranges.
    fn observe(&mut self, pages_changed: bool) {
        if pages_changed {
            self.expandable_ranges = self
                .model
                .layout()
                .iter()
                .filter(|s| s.is_expandable)
                .count();
        }
        let reserved = self.model.memory_reserved();
        let allocated = self.model.memory_allocated();
        // `segment` counts cudaMalloc'd segments only.
        let segments = usize::try_from(self.model.stats().segment.all.current).unwrap_or(0)
            + self.expandable_ranges;
        let f = &mut self.figures;
        f.peak_reserved = f.peak_reserved.max(reserved);
        f.peak_allocated = f.peak_allocated.max(allocated);
        f.peak_segments = f.peak_segments.max(segments);
        let gap = reserved.saturating_sub(allocated);
        if gap > f.peak_unallocated {
            let (fragmentation, largest) = quick_fragmentation(&self.model);
            f.peak_unallocated = gap;
            f.fragmentation_at_peak = fragmentation;
            f.largest_free_at_peak = largest;
        }
    }

    fn complete(&mut self, orig: u64) {
        if let Some(mine) = self.pending.remove(&orig) {
            self.pending_rev.remove(&mine);
            self.model.complete_pending_free(mine);
        }
    }

    fn complete_all(&mut self, part: &[Event]) {
        for e in part
            .iter()
            .filter(|e| e.action == TraceAction::FreeCompleted)
        {
            self.complete(e.addr);
        }
    }

    fn model_error(&mut self, e: String) {
        self.figures.model_errors += 1;
        if self.figures.first_model_error.is_none() {
            self.figures.first_model_error = Some(e);
        }
    }

    /// Runs `call` and returns the decision it made.
    fn call(&mut self, script: &CallScript, call: impl FnOnce(&mut Run) -> Outcome) -> Decision {
        self.model.device_mut().begin_call(script.clone());
        let outcome = call(self);
        let mut obtained = false;
        let mut released = false;
        let mut pages_changed = false;
        for e in self.model.trace() {
            match e.action {
                TraceAction::SegmentAlloc => self.figures.segment_allocs += 1,
                TraceAction::SegmentFree => self.figures.segment_frees += 1,
                TraceAction::SegmentMap => self.figures.segment_maps += 1,
                TraceAction::SegmentUnmap => self.figures.segment_unmaps += 1,
                _ => continue,
            }
            pages_changed |= matches!(
                e.action,
                TraceAction::SegmentMap | TraceAction::SegmentUnmap
            );
            match e.action {
                TraceAction::SegmentAlloc | TraceAction::SegmentMap => obtained = true,
                _ => released = true,
            }
        }
        // Start the next call with an empty trace (the model only records
        // so that its decisions can be read back).
        self.model.record_history(Some(usize::MAX));
        self.observe(pages_changed);
        let outcome = match outcome {
            Outcome::CachedBlock if obtained => Outcome::NewMemory,
            o => o,
        };
        Decision { outcome, released }
    }

    /// The program's allocation: `orig` is the original's address (`None`
    /// where the original ran out of memory).
    fn malloc(&mut self, size: u64, stream: u64, orig: Option<u64>, oom_at: &OomSite) -> Outcome {
        match self.model.malloc(size, stream) {
            Ok(mine) => {
                match orig {
                    Some(o) => {
                        self.live.insert(o, mine);
                    }
                    None => self.figures.allocations_kept += 1,
                }
                Outcome::CachedBlock
            }
            Err(e) => {
                let message = e.as_oom().map(|o| o.message());
                if !e.is_out_of_memory() {
                    self.model_error(e.to_string());
                    return Outcome::CachedBlock;
                }
                self.figures.ooms += 1;
                if orig.is_some() {
                    self.figures.allocations_skipped += 1;
                    self.figures
                        .figures_partial_after
                        .get_or_insert(oom_at.event_index);
                }
                if self.figures.first_oom.is_none() {
                    let recorded = self.model.device().limit == Limit::Recorded;
                    self.figures.first_oom = Some(OomPoint {
                        event_index: oom_at.event_index,
                        size,
                        stream,
                        frames: oom_at.frames.clone(),
                        python_frames: oom_at.python_frames,
                        message: if recorded {
                            None
                        } else {
                            Some(message.unwrap_or_else(|| e.to_string()))
                        },
                        device_free: recorded.then_some(oom_at.device_free),
                    });
                }
                Outcome::OutOfMemory
            }
        }
    }

    fn free(&mut self, orig: u64, deferred: bool) {
        let Some(mine) = self.live.remove(&orig) else {
            // This run never got the block (it ran out of memory).
            return;
        };
        if deferred && let Err(e) = self.model.record_stream(mine, DEFERRED_STREAM) {
            self.model_error(e.to_string());
        }
        if let Err(e) = self.model.free(mine) {
            self.model_error(e.to_string());
            return;
        }
        if deferred {
            if let Some(old) = self.pending_rev.insert(mine, orig) {
                self.pending.remove(&old);
            }
            self.pending.insert(orig, mine);
        }
    }

    fn finish(mut self) -> RunFigures {
        let (layout, broken) = self.model.layout_checked();
        if let Some(why) = broken {
            self.model_error(format!("the model's block layout is inconsistent: {why}"));
        }
        let f = &mut self.figures;
        f.final_reserved = self.model.memory_reserved();
        f.final_allocated = self.model.memory_allocated();
        f.final_requested =
            u64::try_from(self.model.stats().requested_bytes.all.current).unwrap_or(0);
        f.final_segments = layout.len();
        f.peak_segments = f.peak_segments.max(layout.len());
        f.final_fragmentation = fragmentation(&layout).fragmentation;
        self.figures
    }
}

struct OomSite {
    event_index: usize,
    frames: Vec<Frame>,
    python_frames: bool,
    device_free: u64,
}

/// The device script of a call whose recorded events are `part`.
fn script_of(part: &[Event], anchor: Option<&Event>) -> CallScript {
    let first_obtain = part.iter().position(is_obtain).unwrap_or(part.len());
    CallScript {
        hints: part
            .iter()
            .filter(|e| is_obtain(e))
            .map(|e| (e.action, e.addr, e.size))
            .collect(),
        releases_before_obtain: part[..first_obtain]
            .iter()
            .filter(|e| is_release(e))
            .count(),
        oom: anchor.is_some_and(|a| a.action == TraceAction::Oom),
        free_at_oom: anchor
            .filter(|a| a.action == TraceAction::Oom)
            .map_or(0, |a| a.addr),
    }
}

fn describe_call(e: &Event) -> String {
    let size = crate::alloc::format_size(e.size);
    match e.action {
        TraceAction::Alloc => format!("alloc of {size} on stream {}", e.stream),
        TraceAction::Oom => format!(
            "alloc of {size} on stream {} (OOM in the original)",
            e.stream
        ),
        TraceAction::FreeRequested => format!("free of {size} on stream {}", e.stream),
        _ => e.action.as_str().to_string(),
    }
}

/// Makes the same call in every run (the replica first); their decisions.
fn call_all(
    runs: &mut [Run],
    script: &CallScript,
    call: impl Fn(&mut Run) -> Outcome,
) -> Vec<Decision> {
    runs.iter_mut().map(|r| r.call(script, &call)).collect()
}

/// Compares each what-if run's decision with the original's (and the
/// replica's, which should agree with the recording).
fn compare(
    runs: &mut [Run],
    replica_divergence: &mut Option<Divergence>,
    decisions: &[Decision],
    original: Decision,
    event_index: usize,
    call: &str,
) {
    for (i, &d) in decisions.iter().enumerate() {
        if d == original {
            continue;
        }
        let div = Divergence {
            event_index,
            call: call.to_string(),
            original,
            whatif: d,
            summary: format!("original {}; what-if {}", original.describe(), d.describe()),
        };
        if i == 0 {
            if replica_divergence.is_none() {
                *replica_divergence = Some(div);
            }
        } else if runs[i].figures.divergence.is_none() {
            runs[i].figures.divergence = Some(div);
        }
    }
}

/// Bytes reserved at the trace's start: the start segments plus the
/// mapped ranges of its expandable segments (their unmapped address space
/// holds no memory).
fn start_reserved_bytes(layout: &StartLayout) -> u64 {
    let mapped_ranges = layout.reservations.iter().flat_map(|r| &r.ranges);
    saturating_sum(
        layout
            .segments
            .iter()
            .chain(mapped_ranges)
            .flat_map(|s| &s.blocks)
            .map(|b| b.0),
    )
}

/// The reason a run may not start from a state holding `start_reserved`
/// bytes: more than the capacity, or than the share of it the run's
/// `per_process_memory_fraction` allows (`allowed`, bytes). `None`: fits.
fn start_does_not_fit(
    setting: &WhatIfSetting,
    start_reserved: u64,
    capacity: Option<u64>,
    allowed: Option<u64>,
) -> Option<NotReplayed> {
    let capacity = capacity?;
    let fraction_limit = allowed.filter(|&a| a < capacity);
    let limit = fraction_limit.unwrap_or(capacity);
    if start_reserved <= limit {
        return None;
    }
    let start = human_bytes(start_reserved);
    let capacity_text = human_bytes(capacity);
    let over = match fraction_limit {
        Some(a) => format!(
            "more than the {} per_process_memory_fraction allows of --capacity {capacity_text}",
            human_bytes(a)
        ),
        None => format!("more than --capacity {capacity_text}"),
    };
    Some(NotReplayed {
        label: setting.conf.clone(),
        settings: setting.config.last_settings.clone(),
        limit,
        reason: format!(
            "the trace starts with {start} reserved, {over}: it cannot fit (the program \
             held that memory before the recording began)"
        ),
    })
}

/// The original's peak reserved bytes, from the start state and the
/// recorded segment events alone.
fn recorded_peak_reserved(events: &[Event], layout: &StartLayout) -> u64 {
    let mut reserved = start_reserved_bytes(layout);
    let mut peak = reserved;
    for e in events {
        match e.action {
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                reserved = reserved.saturating_add(e.size);
                peak = peak.max(reserved);
            }
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                reserved = reserved.saturating_sub(e.size);
            }
            _ => {}
        }
    }
    peak
}

fn replay_device(
    ctx: &Context<'_>,
    device: u32,
    layout: &StartLayout,
    own: &AllocatorConfig,
    settings: &[WhatIfSetting],
    capacity: Option<u64>,
) -> DeviceWhatIf {
    let events = ctx.events;
    // Fresh addresses start on a 1 TiB boundary above everything recorded.
    let top = events
        .iter()
        .filter(|e| e.action != TraceAction::Oom)
        .map(|e| e.addr.saturating_add(e.size))
        .chain(layout.segments.iter().map(|s| {
            s.address
                .saturating_add(saturating_sum(s.blocks.iter().map(|b| b.0)))
        }))
        .chain(
            layout
                .reservations
                .iter()
                .map(|r| r.base.saturating_add(r.size)),
        )
        .max()
        .unwrap_or(0);
    let fresh = (top / UNLIMITED_TOTAL + 1).saturating_mul(UNLIMITED_TOTAL);

    let mut runs = vec![Run::new(
        "original".to_string(),
        own,
        Limit::Recorded,
        None,
        device,
        layout,
        fresh,
    )];
    let start_reserved = start_reserved_bytes(layout);
    let mut not_replayed = Vec::new();
    for s in settings {
        let run = Run::new(
            s.conf.clone(),
            &s.config,
            Limit::Capacity(capacity),
            capacity,
            device,
            layout,
            fresh,
        );
        // A run whose start already holds more than it may reserve would
        // report figures above its capacity without an OOM: refused.
        let allowed = run.model.allowed_memory_maximum();
        match start_does_not_fit(s, start_reserved, capacity, allowed) {
            Some(refused) => not_replayed.push(refused),
            None => runs.push(run),
        }
    }
    let recorded_peak = recorded_peak_reserved(events, layout);
    let mut replica_divergence = None;
    let mut read_as_retry = Vec::new();
    let mut calls = 0usize;
    let raw = |i: usize| ctx.raw_index.get(i).copied().unwrap_or(i);

    // Events before `first_event` are the start state's (a call the ring
    // buffer cut).
    let mut k = layout.first_event;
    while k < events.len() {
        calls += 1;
        let Some(anchor) = next_call(events, k) else {
            // Trailing device events: an empty_cache (or a sync) at the end.
            let rest = &events[k..];
            let released = releases(rest);
            let script = script_of(rest, None);
            let decisions = call_all(&mut runs, &script, |r| {
                r.complete_all(rest);
                if released {
                    r.model.empty_cache();
                } else {
                    r.model.process_events();
                }
                Outcome::NoAllocation
            });
            let original = Decision::no_allocation(released);
            let call = if released {
                "empty_cache()"
            } else {
                "synchronize"
            };
            compare(
                &mut runs,
                &mut replica_divergence,
                &decisions,
                original,
                raw(k),
                call,
            );
            break;
        };
        let prefix = &events[k..anchor];
        let a = events[anchor];
        let is_malloc = matches!(a.action, TraceAction::Alloc | TraceAction::Oom);
        // The replica stands for the original: its state tells a retry
        // path from an empty_cache() call, as in `verify`.
        let retry_path = reads_as_retry_path(&runs[0].model, prefix, &a);
        // Releases then a new segment read the same as empty_cache() then
        // an allocation that needed memory. If the original held at least
        // reserved + that segment at some point of the trace, cudaMalloc
        // could not have refused it: the program called empty_cache().
        let first_obtain = prefix.iter().find(|e| is_obtain(e));
        let retry_path = retry_path
            && !(a.action == TraceAction::Alloc
                && first_obtain.is_some_and(|o| {
                    runs[0].model.memory_reserved().saturating_add(o.size) <= recorded_peak
                }));
        if retry_path && releases(prefix) && a.action == TraceAction::Alloc {
            read_as_retry.push(raw(anchor));
        }
        if releases(prefix) && !retry_path {
            // The program called empty_cache() before this call.
            let cut = empty_cache_len(prefix);
            let part = &events[k..k + cut];
            let script = script_of(part, None);
            let decisions = call_all(&mut runs, &script, |r| {
                r.complete_all(part);
                r.model.empty_cache();
                Outcome::NoAllocation
            });
            let first_release = part.iter().position(is_release).unwrap_or(0);
            compare(
                &mut runs,
                &mut replica_divergence,
                &decisions,
                Decision::no_allocation(true),
                raw(k + first_release),
                "empty_cache()",
            );
            k += cut;
            continue;
        }
        if !is_malloc && !prefix.is_empty() {
            // Completions with nothing released: finished stream work.
            let script = CallScript::default();
            let decisions = call_all(&mut runs, &script, |r| {
                r.complete_all(prefix);
                r.model.process_events();
                Outcome::NoAllocation
            });
            compare(
                &mut runs,
                &mut replica_divergence,
                &decisions,
                Decision::no_allocation(false),
                raw(k),
                "synchronize",
            );
            k = anchor;
            continue;
        }
        // Completions the original saw at the start of malloc (before its
        // cache search) versus in its retry path's synchronisation: the
        // replica's probe tells them apart, as in `verify`.
        let went_to_device = retry_path || a.action == TraceAction::Oom;
        let replica = &runs[0];
        let leading =
            completions_before_search(&replica.model, prefix, &a, went_to_device, |m, e| {
                if let Some(&mine) = replica.pending.get(&e.addr) {
                    m.complete_pending_free(mine);
                }
            });
        let script = script_of(prefix, Some(&a));
        let idx = raw(anchor);
        let call = describe_call(&a);
        let (decisions, original, next_k): (Vec<Decision>, Decision, usize) = if is_malloc {
            let (frames, python) = ctx
                .trace
                .get(idx)
                .map(|e| python_frames(&e.frames))
                .unwrap_or_default();
            let site = OomSite {
                event_index: idx,
                frames,
                python_frames: python,
                device_free: a.addr,
            };
            let orig = (a.action == TraceAction::Alloc).then_some(a.addr);
            let decisions = call_all(&mut runs, &script, |r| {
                r.complete_all(&prefix[..leading]);
                r.malloc(a.size, a.stream, orig, &site)
            });
            // Work the original saw finish in its retry path had finished by
            // now in every run (the runs are independent: order is free).
            for r in &mut runs {
                r.complete_all(&prefix[leading..]);
            }
            let outcome = if a.action == TraceAction::Oom {
                Outcome::OutOfMemory
            } else if obtains(prefix) {
                Outcome::NewMemory
            } else {
                Outcome::CachedBlock
            };
            let original = Decision {
                outcome,
                released: releases(prefix),
            };
            (decisions, original, anchor + 1)
        } else {
            let deferred = free_is_deferred(events, anchor);
            let decisions = call_all(&mut runs, &script, |r| {
                r.free(a.addr, deferred);
                Outcome::NoAllocation
            });
            let original = Decision::no_allocation(false);
            (decisions, original, anchor + 1 + usize::from(!deferred))
        };
        compare(
            &mut runs,
            &mut replica_divergence,
            &decisions,
            original,
            idx,
            &call,
        );
        k = next_k;
    }

    DeviceWhatIf {
        device,
        start: layout.start.clone(),
        start_reserved,
        trace_entries: ctx.trace.len(),
        calls,
        replica_divergence,
        releases_read_as_retry: read_as_retry,
        runs: runs.into_iter().map(Run::finish).collect(),
        not_replayed,
        original_figures: OriginalFigures::Unchecked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const FRESH: u64 = 1 << 41;

    fn script(hints: &[(u64, u64)], releases: usize, oom: bool) -> CallScript {
        CallScript {
            hints: hints
                .iter()
                .map(|&(a, s)| (TraceAction::SegmentAlloc, a, s))
                .collect(),
            releases_before_obtain: releases,
            oom,
            free_at_oom: 0,
        }
    }

    #[test]
    fn a_hint_of_the_same_size_gives_the_recorded_address_once() {
        let mut d = WhatIfDevice::new(Limit::Capacity(None), FRESH);
        d.begin_call(script(&[(0x1000_0000, 20 * MIB)], 0, false));
        assert_eq!(d.malloc(2 * MIB), Ok(FRESH), "another size: fresh");
        assert_eq!(d.malloc(20 * MIB), Ok(0x1000_0000));
        assert_eq!(d.malloc(20 * MIB), Ok(FRESH + 2 * MIB), "hint used up");
    }

    #[test]
    fn a_hint_whose_range_is_taken_is_not_used() {
        let mut d = WhatIfDevice::new(Limit::Capacity(None), FRESH);
        d.begin_call(script(&[(0x1000_0000, 40 * MIB)], 0, false));
        assert_eq!(d.malloc(40 * MIB), Ok(0x1000_0000));
        // The original freed that segment and took a new one inside it,
        // but this run still holds the first.
        d.begin_call(script(&[(0x1000_0000 + 20 * MIB, 40 * MIB)], 0, false));
        assert_eq!(d.malloc(40 * MIB), Ok(FRESH));
    }

    #[test]
    fn capacity_refuses_beyond_it_and_frees_make_room() {
        let mut d = WhatIfDevice::new(Limit::Capacity(Some(100 * MIB)), FRESH);
        let a = d.malloc(60 * MIB).expect("fits");
        assert_eq!(d.malloc(60 * MIB), Err(DeviceError::OutOfMemory));
        assert_eq!(d.mem_get_info().free, 40 * MIB);
        d.free(a, 60 * MIB);
        assert!(d.malloc(60 * MIB).is_ok());
        assert_eq!(d.mem_get_info().total, 100 * MIB);
    }

    #[test]
    fn the_replica_device_refuses_until_the_recorded_releases_happened() {
        let mut d = WhatIfDevice::new(Limit::Recorded, FRESH);
        d.begin_call(script(&[(0x1000_0000, 20 * MIB)], 2, false));
        assert_eq!(d.malloc(20 * MIB), Err(DeviceError::OutOfMemory));
        d.free(0x2000_0000, 2 * MIB);
        assert_eq!(d.malloc(20 * MIB), Err(DeviceError::OutOfMemory));
        d.free(0x3000_0000, 2 * MIB);
        assert_eq!(d.malloc(20 * MIB), Ok(0x1000_0000));
        d.begin_call(script(&[], 0, true));
        assert_eq!(
            d.malloc(2 * MIB),
            Err(DeviceError::OutOfMemory),
            "an oom call"
        );
        assert_eq!(d.mem_get_info().total, UNLIMITED_TOTAL);
    }

    #[test]
    fn quick_fragmentation_equals_the_layout_analysis() {
        use crate::alloc::InMemoryDevice;
        for conf in ["", "expandable_segments:True"] {
            let config = AllocatorConfig::parse(conf).expect("valid");
            let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 34), 0, config);
            let mut live = Vec::new();
            let mut state = 0x2545_f491_u64;
            for step in 0..3000u64 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if state.is_multiple_of(2) || live.is_empty() {
                    let size = 1 + (state >> 8) % (48 * MIB);
                    let Ok(p) = m.malloc(size, (state >> 3) % 2) else {
                        continue;
                    };
                    if state.is_multiple_of(7) {
                        m.record_stream(p, 5).expect("live");
                    }
                    live.push(p);
                } else {
                    let p = live.swap_remove((state as usize >> 3) % live.len());
                    m.free(p).expect("live");
                }
                if step % 97 == 0 {
                    m.complete_stream_work(5);
                }
                let full = fragmentation(&m.layout());
                let (f, largest) = quick_fragmentation(&m);
                assert_eq!(largest, full.largest_free_block, "{conf:?} step {step}");
                assert!(
                    (f - full.fragmentation).abs() < 1e-12,
                    "{conf:?} step {step}"
                );
            }
        }
    }

    #[test]
    fn decisions_describe_what_happened() {
        let d = Decision {
            outcome: Outcome::NewMemory,
            released: true,
        };
        assert_eq!(
            d.describe(),
            "released cached segments, then obtained new device memory"
        );
        let e = Decision {
            outcome: Outcome::NoAllocation,
            released: false,
        };
        assert_eq!(e.describe(), "released nothing");
    }
}
