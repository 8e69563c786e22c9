//! The stress panel's state machine: a person presses keys and watches
//! PyTorch's caching allocator react.
//!
//! Pure: actions come in ([`StressPanel::apply`]) and commands for the device
//! worker go out; the worker's answers come back in
//! ([`StressPanel::on_result`]). No threads, no clock, no device here, so
//! every flow (cap refusals, OOMs, holes, compare marks) is testable as
//! plain values. The worker that executes the commands is
//! [`super::stress_worker`].

use serde::Serialize;

use crate::alloc::analysis::{BUCKETS, FIRST_BUCKET_LOG2, LAST_BUCKET_LOG2};
use crate::alloc::{DeviceStats, SegmentInfo, fragmentation};
use crate::scenario::{self, Action as ScenarioAction, Scenario};

use super::state::AllocatorView;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Tensor sizes `+`/`-` step through (bytes): a small-pool crumb, a
/// small-pool-sized tensor, and large-pool tensors up to a whole GiB.
pub const SIZE_PRESETS: [u64; 5] = [512, MIB, 10 * MIB, 100 * MIB, GIB];
/// The preset a fresh panel starts at (1 MiB: small-pool tensors, two per
/// 2 MiB segment, so freeing every other one leaves every segment half
/// used: holes that empty_cache cannot return).
pub const DEFAULT_SIZE: usize = 1;
/// Tensors per allocation `]`/`[` step through.
pub const COUNT_PRESETS: [u32; 7] = [1, 2, 5, 10, 20, 50, 100];
/// The count a fresh panel starts at.
pub const DEFAULT_COUNT: usize = 3;
/// The smallest size the random pattern draws (bytes): PyTorch's 512-byte
/// rounding unit, so every draw is a distinct block.
pub const RANDOM_MIN_BYTES: u64 = 512;
/// On a real GPU the panel may use this share of the memory free when it
/// started (percent): the rest stays for whatever else runs there.
pub const REAL_GPU_CAP_PERCENT: u64 = 50;
/// Actions kept while the worker is busy (keys typed faster than it
/// answers); more are refused.
pub const MAX_QUEUED: usize = 32;
/// The largest size `s` accepts (bytes): 1 TiB, more than any GPU holds,
/// so that count × size cannot overflow.
pub const MAX_TYPED_SIZE: u64 = 1 << 40;
/// Characters the size field holds.
pub const MAX_SIZE_INPUT: usize = 24;
/// Characters the allocator-settings field holds.
pub const MAX_SETTINGS_INPUT: usize = 200;

/// The seed of the random pattern: the same key presses give the same sizes.
pub const DEFAULT_SEED: u64 = 0x5eed_5eed;

/// How an allocation chooses its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Every tensor has the selected size.
    Fixed,
    /// Sizes are log-uniform between [`RANDOM_MIN_BYTES`] and the selected
    /// size: as many 1 KiB tensors as 1 MiB ones, like a mixed workload.
    RandomLogUniform,
    /// One training step of [`TRANSFORMER`]: its weights on the first
    /// allocation, then every layer's activations
    /// ([`transformer_step_sizes`]); size and count are not used.
    TransformerStep,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Fixed => "fixed",
            Pattern::RandomLogUniform => "random log-uniform",
            Pattern::TransformerStep => "transformer step",
        }
    }

    /// The next pattern `r` selects.
    pub fn next(self) -> Pattern {
        match self {
            Pattern::Fixed => Pattern::RandomLogUniform,
            Pattern::RandomLogUniform => Pattern::TransformerStep,
            Pattern::TransformerStep => Pattern::Fixed,
        }
    }
}

/// The shape of the small transformer whose training step the
/// transformer pattern allocates (fp32, so 4 bytes an element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TransformerShape {
    pub layers: u64,
    pub d_model: u64,
    pub heads: u64,
    pub seq: u64,
    pub batch: u64,
    pub vocab: u64,
}

/// 4 layers, d_model 1024, 8 heads, sequence 512, batch 4, vocabulary
/// 8192: about 225 MiB of weights and 488 MiB of activations a step.
pub const TRANSFORMER: TransformerShape = TransformerShape {
    layers: 4,
    d_model: 1024,
    heads: 8,
    seq: 512,
    batch: 4,
    vocab: 8192,
};

/// Bytes of one fp32 element.
const FP32: u64 = 4;

impl TransformerShape {
    /// The weights, in allocation order (bytes): the token embedding
    /// (vocab × d), then per layer LayerNorm 1 (weight + bias, 2 × d), the
    /// fused QKV projection (d × 3d), the output projection (d × d),
    /// LayerNorm 2 (2 × d), the MLP up (d × 4d) and down (4d × d)
    /// projections, and the final LayerNorm (2 × d).
    pub fn weights(&self) -> Vec<u64> {
        let d = self.d_model;
        let mut sizes = vec![self.vocab * d * FP32];
        for _ in 0..self.layers {
            sizes.extend([
                2 * d * FP32,
                d * 3 * d * FP32,
                d * d * FP32,
                2 * d * FP32,
                d * 4 * d * FP32,
                4 * d * d * FP32,
            ]);
        }
        sizes.push(2 * d * FP32);
        sizes
    }

    /// One forward pass's saved activations, in allocation order (bytes;
    /// t = batch × seq tokens): the embedding output (t × d), per layer
    /// Q, K and V (t × 3d), the attention scores (batch × heads × seq ×
    /// seq), the attention output (t × d), the MLP hidden (t × 4d) and
    /// output (t × d), then the logits (t × vocab) and the loss (a scalar).
    pub fn activations(&self) -> Vec<u64> {
        let d = self.d_model;
        let t = self.batch * self.seq;
        let mut sizes = vec![t * d * FP32];
        for _ in 0..self.layers {
            sizes.extend([
                t * 3 * d * FP32,
                self.batch * self.heads * self.seq * self.seq * FP32,
                t * d * FP32,
                t * 4 * d * FP32,
                t * d * FP32,
            ]);
        }
        sizes.extend([t * self.vocab * FP32, FP32]);
        sizes
    }
}

/// The requests of one [`TRANSFORMER`] training step: the weights first
/// when `with_weights`, then the activations.
pub fn transformer_step_sizes(with_weights: bool) -> Vec<u64> {
    let mut sizes = if with_weights {
        TRANSFORMER.weights()
    } else {
        Vec::new()
    };
    sizes.extend(TRANSFORMER.activations());
    sizes
}

