//! Asking a probe for a snapshot (protocol v2): connect to its socket, read
//! its hello, send one `snapshot_request` line with an id of our own and wait,
//! at most a given time, for the `snapshot_done` or `snapshot_failed` that
//! echoes it. Figures the probe streams meanwhile are skipped.
//!
//! The probe alone chooses where it writes: the answer names the file, and
//! the caller copies it where the user wants it.

use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::discovery;
use super::pid;
use super::protocol::{
    Hello, LineReader, Message, SnapshotDone, parse_line, snapshot_request_line,
};
use crate::quote::cut;

/// How long one read blocks before the deadline is checked again.
const READ_SLICE: Duration = Duration::from_millis(200);
/// How long writing the request may block (it is one short line).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Sockets tried when looking for a pid that no socket file is named for.
const MAX_SOCKETS_TRIED: usize = 256;

/// Why no snapshot came back.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no probe found for pid {pid} (looked in {dirs}){}; start the process under \
         `python -m vramtop_probe`",
        probes_there(others)
    )]
    NoProbe {
        pid: u32,
        dirs: String,
        /// Pids whose probes were found there instead, ascending.
        others: Vec<u32>,
    },
    /// No probe, and no process of that pid either (by `/proc`): a
    /// mistyped pid or one that has ended, which no probe advice fixes.
    #[error(
        "no process {pid} is running (give the pid as ps shows it here){}",
        probes_for(others)
    )]
    NoProcess {
        pid: u32,
        /// Pids whose probes were found, ascending.
        others: Vec<u32>,
    },
    #[error("cannot connect to the probe of pid {pid} at {}: {source}", socket.display())]
    Connect {
        pid: u32,
        socket: PathBuf,
        source: io::Error,
    },
    #[error(
        "the probe of {pid} speaks protocol v1 (figures only): upgrade vramtop_probe to \
         capture snapshots"
    )]
    V1Probe { pid: u32 },
    #[error("the probe of {pid} does not serve snapshot requests (no \"snapshot\" capability)")]
    NoCapability { pid: u32 },
    #[error("the probe of {pid} could not take a snapshot: {reason}")]
    Failed { pid: u32, reason: String },
    #[error("no snapshot from the probe of {pid} within {} ({stage})", duration_words(*waited))]
    Timeout {
        pid: u32,
        waited: Duration,
        stage: WaitStage,
        /// Where the probe's file may still appear, at
        /// [`WaitStage::Started`] from a probe that said its folder: the
        /// path with `*` for the part written with it (the time), as
        /// [`pending_file`] makes it.
        file: Option<PathBuf>,
    },
    #[error("the probe of {pid} closed the connection before answering ({why})")]
    Closed { pid: u32, why: String },
    #[error("the probe of {pid} sent {what}")]
    Protocol { pid: u32, what: String },
}

/// How far a snapshot request got before its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStage {
    /// The probe sent no hello: the request was never sent.
    NoHello,
    /// The request was sent and the probe said nothing of it.
    Asked,
    /// The probe acknowledged the request (`snapshot_started`) but had
    /// not finished the snapshot: a large one takes longer.
    Started,
}

impl std::fmt::Display for WaitStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitStage::NoHello => "no hello from the probe",
            WaitStage::Asked => "the request was sent; the probe did not answer",
            WaitStage::Started => {
                "the probe acknowledged the request and had not finished the snapshot"
            }
        })
    }
}

/// The most other probes' pids a "no probe" message lists.
const MAX_OTHERS_LISTED: usize = 8;

/// ", probes there: pids 12, 34" (the first few), or nothing.
fn probes_there(others: &[u32]) -> String {
    if others.is_empty() {
        return String::new();
    }
    format!(", probes there: {}", pids_listed(others))
}

/// "; probes are running for pids 12, 34" (the first few), or nothing.
fn probes_for(others: &[u32]) -> String {
    if others.is_empty() {
        return String::new();
    }
    format!("; probes are running for {}", pids_listed(others))
}

