//! Render tests of the dashboard with a live probe attached: the probe's
//! real allocator figures in the breakdown, timeline and fragmentation
//! panes, the "[probe]" tag in the process pane, the reserved-but-
//! unallocated warning and the OOM note. The probe state is built by hand
//! (what the registry would hold) and goes through the same functions as
//! the live dashboard: `allocator_views_with_probes`, `apply_sample`,
//! `apply_probes`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use vramtop::alloc::{BlockInfo, BlockState, DeviceStats, PoolKind, SegmentInfo};
use vramtop::app::keymap::{Action, Keymap};
use vramtop::app::source::allocator_views_with_probes;
use vramtop::app::state::{AppState, MarkerKind, StatusState};
use vramtop::app::update::{Effect, handle_key};
use vramtop::device::{GpuProcess, GpuReading, GpuSample};
use vramtop::probe::pid::{PidSource, VisibleDevices};
use vramtop::probe::protocol::{Hello, Oom};
use vramtop::probe::registry::{DeviceData, OomEvent};
use vramtop::probe::{ProbeSnapshot, ProbeState, ProbeStatus};
use vramtop::ui::{
    BreakdownPane, FragmentationPane, ProcessesPane, SegmentsPane, Theme, TimelinePane,
};

use common::screen::{draw, draw_widget, text};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const PROBE_PID: u32 = 4321;

/// Five 2 GiB large segments, each 1228.8 MiB allocated and the rest free:
/// 6 GiB allocated, 10 GiB reserved, 4 GiB free inside split segments.
fn layout() -> Vec<SegmentInfo> {
    (0..5u64)
        .map(|i| {
            let address = 0x7f00_0000_0000 + i * 2 * GIB;
            let used = 6 * GIB / 5;
            SegmentInfo {
                device: 0,
                address,
                total_size: 2 * GIB,
                allocated_size: used,
                active_size: used,
                requested_size: used - MIB,
                stream: 0,
                segment_type: PoolKind::Large,
                segment_pool_id: (0, 0),
                is_expandable: false,
                blocks: vec![
                    BlockInfo {
                        address,
                        size: used,
                        requested_size: used - MIB,
                        state: BlockState::ActiveAllocated,
                    },
                    BlockInfo {
                        address: address + used,
                        size: 2 * GIB - used,
                        requested_size: 0,
                        state: BlockState::Inactive,
                    },
                ],
            }
        })
        .collect()
}

fn stats(ooms: i64) -> DeviceStats {
    let mut s = DeviceStats::default();
    s.allocated_bytes.all.current = (6 * GIB) as i64;
    s.reserved_bytes.all.current = (10 * GIB) as i64;
    s.active_bytes.all.current = (6 * GIB) as i64;
    s.inactive_split_bytes.all.current = (4 * GIB) as i64;
    s.inactive_split_bytes.large_pool.current = (4 * GIB) as i64;
    s.segment.all.current = 5;
    s.num_ooms = ooms;
    s
}

fn probe(ooms: u64) -> ProbeSnapshot {
    let oom_events = (1..=ooms)
        .map(|seq| OomEvent {
            seq,
            oom: Oom {
                time: Some(1_764_489_600.0),
                device: 0,
                alloc_bytes: Some(8 * GIB),
                device_allocated: Some(6 * GIB),
                device_free: Some(GIB),
                message: "tried to allocate 8.00 GiB on cuda:0 (6.00 GiB allocated, 1.00 GiB free)"
                    .to_string(),
                ..Oom::default()
            },
        })
        .collect();
    ProbeSnapshot {
        probes: vec![ProbeState {
            socket: PathBuf::from("/run/user/1000/vramtop/17.sock"),
            status: ProbeStatus::Connected,
            problem: None,
            hello: Some(Hello {
                pid: 17,
                host: Some("node7".to_string()),
                argv: vec!["train.py".into(), "--lr".into(), "3e-4".into()],
                torch: Some("2.5.1".to_string()),
                devices: vec![0],
                stats_interval_s: Some(1.0),
                segments_interval_s: Some(5.0),
                time: Some(1_764_489_600.0),
                version: 1,
                ..Hello::default()
            }),
            host_pid: Some(PROBE_PID),
            user: None,
            pid_source: Some(PidSource::PeerCred),
            host_command: None,
            visible_devices: VisibleDevices::All,
            devices: BTreeMap::from([(
                0,
                DeviceData {
                    stats: Some(stats(ooms as i64)),
                    segments: Some(layout()),
                    stats_time: Some(1_764_489_600.0),
                    // Sent with the stats, as the probe does on accepting:
                    // as new as they are (the layout's allocated bytes
                    // are 4 B short of the stats' 6 GiB).
                    segments_time: Some(1_764_489_600.0),
                    ..DeviceData::default()
                },
            )]),
            ooms: oom_events,
            oom_total: ooms,
            oom_by_device: BTreeMap::from([(0, ooms)]),
            lines: 3,
        }],
        skipped: Vec::new(),
    }
}

fn reading() -> GpuReading {
    let mut s = GpuSample::unknown(0, "Test GPU 80GB");
    s.memory_total = Some(80 * GIB);
    s.memory_used = Some(12 * GIB + GIB / 2);
    s.memory_free = Some(80 * GIB - (12 * GIB + GIB / 2));
    s.gpu_utilization = Some(87);
    s.temperature_c = Some(64);
    s.power_draw_mw = Some(420_000);
    s.power_limit_mw = Some(700_000);
    let proc_ = |pid, used, command: &str| GpuProcess {
        user: Some("alice".to_string()),
        command: Some(command.to_string()),
        parent_pid: Some(1),
        ..GpuProcess::new(pid, Some(used))
    };
    s.processes = Some(vec![
        proc_(PROBE_PID, 10 * GIB + GIB / 2, "python train.py --lr 3e-4"),
        proc_(999, 2 * GIB, "python infer.py"),
    ]);
    GpuReading::Ok(s)
}

/// 30 samples a second apart; the probe reports one OOM from sample 20 on.
fn attached() -> AppState {
    let mut state = AppState::new(StatusState {
        backend: "nvml".to_string(),
        banner: None,
        banner_short: None,
        sample_interval_ms: 1000,
        samples: 0,
        dropped_samples: 0,
        last_error: None,
        home_dir: None,
    });
    for i in 0..30u64 {
        let snapshot = probe(u64::from(i >= 20));
        let now = i * 1000;
        state.apply_sample(
            now,
            vec![reading()],
            allocator_views_with_probes(None, &snapshot, &BTreeMap::new()),
        );
        state.apply_probes(now, &snapshot);
    }
    state
}

#[test]
fn attached_probe_screen_matches_its_snapshot() {
    let state = attached();
    let terminal = draw(&state, &Theme::colored(), 120, 40);
    insta::assert_snapshot!("probe_screen_120x40", terminal.backend());
}

#[test]
fn breakdown_shows_the_probes_figures_and_the_cached_free_warning() {
    let state = attached();
    let theme = Theme::colored();
    let terminal = draw_widget(BreakdownPane::new(&state, &theme), 100, 8);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains("pid 4321 (probe, pid 17 in its namespace"),
        "{screen}"
    );
    assert!(screen.contains("allocated 6.00 GiB"), "{screen}");
    assert!(
        screen.contains("warning: 4.00 GiB reserved but unallocated (40%"),
        "{screen}"
    );
    assert!(screen.contains("expandable_segments:True"), "{screen}");
    insta::assert_snapshot!("probe_breakdown_100x8", terminal.backend());
}

