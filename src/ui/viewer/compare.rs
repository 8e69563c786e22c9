//! The A/B comparison overlay (`c`): two marked cursors side by side and
//! what was allocated between them.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::Line;

use super::popup::{PopupScroll, render_text_popup};
use super::sites::site_row;
use crate::app::keymap::{CompareKey, Keymap, first_key};
use crate::app::viewer::ViewerState;
use crate::snapshot::diff::{Change, SegmentRef, SiteChange, SiteChangeKind};
use crate::ui::format;
use crate::ui::theme::Theme;

/// The sites whose live bytes changed, the largest change first either way
/// (ties in the diff's order): a list cut to its first rows keeps the
/// biggest growth and the biggest loss, where the diff's own order (most
/// grown first) would have put the sites that lost the most last, behind
/// the cut.
pub fn largest_changes_first(sites: &[SiteChange]) -> Vec<&SiteChange> {
    let mut changed: Vec<_> = sites
        .iter()
        .filter(|s| s.kind != SiteChangeKind::Same)
        .collect();
    changed.sort_by_key(|s| std::cmp::Reverse(s.bytes.change.unsigned_abs()));
    changed
}

/// The bytes of `segments` together (sizes come from the file: the sum
/// saturates rather than overflows).
fn total_size(segments: &[SegmentRef]) -> u64 {
    segments
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.total_size))
}

/// Sites listed per section: the popup scrolls, so far more than fit; a
/// file with thousands of sites still makes a bounded popup.
const LISTED_SITES: usize = 64;

/// The lines of the A/B comparison.
pub fn compare_lines(v: &ViewerState, width: u16) -> Vec<String> {
    let Some(c) = &v.compare else {
        return Vec::new();
    };
    let n = v.device().map_or(0, |d| d.len());
    let d = &c.diff;
    let signed = |x: i64| format::signed_change(x, format::bytes);
    let bytes_row = |name: &str, figure: &Change| {
        format!(
            "{name:<11}{:>12}{:>12}{:>12}",
            format::bytes(figure.before),
            format::bytes(figure.after),
            signed(figure.change)
        )
    };
    // The diff runs from the earlier moment to the later (as `diff --at`
    // does): with A after B that is B to A, and the columns say so.
    let reversed = v.marks_reversed();
    let (x, y) = if reversed { ("B", "A") } else { ("A", "B") };
    let mut lines = vec![
        // Both marks are of this GPU's trace: it is named, as a file of
        // several GPUs has one trace each.
        format!(
            "GPU {} · {x} = event {}/{n}   {y} = event {}/{n}",
            c.device, c.a, c.b
        ),
    ];
    if reversed {
        lines.push("A is after B: compared B→A, earlier to later, as diff --at does".to_string());
    }
    lines.extend([
        format!("{:<11}{:>12}{:>12}{:>12}", "", x, y, "change"),
        bytes_row("reserved", &d.reserved),
        bytes_row("allocated", &d.allocated),
        format!(
            "{:<11}{:>12}{:>12}{:>12}",
            "segments",
            d.segments.before,
            d.segments.after,
            format::signed_change(d.segments.change, |n| n.to_string())
        ),
        format!(
            "segments only at {x}: {} ({}) · only at {y}: {} ({})",
            d.only_before.len(),
            format::bytes(total_size(&d.only_before)),
            d.only_after.len(),
            format::bytes(total_size(&d.only_after))
        ),
        // What the step needed at most: more than either end when it
        // freed its temporaries before B.
        format!(
            // `@N` as the GPUs pane's peaks: whole in an 80-column popup.
            "highest between {x} and {y}: allocated {} @{}, reserved {} @{}",
            format::bytes(c.highest.allocated.bytes),
            c.highest.allocated.cursor,
            format::bytes(c.highest.reserved.bytes),
            c.highest.reserved.cursor
        ),
        String::new(),
        format!(
            "live bytes by site (by {}), largest change first:",
            d.grouping.name()
        ),
    ]);
    let changed = largest_changes_first(&d.sites);
    if changed.is_empty() {
        lines.push("  no site changed".to_string());
    }
    for s in changed.iter().take(LISTED_SITES) {
        lines.push(format!(
            "  {:>11} {:<6} {:>10} → {:>10}  {}",
            signed(s.bytes.change),
            s.kind.name(),
            format::bytes(s.bytes.before),
            format::bytes(s.bytes.after),
            s.label
        ));
    }
    if changed.len() > LISTED_SITES {
        lines.push(format!(
            "  … {} more changed sites",
            changed.len() - LISTED_SITES
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "allocated between {x} and {y} and still alive at {y}: {} in {}",
        format::bytes(c.between.allocated),
        format::count_of(c.between.sites.len(), "site", "sites")
    ));
    for s in c.between.sites.iter().take(LISTED_SITES) {
        // Two columns of indent.
        let row_width = usize::from(width).saturating_sub(2);
        lines.push(format!("  {}", site_row(s, c.between.allocated, row_width)));
    }
    if c.between.sites.len() > LISTED_SITES {
        lines.push(format!(
            "  … {} more sites",
            c.between.sites.len() - LISTED_SITES
        ));
    }
    lines
        .iter()
        .map(|l| format::truncate(l, usize::from(width)))
        .collect()
}

pub(super) fn render_compare(
    area: Rect,
    buf: &mut Buffer,
    v: &ViewerState,
    keymap: &Keymap,
    theme: &Theme,
) {
    let label = |key| keymap.compare_key_label(key).unwrap_or_default();
    let scroll = PopupScroll {
        offset: v.compare_scroll,
        limit: &v.compare_scroll_limit,
        rows: &v.compare_page_rows,
        keys: (label(CompareKey::ScrollUp), label(CompareKey::ScrollDown)),
    };
    let hint = format!(" {} closes ", first_key(label(CompareKey::Close)));
    render_text_popup(area, buf, (120, " A/B ", &hint), theme, &scroll, |width| {
        compare_lines(v, width)
            .into_iter()
            .map(|l| Line::styled(l, theme.text))
            .collect()
    });
}
