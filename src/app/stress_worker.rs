//! The stress panel's device side: an executor that owns a
//! [`CachingAllocator`] and applies [`StressCommand`]s, and a worker thread
//! that runs it.
//!
//! The executor lives on its own std thread behind channels because a
//! CUDA-backed allocator makes blocking driver calls (and its context is
//! bound to the thread that created it); the simulated device goes the same
//! way so both behave alike. Whatever the executor still holds is freed,
//! and the cache emptied, when it is dropped: on a normal exit, when the
//! panel's owner drops the worker, and while unwinding from a panic.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use rustc_hash::FxHashMap;

use crate::alloc::{
    AllocError, AllocatorConfig, CachingAllocator, DeviceMemory, InMemoryDevice, SimProcesses,
};
use crate::device::Kernels;
use crate::device::cuda::CudaMemory;
use crate::device::sim::SimCluster;
use crate::snapshot::capture::{snapshot_with_frames, synthetic_frames};
use crate::snapshot::{Frames, Snapshot, write_snapshot_file};

use super::stress::{
    BadTensor, NewTensor, OomRoom, OtherProcesses, PanelDevice, StressCommand, StressOutcome,
    StressResult,
};

/// The command the simulation lists for the panel's process. Marked
/// simulated like the simulation's other processes: a bare "vramtop stress
/// panel" read as vramtop itself holding memory on a GPU (on a real GPU the
/// driver lists vramtop's own command line instead).
pub const STRESS_COMMAND: &str = "vramtop stress panel (simulated)";
/// The stream every stress tensor is allocated on (the default stream).
const STREAM: u64 = 0;
/// Trace entries the stress allocator keeps (`_record_memory_history`'s
/// `max_entries`): about 40 MB at most; an older start is rebuilt by the
/// replay from the final layout.
const TRACE_ENTRIES: usize = 1_000_000;
/// Microseconds of the trace clock per command: command `n` stamps its
/// entries `n × COMMAND_TIME_US`, so an entry's time names its command.
const COMMAND_TIME_US: u64 = 1_000;

/// Opens another handle on the executor's device, for the fresh allocator
/// of a reconfigure (the old allocator and its handle are dropped once
/// everything they held is freed).
pub type Reopen<D> = Box<dyn FnMut() -> Result<D, String>>;

/// Applies stress commands to an allocator.
pub struct StressExecutor<D: DeviceMemory> {
    allocator: CachingAllocator<D>,
    /// Whether the device is a real GPU (it then gets a cap).
    real_gpu: bool,
    /// How a reconfigure gets a device for its fresh allocator; `None`:
    /// reconfigure is refused.
    reopen: Option<Reopen<D>>,
    /// The device's fill/verify kernels; `None`: tensors are not filled and
    /// verify is refused.
    kernels: Option<fn(&mut D) -> &mut dyn Kernels>,
    /// Live tensors' (seed, requested bytes) by address, while kernels run.
    filled: FxHashMap<u64, (u32, u64)>,
    /// The id the next tensor gets (its fill seed): 1, 2, … in allocation
    /// order, as the panel numbers its tensors.
    next_id: u64,
    /// A one-frame traceback per command executed, naming it: the frames of
    /// the trace entries of an exported snapshot.
    commands: Vec<Frames>,
    /// Where a saved snapshot is written; `None`: the current directory.
    save_dir: Option<PathBuf>,
}

/// The kernels of a device that has them.
fn as_kernels<D: Kernels>(device: &mut D) -> &mut dyn Kernels {
    device
}

impl<D: DeviceMemory + Kernels> StressExecutor<D> {
    /// Fills every new tensor with the pattern of its id
    /// ([`crate::device::pattern_byte`], seed = the tensor's id) and
    /// answers [`StressCommand::Verify`].
    pub fn with_kernels(mut self) -> Self {
        self.kernels = Some(as_kernels::<D>);
        self
    }
}

impl<D: DeviceMemory> StressExecutor<D> {
    pub fn new(mut allocator: CachingAllocator<D>, real_gpu: bool) -> Self {
        allocator.record_history(Some(TRACE_ENTRIES));
        StressExecutor {
            allocator,
            real_gpu,
            reopen: None,
            kernels: None,
            filled: FxHashMap::default(),
            next_id: 1,
            commands: Vec::new(),
            save_dir: None,
        }
    }

