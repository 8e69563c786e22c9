//! The live dashboard's event loop.
//!
//! Tasks and channels:
//! - the input task owns crossterm's `EventStream` and forwards key presses,
//!   mouse clicks and resizes;
//! - the sampler thread ([`crate::device::sampler`]) samples telemetry at the
//!   interval (late ticks skipped, a bounded queue, drops counted); a bridge
//!   thread forwards its samples into the loop;
//! - the loop `select!`s (biased: signals, then the snapshot viewer's end,
//!   then input, then samples, then the render tick) and draws only when
//!   something changed;
//! - the snapshot viewer (`o`, `O`) runs on a thread of its own
//!   ([`ViewerThread`]) that owns the terminal meanwhile: the input task is
//!   stopped (one reader of the terminal at a time), the dashboard draws
//!   nothing, and samples, probe events and answers still reach its state.
//!
//! The terminal is restored on quit, on SIGTERM/SIGHUP/SIGINT/SIGQUIT/
//! SIGUSR1/SIGUSR2 (whose default action would kill vramtop with the
//! terminal in raw mode) and on panic (ratatui's panic hook, installed after
//! color-eyre's, and before it ours, which turns mouse reporting off and
//! stops an open viewer). An open viewer is stopped and waited for before
//! the terminal is restored.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use color_eyre::eyre::{WrapErr, eyre};
use crossterm::event::{Event, EventStream, KeyEventKind, MouseButton, MouseEventKind};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::dashboard::{Dashboard, Next, Replies};
use super::viewer_run::{ViewerExit, ViewerThread, repaint_whole};
use crate::app::capture::CaptureMsg;
use crate::app::observe::AllocatorSources;
use crate::app::state::{AppState, StatusState};
use crate::app::stress::{StressPanel, StressResult};
use crate::device::factory::TelemetrySelection;
use crate::device::sampler::{SampleMsg, Sampler};
use crate::ui::Theme;

/// How often the screen may be redrawn (ms): 4 Hz is smooth for a 1 Hz
/// sampler and costs nothing when nothing changed.
pub const RENDER_TICK_MS: u64 = 250;
/// Samples in flight between the bridge and the loop.
const LOOP_QUEUE_DEPTH: usize = 4;

/// Options of the live dashboard.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub interval: Duration,
    pub theme: Theme,
    /// Panic on purpose after this long: the end-to-end test's way to check
    /// that a crash still restores the terminal (hidden `--debug-panic-after`).
    pub debug_panic_after: Option<Duration>,
    /// The stress panel's cap (bytes, `--stress-cap`); `None`: the default
    /// (50 % of the free memory on a real GPU, none on the simulation).
    pub stress_cap: Option<u64>,
}

/// Forwards key presses, clicks and resizes from crossterm's event stream.
/// Stopped (aborted and awaited) while the snapshot viewer reads the
/// terminal's events itself.
fn spawn_input(input_tx: mpsc::Sender<Input>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut events = EventStream::new();
        while let Some(Ok(event)) = events.next().await {
            let input = match event {
                // Key release/repeat events would fire actions twice.
                Event::Key(k) if k.kind == KeyEventKind::Press => Input::Key(k),
                Event::Mouse(m) if m.kind == MouseEventKind::Down(MouseButton::Left) => {
                    Input::Click {
                        column: m.column,
                        row: m.row,
                    }
                }
                Event::Resize(..) => Input::Resize,
                _ => continue,
            };
            if input_tx.send(input).await.is_err() {
                break;
            }
        }
    })
}

/// Resolves when the open snapshot viewer has returned; never when none
/// is open.
async fn viewer_ended(viewer: &mut Option<ViewerThread>) {
    match viewer {
        Some(v) => v.ended().await,
        None => std::future::pending().await,
    }
}

enum Input {
    Key(crossterm::event::KeyEvent),
    Click { column: u16, row: u16 },
    Resize,
}

/// Runs the dashboard until the user quits or a signal arrives; the
/// signal's number when one stopped it (the caller exits 128 + it, as a
/// process killed by it would), `None` when the user quit.
pub fn run(selection: TelemetrySelection, options: RunOptions) -> color_eyre::Result<Option<i32>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .wrap_err("cannot start the async runtime")?;
    runtime.block_on(run_async(selection, options))
}

