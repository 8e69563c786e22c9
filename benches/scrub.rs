//! The snapshot viewer's scrub engine (`src/snapshot/scrub.rs`).
//!
//! A model-made trace of 200,000 events (log-uniform requests from 1 B to
//! 64 MiB, ~55 % malloc, the live set capped at 2,000 allocations, an
//! 80 GiB in-memory device), captured as a snapshot as PyTorch would write
//! it. Measured:
//!
//! - `scrub_build_200k`: the backward undo, forward replay with a state
//!   stored every 1024 events, and the marks (what `vramtop open` does once
//!   after reading the file);
//! - `scrub_seek_worst_200k`: the state at a cursor 1023 events after a
//!   checkpoint (the farthest a seek replays), as segments with their
//!   blocks (what one key press costs the viewer);
//! - `scrub_seek_checkpoint_200k`: the same at a checkpoint (a clone and the
//!   segment list only).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use vramtop::snapshot::Snapshot;
use vramtop::snapshot::scrub::{CHECKPOINT_EVERY, Scrub};

mod common;

const EVENTS: usize = 200_000;
const MAX_LIVE: usize = 2_000;

fn big_trace() -> Snapshot {
    common::random_trace(EVENTS, MAX_LIVE)
}

fn scrub(c: &mut Criterion) {
    let snapshot = Arc::new(big_trace());
    c.bench_function("scrub_build_200k", |b| {
        b.iter(|| black_box(Scrub::new(Arc::clone(&snapshot))))
    });
    let scrub = Scrub::new(Arc::clone(&snapshot));
    let d = &scrub.devices[0];
    assert!(d.len() >= EVENTS / 2, "a long trace");
    let base = (d.len() / 2 / CHECKPOINT_EVERY) * CHECKPOINT_EVERY;
    c.bench_function("scrub_seek_worst_200k", |b| {
        b.iter(|| black_box(d.segments_at(base + CHECKPOINT_EVERY - 1)))
    });
    c.bench_function("scrub_seek_checkpoint_200k", |b| {
        b.iter(|| black_box(d.segments_at(base)))
    });
}

criterion_group!(benches, scrub);
criterion_main!(benches);
