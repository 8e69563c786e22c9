//! Picks the backends and says why.

use serde::Serialize;

use super::nvml::NvmlTelemetry;
use super::sim::{SIM_WARMUP_MS, SimCluster, SimConfig};
use super::telemetry::{Telemetry, TelemetryError, Unavailability};

/// `--backend`: where telemetry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// NVML if it initialises, else the simulated GPU (with a banner saying why).
    Auto,
    /// Always the simulated GPU.
    Sim,
    /// NVML or an error.
    Nvml,
}

/// The chosen telemetry backend.
pub struct TelemetrySelection {
    pub telemetry: Box<dyn Telemetry>,
    /// "sim" or "nvml".
    pub backend: &'static str,
    /// Why `auto` fell back to the simulation (one line for a banner).
    pub fallback_reason: Option<String>,
    /// Why NVML did not initialise, when it was tried and failed.
    pub nvml_error: Option<TelemetryError>,
    /// The simulation, when it is the backend.
    pub sim: Option<SimCluster>,
}

impl std::fmt::Debug for TelemetrySelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetrySelection")
            .field("backend", &self.backend)
            .field("fallback_reason", &self.fallback_reason)
            .finish_non_exhaustive()
    }
}

impl TelemetrySelection {
    /// The fallback banner with the reason in a few words ("showing 1
    /// simulated GPU: kernel driver and libnvidia-ml versions differ"),
    /// for a row too narrow for `fallback_reason`; `None` where the cause
    /// has no short wording.
    pub fn fallback_short(&self) -> Option<String> {
        let (outcome, _) = self.fallback_reason.as_deref()?.split_once(": ")?;
        match self.nvml_error.as_ref()? {
            TelemetryError::Unavailable { cause, .. } => {
                cause.short().map(|short| format!("{outcome}: {short}"))
            }
            _ => None,
        }
    }
}

fn simulated(config: &SimConfig, nvml_error: Option<TelemetryError>) -> TelemetrySelection {
    let cluster = SimCluster::new(config.clone());
    let fallback_reason = nvml_error.as_ref().map(|e| {
        let n = config.gpus.max(1);
        // Said to a person on the banner and by doctor: "1 simulated
        // GPU", never "GPU(s)". The outcome first: an 80-column status
        // line cuts the end of the reason.
        let gpus = if n == 1 { "GPU" } else { "GPUs" };
        // Why NVML is unavailable is the point; that it is NVML's the
        // backend says (doctor gives the whole error).
        match e {
            TelemetryError::Unavailable { reason, .. } => {
                format!("showing {n} simulated {gpus}: {reason}")
            }
            other => format!("showing {n} simulated {gpus}: {other}"),
        }
    });
    TelemetrySelection {
        telemetry: Box::new(cluster.live_telemetry()),
        backend: "sim",
        fallback_reason,
        nvml_error,
        sim: Some(cluster),
    }
}

/// When `--backend auto` falls back to the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoPolicy {
    /// No NVML library at all (no NVIDIA driver installed): the default
    /// case, simulated everywhere.
    pub simulate_without_driver: bool,
    /// The library is there but fails to initialise or lists no GPU (a
    /// broken driver).
    pub simulate_on_broken_driver: bool,
}

impl AutoPolicy {
    /// The dashboard, `--once` (text), doctor and check: a person reads
    /// the banner that says the GPU is simulated and why.
    pub const INTERACTIVE: AutoPolicy = AutoPolicy {
        simulate_without_driver: true,
        simulate_on_broken_driver: true,
    };
    /// `serve`, `record` and `--once --json`: machine-readable exports,
    /// read by no one who would see a banner. A broken driver exported as a healthy simulated
    /// GPU would hide the very fault they are run to catch.
    pub const EXPORT: AutoPolicy = AutoPolicy {
        simulate_without_driver: true,
        simulate_on_broken_driver: false,
    };
}

/// What an export under `--backend auto` adds to a broken driver's error.
pub const BROKEN_DRIVER_HINT: &str = "a broken driver is not exported as a simulated \
     GPU (add --backend sim to export the simulation)";

/// Chooses the telemetry backend, with the interactive policy. `Nvml`
/// fails when NVML does not initialise; `Auto` then falls back to the
/// simulation and explains why.
pub fn select_telemetry(
    choice: BackendChoice,
    sim: &SimConfig,
) -> Result<TelemetrySelection, TelemetryError> {
    select_telemetry_with(choice, sim, AutoPolicy::INTERACTIVE)
}

