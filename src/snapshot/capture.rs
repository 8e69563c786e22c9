//! Builds a [`Snapshot`] from the allocator model's own state and trace, as
//! `torch.cuda.memory._snapshot()` would from PyTorch's: the basis for
//! exporting vramtop sessions and for testing the replay on traces no shared
//! file contains (several streams, pending frees, expandable segments, OOMs).

use std::sync::Arc;

use super::types::{
    AllocatorSettings, Block, Frames, Segment, Snapshot, SnapshotFormat, TraceEntry,
};
use crate::alloc::{AllocatorConfig, CachingAllocator, DeviceMemory, TraceAction};

fn no_frames() -> Frames {
    Arc::from(Vec::new())
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
            frames: no_frames(),
            blocks: s
                .blocks
                .into_iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                    frames: no_frames(),
                })
                .collect(),
        })
        .collect();
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
            frames: no_frames(),
            compile_context: None,
            user_metadata: None,
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
