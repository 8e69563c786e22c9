//! The status line: where the data comes from (backend, sample interval,
//! samples taken and dropped), what went wrong (last error, fallback
//! banner), the stress panel's last message while the segment map is shown
//! in its place, and the keys that work in the focused pane. The messages
//! take the rows under the facts and hints that they need to be read whole.

use std::path::Path;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome;
use super::format;
use super::theme::Theme;
use crate::app::capture::CaptureMsg;
use crate::app::keymap::{Action, Keymap, Scrolled, TypingMode};
use crate::app::source::{OomNote, OomSnapshot, ProbeNote, ProbeRow};
use crate::app::state::{AppState, StressView};
use crate::device::sim::{not_started_note, not_started_short_note};

/// How long an OOM leads the status line (ms) before the answers to keys
/// come first again.
const FRESH_OOM_MS: u64 = 60_000;

/// One of the status line's messages.
struct Message {
    /// Its whole wording, wrapped onto the rows it needs.
    whole: Span<'static>,
    /// A wording in one row of the line's width, where the whole one can
    /// take several and has one: for a screen whose rows the whole
    /// messages would overrun.
    one_row: Option<Span<'static>>,
    /// A detail of the message before it (the OOM's note under its
    /// banner, how to get a trace under a snapshot's note that has none),
    /// which gives way first where the rows are too few.
    detail: bool,
}

impl From<Span<'static>> for Message {
    fn from(whole: Span<'static>) -> Self {
        Message {
            whole,
            one_row: None,
            detail: false,
        }
    }
}

/// The status line of one frame: the facts and the key hints, then the
/// messages on the rows they need to be read whole (see
/// [`StatusLine::height`]).
pub struct StatusLine<'a> {
    state: &'a AppState,
    keymap: &'a Keymap,
    theme: &'a Theme,
    /// The height of the screen the line is on (rows), which caps the
    /// messages' rows; `None`: the buffer's.
    screen_h: Option<u16>,
}

impl<'a> StatusLine<'a> {
    pub fn new(state: &'a AppState, keymap: &'a Keymap, theme: &'a Theme) -> Self {
        StatusLine {
            state,
            keymap,
            theme,
            screen_h: None,
        }
    }

    /// On a screen `height` rows tall (the layout's), where the buffer is
    /// larger than the screen drawn.
    pub fn on_screen(mut self, height: u16) -> Self {
        self.screen_h = Some(height);
        self
    }

    /// Rows the status line takes on a screen `width`×`height`: the facts
    /// and key hints, then the messages (answers to keys, the fallback
    /// banner, errors, probe and OOM notes) on as many rows as they need
    /// to be read whole, up to [`chrome::message_rows_cap`].
    pub fn height(&self, width: u16, height: u16) -> u16 {
        let rows = self.message_rows(width, height).len();
        1 + u16::try_from(rows).unwrap_or(u16::MAX)
    }

    /// The messages laid out on rows of `width` cells, at most the cap of a
    /// screen `height` rows tall: whole where they all fit the cap; else
    /// each in its one-row wording where it has one (a written snapshot's
    /// note, its path elided in the middle); else without the OOM's note
    /// under its banner (the banner says the OOM, the note its request).
    /// At 80×24 a fresh OOM and a snapshot's note with its whole path took
    /// six rows of 24 for a minute.
    fn message_rows(&self, width: u16, height: u16) -> Vec<Line<'static>> {
        let sep = Span::styled(self.theme.glyphs().separator, self.theme.dim);
        let cap = chrome::message_rows_cap(height);
        let messages = self.problems(usize::from(width));
        let whole: Vec<Span<'static>> = messages.iter().map(|m| m.whole.clone()).collect();
        let one_row = |m: &Message| m.one_row.clone().unwrap_or_else(|| m.whole.clone());
        let short: Vec<Span<'static>> = messages.iter().map(one_row).collect();
        let fewer: Vec<Span<'static>> =
            messages.iter().filter(|m| !m.detail).map(one_row).collect();
        let rows = |spans: &[Span<'static>]| chrome::message_lines(spans, &sep, width, usize::MAX);
        if let Some(fits) = [&whole, &short, &fewer]
            .into_iter()
            .find(|spans| rows(spans).len() <= cap)
        {
            return chrome::message_lines(fits, &sep, width, cap);
        }
        // The rows run out and the last ends in " …": the one-row
        // wordings leave it its cells, or it took the last of a row a
        // path's elision had filled (".pickl…").
        let narrower = self.problems(usize::from(width.saturating_sub(chrome::MORE_MARK_CELLS)));
        let fewer: Vec<Span<'static>> =
            narrower.iter().filter(|m| !m.detail).map(one_row).collect();
        chrome::message_lines(&fewer, &sep, width, cap)
    }

