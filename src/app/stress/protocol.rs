//! What the panel and its device worker say to each other: the actions
//! keys turn into, the commands the panel sends, and the worker's answers.

use serde::Serialize;

use crate::alloc::{DeviceProcess, DeviceStats, SegmentInfo, SimProcesses};

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
    /// Opens the size field: type an exact size (`37MiB`).
    TypeSize,
    /// Sets the tensor size (bytes): what Enter in the size field does.
    SetSize(u64),
    /// Opens the allocator-settings field: type a `PYTORCH_CUDA_ALLOC_CONF`
    /// string, Enter validates it and replaces the allocator.
    TypeSettings,
    /// Sends the validated settings waiting in
    /// [`StressPanel::pending_settings`](super::StressPanel::pending_settings):
    /// what Enter in the settings field does.
    Reconfigure,
    Up,
    Down,
    /// Opens the list of built-in scenarios (`n`).
    OpenScenarios,
    /// Loads built-in scenario `i`
    /// ([`scenario::BUILTIN`](crate::scenario::BUILTIN)) and rewinds to its
    /// first variant: what Enter in the list does.
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
    /// memory snapshot `vramtop-stress-<unix time>.pickle` in the snapshot
    /// folder (the dashboard's save folder: `$VRAMTOP_SNAPSHOT_DIR`, else
    /// the probe's; the current directory only where it has none).
    SaveSnapshot,
    /// Unloads the scenario: frees its tensors and goes back to the GPU.
    UnloadScenario,
}

impl StressAction {
    /// Whether the action allocates or frees tensors: what a free all typed
    /// after it makes moot.
    pub fn allocates_or_frees(self) -> bool {
        matches!(
            self,
            StressAction::Allocate
                | StressAction::FreeSelected
                | StressAction::FreeOldest
                | StressAction::FreeRandom
                | StressAction::FreeEveryOther
                | StressAction::FreeAll
        )
    }

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
            StressAction::TypeSize => "type an exact size (37MiB, up to 1 TiB)",
            StressAction::SetSize(_) => "set the tensor size",
            StressAction::TypeSettings => {
                "allocator settings (PYTORCH_CUDA_ALLOC_CONF): frees all, new allocator"
            }
            StressAction::Reconfigure => "replace the allocator with the typed settings",
            StressAction::Up => "select the previous tensor",
            StressAction::Down => "select the next tensor",
            StressAction::OpenScenarios => "scenarios: list the built-in ones to load",
            StressAction::LoadScenario(_) => "load a built-in scenario",
            StressAction::ScenarioStep => "scenario: run the next step",
            StressAction::ScenarioRun => "scenario: run / pause (one step per device answer)",
            StressAction::ScenarioRewind => {
                "scenario: rewind (free all, the variant's settings, step 0)"
            }
            StressAction::ScenarioNextVariant => "scenario: next variant (rewound)",
            StressAction::SaveSnapshot => {
                "write a PyTorch snapshot: vramtop-stress-<unix time>.pickle in the snapshot folder"
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
    /// `torch.empty(size)` for each size, in order, stopping at the first
    /// OOM. With a `cap` (bytes), a tensor that could take reserved past it
    /// is refused before the device is asked (the allocator's
    /// [`reserved_growth_bound`](crate::alloc::CachingAllocator::reserved_growth_bound)),
    /// and those after it are not tried: the answer is `Failed` with the
    /// tensors allocated before it.
    Malloc { sizes: Vec<u64>, cap: Option<u64> },
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
    /// `vramtop-stress-<unix time>.pickle` in the worker's save folder
    /// (the current directory where it has none; the worker picks the
    /// name: the panel has no clock).
    SaveSnapshot,
    /// Frees every tensor and moves to a fresh simulated device of
    /// `capacity` bytes with `processes` on it, each holding its CUDA
    /// context (a scenario's `device_memory`, `context` and worker
    /// contexts, as `vramtop scenario` runs it: its OOM message names
    /// them), the allocator under `settings`.
    UseScenarioDevice {
        capacity: u64,
        processes: SimProcesses,
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

/// The room there was at an out-of-memory (bytes): what the failed call
/// tried to obtain from the device, what the device (or the panel's cap)
/// had free, what the allocator held reserved then, and what the device's
/// other processes held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OomRoom {
    /// PyTorch's "Tried to allocate" (the segment size asked for).
    pub tried: u64,
    /// The request as the allocator rounded it (what a cached free block
    /// would have had to hold).
    pub request: u64,
    pub device_free: u64,
    pub reserved: u64,
    /// The other processes of PyTorch's message ("Process PID has X memory
    /// in use."), as the device listed them at the OOM: how many and the
    /// bytes they held together. 0 where the device knows none (a real GPU
    /// in the panel) or the allocator's process is alone on it.
    pub others: OtherProcesses,
}

/// The processes on the device other than the allocator's own: a count
/// and their bytes (their contexts and allocations, as NVML counts them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OtherProcesses {
    pub count: u64,
    pub bytes: u64,
}

impl OtherProcesses {
    /// Those of `processes` that are not the allocator's own.
    pub fn of(processes: &[DeviceProcess]) -> Self {
        processes
            .iter()
            .filter(|p| !p.this_process)
            .fold(Self::default(), |sum, p| Self {
                count: sum.count.saturating_add(1),
                bytes: sum.bytes.saturating_add(p.used),
            })
    }
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
        room: OomRoom,
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
    /// A `Malloc` tensor the cap refused (the command's `cap`), after
    /// `allocated` succeeded; `message` gives the figures.
    CapRefused {
        allocated: Vec<NewTensor>,
        message: String,
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
