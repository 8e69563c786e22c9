//! Runs a checked [`Scenario`] on the allocator model, once per variant.
//!
//! Pure and deterministic: an [`InMemoryDevice`] of the scenario's capacity
//! with the context counted as external use, the default stream, and the
//! allocator's own figures after every step.

use serde::Serialize;

use super::format::{Action, Scenario, ScenarioError, Variant, matching};
use crate::alloc::{
    AllocatorConfig, CachingAllocator, DeviceMemory, InMemoryDevice, fragmentation,
};
use crate::quote::cut;

/// The figures after one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepResult {
    /// 1-based index among the steps this variant ran.
    pub step: usize,
    pub label: String,
    /// `memory_allocated()`.
    pub allocated: u64,
    /// `memory_reserved()`.
    pub reserved: u64,
    /// What nvidia-smi shows for the device: reserved + context.
    pub driver_used: u64,
    /// Segments as `torch.cuda.memory_snapshot()` lists them (an expandable
    /// segment counts once per contiguous mapped range).
    pub segments: usize,
    /// Free bytes inside split segments (`inactive_split_bytes`).
    pub inactive_split_bytes: i64,
    /// 1 − largest free block / cached free bytes (0 … 1).
    pub fragmentation: f64,
    pub largest_free_block: u64,
    /// Segments with no live block, and their bytes: `empty_cache`
    /// returns them and an OOM's retry frees them first, so a
    /// fragmentation of only such memory is no threat.
    pub whole_free_segments: u64,
    pub free_in_whole_segments: u64,
    /// Bytes `empty_cache` returned to the device in this step.
    pub released: u64,
    /// PyTorch's OOM message when this step ran out of memory.
    pub oom: Option<String>,
}

/// A variant's headline numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// `max_memory_allocated()` over the run.
    pub peak_allocated: u64,
    /// `max_memory_reserved()` over the run (peaks inside a step included).
    pub peak_reserved: u64,
    /// Whether the run hit an out-of-memory error (it stops there).
    pub oom: bool,
    /// The 1-based step that ran out of memory.
    pub oom_step: Option<usize>,
    /// Bytes returned to the device by all `empty_cache` steps.
    pub empty_cache_released: u64,
    /// Steps run, the OOM step included.
    pub steps_run: usize,
}

/// One variant's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantResult {
    pub variant: String,
    pub alloc_conf: String,
    /// Other processes holding a CUDA context on the device (their
    /// contexts count in driver used).
    pub worker_contexts: u32,
    pub steps: Vec<StepResult>,
    pub summary: Summary,
}

/// A scenario's runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    pub title: String,
    pub explanation: String,
    pub device_memory: u64,
    pub context: u64,
    pub variants: Vec<VariantResult>,
}

impl ScenarioResult {
    /// The run of the variant called `name`.
    pub fn variant(&self, name: &str) -> Option<&VariantResult> {
        self.variants.iter().find(|v| v.variant == name)
    }
}

