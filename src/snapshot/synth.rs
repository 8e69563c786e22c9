//! Large, realistic snapshots for measuring the reader (see [`large`]).
//!
//! Shaped like what `_record_memory_history(max_entries=…)` produces on a
//! long training run: a trace of alloc / free_requested / free_completed
//! cycles with occasional segment_alloc / segment_free, each entry carrying
//! a deep Python + C++ traceback drawn from a few hundred distinct stacks
//! made of a few hundred distinct frames, and many segments of split
//! blocks. Deterministic for a given seed. The figures are plausible, not a
//! replayable allocator history: the replay is not the point here.

use std::sync::Arc;

use super::types::{
    AllocatorSettings, Block, Frame, Frames, Segment, Snapshot, SnapshotFormat, TraceEntry,
};
use crate::alloc::{BlockState, PoolKind, TraceAction};

/// What [`large`] generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeShape {
    pub trace_entries: usize,
    pub segments: usize,
    /// Blocks per segment.
    pub blocks_per_segment: usize,
    /// Distinct tracebacks, and their depth range (frames).
    pub stacks: usize,
    pub min_depth: usize,
    pub max_depth: usize,
    /// Distinct frames the tracebacks are made of.
    pub frames: usize,
    pub seed: u64,
}

impl LargeShape {
    /// Roughly `bytes` of pickle when written with
    /// [`super::WriteOptions::fresh_frame_lists`] (PyTorch's layout: about
    /// 200 bytes a trace entry at the default depths).
    pub fn about_bytes(bytes: u64) -> Self {
        const BYTES_PER_ENTRY: u64 = 200;
        let entries = (bytes / BYTES_PER_ENTRY).max(1) as usize;
        LargeShape {
            trace_entries: entries,
            segments: (entries / 500).clamp(1, 20_000),
            ..LargeShape::default()
        }
    }
}

impl Default for LargeShape {
    fn default() -> Self {
        LargeShape {
            trace_entries: 100_000,
            segments: 200,
            blocks_per_segment: 8,
            stacks: 300,
            min_depth: 20,
            max_depth: 60,
            frames: 400,
            seed: 0x5eed,
        }
    }
}

/// SplitMix64: small, fast and good enough for synthetic figures.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const MODULES: [&str; 8] = [
    "torch/nn/modules/module.py",
    "torch/nn/modules/linear.py",
    "torch/nn/functional.py",
    "torch/_tensor.py",
    "transformers/models/llama/modeling_llama.py",
    "torch/autograd/graph.py",
    "train.py",
    "torch/optim/adamw.py",
];
const FUNCTIONS: [&str; 8] = [
    "_call_impl",
    "forward",
    "linear",
    "backward",
    "scaled_dot_product_attention",
    "_engine_run_backward",
    "train_step",
    "step",
];

