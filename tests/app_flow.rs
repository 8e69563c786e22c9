//! App flows without a terminal or sleeps: scripted samples and key presses
//! go through the same update and drawing code as the live dashboard.

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::sync::mpsc;
use vramtop::app::capture::CaptureMsg;
use vramtop::app::keymap::Keymap;
use vramtop::app::process_list::SortColumn;
use vramtop::app::state::{AppState, Overlay, Pane, StatusState};
use vramtop::app::stress::{StressAction, StressResult};
use vramtop::device::sim::{Fault, SimCluster, SimConfig};
use vramtop::device::{Telemetry, TelemetryError};
use vramtop::shell::dashboard::{Dashboard, Next};
use vramtop::ui::{self, Theme};

/// The live dashboard's own handlers (`shell::dashboard`), driven by a
/// scripted clock, the simulation and key presses, drawn on a test backend.
struct Flow {
    cluster: SimCluster,
    dash: Dashboard<TestBackend>,
    clock_ms: u64,
    stress_results: mpsc::UnboundedReceiver<StressResult>,
    captures: mpsc::UnboundedReceiver<CaptureMsg>,
}

impl Flow {
    fn new(gpus: usize) -> Flow {
        Flow::with_trainers(gpus, 1)
    }

    /// `gpus` simulated GPUs, a trainer on each of the first `trainers`.
    fn with_trainers(gpus: usize, trainers: usize) -> Flow {
        Flow::of(common::dashboard::sim_dashboard(
            gpus,
            trainers,
            11,
            (120, 40),
        ))
    }

    /// One simulated GPU sampled twice, the stress panel opened (F2
    /// redraws) and its allocator ready.
    fn with_stress_panel() -> Flow {
        let mut f = Flow::new(1);
        f.samples(2);
        f.key_redraws(KeyCode::F(2));
        f.stress_answer();
        f
    }

    /// The flow of a dashboard made, at its scripted clock's start.
    fn of(made: common::dashboard::SimDashboard) -> Flow {
        Flow {
            cluster: made.cluster,
            dash: made.dash,
            clock_ms: 0,
            stress_results: made.stress_results,
            captures: made.captures,
        }
    }

    fn state(&self) -> &AppState {
        self.dash.state()
    }

    fn samples(&mut self, n: u64) {
        let mut t = self.cluster.telemetry();
        for _ in 0..n {
            self.cluster.advance(1000);
            self.clock_ms += 1000;
            self.dash.on_sample(self.clock_ms, t.sample(), 0);
        }
    }

    fn key(&mut self, code: KeyCode) -> Next {
        self.dash.on_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    /// The last row of the 80×24 screen: the status line.
    fn status_line(&mut self) -> String {
        self.screen(80, 24)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    }

    /// Presses `code` and checks that it changed what is drawn.
    fn key_redraws(&mut self, code: KeyCode) {
        assert_eq!(self.key(code), Next::Continue);
        assert!(self.dash.is_dirty(), "{code:?} should redraw");
    }

    /// Hands the stress worker's next answer to the dashboard, as the loop
    /// does (the worker runs on its own thread: waits up to 10 s).
    fn stress_answer(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match self.stress_results.try_recv() {
                Ok(result) => return self.dash.on_stress_result(result),
                Err(mpsc::error::TryRecvError::Empty) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => panic!("no answer from the stress worker: {e}"),
            }
        }
    }

    /// Hands a capture's messages to the dashboard, as the loop does,
    /// until its answer (the capture runs on its own thread: waits up to
    /// 10 s); the answer.
    fn capture_answer(&mut self) -> CaptureMsg {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match self.captures.try_recv() {
                Ok(msg) => {
                    self.dash.on_capture(self.clock_ms, msg.clone());
                    if matches!(msg, CaptureMsg::Done { .. } | CaptureMsg::Failed { .. }) {
                        return msg;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => panic!("no answer to the capture: {e}"),
            }
        }
    }

    /// The screen at `w`×`h`, as the loop's render tick draws it.
    fn screen(&mut self, w: u16, h: u16) -> String {
        self.dash.terminal_mut().backend_mut().resize(w, h);
        self.dash.on_resize();
        assert!(
            self.dash.draw_if_dirty().expect("draws"),
            "a resize redraws"
        );
        self.dash.terminal().backend().to_string()
    }
}

#[test]
fn selecting_the_second_gpu_moves_the_breakdown_to_it() {
    let mut f = Flow::new(2);
    f.samples(5);
    assert!(f.screen(120, 40).contains("Memory breakdown  GPU 0"));
    // Keys are the numbers on screen (nvidia-smi's, from 0).
    f.key(KeyCode::Char('1'));
    assert!(f.screen(120, 40).contains("Memory breakdown  GPU 1"));
    // GPU 1 has no training process: no allocator view, and the allocator
    // panes, folded into one row, say so.
    let screen = f.screen(120, 40);
    assert!(
        screen.contains("Fragmentation · Segments  no allocator"),
        "{screen}"
    );
    assert!(!screen.contains("Fragmentation  GPU 1"), "{screen}");
    f.key(KeyCode::Char('2'));
    let screen = f.screen(120, 40);
    assert!(screen.contains("Memory breakdown  GPU 1"), "stays");
    assert!(screen.contains("no GPU 2: GPUs here: 0, 1"), "{screen}");
}

/// The processes pane's lines of an 80×24 screen (below its header).
fn process_lines(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.contains(" Processes "))
        .skip(2)
        .take_while(|l| !l.contains(" samples "))
        .map(str::to_string)
        .collect()
}

#[test]
fn selecting_a_gpu_at_80x24_scrolls_the_processes_to_its_own() {
    // Twelve GPUs leave the processes pane room for one line; trainers
    // 4242, 4243 and 4244 run on GPUs 0, 1 and 2.
    let mut f = Flow::with_trainers(12, 3);
    f.samples(3);
    // In pid order (`s` to it, from any pane) the trainers' lines are
    // 4242, 4243, 4244, whatever memory each holds at the moment.
    while f.state().ui.process_sort.column != SortColumn::Pid {
        f.key_redraws(KeyCode::Char('s'));
    }
    let lines = process_lines(&f.screen(80, 24));
    assert!(lines.iter().any(|l| l.contains("4242")), "{lines:?}");
    f.key_redraws(KeyCode::Char('2'));
    let screen = f.screen(80, 24);
    let lines = process_lines(&screen);
    assert!(
        lines.iter().any(|l| l.contains("4244") && l.contains("▶2")),
        "GPU 2's trainer, marked: {screen}"
    );
    // ↑ in the GPUs pane selects GPU 1: its trainer comes into view.
    f.key(KeyCode::Up);
    let screen = f.screen(80, 24);
    assert!(
        process_lines(&screen).iter().any(|l| l.contains("4243 ")),
        "{screen}"
    );
    // Scrolled by hand in Processes, the list stays where the user put
    // it as samples come, until a GPU is selected again.
    f.key(KeyCode::Tab);
    while f.state().ui.focus != Pane::Processes {
        f.key(KeyCode::Tab);
    }
    f.key(KeyCode::Down);
    f.samples(2);
    let screen = f.screen(80, 24);
    assert!(
        process_lines(&screen).iter().any(|l| l.contains("4244")),
        "{screen}"
    );
    f.key(KeyCode::Char('0'));
    let screen = f.screen(80, 24);
    assert!(
        process_lines(&screen)
            .iter()
            .any(|l| l.contains("4242") && l.contains("▶0")),
        "{screen}"
    );
    // A click on GPU 2's row selects it as `2` does.
    let row = screen
        .lines()
        .position(|l| l.contains(" 2  Simulated"))
        .unwrap_or_else(|| panic!("GPU 2 is listed: {screen}"));
    f.dash
        .on_click(3, u16::try_from(row).expect("a screen row"));
    let screen = f.screen(80, 24);
    assert!(
        process_lines(&screen)
            .iter()
            .any(|l| l.contains("4244") && l.contains("▶2")),
        "{screen}"
    );
}

