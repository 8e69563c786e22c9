//! The help overlay: the keys, generated from the keymap (so it cannot
//! drift from what the keys do), and what the dashboard's words mean.

use std::borrow::Cow;
use std::cell::Cell;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, left};
use super::theme::Theme;
use super::timeline::LegendName;
use super::viewer::LEGEND_NAMES;
use crate::app::keymap::{Action, Keymap, Offers, PanelKey, Scrolled, TypingKey, TypingMode};
use crate::app::state::StressView;
use crate::app::stress::{COMPARE_NAMES, FigureName, StressAction};
use crate::app::viewer::ViewerAction;

/// The definitions shown next to the keys: (term, meaning). Short on
/// purpose: at 80×24 they share the screen with every key. A term names
/// in parentheses the short form a narrow pane shows ("ext free").
pub const DEFINITIONS: [(&str, &str); 21] = [
    ("allocated", "live tensors (memory_allocated())."),
    (
        "reserved",
        "the allocator's segments (memory_reserved()) = allocated + reserved but unallocated.",
    ),
    // PyTorch's OOM message's words; "unalloc" alone in the
    // breakdown's one-row legend (80×24 with the stress panel open), as
    // "int free" stands for internal free.
    (
        RESERVED_BUT_UNALLOCATED,
        "reserved − allocated: freed blocks kept for reuse.",
    ),
    (
        "context & other",
        "driver used − reserved: CUDA contexts, other processes.",
    ),
    // The driver's figure, as nvidia-smi, `--once` and the metrics say
    // it; one row each at 120×40, where every definition fits.
    ("free", "unused, as the driver (nvidia-smi) says."),
    (DRIVER_HELD, "total − used − free."),
    (
        "internal free (int free)",
        "rounding inside allocated blocks.",
    ),
    (
        "external free (ext free)",
        "free blocks cached in segments.",
    ),
    (
        "wholly free segments (free segs)",
        "no live block: empty_cache() returns them, as PyTorch does before an OOM.",
    ),
    (
        "non-releasable (non-rel)",
        "free memory empty_cache() keeps: free blocks of segments with a live block (of an expandable one, only what falls short of a whole page).",
    ),
    (
        "fragmentation (frag)",
        "= 1 − largest free block / external free.",
    ),
    (
        PENDING_FREE,
        "a block the program freed while another stream still used it (record_stream): not reusable until that stream's work is done.",
    ),
    ("segments", "S/L small/large, E expandable, P private pool."),
    (
        "selected block",
        "drawn reversed as # allocated, = free, ~ pending.",
    ),
    ("dropped", "samples missed while busy (timeline gaps)."),
    (
        "alloc/res",
        "a process's allocated / reserved, where its allocator is seen (probe, simulation).",
    ),
    (
        INACTIVE_SPLIT,
        "free blocks in segments that hold others (memory_stats()).",
    ),
    ("pt", "percentage points: the change of a percentage."),
    (
        OWN_PEAK,
        "a probed process's max_memory_allocated() / max_memory_reserved().",
    ),
    (
        "[probe]",
        "a process whose allocator vramtop reads: python -m vramtop_probe train.py … (docs/attach.md).",
    ),
    (
        OWN_CONTEXT,
        "a child GPU process (a DataLoader worker that touched CUDA): a context of its own.",
    ),
];

/// The Processes pane's mark on a child holding a CUDA context of its own.
const OWN_CONTEXT: &str = crate::app::state::OWN_CONTEXT_MARK;

/// The breakdown's legend item for PyTorch's own peaks ("peak" where the
/// legend is compact).
const OWN_PEAK: &str = "PyTorch peak (peak)";

/// The term the segment map's legend calls "pending": shown after the
/// theme's glyph for it (▚, or ~ in ASCII), as the legend draws it.
const PENDING_FREE: &str = "pending free";

/// The breakdown's part for what NVML counts in neither used nor free.
const DRIVER_HELD: &str = "kept by the driver (driver-held)";

/// Terms the dashboard and the viewer define each their own way.
const RESERVED_BUT_UNALLOCATED: &str = "reserved but unallocated (unalloc)";
const INACTIVE_SPLIT: &str = "inactive split (inact split)";

