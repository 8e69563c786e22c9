//! Where probes listen and which of their sockets vramtop trusts.
//!
//! A probe listens on `$XDG_RUNTIME_DIR/vramtop/<pid>.sock` or
//! `/tmp/vramtop-<user>/<pid>.sock`, or, where `$VRAMTOP_PROBE_DIR` is set
//! and not empty, in that folder alone (for the probe and vramtop alike:
//! a shared container mount, or two experiments kept apart). vramtop reads
//! a socket only when
//! - the directory is a real directory (not a symlink), owned by the
//!   current uid and neither group- nor world-writable (so no one else can
//!   plant a socket there), and
//! - the entry is a socket (not a symlink, not a file) owned by the
//!   current uid.
//!
//! Anything else is skipped with a reason (shown by the status line and
//! in `--once --json`), never followed.

use std::ffi::OsStr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The environment variable that names the one folder probes listen in,
/// replacing the default folders (the Python probe reads it too).
pub const PROBE_DIR_ENV: &str = "VRAMTOP_PROBE_DIR";

/// The directory name under `$XDG_RUNTIME_DIR`.
pub const RUNTIME_SUBDIR: &str = "vramtop";
/// The fallback parent directory without `$XDG_RUNTIME_DIR`: `/tmp`
/// literally, as the probe uses it. Not `$TMPDIR`: schedulers such as SLURM
/// set a per-job `TMPDIR` that the probe (and other jobs) do not share.
pub const FALLBACK_PARENT: &str = "/tmp";
/// Group- and world-write bits: a directory with either is not private.
const SHARED_WRITE_BITS: u32 = 0o022;
/// Probe sockets read at most (over all directories): one reader thread
/// and one probe's figures each. More are reported as one skipped line.
pub const MAX_PROBE_SOCKETS: usize = 256;
/// Directory entries looked at per directory and scan, so a folder of
/// 100 000 files costs a bounded time and memory every scan.
pub const MAX_DIR_ENTRIES: usize = 4096;

/// A socket that passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    /// The pid in the file name (the probe's own namespace), if it is one.
    pub pid_hint: Option<u32>,
    /// (device, inode) of the socket file: a new probe on the same path is
    /// a new file.
    pub file_id: (u64, u64),
}

/// A path that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// The result of one scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    pub candidates: Vec<Candidate>,
    pub skipped: Vec<Skipped>,
}

/// The effective uid: the owner of the files this process creates, and
/// so of the sockets it should trust.
pub fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The user names a probe may have used for `/tmp/vramtop-<user>`: the
/// passwd name of `uid` (what the probe uses) or, without a passwd entry,
/// the number; then `$LOGNAME` and `$USER` (for other clients that used
/// `getpass.getuser()`), without duplicates.
fn user_names(uid: u32) -> Vec<String> {
    let mut names = Vec::new();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    names
        .push(crate::device::procfs::parse_passwd(&passwd, uid).unwrap_or_else(|| uid.to_string()));
    for var in ["LOGNAME", "USER"] {
        if let Ok(n) = std::env::var(var)
            && !n.is_empty()
            && !n.contains('/')
            && !names.contains(&n)
        {
            names.push(n);
        }
    }
    names
}

/// The folders to scan and where that list came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeDirs {
    pub dirs: Vec<PathBuf>,
    /// The list is the one folder `$VRAMTOP_PROBE_DIR` names, not the
    /// defaults.
    pub from_env: bool,
}

impl From<Vec<PathBuf>> for ProbeDirs {
    /// Folders given by the caller (tests, a registry over chosen folders).
    fn from(dirs: Vec<PathBuf>) -> Self {
        ProbeDirs {
            dirs,
            from_env: false,
        }
    }
}

