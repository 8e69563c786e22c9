//! The viewer's status line: where the cursor is (event, action,
//! stream, time, peaks, marks, filters), or the notice answering the last
//! key wrapped whole over the rows it needs, and the keys that fit.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

use super::{elapsed, filters};
use crate::app::keymap::Keymap;
use crate::app::viewer::{MarkHere, ViewerAction, ViewerState};
use crate::snapshot::TraceEntry;
use crate::snapshot::peak::event_at_index;
use crate::snapshot::scrub::EndMismatch;
use crate::ui::chrome;
use crate::ui::format;
use crate::ui::theme::Theme;

/// An event in words, the longest form first: "alloc 4.00 MiB at 0x7f…",
/// then without what a narrow line can spare ("alloc 4.00 MiB": the
/// address, an OOM's free bytes), so that the action and size stay. An
/// OOM whose request is not the segment PyTorch's error message names
/// ("Tried to allocate 20.00 MiB" of a 9.13 MiB request, `segment`)
/// says that segment in every form, the message's figure in the longer
/// ones: the banner's and the viewer's two sizes read as one story.
fn describe_event(e: &TraceEntry, segment: Option<u64>) -> Vec<String> {
    let action = e.action.as_str();
    let size = format::bytes(e.size);
    match e.action {
        crate::alloc::TraceAction::Oom => {
            let free = format::bytes(e.addr);
            match segment.map(format::bytes) {
                Some(segment) => vec![
                    format!(
                        "{action} {size} requested ({segment} segment, as PyTorch's message \
                         says), {free} free on the device"
                    ),
                    format!(
                        "{action} {size} requested ({segment} segment, as PyTorch's message says)"
                    ),
                    format!("{action} {size} requested ({segment} segment)"),
                ],
                None => vec![
                    format!("{action} {size} requested, {free} free on the device"),
                    format!("{action} {size} requested"),
                ],
            }
        }
        crate::alloc::TraceAction::Snapshot => vec![format!("{action} ({size} active)")],
        crate::alloc::TraceAction::Annotate => vec![action.to_string()],
        _ => vec![
            format!("{action} {size} at {:#x}", e.addr),
            format!("{action} {size}"),
        ],
    }
}

/// "1 block differs", "2 blocks and 1 segment differ": what differs
/// between the file's recorded final state and where its trace leads.
fn mismatch_words(m: EndMismatch) -> String {
    let blocks = format::count_of(m.blocks, "block", "blocks");
    let segments = format::count_of(m.segments, "segment", "segments");
    let what = match (m.blocks, m.segments) {
        (_, 0) => blocks,
        (0, _) => segments,
        _ => format!("{blocks} and {segments}"),
    };
    let verb = if m.blocks.saturating_add(m.segments) == 1 {
        "differs"
    } else {
        "differ"
    };
    format!("{what} {verb}")
}

/// "reading trace: X of Y", while the viewer shows a file's segments stage;
/// once every byte is parsed, that the events are being built (seconds on a
/// GB file, which a "Y of Y" would show as stuck).
pub fn trace_reading_text(v: &ViewerState) -> Option<String> {
    v.trace_reading.map(|r| {
        if r.total > 0 && r.read >= r.total {
            format!(
                "reading trace: {} parsed, building the events",
                format::bytes(r.total)
            )
        } else {
            format!(
                "reading trace: {} of {}",
                format::bytes(r.read.min(r.total)),
                format::bytes(r.total)
            )
        }
    })
}

/// How readily a form of a status part goes when the line is too narrow:
/// the lowest first. Where the cursor is (its event number, a peak it is
/// at), the event's action and size, then the marks stay longest: they
/// say what the key pressed did. The filters (also in the breakdown's
/// title) next; then the longer words of what stays ("(#i)", "peak
/// alloc" for "pk alloc", both peaks' or neither); the event's address;
/// the event's time; the peaks elsewhere, which the GPUs row shows too
/// ("pk 534 MiB @145"); its stream (almost always the default one) first
/// of all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    Stream,
    Peaks,
    Time,
    Address,
    Words,
    Filters,
    Event,
    Always,
}

