//! Allocation sites and peaks on the shared real snapshots: the sites'
//! bytes add up to the allocated bytes (computed here from the raw blocks,
//! independently of the grouping), at the end of every file and at
//! cursors of every trace; the peaks found equal the timeline's maxima.

mod common;

use std::sync::Arc;

use vramtop::alloc::advice::OomCause;
use vramtop::alloc::{BlockState, TraceAction};
use vramtop::snapshot::peak::peaks;
use vramtop::snapshot::scrub::Scrub;
use vramtop::snapshot::sites::{
    Grouping, NoStackReason, Sites, sites_of_snapshot, sites_of_state, trace_records_stacks,
};
use vramtop::snapshot::{Snapshot, read_snapshot_file};

/// Every shared snapshot that loads, by name.
fn shared_snapshots() -> Vec<(String, Snapshot)> {
    let Some(dir) = common::shared_snapshots_dir() else {
        return Vec::new();
    };
    common::snapshot_files_in(&dir)
        .into_iter()
        .filter_map(|(name, path)| Some((name, read_snapshot_file(&path).ok()?)))
        .collect()
}

fn has_stacks(s: &Snapshot) -> bool {
    s.segments
        .iter()
        .flat_map(|s| &s.blocks)
        .any(|b| !b.frames.is_empty())
        || s.device_traces
            .iter()
            .flatten()
            .any(|e| !e.frames.is_empty())
}

fn check_sums(sites: &Sites, allocated: u64, blocks: u64, what: &str) {
    assert_eq!(sites.allocated, allocated, "{what}: allocated");
    let bytes: u64 = sites.sites.iter().map(|s| s.bytes).sum();
    assert_eq!(bytes, allocated, "{what}: Σ site bytes");
    let count: u64 = sites.sites.iter().map(|s| s.blocks).sum();
    assert_eq!(count, blocks, "{what}: Σ site blocks");
    for w in sites.sites.windows(2) {
        assert!(w[0].bytes >= w[1].bytes, "{what}: sorted by bytes");
    }
    // One group per reason a block has no stack: the file's own reason,
    // and the trace's for blocks whose stack it lost.
    let no_stack: Vec<_> = sites.sites.iter().filter(|s| s.key.is_no_stack()).collect();
    assert!(
        no_stack.len() <= 2,
        "{what}: {} no-stack groups",
        no_stack.len()
    );
    if let [a, b] = no_stack.as_slice() {
        assert_ne!(a.key, b.key, "{what}: two groups of one reason");
    }
}

#[test]
fn sites_of_every_shared_snapshot_add_up_to_its_allocated_bytes() {
    let snapshots = shared_snapshots();
    let mut with_stacks = 0;
    for (name, snapshot) in &snapshots {
        if !has_stacks(snapshot) {
            continue;
        }
        with_stacks += 1;
        let allocated_blocks = || {
            snapshot
                .segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::ActiveAllocated)
        };
        let allocated: u64 = allocated_blocks().map(|b| b.size).sum();
        let count = allocated_blocks().count() as u64;
        let stackless: u64 = allocated_blocks()
            .filter(|b| b.frames.is_empty())
            .map(|b| b.size)
            .sum();
        for g in Grouping::ALL {
            let sites = sites_of_snapshot(snapshot, None, g);
            check_sums(&sites, allocated, count, &format!("{name} {g:?}"));
            assert_eq!(sites.no_stack_bytes(), stackless, "{name} {g:?}");
        }
    }
    if !snapshots.is_empty() {
        assert!(with_stacks >= 5, "the shared set has files with stacks");
    }
}

#[test]
fn user_frame_sites_of_a_real_snapshot_name_user_code() {
    let Some(path) = common::shared_snapshot("muduard_memory_snapshot.pkl") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    let sites = sites_of_snapshot(&snapshot, None, Grouping::UserFrame);
    let named: Vec<&str> = sites
        .sites
        .iter()
        .filter(|s| !s.key.is_no_stack())
        .map(|s| s.label.as_str())
        .collect();
    assert!(!named.is_empty());
    // The user's code is outside torch's package: no torch/nn frame is a
    // site in the default grouping when a user frame exists.
    assert!(
        named.iter().all(|l| !l.starts_with("module.py")),
        "{named:?}"
    );
}

#[test]
fn sites_at_scrub_cursors_add_up_to_the_allocated_bytes_there() {
    for (name, snapshot) in shared_snapshots() {
        if snapshot.device_traces.iter().all(Vec::is_empty) {
            continue;
        }
        let scrub = Scrub::new(Arc::new(snapshot));
        for d in &scrub.devices {
            let reason = if trace_records_stacks(d.events()) {
                NoStackReason::BeforeRecording
            } else {
                NoStackReason::WithoutStacks
            };
            let every = (d.len() / 40).max(1);
            for c in (0..=d.len()).step_by(every).chain([d.len()]) {
                let state = d.state_at(c);
                let live = || {
                    state
                        .blocks
                        .values()
                        .filter(|b| b.state == BlockState::ActiveAllocated)
                };
                let allocated: u64 = live().map(|b| b.size).sum();
                let count = live().count() as u64;
                let sites = sites_of_state(&state, Grouping::UserFrame, reason);
                check_sums(&sites, allocated, count, &format!("{name} cursor {c}"));
                assert_eq!(allocated, d.points[c].allocated, "{name} cursor {c}");
            }
        }
    }
}

