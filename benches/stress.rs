//! The stress panel's costs.
//!
//! - `panel_free_every_other_100k`: with 100,000 live tensors (64 KiB each,
//!   32 per 2 MiB small-pool segment), one `m` (free every other tensor:
//!   a 50,000-address command) and the worker's answer applied to the panel
//!   (the figures, fragmentation and allocator view of 100,000 blocks).
//!   Target: well under a frame (16 ms).
//! - `panel_allocate_one_100k`: the same panel, one `a` of one tensor and
//!   its answer.
//! - `executor_allocate_one_fresh`: the device side: one `Malloc` of one
//!   1 MiB tensor on a fresh executor over a simulated GPU (its first
//!   allocation: the context and a 2 MiB segment).
//! - `scenario_step_model_sim`: one scenario step (model + sim device): the
//!   panel loaded with `empty_cache_live_block`, its first step (a 512 MiB
//!   alloc) chosen by the machine, executed on the simulated GPU and the
//!   answer applied. Target: well under a frame (16 ms).

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use vramtop::alloc::{AllocatorConfig, CachingAllocator};
use vramtop::app::stress::{COUNT_PRESETS, StressAction, StressCommand, StressPanel, StressResult};
use vramtop::app::stress_worker::{STRESS_COMMAND, StressExecutor};
use vramtop::device::sim::{SimCluster, SimConfig, SimMemory};

const LIVE: usize = 100_000;
const TENSOR_BYTES: u64 = 64 << 10;

fn cluster() -> SimCluster {
    SimCluster::new(SimConfig {
        training_processes: 0,
        seed: 11,
        ..SimConfig::default()
    })
}

fn executor(cluster: &SimCluster) -> StressExecutor<SimMemory> {
    let memory = cluster.new_process(0, STRESS_COMMAND);
    StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    )
}

/// A panel holding [`LIVE`] tensors, its executor, and the executor's
/// answer to `action` (computed once: the device's time is not measured).
fn loaded(
    action: StressAction,
) -> (
    StressPanel,
    StressResult,
    StressExecutor<SimMemory>,
    SimCluster,
) {
    let cluster = cluster();
    let mut exec = executor(&cluster);
    let mut panel = StressPanel::default();
    panel.on_result(exec.started());
    let fill = StressCommand::Malloc {
        sizes: vec![TENSOR_BYTES; LIVE],
        cap: None,
    };
    panel.busy = true;
    panel.on_result(exec.execute(&fill));
    assert_eq!(panel.tensors.len(), LIVE);
    panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 1).unwrap_or(0);
    let commands = panel.clone().apply(action);
    let [command] = &commands[..] else {
        panic!("{action:?} sends one command: {commands:?}");
    };
    let result = exec.execute(command);
    (panel, result, exec, cluster)
}

fn panel_action(c: &mut Criterion, name: &str, action: StressAction) {
    let (panel, result, _exec, _cluster) = loaded(action);
    c.bench_function(name, |b| {
        b.iter_batched(
            || (panel.clone(), result.clone()),
            |(mut p, r)| {
                let commands = p.apply(action);
                black_box(&commands);
                black_box(p.on_result(r));
                p
            },
            BatchSize::LargeInput,
        )
    });
}

fn bench_panel(c: &mut Criterion) {
    panel_action(
        c,
        "panel_free_every_other_100k",
        StressAction::FreeEveryOther,
    );
    panel_action(c, "panel_allocate_one_100k", StressAction::Allocate);
}

fn bench_executor(c: &mut Criterion) {
    let one = StressCommand::Malloc {
        sizes: vec![1 << 20],
        cap: None,
    };
    c.bench_function("executor_allocate_one_fresh", |b| {
        b.iter_batched(
            || {
                let cluster = cluster();
                let exec = executor(&cluster);
                (exec, cluster)
            },
            |(mut exec, cluster)| {
                let r = exec.execute(&one);
                // Dropped after the measurement: the release is not timed.
                (exec, cluster, r)
            },
            BatchSize::SmallInput,
        )
    });
}

fn bench_scenario_step(c: &mut Criterion) {
    let index = vramtop::scenario::builtin_names()
        .iter()
        .position(|n| *n == "empty_cache_live_block")
        .expect("built-in");
    c.bench_function("scenario_step_model_sim", |b| {
        b.iter_batched(
            || {
                let cluster = cluster();
                let memory = cluster.new_process(0, STRESS_COMMAND);
                let handle = memory.clone();
                let mut exec = StressExecutor::new(
                    CachingAllocator::new(memory, 0, AllocatorConfig::default()),
                    false,
                )
                .with_reopen(move || Ok(handle.clone()));
                let mut panel = StressPanel::default();
                panel.on_result(exec.started());
                for c in panel.apply(StressAction::LoadScenario(index)) {
                    let r = exec.execute(&c);
                    panel.on_result(r);
                }
                (panel, exec, cluster)
            },
            |(mut panel, mut exec, cluster)| {
                for c in panel.apply(StressAction::ScenarioStep) {
                    let r = exec.execute(&c);
                    black_box(panel.on_result(r));
                }
                (panel, exec, cluster)
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench_panel, bench_executor, bench_scenario_step);
criterion_main!(benches);
