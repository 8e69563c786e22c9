//! [`CudaMemory`]: the allocator model's [`DeviceMemory`] on a real GPU.

use std::cell::RefCell;
use std::collections::BTreeMap;

use cudarc::driver::sys as cu;
use serde::Serialize;

use super::CudaError;
use super::driver::{self, DeviceFacts, check};
use super::kernels::LoadedKernels;
use crate::alloc::{DeviceError, DeviceMemory, MemInfo};

/// PyTorch's expandable segments map 2 MiB pages (small pool) and 20 MiB
/// pages (large pool); a physical handle per 2 MiB lets the model unmap any
/// whole page later. Bytes.
const MIN_PAGE_SIZE: u64 = 2 << 20;

/// What a [`CudaMemory`] holds on the device right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeldMemory {
    /// cuMemAlloc segments.
    pub allocations: usize,
    /// Bytes.
    pub allocated_bytes: u64,
    /// cuMemAddressReserve ranges (virtual address space only).
    pub reservations: usize,
    /// Bytes of address space.
    pub reserved_address_bytes: u64,
    /// Pages mapped with their own cuMemCreate handle.
    pub mapped_pages: usize,
    /// Bytes.
    pub mapped_bytes: u64,
}

/// Device memory on one GPU's primary context.
///
/// Every allocation, mapping and reservation is tracked, and dropping the
/// value gives all of them back: a shared GPU must not keep memory that
/// vramtop took once it is done. The kernels ([`crate::device::Kernels`])
/// run only on memory this value holds.
pub struct CudaMemory {
    pub(super) index: u32,
    pub(super) facts: DeviceFacts,
    /// The device's primary context, retained in `open`, released in `Drop`.
    ctx: cu::CUcontext,
    /// The bytes one cuMemCreate handle covers; `None` when the device or
    /// driver has no virtual memory management.
    page_size: Option<u64>,
    /// cuMemAlloc base → bytes.
    allocations: BTreeMap<u64, u64>,
    /// cuMemAddressReserve base → bytes.
    reservations: BTreeMap<u64, u64>,
    /// Mapped page address → its physical handle; each page is `page_size`
    /// bytes and was mapped by its own cuMemMap.
    pages: BTreeMap<u64, cu::CUmemGenericAllocationHandle>,
    pub(super) kernels: Option<LoadedKernels>,
    /// Small cuMemAlloc buffers the kernels need (verify's result, burn's
    /// scratch), by purpose → device pointer; freed in `Drop`.
    pub(super) scratch: BTreeMap<&'static str, u64>,
    /// The last failure of a call that cannot return one (free, unmap,
    /// release, mem_get_info).
    last_error: RefCell<Option<String>>,
}