/// A key's intent inside the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum StressAction {
    SizeUp,
    SizeDown,
    CountUp,
    CountDown,
    TogglePattern,
    Allocate,
    FreeSelected,
    FreeOldest,
    FreeRandom,
    /// Frees the 2nd, 4th, … tensor in age order: the survivors pin their
    /// segments, so the freed blocks become holes empty_cache cannot return.
    FreeEveryOther,
    FreeAll,
    EmptyCache,
    /// Marks A, then B; a third press starts over with a new A.
    MarkCompare,
    /// Shows or hides the free-block histogram difference under the
    /// compare figures.
    ToggleHistogram,
    /// Runs the verify kernel on every live tensor.
    Verify,
    /// Opens the size field: type an exact size (`37MiB`), Enter sets it.
    TypeSize,
    /// Sets the tensor size (bytes): what Enter in the size field does.
    SetSize(u64),
    /// Opens the allocator-settings field: type a `PYTORCH_CUDA_ALLOC_CONF`
    /// string, Enter validates it and replaces the allocator.
    TypeSettings,
    /// Sends the validated settings waiting in
    /// [`StressPanel::pending_settings`]: what Enter in the settings field
    /// does.
    Reconfigure,
    Up,
    Down,
    /// Opens the list of built-in scenarios (`n`).
    OpenScenarios,
    /// Loads built-in scenario `i` ([`scenario::BUILTIN`]) and rewinds to
    /// its first variant: what Enter in the list does.
    LoadScenario(usize),
    /// Runs the scenario's next step.
    ScenarioStep,
    /// Runs / pauses the scenario: one step per worker answer.
    ScenarioRun,
    /// Frees everything, applies the variant's settings, back to step 0.
    ScenarioRewind,
    /// The scenario's next variant (rewound).
    ScenarioNextVariant,
    /// Writes the worker's allocator (layout and whole trace) as a PyTorch
    /// memory snapshot `vramtop-stress-<unix time>.pickle` in the current
    /// directory.
    SaveSnapshot,
    /// Unloads the scenario: frees its tensors and goes back to the GPU.
    UnloadScenario,
}

impl StressAction {
    /// What the action does, for the help and the docs.
    pub fn describe(self) -> &'static str {
        match self {
            StressAction::SizeUp => "next tensor size",
            StressAction::SizeDown => "previous tensor size",
            StressAction::CountUp => "more tensors per allocation",
            StressAction::CountDown => "fewer tensors per allocation",
            StressAction::TogglePattern => "pattern: fixed / random log-uniform / transformer step",
            StressAction::Allocate => "allocate count × size",
            StressAction::FreeSelected => "free the selected tensor",
            StressAction::FreeOldest => "free the oldest tensor",
            StressAction::FreeRandom => "free a random tensor",
            StressAction::FreeEveryOther => "free every other tensor (makes holes)",
            StressAction::FreeAll => "free all tensors",
            StressAction::EmptyCache => "empty_cache()",
            StressAction::MarkCompare => "compare: mark A, then B",
            StressAction::ToggleHistogram => "compare: free-block histogram A | B | Δ on / off",
            StressAction::Verify => "verify every tensor's fill pattern",
            StressAction::TypeSize => "type an exact size (37MiB), Enter sets it",
            StressAction::SetSize(_) => "set the tensor size",
            StressAction::TypeSettings => {
                "allocator settings (PYTORCH_CUDA_ALLOC_CONF): frees all, new allocator"
            }
            StressAction::Reconfigure => "replace the allocator with the typed settings",
            StressAction::Up => "select the previous tensor",
            StressAction::Down => "select the next tensor",
            StressAction::OpenScenarios => "scenarios: ↑/↓ and Enter load a built-in one",
            StressAction::LoadScenario(_) => "load a built-in scenario",
            StressAction::ScenarioStep => "scenario: run the next step",
            StressAction::ScenarioRun => "scenario: run / pause (one step per device answer)",
            StressAction::ScenarioRewind => {
                "scenario: rewind (free all, the variant's settings, step 0)"
            }
            StressAction::ScenarioNextVariant => "scenario: next variant (rewound)",
            StressAction::SaveSnapshot => {
                "write a PyTorch snapshot: vramtop-stress-<unix time>.pickle in the current directory"
            }
            StressAction::UnloadScenario => {
                "scenario: unload (free its tensors, back to the GPU from its simulated device)"
            }
        }
    }
}

/// What the device worker must do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum StressCommand {
    /// `torch.empty(size)` for each size, in order, stopping at the first OOM.
    Malloc { sizes: Vec<u64> },
    /// `del tensor` for each address.
    Free { addresses: Vec<u64> },
    /// `torch.cuda.empty_cache()`.
    EmptyCache,
    /// Frees every live tensor, empties the cache and replaces the
    /// allocator with a fresh one under `settings` (a
    /// `PYTORCH_CUDA_ALLOC_CONF` string, already validated by the panel).
    Reconfigure { settings: String },
    /// Runs the verify kernel over every live tensor (filled with the
    /// pattern of its id when it was allocated).
    Verify,
    /// Writes the allocator as a PyTorch memory snapshot pickle named
    /// `vramtop-stress-<unix time>.pickle` in the current directory (the
    /// worker picks the name: the panel has no clock).
    SaveSnapshot,
    /// Frees every tensor and moves to a fresh simulated device of
    /// `capacity` bytes with `context` bytes of it used by the CUDA context
    /// (a scenario's `device_memory` and `context`, as `vramtop scenario`
    /// runs it), the allocator under `settings`.
    UseScenarioDevice {
        capacity: u64,
        context: u64,
        settings: String,
    },
    /// Frees everything on the scenario device and goes back to the GPU.
    UseGpu,
}

/// Where the panel's allocator runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum PanelDevice {
    /// The GPU the worker started on (simulated or real).
    #[default]
    Gpu,
    /// A simulated device of a scenario's size (bytes), `context` of it
    /// used by the CUDA context, as `vramtop scenario` runs it.
    Scenario { capacity: u64, context: u64 },
}

/// A tensor whose bytes are not the pattern they were filled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BadTensor {
    pub address: u64,
    /// The offset of the first wrong byte (bytes).
    pub offset: u64,
}

/// A tensor the worker allocated (bytes, device address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NewTensor {
    pub address: u64,
    /// The block size the allocator carved (rounded).
    pub size: u64,
    /// The size asked for.
    pub requested: u64,
}

/// What happened on the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum StressOutcome {
    /// The worker is ready on `gpu`; `free_at_start` and `total` (bytes)
    /// are `cudaMemGetInfo` before it allocated anything.
    Started {
        gpu: u32,
        free_at_start: u64,
        total: u64,
        /// A real GPU gets a cap; the simulation may be driven into OOM.
        real_gpu: bool,
    },
    Allocated(Vec<NewTensor>),
    /// Some tensors may have been allocated before the OOM.
    OutOfMemory {
        allocated: Vec<NewTensor>,
        /// PyTorch's message, as the model produces it.
        message: String,
        /// The "reserved by PyTorch but unallocated" figure (bytes).
        reserved_but_unallocated: u64,
    },
    Freed(Vec<u64>),
    CacheEmptied,
    /// Every tensor was freed (`freed`: their addresses), the cache emptied
    /// and a fresh allocator runs under `settings`.
    Reconfigured {
        settings: String,
        freed: Vec<u64>,
    },
    /// Every tensor was freed (`freed`) and the allocator, under
    /// `settings`, now runs on `device`.
    DeviceChanged {
        device: PanelDevice,
        settings: String,
        freed: Vec<u64>,
    },
    /// `checked` tensors held their pattern; `bad`: the first that did not.
    Verified {
        checked: u64,
        bad: Option<BadTensor>,
    },
    /// The snapshot was written to `path` (`bytes` long, `trace_entries`
    /// trace entries).
    SnapshotSaved {
        path: String,
        bytes: u64,
        trace_entries: usize,
    },
    /// Anything else the device said no to, after `allocated` succeeded.
    Failed {
        allocated: Vec<NewTensor>,
        message: String,
    },
}

