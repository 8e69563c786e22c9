//! `vramtop doctor`: what was found, why a fallback happened, what to install,
//! and the mixed-environment check (two CUDA runtimes in one process, or a
//! runtime newer than the driver supports).

use std::collections::BTreeSet;

use serde::Serialize;

use super::cuda::{self, CudaProbe};
use super::factory::{BackendChoice, select_telemetry};
use super::procfs::{self, LibraryKind, MappedLibrary, MapsUnreadable};
use super::sim::{NotStarted, SIM_WARMUP_MS, SimCluster, SimConfig, not_started_note};
use super::telemetry::{DriverInfo, GpuProcess, GpuReading, TelemetryError, Unavailability};

/// One GPU process and the CUDA libraries it has mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessLibraries {
    pub gpu: u32,
    pub pid: u32,
    pub command: Option<String>,
    /// `None` when /proc/PID/maps is not readable (`unreadable` says why)
    /// or the process is simulated (no /proc entry to read).
    pub libraries: Option<Vec<MappedLibrary>>,
    /// Why `libraries` could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<MapsUnreadable>,
    /// A process of the simulated GPU: its pid is not a real process, so
    /// its libraries were not looked for.
    pub simulated: bool,
    pub warnings: Vec<String>,
}

/// One GPU as telemetry sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuLine {
    pub index: u32,
    pub name: String,
    pub memory_total: Option<u64>,
    /// Driver-side used memory (nvidia-smi's figure: CUDA contexts and
    /// every process's reserved memory), `--once`'s `memory_used`.
    pub memory_used: Option<u64>,
    /// Why the GPU gave no reading, with the word its row leads with
    /// ("lost: …", "no access: …").
    pub lost: Option<String>,
}

/// Everything `doctor` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    pub vramtop_version: String,
    pub platform: String,
    /// NVML: versions when it initialised, else why not (in JSON
    /// `{"ok": true, "driver": …}` or `{"ok": false, "error": …}`).
    #[serde(serialize_with = "nvml_as_json")]
    pub nvml: Result<DriverInfo, String>,
    pub cuda: CudaProbe,
    pub cuda_summary: String,
    /// What `--backend` asked for: auto, sim or nvml.
    pub backend_choice: BackendChoice,
    /// The telemetry backend actually chosen ("nvml", "sim", or "none"
    /// when `--backend nvml` failed), and why.
    pub backend: String,
    pub backend_reason: String,
    /// The config file whose values were applied (set by the command
    /// line's reader; `None` when none was read).
    pub config_file: Option<String>,
    /// Why `config_file` was not used (a syntax error, an unknown key, an
    /// unreadable file); `None` when its values were applied.
    pub config_error: Option<String>,
    /// Set when auto fell back to the simulation (or nvml failed): why.
    pub fallback_reason: Option<String>,
    pub gpus: Vec<GpuLine>,
    pub processes: Vec<ProcessLibraries>,
    /// Simulated processes the flags asked for that could not start (no
    /// room for their CUDA context), so not among `processes`; absent when
    /// every one started. As `--once --json` lists them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_started: Vec<NotStarted>,
    /// [`Self::not_started`] in one line, in the words of the dashboard
    /// and `--once`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_started_note: Option<String>,
    /// Things to do, most important first.
    pub advice: Vec<String>,
}

/// NVML's status as a JSON object, not Rust's `{"Ok": …}` / `{"Err": …}`.
fn nvml_as_json<S: serde::Serializer>(
    nvml: &Result<DriverInfo, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct as _;
    let mut out = serializer.serialize_struct("Nvml", 2)?;
    match nvml {
        Ok(info) => {
            out.serialize_field("ok", &true)?;
            out.serialize_field("driver", info)?;
        }
        Err(why) => {
            out.serialize_field("ok", &false)?;
            out.serialize_field("error", why)?;
        }
    }
    out.end()
}

/// "12.4" → 12040, as cuDriverGetVersion numbers CUDA versions.
fn cuda_version_number(version: &str) -> Option<u32> {
    let mut parts = version.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some(major * 1000 + minor * 10)
}