#[test]
fn peaks_equal_the_maxima_of_every_shared_timeline() {
    for (name, snapshot) in shared_snapshots() {
        let scrub = Scrub::new(Arc::new(snapshot));
        for d in &scrub.devices {
            let p = peaks(d);
            let max_alloc = d.points.iter().map(|p| p.allocated).max().unwrap_or(0);
            let max_reserved = d.points.iter().map(|p| p.reserved).max().unwrap_or(0);
            assert_eq!(p.allocated.bytes, max_alloc, "{name}");
            assert_eq!(p.reserved.bytes, max_reserved, "{name}");
            assert_eq!(d.points[p.allocated.cursor].allocated, max_alloc, "{name}");
            assert_eq!(d.points[p.reserved.cursor].reserved, max_reserved, "{name}");
            assert!(
                d.points[..p.allocated.cursor]
                    .iter()
                    .all(|q| q.allocated < max_alloc),
                "{name}: the first cursor at the peak"
            );
            let biggest = d
                .events()
                .iter()
                .filter(|e| e.action == TraceAction::Alloc)
                .map(|e| e.size)
                .max();
            assert_eq!(p.biggest_allocation.map(|m| m.bytes), biggest, "{name}");
            if let Some(m) = p.biggest_allocation {
                let e = &d.events()[m.cursor - 1];
                assert_eq!((e.action, e.size), (TraceAction::Alloc, m.bytes), "{name}");
            }
        }
    }
}

#[test]
fn open_summary_lists_top_sites_at_the_end_and_at_the_peak() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    let path = path.display().to_string();
    let (code, out, err) =
        common::run_vramtop(&["open", &path, "--summary", "--json", "--top", "3"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert!(v.get("segments").is_some(), "the summary's keys stay");
    assert!(v.get("allocator_settings").is_some());
    assert_eq!(v["top"], 3);
    let device = &v["sites"][0];
    let at_end = &device["at_end"];
    let listed = at_end["sites"].as_array().expect("sites");
    assert!(listed.len() <= 3);
    let listed_bytes: u64 = listed
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap_or(0))
        .sum();
    let allocated: u64 = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum();
    assert_eq!(at_end["allocated"].as_u64(), Some(allocated));
    assert_eq!(
        listed_bytes + at_end["other_bytes"].as_u64().unwrap_or(0),
        allocated
    );
    let scrub = Scrub::new(Arc::new(snapshot));
    let max = scrub.devices[0].points.iter().map(|p| p.allocated).max();
    assert_eq!(device["peaks"]["allocated"]["bytes"].as_u64(), max);
    assert_eq!(device["at_peak_allocated"]["allocated"].as_u64(), max);

    let (code, text, _) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0);
    for needle in [
        "allocation sites",
        "peak allocated",
        "at the peak of allocated",
        "allocator_settings",
        ".py:",
    ] {
        assert!(text.contains(needle), "no {needle:?} in {text}");
    }
}

#[test]
fn whatif_oom_report_shows_the_users_frames_not_the_unwinder() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = common::run_vramtop(&["replay", &path, "--capacity", "1GiB"], None);
    assert!(code == 0 || code == 1, "{err}");
    let report = out
        // The run's detail, not the table's footnote ("* ran out of
        // memory at #8 …").
        .split("\n    out of memory at")
        .nth(1)
        .expect("the what-if runs out of memory at 1 GiB");
    // As `open --summary` names an OOM's code: the frame that asked, then
    // the user's frames that called it, each a site label.
    let lines: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.starts_with("      asked by "))
        .take_while(|l| l.starts_with("      asked by ") || l.starts_with("         "))
        .collect();
    assert_eq!(
        lines,
        [
            "      asked by trace_peak_memory.py:13 custom_scaled_dot_product_attention",
            "               called from trace_peak_memory.py:43 main",
            "                         < trace_peak_memory.py:98 <module>",
        ],
        "{report}"
    );
    assert!(!report.contains("unwind"), "{report}");
    assert!(!report.contains("CachingAllocator"), "{report}");
}

/// A model run that runs out of memory twice: 600 MiB live at the first
/// OOM, 300 MiB at the second.
fn twice_out_of_memory() -> Snapshot {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const MIB: u64 = 1 << 20;
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(10_000));
    let a = m.malloc(300 * MIB, 0).expect("fits");
    let b = m.malloc(300 * MIB, 0).expect("fits");
    assert!(m.malloc(700 * MIB, 0).is_err(), "first OOM");
    m.free(a).expect("live");
    m.empty_cache();
    assert!(m.malloc(900 * MIB, 0).is_err(), "second OOM");
    let _ = b;
    vramtop::snapshot::capture::snapshot_of(&m, 0)
}

