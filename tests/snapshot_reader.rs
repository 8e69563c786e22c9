//! The snapshot reader against the real PyTorch snapshots in
//! `../shared/snapshots` (skipped with a note when that directory is absent)
//! and against hand-built, truncated and mutated pickles.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use proptest::prelude::*;
use vramtop::alloc::{BlockState, PoolKind, TraceAction};
use vramtop::snapshot::{
    EntryTime, FindingKind, Limits, PickleError, Snapshot, SnapshotError, SnapshotFormat,
    TraceExtra, Value, check_invariants, pickle, read_snapshot, read_snapshot_file,
    read_snapshot_file_staged, read_snapshot_staged, snapshot_from_value,
};

// ---- allocation probe ------------------------------------------------------

/// Wraps the system allocator to record, per thread and only while asked,
/// the largest single allocation. Lets a test prove that a forged length
/// prefix is rejected without allocating what it claims.
struct LargestAllocationProbe;

thread_local! {
    static PROBING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for LargestAllocationProbe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: the thread-locals may be gone while a thread exits.
        let _ = PROBING.try_with(|probing| {
            if probing.get() {
                let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(layout.size())));
            }
        });
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: LargestAllocationProbe = LargestAllocationProbe;

/// Runs `f` and returns its result with the largest allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    PROBING.with(|p| p.set(true));
    let out = f();
    PROBING.with(|p| p.set(false));
    (out, LARGEST.with(Cell::get))
}

// ---- real snapshots --------------------------------------------------------

/// Every snapshot file in the shared directory, sorted by name.
fn all_snapshot_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::snapshot_files_in(dir)
        .into_iter()
        .map(|(name, path)| (name, std::fs::read(&path).unwrap()))
        .collect()
}

fn load(dir: &Path, name: &str) -> (Vec<u8>, Snapshot) {
    let bytes = std::fs::read(dir.join(name)).unwrap();
    let snapshot = read_snapshot(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    (bytes, snapshot)
}

const HAND_MADE: &str = "snapviewer_memory.pickle";
const SMALL_FILES: [&str; 3] = [
    "albi2_thesis-text-to-SQL_dump_snapshot.pickle",
    "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
    "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
];

/// Facts checked with `shared/tools/inspect_snapshot.py`.
struct Expected {
    file: &'static str,
    format: SnapshotFormat,
    segments: usize,
    /// (active_allocated, active_pending_free, inactive) blocks.
    block_states: (usize, usize, usize),
    /// Σ total_size over all segments.
    reserved: u64,
    devices: &'static [u32],
    /// Per device trace: entries per action.
    traces: &'static [&'static [(TraceAction, usize)]],
    has_settings: bool,
    annotations: usize,
}

use TraceAction::{Alloc, FreeCompleted, FreeRequested, SegmentAlloc, Snapshot as SnapshotTaken};

const EXPECTED: &[Expected] = &[
    Expected {
        file: "JasperSolt_EoR_NN_snapshot.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 10,
        block_states: (40, 0, 14),
        reserved: 134_217_728,
        devices: &[0],
        traces: &[&[
            (Alloc, 1935),
            (SegmentAlloc, 7),
            (FreeRequested, 1926),
            (FreeCompleted, 1926),
            (SnapshotTaken, 9),
        ]],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 176,
        block_states: (460, 0, 3),
        reserved: 11_844_714_496,
        devices: &[0],
        traces: &[&[(SnapshotTaken, 1)]],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "albi2_thesis-text-to-SQL_dump_snapshot.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 3,
        block_states: (4, 0, 6),
        reserved: 85_983_232,
        devices: &[0, 1],
        traces: &[&[], &[]],
        has_settings: true,
        annotations: 0,
    },
    Expected {
        file: "muduard_dump_snapshot_a.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 672,
        block_states: (6241, 0, 392),
        reserved: 11_276_386_304,
        devices: &[0],
        traces: &[&[], &[]],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "muduard_dump_snapshot_b.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 673,
        block_states: (6240, 0, 404),
        reserved: 11_274_289_152,
        devices: &[1],
        traces: &[&[(SnapshotTaken, 1)], &[(FreeCompleted, 1)]],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "muduard_dump_snapshot_c.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 368,
        block_states: (2175, 0, 355),
        reserved: 5_475_663_872,
        devices: &[0],
        traces: &[&[], &[]],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "muduard_memory_snapshot.pkl",
        format: SnapshotFormat::SegmentList,
        segments: 255,
        block_states: (1938, 0, 202),
        reserved: 3_649_044_480,
        devices: &[1],
        traces: &[],
        has_settings: false,
        annotations: 0,
    },
    Expected {
        file: "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
        format: SnapshotFormat::DumpSnapshot,
        segments: 7,
        block_states: (5, 0, 4),
        reserved: 4_439_670_784,
        devices: &[0],
        traces: &[&[
            (SegmentAlloc, 7),
            (Alloc, 12),
            (FreeRequested, 7),
            (FreeCompleted, 7),
        ]],
        has_settings: true,
        annotations: 0,
    },
    Expected {
        file: "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
        format: SnapshotFormat::DumpSnapshot,
        segments: 7,
        block_states: (5, 0, 4),
        reserved: 4_439_670_784,
        devices: &[0],
        traces: &[&[
            (SegmentAlloc, 7),
            (Alloc, 12),
            (FreeRequested, 7),
            (FreeCompleted, 7),
        ]],
        has_settings: true,
        annotations: 0,
    },
    Expected {
        file: "silmont_fwd_fp32_128.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 29,
        block_states: (137, 0, 27),
        reserved: 610_271_232,
        devices: &[0],
        traces: &[&[(Alloc, 681), (FreeRequested, 681), (FreeCompleted, 681)]],
        has_settings: true,
        annotations: 2,
    },
    Expected {
        file: "silmont_mem_snapshot.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 9,
        block_states: (10, 0, 10),
        reserved: 3_781_165_056,
        devices: &[0],
        traces: &[&[
            (SegmentAlloc, 9),
            (Alloc, 36),
            (FreeRequested, 26),
            (FreeCompleted, 26),
        ]],
        has_settings: true,
        annotations: 0,
    },
    Expected {
        file: HAND_MADE,
        format: SnapshotFormat::DumpSnapshot,
        segments: 5,
        block_states: (17, 0, 0),
        reserved: 262_144_000,
        devices: &[0],
        traces: &[&[(Alloc, 520), (FreeCompleted, 520)]],
        has_settings: false,
        annotations: 6,
    },
    Expected {
        file: "volcengine_verl_mem.pickle",
        format: SnapshotFormat::DumpSnapshot,
        segments: 127,
        block_states: (534, 9, 95),
        reserved: 26_189_234_176,
        devices: &[0],
        traces: &[&[]],
        has_settings: true,
        annotations: 0,
    },
];

fn action_counts(trace: &[vramtop::snapshot::TraceEntry]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for entry in trace {
        *counts.entry(entry.action.as_str()).or_default() += 1;
    }
    counts
}

#[test]
fn every_shared_snapshot_loads_with_the_known_shape() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let files = all_snapshot_files(&dir);
    assert!(
        files.len() >= EXPECTED.len(),
        "expected at least {} snapshots",
        EXPECTED.len()
    );
    for (name, bytes) in &files {
        let snapshot = read_snapshot(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Files added later (e.g. the kept-back dumps) only need to load.
        let Some(expected) = EXPECTED.iter().find(|e| e.file == name) else {
            continue;
        };
        assert_eq!(snapshot.format, expected.format, "{name}");
        assert_eq!(snapshot.segments.len(), expected.segments, "{name}");
        let count = |state| {
            snapshot
                .segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == state)
                .count()
        };
        assert_eq!(
            (
                count(BlockState::ActiveAllocated),
                count(BlockState::ActivePendingFree),
                count(BlockState::Inactive)
            ),
            expected.block_states,
            "{name}"
        );
        let reserved: u64 = snapshot.segments.iter().map(|s| s.total_size).sum();
        assert_eq!(reserved, expected.reserved, "{name}");
        let devices: BTreeSet<u32> = snapshot.segments.iter().map(|s| s.device).collect();
        assert_eq!(
            devices.into_iter().collect::<Vec<_>>(),
            expected.devices,
            "{name}"
        );
        assert_eq!(
            snapshot.device_traces.len(),
            expected.traces.len(),
            "{name}"
        );
        for (trace, expected_actions) in snapshot.device_traces.iter().zip(expected.traces) {
            let expected_actions: BTreeMap<_, _> = expected_actions
                .iter()
                .map(|(a, n)| (a.as_str(), *n))
                .collect();
            assert_eq!(action_counts(trace), expected_actions, "{name}");
        }
        assert_eq!(snapshot.skipped_trace_entries, 0, "{name}");
        assert_eq!(
            snapshot.allocator_settings.is_some(),
            expected.has_settings,
            "{name}"
        );
        assert_eq!(
            snapshot.external_annotations.len(),
            expected.annotations,
            "{name}"
        );
        // The typed snapshot serialises (JSON export must not fail).
        serde_json::to_string(&snapshot).unwrap();
    }
}

#[test]
fn real_snapshots_satisfy_every_segment_invariant() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for (name, bytes) in all_snapshot_files(&dir) {
        if name == HAND_MADE {
            continue;
        }
        let snapshot = read_snapshot(&bytes).unwrap();
        let findings = check_invariants(&snapshot);
        assert!(
            findings.is_empty(),
            "{name}: {}",
            findings
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

#[test]
fn hand_made_snapviewer_snapshot_breaks_invariants_without_crashing() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, snapshot) = load(&dir, HAND_MADE);
    let findings = check_invariants(&snapshot);
    let kinds: BTreeSet<String> = findings.iter().map(|f| format!("{:?}", f.kind)).collect();
    // Its blocks do not add up to their segments and its small segments are
    // 50 MiB (they are marked expandable, so that alone is not a finding).
    assert!(kinds.contains("BlockSizesDoNotSumToTotal"), "{kinds:?}");
    assert!(kinds.contains("AllocatedSizeMismatch"), "{kinds:?}");
    assert!(
        findings
            .iter()
            .all(|f| f.kind != FindingKind::SmallSegmentNot2MiB)
    );
    assert_eq!(
        findings
            .iter()
            .map(|f| f.segment_index)
            .collect::<BTreeSet<_>>()
            .len(),
        5
    );
}

