//! The live dashboard's event loop.
//!
//! Tasks and channels:
//! - the input task owns crossterm's `EventStream` and forwards key presses,
//!   mouse clicks and resizes;
//! - the sampler thread ([`crate::device::sampler`]) samples telemetry at the
//!   interval (late ticks skipped, a bounded queue, drops counted); a bridge
//!   thread forwards its samples into the loop;
//! - the loop `select!`s (biased: signals, then input, then samples, then the
//!   render tick) and draws only when something changed.
//!
//! The terminal is restored on quit, on SIGTERM/SIGHUP/SIGINT/SIGQUIT/
//! SIGUSR1/SIGUSR2 (whose default action would kill vramtop with the
//! terminal in raw mode) and on panic (ratatui's panic hook, installed after
//! color-eyre's, and before it ours, which turns mouse reporting off).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use color_eyre::eyre::{WrapErr, eyre};
use crossterm::event::{Event, EventStream, KeyEventKind, MouseButton, MouseEventKind};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::click::click;
use super::viewer_run::{ViewerExit, repaint_whole, view_in_terminal};
use crate::app::capture::{CAPTURE_TIMEOUT_MS, CaptureMsg};
use crate::app::keymap::Keymap;
use crate::app::observe::AllocatorSources;
use crate::app::state::{AppState, StatusState};
use crate::app::stress::{StressPanel, StressResult};
use crate::app::stress_worker::StressWorker;
use crate::app::update::{Effect, handle_key, on_stress_result};
use crate::device::factory::TelemetrySelection;
use crate::device::sampler::{SampleMsg, Sampler};
use crate::device::sim::SimCluster;
use crate::probe::client::{self, Progress};
use crate::ui::{self, Theme};

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

/// Starts the stress worker the first time the panel is opened, on the
/// selected GPU: of the simulation when it is the backend, else on CUDA when
/// `cuda::probe()` lists that GPU. Without either it stays `None` and the
/// panel says why (`no_cuda` keeps the probe's answer, so it runs once).
fn ensure_stress_worker(
    worker: &mut Option<StressWorker>,
    state: &mut AppState,
    sim: Option<&SimCluster>,
    no_cuda: &mut Option<String>,
    results: &mpsc::UnboundedSender<StressResult>,
) {
    if !state.ui.stress_open || worker.is_some() {
        return;
    }
    let gpu = state.selected().map_or(0, |g| g.index());
    let tx = results.clone();
    let deliver = move |r| {
        let _ = tx.send(r);
    };
    let spawned = match sim {
        Some(cluster) => StressWorker::spawn_sim(cluster, gpu, deliver),
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
                state.stress.message = Some(why.clone());
                return;
            }
            StressWorker::spawn_cuda(gpu, deliver)
        }
    };
    match spawned {
        Ok(w) => *worker = Some(w),
        Err(e) => state.stress.message = Some(format!("cannot start the stress worker: {e}")),
    }
}

/// Hands commands to the worker; a worker that has gone (it panicked)
/// leaves the panel idle with a message instead of waiting forever.
fn send_stress(
    worker: Option<&StressWorker>,
    state: &mut AppState,
    commands: Vec<crate::app::stress::StressCommand>,
) {
    if !worker.is_some_and(|w| w.send(commands)) {
        state.stress.busy = false;
        state.stress.queued.clear();
        state.stress.message = Some("the stress worker has stopped".to_string());
    }
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

/// Asks the probe at `socket` for a snapshot on a thread of its own; its
/// progress and answer come back as [`CaptureMsg`]s.
fn spawn_capture(pid: u32, socket: PathBuf, tx: mpsc::UnboundedSender<CaptureMsg>) {
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
                let _ = tx.send(match answer {
                    Ok(done) => CaptureMsg::Done {
                        pid,
                        path: done.path,
                        has_trace: done.has_trace,
                    },
                    Err(e) => CaptureMsg::Failed {
                        pid,
                        why: e.to_string(),
                    },
                });
            }
        });
    if let Err(e) = spawned {
        let _ = tx.send(CaptureMsg::Failed {
            pid,
            why: format!("cannot start a thread: {e}"),
        });
    }
}

enum Input {
    Key(crossterm::event::KeyEvent),
    Click { column: u16, row: u16 },
    Resize,
}

/// Runs the dashboard until the user quits or a signal arrives.
pub fn run(selection: TelemetrySelection, options: RunOptions) -> color_eyre::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .wrap_err("cannot start the async runtime")?;
    runtime.block_on(run_async(selection, options))
}