/// The levels a narrow line adds, the most important first.
const ADDED_IN_ORDER: [Keep; 7] = [
    Keep::Event,
    Keep::Filters,
    Keep::Words,
    Keep::Address,
    Keep::Time,
    Keep::Peaks,
    Keep::Stream,
];

/// One part of the status text: its forms, the longest first, each with
/// how readily it goes (a shorter form goes later than a longer one).
struct Part {
    forms: Vec<(Keep, String)>,
    /// A peak's part: its words ("peak alloc" or "pk alloc") go long or
    /// short with the other peak's, never one of each on a line.
    peak: bool,
}

impl Part {
    fn one(keep: Keep, text: String) -> Part {
        Part::of(vec![(keep, text)])
    }

    /// A part other than a peak's, of `forms`.
    fn of(forms: Vec<(Keep, String)>) -> Part {
        Part { forms, peak: false }
    }

    /// The event: its action and size, the rest of its words.
    fn is_event(&self) -> bool {
        self.forms.iter().any(|(keep, _)| *keep == Keep::Event)
    }
}

/// The parts of the status text in their order.
fn status_parts(v: &ViewerState) -> Vec<Part> {
    let Some(d) = v.device() else {
        return vec![Part::one(Keep::Always, format!("{}: no GPUs", v.file))];
    };
    let n = d.len();
    let c = v.cursor();
    let mut parts = Vec::new();
    match v.current_event() {
        Some(e) => {
            // The event's count from 1, as `--summary` gives peaks, and its
            // index in the file's trace, as `replay` and what-if name events
            // (the count less one: a narrow line can spare it).
            let index = c.saturating_sub(1);
            parts.push(Part::of(vec![
                (Keep::Words, event_at_index(index, n)),
                (Keep::Always, format!("event {c}/{n}")),
            ]));
            // The last (shortest) form is the action and size; of three,
            // the middle one goes with the longer words.
            let segment = crate::snapshot::summary::oom_segment(
                e.size,
                v.scrub.snapshot.allocator_settings.as_ref(),
            );
            let words = describe_event(e, segment);
            let last = words.len().saturating_sub(1);
            let forms = words
                .into_iter()
                .enumerate()
                .map(|(i, w)| {
                    (
                        if i == last {
                            Keep::Event
                        } else if i > 0 {
                            Keep::Words
                        } else {
                            Keep::Address
                        },
                        w,
                    )
                })
                .collect();
            parts.push(Part::of(forms));
            // Which code asked for an OOM's request: the frame that asked
            // (its file and line on a narrow line); Enter lists its stack.
            if let Some(stack) = v.oom_stack() {
                parts.push(Part::of(match (&stack.site, stack.short_site()) {
                    (Some(site), Some(short)) => vec![
                        (Keep::Words, format!("asked by {site}")),
                        (Keep::Event, format!("by {short}")),
                    ],
                    _ => vec![
                        (
                            Keep::Words,
                            stack.no_stack().unwrap_or_default().to_string(),
                        ),
                        (Keep::Event, "no stack".to_string()),
                    ],
                }));
            }
            // At the end of a trace that leads elsewhere the panes show the
            // file's recorded state, not the last event's effect: said
            // whatever the width, beside the event it follows.
            if let Some(m) = v.end_mismatch_here() {
                let differ = mismatch_words(m);
                parts.push(Part::of(vec![
                    (
                        Keep::Words,
                        format!("the trace does not lead to the file's final state: {differ}"),
                    ),
                    (Keep::Always, format!("trace leads elsewhere: {differ}")),
                ]));
            }
            parts.push(Part::one(Keep::Stream, format!("stream {}", e.stream)));
            let first = d.events().first().and_then(|e| e.time_us());
            parts.push(Part::one(
                Keep::Time,
                elapsed(first, e.time_us(), d.whole_ms()),
            ));
        }
        None if n == 0 => parts.push(Part::one(
            Keep::Always,
            match (trace_reading_text(v), &v.trace_error) {
                (Some(reading), _) => format!("the final state · {reading}"),
                (None, Some(_)) => "the final state · the trace could not be read".to_string(),
                (None, None) => "no trace: the final state".to_string(),
            },
        )),
        None => {
            parts.push(Part::one(
                Keep::Always,
                format!("event 0/{n} · before the first event"),
            ));
            // Blocks live before the first event: the trace's ring buffer
            // began mid-run, and this state was rebuilt from the file's
            // final one (what `replay` says in its `inferred:` lines).
            if d.starts_mid_run() {
                parts.push(Part::of(vec![
                    (
                        Keep::Words,
                        "start inferred: the trace begins mid-run".to_string(),
                    ),
                    (Keep::Event, "start inferred".to_string()),
                ]));
            }
        }
    }
    if let Some(p) = v.device_peaks().filter(|_| n > 0) {
        // A peak the cursor is at (after P or R) stays on the narrowest
        // line, "here" whole: it is what the key was pressed for. Its
        // short form takes the GPUs row's words ("pk", "res", which the
        // help defines).
        let here = |long: &str, short: &str, bytes: u64| Part {
            forms: vec![
                (Keep::Words, format!("{long} {} here", format::bytes(bytes))),
                (
                    Keep::Always,
                    format!("{short} {} here", format::bytes(bytes)),
                ),
            ],
            peak: true,
        };
        let elsewhere = |words: &str, bytes: u64, cursor: usize| Part {
            forms: vec![(
                Keep::Peaks,
                format!("{words} {} @{cursor}", format::bytes(bytes)),
            )],
            peak: true,
        };
        parts.push(if p.allocated.cursor == c {
            here("peak alloc", "pk alloc", p.allocated.bytes)
        } else {
            elsewhere("peak alloc", p.allocated.bytes, p.allocated.cursor)
        });
        // `B`'s moment, said where the cursor is at it: the event's own
        // words say an allocation, not that it is the biggest.
        if p.biggest_allocation.is_some_and(|b| b.cursor == c) {
            parts.push(Part::one(
                Keep::Always,
                "the biggest allocation in the trace".to_string(),
            ));
        }
        // The reserved peak names itself in full where the allocated one
        // is not here too.
        parts.push(match (p.reserved.cursor == c, p.allocated.cursor == c) {
            (true, false) => here("peak reserved", "pk res", p.reserved.bytes),
            (true, true) => here("reserved", "res", p.reserved.bytes),
            (false, _) => elsewhere("reserved", p.reserved.bytes, p.reserved.cursor),
        });
    }
    if v.mark_a.is_some() || v.mark_b.is_some() {
        // A mark set on another GPU is no moment of this one's trace: it
        // says where it is rather than an event number of that trace.
        let show = |m| match v.mark_here(m) {
            MarkHere::Unset => "-".to_string(),
            MarkHere::Here(c) => c.to_string(),
            MarkHere::Elsewhere(g) => format!("(on GPU {g})"),
        };
        // After the event's action in the line, so on a narrow line the
        // action (what the key stepped to) keeps its room first; setting a
        // mark says so on the notice line anyway.
        parts.push(Part::one(
            Keep::Event,
            format!("A {} B {}", show(v.mark_a), show(v.mark_b)),
        ));
    }
    // One part: "only stream 0 · large pool" reads as one filter of
    // both, and goes (or stays) whole on a narrow line. With both on, the
    // word "pool" goes first: beside a peak the cursor is at, 80 columns
    // have room for "only stream 0 · large" and not for the whole.
    let shown = filters(v);
    if !shown.is_empty() {
        let mut forms = vec![(Keep::Filters, format!("only {}", shown.join(" · ")))];
        if let (Some(s), Some(p)) = (v.stream_filter, v.pool_filter) {
            forms[0].0 = Keep::Words;
            forms.push((
                Keep::Filters,
                format!("only stream {s} · {}", super::pool_words_short(p)),
            ));
        }
        parts.push(Part::of(forms));
    }
    parts
}

