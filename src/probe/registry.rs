//! The attached probes: a scanner thread that looks for new sockets every
//! [`RESCAN_INTERVAL`], and one reader thread per socket that keeps the
//! latest hello/stats/segments per device, the OOM events and a status.
//!
//! Plain threads, not tokio tasks: `--once` has no runtime, the readers
//! block on sockets (with a short timeout so they notice [`Registry`] being
//! dropped), and nothing here touches the UI thread. The dashboard takes a
//! [`ProbeSnapshot`] (a clone) once per sample.

use std::collections::BTreeMap;
use std::io::{self, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::discovery::{self, Skipped};
use super::pid::{self, PidSource, VisibleDevices};
use super::protocol::{Hello, LineReader, Message, Oom, parse_line};
use super::snapshot_file::{self, SnapshotKind};
use crate::alloc::{DeviceStats, SegmentInfo};

/// How often the directories are scanned for new sockets.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(2);
/// How long a reader blocks on its socket before checking for shutdown.
const READ_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a disconnected probe whose socket is gone stays listed.
const KEEP_DISCONNECTED: Duration = Duration::from_secs(30);
/// OOM events kept per probe (the newest).
pub const MAX_OOM_EVENTS: usize = 32;
/// The reader's buffer (bytes): most lines fit in one read.
const READ_BUFFER: usize = 64 * 1024;
/// CUDA devices kept per probe: more than any machine gives one process.
/// Figures for further device numbers are dropped (and said), so a probe
/// cannot make vramtop hold an unbounded map.
pub const MAX_DEVICES_PER_PROBE: usize = 64;
/// Blocks kept per probe over all its devices (32 bytes each: 8 MiB). A
/// segments message that would pass it is dropped (and said). One 1 MiB
/// line holds at most about 60 000 blocks.
pub const MAX_BLOCKS_PER_PROBE: usize = 262_144;
/// Characters of an OOM message kept (PyTorch's are a few hundred).
pub const MAX_OOM_MESSAGE_CHARS: usize = 4096;

/// Where a probe's connection stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum ProbeStatus {
    /// Connected, waiting for the hello.
    Connecting,
    Connected,
    /// The connection ended (the probe exited, or the socket was stale).
    Disconnected(String),
    /// vramtop hung up: e.g. "protocol version 2 not supported".
    Rejected(String),
}

impl ProbeStatus {
    pub fn is_connected(&self) -> bool {
        matches!(self, ProbeStatus::Connecting | ProbeStatus::Connected)
    }
}

impl std::fmt::Display for ProbeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeStatus::Connecting => write!(f, "connecting"),
            ProbeStatus::Connected => write!(f, "attached"),
            ProbeStatus::Disconnected(why) => write!(f, "disconnected: {why}"),
            ProbeStatus::Rejected(why) => write!(f, "rejected: {why}"),
        }
    }
}

/// The latest figures of one CUDA device of a probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceData {
    pub stats: Option<DeviceStats>,
    pub segments: Option<Vec<SegmentInfo>>,
    /// The probe's clock (Unix seconds) of the last stats message.
    pub stats_time: Option<f64>,
    /// The probe's clock (Unix seconds) of the last segments message kept:
    /// segments come every 5 s and stats every second, so the two
    /// times say how much older the segments are than the stats.
    pub segments_time: Option<f64>,
    /// Keys of the last stats the probe sent as `null`: unknown, shown as
    /// n/a (their slot in `stats` is 0 and means nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_stats: Vec<String>,
    /// The last segments had blocks without a requested size (PyTorch
    /// older than 2.1): the internal fragmentation is unknown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub requested_unknown: bool,
    /// Why this device's figures are not shown: they cannot be true
    /// (negative bytes, allocated above reserved, reserved above the GPU's
    /// memory, a GPU the machine does not have).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

impl DeviceData {
    /// Whether the probe sent `key` of `memory_stats()` as a number (an
    /// absent key counts as known: it is PyTorch's 0).
    pub fn knows(&self, key: &str) -> bool {
        !self.unknown_stats.iter().any(|k| k == key)
    }

    /// Blocks held for this device.
    fn blocks(&self) -> usize {
        self.segments
            .as_ref()
            .map_or(0, |s| s.iter().map(|seg| seg.blocks.len()).sum())
    }
}

/// Why stats cannot be true, if they cannot: a negative byte or count
/// figure (only `max_split_size` may be -1), or more allocated than
/// reserved. `unknown` keys (sent as `null`) are not compared.
pub fn impossible_stats(stats: &DeviceStats, unknown: &[String]) -> Option<String> {
    let known = |k: &str| !unknown.iter().any(|u| u == k);
    if let Some((key, value)) = stats
        .memory_stats()
        .into_iter()
        .find(|(k, v)| *v < 0 && k != "max_split_size")
    {
        return Some(format!("{key} is negative ({value})"));
    }
    let allocated = stats.allocated_bytes.all.current;
    let reserved = stats.reserved_bytes.all.current;
    if known("allocated_bytes.all.current")
        && known("reserved_bytes.all.current")
        && allocated > reserved
    {
        return Some(format!(
            "allocated ({allocated} bytes) is more than reserved ({reserved} bytes)"
        ));
    }
    None
}

