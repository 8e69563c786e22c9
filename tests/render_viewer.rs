//! Render tests of the snapshot viewer (`vramtop open FILE`): whole screens
//! at several cursor positions of a real PyTorch snapshot and the block
//! detail with its stack frames, drawn into ratatui's `TestBackend` and
//! compared with reviewed insta snapshots. Keys go through the viewer's
//! own key handling, as in the terminal.

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use vramtop::alloc::TraceAction;
use vramtop::app::keymap::Keymap;
use vramtop::app::state::Overlay;
use vramtop::app::viewer::ViewerState;
use vramtop::ui::{
    Theme, detail_lines, render_loading, render_viewer, status_text, status_text_within,
};

use common::screen::{help_row, text};
use common::shared_viewer as viewer;

const SILMONT: &str = "silmont_mem_snapshot.pickle";

fn press(v: &mut ViewerState, code: KeyCode) {
    v.handle_key(&Keymap::default(), KeyEvent::new(code, KeyModifiers::NONE));
}

fn draw_with(v: &ViewerState, w: u16, h: u16, theme: &Theme) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| {
            let area = f.area();
            render_viewer(area, f.buffer_mut(), v, &Keymap::default(), theme);
        })
        .expect("draws");
    terminal
}

fn draw(v: &ViewerState, w: u16, h: u16) -> Terminal<TestBackend> {
    draw_with(v, w, h, &Theme::colored())
}

/// Moves the cursor to `target` with Home and → presses.
fn seek(v: &mut ViewerState, target: usize) {
    press(v, KeyCode::Home);
    for _ in 0..target {
        press(v, KeyCode::Right);
    }
    assert_eq!(v.cursor(), target);
}

#[test]
fn opens_at_the_end_of_the_trace_showing_the_files_own_state() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    assert_eq!(v.cursor(), 97);
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("event 97/97"), "{screen}");
    assert!(screen.contains("9 segments"), "{screen}");
    insta::assert_snapshot!("viewer_end_120x40", t.backend());
}

#[test]
fn an_inconsistent_trace_is_said_to_be_so_beside_its_figures() {
    // SnapViewer's sample file is hand-made: its trace allocates 2.10 GiB
    // in 250 MiB of segments. A consistent file says nothing of the kind.
    let Some(v) = viewer("snapviewer_memory.pickle") else {
        return;
    };
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let gpu_row = screen.lines().nth(1).unwrap_or_default();
    assert!(gpu_row.contains("events inconsistent"), "{screen}");
    // At 80 columns the warning stays whole: the peaks' cursors go first.
    let screen = text(draw(&v, 80, 24).backend().buffer());
    let gpu_row = screen.lines().nth(1).unwrap_or_default();
    let misfits = v.scrub.devices[0].misfits;
    assert!(misfits > 0);
    assert!(
        gpu_row.contains(&format!("  {misfits} inconsistent")),
        "{screen}"
    );
    assert!(gpu_row.contains("(pk 2.10 GiB)"), "{screen}");
    // The label stays, as a row without the warning has it.
    assert!(gpu_row.contains("GPU 0  res "), "{screen}");
    // Nine columns more and "events" fits: it says what is inconsistent.
    let screen = text(draw(&v, 89, 24).backend().buffer());
    let gpu_row = screen.lines().nth(1).unwrap_or_default();
    assert!(
        gpu_row.contains(&format!("  {misfits} events inconsistent"))
            && gpu_row.contains("(pk 2.10 GiB)"),
        "{screen}"
    );
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(!screen.contains("inconsistent"), "{screen}");
}

#[test]
fn panes_left_on_the_files_final_state_by_an_inconsistent_trace_say_so_in_their_titles() {
    // SnapViewer's hand-made file: its trace's blocks lie outside every
    // segment, so at its peak (`P`) the GPUs row says 2.10 GiB allocated
    // while the map, breakdown and fragmentation show the file's state.
    let Some(mut v) = viewer("snapviewer_memory.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    assert!(v.cursor() < v.scrub.devices[0].len());
    assert!(v.shows_final_state);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let titled = |title: &str| {
        screen
            .lines()
            .find(|l| l.contains(title))
            .unwrap_or_default()
            .to_string()
    };
    let note = "final state";
    for title in ["Memory breakdown", "Segments"] {
        assert!(titled(title).contains(note), "{title}: {screen}");
    }
    // The note fits the narrower fragmentation pane's title too, at 80×24
    // as well.
    assert!(titled("Fragmentation").contains(note), "{screen}");
    let small = text(draw(&v, 80, 24).backend().buffer());
    let fragmentation = small
        .lines()
        .find(|l| l.contains("Fragmentation"))
        .unwrap_or_default();
    assert!(fragmentation.contains(note), "{small}");
    assert!(!titled(" GPUs ").contains(note), "{screen}");
    // At the end the panes show the file's state as the rest does.
    press(&mut v, KeyCode::End);
    assert!(!v.shows_final_state);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(!screen.contains(note), "{screen}");
    // A consistent file's panes follow the cursor: no such note anywhere.
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    for key in [KeyCode::Home, KeyCode::Char('P')] {
        press(&mut v, key);
        assert!(!v.shows_final_state);
        let screen = text(draw(&v, 120, 40).backend().buffer());
        assert!(!screen.contains(note), "{screen}");
    }
}

#[test]
fn the_final_state_note_stays_off_where_the_panes_show_the_cursors_own_state() {
    // SnapViewer's file before its first event: the state there is the
    // final one, every block inside a segment, so the panes and the GPUs
    // row agree (8.50 KiB allocated of 250 MiB). The note said "final
    // state" there as if the panes were not the cursor's.
    let Some(mut v) = viewer("snapviewer_memory.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Home);
    assert_eq!(v.cursor(), 0);
    let d = &v.scrub.devices[0];
    assert!(d.misfits > 0, "an inconsistent trace");
    let shown = |v: &ViewerState| {
        let allocated: u64 = v.segments.iter().filter_map(|s| s.allocated_size).sum();
        let reserved: u64 = v.segments.iter().map(|s| s.total_size).sum();
        (allocated, reserved)
    };
    let at = |v: &ViewerState| {
        let p = v.scrub.devices[0].points[v.cursor()];
        (p.allocated, p.reserved)
    };
    assert_eq!(shown(&v), at(&v), "the panes' figures are the cursor's");
    assert!(!v.shows_final_state);
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        assert!(!screen.contains("final state"), "{screen}");
    }
    // One event on, the trace allocates outside every segment: the GPUs
    // row counts it, the panes cannot, and say so.
    press(&mut v, KeyCode::Right);
    assert_ne!(shown(&v), at(&v));
    assert!(v.shows_final_state);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let segments = screen
        .lines()
        .find(|l| l.contains(" Segments "))
        .unwrap_or_default();
    assert!(segments.contains("final state"), "{screen}");
}

#[test]
fn at_80x24_the_segments_title_and_its_legend_share_their_row_with_border_between() {
    // SnapViewer's file at its peak shows its final state, and
    // "final state" made the title run into the legend: "22 bl█ allocated".
    let Some(mut v) = viewer("snapviewer_memory.pickle") else {
        return;
    };
    for key in [KeyCode::Char('P'), KeyCode::Home, KeyCode::End] {
        press(&mut v, key);
        let screen = text(draw(&v, 80, 24).backend().buffer());
        let row = screen
            .lines()
            .find(|l| l.contains(" Segments "))
            .unwrap_or_default();
        assert_eq!(
            row.contains("final state"),
            v.shows_final_state,
            "{key:?}: {screen}"
        );
        // The counts whole, then the border (at least one cell of it),
        // then the legend whole.
        let after = row.split("5 segments · 22 blocks ").nth(1);
        assert!(
            after.is_some_and(|a| a.starts_with('─') && a.ends_with("█ allocated ▓ free ▚ pending ")),
            "{key:?}: {row}"
        );
    }
}

#[test]
fn a_blocks_detail_gives_one_reason_for_its_missing_stack() {
    let Some(mut v) = viewer("snapviewer_memory.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    let (_, b) = v.selected_block().expect("a block");
    assert!(b.frames.is_empty() && b.state.is_active());
    let detail: String = detail_lines(&v, 100)
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        detail.contains("before the trace began, while history was off"),
        "{detail}"
    );
    assert!(
        detail.contains("no stack: allocated while history was off"),
        "{detail}"
    );
    assert!(
        detail.contains("stack: n/a (allocated while history was off;"),
        "{detail}"
    );
    assert!(!detail.contains(" or recorded without stacks"), "{detail}");
}

#[test]
fn home_on_a_trace_that_begins_mid_run_says_its_start_is_inferred() {
    // Hyperion's ring buffer began mid-run: 6.02 GiB is live before its
    // first event, rebuilt from the final state (`replay`'s `inferred:`).
    let Some(mut v) = viewer("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Home);
    let said = "event 0/7905 · before the first event · start inferred: the trace begins mid-run";
    assert!(status_text(&v).starts_with(said), "{}", status_text(&v));
    // A narrow line keeps the short form.
    let narrow = status_text_within(&v, 60);
    assert!(
        narrow.starts_with("event 0/7905 · before the first event · start inferred"),
        "{narrow}"
    );
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("start inferred"), "{screen}");
    // One event on, the event is named instead.
    press(&mut v, KeyCode::Right);
    assert!(!status_text(&v).contains("start inferred"));
    // A trace that starts from an empty allocator says nothing of it.
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Home);
    assert!(!status_text(&v).contains("inferred"), "{}", status_text(&v));
}

#[test]
fn an_empty_file_is_said_to_have_no_segments_and_no_trace_in_the_viewers_own_words() {
    // `pickle.dumps({'segments': [], 'device_traces': []}, protocol=2)`.
    let bytes = b"\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02\
                  X\r\x00\x00\x00device_tracesq\x03]q\x04u.";
    let snapshot = vramtop::snapshot::read_snapshot(bytes).expect("a valid, empty snapshot");
    let v = ViewerState::new("empty.pickle".to_string(), snapshot);
    assert!(v.scrub.devices.is_empty());
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        // The dashboard's words point at a process's allocator.
        assert!(!screen.contains("allocator view"), "{screen}");
        assert!(!screen.contains("simulated training"), "{screen}");
        assert!(!screen.contains("point of the trace"), "{screen}");
        assert!(
            screen.contains("nothing reserved: the file has no segments"),
            "{screen}"
        );
        assert!(screen.contains("the file has no trace"), "{screen}");
        // The segment map's own note, under its title.
        let lines: Vec<&str> = screen.lines().collect();
        let map = lines
            .iter()
            .position(|l| l.starts_with(" Segments"))
            .expect("the segment map");
        assert!(
            lines[map + 1].starts_with("the file has no segments"),
            "{screen}"
        );
        // The hints offer no key that moves along a trace.
        let hints = lines.last().copied().unwrap_or_default();
        assert!(hints.starts_with("q quit  ? help"), "{screen}");
        for trace_key in ["event", "page", "OOM", "segment", "empty_cache"] {
            assert!(!hints.contains(trace_key), "{trace_key}: {hints}");
        }
    }
    insta::assert_snapshot!("viewer_empty_file_80x24", draw(&v, 80, 24).backend());
    // A trace key pressed anyway says why it does nothing.
    let mut v = v;
    press(&mut v, KeyCode::Right);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.starts_with("no trace in this file"), "{notice}");
}

#[test]
fn below_40x10_the_viewer_says_the_size_and_the_one_key_that_acts() {
    let snapshot =
        vramtop::snapshot::read_snapshot(b"\x80\x02]q\x00.").expect("an empty segment list");
    let mut v = ViewerState::new("empty.pickle".to_string(), snapshot);
    let words = |v: &ViewerState| {
        let screen = text(draw(v, 30, 8).backend().buffer());
        screen
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(words(&v), "30×8: needs at least 40×10\nq quits");
    // Opened from the dashboard, `q` goes back there.
    v.returns_to_dashboard = true;
    assert_eq!(words(&v), "30×8: needs at least 40×10\nq goes back");
}

#[test]
fn at_80_columns_the_hints_offer_the_peak_and_the_sites_whose_memory_it_is_is_read_with() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let hints = |v: &ViewerState| {
        let screen = text(draw(v, 80, 24).backend().buffer());
        screen.lines().last().unwrap_or_default().to_string()
    };
    // At the end (where it opens), mid-trace, and with the sites pane
    // open (its Enter hint is the longest): `P` was ranked with the page
    // and filter keys and fell off the line.
    for line in [
        hints(&v),
        {
            seek(&mut v, 40);
            hints(&v)
        },
        {
            press(&mut v, KeyCode::Char('w'));
            hints(&v)
        },
    ] {
        assert!(line.contains("  P peak"), "{line}");
        assert!(line.contains("  w sites"), "{line}");
    }
}

