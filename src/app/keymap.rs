//! Keys as data: (key, context) → action. The status-line hints and the help
//! overlay are generated from this table, so they cannot drift from what the
//! keys do.

use std::borrow::Cow;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::Serialize;

use super::process_detail::DetailKeys;
use super::state::{Pane, StressView, UiState};
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
    /// The first row: GPU, block, process, or the top of the help.
    First,
    /// The last row.
    Last,
    ZoomIn,
    ZoomOut,
    TogglePause,
    StartFilter,
    ToggleTree,
    /// Sort the process list by its next column.
    SortNext,
    /// Reverse the process list's order.
    SortReverse,
    /// Ask to send a signal to the selected process, or to the tagged
    /// ones where some are (it waits for a confirmation key:
    /// [`TypingMode::SignalPrompt`]).
    SignalProcess,
    /// Tag the selected process for [`Action::SignalProcess`], or untag
    /// it (Esc in Processes untags them all).
    ToggleTag,
    /// Open the detail of the selected process (everything known about
    /// it, its full command line); in the detail, close it.
    ProcessDetail,
    /// Show the next probed process's allocator on the selected GPU.
    NextAllocator,
    /// Ask the selected probed process's probe for a snapshot.
    CaptureSnapshot,
    /// Open the last snapshot taken in the snapshot viewer.
    OpenSnapshot,
    /// Open the last OOM snapshot at its OOM, with the allocation sites.
    OpenOomSnapshot,
    /// Select GPU n, numbered as nvidia-smi numbers them (from 0) — keys 0…9.
    SelectGpu(u8),
}

/// What the dashboard can do only at times: the keys for it are hinted on
/// the status line then (and always listed in the help).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Offers {
    /// A probed process that takes snapshot requests is attached (`c`).
    pub capture: bool,
    /// A snapshot was taken (`o`).
    pub open: bool,
    /// A probe wrote an OOM snapshot (`O`).
    pub open_oom: bool,
    /// The selected GPU has a second process with an allocator to switch
    /// to (`v`).
    pub next_allocator: bool,
    /// The stress panel's allocator holds memory on the selected GPU: not
    /// among `v`'s, it shows while the panel is open.
    pub stress_allocator: bool,
    /// More than one GPU is listed (`0…9` select another).
    pub several_gpus: bool,
    /// What the stress panel's keys have to act on.
    pub panel: PanelOffers,
}

/// What the stress panel's keys have to act on now: a key with nothing is
/// left out of the hints and dimmed in the help ([`PanelKey::unavailable`]),
/// and says why when pressed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PanelOffers {
    /// A scenario is loaded (`.`, `g`, `w`, `N`, `u` drive it).
    pub scenario_loaded: bool,
    /// The panel's live tensors (the free keys, `v` and `↑`/`↓` act on
    /// them; `m` frees the 2nd, 4th, …, so it needs two).
    pub tensors: usize,
    /// Where the tensor size stands among its presets (`+`/`-`).
    pub size: AtEnd,
    /// Where the tensors per allocation stand among theirs (`]`/`[`).
    pub count: AtEnd,
}

/// Which end of its presets a stepped setting stands at (the first, the
/// last, or neither): the key that steps past that end does nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AtEnd {
    pub first: bool,
    pub last: bool,
}

impl Offers {
    /// Whether `action`'s hint may show: always, unless it is one of the
    /// actions above and not on offer now.
    fn allow(self, action: Action) -> bool {
        self.unavailable(action).is_none()
    }

    /// Why `action` can do nothing now, in a few words for the help
    /// (`None`: it can act, and its hint may show).
    pub fn unavailable(self, action: Action) -> Option<&'static str> {
        match action {
            Action::CaptureSnapshot if !self.capture => Some("no process to capture"),
            Action::OpenSnapshot if !self.open => Some("no snapshot yet"),
            Action::OpenOomSnapshot if !self.open_oom => Some("no OOM snapshot"),
            Action::NextAllocator if !self.next_allocator && self.stress_allocator => {
                Some("stress panel's: shown while open")
            }
            Action::NextAllocator if !self.next_allocator => {
                Some("no 2nd process with an allocator")
            }
            Action::SelectGpu(_) if !self.several_gpus => Some("one GPU here"),
            _ => None,
        }
    }
}

impl Action {
    /// The status-line hint of a toggle as the state stands (the key
    /// flips it), else the table's `hint`.
    pub fn hint_now(self, hint: &'static str, ui: &UiState) -> &'static str {
        match self {
            Action::TogglePause if ui.paused => "resume",
            Action::ToggleTree if ui.process_tree => "flat",
            Action::ToggleTree => "tree",
            _ => hint,
        }
    }

    /// What the action does, for the help overlay.
    pub fn describe(self) -> &'static str {
        match self {
            Action::Quit => "quit",
            Action::ToggleHelp => "help (this screen)",
            Action::Back => "close help/detail/filter/OOM line",
            Action::FocusNext => "next pane",
            Action::FocusPrev => "previous pane",
            Action::Up => "move up (GPU, block, process)",
            Action::Down => "move down",
            Action::Left => "previous block (in Segments)",
            Action::Right => "next block (in Segments)",
            // PAGE_ROWS (src/app/update.rs), which a test checks; at most
            // 34 columns, or the 80-column help loses its two columns.
            Action::PageUp => "up 10 rows (map: segment rows)",
            Action::PageDown => "down 10 rows (map: segment rows)",
            Action::First => "first row (GPU, block, process)",
            Action::Last => "last row (GPU, block, process)",
            Action::ZoomIn => "zoom the timeline in (any pane)",
            Action::ZoomOut => "zoom the timeline out (any pane)",
            Action::TogglePause => "pause / resume the timeline",
            // 64: `state::MAX_FILTER_CHARS` characters (a test holds them
            // equal), which a full filter's notice says too.
            Action::StartFilter => "filter processes (any pane, 64 max)",
            Action::ToggleTree => "process tree / flat list",
            // The title says the column and its direction (▼ largest first).
            Action::SortNext => "sort: next column (memory first)",
            Action::SortReverse => "sort: reverse the order",
            Action::SignalProcess => "signal selected/tagged (asks y/n)",
            // Esc: `Action::Back`, which untags in Processes.
            Action::ToggleTag => "tag/untag for K (Esc untags all)",
            Action::ProcessDetail => "details of the selected process",
            Action::NextAllocator => "allocator: next process on GPU",
            Action::CaptureSnapshot => "snapshot of the allocator shown",
            // The help adds which key comes back ([`Keymap::describe`]).
            Action::OpenSnapshot => "open the last snapshot",
            Action::OpenOomSnapshot => "open the OOM snapshot at its OOM",
            // The Processes pane scrolls to the GPU's lines and marks
            // them with the GPUs pane's pointer (`▶2`; `>2` in ASCII).
            Action::SelectGpu(_) => "select GPU; Processes follows (▶N)",
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
    /// Which hints stay when the status line is short: lower ranks first
    /// (0: quit and help, always shown).
    pub rank: u8,
}

/// What a key does for the stress panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PanelKey {
    /// Opens the panel (only while it is closed).
    Open,
    /// Closes the panel; its tensors stay allocated.
    Close,
    /// Where the panel and the segment map do not both fit: shows one or
    /// the other (the panel's keys keep working behind the map, except
    /// those that act on its tensor list: see
    /// [`PanelKey::acts_on_tensor_list`]).
    ToggleMap,
    Act(StressAction),
}

impl PanelKey {
    pub fn describe(self) -> &'static str {
        match self {
            PanelKey::Open => "open the stress panel",
            PanelKey::Close => "close the stress panel (tensors stay)",
            PanelKey::ToggleMap => "segment map / panel (below 120×40: one at a time)",
            PanelKey::Act(a) => a.describe(),
        }
    }

    /// Whether the key acts on the tensor list's selection (moves it, or
    /// frees the selected tensor): it does not while the segment map is
    /// shown in place of the panel, where nobody sees which tensor that is.
    pub fn acts_on_tensor_list(self) -> bool {
        use StressAction as S;
        matches!(self, PanelKey::Act(S::Up | S::Down | S::FreeSelected))
    }

    /// The status-line hint of `M` as the view stands (it switches to the
    /// other), else the table's `hint`.
    fn hint_now(self, hint: &'static str, view: StressView) -> &'static str {
        match (self, view) {
            (PanelKey::ToggleMap, StressView::Map) => "panel",
            _ => hint,
        }
    }

    /// Why the key can do nothing now, in a few words for the help
    /// (`None`: it acts): a scenario key without a scenario loaded, a key
    /// that frees, verifies or selects tensors without one to act on
    /// (`m` without a 2nd), a size or count key at the end of its presets
    /// (`+` at 1 GiB), which the hints leave out then
    /// ([`Keymap::stress_hints`]).
    pub fn unavailable(self, panel: PanelOffers) -> Option<&'static str> {
        use StressAction as S;
        if self.drives_scenario() && !panel.scenario_loaded {
            return Some("no scenario loaded");
        }
        let PanelKey::Act(action) = self else {
            return None;
        };
        match (action, panel.tensors) {
            (
                S::FreeSelected
                | S::FreeOldest
                | S::FreeRandom
                | S::FreeEveryOther
                | S::FreeAll
                | S::Verify
                | S::Up
                | S::Down,
                0,
            ) => Some("no live tensors"),
            (S::FreeEveryOther, 1) => Some("one tensor: no 2nd to free"),
            (S::SizeUp, _) if panel.size.last => Some("at the largest size"),
            (S::SizeDown, _) if panel.size.first => Some("at the smallest size"),
            (S::CountUp, _) if panel.count.last => Some("at the most tensors"),
            (S::CountDown, _) if panel.count.first => Some("at the fewest tensors"),
            _ => None,
        }
    }

    /// Whether the key acts on a loaded scenario (and only says "no
    /// scenario loaded" without one).
    pub fn drives_scenario(self) -> bool {
        use StressAction as S;
        matches!(
            self,
            PanelKey::Act(
                S::ScenarioStep
                    | S::ScenarioRun
                    | S::ScenarioRewind
                    | S::ScenarioNextVariant
                    | S::UnloadScenario
            )
        )
    }
}

/// One binding of the stress panel (shown in its help section and hints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StressBinding {
    pub keys: &'static str,
    pub key: PanelKey,
    pub hint: Option<&'static str>,
    /// Which hints stay when the status line is short: lower ranks first.
    pub rank: u8,
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

/// Which ways a scrolled view (the block detail, the A/B comparison) can
/// move from where it stands: its hints offer only the scroll keys that
/// go somewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scrolled {
    /// Rows above the view: up, a page up and Home move it.
    pub up: bool,
    /// Rows below the view: down, a page down and End move it.
    pub down: bool,
}

impl Scrolled {
    /// A view scrolled `scroll` rows down of at most `limit` (the rows
    /// below the view at the top; past it counts as at it).
    pub fn at(scroll: usize, limit: usize) -> Scrolled {
        let at = scroll.min(limit);
        Scrolled {
            up: at > 0,
            down: at < limit,
        }
    }

    /// Why nothing moves up from here: `none` where nothing moves either
    /// way (all of it in view), `at_top` where only down does.
    fn unavailable_up(self, none: &'static str, at_top: &'static str) -> Option<&'static str> {
        match (self.up, self.down) {
            (true, _) => None,
            (false, false) => Some(none),
            (false, true) => Some(at_top),
        }
    }

    /// [`Scrolled::unavailable_up`] the other way.
    fn unavailable_down(self, none: &'static str, at_end: &'static str) -> Option<&'static str> {
        match (self.down, self.up) {
            (true, _) => None,
            (false, false) => Some(none),
            (false, true) => Some(at_end),
        }
    }
}

/// What a key does while the viewer's block detail is open (it takes the
/// keys: the trace does not move under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailKey {
    Quit,
    Close,
    PrevBlock,
    NextBlock,
    ScrollUp,
    ScrollDown,
    Top,
    Bottom,
}

impl DetailKey {
    /// Whether the key does something in a detail whose stack stands at
    /// `scrolled` and whose block has `blocks` before (`up`) and after
    /// (`down`) it in the map: a scroll key only where it moves the view,
    /// a block key only where there is a block that way.
    fn goes(self, scrolled: Scrolled, blocks: Scrolled) -> bool {
        self.unavailable(scrolled, blocks).is_none()
    }

    /// Why the key does nothing in such a detail, in a few words for the
    /// help (`None`: it acts, and the status line hints it).
    pub fn unavailable(self, scrolled: Scrolled, blocks: Scrolled) -> Option<&'static str> {
        match self {
            DetailKey::ScrollUp | DetailKey::Top => {
                scrolled.unavailable_up("the whole stack is in view", "at the top of the stack")
            }
            DetailKey::ScrollDown | DetailKey::Bottom => {
                scrolled.unavailable_down("the whole stack is in view", "at the end of the stack")
            }
            DetailKey::PrevBlock => {
                blocks.unavailable_up("the only block of the map", "at the first block of the map")
            }
            DetailKey::NextBlock => {
                blocks.unavailable_down("the only block of the map", "at the last block of the map")
            }
            DetailKey::Quit | DetailKey::Close => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            DetailKey::Quit => "quit",
            DetailKey::Close => "close the block detail",
            DetailKey::PrevBlock => "previous block's detail",
            DetailKey::NextBlock => "next block's detail",
            DetailKey::ScrollUp => "scroll the stack up a page",
            DetailKey::ScrollDown => "scroll the stack down a page",
            DetailKey::Top => "top of the stack",
            DetailKey::Bottom => "bottom of the stack",
        }
    }
}

