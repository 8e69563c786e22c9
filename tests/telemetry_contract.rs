//! One contract every telemetry backend keeps, run against each backend
//! available here:
//! - `sim`: the simulated GPUs, idle;
//! - `sim_training`: the simulated GPUs with training processes running;
//! - `fake_nvml`: the NVML backend over the fake `libnvidia-ml.so.1`
//!   (skipped with a note when there is no C compiler);
//! - `fake_nvml_mig`: the same with MIG enabled on GPU 0;
//! - `real_nvml`: the NVML backend on this machine's driver, only when
//!   `VRAMTOP_TEST_GPU=1`.
//!
//! The clauses are plain functions over a [`Subject`]; `contract!` turns each
//! (backend, clause) pair into its own test so a failure names both.

mod common;

use std::collections::HashSet;

use common::fake_nvml::fake_nvml_with;
use common::skip::{Prerequisite, skip};
use vramtop::device::nvml::NvmlTelemetry;
use vramtop::device::sim::{Fault, Metric, SimCluster, SimConfig};
use vramtop::device::{GpuReading, GpuSample, Telemetry};

/// A backend under test, and how to let time pass between two samples.
struct Subject {
    telemetry: Box<dyn Telemetry>,
    tick: Box<dyn FnMut()>,
}

impl Subject {
    fn sample(&mut self) -> Vec<GpuReading> {
        self.telemetry
            .sample()
            .unwrap_or_else(|e| panic!("{} failed to sample: {e}", self.telemetry.backend_name()))
    }
}

// ---- backends --------------------------------------------------------------

fn sim_cluster(training_processes: usize) -> SimCluster {
    SimCluster::new(SimConfig {
        gpus: 2,
        training_processes,
        ..SimConfig::default()
    })
}

fn sim_subject(cluster: SimCluster) -> Subject {
    let telemetry = Box::new(cluster.telemetry());
    Subject {
        telemetry,
        tick: Box::new(move || cluster.advance(1_000)),
    }
}

fn sim() -> Option<Subject> {
    Some(sim_subject(sim_cluster(0)))
}

fn sim_training() -> Option<Subject> {
    let cluster = sim_cluster(2);
    // Let the trainers allocate and the GPUs warm up.
    cluster.advance(5_000);
    Some(sim_subject(cluster))
}

fn sim_without_power_on_gpu0() -> Option<Subject> {
    let cluster = sim_cluster(1);
    cluster.inject(Fault::MetricUnsupported {
        gpu: 0,
        metric: Metric::Power,
    });
    Some(sim_subject(cluster))
}

fn fake_nvml_subject(settings: &[(&str, &str)]) -> Option<Subject> {
    let lib = fake_nvml_with(settings)?;
    let telemetry = NvmlTelemetry::init_with_library(&lib).expect("the fake NVML initialises");
    Some(Subject {
        telemetry: Box::new(telemetry),
        tick: Box::new(|| {}),
    })
}

fn fake_nvml() -> Option<Subject> {
    fake_nvml_subject(&[])
}

fn fake_nvml_mig() -> Option<Subject> {
    fake_nvml_subject(&[("FAKE_NVML_MIG", "3")])
}

fn fake_nvml_without_power() -> Option<Subject> {
    fake_nvml_subject(&[("FAKE_NVML_NO_POWER", "1")])
}

fn real_nvml() -> Option<Subject> {
    if std::env::var("VRAMTOP_TEST_GPU").as_deref() != Ok("1") {
        skip(
            "the real-NVML contract",
            "VRAMTOP_TEST_GPU=1 is unset",
            Prerequisite::OnlySomeMachines,
        );
        return None;
    }
    let telemetry = NvmlTelemetry::init()
        .unwrap_or_else(|e| panic!("VRAMTOP_TEST_GPU=1 but NVML is unusable: {e}"));
    Some(Subject {
        telemetry: Box::new(telemetry),
        // NVML refreshes most figures every 1/6 s to 1 s.
        tick: Box::new(|| std::thread::sleep(std::time::Duration::from_millis(200))),
    })
}

// ---- the contract ------------------------------------------------------------

fn samples(readings: &[GpuReading]) -> impl Iterator<Item = &GpuSample> {
    readings.iter().filter_map(GpuReading::sample)
}

/// What identifies a row: a physical GPU by its index, a MIG row by its
/// parent's index and its own.
fn row_key(reading: &GpuReading) -> (Option<u32>, u32) {
    match reading {
        GpuReading::Ok(s) => (s.mig.as_ref().map(|m| m.parent_index), s.index),
        GpuReading::Lost { index, .. } => (None, *index),
    }
}

