//! Damaged and hostile snapshots: every command reads what PyTorch writes,
//! and finishes with a verdict on anything else (no hang, no panic, memory
//! bounded by the file's size).

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use vramtop::alloc::{AllocatorConfig, BlockState, PoolKind, TraceAction};
use vramtop::snapshot::replay::{VerifyReport, verify};
use vramtop::snapshot::scrub::Scrub;
use vramtop::snapshot::summary::summarize;
use vramtop::snapshot::synth::{LargeShape, large};
use vramtop::snapshot::whatif::{WhatIfSetting, whatif};
use vramtop::snapshot::{
    Block, EntryTime, Frames, Limits, Segment, Snapshot, SnapshotFormat, TraceEntry, WriteOptions,
    read_snapshot, read_snapshot_file, read_snapshot_with_limits, write_snapshot_with,
};

use common::shared_snapshot as shared;

const MIB: u64 = 1 << 20;

// ------------------------------------------------------------------ a tiny pickle writer
//
// Protocol 2 without frames or memo, so that a test states every int the
// way a given writer put it (LONG1, two's complement, little-endian).

enum P {
    Str(&'static str),
    Int(i128),
    Bool(bool),
    List(Vec<P>),
    Dict(Vec<(&'static str, P)>),
}

fn encode(p: &P, out: &mut Vec<u8>) {
    match p {
        P::Str(s) => {
            out.push(b'X');
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        P::Int(i) => {
            let bytes = i.to_le_bytes();
            // Shortest two's complement that keeps the sign.
            let mut n = bytes.len();
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            out.push(0x8a);
            out.push(n as u8);
            out.extend_from_slice(&bytes[..n]);
        }
        P::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
        P::List(items) => {
            out.push(b']');
            if !items.is_empty() {
                out.push(b'(');
                for item in items {
                    encode(item, out);
                }
                out.push(b'e');
            }
        }
        P::Dict(pairs) => {
            out.push(b'}');
            if !pairs.is_empty() {
                out.push(b'(');
                for (k, v) in pairs {
                    encode(&P::Str(k), out);
                    encode(v, out);
                }
                out.push(b'u');
            }
        }
    }
}

fn pickle_of(p: &P) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    encode(p, &mut out);
    out.push(b'.');
    out
}

const BASE: i128 = 0x7f00_0000_0000;

fn frame(line: i128) -> P {
    P::Dict(vec![
        ("filename", P::Str("train.py")),
        ("line", P::Int(line)),
        ("name", P::Str("forward")),
    ])
}

/// A full-history file: one 20 MiB segment, one 8 MiB allocation in it
/// whose traceback is `frames`, on stream `stream`.
fn one_allocation_file(frames: P, stream: i128) -> Vec<u8> {
    let entry = |action: &'static str, size: i128, frames: P| {
        P::Dict(vec![
            ("action", P::Str(action)),
            ("addr", P::Int(BASE)),
            ("size", P::Int(size)),
            ("stream", P::Int(stream)),
            ("time_us", P::Int(1)),
            ("frames", frames),
        ])
    };
    let block = |size: i128, state: &'static str, frames: P| {
        P::Dict(vec![
            ("size", P::Int(size)),
            (
                "requested_size",
                P::Int(if state == "inactive" { 0 } else { size }),
            ),
            ("state", P::Str(state)),
            ("frames", frames),
        ])
    };
    let segment = P::Dict(vec![
        ("device", P::Int(0)),
        ("address", P::Int(BASE)),
        ("total_size", P::Int(20 << 20)),
        ("allocated_size", P::Int(8 << 20)),
        ("active_size", P::Int(8 << 20)),
        ("requested_size", P::Int(8 << 20)),
        ("stream", P::Int(stream)),
        ("segment_type", P::Str("large")),
        ("segment_pool_id", P::List(vec![P::Int(0), P::Int(0)])),
        ("is_expandable", P::Bool(false)),
        (
            "blocks",
            P::List(vec![
                block(8 << 20, "active_allocated", P::List(vec![])),
                block(12 << 20, "inactive", P::List(vec![])),
            ]),
        ),
    ]);
    let file = P::Dict(vec![
        ("segments", P::List(vec![segment])),
        (
            "device_traces",
            P::List(vec![P::List(vec![
                entry("segment_alloc", 20 << 20, P::List(vec![])),
                entry("alloc", 8 << 20, frames),
            ])]),
        ),
    ]);
    pickle_of(&file)
}

// ------------------------------------------------------------------ integer widths

#[test]
fn frame_line_unknown_as_unsigned_minus_one_is_read_and_shown_as_a_question_mark() {
    // The Python binding writes the unwinder's unsigned line: 2^64 − 1.
    let bytes = one_allocation_file(P::List(vec![frame((1i128 << 64) - 1)]), 0);
    let snapshot = read_snapshot(&bytes).expect("an unknown line is PyTorch's own output");
    let f = &snapshot.device_traces[0][1].frames[0];
    assert_eq!(f.known_line(), None);
    assert_eq!(f.shown_line().to_string(), "?");
    let json = serde_json::to_string(f).expect("serialises");
    assert!(json.contains(r#""line":null"#), "{json}");
    let report = verify(&snapshot);
    assert!(
        report.full_match(),
        "the file replays as before: {report:?}"
    );
}

#[test]
fn frame_line_written_through_a_signed_cast_reads_as_the_same_unsigned_line() {
    // The C++ writer stores int64_t(lineno): −1 for unknown.
    let bytes = one_allocation_file(P::List(vec![frame(-1), frame(42)]), 0);
    let snapshot = read_snapshot(&bytes).expect("reads");
    let frames = &snapshot.device_traces[0][1].frames;
    assert_eq!(frames[0].shown_line().to_string(), "?");
    assert_eq!(frames[1].known_line(), Some(42));
    assert_eq!(frames[1].shown_line().to_string(), "42");
}

#[test]
fn stream_written_as_a_signed_64_bit_cast_of_a_pointer_reads() {
    // int64_t(cudaStream_t): a handle with the top bit set is negative.
    let bytes = one_allocation_file(P::List(vec![]), -16);
    let snapshot = read_snapshot(&bytes).expect("reads");
    assert_eq!(snapshot.segments[0].stream, (-16i64).cast_unsigned());
    assert_eq!(
        snapshot.device_traces[0][1].stream,
        (-16i64).cast_unsigned()
    );
}

#[test]
fn whatif_oom_report_shows_an_unknown_line_as_a_question_mark() {
    let bytes = one_allocation_file(P::List(vec![frame((1i128 << 64) - 1)]), 0);
    let dir = std::env::temp_dir().join(format!("vramtop-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("unknown-line.pickle");
    std::fs::write(&path, &bytes).expect("written");
    let file = path.to_string_lossy().into_owned();
    let (_, stdout, stderr) = common::run_vramtop(&["replay", &file, "--capacity", "4MiB"], None);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        stdout.contains("asked by train.py:? forward"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn names_from_a_file_reach_the_terminal_escaped_in_every_text_output() {
    // A frame whose names would recolour, retitle and clear the terminal.
    let evil = P::Dict(vec![
        ("filename", P::Str("\u{1b}[31mevil\u{1b}]0;PWNED\u{7}.py")),
        ("line", P::Int(7)),
        ("name", P::Str("step\u{1b}[2J\r")),
    ]);
    let bytes = one_allocation_file(P::List(vec![evil]), 0);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("evil.pickle");
    std::fs::write(&path, &bytes).expect("written");
    let file = path.to_string_lossy().into_owned();
    for args in [
        vec!["open", &file, "--summary"],
        vec!["replay", &file, "--capacity", "4MiB"],
        vec!["replay", &file],
        vec!["diff", &file, &file],
    ] {
        let (_, stdout, stderr) = common::run_vramtop(&args, None);
        for text in [&stdout, &stderr] {
            assert!(
                !text.contains(['\u{1b}', '\u{7}', '\r']),
                "{args:?}: {text:?}"
            );
        }
        assert!(stdout.contains("evil"), "{args:?}: {stdout}");
    }
    let (_, stdout, _) = common::run_vramtop(&["open", &file, "--summary"], None);
    assert!(
        stdout.contains("\\u{1b}[31mevil\\u{1b}]0;PWNED\\u{7}.py:7"),
        "shown as escapes: {stdout}"
    );
    // JSON keeps the names exact (its own escapes).
    let (_, json, _) = common::run_vramtop(&["open", &file, "--summary", "--json"], None);
    assert!(json.contains("\\u001b[31mevil"), "{json}");
}

#[test]
fn sizes_beyond_any_device_are_refused_by_the_reader() {
    let entry = |size: i128| {
        P::Dict(vec![
            ("action", P::Str("segment_map")),
            ("addr", P::Int(BASE)),
            ("size", P::Int(size)),
            ("stream", P::Int(0)),
        ])
    };
    for size in [1i128 << 63, (1i128 << 64) - 1] {
        let file = P::Dict(vec![
            ("segments", P::List(vec![])),
            ("device_traces", P::List(vec![P::List(vec![entry(size)])])),
        ]);
        let err = read_snapshot(&pickle_of(&file)).expect_err("no device holds that");
        assert!(
            err.to_string().contains("more than any device holds"),
            "{err}"
        );
    }
}

#[test]
fn a_segment_ending_past_the_address_space_is_refused_by_the_reader() {
    let segment = P::Dict(vec![
        ("device", P::Int(0)),
        ("address", P::Int((1i128 << 64) - (1 << 20))),
        ("total_size", P::Int(2 << 20)),
        ("stream", P::Int(0)),
        ("segment_type", P::Str("small")),
        ("blocks", P::List(vec![])),
    ]);
    let file = P::Dict(vec![
        ("segments", P::List(vec![segment])),
        ("device_traces", P::List(vec![])),
    ]);
    let err = read_snapshot(&pickle_of(&file)).expect_err("past 2^64");
    assert!(err.to_string().contains("address space"), "{err}");
}

// ------------------------------------------------------------------ commands on damaged traces

fn entry(action: TraceAction, addr: u64, size: u64) -> TraceEntry {
    TraceEntry {
        action,
        addr,
        size,
        stream: 0,
        time: EntryTime::NONE,
        frames: no_frames(),
        extra: None,
    }
}

fn no_frames() -> Frames {
    Arc::from(Vec::new())
}

fn snapshot_with(segments: Vec<Segment>, trace: Vec<TraceEntry>) -> Snapshot {
    Snapshot {
        device_traces: vec![trace],
        ..Snapshot::of_segments(SnapshotFormat::DumpSnapshot, segments)
    }
}

fn segment(address: u64, size: u64, expandable: bool, blocks: Vec<Block>) -> Segment {
    Segment {
        device: 0,
        address,
        total_size: size,
        allocated_size: None,
        active_size: None,
        requested_size: None,
        stream: 0,
        segment_type: PoolKind::Large,
        segment_pool_id: (0, 0),
        is_expandable: expandable,
        frames: no_frames(),
        blocks,
    }
}

fn block(address: u64, size: u64, state: BlockState) -> Block {
    Block {
        address,
        size,
        requested_size: size,
        state,
        frames: no_frames(),
    }
}

fn setting(conf: &str) -> WhatIfSetting {
    WhatIfSetting {
        conf: conf.to_string(),
        config: AllocatorConfig::parse(conf).expect("valid conf"),
    }
}

/// Runs every command on `snapshot`: replay, what-if (recorded settings,
/// other settings, a capacity), the viewer's states at every cursor and
/// the summary. Returns the replay's report; finishing is the check.
fn every_command(snapshot: Snapshot) -> VerifyReport {
    let report = verify(&snapshot);
    let _ = whatif(&snapshot, &[], None);
    let _ = whatif(
        &snapshot,
        &[
            setting("expandable_segments:True"),
            setting("max_split_size_mb:64"),
        ],
        None,
    );
    let _ = whatif(&snapshot, &[], Some(64 * MIB));
    let _ = summarize(&snapshot);
    let scrub = Scrub::new(Arc::new(snapshot));
    for device in &scrub.devices {
        // Every cursor of a short trace; about 100 spread over a long one
        // (each state is rebuilt from a checkpoint).
        let step = (device.len() / 100).max(1);
        for cursor in (0..=device.len()).step_by(step).chain([device.len()]) {
            let state = device.state_at(cursor);
            let _ = device.layout_of(&state);
        }
    }
    report
}

/// The first divergence of the one replayed device, which must exist.
fn divergence_index(report: &VerifyReport) -> usize {
    assert!(!report.full_match(), "{report:?}");
    let r = report.replays.first().expect("the device is replayed");
    r.divergence
        .as_ref()
        .expect("a divergence is named")
        .event_index
}

fn silmont() -> Option<Snapshot> {
    let path = shared("silmont_mem_snapshot.pickle")?;
    Some(read_snapshot_file(&path).expect("shared snapshot loads"))
}

/// Event `i` of silmont's trace, which must be a `want` (the indices below
/// are where the unchanged model used to loop forever).
fn silmont_event(s: &Snapshot, i: usize, want: TraceAction) -> usize {
    assert_eq!(
        s.device_traces[0][i].action, want,
        "silmont's trace changed"
    );
    i
}

#[test]
fn free_requested_turned_into_free_completed_is_a_mismatch_at_that_event() {
    let Some(mut s) = silmont() else { return };
    let i = silmont_event(&s, 29, TraceAction::FreeRequested);
    s.device_traces[0][i].action = TraceAction::FreeCompleted;
    let report = every_command(s);
    assert_eq!(divergence_index(&report), i);
}

#[test]
fn alloc_turned_into_free_completed_is_a_mismatch_at_that_event() {
    let Some(mut s) = silmont() else { return };
    let i = silmont_event(&s, 20, TraceAction::Alloc);
    s.device_traces[0][i].action = TraceAction::FreeCompleted;
    let report = every_command(s);
    assert_eq!(divergence_index(&report), i);
}

#[test]
fn free_completed_turned_into_segment_map_is_a_mismatch_at_that_event() {
    let Some(mut s) = silmont() else { return };
    let i = silmont_event(&s, 30, TraceAction::FreeCompleted);
    s.device_traces[0][i].action = TraceAction::SegmentMap;
    let report = every_command(s);
    assert_eq!(divergence_index(&report), i);
}

#[test]
fn a_dropped_free_is_a_mismatch_at_its_completion() {
    let Some(mut s) = silmont() else { return };
    let i = silmont_event(&s, 29, TraceAction::FreeRequested);
    s.device_traces[0].remove(i);
    let report = every_command(s);
    assert_eq!(divergence_index(&report), i);
}

#[test]
fn a_duplicated_free_completion_is_a_mismatch_at_the_copy() {
    let Some(mut s) = silmont() else { return };
    let i = silmont_event(&s, 30, TraceAction::FreeCompleted);
    let copy = s.device_traces[0][i].clone();
    s.device_traces[0].insert(i, copy);
    let report = every_command(s);
    assert_eq!(divergence_index(&report), i + 1);
}

#[test]
fn a_dropped_or_duplicated_event_anywhere_ends_with_a_verdict() {
    let Some(s) = silmont() else { return };
    let n = s.device_traces[0].len();
    for i in [1, n / 3, n / 2, n - 2] {
        let mut dropped = s.clone();
        dropped.device_traces[0].remove(i);
        let report = every_command(dropped);
        assert!(!report.full_match(), "dropping #{i}");
        let mut duplicated = s.clone();
        let e = duplicated.device_traces[0][i].clone();
        duplicated.device_traces[0].insert(i, e);
        let report = every_command(duplicated);
        assert!(!report.full_match(), "duplicating #{i}");
    }
}

#[test]
fn a_segment_map_between_calls_of_a_non_expandable_allocator_is_a_mismatch_at_it() {
    // A few hundred bytes as a file: the map is neither a call's own event
    // nor a release, so the model has nothing to do with it.
    let a = BASE as u64;
    let b = a + 0x1000_0000;
    let snapshot = snapshot_with(
        vec![segment(
            a,
            2 * MIB,
            false,
            vec![block(a, 2 * MIB, BlockState::Inactive)],
        )],
        vec![
            entry(TraceAction::SegmentAlloc, a, 2 * MIB),
            entry(TraceAction::Alloc, a, 512),
            entry(TraceAction::SegmentMap, b, 2 * MIB),
            entry(TraceAction::FreeRequested, a, 512),
            entry(TraceAction::FreeCompleted, a, 512),
        ],
    );
    let report = every_command(snapshot);
    assert_eq!(divergence_index(&report), 2);
}

#[test]
fn segment_map_and_unmap_of_huge_sizes_finish_with_a_mismatch_naming_the_event() {
    let a = BASE as u64;
    for size in [(1u64 << 48) + 1, 1 << 63, u64::MAX - a] {
        let trace = vec![
            entry(TraceAction::SegmentMap, a, size),
            entry(TraceAction::Alloc, a, 512),
            entry(TraceAction::SegmentUnmap, a, size),
        ];
        let report = every_command(snapshot_with(Vec::new(), trace));
        let d = report.replays[0].divergence.as_ref().expect("named");
        assert_eq!(d.event_index, 0, "size {size}");
        assert!(d.model.contains("beyond any device"), "{}", d.model);
    }
}

#[test]
fn a_segment_whose_end_overflows_64_bits_is_a_verdict_not_a_panic() {
    let top = u64::MAX - MIB + 1;
    let snapshot = snapshot_with(
        vec![segment(
            top,
            20 * MIB,
            false,
            vec![block(top, 20 * MIB, BlockState::ActiveAllocated)],
        )],
        vec![
            entry(TraceAction::FreeRequested, top, 20 * MIB),
            entry(TraceAction::SegmentFree, top, 20 * MIB),
        ],
    );
    let report = every_command(snapshot);
    assert!(!report.full_match(), "{report:?}");
    let expandable = snapshot_with(
        vec![segment(top, 20 * MIB, true, Vec::new())],
        vec![entry(TraceAction::SegmentUnmap, top, 20 * MIB)],
    );
    let report = every_command(expandable);
    assert!(!report.full_match(), "{report:?}");
}

// ------------------------------------------------------------------ one event changed

/// The shared snapshots with a trace to replay, read once.
fn shared_traces() -> &'static [Snapshot] {
    static TRACES: std::sync::OnceLock<Vec<Snapshot>> = std::sync::OnceLock::new();
    TRACES.get_or_init(|| {
        [
            "silmont_mem_snapshot.pickle",
            "silmont_fwd_fp32_128.pickle",
            "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
            "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
            "JasperSolt_EoR_NN_snapshot.pickle",
            "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle",
            "bolongcheng_xl_fwd_cl128_float32_expandable.pickle",
        ]
        .iter()
        .filter_map(|name| shared(name))
        .map(|path| read_snapshot_file(&path).expect("shared snapshot loads"))
        .collect()
    })
}

const ACTIONS: [TraceAction; 8] = [
    TraceAction::Alloc,
    TraceAction::FreeRequested,
    TraceAction::FreeCompleted,
    TraceAction::SegmentAlloc,
    TraceAction::SegmentFree,
    TraceAction::SegmentMap,
    TraceAction::SegmentUnmap,
    TraceAction::Oom,
];

/// One change to one trace entry.
#[derive(Debug, Clone)]
enum Mutation {
    Action(usize),
    Drop,
    Duplicate,
    SwapWithNext,
    Size(u64),
    Addr(u64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let extreme = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 63),
        Just(1 << 48),
        Just(2 * MIB),
        any::<u64>(),
    ];
    prop_oneof![
        (0..ACTIONS.len()).prop_map(Mutation::Action),
        Just(Mutation::Drop),
        Just(Mutation::Duplicate),
        Just(Mutation::SwapWithNext),
        extreme.clone().prop_map(Mutation::Size),
        extreme.prop_map(Mutation::Addr),
    ]
}

fn mutate(trace: &mut Vec<TraceEntry>, at: usize, m: &Mutation) {
    let i = at % trace.len();
    match *m {
        Mutation::Action(a) => trace[i].action = ACTIONS[a],
        Mutation::Drop => {
            trace.remove(i);
        }
        Mutation::Duplicate => {
            let e = trace[i].clone();
            trace.insert(i, e);
        }
        Mutation::SwapWithNext => {
            if i + 1 < trace.len() {
                trace.swap(i, i + 1);
            }
        }
        Mutation::Size(size) => trace[i].size = size,
        Mutation::Addr(addr) => trace[i].addr = addr,
    }
}

proptest! {
    // Each case replays a real trace five times over; kept few for CI.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn one_changed_event_of_a_real_trace_ends_every_command_with_a_verdict(
        file in any::<usize>(),
        at in any::<usize>(),
        m in mutation(),
    ) {
        let traces = shared_traces();
        prop_assume!(!traces.is_empty());
        let mut s = traces[file % traces.len()].clone();
        let device = s
            .device_traces
            .iter()
            .position(|t| !t.is_empty())
            .expect("a trace");
        mutate(&mut s.device_traces[device], at, &m);
        let report = every_command(s);
        for r in &report.replays {
            // A mismatch always says where.
            prop_assert!(
                r.full_match()
                    || r.divergence.is_some()
                    || !r.final_layout_matches
                    || r.addresses_matched != r.allocations_replayed
                    || r.reserved_model != r.reserved_snapshot
                    || r.allocated_model != r.allocated_snapshot
                    || r.model_invariant_error.is_some()
                    || r.stale_requested_sizes_match == Some(false)
            );
        }
    }
}

// ------------------------------------------------------------------ memory bounded by size

/// The default limits without the floor for small files: the budget is
/// what the input's size alone allows.
fn budget_of_the_size_alone() -> Limits {
    Limits {
        min_memory_bytes: 0,
        ..Limits::default()
    }
}

#[test]
fn every_shared_snapshot_reads_within_the_budget_of_its_size_alone() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).expect("listable") {
        let path = entry.expect("entry").path();
        if !path
            .extension()
            .is_some_and(|x| x == "pickle" || x == "pkl")
        {
            continue;
        }
        let bytes = std::fs::read(&path).expect("readable");
        if let Err(e) = read_snapshot_with_limits(&bytes, &budget_of_the_size_alone()) {
            panic!("{}: {e}", path.display());
        }
        read += 1;
    }
    assert!(read >= 10, "{read} shared snapshots");
}

#[test]
fn synthetic_training_traces_in_both_layouts_read_within_the_budget_of_their_size() {
    let snapshot = large(&LargeShape::about_bytes(2 << 20));
    for fresh_frame_lists in [true, false] {
        let mut bytes = Vec::new();
        write_snapshot_with(&snapshot, &mut bytes, &WriteOptions { fresh_frame_lists })
            .expect("written");
        let read = read_snapshot_with_limits(&bytes, &budget_of_the_size_alone());
        assert!(read.is_ok(), "fresh lists {fresh_frame_lists}: {read:?}");
    }
}

/// Protocol 2: a list of one memoised segment dict, then `refs` more
/// references to it (two bytes each).
fn one_segment_referred_to(refs: usize) -> Vec<u8> {
    let segment = P::Dict(vec![
        ("device", P::Int(0)),
        ("address", P::Int(BASE)),
        ("total_size", P::Int(2 << 20)),
        ("stream", P::Int(0)),
        ("segment_type", P::Str("small")),
        (
            "blocks",
            P::List(vec![P::Dict(vec![
                ("size", P::Int(2 << 20)),
                ("state", P::Str("inactive")),
            ])]),
        ),
    ]);
    let mut out = vec![0x80, 2, b']', b'('];
    encode(&segment, &mut out);
    out.extend_from_slice(b"q\x00");
    for _ in 0..refs {
        out.extend_from_slice(b"h\x00");
    }
    out.extend_from_slice(b"e.");
    out
}

#[test]
fn a_segment_referred_to_a_million_times_is_refused_for_the_memory_it_would_take() {
    let bytes = one_segment_referred_to(1_000_000);
    let err = read_snapshot(&bytes).expect_err("2 MB would become hundreds of MB");
    assert!(err.to_string().contains("MiB of memory"), "{err}");
    // The same sharing a few times over is an ordinary file.
    let few = read_snapshot(&one_segment_referred_to(3)).expect("reads");
    assert_eq!(few.segments.len(), 4);
}

#[test]
fn megabytes_of_trivial_opcodes_are_refused_for_the_memory_they_would_take() {
    for opcode in [b']', b'}', b')'] {
        let mut bytes = vec![0x80, 2];
        bytes.extend(std::iter::repeat_n(opcode, 3_000_000));
        bytes.push(b'.');
        let err = read_snapshot(&bytes).expect_err("not a snapshot");
        assert!(
            err.to_string().contains("MiB of memory"),
            "{}: {err}",
            opcode as char
        );
    }
}

// ------------------------------------------------------------------ found by fuzzing

#[test]
fn whatif_with_expandable_segments_and_the_largest_capacity_does_not_overflow() {
    // The what-if fuzzer's first crash: the expandable reservation was sized
    // total + total / 8 with total = the capacity.
    let Some(s) = silmont() else { return };
    let report = whatif(&s, &[setting("expandable_segments:True")], Some(u64::MAX));
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn summary_and_viewer_states_of_blocks_summing_past_2_64_do_not_overflow() {
    // The scrub and summary fuzzers' first crashes: sums of block sizes.
    let huge = 1u64 << 63;
    let blocks = vec![
        block(0, huge, BlockState::ActiveAllocated),
        block(huge, huge - 1, BlockState::ActiveAllocated),
    ];
    let snapshot = snapshot_with(
        vec![
            segment(0, u64::MAX, false, blocks.clone()),
            segment(0, u64::MAX, false, blocks),
        ],
        vec![entry(TraceAction::FreeRequested, 0, huge)],
    );
    let summary = summarize(&snapshot);
    assert_eq!(summary.segments.len(), 2);
    let _ = every_command(snapshot);
}
