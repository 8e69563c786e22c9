//! Keys are input too: arbitrary key sequences, with samples, clicks and
//! stress answers between them, through the dashboard's own handlers and through
//! the snapshot viewer, drawn at arbitrary terminal sizes down to 1×1.
//! Nothing may panic, every draw must succeed, and some state must stay
//! true whatever was pressed (the selected GPU exists, Esc closes the
//! help, the viewer's cursor stays inside the trace, a scrolled list
//! moves at the first key back).

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use proptest::prelude::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::sync::mpsc;
use vramtop::app::keymap::Keymap;
use vramtop::app::state::{Overlay, Pane};
use vramtop::app::stress::StressResult;
use vramtop::app::viewer::ViewerState;
use vramtop::device::Telemetry;
use vramtop::device::sim::{SimCluster, SimConfig};
use vramtop::probe::Registry;
use vramtop::shell::dashboard::Dashboard;
use vramtop::snapshot::Snapshot;
use vramtop::snapshot::synth::{self, LargeShape};
use vramtop::ui::{Theme, render_viewer};

/// Every key any keymap context binds, and keys none does.
fn key_code() -> impl Strategy<Value = KeyCode> {
    prop_oneof![
        8 => proptest::char::range(' ', '~').prop_map(KeyCode::Char),
        1 => Just(KeyCode::Char('é')),
        2 => Just(KeyCode::Esc),
        2 => Just(KeyCode::Enter),
        1 => Just(KeyCode::Tab),
        1 => Just(KeyCode::BackTab),
        1 => Just(KeyCode::Backspace),
        1 => Just(KeyCode::Delete),
        2 => Just(KeyCode::Up),
        2 => Just(KeyCode::Down),
        2 => Just(KeyCode::Left),
        2 => Just(KeyCode::Right),
        1 => Just(KeyCode::PageUp),
        1 => Just(KeyCode::PageDown),
        1 => Just(KeyCode::Home),
        1 => Just(KeyCode::End),
        2 => (1u8..=12).prop_map(KeyCode::F),
    ]
}

fn key_event() -> impl Strategy<Value = KeyEvent> {
    (
        key_code(),
        prop_oneof![
            6 => Just(KeyModifiers::NONE),
            1 => Just(KeyModifiers::SHIFT),
            1 => Just(KeyModifiers::CONTROL),
            1 => Just(KeyModifiers::ALT),
        ],
    )
        .prop_map(|(code, modifiers)| KeyEvent::new(code, modifiers))
}

/// One step of a session: a key, a sample, or a draw at a size.
#[derive(Debug, Clone)]
enum Step {
    Key(KeyEvent),
    Sample,
    Draw {
        width: u16,
        height: u16,
    },
    /// A left click (the dashboard hit-tests it against its last draw).
    Click {
        column: u16,
        row: u16,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => key_event().prop_map(Step::Key),
        2 => Just(Step::Sample),
        1 => (1u16..=200, 1u16..=60).prop_map(|(width, height)| Step::Draw { width, height }),
        2 => (0u16..=210, 0u16..=70).prop_map(|(column, row)| Step::Click { column, row }),
    ]
}

struct Session {
    cluster: SimCluster,
    dash: Dashboard<TestBackend>,
    stress_results: mpsc::UnboundedReceiver<StressResult>,
    clock_ms: u64,
}

impl Session {
    fn new(gpus: usize) -> Session {
        let made = common::dashboard::sim_dashboard(gpus, 2, 5, (80, 24));
        Session {
            cluster: made.cluster,
            dash: made.dash,
            stress_results: made.stress_results,
            clock_ms: 0,
        }
    }