    /// The variants of the facts (backend, interval, samples, dropped),
    /// longest first: "0 dropped" goes first (nothing was lost), then the
    /// word "every", then the interval.
    fn facts_variants(&self) -> [Line<'static>; 4] {
        let theme = self.theme;
        let s = &self.state.status;
        let sep = self.theme.glyphs().separator;
        let backend = if s.backend.is_empty() {
            "no backend"
        } else {
            s.backend.as_str()
        };
        // Attached live probes (docs/attach.md).
        let probes = self.state.probes.attached_pids().len();
        let build = |dropped_zero: bool, interval: Option<&str>| {
            let mut spans = vec![Span::styled(backend.to_string(), theme.header)];
            if let Some(prefix) = interval {
                spans.push(Span::styled(sep, theme.dim));
                spans.push(Span::raw(format!(
                    "{prefix}{}",
                    format::interval(s.sample_interval_ms)
                )));
            }
            spans.push(Span::styled(sep, theme.dim));
            // Before the first sample there is nothing to count yet.
            spans.push(Span::raw(if s.samples == 0 {
                "first sample…".to_string()
            } else {
                format::count(s.samples, "sample", "samples")
            }));
            if probes > 0 {
                spans.push(Span::styled(sep, theme.dim));
                let plural = if probes == 1 { "" } else { "s" };
                spans.push(Span::styled(format!("{probes} probe{plural}"), theme.key));
            }
            if s.dropped_samples > 0 || dropped_zero {
                let style = if s.dropped_samples > 0 {
                    theme.warning
                } else {
                    theme.text
                };
                spans.push(Span::styled(sep, theme.dim));
                spans.push(Span::styled(
                    format!("{} dropped", s.dropped_samples),
                    style,
                ));
            }
            Line::from(spans)
        };
        [
            build(true, Some("every ")),
            build(false, Some("every ")),
            build(false, Some("")),
            build(false, None),
        ]
    }

