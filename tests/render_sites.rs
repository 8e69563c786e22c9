//! The snapshot viewer's sites pane, peaks and A/B comparison on real
//! PyTorch snapshots: key flows through the viewer's own key handling, and
//! whole screens compared with reviewed insta snapshots.

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use vramtop::alloc::TraceAction;
use vramtop::app::keymap::Keymap;
use vramtop::app::viewer::ViewerState;
use vramtop::snapshot::sites::{Grouping, Site};
use vramtop::ui::{Theme, compare_lines, detail_lines, render_viewer, status_text};

use common::screen::text;
use common::shared_viewer as viewer;

const SILMONT: &str = "silmont_mem_snapshot.pickle";
const HYPERION: &str = "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle";
const YIYI: &str = "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle";

fn press(v: &mut ViewerState, code: KeyCode) {
    v.handle_key(&Keymap::default(), KeyEvent::new(code, KeyModifiers::NONE));
}

fn key(v: &mut ViewerState, c: char) {
    press(v, KeyCode::Char(c));
}

fn draw(v: &ViewerState, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| {
            let area = f.area();
            render_viewer(
                area,
                f.buffer_mut(),
                v,
                &Keymap::default(),
                &Theme::colored(),
            );
        })
        .expect("draws");
    terminal
}

fn allocated_now(v: &ViewerState) -> u64 {
    common::allocated_in(&v.segments)
}

#[test]
fn peak_keys_jump_to_the_timeline_maxima_and_the_biggest_allocation() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    let d = v.device().expect("a device");
    let max_alloc = d.points.iter().map(|p| p.allocated).max().expect("points");
    let max_reserved = d.points.iter().map(|p| p.reserved).max().expect("points");
    key(&mut v, 'P');
    let d = v.device().expect("a device");
    assert_eq!(d.points[v.cursor()].allocated, max_alloc);
    key(&mut v, 'R');
    let d = v.device().expect("a device");
    assert_eq!(d.points[v.cursor()].reserved, max_reserved);
    key(&mut v, 'B');
    let e = v.current_event().expect("after an event");
    let biggest = v
        .device()
        .expect("a device")
        .events()
        .iter()
        .filter(|e| e.action == TraceAction::Alloc)
        .map(|e| e.size)
        .max();
    assert_eq!((e.action, Some(e.size)), (TraceAction::Alloc, biggest));
    key(&mut v, 'P');
    let status = status_text(&v);
    assert!(status.contains("peak alloc 3.03 GiB here"), "{status}");
    assert!(status.contains("reserved 3.52 GiB @52"), "{status}");
}

#[test]
fn sites_pane_at_the_peak_adds_up_and_highlights_the_selected_sites_blocks() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let sites = v.sites.clone().expect("the pane is open");
    assert_eq!(sites.allocated, allocated_now(&v));
    assert_eq!(
        sites.sites.iter().map(|s| s.bytes).sum::<u64>(),
        sites.allocated
    );
    // The block selection follows the selected site.
    let (_, b) = v.selected_block().expect("a block");
    assert!(v.highlighted().contains(&b.address));
    press(&mut v, KeyCode::Down);
    assert_eq!(v.selected_site, 1);
    let (_, b) = v.selected_block().expect("a block");
    assert_eq!(
        v.selected_site().map(|s| s.addresses.contains(&b.address)),
        Some(true)
    );
    // Moving the cursor keeps the pane and recomputes it.
    press(&mut v, KeyCode::End);
    let at_end = v.sites.as_ref().expect("still open");
    assert_eq!(at_end.allocated, allocated_now(&v));
    press(&mut v, KeyCode::Esc);
    assert!(!v.sites_open && v.sites.is_none());
}

#[test]
fn sites_pane_at_the_peak_120x40() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("Sites"), "{screen}");
    assert!(
        screen.contains("trace_peak_memory.py:7 custom_softmax"),
        "{screen}"
    );
    insta::assert_snapshot!("sites_peak_120x40", t.backend());
}