/// Definitions that describe the live dashboard (driver-used memory,
/// contexts), not a snapshot: the viewer's help leaves them out.
pub const DASHBOARD_ONLY: [&str; 10] = [
    OWN_PEAK,
    "[probe]",
    OWN_CONTEXT,
    "context & other",
    "free",
    DRIVER_HELD,
    "dropped",
    "alloc/res",
    INACTIVE_SPLIT,
    "pt",
];

/// Definitions the snapshot viewer words its own way: its breakdown bar
/// splits reserved but unallocated into pending free and external free
/// (the dashboard's bar, of the driver's figures, has no such parts), and
/// the words name the bar's parts as it draws them.
pub const VIEWER_MEANINGS: [(&str, &str); 2] = [
    (
        "reserved",
        "the allocator's segments (memory_reserved()) = allocated + pending free + external free.",
    ),
    (
        RESERVED_BUT_UNALLOCATED,
        "reserved − allocated = pending free + external free.",
    ),
];

/// Words only the snapshot viewer shows, defined after the others there.
pub const VIEWER_DEFINITIONS: [(&str, &str); 5] = [
    (
        "event N/M (#i)",
        "the state after the Nth of M events (N on the timeline's axis); #i is that event's index in the file's trace, as replay names it.",
    ),
    (
        "res, alloc, pk X @N",
        "the GPUs row in a narrow terminal: reserved and allocated at the cursor, each with its peak X over the trace, first reached at event N (R and P jump there).",
    ),
    (
        "large, small pool; memory pool",
        "size classes (blocks over, up to 1 MiB) in every memory pool: the default (0,0), or a CUDA graph's or MemPool's private one (P), whose free bytes serve it alone.",
    ),
    (
        "inconsistent",
        "events the final state cannot explain (a hand-made or damaged file): figures are approximate; replay FILE says why.",
    ),
    (
        "trace leads elsewhere",
        "at the last event: the trace does not end in the state the file records (a hand-made or damaged file); End shows the file's own state, one step back the trace's.",
    ),
];

/// The definition the help adds with the stress panel open: the compare
/// table's first header cell, "B: 3 ago" ([`super::stress::compare_head_ago`]),
/// which said nothing of what B is or why it is counted. The marking
/// key is named from `keymap`.
fn compare_head_defined(keymap: &Keymap) -> (String, String) {
    let marks = keymap
        .stress_key_name(PanelKey::Act(StressAction::MarkCompare))
        .map_or_else(String::new, |key| format!("when {key} marked them "));
    (
        super::stress::compare_head_ago("N"),
        format!(
            "the panel's compare table: A and B are the figures {marks}(Δ = B − A); \
             B was marked N of the panel's actions ago, so it is not the figures now."
        ),
    )
}

/// The definition the help adds with the stress panel open: the cap its
/// title names ("cap 40.0 GiB"): the panel refuses a request whose bytes
/// would pass it before sending it, and its worker stops a batch at the
/// tensor whose blocks (a new segment can be larger) would.
fn stress_cap_defined() -> (String, String) {
    (
        "cap".to_string(),
        format!(
            "the most the stress panel may hold (--stress-cap; on a real GPU {}% of the \
             memory free when the panel started, none on the simulated one): a request that \
             would pass it is refused before it is sent; one whose blocks pass it stops \
             there, the tensors before it kept.",
            crate::app::stress::REAL_GPU_CAP_PERCENT
        ),
    )
}

/// The definition of a timeline legend's short words, from the names the
/// legend takes them from: the short words as the term ("res, alloc,
/// released") and what each stands for ("in a narrow timeline legend: res
/// for reserved, …"); `None` when no name has a short word of its own.
fn legend_short_words(names: &[LegendName]) -> Option<(String, String)> {
    let mut shortened: Vec<LegendName> = Vec::new();
    for &n in names {
        // One meaning a word: the first name it shortens.
        if n.short != n.full && !shortened.iter().any(|s| s.short == n.short) {
            shortened.push(n);
        }
    }
    short_names_defined(
        shortened.iter().map(|n| (n.short, n.full)),
        "in a narrow timeline legend",
    )
}

