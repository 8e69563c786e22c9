//! Capturing a snapshot of a probed process from the dashboard: which
//! process a capture key acts on, what a request in flight says on the
//! status line, and the snapshot to open. Pure: the request itself runs on
//! a thread of the event loop (`run.rs`), which hands its progress here.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::source::ProbeRow;
use super::state::AppState;

/// How long a capture note stays on the status line after it ends (ms).
pub const CAPTURE_NOTE_MS: u64 = 60_000;
/// How long the dashboard waits for a probe's snapshot (ms).
pub const CAPTURE_TIMEOUT_MS: u64 = 120_000;

/// `path` as a person reads it on a status line: under `home`, `~/…`, and
/// of a long one (over [`WHOLE_PATH_CHARS`]) only its root, its folder and
/// its name (`~/…/snapshots/vm-17-oom.pickle`). The snapshots folder's path alone
/// took half of an 80-column line and cut the file's name; quitting the
/// dashboard prints the whole paths.
pub fn path_under_home(path: &Path, home: Option<&Path>) -> String {
    let (root, rest) = match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if !rest.as_os_str().is_empty() => ("~/", rest),
        _ => match path.strip_prefix("/") {
            Ok(rest) => ("/", rest),
            Err(_) => ("", path),
        },
    };
    let whole = format!("{root}{}", rest.display());
    if whole.chars().count() <= WHOLE_PATH_CHARS {
        return whole;
    }
    let parts: Vec<_> = rest.iter().collect();
    match parts.as_slice() {
        [_, .., folder, name] if parts.len() > 2 => format!(
            "{root}…/{}/{}",
            Path::new(folder).display(),
            Path::new(name).display()
        ),
        _ => whole,
    }
}

/// What a capture's note says of a snapshot without a trace.
pub const SEGMENTS_ONLY_CAVEAT: &str =
    ", segments only: no trace (start the probe with --record-history)";

/// The longest path [`path_under_home`] writes whole (characters).
pub const WHOLE_PATH_CHARS: usize = 32;

/// A snapshot request of the dashboard and where it stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaptureState {
    /// The pid a request is in flight for.
    pub pending: Option<u32>,
    /// What the status line says of the last request: (time in ms, text).
    pub note: Option<(u64, String)>,
    /// The last snapshot taken (the probe's file).
    pub last: Option<PathBuf>,
    /// Every snapshot taken, oldest first (at most [`MAX_TAKEN`]): listed
    /// when the dashboard quits, so their paths can be copied.
    pub taken: Vec<PathBuf>,
}

/// Snapshots [`CaptureState::taken`] remembers.
pub const MAX_TAKEN: usize = 64;

/// What the request thread reports.
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureMsg {
    /// The probe took the request.
    Asked { pid: u32 },
    /// The probe is taking the snapshot.
    Started { pid: u32 },
    /// Written by the probe at `path`; `has_trace` false: segments only.
    Done {
        pid: u32,
        path: PathBuf,
        has_trace: bool,
    },
    /// Why there is no snapshot (one line).
    Failed { pid: u32, why: String },
}

impl CaptureState {
    /// The note to show at `now_ms`: while a request is in flight, and for
    /// [`CAPTURE_NOTE_MS`] after.
    pub fn note_at(&self, now_ms: u64) -> Option<&str> {
        self.note
            .as_ref()
            .filter(|(t, _)| self.pending.is_some() || now_ms.saturating_sub(*t) < CAPTURE_NOTE_MS)
            .map(|(_, text)| text.as_str())
    }

    /// Takes one report of the request thread.
    pub fn on_msg(&mut self, now_ms: u64, msg: CaptureMsg) {
        self.on_msg_under(now_ms, msg, None);
    }

    /// [`CaptureState::on_msg`], writing a path under `home` as `~/…`.
    pub fn on_msg_under(&mut self, now_ms: u64, msg: CaptureMsg, home: Option<&Path>) {
        let text = match msg {
            CaptureMsg::Asked { pid } => format!("snapshot of pid {pid}: asked the probe…"),
            CaptureMsg::Started { pid } => {
                format!("snapshot of pid {pid}: the probe is taking it…")
            }
            CaptureMsg::Done {
                pid,
                path,
                has_trace,
            } => {
                self.pending = None;
                // The key and the caveat before the path, as the OOM
                // banner does: a narrow status line cuts at its end, and a
                // long snapshot path would hide what to press.
                let text = format!(
                    "snapshot of pid {pid} (o opens it){}: {}",
                    if has_trace { "" } else { SEGMENTS_ONLY_CAVEAT },
                    path_under_home(&path, home)
                );
                if self.taken.len() >= MAX_TAKEN {
                    self.taken.remove(0);
                }
                self.taken.push(path.clone());
                self.last = Some(path);
                text
            }
            CaptureMsg::Failed { pid, why } => {
                self.pending = None;
                format!("snapshot of pid {pid}: {why}")
            }
        };
        self.note = Some((now_ms, text));
    }
}