impl ProbeDirs {
    /// Where the list came from, in words: `VRAMTOP_PROBE_DIR` or
    /// `default`.
    pub fn source(&self) -> &'static str {
        if self.from_env {
            PROBE_DIR_ENV
        } else {
            "default"
        }
    }

    /// The folders for a message, comma-separated, with
    /// "(from VRAMTOP_PROBE_DIR)" after the override, so that a user who
    /// set it long ago sees why the usual folders were not looked in.
    pub fn describe(&self) -> String {
        let list = self
            .dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if self.from_env {
            format!("{list} (from {PROBE_DIR_ENV})")
        } else {
            list
        }
    }

    /// Says on each skipped entry that is the override folder itself that
    /// the folder came from `$VRAMTOP_PROBE_DIR` (the skipped list is what
    /// `--once --json` and doctor show).
    pub fn annotate(&self, skipped: &mut [Skipped]) {
        if !self.from_env {
            return;
        }
        for s in skipped.iter_mut().filter(|s| self.dirs.contains(&s.path)) {
            s.reason
                .push_str(&format!(" (the folder {PROBE_DIR_ENV} names)"));
        }
    }
}

/// The folders to scan for the current environment: `$VRAMTOP_PROBE_DIR`
/// alone where it is set and not empty, else [`default_dirs`].
pub fn probe_dirs(uid: u32) -> ProbeDirs {
    probe_dirs_with(std::env::var_os(PROBE_DIR_ENV).as_deref(), uid)
}

/// [`probe_dirs`] with the variable's value given (`None`: unset), so that
/// tests need not change the process's environment.
pub fn probe_dirs_with(override_dir: Option<&OsStr>, uid: u32) -> ProbeDirs {
    match override_dir.filter(|v| !v.is_empty()) {
        Some(dir) => ProbeDirs {
            dirs: vec![PathBuf::from(dir)],
            from_env: true,
        },
        None => ProbeDirs {
            dirs: default_dirs(uid),
            from_env: false,
        },
    }
}

/// The default directories to scan, in order: `$XDG_RUNTIME_DIR/vramtop`
/// (when the variable is set) and `/tmp/vramtop-<user>` (never under
/// `$TMPDIR`). [`probe_dirs`] is what callers want: it honours
/// `$VRAMTOP_PROBE_DIR`.
pub fn default_dirs(uid: u32) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        dirs.push(Path::new(&xdg).join(RUNTIME_SUBDIR));
    }
    for name in user_names(uid) {
        dirs.push(Path::new(FALLBACK_PARENT).join(format!("vramtop-{name}")));
    }
    dirs
}