#[test]
fn the_attached_process_is_tagged_and_the_other_is_not() {
    let state = attached();
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    let row = |pid: &str| {
        screen
            .lines()
            .find(|l| l.contains(pid))
            .unwrap_or_default()
            .to_string()
    };
    // The fixture's probe reported one OOM.
    assert!(
        row("4321").contains("[probe · 1 OOM] python train.py"),
        "{screen}"
    );
    assert!(!row(" 999").contains("[probe"), "{screen}");
}

#[test]
fn a_probe_oom_marks_the_timeline_once_and_reaches_the_status_line() {
    let state = attached();
    let markers: Vec<(u64, MarkerKind)> = state.gpus[0]
        .history
        .markers
        .iter()
        .map(|m| (m.t_ms, m.kind))
        .collect();
    // Seen in the event and in num_ooms at the same sample: one marker.
    assert_eq!(markers, vec![(20_000, MarkerKind::Oom)]);
    let note = state
        .probes
        .status_note()
        .map(vramtop::ui::probe_note)
        .expect("a recent OOM");
    assert!(
        note.starts_with("OOM in pid 4321 on GPU 0: tried to allocate 8.00 GiB"),
        "{note}"
    );
}

#[test]
fn an_oom_from_before_the_dashboard_without_a_snapshot_is_counted_and_noted_as_earlier() {
    // The dashboard connects after the OOM: the probe's hello is followed
    // by its last OOM marked "earlier", with no snapshot (history off).
    let state = attached_with(|_| {
        let mut s = probe(1);
        s.probes[0].ooms[0].oom.earlier = true;
        s
    });
    // Its time is not now: no mark, and the status note says so...
    assert!(state.gpus[0].history.markers.is_empty());
    let note = state
        .probes
        .status_note()
        .map(vramtop::ui::probe_note)
        .expect("a note of the earlier OOM");
    assert!(
        note.starts_with(
            "OOM in pid 4321 on GPU 0, before vramtop connected: tried to allocate 8.00 GiB"
        ),
        "{note}"
    );
    // ...and the process says it had one.
    let (screen, row) = processes_row(&state, "4321");
    assert!(row.contains("[probe · 1 OOM] python train.py"), "{screen}");
}