/// The block detail's keys: (keys, key, status-line hint). What a key does
/// there, the status line's hints and the help's rows are all read from
/// this table ([`label_key`] reads its keys).
const DETAIL_BINDINGS: [(&str, DetailKey, Option<&str>); 8] = [
    ("q Ctrl-C", DetailKey::Quit, Some("quit")),
    ("Esc Enter", DetailKey::Close, Some("close")),
    ("↑ k", DetailKey::PrevBlock, Some("prev block")),
    ("↓ j", DetailKey::NextBlock, Some("next block")),
    // One page key is hinted: PgDn while the stack goes on below, else
    // PgUp while there is some above ([`Keymap::detail_hints`]).
    ("PgUp", DetailKey::ScrollUp, Some("scroll")),
    ("PgDn", DetailKey::ScrollDown, Some("scroll")),
    ("Home", DetailKey::Top, None),
    ("End", DetailKey::Bottom, None),
];

/// What a key does while the viewer's A/B comparison is open (it takes
/// the keys, as the block detail does: the trace does not move under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareKey {
    Quit,
    Close,
    ScrollUp,
    ScrollDown,
    PageUp,
    PageDown,
    Top,
    Bottom,
}

impl CompareKey {
    /// Whether the key does something in a comparison that stands at
    /// `scrolled`: a scroll key only where it moves the view.
    fn goes(self, scrolled: Scrolled) -> bool {
        self.unavailable(scrolled).is_none()
    }

    /// Why the key does nothing in such a comparison, in a few words for
    /// the help (`None`: it acts, and the status line hints it).
    pub fn unavailable(self, scrolled: Scrolled) -> Option<&'static str> {
        const ALL: &str = "the whole comparison is in view";
        match self {
            CompareKey::ScrollUp | CompareKey::PageUp | CompareKey::Top => {
                scrolled.unavailable_up(ALL, "at the top of the comparison")
            }
            CompareKey::ScrollDown | CompareKey::PageDown | CompareKey::Bottom => {
                scrolled.unavailable_down(ALL, "at the end of the comparison")
            }
            CompareKey::Quit | CompareKey::Close => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            CompareKey::Quit => "quit",
            CompareKey::Close => "close the comparison",
            CompareKey::ScrollUp => "scroll up a row",
            CompareKey::ScrollDown => "scroll down a row",
            CompareKey::PageUp => "scroll up a page",
            CompareKey::PageDown => "scroll down a page",
            CompareKey::Top => "top of the comparison",
            CompareKey::Bottom => "end of the comparison",
        }
    }
}

/// The A/B comparison's keys: (keys, key, status-line hint). What a key
/// does there, the status line's hints and the help's rows are all read
/// from this table ([`label_key`] reads its keys).
const COMPARE_BINDINGS: [(&str, CompareKey, Option<&str>); 8] = [
    ("q Ctrl-C", CompareKey::Quit, Some("quit")),
    ("Esc Enter c", CompareKey::Close, Some("close")),
    ("↑ k", CompareKey::ScrollUp, Some("up")),
    ("↓ j", CompareKey::ScrollDown, Some("down")),
    // One page key is hinted: PgDn while there are rows below, else PgUp
    // while there are some above ([`Keymap::compare_hints`]).
    ("PgUp", CompareKey::PageUp, Some("page")),
    ("PgDn", CompareKey::PageDown, Some("page")),
    ("Home", CompareKey::Top, None),
    ("End", CompareKey::Bottom, None),
];

/// The viewer's keys in the order a snapshot is read to find whose memory
/// it is, each group's keys with what they do together: `vramtop open
/// --help` lists them ([`Keymap::viewer_guide`]), named from the viewer's
/// table, so a relabelled key is named there as it acts.
/// Its groups: the keys, what they do, then other keys a note names with
/// their use ("O/N/E: back"), none for no note.
type GuideGroup = (
    &'static [ViewerAction],
    &'static str,
    &'static [ViewerAction],
    &'static str,
);

const VIEWER_GUIDE: &[GuideGroup] = {
    use ViewerAction as V;
    &[
        (
            &[V::StepBack, V::StepForward, V::PageBack, V::PageForward],
            "step through the trace: an event, 1% of it",
            &[],
            "",
        ),
        (
            &[V::NextOom, V::NextSegmentAlloc, V::NextEmptyCache],
            "jump to the next OOM, segment_alloc, empty_cache point",
            &[V::PrevOom, V::PrevSegmentAlloc, V::PrevEmptyCache],
            "back",
        ),
        (
            &[V::PeakAllocated, V::PeakReserved, V::BiggestAllocation],
            "jump to the peak of allocated bytes, of reserved bytes, just after the biggest allocation",
            &[],
            "",
        ),
        (
            &[V::ToggleSites],
            "whose memory it is: the allocation sites holding the bytes at the cursor, \
             biggest first",
            &[V::ExpandSite],
            "a site's stack",
        ),
        (
            &[V::BlockDetail],
            "the selected block's detail and the stack of its allocation; at an OOM, the failed call's",
            &[],
            "",
        ),
        (
            &[V::MarkA, V::MarkB, V::Compare],
            "mark two moments A and B, compare them (what was allocated between, by site)",
            &[],
            "",
        ),
    ]
};

/// One binding of the snapshot viewer (shown in its help and hints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewerBinding {
    pub keys: &'static str,
    pub action: ViewerAction,
    pub hint: Option<&'static str>,
    /// Which hints stay when the status line is short: lower ranks first
    /// (0: the sites pane's own key while it takes the keys).
    pub rank: u8,
}

fn viewer_bindings() -> Vec<ViewerBinding> {
    use ViewerAction as V;
    // Rank 1: what a snapshot is read with (a step, the next OOM, the
    // block, the peak, the sites) and the A/B compare (mark, compare),
    // which an 80-column line keeps together; 2: the other moves and
    // the filters; 3: the start, the grouping and the
    // timeline's zoom, which a short status line drops first (all are listed by `?`). At
    // the last event the back moves take the forward ones' places, and
    // at 120 columns they pushed `m mark A  c A/B` off the line.
    let b = |keys, action, hint, rank| ViewerBinding {
        keys,
        action,
        hint,
        rank,
    };
    vec![
        b("← h", V::StepBack, Some("event"), 1),
        b("→ l", V::StepForward, Some("event"), 1),
        b("PgUp", V::PageBack, Some("page"), 2),
        b("PgDn", V::PageForward, Some("page"), 2),
        b("Home", V::First, Some("start"), 3),
        b("End", V::Last, None, 3),
        b("o", V::NextOom, Some("OOM"), 1),
        b("O", V::PrevOom, Some("OOM"), 1),
        b("n", V::NextSegmentAlloc, Some("segment"), 2),
        b("N", V::PrevSegmentAlloc, Some("segment"), 2),
        b("e", V::NextEmptyCache, Some("empty_cache"), 2),
        b("E", V::PrevEmptyCache, Some("empty_cache"), 2),
        b("i", V::NextMarker, Some("marker"), 2),
        b("I", V::PrevMarker, Some("marker"), 2),
        b("]", V::NextSegment, None, 3),
        b("[", V::PrevSegment, None, 3),
        b("Enter", V::BlockDetail, Some("block"), 1),
        // While the sites pane takes the keys Enter is its own (see
        // `Keymap::sites_key_for`), and the hints name that instead,
        // first (what the pane is read with).
        b("Enter", V::ExpandSite, Some("expand/fold site"), 0),
        b("s", V::CycleStream, Some("stream"), 2),
        b("p", V::CyclePool, Some("pool"), 2),
        // Rank 1: the peak is where "whose memory is it" is asked first
        // (`P`, then `w`); at rank 2 it came after the page and filter
        // keys and an 80-column line never showed it.
        b("P", V::PeakAllocated, Some("peak"), 1),
        b("R", V::PeakReserved, None, 3),
        b("B", V::BiggestAllocation, None, 3),
        b("w", V::ToggleSites, Some("sites"), 1),
        b("g", V::CycleGrouping, Some("group"), 3),
        b("x", V::ToggleCppFrames, None, 3),
        b("m", V::MarkA, Some("mark A"), 1),
        b("M", V::MarkB, None, 3),
        b("c", V::Compare, Some("A/B"), 1),
        b("z", V::ToggleZoom, Some("zoom"), 3),
    ]
}

fn stress_bindings() -> Vec<StressBinding> {
    use StressAction as S;
    // Rank 1: the walk-through of docs/stress.md (allocate, make holes,
    // empty_cache, compare) and the scenarios; 2: what shapes the next
    // step; 3: the rest, all listed by `?`.
    let b = |keys, key, hint, rank| StressBinding {
        keys,
        key,
        hint,
        rank,
    };
    let act = PanelKey::Act;
    vec![
        b("a F2", PanelKey::Open, Some("stress"), 1),
        b("F2 Esc", PanelKey::Close, Some("close"), 2),
        b("M", PanelKey::ToggleMap, Some("map"), 2),
        b("a Enter", act(S::Allocate), Some("alloc"), 1),
        b("+", act(S::SizeUp), Some("size"), 2),
        b("-", act(S::SizeDown), None, 3),
        b("]", act(S::CountUp), Some("count"), 2),
        b("[", act(S::CountDown), None, 3),
        b("r", act(S::TogglePattern), Some("pattern"), 3),
        b("d Del", act(S::FreeSelected), Some("free"), 2),
        b("o", act(S::FreeOldest), Some("oldest"), 3),
        b("x", act(S::FreeRandom), Some("random"), 3),
        b("m", act(S::FreeEveryOther), Some("every other"), 1),
        b("D", act(S::FreeAll), Some("all"), 3),
        b("e", act(S::EmptyCache), Some("empty_cache"), 1),
        b("c", act(S::MarkCompare), Some("compare"), 1),
        b("H", act(S::ToggleHistogram), None, 3),
        b("v", act(S::Verify), Some("verify"), 3),
        b("s", act(S::TypeSize), None, 3),
        b("S", act(S::TypeSettings), Some("alloc conf"), 2),
        b("↑ k", act(S::Up), None, 3),
        b("↓ j", act(S::Down), None, 3),
        b("n", act(S::OpenScenarios), Some("scenarios"), 1),
        // Scenario keys: hinted first while a scenario is loaded, not at
        // all without one (see `Keymap::stress_hints`).
        b(".", act(S::ScenarioStep), Some("step"), 1),
        b("g", act(S::ScenarioRun), Some("run"), 1),
        b("w", act(S::ScenarioRewind), None, 3),
        b("N", act(S::ScenarioNextVariant), None, 3),
        b("u", act(S::UnloadScenario), None, 3),
        b("W", act(S::SaveSnapshot), None, 3),
    ]
}

impl Default for Keymap {
    fn default() -> Self {
        let b = |keys, action, pane, hint, rank| Binding {
            keys,
            action,
            pane,
            hint,
            rank,
        };
        Keymap {
            bindings: vec![
                b("q Ctrl-C", Action::Quit, None, Some("quit"), 0),
                b("? F1", Action::ToggleHelp, None, Some("help"), 0),
                b("Esc", Action::Back, None, None, 3),
                b("Tab", Action::FocusNext, None, Some("pane"), 1),
                b("Shift-Tab", Action::FocusPrev, None, None, 3),
                b("↑ k", Action::Up, None, None, 3),
                b("↓ j", Action::Down, None, None, 3),
                b("← h", Action::Left, Some(Pane::Segments), Some("prev"), 2),
                b("→ l", Action::Right, Some(Pane::Segments), Some("next"), 2),
                b("PgUp", Action::PageUp, None, None, 3),
                b("PgDn", Action::PageDown, None, None, 3),
                b("Home", Action::First, None, None, 3),
                b("End", Action::Last, None, None, 3),
                b(
                    "+",
                    Action::ZoomIn,
                    Some(Pane::Timeline),
                    Some("zoom in"),
                    2,
                ),
                b(
                    "-",
                    Action::ZoomOut,
                    Some(Pane::Timeline),
                    Some("zoom out"),
                    2,
                ),
                b("p", Action::TogglePause, None, Some("pause"), 2),
                b(
                    "/",
                    Action::StartFilter,
                    Some(Pane::Processes),
                    Some("filter"),
                    2,
                ),
                b(
                    "t",
                    Action::ToggleTree,
                    Some(Pane::Processes),
                    Some("tree"),
                    2,
                ),
                b(
                    "s",
                    Action::SortNext,
                    Some(Pane::Processes),
                    Some("sort"),
                    2,
                ),
                b("S", Action::SortReverse, Some(Pane::Processes), None, 3),
                // htop's and nvitop's kill key is k, which moves up here
                // (vim): the capital asks first, as theirs do.
                b(
                    "K",
                    Action::SignalProcess,
                    Some(Pane::Processes),
                    Some("kill"),
                    1,
                ),
                // nvitop's and htop's tag key: K then signals the tagged.
                b(
                    "Space",
                    Action::ToggleTag,
                    Some(Pane::Processes),
                    Some("tag"),
                    2,
                ),
                // nvitop's detail key; Enter or Esc closes it.
                b(
                    "Enter",
                    Action::ProcessDetail,
                    Some(Pane::Processes),
                    Some("detail"),
                    1,
                ),
                b("v", Action::NextAllocator, None, None, 3),
                // Hinted while on offer (`Offers`): a probe attached, a
                // snapshot taken, an OOM snapshot written.
                b("c", Action::CaptureSnapshot, None, Some("snapshot"), 1),
                b("o", Action::OpenSnapshot, None, Some("open snap"), 1),
                b("O", Action::OpenOomSnapshot, None, Some("OOM snap"), 1),
                b(GPU_DIGITS, Action::SelectGpu(0), None, Some("GPU"), 2),
            ],
            stress: stress_bindings(),
            viewer: viewer_bindings(),
        }
    }
}