/// The probe a capture key acts on: the probed process whose allocator
/// the selected GPU shows, else the only attached probe. `Err`: why there
/// is none, for the status line.
pub fn target_probe(state: &AppState) -> Result<&ProbeRow, String> {
    let attached: Vec<&ProbeRow> = state
        .probes
        .rows
        .iter()
        .filter(|r| r.connected && r.pid.is_some())
        .collect();
    let shown = state
        .selected()
        .and_then(|g| g.allocator.as_ref())
        .and_then(|a| a.pid);
    if let Some(row) = attached.iter().find(|r| shown.is_some() && r.pid == shown) {
        return Ok(row);
    }
    match attached.as_slice() {
        [] => Err(
            "no probed process: start one under python -m vramtop_probe \
                   (docs/attach.md)"
                .to_string(),
        ),
        [only] => Ok(only),
        _ => Err(
            "no probed process selected: select its GPU (0…9; v picks among \
                  several on one GPU)"
                .to_string(),
        ),
    }
}

/// Why the probe of `row` cannot take a snapshot, if it cannot.
pub fn cannot_capture(row: &ProbeRow) -> Option<String> {
    let pid = row
        .pid
        .map_or_else(|| row.socket.clone(), |p| p.to_string());
    if row.protocol < 2 {
        return Some(format!(
            "the probe of {pid} speaks protocol v1 (figures only): upgrade vramtop_probe to \
             capture snapshots"
        ));
    }
    if !row.serves_snapshots {
        return Some(format!(
            "the probe of {pid} does not serve snapshot requests"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_request_keeps_the_path_and_says_segments_only_without_a_trace() {
        let mut c = CaptureState {
            pending: Some(7),
            ..CaptureState::default()
        };
        c.on_msg(10, CaptureMsg::Started { pid: 7 });
        assert_eq!(
            c.note_at(10),
            Some("snapshot of pid 7: the probe is taking it…")
        );
        c.on_msg(
            20,
            CaptureMsg::Done {
                pid: 7,
                path: PathBuf::from("/s/a.pickle"),
                has_trace: false,
            },
        );
        assert_eq!(c.pending, None);
        assert_eq!(c.last, Some(PathBuf::from("/s/a.pickle")));
        let note = c.note_at(20).unwrap_or_default();
        assert!(
            note.contains("/s/a.pickle") && note.contains("segments only"),
            "{note}"
        );
        assert_eq!(c.note_at(20 + CAPTURE_NOTE_MS), None, "the note goes");
    }

    #[test]
    fn a_path_under_home_is_written_with_a_tilde_and_others_whole() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            path_under_home(Path::new("/home/u/.local/s/a.pickle"), home),
            "~/.local/s/a.pickle"
        );
        // A long one: its root, folder and name.
        let deep = "/home/u/.local/state/vramtop/snapshots/vm-17-oom.pickle";
        assert_eq!(
            path_under_home(Path::new(deep), home),
            "~/…/snapshots/vm-17-oom.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("/var/lib/vramtop/state/s/vm-17-oom.pickle"), home),
            "/…/s/vm-17-oom.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("rel/a.pickle"), home),
            "rel/a.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("/tmp/a.pickle"), home),
            "/tmp/a.pickle"
        );
        // "/home/user" is not under "/home/u": whole components only.
        assert_eq!(
            path_under_home(Path::new("/home/user/a.pickle"), home),
            "/home/user/a.pickle"
        );
        assert_eq!(path_under_home(Path::new("/home/u"), home), "/home/u");
        assert_eq!(path_under_home(Path::new("/home/u/a"), None), "/home/u/a");
    }

    #[test]
    fn every_snapshot_taken_is_remembered_for_the_list_on_quitting() {
        let mut c = CaptureState::default();
        for i in 0..(MAX_TAKEN + 2) {
            c.on_msg_under(
                i as u64,
                CaptureMsg::Done {
                    pid: 7,
                    path: PathBuf::from(format!("/home/u/s/{i}.pickle")),
                    has_trace: true,
                },
                Some(Path::new("/home/u")),
            );
        }
        assert_eq!(c.taken.len(), MAX_TAKEN, "bounded");
        assert_eq!(c.taken.first(), Some(&PathBuf::from("/home/u/s/2.pickle")));
        assert_eq!(
            c.last,
            Some(PathBuf::from(format!("/home/u/s/{}.pickle", MAX_TAKEN + 1)))
        );
        let note = c.note_at(0).unwrap_or_default();
        assert!(
            note.ends_with(&format!(": ~/s/{}.pickle", MAX_TAKEN + 1)),
            "{note}"
        );
    }
}
