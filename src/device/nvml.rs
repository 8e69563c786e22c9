//! Telemetry from NVIDIA's management library (NVML) through nvml-wrapper.
//!
//! NVML is loaded at run time (`dlopen("libnvidia-ml.so.1")`), so the binary
//! runs on machines without a driver and [`NvmlTelemetry::init`] simply
//! reports the backend as unavailable there.
//!
//! Error policy, per GPU and per figure:
//! - a query that fails for that metric only (not supported on this board,
//!   a symbol an older driver lacks, no permission, …) gives `None` for that
//!   field, never 0;
//! - a failure that means the GPU itself is gone (GPU lost, reset required,
//!   unknown driver error, NVML uninitialised, or no handle for the index)
//!   turns the whole GPU into [`GpuReading::Lost`], whose `cause` says
//!   "lost" only for a GPU that is gone (lost, reset required) and "no
//!   access" for a permission error; the other GPUs are still sampled.

use std::collections::{BTreeMap, BTreeSet};
use std::os::raw::c_uint;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample;
use nvml_wrapper::{Device, Nvml};

use super::host::HostSampler;
use super::procfs::{self, UserNames};
use super::telemetry::{
    DriverInfo, GpuProcess, GpuReading, GpuSample, MigInfo, ProcessUsage, Telemetry,
    TelemetryError, Unanswered, Unavailability,
};

const BACKEND: &str = "nvml";
/// The soname nvml-wrapper loads by default on Linux.
const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";
/// `NVML_DEVICE_MIG_ENABLE`: the value of `MigMode::current` when MIG is on.
const MIG_ENABLED: u32 = 1;

/// The NVML backend: one loaded library, the GPUs it saw at init.
pub struct NvmlTelemetry {
    nvml: Nvml,
    gpus: Vec<GpuFacts>,
    driver: DriverInfo,
    users: UserNames,
    /// The processes' CPU time and resident memory, from /proc.
    host: HostSampler,
}

impl std::fmt::Debug for NvmlTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlTelemetry")
            .field("gpus", &self.gpus)
            .field("driver", &self.driver)
            .finish_non_exhaustive()
    }
}

/// What does not change while a GPU runs, read once instead of every second.
#[derive(Debug)]
struct GpuFacts {
    index: u32,
    name: Option<String>,
    uuid: Option<String>,
    /// Milliwatts. Read at init: `nvidia-smi -pl` can change it, but that is
    /// rare enough not to pay for it in every sample.
    power_limit_mw: Option<u32>,
    /// Whether the facts above were read from a GPU that answered (a GPU
    /// lost at init is asked again once it answers).
    read: bool,
    /// The newest process utilisation sample's time seen on this GPU
    /// (microseconds since the Unix epoch, the driver's CPU timestamp):
    /// the next query asks for the samples after it.
    sm_seen_us: Option<u64>,
}

impl GpuFacts {
    fn unread(index: u32) -> Self {
        GpuFacts {
            index,
            name: None,
            uuid: None,
            power_limit_mw: None,
            read: false,
            sm_seen_us: None,
        }
    }

    fn read_from(&mut self, device: &Device<'_>) -> Result<(), NvmlError> {
        self.name = metric(device.name())?;
        self.uuid = metric(device.uuid())?;
        self.power_limit_mw = metric(device.enforced_power_limit())?;
        self.read = true;
        Ok(())
    }

    /// The name to show; NVML always knows it, but never show an empty one.
    fn display_name(&self) -> String {
        match &self.name {
            Some(name) if !name.is_empty() => name.clone(),
            _ => format!("GPU {}", self.index),
        }
    }
}

impl NvmlTelemetry {
    /// Loads `libnvidia-ml.so.1` from the default library search path.
    pub fn init() -> Result<Self, TelemetryError> {
        let nvml = Nvml::init().map_err(|e| init_error(DEFAULT_LIBRARY, None, e))?;
        Self::from_nvml(nvml)
    }

    /// Loads NVML from `path` (for a driver outside the search path, or a
    /// stand-in library in tests).
    pub fn init_with_library(path: &Path) -> Result<Self, TelemetryError> {
        let nvml = Nvml::builder()
            .lib_path(path.as_os_str())
            .init()
            .map_err(|e| init_error(&path.display().to_string(), Some(path), e))?;
        Self::from_nvml(nvml)
    }

