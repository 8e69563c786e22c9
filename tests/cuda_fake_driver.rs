//! The cuda backend against a fake CUDA driver (tests/fixtures/fake_cuda.c),
//! built here with `cc` and preloaded as libcuda.so.1, so that everything but
//! the GPU itself is exercised on a machine with no GPU: probing a driver
//! that sees no device, and on a fake device the memory bookkeeping
//! (segments, expandable pages, rollback, Drop), the kernels (the real
//! vramtop.cu compiled as host C++ when `c++` exists) and the allocator model.
//!
//! Its own test binary because cudarc caches the loaded libcuda for the
//! process. The fake's state is global, so the tests take turns (LOCK).

mod common;

use common::fake_cuda::load_fake_cuda;
use common::skip::{Prerequisite, skip};
use std::ffi::{CString, c_char, c_int};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use libloading::os::unix::Library;
use vramtop::alloc::{AllocatorConfig, CachingAllocator, DeviceError, DeviceMemory};
use vramtop::device::cuda::{self, CudaError, CudaMemory, KernelChoice, KernelOrigin};
use vramtop::device::{Kernels, pattern_byte};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// The fake's total memory in the device tests, and what it keeps for the context.
const FAKE_TOTAL: u64 = GIB;
const FAKE_CONTEXT: u64 = 64 * MIB;
const CUDA_ERROR_INVALID_VALUE: c_int = 1;
const CUDA_ERROR_OUT_OF_MEMORY: c_int = 2;

struct Fake {
    _lib: Library,
    has_kernels: bool,
    reset: unsafe extern "C" fn(c_int, u64),
    fail: unsafe extern "C" fn(*const c_char, c_int, c_int),
    live_allocations: unsafe extern "C" fn() -> c_int,
    live_handles: unsafe extern "C" fn() -> c_int,
    live_reservations: unsafe extern "C" fn() -> c_int,
    live_mappings: unsafe extern "C" fn() -> c_int,
    context_refs: unsafe extern "C" fn() -> c_int,
    modules_loaded: unsafe extern "C" fn() -> c_int,
    last_module_kind: unsafe extern "C" fn() -> c_int,
    launches: unsafe extern "C" fn() -> u64,
    used_bytes: unsafe extern "C" fn() -> u64,
}

/// Live objects in the fake driver.
#[derive(Debug, PartialEq, Eq)]
struct Live {
    allocations: i32,
    handles: i32,
    reservations: i32,
    mappings: i32,
    context_refs: i32,
    modules: i32,
}

const NOTHING_LIVE: Live = Live {
    allocations: 0,
    handles: 0,
    reservations: 0,
    mappings: 0,
    context_refs: 0,
    modules: 0,
};

impl Fake {
    fn reset(&self, devices: i32, total: u64) {
        // SAFETY: plain C function of the fake.
        unsafe { (self.reset)(devices, total) }
    }

    /// The next call of `name` after `skip` successful ones fails with `code`.
    fn fail(&self, name: &str, skip: i32, code: c_int) {
        let name = CString::new(name).expect("test names have no NUL");
        // SAFETY: the fake copies the name.
        unsafe { (self.fail)(name.as_ptr(), skip, code) }
    }

    fn live(&self) -> Live {
        // SAFETY: plain C functions of the fake.
        unsafe {
            Live {
                allocations: (self.live_allocations)(),
                handles: (self.live_handles)(),
                reservations: (self.live_reservations)(),
                mappings: (self.live_mappings)(),
                context_refs: (self.context_refs)(),
                modules: (self.modules_loaded)(),
            }
        }
    }

    fn launches(&self) -> u64 {
        // SAFETY: plain C function of the fake.
        unsafe { (self.launches)() }
    }

    fn used_bytes(&self) -> u64 {
        // SAFETY: plain C function of the fake.
        unsafe { (self.used_bytes)() }
    }

    /// 1 = PTX, 2 = CUBIN.
    fn last_module_kind(&self) -> i32 {
        // SAFETY: plain C function of the fake.
        unsafe { (self.last_module_kind)() }
    }
}

static LOCK: Mutex<()> = Mutex::new(());

