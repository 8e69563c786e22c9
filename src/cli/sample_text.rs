//! `vramtop --once` without `--json`: one sample as text for a person, as
//! `nvidia-smi` and `nvitop -1` print one. The same sample as the JSON
//! (`HeadlessSample`), so the two never disagree on a figure, written with
//! the dashboard's units and rounding (`ui::format`), in 80 cells a line.
//!
//! 80 cells and no more, even on a wider terminal: the output is most
//! often read in a pipe, a log or a bug report, where the terminal's
//! width is unknown, and every figure fits 80 cells anyway (only a long
//! GPU name, command or message is cut or wrapped).

use crate::app::source::{AllocatorSummary, HeadlessGpu, HeadlessProbe, HeadlessSample};
use crate::app::state::DeviceMemory;
use crate::device::{GpuReading, ProcessUsage};
use crate::ui::DRIVER_HELD;
use crate::ui::format::{self, NA};

use super::text::{REPORT_WIDTH, cells, elide_end, wrap_under};

/// Cells a process line is indented by (under its GPU's figures).
const PROCESS_INDENT: &str = "    ";

/// The sample as text: the backend (and why, when it is a fallback), then
/// per GPU its figures, its processes and its allocator's figures, then
/// the attached probes and the OOMs they reported.
pub fn render(sample: &HeadlessSample) -> String {
    let mut out = String::new();
    let backend = match &sample.banner {
        Some(banner) => format!("{}; {banner}", sample.backend),
        None => sample.backend.clone(),
    };
    line(&mut out, &wrap_under("backend: ", &backend, REPORT_WIDTH));
    if sample.gpus.is_empty() {
        line(&mut out, "no GPU: the backend lists none");
    }
    // A process whose parent is a GPU process too (on any GPU) holds a
    // CUDA context of its own: a DataLoader worker that touched CUDA, as
    // the Processes pane marks it.
    let gpu_pids: std::collections::BTreeSet<u32> = sample
        .gpus
        .iter()
        .filter_map(|g| match &g.reading {
            // The physical GPUs' lists, as the Processes pane takes them
            // (a MIG row lists its GPU's processes again).
            GpuReading::Ok(s) if s.mig.is_none() => {
                Some(s.listed_processes().iter().map(|p| p.pid))
            }
            _ => None,
        })
        .flatten()
        .collect();
    for gpu in &sample.gpus {
        gpu_text(&mut out, gpu, &gpu_pids);
    }
    for probe in &sample.probes {
        probe_text(&mut out, probe);
    }
    for oom in &sample.ooms {
        let gpu = oom.gpu.map_or_else(
            || format!("CUDA device {}", oom.device),
            |g| format!("GPU {g}"),
        );
        let pid = oom.pid.map_or_else(|| NA.to_string(), |p| p.to_string());
        line(
            &mut out,
            &wrap_under(
                "OOM: ",
                &format!("pid {pid} on {gpu}: {}", oom.message),
                REPORT_WIDTH,
            ),
        );
    }
    if let Some(note) = &sample.not_started_note {
        // Simulated processes the flags asked for that found no room.
        line(&mut out, &wrap_under("note: ", note, REPORT_WIDTH));
    }
    if !sample.probes_skipped.is_empty() {
        let n = sample.probes_skipped.len();
        line(
            &mut out,
            &wrap_under(
                "note: ",
                &format!(
                    "{} not read (`vramtop --once --json` says why)",
                    format::count_of(n, "probe socket or folder", "probe sockets or folders")
                ),
                REPORT_WIDTH,
            ),
        );
    }
    out
}

fn line(out: &mut String, text: &str) {
    out.push_str(text);
    out.push('\n');
}

