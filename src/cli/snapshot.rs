//! `vramtop snapshot PID`: asks that process's probe for a PyTorch memory
//! snapshot, waits for it, and copies the file the probe wrote to FILE.

use crate::ui::format::count;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use super::{EXIT_BAD_INPUT, EXIT_MISMATCH, say_error};
use crate::device::sim;
use crate::probe::client::{self, Progress};
use crate::probe::discovery;
use crate::probe::protocol::SnapshotDone;
use crate::probe::snapshot_file::{self, SnapshotKind};

/// What a snapshot without a trace is called, and how to get one.
pub const SEGMENTS_ONLY_NOTE: &str =
    "segments only: no trace (start the probe with --record-history to get one)";

/// Why the copy could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{} exists: add --force to replace it, or choose another name", .0.display())]
    Exists(PathBuf),
    #[error(transparent)]
    Refused(snapshot_file::Refused),
    #[error("cannot read the probe's file {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// The default output name: `PID-<UTC time>.pickle` in the current folder.
pub fn default_output(pid: u32, now: chrono::DateTime<chrono::Utc>) -> PathBuf {
    PathBuf::from(format!("{pid}-{}.pickle", now.format("%Y%m%dT%H%M%SZ")))
}

/// Copies the probe's file, opened as `source` ([`open_probe_file`]), to
/// stdout. Returns the bytes copied.
fn copy_to_stdout(source: &mut File) -> Result<u64, CopyError> {
    let mut out = io::stdout().lock();
    let write = |source| CopyError::Write {
        path: PathBuf::from("stdout"),
        source,
    };
    let copied = io::copy(&mut io::BufReader::new(source), &mut out).map_err(write)?;
    out.flush().map_err(write)?;
    Ok(copied)
}

/// The probe's file `from`, opened once it is one the probe could have
/// written ([`snapshot_file::open`]): a plain file of ours, not a symlink,
/// named as the probe names them, that starts as a pickle.
fn open_probe_file(from: &Path) -> Result<File, CopyError> {
    snapshot_file::open(from, SnapshotKind::Demand, discovery::current_uid())
        .map_err(CopyError::Refused)
}

/// Whether a file can be made beside `to` (in its folder), tried by making
/// and removing an empty one: checked before the probe is asked, as a
/// snapshot of a large run takes seconds and counts against the files the
/// probe keeps, and is wasted if it cannot be copied (a read-only folder,
/// `/proc`, a full disk's quota).
fn check_writable(to: &Path) -> Result<(), CopyError> {
    let mut name = to.as_os_str().to_owned();
    name.push(format!(".{}.check", std::process::id()));
    let probe = PathBuf::from(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|source| CopyError::Write {
            path: to.to_path_buf(),
            source,
        })?;
    // Made by this call: removing it cannot remove anything of the user's.
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Copies the probe's file `from` to `to` (mode 0600). Without `force` an
/// existing `to` is refused; with it, `to` is replaced whole (through a
/// temporary file beside it, renamed into place). Returns the bytes copied.
pub fn copy_snapshot(from: &Path, to: &Path, force: bool) -> Result<u64, CopyError> {
    copy_opened(&mut open_probe_file(from)?, to, force)
}

/// [`copy_snapshot`] from the probe's file opened as `source`.
fn copy_opened(source: &mut File, to: &Path, force: bool) -> Result<u64, CopyError> {
    let write = |source| CopyError::Write {
        path: to.to_path_buf(),
        source,
    };
    let target = if force {
        let mut name = to.as_os_str().to_owned();
        name.push(format!(".{}.partial", std::process::id()));
        PathBuf::from(name)
    } else {
        to.to_path_buf()
    };
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&target)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists && !force {
                CopyError::Exists(to.to_path_buf())
            } else {
                write(e)
            }
        })?;
    let copied = io::copy(source, &mut out)
        .and_then(|n| out.flush().map(|()| n))
        .and_then(|n| out.sync_all().map(|()| n))
        // io::copy does not say which side failed; either way no half file
        // is left.
        .map_err(write)
        .and_then(|n| {
            if force {
                std::fs::rename(&target, to).map_err(write)?;
            }
            Ok(n)
        });
    if copied.is_err() {
        let _ = std::fs::remove_file(&target);
    }
    copied
}

/// What is said of a finished snapshot: the bytes copied (not the size the
/// probe claimed), its segments and trace.
pub fn describe(done: &SnapshotDone, copied: u64) -> String {
    let mut parts = vec![count(copied, "byte", "bytes")];
    if let Some(s) = done.segments {
        parts.push(count(s, "segment", "segments"));
    }
    if done.has_trace {
        match done.trace_entries {
            Some(n) => parts.push(count(n, "trace entry", "trace entries")),
            None => parts.push("with a trace".to_string()),
        }
    }
    parts.join(", ")
}

