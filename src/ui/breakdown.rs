//! The memory breakdown of the selected GPU: the dashboard's answer to "why
//! do nvidia-smi and PyTorch disagree". One stacked bar of the four parts
//! of the GPU's memory (allocated | reserved but unallocated | context &
//! other | free), a fifth where the driver keeps some for itself (kept by
//! the driver: NVML's `total − used − free`), and a legend with bytes and
//! shares.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome;
use super::format;
use super::theme::Theme;
use crate::alloc::advice::{CachedFreeAdvice, cached_free_advice};
use crate::app::keymap::{Action, Keymap};
use crate::app::state::{AppState, DeviceMemory, GpuState, Pane, PlottedDevice, breakdown};
use crate::device::GpuReading;

/// The legend's name for what the driver keeps for itself (NVML's
/// `total − used − free`): not "reserved", which is PyTorch's word here.
pub const DRIVER_HELD: &str = "kept by the driver";
/// [`DRIVER_HELD`] where the legend is compact.
pub const DRIVER_HELD_SHORT: &str = "driver-held";

/// Shown when no process's allocator is visible on the selected GPU.
pub const NO_ALLOCATOR_NOTE: &str = "allocator view: n/a — no process's allocator is visible \
     (run PyTorch with `python -m vramtop_probe train.py` to attach)";

/// The breakdown pane of one frame.
pub struct BreakdownPane<'a> {
    state: &'a AppState,
    /// Names the key that switches between probed processes (`v`) in the
    /// title; without one the title names no key.
    keymap: Option<&'a Keymap>,
    theme: &'a Theme,
    /// Says [`NO_ALLOCATOR_NOTE`] under the figures when the GPU shows no
    /// allocator; off where the collapsed allocator panes' row says it.
    allocator_note: bool,
}