    /// Writes saved snapshots into `dir` (`None`: the current directory).
    pub fn saving_in(mut self, dir: Option<PathBuf>) -> Self {
        self.save_dir = dir;
        self
    }

    /// Lets [`StressCommand::Reconfigure`] replace the allocator: `reopen`
    /// gives the device the fresh allocator runs on (for the simulated GPU
    /// a clone of the process's handle, for CUDA a new `CudaMemory` on the
    /// same primary context).
    pub fn with_reopen(mut self, reopen: impl FnMut() -> Result<D, String> + 'static) -> Self {
        self.reopen = Some(Box::new(reopen));
        self
    }

    pub fn allocator(&self) -> &CachingAllocator<D> {
        &self.allocator
    }

    fn result(&self, outcome: StressOutcome) -> StressResult {
        let info = self.allocator.device().mem_get_info();
        StressResult {
            outcome,
            stats: self.allocator.stats().clone(),
            layout: self.allocator.layout(),
            driver_used: info.total.saturating_sub(info.free),
        }
    }

    /// The first answer: where the worker runs and how much was free.
    pub fn started(&self) -> StressResult {
        let info = self.allocator.device().mem_get_info();
        self.result(StressOutcome::Started {
            gpu: self.allocator.device_index(),
            free_at_start: info.free,
            total: info.total,
            real_gpu: self.real_gpu,
        })
    }

    /// The block sizes of `addresses`, as the allocator carved them (one
    /// look-up each, so that many tensors in one command stay linear).
    fn tensors(&self, allocated: &[(u64, u64)]) -> Vec<NewTensor> {
        if allocated.is_empty() {
            return Vec::new();
        }
        let live: rustc_hash::FxHashMap<u64, u64> = self
            .allocator
            .live_allocations()
            .iter()
            .map(|l| (l.address, l.size))
            .collect();
        allocated
            .iter()
            .map(|&(address, requested)| NewTensor {
                address,
                size: live.get(&address).copied().unwrap_or(requested),
                requested,
            })
            .collect()
    }

    fn malloc(&mut self, sizes: &[u64], cap: Option<u64>) -> StressOutcome {
        let mut done = Vec::with_capacity(sizes.len());
        for &size in sizes {
            if let Some(cap) = cap
                && let Some(message) = self.cap_refusal(size, cap, done.len())
            {
                return StressOutcome::CapRefused {
                    allocated: self.tensors(&done),
                    message,
                };
            }
            match self.allocator.malloc(size, STREAM) {
                Ok(address) => {
                    done.push((address, size));
                    let id = self.next_id;
                    self.next_id += 1;
                    if let Err(message) = self.fill(address, size, id) {
                        return StressOutcome::Failed {
                            allocated: self.tensors(&done),
                            message,
                        };
                    }
                }
                Err(AllocError::OutOfMemory(oom)) => {
                    return StressOutcome::OutOfMemory {
                        allocated: self.tensors(&done),
                        message: oom.message(),
                        reserved_but_unallocated: oom.reserved_but_unallocated(),
                        room: OomRoom {
                            tried: oom.alloc_size,
                            request: oom.rounded,
                            // A memory fraction (the panel's cap) bounds
                            // what the allocator may take, free or not.
                            device_free: oom.allowed.map_or(oom.device_free, |allowed| {
                                oom.device_free.min(allowed.saturating_sub(oom.reserved))
                            }),
                            reserved: oom.reserved,
                            // Nothing ran between the OOM and here: the
                            // device lists what the message named.
                            others: OtherProcesses::of(&self.allocator.device().processes()),
                        },
                    };
                }
                Err(e) => {
                    return StressOutcome::Failed {
                        allocated: self.tensors(&done),
                        message: e.to_string(),
                    };
                }
            }
        }
        StressOutcome::Allocated(self.tensors(&done))
    }

    /// Why a tensor of `size` bytes is refused under `cap` (bytes): the
    /// most its malloc could add to reserved (nothing when a cached block
    /// serves it; else the segment it would obtain) would take reserved past
    /// the cap. `before`: tensors of the same command allocated already.
    fn cap_refusal(&self, size: u64, cap: u64, before: usize) -> Option<String> {
        let fmt = crate::alloc::sizing::display_bytes;
        let reserved = self.allocator.memory_reserved();
        let growth = self.allocator.reserved_growth_bound(size, STREAM);
        let total = reserved.saturating_add(growth);
        (total > cap).then(|| {
            let after = match before {
                0 => String::new(),
                1 => " after 1 tensor".to_string(),
                n => format!(" after {n} tensors"),
            };
            format!(
                "refused{after}: reserved {} + a new {} segment for {} = {} exceeds the stress \
                 cap of {}",
                fmt(reserved),
                fmt(growth),
                fmt(size),
                fmt(total),
                fmt(cap)
            )
        })
    }