    /// The longest facts variant that fits `width` (the shortest, cut,
    /// when none does).
    fn facts(&self, width: usize) -> Line<'static> {
        let [a, b, c, d] = self.facts_variants();
        [a, b, c]
            .into_iter()
            .find(|l| l.width() <= width)
            .unwrap_or(d)
    }

    /// The messages, in order: the answers to keys pressed since an OOM
    /// of the last minute, its banner (with its note in one row), the
    /// older answers, then errors, the fallback banner and the probes'
    /// note. The OOM banner and the fallback banner are each in the longest
    /// of their wordings that fits a row of `width` cells by itself (the
    /// shorter ones keep what matters: the key, the file's name, the
    /// outcome); the others are wrapped whole over the rows they need, a
    /// written snapshot's note with a one-row wording for a short screen
    /// (see [`StatusLine::message_rows`]).
    fn problems(&self, width: usize) -> Vec<Message> {
        let theme = self.theme;
        let s = &self.state.status;
        let mut spans: Vec<Message> = Vec::new();
        let oom = self.state.probes.oom_banner();
        let home = s.home_dir.as_deref();
        // The keys the banner and the capture's note name, as the table
        // binds them; none where the open stress panel takes that key (its
        // `o` frees the oldest tensor): the note then names no key.
        let dashboard_key = |action| {
            self.keymap
                .key_name(action)
                .filter(|k| !(self.state.ui.stress_open && self.keymap.stress_takes(k)))
        };
        let open_oom = dashboard_key(Action::OpenOomSnapshot);
        let open = dashboard_key(Action::OpenSnapshot);
        let capture = self.state.capture.note_at(self.state.now_ms);
        let capture_ms = capture.and(self.state.capture.note.as_ref().map(|(t, _)| *t));
        // The answers to keys, each with when it was given (ms; `None`: a
        // standing message, the stress panel's, older than any OOM).
        let mut answers: Vec<(Option<u64>, Message)> = Vec::new();
        if let Some(n) = &self.state.ui.notice {
            answers.push((
                Some(self.state.ui.notice_ms),
                // A notice answers a key and names keys ("← and → step …").
                Span::styled(theme.key(n).into_owned(), theme.warning).into(),
            ));
        }
        // Behind the segment map the panel that says what its keys did is
        // not drawn: its message comes here (M's "M shows the panel" was
        // said where nobody could see it).
        if let Some(m) = self.panel_message() {
            answers.push((None, Span::styled(m, theme.text).into()));
        }
        // A capture under way (or just done) answers a key too: its path
        // whole where the rows allow, else in one row; under a snapshot
        // without a trace, how to get one, where a row is left for it.
        if let Some(c) = capture {
            answers.push((
                capture_ms,
                Message {
                    whole: Span::styled(capture_note(c, home, open), theme.key),
                    one_row: Some(Span::styled(
                        capture_note_within(c, home, open, width),
                        theme.key,
                    )),
                    detail: false,
                },
            ));
            if matches!(
                c,
                CaptureMsg::Done {
                    has_trace: false,
                    ..
                }
            ) {
                answers.push((
                    capture_ms,
                    Message {
                        detail: true,
                        ..Span::styled(NO_TRACE_HOW, theme.text).into()
                    },
                ));
            }
        }
        // The OOM banner, and right after it the OOM's note in one row when
        // the banner names the same OOM (the note told it again in full,
        // PyTorch's message over three rows at 80 columns).
        let note = self.state.probes.status_note();
        let mut oom_spans: Vec<Message> = Vec::new();
        if let Some(o) = oom {
            oom_spans.push(
                Span::styled(oom_banner_within(o, home, open_oom, width), theme.critical).into(),
            );
        }
        let short_note = match note {
            Some(ProbeNote::Oom(n)) if self.state.probes.banner_names(n) => Some(n),
            _ => None,
        };
        if let Some(n) = short_note {
            oom_spans.push(Message {
                detail: true,
                ..Span::styled(oom_note_within(n, width), theme.warning).into()
            });
        }
        // An OOM seen in the last minute comes right after the answers to
        // keys pressed since it was seen, and before older ones: it is what
        // the user is waiting for, and the answer to "9" or "c" was hidden
        // behind it. After a minute every answer comes first. The order
        // does not change with a key press: an older note stays behind it.
        let lead_since = oom
            .filter(|o| self.state.now_ms.saturating_sub(o.seen_ms) < FRESH_OOM_MS)
            .map(|o| o.seen_ms);
        let (newer, older): (Vec<_>, Vec<_>) =
            answers
                .into_iter()
                .partition(|(t, _)| match (lead_since, t) {
                    (Some(seen), Some(t)) => *t >= seen,
                    (Some(_), None) => false,
                    (None, _) => true,
                });
        spans.extend(newer.into_iter().map(|(_, a)| a));
        spans.extend(oom_spans);
        spans.extend(older.into_iter().map(|(_, a)| a));
        if let Some(e) = &s.last_error {
            spans.push(Span::styled(format!("error: {e}"), theme.critical).into());
        }
        // The longest wording of the fallback banner that fits a row: it
        // stays on screen, and its details are in `vramtop doctor`.
        let tiers = banner_tiers(s.banner.as_deref(), s.banner_short.as_deref());
        let banner = tiers
            .iter()
            .flatten()
            .find(|b| Line::from(b.as_str()).width() <= width)
            .or_else(|| tiers.iter().flatten().last());
        if let Some(b) = banner {
            spans.push(Span::styled(b.clone(), theme.warning).into());
        }
        // Why a simulated process the flags asked for is not listed.
        // Why a simulated process the flags asked for is not listed: the
        // whole wording where the row has room, else the short one.
        let not_started = &self.state.sim_not_started;
        if let Some(n) = not_started_note(not_started)
            .filter(|n| Line::from(n.as_str()).width() <= width)
            .or_else(|| not_started_short_note(not_started))
        {
            spans.push(Span::styled(n, theme.warning).into());
        }
        if let Some(n) = note.filter(|_| short_note.is_none()).map(probe_note) {
            spans.push(Span::styled(n, theme.warning).into());
        }
        spans
    }

    /// The stress panel's last message, in words, while the segment map is
    /// shown in its place.
    fn panel_message(&self) -> Option<String> {
        if !map_in_place_of_panel(self.state) {
            return None;
        }
        super::stress::stress_message(&self.state.stress, self.keymap)
    }

    /// Key hints for the focused pane, as many as fit `width` (at least
    /// the first two: quit and help).
    fn hints(&self, width: usize) -> Line<'static> {
        let theme = self.theme;
        let state = self.state;
        let typing = if state.ui.signal_prompt.is_some() {
            Some(TypingMode::SignalPrompt)
        } else if state.ui.process_filter.is_editing() {
            Some(TypingMode::ProcessFilter)
        } else if state.ui.stress_open && state.stress.editing() {
            Some(TypingMode::StressField)
        } else if state.ui.stress_open && state.stress.picking() {
            Some(TypingMode::ScenarioList)
        } else {
            None
        };
        let detail = state.ui.process_detail.as_ref();
        let all = if let Some(mode) = typing {
            mode.hints()
        } else if let Some(detail) = detail {
            // The detail takes the keys: its own are hinted.
            let scrolled = Scrolled::at(detail.scroll, state.ui.detail_scroll_limit.get());
            self.keymap
                .process_detail_hints(state.process_detail_keys(), scrolled)
        } else if self.state.ui.stress_open {
            self.keymap
                .stress_hints(state.offers().panel, state.ui.stress_view())
        } else {
            self.keymap
                .hints(self.state.ui.focus, &self.state.ui, state.offers())
        };
        chrome::key_hints(&all, width, theme)
    }
}

