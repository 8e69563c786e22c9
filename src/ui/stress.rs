//! The stress panel, drawn over the lower part of the screen while it is
//! open (the breakdown, timeline and fragmentation above it follow the
//! panel's allocator). The title names non-default allocator settings.
//! Top to bottom: the size/count/pattern line, the size field while one is
//! typed (`s`), the allocator-settings field (`S`), the last message, PyTorch's OOM message with "reserved but unallocated"
//! highlighted and what would have helped (empty_cache, non-releasable
//! memory, settings to try), the scenario list or the loaded scenario, the live tensors and, once A and B are marked, the compare
//! view (A | B | Δ), beside the tensors when the panel is wide enough.
//! While `j`/`k` and `d` act on the tensors the selected one keeps a row,
//! named alone ("selected #3 (2 of 84): …") when the list has only that
//! row: `d` does not free a tensor the panel does not show. Likewise the
//! open scenario list keeps the scenario Enter loads on screen: the
//! messages above give way to it, and it scrolls with the selection.
//! On a narrower panel the compare view goes under the tensors, two figures
//! a row with shorter labels where that fits (80 columns), and keeps its
//! rows: the head's last lines give way. Scenario texts wrap instead of
//! being cut at the right edge.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Widget};
use unicode_width::UnicodeWidthStr as _;

use super::chrome;
use super::format;
use super::theme::Theme;
use crate::alloc::explain::Why;
use crate::alloc::sizing::format_size;
use crate::app::keymap::{Action, Keymap, PanelKey, TypingKey, TypingMode};
use crate::app::stress::{
    CompareRow, FigureUnit, HistogramRow, OomAdvice, OomState, PanelDevice, PanelModal, Pattern,
    ScenarioPicker, ScenarioStop, Stranded, StressAction, StressPanel,
};

/// The key the fields or the list bind to `key` ("Enter", "Esc"): fixed
/// keys, named from the one table that dispatches them.
fn typing_key(mode: TypingMode, key: TypingKey) -> &'static str {
    mode.key_name(key).unwrap_or_default()
}

/// The settings field's hint, longest first: the first that fits beside
/// the typed text is shown, none when none does. Each names its keys with
/// what they do, pair by pair: "Enter applies · Esc" read as a hint cut
/// at the edge.
fn settings_hints() -> [String; 4] {
    let done = typing_key(TypingMode::StressField, TypingKey::Done);
    let cancel = typing_key(TypingMode::StressField, TypingKey::Cancel);
    [
        format!("  {done} frees all, new allocator · {cancel} cancels"),
        format!("  {done} frees all · {cancel} cancels"),
        format!("  {done} applies · {cancel} cancels"),
        format!("  {done} applies"),
    ]
}

/// The panel's share of the screen height (percent) and its floor (rows).
const HEIGHT_PERCENT: u16 = 55;
const MIN_ROWS: u16 = 12;
/// From this inner width the compare view sits right of the tensor list.
const SIDE_BY_SIDE_WIDTH: u16 = 90;
/// Columns of the compare view: name, A, B, Δ.
const COMPARE_WIDTH: u16 = 52;
/// Columns of the compare view with the free-block histogram (`H`):
/// bucket, A count and bytes, B count and bytes, Δ count and bytes.
const HISTOGRAM_WIDTH: u16 = 60;
/// Rows the OOM message may take.
const OOM_ROWS: usize = 7;
/// The fewest rows PyTorch's OOM message is cut to where it does not have
/// "reserved by PyTorch but unallocated" (where it does, the rows that
/// hold those words); shorter, its one-row summary takes its place.
const OOM_CUT_ROWS: usize = 3;
/// Rows the last message may take, and each line of OOM advice (the
/// verdict, "free some of the panel's live tensors … even with every
/// cached byte reused", takes three at a 72-column panel).
const MESSAGE_ROWS: usize = 3;
const ADVICE_ROWS: usize = 3;
/// Rows the reason under the message may take ("why: …").
const WHY_ROWS: usize = 2;
/// Rows a scenario's explanation may take.
const EXPLANATION_ROWS: usize = 3;
/// The compare view two figures a row (narrow panels): label, A, B and Δ
/// widths of one half, and the gap between the halves.
const TWO_UP_LABEL: usize = 11;

/// The compare table's first header cell where it is short, "B: 3 ago"
/// for `n` = "3": the help defines it with `n` = "N".
pub(super) fn compare_head_ago(n: &str) -> String {
    format!("B: {n} ago")
}
const TWO_UP_VALUE: usize = 8;
const TWO_UP_DELTA: usize = 9;
const TWO_UP_GAP: usize = 2;
/// The width of one half of the two-up compare view.
const TWO_UP_HALF: usize = TWO_UP_LABEL + 1 + TWO_UP_VALUE + 1 + TWO_UP_VALUE + 1 + TWO_UP_DELTA;
/// The scenario list's name column.
const SCENARIO_NAME_WIDTH: usize = 24;

/// Where the panel goes: the bottom rows of `body` (the screen above the
/// status line).
pub fn panel_area(body: Rect) -> Rect {
    let h = (body.height * HEIGHT_PERCENT / 100)
        .max(MIN_ROWS)
        .min(body.height);
    Rect::new(body.x, body.bottom() - h, body.width, h)
}

/// The stress panel of one frame.
pub struct StressPane<'a> {
    panel: &'a StressPanel,
    /// Names the keys the panel's own lines mention, as the hints do.
    keymap: &'a Keymap,
    theme: &'a Theme,
}

impl<'a> StressPane<'a> {
    pub fn new(panel: &'a StressPanel, keymap: &'a Keymap, theme: &'a Theme) -> Self {
        StressPane {
            panel,
            keymap,
            theme,
        }
    }