#[test]
fn the_processes_pane_counts_every_oom_of_a_probed_process() {
    let state = attached_with(|i| probe(if i >= 20 { 3 } else { 0 }));
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains("[probe · 3 OOMs] python train.py"),
        "{screen}"
    );
    let quiet = attached_with(|_| probe(0));
    let terminal = draw_widget(ProcessesPane::new(&quiet, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    assert!(screen.contains("[probe] python train.py"), "{screen}");
}

#[test]
fn a_disconnected_probe_leaves_the_gpu_to_telemetry_and_says_so() {
    let mut state = attached();
    let mut gone = probe(1);
    gone.probes[0].status = ProbeStatus::Disconnected("connection closed".to_string());
    state.apply_sample(
        30_000,
        vec![reading()],
        allocator_views_with_probes(None, &gone, &BTreeMap::new()),
    );
    state.apply_probes(30_000, &gone);
    assert!(
        state.gpus[0].allocator.is_none(),
        "stale figures are not shown"
    );
    assert!(state.probes.attached_pids().is_empty());
    // The OOM note is still recent; after it, the disconnection is said.
    state.apply_probes(85_000, &gone);
    assert_eq!(
        state
            .probes
            .status_note()
            .map(vramtop::ui::probe_note)
            .as_deref(),
        Some("probe pid 4321: disconnected: connection closed")
    );
}

#[test]
fn extreme_probe_figures_draw_without_panicking() {
    // What a buggy or hostile probe may send and the parser accepts:
    // counters at the ends of i64, one segment of 2^63 bytes.
    let mut snapshot = probe(0);
    let d = snapshot.probes[0].devices.get_mut(&0).expect("device 0");
    let mut s = DeviceStats::default();
    s.allocated_bytes.all.current = i64::MAX;
    s.reserved_bytes.all.current = i64::MIN;
    s.active_bytes.all.current = -1;
    s.inactive_split_bytes.large_pool.current = i64::MAX;
    s.segment.all.current = i64::MAX;
    s.num_ooms = i64::MAX;
    d.stats = Some(s);
    let half = 1u64 << 63;
    d.segments = Some(vec![SegmentInfo {
        device: 0,
        address: 0,
        total_size: half,
        allocated_size: half,
        active_size: half,
        requested_size: u64::MAX,
        stream: u64::MAX,
        segment_type: PoolKind::Large,
        segment_pool_id: (0, 0),
        is_expandable: true,
        blocks: vec![
            BlockInfo {
                address: 0,
                size: half - 1,
                requested_size: u64::MAX,
                state: BlockState::ActiveAllocated,
            },
            BlockInfo {
                address: half - 1,
                size: 1,
                requested_size: 0,
                state: BlockState::Inactive,
            },
        ],
    }]);
    let mut state = attached();
    for t in [30_000, 31_000] {
        state.apply_sample(
            t,
            vec![reading()],
            allocator_views_with_probes(None, &snapshot, &BTreeMap::new()),
        );
        state.apply_probes(t, &snapshot);
    }
    for (w, h) in [(120, 40), (80, 24), (40, 10), (20, 5)] {
        draw(&state, &Theme::colored(), w, h);
    }
}

/// `probe(0)` plus a second process on GPU 0 (host pid 5555) whose
/// allocator holds 2 GiB and has seen 3 OOMs and 40 cudaFree calls.
fn two_probes_on_one_gpu() -> ProbeSnapshot {
    let mut snapshot = probe(0);
    let mut other = snapshot.probes[0].clone();
    other.socket = PathBuf::from("/run/user/1000/vramtop/18.sock");
    other.host_pid = Some(5555);
    if let Some(h) = other.hello.as_mut() {
        h.pid = 18;
        h.argv = vec!["eval.py".into()];
    }
    let mut s = DeviceStats::default();
    s.allocated_bytes.all.current = (2 * GIB) as i64;
    s.reserved_bytes.all.current = (2 * GIB) as i64;
    s.num_ooms = 3;
    s.num_device_free = 40;
    let d = other.devices.get_mut(&0).expect("device 0");
    d.stats = Some(s);
    d.segments = Some(Vec::new());
    snapshot.probes.push(other);
    snapshot
}

fn breakdown_text(state: &AppState) -> String {
    let theme = Theme::colored();
    let keymap = Keymap::default();
    let pane = BreakdownPane::new(state, &theme).with_keymap(&keymap);
    let terminal = draw_widget(pane, 160, 8);
    text(terminal.backend().buffer())
}

#[test]
fn v_switches_the_allocator_between_two_probed_processes_on_one_gpu() {
    let mut state = attached();
    let both = two_probes_on_one_gpu();
    let sample_at = |state: &mut AppState, t: u64| {
        let views = allocator_views_with_probes(None, &both, &state.ui.allocator_pick);
        state.apply_sample(t, vec![reading()], views);
        state.apply_probes(t, &both);
    };
    sample_at(&mut state, 30_000);
    assert_eq!(state.probes.pids_on(0), vec![PROBE_PID, 5555]);
    let pid_shown = |s: &AppState| s.gpus[0].allocator.as_ref().and_then(|a| a.pid);
    assert_eq!(
        pid_shown(&state),
        Some(PROBE_PID),
        "the lowest pid's by default"
    );
    let screen = breakdown_text(&state);
    assert!(screen.contains("1 of 2 probes, v: next"), "{screen}");

    let keymap = Keymap::default();
    let v = KeyEvent::new(KeyCode::Char('v'), KeyModifiers::NONE);
    handle_key(&mut state, &keymap, v);
    let screen = breakdown_text(&state);
    assert!(
        screen.contains("v: pid 5555 from the next sample"),
        "{screen}"
    );
    let markers_before = state.gpus[0].history.markers.len();
    sample_at(&mut state, 31_000);
    assert_eq!(pid_shown(&state), Some(5555));
    assert_eq!(
        state.gpus[0].allocator.as_ref().map(|a| a.allocated()),
        Some(2 * GIB)
    );
    let screen = breakdown_text(&state);
    assert!(screen.contains("2 of 2 probes, v: next"), "{screen}");
    assert!(screen.contains("pid 5555 (probe"), "{screen}");
    // The other process's 3 OOMs and 40 cudaFrees are not events of this
    // sample: the view changed hands.
    assert_eq!(state.gpus[0].history.markers.len(), markers_before);

    handle_key(&mut state, &keymap, v);
    sample_at(&mut state, 32_000);
    assert_eq!(pid_shown(&state), Some(PROBE_PID), "v wraps around");
}

#[test]
fn the_breakdown_offers_no_v_pick_while_the_stress_panel_owns_it() {
    let mut state = attached();
    let both = two_probes_on_one_gpu();
    let views = allocator_views_with_probes(None, &both, &state.ui.allocator_pick);
    state.apply_sample(30_000, vec![reading()], views);
    state.apply_probes(30_000, &both);
    let keymap = Keymap::default();
    handle_key(
        &mut state,
        &keymap,
        KeyEvent::new(KeyCode::Char('v'), KeyModifiers::NONE),
    );
    let screen = breakdown_text(&state);
    assert!(
        screen.contains("v: pid 5555 from the next sample"),
        "{screen}"
    );
    // The panel opened on GPU 0: its allocator is the one shown there and
    // its `v` verifies tensors, so the pick waits and the title says
    // nothing of `v`.
    handle_key(
        &mut state,
        &keymap,
        KeyEvent::new(KeyCode::F(2), KeyModifiers::NONE),
    );
    state.stress.gpu = Some(0);
    let screen = breakdown_text(&state);
    assert!(!screen.contains("from the next sample"), "{screen}");
    assert!(!screen.contains("v: "), "{screen}");
    // Closed, the pick is still offered as the dashboard's.
    handle_key(
        &mut state,
        &keymap,
        KeyEvent::new(KeyCode::F(2), KeyModifiers::NONE),
    );
    let screen = breakdown_text(&state);
    assert!(
        screen.contains("v: pid 5555 from the next sample"),
        "{screen}"
    );
}

#[test]
fn the_lowest_pid_is_shown_by_default_whatever_the_socket_names_sort_as() {
    // "11144.sock" sorts before "9180.sock" by path; the pids order them
    // the other way, and the default is the first of `v`'s (pid) order.
    let mut both = two_probes_on_one_gpu();
    both.probes[0].socket = PathBuf::from("/run/user/1000/vramtop/11144.sock");
    both.probes[0].host_pid = Some(11144);
    both.probes[1].socket = PathBuf::from("/run/user/1000/vramtop/9180.sock");
    both.probes[1].host_pid = Some(9180);
    let mut state = attached();
    let views = allocator_views_with_probes(None, &both, &state.ui.allocator_pick);
    state.apply_sample(30_000, vec![reading()], views);
    state.apply_probes(30_000, &both);
    assert_eq!(state.probes.pids_on(0), vec![9180, 11144]);
    let pid_shown = state.gpus[0].allocator.as_ref().and_then(|a| a.pid);
    assert_eq!(pid_shown, Some(9180));
    let screen = breakdown_text(&state);
    assert!(screen.contains("1 of 2 probes, v: next"), "{screen}");
}

#[test]
fn a_probe_shown_beside_simulated_trainers_is_first_in_vs_order() {
    // Trainers with lower pids than the probe: the probe is shown (real
    // figures win) and `v` starts there, not at the last of its order.
    let mut state = attached();
    state.simulated_allocators = std::collections::BTreeMap::from([(0, vec![200, 100])]);
    assert_eq!(state.allocator_pids_on(0), vec![PROBE_PID, 100, 200]);
    let screen = breakdown_text(&state);
    assert!(screen.contains("1 of 3 allocators, v: next"), "{screen}");
}

#[test]
fn v_does_nothing_with_a_single_probe_on_the_gpu_and_says_so() {
    let mut state = attached();
    let effect = handle_key(
        &mut state,
        &Keymap::default(),
        KeyEvent::new(KeyCode::Char('v'), KeyModifiers::NONE),
    );
    assert_eq!(effect, Effect::Redraw, "the notice is drawn");
    assert_eq!(
        state.ui.notice.as_deref(),
        Some("v: GPU 0 has one probed process: nothing to switch to")
    );
    assert!(state.ui.allocator_pick.is_empty());
    assert!(!breakdown_text(&state).contains("v: next"));
}

/// `attached()` then one sample of `snapshot`.
fn after(snapshot: &ProbeSnapshot) -> AppState {
    let mut state = attached();
    state.apply_sample(
        30_000,
        vec![reading()],
        allocator_views_with_probes(None, snapshot, &BTreeMap::new()),
    );
    state.apply_probes(30_000, snapshot);
    state
}

#[test]
fn unknown_requested_sizes_show_internal_free_as_na_and_the_rest_as_usual() {
    let mut snapshot = probe(0);
    let d = snapshot.probes[0].devices.get_mut(&0).expect("device 0");
    d.requested_unknown = true;
    let state = after(&snapshot);
    let theme = Theme::colored();
    let terminal = draw_widget(FragmentationPane::new(&state, &theme), 100, 8);
    let screen = text(terminal.backend().buffer());
    assert!(screen.contains("internal free n/a"), "{screen}");
    assert!(screen.contains("external free 4.00 GiB"), "{screen}");
    let known = after(&probe(0));
    let terminal = draw_widget(FragmentationPane::new(&known, &theme), 100, 8);
    let screen = text(terminal.backend().buffer());
    assert!(screen.contains("internal free 5.00 MiB"), "{screen}");
}

#[test]
fn an_unknown_reserved_total_splits_no_breakdown() {
    let mut snapshot = probe(0);
    let d = snapshot.probes[0].devices.get_mut(&0).expect("device 0");
    d.unknown_stats = vec!["reserved_bytes.all.current".to_string()];
    let state = after(&snapshot);
    let theme = Theme::colored();
    let terminal = draw_widget(BreakdownPane::new(&state, &theme), 100, 8);
    let screen = text(terminal.backend().buffer());
    assert!(!screen.contains("allocated 6.00 GiB"), "{screen}");
    assert!(!screen.contains("reserved but unallocated"), "{screen}");
    let last = state.gpus[0].history.points.back().expect("a point");
    assert_eq!(last.reserved, None, "the timeline has no made-up reserved");
    assert_eq!(last.allocated, Some(6 * GIB));
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    assert!(screen.contains("/n/a"), "{screen}");
}

/// `probe(0)` whose last segments came at `segments_time` and last stats
/// at `stats_time` (Unix seconds, the probe's clock), the stats saying
/// `reserved` and `allocated` bytes.
fn probe_at(
    segments_time: Option<f64>,
    stats_time: Option<f64>,
    reserved: u64,
    allocated: u64,
) -> ProbeSnapshot {
    let mut snapshot = probe(0);
    let d = snapshot.probes[0].devices.get_mut(&0).expect("device 0");
    d.segments_time = segments_time;
    d.stats_time = stats_time;
    let s = d.stats.as_mut().expect("stats");
    s.reserved_bytes.all.current = reserved as i64;
    s.allocated_bytes.all.current = allocated as i64;
    s.active_bytes.all.current = allocated as i64;
    snapshot
}

/// The fragmentation pane at 36×9 (its size beside the timeline at
/// 80×24), as text, and the style of the cell where `value` starts.
fn fragmentation_at_80x24(
    state: &AppState,
    value: &str,
) -> (String, Option<ratatui::style::Style>) {
    let theme = Theme::colored();
    let terminal = draw_widget(FragmentationPane::new(state, &theme).beside(), 37, 9);
    let buf = terminal.backend().buffer();
    let screen = text(buf);
    let style = screen.lines().enumerate().find_map(|(y, line)| {
        let col = line.find(value)?;
        let x = line[..col].chars().count();
        buf.cell((x as u16, y as u16)).map(|c| c.style())
    });
    (screen, style)
}

const T: f64 = 1_764_489_600.0;

#[test]
fn segments_older_than_the_stats_and_other_than_them_are_dated_and_dimmed() {
    // The segments say 10 GiB reserved, 4 GiB of it free; four seconds
    // later the stats say 7 GiB reserved, 1 GiB of it free: the pane's
    // "ext free 4.00 GiB" beside the breakdown's "reserved but unallocated 1.00
    // GiB" is the allocator of four seconds ago, and says so.
    let state = after(&probe_at(Some(T - 4.2), Some(T), 7 * GIB, 6 * GIB));
    let (screen, style) = fragmentation_at_80x24(&state, "4.00 GiB");
    assert!(screen.contains("segments 4 s old"), "{screen}");
    assert!(
        screen.contains("reserved then 10.0 GiB, now 7.00 GiB"),
        "{screen}"
    );
    assert!(screen.contains("ext free 4.00 GiB"), "{screen}");
    let theme = Theme::colored();
    assert_eq!(style.and_then(|s| s.fg), theme.dim.fg, "{screen}");
    // Narrower, the figure now (in the breakdown and the process row)
    // gives way rather than be cut.
    let terminal = draw_widget(FragmentationPane::new(&state, &theme).beside(), 31, 9);
    let narrow = text(terminal.backend().buffer());
    assert!(narrow.contains("│reserved then 10.0 GiB "), "{narrow}");
    assert!(!narrow.contains("now"), "{narrow}");
    assert_ne!(theme.dim.fg, theme.text.fg);
    // The title of the segment map says it too where it has the room;
    // at 80 columns its legend stays rather than come and go with each
    // segments message.
    let terminal = draw_widget(SegmentsPane::new(&state, &theme), 120, 6);
    let map = text(terminal.backend().buffer());
    assert!(map.contains("segments 4 s old · 5 segments"), "{map}");
    assert!(map.contains("allocated ▓ free"), "{map}");
    let terminal = draw_widget(SegmentsPane::new(&state, &theme), 80, 6);
    let map = text(terminal.backend().buffer());
    assert!(map.contains("allocated ▓ free"), "{map}");
}

#[test]
fn segments_older_than_the_stats_that_agree_with_them_are_dated_not_dimmed() {
    let state = after(&probe_at(Some(T - 3.0), Some(T), 10 * GIB, 6 * GIB / 5 * 5));
    let (screen, style) = fragmentation_at_80x24(&state, "4.00 GiB");
    assert!(screen.contains("segments 3 s old"), "{screen}");
    assert!(!screen.contains("then"), "{screen}");
    let theme = Theme::colored();
    assert!(style.is_some(), "{screen}");
    assert_ne!(style.and_then(|s| s.fg), theme.dim.fg, "{screen}");
}

#[test]
fn segments_less_than_a_second_older_are_marked_only_where_they_differ() {
    let agree = after(&probe_at(Some(T - 0.4), Some(T), 10 * GIB, 6 * GIB / 5 * 5));
    let (screen, _) = fragmentation_at_80x24(&agree, "4.00 GiB");
    assert!(!screen.contains("old"), "{screen}");
    let differ = after(&probe_at(Some(T - 0.4), Some(T), 7 * GIB, 6 * GIB));
    let (screen, _) = fragmentation_at_80x24(&differ, "4.00 GiB");
    assert!(screen.contains("segments <1 s old"), "{screen}");
    assert!(screen.contains("reserved then 10.0 GiB"), "{screen}");
}

#[test]
fn segments_newer_than_the_stats_are_not_marked() {
    let state = after(&probe_at(Some(T + 0.5), Some(T), 7 * GIB, 6 * GIB));
    let (screen, _) = fragmentation_at_80x24(&state, "4.00 GiB");
    assert!(!screen.contains("old"), "{screen}");
    assert!(!screen.contains("then"), "{screen}");
}

#[test]
fn segments_without_times_that_differ_from_the_stats_are_not_current() {
    let state = after(&probe_at(None, None, 7 * GIB, 6 * GIB));
    let (screen, _) = fragmentation_at_80x24(&state, "4.00 GiB");
    assert!(screen.contains("stale segments"), "{screen}");
    assert!(screen.contains("reserved then 10.0 GiB"), "{screen}");
    let agree = after(&probe_at(None, None, 10 * GIB, 6 * GIB / 5 * 5));
    let (screen, _) = fragmentation_at_80x24(&agree, "4.00 GiB");
    assert!(!screen.contains("stale segments"), "{screen}");
}

#[test]
fn stats_before_the_first_segments_show_no_zero_figures() {
    // The pane read "no free blocks: every cached byte is in use" beside
    // the breakdown's 4 GiB reserved but unallocated, and the map "no segments:
    // the allocator holds no memory".
    let mut snapshot = probe(0);
    let d = snapshot.probes[0].devices.get_mut(&0).expect("device 0");
    d.segments = None;
    let state = after(&snapshot);
    let (screen, _) = fragmentation_at_80x24(&state, "x");
    let flat = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("segments not received yet"), "{screen}");
    assert!(!screen.contains("every cached byte"), "{screen}");
    assert!(!screen.contains("ext free"), "{screen}");
    let theme = Theme::colored();
    let terminal = draw_widget(SegmentsPane::new(&state, &theme), 100, 6);
    let map = text(terminal.backend().buffer());
    assert!(map.contains("segments not received yet"), "{map}");
    assert!(!map.contains("holds no memory"), "{map}");
}

