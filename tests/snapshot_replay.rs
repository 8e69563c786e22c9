//! `replay --verify` against real PyTorch snapshots (ground truth) and
//! against traces the model records itself for cases no shared file holds.

mod common;

use vramtop::alloc::{CachingAllocator, InMemoryDevice};
use vramtop::snapshot::capture::snapshot_of;
use vramtop::snapshot::replay::{ReplayStart, VerifyReport, verify};
use vramtop::snapshot::{Stacks, read_snapshot_file, read_snapshot_file_with};

use common::shared_snapshot as shared;
use common::workload::{mixed_workload, model};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn verify_shared(name: &str) -> Option<VerifyReport> {
    let path = shared(name)?;
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    Some(verify(&snapshot))
}

fn assert_full_replay(name: &str, allocations: usize, start_empty: bool) {
    let Some(report) = verify_shared(name) else {
        return;
    };
    assert!(report.findings.is_empty(), "{name}: {:?}", report.findings);
    assert_eq!(report.replays.len(), 1, "{name}: one device trace");
    let r = &report.replays[0];
    assert_eq!(r.divergence, None, "{name}");
    assert_eq!(r.allocations_replayed, allocations, "{name}");
    assert_eq!(r.addresses_matched, allocations, "{name}: every address");
    assert_eq!(r.events_matched, r.events_in_trace, "{name}: every event");
    assert!(r.final_layout_matches, "{name}: {:?}", r.layout_differences);
    assert_eq!(r.reserved_model, r.reserved_snapshot, "{name}");
    assert_eq!(r.allocated_model, r.allocated_snapshot, "{name}");
    assert_eq!(
        matches!(r.start, ReplayStart::Empty),
        start_empty,
        "{name}: {:?}",
        r.start
    );
    if start_empty {
        assert_eq!(r.stale_requested_sizes_match, Some(true), "{name}");
    }
    assert!(report.full_match(), "{name}");
}

#[test]
fn silmont_full_history_replays_36_of_36_with_identical_layout() {
    assert_full_replay("silmont_mem_snapshot.pickle", 36, true);
}

#[test]
fn silmont_steady_state_trace_replays_681_of_681_from_a_rebuilt_start() {
    assert_full_replay("silmont_fwd_fp32_128.pickle", 681, false);
}

#[test]
fn shreyansh26_training_step_traces_replay_in_full() {
    assert_full_replay(
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
        12,
        true,
    );
    assert_full_replay(
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
        12,
        true,
    );
}

#[test]
fn mid_run_trace_with_segment_allocs_inside_replays_in_full() {
    assert_full_replay("JasperSolt_EoR_NN_snapshot.pickle", 1935, false);
    if let Some(report) = verify_shared("JasperSolt_EoR_NN_snapshot.pickle") {
        assert_eq!(report.replays[0].segment_allocs, 7);
    }
}

#[test]
fn state_only_snapshots_pass_their_invariant_checks() {
    for name in [
        "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
        "albi2_thesis-text-to-SQL_dump_snapshot.pickle",
        "muduard_dump_snapshot_a.pickle",
        "muduard_dump_snapshot_b.pickle",
        "muduard_dump_snapshot_c.pickle",
        "muduard_memory_snapshot.pkl",
        "volcengine_verl_mem.pickle",
    ] {
        let Some(report) = verify_shared(name) else {
            return;
        };
        assert!(report.findings.is_empty(), "{name}: {:?}", report.findings);
        assert!(report.replays.is_empty(), "{name}: nothing to replay");
        assert!(report.full_match(), "{name}");
        assert!(report.segments > 0, "{name}");
    }
}

#[test]
fn hand_made_viewer_sample_is_reported_as_findings_not_a_crash() {
    let Some(report) = verify_shared("snapviewer_memory.pickle") else {
        return;
    };
    assert!(!report.findings.is_empty());
    assert!(!report.full_match());
}

// ------------------------------------------------------------------ model-made traces

fn assert_self_replay(
    m: &CachingAllocator<InMemoryDevice>,
    skip: usize,
    what: &str,
) -> VerifyReport {
    let report = verify(&snapshot_of(m, skip));
    assert_eq!(report.replays.len(), 1, "{what}: {report:?}");
    let r = &report.replays[0];
    assert_eq!(r.divergence, None, "{what}");
    assert!(r.final_layout_matches, "{what}: {:?}", r.layout_differences);
    assert_eq!(r.addresses_matched, r.allocations_replayed, "{what}");
    assert!(report.full_match(), "{what}: {report:?}");
    report
}