    /// Size, count, pattern, live tensors and reserved, flowed onto as
    /// many lines as `width` needs (beside the segment map the panel is
    /// narrow, and reserved is the figure to watch).
    fn settings_lines(&self, width: u16) -> Vec<Line<'static>> {
        let p = self.panel;
        let t = self.theme;
        let live: u64 = p.tensors.iter().map(|t| t.size).sum();
        let item = |label: &'static str, value: String, style: Style| {
            Line::from(vec![Span::styled(label, t.dim), Span::styled(value, style)])
        };
        let pattern = match p.pattern {
            Pattern::TransformerStep => {
                format!("{} #{}", p.pattern.name(), p.transformer_steps + 1)
            }
            _ => p.pattern.name().to_string(),
        };
        let items = vec![
            item("size ", format::bytes(p.size()), t.key),
            item("count ", p.count().to_string(), t.key),
            item("pattern ", pattern, t.key),
            item(
                "live ",
                format!(
                    "{}, {}",
                    format::count_of(p.tensors.len(), "tensor", "tensors"),
                    format::bytes(live)
                ),
                t.text,
            ),
            item("reserved ", format::bytes(p.figures.reserved), t.text),
        ];
        chrome::flow(items, width, 2)
    }

    /// The title; `short` leaves out where the scenario device comes from,
    /// so that the active settings fit at 80 columns.
    fn title(&self, short: bool) -> Line<'static> {
        let p = self.panel;
        let t = self.theme;
        let where_ = match (p.gpu, p.cap, p.device) {
            (None, _, _) => "starting".to_string(),
            (Some(_), _, PanelDevice::Scenario { capacity, .. }) => format!(
                "scenario device: simulated {}{}",
                format::bytes(capacity),
                if short { "" } else { " as in vramtop scenario" }
            ),
            (Some(g), None, _) => format!("GPU {g} · no cap (simulated)"),
            (Some(g), Some(c), _) => format!("GPU {g} · cap {}", format::bytes(c)),
        };
        let mut spans = vec![
            Span::styled(" Stress panel ", t.title_focused),
            Span::styled(format!(" {where_} "), t.text),
        ];
        // PyTorch's defaults need no mention; other settings are named,
        // a span per setting, each after its comma, so that a title cut
        // to its row ([`chrome::fit_title`]) ends between two settings.
        if !p.settings.is_empty() {
            let mut settings = p.settings.split(',');
            let first = settings.next().unwrap_or_default();
            spans.push(Span::styled(format!(" {first}"), t.key));
            spans.extend(settings.map(|s| Span::styled(format!(",{s}"), t.key)));
            spans.push(Span::styled(" ", t.key));
        }
        Line::from(spans)
    }

    /// The tensor list on `rows` rows of `width` columns: the header and
    /// the rows around the selected tensor, or on one row the selected
    /// tensor alone.
    fn tensor_lines(&self, rows: usize, width: u16) -> Vec<Line<'static>> {
        let p = self.panel;
        let t = self.theme;
        let mut lines = vec![Line::styled(
            format!(
                "{:>5} {:>10} {:>10}  {}",
                "#", "size", "requested", "address"
            ),
            t.header,
        )];
        if p.tensors.is_empty() {
            let keys = self
                .keymap
                .stress_key_names(PanelKey::Act(StressAction::Allocate));
            let allocates = keys.join(" or ");
            // While a field is open Enter applies it, not the allocation:
            // say what it does then, the allocation after it.
            let done = typing_key(TypingMode::StressField, TypingKey::Done);
            let text = match &p.modal {
                _ if keys.is_empty() => "no live tensors".to_string(),
                PanelModal::Keys => format!("no live tensors: {allocates} allocates"),
                PanelModal::SizeField(_) => {
                    format!("no live tensors: {done} sets the size, then {allocates} allocates")
                }
                PanelModal::SettingsField(_) => format!(
                    "no live tensors: {done} starts a fresh allocator, then {allocates} allocates"
                ),
                // The list's own keys are on its lines.
                PanelModal::ScenarioList(_) => "no live tensors".to_string(),
            };
            lines.push(Line::styled(text, t.dim));
            return lines;
        }
        // One row: the selected tensor alone, in words, as the header
        // would leave no row for it and `d` frees it. Not while a field or
        // the scenario list takes `d`: the row would say it frees it.
        if rows == 1 {
            if !p.selection_acts() {
                return Vec::new();
            }
            return self.selected_line(width).into_iter().collect();
        }
        // Keep the selected row in view.
        let visible = rows.saturating_sub(1).max(1);
        let first = p.selected.saturating_sub(visible - 1);
        for (i, tensor) in p.tensors.iter().enumerate().skip(first).take(visible) {
            let text = format!(
                "{:>5} {:>10} {:>10}  {:#x}",
                tensor.id,
                format::bytes(tensor.size),
                format::bytes(tensor.requested),
                tensor.address
            );
            let style = if i == p.selected { t.selected } else { t.text };
            lines.push(Line::styled(text, style));
        }
        lines
    }

    /// The selected tensor on one line, the tensor `d` frees: its id, its
    /// place in the list (which `j`/`k` move), its size (and the size
    /// asked where rounding made it larger) and address; "d frees it"
    /// where that fits too, the key named by the keymap's table.
    fn selected_line(&self, width: u16) -> Option<Line<'static>> {
        let p = self.panel;
        let t = self.theme;
        let tensor = p.tensors.get(p.selected)?;
        let requested = if tensor.requested == tensor.size {
            String::new()
        } else {
            format!(" (requested {})", format::bytes(tensor.requested))
        };
        let text = format!(
            "selected #{} ({} of {}): {}{requested} at {:#x}",
            tensor.id,
            p.selected + 1,
            p.tensors.len(),
            format::bytes(tensor.size),
            tensor.address
        );
        let hint = self
            .keymap
            .stress_key_name(PanelKey::Act(StressAction::FreeSelected))
            .map(|key| format!(" · {key} frees it"))
            .unwrap_or_default();
        let width = usize::from(width);
        let fits = text.width() + hint.width() <= width;
        let mut spans = vec![Span::styled(format::truncate(&text, width), t.selected)];
        if fits {
            spans.push(Span::styled(hint, t.dim));
        }
        Some(Line::from(spans))
    }

    /// PyTorch's OOM message wrapped to `width`, with "… is reserved by
    /// PyTorch but unallocated" highlighted, and the fewest rows it is cut
    /// to: those that hold the highlighted words (four at 80 columns with
    /// one process line, five at 72; a row less without), [`OOM_CUT_ROWS`]
    /// where the message has none.
    fn oom_message(&self, oom: &OomState, width: u16) -> (Vec<Line<'static>>, usize) {
        let t = self.theme;
        let highlight = format!(
            "{} is reserved by PyTorch but unallocated",
            format_size(oom.reserved_but_unallocated)
        );
        let (lines, marked) = wrap_marking(&oom.message, &highlight, width, t.critical, t.warning);
        (lines, marked.unwrap_or(OOM_CUT_ROWS))
    }

    /// PyTorch's OOM message on at most `rows` lines. Cut to fewer rows
    /// than hold its highlighted words it would lose them, so there its
    /// figures take its place: what was asked, what was free, what is
    /// reserved but unallocated and, where the device has any, what its
    /// other processes held (the message's "Process PID has …" lines,
    /// which dataloader_workers' eight worker contexts fill): one row at
    /// 80 columns, where PyTorch's first two rows hold only the first two.
    fn oom_lines(&self, oom: &OomState, width: u16, rows: usize) -> Vec<Line<'static>> {
        let t = self.theme;
        let (whole, floor) = self.oom_message(oom, width);
        if whole.len() <= rows || rows >= floor {
            return self.cut_to(whole, width, rows);
        }
        let (summary, unallocated) = oom_summary(oom, usize::from(width), rows);
        let lines = summary
            .iter()
            .flat_map(|row| highlighted_wrap(row, &unallocated, width, t.critical, t.warning))
            .collect();
        self.cut_to(lines, width, rows)
    }

    /// `lines` of the OOM message or its summary cut to `rows`, the last
    /// one saying so.
    fn cut_to(&self, mut lines: Vec<Line<'static>>, width: u16, rows: usize) -> Vec<Line<'static>> {
        // Cut to its rows, the last says so: PyTorch's sentence stopping at
        // "try setting" would read as the whole message.
        if lines.len() > rows {
            lines.truncate(rows);
            if let Some(last) = lines.last_mut() {
                // Whole words give way to the mark, not the mark to them.
                while last.spans.len() > 1
                    && (last.width() + 2 > usize::from(width)
                        || last
                            .spans
                            .last()
                            .is_some_and(|s| s.content.trim().is_empty()))
                {
                    last.spans.pop();
                }
                last.spans.push(Span::styled(" …", self.theme.critical));
            }
        }
        lines
    }

    /// The scenario list (`n`) on at most `rows` rows: its header and the
    /// entries around the selected one (the one Enter loads, so it is
    /// always drawn), the header saying which it shows when not all fit.
    fn picker_lines(&self, picker: &ScenarioPicker, width: u16, rows: usize) -> Vec<Line<'static>> {
        let t = self.theme;
        // Titles that do not fit go on under themselves, right of the
        // name column, instead of being cut at the edge.
        let indent = 2 + SCENARIO_NAME_WIDTH + 1;
        let title_w =
            u16::try_from(usize::from(width).saturating_sub(indent).max(20)).unwrap_or(u16::MAX);
        let entries: Vec<Vec<Line<'static>>> = picker
            .entries
            .iter()
            .enumerate()
            .map(|(i, (name, title))| {
                let style = if i == picker.selected {
                    t.selected
                } else {
                    t.text
                };
                chrome::wrap(title, title_w)
                    .into_iter()
                    .enumerate()
                    .map(|(k, part)| {
                        let lead = if k == 0 {
                            format!("  {name:<SCENARIO_NAME_WIDTH$} ")
                        } else {
                            " ".repeat(indent)
                        };
                        Line::styled(format!("{lead}{part}"), style)
                    })
                    .collect()
            })
            .collect();
        let (first, last) = list_window(&entries, picker.selected, rows.saturating_sub(1));
        let n = entries.len();
        let key = |k| typing_key(TypingMode::ScenarioList, k);
        let (up, down) = (t.key(key(TypingKey::Up)), t.key(key(TypingKey::Down)));
        let (done, cancel) = (key(TypingKey::Done), key(TypingKey::Cancel));
        let keys = [
            format!("{up}/{down} choose · {done} loads (frees all) · {cancel} closes"),
            format!("{done} loads (frees all)"),
        ];
        // Cut, it says which entries it shows: the rows that end at the
        // selection would read as the whole list.
        let what = if first == 0 && last + 1 >= n {
            "scenarios".to_string()
        } else {
            format!("scenarios {}–{} of {n}", first + 1, last + 1)
        };
        let header = keys
            .iter()
            .map(|k| format!("{what}: {k}"))
            .find(|h| h.width() <= usize::from(width))
            .unwrap_or(what);
        let room = rows.saturating_sub(1);
        let mut lines = vec![Line::styled(header, t.header)];
        lines.extend(
            entries
                .into_iter()
                .skip(first)
                .take(last + 1 - first)
                .flatten()
                .take(room),
        );
        lines
    }

    /// The loaded scenario: its name, variant, step cursor and next step.
    fn scenario_lines(&self, width: u16) -> Vec<Line<'static>> {
        let p = self.panel;
        let t = self.theme;
        let mut lines = Vec::new();
        let Some(run) = &p.scenario else {
            return lines;
        };
        // The settings beside the variant's name, unless the name says
        // them: "variant default (defaults)" said it twice.
        let conf = match (run.alloc_conf(), run.variant_name()) {
            ("", "default") => String::new(),
            ("", _) => " (defaults)".to_string(),
            (conf, _) => format!(" ({conf})"),
        };
        // Flowed onto as many lines as the width needs: the next step's
        // label is the part to read, never cut at the edge.
        let item = |label: &'static str, value: Span<'static>| {
            Line::from(vec![Span::styled(label, t.dim), value])
        };
        // After the last step there is no next one: "finished" alone, not
        // "paused · next finished" (which reads as a step of that name).
        // A step the device refused says so: fragmentation_oom's last step
        // runs out of memory, which is not the run finishing.
        let next = run
            .next_index()
            .map(|i| item("next ", Span::raw(run.scenario.steps[i].label.clone())));
        let progress = match (&run.stopped, next) {
            (Some(stop), next) => {
                let why = match stop {
                    ScenarioStop::OutOfMemory { tried } => {
                        format!("failed: out of memory ({} asked)", format::bytes(*tried))
                    }
                    ScenarioStop::Failed => "failed (the message above says why)".to_string(),
                };
                std::iter::once(Line::styled(why, t.critical))
                    .chain(next)
                    .collect()
            }
            (None, Some(next)) => vec![
                Line::styled(if run.running { "running" } else { "paused" }, t.dim),
                next,
            ],
            (None, None) => vec![Line::styled("finished", t.dim)],
        };
        let mut items = vec![
            item("scenario ", Span::styled(run.scenario.name.clone(), t.key)),
            item(
                "variant ",
                Span::raw(format!(
                    "{}{conf} {}/{}",
                    run.variant_name(),
                    run.variant + 1,
                    run.scenario.variants.len()
                )),
            ),
            item("step ", Span::raw(format!("{}/{}", run.done, run.total()))),
        ];
        items.extend(progress);
        lines.extend(chrome::flow(items, width, 2));
        lines
    }

    /// The loaded scenario's explanation on at most `rows` lines (none
    /// while the scenario list is open); cut, the last says so and where
    /// to read the rest ("… ? shows it all"): a sentence that simply
    /// stops reads as the whole explanation, and the panel has no rows
    /// for the whole of one (430 to 850 characters).
    fn explanation_lines(&self, width: u16, rows: usize) -> Vec<Line<'static>> {
        let Some(run) = &self.panel.scenario else {
            return Vec::new();
        };
        if self.panel.scenario_picker().is_some() || rows == 0 {
            return Vec::new();
        }
        let mut lines = chrome::wrap(&run.scenario.explanation, width);
        if lines.len() > rows {
            lines.truncate(rows);
            let more = match self.keymap.key_name(Action::ToggleHelp) {
                Some(help) => format!(" … {help} shows it all"),
                None => " …".to_string(),
            };
            if let Some(last) = lines.last_mut() {
                *last = with_ending(last, &more, width);
            }
        }
        lines
            .into_iter()
            .map(|l| Line::styled(l, self.theme.dim))
            .collect()
    }

    /// The head under the settings in at most `rows` rows where it can
    /// be cut to them: the last message, the OOM message and its advice,
    /// the scenario line (or list) and the scenario's explanation. The
    /// scenario line says where the run is and what comes next, so it
    /// stays: the explanation gives way first, then the OOM message (to
    /// the rows that hold "reserved but unallocated"), the advice
    /// before its verdict (its last line: what to do, or that nothing
    /// would help) to one row each (in a shorter wording that fits it), the OOM message to its one-row
    /// summary (asked, free, reserved but unallocated), the advice before
    /// the verdict, the verdict, then the message. At 80×24 after an OOM
    /// the panel has 11 rows for all of it, the compare table and the
    /// selected tensor. The open scenario list outlasts the message and
    /// the OOM message, then scrolls.
    fn fitted_head(&self, width: u16, rows: usize) -> Vec<Line<'static>> {
        let t = self.theme;
        // The message and the advice wrap: cut at the edge, an invalid
        // setting's rule ("it must be at least 20 MiB") or a path would be
        // lost on an 80-column panel.
        type Part<'p> = Box<dyn Fn(usize) -> Vec<Line<'static>> + 'p>;
        let mut parts: Vec<(Part<'_>, usize)> = Vec::new();
        let message = stress_message(self.panel, self.keymap).unwrap_or_default();
        let command = self.panel.message_command.as_deref();
        parts.push((
            Box::new(move |r| {
                let lines = chrome::wrap_keeping(&message, command, width);
                cut_wrapped(lines, width, r, t.dim)
            }),
            MESSAGE_ROWS,
        ));
        // Why the figures moved (the model's lessons): under the message,
        // in full where two rows hold it, else in a few words.
        let why_at = parts.len();
        if !self.panel.why.is_empty() {
            let wordings = why_wordings(&self.panel.why);
            parts.push((
                Box::new(move |r| fitted_wording(&wordings, width, r, t.dim)),
                WHY_ROWS,
            ));
        }
        let oom_at = parts.len();
        if let Some(oom) = &self.panel.oom {
            parts.push((Box::new(move |r| self.oom_lines(oom, width, r)), OOM_ROWS));
        }
        let advice_at = parts.len();
        if self.panel.oom.is_some() {
            for advice in self.panel.oom_advice() {
                let wordings = oom_advice_wordings(advice, self.keymap);
                parts.push((
                    Box::new(move |r| fitted_wording(&wordings, width, r, t.warning)),
                    ADVICE_ROWS,
                ));
            }
        }
        let advice_end = parts.len();
        let scenario_at = parts.len();
        let picker = self.panel.scenario_picker();
        if let Some(picker) = picker {
            let whole = self.picker_lines(picker, width, usize::MAX).len();
            parts.push((
                Box::new(move |r| self.picker_lines(picker, width, r)),
                whole,
            ));
        } else {
            let scenario = self.scenario_lines(width);
            let scenario_rows = scenario.len();
            parts.push((Box::new(move |_| scenario.clone()), scenario_rows));
        }
        let explanation_at = parts.len();
        parts.push((
            Box::new(move |r| self.explanation_lines(width, r)),
            EXPLANATION_ROWS,
        ));
        // What each part takes uncut, within its own limit.
        let mut given: Vec<usize> = parts
            .iter()
            .map(|(lines, limit)| lines(*limit).len())
            .collect();
        // (part, the fewest rows it is cut to), in the order they give way.
        // The advice's last line is its verdict (what to do, or that
        // nothing would help): it stays longest, whole.
        let verdict = advice_end.checked_sub(1).filter(|&v| v >= advice_at);
        let mut order = vec![(explanation_at, 0)];
        if !self.panel.why.is_empty() {
            order.extend([(why_at, 1), (why_at, 0)]);
        }
        if let Some(oom) = &self.panel.oom {
            order.push((oom_at, self.oom_message(oom, width).1));
        }
        let before_verdict = advice_at..verdict.unwrap_or(advice_end);
        order.extend(before_verdict.clone().map(|i| (i, 1)));
        // A verdict on three rows (both settings, each with its
        // mechanism) gives way to its two-row wording before the OOM
        // message gives up its highlighted words.
        if let Some(v) = verdict {
            order.push((v, 2));
        }
        // The summary keeps the message's figures on one row: it goes
        // before any advice line does. A message given two rows is drawn
        // as the summary too, and the row it leaves goes to the tensors.
        if self.panel.oom.is_some() {
            order.push((oom_at, 1));
        }
        order.extend(before_verdict.map(|i| (i, 0)));
        if let Some(v) = verdict {
            order.push((v, 1));
            order.push((v, 0));
        }
        order.push((0, 1));
        // The scenario list takes the keys while it is open and Enter
        // loads the entry it shows selected: the message and the OOM give
        // way to it (they are back when it closes), then it scrolls, down
        // to its header and the selected entry's first row. Drawn after
        // the OOM at 80×24 it had one row and ↓ moved out of sight.
        if picker.is_some() {
            order.extend([(0, 0), (oom_at, 0), (scenario_at, 2)]);
        }
        for (part, floor) in order {
            let total: usize = given.iter().sum();
            let Some(over) = total.checked_sub(rows).filter(|&o| o > 0) else {
                break;
            };
            given[part] = given[part].saturating_sub(over).max(floor.min(given[part]));
        }
        parts
            .iter()
            .zip(given)
            .flat_map(|((lines, _), r)| if r == 0 { Vec::new() } else { lines(r) })
            .collect()
    }

    /// A text field's line: `label`, the typed `text` with the cursor
    /// after it, and the first of `hints` (longest first) that fits beside
    /// them in `width` columns, none where none does. Text too long for
    /// the line keeps its end, where the cursor is, after a "…": cut at
    /// the edge, a long settings string hid what was being typed.
    fn field_line(
        &self,
        label: &'static str,
        text: &str,
        hints: impl IntoIterator<Item = String>,
        width: u16,
    ) -> Line<'static> {
        let t = self.theme;
        let cursor = t.glyphs().cursor;
        let field = |shown: String, hint: String| {
            Line::from(vec![
                Span::styled(label, t.key),
                Span::styled(format!("{shown}{cursor}"), t.selected),
                Span::styled(hint, t.dim),
            ])
        };
        let width = usize::from(width);
        hints
            .into_iter()
            .map(|hint| field(text.to_string(), hint))
            .find(|l| l.width() <= width)
            .unwrap_or_else(|| {
                let room = width.saturating_sub(label.width() + cursor.width());
                field(format::truncate_start(text, room), String::new())
            })
    }

    /// The compare view for a panel `width` columns wide: one figure a
    /// row where the full table sits beside the tensors, two a row with
    /// shorter labels where it would sit under them and the two-up table
    /// fits (the 80-column panel has no rows for seven).
    fn compare_view(&self, rows: &[CompareRow], width: u16) -> Vec<Line<'static>> {
        if width < SIDE_BY_SIDE_WIDTH && usize::from(width) >= 2 * TWO_UP_HALF + TWO_UP_GAP {
            self.compare_two_up(rows)
        } else {
            self.compare_lines(rows)
        }
    }

    /// The compare table's first header cell, at most `width` columns:
    /// "figure" while B is the figures now, else how many of the device's
    /// answers ago B was marked ("B: 3 actions ago", "B: 3 ago"): a table
    /// marked long before read as the state now.
    fn compare_head(&self, width: usize) -> String {
        match self.panel.answers_since_b() {
            None | Some(0) => "figure".to_string(),
            Some(n) => {
                let actions = if n == 1 { "action" } else { "actions" };
                [
                    format!("B: {n} {actions} ago"),
                    compare_head_ago(&n.to_string()),
                ]
                .into_iter()
                .find(|h| h.width() <= width)
                .unwrap_or_else(|| "figure".to_string())
            }
        }
    }

    /// The compare figures two a row: the memory figures on the left, the
    /// layout's on the right.
    fn compare_two_up(&self, rows: &[CompareRow]) -> Vec<Line<'static>> {
        let t = self.theme;
        let half_header = |label: &str| {
            format!(
                "{label:<TWO_UP_LABEL$} {:>TWO_UP_VALUE$} {:>TWO_UP_VALUE$} {:>TWO_UP_DELTA$}",
                "A", "B", "Δ"
            )
        };
        let gap = " ".repeat(TWO_UP_GAP);
        let mut lines = vec![Line::styled(
            format!(
                "{}{gap}{}",
                half_header(&self.compare_head(TWO_UP_LABEL)),
                half_header("figure")
            ),
            t.header,
        )];
        let cell = |r: &CompareRow| {
            self.compare_cell(r, r.short, (TWO_UP_LABEL, TWO_UP_VALUE, TWO_UP_DELTA))
        };
        let left_n = rows.len().div_ceil(2);
        let (left, right) = rows.split_at(left_n);
        for (k, l) in left.iter().enumerate() {
            let mut spans = cell(l);
            if let Some(r) = right.get(k) {
                spans.push(Span::raw(gap.clone()));
                spans.extend(cell(r));
            }
            lines.push(Line::from(spans));
        }
        lines
    }

    fn compare_lines(&self, rows: &[CompareRow]) -> Vec<Line<'static>> {
        let t = self.theme;
        let mut lines = vec![Line::styled(
            format!(
                "{:<18} {:>10} {:>10} {:>11}",
                self.compare_head(18),
                "A",
                "B",
                "Δ"
            ),
            t.header,
        )];
        for r in rows {
            lines.push(Line::from(self.compare_cell(r, r.name, (18, 10, 11))));
        }
        lines
    }

    /// One compare figure: `name`, A and B, and the difference coloured by
    /// its sign, in columns of `(label, value, delta)` widths.
    fn compare_cell(
        &self,
        r: &CompareRow,
        name: &str,
        (label_w, value_w, delta_w): (usize, usize, usize),
    ) -> Vec<Span<'static>> {
        let t = self.theme;
        let d = r.delta();
        let style = match d.signum() {
            1 => t.warning,
            -1 => t.bar_ok,
            _ => t.dim,
        };
        vec![
            Span::raw(format!(
                "{name:<label_w$} {:>value_w$} {:>value_w$} ",
                figure(r.unit, r.a),
                figure(r.unit, r.b)
            )),
            Span::styled(format!("{:>delta_w$}", delta(r.unit, d)), style),
        ]
    }

    /// The compare `lines` (its `figure_rows` figures, then the
    /// histogram) on `rows` rows: the figures keep theirs, and a histogram
    /// cut short says so on its last row, how many of its rows are not
    /// shown and what shows them ("… 2 more histogram rows: a taller
    /// terminal shows them"), as the viewer's lists do: cut unsaid, the
    /// 1 MiB bucket alone read as the only one with free blocks.
    fn cut_histogram(
        &self,
        lines: &[Line<'static>],
        figure_rows: usize,
        rows: usize,
    ) -> Vec<Line<'static>> {
        if lines.len() <= rows || rows <= figure_rows {
            return lines.to_vec();
        }
        // The histogram's heading (the line after the figures) alone says
        // nothing: with no room for one of its rows, it goes too.
        let heading = figure_rows + 1;
        let kept = if rows - 1 == heading {
            figure_rows
        } else {
            rows - 1
        };
        let hidden = lines.len().saturating_sub(heading) - kept.saturating_sub(heading);
        let noun = if hidden == 1 { "row" } else { "rows" };
        let mut shown = lines[..kept].to_vec();
        shown.push(Line::styled(
            format!("… {hidden} more histogram {noun}: a taller terminal shows them"),
            self.theme.dim,
        ));
        shown
    }

    /// The histogram difference under the compare figures: one row per
    /// size bucket where A or B has a free block.
    fn histogram_lines(&self, rows: &[HistogramRow]) -> Vec<Line<'static>> {
        let t = self.theme;
        let mut lines = vec![Line::styled(
            format!(
                "{:<10} {:>4} {:>9} {:>4} {:>9} {:>5} {:>11}",
                format!("free {}", t.glyphs().at_most),
                "A #",
                "A",
                "B #",
                "B",
                "Δ #",
                "Δ"
            ),
            t.header,
        )];
        if rows.is_empty() {
            lines.push(Line::styled("no free blocks in A or B", t.dim));
        }
        for r in rows {
            let d = r.bytes_delta();
            let style = match d.signum() {
                1 => t.warning,
                -1 => t.bar_ok,
                _ => t.dim,
            };
            let bucket = if r.open_ended {
                format!("{}{}", t.glyphs().at_least, format::bytes(r.bound))
            } else {
                format::bytes(r.bound)
            };
            lines.push(Line::from(vec![
                Span::raw(format!(
                    "{:<10} {:>4} {:>9} {:>4} {:>9} ",
                    bucket,
                    r.a_count,
                    format::bytes(r.a_bytes),
                    r.b_count,
                    format::bytes(r.b_bytes)
                )),
                Span::styled(
                    format!(
                        "{:>5} {:>11}",
                        delta(FigureUnit::Count, r.count_delta()),
                        delta(FigureUnit::Bytes, d)
                    ),
                    style,
                ),
            ]));
        }
        lines
    }
}