#[test]
fn a_file_with_no_gpu_hints_only_quit_and_help() {
    // `pickle.dumps([], protocol=2)`, a bare segment list with none: no
    // segments, no trace, no GPU.
    let snapshot =
        vramtop::snapshot::read_snapshot(b"\x80\x02]q\x00.").expect("an empty segment list");
    let v = ViewerState::new("empty.pickle".to_string(), snapshot);
    assert!(v.scrub.devices.is_empty());
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        // Enter, s, p, w and g had nothing to act on: no block, stream,
        // pool or site.
        let hints = screen.lines().last().unwrap_or_default().trim_end();
        assert_eq!(hints, "q quit  ? help", "{screen}");
    }
}

#[test]
fn home_shows_the_empty_allocator_before_the_first_event() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Home);
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(
        screen.contains("event 0/97 · before the first event"),
        "{screen}"
    );
    assert!(screen.contains("nothing reserved"), "{screen}");
    insta::assert_snapshot!("viewer_start_120x40", t.backend());
}

#[test]
fn middle_of_the_trace_draws_the_cursor_line_and_that_moments_segments() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 48);
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("event 48/97"), "{screen}");
    assert!(screen.contains("cursor 48"), "{screen}");
    insta::assert_snapshot!("viewer_middle_120x40", t.backend());
}

/// The rows of the screen whose text has `title` in it (a pane's top
/// border), top first.
fn rows_titled(screen: &str, title: &str) -> Vec<usize> {
    screen
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(title))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn stepping_through_the_trace_keeps_the_timeline_on_the_same_rows() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // 0 segments before the first event, 9 at the end: the segments pane
    // followed the count, so the timeline above it took 3 rows at the
    // start that it lost later.
    for (w, h) in [(80, 24), (120, 40)] {
        let panes = |v: &ViewerState| {
            let screen = text(draw(v, w, h).backend().buffer());
            let (timeline, segments) = (
                rows_titled(&screen, " Timeline "),
                rows_titled(&screen, " Segments "),
            );
            assert!(
                timeline.len() == 1 && segments.len() == 1,
                "{w}×{h} at {}: {screen}",
                v.cursor()
            );
            (timeline[0], segments[0])
        };
        press(&mut v, KeyCode::Home);
        let at_start = panes(&v);
        for cursor in 1..=97 {
            press(&mut v, KeyCode::Right);
            assert_eq!(v.cursor(), cursor);
            assert_eq!(
                panes(&v),
                at_start,
                "{w}×{h}: the timeline's rows at event {cursor} and before the first"
            );
        }
    }
}

#[test]
fn n_jumps_to_a_segment_alloc_and_shows_the_new_segment() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Home);
    for _ in 0..3 {
        press(&mut v, KeyCode::Char('n'));
    }
    let e = v.current_event().expect("after an event");
    assert_eq!(e.action, TraceAction::SegmentAlloc);
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("segment_alloc"), "{screen}");
    insta::assert_snapshot!("viewer_segment_alloc_120x40", t.backend());
}

/// Moves the selection down to the first allocated block with a stack.
fn select_a_block_with_a_stack(v: &mut ViewerState) {
    let mut guard = 0;
    while !v
        .selected_block()
        .is_some_and(|(_, b)| !b.frames.is_empty() && b.state.is_active())
    {
        press(v, KeyCode::Down);
        guard += 1;
        assert!(guard < 100, "no block with frames at the cursor");
    }
}

#[test]
fn enter_opens_the_block_detail_with_the_python_frames_of_its_allocation() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 20);
    select_a_block_with_a_stack(&mut v);
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let lines: Vec<String> = detail_lines(&v, 100)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let frames = lines.join("\n");
    assert!(frames.contains("innermost first"), "{frames}");
    assert!(
        frames.contains("cs336_systems/trace_peak_memory.py:35 main"),
        "{frames}"
    );
    assert!(frames.contains("20 C++ frames hidden"), "{frames}");
    let t = draw(&v, 120, 40);
    insta::assert_snapshot!("viewer_block_detail_120x40", t.backend());
    press(&mut v, KeyCode::Esc);
    assert!(!v.detail_open);
}

#[test]
fn a_free_blocks_detail_names_the_allocation_the_trace_last_freed_there() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // Block 1 at the end: 512 MiB free at 0x7f2062000000, DivBackward0's
    // at event 53 (freed at 63), then ExpBackward0's from 70 to 88.
    let (_, b) = v.selected_block().expect("a block");
    assert_eq!(b.address, 0x7f20_6200_0000);
    assert_eq!(b.state, vramtop::alloc::BlockState::Inactive);
    press(&mut v, KeyCode::Enter);
    let detail = detail_lines(&v, 100)
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert!(
        detail.contains(
            "last held by ExpBackward0::apply (C++, backward pass) (allocated at event 70, freed at event 88)"
        ),
        "{detail}"
    );
    assert!(
        detail.contains("stack of its last allocation, innermost first"),
        "{detail}"
    );
    assert!(
        detail.contains("torch::autograd::generated::ExpBackward0::apply"),
        "{detail}"
    );
    assert!(!detail.contains("no allocation recorded"), "{detail}");
    insta::assert_snapshot!(
        "viewer_free_block_last_held_120x40",
        draw(&v, 120, 40).backend()
    );
    // Before event 63 the last allocation freed there is DivBackward0's.
    press(&mut v, KeyCode::Esc);
    seek(&mut v, 65);
    for _ in 0..100 {
        press(&mut v, KeyCode::Up);
    }
    let mut guard = 0;
    while v
        .selected_block()
        .is_some_and(|(_, b)| b.address != 0x7f20_6200_0000)
    {
        press(&mut v, KeyCode::Down);
        guard += 1;
        assert!(guard < 100, "no block at 0x7f2062000000 at event 65");
    }
    let (_, b) = v.selected_block().expect("a block");
    assert_eq!(b.state, vramtop::alloc::BlockState::Inactive);
    let detail = detail_lines(&v, 100)
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert!(
        detail.contains(
            "last held by DivBackward0::apply (C++, backward pass) (allocated at event 53, freed at event 63)"
        ),
        "{detail}"
    );
}

#[test]
fn the_block_detail_names_the_private_pool_of_its_segment_and_not_the_default_one() {
    // volcengine's segments are in three pools: (0, 0), (0, 1), (0, 2).
    let Some(mut v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    let segment_line = |v: &ViewerState| -> String {
        detail_lines(v, 100)
            .iter()
            .map(|l| l.to_string())
            .find(|l| l.starts_with("segment "))
            .expect("a segment row")
    };
    // Down through the blocks until one of each kind of pool was seen.
    let (mut default_line, mut private_line) = (None, None);
    for _ in 0..700 {
        let pool = v.selected_block().expect("a block").0.segment_pool_id;
        if pool == (0, 0) {
            default_line.get_or_insert_with(|| segment_line(&v));
        } else {
            private_line.get_or_insert_with(|| (pool, segment_line(&v)));
        }
        if default_line.is_some() && private_line.is_some() {
            break;
        }
        press(&mut v, KeyCode::Down);
    }
    let default_line = default_line.expect("a block of the default pool");
    assert!(!default_line.contains("private"), "{default_line}");
    let (pool, line) = private_line.expect("a block of a private pool");
    // As the summary writes it ("GPU 0 pool (0,1) private: …").
    assert!(
        line.ends_with(&format!(", private pool ({},{})", pool.0, pool.1)),
        "{line}"
    );
}

#[test]
fn at_80_columns_the_block_detail_keeps_a_private_pools_id_on_one_row() {
    // The segment row of a private pool's block wraps at 80 columns; its
    // id was parted as "(0," and "1)".
    let Some(mut v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    for _ in 0..700 {
        if v.selected_block().expect("a block").0.segment_pool_id != (0, 0) {
            break;
        }
        press(&mut v, KeyCode::Down);
    }
    let pool = v.selected_block().expect("a block").0.segment_pool_id;
    assert_ne!(pool, (0, 0), "a block of a private pool");
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let screen = text(draw(&v, 80, 24).backend().buffer());
    let id = format!("({},{})", pool.0, pool.1);
    assert!(screen.lines().any(|l| l.contains(&id)), "{id}\n{screen}");
    let parted = format!("({},", pool.0);
    assert!(
        !screen
            .lines()
            .any(|l| l.trim_end_matches([' ', '│']).ends_with(&parted)),
        "{screen}"
    );
}

#[test]
fn the_segment_map_marks_private_pools_segments_with_a_legend_clear_of_its_title() {
    // volcengine's 127 segments: 68 of them in the private pools (0,1)
    // and (0,2).
    let Some(mut v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    // Down to the first segment of the default pool: the rows above it are
    // a private pool's.
    for _ in 0..700 {
        if v.selected_block().expect("a block").0.segment_pool_id == (0, 0) {
            break;
        }
        press(&mut v, KeyCode::Down);
    }
    assert_eq!(
        v.selected_block().expect("a block").0.segment_pool_id,
        (0, 0)
    );
    for (w, h) in [(80, 24), (120, 40)] {
        let t = draw(&v, w, h);
        let screen = text(t.backend().buffer());
        let mut lines = screen.lines().skip_while(|l| !l.starts_with(" Segments "));
        let title = lines.next().expect("the segment map's title");
        // The counts whole, a cell of border, then the legend.
        assert!(
            title.contains(" 127 segments · 638 blocks ─"),
            "{w}x{h}: {title}"
        );
        assert!(
            title.trim_end().ends_with("P private pool"),
            "{w}x{h}: {title}"
        );
        // Each segment row: pool letter, E, the private pool's P, a space.
        let rows: Vec<&str> = lines
            .take_while(|l| l.starts_with("L ") || l.starts_with("S "))
            .collect();
        assert!(!rows.is_empty(), "{w}x{h}: {screen}");
        for row in &rows {
            let marks: Vec<char> = row.chars().take(4).collect();
            assert!(
                matches!(marks[..], [_, ' ', 'P' | ' ', ' ']),
                "{w}x{h}: {row}"
            );
        }
        assert!(
            rows.iter().any(|r| r.starts_with("L P ")),
            "{w}x{h}: {screen}"
        );
        assert!(
            rows.iter().any(|r| r.get(2..4) == Some("  ")),
            "{w}x{h}: {screen}"
        );
        insta::assert_snapshot!(format!("viewer_private_pools_{w}x{h}"), t.backend());
    }
    // At 120 columns the block states' glyphs are named too.
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(
        screen.contains("─█ allocated ▓ free ▚ pending P private pool"),
        "{screen}"
    );
    // A file without private pools has neither the column nor the entry.
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(!screen.contains("private pool"), "{screen}");
    assert!(screen.contains("\nL  0x"), "{screen}");
}

#[test]
fn a_file_without_a_trace_says_what_would_have_given_one_for_how_it_was_recorded() {
    // Both carry allocation stacks, so history was on: "record with
    // _record_memory_history()" was wrong for them.
    for (name, says) in [
        (
            "muduard_memory_snapshot.pkl",
            [
                "memory_snapshot()",
                "torch.cuda.memory._dump_snapshot(FILE)",
            ],
        ),
        (
            "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
            ["2.0", "trace_alloc_max_entries=N);"],
        ),
    ] {
        let Some(v) = viewer(name) else {
            return;
        };
        let screen = text(draw(&v, 160, 48).backend().buffer());
        assert!(screen.contains("no trace:"), "{name}\n{screen}");
        for word in says {
            assert!(screen.contains(word), "{name}: {word}\n{screen}");
        }
        assert!(!screen.contains("to get one"), "{name}\n{screen}");
    }
}

#[test]
fn the_block_detail_counts_runpy_frames_as_the_launchers_not_the_allocators() {
    // Yiyi's stacks end in python3.9/runpy.py: they were "2
    // unwinder/allocator frames dropped".
    let Some(mut v) = viewer("Yiyi-philosophy_LLM-inference_oom_snapshot.pickle") else {
        return;
    };
    select_a_block_with_a_stack(&mut v);
    let lines: Vec<String> = detail_lines(&v, 100)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let text = lines.join(" ");
    assert!(text.contains("2 launcher frames (runpy) dropped"), "{text}");
    assert!(!text.contains("unwinder/allocator"), "{text}");
}

#[test]
fn a_cpp_frame_without_a_file_or_line_reads_as_everywhere_else_in_the_block_detail() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // At the peak, the site of a backward thread's block: a stack of C++
    // frames only, which the detail lists.
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('w'));
    let at = v
        .sites
        .as_ref()
        .and_then(|s| {
            s.sites
                .iter()
                .position(|s| s.label.contains("DivBackward0"))
        })
        .expect("a DivBackward0 site");
    for _ in 0..at {
        press(&mut v, KeyCode::Down);
    }
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let lines: Vec<String> = detail_lines(&v, 110)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let frames: Vec<&String> = lines.iter().filter(|l| l.starts_with("  ")).collect();
    assert!(
        frames.iter().any(|l| l.contains("DivBackward0::apply")),
        "{lines:#?}"
    );
    for l in &frames {
        assert!(!l.starts_with("  :"), "a frame without its file: {l}");
        assert!(!l.contains(":0 "), "line 0 is no line: {l}");
    }
    assert!(
        frames.iter().any(|l| l.starts_with("  ??:? ")),
        "{lines:#?}"
    );
}

#[test]
fn a_narrow_block_detail_wraps_its_long_lines_instead_of_cutting_them() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 20);
    select_a_block_with_a_stack(&mut v);
    let lines: Vec<String> = detail_lines(&v, 50).iter().map(|l| l.to_string()).collect();
    for l in &lines {
        assert!(l.chars().count() <= 50, "{l:?} is wider than 50");
    }
    let text = lines.join(" ");
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("20 C++ frames hidden"), "{words}");
    assert!(
        words.contains("large pool") || words.contains("small pool"),
        "{words}"
    );
}

