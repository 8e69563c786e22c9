//! Where [`layout`] puts the panes while the allocator panes have nothing
//! to show (no probe, no simulated training process, nothing the stress
//! panel holds on the selected GPU) and once they have: row counts of a
//! box of 1, 4 and 8 GPUs at 80×24 and 120×40, two processes a GPU.

use std::collections::BTreeMap;

use ratatui::layout::Rect;

use super::{GpusPane, ProcessesPane, ScreenLayout, Theme, layout};
use crate::alloc::DeviceMemory as _;
use crate::app::keymap::Keymap;
use crate::app::state::{AllocatorView, AppState, Pane, StatusState};
use crate::device::Telemetry as _;
use crate::device::sim::{SimCluster, SimConfig, SimMemory};

const GIB: u64 = 1 << 30;
const SIZES: [(u16, u16); 2] = [(80, 24), (120, 40)];

/// `gpus` simulated GPUs, each with two processes holding memory, and
/// `trainers` simulated training processes (on GPUs 0, 1, …: the GPUs
/// whose allocator is seen); 5 samples. The processes' handles are
/// returned to keep them alive.
fn box_of(gpus: usize, trainers: usize) -> (AppState, Vec<SimMemory>) {
    let cluster = SimCluster::new(SimConfig {
        gpus,
        training_processes: trainers,
        seed: 7,
        ..SimConfig::default()
    });
    let mut handles = Vec::new();
    for gpu in 0..u32::try_from(gpus).unwrap_or(u32::MAX) {
        for command in ["python serve.py", "python eval.py"] {
            let mut process = cluster.new_process(gpu, command);
            process.malloc(GIB).expect("1 GiB fits a simulated GPU");
            handles.push(process);
        }
    }
    let mut state = AppState::new(StatusState::default());
    let mut telemetry = cluster.telemetry();
    for _ in 0..5 {
        cluster.advance(1000);
        let readings = telemetry.sample().expect("the simulation answers");
        let allocators: BTreeMap<u32, AllocatorView> = cluster
            .trainers()
            .into_iter()
            .map(|t| {
                let source = format!("pid {} (simulated training)", t.pid);
                (
                    t.gpu,
                    AllocatorView::new(source, Some(t.pid), t.stats, t.layout),
                )
            })
            .collect();
        state.apply_sample(cluster.now_ms(), readings, allocators);
    }
    (state, handles)
}

fn screen(state: &AppState, (w, h): (u16, u16)) -> ScreenLayout {
    layout(
        Rect::new(0, 0, w, h),
        state,
        &Keymap::default(),
        &Theme::colored(),
    )
}

fn rows(screen: &ScreenLayout, pane: Pane) -> u16 {
    screen.area_of(pane).map_or(0, |r| r.height)
}

/// Every row of the body is some pane's or the collapsed row's: the rows
/// the allocator panes give up are not lost.
fn assert_body_filled(screen: &ScreenLayout, (w, h): (u16, u16)) {
    let mut covered = vec![false; usize::from(h)];
    let mut mark = |r: Rect| {
        for y in r.y..r.bottom() {
            covered[usize::from(y)] = true;
        }
    };
    for &(_, r) in &screen.panes {
        mark(r);
    }
    if let Some(c) = &screen.collapsed {
        assert_eq!(c.area.height, 1, "one row");
        assert_eq!(c.area.width, w, "the whole width");
        mark(c.area);
    }
    mark(screen.status);
    assert!(covered.iter().all(|&c| c), "{w}×{h}: {screen:?}");
}

#[test]
fn without_an_allocator_the_panes_fold_into_one_row_and_the_lists_take_theirs() {
    // (GPUs, size) → rows of the GPUs pane and of the process list,
    // title and header included: every GPU listed, the process list
    // whole where it fits (a line for each of two processes a GPU), else
    // what is left after the timeline's least. With a training process
    // on GPU 0 the lists had (6, 4) rows for 4 GPUs at 80×24, (8, 3) for
    // 8, and (10, 9) for 8 at 120×40.
    // (GPUs, (columns, rows)), (GPU pane rows, process list rows)
    type Case = ((usize, (u16, u16)), (u16, u16));
    let expected: [Case; 6] = [
        ((1, (80, 24)), (3, 4)),
        ((4, (80, 24)), (6, 8)),
        ((8, (80, 24)), (10, 4)),
        ((1, (120, 40)), (3, 4)),
        ((4, (120, 40)), (6, 10)),
        ((8, (120, 40)), (10, 18)),
    ];
    for ((gpus, size), (gpu_rows, process_rows)) in expected {
        let (state, _handles) = box_of(gpus, 0);
        let screen = screen(&state, size);
        let collapsed = screen.collapsed.as_ref().expect("folded");
        assert_eq!(collapsed.panes, [Pane::Fragmentation, Pane::Segments]);
        assert_eq!(screen.area_of(Pane::Fragmentation), None);
        assert_eq!(screen.area_of(Pane::Segments), None);
        assert_eq!(
            (rows(&screen, Pane::Gpus), rows(&screen, Pane::Processes)),
            (gpu_rows, process_rows),
            "{gpus} GPUs at {size:?}: {screen:?}"
        );
        // The timeline stays, at least at its least.
        assert!(rows(&screen, Pane::Timeline) >= 5, "{screen:?}");
        assert_body_filled(&screen, size);
    }
}