/// The probe of `probe(ooms)` speaking protocol v2: ranks, the snapshot
/// capability, and its OOMs naming `oom_snapshot`.
fn probe_v2(ooms: u64, oom_snapshot: Option<&str>) -> ProbeSnapshot {
    let mut snapshot = probe(ooms);
    let p = &mut snapshot.probes[0];
    if let Some(h) = p.hello.as_mut() {
        h.version = 2;
        h.rank = Some(3);
        h.local_rank = Some(1);
        h.world_size = Some(8);
        h.record_history = Some(100_000);
        h.capabilities = vec!["snapshot".to_string()];
    }
    for e in &mut p.ooms {
        e.oom.snapshot = oom_snapshot.map(PathBuf::from);
    }
    snapshot
}

/// 30 samples of `snapshot(i)`, as `attached()` does.
fn attached_with(snapshot: impl Fn(u64) -> ProbeSnapshot) -> AppState {
    let mut state = AppState::new(StatusState {
        backend: "nvml".to_string(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    for i in 0..30u64 {
        let s = snapshot(i);
        let now = i * 1000;
        state.apply_sample(
            now,
            vec![reading()],
            allocator_views_with_probes(None, &s, &BTreeMap::new()),
        );
        state.apply_probes(now, &s);
    }
    state
}

const OOM_FILE: &str =
    "/home/u/.local/state/vramtop/snapshots/node7-17-rank3-20261201T120002Z-oom.pickle";

fn press(state: &mut AppState, c: char) -> Effect {
    handle_key(
        state,
        &Keymap::default(),
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE),
    )
}

#[test]
fn a_v2_probes_row_shows_its_rank_and_local_rank() {
    let state = attached_with(|_| probe_v2(0, None));
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(&state, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    let row = screen
        .lines()
        .find(|l| l.contains("4321"))
        .unwrap_or_default()
        .to_string();
    assert!(
        row.contains("[probe rank 3/8 local 1] python train.py"),
        "{screen}"
    );
    insta::assert_snapshot!("probe_rows_with_rank_110x6", terminal.backend());
}

#[test]
fn an_oom_with_a_snapshot_raises_a_banner_naming_the_process_and_the_file() {
    let state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    let terminal = draw(&state, &Theme::colored(), 160, 40);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains(
            "OOM in pid 4321: O opens its snapshot at the OOM: \
             /…/snapshots/node7-17-rank3-20261201T120002Z-oom.pickle (train.py --lr 3e-4)"
        ),
        "{screen}"
    );
    insta::assert_snapshot!("probe_oom_banner_160x40", terminal.backend());
    // An OOM without a snapshot raises no banner (the OOM note stays).
    let none = attached_with(|i| probe_v2(u64::from(i >= 20), None));
    assert_eq!(none.probes.oom_snapshot, None);
}

#[test]
fn a_fresh_oom_banner_comes_before_a_keys_notice_and_an_old_one_after() {
    let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    state.ui.notice = Some("no GPU 5: GPUs here: 0".to_string());
    let first_status_row = |state: &AppState| {
        // Wide enough for both: the order is what is checked.
        let terminal = draw(state, &Theme::colored(), 260, 40);
        let screen = text(terminal.backend().buffer());
        screen
            .lines()
            .find(|l| l.contains("OOM in pid") || l.contains("no GPU 5"))
            .unwrap_or_default()
            .to_string()
    };
    let row = first_status_row(&state);
    assert!(row.trim_start().starts_with("OOM in pid 4321"), "{row}");
    assert!(row.contains("no GPU 5"), "the notice follows: {row}");
    // A minute on, the answer to the key comes first again.
    let seen = state
        .probes
        .oom_snapshot
        .as_ref()
        .expect("a banner")
        .seen_ms;
    state.now_ms = seen + 61_000;
    let row = first_status_row(&state);
    assert!(row.trim_start().starts_with("no GPU 5"), "{row}");
    assert!(row.contains("OOM in pid 4321"), "{row}");
}

#[test]
fn a_key_answered_after_a_fresh_oom_comes_before_its_banner() {
    let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    let seen = state.probes.oom_banner().expect("a banner").seen_ms;
    // Seconds after the OOM the user presses a key: its answer leads (at
    // 80 columns the banner hid it), on the row under the facts and hints.
    state.now_ms = seen + 5_000;
    press(&mut state, '9');
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    let screen = text(terminal.backend().buffer());
    let lines: Vec<&str> = screen.lines().collect();
    let facts = lines
        .iter()
        .position(|l| l.starts_with("nvml │"))
        .expect("the status line's facts");
    let first = lines.get(facts + 1).copied().unwrap_or_default();
    assert!(first.starts_with("no GPU 9"), "{screen}");
    assert!(
        screen.contains("OOM in pid 4321"),
        "the banner follows: {screen}"
    );
}

#[test]
fn esc_hides_the_oom_banner_o_still_opens_it_and_a_new_oom_shows_again() {
    let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    let shown = |state: &AppState| {
        let terminal = draw(state, &Theme::colored(), 160, 40);
        text(terminal.backend().buffer()).contains("O opens its snapshot at the OOM")
    };
    assert!(shown(&state));
    let esc = KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE);
    assert_eq!(
        handle_key(&mut state, &Keymap::default(), esc),
        Effect::Redraw
    );
    assert!(!shown(&state), "Esc hid it");
    assert_eq!(
        press(&mut state, 'O'),
        Effect::OpenSnapshot {
            path: PathBuf::from(OOM_FILE),
            at_oom: true
        }
    );
    // Another OOM with a snapshot: shown again.
    let next = probe_v2(2, Some(OOM_FILE));
    state.apply_probes(40_000, &next);
    assert!(shown(&state), "a new OOM's banner shows");
}

#[test]
fn the_oom_banner_writes_a_path_under_home_with_a_tilde() {
    let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    state.status.home_dir = Some(PathBuf::from("/home/u"));
    let terminal = draw(&state, &Theme::colored(), 160, 40);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains(
            "O opens its snapshot at the OOM: ~/…/snapshots/node7-17-rank3-20261201T120002Z-oom.pickle"
        ),
        "{screen}"
    );
    // The session's snapshots, for the list printed on quitting: whole.
    assert_eq!(state.session_snapshots(), vec![PathBuf::from(OOM_FILE)]);
}