#[test]
fn at_the_last_event_the_hints_keep_the_compare_keys_and_drop_the_least_useful_moves() {
    for file in [SILMONT, "silmont_fwd_fp32_128.pickle"] {
        let Some(mut v) = viewer(file) else {
            return;
        };
        press(&mut v, KeyCode::End);
        // `c` is offered once A and B are both marked.
        press(&mut v, KeyCode::Char('m'));
        press(&mut v, KeyCode::Char('M'));
        for (w, h) in [(120, 40), (80, 24)] {
            let screen = text(draw(&v, w, h).backend().buffer());
            let hints = screen.lines().last().unwrap_or_default();
            // The back moves take the forward ones' places here: they
            // pushed `m mark A  c A/B` off a 120-column line.
            for hint in ["q quit", "← event", "m mark A", "c A/B"] {
                assert!(hints.contains(hint), "{file} {w}x{h}: {hint} in {hints}");
            }
            // What goes first: the way back to the start (rank 3).
            if w == 80 {
                assert!(!hints.contains("Home start"), "{file}: {hints}");
            }
        }
    }
}

#[test]
fn small_terminal_keeps_status_timeline_and_segments() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    let t = draw(&v, 80, 24);
    let screen = text(t.backend().buffer());
    assert!(
        screen.contains("Timeline") && screen.contains("Segments"),
        "{screen}"
    );
    insta::assert_snapshot!("viewer_end_80x24", t.backend());
}

#[test]
fn timeline_cursor_at_the_last_event_is_one_mark_beside_the_next_panes_border() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    assert_eq!(
        v.cursor(),
        97,
        "at the end: the cursor's column is the last"
    );
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let rows: Vec<&str> = screen
            .lines()
            .skip_while(|l| !l.contains(" Timeline "))
            .skip(1)
            .take_while(|l| !l.contains("└"))
            .collect();
        assert!(!rows.is_empty(), "{screen}");
        for row in &rows {
            // "│" beside the border read as a doubled bar.
            assert!(row.contains("▌│"), "{w}×{h}: {row}\n{screen}");
            assert!(!row.contains("││"), "{w}×{h}: {row}\n{screen}");
        }
        assert!(screen.contains("▌ cursor"), "the legend's mark: {screen}");
    }
}

#[test]
fn help_lists_the_viewer_keys() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::Help);
    let t = draw(&v, 100, 34);
    let screen = text(t.backend().buffer());
    for what in [
        "In the snapshot viewer",
        "next OOM",
        "empty_cache point",
        "filter by pool",
    ] {
        assert!(screen.contains(what), "{what}: {screen}");
    }
    insta::assert_snapshot!("viewer_help_100x34", t.backend());
    // Tall enough for every word: the viewer's own are defined too.
    let tall = text(draw(&v, 120, 80).backend().buffer());
    for (term, _) in vramtop::ui::VIEWER_DEFINITIONS {
        assert!(tall.contains(term), "{term}: {tall}");
    }
}

#[test]
fn the_help_dims_the_keys_that_do_nothing_here_and_says_why() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored();
    // At the last event of a trace with no OOM: the forward moves and o/O
    // do nothing, as the hints leave them out; the back moves act.
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('?'));
    let t = draw(&v, 120, 50);
    let buf = t.backend().buffer();
    for (keys, why) in [
        ("→ l", "[at the last event]"),
        ("o", "[no OOM in the trace]"),
        ("O", "[no OOM in the trace]"),
        // Nothing marked: `c` has no A and B to compare.
        ("c", "[mark A and B first]"),
        // The first block is selected: no segment before its own.
        ("[", "[the first segment of the map is selected]"),
    ] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(row.contains(why) && dim, "{keys}: {row}");
    }
    for keys in ["← h", "m", "w", "]"] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(
            !row.lines().next().unwrap_or_default().contains('[') && !dim,
            "{keys}: {row}"
        );
    }
    // The keys' column is as wide as the section's keys need ("Shift-Tab"
    // and two columns), not the comparison's "Esc Enter c" below.
    let (row, _) = help_row(buf, "← h", &theme).expect("← h");
    assert!(row.starts_with("← h        one event back"), "{row}");
    // A file without a trace: every key that moves along one says so.
    let Some(mut v) = viewer("muduard_dump_snapshot_c.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    let t = draw(&v, 120, 50);
    let buf = t.backend().buffer();
    for keys in ["← h", "PgDn", "End", "o", "m", "c", "z"] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(
            row.contains("[no trace in this file]") && dim,
            "{keys}: {row}"
        );
    }
    let (row, dim) = help_row(buf, "w", &theme).expect("w");
    assert!(
        !row.lines().next().unwrap_or_default().contains('[') && !dim,
        "the sites need no trace: {row}"
    );
}

#[test]
fn where_the_segment_map_is_empty_enter_is_not_offered_and_the_help_says_why() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored();
    // Before the first event the map is empty: Enter only said "no
    // block to show: the segment map is empty here".
    press(&mut v, KeyCode::Home);
    assert!(v.selected_block().is_none());
    let screen = text(draw(&v, 80, 24).backend().buffer());
    let hints = screen.lines().last().unwrap_or_default();
    assert!(hints.contains("→ event"), "{hints}");
    assert!(!hints.contains("Enter"), "{hints}");
    press(&mut v, KeyCode::Char('?'));
    let t = draw(&v, 120, 50);
    let (row, dim) = help_row(t.backend().buffer(), "Enter", &theme).expect("Enter");
    assert!(
        row.contains("[the segment map is empty here]") && dim,
        "{row}"
    );
    // Nor is there a segment for `]` or `[` to select.
    for keys in ["]", "["] {
        let (row, dim) = help_row(t.backend().buffer(), keys, &theme).expect(keys);
        assert!(
            row.contains("[the segment map is empty here]") && dim,
            "{keys}: {row}"
        );
    }
    // At the end the map has blocks, and Enter is offered again.
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::End);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let hints = screen.lines().last().unwrap_or_default();
    assert!(hints.contains("Enter block"), "{hints}");
}

#[test]
fn viewer_help_defines_the_short_words_and_the_pending_glyph_an_80_column_screen_shows() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // What the 80-column screen abbreviates (the GPUs row and the
    // fragmentation pane).
    let narrow = text(draw(&v, 80, 24).backend().buffer());
    for short in [
        "res ", "(pk ", " @52", "ext free", "non-rel", "int free", "frag ",
    ] {
        assert!(narrow.contains(short), "{short}: {narrow}");
    }
    press(&mut v, KeyCode::Char('?'));
    for ascii in [false, true] {
        let theme = Theme::colored().with_ascii(ascii);
        let glyph = if ascii { "~" } else { "▚" };
        // One column (below 70 columns), tall enough for every row: each
        // definition reads on as one text.
        let help = help_words(&v, &theme);
        for defined in [
            "res, alloc, pk X @N:",
            "first reached at event N",
            "external free (ext free):",
            "non-releasable (non-rel):",
            "internal free (int free):",
            "fragmentation (frag) = 1 − largest free block",
        ] {
            let defined = if ascii {
                defined.replace('−', "-")
            } else {
                defined.to_string()
            };
            assert!(help.contains(&defined), "{defined}: {help}");
        }
        let pending = format!("{glyph} pending free: a block the program freed");
        assert!(help.contains(&pending), "{pending}: {help}");
    }
}

/// The help as one line of words: drawn in one column, tall enough for
/// every row, only the popup's rows, the borders and the wrapping gone.
fn help_words(v: &ViewerState, theme: &Theme) -> String {
    let screen = text(draw_with(v, 64, 160, theme).backend().buffer());
    let help: String = screen
        .lines()
        .skip_while(|l| !l.contains(" Help "))
        .skip(1)
        .take_while(|l| l.starts_with(['│', '|']))
        .map(|l| l.trim_matches(['│', '|', ' ']))
        .collect::<Vec<_>>()
        .join(" ");
    help.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_viewer_help_defines_reserved_as_the_breakdown_bar_draws_its_parts() {
    // The bar: allocated | pending free | external free (of reserved).
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    let help = help_words(&v, &Theme::colored());
    assert!(
        help.contains(
            "reserved but unallocated (unalloc): reserved − allocated = pending free + external free."
        ),
        "{help}"
    );
    assert!(
        help.contains("= allocated + pending free + external free."),
        "{help}"
    );
    assert!(!help.contains("reserved − allocated:"), "{help}");
    assert!(
        !help.contains("= allocated + reserved but unallocated."),
        "{help}"
    );
}

#[test]
fn every_short_word_of_a_narrow_timeline_legend_is_defined_in_the_help() {
    // Both marks' words: the empty_cache scenario's file has empty_cache
    // points, fragmentation_oom's an OOM.
    let files = [
        scenario_viewer("empty_cache_live_block", "ecl.pickle", "ecl.pickle"),
        fragmentation_oom_viewer(),
    ];
    let full: Vec<&str> = vramtop::ui::VIEWER_LEGEND_NAMES
        .iter()
        .map(|n| n.full)
        .collect();
    for mut v in files {
        for ascii in [false, true] {
            let theme = Theme::colored().with_ascii(ascii);
            // 40 columns: the legend gives way to shorter words.
            let screen = text(draw_with(&v, 40, 16, &theme).backend().buffer());
            let legend = screen
                .lines()
                .skip_while(|l| !l.contains(" Timeline "))
                .skip_while(|l| !l.contains('└') && !l.contains("+--"))
                .nth(2)
                .unwrap_or_default();
            // The names on it: not the glyphs, an "…" or the marks' counts
            // ("×3", "x3" in ASCII).
            let count = |w: &str| {
                w.strip_prefix(['×', 'x'])
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            };
            let words: Vec<&str> = legend
                .split_whitespace()
                .filter(|w| w.chars().any(char::is_alphabetic) && !count(w))
                .collect();
            let short: Vec<&str> = words
                .iter()
                .copied()
                .filter(|w| !full.contains(w))
                .collect();
            assert!(
                short.contains(&"res") && short.contains(&"alloc"),
                "{}: the legend in short words: {legend:?}\n{screen}",
                v.file
            );
            press(&mut v, KeyCode::Char('?'));
            let help = help_words(&v, &theme);
            press(&mut v, KeyCode::Esc);
            for w in short {
                assert!(
                    help.contains(&format!("{w} for ")),
                    "{}: {w:?} of the legend {legend:?} is not defined: {help}",
                    v.file
                );
            }
        }
    }
}

#[test]
fn the_viewer_help_defines_every_short_word_of_the_timeline_legend() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    let help = help_words(&v, &Theme::colored());
    for name in vramtop::ui::VIEWER_LEGEND_NAMES {
        if name.short != name.full {
            let meaning = format!("{} for {}", name.short, name.full);
            assert!(help.contains(&meaning), "{meaning}: {help}");
        }
    }
    assert!(
        help.contains("released for empty_cache"),
        "the mark's short word: {help}"
    );
}

