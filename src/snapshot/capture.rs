//! Builds a [`Snapshot`] from the allocator model's own state and trace, as
//! `torch.cuda.memory._snapshot()` would from PyTorch's: the basis for
//! exporting vramtop sessions and for testing the replay on traces no shared
//! file contains (several streams, pending frees, expandable segments, OOMs).

use std::collections::HashMap;
use std::sync::Arc;

use super::types::{
    AllocatorSettings, Block, EntryTime, Frame, Frames, Segment, Snapshot, SnapshotFormat,
    TraceEntry,
};
use crate::alloc::{
    AllocError, AllocatorConfig, BlockState, CachingAllocator, ConfigError, DeviceMemory,
    InMemoryDevice, TraceAction, TraceEntry as ModelEntry,
};

fn no_frames() -> Frames {
    Arc::from(Vec::new())
}

/// A one-frame traceback naming what vramtop did, for exported sessions:
/// `filename` names the source (e.g. `<vramtop scenario fragmentation>`),
/// `line` the step number, `name` the step's label. Synthetic, and says
/// so: no Python ran.
pub fn synthetic_frames(filename: &str, line: u64, name: &str) -> Frames {
    Arc::from(vec![Frame {
        filename: Arc::from(filename),
        line,
        name: Arc::from(name),
    }])
}

/// The `allocator_settings` PyTorch would export for `config`.
pub fn settings_of(config: &AllocatorConfig) -> AllocatorSettings {
    AllocatorSettings {
        conf: config.last_settings.clone(),
        max_split_size: config.max_split_size_stat(),
        garbage_collection_threshold: config.garbage_collection_threshold,
        expandable_segments: config.expandable_segments,
        roundup_power2_divisions: config
            .roundup_power2_divisions
            .iter()
            .enumerate()
            .map(|(slot, &d)| (1u64 << slot, d))
            .collect(),
        release_lock_on_cudamalloc: config.release_lock_on_cudamalloc,
        pinned_num_register_threads: Some(1),
        pinned_use_cuda_host_register: Some(false),
        graph_capture_record_stream_reuse: None,
        file_order: Vec::new(),
    }
}

/// A snapshot of one model allocator: its layout, its whole trace (the
/// model's trace entries start at `skip_trace` — to imitate a ring buffer
/// that lost the beginning) and its settings.
pub fn snapshot_of<D: DeviceMemory>(model: &CachingAllocator<D>, skip_trace: usize) -> Snapshot {
    snapshot_with_frames(model, skip_trace, |_| no_frames())
}

/// Like [`snapshot_of`], with a traceback for every trace entry from
/// `frames_of` (called once per entry, oldest first). As in PyTorch, a live
/// block carries the traceback of the allocation that handed it out and a
/// segment the one of its `segment_alloc` (`segment_map` for expandable
/// segments); blocks and segments whose entry the trace no longer holds
/// have none.
pub fn snapshot_with_frames<D: DeviceMemory>(
    model: &CachingAllocator<D>,
    skip_trace: usize,
    mut frames_of: impl FnMut(&ModelEntry) -> Frames,
) -> Snapshot {
    let empty = no_frames();
    let trace: Vec<TraceEntry> = model
        .trace()
        .skip(skip_trace)
        .filter(|e| e.action != TraceAction::Snapshot)
        .map(|e| TraceEntry {
            action: e.action,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
            time: EntryTime::new(i64::try_from(e.time_us).ok()),
            frames: frames_of(e),
            extra: None,
        })
        .collect();
    // The latest entry of each kind per address (later entries overwrite).
    let mut alloc_frames: HashMap<u64, Frames> = HashMap::new();
    let mut segment_frames: HashMap<u64, Frames> = HashMap::new();
    for e in &trace {
        match e.action {
            TraceAction::Alloc => {
                alloc_frames.insert(e.addr, e.frames.clone());
            }
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                segment_frames
                    .entry(e.addr)
                    .or_insert_with(|| e.frames.clone());
            }
            TraceAction::SegmentFree => {
                segment_frames.remove(&e.addr);
            }
            _ => {}
        }
    }
    let segments = model
        .layout()
        .into_iter()
        .map(|s| Segment {
            device: s.device,
            address: s.address,
            total_size: s.total_size,
            allocated_size: Some(s.allocated_size),
            active_size: Some(s.active_size),
            requested_size: Some(s.requested_size),
            stream: s.stream,
            segment_type: s.segment_type,
            segment_pool_id: s.segment_pool_id,
            is_expandable: s.is_expandable,
            frames: segment_frames
                .get(&s.address)
                .cloned()
                .unwrap_or_else(|| empty.clone()),
            blocks: s
                .blocks
                .into_iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                    frames: match b.state {
                        BlockState::Inactive => empty.clone(),
                        _ => alloc_frames
                            .get(&b.address)
                            .cloned()
                            .unwrap_or_else(|| empty.clone()),
                    },
                })
                .collect(),
        })
        .collect();
    let mut device_traces = vec![Vec::new(); model.device_index() as usize];
    device_traces.push(trace);
    Snapshot {
        device_traces,
        allocator_settings: Some(settings_of(model.config())),
        ..Snapshot::of_segments(SnapshotFormat::DumpSnapshot, segments)
    }
}

