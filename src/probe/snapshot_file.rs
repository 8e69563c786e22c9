//! The snapshot files a probe names (`snapshot_done`'s `path`, an `oom`
//! message's `snapshot`). vramtop trusts a probe's socket (same user, see
//! [`super::discovery`]) but not the path it sends: before a file is
//! offered, opened or copied it must be one the probe could have written
//! (`docs/probe-protocol.md`, Files): an absolute path to a regular file, not
//! a symlink, owned by this user, named `…-demand.pickle` or `…-oom.pickle`
//! (not a hidden temp name), in a folder (itself not a symlink) owned by this
//! user, whose first bytes are a pickle's. The probe's folder may be any the
//! user chose (`--snapshot-dir`), so which folder is not checked, only that
//! it is one the probe would write into.
//!
//! What a refused file holds is never quoted: it may be anything of the
//! user's.

use std::fs::File;
use std::io::{self, Read as _, Seek as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::quote::escape_controls;

/// Which answer named the file: the name's last part says the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    /// A `snapshot_done` answer to a request.
    Demand,
    /// An `oom` message.
    Oom,
}

impl SnapshotKind {
    /// The end of the probe's file names of this kind.
    fn suffix(self) -> &'static str {
        match self {
            SnapshotKind::Demand => "-demand.pickle",
            SnapshotKind::Oom => "-oom.pickle",
        }
    }
}

/// Bytes read for the pickle check (the first opcode decides).
const FIRST_LOOK_BYTES: u64 = 256;

/// Why a file a probe named is not opened.
#[derive(Debug, thiserror::Error)]
#[error("the probe named {path} as its snapshot, which vramtop does not open: {why}")]
pub struct Refused {
    /// The path as sent, control characters escaped.
    pub path: String,
    pub why: String,
}

impl Refused {
    fn new(path: &Path, why: impl Into<String>) -> Self {
        Refused {
            path: escape_controls(&path.to_string_lossy()),
            why: why.into(),
        }
    }
}

/// The probe's snapshot file at `path`, checked (module docs) and opened,
/// positioned at its start. `uid` is this user's effective uid.
pub fn open(path: &Path, kind: SnapshotKind, uid: u32) -> Result<File, Refused> {
    let refuse = |why: &str| Refused::new(path, why);
    if !path.is_absolute() {
        return Err(refuse("not an absolute path"));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with('.') || name.len() <= kind.suffix().len() || !name.ends_with(kind.suffix())
    {
        return Err(refuse(&format!(
            "not a probe's snapshot name (…{})",
            kind.suffix()
        )));
    }
    let folder = path.parent().unwrap_or(Path::new("/"));
    let io_refuse = |what: &str, e: io::Error| Refused::new(path, format!("{what}: {e}"));
    let f = std::fs::symlink_metadata(folder).map_err(|e| io_refuse("its folder", e))?;
    if !f.file_type().is_dir() {
        return Err(refuse("its folder is not a directory (or is a symlink)"));
    }
    if f.uid() != uid {
        return Err(refuse("its folder belongs to another user"));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| io_refuse("cannot read it", e))?;
    if !meta.file_type().is_file() {
        return Err(refuse("not a regular file (a symlink or something else)"));
    }
    if meta.uid() != uid {
        return Err(refuse("it belongs to another user"));
    }
    let mut file = File::open(path).map_err(|e| io_refuse("cannot open it", e))?;
    // A symlink swapped in after the check opens another file: refused.
    let opened = file
        .metadata()
        .map_err(|e| io_refuse("cannot read it", e))?;
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(refuse("it was replaced while being checked"));
    }
    let mut first = Vec::new();
    (&mut file)
        .take(FIRST_LOOK_BYTES)
        .read_to_end(&mut first)
        .map_err(|e| io_refuse("cannot read it", e))?;
    if crate::snapshot::pickle::check_looks_like_pickle(&first).is_err() {
        // The reader's reason may quote the file's first bytes: not here.
        return Err(refuse("it is not a pickle"));
    }
    file.rewind().map_err(|e| io_refuse("cannot read it", e))?;
    Ok(file)
}

