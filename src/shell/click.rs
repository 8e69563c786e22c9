//! Mouse clicks: focus the pane under the pointer; in the GPUs pane, select
//! the GPU on that row; in the dashboard and in the snapshot viewer alike;
//! in the viewer's sites pane, select the site on that row.
//! Uses the UI's own layouts, so clicks land where the panes are drawn.

use ratatui::layout::{Position, Rect};

use crate::app::keymap::Keymap;
use crate::app::state::{AppState, Pane};
use crate::app::update::{Effect, pick_gpu};
use crate::app::viewer::ViewerState;
use crate::ui::{Theme, device_at, gpu_at, layout, oom_row_at, site_at, viewer_layout};

/// Applies a left click at (`column`, `row`) of a screen of size `area`,
/// clearing the status line's notice as a key does; returns whether
/// anything changed.
pub fn click(
    area: Rect,
    state: &mut AppState,
    keymap: &Keymap,
    theme: &Theme,
    column: u16,
    row: u16,
) -> bool {
    // The screen as drawn, the status line's message rows included.
    let screen = layout(area, state, keymap, theme);
    // A notice answers one key or click (as in `app::update::handle_key`):
    // once the user has clicked, "no GPU 7" and the like are stale.
    let had_notice = state.ui.notice.take().is_some();
    let at = Position { x: column, y: row };
    let Some(&(pane, rect)) = screen.panes.iter().find(|(_, r)| r.contains(at)) else {
        return had_notice;
    };
    let before = (state.ui.focus, state.ui.selected_gpu);
    state.ui.focus = pane;
    // The pane knows where it drew each GPU (header shown or not, scrolled,
    // MIG rows under their parent).
    if pane == Pane::Gpus
        && let Some(index) = gpu_at(state, rect, row)
    {
        pick_gpu(state, index);
    }
    had_notice || before != (state.ui.focus, state.ui.selected_gpu)
}

/// Applies a left click at (`column`, `row`) of the snapshot viewer's
/// screen of size `area` ([`ViewerState::click`]); returns whether
/// anything changed.
pub fn click_viewer(area: Rect, v: &mut ViewerState, column: u16, row: u16) -> bool {
    // The screen as drawn, the status line's notice rows included.
    let screen = viewer_layout(area, v);
    let at = Position { x: column, y: row };
    // The sites pane is none of `panes` (it takes its keys whatever has the
    // focus): a click on a site's row selects it.
    if let Some(rect) = screen.sites.filter(|r| r.contains(at)) {
        if oom_row_at(v, rect, row) {
            return v.click_oom_row() == Effect::Redraw;
        }
        return v.click_site(site_at(v, rect, row)) == Effect::Redraw;
    }
    let hit = screen.panes.iter().find(|(_, r)| r.contains(at)).copied();
    let gpu = hit
        .filter(|&(pane, _)| pane == Pane::Gpus)
        .and_then(|(_, rect)| device_at(v, rect, row));
    v.click(hit.map(|(pane, _)| pane), gpu) == Effect::Redraw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::state::StatusState;
    use crate::device::{GpuReading, GpuSample};
    use std::collections::BTreeMap;

    #[test]
    fn clicking_a_gpu_row_focuses_the_pane_and_selects_that_gpu() {
        let mut s = AppState::new(StatusState::default());
        let readings = (0..3)
            .map(|i| {
                let mut g = GpuSample::unknown(i, "GPU");
                g.memory_total = Some(1 << 30);
                g.memory_used = Some(1 << 29);
                GpuReading::Ok(g)
            })
            .collect();
        s.apply_sample(0, readings, BTreeMap::new());
        s.ui.focus = Pane::Processes;
        let area = Rect::new(0, 0, 100, 30);
        let theme = Theme::colored();
        let keymap = Keymap::default();
        let gpus = layout(area, &s, &keymap, &theme)
            .area_of(Pane::Gpus)
            .expect("GPUs shown");
        let row = (gpus.y..gpus.bottom())
            .find(|&r| gpu_at(&s, gpus, r) == Some(2))
            .expect("GPU 2 is drawn");
        assert!(click(area, &mut s, &keymap, &theme, gpus.x + 3, row));
        assert_eq!(s.ui.focus, Pane::Gpus);
        assert_eq!(s.ui.selected_gpu, 2);
        assert!(
            !click(area, &mut s, &keymap, &theme, gpus.x + 3, row),
            "no change"
        );
    }
}