fn gpu_text(out: &mut String, gpu: &HeadlessGpu, gpu_pids: &std::collections::BTreeSet<u32>) {
    let s = match &gpu.reading {
        GpuReading::Ok(s) => s,
        GpuReading::Lost {
            index,
            reason,
            cause,
        } => {
            line(
                out,
                &wrap_under(
                    &format!("GPU {index}  "),
                    &format!("{}: {reason}", cause.label()),
                    REPORT_WIDTH,
                ),
            );
            return;
        }
    };
    // A MIG device is named by its physical GPU and its slot, indented
    // under that GPU, as nvidia-smi lists them: its `index` is the GPU's.
    let lead = match gpu.mig_index {
        Some(slot) => format!("  GPU {} MIG {slot}  ", s.index),
        None => format!("GPU {}  ", s.index),
    };
    line(
        out,
        &format!(
            "{lead}{}",
            elide_end(&s.name, REPORT_WIDTH.saturating_sub(cells(&lead)))
        ),
    );
    let share = match (s.memory_used, s.memory_total) {
        (Some(used), Some(total)) => format::percent_of(used, total),
        _ => NA.to_string(),
    };
    // Free as the driver says it (nvidia-smi's, the JSON's `memory_free`)
    // where the driver keeps some memory for itself: used/total alone
    // would read as more free than there is.
    let held = match DeviceMemory::of(s) {
        Some(m) if m.driver_held > 0 => format!(
            ", free {} ({} {DRIVER_HELD})",
            format::bytes(m.free),
            format::bytes(m.driver_held)
        ),
        _ => String::new(),
    };
    let figures = format!(
        "memory {} ({share}){held}, util {}, temp {}, power {}",
        format::bytes_of(s.memory_used, s.memory_total),
        format::opt_unit(s.gpu_utilization, "%"),
        format::opt_unit(s.temperature_c, "°C"),
        format::pair(
            format::watts(s.power_draw_mw),
            format::watts(s.power_limit_mw),
            " W"
        ),
    );
    line(out, &wrap_under("  ", &figures, REPORT_WIDTH));
    let processes = s.listed_processes();
    match &s.processes {
        None => line(out, &format!("  {}", format::PROCESSES_NA)),
        Some(list) if list.is_empty() => line(out, "  no processes"),
        Some(list) => line(
            out,
            &format!(
                "  {}:",
                format::count_of(list.len(), "process", "processes")
            ),
        ),
    }
    process_rows_with_usage(
        out,
        processes.iter().map(|p| {
            (
                ProcessRow {
                    pid: p.pid,
                    user: p.user.as_deref(),
                    command: p.command.as_deref(),
                    used_memory: p.used_memory,
                    depth: 0,
                    own_context: p.own_context_in_child(gpu_pids),
                },
                p.usage,
            )
        }),
    );
    // Every allocator the dashboard can show (its `v` cycles them), the
    // one it shows first first; a sample built with the shown one alone
    // lists that.
    let allocators: Vec<&AllocatorSummary> = if gpu.allocators.is_empty() {
        gpu.allocator.iter().collect()
    } else {
        gpu.allocators.iter().collect()
    };
    match allocators.as_slice() {
        [a] => line(
            out,
            &wrap_under("  allocator: ", &allocator_figures(a, true), REPORT_WIDTH),
        ),
        [] if s.mig.is_none() => line(
            out,
            "  allocator: n/a (no probed process on this GPU: docs/attach.md)",
        ),
        [] => {}
        several => {
            line(
                out,
                &format!(
                    "  {} (the dashboard's v switches):",
                    format::count_of(several.len(), "allocator", "allocators")
                ),
            );
            for a in several {
                // A dash each: a wrapped figure line reads as its own.
                line(
                    out,
                    &wrap_under("  - ", &allocator_figures(a, true), REPORT_WIDTH),
                );
            }
        }
    }
}

/// `command` in `room` cells, cut before a trailing "(simulated)" (or
/// "(…; simulated)") rather than through it: cut at the end, a simulated
/// process read "(simula…", one that looks like a real one.
fn elide_keeping_simulated(command: &str, room: usize) -> String {
    if cells(command) <= room {
        return command.to_string();
    }
    let mark = command
        .rfind(" (")
        .map(|at| &command[at..])
        .filter(|tail| tail.ends_with("simulated)"));
    match mark {
        // Some of the command before it, at least a few cells.
        Some(tail) if cells(tail) + 4 <= room => {
            let head = &command[..command.len() - tail.len()];
            format!("{}{tail}", elide_end(head, room - cells(tail)))
        }
        _ => elide_end(command, room),
    }
}

/// One line per process, as `--once` lists them: `pid`, the user (where
/// any is known, cut to [`USER_CELLS`]), the command cut to fit, the
/// memory right-aligned at the report's edge (the summary of a recording
/// lists those at a peak the same way).
pub(super) fn process_rows<'a>(out: &mut String, processes: impl Iterator<Item = ProcessRow<'a>>) {
    process_rows_with_usage(out, processes.map(|p| (p, ProcessUsage::default())));
}

