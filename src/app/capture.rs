//! Capturing a snapshot from the dashboard, of a probed process or of a
//! simulated training process: which process a capture key acts on, what
//! a request in flight says on the status line, and the snapshot to open.
//! Pure: the request (asking the probe, or writing the simulated
//! process's model) runs on a thread of the event loop (`run.rs`), which
//! hands its progress here.

use std::path::PathBuf;

use serde::Serialize;

use super::source::ProbeRow;
use super::state::AppState;

/// How long a capture note stays on the status line after it ends (ms).
pub const CAPTURE_NOTE_MS: u64 = 60_000;
/// How long the dashboard waits for a probe's snapshot (ms).
pub const CAPTURE_TIMEOUT_MS: u64 = 120_000;

/// A snapshot request of the dashboard and where it stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaptureState {
    /// The pid a request is in flight for.
    pub pending: Option<u32>,
    /// Where the last request stands, for the status line: (time in ms,
    /// what happened). The ui words it.
    pub note: Option<(u64, CaptureMsg)>,
    /// The last snapshot taken (the probe's file).
    pub last: Option<PathBuf>,
    /// Every snapshot taken, oldest first (at most [`MAX_TAKEN`]): listed
    /// when the dashboard quits, so their paths can be copied.
    pub taken: Vec<PathBuf>,
}

/// Snapshots [`CaptureState::taken`] remembers.
pub const MAX_TAKEN: usize = 64;

/// Where a snapshot request stands: what the request thread reports, and
/// what the status line tells (the ui words it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum CaptureMsg {
    /// The dashboard is sending the request (set by the dashboard itself
    /// when the key is pressed; the thread reports the rest).
    Asking { pid: u32 },
    /// The probe took the request.
    Asked { pid: u32 },
    /// vramtop is writing the allocator model of the simulated training
    /// process `pid`, or of the stress panel (its process `pid`), itself
    /// (set by the dashboard when the key is pressed).
    Writing { pid: u32 },
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
    pub fn note_at(&self, now_ms: u64) -> Option<&CaptureMsg> {
        self.note
            .as_ref()
            .filter(|(t, _)| self.pending.is_some() || now_ms.saturating_sub(*t) < CAPTURE_NOTE_MS)
            .map(|(_, note)| note)
    }

    /// Takes one report of the request thread.
    pub fn on_msg(&mut self, now_ms: u64, msg: CaptureMsg) {
        match &msg {
            CaptureMsg::Done { path, .. } => {
                self.pending = None;
                if self.taken.len() >= MAX_TAKEN {
                    self.taken.remove(0);
                }
                self.taken.push(path.clone());
                self.last = Some(path.clone());
            }
            CaptureMsg::Failed { .. } => self.pending = None,
            CaptureMsg::Asking { .. }
            | CaptureMsg::Asked { .. }
            | CaptureMsg::Writing { .. }
            | CaptureMsg::Started { .. } => {}
        }
        self.note = Some((now_ms, msg));
    }
}

/// What a capture key acts on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CaptureTarget<'a> {
    /// A probed process: its probe is asked for a snapshot.
    Probe(&'a ProbeRow),
    /// A simulated training process (`pid`): vramtop runs its allocator
    /// model, so the dashboard writes the model's snapshot itself.
    Simulated { pid: u32 },
    /// The stress panel's allocator, shown while the panel is closed (it
    /// holds memory and no other allocator is seen there, or no sample
    /// has come since it closed): its worker writes it, as `W` does in the
    /// panel. `pid`: the panel's process.
    StressPanel { pid: u32 },
}

/// The process a capture key acts on: the one whose allocator the
/// selected GPU shows, as the breakdown's title names it (a probed
/// process, a simulated training process, or the stress panel's), else
/// the only attached probe. `Err`: why there is none, for the status line.
pub fn capture_target(state: &AppState) -> Result<CaptureTarget<'_>, String> {
    let attached: Vec<&ProbeRow> = state
        .probes
        .rows
        .iter()
        .filter(|r| r.connected && r.pid.is_some())
        .collect();
    let gpu = state.selected();
    let view = gpu.and_then(|g| g.allocator.as_ref());
    // The panel's allocator stays the GPU's view after the panel closes
    // until a sample replaces it: refused there, `c` said "no allocator"
    // under a title naming one.
    if let (Some(view), Some(panel), Some(pid)) =
        (view, state.stress.view.as_ref(), state.stress.pid)
        && gpu.is_some_and(|g| state.stress.gpu == Some(g.index()))
        && view.pid == panel.pid
        && view.source == panel.source
    {
        return Ok(CaptureTarget::StressPanel { pid });
    }
    let shown = view.and_then(|a| a.pid);
    if let Some(row) = attached.iter().find(|r| shown.is_some() && r.pid == shown) {
        return Ok(CaptureTarget::Probe(row));
    }
    if let (Some(gpu), Some(pid)) = (gpu, shown)
        && state
            .simulated_allocators
            .get(&gpu.index())
            .is_some_and(|pids| pids.contains(&pid))
    {
        return Ok(CaptureTarget::Simulated { pid });
    }
    match attached.as_slice() {
        [only] => Ok(CaptureTarget::Probe(only)),
        [] if !state.simulated_allocators.is_empty() => {
            let index = gpu.map_or(0, |g| g.index());
            Err(format!(
                "GPU {index} shows no allocator to capture: select a GPU that shows one"
            ))
        }
        [] => Err(
            "no probed process: start one under python -m vramtop_probe \
                   (docs/attach.md)"
                .to_string(),
        ),
        _ => Err(
            "no probed process selected: select its GPU (0…9; v picks among \
                  several on one GPU)"
                .to_string(),
        ),
    }
}

/// Whether a capture key has something to act on now (its hint shows):
/// an attached probe that serves snapshots, or the simulated training
/// process or the stress panel's allocator the selected GPU shows.
pub fn can_capture(state: &AppState) -> bool {
    state
        .probes
        .rows
        .iter()
        .any(|r| r.connected && r.serves_snapshots)
        || matches!(
            capture_target(state),
            Ok(CaptureTarget::Simulated { .. } | CaptureTarget::StressPanel { .. })
        )
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
    fn a_done_request_keeps_the_path_and_whether_it_has_a_trace() {
        let mut c = CaptureState {
            pending: Some(7),
            ..CaptureState::default()
        };
        c.on_msg(10, CaptureMsg::Started { pid: 7 });
        assert_eq!(c.note_at(10), Some(&CaptureMsg::Started { pid: 7 }));
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
        assert_eq!(
            c.note_at(20),
            Some(&CaptureMsg::Done {
                pid: 7,
                path: PathBuf::from("/s/a.pickle"),
                has_trace: false
            })
        );
        assert_eq!(c.note_at(20 + CAPTURE_NOTE_MS), None, "the note goes");
    }

    #[test]
    fn every_snapshot_taken_is_remembered_for_the_list_on_quitting() {
        let mut c = CaptureState::default();
        for i in 0..(MAX_TAKEN + 2) {
            c.on_msg(
                i as u64,
                CaptureMsg::Done {
                    pid: 7,
                    path: PathBuf::from(format!("/home/u/s/{i}.pickle")),
                    has_trace: true,
                },
            );
        }
        assert_eq!(c.taken.len(), MAX_TAKEN, "bounded");
        assert_eq!(c.taken.first(), Some(&PathBuf::from("/home/u/s/2.pickle")));
        assert_eq!(
            c.last,
            Some(PathBuf::from(format!("/home/u/s/{}.pickle", MAX_TAKEN + 1)))
        );
    }
}
