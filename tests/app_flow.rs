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
    f.key(KeyCode::Char('2'));
    assert!(f.screen(120, 40).contains("Memory breakdown  GPU 1"));
    // GPU 1 has no training process: no allocator view, and it says so.
    assert!(f.screen(120, 40).contains("allocator view: n/a"));
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
