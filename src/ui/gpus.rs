//! The GPUs pane: one line per GPU (MIG instances indented under their
//! parent), with a memory bar and the driver's figures. Compact on purpose:
//! eight GPUs fit an 80×24 terminal next to the other panes.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, left, right};
use super::format::{self, NA};
use super::theme::Theme;
use crate::app::state::{AppState, GpuState, Pane};
use crate::device::{GpuReading, GpuSample, Unanswered};

/// The GPUs pane of one frame.
pub struct GpusPane<'a> {
    state: &'a AppState,
    theme: &'a Theme,
}

impl<'a> GpusPane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        GpusPane { state, theme }
    }

    /// Rows this pane would like: title, header and one per GPU.
    pub fn preferred_height(state: &AppState) -> u16 {
        u16::try_from(state.gpus.len().max(1))
            .unwrap_or(u16::MAX)
            .saturating_add(2)
    }
}

/// GPU rows in display order: each physical GPU followed by its MIG
/// instances; MIG instances whose parent is not listed come last.
/// Returns indices into `gpus` and whether the row is a MIG instance.
pub(crate) fn display_order(gpus: &[GpuState]) -> Vec<(usize, bool)> {
    let mig_parent = |g: &GpuState| {
        g.sample()
            .and_then(|s| s.mig.as_ref().map(|m| m.parent_index))
    };
    let mut order = Vec::with_capacity(gpus.len());
    let mut placed = vec![false; gpus.len()];
    for (i, g) in gpus.iter().enumerate() {
        if mig_parent(g).is_some() {
            continue;
        }
        order.push((i, false));
        placed[i] = true;
        for (j, m) in gpus.iter().enumerate() {
            if mig_parent(m) == Some(g.index()) && !placed[j] {
                order.push((j, true));
                placed[j] = true;
            }
        }
    }
    for (j, done) in placed.iter().enumerate() {
        if !done {
            order.push((j, true));
        }
    }
    order
}

/// The index into `state.gpus` of the selected GPU (the first when the
/// selection is out of range, as [`AppState::selected`] does).
fn selected_index(state: &AppState) -> usize {
    if state.ui.selected_gpu < state.gpus.len() {
        state.ui.selected_gpu
    } else {
        0
    }
}

/// What `rows` lines under the title show: whether the header is drawn
/// (only when every GPU still gets its line) and the GPU rows, scrolled so
/// that the selected GPU stays on screen.
pub(crate) fn visible_rows(state: &AppState, rows: u16) -> (bool, Vec<(usize, bool)>) {
    let order = display_order(&state.gpus);
    let rows = usize::from(rows);
    let header = rows > order.len();
    let visible = rows - usize::from(header);
    let selected = selected_index(state);
    let pos = order.iter().position(|&(i, _)| i == selected).unwrap_or(0);
    let first = chrome::first_shown(pos, visible);
    let shown = order.into_iter().skip(first).take(visible).collect();
    (header, shown)
}

/// The GPU (index into `state.gpus`) drawn on screen row `row` of a GPUs
/// pane in `area`, for mouse clicks.
pub(crate) fn gpu_at(state: &AppState, area: Rect, row: u16) -> Option<usize> {
    let inner = Rect {
        y: area.y.saturating_add(1),
        height: area.height.saturating_sub(1),
        ..area
    };
    if row < inner.y || row >= inner.bottom() {
        return None;
    }
    let (header, shown) = visible_rows(state, inner.height);
    let k = usize::from(row - inner.y).checked_sub(usize::from(header))?;
    shown.get(k).map(|&(i, _)| i)
}

/// Which optional columns fit, and the widths of the flexible ones.
struct Columns {
    index: usize,
    name: usize,
    bar: usize,
    memory: usize,
    util: Option<usize>,
    temp: Option<usize>,
    power: Option<usize>,
    clocks: Option<usize>,
}

/// The figures of one GPU row, as text.
struct RowText {
    memory: String,
    util: String,
    temp: String,
    power: String,
    clocks: String,
}

fn row_text(s: &GpuSample) -> RowText {
    RowText {
        memory: format::bytes_of(s.memory_used, s.memory_total),
        util: format::opt_unit(s.gpu_utilization, "%"),
        temp: format::opt_unit(s.temperature_c, "°C"),
        power: format::pair(
            format::watts(s.power_draw_mw),
            format::watts(s.power_limit_mw),
            " W",
        ),
        clocks: format::pair(s.sm_clock_mhz, s.memory_clock_mhz, " MHz"),
    }
}