impl Widget for StatusLine<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        if area.height == 0 || area.width == 0 {
            return;
        }
        // The screen's height sets the cap, as the layout set this area's.
        let screen_h = self.screen_h.unwrap_or(buf.area.height);
        let problems = self.message_rows(area.width, screen_h);
        // The hints stay right-aligned on the first row, leaving room for
        // the shortest facts; the facts take what is left on the left.
        let facts_min = self.facts_variants()[3].width() + 2;
        let hints = self.hints(usize::from(area.width).saturating_sub(facts_min));
        let hints_w = u16::try_from(hints.width()).unwrap_or(u16::MAX);
        let (facts_w, hints_area) = if hints_w + 2 <= area.width {
            let x = area.right() - hints_w;
            (area.width - hints_w - 2, Rect::new(x, area.y, hints_w, 1))
        } else {
            (0, Rect::new(area.x, area.y, area.width, 1))
        };
        let first = match problems.first() {
            // One row only: the problem matters more than the counters.
            Some(p) if area.height < 2 => p.clone(),
            _ => self.facts(usize::from(facts_w)),
        };
        chrome::line_at(
            buf,
            Rect {
                width: facts_w,
                ..area
            },
            0,
            &first,
        );
        hints.render(hints_area, buf);
        if area.height >= 2 {
            let rows = Rect {
                y: area.y + 1,
                height: area.height - 1,
                ..area
            };
            chrome::lines_at(buf, rows, &problems);
        }
        self.theme.finish(area, buf);
    }
}

/// Whether the segment map is shown in place of the open stress panel.
fn map_in_place_of_panel(state: &AppState) -> bool {
    state.ui.stress_open && state.ui.stress_view() == StressView::Map
}

/// The fallback banner's wordings, longest first: as given; without its
/// parenthesised details ("(libnvidia-ml.so.1 not found)"); `short`, the
/// reason in a few words (a driver upgrade without a reboot is common on
/// a shared server, and "doctor says why" hid it at 80 columns); the
/// outcome alone ("showing 1 simulated GPU", before the first ": "),
/// pointing to doctor for the reason. Each differs from the one before;
/// none without a banner.
fn banner_tiers(banner: Option<&str>, short: Option<&str>) -> Vec<Option<String>> {
    let Some(full) = banner else {
        return vec![None];
    };
    let mut plain = String::with_capacity(full.len());
    let mut depth = 0usize;
    for c in full.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    // "installed (x) now" leaves "installed  now": one space, none at the end.
    let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    let outcome = full
        .split_once(": ")
        .map(|(outcome, _)| format!("{outcome}: vramtop doctor says why"));
    let mut tiers = vec![Some(full.to_string())];
    for t in [Some(plain), short.map(str::to_string), outcome]
        .into_iter()
        .flatten()
    {
        if !tiers.contains(&Some(t.clone())) {
            tiers.push(Some(t));
        }
    }
    tiers
}