/// The panel's last message in words: what it says, then the keys it
/// tells of, each named by the first key the keymap binds to it ("no
/// scenario loaded: n lists them"); a key the keymap does not bind goes
/// unnamed.
pub fn stress_message(panel: &StressPanel, keymap: &Keymap) -> Option<String> {
    let text = panel.message.as_deref()?;
    let keys: Vec<String> = panel
        .message_keys
        .iter()
        .filter_map(|u| Some(format!("{} {}", keymap.stress_key_name(u.key)?, u.does)))
        .collect();
    Some(if keys.is_empty() {
        text.to_string()
    } else {
        format!("{text} {}", keys.join(", "))
    })
}

/// The OOM message's summary for at most `rows` rows of `width` cells, as
/// the texts to wrap (each starts a row), and its words to highlight (what
/// is reserved but unallocated). Its parts are what was asked, what was
/// free, what is reserved but unallocated and, only where the device has
/// other processes, their count and bytes. The first wording that fits
/// one row is taken, longest first: PyTorch's opening words, then "CUDA
/// OOM", then (only with other processes, whose part makes the row
/// longer) the help's short forms ("unalloc", "free", "8 others"). Else,
/// with other processes, the first whose parts fit `rows` rows broken
/// between parts (never inside a figure), else the shortest so broken;
/// without, the shortest as one text. The caller wraps each text and cuts
/// at its last row.
pub fn oom_summary(oom: &OomState, width: usize, rows: usize) -> (Vec<String>, String) {
    let tried = format!("tried {}", format::bytes(oom.room.tried));
    let free = format::bytes(oom.room.device_free);
    let unallocated = format::bytes(oom.reserved_but_unallocated);
    let others = oom.room.others;
    // (parts, the part to highlight)
    let wording = |opening: &str, was_free: &str, reserved: &str, processes: Option<String>| {
        let marked = format!("{unallocated} {reserved}");
        let mut parts = vec![
            format!("{opening}{tried}"),
            format!("{free} {was_free}"),
            marked.clone(),
        ];
        parts.extend(processes);
        (parts, marked)
    };
    let long_unallocated = "reserved but unallocated";
    let wordings = if others.count == 0 {
        vec![
            wording("CUDA out of memory: ", "was free", long_unallocated, None),
            wording("CUDA OOM: ", "was free", long_unallocated, None),
        ]
    } else {
        let bytes = format::bytes(others.bytes);
        let (process, other) = if others.count == 1 {
            ("process", "other")
        } else {
            ("processes", "others")
        };
        let processes = format!("{} other {process} {bytes}", others.count);
        vec![
            wording(
                "CUDA out of memory: ",
                "was free",
                long_unallocated,
                Some(processes.clone()),
            ),
            wording(
                "CUDA OOM: ",
                "was free",
                long_unallocated,
                Some(processes.clone()),
            ),
            wording("CUDA OOM: ", "was free", "unalloc", Some(processes)),
            wording(
                "CUDA OOM: ",
                "free",
                "unalloc",
                Some(format!("{} {other} {bytes}", others.count)),
            ),
        ]
    };
    let one_row =
        |(parts, marked): &(Vec<String>, String)| (vec![parts.join(" · ")], marked.clone());
    if let Some(fits) = wordings
        .iter()
        .map(one_row)
        .find(|(row, _)| row.iter().all(|r| r.width() <= width))
    {
        return fits;
    }
    // Without other processes, as the summary has always been: word-wrapped, so
    // one row cut at its end keeps "… reserved but".
    if others.count == 0 {
        return wordings.last().map(one_row).unwrap_or_default();
    }
    // With them, rows broken between parts (beside the segment map at
    // 120×40), the first wording that fits `rows`, else the shortest: a
    // row cut at its end loses whole figures, never leaves "· 8 …".
    let between =
        |(parts, marked): &(Vec<String>, String)| (rows_of_parts(parts, width), marked.clone());
    wordings
        .iter()
        .map(between)
        .find(|(r, _)| r.len() <= rows)
        .or_else(|| wordings.last().map(between))
        .unwrap_or_default()
}

