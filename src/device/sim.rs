//! The simulated GPU: always available, the default when no NVIDIA driver is
//! found, deterministic given a seed and the clock it is advanced with.
//!
//! A [`SimCluster`] holds N GPUs. Memory is handed out through [`SimMemory`]
//! handles (one per process and GPU), which implement the allocator model's
//! [`DeviceMemory`], so the same caching-allocator model runs on it as on real
//! CUDA. Each process pays a CUDA context on first use (a documented
//! assumption, [`DEFAULT_CONTEXT_OVERHEAD`]). Utilisation, power and
//! temperature respond to kernel activity. Simulated training processes run
//! their own allocator model through a step loop so that a fresh start shows a
//! living dashboard. Faults can be injected for tests.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use super::telemetry::{DriverInfo, GpuProcess, GpuReading, GpuSample, Telemetry, TelemetryError};
use super::{Kernels, pattern_byte};
use crate::alloc::{
    AllocatorConfig, CachingAllocator, DeviceError, DeviceMemory, DeviceProcess, DeviceStats,
    InMemoryDevice, MemInfo, SegmentInfo, human_bytes,
};
use crate::snapshot::Snapshot;
use crate::snapshot::capture::{snapshot_with_frames, synthetic_frames};

/// The first pid the simulation gives a process; the next ones count up
/// from it. Made up: a real process may have the same number.
pub const FIRST_PID: u32 = 4242;

/// Pids past [`FIRST_PID`] a simulation plausibly reaches (its trainers,
/// workers and stress-panel clients): where `vramtop snapshot` says a
/// missing pid may be a simulated one.
pub const PLAUSIBLE_PIDS: u32 = 10_000;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Driver memory a process's CUDA context takes on first use. Real contexts
/// take ~300 MiB (CUDA ≥ 11.7 with lazy module loading) to over 1 GiB; 500 MiB
/// is a middle figure that makes the nvidia-smi vs memory_reserved gap visible.
pub const DEFAULT_CONTEXT_OVERHEAD: u64 = 500 * MIB;

/// The longest stretch of simulated time handled in one update (ms).
pub const SIM_STEP_MS: u64 = 250;

/// Simulated time run before a one-off sample (`--once`, `serve`,
/// `doctor`), so that the simulated training processes have started and
/// every one-off command reports the same moment (ms).
pub const SIM_WARMUP_MS: u64 = 5_000;

/// Idle power as a fraction of the power limit.
const IDLE_POWER_FRACTION: f64 = 0.12;
/// Ambient and fully-loaded temperatures (°C) and the thermal time constant (ms).
const AMBIENT_C: f64 = 32.0;
const LOADED_C: f64 = 78.0;
const THERMAL_TAU_MS: f64 = 20_000.0;

/// A metric a GPU can be made not to report (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Metric {
    Memory,
    Utilization,
    Temperature,
    Power,
    Clocks,
    Fan,
    Processes,
}

/// A fault to inject into the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The GPU stops reporting a metric (NVML's NOT_SUPPORTED).
    MetricUnsupported { gpu: u32, metric: Metric },
    /// The GPU falls off the bus.
    GpuLost { gpu: u32 },
    /// Every allocation or mapping of at least this many bytes fails.
    OomAtOrAbove { gpu: u32, bytes: u64 },
}

/// How to build the simulated GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub gpus: usize,
    /// Bytes of memory per GPU.
    pub memory_per_gpu: u64,
    pub name: String,
    pub seed: u64,
    /// Bytes each process's CUDA context takes on first use.
    pub context_overhead: u64,
    /// Simulated training processes, spread over the GPUs round-robin.
    pub training_processes: usize,
    /// DataLoader workers per training process that touched CUDA: child
    /// processes that hold a CUDA context each and no tensor.
    pub dataloader_workers: usize,
    /// Power limit per GPU (milliwatts).
    pub power_limit_mw: u32,
    /// Whether the simulated GPU has a fan (SXM boards do not).
    pub has_fan: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            gpus: 1,
            memory_per_gpu: 80 * GIB,
            name: "Simulated H100 80GB".to_string(),
            seed: 42,
            context_overhead: DEFAULT_CONTEXT_OVERHEAD,
            training_processes: 0,
            dataloader_workers: 0,
            power_limit_mw: 700_000,
            has_fan: false,
        }
    }
}

impl SimConfig {
    /// GPUs of `bytes` memory each, named for their size as vendors name
    /// cards ("Simulated H100 80GB" at the default 80 GiB, "Simulated GPU
    /// 24GB", "Simulated GPU 1.5GB"), so the name never contradicts the
    /// memory shown beside it.
    pub fn with_memory(mut self, bytes: u64) -> Self {
        self.memory_per_gpu = bytes;
        self.name = sim_gpu_name(bytes);
        self
    }
}

/// The simulated GPU's name for `bytes` of memory (GiB written "GB", as on
/// cards).
pub fn sim_gpu_name(bytes: u64) -> String {
    if bytes == 80 * GIB {
        return "Simulated H100 80GB".to_string();
    }
    let gib = bytes as f64 / GIB as f64;
    let size = if bytes.is_multiple_of(GIB) {
        format!("{}GB", bytes / GIB)
    } else if gib >= 0.1 {
        format!("{:.1}GB", gib)
    } else {
        format!("{}MB", bytes >> 20)
    };
    format!("Simulated GPU {size}")
}

/// One line saying which of the flags' processes could not start and why
/// ("1 simulated training process and 3 DataLoader workers could not
/// start: no room for a 500 MiB CUDA context"), `None` when all started.
pub fn not_started_note(not_started: &[NotStarted]) -> Option<String> {
    let trainers = not_started.iter().filter(|p| p.trainer).count();
    let (trainer, workers) = if trainers > 0 {
        (
            ("simulated training process", "simulated training processes"),
            ("DataLoader worker", "DataLoader workers"),
        )
    } else {
        (
            ("", ""),
            (
                "simulated DataLoader worker",
                "simulated DataLoader workers",
            ),
        )
    };
    note_with(not_started, trainer, workers)
}

/// [`not_started_note`] in at most 80 columns for up to 99 of each kind
/// ("1 trainer and 3 workers could not start: no room for a 500 MiB CUDA
/// context"), for a status line on the simulation, which says it is one.
pub fn not_started_short_note(not_started: &[NotStarted]) -> Option<String> {
    note_with(not_started, ("trainer", "trainers"), ("worker", "workers"))
}

