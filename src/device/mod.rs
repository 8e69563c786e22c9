//! Device backends behind small traits.
//!
//! - [`telemetry::Telemetry`]: the driver view of each GPU (memory, utilisation,
//!   temperature, power, clocks, processes), from [`sim`] or NVML.
//! - [`crate::alloc::DeviceMemory`]: memory for the allocator model, from the
//!   simulated GPU or real CUDA.
//! - [`Kernels`]: fill/verify/burn kernels on that memory.
//!
//! The factory picks backends and explains its choice.

pub mod check;
pub mod cuda;
pub mod doctor;
pub mod factory;
pub mod host;
pub mod nvml;
pub mod procfs;
pub mod recording;
pub mod sampler;
pub mod sim;
pub mod telemetry;

pub use telemetry::{
    DriverInfo, GpuProcess, GpuReading, GpuSample, MigInfo, ProcessUsage, Telemetry,
    TelemetryError, Unanswered, Unavailability,
};

use crate::alloc::DeviceError;

/// Kernels the stress panel and `vramtop check` launch on allocated memory.
pub trait Kernels {
    /// Fills `[ptr, ptr + len)` with a pattern derived from `seed`.
    fn fill(&mut self, ptr: u64, len: u64, seed: u32) -> Result<(), DeviceError>;
    /// Checks the pattern; returns the offset of the first wrong byte, if any.
    fn verify(&mut self, ptr: u64, len: u64, seed: u32) -> Result<Option<u64>, DeviceError>;
    /// Keeps the GPU busy for about `millis` milliseconds.
    fn burn(&mut self, millis: u32) -> Result<(), DeviceError>;
}

/// The byte the fill kernel writes at `offset` for `seed` (shared by every
/// backend so that a fill on one can be verified by the same rule).
pub fn pattern_byte(offset: u64, seed: u32) -> u8 {
    let x = (offset as u32) ^ seed.wrapping_mul(0x9E37_79B9);
    (x.wrapping_mul(0x0100_0193) >> 24) as u8
}
