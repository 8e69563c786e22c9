//! Tests that cannot run here say so, once, where people look.
//!
//! A test that lacks a prerequisite calls [`skip`] and returns. The note goes
//! to stderr and to `skipped-tests.txt` in cargo's test temp folder, which
//! `.ci/run` prints as one summary after `cargo test`. A prerequisite that
//! `.ci/run` installs (pytest, a C compiler, NVRTC, ptxas, tmux, the shared
//! snapshots) is not optional under `CI=true`: there the same call fails the
//! test, so CI cannot pass with a check silently missing.

use std::io::Write as _;
use std::path::PathBuf;

/// Whether `.ci/run` provides the missing prerequisite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prerequisite {
    /// `.ci/run` installs or lays it out: its absence under CI is a failure.
    ProvidedByCi,
    /// Only some machines have it (a real GPU, a driver that must be absent).
    OnlySomeMachines,
}

/// The file `.ci/run` prints after the tests.
pub fn skip_log() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests.txt")
}

/// Records that `test` did not run because of `why`; under `CI=true` a
/// prerequisite `.ci/run` provides fails the test instead.
pub fn skip(test: &str, why: &str, prerequisite: Prerequisite) {
    let under_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    assert!(
        !(under_ci && prerequisite == Prerequisite::ProvidedByCi),
        "CI is set but {test} cannot run: {why} (.ci/run should have provided it)"
    );
    let line = format!("{test}: {why}");
    eprintln!("skipped {line}");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skip_log())
    {
        // One write per line: lines of tests running in parallel do not mix.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}