#[test]
fn a_click_that_selects_a_gpu_clears_the_no_gpu_notice_like_a_key_does() {
    let mut f = Flow::new(2);
    f.samples(5);
    f.key(KeyCode::Char('2'));
    let screen = f.screen(120, 40);
    assert!(screen.contains("no GPU 2: GPUs here: 0, 1"), "{screen}");
    // Select GPU 1 with the mouse, on its row as drawn (the notice's
    // status row included).
    let row = screen
        .lines()
        .position(|l| l.contains(" 1 Simulated"))
        .expect("GPU 1 is listed");
    f.dash
        .on_click(3, u16::try_from(row).expect("a screen row"));
    assert_eq!(f.state().ui.selected_gpu, 1, "the click selected GPU 1");
    assert_eq!(f.state().ui.notice, None);
    // Nor does it come back with the next samples.
    f.samples(2);
    let screen = f.screen(120, 40);
    assert!(screen.contains("Memory breakdown  GPU 1"), "{screen}");
    assert!(!screen.contains("no GPU 2"), "stale: {screen}");
    // A click that changes nothing else still answers the notice.
    f.key(KeyCode::Char('7'));
    assert!(f.screen(120, 40).contains("no GPU 7: GPUs here: 0, 1"));
    f.dash
        .on_click(3, u16::try_from(row).expect("a screen row"));
    assert!(f.dash.is_dirty(), "the notice goes: a redraw");
    assert!(!f.screen(120, 40).contains("no GPU 7"));
}

#[test]
fn help_overlay_opens_and_closes_over_the_live_screen() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key_redraws(KeyCode::Char('?'));
    assert_eq!(f.state().ui.overlay, Overlay::Help);
    let screen = f.screen(120, 40);
    assert!(screen.contains("fragmentation"), "{screen}");
    f.samples(2);
    assert_eq!(
        f.state().ui.overlay,
        Overlay::Help,
        "samples do not close the help"
    );
    f.key(KeyCode::Esc);
    assert_eq!(f.state().ui.overlay, Overlay::None);
}

#[test]
fn process_filter_typed_after_slash_narrows_the_list() {
    let mut f = Flow::new(1);
    f.samples(3);
    assert!(f.screen(120, 40).contains("train.py"));
    f.key(KeyCode::Char('/'));
    f.type_text("nomatch");
    f.key(KeyCode::Enter);
    assert_eq!(f.state().ui.focus, Pane::Processes);
    assert!(!f.screen(120, 40).contains("train.py"));
    f.key(KeyCode::Esc);
    assert!(f.screen(120, 40).contains("train.py"));
}

#[test]
fn a_full_process_filter_says_so_on_the_status_line_beside_the_key_it_names() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::Char('/'));
    for _ in 0..64 {
        f.key(KeyCode::Char('x'));
    }
    f.key(KeyCode::Char('y'));
    assert_eq!(f.state().ui.process_filter.text(), "x".repeat(64));
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = f.screen(w, h);
        let words = screen.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains(
                "the process filter holds 64 characters: the rest is not typed (Bksp deletes)"
            ),
            "{w}x{h}: {screen}"
        );
        // The key it names is the one the hints offer for deleting.
        let hints = screen.lines().last().unwrap_or_default();
        assert!(hints.contains("Bksp delete"), "{w}x{h}: {hints}");
    }
    f.key(KeyCode::Backspace);
    assert!(!f.screen(80, 24).contains("holds 64 characters"));
}

#[test]
fn paused_timeline_keeps_its_window_while_samples_arrive() {
    let mut f = Flow::new(1);
    f.samples(10);
    f.key(KeyCode::Char('p'));
    let paused_at = f.state().ui.paused_at_ms;
    f.samples(20);
    assert_eq!(f.state().ui.paused_at_ms, paused_at);
    assert!(f.screen(120, 40).contains("PAUSED"));
    assert_eq!(
        f.state().gpus[0].history.points.len(),
        30,
        "samples are still recorded"
    );
}

#[test]
fn a_gpu_lost_mid_run_is_shown_and_the_others_keep_updating() {
    let mut f = Flow::new(2);
    f.samples(3);
    f.cluster.inject(Fault::GpuLost { gpu: 1 });
    f.samples(2);
    let screen = f.screen(120, 40);
    assert!(screen.contains("lost"), "{screen}");
    assert!(f.state().gpus[0].sample().is_some());
    assert_eq!(f.state().gpus[0].history.points.len(), 5);
}

#[test]
fn quitting_is_an_effect_not_an_exit() {
    let mut f = Flow::new(1);
    assert_eq!(f.key(KeyCode::Char('q')), Next::Quit);
}

#[test]
fn help_scrolls_with_j_and_page_down_to_its_last_row_at_80x24() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::Char('?'));
    let first = f.screen(80, 24);
    assert!(first.contains("↓ j PgDn more"), "{first}");
    assert!(!first.contains("process tree / flat list"), "{first}");
    f.key_redraws(KeyCode::Char('j'));
    for _ in 0..5 {
        f.key(KeyCode::PageDown);
    }
    let end = f.screen(80, 24);
    assert!(end.contains("process tree / flat list"), "{end}");
    assert!(end.contains("↑ k PgUp back"), "{end}");
    assert_eq!(
        f.state().ui.focus,
        Pane::Gpus,
        "keys scroll, not move focus"
    );
    f.key(KeyCode::Esc);
    f.key(KeyCode::Char('?'));
    assert_eq!(f.state().ui.help_scroll, 0, "help opens at the top");
}

#[test]
fn help_with_the_stress_panel_open_keeps_its_definitions_readable() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::F(2));
    f.key(KeyCode::Char('?'));
    let screen = f.screen(120, 40);
    assert!(screen.contains("In the stress panel"), "{screen}");
    // Not squashed into a narrow column beside the panel's long key lines.
    f.dash.state_mut().ui.help_scroll = 200;
    let end = f.screen(120, 40);
    assert!(
        end.contains("fragmentation (frag) = 1 − largest free block / external free."),
        "{end}"
    );
}

#[test]
fn the_stress_panel_can_be_found_from_the_status_line_and_the_help() {
    let mut f = Flow::new(1);
    f.samples(3);
    let status = f.screen(80, 24);
    let last = status.lines().last().unwrap_or_default().to_string();
    assert!(last.contains("a stress"), "{last}");
    f.key(KeyCode::Char('?'));
    // At 80×24 the first page ends at the dimmed `v` and `0…9` (one GPU,
    // one allocator: each with its reason below it); a page down shows it.
    f.key(KeyCode::PageDown);
    let help = f.screen(80, 24);
    assert!(help.contains("a F2       stress panel"), "{help}");
}

#[test]
fn panel_hints_keep_the_walkthrough_keys_at_120_columns() {
    let mut f = Flow::with_stress_panel();
    // Before any tensor `m` has nothing to free, and is not offered.
    let screen = f.screen(120, 40);
    let last = screen.lines().last().unwrap_or_default().to_string();
    assert!(!last.contains("m every other"), "{last}");
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    let screen = f.screen(120, 40);
    let last = screen.lines().last().unwrap_or_default().to_string();
    for hint in [
        "q quit",
        "? help",
        "a alloc",
        "m every other",
        "e empty_cache",
        "c compare",
        "n scenarios",
    ] {
        assert!(last.contains(hint), "{hint} missing: {last}");
    }
}

#[test]
fn v_with_one_allocator_on_the_gpu_says_why_nothing_changed() {
    // One simulated training process, no probe: one allocator to show.
    let mut f = Flow::new(1);
    f.samples(3);
    f.key_redraws(KeyCode::Char('v'));
    let screen = f.screen(120, 40);
    assert!(
        screen.contains("v: GPU 0 has one process with an allocator: nothing to switch to"),
        "{screen}"
    );
}

#[test]
fn a_frame_before_the_first_sample_says_it_is_sampling_not_that_there_is_no_gpu() {
    let state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
    terminal
        .draw(|f| ui::draw(f, &state, &Keymap::default(), &Theme::colored()))
        .expect("draws");
    let screen = terminal.backend().to_string();
    assert!(screen.contains("sampling the GPUs…"), "{screen}");
    assert!(screen.contains("first sample…"), "{screen}");
    assert!(
        !screen.contains("no GPU found"),
        "a false statement: {screen}"
    );
    assert!(!screen.contains("0 samples"), "{screen}");
}

