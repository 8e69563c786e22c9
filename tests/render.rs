//! Render tests of the dashboard: whole screens and single panes drawn into
//! ratatui's `TestBackend`, compared with reviewed insta snapshots, plus
//! style checks (threshold colours, NO_COLOR, ASCII) that text snapshots
//! cannot see and "does not panic" sweeps over tiny and odd sizes.
//!
//! Every state is built from the simulation with a fixed seed and a
//! simulated clock, or by hand: nothing depends on the wall clock, the test
//! process or the machine.

mod common;

use std::collections::BTreeMap;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::widgets::Widget;
use vramtop::alloc::{DeviceMemory, DeviceStats};
use vramtop::app::keymap::{Action, Keymap};
use vramtop::app::process_list::SortColumn;
use vramtop::app::state::{
    AllocatorView, AppState, Marker, MarkerKind, Overlay, Pane, ProcessFilter, StatusState,
};
use vramtop::device::sim::{Fault, Metric, NotStarted, SimCluster, SimConfig};
use vramtop::device::{GpuProcess, GpuReading, GpuSample, MigInfo, ProcessUsage, Telemetry};
use vramtop::ui::{
    self, BreakdownPane, FragmentationPane, GpusPane, NO_ALLOCATOR_NOTE, ProcessesPane,
    SegmentsPane, StatusLine, Theme, TimelinePane,
};

use common::screen::{draw, draw_widget, help_row, text};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn status() -> StatusState {
    StatusState {
        backend: "sim".to_string(),
        banner: None,
        banner_short: None,
        sample_interval_ms: 1000,
        samples: 0,
        dropped_samples: 0,
        last_error: None,
        home_dir: None,
    }
}

/// Takes `samples` samples one simulated second apart, with the allocator
/// views of the simulated training processes.
fn feed(cluster: &SimCluster, state: &mut AppState, samples: u64) {
    let mut telemetry = cluster.telemetry();
    for _ in 0..samples {
        cluster.advance(1000);
        let readings = telemetry.sample().expect("the simulation always answers");
        let allocators: BTreeMap<u32, AllocatorView> = cluster
            .trainers()
            .into_iter()
            .map(|t| {
                (
                    t.gpu,
                    AllocatorView::new(
                        format!("pid {} (simulated training)", t.pid),
                        Some(t.pid),
                        t.stats,
                        t.layout,
                    ),
                )
            })
            .collect();
        state.apply_sample(cluster.now_ms(), readings, allocators);
    }
}

fn cluster(gpus: usize, training_processes: usize) -> SimCluster {
    SimCluster::new(SimConfig {
        gpus,
        training_processes,
        seed: 7,
        ..SimConfig::default()
    })
}

/// `gpus` simulated GPUs, one training process on GPU 0, 30 samples.
fn training(gpus: usize) -> (SimCluster, AppState) {
    let cluster = cluster(gpus, 1);
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 30);
    (cluster, state)
}

/// One GPU used by a process whose allocator vramtop cannot see.
fn plain_gpu() -> AppState {
    let cluster = cluster(1, 0);
    let mut process = cluster.new_process(0, "python infer.py --batch 64");
    process
        .malloc(12 * GIB)
        .expect("12 GiB fit on a simulated 80 GiB GPU");
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 10);
    state
}

fn row_text(buf: &Buffer, y: u16) -> String {
    (buf.area.left()..buf.area.right())
        .map(|x| buf.cell((x, y)).map_or(" ", |c| c.symbol()).to_string())
        .collect()
}

/// A hand-made GPU sample: 80 GiB, `used` bytes used, every metric known.
fn sample(index: u32, used: u64) -> GpuSample {
    let mut s = GpuSample::unknown(index, "Test GPU 80GB");
    s.memory_total = Some(80 * GIB);
    s.memory_used = Some(used);
    s.memory_free = Some(80 * GIB - used);
    s.gpu_utilization = Some(50);
    s.temperature_c = Some(60);
    s.power_draw_mw = Some(300_000);
    s.power_limit_mw = Some(700_000);
    s.sm_clock_mhz = Some(1980);
    s.memory_clock_mhz = Some(2619);
    s
}

fn process(pid: u32, parent: Option<u32>, used: u64, command: &str) -> GpuProcess {
    GpuProcess {
        user: Some("alice".to_string()),
        command: Some(command.to_string()),
        parent_pid: parent,
        ..GpuProcess::new(pid, Some(used))
    }
}

// Whole screens.

#[test]
fn whole_screen_at_80x24_shows_every_pane() {
    let (_cluster, state) = training(2);
    let theme = Theme::colored();
    let screen = ui::layout(Rect::new(0, 0, 80, 24), &state, &Keymap::default(), &theme);
    for pane in Pane::ALL {
        let area = screen.area_of(pane).expect("every pane fits at 80×24");
        assert!(area.height >= 2, "{pane:?} has a title and content");
    }
    let terminal = draw(&state, &theme, 80, 24);
    insta::assert_snapshot!("screen_80x24", terminal.backend());
}

#[test]
fn status_messages_take_two_rows_at_80x24_and_wrap_to_be_read_whole_from_80x32() {
    let (_cluster, mut state) = training(1);
    state.status.banner = Some(
        "showing 1 simulated GPU: no NVIDIA driver is installed (libnvidia-ml.so.1 not found)"
            .to_string(),
    );
    let error = "nvml failed: nvmlDeviceGetHandleByIndex(1): GPU is lost (the GPU has fallen \
                 off the bus or has otherwise become inaccessible)";
    state.status.last_error = Some(error.to_string());
    // `O` with no OOM snapshot says why, in 80 columns of its own.
    let o = KeyEvent::new(KeyCode::Char('O'), KeyModifiers::NONE);
    vramtop::app::update::handle_key(&mut state, &Keymap::default(), o);
    let notice = state.ui.notice.clone().expect("O says why it cannot act");
    // At 80×24 the messages take two rows: the panes keep the rest, and
    // what does not fit ends in "…" (the error is in the log too).
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    insta::assert_snapshot!("status_long_messages_80x24", terminal.backend());
    // From 80×32 each is read whole.
    let screen = text(draw(&state, &Theme::colored(), 80, 32).backend().buffer());
    for message in [notice.as_str(), &format!("error: {error}")] {
        assert!(
            common::screen::reads_whole(&screen, message),
            "{message:?} whole in {screen}"
        );
    }
    // The panes give up the rows, and come back when the messages go.
    let keymap = Keymap::default();
    let status_h = |state: &AppState, h: u16| {
        ui::layout(Rect::new(0, 0, 80, h), state, &keymap, &Theme::colored())
            .status
            .height
    };
    assert_eq!(status_h(&state, 24), 3, "facts, then two rows of messages");
    assert!(status_h(&state, 32) >= 5, "facts, notice, error, banner");
    state.ui.notice = None;
    state.status.last_error = None;
    state.status.banner = None;
    assert_eq!(status_h(&state, 24), 1);
}

#[test]
fn whole_screen_at_120x40_matches_its_snapshot() {
    let (_cluster, state) = training(2);
    let terminal = draw(&state, &Theme::colored(), 120, 40);
    insta::assert_snapshot!("screen_120x40", terminal.backend());
}

#[test]
fn whole_screen_at_200x60_matches_its_snapshot() {
    let (_cluster, state) = training(2);
    let terminal = draw(&state, &Theme::colored(), 200, 60);
    insta::assert_snapshot!("screen_200x60", terminal.backend());
}

#[test]
fn without_colour_the_timelines_series_have_markers_of_their_own() {
    let (_cluster, state) = training(2);
    for theme in [Theme::monochrome(), Theme::monochrome().with_ascii(true)] {
        let drawn = text(draw(&state, &theme, 120, 40).backend().buffer());
        let legend = drawn
            .lines()
            .find(|l| l.contains("driver used"))
            .expect("the timeline's legend");
        let glyph = |name: &str| {
            let at = legend.find(name).expect("a series");
            legend[..at].trim_end().chars().last()
        };
        let glyphs = [glyph("driver used"), glyph("reserved"), glyph("allocated")];
        assert!(
            glyphs[0] != glyphs[1] && glyphs[1] != glyphs[2] && glyphs[0] != glyphs[2],
            "one glyph for several series: {legend}"
        );
    }
}

#[test]
fn whole_screen_in_ascii_mode_has_no_braille_block_or_box_glyphs() {
    let (_cluster, state) = training(2);
    let theme = Theme::colored().with_ascii(true);
    for (w, h) in [(80, 24), (120, 40)] {
        let terminal = draw(&state, &theme, w, h);
        let drawn = text(terminal.backend().buffer());
        let bad: Vec<char> = drawn
            .chars()
            .filter(|c| matches!(c, '\u{2500}'..='\u{259F}' | '\u{2800}'..='\u{28FF}'))
            .collect();
        assert!(bad.is_empty(), "{w}×{h}: {bad:?}");
        if w == 80 {
            insta::assert_snapshot!("screen_80x24_ascii", terminal.backend());
        }
    }
}

#[test]
fn ascii_mode_draws_only_ascii_in_every_pane_and_the_help() {
    let theme = Theme::colored().with_ascii(true);
    let (_cluster, training_state) = training(2);
    let mut states = vec![
        ("training", training_state),
        ("tree", process_tree_state()),
        ("no allocator", plain_gpu()),
        ("empty", AppState::new(status())),
    ];
    let (_cluster, mut help) = training(2);
    help.ui.overlay = Overlay::Help;
    states.push(("help", help.clone()));
    help.ui.help_scroll = 200;
    states.push(("help at its end", help));
    let (_cluster, mut filtered) = training(1);
    filtered.ui.focus = Pane::Processes;
    filtered.ui.process_filter = ProcessFilter::Editing("train".to_string());
    states.push(("filter", filtered));
    for (what, state) in &states {
        for (w, h) in [(80, 24), (120, 40), (30, 8)] {
            let terminal = draw(state, &theme, w, h);
            let bad = common::screen::non_ascii(terminal.backend().buffer());
            assert!(bad.is_empty(), "{what} at {w}×{h}: {bad:?}");
        }
        // Each pane alone, at full size, too (the layout may drop some).
        for (w, h) in [(80, 24), (120, 40)] {
            let panes: Vec<(&str, Terminal<TestBackend>)> = vec![
                ("GPUs", draw_widget(GpusPane::new(state, &theme), w, h)),
                (
                    "breakdown",
                    draw_widget(BreakdownPane::new(state, &theme), w, h),
                ),
                (
                    "timeline",
                    draw_widget(TimelinePane::new(state, &theme), w, h),
                ),
                (
                    "fragmentation",
                    draw_widget(FragmentationPane::new(state, &theme), w, h),
                ),
                (
                    "segments",
                    draw_widget(SegmentsPane::new(state, &theme), w, h),
                ),
                (
                    "processes",
                    draw_widget(ProcessesPane::new(state, &theme), w, h),
                ),
                (
                    "status",
                    draw_widget(StatusLine::new(state, &Keymap::default(), &theme), w, h),
                ),
            ];
            for (pane, terminal) in panes {
                let bad = common::screen::non_ascii(terminal.backend().buffer());
                assert!(bad.is_empty(), "{what}, {pane} at {w}×{h}: {bad:?}");
            }
        }
    }
}

#[test]
fn timeline_axis_labels_never_overlap_into_a_garbled_unit_on_a_short_chart() {
    // An idle GPU's scale is 0 / 0.5 MiB / 1 MiB: labels of different widths.
    let idle_cluster = cluster(1, 0);
    let mut idle = AppState::new(status());
    feed(&idle_cluster, &mut idle, 10);
    let (_cluster, training_state) = training(1);
    let theme = Theme::colored();
    for (state, h) in [&idle, &plain_gpu(), &training_state]
        .into_iter()
        .flat_map(|s| (3..=8).map(move |h| (s, h)))
    {
        let terminal = draw_widget(TimelinePane::new(state, &theme), 100, h);
        let buf = terminal.backend().buffer();
        for y in 0..h {
            let row = row_text(buf, y);
            assert!(
                !row.contains("iBiB") && !row.contains("B B"),
                "height {h}, row {y}: {row}"
            );
        }
    }
}

#[test]
fn help_overlay_lists_the_keys_and_defines_the_words() {
    let (_cluster, mut state) = training(2);
    state.ui.overlay = Overlay::Help;
    let theme = Theme::colored();
    let terminal = draw(&state, &theme, 120, 40);
    let drawn = text(terminal.backend().buffer());
    for (keys, _, _) in Keymap::default().help_rows() {
        assert!(drawn.contains(keys), "{keys} is in the help");
    }
    for (term, _) in ui::DEFINITIONS {
        assert!(drawn.contains(term), "{term} is defined");
    }
    assert!(drawn.contains("fragmentation (frag) = 1 − largest free block / external"));
    assert!(!drawn.contains("event N/M"), "a viewer word: {drawn}");
    insta::assert_snapshot!("help_120x40", terminal.backend());

    let small = draw(&state, &theme, 80, 24);
    let drawn = text(small.backend().buffer());
    assert!(
        drawn.contains("↓ j PgDn more"),
        "at 80×24 the help says it scrolls"
    );
    insta::assert_snapshot!("help_80x24", small.backend());
    state.ui.help_scroll = 200;
    let scrolled = text(draw(&state, &theme, 80, 24).backend().buffer());
    assert!(scrolled.contains("process tree / flat list"), "{scrolled}");
    assert!(scrolled.contains("↑ k PgUp back"), "the end says so");
}