#[test]
fn torch_2_0_blocks_get_addresses_from_their_segment_and_frames_from_history() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, snapshot) = load(&dir, "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle");
    let segment = &snapshot.segments[175];
    assert_eq!(segment.address, 140_049_251_303_424);
    assert_eq!(segment.blocks.len(), 88);
    let addresses: Vec<u64> = segment.blocks.iter().map(|b| b.address).collect();
    assert_eq!(
        &addresses[..3],
        &[
            140_049_251_303_424,
            140_049_251_336_192,
            140_049_251_344_384
        ]
    );
    assert_eq!(addresses[87], 140_049_252_237_312);
    let last = &segment.blocks[87];
    assert_eq!(
        (last.size, last.requested_size, last.state),
        (1_163_264, 0, BlockState::Inactive)
    );
    assert!(last.frames.is_empty());
    // Absent keys take their defaults.
    assert_eq!(
        (segment.segment_pool_id, segment.is_expandable),
        ((0, 0), false)
    );
    // Frames come from the last history entry.
    let first = &snapshot.segments[0].blocks[0];
    assert_eq!(first.frames.len(), 10);
    assert_eq!(
        &*first.frames[0].filename,
        "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py"
    );
    assert_eq!(
        (&*first.frames[0].name, first.frames[0].line),
        ("allocate", 190)
    );
    assert_eq!(first.requested_size, 33_554_432);
    assert!(snapshot.device_traces[0][0].time_us().is_none());
}

#[test]
fn bare_segment_list_reads_as_segment_list_format() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, snapshot) = load(&dir, "muduard_memory_snapshot.pkl");
    assert_eq!(snapshot.format, SnapshotFormat::SegmentList);
    assert!(snapshot.device_traces.is_empty() && snapshot.allocator_settings.is_none());
    assert!(snapshot.segments.iter().all(|s| s.device == 1));
}

#[test]
fn albi2_has_expandable_segments_on_two_devices_and_its_settings() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, snapshot) = load(&dir, "albi2_thesis-text-to-SQL_dump_snapshot.pickle");
    let shape: Vec<(u32, PoolKind, u64, bool)> = snapshot
        .segments
        .iter()
        .map(|s| (s.device, s.segment_type, s.total_size, s.is_expandable))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, PoolKind::Small, 2 << 20, true),
            (0, PoolKind::Large, 40 << 20, true),
            (1, PoolKind::Large, 40 << 20, true)
        ]
    );
    let settings = snapshot.allocator_settings.as_ref().unwrap();
    assert_eq!(
        settings.conf,
        "expandable_segments:True,max_split_size_mb:128"
    );
    assert_eq!(settings.max_split_size, 134_217_728);
    assert!(settings.expandable_segments);
    assert_eq!(settings.garbage_collection_threshold, 0.0);
    assert!(!settings.release_lock_on_cudamalloc);
    assert_eq!(settings.pinned_num_register_threads, Some(1));
    assert_eq!(settings.roundup_power2_divisions.len(), 16);
    assert_eq!(settings.roundup_power2_divisions[15], (32768, 0));
    let block = &snapshot.segments[0].blocks[1];
    assert_eq!(
        (block.address, block.size, block.requested_size),
        (17_242_963_968, 5120, 4704)
    );
}

#[test]
fn volcengine_has_three_memory_pools_and_pending_free_blocks() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, snapshot) = load(&dir, "volcengine_verl_mem.pickle");
    let mut pools = BTreeMap::new();
    for segment in &snapshot.segments {
        *pools.entry(segment.segment_pool_id).or_insert(0) += 1;
    }
    assert_eq!(
        pools,
        BTreeMap::from([((0, 0), 59), ((0, 1), 44), ((0, 2), 24)])
    );
    let pending = &snapshot.segments[69].blocks[0];
    assert_eq!(
        (pending.state, pending.size),
        (BlockState::ActivePendingFree, 136_134_656)
    );
}

#[test]
fn frames_pickled_once_and_referenced_twice_are_one_allocation() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let (_, silmont) = load(&dir, "silmont_mem_snapshot.pickle");
    let trace = &silmont.device_traces[0];
    let segment_frames = &silmont.segments[0].frames;
    assert_eq!(segment_frames.len(), 32);
    assert_eq!(&*segment_frames[0].name, "torch::unwind::unwind()");
    assert!(Arc::ptr_eq(segment_frames, &trace[51].frames));
    assert!(Arc::ptr_eq(segment_frames, &trace[52].frames));
    assert!(!Arc::ptr_eq(segment_frames, &silmont.segments[1].frames));

    let (_, jasper) = load(&dir, "JasperSolt_EoR_NN_snapshot.pickle");
    let block_frames = &jasper.segments[4].blocks[0].frames;
    assert_eq!(block_frames.len(), 50);
    assert!(Arc::ptr_eq(
        block_frames,
        &jasper.device_traces[0][1].frames
    ));
    assert!(Arc::ptr_eq(
        block_frames,
        &jasper.device_traces[0][2].frames
    ));

    let (_, grad) = load(
        &dir,
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
    );
    let frames = &grad.segments[2].frames;
    assert_eq!(frames.len(), 48);
    assert!(Arc::ptr_eq(frames, &grad.segments[2].blocks[0].frames));
    assert!(Arc::ptr_eq(frames, &grad.device_traces[0][9].frames));
}