/// Builds and preloads the fake once per process, then hands out exclusive
/// access to it. `None` (with a note) when there is no C compiler.
fn fake() -> Option<(MutexGuard<'static, ()>, &'static Fake)> {
    static FAKE: OnceLock<Option<Fake>> = OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let fake = FAKE.get_or_init(|| {
        // Before anything else, so that every test sees the same NVRTC.
        nvrtc_from_env();
        let (lib, has_kernels) = load_fake_cuda("fake_cuda")?;
        // SAFETY: the symbols have these C signatures (fake_cuda.c).
        unsafe {
            Some(Fake {
                has_kernels,
                reset: *lib.get(b"fake_cuda_reset").expect("symbol"),
                fail: *lib.get(b"fake_cuda_fail").expect("symbol"),
                live_allocations: *lib.get(b"fake_cuda_live_allocations").expect("symbol"),
                live_handles: *lib.get(b"fake_cuda_live_handles").expect("symbol"),
                live_reservations: *lib.get(b"fake_cuda_live_reservations").expect("symbol"),
                live_mappings: *lib.get(b"fake_cuda_live_mappings").expect("symbol"),
                context_refs: *lib.get(b"fake_cuda_context_refs").expect("symbol"),
                modules_loaded: *lib.get(b"fake_cuda_modules_loaded").expect("symbol"),
                last_module_kind: *lib.get(b"fake_cuda_last_module_kind").expect("symbol"),
                launches: *lib.get(b"fake_cuda_launches").expect("symbol"),
                used_bytes: *lib.get(b"fake_cuda_used_bytes").expect("symbol"),
                _lib: lib,
            })
        }
    });
    match fake {
        Some(f) => Some((guard, f)),
        None => {
            skip(
                "a fake-CUDA-driver test",
                "no C compiler (`cc`), so no fake CUDA driver",
                Prerequisite::ProvidedByCi,
            );
            None
        }
    }
}

/// The fake with one GPU of FAKE_TOTAL bytes and nothing allocated.
fn fake_gpu() -> Option<(MutexGuard<'static, ()>, &'static Fake)> {
    let (guard, fake) = fake()?;
    fake.reset(1, FAKE_TOTAL);
    Some((guard, fake))
}

fn kernels_or_skip(fake: &Fake) -> bool {
    if !fake.has_kernels {
        skip(
            "a kernel test on the fake CUDA driver",
            "no C++ compiler, so the fake runs no kernels",
            Prerequisite::ProvidedByCi,
        );
    }
    fake.has_kernels
}

/// Preloads NVRTC from VRAMTOP_NVRTC_LIB, if set (for the CUBIN path).
fn nvrtc_from_env() {
    if let Some(path) = std::env::var_os("VRAMTOP_NVRTC_LIB") {
        cuda::preload_nvrtc(Path::new(&path)).expect("VRAMTOP_NVRTC_LIB names a usable NVRTC");
    }
}

fn host_bytes(ptr: u64, len: u64) -> &'static [u8] {
    // SAFETY: the fake's device memory is host memory; tests read only
    // ranges they allocated and hold.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) }
}

// --------------------------------------------------------------- no device

#[test]
fn probe_with_a_driver_but_no_gpu_reports_no_device_without_panicking() {
    let Some((_guard, fake)) = fake() else { return };
    fake.reset(0, 0);
    let probe = cuda::probe();
    assert!(probe.driver_library_found);
    assert_eq!(probe.driver_version, Some(12080));
    assert!(probe.devices.is_empty());
    assert_eq!(
        probe.error.as_deref(),
        Some("no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)")
    );
    let line = probe.explain();
    assert!(line.contains("CUDA driver 12.8"), "{line}");
    assert!(line.contains("no GPU is usable"), "{line}");
    assert!(line.contains("CUDA_ERROR_NO_DEVICE"), "{line}");
    assert!(!line.contains('\n'));
}