fn reports_at_least_one_gpu(mut s: Subject) {
    assert!(!s.sample().is_empty());
}

fn rows_are_identified_uniquely(mut s: Subject) {
    let readings = s.sample();
    let mut seen = HashSet::new();
    for reading in &readings {
        assert!(seen.insert(row_key(reading)), "duplicate row {reading:?}");
    }
    for sample in samples(&readings) {
        if let Some(mig) = &sample.mig {
            assert!(
                seen.contains(&(None, mig.parent_index)),
                "MIG row without its parent GPU: {sample:?}"
            );
        }
    }
}

fn names_are_not_empty(mut s: Subject) {
    for sample in samples(&s.sample()) {
        assert!(!sample.name.trim().is_empty(), "{sample:?}");
    }
}

fn memory_figures_fit_in_the_total(mut s: Subject) {
    for sample in samples(&s.sample()) {
        if let (Some(total), Some(used), Some(free)) =
            (sample.memory_total, sample.memory_used, sample.memory_free)
        {
            assert!(used <= total, "used {used} > total {total}: {sample:?}");
            assert!(free <= total, "free {free} > total {total}: {sample:?}");
        }
    }
}

fn utilisation_is_a_percentage(mut s: Subject) {
    for sample in samples(&s.sample()) {
        for util in [sample.gpu_utilization, sample.memory_utilization]
            .into_iter()
            .flatten()
        {
            assert!(util <= 100, "{util} %: {sample:?}");
        }
    }
}

/// A row's identity and, when it answered, its name.
type RowName = ((Option<u32>, u32), Option<String>);

fn row_names(readings: &[GpuReading]) -> Vec<RowName> {
    readings
        .iter()
        .map(|r| (row_key(r), r.sample().map(|s| s.name.clone())))
        .collect()
}

fn consecutive_samples_keep_the_gpus_and_names(mut s: Subject) {
    let first = s.sample();
    (s.tick)();
    let second = s.sample();
    assert_eq!(first.len(), second.len());
    assert_eq!(row_names(&first), row_names(&second));
}

fn backend_name_is_known(s: Subject) {
    let name = s.telemetry.backend_name();
    assert!(name == "sim" || name == "nvml", "{name}");
}

/// For subjects built with power unsupported on GPU 0: `None`, never `Some(0)`.
fn unsupported_power_is_none_not_zero(mut s: Subject) {
    let readings = s.sample();
    let gpu0 = samples(&readings)
        .find(|g| g.index == 0 && g.mig.is_none())
        .expect("GPU 0 answers");
    assert_eq!(gpu0.power_draw_mw, None, "{gpu0:?}");
    assert_eq!(gpu0.power_limit_mw, None, "{gpu0:?}");
    assert!(
        gpu0.memory_total.is_some(),
        "other metrics remain: {gpu0:?}"
    );
}

macro_rules! contract {
    // `ignored "why"` marks every clause `#[ignore]` (a backend that only some
    // machines have); the clauses default to the whole contract.
    ($backend:ident: $make:expr => $($clause:ident),+ $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[test]
                fn $clause() {
                    if let Some(subject) = $make {
                        super::$clause(subject);
                    }
                }
            )+
        }
    };
    (@ignored $why:literal $backend:ident: $make:expr => $($clause:ident),+ $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[test]
                #[ignore = $why]
                fn $clause() {
                    if let Some(subject) = $make {
                        super::$clause(subject);
                    }
                }
            )+
        }
    };
    ($(@$ignored:ident $why:literal)? $backend:ident: $make:expr) => {
        contract!($(@$ignored $why)? $backend: $make =>
            reports_at_least_one_gpu,
            rows_are_identified_uniquely,
            names_are_not_empty,
            memory_figures_fit_in_the_total,
            utilisation_is_a_percentage,
            consecutive_samples_keep_the_gpus_and_names,
            backend_name_is_known,
        );
    };
}

contract!(sim: sim());
contract!(sim_training: sim_training());
contract!(fake_nvml: fake_nvml());
contract!(fake_nvml_mig: fake_nvml_mig());
contract!(
    @ignored "needs a real NVIDIA GPU: VRAMTOP_TEST_GPU=1 cargo test --test telemetry_contract -- --ignored"
    real_nvml: real_nvml()
);
contract!(sim_without_power: sim_without_power_on_gpu0() => unsupported_power_is_none_not_zero);
contract!(fake_nvml_without_power: fake_nvml_without_power() => unsupported_power_is_none_not_zero);