/// [`process_rows`] with what each process uses besides GPU memory, before
/// that memory: `SM 30%`, `CPU 2.5%`, `host 1.20 GiB`, each where some
/// process of the list has it (`-` for the others). One sample has no
/// %CPU (it needs two), so `--once` shows none; a simulated GPU's
/// processes have none of them.
fn process_rows_with_usage<'a>(
    out: &mut String,
    processes: impl Iterator<Item = (ProcessRow<'a>, ProcessUsage)>,
) {
    let (processes, usages): (Vec<ProcessRow<'a>>, Vec<ProcessUsage>) = processes.unzip();
    let usage_columns = usage_cells(&usages);
    let rows: Vec<(u32, String, String, String, usize)> = processes
        .into_iter()
        .map(|p| {
            let command = p.command.unwrap_or(NA);
            (
                p.pid,
                p.user.map(|u| elide_end(u, USER_CELLS)).unwrap_or_default(),
                if p.own_context {
                    format!("{} {command}", crate::app::state::OWN_CONTEXT_MARK)
                } else {
                    command.to_string()
                },
                format::opt_bytes(p.used_memory),
                p.depth,
            )
        })
        .collect();
    let pid_w = rows
        .iter()
        .map(|(pid, ..)| pid.to_string().len())
        .max()
        .unwrap_or(0);
    // No user column where no process has one (a driver that cannot say).
    let user_w = rows.iter().map(|(_, u, ..)| cells(u)).max().unwrap_or(0);
    let user_gap = if user_w > 0 { 2 } else { 0 };
    let mem_w = rows.iter().map(|(.., m, _)| cells(m)).max().unwrap_or(0);
    let usage_w: usize = usage_columns.iter().map(|c| c.width + 2).sum();
    let depths: Vec<Option<usize>> = rows.iter().map(|r| Some(r.4)).collect();
    let more_siblings = crate::ui::format::siblings_below(&depths);
    for (i, (pid, user, command, mem, depth)) in rows.iter().enumerate() {
        // PROCESS_INDENT, "pid ", the pid, 2 spaces, the user and 2 spaces
        // where there is one, the command, 2 spaces, the usage columns
        // with 2 spaces after each, the memory right-aligned at the
        // report's edge.
        let fixed = cells(PROCESS_INDENT) + 4 + pid_w + 2 + user_w + user_gap + 2 + usage_w + mem_w;
        let room = REPORT_WIDTH.saturating_sub(fixed);
        // A child under its parent as the Processes pane's tree draws it
        // (`--ascii` makes the branch `+ `); deeper than 8 is drawn at 8.
        let branch = match depth {
            0 => String::new(),
            d => {
                let glyph = if more_siblings.get(i).copied().unwrap_or(false) {
                    "├ "
                } else {
                    "└ "
                };
                format!("{}{glyph}", "  ".repeat(d.saturating_sub(1).min(7)))
            }
        };
        let command = elide_keeping_simulated(&format!("{branch}{command}"), room);
        let pad = room.saturating_sub(cells(&command));
        let user = if user_w > 0 {
            format!("{user}{}  ", " ".repeat(user_w.saturating_sub(cells(user))))
        } else {
            String::new()
        };
        let usage: String = usage_columns
            .iter()
            .map(|c| {
                let cell = c.cells.get(i).map(String::as_str).unwrap_or_default();
                format!("{cell:<w$}  ", w = c.width)
            })
            .collect();
        line(
            out,
            &format!(
                "{PROCESS_INDENT}pid {pid:<pid_w$}  {user}{command}{}  {usage}{mem:>mem_w$}",
                " ".repeat(pad),
            ),
        );
    }
}

/// One usage column of the process lines: a labelled cell a process.
struct UsageColumn {
    cells: Vec<String>,
    /// The widest cell's cells.
    width: usize,
}

/// The usage columns some process of `usages` has a figure for, each a
/// cell a process in order ("SM 30%", "SM -").
fn usage_cells(usages: &[ProcessUsage]) -> Vec<UsageColumn> {
    let figures: [(&str, &str, Vec<Option<String>>); 3] = [
        (
            "SM ",
            "%",
            usages
                .iter()
                .map(|u| u.sm_percent.map(|v| v.to_string()))
                .collect(),
        ),
        (
            "CPU ",
            "%",
            usages
                .iter()
                .map(|u| u.cpu_percent.map(format::cpu_percent))
                .collect(),
        ),
        (
            "host ",
            "",
            usages
                .iter()
                .map(|u| u.host_memory.map(format::bytes))
                .collect(),
        ),
    ];
    figures
        .into_iter()
        .filter(|(.., column)| column.iter().any(Option::is_some))
        .map(|(label, unit, column)| {
            let texts: Vec<String> = column
                .into_iter()
                .map(|figure| match figure {
                    Some(v) => format!("{label}{v}{unit}"),
                    None => format!("{label}{}", format::NOT_MEASURED),
                })
                .collect();
            let width = texts.iter().map(|t| cells(t)).max().unwrap_or(0);
            UsageColumn {
                cells: texts,
                width,
            }
        })
        .collect()
}

/// The widest user name a process line shows (cells; longer ones are cut).
const USER_CELLS: usize = 12;

/// What a process line of [`process_rows`] shows.
pub(super) struct ProcessRow<'a> {
    pub pid: u32,
    pub user: Option<&'a str>,
    pub command: Option<&'a str>,
    pub used_memory: Option<u64>,
    /// 0 for a line of its own, 1 for a child drawn under its parent, …
    pub depth: usize,
    /// A child of another GPU process holding a CUDA context of its own
    /// (a whole context wasted): marked as the Processes pane marks it.
    pub own_context: bool,
}

