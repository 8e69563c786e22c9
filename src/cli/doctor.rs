//! `vramtop doctor [--json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::DeviceArgs;
use crate::alloc::human_bytes;
use crate::device::doctor::{DoctorReport, diagnose};

/// `config_read`: the config file whose values were applied, if any.
pub fn run(
    args: &DeviceArgs,
    config_read: Option<&Path>,
    json: bool,
) -> color_eyre::Result<ExitCode> {
    let mut report = diagnose(args.backend, &args.sim_config());
    report.config_file = config_read.map(|p| p.display().to_string());
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

/// The human-readable report.
pub fn render(r: &DoctorReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "vramtop {} ({})", r.vramtop_version, r.platform);
    match &r.nvml {
        Ok(info) => {
            let cuda = info.cuda_driver_version.map_or("n/a".to_string(), |v| {
                format!("{}.{}", v / 1000, (v % 1000) / 10)
            });
            let _ = writeln!(
                out,
                "NVML        ok: driver {}, NVML {}, supports CUDA {cuda}",
                info.driver_version.as_deref().unwrap_or("n/a"),
                info.nvml_version.as_deref().unwrap_or("n/a"),
            );
        }
        Err(why) => {
            let _ = writeln!(out, "NVML        {why}");
        }
    }
    let _ = writeln!(out, "CUDA        {}", r.cuda_summary);
    let nvrtc = r.cuda.nvrtc.as_ref().map_or_else(
        || "not found (kernels load from the shipped PTX)".to_string(),
        |n| format!("{}.{}", n.version.0, n.version.1),
    );
    let _ = writeln!(out, "NVRTC       {nvrtc}");
    let _ = writeln!(
        out,
        "Config      {}",
        r.config_file.as_deref().map_or_else(
            || "none read (no --config, and no default config file)".to_string(),
            |p| format!("{p} (its values apply where no option is given)")
        )
    );
    let _ = writeln!(out, "Backend     {} ({})", r.backend, r.backend_reason);
    if r.gpus.is_empty() {
        let _ = writeln!(out, "GPUs        none");
    }
    for g in &r.gpus {
        match &g.lost {
            Some(why) => {
                let _ = writeln!(out, "GPU {}       lost: {why}", g.index);
            }
            None => {
                let _ = writeln!(
                    out,
                    "GPU {}       {}: {} used of {} (as nvidia-smi and --once count it)",
                    g.index,
                    g.name,
                    opt_bytes(g.memory_used),
                    opt_bytes(g.memory_total)
                );
            }
        }
    }
    for p in &r.processes {
        let libs = match &p.libraries {
            None if p.simulated => "simulated: no real process, libraries not checked".to_string(),
            None => "libraries not readable (another user's process)".to_string(),
            Some(l) if l.is_empty() => "no CUDA libraries mapped".to_string(),
            Some(l) => l
                .iter()
                .map(|m| format!("{} {}", m.kind.label(), m.version.as_deref().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let _ = writeln!(
            out,
            "  pid {} on GPU {} ({}): {libs}",
            p.pid,
            p.gpu,
            p.command.as_deref().unwrap_or("?")
        );
    }
    if r.advice.is_empty() {
        let _ = writeln!(out, "Advice      none: everything vramtop uses was found");
    } else {
        let _ = writeln!(out, "Advice");
        for a in &r.advice {
            let _ = writeln!(out, "  - {a}");
        }
    }
    out
}