#[test]
fn the_help_dims_the_snapshot_and_scenario_keys_that_do_nothing_now_and_says_why() {
    let (_cluster, mut state) = training(2);
    state.ui.overlay = Overlay::Help;
    let theme = Theme::colored();
    let terminal = draw(&state, &theme, 120, 40);
    let buf = terminal.backend().buffer();
    // No probe attached, no snapshot taken: the keys the hints leave out.
    for (keys, why) in [
        ("c", "[no process to capture]"),
        ("o", "[no snapshot yet]"),
        ("O", "[no OOM snapshot]"),
    ] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(row.contains(why) && dim, "{keys}: {row}");
    }
    for keys in ["p", "Tab", "a F2"] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(
            !row.lines().next().unwrap_or_default().contains('[') && !dim,
            "{keys}: {row}"
        );
    }
    // Each section's keys' column as wide as its keys need: the
    // Timeline's one-character keys were given "Shift-Tab"'s column.
    let (row, _) = help_row(buf, "+", &theme).expect("+");
    assert!(row.starts_with("+  zoom the timeline in"), "{row}");
    let (row, _) = help_row(buf, "Shift-Tab", &theme).expect("Shift-Tab");
    assert!(row.starts_with("Shift-Tab  previous pane"), "{row}");
    // With the stress panel open and no scenario loaded, its scenario
    // keys only say that none is loaded.
    state.ui.stress_open = true;
    let terminal = draw(&state, &theme, 120, 60);
    let buf = terminal.backend().buffer();
    for keys in [".", "g", "u"] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(row.contains("[no scenario loaded]") && dim, "{keys}: {row}");
    }
    let (row, dim) = help_row(buf, "n", &theme).expect("n");
    assert!(
        !row.lines().next().unwrap_or_default().contains('[') && !dim,
        "n lists them: {row}"
    );
    // No live tensors: the keys that free, verify or select them say so,
    // as the hints leave them out ("m every other" was the third hint at
    // 80×24, and m answered "no live tensors to free").
    for keys in ["d Del", "o", "x", "m", "D", "v", "↑ k"] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(row.contains("[no live tensors]") && dim, "{keys}: {row}");
    }
    let (row, dim) = help_row(buf, "a Enter", &theme).expect("a Enter");
    assert!(
        !row.lines().next().unwrap_or_default().contains('[') && !dim,
        "allocating needs no tensor: {row}"
    );
    state.ui.overlay = Overlay::None;
    let screen = text(draw(&state, &theme, 80, 24).backend().buffer());
    let hints = screen.lines().last().unwrap_or_default();
    assert!(hints.contains("a alloc"), "{hints}");
    for gone in ["every other", "free", "oldest", "random"] {
        assert!(!hints.contains(gone), "{gone}: {hints}");
    }
}

#[test]
fn help_scrolled_past_its_end_comes_back_with_the_first_page_up() {
    let (_cluster, mut state) = training(2);
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let key = |state: &mut AppState, code: KeyCode| {
        vramtop::app::update::handle_key(state, &keymap, KeyEvent::new(code, KeyModifiers::NONE));
    };
    key(&mut state, KeyCode::Char('?'));
    let top = text(draw(&state, &theme, 80, 24).backend().buffer());
    for _ in 0..50 {
        key(&mut state, KeyCode::PageDown);
        draw(&state, &theme, 80, 24);
    }
    let end = state.ui.help_scroll;
    assert!(end > 0 && end < 50 * 10, "clamped to the drawn end: {end}");
    let at_end = text(draw(&state, &theme, 80, 24).backend().buffer());
    assert!(at_end.contains("PgUp back"), "{at_end}");
    key(&mut state, KeyCode::PageUp);
    assert!(state.ui.help_scroll < end, "the first PgUp moves");
    let back = text(draw(&state, &theme, 80, 24).backend().buffer());
    assert_ne!(back, at_end, "and the screen shows it");
    assert_ne!(top, at_end);
}

#[test]
fn gpu_without_allocator_view_shows_used_and_free_and_says_why() {
    let state = plain_gpu();
    let theme = Theme::colored();
    let terminal = draw(&state, &theme, 80, 24);
    insta::assert_snapshot!("screen_80x24_no_allocator", terminal.backend());

    let pane = draw_widget(BreakdownPane::new(&state, &theme), 120, 5);
    let drawn = text(pane.backend().buffer());
    // 12 GiB and the 500 MiB context: 12.49 GiB, to the nearest 12.5 GiB.
    assert!(drawn.contains("used 12.5 GiB"), "{drawn}");
    assert!(drawn.contains("free 67.5 GiB"), "{drawn}");
    // The note wraps; compare it without the line breaks.
    let flat: String = drawn.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(NO_ALLOCATOR_NOTE), "{flat}");
    assert!(!drawn.contains("allocated"), "no made-up split");
}

#[test]
fn eight_gpus_at_80x24_scroll_beside_an_allocator_and_leave_the_breakdown_its_figures() {
    let cluster = cluster(8, 1);
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 30);
    let theme = Theme::colored();
    for selected in [0, 7] {
        state.ui.selected_gpu = selected;
        let terminal = draw(&state, &theme, 80, 24);
        let screen = text(terminal.backend().buffer());
        // The breakdown keeps its bar and legend (the figures), the GPU
        // list scrolls and keeps the selected GPU on screen.
        assert!(
            screen.contains(&format!(" Memory breakdown  GPU {selected}")),
            "{screen}"
        );
        assert!(screen.contains("free"), "the legend: {screen}");
        if selected == 0 {
            assert!(screen.contains("8 GPUs, ↑↓ scrolls"), "{screen}");
        } else {
            // GPU 7 has no allocator: its panes fold into one row and
            // the rows they free show every GPU.
            assert!(!screen.contains("scrolls"), "{screen}");
            assert!(screen.contains("no allocator"), "{screen}");
            for i in 0..8 {
                assert!(screen.contains(&format!("{i} Simulated H100")), "{screen}");
            }
            insta::assert_snapshot!("screen_80x24_eight_gpus_no_allocator", terminal.backend());
        }
        assert!(
            screen.contains(&format!("▶{selected} Simulated H100")),
            "{screen}"
        );
        if selected == 0 {
            assert!(screen.contains("▒ context & other"), "{screen}");
            assert!(screen.contains("█ allocated"), "{screen}");
            insta::assert_snapshot!("screen_80x24_eight_gpus", terminal.backend());
        }
    }
    // Where the list fits it is not cut: 120×40 shows every GPU and the
    // header.
    state.ui.selected_gpu = 0;
    let terminal = draw(&state, &theme, 120, 40);
    let buf = terminal.backend().buffer();
    for i in 0..8u16 {
        let row = row_text(buf, i + 2);
        assert!(
            row.contains(&format!("{i} Simulated H100")),
            "row {i}: {row}"
        );
    }
}

#[test]
fn twelve_gpus_at_80x24_show_the_selected_gpus_process_marked() {
    // Three trainers: pid 4242 on GPU 0, 4243 on GPU 1, 4244 on GPU 2.
    let cluster = cluster(12, 3);
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 30);
    let theme = Theme::colored();
    let keymap = Keymap::default();
    // Drawn first, as the dashboard is before any key.
    draw(&state, &theme, 80, 24);
    vramtop::app::update::handle_key(
        &mut state,
        &keymap,
        KeyEvent::new(KeyCode::Char('2'), KeyModifiers::NONE),
    );
    let terminal = draw(&state, &theme, 80, 24);
    let screen = text(terminal.backend().buffer());
    let row = screen
        .lines()
        .find(|l| l.contains("4244 sim"))
        .unwrap_or_else(|| panic!("GPU 2's trainer is in view: {screen}"));
    assert!(row.contains("▶2"), "and marked: {row}");
    assert!(
        !screen.contains("4242 sim"),
        "GPU 0's scrolled away: {screen}"
    );
    insta::assert_snapshot!("screen_80x24_twelve_gpus_gpu_2", terminal.backend());
}

#[test]
fn processes_mark_the_selected_gpus_lines_and_say_when_it_has_none() {
    let cluster = cluster(4, 2);
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 5);
    let theme = Theme::colored();
    let pane = |state: &AppState| {
        let terminal = draw_widget(ProcessesPane::new(state, &theme), 100, 8);
        text(terminal.backend().buffer())
    };
    state.ui.selected_gpu = 1;
    let drawn = pane(&state);
    for line in drawn.lines().filter(|l| l.contains("train.py")) {
        assert_eq!(
            line.contains("4243"),
            line.contains("▶1"),
            "only GPU 1's line is marked: {drawn}"
        );
    }
    assert!(!drawn.contains("none on GPU"), "{drawn}");
    // GPU 3 runs nothing: no line is marked and the title says so.
    state.ui.selected_gpu = 3;
    let drawn = pane(&state);
    assert!(!drawn.contains('▶'), "{drawn}");
    assert!(drawn.contains("· none on GPU 3"), "{drawn}");
}

#[test]
fn a_process_list_of_one_gpu_marks_nothing() {
    let (_cluster, state) = training(2);
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("4242"), "{drawn}");
    assert!(!drawn.contains('▶'), "every line is GPU 0's: {drawn}");
}

// Faults: lost GPUs and metrics the driver does not report.

#[test]
fn lost_gpu_reads_lost_with_its_reason() {
    let (cluster, mut state) = training(2);
    cluster.inject(Fault::GpuLost { gpu: 1 });
    feed(&cluster, &mut state, 1);
    let theme = Theme::colored();
    let terminal = draw_widget(GpusPane::new(&state, &theme), 80, 4);
    let drawn = text(terminal.backend().buffer());
    assert!(
        drawn.contains("1 lost: GPU has fallen off the bus (simulated fault)"),
        "{drawn}"
    );
    assert!(drawn.contains("1 lost"), "the title counts lost GPUs");
    insta::assert_snapshot!("gpus_lost", terminal.backend());
}

#[test]
fn unsupported_metrics_show_na_never_zero() {
    let (cluster, mut state) = training(1);
    for metric in [Metric::Power, Metric::Temperature, Metric::Clocks] {
        cluster.inject(Fault::MetricUnsupported { gpu: 0, metric });
    }
    feed(&cluster, &mut state, 1);
    let theme = Theme::colored();
    let terminal = draw_widget(GpusPane::new(&state, &theme), 80, 3);
    let row = row_text(terminal.backend().buffer(), 2);
    assert_eq!(row.matches("n/a").count(), 3, "temp, power, clocks: {row}");
    assert!(!row.contains("0°C") && !row.contains(" W") && !row.contains("MHz"));
    insta::assert_snapshot!("gpus_unsupported_metrics", terminal.backend());

    // Memory unknown: the bar and the text say n/a.
    cluster.inject(Fault::MetricUnsupported {
        gpu: 0,
        metric: Metric::Memory,
    });
    feed(&cluster, &mut state, 1);
    let terminal = draw_widget(GpusPane::new(&state, &theme), 80, 3);
    let row = row_text(terminal.backend().buffer(), 2);
    assert!(row.contains("n/a"), "{row}");
    assert!(!row.contains("0.0/"), "{row}");
}

// Styles that text snapshots cannot see.

/// Cells of row `y` drawn with `glyph`.
fn cells_with<'b>(buf: &'b Buffer, y: u16, glyph: &str) -> Vec<&'b ratatui::buffer::Cell> {
    (buf.area.left()..buf.area.right())
        .filter_map(|x| buf.cell((x, y)))
        .filter(|c| c.symbol() == glyph)
        .collect()
}

#[test]
fn memory_bar_turns_warning_at_80_and_critical_at_95_percent() {
    let mut state = AppState::new(status());
    state.apply_sample(
        0,
        vec![
            GpuReading::Ok(sample(0, 40 * GIB)),
            GpuReading::Ok(sample(1, 64 * GIB)),
            GpuReading::Ok(sample(2, 77 * GIB)),
        ],
        BTreeMap::new(),
    );
    let theme = Theme::colored();
    let terminal = draw_widget(GpusPane::new(&state, &theme), 80, 5);
    let buf = terminal.backend().buffer();
    let fill = theme.glyphs().bar_fill;
    for (y, expected, name) in [
        (2, theme.bar_ok, "50 %: ok"),
        (3, theme.bar_warning, "80 %: warning"),
        (4, theme.bar_critical, "96 %: critical"),
    ] {
        let cells = cells_with(buf, y, fill);
        assert!(!cells.is_empty(), "{name}: the bar is drawn");
        for c in cells {
            assert_eq!(c.fg, expected.fg.unwrap_or(Color::Reset), "{name}");
        }
    }
    assert_eq!(theme.bar_critical.fg, Some(Color::Red));
    // The used/total text carries the same style.
    let row = row_text(buf, 4);
    let at = row.find("77.0/80.0").expect("text shown");
    let x = u16::try_from(row[..at].chars().count()).expect("fits");
    assert_eq!(
        buf.cell((x, 4)).map(|c| c.fg),
        Some(Color::Red),
        "critical text"
    );
}

