//! Builds a [`Snapshot`] from the allocator model's own state and trace, as
//! `torch.cuda.memory._snapshot()` would from PyTorch's: the basis for
//! exporting vramtop sessions and for testing the replay on traces no shared
//! file contains (several streams, pending frees, expandable segments, OOMs).

use std::collections::HashMap;
use std::sync::Arc;

use super::types::{
    AllocatorSettings, Block, Frame, Frames, Segment, Snapshot, SnapshotFormat, TraceEntry,
};
use crate::alloc::{
    AllocatorConfig, BlockState, CachingAllocator, DeviceMemory, TraceAction,
    TraceEntry as ModelEntry,
};

fn no_frames() -> Frames {
    Arc::from(Vec::new())
}

/// A one-frame traceback naming what vramtop did, for exported sessions:
/// `filename` names the source (e.g. `<vramtop scenario fragmentation>`),
/// `line` the step number, `name` the step's label. Synthetic, and says
/// so: no Python ran.
pub fn synthetic_frames(filename: &str, line: i64, name: &str) -> Frames {
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
            time_us: i64::try_from(e.time_us).ok(),
            frames: frames_of(e),
            compile_context: None,
            user_metadata: None,
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
        format: SnapshotFormat::DumpSnapshot,
        segments,
        device_traces,
        allocator_settings: Some(settings_of(model.config())),
        external_annotations: Vec::new(),
        skipped_trace_entries: 0,
    }
}