/// `parts` joined with " · " on rows of `width` cells, a row broken only
/// between parts (a part wider than a row has one of its own, which the
/// caller wraps).
fn rows_of_parts(parts: &[String], width: usize) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for part in parts {
        match rows.last_mut() {
            Some(row) if row.width() + " · ".width() + part.width() <= width => {
                row.push_str(" · ");
                row.push_str(part);
            }
            _ => rows.push(part.clone()),
        }
    }
    rows
}

/// A line of OOM advice in words. The actions it suggests are named by
/// the keys the keymap binds to them, as the hints name them ("(d, o, x,
/// D)", "(press S to try)"); an action without a key goes unnamed.
pub fn oom_advice_text(advice: OomAdvice, keymap: &Keymap) -> String {
    oom_advice_wordings(advice, keymap)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// A line of OOM advice in its wordings, longest first: [`oom_advice_text`],
/// then shorter ones that keep what it says (its figures, what to do and
/// the keys that do it) for a panel that has a row for it where the whole
/// line needs two (80×24 after an OOM). Cut at the row's end instead,
/// "empty_cache() could release 0 B (…); 1.46 GiB is …" lost what the
/// 1.46 GiB was.
pub fn oom_advice_wordings(advice: OomAdvice, keymap: &Keymap) -> Vec<String> {
    let keys: Vec<&str> = advice
        .actions()
        .iter()
        .filter_map(|&a| keymap.stress_key_name(PanelKey::Act(a)))
        .collect();
    let b = format::bytes;
    match advice {
        OomAdvice::Reclaim {
            releasable,
            non_releasable,
            stranded,
        } => {
            let (r, n) = (b(releasable), b(non_releasable));
            let (why, short) = match stranded {
                Stranded::BesideTensors => (
                    "free blocks in segments with live tensors",
                    "beside live tensors",
                ),
                Stranded::InPages => (
                    "free parts of pages that also hold live tensors",
                    "in pages of live tensors",
                ),
                Stranded::Both => ("free blocks beside live tensors", "beside live tensors"),
            };
            vec![
                format!(
                    "empty_cache() could release {r} (whole free segments and pages); {n} is \
                     non-releasable ({why})"
                ),
                format!("empty_cache() could release {r}; {n} non-releasable ({short})"),
                format!("empty_cache(): {r} releasable, {n} non-releasable ({short})"),
                format!("empty_cache(): {r} releasable, {n} non-releasable"),
            ]
        }
        OomAdvice::FreedSince { largest, pool } => {
            let (largest, pool) = (b(largest), pool.as_str());
            vec![
                format!(
                    "freed since: a {largest} block is free in the {pool} pool now, so the same \
                     request fits"
                ),
                format!("freed since: a {largest} {pool}-pool block is free: the request fits"),
            ]
        }
        OomAdvice::FreeLiveTensors { live, tried, room } => {
            // What to do first, keys and all: a line cut to one row still
            // says it.
            let keys = if keys.is_empty() {
                String::new()
            } else {
                format!(" ({})", keys.join(", "))
            };
            let (live, tried, room) = (b(live), b(tried), b(room));
            vec![
                format!(
                    "free some of the panel's live tensors{keys}: they hold {live}, and the \
                     {tried} asked would not fit in the {room} free at the OOM even with every \
                     cached byte reused"
                ),
                format!(
                    "free some of the panel's live tensors{keys}: they hold {live}; {tried} \
                     asked, {room} free at the OOM at most"
                ),
                format!("free some of the panel's live tensors{keys}: they hold {live}"),
            ]
        }
        OomAdvice::GpuTooSmall { tried, room } => {
            let (tried, room) = (b(tried), b(room));
            vec![
                format!(
                    "the GPU is too small for {tried}, whatever the settings: {room} would have \
                     been free at the OOM even with every cached byte reused"
                ),
                format!(
                    "the GPU is too small for {tried}, whatever the settings: {room} free at the \
                     OOM at most"
                ),
                format!("the GPU is too small for {tried}, whatever the settings"),
            ]
        }
        OomAdvice::ExpandableOn { non_releasable } => {
            let n = b(non_releasable);
            vec![
                format!(
                    "expandable segments are on: the {n} left shares pages with live tensors, \
                     which no setting returns; freeing those tensors does"
                ),
                format!(
                    "expandable segments on: {n} shares pages with live tensors; only freeing \
                     them returns it"
                ),
                format!("{n} shares pages with live tensors: only freeing them returns it"),
            ]
        }
        OomAdvice::TrySettings {
            reusable,
            max_split_mb,
        } => {
            let try_it = keys
                .first()
                .map(|key| format!(" (press {key} to try)"))
                .unwrap_or_default();
            settings_wordings(&b(reusable), max_split_mb, "", &[try_it])
        }
        OomAdvice::TryVariant {
            reusable,
            max_split_mb,
            presses,
        } => {
            let tails = match (keys.first(), presses) {
                (Some(key), 1) => vec![
                    format!(" (press {key}: the next variant sets them)"),
                    format!(" (press {key}: the next variant)"),
                ],
                (Some(key), n) => vec![
                    format!(" (press {key} {n} times for the variant that sets them)"),
                    format!(" (press {key} {n} times)"),
                ],
                (None, _) => vec![String::new()],
            };
            settings_wordings(&b(reusable), max_split_mb, "", &tails)
        }
        OomAdvice::NoVariantSets {
            reusable,
            max_split_mb,
        } => {
            // The settings field outside the scenario, keys first: they
            // are what to do.
            let tails = match keys.as_slice() {
                [leave, settings] => vec![
                    format!(" ({leave} leaves the scenario, then {settings} sets them)"),
                    format!(" ({leave} leaves, then {settings} sets them)"),
                ],
                _ => vec![String::new()],
            };
            settings_wordings(
                &b(reusable),
                max_split_mb,
                "; no variant of this scenario sets them",
                &tails,
            )
        }
        OomAdvice::HolesTooSmall { stranded, request } => {
            let (stranded, request) = (b(stranded), b(request));
            vec![
                format!(
                    "no setting makes room of the large pool's {stranded}: its holes between live \
                     tensors are too small or too few for {request}; freeing the tensors beside \
                     them does"
                ),
                format!(
                    "holes of {stranded} too small for {request}: no setting helps, freeing \
                     tensors beside them does"
                ),
                format!(
                    "holes of {stranded} too small for {request}: only freeing their neighbours helps"
                ),
            ]
        }
        OomAdvice::SmallPoolOnly { stranded } => {
            let stranded = b(stranded);
            vec![
                format!(
                    "the small pool's {stranded} serves only requests of 1 MiB or less: no \
                     setting lets this one use it"
                ),
                format!(
                    "the small pool's {stranded} serves only requests ≤ 1 MiB: no setting helps"
                ),
            ]
        }
    }
}

/// The wordings of advice to try the settings that would make room of
/// stranded memory, longest first, each setting with its own mechanism
/// (they differ: pages are expandable segments' alone): what
/// `expandable_segments:True` would do with the `reusable` bytes of whole
/// free 20 MiB pages, then, where `max_split_mb` gives a value, what
/// `max_split_size_mb` would do instead, then `note` and each of `tails`
/// (how to try them, longest first); the shortest names
/// `expandable_segments:True` alone, the one PyTorch's message names.
fn settings_wordings(
    reusable: &str,
    max_split_mb: Option<u64>,
    note: &str,
    tails: &[String],
) -> Vec<String> {
    // (what expandable segments do, what max_split_size_mb does), longest
    // first; the short one keeps to two rows at 80 columns with a tail, as
    // the OOM message above needs the rest of an 80×24 panel.
    let forms: Vec<(String, String)> = [
        (
            format!(
                "expandable_segments:True would remap {reusable} of it in whole free 20 MiB pages"
            ),
            max_split_mb.map(|mb| {
                format!(
                    "; max_split_size_mb:{mb} would never split blocks ≥ {mb} MiB: the OOM path \
                     frees cached ones whole"
                )
            }),
        ),
        (
            format!("expandable_segments:True would remap {reusable} of free pages"),
            max_split_mb
                .map(|mb| format!("; max_split_size_mb:{mb} never splits blocks ≥ {mb} MiB")),
        ),
    ]
    .into_iter()
    .map(|(e, m)| (e, m.unwrap_or_default()))
    .collect();
    let mut wordings: Vec<String> = Vec::new();
    for (expandable, max_split) in &forms {
        wordings.extend(
            tails
                .iter()
                .map(|t| format!("{expandable}{max_split}{note}{t}")),
        );
    }
    if let Some(last) = tails.last() {
        wordings.push(format!("{}{last}", forms[1].0));
        wordings.push(format!(
            "expandable_segments:True would reuse {reusable}{last}"
        ));
    }
    // Longest first, whichever setting and tail make them long.
    wordings.sort_by_key(|w| std::cmp::Reverse(w.width()));
    wordings.dedup();
    wordings
}

/// The reasons under the panel's message, longest first: each in full,
/// then each in a few words (one row at 80 columns).
pub fn why_wordings(why: &[Why]) -> Vec<String> {
    let join = |words: fn(Why) -> String| {
        let parts: Vec<String> = why.iter().map(|&w| words(w)).collect();
        format!("why: {}", parts.join("; "))
    };
    let mut wordings = vec![join(Why::text), join(Why::short)];
    if let Some(&first) = why.first() {
        wordings.push(format!("why: {}", first.short()));
    }
    wordings.dedup();
    wordings
}

/// The longest of `wordings` (longest first) that `rows` rows of `width`
/// hold whole, else the shortest cut to them ("…").
fn fitted_wording(
    wordings: &[String],
    width: u16,
    rows: usize,
    style: Style,
) -> Vec<Line<'static>> {
    let fits = wordings
        .iter()
        .find(|w| chrome::wrap(w, width).len() <= rows)
        .or_else(|| wordings.last());
    fits.map_or_else(Vec::new, |w| wrapped(w, width, rows, style))
}

