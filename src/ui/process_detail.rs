//! The process detail (Enter in Processes), drawn over the panes: what
//! the dashboard knows about one process, in words and units: its pid,
//! parent (and whether that parent is a GPU process, the pane's "own CUDA
//! context!"), user, whole command line (wrapped: the pane cuts it),
//! whether it is tagged; per GPU it uses the memory the driver gives it
//! and its %SM; the host's %CPU and memory; its live probe and its
//! allocator's figures where one is attached; and the keys that act on it
//! from here, named from the keymap. A process no GPU lists any more is
//! said to have ended, with what was known of it. Figures not known read
//! "n/a", never 0: the pane's narrow columns say "-" for a usage figure
//! not measured, but here one beside a memory "n/a" read as two different
//! states ("memory n/a, %SM -"); figures on a row are apart by commas, not
//! "·", which `--ascii` draws as "-". Taller than the screen,
//! it scrolls, and its bottom border says which rows are shown.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::chrome;
use super::format::{self, NA};
use super::fragmentation::{SEGMENTS_NOT_YET, segments_age_words};
use super::theme::Theme;
use crate::app::keymap::{Action, Keymap};
use crate::app::process_detail::DetailGpu;
use crate::app::state::{AllocatorView, AppState, SegmentsAge};

/// The widest the popup grows (columns, border included).
const MAX_WIDTH: u16 = 100;
/// Cells of the label column ("allocator " and its space).
const LABEL_CELLS: usize = 11;

/// The rows of the detail of the open process at `width` cells (inside
/// the popup's border); empty while no detail is open.
pub fn process_detail_lines(
    state: &AppState,
    keymap: &Keymap,
    theme: &Theme,
    width: u16,
) -> Vec<Line<'static>> {
    let Some(facts) = state.process_detail_facts() else {
        return Vec::new();
    };
    let Some(detail) = state.ui.process_detail.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let rows = |out: &mut Vec<Line<'static>>, label: &str, text: &str, style: Style| {
        labelled(out, label, text, style, width, theme);
    };
    // A figure the process may not have: "n/a", dimmed, where unknown.
    let known_or_na = |out: &mut Vec<Line<'static>>, label: &str, text: Option<&str>| {
        let style = if text.is_some() {
            theme.text
        } else {
            theme.dim
        };
        labelled(out, label, text.unwrap_or(NA), style, width, theme);
    };
    if let Some(ended) = facts.ended_ms {
        let ago = format::seconds(state.now_ms.saturating_sub(ended) / 1000);
        let text = format!(
            "ended {ago} ago: no GPU lists pid {} any more (what it was is below)",
            facts.pid
        );
        for l in chrome::wrap(&text, width) {
            out.push(Line::styled(l, theme.warning));
        }
    }
    let pid = if facts.simulated {
        format!("{} (simulated: its pid is made up)", facts.pid)
    } else if facts.recorded {
        format!("{} (recorded: not a live process here)", facts.pid)
    } else {
        facts.pid.to_string()
    };
    rows(&mut out, "pid", &pid, theme.text);
    let process = facts.process();
    match facts.parent {
        Some((parent, command)) if facts.parent_on_gpu => {
            let command = command.map(|c| format!(" {c}")).unwrap_or_default();
            rows(
                &mut out,
                "parent",
                &format!("{parent}{command}"),
                theme.text,
            );
            rows(
                &mut out,
                "",
                "own CUDA context! its parent is a GPU process too: each holds a CUDA \
                 context of its own (hundreds of MiB)",
                theme.warning,
            );
        }
        Some((parent, _)) => rows(
            &mut out,
            "parent",
            &format!("{parent} (no GPU process)"),
            theme.text,
        ),
        None if facts.ended_ms.is_none() => known_or_na(&mut out, "parent", None),
        None => {}
    }
    let user = process.and_then(|p| p.user.as_deref());
    if facts.ended_ms.is_none() {
        known_or_na(&mut out, "user", user);
    }
    // The whole command, wrapped (the pane cuts it at its edge); an ended
    // process's as it was tagged when the detail opened.
    let command = process
        .and_then(|p| p.command.as_deref())
        .or(detail.process.command.as_deref());
    known_or_na(&mut out, "command", command);
    let tagged = if facts.tagged {
        let signal = keymap.key_name(Action::SignalProcess).unwrap_or_default();
        format!("yes ({signal} in Processes signals the tagged together)")
    } else {
        "no".to_string()
    };
    rows(&mut out, "tagged", &tagged, theme.text);
    if facts.ended_ms.is_some() {
        return out;
    }
    // %CPU and host memory are the process's, the same on each GPU line.
    if let Some(p) = process {
        let usage = &p.usage;
        let cpu = usage
            .cpu_percent
            .map_or_else(|| NA.to_string(), |c| format::cpu_percent(c) + "%");
        let host = usage
            .host_memory
            .map_or_else(|| NA.to_string(), format::bytes);
        rows(
            &mut out,
            "host",
            &format!("%CPU {cpu}, memory {host}"),
            theme.text,
        );
    }
    if let Some(probe) = facts.probe {
        let ooms = match probe.ooms {
            1 => "1 OOM".to_string(),
            n => format!("{n} OOMs"),
        };
        let snapshots = if probe.serves_snapshots {
            "takes snapshot requests"
        } else {
            "no snapshot requests"
        };
        let rank = probe.rank.as_deref().unwrap_or("rank n/a");
        rows(
            &mut out,
            "probe",
            &format!("attached, {rank}, {ooms}, {snapshots}"),
            if probe.ooms > 0 {
                theme.warning
            } else {
                theme.key
            },
        );
    }
    for g in &facts.gpus {
        out.push(Line::raw(""));
        gpu_rows(&mut out, g, facts.probe.is_some(), width, theme);
    }
    let keys = state.process_detail_keys();
    let acts = keymap.process_detail_acts(keys);
    if !acts.is_empty() {
        out.push(Line::raw(""));
        let mut spans = vec![Span::styled(chrome::left("keys", LABEL_CELLS), theme.dim)];
        for (i, (key, hint)) in acts.into_iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw("  "));
            }
            spans.push(Span::styled(theme.key(key).into_owned(), theme.key));
            spans.push(Span::styled(format!(" {hint}"), theme.text));
        }
        out.push(Line::from(spans));
        // "snapshot" alone did not say that it leads to whose memory the
        // process holds: the viewer's sites, two keys further on.
        if let (true, Some((capture, open, sites))) = (keys.capture, keymap.whose_memory_route()) {
            rows(
                &mut out,
                "",
                &format!(
                    "whose memory it is: {capture} captures its allocator, then {open} opens \
                     it and {sites} shows the sites"
                ),
                theme.dim,
            );
        }
    }
    out
}

