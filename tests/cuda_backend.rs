//! The cuda backend on this machine as it is (no GPU, no driver: it must say
//! so and never panic), the kernels' source and shipped PTX (checked against
//! NVRTC when VRAMTOP_NVRTC_LIB names libnvrtc.so.12, and against ptxas when
//! VRAMTOP_PTXAS names one), and, with VRAMTOP_TEST_GPU=1, the backend on a
//! real GPU.

mod common;

use common::skip::{Prerequisite, skip};
use std::path::Path;
use std::time::{Duration, Instant};

use vramtop::alloc::{AllocatorConfig, CachingAllocator, DeviceError, DeviceMemory};
use vramtop::device::cuda::{
    self, CudaDeviceInfo, CudaError, CudaMemory, CudaProbe, KernelChoice, KernelOrigin, NvrtcInfo,
};
use vramtop::device::{Kernels, pattern_byte};

const MIB: u64 = 1 << 20;

fn gpu_tests_enabled() -> bool {
    std::env::var("VRAMTOP_TEST_GPU").is_ok_and(|v| v == "1")
}

/// Preloads NVRTC from VRAMTOP_NVRTC_LIB; false (with a note) when unset.
fn nvrtc_or_skip(test: &str) -> bool {
    let Some(path) = std::env::var_os("VRAMTOP_NVRTC_LIB") else {
        skip(
            test,
            "VRAMTOP_NVRTC_LIB is unset: point it at an absolute libnvrtc.so.12 \
             (scripts/fetch-nvrtc.sh fetches one)",
            Prerequisite::ProvidedByCi,
        );
        return false;
    };
    cuda::preload_nvrtc(Path::new(&path)).expect("VRAMTOP_NVRTC_LIB names a usable NVRTC");
    true
}

// --------------------------------------------------------------- without a GPU

#[test]
fn probe_without_a_driver_says_so_and_does_not_panic() {
    let probe = cuda::probe();
    if probe.driver_library_found {
        eprintln!("a CUDA driver is installed here; the no-driver expectations do not apply");
        assert!(!probe.explain().is_empty());
        return;
    }
    assert_eq!(probe.driver_version, None);
    assert!(probe.devices.is_empty());
    assert!(
        probe
            .error
            .as_deref()
            .is_some_and(|e| e.contains("libcuda.so.1"))
    );
    let line = probe.explain();
    assert!(
        line.starts_with("No CUDA driver: libcuda.so.1 was not found."),
        "{line}"
    );
    assert!(line.contains("Install the NVIDIA driver"), "{line}");
    assert!(!line.contains('\n'));
    let json = serde_json::to_value(&probe).expect("serializes");
    assert_eq!(json["driver_library_found"], false);
}

#[test]
fn open_without_a_driver_is_an_error_not_a_panic() {
    if cuda::probe().driver_library_found {
        skip(
            "open_without_a_driver_is_an_error_not_a_panic",
            "a CUDA driver is installed here",
            Prerequisite::OnlySomeMachines,
        );
        return;
    }
    assert_eq!(
        CudaMemory::open(0).map(|_| ()),
        Err(CudaError::DriverMissing)
    );
    assert_eq!(
        CudaMemory::open(7).map(|_| ()),
        Err(CudaError::DriverMissing)
    );
}

#[test]
fn out_of_memory_from_the_driver_is_the_allocators_out_of_memory() {
    let oom = CudaError::Driver {
        call: "cuMemAlloc_v2",
        code: 2,
        name: "CUDA_ERROR_OUT_OF_MEMORY".to_string(),
        message: "out of memory".to_string(),
    };
    assert!(oom.is_out_of_memory());
    assert_eq!(DeviceError::from(oom), DeviceError::OutOfMemory);
    let other = CudaError::Driver {
        call: "cuMemAlloc_v2",
        code: 1,
        name: "CUDA_ERROR_INVALID_VALUE".to_string(),
        message: "invalid argument".to_string(),
    };
    assert_eq!(
        DeviceError::from(other.clone()),
        DeviceError::Other(
            "cuMemAlloc_v2: invalid argument (CUDA_ERROR_INVALID_VALUE)".to_string()
        )
    );
    assert_eq!(
        other.reason(),
        "invalid argument (CUDA_ERROR_INVALID_VALUE)"
    );
}