/// The entries `first..=last` of a list (each entry its rows) that `room`
/// rows show: from the top where that reaches `selected`, else ending at
/// it, as the tensor list scrolls; then those after it that still fit.
/// It always holds `selected`, even where that entry alone is taller.
fn list_window(entries: &[Vec<Line<'static>>], selected: usize, room: usize) -> (usize, usize) {
    let Some(end) = entries.len().checked_sub(1) else {
        return (0, 0);
    };
    let selected = selected.min(end);
    let rows = |i: usize| entries[i].len();
    let (mut first, mut last, mut used) = (selected, selected, rows(selected));
    while first > 0 && used + rows(first - 1) <= room {
        first -= 1;
        used += rows(first);
    }
    while last < end && used + rows(last + 1) <= room {
        last += 1;
        used += rows(last);
    }
    (first, last)
}

/// `text` wrapped to `width` on at most `rows` lines, the last one ending
/// in "…" when there was more.
fn wrapped(text: &str, width: u16, rows: usize, style: Style) -> Vec<Line<'static>> {
    cut_wrapped(chrome::wrap(text, width), width, rows, style)
}

/// Wrapped `lines` cut to `rows` as [`wrapped`] cuts them.
fn cut_wrapped(
    mut lines: Vec<String>,
    width: u16,
    rows: usize,
    style: Style,
) -> Vec<Line<'static>> {
    if lines.len() > rows {
        lines.truncate(rows);
        if let Some(last) = lines.last_mut() {
            let cut = format::truncate(&format!("{last} …"), usize::from(width));
            *last = cut;
        }
    }
    lines.into_iter().map(|l| Line::styled(l, style)).collect()
}

