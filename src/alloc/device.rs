//! The device side of the allocator model: what PyTorch asks of CUDA.
//!
//! Real backends (CUDA, the simulated GPU) implement [`DeviceMemory`]; the
//! model only needs whole-segment allocation, page mapping for expandable
//! segments and the free/total figures of `cudaMemGetInfo`.

use std::collections::BTreeMap;

use thiserror::Error;

/// Why the device refused a request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// `cudaErrorMemoryAllocation` / `CUDA_ERROR_OUT_OF_MEMORY`: the allocator
    /// recovers from this (release cached blocks, retry, then OOM).
    #[error("out of device memory")]
    OutOfMemory,
    /// Any other failure: surfaced to the caller as is.
    #[error("device error: {0}")]
    Other(String),
}

/// `cudaMemGetInfo`: bytes free and total on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub free: u64,
    pub total: u64,
}

/// One compute process on the device, as NVML lists it
/// (`nvmlDeviceGetComputeRunningProcesses`): what PyTorch's OOM message
/// names, one "… has X memory in use. " each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceProcess {
    pub pid: u32,
    /// Bytes the driver counts for the process: its CUDA context and
    /// everything it allocated, PyTorch's segments and others'.
    pub used: u64,
    /// Whether it is the process the allocator runs in (PyTorch compares
    /// NVML's pid with its own).
    pub this_process: bool,
}

/// Device memory as the caching allocator uses it.
pub trait DeviceMemory {
    /// `cudaMalloc(size)`: a new segment's base address.
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// `cudaFree` of a whole segment returned by [`DeviceMemory::malloc`].
    fn free(&mut self, ptr: u64, size: u64);
    /// `cudaMemGetInfo`.
    fn mem_get_info(&self) -> MemInfo;
    /// `cuMemAddressReserve`: virtual address space for an expandable
    /// segment; no physical memory yet.
    fn reserve_address_range(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// `cuMemAddressFree` of a range whose pages are all unmapped.
    fn release_address_range(&mut self, base: u64, size: u64);
    /// `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` of `[addr, addr+size)`,
    /// all pages or none.
    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError>;
    /// `cuMemUnmap` + `cuMemRelease` of `[addr, addr+size)`.
    fn unmap(&mut self, addr: u64, size: u64);
    /// The compute processes on the device, in NVML's order, for the OOM
    /// message; empty where they are not known (PyTorch without NVML
    /// leaves those lines out).
    fn processes(&self) -> Vec<DeviceProcess> {
        Vec::new()
    }
}

/// A deterministic device held in memory, for tests, benches and the
/// simulated GPU: a fixed capacity, first-fit address assignment with reuse
/// of freed ranges (so addresses look like cudaMalloc's), and byte-exact
/// accounting of physical memory.
#[derive(Debug, Clone)]
pub struct InMemoryDevice {
    capacity: u64,
    /// Physical bytes in use (segments plus mapped pages).
    used: u64,
    /// Bytes the driver holds outside the allocator (CUDA context, other
    /// processes): counted as used, never allocatable.
    external_use: u64,
    /// Free address ranges (base → size) of the device's address window.
    free_ranges: BTreeMap<u64, u64>,
    /// Live segments and reservations (base → size).
    live: BTreeMap<u64, u64>,
    /// Fail every malloc/map of at least this size (fault injection).
    fail_at_or_above: Option<u64>,
    /// The processes the device has, where they are known: see
    /// [`InMemoryDevice::set_processes`].
    processes: Option<SimProcesses>,
}

/// The processes of an [`InMemoryDevice`] that knows them: the
/// allocator's own (its context, plus the allocator's segments as they
/// are) and others that each hold a fixed number of bytes. Their bytes are
/// the device's external use: set both with [`InMemoryDevice::set_processes`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SimProcesses {
    /// The allocator's process.
    pub pid: u32,
    /// Its CUDA context (bytes).
    pub context: u64,
    /// Every other process: (pid, bytes it holds).
    pub others: Vec<(u32, u64)>,
}

impl SimProcesses {
    /// Bytes the processes hold outside the allocator: its context and
    /// the others'.
    pub fn external_use(&self) -> u64 {
        self.others
            .iter()
            .fold(self.context, |sum, &(_, bytes)| sum.saturating_add(bytes))
    }
}

/// Where simulated device addresses start (a typical CUDA VA on Linux).
pub const SIM_ADDRESS_BASE: u64 = 0x7f00_0000_0000;
/// cudaMalloc returns 2 MiB-aligned large ranges; we align everything.
const ADDRESS_ALIGN: u64 = 2 << 20;
/// The address window is large enough for expandable reservations
/// (1⅛ × capacity each) and fragmentation of the VA space.
const ADDRESS_WINDOW: u64 = 1 << 46;

impl InMemoryDevice {
    pub fn new(capacity: u64) -> Self {
        let mut free_ranges = BTreeMap::new();
        free_ranges.insert(SIM_ADDRESS_BASE, ADDRESS_WINDOW);
        InMemoryDevice {
            capacity,
            used: 0,
            external_use: 0,
            free_ranges,
            live: BTreeMap::new(),
            fail_at_or_above: None,
            processes: None,
        }
    }

