//! A pure model of PyTorch's native CUDA caching allocator.
//!
//! No I/O, no terminal, no async runtime: the device is a trait
//! ([`DeviceMemory`]), time and addresses are inputs. The rules follow
//! `shared/reference/pytorch-caching-allocator.md`; `docs/allocator.md` maps
//! each part to PyTorch.

pub mod advice;
pub mod allocator;
pub mod analysis;
pub mod config;
pub mod device;
pub mod explain;
pub mod layout;
pub mod oom;
pub mod sizing;
pub mod spelling;
pub mod stats;
pub mod trace;

pub use allocator::{
    AdoptedBlock, AdoptedRange, AdoptedReservation, AllocError, CachingAllocator, LiveAllocation,
    MempoolId, StreamId,
};
pub use analysis::{Fragmentation, fragmentation};
pub use config::{AllocatorConfig, ConfigError};
pub use device::{DeviceError, DeviceMemory, DeviceProcess, InMemoryDevice, MemInfo, SimProcesses};
pub use layout::{BlockInfo, BlockState, PoolKind, SegmentInfo};
pub use oom::OutOfMemory;
pub use sizing::{
    QuantityError, allocation_size, duration_ms_exact, format_size, human_bytes, parse_duration_ms,
    parse_size, round_size, size_bytes,
};
pub use stats::{DeviceStats, Stat, StatArray};
pub use trace::{TraceAction, TraceEntry};