/// Whether a pid no process has may be one the dashboard's simulation
/// showed (it numbers its processes from [`sim::FIRST_PID`] up).
fn maybe_simulated(pid: u32) -> bool {
    pid.checked_sub(sim::FIRST_PID)
        .is_some_and(|past| past < sim::PLAUSIBLE_PIDS)
}

/// What to do instead when `pid` may be a simulated process's: it has no
/// probe to ask, but the dashboard writes its allocator model.
fn simulated_note(pid: u32) -> String {
    use crate::app::keymap::{Action, Keymap};
    let c = Keymap::default()
        .key_name(Action::CaptureSnapshot)
        .unwrap_or("the snapshot key");
    format!(
        "if {pid} is a row of vramtop's simulated GPU (shown where no NVIDIA driver is found), \
         it is a simulated process with a made-up pid and no probe: in the dashboard, {c} on its \
         GPU writes its allocator as a snapshot; a real training run gets a probe with python -m \
         vramtop_probe train.py (docs/attach.md)"
    )
}

/// Runs `vramtop snapshot PID`.
pub fn run(
    pid: u32,
    output: Option<&Path>,
    timeout_ms: u64,
    force: bool,
) -> color_eyre::Result<ExitCode> {
    let uid = discovery::current_uid();
    let dirs = discovery::probe_dirs(uid);
    let fail = |e: &dyn std::fmt::Display, code: u8| -> color_eyre::Result<ExitCode> {
        say_error(e);
        Ok(ExitCode::from(code))
    };
    let socket = match client::find_socket(pid, &dirs, uid) {
        Ok(s) => s,
        Err(e @ client::ClientError::NoProcess { .. }) if maybe_simulated(pid) => {
            return fail(&format!("{e}; {}", simulated_note(pid)), EXIT_BAD_INPUT);
        }
        Err(e) => return fail(&e, EXIT_BAD_INPUT),
    };
    let to_stdout = output.is_some_and(|o| o.as_os_str() == "-");
    let output = output.map_or_else(
        || default_output(pid, std::time::SystemTime::now().into()),
        Path::to_path_buf,
    );
    // Said before the probe does any work: a snapshot of a large run takes
    // seconds and pauses nothing, but it is wasted if it cannot be kept.
    if to_stdout {
        use std::io::IsTerminal as _;
        if io::stdout().is_terminal() {
            return fail(
                &"-o - writes the snapshot's bytes to stdout, which is a terminal: \
                  redirect it (> FILE) or name a file",
                EXIT_BAD_INPUT,
            );
        }
    } else {
        if let Some(why) = super::output_file_problem(&output, true, super::OutputKind::Snapshot) {
            return fail(&why, EXIT_BAD_INPUT);
        }
        if !force && std::fs::symlink_metadata(&output).is_ok() {
            return fail(&CopyError::Exists(output), EXIT_BAD_INPUT);
        }
        if let Err(e) = check_writable(&output) {
            return fail(&e, EXIT_BAD_INPUT);
        }
    }
    let done = client::request_snapshot(
        &socket,
        pid,
        Duration::from_millis(timeout_ms),
        |p| match p {
            Progress::Asked(_) => {
                eprintln!("vramtop snapshot: asked the probe of {pid} for a snapshot");
            }
            Progress::Started => eprintln!("vramtop snapshot: the probe of {pid} is taking it"),
        },
    );
    let done = match done {
        Ok(d) => d,
        Err(e) => {
            let code = if e.is_bad_input() {
                EXIT_BAD_INPUT
            } else {
                EXIT_MISMATCH
            };
            // The probe is working on it: only more time helps, and the
            // file it goes on to write is kept (nobody copies it), so say
            // where it may appear.
            if let Some(place) = e.may_still_write() {
                return fail(
                    &format!(
                        "{e}; it may still write {place}, which is kept: give it longer with \
                         --timeout"
                    ),
                    code,
                );
            }
            return fail(&e, code);
        }
    };
    let mut source = match open_probe_file(&done.path) {
        Ok(f) => f,
        Err(e) => return fail(&e, EXIT_MISMATCH),
    };
    // The probe's file is a means to the copy: once the copy is whole it is
    // removed, so a snapshot taken to FILE (or to a pipe) leaves no second
    // copy, which may be GBs, in the probe's folder. A copy that failed
    // leaves it, and says where: it is then the only one.
    let kept = || {
        // Said through say_error or say_warning, which escape controls.
        format!("the probe's copy is kept: {}", done.path.display())
    };
    let remove = |source: &File| {
        if let Err(e) = snapshot_file::remove_copied(&done.path, source) {
            super::say_warning(format_args!(
                "cannot remove the probe's copy {}: {e}; remove it by hand",
                done.path.display()
            ));
        }
    };
    if to_stdout {
        return match copy_to_stdout(&mut source) {
            Ok(copied) => {
                remove(&source);
                eprintln!(
                    "vramtop snapshot: wrote it to stdout ({})",
                    describe(&done, copied)
                );
                if !done.has_trace {
                    eprintln!("vramtop snapshot: {SEGMENTS_ONLY_NOTE}");
                }
                Ok(ExitCode::SUCCESS)
            }
            // To the binary edge, which ends a closed pipe quietly and
            // says any other failure to write (exit 2). A reader that stops
            // early (`open - --summary --no-trace`, `head`) closes the pipe
            // before the end: the whole snapshot is then only the probe's.
            Err(CopyError::Write { source, .. }) => {
                super::say_warning(format_args!(
                    "stdout took only part of the snapshot; {}",
                    kept()
                ));
                Err(color_eyre::Report::new(source).wrap_err("cannot write stdout"))
            }
            Err(e) => {
                let code = match e {
                    CopyError::Exists(_) | CopyError::Write { .. } => EXIT_BAD_INPUT,
                    CopyError::Refused(_) | CopyError::Read { .. } => EXIT_MISMATCH,
                };
                fail(&e, code)
            }
        };
    }
    let copied = match copy_opened(&mut source, &output, force) {
        Ok(n) => n,
        Err(e) => {
            let code = match e {
                CopyError::Exists(_) | CopyError::Write { .. } => EXIT_BAD_INPUT,
                CopyError::Refused(_) | CopyError::Read { .. } => EXIT_MISMATCH,
            };
            return fail(&format!("{e}; {}", kept()), code);
        }
    };
    remove(&source);
    eprintln!(
        "vramtop snapshot: wrote {} ({})",
        output.display(),
        describe(&done, copied)
    );
    if !done.has_trace {
        eprintln!("vramtop snapshot: {SEGMENTS_ONLY_NOTE}");
    }
    // The path alone on stdout, for scripts.
    super::emit(&format!("{}\n", output.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_name_is_the_pid_and_the_utc_time() {
        let t = chrono::DateTime::from_timestamp(1_764_590_400, 0).expect("a time");
        assert_eq!(
            default_output(1234, t),
            PathBuf::from("1234-20251201T120000Z.pickle")
        );
    }

    #[test]
    fn an_unwritable_folder_is_found_before_the_probe_is_asked() {
        let d = tempfile::tempdir().expect("temp dir");
        let ok = d.path().join("s.pickle");
        assert!(check_writable(&ok).is_ok());
        let left: Vec<_> = std::fs::read_dir(d.path()).expect("read").collect();
        assert!(left.is_empty(), "the check leaves nothing behind: {left:?}");
        // /proc takes no new files, whoever asks (root included).
        let proc_file = Path::new("/proc/vramtop-check-nope.pickle");
        let err = check_writable(proc_file).expect_err("/proc refuses new files");
        assert!(err.to_string().contains("cannot write /proc/"), "{err}");
    }

    #[test]
    fn a_copy_is_0600_refuses_an_existing_file_and_replaces_it_with_force() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().expect("temp dir");
        let from = d
            .path()
            .join("node7-1-rank0-20261201T120000Z-demand.pickle");
        // PROTO 4, EMPTY_DICT, STOP: the smallest pickle.
        std::fs::write(&from, b"\x80\x04}.").expect("write");
        let to = d.path().join("out.pickle");
        assert_eq!(copy_snapshot(&from, &to, false).expect("copied"), 4);
        let mode = std::fs::metadata(&to).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&from, b"\x80\x04].").expect("write");
        let e = copy_snapshot(&from, &to, false).expect_err("exists");
        assert!(matches!(e, CopyError::Exists(_)), "{e}");
        assert_eq!(std::fs::read(&to).expect("read"), b"\x80\x04}.");
        copy_snapshot(&from, &to, true).expect("forced");
        assert_eq!(std::fs::read(&to).expect("read"), b"\x80\x04].");
        let left: Vec<_> = std::fs::read_dir(d.path()).expect("ls").flatten().collect();
        assert_eq!(left.len(), 2, "no temporary file is left behind");
    }

    #[test]
    fn a_symlink_in_place_of_the_probes_file_is_not_followed() {
        let d = tempfile::tempdir().expect("temp dir");
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"\x80\x04}.").expect("write");
        let link = d.path().join("x-demand.pickle");
        std::os::unix::fs::symlink(&secret, &link).expect("symlink");
        let to = d.path().join("out.pickle");
        let e = copy_snapshot(&link, &to, false).expect_err("symlink");
        assert!(matches!(e, CopyError::Refused(_)), "{e}");
        assert!(!to.exists());
    }

    #[test]
    fn a_probes_file_that_is_not_a_pickle_is_not_copied() {
        let d = tempfile::tempdir().expect("temp dir");
        let from = d.path().join("x-demand.pickle");
        std::fs::write(&from, b"root:x:0:0:root:/root:/bin/bash\n").expect("write");
        let to = d.path().join("out.pickle");
        let e = copy_snapshot(&from, &to, false).expect_err("not a pickle");
        assert!(matches!(e, CopyError::Refused(_)), "{e}");
        assert!(!e.to_string().contains("root:"), "never quoted: {e}");
        assert!(!to.exists());
    }
}