/// The definition of the short row names of the stress panel's narrow
/// compare table, from the names it takes them from: the short names as
/// the term and what each stands for; `None` when no row is shortened.
fn compare_short_names(names: &[FigureName]) -> Option<(String, String)> {
    short_names_defined(
        names
            .iter()
            .filter(|n| n.short != n.full)
            .map(|n| (n.short, n.full)),
        "in the stress panel's compare table below 90 columns",
    )
}

/// A help entry for `(short, full)` names shown `where`: the short names
/// as the term ("res, alloc") and what each stands for ("`where`: res for
/// reserved, …"); `None` for no names.
fn short_names_defined<'a>(
    names: impl Iterator<Item = (&'a str, &'a str)>,
    place: &str,
) -> Option<(String, String)> {
    let names: Vec<(&str, &str)> = names.collect();
    if names.is_empty() {
        return None;
    }
    let words: Vec<&str> = names.iter().map(|&(short, _)| short).collect();
    let meanings: Vec<String> = names
        .iter()
        .map(|(short, full)| format!("{short} for {full}"))
        .collect();
    Some((
        words.join(", "),
        format!("{place}: {}.", meanings.join(", ")),
    ))
}

/// Width from which keys and definitions sit side by side.
const TWO_COLUMNS_WIDTH: u16 = 70;
/// The widest the popup gets (columns).
const MAX_WIDTH: u16 = 110;

/// A row of the help's keys: (keys, what they do, why they do nothing
/// now; `None`: they act).
type KeyRow = (&'static str, Cow<'static, str>, Option<&'static str>);

/// A heading of the help's keys and its rows.
type KeySection = (String, Vec<KeyRow>);

/// Why a viewer key does nothing in the file shown (`None`: it acts).
pub type ViewerUnavailable<'a> = &'a dyn Fn(ViewerAction) -> Option<&'static str>;

/// The help overlay of one frame, drawn over the panes.
pub struct HelpOverlay<'a> {
    keymap: &'a Keymap,
    theme: &'a Theme,
    /// The stress panel is open: its keys are listed first.
    stress: bool,
    /// The stress panel's loaded scenario (name, explanation): the panel
    /// has rows for three lines of it, the help shows it whole, first.
    scenario: Option<(&'a str, &'a str)>,
    /// How the panel is drawn: behind the segment map its tensor list's
    /// keys do not act, and their rows say so.
    stress_view: StressView,
    /// The snapshot viewer: its keys instead of the dashboard's.
    viewer: bool,
    /// The viewer was opened from the dashboard: quitting goes back there.
    quit_returns: bool,
    /// Rows scrolled past (↓/j, PgDn); clamped so the last row stays in view.
    scroll: usize,
    /// Where the drawing reports the largest useful scroll, for the keys.
    scroll_limit: Option<&'a Cell<usize>>,
    /// Where the drawing reports the rows in view, for the page keys.
    page_rows: Option<&'a Cell<usize>>,
    /// What the dashboard's snapshot keys can act on now: the others'
    /// rows are dimmed with the reason (`None`: no row is).
    offers: Option<Offers>,
    /// Why a viewer key does nothing in the file shown, as its hints
    /// leave it out: its row is dimmed with the reason.
    viewer_unavailable: Option<ViewerUnavailable<'a>>,
    /// The open block detail's stack scroll and its block's place in the
    /// map: its keys that do nothing there are dimmed with the reason.
    detail_open: Option<(Scrolled, Scrolled)>,
    /// The open A/B comparison's scroll, the same for its keys.
    compare_open: Option<Scrolled>,
}

impl<'a> HelpOverlay<'a> {
    pub fn new(keymap: &'a Keymap, theme: &'a Theme) -> Self {
        HelpOverlay {
            keymap,
            theme,
            stress: false,
            scenario: None,
            stress_view: StressView::Panel,
            viewer: false,
            quit_returns: false,
            scroll: 0,
            scroll_limit: None,
            page_rows: None,
            offers: None,
            viewer_unavailable: None,
            detail_open: None,
            compare_open: None,
        }
    }

    /// Dims the rows of the block detail's keys that do nothing in the
    /// open detail (`open`: its stack's scroll and its block's place in
    /// the map; `None`: closed, nothing dimmed), each with the reason
    /// `DetailKey::unavailable` gives, which its hints read too.
    pub fn with_detail_open(mut self, open: Option<(Scrolled, Scrolled)>) -> Self {
        self.detail_open = open;
        self
    }