/// A snapshot of `shape`.
pub fn large(shape: &LargeShape) -> Snapshot {
    let mut rng = Rng(shape.seed);
    let frames: Vec<Frame> = (0..shape.frames.max(1))
        .map(|i| Frame {
            filename: Arc::from(format!(
                "/opt/conda/lib/python3.11/site-packages/{}",
                MODULES[i % MODULES.len()]
            )),
            line: 10 + (i as u64 * 37) % 2000,
            name: Arc::from(FUNCTIONS[(i / MODULES.len()) % FUNCTIONS.len()]),
        })
        .collect();
    let depth_span = shape.max_depth.saturating_sub(shape.min_depth) + 1;
    let stacks: Vec<Frames> = (0..shape.stacks.max(1))
        .map(|_| {
            let depth = shape.min_depth + rng.below(depth_span);
            (0..depth)
                .map(|_| frames[rng.below(frames.len())].clone())
                .collect::<Vec<_>>()
                .into()
        })
        .collect();
    let empty: Frames = Arc::from(Vec::new());

    const BASE: u64 = 0x7f00_0000_0000;
    const SEGMENT: u64 = 20 << 20;
    let segments: Vec<Segment> = (0..shape.segments)
        .map(|s| {
            let address = BASE + s as u64 * SEGMENT;
            let n = shape.blocks_per_segment.max(1) as u64;
            let size = SEGMENT / n;
            let blocks: Vec<Block> = (0..n)
                .map(|b| {
                    let allocated = rng.below(3) != 0;
                    Block {
                        address: address + b * size,
                        size,
                        requested_size: size - (rng.next() % 512),
                        state: if allocated {
                            BlockState::ActiveAllocated
                        } else {
                            BlockState::Inactive
                        },
                        frames: if allocated {
                            stacks[rng.below(stacks.len())].clone()
                        } else {
                            empty.clone()
                        },
                    }
                })
                .collect();
            let allocated: u64 = blocks
                .iter()
                .filter(|b| b.state.is_active())
                .map(|b| b.size)
                .sum();
            let requested: u64 = blocks
                .iter()
                .filter(|b| b.state.is_active())
                .map(|b| b.requested_size)
                .sum();
            Segment {
                device: 0,
                address,
                total_size: SEGMENT,
                allocated_size: Some(allocated),
                active_size: Some(allocated),
                requested_size: Some(requested),
                stream: 0,
                segment_type: PoolKind::Large,
                segment_pool_id: (0, 0),
                is_expandable: false,
                frames: stacks[rng.below(stacks.len())].clone(),
                blocks,
            }
        })
        .collect();

    let mut trace = Vec::with_capacity(shape.trace_entries);
    let mut time_us: i64 = 1_700_000_000_000_000;
    // alloc → free_requested → free_completed, with a segment_alloc before
    // one alloc in 50 and a segment_free after one free in 60.
    while trace.len() < shape.trace_entries {
        let addr = BASE + (rng.next() % (1 << 36)) / 512 * 512;
        let size = 512 * (1 + rng.next() % 40_000);
        let frames = stacks[rng.below(stacks.len())].clone();
        let segment = size.div_ceil(SEGMENT) * SEGMENT;
        let new_segment = trace.len() % 50 == 0;
        let free_segment = trace.len() % 60 < 3;
        let mut push = |action, addr, size, frames: &Frames, time: &mut i64| {
            *time += 1 + (rng.next() % 200) as i64;
            trace.push(TraceEntry {
                action,
                addr,
                size,
                stream: 0,
                time_us: Some(*time),
                frames: frames.clone(),
                compile_context: None,
                user_metadata: None,
            });
        };
        if new_segment {
            push(
                TraceAction::SegmentAlloc,
                addr,
                segment,
                &frames,
                &mut time_us,
            );
        }
        push(TraceAction::Alloc, addr, size, &frames, &mut time_us);
        push(
            TraceAction::FreeRequested,
            addr,
            size,
            &frames,
            &mut time_us,
        );
        push(
            TraceAction::FreeCompleted,
            addr,
            size,
            &frames,
            &mut time_us,
        );
        if free_segment {
            push(
                TraceAction::SegmentFree,
                addr,
                segment,
                &frames,
                &mut time_us,
            );
        }
    }
    trace.truncate(shape.trace_entries);

    Snapshot {
        format: SnapshotFormat::DumpSnapshot,
        segments,
        device_traces: vec![trace],
        allocator_settings: Some(AllocatorSettings {
            conf: String::new(),
            max_split_size: -1,
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            roundup_power2_divisions: (0..16).map(|i| (1u64 << i, 0)).collect(),
            release_lock_on_cudamalloc: false,
            pinned_num_register_threads: Some(1),
            pinned_use_cuda_host_register: Some(false),
            graph_capture_record_stream_reuse: None,
            file_order: Vec::new(),
        }),
        external_annotations: Vec::new(),
        skipped_trace_entries: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{WriteOptions, read_snapshot, write_snapshot_with};

    #[test]
    fn large_snapshot_has_its_shape_and_reads_back_equal() {
        let shape = LargeShape {
            trace_entries: 2_000,
            segments: 20,
            ..LargeShape::default()
        };
        let snapshot = large(&shape);
        assert_eq!(snapshot.device_traces[0].len(), 2_000);
        assert_eq!(snapshot.segments.len(), 20);
        let depths: Vec<usize> = snapshot.device_traces[0]
            .iter()
            .map(|e| e.frames.len())
            .collect();
        assert!(depths.iter().all(|d| (20..=60).contains(d)));
        let mut bytes = Vec::new();
        write_snapshot_with(
            &snapshot,
            &mut bytes,
            &WriteOptions {
                fresh_frame_lists: true,
            },
        )
        .unwrap();
        // PyTorch's layout: a new list per entry, ~240 bytes each.
        let per_entry = bytes.len() / 2_000;
        assert!(
            (150..400).contains(&per_entry),
            "{per_entry} bytes an entry"
        );
        assert_eq!(read_snapshot(&bytes).unwrap(), snapshot);
    }
}