/// "0 OOMs", "1 OOM", or "OOMs n/a" where the source could not say.
fn ooms(a: &AllocatorSummary) -> String {
    match a.num_ooms.and_then(|n| u64::try_from(n).ok()) {
        Some(n) => format::count(n, "OOM", "OOMs"),
        None => format!("OOMs {NA}"),
    }
}

/// "allocated 446 MiB, reserved 540 MiB, fragmentation 79% (largest free
/// block 20.0 MiB), 0 OOMs", after whose figures they are with `whose`
/// (the JSON's `source`: "pid 4242 (simulated training, step 3)").
fn allocator_figures(a: &AllocatorSummary, whose: bool) -> String {
    let known = |key: &str| !a.unknown.iter().any(|u| u == key);
    let allocated = if known("allocated_bytes.all.current") {
        format::bytes(a.allocated)
    } else {
        NA.to_string()
    };
    let reserved = if known("reserved_bytes.all.current") {
        format::bytes(a.reserved)
    } else {
        NA.to_string()
    };
    let mut figures = format!(
        "allocated {allocated}, reserved {reserved}, {}, {}",
        segment_figures(a),
        ooms(a),
    );
    // The figures above are one sample; PyTorch's peak may be far above.
    if let Some(peak) = &a.torch_peak {
        figures.push_str(&format!("; {}", format::own_peak(peak)));
    }
    if whose {
        format!("{}: {figures}", a.source)
    } else {
        figures
    }
}

/// "fragmentation 79% (largest free block 20.0 MiB)", with the segments'
/// age where the dashboard's Fragmentation pane says it ("…; segments 4 s
/// old"), or its note where no segments have come.
fn segment_figures(a: &AllocatorSummary) -> String {
    if !a.segments_received {
        return format!("fragmentation {NA} ({})", crate::ui::SEGMENTS_NOT_YET);
    }
    let age = match a.segments_age_s {
        // As new as the stats: the pane says nothing.
        Some(s) if s <= 0.0 => String::new(),
        age => format!("; {}", crate::ui::segments_age_words(age)),
    };
    format!(
        "fragmentation {} (largest free block {}{age})",
        format::percent(a.fragmentation.fragmentation),
        format::bytes(a.fragmentation.largest_free_block),
    )
}

/// A probe as `--once` and `doctor` name it: "pid 2199, attached,
/// train.py --lr 3e-4" and its problem, if any. One wording for one fact
/// wherever vramtop lists its probes.
pub(crate) fn probe_head(p: &HeadlessProbe) -> String {
    let pid = p.pid.map_or_else(|| NA.to_string(), |p| p.to_string());
    let command = p.command.as_deref().unwrap_or(NA);
    let mut head = format!("pid {pid}, {}, {command}", p.status);
    if let Some(problem) = &p.problem {
        head.push_str(&format!("; {problem}"));
    }
    head
}

