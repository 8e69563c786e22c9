//! App-flow tests of the snapshot viewer: keys in, state out, no terminal.
//! Traces come from a real PyTorch snapshot and from the allocator model
//! (for OOMs, empty_cache, two streams and two devices, which no shared
//! file holds).

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice, PoolKind, TraceAction};
use vramtop::app::keymap::Keymap;
use vramtop::app::state::{Overlay, Pane};
use vramtop::app::update::Effect;
use vramtop::app::viewer::{PAGE_EVENTS, PoolFilter, ViewerAction, ViewerState};
use vramtop::snapshot::Snapshot;
use vramtop::snapshot::capture::snapshot_of;
use vramtop::snapshot::sites::NoStackReason;

use common::shared_viewer as shared;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn press(v: &mut ViewerState, code: KeyCode) -> Effect {
    v.handle_key(&Keymap::default(), KeyEvent::new(code, KeyModifiers::NONE))
}

fn model(device: u32) -> CachingAllocator<InMemoryDevice> {
    let mut m = CachingAllocator::new(InMemoryDevice::new(GIB), device, AllocatorConfig::default());
    m.record_history(Some(100_000));
    m
}

/// One device's story with every kind of mark: segment allocs on two
/// streams, a release-and-retry, an OOM, an empty_cache.
fn story(device: u32) -> Snapshot {
    let mut m = model(device);
    let mut t = 0;
    let mut tick = |m: &mut CachingAllocator<InMemoryDevice>| {
        t += 1000;
        m.set_time_us(t);
    };
    tick(&mut m);
    let a = m.malloc(300 * MIB, 0).expect("fits");
    tick(&mut m);
    let b = m.malloc(300 * MIB, 0).expect("fits");
    tick(&mut m);
    let small = m.malloc(4096, 7).expect("fits");
    tick(&mut m);
    m.free(a).expect("live");
    tick(&mut m);
    let c = m.malloc(500 * MIB, 0).expect("fits after a release");
    tick(&mut m);
    assert!(m.malloc(800 * MIB, 0).is_err(), "OOM");
    tick(&mut m);
    m.free(b).expect("live");
    tick(&mut m);
    m.empty_cache();
    tick(&mut m);
    m.free(c).expect("live");
    let _ = small;
    snapshot_of(&m, 0)
}

fn story_viewer() -> ViewerState {
    ViewerState::new("story.pickle".to_string(), story(0))
}

#[test]
fn arrows_step_one_event_and_stop_at_both_ends_saying_so() {
    let mut v = story_viewer();
    let n = v.device().expect("one device").len();
    assert_eq!(v.cursor(), n, "opens at the end: the file's own state");
    assert_eq!(press(&mut v, KeyCode::Right), Effect::Redraw, "says why");
    assert_eq!(v.cursor(), n, "already at the end");
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("at the last event; Home goes to the start")
    );
    press(&mut v, KeyCode::Left);
    assert_eq!(v.cursor(), n - 1);
    press(&mut v, KeyCode::Char('l'));
    assert_eq!(v.cursor(), n);
    press(&mut v, KeyCode::Home);
    assert_eq!(v.cursor(), 0);
    assert!(v.segments.is_empty(), "nothing before the first event");
    assert_eq!(press(&mut v, KeyCode::Char('h')), Effect::Redraw);
    assert_eq!(v.cursor(), 0);
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("at the start, before the first event; End goes to the last")
    );
    press(&mut v, KeyCode::End);
    assert_eq!(v.cursor(), n);
}

#[test]
fn page_keys_move_one_percent_of_a_long_trace_at_least_a_hundred_events() {
    let Some(mut v) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let n = v.device().expect("a device").len();
    assert_eq!(n, 5803);
    assert_eq!(v.page(), PAGE_EVENTS.max(n / 100));
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::PageDown);
    assert_eq!(v.cursor(), v.page());
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::PageUp);
    assert_eq!(v.cursor(), n - v.page());
}

#[test]
fn stepping_forward_then_back_restores_the_same_segments() {
    let Some(mut v) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Home);
    for _ in 0..11 {
        press(&mut v, KeyCode::PageDown);
    }
    let before = v.segments.clone();
    let cursor = v.cursor();
    for _ in 0..5 {
        press(&mut v, KeyCode::Right);
    }
    for _ in 0..5 {
        press(&mut v, KeyCode::Left);
    }
    assert_eq!(v.cursor(), cursor);
    assert_eq!(v.segments, before);
}

#[test]
fn jump_keys_land_just_after_the_oom_segment_alloc_and_empty_cache() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('o'));
    let e = v.current_event().expect("after the OOM");
    assert_eq!(e.action, TraceAction::Oom);
    let oom = v.cursor();
    press(&mut v, KeyCode::Char('o'));
    assert_eq!(v.cursor(), oom, "only one OOM");
    assert_eq!(v.app.ui.notice.as_deref(), Some("no OOM after this event"));
    assert_eq!(v.cursor(), oom);

    press(&mut v, KeyCode::Char('e'));
    assert_eq!(
        v.current_event().map(|e| e.action),
        Some(TraceAction::SegmentFree)
    );
    let ec = v.cursor();
    assert!(ec > oom);
    press(&mut v, KeyCode::Char('E'));
    assert_eq!(v.cursor(), ec, "no earlier empty_cache point");
    press(&mut v, KeyCode::Char('O'));
    assert_eq!(v.cursor(), oom, "back to the OOM");

    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('n'));
    assert_eq!(
        v.current_event().map(|e| e.action),
        Some(TraceAction::SegmentAlloc)
    );
    let first = v.cursor();
    press(&mut v, KeyCode::Char('n'));
    assert!(v.cursor() > first);
    press(&mut v, KeyCode::Char('N'));
    assert_eq!(v.cursor(), first);
}

#[test]
fn a_jump_selects_the_block_its_event_is_about() {
    // B: just after the biggest allocation (c, 500 MiB); P the peak of
    // allocated bytes; R the new segment of the peak of reserved bytes;
    // n a segment_alloc: each selects the block at the event's address.
    for key in ['B', 'P', 'R', 'n'] {
        let mut v = story_viewer();
        press(&mut v, KeyCode::Home);
        press(&mut v, KeyCode::Char(key));
        let e = v.current_event().expect("after an event").clone();
        let (_, b) = v.selected_block().expect("a block at the event");
        assert!(
            b.address <= e.addr && e.addr < b.address + b.size,
            "{key}: {:?} at {:#x} selects the block {:#x}+{}",
            e.action,
            e.addr,
            b.address,
            b.size
        );
        assert_eq!(v.selected_address, Some(b.address), "{key}");
    }
    // Already at the moment, the key selects it again.
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('B'));
    let addr = v.current_event().expect("after the alloc").addr;
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Char('B'));
    assert_eq!(v.selected_address, Some(addr));
    // An OOM is about no block: the selection stays.
    press(&mut v, KeyCode::Char('o'));
    assert_eq!(v.current_event().map(|e| e.action), Some(TraceAction::Oom));
    let before = v.selected_address;
    assert!(before.is_some());
    press(&mut v, KeyCode::Right);
    press(&mut v, KeyCode::Char('O'));
    assert_eq!(v.selected_address, before, "an OOM leaves the selection");
}

#[test]
fn b_in_a_real_trace_selects_the_biggest_allocations_block_with_its_site() {
    let Some(mut v) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    // As opened, B left the selection on "block 2/5 2.00 MiB".
    press(&mut v, KeyCode::Char('B'));
    let e = v.current_event().expect("after the alloc").clone();
    assert_eq!(e.action, TraceAction::Alloc);
    let (_, b) = v.selected_block().expect("its block");
    assert_eq!((b.address, b.size), (e.addr, 512 * MIB));
    // With the sites pane open and another site selected, B selects the
    // block's site with it.
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Down);
    let before = v.selected_site;
    assert!(v.highlighted().binary_search(&e.addr).is_err());
    press(&mut v, KeyCode::Char('B'));
    assert_eq!(v.selected_address, Some(e.addr));
    assert_ne!(v.selected_site, before);
    assert!(
        v.highlighted().binary_search(&e.addr).is_ok(),
        "the sites pane selects the block's site"
    );
}

#[test]
fn the_selection_follows_its_block_while_the_cursor_moves() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    for _ in 0..4 {
        press(&mut v, KeyCode::Right);
    }
    press(&mut v, KeyCode::Down);
    let (_, b) = v.selected_block().expect("a block");
    let addr = b.address;
    press(&mut v, KeyCode::Right);
    press(&mut v, KeyCode::Left);
    assert_eq!(v.selected_block().map(|(_, b)| b.address), Some(addr));
    assert_eq!(v.selected_address, Some(addr));
}

#[test]
fn stream_and_pool_filters_cycle_and_narrow_the_segments() {
    // At the end: the cached 500 MiB segment (stream 0, large pool) and
    // the small segment of the live 4 KiB tensor (stream 7).
    let mut v = story_viewer();
    let all = v.segments.len();
    assert!(v.segments.iter().any(|s| s.stream == 7));
    assert_eq!(v.streams(), vec![0, 7]);
    press(&mut v, KeyCode::Char('s'));
    assert_eq!(v.stream_filter, Some(0));
    assert!(v.segments.iter().all(|s| s.stream == 0) && v.segments.len() < all);
    press(&mut v, KeyCode::Char('s'));
    assert_eq!(v.stream_filter, Some(7));
    assert!(v.segments.iter().all(|s| s.stream == 7));
    press(&mut v, KeyCode::Char('s'));
    assert_eq!(v.stream_filter, None);
    assert_eq!(v.segments.len(), all);

    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, Some(PoolFilter::Size(PoolKind::Large)));
    assert!(v.segments.iter().all(|s| s.segment_type == PoolKind::Large));
    press(&mut v, KeyCode::Char('p'));
    assert!(v.segments.iter().all(|s| s.segment_type == PoolKind::Small));
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, None);
    // The panes draw the filtered layout.
    let view = v.app.gpus[0].allocator.as_ref().expect("a view");
    assert_eq!(view.layout.len(), all);
}

#[test]
fn devices_switch_with_number_keys_and_keep_their_own_cursor() {
    let mut a = story(0);
    let b = story(1);
    a.segments.extend(b.segments);
    a.device_traces = vec![a.device_traces[0].clone(), b.device_traces[1].clone()];
    let mut v = ViewerState::new("two.pickle".to_string(), a);
    assert_eq!(v.scrub.devices.len(), 2);
    press(&mut v, KeyCode::Home);
    assert_eq!(v.cursor(), 0);
    press(&mut v, KeyCode::Char('1'));
    assert_eq!(v.device().map(|d| d.device), Some(1));
    assert_eq!(
        v.cursor(),
        v.device().map_or(0, |d| d.len()),
        "device 1 untouched"
    );
    assert!(v.segments.iter().all(|s| s.device == 1));
    press(&mut v, KeyCode::Char('0'));
    assert_eq!(v.cursor(), 0, "device 0 kept its cursor");
    // ↑/↓ on the GPUs pane switch devices too.
    v.app.ui.focus = Pane::Gpus;
    press(&mut v, KeyCode::Down);
    assert_eq!(v.device().map(|d| d.device), Some(1));
    press(&mut v, KeyCode::Char('2'));
    assert_eq!(v.device().map(|d| d.device), Some(1), "no device 2");
    assert!(
        v.app
            .ui
            .notice
            .as_deref()
            .is_some_and(|n| n.starts_with("no GPU 2"))
    );
}

#[test]
fn a_click_focuses_the_pane_under_it_and_on_a_gpu_row_selects_that_gpu() {
    use ratatui::layout::Rect;
    use vramtop::shell::click::click_viewer;
    use vramtop::ui::{device_at, viewer_layout};
    let mut a = story(0);
    let b = story(1);
    a.segments.extend(b.segments);
    a.device_traces = vec![a.device_traces[0].clone(), b.device_traces[1].clone()];
    let mut v = ViewerState::new("two.pickle".to_string(), a);
    let area = Rect::new(0, 0, 120, 40);
    let pane = |v: &ViewerState, p: Pane| {
        viewer_layout(area, v)
            .panes
            .iter()
            .find(|(q, _)| *q == p)
            .map(|&(_, r)| r)
            .expect("the pane is drawn")
    };
    // The timeline's middle: focuses it.
    let t = pane(&v, Pane::Timeline);
    assert!(click_viewer(area, &mut v, t.x + 2, t.y + 2));
    assert_eq!(v.app.ui.focus, Pane::Timeline);
    assert_eq!(v.device().map(|d| d.device), Some(0));
    // GPU 1's row of the GPUs pane: focuses the pane and selects GPU 1,
    // its segments shown.
    let g = pane(&v, Pane::Gpus);
    let row = (g.y..g.bottom())
        .find(|&r| device_at(&v, g, r) == Some(1))
        .expect("GPU 1 is drawn");
    assert_eq!(row, g.y + 2, "under the title and GPU 0's row");
    assert!(click_viewer(area, &mut v, g.x + 3, row));
    assert_eq!(v.app.ui.focus, Pane::Gpus);
    assert_eq!(v.device().map(|d| d.device), Some(1));
    assert!(v.segments.iter().all(|s| s.device == 1));
    assert!(!click_viewer(area, &mut v, g.x + 3, row), "no change");
    // The pane's title selects no GPU.
    assert_eq!(device_at(&v, g, g.y), None);
    // Under the block detail (modal) a click changes nothing.
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    assert!(!click_viewer(area, &mut v, t.x + 2, t.y + 2));
    assert_eq!(v.app.ui.focus, Pane::Gpus);
}

