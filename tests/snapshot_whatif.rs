//! What-if replay (`replay FILE --alloc-conf … --capacity …`): against every
//! shared snapshot with a trace, and on traces the model records itself.

mod common;

use common::skip::{Prerequisite, skip};
use std::path::PathBuf;

use common::run_vramtop;
use common::workload::{mixed_workload, model};
use vramtop::alloc::{AllocatorConfig, BlockState, CachingAllocator, InMemoryDevice, TraceAction};
use vramtop::snapshot::capture::snapshot_of;
use vramtop::snapshot::read_snapshot_file;
use vramtop::snapshot::replay::{config_from_settings, verify};
use vramtop::snapshot::whatif::{
    DeviceWhatIf, Outcome, RECORDED_LABEL, WhatIfError, WhatIfReport, WhatIfSetting,
    recorded_capacity, whatif,
};
use vramtop::snapshot::{Snapshot, TraceEntry};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn shared_dir() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/snapshots");
    if p.is_dir() {
        Some(p)
    } else {
        skip(
            "the what-if checks on real snapshots",
            &format!("{} not found (../shared is absent)", p.display()),
            Prerequisite::ProvidedByCi,
        );
        None
    }
}

fn shared(name: &str) -> Option<PathBuf> {
    let p = shared_dir()?.join(name);
    p.exists().then_some(p)
}