/// The device worker's answer to one command: the outcome and the
/// allocator's fresh figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StressResult {
    pub outcome: StressOutcome,
    pub stats: DeviceStats,
    pub layout: Vec<SegmentInfo>,
    /// Bytes the driver reports used on the whole GPU (total − free).
    pub driver_used: u64,
}

/// The figures the compare view puts side by side (bytes, except
/// `segments` and `fragmentation_bp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    pub allocated: u64,
    pub reserved: u64,
    pub driver_used: u64,
    pub segments: u64,
    pub inactive_split_bytes: u64,
    pub largest_free_block: u64,
    /// Fragmentation in basis points (1/100 of a percent), kept integral
    /// so figures compare exactly.
    pub fragmentation_bp: u64,
    /// Free blocks per log2 size bucket (`analysis::Fragmentation::histogram`):
    /// (count, bytes), bucket `i` holding sizes up to 2^(9 + i) bytes, the
    /// last one 1 GiB and more.
    pub free_histogram: [(u64, u64); BUCKETS],
}

/// Non-negative stat counter as bytes (a negative counter would be a model
/// bug; show 0 rather than wrap).
fn counter(v: i64) -> u64 {
    v.max(0) as u64
}

impl Figures {
    /// The figures of an allocator state.
    pub fn of(stats: &DeviceStats, layout: &[SegmentInfo], driver_used: u64) -> Self {
        let f = fragmentation(layout);
        let mut free_histogram = [(0, 0); BUCKETS];
        for (slot, bucket) in free_histogram.iter_mut().zip(&f.histogram) {
            *slot = (bucket.count, bucket.bytes);
        }
        Figures {
            free_histogram,
            allocated: counter(stats.allocated_bytes.all.current),
            reserved: counter(stats.reserved_bytes.all.current),
            driver_used,
            // The layout's segments: an expandable segment is one mapped
            // range there, while `memory_stats()`'s segment counter only
            // counts cudaMalloc'd segments.
            segments: layout.len() as u64,
            inactive_split_bytes: counter(stats.inactive_split_bytes.all.current),
            largest_free_block: f.largest_free_block,
            fragmentation_bp: (f.fragmentation.clamp(0.0, 1.0) * 10_000.0).round() as u64,
        }
    }
}

/// How a compare row's values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FigureUnit {
    Bytes,
    Count,
    /// Basis points, shown as a percentage.
    BasisPoints,
}

/// One row of the compare view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompareRow {
    pub name: &'static str,
    pub unit: FigureUnit,
    pub a: u64,
    pub b: u64,
}

impl CompareRow {
    /// B − A.
    pub fn delta(&self) -> i128 {
        i128::from(self.b) - i128::from(self.a)
    }
}

/// The compare view's rows, in the order.
pub fn compare_rows(a: &Figures, b: &Figures) -> Vec<CompareRow> {
    let row = |name, unit, f: fn(&Figures) -> u64| CompareRow {
        name,
        unit,
        a: f(a),
        b: f(b),
    };
    vec![
        row("allocated", FigureUnit::Bytes, |f| f.allocated),
        row("reserved", FigureUnit::Bytes, |f| f.reserved),
        row("driver used", FigureUnit::Bytes, |f| f.driver_used),
        row("segments", FigureUnit::Count, |f| f.segments),
        row("inactive split", FigureUnit::Bytes, |f| {
            f.inactive_split_bytes
        }),
        row("largest free block", FigureUnit::Bytes, |f| {
            f.largest_free_block
        }),
        row("fragmentation", FigureUnit::BasisPoints, |f| {
            f.fragmentation_bp
        }),
    ]
}

/// One bucket of the compare view's free-block histogram difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HistogramRow {
    /// The bucket's upper bound (bytes; for the last: its lower bound).
    pub bound: u64,
    /// Whether this is the open-ended last bucket (≥ `bound`).
    pub open_ended: bool,
    pub a_count: u64,
    pub a_bytes: u64,
    pub b_count: u64,
    pub b_bytes: u64,
}

impl HistogramRow {
    /// B − A free blocks.
    pub fn count_delta(&self) -> i128 {
        i128::from(self.b_count) - i128::from(self.a_count)
    }

    /// B − A free bytes.
    pub fn bytes_delta(&self) -> i128 {
        i128::from(self.b_bytes) - i128::from(self.a_bytes)
    }
}

/// The free-block histogram of A and B side by side, smallest bucket
/// first, only the buckets where A or B has a free block.
pub fn histogram_rows(a: &Figures, b: &Figures) -> Vec<HistogramRow> {
    (0..BUCKETS)
        .filter_map(|i| {
            let log2 = FIRST_BUCKET_LOG2 + i as u32;
            let ((a_count, a_bytes), (b_count, b_bytes)) =
                (a.free_histogram[i], b.free_histogram[i]);
            (a_count > 0 || b_count > 0).then_some(HistogramRow {
                bound: 1 << log2,
                open_ended: log2 == LAST_BUCKET_LOG2,
                a_count,
                a_bytes,
                b_count,
                b_bytes,
            })
        })
        .collect()
}

/// A live tensor of the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Allocation order: smaller is older.
    pub id: u64,
    pub address: u64,
    pub size: u64,
    pub requested: u64,
}

/// The last out-of-memory, kept until the next successful allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomState {
    pub message: String,
    pub reserved_but_unallocated: u64,
}

/// Non-releasable bytes from which the OOM advice suggests settings that
/// let split segments be reused.
pub const LARGE_NON_RELEASABLE: u64 = 64 * MIB;

/// What `empty_cache` could do with the cached free memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reclaim {
    /// Segments without a live block: `empty_cache` returns them whole.
    pub releasable: u64,
    /// Free blocks inside segments that also hold a live block: they stay.
    pub non_releasable: u64,
}

/// Splits the cached free memory of `layout` into what `empty_cache` could
/// release and what it could not.
pub fn reclaim(layout: &[SegmentInfo]) -> Reclaim {
    let mut r = Reclaim::default();
    for s in layout {
        if s.allocated_size == 0 {
            r.releasable += s.total_size;
        } else {
            r.non_releasable += s.total_size.saturating_sub(s.allocated_size);
        }
    }
    r
}

