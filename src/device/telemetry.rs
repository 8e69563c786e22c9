//! What a backend reports about each GPU (the driver view, like nvidia-smi).
//!
//! Every figure is an `Option`: `None` means the GPU or driver does not
//! report it (shown as "n/a"), never a fake 0.

use serde::Serialize;
use thiserror::Error;

/// One compute process holding memory on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// Bytes of GPU memory the driver attributes to the process.
    pub used_memory: Option<u64>,
    /// The process owner, from /proc where visible.
    pub user: Option<String>,
    /// The command line, from /proc where visible.
    pub command: Option<String>,
    /// The parent process id, from /proc where visible.
    pub parent_pid: Option<u32>,
    /// MIG placement, when the GPU is partitioned.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    /// What the process uses besides GPU memory (flat in the JSON).
    #[serde(flatten)]
    pub usage: ProcessUsage,
}

impl GpuProcess {
    /// A process with its pid and GPU memory known and everything else
    /// `None` (or unknown usage): what a list of one driver's figures has
    /// before `/proc` is read; built up with struct update syntax.
    pub fn new(pid: u32, used_memory: Option<u64>) -> Self {
        GpuProcess {
            pid,
            used_memory,
            user: None,
            command: None,
            parent_pid: None,
            gpu_instance_id: None,
            compute_instance_id: None,
            usage: ProcessUsage::default(),
        }
    }

    /// Whether the process is a child of another GPU process, so that it
    /// holds a CUDA context of its own (a DataLoader worker that touched
    /// CUDA: a whole context wasted). `gpu_pids`: every pid the driver
    /// lists on the physical GPUs. `false` where the parent is unknown.
    pub fn own_context_in_child(&self, gpu_pids: &std::collections::BTreeSet<u32>) -> bool {
        self.parent_pid
            .is_some_and(|pp| pp != self.pid && gpu_pids.contains(&pp))
    }
}

/// What a GPU process uses besides GPU memory, as nvitop shows it: its
/// share of the GPU's SMs, of the host's CPU and the host memory it holds.
/// `None` where unknown: a driver that does not report it, a process
/// `/proc` does not show, the first sample (CPU time needs two), and
/// every simulated process (its pid is made up, so `/proc` is never read
/// for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcessUsage {
    /// Percent of the GPU's SM time the process used over the driver's
    /// last sample period (NVML's process utilisation, 0–100).
    pub sm_percent: Option<u32>,
    /// Percent of one CPU the process used between the last two samples
    /// (user + system time over wall time: above 100 with several busy
    /// threads, as top shows it), to 0.1.
    pub cpu_percent: Option<f64>,
    /// Bytes of host memory resident (RSS).
    pub host_memory: Option<u64>,
}

/// A MIG instance shown as its own row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigInfo {
    /// The physical GPU this instance lives on.
    pub parent_index: u32,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// One sample of one GPU (or MIG instance).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSample {
    pub index: u32,
    pub name: String,
    pub uuid: Option<String>,
    /// Bytes.
    pub memory_total: Option<u64>,
    pub memory_used: Option<u64>,
    pub memory_free: Option<u64>,
    /// Percent over the driver's last sample period.
    pub gpu_utilization: Option<u32>,
    pub memory_utilization: Option<u32>,
    /// Degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Milliwatts.
    pub power_draw_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    /// MHz.
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// Percent of maximum fan speed.
    pub fan_percent: Option<u32>,
    /// `None` when the driver cannot list them (not supported, no
    /// permission): unknown, not "no processes".
    pub processes: Option<Vec<GpuProcess>>,
    /// Set when this row is a MIG instance.
    pub mig: Option<MigInfo>,
}

impl GpuSample {
    /// A sample with only the identity known and every metric `None`.
    pub fn unknown(index: u32, name: impl Into<String>) -> Self {
        GpuSample {
            index,
            name: name.into(),
            uuid: None,
            memory_total: None,
            memory_used: None,
            memory_free: None,
            gpu_utilization: None,
            memory_utilization: None,
            temperature_c: None,
            power_draw_mw: None,
            power_limit_mw: None,
            sm_clock_mhz: None,
            memory_clock_mhz: None,
            fan_percent: None,
            processes: None,
            mig: None,
        }
    }

