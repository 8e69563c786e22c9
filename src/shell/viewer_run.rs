//! The snapshot viewer's loop (`vramtop open FILE`): loads the file (on a
//! background thread when it is big: a progress screen, then the file's
//! final state as soon as its segments are read, with the trace's progress
//! on screen, then the whole file), draws the viewer and hands keys to
//! [`ViewerState::handle_key`] until `q`.
//!
//! Like the dashboard (`run.rs`) it uses ratatui's `try_init`/`restore`
//! (alternate screen, raw mode, and a panic hook that restores the
//! terminal) and turns mouse reporting on for clicks (off again on every
//! exit path, the panic hook's included); SIGTERM, SIGHUP and SIGINT end
//! it cleanly too. The loop is synchronous: there is no sampler, only
//! keys, clicks, resizes and the loader.
//! Opened from the dashboard it runs on a thread of its own
//! ([`ViewerThread`]) in the dashboard's terminal, while the dashboard's
//! loop goes on sampling.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use color_eyre::eyre::{WrapErr, eyre};
use crossterm::event::{Event, KeyEventKind, MouseButton, MouseEventKind};
use ratatui::layout::Rect;

use crate::app::keymap::Keymap;
use crate::app::update::Effect;
use crate::app::viewer::ViewerState;
use crate::snapshot::peak::{At, AtError};
use crate::snapshot::{
    SnapshotError, read_snapshot_file_final_state, read_snapshot_file_staged,
    read_snapshot_file_with_progress,
};
use crate::ui::{Theme, render_loading, render_viewer};

/// Files up to this size are read before the terminal is switched, so a bad
/// file is a one-line error on the normal screen (bytes).
pub const FOREGROUND_LOAD_BYTES: u64 = 32 << 20;
/// The signals that end the viewer with the terminal restored (the
/// default action of the last three kills without restoring it).
const STOP_SIGNALS: [i32; 6] = [
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGQUIT,
    signal_hook::consts::SIGUSR1,
    signal_hook::consts::SIGUSR2,
];
/// How often the loop wakes up to redraw the loading progress (ms).
const POLL_MS: u64 = 100;

/// What the loader thread hands back.
type Loaded = Result<ViewerState, SnapshotError>;

fn load(path: &Path, progress: &AtomicU64) -> Loaded {
    let snapshot = read_snapshot_file_with_progress(path, progress)?;
    Ok(ViewerState::new(display_name(path), snapshot))
}

/// The viewer on the final state of a file whose whole read failed with
/// `error` after that state (a trace cut or damaged), as the staged read of
/// a large file shows it; `None` when the final state cannot be read
/// either (the error is then the file's).
fn final_state_despite(path: &Path, error: &SnapshotError) -> Option<ViewerState> {
    let stage = read_snapshot_file_final_state(path).ok()?;
    // Read whole, it would have failed as the first read did.
    if !stage.trace_not_read {
        return None;
    }
    let mut v = ViewerState::new(display_name(path), stage);
    v.trace_failed(
        crate::ui::format::file_cut_text(error, false).unwrap_or_else(|| error.to_string()),
    );
    Some(v)
}

/// What the loader thread of a big file sends: the viewer on its segments
/// stage (when the file has one), then the viewer on the whole file.
enum LoaderMessage {
    Segments(ViewerState),
    Complete(Loaded),
}

/// Reads `path` in stages on the loader thread, sending each to `tx`.
fn load_staged(path: &Path, total: u64, progress: &AtomicU64, tx: &mpsc::Sender<LoaderMessage>) {
    let name = display_name(path);
    let result = read_snapshot_file_staged(path, progress, |stage| {
        let stage = ViewerState::segments_stage(name.clone(), stage, total);
        let _ = tx.send(LoaderMessage::Segments(stage));
    });
    let loaded = result.map(|snapshot| ViewerState::new(name, snapshot));
    let _ = tx.send(LoaderMessage::Complete(loaded));
}

/// The file name as the viewer shows it.
pub fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().to_string(),
    )
}