impl Keymap {
    /// The action for a key press, read from [`Keymap::bindings`] (its
    /// first binding that names the key), so a key relabelled in the table
    /// acts and the texts that name it say so. Panes are not consulted
    /// here: actions that do nothing in the focused pane are ignored by the
    /// update. A label with Ctrl (`Ctrl-C`) needs it; one without acts
    /// with or without it, as the keys did when dispatch was written out.
    pub fn action_for(&self, key: KeyEvent) -> Option<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        // `=` is `+` without Shift: it zooms in as `+` does.
        let code = match key.code {
            KeyCode::Char('=') => KeyCode::Char('+'),
            code => code,
        };
        self.bindings.iter().find_map(|b| {
            b.keys
                .split(' ')
                .find_map(|token| match (token, b.action, code) {
                    // "0…9": each digit selects the GPU of its number.
                    (GPU_DIGITS, Action::SelectGpu(_), KeyCode::Char(c @ '0'..='9')) => {
                        Some(Action::SelectGpu(c as u8 - b'0'))
                    }
                    (GPU_DIGITS, _, _) => None,
                    _ => label_key(token)
                        .filter(|bound| bound.code == code)
                        .filter(|bound| ctrl || !bound.modifiers.contains(KeyModifiers::CONTROL))
                        .map(|_| b.action),
                })
        })
    }

    /// The whole label of `action`'s binding in the dashboard's table
    /// ("↓ j"): a text that names every key of a move names them from here.
    pub fn key_label(&self, action: Action) -> Option<&'static str> {
        self.bindings
            .iter()
            .find(|b| b.action == action)
            .map(|b| b.keys)
    }

    /// The whole label of `key`'s binding in the block detail's table
    /// ("↑ k", "PgDn").
    pub fn detail_key_label(&self, key: DetailKey) -> Option<&'static str> {
        DETAIL_BINDINGS.iter().find(|b| b.1 == key).map(|b| b.0)
    }

    /// The whole label of `key`'s binding in the A/B comparison's table.
    pub fn compare_key_label(&self, key: CompareKey) -> Option<&'static str> {
        COMPARE_BINDINGS.iter().find(|b| b.1 == key).map(|b| b.0)
    }

    /// Whether `key` quits vramtop wherever it is pressed: a key with Ctrl
    /// of the quit binding ("Ctrl-C", the terminal's interrupt, which is
    /// expected to end the program). The binding's other keys ("q") quit
    /// the screen they are pressed on: a snapshot viewer opened from the
    /// dashboard goes back to it.
    pub fn quits_vramtop(&self, key: KeyEvent) -> bool {
        key.modifiers.contains(KeyModifiers::CONTROL)
            && self
                .bindings
                .iter()
                .filter(|b| b.action == Action::Quit)
                .flat_map(|b| b.keys.split(' '))
                .filter(|token| {
                    label_key(token).is_some_and(|k| k.modifiers.contains(KeyModifiers::CONTROL))
                })
                .any(|token| label_names(token, key))
    }

    /// [`Keymap::quits_vramtop`] for a token of a binding's label
    /// ("Ctrl-C" of "q Ctrl-C"), as the help names the keys.
    pub fn label_quits_vramtop(&self, token: &str) -> bool {
        label_key(token).is_some_and(|k| self.quits_vramtop(k))
    }

    /// The first key of `action`'s binding in the dashboard's table, as the
    /// hints name it ("O", "q" of "q Ctrl-C"): a text that names the key
    /// that does something names it from here.
    pub fn key_name(&self, action: Action) -> Option<&'static str> {
        self.bindings
            .iter()
            .find(|b| b.action == action)
            .and_then(|b| b.keys.split(' ').next())
    }

    /// What `key` does in the snapshot viewer: the first binding of
    /// [`Keymap::viewer`] that names it, the sites pane's own left out
    /// ([`Keymap::sites_key_for`] answers those first); `None`: the
    /// ordinary keymap decides (quit, help, Tab, ↑/↓, 1…9).
    pub fn viewer_key_for(&self, key: KeyEvent) -> Option<ViewerAction> {
        self.viewer
            .iter()
            .filter(|b| !b.action.in_sites_pane())
            .find(|b| label_names(b.keys, key))
            .map(|b| b.action)
    }

    /// What `key` does while the viewer's block detail is open: the first
    /// binding of [`DETAIL_BINDINGS`] that names it.
    pub fn detail_key_for(&self, key: KeyEvent) -> Option<DetailKey> {
        DETAIL_BINDINGS
            .iter()
            .find(|(keys, _, _)| label_names(keys, key))
            .map(|&(_, bound, _)| bound)
    }

    /// "key action" pairs for the viewer's status line while the block
    /// detail is open (`?` opens the help over it; not hinted, for room):
    /// of the scroll keys only those that move it from where it stands
    /// (`scrolled`), PgUp in PgDn's place at the bottom; of the block keys
    /// only those with a block that way in the map (`blocks`).
    pub fn detail_hints(
        &self,
        scrolled: Scrolled,
        blocks: Scrolled,
    ) -> Vec<(&'static str, &'static str)> {
        let first = |keys: &'static str| keys.split(' ').next().unwrap_or(keys);
        DETAIL_BINDINGS
            .iter()
            .filter(|(_, key, _)| key.goes(scrolled, blocks))
            .filter(|(_, key, _)| {
                !(*key == DetailKey::ScrollUp && DetailKey::ScrollDown.goes(scrolled, blocks))
            })
            .filter_map(|(keys, _, hint)| hint.map(|h| (first(keys), h)))
            .collect()
    }

    /// (keys, description, why it does nothing) rows of the block detail
    /// for the help overlay: while the detail is open (`open`: its stack's
    /// scroll and its block's place in the map, as for
    /// [`Keymap::detail_hints`]), a key its hints leave out says why, as
    /// [`DetailKey::unavailable`] has it.
    pub fn detail_help_rows(
        &self,
        open: Option<(Scrolled, Scrolled)>,
    ) -> Vec<(&'static str, &'static str, Option<&'static str>)> {
        DETAIL_BINDINGS
            .iter()
            .map(|(keys, key, _)| {
                let why = open.and_then(|(scrolled, blocks)| key.unavailable(scrolled, blocks));
                (*keys, key.describe(), why)
            })
            .collect()
    }

    /// What `key` does while the viewer's A/B comparison is open: the
    /// first binding of [`COMPARE_BINDINGS`] that names it.
    pub fn compare_key_for(&self, key: KeyEvent) -> Option<CompareKey> {
        COMPARE_BINDINGS
            .iter()
            .find(|(keys, _, _)| label_names(keys, key))
            .map(|&(_, bound, _)| bound)
    }

    /// "key action" pairs for the viewer's status line while the A/B
    /// comparison is open (`?` opens the help over it; not hinted, for
    /// room): of the scroll keys only those that move it from where it
    /// stands (`scrolled`), PgUp in PgDn's place at the last row.
    pub fn compare_hints(&self, scrolled: Scrolled) -> Vec<(&'static str, &'static str)> {
        let first = |keys: &'static str| keys.split(' ').next().unwrap_or(keys);
        COMPARE_BINDINGS
            .iter()
            .filter(|(_, key, _)| key.goes(scrolled))
            .filter(|(_, key, _)| {
                !(*key == CompareKey::PageUp && CompareKey::PageDown.goes(scrolled))
            })
            .filter_map(|(keys, _, hint)| hint.map(|h| (first(keys), h)))
            .collect()
    }

    /// (keys, description, why it does nothing) rows of the A/B
    /// comparison for the help overlay: while it is open (`open`: how it
    /// stands, as for [`Keymap::compare_hints`]), a key its hints leave out
    /// says why, as [`CompareKey::unavailable`] has it.
    pub fn compare_help_rows(
        &self,
        open: Option<Scrolled>,
    ) -> Vec<(&'static str, &'static str, Option<&'static str>)> {
        COMPARE_BINDINGS
            .iter()
            .map(|(keys, key, _)| {
                let why = open.and_then(|scrolled| key.unavailable(scrolled));
                (*keys, key.describe(), why)
            })
            .collect()
    }

    /// What `key` does while the sites pane takes the keys (open, no block
    /// detail or help over it): the first of the pane's own bindings in
    /// [`Keymap::viewer`] that names it; `None`: the dashboard's ↑/↓ and
    /// Esc move in the pane (see `ViewerState::handle_key`), and the
    /// viewer's other keys decide.
    pub fn sites_key_for(&self, key: KeyEvent) -> Option<ViewerAction> {
        self.viewer
            .iter()
            .filter(|b| b.action.in_sites_pane())
            .find(|b| label_names(b.keys, key))
            .map(|b| b.action)
    }

    /// "key action" pairs for the viewer's status line: quit and help,
    /// then the viewer's keys by rank (see [`viewer_bindings`]), so a
    /// short line drops the least useful moves first; `sites`: the sites
    /// pane takes the keys, so its own binding of a key is hinted in place
    /// of the viewer's, first (what Enter does there is what the pane is
    /// read with).
    pub fn viewer_hints(&self, sites: bool) -> Vec<(&'static str, &'static str)> {
        self.hints_with(
            self.viewer
                .iter()
                .filter(|b| b.action.in_sites_pane() == sites || !self.sites_takes(b))
                .map(|b| (b.keys, b.hint, b.rank)),
        )
    }

    /// [`Keymap::viewer_hints`] of only the actions `offered` says can do
    /// something in the file shown: a file without a trace leaves out the
    /// keys that move along or look into one, a file with no GPU every
    /// viewer key, a move that has nowhere to go from the cursor its key
    /// (`ViewerState::hinted`: of a move's two directions, one hint).
    pub fn viewer_hints_offered(
        &self,
        sites: bool,
        offered: impl Fn(ViewerAction) -> bool,
    ) -> Vec<(&'static str, &'static str)> {
        self.hints_with(
            self.viewer
                .iter()
                .filter(|b| offered(b.action))
                .filter(|b| b.action.in_sites_pane() == sites || !self.sites_takes(b))
                .map(|b| (b.keys, b.hint, b.rank)),
        )
    }

    /// Whether a viewer binding's keys are the sites pane's too (its own
    /// binding, or one the pane's binding shadows while it takes the keys).
    fn sites_takes(&self, binding: &ViewerBinding) -> bool {
        binding.action.in_sites_pane()
            || self
                .viewer
                .iter()
                .any(|b| b.action.in_sites_pane() && b.keys == binding.keys)
    }

    /// "key action" pairs, most important first: quit and help, then the
    /// `(keys, hint, rank)` of a mode's own bindings by rank (table order
    /// within a rank), so a short status line keeps the important ones; a
    /// binding's first key stands for all of them.
    fn hints_with(
        &self,
        own: impl Iterator<Item = (&'static str, Option<&'static str>, u8)>,
    ) -> Vec<(&'static str, &'static str)> {
        let first = |keys: &'static str| keys.split(' ').next().unwrap_or(keys);
        let mut all: Vec<(&'static str, &'static str, u8)> = self
            .bindings
            .iter()
            .filter(|b| matches!(b.action, Action::Quit | Action::ToggleHelp))
            .map(|b| (b.keys, b.hint, 0))
            .chain(own)
            .filter_map(|(keys, hint, rank)| hint.map(|h| (first(keys), h, rank)))
            .collect();
        // Stable: within a rank the table's order stays.
        all.sort_by_key(|h| h.2);
        all.into_iter().map(|(k, h, _)| (k, h)).collect()
    }

    /// (keys, description) rows of the viewer for the help overlay: its
    /// own keys, then the dashboard keys that still work there.
    pub fn viewer_help_rows(&self) -> Vec<(&'static str, Cow<'static, str>)> {
        self.viewer_help_rows_bound()
            .into_iter()
            .map(|(keys, what, _)| (keys, what))
            .collect()
    }

    /// [`Keymap::viewer_help_rows`] with the viewer action of each row
    /// (`None`: a dashboard key), so that the help can say which do
    /// nothing in the file shown.
    pub fn viewer_help_rows_bound(
        &self,
    ) -> Vec<(&'static str, Cow<'static, str>, Option<ViewerAction>)> {
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
        // The dashboard's words for these keys name its process list and
        // its filter, which the viewer has not (a digit selects the GPU,
        // and no Processes pane follows it).
        let in_viewer = |action: Action| match action {
            Action::SelectGpu(_) => "select GPU",
            Action::Back => "close help, the block detail, the sites pane or A/B",
            Action::Up => "previous block (GPUs pane: GPU; sites pane: site)",
            Action::Down => "next block (GPUs pane: GPU; sites pane: site)",
            other => other.describe(),
        };
        self.viewer
            .iter()
            .map(|b| (b.keys, self.describe_viewer(b.action), Some(b.action)))
            .chain(shared.map(|b| (b.keys, Cow::Borrowed(in_viewer(b.action)), None)))
            .collect()
    }

    /// Whether `key` opens the stress panel (while it is closed): a key its
    /// table's `Open` binding names.
    pub fn opens_stress(&self, key: KeyEvent) -> bool {
        self.stress
            .iter()
            .filter(|b| b.key == PanelKey::Open)
            .any(|b| names_code(b.keys, key.code))
    }

    /// What `key` does while the stress panel is open, read from the
    /// panel's table (its first binding that names the key; `Open` does not
    /// act while the panel is open); `None`: the ordinary keymap decides.
    pub fn stress_key_for(&self, key: KeyEvent) -> Option<PanelKey> {
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return None;
        }
        // `=` is `+` without Shift: it sizes up as it zooms the timeline in.
        let code = match key.code {
            KeyCode::Char('=') => KeyCode::Char('+'),
            code => code,
        };
        self.stress
            .iter()
            .filter(|b| b.key != PanelKey::Open)
            .find(|b| names_code(b.keys, code))
            .map(|b| b.key)
    }

    /// "key action" pairs for the status line while the stress panel is
    /// open: quit and help first, then the panel's keys by rank. With a
    /// scenario loaded its keys (step, run) come right after quit and
    /// help, the ones a scenario is driven with; without one they are left
    /// out, as they would only say that none is loaded, and so are the
    /// keys that need live tensors without them. `M` is left out
    /// where the segment map already sits beside the panel; where the map
    /// is shown in its place `M` says "panel", right after quit and help
    /// (the way back, kept at 80 columns), and the tensor list's keys are
    /// left out (they do not act there).
    pub fn stress_hints(
        &self,
        panel: PanelOffers,
        view: StressView,
    ) -> Vec<(&'static str, &'static str)> {
        self.hints_with(
            self.stress
                .iter()
                .filter(|b| b.key != PanelKey::Open)
                .filter(|b| !(view == StressView::BesideMap && b.key == PanelKey::ToggleMap))
                .filter(|b| !(view == StressView::Map && b.key.acts_on_tensor_list()))
                .filter(|b| b.key.unavailable(panel).is_none())
                .map(|b| {
                    let first = b.key.drives_scenario()
                        || (view == StressView::Map && b.key == PanelKey::ToggleMap);
                    let rank = if first { 0 } else { b.rank };
                    (b.keys, b.hint.map(|h| b.key.hint_now(h, view)), rank)
                }),
        )
    }

    /// (keys, description) rows of the stress panel for the help overlay,
    /// as the keys act in `view`: behind the segment map the tensor list's
    /// keys do not act, and their rows say so, naming the key that shows the
    /// list as this table binds it.
    pub fn stress_help_rows(&self, view: StressView) -> Vec<(&'static str, Cow<'static, str>)> {
        self.stress_help_rows_bound(view)
            .into_iter()
            .map(|(keys, what, _)| (keys, what))
            .collect()
    }

    /// [`Keymap::stress_help_rows`] with the panel key of each row, so
    /// that the help can say which do nothing now.
    pub fn stress_help_rows_bound(
        &self,
        view: StressView,
    ) -> Vec<(&'static str, Cow<'static, str>, PanelKey)> {
        let back = self
            .stress_key_name(PanelKey::ToggleMap)
            .map(|m| format!(": {m} shows the list"))
            .unwrap_or_default();
        self.stress
            .iter()
            .map(|b| {
                let what = b.key.describe();
                let what = if view == StressView::Map && b.key.acts_on_tensor_list() {
                    Cow::Owned(format!("{what} (not behind the map{back})"))
                } else {
                    Cow::Borrowed(what)
                };
                (b.keys, what, b.key)
            })
            .collect()
    }

    /// The first key of `key`'s binding in the stress panel's table, as
    /// the hints name it ("d" of "d Del").
    pub fn stress_key_name(&self, key: PanelKey) -> Option<&'static str> {
        self.stress
            .iter()
            .find(|b| b.key == key)
            .and_then(|b| b.keys.split(' ').next())
    }

    /// Why `key`, which the dashboard's table leaves unbound where it was
    /// pressed, does nothing there, where another screen binds it: the
    /// snapshot viewer's keys (`w`, `P`, `m`, ...) say how a snapshot is
    /// reached, the stress panel's (`W`, while it is closed) how the panel
    /// is opened, every key named from the tables. `stress_open`: the
    /// panel took its own keys first. `offers`: what the snapshot keys can
    /// act on now; the route named is one that does (capture and open
    /// where a capture is offered, else the snapshot taken, else the OOM's,
    /// else `vramtop open FILE`): "c captures" with nothing to capture
    /// sent the user to a key that only said why not. `None`: no table
    /// binds it, and it stays silent.
    pub fn bound_elsewhere(
        &self,
        key: KeyEvent,
        stress_open: bool,
        offers: Offers,
    ) -> Option<String> {
        let pressed = self.pressed_label(key);
        if self.viewer.iter().any(|b| label_names(b.keys, key)) {
            let whose = format!("{pressed} is the snapshot viewer's");
            // With the stress panel open the route's keys are the panel's
            // (`o` frees its oldest tensor): the panel is closed first.
            if stress_open && let Some(close) = self.stress_key_name(PanelKey::Close) {
                return Some(format!("{whose}: {close} closes the stress panel first"));
            }
            let open = self.key_name(Action::OpenSnapshot);
            let open_oom = self.key_name(Action::OpenOomSnapshot);
            return Some(match (self.whose_memory_route(), open, open_oom) {
                (Some((capture, open, _)), _, _) if offers.capture => {
                    format!("{whose}: {capture} captures the allocator shown, {open} opens it")
                }
                (_, Some(open), _) if offers.open => {
                    format!("{whose}: {open} opens the last snapshot taken")
                }
                (_, _, Some(open_oom)) if offers.open_oom => {
                    format!("{whose}: {open_oom} opens the OOM's snapshot")
                }
                _ => format!("{whose}: `vramtop open FILE` opens a snapshot"),
            });
        }
        if !stress_open && self.stress_key_for(key).is_some() {
            return Some(match self.stress_key_name(PanelKey::Open) {
                Some(open) => format!("{pressed} is the stress panel's: {open} opens it"),
                None => format!("{pressed} is the stress panel's"),
            });
        }
        None
    }

    /// The keys that answer "whose memory is it" from the dashboard, as
    /// the tables name them: the dashboard's capture and open keys, then
    /// the viewer's sites key; `None` where one of them is unbound.
    pub fn whose_memory_route(&self) -> Option<(&'static str, &'static str, &'static str)> {
        Some((
            self.key_name(Action::CaptureSnapshot)?,
            self.key_name(Action::OpenSnapshot)?,
            self.viewer_key_name(ViewerAction::ToggleSites)?,
        ))
    }

    /// The viewer's keys for finding whose memory a snapshot's bytes are,
    /// as `vramtop open --help` lists them: each group's keys as the
    /// viewer's table names them ("P/R/B"), with what they do; the last,
    /// the key that lists them all. A group whose keys the table no longer
    /// binds is left out.
    pub fn viewer_guide(&self) -> Vec<(String, String)> {
        let names = |actions: &[ViewerAction]| -> Option<String> {
            let keys: Option<Vec<&str>> =
                actions.iter().map(|&a| self.viewer_key_name(a)).collect();
            Some(keys?.join("/"))
        };
        let mut guide: Vec<(String, String)> = VIEWER_GUIDE
            .iter()
            .filter_map(|&(actions, what, noted, note)| {
                // A note whose keys the table no longer binds is left out.
                let what = match names(noted).filter(|n| !n.is_empty()) {
                    Some(noted) => format!("{what} ({noted}: {note})"),
                    None => what.to_string(),
                };
                Some((names(actions)?, what))
            })
            .collect();
        if let Some(help) = self.key_name(Action::ToggleHelp) {
            guide.push((
                help.to_string(),
                "every key of the viewer, and what its words mean".to_string(),
            ));
        }
        guide
    }

    /// How the tables name the key `event` ("/", "K", "Space", "+" of
    /// "=" too): the dashboard's token for it, else the stress panel's,
    /// else the character itself. A notice about a key names the one
    /// pressed.
    pub fn pressed_label(&self, event: KeyEvent) -> Cow<'static, str> {
        // `=` zooms in as `+` does (see `action_for`).
        let code = match event.code {
            KeyCode::Char('=') => KeyCode::Char('+'),
            code => code,
        };
        // "0…9" stands for every digit, not the one pressed.
        let named =
            |token: &&str| *token != GPU_DIGITS && label_key(token).is_some_and(|k| k.code == code);
        let token = self
            .bindings
            .iter()
            .flat_map(|b| b.keys.split(' '))
            .chain(self.stress.iter().flat_map(|b| b.keys.split(' ')))
            .find(named);
        match (token, event.code) {
            (Some(token), _) => Cow::Borrowed(token),
            (None, KeyCode::Char(c)) => Cow::Owned(c.to_string()),
            (None, _) => Cow::Borrowed("this key"),
        }
    }

    /// The first key of `action`'s binding in the viewer's table ("Enter"
    /// of the block detail, "c" of the comparison).
    pub fn viewer_key_name(&self, action: ViewerAction) -> Option<&'static str> {
        self.viewer
            .iter()
            .find(|b| b.action == action)
            .and_then(|b| b.keys.split(' ').next())
    }

    /// Every key of `key`'s binding in the stress panel's table, as its
    /// label names them ("a", "Enter" of "a Enter"); none without one.
    pub fn stress_key_names(&self, key: PanelKey) -> Vec<&'static str> {
        self.stress
            .iter()
            .find(|b| b.key == key)
            .map(|b| b.keys.split(' ').collect())
            .unwrap_or_default()
    }

    /// How the stress panel's table names the key `event` ("j" of "↓ j",
    /// "Del" of "d Del"): a notice about a key names the one pressed.
    pub fn stress_key_label(&self, event: KeyEvent) -> Option<&'static str> {
        self.stress
            .iter()
            .flat_map(|b| b.keys.split(' '))
            .find(|token| label_key(token).is_some_and(|k| k.code == event.code))
    }

    /// "key action" pairs for the status line, for the focused pane, most
    /// important first (the stress panel's key among them, so it can be
    /// found from inside the program): after quit and help, the focused
    /// pane's own keys by rank (what it was focused for: `Enter detail`,
    /// `K kill` in Processes), then the rest by rank. A toggle's hint says what it
    /// does now: `p resume` while paused, `t flat` in tree view.
    pub fn hints(
        &self,
        focus: Pane,
        ui: &UiState,
        offers: Offers,
    ) -> Vec<(&'static str, &'static str)> {
        let open = self
            .stress
            .iter()
            .filter(|b| b.key == PanelKey::Open)
            .map(|b| (b.keys, b.hint, b.rank));
        let tagging = focus == Pane::Processes && !ui.process_tags.is_empty();
        let mut own: Vec<&Binding> = self
            .bindings
            .iter()
            .filter(|b| !matches!(b.action, Action::Quit | Action::ToggleHelp))
            .filter(|b| b.pane.is_none_or(|p| p == focus))
            .filter(|b| offers.allow(b.action))
            .collect();
        // The focused pane's own keys by their rank (stable: the table's
        // order within one), so a short line keeps the pane's most used:
        // Processes' "Enter detail" came last of six and fell off at 80
        // columns, behind the filter's and the sort's. With processes
        // tagged, the table's order stays for the sort below.
        if !tagging {
            own.sort_by_key(|b| {
                if b.pane == Some(focus) {
                    b.rank
                } else {
                    u8::MAX
                }
            });
        }
        // With processes tagged, the keys that tag, signal and untag them
        // come first (stable: the table's order among them), so a short
        // line keeps them over the filter's and the sort's.
        let tag_keys = |b: &&Binding| {
            matches!(
                b.action,
                Action::Back | Action::ToggleTag | Action::SignalProcess
            )
        };
        if tagging {
            own.sort_by_key(|b| !tag_keys(b));
        }
        self.hints_with(
            own.into_iter()
                .map(|b| {
                    // The key that untags them all is hinted beside them.
                    if tagging && b.action == Action::Back {
                        return (b.keys, Some("untag"), 0);
                    }
                    // Rank 0 ranks beside quit and help, after them.
                    let rank = if b.pane == Some(focus) { 0 } else { b.rank };
                    (b.keys, b.hint.map(|h| b.action.hint_now(h, ui)), rank)
                })
                .chain(open),
        )
    }

    /// "key action" pairs of the keys that act on the process detail's
    /// process from the detail, of those `acts` says can (`K` signals it,
    /// `c` captures its allocator, `v` shows its allocator), named from
    /// the table in its order: the detail lists them, the status line
    /// hints them.
    pub fn process_detail_acts(&self, acts: DetailKeys) -> Vec<(&'static str, &'static str)> {
        let first = |keys: &'static str| keys.split(' ').next().unwrap_or(keys);
        self.bindings
            .iter()
            .filter_map(|b| {
                let hint = match b.action {
                    Action::SignalProcess if acts.signal => "signal it",
                    Action::CaptureSnapshot if acts.capture => "snapshot",
                    Action::NextAllocator if acts.show_allocator => "show its allocator",
                    _ => return None,
                };
                Some((first(b.keys), hint))
            })
            .collect()
    }

    /// "key action" pairs for the status line while the process detail
    /// is open (it takes the keys, as the help does): quit and help, the
    /// key that closes it, a scroll key where it scrolls (`scrolled`: ↓
    /// while there are rows below, else ↑ while there are some above),
    /// then [`Keymap::process_detail_acts`].
    pub fn process_detail_hints(
        &self,
        acts: DetailKeys,
        scrolled: Scrolled,
    ) -> Vec<(&'static str, &'static str)> {
        let scroll = if scrolled.down {
            Some(Action::Down)
        } else if scrolled.up {
            Some(Action::Up)
        } else {
            None
        };
        let own = self
            .bindings
            .iter()
            .filter(|b| b.action == Action::Back || Some(b.action) == scroll)
            .map(|b| {
                let hint = if b.action == Action::Back {
                    "close"
                } else {
                    "scroll"
                };
                (b.keys, Some(hint), 0)
            })
            .chain(
                self.process_detail_acts(acts)
                    .into_iter()
                    .map(|(key, hint)| (key, Some(hint), 1)),
            );
        self.hints_with(own)
    }

    /// (keys, description, where) rows for the help overlay: the
    /// dashboard's bindings, then the key that opens the stress panel.
    pub fn help_rows(&self) -> Vec<(&'static str, Cow<'static, str>, &'static str)> {
        self.help_rows_bound()
            .into_iter()
            .map(|(keys, what, place, _)| (keys, what, place))
            .collect()
    }

    /// [`Keymap::help_rows`] with the action of each row (`None`: the key
    /// that opens the stress panel), so that the help can say which do
    /// nothing now ([`Offers::unavailable`]).
    pub fn help_rows_bound(&self) -> Vec<HelpRow> {
        let open = self
            .stress
            .iter()
            .filter(|b| b.key == PanelKey::Open)
            .map(|b| (b.keys, Cow::Borrowed(STRESS_OPEN_HELP), "everywhere", None));
        self.bindings
            .iter()
            .map(|b| {
                (
                    b.keys,
                    self.describe(b.action),
                    b.pane.map_or("everywhere", Pane::title),
                    Some(b.action),
                )
            })
            .chain(open)
            .collect()
    }

    /// What `action` does, for the help overlay: [`Action::describe`], and
    /// the keys it names as this table binds them.
    pub fn describe(&self, action: Action) -> Cow<'static, str> {
        match (action, self.key_name(Action::Quit)) {
            (Action::OpenSnapshot, Some(quit)) => {
                Cow::Owned(format!("{} ({quit} returns)", action.describe()))
            }
            (Action::ToggleTag, _) => {
                match (
                    self.key_name(Action::SignalProcess),
                    self.key_name(Action::Back),
                ) {
                    (Some(signal), Some(back)) => {
                        Cow::Owned(format!("tag/untag for {signal} ({back} untags all)"))
                    }
                    _ => Cow::Borrowed(action.describe()),
                }
            }
            _ => Cow::Borrowed(action.describe()),
        }
    }

    /// What the viewer's `action` does, for the help overlay:
    /// [`ViewerAction::describe`], and the keys it names as the tables
    /// bind them.
    pub fn describe_viewer(&self, action: ViewerAction) -> Cow<'static, str> {
        let keys = (
            self.viewer_key_name(ViewerAction::ExpandSite),
            self.key_name(Action::Up),
            self.key_name(Action::Down),
        );
        match (action, keys) {
            (ViewerAction::ToggleSites, (Some(expand), Some(up), Some(down))) => {
                Cow::Owned(format!(
                    "{} ({expand} expands, {up}/{down} scroll)",
                    action.describe()
                ))
            }
            _ => Cow::Borrowed(action.describe()),
        }
    }
}