/// Warnings about one process's CUDA libraries: two runtime versions mapped
/// at once, or a runtime newer than the driver supports.
pub fn environment_warnings(libraries: &[MappedLibrary], driver_cuda: Option<u32>) -> Vec<String> {
    let mut warnings = Vec::new();
    let runtimes: Vec<&str> = libraries
        .iter()
        .filter(|l| l.kind == LibraryKind::CudaRuntime)
        .filter_map(|l| l.version.as_deref())
        .collect();
    // "12" and "12.4.127" are one runtime seen through two names: a mix is
    // two majors, or two major.minor versions.
    let majors: BTreeSet<&str> = runtimes
        .iter()
        .filter_map(|v| v.split('.').next())
        .collect();
    let major_minor: BTreeSet<String> = runtimes
        .iter()
        .filter(|v| v.contains('.'))
        .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
        .collect();
    if majors.len() > 1 || major_minor.len() > 1 {
        let shown: Vec<String> = if major_minor.len() > 1 {
            major_minor.iter().cloned().collect()
        } else {
            majors.iter().map(|m| m.to_string()).collect()
        };
        warnings.push(format!(
            "two CUDA runtimes in one process ({}): libraries built for different CUDA versions are \
             mixed, a known cause of odd memory behaviour; use one environment (e.g. one conda env) \
             for the whole job",
            shown.join(" and ")
        ));
    }
    if let Some(driver) = driver_cuda {
        for v in &major_minor {
            if let Some(n) = cuda_version_number(v)
                && n > driver
            {
                warnings.push(format!(
                    "CUDA runtime {v} is newer than the driver supports (CUDA {}.{}): upgrade the \
                     NVIDIA driver or install a build of the framework for an older CUDA",
                    driver / 1000,
                    (driver % 1000) / 10
                ));
            }
        }
    }
    warnings
}

/// The CUDA libraries a real process on GPU `gpu` maps, and what they
/// warn of against the driver's CUDA version.
fn process_libraries(gpu: u32, p: &GpuProcess, driver_cuda: Option<u32>) -> ProcessLibraries {
    let (libraries, unreadable) = match procfs::gpu_libraries(p.pid) {
        Ok(l) => (Some(l), None),
        Err(why) => (None, Some(why)),
    };
    let warnings = libraries
        .as_deref()
        .map(|l| environment_warnings(l, driver_cuda))
        .unwrap_or_default();
    ProcessLibraries {
        gpu,
        pid: p.pid,
        command: p.command.clone(),
        libraries,
        unreadable,
        simulated: false,
        warnings,
    }
}

/// Gathers the report for the backend `choice` would select. Never fails:
/// whatever is missing is part of the answer.
pub fn diagnose(choice: BackendChoice, sim: &SimConfig) -> DoctorReport {
    diagnose_with(choice, sim, &mut |_, _| Vec::new())
}

/// What [`diagnose_with`] calls on the readings: returns the pids listed on
/// a simulated GPU that are real processes.
pub type ObserveReadings<'a> =
    dyn FnMut(&mut Vec<GpuReading>, Option<&SimCluster>) -> Vec<u32> + 'a;