#[test]
fn a_click_on_a_sites_row_selects_that_site_as_the_arrow_keys_would() {
    use ratatui::layout::Rect;
    use vramtop::shell::click::click_viewer;
    use vramtop::ui::{site_at, viewer_layout};
    let Some(mut v) = shared("volcengine_verl_mem.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('w'));
    assert!(v.sites.as_ref().is_some_and(|s| s.sites.len() > 12));
    // Beside the timeline at 120 columns, in its place at 80.
    for area in [Rect::new(0, 0, 80, 24), Rect::new(0, 0, 120, 40)] {
        assert_eq!(v.selected_site, 0);
        let rect = viewer_layout(area, &v).sites.expect("the sites pane");
        let row_of = |v: &ViewerState, site| {
            (rect.y..rect.bottom())
                .find(|&r| site_at(v, rect, r) == Some(site))
                .expect("the site's row is drawn")
        };
        assert_eq!(row_of(&v, 2), rect.y + 3, "under the title and two sites");
        let mut keyed = v.clone();
        press(&mut keyed, KeyCode::Down);
        press(&mut keyed, KeyCode::Down);
        let row = row_of(&v, 2);
        assert!(click_viewer(area, &mut v, rect.x + 5, row));
        assert_eq!(v.selected_site, 2);
        // Its blocks highlighted, the block selection on its block.
        assert_eq!(v.highlighted(), keyed.highlighted());
        assert_eq!(v.app.ui.selected_block, keyed.app.ui.selected_block);
        assert_eq!(v.selected_address, keyed.selected_address);
        let row = row_of(&v, 2);
        assert!(!click_viewer(area, &mut v, rect.x + 5, row), "no change");
        // The title selects none, nor the row counting the sites not
        // shown, where the list is longer than the pane (at 80×24).
        assert_eq!(site_at(&v, rect, rect.y), None);
        let sites = v.sites.as_ref().map_or(0, |s| s.sites.len());
        if sites > usize::from(rect.height - 1) {
            let last = rect.bottom() - 1;
            assert_eq!(site_at(&v, rect, last), None, "the '… N more' row");
            assert!(!click_viewer(area, &mut v, rect.x + 5, last));
            assert_eq!(v.selected_site, 2);
        } else {
            assert_eq!(area.width, 120, "80×24 cuts the list");
        }
        press(&mut v, KeyCode::Up);
        press(&mut v, KeyCode::Up);
    }
    // An expanded site: a row of the list above its stack selects that
    // site, still expanded; its stack's rows select none.
    let area = Rect::new(0, 0, 120, 40);
    press(&mut v, KeyCode::Enter);
    assert!(v.site_expanded);
    let rect = viewer_layout(area, &v).sites.expect("the sites pane");
    let row = (rect.y..rect.bottom())
        .find(|&r| site_at(&v, rect, r) == Some(1))
        .expect("site 1's row is drawn");
    assert!(click_viewer(area, &mut v, rect.x + 5, row));
    assert_eq!(v.selected_site, 1);
    assert!(v.site_expanded);
    assert_eq!(
        site_at(&v, rect, rect.bottom() - 2),
        None,
        "a row of its stack"
    );
    // Under the help (modal) a click changes nothing.
    press(&mut v, KeyCode::Char('?'));
    let row = (rect.y..rect.bottom())
        .find(|&r| site_at(&v, rect, r) == Some(0))
        .expect("site 0's row is drawn");
    assert!(!click_viewer(area, &mut v, rect.x + 5, row));
    assert_eq!(v.selected_site, 1);
}

#[test]
fn tab_skips_the_process_pane_the_viewer_does_not_have() {
    let mut v = story_viewer();
    let mut seen = Vec::new();
    for _ in 0..10 {
        press(&mut v, KeyCode::Tab);
        seen.push(v.app.ui.focus);
    }
    assert!(!seen.contains(&Pane::Processes));
    for p in [
        Pane::Gpus,
        Pane::Breakdown,
        Pane::Timeline,
        Pane::Fragmentation,
        Pane::Segments,
    ] {
        assert!(seen.contains(&p), "{p:?}");
    }
}

#[test]
fn a_block_detail_taller_than_the_terminal_scrolls_by_pages_and_a_new_block_starts_at_the_top() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let first = screen_at(&v, 80, 10);
    assert!(first.contains("rows 1–6 of "), "{first}");
    assert!(
        first.contains("PgDn scrolls"),
        "not ↓, which moves the block: {first}"
    );
    assert_eq!(press(&mut v, KeyCode::PageDown), Effect::Redraw);
    let paged = screen_at(&v, 80, 10);
    assert!(!paged.contains("rows 1–6 of "), "{paged}");
    assert!(paged.contains("PgUp"), "{paged}");
    press(&mut v, KeyCode::Down);
    assert_eq!(
        v.detail_scroll, 0,
        "the next block's detail starts at the top"
    );
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Home);
    assert!(screen_at(&v, 80, 10).contains("rows 1–6 of "));
}

#[test]
fn enter_opens_the_detail_escape_closes_it_and_q_quits_from_anywhere() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let first = v.selected_address;
    press(&mut v, KeyCode::Down);
    assert!(v.detail_open, "↓ moves the selection under the open detail");
    assert_ne!(v.selected_address, first);
    assert_eq!(press(&mut v, KeyCode::Char('o')), Effect::None, "modal");
    press(&mut v, KeyCode::Esc);
    assert!(!v.detail_open);
    press(&mut v, KeyCode::Enter);
    assert_eq!(press(&mut v, KeyCode::Char('q')), Effect::Quit);
}

#[test]
fn help_is_modal_over_the_viewer() {
    let mut v = story_viewer();
    let cursor = v.cursor();
    press(&mut v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::Help);
    assert_eq!(press(&mut v, KeyCode::Left), Effect::None);
    assert_eq!(v.cursor(), cursor);
    press(&mut v, KeyCode::Esc);
    assert_eq!(v.app.ui.overlay, Overlay::None);
    press(&mut v, KeyCode::Left);
    assert_eq!(v.cursor(), cursor - 1);
}

#[test]
fn help_opens_over_the_block_detail_and_the_comparison_and_closes_back_to_them() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    press(&mut v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::Help, "? over the block detail");
    // Tall enough for the viewer's keys above it, the reasons of those
    // that do nothing at the last event wrapped under them.
    let screen = screen_at(&v, 120, 52);
    assert!(screen.contains("In the block detail"), "{screen}");
    // Modal: the detail's keys wait under the help.
    let block = v.selected_address;
    press(&mut v, KeyCode::Down);
    assert_eq!(v.selected_address, block);
    press(&mut v, KeyCode::Esc);
    assert_eq!(v.app.ui.overlay, Overlay::None);
    assert!(
        v.detail_open,
        "Esc closes the help, not the detail under it"
    );
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_some());
    press(&mut v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::Help, "? over the comparison");
    press(&mut v, KeyCode::Char('?'));
    assert_eq!(v.app.ui.overlay, Overlay::None);
    assert!(v.compare.is_some());
}

#[test]
fn a_snapshot_without_a_trace_shows_its_state_and_scrub_keys_say_there_is_none() {
    let Some(mut v) = shared("muduard_dump_snapshot_c.pickle") else {
        return;
    };
    assert_eq!(v.cursor(), 0);
    assert!(!v.segments.is_empty());
    press(&mut v, KeyCode::Left);
    assert_eq!(v.cursor(), 0, "← does not move");
    press(&mut v, KeyCode::Char('o'));
    assert_eq!(v.cursor(), 0, "o does not move");
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("no trace in this file (its final state only): nothing to jump to")
    );
    assert!(vramtop::ui::status_text(&v).contains("no trace"));
    // The panes say so instead of "0 events", "peak … @0" and "events 0…0",
    // and the key hints leave out the keys that move along a trace.
    let screen = screen_of(&v);
    for shown in ["no trace  reserved", "Timeline  GPU", "· no trace"] {
        assert!(screen.contains(shown), "{shown} in\n{screen}");
    }
    for absent in ["0 events", "@0", "events 0…0", "→ event", "PgDn step"] {
        assert!(!screen.contains(absent), "{absent} in\n{screen}");
    }
    assert!(screen.contains("Enter block"), "{screen}");
}

#[test]
fn every_viewer_key_in_a_file_with_no_gpu_says_so_and_changes_nothing() {
    // `pickle.dumps([], protocol=2)`: no segments, no trace, no GPU.
    let snapshot =
        vramtop::snapshot::read_snapshot(b"\x80\x02]q\x00.").expect("an empty segment list");
    let mut v = ViewerState::new("empty.pickle".to_string(), snapshot);
    assert!(v.gpu_less());
    let keymap = Keymap::default();
    // The keys the trace-less hints offered: each answered with nothing
    // on screen to show for it (a pool filter, an empty sites pane).
    for key in ["Enter", "s", "p", "w", "g", "x", "End", "]", "["] {
        let code = match key {
            "Enter" => KeyCode::Enter,
            "End" => KeyCode::End,
            k => KeyCode::Char(k.chars().next().expect("a key")),
        };
        press(&mut v, code);
        let notice = v.app.ui.notice.clone().unwrap_or_default();
        assert!(
            notice.starts_with("no GPU in this file (no segments, no trace): "),
            "{key}: {notice}"
        );
        assert!(!v.sites_open && !v.detail_open, "{key}");
        assert_eq!((v.stream_filter, v.pool_filter), (None, None), "{key}");
    }
    for b in &keymap.viewer {
        assert!(!v.offers(b.action), "{:?}", b.action);
    }
    // A trace key keeps its own answer: there is no trace either.
    press(&mut v, KeyCode::Right);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.starts_with("no trace in this file"), "{notice}");
}