impl Keymap {
    /// [`Keymap::help_rows`] while the stress panel is open: without the
    /// bindings whose every key the panel takes first (`c` compares, `o`
    /// frees the oldest tensor, `+` sizes up…), which the help would
    /// otherwise promise as the dashboard's. `Esc` stays: in the help and in
    /// the process filter it still closes them.
    pub fn help_rows_beside_stress(&self) -> Vec<(&'static str, Cow<'static, str>, &'static str)> {
        self.help_rows_beside_stress_bound()
            .into_iter()
            .map(|(keys, what, place, _)| (keys, what, place))
            .collect()
    }

    /// [`Keymap::help_rows_beside_stress`] with the action of each row, as
    /// [`Keymap::help_rows_bound`].
    pub fn help_rows_beside_stress_bound(&self) -> Vec<HelpRow> {
        let back = self
            .bindings
            .iter()
            .find(|b| b.action == Action::Back)
            .map(|b| b.keys);
        self.help_rows_bound()
            .into_iter()
            .filter(|r| Some(r.0) == back || !self.stress_takes(r.0))
            .collect()
    }

    /// Whether the open stress panel takes every key a binding's label
    /// names ("↑ k": Up and `k`); a label with a key this cannot read is
    /// not taken.
    pub fn stress_takes(&self, keys: &str) -> bool {
        let events: Option<Vec<KeyEvent>> = keys.split(' ').map(label_key).collect();
        events.is_some_and(|e| {
            !e.is_empty() && e.into_iter().all(|k| self.stress_key_for(k).is_some())
        })
    }
}