#[test]
fn explain_names_the_gpus_and_how_kernels_are_built() {
    let mut probe = CudaProbe {
        driver_library_found: true,
        driver_version: Some(12080),
        devices: vec![CudaDeviceInfo {
            index: 0,
            name: "NVIDIA H200".to_string(),
            compute_capability: (9, 0),
            total_memory: 150_110_011_392,
        }],
        nvrtc: Some(NvrtcInfo { version: (12, 9) }),
        error: None,
    };
    assert_eq!(
        probe.explain(),
        "CUDA driver 12.8 with 1 GPU: 0 NVIDIA H200 (sm_90, 139.80 GiB); kernels are compiled \
         for each GPU by NVRTC 12.9."
    );
    probe.nvrtc = None;
    let line = probe.explain();
    assert!(
        line.contains("shipped PTX") && line.contains("nvidia-cuda-nvrtc-cu12"),
        "{line}"
    );
    probe.devices.clear();
    assert!(probe.explain().contains("lists no GPU"));
}

#[test]
fn preload_nvrtc_refuses_relative_and_missing_paths() {
    assert!(matches!(
        cuda::preload_nvrtc(Path::new("libnvrtc.so.12")),
        Err(CudaError::Preload { .. })
    ));
    assert!(matches!(
        cuda::preload_nvrtc(Path::new("/nonexistent/libnvrtc.so.12")),
        Err(CudaError::Preload { .. })
    ));
}

// --------------------------------------------------------------- kernel source and PTX

/// The table in vramtop.cu's header comment: (offset, seed, byte).
fn pattern_table() -> Vec<(u64, u32, u8)> {
    let hex =
        |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex in the table");
    cuda::KERNEL_SOURCE
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("//   pattern "))
        .map(|rest| {
            let f: Vec<&str> = rest.split_whitespace().collect();
            assert_eq!(f.len(), 3, "offset seed byte: {rest}");
            (hex(f[0]), hex(f[1]) as u32, hex(f[2]) as u8)
        })
        .collect()
}

#[test]
fn kernel_source_pattern_table_matches_pattern_byte() {
    let table = pattern_table();
    assert!(table.len() >= 8, "the table has {} rows", table.len());
    for (offset, seed, byte) in table {
        assert_eq!(
            pattern_byte(offset, seed),
            byte,
            "offset {offset:#x}, seed {seed:#x}"
        );
    }
    // The formula itself, as the comment and pattern_byte state it.
    for needle in [
        "(unsigned int)offset ^ (seed * 0x9E3779B9u)",
        "(x * 0x01000193u) >> 24",
    ] {
        assert!(cuda::KERNEL_SOURCE.contains(needle), "{needle}");
    }
}

#[test]
fn shipped_ptx_declares_the_old_isa_and_all_three_kernels() {
    let ptx = cuda::SHIPPED_PTX;
    let header: Vec<&str> = ptx
        .lines()
        .filter(|l| l.starts_with(".version") || l.starts_with(".target"))
        .collect();
    assert_eq!(header, [".version 6.4", ".target sm_52"]);
    for kernel in ["fill_pattern", "verify_pattern", "burn"] {
        assert!(
            ptx.contains(&format!(".visible .entry {kernel}(")),
            "{kernel}"
        );
    }
    assert!(
        cuda::shipped_ptx_nvrtc_version().is_some(),
        "the header records the NVRTC version"
    );
}

#[test]
fn portable_ptx_rewrites_only_the_header() {
    let nvrtc = "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 8.8\n.target sm_52\n\
                 .address_size 64\n\n\t// .globl\tk\n.visible .entry k()\n{\n\tret;\n}\n";
    let shipped = cuda::portable_ptx(nvrtc, (12, 9));
    assert!(shipped.contains("\n.version 6.4\n.target sm_52\n.address_size 64\n"));
    assert!(shipped.contains("// vramtop: NVRTC 12.9 output for compute_52"));
    assert!(shipped.ends_with(".visible .entry k()\n{\n\tret;\n}\n"));
    assert_eq!(cuda::ptx_body(&shipped), cuda::ptx_body(nvrtc));
    assert_eq!(
        cuda::ptx_body(nvrtc),
        ".address_size 64\n\n.visible .entry k()\n{\n\tret;\n}"
    );
    assert_ne!(
        cuda::ptx_body(nvrtc),
        cuda::ptx_body(&nvrtc.replace("ret;", "exit;"))
    );
}

