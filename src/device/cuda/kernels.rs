//! The kernels of `assets/kernels/vramtop.cu`: compiling them with NVRTC,
//! loading them (CUBIN for the device, or the shipped old-ISA PTX) and the
//! [`Kernels`] implementation of [`CudaMemory`].

use std::ffi::{CString, c_void};
use std::time::{Duration, Instant};

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nvrtc;
use serde::Serialize;

use super::CudaError;
use super::driver::{self, check, check_nvrtc, guarded};
use super::memory::CudaMemory;
use crate::alloc::DeviceError;
use crate::device::Kernels;

/// The CUDA C source of the kernels.
pub const KERNEL_SOURCE: &str = include_str!("../../../assets/kernels/vramtop.cu");

/// The kernels as PTX for an old ISA, loaded when NVRTC is absent: NVRTC's
/// output for [`PTX_ARCH`] with its header rewritten by [`portable_ptx`].
pub const SHIPPED_PTX: &str = include_str!("../../../assets/kernels/vramtop.ptx");

/// The virtual architecture the shipped PTX is compiled for (Maxwell, the
/// oldest NVRTC 12 still accepts).
pub const PTX_ARCH: &str = "compute_52";
/// The PTX ISA the shipped PTX declares: 6.4 is CUDA 10.1, so every driver
/// since then JIT-compiles it. The kernels use nothing newer.
pub const SHIPPED_PTX_VERSION: &str = "6.4";
/// The target the shipped PTX declares.
pub const SHIPPED_PTX_TARGET: &str = "sm_52";

/// Threads per block for every kernel.
const BLOCK: u32 = 256;
/// Blocks per SM for fill/verify at most; the grid-stride loops cover the rest.
const FILL_BLOCKS_PER_SM: u32 = 32;
/// Blocks per SM for burn: 8 × 256 = 2048 threads, a full SM on most GPUs.
const BURN_BLOCKS_PER_SM: u32 = 8;
/// Burn iterations of the first launch, and the bounds of any launch. Each
/// iteration is 4 dependent-free FMAs per thread, 2048 threads per SM: at
/// the upper bound a launch takes ~35 ms on an H200 and under 100 ms on a
/// small GPU (T4), so the display stays responsive and no watchdog fires
/// even if the timing feedback misjudges.
const BURN_FIRST_ITERATIONS: u32 = 1024;
const BURN_MIN_ITERATIONS: u32 = 64;
const BURN_MAX_ITERATIONS: u32 = 1 << 20;
/// The length burn aims each launch at.
const BURN_SLICE: Duration = Duration::from_millis(10);

/// Where the loaded kernels came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelOrigin {
    /// Compiled by NVRTC for the device's own architecture: no JIT needed.
    Cubin {
        /// e.g. "sm_90".
        arch: String,
        nvrtc_version: (i32, i32),
    },
    /// `assets/kernels/vramtop.ptx`, JIT-compiled by the driver; `why` says
    /// why no CUBIN was used.
    ShippedPtx { why: String },
}

/// Which kernels [`CudaMemory::load_kernels`] should load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelChoice {
    /// CUBIN from NVRTC when possible, else the shipped PTX.
    Auto,
    /// CUBIN from NVRTC or an error.
    Cubin,
    /// The shipped PTX only.
    ShippedPtx,
}

enum Output {
    Ptx,
    Cubin,
}

