//! Runs the Python probe's pytest suite (`python/tests`) so that the README's single test
//! command, `cargo test --locked`, covers the Python side too.
//!
//! The interpreter is `$VRAMTOP_PYTHON` (`.ci/run` points it at a venv with pytest), else
//! `python3`. Without a Python that has pytest the test skips with a note, except when `CI` is
//! set: then it fails, so CI cannot pass with the Python suite silently missing.

mod common;

use std::path::Path;

use common::skip::{Prerequisite, skip};
use std::process::Command;

/// Why the suite cannot run here: skip with a note locally, fail under CI.
fn unavailable(why: &str) {
    skip(
        "the Python probe's pytest suite",
        &format!("{why} (set VRAMTOP_PYTHON to a Python with pytest)"),
        Prerequisite::ProvidedByCi,
    );
}

#[test]
fn python_probe_pytest_suite_passes() {
    let python = std::env::var("VRAMTOP_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    let has_pytest = Command::new(&python).args(["-c", "import pytest"]).output();
    match has_pytest {
        Err(err) => return unavailable(&format!("{python} could not be run: {err}")),
        Ok(out) if !out.status.success() => {
            return unavailable(&format!("{python} cannot import pytest"));
        }
        Ok(_) => {}
    }

    let out = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tests",
        ])
        .current_dir(root)
        // The suite puts python/ and the stand-in torch on sys.path itself.
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|err| panic!("{python} -m pytest could not be run: {err}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "pytest failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(" passed"),
        "pytest ran no tests:\n{stdout}\n{stderr}"
    );
}