    fn from_nvml(nvml: Nvml) -> Result<Self, TelemetryError> {
        let count = nvml
            .device_count()
            .map_err(|e| TelemetryError::Unavailable {
                backend: BACKEND,
                reason: format!("NVML could not count the GPUs: {}", describe(&e)),
                cause: Unavailability::Other,
            })?;
        if count == 0 {
            return Err(TelemetryError::Unavailable {
                backend: BACKEND,
                reason: "the NVIDIA driver reports no GPUs".to_owned(),
                cause: Unavailability::NoDevices,
            });
        }
        let gpus = (0..count)
            .map(|index| {
                let mut facts = GpuFacts::unread(index);
                // A GPU that fails here is asked again by `sample`, which
                // reports it as lost while it keeps failing.
                if let Ok(device) = nvml.device_by_index(index) {
                    let _ = facts.read_from(&device);
                }
                facts
            })
            .collect();
        let driver = DriverInfo {
            driver_version: nvml.sys_driver_version().ok(),
            nvml_version: nvml.sys_nvml_version().ok(),
            cuda_driver_version: nvml
                .sys_cuda_driver_version()
                .ok()
                .and_then(|v| u32::try_from(v).ok()),
        };
        Ok(NvmlTelemetry {
            nvml,
            gpus,
            driver,
            users: UserNames::default(),
            host: HostSampler::new(),
        })
    }

    /// How many physical GPUs NVML reported at init.
    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    /// Fills in each listed process's %CPU and host memory, reading /proc
    /// once a pid however many GPUs (and MIG rows) list it.
    fn add_host_usage(&mut self, readings: &mut [GpuReading]) {
        let pids: BTreeSet<u32> = readings
            .iter()
            .filter_map(GpuReading::sample)
            .flat_map(|s| s.listed_processes().iter().map(|p| p.pid))
            .collect();
        let host = self.host.sample(&pids, Instant::now());
        for reading in readings {
            let GpuReading::Ok(sample) = reading else {
                continue;
            };
            for p in sample.processes.iter_mut().flatten() {
                if let Some(figures) = host.get(&p.pid) {
                    p.usage.cpu_percent = figures.cpu_percent;
                    p.usage.host_memory = figures.host_memory;
                }
            }
        }
    }
}

impl Telemetry for NvmlTelemetry {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn driver_info(&self) -> DriverInfo {
        self.driver.clone()
    }

    fn sample(&mut self) -> Result<Vec<GpuReading>, TelemetryError> {
        let mut out = Vec::with_capacity(self.gpus.len());
        for facts in &mut self.gpus {
            if let Err((cause, reason)) = sample_gpu(&self.nvml, facts, &mut self.users, &mut out) {
                out.push(GpuReading::Lost {
                    index: facts.index,
                    reason,
                    cause,
                });
            }
        }
        self.add_host_usage(&mut out);
        Ok(out)
    }
}

/// Pushes the row of one GPU, then one row per MIG device on it; pushes
/// nothing and returns why and the reason when the GPU gave no reading.
fn sample_gpu(
    nvml: &Nvml,
    facts: &mut GpuFacts,
    users: &mut UserNames,
    out: &mut Vec<GpuReading>,
) -> Result<(), (Unanswered, String)> {
    let device = nvml.device_by_index(facts.index).map_err(|e| match e {
        // The row's "no access" already says what failed; the handle is
        // how, which the user cannot act on.
        NvmlError::NoPermission => (
            Unanswered::NoAccess,
            "no permission to open this GPU".to_owned(),
        ),
        e => (
            unanswered(&e),
            format!("no handle for the GPU: {}", describe(&e)),
        ),
    })?;
    let lost = |e: NvmlError| (unanswered(&e), describe(&e));
    if !facts.read {
        facts.read_from(&device).map_err(lost)?;
    }

    let mut sample = GpuSample::unknown(facts.index, facts.display_name());
    sample.uuid = facts.uuid.clone();
    sample.power_limit_mw = facts.power_limit_mw;
    if let Some(memory) = metric(device.memory_info()).map_err(lost)? {
        // NVML's v2 figures: total = used + free + reserved (the driver's
        // own reservation), all in bytes.
        sample.memory_total = Some(memory.total);
        sample.memory_used = Some(memory.used);
        sample.memory_free = Some(memory.free);
    }
    if let Some(util) = metric(device.utilization_rates()).map_err(lost)? {
        sample.gpu_utilization = Some(util.gpu);
        sample.memory_utilization = Some(util.memory);
    }
    sample.temperature_c = metric(device.temperature(TemperatureSensor::Gpu)).map_err(lost)?;
    sample.power_draw_mw = metric(device.power_usage()).map_err(lost)?;
    sample.sm_clock_mhz = metric(device.clock_info(Clock::SM)).map_err(lost)?;
    sample.memory_clock_mhz = metric(device.clock_info(Clock::Memory)).map_err(lost)?;
    sample.fan_percent = metric(device.fan_speed(0)).map_err(lost)?;
    sample.processes = processes(&device, users).map_err(lost)?;
    if let Some(list) = sample.processes.as_mut() {
        let sm = sm_percents(&device, &mut facts.sm_seen_us).map_err(lost)?;
        for p in list {
            // A process the driver has no sample of used no SM time: the
            // driver keeps samples of non-zero utilisation only.
            p.usage.sm_percent = sm
                .as_ref()
                .map(|by_pid| by_pid.get(&p.pid).copied().unwrap_or(0));
        }
    }

    let mig_rows = mig_samples(&device, &sample).map_err(lost)?;
    out.push(GpuReading::Ok(sample));
    out.extend(mig_rows.into_iter().map(GpuReading::Ok));
    Ok(())
}