fn note_with(
    not_started: &[NotStarted],
    trainer: (&str, &str),
    worker: (&str, &str),
) -> Option<String> {
    let first = not_started.first()?;
    let plural =
        |n: usize, (one, many): (&str, &str)| format!("{n} {}", if n == 1 { one } else { many });
    let trainers = not_started.iter().filter(|p| p.trainer).count();
    let workers = not_started.len() - trainers;
    let mut kinds = Vec::new();
    if trainers > 0 {
        kinds.push(plural(trainers, trainer));
    }
    if workers > 0 {
        kinds.push(plural(workers, worker));
    }
    Some(format!(
        "{} could not start: no room for a {} CUDA context",
        kinds.join(" and "),
        human_bytes(first.context_bytes)
    ))
}

/// A deterministic xorshift64* generator (no dependency, reproducible).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug, Clone)]
struct SimProcess {
    command: String,
    user: String,
    /// The process that started it (init when none of the simulation's).
    parent: Option<u32>,
    /// Bytes of segments and mapped pages (the context is separate).
    allocator_bytes: u64,
    has_context: bool,
}

#[derive(Debug, Clone)]
struct SimGpu {
    name: String,
    uuid: String,
    /// Addresses and physical accounting shared by every process on the GPU.
    memory: InMemoryDevice,
    processes: BTreeMap<u32, SimProcess>,
    /// Ranges filled by the fill kernel: address → (length, seed).
    filled: BTreeMap<u64, (u64, u32)>,
    /// Kernel activity: the GPU is busy until this time (ms).
    busy_until_ms: u64,
    /// Smoothed utilisation in [0, 1].
    utilization: f64,
    temperature_c: f64,
    unsupported: BTreeSet<Metric>,
    lost: bool,
    oom_at_or_above: Option<u64>,
}

/// A simulated training run: its own caching allocator on a simulated GPU.
struct SimTrainer {
    pid: u32,
    gpu: u32,
    allocator: CachingAllocator<SimMemory>,
    /// Parameter tensors (kept for the whole run).
    weights: Vec<u64>,
    /// Optimizer state, created at the first optimizer step.
    optimizer_state: Vec<u64>,
    /// Live activations of the current forward pass.
    activations: Vec<u64>,
    /// Live parameter gradients.
    grads: Vec<u64>,
    /// Operations of the current step and the index of the next one.
    plan: Vec<TrainOp>,
    next_op: usize,
    step: u64,
    step_started_ms: u64,
    last_error: Option<String>,
    /// What the trainer did when, for its snapshot's synthetic frames:
    /// (allocator clock in µs, training step counted from 1, what it
    /// did), oldest first, strictly increasing in time; at most
    /// [`SIM_TRACE_ENTRIES`], as each made at least one trace entry (an
    /// allocation, a free or an OOM) the trace's ring may still hold.
    ops: VecDeque<(u64, u64, &'static str)>,
}

/// Trace entries each simulated training process keeps, as PyTorch's
/// `_record_memory_history(max_entries=…)`: about 100 s of training (a
/// step of 1.5 s makes about 150 entries) for a snapshot of it, in
/// about 0.5 MB a process.
pub const SIM_TRACE_ENTRIES: usize = 10_000;

/// The file name of a simulated training process's snapshots' synthetic
/// frames (the line is the training step, counted from 1).
pub const SIM_TRAINING_FRAME_FILE: &str = "<vramtop simulated training>";

impl SimTrainer {
    /// Sets the allocator's clock to `time_us` (or 1 µs after the last
    /// operation, so each one's entries have a time of their own) and
    /// notes that `what` happens then.
    fn stamp(&mut self, time_us: u64, what: &'static str) {
        let time = match self.ops.back() {
            Some(&(last, _, _)) => time_us.max(last.saturating_add(1)),
            None => time_us,
        };
        self.allocator.set_time_us(time);
        if self.ops.len() >= SIM_TRACE_ENTRIES {
            self.ops.pop_front();
        }
        // Counted from 1: a frame's line 0 reads as unknown.
        self.ops
            .push_back((time, self.step.saturating_add(1), what));
    }

    /// The allocator as a PyTorch snapshot: its layout and the trace it
    /// kept, each entry with one synthetic frame naming the training step
    /// (the line, from 1) and what the trainer was doing.
    fn snapshot(&self) -> Snapshot {
        snapshot_with_frames(&self.allocator, 0, |entry| {
            let i = self.ops.partition_point(|&(t, _, _)| t <= entry.time_us);
            match i.checked_sub(1).and_then(|i| self.ops.get(i)) {
                Some(&(_, step, what)) => synthetic_frames(SIM_TRAINING_FRAME_FILE, step, what),
                None => crate::snapshot::Frames::from(Vec::new()),
            }
        })
    }
}

impl TrainOp {
    /// What the operation is, for a snapshot's synthetic frame.
    fn label(self) -> &'static str {
        match self {
            TrainOp::Activation(_) => "forward: activation",
            TrainOp::Backward(_) => "backward: temporary, free activation",
            TrainOp::Grad => "backward: gradient",
            TrainOp::OptimizerStep => "optimizer step: Adam state, zero_grad",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum TrainOp {
    /// Forward: keep an activation of this many bytes.
    Activation(u64),
    /// Backward: a temporary of this many bytes, freed at once, and the
    /// last activation freed.
    Backward(u64),
    /// Backward: a parameter gradient (one weight's size).
    Grad,
    /// Optimizer step (creates Adam state the first time), then zero_grad.
    OptimizerStep,
}

/// Shape of the simulated training job.
const TRAIN_LAYERS: usize = 24;
const TRAIN_WEIGHT_BYTES: u64 = 96 * MIB;
const TRAIN_ACTIVATION_BYTES: u64 = 180 * MIB;
/// Milliseconds per training step.
const TRAIN_STEP_MS: u64 = 1_500;

struct SimState {
    config: SimConfig,
    now_ms: u64,
    rng: Rng,
    gpus: Vec<SimGpu>,
    trainers: Vec<SimTrainer>,
    /// Processes the flags asked for that found no room for their CUDA
    /// context at start-up, in the order they were started.
    not_started: Vec<NotStarted>,
    next_pid: u32,
}

/// A simulated process (`--sim-training`, `--sim-dataloader-workers`) that
/// could not start: its CUDA context found no room on the GPU. A real one
/// fails at `cuda init` and exits, so nvidia-smi never lists it; the
/// simulation keeps the fact so the dashboard, `--once` and `check` can
/// say it rather than leave the missing process to be guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotStarted {
    pub gpu: u32,
    /// The pid it had before it exited.
    pub pid: u32,
    /// A training process (else a DataLoader worker).
    pub trainer: bool,
    /// Bytes its CUDA context needed.
    pub context_bytes: u64,
    /// Bytes the GPU had free when it tried.
    pub free_bytes: u64,
}

/// The simulated GPUs. Cloning shares the same simulation.
#[derive(Clone)]
pub struct SimCluster {
    state: Arc<Mutex<SimState>>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster").finish_non_exhaustive()
    }
}

/// One process of the simulation on a GPU, as `check` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimProcessView {
    pub pid: u32,
    /// A training process (else a DataLoader worker or a client such as
    /// the stress panel).
    pub trainer: bool,
    /// Whether it holds a CUDA context: a client (the stress panel,
    /// `check`) pays it at its first allocation and until then holds
    /// nothing and is not listed by the telemetry, as NVML lists no process
    /// that has no context on the GPU. A process the flags start has one
    /// or has ended ([`SimCluster::not_started`]).
    pub has_context: bool,
    /// Bytes it holds: its context and its allocator's segments.
    pub bytes: u64,
}