/// `line` ending in `ending` within `width` columns: whole words give way
/// to it, not it to them; an ending wider than the row is cut.
fn with_ending(line: &str, ending: &str, width: u16) -> String {
    let width = usize::from(width);
    let mut words: Vec<&str> = line.split(' ').collect();
    while !words.is_empty() && words.join(" ").width() + ending.width() > width {
        words.pop();
    }
    format::truncate(&format!("{}{ending}", words.join(" ")), width)
}

/// A figure in its unit.
fn figure(unit: FigureUnit, v: u64) -> String {
    match unit {
        FigureUnit::Bytes => format::bytes(v),
        FigureUnit::Count => v.to_string(),
        FigureUnit::BasisPoints => format!("{:.1}%", v as f64 / 100.0),
    }
}

/// A signed difference in its unit ("+2.00 MiB", "-1", "0"); percentages
/// differ by points ("+80.0 pt"), which "+80.0%" would misread as a
/// relative change.
fn delta(unit: FigureUnit, d: i128) -> String {
    if d == 0 {
        return "0".to_string();
    }
    let sign = if d > 0 { "+" } else { "-" };
    let magnitude = u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX);
    match unit {
        FigureUnit::BasisPoints => format!("{sign}{:.1} pt", magnitude as f64 / 100.0),
        _ => format!("{sign}{}", figure(unit, magnitude)),
    }
}

