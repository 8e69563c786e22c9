//! Allocator model throughput and snapshot replay speed.
//!
//! `mixed_workload`: log-uniform request sizes from 1 B to 256 MiB, ~55 % malloc,
//! ~45 % free, 0.1 % empty_cache, on one stream, against an 80 GiB in-memory device.
//! The live set is capped at 2,000 allocations (≈ 26 GiB) so that the steady state
//! is allocation/free traffic, not repeated OOMs. Operations are generated up front;
//! only the model is timed. Target: ≥ 5 million operations per second.
//!
//! `replay_silmont_fwd`: read `silmont_fwd_fp32_128.pickle` (2,043 trace entries) and
//! replay it through the model with `--verify`'s machinery. Target: < 10 ms.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
use vramtop::snapshot::replay::verify;
use vramtop::snapshot::{Limits, Stacks, read_snapshot_bytes_with};

const GIB: u64 = 1 << 30;
const OPS: usize = 200_000;
const MAX_LIVE: usize = 2_000;

#[derive(Clone, Copy)]
enum Op {
    Malloc(u64),
    /// Frees the live allocation at this index (modulo the live count).
    Free(usize),
    EmptyCache,
}

fn workload(seed: u64) -> Vec<Op> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut live = 0usize;
    let mut ops = Vec::with_capacity(OPS);
    for _ in 0..OPS {
        let r = next() % 1000;
        if r < 1 {
            ops.push(Op::EmptyCache);
        } else if (r < 551 || live == 0) && live < MAX_LIVE {
            let log2 = (next() % 28_000) as f64 / 1000.0;
            ops.push(Op::Malloc(2f64.powf(log2) as u64));
            live += 1;
        } else {
            ops.push(Op::Free(next() as usize));
            live -= 1;
        }
    }
    ops
}

fn run(m: &mut CachingAllocator<InMemoryDevice>, ops: &[Op], live: &mut Vec<u64>) {
    for op in ops {
        match *op {
            Op::Malloc(n) => {
                if let Ok(p) = m.malloc(n, 0) {
                    live.push(p);
                }
            }
            Op::Free(i) => {
                if !live.is_empty() {
                    let p = live.swap_remove(i % live.len());
                    let _ = m.free(p);
                }
            }
            Op::EmptyCache => m.empty_cache(),
        }
    }
}

fn mixed_workload(c: &mut Criterion) {
    let ops = workload(0x2545_f491_4f6c_dd1d);
    let mut group = c.benchmark_group("allocator");
    group.throughput(Throughput::Elements(ops.len() as u64));
    group.sample_size(20);
    group.bench_function("mixed_workload_200k_ops", |b| {
        b.iter_batched(
            || {
                (
                    CachingAllocator::new(
                        InMemoryDevice::new(80 * GIB),
                        0,
                        AllocatorConfig::default(),
                    ),
                    Vec::with_capacity(MAX_LIVE),
                )
            },
            |(mut m, mut live)| {
                run(&mut m, &ops, &mut live);
                black_box(m.memory_reserved())
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn replay_silmont_fwd(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/snapshots/silmont_fwd_fp32_128.pickle");
    let Ok(bytes) = std::fs::read(&path) else {
        eprintln!("skipping replay bench: {} not found", path.display());
        return;
    };
    c.bench_function("read_and_replay_silmont_fwd_fp32_128", |b| {
        b.iter(|| {
            // As `replay --verify` reads: no stacks.
            let snapshot =
                read_snapshot_bytes_with(black_box(&bytes), &Limits::default(), Stacks::Skip)
                    .expect("valid snapshot");
            let report = verify(&snapshot);
            assert!(report.full_match());
            black_box(report.replays.len())
        })
    });
}

criterion_group!(benches, mixed_workload, replay_silmont_fwd);
criterion_main!(benches);