/// The block detail's lines as text, wide enough not to wrap.
fn detail_text(v: &ViewerState) -> String {
    vramtop::ui::detail_lines(v, 200)
        .iter()
        .map(|l| {
            l.spans
                .iter()
                .map(|s| s.content.as_ref())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_block_detail_of_a_file_without_a_trace_does_not_speak_of_a_trace_beginning() {
    // A block with its stack (volcengine's GPU has no trace).
    if let Some(mut v) = shared("volcengine_verl_mem.pickle") {
        assert!(v.device().is_some_and(|d| d.is_empty()), "no trace");
        press(&mut v, KeyCode::Enter);
        let detail = detail_text(&v);
        assert!(
            detail.contains("allocated     n/a (no trace: the file holds its final state only)"),
            "{detail}"
        );
        assert!(!detail.contains("trace began"), "{detail}");
    }
    // A block without a stack, in a file recorded without history.
    let mut m = CachingAllocator::new(InMemoryDevice::new(GIB), 0, AllocatorConfig::default());
    m.malloc(4 * MIB, 0).expect("fits");
    let mut v = ViewerState::new("bare.pickle".to_string(), snapshot_of(&m, 0));
    assert!(v.device().is_some_and(|d| d.is_empty()), "no trace");
    press(&mut v, KeyCode::Enter);
    let detail = detail_text(&v);
    assert!(detail.contains("allocated     n/a (no trace"), "{detail}");
    assert!(detail.contains("stack: n/a (none recorded"), "{detail}");
    assert!(!detail.contains("trace began"), "{detail}");
}

#[test]
fn opens_on_a_gpu_that_holds_memory_when_the_first_gpu_holds_none() {
    // muduard's b holds its memory on GPU 1; GPU 0's trace is the dump's
    // one `snapshot` marker. A free recorded on GPU 0 makes it a device
    // that was used and holds nothing at the end.
    let Some(path) = common::shared_snapshot("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    let mut snapshot = vramtop::snapshot::read_snapshot_file(&path).expect("shared snapshot loads");
    let free = snapshot.device_traces[1][0].clone();
    snapshot.device_traces[0].push(free);
    let mut v = ViewerState::new("GPU 0 emptied".to_string(), snapshot);
    assert_eq!(v.scrub.devices.len(), 2);
    assert_eq!(v.device().map(|d| d.device), Some(1));
    assert!(!v.segments.is_empty());
    // GPU 0 is still one key away.
    press(&mut v, KeyCode::Char('0'));
    assert_eq!(v.device().map(|d| d.device), Some(0));
    assert!(v.segments.is_empty());
}

/// A file of four segments on one GPU: two in the default memory pool
/// (one large, one small), one each in private pools (0,2) and (0,1)
/// (large): as a CUDA-graph run's snapshot lists them.
fn private_pools_viewer() -> ViewerState {
    let mut m = model(0);
    let _big = m.malloc(30 * MIB, 0).expect("fits");
    let _small = m.malloc(4096, 0).expect("fits");
    let _graph_a = m.malloc(40 * MIB, 0).expect("fits");
    let _graph_b = m.malloc(50 * MIB, 0).expect("fits");
    let mut snapshot = snapshot_of(&m, 0);
    assert_eq!(snapshot.segments.len(), 4);
    for s in &mut snapshot.segments {
        s.segment_pool_id = match s.total_size {
            t if t == 40 * MIB => (0, 2),
            t if t == 50 * MIB => (0, 1),
            _ => (0, 0),
        };
    }
    ViewerState::new("graphs.pickle".to_string(), snapshot)
}

#[test]
fn p_cycles_the_size_classes_then_each_memory_pool_where_there_are_private_ones() {
    let mut v = private_pools_viewer();
    let ids = |v: &ViewerState| -> Vec<(i64, i64)> {
        v.segments.iter().map(|s| s.segment_pool_id).collect()
    };
    assert_eq!(v.private_pools(), vec![(0, 1), (0, 2)]);
    let expected = [
        Some(PoolFilter::Size(PoolKind::Large)),
        Some(PoolFilter::Size(PoolKind::Small)),
        Some(PoolFilter::Memory((0, 0))),
        Some(PoolFilter::Memory((0, 1))),
        Some(PoolFilter::Memory((0, 2))),
        None,
    ];
    for want in expected {
        press(&mut v, KeyCode::Char('p'));
        assert_eq!(v.pool_filter, want);
    }
    // Each memory pool keeps its own segments, both size classes.
    v.pool_filter = Some(PoolFilter::Memory((0, 0)));
    v.refresh();
    assert_eq!(ids(&v), vec![(0, 0), (0, 0)]);
    let kinds: Vec<PoolKind> = v.segments.iter().map(|s| s.segment_type).collect();
    assert!(kinds.contains(&PoolKind::Large) && kinds.contains(&PoolKind::Small));
    v.pool_filter = Some(PoolFilter::Memory((0, 1)));
    v.refresh();
    assert_eq!(ids(&v), vec![(0, 1)]);
    let screen = screen_of(&v);
    assert!(screen.contains("only private pool (0,1)"), "{screen}");
    assert!(screen.contains("GPU 0 · private pool (0,1)"), "{screen}");
    // The size classes span every memory pool.
    v.pool_filter = Some(PoolFilter::Size(PoolKind::Large));
    v.refresh();
    assert_eq!(ids(&v).len(), 3, "large segments of all three pools");
    // Beside a stream filter the status line's short form keeps the id.
    press(&mut v, KeyCode::Char('s'));
    v.pool_filter = Some(PoolFilter::Memory((0, 2)));
    v.refresh();
    assert!(
        vramtop::ui::status_text(&v).ends_with("only stream 0 · private pool (0,2)"),
        "{}",
        vramtop::ui::status_text(&v)
    );
}

#[test]
fn p_cycles_through_the_private_pools_of_a_real_cuda_graph_run() {
    // The summary lists pools (0,0), (0,1) and (0,2) on GPU 0.
    let Some(mut v) = shared("volcengine_verl_mem.pickle") else {
        return;
    };
    for _ in 0..3 {
        press(&mut v, KeyCode::Char('p'));
    }
    assert_eq!(v.pool_filter, Some(PoolFilter::Memory((0, 0))));
    assert_eq!(v.segments.len(), 59);
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, Some(PoolFilter::Memory((0, 1))));
    assert_eq!(v.segments.len(), 44);
    assert!(v.segments.iter().all(|s| s.segment_pool_id == (0, 1)));
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, Some(PoolFilter::Memory((0, 2))));
    assert_eq!(v.segments.len(), 24);
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, None);
}

#[test]
fn a_filter_that_hides_every_segment_says_so_not_that_the_allocator_is_empty() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('n'));
    assert!(
        !v.segments.is_empty(),
        "a segment after the first segment_alloc"
    );
    // The story's first segment is large: the small-pool filter hides it.
    press(&mut v, KeyCode::Char('p'));
    press(&mut v, KeyCode::Char('p'));
    assert_eq!(v.pool_filter, Some(PoolFilter::Size(PoolKind::Small)));
    assert!(v.segments.is_empty());
    let screen = screen_of(&v);
    assert!(
        screen.contains("no segments match the filter (small pool); s and p cycle it"),
        "{screen}"
    );
    assert!(!screen.contains("holds no memory"), "{screen}");
    assert!(!screen.contains("this point of the trace"), "{screen}");
}

#[test]
fn peak_and_mark_keys_on_a_file_without_a_trace_say_there_is_none() {
    let Some(mut v) = shared("muduard_dump_snapshot_c.pickle") else {
        return;
    };
    for (key, what) in [
        ('P', "jump to"),
        ('R', "jump to"),
        ('B', "jump to"),
        ('m', "mark"),
        ('M', "mark"),
        ('c', "compare"),
    ] {
        assert_eq!(press(&mut v, KeyCode::Char(key)), Effect::Redraw, "{key}");
        assert_eq!(
            v.app.ui.notice.as_deref(),
            Some(
                format!("no trace in this file (its final state only): nothing to {what}").as_str()
            ),
            "{key}"
        );
    }
    assert_eq!((v.mark_a, v.mark_b), (None, None), "nothing marked");
    assert!(v.compare.is_none());
}

#[test]
fn step_and_jump_keys_on_a_file_without_a_trace_say_there_is_none() {
    let Some(mut v) = shared("muduard_dump_snapshot_c.pickle") else {
        return;
    };
    for (key, what) in [
        (KeyCode::Right, "step through"),
        (KeyCode::Left, "step through"),
        (KeyCode::PageDown, "step through"),
        (KeyCode::Home, "step through"),
        (KeyCode::Char('o'), "jump to"),
        (KeyCode::Char('O'), "jump to"),
        (KeyCode::Char('n'), "jump to"),
    ] {
        assert_eq!(press(&mut v, key), Effect::Redraw, "{key:?}");
        assert_eq!(
            v.app.ui.notice.as_deref(),
            Some(
                format!("no trace in this file (its final state only): nothing to {what}").as_str()
            ),
            "{key:?}"
        );
    }
}

#[test]
fn x_without_an_expanded_site_says_what_it_changed_and_where_it_shows() {
    let Some(mut v) = shared("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('x'));
    assert!(v.show_cpp);
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert!(said.contains("C++ frames now listed"), "{said:?}");
    assert!(said.contains("Enter expands"), "{said:?}");
    press(&mut v, KeyCode::Char('x'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert!(said.contains("C++ frames now counted"), "{said:?}");
    // In an expanded site with a stack the pane itself shows the change.
    press(&mut v, KeyCode::Char('w'));
    let with_stack = v
        .sites
        .as_ref()
        .and_then(|s| s.sites.iter().position(|s| !s.key.is_no_stack()))
        .expect("a site with a stack");
    for _ in 0..with_stack {
        press(&mut v, KeyCode::Down);
    }
    press(&mut v, KeyCode::Enter);
    assert!(v.site_expanded);
    press(&mut v, KeyCode::Char('x'));
    assert_eq!(v.app.ui.notice, None);
}

#[test]
fn selecting_a_site_selects_the_largest_block_of_the_stack_it_shows() {
    let Some(mut v) = shared("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('w'));
    let sites = v.sites.as_ref().map_or(0, |s| s.sites.len());
    assert!(sites > 3, "Hyperion's peak has many sites");
    // Sites of one block and of many, of equal and of mixed block sizes.
    let mut mixed_sizes = 0;
    for k in 0..sites {
        let site = v.selected_site().expect("a selected site").clone();
        let sizes: Vec<u64> = v
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| site.addresses.binary_search(&b.address).is_ok())
            .map(|b| b.size)
            .collect();
        let largest = sizes.iter().copied().max().expect("a site has blocks");
        if sizes.iter().any(|&s| s != largest) {
            mixed_sizes += 1;
        }
        // The largest of the blocks whose stack the site shows (its main
        // caller path), so the block's detail and the site agree.
        let largest_shown = v
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| site.addresses.binary_search(&b.address).is_ok())
            .filter(|b| std::sync::Arc::ptr_eq(&b.frames, &site.stack))
            .map(|b| b.size)
            .max()
            .expect("a block shows the site's stack");
        let (_, block) = v.selected_block().expect("a selected block");
        assert_eq!(block.size, largest_shown, "site {k} ({})", site.label);
        assert!(std::sync::Arc::ptr_eq(&block.frames, &site.stack));
        assert!(site.addresses.binary_search(&block.address).is_ok());
        press(&mut v, KeyCode::Down);
    }
    assert!(mixed_sizes > 0, "no site had blocks of several sizes");
}

#[test]
fn every_viewer_binding_is_answered_described_and_in_docs_keys() {
    let keymap = Keymap::default();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keys.md"))
        .expect("docs/keys.md");
    let help: Vec<&str> = keymap.viewer_help_rows().iter().map(|r| r.0).collect();
    for b in &keymap.viewer {
        assert!(
            doc.contains(&format!("`{}`", b.keys)),
            "`{}` missing from docs/keys.md",
            b.keys
        );
        assert!(help.contains(&b.keys), "{} missing from the help", b.keys);
        let first = b.keys.split(' ').next().unwrap_or(b.keys);
        let code = match first {
            "←" => KeyCode::Left,
            "→" => KeyCode::Right,
            "PgUp" => KeyCode::PageUp,
            "PgDn" => KeyCode::PageDown,
            "Home" => KeyCode::Home,
            "End" => KeyCode::End,
            "Enter" => KeyCode::Enter,
            k => KeyCode::Char(k.chars().next().expect("a key")),
        };
        let event = KeyEvent::new(code, KeyModifiers::NONE);
        // The sites pane's own bindings are answered while it takes the keys.
        let answered = if b.action.in_sites_pane() {
            keymap.sites_key_for(event)
        } else {
            keymap.viewer_key_for(event)
        };
        assert_eq!(answered, Some(b.action), "{}", b.keys);
    }
}

/// The viewer of a trace with neither an OOM nor an empty_cache point:
/// one 300 MiB block allocated and freed.
fn viewer_without_marks() -> ViewerState {
    let mut m = model(0);
    m.set_time_us(1000);
    let a = m.malloc(300 * MIB, 0).expect("fits");
    m.set_time_us(2000);
    m.free(a).expect("live");
    ViewerState::new("plain.pickle".to_string(), snapshot_of(&m, 0))
}

#[test]
fn peak_keys_pressed_at_their_moment_say_the_cursor_is_there() {
    for (key, what) in [
        ('P', "the peak of allocated bytes"),
        ('R', "the peak of reserved bytes"),
        ('B', "the biggest allocation"),
    ] {
        let mut v = viewer_without_marks();
        press(&mut v, KeyCode::Home);
        assert_eq!(press(&mut v, KeyCode::Char(key)), Effect::Redraw, "{key}");
        let cursor = v.cursor();
        assert_ne!(cursor, 0, "{key} moved to its moment");
        // Pressed again it says so instead of doing nothing.
        assert_eq!(press(&mut v, KeyCode::Char(key)), Effect::Redraw, "{key}");
        assert_eq!(v.cursor(), cursor, "{key}");
        assert_eq!(
            v.app.ui.notice.as_deref(),
            Some(format!("already at {what} (event {cursor})").as_str()),
            "{key}"
        );
    }
}

#[test]
fn jump_keys_with_nothing_to_jump_to_say_why() {
    let mut v = viewer_without_marks();
    assert_eq!(press(&mut v, KeyCode::Char('o')), Effect::Redraw);
    assert_eq!(v.app.ui.notice.as_deref(), Some("no OOM in this trace"));
    press(&mut v, KeyCode::Char('e'));
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("no empty_cache point in this trace")
    );
    let theme = vramtop::ui::Theme::colored();
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).expect("tb");
    t.draw(|f| {
        vramtop::ui::render_viewer(f.area(), f.buffer_mut(), &v, &Keymap::default(), &theme)
    })
    .expect("draws");
    assert!(
        t.backend()
            .to_string()
            .contains("no empty_cache point in this trace")
    );
    press(&mut v, KeyCode::Home);
    assert_eq!(v.app.ui.notice, None, "the next key clears it");

    // In the story, past its only OOM.
    let mut v = story_viewer();
    press(&mut v, KeyCode::Char('o'));
    assert_eq!(v.app.ui.notice.as_deref(), Some("no OOM after this event"));
}