/// `text` wrapped at word boundaries to `width`, in `base` style, with the
/// words of the first occurrence of `highlight` in `marked` style.
pub fn highlighted_wrap(
    text: &str,
    highlight: &str,
    width: u16,
    base: Style,
    marked: Style,
) -> Vec<Line<'static>> {
    wrap_marking(text, highlight, width, base, marked).0
}

/// [`highlighted_wrap`], and the rows that hold the whole highlight (from
/// the first): `None` when `text` does not have it.
fn wrap_marking(
    text: &str,
    highlight: &str,
    width: u16,
    base: Style,
    marked: Style,
) -> (Vec<Line<'static>>, Option<usize>) {
    let width = usize::from(width.max(1));
    let mut marked_rows = None;
    let range = text
        .find(highlight)
        .map(|s| s..s + highlight.len())
        .unwrap_or(0..0);
    let mut lines = Vec::new();
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut used = 0usize;
    let mut offset = 0usize;
    for word in text.split(' ') {
        let start = offset;
        offset += word.len() + 1;
        let w = word.chars().count();
        if used > 0 && used + 1 + w > width {
            lines.push(Line::from(std::mem::take(&mut spans)));
            used = 0;
        }
        if used > 0 {
            spans.push(Span::styled(" ", base));
            used += 1;
        }
        let style = if range.contains(&start) {
            marked_rows = Some(lines.len() + 1);
            marked
        } else {
            base
        };
        spans.push(Span::styled(word.to_string(), style));
        used += w;
    }
    if !spans.is_empty() {
        lines.push(Line::from(spans));
    }
    (lines, marked_rows)
}