#[test]
fn loading_screen_shows_bytes_read_of_the_file_size() {
    let mut buf = Buffer::empty(Rect::new(0, 0, 60, 8));
    render_loading(
        buf.area,
        &mut buf,
        "big.pickle",
        3 << 20,
        12 << 20,
        None,
        &Keymap::default(),
        &Theme::colored(),
    );
    let screen = text(&buf);
    assert!(
        screen.contains("loading big.pickle: 3.00 MiB of 12.0 MiB"),
        "{screen}"
    );
}

#[test]
fn loading_screen_with_at_says_the_viewer_waits_for_the_trace() {
    let mut buf = Buffer::empty(Rect::new(0, 0, 80, 12));
    render_loading(
        buf.area,
        &mut buf,
        "big.pickle",
        3 << 20,
        12 << 20,
        Some(vramtop::snapshot::peak::At::Oom),
        &Keymap::default(),
        &Theme::colored(),
    );
    let screen = text(&buf);
    assert!(
        screen.contains("--at oom: the viewer opens there once the trace is read"),
        "{screen}"
    );
    assert!(screen.contains("loading big.pickle"), "{screen}");
}

#[test]
fn a_narrow_status_line_keeps_the_marks_and_filters_and_leaves_out_what_does_not_fit() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 1);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('p'));
    let full = status_text(&v);
    assert!(full.contains("peak alloc"), "{full}");
    let narrow = status_text_within(&v, 80);
    assert!(narrow.chars().count() <= 80, "{narrow}");
    assert!(narrow.starts_with("event 1/97"), "{narrow}");
    assert!(narrow.contains("A 1 B -"), "{narrow}");
    assert!(narrow.ends_with("only large pool"), "{narrow}");
    assert!(!narrow.contains("peak alloc"), "{narrow}");
    assert!(!narrow.contains('…'), "left out, not cut: {narrow}");
    // Without the event's words its stream would read as a filter.
    if !narrow.contains("segment_alloc") {
        assert!(!narrow.contains("stream"), "{narrow}");
    }
    // Wide enough, nothing is left out.
    assert_eq!(status_text_within(&v, 400), full);
}

#[test]
fn the_status_lines_peaks_are_all_in_short_words_or_all_in_long_ones() {
    // muduard's dump b: one event, both peaks before it ("here" twice);
    // silmont and Hyperion: the peaks at two moments (one here after P or
    // R, the other elsewhere). "peak alloc" beside "res" reads as two
    // kinds of figure.
    let files = [
        "muduard_dump_snapshot_b.pickle",
        SILMONT,
        "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle",
    ];
    for name in files {
        let Some(mut v) = viewer(name) else {
            return;
        };
        for key in [
            KeyCode::Home,
            KeyCode::Char('P'),
            KeyCode::Char('R'),
            KeyCode::Char('m'),
            KeyCode::Char('p'),
        ] {
            press(&mut v, key);
            for width in 20..=200 {
                let line = status_text_within(&v, width);
                let words: Vec<&str> = line.split(' ').collect();
                let short = words.iter().any(|w| ["pk", "res"].contains(w));
                let long = words.iter().any(|w| ["peak", "reserved"].contains(w));
                assert!(!(short && long), "{name} after {key:?} at {width}: {line}");
            }
        }
    }
}

#[test]
fn on_a_40_column_status_line_the_events_action_outranks_the_marks() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 1);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('M'));
    let e = v.current_event().expect("after an event");
    let action = format!(
        "{} {}",
        e.action.as_str(),
        vramtop::ui::format::bytes(e.size)
    );
    assert!(status_text(&v).contains("A 1 B 1"));
    let narrow = status_text_within(&v, 40);
    assert!(narrow.chars().count() <= 40, "{narrow}");
    assert!(narrow.contains(&action), "{narrow}");
    // Where both fit, both stay.
    let wide = status_text_within(&v, 80);
    assert!(wide.contains(&action) && wide.contains("A 1 B 1"), "{wide}");
}

#[test]
fn a_narrow_status_line_keeps_the_events_action_and_size_before_its_time_and_filters() {
    let Some(mut v) = viewer("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('p'));
    press(&mut v, KeyCode::Right);
    let e = v.current_event().expect("after an event");
    let action = format!(
        "{} {}",
        e.action.as_str(),
        vramtop::ui::format::bytes(e.size)
    );
    let full = status_text(&v);
    assert!(full.contains(&format!("{action} at 0x")), "{full}");
    assert!(full.contains("t+") && full.contains("only large pool"));
    for width in [80, 60] {
        let narrow = status_text_within(&v, width);
        assert!(narrow.chars().count() <= width, "{narrow}");
        assert!(narrow.contains(&action), "{width}: {narrow}");
        assert!(!narrow.contains("t+"), "the time goes first: {narrow}");
    }
    // The address goes before the action and size, and where it fits
    // stays with them.
    assert!(!status_text_within(&v, 80).contains(" at 0x"));
    let wide = status_text_within(&v, 120);
    assert!(wide.contains(&format!("{action} at 0x")), "{wide}");
}

#[test]
fn a_peak_the_cursor_is_at_keeps_here_whole_on_a_40_column_status_line() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    let narrow = status_text_within(&v, 40);
    assert!(narrow.chars().count() <= 40, "{narrow}");
    assert!(narrow.starts_with("event 53/97"), "{narrow}");
    assert!(narrow.ends_with("3.03 GiB here"), "{narrow}");
    press(&mut v, KeyCode::Char('R'));
    let narrow = status_text_within(&v, 40);
    assert!(narrow.chars().count() <= 40, "{narrow}");
    assert!(narrow.contains("res 3.52 GiB here"), "{narrow}");
}

#[test]
fn status_names_the_event_its_size_and_time() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    seek(&mut v, 1);
    let s = status_text(&v);
    assert!(s.starts_with("event 1/97 (#0) · segment_alloc "), "{s}");
    assert!(s.contains("t+0.000 ms"), "{s}");
    press(&mut v, KeyCode::Char('p'));
    assert!(
        status_text(&v).ends_with("only large pool"),
        "{}",
        status_text(&v)
    );
}

#[test]
fn the_fragmentation_pane_says_which_pool_its_figures_are_of() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let title = |v: &ViewerState| {
        let screen = text(draw(v, 120, 40).backend().buffer());
        screen
            .lines()
            .find_map(|l| l.find("Fragmentation").map(|i| l[i..].to_string()))
            .unwrap_or_default()
    };
    assert!(!title(&v).contains("pool"), "{}", title(&v));
    press(&mut v, KeyCode::Char('p'));
    assert!(title(&v).contains("GPU 0 · large pool"), "{}", title(&v));
}

#[test]
fn every_size_and_every_shared_snapshot_draws_without_panicking() {
    for name in [
        SILMONT,
        "JasperSolt_EoR_NN_snapshot.pickle",
        "snapviewer_memory.pickle",
        "albi2_thesis-text-to-SQL_dump_snapshot.pickle",
        "muduard_memory_snapshot.pkl",
    ] {
        let Some(mut v) = viewer(name) else {
            return;
        };
        press(&mut v, KeyCode::Enter);
        for (w, h) in [(1, 1), (39, 9), (40, 10), (59, 20), (80, 24), (200, 60)] {
            draw_with(&v, w, h, &Theme::monochrome().with_ascii(true));
        }
    }
}

#[test]
fn ascii_mode_draws_the_viewer_its_panes_and_overlays_in_ascii_only() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored().with_ascii(true);
    let check = |v: &ViewerState, what: &str| {
        for (w, h) in [(80, 24), (120, 40)] {
            let t = draw_with(v, w, h, &theme);
            let bad = common::screen::non_ascii(t.backend().buffer());
            assert!(bad.is_empty(), "{what} at {w}×{h}: {bad:?}");
        }
    };
    check(&v, "the end");
    press(&mut v, KeyCode::Home);
    check(&v, "before the first event");
    seek(&mut v, 20);
    press(&mut v, KeyCode::Enter);
    check(&v, "block detail");
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Char('w'));
    check(&v, "sites");
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    check(&v, "A/B comparison");
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Char('?'));
    check(&v, "help");
    for _ in 0..30 {
        press(&mut v, KeyCode::PageDown);
    }
    check(&v, "help at its end");
    let mut loading = Terminal::new(TestBackend::new(80, 24)).expect("test backend");
    loading
        .draw(|f| {
            let area = f.area();
            render_loading(
                area,
                f.buffer_mut(),
                "a…b.pickle",
                1 << 20,
                8 << 20,
                None,
                &Keymap::default(),
                &theme,
            );
        })
        .expect("draws");
    let bad = common::screen::non_ascii(loading.backend().buffer());
    assert!(bad.is_empty(), "loading: {bad:?}");
}

#[test]
fn viewer_timeline_axes_label_every_value_with_its_unit() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(screen.contains("0 B  │"), "the zero has its unit: {screen}");
    assert!(screen.contains("2 GiB│"), "the middle too: {screen}");
    assert!(!screen.contains("device 0"), "a GPU is a GPU: {screen}");
}

/// The timeline's x-axis labels, left to right: the words of the row
/// under its `└` row, up to the panes' border.
fn axis_labels(screen: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.contains('└'))?;
    let row = lines.get(at + 1)?;
    let axis = row.split('│').next().unwrap_or_default();
    Some(axis.split_whitespace().map(str::to_string).collect())
}

#[test]
fn the_timeline_axis_counts_events_as_the_status_line_not_with_an_index() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    // At the end: "event 97/97 (#96)"; the axis ends at 97, the count, and
    // writes no "#", which names an event by its index (#96 here).
    assert!(status_text(&v).starts_with("event 97/97 (#96)"));
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let labels = axis_labels(&screen).expect("an axis");
    assert_eq!(labels, ["0", "48", "97"], "{screen}");
}

#[test]
fn a_one_event_timeline_does_not_repeat_an_event_number_on_its_axis() {
    // muduard's b: GPU 1's trace is one `free_completed`.
    let Some(v) = viewer("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    assert_eq!(v.device().map(|d| d.len()), Some(1));
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let labels = axis_labels(&screen).unwrap_or_else(|| panic!("{w}×{h}: an axis: {screen}"));
        assert_eq!(labels, ["0", "1"], "{w}×{h}: {screen}");
    }
}

#[test]
fn short_timeline_axis_labels_do_not_overprint_each_other() {
    // A chart a few rows high puts two labels on one row: a shorter label
    // drawn over a longer one left its tail ("15 GiBB"). The sizes are the
    // shortest that draw a chart with a legend, and with none.
    let Some(v) = viewer("bolongcheng_xl_fwd_cl128_float32_expandable.pickle") else {
        return;
    };
    for (w, h) in [(40, 13), (60, 19), (40, 10), (40, 11)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        assert!(screen.contains("15 GiB"), "{w}×{h}: {screen}");
        assert!(screen.contains("0 B"), "{w}×{h}: {screen}");
        assert!(!screen.contains("GiBB"), "{w}×{h}: {screen}");
    }
}

#[test]
fn at_40x10_the_timeline_draws_a_chart_and_its_legend_gives_way() {
    let Some(v) = viewer(SILMONT) else {
        return;
    };
    let timeline = |w: u16, h: u16| -> Vec<String> {
        text(draw(&v, w, h).backend().buffer())
            .lines()
            .skip_while(|l| !l.contains(" Timeline "))
            .skip(1)
            .take_while(|l| !l.contains(" Segments "))
            .map(str::to_string)
            .collect()
    };
    // Four rows inside the pane: a chart of two rows of plot, its axis and
    // labels; the legend (one row, three blank below it, before) goes.
    let rows = timeline(40, 10);
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert!(
        rows[2].contains('└') && rows[3].trim_end().ends_with(" 97"),
        "{rows:#?}"
    );
    // A row more: the legend is back under the same chart.
    let rows = timeline(40, 11);
    assert!(rows[2].contains('└'), "{rows:#?}");
    assert!(
        rows[4].contains("reserved") && rows[4].contains("cursor"),
        "{rows:#?}"
    );
}