/// What the pane draws below its title: a bar (parts and their whole, in
/// bytes) and text lines.
struct Body {
    bar: Vec<(u64, &'static str, Style)>,
    total: u64,
    lines: Vec<Line<'static>>,
}

impl<'a> BreakdownPane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        BreakdownPane {
            state,
            keymap: None,
            theme,
            allocator_note: true,
        }
    }

    /// Leaves [`NO_ALLOCATOR_NOTE`] out: the collapsed allocator panes'
    /// row below says how to get an allocator, in one row instead of two.
    pub fn without_allocator_note(mut self) -> Self {
        self.allocator_note = false;
        self
    }

    /// Names the keys the title mentions as `keymap` binds them.
    pub fn with_keymap(mut self, keymap: &'a Keymap) -> Self {
        self.keymap = Some(keymap);
        self
    }

    /// Rows this pane would like at `width` columns, title included.
    pub fn preferred_height(state: &AppState, theme: &Theme, width: u16) -> u16 {
        BreakdownPane::new(state, theme).rows_wanted(width)
    }

    /// [`BreakdownPane::preferred_height`] of this pane as configured
    /// (with or without its allocator note).
    pub fn rows_wanted(&self, width: u16) -> u16 {
        let body = self.body(width, false);
        let rows = body.lines.len() + usize::from(body.total > 0) + 1;
        u16::try_from(rows).unwrap_or(u16::MAX)
    }

    /// `compact`: the four-part legend in short words without shares, for
    /// a pane given fewer rows than it would like (80×24 with the stress
    /// panel open leaves one legend row, which cut off context & other
    /// and free).
    fn body(&self, width: u16, compact: bool) -> Body {
        let theme = self.theme;
        let g = theme.glyphs();
        let mut body = Body {
            bar: Vec::new(),
            total: 0,
            lines: Vec::new(),
        };
        let Some(gpu) = self.state.selected() else {
            body.lines
                .push(Line::styled(super::format::no_gpu(self.state), theme.dim));
            return body;
        };
        let sample = match &gpu.reading {
            GpuReading::Ok(s) => s,
            GpuReading::Lost {
                index,
                reason,
                cause,
            } => {
                body.lines.push(Line::styled(
                    format!("GPU {index} {}: {reason}", cause.label()),
                    theme.critical,
                ));
                return body;
            }
        };
        let Some(memory) = DeviceMemory::of(sample) else {
            body.lines.push(Line::styled(
                "memory: n/a (the driver does not report it for this GPU)",
                theme.dim,
            ));
            return body;
        };
        // The allocator figures of the reading's moment: a panel action
        // since waits for the next reading.
        let view = gpu.breakdown_view();
        // The allocator's own device, when it has one (the stress panel's
        // scenario device), is what the breakdown splits.
        let memory = view
            .and_then(|a| a.device_memory)
            .map_or(memory, |(total, used)| DeviceMemory::of_used(total, used));
        let DeviceMemory {
            total,
            used,
            free,
            driver_held,
        } = memory;
        body.total = total;
        // The driver's own part, after free, where it holds any: the parts
        // then still sum to the total and free reads as nvidia-smi's.
        let held_part =
            (driver_held > 0).then_some((driver_held, g.driver_held, theme.driver_held));
        let held_item = |compact: bool| {
            (driver_held > 0).then(|| {
                if compact {
                    Line::from(vec![
                        Span::styled(g.driver_held, theme.driver_held),
                        Span::raw(format!(
                            " {DRIVER_HELD_SHORT} {}",
                            format::bytes(driver_held)
                        )),
                    ])
                } else {
                    legend_item(
                        g.driver_held,
                        theme.driver_held,
                        DRIVER_HELD,
                        driver_held,
                        total,
                    )
                }
            })
        };
        let split = breakdown(sample, view);
        // Columns between legend items (the compact legend may narrow it).
        let mut gap = if compact { 2 } else { 3 };
        let items = match (split, view) {
            // The figures as they are, never a clamped split that looks real.
            (Some(b), Some(a)) if b.reserved_over_used.is_some() => {
                body.bar = vec![(used, g.context, theme.context), (free, g.free, theme.free)];
                body.bar.extend(held_part);
                let reserved = a.reserved();
                let excess = b.reserved_over_used.unwrap_or_default();
                body.lines.extend(
                    chrome::wrap(
                        &format!(
                            "the allocator's reserved {} exceeds the GPU's used memory {} by {}: \
                             is it on another GPU? CUDA numbers GPUs fastest first unless \
                             CUDA_DEVICE_ORDER=PCI_BUS_ID",
                            format::bytes(reserved),
                            format::bytes(used),
                            format::bytes(excess)
                        ),
                        width,
                    )
                    .into_iter()
                    .map(|l| Line::styled(l, theme.critical)),
                );
                let mut items = vec![
                    legend_item(g.context, theme.context, "GPU used", used, total),
                    legend_item(g.free, theme.free, "free", free, total),
                ];
                items.extend(held_item(compact));
                items.push(Line::from(vec![
                    Span::styled("allocator: ", theme.dim),
                    Span::raw(format!(
                        "allocated {}  reserved {}  (context & other: n/a)",
                        format::bytes(a.allocated()),
                        format::bytes(reserved)
                    )),
                ]));
                items
            }
            (Some(b), _) => {
                body.bar = vec![
                    (b.allocated, g.allocated, theme.allocated),
                    (b.cached_free, g.cached_free, theme.cached_free),
                    (b.context_and_other, g.context, theme.context),
                    (b.free, g.free, theme.free),
                ];
                body.bar.extend(held_part);
                if compact {
                    // "context & other" as everywhere else (the help
                    // defines it): where the row is short the gaps and then
                    // the space after each glyph give way, not the term.
                    let short = |glyph, style, label: &str, bytes, spaced: bool| {
                        let space = if spaced { " " } else { "" };
                        Line::from(vec![
                            Span::styled(glyph, style),
                            Span::raw(format!("{space}{label} {}", format::bytes(bytes))),
                        ])
                    };
                    let legend = |spaced: bool| {
                        let mut items = vec![
                            short(
                                g.allocated,
                                theme.allocated,
                                "allocated",
                                b.allocated,
                                spaced,
                            ),
                            short(
                                g.cached_free,
                                theme.cached_free,
                                // "reserved but unallocated" short, as
                                // the help defines it.
                                "unalloc",
                                b.cached_free,
                                spaced,
                            ),
                            short(
                                g.context,
                                theme.context,
                                "context & other",
                                b.context_and_other,
                                spaced,
                            ),
                            short(g.free, theme.free, "free", b.free, spaced),
                        ];
                        if b.driver_held > 0 {
                            items.push(short(
                                g.driver_held,
                                theme.driver_held,
                                DRIVER_HELD_SHORT,
                                b.driver_held,
                                spaced,
                            ));
                        }
                        items
                    };
                    // The loosest of these that takes the fewest rows.
                    let (items, tight_gap) =
                        [(legend(true), 2), (legend(true), 1), (legend(false), 1)]
                            .into_iter()
                            .min_by_key(|(items, gap)| {
                                chrome::flow(items.clone(), width, *gap).len()
                            })
                            .unwrap_or((legend(true), 2));
                    gap = tight_gap;
                    items
                } else {
                    let mut items = vec![
                        legend_item(
                            g.allocated,
                            theme.allocated,
                            "allocated",
                            b.allocated,
                            total,
                        ),
                        legend_item(
                            g.cached_free,
                            theme.cached_free,
                            // PyTorch's OOM message's words for it.
                            "reserved but unallocated",
                            b.cached_free,
                            total,
                        ),
                        legend_item(
                            g.context,
                            theme.context,
                            "context & other",
                            b.context_and_other,
                            total,
                        ),
                        legend_item(g.free, theme.free, "free", b.free, total),
                    ];
                    items.extend(held_item(false));
                    items
                }
            }
            (None, _) => {
                body.bar = vec![(used, g.context, theme.context), (free, g.free, theme.free)];
                body.bar.extend(held_part);
                let mut items = vec![
                    legend_item(g.context, theme.context, "used", used, total),
                    legend_item(g.free, theme.free, "free", free, total),
                ];
                items.extend(held_item(compact));
                items
            }
        };
        let mut items = items;
        if let Some(peak) = view.and_then(|a| a.own_peak.as_ref()) {
            items.push(own_peak_item(peak, compact, theme));
        }
        // The wide legend's gaps narrow to two cells where that saves a
        // row ("reserved but unallocated" ran 120×40's one row a cell over).
        if !compact
            && chrome::flow(items.clone(), width, 2).len()
                < chrome::flow(items.clone(), width, gap).len()
        {
            gap = 2;
        }
        let mut lines = chrome::flow(items, width, gap);
        // The inconsistency (if any) comes first.
        lines.splice(0..0, std::mem::take(&mut body.lines));
        body.lines = lines;
        // Unknown totals (a probe's nulls) warn about nothing.
        if let Some(a) = view.filter(|a| a.knows_totals())
            && let Some(advice) = cached_free_advice(
                a.allocated(),
                a.reserved(),
                a.stats.inactive_split_bytes.large_pool.current.max(0) as u64,
                // Segments of another moment than the stats (a probe's
                // older ones) still say the blocks' sizes.
                &a.layout,
            )
        {
            let warning = cached_free_warning(&advice);
            body.lines.extend(
                chrome::wrap(&format!("warning: {warning}"), width)
                    .into_iter()
                    .map(|l| Line::styled(l, theme.warning)),
            );
        }
        if gpu.allocator.is_none() && self.allocator_note {
            body.lines.extend(
                chrome::wrap(NO_ALLOCATOR_NOTE, width)
                    .into_iter()
                    .map(|l| Line::styled(l, theme.dim)),
            );
        }
        body
    }
}

