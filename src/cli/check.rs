//! `vramtop check [--json] [--device N] [--budget SIZE]`.

use std::fmt::Write as _;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::text::{REPORT_WIDTH, wrap_under};
use super::{DeviceArgs, EXIT_BAD_INPUT, EXIT_MISMATCH, EXIT_NOTHING_CHECKED, SIM_GPUS_MAX};
use crate::alloc::{DeviceMemory, human_bytes};
use crate::device::Telemetry;
use crate::device::check::{CheckReport, CheckResult, MIN_BUDGET_BYTES, run_check};
use crate::device::cuda::{self, CudaMemory};
use crate::device::factory::{BackendChoice, warmed_simulation};
use crate::device::nvml::NvmlTelemetry;
use crate::device::sim::{NotStarted, SimProcessView, not_started_note};

/// At most this share of a real GPU's free memory is used by the check.
const REAL_GPU_FREE_SHARE: f64 = 0.05;

pub fn run(
    args: &DeviceArgs,
    device: u32,
    budget: u64,
    json: bool,
) -> color_eyre::Result<ExitCode> {
    if budget < MIN_BUDGET_BYTES {
        super::say_error(format_args!(
            "--budget {} is below the {} the check allocates at once (1 MiB, 10 MiB - 1 and \
             37 MiB, then one of 10 MiB or more sized by the budget); give {} or more",
            human_bytes(budget),
            human_bytes(MIN_BUDGET_BYTES),
            human_bytes(MIN_BUDGET_BYTES)
        ));
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let report = if args.backend == BackendChoice::Sim {
        if let Some(why) = missing_sim_gpu(args, device) {
            super::say_error(why);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
        sim_check(args, device, budget)
    } else {
        let probe = cuda::probe();
        if probe.devices.iter().any(|d| d.index == device) {
            real_check(device, budget)
        } else {
            // "--backend nvml: NVML or an error": a check the user asked to
            // run on real hardware must not pass on the simulation.
            if args.backend == BackendChoice::Nvml {
                super::say_error(format!(
                    "no usable CUDA GPU {device} ({}); --backend nvml does not fall back to the \
                     simulated GPU",
                    probe.explain()
                ));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
            if let Some(why) = missing_sim_gpu(args, device) {
                super::say_error(format!("no usable CUDA GPU {device}, and {why}"));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
            // Said before the report, on an 80-column terminal too.
            eprintln!(
                "{}",
                wrap_under(
                    "vramtop check: ",
                    &format!(
                        "no usable CUDA GPU {device}, checking the simulated GPU instead ({})",
                        probe.explain()
                    ),
                    REPORT_WIDTH
                )
            );
            sim_check(args, device, budget)
        }
    };
    if json {
        // The report with its `result` ("pass", "fail", "skip": nothing
        // could be checked), which the steps' `ok` and `skipped` give.
        let mut value = serde_json::to_value(&report).wrap_err("cannot encode the report")?;
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "result".to_string(),
                serde_json::to_value(report.result()).wrap_err("cannot encode the report")?,
            );
        }
        let text = serde_json::to_string_pretty(&value).wrap_err("cannot encode the report")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        super::emit(&render(&report)).wrap_err("cannot write the output")?;
    }
    Ok(ExitCode::from(exit_code(&report)))
}

/// The exit code of a check that ran: 0 on PASS (parts skipped for want of
/// free memory included), [`EXIT_MISMATCH`] on FAIL and
/// [`EXIT_NOTHING_CHECKED`] on SKIP: a device too small to check anything
/// is said in the exit code too, not only in the report.
pub fn exit_code(report: &CheckReport) -> u8 {
    match report.result() {
        CheckResult::Pass => 0,
        CheckResult::Fail => EXIT_MISMATCH,
        CheckResult::Skip => EXIT_NOTHING_CHECKED,
    }
}

/// Why `device` cannot be checked on the simulation, if it cannot: only the
/// `--sim-gpus` GPUs exist there (growing the simulation to reach any index
/// took seconds and gigabytes, or aborted, for a mistyped one).
fn missing_sim_gpu(args: &DeviceArgs, device: u32) -> Option<String> {
    let gpus = args.sim.sim_gpus;
    if device < gpus {
        return None;
    }
    let have = match gpus {
        1 => "1 GPU (0)".to_string(),
        n => format!("{n} GPUs (0…{})", n - 1),
    };
    let more = if device < SIM_GPUS_MAX {
        format!("--sim-gpus {} simulates it", device + 1)
    } else {
        format!("at most {SIM_GPUS_MAX} GPUs can be simulated")
    };
    Some(format!(
        "no simulated GPU {device}: the simulation has {have}; {more}"
    ))
}

fn sim_check(args: &DeviceArgs, device: u32, budget: u64) -> CheckReport {
    // The simulation as `--once --json` shows it for the same flags: its
    // training processes and DataLoader workers have started and hold
    // their memory, which the check must not count as its own to take.
    let cluster = warmed_simulation(&args.sim_config());
    let used_cluster = cluster.clone();
    let free = cluster
        .telemetry()
        .sample()
        .ok()
        .and_then(|r| r.get(device as usize)?.sample()?.memory_free);
    // The simulated GPU cannot give more than it has free once the check's
    // own CUDA context is paid (bytes): the context comes with its first
    // allocation, after this reading.
    let context = cluster.context_overhead();
    let asked = budget;
    let budget = free.map_or(budget, |f| budget.min(f.saturating_sub(context)));
    let not_started: Vec<_> = cluster
        .not_started()
        .into_iter()
        .filter(|p| p.gpu == device)
        .collect();
    let others = others_on_sim_gpu(&cluster.processes_on(device), &not_started);
    // One process for both phases, as on CUDA, where every handle of the
    // process shares its one context: a process per phase paid a second
    // context, and left a 1 GiB GPU 22 MiB for the second phase.
    let process = cluster.new_process(device, "vramtop check");
    let mut report = run_check(
        "sim",
        &format!("simulated GPU {device}"),
        || Ok(process.clone()),
        move || {
            used_cluster
                .telemetry()
                .sample()
                .ok()?
                .get(device as usize)?
                .sample()?
                .memory_used
        },
        budget,
    );
    report.budget_asked = asked;
    report.free = free;
    report.others = others;
    report
}

/// What the simulation's own processes (`--sim-training`,
/// `--sim-dataloader-workers`) hold on the checked GPU before the check
/// starts, for the report, and which of them could not start for want of
/// room for a CUDA context (not among the GPU's processes in `--once
/// --json` either), which is said here rather than left to be guessed.
fn others_on_sim_gpu(processes: &[SimProcessView], not_started: &[NotStarted]) -> Option<String> {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut parts = Vec::new();
    if !processes.is_empty() {
        let trainers = processes.iter().filter(|p| p.trainer).count();
        let workers = processes.len() - trainers;
        let mut kinds = Vec::new();
        if trainers > 0 {
            kinds.push(plural(
                trainers,
                "simulated training process",
                "simulated training processes",
            ));
        }
        if workers > 0 {
            kinds.push(plural(workers, "DataLoader worker", "DataLoader workers"));
        }
        let held = processes
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.bytes));
        parts.push(format!(
            "{}, holding {}",
            kinds.join(" and "),
            human_bytes(held)
        ));
    }
    parts.extend(not_started_note(not_started));
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn real_check(device: u32, budget: u64) -> CheckReport {
    let asked = budget;
    // Never take more than a small share of what is free: the GPU may be shared.
    let (name, budget, free) = match CudaMemory::open(device) {
        Ok(m) => {
            let free = m.mem_get_info().free;
            let cap = (free as f64 * REAL_GPU_FREE_SHARE) as u64;
            (m.name().to_string(), budget.min(cap), free)
        }
        Err(e) => {
            return CheckReport {
                backend: "cuda".to_string(),
                device: device.to_string(),
                budget: 0,
                budget_asked: asked,
                free: None,
                others: None,
                steps: vec![crate::device::check::CheckStep {
                    name: "open the device".to_string(),
                    ok: false,
                    skipped: false,
                    detail: e.to_string(),
                }],
            };
        }
    };
    let mut nvml = NvmlTelemetry::init().ok();
    let mut report = run_check(
        "cuda",
        &format!("GPU {device} {name}"),
        || CudaMemory::open(device).map_err(|e| e.to_string()),
        move || {
            nvml.as_mut()?
                .sample()
                .ok()?
                .into_iter()
                .filter_map(|r| r.sample().cloned())
                .find(|s| s.index == device && s.mig.is_none())?
                .memory_used
        },
        budget,
    );
    report.budget_asked = asked;
    report.free = Some(free);
    report
}

/// The human-readable report, every line in 80 columns: a step's
/// detail wraps under its name's start.
pub fn render(r: &CheckReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        wrap_under(
            "vramtop check ",
            &format!(
                "on {} ({}), allocating at most {}{}",
                r.device,
                r.backend,
                human_bytes(r.budget),
                if r.budget_asked > r.budget {
                    format!(
                        " (--budget {}, capped {})",
                        human_bytes(r.budget_asked),
                        if r.backend == "cuda" {
                            // A real GPU may be shared: only a share of its free memory.
                            format!(
                                "at {:.0}% of what the GPU has free{}",
                                REAL_GPU_FREE_SHARE * 100.0,
                                r.free
                                    .map(|f| format!(": {}", human_bytes(f)))
                                    .unwrap_or_default()
                            )
                        } else {
                            // The simulation's free memory, less the
                            // context the check's own process pays first.
                            format!(
                                "by what the GPU has free{}",
                                r.free
                                    .map(|f| format!(
                                        ": {}, less the check's own {} CUDA context",
                                        human_bytes(f),
                                        human_bytes(crate::device::sim::DEFAULT_CONTEXT_OVERHEAD)
                                    ))
                                    .unwrap_or_default()
                            )
                        }
                    )
                } else {
                    String::new()
                }
            ),
            REPORT_WIDTH
        )
    );
    if let Some(others) = &r.others {
        let _ = writeln!(out, "{}", wrap_under("  others: ", others, REPORT_WIDTH));
    }
    for s in &r.steps {
        let mark = match (s.ok, s.skipped) {
            (_, true) => "skip",
            (true, false) => " ok ",
            (false, false) => "FAIL",
        };
        let lead = format!("  [{mark}] ");
        let text = format!("{}: {}", s.name, s.detail);
        let _ = writeln!(out, "{}", wrap_under(&lead, &text, REPORT_WIDTH));
    }
    let result = match (r.result(), r.skipped()) {
        (CheckResult::Fail, _) => "FAIL".to_string(),
        (CheckResult::Skip, _) => format!(
            "SKIP (nothing was checked: a part needs {} at once, the check may allocate {})",
            human_bytes(MIN_BUDGET_BYTES),
            human_bytes(r.budget)
        ),
        (CheckResult::Pass, 0) => "PASS".to_string(),
        (CheckResult::Pass, n) => format!(
            "PASS ({n} {} skipped: more than the check may allocate; see above)",
            if n == 1 { "part" } else { "parts" }
        ),
    };
    let _ = writeln!(out, "{}", wrap_under("result: ", &result, REPORT_WIDTH));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::check::CheckStep;

    fn step(ok: bool, skipped: bool) -> CheckStep {
        CheckStep {
            name: "a step".to_string(),
            ok,
            skipped,
            detail: String::new(),
        }
    }

    fn report(steps: Vec<CheckStep>) -> CheckReport {
        CheckReport {
            backend: "sim".to_string(),
            device: "simulated GPU 0".to_string(),
            budget: 512 << 20,
            budget_asked: 512 << 20,
            free: None,
            others: None,
            steps,
        }
    }

    #[test]
    fn a_pass_with_parts_skipped_exits_0_and_nothing_checked_exits_77() {
        let passed = report(vec![step(true, false), step(true, false)]);
        assert_eq!(exit_code(&passed), 0);
        // The expandable phase skipped on a device with room for the plain
        // one only: what ran passed.
        let part_skipped = report(vec![step(true, false), step(true, true)]);
        assert_eq!(part_skipped.result(), CheckResult::Pass);
        assert_eq!(exit_code(&part_skipped), 0);
        let nothing = report(vec![step(true, true), step(true, true)]);
        assert_eq!(exit_code(&nothing), EXIT_NOTHING_CHECKED);
        let failed = report(vec![
            step(true, false),
            step(false, false),
            step(true, true),
        ]);
        assert_eq!(exit_code(&failed), EXIT_MISMATCH);
    }

    #[test]
    fn the_exit_codes_are_distinct() {
        let codes = [0, EXIT_MISMATCH, EXIT_BAD_INPUT, EXIT_NOTHING_CHECKED];
        for (i, a) in codes.iter().enumerate() {
            assert!(!codes[i + 1..].contains(a), "{a} twice in {codes:?}");
        }
    }

    #[test]
    fn a_real_gpus_cap_and_a_skip_say_how_much_the_check_may_take() {
        let mut nothing = report(vec![step(true, true), step(true, true)]);
        nothing.backend = "cuda".to_string();
        nothing.budget = 48 << 20;
        nothing.budget_asked = 512 << 20;
        let text = render(&nothing)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        // A real GPU's cap is a share of what is free, not all of it.
        assert!(
            text.contains("(--budget 512 MiB, capped at 5% of what the GPU has free)"),
            "{text}"
        );
        assert!(
            text.contains(
                "result: SKIP (nothing was checked: a part needs 70 MiB at once, the check may \
                 allocate 48 MiB)"
            ),
            "{text}"
        );
        let part_skipped = report(vec![step(true, false), step(true, true)]);
        let text = render(&part_skipped);
        assert!(
            text.contains("PASS (1 part skipped: more than the check may allocate; see above)"),
            "{text}"
        );
    }
}
