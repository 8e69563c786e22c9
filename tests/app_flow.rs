//! App flows without a terminal or sleeps: scripted samples and key presses
//! go through the same update and drawing code as the live dashboard.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use vramtop::app::keymap::Keymap;
use vramtop::app::source::allocator_views;
use vramtop::app::state::{AppState, Overlay, Pane, StatusState};
use vramtop::app::update::{Effect, handle_key};
use vramtop::device::Telemetry;
use vramtop::device::sim::{Fault, SimCluster, SimConfig};
use vramtop::ui::{self, Theme};

struct Flow {
    cluster: SimCluster,
    state: AppState,
    keymap: Keymap,
    clock_ms: u64,
}

impl Flow {
    fn new(gpus: usize) -> Flow {
        Flow {
            cluster: SimCluster::new(SimConfig {
                gpus,
                training_processes: 1,
                seed: 11,
                ..SimConfig::default()
            }),
            state: AppState::new(StatusState {
                backend: "sim".into(),
                sample_interval_ms: 1000,
                ..StatusState::default()
            }),
            keymap: Keymap::default(),
            clock_ms: 0,
        }
    }

    fn samples(&mut self, n: u64) {
        let mut t = self.cluster.telemetry();
        for _ in 0..n {
            self.cluster.advance(1000);
            self.clock_ms += 1000;
            let readings = t.sample().expect("sim samples");
            self.state.apply_sample(
                self.clock_ms,
                readings,
                allocator_views(Some(&self.cluster)),
            );
        }
    }

    fn key(&mut self, code: KeyCode) -> Effect {
        handle_key(
            &mut self.state,
            &self.keymap,
            KeyEvent::new(code, KeyModifiers::NONE),
        )
    }

    fn screen(&self, w: u16, h: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
        terminal
            .draw(|f| ui::draw(f, &self.state, &self.keymap, &Theme::colored()))
            .expect("draws");
        terminal.backend().to_string()
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
    // GPU 1 has no training process: no allocator view, and it says so.
    assert!(f.screen(120, 40).contains("allocator view: n/a"));
    f.key(KeyCode::Char('2'));
    let screen = f.screen(120, 40);
    assert!(screen.contains("Memory breakdown  GPU 1"), "stays");
    assert!(screen.contains("no GPU 2: GPUs here: 0, 1"), "{screen}");
}

#[test]
fn help_overlay_opens_and_closes_over_the_live_screen() {
    let mut f = Flow::new(1);
    f.samples(3);
    assert_eq!(f.key(KeyCode::Char('?')), Effect::Redraw);
    assert_eq!(f.state.ui.overlay, Overlay::Help);
    let screen = f.screen(120, 40);
    assert!(screen.contains("fragmentation"), "{screen}");
    f.samples(2);
    assert_eq!(
        f.state.ui.overlay,
        Overlay::Help,
        "samples do not close the help"
    );
    f.key(KeyCode::Esc);
    assert_eq!(f.state.ui.overlay, Overlay::None);
}

#[test]
fn process_filter_typed_after_slash_narrows_the_list() {
    let mut f = Flow::new(1);
    f.samples(3);
    assert!(f.screen(120, 40).contains("train.py"));
    f.key(KeyCode::Char('/'));
    for c in "nomatch".chars() {
        f.key(KeyCode::Char(c));
    }
    f.key(KeyCode::Enter);
    assert_eq!(f.state.ui.focus, Pane::Processes);
    assert!(!f.screen(120, 40).contains("train.py"));
    f.key(KeyCode::Esc);
    assert!(f.screen(120, 40).contains("train.py"));
}

#[test]
fn paused_timeline_keeps_its_window_while_samples_arrive() {
    let mut f = Flow::new(1);
    f.samples(10);
    f.key(KeyCode::Char('p'));
    let paused_at = f.state.ui.paused_at_ms;
    f.samples(20);
    assert_eq!(f.state.ui.paused_at_ms, paused_at);
    assert!(f.screen(120, 40).contains("PAUSED"));
    assert_eq!(
        f.state.gpus[0].history.points.len(),
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
    assert!(f.state.gpus[0].sample().is_some());
    assert_eq!(f.state.gpus[0].history.points.len(), 5);
}

#[test]
fn quitting_is_an_effect_not_an_exit() {
    let mut f = Flow::new(1);
    assert_eq!(f.key(KeyCode::Char('q')), Effect::Quit);
}

#[test]
fn help_scrolls_with_j_and_page_down_to_its_last_row_at_80x24() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::Char('?'));
    let first = f.screen(80, 24);
    assert!(first.contains("↓ j PgDn more"), "{first}");
    assert!(!first.contains("process tree / flat list"), "{first}");
    assert_eq!(f.key(KeyCode::Char('j')), Effect::Redraw);
    for _ in 0..5 {
        f.key(KeyCode::PageDown);
    }
    let end = f.screen(80, 24);
    assert!(end.contains("process tree / flat list"), "{end}");
    assert!(end.contains("↑ k PgUp back"), "{end}");
    assert_eq!(f.state.ui.focus, Pane::Gpus, "keys scroll, not move focus");
    f.key(KeyCode::Esc);
    f.key(KeyCode::Char('?'));
    assert_eq!(f.state.ui.help_scroll, 0, "help opens at the top");
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
    f.state.ui.help_scroll = 200;
    let end = f.screen(120, 40);
    assert!(
        end.contains("fragmentation = 1 − largest free block / external free."),
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
    let help = f.screen(80, 24);
    assert!(help.contains("a F2       stress panel"), "{help}");
}

#[test]
fn panel_hints_keep_the_walkthrough_keys_at_120_columns() {
    let mut f = Flow::new(1);
    f.samples(3);
    f.key(KeyCode::F(2));
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
fn v_without_a_probe_says_why_nothing_changed() {
    let mut f = Flow::new(1);
    f.samples(3);
    assert_eq!(f.key(KeyCode::Char('v')), Effect::Redraw);
    let screen = f.screen(120, 40);
    assert!(
        screen.contains("v: no process on GPU 0 has a probe to switch to"),
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