#[test]
fn traces_over_several_streams_with_pending_frees_replay_in_full() {
    let mut m = model("", 2 * GIB);
    mixed_workload(&mut m, 3000, 0x9e37_79b9);
    let report = assert_self_replay(&m, 0, "two streams");
    assert!(report.replays[0].allocations_replayed > 1000);
    assert!(
        report.replays[0].ooms > 0,
        "the 2 GiB device ran out at least once"
    );
}

#[test]
fn expandable_segments_with_map_unmap_and_oom_replay_in_full() {
    let mut m = model("expandable_segments:True", 2 * GIB);
    mixed_workload(&mut m, 3000, 0x1234_5678);
    let report = assert_self_replay(&m, 0, "expandable");
    let r = &report.replays[0];
    assert!(r.ooms > 0);
    let actions: Vec<_> = m.trace().map(|e| e.action.as_str()).collect();
    assert!(actions.contains(&"segment_map") && actions.contains(&"segment_unmap"));
}

#[test]
fn settings_with_max_split_and_roundup_replay_in_full() {
    let mut m = model("max_split_size_mb:64,roundup_power2_divisions:4", 3 * GIB);
    mixed_workload(&mut m, 3000, 0xdead_beef);
    assert_self_replay(&m, 0, "max_split + roundup");
}

#[test]
fn trace_starting_mid_run_with_segment_free_of_older_memory_replays() {
    let mut m = model("", 8 * GIB);
    // Before recording starts: segments with live and cached blocks.
    let a = m.malloc(30 * MIB, 0).expect("fits");
    let b = m.malloc(6 * MIB, 0).expect("fits");
    let c = m.malloc(6 * MIB, 0).expect("fits");
    let small = m.malloc(4096, 0).expect("fits");
    m.free(a).expect("live");
    m.free(c).expect("live");
    let skip = m.trace_len();
    // The recording begins with an empty_cache: segment_free of old memory.
    m.empty_cache();
    m.free(b).expect("live");
    let d = m.malloc(8 * MIB, 0).expect("fits");
    m.free(small).expect("live");
    m.empty_cache();
    m.free(d).expect("live");
    let report = assert_self_replay(&m, skip, "mid-run with segment_free first");
    assert!(matches!(
        report.replays[0].start,
        ReplayStart::Reconstructed { .. }
    ));
    let first = &snapshot_of(&m, skip).device_traces[0][0];
    assert_eq!(first.action.as_str(), "segment_free");
}

#[test]
fn truncated_ring_buffer_trace_replays_from_a_rebuilt_start() {
    let mut m = model("", 4 * GIB);
    mixed_workload(&mut m, 4000, 0x5151_5151);
    let skip = m.trace_len() / 2;
    let report = verify(&snapshot_of(&m, skip));
    let r = &report.replays[0];
    assert!(matches!(r.start, ReplayStart::Reconstructed { .. }));
    assert_eq!(r.divergence, None);
    assert!(r.final_layout_matches, "{:?}", r.layout_differences);
    assert_eq!(r.addresses_matched, r.allocations_replayed);
}

#[test]
fn full_history_model_traces_replay_in_full_under_every_setting() {
    for settings in [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64,roundup_power2_divisions:4",
        "max_split_size_mb:20,expandable_segments:True",
    ] {
        for seed in 1..=6u64 {
            let mut m = model(settings, 3 * GIB);
            mixed_workload(&mut m, 1500, seed.wrapping_mul(0x9e37_79b9));
            assert_self_replay(&m, 0, &format!("{settings:?} seed {seed}"));
        }
    }
}