    /// Three GPUs, five trainers with two data loader workers each: a
    /// process list longer than its pane at 80×24 and 100×30.
    fn crowded() -> Session {
        let config = SimConfig {
            gpus: 3,
            training_processes: 5,
            dataloader_workers: 2,
            seed: 5,
            ..SimConfig::default()
        };
        let made =
            common::dashboard::sim_dashboard_of(config, (80, 24), Registry::start(vec![], 0));
        Session {
            cluster: made.cluster,
            dash: made.dash,
            stress_results: made.stress_results,
            clock_ms: 0,
        }
    }

    fn sample(&mut self) {
        self.cluster.advance(1000);
        self.clock_ms += 1000;
        let readings = self.cluster.telemetry().sample();
        self.dash.on_sample(self.clock_ms, readings, 0);
    }

    /// Hands over what the stress worker has answered so far, as the loop
    /// would between events.
    fn drain_stress(&mut self) {
        while let Ok(result) = self.stress_results.try_recv() {
            self.dash.on_stress_result(result);
        }
    }

    /// Waits (at most 10 s) until the stress panel is not waiting for its
    /// worker: a queued command must always get its answer.
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.dash.state().stress.busy && Instant::now() < deadline {
            self.drain_stress();
            std::thread::sleep(Duration::from_millis(2));
        }
        self.drain_stress();
    }

    fn draw(&mut self, width: u16, height: u16) {
        self.dash.terminal_mut().backend_mut().resize(width, height);
        self.dash.on_resize();
        self.dash.draw_if_dirty().expect("a test backend draws");
    }
}

fn check_dashboard(s: &Session) -> Result<(), TestCaseError> {
    let state = s.dash.state();
    if !state.gpus.is_empty() {
        prop_assert!(
            state.ui.selected_gpu < state.gpus.len(),
            "selected {} of {} GPUs",
            state.ui.selected_gpu,
            state.gpus.len()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_keys_on_the_dashboard_draw_and_esc_leaves_every_overlay(
        gpus in 1usize..=3,
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mut s = Session::new(gpus);
        s.sample();
        for step in steps {
            match step {
                Step::Key(key) => {
                    // Quit ends the real loop; here the state must simply
                    // stay usable after it.
                    let _ = s.dash.on_key(key);
                    s.drain_stress();
                }
                Step::Sample => s.sample(),
                Step::Draw { width, height } => s.draw(width, height),
                Step::Click { column, row } => s.dash.on_click(column, row),
            }
            check_dashboard(&s)?;
        }
        s.settle();
        prop_assert!(!s.dash.state().stress.busy, "the stress worker answered");
        s.draw(80, 24);
        s.draw(120, 40);
        // However it got there, Esc (a few times: a field, a picker, then
        // the panel or overlay) comes back to a screen without the help.
        for _ in 0..4 {
            let _ = s.dash.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
            s.drain_stress();
        }
        prop_assert_eq!(s.dash.state().ui.overlay, Overlay::None);
    }
}

/// A key that scrolls the process list.
fn scroll_key() -> impl Strategy<Value = KeyCode> {
    prop_oneof![
        Just(KeyCode::Up),
        Just(KeyCode::Down),
        Just(KeyCode::PageUp),
        Just(KeyCode::PageDown),
        Just(KeyCode::Home),
        Just(KeyCode::End),
    ]
}

/// One step of scrolling the process list: a key, a sample, or a draw at
/// a size where the list is longer than its pane or not.
fn scroll_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => scroll_key().prop_map(|code| Step::Key(KeyEvent::new(code, KeyModifiers::NONE))),
        1 => Just(Step::Sample),
        1 => prop_oneof![Just((80, 24)), Just((100, 30)), Just((120, 40))]
            .prop_map(|(width, height)| Step::Draw { width, height }),
    ]
}