/// PyTorch's own peaks after the legend ("PyTorch peak 216/232 MiB",
/// allocated/reserved): the figures above are a sample a second, which
/// misses a peak inside a training step; the help says since when.
fn own_peak_item(peak: &crate::app::state::OwnPeak, compact: bool, theme: &Theme) -> Line<'static> {
    let label = if compact { "peak " } else { "PyTorch peak " };
    Line::from(vec![
        Span::styled(label, theme.dim),
        Span::raw(format::bytes_pair(peak.allocated, peak.reserved)),
    ])
}

/// A legend entry: the glyph in its style, then "label bytes share" with
/// the share of `total`.
pub(super) fn legend_item(
    glyph: &'static str,
    style: Style,
    label: &str,
    bytes: u64,
    total: u64,
) -> Line<'static> {
    Line::from(vec![
        Span::styled(glyph, style),
        Span::raw(format!(" {label} ")),
        Span::raw(format::bytes(bytes)),
        Span::raw(format!(" {}", format::percent_of(bytes, total))),
    ])
}

/// "1 of 2 probes, v: next" when several processes on the GPU have a probe,
/// or "v: pid 5678 from the next sample" while a switch is pending; nothing
/// while an allocator not among them is shown (the stress panel's). The
/// key is `keymap`'s for [`Action::NextAllocator`]; unnamed without one.
fn probe_choice_note(state: &AppState, gpu: &GpuState, keymap: Option<&Keymap>) -> Option<String> {
    // The open panel shows its own allocator on its GPU and takes the
    // keys (its `v` verifies tensors): a pick waits for it to close, so
    // neither "from the next sample" nor the dashboard's `v` is true here.
    if state.ui.stress_open && state.stress.gpu == Some(gpu.index()) {
        return None;
    }
    let choice = state.probe_choice(gpu)?;
    let key = keymap.and_then(|k| k.key_name(Action::NextAllocator));
    if let Some(picked) = choice.pending() {
        let lead = key.map(|v| format!("{v}: ")).unwrap_or_default();
        return Some(format!("{lead}pid {picked} from the next sample"));
    }
    // Another allocator shown (the stress panel's): its keys are the
    // panel's, and there is no place in the list to give.
    let position = choice.position(choice.shown)?;
    let next = key.map(|v| format!(", {v}: next")).unwrap_or_default();
    Some(format!(
        "{position} of {} {}{next}",
        choice.pids.len(),
        if choice.simulated {
            "allocators"
        } else {
            "probes"
        }
    ))
}