/// One OOM event as vramtop keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomEvent {
    /// 1 for the probe's first OOM, 2 for the next, …
    pub seq: u64,
    #[serde(flatten)]
    pub oom: Oom,
}

/// Everything known about one probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeState {
    pub socket: PathBuf,
    pub status: ProbeStatus,
    /// The last problem with the stream while it stayed open, e.g.
    /// "line 3: not JSON (…)": that line was skipped.
    pub problem: Option<String>,
    pub hello: Option<Hello>,
    /// The probe's pid in vramtop's PID namespace.
    pub host_pid: Option<u32>,
    /// The user the probe's process runs as (`SO_PEERCRED`'s uid, named
    /// by /etc/passwd, else the number), for the rows that list it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub pid_source: Option<PidSource>,
    /// `/proc/<host_pid>/cmdline` when the hello came, where the host pid
    /// is this machine's (the socket's peer credentials or a unique NSpid
    /// match, not the hello's own number): what a signal to the process
    /// checks it still runs before it is sent.
    #[serde(skip)]
    pub host_command: Option<String>,
    pub visible_devices: VisibleDevices,
    /// By CUDA ordinal.
    pub devices: BTreeMap<u32, DeviceData>,
    /// The newest [`MAX_OOM_EVENTS`] OOM events.
    pub ooms: Vec<OomEvent>,
    /// OOM events seen in total.
    pub oom_total: u64,
    /// OOM events seen per CUDA ordinal (at most [`MAX_DEVICES_PER_PROBE`]
    /// ordinals).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub oom_by_device: BTreeMap<u32, u64>,
    /// Lines read.
    pub lines: u64,
}

impl ProbeState {
    fn new(socket: PathBuf) -> Self {
        ProbeState {
            socket,
            status: ProbeStatus::Connecting,
            problem: None,
            hello: None,
            host_pid: None,
            user: None,
            pid_source: None,
            host_command: None,
            visible_devices: VisibleDevices::All,
            devices: BTreeMap::new(),
            ooms: Vec::new(),
            oom_total: 0,
            oom_by_device: BTreeMap::new(),
            lines: 0,
        }
    }

    /// The pid to show: the host pid, else the hello's.
    pub fn pid(&self) -> Option<u32> {
        self.host_pid.or(self.hello.as_ref().map(|h| h.pid))
    }

    /// Whether [`ProbeState::pid`] is a process of vramtop's PID namespace:
    /// found by the socket's peer credentials or a unique NSpid match, not
    /// the hello's own number (another namespace's, maybe).
    pub fn pid_is_this_machines(&self) -> bool {
        matches!(
            self.pid_source,
            Some(PidSource::PeerCred | PidSource::NsPid)
        )
    }

    /// The command line the hello sent, joined.
    pub fn command(&self) -> Option<String> {
        self.hello
            .as_ref()
            .filter(|h| !h.argv.is_empty())
            .map(|h| h.argv.join(" "))
    }

    /// The NVML index of CUDA ordinal `device`.
    pub fn gpu_index(&self, device: u32) -> Option<u32> {
        self.visible_devices.gpu_index(device)
    }

    /// Whether the first figures have arrived: the hello, and stats and
    /// segments of every device it lists (or the connection is over).
    pub fn ready(&self) -> bool {
        if !self.status.is_connected() {
            return true;
        }
        let Some(hello) = &self.hello else {
            return false;
        };
        hello.devices.iter().all(|d| {
            self.devices
                .get(d)
                .is_some_and(|x| x.stats.is_some() && x.segments.is_some())
        })
    }