#[test]
fn framed_and_unframed_encodings_of_a_snapshot_parse_identically() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for name in ["silmont_mem_snapshot.pickle", SMALL_FILES[0]] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let unframed = unframe(&bytes);
        assert!(unframed.len() < bytes.len());
        let limits = Limits::default();
        assert_eq!(
            pickle::parse(&bytes, &limits).unwrap(),
            pickle::parse(&unframed, &limits).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn file_errors_name_the_file() {
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("no-such-snapshot.pickle");
    let err = read_snapshot_file(&missing).unwrap_err();
    assert!(matches!(err, SnapshotError::Io { .. }));
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    assert!(err.to_string().contains("no-such-snapshot.pickle"), "{err}");

    let path =
        std::env::temp_dir().join(format!("vramtop-snapshot-test-{}.json", std::process::id()));
    std::fs::write(&path, b"{\"segments\": []}").unwrap();
    let err = read_snapshot_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    let message = err.to_string();
    assert!(
        message.starts_with(&path.display().to_string()),
        "{message}"
    );
    assert!(
        message.ends_with(
            "not a pickle: looks like JSON: it starts \"{\"segments\": []}\"; a memory snapshot \
             is the binary pickle torch.cuda.memory._dump_snapshot() writes"
        ),
        "{message}"
    );

    if let Some(dir) = common::shared_snapshots_dir() {
        read_snapshot_file(&dir.join(SMALL_FILES[0])).unwrap();
    }
}

// ---- hand-built pickles ----------------------------------------------------

fn parse(bytes: &[u8]) -> Result<Value, PickleError> {
    pickle::parse(bytes, &Limits::default())
}

fn dict_of(pairs: &[(&str, Value)]) -> Value {
    Value::Dict(
        pairs
            .iter()
            .map(|(k, v)| (Value::Str((*k).into()), v.clone()))
            .collect(),
    )
}

#[test]
fn global_opcode_is_refused_and_named() {
    let pickle = b"\x80\x02cos\nsystem\n(S'echo pwned'\ntR.";
    let err = parse(pickle).unwrap_err();
    assert_eq!(
        err,
        PickleError::Refused {
            opcode: "GLOBAL",
            offset: 2,
            detail: Some("os.system".into())
        }
    );
    assert_eq!(
        err.to_string(),
        "refused pickle opcode GLOBAL (os.system) at byte 2: snapshots contain only plain data; nothing was executed"
    );
    // What CPython writes for `os.system` itself.
    let err = parse(b"\x80\x02cposix\x0asystem\x0aq\x00.").unwrap_err();
    assert!(
        err.to_string().contains("GLOBAL (posix.system) at byte 2"),
        "{err}"
    );
}

#[test]
fn stack_global_and_reduce_are_refused_before_anything_runs() {
    // posix.system via STACK_GLOBAL, then called with REDUCE.
    let pickle = b"\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x02id\x85R.";
    let err = parse(pickle).unwrap_err();
    assert_eq!(
        err,
        PickleError::Refused {
            opcode: "STACK_GLOBAL",
            offset: 28,
            detail: Some("posix.system".into())
        }
    );
    let err = parse(b"\x80\x04N)R.").unwrap_err();
    assert_eq!(
        err,
        PickleError::Refused {
            opcode: "REDUCE",
            offset: 4,
            detail: None
        }
    );
}

#[test]
fn every_code_running_opcode_is_refused() {
    let cases: &[(&[u8], &str)] = &[
        (b"(ios\nsystem\n.", "INST"),
        (b"N}b.", "BUILD"),
        (b"(N)o.", "OBJ"),
        (b"N)\x81.", "NEWOBJ"),
        (b"N)}\x92.", "NEWOBJ_EX"),
        (b"Pkey\n.", "PERSID"),
        (b"NQ.", "BINPERSID"),
        (b"\x82\x01.", "EXT1"),
        (b"\x83\x01\x00.", "EXT2"),
        (b"\x84\x01\x00\x00\x00.", "EXT4"),
        (b"\x97.", "NEXT_BUFFER"),
        (b"N\x98.", "READONLY_BUFFER"),
    ];
    for (pickle, opcode) in cases {
        match parse(pickle) {
            Err(PickleError::Refused { opcode: found, .. }) => assert_eq!(found, *opcode),
            other => panic!("{opcode}: {other:?}"),
        }
    }
    assert!(
        parse(b"(ios\nsystem\n.")
            .unwrap_err()
            .to_string()
            .contains("INST (os.system)")
    );
    assert!(
        parse(b"\x82\x07.")
            .unwrap_err()
            .to_string()
            .contains("(extension code 7)")
    );
}

#[test]
fn protocol_2_dict_parses() {
    // pickle.dumps({'a': 1, 'b': [2, 3], 'c': (True, None, 1.5), 'e': 'é',
    //               'big': 2**70, 'neg': -2**70}, protocol=2)
    let pickle = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01X\x01\x00\x00\x00bq\x02]q\x03(K\x02K\x03eX\x01\x00\x00\x00cq\x04\x88NG?\xf8\x00\x00\x00\x00\x00\x00\x87q\x05X\x01\x00\x00\x00eq\x06X\x02\x00\x00\x00\xc3\xa9q\x07X\x03\x00\x00\x00bigq\x08\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@X\x03\x00\x00\x00negq\x09\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0u.";
    let expected = dict_of(&[
        ("a", Value::Int(1)),
        ("b", Value::List(vec![Value::Int(2), Value::Int(3)].into())),
        (
            "c",
            Value::Tuple(vec![Value::Bool(true), Value::None, Value::Float(1.5)].into()),
        ),
        ("e", Value::Str("é".into())),
        ("big", Value::Int(1 << 70)),
        ("neg", Value::Int(-(1 << 70))),
    ]);
    assert_eq!(parse(pickle).unwrap(), expected);
}

#[test]
fn protocol_5_dict_with_frame_and_bytes_parses() {
    // The same dict plus 'd': b'xy', protocol=5.
    let pickle = b"\x80\x05\x95\x5c\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94]\x94(K\x02K\x03e\x8c\x01c\x94\x88NG?\xf8\x00\x00\x00\x00\x00\x00\x87\x94\x8c\x01d\x94C\x02xy\x94\x8c\x01e\x94\x8c\x02\xc3\xa9\x94\x8c\x03big\x94\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8c\x03neg\x94\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0u.";
    let value = parse(pickle).unwrap();
    assert_eq!(value.get("d"), Some(&Value::Bytes(Arc::from(&b"xy"[..]))));
    assert_eq!(
        value.get("c").and_then(Value::as_list).map(<[Value]>::len),
        Some(3)
    );
    assert_eq!(value.get("neg").and_then(Value::as_int), Some(-(1 << 70)));
    assert_eq!(
        parse(b"\x80\x05\x96\x02\x00\x00\x00\x00\x00\x00\x00ab.").unwrap(),
        Value::Bytes(Arc::from(&b"ab"[..]))
    );
}

#[test]
fn long1_reads_negative_and_large_numbers() {
    // [-1, -256, 2**63, -2**63-1, 2**127-1, -2**127] as CPython writes it.
    let pickle = b"\x80\x04\x95I\x00\x00\x00\x00\x00\x00\x00]\x94(J\xff\xff\xff\xffJ\x00\xff\xff\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff\x8a\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80e.";
    let value = parse(pickle).unwrap();
    let ints: Vec<i128> = value
        .as_list()
        .unwrap()
        .iter()
        .map(|v| v.as_int().unwrap())
        .collect();
    assert_eq!(
        ints,
        vec![-1, -256, 1 << 63, -(1 << 63) - 1, i128::MAX, i128::MIN]
    );
    assert_eq!(value.as_list().unwrap()[2].as_u64(), Some(1 << 63));
    assert_eq!(value.as_list().unwrap()[2].as_i64(), None);
}

#[test]
fn integers_wider_than_16_bytes_are_refused() {
    // pickle.dumps(2**200, protocol=4): LONG1 with 26 bytes.
    let pickle = b"\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00\x8a\x1a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01.";
    let err = parse(pickle).unwrap_err();
    assert!(
        matches!(
            err,
            PickleError::IntegerTooLarge {
                opcode: "LONG1",
                offset: 11,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("integer too large"), "{err}");
    let err = parse(b"\x8b\x00\x00\x00\x40.").unwrap_err();
    assert!(
        matches!(
            err,
            PickleError::IntegerTooLarge {
                opcode: "LONG4",
                ..
            }
        ),
        "{err:?}"
    );
    let err = parse(b"L1000000000000000000000000000000000000000000L\n.").unwrap_err();
    assert!(
        matches!(err, PickleError::IntegerTooLarge { opcode: "LONG", .. }),
        "{err:?}"
    );
}

#[test]
fn list_appended_to_itself_is_a_cycle_error() {
    // l = []; l.append(l); pickle.dumps(l, protocol=4)
    let err = parse(b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00a.").unwrap_err();
    assert_eq!(err, PickleError::Cycle { container: "list" });
    // d = {}; d['self'] = d
    let err = parse(b"}\x94\x8c\x04self\x94h\x00s.").unwrap_err();
    assert_eq!(err, PickleError::Cycle { container: "dict" });
    // Through a tuple: l = []; l.append((l,))
    let err = parse(b"]\x94h\x00\x85a.").unwrap_err();
    assert!(matches!(err, PickleError::Cycle { .. }), "{err:?}");
}

fn nested_lists(depth: usize) -> Vec<u8> {
    let mut pickle = vec![b']'; depth];
    pickle.extend(std::iter::repeat_n(b'a', depth - 1));
    pickle.push(b'.');
    pickle
}

#[test]
fn nesting_deeper_than_the_limit_is_an_error_not_a_stack_overflow() {
    assert!(parse(&nested_lists(64)).is_ok());
    // The depth limit, not the memory budget, is what this checks.
    let unbudgeted = Limits {
        memory_per_input_byte: u64::MAX,
        ..Limits::default()
    };
    for depth in [65, 1_000, 1_000_000] {
        let err = pickle::parse(&nested_lists(depth), &unbudgeted).unwrap_err();
        assert!(
            matches!(err, PickleError::LimitExceeded { .. }),
            "{depth}: {err:?}"
        );
        assert!(err.to_string().contains("deeper than 64"), "{err}");
    }
    // One item on the stack, a million tuples deep.
    let mut pickle = vec![b'N'];
    pickle.extend(std::iter::repeat_n(0x85, 1_000_000));
    pickle.push(b'.');
    assert!(matches!(
        parse(&pickle),
        Err(PickleError::LimitExceeded { .. })
    ));
    let shallow = Limits {
        max_depth: 2,
        ..Limits::default()
    };
    assert!(pickle::parse(&nested_lists(3), &shallow).is_err());
}

#[test]
fn shared_references_stay_linear_instead_of_doubling() {
    // x0 = []; x(i+1) = (x(i), x(i)) sixty times: 2^60 leaves if copied.
    let mut pickle = b"]\x94".to_vec();
    for i in 0u8..60 {
        pickle.extend_from_slice(&[b'h', i, b'h', i, 0x86, 0x94]);
    }
    pickle.push(b'.');
    let value = parse(&pickle).unwrap();
    let pair = value.as_list().unwrap();
    assert_eq!(pair[0].identity(), pair[1].identity());
}

#[test]
fn huge_length_prefixes_are_truncation_errors_without_allocating() {
    let (result, largest) = largest_allocation(|| parse(b"\x80\x04X\xff\xff\xff\xffabc."));
    assert_eq!(
        result.unwrap_err(),
        PickleError::Truncated {
            opcode: "BINUNICODE",
            offset: 2,
            end: 11,
            needed: 0xffff_ffff - 4
        }
    );
    assert!(largest < 64 * 1024, "allocated {largest} bytes");
    for (pickle, opcode) in [
        (
            &b"\x8d\x00\x00\x00\x00\x00\x00\x00\x40abc."[..],
            "BINUNICODE8",
        ),
        (
            &b"\x8e\xff\xff\xff\xff\xff\xff\xff\xffabc."[..],
            "BINBYTES8",
        ),
        (
            &b"\x96\x00\x00\x00\x00\x00\x00\x01\x00abc."[..],
            "BYTEARRAY8",
        ),
        (&b"B\xff\xff\xff\x7fabc."[..], "BINBYTES"),
        (&b"\x95\x00\x00\x00\x00\x00\x00\x00\x10N."[..], "FRAME"),
    ] {
        let (result, largest) = largest_allocation(|| parse(pickle));
        match result {
            Err(PickleError::Truncated { opcode: found, .. }) => assert_eq!(found, opcode),
            other => panic!("{opcode}: {other:?}"),
        }
        assert!(largest < 64 * 1024, "{opcode}: allocated {largest} bytes");
    }
    let err = parse(b"\x8c\x10abc").unwrap_err();
    assert_eq!(
        err.to_string(),
        "truncated pickle: input ends at byte 5 inside SHORT_BINUNICODE (the opcode at byte 0 needs 13 more bytes)"
    );
    let err = parse(b"\x8c\x04abc").unwrap_err();
    assert!(
        err.to_string().ends_with("needs 1 more byte)"),
        "one byte, in the singular: {err}"
    );
}

#[test]
fn empty_input_is_not_a_pickle() {
    assert_eq!(parse(b"").unwrap_err(), PickleError::Empty);
    assert!(matches!(
        read_snapshot(b""),
        Err(SnapshotError::Pickle(PickleError::Empty))
    ));
}

#[test]
fn json_text_is_recognised() {
    let err = parse(br#"{"segments": []}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not a pickle: looks like JSON: it starts \"{\"segments\": []}\"; a memory snapshot is \
         the binary pickle torch.cuda.memory._dump_snapshot() writes"
    );
    let err = parse(b"  [1, 2]").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not a pickle: looks like JSON: "),
        "{err}"
    );
    // A TOML or INI section header opens no JSON array.
    let err = parse(b"[package]\nname = \"x\"\n").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not a pickle: looks like text: it starts \"[package]\""),
        "{err}"
    );
    let err = parse(b"Hello, world").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not a pickle: looks like text: "),
        "{err}"
    );
}

#[test]
fn text_starting_with_an_opcode_no_pickle_can_start_with_is_not_a_pickle() {
    // 'h' is BINGET and 'i' INST: opcodes, but both need what earlier
    // opcodes leave, so no pickle starts with them. The message quotes the
    // text, not the opcode.
    for (text, start) in [
        (&b"hello\n"[..], "it starts \"hello\""),
        (b"import torch\n", "it starts \"import torch\""),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with("not a pickle: looks like text: "), "{err}");
        assert!(err.contains(start), "{err}");
        assert!(!err.contains("BINGET") && !err.contains("INST"), "{err}");
        assert!(err.contains("_dump_snapshot()"), "{err}");
    }
    // A line longer than the quote ends in "…" inside it, with no byte
    // count: "(25 bytes)" in the quote counted the line, not the 26-byte
    // file.
    let err = parse(b"hello world, not a pickle\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("it starts \"hello world, not a pickl…\"; a memory snapshot"),
        "{err}"
    );
    assert!(!err.contains("bytes"), "{err}");
    // A protocol 0 pickle's first opcode still reads.
    assert!(parse(b"(lp0\nI1\na.").is_ok());
}

#[test]
fn text_starting_with_a_code_running_opcode_is_said_as_text_and_nothing_runs() {
    // 'c' is GLOBAL, 'P' PERSID, 'N' NONE then 'o' OBJ: opcodes that the
    // reader refuses, on a first line of words with a gap between them no
    // module name has. The message quotes the text, not the opcode.
    for (text, start) in [
        (
            &b"class Net(torch.nn.Module):\n    pass\n"[..],
            "it starts \"class Net(torch.nn.Modul…\"",
        ),
        (
            b"cd /tmp && python train.py\n",
            "it starts \"cd /tmp && python train.…\"",
        ),
        (
            b"Python 3.12 on the node\n",
            "it starts \"Python 3.12 on the node\"",
        ),
        (b"Notes on the run\n", "it starts \"Notes on the run\""),
        (
            b"import torch\nimport torch.nn as nn\n",
            "it starts \"import torch\"",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with("not a pickle: looks like text: "), "{err}");
        assert!(err.contains(start), "{err}");
        assert!(
            !err.contains("refused") && !err.contains("executed"),
            "{err}"
        );
    }
    // A pickle that names a module (no gap on its line), or a refused
    // opcode after a first line that read, is still refused as such.
    for pickle in [
        &b"cos\nsystem\n(S'echo hi'\ntR."[..],
        b"cbuiltins\nexec\n(Vprint(1)\ntR.",
        b"Pfoo\n.",
        b"(Vhello world\nios\nsystem\n.",
    ] {
        let err = parse(pickle).unwrap_err();
        assert!(matches!(err, PickleError::Refused { .. }), "{err:?}");
        assert!(err.to_string().contains("nothing was executed"), "{err}");
    }
}

