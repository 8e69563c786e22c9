//! Guarded calls into the CUDA driver and NVRTC through cudarc's raw bindings.
//!
//! cudarc loads libcuda/libnvrtc on the first call and panics when a library
//! or one of its symbols is missing. Every call here is therefore made only
//! after [`driver_present`] / [`nvrtc_present`] said yes, and inside
//! `catch_unwind` so that a missing symbol (an old driver) still becomes an
//! error value instead of taking vramtop down.

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nvrtc;

use super::CudaError;

/// Whether a CUDA driver library (libcuda.so.1 on Linux) can be loaded.
pub(crate) fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries dlopen on the candidate names and
    // drops what it opened; it never panics.
    catch_unwind(|| unsafe { cu::is_culib_present() }).unwrap_or(false)
}

/// Whether NVRTC (libnvrtc.so.12 for this build) can be loaded.
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: as for driver_present.
    catch_unwind(|| unsafe { nvrtc::is_culib_present() }).unwrap_or(false)
}

/// Runs `f` and turns a panic inside cudarc into [`CudaError::Panicked`].
pub(crate) fn guarded<T>(call: &'static str, f: impl FnOnce() -> T) -> Result<T, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| CudaError::Panicked {
        call,
        message: panic_message(payload.as_ref()),
    })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs one driver call; anything but CUDA_SUCCESS becomes [`CudaError::Driver`].
pub(crate) fn check(call: &'static str, f: impl FnOnce() -> cu::CUresult) -> Result<(), CudaError> {
    let result = guarded(call, f)?;
    if result == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(driver_error(call, result))
    }
}

/// The driver's own words for `result`, e.g. "no CUDA-capable device is
/// detected" with the name CUDA_ERROR_NO_DEVICE.
pub(crate) fn driver_error(call: &'static str, result: cu::CUresult) -> CudaError {
    // The Debug form of the bindings' enum is the C name; it needs no driver call.
    let name = format!("{result:?}");
    let message = guarded("cuGetErrorString", || {
        let mut text: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: cuGetErrorString only writes a pointer to a static string.
        let rc = unsafe { cu::cuGetErrorString(result, &mut text) };
        if rc == cu::CUresult::CUDA_SUCCESS && !text.is_null() {
            // SAFETY: the driver returns a NUL-terminated static string.
            Some(
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            None
        }
    })
    .ok()
    .flatten()
    .unwrap_or_else(|| name.clone());
    CudaError::Driver {
        call,
        code: result as u32,
        name,
        message,
    }
}

/// Runs one NVRTC call; anything but NVRTC_SUCCESS becomes [`CudaError::Nvrtc`].
pub(crate) fn check_nvrtc(
    call: &'static str,
    f: impl FnOnce() -> nvrtc::nvrtcResult,
) -> Result<(), CudaError> {
    let result = guarded(call, f)?;
    if result == nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let message = guarded("nvrtcGetErrorString", || {
        // SAFETY: returns a pointer to a static NUL-terminated string (or null).
        let text = unsafe { nvrtc::nvrtcGetErrorString(result) };
        if text.is_null() {
            None
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            Some(
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    })
    .ok()
    .flatten()
    .unwrap_or_else(|| format!("{result:?}"));
    Err(CudaError::Nvrtc {
        call,
        message,
        log: String::new(),
    })
}

/// cuDriverGetVersion: the newest CUDA version the driver supports, e.g. 12080.
/// Works before cuInit and without a GPU.
pub(crate) fn driver_version() -> Result<u32, CudaError> {
    let mut version: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    check("cuDriverGetVersion", || unsafe {
        cu::cuDriverGetVersion(&mut version)
    })?;
    u32::try_from(version)
        .map_err(|_| CudaError::Unsupported(format!("driver reports version {version}")))
}

/// cuInit + cuDeviceGetCount.
pub(crate) fn init_and_count() -> Result<u32, CudaError> {
    // SAFETY: cuInit(0) is the documented initialisation; idempotent.
    check("cuInit", || unsafe { cu::cuInit(0) })?;
    let mut count: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    check("cuDeviceGetCount", || unsafe {
        cu::cuDeviceGetCount(&mut count)
    })?;
    Ok(u32::try_from(count).unwrap_or(0))
}

/// The identity of one device, queried with its ordinal.
pub(crate) struct DeviceFacts {
    pub device: cu::CUdevice,
    pub name: String,
    pub compute_capability: (u32, u32),
    /// Bytes.
    pub total_memory: u64,
    pub multiprocessors: u32,
    /// Whether cuMemCreate/cuMemMap (expandable segments) are supported.
    pub virtual_memory_management: bool,
}

pub(crate) fn device_facts(index: u32) -> Result<DeviceFacts, CudaError> {
    let ordinal = std::ffi::c_int::try_from(index)
        .map_err(|_| CudaError::NoSuchDevice { index, count: 0 })?;
    let mut device: cu::CUdevice = 0;
    // SAFETY: writes one CUdevice.
    check("cuDeviceGet", || unsafe {
        cu::cuDeviceGet(&mut device, ordinal)
    })?;

    // Device names are at most 256 bytes in every CUDA version.
    let mut buf = [0 as std::ffi::c_char; 256];
    let len = buf.len() as std::ffi::c_int;
    // SAFETY: the driver writes a NUL-terminated string of at most `len` bytes.
    check("cuDeviceGetName", || unsafe {
        cu::cuDeviceGetName(buf.as_mut_ptr(), len, device)
    })?;
    // SAFETY: buf is NUL-terminated (the driver truncates to len - 1 bytes).
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();

    let major = attribute(
        device,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    )?;
    let minor = attribute(
        device,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    )?;
    let multiprocessors = attribute(
        device,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?;
    // An old driver may not know the attribute; treat that as "no VMM".
    let vmm = attribute(
        device,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
    )
    .unwrap_or(0);

    let mut total: usize = 0;
    // SAFETY: writes one size_t.
    check("cuDeviceTotalMem_v2", || unsafe {
        cu::cuDeviceTotalMem_v2(&mut total, device)
    })?;

    Ok(DeviceFacts {
        device,
        name,
        compute_capability: (major, minor),
        total_memory: total as u64,
        multiprocessors: multiprocessors.max(1),
        virtual_memory_management: vmm != 0,
    })
}

fn attribute(device: cu::CUdevice, attr: cu::CUdevice_attribute) -> Result<u32, CudaError> {
    let mut value: std::ffi::c_int = 0;
    // SAFETY: writes one int.
    check("cuDeviceGetAttribute", || unsafe {
        cu::cuDeviceGetAttribute(&mut value, attr, device)
    })?;
    Ok(u32::try_from(value).unwrap_or(0))
}

/// nvrtcVersion, e.g. (12, 9).
pub(crate) fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    if !nvrtc_present() {
        return Err(CudaError::NvrtcMissing);
    }
    let (mut major, mut minor): (std::ffi::c_int, std::ffi::c_int) = (0, 0);
    // SAFETY: writes two ints.
    check_nvrtc("nvrtcVersion", || unsafe {
        nvrtc::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}