#[test]
fn at_80_columns_the_oom_banner_keeps_the_file_name_whole_and_its_folder() {
    let name = "node7-17-rank3-20261201T120002Z-oom.pickle";
    for (home, path) in [
        (None, format!("/…/snapshots/{name}")),
        (Some("/home/u"), format!("~/…/snapshots/{name}")),
    ] {
        let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
        state.status.home_dir = home.map(PathBuf::from);
        let terminal = draw(&state, &Theme::colored(), 80, 24);
        let screen = text(terminal.backend().buffer());
        let banner = screen
            .lines()
            .find(|l| l.contains("OOM") && l.contains("4321: O opens "))
            .unwrap_or_default()
            .to_string();
        // The folder too: over SSH the user types the path, and the name
        // alone did not say where it is.
        assert!(banner.contains(&format!("O opens {path}")), "{screen}");
        // What follows the banner may be cut; the banner itself is not.
        let own = banner.split('│').next().unwrap_or_default();
        assert!(!own.contains('…') || own.contains("/…/"), "{banner}");
    }
}

#[test]
fn capital_o_opens_the_oom_snapshot_at_the_oom_or_says_there_is_none() {
    let mut state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    assert_eq!(
        press(&mut state, 'O'),
        Effect::OpenSnapshot {
            path: PathBuf::from(OOM_FILE),
            at_oom: true
        }
    );
    let mut quiet = attached_with(|_| probe_v2(0, None));
    assert_eq!(press(&mut quiet, 'O'), Effect::Redraw);
    let why = quiet.ui.notice.as_deref().unwrap_or_default();
    assert!(why.starts_with("O: no OOM snapshot"), "{why}");
}