/// How the OOM banner leads to the snapshot: "O opens", `key` being the
/// one the keymap binds to opening it; "see" where no key does.
fn opens(key: Option<&str>) -> String {
    key.map_or_else(|| "see".to_string(), |k| format!("{k} opens"))
}

/// The OOM banner: which process hit an OOM, the key that opens its
/// snapshot (`key`, as the keymap binds it) and where the snapshot is
/// (under `home`, as `~/…`).
pub fn oom_banner(o: &OomSnapshot, home: Option<&std::path::Path>, key: Option<&str>) -> String {
    let pid = o
        .pid
        .map_or_else(|| format::NA.to_string(), |p| p.to_string());
    let command = o
        .command
        .as_deref()
        .map(|c| format!(" ({})", format::truncate(c, 24)))
        .unwrap_or_default();
    // The key, then the file, then the command line: a narrow terminal
    // cuts the line at its end, and the command (which the pid names
    // already) hid the file's name even at 120 columns.
    let opens = opens(key);
    format!(
        "OOM in pid {pid}: {opens} its snapshot at the OOM: {}{command}",
        path_under_home(&o.path, home)
    )
}

/// [`oom_banner`] in `width` columns where its shorter wordings can: the
/// command left out, then "O opens PATH", then the path with its middle
/// folders left out but its last folder and its name whole, then the
/// file's name alone, so that the file the key opens is never the part
/// cut off.
pub fn oom_banner_within(
    o: &OomSnapshot,
    home: Option<&std::path::Path>,
    key: Option<&str>,
    width: usize,
) -> String {
    let full = oom_banner(o, home, key);
    let opens = opens(key);
    let pid = o
        .pid
        .map_or_else(|| format::NA.to_string(), |p| p.to_string());
    let path = path_under_home(&o.path, home);
    let name = o
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.clone());
    // The last resort keeps the name's start and end (host, pid; time,
    // kind) around an "…": a long host name made even the shortest wording
    // cut the time and the kind off.
    let lead = format!("OOM pid {pid}: {opens} ");
    let room = width.saturating_sub(lead.chars().count());
    // Before the name alone, the path with the folders between its first
    // and its last left out, as the capture's note shortens it, where the
    // name stays whole: over SSH the user types the path, and the name
    // alone did not say which folder it is in.
    let whole = whole_path_under_home(&o.path, home);
    let keeping_folder = |lead: &str| {
        let room = width.saturating_sub(Line::from(lead).width());
        let shown = format::elide_path_keeping_folder(&whole, room);
        let folder_and_name = o
            .path
            .parent()
            .and_then(Path::file_name)
            .map(|f| format!("/{}/{name}", f.to_string_lossy()));
        folder_and_name
            .is_some_and(|tail| shown.ends_with(&tail))
            .then(|| format!("{lead}{shown}"))
    };
    let long_lead = format!("OOM in pid {pid}: {opens} ");
    let shorter = [
        Some(format!(
            "OOM in pid {pid}: {opens} its snapshot at the OOM: {path}"
        )),
        Some(format!("{long_lead}{path}")),
        keeping_folder(&long_lead),
        keeping_folder(&lead),
        Some(format!("{long_lead}{name}")),
        Some(format!("{lead}{name}")),
        Some(format!("{lead}{}", format::elide_middle(&name, room))),
    ];
    std::iter::once(full)
        .chain(shorter.into_iter().flatten())
        .reduce(|fits, next| {
            if Line::from(fits.as_str()).width() <= width {
                fits
            } else {
                next
            }
        })
        .unwrap_or_default()
}

