//! What Linux `/proc` says about a process: owner, command line, parent, and
//! which CUDA libraries it has mapped.
//!
//! Nothing here fails loudly. Processes exit between the driver listing them
//! and us reading `/proc`, `/proc` may be mounted with `hidepid`, and another
//! user's `maps` is unreadable; every lookup therefore returns `None` (or an
//! empty value) instead of an error, and the UI shows "n/a" — except the
//! libraries, for which `doctor` says why they could not be read.
//!
//! The parsing is split into pure functions over text so it can be tested on
//! hand-written inputs; the thin readers around them only do the I/O.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;

/// Owner, command and parent of one process, as far as `/proc` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The user name, or the numeric uid as text when `/etc/passwd` does not
    /// know it (common in containers that run as an arbitrary uid).
    pub user: Option<String>,
    /// The command line with arguments separated by spaces, or the short
    /// kernel name (`comm`) when the command line is empty.
    pub command: Option<String>,
    pub parent_pid: Option<u32>,
}

/// Which CUDA-stack library a mapped file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum LibraryKind {
    /// `libcudart`: the CUDA runtime the program was built against.
    CudaRuntime,
    /// `libcudnn` and its sub-libraries (`libcudnn_ops`, `libcudnn_graph`, …).
    Cudnn,
    /// `libcublas`.
    Cublas,
    /// `libcublasLt`.
    CublasLt,
    /// `libnccl`.
    Nccl,
    /// `libcuda`: the user-mode driver.
    CudaDriver,
    /// `libnvidia-ml`: NVML.
    Nvml,
    /// `libnvrtc`: the runtime compiler.
    Nvrtc,
}

impl LibraryKind {
    /// A short label for display.
    pub fn label(self) -> &'static str {
        match self {
            LibraryKind::CudaRuntime => "cudart",
            LibraryKind::Cudnn => "cudnn",
            LibraryKind::Cublas => "cublas",
            LibraryKind::CublasLt => "cublasLt",
            LibraryKind::Nccl => "nccl",
            LibraryKind::CudaDriver => "cuda driver",
            LibraryKind::Nvml => "nvml",
            LibraryKind::Nvrtc => "nvrtc",
        }
    }
}

/// One CUDA-stack library mapped into a process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MappedLibrary {
    pub kind: LibraryKind,
    /// The absolute path as the kernel shows it (a " (deleted)" suffix is
    /// removed: the old file is still what the process runs).
    pub path: String,
    /// The version in the file name after `.so.`, e.g. "12.4.127".
    pub version: Option<String>,
}

/// Largest command line we read, in bytes. A UI row never shows more, and
/// some launchers pass megabytes of arguments; reading them at 1 Hz per
/// process would be wasted work.
const MAX_CMDLINE_BYTES: u64 = 4096;

/// Owner, command line and parent of `pid`. Reads `/etc/passwd` to name the
/// owner; use [`UserNames`] with [`process_info_with`] when calling this
/// repeatedly.
pub fn process_info(pid: u32) -> ProcessInfo {
    process_info_with(pid, &mut UserNames::default())
}

/// Like [`process_info`], resolving user names through a cache.
pub fn process_info_with(pid: u32, users: &mut UserNames) -> ProcessInfo {
    let status = read_to_string_limited(&format!("/proc/{pid}/status"), 64 * 1024);
    let (user, parent_pid) = match &status {
        Some(text) => (
            parse_status_uid(text).map(|uid| users.name(uid)),
            parse_status_ppid(text),
        ),
        None => (None, None),
    };
    ProcessInfo {
        user,
        command: command_line(pid),
        parent_pid,
    }
}

/// The parent of `pid` from its `status` (`None` where /proc does not
/// say): the one figure of [`process_info`] a caller that knows the rest
/// needs, without reading the command line too.
pub fn parent_pid(pid: u32) -> Option<u32> {
    read_to_string_limited(&format!("/proc/{pid}/status"), 64 * 1024)
        .as_deref()
        .and_then(parse_status_ppid)
}

/// The command line of `pid` (arguments joined by spaces), or its `comm`
/// name when the command line is empty (kernel threads, zombies).
pub fn command_line(pid: u32) -> Option<String> {
    if let Some(bytes) = read_limited(&format!("/proc/{pid}/cmdline"), MAX_CMDLINE_BYTES)
        && let Some(cmd) = parse_cmdline(&bytes)
    {
        return Some(cmd);
    }
    let comm = read_to_string_limited(&format!("/proc/{pid}/comm"), 256)?;
    let comm = comm.trim_end_matches('\n');
    (!comm.is_empty()).then(|| comm.to_owned())
}