#[test]
fn nothing_new_draws_nothing_and_a_sample_draws_again() {
    let mut f = Flow::new(1);
    f.samples(1);
    f.screen(80, 24);
    assert!(
        !f.dash.draw_if_dirty().expect("draws"),
        "no change, no draw"
    );
    f.samples(1);
    assert!(f.dash.draw_if_dirty().expect("draws"), "a sample redraws");
    // A key that does nothing in this context redraws nothing either.
    assert_eq!(f.key(KeyCode::F(12)), Next::Continue);
    assert!(!f.dash.is_dirty());
}

#[test]
fn a_failed_sample_is_said_on_the_status_line_and_the_next_one_clears_it() {
    let mut f = Flow::new(1);
    f.samples(2);
    f.dash.on_sample(
        f.clock_ms + 1000,
        Err(TelemetryError::Failed {
            backend: "sim",
            reason: "the driver stopped answering".into(),
        }),
        3,
    );
    let screen = f.screen(120, 40);
    assert!(screen.contains("error: "), "{screen}");
    assert!(screen.contains("the driver stopped answering"), "{screen}");
    assert_eq!(f.state().status.dropped_samples, 3);
    f.samples(1);
    assert_eq!(f.state().status.last_error, None);
}

/// A fake v2 probe (this test process, pid 4242 in its hello) in a private
/// directory: hello, stats and segments at once, then an OOM with its
/// snapshot and the stats after it when `oom` is sent to. Holds the
/// connection until the dashboard hangs up.
fn fake_probe() -> (tempfile::TempDir, std::sync::mpsc::Sender<()>) {
    fake_probe_with(false)
}

/// [`fake_probe`]; `after_an_oom`: the process had an OOM before the
/// dashboard connected, which the probe tells of right after its hello (as
/// the real probe does, marked `earlier`) and its stats count.
fn fake_probe_with(after_an_oom: bool) -> (tempfile::TempDir, std::sync::mpsc::Sender<()>) {
    fake_probe_saying(after_an_oom, "tried to allocate 8.00 GiB")
}

/// [`fake_probe_with`], its OOM (of 8 GiB) said in `message`.
fn fake_probe_saying(
    after_an_oom: bool,
    message: &str,
) -> (tempfile::TempDir, std::sync::mpsc::Sender<()>) {
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let listener =
        std::os::unix::net::UnixListener::bind(dir.path().join("4242.sock")).expect("bind");
    // The OOM's snapshot: a pickle (PROTO 4, EMPTY_DICT, STOP) named and
    // placed as the probe writes them, or it is not offered.
    let snapshot = dir
        .path()
        .join("node7-4242-rank0-20261201T120002Z-oom.pickle");
    std::fs::write(&snapshot, b"\x80\x04}.").expect("write");
    let (oom, oom_rx) = std::sync::mpsc::channel::<()>();
    let message = message.to_string();
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        let stats = |ooms: u64| {
            format!(
                "{{\"v\":2,\"type\":\"stats\",\"device\":0,\"stats\":{{\
                 \"allocated_bytes.all.current\":1073741824,\
                 \"reserved_bytes.all.current\":2147483648,\"num_ooms\":{ooms}}}}}\n"
            )
        };
        let hello =
            "{\"v\":2,\"type\":\"hello\",\"pid\":4242,\"argv\":[\"train.py\"],\"devices\":[0]}\n"
                .to_string();
        let segments = "{\"v\":2,\"type\":\"segments\",\"device\":0,\"segments\":[]}\n".to_string();
        let first = if after_an_oom {
            vec![
                hello,
                "{\"v\":2,\"type\":\"oom\",\"device\":0,\"alloc_bytes\":4294967296,\
                 \"message\":\"tried to allocate 4.00 GiB\",\"earlier\":true}\n"
                    .to_string(),
                stats(1),
                segments,
            ]
        } else {
            vec![hello, stats(0), segments]
        };
        let then = [
            format!(
                "{}\n",
                serde_json::json!({
                    "v": 2, "type": "oom", "device": 0, "alloc_bytes": 8_589_934_592_u64,
                    "message": message,
                    "snapshot": snapshot, "snapshot_error": null,
                })
            ),
            stats(1),
        ];
        for line in &first {
            if conn.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        if oom_rx.recv().is_ok() {
            for line in &then {
                if conn.write_all(line.as_bytes()).is_err() {
                    return;
                }
            }
        }
        let mut sink = [0u8; 64];
        while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
    });
    (dir, oom)
}

/// Samples (1 s apart on the scripted clock) until `seen` holds; the
/// probe's lines are read on the registry's threads, in real time.
fn sample_until(f: &mut Flow, what: &str, seen: impl Fn(&AppState) -> bool) {
    // Bounded (20 s) for a busy machine; the registry rescans every 2 s.
    for _ in 0..2000 {
        if seen(f.state()) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        f.samples(1);
    }
    panic!("never seen: {what}");
}

#[test]
fn samples_while_the_viewer_is_open_fill_the_timeline_and_a_probes_oom_then_is_marked() {
    let (dir, oom) = fake_probe();
    let mut f = probed_flow(&dir);
    f.screen(80, 24);
    // `c` took a snapshot; `o` hands the terminal to the viewer.
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: std::process::id(),
            path: std::path::PathBuf::from("/s/node7-4242-capture.pickle"),
            has_trace: true,
        },
    );
    assert!(
        matches!(f.key(KeyCode::Char('o')), Next::OpenSnapshot { .. }),
        "o opens the snapshot"
    );
    assert!(f.dash.is_viewing());
    let opened_ms = f.clock_ms;
    let screen_before = f.dash.terminal().backend().to_string();
    f.samples(3);
    let oom_sent_ms = f.clock_ms;
    oom.send(()).expect("the fake probe listens");
    sample_until(&mut f, "the probe's OOM", |s| {
        s.probes.oom_snapshot.is_some()
            && s.gpus[0]
                .history
                .markers
                .iter()
                .any(|m| m.kind == vramtop::app::state::MarkerKind::Oom)
    });
    f.samples(3);
    let closed_ms = f.clock_ms;
    // The viewer owns the screen: the render tick draws nothing.
    assert!(!f.dash.draw_if_dirty().expect("draws"));
    assert_eq!(f.dash.terminal().backend().to_string(), screen_before);

    f.dash
        .on_viewer_closed(Ok(vramtop::shell::viewer_run::ViewerExit::Done));
    assert!(!f.dash.is_viewing());
    let history = &f.state().gpus[0].history;
    let seen: Vec<u64> = history
        .points
        .iter()
        .map(|p| p.t_ms)
        .filter(|t| (opened_ms..=closed_ms).contains(t))
        .collect();
    let every_second: Vec<u64> = (opened_ms..=closed_ms).step_by(1000).collect();
    assert_eq!(seen, every_second, "one point a sample, no hole");
    let ooms: Vec<u64> = history
        .markers
        .iter()
        .filter(|m| m.kind == vramtop::app::state::MarkerKind::Oom)
        .map(|m| m.t_ms)
        .collect();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    assert!(
        ooms[0] > oom_sent_ms && ooms[0] <= closed_ms,
        "the OOM is marked when it came ({ooms:?}, viewer {opened_ms}..{closed_ms})"
    );
    let screen = f.screen(80, 24);
    // The banner: at 80 columns "OOM pid N: O opens" and the file's
    // folder where the pid's digits leave room for it, its name whole.
    let banner = screen
        .lines()
        .find(|l| l.contains("OOM") && l.contains(": O opens "))
        .unwrap_or_else(|| panic!("the banner: {screen}"));
    assert!(
        banner.contains("node7-4242-rank0-20261201T120002Z-oom.pickle"),
        "{screen}"
    );
}

#[test]
fn an_oom_from_before_the_dashboard_connected_gets_a_status_note_saying_so() {
    let (dir, _oom) = fake_probe_with(true);
    let mut f = probe_reading_flow(&dir);
    sample_until(&mut f, "the probe's earlier OOM counted", |s| {
        s.probes.rows.iter().any(|r| r.connected && r.ooms == 1)
    });
    let screen = f.screen(120, 40);
    // The same note an OOM seen while connected gets, saying when (the pid
    // as this machine numbers it: this test process's).
    let pid = std::process::id();
    let note =
        format!("OOM in pid {pid} on GPU 0, before vramtop connected: tried to allocate 4.00 GiB");
    assert!(screen.contains(&note), "{screen}");
    // Its time is not now: no mark on the timeline.
    let marked = f.state().gpus[0]
        .history
        .markers
        .iter()
        .any(|m| m.kind == vramtop::app::state::MarkerKind::Oom);
    assert!(!marked, "no timeline mark for an earlier OOM");
}