/// The lines under an OOM message saying what would have helped, from the
/// current layout and the allocator's `settings`: how much `empty_cache`
/// could release and how much is non-releasable, and, when the latter is
/// at least [`LARGE_NON_RELEASABLE`], the settings that let it be reused.
/// None when nothing is releasable and little is stranded (plain lack of
/// capacity).
pub fn oom_advice(layout: &[SegmentInfo], settings: &str) -> Vec<String> {
    let r = reclaim(layout);
    if r.releasable == 0 && r.non_releasable < LARGE_NON_RELEASABLE {
        return Vec::new();
    }
    let fmt = crate::alloc::sizing::display_bytes;
    let mut lines = vec![format!(
        "empty_cache() could release {} (whole free segments); {} is non-releasable          (free blocks in segments with live tensors)",
        fmt(r.releasable),
        fmt(r.non_releasable)
    )];
    if r.non_releasable >= LARGE_NON_RELEASABLE {
        let expandable = settings.contains("expandable_segments:True");
        lines.push(if expandable {
            format!(
                "expandable segments are on: max_split_size_mb would keep large blocks                  from being split, so {} could be reused (press S to try)",
                fmt(r.non_releasable)
            )
        } else {
            format!(
                "expandable_segments:True or max_split_size_mb would let those {} be                  reused (press S to try)",
                fmt(r.non_releasable)
            )
        });
    }
    lines
}

/// The list of built-in scenarios while it is open (`n`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScenarioPicker {
    /// (name, title) of each built-in scenario, in [`scenario::BUILTIN`]
    /// order.
    pub entries: Vec<(String, String)>,
    pub selected: usize,
}

/// A built-in scenario loaded into the panel, stepped through the worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioRun {
    /// Index into [`scenario::BUILTIN`].
    pub builtin: usize,
    pub scenario: Scenario,
    /// Index into `scenario.variants`.
    pub variant: usize,
    /// Index into `scenario.steps` from which the next step is looked for.
    pub cursor: usize,
    /// Steps of this variant sent so far (the engine's 1-based step number
    /// of the last one).
    pub done: usize,
    /// Steps automatically, one per device answer.
    pub running: bool,
    /// Held scenario names and their panel tensor ids, in allocation order.
    pub names: Vec<(String, u64)>,
    /// The names of the alloc step with the worker.
    pub pending: Vec<String>,
    /// The command with the worker is one of this scenario's steps.
    pub in_flight: bool,
}

impl ScenarioRun {
    /// The variant's name.
    pub fn variant_name(&self) -> &str {
        &self.scenario.variants[self.variant].name
    }

    /// The variant's `PYTORCH_CUDA_ALLOC_CONF`.
    pub fn alloc_conf(&self) -> &str {
        &self.scenario.variants[self.variant].alloc_conf
    }

    /// The steps this variant runs.
    pub fn total(&self) -> usize {
        let v = self.variant_name();
        self.scenario.steps.iter().filter(|s| s.runs_in(v)).count()
    }

    /// The index (into `scenario.steps`) of the next step this variant runs.
    pub fn next_index(&self) -> Option<usize> {
        let v = self.variant_name();
        (self.cursor..self.scenario.steps.len()).find(|&i| self.scenario.steps[i].runs_in(v))
    }
}

/// The default cap: on a real GPU [`REAL_GPU_CAP_PERCENT`] of the memory
/// free at start; the simulation has none, so OOM can be reached.
pub fn default_cap(free_at_start: u64, real_gpu: bool) -> Option<u64> {
    // In u128 so that the product cannot overflow and no byte is lost to
    // dividing first.
    real_gpu.then(|| (u128::from(free_at_start) * u128::from(REAL_GPU_CAP_PERCENT) / 100) as u64)
}

/// Why a request exceeding the cap is refused (bytes in the message).
pub fn cap_refusal(reserved: u64, request: u64, cap: u64) -> Option<String> {
    let total = reserved.saturating_add(request);
    (total > cap).then(|| {
        format!(
            "refused: reserved {} + request {} = {} exceeds the stress cap of {}",
            crate::alloc::sizing::display_bytes(reserved),
            crate::alloc::sizing::display_bytes(request),
            crate::alloc::sizing::display_bytes(total),
            crate::alloc::sizing::display_bytes(cap),
        )
    })
}

/// Parses the size field's text: a size as `--sim-memory` takes it,
/// from 1 byte to [`MAX_TYPED_SIZE`]; the error says what to write.
pub fn parse_typed_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match crate::alloc::parse_size(text) {
        Some(0) | None => Err(format!(
            "'{text}' is not a size: write e.g. 512, 37MiB, 1.5GiB (Esc cancels)"
        )),
        Some(n) if n > MAX_TYPED_SIZE => Err(format!(
            "'{text}' is more than the largest size, {}",
            crate::alloc::sizing::display_bytes(MAX_TYPED_SIZE)
        )),
        Some(n) => Ok(n),
    }
}

/// Validates a `PYTORCH_CUDA_ALLOC_CONF` string as PyTorch would
/// ([`AllocatorConfig::parse`](crate::alloc::AllocatorConfig::parse)): the
/// trimmed string, or PyTorch-style validation text.
pub fn parse_settings(text: &str) -> Result<String, String> {
    let text = text.trim();
    crate::alloc::AllocatorConfig::parse(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("invalid PYTORCH_CUDA_ALLOC_CONF: {e} (Esc cancels)"))
}

/// A deterministic xorshift64* step: the next state and a 64-bit draw.
fn next_random(state: u64) -> (u64, u64) {
    let mut x = state.max(1);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    (x, x.wrapping_mul(0x2545_f491_4f6c_dd1d))
}

/// A log-uniform size in `[lo, hi]` (bytes) from a 64-bit draw.
pub fn log_uniform(draw: u64, lo: u64, hi: u64) -> u64 {
    let (lo, hi) = (lo.max(1).min(hi.max(1)), hi.max(1));
    // 53 bits give a uniform fraction in [0, 1).
    let u = (draw >> 11) as f64 / (1u64 << 53) as f64;
    let (ln_lo, ln_hi) = ((lo as f64).ln(), (hi as f64).ln());
    ((ln_lo + u * (ln_hi - ln_lo)).exp().round() as u64).clamp(lo, hi)
}

/// The stress panel's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StressPanel {
    /// Index into [`SIZE_PRESETS`].
    pub size_index: usize,
    /// A typed size (bytes) in place of the preset, until `+`/`-`.
    pub custom_size: Option<u64>,
    /// The size field's text while it is open (`s`).
    pub size_input: Option<String>,
    /// The allocator-settings field's text while it is open (`S`).
    pub settings_input: Option<String>,
    /// Validated settings waiting for [`StressAction::Reconfigure`].
    pub pending_settings: Option<String>,
    /// Transformer steps sent since the start or the last reconfigure: the
    /// first one also allocates the weights.
    pub transformer_steps: u64,
    /// The settings the worker's allocator runs under (`""`: PyTorch's
    /// defaults).
    pub settings: String,
    /// Index into [`COUNT_PRESETS`].
    pub count_index: usize,
    pub pattern: Pattern,
    /// The random pattern's generator state.
    pub rng: u64,
    /// Live tensors, oldest first.
    pub tensors: Vec<Tensor>,
    /// Index into `tensors`.
    pub selected: usize,
    pub next_id: u64,
    /// The GPU the worker runs on, once it started.
    pub gpu: Option<u32>,
    /// Bytes the panel may hold reserved; `None`: no cap (simulation).
    pub cap: Option<u64>,
    /// The cap given with `--stress-cap`: it replaces the default (on the
    /// simulated GPU too) when the worker starts.
    pub cap_setting: Option<u64>,
    /// The allocator's figures after the last result.
    pub figures: Figures,
    /// The worker's allocator, for the dashboard's panes.
    pub view: Option<AllocatorView>,
    /// Whether the compare view lists the free-block histogram too (`H`).
    pub show_histogram: bool,
    pub mark_a: Option<Figures>,
    pub mark_b: Option<Figures>,
    pub oom: Option<OomState>,
    /// One line about the last thing that happened.
    pub message: Option<String>,
    /// A command is with the worker: new requests wait for its answer, so
    /// the panel never frees an address twice.
    pub busy: bool,
    /// Actions typed while busy, applied in order after the answer (so a
    /// mark typed after a free sees the free's figures).
    pub queued: Vec<StressAction>,
    /// The built-in scenario list while it is open (`n`).
    pub scenario_picker: Option<ScenarioPicker>,
    /// The scenario loaded into the panel.
    pub scenario: Option<ScenarioRun>,
    /// Where the allocator runs: the GPU, or a loaded scenario's device.
    pub device: PanelDevice,
}

