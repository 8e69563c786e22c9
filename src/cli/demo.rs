//! `vramtop demo` (and `vramtop` with no command, until the dashboard lands):
//! a short walk through the caching allocator on a simulated GPU.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::{WrapErr, eyre};
use serde::Serialize;

use super::text::{REPORT_WIDTH, cells, wrap_phrases_under, wrap_under};
use crate::alloc::explain::Why;
use crate::alloc::{
    AllocatorConfig, CachingAllocator, DeviceMemory, InMemoryDevice, TraceAction, allocation_size,
    human_bytes,
};
use crate::snapshot::capture::{snapshot_with_frames, synthetic_frames};
use crate::snapshot::{Frames, Snapshot, write_snapshot_file};

const MIB: u64 = 1 << 20;
/// The CUDA context the demo assumes (driver memory outside the
/// allocator, bytes): the simulated GPU's, so that the demo and the
/// dashboard's simulation say one figure. A scenario's is its own
/// (`context` in its file).
const SIM_CONTEXT_BYTES: u64 = crate::device::sim::DEFAULT_CONTEXT_OVERHEAD;

#[derive(Debug, Clone, Serialize)]
pub struct DemoStep {
    pub step: String,
    pub allocated: u64,
    pub reserved: u64,
    pub driver_used: u64,
    pub segments: i64,
    pub inactive_split_bytes: i64,
    pub lesson: String,
}

/// Microseconds of the trace clock per demo step: the entries of step `n`
/// are stamped `n × STEP_TIME_US` (a synthetic clock; nothing is timed).
const STEP_TIME_US: u64 = 1_000;

/// The least simulated memory the demo runs on: the CUDA context plus the
/// 20 + 20 MiB segments it reserves at most, with room to spare (bytes).
pub const DEMO_MEMORY_MIN: u64 = SIM_CONTEXT_BYTES + 64 * MIB;

/// Runs the demo script on a simulated GPU of `memory` bytes and returns its steps.
pub fn steps(memory: u64) -> color_eyre::Result<Vec<DemoStep>> {
    Ok(run_model(memory)?.0)
}

/// The demo's allocator as a snapshot: its whole trace, each entry with a
/// one-frame traceback naming the demo step (`<vramtop demo>`, line = step
/// number, name = the step), and the (empty) final layout. Each
/// `empty_cache()` call is an `annotate` entry named `empty_cache()` just
/// before what it released: a call that released nothing leaves no other
/// entry, and it is the lesson.
pub fn snapshot(memory: u64) -> color_eyre::Result<Snapshot> {
    let (steps, model) = run_model(memory)?;
    let frames: Vec<Frames> = steps
        .iter()
        .enumerate()
        .map(|(n, s)| synthetic_frames("<vramtop demo>", n as u64, &s.step))
        .collect();
    Ok(snapshot_with_frames(&model, 0, |entry| {
        let step = (entry.time_us / STEP_TIME_US) as usize;
        if entry.action == TraceAction::Annotate {
            return synthetic_frames("<vramtop demo>", step as u64, EMPTY_CACHE_MARK);
        }
        frames
            .get(step)
            .cloned()
            .unwrap_or_else(|| Frames::from(Vec::new()))
    }))
}

/// The name of the `annotate` entry an exported run records at each
/// `empty_cache()` call.
pub const EMPTY_CACHE_MARK: &str = "empty_cache()";

/// `empty_cache()` on `m`, marked in its trace first by an `annotate`
/// entry (kept only while history is recorded).
fn marked_empty_cache(m: &mut CachingAllocator<InMemoryDevice>) {
    m.annotate();
    m.empty_cache();
}

