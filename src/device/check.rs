//! `vramtop check`: a self-test of the memory path on whatever backend is
//! active — the allocator model on real CUDA memory (or the simulated GPU),
//! the fill and verify kernels, and the driver's used-memory figure against
//! the model's reserved bytes, before and after `empty_cache`.

use serde::Serialize;

use super::Kernels;
use crate::alloc::{AllocatorConfig, CachingAllocator, DeviceMemory, human_bytes};

const MIB: u64 = 1 << 20;

/// One step of the self-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckStep {
    pub name: String,
    /// Not failed: passed, or skipped.
    pub ok: bool,
    /// Not run: the device has too little free for it (`detail` says how
    /// much it needs and has). A skip is no failure of the allocator
    /// model, and no pass either.
    #[serde(default)]
    pub skipped: bool,
    pub detail: String,
}

/// What the self-test found as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckResult {
    /// Every step that ran passed (some may have been skipped).
    Pass,
    /// A step failed.
    Fail,
    /// Nothing was checked: every step was skipped.
    Skip,
}

/// The whole self-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// "cuda" or "sim".
    pub backend: String,
    pub device: String,
    /// The most the test allocated at once (bytes): `--budget`, capped by
    /// what the GPU has free.
    pub budget: u64,
    /// What `--budget` asked for (bytes); above `budget` when capped.
    pub budget_asked: u64,
    /// What the GPU had free when the check began (bytes), the figure
    /// `budget` is capped by; `None` when the device does not say.
    pub free: Option<u64>,
    /// Who else holds memory on the GPU, where the backend knows (the
    /// simulation's own processes): one line for people.
    pub others: Option<String>,
    pub steps: Vec<CheckStep>,
}

impl CheckReport {
    /// No step failed (a skipped step is not a failure).
    pub fn passed(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.ok)
    }

    pub fn result(&self) -> CheckResult {
        if !self.passed() {
            CheckResult::Fail
        } else if self.steps.iter().all(|s| s.skipped) {
            CheckResult::Skip
        } else {
            CheckResult::Pass
        }
    }

    /// Steps skipped for want of free memory.
    pub fn skipped(&self) -> usize {
        self.steps.iter().filter(|s| s.skipped).count()
    }
}

/// How far the driver's used-memory change may be from the model's reserved
/// change: the driver rounds allocations to its own granularity and other
/// processes may allocate meanwhile (bytes).
fn tolerance(expected: u64) -> u64 {
    (expected / 50).max(4 * MIB)
}

/// The most the plain-segment phase reserves besides its larger tensor, in
/// bytes: a 2 MiB small-pool segment (the 512 B and 1 MiB tensors), at
/// most 20 MiB for 10 MiB − 1 (a large request under 10 MiB) and 38 MiB
/// for 37 MiB (rounded up to 2 MiB).
const FIXED_RESERVED_BYTES: u64 = 60 * MIB;

/// The smallest larger tensor, in bytes: from 10 MiB a large request gets a
/// segment of its own size (below, a 20 MiB one).
const MIN_BIG_BYTES: u64 = 10 * MIB;

/// The larger tensor, in bytes: what the budget leaves after the fixed
/// segments, in whole 2 MiB (so its segment is its size), at most 256 MiB.
fn big_tensor(budget: u64) -> u64 {
    let left = budget.saturating_sub(FIXED_RESERVED_BYTES);
    (left - left % (2 * MIB)).min(256 * MIB)
}

/// The least budget the check runs with, in bytes: each phase stays within
/// its budget (the expandable phase maps 60 MiB).
pub const MIN_BUDGET_BYTES: u64 = FIXED_RESERVED_BYTES + MIN_BIG_BYTES;

/// What the expandable-segments phase maps in the large pool, in bytes:
/// two 30 MiB tensors on 20 MiB pages.
const EXPANDABLE_BYTES: u64 = 60 * MIB;

fn step(steps: &mut Vec<CheckStep>, name: &str, ok: bool, detail: String) {
    steps.push(CheckStep {
        name: name.to_string(),
        ok,
        skipped: false,
        detail,
    });
}

/// A phase not run: `need` bytes free at once, and the device (or the
/// budget) allows only `have`.
fn skip(steps: &mut Vec<CheckStep>, name: &str, need: u64, have: u64, what: &str) {
    steps.push(CheckStep {
        name: name.to_string(),
        ok: true,
        skipped: true,
        detail: format!(
            "needs {} free, {what} {}",
            human_bytes(need),
            human_bytes(have)
        ),
    });
}