/// Why the viewer stopped early: a file that cannot be read (the caller
/// prints it as one line and exits 2).
#[derive(Debug)]
pub enum ViewerExit {
    /// The user left the viewer (`q`): a viewer opened from the dashboard
    /// goes back to it.
    Done,
    /// The user quit vramtop (`Ctrl-C`, [`Keymap::quits_vramtop`]): from
    /// the dashboard too, as Ctrl-C does everywhere else.
    QuitVramtop,
    /// A signal stopped the viewer run on its own (`vramtop open FILE`):
    /// its number, for the exit status.
    Stopped(i32),
    BadFile(SnapshotError),
    /// `open FILE --at` names no moment of the file's traces (no OOM, an
    /// event past the end, no marks): said as `open --summary --at` says
    /// it, after the terminal is restored.
    NoMoment(AtError),
}

impl ViewerExit {
    /// How the viewer ends on `key`, which asked it to quit.
    pub fn on_quit_key(keymap: &Keymap, key: crossterm::event::KeyEvent) -> Self {
        if keymap.quits_vramtop(key) {
            ViewerExit::QuitVramtop
        } else {
            ViewerExit::Done
        }
    }
}

/// The file's size in bytes, or the reader's error for a file that cannot
/// even be looked at.
fn file_size(path: &Path) -> Result<u64, SnapshotError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| crate::snapshot::reader::io_error(path, source))
}

/// Opens `path` in the viewer. Files up to `foreground_limit` bytes
/// (normally [`FOREGROUND_LOAD_BYTES`]) are loaded before the terminal is
/// switched; a file that cannot even be opened is refused there too.
/// `at`: the moment of the trace the cursors start at (`open FILE --at`;
/// `None` for the end, the file's own state). A small file's moment is
/// found before the terminal is switched, so an `at` that names none is
/// said on the normal screen; a big file's once its trace is read, behind
/// the loading screen, which says it waits for the trace.
pub fn run_viewer(
    path: &Path,
    theme: Theme,
    foreground_limit: u64,
    at: Option<At>,
) -> color_eyre::Result<ViewerExit> {
    let total = match file_size(path) {
        Ok(n) => n,
        Err(e) => return Ok(ViewerExit::BadFile(e)),
    };
    let progress = Arc::new(AtomicU64::new(0));
    let preloaded = if total <= foreground_limit {
        match load(path, &progress) {
            Ok(mut v) => {
                if let Some(at) = at {
                    if let Err(e) = v.start_at(at) {
                        return Ok(ViewerExit::NoMoment(e));
                    }
                    v.show_sites(&Keymap::default());
                }
                Some(v)
            }
            // A moment of the trace needs the trace: without it the file
            // is refused as the summary refuses it.
            Err(e) if at.is_some() => return Ok(ViewerExit::BadFile(e)),
            Err(e) => match final_state_despite(path, &e) {
                Some(v) => Some(v),
                None => return Ok(ViewerExit::BadFile(e)),
            },
        }
    } else {
        None
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Which signal stopped it (0: none), for the exit status.
    let caught = Arc::new(AtomicUsize::new(0));
    for signal in STOP_SIGNALS {
        signal_hook::flag::register(signal, stop.clone())
            .wrap_err("cannot install a signal handler")?;
        let number = usize::try_from(signal).unwrap_or_default();
        signal_hook::flag::register_usize(signal, caught.clone(), number)
            .wrap_err("cannot install a signal handler")?;
    }
    let mut terminal = ratatui::try_init().map_err(|e| {
        eyre!("the snapshot viewer needs a terminal ({e}); use `vramtop open FILE --summary`")
    })?;
    // Clicks focus panes and select GPUs, as in the dashboard; failure to
    // enable is not fatal. ratatui's panic hook leaves mouse reporting on
    // and the alternate screen drawn: ours turns the one off and clears
    // the other first (`terminal::before_leaving`), then runs ratatui's
    // (which restores the rest and reports).
    let ratatui_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = super::terminal::before_leaving(&mut std::io::stdout());
        ratatui_hook(info);
    }));
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    let result = event_loop(
        &mut terminal,
        path,
        total,
        preloaded,
        &progress,
        &stop,
        &theme,
        Opened {
            at_oom: false,
            from_dashboard: false,
            // Set already on a file read before the terminal was switched.
            at: at.filter(|_| total > foreground_limit),
        },
    );
    super::terminal::restore();
    match (result, caught.load(Ordering::Relaxed)) {
        (Ok(ViewerExit::Done | ViewerExit::QuitVramtop), signal) if signal != 0 => Ok(
            ViewerExit::Stopped(i32::try_from(signal).unwrap_or(i32::MAX)),
        ),
        (result, _) => result,
    }
}