async fn run_async(
    selection: TelemetrySelection,
    options: RunOptions,
) -> color_eyre::Result<Option<i32>> {
    let terminal = ratatui::try_init().map_err(|e| {
        eyre!("vramtop needs a terminal ({e}); for headless output use `vramtop --once --json` or `vramtop record FILE`")
    })?;
    // Mouse clicks select GPUs and panes; failure to enable is not fatal.
    // ratatui's panic hook leaves mouse reporting on and the alternate
    // screen drawn: ours turns the one off and clears the other first
    // (`terminal::before_leaving`), then runs ratatui's (which restores
    // the rest and reports).
    // It also stops a snapshot viewer that is open (its thread would draw
    // on the restored terminal otherwise).
    let viewer_stop = Arc::new(AtomicBool::new(false));
    let ratatui_hook = std::panic::take_hook();
    let hook_stop = viewer_stop.clone();
    std::panic::set_hook(Box::new(move |info| {
        hook_stop.store(true, Ordering::Relaxed);
        let _ = super::terminal::before_leaving(&mut std::io::stdout());
        ratatui_hook(info);
    }));
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    let result = event_loop(terminal, selection, options, viewer_stop).await;
    super::terminal::restore();
    // On the restored terminal, where they can be copied: the status line
    // cut long paths, and the user may want them after quitting.
    let Ended { snapshots, signal } = result?;
    if !snapshots.is_empty() {
        println!("snapshots taken or offered this session (vramtop open FILE):");
        for path in snapshots {
            // A probe names its files: none may act on the terminal.
            println!(
                "  {}",
                crate::quote::for_terminal(&path.display().to_string())
            );
        }
    }
    Ok(signal)
}

/// How the dashboard's loop ended.
struct Ended {
    /// The snapshots of the session, to list on the restored terminal.
    snapshots: Vec<std::path::PathBuf>,
    /// The signal that stopped it; `None`: the user quit (`q`, and
    /// `Ctrl-C`, a key in raw mode, not a signal).
    signal: Option<i32>,
}