/// The text report with its lines joined and its spaces single: a note
/// wrapped over lines reads as one sentence again.
fn unwrapped(out: &str) -> String {
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The cells of a table row, in every group of columns the table was laid
/// out in (each group has the original's column first).
fn row_cells<'a>(out: &'a str, row: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .filter_map(|l| l.strip_prefix(&format!("  {row} ")))
        .map(|cells| {
            cells
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect()
}

fn setting(conf: &str) -> WhatIfSetting {
    WhatIfSetting {
        conf: conf.to_string(),
        config: AllocatorConfig::parse(conf).expect("valid conf"),
    }
}

/// The recorded settings as a what-if column.
fn own(snapshot: &Snapshot) -> WhatIfSetting {
    let config = config_from_settings(snapshot.allocator_settings.as_ref());
    WhatIfSetting {
        conf: config.last_settings.clone(),
        config,
    }
}

fn final_reserved_of(snapshot: &Snapshot, device: u32) -> u64 {
    snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .map(|s| s.total_size)
        .sum()
}

fn assert_replica_of_itself(snapshot: &Snapshot, d: &DeviceWhatIf, what: &str) {
    assert_eq!(d.replica_divergence, None, "{what}: replica");
    let original = &d.runs[0];
    let me = &d.runs[1];
    assert_eq!(me.divergence, None, "{what}");
    let reserved = final_reserved_of(snapshot, d.device);
    assert_eq!(me.final_reserved, reserved, "{what}: final reserved");
    assert_eq!(original.final_reserved, reserved, "{what}: original");
    for (a, b, name) in [
        (me.peak_reserved, original.peak_reserved, "peak reserved"),
        (me.peak_allocated, original.peak_allocated, "peak allocated"),
        (
            me.segment_allocs as u64,
            original.segment_allocs as u64,
            "cudaMalloc",
        ),
        (
            me.segment_frees as u64,
            original.segment_frees as u64,
            "cudaFree",
        ),
        (me.segment_maps as u64, original.segment_maps as u64, "maps"),
        (me.ooms as u64, original.ooms as u64, "OOMs"),
        (
            me.final_allocated,
            original.final_allocated,
            "final allocated",
        ),
    ] {
        assert_eq!(a, b, "{what}: {name}");
    }
}

// ------------------------------------------------------------------ shared snapshots

#[test]
fn whatif_with_own_settings_reports_no_divergence_on_every_shared_trace() {
    let Some(dir) = shared_dir() else {
        return;
    };
    let names: Vec<PathBuf> = common::snapshot_files_in(&dir)
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    let mut replayed = 0;
    for path in names {
        let what = path.display().to_string();
        let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
        let report = match whatif(&snapshot, &[own(&snapshot)], None) {
            Ok(r) => r,
            Err(WhatIfError::NoTrace) => continue,
            Err(e) => panic!("{what}: {e}"),
        };
        for d in &report.devices {
            assert_replica_of_itself(&snapshot, d, &what);
            assert_eq!(d.runs[1].capacity, None);
            replayed += 1;
        }
        // The hand-made viewer sample's blocks do not fill its segments.
        for u in &report.unreplayable {
            assert!(u.reason.contains("inconsistent"), "{what}: {}", u.reason);
        }
    }
    assert!(replayed >= 5, "only {replayed} device traces replayed");
}

#[test]
fn expandable_segments_on_jaspersolt_lower_peak_reserved_and_segments() {
    let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("loads");
    let report = whatif(&snapshot, &[setting("expandable_segments:True")], None).expect("runs");
    let d = &report.devices[0];
    let (original, expandable) = (&d.runs[0], &d.runs[1]);
    assert!(expandable.peak_reserved < original.peak_reserved);
    assert!(expandable.peak_segments < original.peak_segments);
    assert_eq!(expandable.segment_allocs, 0, "pages are mapped instead");
    assert!(expandable.segment_maps > 0);
    let div = expandable
        .divergence
        .as_ref()
        .expect("it decides otherwise");
    assert_eq!(div.original.outcome, Outcome::NewMemory);
    assert_eq!(div.whatif.outcome, Outcome::CachedBlock);
    assert_eq!(
        snapshot.device_traces[0][div.event_index].action,
        TraceAction::Alloc
    );
}

#[test]
fn capacity_below_the_peak_runs_out_at_an_allocation_that_needed_a_segment_with_frames() {
    let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("loads");
    let report = whatif(&snapshot, &[], Some(100 * MIB)).expect("runs");
    let d = &report.devices[0];
    assert_eq!(d.runs.len(), 2, "the original and the recorded settings");
    assert_eq!(d.runs[1].label, RECORDED_LABEL);
    let r = &d.runs[1];
    assert!(r.peak_reserved <= 100 * MIB);
    let oom = r.first_oom.as_ref().expect("runs out of memory");
    let trace = &snapshot.device_traces[0];
    // The original obtained a new segment for this very allocation.
    assert_eq!(trace[oom.event_index].action, TraceAction::Alloc);
    assert_eq!(trace[oom.event_index - 1].action, TraceAction::SegmentAlloc);
    assert_eq!(oom.size, trace[oom.event_index].size);
    assert!(!oom.frames.is_empty());
    // The report keeps the recorded frames worth reading (this stack has
    // no Python frame): the unwinder and the allocator's own are dropped.
    let recorded = &trace[oom.event_index].frames;
    assert!(oom.frames.len() < recorded.len());
    assert!(oom.frames.iter().all(|f| recorded.contains(f)));
    assert!(
        oom.frames
            .iter()
            .all(|f| !f.name.contains("unwind") && !f.name.contains("CachingAllocator"))
    );
    let message = oom
        .message
        .as_deref()
        .expect("a what-if OOM has PyTorch's text");
    assert!(message.starts_with("CUDA out of memory. Tried to allocate"));
    assert!(
        message.contains("total capacity of 100.00 MiB"),
        "{message}"
    );
    assert!(r.allocations_skipped > 0);
    assert_eq!(
        r.divergence.as_ref().map(|d| d.event_index),
        Some(oom.event_index),
        "nothing differed before the OOM"
    );
    // The original never ran out.
    assert!(d.runs[0].first_oom.is_none());
}

#[test]
fn several_confs_give_one_column_each_after_the_original() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("loads");
    let confs = [
        "expandable_segments:True",
        "max_split_size_mb:128",
        "",
        "roundup_power2_divisions:4",
    ];
    let settings: Vec<_> = confs.iter().map(|c| setting(c)).collect();
    let report = whatif(&snapshot, &settings, None).expect("runs");
    let labels: Vec<&str> = report.devices[0]
        .runs
        .iter()
        .map(|r| r.label.as_str())
        .collect();
    assert_eq!(labels[0], "original");
    assert_eq!(&labels[1..], &confs);
    // The snapshot recorded the defaults: the "" column replicates it.
    assert_eq!(report.devices[0].runs[3].divergence, None);
    assert!(report.devices[0].runs[1].divergence.is_some());
}

// ------------------------------------------------------------------ model-made traces

fn count(m: &CachingAllocator<InMemoryDevice>, action: TraceAction) -> usize {
    m.trace().filter(|e| e.action == action).count()
}

#[test]
fn recorded_capacity_and_settings_reproduce_retries_ooms_empty_cache_and_pending_frees() {
    let mut checked = 0;
    for settings in ["", "expandable_segments:True", "max_split_size_mb:64"] {
        for seed in 1..=3u64 {
            let what = format!("{settings:?} seed {seed}");
            let mut m = model(settings, 2 * GIB);
            mixed_workload(&mut m, 2000, seed.wrapping_mul(0x9e37_79b9));
            let snapshot = snapshot_of(&m, 0);
            let report = whatif(&snapshot, &[own(&snapshot)], Some(2 * GIB)).expect("runs");
            let d = &report.devices[0];
            if let Some(v) = &verify(&snapshot).replays[0].divergence {
                // Where `verify` cannot follow the recording (an OOM entry
                // keeps only the rounded size), the replica says so too.
                assert_eq!(
                    d.replica_divergence.as_ref().map(|r| r.event_index),
                    Some(v.event_index),
                    "{what}"
                );
                continue;
            }
            checked += 1;
            assert_replica_of_itself(&snapshot, d, &what);
            assert_eq!(d.runs[1].ooms, count(&m, TraceAction::Oom), "{what}");
            assert!(d.runs[1].ooms > 0, "{what}: the 2 GiB device ran out");
            assert_eq!(
                d.runs[1].segment_frees,
                count(&m, TraceAction::SegmentFree),
                "{what}: empty_cache and retry releases"
            );
            assert_eq!(d.runs[1].allocations_skipped, 0, "{what}");
            // Its OOMs are the original's: nothing is missing from its figures.
            assert_eq!(d.runs[1].figures_partial_after, None, "{what}");
        }
    }
    assert!(
        checked >= 7,
        "only {checked} of 9 workloads checked in full"
    );
}

#[test]
fn unlimited_capacity_avoids_the_recorded_ooms_and_says_where_it_diverged() {
    let mut m = model("", 2 * GIB);
    mixed_workload(&mut m, 2000, 0x1234_5678);
    let snapshot = snapshot_of(&m, 0);
    let report = whatif(&snapshot, &[own(&snapshot)], None).expect("runs");
    let d = &report.devices[0];
    assert_eq!(d.replica_divergence, None);
    assert!(d.runs[0].ooms > 0);
    let r = &d.runs[1];
    assert_eq!(r.ooms, 0);
    assert!(r.allocations_kept > 0);
    let div = r
        .divergence
        .as_ref()
        .expect("diverges at the first pressure");
    // The original released cache or ran out there; the what-if did neither.
    assert!(div.original.released || div.original.outcome == Outcome::OutOfMemory);
    assert!(!div.whatif.released);
    assert!(r.peak_reserved > 2 * GIB || div.original.released);
}

#[test]
fn mid_run_truncated_trace_replays_from_the_rebuilt_start_without_divergence() {
    let mut m = model("", 4 * GIB);
    mixed_workload(&mut m, 3000, 0x5151_5151);
    let snapshot = snapshot_of(&m, m.trace_len() / 2);
    let report = whatif(&snapshot, &[own(&snapshot)], Some(4 * GIB)).expect("runs");
    let d = &report.devices[0];
    assert!(matches!(
        d.start,
        vramtop::snapshot::replay::ReplayStart::Reconstructed { .. }
    ));
    assert_replica_of_itself(&snapshot, d, "truncated");
}

/// Frees then asks for a slightly larger block, over and over: each request
/// needs a new segment under the defaults, while an expandable segment just
/// maps the difference.
#[test]
fn expandable_segments_reduce_peak_reserved_on_a_growing_request_trace() {
    let mut m = model("", 64 * GIB);
    for i in 0..20u64 {
        let p = m.malloc(30 * MIB + i * 4 * MIB, 0).expect("fits");
        m.free(p).expect("live");
    }
    let snapshot = snapshot_of(&m, 0);
    let report = whatif(&snapshot, &[setting("expandable_segments:True")], None).expect("runs");
    let (original, expandable) = (&report.devices[0].runs[0], &report.devices[0].runs[1]);
    assert_eq!(original.segment_allocs, 20);
    assert!(
        expandable.peak_reserved * 4 < original.peak_reserved,
        "{} vs {}",
        expandable.peak_reserved,
        original.peak_reserved
    );
    assert!(expandable.final_segments < original.final_segments);
}

#[test]
fn capacity_makes_the_first_allocation_beyond_it_oom_at_its_trace_index() {
    let mut m = model("", 64 * GIB);
    for _ in 0..10 {
        m.malloc(20 * MIB, 0).expect("fits");
    }
    let snapshot = snapshot_of(&m, 0);
    let report = whatif(&snapshot, &[], Some(100 * MIB)).expect("runs");
    let r = &report.devices[0].runs[1];
    let oom = r.first_oom.as_ref().expect("runs out");
    // segment_alloc, alloc, segment_alloc, alloc, …: the 6th alloc is #11.
    assert_eq!(oom.event_index, 11);
    assert_eq!(oom.size, 20 * MIB);
    assert!(oom.frames.is_empty(), "model traces carry no frames");
    assert_eq!(r.ooms, 5);
    assert_eq!(r.allocations_skipped, 5);
    assert_eq!(r.final_reserved, 100 * MIB);
    assert_eq!(r.final_allocated, 100 * MIB);
}

#[test]
fn a_memory_fraction_without_capacity_is_refused() {
    let mut m = model("", GIB);
    m.malloc(MIB, 0).expect("fits");
    let snapshot = snapshot_of(&m, 0);
    let err = whatif(
        &snapshot,
        &[setting("per_process_memory_fraction:0.5")],
        None,
    )
    .expect_err("needs a capacity");
    assert!(matches!(err, WhatIfError::FractionWithoutCapacity(_)));
    let ok = whatif(
        &snapshot,
        &[setting("per_process_memory_fraction:0.5")],
        Some(GIB),
    );
    assert!(ok.is_ok());
}

#[test]
fn a_state_only_snapshot_has_no_trace_to_replay() {
    let m = model("", GIB);
    let mut snapshot = snapshot_of(&m, 0);
    snapshot.device_traces = vec![Vec::<TraceEntry>::new()];
    assert_eq!(
        whatif(&snapshot, &[], None).map(|_: WhatIfReport| ()),
        Err(WhatIfError::NoTrace)
    );
}

#[test]
fn pending_free_at_trace_start_completes_when_the_recording_says() {
    // Freed with a cross-stream use before the recording began; completed
    // inside it. The what-if must hold the block until then.
    let mut m = model("", 8 * GIB);
    let a = m.malloc(10 * MIB, 0).expect("fits");
    m.record_stream(a, 5).expect("live");
    m.free(a).expect("live");
    let skip = m.trace_len();
    let b = m.malloc(10 * MIB, 0).expect("fits");
    m.complete_stream_work(5);
    let c = m.malloc(10 * MIB, 0).expect("fits");
    m.free(b).expect("live");
    m.free(c).expect("live");
    let snapshot = snapshot_of(&m, skip);
    assert!(
        snapshot.segments[0]
            .blocks
            .iter()
            .all(|blk| blk.state == BlockState::Inactive)
    );
    let report = whatif(&snapshot, &[own(&snapshot)], None).expect("runs");
    assert_replica_of_itself(&snapshot, &report.devices[0], "pending at start");
}

// ------------------------------------------------------------------ the command line

/// Runs `vramtop ARGS`; asserts exit code 2 (bad input) and a stderr that
/// names `what`. Returns (stdout, stderr).
fn replay_exits_2_naming(args: &[&str], what: &str) -> (String, String) {
    let (code, out, err) = run_vramtop(args, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(what), "{err}");
    (out, err)
}

/// `replay FILE --alloc-conf conf`: exit 2, nothing on stdout and one
/// line on stderr that names `what`.
fn replay_refuses_alloc_conf(file: &str, conf: &str, what: &str) {
    let (out, err) = replay_exits_2_naming(&["replay", file, "--alloc-conf", conf], what);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn cli_cuda_malloc_async_is_refused_as_not_modelled_not_run_as_native() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    replay_refuses_alloc_conf(file, "backend:cudaMallocAsync", "does not model");
}

#[test]
fn cli_bad_alloc_conf_is_one_line_naming_the_key_exit_2() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    replay_refuses_alloc_conf(file, "expandable_segmnts:True", "expandable_segmnts");
    // A typo names the option it is near, as the config file names a key.
    replay_refuses_alloc_conf(
        file,
        "expandable_segment:True",
        "unrecognized allocator option 'expandable_segment' \
         (did you mean 'expandable_segments'?)",
    );
    replay_exits_2_naming(
        &["replay", file, "--alloc-conf", "max_split_size_mb:5"],
        "max_split_size_mb",
    );
}