impl Widget for BreakdownPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let mut detail = Vec::new();
        let on_scenario = self
            .state
            .selected()
            .map(|g| PlottedDevice::of(g.allocator.as_ref()));
        if let (Some(gpu), Some(PlottedDevice::Scenario { capacity })) =
            (self.state.selected(), on_scenario)
        {
            // The stress panel's scenario device stands in for the GPU's
            // figures here while the GPUs pane above keeps the GPU's own
            // (1.5 of 80 GiB beside a 24 GiB device): "GPU 0" on both read
            // as one device's two disagreeing figures. 60 columns, so that
            // the title fits 80 with the pane's name.
            detail.push(Span::styled(
                format!(
                    "simulated scenario device {}, not {}",
                    format::bytes(capacity),
                    gpu.label()
                ),
                theme.text,
            ));
            detail.push(Span::styled(" · stress panel", theme.dim));
        } else if let Some(gpu) = self.state.selected() {
            detail.push(Span::styled(gpu.label(), theme.text));
            // Before the source, which is long and is what gets cut off.
            if let Some(note) = probe_choice_note(self.state, gpu, self.keymap) {
                detail.push(Span::styled(format!(" · {note}"), theme.text));
            }
            if let Some(a) = &gpu.allocator {
                // A part per word, "pid N" one of them: a title too wide
                // for its row ([`chrome::fit_title`]) keeps which process
                // it shows and ends between two words.
                let mut words = a.source.split(' ').filter(|w| !w.is_empty());
                let first = match (words.next(), a.pid) {
                    (Some("pid"), Some(_)) => {
                        format!("pid {}", words.next().unwrap_or_default())
                    }
                    (word, _) => word.unwrap_or_default().to_string(),
                };
                detail.push(Span::styled(format!(" · {first}"), theme.dim));
                detail.extend(words.map(|w| Span::styled(format!(" {w}"), theme.dim)));
            }
        }
        let block = chrome::pane_block_within(
            Pane::Breakdown,
            detail,
            self.state.ui.focus == Pane::Breakdown,
            false,
            theme,
            usize::from(area.width),
        );
        let inner = block.inner(area);
        block.render(area, buf);
        chrome::mark_cut_title(area, buf);
        if inner.height > 0 && inner.width > 0 {
            let mut body = self.body(inner.width, false);
            let legend_rows = inner.height.saturating_sub(u16::from(body.total > 0));
            if body.lines.len() > usize::from(legend_rows) {
                let compact = self.body(inner.width, true);
                if compact.lines.len() < body.lines.len() {
                    body = compact;
                }
            }
            let mut rows = inner;
            if body.total > 0 {
                chrome::bar(buf, Rect { height: 1, ..inner }, &body.bar, body.total);
                rows.y += 1;
                rows.height -= 1;
            }
            // A warning wrapped past the pane's last row is cut there,
            // and says so.
            chrome::lines_at_marking_cut(buf, rows, &body.lines);
        }
        theme.finish(area, buf);
    }
}