    /// Applies one message; a message whose figures cannot be true is not
    /// kept, and what was wrong is returned (for [`ProbeState::problem`]).
    fn apply(&mut self, msg: Message) -> Result<(), String> {
        let figures = match &msg {
            Message::Stats(s) => Some(s.device),
            Message::Segments(s) => Some(s.device),
            Message::Oom(o) => Some(o.device),
            Message::Hello(_)
            | Message::Bye(_)
            | Message::Unknown(_)
            | Message::SnapshotStarted(_)
            | Message::SnapshotDone(_)
            | Message::SnapshotFailed(_) => None,
        };
        if let Some(device) = figures {
            if !self.status.is_connected() {
                return Err(format!("cuda:{device}: figures after bye are not shown"));
            }
            if self.hello.is_none() {
                return Err(format!("cuda:{device}: figures before hello are not shown"));
            }
            if !self.devices.contains_key(&device) && self.devices.len() >= MAX_DEVICES_PER_PROBE {
                return Err(format!(
                    "cuda:{device}: more than {MAX_DEVICES_PER_PROBE} devices; not kept"
                ));
            }
        }
        match msg {
            Message::Hello(h) => {
                if self.host_pid.is_none() {
                    match pid::host_pid_from_proc(h.pid) {
                        Some(p) => {
                            self.host_pid = Some(p);
                            self.pid_source = Some(PidSource::NsPid);
                        }
                        None => {
                            self.host_pid = Some(h.pid);
                            self.pid_source = Some(PidSource::Hello);
                        }
                    }
                }
                if let Some(p) = self.host_pid {
                    self.visible_devices = VisibleDevices::of_process(p);
                }
                self.host_command = self
                    .host_pid
                    .filter(|_| self.pid_is_this_machines())
                    .and_then(crate::device::procfs::command_line);
                self.hello = Some(h);
                self.status = ProbeStatus::Connected;
            }
            Message::Stats(s) => {
                let d = self.devices.entry(s.device).or_default();
                d.stats_time = s.time;
                if let Some(why) = impossible_stats(&s.stats, &s.unknown_keys) {
                    // Older figures are not shown in their place either.
                    d.stats = None;
                    d.unknown_stats.clear();
                    let problem = format!("cuda:{}: {why}; figures not shown", s.device);
                    d.invalid = Some(why);
                    return Err(problem);
                }
                d.stats = Some(s.stats);
                d.unknown_stats = s.unknown_keys;
                d.invalid = None;
            }
            Message::Segments(s) => {
                let others: usize = self
                    .devices
                    .iter()
                    .filter(|(k, _)| **k != s.device)
                    .map(|(_, d)| d.blocks())
                    .sum();
                let blocks: usize = s.segments.iter().map(|seg| seg.blocks.len()).sum();
                let d = self.devices.entry(s.device).or_default();
                if others.saturating_add(blocks) > MAX_BLOCKS_PER_PROBE {
                    d.segments = None;
                    d.segments_time = None;
                    return Err(format!(
                        "cuda:{}: segments with {blocks} blocks pass the {MAX_BLOCKS_PER_PROBE} \
                         blocks kept per probe; not kept",
                        s.device
                    ));
                }
                d.segments = Some(s.segments);
                d.segments_time = s.time;
                d.requested_unknown = s.requested_unknown;
            }
            Message::Oom(mut o) => {
                if let Some((cut, _)) = o.message.char_indices().nth(MAX_OOM_MESSAGE_CHARS) {
                    o.message.truncate(cut);
                    o.message.push('…');
                }
                // Offered (`O`, --once's JSON) only when it is a file the
                // probe could have written; else it is why there is none.
                if let Some(path) = o.snapshot.take() {
                    match snapshot_file::check(&path, SnapshotKind::Oom, discovery::current_uid()) {
                        Ok(path) => o.snapshot = Some(path),
                        Err(e) => o.snapshot_error = Some(e.to_string()),
                    }
                }
                self.oom_total += 1;
                if self.oom_by_device.contains_key(&o.device)
                    || self.oom_by_device.len() < MAX_DEVICES_PER_PROBE
                {
                    let n = self.oom_by_device.entry(o.device).or_insert(0);
                    *n = n.saturating_add(1);
                }
                self.ooms.push(OomEvent {
                    seq: self.oom_total,
                    oom: o,
                });
                if self.ooms.len() > MAX_OOM_EVENTS {
                    self.ooms.remove(0);
                }
            }
            Message::Bye(b) => {
                self.status = ProbeStatus::Disconnected(format!(
                    "the probe stopped ({})",
                    b.reason.as_deref().unwrap_or("no reason given")
                ));
            }
            // Answers to a request go only to the client that asked; the
            // registry's reader never asks.
            Message::Unknown(_)
            | Message::SnapshotStarted(_)
            | Message::SnapshotDone(_)
            | Message::SnapshotFailed(_) => {}
        }
        Ok(())
    }