#[test]
fn cli_bad_capacity_exits_2_and_no_trace_is_the_verify_modes_verdict() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    replay_exits_2_naming(&["replay", file, "--capacity", "lots"], "lots");
    let Some(state_only) = shared("volcengine_verl_mem.pickle") else {
        return;
    };
    let state_only = state_only.to_str().expect("utf-8");
    let (code, out, err) = run_vramtop(&["replay", state_only, "--capacity", "24GiB"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        unwrapped(&out).contains("no allocation trace") && out.contains("result: NO TRACE"),
        "{out}"
    );
    let (code, out, _) = run_vramtop(&["replay", state_only], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("result: NO TRACE"),
        "the verify mode agrees: {out}"
    );
    let (_, out, _) = run_vramtop(
        &["replay", state_only, "--capacity", "24GiB", "--json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["result"], "NO TRACE", "{out}");
}

#[test]
fn cli_table_has_one_column_per_conf_and_json_has_one_run_each() {
    let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    let args = [
        "replay",
        file,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        "max_split_size_mb:20",
        "--capacity",
        "24GiB",
    ];
    let (code, out, err) = run_vramtop(&args, None);
    assert_eq!(code, 0, "{err}");
    // Four columns (the recorded settings at the capacity first) do not
    // fit 80 beside the row names: groups of them, each beside the
    // original's column.
    // A header row: "original", then the columns' names (a detail line
    // may start with "original obtained …").
    let headers: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("original  "))
        .collect();
    assert_eq!(headers.len(), 3, "{out}");
    assert!(
        headers[0].ends_with(&format!("  {RECORDED_LABEL}")),
        "{out}"
    );
    assert!(headers[1].ends_with("  expandable_segments:True"), "{out}");
    assert!(headers[2].ends_with("  max_split_size_mb:20"), "{out}");
    let peaks = row_cells(&out, "peak reserved");
    assert_eq!(peaks.len(), 3, "{out}");
    assert!(
        peaks.iter().all(|p| p.len() == 2 && p[0] == peaks[0][0]),
        "{peaks:?}"
    );
    assert!(out.contains("24 GiB"), "{out}");

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (code, out, _) = run_vramtop(&json_args, None);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["capacity"], serde_json::json!(24 * GIB));
    let runs = v["devices"][0]["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[1]["label"], RECORDED_LABEL);
    assert_eq!(runs[2]["label"], "expandable_segments:True");
    assert!(runs[2]["peak_reserved"].as_u64().is_some());
}

#[test]
fn cli_replay_without_whatif_flags_still_verifies() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let (code, out, _) = run_vramtop(&["replay", path.to_str().expect("utf-8")], None);
    assert_eq!(code, 0);
    assert!(out.contains("result: FULL MATCH"), "{out}");
    assert!(!out.contains("what-if"));
}