/// The breakdown's words for a large reserved-but-unallocated cache.
fn cached_free_warning(advice: &CachedFreeAdvice) -> String {
    let mut text = format!(
        "{} reserved but unallocated ({} of reserved): try \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        format::bytes(advice.cached),
        // The legend's percentages' form ("25%"), not one of its own.
        format::percent(advice.percent_of_reserved / 100.0)
    );
    if let Some(max_split) = advice.max_split_size {
        let value = match max_split.example_mb {
            Some(mb) => format!("max_split_size_mb:{mb}"),
            None => "max_split_size_mb:N (N MiB below their size)".to_string(),
        };
        text.push_str(&format!(
            "; most of it is in split large blocks: {value} stops them being split"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::advice::MaxSplitAdvice;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_scenario_device_breakdown_is_titled_as_not_the_gpu_the_gpus_pane_shows() {
        use crate::alloc::DeviceStats;
        use crate::app::state::{AllocatorView, StatusState};
        use crate::device::GpuSample;
        let mut state = AppState::new(StatusState::default());
        let view = AllocatorView::new(
            "stress panel · scenario device 8.00 GiB (simulated)".into(),
            None,
            DeviceStats::default(),
            Vec::new(),
        )
        .on_device(8 * GIB, 6 * GIB);
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "Simulated H100 80GB"))],
            std::collections::BTreeMap::from([(0, view)]),
        );
        let theme = Theme::colored();
        let area = Rect::new(0, 0, 80, 4);
        let mut buf = Buffer::empty(area);
        BreakdownPane::new(&state, &theme).render(area, &mut buf);
        let title: String = (0..80).map(|x| buf[(x, 0)].symbol().to_string()).collect();
        assert!(
            title.contains("simulated scenario device 8.00 GiB, not GPU 0 · stress panel"),
            "{title}"
        );
        assert!(!title.contains("breakdown  GPU 0"), "{title}");
    }

    #[test]
    fn the_warning_names_the_cache_its_share_and_each_remedy_advised() {
        let plain = cached_free_advice(6 * GIB, 9 * GIB, 0, &[]).expect("3 GiB, 33 %");
        let w = cached_free_warning(&plain);
        assert!(w.starts_with("3.00 GiB reserved but unallocated"), "{w}");
        assert!(w.contains("(33% of reserved)"), "{w}");
        assert!(w.contains("expandable_segments:True"), "{w}");
        assert!(!w.contains("max_split_size_mb"), "{w}");
        let split = cached_free_advice(6 * GIB, 9 * GIB, 2 * GIB, &[]).expect("advises");
        let w = cached_free_warning(&split);
        assert!(
            w.contains("max_split_size_mb:N (N MiB below their size)"),
            "{w}"
        );
    }

    #[test]
    fn the_help_defines_the_drivers_part_by_both_its_legend_names() {
        assert!(
            super::super::DEFINITIONS.iter().any(|(term, _)| {
                term.starts_with(DRIVER_HELD) && term.contains(&format!("({DRIVER_HELD_SHORT})"))
            }),
            "a term names {DRIVER_HELD} ({DRIVER_HELD_SHORT})"
        );
    }

    #[test]
    fn the_max_split_advice_names_the_value_the_allocator_state_gives() {
        let advice = CachedFreeAdvice {
            cached: 3 * GIB,
            percent_of_reserved: 33.0,
            max_split_size: Some(MaxSplitAdvice {
                example_mb: Some(128),
            }),
        };
        let w = cached_free_warning(&advice);
        assert!(
            w.ends_with("split large blocks: max_split_size_mb:128 stops them being split"),
            "{w}"
        );
        assert!(!w.contains("512"), "{w}");
    }
}