#[test]
fn open_with_a_driver_but_no_gpu_is_the_no_device_error() {
    let Some((_guard, fake)) = fake() else { return };
    fake.reset(0, 0);
    match CudaMemory::open(0) {
        Err(CudaError::Driver { call, name, .. }) => {
            assert_eq!(call, "cuInit");
            assert_eq!(name, "CUDA_ERROR_NO_DEVICE");
        }
        other => panic!("expected the NO_DEVICE error, got {other:?}"),
    }
    assert_eq!(fake.live(), NOTHING_LIVE);
}

// --------------------------------------------------------------- probing a device

#[test]
fn probe_lists_the_fake_gpu() {
    let Some((_guard, _fake)) = fake_gpu() else {
        return;
    };
    let probe = cuda::probe();
    assert_eq!(probe.error, None);
    assert_eq!(probe.devices.len(), 1);
    let d = &probe.devices[0];
    assert_eq!(
        (
            d.index,
            d.name.as_str(),
            d.compute_capability,
            d.total_memory
        ),
        (0, "Fake H200", (9, 0), FAKE_TOTAL)
    );
    let line = probe.explain();
    assert!(
        line.starts_with("CUDA driver 12.8 with 1 GPU: 0 Fake H200 (sm_90, 1 GiB); "),
        "{line}"
    );
    let json = serde_json::to_value(&probe).expect("serializes");
    assert_eq!(
        json["devices"][0]["compute_capability"],
        serde_json::json!([9, 0])
    );
}

#[test]
fn open_of_a_missing_ordinal_is_no_such_device() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    assert_eq!(
        CudaMemory::open(1).map(|_| ()),
        Err(CudaError::NoSuchDevice { index: 1, count: 1 })
    );
    assert_eq!(fake.live(), NOTHING_LIVE);
}

#[test]
fn open_reports_the_device_and_a_two_mib_page() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mem = CudaMemory::open(0).expect("opens");
    assert_eq!(mem.name(), "Fake H200");
    assert_eq!(mem.total_memory(), FAKE_TOTAL);
    assert_eq!(mem.compute_capability(), (9, 0));
    assert_eq!(mem.page_size(), Some(2 * MIB));
    assert_eq!(fake.live().context_refs, 1);
    drop(mem);
    assert_eq!(
        fake.live(),
        NOTHING_LIVE,
        "Drop releases the primary context"
    );
}

// --------------------------------------------------------------- segments

#[test]
fn malloc_and_free_track_segments_and_memory() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let before = mem.mem_get_info();
    assert_eq!(before.total, FAKE_TOTAL);
    assert_eq!(before.free, FAKE_TOTAL - FAKE_CONTEXT);
    let a = mem.malloc(20 * MIB).expect("fits");
    let b = mem.malloc(2 * MIB).expect("fits");
    assert_ne!(a, b);
    assert_eq!(mem.held().allocations, 2);
    assert_eq!(mem.held().allocated_bytes, 22 * MIB);
    assert_eq!(mem.mem_get_info().free, before.free - 22 * MIB);
    mem.free(a, 20 * MIB);
    assert_eq!(fake.live().allocations, 1);
    assert_eq!(mem.held().allocations, 1);
    assert_eq!(mem.last_error(), None);
    mem.free(a, 20 * MIB);
    assert!(
        mem.last_error()
            .is_some_and(|e| e.contains("not a segment")),
        "a second free is refused before reaching the driver"
    );
    assert_eq!(fake.live().allocations, 1);
    mem.free(b, 2 * MIB);
    assert_eq!(mem.mem_get_info().free, before.free);
}

#[test]
fn malloc_beyond_the_device_is_out_of_memory_and_other_failures_are_other() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    assert_eq!(mem.malloc(FAKE_TOTAL), Err(DeviceError::OutOfMemory));
    assert_eq!(mem.malloc(1 << 50), Err(DeviceError::OutOfMemory));
    match mem.malloc(0) {
        Err(DeviceError::Other(msg)) => assert!(msg.contains("CUDA_ERROR_INVALID_VALUE"), "{msg}"),
        other => panic!("expected Other, got {other:?}"),
    }
    assert_eq!(fake.live().allocations, 0);
}