#[test]
fn empty_cache_before_an_allocation_below_the_recorded_peak_is_read_as_empty_cache() {
    let mut m = model("", 64 * GIB);
    let a = m.malloc(300 * MIB, 0).expect("fits");
    let b = m.malloc(100 * MIB, 0).expect("fits");
    m.free(b).expect("live");
    m.empty_cache();
    // Needs a new segment right after the release (the 100 MiB cached
    // block was too small): reads like a retry path, but the original later
    // held more than 400 + 150 MiB, so cudaMalloc could not have refused
    // 150 MiB here.
    let c = m.malloc(150 * MIB, 0).expect("fits");
    let d = m.malloc(200 * MIB, 0).expect("fits");
    for p in [a, c, d] {
        m.free(p).expect("live");
    }
    let snapshot = snapshot_of(&m, 0);
    let report = whatif(&snapshot, &[own(&snapshot)], None).expect("runs");
    let dev = &report.devices[0];
    assert!(dev.releases_read_as_retry.is_empty());
    assert_replica_of_itself(&snapshot, dev, "empty_cache then alloc");
    assert_eq!(
        dev.runs[1].segment_frees, 1,
        "the empty_cache() released b's segment"
    );
}

#[test]
fn empty_cache_right_before_the_peak_allocation_is_read_as_a_retry_and_flagged() {
    let mut m = model("", 64 * GIB);
    let a = m.malloc(300 * MIB, 0).expect("fits");
    let b = m.malloc(100 * MIB, 0).expect("fits");
    m.free(b).expect("live");
    m.empty_cache();
    // The same trace as a 450 MiB device's retry path: ambiguous.
    let c = m.malloc(150 * MIB, 0).expect("fits");
    let snapshot = snapshot_of(&m, 0);
    let trace = &snapshot.device_traces[0];
    let c_index = trace
        .iter()
        .rposition(|e| e.action == TraceAction::Alloc && e.addr == c)
        .expect("recorded");
    let report = whatif(&snapshot, &[own(&snapshot)], None).expect("runs");
    let dev = &report.devices[0];
    assert_eq!(dev.releases_read_as_retry, vec![c_index]);
    assert_eq!(dev.replica_divergence, None);
    let div = dev.runs[1]
        .divergence
        .as_ref()
        .expect("unlimited: no retry");
    assert_eq!(div.event_index, c_index);
    assert!(div.original.released && !div.whatif.released);
    // With the device the retry reading implies, it is a replica again.
    let report = whatif(&snapshot, &[own(&snapshot)], Some(450 * MIB)).expect("runs");
    assert_replica_of_itself(&snapshot, &report.devices[0], "450 MiB device");
    let _ = a;
}

/// Traces with entries lost (a damaged file, a reader that skipped unknown
/// actions) must give a report, never a panic.
#[test]
fn damaged_traces_give_a_report_not_a_panic() {
    let mut m = model("", 2 * GIB);
    mixed_workload(&mut m, 1500, 0xabcd_ef01);
    let mut inputs = vec![snapshot_of(&m, 0)];
    let mut e = model("expandable_segments:True", 2 * GIB);
    mixed_workload(&mut e, 1500, 0x0bad_cafe);
    inputs.push(snapshot_of(&e, 0));
    if let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") {
        inputs.push(read_snapshot_file(&path).expect("loads"));
    }
    let settings = [
        setting("expandable_segments:True"),
        setting("max_split_size_mb:20,roundup_power2_divisions:4"),
    ];
    let mut damaged = 0;
    let mut replayed = 0;
    for snapshot in &inputs {
        for target in [
            TraceAction::FreeCompleted,
            TraceAction::FreeRequested,
            TraceAction::Alloc,
            TraceAction::SegmentAlloc,
            TraceAction::SegmentFree,
            TraceAction::SegmentMap,
            TraceAction::Oom,
        ] {
            for every in [2usize, 5] {
                let mut s = snapshot.clone();
                let mut seen = 0usize;
                s.device_traces[0].retain(|t| {
                    if t.action != target {
                        return true;
                    }
                    seen += 1;
                    !seen.is_multiple_of(every)
                });
                for capacity in [None, Some(256 * MIB)] {
                    let report = whatif(&s, &settings, capacity).expect("has a trace");
                    assert_eq!(report.devices.len() + report.unreplayable.len(), 1);
                    damaged += 1;
                    replayed += report.devices.len();
                }
            }
        }
    }
    assert!(damaged >= 32);
    assert!(
        replayed * 2 >= damaged,
        "most damaged traces still replay: {replayed} of {damaged}"
    );
}

/// The `whatif` fuzz target's `seed-13-9`: the bolongcheng trace (recorded
/// with expandable segments) with its first segment marked non-expandable,
/// replayed under `max_split_size_mb:64` at 3.75 GiB. The start state then
/// holds split free blocks of 64 MiB and more in a plain segment; releasing
/// one of them for a retry left its neighbours linked to a dead block, and
/// the final layout walked that chain until memory ran out. A start above
/// the capacity is no longer replayed, so the capacity here is the start's
/// own reserved bytes: the first cudaMalloc still takes the retry path. The
/// replay runs on a thread so that a regression fails the test instead of
/// hanging it.
#[test]
fn max_split_retry_never_releases_a_split_block_of_a_start_segment() {
    let Some(p) = shared("bolongcheng_xl_fwd_cl128_float32_expandable.pickle") else {
        return;
    };
    let mut snapshot = read_snapshot_file(&p).expect("shared snapshot loads");
    let first = snapshot
        .segments
        .first_mut()
        .expect("the trace has segments");
    assert!(first.is_expandable, "recorded with expandable segments");
    first.is_expandable = false;
    let settings = vec![setting("max_split_size_mb:64")];
    let start_reserved = whatif(&snapshot, &[], None)
        .expect("the snapshot has a trace")
        .devices
        .first()
        .map(|d| d.start_reserved);
    let capacity = Some(start_reserved.expect("the device replays"));
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        sender.send(whatif(&snapshot, &settings, capacity)).ok();
    });
    let report = receiver
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the what-if finishes")
        .expect("the snapshot has a trace");
    assert_eq!(report.devices.len() + report.unreplayable.len(), 1);
    for d in &report.devices {
        for r in &d.runs {
            assert!(
                !r.first_model_error
                    .as_deref()
                    .is_some_and(|e| e.contains("layout is inconsistent")),
                "{}: {:?}",
                r.label,
                r.first_model_error
            );
            assert!(
                r.final_segments >= 1,
                "{}: the start segment stays",
                r.label
            );
        }
        let run = d.runs.last().expect("the setting's run");
        assert_eq!(
            run.label, "max_split_size_mb:64",
            "replayed: {:?}",
            d.not_replayed
        );
        assert!(
            run.segment_frees > 0 || run.ooms > 0,
            "the retry path was taken"
        );
    }
}