/// "pids 12, 34" (the first few, then how many more), or "pid 12".
fn pids_listed(others: &[u32]) -> String {
    let listed: Vec<String> = others
        .iter()
        .take(MAX_OTHERS_LISTED)
        .map(u32::to_string)
        .collect();
    let more = others.len().saturating_sub(MAX_OTHERS_LISTED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let noun = if others.len() == 1 { "pid" } else { "pids" };
    format!("{noun} {}{more}", listed.join(", "))
}

/// Where a probe writes its snapshots when not told otherwise
/// (docs/probe-protocol.md, "Files"), for a timeout's message when the
/// probe did not say its folder (one older than `snapshot_started`'s
/// `dir`).
pub const PROBE_DEFAULT_DIR: &str = "~/.local/state/vramtop/snapshots";

impl ClientError {
    /// Where the probe may still write its file after a wait that ran out
    /// once it had begun the snapshot (it goes on, and nobody copies or
    /// removes that file): the file as far as it is known, else its
    /// default folder. `None` for every other error.
    pub fn may_still_write(&self) -> Option<String> {
        let ClientError::Timeout {
            stage: WaitStage::Started,
            file,
            ..
        } = self
        else {
            return None;
        };
        Some(match file {
            Some(f) => f.display().to_string(),
            None => {
                format!(
                    "into its snapshot folder ({PROBE_DEFAULT_DIR} unless it was given another)"
                )
            }
        })
    }

    /// Whether asking again cannot help: there is no probe to ask, or it
    /// cannot answer (exit 2 at the command line, like other bad input).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ClientError::NoProbe { .. }
                | ClientError::NoProcess { .. }
                | ClientError::Connect { .. }
                | ClientError::V1Probe { .. }
                | ClientError::NoCapability { .. }
        )
    }
}

/// How a request is getting on.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The hello is read and the request sent.
    Asked(Box<Hello>),
    /// The probe began taking the snapshot.
    Started,
}

/// A fresh request id: this process, the time and a counter, so two
/// vramtops (or two requests of one) never share one.
pub fn new_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("vramtop-{}-{nanos:x}-{n}", std::process::id())
}

/// The socket of the probe of host pid `pid` in `dirs` (sockets owned by
/// `uid` in private folders only, as the dashboard reads them): the one
/// named `<pid>.sock` whose peer is that process, else the first whose
/// peer credentials say `pid` (a probe in a container names its socket by
/// the container's pid).
pub fn find_socket(
    pid: u32,
    dirs: &discovery::ProbeDirs,
    uid: u32,
) -> Result<PathBuf, ClientError> {
    let scan = discovery::scan(&dirs.dirs, uid);
    let peer_pid = |path: &Path| {
        UnixStream::connect(path)
            .ok()
            .and_then(|s| pid::peer_credentials(&s))
            .and_then(|(p, _)| p)
    };
    let (named, others): (Vec<_>, Vec<_>) = scan
        .candidates
        .into_iter()
        .partition(|c| c.pid_hint == Some(pid));
    // The probes met on the way, to name them when none is `pid`'s.
    let mut seen = std::collections::BTreeSet::new();
    for c in &named {
        // No credentials (not Linux): the name is all there is.
        match peer_pid(&c.path) {
            None => return Ok(c.path.clone()),
            Some(p) if p == pid => return Ok(c.path.clone()),
            Some(p) => {
                seen.insert(p);
            }
        }
    }
    for c in others.iter().take(MAX_SOCKETS_TRIED) {
        match peer_pid(&c.path) {
            Some(p) if p == pid => return Ok(c.path.clone()),
            Some(p) => {
                seen.insert(p);
            }
            // A socket nobody answers on is no probe to suggest.
            None => {}
        }
    }
    if pid::process_running(pid) == Some(false) {
        return Err(ClientError::NoProcess {
            pid,
            others: seen.into_iter().collect(),
        });
    }
    Err(ClientError::NoProbe {
        pid,
        dirs: dirs.describe(),
        others: seen.into_iter().collect(),
    })
}