/// The compute processes on `device`, with owner and command from /proc.
/// `None` for a GPU that cannot list them (not supported, no permission):
/// unknown, never an idle GPU.
fn processes(
    device: &Device<'_>,
    users: &mut UserNames,
) -> Result<Option<Vec<GpuProcess>>, NvmlError> {
    let Some(list) = metric(device.running_compute_processes())? else {
        return Ok(None);
    };
    Ok(Some(
        list.into_iter()
            .map(|p| {
                let info = procfs::process_info_with(p.pid, users);
                GpuProcess {
                    pid: p.pid,
                    used_memory: match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => Some(bytes),
                        UsedGpuMemory::Unavailable => None,
                    },
                    user: info.user,
                    command: info.command,
                    parent_pid: info.parent_pid,
                    gpu_instance_id: p.gpu_instance_id,
                    compute_instance_id: p.compute_instance_id,
                    usage: ProcessUsage::default(),
                }
            })
            .collect(),
    ))
}

/// How far back the first process utilisation query looks, microseconds:
/// the driver buffers samples for longer, and a process's figure from
/// before the dashboard started would read as its current one.
const FIRST_SM_LOOKBACK_US: u64 = 1_000_000;

/// Each process's SM percent over the driver's samples since `seen_us`
/// (moved on to the newest sample's time), by pid; `None` when the GPU
/// cannot say (not supported, as on a MIG-enabled GPU, no permission, a
/// driver without the entry point).
fn sm_percents(
    device: &Device<'_>,
    seen_us: &mut Option<u64>,
) -> Result<Option<BTreeMap<u32, u32>>, NvmlError> {
    let since = seen_us.unwrap_or_else(|| now_unix_us().saturating_sub(FIRST_SM_LOOKBACK_US));
    let samples = match device.process_utilization_stats(since) {
        Ok(samples) => samples,
        // No sample since: no process used the SMs meanwhile.
        Err(NvmlError::NotFound) => Vec::new(),
        Err(e) if is_gpu_level(&e) => return Err(e),
        Err(_) => return Ok(None),
    };
    if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
        *seen_us = Some(newest);
    }
    Ok(Some(latest_sm_by_pid(&samples)))
}

/// The latest sample's SM percent of each pid (the driver may return
/// several a process, one a sample period), at most 100.
fn latest_sm_by_pid(samples: &[ProcessUtilizationSample]) -> BTreeMap<u32, u32> {
    let mut latest: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    for s in samples {
        let entry = latest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
        if s.timestamp >= entry.0 {
            *entry = (s.timestamp, s.sm_util);
        }
    }
    latest
        .into_iter()
        .map(|(pid, (_, sm))| (pid, sm.min(100)))
        .collect()
}

/// Now, microseconds since the Unix epoch (the clock of NVML's sample
/// timestamps); 0 for a clock before 1970.
fn now_unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_micros()).ok())
        .unwrap_or(0)
}