#[test]
fn open_summary_names_the_last_oom_with_the_sites_it_met() {
    use vramtop::snapshot::summary::sites_report;
    const MIB: u64 = 1 << 20;
    let snapshot = Arc::new(twice_out_of_memory());
    let ooms: Vec<usize> = snapshot.device_traces[0]
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == TraceAction::Oom)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ooms.len(), 2);
    let report = sites_report(&snapshot, Grouping::default(), 5);
    let d = &report.sites[0];
    assert_eq!(d.ooms, 2);
    let oom = d.at_last_oom.as_ref().expect("the last OOM");
    assert_eq!(
        oom.sites.cursor,
        Some(ooms[1] + 1),
        "the state right after it"
    );
    assert_eq!(oom.requested, 900 * MIB);
    assert_eq!(oom.sites.allocated, 300 * MIB, "b alone was live");
    let listed: u64 = oom.sites.sites.iter().map(|s| s.bytes).sum();
    assert_eq!(listed + oom.sites.other_bytes, oom.sites.allocated);
    // After empty_cache only b's segment stays: nothing cached, and the
    // device's free 724 MiB is the only room there was.
    assert_eq!(oom.memory.reserved, 300 * MIB);
    assert_eq!((oom.memory.cached_free, oom.memory.free_blocks), (0, 0));
    assert_eq!(oom.device_free, 1024 * MIB - 300 * MIB);
    assert_eq!(
        oom.memory.cause,
        OomCause::Exhausted {
            short: 900 * MIB - oom.device_free
        }
    );

    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("at the last of 2 OOMs, event "), "{text}");
    assert!(text.contains("900 MiB requested"), "{text}");
    let (code, json, err) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sites"][0]["ooms"], 2);
    assert_eq!(v["sites"][0]["at_last_oom"]["requested"], 900 * MIB);
    // The moment's figures sit beside the OOM's, as `at_cursor`'s do: what
    // the text heads it with ("event 12/12, t+…: … allocated").
    let last = &v["sites"][0]["at_last_oom"];
    assert_eq!(last["cursor"], ooms[1] + 1, "{last}");
    assert_eq!(last["allocated"], 300 * MIB, "{last}");
    assert!(last["time_us"].is_i64(), "{last}");
    assert!(last["sites"].is_array(), "{last}");
    let (code, json, err) =
        common::run_vramtop(&["open", &path, "--summary", "--json", "--at", "oom"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let (last, at) = (&v["sites"][0]["at_last_oom"], &v["sites"][0]["at_cursor"]);
    for key in ["cursor", "time_us", "allocated", "sites"] {
        assert_eq!(last[key], at[key], "{key}: {json}");
    }
}

/// Two cached 200 MiB segments each split by a live block (100 and 120
/// MiB), the rest of a 1 GiB device taken: 180 MiB reserved but
/// unallocated in two pieces, then a 150 MiB request.
fn out_of_memory_in_a_fragmented_cache() -> Snapshot {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const MIB: u64 = 1 << 20;
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(10_000));
    let a = m.malloc(200 * MIB, 0).expect("fits");
    let b = m.malloc(200 * MIB, 0).expect("fits");
    m.free(a).expect("live");
    m.free(b).expect("live");
    let _in_a = m.malloc(100 * MIB, 0).expect("splits a cached segment");
    let _in_b = m.malloc(120 * MIB, 0).expect("splits the other");
    let _rest = m.malloc(600 * MIB, 0).expect("fits");
    assert!(m.malloc(150 * MIB, 0).is_err(), "no free block holds it");
    vramtop::snapshot::capture::snapshot_of(&m, 0)
}

#[test]
fn an_oom_the_cache_held_in_pieces_is_read_as_fragmentation() {
    use vramtop::snapshot::summary::sites_report;
    const MIB: u64 = 1 << 20;
    let snapshot = Arc::new(out_of_memory_in_a_fragmented_cache());
    let report = sites_report(&snapshot, Grouping::default(), 5);
    let oom = report.sites[0].at_last_oom.as_ref().expect("the OOM");
    assert_eq!(oom.requested, 150 * MIB);
    assert_eq!(oom.memory.cached_free, 180 * MIB);
    assert_eq!(oom.memory.free_blocks, 2);
    assert_eq!(oom.memory.largest_free_block, 100 * MIB);
    assert_eq!(oom.memory.reserved, 1000 * MIB);
    assert_eq!(oom.memory.cause, OomCause::FragmentedCache);

    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "180 MiB reserved but unallocated of 1000 MiB reserved, in 2 blocks, largest 100 MiB"
        ),
        "{text}"
    );
    assert!(
        flat.contains("in pieces too small: fragmentation"),
        "{text}"
    );
    assert!(flat.contains("expandable_segments:True"), "{text}");
    let (code, json, err) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let oom = &v["sites"][0]["at_last_oom"];
    assert_eq!(oom["cached_free"], 180 * MIB, "{oom}");
    assert_eq!(oom["largest_free_block"], 100 * MIB, "{oom}");
    assert_eq!(oom["cause"]["kind"], "fragmented_cache", "{oom}");
}