/// The status text: "event i/N · action … · stream s · t+… · filters".
pub fn status_text(v: &ViewerState) -> String {
    join(
        status_parts(v)
            .iter()
            .filter_map(|p| p.forms.first().map(|(_, t)| t.as_str())),
    )
}

/// [`status_text`] for a row of `width` columns: the parts that always
/// stay (in their shortest form), then, level by level in the order of
/// [`ADDED_IN_ORDER`], each part's longer form of that level where the line
/// still fits (what still does not fit is cut).
pub fn status_text_within(v: &ViewerState, width: usize) -> String {
    let parts = status_parts(v);
    // Per part, the index of its form shown, if any.
    let text = |shown: &[Option<usize>]| {
        join(
            parts
                .iter()
                .zip(shown)
                .filter_map(|(p, s)| s.and_then(|i| p.forms.get(i)).map(|(_, t)| t.as_str())),
        )
    };
    let mut shown: Vec<Option<usize>> = parts
        .iter()
        .map(|p| p.forms.iter().position(|(keep, _)| *keep == Keep::Always))
        .collect();
    for level in ADDED_IN_ORDER {
        // A stream without the event it belongs to reads as a filter.
        let event_shown = parts
            .iter()
            .zip(&shown)
            .any(|(p, s)| s.is_some() && p.is_event());
        if level == Keep::Stream && !event_shown {
            continue;
        }
        // Each part's form of this level that is longer than the one shown
        // (forms go longest first).
        let upgrades: Vec<(usize, usize)> = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let form = p.forms.iter().position(|(keep, _)| *keep == level)?;
                shown[i].is_none_or(|s| form < s).then_some((i, form))
            })
            .collect();
        // The peaks' parts come together, where the first of them comes:
        // the peaks elsewhere read as a pair (one alone would seem the only
        // peak), both or neither; so do the peaks' longer words ("peak
        // alloc" beside "res" reads as two kinds of figure). Other parts
        // come one by one, in order.
        let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut peaks_at: Option<usize> = None;
        for up in upgrades {
            let peak = parts.get(up.0).is_some_and(|p| p.peak);
            match peaks_at.filter(|_| peak).and_then(|g| groups.get_mut(g)) {
                Some(group) => group.push(up),
                None => {
                    if peak {
                        peaks_at = Some(groups.len());
                    }
                    groups.push(vec![up]);
                }
            }
        }
        for group in groups {
            let mut with = shown.clone();
            for &(i, form) in &group {
                with[i] = Some(form);
            }
            if text(&with).chars().count() <= width {
                shown = with;
            }
        }
    }
    text(&shown)
}