/// One row per MIG device when MIG is enabled on `device`; none when MIG is
/// off, not supported, or the driver lacks the MIG entry points.
///
/// Each row's `index` is the MIG device's slot on its parent (as in
/// `nvidia-smi`'s "MIG dev" column), so rows are identified by
/// `(mig.parent_index, index)`. NVML reports utilisation, temperature,
/// power, clocks and fan for the physical GPU only; they stay `None` here.
fn mig_samples(device: &Device<'_>, parent: &GpuSample) -> Result<Vec<GpuSample>, NvmlError> {
    let mut rows = Vec::new();
    match metric(device.mig_mode())? {
        Some(mode) if mode.current == MIG_ENABLED => {}
        _ => return Ok(rows),
    }
    let Some(slots) = metric(device.mig_device_count())? else {
        return Ok(rows);
    };
    for slot in 0..slots {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            // An empty slot: instances need not be numbered densely.
            Err(NvmlError::NotFound) => continue,
            Err(e) if is_gpu_level(&e) => return Err(e),
            // Not supported or missing from this driver: no MIG rows at all.
            Err(_) => break,
        };
        let gpu_instance_id = instance_id(&mig, InstanceKind::Gpu)?;
        let compute_instance_id = instance_id(&mig, InstanceKind::Compute)?;
        let name = match metric(mig.name())? {
            Some(name) if !name.is_empty() => name,
            _ => format!("{} MIG {slot}", parent.name),
        };
        let mut row = GpuSample::unknown(slot, name);
        row.uuid = metric(mig.uuid())?;
        if let Some(memory) = metric(mig.memory_info())? {
            row.memory_total = Some(memory.total);
            row.memory_used = Some(memory.used);
            row.memory_free = Some(memory.free);
        }
        // Processes on a MIG GPU carry their instance ids; without the
        // instance's ids no process can be placed in it.
        if let Some(gi) = gpu_instance_id {
            row.processes = parent.processes.as_ref().map(|list| {
                list.iter()
                    .filter(|p| {
                        p.gpu_instance_id == Some(gi)
                            && (compute_instance_id.is_none()
                                || p.compute_instance_id == compute_instance_id)
                    })
                    .cloned()
                    .collect()
            });
        }
        row.mig = Some(MigInfo {
            parent_index: parent.index,
            gpu_instance_id,
            compute_instance_id,
        });
        rows.push(row);
    }
    Ok(rows)
}

#[derive(Debug, Clone, Copy)]
enum InstanceKind {
    Gpu,
    Compute,
}

/// The GPU or compute instance id of a MIG device handle. nvml-wrapper 0.13
/// has no safe wrapper for these two calls, so they go through its raw
/// function table; a driver without them gives `None`.
fn instance_id(mig: &Device<'_>, kind: InstanceKind) -> Result<Option<u32>, NvmlError> {
    let lib = mig.nvml().lib();
    let symbol = match kind {
        InstanceKind::Gpu => lib.nvmlDeviceGetGpuInstanceId.as_ref(),
        InstanceKind::Compute => lib.nvmlDeviceGetComputeInstanceId.as_ref(),
    };
    let Ok(function) = symbol else {
        return Ok(None);
    };
    let mut id: c_uint = 0;
    // SAFETY: `function` was resolved from the loaded NVML library with the
    // signature nvml.h declares (`nvmlReturn_t (nvmlDevice_t, unsigned int*)`);
    // the handle came from the same library and stays valid while `mig`
    // borrows the `Nvml` that keeps the library loaded; `id` is a live
    // out-parameter.
    let code = unsafe { function(mig.handle(), &mut id) };
    metric(nvml_try(code).map(|()| id))
}

/// `Ok(Some)` for a value, `Ok(None)` for a metric this GPU does not report,
/// `Err` when the error means the GPU itself is gone.
fn metric<T>(result: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if is_gpu_level(&e) => Err(e),
        Err(_) => Ok(None),
    }
}

/// Errors that say the GPU (or NVML's hold on it) is gone rather than that
/// one metric is unavailable.
fn is_gpu_level(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::GpuLost
            | NvmlError::ResetRequired
            | NvmlError::Uninitialized
            | NvmlError::Unknown
    )
}

/// Which word a GPU's row leads with for an error that left it unread:
/// "lost" only where NVML says the GPU is gone.
fn unanswered(e: &NvmlError) -> Unanswered {
    match e {
        NvmlError::GpuLost | NvmlError::ResetRequired => Unanswered::Lost,
        NvmlError::NoPermission => Unanswered::NoAccess,
        _ => Unanswered::Failed,
    }
}