#[test]
fn c_asks_the_shown_probe_for_a_snapshot_and_o_opens_it_when_done() {
    use vramtop::app::capture::CaptureMsg;
    let mut state = attached_with(|_| probe_v2(0, None));
    // Before any request: nothing to open.
    assert_eq!(press(&mut state, 'o'), Effect::Redraw);
    assert!(
        state
            .ui
            .notice
            .as_deref()
            .is_some_and(|n| n.starts_with("o: no snapshot yet")),
        "{:?}",
        state.ui.notice
    );
    assert_eq!(
        press(&mut state, 'c'),
        Effect::RequestSnapshot {
            pid: PROBE_PID,
            socket: PathBuf::from("/run/user/1000/vramtop/17.sock"),
        }
    );
    // One request at a time; the status line says it is under way.
    assert_eq!(press(&mut state, 'c'), Effect::Redraw);
    assert_eq!(
        state.ui.notice.as_deref(),
        Some("c: a snapshot of pid 4321 is being taken")
    );
    assert_eq!(press(&mut state, 'o'), Effect::Redraw);
    assert_eq!(
        state.ui.notice.as_deref(),
        Some("o: the snapshot is still being taken")
    );
    state.capture.on_msg(
        31_000,
        CaptureMsg::Done {
            pid: PROBE_PID,
            path: PathBuf::from("/s/node7-17-rank3-demand.pickle"),
            has_trace: true,
        },
    );
    let terminal = draw(&state, &Theme::colored(), 160, 40);
    let screen = text(terminal.backend().buffer());
    assert!(
        screen.contains("snapshot of pid 4321 (o opens it): /s/node7-17-rank3-demand.pickle"),
        "{screen}"
    );
    assert_eq!(
        press(&mut state, 'o'),
        Effect::OpenSnapshot {
            path: PathBuf::from("/s/node7-17-rank3-demand.pickle"),
            at_oom: false
        }
    );
}

/// The screen at `w`×`h` after a capture of `path` was taken.
fn screen_after_capture(
    state: &mut AppState,
    path: &str,
    has_trace: bool,
    (w, h): (u16, u16),
) -> String {
    use vramtop::app::capture::CaptureMsg;
    state.capture.on_msg(
        31_000,
        CaptureMsg::Done {
            pid: PROBE_PID,
            path: PathBuf::from(path),
            has_trace,
        },
    );
    text(draw(state, &Theme::colored(), w, h).backend().buffer())
}

/// The status line's text from the row where `first` is on, its rows run
/// together: a path wider than a row is broken after a folder's slash and
/// goes on on the next one.
fn status_text_from(screen: &str, first: &str) -> String {
    screen
        .lines()
        .skip_while(|l| !l.contains(first))
        .map(str::trim_end)
        .collect()
}

#[test]
fn capture_note_says_the_key_first_and_its_whole_path_where_the_rows_allow() {
    let mut state = attached_with(|_| probe_v2(0, None));
    let long = "/home/someone/.local/state/vramtop/snapshots/node7-17-rank3-20261202T002819Z-demand.pickle";
    // 80×24 gives the messages two rows: the note with its folders on the
    // first and its name on the second fits them; with the caveat it takes
    // more and goes in one, the folder it is in still said, and how to get
    // a trace on the other; 120×40 has rows for both.
    for (size, has_trace, whole) in [
        ((80, 24), true, true),
        ((80, 24), false, false),
        ((120, 40), true, true),
        ((120, 40), false, true),
    ] {
        let screen = screen_after_capture(&mut state, long, has_trace, size);
        let note = screen
            .lines()
            .find(|l| l.contains("snapshot of pid 4321"))
            .unwrap_or_default();
        let case = format!("{size:?} has_trace {has_trace}");
        assert!(note.contains("(o opens it"), "{case}: {screen}");
        assert!(has_trace || note.contains("no trace"), "{case}: {screen}");
        let text = status_text_from(&screen, "snapshot of pid 4321");
        assert_eq!(
            text.contains("for a trace, start the probe with --record-history"),
            !has_trace,
            "{case}: {screen}"
        );
        if whole {
            assert!(text.contains(long), "{case}: {screen}");
        } else {
            // One row: its root, the folder it is in, the name's start and
            // end around an "…".
            let note = note.trim_end();
            assert!(
                note.contains("no trace: /…/snapshots/node7-17-") && note.ends_with("pickle"),
                "{case}: {screen}"
            );
        }
    }
}

#[test]
fn capture_note_at_80x24_under_the_fallback_banner_says_the_folder_and_no_trace() {
    let mut state = attached_with(|_| probe_v2(0, None));
    // The simulated GPU's banner takes one of the two rows: the note has
    // the other, and the folder it was written to is said in it.
    state.status.banner = Some("showing 1 simulated GPU: no NVIDIA driver is installed".into());
    let long =
        "/home/someone/.local/state/vramtop/snapshots/vm-4447-rankx-20261207T214924Z-demand.pickle";
    let screen = screen_after_capture(&mut state, long, false, (80, 24));
    let note = screen
        .lines()
        .find(|l| l.contains("snapshot of pid 4321"))
        .unwrap_or_default()
        .trim_end();
    assert!(
        note.contains("(o opens it), no trace: /…/snapshots/vm-4447-") && note.ends_with("pickle"),
        "{screen}"
    );
    assert!(
        screen.contains("showing 1 simulated GPU: no NVIDIA driver is installed"),
        "{screen}"
    );
}