#[test]
fn expanded_site_shows_its_python_stack_and_blocks_and_cpp_on_demand() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    // The softmax site (a user frame) is second at the peak.
    let at = v
        .sites
        .as_ref()
        .and_then(|s| {
            s.sites
                .iter()
                .position(|s| s.label.contains("custom_softmax"))
        })
        .expect("the softmax site");
    for _ in 0..at {
        press(&mut v, KeyCode::Down);
    }
    press(&mut v, KeyCode::Enter);
    assert!(v.site_expanded);
    assert!(
        !v.detail_open,
        "Enter expands the site, not the block detail"
    );
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("trace_peak_memory.py:19"), "{screen}");
    assert!(screen.contains("18 C++ frames hidden"), "{screen}");
    insta::assert_snapshot!("sites_expanded_120x40", t.backend());
    key(&mut v, 'x');
    let site = v.selected_site().expect("selected").clone();
    let lines = vramtop::ui::site_detail_lines(&v, &Keymap::default(), &site, 118).join("\n");
    assert!(lines.contains("(C++)") || lines.contains(".cpp"), "{lines}");
    assert!(!lines.contains("unwind::unwind"), "{lines}");
    assert!(!lines.contains("CachingAllocator"), "{lines}");
}

#[test]
fn grouping_key_cycles_every_mode_and_sums_stay_equal() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let mut seen = Vec::new();
    for _ in 0..Grouping::ALL.len() {
        seen.push(v.grouping);
        let s = v.sites.as_ref().expect("open");
        assert_eq!(s.grouping, v.grouping);
        assert_eq!(
            s.sites.iter().map(|s| s.bytes).sum::<u64>(),
            allocated_now(&v)
        );
        key(&mut v, 'g');
    }
    assert_eq!(seen, Grouping::ALL.to_vec());
    assert_eq!(v.grouping, Grouping::UserFrame);
    for g in [Grouping::Function, Grouping::Stack] {
        while v.grouping != g {
            key(&mut v, 'g');
        }
        let t = draw(&v, 120, 40);
        let name = format!("sites_by_{g:?}_120x40").to_lowercase();
        insta::assert_snapshot!(name, t.backend());
    }
}

#[test]
fn regrouping_keeps_the_selected_and_expanded_site_on_the_same_frame() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Enter);
    let label = |v: &ViewerState| v.selected_site().map(|s| s.label.clone());
    let softmax = "trace_peak_memory.py:7 custom_softmax";
    assert_eq!(label(&v).as_deref(), Some(softmax));
    let blocks = v.highlighted().to_vec();
    key(&mut v, 'g');
    assert_eq!(v.grouping, Grouping::PythonFrame);
    assert_eq!(
        label(&v).as_deref(),
        Some(softmax),
        "the Python frame of the same stack, not the first row"
    );
    assert!(v.site_expanded, "still expanded");
    assert!(
        v.selected_site.ne(&0),
        "custom_softmax is not the first row"
    );
    assert_eq!(v.highlighted(), blocks.as_slice(), "the same blocks");
    // By file:line the line is the same site again; by function it is
    // the function holding that line.
    key(&mut v, 'g');
    assert_eq!(v.grouping, Grouping::FileLine);
    let by_line = label(&v).unwrap_or_default();
    assert!(by_line.starts_with("trace_peak_memory.py:7"), "{by_line}");
    key(&mut v, 'g');
    let by_function = label(&v).unwrap_or_default();
    assert!(by_function.contains("custom_softmax"), "{by_function}");
    assert!(v.site_expanded);
}

#[test]
fn regrouping_keeps_the_selected_block_inside_the_selected_site_in_every_grouping() {
    // One user-frame site with several caller paths: finer groupings split
    // it, and the selected site must stay the one holding the selected
    // block (the block detail and the site's stack agree).
    let Some(mut v) = viewer(YIYI) else {
        return;
    };
    key(&mut v, 'w');
    let block_in_site = |v: &ViewerState| {
        let (_, b) = v.selected_block().expect("a block");
        v.highlighted().binary_search(&b.address).is_ok()
    };
    assert!(block_in_site(&v), "on opening");
    let first = v.selected_block().map(|(_, b)| b.address);
    for step in 1..=5 {
        key(&mut v, 'g');
        assert!(
            block_in_site(&v),
            "after {step} presses of g ({:?}): the block is not in {:?}",
            v.grouping,
            v.selected_site().map(|s| s.label.clone())
        );
    }
    // Back at the first grouping the same block is still selected: a
    // regroup moves the site to the block, not the block away.
    assert_eq!(v.selected_block().map(|(_, b)| b.address), first);
}

