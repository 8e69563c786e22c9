//! The dashboard between events: its state, the terminal it draws on, the
//! stress worker and one handler per kind of event (a key, a click, a
//! resize, a sample, a capture's progress, a stress result). Each handler
//! updates the state, marks the screen dirty when something changed, starts
//! what the state asked for (the stress worker and its commands, a snapshot
//! request's thread) and returns what only the loop can do ([`Next`]: quit,
//! or hand the terminal to the viewer).
//!
//! It is generic over the ratatui backend, so the app-flow tests drive
//! these same handlers on a `TestBackend` with scripted samples and keys;
//! `run.rs` owns only the event sources (input task, sampler, signals,
//! render tick) and the real terminal.

use std::path::PathBuf;
use std::time::Duration;

use crossterm::event::KeyEvent;
use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::layout::Rect;

use super::click::click;
use super::viewer_run::ViewerExit;
use crate::app::capture::{CAPTURE_TIMEOUT_MS, CaptureMsg};
use crate::app::keymap::Keymap;
use crate::app::observe::AllocatorSources;
use crate::app::process_list::{Signal, SignalOutcome, SignalTarget};
use crate::app::state::AppState;
use crate::app::stress::{StressCommand, StressResult};
use crate::app::stress_worker::StressWorker;
use crate::app::update::{Effect, handle_key, on_signal_result, on_stress_result};
use crate::device::sim::SimCluster;
use crate::device::{GpuReading, TelemetryError};
use crate::probe::client::{self, Progress};
use crate::probe::discovery;
use crate::probe::protocol::SnapshotDone;
use crate::probe::snapshot_file::{self, SnapshotKind};
use crate::snapshot::write_snapshot_file;
use crate::ui::{self, Theme};

/// Where the threads the dashboard starts send their answers back to the
/// loop: the stress worker's results and a snapshot request's progress.
#[derive(Clone)]
pub struct Replies {
    pub stress: tokio::sync::mpsc::UnboundedSender<StressResult>,
    pub capture: tokio::sync::mpsc::UnboundedSender<CaptureMsg>,
}

/// What the loop must do after a handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Continue,
    Quit,
    /// Hand the terminal to the snapshot viewer for `path` (at its OOM
    /// event when `at_oom`), then call [`Dashboard::on_viewer_closed`].
    /// Until then the dashboard draws nothing, but its handlers go on:
    /// samples, captures and stress results still reach the state.
    OpenSnapshot {
        path: PathBuf,
        at_oom: bool,
    },
}

pub struct Dashboard<B: Backend> {
    terminal: Terminal<B>,
    state: AppState,
    keymap: Keymap,
    theme: Theme,
    sources: AllocatorSources,
    /// Something changed since the last draw.
    dirty: bool,
    /// The screen of the last draw: clicks are hit-tested against it.
    area: Rect,
    replies: Replies,
    /// Started when the stress panel is first opened; dropping it (with
    /// the dashboard, on every exit path) frees what it holds.
    stress_worker: Option<StressWorker>,
    /// Why the stress panel cannot run here (no CUDA GPU, no simulation):
    /// asked once.
    no_cuda: Option<String>,
    /// Where the snapshots the dashboard writes itself go (the stress
    /// panel's `W`, `c` on a simulated process); `None`: the current
    /// directory.
    save_dir: Option<PathBuf>,
    /// The snapshot viewer has the terminal (from [`Next::OpenSnapshot`]
    /// to [`Dashboard::on_viewer_closed`]): the state keeps taking samples,
    /// the screen is not drawn.
    viewing: bool,
}

