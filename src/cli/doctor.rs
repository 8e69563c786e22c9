//! `vramtop doctor [--json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use serde::Serialize;

use super::DeviceArgs;
use super::text::{REPORT_WIDTH, wrap_phrases_under, wrap_under};
use crate::alloc::human_bytes;
use crate::app::source::resolve_probe_devices;
use crate::app::source::{HeadlessProbe, account_probes_in_simulation, headless_probes};
use crate::device::doctor::{DoctorReport, diagnose_with};
use crate::device::procfs::MappedLibrary;
use crate::probe::{ProbeSnapshot, Registry, discovery};

/// How long doctor waits for the probes it finds to send their first
/// figures: as `--once` does, so that its memory figures are `--once`'s.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(1_500);

/// The report with the probes: what `doctor --json` prints.
#[derive(Debug, Serialize)]
pub struct DoctorWithProbes {
    #[serde(flatten)]
    pub report: DoctorReport,
    /// The folders looked in for probe sockets.
    pub probe_dirs: Vec<String>,
    /// Where [`Self::probe_dirs`] came from: `default` or
    /// `VRAMTOP_PROBE_DIR`.
    pub probe_dirs_source: &'static str,
    /// [`Self::probe_dirs`] in words for the text report.
    #[serde(skip)]
    pub probe_dirs_text: String,
    /// The probes found, as `--once --json` lists them.
    pub probes: Vec<HeadlessProbe>,
    /// Probe folders and sockets not read, and why.
    pub probes_skipped: Vec<String>,
}