#[test]
fn folding_the_allocator_panes_gives_the_gpu_and_process_lists_more_rows() {
    for gpus in [4, 8] {
        for size in SIZES {
            let (state, _handles) = box_of(gpus, 0);
            let folded = screen(&state, size);
            let lists = |s: &ScreenLayout| rows(s, Pane::Gpus) + rows(s, Pane::Processes);
            let (with_data, _h) = box_of(gpus, gpus);
            let busy = screen(&with_data, size);
            assert!(
                lists(&folded) > lists(&busy),
                "{gpus} GPUs at {size:?}: {} ≤ {}",
                lists(&folded),
                lists(&busy)
            );
            // Every GPU row shows where the list fits whole.
            assert!(
                rows(&folded, Pane::Gpus) >= rows(&busy, Pane::Gpus),
                "{gpus} GPUs at {size:?}"
            );
        }
    }
}

#[test]
fn eight_gpus_at_80x24_list_every_gpu_without_an_allocator_and_scroll_with_one() {
    let (state, _h) = box_of(8, 0);
    let folded = screen(&state, (80, 24));
    assert_eq!(
        rows(&folded, Pane::Gpus),
        GpusPane::preferred_height(&state)
    );
    let (state, _h) = box_of(8, 1);
    let busy = screen(&state, (80, 24));
    assert!(rows(&busy, Pane::Gpus) < GpusPane::preferred_height(&state));
}

#[test]
fn when_an_allocator_is_seen_its_panes_get_their_rows_back() {
    for gpus in [1, 4, 8] {
        for size in SIZES {
            // GPU 0 has a training process; GPU 1 (where there is one)
            // has none.
            let (mut state, _h) = box_of(gpus, 1);
            let busy = screen(&state, size);
            assert_eq!(busy.collapsed, None, "{gpus} GPUs at {size:?}");
            assert!(rows(&busy, Pane::Fragmentation) >= 4, "{busy:?}");
            assert!(rows(&busy, Pane::Segments) >= 3, "{busy:?}");
            assert_body_filled(&busy, size);
            if gpus > 1 {
                state.ui.selected_gpu = 1;
                let folded = screen(&state, size);
                assert!(folded.collapsed.is_some(), "{gpus} GPUs at {size:?}");
                state.ui.selected_gpu = 0;
                assert_eq!(screen(&state, size), busy, "back as it was");
            }
        }
    }
}

#[test]
fn a_focused_allocator_pane_is_not_folded_and_the_row_stands_for_the_other() {
    let (mut state, _h) = box_of(4, 0);
    for (focus, other) in [
        (Pane::Fragmentation, Pane::Segments),
        (Pane::Segments, Pane::Fragmentation),
    ] {
        state.ui.focus = focus;
        for size in SIZES {
            let screen = screen(&state, size);
            assert!(
                rows(&screen, focus) >= 3,
                "{focus:?} at {size:?}: {screen:?}"
            );
            let collapsed = screen.collapsed.as_ref().expect("the other folds");
            assert_eq!(collapsed.panes, [other]);
            assert_eq!(screen.area_of(other), None);
            assert_body_filled(&screen, size);
        }
    }
}

#[test]
fn with_the_stress_panel_open_nothing_folds() {
    let (mut state, _h) = box_of(4, 0);
    state.ui.stress_open = true;
    for size in SIZES {
        assert_eq!(screen(&state, size).collapsed, None, "{size:?}");
    }
}

#[test]
fn a_focused_process_list_that_fits_whole_is_whole_beside_the_row() {
    let (mut state, _h) = box_of(4, 0);
    state.ui.focus = Pane::Processes;
    let screen = screen(&state, (120, 40));
    assert_eq!(
        rows(&screen, Pane::Processes),
        ProcessesPane::preferred_height(&state)
    );
    assert_eq!(
        rows(&screen, Pane::Gpus),
        GpusPane::preferred_height(&state)
    );
}

#[test]
fn at_every_size_the_folded_layout_fills_the_body_and_keeps_in_it() {
    for gpus in [1, 8] {
        let (state, _h) = box_of(gpus, 0);
        for w in (40..=130).step_by(9) {
            for h in 10..=45 {
                let screen = screen(&state, (w, h));
                assert_body_filled(&screen, (w, h));
                let body_end = screen.status.y;
                for &(pane, r) in &screen.panes {
                    assert!(r.bottom() <= body_end, "{pane:?} at {w}×{h}: {screen:?}");
                }
            }
        }
    }
}

#[test]
fn before_the_first_sample_nothing_folds() {
    let state = AppState::new(StatusState::default());
    for size in SIZES {
        let screen = screen(&state, size);
        assert_eq!(screen.collapsed, None, "{size:?}");
        assert!(screen.area_of(Pane::Segments).is_some(), "{size:?}");
    }
}