impl<B: Backend> Dashboard<B> {
    pub fn new(
        terminal: Terminal<B>,
        state: AppState,
        sources: AllocatorSources,
        theme: Theme,
        replies: Replies,
    ) -> Self {
        // Until the first draw, the whole backend is the best guess.
        let area = terminal
            .size()
            .map(|s| Rect::new(0, 0, s.width, s.height))
            .unwrap_or_default();
        // Keys before the first frame act at this size too.
        if area.width > 0 || area.height > 0 {
            state.ui.screen.set(Some((area.width, area.height)));
        }
        Dashboard {
            terminal,
            state,
            keymap: Keymap::default(),
            theme,
            sources,
            dirty: true,
            viewing: false,
            area,
            replies,
            stress_worker: None,
            no_cuda: None,
            save_dir: None,
        }
    }

    /// Makes the snapshots the dashboard writes itself (the stress panel's,
    /// for a worker started after this call, and a simulated process's)
    /// go into `dir` (created, private, when missing) instead of the
    /// current directory.
    pub fn save_snapshots_in(&mut self, dir: PathBuf) {
        self.save_dir = Some(dir);
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// For what the loop itself reports (a stress worker that stopped).
    pub fn state_mut(&mut self) -> &mut AppState {
        self.dirty = true;
        &mut self.state
    }

    pub fn theme(&self) -> &Theme {
        &self.theme
    }

    pub fn terminal(&self) -> &Terminal<B> {
        &self.terminal
    }

    pub fn terminal_mut(&mut self) -> &mut Terminal<B> {
        &mut self.terminal
    }

    /// Whether something changed since the last draw.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Whether the snapshot viewer has the terminal.
    pub fn is_viewing(&self) -> bool {
        self.viewing
    }

    /// A key press: stress commands go to the worker (started the first
    /// time the panel opens), a snapshot request to a thread of its own.
    pub fn on_key(&mut self, key: KeyEvent) -> Next {
        let effect = handle_key(&mut self.state, &self.keymap, key);
        self.ensure_stress_worker();
        if effect != Effect::None {
            self.dirty = true;
        }
        match effect {
            Effect::None | Effect::Redraw => Next::Continue,
            Effect::Quit => Next::Quit,
            Effect::Stress(commands) => {
                self.send_stress(commands);
                Next::Continue
            }
            Effect::RequestSnapshot { pid, socket } => {
                spawn_capture(pid, socket, self.replies.capture.clone());
                Next::Continue
            }
            Effect::SaveSimulatedSnapshot { pid } => {
                let tx = self.replies.capture.clone();
                match self.sources.sim() {
                    Some(cluster) => {
                        spawn_sim_capture(cluster.clone(), pid, self.save_dir.clone(), tx);
                    }
                    // The state names a simulated process only from the
                    // simulation's own samples.
                    None => {
                        let _ = tx.send(CaptureMsg::Failed {
                            pid,
                            why: "the simulation is not running".to_string(),
                        });
                    }
                }
                Next::Continue
            }
            Effect::OpenSnapshot { path, at_oom } => {
                self.viewing = true;
                Next::OpenSnapshot { path, at_oom }
            }
            Effect::Signal { signal, targets } => {
                // Each checked and sent on its own: one that ended or is
                // another user's does not keep the others from theirs.
                let outcomes: Vec<(SignalTarget, SignalOutcome)> = targets
                    .into_iter()
                    .map(|target| {
                        let outcome = send_signal(signal, &target);
                        tracing::info!(
                            pid = target.pid,
                            signal = signal.name(),
                            ?outcome,
                            "signal"
                        );
                        (target, outcome)
                    })
                    .collect();
                on_signal_result(&mut self.state, signal, &outcomes);
                Next::Continue
            }
        }
    }

    /// A left click at a cell of the last drawn screen.
    pub fn on_click(&mut self, column: u16, row: u16) {
        if click(
            self.area,
            &mut self.state,
            &self.keymap,
            &self.theme,
            column,
            row,
        ) {
            self.dirty = true;
        }
    }

    /// The terminal was resized: what depends on its size is redrawn, and
    /// said again where it was said for the old size.
    pub fn on_resize(&mut self) {
        if let Ok(size) = self.terminal.size() {
            crate::app::update::on_resize(&mut self.state, (size.width, size.height));
        }
        self.dirty = true;
    }

    /// A telemetry sample at `now_ms`, with the sampler's dropped-tick
    /// count: the allocator views are built from it and the probes' state
    /// of the same moment (their OOM events included). Taken while the
    /// viewer has the terminal too, so its time is no gap in the timeline.
    pub fn on_sample(
        &mut self,
        now_ms: u64,
        readings: Result<Vec<GpuReading>, TelemetryError>,
        dropped_samples: u64,
    ) {
        match readings {
            Ok(readings) => {
                self.sources
                    .observe(readings)
                    .apply_to(&mut self.state, now_ms);
                self.state.status.last_error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed");
                self.state.status.last_error = Some(e.to_string());
            }
        }
        self.state.status.dropped_samples = dropped_samples;
        self.dirty = true;
    }

    /// A snapshot request's progress or answer.
    pub fn on_capture(&mut self, now_ms: u64, msg: CaptureMsg) {
        // The whole path, which a short screen's status line elides;
        // quoted and escaped (a probe names its files: none may act on a
        // terminal showing the log, nor break its line).
        if let CaptureMsg::Done { pid, path, .. } = &msg {
            tracing::info!(pid, ?path, "snapshot written");
        }
        self.state.capture.on_msg(now_ms, msg);
        self.dirty = true;
    }

    /// The stress worker's answer; the panel's next queued commands go
    /// to the worker.
    pub fn on_stress_result(&mut self, result: StressResult) {
        self.dirty = true;
        if let Effect::Stress(commands) = on_stress_result(&mut self.state, result) {
            self.send_stress(commands);
        }
    }

    /// Whether the stress worker runs (it starts when the panel opens).
    pub fn has_stress_worker(&self) -> bool {
        self.stress_worker.is_some()
    }

    /// The viewer the dashboard handed the terminal to has returned: the
    /// dashboard draws again (what the samples meanwhile changed), and a
    /// file it could not open, or its own failure, is said on the status
    /// line; `Next::Quit` when the user quit vramtop from the viewer
    /// (Ctrl-C).
    pub fn on_viewer_closed(&mut self, shown: color_eyre::Result<ViewerExit>) -> Next {
        self.viewing = false;
        match shown {
            Ok(ViewerExit::QuitVramtop | ViewerExit::Stopped(_)) => return Next::Quit,
            Ok(ViewerExit::Done) => {}
            Ok(ViewerExit::BadFile(e)) => {
                self.state.ui.notice = Some(format!("cannot open the snapshot: {e}"));
            }
            // The dashboard opens the viewer at no `--at` moment.
            Ok(ViewerExit::NoMoment(e)) => {
                self.state.ui.notice = Some(format!("cannot open the snapshot there: {e}"));
            }
            Err(e) => {
                self.state.ui.notice = Some(format!("the viewer stopped: {e}"));
            }
        }
        self.state.ui.notice_ms = self.state.now_ms;
        // The window may have been resized under the viewer: the keys
        // act at the size it has now, before the next frame.
        self.on_resize();
        Next::Continue
    }

    /// Draws when something changed since the last draw and the viewer
    /// does not have the terminal; says whether it drew.
    pub fn draw_if_dirty(&mut self) -> Result<bool, B::Error> {
        if !self.dirty || self.viewing {
            return Ok(false);
        }
        let (state, keymap, theme) = (&self.state, &self.keymap, &self.theme);
        let completed = self
            .terminal
            .draw(|frame| ui::draw(frame, state, keymap, theme))?;
        self.area = completed.area;
        self.dirty = false;
        Ok(true)
    }

    /// Starts the stress worker the first time the panel is opened, on the
    /// selected GPU: of the simulation when it is the backend, else on CUDA when
    /// `cuda::probe()` lists that GPU. Without either it stays `None` and the
    /// panel says why (`no_cuda` keeps the probe's answer, so it runs once).
    fn ensure_stress_worker(&mut self) {
        if !self.state.ui.stress_open || self.stress_worker.is_some() {
            return;
        }
        let state = &mut self.state;
        let no_cuda = &mut self.no_cuda;
        let gpu = state.selected().map_or(0, |g| g.index());
        let tx = self.replies.stress.clone();
        let deliver = move |r| {
            let _ = tx.send(r);
        };
        let spawned = match self.sources.sim() {
            Some(cluster) => StressWorker::spawn_sim(cluster, gpu, self.save_dir.clone(), deliver),
            None => {
                if no_cuda.is_none() {
                    let probe = crate::device::cuda::probe();
                    if !probe.devices.iter().any(|d| d.index == gpu) {
                        *no_cuda = Some(format!(
                            "the stress panel needs CUDA GPU {gpu} or the simulation \
                         (--backend sim): {}",
                            probe.explain()
                        ));
                    }
                }
                if let Some(why) = no_cuda {
                    // Said after every key, so the panel's own "not started"
                    // never hides why.
                    state.stress.say(why.clone());
                    return;
                }
                StressWorker::spawn_cuda(gpu, self.save_dir.clone(), deliver)
            }
        };
        match spawned {
            Ok(w) => {
                state.stress.pid = w.pid();
                // Keys typed before its first answer wait for it.
                state.stress.worker_spawned();
                self.stress_worker = Some(w);
            }
            Err(e) => state
                .stress
                .say(format!("cannot start the stress worker: {e}")),
        }
    }

    /// Hands commands to the worker; a worker that has gone (it panicked)
    /// leaves the panel idle with a message instead of waiting forever.
    fn send_stress(&mut self, commands: Vec<StressCommand>) {
        if !self
            .stress_worker
            .as_ref()
            .is_some_and(|w| w.send(commands))
        {
            let state = &mut self.state;
            state.stress.busy = false;
            state.stress.queued.clear();
            state.stress.say("the stress worker has stopped");
            // A snapshot `c` asked of the panel's allocator gets no answer.
            state.stress.saving = false;
            if let Some(pid) = state.capture.pending
                && state.stress.pid == Some(pid)
            {
                let why = "the stress worker has stopped".to_string();
                state
                    .capture
                    .on_msg(state.now_ms, CaptureMsg::Failed { pid, why });
            }
        }
    }
}

/// Sends the signal the user confirmed to `target.pid`, if that pid still
/// runs the command the prompt named: between the prompt and the key the
/// process may have ended and its pid gone to another. The update has
/// refused pids that are not one process's, vramtop's own and simulated
/// ones; an error is an answer (EPERM, ESRCH), never a panic.
fn send_signal(signal: Signal, target: &SignalTarget) -> SignalOutcome {
    use nix::errno::Errno;
    use nix::sys::signal::{Signal as NixSignal, kill};
    match crate::device::procfs::command_line(target.pid) {
        None => return SignalOutcome::Gone,
        Some(now) if now != target.command => return SignalOutcome::Changed(now),
        Some(_) => {}
    }
    // Checked again here, where the signal is sent: 0 and negative pids
    // name process groups.
    let Some(pid) = i32::try_from(target.pid).ok().filter(|&p| p > 0) else {
        return SignalOutcome::Failed(format!("{} is no single process", target.pid));
    };
    let sig = match signal {
        Signal::Term => NixSignal::SIGTERM,
        Signal::Kill => NixSignal::SIGKILL,
        Signal::Int => NixSignal::SIGINT,
    };
    match kill(nix::unistd::Pid::from_raw(pid), sig) {
        Ok(()) => SignalOutcome::Sent,
        Err(Errno::EPERM) => SignalOutcome::NotPermitted,
        Err(Errno::ESRCH) => SignalOutcome::Gone,
        Err(e) => SignalOutcome::Failed(e.desc().to_string()),
    }
}

/// What the dashboard is told of a snapshot request's answer: the file is
/// offered (`o`) only when it is one the probe could have written (a pickle
/// of this user's, [`snapshot_file::check`]), not whatever path was sent.
fn answered(pid: u32, answer: Result<SnapshotDone, client::ClientError>) -> CaptureMsg {
    let checked = answer.map_err(|e| match e.may_still_write() {
        // The probe goes on and writes it: say where, so that it can be
        // found (and opened) once written.
        Some(place) => format!("{e}; it may still write {place}"),
        None => e.to_string(),
    });
    let checked = checked.and_then(|done| {
        snapshot_file::check(&done.path, SnapshotKind::Demand, discovery::current_uid())
            .map(|path| (path, done.has_trace))
            .map_err(|e| e.to_string())
    });
    match checked {
        Ok((path, has_trace)) => CaptureMsg::Done {
            pid,
            path,
            has_trace,
        },
        Err(why) => CaptureMsg::Failed { pid, why },
    }
}

/// Asks the probe at `socket` for a snapshot on a thread of its own; its
/// progress and answer come back as [`CaptureMsg`]s.
fn spawn_capture(pid: u32, socket: PathBuf, tx: tokio::sync::mpsc::UnboundedSender<CaptureMsg>) {
    let spawned = std::thread::Builder::new()
        .name("vramtop-capture".to_string())
        .spawn({
            let tx = tx.clone();
            move || {
                let progress_tx = tx.clone();
                let answer = client::request_snapshot(
                    &socket,
                    pid,
                    Duration::from_millis(CAPTURE_TIMEOUT_MS),
                    |p| {
                        let _ = progress_tx.send(match p {
                            Progress::Asked(_) => CaptureMsg::Asked { pid },
                            Progress::Started => CaptureMsg::Started { pid },
                        });
                    },
                );
                let _ = tx.send(answered(pid, answer));
            }
        });
    if let Err(e) = spawned {
        let _ = tx.send(CaptureMsg::Failed {
            pid,
            why: format!("cannot start a thread: {e}"),
        });
    }
}

/// Writes the allocator model of the simulated training process `pid` as
/// a snapshot, `vramtop-sim-<pid>-<unix time>.pickle` in `dir` (else the
/// current directory; `-2`, `-3`, … appended when that exists), on a
/// thread of its own; the answer comes back as a [`CaptureMsg`], as a
/// probe's does.
fn spawn_sim_capture(
    cluster: SimCluster,
    pid: u32,
    dir: Option<PathBuf>,
    tx: tokio::sync::mpsc::UnboundedSender<CaptureMsg>,
) {
    let spawned = std::thread::Builder::new()
        .name("vramtop-sim-capture".to_string())
        .spawn({
            let tx = tx.clone();
            move || {
                let _ = tx.send(save_sim_snapshot(&cluster, pid, dir));
            }
        });
    if let Err(e) = spawned {
        let _ = tx.send(CaptureMsg::Failed {
            pid,
            why: format!("cannot start a thread: {e}"),
        });
    }
}

/// [`spawn_sim_capture`]'s work: the snapshot written, or why not.
fn save_sim_snapshot(cluster: &SimCluster, pid: u32, dir: Option<PathBuf>) -> CaptureMsg {
    let Some(snapshot) = cluster.trainer_snapshot(pid) else {
        return CaptureMsg::Failed {
            pid,
            why: format!("simulated process {pid} has ended"),
        };
    };
    // An absolute path, so the status line's and the exit list's path can
    // be used from any folder.
    if let Some(dir) = &dir
        && let Err(e) = crate::probe::snapshot_file::create_private_dir(dir)
    {
        return CaptureMsg::Failed {
            pid,
            why: format!("snapshot not saved: cannot create {}: {e}", dir.display()),
        };
    }
    let dir = dir
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut path = dir.join(format!("vramtop-sim-{pid}-{now}.pickle"));
    let mut n = 2u32;
    while path.exists() {
        path = dir.join(format!("vramtop-sim-{pid}-{now}-{n}.pickle"));
        n = n.saturating_add(1);
    }
    let has_trace = snapshot.device_traces.iter().any(|t| !t.is_empty());
    match write_snapshot_file(&snapshot, &path) {
        Ok(_) => CaptureMsg::Done {
            pid,
            path,
            has_trace,
        },
        Err(e) => CaptureMsg::Failed {
            pid,
            why: format!("snapshot not saved: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_process_snapshot_is_a_private_file_in_its_folder_made_private_when_missing() {
        use std::os::unix::fs::PermissionsExt as _;
        let cluster = SimCluster::new(crate::device::sim::SimConfig {
            gpus: 1,
            training_processes: 1,
            seed: 3,
            ..crate::device::sim::SimConfig::default()
        });
        cluster.advance(5_000);
        let (_, pid, _) = *cluster.trainer_stats().first().expect("a trainer");
        let d = tempfile::tempdir().expect("temp dir");
        let dir = d.path().join("state").join("vramtop").join("snapshots");
        let CaptureMsg::Done { path, .. } = save_sim_snapshot(&cluster, pid, Some(dir.clone()))
        else {
            panic!("saved");
        };
        assert_eq!(path.parent(), Some(dir.as_path()));
        let mode = std::fs::metadata(&dir).expect("made").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // The file too: 0600, as `vramtop snapshot` writes its copies.
        let mode = std::fs::metadata(&path)
            .expect("saved")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    fn done(path: &std::path::Path) -> SnapshotDone {
        SnapshotDone {
            id: "a".to_string(),
            time: None,
            path: path.to_path_buf(),
            bytes: Some(5),
            has_trace: true,
            trace_entries: Some(1),
            segments: Some(1),
        }
    }

    #[test]
    fn a_probes_snapshot_is_offered_only_when_it_is_a_pickle_it_could_have_written() {
        let d = tempfile::tempdir().expect("temp dir");
        let good = d
            .path()
            .join("node7-1-rank0-20261201T120000Z-demand.pickle");
        // PROTO 4, EMPTY_DICT, STOP: the smallest pickle.
        std::fs::write(&good, b"\x80\x04}.").expect("write");
        assert!(matches!(
            answered(7, Ok(done(&good))),
            CaptureMsg::Done { pid: 7, path, has_trace: true } if path == good
        ));
        let text = d.path().join("x-demand.pickle");
        std::fs::write(&text, b"root:x:0:0:root:/root:/bin/bash\n").expect("write");
        for bad in [std::path::Path::new("/etc/shadow"), text.as_path()] {
            let CaptureMsg::Failed { pid: 7, why } = answered(7, Ok(done(bad))) else {
                panic!("{bad:?} is not offered");
            };
            assert!(why.contains("vramtop does not open"), "{why}");
            assert!(!why.contains("root:"), "never quoted: {why}");
        }
    }

    #[test]
    fn a_capture_that_times_out_after_the_probe_began_says_where_its_file_may_appear() {
        let began = client::ClientError::Timeout {
            pid: 7,
            waited: Duration::from_secs(60),
            stage: client::WaitStage::Started,
            file: Some(std::path::PathBuf::from(
                "/s/snaps/node7-7-rank0-*-demand.pickle",
            )),
        };
        let CaptureMsg::Failed { pid: 7, why } = answered(7, Err(began)) else {
            panic!("a timeout fails the capture");
        };
        assert!(
            why.ends_with("; it may still write /s/snaps/node7-7-rank0-*-demand.pickle"),
            "{why}"
        );
        // Before the probe began there is no file to look for.
        let asked = client::ClientError::Timeout {
            pid: 7,
            waited: Duration::from_secs(60),
            stage: client::WaitStage::Asked,
            file: None,
        };
        let CaptureMsg::Failed { why, .. } = answered(7, Err(asked)) else {
            panic!("a timeout fails the capture");
        };
        assert!(!why.contains("may still write"), "{why}");
    }
}