#[test]
fn memory_moves_between_threads_because_each_call_binds_the_context() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let a = mem.malloc(4 * MIB).expect("fits");
    // The fake's current context is per thread, like the driver's.
    let mut mem = std::thread::spawn(move || {
        let b = mem.malloc(4 * MIB).expect("binds on the new thread");
        mem.free(b, 4 * MIB);
        mem.free(a, 4 * MIB);
        assert!(mem.mem_get_info().free > 0);
        mem
    })
    .join()
    .expect("thread");
    assert_eq!(mem.last_error(), None);
    let c = mem.malloc(4 * MIB).expect("and back");
    mem.free(c, 4 * MIB);
    drop(mem);
    assert_eq!(fake.live(), NOTHING_LIVE);
}

// --------------------------------------------------------------- expandable segments

#[test]
fn map_creates_one_handle_per_page_and_unmap_releases_any_subrange() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let base = mem.reserve_address_range(30 * MIB).expect("reserves");
    assert_eq!(base % (2 * MIB), 0);
    assert_eq!(mem.held().reserved_address_bytes, 30 * MIB);
    assert_eq!(fake.used_bytes(), 0, "a reservation takes no memory");

    mem.map(base, 20 * MIB).expect("maps");
    assert_eq!(fake.live().handles, 10);
    assert_eq!(fake.live().mappings, 10);
    assert_eq!(fake.used_bytes(), 20 * MIB);
    mem.map(base + 20 * MIB, 4 * MIB).expect("grows");
    assert_eq!(mem.held().mapped_bytes, 24 * MIB);

    // The allocator unmaps whole pages out of what several map calls mapped.
    mem.unmap(base + 18 * MIB, 4 * MIB);
    assert_eq!(mem.last_error(), None);
    assert_eq!(fake.live().handles, 10);
    assert_eq!(fake.used_bytes(), 20 * MIB);
    mem.unmap(base, 2 * MIB);
    assert_eq!(mem.held().mapped_pages, 9);

    mem.unmap(base, 30 * MIB);
    assert_eq!((fake.live().handles, fake.live().mappings), (0, 0));
    mem.release_address_range(base, 30 * MIB);
    assert_eq!(mem.last_error(), None);
    assert_eq!(mem.held(), Default::default());
    drop(mem);
    assert_eq!(fake.live(), NOTHING_LIVE);
}

#[test]
fn map_refuses_misaligned_foreign_and_overlapping_ranges_before_the_driver() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let base = mem.reserve_address_range(8 * MIB).expect("reserves");
    let refused = |r: Result<(), DeviceError>| matches!(r, Err(DeviceError::Other(_)));
    assert!(refused(mem.map(base + MIB, 2 * MIB)), "misaligned address");
    assert!(refused(mem.map(base, 3 * MIB)), "size not whole pages");
    assert!(
        refused(mem.map(base + 6 * MIB, 4 * MIB)),
        "past the reservation"
    );
    assert!(
        refused(mem.map(base + 64 * GIB, 2 * MIB)),
        "outside every reservation"
    );
    mem.map(base, 4 * MIB).expect("maps");
    assert!(
        refused(mem.map(base + 2 * MIB, 4 * MIB)),
        "overlaps a mapped page"
    );
    assert_eq!(fake.live().handles, 2);
    assert_eq!(mem.map(base, 0), Ok(()), "nothing to map");
}