fn assert_no_colours(buf: &Buffer, what: &str) {
    for (i, c) in buf.content().iter().enumerate() {
        assert_eq!(
            (c.fg, c.bg),
            (Color::Reset, Color::Reset),
            "{what}: cell {i} {:?}",
            c.symbol()
        );
    }
}

#[test]
fn monochrome_theme_uses_no_colours() {
    let (_cluster, mut state) = training(2);
    let theme = Theme::monochrome();
    for focus in Pane::ALL {
        state.ui.focus = focus;
        let terminal = draw(&state, &theme, 120, 40);
        assert_no_colours(terminal.backend().buffer(), &format!("{focus:?}"));
    }
    state.ui.overlay = Overlay::Help;
    let terminal = draw(&state, &theme, 80, 24);
    assert_no_colours(terminal.backend().buffer(), "help");
}

#[test]
fn colored_theme_uses_only_the_16_basic_ansi_colours() {
    let (_cluster, mut state) = training(2);
    state.status.banner = Some("NVML not found: simulated GPUs".to_string());
    state.status.last_error = Some("sampling took 3 s".to_string());
    state.gpus[0].history.mark(Marker {
        t_ms: state.now_ms - 5_000,
        kind: MarkerKind::Oom,
        count: 1,
    });
    let basic = |c: Color| !matches!(c, Color::Rgb(..) | Color::Indexed(_));
    for overlay in [Overlay::None, Overlay::Help] {
        state.ui.overlay = overlay;
        let terminal = draw(&state, &Theme::colored(), 120, 40);
        for c in terminal.backend().buffer().content() {
            assert!(basic(c.fg) && basic(c.bg), "{:?} {:?}", c.fg, c.bg);
        }
    }
}

// Layout.

#[test]
fn smaller_terminals_collapse_panes_but_keep_the_focused_one() {
    let (_cluster, mut state) = training(2);
    let theme = Theme::colored();
    for focus in Pane::ALL {
        state.ui.focus = focus;
        for (w, h) in [(40, 10), (50, 14), (60, 18), (79, 23)] {
            let area = Rect::new(0, 0, w, h);
            let screen = ui::layout(area, &state, &Keymap::default(), &theme);
            assert!(!screen.too_small);
            assert!(
                screen.area_of(focus).is_some(),
                "{focus:?} is shown at {w}×{h}"
            );
            // Panes stay inside the screen, above the status line, and
            // never overlap.
            for (i, &(p, r)) in screen.panes.iter().enumerate() {
                assert!(r.bottom() <= screen.status.top(), "{p:?} at {w}×{h}");
                assert!(r.right() <= w);
                for &(q, s) in &screen.panes[i + 1..] {
                    assert!(!r.intersects(s), "{p:?} and {q:?} at {w}×{h}");
                }
            }
        }
    }
    state.ui.focus = Pane::Segments;
    let terminal = draw(&state, &theme, 40, 10);
    insta::assert_snapshot!("screen_40x10_segments_focused", terminal.backend());
}

#[test]
fn below_40x10_says_the_terminals_size_and_the_size_needed() {
    let (_cluster, state) = training(2);
    let theme = Theme::colored();
    for (w, h, said) in [
        (39, 24, "terminal 39×24: needs at least 40×10\nq quits"),
        (
            80,
            9,
            "terminal 80×9: vramtop needs at least 40×10\nq quits",
        ),
        (
            43,
            9,
            "terminal 43×9: vramtop needs at least 40×10\nq quits",
        ),
        (30, 8, "30×8: needs at least 40×10\nq quits"),
        (20, 8, "20×8: needs 40×10\nq quits"),
        // Narrower still: both sizes, over two rows, and the one key that
        // acts on the third.
        (12, 3, "12×3: needs\n40×10\nq quits"),
        // No row left for it: the sizes come first.
        (12, 2, "12×2: needs\n40×10"),
        (30, 1, "30×1: needs at least 40×10"),
    ] {
        let terminal = draw(&state, &theme, w, h);
        let drawn = text(terminal.backend().buffer());
        let words: Vec<&str> = drawn
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(words.join("\n"), said, "{w}×{h}: {drawn}");
        assert!(!drawn.contains("GPUs"), "{w}×{h}: no panes");
    }
    // ASCII: "x" for "×".
    let ascii = Theme::colored().with_ascii(true);
    let drawn = text(draw(&state, &ascii, 30, 8).backend().buffer());
    assert!(drawn.contains("30x8: needs at least 40x10"), "{drawn}");
}

#[test]
fn no_size_panics_from_0x0_to_20x5_nor_odd_shapes() {
    let (_cluster, mut state) = training(2);
    let keymap = Keymap::default();
    let mut sizes: Vec<(u16, u16)> = Vec::new();
    for w in 0..=20 {
        for h in 0..=5 {
            sizes.push((w, h));
        }
    }
    sizes.extend([
        (1, 100),
        (100, 1),
        (0, 100),
        (100, 0),
        (2, 60),
        (300, 2),
        (40, 10),
        (41, 11),
        (45, 50),
    ]);
    for theme in [Theme::colored(), Theme::monochrome().with_ascii(true)] {
        for focus in Pane::ALL {
            state.ui.focus = focus;
            for overlay in [Overlay::None, Overlay::Help] {
                state.ui.overlay = overlay;
                for &(w, h) in &sizes {
                    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
                    terminal
                        .draw(|f| ui::draw(f, &state, &keymap, &theme))
                        .expect("the test backend cannot fail");
                }
            }
        }
        // Each pane on its own, too.
        for &(w, h) in &sizes {
            let area = Rect::new(0, 0, w, h);
            let mut buf = Buffer::empty(area);
            GpusPane::new(&state, &theme).render(area, &mut buf);
            BreakdownPane::new(&state, &theme).render(area, &mut buf);
            TimelinePane::new(&state, &theme).render(area, &mut buf);
            FragmentationPane::new(&state, &theme).render(area, &mut buf);
            FragmentationPane::new(&state, &theme)
                .beside()
                .render(area, &mut buf);
            SegmentsPane::new(&state, &theme).render(area, &mut buf);
            ProcessesPane::new(&state, &theme).render(area, &mut buf);
            StatusLine::new(&state, &keymap, &theme).render(area, &mut buf);
            ui::HelpOverlay::new(&keymap, &theme).render(area, &mut buf);
        }
    }
}

#[test]
fn an_empty_state_draws_without_gpus() {
    let mut state = AppState::new(StatusState::default());
    // A sample that found no GPU (before any, the panes say "sampling").
    state.apply_sample(1000, Vec::new(), BTreeMap::new());
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("no GPU found"));
    assert!(drawn.contains("no backend"));
}

#[test]
fn same_state_draws_the_same_screen() {
    let (_a, first) = training(2);
    let (_b, second) = training(2);
    let theme = Theme::colored();
    let a = draw(&first, &theme, 120, 40);
    let b = draw(&second, &theme, 120, 40);
    assert_eq!(a.backend().buffer(), b.backend().buffer());
}

// Single panes.

#[test]
fn breakdown_splits_driver_used_memory_into_four_parts() {
    let (_cluster, state) = training(1);
    let theme = Theme::colored();
    let terminal = draw_widget(BreakdownPane::new(&state, &theme), 120, 3);
    let drawn = text(terminal.backend().buffer());
    for part in [
        "allocated",
        // "unalloc" where the row is short.
        "unalloc",
        "context & other",
        "free",
    ] {
        assert!(drawn.contains(part), "{part}");
    }
    assert!(
        drawn.contains("pid 4242 (simulated training)"),
        "the source"
    );
    insta::assert_snapshot!("breakdown_120", terminal.backend());
}

#[test]
fn timeline_marks_empty_cache_and_oom_events() {
    let (_cluster, mut state) = training(1);
    let now = state.now_ms;
    let history = &mut state.gpus[0].history;
    history.mark(Marker {
        t_ms: now - 20_000,
        kind: MarkerKind::EmptyCache,
        count: 1,
    });
    history.mark(Marker {
        t_ms: now - 8_000,
        kind: MarkerKind::Oom,
        count: 1,
    });
    let theme = Theme::colored();
    let terminal = draw_widget(TimelinePane::new(&state, &theme), 70, 14);
    let buf = terminal.backend().buffer();
    let drawn = text(buf);
    assert!(drawn.contains("cache released ×1"), "{drawn}");
    assert!(drawn.contains("OOM ×1"), "{drawn}");
    let marks = buf.content().iter().filter(|c| c.symbol() == "┃").count();
    assert!(marks >= 5, "the OOM is a vertical line: {marks} cells");
    insta::assert_snapshot!("timeline_markers", terminal.backend());
    // One mark for 40 OOMs between two samples: the legend counts OOMs,
    // not marks.
    state.gpus[0].history.mark(Marker {
        t_ms: now - 4_000,
        kind: MarkerKind::Oom,
        count: 40,
    });
    let terminal = draw_widget(TimelinePane::new(&state, &theme), 70, 14);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("OOM ×41"), "{drawn}");
}

#[test]
fn a_timeline_on_a_scenario_device_plots_and_scales_that_device_only() {
    // The GPU at 62 GiB, its allocator releasing its cache at the end,
    // then the stress panel's 24 GiB scenario device for five samples.
    let mut state = AppState::new(status());
    let gpu_view = |frees: i64| {
        let stats = DeviceStats {
            num_device_free: frees,
            ..DeviceStats::default()
        };
        AllocatorView::new("vramtop stress panel".into(), Some(7), stats, Vec::new())
    };
    for t in 0..10u64 {
        state.apply_sample(
            t * 1000,
            vec![GpuReading::Ok(sample(0, 62 * GIB))],
            BTreeMap::from([(0, gpu_view(i64::from(t == 9)))]),
        );
    }
    let on_scenario =
        AllocatorView::new("scenario".into(), None, DeviceStats::default(), Vec::new())
            .on_device(24 * GIB, 5 * GIB);
    for t in 10..15u64 {
        state.apply_sample(
            t * 1000,
            vec![GpuReading::Ok(sample(0, 62 * GIB))],
            BTreeMap::from([(0, on_scenario.clone())]),
        );
    }
    let theme = Theme::colored();
    let drawn = text(
        draw_widget(TimelinePane::new(&state, &theme), 70, 14)
            .backend()
            .buffer(),
    );
    assert!(drawn.contains("GPU 0 · scenario device"), "{drawn}");
    // The scale is the scenario device's 5 GiB, not the GPU's 62 GiB.
    assert!(drawn.contains("5 GiB"), "{drawn}");
    assert!(
        !drawn.contains("80 GiB") && !drawn.contains("62"),
        "{drawn}"
    );
    // The GPU's release mark was not made on this device.
    assert!(!drawn.contains("released"), "{drawn}");
    // Back on the GPU, its own figures and mark are drawn again.
    state.apply_sample(
        15_000,
        vec![GpuReading::Ok(sample(0, 62 * GIB))],
        BTreeMap::from([(0, gpu_view(1))]),
    );
    let drawn = text(
        draw_widget(TimelinePane::new(&state, &theme), 70, 14)
            .backend()
            .buffer(),
    );
    assert!(!drawn.contains("scenario device"), "{drawn}");
    assert!(drawn.contains("80 GiB"), "{drawn}");
    assert!(drawn.contains("cache released ×1"), "{drawn}");
}

