//! Builds `tests/fixtures/fake_nvml.c` into a fake `libnvidia-ml.so.1` and
//! hands out configured copies of it.
//!
//! The C library is compiled once per test binary (and per variant) into
//! `$CARGO_TARGET_TMPDIR/fake-nvml/<pid>/`. Each configuration gets its own
//! copy of the file with a `fake_nvml.conf` beside it: the fake reads that
//! file at init, and a separate file (a separate inode, not a hard link) is
//! loaded by the dynamic linker as a separate library with its own globals.
//! So tests running in parallel threads never share a configuration, and
//! none depends on the process environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which entry points the fake exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Everything vramtop calls.
    Full,
    /// Without the MIG device entry points (max MIG device count, MIG handle
    /// by index, GPU/compute instance ids), like an older driver.
    NoMigHandles,
}

/// The values `fake_nvml.c` reports; keep in step with its header comment.
pub mod expect {
    pub const GIB: u64 = 1 << 30;
    pub const MIB: u64 = 1 << 20;
    pub const NAME: &str = "Fake H200";
    pub const MIG_NAME: &str = "Fake H200 MIG 1g.18gb";
    pub const MEMORY_TOTAL: u64 = 141 * GIB;
    pub const MEMORY_RESERVED: u64 = 512 * MIB;
    pub const POWER_LIMIT_MW: u32 = 700_000;
    pub const SM_CLOCK_MHZ: u32 = 1980;
    pub const MEMORY_CLOCK_MHZ: u32 = 3201;
    pub const DRIVER_VERSION: &str = "570.124.06";
    pub const NVML_VERSION: &str = "12.570.124.06";
    pub const CUDA_DRIVER_VERSION: u32 = 12080;
    pub const MIG_MEMORY_TOTAL: u64 = 17 * GIB;

    pub fn uuid(gpu: u32) -> String {
        format!("GPU-fa4e0000-0000-4000-8000-00000000000{gpu}")
    }
    pub fn mig_uuid(slot: u32) -> String {
        format!("MIG-fa4e0000-0000-4000-8000-0000000001{slot:02}")
    }
    /// Bytes.
    pub fn memory_used(gpu: u32) -> u64 {
        (20 - u64::from(gpu)) * GIB
    }
    /// Bytes.
    pub fn memory_free(gpu: u32) -> u64 {
        MEMORY_TOTAL - MEMORY_RESERVED - memory_used(gpu)
    }
    pub fn gpu_utilization(gpu: u32) -> u32 {
        42 + gpu
    }
    pub fn memory_utilization(gpu: u32) -> u32 {
        17 + gpu
    }
    pub fn temperature_c(gpu: u32) -> u32 {
        51 + gpu
    }
    pub fn power_draw_mw(gpu: u32) -> u32 {
        312_000 + 1000 * gpu
    }
    pub fn fan_percent(gpu: u32) -> u32 {
        35 + gpu
    }
    /// Bytes this test process holds on `gpu` (pid 1's figure is unavailable).
    pub fn own_process_memory(gpu: u32) -> u64 {
        (12 - u64::from(gpu)) * GIB
    }
    /// Percent of `gpu`'s SMs this test process uses (process utilisation).
    pub fn own_process_sm(gpu: u32) -> u32 {
        30 + gpu
    }
    /// Percent of `gpu`'s SMs the other listed pid uses.
    pub fn other_process_sm(gpu: u32) -> u32 {
        5 + gpu
    }
    /// Bytes used on MIG device `slot` of GPU 0.
    pub fn mig_memory_used(slot: u32) -> u64 {
        (1 + u64::from(slot)) * GIB
    }
    /// The GPU instance id of MIG device `slot`.
    pub fn mig_gpu_instance(slot: u32) -> u32 {
        7 + slot
    }
}

/// The fake library built with every entry point, configured by environment
/// variables only (no `fake_nvml.conf` next to it). `None`, with a note on
/// stderr, when no C compiler is available.
pub fn build_fake_nvml() -> Option<PathBuf> {
    build(Variant::Full)
}

/// A private copy of the fake library configured by `settings`
/// (`("FAKE_NVML_GPUS", "2")`, … as in `fake_nvml.c`). `None`, with a note on
/// stderr, when no C compiler is available.
pub fn fake_nvml_with(settings: &[(&str, &str)]) -> Option<PathBuf> {
    fake_nvml_variant_with(Variant::Full, settings)
}

/// Like [`fake_nvml_with`], for a given [`Variant`].
pub fn fake_nvml_variant_with(variant: Variant, settings: &[(&str, &str)]) -> Option<PathBuf> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let base = build(variant)?;
    let dir = work_dir().join(format!("config-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).expect("create a directory for a fake NVML copy");
    let lib = dir.join("libnvidia-ml.so.1");
    std::fs::copy(&base, &lib).expect("copy the fake NVML library");
    let conf: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(dir.join("fake_nvml.conf"), conf).expect("write fake_nvml.conf");
    Some(lib)
}

fn build(variant: Variant) -> Option<PathBuf> {
    static FULL: OnceLock<Option<PathBuf>> = OnceLock::new();
    static NO_MIG_HANDLES: OnceLock<Option<PathBuf>> = OnceLock::new();
    let cell = match variant {
        Variant::Full => &FULL,
        Variant::NoMigHandles => &NO_MIG_HANDLES,
    };
    cell.get_or_init(|| compile(variant)).clone()
}

/// `$CARGO_TARGET_TMPDIR/fake-nvml/<pid>`, created on first use after
/// removing the directories of earlier test processes that have exited.
fn work_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        remove_stale_dirs(&root);
        let dir = root.join(std::process::id().to_string());
        // A directory left by an earlier process that had our pid.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the fake NVML directory");
        dir
    })
    .clone()
}

/// Removes `root/<pid>` directories whose process no longer runs.
fn remove_stale_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn compile(variant: Variant) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_nvml.c");
    let dir = work_dir().join(match variant {
        Variant::Full => "full",
        Variant::NoMigHandles => "no-mig-handles",
    });
    std::fs::create_dir_all(&dir).expect("create the fake NVML build directory");
    let lib = dir.join("libnvidia-ml.so.1");
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(&compiler);
    cmd.args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&lib)
        .arg(&source)
        .arg("-lpthread")
        .arg("-ldl");
    if variant == Variant::NoMigHandles {
        cmd.arg("-DFAKE_NVML_OMIT_MIG_HANDLES");
    }
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            super::skip::skip(
                "a fake-NVML test",
                &format!("no C compiler ({} not found)", compiler.to_string_lossy()),
                super::skip::Prerequisite::ProvidedByCi,
            );
            return None;
        }
        Err(e) => panic!("could not run {}: {e}", compiler.to_string_lossy()),
    };
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(lib)
}