/// The rows of one GPU the process uses: its memory there and %SM, then
/// its allocator's figures there, where one is visible; `probed`: a probe
/// sends them, whose segments may be older than its stats.
fn gpu_rows(
    out: &mut Vec<Line<'static>>,
    g: &DetailGpu<'_>,
    probed: bool,
    width: u16,
    theme: &Theme,
) {
    let p = g.process;
    let mig = match (p.gpu_instance_id, p.compute_instance_id) {
        (Some(gi), Some(ci)) => format!(" MIG GI {gi} CI {ci}"),
        (Some(gi), None) => format!(" MIG GI {gi}"),
        _ => String::new(),
    };
    let sm = p
        .usage
        .sm_percent
        .map_or_else(|| NA.to_string(), |v| format!("{v}%"));
    labelled(
        out,
        &format!("GPU {}{mig}", g.gpu),
        &format!("memory {}, %SM {sm}", format::opt_bytes(p.used_memory)),
        theme.text,
        width,
        theme,
    );
    let Some((allocated, reserved)) = g.allocator else {
        return;
    };
    let mut figures = format!(
        "allocated {}, reserved {}",
        format::opt_bytes(allocated),
        format::opt_bytes(reserved)
    );
    let Some(view) = g.shown else {
        // Only the shown allocator's other figures are held.
        if g.can_show {
            figures.push_str(" (the rest where its allocator is shown)");
        }
        labelled(out, "allocator", &figures, theme.allocated, width, theme);
        return;
    };
    figures.push_str(&format!(", active {}", active(view)));
    labelled(out, "allocator", &figures, theme.allocated, width, theme);
    let f = &view.fragmentation;
    // The segments (what fragmentation is computed from) come slower
    // than the stats: when they were received, as the Fragmentation pane
    // says it. A simulation's are always of the stats' moment.
    let segments = match view.segments_age {
        Some(SegmentsAge::NotYet) => Some(SEGMENTS_NOT_YET.to_string()),
        Some(SegmentsAge::Older { age_s, .. }) => Some(segments_age_words(age_s)),
        None if probed => Some("segments as new as the stats".to_string()),
        None => None,
    };
    if view.segments_age != Some(SegmentsAge::NotYet) {
        labelled(
            out,
            "",
            &format!(
                "fragmentation {}, largest free block {}",
                format::percent(f.fragmentation),
                format::bytes(f.largest_free_block)
            ),
            theme.text,
            width,
            theme,
        );
    }
    if let Some(segments) = segments {
        labelled(out, "", &segments, theme.dim, width, theme);
    }
    let ooms = if view.knows("num_ooms") {
        format!("{} since it started", view.stats.num_ooms.max(0))
    } else {
        NA.to_string()
    };
    labelled(out, "", &format!("OOMs {ooms}"), theme.text, width, theme);
    if let Some(peak) = &view.own_peak {
        labelled(out, "", &format::own_peak(peak), theme.text, width, theme);
    }
}