    /// The same for the open A/B comparison's keys (`CompareKey::unavailable`).
    pub fn with_compare_open(mut self, open: Option<Scrolled>) -> Self {
        self.compare_open = open;
        self
    }

    /// Dims the rows of the dashboard keys that `offers` says can do
    /// nothing now (and of the stress panel's keys with nothing to act
    /// on: a scenario key without a scenario loaded, a tensor key without
    /// tensors), each with its reason.
    pub fn with_offers(mut self, offers: Offers) -> Self {
        self.offers = Some(offers);
        self
    }

    /// Dims the rows of the viewer keys that do nothing in the file shown
    /// (no trace, no OOM, at the last event…), each with the reason
    /// `unavailable` gives (`ViewerState::unavailable`, which the hints
    /// read too).
    pub fn with_viewer_unavailable(mut self, unavailable: ViewerUnavailable<'a>) -> Self {
        self.viewer_unavailable = Some(unavailable);
        self
    }

    /// Starts `rows` rows down (the help scrolls like less: ↓/j, PgDn).
    pub fn with_scroll(mut self, rows: usize) -> Self {
        self.scroll = rows;
        self
    }

    /// Reports into `limit` how far the help can scroll at the size it is
    /// drawn, so the keys clamp the scroll before the next frame.
    pub fn with_scroll_limit(mut self, limit: &'a Cell<usize>) -> Self {
        self.scroll_limit = Some(limit);
        self
    }

    /// Reports into `rows` how many rows of help are in view at the size
    /// it is drawn, so PgUp/PgDn move by that page.
    pub fn with_page_rows(mut self, rows: &'a Cell<usize>) -> Self {
        self.page_rows = Some(rows);
        self
    }

    /// Lists the snapshot viewer's keys (and the dashboard keys that work
    /// there) instead of the dashboard's.
    pub fn with_viewer(mut self, viewer: bool) -> Self {
        self.viewer = viewer;
        self
    }

    /// Says that quitting goes back to the dashboard (a viewer opened
    /// from it).
    pub fn with_quit_returns(mut self, returns: bool) -> Self {
        self.quit_returns = returns;
        self
    }

    /// Lists the stress panel's keys first (while the panel is open).
    pub fn with_stress(mut self, open: bool) -> Self {
        self.stress = open;
        self
    }

    /// Shows the loaded scenario's `name` and whole `explanation` first.
    pub fn with_scenario(mut self, scenario: Option<(&'a str, &'a str)>) -> Self {
        self.scenario = scenario;
        self
    }

