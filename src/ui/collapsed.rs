//! The one row that stands for the allocator panes (fragmentation and
//! the segment map) while the selected GPU shows no allocator: no probe
//! attached, no simulated training process, nothing the stress panel
//! holds there. Each of those panes would spend its rows on a sentence
//! saying it has nothing to show; on a box of 4–8 GPUs at 80×24 that cut
//! the GPU and process lists short. The row names the panes it stands for
//! and how to give them data, in the words the rest of the program uses
//! for each way (the probe's command, the stress panel's key as the
//! keymap binds it, `vramtop open FILE`), the longest wording that fits.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Widget};

use super::theme::Theme;
use crate::app::keymap::{Keymap, PanelKey};
use crate::app::state::{AppState, Pane};

/// The collapsed allocator panes' row of one frame.
pub struct CollapsedLine<'a> {
    state: &'a AppState,
    keymap: &'a Keymap,
    theme: &'a Theme,
    /// The panes the row stands for, in Tab order.
    panes: &'a [Pane],
}

impl<'a> CollapsedLine<'a> {
    pub fn new(
        state: &'a AppState,
        keymap: &'a Keymap,
        theme: &'a Theme,
        panes: &'a [Pane],
    ) -> Self {
        CollapsedLine {
            state,
            keymap,
            theme,
            panes,
        }
    }

