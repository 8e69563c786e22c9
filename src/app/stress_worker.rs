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

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::alloc::{AllocError, AllocatorConfig, CachingAllocator, DeviceMemory};
use crate::device::sim::SimCluster;

use super::stress::{NewTensor, StressCommand, StressOutcome, StressResult};

/// The command shown for the panel's process in the process list.
pub const STRESS_COMMAND: &str = "vramtop stress panel";
/// The stream every stress tensor is allocated on (the default stream).
const STREAM: u64 = 0;

/// Applies stress commands to an allocator.
pub struct StressExecutor<D: DeviceMemory> {
    allocator: CachingAllocator<D>,
    /// Whether the device is a real GPU (it then gets a cap).
    real_gpu: bool,
}

impl<D: DeviceMemory> StressExecutor<D> {
    pub fn new(allocator: CachingAllocator<D>, real_gpu: bool) -> Self {
        StressExecutor {
            allocator,
            real_gpu,
        }
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

    fn malloc(&mut self, sizes: &[u64]) -> StressOutcome {
        let mut done = Vec::with_capacity(sizes.len());
        for &size in sizes {
            match self.allocator.malloc(size, STREAM) {
                Ok(address) => done.push((address, size)),
                Err(AllocError::OutOfMemory(oom)) => {
                    return StressOutcome::OutOfMemory {
                        allocated: self.tensors(&done),
                        message: oom.message(),
                        reserved_but_unallocated: oom.reserved_but_unallocated(),
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

    fn free(&mut self, addresses: &[u64]) -> StressOutcome {
        let mut freed = Vec::with_capacity(addresses.len());
        for &a in addresses {
            match self.allocator.free(a) {
                Ok(()) => freed.push(a),
                Err(e) => tracing::warn!(error = %e, "stress panel free failed"),
            }
        }
        StressOutcome::Freed(freed)
    }

    /// Applies one command; the answer carries the fresh figures.
    pub fn execute(&mut self, command: &StressCommand) -> StressResult {
        let outcome = match command {
            StressCommand::Malloc { sizes } => self.malloc(sizes),
            StressCommand::Free { addresses } => self.free(addresses),
            StressCommand::EmptyCache => {
                self.allocator.empty_cache();
                StressOutcome::CacheEmptied
            }
        };
        self.result(outcome)
    }

    /// Frees every live tensor and returns every segment to the device.
    pub fn release_all(&mut self) {
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

/// A stress executor on its own thread. Dropping the worker closes the
/// command channel and waits for the thread, which frees everything.
pub struct StressWorker {
    commands: Option<mpsc::Sender<StressCommand>>,
    thread: Option<JoinHandle<()>>,
}

impl StressWorker {
    /// Starts a thread that builds an executor with `make` (on the thread,
    /// as a CUDA context must be), delivers its `Started` answer and then
    /// one answer per command, and calls `after` once the executor has
    /// released everything.
    pub fn spawn<D, M, F, A>(make: M, mut deliver: F, after: A) -> std::io::Result<Self>
    where
        D: DeviceMemory + 'static,
        M: FnOnce() -> StressExecutor<D> + Send + 'static,
        F: FnMut(StressResult) + Send + 'static,
        A: FnOnce() + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<StressCommand>();
        let thread = std::thread::Builder::new()
            .name("vramtop-stress".to_string())
            .spawn(move || {
                let mut executor = make();
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
        })
    }

    /// A worker on simulated GPU `gpu` of `cluster`: a process of its own
    /// (with its own 500 MiB context once it allocates), ended on exit.
    pub fn spawn_sim<F>(cluster: &SimCluster, gpu: u32, deliver: F) -> std::io::Result<Self>
    where
        F: FnMut(StressResult) + Send + 'static,
    {
        let memory = cluster.new_process(gpu, STRESS_COMMAND);
        let pid = memory.pid();
        let ending = cluster.clone();
        Self::spawn(
            move || {
                let allocator = CachingAllocator::new(memory, gpu, AllocatorConfig::default());
                StressExecutor::new(allocator, false)
            },
            deliver,
            move || ending.end_process(gpu, pid),
        )
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