#[test]
fn in_a_two_or_three_row_chart_the_oom_mark_is_drawn_over_the_lines_full_height() {
    let mut v = fragmentation_oom_viewer();
    // The cursor away from the OOM (the last event), whose column the
    // cursor's mark would take.
    press(&mut v, KeyCode::Home);
    for ascii in [false, true] {
        let theme = Theme::colored().with_ascii(ascii);
        let oom = if ascii { '!' } else { '┃' };
        for (w, h) in [(80, 16), (80, 18), (80, 24)] {
            let screen = text(draw_with(&v, w, h, &theme).backend().buffer());
            let lines: Vec<&str> = screen.lines().collect();
            let title = lines
                .iter()
                .position(|l| l.contains(" Timeline "))
                .expect("the timeline pane");
            // The timeline's own columns: up to the fragmentation pane's
            // corner beside it.
            let width = lines[title]
                .chars()
                .position(|c| c == '┌' || c == '+')
                .unwrap_or(usize::from(w));
            let plot: Vec<Vec<char>> = lines[title + 1..]
                .iter()
                .take_while(|l| !l.contains('└') && !l.contains("+--"))
                .map(|l| l.chars().take(width).collect())
                .collect();
            if h < 24 {
                assert!(
                    (2..=3).contains(&plot.len()),
                    "{w}×{h}: a chart of {} rows: {screen}",
                    plot.len()
                );
            }
            let columns: Vec<usize> = (0..width)
                .filter(|&x| plot.iter().any(|row| row.get(x) == Some(&oom)))
                .collect();
            assert!(!columns.is_empty(), "{w}×{h}: no OOM mark: {screen}");
            for x in columns {
                assert!(
                    plot.iter().all(|row| row.get(x) == Some(&oom)),
                    "{w}×{h}, ascii {ascii}: the OOM column {x} is broken by a line: {screen}"
                );
            }
        }
    }
}

#[test]
fn the_timeline_title_shows_the_cursor_whole_or_not_at_all() {
    let Some(mut v) = viewer("silmont_fwd_fp32_128.pickle") else {
        return;
    };
    press(&mut v, KeyCode::End);
    let (cursor, n) = (v.cursor(), v.device().map_or(0, |d| d.len()));
    for (w, h) in [(80, 24), (100, 30), (120, 40), (60, 20)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let title = screen
            .lines()
            .find(|l| l.contains("Timeline"))
            .expect("the timeline pane");
        // Whatever variant fits: the cursor's number is never cut short.
        let digits: String = title
            .split("cursor ")
            .nth(1)
            .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect())
            .unwrap_or_else(|| format!("{cursor}"));
        assert_eq!(digits, cursor.to_string(), "{w}x{h}: {title}");
        assert!(title.contains(&format!("{n}")), "{w}x{h}: {title}");
    }
}

/// The viewer on the file `vramtop scenario NAME --save-snapshot BASE`
/// saves as `saved`: BASE itself, or for a scenario run under several
/// settings one file each ("foom.pickle" gives "foom-default.pickle" …).
fn scenario_viewer(name: &str, base: &str, saved: &str) -> ViewerState {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join(base);
    let base = base.display().to_string();
    let (code, _, err) = common::run_vramtop(&["scenario", name, "--save-snapshot", &base], None);
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join(saved);
    let snapshot = vramtop::snapshot::read_snapshot_file(&file).expect("the scenario's file");
    ViewerState::new(saved.to_string(), snapshot)
}

/// The viewer on the file the fragmentation_oom scenario saves under its
/// default settings: 151 events, the last an OOM, 30 segments at most.
fn fragmentation_oom_viewer() -> ViewerState {
    scenario_viewer("fragmentation_oom", "foom.pickle", "foom-default.pickle")
}

/// Words of `text` with every run of spaces and line breaks made one
/// space: a wrapped popup row and a wrapped summary line compared.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of the OOM detail's `key` row, its wrapped rows joined: the
/// rows from `key`'s to the next keyed one, past the key column.
fn detail_row(lines: &[String], key: &str) -> Option<String> {
    const KEY_CELLS: usize = 14;
    let start = lines
        .iter()
        .position(|l| l.get(..KEY_CELLS).is_some_and(|k| k.trim_end() == key))?;
    let mut value = String::new();
    for (i, l) in lines[start..].iter().enumerate() {
        let (k, v) = l.split_at(l.len().min(KEY_CELLS));
        if (i > 0 && !k.trim().is_empty()) || l.trim().is_empty() {
            break;
        }
        value.push(' ');
        value.push_str(v);
    }
    Some(words(&value))
}

#[test]
fn the_oom_detail_gives_the_cause_the_summary_gives_in_its_words_and_figures() {
    // The fragmentation_oom scenario's file, read by `open --summary` and
    // by the viewer: one OOM, the last event, the cursor's at the end.
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("foom.pickle").display().to_string();
    let (code, _, err) = common::run_vramtop(
        &["scenario", "fragmentation_oom", "--save-snapshot", &base],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join("foom-default.pickle");
    let file_arg = file.display().to_string();
    let (code, summary, err) = common::run_vramtop(&["open", &file_arg, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = common::run_vramtop(&["open", &file_arg, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let kind = json
        .pointer("/sites/0/at_last_oom/cause/kind")
        .and_then(|k| k.as_str())
        .unwrap_or_else(|| panic!("no cause.kind in {json}"));
    assert_eq!(kind, "split_between_cache_and_device");

    let snapshot = vramtop::snapshot::read_snapshot_file(&file).expect("the scenario's file");
    let mut v = ViewerState::new("foom-default.pickle".to_string(), snapshot);
    assert!(v.at_oom(), "the file ends on its OOM");
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open && v.detail_oom);
    let lines: Vec<String> = detail_lines(&v, 76).iter().map(|l| l.to_string()).collect();
    let detail = lines.join("\n");
    let held = detail_row(&lines, "held").unwrap_or_else(|| panic!("no held row: {detail}"));
    let cause = detail_row(&lines, "cause").unwrap_or_else(|| panic!("no cause row: {detail}"));
    assert_eq!(
        held,
        "1.46 GiB reserved but unallocated of 5.86 GiB reserved, in 30 blocks, largest 50 MiB"
    );
    assert!(cause.contains("neither alone: fragmentation"), "{cause}");
    assert!(cause.contains("expandable_segments:True"), "{cause}");
    // The summary says the same, in one sentence.
    let said = format!("{held}; {cause}");
    assert!(
        words(&summary).contains(&said),
        "the popup says {said:?}; the summary:\n{summary}"
    );
    insta::assert_snapshot!(
        "viewer_fragmentation_oom_detail_80x24",
        draw(&v, 80, 24).backend()
    );
    insta::assert_snapshot!(
        "viewer_fragmentation_oom_detail_120x40",
        draw(&v, 120, 40).backend()
    );
}

#[test]
fn a_free_blocks_detail_names_what_last_held_it_or_that_nothing_did_since_its_segment_was_made() {
    let mut v = fragmentation_oom_viewer();
    // At the OOM every free block is a piece of a block freed in the
    // trace: the first one's detail names it.
    let mut guard = 0;
    while v
        .selected_block()
        .is_some_and(|(_, b)| b.state != vramtop::alloc::BlockState::Inactive)
    {
        press(&mut v, KeyCode::Down);
        guard += 1;
        assert!(guard < 200, "no free block at the OOM");
    }
    let held = detail_lines(&v, 100)
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert!(
        held.contains("last held by <vramtop scenario fragmentation_oom>:"),
        "{held}"
    );
    assert!(held.contains("allocated at event "), "{held}");
    assert!(held.contains(", freed at event "), "{held}");
    assert!(
        held.contains("stack of its last allocation, innermost first"),
        "{held}"
    );
    assert!(!held.contains("no allocation recorded"), "{held}");
    // After the first event, a segment_alloc, its segment is one free
    // block nothing has held yet.
    let mut fresh = fragmentation_oom_viewer();
    seek(&mut fresh, 1);
    let (_, b) = fresh.selected_block().expect("the new segment's block");
    assert_eq!(b.state, vramtop::alloc::BlockState::Inactive);
    let never = detail_lines(&fresh, 100)
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert!(
        never.contains("nothing was allocated in it since its segment was made at event 1)"),
        "{never}"
    );
    assert!(!never.contains("last held by"), "{never}");
    // Drawn one event before the OOM (which changes no block; `Enter` on
    // the OOM opens the OOM's detail).
    press(&mut v, KeyCode::Left);
    assert_eq!(
        v.selected_block().map(|(_, b)| b.state),
        Some(vramtop::alloc::BlockState::Inactive)
    );
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open && !v.detail_oom);
    insta::assert_snapshot!(
        "viewer_free_block_last_held_80x24",
        draw(&v, 80, 24).backend()
    );
}

#[test]
fn at_80_columns_the_gpus_row_keeps_gpu_n_beside_its_oom_badge() {
    // fragmentation_oom's file: both peaks and an OOM make the row 81
    // columns with "GPU 0" and the peaks' cursors: the cursors go (`P`
    // and `R` jump there), the label stays as a row without a badge has it.
    let v = fragmentation_oom_viewer();
    let screen = text(draw(&v, 80, 24).backend().buffer());
    let row = screen
        .lines()
        .find(|l| l.contains("res ") && l.contains("alloc "))
        .unwrap_or_default();
    assert!(row.contains("GPU 0  res "), "{row:?}");
    assert!(row.contains("1 OOM"), "{row:?}");
    assert!(!row.contains("@59") && !row.contains("@60"), "{row:?}");
    let wide = text(draw(&v, 120, 40).backend().buffer());
    let row = wide
        .lines()
        .find(|l| l.contains("reserved ") && l.contains("1 OOM"))
        .unwrap_or_default();
    assert!(row.contains("GPU 0  ") && row.contains("@59"), "{wide}");
}

#[test]
fn two_column_help_scrolls_each_column_to_its_own_end() {
    // The viewer's keys run longer than its definitions: scrolled to the
    // end, the keys moved and the definitions, which fit, did not
    // (scrolled with the keys they would leave blank rows).
    let Some(mut v) = viewer("silmont_mem_snapshot.pickle") else {
        return;
    };
    v.app.ui.overlay = Overlay::Help;
    // 120×62: the definitions fit, the keys need a few rows more.
    let (w, h) = (120, 62);
    let top = text(draw(&v, w, h).backend().buffer());
    assert!(top.contains("↓ j PgDn more"), "the keys scroll: {top}");
    assert!(top.contains("Words in a snapshot"), "two columns: {top}");
    v.app.ui.help_scroll = 200;
    let end = text(draw(&v, w, h).backend().buffer());
    assert!(!end.contains("one event back"), "the keys moved: {end}");
    for kept in ["Words in a snapshot", "allocated: live tensors"] {
        assert!(end.contains(kept), "{kept} stays in view: {end}");
    }
}

#[test]
fn while_the_comparison_is_open_the_status_line_hints_its_keys_not_the_viewers() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('M'));
    let hints = |v: &ViewerState| {
        let screen = text(draw(v, 120, 40).backend().buffer());
        screen
            .lines()
            .last()
            .unwrap_or_default()
            .trim_end()
            .to_string()
    };
    // At the last event the step key offered is the one back.
    assert!(hints(&v).contains("← event"), "{}", hints(&v));
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_some());
    let open = hints(&v);
    // It fits at 120×40: no scroll key goes anywhere.
    assert_eq!(open, "q quit  Esc close");
    // → does nothing there, as the hints no longer promise.
    let cursor = v.cursor();
    press(&mut v, KeyCode::Right);
    assert_eq!(v.cursor(), cursor);
    press(&mut v, KeyCode::Esc);
    assert!(v.compare.is_none());
    assert!(hints(&v).contains("← event"), "{}", hints(&v));
    // The help lists the comparison's keys in a section of their own.
    press(&mut v, KeyCode::Char('?'));
    let help = text(draw(&v, 120, 80).backend().buffer());
    assert!(help.contains("In the A/B comparison (c)"), "{help}");
    assert!(help.contains("close the comparison"), "{help}");
}

