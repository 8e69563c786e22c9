//! `vramtop doctor [--json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::DeviceArgs;
use super::text::{REPORT_WIDTH, wrap_phrases_under, wrap_under};
use crate::alloc::human_bytes;
use crate::device::doctor::{DoctorReport, diagnose};
use crate::device::procfs::MappedLibrary;

/// `config_read`: the config file found (named or the default one), if
/// any; `config_error`: why its values were not applied, if they were not.
pub fn run(
    args: &DeviceArgs,
    config_read: Option<&Path>,
    config_error: Option<String>,
    json: bool,
) -> color_eyre::Result<ExitCode> {
    let mut report = diagnose(args.backend, &args.sim_config());
    report.config_file = config_read.map(|p| p.display().to_string());
    report.config_error = config_read.and(config_error);
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
pub fn render(r: &DoctorReport) -> String {
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
            Some(why) => field(&mut out, &label, &format!("lost: {why}")),
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