/// Chooses the telemetry backend; `policy` says when `Auto` may fall back
/// to the simulation.
pub fn select_telemetry_with(
    choice: BackendChoice,
    sim: &SimConfig,
    policy: AutoPolicy,
) -> Result<TelemetrySelection, TelemetryError> {
    match choice {
        BackendChoice::Sim => Ok(simulated(sim, None)),
        BackendChoice::Nvml => Ok(nvml_selection(NvmlTelemetry::init()?)),
        BackendChoice::Auto => match NvmlTelemetry::init() {
            Ok(nvml) => Ok(nvml_selection(nvml)),
            Err(e) => fall_back(sim, e, policy),
        },
    }
}

/// `Auto`'s answer to an NVML that could not be used: a missing library is
/// no driver, any other failure a broken one.
fn fall_back(
    sim: &SimConfig,
    error: TelemetryError,
    policy: AutoPolicy,
) -> Result<TelemetrySelection, TelemetryError> {
    let allowed = match &error {
        TelemetryError::Unavailable {
            cause: Unavailability::LibraryMissing,
            ..
        } => policy.simulate_without_driver,
        _ => policy.simulate_on_broken_driver,
    };
    if allowed {
        return Ok(simulated(sim, Some(error)));
    }
    Err(match error {
        TelemetryError::Unavailable {
            backend,
            reason,
            cause,
        } => TelemetryError::Unavailable {
            backend,
            reason: format!("{reason}; {BROKEN_DRIVER_HINT}"),
            cause,
        },
        TelemetryError::Failed { backend, reason } => TelemetryError::Failed {
            backend,
            reason: format!("{reason}; {BROKEN_DRIVER_HINT}"),
        },
    })
}

/// The simulation the one-off commands (`--once`, `serve`, `doctor`,
/// `check`) see for the same `--sim-*` flags: built as the dashboard builds
/// it and run [`SIM_WARMUP_MS`], so that its training processes have
/// started and hold what `--once --json` reports.
pub fn warmed_simulation(config: &SimConfig) -> SimCluster {
    let cluster = SimCluster::new(config.clone());
    cluster.advance(SIM_WARMUP_MS);
    cluster
}