#[test]
fn a_cudamalloc_of_another_size_than_recorded_is_said_as_that_not_as_an_oom() {
    let mut m = model("", 8 * GIB);
    // A 1 MiB request is the small pool's: the model asks for a 2 MiB
    // segment.
    let a = m.malloc(MIB, 0).expect("fits");
    m.free(a).expect("live");
    let mut snapshot = snapshot_of(&m, 0);
    // The recording shows a 20 MiB segment instead (what a program whose
    // allocator was set up otherwise would have asked for).
    let recorded = 20 * MIB;
    for e in &mut snapshot.device_traces[0] {
        if e.action.as_str() == "segment_alloc" {
            e.size = recorded;
        }
    }
    let report = verify(&snapshot);
    let d = report.replays[0]
        .divergence
        .as_ref()
        .expect("the replay diverges at the segment_alloc");
    assert!(
        d.expected.starts_with("segment_alloc(") && d.expected.contains(&recorded.to_string()),
        "{d:?}"
    );
    assert!(
        d.model.starts_with(&format!("cudaMalloc of {} B", 2 * MIB)),
        "the model asked for another size; it did not run out of memory: {d:?}"
    );
}

#[test]
fn an_allocation_the_final_state_lacks_is_a_mismatch_not_a_cut_call() {
    // A trace of one allocation, never freed, in a file whose final state
    // has no segment: not a call the ring buffer cut (the state right after
    // it would hold its block), but a recording the file contradicts.
    let mut m = model("", 8 * GIB);
    m.malloc(512, 0).expect("fits");
    let mut snapshot = snapshot_of(&m, 0);
    snapshot.segments.clear();
    snapshot.device_traces[0].retain(|e| e.action.as_str() == "alloc");
    assert_eq!(snapshot.device_traces[0].len(), 1, "the file's shape");
    let report = verify(&snapshot);
    assert!(!report.full_match(), "{report:?}");
    let d = report.replays[0]
        .divergence
        .as_ref()
        .expect("the replay diverges at the allocation");
    assert_eq!(d.event_index, 0, "{d:?}");
}

#[test]
fn replay_ascii_prints_the_report_in_ascii_one_character_for_one() {
    // silmont's report is ASCII already; SnapViewer's hand-made file cuts
    // its list of findings with "…".
    for (name, unicode) in [
        ("silmont_mem_snapshot.pickle", false),
        ("snapviewer_memory.pickle", true),
    ] {
        let Some(path) = shared(name) else {
            return;
        };
        let plain = common::assert_ascii_twin(&["replay", &path.display().to_string()]);
        assert_eq!(!plain.is_ascii(), unicode, "{name}: {plain}");
    }
}

#[test]
fn a_read_without_stacks_differs_only_in_its_empty_tracebacks_and_verifies_alike() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let mut with_frames = 0;
    for (name, path) in common::snapshot_files_in(&dir) {
        let read = read_snapshot_file(&path).expect("shared snapshot loads");
        let skipped = read_snapshot_file_with(&path, Stacks::Skip).expect("loads without stacks");
        let had_frames = read
            .segments
            .iter()
            .any(|s| s.blocks.iter().any(|b| !b.frames.is_empty()))
            || read
                .device_traces
                .iter()
                .flatten()
                .any(|e| !e.frames.is_empty());
        with_frames += usize::from(had_frames);
        assert_eq!(verify(&skipped), verify(&read), "{name}: the verdict");
        assert!(
            common::without_stacks(read) == skipped,
            "{name}: a read without stacks differs in more than its tracebacks"
        );
    }
    // The comparison means something only where there were stacks to skip.
    assert!(
        with_frames >= 5,
        "only {with_frames} shared files have stacks"
    );
}

#[test]
fn a_generated_recording_read_without_stacks_replays_as_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.pickle");
    // A training-like recording with many distinct stacks, made by the
    // allocator model (as the benches' files are).
    let recorded = vramtop::snapshot::synth::large(
        &vramtop::snapshot::synth::LargeShape::about_bytes(200_000),
    );
    assert!(
        vramtop::snapshot::synth::distinct_stacks(&recorded) > 10,
        "the recording has stacks to skip"
    );
    vramtop::snapshot::write_snapshot_file(&recorded, &path).unwrap();
    let read = read_snapshot_file(&path).unwrap();
    let skipped = read_snapshot_file_with(&path, Stacks::Skip).unwrap();
    assert!(
        skipped
            .device_traces
            .iter()
            .flatten()
            .all(|e| e.frames.is_empty())
    );
    assert_eq!(verify(&skipped), verify(&read));
    assert!(verify(&skipped).full_match());
    assert!(common::without_stacks(read) == skipped);
}