/// Compares a driver-used delta with the model's reserved delta.
fn compare_delta(
    steps: &mut Vec<CheckStep>,
    name: &str,
    before: Option<u64>,
    after: Option<u64>,
    model_delta: i64,
) {
    match (before, after) {
        (Some(b), Some(a)) => {
            let driver_delta = a as i64 - b as i64;
            let diff = (driver_delta - model_delta).unsigned_abs();
            step(
                steps,
                name,
                diff <= tolerance(model_delta.unsigned_abs()),
                format!(
                    "driver used {:+} MiB, model reserved {:+} MiB (difference {}, tolerance {})",
                    driver_delta / MIB as i64,
                    model_delta / MIB as i64,
                    human_bytes(diff),
                    human_bytes(tolerance(model_delta.unsigned_abs()))
                ),
            );
        }
        _ => step(
            steps,
            name,
            true,
            "skipped: the driver does not report used memory (n/a)".to_string(),
        ),
    }
}

/// The last step of a phase: the allocator gave everything back and its
/// counters still agree with its layout.
fn everything_returned<D: DeviceMemory>(
    steps: &mut Vec<CheckStep>,
    name: &str,
    m: &CachingAllocator<D>,
) {
    step(
        steps,
        name,
        m.memory_reserved() == 0 && m.check_invariants().is_ok(),
        format!("reserved {}", human_bytes(m.memory_reserved())),
    );
}

/// Runs the self-test. `open` gives a fresh memory handle for each phase
/// (plain segments, then expandable segments); `driver_used` reads the
/// driver's used bytes of the same GPU. At most `budget` bytes are allocated
/// at once.
pub fn run_check<D, O, U>(
    backend: &str,
    device: &str,
    mut open: O,
    mut driver_used: U,
    budget: u64,
) -> CheckReport
where
    D: DeviceMemory + Kernels,
    O: FnMut() -> Result<D, String>,
    U: FnMut() -> Option<u64>,
{
    let mut steps = Vec::new();
    if budget < MIN_BUDGET_BYTES {
        // Nothing is allocated: the check could not keep to the budget,
        // which the callers cap by what the device has free (a --budget
        // below the least is refused before): a small device, not a
        // failure of the allocator model.
        for name in ["allocator model", "expandable segments"] {
            skip(
                &mut steps,
                name,
                MIN_BUDGET_BYTES,
                budget,
                "the check may allocate at most",
            );
        }
    } else {
        plain_segments(&mut steps, &mut open, &mut driver_used, budget);
        if steps.iter().all(|s| s.ok) {
            expandable_segments(&mut steps, &mut open, &mut driver_used);
        }
    }
    CheckReport {
        backend: backend.to_string(),
        device: device.to_string(),
        budget,
        budget_asked: budget,
        free: None,
        others: None,
        steps,
    }
}