/// Runs every variant of `scenario`.
pub fn run(scenario: &Scenario) -> Result<ScenarioResult, ScenarioError> {
    let variants = scenario
        .variants
        .iter()
        .map(|v| run_variant(scenario, v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ScenarioResult {
        name: scenario.name.clone(),
        title: scenario.title.clone(),
        explanation: scenario.explanation.clone(),
        device_memory: scenario.device_memory,
        context: scenario.context,
        variants,
    })
}

/// Runs one variant; the run stops at the first out-of-memory error, as a
/// PyTorch script would on the uncaught `OutOfMemoryError`.
pub fn run_variant(scenario: &Scenario, variant: &Variant) -> Result<VariantResult, ScenarioError> {
    run_variant_inner(scenario, variant, false).map(|(result, _)| result)
}

/// The microseconds of the trace clock each step advances: step `n` runs
/// at `n × STEP_TIME_US`, so a trace entry's `time_us` names its step.
pub const STEP_TIME_US: u64 = 1_000;

/// Like [`run_variant`], and also returns the model at the end with its
/// whole trace recorded (`_record_memory_history` on from the start; each
/// step's entries stamped `step × STEP_TIME_US`), for exporting a snapshot.
pub fn run_variant_model(
    scenario: &Scenario,
    variant: &Variant,
) -> Result<(VariantResult, CachingAllocator<InMemoryDevice>), ScenarioError> {
    run_variant_inner(scenario, variant, true)
}

fn run_variant_inner(
    scenario: &Scenario,
    variant: &Variant,
    record: bool,
) -> Result<(VariantResult, CachingAllocator<InMemoryDevice>), ScenarioError> {
    let failure = |message: String| {
        ScenarioError::Invalid(format!(
            "scenario '{}', variant '{}': {message}",
            cut(&scenario.name),
            cut(&variant.name)
        ))
    };
    let config = AllocatorConfig::parse(&variant.alloc_conf).map_err(|e| failure(e.to_string()))?;
    let mut device = InMemoryDevice::new(scenario.device_memory);
    // The main process's context, and one per worker that touched CUDA:
    // the processes PyTorch's OOM message names.
    device.set_processes(variant.processes(scenario.context));
    let mut m = CachingAllocator::new(device, 0, config);
    if record {
        m.record_history(Some(usize::MAX));
    }
    // Held names with their pointers, in allocation order.
    let mut names: Vec<String> = Vec::new();
    let mut ptrs: Vec<u64> = Vec::new();
    let mut steps = Vec::new();
    let mut oom_step = None;
    let mut empty_cache_released = 0;

    for step in scenario.steps.iter().filter(|s| s.runs_in(&variant.name)) {
        let index = steps.len() + 1;
        m.set_time_us(index as u64 * STEP_TIME_US);
        let mut released = 0;
        let mut oom = None;
        match &step.action {
            Action::Alloc { names: new, size } => {
                for n in new {
                    match m.malloc(*size, 0) {
                        Ok(p) => {
                            names.push(n.clone());
                            ptrs.push(p);
                        }
                        Err(e) if e.is_out_of_memory() => {
                            oom = Some(e.to_string());
                            break;
                        }
                        Err(e) => return Err(failure(format!("step {index}: {e}"))),
                    }
                }
            }
            Action::Free { patterns } => {
                for p in patterns {
                    let gone: Vec<String> = matching(p, &names).into_iter().cloned().collect();
                    for n in gone {
                        let Some(at) = names.iter().position(|x| *x == n) else {
                            continue;
                        };
                        names.remove(at);
                        let ptr = ptrs.remove(at);
                        m.free(ptr)
                            .map_err(|e| failure(format!("step {index}: free {n}: {e}")))?;
                    }
                }
            }
            Action::EmptyCache => {
                let before = m.memory_reserved();
                // The call marked in the trace (an exported run's `annotate`
                // entry): one that releases nothing leaves no other entry.
                m.annotate();
                m.empty_cache();
                released = before.saturating_sub(m.memory_reserved());
                empty_cache_released += released;
            }
        }
        m.check_invariants()
            .map_err(|e| failure(format!("step {index}: the model's invariants broke: {e}")))?;
        let layout = m.layout();
        let frag = fragmentation(&layout);
        let info = m.device().mem_get_info();
        let stats = m.stats();
        steps.push(StepResult {
            step: index,
            label: step.label.clone(),
            allocated: m.memory_allocated(),
            reserved: m.memory_reserved(),
            driver_used: info.total - info.free,
            segments: layout.len(),
            inactive_split_bytes: stats.inactive_split_bytes.all.current,
            fragmentation: frag.fragmentation,
            largest_free_block: frag.largest_free_block,
            whole_free_segments: frag.whole_free_segments,
            free_in_whole_segments: frag.free_in_whole_segments,
            released,
            oom: oom.clone(),
        });
        if oom.is_some() {
            oom_step = Some(index);
            break;
        }
    }
    let stats = m.stats();
    let result = VariantResult {
        variant: variant.name.clone(),
        alloc_conf: variant.alloc_conf.clone(),
        worker_contexts: variant.worker_contexts,
        summary: Summary {
            peak_allocated: stats.allocated_bytes.all.peak.max(0) as u64,
            peak_reserved: stats.reserved_bytes.all.peak.max(0) as u64,
            oom: oom_step.is_some(),
            oom_step,
            empty_cache_released,
            steps_run: steps.len(),
        },
        steps,
    };
    Ok((result, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::parse;

    const MIB: u64 = 1 << 20;

    #[test]
    fn variants_run_only_their_steps_under_their_settings() {
        let s = parse(
            "name = \"t\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"1GiB\"\n\
             [[variant]]\nname = \"plain\"\n\
             [[variant]]\nname = \"exp\"\nalloc_conf = \"expandable_segments:True\"\n\
             [[step]]\nalloc = { name = \"a\", size = \"30MiB\" }\n\
             [[step]]\nonly = [\"exp\"]\nfree = \"a\"\n",
        )
        .expect("parses");
        let r = run(&s).expect("runs");
        let plain = r.variant("plain").expect("plain");
        let exp = r.variant("exp").expect("exp");
        assert_eq!(plain.steps.len(), 1);
        assert_eq!(exp.steps.len(), 2);
        assert_eq!(exp.alloc_conf, "expandable_segments:True");
        assert_eq!(plain.summary.peak_reserved, 30 * MIB);
        // Expandable segments map 20 MiB pages: 2 of them for 30 MiB.
        assert_eq!(exp.summary.peak_reserved, 40 * MIB);
    }

    #[test]
    fn empty_cache_released_bytes_are_counted_per_step_and_in_total() {
        let s = parse(
            "name = \"t\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"1GiB\"\n\
             context = \"100MiB\"\n\
             [[step]]\nalloc = { name = \"a\", size = \"64MiB\" }\n\
             [[step]]\nfree = \"a\"\n[[step]]\nempty_cache = true\n",
        )
        .expect("parses");
        let r = run(&s).expect("runs");
        let v = &r.variants[0];
        assert_eq!(v.steps[2].released, 64 * MIB);
        assert_eq!(v.steps[2].driver_used, 100 * MIB);
        assert_eq!(v.summary.empty_cache_released, 64 * MIB);
        assert!(!v.summary.oom);
    }

    #[test]
    fn an_allocation_of_an_exabyte_or_more_is_recorded_as_an_oom_outcome() {
        for size in ["1000PiB", "1EiB", "15EiB"] {
            let s = parse(&format!(
                "name = \"t\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"8GiB\"\n\
                 [[step]]\nalloc = {{ name = \"a\", size = \"1MiB\" }}\n\
                 [[step]]\nalloc = {{ name = \"w\", size = \"{size}\" }}\n\
                 [[step]]\nfree = \"a\"\n"
            ))
            .expect("parses");
            let r = run(&s).unwrap_or_else(|e| panic!("{size}: {e}"));
            let v = &r.variants[0];
            assert!(v.summary.oom, "{size}");
            assert_eq!(v.summary.oom_step, Some(2), "{size}");
            assert_eq!(v.steps.len(), 2, "{size}: the run stops at the OOM");
            let message = v.steps[1].oom.as_deref().unwrap_or_default();
            assert!(
                message.starts_with("CUDA out of memory."),
                "{size}: {message}"
            );
        }
    }
}
