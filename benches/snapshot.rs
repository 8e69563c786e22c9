//! Throughput of the snapshot reader on real PyTorch snapshots.
//!
//! The inputs live outside the repository (`../shared/snapshots`, data from
//! other projects that must not be committed); without them the benchmark
//! prints a note and measures nothing.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramtop::snapshot::{Limits, pickle, read_snapshot};

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

criterion_group!(benches, bench_reader);
criterion_main!(benches);