/// Whether `path` is a snapshot file of the probe's (see [`open`]): the
/// check alone, the file closed again.
pub fn check(path: &Path, kind: SnapshotKind, uid: u32) -> Result<PathBuf, Refused> {
    open(path, kind, uid).map(|_| path.to_path_buf())
}

/// Removes the probe's file at `path`, which `opened` ([`open`]) was opened
/// from, once its bytes are copied elsewhere: only while `path` is still
/// that file (same device and inode), so a file put in its place since is
/// left alone. The probe keeps track of its files by name and takes one
/// removed by someone else in its stride (`docs/probe-protocol.md`, Files).
pub fn remove_copied(path: &Path, opened: &File) -> io::Result<()> {
    let opened = opened.metadata()?;
    let now = std::fs::symlink_metadata(path)?;
    if (now.dev(), now.ino()) != (opened.dev(), opened.ino()) {
        return Err(io::Error::other("it was replaced after it was copied"));
    }
    std::fs::remove_file(path)
}

/// The folder snapshots go into, as the probe picks it (so that the
/// dashboard's own, a simulated process's and the stress panel's, sit
/// beside the probes'): `$VRAMTOP_SNAPSHOT_DIR`, else
/// `$XDG_STATE_HOME/vramtop/snapshots` (an absolute one), else
/// `~/.local/state/vramtop/snapshots`; `None` without a home.
pub fn default_snapshot_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    default_snapshot_dir_with(
        std::env::var_os("VRAMTOP_SNAPSHOT_DIR").as_deref(),
        std::env::var_os("XDG_STATE_HOME").as_deref(),
        home.as_deref(),
    )
}

/// [`default_snapshot_dir`] from the variables' values.
pub fn default_snapshot_dir_with(
    chosen: Option<&std::ffi::OsStr>,
    xdg_state_home: Option<&std::ffi::OsStr>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(chosen) = chosen.filter(|c| !c.is_empty()) {
        return Some(PathBuf::from(chosen));
    }
    if let Some(state) = xdg_state_home.map(Path::new).filter(|s| s.is_absolute()) {
        return Some(state.join("vramtop").join("snapshots"));
    }
    home.filter(|h| !h.as_os_str().is_empty()).map(|h| {
        h.join(".local")
            .join("state")
            .join("vramtop")
            .join("snapshots")
    })
}