#[test]
fn map_is_all_or_nothing_when_a_page_cannot_be_created() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let base = mem.reserve_address_range(40 * MIB).expect("reserves");
    mem.map(base, 2 * MIB).expect("first page");

    fake.fail("cuMemCreate", 3, CUDA_ERROR_OUT_OF_MEMORY);
    assert_eq!(
        mem.map(base + 2 * MIB, 20 * MIB),
        Err(DeviceError::OutOfMemory)
    );
    assert_eq!(
        (fake.live().handles, fake.live().mappings),
        (1, 1),
        "the 3 pages made are released"
    );
    assert_eq!(fake.used_bytes(), 2 * MIB);

    fake.fail("cuMemMap", 4, CUDA_ERROR_INVALID_VALUE);
    assert!(
        matches!(mem.map(base + 2 * MIB, 20 * MIB), Err(DeviceError::Other(m)) if m.contains("cuMemMap"))
    );
    assert_eq!((fake.live().handles, fake.live().mappings), (1, 1));

    fake.fail("cuMemSetAccess", 0, CUDA_ERROR_OUT_OF_MEMORY);
    assert_eq!(
        mem.map(base + 2 * MIB, 20 * MIB),
        Err(DeviceError::OutOfMemory)
    );
    assert_eq!((fake.live().handles, fake.live().mappings), (1, 1));

    // Running out for real half-way is the same.
    let big = mem
        .reserve_address_range(2 * GIB)
        .expect("address space is free");
    assert_eq!(mem.map(big, 2 * GIB), Err(DeviceError::OutOfMemory));
    assert_eq!((fake.live().handles, fake.live().mappings), (1, 1));
    assert_eq!(mem.held().mapped_pages, 1);
    assert_eq!(mem.last_error(), None, "every rollback step succeeded");

    mem.map(base + 2 * MIB, 20 * MIB)
        .expect("and then it works");
    assert_eq!(fake.live().handles, 11);
}

#[test]
fn release_address_range_unmaps_what_is_left_and_ignores_strangers() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let base = mem.reserve_address_range(10 * MIB).expect("reserves");
    mem.map(base, 6 * MIB).expect("maps");
    mem.release_address_range(base, 10 * MIB);
    assert_eq!(fake.live().reservations, 0);
    assert_eq!(fake.live().handles, 0);
    mem.release_address_range(base, 10 * MIB);
    assert!(
        mem.last_error()
            .is_some_and(|e| e.contains("not a reservation"))
    );
}

#[test]
fn drop_gives_back_segments_pages_reservations_scratch_and_modules() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let a = mem.malloc(6 * MIB).expect("fits");
    mem.malloc(MIB).expect("fits");
    let base = mem.reserve_address_range(64 * MIB).expect("reserves");
    mem.map(base, 20 * MIB).expect("maps");
    mem.reserve_address_range(2 * MIB).expect("reserves");
    if fake.has_kernels {
        mem.fill(a, 4096, 1).expect("fills");
        assert_eq!(mem.verify(a, 4096, 1), Ok(None));
        mem.burn(1).expect("burns");
    } else {
        mem.load_kernels(KernelChoice::ShippedPtx).expect("loads");
    }
    let live = fake.live();
    // Two segments, plus verify's and burn's scratch when kernels ran.
    let scratch = if fake.has_kernels { 2 } else { 0 };
    assert_eq!(live.allocations, 2 + scratch);
    assert_eq!((live.handles, live.reservations, live.modules), (10, 2, 1));
    drop(mem);
    assert_eq!(fake.live(), NOTHING_LIVE);
    assert_eq!(fake.used_bytes(), 0);
}

// --------------------------------------------------------------- kernels

#[test]
fn fill_writes_pattern_byte_at_every_offset_aligned_or_not() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    if !kernels_or_skip(fake) {
        return;
    }
    let mut mem = CudaMemory::open(0).expect("opens");
    let len = 4 * MIB;
    let a = mem.malloc(len).expect("fits");
    mem.fill(a, len, 0xDEAD_BEEF).expect("fills");
    let bytes = host_bytes(a, len);
    let wrong = (0..len).find(|&i| bytes[i as usize] != pattern_byte(i, 0xDEAD_BEEF));
    assert_eq!(wrong, None);
    // Unaligned start and ragged end: offsets are relative to the fill's start.
    for (start, n) in [(1, 7), (3, 4093), (5, 1), (2, 6)] {
        mem.fill(a + start, n, 42).expect("fills");
        let bytes = host_bytes(a + start, n);
        assert!(
            (0..n).all(|i| bytes[i as usize] == pattern_byte(i, 42)),
            "start {start}, len {n}"
        );
        assert_eq!(mem.verify(a + start, n, 42), Ok(None));
    }
    // Auto: a CUBIN when NVRTC is loaded (VRAMTOP_NVRTC_LIB), else the shipped PTX.
    match (mem.kernel_origin(), cuda::nvrtc_version()) {
        (Some(KernelOrigin::Cubin { arch, .. }), Some(_)) => {
            assert_eq!(arch, "sm_90");
            assert_eq!(fake.last_module_kind(), 2);
        }
        (Some(KernelOrigin::ShippedPtx { why }), None) => {
            assert!(why.contains("NVRTC"), "{why}");
            assert_eq!(fake.last_module_kind(), 1);
        }
        other => panic!("unexpected kernel origin {other:?}"),
    }
}