    /// The panes' names as the row's title: "Fragmentation · Segments".
    fn label(&self) -> String {
        self.panes
            .iter()
            .map(|p| p.title())
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// What the row says after the panes' names, longest first: how to
    /// get an allocator to show, in fewer words down the list. The first
    /// [`CollapsedLine::ALL_WAYS`] name all three ways.
    pub fn notes(&self) -> Vec<String> {
        let on_gpu = match self.state.selected() {
            Some(gpu) => format!("no allocator on {}", gpu.label()),
            None => "no allocator".to_string(),
        };
        // The key as the keymap binds it: a relabelled key is named as it acts.
        let stress = self.keymap.stress_key_name(PanelKey::Open);
        let opens = stress.map(|k| format!(", {k} opens the stress panel"));
        let panel = stress.map(|k| format!(" · {k} stress panel"));
        let opens = opens.as_deref().unwrap_or_default();
        let panel = panel.as_deref().unwrap_or_default();
        let mut notes = vec![
            format!(
                "{on_gpu}: run PyTorch with `python -m vramtop_probe train.py` to attach{opens}, \
                 `vramtop open FILE` opens a snapshot"
            ),
            format!(
                "{on_gpu}: `python -m vramtop_probe train.py` attaches{panel} · `vramtop open FILE`"
            ),
            format!("no allocator: python -m vramtop_probe train.py{panel} · vramtop open FILE"),
            format!("no allocator: python -m vramtop_probe{panel} · vramtop open FILE"),
            // Where "python -m vramtop_probe" does not fit: a bare
            // "vramtop_probe" read as a command that is not one.
            format!("no allocator: docs/attach.md{panel} · vramtop open"),
        ];
        if !panel.is_empty() {
            notes.push(format!("no allocator{panel}"));
        }
        notes.push("no allocator".to_string());
        notes
    }

    /// How many of [`CollapsedLine::notes`], from the first, name every
    /// way to get an allocator.
    const ALL_WAYS: usize = 5;

    /// The row's text at `width` columns, as (title, note), the first
    /// that fits with a cell of border to spare of: a note naming every
    /// way beside the panes' names, then the notes alone (the names go
    /// before a way to get data: at 50 columns "no allocator · a stress
    /// panel" says more than the names and "no allocator"); else the
    /// shortest note, cut at the border.
    pub fn text(&self, width: u16) -> (Option<String>, String) {
        let width = usize::from(width);
        let label = self.label();
        let notes = self.notes();
        let (all_ways, fewer) = notes.split_at(Self::ALL_WAYS.min(notes.len()));
        // " label " + " note " and one cell of border.
        let with_label = |n: &&String| label.chars().count() + n.chars().count() + 5;
        let alone = |n: &&String| n.chars().count() + 3;
        if let Some(n) = all_ways.iter().find(|n| with_label(n) <= width) {
            return (Some(label), n.clone());
        }
        let alone = all_ways.iter().chain(fewer).find(|n| alone(n) <= width);
        (None, alone.or(notes.last()).cloned().unwrap_or_default())
    }
}

impl Widget for CollapsedLine<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let (label, note) = self.text(area.width);
        let mut spans = Vec::new();
        if let Some(label) = label {
            spans.push(Span::styled(format!(" {label} "), theme.title));
        }
        spans.push(Span::styled(format!(" {note} "), theme.dim));
        // A pane's top border: the row reads as the panes it stands for,
        // folded to their titles.
        Block::new()
            .borders(Borders::TOP)
            .border_style(theme.border)
            .title(Line::from(spans))
            .render(Rect { height: 1, ..area }, buf);
        super::chrome::mark_cut_title(area, buf);
        theme.finish(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_text(panes: &[Pane], width: u16) -> (Option<String>, String) {
        use crate::device::{GpuReading, GpuSample};
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        let keymap = Keymap::default();
        let theme = Theme::colored();
        CollapsedLine::new(&state, &keymap, &theme, panes).text(width)
    }

    #[test]
    fn at_80_columns_the_row_names_every_way_to_get_data_before_the_panes() {
        let (label, note) = line_text(&[Pane::Fragmentation, Pane::Segments], 80);
        let keymap = Keymap::default();
        let a = keymap
            .stress_key_name(PanelKey::Open)
            .expect("a key opens the panel");
        // The ways to get data outrank the panes' names at 80 columns.
        assert_eq!(label, None);
        assert!(note.contains("python -m vramtop_probe"), "{note}");
        assert!(note.contains(&format!("{a} stress panel")), "{note}");
        assert!(note.contains("vramtop open FILE"), "{note}");
    }

    #[test]
    fn a_wide_row_says_the_gpu_and_the_whole_probe_command() {
        let (_, note) = line_text(&[Pane::Fragmentation, Pane::Segments], 200);
        assert!(
            note.starts_with("no allocator on GPU 0: run PyTorch with"),
            "{note}"
        );
        assert!(note.contains("python -m vramtop_probe train.py"), "{note}");
        assert!(note.contains("vramtop open FILE"), "{note}");
    }

    #[test]
    fn every_width_from_the_smallest_terminal_gets_a_row_that_fits() {
        for width in super::super::MIN_WIDTH..=240 {
            let (label, note) = line_text(&[Pane::Fragmentation, Pane::Segments], width);
            let used = label.map_or(0, |l| l.chars().count() + 2) + note.chars().count() + 2;
            assert!(used < usize::from(width), "{width}: {note}");
        }
    }

    #[test]
    fn the_probe_is_named_as_the_whole_command_or_not_at_all() {
        // At 80 columns with one pane collapsed the row read
        // "vramtop_probe", the command cut to a word that runs nothing.
        for panes in [
            &[Pane::Segments][..],
            &[Pane::Fragmentation],
            &[Pane::Fragmentation, Pane::Segments],
        ] {
            for width in super::super::MIN_WIDTH..=240 {
                let (_, note) = line_text(panes, width);
                assert!(
                    !note.contains("vramtop_probe") || note.contains("python -m vramtop_probe"),
                    "{panes:?} at {width}: {note}"
                );
            }
        }
        let (label, note) = line_text(&[Pane::Segments], 80);
        assert_eq!(label.as_deref(), Some("Segments"));
        assert!(note.contains("docs/attach.md"), "{note}");
    }

    #[test]
    fn a_narrow_row_keeps_the_stress_key_before_the_panes_names() {
        let (label, note) = line_text(&[Pane::Fragmentation, Pane::Segments], 50);
        let keymap = Keymap::default();
        let a = keymap
            .stress_key_name(PanelKey::Open)
            .expect("a key opens the panel");
        assert_eq!(label, None);
        assert_eq!(note, format!("no allocator · {a} stress panel"));
    }

    #[test]
    fn at_120_columns_the_row_names_both_panes_and_every_way() {
        let (label, note) = line_text(&[Pane::Fragmentation, Pane::Segments], 120);
        assert_eq!(label.as_deref(), Some("Fragmentation · Segments"));
        assert!(note.contains("python -m vramtop_probe train.py"), "{note}");
        assert!(note.contains("vramtop open FILE"), "{note}");
    }

    #[test]
    fn the_row_names_only_the_panes_it_stands_for() {
        let (label, _) = line_text(&[Pane::Segments], 120);
        assert_eq!(label.as_deref(), Some("Segments"));
    }

    #[test]
    fn a_relabelled_stress_key_is_the_one_the_row_names() {
        use crate::device::{GpuReading, GpuSample};
        let mut state = AppState::new(crate::app::state::StatusState::default());
        state.apply_sample(
            0,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            std::collections::BTreeMap::new(),
        );
        let mut keymap = Keymap::default();
        for b in keymap.stress.iter_mut().filter(|b| b.key == PanelKey::Open) {
            b.keys = "F9";
        }
        let theme = Theme::colored();
        let panes = [Pane::Fragmentation, Pane::Segments];
        let (_, note) = CollapsedLine::new(&state, &keymap, &theme, &panes).text(80);
        assert!(note.contains("F9 stress panel"), "{note}");
        assert!(!note.contains(" a stress"), "{note}");
    }
}