impl Widget for StressPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.width < 3 || area.height < 3 {
            return;
        }
        let t = self.theme;
        Clear.render(area, buf);
        let title = Some(self.title(false))
            .filter(|l| l.width() + 2 <= usize::from(area.width))
            .unwrap_or_else(|| self.title(true));
        // Whole settings or none past the row's end, never a cut word.
        let title = Line::from(chrome::fit_title(title.spans, usize::from(area.width)));
        let close = self.keymap.stress_key_names(PanelKey::Close).join("/");
        let closes = Line::styled(format!(" {close} closes "), t.dim).right_aligned();
        // The right-hand hint gives way to the title: at 80 columns both
        // cut the active settings to "expandable_segments:Tr", and the
        // status line names F2 anyway.
        let fits = title.width() + closes.width() + 2 <= usize::from(area.width);
        let mut block = Block::new()
            .borders(Borders::TOP)
            .border_style(t.border_focused)
            .title(title);
        if fits {
            block = block.title(closes);
        }
        let inner = block.inner(area);
        block.render(area, buf);
        chrome::mark_cut_title(area, buf);

        let mut head = self.settings_lines(inner.width);
        if let Some(text) = self.panel.size_text() {
            let key = |k| typing_key(TypingMode::StressField, k);
            let (done, cancel) = (key(TypingKey::Done), key(TypingKey::Cancel));
            // As the settings field's: the hint whole or not at all.
            let hints = [
                format!("  {done} sets · {cancel} cancels"),
                format!("  {done} sets"),
            ];
            head.push(self.field_line("set size: ", text, hints, inner.width));
        }
        if let Some(text) = self.panel.settings_text() {
            // The hint gives way to what is typed: shorter, then gone (the
            // status line still lists Enter and Esc). Cut at the edge it
            // read "Enter frees all, new allocator…" at 80 columns.
            let line = self.field_line(
                "PYTORCH_CUDA_ALLOC_CONF=",
                text,
                settings_hints(),
                inner.width,
            );
            head.push(line);
        }
        let histogram = self.panel.histogram_compare();
        let mut figure_rows = 0;
        let compare = self.panel.compare().map(|rows| {
            let mut lines = self.compare_view(&rows, inner.width);
            figure_rows = lines.len();
            if let Some(h) = &histogram {
                lines.extend(self.histogram_lines(h));
            }
            lines
        });
        // The compare figures under the head keep their rows (a table cut
        // short reads as figures that are not there): the head's last lines
        // give way first; the histogram below them may be cut.
        let stacked = if inner.width < SIDE_BY_SIDE_WIDTH {
            figure_rows
        } else {
            0
        };
        // While j/k and d act on the tensor list, its selected tensor keeps
        // a row: after an OOM at 80×24 the head and the compare table took
        // every row, and d freed a tensor nobody could see.
        let list_rows = u16::from(self.panel.selection_acts());
        let rows = usize::from(inner.height.saturating_sub(list_rows))
            .saturating_sub(stacked)
            .max(1);
        head.extend(self.fitted_head(inner.width, rows.saturating_sub(head.len())));
        head.truncate(rows.min(head.len()));
        let head_h = u16::try_from(head.len())
            .unwrap_or(u16::MAX)
            .min(inner.height);
        chrome::lines_at(buf, inner, &head);
        let rest = Rect::new(
            inner.x,
            inner.y + head_h,
            inner.width,
            inner.height - head_h,
        );
        let width = if histogram.is_some() {
            HISTOGRAM_WIDTH
        } else {
            COMPARE_WIDTH
        };
        let (list_area, compare_area) = match &compare {
            Some(_) if inner.width >= SIDE_BY_SIDE_WIDTH => {
                let cw = width.min(rest.width);
                (
                    Rect {
                        width: rest.width - cw - 1,
                        ..rest
                    },
                    Rect::new(rest.right() - cw, rest.y, cw, rest.height),
                )
            }
            Some(lines) => {
                let ch = u16::try_from(lines.len())
                    .unwrap_or(u16::MAX)
                    .min(rest.height.saturating_sub(list_rows));
                (
                    Rect {
                        height: rest.height - ch,
                        ..rest
                    },
                    Rect::new(rest.x, rest.bottom() - ch, rest.width, ch),
                )
            }
            None => (rest, Rect::default()),
        };
        let tensors = self.tensor_lines(usize::from(list_area.height), list_area.width);
        chrome::lines_at(buf, list_area, &tensors);
        if let Some(lines) = &compare {
            let shown = self.cut_histogram(lines, figure_rows, usize::from(compare_area.height));
            chrome::lines_at(buf, compare_area, &shown);
        }
        t.finish(area, buf);
    }
}