fn join<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts.collect::<Vec<_>>().join(" · ")
}

/// The status line's rows above the key hints on a screen `width`×`height`:
/// the notice that answered the last key, wrapped whole (up to
/// [`chrome::message_rows_cap`] rows), or the position on one row.
pub(super) fn first_rows(v: &ViewerState, width: u16, height: u16) -> Vec<Line<'static>> {
    first_rows_styled(v, width, height, &Theme::monochrome())
}

fn first_rows_styled(
    v: &ViewerState,
    width: u16,
    height: u16,
    theme: &Theme,
) -> Vec<Line<'static>> {
    match &v.app.ui.notice {
        Some(n) => chrome::message_lines(
            &[Span::styled(n.clone(), theme.warning)],
            &Span::raw(""),
            width,
            chrome::message_rows_cap(height),
        ),
        None => vec![Line::styled(
            status_text_within(v, usize::from(width)),
            theme.header,
        )],
    }
}

/// Draws the status line in `area` of a screen `screen_h` rows tall (the
/// layout's, which caps the notice's rows).
pub(super) fn render_status(
    area: Rect,
    screen_h: u16,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    if area.height == 0 {
        return;
    }
    let sites = v.sites_take_keys();
    // The comparison takes the keys over the block detail too.
    let mut all = if v.compare.is_some() {
        keymap.compare_hints(v.compare_scrolled())
    } else if v.detail_open {
        keymap.detail_hints(v.detail_scrolled(), v.detail_blocks())
    } else {
        // Only the keys that can do something in this file.
        keymap.viewer_hints_offered(sites, |a| v.hinted(a))
    };
    if v.returns_to_dashboard {
        // Opened from the dashboard: `q` goes back there, not out of vramtop.
        for hint in all.iter_mut().filter(|h| h.1 == "quit") {
            hint.1 = "back";
        }
    }
    // On an OOM event Enter shows the failed request's stack: with the
    // sites pane taking the keys, on its OOM row (elsewhere it expands
    // the selected site).
    let oom_enter = if sites {
        v.sites_oom_selected && v.at_oom()
    } else {
        v.at_oom() && !v.detail_open
    };
    if oom_enter && v.compare.is_none() {
        let enter = keymap.viewer_key_name(if sites {
            ViewerAction::ExpandSite
        } else {
            ViewerAction::BlockDetail
        });
        for hint in all.iter_mut().filter(|h| Some(h.0) == enter) {
            hint.1 = "OOM stack";
        }
    }
    if area.height == 1 {
        one_row(area, buf, v, &all, theme);
        return;
    }
    // Why the last key did nothing, in place of the position until the
    // next key, on as many rows as it needs; the hints on the last row.
    let first = first_rows_styled(v, area.width, screen_h, theme);
    let hints_row = area.height - 1;
    chrome::lines_at(buf, area, &first[..first.len().min(usize::from(hints_row))]);
    let hints = chrome::key_hints(&all, usize::from(area.width), theme);
    chrome::line_at(buf, area, hints_row, &hints);
    theme.finish(area, buf);
}

