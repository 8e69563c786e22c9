//! Allocation sites (`src/snapshot/sites.rs`): grouping the live blocks at
//! a cursor of a long trace, what the viewer's sites pane costs per key.
//!
//! The trace is the scrub bench's kind: 200,000 model-made events
//! (log-uniform requests 1 B…64 MiB, ~55 % malloc, at most 2,000 live
//! allocations). Each allocation gets one of 300 recorded-looking stacks
//! (the unwinder and allocator frames, 20 C++ dispatch frames, 12 Python
//! frames of torch and user code), shared as the reader interns them.
//! Measured:
//!
//! - `sites_at_cursor_200k`: the state at a cursor 1023 events past a
//!   checkpoint (the farthest a seek replays) and its sites by user frame;
//! - `sites_group_user_frame_200k` / `sites_group_whole_stack_200k`: the
//!   grouping alone on that state.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use vramtop::alloc::TraceAction;
use vramtop::snapshot::scrub::{CHECKPOINT_EVERY, Scrub};
use vramtop::snapshot::sites::{Grouping, NoStackReason, sites_of_state};
use vramtop::snapshot::{Frame, Frames, Snapshot};

mod common;

const EVENTS: usize = 200_000;
const MAX_LIVE: usize = 2_000;
const STACKS: usize = 300;

fn frame(file: &str, line: u64, name: &str) -> Frame {
    Frame {
        filename: file.into(),
        line,
        name: name.into(),
    }
}

/// A stack as PyTorch records it with `stacks="all"`, innermost first.
fn stack(k: usize) -> Frames {
    let mut f = vec![
        frame("??", 0, "torch::unwind::unwind()"),
        frame(
            "??",
            0,
            "torch::CapturedTraceback::gather(bool, bool, bool)",
        ),
        frame(
            "CUDACachingAllocator.cpp",
            0,
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
        ),
    ];
    for d in 0..20 {
        f.push(frame(
            "RegisterCUDA.cpp",
            0,
            &format!("at::(anonymous namespace)::wrapper_CUDA_op{d}(at::Tensor const&)"),
        ));
    }
    for d in 0..6 {
        f.push(frame(
            "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
            1527 + d,
            "_call_impl",
        ));
    }
    for d in 0..6 {
        f.push(frame(
            &format!("/home/me/project/model_{}.py", k % 37),
            u64::try_from(10 * k + d).unwrap_or(0),
            "forward",
        ));
    }
    f.into()
}

fn big_trace() -> Snapshot {
    let mut s = common::random_trace(EVENTS, MAX_LIVE);
    let stacks: Vec<Frames> = (0..STACKS).map(stack).collect();
    let mut i = 0usize;
    for trace in &mut s.device_traces {
        for e in trace.iter_mut().filter(|e| e.action == TraceAction::Alloc) {
            e.frames = Arc::clone(&stacks[i % STACKS]);
            i += 1;
        }
    }
    s
}

fn sites(c: &mut Criterion) {
    let scrub = Scrub::new(Arc::new(big_trace()));
    let d = &scrub.devices[0];
    assert!(d.len() >= EVENTS / 2, "a long trace");
    let cursor = (d.len() / 2 / CHECKPOINT_EVERY) * CHECKPOINT_EVERY + CHECKPOINT_EVERY - 1;
    let reason = NoStackReason::BeforeRecording;
    c.bench_function("sites_at_cursor_200k", |b| {
        b.iter(|| {
            let state = d.state_at(cursor);
            black_box(sites_of_state(&state, Grouping::UserFrame, reason))
        })
    });
    let state = d.state_at(cursor);
    let live = sites_of_state(&state, Grouping::UserFrame, reason);
    assert!(live.sites.len() > 10, "the stacks give sites");
    eprintln!(
        "live blocks at the cursor: {}, sites: {}",
        live.sites.iter().map(|s| s.blocks).sum::<u64>(),
        live.sites.len()
    );
    c.bench_function("sites_group_user_frame_200k", |b| {
        b.iter(|| black_box(sites_of_state(&state, Grouping::UserFrame, reason)))
    });
    c.bench_function("sites_group_whole_stack_200k", |b| {
        b.iter(|| black_box(sites_of_state(&state, Grouping::Stack, reason)))
    });
}

criterion_group!(benches, sites);
criterion_main!(benches);