#[test]
fn a_key_that_changes_nothing_still_clears_the_last_notice_from_the_screen() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Char('o'));
    assert_eq!(v.app.ui.notice.as_deref(), Some("no OOM after this event"));
    // Before the first event the map is empty: ↓ selects nothing, but
    // the notice must go.
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Left);
    assert!(v.app.ui.notice.is_some(), "at the start");
    assert_eq!(press(&mut v, KeyCode::Down), Effect::Redraw);
    assert_eq!(v.app.ui.notice, None);
    assert_eq!(
        press(&mut v, KeyCode::Down),
        Effect::None,
        "nothing to clear"
    );
}

#[test]
fn a_dashboard_key_with_no_use_in_the_viewer_says_so_and_names_the_help_key() {
    let mut v = story_viewer();
    let before = v.cursor();
    for (code, said) in [
        (KeyCode::Char('/'), "/"),
        (KeyCode::Char('K'), "K"),
        (KeyCode::Char('a'), "a"),
        (KeyCode::Char('t'), "t"),
        (KeyCode::Char(' '), "Space"),
        (KeyCode::Char('='), "+"),
    ] {
        assert_eq!(press(&mut v, code), Effect::Redraw, "{code:?}");
        assert_eq!(
            v.app.ui.notice.as_deref(),
            Some(format!("{said} does nothing here: ? lists the viewer's keys").as_str()),
            "{code:?}"
        );
        assert_eq!(v.cursor(), before, "{code:?}");
        assert_eq!(v.app.ui.overlay, Overlay::None, "{code:?}");
    }
    // A key no table binds stays silent, as on the dashboard; it clears
    // the notice the key before left.
    assert_eq!(press(&mut v, KeyCode::Char('Q')), Effect::Redraw);
    assert_eq!(v.app.ui.notice, None);
    assert_eq!(press(&mut v, KeyCode::Char('Q')), Effect::None);
    // The viewer's own keys and the dashboard's that work there act as
    // before, without the notice.
    press(&mut v, KeyCode::Tab);
    assert_eq!(v.app.ui.notice, None);
}

#[test]
fn viewer_help_describes_shared_keys_without_the_dashboards_processes_or_filter() {
    let rows = Keymap::default().viewer_help_rows();
    for (keys, what) in &rows {
        for word in ["process", "filtering"] {
            assert!(!what.contains(word), "{keys}: {what}");
        }
    }
    let esc = rows.iter().find(|r| r.0 == "Esc").expect("Esc is listed");
    assert!(esc.1.contains("block detail"), "{}", esc.1);
    // What the help says Esc closes, Esc closes.
    let mut v = story_viewer();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    press(&mut v, KeyCode::Esc);
    assert!(!v.detail_open);
    press(&mut v, KeyCode::Char('w'));
    assert!(v.sites_open);
    press(&mut v, KeyCode::Esc);
    assert!(!v.sites_open);
}

#[test]
fn enter_with_no_block_to_show_says_why_instead_of_doing_nothing() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    assert!(
        v.segments.is_empty(),
        "nothing allocated before the first event"
    );
    assert_eq!(press(&mut v, KeyCode::Enter), Effect::Redraw);
    assert!(!v.detail_open);
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("no block to show: the segment map is empty here")
    );
}

#[test]
fn the_viewers_help_describes_a_snapshot_not_the_dashboards_driver_figures() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Char('?'));
    let theme = vramtop::ui::Theme::colored();
    let mut screen = String::new();
    // Every row of the help, page by page.
    for _ in 0..6 {
        let mut t =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).expect("tb");
        t.draw(|f| {
            vramtop::ui::render_viewer(f.area(), f.buffer_mut(), &v, &Keymap::default(), &theme)
        })
        .expect("draws");
        screen.push_str(&t.backend().to_string());
        press(&mut v, KeyCode::PageDown);
    }
    assert!(screen.contains("Words in a snapshot"), "{screen}");
    assert!(screen.contains("reserved: the allocator's"), "{screen}");
    // The dashboard-only words (driver used, contexts) are left out.
    assert!(!screen.contains("context & other"), "{screen}");
    assert!(!screen.contains("driver used"), "{screen}");
}

#[test]
fn opening_at_the_oom_lands_on_it_with_the_allocation_sites_shown() {
    let mut v = story_viewer();
    v.open_at_oom(&Keymap::default());
    assert_eq!(
        v.current_event().map(|e| e.action),
        Some(TraceAction::Oom),
        "the state when the allocation failed"
    );
    assert!(v.sites_open, "who held the memory");
    // On a second device only the one with an OOM is chosen.
    let mut quiet = story(1);
    quiet.device_traces[1].retain(|e| e.action != TraceAction::Oom);
    let mut both = story(0);
    both.segments.extend(quiet.segments);
    both.device_traces.resize(2, Vec::new());
    both.device_traces[1] = std::mem::take(&mut quiet.device_traces[1]);
    both.device_traces.swap(0, 1);
    let mut v = ViewerState::new("two.pickle".to_string(), both);
    v.open_at_oom(&Keymap::default());
    assert_eq!(v.current_event().map(|e| e.action), Some(TraceAction::Oom));
}

#[test]
fn opening_at_an_oom_that_ends_the_trace_lands_on_it_without_a_notice() {
    // An OOM snapshot is dumped when the allocation fails: its last event
    // is the OOM.
    let mut snapshot = story(0);
    let trace = &mut snapshot.device_traces[0];
    let last_oom = trace
        .iter()
        .rposition(|e| e.action == TraceAction::Oom)
        .expect("the story has an OOM");
    trace.truncate(last_oom + 1);
    let mut v = ViewerState::new("oom.pickle".to_string(), snapshot);
    v.open_at_oom(&Keymap::default());
    assert_eq!(v.current_event().map(|e| e.action), Some(TraceAction::Oom));
    assert_eq!(v.app.ui.notice, None, "nothing failed");
    assert!(v.sites_open, "who held the memory");
}

/// The pickle `bytes` read in two stages, as `open` reads a file, under
/// `name`: the viewer on its segments stage, the viewer on the whole file,
/// and the file's size.
fn staged(bytes: &[u8], name: &str) -> (ViewerState, ViewerState, u64) {
    let mut stage = None;
    let full = vramtop::snapshot::read_snapshot_staged(
        bytes,
        &vramtop::snapshot::Limits::default(),
        |s| stage = Some(s),
    )
    .expect("reads");
    let total = bytes.len() as u64;
    let stage = ViewerState::segments_stage(name.to_string(), stage.expect("a stage"), total);
    (stage, ViewerState::new(name.to_string(), full), total)
}

/// The story's file read in two stages: the viewer on its segments stage
/// and the viewer on the whole file.
fn staged_story() -> (ViewerState, ViewerState, u64) {
    staged(
        &vramtop::snapshot::snapshot_to_bytes(&story(0)),
        "story.pickle",
    )
}

fn screen_of(v: &ViewerState) -> String {
    screen_at(v, 120, 40)
}

fn screen_at(v: &ViewerState, width: u16, height: u16) -> String {
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height)).expect("backend");
    terminal
        .draw(|f| {
            let area = f.area();
            vramtop::ui::render_viewer(
                area,
                f.buffer_mut(),
                v,
                &Keymap::default(),
                &vramtop::ui::Theme::default(),
            );
        })
        .expect("draws");
    common::screen::text(terminal.backend().buffer())
}

#[test]
fn segments_stage_shows_the_final_state_and_the_trace_progress() {
    let (mut v, full, total) = staged_story();
    assert_eq!(
        v.segments, full.segments,
        "the final state, before the trace"
    );
    assert!(!v.segments.is_empty());
    v.set_trace_read(total / 2);
    let screen = screen_of(&v);
    let progress = format!(
        "reading trace: {} of {}",
        vramtop::ui::format::bytes(total / 2),
        vramtop::ui::format::bytes(total)
    );
    assert!(screen.contains(&progress), "{progress} in\n{screen}");
    assert!(screen.contains("the final state is shown"), "{screen}");
    assert!(screen.contains("GPU 0  trace being read"), "{screen}");
    assert!(vramtop::ui::status_text(&v).contains("the final state · reading trace"));
    // Every byte parsed: the events are being built, not a stuck "Y of Y".
    v.set_trace_read(total);
    let status = vramtop::ui::status_text(&v);
    assert!(
        status.contains(&format!(
            "reading trace: {} parsed, building the events",
            vramtop::ui::format::bytes(total)
        )),
        "{status}"
    );
}

#[test]
fn keys_that_need_the_trace_say_they_wait_for_it() {
    let (mut v, _, _) = staged_story();
    for code in [
        KeyCode::Left,
        KeyCode::Home,
        KeyCode::PageUp,
        KeyCode::Char('o'),
        KeyCode::Char('n'),
        KeyCode::Char('e'),
        KeyCode::Char('P'),
        KeyCode::Char('B'),
    ] {
        assert_eq!(press(&mut v, code), Effect::Redraw, "{code:?}");
        let notice = v.app.ui.notice.clone().unwrap_or_default();
        assert!(
            notice.starts_with("waiting for the trace"),
            "{code:?}: {notice}"
        );
        assert_eq!(v.cursor(), 0, "the stage has no events to move along");
        assert!(screen_of(&v).contains("waiting for the trace"));
    }
    // The final state's blocks carry their stacks: the sites work.
    press(&mut v, KeyCode::Char('w'));
    assert!(v.sites_open && v.sites.as_ref().is_some_and(|s| !s.sites.is_empty()));
}

#[test]
fn the_last_key_that_waited_for_the_trace_is_done_once_it_is_read() {
    let (mut v, full, _) = staged_story();
    let peak = full
        .device_peaks()
        .map(|p| p.allocated.cursor)
        .expect("the story has a peak");
    let n = full.device().expect("a device").len();
    assert_ne!(peak, n, "the peak is not where the stage's cursor lands");
    press(&mut v, KeyCode::Left);
    press(&mut v, KeyCode::Char('P'));
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.ends_with("(2 keys; Esc drops them)"), "{notice}");
    v.complete_trace(full, &Keymap::default());
    assert_eq!(v.cursor(), peak, "P, the last key pressed, jumped");
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(!notice.contains("waiting for the trace"), "{notice}");
    assert!(!screen_of(&v).contains("waiting for the trace"));
}

#[test]
fn keys_waiting_for_the_trace_are_done_in_order_and_esc_drops_them() {
    let (mut v, full, _) = staged_story();
    let n = full.device().expect("a device").len();
    press(&mut v, KeyCode::Left);
    press(&mut v, KeyCode::Left);
    v.complete_trace(full, &Keymap::default());
    assert_eq!(v.cursor(), n - 2, "two steps back, both done");

    let (mut v, full, _) = staged_story();
    let n = full.device().expect("a device").len();
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Esc);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(notice, "dropped the key waiting for the trace");
    v.complete_trace(full, &Keymap::default());
    assert_eq!(v.cursor(), n, "nothing done: the stage's end");
    // A held key cannot grow the queue without bound.
    let (mut v, _, _) = staged_story();
    for _ in 0..(vramtop::app::viewer::MAX_WAITING_KEYS + 10) {
        press(&mut v, KeyCode::Left);
    }
    assert_eq!(
        v.waiting_actions.len(),
        vramtop::app::viewer::MAX_WAITING_KEYS
    );
}

#[test]
fn a_trace_that_cannot_be_read_leaves_the_final_state_and_the_keys_say_why() {
    let (mut v, full, _) = staged_story();
    press(&mut v, KeyCode::Char('P'));
    v.trace_failed("story.pickle: truncated pickle: input ends at byte 900".to_string());
    assert_eq!(v.trace_reading, None);
    assert_eq!(v.segments, full.segments, "the final state stays");
    let screen = screen_of(&v);
    assert!(screen.contains("trace unreadable"), "{screen}");
    assert!(
        screen.contains("the trace could not be read") && screen.contains("input ends at byte 900"),
        "{screen}"
    );
    assert!(!screen.contains("waiting for the trace"), "{screen}");
    press(&mut v, KeyCode::Char('P'));
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(
        notice.starts_with("nothing to jump to: the trace could not be read: story.pickle"),
        "{notice}"
    );
    // The final state's own keys still work.
    press(&mut v, KeyCode::Char('w'));
    assert!(v.sites_open);
}