#[test]
fn in_a_two_or_three_row_chart_the_dashboards_marks_are_drawn_over_the_lines_full_height() {
    let (_cluster, mut state) = training(1);
    let now = state.now_ms;
    let history = &mut state.gpus[0].history;
    // Where the lines are: the trainer's memory is up 8 s before the end.
    history.mark(Marker {
        t_ms: now - 8_000,
        kind: MarkerKind::Oom,
        count: 1,
    });
    history.mark(Marker {
        t_ms: now - 4_000,
        kind: MarkerKind::EmptyCache,
        count: 1,
    });
    for ascii in [false, true] {
        let theme = Theme::colored().with_ascii(ascii);
        let (oom, release) = if ascii { ('!', '|') } else { ('┃', '┊') };
        for h in [6, 7] {
            let screen = text(
                draw_widget(TimelinePane::new(&state, &theme), 70, h)
                    .backend()
                    .buffer(),
            );
            // Between the title and the x axis; the y axis's labels and
            // line are left of the plot.
            let plot: Vec<Vec<char>> = screen
                .lines()
                .skip(1)
                .take_while(|l| !l.contains('└') && !l.contains("+--"))
                .map(|l| {
                    l.chars()
                        .skip_while(|&c| c != '│' && c != '|')
                        .skip(1)
                        .collect()
                })
                .collect();
            assert!(
                (2..=3).contains(&plot.len()),
                "height {h}: a chart of {} rows: {screen}",
                plot.len()
            );
            for mark in [oom, release] {
                let width = plot.iter().map(Vec::len).max().unwrap_or(0);
                let columns: Vec<usize> = (0..width)
                    .filter(|&x| plot.iter().any(|row| row.get(x) == Some(&mark)))
                    .collect();
                assert!(!columns.is_empty(), "height {h}: no {mark}: {screen}");
                for x in columns {
                    assert!(
                        plot.iter().all(|row| row.get(x) == Some(&mark)),
                        "height {h}, ascii {ascii}: the {mark} column {x} is broken by a line: \
                         {screen}"
                    );
                }
            }
        }
    }
}

#[test]
fn paused_timeline_says_so_and_ends_at_the_pause() {
    let (_cluster, mut state) = training(1);
    state.ui.paused = true;
    state.ui.paused_at_ms = Some(state.now_ms - 15_000);
    state.ui.zoom = 0;
    let theme = Theme::colored();
    let terminal = draw_widget(TimelinePane::new(&state, &theme), 60, 10);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("last 30s · PAUSED"), "{drawn}");
    assert!(drawn.contains("paused"), "the right edge is the pause");
    assert!(drawn.contains("-30s"), "the window starts 30 s before");
    insta::assert_snapshot!("timeline_paused", terminal.backend());
}

#[test]
fn fragmentation_shows_its_figures_and_a_histogram_of_free_blocks() {
    let (_cluster, state) = training(1);
    let theme = Theme::colored();
    let terminal = draw_widget(FragmentationPane::new(&state, &theme), 64, 12);
    let drawn = text(terminal.backend().buffer());
    let f = &state.gpus[0]
        .allocator
        .as_ref()
        .expect("the trainer's allocator")
        .fragmentation;
    assert!(drawn.contains(&format!(
        "fragmentation {}",
        ui::format::percent(f.fragmentation)
    )));
    assert!(drawn.contains("largest free block"));
    assert!(drawn.contains("non-releasable"));
    insta::assert_snapshot!("fragmentation_64x12", terminal.backend());
}

#[test]
fn segments_highlight_the_selected_block_and_describe_it() {
    let (_cluster, mut state) = training(1);
    state.ui.selected_block = 5;
    let theme = Theme::colored();
    let terminal = draw_widget(SegmentsPane::new(&state, &theme), 100, 8);
    let buf = terminal.backend().buffer();
    let drawn = text(buf);
    assert!(drawn.contains("block 6/"), "{drawn}");
    let highlighted = buf
        .content()
        .iter()
        .filter(|c| c.modifier == theme.selected.add_modifier)
        .count();
    assert!(highlighted > 0, "the selected block is highlighted");
    insta::assert_snapshot!("segments_selected_block", terminal.backend());

    // Past the last block: the last one stays selected.
    state.ui.selected_block = usize::MAX;
    let terminal = draw_widget(SegmentsPane::new(&state, &theme), 100, 8);
    let drawn = text(terminal.backend().buffer());
    let count = state.gpus[0].allocator.as_ref().map_or(0, |a| {
        a.layout.iter().map(|s| s.blocks.len()).sum::<usize>()
    });
    assert!(drawn.contains(&format!("block {count}/{count}")), "{drawn}");
}

/// Two processes on one GPU, the second a child of the first with its own
/// CUDA context, 2 GiB that no process accounts for, and the parent's
/// allocator visible.
fn process_tree_state() -> AppState {
    let mut s = sample(0, 20 * GIB);
    s.processes = Some(vec![
        process(100, Some(1), 14 * GIB, "python train.py --epochs 3"),
        process(
            101,
            Some(100),
            4 * GIB,
            "python train.py (DataLoader worker 0)",
        ),
    ]);
    let mut stats = DeviceStats::default();
    stats.allocated_bytes.all.current = (10 * GIB) as i64;
    stats.reserved_bytes.all.current = (12 * GIB) as i64;
    let view = AllocatorView::new("pid 100 (probe)".to_string(), Some(100), stats, Vec::new());
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::from([(0, view)]));
    state
}

#[test]
fn processes_tree_flags_child_contexts_and_lists_unattributed_memory() {
    let state = process_tree_state();
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let buf = terminal.backend().buffer();
    let parent = row_text(buf, 2);
    let child = row_text(buf, 3);
    let rest = row_text(buf, 4);
    assert!(
        parent.contains("100") && parent.contains("10.0/12.0 GiB"),
        "{parent}"
    );
    assert!(child.contains("└ own CUDA context! python"), "{child}");
    assert!(
        rest.contains("2.00 GiB") && rest.contains("unattributed"),
        "{rest}"
    );
    insta::assert_snapshot!("processes_tree", terminal.backend());
}

/// A key press through the dashboard's update, as the live loop has it.
fn key(state: &mut AppState, code: KeyCode, modifiers: KeyModifiers) {
    let _ =
        vramtop::app::update::handle_key(state, &Keymap::default(), KeyEvent::new(code, modifiers));
}

/// [`process_tree_state`] sampled from the driver (live processes, which
/// `K` may signal), Processes focused, its second line selected.
fn live_processes_selected() -> AppState {
    let mut state = process_tree_state();
    state.status.backend = "nvml".to_string();
    state.ui.focus = Pane::Processes;
    key(&mut state, KeyCode::Down, KeyModifiers::NONE);
    state
}

#[test]
fn the_processes_title_says_the_sort_column_and_its_direction_in_ascii_too() {
    let mut state = process_tree_state();
    let title = |state: &AppState, theme: &Theme| {
        let terminal = draw_widget(ProcessesPane::new(state, theme), 100, 5);
        row_text(terminal.backend().buffer(), 0)
    };
    let (colored, ascii) = (Theme::colored(), Theme::colored().with_ascii(true));
    // The tree ranks families by memory, not single lines: it says so.
    assert!(title(&state, &colored).contains("tree · families by memory ▼ "));
    state.ui.process_tree = false;
    assert!(title(&state, &colored).contains("flat · by memory ▼ "));
    state.ui.process_tree = true;
    key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    assert!(title(&state, &colored).contains("tree · by %SM ▼ "));
    let mut ascii_title = text(draw(&state, &ascii, 80, 24).backend().buffer());
    assert!(ascii_title.contains("tree - by %SM v "), "{ascii_title}");
    key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    assert!(title(&state, &colored).contains("tree · by %CPU ▼ "));
    key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    assert!(title(&state, &colored).contains("tree · by host memory ▼ "));
    key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    assert!(title(&state, &colored).contains("tree · by pid ▲ "));
    ascii_title = text(draw(&state, &ascii, 80, 24).backend().buffer());
    assert!(ascii_title.contains("tree - by pid ^ "), "{ascii_title}");
    key(&mut state, KeyCode::Char('S'), KeyModifiers::SHIFT);
    assert!(title(&state, &colored).contains("tree · by pid ▼ "));
    ascii_title = text(draw(&state, &ascii, 80, 24).backend().buffer());
    assert!(ascii_title.contains("tree - by pid v "), "{ascii_title}");
}

#[test]
fn the_processes_header_marks_the_sorted_column_with_its_arrow() {
    let mut state = process_tree_state();
    let header = |state: &AppState, theme: &Theme| {
        let terminal = draw_widget(ProcessesPane::new(state, theme), 120, 5);
        row_text(terminal.backend().buffer(), 1)
    };
    let colored = Theme::colored();
    let h = header(&state, &colored);
    assert!(h.contains("▼MEMORY"), "{h}");
    assert_eq!(h.matches(['▼', '▲']).count(), 1, "{h}");
    // No process has a usage figure here: those columns are not shown…
    assert!(!h.contains("%SM") && !h.contains("HOST-MEM"), "{h}");
    // Every column in turn, the arrow beside its name and nowhere else
    // (a usage column shows while the list is sorted by it).
    for marked in [
        "▼%SM",
        "▼%CPU",
        "▼HOST-MEM",
        "▲PID",
        "USER▲",
        "▲GPU",
        "COMMAND▲",
    ] {
        key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
        let h = header(&state, &colored);
        assert!(h.contains(marked), "{marked}: {h}");
        assert_eq!(h.matches(['▼', '▲']).count(), 1, "{h}");
    }
    // The columns keep their places: the GPU arrow takes a space.
    let plain = |h: &str| h.replace(['▼', '▲'], " ");
    key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    let memory = header(&state, &colored);
    while state.ui.process_sort.column != SortColumn::Gpu {
        key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    }
    let gpu = header(&state, &colored);
    assert_eq!(
        plain(&gpu).find("GPU"),
        plain(&memory).find("GPU"),
        "{gpu}\n{memory}"
    );
    key(&mut state, KeyCode::Char('S'), KeyModifiers::SHIFT);
    let ascii = header(&state, &Theme::colored().with_ascii(true));
    assert!(ascii.contains("vGPU"), "{ascii}");
}

#[test]
fn the_selected_process_is_highlighted_only_while_processes_has_the_focus() {
    let mut state = live_processes_selected();
    let theme = Theme::colored();
    let reversed = |state: &AppState, y: u16| {
        let terminal = draw_widget(ProcessesPane::new(state, &theme), 100, 5);
        let buf = terminal.backend().buffer();
        (0..100u16).all(|x| {
            buf.cell((x, y))
                .is_some_and(|c| c.modifier.contains(ratatui::style::Modifier::REVERSED))
        })
    };
    // Title, header, then pid 100 and the selected 101, across the pane.
    assert!(reversed(&state, 3), "the child's line, whole");
    assert!(!reversed(&state, 2));
    state.ui.focus = Pane::Gpus;
    assert!(!reversed(&state, 3), "unfocused, nothing is highlighted");
}

#[test]
fn at_80_columns_the_status_line_hints_the_focused_processes_panes_detail_kill_and_sort() {
    let mut state = live_processes_selected();
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    let status = screen.lines().last().unwrap_or_default().to_string();
    // "Enter detail", last of the pane's six in the table, was cut.
    assert!(
        status.contains("Enter detail") && status.contains("K kill") && status.contains("s sort"),
        "{status}"
    );
    // Elsewhere those keys give way to the global ones.
    state.ui.focus = Pane::Gpus;
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    let status = screen.lines().last().unwrap_or_default().to_string();
    assert!(
        !status.contains("K kill") && status.contains("Tab pane"),
        "{status}"
    );
}

#[test]
fn the_signal_prompt_names_every_gpu_the_process_is_on_and_its_memory_on_them() {
    // One trainer on GPUs 0-3 (3 GiB each): the signal ends it on all.
    let readings: Vec<GpuReading> = (0..4)
        .map(|g| {
            let mut s = sample(g, 10 * GIB);
            s.processes = Some(vec![process(300, None, 3 * GIB, "python ddp.py")]);
            GpuReading::Ok(s)
        })
        .collect();
    let mut state = AppState::new(status());
    state.apply_sample(1000, readings, BTreeMap::new());
    state.status.backend = "nvml".to_string();
    state.ui.focus = Pane::Processes;
    key(&mut state, KeyCode::Down, KeyModifiers::NONE);
    key(&mut state, KeyCode::Char('K'), KeyModifiers::SHIFT);
    let screen = text(draw(&state, &Theme::colored(), 120, 40).backend().buffer());
    assert!(screen.contains("Signal a process on GPUs 0–3"), "{screen}");
    assert!(
        screen.contains("Send SIGTERM to 300 python ddp.py (12.0 GiB)? y/n"),
        "{screen}"
    );
}

#[test]
fn a_lost_gpus_timeline_says_lost_and_gives_no_latest_values_as_if_now() {
    let mut state = AppState::new(status());
    for t in 0..5u64 {
        state.apply_sample(
            1000 * (t + 1),
            vec![GpuReading::Ok(sample(0, 15 * GIB))],
            BTreeMap::new(),
        );
    }
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    assert!(screen.contains("driver used 15.0 GiB"), "{screen}");
    assert!(!screen.contains("LOST"), "{screen}");
    state.apply_sample(
        6000,
        vec![GpuReading::Lost {
            index: 0,
            reason: "the GPU fell off the bus".to_string(),
            cause: vramtop::device::Unanswered::Lost,
        }],
        BTreeMap::new(),
    );
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    assert!(
        screen.contains("GPU 0 lost: the GPU fell off the bus"),
        "{screen}"
    );
    let title = screen
        .lines()
        .find(|l| l.contains("Timeline"))
        .unwrap_or_default();
    assert!(title.contains("LOST"), "{screen}");
    assert!(!screen.contains("driver used 15.0 GiB"), "{screen}");
}