fn nvml_selection(nvml: NvmlTelemetry) -> TelemetrySelection {
    TelemetrySelection {
        telemetry: Box::new(nvml),
        backend: "nvml",
        fallback_reason: None,
        nvml_error: None,
        sim: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_without_a_driver_falls_back_to_sim_and_says_why() {
        // This machine (and CI) has no NVIDIA driver.
        if NvmlTelemetry::init().is_ok() {
            return;
        }
        let sel = select_telemetry(BackendChoice::Auto, &SimConfig::default()).expect("auto works");
        assert_eq!(sel.backend, "sim");
        let why = sel.fallback_reason.expect("a reason");
        assert!(why.starts_with("showing 1 simulated GPU: "), "{why}");
        assert!(
            why.len() > "showing 1 simulated GPU: ".len(),
            "a reason: {why}"
        );
        // The backend's error keeps the backend's name (doctor prints it).
        let error = sel.nvml_error.expect("the NVML error").to_string();
        assert!(error.starts_with("nvml "), "{error}");
        assert!(sel.sim.is_some());
    }

    #[test]
    fn a_version_mismatch_has_a_short_banner_that_fits_80_columns() {
        let mismatch = TelemetryError::Unavailable {
            backend: "nvml",
            reason: "the NVIDIA kernel driver and libnvidia-ml versions differ \
                     (reboot or reload the driver after an upgrade)"
                .into(),
            cause: crate::device::Unavailability::VersionMismatch,
        };
        let sel = simulated(&SimConfig::default(), Some(mismatch));
        let short = sel.fallback_short().expect("a short banner");
        assert_eq!(
            short,
            "showing 1 simulated GPU: kernel driver and libnvidia-ml versions differ"
        );
        assert!(short.chars().count() <= 80, "{short}");
        // Every cause's short wording fits 80 columns beside the outcome.
        use crate::device::Unavailability as U;
        for cause in [
            U::LibraryMissing,
            U::LibraryUnusable,
            U::DriverNotLoaded,
            U::NoPermission,
            U::VersionMismatch,
            U::NoDevices,
        ] {
            let short = cause.short().expect("a short wording");
            let line = format!("showing 8 simulated GPUs: {short}");
            assert!(line.chars().count() <= 80, "{line}");
        }
    }

    #[test]
    fn the_fallback_reason_says_one_simulated_gpu_not_gpus() {
        let no_nvml = || TelemetryError::Unavailable {
            backend: "nvml",
            reason: "libnvidia-ml.so.1 not found".into(),
            cause: crate::device::Unavailability::LibraryMissing,
        };
        let why = |gpus| {
            let config = SimConfig {
                gpus,
                ..SimConfig::default()
            };
            simulated(&config, Some(no_nvml()))
                .fallback_reason
                .unwrap_or_default()
        };
        assert!(
            why(1).starts_with("showing 1 simulated GPU: "),
            "{}",
            why(1)
        );
        assert!(
            why(4).starts_with("showing 4 simulated GPUs: "),
            "{}",
            why(4)
        );
        assert!(
            why(1).ends_with("libnvidia-ml.so.1 not found"),
            "{}",
            why(1)
        );
    }

    #[test]
    fn the_fallback_banner_keeps_its_outcome_on_an_80_column_status_line() {
        let config = SimConfig::default();
        let why = simulated(
            &config,
            Some(TelemetryError::Unavailable {
                backend: "nvml",
                reason: "no NVIDIA driver is installed (libnvidia-ml.so.1 not found)".into(),
                cause: crate::device::Unavailability::LibraryMissing,
            }),
        )
        .fallback_reason
        .unwrap_or_default();
        let first_80: String = why.chars().take(79).collect();
        assert!(first_80.contains("simulated GPU"), "{why}");
        assert!(first_80.contains("no NVIDIA driver is installed"), "{why}");
    }

    #[test]
    fn explicit_nvml_without_a_driver_is_an_error_not_a_fallback() {
        if NvmlTelemetry::init().is_ok() {
            return;
        }
        let err =
            select_telemetry(BackendChoice::Nvml, &SimConfig::default()).expect_err("no NVML");
        assert!(matches!(err, TelemetryError::Unavailable { .. }));
    }

    fn broken(library_found: bool) -> TelemetryError {
        TelemetryError::Unavailable {
            backend: "nvml",
            reason: "the NVIDIA kernel driver is not loaded".into(),
            cause: if library_found {
                Unavailability::DriverNotLoaded
            } else {
                Unavailability::LibraryMissing
            },
        }
    }

    #[test]
    fn exports_refuse_a_broken_driver_with_the_error_and_the_sim_hint() {
        let err = fall_back(&SimConfig::default(), broken(true), AutoPolicy::EXPORT)
            .expect_err("a broken driver is not simulated for an export");
        let text = err.to_string();
        assert!(
            text.starts_with("nvml is not available: the NVIDIA kernel driver is not loaded; "),
            "{text}"
        );
        assert!(text.contains("--backend sim"), "{text}");
    }

    #[test]
    fn exports_still_simulate_a_machine_without_a_driver() {
        let sel = fall_back(&SimConfig::default(), broken(false), AutoPolicy::EXPORT)
            .expect("no driver at all is the default case");
        assert_eq!(sel.backend, "sim");
        assert!(sel.fallback_reason.is_some());
    }

    #[test]
    fn the_dashboard_simulates_a_broken_driver_and_says_why() {
        let sel = fall_back(&SimConfig::default(), broken(true), AutoPolicy::INTERACTIVE)
            .expect("interactive falls back");
        assert_eq!(sel.backend, "sim");
        let why = sel.fallback_reason.unwrap_or_default();
        assert!(why.ends_with("driver is not loaded"), "{why}");
    }

    #[test]
    fn explicit_sim_never_touches_nvml() {
        let mut sel = select_telemetry(
            BackendChoice::Sim,
            &SimConfig {
                gpus: 3,
                ..SimConfig::default()
            },
        )
        .expect("sim always works");
        assert_eq!(sel.backend, "sim");
        assert_eq!(sel.fallback_reason, None);
        assert_eq!(sel.telemetry.sample().expect("sim samples").len(), 3);
    }
}