#[test]
fn samples_dropped_while_the_viewer_is_open_count_as_any_others() {
    let mut f = Flow::new(1);
    f.samples(2);
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: 1,
            path: std::path::PathBuf::from("/s/capture.pickle"),
            has_trace: false,
        },
    );
    assert!(matches!(
        f.key(KeyCode::Char('o')),
        Next::OpenSnapshot { .. }
    ));
    let mut t = f.cluster.telemetry();
    // The loop reads samples while the viewer is open: a drop then is the
    // dashboard falling behind like any other.
    f.dash.on_sample(f.clock_ms + 1000, t.sample(), 3);
    f.dash
        .on_viewer_closed(Ok(vramtop::shell::viewer_run::ViewerExit::Done));
    f.dash.on_sample(f.clock_ms + 2000, t.sample(), 5);
    assert_eq!(f.state().status.dropped_samples, 5);
}

#[test]
fn ctrl_c_in_the_viewer_quits_vramtop_and_q_comes_back_to_the_dashboard() {
    use vramtop::shell::viewer_run::ViewerExit;
    let mut f = Flow::new(1);
    f.samples(2);
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: 1,
            path: std::path::PathBuf::from("/s/capture.pickle"),
            has_trace: false,
        },
    );
    for (exit, next) in [
        (ViewerExit::Done, Next::Continue),
        (ViewerExit::QuitVramtop, Next::Quit),
    ] {
        assert!(matches!(
            f.key(KeyCode::Char('o')),
            Next::OpenSnapshot { .. }
        ));
        assert!(f.dash.is_viewing());
        assert_eq!(f.dash.on_viewer_closed(Ok(exit)), next);
        assert!(!f.dash.is_viewing());
    }
}

#[test]
fn a_terminal_shrunk_below_40x10_under_the_viewer_takes_only_quit_once_it_closes() {
    use vramtop::shell::viewer_run::ViewerExit;
    let mut f = Flow::new(1);
    f.samples(2);
    f.screen(80, 24);
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: 1,
            path: std::path::PathBuf::from("/s/capture.pickle"),
            has_trace: false,
        },
    );
    assert!(matches!(
        f.key(KeyCode::Char('o')),
        Next::OpenSnapshot { .. }
    ));
    // Shrunk while the viewer had the terminal (the dashboard was told
    // nothing), then the viewer closed: no frame drawn yet.
    f.dash.terminal_mut().backend_mut().resize(20, 5);
    assert_eq!(
        f.dash.on_viewer_closed(Ok(ViewerExit::Done)),
        Next::Continue
    );
    assert_eq!(f.key(KeyCode::Char('a')), Next::Continue);
    assert!(!f.state().ui.stress_open, "a did nothing unseen");
    assert_eq!(f.key(KeyCode::Char('q')), Next::Quit);
}

#[test]
fn a_click_on_the_processes_pane_moves_the_focus_there() {
    let mut f = Flow::new(1);
    f.samples(3);
    let screen = f.screen(120, 40);
    let row = screen
        .lines()
        .position(|l| l.contains("train.py"))
        .expect("the trainer is listed");
    f.dash
        .on_click(10, u16::try_from(row).expect("a screen row"));
    assert_eq!(f.state().ui.focus, Pane::Processes);
    assert!(f.dash.is_dirty(), "a focus change redraws");
}

#[test]
fn the_stress_panel_starts_its_worker_and_an_allocation_comes_back_as_tensors() {
    let mut f = Flow::new(1);
    f.samples(2);
    assert!(
        !f.dash.has_stress_worker(),
        "nothing runs before the panel opens"
    );
    f.key_redraws(KeyCode::F(2));
    assert!(f.dash.has_stress_worker(), "opening the panel starts it");
    // The worker's first answer is its starting state.
    f.stress_answer();
    assert!(f.state().stress.tensors.is_empty());
    let count = f.state().stress.count() as usize;
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    assert_eq!(
        f.state().stress.tensors.len(),
        count,
        "{:?}",
        f.state().stress.message
    );
    assert!(!f.state().stress.busy, "the answer ends the wait");
}

#[test]
fn a_then_a_typed_before_the_worker_answers_opens_the_panel_and_allocates() {
    let mut f = Flow::new(1);
    f.samples(2);
    // Both keys arrive before the worker's first answer, as `tmux
    // send-keys a a` types them on a fresh dashboard.
    f.key_redraws(KeyCode::Char('a'));
    assert!(f.state().ui.stress_open, "the first a opens the panel");
    f.key(KeyCode::Char('a'));
    assert_eq!(
        f.state().stress.queued,
        vec![StressAction::Allocate],
        "the second a waits for the worker: {:?}",
        f.state().stress.message
    );
    // Its first answer (ready), then the allocation's.
    f.stress_answer();
    f.stress_answer();
    let count = f.state().stress.count() as usize;
    assert_eq!(
        f.state().stress.tensors.len(),
        count,
        "{:?}",
        f.state().stress.message
    );
    assert!(f.state().stress.queued.is_empty() && !f.state().stress.busy);
}

#[test]
fn the_stress_panels_process_row_shows_its_allocator_figures() {
    let mut f = Flow::with_stress_panel();
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    f.samples(1);
    let pid = f
        .state()
        .stress
        .pid
        .expect("the simulated process of the panel");
    let view = f.state().gpus[0]
        .allocator
        .clone()
        .expect("the panel's view");
    assert_eq!(
        view.pid,
        Some(pid),
        "the breakdown's allocator is that process's"
    );
    let figures = vramtop::ui::format::bytes_pair(view.known_allocated(), view.known_reserved());
    let assert_row_has_figures = |f: &mut Flow| {
        let screen = f.screen(120, 60);
        let row = screen
            .lines()
            .find(|l| l.contains(&format!(" {pid} ")) && l.contains("vramtop stress panel"))
            .unwrap_or_default()
            .to_string();
        assert!(row.contains(&figures), "{figures:?} in {row:?}\n{screen}");
    };
    // Its row in the process list carries the panel's allocated/reserved
    // (the list has room for both processes with the panel closed).
    f.key_redraws(KeyCode::F(2));
    assert_row_has_figures(&mut f);
    // Closed, the panel's tensors stay allocated, and so do the figures
    // after the next samples.
    f.samples(2);
    assert_row_has_figures(&mut f);
}

/// Opens the stress panel, allocates a tensor and presses `W` with the
/// dashboard saving into `dir`: the files `dir` then holds.
fn allocate_and_save_with_w(f: &mut Flow, dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    f.dash.save_snapshots_in(dir.to_path_buf());
    f.samples(2);
    f.key_redraws(KeyCode::F(2));
    f.stress_answer();
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    f.key_redraws(KeyCode::Char('W'));
    f.stress_answer();
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect()
}

/// An empty folder of this test process's own for the files a test's
/// keys write (`vramtop-flow-NAME-PID` under the temporary folder).
fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vramtop-flow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a temporary folder");
    dir
}