/// Opens `path` in the viewer inside a terminal the caller set up (the
/// dashboard's), and returns when the user quits it or `stop` is set; the
/// caller redraws. The file is read on the loader thread behind the
/// progress screen. `at_oom`: start at its OOM with the allocation sites
/// shown ([`ViewerState::open_at_oom`]). The stop signals set `stop` while
/// the viewer runs (they reach the caller's own handlers too).
pub fn view_in_terminal(
    terminal: &mut ratatui::DefaultTerminal,
    path: &Path,
    theme: &Theme,
    at_oom: bool,
    stop: &Arc<AtomicBool>,
) -> color_eyre::Result<ViewerExit> {
    let total = match file_size(path) {
        Ok(n) => n,
        Err(e) => return Ok(ViewerExit::BadFile(e)),
    };
    let progress = Arc::new(AtomicU64::new(0));
    let registered: Vec<signal_hook::SigId> = STOP_SIGNALS
        .iter()
        .filter_map(|&signal| signal_hook::flag::register(signal, stop.clone()).ok())
        .collect();
    let result = repaint_whole(terminal).and_then(|()| {
        let opened = Opened {
            at_oom,
            from_dashboard: true,
            at: None,
        };
        event_loop(terminal, path, total, None, &progress, stop, theme, opened)
    });
    for id in registered {
        signal_hook::low_level::unregister(id);
    }
    result
}

/// The snapshot viewer run from the dashboard, on a thread of its own: it
/// owns the terminal's input and screen until it returns, while the
/// dashboard's loop goes on taking samples (and draws nothing).
///
/// Dropped before it has returned (the dashboard's loop ended: a signal,
/// an error, a panic), it stops the viewer and waits for it (at most one
/// poll of the viewer's loop, [`POLL_MS`]), so that the terminal is
/// restored after the viewer's last draw.
pub struct ViewerThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<color_eyre::Result<ViewerExit>>>,
    /// Closed (never sent on) when the thread ends, returned or panicked.
    ended: tokio::sync::oneshot::Receiver<()>,
}

impl ViewerThread {
    /// Starts the viewer on `path` in the terminal of this process (the
    /// caller's, set up by `ratatui::try_init`, which the caller must not
    /// draw on nor read input from until [`ViewerThread::ended`]). `stop`
    /// ends it: the caller's, shared with its panic hook.
    pub fn spawn(
        path: PathBuf,
        theme: Theme,
        at_oom: bool,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<ViewerThread> {
        let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vramtop-viewer".to_string())
            .spawn(move || {
                // Dropped when the thread ends, even by a panic.
                let _ended = ended_tx;
                // A second ratatui terminal on the same screen: it starts
                // from a cleared screen (`view_in_terminal` clears it), and
                // the caller repaints all of its own when the viewer is done.
                let mut terminal = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(
                    std::io::stdout(),
                ))
                .wrap_err("cannot open the terminal for the viewer")?;
                view_in_terminal(&mut terminal, &path, &theme, at_oom, &thread_stop)
            })?;
        Ok(ViewerThread {
            stop,
            handle: Some(handle),
            ended,
        })
    }

    /// Resolves when the viewer has returned (or panicked); then call
    /// [`ViewerThread::join`].
    pub async fn ended(&mut self) {
        let _ = (&mut self.ended).await;
    }

    /// The viewer's answer; a panic in the viewer goes on in the caller
    /// (whose own exit paths restore the terminal).
    pub fn join(mut self) -> color_eyre::Result<ViewerExit> {
        match self.handle.take().map(std::thread::JoinHandle::join) {
            Some(Ok(shown)) => shown,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Ok(ViewerExit::Done),
        }
    }
}

impl Drop for ViewerThread {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.stop.store(true, Ordering::Relaxed);
            // Its panic was reported by the hook already; the caller is
            // leaving.
            let _ = handle.join();
        }
    }
}

/// How the viewer was opened.
#[derive(Debug, Clone, Copy)]
struct Opened {
    /// Start at the file's OOM with the allocation sites shown
    /// ([`ViewerState::open_at_oom`]).
    at_oom: bool,
    /// From the dashboard, to which `q` returns.
    from_dashboard: bool,
    /// Start at this moment of the trace once it is read
    /// ([`ViewerState::start_at`]); the file's final state is not shown
    /// meanwhile, as the moment may be none.
    at: Option<At>,
}