impl Default for StressPanel {
    fn default() -> Self {
        StressPanel {
            size_index: DEFAULT_SIZE,
            custom_size: None,
            size_input: None,
            settings_input: None,
            pending_settings: None,
            settings: String::new(),
            transformer_steps: 0,
            count_index: DEFAULT_COUNT,
            pattern: Pattern::Fixed,
            rng: DEFAULT_SEED,
            tensors: Vec::new(),
            selected: 0,
            next_id: 1,
            gpu: None,
            cap: None,
            cap_setting: None,
            figures: Figures::default(),
            view: None,
            show_histogram: false,
            mark_a: None,
            mark_b: None,
            oom: None,
            message: None,
            busy: false,
            queued: Vec::new(),
            scenario_picker: None,
            scenario: None,
            device: PanelDevice::Gpu,
        }
    }
}

impl StressPanel {
    /// A fresh panel whose cap is `cap` (bytes) instead of the default
    /// (`--stress-cap`); `None`: the default.
    pub fn with_cap(cap: Option<u64>) -> Self {
        StressPanel {
            cap_setting: cap,
            ..StressPanel::default()
        }
    }

    pub fn size(&self) -> u64 {
        self.custom_size
            .unwrap_or(SIZE_PRESETS[self.size_index.min(SIZE_PRESETS.len() - 1)])
    }

    /// Whether the size field is open (keys then type into it).
    pub fn editing_size(&self) -> bool {
        self.size_input.is_some()
    }

    /// Whether the allocator-settings field is open.
    pub fn editing_settings(&self) -> bool {
        self.settings_input.is_some()
    }

    /// Whether a text field (size or settings) takes the keys.
    pub fn editing(&self) -> bool {
        self.editing_size() || self.editing_settings()
    }

    /// Types a character into the open field.
    pub fn type_char(&mut self, c: char) {
        if c.is_control() {
            return;
        }
        if let Some(text) = &mut self.size_input
            && text.chars().count() < MAX_SIZE_INPUT
        {
            text.push(c);
        }
        if let Some(text) = &mut self.settings_input
            && text.chars().count() < MAX_SETTINGS_INPUT
        {
            text.push(c);
        }
    }

    /// Deletes the open field's last character.
    pub fn backspace(&mut self) {
        if let Some(text) = &mut self.size_input {
            text.pop();
        }
        if let Some(text) = &mut self.settings_input {
            text.pop();
        }
    }

    /// Closes whichever field is open without changing anything.
    pub fn cancel_input(&mut self) {
        self.cancel_size_input();
        if self.settings_input.take().is_some() {
            self.say("allocator settings unchanged");
        }
    }

    /// Enter in whichever field is open.
    pub fn submit_input(&mut self) -> Vec<StressCommand> {
        if self.editing_settings() {
            self.submit_settings()
        } else {
            self.submit_size()
        }
    }

    /// Enter in the settings field: text `AllocatorConfig::parse` accepts
    /// closes it and replaces the allocator (after the device's answer when
    /// keys are queued); anything else keeps it open with PyTorch's
    /// validation message.
    pub fn submit_settings(&mut self) -> Vec<StressCommand> {
        let Some(text) = self.settings_input.clone() else {
            return Vec::new();
        };
        match parse_settings(&text) {
            Ok(settings) => {
                self.settings_input = None;
                self.pending_settings = Some(settings);
                self.apply(StressAction::Reconfigure)
            }
            Err(why) => {
                self.say(why);
                Vec::new()
            }
        }
    }

    /// Closes the size field without changing the size.
    pub fn cancel_size_input(&mut self) {
        if self.size_input.take().is_some() {
            self.say("size unchanged");
        }
    }

    /// Enter in the size field: a valid size closes it and is set (after
    /// the device's answer when keys are queued); invalid text keeps it
    /// open with a message saying why.
    pub fn submit_size(&mut self) -> Vec<StressCommand> {
        let Some(text) = self.size_input.clone() else {
            return Vec::new();
        };
        match parse_typed_size(&text) {
            Ok(size) => {
                self.size_input = None;
                self.apply(StressAction::SetSize(size))
            }
            Err(why) => {
                self.say(why);
                Vec::new()
            }
        }
    }

    /// `+`/`-`: the next or previous preset, from a typed size the nearest
    /// preset above or below it.
    fn step_size(&mut self, up: bool) {
        let len = SIZE_PRESETS.len();
        self.size_index = match self.custom_size.take() {
            Some(c) if up => SIZE_PRESETS.iter().position(|&p| p > c).unwrap_or(len - 1),
            Some(c) => SIZE_PRESETS.iter().rposition(|&p| p < c).unwrap_or(0),
            None => Self::step(self.size_index, len, up),
        };
    }

    fn set_size(&mut self, size: u64) {
        match SIZE_PRESETS.iter().position(|&p| p == size) {
            Some(i) => {
                self.size_index = i;
                self.custom_size = None;
            }
            None => self.custom_size = Some(size),
        }
        self.say(format!(
            "size set to {}",
            crate::alloc::sizing::display_bytes(size)
        ));
    }

    pub fn count(&self) -> u32 {
        COUNT_PRESETS[self.count_index.min(COUNT_PRESETS.len() - 1)]
    }

    /// Whether the worker has started and answers.
    pub fn ready(&self) -> bool {
        self.gpu.is_some()
    }

    /// The cap that applies now: a scenario's simulated device has none
    /// (running out of its memory is the point).
    pub fn active_cap(&self) -> Option<u64> {
        match self.device {
            PanelDevice::Gpu => self.cap,
            PanelDevice::Scenario { .. } => None,
        }
    }

    /// The histogram rows when both marks are set and `H` shows them.
    pub fn histogram_compare(&self) -> Option<Vec<HistogramRow>> {
        if !self.show_histogram {
            return None;
        }
        Some(histogram_rows(self.mark_a.as_ref()?, self.mark_b.as_ref()?))
    }