    /// Flags the figures of devices that cannot be on this machine:
    /// `gpus` are the machine's GPUs as (NVML index, total memory in
    /// bytes). A device on a GPU the machine does not have, or whose
    /// reserved memory is more than its GPU's total, keeps no stats (so no
    /// view is drawn) and says why in `invalid` and `problem`. Nothing is
    /// checked against an empty list (the GPUs are not known).
    pub fn check_against_gpus(&mut self, gpus: &[(u32, Option<u64>)]) {
        if gpus.is_empty() {
            return;
        }
        let visible = self.visible_devices.clone();
        for (&device, d) in &mut self.devices {
            let Some(gpu) = visible.gpu_index(device) else {
                continue;
            };
            let why = match gpus.iter().find(|(index, _)| *index == gpu) {
                None => Some(format!(
                    "cuda:{device} is GPU {gpu}, which this machine does not have"
                )),
                Some((_, Some(total))) => d
                    .stats
                    .as_ref()
                    .filter(|_| d.knows("reserved_bytes.all.current"))
                    .map(|s| s.reserved_bytes.all.current)
                    .filter(|&r| u64::try_from(r).is_ok_and(|r| r > *total))
                    .map(|r| {
                        format!(
                            "cuda:{device}: reserved ({r} bytes) is more than GPU {gpu}'s \
                             {total} bytes"
                        )
                    }),
                Some((_, None)) => None,
            };
            if let Some(why) = why {
                d.stats = None;
                d.segments = None;
                d.segments_time = None;
                self.problem = Some(format!("{why}; figures not shown"));
                d.invalid = Some(why);
            }
        }
    }
}

/// The order probes are listed and chosen in: by pid, numerically (socket
/// paths sort "11144.sock" before "9180.sock"), those without a pid yet
/// last, then by socket path.
pub fn pid_order(p: &ProbeState) -> (bool, u32, PathBuf) {
    let pid = p.pid();
    (pid.is_none(), pid.unwrap_or(0), p.socket.clone())
}

/// What the registry knows at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProbeSnapshot {
    pub probes: Vec<ProbeState>,
    /// Directories and sockets that were not read, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

struct Entry {
    state: ProbeState,
    file_id: (u64, u64),
    /// A reader thread is running for it.
    reading: bool,
    /// When the reader stopped.
    ended: Option<Instant>,
}

struct Shared {
    dirs: discovery::ProbeDirs,
    uid: u32,
    stop: AtomicBool,
    entries: Mutex<BTreeMap<PathBuf, Entry>>,
    skipped: Mutex<Vec<Skipped>>,
    /// Scans done so far.
    scans: Mutex<u64>,
}

/// A poisoned lock only means a reader panicked mid-update; its data is
/// still the best there is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The attached probes. Dropping it stops the scanner and the readers
/// (each within [`READ_TIMEOUT`]).
pub struct Registry {
    shared: Arc<Shared>,
    scanner: Option<JoinHandle<()>>,
}

impl Registry {
    /// Watches the directories for the current user: `$VRAMTOP_PROBE_DIR`
    /// where set, else the default ones.
    pub fn start_default() -> Registry {
        let uid = discovery::current_uid();
        Registry::start_in(discovery::probe_dirs(uid), uid)
    }

    /// Watches `dirs`, trusting sockets owned by `uid`.
    pub fn start(dirs: Vec<PathBuf>, uid: u32) -> Registry {
        Registry::start_in(dirs.into(), uid)
    }

    /// Watches `dirs`, trusting sockets owned by `uid`; a skipped folder
    /// that came from `$VRAMTOP_PROBE_DIR` says so.
    pub fn start_in(dirs: discovery::ProbeDirs, uid: u32) -> Registry {
        let shared = Arc::new(Shared {
            dirs,
            uid,
            stop: AtomicBool::new(false),
            entries: Mutex::new(BTreeMap::new()),
            skipped: Mutex::new(Vec::new()),
            scans: Mutex::new(0),
        });
        let s = shared.clone();
        let scanner = std::thread::Builder::new()
            .name("vramtop-probe-scan".to_string())
            .spawn(move || scan_loop(&s))
            .map_err(|e| tracing::warn!(error = %e, "cannot start the probe scanner"))
            .ok();
        Registry { shared, scanner }
    }

    /// A copy of what is known now, the probes by pid ([`pid_order`]).
    pub fn snapshot(&self) -> ProbeSnapshot {
        let mut probes: Vec<ProbeState> = lock(&self.shared.entries)
            .values()
            .map(|e| e.state.clone())
            .collect();
        probes.sort_by_key(pid_order);
        let skipped = lock(&self.shared.skipped)
            .iter()
            .map(|s| (s.path.clone(), s.reason.clone()))
            .collect();
        ProbeSnapshot { probes, skipped }
    }

    /// Waits until the first scan is done and every probe it found has sent
    /// its first figures (or is gone), at most `timeout`. For `--once`.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let scanned = *lock(&self.shared.scans) > 0;
            if scanned && lock(&self.shared.entries).values().all(|e| e.state.ready()) {
                return;
            }
            if self.scanner.is_none() {
                return;
            }
            // Short: `--once` waits here for a scan that takes well under
            // a millisecond when no probe runs.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.scanner.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

fn scan_loop(shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        scan_once(shared);
        let until = Instant::now() + RESCAN_INTERVAL;
        // Parked rather than slept, so that dropping the registry (which
        // unparks) does not wait for a poll interval.
        while let Some(left) = until.checked_duration_since(Instant::now())
            && !shared.stop.load(Ordering::Relaxed)
        {
            std::thread::park_timeout(left);
        }
    }
}

