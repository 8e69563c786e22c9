//! Helpers shared by the integration tests. Each test binary compiles this
//! module on its own and uses only part of it, hence the allowance below.
#![allow(dead_code)]

pub mod fake_nvml;

use std::path::Path;
use std::process::Command;

/// Runs the vramtop binary with `args` (and `LD_LIBRARY_PATH` when given);
/// returns (exit code, stdout, stderr).
pub fn run_vramtop(args: &[&str], ld_library_path: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramtop"));
    cmd.args(args);
    if let Some(dir) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let out = cmd.output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