#[test]
fn text_starting_with_an_opcode_that_fails_early_is_said_as_text() {
    // 'L' is LONG, 'N' NONE then 'a' APPEND, 'V' UNICODE then a line: each
    // first byte starts a pickle, but the parse fails within the first
    // line of what reads as text.
    for (text, start) in [
        (&b"Loading model...\n"[..], "it starts \"Loading model...\""),
        (b"Loading...", "it starts \"Loading...\""),
        (b"Name: foo\n", "it starts \"Name: foo\""),
        (b"Name:\tbash\nUmask:\t0022\n", "it starts \"Name:\\tbash\""),
        (b"Sure thing", "it starts \"Sure thing\""),
        (
            "Ошибка: нет памяти\n".as_bytes(),
            "it starts \"Ошибка: нет памяти\"",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with("not a pickle: looks like text: "), "{err}");
        assert!(err.contains(start), "{err}");
        assert!(!err.contains("byte"), "{err}");
    }
}

#[test]
fn a_saved_python_traceback_or_oom_message_is_said_as_one() {
    for (text, what) in [
        (
            &b"Traceback (most recent call last):\n  File \"train.py\", line 9\n"[..],
            "this is a Python traceback, not a memory snapshot",
        ),
        (
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
            "this is a PyTorch out-of-memory error, not a memory snapshot",
        ),
        (
            b"CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total)\n",
            "this is a PyTorch out-of-memory error, not a memory snapshot",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with("not a pickle: "), "{err}");
        assert!(err.contains(what), "{err}");
        assert!(err.contains("torch.cuda.memory._dump_snapshot("), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn protocol_0_pickles_that_fail_early_are_still_said_as_pickles() {
    // Printable, but no words on their first line: pickles, said as the
    // parse found them.
    for (pickle, said) in [
        (&b"Ne."[..], "malformed pickle: APPENDS at byte 1"),
        (b"Nz.", "unknown pickle opcode 0x7a ('z') at byte 1"),
        (b"(lp0\nI1\nI2\n", "truncated pickle"),
        (b"I12\n", "truncated pickle"),
        (
            b"cos\nsystem\n(S'echo hi'\ntR.",
            "refused pickle opcode GLOBAL",
        ),
    ] {
        let err = parse(pickle).unwrap_err().to_string();
        assert!(err.starts_with(said), "{pickle:?}: {err}");
    }
    // A code-running opcode after words is refused as such.
    let err = parse(b"(Vhello world\nios\nsystem\n.").unwrap_err();
    assert!(
        matches!(err, PickleError::Refused { opcode: "INST", .. }),
        "{err:?}"
    );
    // And a protocol 0 pickle still reads.
    assert!(parse(b"(dp0\nVsegments\np1\n(lp2\ns.").is_ok());
}

#[test]
fn zip_archives_are_recognised_as_checkpoints() {
    let err = read_snapshot(b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl").unwrap_err();
    assert_eq!(
        err.to_string(),
        "not a pickle: this is a zip archive (a torch.save checkpoint?), not a memory snapshot"
    );
    assert!(
        parse(b"\x1f\x8b\x08\x00")
            .unwrap_err()
            .to_string()
            .contains("gzip")
    );
}

#[test]
fn malformed_streams_say_what_and_where() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"\x80\x04K\x01",
            "truncated pickle: input ends at byte 4 without a STOP opcode",
        ),
        (
            b"\x80\x06N.",
            "unsupported pickle protocol 6 at byte 0 (this reader knows 0 to 5)",
        ),
        (b"N\xff.", "unknown pickle opcode 0xff at byte 1"),
        (b"Nz.", "unknown pickle opcode 0x7a ('z') at byte 1"),
        // After PROTO: at byte 0 these are "not a pickle" (no pickle can
        // start with them; see text_starting_with_an_opcode_…).
        (
            b"\x80\x02h\x05.",
            "malformed pickle: BINGET at byte 2: memo index 5 was never stored",
        ),
        (
            b"\x80\x02.",
            "malformed pickle: STOP at byte 2: stack underflow: needs an item above the last MARK",
        ),
        (
            b"Ne.",
            "malformed pickle: APPENDS at byte 1: no MARK to pop",
        ),
        (
            b"N(N\x86.",
            "malformed pickle: TUPLE2 at byte 3: stack underflow: needs 2 items above the last MARK",
        ),
        (
            b"}(Nu.",
            "malformed pickle: SETITEMS at byte 3: odd number of items (1) for key/value pairs",
        ),
        (
            b"K\x01K\x02a.",
            "malformed pickle: APPEND at byte 4: target is an int, not a container",
        ),
        (
            b"}Na.",
            "malformed pickle: APPEND at byte 2: target is a dict, not a list",
        ),
        (
            b"\x8c\x02\xff\xfe.",
            "malformed pickle: SHORT_BINUNICODE at byte 0: string is not valid UTF-8 (bad byte 0 of 2)",
        ),
        (
            b"I12x\n.",
            "malformed pickle: INT at byte 0: '12x' is not an integer",
        ),
        (
            b"Sabc\n.",
            "unsupported pickle opcode STRING at byte 0: Python 2 byte strings never occur in a memory snapshot",
        ),
        (
            b"\x8f.",
            "unsupported pickle opcode EMPTY_SET at byte 0: sets never occur in a memory snapshot",
        ),
        (
            b"I12",
            "truncated pickle: input ends at byte 3 inside INT (the opcode at byte 0 has no terminating newline)",
        ),
    ];
    for (pickle, message) in cases {
        assert_eq!(
            parse(pickle).unwrap_err().to_string(),
            *message,
            "{pickle:?}"
        );
    }
}

#[test]
fn data_after_stop_is_ignored() {
    assert_eq!(parse(b"K\x07.garbage\xff").unwrap(), Value::Int(7));
}

#[test]
fn item_limit_bounds_memory() {
    let limits = Limits {
        max_items: 10,
        ..Limits::default()
    };
    let pickle = [&[b'('][..], &[b'N'; 20], b"l."].concat();
    let err = pickle::parse(&pickle, &limits).unwrap_err();
    assert!(err.to_string().contains("more than 10 values"), "{err}");
    let limits = Limits {
        max_input_bytes: 3,
        ..Limits::default()
    };
    assert!(matches!(
        pickle::parse(b"NNN.", &limits),
        Err(PickleError::LimitExceeded { .. })
    ));
}

// ---- typed layer on hand-built snapshots ----------------------------------

/// A minimal protocol-4 pickle writer (no memo) for building test inputs.
fn to_pickle(value: &Value) -> Vec<u8> {
    fn write(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::None => out.push(b'N'),
            Value::Bool(true) => out.push(0x88),
            Value::Bool(false) => out.push(0x89),
            Value::Int(i) => match u8::try_from(*i) {
                Ok(small) => out.extend_from_slice(&[b'K', small]),
                Err(_) => {
                    // LONG1: minimal little-endian two's complement.
                    let mut bytes = i.to_le_bytes().to_vec();
                    while bytes.len() > 1 {
                        let top = bytes[bytes.len() - 1];
                        let next_sign = bytes[bytes.len() - 2] & 0x80;
                        if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                            bytes.pop();
                        } else {
                            break;
                        }
                    }
                    out.extend_from_slice(&[0x8a, bytes.len() as u8]);
                    out.extend_from_slice(&bytes);
                }
            },
            Value::Float(f) => {
                out.push(b'G');
                out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => {
                out.push(b'X');
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bytes(b) => {
                out.push(b'B');
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Value::List(items) => {
                out.extend_from_slice(b"](");
                items.iter().for_each(|item| write(item, out));
                out.push(b'e');
            }
            Value::Tuple(items) => {
                out.push(b'(');
                items.iter().for_each(|item| write(item, out));
                out.push(b't');
            }
            Value::Dict(pairs) => {
                out.extend_from_slice(b"}(");
                for (key, value) in pairs.iter() {
                    write(key, out);
                    write(value, out);
                }
                out.push(b'u');
            }
        }
    }
    let mut out = vec![0x80, 4];
    write(value, &mut out);
    out.push(b'.');
    out
}

fn int(i: i128) -> Value {
    Value::Int(i)
}

fn text(s: &str) -> Value {
    Value::Str(s.into())
}

fn list(items: Vec<Value>) -> Value {
    Value::List(items.into())
}

fn block(size: i128, state: &str) -> Value {
    dict_of(&[
        ("address", int(1 << 20)),
        ("size", int(size)),
        ("requested_size", int(size)),
        ("state", text(state)),
    ])
}

fn segment(blocks: Vec<Value>) -> Value {
    dict_of(&[
        ("device", int(0)),
        ("address", int(1 << 20)),
        ("total_size", int(2 << 20)),
        ("stream", int(0)),
        ("segment_type", text("small")),
        ("segment_pool_id", list(vec![int(0), int(3)])),
        ("blocks", list(blocks)),
    ])
}

fn snapshot_error(value: &Value) -> String {
    read_snapshot(&to_pickle(value)).unwrap_err().to_string()
}

#[test]
fn segments_of_none_are_a_type_error_not_a_missing_key() {
    // "without a 'segments' key (keys: 'segments')" contradicted itself.
    let file = dict_of(&[("segments", Value::None)]);
    assert_eq!(snapshot_error(&file), "segments: expected list, found None");
}

#[test]
fn dict_without_segments_is_not_a_snapshot() {
    let checkpoint = dict_of(&[("model", dict_of(&[])), ("optimizer", dict_of(&[]))]);
    let err = read_snapshot(&to_pickle(&checkpoint)).unwrap_err();
    assert!(matches!(err, SnapshotError::Shape(_)));
    assert_eq!(
        err.to_string(),
        "not a PyTorch memory snapshot: top level is a dict without a 'segments' key (keys: 'model', 'optimizer')"
    );
    assert_eq!(
        snapshot_error(&int(42)),
        "not a PyTorch memory snapshot: top level is an int (42), not a dict with 'segments' or a list of segments"
    );
    assert_eq!(
        snapshot_error(&list(vec![int(1), int(2)])),
        "not a PyTorch memory snapshot: top level is a list whose item [0] is an int (1), not a segment dict"
    );
}

#[test]
fn wrong_field_types_name_the_path() {
    let snapshot = dict_of(&[(
        "segments",
        list(vec![segment(vec![
            block(1 << 20, "inactive"),
            dict_of(&[("size", text("big")), ("state", text("inactive"))]),
        ])]),
    )]);
    assert_eq!(
        snapshot_error(&snapshot),
        "segments[0].blocks[1].size: expected int, found str"
    );
    let bare = list(vec![segment(vec![]), dict_of(&[("device", int(0))])]);
    assert_eq!(snapshot_error(&bare), "[1]: missing key 'address'");
    let traces = dict_of(&[
        ("segments", list(vec![])),
        (
            "device_traces",
            list(vec![list(vec![dict_of(&[
                ("action", text("alloc")),
                ("addr", int(0)),
                ("size", int(1)),
                ("stream", Value::Float(0.0)),
            ])])]),
        ),
    ]);
    assert_eq!(
        snapshot_error(&traces),
        "device_traces[0][0].stream: expected int, found float"
    );
}

#[test]
fn negative_and_oversized_numbers_are_rejected() {
    let negative = list(vec![segment(vec![block(-512, "inactive")])]);
    assert_eq!(
        snapshot_error(&negative),
        "[0].blocks[0].size: expected a non-negative int, found -512"
    );
    let huge = list(vec![segment(vec![block(1 << 64, "inactive")])]);
    assert_eq!(
        snapshot_error(&huge),
        "[0].blocks[0].size: 18446744073709551616 does not fit in 64 bits"
    );
    // Fits in 64 bits, but no device holds that many bytes.
    let beyond_any_device = list(vec![segment(vec![block((1 << 64) - 1, "inactive")])]);
    assert!(
        snapshot_error(&beyond_any_device).contains("more than any device holds"),
        "{}",
        snapshot_error(&beyond_any_device)
    );
}

#[test]
fn unknown_block_state_is_an_error_naming_it() {
    let snapshot = list(vec![segment(vec![block(512, "active_free_ish")])]);
    assert_eq!(
        snapshot_error(&snapshot),
        "[0].blocks[0].state: unknown block state 'active_free_ish' (expected 'active_allocated', 'active_pending_free' or 'inactive')"
    );
    // The docstring spelling is accepted.
    let awaiting = list(vec![segment(vec![block(512, "active_awaiting_free")])]);
    let snapshot = read_snapshot(&to_pickle(&awaiting)).unwrap();
    assert_eq!(
        snapshot.segments[0].blocks[0].state,
        BlockState::ActivePendingFree
    );
    assert_eq!(snapshot.segments[0].segment_pool_id, (0, 3));
}

#[test]
fn trace_entry_with_a_repeated_key_reads_its_last_value_as_python_does() {
    // The reader takes a trace entry's fields in one walk over its pairs;
    // a repeated key must still read as Python's dict would (the last
    // value), a None counting as absent, exactly as the whole-tree path.
    let entry = dict_of(&[
        ("action", text("alloc")),
        ("addr", int(4096)),
        ("size", int(1024)),
        ("stream", int(0)),
        ("time_us", int(17)),
        ("size", int(512)),
        ("time_us", Value::None),
        ("compile_context", text("N/A")),
    ]);
    let snapshot = dict_of(&[
        ("segments", list(vec![])),
        ("device_traces", list(vec![list(vec![entry])])),
    ]);
    let bytes = to_pickle(&snapshot);
    let read = read_snapshot(&bytes).unwrap();
    let trace = &read.device_traces[0];
    assert_eq!(trace[0].size, 512);
    assert_eq!(trace[0].time_us(), None);
    assert_eq!(trace[0].compile_context().map(|t| &**t), Some("N/A"));
    let whole = snapshot_from_value(&parse(&bytes).unwrap()).unwrap();
    assert_eq!(whole.device_traces, read.device_traces);
}

#[test]
fn unknown_trace_actions_are_skipped_and_counted() {
    let entry = |action: &str, addr_key: &str| {
        dict_of(&[
            ("action", text(action)),
            (addr_key, int(4096)),
            ("size", int(512)),
            ("stream", int(0)),
            ("time_us", int(17)),
            ("compile_context", text("N/A")),
            ("user_metadata", text("")),
            ("pool_id", list(vec![int(0), int(0)])),
        ])
    };
    let snapshot = dict_of(&[
        ("segments", list(vec![])),
        (
            "device_traces",
            list(vec![list(vec![
                entry("alloc", "addr"),
                entry("teleport", "addr"),
                entry("oom", "device_free"),
                entry("free_requested", "addr"),
            ])]),
        ),
        ("some_future_key", int(1)),
    ]);
    let snapshot = read_snapshot(&to_pickle(&snapshot)).unwrap();
    assert_eq!(snapshot.skipped_trace_entries, 1);
    assert_eq!(snapshot.skipped_trace_actions.names, vec!["teleport"]);
    assert!(!snapshot.skipped_trace_actions.more);
    let trace = &snapshot.device_traces[0];
    let actions: Vec<TraceAction> = trace.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        vec![
            TraceAction::Alloc,
            TraceAction::Oom,
            TraceAction::FreeRequested
        ]
    );
    assert_eq!(trace[1].addr, 4096);
    assert_eq!(trace[0].time_us(), Some(17));
    assert_eq!(trace[0].compile_context().map(|t| &**t), Some("N/A"));
    assert_eq!(trace[0].user_metadata().map(|t| &**t), Some(""));
    // Entries that say the same share one allocation for it.
    let shared = |i: usize| trace[i].extra.as_ref().map(Arc::as_ptr);
    assert!(shared(0).is_some());
    assert!((1..trace.len()).all(|i| shared(i) == shared(0)));
}

#[test]
fn unknown_trace_actions_keep_a_few_short_printable_names_whatever_the_file() {
    let entry = |action: &str| {
        dict_of(&[
            ("action", text(action)),
            ("addr", int(4096)),
            ("size", int(512)),
            ("stream", int(0)),
        ])
    };
    let long = "x".repeat(10_000);
    // A thousand entries of six distinct unknown names, repeated.
    let names = [
        "teleport",
        "warp\u{1b}[2J",
        &long,
        "fold",
        "spindle",
        "late",
    ];
    let entries = (0..1000).map(|i| entry(names[i % names.len()])).collect();
    let snapshot = dict_of(&[
        ("segments", list(vec![])),
        ("device_traces", list(vec![list(entries)])),
    ]);
    let snapshot = read_snapshot(&to_pickle(&snapshot)).unwrap();
    assert_eq!(snapshot.skipped_trace_entries, 1000);
    let kept = &snapshot.skipped_trace_actions;
    // The first four distinct names, in the order met; the rest said to be.
    assert_eq!(kept.names.len(), 4, "{kept:?}");
    assert_eq!(kept.names[0], "teleport");
    assert_eq!(kept.names[1], "warp\\u{1b}[2J", "the escape escaped");
    assert_eq!(kept.names[2], format!("{}…", "x".repeat(32)), "cut");
    assert_eq!(kept.names[3], "fold");
    assert!(kept.more);
    let said = snapshot.skipped_trace_text().expect("said");
    assert!(
        said.starts_with("1000 trace entries left out: their actions (teleport, warp"),
        "{said}"
    );
    assert!(said.contains(", fold, …) are unknown"), "{said}");
    assert!(!said.contains('\u{1b}'), "{said}");
}

// ---- truncation and mutation -----------------------------------------------

/// Removes CPython's FRAME opcodes (which sit back to back after PROTO), so
/// that truncations hit the opcodes themselves rather than the frame check.
fn unframe(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes[..2].to_vec();
    let mut pos = 2;
    while bytes.get(pos) == Some(&0x95) {
        let len = u64::from_le_bytes(bytes[pos + 1..pos + 9].try_into().unwrap()) as usize;
        out.extend_from_slice(&bytes[pos + 9..pos + 9 + len]);
        pos += 9 + len;
    }
    out.extend_from_slice(&bytes[pos..]);
    out
}

fn assert_every_prefix_fails(
    name: &str,
    bytes: &[u8],
    lengths: impl IntoIterator<Item = usize>,
) -> usize {
    let mut checked = 0;
    for len in lengths {
        if let Ok(snapshot) = read_snapshot(&bytes[..len]) {
            panic!(
                "{name}: the {len}-byte prefix read as a snapshot with {} segments",
                snapshot.segments.len()
            );
        }
        checked += 1;
    }
    checked
}

/// Every prefix in the first 4 KiB plus `spread` lengths evenly spaced over
/// the whole file.
fn prefix_lengths(size: usize, spread: usize) -> BTreeSet<usize> {
    let mut lengths: BTreeSet<usize> = (0..size.min(4096)).collect();
    lengths.extend((0..spread).map(|i| i * size / spread));
    lengths
}

#[test]
fn every_prefix_of_the_small_snapshots_fails_to_read() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for name in SMALL_FILES {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        assert!(bytes.len() <= 25 * 1024);
        assert_every_prefix_fails(name, &bytes, 0..bytes.len());
        // Without frames, each truncation lands inside a real opcode.
        let unframed = unframe(&bytes);
        assert_every_prefix_fails(name, &unframed, 0..unframed.len());
    }
}