fn scan_once(shared: &Arc<Shared>) {
    let mut scan = discovery::scan(&shared.dirs.dirs, shared.uid);
    shared.dirs.annotate(&mut scan.skipped);
    *lock(&shared.skipped) = scan.skipped;
    {
        let mut entries = lock(&shared.entries);
        for c in scan.candidates {
            let start = match entries.get(&c.path) {
                None => true,
                // A new socket file on a path whose reader has ended: a new
                // probe (a stale file is tried once, then left alone).
                Some(e) => !e.reading && e.file_id != c.file_id,
            };
            if !start {
                continue;
            }
            entries.insert(
                c.path.clone(),
                Entry {
                    state: ProbeState::new(c.path.clone()),
                    file_id: c.file_id,
                    reading: true,
                    ended: None,
                },
            );
            let s = shared.clone();
            let path = c.path.clone();
            let spawned = std::thread::Builder::new()
                .name("vramtop-probe-read".to_string())
                .spawn(move || read_probe(&s, path));
            if let Err(e) = spawned
                && let Some(entry) = entries.get_mut(&c.path)
            {
                entry.reading = false;
                entry.ended = Some(Instant::now());
                entry.state.status =
                    ProbeStatus::Disconnected(format!("cannot start a reader thread: {e}"));
            }
        }
        // Forget probes that ended a while ago and whose socket is gone.
        entries.retain(|path, e| {
            e.reading || path.exists() || e.ended.is_none_or(|t| t.elapsed() < KEEP_DISCONNECTED)
        });
    }
    *lock(&shared.scans) += 1;
}

fn update(shared: &Shared, path: &PathBuf, f: impl FnOnce(&mut ProbeState)) {
    if let Some(e) = lock(&shared.entries).get_mut(path) {
        f(&mut e.state);
    }
}

/// Connects to one probe and reads it until it ends or vramtop stops.
fn read_probe(shared: &Shared, path: PathBuf) {
    let end = read_stream(shared, &path);
    if let Some(e) = lock(&shared.entries).get_mut(&path) {
        e.reading = false;
        e.ended = Some(Instant::now());
        match end {
            End::Rejected(why) => e.state.status = ProbeStatus::Rejected(why),
            End::Closed(why) => {
                // A bye already said why.
                if e.state.status.is_connected() {
                    e.state.status = ProbeStatus::Disconnected(why);
                }
            }
        }
    }
}

/// Whether no process has pid `pid` here (kill(pid, 0) says ESRCH). A pid
/// that exists, or one we may not signal, is not gone.
fn process_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    // 0 and negative numbers name process groups, not a process.
    raw > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None)
            == Err(nix::errno::Errno::ESRCH)
}

/// Removes the socket at `path` when its probe is gone: the connection was
/// refused, and no process has the pid its name carries. Only the socket
/// file the scan found (same device and inode, a socket owned by us, in one
/// of our folders, not a symlink) is removed. Says what was done.
fn remove_if_stale(shared: &Shared, path: &Path) -> Option<String> {
    let pid: u32 = path.file_stem()?.to_str()?.parse().ok()?;
    if !process_gone(pid) {
        return None;
    }
    let file_id = lock(&shared.entries).get(path).map(|e| e.file_id)?;
    let in_our_dir = path
        .parent()
        .is_some_and(|parent| shared.dirs.dirs.iter().any(|d| d == parent));
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !in_our_dir
        || discovery::check_socket(&meta, shared.uid).is_some()
        || (meta.dev(), meta.ino()) != file_id
    {
        return None;
    }
    std::fs::remove_file(path).ok()?;
    tracing::info!(socket = %path.display(), pid, "removed a stale probe socket");
    Some(format!(
        "removed its stale socket (pid {pid} is gone and nothing listened)"
    ))
}

enum End {
    Closed(String),
    Rejected(String),
}