#[test]
fn capture_note_of_a_long_host_and_pid_keeps_every_part_of_the_name_where_rows_allow() {
    let mut state = attached_with(|_| probe_v2(0, None));
    let long = "/home/u/.local/state/vramtop/snapshots/gpu-node-a100-017-4321-rankx-20261206T082052Z-demand.pickle";
    for has_trace in [true, false] {
        let screen = screen_after_capture(&mut state, long, has_trace, (120, 40));
        // Nothing elided: the host and pid, the time, the kind.
        let text = status_text_from(&screen, "snapshot of pid 4321");
        assert!(text.contains(long), "has_trace {has_trace}: {screen}");
        assert!(!text.contains('…'), "has_trace {has_trace}: {screen}");
        // At 80×24 the note's two rows: its folders on the first, its name
        // whole on the second; with the caveat, in one row, the folder it
        // is in and the name's start and end.
        let screen = screen_after_capture(&mut state, long, has_trace, (80, 24));
        let note = screen
            .lines()
            .find(|l| l.contains("snapshot of pid 4321"))
            .unwrap_or_default()
            .trim_end();
        if has_trace {
            let text = status_text_from(&screen, "snapshot of pid 4321");
            assert!(text.contains(long), "{screen}");
            assert!(
                note.ends_with("/snapshots/")
                    && screen
                        .contains("gpu-node-a100-017-4321-rankx-20261206T082052Z-demand.pickle"),
                "{screen}"
            );
        } else {
            assert!(
                note.contains("/…/snapshots/gpu-node-a1") && note.ends_with(".pickle"),
                "{screen}"
            );
        }
    }
}

#[test]
fn at_80_columns_the_oom_banner_keeps_a_long_names_start_and_end() {
    let file = "/s/gpu-node-a100-017-rack12-4321-rankx-20261206T082052Z-oom.pickle";
    let state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(file)));
    let terminal = draw(&state, &Theme::colored(), 80, 24);
    let screen = text(terminal.backend().buffer());
    let banner = screen
        .lines()
        .find(|l| l.contains("OOM") && l.contains("O opens"))
        .unwrap_or_default()
        .to_string();
    // What follows the banner is cut ("…"); the banner itself is not.
    let own = banner.split('│').next().unwrap_or_default().trim_end();
    let own = own.trim_end_matches('…').trim_end();
    assert!(own.contains("gpu-node-a100-"), "{screen}");
    assert!(own.ends_with("-oom.pickle") && own.contains('…'), "{own}");
}

#[test]
fn c_on_a_v1_probe_or_without_one_says_why_and_asks_nothing() {
    let mut v1 = attached();
    assert_eq!(press(&mut v1, 'c'), Effect::Redraw);
    let why = v1.ui.notice.clone().unwrap_or_default();
    assert!(
        why.contains("speaks protocol v1 (figures only): upgrade vramtop_probe"),
        "{why}"
    );
    assert_eq!(v1.capture.pending, None);
    let mut none = attached_with(|_| ProbeSnapshot::default());
    assert_eq!(press(&mut none, 'c'), Effect::Redraw);
    let why = none.ui.notice.clone().unwrap_or_default();
    assert!(why.starts_with("c: no probed process"), "{why}");
}

/// [`attached`] with six releases of cached memory and six more OOMs in
/// the last minute (seven in all): a legend of five items.
fn attached_with_marks() -> AppState {
    use vramtop::app::state::Marker;
    let mut state = attached();
    let history = &mut state.gpus[0].history;
    for k in 0..12u64 {
        let kind = if k % 2 == 0 {
            MarkerKind::Oom
        } else {
            MarkerKind::EmptyCache
        };
        history.mark(Marker {
            t_ms: 2_000 + k * 2_000,
            kind,
            count: 1,
        });
    }
    state
}

/// The rows of the timeline pane in `screen`, its title row excluded.
fn timeline_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.contains(" Timeline "))
        .skip(1)
        .take_while(|l| !l.contains(" Segments ") && !l.contains(" Processes "))
        .map(str::to_string)
        .collect()
}

#[test]
fn at_80x24_with_a_probe_the_timeline_draws_a_chart_not_only_its_legend() {
    let state = attached_with_marks();
    let screen = text(draw(&state, &Theme::colored(), 80, 24).backend().buffer());
    let rows = timeline_rows(&screen);
    assert!(rows.len() >= 4, "{screen}");
    // The x axis and its labels: a chart, however short.
    assert!(rows.iter().any(|r| r.contains('└')), "{screen}");
    assert!(rows.iter().any(|r| r.contains("now")), "{screen}");
}

#[test]
fn the_timelines_legend_gives_way_to_a_chart_in_a_short_pane() {
    let state = attached_with_marks();
    let theme = Theme::colored();
    for width in [30u16, 36, 44, 60, 80] {
        for height in 5u16..=10 {
            let terminal = draw_widget(TimelinePane::new(&state, &theme), width, height);
            let screen = text(terminal.backend().buffer());
            let rows: Vec<&str> = screen.lines().skip(1).collect();
            let axis = rows.iter().position(|r| r.contains('└'));
            let Some(axis) = axis else {
                panic!("{width}×{height}: no chart\n{screen}");
            };
            // At least two rows of plot above the axis.
            assert!(axis >= 2, "{width}×{height}: {axis} plot rows\n{screen}");
            // Three rows of plot once the pane has six rows inside.
            if height >= 7 {
                assert!(axis >= 3, "{width}×{height}: {axis} plot rows\n{screen}");
            }
            // A row under the chart for the legend from five rows inside on,
            // its marks named.
            if height >= 6 && width >= 44 {
                let legend = rows.get(axis + 2..).unwrap_or_default().join("\n");
                assert!(
                    legend.contains("OOM") && legend.contains("released"),
                    "{width}×{height}\n{screen}"
                );
            }
        }
    }
}