#[test]
fn a_summary_without_an_oom_says_none() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, text, _) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0);
    assert!(!text.contains("OOM"), "{text}");
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sites"][0]["ooms"], 0);
    assert!(v["sites"][0]["at_last_oom"].is_null());
}

#[test]
fn summary_sites_and_viewer_list_the_same_devices_for_every_shared_snapshot() {
    use vramtop::snapshot::summary::{sites_report, summarize};
    for (name, snapshot) in shared_snapshots() {
        let snapshot = Arc::new(snapshot);
        let summary: Vec<u32> = summarize(&snapshot)
            .devices
            .iter()
            .map(|d| d.device)
            .collect();
        let sites: Vec<u32> = sites_report(&snapshot, Grouping::UserFrame, 3)
            .sites
            .iter()
            .map(|d| d.device)
            .collect();
        let viewer: Vec<u32> = Scrub::new(Arc::clone(&snapshot))
            .devices
            .iter()
            .map(|d| d.device)
            .collect();
        assert_eq!(
            summary, sites,
            "{name}: the summary's segments and its sites"
        );
        assert_eq!(summary, viewer, "{name}: the summary and the viewer");
    }
}

#[test]
fn a_device_with_only_a_snapshot_marker_is_not_listed() {
    // muduard's b: PyTorch marked GPU 0 when the snapshot was taken (one
    // `snapshot` entry, no segment); every byte is on GPU 1, whose trace
    // holds one free_completed.
    let Some(path) = common::shared_snapshot("muduard_dump_snapshot_b.pickle") else {
        return;
    };
    let snapshot = read_snapshot_file(&path).expect("shared snapshot loads");
    assert_eq!(snapshot.device_traces.len(), 2, "the file's shape");
    assert_eq!(snapshot.device_traces[0][0].action, TraceAction::Snapshot);
    assert_eq!(snapshot.devices(), vec![1]);
    // A memory event on GPU 0 would make it a device of the file.
    let mut used = snapshot.clone();
    let mut event = used.device_traces[1][0].clone();
    event.action = TraceAction::FreeRequested;
    used.device_traces[0].push(event);
    assert_eq!(used.devices(), vec![0, 1]);
}

#[test]
fn a_trace_of_only_a_snapshot_marker_has_no_peak_to_report() {
    // Yiyi's OOM snapshot: its trace is the one `snapshot` entry PyTorch
    // writes when the snapshot is taken; no moment differs from the end.
    let Some(path) = common::shared_snapshot("Yiyi-philosophy_LLM-inference_oom_snapshot.pickle")
    else {
        return;
    };
    let snapshot = Arc::new(read_snapshot_file(&path).expect("shared snapshot loads"));
    assert_eq!(snapshot.device_traces[0].len(), 1, "the file's shape");
    let report = vramtop::snapshot::summary::sites_report(&snapshot, Grouping::UserFrame, 3);
    let device = &report.sites[0];
    assert_eq!((device.device, device.events), (0, 0));
    assert!(device.peaks.is_none() && device.at_peak_allocated.is_none());
    assert!(device.at_end.allocated > 0);
}

#[test]
fn a_block_without_a_stack_keeps_its_reason_from_the_end_into_the_trace() {
    // Hyperion's trace starts mid-run. The blocks of its final state
    // without a stack were allocated while history was off, at the end
    // and at the peak alike; at the peak more blocks have none: those alive
    // before the trace and freed in it, whose stacks the trace lost.
    use vramtop::snapshot::sites::SiteKey;
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let snapshot = Arc::new(read_snapshot_file(&path).expect("shared snapshot loads"));
    let report = vramtop::snapshot::summary::sites_report(&snapshot, Grouping::UserFrame, 100);
    let device = &report.sites[0];
    let no_stack = |sites: &[vramtop::snapshot::sites::Site]| -> Vec<(NoStackReason, Vec<u64>)> {
        sites
            .iter()
            .filter_map(|s| match s.key {
                SiteKey::NoStack(r) => Some((r, s.addresses.clone())),
                _ => None,
            })
            .collect()
    };
    let at_end = no_stack(&device.at_end.sites);
    let peak = device.at_peak_allocated.as_ref().expect("a peak");
    let at_peak = no_stack(&peak.sites);
    assert_eq!(at_end.len(), 1, "{at_end:?}");
    assert_eq!(at_end[0].0, NoStackReason::BeforeRecording);
    let recorded = at_peak
        .iter()
        .find(|(r, _)| *r == NoStackReason::BeforeRecording)
        .expect("the recording's group at the peak");
    assert!(
        recorded
            .1
            .iter()
            .all(|a| at_end[0].1.binary_search(a).is_ok()),
        "the peak's blocks from before the recording are the end's"
    );
    let lost = at_peak
        .iter()
        .find(|(r, _)| *r == NoStackReason::BeforeTrace)
        .expect("blocks whose stack the trace lost");
    assert!(lost.1.iter().all(|a| at_end[0].1.binary_search(a).is_err()));
}