    /// Fills a new tensor with its id's pattern, when there are kernels.
    fn fill(&mut self, address: u64, len: u64, id: u64) -> Result<(), String> {
        let Some(kernels) = self.kernels else {
            return Ok(());
        };
        // Seeds are 32-bit: ids past 2^32 wrap, still distinct from their
        // neighbours.
        let seed = id as u32;
        self.filled.insert(address, (seed, len));
        kernels(self.allocator.device_mut())
            .fill(address, len, seed)
            .map_err(|e| format!("fill of tensor #{id} failed: {e}"))
    }

    /// Verifies every live tensor, oldest first; stops at the first bad one.
    fn verify(&mut self) -> StressOutcome {
        let Some(kernels) = self.kernels else {
            return StressOutcome::Failed {
                allocated: Vec::new(),
                message: "this device has no verify kernel".to_string(),
            };
        };
        let mut live: Vec<(u64, u32, u64)> = self
            .filled
            .iter()
            .map(|(&address, &(seed, len))| (address, seed, len))
            .collect();
        live.sort_unstable_by_key(|&(address, seed, _)| (seed, address));
        let mut checked = 0;
        for (address, seed, len) in live {
            match kernels(self.allocator.device_mut()).verify(address, len, seed) {
                Ok(None) => checked += 1,
                Ok(Some(offset)) => {
                    return StressOutcome::Verified {
                        checked,
                        bad: Some(BadTensor { address, offset }),
                    };
                }
                Err(e) => {
                    return StressOutcome::Failed {
                        allocated: Vec::new(),
                        message: format!("verify failed at {address:#x}: {e}"),
                    };
                }
            }
        }
        StressOutcome::Verified { checked, bad: None }
    }

    fn free(&mut self, addresses: &[u64]) -> StressOutcome {
        let mut freed = Vec::with_capacity(addresses.len());
        for &a in addresses {
            match self.allocator.free(a) {
                Ok(()) => {
                    self.filled.remove(&a);
                    freed.push(a);
                }
                Err(e) => tracing::warn!(error = %e, "stress panel free failed"),
            }
        }
        StressOutcome::Freed(freed)
    }

    /// Frees every tensor, empties the cache and replaces the allocator by a
    /// fresh one under `settings`; the old one is dropped with nothing held.
    /// On any error nothing changes.
    fn reconfigure(&mut self, settings: &str) -> StressOutcome {
        let failed = |message: String| StressOutcome::Failed {
            allocated: Vec::new(),
            message,
        };
        let config = match AllocatorConfig::parse(settings) {
            Ok(c) => c,
            Err(e) => return failed(format!("invalid PYTORCH_CUDA_ALLOC_CONF: {e}")),
        };
        let Some(reopen) = self.reopen.as_mut() else {
            return failed("this stress worker cannot replace its allocator".to_string());
        };
        let device = match reopen() {
            Ok(d) => d,
            Err(e) => return failed(format!("cannot reopen the device: {e}")),
        };
        let freed: Vec<u64> = self
            .allocator
            .live_allocations()
            .iter()
            .map(|l| l.address)
            .collect();
        self.release_all();
        let gpu = self.allocator.device_index();
        let mut fresh = CachingAllocator::new(device, gpu, config);
        fresh.record_history(Some(TRACE_ENTRIES));
        fresh.set_time_us(self.commands.len() as u64 * COMMAND_TIME_US);
        let old = std::mem::replace(&mut self.allocator, fresh);
        drop(old);
        StressOutcome::Reconfigured {
            settings: settings.to_string(),
            freed,
        }
    }

    /// The allocator as a snapshot: its layout and the trace it kept, each
    /// entry with a one-frame traceback naming the panel command that made
    /// it (`<vramtop stress panel>`, line = the command's number).
    pub fn snapshot(&self) -> Snapshot {
        snapshot_with_frames(&self.allocator, 0, |entry| {
            let command = (entry.time_us / COMMAND_TIME_US) as usize;
            command
                .checked_sub(1)
                .and_then(|i| self.commands.get(i))
                .cloned()
                .unwrap_or_else(|| Frames::from(Vec::new()))
        })
    }