#[test]
fn no_stack_group_says_why_on_a_trace_that_starts_mid_run() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    // At the end, the blocks without a stack are in the file's final
    // state without one: allocated while history was off.
    key(&mut v, 'w');
    let top = v.selected_site().expect("a site").clone();
    assert!(top.key.is_no_stack(), "{}", top.label);
    assert!(top.label.contains("allocated while history was off"));
    // At the peak, more blocks have none: those alive before the trace
    // and freed in it, whose stacks the trace does not hold.
    key(&mut v, 'P');
    let labels: Vec<String> = v
        .sites
        .as_ref()
        .map(|s| s.sites.iter().map(|s| s.label.clone()).collect())
        .unwrap_or_default();
    let lost = labels
        .iter()
        .position(|l| l.contains("allocated before the trace began"))
        .unwrap_or_else(|| panic!("{labels:?}"));
    assert!(
        labels
            .iter()
            .any(|l| l.contains("allocated while history was off"))
    );
    // The jump selects the site of the allocation it lands after.
    let addr = v.current_event().expect("after an alloc").addr;
    assert!(v.highlighted().binary_search(&addr).is_ok());
    let here = v.selected_site;
    for _ in lost..here {
        press(&mut v, KeyCode::Up);
    }
    for _ in here..lost {
        press(&mut v, KeyCode::Down);
    }
    let selected = v.selected_site().expect("a site");
    assert!(
        selected.label.contains("before the trace began"),
        "{}",
        selected.label
    );
    press(&mut v, KeyCode::Enter);
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(
        screen.contains("are freed") && screen.contains("no longer holds"),
        "{screen}"
    );
    insta::assert_snapshot!("sites_no_stack_120x40", t.backend());
}

#[test]
fn sites_pane_title_counts_one_site_in_the_singular() {
    // Mid-run from its first event on, every live block of this file was
    // allocated before the recording: one site.
    let Some(mut v) = viewer("bolongcheng_xl_fwd_cl128_float32_expandable.pickle") else {
        return;
    };
    key(&mut v, 'w');
    assert_eq!(v.sites.as_ref().map(|s| s.sites.len()), Some(1));
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(screen.contains(" · 1 site · "), "{screen}");
    assert!(!screen.contains("1 sites"), "{screen}");
}

#[test]
fn sites_pane_fits_a_narrow_80x24_terminal() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    press(&mut v, KeyCode::Enter);
    let t = draw(&v, 80, 24);
    let screen = text(t.backend().buffer());
    assert!(screen.contains("Sites"), "{screen}");
    insta::assert_snapshot!("sites_expanded_80x24", t.backend());
}

#[test]
fn an_expanded_site_longer_than_the_pane_scrolls_with_up_and_down_and_says_what_is_cut() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    key(&mut v, 'w');
    // The einsum site: 17 Python frames (runpy's two launcher frames
    // dropped) and 651 blocks, far more rows
    // than the pane has.
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Enter);
    let site = v.selected_site().expect("a site").label.clone();
    assert!(site.contains("einsum"), "{site}");
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(
        screen.contains("… 665 more (rows 1–6 of 671; ↓ j scrolls)"),
        "{screen}"
    );
    assert!(screen.contains("model.py:41 forward"), "{screen}");
    assert!(!screen.contains("module.py:1739"), "{screen}");
    // ↓ scrolls the stack: the site stays selected and expanded.
    for _ in 0..3 {
        key(&mut v, 'j');
    }
    assert_eq!(v.selected_site().map(|s| s.label.as_str()), Some(&*site));
    assert!(v.site_expanded);
    let t = draw(&v, 80, 24);
    let screen = text(t.backend().buffer());
    assert!(
        screen.contains("… 662 more (rows 4–9 of 671; ↑ k ↓ j scroll)"),
        "{screen}"
    );
    assert!(
        screen.contains("module.py:1739 _wrapped_call_impl"),
        "{screen}"
    );
    insta::assert_snapshot!("sites_expanded_scrolled_80x24", t.backend());
    // Scrolling stops at the end: the last block, and the rows above.
    for _ in 0..1000 {
        press(&mut v, KeyCode::Down);
    }
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(
        screen.contains("… 665 above (rows 666–671 of 671; ↑ k scrolls back)"),
        "{screen}"
    );
    assert!(screen.contains("0x7fddbfcf0000  320 KiB"), "{screen}");
    // A taller terminal shows more of the end; the first ↑ moves at once.
    let t = draw(&v, 120, 40);
    let screen = text(t.backend().buffer());
    assert!(
        screen.contains("… 659 above (rows 660–672 of 672; ↑ k scrolls back)"),
        "{screen}"
    );
    insta::assert_snapshot!("sites_expanded_end_120x40", t.backend());
    press(&mut v, KeyCode::Up);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(
        screen.contains("… 1 more (rows 659–671 of 672; ↑ k ↓ j scroll)"),
        "{screen}"
    );
    // Folded, ↑/↓ select sites again; expanded again, from the top.
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Down);
    assert_ne!(v.selected_site().map(|s| s.label.as_str()), Some(&*site));
    press(&mut v, KeyCode::Up);
    press(&mut v, KeyCode::Enter);
    let screen = text(draw(&v, 120, 40).backend().buffer());
    assert!(
        screen.contains("… 659 more (rows 1–13 of 672; ↓ j scrolls)"),
        "{screen}"
    );
}