/// What waiting for the terminal found.
enum Input {
    Nothing,
    Ready,
    /// The terminal hung up (its window or SSH session closed).
    TerminalGone,
}

/// Waits up to `timeout` for input on the terminal. crossterm's own poll
/// never returns once the terminal has hung up (its reader loops on reads
/// of 0 bytes, at 100 % CPU, and the signal flag is never looked at
/// again), so the terminal is polled here before crossterm is asked, and
/// a hang-up ends the viewer.
fn wait_for_input(timeout: Duration) -> std::io::Result<Input> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::io::IsTerminal as _;
    use std::os::fd::AsFd as _;
    let stdin = std::io::stdin();
    // crossterm reads stdin when it is the terminal, else /dev/tty: only
    // the first can be watched here.
    if !stdin.is_terminal() {
        return Ok(if crossterm::event::poll(timeout)? {
            Input::Ready
        } else {
            Input::Nothing
        });
    }
    let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(millis)) {
        Ok(0) => return Ok(Input::Nothing),
        Ok(_) => {}
        // A signal arrived: the caller looks at its flag.
        Err(nix::errno::Errno::EINTR) => return Ok(Input::Nothing),
        Err(e) => return Err(std::io::Error::from(e)),
    }
    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
    if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
        return Ok(Input::TerminalGone);
    }
    Ok(Input::Ready)
}

/// Clears the screen and makes the next draw paint every cell. Not
/// `Terminal::clear`: it asks the terminal for the cursor position, whose
/// answer arrives on stdin and may be taken by (or wait behind) the input
/// reader (seen: "the cursor position could not be read").
pub fn repaint_whole(terminal: &mut ratatui::DefaultTerminal) -> color_eyre::Result<()> {
    let size = terminal.size().wrap_err("cannot read the terminal size")?;
    terminal
        .resize(Rect::new(0, 0, size.width, size.height))
        .wrap_err("cannot clear the terminal")
}