#[test]
fn a_viewer_opened_from_the_dashboard_says_q_goes_back() {
    let (mut v, _, _) = staged_story();
    assert!(screen_of(&v).contains("q quit"));
    v.returns_to_dashboard = true;
    assert!(screen_of(&v).contains("q back"), "{}", screen_of(&v));
    press(&mut v, KeyCode::Char('?'));
    let help = screen_at(&v, 120, 200);
    assert!(help.contains("back to the dashboard"), "{help}");
    // Nowhere in the help, the block detail's section included, does q
    // quit: Ctrl-C does, in each of the viewer's three sections.
    let quits: Vec<&str> = help
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == "quit"))
        .collect();
    assert_eq!(quits.len(), 3, "{quits:?}");
    for line in &quits {
        let row = line.trim_start_matches(['│', ' ']);
        assert!(
            row.starts_with("Ctrl-C") && row.contains("quit vramtop"),
            "{line}"
        );
    }
    let backs = help.lines().filter(|l| l.contains("back to the dashboard"));
    for line in backs {
        let row = line.trim_start_matches(['│', ' ']);
        assert!(row.starts_with("q "), "{line}");
    }
}

#[test]
fn the_viewers_notices_name_the_keys_as_the_keymap_binds_them() {
    use vramtop::app::viewer::ViewerAction as V;
    let mut moved = Keymap::default();
    for b in &mut moved.viewer {
        match b.action {
            V::MarkB => b.keys = "F8",
            V::Compare => b.keys = "F9",
            V::ToggleSites => b.keys = "F10",
            _ => {}
        }
    }
    let mut v = story_viewer();
    v.act(&moved, V::MarkA);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.ends_with("; F8 marks B"), "{notice}");
    v.act(&moved, V::Compare);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(
        notice.starts_with("F9 compares A and B: F8 marks B"),
        "{notice}"
    );
    v.act(&moved, V::MarkB);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.ends_with("; F9 compares them"), "{notice}");
    v.act(&moved, V::ToggleCppFrames);
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(
        notice.contains("(F10 sites, Enter expands one)"),
        "{notice}"
    );
}

#[test]
fn ctrl_c_in_a_viewer_opened_from_the_dashboard_quits_vramtop_and_q_goes_back() {
    use vramtop::shell::viewer_run::ViewerExit;
    let (mut v, _, _) = staged_story();
    v.returns_to_dashboard = true;
    let keymap = Keymap::default();
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    let q = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
    // In the viewer and in the block detail alike.
    for (name, open) in [("viewer", None), ("block detail", Some(KeyCode::Enter))] {
        if let Some(code) = open {
            press(&mut v, code);
        }
        assert_eq!(v.handle_key(&keymap, ctrl_c), Effect::Quit, "{name}");
        assert!(matches!(
            ViewerExit::on_quit_key(&keymap, ctrl_c),
            ViewerExit::QuitVramtop
        ));
        assert_eq!(v.handle_key(&keymap, q), Effect::Quit, "{name}");
        assert!(matches!(
            ViewerExit::on_quit_key(&keymap, q),
            ViewerExit::Done
        ));
    }
    // Ctrl with another key is no quit.
    let ctrl_q = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::CONTROL);
    assert!(!keymap.quits_vramtop(ctrl_q));
    assert!(keymap.quits_vramtop(ctrl_c));
}

#[test]
fn the_complete_trace_keeps_the_users_selection_and_focus() {
    let (mut v, full, _) = staged_story();
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Down);
    let site = v.selected_site().expect("a site selected").key.clone();
    let chosen = v.selected_address.expect("a block selected");
    press(&mut v, KeyCode::Tab);
    let focus = v.app.ui.focus;
    let n = full.device().expect("a device").len();
    v.complete_trace(full, &Keymap::default());
    assert_eq!(v.trace_reading, None);
    assert_eq!(v.selected_address, Some(chosen));
    assert_eq!(v.app.ui.focus, focus);
    assert!(v.sites_open, "the sites pane stays open");
    // The same site (the blocks without a stack keep their row, their
    // reason settled by the trace).
    let now = v.selected_site().expect("a site selected").key.clone();
    assert!(now.same_site(&site), "{now:?} after {site:?}");
    assert_eq!(v.cursor(), n, "at the end: the state the stage showed");
    assert!(!screen_of(&v).contains("reading trace"));
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Left);
    assert_eq!(v.cursor(), n - 1, "the trace can be stepped now");
}

#[test]
fn a_stage_without_stacks_in_its_blocks_leaves_the_reason_to_the_trace() {
    // Its allocated blocks have no stack; its trace has stacks.
    let Some(path) = common::shared_snapshot("bolongcheng_xl_fwd_cl128_float32_expandable.pickle")
    else {
        return;
    };
    let stage = vramtop::snapshot::read_snapshot_file_final_state(&path).expect("reads");
    let full = vramtop::snapshot::read_snapshot_file(&path).expect("reads");
    let total = std::fs::metadata(&path).expect("metadata").len();
    let mut v = ViewerState::segments_stage("b.pickle".to_string(), stage, total);
    assert_eq!(v.no_stack, NoStackReason::TraceNotRead);
    press(&mut v, KeyCode::Char('w'));
    let screen = screen_of(&v);
    assert!(screen.contains("no stack in the final state"), "{screen}");
    assert!(!screen.contains("recorded without stacks"), "{screen}");
    v.complete_trace(
        ViewerState::new("b.pickle".to_string(), full),
        &Keymap::default(),
    );
    // The trace records stacks: a block the file holds without one was
    // allocated while history was off (blocks whose stack a mid-run
    // trace lost say so themselves, at the moments they are live).
    assert_eq!(v.no_stack, NoStackReason::BeforeRecording);
    let screen = screen_of(&v);
    assert!(
        screen.contains("no stack: allocated while history was off"),
        "{screen}"
    );
}

#[test]
fn a_comparison_taller_than_the_terminal_scrolls_and_says_which_rows_it_shows() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_some());
    let first = screen_at(&v, 80, 12);
    assert!(first.contains("rows 1–8 of "), "{first}");
    assert!(first.contains("↓ j scrolls"), "{first}");
    assert_eq!(press(&mut v, KeyCode::Char('j')), Effect::Redraw);
    let second = screen_at(&v, 80, 12);
    assert!(second.contains("rows 2–9 of "), "{second}");
    assert_ne!(first, second);
    press(&mut v, KeyCode::End);
    let last = screen_at(&v, 80, 12);
    assert!(last.contains("↑ k scrolls back"), "{last}");
    // Past the end is no scroll to pay back, and a new comparison starts
    // at the top.
    assert_eq!(press(&mut v, KeyCode::Char('j')), Effect::None);
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Char('c'));
    assert!(screen_at(&v, 80, 12).contains("rows 1–8 of "));
    // A comparison that fits says nothing of rows; a narrow one keeps the
    // rows and leaves out the keys rather than cutting them.
    assert!(!screen_at(&v, 120, 60).contains("rows 1–"));
    screen_at(&v, 40, 12);
    press(&mut v, KeyCode::End);
    let narrow = screen_at(&v, 40, 12);
    assert!(narrow.contains(" 5–12/12 "), "{narrow}");
    assert!(!narrow.contains("scrolls ba"), "{narrow}");
}

#[test]
fn marks_and_compare_say_what_they_did_and_a_later_a_stays_a_compared_from_b() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Char('c'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert!(said.contains("m marks A, M marks B"), "{said}");
    assert!(v.compare.is_none());
    press(&mut v, KeyCode::End);
    let end = v.cursor();
    press(&mut v, KeyCode::Char('m'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(said, format!("A = event {end}; M marks B"));
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('M'));
    let status = vramtop::ui::status_text(&v);
    assert!(status.contains(&format!("A {end} B 0")), "{status}");
    press(&mut v, KeyCode::Char('c'));
    // Earlier to later, as `diff FILE --at A --at B` compares.
    let compare = v.compare.as_ref().expect("both marks set");
    assert_eq!((compare.a, compare.b), (0, end));
    assert!(v.marks_reversed());
    let lines = vramtop::ui::compare_lines(&v, 100);
    assert_eq!(
        lines[0],
        format!("GPU 0 · B = event 0/{end}   A = event {end}/{end}")
    );
    assert_eq!(
        lines[1],
        "A is after B: compared B→A, earlier to later, as diff --at does"
    );
    assert!(
        lines[2].trim_end().ends_with("B           A      change"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("highest between B and A")),
        "{lines:?}"
    );
    // The marks stay as the user set them, on the status line too.
    press(&mut v, KeyCode::Esc);
    assert_eq!(
        (v.mark_a.map(|m| m.cursor), v.mark_b.map(|m| m.cursor)),
        (Some(end), Some(0)),
        "A is where it was set"
    );
    let status = vramtop::ui::status_text(&v);
    assert!(status.contains(&format!("A {end} B 0")), "{status}");
    // In order, no such line.
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::End);
    press(&mut v, KeyCode::Char('M'));
    press(&mut v, KeyCode::Char('c'));
    assert!(!v.marks_reversed());
    let lines = vramtop::ui::compare_lines(&v, 100);
    assert_eq!(
        lines[0],
        format!("GPU 0 · A = event 0/{end}   B = event {end}/{end}")
    );
    assert!(!lines.iter().any(|l| l.contains("A is after B")));
}