fn plain_segments<D, O, U>(
    steps: &mut Vec<CheckStep>,
    open: &mut O,
    driver_used: &mut U,
    budget: u64,
) where
    D: DeviceMemory + Kernels,
    O: FnMut() -> Result<D, String>,
    U: FnMut() -> Option<u64>,
{
    let memory = match open() {
        Ok(m) => m,
        Err(e) => return step(steps, "open the device", false, e),
    };
    let mut m = CachingAllocator::new(memory, 0, AllocatorConfig::default());
    // A first small allocation creates the CUDA context, so that the
    // baseline below already includes it.
    let anchor = match m.malloc(512, 0) {
        Ok(p) => p,
        Err(e) => {
            return step(
                steps,
                "first allocation (creates the context)",
                false,
                e.to_string(),
            );
        }
    };
    // The budget was read before the context existed, and others may have
    // taken memory since: size the larger tensor from what is free now.
    let free = m.device().mem_get_info().free;
    let room = budget.min(free);
    if room < MIN_BUDGET_BYTES {
        let _ = m.free(anchor);
        m.empty_cache();
        return skip(
            steps,
            "allocator model",
            MIN_BUDGET_BYTES,
            free,
            "the device has",
        );
    }
    let used0 = driver_used();
    let reserved0 = m.memory_reserved();

    let big = big_tensor(room);
    let sizes = [MIB, 10 * MIB - 1, 37 * MIB, big];
    let mut ptrs = Vec::new();
    for &size in &sizes {
        match m.malloc(size, 0) {
            Ok(p) => ptrs.push((p, size)),
            Err(e) => {
                step(
                    steps,
                    "allocate through the allocator model",
                    false,
                    e.to_string(),
                );
                return;
            }
        }
    }
    let reserved1 = m.memory_reserved();
    step(
        steps,
        "allocate through the allocator model",
        true,
        format!(
            "{} tensors ({}) beside the first 512-byte one (kept to the end: it \
             created the context), reserved {} in {} segments",
            ptrs.len(),
            sizes
                .iter()
                .map(|&s| human_bytes(s))
                .collect::<Vec<_>>()
                .join(", "),
            human_bytes(reserved1),
            m.stats().segment.all.current
        ),
    );

    let mut kernel_errors = Vec::new();
    for (i, &(p, size)) in ptrs.iter().enumerate() {
        let seed = 0x5eed + i as u32;
        let dev = m.device_mut();
        if let Err(e) = dev.fill(p, size, seed) {
            kernel_errors.push(format!("fill {}: {e}", human_bytes(size)));
            continue;
        }
        match dev.verify(p, size, seed) {
            Ok(None) => {}
            Ok(Some(off)) => kernel_errors.push(format!(
                "verify {}: wrong byte at offset {off}",
                human_bytes(size)
            )),
            Err(e) => kernel_errors.push(format!("verify {}: {e}", human_bytes(size))),
        }
    }
    // The verify kernel must notice a wrong pattern, or it proves nothing.
    if let Some(&(p, size)) = ptrs.first() {
        match m.device_mut().verify(p, size, 0xbad) {
            Ok(Some(_)) => {}
            Ok(None) => kernel_errors.push("verify accepted a wrong pattern".to_string()),
            Err(e) => kernel_errors.push(format!("verify (wrong seed): {e}")),
        }
    }
    step(
        steps,
        "fill and verify kernels",
        kernel_errors.is_empty(),
        if kernel_errors.is_empty() {
            format!(
                "{} blocks filled and verified; verify also caught a planted wrong pattern",
                ptrs.len()
            )
        } else {
            kernel_errors.join("; ")
        },
    );

    let used1 = driver_used();
    compare_delta(
        steps,
        "driver-used change equals the model's reserved change",
        used0,
        used1,
        reserved1 as i64 - reserved0 as i64,
    );

    for &(p, _) in &ptrs {
        if let Err(e) = m.free(p) {
            step(steps, "free", false, e.to_string());
            return;
        }
    }
    let used2 = driver_used();
    let reserved2 = m.memory_reserved();
    step(
        steps,
        "free keeps the memory cached",
        reserved2 == reserved1 && m.memory_allocated() == 512,
        format!(
            "allocated {}, reserved still {}",
            human_bytes(m.memory_allocated()),
            human_bytes(reserved2)
        ),
    );
    compare_delta(
        steps,
        "the driver still counts the cached memory",
        used1,
        used2,
        0,
    );

    m.empty_cache();
    let reserved3 = m.memory_reserved();
    let used3 = driver_used();
    step(
        steps,
        "empty_cache releases every free segment but the one in use",
        reserved3 == reserved0,
        format!(
            "reserved {} (the 2 MiB segment holding the first 512-byte tensor stays)",
            human_bytes(reserved3)
        ),
    );
    compare_delta(
        steps,
        "the driver sees the release",
        used2,
        used3,
        reserved3 as i64 - reserved2 as i64,
    );
    let _ = m.free(anchor);
    m.empty_cache();
    everything_returned(steps, "everything returned", &m);
}