/// Allocator figures of one simulated training process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainerView {
    pub pid: u32,
    pub gpu: u32,
    pub step: u64,
    pub stats: DeviceStats,
    pub layout: Vec<SegmentInfo>,
    pub last_error: Option<String>,
}

impl SimCluster {
    pub fn new(config: SimConfig) -> Self {
        let mut rng = Rng::new(config.seed);
        let gpus = (0..config.gpus.max(1))
            .map(|i| SimGpu {
                name: config.name.clone(),
                uuid: format!(
                    "GPU-5e1a{:04x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    i,
                    rng.next() & 0xffff,
                    rng.next() & 0xffff,
                    rng.next() & 0xffff,
                    rng.next() & 0xffff_ffff_ffff
                ),
                memory: InMemoryDevice::new(config.memory_per_gpu),
                processes: BTreeMap::new(),
                filled: BTreeMap::new(),
                busy_until_ms: 0,
                utilization: 0.0,
                temperature_c: AMBIENT_C,
                unsupported: if config.has_fan {
                    BTreeSet::new()
                } else {
                    BTreeSet::from([Metric::Fan])
                },
                lost: false,
                oom_at_or_above: None,
            })
            .collect();
        let trainers = config.training_processes;
        let cluster = SimCluster {
            state: Arc::new(Mutex::new(SimState {
                config,
                now_ms: 0,
                rng,
                gpus,
                trainers: Vec::new(),
                not_started: Vec::new(),
                next_pid: FIRST_PID,
            })),
        };
        let workers = cluster.lock().config.dataloader_workers;
        for i in 0..trainers {
            let gpus = cluster.gpu_count() as u32;
            let gpu = i as u32 % gpus;
            // A trainer that could not start never reaches its DataLoader:
            // it has no workers.
            let Some(trainer) = cluster.spawn_trainer(gpu) else {
                continue;
            };
            for w in 0..workers {
                cluster.spawn_cuda_worker(gpu, trainer, w);
            }
        }
        cluster
    }

    /// A DataLoader worker of `parent` on `gpu` that touched CUDA: it holds
    /// a context of its own and no tensor. `None` when the GPU had no room
    /// for the context: it could not start ([`Self::not_started`]).
    pub fn spawn_cuda_worker(&self, gpu: u32, parent: u32, worker: usize) -> Option<u32> {
        let memory = self.new_process(
            gpu,
            &format!("pt_data_worker {worker} (touched CUDA; simulated)"),
        );
        let pid = memory.pid;
        if let Some(p) = self
            .lock()
            .gpus
            .get_mut(gpu as usize)
            .and_then(|g| g.processes.get_mut(&pid))
        {
            p.parent = Some(parent);
        }
        self.start_with_context(gpu, pid, false).then_some(pid)
    }

    /// Creates the CUDA context of a process the flags started, as a real
    /// one does at start-up (before its first tensor, and a trainer before
    /// the DataLoader workers it forks). With no room for it the process
    /// ends, as a real one exits on the error, and is recorded as not
    /// started. Whether it started.
    fn start_with_context(&self, gpu: u32, pid: u32, trainer: bool) -> bool {
        let mut s = self.lock();
        let context = s.config.context_overhead;
        let Some(g) = s.gpus.get_mut(gpu as usize) else {
            return false;
        };
        let free = g.memory.mem_get_info().free;
        if free >= context {
            if let Some(p) = g.processes.get_mut(&pid) {
                p.has_context = true;
            }
            let contexts = g.processes.values().filter(|p| p.has_context).count() as u64;
            g.memory.set_external_use(contexts * context);
            return true;
        }
        g.processes.remove(&pid);
        s.not_started.push(NotStarted {
            gpu,
            pid,
            trainer,
            context_bytes: context,
            free_bytes: free,
        });
        false
    }