/// The default keymap with each dashboard binding of `moves` relabelled
/// to its key, as a keymap rebinding them would.
fn rebound(moves: &[(Action, &'static str)]) -> Keymap {
    let mut keymap = Keymap::default();
    for b in &mut keymap.bindings {
        if let Some(&(_, keys)) = moves.iter().find(|m| m.0 == b.action) {
            b.keys = keys;
        }
    }
    keymap
}

/// The dashboard drawn at `w`×`h` with `keymap`, as text.
fn screen_with(state: &AppState, keymap: &Keymap, w: u16, h: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| vramtop::ui::draw(f, state, keymap, &Theme::colored()))
        .expect("test backend");
    text(terminal.backend().buffer())
}

#[test]
fn the_oom_banner_and_the_snapshot_keys_texts_name_the_keys_the_keymap_binds() {
    let moved = rebound(&[
        (Action::OpenOomSnapshot, "F7"),
        (Action::OpenSnapshot, "F8"),
        (Action::CaptureSnapshot, "F9"),
        (Action::NextAllocator, "F10"),
        (Action::ZoomIn, "F11"),
    ]);
    let f = |n| KeyEvent::new(KeyCode::F(n), KeyModifiers::NONE);
    let state = attached_with(|i| probe_v2(u64::from(i >= 20), Some(OOM_FILE)));
    // The banner, whole and in its 80-column wordings, names the new key.
    for (w, h, said) in [
        (
            160,
            40,
            "OOM in pid 4321: F7 opens its snapshot at the OOM: ",
        ),
        (80, 24, "OOM pid 4321: F7 opens /…/snapshots/"),
    ] {
        let screen = screen_with(&state, &moved, w, h);
        assert!(screen.contains(said), "{w}×{h}: {screen}");
        assert!(!screen.contains("O opens"), "{w}×{h}: {screen}");
        let default = screen_with(&state, &Keymap::default(), w, h);
        assert!(default.contains("4321: O opens "), "{w}×{h}: {default}");
    }
    // The key it names is the one that opens the snapshot; O no longer does.
    let mut opened = state.clone();
    assert_eq!(
        handle_key(&mut opened, &moved, f(7)),
        Effect::OpenSnapshot {
            path: PathBuf::from(OOM_FILE),
            at_oom: true
        }
    );
    let capital_o = KeyEvent::new(KeyCode::Char('O'), KeyModifiers::NONE);
    // It opens nothing: the viewer binds it (the OOM before), so it says
    // whose key it is and how to get there, in the keys as bound.
    assert_eq!(handle_key(&mut opened, &moved, capital_o), Effect::Redraw);
    assert_eq!(
        opened.ui.notice.as_deref(),
        Some("O is the snapshot viewer's: F9 captures the allocator shown, F8 opens it")
    );
    // The notices of keys that cannot act lead with the key pressed.
    let mut quiet = attached_with(|_| probe_v2(0, None));
    handle_key(&mut quiet, &moved, f(7));
    let said = quiet.ui.notice.clone().unwrap_or_default();
    assert!(said.starts_with("F7: no OOM snapshot yet"), "{said}");
    handle_key(&mut quiet, &moved, f(8));
    assert_eq!(
        quiet.ui.notice.as_deref(),
        Some("F8: no snapshot yet (F9 takes one of the allocator shown)")
    );
    handle_key(&mut quiet, &moved, f(10));
    assert_eq!(
        quiet.ui.notice.as_deref(),
        Some("F10: GPU 0 has one probed process: nothing to switch to")
    );
    quiet.ui.focus = vramtop::app::state::Pane::Timeline;
    quiet.ui.zoom = 0;
    handle_key(&mut quiet, &moved, f(11));
    let said = quiet.ui.notice.clone().unwrap_or_default();
    assert!(
        said.starts_with("F11: the timeline already shows its shortest window"),
        "{said}"
    );
    // A capture under way, then written: "F9" and "(F8 opens it)".
    assert!(matches!(
        handle_key(&mut quiet, &moved, f(9)),
        Effect::RequestSnapshot { .. }
    ));
    handle_key(&mut quiet, &moved, f(9));
    assert_eq!(
        quiet.ui.notice.as_deref(),
        Some("F9: a snapshot of pid 4321 is being taken")
    );
    quiet.capture.on_msg(
        31_000,
        vramtop::app::capture::CaptureMsg::Done {
            pid: PROBE_PID,
            path: PathBuf::from("/s/node7-17-rank3-demand.pickle"),
            has_trace: true,
        },
    );
    for (w, h) in [(160, 40), (80, 24)] {
        let screen = screen_with(&quiet, &moved, w, h);
        assert!(
            screen.contains("snapshot of pid 4321 (F8 opens it): "),
            "{w}×{h}: {screen}"
        );
        assert!(!screen.contains("(o opens it)"), "{w}×{h}: {screen}");
    }
    // The breakdown's title names the key that switches probed processes.
    let mut two = attached();
    let both = two_probes_on_one_gpu();
    let views = allocator_views_with_probes(None, &both, &two.ui.allocator_pick);
    two.apply_sample(30_000, vec![reading()], views);
    two.apply_probes(30_000, &both);
    let theme = Theme::colored();
    let pane = BreakdownPane::new(&two, &theme).with_keymap(&moved);
    let title = text(draw_widget(pane, 160, 8).backend().buffer());
    assert!(title.contains("1 of 2 probes, F10: next"), "{title}");
    assert!(!title.contains("v: next"), "{title}");
    handle_key(&mut two, &moved, f(10));
    let pane = BreakdownPane::new(&two, &theme).with_keymap(&moved);
    let title = text(draw_widget(pane, 160, 8).backend().buffer());
    assert!(
        title.contains("F10: pid 5555 from the next sample"),
        "{title}"
    );
}

#[test]
fn control_characters_in_a_probes_argv_are_drawn_visible_and_the_row_is_not_cut_early() {
    use vramtop::probe::protocol::{Message, parse_line};
    let line = r#"{"v":2,"type":"hello","pid":17,"argv":["\u001b]0;PWNED\u0007train\u001b[2J.py","--lr","3e-4"],"devices":[0]}"#;
    let Ok(Message::Hello(hello)) = parse_line(line.as_bytes()) else {
        panic!("a hello");
    };
    let mut snapshot = probe(0);
    // A process the simulation does not list: its row is the probe's argv.
    snapshot.probes[0].host_pid = Some(5555);
    snapshot.probes[0].hello = Some(hello);
    let mut readings = vec![reading()];
    vramtop::app::source::account_probes_in_simulation(&mut readings, &snapshot, 0);
    let mut state = attached();
    state.apply_sample(
        30_000,
        readings,
        allocator_views_with_probes(None, &snapshot, &BTreeMap::new()),
    );
    state.apply_probes(30_000, &snapshot);
    let (screen, row) = processes_row(&state, "5555");
    assert!(
        row.contains("^[]0;PWNED^Gtrain^[[2J.py --lr 3e-4"),
        "every character drawn, none dropped, nothing cut: {screen}"
    );
}

/// The processes pane drawn at 110×6, and its row that names `pid`
/// (empty when none does).
fn processes_row(state: &AppState, pid: &str) -> (String, String) {
    let theme = Theme::colored();
    let terminal = draw_widget(ProcessesPane::new(state, &theme), 110, 6);
    let screen = text(terminal.backend().buffer());
    let row = screen
        .lines()
        .find(|l| l.contains(pid))
        .unwrap_or_default()
        .to_string();
    (screen, row)
}

#[test]
fn the_detail_of_a_probed_process_shows_its_probe_and_allocator_at_80x24_and_120x40() {
    let mut state = attached();
    state.ui.focus = vramtop::app::state::Pane::Processes;
    let keymap = Keymap::default();
    let press = |state: &mut AppState, code| {
        handle_key(state, &keymap, KeyEvent::new(code, KeyModifiers::NONE))
    };
    press(&mut state, KeyCode::Home);
    assert_eq!(press(&mut state, KeyCode::Enter), Effect::Redraw);
    assert_eq!(
        state.ui.process_detail.as_ref().map(|d| d.process.pid),
        Some(PROBE_PID)
    );
    let theme = Theme::colored();
    for (w, h, name) in [
        (80, 24, "process_detail_probe_80x24"),
        (120, 40, "process_detail_probe_120x40"),
    ] {
        let terminal = draw(&state, &theme, w, h);
        let screen = text(terminal.backend().buffer());
        // The fixture's hello gives no rank; its probe reported one OOM.
        assert!(
            screen.contains("probe      attached, rank n/a, 1 OOM"),
            "{screen}"
        );
        assert!(
            screen.contains("allocator  allocated 6.00 GiB, reserved 10.0 GiB, active 6.00 GiB"),
            "{screen}"
        );
        assert!(screen.contains("largest free block"), "{screen}");
        assert!(screen.contains("segments as new as the stats"), "{screen}");
        assert!(screen.contains("OOMs 1 since it started"), "{screen}");
        // A v1 probe takes no snapshot requests: `c` is not offered, `K` is.
        assert!(screen.contains("K signal it"), "{screen}");
        assert!(!screen.contains("c snapshot"), "{screen}");
        insta::assert_snapshot!(name, terminal.backend());
    }
}