#[test]
fn verify_finds_the_first_wrong_byte_and_a_wrong_seed_at_offset_zero() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    if !kernels_or_skip(fake) {
        return;
    }
    let mut mem = CudaMemory::open(0).expect("opens");
    let len = MIB + 3;
    let a = mem.malloc(len).expect("fits");
    mem.fill(a, len, 7).expect("fills");
    assert_eq!(mem.verify(a, len, 7), Ok(None));
    assert_ne!(
        pattern_byte(0, 7),
        pattern_byte(0, 8),
        "the seeds differ at offset 0"
    );
    assert_eq!(mem.verify(a, len, 8), Ok(Some(0)));
    // Corrupt two bytes: the lower offset is reported, whichever thread saw it.
    for offset in [len - 1, 777_777, 4097] {
        // SAFETY: inside the fake allocation of `len` bytes held by `mem`.
        unsafe { *((a + offset) as *mut u8) ^= 0x10 };
    }
    assert_eq!(mem.verify(a, len, 7), Ok(Some(4097)));
    assert_eq!(
        mem.verify(a + 4098, len - 4098, 7),
        Ok(Some(0)),
        "offsets restart at the range"
    );
}

#[test]
fn kernels_run_on_mapped_pages_of_an_expandable_segment() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    if !kernels_or_skip(fake) {
        return;
    }
    let mut mem = CudaMemory::open(0).expect("opens");
    let base = mem.reserve_address_range(20 * MIB).expect("reserves");
    mem.map(base, 6 * MIB).expect("maps");
    mem.map(base + 6 * MIB, 2 * MIB).expect("maps");
    mem.fill(base + 100, 8 * MIB - 100, 3)
        .expect("fills across map calls");
    assert_eq!(mem.verify(base + 100, 8 * MIB - 100, 3), Ok(None));
}

#[test]
fn kernels_refuse_memory_the_backend_does_not_hold_without_launching() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut mem = CudaMemory::open(0).expect("opens");
    let a = mem.malloc(2 * MIB).expect("fits");
    let base = mem.reserve_address_range(8 * MIB).expect("reserves");
    mem.map(base, 2 * MIB).expect("maps");
    let launches = fake.launches();
    let refused = |r: Result<(), DeviceError>| matches!(r, Err(DeviceError::Other(m)) if m.contains("not memory this CUDA backend"));
    assert!(
        refused(mem.fill(a + MIB, 2 * MIB, 1)),
        "runs past the segment"
    );
    assert!(refused(mem.fill(a + 4 * MIB, 1, 1)), "after the segment");
    assert!(
        refused(mem.fill(base + MIB, 2 * MIB, 1)),
        "into an unmapped page"
    );
    assert!(refused(mem.fill(u64::MAX - 2, 8, 1)), "wraps around");
    assert!(mem.verify(base + 2 * MIB, 1, 1).is_err());
    mem.free(a, 2 * MIB);
    assert!(refused(mem.fill(a, 16, 1)), "freed");
    assert_eq!(fake.launches(), launches);
    assert_eq!(mem.fill(a, 0, 1), Ok(()), "nothing to do is fine anywhere");
    assert_eq!(mem.verify(a, 0, 1), Ok(None));
}

#[test]
fn burn_keeps_launching_until_the_time_is_up() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    if !kernels_or_skip(fake) {
        return;
    }
    let mut mem = CudaMemory::open(0).expect("opens");
    let launches = fake.launches();
    let start = Instant::now();
    // 300 ms, not less: the fake runs the kernel on the CPU, and on a loaded
    // 2-core machine one early launch can take tens of milliseconds.
    mem.burn(300).expect("burns");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(fake.launches() > launches + 1, "several bounded launches");
    let launches = fake.launches();
    mem.burn(0).expect("nothing to do");
    assert_eq!(fake.launches(), launches);
}