/// [`diagnose`], with `observe` called on the readings before the report
/// is made of them: the command adds the probes there (their memory on a
/// simulated GPU, as `--once` counts it; a layer above this one), and
/// returns the pids that are real processes though listed on a simulated
/// GPU (probed ones), whose libraries are then read as on a real GPU.
pub fn diagnose_with(
    choice: BackendChoice,
    sim: &SimConfig,
    observe: &mut ObserveReadings<'_>,
) -> DoctorReport {
    let cuda_probe = cuda::probe();
    let cuda_summary = cuda_probe.explain();
    let mut advice = Vec::new();

    let selection = select_telemetry(choice, sim);
    let mut simulation = None;
    // Why NVML did not start, as a kind: the advice differs with it.
    let mut nvml_cause = None;
    let mut cause_of = |e: &TelemetryError| {
        nvml_cause = Some(match e {
            TelemetryError::Unavailable { cause, .. } => *cause,
            TelemetryError::Failed { .. } => Unavailability::Other,
        });
        e.to_string()
    };
    let (backend, fallback_reason, mut telemetry, nvml) = match selection {
        Ok(sel) => {
            simulation = sel.sim.clone();
            let info = sel.telemetry.driver_info();
            let nvml = if sel.backend == "nvml" {
                Ok(info)
            } else if let Some(e) = &sel.nvml_error {
                Err(cause_of(e))
            } else {
                // `--backend sim` does not need NVML; it is still looked
                // for, since what was found is doctor's answer.
                match super::nvml::NvmlTelemetry::init() {
                    Ok(nvml) => Ok(super::Telemetry::driver_info(&nvml)),
                    Err(e) => Err(cause_of(&e)),
                }
            };
            (
                sel.backend.to_string(),
                sel.fallback_reason,
                Some(sel.telemetry),
                nvml,
            )
        }
        Err(e) => (
            "none".to_string(),
            Some(e.to_string()),
            None,
            Err(cause_of(&e)),
        ),
    };
    if let Some(cause) = nvml_cause {
        let mut text = nvml_advice(cause).to_string();
        if backend == "sim" {
            text.push_str(
                "; vramtop runs on a simulated GPU meanwhile (`--backend sim` to choose it \
                 explicitly)",
            );
        }
        advice.push(text);
    }
    if !cuda_probe.driver_library_found || cuda_probe.devices.is_empty() {
        // The CUDA line above gives the reason; repeated here it began a
        // second sentence mid-line.
        advice.push(
            "the stress panel and `vramtop check` use the simulated GPU until CUDA can be used \
             (the CUDA line above says why)"
                .to_string(),
        );
    } else if cuda_probe.nvrtc.is_none() {
        advice.push(
            "NVRTC not found: kernels load from the shipped PTX (fine); for native kernels \
             `pip install nvidia-cuda-nvrtc-cu12` and add its lib folder to LD_LIBRARY_PATH"
                .to_string(),
        );
    }

    // The simulation after the warm-up `--once` and `serve` run too, so
    // that doctor's "used" is their `memory_used` for the same GPU.
    if let Some(cluster) = &simulation {
        cluster.advance(SIM_WARMUP_MS);
    }
    let mut readings = telemetry
        .as_mut()
        .and_then(|t| t.sample().ok())
        .unwrap_or_default();
    let real_pids = observe(&mut readings, simulation.as_ref());
    let driver_cuda = nvml
        .as_ref()
        .ok()
        .and_then(|i| i.cuda_driver_version)
        .or(cuda_probe.driver_version);
    let mut gpus = Vec::new();
    let mut processes = Vec::new();
    for r in &readings {
        match r {
            GpuReading::Ok(s) => {
                gpus.push(GpuLine {
                    index: s.index,
                    name: s.name.clone(),
                    memory_total: s.memory_total,
                    memory_used: s.memory_used,
                    lost: None,
                });
                // The simulated processes have no /proc entries of their own
                // (their pids may be another, real process's): listed as the
                // dashboard lists them, their libraries not looked for.
                if backend != "nvml" {
                    processes.extend(s.listed_processes().iter().map(|p| {
                        if real_pids.contains(&p.pid) {
                            return process_libraries(s.index, p, driver_cuda);
                        }
                        ProcessLibraries {
                            gpu: s.index,
                            pid: p.pid,
                            command: p.command.clone(),
                            libraries: None,
                            unreadable: None,
                            simulated: true,
                            warnings: Vec::new(),
                        }
                    }));
                } else {
                    for p in s.listed_processes() {
                        processes.push(process_libraries(s.index, p, driver_cuda));
                    }
                }
            }
            GpuReading::Lost {
                index,
                reason,
                cause,
            } => {
                advice.push(format!("GPU {index} is not answering: {reason}"));
                gpus.push(GpuLine {
                    index: *index,
                    name: "?".to_string(),
                    memory_total: None,
                    memory_used: None,
                    lost: Some(format!("{}: {reason}", cause.label())),
                });
            }
        }
    }
    for p in &processes {
        for w in &p.warnings {
            advice.push(format!("pid {}: {w}", p.pid));
        }
    }
    // Processes the flags asked for that are in no GPU's list: said, not
    // left to be guessed from a shorter list.
    let not_started = simulation
        .as_ref()
        .map(SimCluster::not_started)
        .unwrap_or_default();
    let not_started_note = not_started_note(&not_started);
    if not_started_note.is_some() {
        advice.push(
            "to start every simulated process, give the simulated GPUs more memory \
             (--sim-memory) or ask for fewer processes (--sim-training, \
             --sim-dataloader-workers)"
                .to_string(),
        );
    }

    let backend_reason = match (choice, &fallback_reason) {
        (BackendChoice::Auto, None) => "auto: NVML initialised".to_string(),
        (BackendChoice::Auto, Some(why)) => format!("auto fell back: {why}"),
        // The choice came from --backend or a config file's `backend`;
        // doctor's Config line says which file was read.
        (BackendChoice::Sim, _) => "chosen: backend sim".to_string(),
        (BackendChoice::Nvml, None) => "chosen: backend nvml".to_string(),
        (BackendChoice::Nvml, Some(why)) => format!("--backend nvml failed: {why}"),
    };
    DoctorReport {
        vramtop_version: env!("CARGO_PKG_VERSION").to_string(),
        platform: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        nvml,
        cuda: cuda_probe,
        cuda_summary,
        backend_choice: choice,
        backend,
        backend_reason,
        config_file: None,
        config_error: None,
        fallback_reason,
        gpus,
        processes,
        not_started,
        not_started_note,
        advice,
    }
}