/// A capture's note. A written snapshot's is said whole, key and caveat
/// first (`snapshot of pid N (o opens it), no trace: ~/…`; how to get a
/// trace is a message of its own, [`NO_TRACE_HOW`]), and wraps onto the rows
/// it needs: cut to its name, or its name's middle elided at 80 columns,
/// the file to open was never read. `key` opens a written one, as the
/// keymap binds it.
fn capture_note(note: &CaptureMsg, home: Option<&Path>, key: Option<&str>) -> String {
    let (pid, tail) = match note {
        CaptureMsg::Asking { pid } => (pid, "asking…".to_string()),
        CaptureMsg::Asked { pid } => (pid, "asked the probe…".to_string()),
        CaptureMsg::Writing { pid } => (
            pid,
            "writing it from vramtop's allocator model…".to_string(),
        ),
        CaptureMsg::Started { pid } => (pid, "the probe is taking it…".to_string()),
        CaptureMsg::Failed { pid, why } => (pid, why.clone()),
        CaptureMsg::Done {
            pid,
            path,
            has_trace,
        } => {
            let opens = key.map(|k| format!(" ({k} opens it)")).unwrap_or_default();
            let caveat = if *has_trace { "" } else { NO_TRACE_CAVEAT };
            return format!(
                "snapshot of pid {pid}{opens}{caveat}: {}",
                whole_path_under_home(path, home)
            );
        }
    };
    format!("snapshot of pid {pid}: {tail}")
}

/// [`capture_note`] in one row of `width` cells where it can: whole where
/// it fits, else a written snapshot's with its path shortened to the room
/// the key and the caveat leave: the folders between its first and its
/// last left out, then its name's middle, so that the folder it is in is
/// still said (see [`format::elide_path_keeping_folder`]). The whole path
/// stays in the note at a taller screen, in the log, and in the list of
/// the session's snapshots printed on quitting.
fn capture_note_within(
    note: &CaptureMsg,
    home: Option<&Path>,
    key: Option<&str>,
    width: usize,
) -> String {
    let whole = capture_note(note, home, key);
    let CaptureMsg::Done {
        pid,
        path,
        has_trace,
    } = note
    else {
        return whole;
    };
    if Line::from(whole.as_str()).width() <= width {
        return whole;
    }
    let opens = key.map(|k| format!(" ({k} opens it)")).unwrap_or_default();
    let caveat = if *has_trace { "" } else { NO_TRACE_CAVEAT };
    let lead = format!("snapshot of pid {pid}{opens}{caveat}: ");
    let room = width.saturating_sub(Line::from(lead.as_str()).width());
    let path = whole_path_under_home(path, home);
    format!("{lead}{}", format::elide_path_keeping_folder(&path, room))
}

/// What a capture's note says of a snapshot without a trace (PyTorch's
/// history of allocations): its segments are all it holds.
const NO_TRACE_CAVEAT: &str = ", no trace";

/// How to get a snapshot with a trace, under the note of one without: the
/// probe records PyTorch's history only when started so (docs/attach.md).
const NO_TRACE_HOW: &str = "for a trace, start the probe with --record-history";

/// `path` whole, under `home` written `~/…`.
fn whole_path_under_home(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if !rest.as_os_str().is_empty() => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}

/// `path` as a person reads it on a status line: under `home`, `~/…`, and
/// of a long one (over [`WHOLE_PATH_CHARS`]) only its root, its folder and
/// its name (`~/…/snapshots/vm-17-oom.pickle`). The snapshots folder's path alone
/// took half of an 80-column line and cut the file's name; quitting the
/// dashboard prints the whole paths.
fn path_under_home(path: &Path, home: Option<&Path>) -> String {
    let (root, rest) = match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if !rest.as_os_str().is_empty() => ("~/", rest),
        _ => match path.strip_prefix("/") {
            Ok(rest) => ("/", rest),
            Err(_) => ("", path),
        },
    };
    let whole = format!("{root}{}", rest.display());
    if whole.chars().count() <= WHOLE_PATH_CHARS {
        return whole;
    }
    let parts: Vec<_> = rest.iter().collect();
    match parts.as_slice() {
        [_, .., folder, name] if parts.len() > 2 => format!(
            "{root}…/{}/{}",
            Path::new(folder).display(),
            Path::new(name).display()
        ),
        _ => whole,
    }
}

/// The longest path [`path_under_home`] writes whole (characters).
const WHOLE_PATH_CHARS: usize = 32;

/// The status line's words for a note about the probes.
pub fn probe_note(note: ProbeNote<'_>) -> String {
    let who = |r: &ProbeRow| match r.pid {
        Some(p) => format!("probe pid {p}"),
        None => format!("probe {}", r.socket),
    };
    match note {
        ProbeNote::Oom(oom) => oom_note(oom),
        ProbeNote::Problem(r) => {
            format!("{}: {}", who(r), r.problem.as_deref().unwrap_or_default())
        }
        ProbeNote::Ended(r) => format!("{}: {}", who(r), r.status),
    }
}

