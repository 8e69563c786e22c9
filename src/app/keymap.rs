//! Keys as data: (key, context) → action. The status-line hints and the help
//! overlay are generated from this table, so they cannot drift from what the
//! keys do.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::Serialize;

use super::state::Pane;
use super::stress::StressAction;
use super::viewer::ViewerAction;

/// A user intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    Quit,
    ToggleHelp,
    /// Close the overlay or stop editing the filter.
    Back,
    FocusNext,
    FocusPrev,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    ZoomIn,
    ZoomOut,
    TogglePause,
    StartFilter,
    ToggleTree,
    /// Show the next probed process's allocator on the selected GPU.
    NextAllocator,
    /// Select GPU n (0-based) — keys 1…9.
    SelectGpu(u8),
}

impl Action {
    /// What the action does, for the help overlay.
    pub fn describe(self) -> &'static str {
        match self {
            Action::Quit => "quit",
            Action::ToggleHelp => "help (this screen)",
            Action::Back => "close help / stop filtering",
            Action::FocusNext => "next pane",
            Action::FocusPrev => "previous pane",
            Action::Up => "move up (GPU, block, process)",
            Action::Down => "move down",
            Action::Left => "previous block / scroll left",
            Action::Right => "next block / scroll right",
            Action::PageUp => "page up",
            Action::PageDown => "page down",
            Action::ZoomIn => "zoom the timeline in",
            Action::ZoomOut => "zoom the timeline out",
            Action::TogglePause => "pause / resume the timeline",
            Action::StartFilter => "filter processes",
            Action::ToggleTree => "process tree / flat list",
            Action::NextAllocator => "allocator: next probe on GPU",
            Action::SelectGpu(_) => "select GPU 1…9",
        }
    }
}

/// One binding: the keys (as shown to users), the action, and the pane it
/// applies to (`None`: everywhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    pub keys: &'static str,
    pub action: Action,
    pub pane: Option<Pane>,
    /// Shown in the status line's key hints.
    pub hint: Option<&'static str>,
}

/// What a key does for the stress panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PanelKey {
    /// Opens the panel (only while it is closed).
    Open,
    /// Closes the panel; its tensors stay allocated.
    Close,
    Act(StressAction),
}

impl PanelKey {
    pub fn describe(self) -> &'static str {
        match self {
            PanelKey::Open => "open the stress panel",
            PanelKey::Close => "close the stress panel (tensors stay)",
            PanelKey::Act(a) => a.describe(),
        }
    }
}

/// One binding of the stress panel (shown in its help section and hints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StressBinding {
    pub keys: &'static str,
    pub key: PanelKey,
    pub hint: Option<&'static str>,
}

/// The keymap: bindings in help order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Keymap {
    pub bindings: Vec<Binding>,
    /// The stress panel's keys: while it is open they come before
    /// [`Keymap::bindings`] (quit, help, Tab and GPU keys still work).
    pub stress: Vec<StressBinding>,
    /// The snapshot viewer's keys (`vramtop open FILE`): they come before
    /// [`Keymap::bindings`] there.
    pub viewer: Vec<ViewerBinding>,
}

/// One binding of the snapshot viewer (shown in its help and hints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewerBinding {
    pub keys: &'static str,
    pub action: ViewerAction,
    pub hint: Option<&'static str>,
}

fn viewer_bindings() -> Vec<ViewerBinding> {
    use ViewerAction as V;
    let b = |keys, action, hint| ViewerBinding { keys, action, hint };
    vec![
        b("← h", V::StepBack, None),
        b("→ l", V::StepForward, Some("event")),
        b("PgUp", V::PageBack, None),
        b("PgDn", V::PageForward, Some("step")),
        b("Home", V::First, None),
        b("End", V::Last, None),
        b("o", V::NextOom, Some("OOM")),
        b("O", V::PrevOom, None),
        b("n", V::NextSegmentAlloc, Some("segment")),
        b("N", V::PrevSegmentAlloc, None),
        b("e", V::NextEmptyCache, Some("empty_cache")),
        b("E", V::PrevEmptyCache, None),
        b("Enter", V::BlockDetail, Some("block")),
        b("s", V::CycleStream, Some("stream")),
        b("p", V::CyclePool, Some("pool")),
        b("P", V::PeakAllocated, Some("peak")),
        b("R", V::PeakReserved, None),
        b("B", V::BiggestAllocation, None),
        b("w", V::ToggleSites, Some("sites")),
        b("g", V::CycleGrouping, Some("group")),
        b("x", V::ToggleCppFrames, None),
        b("m", V::MarkA, Some("mark A")),
        b("M", V::MarkB, None),
        b("c", V::Compare, Some("A/B")),
    ]
}