/// Runs the demo script with the trace recorded, on `memory` bytes.
fn run_model(memory: u64) -> color_eyre::Result<(Vec<DemoStep>, CachingAllocator<InMemoryDevice>)> {
    let mut device = InMemoryDevice::new(memory);
    device.set_external_use(SIM_CONTEXT_BYTES);
    let mut m = CachingAllocator::new(device, 0, AllocatorConfig::default());
    m.record_history(Some(usize::MAX));
    let mut out = Vec::new();
    let mut record = |m: &CachingAllocator<InMemoryDevice>, step: &str, lesson: &str| {
        let info = m.device().mem_get_info();
        out.push(DemoStep {
            step: step.to_string(),
            allocated: m.memory_allocated(),
            reserved: m.memory_reserved(),
            driver_used: info.total - info.free,
            segments: m.stats().segment.all.current,
            inactive_split_bytes: m.stats().inactive_split_bytes.all.current,
            lesson: lesson.to_string(),
        });
    };
    let fail = |e| eyre!("the demo's model call failed: {e}");
    record(
        &m,
        "start (CUDA context only)",
        "nvidia-smi already shows the context",
    );
    m.set_time_us(STEP_TIME_US);
    let a = m.malloc(6 * MIB, 0).map_err(fail)?;
    let b = m.malloc(6 * MIB, 0).map_err(fail)?;
    let c = m.malloc(6 * MIB, 0).map_err(fail)?;
    record(
        &m,
        "a, b, c = 3 × 6 MiB",
        "one 20 MiB segment holds all three",
    );
    m.set_time_us(2 * STEP_TIME_US);
    m.free(b).map_err(fail)?;
    record(
        &m,
        "del b",
        "allocated drops, reserved does not: b's block is cached",
    );
    m.set_time_us(3 * STEP_TIME_US);
    let d = m.malloc(7 * MIB, 0).map_err(fail)?;
    // The lessons the stress panel gives for the same moves: the model's.
    record(
        &m,
        "d = 7 MiB",
        &Why::NewSegment {
            request: 7 * MIB,
            segment: allocation_size(7 * MIB),
            several: false,
        }
        .short(),
    );
    m.set_time_us(4 * STEP_TIME_US);
    marked_empty_cache(&mut m);
    record(
        &m,
        "empty_cache()",
        &Why::EverySegmentHoldsALiveBlock.short(),
    );
    m.set_time_us(5 * STEP_TIME_US);
    m.free(a).map_err(fail)?;
    m.free(c).map_err(fail)?;
    marked_empty_cache(&mut m);
    record(
        &m,
        "del a, c; empty_cache()",
        "the first segment is entirely free: released",
    );
    m.set_time_us(6 * STEP_TIME_US);
    m.free(d).map_err(fail)?;
    marked_empty_cache(&mut m);
    record(
        &m,
        "del d; empty_cache()",
        "reserved is 0, the driver still holds the context",
    );
    m.check_invariants()
        .map_err(|e| eyre!("model self-check failed: {e}"))?;
    Ok((out, m))
}

/// What the demo suggests next: its own run as a PyTorch snapshot, opened
/// in the viewer (no snapshot of anyone else's needed).
pub const SAVE_AND_OPEN: &str =
    "vramtop demo --save-snapshot demo.pickle && vramtop open demo.pickle";