/// Why a process's `/proc/PID/maps` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum MapsUnreadable {
    /// No such process here: it exited, or its pid is of another pid
    /// namespace (NVML gives host pids, a container sees its own).
    Gone,
    /// Permission denied, and the process runs as another user (`uid`).
    OtherUser { uid: u32 },
    /// Permission denied for a process of our own user (or of unknown
    /// owner): the kernel's ptrace check refused, as for a non-dumpable
    /// process, under `kernel.yama.ptrace_scope`, or without
    /// CAP_SYS_PTRACE (containers drop it).
    Denied,
    /// Any other read error, in the system's words.
    Failed { error: String },
}

impl MapsUnreadable {
    /// Why, for a person: "… (another user's process)" only when it is.
    pub fn describe(&self) -> String {
        match self {
            MapsUnreadable::Gone => "no such process here (it exited, or its pid is of another \
                 pid namespace)"
                .to_string(),
            MapsUnreadable::OtherUser { uid } => {
                format!("permission denied (another user's process, uid {uid})")
            }
            MapsUnreadable::Denied => "permission denied by the kernel's ptrace check (a \
                 non-dumpable process, kernel.yama.ptrace_scope, or no CAP_SYS_PTRACE)"
                .to_string(),
            MapsUnreadable::Failed { error } => error.clone(),
        }
    }
}

/// Why `/proc/PID/maps` failed to read with `kind`, for a process owned by
/// `owner` read by `me` (effective uids; `None` when unknown).
pub fn why_unreadable(
    kind: std::io::ErrorKind,
    error: &str,
    owner: Option<u32>,
    me: Option<u32>,
) -> MapsUnreadable {
    use std::io::ErrorKind as K;
    match kind {
        K::NotFound => MapsUnreadable::Gone,
        K::PermissionDenied => match (owner, me) {
            (Some(uid), Some(me)) if uid != me => MapsUnreadable::OtherUser { uid },
            _ => MapsUnreadable::Denied,
        },
        _ => MapsUnreadable::Failed {
            error: error.to_string(),
        },
    }
}

/// The effective uid of `pid` ("self" for ours), from its status file.
fn status_uid(pid: &str) -> Option<u32> {
    parse_status_uid(&read_to_string_limited(
        &format!("/proc/{pid}/status"),
        64 * 1024,
    )?)
}

/// The CUDA-stack libraries `pid` has mapped, each file once, in the order
/// they appear in `/proc/PID/maps`, or why maps cannot be read.
pub fn gpu_libraries(pid: u32) -> Result<Vec<MappedLibrary>, MapsUnreadable> {
    // Maps of a PyTorch process run to a few hundred KiB; read all of it,
    // this is an on-demand detail view, not part of the 1 Hz sample.
    let mut text = String::new();
    let read =
        File::open(format!("/proc/{pid}/maps")).and_then(|mut f| f.read_to_string(&mut text));
    match read {
        Ok(_) => Ok(parse_maps(&text)),
        Err(e) => {
            // An exited process's read fails with ESRCH, not ENOENT.
            let kind = if e.raw_os_error() == Some(nix::libc::ESRCH) {
                std::io::ErrorKind::NotFound
            } else {
                e.kind()
            };
            Err(why_unreadable(
                kind,
                &e.to_string(),
                status_uid(&pid.to_string()),
                status_uid("self"),
            ))
        }
    }
}

