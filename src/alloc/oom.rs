//! The out-of-memory report and PyTorch's OOM message text (spec §3.1).

use serde::Serialize;

use super::sizing::format_size;

/// Everything PyTorch puts in its `OutOfMemoryError`, captured when the
/// malloc retry chain gives up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutOfMemory {
    pub device: u32,
    /// The unrounded request.
    pub requested: u64,
    /// The rounded request (the `oom` trace entry's size).
    pub rounded: u64,
    /// The segment size that could not be obtained: PyTorch reports this one
    /// ("Tried to allocate 2.00 MiB" for a 1-byte request).
    pub alloc_size: u64,
    /// `cudaMemGetInfo` at the time of the OOM.
    pub device_total: u64,
    pub device_free: u64,
    /// The per-process limit when a memory fraction is set.
    pub allowed: Option<u64>,
    /// `allocated_bytes.all.current`.
    pub allocated: u64,
    /// `reserved_bytes.all.current`, after the retry path released cached segments.
    pub reserved: u64,
    /// Free cached bytes sitting in private pools (CUDA graphs, MemPool).
    pub private_pool_cached: u64,
    /// NVML's per-process lines ("Process 123 has 1.00 GiB memory in use. "),
    /// empty when unknown.
    pub process_info: String,
}

impl OutOfMemory {
    /// Bytes PyTorch calls "reserved by PyTorch but unallocated".
    pub fn reserved_but_unallocated(&self) -> u64 {
        self.reserved
            .saturating_sub(self.allocated)
            .saturating_sub(self.private_pool_cached)
    }

    /// The message PyTorch raises, character for character.
    pub fn message(&self) -> String {
        let allowed_info = self
            .allowed
            .map(|a| format!("{} allowed; ", format_size(a)))
            .unwrap_or_default();
        let pool_info = if self.private_pool_cached > 0 {
            format!(
                "with {} allocated in private pools (e.g., CUDA Graphs), ",
                format_size(self.private_pool_cached)
            )
        } else {
            String::new()
        };
        format!(
            "CUDA out of memory. Tried to allocate {}. GPU {} has a total capacity of {} of which {} is free. {}{}Of the allocated memory {} is allocated by PyTorch, {}and {} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            format_size(self.alloc_size),
            self.device,
            format_size(self.device_total),
            format_size(self.device_free),
            self.process_info,
            allowed_info,
            format_size(self.allocated + self.private_pool_cached),
            pool_info,
            format_size(self.reserved_but_unallocated()),
        )
    }
}