/// `config_read`: the config file found (named or the default one), if
/// any; `config_error`: why its values were not applied, if they were not.
pub fn run(
    args: &DeviceArgs,
    config_read: Option<&Path>,
    config_error: Option<String>,
    json: bool,
) -> color_eyre::Result<ExitCode> {
    // Probes are found while the backend starts, as for `--once`.
    let uid = discovery::current_uid();
    let dirs = discovery::probe_dirs(uid);
    let registry = Registry::start_in(dirs.clone(), uid);
    let mut probes = ProbeSnapshot::default();
    // The probes' memory counted in the readings as `--once` counts it (a
    // probed process on the simulated GPU holds its reserved bytes and a
    // context there); their pids are real processes.
    let mut observe = |readings: &mut Vec<crate::device::GpuReading>,
                       sim: Option<&crate::device::sim::SimCluster>| {
        registry.wait_ready(PROBE_WAIT);
        probes = registry.snapshot();
        resolve_probe_devices(&mut probes, readings);
        if let Some(sim) = sim {
            account_probes_in_simulation(readings, &probes, sim.context_overhead());
        }
        probes
            .probes
            .iter()
            .filter(|p| p.status.is_connected() && p.pid_is_this_machines())
            .filter_map(|p| p.pid())
            .collect()
    };
    let mut report = diagnose_with(args.backend, &args.sim_config(), &mut observe);
    report.config_file = config_read.map(|p| p.display().to_string());
    report.config_error = config_read.and(config_error);
    let report = DoctorWithProbes {
        report,
        probe_dirs: dirs.dirs.iter().map(|d| d.display().to_string()).collect(),
        probe_dirs_source: dirs.source(),
        probe_dirs_text: dirs.describe(),
        probes: headless_probes(&probes),
        probes_skipped: probes
            .skipped
            .iter()
            .map(|(path, why)| format!("{}: {why}", path.display()))
            .collect(),
    };
    if json {
        let text = serde_json::to_string_pretty(&report).wrap_err("cannot encode the report")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
    } else {
        super::emit(&render(&report)).wrap_err("cannot write the output")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".to_string(), human_bytes)
}

/// `label` in a 12-cell column, then `text` wrapped under its start
/// within 80 columns.
fn field(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(
        out,
        "{}",
        wrap_under(&format!("{label:<12}"), text, REPORT_WIDTH)
    );
}

/// The human-readable report, every line in 80 columns: a long value
/// wraps under its start, a config file's path breaks at its folders
/// with its file name whole.
pub fn render(all: &DoctorWithProbes) -> String {
    let r = &all.report;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        wrap_under(
            "vramtop ",
            &format!("{} ({})", r.vramtop_version, r.platform),
            REPORT_WIDTH
        )
    );
    match &r.nvml {
        Ok(info) => {
            let cuda = info.cuda_driver_version.map_or("n/a".to_string(), |v| {
                format!("{}.{}", v / 1000, (v % 1000) / 10)
            });
            let text = format!(
                "ok: driver {}, NVML {}, supports CUDA {cuda}",
                info.driver_version.as_deref().unwrap_or("n/a"),
                info.nvml_version.as_deref().unwrap_or("n/a"),
            );
            field(&mut out, "NVML", &text);
        }
        Err(why) => field(&mut out, "NVML", why),
    }
    field(&mut out, "CUDA", &r.cuda_summary);
    let nvrtc = r.cuda.nvrtc.as_ref().map_or_else(
        || "not found (kernels load from the shipped PTX)".to_string(),
        |n| format!("{}.{}", n.version.0, n.version.1),
    );
    field(&mut out, "NVRTC", &nvrtc);
    match r.config_file.as_deref() {
        None => field(
            &mut out,
            "Config",
            "none read (no --config, and no default config file)",
        ),
        // The path a phrase of its own: it starts the text and, too long
        // for a line, breaks after a `/`, never inside its file name.
        Some(path) => {
            // Why it was not used wraps as words: it can be long.
            let (head, why) = match &r.config_error {
                None => (path.to_string(), None),
                Some(why) => (format!("{path}:"), Some(format!("not used ({why})"))),
            };
            let mut phrases = vec![head.as_str()];
            match &why {
                None => phrases.push("(its values apply where no option is given)"),
                Some(why) => phrases.extend(why.split(' ')),
            }
            let _ = writeln!(
                out,
                "{}",
                wrap_phrases_under(&format!("{:<12}", "Config"), phrases, REPORT_WIDTH)
            );
        }
    }
    field(
        &mut out,
        "Backend",
        &format!("{} ({})", r.backend, r.backend_reason),
    );
    if r.gpus.is_empty() {
        field(&mut out, "GPUs", "none");
    }
    for g in &r.gpus {
        let label = format!("GPU {}", g.index);
        match &g.lost {
            Some(why) => field(&mut out, &label, why),
            None => field(
                &mut out,
                &label,
                &format!(
                    "{}: {} used of {} (as nvidia-smi and --once count it)",
                    g.name,
                    opt_bytes(g.memory_used),
                    opt_bytes(g.memory_total)
                ),
            ),
        }
    }
    for p in &r.processes {
        let libs = match &p.libraries {
            None if p.simulated => "simulated: no real process, libraries not checked".to_string(),
            None => match &p.unreadable {
                Some(why) => format!("libraries not readable: {}", why.describe()),
                None => "libraries not readable".to_string(),
            },
            Some(l) if l.is_empty() => "no CUDA libraries mapped".to_string(),
            // The files as the process maps them: their names say the
            // library and its version (libcudart.so.12, libnvidia-ml.so.1).
            Some(l) => format!(
                "loads {}",
                l.iter()
                    .map(MappedLibrary::file_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        // Under the GPUs, 2 cells in; the command line and the libraries
        // wrap under the command's start.
        let lead = format!("  pid {} on GPU {} ", p.pid, p.gpu);
        let command = format!("({}):", p.command.as_deref().unwrap_or("?"));
        let _ = writeln!(
            out,
            "{}",
            wrap_phrases_under(&lead, [command.as_str(), &libs], REPORT_WIDTH)
        );
    }
    probes_section(&mut out, all);
    if let Some(note) = &r.not_started_note {
        // Simulated processes the flags asked for that found no room:
        // not among the processes above, as nvidia-smi would not list them.
        field(&mut out, "Note", note);
    }
    if r.advice.is_empty() {
        field(
            &mut out,
            "Advice",
            "none: everything vramtop uses was found",
        );
    } else {
        let _ = writeln!(out, "Advice");
        for a in &r.advice {
            let _ = writeln!(out, "{}", wrap_under("  - ", a, REPORT_WIDTH));
        }
    }
    out
}

/// The probes doctor found: each with its status, pid and GPUs, then the
/// folders and sockets it skipped and why; none found, where it looked and
/// how to attach one.
fn probes_section(out: &mut String, all: &DoctorWithProbes) {
    if all.probes.is_empty() && all.probes_skipped.is_empty() {
        let text = format!(
            "none found (looked in {}); attach a training run with python -m vramtop_probe \
             train.py … (docs/attach.md)",
            all.probe_dirs_text
        );
        field(out, "Probes", &text);
        return;
    }
    let _ = writeln!(out, "Probes");
    for p in &all.probes {
        // The probe and its devices in `--once`'s words; doctor adds the
        // CUDA index of a mapped device (what the run calls it) and the
        // socket.
        let gpus: Vec<String> = p
            .devices
            .iter()
            .map(|d| {
                let name = super::sample_text::probe_device_name(d);
                match d.gpu {
                    Some(_) => format!("{name} (cuda:{})", d.device),
                    None => format!("{name} (on no GPU: CUDA_VISIBLE_DEVICES not mapped)"),
                }
            })
            .collect();
        let mut text = format!(
            "{}: {}",
            super::sample_text::probe_head(p),
            if gpus.is_empty() {
                "no devices yet".to_string()
            } else {
                gpus.join(", ")
            }
        );
        text.push_str(&format!("; socket {}", p.socket));
        let _ = writeln!(out, "{}", wrap_under("  - ", &text, REPORT_WIDTH));
    }
    for skipped in &all.probes_skipped {
        // "not read", as `--once`'s note says of the same sockets.
        let _ = writeln!(
            out,
            "{}",
            wrap_under("  - not read: ", skipped, REPORT_WIDTH)
        );
    }
    // Where they were looked for, as "none found" says it: a folder
    // `VRAMTOP_PROBE_DIR` names hides the default ones' probes.
    let _ = writeln!(
        out,
        "{}",
        wrap_under("  looked in ", &all.probe_dirs_text, REPORT_WIDTH)
    );
}