#[test]
fn the_signal_prompt_for_pid_1_says_it_is_init_at_80x24() {
    // In a container vramtop shares with its trainer, the trainer can be
    // pid 1: signalling it is allowed, but the prompt says what it ends.
    let mut s = sample(0, 10 * GIB);
    s.processes = Some(vec![process(1, None, 3 * GIB, "python train.py")]);
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::new());
    state.status.backend = "nvml".to_string();
    state.ui.focus = Pane::Processes;
    key(&mut state, KeyCode::Char('K'), KeyModifiers::SHIFT);
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    assert!(
        screen.contains("pid 1 is init: ending it ends all in its namespace"),
        "{screen}"
    );
    assert!(
        screen.contains("Send SIGTERM to 1 python train.py (3.00 GiB)? y/n"),
        "{screen}"
    );
}

#[test]
fn the_signal_prompt_names_pid_command_and_memory_at_80x24_and_120x40() {
    let mut state = live_processes_selected();
    key(&mut state, KeyCode::Char('K'), KeyModifiers::SHIFT);
    let theme = Theme::colored();
    for (w, h, name) in [
        (80, 24, "signal_prompt_80x24"),
        (120, 40, "signal_prompt_120x40"),
    ] {
        let terminal = draw(&state, &theme, w, h);
        let screen = text(terminal.backend().buffer());
        assert!(
            screen.contains(
                "Send SIGTERM to 101 python train.py (DataLoader worker 0) (4.00 GiB)? y/n"
            ),
            "{screen}"
        );
        assert!(screen.contains("9 SIGKILL  i SIGINT"), "{screen}");
        assert!(screen.contains("Signal a process on GPU 0"), "{screen}");
        // The status line offers the prompt's keys, not the pane's.
        let status = screen.lines().last().unwrap_or_default();
        assert!(status.contains("y SIGTERM"), "{status}");
        assert!(!status.contains("Tab pane"), "{status}");
        insta::assert_snapshot!(name, terminal.backend());
    }
    // A command too long for the row gives way; pid, memory and keys stay.
    state.ui.signal_prompt = state.ui.signal_prompt.take().map(|mut p| {
        if let Some(t) = p.targets.first_mut() {
            t.command = format!("python {}", "x".repeat(200));
        }
        p
    });
    let screen = text(draw(&state, &theme, 80, 24).backend().buffer());
    assert!(screen.contains("Send SIGTERM to 101 python xx"), "{screen}");
    assert!(screen.contains("… (4.00 GiB)? y/n"), "{screen}");
}

/// Live processes on two GPUs, one with a 7-digit pid, Processes focused;
/// `tagged` of them tagged (Space on their lines, from the top).
fn tagged_state(tagged: &[usize]) -> AppState {
    let mut gpu0 = sample(0, 20 * GIB);
    gpu0.processes = Some(vec![
        process(100, Some(1), 9 * GIB, "python train.py --epochs 3"),
        process(4_194_001, Some(1), 5 * GIB, "python eval.py"),
        process(2345, Some(1), 2 * GIB, "jupyter-kernel"),
    ]);
    let mut gpu1 = sample(1, 20 * GIB);
    gpu1.processes = Some(vec![process(
        100,
        Some(1),
        3 * GIB,
        "python train.py --epochs 3",
    )]);
    let mut state = AppState::new(status());
    state.apply_sample(
        1000,
        vec![GpuReading::Ok(gpu0), GpuReading::Ok(gpu1)],
        BTreeMap::new(),
    );
    state.status.backend = "nvml".to_string();
    state.ui.focus = Pane::Processes;
    let mut at = 0;
    for &line in tagged {
        while at < line {
            key(&mut state, KeyCode::Down, KeyModifiers::NONE);
            at += 1;
        }
        key(&mut state, KeyCode::Char(' '), KeyModifiers::NONE);
    }
    state
}

#[test]
fn tagged_processes_are_marked_before_their_pid_and_counted_in_the_title_at_80x24() {
    // The lines by memory: 100 on GPU 0, 4194001, 100 on GPU 1, 2345.
    let state = tagged_state(&[0, 1]);
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    let screen = text(terminal.backend().buffer());
    assert!(screen.contains("2 tagged"), "{screen}");
    assert!(screen.contains("●4194001"), "{screen}");
    // Pid 100 is tagged on both its GPUs' lines: the signal ends it on both.
    assert_eq!(screen.matches("●100").count(), 2, "{screen}");
    assert!(!screen.contains("●2345"), "{screen}");
    // The status line offers the key that untags them.
    let status = screen.lines().last().unwrap_or_default();
    assert!(status.contains("Space tag"), "{status}");
    assert!(status.contains("Esc untag"), "{status}");
    insta::assert_snapshot!("processes_tagged_80x24", terminal.backend());
    // Without colour and in ASCII the mark is a character of its own.
    let mono = text(
        draw(&state, &Theme::monochrome(), 80, 24)
            .backend()
            .buffer(),
    );
    assert!(mono.contains("●4194001"), "{mono}");
    let ascii_theme = Theme::colored().with_ascii(true);
    let ascii = text(draw(&state, &ascii_theme, 80, 24).backend().buffer());
    assert!(
        ascii.contains("*4194001") && ascii.contains("*100"),
        "{ascii}"
    );
    assert!(ascii.is_ascii(), "{ascii}");
}

#[test]
fn without_tags_the_pid_column_keeps_its_width() {
    let state = tagged_state(&[]);
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    assert!(!screen.contains("tagged"), "{screen}");
    assert!(
        screen.lines().any(|l| l.starts_with("4194001 ")),
        "{screen}"
    );
}

#[test]
fn the_signal_prompt_for_tagged_processes_names_their_count_pids_and_memory_at_80x24() {
    let mut state = tagged_state(&[0, 1, 3]);
    key(&mut state, KeyCode::Char('K'), KeyModifiers::SHIFT);
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains("Signal 3 tagged processes on GPUs 0, 1"),
        "{screen}"
    );
    assert!(
        screen.contains("Send SIGTERM to 3 processes: 100, 4194001, 2345 (19.0 GiB)? y/n"),
        "{screen}"
    );
    insta::assert_snapshot!("signal_prompt_tagged_80x24", terminal.backend());
}

#[test]
fn a_signal_prompt_for_many_tagged_pids_counts_those_that_do_not_fit() {
    let mut gpu0 = sample(0, 80 * GIB);
    gpu0.processes = Some(
        (0..20u32)
            .map(|i| process(4_190_000 + i, Some(1), GIB, "python worker.py"))
            .collect(),
    );
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(gpu0)], BTreeMap::new());
    state.status.backend = "nvml".to_string();
    state.ui.focus = Pane::Processes;
    for _ in 0..20 {
        key(&mut state, KeyCode::Char(' '), KeyModifiers::NONE);
        key(&mut state, KeyCode::Down, KeyModifiers::NONE);
    }
    assert_eq!(state.ui.process_tags.len(), 20);
    key(&mut state, KeyCode::Char('K'), KeyModifiers::SHIFT);
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    let question = screen
        .lines()
        .find(|l| l.contains("Send SIGTERM to 20 processes: 4190000, "))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(question.contains(" more (20.0 GiB)? y/n"), "{question}");
    assert!(question.chars().count() <= 80, "{question}");
}

/// A GPU with a busy process (every usage figure known), one on its
/// first sample (no %CPU yet) and one with no usage figure at all.
fn usage_state() -> AppState {
    let mut s = sample(0, 20 * GIB);
    let mut busy = process(100, Some(1), 14 * GIB, "python train.py");
    busy.usage = ProcessUsage {
        sm_percent: Some(87),
        cpu_percent: Some(150.4),
        host_memory: Some(3 * GIB),
    };
    let mut fresh = process(200, Some(1), 4 * GIB, "python eval.py");
    fresh.usage = ProcessUsage {
        sm_percent: Some(0),
        cpu_percent: None,
        host_memory: Some(512 << 20),
    };
    let unknown = process(300, Some(1), GIB, "python other.py");
    s.processes = Some(vec![busy, fresh, unknown]);
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::new());
    state
}

/// The header and the process rows of the processes pane `width` wide.
fn usage_rows(state: &AppState, width: u16) -> Vec<String> {
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(state, &theme), width, 6);
    (1..5)
        .map(|y| row_text(terminal.backend().buffer(), y))
        .collect()
}

#[test]
fn processes_show_sm_cpu_and_host_memory_at_120_columns_and_dashes_where_unknown() {
    let rows = usage_rows(&usage_state(), 120);
    assert!(
        rows[0].contains("▼MEMORY     alloc/res  %SM  %CPU  HOST-MEM COMMAND"),
        "{rows:#?}"
    );
    assert!(
        rows[1].contains("14.0 GiB                 87   150  3.00 GiB python train.py"),
        "{rows:#?}"
    );
    assert!(
        rows[2].contains("4.00 GiB                  0     -   512 MiB python eval.py"),
        "{rows:#?}"
    );
    assert!(
        rows[3].contains("1.00 GiB                  -     -         - python other.py"),
        "{rows:#?}"
    );
}

#[test]
fn at_80_columns_host_memory_goes_first_unless_sorted_by() {
    let mut state = usage_state();
    let rows = usage_rows(&state, 80);
    assert!(rows[0].contains(" %SM  %CPU COMMAND"), "{rows:#?}");
    assert!(!rows[0].contains("HOST-MEM"), "{rows:#?}");
    assert!(rows[1].contains("  87   150 python train.py"), "{rows:#?}");
    while state.ui.process_sort.column != SortColumn::HostMemory {
        key(&mut state, KeyCode::Char('s'), KeyModifiers::NONE);
    }
    let rows = usage_rows(&state, 80);
    assert!(rows[0].contains("▼HOST-MEM"), "{rows:#?}");
    assert!(!rows[0].contains("%CPU"), "%CPU makes way: {rows:#?}");
    assert!(rows[1].contains("3.00 GiB"), "{rows:#?}");
    // Largest first, the unknown last.
    let pids: Vec<&str> = rows[1..]
        .iter()
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    assert_eq!(pids, ["100", "200", "300"], "{rows:#?}");
}

#[test]
fn processes_pane_says_n_a_for_a_gpu_whose_driver_cannot_list_them() {
    let mut s = sample(0, 20 * GIB);
    s.processes = None;
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::new());
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 4);
    let buf = terminal.backend().buffer();
    let row = row_text(buf, 2);
    assert!(
        row.contains("processes: n/a (not supported by the driver)"),
        "{row}"
    );
    // Unknown, not idle: neither "no GPU processes" nor all of "used"
    // as held by no process.
    let all: String = (0..4).map(|y| row_text(buf, y)).collect();
    assert!(!all.contains("no GPU processes"), "{all}");
    assert!(!all.contains("unattributed"), "{all}");
}

#[test]
fn processes_pane_words_an_unlisting_driver_whole_at_80_columns() {
    // Two GPUs, neither listing processes: at 80 columns the note read
    // "processes: n/a (not supported by t…".
    let unlisted = |i| {
        let mut s = sample(i, 20 * GIB);
        s.processes = None;
        GpuReading::Ok(s)
    };
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![unlisted(0), unlisted(1)], BTreeMap::new());
    for theme in [Theme::colored(), Theme::colored().with_ascii(true)] {
        let terminal = draw_widget(ProcessesPane::new(&state, &theme), 80, 4);
        let buf = terminal.backend().buffer();
        for y in 2..4 {
            let row = row_text(buf, y);
            assert!(row.contains("n/a: the driver does not list them"), "{row}");
            assert!(!row.contains('…') && !row.contains('~'), "{row}");
        }
    }
}

#[test]
fn processes_title_says_which_rows_show_when_some_are_out_of_sight() {
    // Three rows (parent, child, unattributed) in a pane with room for two.
    let mut state = process_tree_state();
    let theme = Theme::colored();
    let title = |state: &AppState, h| {
        let terminal = draw_widget(ProcessesPane::new(state, &theme), 100, h);
        row_text(terminal.backend().buffer(), 0)
    };
    assert!(
        title(&state, 4).contains("· rows 1–2 of 3"),
        "{}",
        title(&state, 4)
    );
    state.ui.process_scroll = 5;
    assert!(
        title(&state, 4).contains("· rows 2–3 of 3"),
        "{}",
        title(&state, 4)
    );
    assert!(!title(&state, 5).contains("rows"), "{}", title(&state, 5));
}

#[test]
fn processes_show_alloc_res_of_every_visible_allocator_not_only_the_breakdowns() {
    let mut state = process_tree_state();
    // A second allocator on the GPU (another trainer or probe): the
    // breakdown shows pid 100's, the row of 101 still has its own figures.
    state
        .allocator_figures
        .insert((0, 101), (Some(GIB), Some(2 * GIB)));
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let buf = terminal.backend().buffer();
    let (parent, child) = (row_text(buf, 2), row_text(buf, 3));
    assert!(parent.contains("10.0/12.0 GiB"), "{parent}");
    assert!(child.contains("1.00/2.00 GiB"), "{child}");
    // The same pid on another GPU is not this row's.
    state.allocator_figures.clear();
    state
        .allocator_figures
        .insert((1, 101), (Some(GIB), Some(2 * GIB)));
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let child = row_text(terminal.backend().buffer(), 3);
    assert!(!child.contains("1.00/2.00"), "{child}");
}