/// How many evenly spread prefix lengths of the frame-stripped large files
/// to try (besides every prefix in the first 4 KiB). Without frames each
/// prefix costs time proportional to its length and unoptimised builds parse
/// at ~20-60 MB/s, so a debug `cargo test` tries 150 per file; `cargo test
/// --release` tries 2,000.
const LARGE_FILE_SPREAD: usize = if cfg!(debug_assertions) { 150 } else { 2000 };

fn check_large_file_prefixes(names: &[&str]) {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for name in names {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        // As PyTorch wrote them (with frames): every prefix. The frame chain
        // is checked before parsing, so most prefixes fail in microseconds.
        assert_every_prefix_fails(name, &bytes, 0..bytes.len());
        let unframed = unframe(&bytes);
        assert_every_prefix_fails(
            name,
            &unframed,
            prefix_lengths(unframed.len(), LARGE_FILE_SPREAD),
        );
    }
}

#[test]
fn every_prefix_of_the_large_snapshots_fails_to_read_part_1() {
    check_large_file_prefixes(&[
        "JasperSolt_EoR_NN_snapshot.pickle",
        "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
        "muduard_dump_snapshot_c.pickle",
        "muduard_memory_snapshot.pkl",
        HAND_MADE,
    ]);
}

#[test]
fn every_prefix_of_the_large_snapshots_fails_to_read_part_2() {
    check_large_file_prefixes(&[
        "muduard_dump_snapshot_a.pickle",
        "muduard_dump_snapshot_b.pickle",
        "silmont_fwd_fp32_128.pickle",
        "silmont_mem_snapshot.pickle",
        "volcengine_verl_mem.pickle",
    ]);
}

/// xorshift64*: deterministic, dependency-free randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Opcode and length bytes that make mutations reach interesting paths.
const INTERESTING_BYTES: &[u8] = b"\x00\xff\x7f\x80().0a2ehjqsu}]\x94\x85\x86\x8a\x8c\x95X";

fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    let len = bytes.len();
    match rng.below(6) {
        0 => bytes[rng.below(len)] = rng.next() as u8,
        1 => bytes[rng.below(len)] ^= 1 << rng.below(8),
        2 => {
            for _ in 0..2 + rng.below(7) {
                bytes[rng.below(len)] = rng.next() as u8;
            }
        }
        3 => bytes[rng.below(len)] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())],
        4 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            bytes.drain(start..end);
        }
        _ => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(64)).min(len);
            let copy = bytes[start..end].to_vec();
            let at = rng.below(len);
            bytes.splice(at..at, copy);
        }
    }
    bytes
}