#[test]
fn c_on_a_simulated_training_process_writes_its_snapshot_and_o_opens_it() {
    use vramtop::snapshot::{read_snapshot_file, replay::verify};
    let mut f = Flow::new(2);
    let dir = fresh_dir("simcap");
    f.dash.save_snapshots_in(dir.clone());
    f.samples(5);
    // The hint offers it: GPU 0 shows the trainer's allocator.
    assert!(
        f.status_line().contains("c snapshot"),
        "{}",
        f.status_line()
    );
    let pid = f.state().gpus[0]
        .allocator
        .as_ref()
        .and_then(|a| a.pid)
        .expect("GPU 0 shows its trainer");
    f.key_redraws(KeyCode::Char('c'));
    assert_eq!(f.state().capture.pending, Some(pid));
    let answer = f.capture_answer();
    let CaptureMsg::Done {
        pid: done_pid,
        path,
        has_trace: true,
    } = answer
    else {
        panic!("a snapshot with its trace: {answer:?}");
    };
    assert_eq!(done_pid, pid);
    assert_eq!(path.parent(), Some(dir.as_path()), "{path:?}");
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with(&format!("vramtop-sim-{pid}-")) && name.ends_with(".pickle"),
        "{name}"
    );
    // A PyTorch snapshot of the trainer's allocator that replays as a
    // full match, as the probe's of a real process would be read.
    let snapshot = read_snapshot_file(&path).expect("the written snapshot reads");
    assert!(!snapshot.segments.is_empty(), "its segments");
    assert!(verify(&snapshot).full_match());
    let screen = f.screen(120, 40);
    assert!(
        screen.contains(&format!("snapshot of pid {pid} (o opens it)")),
        "{screen}"
    );
    assert_eq!(f.state().capture.last.as_ref(), Some(&path));
    assert_eq!(
        f.key(KeyCode::Char('o')),
        Next::OpenSnapshot {
            path: path.clone(),
            at_oom: false
        },
        "o opens it in the viewer"
    );
    f.dash
        .on_viewer_closed(Ok(vramtop::shell::viewer_run::ViewerExit::Done));
    // GPU 1 runs no trainer: `c` says why and writes nothing.
    f.key(KeyCode::Char('1'));
    f.key_redraws(KeyCode::Char('c'));
    let said = f.state().ui.notice.clone().unwrap_or_default();
    assert!(
        said == "c: GPU 1 shows no allocator to capture: select a GPU that shows one",
        "{said}"
    );
    assert_eq!(f.state().capture.pending, None);
    let files = std::fs::read_dir(&dir).unwrap().count();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(files, 1, "one snapshot, no partial file left");
}