// --------------------------------------------------------------------- test and bench support

/// For tests and benches (the program does not use it): a model of device 0
/// with `capacity` bytes under `settings` (`PYTORCH_CUDA_ALLOC_CONF`
/// syntax), recording up to 1 000 000 trace entries — enough for the
/// workloads below to keep their whole history.
pub fn recording_model(
    settings: &str,
    capacity: u64,
) -> Result<CachingAllocator<InMemoryDevice>, ConfigError> {
    let config = AllocatorConfig::parse(settings)?;
    let mut model = CachingAllocator::new(InMemoryDevice::new(capacity), 0, config);
    model.record_history(Some(1_000_000));
    Ok(model)
}

/// For tests and benches (the program does not use it): drives `model`
/// through `steps` calls of a deterministic mixed workload drawn from
/// `seed` (xorshift64), with call `t` at time `t` µs:
/// - 55 %: an allocation of 1 B to 2^`max_log2` B (log-uniform in steps of
///   1/100) on stream 0 or 1 — on a small device some run out of memory;
/// - 35 %: a free;
/// - 6 %: a free of a block also used on stream 9 (pending until that
///   stream's work completes);
/// - 2 %: stream 9's work completes;
/// - 2 %: `empty_cache()`.
///
/// `after_step` sees the model after each call. Returns how many
/// `empty_cache()` calls released memory. An error is a model bug: the
/// workload only frees what the model handed out.
pub fn mixed_workload<D: DeviceMemory>(
    model: &mut CachingAllocator<D>,
    steps: usize,
    seed: u64,
    max_log2: u32,
    mut after_step: impl FnMut(&CachingAllocator<D>),
) -> Result<usize, AllocError> {
    let mut state = seed;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut live: Vec<u64> = Vec::new();
    let mut releasing_empty_caches = 0;
    for t in 0..steps {
        model.set_time_us(t as u64);
        let r = next() % 100;
        if r < 55 || live.is_empty() {
            let log2 = (next() % (u64::from(max_log2) * 100)) as f64 / 100.0;
            let stream = next() % 2;
            // Running out of memory is part of the workload.
            if let Ok(p) = model.malloc(2f64.powf(log2) as u64, stream) {
                live.push(p);
            }
        } else if r < 90 {
            let p = live.swap_remove((next() as usize) % live.len());
            model.free(p)?;
        } else if r < 96 {
            let p = live.swap_remove((next() as usize) % live.len());
            model.record_stream(p, 9)?;
            model.free(p)?;
        } else if r < 98 {
            model.complete_stream_work(9);
        } else {
            let before = model.memory_reserved();
            model.empty_cache();
            if model.memory_reserved() < before {
                releasing_empty_caches += 1;
            }
        }
        after_step(model);
    }
    Ok(releasing_empty_caches)
}