#[test]
fn an_expanded_sites_cut_marker_says_it_counts_rows_beside_the_block_count() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    key(&mut v, 'w');
    press(&mut v, KeyCode::Down);
    press(&mut v, KeyCode::Enter);
    let screen = text(draw(&v, 80, 24).backend().buffer());
    // 651 blocks, 671 rows with the heading and the stack: "of 671" alone
    // read as a second, different block count.
    assert!(screen.contains("651 blk"), "{screen}");
    assert!(screen.contains("(rows 1–6 of 671;"), "{screen}");
}

#[test]
fn block_detail_names_the_blocks_site() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let label = v.selected_site().expect("a site").label.clone();
    key(&mut v, 'w');
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let lines: Vec<String> = detail_lines(&v, 110)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let site = lines
        .iter()
        .find(|l| l.starts_with("site"))
        .expect("a site line");
    assert!(site.contains(&label), "{site} vs {label}");
}

#[test]
fn ab_marks_compare_two_cursors_and_list_what_was_allocated_between() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'c');
    assert!(v.compare.is_none(), "no comparison without both marks");
    press(&mut v, KeyCode::Home);
    key(&mut v, 'm');
    key(&mut v, 'P');
    key(&mut v, 'M');
    let peak = v.cursor();
    key(&mut v, 'c');
    let c = v.compare.clone().expect("both marks set");
    assert_eq!((c.a, c.b), (0, peak));
    let d = v.device().expect("a device");
    assert_eq!(c.diff.allocated.after, d.points[peak].allocated);
    assert_eq!(c.diff.allocated.before, d.points[0].allocated);
    // From the start of a full trace everything alive at B was allocated
    // in between.
    assert_eq!(c.between.allocated, d.points[peak].allocated);
    let site_after: u64 = c.diff.sites.iter().map(|s| s.bytes.after).sum();
    assert_eq!(site_after, d.points[peak].allocated);
    let lines = compare_lines(&v, 116).join("\n");
    assert!(
        lines.contains("allocated between A and B and still alive at B"),
        "{lines}"
    );
    // From the start to the peak the highest is the peak itself.
    assert_eq!(c.highest.allocated.cursor, peak);
    assert!(
        lines.contains(&format!(
            "highest between A and B: allocated 3.03 GiB @{peak}, reserved "
        )),
        "{lines}"
    );
    let t = draw(&v, 120, 40);
    insta::assert_snapshot!("sites_ab_120x40", t.backend());
    // Keys other than Esc/c do nothing while it is open; Esc closes it.
    key(&mut v, 'h');
    assert_eq!(v.cursor(), peak);
    press(&mut v, KeyCode::Esc);
    assert!(v.compare.is_none());
    assert!(status_text(&v).contains(&format!("A 0 B {peak}")));
}

#[test]
fn the_ab_popup_says_no_change_with_a_dash_for_bytes_and_segments_alike() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'm');
    key(&mut v, 'M');
    key(&mut v, 'c');
    let lines = compare_lines(&v, 116);
    for what in ["reserved", "allocated", "segments"] {
        let row = lines
            .iter()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("a {what} row: {lines:#?}"));
        assert!(row.ends_with(" -"), "{row:?}");
    }
}

#[test]
fn the_ab_popup_lists_every_changed_site_the_scroll_can_reach() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    press(&mut v, KeyCode::Home);
    key(&mut v, 'm');
    key(&mut v, 'P');
    key(&mut v, 'M');
    key(&mut v, 'c');
    let c = v.compare.clone().expect("both marks set");
    let changed = vramtop::ui::largest_changes_first(&c.diff.sites).len();
    assert!(
        changed > 8,
        "Hyperion's peak has many changed sites: {changed}"
    );
    let lines = compare_lines(&v, 116);
    let listed = lines
        .iter()
        .skip_while(|l| !l.starts_with("live bytes by site"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.contains("more changed sites"))
        .count();
    assert_eq!(listed, changed.min(64), "{}", lines.join("\n"));
    assert!(!lines.iter().any(|l| l.contains("more changed sites")) || changed > 64);
}