    /// The loaded scenario's name and whole explanation wrapped to
    /// `width`, then a blank line; none without a scenario.
    fn scenario_lines(&self, width: u16) -> Vec<Line<'static>> {
        let Some((name, explanation)) = self.scenario else {
            return Vec::new();
        };
        let theme = self.theme;
        let mut lines = vec![Line::styled(format!("Scenario {name}"), theme.header)];
        lines.extend(
            chrome::wrap(explanation, width)
                .into_iter()
                .map(|l| Line::styled(l, theme.text)),
        );
        lines.push(Line::raw(""));
        lines
    }

    /// Describes the stress panel's keys as they act in `view`.
    pub fn with_stress_view(mut self, view: StressView) -> Self {
        self.stress_view = view;
        self
    }

    /// A heading followed by the viewer's key for `opens` as its table
    /// binds it ("In the block detail (Enter)").
    fn opened_by(&self, heading: &str, opens: ViewerAction) -> String {
        match self.keymap.viewer_key_name(opens) {
            Some(key) => format!("{heading} ({key})"),
            None => heading.to_string(),
        }
    }

    /// A heading followed by the stress panel's keys for `opens` as its
    /// table binds them ("In the scenario list (n)").
    fn stress_opened_by(&self, heading: &str, opens: &[StressAction]) -> String {
        let keys: Vec<&str> = opens
            .iter()
            .filter_map(|&a| self.keymap.stress_key_name(PanelKey::Act(a)))
            .collect();
        if keys.is_empty() {
            heading.to_string()
        } else {
            format!("{heading} ({})", keys.join(", "))
        }
    }

    /// What the panel's keys do with a loaded scenario, as its table binds
    /// them: "`.` steps it, `g` runs it".
    fn scenario_keys(&self) -> Option<String> {
        let key = |a| self.keymap.stress_key_name(PanelKey::Act(a));
        let step = key(StressAction::ScenarioStep)?;
        let run = key(StressAction::ScenarioRun)?;
        Some(format!("{step} steps it, {run} runs it"))
    }

    /// Key sections in the order shown, each a heading and its rows
    /// (keys, what they do): the viewer's own, its block detail's and its
    /// comparison's; or the dashboard's, everywhere first, then one
    /// heading per pane, after the stress panel's while it is open.
    fn key_sections(&self) -> Vec<KeySection> {
        if self.viewer {
            // Opened from the dashboard, quitting goes back there, in the
            // block detail too; a key with Ctrl (Ctrl-C) quits vramtop
            // still, as everywhere: a row of its own.
            let quit_words = |rows: Vec<KeyRow>| {
                rows.into_iter()
                    .flat_map(|(keys, what, why)| {
                        if self.quit_returns && what == Action::Quit.describe() {
                            keys.split(' ')
                                .map(|key| {
                                    let what = if self.keymap.label_quits_vramtop(key) {
                                        "quit vramtop"
                                    } else {
                                        "back to the dashboard"
                                    };
                                    (key, Cow::Borrowed(what), why)
                                })
                                .collect()
                        } else {
                            vec![(keys, what, why)]
                        }
                    })
                    .collect()
            };
            // A key of the open detail or comparison that does nothing
            // where it stands says why, as its hints leave it out.
            let borrowed = |rows: Vec<(&'static str, &'static str, Option<&'static str>)>| {
                rows.into_iter()
                    .map(|(keys, what, why)| (keys, Cow::Borrowed(what), why))
                    .collect()
            };
            // The viewer's own keys that do nothing in the file shown, as
            // its hints leave them out.
            let viewer_rows = (self.keymap.viewer_help_rows_bound().into_iter())
                .map(|(keys, what, action)| {
                    let why = action.zip(self.viewer_unavailable).and_then(|(a, f)| f(a));
                    (keys, what, why)
                })
                .collect();
            return vec![
                (
                    "In the snapshot viewer".to_string(),
                    quit_words(viewer_rows),
                ),
                (
                    self.opened_by("In the block detail", ViewerAction::BlockDetail),
                    quit_words(borrowed(self.keymap.detail_help_rows(self.detail_open))),
                ),
                (
                    self.opened_by("In the A/B comparison", ViewerAction::Compare),
                    quit_words(borrowed(self.keymap.compare_help_rows(self.compare_open))),
                ),
            ];
        }
        // With the panel open its keys come first: the dashboard's rows
        // for keys it takes would name what those keys no longer do.
        let rows = if self.stress {
            self.keymap.help_rows_beside_stress_bound()
        } else {
            self.keymap.help_rows_bound()
        };
        let mut sections = Vec::new();
        if self.stress {
            // The scenario keys do nothing without a scenario loaded, the
            // tensor keys without tensors, as the hints leave them out then.
            let panel_rows = (self
                .keymap
                .stress_help_rows_bound(self.stress_view)
                .into_iter())
            .map(|(keys, what, key)| {
                let why = self.offers.and_then(|o| key.unavailable(o.panel));
                (keys, what, why)
            })
            .collect();
            sections.push(("In the stress panel".to_string(), panel_rows));
            // The fields and the list take the keys while open: their own
            // keys are fixed (Enter, Esc…), listed from the table that
            // dispatches them, under the panel keys that open them.
            let typing = |mode: TypingMode| {
                mode.help_rows()
                    .into_iter()
                    .map(|(keys, what)| (keys, Cow::Borrowed(what), None))
                    .collect()
            };
            sections.push((
                self.stress_opened_by(
                    "In the size and settings fields",
                    &[StressAction::TypeSize, StressAction::TypeSettings],
                ),
                typing(TypingMode::StressField),
            ));
            // Loading is where the list ends: its Enter row says which
            // panel keys then drive the scenario (`n` only lists them, and
            // read as the step key).
            let then = self.scenario_keys();
            let list: Vec<KeyRow> = TypingMode::ScenarioList
                .bindings()
                .iter()
                .map(|&(keys, key, _, what)| match (&then, key) {
                    (Some(then), TypingKey::Done) => {
                        (keys, Cow::Owned(format!("{what}; then {then}")), None)
                    }
                    _ => (keys, Cow::Borrowed(what), None),
                })
                .collect();
            sections.push((
                self.stress_opened_by("In the scenario list", &[StressAction::OpenScenarios]),
                list,
            ));
        }
        let mut groups: Vec<&str> = Vec::new();
        for r in &rows {
            if !groups.contains(&r.2) {
                groups.push(r.2);
            }
        }
        for group in groups {
            let heading = if group == "everywhere" {
                "Keys".to_string()
            } else {
                format!("In {group}")
            };
            let group_rows = rows
                .iter()
                .filter(|r| r.2 == group)
                .map(|(keys, what, _, action)| {
                    let why = self.offers.zip(*action).and_then(|(o, a)| o.unavailable(a));
                    (*keys, what.clone(), why)
                })
                .collect();
            sections.push((heading, group_rows));
        }
        // The prompt takes the keys while open: its own keys, from the
        // table that dispatches them, after the key that opens it.
        let prompt = match self.keymap.key_name(Action::SignalProcess) {
            Some(k) => format!("In the signal prompt ({k})"),
            None => "In the signal prompt".to_string(),
        };
        let prompt_rows = TypingMode::SignalPrompt
            .help_rows()
            .into_iter()
            .map(|(keys, what)| (keys, Cow::Borrowed(what), None))
            .collect();
        sections.push((prompt, prompt_rows));
        sections
    }

    /// Key lines grouped by where they apply, a blank line between the
    /// viewer's sections; a description wider than `width` columns wraps
    /// under itself, past the keys' column. A key that does nothing now
    /// is dimmed, its reason in brackets after what it does.
    fn key_lines(&self, width: u16) -> Vec<Line<'static>> {
        let theme = self.theme;
        let sections = self.key_sections();
        let row = |key_w: usize, (keys, what, why): KeyRow| -> Vec<Line<'static>> {
            let room = usize::from(width).saturating_sub(key_w);
            let wrap = |text: &str| {
                if text.chars().count() <= room {
                    vec![text.to_string()]
                } else {
                    chrome::wrap(text, u16::try_from(room.max(10)).unwrap_or(u16::MAX))
                }
            };
            let (parts, key_style, text_style) = match why {
                // The reason after the text, or whole on the row below.
                Some(why) => {
                    let reason = format!("[{why}]");
                    let what = theme.key(&what);
                    let joined = format!("{what} {reason}");
                    let parts = if joined.chars().count() <= room {
                        vec![joined]
                    } else {
                        let mut parts = wrap(&what);
                        parts.extend(wrap(&reason));
                        parts
                    };
                    (parts, theme.dim, theme.dim)
                }
                None => (wrap(&theme.key(&what)), theme.key, theme.text),
            };
            parts
                .into_iter()
                .enumerate()
                .map(|(i, part)| {
                    let k = if i == 0 { theme.key(keys) } else { "".into() };
                    Line::from(vec![
                        Span::styled(left(&k, key_w), key_style),
                        Span::styled(part, text_style),
                    ])
                })
                .collect()
        };
        let mut lines = Vec::new();
        for (i, (heading, rows)) in sections.into_iter().enumerate() {
            // The viewer's sections are separate screens' keys: a blank
            // line apart. The dashboard's follow one another.
            if self.viewer && i > 0 {
                lines.push(Line::raw(""));
            }
            lines.push(Line::styled(heading, theme.header));
            let key_w = keys_column(&rows, theme);
            for r in rows {
                lines.extend(row(key_w, r));
            }
        }
        lines
    }

    /// The width the key lines need unwrapped, the reasons of the keys
    /// that do nothing now left out: those wrap under their row rather
    /// than narrow the definitions beside the keys.
    fn key_lines_width(&self) -> usize {
        self.key_sections()
            .iter()
            .flat_map(|(heading, rows)| {
                let key_w = keys_column(rows, self.theme);
                let widths = rows
                    .iter()
                    .map(move |r| key_w.saturating_add(self.theme.key(&r.1).chars().count()));
                std::iter::once(heading.chars().count()).chain(widths)
            })
            .max()
            .unwrap_or(0)
    }

    /// Definition lines wrapped to `width`, the term in the header style.
    fn definition_lines(&self, width: u16) -> Vec<Line<'static>> {
        let theme = self.theme;
        let mut lines = vec![Line::styled(
            if self.viewer {
                "Words in a snapshot"
            } else {
                "What the words mean"
            },
            theme.header,
        )];
        // A snapshot has no driver figures: the words about the driver's
        // used memory belong to the dashboard's help only.
        let own_words: Vec<(String, String)> = if self.viewer {
            VIEWER_DEFINITIONS
                .iter()
                .map(|&(t, m)| (t.to_string(), m.to_string()))
                .chain(legend_short_words(&LEGEND_NAMES))
                .collect()
        } else {
            // The stress panel is the dashboard's.
            compare_short_names(&COMPARE_NAMES)
                .into_iter()
                .chain(self.stress.then(|| compare_head_defined(self.keymap)))
                .chain(self.stress.then(stress_cap_defined))
                .collect()
        };
        let viewer = self.viewer;
        let shown = DEFINITIONS
            .into_iter()
            .filter(|(term, _)| !viewer || !DASHBOARD_ONLY.contains(term))
            .map(|(t, m)| {
                // The viewer's own wording of a term, where it has one.
                let m = VIEWER_MEANINGS
                    .iter()
                    .find(|&&(own, _)| viewer && own == t)
                    .map_or(m, |&(_, own)| own);
                (t.to_string(), m.to_string())
            })
            .chain(own_words);
        let glyphs = theme.glyphs();
        for (term, meaning) in shown {
            // "▚ pending free": the glyph the map draws, in this theme.
            let term = if term == PENDING_FREE {
                format!("{} {term}", glyphs.pending_free)
            } else {
                term
            };
            let term = term.as_str();
            // Wrap "term meaning" as one text, then style the term part of
            // the first line.
            // "fragmentation = …" reads as a formula, the rest as "term: …".
            let colon = if meaning.starts_with('=') { "" } else { ":" };
            let text = format!("{term}{colon} {meaning}");
            // Continuation lines are indented by two columns.
            for (i, l) in chrome::wrap(&text, width.saturating_sub(2))
                .into_iter()
                .enumerate()
            {
                if i == 0
                    && let Some(rest) = l.strip_prefix(term)
                {
                    lines.push(Line::from(vec![
                        Span::styled(term.to_string(), theme.key),
                        Span::styled(rest.to_string(), theme.text),
                    ]));
                } else {
                    lines.push(Line::styled(format!("  {l}"), theme.text));
                }
            }
        }
        lines
    }
}