#[test]
fn breakdown_names_the_allocators_place_only_while_one_of_them_is_shown() {
    let theme = Theme::colored();
    let title = |pid: Option<u32>| {
        let mut state = AppState::new(status());
        state.simulated_allocators = BTreeMap::from([(0, vec![10, 11])]);
        let view = AllocatorView::new("shown".into(), pid, DeviceStats::default(), Vec::new());
        state.apply_sample(
            1000,
            vec![GpuReading::Ok(sample(0, 20 * GIB))],
            BTreeMap::from([(0, view)]),
        );
        let keymap = Keymap::default();
        let pane = BreakdownPane::new(&state, &theme).with_keymap(&keymap);
        let terminal = draw_widget(pane, 120, 6);
        row_text(terminal.backend().buffer(), 0)
    };
    let trainer = title(Some(11));
    assert!(trainer.contains("2 of 2 allocators, v: next"), "{trainer}");
    // The stress panel's allocator is none of them: no "? of 2", no v.
    let stress = title(None);
    assert!(
        !stress.contains("of 2") && !stress.contains('?'),
        "{stress}"
    );
}

#[test]
fn process_filter_shows_in_the_title_while_editing() {
    let mut state = process_tree_state();
    state.ui.process_filter = ProcessFilter::Editing("worker".to_string());
    state.ui.focus = Pane::Processes;
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("filter: worker▏"), "{drawn}");
    assert!(drawn.contains("101") && !drawn.contains(" 100 "), "{drawn}");

    state.ui.process_filter = ProcessFilter::Editing("nothing-matches".to_string());
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 100, 5);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("no process matches \"nothing-matches\""));
}

#[test]
fn mig_instances_are_indented_under_their_parent() {
    let mig = |index: u32, gi: u32| {
        let mut s = sample(index, 5 * GIB);
        s.name = format!("MIG 3g.40gb GI {gi}");
        s.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(0),
        });
        GpuReading::Ok(s)
    };
    let mut state = AppState::new(status());
    state.apply_sample(
        0,
        vec![
            GpuReading::Ok(sample(0, 10 * GIB)),
            GpuReading::Ok(sample(1, 10 * GIB)),
            mig(0, 1),
            mig(1, 2),
        ],
        BTreeMap::new(),
    );
    let theme = Theme::colored();
    let terminal = draw_widget(GpusPane::new(&state, &theme), 100, 6);
    let buf = terminal.backend().buffer();
    assert!(row_text(buf, 2).contains("0 Test GPU"));
    // Each led by its slot, the name's "MIG" said once.
    assert!(row_text(buf, 3).contains("└ MIG 0 3g.40gb GI 1"));
    assert!(row_text(buf, 4).contains("└ MIG 1 3g.40gb GI 2"));
    assert!(row_text(buf, 5).contains("1 Test GPU"));
    insta::assert_snapshot!("gpus_mig", terminal.backend());
}

#[test]
fn mig_devices_of_one_profile_differ_by_their_slot_at_80_columns() {
    // A real driver names every MIG device of a profile alike, the
    // parent's name in front: cut at 80 columns, the rows were identical.
    let mut parent = sample(0, 10 * GIB);
    parent.name = "NVIDIA H100 80GB HBM3".to_string();
    // As NVML lists it on the parent: with its GPU and compute instance.
    let mut on_mig = process(100, None, GIB, "python train.py");
    on_mig.gpu_instance_id = Some(7);
    on_mig.compute_instance_id = Some(0);
    parent.processes = Some(vec![on_mig.clone()]);
    let mut readings = vec![GpuReading::Ok(parent)];
    for slot in 0..3 {
        let mut s = sample(slot, GIB);
        s.name = "NVIDIA H100 80GB HBM3 MIG 1g.10gb".to_string();
        s.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(7 + slot),
            compute_instance_id: Some(0),
        });
        if slot == 0 {
            s.processes = Some(vec![on_mig.clone()]);
        }
        readings.push(GpuReading::Ok(s));
    }
    let mut state = AppState::new(status());
    state.status.backend = "nvml".to_string();
    state.apply_sample(0, readings, BTreeMap::new());
    let theme = Theme::colored();
    let terminal = draw_widget(GpusPane::new(&state, &theme), 80, 6);
    let buf = terminal.backend().buffer();
    for (row, slot) in [(3, 0), (4, 1), (5, 2)] {
        let line = row_text(buf, row);
        assert!(line.contains(&format!("└ MIG {slot} 1g.10gb ")), "{line}");
    }
    // The process detail at 80 columns: the MIG label, wider than the
    // label column, does not run into its figures; an unknown %SM reads
    // as the unknown memory beside it would.
    let state = detail_open(state, 0);
    let screen = text(draw(&state, &theme, 80, 24).backend().buffer());
    assert!(screen.contains("GPU 0 MIG GI 7 CI 0"), "{screen}");
    assert!(!screen.contains("MIG …"), "{screen}");
    assert!(screen.contains("%SM n/a"), "{screen}");
    assert!(!screen.contains("%SM -"), "{screen}");
}

#[test]
fn a_selected_mig_instance_is_named_with_its_parent_and_marks_only_its_parent_s_lines() {
    // A MIG row's index is its slot on the parent: slot 1 of GPU 0 is not
    // GPU 1, in the titles nor in the process list's mark.
    let mut on_gpu0 = sample(0, 10 * GIB);
    on_gpu0.processes = Some(vec![process(100, None, GIB, "python train.py")]);
    let mut on_gpu1 = sample(1, 10 * GIB);
    on_gpu1.processes = Some(vec![process(111, None, GIB, "python serve.py")]);
    let mut mig = sample(1, 5 * GIB);
    mig.name = "MIG 3g.40gb GI 2".to_string();
    mig.mig = Some(MigInfo {
        parent_index: 0,
        gpu_instance_id: Some(2),
        compute_instance_id: Some(0),
    });
    let mut state = AppState::new(status());
    state.apply_sample(
        0,
        vec![
            GpuReading::Ok(on_gpu0),
            GpuReading::Ok(on_gpu1),
            GpuReading::Ok(mig),
        ],
        BTreeMap::new(),
    );
    state.ui.selected_gpu = 2;
    assert_eq!(
        state.selected().map(|g| g.label()).as_deref(),
        Some("GPU 0 MIG 1")
    );
    let theme = Theme::colored();
    let breakdown = text(
        draw_widget(BreakdownPane::new(&state, &theme), 100, 5)
            .backend()
            .buffer(),
    );
    assert!(breakdown.contains("GPU 0 MIG 1"), "{breakdown}");
    let pointer = theme.glyphs().pointer;
    let processes = text(
        draw_widget(ProcessesPane::new(&state, &theme), 100, 5)
            .backend()
            .buffer(),
    );
    let line = |pid: &str| {
        processes
            .lines()
            .find(|l| l.trim_start().starts_with(pid))
            .unwrap_or_else(|| panic!("no line for {pid}: {processes}"))
            .to_string()
    };
    assert!(line("100").contains(&format!("{pointer}0")), "{processes}");
    assert!(!line("111").contains(pointer), "{processes}");
}

#[test]
fn status_line_shows_banner_error_dropped_samples_and_hints() {
    let (_cluster, mut state) = training(1);
    state.status.banner =
        Some("no NVIDIA driver found: showing simulated GPUs (vramtop doctor says why)".into());
    state.status.last_error = Some("NVML: timeout".into());
    state.status.dropped_samples = 3;
    state.ui.focus = Pane::Timeline;
    let theme = Theme::colored();
    let keymap = Keymap::default();
    let terminal = draw_widget(StatusLine::new(&state, &keymap, &theme), 120, 2);
    let drawn = text(terminal.backend().buffer());
    assert!(drawn.contains("3 dropped"));
    assert!(drawn.contains("error: NVML: timeout"));
    assert!(drawn.contains("no NVIDIA driver found"));
    assert!(drawn.contains("+ zoom in"), "hints follow the focused pane");
    assert!(drawn.contains("- zoom out"), "both ways of zooming");
    insta::assert_snapshot!("status_banner", terminal.backend());
}

/// The second row of the status line drawn `width` cells wide, trimmed:
/// where its banner or notice goes.
fn status_message_row(state: &AppState, width: u16) -> String {
    let (theme, keymap) = (Theme::colored(), Keymap::default());
    let terminal = draw_widget(StatusLine::new(state, &keymap, &theme), width, 2);
    text(terminal.backend().buffer())
        .lines()
        .nth(1)
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

#[test]
fn the_no_driver_banner_drops_its_details_to_fit_80_columns_and_is_whole_at_120() {
    let (_cluster, mut state) = training(1);
    // The banner `--backend auto` raises on a machine without a driver.
    let full =
        "showing 1 simulated GPU: no NVIDIA driver is installed (libnvidia-ml.so.1 not found)";
    state.status.banner = Some(full.into());
    let row = |w: u16| status_message_row(&state, w);
    assert_eq!(row(120), full);
    // 85 columns do not fit 80: the file name in parentheses goes first,
    // and nothing is cut mid-word.
    assert_eq!(
        row(80),
        "showing 1 simulated GPU: no NVIDIA driver is installed"
    );
    // Narrower still: the outcome, and where the reason is.
    assert_eq!(row(50), "showing 1 simulated GPU: vramtop doctor says why");
}

#[test]
fn a_driver_version_mismatch_banner_keeps_its_reason_in_short_at_80_columns() {
    let (_cluster, mut state) = training(1);
    // After a driver upgrade without a reboot: 83 columns without the
    // remedy in parentheses, so at 80 it read only "vramtop doctor says
    // why", while `--once` gave the reason.
    let full = "showing 1 simulated GPU: the NVIDIA kernel driver and libnvidia-ml versions \
                differ (reboot or reload the driver after an upgrade)";
    state.status.banner = Some(full.into());
    state.status.banner_short =
        Some("showing 1 simulated GPU: kernel driver and libnvidia-ml versions differ".into());
    let row = |w: u16| status_message_row(&state, w);
    assert_eq!(row(140), full);
    assert_eq!(
        row(80),
        "showing 1 simulated GPU: kernel driver and libnvidia-ml versions differ"
    );
    // Narrower still: doctor says why.
    assert_eq!(row(60), "showing 1 simulated GPU: vramtop doctor says why");
}

#[test]
fn simulated_processes_that_could_not_start_are_said_whole_at_120_and_short_at_80() {
    let (_cluster, mut state) = training(1);
    let not_started = |pid, trainer| NotStarted {
        gpu: 0,
        pid,
        trainer,
        context_bytes: 500 << 20,
        free_bytes: 24 << 20,
    };
    state.sim_not_started = vec![
        not_started(4244, false),
        not_started(4245, false),
        not_started(4246, false),
        not_started(4247, true),
    ];
    let row = |w: u16| status_message_row(&state, w);
    assert_eq!(
        row(120),
        "1 simulated training process and 3 DataLoader workers could not start: no room for a \
         500 MiB CUDA context"
    );
    assert_eq!(
        row(80),
        "1 trainer and 3 workers could not start: no room for a 500 MiB CUDA context"
    );
}

#[test]
fn status_line_says_one_sample_not_samples() {
    let (_cluster, mut state) = training(1);
    let theme = Theme::colored();
    let keymap = Keymap::default();
    for (n, words) in [(1, "│ 1 sample "), (2, "│ 2 samples ")] {
        state.status.samples = n;
        let terminal = draw_widget(StatusLine::new(&state, &keymap, &theme), 120, 1);
        let drawn = text(terminal.backend().buffer());
        assert!(drawn.contains(words), "{words}: {drawn}");
    }
}

#[test]
fn focused_pane_title_uses_the_focus_style_and_no_other_does() {
    let (_cluster, mut state) = training(2);
    let theme = Theme::colored();
    for focus in Pane::ALL {
        state.ui.focus = focus;
        let terminal = draw(&state, &theme, 120, 40);
        let buf = terminal.backend().buffer();
        let screen = ui::layout(buf.area, &state, &Keymap::default(), &theme);
        for &(pane, area) in &screen.panes {
            // The title starts one cell in (after the left border, if any)
            // with a space; its first letter follows.
            let offset = if area.x > 0 { 2 } else { 1 };
            let cell = buf.cell((area.x + offset, area.y)).expect("on screen");
            let focused = cell.bg == theme.title_focused.bg.unwrap_or(Color::Reset);
            assert_eq!(focused, pane == focus, "{pane:?} with {focus:?} focused");
        }
    }
}

#[test]
fn gpu_at_maps_screen_rows_to_gpus_past_the_header_mig_rows_and_scrolling() {
    let mig = |index: u32| {
        let mut s = sample(index, 5 * GIB);
        s.name = "MIG 3g.40gb".to_string();
        s.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(index),
            compute_instance_id: Some(0),
        });
        GpuReading::Ok(s)
    };
    let mut state = AppState::new(status());
    state.apply_sample(
        0,
        vec![
            GpuReading::Ok(sample(0, GIB)),
            GpuReading::Ok(sample(1, GIB)),
            mig(0),
        ],
        BTreeMap::new(),
    );
    // Title, header, GPU 0, its MIG instance (index 2 in `gpus`), GPU 1.
    let area = Rect::new(0, 10, 80, 5);
    let rows: Vec<Option<usize>> = (10..16).map(|r| ui::gpu_at(&state, area, r)).collect();
    assert_eq!(rows, vec![None, None, Some(0), Some(2), Some(1), None]);
    // Two rows: no header, scrolled so that the selected GPU 1 shows.
    state.ui.selected_gpu = 1;
    let short = Rect::new(0, 0, 80, 3);
    let rows: Vec<Option<usize>> = (0..3).map(|r| ui::gpu_at(&state, short, r)).collect();
    assert_eq!(rows, vec![None, Some(2), Some(1)]);
}