/// The allocator's active bytes (allocated and not yet reused), "n/a"
/// where the source could not say.
fn active(view: &AllocatorView) -> String {
    if view.knows("active_bytes.all.current") {
        format::bytes(u64::try_from(view.stats.active_bytes.all.current).unwrap_or(0))
    } else {
        NA.to_string()
    }
}

/// `text` wrapped beside `label` (the label on its first row, the others
/// indented under the text), in `style`.
fn labelled(
    out: &mut Vec<Line<'static>>,
    label: &str,
    text: &str,
    style: Style,
    width: u16,
    theme: &Theme,
) {
    let room = usize::from(width).saturating_sub(LABEL_CELLS).max(10);
    let room = u16::try_from(room).unwrap_or(u16::MAX);
    // A label wider than its column (a MIG device's "GPU 0 MIG GI 7 CI 0")
    // gets a row of its own: cut to the column it ran into its text.
    let own_row = label.chars().count() >= LABEL_CELLS;
    if own_row {
        for row in chrome::wrap_breaking(label, width.max(1)) {
            out.push(Line::styled(row, theme.dim));
        }
    }
    for (i, row) in chrome::wrap_breaking(text, room).into_iter().enumerate() {
        let lead = if i == 0 && !own_row {
            chrome::left(label, LABEL_CELLS)
        } else {
            " ".repeat(LABEL_CELLS)
        };
        out.push(Line::from(vec![
            Span::styled(lead, theme.dim),
            Span::styled(row, style),
        ]));
    }
}

/// Draws the open process detail centred over `area` (nothing while none
/// is open, or on an area too small for a frame and a row).
pub fn render_process_detail(
    area: Rect,
    buf: &mut Buffer,
    state: &AppState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let area = area.intersection(buf.area);
    let Some(detail) = state.ui.process_detail.as_ref() else {
        return;
    };
    if area.width < 20 || area.height < 5 {
        return;
    }
    let width = area.width.saturating_sub(4).min(MAX_WIDTH);
    let lines = process_detail_lines(state, keymap, theme, width.saturating_sub(2));
    let height = u16::try_from(lines.len() + 2)
        .unwrap_or(u16::MAX)
        .min(area.height.saturating_sub(2));
    let rows = usize::from(height.saturating_sub(2));
    let most = lines.len().saturating_sub(rows);
    let ui = &state.ui;
    ui.detail_scroll_limit.set(most);
    ui.detail_page_rows.set(rows);
    let first = detail.scroll.min(most);
    let name = |a| keymap.key_name(a).unwrap_or_default();
    let title = format!(" Process {} ", detail.process.pid);
    let hint = format!(
        " {}/{} closes ",
        name(Action::Back),
        name(Action::ProcessDetail)
    );
    let hint = theme.key(&hint).into_owned();
    let (popup, inner) = chrome::popup(buf, area, (width, height), &title, &hint, rows, theme);
    chrome::lines_at(buf, inner, lines.get(first..).unwrap_or_default());
    let key = |a| keymap.key_label(a).unwrap_or_default();
    chrome::scroll_note(
        buf,
        popup,
        (first, rows, lines.len()),
        (key(Action::Up), key(Action::Down)),
        theme,
    );
    theme.finish(popup, buf);
}
