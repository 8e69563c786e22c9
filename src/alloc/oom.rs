//! The out-of-memory report and PyTorch's OOM message text (spec §3.1).

use serde::Serialize;

use super::device::DeviceProcess;
use super::sizing::format_size;

/// PyTorch's per-process lines of the OOM message, from NVML's list
/// (`reportProcessMemoryInfo`): its own process as "Including
/// non-PyTorch memory, this process has X memory in use. ", each other
/// as "Process PID has X memory in use. ", in the list's order. Empty for
/// an empty list, as without NVML.
pub fn process_info(processes: &[DeviceProcess]) -> String {
    processes
        .iter()
        .map(|p| {
            let who = if p.this_process {
                "Including non-PyTorch memory, this process".to_string()
            } else {
                format!("Process {}", p.pid)
            };
            format!("{who} has {} memory in use. ", format_size(p.used))
        })
        .collect()
}

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
    /// empty when the device does not know its processes
    /// ([`process_info`] of `DeviceMemory::processes`).
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn oom(process_info: String) -> OutOfMemory {
        OutOfMemory {
            device: 0,
            requested: 600 * MIB,
            rounded: 600 * MIB,
            alloc_size: 600 * MIB,
            device_total: 16 << 30,
            device_free: 100 * MIB,
            allowed: None,
            allocated: 10 << 30,
            reserved: 11 << 30,
            private_pool_cached: 0,
            process_info,
        }
    }

    #[test]
    fn process_lines_name_others_by_pid_and_this_process_as_pytorch_does() {
        let lines = process_info(&[
            DeviceProcess {
                pid: 4242,
                used: 11 * 1024 * MIB + 500 * MIB,
                this_process: true,
            },
            DeviceProcess {
                pid: 4243,
                used: 500 * MIB,
                this_process: false,
            },
        ]);
        assert_eq!(
            lines,
            "Including non-PyTorch memory, this process has 11.49 GiB memory in use. \
             Process 4243 has 500.00 MiB memory in use. "
        );
        // They sit between the capacity sentence and the allocated one.
        let message = oom(lines).message();
        assert!(
            message.contains(
                "of which 100.00 MiB is free. Including non-PyTorch memory, this process has \
                 11.49 GiB memory in use. Process 4243 has 500.00 MiB memory in use. Of the \
                 allocated memory 10.00 GiB"
            ),
            "{message}"
        );
    }

    #[test]
    fn no_known_processes_leave_the_message_as_pytorch_without_nvml_writes_it() {
        assert_eq!(process_info(&[]), "");
        assert!(
            oom(String::new())
                .message()
                .contains("is free. Of the allocated memory"),
        );
    }
}