    /// Writes [`Self::snapshot`] to `vramtop-stress-<unix time>.pickle` in
    /// the save directory (`-2`, `-3`, … appended when that exists).
    fn save_snapshot(&self) -> StressOutcome {
        let failed = |message: String| StressOutcome::Failed {
            allocated: Vec::new(),
            message,
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Some(dir) = &self.save_dir
            && let Err(e) = crate::probe::snapshot_file::create_private_dir(dir)
        {
            return failed(format!(
                "snapshot not saved: cannot create {}: {e}",
                dir.display()
            ));
        }
        let in_dir = |name: String| match &self.save_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        };
        let mut path = in_dir(format!("vramtop-stress-{now}.pickle"));
        let mut n = 2;
        while path.exists() {
            path = in_dir(format!("vramtop-stress-{now}-{n}.pickle"));
            n += 1;
        }
        let snapshot = self.snapshot();
        match write_snapshot_file(&snapshot, &path) {
            Ok(bytes) => StressOutcome::SnapshotSaved {
                path: path.display().to_string(),
                bytes,
                trace_entries: snapshot.device_traces.iter().map(Vec::len).sum(),
            },
            Err(e) => failed(format!("snapshot not saved: {e}")),
        }
    }

    /// The label of a command's synthetic frame.
    fn describe(command: &StressCommand) -> String {
        let fmt = crate::alloc::sizing::display_bytes;
        match command {
            StressCommand::Malloc { sizes, .. } => match sizes.first() {
                Some(&first) if sizes.iter().all(|&s| s == first) => {
                    format!("allocate {} × {}", sizes.len(), fmt(first))
                }
                _ => format!("allocate {} tensors", sizes.len()),
            },
            StressCommand::Free { addresses } => format!("free {} tensors", addresses.len()),
            StressCommand::EmptyCache => "empty_cache()".to_string(),
            StressCommand::Reconfigure { settings } => {
                format!("reconfigure PYTORCH_CUDA_ALLOC_CONF={settings}")
            }
            StressCommand::Verify => "verify".to_string(),
            StressCommand::SaveSnapshot => "save snapshot".to_string(),
            StressCommand::UseScenarioDevice { capacity, .. } => {
                format!("scenario device of {}", fmt(*capacity))
            }
            StressCommand::UseGpu => "back to the GPU".to_string(),
        }
    }

    /// Applies one command; the answer carries the fresh figures.
    pub fn execute(&mut self, command: &StressCommand) -> StressResult {
        if !matches!(command, StressCommand::SaveSnapshot) {
            self.commands.push(synthetic_frames(
                "<vramtop stress panel>",
                self.commands.len() as u64 + 1,
                &Self::describe(command),
            ));
            self.allocator
                .set_time_us(self.commands.len() as u64 * COMMAND_TIME_US);
        }
        let outcome = match command {
            StressCommand::Malloc { sizes, cap } => self.malloc(sizes, *cap),
            StressCommand::Free { addresses } => self.free(addresses),
            StressCommand::EmptyCache => {
                // Marked in the trace (the saved snapshot's `annotate`
                // entry, `i`/`I` in the viewer): a call that releases
                // nothing leaves no other entry.
                self.allocator.annotate();
                self.allocator.empty_cache();
                StressOutcome::CacheEmptied
            }
            StressCommand::Reconfigure { settings } => self.reconfigure(settings),
            StressCommand::Verify => self.verify(),
            StressCommand::SaveSnapshot => self.save_snapshot(),
            // The device is chosen by `PanelExecutor`, above this one.
            StressCommand::UseScenarioDevice { .. } | StressCommand::UseGpu => {
                StressOutcome::Failed {
                    allocated: Vec::new(),
                    message: "this stress worker has one device".to_string(),
                }
            }
        };
        self.result(outcome)
    }

    /// The addresses of the live tensors, freed and the cache emptied.
    fn release_listed(&mut self) -> Vec<u64> {
        let freed = self
            .allocator
            .live_allocations()
            .iter()
            .map(|l| l.address)
            .collect();
        self.release_all();
        freed
    }