/// Why a directory may not be read (`None`: it may).
pub fn check_dir(meta: &std::fs::Metadata, expected_uid: u32) -> Option<String> {
    if !meta.file_type().is_dir() {
        return Some("not a directory (symlinks are not followed)".to_string());
    }
    if meta.uid() != expected_uid {
        return Some(format!(
            "directory owned by uid {}, not {expected_uid}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & SHARED_WRITE_BITS != 0 {
        return Some(format!(
            "directory mode {mode:04o} is group- or world-writable (want 0700)"
        ));
    }
    None
}

/// Why a directory entry may not be read (`None`: it may).
pub fn check_socket(meta: &std::fs::Metadata, expected_uid: u32) -> Option<String> {
    if !meta.file_type().is_socket() {
        return Some("not a socket".to_string());
    }
    if meta.uid() != expected_uid {
        return Some(format!(
            "socket owned by uid {}, not {expected_uid}",
            meta.uid()
        ));
    }
    None
}

/// Lists the trusted sockets in `dirs` for `expected_uid`. A missing
/// directory is not an error (no probe has run); an untrusted one is
/// skipped whole.
pub fn scan(dirs: &[PathBuf], expected_uid: u32) -> Scan {
    let mut out = Scan::default();
    for dir in dirs {
        let meta = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if let Some(reason) = check_dir(&meta, expected_uid) {
            out.skipped.push(Skipped {
                path: dir.clone(),
                reason,
            });
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut found = Vec::new();
        let mut looked_at = 0usize;
        let mut left_out = 0usize;
        for entry in entries.flatten() {
            looked_at += 1;
            if looked_at > MAX_DIR_ENTRIES {
                out.skipped.push(Skipped {
                    path: dir.clone(),
                    reason: format!(
                        "more than {MAX_DIR_ENTRIES} entries; the rest are not read \
                         (remove old sockets)"
                    ),
                });
                break;
            }
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "sock") {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if let Some(reason) = check_socket(&meta, expected_uid) {
                out.skipped.push(Skipped { path, reason });
                continue;
            }
            if out.candidates.len() + found.len() >= MAX_PROBE_SOCKETS {
                left_out += 1;
                continue;
            }
            let pid_hint = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse().ok());
            found.push(Candidate {
                path,
                pid_hint,
                file_id: (meta.dev(), meta.ino()),
            });
        }
        if left_out > 0 {
            out.skipped.push(Skipped {
                path: dir.clone(),
                reason: format!(
                    "{left_out} more probe sockets not read (at most {MAX_PROBE_SOCKETS} are)"
                ),
            });
        }
        // By pid, numerically (paths sort "11144.sock" before "9180.sock").
        found.sort_by(|a, b| {
            (a.pid_hint.is_none(), a.pid_hint, &a.path).cmp(&(
                b.pid_hint.is_none(),
                b.pid_hint,
                &b.path,
            ))
        });
        out.candidates.extend(found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        d
    }

    #[test]
    fn sockets_in_a_private_dir_of_ours_are_candidates_and_files_are_not() {
        let d = private_dir();
        let _l = UnixListener::bind(d.path().join("4242.sock")).expect("bind");
        std::fs::write(d.path().join("17.sock"), b"not a socket").expect("write");
        std::fs::write(d.path().join("notes.txt"), b"ignored").expect("write");
        let s = scan(&[d.path().to_path_buf()], current_uid());
        assert_eq!(s.candidates.len(), 1);
        assert_eq!(s.candidates[0].pid_hint, Some(4242));
        assert_eq!(s.skipped.len(), 1);
        assert_eq!(s.skipped[0].reason, "not a socket");
    }

    #[test]
    fn candidates_come_by_pid_as_a_number_not_by_path() {
        let d = private_dir();
        let _a = UnixListener::bind(d.path().join("11144.sock")).expect("bind");
        let _b = UnixListener::bind(d.path().join("9180.sock")).expect("bind");
        let _c = UnixListener::bind(d.path().join("name.sock")).expect("bind");
        let s = scan(&[d.path().to_path_buf()], current_uid());
        let pids: Vec<Option<u32>> = s.candidates.iter().map(|c| c.pid_hint).collect();
        assert_eq!(pids, vec![Some(9180), Some(11144), None]);
    }

    #[test]
    fn a_world_or_group_writable_dir_is_skipped_whole() {
        for mode in [0o777, 0o720, 0o702] {
            let d = private_dir();
            let _l = UnixListener::bind(d.path().join("1.sock")).expect("bind");
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let s = scan(&[d.path().to_path_buf()], current_uid());
            assert!(s.candidates.is_empty(), "mode {mode:o}");
            assert!(s.skipped[0].reason.contains("writable"), "{:?}", s.skipped);
        }
    }

    #[test]
    fn a_dir_or_socket_owned_by_another_uid_is_skipped() {
        let d = private_dir();
        let _l = UnixListener::bind(d.path().join("1.sock")).expect("bind");
        let other = current_uid().wrapping_add(1);
        let s = scan(&[d.path().to_path_buf()], other);
        assert!(s.candidates.is_empty());
        assert!(s.skipped[0].reason.contains("directory owned by uid"));
        let sock = std::fs::symlink_metadata(d.path().join("1.sock")).expect("stat");
        let why = check_socket(&sock, other).expect("wrong owner");
        assert!(why.starts_with("socket owned by uid"), "{why}");
        assert_eq!(check_socket(&sock, current_uid()), None);
    }

    #[test]
    fn a_symlinked_dir_is_not_followed() {
        let d = private_dir();
        let link_parent = private_dir();
        let link = link_parent.path().join("vramtop");
        std::os::unix::fs::symlink(d.path(), &link).expect("symlink");
        let s = scan(&[link], current_uid());
        assert!(s.candidates.is_empty());
        assert!(s.skipped[0].reason.contains("symlinks are not followed"));
    }

    #[test]
    fn at_most_max_probe_sockets_are_candidates_and_the_rest_is_one_line() {
        let d = private_dir();
        let n = MAX_PROBE_SOCKETS + 5;
        let _listeners: Vec<UnixListener> = (0..n)
            .map(|i| UnixListener::bind(d.path().join(format!("{i}.sock"))).expect("bind"))
            .collect();
        let s = scan(&[d.path().to_path_buf()], current_uid());
        assert_eq!(s.candidates.len(), MAX_PROBE_SOCKETS);
        assert_eq!(s.skipped.len(), 1, "{:?}", s.skipped);
        assert_eq!(
            s.skipped[0].reason,
            format!("5 more probe sockets not read (at most {MAX_PROBE_SOCKETS} are)")
        );
    }

    #[test]
    fn a_folder_of_many_files_is_read_only_up_to_max_dir_entries() {
        let d = private_dir();
        for i in 0..MAX_DIR_ENTRIES + 10 {
            std::fs::write(d.path().join(format!("{i}.txt")), b"").expect("write");
        }
        let s = scan(&[d.path().to_path_buf()], current_uid());
        assert!(s.candidates.is_empty());
        assert_eq!(s.skipped.len(), 1, "{:?}", s.skipped);
        assert!(s.skipped[0].reason.starts_with("more than 4096 entries"));
    }

    #[test]
    fn the_override_replaces_the_default_dirs_when_set_and_not_empty() {
        let uid = current_uid();
        let d = probe_dirs_with(Some(OsStr::new("/srv/shared/probes")), uid);
        assert_eq!(d.dirs, vec![PathBuf::from("/srv/shared/probes")]);
        assert!(d.from_env);
        assert_eq!(d.source(), "VRAMTOP_PROBE_DIR");
        assert_eq!(d.describe(), "/srv/shared/probes (from VRAMTOP_PROBE_DIR)");
        for unset in [None, Some(OsStr::new(""))] {
            let d = probe_dirs_with(unset, uid);
            assert!(!d.from_env, "{unset:?}");
            assert_eq!(d.source(), "default");
            assert!(
                d.dirs
                    .iter()
                    .any(|p| p.starts_with(FALLBACK_PARENT)
                        && p.to_string_lossy().contains("/vramtop-")),
                "{:?}",
                d.dirs
            );
            assert!(!d.describe().contains("VRAMTOP_PROBE_DIR"));
        }
    }

    #[test]
    fn an_unsafe_override_dir_is_skipped_as_a_default_one_is_and_says_where_it_came_from() {
        let d = private_dir();
        let _l = UnixListener::bind(d.path().join("7.sock")).expect("bind");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let dirs = probe_dirs_with(Some(d.path().as_os_str()), current_uid());
        let mut s = scan(&dirs.dirs, current_uid());
        assert!(s.candidates.is_empty());
        dirs.annotate(&mut s.skipped);
        assert_eq!(s.skipped.len(), 1, "{:?}", s.skipped);
        assert!(
            s.skipped[0]
                .reason
                .ends_with("writable (want 0700) (the folder VRAMTOP_PROBE_DIR names)"),
            "{}",
            s.skipped[0].reason
        );
        // The defaults' skipped entries are left as they are.
        let mut plain = scan(&[d.path().to_path_buf()], current_uid()).skipped;
        ProbeDirs::from(vec![d.path().to_path_buf()]).annotate(&mut plain);
        assert!(
            plain[0].reason.ends_with("(want 0700)"),
            "{}",
            plain[0].reason
        );
    }

    #[test]
    fn a_missing_dir_is_quietly_nothing() {
        let s = scan(&[PathBuf::from("/nonexistent/vramtop-test")], current_uid());
        assert_eq!(s, Scan::default());
    }
}