/// "OOM in pid 7 on GPU 0: tried to allocate 1.00 GiB"; one the probe
/// told of on connecting says so: "OOM in pid 7 on GPU 0, before vramtop
/// connected: …" (it did not happen now).
fn oom_note(o: &OomNote) -> String {
    let pid = o
        .pid
        .map_or_else(|| format::NA.to_string(), |p| p.to_string());
    let gpu = o
        .gpu
        .map_or_else(|| format!("cuda:{}", o.cuda_device), |g| format!("GPU {g}"));
    let detail = if o.message.is_empty() {
        o.alloc_bytes.map_or_else(
            || "out of memory".to_string(),
            |b| format!("tried to allocate {}", format::bytes(b)),
        )
    } else {
        o.message.clone()
    };
    let when = if o.earlier {
        ", before vramtop connected"
    } else {
        ""
    };
    format!("OOM in pid {pid} on {gpu}{when}: {detail}")
}

/// [`oom_note`] in one row of `width` cells, under a banner that names the
/// same OOM: whole where it fits, else [`oom_note_short`]. PyTorch's whole
/// message took three rows at 80 columns to say the OOM a second time.
fn oom_note_within(o: &OomNote, width: usize) -> String {
    let full = oom_note(o);
    if Line::from(full.as_str()).width() <= width {
        full
    } else {
        oom_note_short(o)
    }
}

/// [`oom_note`] with the request ("tried to allocate 1.00 GiB", from the
/// figure, else from PyTorch's message) in place of PyTorch's message.
fn oom_note_short(o: &OomNote) -> String {
    let request = o
        .alloc_bytes
        .map(|b| format!("tried to allocate {}", format::bytes(b)))
        .or_else(|| request_in(&o.message))
        .unwrap_or_else(|| "out of memory".to_string());
    oom_note(&OomNote {
        message: request,
        ..o.clone()
    })
}