fn stress_bindings() -> Vec<StressBinding> {
    use StressAction as S;
    let b = |keys, key, hint| StressBinding { keys, key, hint };
    let act = PanelKey::Act;
    vec![
        b("a F2", PanelKey::Open, None),
        b("F2 Esc", PanelKey::Close, Some("close")),
        b("a Enter", act(S::Allocate), Some("alloc")),
        b("+", act(S::SizeUp), Some("size")),
        b("-", act(S::SizeDown), None),
        b("]", act(S::CountUp), Some("count")),
        b("[", act(S::CountDown), None),
        b("r", act(S::TogglePattern), Some("pattern")),
        b("d Del", act(S::FreeSelected), Some("free")),
        b("o", act(S::FreeOldest), Some("oldest")),
        b("x", act(S::FreeRandom), Some("random")),
        b("m", act(S::FreeEveryOther), Some("every other")),
        b("D", act(S::FreeAll), Some("all")),
        b("e", act(S::EmptyCache), Some("empty_cache")),
        b("c", act(S::MarkCompare), Some("compare")),
        b("H", act(S::ToggleHistogram), None),
        b("v", act(S::Verify), Some("verify")),
        b("s", act(S::TypeSize), None),
        b("S", act(S::TypeSettings), Some("alloc conf")),
        b("↑ k", act(S::Up), None),
        b("↓ j", act(S::Down), None),
        b("n", act(S::OpenScenarios), Some("scenarios")),
        b(".", act(S::ScenarioStep), None),
        b("g", act(S::ScenarioRun), None),
        b("w", act(S::ScenarioRewind), None),
        b("N", act(S::ScenarioNextVariant), None),
        b("W", act(S::SaveSnapshot), None),
    ]
}

impl Default for Keymap {
    fn default() -> Self {
        let b = |keys, action, pane, hint| Binding {
            keys,
            action,
            pane,
            hint,
        };
        Keymap {
            bindings: vec![
                b("q Ctrl-C", Action::Quit, None, Some("quit")),
                b("? F1", Action::ToggleHelp, None, Some("help")),
                b("Esc", Action::Back, None, None),
                b("Tab", Action::FocusNext, None, Some("pane")),
                b("Shift-Tab", Action::FocusPrev, None, None),
                b("↑ k", Action::Up, None, None),
                b("↓ j", Action::Down, None, None),
                b("← h", Action::Left, Some(Pane::Segments), None),
                b("→ l", Action::Right, Some(Pane::Segments), None),
                b("PgUp", Action::PageUp, None, None),
                b("PgDn", Action::PageDown, None, None),
                b("+", Action::ZoomIn, Some(Pane::Timeline), Some("zoom")),
                b("-", Action::ZoomOut, Some(Pane::Timeline), None),
                b("p", Action::TogglePause, None, Some("pause")),
                b(
                    "/",
                    Action::StartFilter,
                    Some(Pane::Processes),
                    Some("filter"),
                ),
                b("t", Action::ToggleTree, Some(Pane::Processes), Some("tree")),
                b("v", Action::NextAllocator, None, None),
                b("1…9", Action::SelectGpu(0), None, Some("GPU")),
            ],
            stress: stress_bindings(),
            viewer: viewer_bindings(),
        }
    }
}