#[allow(clippy::too_many_arguments)]
fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    path: &Path,
    total: u64,
    preloaded: Option<ViewerState>,
    progress: &Arc<AtomicU64>,
    stop: &AtomicBool,
    theme: &Theme,
    opened: Opened,
) -> color_eyre::Result<ViewerExit> {
    let keymap = Keymap::default();
    let name = display_name(path);
    let Opened {
        at_oom,
        from_dashboard,
        at,
    } = opened;
    let start = |mut v: ViewerState| {
        v.returns_to_dashboard = from_dashboard;
        if at_oom {
            v.open_at_oom(&keymap);
        }
        v
    };
    let mut viewer = preloaded.map(start);
    // Big files: read on a thread; the loop shows the progress meanwhile,
    // then the final state while the trace is read.
    let (tx, rx) = mpsc::channel::<LoaderMessage>();
    let mut loading = viewer.is_none();
    if loading {
        let path: PathBuf = path.to_path_buf();
        let progress = Arc::clone(progress);
        std::thread::Builder::new()
            .name("vramtop-snapshot-loader".to_string())
            .spawn(move || load_staged(&path, total, &progress, &tx))
            .wrap_err("cannot start the loader thread")?;
    }
    let mut dirty = true;
    while !stop.load(Ordering::Relaxed) {
        if loading {
            match rx.try_recv() {
                // With a moment to start at, the loading screen stays until
                // the trace is read: the final state would be the wrong
                // moment, and the moment may be none.
                Ok(LoaderMessage::Segments(_)) if at.is_some() => {}
                Ok(LoaderMessage::Segments(mut stage)) => {
                    stage.returns_to_dashboard = from_dashboard;
                    viewer = Some(stage);
                    dirty = true;
                }
                Ok(LoaderMessage::Complete(Ok(full))) => {
                    viewer = Some(match viewer.take() {
                        Some(mut stage) => {
                            stage.complete_trace(full, &keymap);
                            if at_oom {
                                stage.open_at_oom(&keymap);
                            }
                            stage
                        }
                        None => {
                            let mut v = start(full);
                            if let Some(at) = at {
                                if let Err(e) = v.start_at(at) {
                                    return Ok(ViewerExit::NoMoment(e));
                                }
                                v.show_sites(&keymap);
                            }
                            v
                        }
                    });
                    loading = false;
                    dirty = true;
                }
                Ok(LoaderMessage::Complete(Err(e))) => match viewer.as_mut() {
                    // The final state is on screen already: a trace cut or
                    // damaged after it leaves that state readable.
                    Some(stage) => {
                        stage.trace_failed(
                            crate::ui::format::file_cut_text(&e, false)
                                .unwrap_or_else(|| e.to_string()),
                        );
                        loading = false;
                        dirty = true;
                    }
                    None => return Ok(ViewerExit::BadFile(e)),
                },
                Err(mpsc::TryRecvError::Empty) => match viewer.as_mut() {
                    Some(stage) => dirty |= stage.set_trace_read(progress.load(Ordering::Relaxed)),
                    None => dirty = true,
                },
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(eyre!("the snapshot loader stopped"));
                }
            }
        }
        if dirty {
            terminal
                .draw(|frame| {
                    let area: Rect = frame.area();
                    match &viewer {
                        Some(v) => render_viewer(area, frame.buffer_mut(), v, &keymap, theme),
                        None => render_loading(
                            area,
                            frame.buffer_mut(),
                            &name,
                            progress.load(Ordering::Relaxed),
                            total,
                            at,
                            &keymap,
                            theme,
                        ),
                    }
                })
                .wrap_err("cannot draw")?;
            dirty = false;
        }
        // crossterm keeps what it has read but not yet handed out (a burst
        // of keys is one read): those come first, without waiting on the
        // terminal, which has nothing more to say about them. The hang-up
        // check comes before each crossterm call (see `wait_for_input`).
        if let Input::TerminalGone = wait_for_input(Duration::ZERO).wrap_err("cannot read input")? {
            break;
        }
        if !crossterm::event::poll(Duration::ZERO).wrap_err("cannot read input")? {
            match wait_for_input(Duration::from_millis(POLL_MS)).wrap_err("cannot read input")? {
                Input::TerminalGone => break,
                Input::Nothing | Input::Ready => continue,
            }
        }
        match crossterm::event::read().wrap_err("cannot read input")? {
            Event::Key(key) if key.kind == KeyEventKind::Press => {
                let Some(v) = viewer.as_mut() else {
                    // While loading only quitting does something.
                    if keymap.action_for(key) == Some(crate::app::keymap::Action::Quit) {
                        return Ok(ViewerExit::on_quit_key(&keymap, key));
                    }
                    continue;
                };
                match v.handle_key(&keymap, key) {
                    Effect::Quit => return Ok(ViewerExit::on_quit_key(&keymap, key)),
                    Effect::Redraw => dirty = true,
                    Effect::Stress(_)
                    | Effect::RequestSnapshot { .. }
                    | Effect::SaveSimulatedSnapshot { .. }
                    | Effect::OpenSnapshot { .. }
                    | Effect::Signal { .. }
                    | Effect::None => {}
                }
            }
            Event::Mouse(m) if m.kind == MouseEventKind::Down(MouseButton::Left) => {
                if let Some(v) = viewer.as_mut() {
                    let size = terminal.size().wrap_err("cannot read the terminal size")?;
                    let area = Rect::new(0, 0, size.width, size.height);
                    dirty |= crate::shell::click::click_viewer(area, v, m.column, m.row);
                }
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
    Ok(ViewerExit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_cut_off_is_said_in_the_viewer_as_the_commands_say_it() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/snapshots/Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle");
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("skipping: {} not found", path.display());
            return;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let cut = dir.path().join("t.pickle");
        std::fs::write(&cut, &bytes[..1_500_000]).expect("write");
        let error = crate::snapshot::read_snapshot_file(&cut).expect_err("cut in its trace");
        let v = final_state_despite(&cut, &error).expect("the final state reads");
        let why = v.trace_error.expect("the trace's failure is kept");
        assert!(
            why.contains("the file ends early: 1500000 bytes, cut inside a 64.00 KiB frame"),
            "{why}"
        );
        assert!(why.contains("was it copied whole?"), "{why}");
        // The help says why the trace's keys do nothing: not that the
        // file has no trace.
        let v = final_state_despite(&cut, &error).expect("the final state reads");
        assert_eq!(
            v.unavailable(crate::app::viewer::ViewerAction::StepForward),
            Some("the trace could not be read")
        );
    }
}