/// A model's snapshot written to a temporary file: (its folder, which
/// goes when dropped, and the path).
fn written(snapshot: &Snapshot) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.pickle");
    vramtop::snapshot::write_snapshot_file(snapshot, &path).expect("written");
    let path = path.display().to_string();
    (dir, path)
}

fn one_block_history() -> Snapshot {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(100));
    let _kept = m.malloc(3 << 20, 0).expect("fits");
    vramtop::snapshot::capture::snapshot_of(&m, 0)
}

#[test]
fn a_summary_warns_when_trace_events_do_not_fit_the_files_state() {
    use vramtop::snapshot::types::{EntryTime, TraceEntry};
    let consistent = one_block_history();
    let (_dir, path) = written(&consistent);
    let (code, json, err) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sites"][0]["inconsistent_events"], 0);

    // An allocation the file's final state does not hold.
    let mut odd = consistent.clone();
    odd.device_traces[0].push(TraceEntry {
        action: TraceAction::Alloc,
        addr: 0xdead_0000,
        size: 4096,
        stream: 0,
        time: EntryTime::NONE,
        frames: Arc::from(Vec::new()),
        extra: None,
    });
    let (_dir, path) = written(&odd);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("warning: 1 of the trace's") && flat.contains("does not fit"),
        "{text}"
    );
    assert!(flat.contains("approximate"), "{text}");
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sites"][0]["inconsistent_events"], 1);
}

#[test]
fn a_summary_of_a_file_without_a_trace_says_why_it_has_no_peaks() {
    let mut state_only = one_block_history();
    state_only.device_traces.clear();
    let (_dir, path) = written(&state_only);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("no trace of memory events for this GPU in the file: no peaks"),
        "{text}"
    );
    assert!(!flat.contains("peak allocated"), "{text}");
    // With a trace, no such line.
    let (_dir, path) = written(&one_block_history());
    let (_, text, _) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert!(!text.contains("no trace of memory events"), "{text}");
}

/// Each site's label, bytes and blocks, in order.
fn rows(sites: &[vramtop::snapshot::sites::Site]) -> Vec<(String, u64, u64)> {
    sites
        .iter()
        .map(|s| (s.label.clone(), s.bytes, s.blocks))
        .collect()
}

#[test]
fn sites_at_a_moment_equal_the_viewer_s_sites_at_that_cursor() {
    use vramtop::snapshot::peak::At;
    use vramtop::snapshot::summary::sites_report_at;
    for name in [
        "silmont_mem_snapshot.pickle",
        "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle",
    ] {
        let Some(path) = common::shared_snapshot(name) else {
            return;
        };
        let Some(mut v) = common::shared_viewer(name) else {
            return;
        };
        let snapshot = Arc::new(read_snapshot_file(&path).expect("loads"));
        let device = v.device_index();
        let n = v.device().expect("a traced GPU").len();
        let peak = v.device_peaks().expect("peaks").allocated.cursor;
        let moments = [
            (At::Start, 0),
            (At::Event(1), 1),
            (At::Event(n / 2), n / 2),
            (At::Peak, peak),
            (At::End, n),
        ];
        let pairs = Grouping::ALL.into_iter().cycle().zip(moments);
        for (grouping, (at, cursor)) in pairs {
            let report = sites_report_at(&snapshot, grouping, usize::MAX, at).expect("a moment");
            let d = &report.sites[device];
            let here = d.at_cursor.as_ref().expect("the moment's sites");
            v.grouping = grouping;
            v.cursors[device] = cursor;
            v.refresh();
            let viewer = v.sites_now();
            let what = format!("{name} --at {at} by {}", grouping.name());
            assert_eq!(here.sites.cursor, Some(cursor), "{what}");
            assert_eq!(here.asked, at.to_string(), "{what}");
            assert_eq!(here.sites.allocated, viewer.allocated, "{what}");
            assert_eq!(rows(&here.sites.sites), rows(&viewer.sites), "{what}");
            assert_eq!(here.sites.other_sites, 0, "{what}: every site listed");
            let state = v.device().expect("traced").state_at(cursor);
            assert_eq!(here.reserved, state.reserved, "{what}");
        }
    }
}

#[test]
fn summary_at_lists_the_moment_s_sites_in_text_and_json_by_the_grouping_asked() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, text, err) = common::run_vramtop(
        &[
            "open",
            &path,
            "--summary",
            "--at",
            "peak",
            "--group",
            "function",
            "--top",
            "2",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("(by function; sizes are block sizes)"),
        "{text}"
    );
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains("\n  at event 53/97, t+951.991 ms (--at peak): 3.03 GiB allocated,")
            && said.contains("(--at peak): 3.03 GiB allocated, 3.52 GiB reserved"),
        "{text}"
    );
    let (code, json, err) = common::run_vramtop(
        &[
            "open",
            &path,
            "--summary",
            "--json",
            "--at",
            "40",
            "--group",
            "whole-stack",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["grouping"], "stack");
    let at = &v["sites"][0]["at_cursor"];
    assert_eq!(at["asked"], "40");
    assert_eq!(at["cursor"], 40);
    assert!(at["reserved"].as_u64().is_some_and(|r| r > 0), "{at}");
    // Without --at there is none.
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(v["sites"][0].get("at_cursor").is_none());
    assert_eq!(v["grouping"], "user_frame");
}