impl Keymap {
    /// The action for a key press. Panes are not consulted here: actions
    /// that do nothing in the focused pane are ignored by the update.
    pub fn action_for(&self, key: KeyEvent) -> Option<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        Some(match key.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Char('?') | KeyCode::F(1) => Action::ToggleHelp,
            KeyCode::Esc => Action::Back,
            KeyCode::Tab => Action::FocusNext,
            KeyCode::BackTab => Action::FocusPrev,
            KeyCode::Up | KeyCode::Char('k') => Action::Up,
            KeyCode::Down | KeyCode::Char('j') => Action::Down,
            KeyCode::Left | KeyCode::Char('h') => Action::Left,
            KeyCode::Right | KeyCode::Char('l') => Action::Right,
            KeyCode::PageUp => Action::PageUp,
            KeyCode::PageDown => Action::PageDown,
            KeyCode::Char('+') | KeyCode::Char('=') => Action::ZoomIn,
            KeyCode::Char('-') => Action::ZoomOut,
            KeyCode::Char('p') => Action::TogglePause,
            KeyCode::Char('/') => Action::StartFilter,
            KeyCode::Char('t') => Action::ToggleTree,
            KeyCode::Char('v') => Action::NextAllocator,
            KeyCode::Char(c @ '1'..='9') => Action::SelectGpu(c as u8 - b'1'),
            _ => return None,
        })
    }

    /// What `key` does in the snapshot viewer; `None`: the ordinary keymap
    /// decides (quit, help, Tab, ↑/↓, 1…9).
    pub fn viewer_key_for(&self, key: KeyEvent) -> Option<ViewerAction> {
        use ViewerAction as V;
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return None;
        }
        Some(match key.code {
            KeyCode::Left | KeyCode::Char('h') => V::StepBack,
            KeyCode::Right | KeyCode::Char('l') => V::StepForward,
            KeyCode::PageUp => V::PageBack,
            KeyCode::PageDown => V::PageForward,
            KeyCode::Home => V::First,
            KeyCode::End => V::Last,
            KeyCode::Char('o') => V::NextOom,
            KeyCode::Char('O') => V::PrevOom,
            KeyCode::Char('n') => V::NextSegmentAlloc,
            KeyCode::Char('N') => V::PrevSegmentAlloc,
            KeyCode::Char('e') => V::NextEmptyCache,
            KeyCode::Char('E') => V::PrevEmptyCache,
            KeyCode::Enter => V::BlockDetail,
            KeyCode::Char('s') => V::CycleStream,
            KeyCode::Char('p') => V::CyclePool,
            KeyCode::Char('P') => V::PeakAllocated,
            KeyCode::Char('R') => V::PeakReserved,
            KeyCode::Char('B') => V::BiggestAllocation,
            KeyCode::Char('w') => V::ToggleSites,
            KeyCode::Char('g') => V::CycleGrouping,
            KeyCode::Char('x') => V::ToggleCppFrames,
            KeyCode::Char('m') => V::MarkA,
            KeyCode::Char('M') => V::MarkB,
            KeyCode::Char('c') => V::Compare,
            _ => return None,
        })
    }

    /// "key action" pairs for the viewer's status line: quit and help,
    /// then the viewer's keys.
    pub fn viewer_hints(&self) -> Vec<(&'static str, &'static str)> {
        self.hints_with(self.viewer.iter().map(|b| (b.keys, b.hint)))
    }

    /// "key action" pairs: quit and help, then the `(keys, hint)` of a
    /// mode's own bindings; a binding's first key stands for all of them.
    fn hints_with(
        &self,
        own: impl Iterator<Item = (&'static str, Option<&'static str>)>,
    ) -> Vec<(&'static str, &'static str)> {
        let first = |keys: &'static str| keys.split(' ').next().unwrap_or(keys);
        self.bindings
            .iter()
            .filter(|b| matches!(b.action, Action::Quit | Action::ToggleHelp))
            .map(|b| (b.keys, b.hint))
            .chain(own)
            .filter_map(|(keys, hint)| hint.map(|h| (first(keys), h)))
            .collect()
    }

    /// (keys, description) rows of the viewer for the help overlay: its
    /// own keys, then the dashboard keys that still work there.
    pub fn viewer_help_rows(&self) -> Vec<(&'static str, &'static str)> {
        let shared = self.bindings.iter().filter(|b| {
            matches!(
                b.action,
                Action::Quit
                    | Action::ToggleHelp
                    | Action::Back
                    | Action::FocusNext
                    | Action::FocusPrev
                    | Action::Up
                    | Action::Down
                    | Action::SelectGpu(_)
            )
        });
        self.viewer
            .iter()
            .map(|b| (b.keys, b.action.describe()))
            .chain(shared.map(|b| (b.keys, b.action.describe())))
            .collect()
    }

    /// Whether `key` opens the stress panel (while it is closed).
    pub fn opens_stress(&self, key: KeyEvent) -> bool {
        matches!(key.code, KeyCode::Char('a') | KeyCode::F(2))
    }

    /// What `key` does while the stress panel is open; `None`: the
    /// ordinary keymap decides.
    pub fn stress_key_for(&self, key: KeyEvent) -> Option<PanelKey> {
        use StressAction as S;
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return None;
        }
        Some(match key.code {
            KeyCode::F(2) | KeyCode::Esc => PanelKey::Close,
            KeyCode::Char('a') | KeyCode::Enter => PanelKey::Act(S::Allocate),
            KeyCode::Char('+') | KeyCode::Char('=') => PanelKey::Act(S::SizeUp),
            KeyCode::Char('-') => PanelKey::Act(S::SizeDown),
            KeyCode::Char(']') => PanelKey::Act(S::CountUp),
            KeyCode::Char('[') => PanelKey::Act(S::CountDown),
            KeyCode::Char('r') => PanelKey::Act(S::TogglePattern),
            KeyCode::Char('d') | KeyCode::Delete => PanelKey::Act(S::FreeSelected),
            KeyCode::Char('o') => PanelKey::Act(S::FreeOldest),
            KeyCode::Char('x') => PanelKey::Act(S::FreeRandom),
            KeyCode::Char('m') => PanelKey::Act(S::FreeEveryOther),
            KeyCode::Char('D') => PanelKey::Act(S::FreeAll),
            KeyCode::Char('e') => PanelKey::Act(S::EmptyCache),
            KeyCode::Char('c') => PanelKey::Act(S::MarkCompare),
            KeyCode::Char('H') => PanelKey::Act(S::ToggleHistogram),
            KeyCode::Char('v') => PanelKey::Act(S::Verify),
            KeyCode::Char('s') => PanelKey::Act(S::TypeSize),
            KeyCode::Char('S') => PanelKey::Act(S::TypeSettings),
            KeyCode::Up | KeyCode::Char('k') => PanelKey::Act(S::Up),
            KeyCode::Down | KeyCode::Char('j') => PanelKey::Act(S::Down),
            KeyCode::Char('n') => PanelKey::Act(S::OpenScenarios),
            KeyCode::Char('.') => PanelKey::Act(S::ScenarioStep),
            KeyCode::Char('g') => PanelKey::Act(S::ScenarioRun),
            KeyCode::Char('w') => PanelKey::Act(S::ScenarioRewind),
            KeyCode::Char('N') => PanelKey::Act(S::ScenarioNextVariant),
            KeyCode::Char('W') => PanelKey::Act(S::SaveSnapshot),
            _ => return None,
        })
    }

    /// "key action" pairs for the status line while the stress panel is
    /// open: quit and help first, then the panel's keys.
    pub fn stress_hints(&self) -> Vec<(&'static str, &'static str)> {
        self.hints_with(self.stress.iter().map(|b| (b.keys, b.hint)))
    }

    /// (keys, description) rows of the stress panel for the help overlay.
    pub fn stress_help_rows(&self) -> Vec<(&'static str, &'static str)> {
        self.stress
            .iter()
            .map(|b| (b.keys, b.key.describe()))
            .collect()
    }

    /// "key action" pairs for the status line, for the focused pane.
    pub fn hints(&self, focus: Pane) -> Vec<(&'static str, &'static str)> {
        self.bindings
            .iter()
            .filter(|b| b.pane.is_none_or(|p| p == focus))
            .filter_map(|b| {
                b.hint
                    .map(|h| (b.keys.split(' ').next().unwrap_or(b.keys), h))
            })
            .collect()
    }

    /// (keys, description, where) rows for the help overlay.
    pub fn help_rows(&self) -> Vec<(&'static str, &'static str, &'static str)> {
        self.bindings
            .iter()
            .map(|b| {
                (
                    b.keys,
                    b.action.describe(),
                    b.pane.map_or("everywhere", Pane::title),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn htop_and_vim_keys_map_to_the_same_actions() {
        let k = Keymap::default();
        assert_eq!(k.action_for(key(KeyCode::Char('q'))), Some(Action::Quit));
        assert_eq!(
            k.action_for(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Quit)
        );
        assert_eq!(k.action_for(key(KeyCode::F(1))), Some(Action::ToggleHelp));
        assert_eq!(
            k.action_for(key(KeyCode::Char('j'))),
            k.action_for(key(KeyCode::Down))
        );
        assert_eq!(
            k.action_for(key(KeyCode::Char('3'))),
            Some(Action::SelectGpu(2))
        );
        assert_eq!(k.action_for(key(KeyCode::Char('z'))), None);
    }

    #[test]
    fn every_action_a_key_produces_is_documented_in_the_help() {
        let k = Keymap::default();
        let documented: Vec<Action> = k.bindings.iter().map(|b| b.action).collect();
        for code in [
            KeyCode::Char('q'),
            KeyCode::Char('?'),
            KeyCode::Esc,
            KeyCode::Tab,
            KeyCode::BackTab,
            KeyCode::Up,
            KeyCode::Down,
            KeyCode::Left,
            KeyCode::Right,
            KeyCode::PageUp,
            KeyCode::PageDown,
            KeyCode::Char('+'),
            KeyCode::Char('-'),
            KeyCode::Char('p'),
            KeyCode::Char('/'),
            KeyCode::Char('t'),
        ] {
            let a = k.action_for(key(code)).expect("bound");
            assert!(documented.contains(&a), "{a:?} is not in the help");
        }
    }

    #[test]
    fn hints_follow_the_focused_pane() {
        let k = Keymap::default();
        let timeline: Vec<&str> = k.hints(Pane::Timeline).iter().map(|h| h.1).collect();
        assert!(timeline.contains(&"zoom") && !timeline.contains(&"filter"));
        let procs: Vec<&str> = k.hints(Pane::Processes).iter().map(|h| h.1).collect();
        assert!(procs.contains(&"filter") && !procs.contains(&"zoom"));
    }
}