/// Where a probe's CUDA device is, as `--once` and `doctor` name it: "GPU
/// 0", or "CUDA device 1" where it maps to no GPU vramtop lists.
pub(crate) fn probe_device_name(d: &crate::app::source::HeadlessProbeDevice) -> String {
    match d.gpu {
        Some(g) => format!("GPU {g}"),
        None => format!("CUDA device {}", d.device),
    }
}

fn probe_text(out: &mut String, p: &HeadlessProbe) {
    line(out, &wrap_under("probe: ", &probe_head(p), REPORT_WIDTH));
    for d in &p.devices {
        let lead = format!("  {}: ", probe_device_name(d));
        let text = match (&d.invalid, &d.allocator) {
            (Some(why), _) => format!("figures not shown: {why}"),
            (None, Some(a)) => allocator_figures(a, false),
            (None, None) => format!("allocator {NA} (no figures yet)"),
        };
        line(out, &wrap_under(&lead, &text, REPORT_WIDTH));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::source::{HeadlessOom, HeadlessProbeDevice};
    use crate::device::{GpuProcess, GpuSample, MigInfo};
    use crate::probe::pid::VisibleDevices;

    fn sample(gpus: Vec<HeadlessGpu>) -> HeadlessSample {
        HeadlessSample {
            time_unix_ms: 0,
            backend: "nvml".to_string(),
            banner: None,
            gpus,
            probes: Vec::new(),
            probes_skipped: Vec::new(),
            ooms: Vec::new(),
            not_started: Vec::new(),
            not_started_note: None,
        }
    }

    fn gpu(s: GpuSample) -> HeadlessGpu {
        HeadlessGpu::bare(GpuReading::Ok(s))
    }

    fn process(pid: u32, used: Option<u64>, command: &str) -> GpuProcess {
        GpuProcess {
            command: Some(command.to_string()),
            ..GpuProcess::new(pid, used)
        }
    }

    fn allocator(allocated: u64, reserved: u64) -> AllocatorSummary {
        AllocatorSummary {
            source: "probe".to_string(),
            pid: Some(77),
            allocated,
            reserved,
            active: 0,
            inactive_split_bytes: 0,
            segments: 1,
            num_alloc_retries: None,
            num_ooms: None,
            fragmentation: crate::alloc::fragmentation(&[]),
            segments_age_s: Some(0.0),
            segments_received: true,
            unknown: Vec::new(),
            torch_peak: None,
        }
    }

    fn assert_fits(text: &str) {
        for l in text.lines() {
            assert!(cells(l) <= REPORT_WIDTH, "{} cells: {l}", cells(l));
        }
    }

    #[test]
    fn figures_a_gpu_does_not_report_read_na_never_zero() {
        let text = render(&sample(vec![gpu(GpuSample::unknown(0, "Tesla T4"))]));
        assert!(text.contains("GPU 0  Tesla T4\n"), "{text}");
        assert!(
            text.contains("memory n/a (n/a), util n/a, temp n/a, power n/a"),
            "{text}"
        );
        // An unknown process list is n/a too, not an idle GPU.
        assert!(
            text.contains("  processes: n/a (not supported by the driver)\n"),
            "{text}"
        );
        assert!(!text.contains("no processes"), "{text}");
        assert!(text.contains("allocator: n/a"), "{text}");
        assert!(!text.contains(" 0 B"), "{text}");
    }

    #[test]
    fn segments_older_than_the_stats_are_said_as_the_fragmentation_pane_says_them() {
        let said = |age: Option<f64>, received: bool| {
            let mut a = allocator(1 << 20, 2 << 20);
            a.segments_age_s = age;
            a.segments_received = received;
            let mut g = gpu(GpuSample::unknown(0, "Tesla T4"));
            g.allocator = Some(a);
            let text = render(&sample(vec![g]));
            assert_fits(&text);
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        let text = said(Some(4.9), true);
        assert!(
            text.contains("fragmentation 0% (largest free block 0 B; segments 4 s old), OOMs"),
            "{text}"
        );
        let text = said(Some(0.3), true);
        assert!(
            text.contains("(largest free block 0 B; segments <1 s old)"),
            "{text}"
        );
        let text = said(None, true);
        assert!(
            text.contains("(largest free block 0 B; stale segments)"),
            "{text}"
        );
        let text = said(Some(0.0), true);
        assert!(text.contains("(largest free block 0 B), OOMs"), "{text}");
        let text = said(None, false);
        assert!(
            text.contains(
                "fragmentation n/a (segments not received yet: the probe sends them every few \
                 seconds), OOMs"
            ),
            "{text}"
        );
    }

    #[test]
    fn known_figures_use_the_dashboards_units_and_rounding() {
        let mut s = GpuSample::unknown(1, "NVIDIA H100 80GB HBM3");
        s.memory_total = Some(80 << 30);
        s.memory_used = Some(20 << 30);
        s.gpu_utilization = Some(87);
        s.temperature_c = Some(65);
        s.power_draw_mw = Some(250_400);
        s.power_limit_mw = Some(700_000);
        s.processes = Some(vec![
            process(4242, Some(3 << 29), "python train.py"),
            process(17, None, "python eval.py"),
        ]);
        let mut g = gpu(s);
        g.allocator = Some(allocator(396 << 20, 560 << 20));
        let text = render(&sample(vec![g]));
        assert!(
            text.contains("memory 20.0/80.0 GiB (25%), util 87%, temp 65°C, power 250/700 W"),
            "{text}"
        );
        assert!(text.contains("  2 processes:\n"), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("    pid ")).collect();
        assert_eq!(rows.len(), 2, "{text}");
        // The memory column is right-aligned at the report's edge.
        assert!(rows[0].ends_with("  1.50 GiB"), "{text}");
        assert!(rows[1].ends_with("       n/a"), "{text}");
        assert_eq!(cells(rows[0]), REPORT_WIDTH, "{text}");
        assert_eq!(cells(rows[1]), REPORT_WIDTH, "{text}");
        assert!(
            rows[1].starts_with("    pid 17    python eval.py"),
            "{text}"
        );
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "allocator: probe: allocated 396 MiB, reserved 560 MiB, fragmentation 0% \
                 (largest free block 0 B)"
            ),
            "{text}"
        );
        assert_fits(&text);
    }

    #[test]
    fn free_is_said_as_the_driver_says_it_where_the_driver_keeps_some_for_itself() {
        let mut s = GpuSample::unknown(0, "NVIDIA H200");
        s.memory_total = Some(141 << 30);
        s.memory_used = Some(20 << 30);
        // NVML v2: total = used + free + 512 MiB the driver keeps.
        s.memory_free = Some((121 << 30) - (512 << 20));
        let text = render(&sample(vec![gpu(s.clone())]));
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "memory 20.0/141.0 GiB (14%), free 120 GiB (512 MiB kept by the driver), util n/a"
            ),
            "{text}"
        );
        assert_fits(&text);
        // Free as used leaves it: nothing more to say.
        s.memory_free = Some(121 << 30);
        let text = render(&sample(vec![gpu(s)]));
        assert!(
            text.contains("memory 20.0/141.0 GiB (14%), util n/a"),
            "{text}"
        );
    }

    #[test]
    fn a_probes_own_peak_follows_its_sampled_figures_saying_since_when() {
        let mut s = GpuSample::unknown(0, "NVIDIA H100 80GB HBM3");
        s.memory_total = Some(80 << 30);
        s.memory_used = Some(1 << 30);
        let mut g = gpu(s);
        let mut a = allocator(20 << 20, 40 << 20);
        a.torch_peak = Some(crate::app::state::OwnPeak {
            allocated: Some(216 << 20),
            reserved: None,
            since: crate::app::state::OWN_PEAK_SINCE.to_string(),
        });
        g.allocator = Some(a);
        let text = render(&sample(vec![g]));
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "OOMs n/a; PyTorch's own peak: allocated 216 MiB, reserved n/a (since the \
                 process started or its last reset_peak_memory_stats())"
            ),
            "{text}"
        );
        assert_fits(&text);
    }

    #[test]
    fn a_worker_whose_parent_is_a_gpu_process_too_is_marked_with_its_own_context() {
        // The parent on GPU 0, a DataLoader worker that touched CUDA on
        // GPU 1, and a process whose parent holds no GPU memory.
        let mut parent = GpuSample::unknown(0, "NVIDIA H100 80GB HBM3");
        parent.processes = Some(vec![process(4242, Some(30 << 30), "python train.py")]);
        let mut worker = process(4300, Some(500 << 20), "python train.py");
        worker.parent_pid = Some(4242);
        let mut alone = process(7001, Some(1 << 30), "python eval.py");
        alone.parent_pid = Some(7000);
        let mut second = GpuSample::unknown(1, "NVIDIA H100 80GB HBM3");
        second.processes = Some(vec![worker, alone]);
        let text = render(&sample(vec![gpu(parent), gpu(second)]));
        let row = |pid: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(&format!("pid {pid} ")))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            row("4300").contains("own CUDA context! python train.py"),
            "{text}"
        );
        assert!(!row("4242").contains("own CUDA context"), "{text}");
        assert!(!row("7001").contains("own CUDA context"), "{text}");
        assert_fits(&text);
    }

    #[test]
    fn usage_figures_some_process_has_stand_before_the_memory_and_dashes_for_the_rest() {
        let mut s = GpuSample::unknown(0, "NVIDIA H100 80GB HBM3");
        let mut busy = process(4242, Some(3 << 29), "python train.py");
        busy.usage = ProcessUsage {
            sm_percent: Some(87),
            cpu_percent: None,
            host_memory: Some(3 << 29),
        };
        let mut idle = process(17, Some(1 << 30), "python eval.py");
        idle.usage.sm_percent = Some(0);
        s.processes = Some(vec![busy, idle, process(9, None, "sleep 30")]);
        let text = render(&sample(vec![gpu(s)]));
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("    pid ")).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].ends_with("  SM 87%  host 1.50 GiB  1.50 GiB"),
            "{text}"
        );
        assert!(
            rows[1].ends_with("  SM 0%   host -         1.00 GiB"),
            "{text}"
        );
        assert!(
            rows[2].ends_with("  SM -    host -              n/a"),
            "{text}"
        );
        assert!(!text.contains("CPU"), "no process has a CPU figure: {text}");
        for row in &rows {
            assert_eq!(cells(row), REPORT_WIDTH, "{text}");
        }
        assert_fits(&text);
    }

    #[test]
    fn every_allocator_of_a_gpu_is_listed_with_its_ooms_the_shown_one_first() {
        let mut first = allocator(1 << 30, 2 << 30);
        first.source = "pid 4242 (simulated training, step 0)".to_string();
        first.num_ooms = Some(3);
        let mut second = allocator(0, 0);
        second.source = "pid 4243 (simulated training, step 0)".to_string();
        second.num_ooms = Some(1);
        let mut g = gpu(GpuSample::unknown(0, "Simulated GPU 1GB"));
        g.allocator = Some(first.clone());
        g.allocators = vec![first, second];
        let text = render(&sample(vec![g]));
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains("\n  2 allocators (the dashboard's v switches):\n  - pid 4242 "),
            "{text}"
        );
        assert!(
            flat.contains("pid 4242 (simulated training, step 0): allocated 1.00 GiB, reserved 2.00 GiB, fragmentation 0% (largest free block 0 B), 3 OOMs"),
            "{text}"
        );
        assert!(
            flat.contains("pid 4243 (simulated training, step 0): allocated 0 B, reserved 0 B, fragmentation 0% (largest free block 0 B), 1 OOM"),
            "{text}"
        );
        assert!(!text.contains("allocator: "), "one heading: {text}");
        assert_fits(&text);
    }

    #[test]
    fn an_allocators_oom_count_is_said_na_when_its_source_cannot_say() {
        let mut a = allocator(0, 1 << 30);
        a.num_ooms = Some(0);
        let mut g = gpu(GpuSample::unknown(0, "x"));
        g.allocator = Some(a.clone());
        let text = render(&sample(vec![g.clone()]));
        assert!(text.contains("(largest free block 0 B), 0 OOMs"), "{text}");
        a.num_ooms = None;
        g.allocator = Some(a);
        let text = render(&sample(vec![g]));
        assert!(
            text.contains("(largest free block 0 B), OOMs n/a"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_allocator_total_reads_na() {
        let mut a = allocator(0, 1 << 30);
        a.unknown = vec!["allocated_bytes.all.current".to_string()];
        let mut g = gpu(GpuSample::unknown(0, "x"));
        g.allocator = Some(a);
        let text = render(&sample(vec![g]));
        assert!(text.contains("allocated n/a, reserved 1.00 GiB"), "{text}");
    }

    #[test]
    fn a_cut_simulated_command_keeps_its_simulated_mark() {
        let mut out = String::new();
        process_rows(
            &mut out,
            [ProcessRow {
                pid: 4242,
                user: Some("sim"),
                command: Some("python train.py --model gpt-1.3b --batch 8 --epochs 30 (simulated)"),
                used_memory: Some(1 << 30),
                depth: 0,
                own_context: false,
            }]
            .into_iter(),
        );
        let row = out.lines().next().unwrap_or_default();
        // Cut at the end it read "(simula…", like a real process's.
        assert!(row.contains("… (simulated)  "), "{row}");
        assert!(cells(row) <= REPORT_WIDTH, "{row}");
        // A real command is cut at its end, as before.
        assert_eq!(
            elide_keeping_simulated("python serve.py (port 8080)", 20),
            "python serve.py (po…"
        );
    }

    #[test]
    fn long_names_commands_banners_and_messages_stay_in_80_cells() {
        let mut s = GpuSample::unknown(0, "训练".repeat(60));
        s.processes = Some(vec![process(
            1,
            Some(1 << 20),
            &"python -m torch.x ".repeat(20),
        )]);
        let mut mig = GpuSample::unknown(7, "A100 MIG 1g.10gb");
        mig.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(1),
            compute_instance_id: Some(0),
        });
        let mut out = sample(vec![
            gpu(s),
            gpu(mig),
            HeadlessGpu {
                reading: GpuReading::Lost {
                    index: 3,
                    reason: "fell off the bus ".repeat(10),
                    cause: crate::device::Unanswered::Lost,
                },
                allocator: None,
                allocators: Vec::new(),
                breakdown: None,
                unattributed: None,
                mig_index: None,
            },
        ]);
        out.banner = Some("showing 1 simulated GPU: NVML is not available ".repeat(4));
        out.ooms = vec![HeadlessOom {
            gpu: Some(0),
            device: 0,
            pid: Some(9),
            seq: 1,
            alloc_bytes: None,
            time: None,
            message: "CUDA out of memory. Tried to allocate ".repeat(5),
            snapshot: None,
            snapshot_error: None,
        }];
        out.probes = vec![HeadlessProbe {
            socket: "/run/user/1/vramtop/9.sock".to_string(),
            pid: Some(9),
            probe_pid: Some(9),
            pid_source: None,
            status: "connected".to_string(),
            problem: None,
            command: Some("python train.py ".repeat(8)),
            host: None,
            torch: None,
            visible_devices: VisibleDevices::All,
            devices: vec![
                HeadlessProbeDevice {
                    device: 0,
                    gpu: Some(0),
                    allocator: Some(allocator(1 << 30, 2 << 30)),
                    invalid: None,
                },
                HeadlessProbeDevice {
                    device: 1,
                    gpu: None,
                    allocator: None,
                    invalid: Some("allocated exceeds reserved".to_string()),
                },
            ],
            oom_total: 1,
            ooms: Vec::new(),
        }];
        out.probes_skipped = vec!["/tmp/x: not ours".to_string()];
        let text = render(&out);
        assert_fits(&text);
        assert!(text.contains("…"), "the long name is cut: {text}");
        assert!(
            text.contains("\n  GPU 0 MIG 7  A100 MIG 1g.10gb\n"),
            "{text}"
        );
        assert!(text.contains("GPU 3  lost: fell off the bus"), "{text}");
        assert!(text.contains("probe: pid 9, connected, python"), "{text}");
        assert!(
            text.contains("  GPU 0: allocated 1.00 GiB, reserved 2.00 GiB"),
            "{text}"
        );
        assert!(
            text.contains("  CUDA device 1: figures not shown: allocated exceeds reserved"),
            "{text}"
        );
        assert!(
            text.contains("OOM: pid 9 on GPU 0: CUDA out of memory."),
            "{text}"
        );
        assert!(
            text.contains("note: 1 probe socket or folder not read"),
            "{text}"
        );
    }

    #[test]
    fn no_gpu_is_said_not_left_blank() {
        let text = render(&sample(Vec::new()));
        assert_eq!(text, "backend: nvml\nno GPU: the backend lists none\n");
    }
}