/// A run that fails `count` requests of 2 GiB on a 1 GiB device.
fn out_of_memory_times(count: usize) -> Snapshot {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const MIB: u64 = 1 << 20;
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(100_000));
    let _live = m.malloc(100 * MIB, 0).expect("fits");
    for k in 0..count {
        let request = 2048 * MIB + k as u64 * MIB;
        assert!(m.malloc(request, 0).is_err(), "OOM {k}");
    }
    vramtop::snapshot::capture::snapshot_of(&m, 0)
}

#[test]
fn every_oom_is_listed_with_its_moment_up_to_the_bound() {
    use vramtop::snapshot::peak::At;
    use vramtop::snapshot::summary::{MAX_LISTED_OOMS, sites_report, sites_report_at};
    const MIB: u64 = 1 << 20;
    let snapshot = Arc::new(twice_out_of_memory());
    let ooms: Vec<usize> = snapshot.device_traces[0]
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == TraceAction::Oom)
        .map(|(i, _)| i + 1)
        .collect();
    let report = sites_report(&snapshot, Grouping::default(), 5);
    let d = &report.sites[0];
    let listed: Vec<(usize, u64)> = d
        .oom_events
        .iter()
        .map(|o| (o.cursor, o.requested))
        .collect();
    assert_eq!(listed, vec![(ooms[0], 700 * MIB), (ooms[1], 900 * MIB)]);
    // `--at oom` is the last, where the last OOM's sites are.
    let at = sites_report_at(&snapshot, Grouping::default(), 5, At::Oom).expect("an OOM");
    let at = at.sites[0].at_cursor.as_ref().expect("the moment");
    assert_eq!(at.sites.cursor, Some(ooms[1]));
    assert_eq!(Some(&at.sites), d.at_last_oom.as_ref().map(|o| &o.sites));

    // Thousands of OOMs: the first MAX_LISTED_OOMS, the count of all.
    let many = MAX_LISTED_OOMS + 40;
    let snapshot = Arc::new(out_of_memory_times(many));
    let report = sites_report(&snapshot, Grouping::default(), 5);
    let d = &report.sites[0];
    assert_eq!((d.ooms, d.oom_events.len()), (many, MAX_LISTED_OOMS));
    assert_eq!(d.oom_events[1].requested, 2049 * MIB, "in order");
    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // 2048 MiB is "2 GiB"; 2049 MiB is not exactly that: "2.00 GiB".
    assert!(
        said.contains(&format!(
            "{many} OOMs: event 3, 2 GiB requested; event 4, 2.00 GiB requested;"
        )),
        "{text}"
    );
    assert!(
        said.contains(&format!(
            "… {} more (the first {MAX_LISTED_OOMS} are in --json)",
            many - 10
        )),
        "{text}"
    );
    for line in text.lines() {
        assert!(vramtop::cli::text::cells(line) <= 80, "{line:?}");
    }
}

#[test]
fn a_summary_warns_when_the_trace_does_not_lead_to_the_files_final_state() {
    let consistent = one_block_history();
    let (_dir, path) = written(&consistent);
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(v["sites"][0]["end_mismatch"].is_null(), "{json}");

    // The file records the trace's one live block as free.
    let mut odd = consistent.clone();
    let block = odd.segments[0]
        .blocks
        .iter_mut()
        .find(|b| b.state == BlockState::ActiveAllocated)
        .expect("the live block");
    block.state = BlockState::Inactive;
    let (_dir, path) = written(&odd);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("the trace does not lead to the file's final state (1 block differs)"),
        "{text}"
    );
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["sites"][0]["end_mismatch"]["blocks"], 1, "{json}");
    assert_eq!(v["sites"][0]["end_mismatch"]["segments"], 0, "{json}");
}

#[test]
fn an_ooms_request_and_free_bytes_that_read_alike_are_given_in_bytes_too() {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const GIB: u64 = 1 << 30;
    let mut m = CachingAllocator::new(
        InMemoryDevice::new(2 * GIB - 1000),
        0,
        AllocatorConfig::default(),
    );
    m.record_history(Some(100));
    let _held = m.malloc(GIB, 0).expect("fits");
    assert!(m.malloc(GIB - 512, 0).is_err(), "1000 B short");
    let (_dir, path) = written(&vramtop::snapshot::capture::snapshot_of(&m, 0));
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!("({} B) requested", GIB - 512))
            && flat.contains(&format!("({} B) free on the device", GIB - 1000)),
        "{text}"
    );
}

#[test]
fn an_ooms_request_names_the_segment_pytorchs_error_message_names() {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    const MIB: u64 = 1 << 20;
    let mut m = CachingAllocator::new(InMemoryDevice::new(64 * MIB), 0, AllocatorConfig::default());
    m.record_history(Some(100));
    let _held = m.malloc(30 * MIB, 0).expect("fits");
    // 39.68 MiB rounds to 512 B in the trace; PyTorch's "Tried to allocate"
    // names the 40 MiB segment it asked cudaMalloc for.
    let request = 39 * MIB + 696 * 1024;
    assert!(m.malloc(request, 0).is_err(), "does not fit beside 30 MiB");
    let (_dir, path) = written(&vramtop::snapshot::capture::snapshot_of(&m, 0));
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "39.68 MiB requested (a 40 MiB segment: the size PyTorch's error message names)"
        ),
        "{text}"
    );
}