#[test]
fn g_with_the_sites_pane_closed_says_what_grouping_it_chose() {
    let mut v = story_viewer();
    assert!(!v.sites_open);
    press(&mut v, KeyCode::Char('g'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(said, "g: sites now grouped by python frame (w shows them)");
    press(&mut v, KeyCode::Char('g'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(said, "g: sites now grouped by file:line (w shows them)");
    // With the pane open its title shows the grouping: no notice.
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Char('g'));
    assert_eq!(v.app.ui.notice, None);
}

/// Two devices, each with its own trace (`story` on device 0 and 1).
fn two_devices() -> ViewerState {
    let mut a = story(0);
    let b = story(1);
    a.segments.extend(b.segments);
    a.device_traces = vec![a.device_traces[0].clone(), b.device_traces[1].clone()];
    ViewerState::new("two.pickle".to_string(), a)
}

#[test]
fn a_mark_set_on_another_gpu_is_not_compared_here_and_the_hint_names_its_gpu() {
    let mut v = two_devices();
    press(&mut v, KeyCode::Char('1'));
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(said, "A = event 0 on GPU 1; M marks B");
    press(&mut v, KeyCode::Char('0'));
    press(&mut v, KeyCode::Char('M'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert!(
        said.contains("m marks A here (A is on GPU 1)"),
        "B on GPU 0 does not pair with A on GPU 1: {said}"
    );
    let status = vramtop::ui::status_text(&v);
    assert!(
        status.contains("A (on GPU 1) B "),
        "the status line says where A is: {status}"
    );
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_none(), "GPU 1's A is not applied to GPU 0");
    let said = v.app.ui.notice.clone().unwrap_or_default();
    let end = v.cursor();
    assert_eq!(
        said,
        format!("c compares A and B: m marks A here (A is on GPU 1; B is event {end})")
    );
    assert!(said.chars().count() <= 80, "whole on 80 columns: {said}");
    // Marked on this GPU too, the comparison is of GPU 0 and says so.
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('m'));
    press(&mut v, KeyCode::Char('c'));
    let compare = v.compare.as_ref().expect("both marks on GPU 0");
    assert_eq!((compare.device, compare.a, compare.b), (0, 0, end));
    let screen = screen_at(&v, 120, 30);
    assert!(
        screen.contains(&format!("GPU 0 · A = event 0/{end}")),
        "{screen}"
    );
}

#[test]
fn brackets_move_the_selection_a_whole_segment_at_a_time() {
    let Some(mut v) = shared("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    // Where each segment's first block is in the map's block order.
    let firsts: Vec<usize> = v
        .segments
        .iter()
        .scan(0usize, |at, s| {
            let first = *at;
            *at += s.blocks.len();
            Some((first, s.blocks.len()))
        })
        .filter(|&(_, n)| n > 0)
        .map(|(first, _)| first)
        .collect();
    assert!(firsts.len() > 3, "a map of many segments");
    assert_eq!(v.app.ui.selected_block, 0);
    for &want in &firsts[1..4] {
        assert_eq!(press(&mut v, KeyCode::Char(']')), Effect::Redraw);
        assert_eq!(v.app.ui.selected_block, want);
        let (segment, block) = v.selected_block().expect("a block");
        assert_eq!(block.address, segment.address, "the segment's first block");
    }
    // From inside a segment, [ goes to its first block, then to the one
    // before; from a first block, to the one before.
    let multi = firsts
        .windows(2)
        .find(|w| w[1] - w[0] > 1)
        .map(|w| w[0])
        .expect("a segment of more than one block");
    while v.app.ui.selected_block != multi + 1 {
        let before = v.app.ui.selected_block;
        press(
            &mut v,
            if before < multi + 1 {
                KeyCode::Down
            } else {
                KeyCode::Up
            },
        );
        assert_ne!(v.app.ui.selected_block, before, "↑/↓ move");
    }
    press(&mut v, KeyCode::Char('['));
    assert_eq!(v.app.ui.selected_block, multi);
    press(&mut v, KeyCode::Char('['));
    let before = firsts.iter().copied().filter(|&f| f < multi).max();
    assert_eq!(v.app.ui.selected_block, before.unwrap_or(multi));
    // At either end the key says so and the selection stays.
    press(&mut v, KeyCode::Home);
    for _ in 0..firsts.len() + 2 {
        press(&mut v, KeyCode::Char('['));
    }
    assert_eq!(v.app.ui.selected_block, 0);
    assert!(
        v.app
            .ui
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("first segment")),
        "{:?}",
        v.app.ui.notice
    );
}

/// The story's pickle with its `annotate` marker renamed to an action this
/// reader does not know: the viewer on its segments stage, the viewer on
/// the whole file, and the file's size.
fn staged_story_with_an_unknown_action() -> (ViewerState, ViewerState, u64) {
    let mut snapshot = story(0);
    let trace = &mut snapshot.device_traces[0];
    let mut marker = trace[0].clone();
    marker.action = TraceAction::Annotate;
    trace.insert(1, marker);
    let bytes = vramtop::snapshot::snapshot_to_bytes(&snapshot);
    let bytes = common::renamed_action(&bytes, "annotate", "teleport");
    staged(&bytes, "newer.pickle")
}

#[test]
fn a_trace_that_lost_entries_of_unknown_actions_opens_saying_so() {
    let (mut stage, full, _) = staged_story_with_an_unknown_action();
    let said = "1 trace entry left out: unknown actions (teleport)";
    assert_eq!(full.app.ui.notice.as_deref(), Some(said));
    let screen = screen_at(&full, 80, 24);
    assert!(screen.contains(said), "{screen}");
    // Read in stages: said when the trace comes.
    assert_eq!(stage.app.ui.notice, None, "the stage has no trace yet");
    stage.complete_trace(full, &Keymap::default());
    assert_eq!(stage.app.ui.notice.as_deref(), Some(said));
    // A notice answers one key, as any does.
    press(&mut stage, KeyCode::Left);
    assert_eq!(stage.app.ui.notice, None);
    // A file read whole opens without it.
    assert_eq!(story_viewer().app.ui.notice, None);
}

#[test]
fn the_grouping_keys_help_lists_the_groupings_in_the_order_g_cycles() {
    use vramtop::app::viewer::ViewerAction;
    use vramtop::snapshot::sites::Grouping;
    let help = ViewerAction::CycleGrouping.describe();
    let (_, list) = help.split_once(": ").expect("a list after the colon");
    let listed: Vec<&str> = list.split(", ").filter(|n| *n != "…").collect();
    let mut grouping = Grouping::default();
    let cycle: Vec<&str> = Grouping::ALL
        .iter()
        .map(|_| {
            let name = grouping.name();
            grouping = grouping.next();
            name
        })
        .collect();
    assert!(listed.len() >= 2, "{help}");
    assert_eq!(listed, cycle[..listed.len()], "{help}");
}

/// A file whose trace does not lead to its own final state: the model's
/// snapshot, written by the project's writer, with its last allocation
/// recorded free (the trace never frees it). Read back staged, as `open`
/// reads a file: (the segments stage, the whole file, its size).
fn self_contradictory() -> (ViewerState, ViewerState, u64) {
    let mut m = model(0);
    let _a = m.malloc(30 * MIB, 0).expect("fits");
    let b = m.malloc(4 * MIB, 0).expect("fits");
    let _c = m.malloc(30 * MIB, 0).expect("fits");
    let mut snapshot = snapshot_of(&m, 0);
    let segment = snapshot
        .segments
        .iter_mut()
        .find(|s| s.address == b)
        .expect("b alone in its segment");
    let mut free = segment.blocks[0].clone();
    free.size = segment.total_size;
    free.state = vramtop::alloc::BlockState::Inactive;
    segment.blocks = vec![free];
    (segment.allocated_size, segment.active_size) = (Some(0), Some(0));
    segment.requested_size = Some(0);
    staged(
        &vramtop::snapshot::snapshot_to_bytes(&snapshot),
        "contradictory.pickle",
    )
}

/// Addresses, sizes and states of the shown blocks.
fn shown_blocks(v: &ViewerState) -> Vec<(u64, u64, vramtop::alloc::BlockState)> {
    v.segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| (b.address, b.size, b.state))
        .collect()
}

#[test]
fn end_on_a_file_its_trace_does_not_lead_to_shows_the_files_state_and_says_so() {
    let (mut stage, full, total) = self_contradictory();
    let recorded = shown_blocks(&stage);
    let n = full.device().expect("one device").len();
    stage.set_trace_read(total);
    stage.complete_trace(full, &Keymap::default());
    let mut v = stage;
    assert_eq!(v.cursor(), n);
    assert_eq!(
        shown_blocks(&v),
        recorded,
        "the trace's arrival keeps the file's own state on screen"
    );
    press(&mut v, KeyCode::Left);
    assert_ne!(shown_blocks(&v), recorded, "the trace's own moment");
    assert_eq!(v.end_mismatch_here(), None, "said at the end only");
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::End);
    assert_eq!(shown_blocks(&v), recorded, "End: what the file records");
    let mismatch = v.end_mismatch_here().expect("the trace leads elsewhere");
    assert_eq!((mismatch.blocks, mismatch.segments), (1, 0));
    let status = vramtop::ui::status_text(&v);
    assert!(
        status.contains("the trace does not lead to the file's final state: 1 block differs"),
        "{status}"
    );
    // At 80 columns the words stay, shorter, with the event number.
    let narrow = vramtop::ui::status_text_within(&v, 80);
    assert!(narrow.starts_with(&format!("event {n}/{n}")), "{narrow}");
    assert!(narrow.contains("1 block differs"), "{narrow}");
    assert!(narrow.chars().count() <= 80, "{narrow}");
    // A consistent file says nothing of the kind.
    let v = story_viewer();
    assert_eq!(v.end_mismatch_here(), None);
    assert!(!vramtop::ui::status_text(&v).contains("does not lead"));
}

#[test]
fn a_step_that_changes_the_selected_site_moves_the_block_selection_with_it() {
    let Some(mut v) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    press(&mut v, KeyCode::Char('P'));
    press(&mut v, KeyCode::Char('w'));
    let at_peak = v.selected_site().expect("a site at the peak").key.clone();
    let (_, block) = v.selected_block().expect("a block");
    assert!(v.highlighted().binary_search(&block.address).is_ok());
    press(&mut v, KeyCode::End);
    let site = v.selected_site().expect("a site at the end");
    assert_ne!(site.key, at_peak, "the peak's site is gone at the end");
    let (_, block) = v.selected_block().expect("a block");
    assert!(
        v.highlighted().binary_search(&block.address).is_ok(),
        "the selected block {:#x} ({:?}) is one of the selected site's",
        block.address,
        block.state
    );
}

#[test]
fn x_in_the_open_sites_pane_words_its_notice_for_what_is_open() {
    let Some(mut v) = shared("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle") else {
        return;
    };
    // The pane open, no site expanded: only Enter is left to do.
    press(&mut v, KeyCode::Char('w'));
    assert!(v.sites_open && !v.site_expanded);
    press(&mut v, KeyCode::Char('x'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(
        said,
        "x: C++ frames now listed in expanded sites (Enter expands the selected one)"
    );
    // A site without a stack expanded: nothing to expand, no pane to open.
    let no_stack = v
        .sites
        .as_ref()
        .and_then(|s| s.sites.iter().position(|s| s.key.is_no_stack()))
        .expect("a site without a stack");
    for _ in 0..no_stack {
        press(&mut v, KeyCode::Down);
    }
    press(&mut v, KeyCode::Enter);
    assert!(v.site_expanded);
    press(&mut v, KeyCode::Char('x'));
    let said = v.app.ui.notice.clone().unwrap_or_default();
    assert_eq!(
        said,
        "x: C++ frames now counted in expanded sites; this one has no stack recorded, the \
         others show it"
    );
}

/// The hints of the viewer's status line, as drawn from the keymap.
fn hints(v: &ViewerState) -> Vec<(&'static str, &'static str)> {
    Keymap::default().viewer_hints_offered(v.sites_take_keys(), |a| v.hinted(a))
}

#[test]
fn hints_offer_only_the_moves_that_go_somewhere_from_the_cursor() {
    let mut v = story_viewer();
    // At the end: nothing ahead, so the back keys in the forward ones' place.
    let end = hints(&v);
    for h in [
        ("←", "event"),
        ("PgUp", "page"),
        ("Home", "start"),
        ("O", "OOM"),
        ("N", "segment"),
        ("E", "empty_cache"),
    ] {
        assert!(end.contains(&h), "{h:?} in {end:?}");
    }
    for k in ["→", "PgDn", "o", "n", "e"] {
        assert!(end.iter().all(|h| h.0 != k), "{k} in {end:?}");
    }
    // At the start: only forward, and no Home.
    press(&mut v, KeyCode::Home);
    let start = hints(&v);
    for h in [("→", "event"), ("PgDn", "page"), ("o", "OOM")] {
        assert!(start.contains(&h), "{h:?} in {start:?}");
    }
    for k in ["←", "PgUp", "Home", "O", "N", "E"] {
        assert!(start.iter().all(|h| h.0 != k), "{k} in {start:?}");
    }
    // One step in, the moves are the same: forward hints hold while
    // anything lies ahead, so stepping does not make them flicker. (The
    // map, empty before the first event, now has a block to show.)
    assert!(start.iter().all(|h| h.0 != "Enter"), "{start:?}");
    press(&mut v, KeyCode::Right);
    let stepped = hints(&v);
    assert!(stepped.contains(&("Enter", "block")), "{stepped:?}");
    let moves: Vec<_> = stepped.into_iter().filter(|h| h.0 != "Enter").collect();
    assert_eq!(moves, start);
    // At the only OOM neither OOM key goes anywhere (`O` goes to one
    // before this event); past it the OOM key turns back, the others stay.
    press(&mut v, KeyCode::Char('o'));
    let at = hints(&v);
    assert!(at.iter().all(|h| h.1 != "OOM"), "{at:?}");
    press(&mut v, KeyCode::Right);
    let after = hints(&v);
    assert!(after.contains(&("O", "OOM")), "{after:?}");
    assert!(after.contains(&("→", "event")), "{after:?}");
}

#[test]
fn hints_leave_out_jumps_to_marks_the_trace_has_none_of() {
    let mut v = viewer_without_marks();
    for at in [KeyCode::End, KeyCode::Home] {
        press(&mut v, at);
        let h = hints(&v);
        for k in ["o", "O", "e", "E"] {
            assert!(h.iter().all(|h| h.0 != k), "{k} in {h:?}");
        }
    }
}

#[test]
fn page_and_end_keys_with_nowhere_to_go_say_why() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::PageDown);
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("at the last event; Home goes to the start")
    );
    press(&mut v, KeyCode::End);
    assert!(
        v.app
            .ui
            .notice
            .as_deref()
            .is_some_and(|n| n.starts_with("at the last event"))
    );
    press(&mut v, KeyCode::Home);
    assert_eq!(v.app.ui.notice, None, "Home moved");
    for k in [KeyCode::PageUp, KeyCode::Home] {
        press(&mut v, k);
        assert_eq!(
            v.app.ui.notice.as_deref(),
            Some("at the start, before the first event; End goes to the last"),
            "{k:?}"
        );
    }
}

#[test]
fn a_trace_that_frees_everything_says_so_at_its_end_and_where_the_peak_is() {
    let mut m = model(0);
    m.set_time_us(1000);
    let a = m.malloc(300 * MIB, 0).expect("fits");
    m.set_time_us(2000);
    m.free(a).expect("live");
    m.set_time_us(3000);
    m.empty_cache();
    let mut v = ViewerState::new("freed.pickle".to_string(), snapshot_of(&m, 0));
    let screen = |v: &ViewerState| {
        let theme = vramtop::ui::Theme::colored();
        let backend = ratatui::backend::TestBackend::new(80, 24);
        let mut t = ratatui::Terminal::new(backend).expect("tb");
        t.draw(|f| {
            vramtop::ui::render_viewer(f.area(), f.buffer_mut(), v, &Keymap::default(), &theme)
        })
        .expect("draws");
        t.backend().to_string()
    };
    let end = screen(&v);
    assert!(
        end.contains("nothing reserved at the last event (all freed); P goes to the peak"),
        "{end}"
    );
    press(&mut v, KeyCode::Home);
    let start = screen(&v);
    assert!(
        start.contains("nothing reserved at this point of the trace"),
        "{start}"
    );
}

