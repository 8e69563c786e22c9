//! Large, realistic snapshots for measuring the reader, the summary and the
//! replay (see [`large`]).
//!
//! Made by the allocator model itself: a long, training-like workload (a
//! transformer's forward activations, backward frees, gradient buckets
//! handed to a communication stream, optimizer steps, varying batch shapes,
//! input batches on a copy stream, an occasional `empty_cache()`) runs
//! through [`CachingAllocator`] with its history recorded, and the snapshot
//! is taken from the model's state and trace ([`snapshot_with_frames`]). So
//! the file is valid by construction: every invariant holds and `vramtop
//! replay` on it is a FULL MATCH.
//!
//! Every call carries a traceback drawn from [`LargeShape::stacks`] distinct
//! frame lists (depth [`LargeShape::min_depth`]..=[`LargeShape::max_depth`])
//! made of [`LargeShape::frames`] distinct frames, as a long real recording
//! has, so a reader's memory figures are not flattered by sharing. A call
//! site (phase, layer, operation, batch shape) keeps its traceback from
//! step to step, as in a real run. Deterministic for a given shape.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::capture::snapshot_with_frames;
use super::types::{Frame, Frames, Snapshot};
use super::writer::{WriteError, WriteOptions, write_snapshot_file_with};
use crate::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};

/// What [`large`] generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeShape {
    /// The workload stops as soon as the trace holds this many entries (the
    /// snapshot then shows the allocator mid-step, as a real dump may).
    pub trace_entries: usize,
    /// Distinct tracebacks. Call sites get their own traceback until this
    /// many are handed out, then share them round-robin; a trace with fewer
    /// call sites than this has one traceback per site.
    pub stacks: usize,
    /// Depth range of a traceback, in frames.
    pub min_depth: usize,
    pub max_depth: usize,
    /// Distinct frames the tracebacks are made of.
    pub frames: usize,
    /// Transformer layers of the modelled network (each adds call sites and
    /// about 100 MB of bf16 weights).
    pub layers: usize,
    /// Everything on the compute stream: no copy stream, and gradient
    /// buckets freed without waiting for a communication stream. For
    /// replayers that model a single stream (`shared/tools/replay.py`).
    pub one_stream: bool,
    pub seed: u64,
}

/// File bytes per trace entry in PyTorch's layout
/// ([`super::WriteOptions::fresh_frame_lists`]) at the default depths: a new
/// list of memoised frame dicts per entry. Measured on generated files.
const BYTES_PER_ENTRY: u64 = 167;

impl LargeShape {
    /// Roughly `bytes` of pickle when written with
    /// [`super::WriteOptions::fresh_frame_lists`].
    pub fn about_bytes(bytes: u64) -> Self {
        let entries = usize::try_from(bytes / BYTES_PER_ENTRY)
            .unwrap_or(usize::MAX)
            .max(1);
        LargeShape {
            trace_entries: entries,
            ..LargeShape::default()
        }
    }
}

