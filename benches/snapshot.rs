//! Throughput of the snapshot reader on real PyTorch snapshots, and on a
//! large generated one.
//!
//! The real inputs live outside the repository (`../shared/snapshots`, data
//! from other projects that must not be committed); without them those
//! benchmarks print a note and measure nothing. The large input is made
//! here ([`vramtop::snapshot::synth::large`], written in PyTorch's layout):
//! 256 MB by default, `VRAMTOP_BENCH_SNAPSHOT_MB` to change it. Criterion
//! reports its throughput in MB/s (`thrpt`). Peak memory at 1 GB is measured
//! by `examples/parse_rss.rs` (see docs/snapshot-export.md).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramtop::snapshot::synth::{LargeShape, large};
use vramtop::snapshot::{
    Limits, WriteOptions, pickle, read_snapshot, snapshot_to_bytes, write_snapshot_with,
};

const FILES: [&str; 2] = [
    "silmont_fwd_fp32_128.pickle",
    "JasperSolt_EoR_NN_snapshot.pickle",
];

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots")
}

fn bench_reader(c: &mut Criterion) {
    let dir = snapshot_dir();
    let limits = Limits::default();
    for name in FILES {
        let path = dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) => {
                eprintln!(
                    "note: skipping {name}: cannot read {}: {err}",
                    path.display()
                );
                continue;
            }
        };
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("parse", |b| {
            b.iter(|| pickle::parse(black_box(&bytes), &limits))
        });
        group.bench_function("read_snapshot", |b| {
            b.iter(|| read_snapshot(black_box(&bytes)))
        });
        group.finish();
    }
}

/// Reading and writing a large realistic snapshot.
fn bench_large(c: &mut Criterion) {
    let mb: u64 = std::env::var("VRAMTOP_BENCH_SNAPSHOT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let snapshot = large(&LargeShape::about_bytes(mb * 1_000_000));
    let mut bytes = Vec::new();
    if let Err(e) = write_snapshot_with(
        &snapshot,
        &mut bytes,
        &WriteOptions {
            fresh_frame_lists: true,
        },
    ) {
        eprintln!("note: cannot generate the large snapshot: {e}");
        return;
    }
    let entries: usize = snapshot.device_traces.iter().map(Vec::len).sum();
    eprintln!(
        "large snapshot: {} bytes, {entries} trace entries, {} segments",
        bytes.len(),
        snapshot.segments.len()
    );
    let mut group = c.benchmark_group(format!("large_{mb}MB"));
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("read_snapshot", |b| {
        b.iter(|| read_snapshot(black_box(&bytes)))
    });
    group.bench_function("write_shared_lists", |b| {
        b.iter(|| snapshot_to_bytes(black_box(&snapshot)))
    });
    group.finish();
}

criterion_group!(benches, bench_reader, bench_large);
criterion_main!(benches);