#[test]
fn compare_is_not_offered_until_both_marks_are_set_and_says_why_when_pressed() {
    use vramtop::app::viewer::ViewerAction as V;
    let mut v = story_viewer();
    let offered = |v: &ViewerState| hints(v).contains(&("c", "A/B"));
    assert!(!offered(&v), "{:?}", hints(&v));
    assert_eq!(v.unavailable(V::Compare), Some("mark A and B first"));
    // Pressed anyway, it says which key marks what.
    press(&mut v, KeyCode::Char('c'));
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("c compares A and B: m marks A, M marks B (neither is marked)")
    );
    press(&mut v, KeyCode::Char('m'));
    assert!(!offered(&v), "A alone: {:?}", hints(&v));
    assert_eq!(v.unavailable(V::Compare), Some("mark B first"));
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('M'));
    assert!(offered(&v), "{:?}", hints(&v));
    assert_eq!(v.unavailable(V::Compare), None);
    press(&mut v, KeyCode::Char('c'));
    assert!(v.compare.is_some());
}

#[test]
fn segment_keys_are_not_offered_where_no_segment_lies_that_way() {
    use vramtop::app::viewer::ViewerAction as V;
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    assert!(v.segments.is_empty(), "nothing before the first event");
    for a in [V::NextSegment, V::PrevSegment] {
        assert_eq!(
            v.unavailable(a),
            Some("the segment map is empty here"),
            "{a:?}"
        );
    }
    // Where the map has more than one segment: from its first block `[`
    // has nowhere to go, from the last segment `]` has none.
    let mut more = false;
    for _ in 0..v.device().map_or(0, |d| d.len()) {
        press(&mut v, KeyCode::Right);
        if v.segments.iter().filter(|s| !s.blocks.is_empty()).count() > 1 {
            more = true;
            break;
        }
    }
    assert!(more, "the story has two segments at once");
    v.app.ui.selected_block = 0;
    assert_eq!(
        v.unavailable(V::PrevSegment),
        Some("the first segment of the map is selected")
    );
    assert_eq!(v.unavailable(V::NextSegment), None);
    press(&mut v, KeyCode::Char('['));
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("the first segment of the map is selected")
    );
    while v.offers(V::NextSegment) {
        let before = v.app.ui.selected_block;
        press(&mut v, KeyCode::Char(']'));
        assert!(v.app.ui.selected_block > before, "`]` moved on");
    }
    assert_eq!(
        v.unavailable(V::NextSegment),
        Some("the last segment of the map is selected")
    );
    assert_eq!(v.unavailable(V::PrevSegment), None);
}

#[test]
fn block_detail_keys_at_the_ends_of_the_map_say_why_they_do_not_move() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let n: usize = v.segments.iter().map(|s| s.blocks.len()).sum();
    assert!(n > 1, "more than one block: {n}");
    let first = v.selected_address;
    assert_eq!(press(&mut v, KeyCode::Up), Effect::Redraw);
    assert_eq!(v.selected_address, first);
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("at the first block of the map; ↓ goes to the next")
    );
    assert!(!v.detail_blocks().up && v.detail_blocks().down);
    for _ in 1..n {
        press(&mut v, KeyCode::Down);
    }
    assert_eq!(v.app.ui.selected_block, n - 1);
    let last = v.selected_address;
    press(&mut v, KeyCode::Down);
    assert_eq!(v.selected_address, last);
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("at the last block of the map; ↑ goes to the previous")
    );
    assert!(v.detail_blocks().up && !v.detail_blocks().down);
}

#[test]
fn a_filter_over_no_segments_at_all_says_the_allocator_holds_no_memory() {
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('s'));
    assert_eq!(v.stream_filter, Some(0));
    assert!(v.segments.is_empty());
    let screen = screen_of(&v);
    assert!(
        screen.contains("no segments: the allocator holds no memory"),
        "{screen}"
    );
    assert!(!screen.contains("match the filter"), "{screen}");
    assert!(!screen.contains("cycle the filter"), "{screen}");
}

#[test]
fn a_short_status_line_drops_the_peaks_elsewhere_before_the_events_time() {
    use vramtop::ui::{status_text, status_text_within};
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Right);
    press(&mut v, KeyCode::Right);
    let full = status_text(&v);
    let parts: Vec<&str> = full.split(" · ").collect();
    let time = parts
        .iter()
        .find(|p| p.starts_with("t+"))
        .expect("the event's time");
    let stream = parts
        .iter()
        .find(|p| p.starts_with("stream "))
        .expect("its stream");
    assert!(
        parts.iter().any(|p| p.contains('@')),
        "peaks elsewhere: {full}"
    );
    // Room for all but the stream and the time: the peaks (which the GPUs
    // row shows) went instead of the time, and the time took their room.
    let width = full.chars().count() - stream.chars().count() - time.chars().count() - 6;
    let line = status_text_within(&v, width);
    assert!(line.contains(time), "{line}");
    assert!(!line.contains('@'), "{line}");
}

#[test]
fn while_the_trace_is_read_the_hints_name_only_keys_that_act_then() {
    let (mut stage, full, _) = staged_story();
    let waiting = hints(&stage);
    // The stage shows the final state: no step forward from there, no
    // OOM to go to yet, nothing marked to compare.
    for word in ["event", "OOM", "A/B", "mark A", "page", "segment", "peak"] {
        assert!(waiting.iter().all(|h| h.1 != word), "{word} in {waiting:?}");
    }
    for h in [("q", "quit"), ("?", "help"), ("w", "sites")] {
        assert!(waiting.contains(&h), "{h:?} in {waiting:?}");
    }
    // Once read, the moves from the end come.
    stage.complete_trace(full, &Keymap::default());
    let read = hints(&stage);
    assert!(read.contains(&("←", "event")), "{read:?}");
}

/// A loop of three iterations, each a 100 MiB allocation and its free,
/// with a `snapshot` entry after each (PyTorch records one each time a
/// snapshot is taken: once per step in a loop that snapshots) and an
/// `annotate` entry after the second. Returns the file and the cursors
/// just after each marker entry.
fn iterations() -> (Snapshot, Vec<usize>) {
    let mut m = model(0);
    let mut ends = Vec::new();
    for i in 0..3u64 {
        m.set_time_us(1000 * (i + 1));
        let a = m.malloc(100 * MIB, 0).expect("fits");
        m.free(a).expect("live");
        ends.push(m.trace().count());
    }
    let mut snapshot = snapshot_of(&m, 0);
    let trace = &mut snapshot.device_traces[0];
    let template = trace[0].clone();
    // From the last, so the earlier positions hold.
    let mut cursors = Vec::new();
    for (k, &end) in ends.iter().enumerate().rev() {
        let mut marker = template.clone();
        marker.action = TraceAction::Snapshot;
        trace.insert(end, marker);
        if k == 1 {
            let mut note = template.clone();
            note.action = TraceAction::Annotate;
            trace.insert(end + 1, note);
        }
    }
    for (i, e) in trace.iter().enumerate() {
        if matches!(e.action, TraceAction::Snapshot | TraceAction::Annotate) {
            cursors.push(i + 1);
        }
    }
    (snapshot, cursors)
}

#[test]
fn i_and_shift_i_jump_between_the_snapshot_and_annotate_entries() {
    let (snapshot, markers) = iterations();
    assert_eq!(markers.len(), 4, "three snapshots and an annotation");
    let mut v = ViewerState::new("loop.pickle".to_string(), snapshot);
    press(&mut v, KeyCode::Home);
    assert!(hints(&v).contains(&("i", "marker")), "{:?}", hints(&v));
    for &at in &markers {
        press(&mut v, KeyCode::Char('i'));
        assert_eq!(v.cursor(), at);
        assert!(matches!(
            v.current_event().map(|e| e.action),
            Some(TraceAction::Snapshot | TraceAction::Annotate)
        ));
    }
    press(&mut v, KeyCode::Char('i'));
    assert_eq!(v.cursor(), markers[3], "none after the last");
    assert_eq!(
        v.app.ui.notice.as_deref(),
        Some("no snapshot/annotate entry after this event")
    );
    // Past the last marker the back key takes the forward one's place.
    assert!(hints(&v).contains(&("I", "marker")), "{:?}", hints(&v));
    press(&mut v, KeyCode::Char('I'));
    assert_eq!(v.cursor(), markers[2]);
    // A trace without any says so, and the help says why the keys rest.
    let mut plain = viewer_without_marks();
    press(&mut plain, KeyCode::Char('i'));
    assert_eq!(
        plain.app.ui.notice.as_deref(),
        Some("no snapshot/annotate entry in this trace")
    );
    assert!(hints(&plain).iter().all(|h| h.1 != "marker"));
}

#[test]
fn the_timeline_marks_the_snapshot_and_annotate_entries_and_its_legend_counts_them() {
    let (snapshot, _) = iterations();
    let mut v = ViewerState::new("loop.pickle".to_string(), snapshot);
    press(&mut v, KeyCode::Home);
    let screen = screen_at(&v, 120, 40);
    assert!(screen.contains("╎ snapshot/annotate ×4"), "{screen}");
    // Every marker's column: the glyph stands in the chart's rows too.
    let marked_rows = screen
        .lines()
        .filter(|l| !l.contains("snapshot/annotate") && l.contains('╎'))
        .count();
    assert!(marked_rows >= 3, "{screen}");
    // None in a trace without them.
    let plain = screen_at(&viewer_without_marks(), 120, 40);
    assert!(!plain.contains('╎'), "{plain}");
}

#[test]
fn a_mark_under_the_cursor_still_shows_in_the_cursors_column() {
    use ratatui::style::Modifier;
    let mut v = story_viewer();
    press(&mut v, KeyCode::Home);
    press(&mut v, KeyCode::Char('e'));
    let theme = vramtop::ui::Theme::colored();
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 40)).expect("tb");
    t.draw(|f| {
        vramtop::ui::render_viewer(f.area(), f.buffer_mut(), &v, &Keymap::default(), &theme)
    })
    .expect("draws");
    let buf = t.backend().buffer();
    let cells: Vec<_> = buf.content().iter().collect();
    // The story's one empty_cache point is where the cursor stands: its
    // glyph was all covered by the cursor's. It is drawn in the cursor's
    // column, reversed (the cursor's colours as its background).
    let columns: Vec<usize> = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.symbol() == "┊" && c.modifier.contains(Modifier::REVERSED))
        .map(|(i, _)| i % 120)
        .collect();
    assert!(columns.len() >= 10, "{}", t.backend());
    let x = columns[0];
    assert!(columns.iter().all(|&c| c == x), "one column: {columns:?}");
    assert!(
        cells
            .iter()
            .enumerate()
            .all(|(i, c)| i % 120 != x || c.symbol() != "▌"),
        "the whole column is the mark's: {}",
        t.backend()
    );
    // One step on, the cursor leaves it: the mark plain, the cursor its own.
    press(&mut v, KeyCode::Right);
    t.draw(|f| {
        vramtop::ui::render_viewer(f.area(), f.buffer_mut(), &v, &Keymap::default(), &theme)
    })
    .expect("draws");
    let cells: Vec<_> = t.backend().buffer().content().iter().collect();
    assert!(cells.iter().any(|c| c.symbol() == "▌"));
    assert!(
        cells
            .iter()
            .all(|c| !(c.symbol() == "┊" && c.modifier.contains(Modifier::REVERSED)))
    );
}

#[test]
fn the_viewers_help_does_not_offer_the_dashboards_zoom_keys() {
    let rows = Keymap::default().viewer_help_rows_bound();
    for (keys, what, action) in &rows {
        let keys: Vec<&str> = keys.split(' ').collect();
        // The viewer's own `z` zooms the y-axis: not the dashboard's
        // time window.
        let own_zoom = *action == Some(ViewerAction::ToggleZoom);
        assert!(
            !keys.contains(&"+") && !keys.contains(&"-") && (own_zoom || !what.contains("zoom")),
            "{keys:?} {what}"
        );
    }
}