/// A row's name after the branch glyph. A MIG device leads with its slot,
/// "MIG 1 1g.18gb", as the breakdown's title "GPU 0 MIG 1" and
/// nvidia-smi's "MIG dev" name it: devices of one profile share one name,
/// and the slot at the end of a cut name was lost. The parent's name the
/// driver repeats in front ("NVIDIA H100 … MIG 1g.10gb") is left out, the
/// row above says it.
fn row_name(gpus: &[GpuState], s: &GpuSample) -> String {
    let Some(mig) = &s.mig else {
        return s.name.clone();
    };
    let parent = gpus
        .iter()
        .filter_map(GpuState::sample)
        .find(|p| p.mig.is_none() && p.index == mig.parent_index)
        .map(|p| p.name.as_str());
    let rest = parent
        .and_then(|p| s.name.strip_prefix(p))
        .unwrap_or(&s.name)
        .trim_start();
    let profile = rest.strip_prefix("MIG").unwrap_or(rest).trim_start();
    let profile = if profile.is_empty() { &s.name } else { profile };
    format!("MIG {} {profile}", s.index)
}

fn columns(width: usize, gpus: &[GpuState], texts: &[Option<RowText>]) -> Columns {
    let max_of = |f: &dyn Fn(&RowText) -> usize, header: usize| {
        texts.iter().flatten().map(f).max().unwrap_or(0).max(header)
    };
    let digits = gpus
        .iter()
        .map(|g| g.index().to_string().len())
        .max()
        .unwrap_or(1);
    // Pointer, index, space.
    let index = digits + 2;
    let name_len = gpus
        .iter()
        .filter_map(|g| g.sample())
        .map(|s| row_name(gpus, s).chars().count() + if s.mig.is_some() { 2 } else { 0 })
        .max()
        .unwrap_or(4)
        .max(4);
    let memory = max_of(&|t| t.memory.chars().count(), 10);
    let mut optional = [
        Some(max_of(&|t| t.util.chars().count(), 4)),
        Some(max_of(&|t| t.temp.chars().count(), 4)),
        Some(max_of(&|t| t.power.chars().count(), 5)),
        Some(max_of(&|t| t.clocks.chars().count(), 6)),
    ];
    // Narrow terminals drop clocks first, then power, temperature, util:
    // the name needs 8 columns and the bar 6 to stay readable.
    const MIN_NAME: usize = 8;
    const MIN_BAR: usize = 6;
    let fixed = |opt: &[Option<usize>]| {
        index + 1 + memory + opt.iter().flatten().map(|w| w + 1).sum::<usize>() + 1
    };
    for drop in (0..optional.len()).rev() {
        if fixed(&optional) + MIN_NAME + MIN_BAR <= width {
            break;
        }
        optional[drop] = None;
    }
    let rest = width.saturating_sub(fixed(&optional));
    let name = name_len.min(rest.saturating_sub(MIN_BAR).max(rest * 2 / 5));
    // Past 60 cells a longer bar adds nothing; the row ends early instead.
    let bar = rest.saturating_sub(name).min(60);
    let [util, temp, power, clocks] = optional;
    Columns {
        index,
        name,
        bar,
        memory,
        util,
        temp,
        power,
        clocks,
    }
}

