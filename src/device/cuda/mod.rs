//! The real-GPU backend: CUDA driver memory for the allocator model and the
//! fill/verify/burn kernels, through cudarc with dynamic loading.
//!
//! Nothing here links against CUDA: libcuda and libnvrtc are opened at run
//! time, and every entry point first checks that they can be opened (cudarc
//! panics otherwise) and catches panics as a second line of defence. On a
//! machine without a driver, [`probe`] says so and [`CudaMemory::open`]
//! returns an error.
//!
//! - [`probe`]: what driver, GPUs and NVRTC there are, and one line to act on.
//! - [`CudaMemory`]: [`crate::alloc::DeviceMemory`] on a device's primary
//!   context (cuMemAlloc for segments, cuMemCreate/cuMemMap pages for
//!   expandable segments), and [`crate::device::Kernels`].
//! - [`compile_ptx`], [`compile_cubin`], [`SHIPPED_PTX`]: the kernels of
//!   `assets/kernels/vramtop.cu`, compiled by NVRTC or shipped as old-ISA PTX.

mod driver;
mod kernels;
mod memory;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use thiserror::Error;

use crate::alloc::DeviceError;

pub use kernels::{
    KERNEL_SOURCE, KernelChoice, KernelOrigin, PTX_ARCH, SHIPPED_PTX, SHIPPED_PTX_TARGET,
    SHIPPED_PTX_VERSION, compile_cubin, compile_ptx, portable_ptx, ptx_body,
    shipped_ptx_nvrtc_version,
};
pub use memory::{CudaMemory, HeldMemory};

/// Why a CUDA operation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CudaError {
    /// No libcuda.so.1 could be opened.
    #[error(
        "the CUDA driver library (libcuda.so.1) was not found: install the NVIDIA driver, or run where a GPU is exposed"
    )]
    DriverMissing,
    /// No libnvrtc.so.12 could be opened.
    #[error(
        "NVRTC (libnvrtc.so.12) was not found: `pip install nvidia-cuda-nvrtc-cu12` and add its lib folder to LD_LIBRARY_PATH"
    )]
    NvrtcMissing,
    /// A driver call returned an error code.
    #[error("{call}: {message} ({name})")]
    Driver {
        call: &'static str,
        /// The CUresult value, e.g. 2 for CUDA_ERROR_OUT_OF_MEMORY.
        code: u32,
        /// The C name, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
        name: String,
        /// cuGetErrorString's text.
        message: String,
    },
    /// cudarc panicked (a symbol the installed library lacks, typically).
    #[error("{call}: the CUDA library could not serve the call: {message}")]
    Panicked { call: &'static str, message: String },
    #[error("CUDA device {index} does not exist ({count} visible)")]
    NoSuchDevice { index: u32, count: u32 },
    /// NVRTC failed; `log` holds the compiler's log when there is one.
    #[error("{call}: {message}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Nvrtc {
        call: &'static str,
        message: String,
        log: String,
    },
    /// A library named by path could not be loaded.
    #[error("could not load {path}: {message}")]
    Preload { path: PathBuf, message: String },
    /// A request this backend refuses before asking the driver.
    #[error("{0}")]
    Unsupported(String),
}

/// CUDA_ERROR_OUT_OF_MEMORY.
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

impl CudaError {
    /// Whether the driver ran out of device memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CudaError::Driver { code, .. } if *code == CUDA_ERROR_OUT_OF_MEMORY)
    }

    /// The reason without the call name, e.g. "no CUDA-capable device is
    /// detected (CUDA_ERROR_NO_DEVICE)".
    pub fn reason(&self) -> String {
        match self {
            CudaError::Driver { name, message, .. } => format!("{message} ({name})"),
            other => other.to_string(),
        }
    }
}

impl From<CudaError> for DeviceError {
    fn from(e: CudaError) -> Self {
        if e.is_out_of_memory() {
            DeviceError::OutOfMemory
        } else {
            DeviceError::Other(e.to_string())
        }
    }
}

/// One GPU as the CUDA driver lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaDeviceInfo {
    pub index: u32,
    pub name: String,
    /// (major, minor), e.g. (9, 0) for an H100/H200.
    pub compute_capability: (u32, u32),
    /// Bytes.
    pub total_memory: u64,
}

/// The NVRTC library found, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvrtcInfo {
    /// (major, minor), e.g. (12, 9).
    pub version: (i32, i32),
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaProbe {
    /// Whether libcuda.so.1 could be opened.
    pub driver_library_found: bool,
    /// cuDriverGetVersion, e.g. 12080 for CUDA 12.8.
    pub driver_version: Option<u32>,
    pub devices: Vec<CudaDeviceInfo>,
    pub nvrtc: Option<NvrtcInfo>,
    /// Why there are no devices, e.g. "no CUDA-capable device is detected
    /// (CUDA_ERROR_NO_DEVICE)".
    pub error: Option<String>,
}