#[test]
fn breakdown_shows_a_reserved_above_used_as_it_is_and_flags_it() {
    let mut state = AppState::new(status());
    let mut stats = DeviceStats::default();
    stats.allocated_bytes.all.current = GIB as i64;
    stats.reserved_bytes.all.current = (3 * GIB / 2) as i64;
    let view = AllocatorView::new("probe pid 7".into(), Some(7), stats, Vec::new());
    state.apply_sample(
        1000,
        vec![GpuReading::Ok(sample(0, GIB))],
        BTreeMap::from([(0, view)]),
    );
    let theme = Theme::colored();
    let pane = draw_widget(BreakdownPane::new(&state, &theme), 120, 6);
    let drawn = text(pane.backend().buffer());
    assert!(
        drawn.contains("the allocator's reserved 1.50 GiB exceeds the GPU's used memory 1.00 GiB"),
        "{drawn}"
    );
    assert!(drawn.contains("CUDA_DEVICE_ORDER=PCI_BUS_ID"), "{drawn}");
    assert!(
        drawn.contains("reserved 1.50 GiB"),
        "the figure as it is: {drawn}"
    );
    assert!(
        !drawn.contains("context & other 0 B"),
        "no clamped figure that looks real: {drawn}"
    );
    insta::assert_snapshot!("breakdown_reserved_over_used_120x6", pane.backend());
}

#[test]
fn breakdown_free_is_the_drivers_free_and_what_it_keeps_for_itself_a_part_of_its_own() {
    // NVML's v2 figures: total = used + free + the driver's own
    // reservation (512 MiB here), so free is not total − used.
    let mut s = sample(0, 10 * GIB);
    s.memory_free = Some(70 * GIB - 512 * MIB);
    let theme = Theme::colored();
    let mut plain = AppState::new(status());
    plain.apply_sample(1000, vec![GpuReading::Ok(s.clone())], BTreeMap::new());
    let pane = draw_widget(BreakdownPane::new(&plain, &theme), 120, 5);
    let drawn = text(pane.backend().buffer());
    assert!(drawn.contains("░ free 69.5 GiB 87%"), "{drawn}");
    assert!(
        drawn.contains("╱ kept by the driver 512 MiB 0.6%"),
        "{drawn}"
    );
    assert!(
        !drawn.contains("free 70.0 GiB"),
        "not total − used: {drawn}"
    );
    // The bar ends in the driver's part, after free.
    let bar = row_text(pane.backend().buffer(), 1);
    assert!(bar.trim_end().ends_with("░╱"), "{bar}");

    let mut stats = DeviceStats::default();
    stats.allocated_bytes.all.current = (6 * GIB) as i64;
    stats.reserved_bytes.all.current = (9 * GIB) as i64;
    let view = AllocatorView::new("probe pid 7".into(), Some(7), stats, Vec::new());
    let mut state = AppState::new(status());
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::from([(0, view)]));
    let pane = draw_widget(BreakdownPane::new(&state, &theme), 120, 5);
    let drawn = text(pane.backend().buffer());
    for part in [
        "█ allocated 6.00 GiB",
        "▓ reserved but unallocated 3.00 GiB",
        "▒ context & other 1.00 GiB",
        "░ free 69.5 GiB 87%",
        "╱ kept by the driver 512 MiB 0.6%",
    ] {
        assert!(drawn.contains(part), "{part}: {drawn}");
    }
    insta::assert_snapshot!("breakdown_driver_held_120x5", pane.backend());
    // Given two legend rows at 80 columns the legend is compact: the
    // driver's part in its short form.
    let pane = draw_widget(BreakdownPane::new(&state, &theme), 80, 4);
    let drawn = text(pane.backend().buffer());
    assert!(drawn.contains("free 69.5 GiB"), "{drawn}");
    assert!(drawn.contains("╱ driver-held 512 MiB"), "{drawn}");
}

#[test]
fn dataloader_workers_that_touched_cuda_show_under_the_trainer_with_their_contexts() {
    let cluster = SimCluster::new(SimConfig {
        gpus: 1,
        training_processes: 1,
        dataloader_workers: 2,
        seed: 7,
        ..SimConfig::default()
    });
    let mut state = AppState::new(status());
    feed(&cluster, &mut state, 5);
    state.ui.focus = Pane::Processes;
    let theme = Theme::colored();
    let drawn = text(draw(&state, &theme, 120, 40).backend().buffer());
    assert!(
        drawn.contains("pt_data_worker 0 (touched CUDA; simulated)"),
        "{drawn}"
    );
    assert!(
        drawn.contains("pt_data_worker 1 (touched CUDA; simulated)"),
        "{drawn}"
    );
    let rows = vramtop::app::state::process_rows(
        &state
            .gpus
            .iter()
            .filter_map(|g| g.sample())
            .collect::<Vec<_>>(),
        true,
        "",
    );
    let workers: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.process
                .command
                .as_deref()
                .is_some_and(|c| c.starts_with("pt_data_worker"))
        })
        .collect();
    assert_eq!(workers.len(), 2);
    for w in workers {
        assert_eq!(
            (w.depth, w.own_context_in_child),
            (1, true),
            "under the trainer, flagged"
        );
        assert_eq!(
            w.process.used_memory,
            Some(500 << 20),
            "a context each, no tensor"
        );
    }
}

#[test]
fn the_timeline_axes_use_one_time_style_and_label_every_value_with_its_unit() {
    let (_cluster, mut state) = training(1);
    state.ui.zoom = vramtop::app::state::ZOOM_WINDOWS_S
        .iter()
        .position(|&w| w == 300)
        .expect("a 5 minute window");
    let theme = Theme::colored();
    let drawn = text(draw(&state, &theme, 120, 40).backend().buffer());
    assert!(drawn.contains("-5m") && drawn.contains("-2m30s"), "{drawn}");
    assert!(!drawn.contains("-150s"), "{drawn}");
    assert!(drawn.contains("0 B    │"), "the zero has its unit: {drawn}");
    assert!(drawn.contains("0.6 GiB│"), "the middle too: {drawn}");
}

/// Every row the help shows at `w`×`h`, scrolled from its top to its end,
/// as text; `stress` and `viewer` as `HelpOverlay` takes them.
fn all_help_rows(stress: bool, viewer: bool, w: u16, h: u16) -> Vec<String> {
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let limit = std::cell::Cell::new(0);
    let area = Rect::new(0, 0, w, h);
    let mut rows = Vec::new();
    let mut scroll = 0;
    loop {
        let mut buf = Buffer::empty(area);
        ui::HelpOverlay::new(&keymap, &theme)
            .with_stress(stress)
            .with_viewer(viewer)
            .with_scroll(scroll)
            .with_scroll_limit(&limit)
            .render(area, &mut buf);
        rows.extend(text(&buf).lines().map(str::to_string));
        if scroll >= limit.get() {
            return rows;
        }
        scroll += 1;
    }
}