/// "tried to allocate 1.00 GiB" out of PyTorch's OOM message ("CUDA out of
/// memory. Tried to allocate 1.00 GiB. GPU 0 has …"): the words up to the
/// sentence's end.
fn request_in(message: &str) -> Option<String> {
    const WORDS: &str = "tried to allocate ";
    let at = message.to_ascii_lowercase().find(WORDS)?;
    let rest = message.get(at.checked_add(WORDS.len())?..)?;
    let size: String = rest
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let size = size.trim_end_matches(['.', ';', ',']);
    (!size.is_empty()).then(|| format!("{WORDS}{size}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_path_under_home_is_written_with_a_tilde_and_others_whole() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            path_under_home(Path::new("/home/u/.local/s/a.pickle"), home),
            "~/.local/s/a.pickle"
        );
        // A long one: its root, folder and name.
        let deep = "/home/u/.local/state/vramtop/snapshots/vm-17-oom.pickle";
        assert_eq!(
            path_under_home(Path::new(deep), home),
            "~/…/snapshots/vm-17-oom.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("/var/lib/vramtop/state/s/vm-17-oom.pickle"), home),
            "/…/s/vm-17-oom.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("rel/a.pickle"), home),
            "rel/a.pickle"
        );
        assert_eq!(
            path_under_home(Path::new("/tmp/a.pickle"), home),
            "/tmp/a.pickle"
        );
        // "/home/user" is not under "/home/u": whole components only.
        assert_eq!(
            path_under_home(Path::new("/home/user/a.pickle"), home),
            "/home/user/a.pickle"
        );
        assert_eq!(path_under_home(Path::new("/home/u"), home), "/home/u");
        assert_eq!(path_under_home(Path::new("/home/u/a"), None), "/home/u/a");
    }

    fn done(path: &str, has_trace: bool) -> CaptureMsg {
        CaptureMsg::Done {
            pid: 7,
            path: PathBuf::from(path),
            has_trace,
        }
    }

    #[test]
    fn a_written_snapshot_is_said_with_its_key_caveat_and_path() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            capture_note(&done("/home/u/s/a.pickle", true), home, Some("o")),
            "snapshot of pid 7 (o opens it): ~/s/a.pickle"
        );
        let note = capture_note(&done("/s/a.pickle", false), None, Some("o"));
        assert!(
            note.contains("/s/a.pickle") && note.contains("no trace"),
            "{note}"
        );
        assert_eq!(
            capture_note(&CaptureMsg::Started { pid: 7 }, None, Some("o")),
            "snapshot of pid 7: the probe is taking it…"
        );
        assert_eq!(
            capture_note(&CaptureMsg::Asking { pid: 7 }, None, Some("o")),
            "snapshot of pid 7: asking…"
        );
    }

    #[test]
    fn a_written_snapshots_note_says_its_whole_path_after_the_key_and_caveat() {
        let path = "/home/u/.local/state/vramtop/snapshots/host-1234-20261206-101500-oom.pickle";
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            capture_note(&done(path, false), home, Some("o")),
            format!(
                "snapshot of pid 7 (o opens it){NO_TRACE_CAVEAT}: \
                 ~/.local/state/vramtop/snapshots/host-1234-20261206-101500-oom.pickle"
            )
        );
        let elsewhere = "/var/lib/vramtop/state/snapshots/host-1234-oom.pickle";
        assert_eq!(
            capture_note(&done(elsewhere, true), home, Some("o")),
            format!("snapshot of pid 7 (o opens it): {elsewhere}")
        );
    }

    #[test]
    fn a_written_snapshots_one_row_note_keeps_the_folder_it_is_in_at_80_columns() {
        let home = Some(Path::new("/home/u"));
        let path = "/home/u/.local/state/vramtop/snapshots/host-1234-20261206-101500-oom.pickle";
        let width = |s: &str| Line::from(s).width();
        // With a trace or without, the folder the file is in and the
        // root it is under are said, and the name's start and end: it read
        // "…/host-1234-…" at 80 columns, with no word of where that was.
        for (has_trace, lead) in [
            (
                true,
                "snapshot of pid 7 (o opens it): ~/…/snapshots/host-1234-",
            ),
            (
                false,
                "snapshot of pid 7 (o opens it), no trace: ~/…/snapshots/host-1234-",
            ),
        ] {
            let note = capture_note_within(&done(path, has_trace), home, Some("o"), 80);
            assert!(width(&note) <= 80, "{note}");
            assert!(note.starts_with(lead), "{note}");
            assert!(
                note.contains("-20") && note.ends_with("-oom.pickle"),
                "{note}"
            );
        }
        // Where the folders between fit, only some give way.
        let note = capture_note_within(&done(path, true), home, Some("o"), 100);
        assert_eq!(
            note,
            "snapshot of pid 7 (o opens it): ~/.local/state/…/snapshots/\
             host-1234-20261206-101500-oom.pickle"
        );
        // Whole where it fits; other notes as they are.
        assert_eq!(
            capture_note_within(&done(path, false), home, Some("o"), 400),
            capture_note(&done(path, false), home, Some("o"))
        );
        let failed = CaptureMsg::Failed {
            pid: 7,
            why: "the probe timed out".to_string(),
        };
        assert_eq!(
            capture_note_within(&failed, home, Some("o"), 10),
            "snapshot of pid 7: the probe timed out"
        );
    }

    fn oom(message: &str, alloc_bytes: Option<u64>) -> OomNote {
        OomNote {
            seen_ms: 0,
            pid: Some(8007),
            gpu: Some(0),
            cuda_device: 0,
            message: message.to_string(),
            alloc_bytes,
            earlier: false,
        }
    }

    #[test]
    fn an_ooms_short_note_says_the_request_not_pytorchs_whole_message() {
        let message = "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total \
                       capacity of 79.19 GiB of which 512.00 MiB is free.";
        assert_eq!(
            oom_note_short(&oom(message, Some(1 << 30))),
            "OOM in pid 8007 on GPU 0: tried to allocate 1.00 GiB"
        );
        // Without the figure, the request as PyTorch words it.
        assert_eq!(
            oom_note_short(&oom(message, None)),
            "OOM in pid 8007 on GPU 0: tried to allocate 1.00 GiB"
        );
        assert_eq!(
            oom_note_short(&oom("", None)),
            "OOM in pid 8007 on GPU 0: out of memory"
        );
        // Whole where it fits the row.
        let whole = format!("OOM in pid 8007 on GPU 0: {message}");
        assert_eq!(oom_note_within(&oom(message, Some(1 << 30)), 200), whole);
        assert_eq!(
            oom_note_within(&oom(message, Some(1 << 30)), 80),
            "OOM in pid 8007 on GPU 0: tried to allocate 1.00 GiB"
        );
    }
}