impl Widget for GpusPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let g = theme.glyphs();
        let gpus = &self.state.gpus;
        // GPUs without a reading, counted by cause: "1 lost" for one
        // this user may not open would send them looking for a fault.
        let unanswered = |wanted: Unanswered| {
            gpus.iter()
                .filter(|g| matches!(g.reading, GpuReading::Lost { cause, .. } if cause == wanted))
                .count()
        };
        let mut detail = Vec::new();
        // Rows under the title: say so when not every GPU fits.
        let fits = usize::from(area.height.saturating_sub(1)) >= gpus.len();
        if !fits {
            detail.push(Span::styled(
                format!("{} GPUs, {} scrolls", gpus.len(), theme.key("↑↓")),
                theme.text,
            ));
        }
        for (cause, word) in [
            (Unanswered::Lost, "lost"),
            (Unanswered::NoAccess, "no access"),
            (Unanswered::Failed, "failing"),
        ] {
            let n = unanswered(cause);
            if n > 0 {
                let sep = if detail.is_empty() { "" } else { " · " };
                detail.push(Span::styled(format!("{sep}{n} {word}"), theme.critical));
            }
        }
        let block = chrome::pane_block_within(
            Pane::Gpus,
            detail,
            self.state.ui.focus == Pane::Gpus,
            false,
            theme,
            usize::from(area.width),
        );
        let Some(inner) = chrome::inside(block, area, buf, theme) else {
            return;
        };
        if gpus.is_empty() {
            chrome::line_at(
                buf,
                inner,
                0,
                &Line::styled(super::format::no_gpu(self.state), theme.dim),
            );
            theme.finish(area, buf);
            return;
        }
        let texts: Vec<Option<RowText>> = gpus.iter().map(|g| g.sample().map(row_text)).collect();
        let cols = columns(usize::from(inner.width), gpus, &texts);
        let selected = selected_index(self.state);
        let (header, shown) = visible_rows(self.state, inner.height);
        let mut y = 0u16;
        if header {
            let mut spans = vec![
                Span::raw(left("#", cols.index)),
                Span::raw(left("name", cols.name)),
                Span::raw(" "),
                Span::raw(left("memory", cols.bar)),
                Span::raw(" "),
                Span::raw(right("used/total", cols.memory)),
            ];
            for (w, h) in [
                (cols.util, "util"),
                (cols.temp, "temp"),
                (cols.power, "power"),
                (cols.clocks, "clocks"),
            ] {
                if let Some(w) = w {
                    spans.push(Span::raw(" "));
                    spans.push(Span::raw(right(h, w)));
                }
            }
            chrome::line_at(buf, inner, y, &Line::from(spans).style(theme.header));
            y += 1;
        }
        for (i, is_mig) in shown {
            let gpu = &gpus[i];
            let is_selected = i == selected;
            let mut spans = Vec::new();
            let pointer = if is_selected { g.pointer } else { " " };
            let idx_style = if is_selected {
                theme.selected
            } else {
                theme.text
            };
            spans.push(Span::styled(pointer, theme.key));
            // A MIG instance's slot is in its name ("└ MIG 1 …"), not in
            // this column, where it would read like a physical GPU's index.
            let index = if is_mig {
                String::new()
            } else {
                gpu.index().to_string()
            };
            spans.push(Span::styled(left(&index, cols.index - 2), idx_style));
            spans.push(Span::raw(" "));
            match &gpu.reading {
                GpuReading::Lost { reason, cause, .. } => {
                    spans.push(Span::styled(
                        format!("{}: {reason}", cause.label()),
                        theme.critical,
                    ));
                }
                GpuReading::Ok(s) => {
                    let t = row_text(s);
                    let name = if is_mig {
                        format!("{}{}", g.branch, row_name(gpus, s))
                    } else {
                        s.name.clone()
                    };
                    spans.push(Span::styled(left(&name, cols.name), idx_style));
                    spans.push(Span::raw(" "));
                    let bar_x = inner.x.saturating_add(
                        u16::try_from(cols.index + cols.name + 1).unwrap_or(u16::MAX),
                    );
                    spans.push(Span::raw(" ".repeat(cols.bar)));
                    spans.push(Span::raw(" "));
                    let mem_style = match (s.memory_used, s.memory_total) {
                        (Some(u), Some(t)) if t > 0 => theme.bar_for(u as f64 / t as f64),
                        _ => theme.dim,
                    };
                    spans.push(Span::styled(right(&t.memory, cols.memory), mem_style));
                    for (w, text) in [
                        (cols.util, &t.util),
                        (cols.temp, &t.temp),
                        (cols.power, &t.power),
                        (cols.clocks, &t.clocks),
                    ] {
                        if let Some(w) = w {
                            let style = if text == NA { theme.dim } else { theme.text };
                            spans.push(Span::raw(" "));
                            spans.push(Span::styled(right(text, w), style));
                        }
                    }
                    chrome::line_at(buf, inner, y, &Line::from(spans));
                    let bar_w = u16::try_from(cols.bar).unwrap_or(0);
                    let bar_area = Rect::new(bar_x, inner.y + y, bar_w, 1).intersection(inner);
                    memory_bar(buf, bar_area, s.memory_used, s.memory_total, theme);
                    y += 1;
                    continue;
                }
            }
            chrome::line_at(buf, inner, y, &Line::from(spans));
            y += 1;
        }
        theme.finish(area, buf);
    }
}

/// The used/total bar: filled cells in the threshold style, the rest in
/// the empty style; an unknown figure leaves the bar empty with "n/a".
fn memory_bar(buf: &mut Buffer, area: Rect, used: Option<u64>, total: Option<u64>, theme: &Theme) {
    let g = theme.glyphs();
    if area.width == 0 || area.height == 0 {
        return;
    }
    match (used, total) {
        (Some(u), Some(t)) if t > 0 => {
            let u = u.min(t);
            let style = theme.bar_for(u as f64 / t as f64);
            chrome::bar(
                buf,
                area,
                &[
                    (u, g.bar_fill, style),
                    (t - u, g.bar_empty, theme.bar_empty),
                ],
                t,
            );
        }
        _ => {
            chrome::bar(buf, area, &[(1, g.bar_empty, theme.bar_empty)], 1);
            chrome::line_at(buf, area, 0, &Line::styled(NA, theme.dim));
        }
    }
}