#[test]
fn every_help_row_keeps_a_space_between_its_keys_and_its_text() {
    // The keys' column is one for every section: sized from one list
    // only, a wider key list of another ran into its text ("Esc Enter
    // cclose the comparison").
    let keymap = Keymap::default();
    let owned = |rows: Vec<(&'static str, String)>| rows;
    let dashboard: Vec<(&str, String)> = keymap
        .help_rows()
        .into_iter()
        .map(|r| (r.0, r.1.into_owned()))
        .collect();
    let stress: Vec<(&str, String)> = keymap
        .stress_help_rows(vramtop::app::state::StressView::Panel)
        .into_iter()
        .map(|(k, w)| (k, w.into_owned()))
        .chain(
            keymap
                .help_rows_beside_stress()
                .into_iter()
                .map(|r| (r.0, r.1.into_owned())),
        )
        .collect();
    let viewer = owned(
        keymap
            .viewer_help_rows()
            .into_iter()
            .map(|(k, w)| (k, w.into_owned()))
            .chain(
                keymap
                    .detail_help_rows(None)
                    .into_iter()
                    .chain(keymap.compare_help_rows(None))
                    .map(|(k, w, _)| (k, w.to_string())),
            )
            .collect(),
    );
    for (name, stress, viewer, keys) in [
        ("dashboard", false, false, dashboard),
        ("stress panel", true, false, stress),
        ("viewer", false, true, viewer),
    ] {
        for (w, h) in [(80, 24), (120, 40)] {
            let rows = all_help_rows(stress, viewer, w, h);
            for (keys, what) in &keys {
                let first_word = what.split_whitespace().next().unwrap_or_default();
                // The keys, at least one space, then the text's first word.
                let apart = rows.iter().any(|row| {
                    row.match_indices(keys).any(|(at, _)| {
                        let after = &row[at + keys.len()..];
                        after.starts_with(' ') && after.trim_start().starts_with(first_word)
                    })
                });
                assert!(
                    apart,
                    "{name} help at {w}x{h}: {keys:?} and {what:?} not apart:\n{}",
                    rows.join("\n")
                );
            }
        }
    }
}

#[test]
fn the_helps_headings_and_frame_name_the_keys_the_keymap_binds() {
    use vramtop::app::viewer::ViewerAction;
    let heading = |keymap: &Keymap, rows: u16| {
        let theme = Theme::colored();
        let area = Rect::new(0, 0, 160, rows);
        let mut buf = Buffer::empty(area);
        ui::HelpOverlay::new(keymap, &theme)
            .with_viewer(true)
            .render(area, &mut buf);
        text(&buf)
    };
    let default = heading(&Keymap::default(), 120);
    assert!(default.contains("In the block detail (Enter)"), "{default}");
    assert!(default.contains("In the A/B comparison (c)"), "{default}");
    let mut moved = Keymap::default();
    for b in &mut moved.viewer {
        match b.action {
            ViewerAction::BlockDetail => b.keys = "F5",
            ViewerAction::Compare => b.keys = "F6",
            _ => {}
        }
    }
    // The frame's keys too: what closes the help and what scrolls it.
    for b in &mut moved.bindings {
        match b.action {
            Action::Back => b.keys = "F3",
            Action::ToggleHelp => b.keys = "F4",
            Action::Down => b.keys = "F9 J",
            Action::PageDown => b.keys = "F10",
            _ => {}
        }
    }
    let short = heading(&moved, 40);
    assert!(short.contains(" F3 or F4 closes "), "{short}");
    assert!(short.contains(" F9 J F10 more · rows 1–"), "{short}");
    let default = heading(&Keymap::default(), 40);
    assert!(default.contains(" Esc or ? closes "), "{default}");
    assert!(default.contains(" ↓ j PgDn more · rows 1–"), "{default}");
    let help = heading(&moved, 120);
    assert!(help.contains("In the block detail (F5)"), "{help}");
    assert!(help.contains("In the A/B comparison (F6)"), "{help}");
    assert!(
        !help.contains("(Enter)") && !help.contains("comparison (c)"),
        "{help}"
    );
}

#[test]
fn the_helps_gpu_row_says_the_processes_pane_follows_the_selected_gpu() {
    for (w, h) in [(80, 24), (120, 40)] {
        let rows = all_help_rows(false, false, w, h);
        let gpu_row = rows
            .iter()
            .find(|r| r.contains("0…9"))
            .unwrap_or_else(|| panic!("no 0…9 row at {w}x{h}:\n{}", rows.join("\n")));
        // On one row, beside the definitions: the Processes pane follows
        // the GPU and marks its lines with the GPUs pane's pointer.
        assert!(
            gpu_row.contains("Processes follows (▶N)"),
            "{w}x{h}: {gpu_row}"
        );
        assert!(
            rows.iter()
                .any(|r| r.contains("Keys") && r.contains("What the words mean")),
            "{w}x{h}: the keys and definitions side by side:\n{}",
            rows.join("\n")
        );
    }
}

#[test]
fn with_one_gpu_and_one_allocator_the_help_dims_v_and_the_gpu_digits_and_the_hints_leave_them_out()
{
    let theme = Theme::colored();
    let (_cluster, mut state) = training(1);
    state.ui.overlay = Overlay::Help;
    let terminal = draw(&state, &theme, 120, 40);
    let buf = terminal.backend().buffer();
    // `v` answered "GPU 0 has one process with an allocator: nothing to
    // switch to", `1` "no GPU 1: GPUs here: 0", while the help offered them.
    for (keys, why) in [
        ("v", "[no 2nd process with an allocator]"),
        ("0…9", "[one GPU here]"),
    ] {
        let (row, dim) = help_row(buf, keys, &theme).unwrap_or_else(|| panic!("{keys}"));
        assert!(row.contains(why) && dim, "{keys}: {row}");
    }
    state.ui.overlay = Overlay::None;
    let hints = |state: &AppState| {
        let screen = text(draw(state, &theme, 120, 40).backend().buffer());
        screen.lines().last().unwrap_or_default().to_string()
    };
    let one = hints(&state);
    assert!(!one.contains("0…9 GPU") && one.contains("p pause"), "{one}");
    let (_cluster, two) = training(2);
    let two = hints(&two);
    assert!(two.contains("0…9 GPU"), "{two}");
    // Two allocators on the selected GPU: `v` acts, and is not dimmed.
    state.simulated_allocators = BTreeMap::from([(0, vec![10, 11])]);
    let view = AllocatorView::new("shown".into(), Some(10), DeviceStats::default(), Vec::new());
    state.apply_sample(
        1000,
        vec![GpuReading::Ok(sample(0, 20 * GIB))],
        BTreeMap::from([(0, view)]),
    );
    state.ui.overlay = Overlay::Help;
    let terminal = draw(&state, &theme, 120, 40);
    let (row, dim) = help_row(terminal.backend().buffer(), "v", &theme).expect("v");
    assert!(
        !row.lines().next().unwrap_or_default().contains('[') && !dim,
        "{row}"
    );
}

#[test]
fn a_breakdown_title_wider_than_its_pane_leaves_the_source_out_whole() {
    let theme = Theme::colored();
    let mut state = AppState::new(status());
    state.simulated_allocators = BTreeMap::from([(0, vec![4242, 4243, 4244])]);
    let view = AllocatorView::new(
        "pid 4242 (simulated training)".into(),
        Some(4242),
        DeviceStats::default(),
        Vec::new(),
    );
    state.apply_sample(
        1000,
        vec![GpuReading::Ok(sample(0, 20 * GIB))],
        BTreeMap::from([(0, view)]),
    );
    let keymap = Keymap::default();
    let title = |w| {
        let pane = BreakdownPane::new(&state, &theme).with_keymap(&keymap);
        let terminal = draw_widget(pane, w, 6);
        row_text(terminal.backend().buffer(), 0)
            .trim_end_matches(['─', ' '])
            .to_string()
    };
    // Cut at the border it read "… v: next · pid 4242 (simulated tra…";
    // the pid stays, the words after it give way whole.
    let narrow = title(80);
    assert!(
        narrow.ends_with("1 of 3 allocators, v: next · pid 4242 (simulated …"),
        "{narrow}"
    );
    assert!(title(70).ends_with("v: next · pid 4242 …"), "{}", title(70));
    let wide = title(120);
    assert!(wide.ends_with("pid 4242 (simulated training)"), "{wide}");
}

/// Words of a status line that are a lone "v", ">", "<" or "^": what
/// `--ascii` drew for an arrow key, naming a key that does something else
/// (`v`) or nothing.
fn lone_arrow_stand_ins(line: &str) -> Vec<String> {
    line.split_whitespace()
        .filter(|w| matches!(*w, "v" | ">" | "<" | "^" | "^/v" | "</>"))
        .map(str::to_string)
        .collect()
}

#[test]
fn ascii_mode_names_the_arrow_keys_of_the_dashboards_hints_in_words() {
    let (_cluster, mut state) = training(2);
    let ascii = Theme::colored().with_ascii(true);
    // Segments: ← and → step between blocks, and are hinted.
    state.ui.focus = Pane::Segments;
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = text(draw(&state, &ascii, w, h).backend().buffer());
        let hints = screen.lines().last().unwrap_or_default();
        assert_eq!(lone_arrow_stand_ins(hints), Vec::<String>::new(), "{hints}");
        for hint in ["Left prev", "Right next"] {
            assert!(hints.contains(hint), "{w}x{h}: {hint} in {hints}");
        }
        // The Unicode line keeps its arrows.
        let colored = text(draw(&state, &Theme::colored(), w, h).backend().buffer());
        let hints = colored.lines().last().unwrap_or_default();
        for hint in ["← prev", "→ next"] {
            assert!(hints.contains(hint), "{w}x{h}: {hint} in {hints}");
        }
    }
    // The help's keys and its scroll note ("↓ j PgDn more") alike.
    key(&mut state, KeyCode::Char('?'), KeyModifiers::NONE);
    let help = text(draw(&state, &ascii, 80, 24).backend().buffer());
    for named in ["Up k ", "Down j ", " Down j PgDn more"] {
        assert!(help.contains(named), "{named} in {help}");
    }
    assert!(!help.contains(" v j "), "{help}");
}

// The process detail (Enter in Processes).

/// `state` with Processes focused, the line `down` lines from the top
/// selected and Enter pressed on it.
fn detail_open(mut state: AppState, down: usize) -> AppState {
    state.ui.focus = Pane::Processes;
    key(&mut state, KeyCode::Home, KeyModifiers::NONE);
    for _ in 0..down {
        key(&mut state, KeyCode::Down, KeyModifiers::NONE);
    }
    key(&mut state, KeyCode::Enter, KeyModifiers::NONE);
    assert!(state.ui.process_detail.is_some(), "Enter opens the detail");
    state
}

#[test]
fn the_detail_of_a_simulated_process_says_its_pid_is_made_up_at_80x24_and_120x40() {
    let (_cluster, mut state) = training(1);
    // As the live dashboard has it: the trainer's allocator `c` writes.
    state.simulated_allocators = BTreeMap::from([(0, vec![4242])]);
    let state = detail_open(state, 0);
    let theme = Theme::colored();
    for (w, h, name) in [
        (80, 24, "process_detail_simulated_80x24"),
        (120, 40, "process_detail_simulated_120x40"),
    ] {
        let terminal = draw(&state, &theme, w, h);
        let screen = text(terminal.backend().buffer());
        assert!(screen.contains("Process 4242"), "{screen}");
        assert!(
            screen.contains("pid        4242 (simulated: its pid is made up)"),
            "{screen}"
        );
        // The whole command, which the pane cuts.
        assert!(
            screen.contains("python train.py --model gpt-1.3b --batch 8 (simulated)"),
            "{screen}"
        );
        // Not measured on a simulated GPU: "n/a", as the memory beside
        // it reads an unknown figure (the pane's narrow columns say "-").
        assert!(screen.contains("%SM n/a"), "{screen}");
        assert!(screen.contains("%CPU n/a, memory n/a"), "{screen}");
        assert!(screen.contains("allocator  allocated"), "{screen}");
        // Its allocator is the one shown: `c` captures it, from the table.
        assert!(screen.contains("keys       c snapshot"), "{screen}");
        // ... and where that leads for whose memory it is, inside the
        // popup's border (wrapped at 80 columns).
        let said: String = screen
            .lines()
            .skip_while(|l| !l.contains("keys       c snapshot"))
            .skip(1)
            .take(2)
            .map(|l| l.split('│').nth(1).unwrap_or_default().trim().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            said.starts_with(
                "whose memory it is: c captures its allocator, then o opens it and w shows the sites"
            ),
            "{screen}"
        );
        let status = screen.lines().last().unwrap_or_default();
        assert!(status.contains("Esc close"), "{status}");
        assert!(!status.contains("Tab pane"), "{status}");
        insta::assert_snapshot!(name, terminal.backend());
    }
    // ASCII and no colour draw it too.
    let ascii = Theme::monochrome().with_ascii(true);
    let terminal = draw(&state, &ascii, 80, 24);
    let buf = terminal.backend().buffer();
    assert!(common::screen::non_ascii(buf).is_empty());
    assert_no_colours(buf, "the process detail");
    assert!(text(buf).contains("Esc/Enter closes"));
}

/// [`live_processes_selected`] with the child's command longer than any
/// row and its usage measured.
fn child_with_its_own_context() -> AppState {
    let mut s = sample(0, 20 * GIB);
    let mut child = process(
        101,
        Some(100),
        4 * GIB,
        "python train.py --data /datasets/imagenet/train --workers 8 --prefetch 4 \
         --pin-memory --seed 1234 (DataLoader worker 0)",
    );
    child.usage = ProcessUsage {
        sm_percent: Some(3),
        cpu_percent: Some(97.5),
        host_memory: Some(3 * GIB / 2),
    };
    s.processes = Some(vec![
        process(100, Some(1), 14 * GIB, "python train.py --epochs 3"),
        child,
    ]);
    let mut state = AppState::new(status());
    state.status.backend = "nvml".to_string();
    state.apply_sample(1000, vec![GpuReading::Ok(s)], BTreeMap::new());
    state
}

#[test]
fn the_detail_of_a_child_with_its_own_context_names_its_gpu_parent_at_80x24_and_120x40() {
    let state = detail_open(child_with_its_own_context(), 1);
    let theme = Theme::colored();
    for (w, h, name) in [
        (80, 24, "process_detail_child_80x24"),
        (120, 40, "process_detail_child_120x40"),
    ] {
        let terminal = draw(&state, &theme, w, h);
        let screen = text(terminal.backend().buffer());
        assert!(
            screen.contains("parent     100 python train.py --epochs 3"),
            "{screen}"
        );
        assert!(screen.contains("own CUDA context!"), "{screen}");
        // Wrapped, the whole command is there: its end too.
        assert!(screen.contains("(DataLoader worker 0)"), "{screen}");
        assert!(screen.contains("memory 4.00 GiB, %SM 3%"), "{screen}");
        assert!(screen.contains("%CPU 97.5%, memory 1.50 GiB"), "{screen}");
        // A live process: K signals it.
        assert!(screen.contains("K signal it"), "{screen}");
        insta::assert_snapshot!(name, terminal.backend());
    }
}

#[test]
fn the_detail_of_a_process_that_ended_says_so_and_keeps_its_command() {
    let mut state = detail_open(child_with_its_own_context(), 1);
    let mut s = sample(0, 20 * GIB);
    s.processes = Some(vec![process(
        100,
        Some(1),
        14 * GIB,
        "python train.py --epochs 3",
    )]);
    state.apply_sample(2000, vec![GpuReading::Ok(s.clone())], BTreeMap::new());
    state.apply_sample(9000, vec![GpuReading::Ok(s)], BTreeMap::new());
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    assert!(
        screen.contains("ended 7s ago: no GPU lists pid 101 any more"),
        "{screen}"
    );
    assert!(screen.contains("(DataLoader worker 0)"), "{screen}");
    assert!(!screen.contains("K signal it"), "{screen}");
}

#[test]
fn the_process_detail_draws_at_every_small_size_without_panicking() {
    let state = detail_open(child_with_its_own_context(), 1);
    for theme in [Theme::colored(), Theme::monochrome().with_ascii(true)] {
        for w in 0..=45u16 {
            for h in 0..=14u16 {
                let _ = draw(&state, &theme, w, h);
            }
        }
    }
}

#[test]
fn without_an_allocator_under_a_driver_the_panes_say_to_attach_the_probe_not_simulated_training() {
    let mut state = AppState::new(status());
    state.status.backend = "nvml".to_string();
    state.apply_sample(
        0,
        vec![GpuReading::Ok(sample(0, 10 * GIB))],
        BTreeMap::new(),
    );
    let theme = Theme::colored();
    // The Fragmentation pane's width at 80x24, beside the Timeline.
    let frag = text(
        draw_widget(FragmentationPane::new(&state, &theme), 37, 8)
            .backend()
            .buffer(),
    );
    let segs = text(
        draw_widget(SegmentsPane::new(&state, &theme), 80, 4)
            .backend()
            .buffer(),
    );
    for drawn in [&frag, &segs] {
        // Under a driver there is no simulated training to show one.
        assert!(!drawn.contains("simulated"), "{drawn}");
        let words: String = drawn.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("python -m vramtop_probe train.py"),
            "{drawn}"
        );
        assert!(words.contains("docs/attach.md"), "{drawn}");
    }
    // On the simulation, its training processes do.
    state.status.backend = "sim".to_string();
    let frag = text(
        draw_widget(FragmentationPane::new(&state, &theme), 37, 8)
            .backend()
            .buffer(),
    );
    assert!(frag.contains("simulated training"), "{frag}");
}