    /// The processes on the device, for the OOM message: the allocator's
    /// own context and the others' bytes become the external use.
    pub fn set_processes(&mut self, processes: SimProcesses) {
        self.external_use = processes.external_use();
        self.processes = Some(processes);
    }

    /// Memory the driver uses outside this allocator (e.g. the CUDA context).
    pub fn set_external_use(&mut self, bytes: u64) {
        self.external_use = bytes;
    }

    /// Makes every malloc or map of at least `size` bytes fail with OOM.
    pub fn fail_allocations_at_or_above(&mut self, size: Option<u64>) {
        self.fail_at_or_above = size;
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Physical bytes held by the allocator (segments + mapped pages).
    pub fn used_by_allocator(&self) -> u64 {
        self.used
    }

    fn physical_free(&self) -> u64 {
        self.capacity
            .saturating_sub(self.used)
            .saturating_sub(self.external_use)
    }

    fn take_address_range(&mut self, size: u64) -> Result<u64, DeviceError> {
        let want = size.div_ceil(ADDRESS_ALIGN) * ADDRESS_ALIGN;
        let found = self
            .free_ranges
            .iter()
            .find(|&(_, &len)| len >= want)
            .map(|(&base, &len)| (base, len));
        let (base, len) = found.ok_or(DeviceError::OutOfMemory)?;
        self.free_ranges.remove(&base);
        if len > want {
            self.free_ranges.insert(base + want, len - want);
        }
        self.live.insert(base, want);
        Ok(base)
    }

    fn return_address_range(&mut self, base: u64) {
        let Some(mut size) = self.live.remove(&base) else {
            return;
        };
        let mut start = base;
        // Coalesce with the free neighbours so the window does not fragment.
        if let Some((&prev, &prev_len)) = self.free_ranges.range(..base).next_back()
            && prev + prev_len == base
        {
            self.free_ranges.remove(&prev);
            start = prev;
            size += prev_len;
        }
        if let Some(next_len) = self.free_ranges.remove(&(start + size)) {
            size += next_len;
        }
        self.free_ranges.insert(start, size);
    }
}

impl DeviceMemory for InMemoryDevice {
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError> {
        if self.fail_at_or_above.is_some_and(|limit| size >= limit) || size > self.physical_free() {
            return Err(DeviceError::OutOfMemory);
        }
        let base = self.take_address_range(size)?;
        self.used += size;
        Ok(base)
    }

    fn free(&mut self, ptr: u64, size: u64) {
        if self.live.contains_key(&ptr) {
            self.used = self.used.saturating_sub(size);
            self.return_address_range(ptr);
        }
    }

    fn mem_get_info(&self) -> MemInfo {
        MemInfo {
            free: self.physical_free(),
            total: self.capacity,
        }
    }

    fn reserve_address_range(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.take_address_range(size)
    }

    fn release_address_range(&mut self, base: u64, _size: u64) {
        self.return_address_range(base);
    }

    fn map(&mut self, _addr: u64, size: u64) -> Result<(), DeviceError> {
        if self.fail_at_or_above.is_some_and(|limit| size >= limit) || size > self.physical_free() {
            return Err(DeviceError::OutOfMemory);
        }
        self.used += size;
        Ok(())
    }

    fn unmap(&mut self, _addr: u64, size: u64) {
        self.used = self.used.saturating_sub(size);
    }

    fn processes(&self) -> Vec<DeviceProcess> {
        let Some(p) = &self.processes else {
            return Vec::new();
        };
        let own = DeviceProcess {
            pid: p.pid,
            used: p.context.saturating_add(self.used),
            this_process: true,
        };
        // NVML lists processes in no promised order; by pid reads as
        // nvidia-smi's list does.
        let mut all: Vec<DeviceProcess> = p
            .others
            .iter()
            .map(|&(pid, used)| DeviceProcess {
                pid,
                used,
                this_process: false,
            })
            .chain([own])
            .collect();
        all.sort_by_key(|d| d.pid);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_device_refuses_beyond_capacity() {
        let mut d = InMemoryDevice::new(100 << 20);
        let a = d.malloc(60 << 20).expect("fits");
        assert_eq!(d.malloc(60 << 20), Err(DeviceError::OutOfMemory));
        d.free(a, 60 << 20);
        assert!(d.malloc(60 << 20).is_ok());
    }

    #[test]
    fn in_memory_device_reuses_freed_addresses_first_fit() {
        let mut d = InMemoryDevice::new(1 << 30);
        let a = d.malloc(20 << 20).expect("fits");
        let b = d.malloc(20 << 20).expect("fits");
        assert!(b > a);
        d.free(a, 20 << 20);
        let c = d.malloc(2 << 20).expect("fits");
        assert_eq!(c, a, "first fit reuses the lowest free range");
        d.free(c, 2 << 20);
        d.free(b, 20 << 20);
        let whole = d.malloc(40 << 20).expect("fits");
        assert_eq!(whole, a, "freed neighbours coalesce");
    }

    #[test]
    fn external_use_reduces_free_memory() {
        let mut d = InMemoryDevice::new(1 << 30);
        d.set_external_use(500 << 20);
        assert_eq!(d.mem_get_info().free, (1 << 30) - (500 << 20));
        assert_eq!(d.mem_get_info().total, 1 << 30);
    }
}
