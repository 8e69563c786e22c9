//! The dashboard (`vramtop`), `vramtop --once --json` and `vramtop record`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use color_eyre::eyre::{WrapErr, eyre};

use super::{DashboardArgs, DeviceArgs, SamplingArgs};
use crate::app::observe::AllocatorSources;
use crate::device::factory::{TelemetrySelection, select_telemetry};
use crate::device::sampler::Sampler;
use crate::device::sim::SIM_WARMUP_MS;
use crate::shell::run::{RunOptions, run as run_dashboard};
use crate::ui::Theme;

/// How long `--once` and `record` wait for the probes they find to send
/// their hello, first stats and segments (they come right after
/// connecting).
const PROBE_WAIT: Duration = Duration::from_millis(1_500);

fn select(device: &DeviceArgs) -> color_eyre::Result<TelemetrySelection> {
    select_telemetry(device.backend, &device.sim_config()).map_err(|e| eyre!("{e}"))
}

/// The live dashboard.
pub fn run(args: &DashboardArgs) -> color_eyre::Result<ExitCode> {
    let (device, display) = (&args.device, &args.display);
    use std::io::IsTerminal as _;
    // A dashboard drawn into a pipe or a file helps nobody (and would keep a
    // script waiting forever): say what to use instead.
    if !std::io::stdout().is_terminal() {
        return Err(eyre!(
            "the dashboard needs a terminal on stdout; for headless output use \
             `vramtop --once --json` or `vramtop record FILE`"
        ));
    }
    let selection = select(device)?;
    let no_color = display.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let mut theme = if no_color {
        Theme::monochrome()
    } else {
        Theme::colored()
    };
    theme.ascii = display.ascii;
    let debug_panic_after = match std::env::var(super::DEBUG_PANIC_AFTER_ENV) {
        Ok(text) => Some(
            super::duration_arg(&text)
                .map_err(|e| eyre!("{}: {e}", super::DEBUG_PANIC_AFTER_ENV))?,
        ),
        Err(_) => None,
    };
    tracing::info!(backend = selection.backend, "dashboard starting");
    run_dashboard(
        selection,
        RunOptions {
            interval: Duration::from_millis(args.sampling.interval),
            theme,
            debug_panic_after: debug_panic_after.map(Duration::from_millis),
            stress_cap: args.stress_cap,
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `--once --json`: one full sample on stdout.
pub fn once(device: &DeviceArgs) -> color_eyre::Result<ExitCode> {
    // Probes are discovered while the backend starts.
    let registry = crate::probe::Registry::start_default();
    let mut selection = select(device)?;
    if let Some(sim) = &selection.sim {
        sim.advance(SIM_WARMUP_MS);
    }
    let readings = selection
        .telemetry
        .sample()
        .map_err(|e| eyre!("sampling failed: {e}"))?;
    let sources = AllocatorSources::with_registry(selection.sim.clone(), registry);
    sources.wait_for_probes(PROBE_WAIT);
    let sample = sources
        .observe(readings)
        .headless(selection.backend, selection.fallback_reason.as_deref());
    let text = serde_json::to_string_pretty(&sample).wrap_err("cannot encode the sample")?;
    super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// `record FILE`: one JSON line per sample, flushed per line.
pub fn record(
    device: &DeviceArgs,
    sampling: &SamplingArgs,
    file: &Path,
    duration_ms: Option<u64>,
) -> color_eyre::Result<ExitCode> {
    // Samples are appended to an existing FILE (`force`); its folder must
    // exist.
    if let Some(problem) = super::output_file_problem(file, true) {
        return Err(eyre!(problem));
    }
    let selection = select(device)?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .wrap_err_with(|| format!("cannot open {} for appending", file.display()))?;
    // SIGINT/SIGTERM/SIGHUP end the recording cleanly (the last line stays whole).
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, stop.clone())
            .wrap_err("cannot install a signal handler")?;
    }
    let sources = AllocatorSources::start(selection.sim.clone());
    // As `--once`: the first line already has the probes' figures, so a
    // series does not change source after it.
    sources.wait_for_probes(PROBE_WAIT);
    let backend = selection.backend;
    let banner = selection.fallback_reason.clone();
    let (sampler, rx) = Sampler::spawn(
        selection.telemetry,
        Duration::from_millis(sampling.interval),
    )
    .wrap_err("cannot start the sampler thread")?;
    let started = Instant::now();
    let deadline = duration_ms.map(|ms| started + Duration::from_millis(ms));
    let mut lines = 0u64;
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let Ok(msg) = rx.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let readings = match msg.readings {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed");
                continue;
            }
        };
        let sample = sources
            .observe(readings)
            .headless(backend, banner.as_deref());
        let line = serde_json::to_string(&sample).wrap_err("cannot encode a sample")?;
        writeln!(out, "{line}").wrap_err("cannot write the record file")?;
        out.flush().wrap_err("cannot flush the record file")?;
        lines += 1;
    }
    sampler.stop();
    eprintln!(
        "vramtop record: {lines} samples written to {}",
        file.display()
    );
    Ok(ExitCode::SUCCESS)
}