#[test]
fn an_expanded_lone_site_has_its_stack_right_below_it() {
    let Some(mut v) = viewer("Yiyi-philosophy_LLM-inference_oom_snapshot.pickle") else {
        return;
    };
    key(&mut v, 'w');
    assert_eq!(v.sites.as_ref().map(|s| s.sites.len()), Some(1));
    press(&mut v, KeyCode::Enter);
    let t = draw(&v, 80, 24);
    let screen = common::screen::text(t.backend().buffer());
    let lines: Vec<&str> = screen.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.contains("460 blk"))
        .expect("the site's row");
    assert!(
        lines[row + 1].contains("requested of"),
        "the stack's heading follows the site, no blank rows: {screen}"
    );
}

#[test]
fn a_site_reached_from_three_places_shows_the_one_holding_most_bytes() {
    // Yiyi's one site (`pytorch_backend.py:190 allocate`, 460 blocks) is
    // reached through flex_opt.py:507 (7.00 GiB), :319 (3.63 GiB) and :171
    // (2 blocks of 0.2 GiB, the largest blocks): its stack is :507's.
    let Some(mut v) = viewer("Yiyi-philosophy_LLM-inference_oom_snapshot.pickle") else {
        return;
    };
    key(&mut v, 'w');
    let site = v.selected_site().expect("a site").clone();
    assert_eq!(site.caller_paths, 3);
    assert!(
        site.called_from
            .iter()
            .any(|f| f == "flex_opt.py:507 init_weight"),
        "{:?}",
        site.called_from
    );
    assert!(site.called_from_bytes * 10 > site.bytes * 6, "about 63 %");
    press(&mut v, KeyCode::Enter);
    let screen = common::screen::text(draw(&v, 120, 40).backend().buffer());
    assert!(screen.contains("flex_opt.py:507 init_weight"), "{screen}");
    // The selected block is one of that path's, so its detail agrees.
    let (_, block) = v.selected_block().expect("a block");
    assert!(std::sync::Arc::ptr_eq(&block.frames, &site.stack));
}

#[test]
fn x_on_a_site_of_cpp_frames_only_says_what_it_changed() {
    // silmont's peak is led by DivBackward0, a backward-thread stack with
    // no Python frame: its C++ frames are listed whatever x says.
    let Some(mut v) = viewer("silmont_mem_snapshot.pickle") else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let site = v.selected_site().expect("a site").clone();
    assert_eq!(site.python_frames, 0, "{}", site.label);
    press(&mut v, KeyCode::Enter);
    key(&mut v, 'x');
    let notice = v.app.ui.notice.clone().unwrap_or_default();
    assert!(notice.contains("no Python frame"), "{notice}");
}

#[test]
fn a_notice_longer_than_the_viewers_line_wraps_onto_rows_it_is_read_whole_at_80x24() {
    let Some(mut v) = viewer("silmont_mem_snapshot.pickle") else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    press(&mut v, KeyCode::Enter);
    key(&mut v, 'x');
    let notice = v.app.ui.notice.clone().expect("x says what it changed");
    assert!(
        notice.chars().count() > 80,
        "longer than the line: {notice}"
    );
    let terminal = draw(&v, 80, 24);
    let screen = text(terminal.backend().buffer());
    insta::assert_snapshot!("viewer_long_notice_80x24", terminal.backend());
    assert!(
        common::screen::reads_whole(&screen, &notice),
        "{notice:?} whole in {screen}"
    );
    // The key hints stay on the last row.
    let last = screen.lines().last().unwrap_or_default();
    assert!(last.starts_with("q quit"), "{screen}");
}

#[test]
fn help_overlay_lists_the_new_keys() {
    let rows = Keymap::default().viewer_help_rows();
    for k in ["P", "R", "B", "w", "g", "x", "m", "M", "c"] {
        assert!(
            rows.iter().any(|(keys, _)| *keys == k),
            "no help row for {k}"
        );
    }
    let hints = Keymap::default().viewer_hints(false);
    for h in ["peak", "sites", "A/B"] {
        assert!(hints.iter().any(|(_, hint)| *hint == h), "no hint {h}");
    }
}

/// Opens the sites pane and expands its second site (Hyperion's einsum).
fn expand_second_site(v: &mut ViewerState) -> Site {
    key(v, 'w');
    press(v, KeyCode::Down);
    press(v, KeyCode::Enter);
    v.selected_site().expect("a site").clone()
}