/// Creates `dir` (and its missing parents) with mode 0700, as the probe
/// creates its folder: snapshots hold the user's stack traces. An existing
/// folder is left as it is.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    // Recursive: an existing folder is no error, and its mode is kept.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_go_where_the_probe_puts_them() {
        let home = Path::new("/home/ada");
        let os = |s: &'static str| Some(std::ffi::OsStr::new(s));
        assert_eq!(
            default_snapshot_dir_with(os("/data/snaps"), os("/state"), Some(home)),
            Some(PathBuf::from("/data/snaps"))
        );
        assert_eq!(
            default_snapshot_dir_with(os(""), os("/state"), Some(home)),
            Some(PathBuf::from("/state/vramtop/snapshots"))
        );
        // A relative XDG_STATE_HOME is ignored, as the spec says.
        assert_eq!(
            default_snapshot_dir_with(None, os("state"), Some(home)),
            Some(PathBuf::from("/home/ada/.local/state/vramtop/snapshots"))
        );
        assert_eq!(default_snapshot_dir_with(None, None, None), None);
    }

    #[test]
    fn a_missing_snapshot_folder_is_made_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().expect("temp dir");
        let dir = d.path().join("state").join("vramtop").join("snapshots");
        create_private_dir(&dir).expect("created");
        let mode = std::fs::metadata(&dir)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        create_private_dir(&dir).expect("an existing one is fine");
    }
    use crate::probe::discovery::current_uid;

    fn pickle_at(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        // PROTO 4, EMPTY_DICT, STOP: the smallest pickle.
        std::fs::write(&p, b"\x80\x04}.").expect("write");
        p
    }

    #[test]
    fn a_pickle_named_as_the_probe_names_them_in_a_folder_of_ours_is_opened() {
        let d = tempfile::tempdir().expect("temp dir");
        let p = pickle_at(d.path(), "node7-12-rank0-20261201T120000Z-demand.pickle");
        let mut f = open(&p, SnapshotKind::Demand, current_uid()).expect("opened");
        let mut all = Vec::new();
        f.read_to_end(&mut all).expect("read");
        assert_eq!(all, b"\x80\x04}.", "positioned at the start");
    }

    #[test]
    fn a_file_that_is_not_a_pickle_is_refused_without_quoting_it() {
        let d = tempfile::tempdir().expect("temp dir");
        let p = d.path().join("x-demand.pickle");
        std::fs::write(&p, b"root:secret:0:0\n").expect("write");
        let e = open(&p, SnapshotKind::Demand, current_uid()).expect_err("not a pickle");
        let said = e.to_string();
        assert!(said.ends_with("it is not a pickle"), "{said}");
        assert!(!said.contains("root:secret"), "{said}");
    }

    #[test]
    fn other_names_relative_paths_symlinks_and_others_files_are_refused() {
        let d = tempfile::tempdir().expect("temp dir");
        let uid = current_uid();
        let other = pickle_at(d.path(), "model.pickle");
        assert!(
            open(&other, SnapshotKind::Demand, uid).is_err(),
            "another name"
        );
        let oom = pickle_at(d.path(), "x-oom.pickle");
        assert!(
            open(&oom, SnapshotKind::Demand, uid).is_err(),
            "another kind"
        );
        assert!(open(&oom, SnapshotKind::Oom, uid).is_ok());
        let hidden = pickle_at(d.path(), ".x-oom.pickle.tmp");
        assert!(
            open(&hidden, SnapshotKind::Oom, uid).is_err(),
            "a temp name"
        );
        assert!(
            open(Path::new("x-oom.pickle"), SnapshotKind::Oom, uid).is_err(),
            "relative"
        );
        let link = d.path().join("y-oom.pickle");
        std::os::unix::fs::symlink(&oom, &link).expect("symlink");
        let e = open(&link, SnapshotKind::Oom, uid).expect_err("a symlink");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = open(&oom, SnapshotKind::Oom, uid.wrapping_add(1)).expect_err("another user");
        assert!(e.to_string().contains("another user"), "{e}");
        let e = open(Path::new("/etc/passwd"), SnapshotKind::Oom, uid).expect_err("passwd");
        assert!(e.to_string().contains("-oom.pickle"), "{e}");
    }

    #[test]
    fn a_copied_file_is_removed_only_while_it_is_the_file_opened() {
        let d = tempfile::tempdir().expect("temp dir");
        let p = pickle_at(d.path(), "x-demand.pickle");
        let f = open(&p, SnapshotKind::Demand, current_uid()).expect("opened");
        remove_copied(&p, &f).expect("removed");
        assert!(!p.exists());
        // Another file put in its place after the copy is not removed.
        let p = pickle_at(d.path(), "y-demand.pickle");
        let f = open(&p, SnapshotKind::Demand, current_uid()).expect("opened");
        std::fs::remove_file(&p).expect("rm");
        pickle_at(d.path(), "y-demand.pickle");
        let e = remove_copied(&p, &f).expect_err("replaced");
        assert!(e.to_string().contains("replaced"), "{e}");
        assert!(p.exists());
    }

    #[test]
    fn a_file_in_a_symlinked_folder_is_refused() {
        let d = tempfile::tempdir().expect("temp dir");
        let real = d.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        pickle_at(&real, "x-oom.pickle");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = open(&link.join("x-oom.pickle"), SnapshotKind::Oom, current_uid())
            .expect_err("symlinked folder");
        assert!(e.to_string().contains("its folder"), "{e}");
    }
}