/// A loop of `steps` iterations (a 1 MiB block allocated and freed) with a
/// `snapshot` entry after each, as PyTorch records one per snapshot taken.
fn snapshotted_each_step(steps: usize) -> Snapshot {
    use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
    let mut m = CachingAllocator::new(InMemoryDevice::new(1 << 30), 0, AllocatorConfig::default());
    m.record_history(Some(100_000));
    let mut ends = Vec::new();
    for _ in 0..steps {
        let a = m.malloc(1 << 20, 0).expect("fits");
        m.free(a).expect("live");
        ends.push(m.trace().count());
    }
    let mut snapshot = vramtop::snapshot::capture::snapshot_of(&m, 0);
    let trace = &mut snapshot.device_traces[0];
    let mut marker = trace[0].clone();
    marker.action = TraceAction::Snapshot;
    for &end in ends.iter().rev() {
        trace.insert(end, marker.clone());
    }
    snapshot
}

#[test]
fn the_summary_lists_the_snapshot_entries_event_numbers_for_at() {
    use vramtop::snapshot::summary::{MAX_LISTED_MARKERS, sites_report};
    let snapshot = Arc::new(snapshotted_each_step(3));
    let at: Vec<usize> = snapshot.device_traces[0]
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == TraceAction::Snapshot)
        .map(|(i, _)| i + 1)
        .collect();
    let d = &sites_report(&snapshot, Grouping::default(), 5).sites[0];
    assert_eq!(d.markers, 3);
    let listed: Vec<usize> = d.marker_events.iter().map(|m| m.cursor).collect();
    assert_eq!(listed, at);
    assert!(d.marker_events.iter().all(|m| m.action == "snapshot"));
    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let numbers: Vec<String> = at.iter().map(ToString::to_string).collect();
    let line = format!(
        "3 snapshot/annotate entries (--at mark:1 … mark:3, or the events): {}",
        numbers.join(", ")
    );
    assert!(said.contains(&line), "{text}");
    // Each is a moment `--at` takes.
    let (code, text, err) =
        common::run_vramtop(&["open", &path, "--summary", "--at", &numbers[1]], None);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains(&format!("event {}", at[1])), "{text}");

    // A long run: the first ten in the text, the first MAX_LISTED_MARKERS in
    // --json, the count of all.
    let many = MAX_LISTED_MARKERS + 20;
    let snapshot = Arc::new(snapshotted_each_step(many));
    let d = &sites_report(&snapshot, Grouping::default(), 5).sites[0];
    assert_eq!(
        (d.markers, d.marker_events.len()),
        (many, MAX_LISTED_MARKERS)
    );
    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains(&format!(
            "… {} more (the first {MAX_LISTED_MARKERS} are in --json)",
            many - 10
        )),
        "{text}"
    );
}