/// A user-facing phrase for an NVML error.
fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::GpuLost => "the GPU fell off the bus or stopped responding".to_owned(),
        NvmlError::ResetRequired => "the GPU needs a reset before it can be used again".to_owned(),
        NvmlError::Uninitialized => "NVML is no longer initialised".to_owned(),
        NvmlError::Unknown => "the driver reported an unknown error".to_owned(),
        NvmlError::NoPermission => "no permission to access this GPU".to_owned(),
        other => other.to_string(),
    }
}

/// Turns a failed `nvmlInit` into a one-line reason. `explicit` is the path
/// the caller asked for, `None` for the default library search.
fn init_error(library: &str, explicit: Option<&Path>, e: NvmlError) -> TelemetryError {
    use Unavailability as U;
    let (reason, cause) = match &e {
        NvmlError::LibloadingError(load) => {
            let text = load.to_string();
            match explicit {
                Some(path) if !path.exists() => (format!("{library} not found"), U::LibraryMissing),
                None if text.contains("No such file") => (
                    format!("no NVIDIA driver is installed ({library} not found)"),
                    U::LibraryMissing,
                ),
                _ => (
                    format!("could not load {library}: {text}"),
                    U::LibraryUnusable,
                ),
            }
        }
        NvmlError::FailedToLoadSymbol(detail) => (
            format!("{library} is not a usable NVML library ({detail})"),
            U::LibraryUnusable,
        ),
        NvmlError::DriverNotLoaded => (
            "the NVIDIA kernel driver is not loaded (libnvidia-ml is installed, \
             but the nvidia module is not running)"
                .to_owned(),
            U::DriverNotLoaded,
        ),
        NvmlError::NoPermission => (
            "no permission to talk to the NVIDIA driver \
             (check access to /dev/nvidiactl and /dev/nvidia*)"
                .to_owned(),
            U::NoPermission,
        ),
        NvmlError::LibRmVersionMismatch => (
            "the NVIDIA kernel driver and libnvidia-ml \
             versions differ (reboot or reload the driver after an upgrade)"
                .to_owned(),
            U::VersionMismatch,
        ),
        other => (
            format!("NVML failed to initialise: {}", describe(other)),
            U::Other,
        ),
    };
    TelemetryError::Unavailable {
        backend: BACKEND,
        reason,
        cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_and_missing_symbols_are_none_not_errors() {
        assert_eq!(metric::<u32>(Err(NvmlError::NotSupported)).ok(), Some(None));
        assert_eq!(
            metric::<u32>(Err(NvmlError::FailedToLoadSymbol("x".into()))).ok(),
            Some(None)
        );
        assert_eq!(metric::<u32>(Err(NvmlError::NoPermission)).ok(), Some(None));
        assert_eq!(metric(Ok(0u32)).ok(), Some(Some(0)));
    }

    fn util(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn each_pid_gets_its_latest_sm_sample_capped_at_100() {
        let samples = [
            util(7, 200, 40),
            util(7, 100, 90),
            util(8, 150, 250),
            util(7, 300, 35),
        ];
        assert_eq!(
            latest_sm_by_pid(&samples),
            BTreeMap::from([(7, 35), (8, 100)])
        );
        assert!(latest_sm_by_pid(&[]).is_empty());
    }

    #[test]
    fn lost_gpu_errors_are_gpu_level() {
        for e in [
            NvmlError::GpuLost,
            NvmlError::ResetRequired,
            NvmlError::Uninitialized,
            NvmlError::Unknown,
        ] {
            assert!(metric::<u32>(Err(e)).is_err());
        }
    }

    #[test]
    fn init_reasons_are_one_line_and_name_the_cause() {
        let reason = |e| match init_error(DEFAULT_LIBRARY, None, e) {
            TelemetryError::Unavailable { reason, .. } => reason,
            other => panic!("expected Unavailable, got {other:?}"),
        };
        assert!(reason(NvmlError::DriverNotLoaded).contains("not loaded"));
        assert!(reason(NvmlError::NoPermission).contains("permission"));
        assert!(reason(NvmlError::LibRmVersionMismatch).contains("versions differ"));
        for e in [
            NvmlError::DriverNotLoaded,
            NvmlError::NoPermission,
            NvmlError::LibRmVersionMismatch,
            NvmlError::Unknown,
        ] {
            assert!(!reason(e).contains('\n'));
        }
    }
}
