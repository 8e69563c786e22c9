//! Throughput of the snapshot reader on real PyTorch snapshots, the work
//! behind `open --summary` and `replay --verify` on the largest of them, and
//! the reader on a large generated snapshot.
//!
//! The real inputs live outside the repository (`../shared/snapshots`, data
//! from other projects that must not be committed); without them those
//! benchmarks print a note and measure nothing. `VRAMTOP_BENCH_SNAPSHOT` names
//! one more file to read (for example a large recording made elsewhere). The large input is made
//! here ([`vramtop::snapshot::synth::large`], written in PyTorch's layout):
//! 256 MB by default, `VRAMTOP_BENCH_SNAPSHOT_MB` to change it. Criterion
//! reports its throughput in MB/s (`thrpt`). Peak memory at 1 GB is measured
//! by `examples/parse_rss.rs` (see docs/snapshot-export.md).

use std::hint::black_box;
use std::path::PathBuf;

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramtop::snapshot::replay::verify;
use vramtop::snapshot::sites::Grouping;
use vramtop::snapshot::summary::{DEFAULT_TOP_SITES, sites_report, summarize};
use vramtop::snapshot::synth::{LargeShape, large};
use vramtop::snapshot::{
    Limits, Stacks, WriteOptions, pickle, read_snapshot, read_snapshot_bytes_with,
    snapshot_to_bytes, write_snapshot_with,
};

/// The real snapshots with a trace or many blocks, largest first: the
/// reader's speed is measured on each.
const FILES: [&str; 6] = [
    "bolongcheng_xl_fwd_cl128_float32_expandable.pickle",
    "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle",
    "JasperSolt_EoR_NN_snapshot.pickle",
    "muduard_dump_snapshot_b.pickle",
    "silmont_fwd_fp32_128.pickle",
    "volcengine_verl_mem.pickle",
];

/// The file `open --summary` and `replay --verify` are measured on: the
/// longest trace that replays to a full match.
const WORKLOAD_FILE: &str = "JasperSolt_EoR_NN_snapshot.pickle";

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots")
}

/// The bytes of `path`, or a note and `None` when it cannot be read.
fn read_input(path: &std::path::Path) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(err) => {
            eprintln!("note: skipping {}: {err}", path.display());
            None
        }
    }
}

fn bench_reader(c: &mut Criterion) {
    let dir = snapshot_dir();
    let limits = Limits::default();
    let extra = std::env::var_os("VRAMTOP_BENCH_SNAPSHOT").map(PathBuf::from);
    let paths = FILES.iter().map(|name| dir.join(name)).chain(extra);
    for path in paths {
        let Some(bytes) = read_input(&path) else {
            continue;
        };
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
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

/// `open --summary` (read, segment figures, sites at the end and at the
/// peak) and `replay --verify` (read, invariants, replay), without the
/// process start and the output.
fn bench_workloads(c: &mut Criterion) {
    let Some(bytes) = read_input(&snapshot_dir().join(WORKLOAD_FILE)) else {
        return;
    };
    let mut group = c.benchmark_group(format!("{WORKLOAD_FILE} workloads"));
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("summary", |b| {
        b.iter(|| {
            // As `open --summary` reads: no stack of the trace's frees.
            let snapshot = Arc::new(
                read_snapshot_bytes_with(
                    black_box(&bytes),
                    &Limits::default(),
                    Stacks::OfAllocations,
                )
                .ok()?,
            );
            let summary = summarize(&snapshot);
            let sites = sites_report(&snapshot, Grouping::default(), DEFAULT_TOP_SITES);
            Some((summary, sites))
        })
    });
    group.bench_function("replay_verify", |b| {
        b.iter(|| {
            // As `replay --verify` reads: no stacks.
            let snapshot =
                read_snapshot_bytes_with(black_box(&bytes), &Limits::default(), Stacks::Skip)
                    .ok()?;
            Some(verify(&snapshot))
        })
    });
    if let Ok(snapshot) = read_snapshot(&bytes) {
        group.bench_function("verify_only", |b| b.iter(|| verify(black_box(&snapshot))));
    }
    group.finish();
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

criterion_group!(benches, bench_reader, bench_workloads, bench_large);
criterion_main!(benches);