#[test]
fn random_mutations_of_real_snapshots_never_panic() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut failed) = (0, 0);
    for name in SMALL_FILES {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        for original in [bytes.clone(), unframe(&bytes)] {
            for _ in 0..400 {
                let mutated = mutate(&mut rng, &original);
                match read_snapshot(&mutated) {
                    Ok(snapshot) => {
                        ok += 1;
                        check_invariants(&snapshot);
                        serde_json::to_string(&snapshot).unwrap();
                    }
                    Err(err) => {
                        failed += 1;
                        // Messages stay on one line whatever the input.
                        assert!(!err.to_string().contains('\n'), "{err}");
                    }
                }
            }
        }
    }
    assert_eq!(ok + failed, 2400);
    assert!(ok > 0 && failed > 0, "ok {ok}, failed {failed}");
}

// ---- property tests ---------------------------------------------------------

fn value_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::None),
        any::<bool>().prop_map(Value::Bool),
        any::<i128>().prop_map(Value::Int),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
            .prop_map(Value::Float),
        ".{0,12}".prop_map(|s| Value::Str(s.into())),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(|b| Value::Bytes(b.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            ".{0,6}".prop_map(|s| Value::Str(s.into())),
            any::<i64>().prop_map(|i| Value::Int(i.into()))
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(|v| Value::List(v.into())),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(|v| Value::Tuple(v.into())),
            proptest::collection::vec((key, inner), 0..6).prop_map(|p| Value::Dict(p.into())),
        ]
    })
}

proptest! {
    #[test]
    fn written_values_parse_back_unchanged(value in value_strategy()) {
        prop_assert_eq!(parse(&to_pickle(&value)).unwrap(), value);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(value) = parse(&bytes) {
            let _ = snapshot_from_value(&value);
        }
    }
}

// ---- bad input through the CLI -----------------------------------------------

mod common;

/// A protocol 4 pickle of `{'segments': <value>}` built from raw opcodes
/// (`value` is the opcodes of one value).
fn dict_with_segments(value: &[u8]) -> Vec<u8> {
    let mut out = b"\x80\x04}\x94\x8c\x08segments\x94".to_vec();
    out.extend_from_slice(value);
    out.extend_from_slice(b"s.");
    out
}

/// Every kind of bad input gives `vramtop open --summary`, `vramtop replay`
/// and `vramtop diff` one line on stderr saying what was found, exit code 2,
/// nothing on stdout and no panic; the line names only what the command
/// reads (`open` reads `vramtop record` files too, replay and diff do not).
#[test]
fn bad_inputs_are_one_line_errors_with_exit_2_naming_what_each_command_reads() {
    let dir = std::env::temp_dir().join(format!("vramtop-bad-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("executed");
    let mut evil = b"cos\nsystem\n(S'touch ".to_vec();
    evil.extend_from_slice(marker.display().to_string().as_bytes());
    evil.extend_from_slice(b"'\ntR.");
    let real = common::shared_snapshots_dir()
        .map(|d| std::fs::read(d.join("silmont_mem_snapshot.pickle")).unwrap());
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "empty.pickle",
            Vec::new(),
            // Said alike by every command (`open` reads recordings too).
            "the file is empty",
        ),
        (
            "magic.pickle",
            b"\x00\x01binary junk".to_vec(),
            "first byte 0x00 is not a pickle opcode",
        ),
        (
            "model.pt",
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl".to_vec(),
            "this is a zip archive (a torch.save checkpoint?), not a memory snapshot",
        ),
        (
            "gzipped.pickle",
            b"\x1f\x8b\x08\x00\x00\x00".to_vec(),
            "gzip",
        ),
        (
            "no_segments.pickle",
            b"\x80\x04}\x94\x8c\x03foo\x94K\x01s.".to_vec(),
            "top level is a dict without a 'segments' key (keys: 'foo')",
        ),
        (
            "ints.pickle",
            b"\x80\x04]\x94(K\x01K\x02K\x03e.".to_vec(),
            "top level is a list whose item [0] is an int (1), not a segment dict",
        ),
        (
            "evil.pickle",
            evil,
            "refused pickle opcode GLOBAL (os.system)",
        ),
        (
            "segments_int.pickle",
            dict_with_segments(b"K\x05"),
            "segments: expected list, found int",
        ),
        (
            "segment_str_address.pickle",
            dict_with_segments(b"]}(\x8c\x06device\x94K\x00\x8c\x07address\x94\x8c\x01x\x94ua"),
            "segments[0].address: expected int, found str",
        ),
        (
            "notes.txt",
            b"some notes\nnot a snapshot\n".to_vec(),
            "not a pickle: looks like text",
        ),
        (
            "no_stop.pickle",
            b"\x80\x04K\x01".to_vec(),
            "the file ends early: 4 bytes, cut before the pickle's end mark; was it copied \
             whole? (truncated pickle: no STOP opcode)",
        ),
    ];
    if let Some(real) = real {
        cases.push((
            "truncated.pickle",
            real[..real.len() / 2].to_vec(),
            "truncated pickle",
        ));
    }
    for (name, bytes, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let path = path.display().to_string();
        let good = "tests/fixtures/fuzz-nan-in-unknown-setting.pickle";
        // (command line, whether the command reads `vramtop record` files)
        for (args, reads_recordings) in [
            (vec!["open", &path, "--summary"], true),
            (vec!["open", &path, "--summary", "--no-trace"], true),
            (vec!["replay", &path], false),
            (vec!["diff", &path, good], false),
            (vec!["diff", good, &path], false),
        ] {
            let (code, out, err) = common::run_vramtop(&args, None);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(out.is_empty(), "{args:?}: {out}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.contains(expected), "{args:?}: {err}");
            assert!(err.contains(name), "the file is named: {err}");
            assert!(!err.contains("panicked"), "{err}");
            if !reads_recordings {
                assert!(!err.contains("vramtop record"), "{args:?}: {err}");
            }
        }
    }
    assert!(!marker.exists(), "the pickle's os.system call ran");
    let empty = dir.join("empty.pickle").display().to_string();
    let (_, _, err) = common::run_vramtop(&["open", &empty, "--summary"], None);
    assert!(
        err.contains(
            "empty.pickle: the file is empty: no memory snapshot and no `vramtop record` \
             sample in it yet"
        ),
        "{err}"
    );
    for args in [vec!["replay", &empty], vec!["diff", &empty, &empty]] {
        let (_, _, err) = common::run_vramtop(&args, None);
        assert!(
            err.contains("empty.pickle: the file is empty: no memory snapshot in it yet"),
            "{args:?}: {err}"
        );
    }
    // Text: `open` says what a recording needs, replay and diff only that
    // it is no snapshot.
    let notes = dir.join("notes.txt").display().to_string();
    let (_, _, err) = common::run_vramtop(&["open", &notes, "--summary"], None);
    assert!(err.contains("if this is a `vramtop record` file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn progress_reaches_the_file_length_and_the_result_is_the_plain_read() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let path = dir.join("JasperSolt_EoR_NN_snapshot.pickle");
    let progress = std::sync::atomic::AtomicU64::new(0);
    let with = vramtop::snapshot::read_snapshot_file_with_progress(&path, &progress).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(progress.load(std::sync::atomic::Ordering::Relaxed), len);
    assert_eq!(with, vramtop::snapshot::read_snapshot_file(&path).unwrap());
    // A bad file names itself through this entry point too.
    let missing = dir.join("no-such-file.pickle");
    let err = vramtop::snapshot::read_snapshot_file_with_progress(&missing, &progress)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-file.pickle"), "{err}");
}

/// `read_snapshot` converts the trace entry by entry (never holding the
/// whole trace as values); it must agree with converting the whole value
/// tree, on every real file and on hand-made sharing the fast path must
/// not break (an entry referenced twice, frames shared with blocks).
#[test]
fn entry_by_entry_reading_agrees_with_the_whole_tree() {
    let check = |name: &str, bytes: &[u8]| {
        let whole = vramtop::snapshot::snapshot_from_value(&parse(bytes).unwrap());
        let streamed = read_snapshot(bytes);
        match (whole, streamed) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
            (a, b) => panic!("{name}: {a:?} vs {b:?}"),
        }
    };
    if let Some(dir) = common::shared_snapshots_dir() {
        for (name, bytes) in all_snapshot_files(&dir) {
            check(&name, &bytes);
        }
    }
    // {'segments': [], 'device_traces': [[e, e]]} with e memoised once.
    let entry = b"}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x00\x8c\x04size\x94M\x00\x02\x8c\x06stream\x94K\x00u";
    let mut shared =
        b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94]\x94(".to_vec();
    shared.extend_from_slice(entry);
    shared.extend_from_slice(b"h\x06eau.");
    check("entry referenced twice", &shared);
    let snapshot = read_snapshot(&shared).unwrap();
    assert_eq!(snapshot.device_traces[0].len(), 2);
    // A bad field inside an entry names its place in the trace.
    let mut bad =
        b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94]\x94(".to_vec();
    bad.extend_from_slice(entry);
    bad.extend_from_slice(b"}\x94(h\x07h\x08h\x09\x8c\x01xh\x0aM\x00\x02h\x0bK\x00ueau.");
    check("bad second entry", &bad);
    let err = read_snapshot(&bad).unwrap_err().to_string();
    assert_eq!(err, "device_traces[0][1].addr: expected int, found str");
    // PyTorch's layout (a new frames list per entry) with the optional
    // fields in every combination the entry-by-entry fast path reads.
    let mut snapshot =
        vramtop::snapshot::synth::large(&vramtop::snapshot::synth::LargeShape::about_bytes(60_000));
    for (i, entry) in snapshot.device_traces[0].iter_mut().enumerate() {
        match i % 5 {
            0 => entry.time = EntryTime::NONE,
            1 => entry.extra = TraceExtra::of(Some("torch.compile".into()), None),
            2 => entry.extra = TraceExtra::of(None, Some("step 3".into())),
            3 => {
                entry.action = TraceAction::Oom;
                entry.frames = Arc::from(Vec::new());
            }
            _ => {}
        }
    }
    for fresh_frame_lists in [true, false] {
        let mut bytes = Vec::new();
        vramtop::snapshot::write_snapshot_with(
            &snapshot,
            &mut bytes,
            &vramtop::snapshot::WriteOptions { fresh_frame_lists },
        )
        .unwrap();
        check(
            &format!("synthetic, fresh_frame_lists {fresh_frame_lists}"),
            &bytes,
        );
        assert_eq!(
            read_snapshot(&bytes).unwrap().device_traces,
            snapshot.device_traces
        );
    }
}

/// Frames lists met for the first time are read in place, frame dict by
/// frame dict, without building their values; odd frame dicts must read
/// exactly as the whole tree does (the same frames, or the same error).
#[test]
fn tracebacks_read_in_place_agree_with_the_whole_tree_for_odd_frame_dicts() {
    let frame = |pairs: &[(&str, Value)]| dict_of(pairs);
    let plain = || {
        frame(&[
            ("filename", text("a.py")),
            ("line", int(3)),
            ("name", text("f")),
        ])
    };
    let cases: Vec<(&str, Value)> = vec![
        ("plain", list(vec![plain(), plain()])),
        ("empty", list(vec![])),
        (
            "a repeated key: the last one counts",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(1)),
                ("name", text("f")),
                ("line", int(2)),
            ])]),
        ),
        (
            "a last value None is a missing key",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(1)),
                ("name", text("f")),
                ("name", Value::None),
            ])]),
        ),
        (
            "a bool line",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", Value::Bool(true)),
                ("name", text("f")),
            ])]),
        ),
        (
            "a negative line (C++'s unsigned -1)",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(-1)),
                ("name", text("f")),
            ])]),
        ),
        (
            "a line past 64 bits",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(1 << 70)),
                ("name", text("f")),
            ])]),
        ),
        (
            "extra keys",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(3)),
                ("name", text("f")),
                ("column", int(7)),
            ])]),
        ),
        (
            "an extra key holding a container",
            list(vec![frame(&[
                ("filename", text("a.py")),
                ("line", int(3)),
                ("name", text("f")),
                ("locals", list(vec![int(1)])),
            ])]),
        ),
        (
            "an int filename",
            list(vec![frame(&[
                ("filename", int(5)),
                ("line", int(3)),
                ("name", text("f")),
            ])]),
        ),
        (
            "a frame that is a list",
            list(vec![plain(), list(vec![text("a.py")])]),
        ),
        ("a frame that is None", list(vec![plain(), Value::None])),
        (
            "a missing filename",
            list(vec![frame(&[("line", int(3)), ("name", text("f"))])]),
        ),
    ];
    for (name, frames) in cases {
        let entry = dict_of(&[
            ("action", text("alloc")),
            ("addr", int(4096)),
            ("size", int(512)),
            ("stream", int(0)),
            ("frames", frames),
        ]);
        // The trace first: nothing is frozen before its entries are read.
        let snapshot = dict_of(&[
            (
                "device_traces",
                list(vec![list(vec![entry.clone(), entry])]),
            ),
            ("segments", list(vec![])),
        ]);
        let bytes = to_pickle(&snapshot);
        let whole = snapshot_from_value(&parse(&bytes).unwrap());
        let in_place = read_snapshot(&bytes);
        match (whole, in_place) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
            (a, b) => panic!("{name}: {a:?} vs {b:?}"),
        }
    }
}