/// Asks the probe at `socket` (of host pid `pid`, for messages) for a
/// snapshot and waits at most `timeout` for its answer, telling `progress`
/// how it goes. Returns the probe's answer: where it wrote the file.
pub fn request_snapshot(
    socket: &Path,
    pid: u32,
    timeout: Duration,
    mut progress: impl FnMut(Progress),
) -> Result<SnapshotDone, ClientError> {
    let deadline = Instant::now() + timeout;
    let stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        pid,
        socket: socket.to_path_buf(),
        source,
    })?;
    let mut writer = stream.try_clone().map_err(|source| ClientError::Connect {
        pid,
        socket: socket.to_path_buf(),
        source,
    })?;
    let timeouts = stream.try_clone().map_err(|source| ClientError::Connect {
        pid,
        socket: socket.to_path_buf(),
        source,
    })?;
    let mut reader = LineReader::new(BufReader::new(stream));
    let id = new_request_id();
    let mut asked = false;
    let mut started = false;
    // The hello names the file, the `snapshot_started` its folder.
    let mut hello_seen: Option<Hello> = None;
    let mut file = None;
    loop {
        let now = Instant::now();
        let Some(left) = deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
        else {
            return Err(ClientError::Timeout {
                pid,
                waited: timeout,
                stage: match (asked, started) {
                    (_, true) => WaitStage::Started,
                    (true, false) => WaitStage::Asked,
                    (false, false) => WaitStage::NoHello,
                },
                file,
            });
        };
        // A zero timeout would mean "block forever".
        let slice = left.min(READ_SLICE).max(Duration::from_millis(1));
        if let Err(e) = timeouts.set_read_timeout(Some(slice)) {
            return Err(ClientError::Closed {
                pid,
                why: format!("cannot set a read timeout: {e}"),
            });
        }
        let item = match reader.next_line() {
            Ok(Some(item)) => item,
            Ok(None) => {
                return Err(ClientError::Closed {
                    pid,
                    why: "connection closed".to_string(),
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                return Err(ClientError::Closed {
                    pid,
                    why: format!("read error: {e}"),
                });
            }
        };
        // A line the reader or parser refuses is skipped, as the dashboard
        // skips it: only the answer matters here.
        let Ok((_, bytes)) = item else { continue };
        let message = match parse_line(&bytes) {
            Ok(m) => m,
            Err(e) if !asked && e.is_version() => {
                return Err(ClientError::Protocol {
                    pid,
                    what: e.to_string(),
                });
            }
            Err(_) => continue,
        };
        match message {
            Message::Hello(hello) if !asked => {
                if hello.version < 2 {
                    return Err(ClientError::V1Probe { pid });
                }
                if !hello.serves_snapshots() {
                    return Err(ClientError::NoCapability { pid });
                }
                let line = snapshot_request_line(&id).ok_or_else(|| ClientError::Protocol {
                    pid,
                    what: "nothing: vramtop made a bad request id".to_string(),
                })?;
                let sent = writer
                    .set_write_timeout(Some(WRITE_TIMEOUT))
                    .and_then(|()| writer.write_all(line.as_bytes()))
                    .and_then(|()| writer.flush());
                if let Err(e) = sent {
                    return Err(ClientError::Closed {
                        pid,
                        why: format!("cannot send the request: {e}"),
                    });
                }
                asked = true;
                hello_seen = Some(hello.clone());
                progress(Progress::Asked(Box::new(hello)));
            }
            _ if !asked => {
                return Err(ClientError::Protocol {
                    pid,
                    what: "figures before its hello".to_string(),
                });
            }
            Message::SnapshotStarted(s) if s.id == id => {
                started = true;
                file = s
                    .dir
                    .as_deref()
                    .map(|dir| pending_file(dir, hello_seen.as_ref()));
                progress(Progress::Started);
            }
            Message::SnapshotDone(d) if d.id == id => return Ok(d),
            // No id: the probe could not read our (one) request.
            Message::SnapshotFailed(f) if f.id.as_deref().is_none_or(|i| i == id) => {
                return Err(ClientError::Failed {
                    pid,
                    reason: cut(&f.reason).to_string(),
                });
            }
            Message::Bye(b) => {
                return Err(ClientError::Closed {
                    pid,
                    why: format!(
                        "the probe stopped: {}",
                        cut(b.reason.as_deref().unwrap_or("no reason given"))
                    ),
                });
            }
            _ => {}
        }
    }
}

/// The file a probe that began a request writes into `dir`, as far as it
/// is known before it is written: the probe names it
/// `{host}-{pid}-rank{rank or x}-{UTC time}[-{n}]-demand.pickle`
/// (docs/probe-protocol.md, "Files"), the time and any `-{n}` here a `*`
/// (a pattern a shell lists), the host as the probe makes it safe. Without
/// a hello's host, all before `-demand.pickle` is the `*`.
pub fn pending_file(dir: &Path, hello: Option<&Hello>) -> PathBuf {
    let name = match hello.and_then(|h| Some((h, h.host.as_deref()?))) {
        Some((h, host)) => {
            let safe: String = host
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let safe = if safe.is_empty() { "host".into() } else { safe };
            let rank = h.rank.map_or_else(|| "x".to_string(), |r| r.to_string());
            format!("{safe}-{}-rank{rank}-*-demand.pickle", h.pid)
        }
        None => "*-demand.pickle".to_string(),
    };
    dir.join(name)
}

/// A wait as `--timeout` is written: "300ms" below a second, else
/// seconds ("60s", "1.5s").
fn duration_words(waited: Duration) -> String {
    let ms = waited.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}s", waited.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wait_reads_as_its_option_is_written() {
        assert_eq!(duration_words(Duration::from_millis(10)), "10ms");
        assert_eq!(duration_words(Duration::from_secs(60)), "60s");
        assert_eq!(duration_words(Duration::from_millis(1500)), "1.5s");
    }

    use super::*;
    use crate::probe::protocol::valid_request_id;
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        d
    }

    /// A probe that sends `hello`, then answers the first request line with
    /// `answer(id)` (lines, newline included). Returns the request it read.
    fn fake_probe(
        listener: UnixListener,
        hello: &'static str,
        answer: impl FnOnce(&str) -> Vec<String> + Send + 'static,
    ) -> std::thread::JoinHandle<Option<String>> {
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().ok()?;
            conn.write_all(hello.as_bytes()).ok()?;
            conn.write_all(b"{\"v\":2,\"type\":\"stats\",\"device\":0,\"stats\":{}}\n")
                .ok()?;
            let mut line = String::new();
            let mut r = io::BufReader::new(conn.try_clone().ok()?);
            r.read_line(&mut line).ok()?;
            let v: serde_json::Value = serde_json::from_str(line.trim_end()).ok()?;
            let id = v["id"].as_str()?.to_string();
            for l in answer(&id) {
                conn.write_all(l.as_bytes()).ok()?;
            }
            std::thread::sleep(Duration::from_millis(300));
            Some(line)
        })
    }

    const HELLO_V2: &str =
        "{\"v\":2,\"type\":\"hello\",\"pid\":7,\"devices\":[0],\"capabilities\":[\"snapshot\"]}\n";

    #[test]
    fn a_request_echoing_our_id_returns_the_probes_path() {
        let d = private_dir();
        let sock = d.path().join("7.sock");
        let server = fake_probe(UnixListener::bind(&sock).expect("bind"), HELLO_V2, |id| {
            vec![
                // Someone else's answer is not ours.
                "{\"v\":2,\"type\":\"snapshot_done\",\"id\":\"other\",\"path\":\"/wrong\"}\n"
                    .to_string(),
                format!("{{\"v\":2,\"type\":\"snapshot_started\",\"id\":\"{id}\"}}\n"),
                format!(
                    "{{\"v\":2,\"type\":\"snapshot_done\",\"id\":\"{id}\",\"path\":\"/s/a.pickle\",\"bytes\":10,\"has_trace\":false,\"segments\":2}}\n"
                ),
            ]
        });
        let mut seen = Vec::new();
        let done = request_snapshot(&sock, 7, Duration::from_secs(10), |p| seen.push(p))
            .expect("answered");
        assert_eq!(done.path, PathBuf::from("/s/a.pickle"));
        assert!(!done.has_trace);
        assert!(matches!(seen[0], Progress::Asked(_)));
        assert_eq!(seen[1], Progress::Started);
        let request = server.join().expect("server").expect("a request line");
        let v: serde_json::Value = serde_json::from_str(request.trim_end()).expect("JSON");
        assert_eq!(v["type"], "snapshot_request");
        assert!(v["id"].as_str().is_some_and(valid_request_id));
        assert_eq!(v.as_object().map(|o| o.len()), Some(3), "v, type, id only");
    }

    #[test]
    fn a_failure_says_the_probes_reason() {
        let d = private_dir();
        let sock = d.path().join("7.sock");
        let _server = fake_probe(UnixListener::bind(&sock).expect("bind"), HELLO_V2, |id| {
            vec![format!(
                "{{\"v\":2,\"type\":\"snapshot_failed\",\"id\":\"{id}\",\"reason\":\"CUDA is not initialised in this process yet\"}}\n"
            )]
        });
        let e = request_snapshot(&sock, 7, Duration::from_secs(10), |_| {}).expect_err("failed");
        assert_eq!(
            e.to_string(),
            "the probe of 7 could not take a snapshot: CUDA is not initialised in this process yet"
        );
        assert!(!e.is_bad_input());
    }

    #[test]
    fn a_v1_probe_and_one_without_the_capability_are_never_asked() {
        for (hello, want) in [
            (
                "{\"v\":1,\"type\":\"hello\",\"pid\":7}\n",
                "speaks protocol v1 (figures only): upgrade vramtop_probe",
            ),
            (
                "{\"v\":2,\"type\":\"hello\",\"pid\":7,\"capabilities\":[]}\n",
                "does not serve snapshot requests",
            ),
        ] {
            let d = private_dir();
            let sock = d.path().join("7.sock");
            let listener = UnixListener::bind(&sock).expect("bind");
            let server = std::thread::spawn(move || {
                let (mut conn, _) = listener.accept().ok()?;
                conn.write_all(hello.as_bytes()).ok()?;
                conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                let mut line = String::new();
                // The client hangs up without a request: EOF, empty line.
                io::BufReader::new(conn).read_line(&mut line).ok()?;
                Some(line)
            });
            let e = request_snapshot(&sock, 7, Duration::from_secs(10), |_| {}).expect_err(want);
            assert!(e.to_string().contains(want), "{e}");
            assert!(e.is_bad_input());
            assert_eq!(server.join().expect("server"), Some(String::new()));
        }
    }

    #[test]
    fn a_silent_probe_times_out_and_says_the_request_was_sent() {
        let d = private_dir();
        let sock = d.path().join("7.sock");
        let _server = fake_probe(UnixListener::bind(&sock).expect("bind"), HELLO_V2, |_| {
            Vec::new()
        });
        let e =
            request_snapshot(&sock, 7, Duration::from_millis(100), |_| {}).expect_err("timeout");
        assert!(matches!(e, ClientError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("did not answer"), "{e}");
    }

    #[test]
    fn a_probe_that_acknowledged_but_did_not_finish_times_out_saying_so() {
        let d = private_dir();
        let sock = d.path().join("7.sock");
        let _server = fake_probe(UnixListener::bind(&sock).expect("bind"), HELLO_V2, |id| {
            vec![format!(
                "{{\"v\":2,\"type\":\"snapshot_started\",\"id\":\"{id}\"}}\n"
            )]
        });
        let e =
            request_snapshot(&sock, 7, Duration::from_millis(150), |_| {}).expect_err("timeout");
        assert!(
            matches!(
                e,
                ClientError::Timeout {
                    stage: WaitStage::Started,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("acknowledged the request and had not finished"),
            "{e}"
        );
        assert!(!e.to_string().contains("did not answer"), "{e}");
    }

    #[test]
    fn a_probe_that_began_times_out_naming_the_file_it_may_still_write() {
        let d = private_dir();
        let sock = d.path().join("7.sock");
        let hello = "{\"v\":2,\"type\":\"hello\",\"pid\":7,\"host\":\"node 7\",\"rank\":3,\"capabilities\":[\"snapshot\"]}\n";
        let _server = fake_probe(UnixListener::bind(&sock).expect("bind"), hello, |id| {
            vec![format!(
                "{{\"v\":2,\"type\":\"snapshot_started\",\"id\":\"{id}\",\"dir\":\"/s/snaps\"}}\n"
            )]
        });
        let e =
            request_snapshot(&sock, 7, Duration::from_millis(150), |_| {}).expect_err("timeout");
        let ClientError::Timeout { file, .. } = &e else {
            panic!("a timeout expected, got {e}");
        };
        assert_eq!(
            file.as_deref(),
            Some(Path::new("/s/snaps/node_7-7-rank3-*-demand.pickle"))
        );
        // No host or rank in the hello: what is known.
        assert_eq!(
            pending_file(Path::new("/d"), None),
            PathBuf::from("/d/*-demand.pickle")
        );
    }

    /// A pid above Linux's largest `pid_max` (2^22): no process has it.
    const NO_SUCH_PID: u32 = (1 << 22) + 1;

    /// A running process without a probe: this test's parent (the test
    /// harness's runner or a shell), never one with a socket in a fresh
    /// folder.
    fn live_pid_without_probe() -> u32 {
        std::os::unix::process::parent_id()
    }

    #[test]
    fn no_probe_for_the_pid_names_the_probes_that_are_there() {
        let d = private_dir();
        let _listener = UnixListener::bind(d.path().join("123.sock")).expect("bind");
        let e = find_socket(
            live_pid_without_probe(),
            &vec![d.path().to_path_buf()].into(),
            discovery::current_uid(),
        )
        .expect_err("not that pid");
        let me = std::process::id();
        let ClientError::NoProbe { others, .. } = &e else {
            panic!("no probe expected, got {e}");
        };
        assert_eq!(others, &vec![me], "the socket's peer is this test");
        assert!(
            e.to_string().contains(&format!("probes there: pid {me};")),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'));
        let many: Vec<u32> = (1..=20).collect();
        let said = probes_there(&many);
        assert!(
            said.ends_with("1, 2, 3, 4, 5, 6, 7, 8 and 12 more"),
            "{said}"
        );
    }

    #[test]
    fn a_pid_no_process_has_is_said_so_not_told_to_start_a_probe() {
        if pid::process_running(NO_SUCH_PID).is_none() {
            eprintln!("skipped: no /proc to tell a process is running");
            return;
        }
        let d = private_dir();
        let _listener = UnixListener::bind(d.path().join("123.sock")).expect("bind");
        let e = find_socket(
            NO_SUCH_PID,
            &vec![d.path().to_path_buf()].into(),
            discovery::current_uid(),
        )
        .expect_err("no such process");
        let me = std::process::id();
        assert!(
            matches!(&e, ClientError::NoProcess { pid, others } if *pid == NO_SUCH_PID && others == &vec![me]),
            "{e}"
        );
        assert!(e.is_bad_input());
        assert_eq!(
            e.to_string(),
            format!(
                "no process {NO_SUCH_PID} is running (give the pid as ps shows it here); \
                 probes are running for pid {me}"
            )
        );
        assert!(!e.to_string().contains("vramtop_probe"), "{e}");
    }

    #[test]
    fn a_process_is_running_only_where_proc_can_tell() {
        let proc = tempfile::tempdir().expect("temp dir");
        let p = proc.path();
        assert_eq!(
            pid::process_running_in(p, 42),
            None,
            "an empty folder: no /proc"
        );
        std::fs::create_dir(p.join("self")).expect("self");
        assert_eq!(pid::process_running_in(p, 42), None, "hidepid hides pid 1");
        std::fs::create_dir(p.join("1")).expect("1");
        assert_eq!(pid::process_running_in(p, 42), Some(false));
        std::fs::create_dir(p.join("42")).expect("42");
        assert_eq!(pid::process_running_in(p, 42), Some(true));
    }

    #[test]
    fn no_socket_for_the_pid_is_no_probe() {
        let d = private_dir();
        let live = live_pid_without_probe();
        let e = find_socket(
            live,
            &vec![d.path().to_path_buf()].into(),
            discovery::current_uid(),
        )
        .expect_err("none");
        assert!(
            matches!(e, ClientError::NoProbe { pid, .. } if pid == live),
            "{e}"
        );
        // Our own socket, named for our pid, is found.
        let me = std::process::id();
        let sock = d.path().join(format!("{me}.sock"));
        let _l = UnixListener::bind(&sock).expect("bind");
        let found = find_socket(
            me,
            &vec![d.path().to_path_buf()].into(),
            discovery::current_uid(),
        )
        .expect("found");
        assert_eq!(found, sock);
    }

    #[test]
    fn request_ids_are_valid_and_distinct() {
        let a = new_request_id();
        let b = new_request_id();
        assert!(valid_request_id(&a), "{a}");
        assert_ne!(a, b);
    }
}