/// Compiles vramtop.cu with NVRTC: PTX for compute_52 must be the shipped
/// PTX's body (when this NVRTC made it), and a CUBIN for sm_90 must build.
/// With VRAMTOP_REGEN_PTX=1 it rewrites assets/kernels/vramtop.ptx instead.
#[test]
fn shipped_ptx_is_what_nvrtc_makes_of_the_source() {
    if !nvrtc_or_skip("shipped_ptx_is_what_nvrtc_makes_of_the_source") {
        return;
    }
    let version = cuda::nvrtc_version().expect("NVRTC loads");
    let fresh = cuda::compile_ptx(cuda::PTX_ARCH).expect("vramtop.cu compiles to PTX");
    assert!(fresh.contains(".target sm_52"));
    let portable = cuda::portable_ptx(&fresh, version);

    let cubin = cuda::compile_cubin("sm_90").expect("vramtop.cu compiles to a CUBIN");
    assert_eq!(&cubin[..4], b"\x7fELF");

    if std::env::var("VRAMTOP_REGEN_PTX").is_ok_and(|v| v == "1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/kernels/vramtop.ptx");
        std::fs::write(&path, &portable).expect("write the PTX");
        eprintln!(
            "wrote {} with NVRTC {}.{}",
            path.display(),
            version.0,
            version.1
        );
        return;
    }
    let shipped_by = cuda::shipped_ptx_nvrtc_version();
    if shipped_by != Some(version) {
        skip(
            "shipped_ptx_is_what_nvrtc_makes_of_the_source (the PTX comparison)",
            &format!(
                "the shipped PTX was made by NVRTC {shipped_by:?}, this is {version:?} \
                 (scripts/fetch-nvrtc.sh pins the version)"
            ),
            Prerequisite::ProvidedByCi,
        );
        return;
    }
    assert!(
        cuda::ptx_body(&portable) == cuda::ptx_body(cuda::SHIPPED_PTX),
        "assets/kernels/vramtop.ptx is stale: regenerate it as assets/kernels/README.md says"
    );
}

#[test]
fn nvrtc_errors_carry_the_compiler_message() {
    if !nvrtc_or_skip("nvrtc_errors_carry_the_compiler_message") {
        return;
    }
    match cuda::compile_ptx("compute_1") {
        Err(CudaError::Nvrtc { call, message, .. }) => {
            assert_eq!(call, "nvrtcCompileProgram");
            assert!(!message.is_empty());
        }
        other => panic!("expected an NVRTC error, got {other:?}"),
    }
}