    /// Frees every live tensor and returns every segment to the device.
    pub fn release_all(&mut self) {
        self.filled.clear();
        for live in self.allocator.live_allocations() {
            let _ = self.allocator.free(live.address);
        }
        self.allocator.empty_cache();
    }
}

impl<D: DeviceMemory> Drop for StressExecutor<D> {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// The panel's executor: the GPU's, or while a scenario is loaded one on a
/// simulated device of the scenario's size, so the scenario reaches the
/// outcome `vramtop scenario` reports (an 8 GiB scenario runs out of memory
/// where an 80 GiB GPU would not).
pub struct PanelExecutor<D: DeviceMemory> {
    gpu: StressExecutor<D>,
    /// The GPU allocator's settings, for the answer when it is back.
    gpu_settings: String,
    scenario: Option<StressExecutor<InMemoryDevice>>,
}

/// A fresh simulated device of `capacity` bytes with `processes` on it.
fn scenario_device(capacity: u64, processes: SimProcesses) -> InMemoryDevice {
    let mut device = InMemoryDevice::new(capacity);
    device.set_processes(processes);
    device
}

impl<D: DeviceMemory> PanelExecutor<D> {
    pub fn new(gpu: StressExecutor<D>) -> Self {
        PanelExecutor {
            gpu,
            gpu_settings: String::new(),
            scenario: None,
        }
    }

    /// The first answer, from the GPU.
    pub fn started(&self) -> StressResult {
        self.gpu.started()
    }

    /// Applies one command on the active device; the device commands move
    /// between the GPU and a scenario device.
    pub fn execute(&mut self, command: &StressCommand) -> StressResult {
        match command {
            StressCommand::UseScenarioDevice {
                capacity,
                processes,
                settings,
            } => {
                let config = match AllocatorConfig::parse(settings) {
                    Ok(c) => c,
                    Err(e) => {
                        return self.active_result(StressOutcome::Failed {
                            allocated: Vec::new(),
                            message: format!("invalid PYTORCH_CUDA_ALLOC_CONF: {e}"),
                        });
                    }
                };
                let mut freed = self.gpu.release_listed();
                if let Some(mut old) = self.scenario.take() {
                    freed.extend(old.release_listed());
                }
                let capacity = *capacity;
                // The bytes outside the allocator, as the panel says them.
                let context = processes.external_use();
                let allocator = CachingAllocator::new(
                    scenario_device(capacity, processes.clone()),
                    self.gpu.allocator().device_index(),
                    config,
                );
                let executor = StressExecutor::new(allocator, false)
                    .saving_in(self.gpu.save_dir.clone())
                    .with_reopen({
                        let processes = processes.clone();
                        move || Ok(scenario_device(capacity, processes.clone()))
                    });
                let scenario = self.scenario.insert(executor);
                scenario.result(StressOutcome::DeviceChanged {
                    device: PanelDevice::Scenario { capacity, context },
                    settings: settings.clone(),
                    freed,
                })
            }
            StressCommand::UseGpu => {
                let freed = self
                    .scenario
                    .take()
                    .map(|mut s| s.release_listed())
                    .unwrap_or_default();
                self.gpu.result(StressOutcome::DeviceChanged {
                    device: PanelDevice::Gpu,
                    settings: self.gpu_settings.clone(),
                    freed,
                })
            }
            _ => match &mut self.scenario {
                Some(s) => s.execute(command),
                None => {
                    let result = self.gpu.execute(command);
                    if let StressOutcome::Reconfigured { settings, .. } = &result.outcome {
                        self.gpu_settings = settings.clone();
                    }
                    result
                }
            },
        }
    }

    fn active_result(&self, outcome: StressOutcome) -> StressResult {
        match &self.scenario {
            Some(s) => s.result(outcome),
            None => self.gpu.result(outcome),
        }
    }
}

/// A stress executor on its own thread. Dropping the worker closes the
/// command channel and waits for the thread, which frees everything.
pub struct StressWorker {
    commands: Option<mpsc::Sender<StressCommand>>,
    thread: Option<JoinHandle<()>>,
    /// The process whose memory it allocates on the GPU.
    pid: Option<u32>,
}

impl StressWorker {
    /// Starts a thread that builds an executor with `make` (on the thread,
    /// as a CUDA context must be), delivers its `Started` answer and then
    /// one answer per command, and calls `after` once the executor has
    /// released everything.
    pub fn spawn<D, M, F, A>(make: M, deliver: F, after: A) -> std::io::Result<Self>
    where
        D: DeviceMemory + 'static,
        M: FnOnce() -> StressExecutor<D> + Send + 'static,
        F: FnMut(StressResult) + Send + 'static,
        A: FnOnce() + Send + 'static,
    {
        Self::try_spawn(move || Ok(make()), deliver, after)
    }