// SAFETY: the raw pointers are driver handles (context, module, functions),
// not memory owned by this thread; the CUDA driver API accepts them from any
// thread, and every call binds the context to the calling thread first.
unsafe impl Send for CudaMemory {}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory")
            .field("index", &self.index)
            .field("name", &self.facts.name)
            .field("page_size", &self.page_size)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl CudaMemory {
    /// Opens device `device_index` (an ordinal as CUDA numbers them, after
    /// CUDA_VISIBLE_DEVICES) and retains its primary context.
    pub fn open(device_index: u32) -> Result<Self, CudaError> {
        if !driver::driver_present() {
            return Err(CudaError::DriverMissing);
        }
        let count = driver::init_and_count()?;
        if device_index >= count {
            return Err(CudaError::NoSuchDevice {
                index: device_index,
                count,
            });
        }
        let facts = driver::device_facts(device_index)?;
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle for a valid device.
        check("cuDevicePrimaryCtxRetain", || unsafe {
            cu::cuDevicePrimaryCtxRetain(&mut ctx, facts.device)
        })?;
        // From here on Drop releases the context.
        let mut memory = CudaMemory {
            index: device_index,
            facts,
            ctx,
            page_size: None,
            allocations: BTreeMap::new(),
            reservations: BTreeMap::new(),
            pages: BTreeMap::new(),
            kernels: None,
            scratch: BTreeMap::new(),
            last_error: RefCell::new(None),
        };
        memory.bind()?;
        if memory.facts.virtual_memory_management {
            match memory.query_page_size() {
                Ok(page) => memory.page_size = Some(page),
                // Plain segments still work; map() explains the refusal.
                Err(e) => memory.note_error(e),
            }
        }
        Ok(memory)
    }

    /// The CUDA ordinal this value was opened with.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The device's name, e.g. "NVIDIA H200".
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// The device's memory in bytes (cuDeviceTotalMem).
    pub fn total_memory(&self) -> u64 {
        self.facts.total_memory
    }

    /// (major, minor), e.g. (9, 0).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.facts.compute_capability
    }

    /// The bytes one physical handle of an expandable segment covers (2 MiB
    /// on current GPUs); `None` when virtual memory management is missing.
    pub fn page_size(&self) -> Option<u64> {
        self.page_size
    }

    /// What this value holds on the device now (not counting the few KiB of
    /// kernel scratch).
    pub fn held(&self) -> HeldMemory {
        HeldMemory {
            allocations: self.allocations.len(),
            allocated_bytes: self.allocations.values().sum(),
            reservations: self.reservations.len(),
            reserved_address_bytes: self.reservations.values().sum(),
            mapped_pages: self.pages.len(),
            mapped_bytes: self.pages.len() as u64 * self.page_size.unwrap_or(0),
        }
    }

    /// The last failure of an operation that cannot report one itself
    /// (free, unmap, release_address_range, mem_get_info).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.borrow().clone()
    }

    fn note_error(&self, e: impl std::fmt::Display) {
        *self.last_error.borrow_mut() = Some(e.to_string());
    }

    /// Makes the primary context current on the calling thread; every
    /// operation starts with this because the value may move between threads.
    pub(super) fn bind(&self) -> Result<(), CudaError> {
        let ctx = self.ctx;
        // SAFETY: ctx is the retained primary context, valid until Drop.
        check("cuCtxSetCurrent", || unsafe { cu::cuCtxSetCurrent(ctx) })
    }

    /// Waits for all work on the context (the kernels and copies of this value).
    pub(super) fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: no arguments; the context is current.
        check("cuCtxSynchronize", || unsafe { cu::cuCtxSynchronize() })
    }

    fn allocation_prop(&self) -> cu::CUmemAllocationProp {
        cu::CUmemAllocationProp {
            type_: cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: cu::CUmemLocation {
                type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.index as std::ffi::c_int,
            },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: cu::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        }
    }

    /// max(granularity, 2 MiB), rounded up to a multiple of the granularity.
    fn query_page_size(&self) -> Result<u64, CudaError> {
        let prop = self.allocation_prop();
        let mut granularity: usize = 0;
        // SAFETY: reads prop, writes one size_t.
        check("cuMemGetAllocationGranularity", || unsafe {
            cu::cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        let granularity = (granularity as u64).max(1);
        Ok(MIN_PAGE_SIZE.div_ceil(granularity) * granularity)
    }

    /// cuMemAlloc_v2 outside the tracked allocations (kernel scratch).
    pub(super) fn raw_alloc(&self, size: u64) -> Result<u64, CudaError> {
        let bytes = usize::try_from(size)
            .map_err(|_| CudaError::Unsupported(format!("{size} bytes do not fit in size_t")))?;
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; the context is current.
        check("cuMemAlloc_v2", || unsafe {
            cu::cuMemAlloc_v2(&mut ptr, bytes)
        })?;
        Ok(ptr)
    }

    fn raw_free(ptr: u64) -> Result<(), CudaError> {
        // SAFETY: ptr came from cuMemAlloc_v2 and is freed once.
        check("cuMemFree_v2", || unsafe { cu::cuMemFree_v2(ptr) })
    }

    fn unmap_page(
        addr: u64,
        page: u64,
        handle: cu::CUmemGenericAllocationHandle,
    ) -> Result<(), CudaError> {
        let bytes = page as usize;
        // SAFETY: [addr, addr + page) was mapped by one cuMemMap of `handle`.
        check("cuMemUnmap", || unsafe { cu::cuMemUnmap(addr, bytes) })?;
        Self::release_handle(handle)
    }

    fn release_handle(handle: cu::CUmemGenericAllocationHandle) -> Result<(), CudaError> {
        // SAFETY: handle came from cuMemCreate and is released once.
        check("cuMemRelease", || unsafe { cu::cuMemRelease(handle) })
    }

    /// Checks that `[ptr, ptr + len)` lies in one cuMemAlloc segment or in
    /// pages this value mapped, so that a kernel never touches memory it does
    /// not own (an illegal address would poison the whole context).
    pub(super) fn check_owned(&self, ptr: u64, len: u64) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        let not_owned = || {
            DeviceError::Other(format!(
                "[{ptr:#x}, +{len}) is not memory this CUDA backend allocated or mapped"
            ))
        };
        let end = ptr.checked_add(len).ok_or_else(not_owned)?;
        if let Some((&base, &size)) = self.allocations.range(..=ptr).next_back()
            && end <= base.saturating_add(size)
        {
            return Ok(());
        }
        let page = self.page_size.ok_or_else(not_owned)?;
        let mut at = ptr - ptr % page;
        while at < end {
            if !self.pages.contains_key(&at) {
                return Err(not_owned());
            }
            at += page;
        }
        Ok(())
    }

    /// Undoes a partly done map(): pages mapped so far and handles created.
    fn roll_back(&self, page: u64, done: &[(u64, cu::CUmemGenericAllocationHandle, bool)]) {
        for &(addr, handle, mapped) in done.iter().rev() {
            let result = if mapped {
                Self::unmap_page(addr, page, handle)
            } else {
                Self::release_handle(handle)
            };
            if let Err(e) = result {
                self.note_error(e);
            }
        }
    }

    fn map_pages(&mut self, addr: u64, size: u64) -> Result<(), CudaError> {
        let page = self.page_size.ok_or_else(|| {
            CudaError::Unsupported(format!(
                "expandable segments need CUDA virtual memory management, which {} (driver or \
                 device) does not offer",
                self.facts.name
            ))
        })?;
        if !addr.is_multiple_of(page) || !size.is_multiple_of(page) {
            return Err(CudaError::Unsupported(format!(
                "map [{addr:#x}, +{size}) is not aligned to the {page}-byte page size"
            )));
        }
        let end = addr
            .checked_add(size)
            .ok_or_else(|| CudaError::Unsupported(format!("map [{addr:#x}, +{size}) overflows")))?;
        let inside = self
            .reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&base, &len)| end <= base.saturating_add(len));
        if !inside {
            return Err(CudaError::Unsupported(format!(
                "map [{addr:#x}, +{size}) is outside every reserved address range"
            )));
        }
        if let Some((&mapped, _)) = self.pages.range(addr..end).next() {
            return Err(CudaError::Unsupported(format!(
                "map [{addr:#x}, +{size}): page {mapped:#x} is already mapped"
            )));
        }
        self.bind()?;
        let prop = self.allocation_prop();
        let bytes = page as usize;
        // (page address, handle, mapped yet)
        let mut done: Vec<(u64, cu::CUmemGenericAllocationHandle, bool)> = Vec::new();
        let mut at = addr;
        while at < end {
            let mut handle: cu::CUmemGenericAllocationHandle = 0;
            // SAFETY: reads prop, writes one handle.
            let created = check("cuMemCreate", || unsafe {
                cu::cuMemCreate(&mut handle, bytes, &prop, 0)
            });
            if let Err(e) = created {
                self.roll_back(page, &done);
                return Err(e);
            }
            done.push((at, handle, false));
            // SAFETY: [at, at + page) lies in a reservation and is unmapped
            // (checked above); the handle is exactly one page.
            let mapped = check("cuMemMap", || unsafe {
                cu::cuMemMap(at, bytes, 0, handle, 0)
            });
            if let Err(e) = mapped {
                self.roll_back(page, &done);
                return Err(e);
            }
            if let Some(last) = done.last_mut() {
                last.2 = true;
            }
            at += page;
        }
        let access = cu::CUmemAccessDesc {
            location: prop.location,
            flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let total = size as usize;
        // SAFETY: the whole range was just mapped; reads one descriptor.
        let access_set = check("cuMemSetAccess", || unsafe {
            cu::cuMemSetAccess(addr, total, &access, 1)
        });
        if let Err(e) = access_set {
            self.roll_back(page, &done);
            return Err(e);
        }
        for (at, handle, _) in done {
            self.pages.insert(at, handle);
        }
        Ok(())
    }
}

