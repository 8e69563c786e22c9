//! The cost of sampling telemetry.
//!
//! - `sim_sample_4_gpus`: one sample of four simulated GPUs (criterion).
//! - `nvml_sample_fake_2_gpus`: one sample through nvml-wrapper of the fake
//!   `libnvidia-ml.so.1` the tests build (skipped without `cc`).
//! - `headless_cpu`: the sampler thread at 1 Hz over 4 simulated GPUs for 60 s
//!   of wall time (set `VRAMTOP_BENCH_CPU_SECS` to change it); prints the CPU
//!   time it used as a percentage of one core. Target: < 0.3 %.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use vramtop::device::Telemetry;
use vramtop::device::nvml::NvmlTelemetry;
use vramtop::device::sampler::Sampler;
use vramtop::device::sim::{SimCluster, SimConfig};

fn four_gpus() -> SimCluster {
    SimCluster::new(SimConfig {
        gpus: 4,
        training_processes: 2,
        ..SimConfig::default()
    })
}

fn sim_sample(c: &mut Criterion) {
    let cluster = four_gpus();
    cluster.advance(5_000);
    let mut t = cluster.telemetry();
    c.bench_function("sim_sample_4_gpus", |b| b.iter(|| black_box(t.sample())));
}

fn build_fake_nvml() -> Option<PathBuf> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_nvml.c");
    let dir = std::env::temp_dir().join(format!("vramtop-bench-nvml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let lib = dir.join("libnvidia-ml.so.1");
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .ok()?
        .success();
    ok.then_some(lib)
}

fn nvml_sample(c: &mut Criterion) {
    let Some(lib) = build_fake_nvml() else {
        eprintln!("skipping nvml_sample_fake_2_gpus: cannot build the fake NVML (no cc?)");
        return;
    };
    let Ok(mut t) = NvmlTelemetry::init_with_library(&lib) else {
        eprintln!("skipping nvml_sample_fake_2_gpus: the fake NVML did not initialise");
        return;
    };
    c.bench_function("nvml_sample_fake_2_gpus", |b| {
        b.iter(|| black_box(t.sample()))
    });
}

/// utime + stime of this process, in clock ticks (from /proc/self/stat).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn headless_cpu(_c: &mut Criterion) {
    let secs: u64 = std::env::var("VRAMTOP_BENCH_CPU_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let cluster = four_gpus();
    // The sim's clock follows wall time, as in the live dashboard.
    let live = cluster.live_telemetry();
    let Some(before) = cpu_ticks() else {
        eprintln!("skipping headless_cpu: /proc/self/stat unreadable");
        return;
    };
    let t0 = Instant::now();
    let Ok((sampler, rx)) = Sampler::spawn(Box::new(live), Duration::from_secs(1)) else {
        eprintln!("skipping headless_cpu: cannot start the sampler thread");
        return;
    };
    let mut received = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
            received += 1;
        }
    }
    sampler.stop();
    let wall = t0.elapsed().as_secs_f64();
    let after = cpu_ticks().unwrap_or(before);
    // Clock ticks are 1/100 s on Linux (USER_HZ).
    let cpu = (after - before) as f64 / 100.0;
    println!(
        "headless_cpu: 4 simulated GPUs (2 training processes) at 1 Hz for {wall:.1} s: \
         {received} samples, {cpu:.2} s CPU = {:.3} % of one core",
        100.0 * cpu / wall
    );
}

criterion_group!(benches, sim_sample, nvml_sample, headless_cpu);
criterion_main!(benches);