#[test]
fn a_sites_cpp_frame_count_is_the_same_in_the_pane_the_block_detail_and_the_json() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    let site = expand_second_site(&mut v);
    assert!(site.label.contains("einsum"), "{}", site.label);
    // `--summary --json` serialises the site as it is.
    let json = serde_json::to_value(&site).expect("JSON");
    let cpp = json["cpp_frames"].as_u64().expect("cpp_frames");
    assert_eq!(cpp, 48, "the listable C++ frames, the allocator's excepted");
    assert_eq!(json["python_frames"], 17);
    assert_eq!(
        cpp + json["python_frames"].as_u64().unwrap_or(0)
            + json["dropped_frames"].as_u64().unwrap_or(0),
        site.stack.len() as u64
    );
    let hidden = format!("{cpp} C++ frames hidden");
    let pane = vramtop::ui::site_detail_lines(&v, &Keymap::default(), &site, 118).join("\n");
    assert!(pane.contains(&hidden), "{pane}");
    // The site's largest block is selected; its detail counts alike.
    let (_, block) = v.selected_block().expect("a block");
    assert!(std::sync::Arc::ptr_eq(&block.frames, &site.stack));
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Esc);
    press(&mut v, KeyCode::Enter);
    assert!(v.detail_open);
    let detail: Vec<String> = detail_lines(&v, 100)
        .iter()
        .map(|l| l.to_string())
        .collect();
    let detail = detail.join("\n");
    assert!(detail.contains(&hidden), "{detail}");
}

#[test]
fn a_narrow_expanded_site_wraps_its_heading_and_keeps_the_x_hint() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    let site = expand_second_site(&mut v);
    let lines = vramtop::ui::site_detail_lines(&v, &Keymap::default(), &site, 60);
    let frames_at = lines
        .iter()
        .position(|l| l.starts_with("  "))
        .expect("a frame row");
    for l in &lines[..frames_at] {
        assert!(l.chars().count() <= 60, "{l:?} is wider than 60");
    }
    let heading = lines[..frames_at].join(" ");
    assert!(heading.contains("x shows them"), "{heading}");
    assert!(heading.contains("in blocks"), "{heading}");
}

#[test]
fn x_in_a_scrolled_expanded_site_keeps_its_scroll_and_clamps_it_to_the_shorter_stack() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    let site = expand_second_site(&mut v);
    assert!(site.label.contains("einsum"), "{}", site.label);
    draw(&v, 80, 24);
    for _ in 0..3 {
        key(&mut v, 'j');
    }
    // The C++ frames listed among the Python ones: the view moves down
    // with the frame it showed, not back at the heading.
    key(&mut v, 'x');
    assert!(v.show_cpp);
    assert!(
        v.site_scroll > 3,
        "x keeps the row being read: {}",
        v.site_scroll
    );
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("of 720;"), "{screen}");
    // At the end of the longer listing, hiding the C++ frames again shows
    // the end of the shorter one, and the first ↑ moves at once.
    for _ in 0..1000 {
        key(&mut v, 'j');
    }
    key(&mut v, 'x');
    assert!(!v.show_cpp);
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(
        screen.contains("… 665 above (rows 666–671 of 671; ↑ k scrolls back)"),
        "{screen}"
    );
    key(&mut v, 'k');
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains("(rows 665–670 of 671;"), "{screen}");
}

#[test]
fn x_keeps_the_frame_or_block_being_read_at_the_top_of_an_expanded_site() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    expand_second_site(&mut v);
    // The site's rows at one width (drawing records where its frames start).
    let rows = |v: &ViewerState| {
        let site = v.selected_site().expect("a site").clone();
        vramtop::ui::site_detail_lines(v, &Keymap::default(), &site, 76)
    };
    let listing = rows(&v);
    let first_frame = v.site_frames_row.get();
    let frames = listing
        .iter()
        .skip(first_frame)
        .take_while(|l| !l.starts_with("blocks ("))
        .count();
    assert!(frames > 4, "{listing:?}");
    // Reading Python frames, then reading blocks: after x, and after x
    // again, the same row is at the top.
    for down in [first_frame + 3, first_frame + frames + 40] {
        v.site_scroll = 0;
        for _ in 0..down {
            key(&mut v, 'j');
        }
        assert_eq!(v.site_scroll, down);
        let top = rows(&v)[v.site_scroll].clone();
        for _ in 0..2 {
            key(&mut v, 'x');
            let now = rows(&v);
            assert_eq!(now[v.site_scroll], top, "show_cpp {}", v.show_cpp);
        }
    }
}