impl MappedLibrary {
    /// The file the process maps, e.g. `libnvidia-ml.so.1`; the kind and
    /// version where the path has no file name.
    pub fn file_name(&self) -> String {
        match self.path.rsplit('/').next().filter(|n| !n.is_empty()) {
            Some(name) => name.to_string(),
            None => format!(
                "{} {}",
                self.kind.label(),
                self.version.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// Caches uid → user name lookups in `/etc/passwd` (a miss is cached as the
/// numeric uid, so a container user without a passwd entry costs one read).
#[derive(Debug, Default, Clone)]
pub struct UserNames {
    names: HashMap<u32, String>,
}

impl UserNames {
    /// The name of `uid`, or the uid as text when `/etc/passwd` has no entry.
    pub fn name(&mut self, uid: u32) -> String {
        self.names
            .entry(uid)
            .or_insert_with(|| {
                read_to_string_limited("/etc/passwd", 16 * 1024 * 1024)
                    .and_then(|text| parse_passwd(&text, uid))
                    .unwrap_or_else(|| uid.to_string())
            })
            .clone()
    }
}

/// The effective uid from the text of `/proc/PID/status` (the `Uid:` line
/// lists real, effective, saved and filesystem uids). The effective uid is
/// the one whose permissions the process runs with, as `ps -o user` shows.
pub fn parse_status_uid(text: &str) -> Option<u32> {
    let fields = status_field(text, "Uid:")?;
    let mut ids = fields.split_ascii_whitespace();
    let real = ids.next()?;
    let effective = ids.next().unwrap_or(real);
    effective.parse().ok()
}

/// The parent pid from the text of `/proc/PID/status`. `PPid: 0` (the
/// kernel's own tasks and pid 1) means "no parent" and gives `None`.
pub fn parse_status_ppid(text: &str) -> Option<u32> {
    let ppid: u32 = status_field(text, "PPid:")?.trim().parse().ok()?;
    (ppid != 0).then_some(ppid)
}

/// The value part of the first `key` line of a status file.
fn status_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| line.strip_prefix(key))
}

/// The user name of `uid` in the text of an `/etc/passwd` file
/// (`name:password:uid:gid:gecos:home:shell`). Comment lines, NIS `+`/`-`
/// entries and malformed lines are skipped.
pub fn parse_passwd(text: &str, uid: u32) -> Option<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with('+') && !line.starts_with('-'))
        .find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let _password = fields.next()?;
            let line_uid: u32 = fields.next()?.trim().parse().ok()?;
            (line_uid == uid && !name.is_empty()).then(|| name.to_owned())
        })
}

/// `/proc/PID/cmdline` bytes → a printable command line: arguments are
/// NUL-separated (with a trailing NUL), shown joined by spaces. Invalid
/// UTF-8 is replaced. `None` when there is nothing but NULs.
pub fn parse_cmdline(bytes: &[u8]) -> Option<String> {
    let trimmed = match bytes.iter().rposition(|&b| b != 0) {
        Some(last) => &bytes[..=last],
        None => return None,
    };
    let text = String::from_utf8_lossy(trimmed);
    Some(text.replace('\0', " "))
}

/// The CUDA-stack libraries in the text of a `/proc/PID/maps` file, each
/// path once, in order of first appearance.
pub fn parse_maps(text: &str) -> Vec<MappedLibrary> {
    let mut found: Vec<MappedLibrary> = Vec::new();
    for line in text.lines() {
        let Some(path) = maps_path(line) else {
            continue;
        };
        if found.iter().any(|lib| lib.path == path) {
            continue;
        }
        let file_name = path.rsplit('/').next().unwrap_or(path);
        if let Some(kind) = library_kind(file_name) {
            found.push(MappedLibrary {
                kind,
                path: path.to_owned(),
                version: version_from_soname(file_name).map(str::to_owned),
            });
        }
    }
    found
}

/// The file path of one maps line (`address perms offset dev inode path`),
/// or `None` for anonymous and special (`[heap]`, `[vdso]`) mappings. The
/// path is everything after the fifth field, so paths with spaces survive.
fn maps_path(line: &str) -> Option<&str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(|c: char| c.is_ascii_whitespace())?;
        rest = &rest[end..];
    }
    let path = rest.trim();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/').then_some(path)
}

/// Which library a file name is, by its stem (the part before `.so`).
fn library_kind(file_name: &str) -> Option<LibraryKind> {
    let stem = &file_name[..file_name.find(".so")?];
    let stem = strip_wheel_hash(stem);
    let kind = match stem {
        "libcudart" => LibraryKind::CudaRuntime,
        "libcublas" => LibraryKind::Cublas,
        "libcublasLt" => LibraryKind::CublasLt,
        "libnccl" => LibraryKind::Nccl,
        "libcuda" => LibraryKind::CudaDriver,
        "libnvidia-ml" => LibraryKind::Nvml,
        "libnvrtc" => LibraryKind::Nvrtc,
        s if s == "libcudnn" || s.starts_with("libcudnn_") => LibraryKind::Cudnn,
        _ => return None,
    };
    Some(kind)
}

/// Python wheels repaired by auditwheel rename bundled libraries to
/// `libcudart-1a2b3c4d.so.11.0` (a dash and 8 hex digits of a content hash);
/// strip that so the stem is recognised.
fn strip_wheel_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((base, hash)) if hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            base
        }
        _ => stem,
    }
}

