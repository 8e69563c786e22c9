//! The dashboard (`vramtop`), `vramtop --once [--json]` and `vramtop record`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use color_eyre::eyre::{WrapErr, eyre};

use super::{DashboardArgs, DeviceArgs, SamplingArgs};
use crate::app::observe::AllocatorSources;
use crate::app::source::HeadlessSample;
use crate::device::factory::{AutoPolicy, TelemetrySelection, select_telemetry_with};
use crate::device::sampler::Sampler;
use crate::device::sim::SIM_WARMUP_MS;
use crate::shell::run::{RunOptions, run as run_dashboard};
use crate::ui::Theme;
use crate::ui::format::count;

/// How long `--once` and `record` wait for the probes they find to send
/// their hello, first stats and segments (they come right after
/// connecting).
const PROBE_WAIT: Duration = Duration::from_millis(1_500);

/// The backend, with `policy` for `--backend auto`: the dashboard and
/// `--once` simulate a broken driver under a banner, `record` and
/// `--once --json` refuse to.
fn select(device: &DeviceArgs, policy: AutoPolicy) -> color_eyre::Result<TelemetrySelection> {
    select_telemetry_with(device.backend, &device.sim_config(), policy).map_err(|e| eyre!("{e}"))
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
    let selection = select(device, AutoPolicy::INTERACTIVE)?;
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
    let signal = run_dashboard(
        selection,
        RunOptions {
            interval: Duration::from_millis(args.sampling.interval),
            theme,
            debug_panic_after: debug_panic_after.map(Duration::from_millis),
            stress_cap: args.stress_cap,
        },
    )?;
    Ok(signal.map_or(ExitCode::SUCCESS, super::signal_exit_code))
}

/// `--once`: one full sample on stdout, as JSON with `--json`, else as
/// text (`sample_text`).
pub fn once(args: &DashboardArgs) -> color_eyre::Result<ExitCode> {
    // The JSON is an export, read by a script that sees no banner: a broken
    // driver fails it as it fails `serve` and `record`; the text says the
    // GPU is simulated and why, to the person reading it.
    let policy = if args.json {
        AutoPolicy::EXPORT
    } else {
        AutoPolicy::INTERACTIVE
    };
    let sample = once_sample(&args.device, policy)?;
    if !args.json {
        super::emit_text(&super::sample_text::render(&sample), args.display.ascii)
            .wrap_err("cannot write the output")?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = serde_json::to_string_pretty(&sample).wrap_err("cannot encode the sample")?;
    super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// The one sample `--once` prints (as JSON or text): the backend's
/// readings after the simulation's warm-up, with the figures of the
/// probes found (waited for up to [`PROBE_WAIT`]).
/// `policy`: when `--backend auto` may fall back to the simulation.
pub fn once_sample(device: &DeviceArgs, policy: AutoPolicy) -> color_eyre::Result<HeadlessSample> {
    let uid = crate::probe::discovery::current_uid();
    once_sample_with(device, crate::probe::discovery::probe_dirs(uid), policy)
}

/// [`once_sample`] of `--once` (text) with the probes looked for in `dirs`
/// (tests choose a private folder without changing the process's
/// environment).
pub fn once_sample_in(
    device: &DeviceArgs,
    dirs: crate::probe::discovery::ProbeDirs,
) -> color_eyre::Result<HeadlessSample> {
    once_sample_with(device, dirs, AutoPolicy::INTERACTIVE)
}

fn once_sample_with(
    device: &DeviceArgs,
    dirs: crate::probe::discovery::ProbeDirs,
    policy: AutoPolicy,
) -> color_eyre::Result<HeadlessSample> {
    // Probes are discovered while the backend starts.
    let registry = crate::probe::Registry::start_in(dirs, crate::probe::discovery::current_uid());
    let mut selection = select(device, policy)?;
    if let Some(sim) = &selection.sim {
        sim.advance(SIM_WARMUP_MS);
    }
    let readings = selection
        .telemetry
        .sample()
        .map_err(|e| eyre!("sampling failed: {e}"))?;
    let sources = AllocatorSources::with_registry(selection.sim.clone(), registry);
    sources.wait_for_probes(PROBE_WAIT);
    Ok(sources
        .observe(readings)
        .headless(selection.backend, selection.fallback_reason.as_deref()))
}

/// `record FILE`: one JSON line per sample, flushed per line.
pub fn record(
    device: &DeviceArgs,
    sampling: &SamplingArgs,
    file: &Path,
    duration_ms: Option<u64>,
) -> color_eyre::Result<ExitCode> {
    let to_stdout = file.as_os_str() == RECORD_TO_STDOUT;
    // Samples are appended to an existing FILE (`force`); its folder must
    // exist.
    if !to_stdout
        && let Some(problem) = super::output_file_problem(file, true, super::OutputKind::JsonLines)
    {
        return Err(eyre!(problem));
    }
    let selection = select(device, AutoPolicy::EXPORT)?;
    let shown = if to_stdout {
        "stdout".to_string()
    } else {
        file.display().to_string()
    };
    let mut out: Box<dyn std::io::Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .wrap_err_with(|| format!("cannot open {shown} for appending"))?,
        )
    };
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
    let interval = Duration::from_millis(sampling.interval);
    let (sampler, rx) = Sampler::spawn(selection.telemetry, interval)
        .wrap_err("cannot start the sampler thread")?;
    let started = Instant::now();
    // The samples of ticks 0, I, 2I, … before the duration D: D/I of them
    // (rounded up), the first at once. A tick past the last ends the
    // recording; the deadline, one interval after D, only guards against a
    // sampler that stopped answering.
    let ticks = duration_ms.map(|ms| recorded_ticks(ms, sampling.interval));
    let deadline = duration_ms
        .map(|ms| started + Duration::from_millis(ms.saturating_add(sampling.interval.max(1_000))));
    let mut lines = 0u64;
    // GPUs already said lost on stderr: once each, when first seen lost
    // (its lines carry it; the file's reader, `open FILE --summary`, lists
    // it), so an unattended recording's log says a GPU went missing.
    let mut said_lost = std::collections::BTreeSet::new();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let msg = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(msg) => msg,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if ticks.is_some_and(|t| msg.seq >= t) {
            break;
        }
        let readings = match msg.readings {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed");
                continue;
            }
        };
        for note in newly_lost(&readings, &mut said_lost, lines) {
            eprintln!("{note}");
        }
        let sample = sources
            .observe(readings)
            .headless(backend, banner.as_deref());
        let line = serde_json::to_string(&sample).wrap_err("cannot encode a sample")?;
        match writeln!(out, "{line}").and_then(|()| out.flush()) {
            Ok(()) => {}
            // The reader of `record -` has gone: it has what it wanted.
            Err(e) if to_stdout && e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(eyre!("cannot write {shown}: {e}")),
        }
        lines += 1;
        if ticks.is_some_and(|t| msg.seq.saturating_add(1) >= t) {
            break;
        }
    }
    sampler.stop();
    eprintln!(
        "vramtop record: {} written to {shown}",
        count(lines, "sample", "samples")
    );
    Ok(ExitCode::SUCCESS)
}