#[test]
fn with_the_stress_panel_open_the_capture_note_offers_no_key_the_panel_takes() {
    let mut f = Flow::new(2);
    let dir = fresh_dir("simcap-panel");
    f.dash.save_snapshots_in(dir.clone());
    f.samples(5);
    let pid = f.state().gpus[0]
        .allocator
        .as_ref()
        .and_then(|a| a.pid)
        .expect("GPU 0 shows its trainer");
    f.key_redraws(KeyCode::Char('c'));
    assert!(matches!(f.capture_answer(), CaptureMsg::Done { .. }));
    let before = f.screen(120, 40);
    assert!(
        before.contains(&format!("snapshot of pid {pid} (o opens it)")),
        "{before}"
    );
    // In the panel `o` frees the oldest tensor: the note must not send
    // anyone there to open the snapshot.
    f.key_redraws(KeyCode::F(2));
    f.stress_answer();
    let screen = f.screen(120, 40);
    assert!(
        screen.contains(&format!("snapshot of pid {pid}")),
        "{screen}"
    );
    assert!(!screen.contains("o opens it"), "{screen}");
    // Closed again, `o` opens it and the note says so.
    f.key_redraws(KeyCode::F(2));
    let after = f.screen(120, 40);
    assert!(
        after.contains(&format!("snapshot of pid {pid} (o opens it)")),
        "{after}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn w_in_the_stress_panel_saves_into_the_dashboards_save_folder() {
    let mut f = Flow::new(1);
    let dir = fresh_dir("save");
    let saved = allocate_and_save_with_w(&mut f, &dir);
    let message = f.state().stress.message.clone().unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(saved.len(), 1, "{saved:?} {message}");
    // The command to copy is on one row of the panel at 80×24 (it read
    // "…): vramtop" over "replay FILE").
    let command = format!("vramtop replay {}", saved[0].display());
    let screen = f.screen(80, 24);
    assert!(
        screen.lines().any(|l| l.contains(&command)),
        "{command}\n{screen}"
    );
    let name = saved[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with("vramtop-stress-") && name.ends_with(".pickle"),
        "{name}"
    );
    // The panel names the file where it is.
    assert!(message.contains(&*saved[0].to_string_lossy()), "{message}");
}

#[test]
fn w_into_a_folder_with_a_space_and_a_quote_shows_a_command_a_shell_can_paste() {
    let mut f = Flow::new(1);
    let dir = std::env::temp_dir().join(format!("v it's-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let saved = allocate_and_save_with_w(&mut f, &dir);
    let screen = f.screen(80, 24);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(saved.len(), 1, "{saved:?}");
    // Single quotes around the path, its own quote closed, escaped and
    // reopened: what a shell reads as the one path.
    let path = saved[0].display().to_string();
    let command = format!("vramtop replay '{}'", path.replace('\'', r"'\''"));
    assert!(
        screen.lines().any(|l| l.contains(&command)),
        "{command}\n{screen}"
    );
}

#[test]
fn while_typing_the_status_line_shows_the_fields_keys_and_ctrl_c_still_quits() {
    let mut f = Flow::new(1);
    f.samples(2);
    f.key(KeyCode::F(2));
    f.key(KeyCode::Char('s'));
    let last = f.status_line();
    assert!(
        last.contains("Enter apply") && last.contains("Esc cancel"),
        "{last}"
    );
    assert!(!last.contains("a alloc"), "a types into the field: {last}");
    f.key(KeyCode::Esc);
    f.key(KeyCode::Char('n'));
    let last = f.status_line();
    assert!(last.contains("Enter load"), "{last}");
    f.key(KeyCode::Esc);
    f.key(KeyCode::Esc);
    f.key(KeyCode::Char('/'));
    let last = f.status_line();
    assert!(last.contains("Enter Esc done"), "{last}");
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(
        f.dash.on_key(ctrl_c),
        Next::Quit,
        "Ctrl-C quits, it does not type c"
    );
}

#[test]
fn a_panel_allocation_between_samples_raises_no_other_gpu_warning() {
    let mut f = Flow::with_stress_panel();
    f.key(KeyCode::Char('s'));
    f.type_text("20GiB");
    f.key(KeyCode::Enter);
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    // The driver's last reading predates the allocation: its used memory
    // and the allocator's new reserved are of two moments.
    let screen = f.screen(80, 24);
    assert!(!screen.contains("exceeds the GPU's used"), "{screen}");
    // The split stays the one of the reading's moment, before the tensors.
    assert!(screen.contains("allocated 0 B"), "{screen}");
    // The next reading includes the allocation, and the split follows it.
    f.samples(1);
    let screen = f.screen(80, 24);
    assert!(!screen.contains("exceeds the GPU's used"), "{screen}");
    assert!(screen.contains("allocated 60.0 GiB"), "{screen}");
}

impl Flow {
    /// Hands the stress worker's answers to the dashboard until the panel
    /// waits for none (queued keys send more as answers come).
    fn stress_answers_until_idle(&mut self) {
        while self.state().stress.busy {
            self.stress_answer();
        }
    }

    /// Types `text` a character at a time, as into a field.
    fn type_text(&mut self, text: &str) {
        for c in text.chars() {
            self.key(KeyCode::Char(c));
        }
    }

    /// Presses `code` `n` times in one burst (no answer in between).
    fn burst(&mut self, code: KeyCode, n: usize) {
        for _ in 0..n {
            self.key(code);
        }
    }
}

#[test]
fn keys_past_the_panels_queue_are_counted_on_the_status_line_when_it_drains() {
    let mut f = Flow::with_stress_panel();
    // Count 1: one tensor an allocation.
    f.burst(KeyCode::Char('['), 3);
    assert_eq!(f.state().stress.count(), 1);
    // One goes to the worker, 32 wait, 27 are dropped.
    f.burst(KeyCode::Char('a'), 60);
    f.stress_answers_until_idle();
    assert_eq!(f.state().stress.tensors.len(), 33);
    let message = f.state().stress.message.clone().unwrap_or_default();
    assert!(
        message.contains("27 keys dropped: the panel is busy"),
        "{message}"
    );
    // On screen, wrapped where the row ends.
    let screen = f.screen(120, 40);
    assert!(
        screen.contains("27 keys dropped: the") && screen.contains("panel is busy"),
        "{screen}"
    );
}

#[test]
fn free_all_typed_behind_a_full_queue_of_allocations_still_frees_everything() {
    let mut f = Flow::with_stress_panel();
    f.burst(KeyCode::Char('a'), 40);
    f.key(KeyCode::Char('D'));
    f.stress_answers_until_idle();
    assert!(
        f.state().stress.tensors.is_empty(),
        "D ran: {:?}",
        f.state().stress.message
    );
    assert_eq!(f.state().stress.figures.allocated, 0);
    // empty_cache behind a full queue is not lost either.
    f.burst(KeyCode::Char('a'), 40);
    f.key(KeyCode::Char('D'));
    f.key(KeyCode::Char('e'));
    f.stress_answers_until_idle();
    assert_eq!(f.state().stress.figures.reserved, 0, "e ran after D");
}

#[test]
fn closed_with_tensors_live_the_panels_allocator_stays_the_gpus_view_when_no_other_is() {
    let mut f = Flow::of(common::dashboard::sim_dashboard(1, 0, 11, (120, 40)));
    f.samples(2);
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    f.key(KeyCode::Char('a'));
    f.stress_answer();
    f.key(KeyCode::Esc);
    assert!(!f.state().ui.stress_open);
    f.samples(2);
    let screen = f.screen(120, 40);
    assert!(!screen.contains("allocator view: n/a"), "{screen}");
    assert!(!screen.contains("no allocator"), "{screen}");
    assert!(
        screen.contains("Memory breakdown  GPU 0 · vramtop stress panel"),
        "{screen}"
    );
    // Every tensor freed and the cache emptied: nothing of the panel's is
    // on the GPU, and the allocator panes fold into the row that says
    // there is no allocator again.
    f.key(KeyCode::Char('a'));
    f.key(KeyCode::Char('D'));
    f.stress_answer();
    f.key(KeyCode::Char('e'));
    f.stress_answer();
    f.key(KeyCode::Esc);
    f.samples(1);
    let screen = f.screen(120, 40);
    assert!(
        screen.contains("Fragmentation · Segments  no allocator"),
        "{screen}"
    );
}

#[test]
fn a_resize_says_ms_message_again_for_the_new_size() {
    let mut f = Flow::new(1);
    f.samples(2);
    f.key(KeyCode::F(2));
    f.stress_answer();
    f.screen(120, 40);
    f.key(KeyCode::Char('M'));
    assert!(f.screen(120, 40).contains("beside the panel at this size"));
    let screen = f.screen(80, 24);
    assert!(!screen.contains("beside the panel"), "{screen}");
    assert!(screen.contains("panel shown:"), "{screen}");
    // Back at 120×40 the map is beside the panel again, and it says so.
    assert!(f.screen(120, 40).contains("beside the panel at this size"));
}

#[test]
fn a_two_row_timeline_labels_its_bottom_row_zero() {
    let mut f = Flow::of(common::dashboard::sim_dashboard(1, 0, 11, (80, 24)));
    f.samples(2);
    f.key(KeyCode::Char('a'));
    f.stress_answer();
    let screen = f.screen(80, 24);
    let lines: Vec<&str> = screen.lines().collect();
    let axis = lines
        .iter()
        .position(|l| l.trim_start_matches('"').trim_start().starts_with('└'))
        .expect("the timeline's x axis");
    let plot: Vec<&str> = lines[..axis]
        .iter()
        .rev()
        .take_while(|l| l.contains('│') && !l.contains("Timeline"))
        .copied()
        .collect();
    assert_eq!(plot.len(), 2, "a two-row timeline: {screen}");
    assert!(
        plot[0].trim_start_matches('"').starts_with("0 B"),
        "{screen}"
    );
}

/// A dashboard (120×40 until a test resizes it) that reads the fake probe
/// in `dir`, not sampled yet.
fn probe_reading_flow(dir: &tempfile::TempDir) -> Flow {
    let registry = vramtop::probe::Registry::start(
        vec![dir.path().to_path_buf()],
        vramtop::probe::discovery::current_uid(),
    );
    Flow::of(common::dashboard::sim_dashboard_with_probes(
        1,
        0,
        11,
        (120, 40),
        registry,
    ))
}

/// A dashboard (120×40 until a test resizes it) that reads the fake probe
/// in `dir`, sampled until the probe's allocator is GPU 0's.
fn probed_flow(dir: &tempfile::TempDir) -> Flow {
    let mut f = probe_reading_flow(dir);
    sample_until(&mut f, "the probe's allocator on GPU 0", |s| {
        s.gpus
            .first()
            .and_then(|g| g.allocator.as_ref())
            .is_some_and(|a| a.pid.is_some())
    });
    f
}

/// Tells the fake probe to have its OOM and samples 10 ms apart on the
/// scripted clock until the dashboard has it (the other notes, a minute
/// long, stay up meanwhile).
fn oom_now(f: &mut Flow, oom: &std::sync::mpsc::Sender<()>) {
    oom.send(()).expect("the fake probe listens");
    let mut t = f.cluster.telemetry();
    for _ in 0..2000 {
        if f.state().probes.oom_snapshot.is_some() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        f.cluster.advance(10);
        f.clock_ms += 10;
        f.dash.on_sample(f.clock_ms, t.sample(), 0);
    }
    panic!("never seen: the probe's OOM");
}

/// The row of `screen` that holds `text` (the first), for the order of the
/// status line's messages.
fn row_of(screen: &str, text: &str) -> usize {
    screen
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no row with {text:?}:\n{screen}"))
}

/// PyTorch's OOM message as it is: three rows at 80 columns.
const PYTORCH_OOM: &str = "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total \
    capacity of 79.19 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process \
    has 76.06 GiB memory in use. Of the allocated memory 70.12 GiB is allocated by PyTorch.";

#[test]
fn a_key_pressed_after_an_oom_answers_above_its_banner_and_an_older_note_stays_below_it() {
    let (dir, oom) = fake_probe_saying(false, PYTORCH_OOM);
    let mut f = probed_flow(&dir);
    // `c` was answered before the OOM.
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: std::process::id(),
            path: std::path::PathBuf::from("/s/node7-4242-capture.pickle"),
            has_trace: true,
        },
    );
    oom_now(&mut f, &oom);
    let screen = f.screen(80, 24);
    assert!(
        row_of(&screen, "O opens") < row_of(&screen, "snapshot of pid"),
        "the OOM leads:\n{screen}"
    );
    f.key(KeyCode::Char('9'));
    // 80×32 has rows for the three (80×24 has two: the answer and the
    // banner, the older note left to an "…").
    let screen = f.screen(80, 32);
    let (answer, banner, older) = (
        row_of(&screen, "no GPU 9"),
        row_of(&screen, "O opens"),
        row_of(&screen, "snapshot of pid"),
    );
    assert!(
        answer < banner && banner < older,
        "the key's answer, the banner, then the older note:\n{screen}"
    );
    let screen = f.screen(80, 24);
    assert!(
        row_of(&screen, "no GPU 9") < row_of(&screen, "O opens"),
        "the key's answer, then the banner:\n{screen}"
    );
}

#[test]
fn an_oom_the_banner_names_gets_a_one_row_note_and_esc_dismisses_both() {
    let (dir, oom) = fake_probe_saying(false, PYTORCH_OOM);
    let mut f = probed_flow(&dir);
    oom_now(&mut f, &oom);
    let screen = f.screen(80, 24);
    let pid = std::process::id();
    let banner = row_of(&screen, "O opens");
    let note = row_of(
        &screen,
        &format!("OOM in pid {pid} on GPU 0: tried to allocate 8.00 GiB"),
    );
    assert_eq!(
        note,
        banner + 1,
        "the request, right under the banner:\n{screen}"
    );
    assert!(
        !screen.contains("total capacity"),
        "PyTorch's message is not said a second time:\n{screen}"
    );
    assert_eq!(f.key(KeyCode::Esc), Next::Continue);
    let screen = f.screen(80, 24);
    assert!(
        !screen.contains("O opens") && !screen.contains("tried to allocate"),
        "Esc dismisses the banner and its note:\n{screen}"
    );
    // `O` still opens the snapshot.
    assert!(matches!(
        f.key(KeyCode::Char('O')),
        Next::OpenSnapshot { .. }
    ));
}

#[test]
fn a_written_snapshots_note_wraps_to_show_its_whole_path() {
    let mut f = Flow::new(1);
    f.samples(2);
    let path = "/srv/vramtop/snapshots/vm-32710-rankx-20261206T190134Z-demand.pickle";
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid: 32710,
            path: std::path::PathBuf::from(path),
            has_trace: true,
        },
    );
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = f.screen(w, h);
        assert!(screen.contains(path), "{w}x{h}:\n{screen}");
        assert!(
            screen.contains("snapshot of pid 32710 (o opens it):"),
            "{w}x{h}:\n{screen}"
        );
    }
}