impl Default for LargeShape {
    fn default() -> Self {
        LargeShape {
            trace_entries: 100_000,
            stacks: 4_000,
            min_depth: 10,
            max_depth: 40,
            frames: 3_000,
            layers: 24,
            one_stream: false,
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

const MODULES: [&str; 10] = [
    "torch/nn/modules/module.py",
    "torch/nn/modules/linear.py",
    "torch/nn/modules/normalization.py",
    "torch/nn/functional.py",
    "torch/_tensor.py",
    "torch/autograd/graph.py",
    "torch/optim/adamw.py",
    "torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py",
    "transformers/models/llama/modeling_llama.py",
    "torch/utils/data/dataloader.py",
];
const FUNCTIONS: [&str; 12] = [
    "_call_impl",
    "_wrapped_call_impl",
    "forward",
    "linear",
    "layer_norm",
    "scaled_dot_product_attention",
    "backward",
    "_engine_run_backward",
    "_multi_tensor_adamw",
    "step",
    "allreduce_hook",
    "__next__",
];
/// The allocator's own C++ frames, innermost first, on top of every stack.
const NATIVE_TOP: [(&str, &str); 3] = [
    (
        "??",
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
    ),
    (
        "??",
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc",
    ),
    ("??", "at::native::empty_cuda"),
];
/// The script's frames, outermost last, under every stack.
const SCRIPT_BOTTOM: [(&str, u64, &str); 2] =
    [("train.py", 211, "train_step"), ("train.py", 388, "main")];

/// `stacks` distinct frame lists of depth `min_depth..=max_depth`, made of
/// `frames` distinct frames (fewer stacks when the frames cannot make that
/// many distinct lists).
fn make_stacks(shape: &LargeShape, rng: &mut Rng) -> Vec<Frames> {
    let frame = |filename: &str, line: u64, name: &str| Frame {
        filename: Arc::from(filename),
        line,
        name: Arc::from(name),
    };
    let pool: Vec<Frame> = (0..shape.frames.max(1))
        .map(|i| {
            frame(
                &format!(
                    "/opt/conda/lib/python3.11/site-packages/{}",
                    MODULES[i % MODULES.len()]
                ),
                // Distinct lines keep the frames distinct.
                10 + i as u64,
                FUNCTIONS[(i / MODULES.len()) % FUNCTIONS.len()],
            )
        })
        .collect();
    let top: Vec<Frame> = NATIVE_TOP
        .iter()
        .map(|&(file, name)| frame(file, 0, name))
        .collect();
    let bottom: Vec<Frame> = SCRIPT_BOTTOM
        .iter()
        .map(|&(file, line, name)| frame(file, line, name))
        .collect();
    let fixed = top.len() + bottom.len();
    let min_depth = shape.min_depth.max(fixed + 1);
    let max_depth = shape.max_depth.max(min_depth);
    let mut seen: HashSet<Vec<usize>> = HashSet::new();
    let mut stacks = Vec::with_capacity(shape.stacks);
    // Collisions are rare; the attempt bound keeps a tiny frame pool finite.
    let mut attempts = 0usize;
    while stacks.len() < shape.stacks.max(1) && attempts < shape.stacks.max(1).saturating_mul(20) {
        attempts += 1;
        let depth = min_depth + rng.below(max_depth - min_depth + 1);
        let picks: Vec<usize> = (0..depth - fixed).map(|_| rng.below(pool.len())).collect();
        if !seen.insert(picks.clone()) {
            continue;
        }
        let frames: Vec<Frame> = top
            .iter()
            .cloned()
            .chain(picks.iter().map(|&i| pool[i].clone()))
            .chain(bottom.iter().cloned())
            .collect();
        stacks.push(Frames::from(frames));
    }
    stacks
}

/// What a call site does; with the layer and the batch shape it names the
/// site, and so its traceback.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Data = 0,
    Forward = 1,
    Backward = 2,
    Communication = 3,
    Optimizer = 4,
    Housekeeping = 5,
}

/// Batch shapes (sequences × tokens each) the steps cycle through.
const BATCH_SHAPES: [(u64, u64); 8] = [
    (1, 4096),
    (2, 2048),
    (4, 1024),
    (2, 1536),
    (8, 512),
    (1, 3072),
    (4, 768),
    (2, 4096),
];
const HIDDEN: u64 = 2048;
const HEADS: u64 = 16;
/// bf16 activations and weights, fp32 optimizer state.
const BF16: u64 = 2;
const FP32: u64 = 4;
/// Streams: compute, the input copy stream, the gradient all-reduce stream.
const COMPUTE: u64 = 0;
const COPY: u64 = 1;
const COMMUNICATION: u64 = 2;
/// A gradient bucket is handed to the communication stream every this many layers.
const LAYERS_PER_BUCKET: usize = 4;
/// `empty_cache()` (an evaluation pause) every this many steps.
const STEPS_PER_EMPTY_CACHE: usize = 50;
/// The modelled GPU's memory: enough that the workload never runs out.
const DEVICE_BYTES: u64 = 80 << 30;

/// The allocator model recording a workload, and the traceback of every
/// trace entry it wrote.
struct Recorder {
    model: CachingAllocator<InMemoryDevice>,
    /// Index into the stacks, per model trace entry.
    stack_of_entry: Vec<u32>,
    /// Call site key → index into the stacks.
    sites: HashMap<u64, u32>,
    stacks: usize,
    target: usize,
    time_us: u64,
    rng: Rng,
    /// A free the model refused: a bug in this workload; stop recording.
    failed: bool,
}

impl Recorder {
    fn done(&self) -> bool {
        self.failed || self.model.trace_len() >= self.target
    }

    fn site(&self, phase: Phase, variant: usize, layer: usize, op: u64) -> u64 {
        ((phase as u64) << 56) | ((variant as u64) << 48) | ((layer as u64) << 16) | op
    }

    /// Stamps the entries the last call wrote with `site`'s traceback.
    fn note(&mut self, site: u64) {
        // A call that wrote nothing (stream work completed with no free
        // pending, an empty_cache() with nothing to release) takes no
        // traceback, so that every traceback handed out is in the trace.
        if self.stack_of_entry.len() >= self.model.trace_len() {
            return;
        }
        let next = (self.sites.len() % self.stacks.max(1)) as u32;
        let stack = *self.sites.entry(site).or_insert(next);
        while self.stack_of_entry.len() < self.model.trace_len() {
            self.stack_of_entry.push(stack);
        }
    }

    fn tick(&mut self) {
        // A few to a few hundred µs between calls (kernels run meanwhile).
        self.time_us += 1 + self.rng.next() % 300;
        self.model.set_time_us(self.time_us);
    }

    fn alloc(&mut self, site: u64, bytes: u64, stream: u64) -> Option<u64> {
        if self.done() {
            return None;
        }
        self.tick();
        let ptr = self.model.malloc(bytes, stream).ok();
        self.note(site);
        ptr.filter(|&p| p != 0)
    }

    fn free(&mut self, site: u64, ptr: Option<u64>) {
        let Some(ptr) = ptr else { return };
        if self.done() {
            return;
        }
        self.tick();
        if self.model.free(ptr).is_err() {
            self.failed = true;
        }
        self.note(site);
    }

    /// Frees `ptr` after it was used on `stream` too: the block waits for
    /// that stream's work.
    fn free_used_on(&mut self, site: u64, ptr: Option<u64>, stream: u64) {
        let Some(ptr) = ptr else { return };
        if self.done() {
            return;
        }
        self.tick();
        if self.model.record_stream(ptr, stream).is_err() || self.model.free(ptr).is_err() {
            self.failed = true;
        }
        self.note(site);
    }

    fn complete(&mut self, site: u64, stream: u64) {
        if self.done() {
            return;
        }
        self.tick();
        self.model.complete_stream_work(stream);
        self.note(site);
    }

    fn empty_cache(&mut self, site: u64) {
        if self.done() {
            return;
        }
        self.tick();
        self.model.empty_cache();
        self.note(site);
    }
}

/// A layer's weights, bytes each (bf16): q/k/v, output, MLP up, MLP down,
/// two norms.
const LAYER_WEIGHTS: [u64; 6] = [
    3 * HIDDEN * HIDDEN * BF16,
    HIDDEN * HIDDEN * BF16,
    4 * HIDDEN * HIDDEN * BF16,
    4 * HIDDEN * HIDDEN * BF16,
    HIDDEN * BF16,
    HIDDEN * BF16,
];

/// Runs the training-like workload until the trace is `shape.trace_entries` long.
fn record(shape: &LargeShape) -> Recorder {
    let mut model = CachingAllocator::new(
        InMemoryDevice::new(DEVICE_BYTES),
        0,
        AllocatorConfig::default(),
    );
    model.record_history(Some(shape.trace_entries.saturating_add(1_000)));
    let mut r = Recorder {
        model,
        stack_of_entry: Vec::with_capacity(shape.trace_entries),
        sites: HashMap::new(),
        stacks: shape.stacks,
        target: shape.trace_entries,
        time_us: 1_700_000_000_000_000,
        rng: Rng(shape.seed.rotate_left(17)),
        failed: false,
    };
    let layers = shape.layers.max(1);

    // Weights, then (at the first optimizer step) the optimizer's state.
    let mut weights: Vec<Option<u64>> = Vec::new();
    for layer in 0..layers {
        for (i, &bytes) in LAYER_WEIGHTS.iter().enumerate() {
            let site = r.site(Phase::Housekeeping, 0, layer, i as u64);
            weights.push(r.alloc(site, bytes, COMPUTE));
        }
    }
    let mut optimizer_state: Vec<Option<u64>> = Vec::new();

    let mut step = 0usize;
    while !r.done() {
        let variant = (step.wrapping_mul(5).wrapping_add(step / 8)) % BATCH_SHAPES.len();
        let (batch, seq) = BATCH_SHAPES[variant];
        let tokens = batch * seq;
        let act = tokens * HIDDEN * BF16;

        // The input batch arrives on the copy stream.
        let site = r.site(Phase::Data, variant, layers, 0);
        let input_stream = if shape.one_stream { COMPUTE } else { COPY };
        let input_ids = r.alloc(site, tokens * 8, input_stream);
        let site = r.site(Phase::Data, variant, layers, 1);
        let embedded = r.alloc(site, act, COMPUTE);

        // Forward: per layer, saved activations and freed temporaries.
        let mut saved: Vec<Vec<Option<u64>>> = Vec::with_capacity(layers);
        for layer in 0..layers {
            let mut keep = Vec::new();
            let mut op = 0u64;
            let mut site = |r: &mut Recorder| {
                op += 1;
                r.site(Phase::Forward, variant, layer, op)
            };
            let s = site(&mut r);
            keep.push(r.alloc(s, act, COMPUTE)); // norm output
            let s = site(&mut r);
            keep.push(r.alloc(s, tokens * FP32, COMPUTE)); // norm statistics
            let s = site(&mut r);
            let qkv = r.alloc(s, 3 * act, COMPUTE);
            let s = site(&mut r);
            keep.push(r.alloc(s, act, COMPUTE)); // attention output
            let s = site(&mut r);
            keep.push(r.alloc(s, batch * HEADS * seq * FP32, COMPUTE)); // logsumexp
            let s = site(&mut r);
            r.free(s, qkv);
            let s = site(&mut r);
            keep.push(r.alloc(s, act, COMPUTE)); // residual
            let s = site(&mut r);
            keep.push(r.alloc(s, act, COMPUTE)); // second norm
            let s = site(&mut r);
            keep.push(r.alloc(s, 4 * act, COMPUTE)); // MLP up
            let s = site(&mut r);
            let gelu = r.alloc(s, 4 * act, COMPUTE);
            let s = site(&mut r);
            keep.push(r.alloc(s, act, COMPUTE)); // MLP down
            let s = site(&mut r);
            r.free(s, gelu);
            saved.push(keep);
        }
        let site = r.site(Phase::Forward, variant, layers, 0);
        let logits = r.alloc(site, tokens * 32_000 * BF16, COMPUTE);
        let site = r.site(Phase::Forward, variant, layers, 1);
        let loss = r.alloc(site, FP32, COMPUTE);
        let site = r.site(Phase::Backward, variant, layers, 0);
        let grad_logits = r.alloc(site, tokens * 32_000 * BF16, COMPUTE);
        let site = r.site(Phase::Backward, variant, layers, 1);
        r.free(site, logits);
        let site = r.site(Phase::Backward, variant, layers, 2);
        r.free(site, grad_logits);

        // Backward, last layer first: gradients appear, activations go, and
        // every few layers a bucket of gradients goes to the all-reduce.
        let mut grads: Vec<Option<u64>> = Vec::new();
        for layer in (0..layers).rev() {
            let mut op = 0u64;
            let mut site = |r: &mut Recorder| {
                op += 1;
                r.site(Phase::Backward, variant, layer, op)
            };
            let s = site(&mut r);
            let grad_in = r.alloc(s, 4 * act, COMPUTE);
            for &bytes in &LAYER_WEIGHTS {
                let s = site(&mut r);
                grads.push(r.alloc(s, bytes, COMPUTE));
            }
            for ptr in saved.pop().unwrap_or_default() {
                let s = site(&mut r);
                r.free(s, ptr);
            }
            let s = site(&mut r);
            r.free(s, grad_in);
            if layer.is_multiple_of(LAYERS_PER_BUCKET) {
                let s = r.site(Phase::Communication, variant, layer, 0);
                let bucket: u64 = LAYER_WEIGHTS.iter().sum::<u64>() * LAYERS_PER_BUCKET as u64;
                let flat = r.alloc(s, bucket, COMPUTE);
                let s = r.site(Phase::Communication, variant, layer, 1);
                if shape.one_stream {
                    r.free(s, flat);
                } else {
                    r.free_used_on(s, flat, COMMUNICATION);
                }
            }
        }
        let site = r.site(Phase::Communication, variant, layers, 2);
        r.complete(site, COMMUNICATION);
        let site = r.site(Phase::Backward, variant, layers, 3);
        r.free(site, loss);
        let site = r.site(Phase::Data, variant, layers, 2);
        r.free(site, embedded);
        let site = r.site(Phase::Data, variant, layers, 3);
        r.free(site, input_ids);

        // Optimizer: fp32 state made once, fp32 temporaries per tensor
        // (foreach), then zero_grad(set_to_none=True) frees the gradients.
        if optimizer_state.is_empty() {
            for (i, _) in weights.iter().enumerate() {
                let bytes = LAYER_WEIGHTS[i % LAYER_WEIGHTS.len()] / BF16 * FP32;
                for moment in 0..2u64 {
                    let site = r.site(Phase::Optimizer, 0, i, 100 + moment);
                    optimizer_state.push(r.alloc(site, bytes, COMPUTE));
                }
            }
        }
        for (i, _) in weights.iter().enumerate() {
            let bytes = LAYER_WEIGHTS[i % LAYER_WEIGHTS.len()] / BF16 * FP32;
            let site = r.site(Phase::Optimizer, 0, i, 0);
            let tmp = r.alloc(site, bytes, COMPUTE);
            let site = r.site(Phase::Optimizer, 0, i, 1);
            r.free(site, tmp);
        }
        for (i, ptr) in grads.into_iter().enumerate() {
            let site = r.site(Phase::Optimizer, 0, i, 2);
            r.free(site, ptr);
        }

        step += 1;
        if step.is_multiple_of(STEPS_PER_EMPTY_CACHE) {
            let site = r.site(Phase::Housekeeping, 0, layers, 0);
            r.empty_cache(site);
        }
    }
    r
}

/// A snapshot of `shape`: the state and trace of the allocator model after
/// a training-like workload (see the module documentation).
pub fn large(shape: &LargeShape) -> Snapshot {
    let mut rng = Rng(shape.seed);
    let stacks = make_stacks(shape, &mut rng);
    let shape = LargeShape {
        stacks: stacks.len(),
        ..*shape
    };
    let recorder = record(&shape);
    let empty: Frames = Arc::from(Vec::new());
    let mut entry = 0usize;
    snapshot_with_frames(&recorder.model, 0, |_| {
        let frames = recorder
            .stack_of_entry
            .get(entry)
            .and_then(|&s| stacks.get(s as usize))
            .unwrap_or(&empty)
            .clone();
        entry += 1;
        frames
    })
}

/// Bumped whenever [`large`] makes different files, so that cached files
/// ([`cached_large_file`]) of an older generator are not reused.
pub const GENERATOR_VERSION: u32 = 2;

/// What [`write_large_file`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeFile {
    /// File size.
    pub bytes: u64,
    pub trace_entries: usize,
    pub segments: usize,
    pub distinct_stacks: usize,
}

/// Writes the snapshot of `shape` to `path` in PyTorch's layout (a new
/// frames list per reference), through a `.partial` file renamed into place.
pub fn write_large_file(shape: &LargeShape, path: &Path) -> Result<LargeFile, WriteError> {
    let snapshot = large(shape);
    let bytes = write_snapshot_file_with(
        &snapshot,
        path,
        &WriteOptions {
            fresh_frame_lists: true,
        },
    )?;
    Ok(LargeFile {
        bytes,
        trace_entries: snapshot.device_traces.iter().map(Vec::len).sum(),
        segments: snapshot.segments.len(),
        distinct_stacks: distinct_stacks(&snapshot),
    })
}

/// For benches: the path of a generated snapshot of about `bytes` in `dir`
/// (made on first use, then reused; the name carries the size and
/// [`GENERATOR_VERSION`]). `dir` is created if missing.
pub fn cached_large_file(dir: &Path, bytes: u64) -> Result<PathBuf, WriteError> {
    let path = dir.join(format!("large-{bytes}B-v{GENERATOR_VERSION}.pickle"));
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_path_buf(),
        source,
    })?;
    write_large_file(&LargeShape::about_bytes(bytes), &path)?;
    Ok(path)
}