/// The status line in a one-row `area`: the notice (or the position)
/// read whole, ending in "…" only where it alone is wider than the row,
/// and the key hints `all` that fit beside it, two cells apart, or none.
/// Drawn on one row, the hints covered the notice's start and left its
/// tail showing after them.
fn one_row(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    all: &[(&'static str, &'static str)],
    theme: &Theme,
) {
    let first = match &v.app.ui.notice {
        Some(n) => Line::styled(n.clone(), theme.warning),
        None => Line::styled(status_text_within(v, usize::from(area.width)), theme.header),
    };
    chrome::line_at(buf, area, 0, &first);
    let room = usize::from(area.width).saturating_sub(first.width().saturating_add(2));
    // `key_hints` keeps quit and help even where they do not fit.
    let hints = chrome::key_hints(all, room, theme);
    if hints.width() > 0 && hints.width() <= room {
        let w = u16::try_from(hints.width()).unwrap_or(u16::MAX);
        let row = Rect::new(area.right().saturating_sub(w), area.y, w, 1);
        chrome::line_at(buf, row, 0, &hints);
    }
    theme.finish(area, buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    use crate::snapshot::capture::snapshot_of;

    /// A viewer on a one-allocation trace: every viewer key is hinted.
    fn viewer() -> ViewerState {
        let mut m =
            CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
        m.record_history(Some(100));
        m.malloc(4 << 20, 0).expect("fits");
        ViewerState::new("one.pickle".to_string(), snapshot_of(&m, 0))
    }

    /// The bottom row of an 80×24 screen whose status line has one row.
    fn one_row_of(v: &ViewerState) -> String {
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 24));
        let area = Rect::new(0, 23, 80, 1);
        render_status(
            area,
            24,
            &mut buf,
            v,
            &Keymap::default(),
            &Theme::monochrome(),
        );
        (0..80).map(|x| buf[(x, 23)].symbol()).collect()
    }

    #[test]
    fn a_one_row_status_line_reads_the_notice_whole_and_keeps_only_the_hints_beside_it() {
        let mut v = viewer();
        // 72 cells of 80: no room for even quit and help beside it. The
        // hints were drawn over its start, its tail showing after them.
        let long = "x: C++ frames now listed in expanded sites (w sites, Enter expands one)";
        v.app.ui.notice = Some(long.to_string());
        assert_eq!(one_row_of(&v).trim_end(), long);
        // A short notice keeps the hints that fit beside it, at the end.
        let short = "A = event 1; M marks B";
        v.app.ui.notice = Some(short.to_string());
        let row = one_row_of(&v);
        assert!(row.starts_with(&format!("{short}  ")), "{row}");
        let hints = row[short.len()..].trim();
        assert!(hints.starts_with("q quit  ? help  "), "{row}");
        assert!(row.ends_with(hints), "{row}");
        // Wider than the row alone: cut with "…", and no hints.
        let wider = "nothing to step through: the trace could not be read: /tmp/cut.pickle: \
                     truncated pickle: input ends at byte 1500000 inside FRAME";
        v.app.ui.notice = Some(wider.to_string());
        let row = one_row_of(&v);
        assert!(row.starts_with("nothing to step through: "), "{row}");
        assert!(row.ends_with('…'), "{row}");
        assert!(!row.contains("q quit"), "{row}");
    }
}