#[test]
fn explicit_kernel_choices_load_ptx_or_need_nvrtc_for_cubin() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let with_nvrtc = cuda::nvrtc_version().is_some();
    let mut mem = CudaMemory::open(0).expect("opens");
    let origin = mem.load_kernels(KernelChoice::ShippedPtx).expect("loads");
    assert!(matches!(origin, KernelOrigin::ShippedPtx { .. }));
    assert_eq!(fake.last_module_kind(), 1);
    match mem.load_kernels(KernelChoice::Cubin) {
        Ok(KernelOrigin::Cubin { arch, .. }) => {
            assert!(with_nvrtc);
            assert_eq!(arch, "sm_90");
            assert_eq!(fake.last_module_kind(), 2, "an ELF image");
        }
        Err(CudaError::NvrtcMissing) => assert!(!with_nvrtc && cuda::nvrtc_version().is_none()),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        fake.live().modules <= 1,
        "a reload unloads the previous module"
    );
    fake.fail("cuModuleLoadData", 0, 200);
    assert!(mem.load_kernels(KernelChoice::ShippedPtx).is_err());
    drop(mem);
    assert_eq!(fake.live(), NOTHING_LIVE);
}

// --------------------------------------------------------------- the allocator model

fn allocator(settings: &str) -> CachingAllocator<CudaMemory> {
    let config = AllocatorConfig::parse(settings).expect("valid settings");
    CachingAllocator::new(CudaMemory::open(0).expect("opens"), 0, config)
}

#[test]
fn caching_allocator_runs_on_cuda_memory() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut m = allocator("");
    let a = m.malloc(6 * MIB, 0).expect("a");
    let b = m.malloc(6 * MIB, 0).expect("b");
    let c = m.malloc(100, 0).expect("c");
    assert_eq!(m.memory_reserved(), 20 * MIB + 2 * MIB);
    assert_eq!(fake.live().allocations, 2);
    m.free(b).expect("free b");
    m.empty_cache();
    assert_eq!(
        fake.live().allocations,
        2,
        "a's segment still holds a block"
    );
    m.free(a).expect("free a");
    m.free(c).expect("free c");
    m.empty_cache();
    assert_eq!(m.memory_reserved(), 0);
    assert_eq!(fake.live().allocations, 0);
    m.check_invariants().expect("consistent");
    assert_eq!(m.device().last_error(), None);
}

#[test]
fn caching_allocator_with_expandable_segments_runs_on_cuda_memory() {
    let Some((_guard, fake)) = fake_gpu() else {
        return;
    };
    let mut m = allocator("expandable_segments:True");
    let a = m.malloc(30 * MIB, 0).expect("a");
    let b = m.malloc(30 * MIB, 0).expect("b");
    assert_eq!(b, a + 30 * MIB, "one growing address range");
    assert_eq!(fake.live().handles, 30, "60 MiB of 2 MiB pages");
    if fake.has_kernels {
        // The tensors span pages from different map calls.
        m.device_mut().fill(a, 60 * MIB, 5).expect("fills");
        assert_eq!(m.device_mut().verify(a, 60 * MIB, 5), Ok(None));
    }
    m.free(a).expect("free a");
    m.empty_cache();
    assert_eq!(m.memory_reserved(), 40 * MIB);
    assert_eq!(fake.live().handles, 20, "the first 20 MiB page is unmapped");
    let small = m.malloc(1000, 0).expect("small pool");
    m.free(small).expect("free small");
    // Too big for what is left: the allocator frees its cache and retries, then OOM.
    assert!(m.malloc(FAKE_TOTAL, 0).is_err());
    m.free(b).expect("free b");
    m.empty_cache();
    assert_eq!(m.memory_reserved(), 0);
    assert_eq!((fake.live().handles, fake.live().mappings), (0, 0));
    m.check_invariants().expect("consistent");
    assert_eq!(m.device().last_error(), None);
    drop(m);
    assert_eq!(fake.live(), NOTHING_LIVE);
}