#[test]
fn a_trace_entry_referring_to_the_root_is_a_cycle_error() {
    // root = {'segments': [], 'device_traces': [[{'action': 'alloc', 'back': root}]]}
    let pickle = b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94]\x94}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04back\x94h\x00uaau.";
    let err = read_snapshot(pickle).unwrap_err().to_string();
    assert!(err.contains("contains itself"), "{err}");
}

// ---- staged read: the segments first, then the whole snapshot ---------------

/// Reads `bytes` in stages: the segments stage if there is one, and the
/// complete read's result.
fn staged(bytes: &[u8]) -> (Option<Snapshot>, Result<Snapshot, SnapshotError>) {
    let mut stage = None;
    let full = read_snapshot_staged(bytes, &Limits::default(), |s| stage = Some(s));
    (stage, full)
}

/// The top-level keys of a pickled dict in file order (empty for a list).
fn top_level_keys(bytes: &[u8]) -> Vec<String> {
    let root = parse(bytes).unwrap();
    root.as_dict()
        .unwrap_or_default()
        .iter()
        .filter_map(|(key, _)| key.as_str().map(str::to_string))
        .collect()
}

/// Whether a file's segments come before its trace: what makes a
/// segments stage.
fn segments_before_trace(keys: &[String]) -> bool {
    let at = |name: &str| keys.iter().position(|k| k == name);
    matches!((at("segments"), at("device_traces")), (Some(s), Some(t)) if s < t)
}

fn assert_stage_matches(name: &str, stage: &Snapshot, full: &Snapshot) {
    assert_eq!(stage.segments, full.segments, "{name}: segments");
    assert_eq!(stage.format, full.format, "{name}: format");
    assert!(
        stage.device_traces.iter().all(Vec::is_empty),
        "{name}: the stage has no trace"
    );
}

#[test]
fn segments_stage_of_every_shared_snapshot_equals_the_full_reads_segments() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let mut staged_files = 0;
    for (name, bytes) in all_snapshot_files(&dir) {
        let (stage, full) = staged(&bytes);
        let full = full.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(full, read_snapshot(&bytes).unwrap(), "{name}: full read");
        let keys = top_level_keys(&bytes);
        assert_eq!(
            stage.is_some(),
            segments_before_trace(&keys),
            "{name}: a stage exactly when the segments precede the trace ({keys:?})"
        );
        if let Some(stage) = stage {
            assert_stage_matches(&name, &stage, &full);
            staged_files += 1;
        }
    }
    assert!(
        staged_files > 0,
        "no shared snapshot was read in two stages"
    );
}

#[test]
fn staged_file_read_equals_the_one_stage_read_of_every_shared_snapshot() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for (name, path) in common::snapshot_files_in(&dir) {
        let progress = AtomicU64::new(0);
        let mut stage = None;
        let full = read_snapshot_file_staged(&path, &progress, |s| stage = Some(s))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(full, read_snapshot_file(&path).unwrap(), "{name}");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            stage.is_some(),
            segments_before_trace(&top_level_keys(&bytes)),
            "{name}"
        );
        if let Some(stage) = stage {
            assert_stage_matches(&name, &stage, &full);
        }
        assert_eq!(
            progress.into_inner(),
            bytes.len() as u64,
            "{name}: progress"
        );
    }
}

/// A small snapshot with every top-level key PyTorch writes, as a value.
fn hand_built_snapshot_value() -> Value {
    use vramtop::snapshot::{Annotation, Block, Frame, Segment, TraceEntry};
    let frames: vramtop::snapshot::Frames = Arc::from(vec![Frame {
        filename: "train.py".into(),
        line: 7,
        name: "step".into(),
    }]);
    let snapshot = Snapshot {
        format: SnapshotFormat::DumpSnapshot,
        segments: vec![Segment {
            device: 0,
            address: 1 << 30,
            total_size: 2 << 20,
            allocated_size: Some(1 << 20),
            active_size: Some(1 << 20),
            requested_size: Some(1 << 20),
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: frames.clone(),
            blocks: vec![
                Block {
                    address: 1 << 30,
                    size: 1 << 20,
                    requested_size: 1 << 20,
                    state: BlockState::ActiveAllocated,
                    frames: frames.clone(),
                },
                Block {
                    address: (1 << 30) + (1 << 20),
                    size: 1 << 20,
                    requested_size: 0,
                    state: BlockState::Inactive,
                    frames: Arc::from(Vec::new()),
                },
            ],
        }],
        device_traces: vec![vec![TraceEntry {
            action: TraceAction::Alloc,
            addr: 1 << 30,
            size: 1 << 20,
            stream: 0,
            time: EntryTime::new(Some(5)),
            frames,
            extra: None,
        }]],
        allocator_settings: Some(vramtop::snapshot::capture::settings_of(
            &vramtop::alloc::AllocatorConfig::default(),
        )),
        external_annotations: vec![Annotation {
            stage: "START".into(),
            name: "fwd".into(),
            device: 0,
            time_us: 1,
        }],
        skipped_trace_entries: 0,
        skipped_trace_actions: Default::default(),
        trace_not_read: false,
        block_history: false,
    };
    parse(&vramtop::snapshot::snapshot_to_bytes(&snapshot)).unwrap()
}

/// `value` (a dict) with its top-level keys in `order`.
fn with_key_order(value: &Value, order: &[&str]) -> Vec<u8> {
    let pairs = value.as_dict().unwrap();
    let reordered: Vec<(Value, Value)> = order
        .iter()
        .map(|name| {
            pairs
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .unwrap_or_else(|| panic!("no key {name}"))
                .clone()
        })
        .collect();
    to_pickle(&Value::Dict(reordered.into()))
}

#[test]
fn keys_in_any_order_read_the_same_with_a_stage_only_when_segments_lead() {
    let value = hand_built_snapshot_value();
    let orders: [&[&str]; 5] = [
        &[
            "segments",
            "device_traces",
            "allocator_settings",
            "external_annotations",
        ],
        &[
            "allocator_settings",
            "segments",
            "device_traces",
            "external_annotations",
        ],
        &[
            "device_traces",
            "segments",
            "allocator_settings",
            "external_annotations",
        ],
        &[
            "external_annotations",
            "device_traces",
            "allocator_settings",
            "segments",
        ],
        &[
            "segments",
            "allocator_settings",
            "external_annotations",
            "device_traces",
        ],
    ];
    let reference = read_snapshot(&with_key_order(&value, orders[0])).unwrap();
    assert_eq!(reference.device_traces[0].len(), 1);
    for order in orders {
        let bytes = with_key_order(&value, order);
        let (stage, full) = staged(&bytes);
        assert_eq!(full.unwrap(), reference, "{order:?}");
        let keys: Vec<String> = order.iter().map(|k| k.to_string()).collect();
        assert_eq!(stage.is_some(), segments_before_trace(&keys), "{order:?}");
        let Some(stage) = stage else { continue };
        assert_stage_matches(&format!("{order:?}"), &stage, &reference);
        let before_trace = |name: &str| {
            order.iter().position(|k| *k == name) < order.iter().position(|k| *k == "device_traces")
        };
        assert_eq!(
            stage.allocator_settings.is_some(),
            before_trace("allocator_settings"),
            "{order:?}: settings in the stage when they come first"
        );
        assert_eq!(
            stage.external_annotations.is_empty(),
            !before_trace("external_annotations"),
            "{order:?}"
        );
    }
}

#[test]
fn bare_segment_lists_and_state_only_files_read_in_one_stage() {
    let value = hand_built_snapshot_value();
    let segments = value.get("segments").unwrap().clone();
    let state_only = with_key_order(&value, &["segments", "allocator_settings"]);
    for bytes in [to_pickle(&segments), state_only] {
        let (stage, full) = staged(&bytes);
        assert!(stage.is_none());
        assert_eq!(full.unwrap(), read_snapshot(&bytes).unwrap());
    }
}