#[test]
fn whatif_table_gives_fragmentation_as_a_percentage_like_the_summary() {
    let Some(path) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    let (code, out, err) = run_vramtop(
        &["replay", file, "--alloc-conf", "expandable_segments:True"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    for row in ["  fragmentation there", "final fragmentation"] {
        // Each column's figure is a percentage with one decimal (75.5%),
        // never a bare fraction (0.75).
        let figures = row_cells(&out, row);
        assert_eq!(figures, [["75.5%", "23.8%"]], "{row}: {out}");
    }
    // The largest free block at the peak has a row of its own.
    assert_eq!(
        row_cells(&out, "  largest free there"),
        [["20 MiB", "46.88 MiB"]],
        "{out}"
    );
    assert!(!out.contains("(s)"), "counts in words: {out}");
    // Both are of the moment the row above names, indented under it.
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("  most reserved unallocated "))
        .take(3)
        .collect();
    assert!(rows[1].starts_with("    fragmentation there "), "{out}");
    assert!(rows[2].starts_with("    largest free there "), "{out}");
}

#[test]
fn expandable_segments_on_a_trace_that_needs_no_new_memory_says_it_had_nothing_to_act_on() {
    let Some(path) = shared("silmont_fwd_fp32_128.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = run_vramtop(
        &["replay", &path, "--alloc-conf", "expandable_segments:True"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        unwrapped(&out).contains(
            "note: expandable_segments:True mapped no page: the trace needed no new memory, \
             and the 29 segments of its start are ordinary ones"
        ),
        "{out}"
    );
    // A trace that does need memory under the setting gets no such note.
    let Some(jasper) = shared("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let jasper = jasper.display().to_string();
    let (_, out, _) = run_vramtop(
        &[
            "replay",
            &jasper,
            "--alloc-conf",
            "expandable_segments:True",
        ],
        None,
    );
    assert!(!unwrapped(&out).contains("mapped no page"), "{out}");
}

#[test]
fn an_oom_line_names_the_request_and_points_at_the_segment_pytorch_names() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (_, out, err) = run_vramtop(&["replay", &path, "--capacity", "1KiB"], None);
    assert!(
        unwrapped(&out).contains(
            "out of memory at event 2/97 (#1): a 2.00 MiB request on stream 0; PyTorch's \
             message below \
             names the segment it tried to reserve for it"
        ),
        "{out}{err}"
    );
    assert!(
        unwrapped(&out).contains("Tried to allocate 20.00 MiB"),
        "{out}"
    );
    // The message's total is the replay's capacity, not the card's: said
    // right after it, so the same OOM read beside PyTorch's own message
    // (whose total counts the CUDA context) is not two different totals.
    let text = unwrapped(&out);
    let message = text.find("has a total capacity of").expect("the message");
    let note = text
        .find(
            "(its \"total capacity\" is this replay's cudaMalloc capacity; PyTorch's names \
             the whole card, its CUDA context included)",
        )
        .expect("the note on the total");
    assert!(message < note, "{out}");
}

// ------------------------------------------------------------------ a start that does not fit

/// bolongcheng's trace starts mid-run with 12.81 GiB already mapped in
/// expandable segments: no capacity below that can hold its start.
const BOLONGCHENG: &str = "bolongcheng_xl_fwd_cl128_float32_expandable.pickle";

#[test]
fn capacity_below_the_starting_reserved_is_said_not_replayed() {
    let Some(path) = shared(BOLONGCHENG) else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    for settings in [vec![], vec![setting("")]] {
        let report = whatif(&snapshot, &settings, Some(12 * GIB)).expect("has a trace");
        let d = &report.devices[0];
        assert!(d.start_reserved > 12 * GIB, "{}", d.start_reserved);
        assert_eq!(d.runs.len(), 1, "the original only");
        assert_eq!(d.runs[0].label, "original");
        assert_eq!(d.not_replayed.len(), 1);
        let refused = &d.not_replayed[0];
        assert_eq!(refused.limit, 12 * GIB);
        assert!(
            refused.reason.starts_with(
                "the trace starts with 12.81 GiB reserved, more than --capacity 12 GiB: it \
                 cannot fit"
            ),
            "{}",
            refused.reason
        );
    }
    let file = path.to_str().expect("utf-8 path");
    for (extra, column) in [
        (vec![], RECORDED_LABEL),
        (vec!["--alloc-conf", ""], "(defaults)"),
    ] {
        let mut args = vec!["replay", file, "--capacity", "12GiB"];
        args.extend(&extra);
        let (code, out, err) = run_vramtop(&args, None);
        assert_eq!(code, 0, "{err}");
        assert!(
            unwrapped(&out).contains(&format!(
                "{column}: not replayed: the trace starts with 12.81 GiB reserved, more than \
                 --capacity 12 GiB: it cannot fit"
            )),
            "{out}"
        );
        let header = out
            .lines()
            .find(|l| l.trim_start().starts_with("original"))
            .expect("a header row");
        assert_eq!(header.trim(), "original", "no column for it: {out}");
        assert!(!unwrapped(&out).contains("CUDA out of memory"), "{out}");
        args.push("--json");
        let (code, json, _) = run_vramtop(&args, None);
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        let device = &v["devices"][0];
        assert_eq!(device["runs"].as_array().map(Vec::len), Some(1), "{json}");
        let reason = device["not_replayed"][0]["reason"]
            .as_str()
            .expect("a reason");
        assert!(
            unwrapped(&out).contains(reason),
            "the text says what the JSON says"
        );
        assert_eq!(
            device["not_replayed"][0]["limit"],
            serde_json::json!(12 * GIB)
        );
    }
}

#[test]
fn capacity_equal_to_the_starting_reserved_is_replayed_within_it() {
    let Some(path) = shared(BOLONGCHENG) else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    let start = whatif(&snapshot, &[], None).expect("has a trace").devices[0].start_reserved;
    let report = whatif(&snapshot, &[], Some(start)).expect("has a trace");
    let d = &report.devices[0];
    assert!(d.not_replayed.is_empty(), "{:?}", d.not_replayed);
    assert_eq!(d.runs.len(), 2);
    assert!(d.runs[1].peak_reserved <= start);
}

#[test]
fn a_memory_fraction_whose_share_is_below_the_starting_reserved_refuses_only_its_column() {
    let Some(path) = shared(BOLONGCHENG) else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    let settings = [setting("per_process_memory_fraction:0.5"), setting("")];
    let report = whatif(&snapshot, &settings, Some(20 * GIB)).expect("has a trace");
    let d = &report.devices[0];
    let labels: Vec<&str> = d.runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["original", ""]);
    assert_eq!(d.not_replayed.len(), 1);
    let refused = &d.not_replayed[0];
    assert_eq!(refused.label, "per_process_memory_fraction:0.5");
    assert_eq!(refused.limit, 10 * GIB);
    assert!(
        refused.reason.contains(
            "more than the 10 GiB per_process_memory_fraction allows of --capacity 20 GiB"
        ),
        "{}",
        refused.reason
    );
}

/// A plain (not expandable) start counts too, and whatever the capacity no
/// run that is replayed reserves more than it.
#[test]
fn no_what_if_run_reserves_more_than_its_capacity_on_any_shared_trace() {
    let Some(dir) = shared_dir() else {
        return;
    };
    let names: Vec<PathBuf> = common::snapshot_files_in(&dir)
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    let settings = [setting(""), setting("expandable_segments:True")];
    let mut refused = 0;
    for path in names {
        let what = path.display().to_string();
        let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
        for capacity in [64 * MIB, GIB, 4 * GIB, 12 * GIB] {
            let Ok(report) = whatif(&snapshot, &settings, Some(capacity)) else {
                continue;
            };
            for d in &report.devices {
                for r in d.runs.iter().skip(1) {
                    assert!(
                        r.peak_reserved <= capacity,
                        "{what} at {capacity}: {} reserves {}",
                        r.label,
                        r.peak_reserved
                    );
                }
                for n in &d.not_replayed {
                    assert!(d.start_reserved > n.limit, "{what}: {}", n.reason);
                }
                assert_eq!(d.runs.len() + d.not_replayed.len(), 1 + settings.len());
                refused += d.not_replayed.len();
            }
        }
    }
    assert!(refused > 0, "some shared trace starts above 64 MiB");
}

// ------------------------------------------------------------------ figures after an OOM

#[test]
fn figures_of_a_column_that_ran_out_of_memory_are_marked_partial() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    let settings = [
        setting("expandable_segments:True"),
        setting("max_split_size_mb:128"),
    ];
    let report = whatif(&snapshot, &settings, Some(2 * GIB)).expect("has a trace");
    let partial: Vec<Option<usize>> = report.devices[0]
        .runs
        .iter()
        .map(|r| r.figures_partial_after)
        .collect();
    assert_eq!(partial, [None, Some(48), Some(48)]);
    let unlimited = whatif(&snapshot, &settings, None).expect("has a trace");
    assert!(
        unlimited.devices[0]
            .runs
            .iter()
            .all(|r| r.figures_partial_after.is_none()),
        "no OOM, complete figures"
    );

    let file = path.to_str().expect("utf-8 path");
    let mut args = vec![
        "replay",
        file,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        "max_split_size_mb:128",
        "--capacity",
        "2GiB",
    ];
    let (code, out, err) = run_vramtop(&args, None);
    assert_eq!(code, 0, "{err}");
    // The recorded settings at the capacity come first (see
    // `a_capacity_also_runs_the_recorded_settings_beside_the_others`).
    assert_eq!(
        row_cells(&out, "peak reserved"),
        [
            ["3.52 GiB", "1.52 GiB"],
            ["3.52 GiB", "1.56 GiB"],
            ["3.52 GiB", "1.54 GiB"]
        ],
        "{out}"
    );
    // The column is marked in its header, once: a mark beside each figure
    // read as "differs" where a figure equals the original's.
    let headers: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("original  "))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        headers,
        [
            ["original", "recorded settings *"],
            ["original", "expandable_segments:True *"],
            ["original", "max_split_size_mb:128 *"]
        ],
        "{out}"
    );
    assert!(
        unwrapped(&out).contains(
            "* expandable_segments:True, max_split_size_mb:128 ran out of memory at event 49/97 \
             (#48): every figure of these columns leaves out the allocations that failed there \
             and later"
        ),
        "{out}"
    );
    for row in [
        "peak allocated",
        "final reserved",
        "final allocated",
        "segments peak / final",
        "pages mapped / unmapped",
    ] {
        let cells = row_cells(&out, row);
        assert_eq!(cells.len(), 3, "{row}: {out}");
        assert!(
            cells.iter().flatten().all(|c| !c.contains('*')),
            "only the headers are marked: {row}: {out}"
        );
    }
    args.push("--json");
    let (code, json, _) = run_vramtop(&args, None);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let marks: Vec<&serde_json::Value> = v["devices"][0]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| &r["figures_partial_after"])
        .collect();
    assert_eq!(
        marks,
        [
            &serde_json::Value::Null,
            &serde_json::json!(40),
            &serde_json::json!(48),
            &serde_json::json!(48)
        ]
    );
}