#[test]
fn whole_stack_labels_that_part_in_long_cpp_frames_still_read_apart_at_80_columns() {
    let Some(mut v) = viewer(HYPERION) else {
        return;
    };
    key(&mut v, 'w');
    while v.grouping != Grouping::Stack {
        key(&mut v, 'g');
    }
    let sites = v.sites.as_ref().expect("open").sites.clone();
    // Each site's row as the 80-column pane draws it, selected in turn.
    let mut rows: Vec<String> = Vec::new();
    for k in 0..sites.len() {
        let screen = text(draw(&v, 80, 24).backend().buffer());
        let row = screen
            .lines()
            .find(|l| l.starts_with('▶') && l.contains(" blk  "))
            .unwrap_or_else(|| panic!("site {k} is selected: {screen}"))
            .trim_end()
            .to_string();
        rows.push(row);
        press(&mut v, KeyCode::Down);
    }
    // Two einsum stacks part only in their allocating C++ frame, whose
    // name is long: both rows name it, in short.
    assert!(
        rows.iter()
            .any(|r| r.ends_with("einsum … model.py:397 … _empty_strided_generic")),
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.ends_with("einsum … model.py:397 … _empty_generic")),
        "{rows:#?}"
    );
    for (i, a) in sites.iter().enumerate() {
        for (j, b) in sites.iter().enumerate().skip(i + 1) {
            if a.label != b.label {
                // The pointer and the figures take 30 columns.
                let label = |row: &str| row.chars().skip(30).collect::<String>();
                assert_ne!(
                    label(&rows[i]),
                    label(&rows[j]),
                    "{} and {} read alike",
                    a.label,
                    b.label
                );
            }
        }
    }
}

#[test]
fn a_whole_stack_name_too_long_for_its_row_drops_its_frame_count_whole_first() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    while v.grouping != Grouping::Stack {
        key(&mut v, 'g');
    }
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let rows: Vec<&str> = screen
            .lines()
            .filter(|l| l.contains(" blk  "))
            .map(str::trim_end)
            .collect();
        assert!(!rows.is_empty(), "{screen}");
        for row in &rows {
            // "(stack of 2…" read as a count of two: the count is whole or
            // not there.
            if let Some((_, count)) = row.split_once("(stack of ") {
                assert!(count.ends_with(" frames)"), "{w}×{h}: {row}");
            }
        }
        if w == 80 {
            assert!(
                rows.iter()
                    .any(|r| r.ends_with("trace_peak_memory.py:7 custom_softmax")),
                "{screen}"
            );
        }
    }
}

#[test]
fn a_site_list_longer_than_the_pane_says_how_many_sites_it_hides() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let total = v.sites.as_ref().expect("open").sites.len();
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(screen.contains(&format!("· {total} sites ·")), "{screen}");
    let shown = screen.lines().filter(|l| l.contains(" blk  ")).count();
    assert!(
        shown < total,
        "the pane is too short for every site: {screen}"
    );
    let hidden = total - shown;
    assert!(
        screen.contains(&format!("… {hidden} more (↓ scrolls)")),
        "{screen}"
    );
    // At the last site the marker counts the sites above.
    for _ in 0..total {
        press(&mut v, KeyCode::Down);
    }
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(
        screen.contains(&format!("… {hidden} above (↑ scrolls back)")),
        "{screen}"
    );
}

#[test]
fn the_function_grouping_names_a_cpp_function_as_the_other_groupings_do() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    key(&mut v, 'P');
    key(&mut v, 'w');
    let label_of = |v: &ViewerState, needle: &str| {
        v.sites
            .as_ref()
            .expect("open")
            .sites
            .iter()
            .map(|s| s.label.clone())
            .find(|l| l.contains(needle))
    };
    // The user-frame grouping falls back to the autograd node's frame.
    let short = label_of(&v, "DivBackward0").expect("a DivBackward0 site");
    assert_eq!(short, "DivBackward0::apply (C++, backward pass)");
    while v.grouping != Grouping::Function {
        key(&mut v, 'g');
    }
    assert_eq!(
        label_of(&v, "DivBackward0").as_deref(),
        Some(short.as_str())
    );
    let screen = text(draw(&v, 80, 24).backend().buffer());
    assert!(
        screen.contains("DivBackward0::apply (C++, backward pass)"),
        "{screen}"
    );
    assert!(!screen.contains("autograd::generated"), "{screen}");
}

/// The first byte figure in `line` written without the space before its
/// unit ("3.52GiB"), if any.
fn packed_figure(line: &str) -> Option<&str> {
    line.char_indices().find_map(|(at, c)| {
        let rest = &line[at + c.len_utf8()..];
        (c.is_ascii_digit()
            && ["B", "KiB", "MiB", "GiB", "TiB"]
                .iter()
                .any(|unit| rest.starts_with(unit)))
        .then(|| &line[at..])
    })
}