fn compile(arch: &str, output: Output) -> Result<Vec<u8>, CudaError> {
    if !driver::nvrtc_present() {
        return Err(CudaError::NvrtcMissing);
    }
    let bad_input = |what: &str| CudaError::Unsupported(format!("{what} contains a NUL byte"));
    let source = CString::new(KERNEL_SOURCE).map_err(|_| bad_input("the kernel source"))?;
    let option =
        CString::new(format!("--gpu-architecture={arch}")).map_err(|_| bad_input("the arch"))?;
    let options = [option.as_ptr()];
    let mut program: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: source and the name are NUL-terminated and outlive the
    // program; no headers.
    check_nvrtc("nvrtcCreateProgram", || unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut program,
            source.as_ptr(),
            c"vramtop.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let result = compiled_output(program, &options, output);
    // SAFETY: program was created above and is destroyed once.
    let _ = guarded("nvrtcDestroyProgram", || unsafe {
        nvrtc::nvrtcDestroyProgram(&mut program)
    });
    result
}

fn compiled_output(
    program: nvrtc::nvrtcProgram,
    options: &[*const std::ffi::c_char],
    output: Output,
) -> Result<Vec<u8>, CudaError> {
    let count = options.len() as std::ffi::c_int;
    // SAFETY: options holds `count` NUL-terminated strings alive for the call.
    let compiled = check_nvrtc("nvrtcCompileProgram", || unsafe {
        nvrtc::nvrtcCompileProgram(program, count, options.as_ptr())
    });
    if let Err(CudaError::Nvrtc { call, message, .. }) = compiled {
        return Err(CudaError::Nvrtc {
            call,
            message,
            log: program_log(program),
        });
    }
    compiled?;
    let mut size: usize = 0;
    let mut bytes;
    match output {
        Output::Ptx => {
            // SAFETY: writes one size_t.
            check_nvrtc("nvrtcGetPTXSize", || unsafe {
                nvrtc::nvrtcGetPTXSize(program, &mut size)
            })?;
            bytes = vec![0u8; size];
            // SAFETY: bytes holds the `size` bytes NVRTC reported.
            check_nvrtc("nvrtcGetPTX", || unsafe {
                nvrtc::nvrtcGetPTX(program, bytes.as_mut_ptr().cast())
            })?;
            // The size counts the terminating NUL.
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
        }
        Output::Cubin => {
            // SAFETY: writes one size_t.
            check_nvrtc("nvrtcGetCUBINSize", || unsafe {
                nvrtc::nvrtcGetCUBINSize(program, &mut size)
            })?;
            bytes = vec![0u8; size];
            // SAFETY: bytes holds the `size` bytes NVRTC reported.
            check_nvrtc("nvrtcGetCUBIN", || unsafe {
                nvrtc::nvrtcGetCUBIN(program, bytes.as_mut_ptr().cast())
            })?;
        }
    }
    Ok(bytes)
}

fn program_log(program: nvrtc::nvrtcProgram) -> String {
    let mut size: usize = 0;
    // SAFETY: writes one size_t.
    if check_nvrtc("nvrtcGetProgramLogSize", || unsafe {
        nvrtc::nvrtcGetProgramLogSize(program, &mut size)
    })
    .is_err()
    {
        return String::new();
    }
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: log holds the `size` bytes NVRTC reported.
    if check_nvrtc("nvrtcGetProgramLog", || unsafe {
        nvrtc::nvrtcGetProgramLog(program, log.as_mut_ptr().cast())
    })
    .is_err()
    {
        return String::new();
    }
    String::from_utf8_lossy(&log)
        .trim_end_matches('\0')
        .trim()
        .to_string()
}

/// Compiles [`KERNEL_SOURCE`] to PTX for a virtual architecture, e.g.
/// "compute_52", with NVRTC exactly as the shipped PTX was made.
pub fn compile_ptx(arch: &str) -> Result<String, CudaError> {
    let bytes = compile(arch, Output::Ptx)?;
    String::from_utf8(bytes).map_err(|_| CudaError::Nvrtc {
        call: "nvrtcGetPTX",
        message: "the PTX is not UTF-8".to_string(),
        log: String::new(),
    })
}

/// Compiles [`KERNEL_SOURCE`] to a CUBIN for a real architecture, e.g.
/// "sm_90", with NVRTC.
pub fn compile_cubin(arch: &str) -> Result<Vec<u8>, CudaError> {
    compile(arch, Output::Cubin)
}

fn is_header_line(line: &str, directive: &str) -> bool {
    line.trim_start()
        .strip_prefix(directive)
        .is_some_and(|rest| rest.starts_with([' ', '\t']))
}

/// Turns NVRTC's PTX for [`PTX_ARCH`] into the shipped file: `.version`
/// becomes [`SHIPPED_PTX_VERSION`], `.target` [`SHIPPED_PTX_TARGET`], and a
/// comment before them records what was done (the rest is kept as is).
pub fn portable_ptx(nvrtc_ptx: &str, nvrtc_version: (i32, i32)) -> String {
    let mut out = String::with_capacity(nvrtc_ptx.len() + 256);
    for line in nvrtc_ptx.split_inclusive('\n') {
        if is_header_line(line, ".version") {
            let original = line.trim();
            out.push_str(&format!(
                "// vramtop: NVRTC {}.{} output for {PTX_ARCH}; \"{original}\" rewritten to\n\
                 // \".version {SHIPPED_PTX_VERSION}\" so that every driver since CUDA 10.1 loads it.\n\
                 // Do not edit: regenerate as assets/kernels/README.md says.\n",
                nvrtc_version.0, nvrtc_version.1
            ));
            out.push_str(&format!(".version {SHIPPED_PTX_VERSION}\n"));
        } else if is_header_line(line, ".target") {
            out.push_str(&format!(".target {SHIPPED_PTX_TARGET}\n"));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The PTX without comments and without its `.version` / `.target` lines:
/// what must be equal for two PTX files to hold the same code.
pub fn ptx_body(ptx: &str) -> String {
    ptx.lines()
        .filter(|line| {
            let t = line.trim_start();
            !t.starts_with("//") && !is_header_line(t, ".version") && !is_header_line(t, ".target")
        })
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// The NVRTC version that made [`SHIPPED_PTX`], from its header comment.
pub fn shipped_ptx_nvrtc_version() -> Option<(i32, i32)> {
    let rest = SHIPPED_PTX.split("// vramtop: NVRTC ").nth(1)?;
    let version = rest.split_whitespace().next()?;
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// A loaded module and its three kernels.
pub(super) struct LoadedKernels {
    module: cu::CUmodule,
    fill: cu::CUfunction,
    verify: cu::CUfunction,
    burn: cu::CUfunction,
    pub(super) origin: KernelOrigin,
}

impl LoadedKernels {
    /// Loads the kernels into the current context.
    fn load(choice: KernelChoice, compute_capability: (u32, u32)) -> Result<Self, CudaError> {
        match choice {
            KernelChoice::Cubin => Self::from_cubin(compute_capability),
            KernelChoice::ShippedPtx => Self::from_ptx("the shipped PTX was asked for".to_string()),
            KernelChoice::Auto => match Self::from_cubin(compute_capability) {
                Ok(kernels) => Ok(kernels),
                Err(why) => Self::from_ptx(why.to_string()).map_err(|e| {
                    CudaError::Unsupported(format!(
                        "the kernels could not be loaded: as CUBIN: {why}; as PTX: {e}"
                    ))
                }),
            },
        }
    }

    fn from_cubin((major, minor): (u32, u32)) -> Result<Self, CudaError> {
        let nvrtc_version = driver::nvrtc_version()?;
        let arch = format!("sm_{major}{minor}");
        let cubin = compile_cubin(&arch)?;
        // An ELF image read in place by the driver: give it 8-byte alignment.
        let mut image = vec![0u64; cubin.len().div_ceil(8)];
        // SAFETY: image has at least cubin.len() bytes; the regions are distinct.
        unsafe {
            std::ptr::copy_nonoverlapping(
                cubin.as_ptr(),
                image.as_mut_ptr().cast::<u8>(),
                cubin.len(),
            );
        }
        let module = load_module(image.as_ptr().cast())?;
        Self::with_module(
            module,
            KernelOrigin::Cubin {
                arch,
                nvrtc_version,
            },
        )
    }

    fn from_ptx(why: String) -> Result<Self, CudaError> {
        let image = CString::new(SHIPPED_PTX).map_err(|_| {
            CudaError::Unsupported("the shipped PTX contains a NUL byte".to_string())
        })?;
        let module = load_module(image.as_ptr().cast())?;
        Self::with_module(module, KernelOrigin::ShippedPtx { why })
    }

    fn with_module(module: cu::CUmodule, origin: KernelOrigin) -> Result<Self, CudaError> {
        let functions = (|| {
            Ok::<_, CudaError>((
                function(module, c"fill_pattern", "cuModuleGetFunction(fill_pattern)")?,
                function(
                    module,
                    c"verify_pattern",
                    "cuModuleGetFunction(verify_pattern)",
                )?,
                function(module, c"burn", "cuModuleGetFunction(burn)")?,
            ))
        })();
        match functions {
            Ok((fill, verify, burn)) => Ok(LoadedKernels {
                module,
                fill,
                verify,
                burn,
                origin,
            }),
            Err(e) => {
                unload_module(module);
                Err(e)
            }
        }
    }

    /// Unloads the module (best effort; the context must be current).
    pub(super) fn unload(self) {
        unload_module(self.module);
    }
}

fn load_module(image: *const c_void) -> Result<cu::CUmodule, CudaError> {
    let mut module: cu::CUmodule = std::ptr::null_mut();
    // SAFETY: image is a NUL-terminated PTX text or a CUBIN kept alive by
    // the caller for the call; writes one module handle.
    check("cuModuleLoadData", || unsafe {
        cu::cuModuleLoadData(&mut module, image)
    })?;
    Ok(module)
}

fn unload_module(module: cu::CUmodule) {
    // SAFETY: module was loaded by load_module and is unloaded once.
    let _ = check("cuModuleUnload", || unsafe { cu::cuModuleUnload(module) });
}

fn function(
    module: cu::CUmodule,
    name: &std::ffi::CStr,
    call: &'static str,
) -> Result<cu::CUfunction, CudaError> {
    let mut f: cu::CUfunction = std::ptr::null_mut();
    // SAFETY: module is loaded; name is NUL-terminated; writes one handle.
    check(call, || unsafe {
        cu::cuModuleGetFunction(&mut f, module, name.as_ptr())
    })?;
    Ok(f)
}

/// Launches `f` on the legacy default stream and waits for it.
///
/// # Safety
/// `params` must point to one value per kernel parameter, of the kernel's
/// parameter types, in order.
unsafe fn launch(
    memory: &CudaMemory,
    f: cu::CUfunction,
    grid: u32,
    params: &mut [*mut c_void],
) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees params; no shared memory, default stream.
    check("cuLaunchKernel", || unsafe {
        cu::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            BLOCK,
            1,
            1,
            0,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })?;
    memory.synchronize()
}

impl CudaMemory {
    /// Loads the kernels (replacing loaded ones) and says where they came from.
    pub fn load_kernels(&mut self, choice: KernelChoice) -> Result<KernelOrigin, CudaError> {
        self.bind()?;
        if let Some(old) = self.kernels.take() {
            old.unload();
        }
        let kernels = LoadedKernels::load(choice, self.facts.compute_capability)?;
        let origin = kernels.origin.clone();
        self.kernels = Some(kernels);
        Ok(origin)
    }

    /// Where the loaded kernels came from; `None` before the first kernel
    /// call or [`CudaMemory::load_kernels`].
    pub fn kernel_origin(&self) -> Option<&KernelOrigin> {
        self.kernels.as_ref().map(|k| &k.origin)
    }

    /// The kernels, loading them ([`KernelChoice::Auto`]) on first use.
    fn kernel_functions(
        &mut self,
    ) -> Result<(cu::CUfunction, cu::CUfunction, cu::CUfunction), CudaError> {
        if self.kernels.is_none() {
            self.load_kernels(KernelChoice::Auto)?;
        }
        match &self.kernels {
            Some(k) => Ok((k.fill, k.verify, k.burn)),
            None => Err(CudaError::Unsupported(
                "the kernels are not loaded".to_string(),
            )),
        }
    }

    /// A scratch buffer of `bytes` for `purpose`, allocated on first use.
    fn scratch_buffer(&mut self, purpose: &'static str, bytes: u64) -> Result<u64, CudaError> {
        if let Some(&ptr) = self.scratch.get(purpose) {
            return Ok(ptr);
        }
        let ptr = self.raw_alloc(bytes)?;
        self.scratch.insert(purpose, ptr);
        Ok(ptr)
    }

    /// Blocks for a grid-stride pass over `len` bytes, 4 bytes per thread.
    fn fill_grid(&self, len: u64) -> u32 {
        let cap = self
            .facts
            .multiprocessors
            .saturating_mul(FILL_BLOCKS_PER_SM)
            .max(1);
        let blocks = len.div_ceil(4).div_ceil(u64::from(BLOCK));
        u32::try_from(blocks).unwrap_or(u32::MAX).clamp(1, cap)
    }

    fn burn_grid(&self) -> u32 {
        self.facts
            .multiprocessors
            .saturating_mul(BURN_BLOCKS_PER_SM)
            .max(1)
    }
}

impl Kernels for CudaMemory {
    fn fill(&mut self, ptr: u64, len: u64, seed: u32) -> Result<(), DeviceError> {
        self.check_owned(ptr, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        let (fill, _, _) = self.kernel_functions()?;
        let grid = self.fill_grid(len);
        let (mut p, mut n, mut s) = (ptr, len, seed);
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut n).cast::<c_void>(),
            (&raw mut s).cast::<c_void>(),
        ];
        // SAFETY: fill_pattern(unsigned char*, unsigned long long, unsigned int)
        // gets a device pointer (u64), a u64 and a u32; the range is ours.
        unsafe { launch(self, fill, grid, &mut params) }?;
        Ok(())
    }

    fn verify(&mut self, ptr: u64, len: u64, seed: u32) -> Result<Option<u64>, DeviceError> {
        self.check_owned(ptr, len)?;
        if len == 0 {
            return Ok(None);
        }
        self.bind()?;
        let (_, verify, _) = self.kernel_functions()?;
        let result = self.scratch_buffer("verify_first_bad", 8)?;
        // All ones = ULLONG_MAX = "no wrong byte"; the kernel lowers it.
        // SAFETY: result is an 8-byte device buffer of ours.
        check("cuMemsetD8_v2", || unsafe {
            cu::cuMemsetD8_v2(result, 0xFF, 8)
        })?;
        let grid = self.fill_grid(len);
        let (mut p, mut n, mut s, mut r) = (ptr, len, seed, result);
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut n).cast::<c_void>(),
            (&raw mut s).cast::<c_void>(),
            (&raw mut r).cast::<c_void>(),
        ];
        // SAFETY: verify_pattern(const unsigned char*, unsigned long long,
        // unsigned int, unsigned long long*) gets u64, u64, u32, u64.
        unsafe { launch(self, verify, grid, &mut params) }?;
        let mut first_bad: u64 = 0;
        // SAFETY: copies 8 bytes from our buffer into first_bad.
        check("cuMemcpyDtoH_v2", || unsafe {
            cu::cuMemcpyDtoH_v2((&raw mut first_bad).cast(), result, 8)
        })?;
        Ok((first_bad != u64::MAX).then_some(first_bad))
    }

    /// Launches the FMA kernel over every SM until `millis` have passed on
    /// the host clock, sizing each launch to about 10 ms from the last one's
    /// duration (within fixed bounds, so a launch never runs long).
    fn burn(&mut self, millis: u32) -> Result<(), DeviceError> {
        if millis == 0 {
            return Ok(());
        }
        self.bind()?;
        let (_, _, burn) = self.kernel_functions()?;
        let grid = self.burn_grid();
        // One f32 per launched thread.
        let scratch_bytes = u64::from(grid) * u64::from(BLOCK) * 4;
        let scratch = self.scratch_buffer("burn_scratch", scratch_bytes)?;
        let budget = Duration::from_millis(u64::from(millis));
        let start = Instant::now();
        let mut iterations = BURN_FIRST_ITERATIONS;
        loop {
            let launched = Instant::now();
            let (mut p, mut n) = (scratch, iterations);
            let mut params = [(&raw mut p).cast::<c_void>(), (&raw mut n).cast::<c_void>()];
            // SAFETY: burn(float*, unsigned int) gets our scratch buffer of
            // grid × BLOCK floats and a u32.
            unsafe { launch(self, burn, grid, &mut params) }?;
            let took = launched.elapsed().as_secs_f64().max(1e-6);
            let elapsed = start.elapsed();
            if elapsed >= budget {
                return Ok(());
            }
            let target = (budget - elapsed).min(BURN_SLICE).as_secs_f64();
            let scaled = f64::from(iterations) * target / took;
            let low = (iterations / 4).max(BURN_MIN_ITERATIONS);
            let high = iterations.saturating_mul(4).min(BURN_MAX_ITERATIONS);
            iterations = (scaled.clamp(f64::from(low), f64::from(high))) as u32;
        }
    }
}