/// The rows the status line takes at `w`×`h` in `f`'s state.
fn status_rows(f: &Flow, w: u16, h: u16) -> u16 {
    vramtop::ui::StatusLine::new(f.state(), &Keymap::default(), &Theme::colored()).height(w, h)
}

/// The fake probe's dashboard after it wrote a snapshot of `pid` at
/// `path` and then saw the probe's OOM; the probe's folder and OOM switch
/// live as long as the flow.
fn snapshot_note_then_oom(
    pid: u32,
    path: &str,
    has_trace: bool,
) -> (Flow, tempfile::TempDir, std::sync::mpsc::Sender<()>) {
    let (dir, oom) = fake_probe_saying(false, PYTORCH_OOM);
    let mut f = probed_flow(&dir);
    f.dash.on_capture(
        f.clock_ms,
        CaptureMsg::Done {
            pid,
            path: std::path::PathBuf::from(path),
            has_trace,
        },
    );
    oom_now(&mut f, &oom);
    (f, dir, oom)
}

/// The status row that holds the snapshot note of `pid`, without the
/// screen's quotes.
fn note_row_of(screen: &str, pid: u32) -> String {
    let note = row_of(screen, &format!("snapshot of pid {pid} (o opens it)"));
    let row = screen.lines().nth(note).unwrap_or_default();
    row.trim_matches('"').trim_end().to_string()
}

/// The rows of `screen` from the snapshot note of `pid` on, without quotes.
fn rows_from_note(screen: &str, pid: u32) -> Vec<&str> {
    let lead = format!("snapshot of pid {pid}");
    screen
        .lines()
        .skip_while(|l| !l.contains(&lead))
        .map(|l| l.trim_matches('"').trim_end())
        .collect()
}

#[test]
fn at_80x24_a_fresh_oom_and_a_long_snapshot_note_take_three_status_rows_the_path_elided() {
    let name = "vm-32710-rankx-20261206T190134Z-demand.pickle";
    let path = format!("/srv/vramtop/state/vramtop/snapshots/{name}");
    // A snapshot without a trace (its note says so at length), then the
    // OOM: the banner, its note and the snapshot's note took six rows.
    let (mut f, _dir, _oom) = snapshot_note_then_oom(32710, &path, false);
    let screen = f.screen(80, 24);
    assert!(
        status_rows(&f, 80, 24) <= 3,
        "the facts row and two messages:\n{screen}"
    );
    let banner = row_of(&screen, "O opens");
    let note = row_of(&screen, "snapshot of pid 32710 (o opens it)");
    assert!(banner < note, "the banner, then the note:\n{screen}");
    let note_row = note_row_of(&screen, 32710);
    assert!(
        note_row.contains("no trace") && note_row.contains('…'),
        "the caveat and the path elided in the middle: {note_row}"
    );
    // Its root and the folder it is in, the name's start and end.
    assert!(
        note_row.contains(": /…/snapshots/vm-32710-") && note_row.ends_with(".pickle"),
        "{note_row}"
    );
    assert!(note_row.chars().count() <= 80, "one row: {note_row}");
    // At 120×40 the note says its whole path, as before.
    let wide = f.screen(120, 40);
    let text: String = rows_from_note(&wide, 32710).concat();
    assert!(text.contains(&path), "{wide}");
    assert!(text.contains("--record-history"), "{wide}");
}

#[test]
fn a_snapshot_notes_elided_path_keeps_its_end_whole_beside_the_rows_ran_out_marker() {
    let name = "vm-21525-rankx-20261206T215639Z-demand.pickle";
    // Longer than a 120-column row.
    let path = format!(
        "/scratch/experiments/2026-12-06/llama-70b-finetune/run-17/outputs/state/vramtop/snapshots/{name}"
    );
    let (mut f, _dir, _oom) = snapshot_note_then_oom(21525, &path, true);
    // The fallback banner of a machine without a GPU: a third message
    // where 80×24 has two rows for them, so the last ends in "…".
    f.dash.state_mut().status.banner =
        Some("showing 1 simulated GPU: nvml is not available (libnvidia-ml.so.1 not found)".into());
    let screen = f.screen(80, 24);
    let note_row = note_row_of(&screen, 21525);
    assert!(note_row.contains(": /…/snapshots/vm-21525-"), "{screen}");
    // The marker that more messages are left out follows the path, which
    // keeps its end: it cut ".pickle" to ".pickl…".
    assert!(note_row.ends_with('…'), "the rows ran out:\n{screen}");
    assert!(
        note_row
            .trim_end_matches('…')
            .trim_end()
            .ends_with("-demand.pickle"),
        "{note_row}"
    );
    assert!(note_row.chars().count() <= 80, "one row: {note_row}");
    // At 120×40 the whole path wraps before its file name, not inside it.
    let wide = f.screen(120, 40);
    let rows = rows_from_note(&wide, 21525);
    let text: String = rows.concat();
    assert!(text.contains(&path), "{wide}");
    assert!(rows.iter().any(|r| r.contains(name)), "{wide}");
}

/// Every allocator `v` cycles through on each GPU belongs to a process the
/// GPU lists, and the screen at 80x24 says which simulated processes could
/// not start: a 1 GiB GPU has room for the trainer's CUDA context and one
/// DataLoader worker's, not for the other three workers nor the second
/// trainer.
#[test]
fn simulated_processes_without_room_for_a_context_are_said_not_started_not_cycled() {
    let config = SimConfig {
        training_processes: 2,
        dataloader_workers: 4,
        seed: 11,
        ..SimConfig::default()
    }
    .with_memory(1 << 30);
    let mut f = Flow::of(common::dashboard::sim_dashboard_of(
        config,
        (80, 24),
        vramtop::probe::Registry::start(vec![], 0),
    ));
    f.samples(3);
    f.key(KeyCode::Char('v'));
    f.key(KeyCode::Char('v'));
    for (gpu, pids) in &f.state().simulated_allocators {
        let listed: Vec<u32> = f
            .state()
            .gpus
            .get(*gpu as usize)
            .and_then(|g| g.sample())
            .map(|s| s.listed_processes().iter().map(|p| p.pid).collect())
            .unwrap_or_default();
        for pid in pids {
            assert!(
                listed.contains(pid),
                "pid {pid} cycled, not listed: {listed:?}"
            );
        }
    }
    assert_eq!(
        f.state().simulated_allocators.get(&0),
        Some(&vec![4242]),
        "the one trainer that started"
    );
    let screen = f.screen(80, 24);
    assert!(screen.contains("4242"), "the trainer is listed: {screen}");
    let flat = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("could not start"),
        "the status line says why processes are missing: {screen}"
    );
    insta::assert_snapshot!("sim_processes_not_started_80x24", screen);
}

#[test]
fn c_captures_the_allocator_the_breakdown_names_after_the_panel_closes_empty() {
    // a a D e F2 c, 0.3 s apart: no sample between the panel's last answer
    // and `c`, so the breakdown still names the panel's allocator (its
    // process holds 0/0 B). `c` refused it as "no allocator to capture";
    // it writes it, and after the next sample the training process's.
    let mut f = Flow::new(1);
    let dir = fresh_dir("closecap");
    f.dash.save_snapshots_in(dir.clone());
    f.samples(2);
    f.key_redraws(KeyCode::Char('a'));
    f.stress_answer();
    f.samples(1);
    for key in ['a', 'D', 'e'] {
        f.key(KeyCode::Char(key));
        f.stress_answer();
    }
    f.key(KeyCode::F(2));
    assert!(!f.state().ui.stress_open);
    let title = |f: &mut Flow| {
        f.screen(80, 24)
            .lines()
            .find(|l| l.contains("Memory breakdown"))
            .unwrap_or_default()
            .to_string()
    };
    let shown = title(&mut f);
    assert!(shown.contains("vramtop stress panel"), "{shown}");
    let panel = f.state().stress.pid.expect("the panel's process");
    assert!(
        f.status_line().contains("c snapshot"),
        "{}",
        f.status_line()
    );
    f.key_redraws(KeyCode::Char('c'));
    let said = f.state().ui.notice.clone();
    assert_eq!(
        f.state().capture.pending,
        Some(panel),
        "{said:?} under {shown}"
    );
    f.stress_answer();
    assert_eq!(f.state().capture.pending, None);
    let panel_file = f
        .state()
        .capture
        .last
        .clone()
        .expect("the panel's snapshot");
    // The next sample shows the training process: `c` writes its model.
    f.samples(1);
    let trainer = f.state().simulated_allocators[&0][0];
    let shown = title(&mut f);
    f.key_redraws(KeyCode::Char('c'));
    let pending = f.state().capture.pending;
    if pending.is_some() {
        f.capture_answer();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        panel_file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("vramtop-stress-")),
        "{panel_file:?}"
    );
    assert!(shown.contains(&format!("pid {trainer} ")), "{shown}");
    assert_eq!(pending, Some(trainer));
}

