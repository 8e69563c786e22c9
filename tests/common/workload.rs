//! Traces the allocator model records itself, for cases no shared snapshot
//! holds: the library's own test support (`snapshot::capture`) with the
//! settings these tests use.

use vramtop::alloc::{CachingAllocator, InMemoryDevice};
use vramtop::snapshot::capture;

/// A model of device 0 with `capacity` bytes and the `settings`
/// (`PYTORCH_CUDA_ALLOC_CONF` syntax), recording up to 1 000 000 trace entries.
pub fn model(settings: &str, capacity: u64) -> CachingAllocator<InMemoryDevice> {
    capture::recording_model(settings, capacity).expect("valid")
}

/// A deterministic mixed workload of `steps` calls from `seed`: two
/// streams, cross-stream uses, empty_cache, and OOMs on a small device;
/// requests of 1 B to 2^28 B (256 MiB).
pub fn mixed_workload(m: &mut CachingAllocator<InMemoryDevice>, steps: usize, seed: u64) {
    capture::mixed_workload(m, steps, seed, 28, |_| {}).expect("live");
}