/// What to do about NVML not starting for `cause`: each kind its own
/// remedy, so that the advice never contradicts the NVML line above it
/// (a driver/library mismatch is not fixed by installing a driver).
pub fn nvml_advice(cause: Unavailability) -> &'static str {
    match cause {
        Unavailability::LibraryMissing => {
            "NVML (libnvidia-ml.so.1) is missing: install the NVIDIA driver to see real GPUs"
        }
        Unavailability::LibraryUnusable => {
            "NVML (libnvidia-ml.so.1) could not be loaded (the NVML line says why): \
             reinstall the NVIDIA driver to see real GPUs"
        }
        Unavailability::DriverNotLoaded => {
            "load the NVIDIA kernel driver (`sudo modprobe nvidia`, or reboot) to see real GPUs"
        }
        Unavailability::NoPermission => {
            "give this user read and write access to /dev/nvidiactl and /dev/nvidia* (in a \
             container, expose the GPUs to it) to see real GPUs"
        }
        Unavailability::VersionMismatch => {
            "the NVIDIA kernel driver and libnvidia-ml differ in version (a driver upgrade \
             without a reboot): reboot, or unload and load the nvidia kernel modules, to see \
             real GPUs"
        }
        Unavailability::NoDevices => {
            "the NVIDIA driver sees no GPUs: check that one is installed and, in a container, \
             exposed to it (e.g. `--gpus all`); CUDA_VISIBLE_DEVICES does not hide GPUs from NVML"
        }
        Unavailability::Other => {
            "NVML did not start (the NVML line says why): `nvidia-smi` shows whether the \
             driver works"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(kind: LibraryKind, version: &str) -> MappedLibrary {
        MappedLibrary {
            kind,
            path: format!("/x/lib{version}.so"),
            version: Some(version.to_string()),
        }
    }

    #[test]
    fn nvml_advice_matches_the_kind_of_failure() {
        use Unavailability as U;
        assert!(nvml_advice(U::LibraryMissing).contains("install the NVIDIA driver"));
        let mismatch = nvml_advice(U::VersionMismatch);
        assert!(mismatch.contains("reboot"), "{mismatch}");
        assert!(!mismatch.contains("missing"), "{mismatch}");
        assert!(!mismatch.contains("install"), "{mismatch}");
        assert!(nvml_advice(U::NoPermission).contains("/dev/nvidiactl"));
        assert!(nvml_advice(U::DriverNotLoaded).contains("modprobe nvidia"));
        assert!(nvml_advice(U::NoDevices).contains("sees no GPUs"));
        // Only a missing library is called missing.
        for cause in [
            U::LibraryUnusable,
            U::DriverNotLoaded,
            U::NoPermission,
            U::VersionMismatch,
            U::NoDevices,
            U::Other,
        ] {
            assert!(!nvml_advice(cause).contains("missing"), "{cause:?}");
        }
    }

    #[test]
    fn one_runtime_under_a_new_enough_driver_gives_no_warning() {
        let libs = [
            lib(LibraryKind::CudaRuntime, "12.4.127"),
            lib(LibraryKind::CudaRuntime, "12"),
            lib(LibraryKind::Cudnn, "9.1.0"),
        ];
        assert!(environment_warnings(&libs, Some(12080)).is_empty());
    }

    #[test]
    fn two_runtime_versions_in_one_process_are_flagged() {
        let libs = [
            lib(LibraryKind::CudaRuntime, "11.8.89"),
            lib(LibraryKind::CudaRuntime, "12.4.127"),
        ];
        let w = environment_warnings(&libs, Some(12080));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("11.8 and 12.4"), "{w:?}");
    }

    #[test]
    fn runtime_newer_than_the_driver_is_flagged() {
        let libs = [lib(LibraryKind::CudaRuntime, "12.8.57")];
        let w = environment_warnings(&libs, Some(12020));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("newer than the driver supports (CUDA 12.2)"),
            "{w:?}"
        );
        assert!(
            environment_warnings(&libs, None).is_empty(),
            "unknown driver: no claim"
        );
    }

    #[test]
    fn diagnose_without_a_driver_explains_and_picks_sim() {
        let report = diagnose(BackendChoice::Auto, &SimConfig::default());
        if report.backend != "sim" {
            return; // a machine with a real driver
        }
        assert!(report.nvml.is_err());
        assert!(report.fallback_reason.is_some());
        assert!(!report.advice.is_empty());
        assert_eq!(report.gpus.len(), 1);
        assert!(report.processes.is_empty());
        assert!(report.backend_reason.starts_with("auto fell back"));
    }

    #[test]
    fn diagnose_with_backend_sim_says_it_was_chosen_not_fallen_back_to() {
        let report = diagnose(BackendChoice::Sim, &SimConfig::default());
        assert_eq!(report.backend, "sim");
        assert_eq!(report.backend_reason, "chosen: backend sim");
        assert!(report.fallback_reason.is_none());
        let json = serde_json::to_value(&report).expect("JSON");
        assert!(json["nvml"]["ok"].is_boolean(), "{}", json["nvml"]);
        assert!(json["nvml"].get("Err").is_none() && json["nvml"].get("Ok").is_none());
    }

    fn with_training() -> SimConfig {
        SimConfig {
            training_processes: 1,
            ..SimConfig::default()
        }
    }

    #[test]
    fn doctor_reports_simulated_processes_as_simulated_without_reading_proc() {
        let report = diagnose(BackendChoice::Sim, &with_training());
        assert!(!report.processes.is_empty(), "{report:?}");
        for p in &report.processes {
            assert!(p.simulated, "{p:?}");
            assert_eq!(
                p.libraries, None,
                "no /proc check of a simulated pid: {p:?}"
            );
        }
        let json = serde_json::to_value(&report).expect("JSON");
        assert_eq!(json["processes"][0]["simulated"], true, "{json}");
    }

    #[test]
    fn doctor_used_memory_is_the_sim_after_the_one_off_warm_up() {
        let report = diagnose(BackendChoice::Sim, &with_training());
        let sel = select_telemetry(BackendChoice::Sim, &with_training()).expect("sim");
        let mut telemetry = sel.telemetry;
        sel.sim.as_ref().expect("sim").advance(SIM_WARMUP_MS);
        let readings = telemetry.sample().expect("sample");
        let Some(GpuReading::Ok(s)) = readings.first() else {
            panic!("{readings:?}");
        };
        assert_eq!(report.gpus[0].memory_used, s.memory_used);
    }
}