/// `vramtop demo`, on a simulated GPU of `memory` bytes (`--sim-memory`).
pub fn run(
    json: bool,
    save_snapshot: Option<&Path>,
    force: bool,
    memory: u64,
    ascii: bool,
) -> color_eyre::Result<ExitCode> {
    if let Some(problem) = save_snapshot
        .and_then(|p| super::output_file_problem(p, force, super::OutputKind::Snapshot))
    {
        super::say_error(problem);
        return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
    }
    if memory < DEMO_MEMORY_MIN {
        super::say_error(format_args!(
            "--sim-memory {} is too small for the demo: it needs at least {} \
             (a {} CUDA context and its segments)",
            human_bytes(memory),
            human_bytes(DEMO_MEMORY_MIN),
            human_bytes(SIM_CONTEXT_BYTES)
        ));
        return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
    }
    let steps = steps(memory)?;
    if let Some(path) = save_snapshot {
        let snapshot = snapshot(memory)?;
        match write_snapshot_file(&snapshot, path) {
            Ok(bytes) => eprintln!(
                "vramtop demo: wrote {} ({} trace entries, {bytes} bytes)",
                path.display(),
                snapshot.device_traces.iter().map(Vec::len).sum::<usize>()
            ),
            Err(e) => {
                super::say_error(e);
                return Ok(ExitCode::from(super::EXIT_BAD_INPUT));
            }
        }
    }
    if json {
        let text = serde_json::to_string_pretty(&steps).wrap_err("cannot encode the demo")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
        return Ok(ExitCode::SUCCESS);
    }
    let out = render(&steps, memory, save_snapshot);
    super::emit_text(&out, ascii).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// How a step's figure is written in a column of the demo's table.
type Figure = fn(&DemoStep) -> String;

/// The demo table's columns: a heading, and a step's figure under it.
const COLUMNS: [(&str, Figure); 5] = [
    ("allocated", |s| human_bytes(s.allocated)),
    ("reserved", |s| human_bytes(s.reserved)),
    ("driver used", |s| human_bytes(s.driver_used)),
    ("segs", |s| s.segments.to_string()),
    // "inactive split" short, as every narrow column writes it.
    ("inact split", |s| {
        human_bytes(u64::try_from(s.inactive_split_bytes).unwrap_or(0))
    }),
];

/// What each column means, in the table's order: each stays on one line.
const LEGEND: [&str; 7] = [
    "allocated = memory_allocated(),",
    "reserved = memory_reserved(),",
    "driver used = what nvidia-smi shows,",
    "segs = segments (cudaMalloc calls held),",
    "inact split = inactive split (memory_stats()'s inactive_split_bytes):",
    "free blocks of segments that also hold a live block: empty_cache()",
    "cannot release them, and only requests that fit them reuse them.",
];

/// The demo's text, in 80 columns: a row of figures per step with the
/// step's lesson on a line of its own under it (beside the figures it
/// ran past 80 columns), the columns' meanings, and the command that
/// saves and opens the same run (or opens it, when `saved` holds it).
pub fn render(steps: &[DemoStep], memory: u64, saved: Option<&Path>) -> String {
    let mut out = String::new();
    let title = format!(
        "PyTorch's caching allocator on a simulated {} GPU",
        human_bytes(memory)
    );
    let context = format!(
        "({} CUDA context, as every simulated GPU assumes)",
        human_bytes(SIM_CONTEXT_BYTES)
    );
    let _ = writeln!(
        out,
        "{}\n",
        wrap_phrases_under("vramtop demo: ", [title.as_str(), &context], REPORT_WIDTH)
    );
    let step_width = steps
        .iter()
        .map(|s| cells(&s.step))
        .chain([cells("step")])
        .max()
        .unwrap_or(0);
    let figures: Vec<Vec<String>> = steps
        .iter()
        .map(|s| COLUMNS.iter().map(|(_, figure)| figure(s)).collect())
        .collect();
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(k, (name, _))| {
            figures
                .iter()
                .map(|row| row.get(k).map_or(0, |f| cells(f)))
                .chain([cells(name)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let row = |first: &str, rest: Vec<&str>| {
        let pad = |text: &str, width: usize| " ".repeat(width.saturating_sub(cells(text)));
        let mut line = format!("{first}{}", pad(first, step_width));
        for (text, &width) in rest.into_iter().zip(&widths) {
            let _ = write!(line, "  {}{text}", pad(text, width));
        }
        line
    };
    let names = COLUMNS.iter().map(|(name, _)| *name).collect();
    let _ = writeln!(out, "{}", row("step", names));
    for (s, figures) in steps.iter().zip(&figures) {
        let _ = writeln!(
            out,
            "{}",
            row(&s.step, figures.iter().map(String::as_str).collect())
        );
        let _ = writeln!(out, "{}", wrap_under("  why: ", &s.lesson, REPORT_WIDTH));
    }
    let _ = writeln!(out, "\n{}", wrap_phrases_under("", LEGEND, REPORT_WIDTH));
    // The command on a line of its own, whole, to be copied.
    match saved {
        // Saved by this very run: the next step is opening it (running
        // the save again would be refused, the file being there).
        Some(path) => {
            let path = crate::quote::shell_path(&path.to_string_lossy());
            let _ = writeln!(
                out,
                "Open the saved run as a PyTorch snapshot, step by step:\n  vramtop open {path}"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "See it as a PyTorch snapshot, step by step:\n  {SAVE_AND_OPEN}"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_fits_80_cells_with_each_lesson_under_its_step() {
        // The widest figures the option allows beside the usual ones.
        for memory in [80 << 30, u64::MAX] {
            let text = render(&steps(memory).expect("the demo runs"), memory, None);
            for line in text.lines() {
                assert!(
                    cells(line) <= REPORT_WIDTH,
                    "{} cells: {line:?}",
                    cells(line)
                );
            }
        }
        let text = render(&steps(80 << 30).expect("the demo runs"), 80 << 30, None);
        assert!(
            text.contains(concat!(
                "step                       allocated  reserved  driver used  segs  inact split\n",
                "start (CUDA context only)        0 B       0 B      500 MiB     0          0 B\n",
                "  why: nvidia-smi already shows the context\n",
            )),
            "{text}"
        );
        assert!(
            text.starts_with(
                "vramtop demo: PyTorch's caching allocator on a simulated 80 GiB GPU\n              \
                 (500 MiB CUDA context, as every simulated GPU assumes)\n\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("step by step:\n  {SAVE_AND_OPEN}\n")),
            "{text}"
        );
    }

    #[test]
    fn a_demo_that_saved_its_run_offers_to_open_that_file_not_to_save_again() {
        let steps = steps(80 << 30).expect("the demo runs");
        let text = render(&steps, 80 << 30, Some(Path::new("my run.pickle")));
        assert!(
            text.ends_with(
                "Open the saved run as a PyTorch snapshot, step by step:\n  \
                 vramtop open 'my run.pickle'\n"
            ),
            "{text}"
        );
        assert!(!text.contains("--save-snapshot"), "{text}");
    }
}