#[test]
fn at_the_comparisons_last_row_the_hints_offer_the_moves_back_not_down() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // B at the biggest allocation, A there; B at the peak: 27 rows.
    for key in ['B', 'm', 'P', 'M', 'c'] {
        press(&mut v, KeyCode::Char(key));
    }
    assert!(v.compare.is_some());
    let screen = |v: &ViewerState| text(draw(v, 80, 24).backend().buffer());
    let hints = |screen: &str| {
        screen
            .lines()
            .last()
            .unwrap_or_default()
            .trim_end()
            .to_string()
    };
    let top = screen(&v);
    assert!(top.contains("↓ j scrolls"), "{top}");
    assert_eq!(hints(&top), "q quit  Esc close  ↓ down  PgDn page");
    press(&mut v, KeyCode::PageDown);
    let end = screen(&v);
    assert!(end.contains("↑ k scrolls back"), "{end}");
    assert_eq!(hints(&end), "q quit  Esc close  ↑ up  PgUp page");
    // ↓ indeed goes nowhere there; ↑ moves.
    let at = v.compare_scroll;
    press(&mut v, KeyCode::Down);
    assert_eq!(v.compare_scroll, at);
    press(&mut v, KeyCode::Up);
    let between = screen(&v);
    assert_eq!(
        hints(&between),
        "q quit  Esc close  ↑ up  ↓ down  PgDn page"
    );
    // Where it all fits, no scroll key is offered.
    let tall = text(draw(&v, 120, 60).backend().buffer());
    assert!(!tall.contains("scrolls"), "{tall}");
    assert_eq!(hints(&tall), "q quit  Esc close");
}

#[test]
fn c_without_both_marks_says_what_is_missing_whole_at_80_columns() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let notice = |v: &ViewerState| {
        let screen = text(draw(v, 80, 24).backend().buffer());
        let rows: Vec<&str> = screen.lines().collect();
        rows[rows.len() - 2].trim_end().to_string()
    };
    press(&mut v, KeyCode::Char('c'));
    assert_eq!(
        notice(&v),
        "c compares A and B: m marks A, M marks B (neither is marked)"
    );
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('c'));
    assert_eq!(notice(&v), "c compares A and B: M marks B (A is event 97)");
    assert!(v.compare.is_none());
}

#[test]
fn page_keys_scroll_the_comparison_and_the_block_detail_by_the_rows_they_show_less_one() {
    let Some(mut v) = viewer("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    // A from the start, B at the end: a comparison far taller than 80×24.
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    let top = text(draw(&v, 80, 24).backend().buffer());
    let shown = v.compare_page_rows.get();
    assert!(shown > 11, "{shown} rows: {top}");
    assert!(top.contains(&format!("rows 1–{shown} of ")), "{top}");
    press(&mut v, KeyCode::PageDown);
    assert_eq!(v.compare_scroll, shown - 1, "a page less one, not 10");
    press(&mut v, KeyCode::PageUp);
    assert_eq!(v.compare_scroll, 0);
    // The block detail of the first block whose detail is twice as tall
    // as 80×14 shows.
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Enter);
    for _ in 0..200 {
        draw(&v, 80, 14);
        if v.detail_scroll_limit.get() >= 2 * v.detail_page_rows.get() {
            break;
        }
        press(&mut v, KeyCode::Down);
    }
    let shown = v.detail_page_rows.get();
    assert!(v.detail_scroll_limit.get() >= 2 * shown, "a tall detail");
    press(&mut v, KeyCode::PageDown);
    assert_eq!(v.detail_scroll, shown - 1, "a page less one, not 10");
}

#[test]
fn page_keys_scroll_the_help_by_the_rows_it_shows_less_one() {
    let Some(mut v) = viewer("silmont_mem_snapshot.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    // 80×24: the popup shows 22 rows of help (the terminal less its
    // border); a page moves 21, the last row read stays in view.
    let top = text(draw(&v, 80, 24).backend().buffer());
    assert!(top.contains("rows 1–22 of "), "{top}");
    press(&mut v, KeyCode::PageDown);
    assert_eq!(v.app.ui.help_scroll, 21);
    let next = text(draw(&v, 80, 24).backend().buffer());
    assert!(next.contains("rows 22–43 of "), "{next}");
    // A taller terminal, a longer page.
    let taller = text(draw(&v, 80, 30).backend().buffer());
    assert!(taller.contains("rows 22–49 of "), "{taller}");
    press(&mut v, KeyCode::PageUp);
    assert_eq!(v.app.ui.help_scroll, 0);
    press(&mut v, KeyCode::PageDown);
    assert_eq!(v.app.ui.help_scroll, 27);
}

#[test]
fn at_80_columns_the_breakdown_legend_names_every_part_its_bar_draws() {
    // A file whose state has pending-free blocks: three parts and the
    // reserved total do not fit one 80-column row with their shares.
    let Some(v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        for part in ["▓ external free", "▚ pending free", "█ allocated"] {
            assert!(screen.contains(part), "{w}x{h}: {part}\n{screen}");
        }
    }
    // At 60 columns short, as the fragmentation pane shortens them.
    let screen = text(draw(&v, 60, 24).backend().buffer());
    for part in ["▓ ext free ", "▚ pending ", "█ allocated "] {
        assert!(screen.contains(part), "60x24: {part}\n{screen}");
    }
}

#[test]
fn the_breakdowns_external_free_is_the_fragmentation_panes_figure_not_reserved_but_unallocated() {
    // With pending-free blocks, reserved − allocated (the dashboard's
    // "reserved but unallocated") is more than the free blocks: the
    // breakdown's third part is the free blocks alone, the Fragmentation
    // pane's "ext free", so it keeps that name and that figure.
    let Some(v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let figure_after = |label: &str| {
        let at = screen
            .find(label)
            .unwrap_or_else(|| panic!("{label}\n{screen}"));
        screen[at + label.len()..]
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(screen.contains("▚ pending free"), "{screen}");
    assert_eq!(
        figure_after("▓ external free "),
        figure_after("ext free "),
        "{screen}"
    );
    assert!(!screen.contains("reserved but unallocated"), "{screen}");
}

#[test]
fn every_gpu_row_uses_the_same_wording_as_the_others() {
    // muduard's b has ten GiB on GPU 1; a 2 MiB segment copied onto GPU 0
    // gives a second row with short figures. At 80 columns only the short
    // words fit GPU 1's row, so GPU 0's row says "res" and "alloc" too, not
    // "reserved" and "allocated".
    let Some(path) = common::shared_snapshot("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    let mut snapshot = vramtop::snapshot::read_snapshot_file(&path).expect("shared snapshot loads");
    let mut small = snapshot
        .segments
        .iter()
        .find(|s| s.total_size == 2 << 20)
        .expect("a 2 MiB segment")
        .clone();
    small.device = 0;
    snapshot.segments.push(small);
    let v = ViewerState::new("two GPUs".to_string(), snapshot);
    let screen = text(draw(&v, 80, 24).backend().buffer());
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("res ") || l.contains("reserved "))
        .take(2)
        .collect();
    assert_eq!(rows.len(), 2, "{screen}");
    for row in &rows {
        assert!(row.contains(" res ") && row.contains(" alloc "), "{screen}");
        assert!(!row.contains("reserved"), "{screen}");
    }
}

#[test]
fn at_80_columns_p_r_and_b_leave_the_moment_named_on_the_status_line() {
    let Some(mut v) = viewer("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("peak alloc 8.31 GiB here"), "{screen}");
    press(&mut v, KeyCode::Char('R'));
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("peak reserved 8.35 GiB here"), "{screen}");
    press(&mut v, KeyCode::Char('B'));
    let screen = text(draw(&v, 80, 24).backend().buffer());
    // Hyperion's trace starts mid-run: 48.8 MiB blocks predate it, so
    // its 24.41 MiB allocation is the biggest of the trace, not of the file.
    assert!(
        screen.contains("the biggest allocation in the trace"),
        "{screen}"
    );
}

#[test]
fn both_filters_read_as_one_status_part_and_pane_titles_drop_them_before_cutting_a_word() {
    let Some(mut v) = viewer("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('s'));
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(
        v.pool_filter,
        Some(vramtop::app::viewer::PoolFilter::Size(
            vramtop::alloc::PoolKind::Large
        ))
    );
    for (w, h) in [(80, 24), (120, 40)] {
        let t = draw(&v, w, h);
        let screen = text(t.backend().buffer());
        assert!(
            screen.contains("only stream 0 · large pool"),
            "{w}x{h}:\n{screen}"
        );
        // A title says the filters whole or not at all: "large p…" is
        // neither, and the status row says them.
        for cut in ["large p…", "stream 0 · l…", "stream …", "large …"] {
            assert!(!screen.contains(cut), "{w}x{h} {cut}:\n{screen}");
        }
        let title = screen
            .lines()
            .find(|l| l.contains("Fragmentation"))
            .expect("a fragmentation title");
        assert!(title.contains("GPU 0"), "{w}x{h}: {title}");
    }
    // At the allocated peak the line is fuller: at 80 columns both
    // filters stay, the pool without its word "pool".
    press(&mut v, KeyCode::Char('P'));
    let narrow = status_text_within(&v, 80);
    assert!(narrow.contains("only stream 0 · large"), "{narrow}");
    assert!(narrow.contains("here"), "{narrow}");
}

#[test]
fn the_block_details_hints_offer_only_the_block_key_that_moves() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let hints = |v: &ViewerState| {
        let screen = text(draw(v, 120, 40).backend().buffer());
        screen.lines().last().unwrap_or_default().to_string()
    };
    let first = hints(&v);
    assert!(first.contains("↓ next block"), "{first}");
    assert!(!first.contains("prev block"), "{first}");
    let n: usize = v.segments.iter().map(|s| s.blocks.len()).sum();
    for _ in 1..n {
        press(&mut v, KeyCode::Down);
    }
    let last = hints(&v);
    assert!(last.contains("↑ prev block"), "{last}");
    assert!(!last.contains("next block"), "{last}");
    // Pressed at the end anyway, the key says why it does not move.
    press(&mut v, KeyCode::Down);
    let said = text(draw(&v, 80, 24).backend().buffer());
    assert!(said.contains("at the last block of the map"), "{said}");
}

/// The rows of the help's `heading` section as drawn (the heading in
/// view): each row's text inside the help's border, the next row's joined
/// to it (a reason wraps there at 80 columns), and whether its keys are
/// dimmed.
fn help_section(buf: &Buffer, heading: &str, theme: &Theme) -> Vec<(String, bool)> {
    let area = buf.area;
    // The help's left border: the panes under it have borders too.
    let Some(left) = (area.y..area.bottom()).find_map(|y| {
        let cells: Vec<&str> = (area.x..area.right())
            .map(|x| buf[(x, y)].symbol())
            .collect();
        let row = cells.concat();
        let at = row.find("┌ Help")?;
        let border = row[..at].chars().count();
        u16::try_from(border + 1).ok().map(|x| area.x + x)
    }) else {
        return Vec::new();
    };
    let inside = |y: u16| -> Option<(u16, String)> {
        if buf[(left - 1, y)].symbol() != "│" {
            return None;
        }
        let row: String = (left..area.right()).map(|x| buf[(x, y)].symbol()).collect();
        Some((left, row.split('│').next().unwrap_or_default().to_string()))
    };
    let Some(top) = (area.y..area.bottom())
        .find(|&y| inside(y).is_some_and(|(_, row)| row.trim_start().starts_with(heading)))
    else {
        return Vec::new();
    };
    // Where the help has room, the words' column is beside the keys':
    // a row blank in the keys' half (40 cells) ends the section.
    let blank = |row: &str| row.chars().take(40).all(|c| c == ' ');
    let mut rows = Vec::new();
    for y in top + 1..area.bottom() {
        let Some((x, row)) = inside(y) else { break };
        if blank(&row) {
            break;
        }
        // A reason wrapped under its row starts past the keys' column.
        if row.starts_with(' ') {
            continue;
        }
        let below = inside(y + 1)
            .map(|(_, r)| r)
            .filter(|r| r.starts_with(' ') && !blank(r))
            .unwrap_or_default();
        let dim = buf[(x, y)].style().fg == theme.dim.fg;
        rows.push((format!("{} {}", row.trim_end(), below.trim()), dim));
    }
    rows
}

/// Opens the help over what is open and scrolls it, a row at a time,
/// until `heading`'s section is in view whole at `w`×`h`.
fn help_at_section(
    v: &mut ViewerState,
    heading: &str,
    rows: usize,
    w: u16,
    h: u16,
) -> Terminal<TestBackend> {
    press(v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::Help);
    // From its top: the help keeps where it was scrolled.
    while v.app.ui.help_scroll > 0 {
        press(v, KeyCode::Up);
    }
    for _ in 0..200 {
        let t = draw(v, w, h);
        if help_section(t.backend().buffer(), heading, &Theme::colored()).len() == rows {
            return t;
        }
        press(v, KeyCode::Down);
    }
    panic!(
        "{heading} never in view whole at {w}×{h}:\n{}",
        text(draw(v, w, h).backend().buffer())
    );
}

#[test]
fn the_help_over_the_ab_comparison_dims_its_scroll_keys_that_cannot_scroll_and_says_why() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_some());
    const HEADING: &str = "In the A/B comparison";
    // At 80×24 the comparison is taller than the screen: at its top the
    // keys that go up do nothing, as its hints leave them out.
    let _ = draw(&v, 80, 24);
    assert!(!v.compare_scrolled().up && v.compare_scrolled().down);
    let t = help_at_section(&mut v, HEADING, 8, 80, 24);
    let rows = help_section(t.backend().buffer(), HEADING, &theme);
    let row = |keys: &str| {
        rows.iter()
            .find(|(r, _)| r.starts_with(&format!("{keys}  ")))
            .cloned()
            .unwrap_or_else(|| panic!("{keys}: {rows:?}"))
    };
    for keys in ["↑ k", "PgUp", "Home"] {
        let (text, dim) = row(keys);
        assert!(
            dim && text.contains("[at the top of the comparison]"),
            "{text}"
        );
    }
    for keys in ["q Ctrl-C", "Esc Enter c", "↓ j", "PgDn", "End"] {
        let (text, dim) = row(keys);
        assert!(!dim && !text.contains('['), "{text}");
    }
    insta::assert_snapshot!("viewer_help_over_compare_at_its_top_80x24", t.backend());
    // At its end the keys that go down do nothing, and the others act.
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::End);
    let _ = draw(&v, 80, 24);
    assert!(v.compare_scrolled().up && !v.compare_scrolled().down);
    let t = help_at_section(&mut v, HEADING, 8, 80, 24);
    let rows = help_section(t.backend().buffer(), HEADING, &theme);
    for (keys, dimmed) in [("↓ j", true), ("PgDn", true), ("End", true), ("↑ k", false)] {
        let (text, dim) = rows
            .iter()
            .find(|(r, _)| r.starts_with(&format!("{keys}  ")))
            .cloned()
            .unwrap_or_else(|| panic!("{keys}: {rows:?}"));
        assert_eq!(dim, dimmed, "{text}");
        assert_eq!(
            text.contains("[at the end of the comparison]"),
            dimmed,
            "{text}"
        );
    }
    // Tall enough for all of it, every scroll key says so.
    press(&mut v, KeyCode::Esc);
    let _ = draw(&v, 120, 80);
    if !v.compare_scrolled().up && !v.compare_scrolled().down {
        let t = help_at_section(&mut v, HEADING, 8, 120, 80);
        let rows = help_section(t.backend().buffer(), HEADING, &theme);
        let said = rows
            .iter()
            .filter(|(r, dim)| *dim && r.contains("[the whole comparison is in view]"))
            .count();
        assert_eq!(said, 6, "{rows:?}");
        press(&mut v, KeyCode::Esc);
    }
    // The block detail's rows, its keys not the open view's, stay as
    // they were.
    let t = help_at_section(&mut v, "In the block detail", 8, 120, 80);
    let rows = help_section(t.backend().buffer(), "In the block detail", &theme);
    assert!(rows.iter().all(|(_, dim)| !dim), "{rows:?}");
}