async fn run_async(selection: TelemetrySelection, options: RunOptions) -> color_eyre::Result<()> {
    let mut terminal = ratatui::try_init().map_err(|e| {
        eyre!("vramtop needs a terminal ({e}); for headless output use `vramtop --once --json` or `vramtop record FILE`")
    })?;
    // Mouse clicks select GPUs and panes; failure to enable is not fatal.
    // ratatui's panic hook leaves mouse reporting on: ours turns it off
    // first, then runs ratatui's (which restores the rest and reports).
    let ratatui_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
        ratatui_hook(info);
    }));
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    let result = event_loop(&mut terminal, selection, options).await;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
    ratatui::restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    selection: TelemetrySelection,
    options: RunOptions,
) -> color_eyre::Result<()> {
    let keymap = Keymap::default();
    let mut state = AppState::new(StatusState {
        backend: selection.backend.to_string(),
        banner: selection.fallback_reason.clone(),
        sample_interval_ms: options.interval.as_millis() as u64,
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

    // The stress worker starts when the panel is first opened; dropping it
    // (on every exit path, panics included) frees what it holds.
    let (stress_tx, mut stress_results) = mpsc::unbounded_channel::<StressResult>();
    let mut stress_worker: Option<StressWorker> = None;
    let mut no_cuda: Option<String> = None;

    let mut dirty = true;
    let mut area = terminal.get_frame().area();
    loop {
        tokio::select! {
            biased;
            _ = sigterm.recv() => break,
            _ = sighup.recv() => break,
            _ = sigquit.recv() => break,
            _ = sigusr1.recv() => break,
            _ = sigusr2.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            Some(input) = inputs.recv() => {
                match input {
                    Input::Key(key) => {
                        let effect = handle_key(&mut state, &keymap, key);
                        ensure_stress_worker(
                            &mut stress_worker,
                            &mut state,
                            sources.sim(),
                            &mut no_cuda,
                            &stress_tx,
                        );
                        match effect {
                            Effect::Quit => break,
                            Effect::Redraw => dirty = true,
                            Effect::Stress(commands) => {
                                send_stress(stress_worker.as_ref(), &mut state, commands);
                                dirty = true;
                            }
                            Effect::RequestSnapshot { pid, socket } => {
                                spawn_capture(pid, socket, capture_tx.clone());
                                dirty = true;
                            }
                            Effect::OpenSnapshot { path, at_oom } => {
                                // The viewer reads the terminal's events
                                // itself: the input task must not compete.
                                input_task.abort();
                                let _ = (&mut input_task).await;
                                let shown = tokio::task::block_in_place(|| {
                                    view_in_terminal(terminal, &path, &options.theme, at_oom)
                                });
                                input_task = spawn_input(input_tx.clone());
                                repaint_whole(terminal)?;
                                match shown {
                                    Ok(ViewerExit::Done) => {}
                                    Ok(ViewerExit::BadFile(e)) => {
                                        state.ui.notice = Some(format!("cannot open the snapshot: {e}"));
                                    }
                                    Err(e) => {
                                        state.ui.notice = Some(format!("the viewer stopped: {e}"));
                                    }
                                }
                                dirty = true;
                            }
                            Effect::None => {}
                        }
                    }
                    Input::Click { column, row } => {
                        if click(area, &mut state, &options.theme, column, row) {
                            dirty = true;
                        }
                    }
                    Input::Resize => dirty = true,
                }
            }
            Some(msg) = captures.recv() => {
                let now_ms = started.elapsed().as_millis() as u64;
                state.capture.on_msg(now_ms, msg);
                dirty = true;
            }
            Some(result) = stress_results.recv() => {
                if let Effect::Stress(commands) = on_stress_result(&mut state, result) {
                    send_stress(stress_worker.as_ref(), &mut state, commands);
                }
                dirty = true;
            }
            Some(msg) = samples.recv() => {
                let now_ms = started.elapsed().as_millis() as u64;
                match msg.readings {
                    Ok(readings) => {
                        sources.observe(readings).apply_to(&mut state, now_ms);
                        state.status.last_error = None;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "sampling failed");
                        state.status.last_error = Some(e.to_string());
                    }
                }
                state.status.dropped_samples = sampler
                    .counters()
                    .dropped
                    .load(std::sync::atomic::Ordering::Relaxed);
                dirty = true;
            }
            () = &mut deliberate_panic, if options.debug_panic_after.is_some() => {
                panic!("deliberate panic (--debug-panic-after), to check that the terminal is restored");
            }
            _ = render.tick() => {
                if dirty {
                    let completed = terminal
                        .draw(|frame| ui::draw(frame, &state, &keymap, &options.theme))
                        .wrap_err("cannot draw")?;
                    area = completed.area;
                    dirty = false;
                }
            }
        }
    }
    input_task.abort();
    // Frees every stress tensor and empties its cache before leaving.
    drop(stress_worker);
    sampler.stop();
    Ok(())
}