    /// The processes the flags asked for that could not start, in the order
    /// they tried.
    pub fn not_started(&self) -> Vec<NotStarted> {
        self.lock().not_started.clone()
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn gpu_count(&self) -> usize {
        self.lock().gpus.len()
    }

    /// Bytes each process's CUDA context takes on a simulated GPU.
    pub fn context_overhead(&self) -> u64 {
        self.lock().config.context_overhead
    }

    /// Milliseconds of simulated time since creation.
    pub fn now_ms(&self) -> u64 {
        self.lock().now_ms
    }

    /// A new process id for a client of the simulation (e.g. the stress panel).
    pub fn new_process(&self, gpu: u32, command: &str) -> SimMemory {
        let pid = {
            let mut s = self.lock();
            let pid = s.next_pid;
            s.next_pid += 1;
            if let Some(g) = s.gpus.get_mut(gpu as usize) {
                g.processes.insert(
                    pid,
                    SimProcess {
                        command: command.to_string(),
                        user: "sim".to_string(),
                        parent: None,
                        allocator_bytes: 0,
                        has_context: false,
                    },
                );
            }
            pid
        };
        SimMemory {
            cluster: self.clone(),
            gpu,
            pid,
        }
    }

    /// Removes a process and gives back its CUDA context, as the driver does
    /// when a process exits. Its segments must be freed by its allocator
    /// first (the simulation does not track which segment is whose).
    pub fn end_process(&self, gpu: u32, pid: u32) {
        let mut s = self.lock();
        let context = s.config.context_overhead;
        if let Some(g) = s.gpus.get_mut(gpu as usize)
            && g.processes.remove(&pid).is_some()
        {
            // The contexts still held are those of the processes that remain.
            let contexts = g.processes.values().filter(|p| p.has_context).count() as u64;
            g.memory.set_external_use(contexts * context);
        }
    }

    /// Starts a simulated training process on `gpu`: its pid, or `None`
    /// when the GPU had no room for its CUDA context and it could not
    /// start ([`Self::not_started`]).
    pub fn spawn_trainer(&self, gpu: u32) -> Option<u32> {
        let memory = self.new_process(
            gpu,
            "python train.py --model gpt-1.3b --batch 8 (simulated)",
        );
        let pid = memory.pid;
        if !self.start_with_context(gpu, pid, true) {
            return None;
        }
        let mut allocator = CachingAllocator::new(memory, gpu, AllocatorConfig::default());
        // History on, as under `python -m vramtop_probe --record-history`:
        // the dashboard's `c` writes it as a snapshot.
        allocator.record_history(Some(SIM_TRACE_ENTRIES));
        let mut s = self.lock();
        let now = s.now_ms;
        s.trainers.push(SimTrainer {
            pid,
            gpu,
            allocator,
            weights: Vec::new(),
            optimizer_state: Vec::new(),
            activations: Vec::new(),
            grads: Vec::new(),
            plan: Vec::new(),
            next_op: 0,
            step: 0,
            step_started_ms: now,
            last_error: None,
            ops: VecDeque::new(),
        });
        Some(pid)
    }

    /// Injects a fault.
    pub fn inject(&self, fault: Fault) {
        let mut s = self.lock();
        let gpu_of = |f: &Fault| match *f {
            Fault::MetricUnsupported { gpu, .. }
            | Fault::GpuLost { gpu }
            | Fault::OomAtOrAbove { gpu, .. } => gpu,
        };
        let Some(g) = s.gpus.get_mut(gpu_of(&fault) as usize) else {
            return;
        };
        match fault {
            Fault::MetricUnsupported { metric, .. } => {
                g.unsupported.insert(metric);
            }
            Fault::GpuLost { .. } => g.lost = true,
            Fault::OomAtOrAbove { bytes, .. } => {
                g.oom_at_or_above = Some(bytes);
                g.memory.fail_allocations_at_or_above(Some(bytes));
            }
        }
    }

    /// Advances the simulated clock by `millis`, running training steps and
    /// the thermal model in steps of at most [`SIM_STEP_MS`].
    pub fn advance(&self, millis: u64) {
        let mut left = millis;
        while left > 0 {
            let dt = left.min(SIM_STEP_MS);
            self.advance_step(dt);
            left -= dt;
        }
    }

    fn advance_step(&self, millis: u64) {
        // Trainers call back into the cluster through SimMemory, so they run
        // outside the lock: take them out, run, put them back.
        let (mut trainers, start, end) = {
            let mut s = self.lock();
            let start = s.now_ms;
            s.now_ms += millis;
            (std::mem::take(&mut s.trainers), start, s.now_ms)
        };
        for t in &mut trainers {
            run_trainer(t, self, start, end);
        }
        let mut s = self.lock();
        s.trainers = trainers;
        let active: BTreeSet<u32> = s.trainers.iter().map(|t| t.gpu).collect();
        let dt = millis as f64;
        let now = s.now_ms;
        let mut rng = s.rng.clone();
        for (i, g) in s.gpus.iter_mut().enumerate() {
            let busy = g.busy_until_ms > start;
            let target = if busy {
                1.0
            } else if active.contains(&(i as u32)) {
                // A training loop keeps the GPU mostly busy, with dips at
                // data loading and optimizer steps.
                0.82 + 0.16 * rng.unit()
            } else {
                0.0
            };
            // Utilisation follows its target within about a second.
            let alpha = 1.0 - (-dt / 1_000.0).exp();
            g.utilization += (target - g.utilization) * alpha;
            let t_target = AMBIENT_C + (LOADED_C - AMBIENT_C) * g.utilization;
            let beta = 1.0 - (-dt / THERMAL_TAU_MS).exp();
            g.temperature_c += (t_target - g.temperature_c) * beta;
            if g.busy_until_ms <= now {
                g.busy_until_ms = 0;
            }
        }
        s.rng = rng;
    }

    /// A telemetry source whose samples first advance the simulation by the
    /// wall-clock time since the previous sample (the live dashboard's clock).
    pub fn live_telemetry(&self) -> LiveSimTelemetry {
        LiveSimTelemetry {
            inner: self.telemetry(),
            last: std::time::Instant::now(),
        }
    }

    /// A telemetry source over this simulation.
    pub fn telemetry(&self) -> SimTelemetry {
        SimTelemetry {
            cluster: self.clone(),
        }
    }

    /// The GPU, pid and allocator counters of every simulated training
    /// process: what [`Self::trainers`] tells without copying each one's
    /// layout.
    pub fn trainer_stats(&self) -> Vec<(u32, u32, DeviceStats)> {
        self.lock()
            .trainers
            .iter()
            .map(|t| (t.gpu, t.pid, t.allocator.stats().clone()))
            .collect()
    }

    /// Every process of the simulation on `gpu`, those without a CUDA
    /// context included.
    pub fn processes_on(&self, gpu: u32) -> Vec<SimProcessView> {
        let s = self.lock();
        let Some(g) = s.gpus.get(gpu as usize) else {
            return Vec::new();
        };
        let context = s.config.context_overhead;
        g.processes
            .iter()
            .map(|(&pid, p)| SimProcessView {
                pid,
                trainer: s.trainers.iter().any(|t| t.pid == pid),
                has_context: p.has_context,
                bytes: if p.has_context {
                    p.allocator_bytes.saturating_add(context)
                } else {
                    p.allocator_bytes
                },
            })
            .collect()
    }

    /// The allocator of the simulated training process `pid` as a PyTorch
    /// memory snapshot (`torch.cuda.memory._snapshot()`): its segments,
    /// its last [`SIM_TRACE_ENTRIES`] trace entries with one synthetic
    /// frame each ([`SIM_TRAINING_FRAME_FILE`], the step counted from 1,
    /// what it did), its settings. `None` when no trainer has that pid.
    pub fn trainer_snapshot(&self, pid: u32) -> Option<Snapshot> {
        self.lock()
            .trainers
            .iter()
            .find(|t| t.pid == pid)
            .map(SimTrainer::snapshot)
    }

    /// Allocator figures of every simulated training process.
    pub fn trainers(&self) -> Vec<TrainerView> {
        self.lock()
            .trainers
            .iter()
            .map(|t| TrainerView {
                pid: t.pid,
                gpu: t.gpu,
                step: t.step,
                stats: t.allocator.stats().clone(),
                layout: t.allocator.layout(),
                last_error: t.last_error.clone(),
            })
            .collect()
    }

    fn sample_gpu(&self, s: &SimState, index: usize) -> GpuReading {
        let g = &s.gpus[index];
        if g.lost {
            return GpuReading::Lost {
                index: index as u32,
                reason: "GPU has fallen off the bus (simulated fault)".to_string(),
                cause: super::telemetry::Unanswered::Lost,
            };
        }
        let has = |m: Metric| !g.unsupported.contains(&m);
        let info = g.memory.mem_get_info();
        let mut sample = GpuSample::unknown(index as u32, g.name.clone());
        sample.uuid = Some(g.uuid.clone());
        if has(Metric::Memory) {
            sample.memory_total = Some(info.total);
            sample.memory_free = Some(info.free);
            sample.memory_used = Some(info.total - info.free);
        }
        let util = (g.utilization * 100.0).round().clamp(0.0, 100.0) as u32;
        if has(Metric::Utilization) {
            sample.gpu_utilization = Some(util);
            sample.memory_utilization = Some((f64::from(util) * 0.45).round() as u32);
        }
        if has(Metric::Temperature) {
            sample.temperature_c = Some(g.temperature_c.round() as u32);
        }
        if has(Metric::Power) {
            let limit = f64::from(s.config.power_limit_mw);
            let draw = limit * (IDLE_POWER_FRACTION + (1.0 - IDLE_POWER_FRACTION) * g.utilization);
            sample.power_draw_mw = Some(draw.round() as u32);
            sample.power_limit_mw = Some(s.config.power_limit_mw);
        }
        if has(Metric::Clocks) {
            // Boost clocks under load, idle clocks otherwise (MHz).
            sample.sm_clock_mhz = Some(if util > 5 { 1980 } else { 345 });
            sample.memory_clock_mhz = Some(2619);
        }
        if has(Metric::Fan) {
            sample.fan_percent = Some(30 + util * 60 / 100);
        }
        if has(Metric::Processes) {
            sample.processes = Some(
                g.processes
                    .iter()
                    .filter(|(_, p)| p.has_context)
                    .map(|(&pid, p)| GpuProcess {
                        user: Some(p.user.clone()),
                        command: Some(p.command.clone()),
                        parent_pid: Some(p.parent.unwrap_or(1)),
                        ..GpuProcess::new(pid, Some(p.allocator_bytes + s.config.context_overhead))
                    })
                    .collect(),
            );
        }
        GpuReading::Ok(sample)
    }
}

fn plan_step(t: &mut SimTrainer, rng: &mut Rng) {
    // Sequence length varies step to step, as with dynamic batching: the
    // activation sizes change and the cache fragments.
    let scale = 0.75 + 0.5 * rng.unit();
    let act = ((TRAIN_ACTIVATION_BYTES as f64 * scale) as u64 / TRAIN_LAYERS as u64).max(1);
    let mut plan = Vec::new();
    for _ in 0..TRAIN_LAYERS {
        plan.push(TrainOp::Activation(act));
    }
    for _ in 0..TRAIN_LAYERS {
        plan.push(TrainOp::Backward(act / 2));
        plan.push(TrainOp::Grad);
    }
    plan.push(TrainOp::OptimizerStep);
    t.plan = plan;
    t.next_op = 0;
}

fn run_trainer(t: &mut SimTrainer, cluster: &SimCluster, start_ms: u64, end_ms: u64) {
    let weight = TRAIN_WEIGHT_BYTES / TRAIN_LAYERS as u64;
    if t.weights.is_empty() && t.last_error.is_none() {
        t.stamp(start_ms.saturating_mul(1000), "load weights");
        for _ in 0..TRAIN_LAYERS {
            match t.allocator.malloc(weight, 0) {
                Ok(p) => t.weights.push(p),
                Err(e) => {
                    t.last_error = Some(e.to_string());
                    return;
                }
            }
        }
    }
    let mut rng = Rng::new(cluster.lock().rng.0 ^ u64::from(t.pid));
    let mut now = start_ms;
    while now < end_ms {
        if t.next_op >= t.plan.len() {
            plan_step(t, &mut rng);
            t.step_started_ms = now;
        }
        // Operations are spread evenly over the step.
        let per_op = (TRAIN_STEP_MS / t.plan.len().max(1) as u64).max(1);
        let due = t.step_started_ms + per_op * t.next_op as u64;
        if due >= end_ms {
            break;
        }
        now = now.max(due);
        let op = t.plan[t.next_op];
        t.stamp(now.saturating_mul(1000), op.label());
        t.next_op += 1;
        if let Err(e) = apply_train_op(t, op, weight) {
            t.last_error = Some(e);
        }
        if t.next_op >= t.plan.len() {
            t.step += 1;
        }
    }
    t.allocator.set_time_us(end_ms * 1000);
}

fn apply_train_op(t: &mut SimTrainer, op: TrainOp, weight: u64) -> Result<(), String> {
    let a = &mut t.allocator;
    match op {
        TrainOp::Activation(bytes) => t
            .activations
            .push(a.malloc(bytes, 0).map_err(|e| e.to_string())?),
        TrainOp::Backward(bytes) => {
            let tmp = a.malloc(bytes, 0).map_err(|e| e.to_string())?;
            a.free(tmp).map_err(|e| e.to_string())?;
            if let Some(act) = t.activations.pop() {
                a.free(act).map_err(|e| e.to_string())?;
            }
        }
        TrainOp::Grad => t
            .grads
            .push(a.malloc(weight, 0).map_err(|e| e.to_string())?),
        TrainOp::OptimizerStep => {
            if t.optimizer_state.is_empty() {
                // Adam: two state tensors per parameter.
                for _ in 0..2 * t.weights.len() {
                    t.optimizer_state
                        .push(a.malloc(weight, 0).map_err(|e| e.to_string())?);
                }
            }
            // zero_grad(set_to_none=True)
            for g in t.grads.drain(..) {
                a.free(g).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// Memory of one simulated process on one simulated GPU.
#[derive(Debug, Clone)]
pub struct SimMemory {
    cluster: SimCluster,
    gpu: u32,
    pid: u32,
}

impl SimMemory {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn gpu(&self) -> u32 {
        self.gpu
    }

    pub fn cluster(&self) -> &SimCluster {
        &self.cluster
    }

    /// Runs `f` on this GPU and process after paying the CUDA context on
    /// first use (which itself needs memory).
    fn with_context<T>(
        &self,
        f: impl FnOnce(&mut SimGpu, u64) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        let mut s = self.cluster.lock();
        let context = s.config.context_overhead;
        let g = s
            .gpus
            .get_mut(self.gpu as usize)
            .ok_or_else(|| DeviceError::Other(format!("no simulated GPU {}", self.gpu)))?;
        if g.lost {
            return Err(DeviceError::Other(
                "GPU has fallen off the bus (simulated fault)".to_string(),
            ));
        }
        let needs_context = g.processes.get(&self.pid).is_some_and(|p| !p.has_context);
        if needs_context {
            if g.memory.mem_get_info().free < context {
                return Err(DeviceError::OutOfMemory);
            }
            if let Some(p) = g.processes.get_mut(&self.pid) {
                p.has_context = true;
            }
            let contexts = g.processes.values().filter(|p| p.has_context).count() as u64;
            g.memory.set_external_use(contexts * context);
        }
        f(g, context)
    }

    fn account(g: &mut SimGpu, pid: u32, delta: i64) {
        if let Some(p) = g.processes.get_mut(&pid) {
            p.allocator_bytes = p.allocator_bytes.saturating_add_signed(delta);
        }
    }
}

impl DeviceMemory for SimMemory {
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError> {
        let pid = self.pid;
        self.with_context(|g, _| {
            let ptr = g.memory.malloc(size)?;
            Self::account(g, pid, size as i64);
            Ok(ptr)
        })
    }

    fn free(&mut self, ptr: u64, size: u64) {
        let pid = self.pid;
        let _ = self.with_context(|g, _| {
            g.memory.free(ptr, size);
            g.filled.retain(|&a, _| a < ptr || a >= ptr + size);
            Self::account(g, pid, -(size as i64));
            Ok(())
        });
    }

    fn mem_get_info(&self) -> MemInfo {
        let s = self.cluster.lock();
        s.gpus
            .get(self.gpu as usize)
            .map_or(MemInfo { free: 0, total: 0 }, |g| g.memory.mem_get_info())
    }

    fn reserve_address_range(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.with_context(|g, _| g.memory.reserve_address_range(size))
    }

    fn release_address_range(&mut self, base: u64, size: u64) {
        let _ = self.with_context(|g, _| {
            g.memory.release_address_range(base, size);
            Ok(())
        });
    }

    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        let pid = self.pid;
        self.with_context(|g, _| {
            g.memory.map(addr, size)?;
            Self::account(g, pid, size as i64);
            Ok(())
        })
    }

    fn unmap(&mut self, addr: u64, size: u64) {
        let pid = self.pid;
        let _ = self.with_context(|g, _| {
            g.memory.unmap(addr, size);
            g.filled.retain(|&a, _| a < addr || a >= addr + size);
            Self::account(g, pid, -(size as i64));
            Ok(())
        });
    }

    /// The GPU's processes with a context, as the sampler's NVML list
    /// gives them (context and allocator bytes each), by pid.
    fn processes(&self) -> Vec<DeviceProcess> {
        let s = self.cluster.lock();
        let context = s.config.context_overhead;
        s.gpus
            .get(self.gpu as usize)
            .map(|g| {
                g.processes
                    .iter()
                    .filter(|(_, p)| p.has_context)
                    .map(|(&pid, p)| DeviceProcess {
                        pid,
                        used: p.allocator_bytes.saturating_add(context),
                        this_process: pid == self.pid,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Kernels for SimMemory {
    fn fill(&mut self, ptr: u64, len: u64, seed: u32) -> Result<(), DeviceError> {
        self.with_context(|g, _| {
            g.filled.insert(ptr, (len, seed));
            Ok(())
        })
    }

    fn verify(&mut self, ptr: u64, len: u64, seed: u32) -> Result<Option<u64>, DeviceError> {
        self.with_context(|g, _| {
            // The simulation keeps which seed filled which range rather than
            // the bytes; a range filled with another seed differs at the
            // first offset where the two patterns differ.
            Ok(match g.filled.get(&ptr) {
                Some(&(filled_len, filled_seed)) if filled_len >= len && filled_seed == seed => {
                    None
                }
                Some(&(filled_len, filled_seed)) => (0..len.min(filled_len))
                    .find(|&o| pattern_byte(o, filled_seed) != pattern_byte(o, seed))
                    .or(Some(filled_len.min(len))),
                None => Some(0),
            })
        })
    }

    fn burn(&mut self, millis: u32) -> Result<(), DeviceError> {
        let now = self.cluster.now_ms();
        self.with_context(|g, _| {
            g.busy_until_ms = g.busy_until_ms.max(now + u64::from(millis));
            Ok(())
        })
    }
}

/// Telemetry over a [`SimCluster`].
#[derive(Debug, Clone)]
pub struct SimTelemetry {
    cluster: SimCluster,
}

impl Telemetry for SimTelemetry {
    fn backend_name(&self) -> &'static str {
        "sim"
    }

    fn driver_info(&self) -> DriverInfo {
        DriverInfo {
            driver_version: Some("simulated".to_string()),
            nvml_version: None,
            cuda_driver_version: None,
        }
    }

    fn sample(&mut self) -> Result<Vec<GpuReading>, TelemetryError> {
        let s = self.cluster.lock();
        Ok((0..s.gpus.len())
            .map(|i| self.cluster.sample_gpu(&s, i))
            .collect())
    }
}

/// [`SimTelemetry`] driven by the wall clock.
#[derive(Debug, Clone)]
pub struct LiveSimTelemetry {
    inner: SimTelemetry,
    last: std::time::Instant,
}

impl Telemetry for LiveSimTelemetry {
    fn backend_name(&self) -> &'static str {
        "sim"
    }

    fn driver_info(&self) -> DriverInfo {
        self.inner.driver_info()
    }

    fn sample(&mut self) -> Result<Vec<GpuReading>, TelemetryError> {
        let now = std::time::Instant::now();
        let elapsed_ms = now.duration_since(self.last).as_millis();
        self.inner
            .cluster
            .advance(u64::try_from(elapsed_ms).unwrap_or(u64::MAX));
        self.last = now;
        self.inner.sample()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_simulated_gpus_name_follows_its_memory() {
        assert_eq!(sim_gpu_name(80 * GIB), "Simulated H100 80GB");
        assert_eq!(sim_gpu_name(24 * GIB), "Simulated GPU 24GB");
        assert_eq!(sim_gpu_name(3 * GIB / 2), "Simulated GPU 1.5GB");
        assert_eq!(sim_gpu_name(64 << 20), "Simulated GPU 64MB");
        let c = SimConfig::default().with_memory(8 * GIB);
        assert_eq!(
            (c.memory_per_gpu, c.name.as_str()),
            (8 * GIB, "Simulated GPU 8GB")
        );
    }

    use super::*;

    fn ok(r: &GpuReading) -> &GpuSample {
        r.sample().expect("GPU answers")
    }

    #[test]
    fn fresh_gpu_reports_no_processes_and_all_memory_free() {
        let c = SimCluster::new(SimConfig::default());
        let s = c.telemetry().sample().expect("sim samples");
        let g = ok(&s[0]);
        assert_eq!(g.memory_total, Some(80 * GIB));
        assert_eq!(g.memory_used, Some(0));
        assert!(g.listed_processes().is_empty());
        assert_eq!(g.fan_percent, None, "an SXM board has no fan: n/a, not 0");
    }

    #[test]
    fn first_allocation_pays_the_cuda_context() {
        let c = SimCluster::new(SimConfig::default());
        let mut mem = c.new_process(0, "test");
        let p = mem.malloc(20 * MIB).expect("fits");
        let s = c.telemetry().sample().expect("sim samples");
        let g = ok(&s[0]);
        assert_eq!(g.memory_used, Some(20 * MIB + DEFAULT_CONTEXT_OVERHEAD));
        assert_eq!(g.listed_processes().len(), 1);
        assert_eq!(
            g.listed_processes()[0].used_memory,
            Some(20 * MIB + DEFAULT_CONTEXT_OVERHEAD)
        );
        mem.free(p, 20 * MIB);
        let g2 = c.telemetry().sample().expect("sim samples");
        assert_eq!(
            ok(&g2[0]).memory_used,
            Some(DEFAULT_CONTEXT_OVERHEAD),
            "the context stays"
        );
        c.end_process(0, mem.pid());
        assert_eq!(
            ok(&c.telemetry().sample().expect("sim")[0]).memory_used,
            Some(0)
        );
    }

    #[test]
    fn ending_a_process_without_a_context_keeps_the_others_contexts() {
        let c = SimCluster::new(SimConfig::default());
        let mut a = c.new_process(0, "a");
        let p = a.malloc(2 * MIB).expect("fits");
        a.free(p, 2 * MIB);
        let idle = c.new_process(0, "never allocated");
        c.end_process(0, idle.pid());
        let used = ok(&c.telemetry().sample().expect("sim")[0]).memory_used;
        assert_eq!(
            used,
            Some(DEFAULT_CONTEXT_OVERHEAD),
            "a's context is still held"
        );
        c.end_process(0, a.pid());
        assert_eq!(
            ok(&c.telemetry().sample().expect("sim")[0]).memory_used,
            Some(0)
        );
    }

    #[test]
    fn a_trainers_snapshot_replays_as_a_full_match_with_frames_naming_its_steps() {
        use crate::snapshot::{read_snapshot, replay::verify, snapshot_to_bytes};
        let c = SimCluster::new(SimConfig {
            training_processes: 1,
            seed: 5,
            ..SimConfig::default()
        });
        c.advance(10_000);
        let pid = c.trainers()[0].pid;
        assert!(c.trainer_snapshot(pid + 100).is_none(), "no such trainer");
        let snapshot = c.trainer_snapshot(pid).expect("the trainer's snapshot");
        let trace = &snapshot.device_traces[0];
        assert!(!trace.is_empty() && !snapshot.segments.is_empty());
        assert!(
            trace
                .iter()
                .all(|e| e.frames.len() == 1 && &*e.frames[0].filename == SIM_TRAINING_FRAME_FILE),
            "one synthetic frame each"
        );
        let names: BTreeSet<&str> = trace.iter().map(|e| &*e.frames[0].name).collect();
        for what in ["load weights", "forward: activation", "backward: gradient"] {
            assert!(names.contains(what), "{what}: {names:?}");
        }
        let last_step = trace.last().map(|e| e.frames[0].line);
        // Counted from 1 (a line of 0 reads as unknown): 10 s is 6 steps
        // and a part.
        assert_eq!(trace[0].frames[0].line, 1, "the weights, before step 1");
        assert_eq!(last_step, Some(7));
        // What `c` writes reads back and replays as what the model did.
        let read = read_snapshot(&snapshot_to_bytes(&snapshot)).expect("reads back");
        assert!(verify(&read).full_match());
        // A long run keeps the last entries only: the trace starts mid-run,
        // and still replays.
        c.advance(200_000);
        let long = c.trainer_snapshot(pid).expect("the trainer's snapshot");
        assert_eq!(long.device_traces[0].len(), SIM_TRACE_ENTRIES);
        assert!(verify(&long).full_match());
    }

    #[test]
    fn allocator_model_runs_on_the_simulated_gpu() {
        let c = SimCluster::new(SimConfig::default());
        let mem = c.new_process(0, "model");
        let mut m = CachingAllocator::new(mem, 0, AllocatorConfig::default());
        let a = m.malloc(6 * MIB, 0).expect("fits");
        m.free(a).expect("known");
        let used = ok(&c.telemetry().sample().expect("sim")[0]).memory_used;
        assert_eq!(
            used,
            Some(20 * MIB + DEFAULT_CONTEXT_OVERHEAD),
            "cached segment stays"
        );
        m.empty_cache();
        let used = ok(&c.telemetry().sample().expect("sim")[0]).memory_used;
        assert_eq!(used, Some(DEFAULT_CONTEXT_OVERHEAD));
    }

    #[test]
    fn burn_raises_utilisation_power_and_temperature_then_they_fall() {
        let c = SimCluster::new(SimConfig::default());
        let mut mem = c.new_process(0, "burn");
        let idle = ok(&c.telemetry().sample().expect("sim")[0]).clone();
        mem.burn(60_000).expect("sim burns");
        c.advance(30_000);
        let hot = ok(&c.telemetry().sample().expect("sim")[0]).clone();
        assert!(hot.gpu_utilization > Some(95), "{hot:?}");
        assert!(hot.power_draw_mw > idle.power_draw_mw);
        assert!(hot.temperature_c > idle.temperature_c);
        c.advance(120_000);
        let cool = ok(&c.telemetry().sample().expect("sim")[0]).clone();
        assert!(cool.gpu_utilization < Some(5), "{cool:?}");
        assert!(cool.temperature_c < hot.temperature_c);
    }

    #[test]
    fn fill_then_verify_with_the_same_seed_passes_and_another_seed_fails() {
        let c = SimCluster::new(SimConfig::default());
        let mut mem = c.new_process(0, "kernels");
        let p = mem.malloc(2 * MIB).expect("fits");
        mem.fill(p, 2 * MIB, 7).expect("fills");
        assert_eq!(mem.verify(p, 2 * MIB, 7).expect("verifies"), None);
        assert_eq!(mem.verify(p, 2 * MIB, 8).expect("verifies"), Some(0));
        mem.free(p, 2 * MIB);
    }

    #[test]
    fn injected_faults_show_as_missing_metrics_lost_gpus_and_ooms() {
        let c = SimCluster::new(SimConfig {
            gpus: 2,
            ..SimConfig::default()
        });
        c.inject(Fault::MetricUnsupported {
            gpu: 0,
            metric: Metric::Power,
        });
        c.inject(Fault::GpuLost { gpu: 1 });
        c.inject(Fault::OomAtOrAbove { gpu: 0, bytes: GIB });
        let s = c.telemetry().sample().expect("sim samples");
        assert_eq!(ok(&s[0]).power_draw_mw, None);
        assert!(ok(&s[0]).temperature_c.is_some());
        assert!(matches!(s[1], GpuReading::Lost { index: 1, .. }));
        let mut mem = c.new_process(0, "oom");
        assert_eq!(mem.malloc(GIB), Err(DeviceError::OutOfMemory));
        assert!(mem.malloc(GIB - MIB).is_ok());
    }

    #[test]
    fn training_process_runs_steps_and_is_deterministic() {
        let run = || {
            let c = SimCluster::new(SimConfig {
                training_processes: 1,
                ..SimConfig::default()
            });
            for _ in 0..10 {
                c.advance(1_000);
            }
            let t = c.trainers().remove(0);
            let s = c.telemetry().sample().expect("sim");
            (
                t.step,
                t.stats.reserved_bytes.all.peak,
                ok(&s[0]).memory_used,
                t.last_error,
            )
        };
        let a = run();
        assert!(a.0 >= 5, "steps ran: {a:?}");
        assert!(
            a.1 > (TRAIN_WEIGHT_BYTES * 3) as i64,
            "weights + Adam state + activations"
        );
        assert_eq!(a.3, None);
        assert_eq!(a, run(), "same seed, same clock: same figures");
    }

    fn listed_pids(c: &SimCluster, gpu: usize) -> Vec<u32> {
        let s = c.telemetry().sample().expect("sim");
        ok(&s[gpu])
            .listed_processes()
            .iter()
            .map(|p| p.pid)
            .collect()
    }

    #[test]
    fn a_trainer_takes_its_context_before_its_dataloader_workers_and_the_rest_do_not_start() {
        // 1 GiB: room for two 500 MiB contexts. The first trainer starts,
        // then its first worker; its other three workers and the second
        // trainer (which so never forks any) could not start.
        let c = SimCluster::new(
            SimConfig {
                training_processes: 2,
                dataloader_workers: 4,
                ..SimConfig::default()
            }
            .with_memory(GIB),
        );
        c.advance(SIM_WARMUP_MS);
        assert_eq!(listed_pids(&c, 0), [4242, 4243]);
        let trainers: Vec<u32> = c.trainers().iter().map(|t| t.pid).collect();
        assert_eq!(
            trainers,
            [4242],
            "only the trainer that started has an allocator"
        );
        let not_started: Vec<(u32, bool)> =
            c.not_started().iter().map(|p| (p.pid, p.trainer)).collect();
        assert_eq!(
            not_started,
            [(4244, false), (4245, false), (4246, false), (4247, true)]
        );
        assert_eq!(
            not_started_note(&c.not_started()).as_deref(),
            Some(
                "1 simulated training process and 3 DataLoader workers could not start: \
                 no room for a 500 MiB CUDA context"
            )
        );
    }

    #[test]
    fn every_trainer_with_an_allocator_is_listed_and_every_other_asked_for_did_not_start() {
        for gib in 1..=3u64 {
            for training in 0..=4usize {
                for workers in 0..=3usize {
                    let c = SimCluster::new(
                        SimConfig {
                            gpus: 2,
                            training_processes: training,
                            dataloader_workers: workers,
                            ..SimConfig::default()
                        }
                        .with_memory(gib * GIB),
                    );
                    c.advance(SIM_WARMUP_MS);
                    let case = format!("{gib} GiB, {training} trainers, {workers} workers");
                    let trainers = c.trainers();
                    for t in &trainers {
                        assert!(
                            listed_pids(&c, t.gpu as usize).contains(&t.pid),
                            "{case}: pid {} has an allocator but is not listed",
                            t.pid
                        );
                    }
                    let not_started = c.not_started();
                    let failed_trainers = not_started.iter().filter(|p| p.trainer).count();
                    assert_eq!(trainers.len() + failed_trainers, training, "{case}");
                    let listed = listed_pids(&c, 0).len() + listed_pids(&c, 1).len();
                    let failed_workers = not_started.len() - failed_trainers;
                    assert_eq!(
                        listed - trainers.len() + failed_workers,
                        trainers.len() * workers,
                        "{case}: each started trainer's workers are listed or not started"
                    );
                    assert_eq!(
                        not_started_note(&not_started).is_some(),
                        !not_started.is_empty()
                    );
                }
            }
        }
    }

    #[test]
    fn the_note_names_workers_simulated_when_no_trainer_failed() {
        let worker = |pid| NotStarted {
            gpu: 0,
            pid,
            trainer: false,
            context_bytes: DEFAULT_CONTEXT_OVERHEAD,
            free_bytes: 0,
        };
        assert_eq!(not_started_note(&[]), None);
        assert_eq!(not_started_short_note(&[]), None);
        assert_eq!(
            not_started_note(&[worker(1)]).as_deref(),
            Some(
                "1 simulated DataLoader worker could not start: no room for a 500 MiB CUDA context"
            )
        );
        // 99 of each kind: the status line's wording still fits 80 columns.
        let many: Vec<NotStarted> = (0..198)
            .map(|pid| NotStarted {
                trainer: pid < 99,
                ..worker(pid)
            })
            .collect();
        let short = not_started_short_note(&many).unwrap_or_default();
        assert!(
            short.starts_with("99 trainers and 99 workers could not start"),
            "{short}"
        );
        assert!(short.chars().count() <= 80, "{short}");
    }
}