    /// Like [`StressWorker::spawn`], for a device that may fail to open:
    /// then the only answer is a `Failed` one saying why, and the thread
    /// ends (later sends report the worker gone).
    pub fn try_spawn<D, M, F, A>(make: M, mut deliver: F, after: A) -> std::io::Result<Self>
    where
        D: DeviceMemory + 'static,
        M: FnOnce() -> Result<StressExecutor<D>, String> + Send + 'static,
        F: FnMut(StressResult) + Send + 'static,
        A: FnOnce() + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<StressCommand>();
        let thread = std::thread::Builder::new()
            .name("vramtop-stress".to_string())
            .spawn(move || {
                let executor = match make() {
                    Ok(e) => e,
                    Err(message) => {
                        deliver(StressResult {
                            outcome: StressOutcome::Failed {
                                allocated: Vec::new(),
                                message,
                            },
                            stats: Default::default(),
                            layout: Vec::new(),
                            driver_used: 0,
                        });
                        after();
                        return;
                    }
                };
                let mut executor = PanelExecutor::new(executor);
                deliver(executor.started());
                while let Ok(command) = rx.recv() {
                    deliver(executor.execute(&command));
                }
                drop(executor);
                after();
            })?;
        Ok(StressWorker {
            commands: Some(tx),
            thread: Some(thread),
            pid: None,
        })
    }

    /// A worker on simulated GPU `gpu` of `cluster`: a process of its own
    /// (with its own 500 MiB context once it allocates), ended on exit.
    pub fn spawn_sim<F>(
        cluster: &SimCluster,
        gpu: u32,
        save_dir: Option<PathBuf>,
        deliver: F,
    ) -> std::io::Result<Self>
    where
        F: FnMut(StressResult) + Send + 'static,
    {
        let memory = cluster.new_process(gpu, STRESS_COMMAND);
        let pid = memory.pid();
        let ending = cluster.clone();
        let worker = Self::spawn(
            move || {
                let handle = memory.clone();
                let allocator = CachingAllocator::new(memory, gpu, AllocatorConfig::default());
                // The same process: a clone of its handle.
                StressExecutor::new(allocator, false)
                    .saving_in(save_dir)
                    .with_kernels()
                    .with_reopen(move || Ok(handle.clone()))
            },
            deliver,
            move || ending.end_process(gpu, pid),
        )?;
        Ok(worker.for_pid(pid))
    }

    /// The worker, saying it allocates as process `pid`.
    fn for_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// The process whose memory the worker allocates on the GPU.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// A worker on CUDA GPU `gpu`: `CudaMemory::open` on the worker thread
    /// (the context is bound to it), a real GPU (so the cap defaults to 50 %
    /// of the memory free at start), every tensor filled with the pattern
    /// of its id, and a reconfigure opening a fresh handle on the same
    /// primary context. Everything is given back when the worker is dropped.
    pub fn spawn_cuda<F>(gpu: u32, save_dir: Option<PathBuf>, deliver: F) -> std::io::Result<Self>
    where
        F: FnMut(StressResult) + Send + 'static,
    {
        let open = move || {
            CudaMemory::open(gpu).map_err(|e| format!("cannot open CUDA GPU {gpu}: {}", e.reason()))
        };
        Self::try_spawn(
            move || {
                let allocator = CachingAllocator::new(open()?, gpu, AllocatorConfig::default());
                Ok(StressExecutor::new(allocator, true)
                    .saving_in(save_dir)
                    .with_kernels()
                    .with_reopen(open))
            },
            deliver,
            || {},
        )
        // The CUDA context is this process's own.
        .map(|w| w.for_pid(std::process::id()))
    }

    /// Queues commands; false when the worker has gone (it panicked).
    pub fn send(&self, commands: Vec<StressCommand>) -> bool {
        let Some(tx) = &self.commands else {
            return false;
        };
        commands.into_iter().all(|c| tx.send(c).is_ok())
    }
}

impl Drop for StressWorker {
    fn drop(&mut self) {
        // Closing the channel ends the loop; the executor then frees all.
        self.commands.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