impl DeviceMemory for CudaMemory {
    /// cuMemAlloc_v2. CUDA_ERROR_OUT_OF_MEMORY becomes
    /// [`DeviceError::OutOfMemory`], anything else [`DeviceError::Other`].
    fn malloc(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.bind()?;
        let ptr = self.raw_alloc(size)?;
        self.allocations.insert(ptr, size);
        Ok(ptr)
    }

    /// cuMemFree_v2 of a segment from [`DeviceMemory::malloc`]; anything else
    /// is ignored (and noted in [`CudaMemory::last_error`]).
    fn free(&mut self, ptr: u64, _size: u64) {
        if !self.allocations.contains_key(&ptr) {
            self.note_error(format!("free({ptr:#x}): not a segment of this backend"));
            return;
        }
        let result = self.bind().and_then(|()| Self::raw_free(ptr));
        match result {
            Ok(()) => {
                self.allocations.remove(&ptr);
            }
            // Kept, so that Drop tries again.
            Err(e) => self.note_error(e),
        }
    }

    /// cuMemGetInfo_v2; on failure free is 0 and total the device's size.
    fn mem_get_info(&self) -> MemInfo {
        let (mut free, mut total): (usize, usize) = (0, 0);
        let result = self.bind().and_then(|()| {
            // SAFETY: writes two size_t.
            check("cuMemGetInfo_v2", || unsafe {
                cu::cuMemGetInfo_v2(&mut free, &mut total)
            })
        });
        match result {
            Ok(()) => MemInfo {
                free: free as u64,
                total: total as u64,
            },
            Err(e) => {
                self.note_error(e);
                MemInfo {
                    free: 0,
                    total: self.facts.total_memory,
                }
            }
        }
    }