/// Runs the dashboard; returns how it ended.
/// `viewer_stop` ends a snapshot viewer that is open (set by the panic
/// hook, a stop signal, or the loop's end).
async fn event_loop(
    terminal: ratatui::DefaultTerminal,
    selection: TelemetrySelection,
    options: RunOptions,
    viewer_stop: Arc<AtomicBool>,
) -> color_eyre::Result<Ended> {
    let mut state = AppState::new(StatusState {
        backend: selection.backend.to_string(),
        banner: selection.fallback_reason.clone(),
        banner_short: selection.fallback_short(),
        sample_interval_ms: options.interval.as_millis() as u64,
        home_dir: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::PathBuf::from),
        ..StatusState::default()
    });
    state.stress = StressPanel::with_cap(options.stress_cap);
    let started = Instant::now();
    // Live probes: scanned and read on their own threads; each sample
    // takes a copy of what they last sent.
    let sources = AllocatorSources::start(selection.sim.clone());

    let (sampler, sample_rx) = Sampler::spawn(selection.telemetry, options.interval)
        .wrap_err("cannot start the sampler thread")?;
    let (sample_tx, mut samples) = mpsc::channel::<SampleMsg>(LOOP_QUEUE_DEPTH);
    std::thread::Builder::new()
        .name("vramtop-sample-bridge".to_string())
        .spawn(move || {
            while let Ok(msg) = sample_rx.recv() {
                if sample_tx.blocking_send(msg).is_err() {
                    break;
                }
            }
        })
        .wrap_err("cannot start the sample bridge")?;

    let (input_tx, mut inputs) = mpsc::channel::<Input>(64);
    let mut input_task = spawn_input(input_tx.clone());
    // Snapshot requests run on threads of their own and report here.
    let (capture_tx, mut captures) = mpsc::unbounded_channel::<CaptureMsg>();

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .wrap_err("cannot watch SIGTERM")?;
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .wrap_err("cannot watch SIGHUP")?;
    let mut sigquit = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::quit())
        .wrap_err("cannot watch SIGQUIT")?;
    let mut sigusr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        .wrap_err("cannot watch SIGUSR1")?;
    let mut sigusr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
        .wrap_err("cannot watch SIGUSR2")?;
    let deliberate_panic =
        tokio::time::sleep(options.debug_panic_after.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deliberate_panic);
    let mut render = tokio::time::interval(Duration::from_millis(RENDER_TICK_MS));
    render.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

    // The stress worker starts when the panel is first opened and reports
    // here; it goes with the dashboard, whose drop frees what it holds.
    let (stress_tx, mut stress_results) = mpsc::unbounded_channel::<StressResult>();
    let replies = Replies {
        stress: stress_tx,
        capture: capture_tx,
    };
    let mut dashboard = Dashboard::new(terminal, state, sources, options.theme.clone(), replies);
    // A simulated process's snapshot (`c`) and the stress panel's (`W`) go
    // where the probe puts its own, not into whatever folder vramtop was
    // started from (a git checkout, say).
    if let Some(dir) = crate::probe::snapshot_file::default_snapshot_dir() {
        dashboard.save_snapshots_in(dir);
    }
    // The snapshot viewer while it is open. Dropping it stops it and waits
    // for its last draw: on every way out of here (a signal, an error, a
    // panic), before the caller restores the terminal.
    let mut viewer: Option<ViewerThread> = None;
    let mut signal: Option<i32> = None;
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
    loop {
        tokio::select! {
            biased;
            _ = sigterm.recv() => { signal = Some(SIGTERM); break }
            _ = sighup.recv() => { signal = Some(SIGHUP); break }
            _ = sigquit.recv() => { signal = Some(SIGQUIT); break }
            _ = sigusr1.recv() => { signal = Some(SIGUSR1); break }
            _ = sigusr2.recv() => { signal = Some(SIGUSR2); break }
            // SIGINT from `kill -INT`: the Ctrl-C key is a key in raw mode.
            _ = tokio::signal::ctrl_c() => { signal = Some(SIGINT); break }
            () = viewer_ended(&mut viewer) => {
                let shown = viewer.take().map_or(Ok(ViewerExit::Done), ViewerThread::join);
                // Ctrl-C in the viewer quits vramtop, as in the dashboard.
                if dashboard.on_viewer_closed(shown) == Next::Quit {
                    break;
                }
                input_task = spawn_input(input_tx.clone());
                repaint_whole(dashboard.terminal_mut())?;
            }
            // Keys read before the viewer opened wait for it to close: they
            // were meant for the dashboard.
            Some(input) = inputs.recv(), if viewer.is_none() => {
                match input {
                    Input::Key(key) => match dashboard.on_key(key) {
                        Next::Quit => break,
                        Next::Continue => {}
                        Next::OpenSnapshot { path, at_oom } => {
                            // The viewer reads the terminal's events
                            // itself: the input task must not compete.
                            input_task.abort();
                            let _ = (&mut input_task).await;
                            let theme = dashboard.theme().clone();
                            match ViewerThread::spawn(path, theme, at_oom, viewer_stop.clone()) {
                                Ok(v) => viewer = Some(v),
                                Err(e) => {
                                    input_task = spawn_input(input_tx.clone());
                                    let _ = dashboard.on_viewer_closed(Err(eyre!(
                                        "cannot start its thread: {e}"
                                    )));
                                }
                            }
                        }
                    },
                    Input::Click { column, row } => dashboard.on_click(column, row),
                    Input::Resize => dashboard.on_resize(),
                }
            }
            Some(msg) = captures.recv() => {
                let now_ms = started.elapsed().as_millis() as u64;
                dashboard.on_capture(now_ms, msg);
            }
            Some(result) = stress_results.recv() => dashboard.on_stress_result(result),
            Some(msg) = samples.recv() => {
                let now_ms = started.elapsed().as_millis() as u64;
                let dropped = sampler
                    .counters()
                    .dropped
                    .load(std::sync::atomic::Ordering::Relaxed);
                dashboard.on_sample(now_ms, msg.readings, dropped);
            }
            () = &mut deliberate_panic, if options.debug_panic_after.is_some() => {
                panic!("deliberate panic (--debug-panic-after), to check that the terminal is restored");
            }
            _ = render.tick() => {
                dashboard.draw_if_dirty().wrap_err("cannot draw")?;
            }
        }
    }
    // An open viewer is stopped here, before the terminal is restored.
    drop(viewer.take());
    input_task.abort();
    let snapshots = dashboard.state().session_snapshots();
    // Frees every stress tensor and empties its cache before leaving.
    drop(dashboard);
    sampler.stop();
    Ok(Ended { snapshots, signal })
}