    /// The compare rows when both marks are set.
    pub fn compare(&self) -> Option<Vec<CompareRow>> {
        Some(compare_rows(self.mark_a.as_ref()?, self.mark_b.as_ref()?))
    }

    /// The sizes of the next allocation; advances the generator.
    fn next_sizes(&mut self) -> Vec<u64> {
        if self.pattern == Pattern::TransformerStep {
            return transformer_step_sizes(self.transformer_steps == 0);
        }
        let size = self.size();
        (0..self.count())
            .map(|_| match self.pattern {
                Pattern::Fixed | Pattern::TransformerStep => size,
                Pattern::RandomLogUniform => {
                    let (state, draw) = next_random(self.rng);
                    self.rng = state;
                    log_uniform(draw, RANDOM_MIN_BYTES, size)
                }
            })
            .collect()
    }

    fn say(&mut self, text: impl Into<String>) {
        self.message = Some(text.into());
    }

    /// Why no command can go to the worker now.
    fn unavailable(&self) -> Option<&'static str> {
        if !self.ready() {
            Some("the stress worker has not started")
        } else if self.busy {
            Some("busy: the last request has not been answered")
        } else {
            None
        }
    }

    /// Sends `command` unless the worker is unavailable.
    fn send(&mut self, command: StressCommand) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        self.busy = true;
        vec![command]
    }

    fn free(&mut self, addresses: Vec<u64>) -> Vec<StressCommand> {
        if addresses.is_empty() {
            self.say("no live tensors to free");
            return Vec::new();
        }
        self.send(StressCommand::Free { addresses })
    }

    fn allocate(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let sizes = self.next_sizes();
        let request: u64 = sizes.iter().sum();
        if let Some(cap) = self.active_cap()
            && let Some(why) = cap_refusal(self.figures.reserved, request, cap)
        {
            self.say(why);
            return Vec::new();
        }
        let commands = self.send(StressCommand::Malloc { sizes });
        if self.pattern == Pattern::TransformerStep && !commands.is_empty() {
            self.transformer_steps += 1;
        }
        commands
    }

    /// Forgets the compare marks: they were figures of an allocator that
    /// has just been replaced. The words to add to the message, if any.
    fn clear_marks(&mut self) -> &'static str {
        let had = self.mark_a.take().is_some() | self.mark_b.take().is_some();
        if had {
            "; compare cleared (its marks were of the old allocator)"
        } else {
            ""
        }
    }

    fn mark(&mut self) {
        match (self.mark_a, self.mark_b) {
            (None, _) => {
                self.mark_a = Some(self.figures);
                self.say("marked A: act, then press c again to mark B");
            }
            (Some(_), None) => {
                self.mark_b = Some(self.figures);
                self.say("marked B: A | B | Δ below; c starts over");
            }
            (Some(_), Some(_)) => {
                self.mark_a = Some(self.figures);
                self.mark_b = None;
                self.say("marked a new A");
            }
        }
    }

    fn step(index: usize, len: usize, up: bool) -> usize {
        if up {
            (index + 1).min(len - 1)
        } else {
            index.saturating_sub(1)
        }
    }

    /// Applies a key's action: the commands for the worker (at most one).
    /// While the worker is busy, actions other than moving the cursor wait
    /// in [`StressPanel::queued`].
    pub fn apply(&mut self, action: StressAction) -> Vec<StressCommand> {
        if self.busy
            && !matches!(
                action,
                StressAction::Up
                    | StressAction::Down
                    | StressAction::TypeSize
                    | StressAction::TypeSettings
                    | StressAction::ToggleHistogram
                    | StressAction::OpenScenarios
            )
        {
            if self.queued.len() < MAX_QUEUED {
                self.queued.push(action);
            } else {
                self.say("busy: too many keys ahead of the device; this one was dropped");
            }
            return Vec::new();
        }
        match action {
            StressAction::SizeUp | StressAction::SizeDown => {
                self.step_size(action == StressAction::SizeUp);
            }
            StressAction::TypeSize => {
                self.size_input = Some(String::new());
                self.say("type a size (512, 37MiB, 1.5GiB): Enter sets it, Esc cancels");
            }
            StressAction::SetSize(size) => self.set_size(size),
            StressAction::TypeSettings => {
                self.settings_input = Some(self.settings.clone());
                self.say(
                    "allocator settings, e.g. expandable_segments:True,max_split_size_mb:128: \
                     Enter frees every tensor and starts a fresh allocator, Esc cancels",
                );
            }
            StressAction::Reconfigure => {
                let Some(settings) = self.pending_settings.take() else {
                    self.say("no allocator settings to apply");
                    return Vec::new();
                };
                return self.send(StressCommand::Reconfigure { settings });
            }
            StressAction::CountUp | StressAction::CountDown => {
                let up = action == StressAction::CountUp;
                self.count_index = Self::step(self.count_index, COUNT_PRESETS.len(), up);
            }
            StressAction::TogglePattern => {
                self.pattern = self.pattern.next();
            }
            StressAction::Up => self.selected = self.selected.saturating_sub(1),
            StressAction::Down => {
                self.selected = (self.selected + 1).min(self.tensors.len().saturating_sub(1));
            }
            StressAction::Allocate => return self.allocate(),
            StressAction::FreeSelected => {
                let a = self.tensors.get(self.selected).map(|t| t.address);
                return self.free(a.into_iter().collect());
            }
            StressAction::FreeOldest => {
                let a = self.tensors.first().map(|t| t.address);
                return self.free(a.into_iter().collect());
            }
            StressAction::FreeRandom => {
                if self.tensors.is_empty() {
                    return self.free(Vec::new());
                }
                let (state, draw) = next_random(self.rng);
                self.rng = state;
                let i = (draw % self.tensors.len() as u64) as usize;
                return self.free(vec![self.tensors[i].address]);
            }
            StressAction::FreeEveryOther => {
                let a = self.tensors.iter().skip(1).step_by(2).map(|t| t.address);
                return self.free(a.collect());
            }
            StressAction::FreeAll => {
                let a = self.tensors.iter().map(|t| t.address);
                return self.free(a.collect());
            }
            StressAction::EmptyCache => return self.send(StressCommand::EmptyCache),
            StressAction::Verify => {
                if self.tensors.is_empty() {
                    self.say("no live tensors to verify");
                    return Vec::new();
                }
                return self.send(StressCommand::Verify);
            }
            StressAction::MarkCompare => self.mark(),
            StressAction::SaveSnapshot => return self.send(StressCommand::SaveSnapshot),
            StressAction::OpenScenarios => self.open_scenarios(),
            StressAction::LoadScenario(i) => return self.load_scenario(i),
            StressAction::ScenarioStep => {
                if let Some(run) = &mut self.scenario {
                    run.running = false;
                }
                return self.scenario_step();
            }
            StressAction::ScenarioRun => {
                let Some(run) = &mut self.scenario else {
                    self.say("no scenario loaded: n lists them");
                    return Vec::new();
                };
                if run.running {
                    run.running = false;
                    self.say("scenario paused");
                    return Vec::new();
                }
                run.running = true;
                return self.scenario_step();
            }
            StressAction::ScenarioRewind => return self.rewind_scenario(),
            StressAction::UnloadScenario => {
                if self.scenario.is_none() && self.device == PanelDevice::Gpu {
                    self.say("no scenario loaded: n lists them");
                    return Vec::new();
                }
                let commands = self.send(StressCommand::UseGpu);
                if !commands.is_empty() {
                    self.scenario = None;
                }
                return commands;
            }
            StressAction::ScenarioNextVariant => {
                if let Some(run) = &mut self.scenario {
                    run.variant = (run.variant + 1) % run.scenario.variants.len();
                }
                return self.rewind_scenario();
            }
            StressAction::ToggleHistogram => {
                self.show_histogram = !self.show_histogram;
                self.say(if self.show_histogram {
                    "compare lists the free-block histogram (A | B | Δ per size bucket)"
                } else {
                    "free-block histogram hidden"
                });
            }
        }
        Vec::new()
    }

    /// The OOM advice lines for the current figures (empty without an OOM).
    pub fn oom_advice(&self) -> Vec<String> {
        match (&self.oom, &self.view) {
            (Some(_), Some(view)) => oom_advice(&view.layout, &self.settings),
            _ => Vec::new(),
        }
    }

    /// Whether the scenario list takes the keys.
    pub fn picking(&self) -> bool {
        self.scenario_picker.is_some()
    }

    fn open_scenarios(&mut self) {
        let entries = scenario::BUILTIN
            .iter()
            .map(|(name, text)| {
                let title = scenario::parse(text).map_or_else(|e| e.to_string(), |s| s.title);
                (name.to_string(), title)
            })
            .collect();
        let selected = self.scenario.as_ref().map_or(0, |r| r.builtin);
        self.scenario_picker = Some(ScenarioPicker { entries, selected });
        self.say("scenarios: ↑/↓ choose, Enter loads, Esc closes");
    }

    /// Moves the scenario list's cursor.
    pub fn pick_move(&mut self, up: bool) {
        if let Some(p) = &mut self.scenario_picker {
            p.selected = Self::step(p.selected, p.entries.len().max(1), !up);
        }
    }

    /// Enter in the scenario list: loads the selected scenario.
    pub fn pick_choose(&mut self) -> Vec<StressCommand> {
        match self.scenario_picker.take() {
            Some(p) => self.apply(StressAction::LoadScenario(p.selected)),
            None => Vec::new(),
        }
    }

    /// Esc in the scenario list.
    pub fn pick_cancel(&mut self) {
        if self.scenario_picker.take().is_some() {
            self.say("no scenario chosen");
        }
    }

    fn load_scenario(&mut self, i: usize) -> Vec<StressCommand> {
        let Some((_, text)) = scenario::BUILTIN.get(i) else {
            self.say("no such scenario");
            return Vec::new();
        };
        let scenario = match scenario::parse(text) {
            Ok(s) => s,
            Err(e) => {
                self.say(e.to_string());
                return Vec::new();
            }
        };
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let command = StressCommand::UseScenarioDevice {
            capacity: scenario.device_memory,
            context: scenario
                .variants
                .first()
                .map_or(scenario.context, |v| v.external_use(scenario.context)),
            settings: scenario
                .variants
                .first()
                .map(|v| v.alloc_conf.clone())
                .unwrap_or_default(),
        };
        self.scenario = Some(ScenarioRun {
            builtin: i,
            scenario,
            variant: 0,
            cursor: 0,
            done: 0,
            running: false,
            names: Vec::new(),
            pending: Vec::new(),
            in_flight: false,
        });
        self.send(command)
    }

    /// Frees everything and starts a fresh allocator under the variant's
    /// settings (the reconfigure command), back to step 0.
    fn rewind_scenario(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let Some(run) = &mut self.scenario else {
            self.say("no scenario loaded: n lists them");
            return Vec::new();
        };
        run.cursor = 0;
        run.done = 0;
        run.running = false;
        run.pending.clear();
        run.in_flight = false;
        let settings = run.alloc_conf().to_string();
        // A fresh device of the scenario's size with this variant's
        // contexts (they differ between variants), as vramtop scenario runs it.
        let variant = &run.scenario.variants[run.variant];
        let command = StressCommand::UseScenarioDevice {
            capacity: run.scenario.device_memory,
            context: variant.external_use(run.scenario.context),
            settings,
        };
        self.send(command)
    }

    /// The command of the scenario's next step, chosen from the step
    /// cursor alone; advances the cursor. A cap refusal stops the run.
    fn scenario_step(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let Some(mut run) = self.scenario.take() else {
            self.say("no scenario loaded: n lists them");
            return Vec::new();
        };
        let commands = self.next_scenario_command(&mut run);
        if commands.is_empty() {
            run.running = false;
        }
        self.scenario = Some(run);
        commands
    }

    fn next_scenario_command(&mut self, run: &mut ScenarioRun) -> Vec<StressCommand> {
        let Some(at) = run.next_index() else {
            self.say(format!(
                "scenario {} finished ({} steps): w rewinds, N tries the next variant",
                run.scenario.name, run.done
            ));
            return Vec::new();
        };
        let step = &run.scenario.steps[at];
        let command = match &step.action {
            ScenarioAction::Alloc { names, size } => {
                let request = size.saturating_mul(names.len() as u64);
                if let Some(cap) = self.active_cap()
                    && let Some(why) = cap_refusal(self.figures.reserved, request, cap)
                {
                    self.say(why);
                    return Vec::new();
                }
                run.pending = names.clone();
                StressCommand::Malloc {
                    sizes: vec![*size; names.len()],
                }
            }
            ScenarioAction::Free { patterns } => {
                let held: Vec<String> = run.names.iter().map(|(n, _)| n.clone()).collect();
                let mut gone = std::collections::BTreeSet::new();
                for p in patterns {
                    gone.extend(scenario::format::matching(p, &held).into_iter().cloned());
                }
                let ids: rustc_hash::FxHashSet<u64> = run
                    .names
                    .iter()
                    .filter(|(n, _)| gone.contains(n))
                    .map(|&(_, id)| id)
                    .collect();
                run.names.retain(|(n, _)| !gone.contains(n));
                let addresses = self
                    .tensors
                    .iter()
                    .filter(|t| ids.contains(&t.id))
                    .map(|t| t.address)
                    .collect();
                StressCommand::Free { addresses }
            }
            ScenarioAction::EmptyCache => StressCommand::EmptyCache,
        };
        run.cursor = at + 1;
        run.done += 1;
        run.in_flight = true;
        self.send(command)
    }

    /// Records what the answer to a scenario step did: the new tensors get
    /// their names; an OOM or a failure stops the run.
    fn scenario_answer(&mut self, first_id: u64, stop: bool, reconfigured: bool) {
        let next_id = self.next_id;
        let Some(run) = &mut self.scenario else {
            return;
        };
        if reconfigured {
            run.names.clear();
        }
        if !run.in_flight {
            return;
        }
        run.in_flight = false;
        let pending = std::mem::take(&mut run.pending);
        run.names.extend(pending.into_iter().zip(first_id..next_id));
        if stop {
            run.running = false;
        }
    }

    fn add(&mut self, new: &[NewTensor]) {
        for t in new {
            self.tensors.push(Tensor {
                id: self.next_id,
                address: t.address,
                size: t.size,
                requested: t.requested,
            });
            self.next_id += 1;
        }
    }

    /// Takes the worker's answer, then applies queued actions up to the
    /// next one that needs the worker: its commands are returned.
    /// A running scenario then sends its next step.
    pub fn on_result(&mut self, result: StressResult) -> Vec<StressCommand> {
        let first_id = self.next_id;
        let stop = matches!(
            result.outcome,
            StressOutcome::OutOfMemory { .. } | StressOutcome::Failed { .. }
        );
        let reconfigured = matches!(
            result.outcome,
            StressOutcome::Reconfigured { .. } | StressOutcome::DeviceChanged { .. }
        );
        self.take_result(result);
        self.scenario_answer(first_id, stop, reconfigured);
        while !self.queued.is_empty() {
            let next = self.queued.remove(0);
            let commands = self.apply(next);
            if !commands.is_empty() {
                return commands;
            }
        }
        if self.scenario.as_ref().is_some_and(|r| r.running) && !self.busy {
            return self.scenario_step();
        }
        Vec::new()
    }

    fn take_result(&mut self, result: StressResult) {
        let before = self.figures;
        self.figures = Figures::of(&result.stats, &result.layout, result.driver_used);
        let fmt = crate::alloc::sizing::display_bytes;
        match result.outcome {
            StressOutcome::Started {
                gpu,
                free_at_start,
                total: _,
                real_gpu,
            } => {
                self.gpu = Some(gpu);
                self.cap = self
                    .cap_setting
                    .or_else(|| default_cap(free_at_start, real_gpu));
                let cap = match (self.cap, self.cap_setting) {
                    (None, _) => "no cap (simulated GPU)".to_string(),
                    (Some(c), Some(_)) => format!("cap {} (--stress-cap)", fmt(c)),
                    (Some(c), None) => format!("cap {}", fmt(c)),
                };
                self.say(format!("stress allocator ready on GPU {gpu}; {cap}"));
            }
            StressOutcome::Allocated(new) => {
                self.oom = None;
                self.add(&new);
                let grown = self.figures.reserved.saturating_sub(before.reserved);
                self.say(format!(
                    "allocated {} tensor(s); reserved grew by {}",
                    new.len(),
                    fmt(grown)
                ));
            }
            StressOutcome::OutOfMemory {
                allocated,
                message,
                reserved_but_unallocated,
            } => {
                self.add(&allocated);
                self.say(format!("out of memory after {} tensor(s)", allocated.len()));
                self.oom = Some(OomState {
                    message,
                    reserved_but_unallocated,
                });
            }
            StressOutcome::Freed(addresses) => {
                // A set: freeing every other of 100,000 tensors must not
                // scan the freed list once per tensor.
                let gone: rustc_hash::FxHashSet<u64> = addresses.iter().copied().collect();
                self.tensors.retain(|t| !gone.contains(&t.address));
                self.say(format!(
                    "freed {} tensor(s); reserved stays {} until empty_cache",
                    addresses.len(),
                    fmt(self.figures.reserved)
                ));
            }
            StressOutcome::Reconfigured { settings, freed } => {
                self.tensors.clear();
                self.oom = None;
                let shown = if settings.is_empty() {
                    "PyTorch's defaults".to_string()
                } else {
                    settings.clone()
                };
                self.settings = settings;
                self.transformer_steps = 0;
                let cleared = self.clear_marks();
                self.say(format!(
                    "freed {} tensor(s), emptied the cache; fresh allocator with {shown}{cleared}",
                    freed.len()
                ));
            }
            StressOutcome::DeviceChanged {
                device,
                settings,
                freed,
            } => {
                self.tensors.clear();
                self.oom = None;
                self.settings = settings;
                self.transformer_steps = 0;
                self.device = device;
                let cleared = self.clear_marks();
                self.say(match device {
                    PanelDevice::Scenario { capacity, context } => format!(
                        "freed {} tensor(s); the scenario runs on a simulated {} device \
                         ({} context), as vramtop scenario runs it: u goes back to the GPU{cleared}",
                        freed.len(),
                        fmt(capacity),
                        fmt(context)
                    ),
                    PanelDevice::Gpu => format!(
                        "freed {} tensor(s) of the scenario device; back on the GPU{cleared}",
                        freed.len()
                    ),
                });
            }
            StressOutcome::Verified { checked, bad: None } => {
                self.say(format!(
                    "verified {checked} tensor(s): every byte holds its pattern"
                ));
            }
            StressOutcome::Verified {
                checked,
                bad: Some(bad),
            } => {
                let id = self
                    .tensors
                    .iter()
                    .find(|t| t.address == bad.address)
                    .map_or_else(|| "?".to_string(), |t| t.id.to_string());
                self.say(format!(
                    "verify: tensor #{id} at {:#x} is corrupt: first bad byte at offset {} \
                     ({checked} tensor(s) checked before it were intact)",
                    bad.address, bad.offset
                ));
            }
            StressOutcome::SnapshotSaved {
                path,
                bytes,
                trace_entries,
            } => {
                self.say(format!(
                    "wrote {path} ({trace_entries} trace entries, {}): vramtop replay {path}",
                    fmt(bytes)
                ));
            }
            StressOutcome::CacheEmptied => {
                let released = before.reserved.saturating_sub(self.figures.reserved);
                self.say(format!("empty_cache released {}", fmt(released)));
            }
            StressOutcome::Failed { allocated, message } => {
                self.add(&allocated);
                self.say(message);
            }
        }
        self.selected = self.selected.min(self.tensors.len().saturating_sub(1));
        self.busy = false;
        let source = match self.device {
            PanelDevice::Gpu => "vramtop stress panel".to_string(),
            PanelDevice::Scenario { capacity, .. } => {
                format!(
                    "stress panel · scenario device {} (simulated)",
                    fmt(capacity)
                )
            }
        };
        let view = AllocatorView::new(source, None, result.stats, result.layout);
        self.view = Some(match self.device {
            PanelDevice::Gpu => view,
            // The scenario's own device: its size and use, not the GPU's.
            PanelDevice::Scenario { capacity, .. } => view.on_device(capacity, result.driver_used),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;

    #[test]
    fn log_uniform_stays_within_bounds() {
        for draw in [0, 1, u64::MAX / 2, u64::MAX] {
            let s = log_uniform(draw, 512, 10 * MIB);
            assert!((512..=10 * MIB).contains(&s), "{s}");
        }
        assert_eq!(log_uniform(u64::MAX, 4 * KIB, 4 * KIB), 4 * KIB);
    }

    #[test]
    fn real_gpus_get_half_the_free_memory_as_cap_and_the_simulation_none() {
        assert_eq!(default_cap(80 * GIB, true), Some(40 * GIB));
        assert_eq!(default_cap(80 * GIB, false), None);
    }
}