#[test]
fn truncated_files_give_the_one_stage_error_after_any_stage() {
    let value = hand_built_snapshot_value();
    let bytes = with_key_order(
        &value,
        &[
            "segments",
            "device_traces",
            "allocator_settings",
            "external_annotations",
        ],
    );
    let trace_at = bytes
        .windows(b"device_traces".len())
        .position(|w| w == b"device_traces")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pickle");
    let mut stages = 0;
    for cut in (0..bytes.len()).step_by(7) {
        let cut_bytes = &bytes[..cut];
        let one_stage = read_snapshot(cut_bytes).unwrap_err().to_string();
        let (stage, full) = staged(cut_bytes);
        assert_eq!(full.unwrap_err().to_string(), one_stage, "cut at {cut}");
        // The key and its length byte complete the segments.
        assert_eq!(
            stage.is_some(),
            cut >= trace_at + b"device_traces".len(),
            "cut at {cut}"
        );
        stages += usize::from(stage.is_some());

        std::fs::write(&path, cut_bytes).unwrap();
        let progress = AtomicU64::new(0);
        let from_file = read_snapshot_file_staged(&path, &progress, |_| {}).unwrap_err();
        assert_eq!(
            from_file.to_string(),
            read_snapshot_file(&path).unwrap_err().to_string(),
            "cut at {cut}"
        );
    }
    assert!(stages > 0);
}

/// The one-stage read's result as comparable text (the error's message).
fn outcome(result: Result<Snapshot, SnapshotError>) -> Result<Snapshot, String> {
    result.map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_snapshots_read_in_stages_end_as_the_one_stage_read(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cut in any::<usize>(),
    ) {
        let value = hand_built_snapshot_value();
        let mut bytes = with_key_order(
            &value,
            &["segments", "device_traces", "allocator_settings", "external_annotations"],
        );
        for (at, byte) in flips {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        let (stage, full) = staged(&bytes);
        prop_assert_eq!(outcome(full), outcome(read_snapshot(&bytes)));
        if let Some(stage) = stage {
            prop_assert!(stage.device_traces.iter().all(Vec::is_empty));
        }
    }
}

#[test]
fn an_unknown_settings_nan_survives_the_writer() {
    // Found by the reader fuzzer: `allocator_settings` with an unknown key
    // whose value is NaN. The written copy reads back with the same keys and
    // the NaN (which never equals itself, so the copy is compared printed).
    let bytes = include_bytes!("fixtures/fuzz-nan-in-unknown-setting.pickle");
    let read = read_snapshot(bytes).unwrap();
    let settings = read.allocator_settings.as_ref().unwrap();
    let nan_value = |s: &vramtop::snapshot::AllocatorSettings| {
        s.file_order.iter().any(|key| {
            matches!(key, vramtop::snapshot::types::SettingsKey::Other(_, Value::Float(f)) if f.is_nan())
        })
    };
    assert!(nan_value(settings));
    let again = read_snapshot(&vramtop::snapshot::snapshot_to_bytes(&read)).unwrap();
    assert!(nan_value(again.allocator_settings.as_ref().unwrap()));
    assert_eq!(again.segments, read.segments);
    assert_eq!(format!("{again:?}"), format!("{read:?}"));
}

// ---- segments read in place ---------------------------------------------------

/// A valid segment dict (two blocks, frames shared) as PyTorch writes it.
fn segment_dict(address: i128) -> Vec<(Value, Value)> {
    let frame = dict_of(&[
        ("filename", text("train.py")),
        ("line", int(7)),
        ("name", text("step")),
    ]);
    let frames = list(vec![frame]);
    let block = |offset: i128, state: &str, frames: Value| {
        dict_of(&[
            ("address", int(address + offset)),
            ("size", int(1 << 20)),
            ("requested_size", int(1000)),
            ("state", text(state)),
            ("frames", frames),
        ])
    };
    let pairs = [
        ("device", int(0)),
        ("address", int(address)),
        ("total_size", int(2 << 20)),
        ("allocated_size", int(1 << 20)),
        ("active_size", int(1 << 20)),
        ("requested_size", int(1000)),
        ("stream", int(0)),
        ("segment_type", text("large")),
        ("segment_pool_id", Value::Tuple(vec![int(0), int(0)].into())),
        ("is_expandable", Value::Bool(false)),
        ("frames", frames.clone()),
        (
            "blocks",
            list(vec![
                block(0, "active_allocated", frames),
                block(1 << 20, "inactive", list(vec![])),
            ]),
        ),
    ];
    pairs
        .into_iter()
        .map(|(k, v)| (Value::Str(k.into()), v))
        .collect()
}

/// Values a mutated field may take: right and wrong types, out-of-range
/// ints, containers.
fn odd_field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::None),
        (0i128..8).prop_map(|i| int(i << 20)),
        Just(int(-1)),
        Just(int(1 << 64)),
        Just(int(1 << 62)),
        Just(Value::Bool(true)),
        Just(Value::Float(1.5)),
        Just(text("small")),
        Just(text("active_pending_free")),
        Just(text("nonsense")),
        Just(list(vec![int(3), int(-4)])),
        Just(Value::Tuple(vec![int(1)].into())),
        Just(list(vec![dict_of(&[
            ("filename", text("a.py")),
            ("line", int(-3)),
            ("name", text("f")),
        ])])),
        Just(list(vec![int(5)])),
        Just(list(vec![dict_of(&[
            ("addr", int(0)),
            ("real_size", int(7))
        ])])),
        Just(dict_of(&[("x", int(1))])),
    ]
}

const SEGMENT_FIELD_NAMES: [&str; 14] = [
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
    "unknown",
    "history",
];

/// One change to a segment (`block` None) or to one of its blocks: a
/// field removed, set, or given a second time.
#[derive(Debug, Clone)]
struct FieldChange {
    block: Option<usize>,
    key: usize,
    kind: u8,
    value: Value,
}

fn field_change() -> impl Strategy<Value = FieldChange> {
    (
        proptest::option::of(0usize..2),
        0..SEGMENT_FIELD_NAMES.len(),
        0u8..3,
        odd_field_value(),
    )
        .prop_map(|(block, key, kind, value)| FieldChange {
            block,
            key,
            kind,
            value,
        })
}

fn apply_change(pairs: &mut Vec<(Value, Value)>, key: &str, kind: u8, value: Value) {
    let key = Value::Str(key.into());
    match kind {
        0 => pairs.retain(|(k, _)| *k != key),
        1 => match pairs.iter_mut().find(|(k, _)| *k == key) {
            Some(pair) => pair.1 = value,
            None => pairs.push((key, value)),
        },
        _ => pairs.push((key, value)),
    }
}

fn changed_segment(address: i128, changes: &[FieldChange]) -> Value {
    let mut pairs = segment_dict(address);
    for change in changes {
        let key = SEGMENT_FIELD_NAMES[change.key];
        match change.block {
            None => apply_change(&mut pairs, key, change.kind, change.value.clone()),
            Some(index) => {
                let Some((_, Value::List(blocks))) =
                    pairs.iter_mut().find(|(k, _)| k.as_str() == Some("blocks"))
                else {
                    continue;
                };
                let mut items = blocks.to_vec();
                if let Some(Value::Dict(block)) = items.get_mut(index) {
                    let mut block_pairs = block.to_vec();
                    apply_change(&mut block_pairs, key, change.kind, change.value.clone());
                    *block = block_pairs.into();
                }
                *blocks = items.into();
            }
        }
    }
    Value::Dict(pairs.into())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Segments read straight from the parsed document (when no trace is
    /// read after them: a bare list, a dict without a trace) must read
    /// exactly as converting their values does: the same snapshot, or the
    /// same error, for any change to any field and under any nesting
    /// limit. With a trace they are built as values first; that is
    /// compared too.
    #[test]
    fn segments_read_in_place_agree_with_the_value_tree(
        first in proptest::collection::vec(field_change(), 0..3),
        second in proptest::collection::vec(field_change(), 0..2),
        with_trace in any::<bool>(),
        max_depth in 5usize..10,
    ) {
        let segments = list(vec![
            changed_segment(1 << 30, &first),
            changed_segment(1 << 31, &second),
        ]);
        let mut pairs = vec![("segments", segments.clone())];
        if with_trace {
            let entry = dict_of(&[
                ("action", text("alloc")),
                ("addr", int(1 << 30)),
                ("size", int(1 << 20)),
                ("stream", int(0)),
                ("frames", list(vec![dict_of(&[
                    ("filename", text("train.py")),
                    ("line", int(7)),
                    ("name", text("step")),
                ])])),
            ]);
            pairs.push(("device_traces", list(vec![list(vec![entry])])));
        }
        let limits = Limits { max_depth, ..Limits::default() };
        // The dict PyTorch dumps, and a bare list of segments.
        for bytes in [to_pickle(&dict_of(&pairs)), to_pickle(&segments)] {
            let read = outcome(vramtop::snapshot::read_snapshot_with_limits(&bytes, &limits));
            let tree = match pickle::parse(&bytes, &limits) {
                Ok(value) => outcome(snapshot_from_value(&value)),
                Err(e) => outcome(Err(SnapshotError::from(e))),
            };
            prop_assert_eq!(&read, &tree);
            // A read that skips the stacks: whatever the stacks hold, the
            // same snapshot with every traceback empty wherever the full
            // read succeeds (and never a panic where it fails).
            let skipped = outcome(vramtop::snapshot::read_snapshot_bytes_with(
                &bytes,
                &limits,
                vramtop::snapshot::Stacks::Skip,
            ));
            if let Ok(read) = read {
                prop_assert_eq!(skipped, Ok(common::without_stacks(read)));
            }
        }
    }
}

#[test]
fn unchanged_segments_read_in_place_as_the_value_tree_reads_them() {
    let bytes = to_pickle(&dict_of(&[(
        "segments",
        list(vec![
            changed_segment(1 << 30, &[]),
            changed_segment(1 << 31, &[]),
        ]),
    )]));
    let read = read_snapshot(&bytes).unwrap();
    assert_eq!(read.segments.len(), 2);
    assert_eq!(read.segments[0].blocks[0].frames[0].line, 7);
    assert_eq!(read.segments[1].segment_pool_id, (0, 0));
    assert_eq!(read, snapshot_from_value(&parse(&bytes).unwrap()).unwrap());
}

/// A stream that gives at most `step` bytes a read, as a pipe whose writer
/// writes in small pieces does.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        let (now, rest) = self.bytes.split_at(n);
        buf[..n].copy_from_slice(now);
        self.bytes = rest;
        Ok(n)
    }
}

#[test]
fn a_streams_final_state_is_the_files_however_the_stream_is_split() {
    use vramtop::snapshot::{read_snapshot_file_final_state, read_snapshot_from_final_state};
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for (name, path) in common::snapshot_files_in(&dir) {
        let bytes = std::fs::read(&path).expect("the shared file reads");
        let from_file = read_snapshot_file_final_state(&path).expect("the file's final state");
        // A pipe's 64 KiB, a writer's odd small pieces, one read.
        for step in [65_536, 4_099, bytes.len().max(1)] {
            let from_stream = read_snapshot_from_final_state(
                Trickle {
                    bytes: &bytes,
                    step,
                },
                Path::new("standard input"),
            )
            .unwrap_or_else(|e| panic!("{name}, {step}-byte reads: {e}"));
            assert_eq!(
                from_stream, from_file,
                "{name}, {step}-byte reads: the stream's final state is the file's"
            );
        }
    }
}