/// The key a token of a binding's label names ("k", "↑", "PgDn", "F2",
/// "Ctrl-C"; "0…9" stands for its first key).
fn label_key(token: &str) -> Option<KeyEvent> {
    let plain = |code| Some(KeyEvent::new(code, KeyModifiers::NONE));
    match token {
        "↑" => plain(KeyCode::Up),
        "↓" => plain(KeyCode::Down),
        "←" => plain(KeyCode::Left),
        "→" => plain(KeyCode::Right),
        "Esc" => plain(KeyCode::Esc),
        "Tab" => plain(KeyCode::Tab),
        "Shift-Tab" => plain(KeyCode::BackTab),
        "PgUp" => plain(KeyCode::PageUp),
        "PgDn" => plain(KeyCode::PageDown),
        "Home" => plain(KeyCode::Home),
        "End" => plain(KeyCode::End),
        "Enter" => plain(KeyCode::Enter),
        "Del" => plain(KeyCode::Delete),
        "Bksp" => plain(KeyCode::Backspace),
        "Space" => plain(KeyCode::Char(' ')),
        "0…9" => plain(KeyCode::Char('0')),
        "Ctrl-C" => Some(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        "Ctrl-U" => Some(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL)),
        _ => {
            if let Some(n) = token.strip_prefix('F').and_then(|n| n.parse::<u8>().ok()) {
                return plain(KeyCode::F(n));
            }
            let mut chars = token.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => plain(KeyCode::Char(c)),
                _ => None,
            }
        }
    }
}

/// Whether a binding's label names a key of `code` (Shift and the key's
/// kind are not compared: a terminal may report them or not for the same
/// key).
fn names_code(keys: &str, code: KeyCode) -> bool {
    keys.split(' ')
        .filter_map(label_key)
        .any(|bound| bound.code == code)
}

/// The first key of a binding's label, as the hints name it ("q" of
/// "q Ctrl-C").
pub fn first_key(label: &str) -> &str {
    label.split(' ').next().unwrap_or(label)
}

/// Whether a binding's label names `key`: its code, and Ctrl as the label
/// says (a label with Ctrl needs it, one without does not act with it).
/// Shift and the key's kind are not compared: a terminal may report them
/// or not for the same key.
fn label_names(keys: &str, key: KeyEvent) -> bool {
    let ctrl = |k: &KeyEvent| k.modifiers.contains(KeyModifiers::CONTROL);
    keys.split(' ')
        .filter_map(label_key)
        .any(|bound| bound.code == key.code && ctrl(&bound) == ctrl(&key))
}

/// A row of the dashboard's help: (keys, what they do, where, the action;
/// `None` for the key that opens the stress panel).
pub type HelpRow = (
    &'static str,
    Cow<'static, str>,
    &'static str,
    Option<Action>,
);

/// The label of the GPU keys: each digit selects the GPU of its number.
const GPU_DIGITS: &str = "0…9";

/// The help's line for the key that opens the stress panel.
const STRESS_OPEN_HELP: &str = "stress panel (drive the allocator)";

/// What takes the keys while something is being typed or picked: the
/// keymap's bindings are off then (a field takes every printable key, so
/// its own keys are fixed: Enter, Esc, Backspace), and the status line,
/// the help and the texts that name them read them from the mode's table
/// ([`TypingMode::bindings`]), which `update` dispatches from too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypingMode {
    /// The stress panel's size (`s`) or allocator-settings (`S`) field.
    StressField,
    /// The stress panel's scenario list (`n`).
    ScenarioList,
    /// The process filter (`/`).
    ProcessFilter,
    /// The prompt that confirms a signal to a process (`K`).
    SignalPrompt,
}

/// What a key does while a field or list takes the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypingKey {
    /// Apply the field (set the size, replace the allocator), load the
    /// selected scenario, or stop typing the filter.
    Done,
    /// Close the field or the list, changing nothing.
    Cancel,
    /// Delete the last character typed.
    Delete,
    /// Delete everything typed (readline's Ctrl-U).
    Clear,
    /// The previous entry of the list.
    Up,
    /// The next entry of the list.
    Down,
    /// Quit vramtop (Ctrl-C quits from every mode).
    Quit,
    /// Send SIGTERM to the process the signal prompt names.
    SendTerm,
    /// Send SIGKILL to it.
    SendKill,
    /// Send SIGINT to it (as Ctrl-C in its terminal would).
    SendInt,
}