    /// cuMemAddressReserve of `size` rounded up to whole pages, page-aligned.
    fn reserve_address_range(&mut self, size: u64) -> Result<u64, DeviceError> {
        let page = self.page_size.ok_or_else(|| {
            DeviceError::Other(format!(
                "expandable segments need CUDA virtual memory management, which {} does not offer",
                self.facts.name
            ))
        })?;
        let len = size.max(1).div_ceil(page).saturating_mul(page);
        let bytes = usize::try_from(len)
            .map_err(|_| DeviceError::Other(format!("{len} bytes do not fit in size_t")))?;
        let alignment = page as usize;
        self.bind()?;
        let mut base: cu::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; no fixed address requested.
        check("cuMemAddressReserve", || unsafe {
            cu::cuMemAddressReserve(&mut base, bytes, alignment, 0, 0)
        })?;
        self.reservations.insert(base, len);
        Ok(base)
    }

    /// cuMemAddressFree of a range from [`DeviceMemory::reserve_address_range`].
    /// Pages still mapped in it are unmapped first.
    fn release_address_range(&mut self, base: u64, _size: u64) {
        let Some(&len) = self.reservations.get(&base) else {
            self.note_error(format!(
                "release_address_range({base:#x}): not a reservation of this backend"
            ));
            return;
        };
        self.unmap(base, len);
        let bytes = len as usize;
        let result = self.bind().and_then(|()| {
            // SAFETY: [base, base + len) is a reservation with no mapping left.
            check("cuMemAddressFree", || unsafe {
                cu::cuMemAddressFree(base, bytes)
            })
        });
        match result {
            Ok(()) => {
                self.reservations.remove(&base);
            }
            Err(e) => self.note_error(e),
        }
    }

    /// One cuMemCreate + cuMemMap per page of `[addr, addr + size)`, then one
    /// cuMemSetAccess over the range. All pages or none: on failure the pages
    /// this call created are released again, and an out-of-memory failure is
    /// [`DeviceError::OutOfMemory`].
    fn map(&mut self, addr: u64, size: u64) -> Result<(), DeviceError> {
        if size == 0 {
            return Ok(());
        }
        self.map_pages(addr, size).map_err(DeviceError::from)
    }

    /// cuMemUnmap + cuMemRelease of every mapped page in `[addr, addr + size)`.
    fn unmap(&mut self, addr: u64, size: u64) {
        let Some(page) = self.page_size else {
            return;
        };
        let end = addr.saturating_add(size);
        let victims: Vec<(u64, cu::CUmemGenericAllocationHandle)> =
            self.pages.range(addr..end).map(|(&a, &h)| (a, h)).collect();
        if victims.is_empty() {
            return;
        }
        // Like PyTorch: no kernel may still use a page when it goes.
        if let Err(e) = self.bind().and_then(|()| self.synchronize()) {
            self.note_error(e);
        }
        for (at, handle) in victims {
            match Self::unmap_page(at, page, handle) {
                Ok(()) => {
                    self.pages.remove(&at);
                }
                Err(e) => self.note_error(e),
            }
        }
    }
}

impl Drop for CudaMemory {
    /// Gives back everything still held, ignoring errors (the process may be
    /// exiting because of one).
    fn drop(&mut self) {
        let _ = self.bind();
        let _ = self.synchronize();
        for (&ptr, _) in std::mem::take(&mut self.allocations).iter() {
            let _ = Self::raw_free(ptr);
        }
        if let Some(page) = self.page_size {
            for (&at, &handle) in std::mem::take(&mut self.pages).iter() {
                let _ = Self::unmap_page(at, page, handle);
            }
        }
        for (&base, &len) in std::mem::take(&mut self.reservations).iter() {
            let bytes = len as usize;
            // SAFETY: a reservation of this value; its pages were unmapped above.
            let _ = check("cuMemAddressFree", || unsafe {
                cu::cuMemAddressFree(base, bytes)
            });
        }
        for (_, &ptr) in std::mem::take(&mut self.scratch).iter() {
            let _ = Self::raw_free(ptr);
        }
        if let Some(kernels) = self.kernels.take() {
            kernels.unload();
        }
        let device = self.facts.device;
        // SAFETY: balances the cuDevicePrimaryCtxRetain of open().
        let _ = check("cuDevicePrimaryCtxRelease_v2", || unsafe {
            cu::cuDevicePrimaryCtxRelease_v2(device)
        });
    }
}
