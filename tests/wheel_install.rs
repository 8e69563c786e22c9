//! The one-install wheel (`pyproject.toml` at the root, maturin's binary
//! bindings) gives a fresh virtual environment both halves: the `vramtop`
//! command on PATH and the `vramtop_probe` package.
//!
//! `.ci/run` builds the wheel and sets `VRAMTOP_WHEEL` to its path (and
//! `VRAMTOP_PYTHON` to a Python with venv). Without `VRAMTOP_WHEEL` the test
//! skips with a note, except under `CI=true`, where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::skip::{Prerequisite, skip};

fn run(program: &Path, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        // Nothing from the checkout may leak in: what runs must come from the venv.
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|err| panic!("{} could not be run: {err}", program.display()))
}

fn assert_ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn wheel_installs_the_vramtop_command_and_the_probe_in_a_fresh_venv() {
    let Some(wheel) = std::env::var_os("VRAMTOP_WHEEL").map(PathBuf::from) else {
        return skip(
            "the wheel install check",
            "VRAMTOP_WHEEL is not set (.ci/run builds the wheel with maturin and sets it)",
            Prerequisite::ProvidedByCi,
        );
    };
    assert!(
        wheel.is_file(),
        "VRAMTOP_WHEEL={} is no file",
        wheel.display()
    );
    let python = std::env::var("VRAMTOP_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("wheel-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    let venv = scratch.join("venv");

    let venv_str = venv.to_string_lossy().into_owned();
    assert_ok(
        "python -m venv",
        &run(Path::new(&python), &["-m", "venv", &venv_str], &scratch),
    );
    let bin = venv.join("bin");
    let wheel_str = wheel.to_string_lossy().into_owned();
    assert_ok(
        "pip install --no-index the wheel",
        &run(
            &bin.join("pip"),
            &[
                "install",
                "-q",
                "--no-index",
                "--disable-pip-version-check",
                &wheel_str,
            ],
            &scratch,
        ),
    );

    let version = assert_ok(
        "vramtop --version",
        &run(&bin.join("vramtop"), &["--version"], &scratch),
    );
    assert_eq!(
        version.trim(),
        format!("vramtop {}", env!("CARGO_PKG_VERSION")),
        "the wheel's vramtop is this build's"
    );

    let help = assert_ok(
        "python -m vramtop_probe --help",
        &run(
            &bin.join("python"),
            &["-m", "vramtop_probe", "--help"],
            &scratch,
        ),
    );
    assert!(help.contains("--record-history"), "probe help:\n{help}");

    let location = assert_ok(
        "import vramtop_probe",
        &run(
            &bin.join("python"),
            &["-c", "import vramtop_probe; print(vramtop_probe.__file__)"],
            &scratch,
        ),
    );
    assert!(
        Path::new(location.trim()).starts_with(&venv),
        "vramtop_probe came from {location}, not from the venv"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