#[test]
fn the_help_says_which_keys_step_and_run_a_scenario_the_list_loads() {
    // `n` only lists the scenarios: the list's Enter row names the keys
    // that drive the loaded one, from the panel's table.
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::F(2));
    f.key(KeyCode::Char('?'));
    let mut seen = String::new();
    for _ in 0..10 {
        let screen = f.screen(120, 40);
        if screen.contains("In the scenario list (n)") {
            seen = screen;
            break;
        }
        f.key(KeyCode::PageDown);
    }
    assert!(
        seen.contains("load the selected scenario (frees all); then . steps it, g runs it"),
        "{seen}"
    );
}

#[test]
fn ctrl_u_clears_the_size_field_and_the_process_filter_as_readline_does() {
    let ctrl_u = KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL);
    let mut f = Flow::with_stress_panel();
    f.key(KeyCode::Char('s'));
    f.type_text("80GB");
    assert_eq!(f.state().stress.size_text(), Some("80GB"));
    f.dash.on_key(ctrl_u);
    assert_eq!(f.state().stress.size_text(), Some(""), "open and empty");
    f.key(KeyCode::Char('1'));
    assert_eq!(f.state().stress.size_text(), Some("1"));
    f.key(KeyCode::Esc);
    f.key(KeyCode::F(2));
    f.key(KeyCode::Char('/'));
    f.type_text("python");
    assert_eq!(f.state().ui.process_filter.text(), "python");
    f.dash.on_key(ctrl_u);
    assert_eq!(f.state().ui.process_filter.text(), "");
    assert!(f.state().ui.process_filter.is_editing(), "still typed");
    let status = f.status_line();
    assert!(status.contains("Ctrl-U clear"), "{status}");
}

#[test]
fn the_breakdowns_short_unalloc_over_the_stress_panel_is_defined_by_the_help() {
    // At 80×24 the panel leaves the breakdown one legend row, in short
    // words: "unalloc" there is the "reserved but unallocated" of the
    // wider legend.
    let mut f = Flow::with_stress_panel();
    f.key(KeyCode::Char('s'));
    f.type_text("80GB");
    f.key(KeyCode::Enter);
    f.key(KeyCode::Char('a'));
    f.stress_answer();
    f.samples(1);
    // 80×24 less the row the live dashboard's "showing 1 simulated GPU"
    // takes.
    let screen = f.screen(80, 23);
    let legend = screen
        .lines()
        .find(|l| l.contains("█ allocated"))
        .unwrap_or_default()
        .to_string();
    assert!(
        legend.contains("▓ unalloc ") && !legend.contains("reserved but unallocated"),
        "{screen}"
    );
    f.key(KeyCode::Char('?'));
    let mut help = String::new();
    for _ in 0..12 {
        help.push_str(&f.screen(80, 24));
        f.key(KeyCode::PageDown);
    }
    assert!(
        help.contains("reserved but unallocated (unalloc):"),
        "{help}"
    );
}

/// A flow whose one GPU lists the process `pid` running `command`, as the
/// driver would (the backend says "nvml": live processes `K` may
/// signal), with Processes focused.
fn live_flow(pid: u32, command: &str) -> Flow {
    let mut f = Flow::new(1);
    let mut gpu = vramtop::device::GpuSample::unknown(0, "GPU");
    gpu.processes = Some(vec![vramtop::device::GpuProcess {
        command: Some(command.to_string()),
        ..vramtop::device::GpuProcess::new(pid, Some(3 << 30))
    }]);
    let state = f.dash.state_mut();
    state.status.backend = "nvml".to_string();
    state.apply_sample(
        1000,
        vec![vramtop::device::GpuReading::Ok(gpu)],
        std::collections::BTreeMap::new(),
    );
    state.ui.focus = Pane::Processes;
    f
}

/// A child process of the test that waits to be signalled, and its
/// command line as `/proc` shows it ("sleep 60").
fn sleeper() -> (std::process::Child, String) {
    let child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep runs");
    let command = command_once_exec_d(child.id());
    (child, command)
}

/// The command line of `pid`, a child just spawned, once it has exec'd
/// `sleep` (until then /proc shows the test's thread there; 10 s at most).
fn command_once_exec_d(pid: u32) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let command = vramtop::device::procfs::command_line(pid);
        if command.as_deref() == Some("sleep 60") || std::time::Instant::now() > deadline {
            return command.expect("its /proc");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn k_then_y_sends_sigterm_to_the_live_process_the_prompt_named() {
    use std::os::unix::process::ExitStatusExt as _;
    let (mut child, command) = sleeper();
    let pid = child.id();
    let mut f = live_flow(pid, &command);
    f.key_redraws(KeyCode::Char('K'));
    let screen = f.screen(80, 24);
    assert!(
        screen.contains(&format!("Send SIGTERM to {pid} sleep 60 (3.00 GiB)? y/n")),
        "{screen}"
    );
    assert!(
        child.try_wait().expect("waits").is_none(),
        "nothing sent yet"
    );
    f.key_redraws(KeyCode::Char('y'));
    let status = child.wait().expect("it ends");
    assert_eq!(status.signal(), Some(15), "SIGTERM");
    let line = f.status_line();
    assert!(
        line.contains(&format!("sent SIGTERM to {pid} sleep 60")),
        "{line}"
    );
}

#[test]
fn a_pid_that_runs_another_command_by_the_confirmation_is_not_signalled() {
    let (mut child, _) = sleeper();
    let pid = child.id();
    // The list showed another program at this pid (it ended, and the pid
    // went to this one): neither key sends anything to it.
    let mut f = live_flow(pid, "python train.py");
    for confirm in ['y', '9'] {
        f.key_redraws(KeyCode::Char('K'));
        f.key_redraws(KeyCode::Char(confirm));
        let screen = f.screen(120, 40);
        assert!(
            screen.contains(&format!(
                "not sent: pid {pid} now runs sleep 60 (pid reused)"
            )),
            "{screen}"
        );
        assert!(child.try_wait().expect("waits").is_none(), "still runs");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_process_that_ended_before_the_confirmation_is_said_already_gone() {
    let (mut child, command) = sleeper();
    let pid = child.id();
    let mut f = live_flow(pid, &command);
    f.key_redraws(KeyCode::Char('K'));
    let _ = child.kill();
    let _ = child.wait();
    f.key_redraws(KeyCode::Char('9'));
    let line = f.status_line();
    assert!(
        line.contains(&format!("SIGKILL to {pid}: already gone")),
        "{line}"
    );
}

#[test]
fn k_on_the_simulated_gpu_sends_nothing_whatever_follows() {
    // The simulation's trainer 4242: a made-up pid.
    let mut f = Flow::new(1);
    f.samples(2);
    while f.state().ui.focus != Pane::Processes {
        f.key(KeyCode::Tab);
    }
    f.key_redraws(KeyCode::Char('K'));
    assert!(f.state().ui.signal_prompt.is_none());
    let line = f.state().ui.notice.clone().unwrap_or_default();
    assert!(
        line.contains("pid 4242 is simulated (its pid is made up): never signalled"),
        "{line}"
    );
    f.key(KeyCode::Char('y'));
    assert!(f.state().ui.notice.is_none(), "y did nothing: {line}");
}