/// The keys' column of a section: as wide as its own widest keys, and two
/// columns more, so keys never run into their text. (One column for all
/// sections, as wide as the comparison's "Esc Enter c", left four blank
/// columns after the viewer's own keys at 120×40.)
/// The keys are measured as the theme names them ([`Theme::key`]).
fn keys_column(rows: &[KeyRow], theme: &Theme) -> usize {
    rows.iter()
        .map(|r| theme.key(r.0).chars().count())
        .max()
        .unwrap_or(0)
        .saturating_add(2)
}

/// Columns the definitions need beside the keys; narrower, they go below.
const MIN_DEFINITIONS_WIDTH: u16 = 30;

impl Widget for HelpOverlay<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.width < 3 || area.height < 3 {
            return;
        }
        let theme = self.theme;
        let width = area.width.min(MAX_WIDTH);
        let keys_w = u16::try_from(self.key_lines_width())
            .unwrap_or(u16::MAX)
            .min(width.saturating_sub(4));
        let keys = self.key_lines(keys_w);
        // Side by side only when the definitions keep a readable width
        // (the stress panel's long key lines would squash them).
        let two = width >= TWO_COLUMNS_WIDTH && width >= keys_w + 5 + MIN_DEFINITIONS_WIDTH;
        let defs_w = if two {
            width.saturating_sub(keys_w + 5)
        } else {
            width.saturating_sub(2)
        };
        // The scenario's explanation heads the definitions beside the
        // keys, or everything in one column: in view when the help opens.
        // (In one column `defs_w` is that column's width.)
        let mut scenario = self.scenario_lines(defs_w);
        let mut defs = self.definition_lines(defs_w);
        // One column: the keys' descriptions wrap to its width.
        let keys = if two {
            scenario.append(&mut defs);
            defs = scenario;
            keys
        } else {
            scenario.extend(self.key_lines(width.saturating_sub(2)));
            scenario
        };
        let content_h = if two {
            keys.len().max(defs.len())
        } else {
            keys.len() + 1 + defs.len()
        };
        let height = u16::try_from(content_h + 2)
            .unwrap_or(u16::MAX)
            .min(area.height);
        // The keys the frame names, as the keymap binds them: the first key
        // of a binding, or all of the moves' ("↓ j").
        let name = |a| self.keymap.key_name(a).unwrap_or_default();
        let label = |a| {
            let b = self.keymap.bindings.iter().find(|b| b.action == a);
            b.map_or("", |b| b.keys)
        };
        let closes = format!(
            " {} or {} closes ",
            name(Action::Back),
            name(Action::ToggleHelp)
        );
        let (popup, inner) = chrome::popup(buf, area, (width, height), " Help ", &closes, 0, theme);
        let visible = usize::from(inner.height);
        let max_scroll = content_h.saturating_sub(visible);
        if let Some(limit) = self.scroll_limit {
            limit.set(max_scroll);
        }
        if let Some(rows) = self.page_rows {
            rows.set(visible);
        }
        let offset = self.scroll.min(max_scroll);
        if max_scroll > 0 {
            // Where the view is, as less says it, and how to move it.
            let last = (offset + visible).min(content_h);
            let more = if offset < max_scroll {
                format!(" {} {} more", label(Action::Down), name(Action::PageDown))
            } else {
                format!(" {} {} back", label(Action::Up), name(Action::PageUp))
            };
            let more = theme.key(&more);
            let text = format!("{more} · rows {}–{last} of {content_h} ", offset + 1);
            let bottom = Rect::new(
                popup.x + 1,
                popup.bottom() - 1,
                popup.width.saturating_sub(2),
                1,
            );
            chrome::line_at(buf, bottom, 0, &Line::styled(text, theme.dim));
        }
        // Each column scrolls only as far as its own last row: in two
        // columns the shorter one (the definitions, beside the viewer's or
        // the stress panel's long key lists) stays in view while the other
        // scrolls, instead of scrolling away into blank rows.
        let skip = |lines: Vec<Line<'static>>| -> Vec<Line<'static>> {
            let own_max = lines.len().saturating_sub(visible);
            lines.into_iter().skip(offset.min(own_max)).collect()
        };
        if two {
            let left_area = Rect {
                width: keys_w.min(inner.width),
                ..inner
            };
            let right_x = inner.x + keys_w + 3;
            let right_area = Rect::new(
                right_x.min(inner.right()),
                inner.y,
                inner.right().saturating_sub(right_x),
                inner.height,
            );
            chrome::lines_at(buf, left_area, &skip(keys));
            chrome::lines_at(buf, right_area, &skip(defs));
        } else {
            let mut lines = keys;
            lines.push(Line::raw(""));
            lines.extend(defs);
            chrome::lines_at(buf, inner, &skip(lines));
        }
        theme.finish(popup, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_short_words_define_each_short_word_once_by_the_first_name_it_shortens() {
        let name = |full, short| LegendName { full, short };
        let names = [
            name("reserved", "res"),
            name("cursor", "cursor"),
            name("empty_cache", "released"),
            name("cache released", "released"),
        ];
        assert_eq!(
            legend_short_words(&names),
            Some((
                "res, released".to_string(),
                "in a narrow timeline legend: res for reserved, released for empty_cache."
                    .to_string()
            ))
        );
        assert_eq!(
            legend_short_words(&[name("OOM", "OOM")]),
            None,
            "no short word, no definition"
        );
    }
}