/// One key of a field or list: (keys as shown, what it does, its status-line
/// hint, its help row).
pub type TypingBinding = (&'static str, TypingKey, &'static str, &'static str);

/// The stress panel's size and settings fields.
const STRESS_FIELD_KEYS: [TypingBinding; 5] = [
    (
        "Enter",
        TypingKey::Done,
        "apply",
        "set the size; settings: free all, new allocator",
    ),
    (
        "Esc",
        TypingKey::Cancel,
        "cancel",
        "cancel: the field closes",
    ),
    (
        "Bksp",
        TypingKey::Delete,
        "delete",
        "delete the last character",
    ),
    ("Ctrl-U", TypingKey::Clear, "clear", "clear the field"),
    ("Ctrl-C", TypingKey::Quit, "quit", "quit (other keys type)"),
];

/// The stress panel's scenario list.
const SCENARIO_LIST_KEYS: [TypingBinding; 5] = [
    (
        "Enter",
        TypingKey::Done,
        "load",
        "load the selected scenario (frees all)",
    ),
    ("Esc", TypingKey::Cancel, "close", "close the list"),
    ("↑ k", TypingKey::Up, "up", "the previous scenario"),
    ("↓ j", TypingKey::Down, "down", "the next scenario"),
    ("Ctrl-C", TypingKey::Quit, "quit", "quit"),
];

/// The process filter.
const PROCESS_FILTER_KEYS: [TypingBinding; 4] = [
    (
        "Enter Esc",
        TypingKey::Done,
        "done",
        "stop typing (the filter stays)",
    ),
    (
        "Bksp",
        TypingKey::Delete,
        "delete",
        "delete the last character",
    ),
    ("Ctrl-U", TypingKey::Clear, "clear", "clear the filter"),
    ("Ctrl-C", TypingKey::Quit, "quit", "quit (other keys type)"),
];

/// The signal prompt: nothing is sent but on its own keys (`y`, `9`, `i`),
/// neither of them Enter, which a key pressed once too often would be.
const SIGNAL_PROMPT_KEYS: [TypingBinding; 5] = [
    (
        "y",
        TypingKey::SendTerm,
        "SIGTERM",
        "send SIGTERM (it may save and exit)",
    ),
    (
        "9",
        TypingKey::SendKill,
        "SIGKILL",
        "send SIGKILL (ends it at once)",
    ),
    // nvitop's I: a PyTorch job reads it as KeyboardInterrupt, which a
    // training loop can catch to save a checkpoint before it exits.
    (
        "i",
        TypingKey::SendInt,
        "SIGINT",
        "send SIGINT (as Ctrl-C; it may save)",
    ),
    (
        "n Esc",
        TypingKey::Cancel,
        "cancel",
        "cancel (any other key too): none sent",
    ),
    ("Ctrl-C", TypingKey::Quit, "quit", "quit (nothing is sent)"),
];

impl TypingMode {
    /// The mode's keys, in the order the status line and the help list them.
    pub fn bindings(self) -> &'static [TypingBinding] {
        match self {
            TypingMode::StressField => &STRESS_FIELD_KEYS,
            TypingMode::ScenarioList => &SCENARIO_LIST_KEYS,
            TypingMode::ProcessFilter => &PROCESS_FILTER_KEYS,
            TypingMode::SignalPrompt => &SIGNAL_PROMPT_KEYS,
        }
    }

    /// (keys, action) for the status line.
    pub fn hints(self) -> Vec<(&'static str, &'static str)> {
        self.bindings()
            .iter()
            .map(|&(keys, _, hint, _)| (keys, hint))
            .collect()
    }

    /// (keys, description) rows for the help overlay.
    pub fn help_rows(self) -> Vec<(&'static str, &'static str)> {
        self.bindings()
            .iter()
            .map(|&(keys, _, _, help)| (keys, help))
            .collect()
    }

    /// Whether the field or list of this mode takes `key` while it is open:
    /// every key without Ctrl, and its own Ctrl keys but the one that
    /// quits (other Ctrl keys act as they do everywhere).
    pub fn takes(self, key: KeyEvent) -> bool {
        !key.modifiers.contains(KeyModifiers::CONTROL)
            || self.key_for(key).is_some_and(|k| k != TypingKey::Quit)
    }

    /// What `key` does in this mode: the first binding that names it (a
    /// label with Ctrl needs it, one without does not act with it);
    /// `None`: a character types, anything else does nothing.
    pub fn key_for(self, key: KeyEvent) -> Option<TypingKey> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        self.bindings().iter().find_map(|&(keys, bound, _, _)| {
            keys.split(' ')
                .filter_map(label_key)
                .any(|k| k.code == key.code && k.modifiers.contains(KeyModifiers::CONTROL) == ctrl)
                .then_some(bound)
        })
    }

    /// The first key of `key`'s binding in this mode ("Enter", "Esc"), as
    /// a text that names the key says it.
    pub fn key_name(self, key: TypingKey) -> Option<&'static str> {
        self.bindings()
            .iter()
            .find(|b| b.1 == key)
            .and_then(|b| b.0.split(' ').next())
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
            Some(Action::SelectGpu(3)),
            "3 selects the GPU nvidia-smi calls 3"
        );
        assert_eq!(
            k.action_for(key(KeyCode::Char('0'))),
            Some(Action::SelectGpu(0))
        );
        assert_eq!(k.action_for(key(KeyCode::Char('z'))), None);
    }

    /// What the dashboard's keys did when dispatch was written out by hand.
    fn written_out(key: KeyEvent) -> Option<Action> {
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
            KeyCode::Home => Action::First,
            KeyCode::End => Action::Last,
            KeyCode::Char('+') | KeyCode::Char('=') => Action::ZoomIn,
            KeyCode::Char('-') => Action::ZoomOut,
            KeyCode::Char('p') => Action::TogglePause,
            KeyCode::Char('/') => Action::StartFilter,
            KeyCode::Char('t') => Action::ToggleTree,
            KeyCode::Char('s') => Action::SortNext,
            KeyCode::Char('S') => Action::SortReverse,
            KeyCode::Char('K') => Action::SignalProcess,
            KeyCode::Char(' ') => Action::ToggleTag,
            KeyCode::Enter => Action::ProcessDetail,
            KeyCode::Char('v') => Action::NextAllocator,
            KeyCode::Char('c') => Action::CaptureSnapshot,
            KeyCode::Char('o') => Action::OpenSnapshot,
            KeyCode::Char('O') => Action::OpenOomSnapshot,
            KeyCode::Char(c @ '0'..='9') => Action::SelectGpu(c as u8 - b'0'),
            _ => return None,
        })
    }

    #[test]
    fn the_dashboard_dispatches_from_its_table_so_a_relabelled_key_acts() {
        let k = Keymap::default();
        for event in every_key() {
            assert_eq!(
                k.action_for(event),
                written_out(event),
                "{:?} {:?}",
                event.code,
                event.modifiers
            );
        }
        // Relabelled in the table, the binding acts on its new key alone,
        // and the texts that name it get the new one.
        let mut moved = Keymap::default();
        for b in &mut moved.bindings {
            if b.action == Action::OpenOomSnapshot {
                b.keys = "F7";
            }
        }
        assert_eq!(
            moved.action_for(key(KeyCode::F(7))),
            Some(Action::OpenOomSnapshot)
        );
        assert_eq!(moved.action_for(key(KeyCode::Char('O'))), None);
        assert_eq!(moved.key_name(Action::OpenOomSnapshot), Some("F7"));
        assert_eq!(k.key_name(Action::OpenOomSnapshot), Some("O"));
        assert_eq!(k.key_name(Action::Quit), Some("q"));
    }

    #[test]
    fn every_field_and_list_key_dispatches_from_its_own_table() {
        for mode in [
            TypingMode::StressField,
            TypingMode::ScenarioList,
            TypingMode::ProcessFilter,
            TypingMode::SignalPrompt,
        ] {
            for &(keys, bound, _, _) in mode.bindings() {
                for name in keys.split(' ') {
                    let event = label_key(name).expect("a key the table can name");
                    assert_eq!(mode.key_for(event), Some(bound), "{mode:?} {name}");
                }
            }
            // Characters type: no binding takes them.
            assert_eq!(mode.key_for(key(KeyCode::Char('x'))), None, "{mode:?}");
            assert_eq!(mode.hints().len(), mode.bindings().len(), "{mode:?}");
        }
        let field = TypingMode::StressField;
        assert_eq!(field.key_name(TypingKey::Done), Some("Enter"));
        assert_eq!(field.key_name(TypingKey::Cancel), Some("Esc"));
        assert_eq!(field.key_for(key(KeyCode::Char('k'))), None, "k types");
        assert_eq!(
            TypingMode::ScenarioList.key_for(key(KeyCode::Char('k'))),
            Some(TypingKey::Up)
        );
        let filter = TypingMode::ProcessFilter;
        assert_eq!(filter.key_for(key(KeyCode::Esc)), Some(TypingKey::Done));
        // The prompt sends on its own keys only: never on Enter.
        let prompt = TypingMode::SignalPrompt;
        assert_eq!(prompt.key_for(key(KeyCode::Enter)), None);
        assert_eq!(
            prompt.key_for(key(KeyCode::Char('y'))),
            Some(TypingKey::SendTerm)
        );
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
            KeyCode::Home,
            KeyCode::End,
            KeyCode::Char('+'),
            KeyCode::Char('-'),
            KeyCode::Char('p'),
            KeyCode::Char('/'),
            KeyCode::Char('t'),
            KeyCode::Char('c'),
            KeyCode::Char('o'),
            KeyCode::Char('O'),
        ] {
            let a = k.action_for(key(code)).expect("bound");
            assert!(documented.contains(&a), "{a:?} is not in the help");
        }
    }

    /// The stress panel with two live tensors, and a scenario `loaded`
    /// or not.
    fn with_tensors(loaded: bool) -> PanelOffers {
        PanelOffers {
            scenario_loaded: loaded,
            tensors: 2,
            ..PanelOffers::default()
        }
    }

    #[test]
    fn without_live_tensors_the_stress_hints_leave_out_the_keys_that_act_on_them() {
        let k = Keymap::default();
        let hinted = |tensors| {
            let panel = PanelOffers {
                scenario_loaded: false,
                tensors,
                ..PanelOffers::default()
            };
            k.stress_hints(panel, StressView::Panel)
        };
        let none = hinted(0);
        for key in ["m", "d", "o", "x", "D", "v"] {
            assert!(none.iter().all(|h| h.0 != key), "{key}: {none:?}");
        }
        assert!(none.contains(&("a", "alloc")), "{none:?}");
        let one = hinted(1);
        assert!(one.iter().all(|h| h.0 != "m"), "no 2nd tensor: {one:?}");
        assert!(one.contains(&("d", "free")), "{one:?}");
        assert!(hinted(2).contains(&("m", "every other")));
        // Each key left out gives the help its reason.
        let m = PanelKey::Act(StressAction::FreeEveryOther);
        let nothing = PanelOffers::default();
        assert_eq!(m.unavailable(nothing), Some("no live tensors"));
        let alloc = PanelKey::Act(StressAction::Allocate);
        assert_eq!(alloc.unavailable(nothing), None);
        for b in &k.stress {
            let hint = b.hint.map(|h| (first_key(b.keys), h));
            let shown = hint.is_some_and(|h| none.contains(&h));
            if b.key != PanelKey::Open && hint.is_some() {
                assert_eq!(shown, b.key.unavailable(nothing).is_none(), "{:?}", b.key);
            }
        }
    }

    #[test]
    fn stress_hints_name_the_scenario_step_and_run_keys_first_while_one_is_loaded() {
        let k = Keymap::default();
        let loaded = k.stress_hints(with_tensors(true), StressView::Panel);
        assert_eq!(
            loaded.get(2..4),
            Some(&[(".", "step"), ("g", "run")][..]),
            "right after quit and help: {loaded:?}"
        );
        let none = k.stress_hints(with_tensors(false), StressView::Panel);
        assert!(
            none.iter().all(|h| h.0 != "." && h.0 != "g"),
            "no scenario, nothing to step: {none:?}"
        );
        assert!(none.iter().any(|h| h.1 == "scenarios"), "{none:?}");
        assert!(none.iter().any(|h| h.0 == "M"), "{none:?}");
        let beside = k.stress_hints(with_tensors(false), StressView::BesideMap);
        assert!(
            beside.iter().all(|h| h.0 != "M"),
            "the map is there: {beside:?}"
        );
    }

    #[test]
    fn behind_the_segment_map_the_hints_offer_m_panel_first_and_no_tensor_list_key() {
        let k = Keymap::default();
        let map = k.stress_hints(with_tensors(false), StressView::Map);
        assert_eq!(map.get(2), Some(&("M", "panel")), "the way back: {map:?}");
        for key in ["d", "↑", "↓"] {
            assert!(
                map.iter().all(|h| h.0 != key),
                "{key} does not act: {map:?}"
            );
        }
        assert!(
            map.contains(&("o", "oldest")),
            "other keys still act: {map:?}"
        );
        let panel = k.stress_hints(with_tensors(false), StressView::Panel);
        assert!(panel.contains(&("M", "map")) && panel.contains(&("d", "free")));
        // The help's rows say the same.
        let rows = k.stress_help_rows(StressView::Map);
        let d = rows.iter().find(|r| r.0 == "d Del").map(|r| r.1.as_ref());
        assert_eq!(
            d,
            Some("free the selected tensor (not behind the map: M shows the list)")
        );
        assert_eq!(k.stress_key_name(PanelKey::ToggleMap), Some("M"));
        // They name the key that shows the list as the table binds it.
        let mut moved = Keymap::default();
        for b in &mut moved.stress {
            if b.key == PanelKey::ToggleMap {
                b.keys = "F9";
            }
        }
        let rows = moved.stress_help_rows(StressView::Map);
        let d = rows.iter().find(|r| r.0 == "d Del").map(|r| r.1.as_ref());
        assert_eq!(
            d,
            Some("free the selected tensor (not behind the map: F9 shows the list)")
        );
        let j = KeyEvent::new(KeyCode::Char('j'), KeyModifiers::NONE);
        assert_eq!(k.stress_key_label(j), Some("j"));
    }

    #[test]
    fn the_stress_panel_dispatches_from_its_table_so_a_relabelled_key_acts() {
        use StressAction as S;
        let k = Keymap::default();
        for b in k.stress.iter().filter(|b| b.key != PanelKey::Open) {
            for name in b.keys.split(' ') {
                let event = label_key(name).expect("a key the table can name");
                assert_eq!(k.stress_key_for(event), Some(b.key), "{name}");
            }
        }
        // What the keys did when dispatch was written out by hand.
        let char_keys = [
            ('M', PanelKey::ToggleMap),
            ('a', PanelKey::Act(S::Allocate)),
            ('+', PanelKey::Act(S::SizeUp)),
            ('=', PanelKey::Act(S::SizeUp)),
            ('d', PanelKey::Act(S::FreeSelected)),
            ('S', PanelKey::Act(S::TypeSettings)),
            ('k', PanelKey::Act(S::Up)),
            ('u', PanelKey::Act(S::UnloadScenario)),
        ];
        for (c, bound) in char_keys {
            assert_eq!(k.stress_key_for(key(KeyCode::Char(c))), Some(bound), "{c}");
        }
        for (code, bound) in [
            (KeyCode::F(2), PanelKey::Close),
            (KeyCode::Esc, PanelKey::Close),
            (KeyCode::Enter, PanelKey::Act(S::Allocate)),
            (KeyCode::Delete, PanelKey::Act(S::FreeSelected)),
            (KeyCode::Up, PanelKey::Act(S::Up)),
        ] {
            assert_eq!(k.stress_key_for(key(code)), Some(bound), "{code:?}");
        }
        let ctrl_d = KeyEvent::new(KeyCode::Char('d'), KeyModifiers::CONTROL);
        assert_eq!(k.stress_key_for(ctrl_d), None, "Ctrl is the dashboard's");
        assert_eq!(k.stress_key_for(key(KeyCode::Char('z'))), None);
        assert!(k.opens_stress(key(KeyCode::Char('a'))) && k.opens_stress(key(KeyCode::F(2))));
        assert!(!k.opens_stress(key(KeyCode::Char('S'))));
        // Relabelled in the table, the binding acts on its new key alone.
        let mut moved = Keymap::default();
        for b in &mut moved.stress {
            if b.key == PanelKey::Act(S::TypeSettings) {
                b.keys = "F9";
            }
        }
        let settings = Some(PanelKey::Act(S::TypeSettings));
        assert_eq!(moved.stress_key_for(key(KeyCode::F(9))), settings);
        assert_eq!(moved.stress_key_for(key(KeyCode::Char('S'))), None);
    }

    #[test]
    fn viewer_hints_say_enter_expands_a_site_while_the_sites_pane_takes_the_keys() {
        let k = Keymap::default();
        let enter = |sites| {
            k.viewer_hints(sites)
                .into_iter()
                .filter(|h| h.0 == "Enter")
                .map(|h| h.1)
                .collect::<Vec<_>>()
        };
        assert_eq!(enter(false), vec!["block"]);
        assert_eq!(enter(true), vec!["expand/fold site"]);
        assert_eq!(
            k.viewer_hints(true).get(2),
            Some(&("Enter", "expand/fold site")),
            "right after quit and help"
        );
        let trace_less = k.viewer_hints_offered(true, |a| !a.needs_trace());
        assert!(trace_less.contains(&("Enter", "expand/fold site")));
        assert!(!trace_less.contains(&("Enter", "block")));
    }

    /// Every key a test sweeps: the printable characters, F1…F12 and the
    /// named keys, each plain, with Shift and with Ctrl.
    fn every_key() -> Vec<KeyEvent> {
        let codes = (' '..='~')
            .map(KeyCode::Char)
            .chain((1..=12).map(KeyCode::F))
            .chain([
                KeyCode::Esc,
                KeyCode::Enter,
                KeyCode::Tab,
                KeyCode::BackTab,
                KeyCode::Backspace,
                KeyCode::Delete,
                KeyCode::Up,
                KeyCode::Down,
                KeyCode::Left,
                KeyCode::Right,
                KeyCode::PageUp,
                KeyCode::PageDown,
                KeyCode::Home,
                KeyCode::End,
            ]);
        codes
            .flat_map(|code| {
                [
                    KeyModifiers::NONE,
                    KeyModifiers::SHIFT,
                    KeyModifiers::CONTROL,
                ]
                .map(|m| KeyEvent::new(code, m))
            })
            .collect()
    }

    /// One mode's bindings as (label, what it does), and what a key does
    /// in that mode, as the code dispatches it.
    struct Mode<'k> {
        name: &'static str,
        bindings: Vec<(&'static str, String)>,
        dispatch: Box<dyn Fn(KeyEvent) -> Option<String> + 'k>,
    }

    fn said(a: &dyn std::fmt::Debug) -> String {
        format!("{a:?}")
    }

    fn modes(k: &Keymap) -> Vec<Mode<'_>> {
        let mut modes = vec![
            Mode {
                name: "dashboard",
                bindings: k
                    .bindings
                    .iter()
                    .map(|b| (b.keys, said(&b.action)))
                    .collect(),
                dispatch: Box::new(|e| k.action_for(e).map(|a| said(&a))),
            },
            Mode {
                name: "stress panel",
                bindings: (k.stress.iter())
                    .filter(|b| b.key != PanelKey::Open)
                    .map(|b| (b.keys, said(&b.key)))
                    .collect(),
                dispatch: Box::new(|e| k.stress_key_for(e).map(|a| said(&a))),
            },
            Mode {
                name: "viewer",
                bindings: (k.viewer.iter())
                    .filter(|b| !b.action.in_sites_pane())
                    .map(|b| (b.keys, said(&b.action)))
                    .collect(),
                dispatch: Box::new(|e| k.viewer_key_for(e).map(|a| said(&a))),
            },
            // The sites pane: its own bindings, then the dashboard's ↑/↓
            // and Esc, which move in it.
            Mode {
                name: "sites pane",
                bindings: (k.viewer.iter())
                    .filter(|b| b.action.in_sites_pane())
                    .map(|b| (b.keys, said(&b.action)))
                    .chain(
                        (k.bindings.iter())
                            .filter(|b| {
                                matches!(b.action, Action::Up | Action::Down | Action::Back)
                            })
                            .map(|b| (b.keys, said(&b.action))),
                    )
                    .collect(),
                dispatch: Box::new(|e| match k.sites_key_for(e) {
                    Some(a) => Some(said(&a)),
                    None => k
                        .action_for(e)
                        .filter(|a| matches!(a, Action::Up | Action::Down | Action::Back))
                        .map(|a| said(&a)),
                }),
            },
            Mode {
                name: "block detail",
                bindings: (DETAIL_BINDINGS.iter())
                    .map(|(keys, bound, _)| (*keys, said(bound)))
                    .collect(),
                dispatch: Box::new(|e| k.detail_key_for(e).map(|a| said(&a))),
            },
            Mode {
                name: "A/B comparison",
                bindings: (COMPARE_BINDINGS.iter())
                    .map(|(keys, bound, _)| (*keys, said(bound)))
                    .collect(),
                dispatch: Box::new(|e| k.compare_key_for(e).map(|a| said(&a))),
            },
        ];
        for (name, mode) in [
            ("stress field", TypingMode::StressField),
            ("scenario list", TypingMode::ScenarioList),
            ("process filter", TypingMode::ProcessFilter),
            ("signal prompt", TypingMode::SignalPrompt),
        ] {
            modes.push(Mode {
                name,
                bindings: (mode.bindings().iter())
                    .map(|&(keys, bound, _, _)| (keys, said(&bound)))
                    .collect(),
                dispatch: Box::new(move |e| mode.key_for(e).map(|a| said(&a))),
            });
        }
        modes
    }

    #[test]
    fn every_key_of_every_table_dispatches_to_its_binding_and_no_key_is_bound_twice() {
        let k = Keymap::default();
        for mode in modes(&k) {
            let mut claimed: Vec<(KeyEvent, &str)> = Vec::new();
            for (keys, what) in &mode.bindings {
                for name in keys.split(' ') {
                    let event = label_key(name)
                        .unwrap_or_else(|| panic!("{}: {name:?} names no key", mode.name));
                    assert_eq!(
                        (mode.dispatch)(event).as_deref(),
                        Some(what.as_str()),
                        "{}: {name} of {keys:?}",
                        mode.name
                    );
                    if let Some((_, other)) = claimed.iter().find(|(e, _)| *e == event) {
                        panic!("{}: {name} is bound by {other:?} and {keys:?}", mode.name);
                    }
                    claimed.push((event, keys));
                }
            }
        }
        // The help and the status line are read from these same tables.
        assert_eq!(k.detail_help_rows(None).len(), DETAIL_BINDINGS.len());
        assert_eq!(k.compare_help_rows(None).len(), COMPARE_BINDINGS.len());
        assert_eq!(k.viewer_help_rows().len(), k.viewer.len() + 8);
    }

    #[test]
    fn the_viewers_help_says_what_a_digit_does_there_without_the_dashboards_processes_pane() {
        let k = Keymap::default();
        let rows = k.viewer_help_rows();
        let digits = rows
            .iter()
            .find(|(keys, _)| *keys == GPU_DIGITS)
            .map(|(_, what)| what.as_ref());
        // The viewer has no Processes pane to follow the GPU.
        assert_eq!(digits, Some("select GPU"));
        assert!(
            rows.iter().all(|(_, what)| !what.contains("Processes")),
            "{rows:?}"
        );
        // The dashboard's help keeps its own words.
        assert!(
            Action::SelectGpu(0)
                .describe()
                .contains("Processes follows")
        );
    }

    /// What the viewer's keys did when its dispatch was written out by hand.
    fn viewer_written_out(key: KeyEvent) -> Option<ViewerAction> {
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
            KeyCode::Char('i') => V::NextMarker,
            KeyCode::Char('I') => V::PrevMarker,
            KeyCode::Char(']') => V::NextSegment,
            KeyCode::Char('[') => V::PrevSegment,
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
            KeyCode::Char('z') => V::ToggleZoom,
            _ => return None,
        })
    }

    /// What the block detail's keys did when written out by hand.
    fn detail_written_out(key: KeyEvent) -> Option<DetailKey> {
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return (key.code == KeyCode::Char('c')).then_some(DetailKey::Quit);
        }
        Some(match key.code {
            KeyCode::Char('q') => DetailKey::Quit,
            KeyCode::Esc | KeyCode::Enter => DetailKey::Close,
            KeyCode::Up | KeyCode::Char('k') => DetailKey::PrevBlock,
            KeyCode::Down | KeyCode::Char('j') => DetailKey::NextBlock,
            KeyCode::PageUp => DetailKey::ScrollUp,
            KeyCode::PageDown => DetailKey::ScrollDown,
            KeyCode::Home => DetailKey::Top,
            KeyCode::End => DetailKey::Bottom,
            _ => return None,
        })
    }

    #[test]
    fn the_viewer_and_block_detail_dispatch_from_their_tables_as_they_did_by_hand() {
        let k = Keymap::default();
        for event in every_key() {
            assert_eq!(
                k.viewer_key_for(event),
                viewer_written_out(event),
                "{event:?}"
            );
            assert_eq!(
                k.detail_key_for(event),
                detail_written_out(event),
                "{event:?}"
            );
            let enter =
                event.code == KeyCode::Enter && !event.modifiers.contains(KeyModifiers::CONTROL);
            assert_eq!(
                k.sites_key_for(event),
                enter.then_some(ViewerAction::ExpandSite),
                "{event:?}"
            );
        }
        // Relabelled in the table, a viewer binding acts on its new key
        // alone, and the texts that name it get the new one.
        let mut moved = Keymap::default();
        for b in &mut moved.viewer {
            if b.action == ViewerAction::ToggleSites {
                b.keys = "F7";
            }
        }
        assert_eq!(
            moved.viewer_key_for(key(KeyCode::F(7))),
            Some(ViewerAction::ToggleSites)
        );
        assert_eq!(moved.viewer_key_for(key(KeyCode::Char('w'))), None);
        assert_eq!(moved.viewer_key_name(ViewerAction::ToggleSites), Some("F7"));
        // The help's texts that name a key name it from the tables too.
        let sites = |k: &Keymap| k.describe_viewer(ViewerAction::ToggleSites).into_owned();
        assert_eq!(
            sites(&k),
            "sites pane: memory by site (Enter expands, ↑/↓ scroll)"
        );
        for b in &mut moved.bindings {
            match b.action {
                Action::Up => b.keys = "F2",
                Action::Quit => b.keys = "F3 Ctrl-C",
                _ => {}
            }
        }
        assert_eq!(
            sites(&moved),
            "sites pane: memory by site (Enter expands, F2/↓ scroll)"
        );
        assert_eq!(
            k.describe(Action::OpenSnapshot),
            "open the last snapshot (q returns)"
        );
        assert_eq!(
            moved.describe(Action::OpenSnapshot),
            "open the last snapshot (F3 returns)"
        );
        let top = Scrolled::at(0, 5);
        assert!(k.detail_hints(top, top).contains(&("Esc", "close")));
        assert!(!k.detail_hints(top, top).iter().any(|h| h.1 == "event"));
    }

    #[test]
    fn the_open_commands_key_guide_names_the_viewers_keys_from_its_table() {
        let k = Keymap::default();
        let guide = k.viewer_guide();
        let keys: Vec<&str> = guide.iter().map(|(keys, _)| keys.as_str()).collect();
        assert_eq!(
            keys,
            [
                "←/→/PgUp/PgDn",
                "o/n/e",
                "P/R/B",
                "w",
                "Enter",
                "m/M/c",
                "?"
            ]
        );
        // Relabelled in the table, a key is named as it acts.
        let mut moved = Keymap::default();
        for b in &mut moved.viewer {
            if b.action == ViewerAction::PeakAllocated {
                b.keys = "F8";
            }
        }
        assert_eq!(moved.viewer_guide()[2].0, "F8/R/B");
        // The keys a group's note names come from the table too.
        assert!(k.viewer_guide()[1].1.ends_with("(O/N/E: back)"));
        assert!(k.viewer_guide()[3].1.ends_with("(Enter: a site's stack)"));
        for b in &mut moved.viewer {
            if b.action == ViewerAction::PrevOom {
                b.keys = "F9";
            }
        }
        assert!(moved.viewer_guide()[1].1.ends_with("(F9/N/E: back)"));
    }

    #[test]
    fn a_key_bound_elsewhere_is_named_with_the_route_from_the_tables() {
        let k = Keymap::default();
        let capture = Offers {
            capture: true,
            ..Offers::default()
        };
        assert_eq!(
            k.bound_elsewhere(key(KeyCode::Char('w')), false, capture)
                .as_deref(),
            Some("w is the snapshot viewer's: c captures the allocator shown, o opens it")
        );
        // With the panel open its keys are its own; W is not reached.
        assert_eq!(
            k.bound_elsewhere(key(KeyCode::Char('W')), true, capture),
            None
        );
        assert_eq!(
            k.bound_elsewhere(key(KeyCode::Char('Q')), false, capture),
            None
        );
        // Relabelled in the table, the route names the keys as they act.
        let mut moved = Keymap::default();
        for b in &mut moved.bindings {
            if b.action == Action::CaptureSnapshot {
                b.keys = "F9";
            }
        }
        assert_eq!(
            moved
                .bound_elsewhere(key(KeyCode::Char('P')), false, capture)
                .as_deref(),
            Some("P is the snapshot viewer's: F9 captures the allocator shown, o opens it")
        );
        assert_eq!(moved.whose_memory_route(), Some(("F9", "o", "w")));
    }

    #[test]
    fn a_viewer_key_names_a_route_that_acts_when_nothing_can_be_captured() {
        let k = Keymap::default();
        let w = |offers| {
            k.bound_elsewhere(key(KeyCode::Char('w')), false, offers)
                .unwrap_or_default()
        };
        // Nothing to capture, nothing taken: the command line's route.
        assert_eq!(
            w(Offers::default()),
            "w is the snapshot viewer's: `vramtop open FILE` opens a snapshot"
        );
        // A snapshot taken earlier (its probe gone): its key.
        let open = Offers {
            open: true,
            open_oom: true,
            ..Offers::default()
        };
        assert_eq!(
            w(open),
            "w is the snapshot viewer's: o opens the last snapshot taken"
        );
        // Only an OOM's snapshot: its key.
        let oom = Offers {
            open_oom: true,
            ..Offers::default()
        };
        assert_eq!(
            w(oom),
            "w is the snapshot viewer's: O opens the OOM's snapshot"
        );
        for said in [w(Offers::default()), w(open), w(oom)] {
            assert!(!said.contains("captures"), "{said}");
            assert!(said.chars().count() <= 80, "{said}");
        }
    }

    #[test]
    fn a_viewer_key_with_the_stress_panel_open_says_to_close_the_panel_first() {
        let k = Keymap::default();
        let capture = Offers {
            capture: true,
            open: true,
            ..Offers::default()
        };
        let said = k
            .bound_elsewhere(key(KeyCode::Char('w')), true, capture)
            .unwrap_or_default();
        let close = k
            .stress_key_name(PanelKey::Close)
            .expect("the panel closes");
        assert_eq!(
            said,
            format!("w is the snapshot viewer's: {close} closes the stress panel first")
        );
        // Not the dashboard's route: with the panel open `o` is the panel's.
        assert!(!said.contains("o opens"), "{said}");
    }

    #[test]
    fn a_pressed_key_is_named_as_the_tables_name_it() {
        let k = Keymap::default();
        for (code, label) in [
            (KeyCode::Char('/'), "/"),
            (KeyCode::Char(' '), "Space"),
            (KeyCode::Char('='), "+"),
            (KeyCode::F(2), "F2"),
            (KeyCode::Char('a'), "a"),
            // Not "0…9": the digit pressed.
            (KeyCode::Char('7'), "7"),
            (KeyCode::Char('Q'), "Q"),
        ] {
            assert_eq!(k.pressed_label(key(code)), label, "{code:?}");
        }
    }

    #[test]
    fn every_comparison_binding_dispatches_to_its_own_key_and_nothing_else_does() {
        let k = Keymap::default();
        for (keys, bound, _) in COMPARE_BINDINGS {
            for name in keys.split(' ') {
                let event = label_key(name).expect("a key the table can name");
                assert_eq!(k.compare_key_for(event), Some(bound), "{name}");
            }
        }
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(k.compare_key_for(ctrl_c), Some(CompareKey::Quit));
        assert_eq!(
            k.compare_key_for(key(KeyCode::Char('c'))),
            Some(CompareKey::Close)
        );
        for other in [KeyCode::Right, KeyCode::Left, KeyCode::Char('?')] {
            assert_eq!(k.compare_key_for(key(other)), None, "{other:?}");
        }
        // The hints name the comparison's keys, none of the viewer's.
        let hints = k.compare_hints(Scrolled::at(0, 5));
        assert_eq!(hints.first(), Some(&("q", "quit")));
        assert!(hints.contains(&("Esc", "close")), "{hints:?}");
        assert!(hints.contains(&("PgDn", "page")), "{hints:?}");
        assert!(!hints.iter().any(|h| h.1 == "event"), "{hints:?}");
        assert_eq!(k.compare_help_rows(None).len(), COMPARE_BINDINGS.len());
    }

    #[test]
    fn help_rows_of_the_detail_and_comparison_give_a_reason_for_each_key_their_hints_leave_out() {
        let k = Keymap::default();
        let first = |keys: &str| keys.split(' ').next().unwrap_or(keys).to_string();
        for (scroll, limit) in [(0, 19), (7, 19), (19, 19), (0, 0)] {
            let scrolled = Scrolled::at(scroll, limit);
            let hinted: Vec<&str> = k.compare_hints(scrolled).iter().map(|h| h.0).collect();
            for (keys, _, why) in k.compare_help_rows(Some(scrolled)) {
                let key = COMPARE_BINDINGS.iter().find(|b| b.0 == keys).map(|b| b.1);
                let goes = key.is_some_and(|key| key.goes(scrolled));
                assert_eq!(why.is_none(), goes, "{keys} at {scroll}/{limit}");
                // Every hinted key acts (PgUp gives way to PgDn in the hints).
                if hinted.contains(&first(keys).as_str()) {
                    assert!(why.is_none(), "{keys} at {scroll}/{limit}");
                }
            }
            for blocks in [Scrolled::at(0, 0), Scrolled::at(0, 3), Scrolled::at(3, 3)] {
                for (keys, _, why) in k.detail_help_rows(Some((scrolled, blocks))) {
                    let key = DETAIL_BINDINGS.iter().find(|b| b.0 == keys).map(|b| b.1);
                    let goes = key.is_some_and(|key| key.goes(scrolled, blocks));
                    assert_eq!(why.is_none(), goes, "{keys} at {scroll}/{limit}");
                }
            }
        }
        let top = Scrolled::at(0, 19);
        let why = |keys: &str, rows: Vec<(&str, &str, Option<&'static str>)>| {
            rows.into_iter().find(|r| r.0 == keys).and_then(|r| r.2)
        };
        assert_eq!(
            why("Home", k.compare_help_rows(Some(top))),
            Some("at the top of the comparison")
        );
        assert_eq!(
            why("End", k.compare_help_rows(Some(Scrolled::at(0, 0)))),
            Some("the whole comparison is in view")
        );
        assert_eq!(
            why("↑ k", k.detail_help_rows(Some((top, Scrolled::at(0, 3))))),
            Some("at the first block of the map")
        );
        // Closed, neither says anything: its keys are the viewer's then.
        assert!(k.compare_help_rows(None).iter().all(|r| r.2.is_none()));
        assert!(k.detail_help_rows(None).iter().all(|r| r.2.is_none()));
    }

    #[test]
    fn scrolled_view_hints_offer_only_the_scroll_keys_that_move_it() {
        let k = Keymap::default();
        let hinted = |scroll, limit| -> Vec<&str> {
            let compare = k.compare_hints(Scrolled::at(scroll, limit));
            compare.iter().map(|h| h.0).collect()
        };
        assert_eq!(hinted(0, 19), ["q", "Esc", "↓", "PgDn"], "at the top");
        assert_eq!(hinted(7, 19), ["q", "Esc", "↑", "↓", "PgDn"], "between");
        assert_eq!(hinted(19, 19), ["q", "Esc", "↑", "PgUp"], "at the last row");
        assert_eq!(hinted(25, 19), ["q", "Esc", "↑", "PgUp"], "past it: at it");
        assert_eq!(hinted(0, 0), ["q", "Esc"], "it all fits");
        let between = Scrolled::at(1, 2);
        let detail = |scroll, limit| -> Vec<(&str, &str)> {
            k.detail_hints(Scrolled::at(scroll, limit), between)
        };
        assert!(detail(0, 4).contains(&("PgDn", "scroll")));
        assert!(detail(4, 4).contains(&("PgUp", "scroll")));
        assert!(!detail(4, 4).iter().any(|h| h.0 == "PgDn"));
        assert!(!detail(0, 0).iter().any(|h| h.1 == "scroll"), "it all fits");
    }

    #[test]
    fn block_detail_hints_offer_only_the_block_keys_with_a_block_that_way() {
        let k = Keymap::default();
        let fits = Scrolled::at(0, 0);
        let blocks = |selected, last| -> Vec<&str> {
            let hints = k.detail_hints(fits, Scrolled::at(selected, last));
            hints.iter().map(|h| h.1).collect()
        };
        assert_eq!(blocks(0, 19), ["quit", "close", "next block"], "first");
        assert_eq!(
            blocks(7, 19),
            ["quit", "close", "prev block", "next block"],
            "between"
        );
        assert_eq!(blocks(19, 19), ["quit", "close", "prev block"], "last");
        assert_eq!(blocks(0, 0), ["quit", "close"], "the only block");
    }

    #[test]
    fn toggle_hints_say_what_the_key_does_now() {
        let k = Keymap::default();
        let mut ui = UiState::default();
        let has = |ui: &UiState, hint: (&str, &str)| {
            k.hints(Pane::Processes, ui, Offers::default())
                .contains(&hint)
        };
        assert!(
            has(&ui, ("p", "pause")) && has(&ui, ("t", "flat")),
            "tree view at start"
        );
        ui.paused = true;
        ui.process_tree = false;
        assert!(has(&ui, ("p", "resume")) && has(&ui, ("t", "tree")));
        assert!(!has(&ui, ("p", "pause")) && !has(&ui, ("t", "flat")));
    }

    #[test]
    fn snapshot_keys_are_hinted_while_they_can_act() {
        let k = Keymap::default();
        let ui = UiState::default();
        let hinted = |offers: Offers| -> Vec<&str> {
            k.hints(Pane::Gpus, &ui, offers)
                .iter()
                .map(|h| h.0)
                .collect()
        };
        let none = hinted(Offers::default());
        assert!(
            !none.iter().any(|key| ["c", "o", "O"].contains(key)),
            "{none:?}"
        );
        let all = hinted(Offers {
            capture: true,
            open: true,
            open_oom: true,
            ..Offers::default()
        });
        for key in ["c", "o", "O"] {
            assert!(all.contains(&key), "{key} in {all:?}");
        }
        // Ahead of the pane's own keys: a short status line keeps them.
        let at = |key: &str| all.iter().position(|k| *k == key);
        assert!(at("c") < at("p"), "{all:?}");
    }

    #[test]
    fn a_snapshot_key_is_hinted_exactly_when_the_help_gives_no_reason_against_it() {
        let k = Keymap::default();
        let ui = UiState::default();
        for (capture, open, open_oom) in [(false, false, false), (true, true, true)] {
            let offers = Offers {
                capture,
                open,
                open_oom,
                ..Offers::default()
            };
            let hinted = k.hints(Pane::Gpus, &ui, offers);
            for b in &k.bindings {
                let shown = b
                    .hint
                    .is_some_and(|h| hinted.contains(&(first_key(b.keys), h)));
                let why = offers.unavailable(b.action);
                assert!(
                    b.hint.is_none() || b.pane.is_some() || shown == why.is_none(),
                    "{:?}: hinted {shown}, reason {why:?}",
                    b.action
                );
            }
        }
        assert_eq!(
            Offers::default().unavailable(Action::OpenOomSnapshot),
            Some("no OOM snapshot")
        );
        // The stress panel's scenario keys: hinted only with a scenario.
        for loaded in [false, true] {
            let hinted = k.stress_hints(with_tensors(loaded), StressView::Panel);
            let step = PanelKey::Act(StressAction::ScenarioStep);
            assert_eq!(hinted.contains(&(".", "step")), loaded);
            assert_eq!(step.unavailable(with_tensors(loaded)).is_none(), loaded);
        }
    }

    #[test]
    fn v_and_the_gpu_digits_are_hinted_only_where_they_can_act() {
        let k = Keymap::default();
        let ui = UiState::default();
        let hinted = |offers: Offers| -> Vec<&str> {
            k.hints(Pane::Gpus, &ui, offers)
                .iter()
                .map(|h| h.0)
                .collect()
        };
        // One GPU: `1` only says "no GPU 1", `0` selects the GPU selected.
        let one = Offers::default();
        assert!(!hinted(one).contains(&GPU_DIGITS), "{:?}", hinted(one));
        assert_eq!(one.unavailable(Action::SelectGpu(1)), Some("one GPU here"));
        assert_eq!(
            one.unavailable(Action::NextAllocator),
            Some("no 2nd process with an allocator")
        );
        let several = Offers {
            several_gpus: true,
            next_allocator: true,
            ..Offers::default()
        };
        assert!(hinted(several).contains(&GPU_DIGITS));
        assert_eq!(several.unavailable(Action::SelectGpu(1)), None);
        assert_eq!(several.unavailable(Action::NextAllocator), None);
    }

    #[test]
    fn the_size_and_count_keys_are_unavailable_only_at_their_end() {
        let at = |first, last| AtEnd { first, last };
        let panel = |size, count| PanelOffers {
            size,
            count,
            ..PanelOffers::default()
        };
        let key = |a| PanelKey::Act(a);
        let top = panel(at(false, true), at(false, true));
        assert!(key(StressAction::SizeUp).unavailable(top).is_some());
        assert!(key(StressAction::CountUp).unavailable(top).is_some());
        assert_eq!(key(StressAction::SizeDown).unavailable(top), None);
        assert_eq!(key(StressAction::CountDown).unavailable(top), None);
        let bottom = panel(at(true, false), at(true, false));
        assert!(key(StressAction::SizeDown).unavailable(bottom).is_some());
        assert!(key(StressAction::CountDown).unavailable(bottom).is_some());
        assert_eq!(key(StressAction::SizeUp).unavailable(bottom), None);
        let hints = Keymap::default().stress_hints(top, StressView::Panel);
        assert!(!hints.contains(&("+", "size")) && !hints.contains(&("]", "count")));
    }

    #[test]
    fn hints_follow_the_focused_pane() {
        let k = Keymap::default();
        let ui = UiState::default();
        let hints = |pane| -> Vec<&str> {
            k.hints(pane, &ui, Offers::default())
                .iter()
                .map(|h| h.1)
                .collect()
        };
        let timeline = hints(Pane::Timeline);
        assert!(timeline.contains(&"zoom in") && timeline.contains(&"zoom out"));
        assert!(!timeline.contains(&"filter"));
        let procs = hints(Pane::Processes);
        assert!(procs.contains(&"filter") && !procs.contains(&"zoom in"));
        let segments = hints(Pane::Segments);
        assert!(segments.contains(&"prev") && segments.contains(&"next"));
    }

    #[test]
    fn the_focused_panes_own_keys_are_hinted_right_after_quit_and_help() {
        let k = Keymap::default();
        let ui = UiState::default();
        for pane in Pane::ALL {
            let hints: Vec<&str> = k
                .hints(pane, &ui, Offers::default())
                .iter()
                .map(|h| h.0)
                .collect();
            // By rank, the table's order within one.
            let mut own: Vec<&Binding> = k
                .bindings
                .iter()
                .filter(|b| b.pane == Some(pane) && b.hint.is_some())
                .collect();
            own.sort_by_key(|b| b.rank);
            let own: Vec<&str> = own
                .iter()
                .map(|b| b.keys.split(' ').next().unwrap_or(b.keys))
                .collect();
            assert_eq!(&hints[..2], ["q", "?"], "{pane:?}");
            assert_eq!(hints[2..2 + own.len()], own[..], "{pane:?}");
        }
        let procs: Vec<&str> = k
            .hints(Pane::Processes, &ui, Offers::default())
            .iter()
            .map(|h| h.1)
            .collect();
        assert_eq!(
            procs[2..8],
            ["kill", "detail", "filter", "flat", "sort", "tag"],
            "t: flat in the tree"
        );
    }

    #[test]
    fn with_processes_tagged_processes_hints_untag_kill_and_tag_first() {
        let k = Keymap::default();
        let mut ui = UiState::default();
        ui.process_tags.push(crate::app::process_list::ProcessTag {
            pid: 10,
            command: Some("python train.py".to_string()),
        });
        let hints = k.hints(Pane::Processes, &ui, Offers::default());
        assert_eq!(
            hints[2..5],
            [("Esc", "untag"), ("K", "kill"), ("Space", "tag")]
        );
        // Elsewhere Esc is no untag (it untags in Processes only).
        let gpus = k.hints(Pane::Gpus, &ui, Offers::default());
        assert!(!gpus.iter().any(|h| h.1 == "untag"), "{gpus:?}");
        // Without tags Esc is not hinted.
        let none = k.hints(Pane::Processes, &UiState::default(), Offers::default());
        assert!(!none.iter().any(|h| h.0 == "Esc"), "{none:?}");
    }

    #[test]
    fn space_is_named_space_and_its_help_names_the_keys_of_the_table() {
        let k = Keymap::default();
        assert_eq!(
            k.action_for(key(KeyCode::Char(' '))),
            Some(Action::ToggleTag)
        );
        assert_eq!(k.key_name(Action::ToggleTag), Some("Space"));
        assert_eq!(
            k.describe(Action::ToggleTag),
            "tag/untag for K (Esc untags all)"
        );
        let mut moved = Keymap::default();
        for b in &mut moved.bindings {
            if b.action == Action::SignalProcess {
                b.keys = "x";
            }
        }
        assert_eq!(
            moved.describe(Action::ToggleTag),
            "tag/untag for x (Esc untags all)"
        );
        // In the help's 80-column two-column layout a description keeps
        // to 34 columns.
        assert!(k.describe(Action::ToggleTag).chars().count() <= 34);
        assert!(Action::SignalProcess.describe().chars().count() <= 34);
    }
}