#[test]
fn z_zooms_the_timeline_of_a_band_above_0_b_and_back_and_says_why_where_it_cannot() {
    let Some(mut v) = shared("silmont_fwd_fp32_128.pickle") else {
        return;
    };
    assert_eq!(v.timeline_zoom(), None, "it opens from 0 B");
    assert_eq!(press(&mut v, KeyCode::Char('z')), Effect::Redraw);
    let z = v
        .timeline_zoom()
        .expect("allocated 500…534 MiB, reserved 582 MiB");
    assert_eq!((z.exp, z.bottom, z.top), (2, 490.0, 590.0));
    assert_eq!(v.app.ui.notice, None);
    // The cursor moves under the zoom; the range is the trace's, not the
    // cursor's.
    press(&mut v, KeyCode::Home);
    assert_eq!(v.timeline_zoom(), Some(z));
    assert_eq!(press(&mut v, KeyCode::Char('z')), Effect::Redraw);
    assert_eq!(v.timeline_zoom(), None, "z again goes back to 0 B");

    // A trace from an empty allocator reaches 0 B: nothing to zoom.
    let mut story = story_viewer();
    press(&mut story, KeyCode::Char('z'));
    assert_eq!(story.timeline_zoom(), None);
    assert_eq!(
        story.app.ui.notice.as_deref(),
        Some("z: the timeline reaches down to 0 B already")
    );
    // A file without a trace: none to zoom into.
    let Some(mut bare) = shared("muduard_dump_snapshot_c.pickle") else {
        return;
    };
    press(&mut bare, KeyCode::Char('z'));
    assert_eq!(bare.timeline_zoom(), None);
    assert_eq!(
        bare.app.ui.notice.as_deref(),
        Some("no trace in this file (its final state only): nothing to zoom into")
    );
}

#[test]
fn below_the_smallest_terminal_the_viewers_keys_do_nothing_but_quit() {
    let mut v = story_viewer();
    let before = v.cursor();
    // As the viewer's loop tells it on a 20×5 terminal (its drawing does
    // the same).
    v.app.ui.screen.set(Some((20, 5)));
    for code in [
        KeyCode::Home,
        KeyCode::Right,
        KeyCode::Char('?'),
        KeyCode::Tab,
        KeyCode::Enter,
    ] {
        assert_eq!(press(&mut v, code), Effect::None, "{code:?}");
    }
    assert_eq!(v.cursor(), before, "the cursor did not move unseen");
    assert_eq!(v.app.ui.overlay, Overlay::None);
    assert!(!v.detail_open);
    assert_eq!(press(&mut v, KeyCode::Char('q')), Effect::Quit);
    // Grown, the keys act again.
    v.app.ui.screen.set(Some((80, 24)));
    assert_eq!(press(&mut v, KeyCode::Home), Effect::Redraw);
    assert_ne!(v.cursor(), before);
}

#[test]
fn open_at_puts_every_gpus_cursor_where_the_summarys_at_lists_the_sites() {
    use std::num::NonZeroUsize;
    use std::sync::Arc;
    use vramtop::snapshot::peak::At;
    use vramtop::snapshot::sites::Grouping;
    use vramtop::snapshot::summary::sites_report_at;
    let mut two = story(0);
    let b = story(1);
    two.segments.extend(b.segments);
    two.device_traces = vec![two.device_traces[0].clone(), b.device_traces[1].clone()];
    let mut files = vec![("story", story(0)), ("two", two)];
    if let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") {
        let s = vramtop::snapshot::read_snapshot_file(&path).expect("loads");
        files.push(("silmont", s));
    }
    let first = At::Mark(NonZeroUsize::MIN);
    let moments = [
        At::Start,
        At::Peak,
        At::End,
        At::Oom,
        first,
        At::LastMark,
        At::Event(3),
        At::Event(1_000_000),
    ];
    let mut moved = 0;
    for (name, snapshot) in files {
        for at in moments {
            let summary = sites_report_at(&Arc::new(snapshot.clone()), Grouping::default(), 5, at);
            let mut v = ViewerState::new(name.to_string(), snapshot.clone());
            match (summary, v.start_at(at)) {
                (Ok(report), Ok(())) => {
                    for d in &report.sites {
                        let i = v
                            .scrub
                            .devices
                            .iter()
                            .position(|s| s.device == d.device)
                            .expect("the summary's GPU is the viewer's");
                        let Some(c) = &d.at_cursor else { continue };
                        assert_eq!(c.sites.cursor, Some(v.cursors[i]), "{name} {at}");
                        moved += usize::from(v.cursors[i] != v.scrub.devices[i].len());
                    }
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name} {at}"),
                (a, b) => panic!("{name} {at}: summary {a:?}, viewer {b:?}"),
            }
        }
    }
    assert!(moved > 0, "some moment is not the end");
}

#[test]
fn open_at_oom_starts_on_the_oom_and_an_at_past_the_end_moves_nothing() {
    use vramtop::snapshot::peak::At;
    let mut v = ViewerState::new("story.pickle".to_string(), story(0));
    let end = v.cursor();
    v.start_at(At::Oom).expect("the story has an OOM");
    let oom = v.cursor();
    assert!(oom < end, "{oom} of {end}");
    assert_eq!(
        v.scrub.devices[0].events()[oom - 1].action,
        TraceAction::Oom,
        "just after the OOM event"
    );
    let mut v = ViewerState::new("story.pickle".to_string(), story(0));
    let e = v.start_at(At::Event(end + 1)).expect_err("past the end");
    assert!(
        e.to_string().contains("is past the end of GPU 0's trace"),
        "{e}"
    );
    assert_eq!(v.cursor(), end);
}

/// The viewer on the probe's stand-in training run out of memory
/// (tests/fixtures/standin-oom.pickle), opened at its OOM as `open FILE
/// --at oom` and the dashboard's `O` open it: the sites pane open.
fn standin_at_oom() -> ViewerState {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/standin-oom.pickle"
    );
    let snapshot = vramtop::snapshot::read_snapshot_file(std::path::Path::new(path))
        .expect("the fixture loads");
    let mut v = ViewerState::new("standin-oom.pickle".to_string(), snapshot);
    v.open_at_oom(&Keymap::default());
    assert!(v.at_oom() && v.sites_open);
    v
}

#[test]
fn at_an_oom_with_the_sites_open_up_selects_the_oom_row_and_enter_shows_its_stack() {
    let mut v = standin_at_oom();
    // Opened on the first site, as before: its blocks highlighted.
    assert!(v.sites_oom_row());
    assert!(!v.sites_oom_selected);
    let first = v.selected_site().cloned().expect("a site is selected");
    assert_eq!(v.selected_site, 0);
    assert_eq!(v.highlighted(), first.addresses.as_slice());
    // ↑ from the first site: the OOM row, no site (nothing highlighted).
    assert_eq!(press(&mut v, KeyCode::Up), Effect::Redraw);
    assert!(v.sites_oom_selected);
    assert!(v.selected_site().is_none() && v.highlighted().is_empty());
    assert_eq!(press(&mut v, KeyCode::Up), Effect::None, "nothing above it");
    // Enter: the same OOM detail as Enter with the pane closed.
    let mut closed = standin_at_oom();
    press(&mut closed, KeyCode::Char('w'));
    press(&mut closed, KeyCode::Enter);
    assert!(closed.detail_open && closed.detail_oom);
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open && v.detail_oom, "the OOM's detail");
    assert!(!v.site_expanded, "no site expanded");
    let lines = |v: &ViewerState| -> Vec<String> {
        vramtop::ui::detail_lines(v, 76)
            .iter()
            .map(|l| l.to_string())
            .collect()
    };
    let detail = lines(&v).join("\n");
    assert!(
        detail.contains("asked by      standin_train.py:72 step"),
        "{detail}"
    );
    assert!(
        detail.contains("python/tests/standin_train.py:101 main"),
        "{detail}"
    );
    assert_eq!(lines(&v), lines(&closed));
    // Esc: back in the pane, on the OOM row.
    press(&mut v, KeyCode::Esc);
    assert!(!v.detail_open && !v.detail_oom);
    assert!(v.sites_open && v.sites_oom_selected);
    // ↓: the first site again, its blocks highlighted, its block selected;
    // Enter expands it, as ever.
    assert_eq!(press(&mut v, KeyCode::Down), Effect::Redraw);
    assert!(!v.sites_oom_selected);
    assert_eq!(v.selected_site().map(|s| &s.key), Some(&first.key));
    assert_eq!(v.highlighted(), first.addresses.as_slice());
    assert!(
        v.selected_address
            .is_some_and(|a| first.addresses.binary_search(&a).is_ok()),
        "the block selection follows the site"
    );
    press(&mut v, KeyCode::Enter);
    assert!(v.site_expanded && !v.detail_open);
    // Expanded, ↑ scrolls the site's stack: the OOM row is reached after Esc.
    press(&mut v, KeyCode::Up);
    assert!(!v.sites_oom_selected);
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Up);
    assert!(v.sites_oom_selected);
}

#[test]
fn the_oom_row_goes_with_the_oom_and_regrouping_keeps_it_selected() {
    let mut v = standin_at_oom();
    let sites = v.sites.as_ref().map_or(0, |s| s.sites.len());
    assert!(sites >= 2, "{sites} sites");
    // ↓ then ↑ ↑ passes through the sites to the OOM row.
    press(&mut v, KeyCode::Down);
    assert_eq!(v.selected_site, 1);
    press(&mut v, KeyCode::Up);
    assert!(!v.sites_oom_selected && v.selected_site == 0);
    press(&mut v, KeyCode::Up);
    assert!(v.sites_oom_selected);
    // `g` regroups the sites under it and leaves the row selected.
    let grouping = v.grouping;
    press(&mut v, KeyCode::Char('g'));
    assert_ne!(v.grouping, grouping);
    assert!(v.sites_oom_selected && v.highlighted().is_empty());
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_oom, "Enter still shows the stack");
    press(&mut v, KeyCode::Esc);
    // One event back there is no OOM and no row: the first site is selected.
    press(&mut v, KeyCode::Left);
    assert!(!v.at_oom() && !v.sites_oom_row());
    assert!(!v.sites_oom_selected);
    assert!(v.selected_site().is_some());
    press(&mut v, KeyCode::Up);
    assert!(!v.sites_oom_selected, "↑ on the first site selects no row");
    // Back on the OOM the row is there, the first site selected.
    press(&mut v, KeyCode::Right);
    assert!(v.sites_oom_row() && !v.sites_oom_selected);
    // Closing and reopening the pane starts on the first site.
    press(&mut v, KeyCode::Up);
    assert!(v.sites_oom_selected);
    press(&mut v, KeyCode::Char('w'));
    press(&mut v, KeyCode::Char('w'));
    assert!(!v.sites_oom_selected && v.selected_site().is_some());
}

#[test]
fn a_click_on_the_oom_row_selects_it_and_one_under_it_the_site_drawn_there() {
    use ratatui::layout::Rect;
    use vramtop::shell::click::click_viewer;
    use vramtop::ui::{oom_row_at, site_at, viewer_layout};
    let mut v = standin_at_oom();
    for area in [Rect::new(0, 0, 80, 24), Rect::new(0, 0, 120, 40)] {
        let rect = viewer_layout(area, &v).sites.expect("the sites pane");
        // The title, then the OOM row: the first site is two rows down.
        assert!(oom_row_at(&v, rect, rect.y + 1));
        assert!(!oom_row_at(&v, rect, rect.y) && !oom_row_at(&v, rect, rect.y + 2));
        assert_eq!(site_at(&v, rect, rect.y + 1), None, "the OOM row");
        assert_eq!(site_at(&v, rect, rect.y + 2), Some(0));
        assert_eq!(site_at(&v, rect, rect.y + 3), Some(1));
        assert!(click_viewer(area, &mut v, rect.x + 5, rect.y + 3));
        assert_eq!(v.selected_site, 1);
        // A click on the OOM row selects it, as ↑ from the first site;
        // Enter then shows the stack.
        assert!(click_viewer(area, &mut v, rect.x + 5, rect.y + 1));
        assert!(v.sites_oom_selected && v.highlighted().is_empty());
        assert!(
            !click_viewer(area, &mut v, rect.x + 5, rect.y + 1),
            "no change"
        );
        press(&mut v, KeyCode::Enter);
        assert!(v.detail_oom);
        // Under the detail a click changes nothing.
        assert!(!click_viewer(area, &mut v, rect.x + 5, rect.y + 2));
        press(&mut v, KeyCode::Esc);
        // A click on a site leaves the row.
        assert!(click_viewer(area, &mut v, rect.x + 5, rect.y + 2));
        assert!(!v.sites_oom_selected);
        assert_eq!(v.selected_site().map(|_| v.selected_site), Some(0));
    }
    // Off the OOM there is no row: the first row under the title is a site's.
    press(&mut v, KeyCode::Left);
    let area = Rect::new(0, 0, 80, 24);
    let rect = viewer_layout(area, &v).sites.expect("the sites pane");
    assert!(!oom_row_at(&v, rect, rect.y + 1));
    assert_eq!(site_at(&v, rect, rect.y + 1), Some(0));
}