/// ptxas (from the nvidia-cuda-nvcc-cu12 wheel) assembles the shipped PTX
/// for sm_52 and sm_90: it rejects any instruction newer than `.version 6.4`.
#[test]
fn shipped_ptx_assembles_with_ptxas() {
    let Some(ptxas) = std::env::var_os("VRAMTOP_PTXAS") else {
        skip(
            "shipped_ptx_assembles_with_ptxas",
            "VRAMTOP_PTXAS is unset: point it at a ptxas binary (.ci/run fetches one)",
            Prerequisite::ProvidedByCi,
        );
        return;
    };
    let ptx = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/kernels/vramtop.ptx");
    for arch in ["sm_52", "sm_90"] {
        let out = std::process::Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg(&ptx)
            .args(["-o", "/dev/null"])
            .output()
            .expect("ptxas runs");
        assert!(
            out.status.success(),
            "ptxas -arch={arch}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// --------------------------------------------------------------- on a real GPU

/// GPU 0, for the tests marked `#[ignore]` below: they run only when asked
/// for (`VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored`).
fn gpu() -> Option<CudaMemory> {
    if !gpu_tests_enabled() {
        skip(
            "a real-GPU test run with --ignored",
            "VRAMTOP_TEST_GPU=1 is unset",
            Prerequisite::OnlySomeMachines,
        );
        return None;
    }
    if std::env::var_os("VRAMTOP_NVRTC_LIB").is_some() {
        nvrtc_or_skip("gpu");
    }
    let probe = cuda::probe();
    assert!(
        !probe.devices.is_empty(),
        "VRAMTOP_TEST_GPU=1 but: {}",
        probe.explain()
    );
    Some(CudaMemory::open(0).expect("GPU 0 opens"))
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_malloc_and_free_change_free_memory() {
    let Some(mut mem) = gpu() else { return };
    let before = mem.mem_get_info();
    assert!(before.free <= before.total && before.total > 0);
    // cuMemGetInfo and cuDeviceTotalMem agree up to what the driver keeps back.
    assert!(before.total <= mem.total_memory() && before.total >= mem.total_memory() / 2);
    let a = mem.malloc(256 * MIB).expect("256 MiB");
    let during = mem.mem_get_info();
    assert!(
        during.free + 256 * MIB <= before.free + 16 * MIB,
        "{before:?} → {during:?}"
    );
    mem.free(a, 256 * MIB);
    assert_eq!(mem.held().allocations, 0);
    assert_eq!(mem.last_error(), None);
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_absurd_malloc_is_out_of_memory() {
    let Some(mut mem) = gpu() else { return };
    assert_eq!(mem.malloc(1 << 50), Err(DeviceError::OutOfMemory));
    assert_eq!(mem.held().allocations, 0);
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_expandable_pages_map_unmap_and_release() {
    let Some(mut mem) = gpu() else { return };
    let page = mem
        .page_size()
        .expect("this GPU has virtual memory management");
    assert_eq!(page, 2 * MIB);
    let base = mem.reserve_address_range(64 * MIB).expect("reserves");
    mem.map(base, 20 * MIB).expect("maps");
    mem.map(base + 20 * MIB, 20 * MIB).expect("maps");
    mem.fill(base, 40 * MIB, 9).expect("fills across map calls");
    assert_eq!(mem.verify(base, 40 * MIB, 9), Ok(None));
    mem.unmap(base + 18 * MIB, 4 * MIB);
    assert_eq!(mem.held().mapped_pages, 18);
    assert_eq!(
        mem.verify(base, 18 * MIB, 9),
        Ok(None),
        "the other pages keep their data"
    );
    mem.unmap(base, 64 * MIB);
    mem.release_address_range(base, 64 * MIB);
    assert_eq!(mem.held(), Default::default());
    assert_eq!(mem.last_error(), None);
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_fill_and_verify_with_each_kernel_origin() {
    let Some(mut mem) = gpu() else { return };
    let len = 64 * MIB + 3;
    let a = mem.malloc(len).expect("fits");
    let mut choices = vec![KernelChoice::ShippedPtx, KernelChoice::Auto];
    if cuda::nvrtc_version().is_some() {
        choices.push(KernelChoice::Cubin);
    }
    for choice in choices {
        let origin = mem.load_kernels(choice).expect("kernels load");
        eprintln!("{choice:?}: {origin:?}");
        mem.fill(a, len, 0x1234_5678).expect("fills");
        assert_eq!(mem.verify(a, len, 0x1234_5678), Ok(None), "{origin:?}");
        assert_ne!(pattern_byte(0, 0x1234_5678), pattern_byte(0, 0x1234_5679));
        assert_eq!(mem.verify(a, len, 0x1234_5679), Ok(Some(0)), "{origin:?}");
        mem.fill(a + 1, 4093, 77).expect("unaligned fill");
        assert_eq!(mem.verify(a + 1, 4093, 77), Ok(None));
        // Bytes [1, 4094) now hold seed 77's pattern from offset 0.
        let first_changed =
            (1..4094u64).find(|&i| pattern_byte(i - 1, 77) != pattern_byte(i, 0x1234_5678));
        assert_eq!(mem.verify(a, len, 0x1234_5678), Ok(first_changed));
    }
    if matches!(mem.kernel_origin(), Some(KernelOrigin::Cubin { .. })) {
        eprintln!("CUBIN path exercised");
    }
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_burn_takes_about_the_requested_time() {
    let Some(mut mem) = gpu() else { return };
    mem.burn(10).expect("warm-up, kernel load");
    let start = Instant::now();
    mem.burn(200).expect("burns");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(400),
        "{took:?}"
    );
}

#[test]
#[ignore = "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test cuda_backend -- --ignored"]
fn gpu_caching_allocator_runs_on_cuda_memory() {
    for settings in ["", "expandable_segments:True"] {
        let Some(mem) = gpu() else { return };
        let config = AllocatorConfig::parse(settings).expect("valid");
        let mut m = CachingAllocator::new(mem, 0, config);
        let a = m.malloc(30 * MIB, 0).expect("a");
        let b = m.malloc(30 * MIB, 0).expect("b");
        let c = m.malloc(1000, 0).expect("c");
        m.device_mut().fill(a, 30 * MIB, 1).expect("fill a");
        m.device_mut().fill(b, 30 * MIB, 2).expect("fill b");
        assert_eq!(m.device_mut().verify(a, 30 * MIB, 1), Ok(None));
        m.free(a).expect("free a");
        m.empty_cache();
        assert_eq!(
            m.device_mut().verify(b, 30 * MIB, 2),
            Ok(None),
            "{settings}: b survives"
        );
        m.free(b).expect("free b");
        m.free(c).expect("free c");
        m.empty_cache();
        assert_eq!(m.memory_reserved(), 0, "{settings}");
        assert_eq!(m.device().held().allocations, 0);
        assert_eq!(m.device().held().mapped_pages, 0);
        assert_eq!(m.device().last_error(), None);
        m.check_invariants().expect("consistent");
    }
}