/// The version a shared-library file name carries after `.so.`:
/// `libcudart.so.12.4.127` → "12.4.127", `libcudart.so.12` → "12",
/// `libcudart.so` → `None`. Only digits and dots count as a version.
pub fn version_from_soname(file_name: &str) -> Option<&str> {
    let (_, version) = file_name.split_once(".so.")?;
    let valid = !version.is_empty()
        && version.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && !version.starts_with('.')
        && !version.ends_with('.');
    valid.then_some(version)
}

/// Reads at most `limit` bytes of a file.
fn read_limited(path: &str, limit: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(limit)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// Reads at most `limit` bytes of a text file (invalid UTF-8 replaced).
pub(super) fn read_to_string_limited(path: &str, limit: u64) -> Option<String> {
    let bytes = read_limited(path, limit)?;
    Some(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_process_of_another_uid_is_called_another_users() {
        use std::io::ErrorKind as K;
        // vramtop as root, reading root's pid 1: refused, but not for
        // being another user's.
        assert_eq!(
            why_unreadable(K::PermissionDenied, "", Some(0), Some(0)),
            MapsUnreadable::Denied
        );
        assert_eq!(
            why_unreadable(K::PermissionDenied, "", None, Some(0)),
            MapsUnreadable::Denied
        );
        assert_eq!(
            why_unreadable(K::PermissionDenied, "", Some(1000), Some(0)),
            MapsUnreadable::OtherUser { uid: 1000 }
        );
        assert_eq!(
            why_unreadable(K::NotFound, "", None, Some(0)),
            MapsUnreadable::Gone
        );
        assert!(!MapsUnreadable::Denied.describe().contains("another user"));
        assert!(
            MapsUnreadable::OtherUser { uid: 1000 }
                .describe()
                .contains("another user's process, uid 1000")
        );
        assert_eq!(
            why_unreadable(K::Other, "Input/output error", Some(0), Some(0)).describe(),
            "Input/output error"
        );
    }

    #[test]
    fn a_library_is_named_by_its_file() {
        let lib = MappedLibrary {
            kind: LibraryKind::Nvml,
            path: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1".to_string(),
            version: Some("1".to_string()),
        };
        assert_eq!(lib.file_name(), "libnvidia-ml.so.1");
    }

    const STATUS: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
        Ngid:\t0\nPid:\t4242\nPPid:\t4100\nTracerPid:\t0\nUid:\t1000\t1001\t1000\t1000\n\
        Gid:\t1000\t1000\t1000\t1000\n";

    #[test]
    fn status_uid_is_the_effective_uid() {
        assert_eq!(parse_status_uid(STATUS), Some(1001));
    }

    #[test]
    fn status_uid_with_a_single_field_uses_it() {
        assert_eq!(parse_status_uid("Uid:\t7\n"), Some(7));
    }

    #[test]
    fn status_without_uid_or_with_garbage_gives_none() {
        assert_eq!(parse_status_uid("Name:\tx\n"), None);
        assert_eq!(parse_status_uid("Uid:\tabc\tdef\n"), None);
        assert_eq!(parse_status_uid(""), None);
    }

    #[test]
    fn status_ppid_is_parsed_and_zero_means_no_parent() {
        assert_eq!(parse_status_ppid(STATUS), Some(4100));
        assert_eq!(parse_status_ppid("PPid:\t0\n"), None);
        assert_eq!(parse_status_ppid("PPid:\t-1\n"), None);
    }

    const PASSWD: &str = "# local users\nroot:x:0:0:root:/root:/bin/bash\n\
        +nisuser:x:1000:1000::/:\nbroken line\nalice:x:1000:1000:Alice:/home/alice:/bin/zsh\n\
        bob:x:notanumber:1:::\nbob:x:1001:1001::/home/bob:/bin/sh\n";

    #[test]
    fn passwd_resolves_uid_to_name() {
        assert_eq!(parse_passwd(PASSWD, 0).as_deref(), Some("root"));
        assert_eq!(parse_passwd(PASSWD, 1000).as_deref(), Some("alice"));
        assert_eq!(parse_passwd(PASSWD, 1001).as_deref(), Some("bob"));
    }

    #[test]
    fn passwd_without_the_uid_gives_none() {
        assert_eq!(parse_passwd(PASSWD, 4242), None);
        assert_eq!(parse_passwd("", 0), None);
    }

    #[test]
    fn cmdline_nuls_become_spaces_and_the_trailing_nul_is_dropped() {
        let raw = b"python3\0train.py\0--lr\x000.1\0";
        assert_eq!(
            parse_cmdline(raw).as_deref(),
            Some("python3 train.py --lr 0.1")
        );
    }

    #[test]
    fn cmdline_rewritten_without_nuls_is_kept() {
        assert_eq!(
            parse_cmdline(b"postgres: writer process   ").as_deref(),
            Some("postgres: writer process   ")
        );
    }

    #[test]
    fn empty_cmdline_gives_none() {
        assert_eq!(parse_cmdline(b""), None);
        assert_eq!(parse_cmdline(b"\0\0"), None);
    }

    #[test]
    fn cmdline_with_invalid_utf8_is_replaced_not_dropped() {
        assert_eq!(parse_cmdline(b"a\xff\0b\0").as_deref(), Some("a\u{fffd} b"));
    }

    #[test]
    fn soname_version_is_everything_after_so() {
        assert_eq!(
            version_from_soname("libcudart.so.12.4.127"),
            Some("12.4.127")
        );
        assert_eq!(version_from_soname("libcudart.so.12"), Some("12"));
        assert_eq!(version_from_soname("libcudart.so"), None);
        assert_eq!(
            version_from_soname("libnvidia-ml.so.570.124.06"),
            Some("570.124.06")
        );
        assert_eq!(
            version_from_soname("libcudart-1a2b3c4d.so.11.0"),
            Some("11.0")
        );
    }

    #[test]
    fn soname_version_rejects_non_numeric_tails() {
        assert_eq!(version_from_soname("libfoo.so.1.bak"), None);
        assert_eq!(version_from_soname("libfoo.so."), None);
        assert_eq!(version_from_soname("libfoo.so.12."), None);
        assert_eq!(version_from_soname("libcudart.a"), None);
    }

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/python3.11
7f0000000000-7f0000010000 r--p 00000000 08:01 2001 /opt/venv/lib/nvidia/cuda_runtime/lib/libcudart.so.12
7f0000010000-7f0000080000 r-xp 00010000 08:01 2001 /opt/venv/lib/nvidia/cuda_runtime/lib/libcudart.so.12
7f0000080000-7f0000090000 rw-p 00080000 08:01 2001 /opt/venv/lib/nvidia/cuda_runtime/lib/libcudart.so.12
7f0001000000-7f0001100000 r-xp 00000000 08:01 2002 /opt/venv/lib/nvidia/cudnn/lib/libcudnn.so.9
7f0001100000-7f0001200000 r-xp 00000000 08:01 2003 /opt/venv/lib/nvidia/cudnn/lib/libcudnn_ops.so.9
7f0001200000-7f0001300000 r-xp 00000000 08:01 2004 /opt/venv/lib/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9.1.0
7f0002000000-7f0002100000 r-xp 00000000 08:01 2005 /opt/venv/lib/nvidia/cublas/lib/libcublas.so.12
7f0002100000-7f0002200000 r-xp 00000000 08:01 2006 /opt/venv/lib/nvidia/cublas/lib/libcublasLt.so.12
7f0003000000-7f0003100000 r-xp 00000000 08:01 2007 /opt/venv/lib/nvidia/nccl/lib/libnccl.so.2
7f0004000000-7f0004100000 r-xp 00000000 08:01 2008 /usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06
7f0005000000-7f0005100000 r-xp 00000000 08:01 2009 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.124.06
7f0006000000-7f0006100000 r-xp 00000000 08:01 2010 /opt/venv/lib/nvidia/cuda_nvrtc/lib/libnvrtc.so.12
7f0006100000-7f0006200000 r-xp 00000000 08:01 2011 /opt/venv/lib/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.4
7f0007000000-7f0007100000 r-xp 00000000 08:01 2012 /opt/venv/lib/torch/lib/libtorch_cuda.so
7f0008000000-7f0008100000 rw-p 00000000 00:00 0 
7f0009000000-7f0009100000 rw-p 00000000 00:00 0                          [heap]
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn maps_lists_each_cuda_library_once_with_kind_and_version() {
        let libs = parse_maps(MAPS);
        let summary: Vec<(LibraryKind, &str, Option<&str>)> = libs
            .iter()
            .map(|l| {
                (
                    l.kind,
                    l.path.rsplit('/').next().unwrap_or(""),
                    l.version.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (LibraryKind::CudaRuntime, "libcudart.so.12", Some("12")),
                (LibraryKind::Cudnn, "libcudnn.so.9", Some("9")),
                (LibraryKind::Cudnn, "libcudnn_ops.so.9", Some("9")),
                (
                    LibraryKind::Cudnn,
                    "libcudnn_engines_precompiled.so.9.1.0",
                    Some("9.1.0")
                ),
                (LibraryKind::Cublas, "libcublas.so.12", Some("12")),
                (LibraryKind::CublasLt, "libcublasLt.so.12", Some("12")),
                (LibraryKind::Nccl, "libnccl.so.2", Some("2")),
                (
                    LibraryKind::CudaDriver,
                    "libcuda.so.570.124.06",
                    Some("570.124.06")
                ),
                (
                    LibraryKind::Nvml,
                    "libnvidia-ml.so.570.124.06",
                    Some("570.124.06")
                ),
                (LibraryKind::Nvrtc, "libnvrtc.so.12", Some("12")),
            ]
        );
        assert_eq!(
            libs[0].path,
            "/opt/venv/lib/nvidia/cuda_runtime/lib/libcudart.so.12"
        );
    }

    #[test]
    fn maps_keeps_paths_with_spaces_and_drops_the_deleted_marker() {
        let text = "7f00-7f01 r-xp 00000000 08:01 77 /home/a b/cuda libs/libcudart.so.12.4.127 (deleted)\n";
        let libs = parse_maps(text);
        assert_eq!(
            libs,
            vec![MappedLibrary {
                kind: LibraryKind::CudaRuntime,
                path: "/home/a b/cuda libs/libcudart.so.12.4.127".to_owned(),
                version: Some("12.4.127".to_owned()),
            }]
        );
    }

    #[test]
    fn maps_recognises_auditwheel_renamed_libraries() {
        let text = "7f00-7f01 r-xp 00000000 08:01 77 /venv/torch/lib/libcudart-d0da41ae.so.11.0\n\
                    7f00-7f01 r-xp 00000000 08:01 78 /venv/torch/lib/libnvrtc-b51b459d.so.12\n";
        let kinds: Vec<_> = parse_maps(text).iter().map(|l| l.kind).collect();
        assert_eq!(kinds, vec![LibraryKind::CudaRuntime, LibraryKind::Nvrtc]);
    }

    #[test]
    fn maps_ignores_lookalikes_and_garbage() {
        let text = "garbage\n\n7f00-7f01 r-xp\n\
            7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libcudart_static.a\n\
            7f00-7f01 r-xp 00000000 08:01 2 /usr/lib/libcudadebugger.so.1\n\
            7f00-7f01 r-xp 00000000 08:01 3 /usr/lib/libnvidia-ptxjitcompiler.so.1\n\
            7f00-7f01 r-xp 00000000 08:01 4 /usr/lib/libcudnnfoo.so.9\n";
        assert_eq!(parse_maps(text), Vec::new());
    }

    #[test]
    fn own_process_has_a_user_a_command_and_a_parent() {
        let info = process_info(std::process::id());
        let user = info.user.expect("our own /proc/self/status is readable");
        assert!(!user.is_empty());
        let command = info.command.expect("our own cmdline is readable");
        assert!(!command.is_empty());
        assert!(info.parent_pid.is_some());
    }

    #[test]
    fn own_process_maps_are_readable_and_list_absolute_paths() {
        // Which CUDA libraries this test binary has mapped depends on what
        // other tests in it loaded (the cuda backend probes libcuda), so
        // only the shape is checked; tests/nvml_backend.rs checks a known
        // library showing up.
        let libs = gpu_libraries(std::process::id()).expect("our own maps are readable");
        assert!(libs.iter().all(|l| l.path.starts_with('/')), "{libs:?}");
    }

    #[test]
    fn a_process_that_does_not_exist_gives_nothing_and_libraries_say_it_is_gone() {
        // Linux pids never exceed 2^22 (PID_MAX_LIMIT), so this one is free.
        let pid = u32::MAX - 1;
        assert_eq!(process_info(pid), ProcessInfo::default());
        assert_eq!(gpu_libraries(pid), Err(MapsUnreadable::Gone));
    }

    #[test]
    fn user_names_fall_back_to_the_numeric_uid_and_cache_it() {
        let mut users = UserNames::default();
        // No real passwd file has a uid this large (distributions allocate
        // uids far below it), so it stays a number.
        assert_eq!(users.name(3_999_999_999), "3999999999");
        assert_eq!(users.names.len(), 1);
        assert_eq!(users.name(3_999_999_999), "3999999999");
        assert_eq!(users.names.len(), 1);
    }
}
