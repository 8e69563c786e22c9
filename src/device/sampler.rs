//! Sampling on a thread of its own: telemetry calls (NVML in particular) can
//! block for milliseconds, so they never run on the UI's thread.
//!
//! The sampler ticks at a fixed interval; a tick that comes late is skipped
//! rather than bunched up, and samples go through a bounded channel: when the
//! consumer falls behind, new samples are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::telemetry::{GpuReading, Telemetry, TelemetryError};

/// Samples waiting for the consumer, at most.
pub const SAMPLE_QUEUE_DEPTH: usize = 4;

/// One tick's result.
#[derive(Debug, Clone)]
pub struct SampleMsg {
    /// 0, 1, 2 … in tick order (gaps are skipped or dropped ticks).
    pub seq: u64,
    pub taken_at: Instant,
    /// How long the backend took to answer.
    pub cost: Duration,
    pub readings: Result<Vec<GpuReading>, TelemetryError>,
}

/// Counters shared between the sampler thread and its owner.
#[derive(Debug, Default)]
pub struct SamplerCounters {
    pub samples: AtomicU64,
    /// Samples dropped because the consumer had not taken the previous ones.
    pub dropped: AtomicU64,
    /// Ticks skipped because a sample took longer than the interval.
    pub skipped_ticks: AtomicU64,
}

/// A running sampler; dropping it stops the thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    counters: Arc<SamplerCounters>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `telemetry` every `interval`; the first sample is taken
    /// at once.
    pub fn spawn(
        mut telemetry: Box<dyn Telemetry>,
        interval: Duration,
    ) -> std::io::Result<(Sampler, Receiver<SampleMsg>)> {
        let (tx, rx): (SyncSender<SampleMsg>, Receiver<SampleMsg>) =
            mpsc::sync_channel(SAMPLE_QUEUE_DEPTH);
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(SamplerCounters::default());
        let (stop_t, counters_t) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("vramtop-sampler".to_string())
            .spawn(move || {
                let interval = interval.max(Duration::from_millis(10));
                let start = Instant::now();
                let mut tick: u64 = 0;
                while !stop_t.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let readings = telemetry.sample();
                    let msg = SampleMsg {
                        seq: tick,
                        taken_at: t0,
                        cost: t0.elapsed(),
                        readings,
                    };
                    counters_t.samples.fetch_add(1, Ordering::Relaxed);
                    match tx.try_send(msg) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_)) => {
                            counters_t.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(TrySendError::Disconnected(_)) => break,
                    }
                    // Next tick on the fixed grid; skip ticks already missed.
                    let elapsed = start.elapsed();
                    let due = (elapsed.as_nanos() / interval.as_nanos()) as u64 + 1;
                    if due > tick + 1 {
                        counters_t
                            .skipped_ticks
                            .fetch_add(due - tick - 1, Ordering::Relaxed);
                    }
                    tick = due;
                    let next = start + interval * u32::try_from(tick).unwrap_or(u32::MAX);
                    // Sleep in short slices so that a stop request is honoured quickly.
                    while !stop_t.load(Ordering::Relaxed) {
                        let now = Instant::now();
                        if now >= next {
                            break;
                        }
                        std::thread::sleep((next - now).min(Duration::from_millis(50)));
                    }
                }
            })?;
        Ok((
            Sampler {
                stop,
                counters,
                thread: Some(thread),
            },
            rx,
        ))
    }

    pub fn counters(&self) -> &SamplerCounters {
        &self.counters
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{SimCluster, SimConfig};

    #[test]
    fn sampler_delivers_samples_in_order_and_stops_on_drop() {
        let cluster = SimCluster::new(SimConfig::default());
        let (sampler, rx) =
            Sampler::spawn(Box::new(cluster.telemetry()), Duration::from_millis(10))
                .expect("thread starts");
        let a = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("first sample");
        let b = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("second sample");
        assert!(b.seq > a.seq);
        assert_eq!(a.readings.expect("sim answers").len(), 1);
        sampler.stop();
    }

    #[test]
    fn slow_consumer_makes_the_sampler_drop_not_block() {
        let cluster = SimCluster::new(SimConfig::default());
        let (sampler, rx) =
            Sampler::spawn(Box::new(cluster.telemetry()), Duration::from_millis(10))
                .expect("thread starts");
        // Never read until the queue must have overflowed.
        let deadline = Instant::now() + Duration::from_secs(5);
        while sampler.counters().dropped.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sampler.counters().dropped.load(Ordering::Relaxed) > 0);
        assert_eq!(rx.try_iter().count(), SAMPLE_QUEUE_DEPTH);
        drop(sampler);
    }
}