/// The first process row the Processes pane shows, from its title's
/// "rows X–Y of N" as drawn last; `None` where every row shows.
fn first_process_row(s: &Session) -> Option<usize> {
    let screen = common::screen::text(s.dash.terminal().backend().buffer());
    let (_, after) = screen.split_once(" · rows ")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn press(s: &mut Session, code: KeyCode) {
    let _ = s.dash.on_key(KeyEvent::new(code, KeyModifiers::NONE));
    s.dash.draw_if_dirty().expect("a test backend draws");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn after_any_scrolling_the_selected_process_shows_and_up_and_page_up_move_it(
        steps in proptest::collection::vec(scroll_step(), 1..40),
    ) {
        let mut s = Session::crowded();
        s.sample();
        s.draw(80, 24);
        press(&mut s, KeyCode::BackTab);
        prop_assert_eq!(s.dash.state().ui.focus, Pane::Processes);
        for step in steps {
            match step {
                Step::Key(key) => {
                    let _ = s.dash.on_key(key);
                    s.dash.draw_if_dirty().expect("a test backend draws");
                }
                Step::Sample => {
                    s.sample();
                    s.dash.draw_if_dirty().expect("a test backend draws");
                }
                Step::Draw { width, height } => s.draw(width, height),
                Step::Click { .. } => {}
            }
        }
        // (selected line, first line drawn, lines drawn) as last drawn.
        let place = |s: &Session| {
            let state = s.dash.state();
            let lines = state.process_lines();
            let shown = state.ui.process_lines_shown.get();
            let at = state.selected_process_index(&lines);
            (at, state.process_view_first(&lines, shown), shown, lines.len())
        };
        // The selection is in view, and the view no further than the
        // last page (no key spent on rows past it); neither key is spent
        // on nothing while the selection can go up.
        for key in [KeyCode::Up, KeyCode::PageUp] {
            let (at, first, shown, len) = place(&s);
            let Some(at) = at else { break };
            prop_assert!(at >= first && at < first + shown, "{at} not in {first}+{shown}");
            prop_assert!(first + shown <= len.max(shown), "past the last page");
            if first_process_row(&s).is_some() {
                prop_assert_eq!(first_process_row(&s), Some(first + 1), "the title's rows");
            }
            if at == 0 {
                break;
            }
            press(&mut s, key);
            let (after, first, shown, _) = place(&s);
            let after = after.unwrap_or(usize::MAX);
            prop_assert!(after < at, "{key:?} from line {at} left it at {after}");
            prop_assert!(after >= first && after < first + shown, "{after} out of view");
        }
    }
}

/// The viewer on a model-made training-like trace (three streams, many
/// stacks), or on a real one from the shared set.
fn viewer(real: bool) -> Option<ViewerState> {
    if real {
        return common::shared_viewer("silmont_mem_snapshot.pickle");
    }
    static MADE: OnceLock<Snapshot> = OnceLock::new();
    let snapshot = MADE.get_or_init(|| synth::large(&LargeShape::about_bytes(300_000)));
    Some(ViewerState::new(
        "made.pickle".to_string(),
        snapshot.clone(),
    ))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_keys_in_the_viewer_draw_and_keep_the_cursor_in_the_trace(
        real in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let Some(mut v) = viewer(real) else {
            common::skip::skip(
                "any_keys_in_the_viewer_draw_and_keep_the_cursor_in_the_trace (real file)",
                "../shared/snapshots is not here",
                common::skip::Prerequisite::ProvidedByCi,
            );
            return Ok(());
        };
        let keymap = Keymap::default();
        let theme = Theme::colored();
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
        for step in steps {
            match step {
                Step::Key(key) => {
                    let _ = v.handle_key(&keymap, key);
                }
                // The viewer takes no samples and no clicks.
                Step::Sample | Step::Click { .. } => {}
                Step::Draw { width, height } => {
                    terminal.backend_mut().resize(width, height);
                    terminal
                        .draw(|f| {
                            let area = f.area();
                            render_viewer(area, f.buffer_mut(), &v, &keymap, &theme);
                        })
                        .expect("a test backend draws");
                }
            }
            let events = v.device().map_or(0, |d| d.len());
            prop_assert!(v.cursor() <= events, "cursor {} past {events} events", v.cursor());
        }
    }
}