    /// The processes the driver listed; none where it cannot list them
    /// (for sums and rows; say "n/a" from `processes` itself).
    pub fn listed_processes(&self) -> &[GpuProcess] {
        self.processes.as_deref().unwrap_or_default()
    }
}

/// A GPU that answered, or one that stopped answering.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum GpuReading {
    Ok(GpuSample),
    /// The GPU gave no reading: it disappeared (fell off the bus, reset),
    /// this user may not read it, or the driver failed; skipped, not fatal.
    /// `cause` says which, for the word a row leads with.
    Lost {
        index: u32,
        reason: String,
        cause: Unanswered,
    },
}

/// Why a GPU gave no reading. A row says "lost" only for a GPU that is
/// gone (NVML's GPU_IS_LOST, a reset needed): one this user may not open
/// is there and answers its owner, and saying "lost" sends them looking
/// for a hardware fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unanswered {
    /// Fell off the bus, stopped responding, needs a reset.
    #[default]
    Lost,
    /// No permission to open or read the GPU.
    NoAccess,
    /// Any other driver error: the reason says what.
    Failed,
}

impl Unanswered {
    /// The word a GPU's row leads with, before its reason.
    pub fn label(self) -> &'static str {
        match self {
            Unanswered::Lost => "lost",
            Unanswered::NoAccess => "no access",
            Unanswered::Failed => "error",
        }
    }

    /// Reads the `cause` a recording or `--json` wrote; a recording from
    /// before the field existed said "lost" for every cause.
    pub fn from_name(name: &str) -> Unanswered {
        match name {
            "no_access" => Unanswered::NoAccess,
            "failed" => Unanswered::Failed,
            _ => Unanswered::Lost,
        }
    }
}

impl GpuReading {
    pub fn sample(&self) -> Option<&GpuSample> {
        match self {
            GpuReading::Ok(s) => Some(s),
            GpuReading::Lost { .. } => None,
        }
    }
}

/// Facts about the driver stack, for `vramtop doctor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriverInfo {
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    /// The newest CUDA version the driver supports, e.g. 12080 for 12.8.
    pub cuda_driver_version: Option<u32>,
}

/// Why a backend could not start, as a kind: what `doctor` advises
/// doing differs with it (install, reload, permissions), the words of
/// `reason` alone would leave it to guessing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unavailability {
    /// The library is not installed.
    LibraryMissing,
    /// The library is there but could not be loaded or lacks entry points.
    LibraryUnusable,
    /// The kernel driver is not loaded.
    DriverNotLoaded,
    /// No permission to talk to the driver.
    NoPermission,
    /// Kernel driver and library of different versions (an upgrade
    /// without a reboot or reload).
    VersionMismatch,
    /// The driver answers but reports no GPUs.
    NoDevices,
    /// Anything else: the reason says what.
    Other,
}

impl Unavailability {
    /// The cause in a few words, for a banner at 80 columns beside
    /// "showing 1 simulated GPU: "; `None` where only the whole reason
    /// says it (`Other`).
    pub fn short(self) -> Option<&'static str> {
        match self {
            Unavailability::LibraryMissing => Some("no NVIDIA driver is installed"),
            Unavailability::LibraryUnusable => Some("libnvidia-ml is not usable"),
            Unavailability::DriverNotLoaded => Some("the NVIDIA kernel driver is not loaded"),
            Unavailability::NoPermission => Some("no permission to use the NVIDIA driver"),
            Unavailability::VersionMismatch => {
                Some("kernel driver and libnvidia-ml versions differ")
            }
            Unavailability::NoDevices => Some("the driver lists no GPUs"),
            Unavailability::Other => None,
        }
    }
}

/// A telemetry backend failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TelemetryError {
    #[error("{backend} is not available: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
        cause: Unavailability,
    },
    #[error("{backend} failed: {reason}")]
    Failed {
        backend: &'static str,
        reason: String,
    },
}

/// A source of per-GPU samples: the simulated GPUs or NVML.
pub trait Telemetry: Send {
    /// "sim" or "nvml".
    fn backend_name(&self) -> &'static str;
    /// Driver and library versions, as far as known.
    fn driver_info(&self) -> DriverInfo;
    /// Samples every GPU. A GPU that fails is reported as lost; only a
    /// failure of the backend itself is an error.
    fn sample(&mut self) -> Result<Vec<GpuReading>, TelemetryError>;
}