#[test]
fn at_mark_n_is_the_cursor_after_the_nth_snapshot_entry_in_summary_and_diff() {
    let snapshot = Arc::new(snapshotted_each_step(3));
    let after: Vec<usize> = snapshot.device_traces[0]
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == TraceAction::Snapshot)
        .map(|(i, _)| i + 1)
        .collect();
    let (_dir, path) = written(&snapshot);
    for (at, event) in [
        ("mark:2", after[1]),
        ("MARK:1", after[0]),
        ("mark:last", after[2]),
    ] {
        let (code, json, err) =
            common::run_vramtop(&["open", &path, "--summary", "--json", "--at", at], None);
        assert_eq!(code, 0, "{at}: {err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        let cursor = &v["sites"][0]["at_cursor"];
        assert_eq!(cursor["cursor"], event, "{at}: {json}");
        assert_eq!(cursor["asked"], at.to_ascii_lowercase(), "{at}: {json}");
    }
    let (code, text, err) = common::run_vramtop(
        &["diff", &path, "--at", "mark:1", "--at", "mark:last"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(said.contains(&format!("event {}/", after[0])), "{text}");
    assert!(said.contains("(--at mark:1)"), "{text}");
    assert!(said.contains("(--at mark:last)"), "{text}");
}

#[test]
fn diff_at_json_gives_the_traces_first_time_as_the_summary_does() {
    let (_dir, path) = written(&snapshotted_each_step(3));
    let (code, json, err) = common::run_vramtop(
        &["diff", &path, "--at", "mark:1", "--at", "mark:2", "--json"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let diff: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let (code, json, err) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let t0 = &summary["sites"][0]["first_time_us"];
    assert!(t0.is_i64(), "{json}");
    assert_eq!(&diff["first_time_us"], t0, "{diff}");
    // The text's "t+" is the moment's time less it: never before it.
    let before = diff["before_at"]["time_us"].as_i64().expect("a time");
    assert!(before >= t0.as_i64().expect("a time"), "{diff}");
}

#[test]
fn at_mark_past_the_files_marks_is_one_line_naming_how_many_it_has() {
    let (_dir, path) = written(&snapshotted_each_step(3));
    let (code, _, err) = common::run_vramtop(&["open", &path, "--summary", "--at", "mark:4"], None);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("GPU 0's trace has 3 snapshot/annotate entries: --at mark:4 is past them")
            && err.contains("mark:1 to mark:3"),
        "{err}"
    );
    let (code, _, err) = common::run_vramtop(&["diff", &path, "--at", "1", "--at", "mark:9"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has 3 snapshot/annotate entries"), "{err}");

    // A trace without any: mark:1 and mark:last alike.
    let (_dir, path) = written(&one_block_history());
    for at in ["mark:1", "mark:last"] {
        let (code, _, err) = common::run_vramtop(&["open", &path, "--summary", "--at", at], None);
        assert_eq!(code, 2, "{at}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!(
                "GPU 0's trace has no snapshot/annotate entry: --at {at} needs one"
            )),
            "{err}"
        );
    }
    // mark:0 and a mark that is not a count are usage errors.
    for (at, why) in [
        ("mark:0", "marks count from 1"),
        ("mark:x", "is not a mark"),
    ] {
        let (code, _, err) = common::run_vramtop(&["open", &path, "--summary", "--at", at], None);
        assert_eq!(code, 2, "{at}: {err}");
        assert!(err.contains(why), "{at}: {err}");
    }
}

/// The probe's stand-in training run (docs/attach.md) out of memory at its
/// second step: `torch.empty(capacity + 1)` of a 256 MiB device, asked by
/// `standin_train.py:72 step`, whose `oom` entry records the Python stack
/// of the failing call.
const STANDIN_OOM: &str = "tests/fixtures/standin-oom.pickle";

#[test]
fn an_ooms_stack_is_listed_under_it_in_the_summary_text_and_json() {
    let (code, text, err) = common::run_vramtop(&["open", STANDIN_OOM, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    // The frame that asked, then its callers, as a site's are listed.
    assert!(
        text.contains("\n    asked by standin_train.py:72 step\n"),
        "{text}"
    );
    // Too long for one line of 80: a caller a line, each after the first
    // led by its `<`, as a site's callers are.
    assert!(
        text.contains(
            "\n             called from standin_train.py:101 main\n                       \
             < standin_train.py:118 <module>\n"
        ),
        "{text}"
    );
    // The request's segment, which PyTorch's message names.
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("256.00 MiB requested (a 258 MiB segment: the size"),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{line}");
    }

    let (code, json, err) =
        common::run_vramtop(&["open", STANDIN_OOM, "--summary", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let d = &v["sites"][0];
    for oom in [&d["oom_events"][0], &d["at_last_oom"]] {
        assert_eq!(oom["site"], "standin_train.py:72 step", "{oom}");
        let frames = oom["frames"].as_array().expect("frames");
        // The user's frames, innermost first: not the launcher's.
        assert_eq!(frames.len(), 3, "{oom}");
        assert_eq!(frames[0]["filename"], "python/tests/standin_train.py");
        assert_eq!(
            (&frames[0]["line"], &frames[0]["name"]),
            (&72.into(), &"step".into())
        );
        assert_eq!(frames[1]["name"], "main");
        assert_eq!(
            oom["called_from"],
            serde_json::json!(["standin_train.py:101 main", "standin_train.py:118 <module>"])
        );
    }
}

#[test]
fn an_oom_without_a_stack_says_the_file_records_none_and_each_listed_oom_names_its_asker() {
    use vramtop::snapshot::types::Frame;
    // A model-made trace: no stacks at all.
    let mut snapshot = twice_out_of_memory();
    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("\n    no stack: recorded without stacks\n"),
        "{text}"
    );
    let (_, json, _) = common::run_vramtop(&["open", &path, "--summary", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let first = &v["sites"][0]["oom_events"][0];
    assert_eq!(first["frames"], serde_json::json!([]), "{first}");
    assert!(first["site"].is_null(), "{first}");

    // Each OOM's stack given: the list of OOMs names each one's asker.
    for (k, e) in snapshot.device_traces[0]
        .iter_mut()
        .filter(|e| e.action == TraceAction::Oom)
        .enumerate()
    {
        e.frames = Arc::from(vec![Frame {
            filename: Arc::from("/home/me/train.py"),
            line: 40 + k as u64,
            name: Arc::from("step"),
        }]);
    }
    let (_dir, path) = written(&snapshot);
    let (code, text, err) = common::run_vramtop(&["open", &path, "--summary"], None);
    assert_eq!(code, 0, "{err}");
    let said: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains("700 MiB requested by train.py:40; event ")
            && said.contains("900 MiB requested by train.py:41"),
        "{text}"
    );
    assert!(said.contains("asked by train.py:41 step"), "{text}");
    assert!(
        !said.contains("no stack: recorded without stacks"),
        "{text}"
    );
}