#[test]
fn a_capacity_also_runs_the_recorded_settings_beside_the_others() {
    // At 3 GiB the settings given run out of memory at #52 (event 53), the
    // recorded ones earlier (#50): the OOM is the capacity's, not the settings'.
    // Beside only the original (which ran on the recorded device, with no
    // OOM) the settings read as its cause.
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8 path");
    let mut args = vec![
        "replay",
        file,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        "max_split_size_mb:128",
        "--capacity",
        "3GiB",
    ];
    let (code, out, err) = run_vramtop(&args, None);
    assert_eq!(code, 0, "{err}");
    let header = out
        .lines()
        .find(|l| l.trim_start().starts_with("original"))
        .expect("a header row");
    assert_eq!(
        header
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>(),
        // Marked: it ran out of memory.
        ["original", format!("{RECORDED_LABEL} *").as_str()],
        "{out}"
    );
    assert_eq!(
        row_cells(&out, "capacity"),
        [
            ["as recorded", "3 GiB"],
            ["as recorded", "3 GiB"],
            ["as recorded", "3 GiB"]
        ],
        "{out}"
    );
    assert_eq!(
        row_cells(&out, "out of memory"),
        [
            ["no", "2×, first at event 51/97 (#50)"],
            ["no", "at event 53/97 (#52)"],
            ["no", "at event 53/97 (#52)"]
        ],
        "{out}"
    );
    args.push("--json");
    let (code, json, _) = run_vramtop(&args, None);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let runs = v["devices"][0]["runs"].as_array().expect("runs");
    let labels: Vec<&str> = runs.iter().filter_map(|r| r["label"].as_str()).collect();
    assert_eq!(
        labels,
        [
            "original",
            RECORDED_LABEL,
            "expandable_segments:True",
            "max_split_size_mb:128"
        ]
    );
    assert_eq!(runs[1]["capacity"], serde_json::json!(3u64 << 30));
    // Without a capacity the runs compare on an unlimited device, as the
    // original ran on one with room: no column of the recorded settings.
    let (code, json, _) = run_vramtop(
        &[
            "replay",
            file,
            "--alloc-conf",
            "expandable_segments:True",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["devices"][0]["runs"].as_array().map(Vec::len), Some(2));
}

// ------------------------------------------------------------------ allocated by carving

/// One request of 19.59 MiB: without expandable segments it gets a 20 MiB
/// segment and, with 424 KiB (≤ 1 MiB) left over, the whole block; with
/// them the 20 MiB page is split and the block is the request.
#[test]
fn allocated_that_differs_only_by_how_blocks_are_carved_is_explained() {
    let request = 19 * MIB + 600 * 1024;
    let mut m = model("", GIB);
    let block = m.malloc(request, 0).expect("fits");
    m.free(block).expect("live");
    let _ = m.malloc(request, 0).expect("fits");
    let snapshot = snapshot_of(&m, 0);
    let report = whatif(
        &snapshot,
        &[setting("expandable_segments:True"), setting("")],
        None,
    )
    .expect("has a trace");
    let runs = &report.devices[0].runs;
    let peaks: Vec<u64> = runs.iter().map(|r| r.peak_allocated).collect();
    assert_eq!(peaks, [20 * MIB, request, 20 * MIB]);
    assert!(runs.iter().all(|r| r.final_requested == request));

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("carved.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot, &file).expect("written");
    let file = file.to_str().expect("utf-8 path");
    let (code, out, err) = run_vramtop(
        &[
            "replay",
            file,
            "--alloc-conf",
            "expandable_segments:True",
            "--alloc-conf",
            "",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let text = unwrapped(&out);
    assert_eq!(
        text.matches("allocated counts whole blocks").count(),
        1,
        "only the column whose allocated differs: {out}"
    );
    assert!(
        text.contains(
            "note: expandable_segments:True: allocated differs from the original's though the \
             same allocations are live (19.59 MiB requested at the end): allocated counts whole \
             blocks, and with expandable segments a block is split when 512 B or more would be \
             left, without them a large block keeps a remainder of up to 1 MiB"
        ),
        "{out}"
    );

    // A shared file re-run with expandable segments in `capacity`.
    let expandable = |name: &str, capacity: &str| {
        let path = shared(name)?;
        let path = path.to_str().expect("utf-8 path").to_string();
        let args = [
            "replay",
            &path,
            "--alloc-conf",
            "expandable_segments:True",
            "--capacity",
            capacity,
        ];
        Some(run_vramtop(&args, None).1)
    };
    // Hyperion's 8.31 vs 8.29 GiB is the same: the requests match.
    let Some(out) = expandable("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle", "9GiB") else {
        return;
    };
    assert!(
        unwrapped(&out).contains(
            "note: expandable_segments:True: allocated differs from the original's though the \
             same allocations are live (5.89 GiB requested at the end)"
        ),
        "{out}"
    );
    // Columns that skipped allocations differ for that reason, said by `*`.
    let Some(out) = expandable("silmont_mem_snapshot.pickle", "2GiB") else {
        return;
    };
    assert!(
        !unwrapped(&out).contains("allocated counts whole blocks"),
        "{out}"
    );
}

#[test]
fn whatif_ascii_prints_the_table_in_ascii_one_character_for_one() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let file = path.display().to_string();
    // A capacity below the peak: the run fails, and its footnotes and
    // divergence lines have their dashes and signs too.
    let plain = common::assert_ascii_twin(&[
        "replay",
        &file,
        "--alloc-conf",
        "expandable_segments:True",
        "--alloc-conf",
        "max_split_size_mb:128",
        "--capacity",
        "2GiB",
    ]);
    for unicode in ["—", "3×"] {
        assert!(plain.contains(unicode), "{unicode}: {plain}");
    }
}

#[test]
fn expandable_segments_off_on_a_trace_that_began_with_them_says_it_keeps_them() {
    let Some(path) = shared("bolongcheng_xl_fwd_cl128_float32_expandable.pickle") else {
        return;
    };
    let file = path.to_str().expect("utf-8");
    let args = [
        "replay",
        file,
        "--alloc-conf",
        "expandable_segments:False",
        "--capacity",
        "13GiB",
    ];
    let (code, out, _) = run_vramtop(&args, None);
    assert_eq!(code, 0, "{out}");
    let text = unwrapped(&out);
    assert!(
        text.contains(
            "expandable_segments:False starts from the state rebuilt for the trace's start, \
             which keeps its 2 expandable segments"
        ),
        "{out}"
    );
    // Its start's pages can be unmapped whatever the setting: counted,
    // not "n/a".
    let pages = row_cells(&out, "pages mapped / unmapped");
    assert!(
        pages.iter().flatten().all(|c| !c.contains("n/a")),
        "{pages:?}"
    );
    // The recorded settings' run (expandable segments on) has no note.
    assert!(!text.contains("recorded settings starts from"), "{out}");
    let (_, json, _) = run_vramtop(&[&args[..], &["--json"]].concat(), None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let runs = v["devices"][0]["runs"].as_array().expect("runs");
    let off = runs
        .iter()
        .find(|r| r["label"] == "expandable_segments:False")
        .expect("the run");
    assert_eq!(off["expandable_segments"], false);
    assert_eq!(off["start_expandable_segments"], 2);
}

#[test]
fn the_capacity_an_oom_records_is_the_device_the_run_had() {
    let mut checked = 0;
    for seed in 1..=4u64 {
        let mut m = model("", 2 * GIB);
        mixed_workload(&mut m, 2000, seed.wrapping_mul(0x9e37_79b9));
        if count(&m, TraceAction::Oom) == 0 {
            continue;
        }
        checked += 1;
        // The whole trace, and its second half (a mid-run trace's start
        // holds what the first half reserved).
        for from in [0, m.trace_len() / 2] {
            let snapshot = snapshot_of(&m, from);
            let Some(r) = recorded_capacity(&snapshot) else {
                let ooms = snapshot.device_traces[0]
                    .iter()
                    .filter(|e| e.action == TraceAction::Oom)
                    .count();
                assert_eq!(ooms, 0, "seed {seed} from {from}: an OOM gives a capacity");
                continue;
            };
            assert_eq!(r.bytes, 2 * GIB, "seed {seed} from {from}: {r:?}");
            assert_eq!(r.reserved + r.device_free, r.bytes);
            let e = &snapshot.device_traces[0][r.index];
            assert_eq!(e.action, TraceAction::Oom);
            assert_eq!(e.addr, r.device_free);
        }
    }
    assert!(checked >= 2, "only {checked} workloads ran out of memory");
}

#[test]
fn no_oom_or_a_trace_its_final_state_contradicts_gives_no_recorded_capacity() {
    let mut m = model("", 64 * GIB);
    mixed_workload(&mut m, 500, 7);
    let snapshot = snapshot_of(&m, 0);
    assert_eq!(count(&m, TraceAction::Oom), 0);
    assert_eq!(recorded_capacity(&snapshot), None);
    let mut small = model("", 2 * GIB);
    mixed_workload(&mut small, 2000, 0x1234_5678);
    let mut broken = snapshot_of(&small, 0);
    assert!(recorded_capacity(&broken).is_some());
    // A segment_alloc after the OOMs larger than everything reserved at
    // the end: reserved before it would be negative.
    let mut entry = broken.device_traces[0].last().cloned().expect("a trace");
    entry.action = TraceAction::SegmentAlloc;
    entry.size = u64::MAX / 2;
    broken.device_traces[0].push(entry);
    assert_eq!(recorded_capacity(&broken), None);
}

#[test]
fn whatif_without_capacity_of_a_file_that_ran_out_replays_at_the_recorded_capacity() {
    let mut m = model("", 2 * GIB);
    mixed_workload(&mut m, 2000, 0x1234_5678);
    assert!(count(&m, TraceAction::Oom) > 0);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("whatif-ran-out.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot_of(&m, 0), &path).expect("writes");
    let file = path.display().to_string();
    let (code, out, err) = run_vramtop(
        &["replay", &file, "--alloc-conf", "max_split_size_mb:64"],
        None,
    );
    assert!(code == 0 || code == 1, "{err}");
    let text = unwrapped(&out);
    assert!(
        text.contains("capacity: 2 GiB, the recording's at its out of memory"),
        "{out}"
    );
    assert!(text.contains("--capacity unlimited none"), "{out}");
    let (_, json, err) = run_vramtop(
        &[
            "replay",
            &file,
            "--alloc-conf",
            "max_split_size_mb:64",
            "--json",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect(&err);
    assert_eq!(v["capacity"], 2 * GIB);
    assert_eq!(v["capacity_from_recording"]["bytes"], 2 * GIB);
    // The recorded settings at that capacity run out as the original did.
    let d = &v["devices"][0];
    assert_eq!(d["runs"][0]["ooms"], d["runs"][1]["ooms"], "{json}");
    // A share of the device's total needs the device's size, which the
    // OOM's reserved + free is not: still refused without --capacity.
    let (code, _, err) = run_vramtop(
        &[
            "replay",
            &file,
            "--alloc-conf",
            "per_process_memory_fraction:0.5",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("give --capacity"), "{err}");
    // Unlimited, on request: no capacity, nothing said of the recording's.
    let (_, json, err) = run_vramtop(
        &[
            "replay",
            &file,
            "--alloc-conf",
            "max_split_size_mb:64",
            "--capacity",
            "unlimited",
            "--json",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect(&err);
    assert!(v["capacity"].is_null(), "{json}");
    assert!(v.get("capacity_from_recording").is_none(), "{json}");
    let (_, out, _) = run_vramtop(
        &[
            "replay",
            &file,
            "--alloc-conf",
            "max_split_size_mb:64",
            "--capacity",
            "Unlimited",
        ],
        None,
    );
    assert!(
        unwrapped(&out).contains("cudaMalloc capacity unlimited"),
        "{out}"
    );
}

#[test]
fn an_oom_of_a_cpp_only_stack_names_the_autograd_node_as_the_summary_does() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (_, out, err) = run_vramtop(
        &[
            "replay",
            &path,
            "--alloc-conf",
            "expandable_segments:True",
            "--capacity",
            "2GiB",
        ],
        None,
    );
    // The backward thread records no Python frame: the code that asked is
    // the autograd node, labelled as `open --summary` labels its site.
    for asked in [
        "\n      asked by BmmBackward0::apply (C++, backward pass)\n",
        "\n      asked by DivBackward0::apply (C++, backward pass)\n",
    ] {
        assert!(out.contains(asked), "{asked:?}\n{out}{err}");
    }
    // Not the demangled signatures of the allocator's callers.
    for signature in ["c10::ArrayRef", "_empty_generic", "??:?"] {
        assert!(!out.contains(signature), "{signature}\n{out}");
    }
}

#[test]
fn replay_names_events_as_the_viewer_does_and_at_takes_its_index() {
    let Some(path) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (_, out, err) = run_vramtop(&["replay", &path, "--capacity", "2GiB"], None);
    let text = unwrapped(&out);
    // The trace index `#40` is the 41st event, as the viewer's status
    // line says it.
    assert!(
        text.contains("first divergence: alloc of 512.00 MiB on stream 0 at event 41/97 (#40);"),
        "{out}{err}"
    );
    assert!(
        text.contains("out of memory at event 41/97 (#40): a 512.00 MiB request"),
        "{out}"
    );
    assert!(!text.contains("at #40"), "{out}");
    // `--at #40` is that event (the state just after it), as `--at 41` is.
    let summary_at = |at: &str| {
        let (code, out, err) = run_vramtop(&["open", &path, "--summary", "--at", at], None);
        assert_eq!(code, 0, "{at}: {err}");
        out.lines()
            .find(|l| l.starts_with("  at event 41/97"))
            .map(|l| l.replace(&format!(" (--at {at})"), ""))
            .unwrap_or_else(|| panic!("{at}: {out}"))
    };
    assert_eq!(summary_at("#40"), summary_at("41"));
    let (code, by_index, err) = run_vramtop(
        &["diff", &path, "--at", "#40", "--at", "#96", "--json"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&by_index).expect("JSON");
    assert_eq!(v["before_at"]["cursor"], 41, "{by_index}");
    assert_eq!(v["before_at"]["asked"], "#40", "{by_index}");
    assert_eq!(v["after_at"]["cursor"], 97, "{by_index}");
    let (code, _, err) = run_vramtop(&["diff", &path, "--at", "#97", "--at", "0"], None);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "#97 is past the end of GPU 0's trace: it has 97 events (--at takes #0 to #96)"
        ),
        "{err}"
    );
}