fn expandable_segments<D, O, U>(steps: &mut Vec<CheckStep>, open: &mut O, driver_used: &mut U)
where
    D: DeviceMemory + Kernels,
    O: FnMut() -> Result<D, String>,
    U: FnMut() -> Option<u64>,
{
    let memory = match open() {
        Ok(m) => m,
        Err(e) => return step(steps, "expandable segments: open the device", false, e),
    };
    let config = match AllocatorConfig::parse("expandable_segments:True") {
        Ok(c) => c,
        Err(e) => return step(steps, "expandable segments", false, e.to_string()),
    };
    let mut m = CachingAllocator::new(memory, 0, config);
    // Context first (a small-pool page), then the baseline.
    let anchor = m.malloc(512, 0);
    let free = m.device().mem_get_info().free;
    if free < EXPANDABLE_BYTES {
        if let Ok(p) = anchor {
            let _ = m.free(p);
        }
        m.empty_cache();
        return skip(
            steps,
            "expandable segments",
            EXPANDABLE_BYTES,
            free,
            "the device has",
        );
    }
    let used0 = driver_used();
    let reserved0 = m.memory_reserved();
    let (a, b) = match (m.malloc(30 * MIB, 0), m.malloc(30 * MIB, 0)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return step(
                steps,
                "expandable segments: map pages",
                false,
                e.to_string(),
            );
        }
    };
    let reserved1 = m.memory_reserved();
    step(
        steps,
        "expandable segments: tensors share one growing segment",
        b == a + 30 * MIB && reserved1 - reserved0 == 60 * MIB,
        format!(
            "second tensor at +{} from the first; large pool mapped {}",
            human_bytes(b.wrapping_sub(a)),
            human_bytes(reserved1 - reserved0)
        ),
    );
    let used1 = driver_used();
    compare_delta(
        steps,
        "expandable segments: the driver sees the mapped pages",
        used0,
        used1,
        reserved1 as i64 - reserved0 as i64,
    );
    let _ = m.free(a);
    m.empty_cache();
    let reserved2 = m.memory_reserved();
    let used2 = driver_used();
    step(
        steps,
        "expandable segments: empty_cache unmaps whole free pages only",
        reserved1 - reserved2 == 20 * MIB,
        format!(
            "unmapped {} of the freed 30 MiB (the page shared with the live tensor stays)",
            human_bytes(reserved1 - reserved2)
        ),
    );
    compare_delta(
        steps,
        "expandable segments: the driver sees the unmap",
        used1,
        used2,
        reserved2 as i64 - reserved1 as i64,
    );
    let _ = m.free(b);
    if let Ok(p) = anchor {
        let _ = m.free(p);
    }
    m.empty_cache();
    everything_returned(steps, "expandable segments: everything returned", &m);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Telemetry;
    use crate::device::sim::{Fault, SimCluster, SimConfig};

    fn sim_used(cluster: &SimCluster) -> impl FnMut() -> Option<u64> + '_ {
        move || {
            cluster
                .telemetry()
                .sample()
                .ok()?
                .first()?
                .sample()?
                .memory_used
        }
    }

    /// The check on `cluster`'s GPU 0, its driver figure read from there.
    fn check_on(cluster: &SimCluster, budget: u64) -> CheckReport {
        run_check(
            "sim",
            "0",
            || Ok(cluster.new_process(0, "vramtop check")),
            sim_used(cluster),
            budget,
        )
    }

    #[test]
    fn check_passes_on_the_simulated_gpu() {
        let cluster = SimCluster::new(SimConfig::default());
        let report = check_on(&cluster, 1 << 30);
        assert!(report.passed(), "{report:#?}");
        assert!(report.steps.len() >= 10);
    }

    #[test]
    fn every_budget_from_the_least_keeps_the_plain_phase_within_it() {
        for budget in [
            MIN_BUDGET_BYTES,
            MIN_BUDGET_BYTES + 1,
            100 * MIB,
            317 * MIB,
            1 << 30,
        ] {
            let big = big_tensor(budget);
            assert!(big >= MIN_BIG_BYTES, "{budget}: {big}");
            assert_eq!(big % (2 * MIB), 0, "its segment is its size");
            assert!(FIXED_RESERVED_BYTES + big <= budget, "{budget}: {big}");
        }
        let cluster = SimCluster::new(SimConfig::default());
        let report = check_on(&cluster, MIN_BUDGET_BYTES);
        assert!(report.passed(), "{report:#?}");
    }

    #[test]
    fn a_budget_below_the_least_allocates_nothing_and_is_skipped() {
        let mut opened = false;
        let report = run_check(
            "sim",
            "0",
            || -> Result<crate::device::sim::SimMemory, String> {
                opened = true;
                Err("not reached".to_string())
            },
            || None,
            MIN_BUDGET_BYTES - 1,
        );
        assert_eq!(report.result(), CheckResult::Skip, "{report:#?}");
        assert!(!opened, "the device was never opened");
        assert!(
            report.steps[0].detail.contains("needs 70 MiB free"),
            "{report:#?}"
        );
    }

    #[test]
    fn a_phase_the_device_has_no_room_for_is_skipped_with_what_it_needs() {
        // 1 GiB less two 500 MiB contexts (the check's and another
        // process's) leaves 24 MiB: neither phase fits.
        let cluster = SimCluster::new(SimConfig::default().with_memory(1 << 30));
        let mut other = cluster.new_process(0, "other");
        let held = other.malloc(2 * MIB).expect("the other context");
        let report = check_on(&cluster, 512 * MIB);
        assert_eq!(report.result(), CheckResult::Skip, "{report:#?}");
        assert!(
            report.steps.iter().all(|s| s.skipped
                && s.detail.starts_with("needs ")
                && s.detail.contains("the device has")),
            "{report:#?}"
        );
        other.free(held, 2 * MIB);
    }

    #[test]
    fn check_fails_when_the_device_refuses_memory() {
        let cluster = SimCluster::new(SimConfig::default());
        cluster.inject(Fault::OomAtOrAbove {
            gpu: 0,
            bytes: 30 * MIB,
        });
        let report = check_on(&cluster, 1 << 30);
        assert!(!report.passed());
        let failed = report.steps.iter().find(|s| !s.ok).expect("a failed step");
        assert!(failed.detail.contains("out of memory"), "{failed:?}");
    }

    #[test]
    fn missing_used_memory_is_reported_as_skipped_not_as_zero() {
        let cluster = SimCluster::new(SimConfig::default());
        let report = run_check(
            "sim",
            "0",
            || Ok(cluster.new_process(0, "vramtop check")),
            || None,
            1 << 30,
        );
        assert!(report.passed());
        assert!(report.steps.iter().any(|s| s.detail.contains("n/a")));
    }
}