fn read_stream(shared: &Shared, path: &PathBuf) -> End {
    let stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => {
            if e.kind() == io::ErrorKind::ConnectionRefused
                && let Some(removed) = remove_if_stale(shared, path)
            {
                return End::Closed(removed);
            }
            return End::Closed(format!("cannot connect ({e}); a stale socket?"));
        }
    };
    if let Some((host_pid, uid)) = pid::peer_credentials(&stream) {
        // Once per connection: /etc/passwd is read here, on the probe's
        // thread, never by the dashboard's loop.
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let user =
            crate::device::procfs::parse_passwd(&passwd, uid).unwrap_or_else(|| uid.to_string());
        update(shared, path, |st| {
            st.user = Some(user);
            if let Some(host_pid) = host_pid {
                st.host_pid = Some(host_pid);
                st.pid_source = Some(PidSource::PeerCred);
            }
        });
    }
    if let Err(e) = stream.set_read_timeout(Some(READ_TIMEOUT)) {
        return End::Closed(format!("cannot set a read timeout: {e}"));
    }
    let mut reader = LineReader::new(BufReader::with_capacity(READ_BUFFER, stream));
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return End::Closed("vramtop stopped reading".to_string());
        }
        let item = match reader.next_line() {
            Ok(Some(item)) => item,
            Ok(None) => return End::Closed("connection closed".to_string()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return End::Closed(format!("read error: {e}")),
        };
        let (line, bytes) = match item {
            Ok(x) => x,
            Err(e) => {
                update(shared, path, |st| st.problem = Some(e.to_string()));
                continue;
            }
        };
        // Blank lines carry nothing.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line(&bytes) {
            Ok(msg) => update(shared, path, |st| {
                st.lines = line;
                if let Err(why) = st.apply(msg) {
                    st.problem = Some(format!("line {line}: {why}"));
                }
            }),
            Err(e) if e.is_version() => return End::Rejected(e.to_string()),
            Err(e) => update(shared, path, |st| {
                st.lines = line;
                st.problem = Some(format!("line {line}: {e}"));
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        d
    }

    /// Serves `lines` to the first client, then keeps the connection open
    /// until `hold` ends.
    fn serve(listener: UnixListener, lines: Vec<String>, close: bool) -> JoinHandle<()> {
        std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            for l in lines {
                let _ = conn.write_all(l.as_bytes());
            }
            if !close {
                std::thread::sleep(Duration::from_secs(3));
            }
        })
    }

    fn wait_for(reg: &Registry, what: impl Fn(&ProbeSnapshot) -> bool) -> ProbeSnapshot {
        // Bounded polling, not a timed assertion: the condition decides.
        for _ in 0..500 {
            let s = reg.snapshot();
            if what(&s) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        reg.snapshot()
    }

    const HELLO: &str =
        "{\"v\":1,\"type\":\"hello\",\"pid\":4242,\"argv\":[\"train.py\"],\"devices\":[0]}\n";
    const STATS: &str = "{\"v\":1,\"type\":\"stats\",\"device\":0,\"stats\":{\"allocated_bytes.all.current\":1024,\"reserved_bytes.all.current\":2048}}\n";
    const SEGS: &str = "{\"v\":1,\"type\":\"segments\",\"device\":0,\"segments\":[]}\n";

    #[test]
    fn a_probe_is_read_and_its_pid_comes_from_peer_credentials() {
        let d = private_dir();
        let l = UnixListener::bind(d.path().join("4242.sock")).expect("bind");
        let server = serve(
            l,
            vec![HELLO.into(), STATS.into(), SEGS.into(), "not json\n".into()],
            false,
        );
        let reg = Registry::start(vec![d.path().to_path_buf()], discovery::current_uid());
        let s = wait_for(&reg, |s| {
            s.probes.first().is_some_and(|p| p.problem.is_some())
        });
        let p = &s.probes[0];
        assert_eq!(p.status, ProbeStatus::Connected);
        assert!(p.ready());
        // The fake server is this test process.
        assert_eq!(p.host_pid, Some(std::process::id()));
        assert_eq!(p.pid_source, Some(PidSource::PeerCred));
        // Its user, as the process list names the others: this process's.
        let me = crate::device::procfs::process_info(std::process::id()).user;
        assert!(me.is_some(), "this process has a user");
        assert_eq!(p.user, me);
        assert_eq!(p.hello.as_ref().map(|h| h.pid), Some(4242));
        let stats = p.devices[&0].stats.as_ref().expect("stats");
        assert_eq!(stats.reserved_bytes.all.current, 2048);
        let problem = p.problem.as_deref().unwrap_or_default();
        assert!(problem.starts_with("line 4: not JSON"), "{problem}");
        drop(reg);
        let _ = server.join();
    }

    #[test]
    fn version_3_is_rejected_and_a_closed_probe_is_disconnected() {
        let d = private_dir();
        let v3 = UnixListener::bind(d.path().join("1.sock")).expect("bind");
        let bye = UnixListener::bind(d.path().join("2.sock")).expect("bind");
        let gone = UnixListener::bind(d.path().join("3.sock")).expect("bind");
        let servers = [
            serve(
                v3,
                vec!["{\"v\":3,\"type\":\"hello\",\"pid\":1}\n".into()],
                false,
            ),
            serve(
                bye,
                vec![
                    HELLO.into(),
                    "{\"v\":1,\"type\":\"bye\",\"reason\":\"exit\"}\n".into(),
                ],
                true,
            ),
            serve(gone, vec![HELLO.into()], true),
        ];
        let reg = Registry::start(vec![d.path().to_path_buf()], discovery::current_uid());
        let s = wait_for(&reg, |s| {
            s.probes.len() == 3 && s.probes.iter().all(|p| !p.status.is_connected())
        });
        let status: Vec<String> = s.probes.iter().map(|p| p.status.to_string()).collect();
        assert_eq!(
            status,
            vec![
                "rejected: protocol version 3 not supported".to_string(),
                "disconnected: the probe stopped (exit)".to_string(),
                "disconnected: connection closed".to_string(),
            ]
        );
        drop(reg);
        for s in servers {
            let _ = s.join();
        }
    }

    /// A probe state fed `lines` in order, with each line's problem.
    fn fed(lines: &[&str]) -> (ProbeState, Vec<Option<String>>) {
        let mut st = ProbeState::new(PathBuf::from("/x/1.sock"));
        // No /proc lookups of a made-up pid: the host pid is known.
        st.host_pid = Some(std::process::id());
        let problems = lines
            .iter()
            .map(|l| {
                let msg = parse_line(l.trim_end().as_bytes()).expect("a valid line");
                st.apply(msg).err()
            })
            .collect();
        (st, problems)
    }

    fn stats_line(device: u32, allocated: i64, reserved: i64) -> String {
        format!(
            "{{\"v\":1,\"type\":\"stats\",\"device\":{device},\"stats\":{{\"allocated_bytes.all.current\":{allocated},\"reserved_bytes.all.current\":{reserved}}}}}"
        )
    }

    #[test]
    fn the_times_of_the_last_stats_and_segments_are_kept_apart() {
        let segs = "{\"v\":1,\"type\":\"segments\",\"time\":100.5,\"device\":0,\"segments\":[]}";
        let stats = "{\"v\":1,\"type\":\"stats\",\"time\":104.5,\"device\":0,\"stats\":{}}";
        let (st, problems) = fed(&[HELLO, segs, stats]);
        assert_eq!(problems, vec![None, None, None]);
        let d = &st.devices[&0];
        assert_eq!((d.segments_time, d.stats_time), (Some(100.5), Some(104.5)));
    }

    #[test]
    fn figures_before_hello_are_flagged_and_not_kept() {
        let (st, problems) = fed(&[STATS, SEGS, HELLO]);
        assert!(st.devices.is_empty(), "{:?}", st.devices);
        let p = problems[0].as_deref().unwrap_or_default();
        assert!(p.contains("before hello"), "{p}");
        assert!(problems[1].is_some());
        assert_eq!(problems[2], None);
    }

    #[test]
    fn figures_after_bye_are_flagged_and_not_kept() {
        let bye = "{\"v\":1,\"type\":\"bye\",\"reason\":\"exit\"}";
        let (st, problems) = fed(&[HELLO, bye, STATS]);
        assert!(st.devices.is_empty());
        let p = problems[2].as_deref().unwrap_or_default();
        assert!(p.contains("after bye"), "{p}");
    }

    #[test]
    fn negative_bytes_are_flagged_and_not_shown() {
        let (st, problems) = fed(&[HELLO, STATS, &stats_line(0, -5, 2048)]);
        let d = &st.devices[&0];
        assert_eq!(d.stats, None, "the earlier figures are not shown either");
        let why = d.invalid.as_deref().unwrap_or_default();
        assert!(
            why.contains("allocated_bytes.all.current is negative"),
            "{why}"
        );
        assert!(
            problems[2]
                .as_deref()
                .is_some_and(|p| p.contains("not shown"))
        );
    }

    #[test]
    fn allocated_above_reserved_is_flagged_and_good_figures_clear_it() {
        let (mut st, problems) = fed(&[HELLO, &stats_line(0, 4096, 2048)]);
        assert_eq!(st.devices[&0].stats, None);
        let p = problems[1].as_deref().unwrap_or_default();
        assert!(
            p.contains("allocated (4096 bytes) is more than reserved (2048"),
            "{p}"
        );
        let good = parse_line(STATS.trim_end().as_bytes()).expect("valid");
        assert_eq!(st.apply(good), Ok(()));
        assert!(st.devices[&0].stats.is_some());
        assert_eq!(st.devices[&0].invalid, None);
    }

    #[test]
    fn a_null_total_is_not_compared() {
        let line = "{\"v\":1,\"type\":\"stats\",\"device\":0,\"stats\":{\"allocated_bytes.all.current\":4096,\"reserved_bytes.all.current\":null}}";
        let (st, problems) = fed(&[HELLO, line]);
        assert_eq!(problems[1], None);
        let d = &st.devices[&0];
        assert!(d.stats.is_some());
        assert!(!d.knows("reserved_bytes.all.current"));
        assert!(d.knows("allocated_bytes.all.current"));
    }

    #[test]
    fn reserved_above_the_gpus_total_and_a_missing_gpu_are_flagged() {
        let (mut st, _) = fed(&[HELLO, &stats_line(0, 1024, 2048), &stats_line(1, 1, 1)]);
        // GPU 0 has 1 KiB; the machine has no GPU 1.
        st.check_against_gpus(&[(0, Some(1024))]);
        let why0 = st.devices[&0].invalid.as_deref().unwrap_or_default();
        assert!(
            why0.contains("reserved (2048 bytes) is more than GPU 0's 1024"),
            "{why0}"
        );
        let why1 = st.devices[&1].invalid.as_deref().unwrap_or_default();
        assert!(
            why1.contains("GPU 1, which this machine does not have"),
            "{why1}"
        );
        assert!(st.devices.values().all(|d| d.stats.is_none()));
        assert!(st.problem.is_some());
        // Within the GPU, or no GPU list at all: nothing flagged.
        let (mut ok, _) = fed(&[HELLO, &stats_line(0, 1024, 2048)]);
        ok.check_against_gpus(&[(0, Some(4096))]);
        ok.check_against_gpus(&[]);
        assert_eq!(ok.devices[&0].invalid, None);
        assert!(ok.devices[&0].stats.is_some());
    }

    #[test]
    fn a_probe_holds_at_most_max_devices_and_max_blocks() {
        let many: Vec<String> = (0..MAX_DEVICES_PER_PROBE as u32 + 10)
            .map(|d| stats_line(d, 1, 1))
            .collect();
        let mut lines = vec![HELLO];
        lines.extend(many.iter().map(String::as_str));
        let (st, problems) = fed(&lines);
        assert_eq!(st.devices.len(), MAX_DEVICES_PER_PROBE);
        let last = problems.last().cloned().flatten().unwrap_or_default();
        assert!(last.contains("more than 64 devices"), "{last}");
        // One segment of MAX_BLOCKS_PER_PROBE + 1 one-byte blocks.
        let n = MAX_BLOCKS_PER_PROBE + 1;
        let blocks = vec!["[1,1,\"inactive\"]"; n].join(",");
        let segs = format!(
            "{{\"v\":1,\"type\":\"segments\",\"device\":0,\"segments\":[{{\"address\":0,\"total_size\":{n},\"segment_type\":\"small\",\"blocks\":[{blocks}]}}]}}"
        );
        let mut st = ProbeState::new(PathBuf::from("/x/1.sock"));
        st.host_pid = Some(1);
        let hello = parse_line(HELLO.trim_end().as_bytes()).expect("valid");
        assert_eq!(st.apply(hello), Ok(()));
        let msg = parse_line(segs.as_bytes()).expect("valid");
        let why = st.apply(msg).expect_err("too many blocks");
        assert!(why.contains("blocks kept per probe"), "{why}");
        assert_eq!(st.devices[&0].segments, None);
    }

    #[test]
    fn a_refused_socket_of_a_gone_process_is_removed_and_said_once() {
        let d = private_dir();
        // No process has this pid (above any pid_max).
        let gone = d.path().join("2147480000.sock");
        drop(UnixListener::bind(&gone).expect("bind"));
        // A plain file of that kind of name is not a socket: never removed.
        let file = d.path().join("2147480001.sock");
        std::fs::write(&file, b"not a socket").expect("write");
        let reg = Registry::start(vec![d.path().to_path_buf()], discovery::current_uid());
        let s = wait_for(&reg, |s| {
            s.probes.first().is_some_and(|p| !p.status.is_connected())
        });
        assert_eq!(s.probes.len(), 1);
        let status = s.probes[0].status.to_string();
        assert!(status.contains("removed its stale socket"), "{status}");
        assert!(!gone.exists());
        assert!(file.exists());
        // The next scans find nothing new to say about it.
        reg.wait_ready(Duration::from_secs(5));
        assert_eq!(reg.snapshot().probes.len(), 1);
    }

    #[test]
    fn a_refused_socket_of_a_live_process_is_kept() {
        assert!(!process_gone(std::process::id()));
        assert!(!process_gone(0), "0 is a process group");
        assert!(process_gone(2_147_480_000));
    }

    #[test]
    fn a_stale_socket_is_a_quiet_disconnect() {
        let d = private_dir();
        // Named for a live process (this one): not removed, only reported.
        drop(
            UnixListener::bind(d.path().join(format!("{}.sock", std::process::id())))
                .expect("bind"),
        );
        let reg = Registry::start(vec![d.path().to_path_buf()], discovery::current_uid());
        reg.wait_ready(Duration::from_secs(5));
        let s = reg.snapshot();
        assert_eq!(s.probes.len(), 1);
        assert!(
            s.probes[0].status.to_string().contains("cannot connect"),
            "{}",
            s.probes[0].status
        );
    }
}