/// The stderr lines for the GPUs of `readings` read lost for the first
/// time (`said`: those said before, updated), in the sample numbered
/// `sample` from 0.
fn newly_lost(
    readings: &[crate::device::GpuReading],
    said: &mut std::collections::BTreeSet<u32>,
    sample: u64,
) -> Vec<String> {
    readings
        .iter()
        .filter_map(|reading| match reading {
            crate::device::GpuReading::Lost {
                index,
                reason,
                cause,
            } if said.insert(*index) => Some(lost_note(*index, sample, reason, *cause)),
            _ => None,
        })
        .collect()
}

/// The stderr line `record` writes when GPU `index` is first read lost, in
/// the sample numbered `sample` from 0 (`reason`: the driver's words).
fn lost_note(index: u32, sample: u64, reason: &str, cause: crate::device::Unanswered) -> String {
    format!(
        "vramtop record: GPU {index} {} from sample {} on: {}; the lines say so",
        cause.label(),
        sample.saturating_add(1),
        crate::quote::escape_controls(reason)
    )
}

/// `record FILE` with FILE `-` writes to stdout (a file named `-` is `./-`).
pub const RECORD_TO_STDOUT: &str = "-";

/// How many sampler ticks fall before `duration_ms` at `interval_ms`: ticks
/// 0, I, 2I, … below D, so 10m at 1s is 600 (the first at t = 0).
fn recorded_ticks(duration_ms: u64, interval_ms: u64) -> u64 {
    duration_ms.div_ceil(interval_ms.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_gpu_is_said_once_with_the_sample_it_was_lost_in_counted_from_1() {
        assert_eq!(
            lost_note(
                1,
                3,
                "GPU is lost\u{1b}[2J",
                crate::device::Unanswered::Lost
            ),
            "vramtop record: GPU 1 lost from sample 4 on: GPU is lost\\u{1b}[2J; the lines say so"
        );
    }

    #[test]
    fn a_gpu_lost_in_many_samples_is_said_in_the_first_only() {
        use crate::device::GpuReading;
        let lost = |index| GpuReading::Lost {
            index,
            reason: "gone".to_string(),
            cause: crate::device::Unanswered::Lost,
        };
        let mut said = std::collections::BTreeSet::new();
        assert_eq!(newly_lost(&[lost(1)], &mut said, 0).len(), 1);
        assert!(newly_lost(&[lost(1)], &mut said, 1).is_empty());
        let later = newly_lost(&[lost(1), lost(2)], &mut said, 2);
        assert_eq!(
            later,
            ["vramtop record: GPU 2 lost from sample 3 on: gone; the lines say so"]
        );
    }

    #[test]
    fn a_recording_has_duration_over_interval_ticks_rounded_up() {
        assert_eq!(recorded_ticks(600_000, 1_000), 600);
        assert_eq!(recorded_ticks(300, 100), 3);
        assert_eq!(recorded_ticks(250, 100), 3);
        assert_eq!(recorded_ticks(50, 100), 1);
        assert_eq!(recorded_ticks(10, 10), 1);
        assert_eq!(recorded_ticks(u64::MAX, 10), u64::MAX.div_ceil(10));
    }
}
