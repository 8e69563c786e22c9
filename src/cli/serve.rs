//! `vramtop serve`: headless, serves `/metrics` in the Prometheus text format.
//!
//! Sampling runs in the background: the sampler thread (the dashboard's)
//! samples the backend every `--interval`, and each sample is rendered once
//! into the body that every scrape until the next sample gets. A scrape
//! therefore never calls NVML and costs a copy of a few kilobytes, however
//! often or from however many Prometheus servers it comes; the data is at
//! most one interval old (`vramtop_last_sample_timestamp_seconds` says how
//! old).
//!
//! The HTTP side is [`crate::serve::http`]: hyper on a small tokio runtime
//! of its own, one task per connection, within fixed limits. This thread
//! takes the samples and publishes each rendered body to it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use color_eyre::eyre::{WrapErr, eyre};
use tokio::sync::watch;

use super::{DeviceArgs, SamplingArgs};
use crate::app::observe::AllocatorSources;
use crate::app::source::probe_oom_counts;
use crate::device::GpuReading;
use crate::device::factory::{AutoPolicy, select_telemetry_with};
use crate::device::sampler::{SampleMsg, Sampler};
use crate::serve::check_listen;
use crate::serve::http::{self, Limits};
use crate::serve::metrics::{AllocatorFigures, GpuIdentity, MetricsInput, render};

// Simulated time run before serving, so that the simulated training
// processes have started (the same warm-up as `--once`).
use crate::device::sim::SIM_WARMUP_MS;

/// How long the loop waits for a sample before it looks at the stop flag
/// again (ms): bounds how late a signal is noticed.
const POLL_MS: u64 = 50;

/// The runtime threads that answer HTTP requests: answering is a copy of a
/// ready body, so two keep up with hundreds of scrapers.
const HTTP_THREADS: usize = 2;

/// How long stopping waits for answers under way before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The longest wait for the first sample before serving anyway.
const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(5);

/// Counters, and where the latest body goes.
struct Exporter {
    backend: &'static str,
    /// Every simulated trainer and attached `vramtop_probe` process (real
    /// PyTorch allocators).
    sources: AllocatorSources,
    samples_total: u64,
    scrape_errors_total: u64,
    /// The body every scrape gets until the next sample.
    body: watch::Sender<Bytes>,
    /// Every GPU seen answering, by index: a lost one's `vramtop_gpu_up 0`
    /// keeps the labels its 1 had.
    last_seen: BTreeMap<u32, GpuIdentity>,
}

impl Exporter {
    fn render(&mut self, readings: Vec<GpuReading>, last_sample_unix_s: Option<f64>) {
        // The dashboard shows one allocator per GPU; the exporter all of them.
        let observed = self.sources.observe(readings);
        GpuIdentity::remember(&mut self.last_seen, &observed.readings);
        let views = observed.every_view();
        let ooms = probe_oom_counts(&observed.probes);
        let allocators: Vec<AllocatorFigures<'_>> = views
            .iter()
            .map(|(gpu, v)| AllocatorFigures {
                gpu: *gpu,
                pid: v.pid,
                stats: &v.stats,
                fragmentation: &v.fragmentation,
                unknown: &v.unknown,
                ooms_seen: v.pid.and_then(|pid| ooms.get(&(*gpu, pid)).copied()),
            })
            .collect();
        let body = render(&MetricsInput {
            version: env!("CARGO_PKG_VERSION"),
            backend: self.backend,
            readings: &observed.readings,
            allocators: &allocators,
            samples_total: self.samples_total,
            scrape_errors_total: self.scrape_errors_total,
            last_sample_unix_s,
            last_seen: &self.last_seen,
        });
        self.body.send_replace(Bytes::from(body));
    }

    fn take(&mut self, msg: SampleMsg) {
        let unix_s = SystemTime::now()
            .checked_sub(msg.taken_at.elapsed())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        match msg.readings {
            Ok(readings) => {
                self.samples_total += 1;
                self.render(readings, unix_s);
            }
            Err(e) => {
                // A failed sample drops the GPU series (stale figures served
                // as fresh would mislead) and counts the error.
                tracing::warn!(error = %e, "sampling failed");
                self.scrape_errors_total += 1;
                self.render(Vec::new(), unix_s);
            }
        }
    }
}

/// `vramtop serve`.
pub fn run(
    device: &DeviceArgs,
    sampling: &SamplingArgs,
    listen: SocketAddr,
    allow_remote: bool,
) -> color_eyre::Result<ExitCode> {
    check_listen(listen, allow_remote).map_err(|e| eyre!("{e}"))?;
    // A broken driver fails here rather than being served as a healthy
    // simulated GPU; no driver at all is still simulated.
    let selection = select_telemetry_with(device.backend, &device.sim_config(), AutoPolicy::EXPORT)
        .map_err(|e| eyre!("{e}"))?;
    if let Some(reason) = &selection.fallback_reason {
        super::say_warning(reason);
    }
    if let Some(sim) = &selection.sim {
        sim.advance(SIM_WARMUP_MS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(HTTP_THREADS)
        .thread_name("vramtop-http")
        .enable_all()
        .build()
        .wrap_err("cannot start the HTTP runtime")?;
    let listener = http::bind(listen, runtime.handle())
        .map_err(|e| eyre!("cannot listen on {listen}: {e}"))?;
    // With port 0 the system picks the port: say which.
    let bound = listener.local_addr().unwrap_or(listen);

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .wrap_err("cannot install a signal handler")?;
    }
    let mut exporter = Exporter {
        backend: selection.backend,
        sources: AllocatorSources::start(selection.sim.clone()),
        samples_total: 0,
        scrape_errors_total: 0,
        body: watch::Sender::new(Bytes::new()),
        last_seen: BTreeMap::new(),
    };
    exporter.render(Vec::new(), None);
    let (sampler, rx) = Sampler::spawn(
        selection.telemetry,
        Duration::from_millis(sampling.interval),
    )
    .wrap_err("cannot start the sampler thread")?;
    // The first sample is taken at once: wait for it (boundedly), so that
    // the first scrape already has the GPUs.
    if let Ok(msg) = rx.recv_timeout(FIRST_SAMPLE_WAIT) {
        exporter.take(msg);
    }
    runtime.spawn(http::serve(
        listener,
        exporter.body.subscribe(),
        Limits::default(),
    ));
    tracing::info!(%bound, backend = exporter.backend, "serving metrics");
    eprintln!("vramtop serve: serving metrics on http://{bound}/metrics");

    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(Duration::from_millis(POLL_MS)) {
            Ok(msg) => exporter.take(msg),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                tracing::warn!("the sampler stopped; serving the last sample");
                std::thread::sleep(Duration::from_millis(POLL_MS));
            }
        }
    }
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    sampler.stop();
    eprintln!("vramtop serve: stopped");
    Ok(ExitCode::SUCCESS)
}