/// Distinct non-empty tracebacks of trace entries, segments and blocks.
pub fn distinct_stacks(snapshot: &Snapshot) -> usize {
    let mut seen: HashSet<&[Frame]> = HashSet::new();
    for e in snapshot.device_traces.iter().flatten() {
        seen.insert(&e.frames);
    }
    for s in &snapshot.segments {
        seen.insert(&s.frames);
        for b in &s.blocks {
            seen.insert(&b.frames);
        }
    }
    seen.remove(&[][..]);
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::replay::verify;
    use crate::snapshot::{
        check_invariants, read_snapshot, read_snapshot_file, write_snapshot_with,
    };

    fn small() -> LargeShape {
        LargeShape {
            trace_entries: 20_000,
            stacks: 500,
            layers: 4,
            ..LargeShape::default()
        }
    }

    fn written(snapshot: &Snapshot) -> Vec<u8> {
        let mut bytes = Vec::new();
        write_snapshot_with(
            snapshot,
            &mut bytes,
            &WriteOptions {
                fresh_frame_lists: true,
            },
        )
        .expect("written into memory");
        bytes
    }

    #[test]
    fn generated_snapshot_read_back_replays_as_full_match_without_findings() {
        let read = read_snapshot(&written(&large(&small()))).expect("reads back");
        assert!(
            check_invariants(&read).is_empty(),
            "{:?}",
            check_invariants(&read)
        );
        let report = verify(&read);
        assert!(report.full_match(), "{report:?}");
        assert_eq!(report.replays.len(), 1);
        assert!(report.replays[0].segment_allocs > 0);
    }

    #[test]
    fn generated_snapshot_has_the_trace_length_and_distinct_stacks_asked() {
        let shape = small();
        let snapshot = large(&shape);
        let trace = &snapshot.device_traces[0];
        // The last call may write a few entries at once (a segment and its
        // block, or the frees an empty_cache() makes).
        assert!(
            (shape.trace_entries..shape.trace_entries + 100).contains(&trace.len()),
            "{} entries",
            trace.len()
        );
        assert_eq!(distinct_stacks(&snapshot), shape.stacks);
        assert!(
            trace
                .iter()
                .all(|e| (shape.min_depth..=shape.max_depth).contains(&e.frames.len()))
        );
    }

    #[test]
    fn generated_snapshot_uses_several_streams_and_both_pools() {
        let snapshot = large(&small());
        let streams: HashSet<u64> = snapshot.device_traces[0].iter().map(|e| e.stream).collect();
        assert!(streams.contains(&COPY), "{streams:?}");
        assert!(streams.contains(&COMPUTE), "{streams:?}");
        let actions: HashSet<_> = snapshot.device_traces[0].iter().map(|e| e.action).collect();
        assert!(
            actions.contains(&crate::alloc::TraceAction::SegmentFree),
            "{actions:?}"
        );
        let pools: HashSet<_> = snapshot.segments.iter().map(|s| s.segment_type).collect();
        assert_eq!(pools.len(), 2, "{pools:?}");
    }

    #[test]
    fn cached_large_file_is_made_once_and_reused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = cached_large_file(dir.path(), 200_000).expect("written");
        let read = read_snapshot_file(&path).expect("reads back");
        assert!(verify(&read).full_match());
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("mtime");
        let again = cached_large_file(dir.path(), 200_000).expect("reused");
        assert_eq!(again, path);
        let modified_again = std::fs::metadata(&again)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(modified, modified_again);
    }

    #[test]
    fn one_stream_snapshot_stays_on_the_compute_stream_and_replays() {
        let shape = LargeShape {
            one_stream: true,
            ..small()
        };
        let snapshot = large(&shape);
        assert!(
            snapshot.device_traces[0]
                .iter()
                .all(|e| e.stream == COMPUTE)
        );
        assert!(verify(&snapshot).full_match());
    }

    #[test]
    fn about_bytes_lands_near_the_size_asked() {
        let bytes = written(&large(&LargeShape::about_bytes(4 << 20)));
        let ratio = bytes.len() as f64 / f64::from(4u32 << 20);
        assert!((0.7..1.4).contains(&ratio), "{} bytes", bytes.len());
    }
}