#[test]
fn the_help_over_the_block_detail_dims_its_keys_that_do_nothing_there_and_says_why() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored();
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    const HEADING: &str = "In the block detail";
    // The map's first block, its stack at the top.
    let _ = draw(&v, 80, 24);
    let scrolled = v.detail_scrolled();
    let t = help_at_section(&mut v, HEADING, 8, 80, 24);
    let rows = help_section(t.backend().buffer(), HEADING, &theme);
    let row = |rows: &[(String, bool)], keys: &str| {
        rows.iter()
            .find(|(r, _)| r.starts_with(&format!("{keys}  ")))
            .cloned()
            .unwrap_or_else(|| panic!("{keys}: {rows:?}"))
    };
    let (text, dim) = row(&rows, "↑ k");
    assert!(
        dim && text.contains("[at the first block of the map]"),
        "{text}"
    );
    let (text, dim) = row(&rows, "↓ j");
    assert!(!dim && !text.contains('['), "{text}");
    let up_why = if scrolled.down {
        "[at the top of the stack]"
    } else {
        "[the whole stack is in view]"
    };
    for keys in ["PgUp", "Home"] {
        let (text, dim) = row(&rows, keys);
        assert!(dim && text.contains(up_why), "{keys}: {text}");
    }
    for keys in ["PgDn", "End"] {
        let (text, dim) = row(&rows, keys);
        assert_eq!(dim, !scrolled.down, "{keys}: {text}");
    }
    insta::assert_snapshot!("viewer_help_over_block_detail_80x24", t.backend());
    // At the map's last block `↓` is the one that does nothing.
    press(&mut v, KeyCode::Esc);
    let n: usize = v.segments.iter().map(|s| s.blocks.len()).sum();
    for _ in 1..n {
        press(&mut v, KeyCode::Down);
    }
    assert!(
        v.detail_open && !v.detail_blocks().down,
        "{:?}",
        v.detail_blocks()
    );
    let t = help_at_section(&mut v, HEADING, 8, 120, 40);
    let rows = help_section(t.backend().buffer(), HEADING, &theme);
    let (text, dim) = row(&rows, "↓ j");
    assert!(
        dim && text.contains("[at the last block of the map]"),
        "{text}"
    );
    let (text, dim) = row(&rows, "↑ k");
    assert!(!dim && !text.contains('['), "{text}");
}

/// A run within a narrow band far above 0 B: allocated 500…534 MiB,
/// reserved 582 MiB throughout.
const SILMONT_FWD: &str = "silmont_fwd_fp32_128.pickle";

/// The timeline's plot rows: between its title and its x axis, the y
/// labels' column included.
fn timeline_plot_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.contains(" Timeline "))
        .skip(1)
        .take_while(|l| !l.contains('└'))
        .map(|l| l.to_string())
        .collect()
}

/// How many of the timeline's rows draw the allocated line (cells in
/// the allocated colour between the timeline's title and its x axis).
fn allocated_rows(buf: &Buffer, theme: &Theme) -> usize {
    let screen = text(buf);
    let lines: Vec<&str> = screen.lines().collect();
    let Some(title) = lines.iter().position(|l| l.contains(" Timeline ")) else {
        return 0;
    };
    let axis = (title..lines.len())
        .find(|&y| lines[y].contains('└'))
        .unwrap_or(title);
    let colour = theme.allocated.fg;
    (title + 1..axis)
        .filter(|&y| {
            let y = u16::try_from(y).expect("a screen row");
            (buf.area.left()..buf.area.right()).any(|x| {
                let cell = &buf[(x, y)];
                cell.fg == colour.unwrap_or_default() && cell.symbol().chars().any(is_braille)
            })
        })
        .count()
}

fn is_braille(c: char) -> bool {
    ('\u{2801}'..='\u{28ff}').contains(&c)
}

#[test]
fn z_spreads_a_narrow_band_over_more_rows_labels_its_range_and_z_goes_back() {
    let Some(mut v) = viewer(SILMONT_FWD) else {
        return;
    };
    let theme = Theme::colored();
    for (w, h) in [(80, 24), (120, 40)] {
        let before = draw(&v, w, h);
        let before_text = text(before.backend().buffer());
        let plain_rows = allocated_rows(before.backend().buffer(), &theme);
        let labels = |screen: &str| -> Vec<String> {
            timeline_plot_rows(screen)
                .iter()
                .filter_map(|row| row.split('│').next())
                .map(|label| label.trim().to_string())
                .filter(|label| !label.is_empty())
                .collect()
        };
        assert_eq!(
            labels(&before_text).last().map(String::as_str),
            Some("0 B"),
            "{w}×{h}: from 0 B before the zoom\n{before_text}"
        );

        press(&mut v, KeyCode::Char('z'));
        let zoomed = draw(&v, w, h);
        let zoomed_text = text(zoomed.backend().buffer());
        let zoomed_rows = allocated_rows(zoomed.backend().buffer(), &theme);
        // 500…534 MiB of a 0…600 MiB axis took a row or two; at 120×40
        // zoomed it takes twice as many, at 80×24 (7 rows of chart) more.
        let more = if h >= 40 {
            2 * plain_rows
        } else {
            plain_rows + 1
        };
        assert!(
            zoomed_rows >= more,
            "{w}×{h}: the band drew on {zoomed_rows} rows zoomed, {plain_rows} before\n\
             {before_text}\n{zoomed_text}"
        );
        assert_eq!(
            labels(&zoomed_text),
            ["590 MiB", "540 MiB", "490 MiB"],
            "{w}×{h}: the range shown, 0 B off the chart\n{zoomed_text}"
        );
        assert!(
            zoomed_text.contains(" · zoomed"),
            "{w}×{h}: the title says so\n{zoomed_text}"
        );
        if w >= 120 {
            assert!(
                zoomed_text.contains("zoomed: from 490 MiB"),
                "{zoomed_text}"
            );
        }

        press(&mut v, KeyCode::Char('z'));
        assert_eq!(
            text(draw(&v, w, h).backend().buffer()),
            before_text,
            "{w}×{h}: z again draws the 0-based timeline as before"
        );
    }
    press(&mut v, KeyCode::Char('z'));
    insta::assert_snapshot!("viewer_zoomed_80x24", draw(&v, 80, 24).backend());
}

/// A trace that begins mid-run over 600 MiB held throughout, with an OOM
/// and an empty_cache point above it: a band with marks.
fn banded_story() -> ViewerState {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    use vramtop::snapshot::capture::snapshot_of;
    const MIB: u64 = 1 << 20;
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    let _held = m.malloc(600 * MIB, 0).expect("fits");
    m.record_history(Some(100_000));
    let mut t = 0;
    let mut tick = |m: &mut CachingAllocator<InMemoryDevice>| {
        t += 1000;
        m.set_time_us(t);
    };
    for _ in 0..3 {
        tick(&mut m);
        let a = m.malloc(100 * MIB, 0).expect("fits");
        tick(&mut m);
        m.free(a).expect("live");
    }
    tick(&mut m);
    assert!(m.malloc(800 * MIB, 0).is_err(), "OOM");
    tick(&mut m);
    let b = m.malloc(60 * MIB, 0).expect("fits");
    tick(&mut m);
    let c = m.malloc(40 * MIB, 0).expect("fits");
    tick(&mut m);
    m.free(b).expect("live");
    // Not followed by a segment_alloc: an empty_cache point, not a
    // release-and-retry.
    tick(&mut m);
    m.empty_cache();
    tick(&mut m);
    m.free(c).expect("live");
    ViewerState::new("banded.pickle".to_string(), snapshot_of(&m, 0))
}

#[test]
fn zoomed_the_oom_empty_cache_and_cursor_marks_span_the_whole_chart() {
    let mut v = banded_story();
    let d = v.device().expect("a GPU");
    assert!(d.count(vramtop::snapshot::scrub::MarkKind::Oom) > 0);
    assert!(d.count(vramtop::snapshot::scrub::MarkKind::EmptyCache) > 0);
    // Away from the marks: the cursor's column is its own.
    seek(&mut v, 2);
    press(&mut v, KeyCode::Char('z'));
    assert!(v.timeline_zoom().is_some(), "600 MiB held: a band to zoom");
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let rows = timeline_plot_rows(&screen);
        assert!(rows.len() >= 4, "{w}×{h}: {screen}");
        assert!(
            rows.last().is_some_and(|r| !r.starts_with("0 B")),
            "{w}×{h}: zoomed\n{screen}"
        );
        // Each mark is a column of one glyph from the chart's top row to
        // its bottom one: from 0 B, its points under the zoomed range
        // were off the chart and the column had gaps.
        for glyph in ['┃', '┊', '▌'] {
            let columns = |row: &String| -> Vec<usize> {
                row.chars()
                    .enumerate()
                    .filter(|&(_, c)| c == glyph)
                    .map(|(i, _)| i)
                    .collect()
            };
            let first = columns(&rows[0]);
            assert!(
                !first.is_empty(),
                "{w}×{h}: {glyph} on the top row\n{screen}"
            );
            for row in &rows {
                assert_eq!(columns(row), first, "{w}×{h}: {glyph} in {row}\n{screen}");
            }
        }
    }
}