#[test]
fn beside_the_sites_pane_the_timeline_legend_keeps_a_figure_apart_from_its_unit() {
    let Some(mut v) = viewer(SILMONT) else {
        return;
    };
    // The sites pane takes half the timeline's row: its legend has less
    // room than the figures need in full ("reserved 3.52GiB" was packed).
    key(&mut v, 'w');
    for (w, h) in [(120, 40), (100, 34), (140, 40), (160, 50)] {
        let screen = text(draw(&v, w, h).backend().buffer());
        let legend = screen
            .lines()
            .find(|l| l.starts_with("─ res"))
            .unwrap_or_else(|| panic!("{w}×{h}: no timeline legend: {screen}"));
        assert_eq!(packed_figure(legend), None, "{w}×{h}: {legend}");
    }
}

/// The pane titles of a screen: each text on a row that starts with a
/// pane's name after the border's corner, up to the border line after it.
fn pane_titles(screen: &str) -> Vec<String> {
    const NAMES: [&str; 6] = [
        " Sites ",
        " Segments ",
        " Memory breakdown ",
        " Timeline ",
        " GPUs ",
        " Fragmentation ",
    ];
    let mut out = Vec::new();
    for row in screen.lines() {
        for piece in row.split(['┌', '│']) {
            if NAMES.iter().any(|n| piece.starts_with(n)) {
                let title = piece.split('─').next().unwrap_or_default();
                out.push(title.trim_end().to_string());
            }
        }
    }
    out
}

/// A number as a title shows one: "23.2", "638", "87.5%" is not one.
fn is_number(token: &str) -> bool {
    token.chars().any(|c| c.is_ascii_digit())
        && token.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Whether `shown`, a title as drawn, cuts `whole` (the same title where
/// it fits) inside a figure: it ends with a number whose unit or word was
/// left out ("· 23.2" of "23.2 GiB allocated"), or partway through a
/// number or the word after one ("638 b…" of "638 blocks").
fn cut_inside_a_figure(shown: &str, whole: &str) -> bool {
    let core = shown.trim_end().trim_end_matches('…').trim_end();
    let Some(rest) = whole.strip_prefix(core) else {
        return false;
    };
    if rest.trim().is_empty() {
        return false;
    }
    let tokens: Vec<&str> = core.split_whitespace().collect();
    let last = tokens.last().copied().unwrap_or_default();
    let before = tokens.len().checked_sub(2).map_or("", |i| tokens[i]);
    let mid_token = rest.starts_with(|c: char| !c.is_whitespace());
    (is_number(last) && !rest.trim_start().starts_with('·'))
        || (mid_token && (last.contains(|c: char| c.is_ascii_digit()) || is_number(before)))
}

#[test]
fn no_viewer_title_is_cut_inside_a_figure_at_any_width_from_30_to_80() {
    let Some(mut v) = viewer("volcengine_verl_mem.pickle") else {
        return;
    };
    // The screen without and with the sites pane (`w`): at 40×10 the
    // sites title ended "· 21 sites · 23.2", its unit lost, and at 41
    // "23.2 …"; the segments title "638 b…".
    for sites in [false, true] {
        if sites {
            key(&mut v, 'w');
        }
        for h in [10, 24] {
            let wholes = pane_titles(&text(draw(&v, 240, h).backend().buffer()));
            for w in 30..=80 {
                let screen = text(draw(&v, w, h).backend().buffer());
                for shown in pane_titles(&screen) {
                    let name = shown.split_whitespace().next().unwrap_or_default();
                    for whole in wholes
                        .iter()
                        .filter(|t| t.split_whitespace().next() == Some(name))
                    {
                        assert!(
                            !cut_inside_a_figure(&shown, whole),
                            "{w}x{h}: {shown:?} cuts {whole:?}\n{screen}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_title_check_finds_a_figure_cut_from_its_unit() {
    let whole = " Sites  by user frame · 21 sites · 23.2 GiB allocated · g groups";
    assert!(cut_inside_a_figure(
        " Sites  by user frame · 21 sites · 23.2",
        whole
    ));
    assert!(cut_inside_a_figure(
        " Sites  by user frame · 21 sites · 23.2 …",
        whole
    ));
    assert!(cut_inside_a_figure(
        " Sites  by user frame · 21 sites · 23.2 G…",
        whole
    ));
    assert!(!cut_inside_a_figure(
        " Sites  by user frame · 21 sites …",
        whole
    ));
    assert!(!cut_inside_a_figure(whole, whole));
}