/// Looks for the driver, the GPUs and NVRTC. Never panics, whatever is
/// missing.
pub fn probe() -> CudaProbe {
    let nvrtc = driver::nvrtc_version()
        .ok()
        .map(|version| NvrtcInfo { version });
    if !driver::driver_present() {
        return CudaProbe {
            driver_library_found: false,
            driver_version: None,
            devices: Vec::new(),
            nvrtc,
            error: Some("libcuda.so.1 (the CUDA driver library) was not found".to_string()),
        };
    }
    let driver_version = driver::driver_version().ok();
    let (devices, error) = match list_devices() {
        Ok(devices) => (devices, None),
        Err(e) => (Vec::new(), Some(e.reason())),
    };
    CudaProbe {
        driver_library_found: true,
        driver_version,
        devices,
        nvrtc,
        error,
    }
}

fn list_devices() -> Result<Vec<CudaDeviceInfo>, CudaError> {
    let count = driver::init_and_count()?;
    (0..count)
        .map(|index| {
            driver::device_facts(index).map(|f| CudaDeviceInfo {
                index,
                name: f.name,
                compute_capability: f.compute_capability,
                total_memory: f.total_memory,
            })
        })
        .collect()
}

/// "12.8" for 12080.
fn cuda_version_text(version: u32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

impl CudaProbe {
    /// One line a user can act on: what is there, what is missing and what
    /// to install.
    pub fn explain(&self) -> String {
        if !self.driver_library_found {
            return "No CUDA driver: libcuda.so.1 was not found. Install the NVIDIA driver \
                    (in a container, start it with the GPUs exposed, e.g. `--gpus all`); \
                    until then only the simulated GPU is available."
                .to_string();
        }
        let driver = match self.driver_version {
            Some(v) => format!("CUDA driver {} ", cuda_version_text(v)),
            None => "CUDA driver ".to_string(),
        };
        if let Some(error) = &self.error {
            return format!(
                "{driver}found, but no GPU is usable: {error}. Check `nvidia-smi`, \
                 CUDA_VISIBLE_DEVICES and the container's GPU access."
            );
        }
        if self.devices.is_empty() {
            return format!(
                "{driver}found, but it lists no GPU. Check `nvidia-smi`, CUDA_VISIBLE_DEVICES \
                 and the container's GPU access."
            );
        }
        let gpus: Vec<String> = self
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{} {} (sm_{}{}, {})",
                    d.index,
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    crate::alloc::human_bytes(d.total_memory)
                )
            })
            .collect();
        let kernels = match &self.nvrtc {
            Some(n) => format!(
                "kernels are compiled for each GPU by NVRTC {}.{}",
                n.version.0, n.version.1
            ),
            None => "NVRTC not found, so the driver JIT-compiles the shipped PTX \
                     (`pip install nvidia-cuda-nvrtc-cu12` and put its lib folder on \
                     LD_LIBRARY_PATH to compile natively)"
                .to_string(),
        };
        format!(
            "{driver}with {} GPU{}: {}; {kernels}.",
            self.devices.len(),
            if self.devices.len() == 1 { "" } else { "s" },
            gpus.join(", ")
        )
    }
}

/// Libraries opened by [`preload_nvrtc`]; never closed, so that the soname
/// stays loaded for cudarc's own lookup.
static PRELOADED: Mutex<Vec<libloading::os::unix::Library>> = Mutex::new(Vec::new());

/// Opens NVRTC by absolute path (e.g. from `scripts/fetch-nvrtc.sh`) and keeps
/// it loaded, so that cudarc's later lookup by soname (libnvrtc.so.12) finds
/// it without LD_LIBRARY_PATH. Fails if the file is not an NVRTC this build
/// can use (cudarc built for CUDA 12.8 looks for libnvrtc.so.12, not .13).
pub fn preload_nvrtc(path: &Path) -> Result<(), CudaError> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    let preload_error = |message: String| CudaError::Preload {
        path: path.to_path_buf(),
        message,
    };
    if !path.is_absolute() {
        return Err(preload_error(
            "the path must be absolute (a bare name would be searched for, not loaded)".to_string(),
        ));
    }
    // SAFETY: loading NVRTC runs only its ELF initialisers, which have no
    // preconditions; RTLD_GLOBAL makes its soname visible to later dlopens.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| preload_error(e.to_string()))?;
    PRELOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(lib);
    if !driver::nvrtc_present() {
        return Err(preload_error(
            "loaded, but its soname is not one this build looks for (a CUDA 12 \
             libnvrtc.so.12 is needed)"
                .to_string(),
        ));
    }
    Ok(())
}

/// The NVRTC version, if NVRTC can be loaded.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    driver::nvrtc_version().ok()
}