#[test]
fn z_is_dimmed_in_the_help_with_why_where_the_timeline_reaches_0_b() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let theme = Theme::colored();
    assert_eq!(
        v.unavailable(vramtop::app::viewer::ViewerAction::ToggleZoom),
        Some("the timeline reaches down to 0 B already")
    );
    press(&mut v, KeyCode::Char('z'));
    assert!(v.timeline_zoom().is_none());
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("z: the timeline reaches down to 0 B already")
    );
    press(&mut v, KeyCode::Char('?'));
    let t = draw_with(&v, 120, 50, &theme);
    let buf = t.backend().buffer();
    let (row, dim) = help_row(buf, "z", &theme).unwrap_or_else(|| panic!("{}", text(buf)));
    assert!(
        row.contains("[the timeline reaches down to 0 B already]") && dim,
        "{row}"
    );
    // Where it zooms, the help offers it undimmed.
    let Some(mut v) = viewer(SILMONT_FWD) else {
        return;
    };
    press(&mut v, KeyCode::Char('?'));
    let t = draw_with(&v, 120, 50, &theme);
    let (row, dim) = help_row(t.backend().buffer(), "z", &theme).expect("z");
    assert!(
        !row.lines().next().unwrap_or_default().contains('[') && !dim,
        "{row}"
    );
}

#[test]
fn with_a_filter_on_every_pane_title_says_whether_the_filter_applies_to_it() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let title_of = |screen: &str, pane: &str| {
        screen
            .lines()
            .find_map(|l| l.find(pane).map(|i| l[i..].to_string()))
            .unwrap_or_default()
    };
    // No filter: no pane speaks of one.
    let screen = text(draw(&v, 80, 40).backend().buffer());
    assert!(!screen.contains("unfiltered") && !screen.contains("filtered"));
    press(&mut v, KeyCode::Char('s'));
    press(&mut v, KeyCode::Char('p'));
    press(&mut v, KeyCode::Char('p'));
    // A narrow fragmentation pane (beside the timeline at 80 columns)
    // says that its figures are filtered where the filters do not fit.
    let screen = text(draw(&v, 80, 40).backend().buffer());
    let t = title_of(&screen, "Fragmentation");
    assert!(t.contains("· filtered"), "{t}");
    // Wider, it names them.
    let screen = text(draw(&v, 120, 40).backend().buffer());
    let t = title_of(&screen, "Fragmentation");
    assert!(t.contains("stream 0 · small pool"), "{t}");
    press(&mut v, KeyCode::Char('w'));
    for (w, h) in [(80, 40), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        for line in screen.lines() {
            assert!(line.chars().count() <= usize::from(w), "{line}");
        }
        // Below 100 columns the sites pane takes the timeline's place:
        // each pane shown is checked, and at 120 columns all are (the
        // fragmentation pane gives way to the sites pane at both).
        let shown = |pane: &str| {
            let t = title_of(&screen, pane);
            assert!(w < 100 || !t.is_empty(), "{w}x{h} {pane}:\n{screen}");
            (!t.is_empty()).then_some(t)
        };
        // The GPUs row and the timeline count every segment.
        for pane in ["GPUs", "Timeline"] {
            if let Some(t) = shown(pane) {
                assert!(t.contains("unfiltered"), "{w}x{h} {pane}: {t}");
            }
        }
        // The panes drawn from the filtered segments name the filter.
        for pane in ["Memory breakdown", "Segments", "Sites"] {
            let t = shown(pane).expect("shown at every width");
            assert!(t.contains("stream 0 · small pool"), "{w}x{h} {pane}: {t}");
        }
    }
}

/// The viewer on the probe's stand-in training run out of memory
/// (tests/fixtures/standin-oom.pickle): it opens at the end, on the OOM
/// event, the trace's last.
fn standin_oom() -> ViewerState {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/standin-oom.pickle"
    );
    let snapshot = vramtop::snapshot::read_snapshot_file(std::path::Path::new(path))
        .expect("the fixture loads");
    let v = ViewerState::new("standin-oom.pickle".to_string(), snapshot);
    assert!(v.at_oom(), "{}", status_text(&v));
    v
}

/// The row of `t`'s screen that starts with `start`.
fn row_starting(t: &Terminal<TestBackend>, start: &str) -> String {
    let screen = text(t.backend().buffer());
    screen
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no row starts with {start:?}:\n{screen}"))
        .trim_end()
        .to_string()
}

#[test]
fn at_an_oom_the_status_line_names_the_segment_pytorch_named_and_the_code_that_asked() {
    let v = standin_oom();
    // 80 columns: the segment and the asker's file and line, in short.
    let t = draw(&v, 80, 24);
    let status = row_starting(&t, "event 50/50");
    assert_eq!(
        status,
        "event 50/50 · oom 256 MiB requested (258 MiB segment) · by standin_train.py:72"
    );
    // 120: the message's figure said as such.
    let t = draw(&v, 120, 40);
    let status = row_starting(&t, "event 50/50");
    assert_eq!(
        status,
        "event 50/50 (#49) · oom 256 MiB requested (258 MiB segment, as PyTorch's message says) \
         · by standin_train.py:72"
    );
    // Wider, the asker's function too.
    let line = status_text_within(&v, 160);
    assert!(
        line.ends_with("free on the device · asked by standin_train.py:72 step"),
        "{line}"
    );
    // Enter's hint says what it shows here.
    let hints = text(t.backend().buffer());
    assert!(hints.contains("Enter OOM stack"), "{hints}");
    // One event back the line and the hint are the usual ones.
    let mut v = v;
    press(&mut v, KeyCode::Left);
    let line = status_text_within(&v, 120);
    assert!(
        line.starts_with("event 49/50 (#48) · segment_free "),
        "{line}"
    );
    assert!(!line.contains(" by "), "{line}");
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(
        screen.contains("Enter block") && !screen.contains("OOM stack"),
        "{screen}"
    );
}

#[test]
fn enter_on_an_oom_lists_the_failed_requests_stack_and_esc_closes_it() {
    let mut v = standin_oom();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open && v.detail_oom);
    let lines: Vec<String> = detail_lines(&v, 76).iter().map(|l| l.to_string()).collect();
    let detail = lines.join("\n");
    assert!(
        detail.contains("asked by      standin_train.py:72 step"),
        "{detail}"
    );
    assert!(
        detail.contains("segment       258 MiB: the size PyTorch's error"),
        "{detail}"
    );
    assert!(
        detail.contains("stack of the failed request, innermost first (3 Python frames"),
        "{detail}"
    );
    assert!(
        detail.contains("  python/tests/standin_train.py:101 main"),
        "{detail}"
    );
    let t = draw(&v, 80, 24);
    insta::assert_snapshot!("viewer_oom_detail_80x24", t.backend());
    // ↓ has no block to go to: said, the detail stays.
    press(&mut v, KeyCode::Down);
    assert!(v.detail_open && v.detail_oom);
    press(&mut v, KeyCode::Esc);
    assert!(!v.detail_open && !v.detail_oom);
}

#[test]
fn at_an_oom_the_sites_pane_names_the_failed_request_first_and_enter_on_it_reads_its_stack() {
    // Opened at the OOM as `open FILE --at oom` and `O` open it.
    let mut v = standin_oom();
    v.open_at_oom(&Keymap::default());
    assert!(v.sites_open && !v.sites_oom_selected);
    let asked = "OOM 256 MiB asked by standin_train.py:72 step";
    for (w, h) in [(80, 24), (120, 40)] {
        let t = draw(&v, w, h);
        let screen = text(t.backend().buffer());
        // The row, above the sites, says how to reach the stack (in short
        // beside the timeline); the first site is selected, and Enter
        // expands it.
        let hint = if w == 80 {
            "↑ then Enter: its stack"
        } else {
            "↑, Enter: stack"
        };
        assert!(
            screen.contains(&format!(" {asked} · {hint}")),
            "{w}x{h}:\n{screen}"
        );
        assert!(
            screen.contains("Enter expand/fold site"),
            "{w}x{h}:\n{screen}"
        );
        assert!(!screen.contains("OOM stack"), "{w}x{h}:\n{screen}");
        insta::assert_snapshot!(format!("viewer_oom_sites_{w}x{h}"), t.backend());
    }
    // At 100 columns, beside a narrower timeline, the asker in short keeps
    // the hint.
    let screen = text(draw(&v, 100, 30).backend().buffer());
    assert!(
        screen.contains(" OOM 256 MiB by standin_train.py:72 · ↑, Enter: stack"),
        "{screen}"
    );
    // ↑: the row selected; the hint says what Enter does there.
    press(&mut v, KeyCode::Up);
    assert!(v.sites_oom_selected);
    for (w, h) in [(80, 24), (120, 40)] {
        let t = draw(&v, w, h);
        let screen = text(t.backend().buffer());
        assert!(screen.contains(&format!("▶{asked}")), "{w}x{h}:\n{screen}");
        assert!(
            !screen.contains(&format!("{asked} ·")),
            "{w}x{h}:\n{screen}"
        );
        assert!(screen.contains("Enter OOM stack"), "{w}x{h}:\n{screen}");
        assert!(!screen.contains("expand/fold site"), "{w}x{h}:\n{screen}");
        insta::assert_snapshot!(format!("viewer_oom_sites_row_{w}x{h}"), t.backend());
    }
    // With --ascii the row names ↑ in words, as the hints do.
    let mut folded = v.clone();
    press(&mut folded, KeyCode::Down);
    let ascii = Theme::colored().with_ascii(true);
    let screen = text(draw_with(&folded, 80, 24, &ascii).backend().buffer());
    // ("·" is "-" there, as elsewhere.)
    assert!(
        screen.contains(&format!(" {asked} - Up then Enter: its stack")),
        "{screen}"
    );
    // Enter: the OOM's detail over the panes.
    press(&mut v, KeyCode::Enter);
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("stack of the failed request"), "{screen}");
    // One event back, off the OOM: no row.
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Left);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(!screen.contains(asked), "{screen}");
}

#[test]
fn at_an_oom_recorded_without_stacks_the_status_line_says_there_is_none() {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const MIB: u64 = 1 << 20;
    // The model records no stacks; 700 MiB is a whole segment already.
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(100));
    let _kept = m.malloc(400 * MIB, 0).expect("fits");
    assert!(m.malloc(700 * MIB, 0).is_err(), "the OOM");
    let snapshot = vramtop::snapshot::capture::snapshot_of(&m, 0);
    let mut v = ViewerState::new("oom.pickle".to_string(), snapshot);
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('o'));
    assert!(v.at_oom(), "{}", status_text(&v));
    let narrow = status_text_within(&v, 80);
    assert!(
        narrow.contains("oom 700 MiB requested · no stack"),
        "{narrow}"
    );
    assert!(!narrow.contains("segment"), "{narrow}");
    let wide = status_text_within(&v, 160);
    assert!(wide.contains("no stack: recorded without stacks"), "{wide}");
    press(&mut v, KeyCode::Enter);
    let detail: Vec<String> = detail_lines(&v, 76).iter().map(|l| l.to_string()).collect();
    assert!(
        detail
            .iter()
            .any(|l| l == "asked by      no stack: recorded without stacks"),
        "{detail:?}"
    );
}

#[test]
fn ascii_mode_names_the_arrow_keys_of_the_viewers_hints_in_words() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let ascii = Theme::colored().with_ascii(true);
    // Mid-trace: both ways to step are hinted.
    seek(&mut v, 3);
    for (w, h) in [(120, 40), (80, 24)] {
        let screen = text(draw_with(&v, w, h, &ascii).backend().buffer());
        let hints = screen.lines().last().unwrap_or_default();
        let lone: Vec<&str> = hints
            .split_whitespace()
            .filter(|word| matches!(*word, "v" | ">" | "<" | "^"))
            .collect();
        assert_eq!(lone, Vec::<&str>::new(), "{w}x{h}: {hints}");
        assert!(hints.contains("Right event"), "{w}x{h}: {hints}");
        let unicode = text(draw(&v, w, h).backend().buffer());
        let unicode_hints = unicode.lines().last().unwrap_or_default();
        assert!(
            unicode_hints.contains("→ event"),
            "{w}x{h}: {unicode_hints}"
        );
    }
}
