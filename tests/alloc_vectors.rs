//! The allocator model against the test vectors of the spec (§7.1 derived
//! from the rules, §7.2 asserted by PyTorch's own tests).

use vramtop::alloc::{
    AllocError, AllocatorConfig, BlockState, CachingAllocator, InMemoryDevice, PoolKind,
    TraceAction,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

type Model = CachingAllocator<InMemoryDevice>;

fn fresh() -> Model {
    fresh_with("", 80 * GIB)
}

fn fresh_with(settings: &str, capacity: u64) -> Model {
    let config = AllocatorConfig::parse(settings).expect("valid settings");
    let mut m = CachingAllocator::new(InMemoryDevice::new(capacity), 0, config);
    m.record_history(Some(100_000));
    m
}

fn cur(m: &Model, key: &str) -> i64 {
    m.stats().memory_stats()[key]
}

/// (allocated, reserved, requested, segments, inactive_split blocks, inactive_split bytes)
fn figures(m: &Model) -> (i64, i64, i64, i64, i64, i64) {
    let s = m.stats();
    (
        s.allocated_bytes.all.current,
        s.reserved_bytes.all.current,
        s.requested_bytes.all.current,
        s.segment.all.current,
        s.inactive_split.all.current,
        s.inactive_split_bytes.all.current,
    )
}

fn layout_sizes(m: &Model) -> Vec<Vec<(u64, BlockState)>> {
    m.layout()
        .iter()
        .map(|s| s.blocks.iter().map(|b| (b.size, b.state)).collect())
        .collect()
}

fn ok(m: &mut Model, size: u64) -> u64 {
    let p = m.malloc(size, 0).expect("allocation fits");
    m.check_invariants().expect("invariants hold after malloc");
    p
}

fn free(m: &mut Model, p: u64) {
    m.free(p).expect("known pointer");
    m.check_invariants().expect("invariants hold after free");
}

#[test]
fn single_small_requests_carve_512_byte_blocks_from_a_2_mib_segment() {
    for (n, allocated) in [
        (1, 512),
        (511, 512),
        (512, 512),
        (513, 1024),
        (1000, 1024),
        (1024, 1024),
    ] {
        let mut m = fresh();
        ok(&mut m, n);
        assert_eq!(
            figures(&m),
            (
                allocated,
                2 * MIB as i64,
                n as i64,
                1,
                1,
                2 * MIB as i64 - allocated
            ),
            "malloc({n})"
        );
        assert_eq!(m.layout()[0].segment_type, PoolKind::Small);
    }
}

#[test]
fn one_mib_request_stays_in_the_small_pool() {
    for n in [MIB - 1, MIB] {
        let mut m = fresh();
        ok(&mut m, n);
        assert_eq!(
            figures(&m),
            (MIB as i64, 2 * MIB as i64, n as i64, 1, 1, MIB as i64)
        );
        assert_eq!(m.layout()[0].segment_type, PoolKind::Small);
    }
}

#[test]
fn large_request_sizes_pick_the_segment_size_of_the_spec() {
    // (request, allocated, reserved, inactive_split blocks, inactive_split bytes)
    let rows: [(u64, u64, u64, i64, u64); 12] = [
        (MIB + 1, 1_049_088, 20 * MIB, 1, 19_922_432),
        (5 * MIB, 5 * MIB, 20 * MIB, 1, 15 * MIB),
        (10 * MIB - 513, 10_485_248, 20 * MIB, 1, 10_486_272),
        (10 * MIB - 1, 10 * MIB, 10 * MIB, 0, 0),
        (10 * MIB, 10 * MIB, 10 * MIB, 0, 0),
        (11 * MIB, 12 * MIB, 12 * MIB, 0, 0),
        (12 * MIB, 12 * MIB, 12 * MIB, 0, 0),
        (12 * MIB + 1, 12_583_424, 14 * MIB, 1, 2_096_640),
        (19 * MIB, 20 * MIB, 20 * MIB, 0, 0),
        (19 * MIB + 1, 20 * MIB, 20 * MIB, 0, 0),
        (21 * MIB, 22 * MIB, 22 * MIB, 0, 0),
        (84 * MIB, 84 * MIB, 84 * MIB, 0, 0),
    ];
    for (n, allocated, reserved, splits, split_bytes) in rows {
        let mut m = fresh();
        ok(&mut m, n);
        assert_eq!(
            figures(&m),
            (
                allocated as i64,
                reserved as i64,
                n as i64,
                1,
                splits,
                split_bytes as i64
            ),
            "malloc({n})"
        );
        assert_eq!(m.layout()[0].segment_type, PoolKind::Large);
    }
}

#[test]
fn second_allocation_reuses_the_remainder_and_frees_merge_back() {
    let mut m = fresh();
    let a = ok(&mut m, MIB + 1);
    let b = ok(&mut m, MIB + 1);
    assert_eq!(
        b,
        a + 1_049_088,
        "b is carved from the remainder right after a"
    );
    assert_eq!(
        figures(&m),
        (2_098_176, 20 * MIB as i64, 2_097_154, 1, 1, 18_873_344)
    );
    free(&mut m, a);
    assert_eq!(figures(&m).4, 2);
    assert_eq!(figures(&m).5, 19_922_432);
    assert_eq!(
        layout_sizes(&m),
        vec![vec![
            (1_049_088, BlockState::Inactive),
            (1_049_088, BlockState::ActiveAllocated),
            (18_873_344, BlockState::Inactive)
        ]]
    );
    free(&mut m, b);
    assert_eq!(figures(&m), (0, 20 * MIB as i64, 0, 1, 0, 0));
    assert_eq!(
        layout_sizes(&m),
        vec![vec![(20 * MIB, BlockState::Inactive)]]
    );
    m.empty_cache();
    assert_eq!(figures(&m), (0, 0, 0, 0, 0, 0));
    assert_eq!(cur(&m, "num_device_free"), 1);
    assert_eq!(cur(&m, "num_sync_all_streams"), 1);
}

#[test]
fn empty_cache_keeps_segment_with_live_block() {
    let mut m = fresh();
    let a = ok(&mut m, 6 * MIB);
    let b = ok(&mut m, 6 * MIB);
    let c = ok(&mut m, 6 * MIB);
    assert_eq!(
        figures(&m),
        (
            18_874_368,
            20 * MIB as i64,
            18_874_368,
            1,
            1,
            2 * MIB as i64
        )
    );
    free(&mut m, b);
    assert_eq!(figures(&m).0, 12_582_912);
    assert_eq!((figures(&m).4, figures(&m).5), (2, 8 * MIB as i64));
    let d = ok(&mut m, 7 * MIB);
    assert_eq!(
        figures(&m).1,
        40 * MIB as i64,
        "no free block of 7 MiB: a new segment"
    );
    assert_eq!(figures(&m).0, 19_922_944);
    assert_eq!((figures(&m).4, figures(&m).5), (3, 22_020_096));
    m.empty_cache();
    m.check_invariants().expect("invariants");
    assert_eq!(
        figures(&m).1,
        40 * MIB as i64,
        "no segment is entirely free"
    );
    free(&mut m, a);
    free(&mut m, c);
    m.empty_cache();
    assert_eq!(figures(&m).0, 7_340_032);
    assert_eq!(figures(&m).1, 20 * MIB as i64);
    assert_eq!((figures(&m).4, figures(&m).5), (1, 13_631_488));
    assert_eq!(m.live_allocations()[0].address, d);
}

#[test]
fn best_fit_picks_the_smallest_block_and_uses_it_whole() {
    let mut m = fresh();
    let x = ok(&mut m, 12 * MIB);
    let _y = ok(&mut m, 12 * MIB);
    let z = ok(&mut m, 16 * MIB);
    let _w = ok(&mut m, 12 * MIB);
    free(&mut m, x);
    free(&mut m, z);
    let q = ok(&mut m, 11 * MIB);
    assert_eq!(q, x, "the 12 MiB block wins over the 16 MiB one");
    assert_eq!(
        figures(&m),
        (37_748_736, 52 * MIB as i64, 36_700_160, 4, 0, 0)
    );
}

#[test]
fn small_segment_filled_exactly_then_spills() {
    let mut m = fresh();
    for _ in 0..4096 {
        m.malloc(512, 0).expect("fits");
    }
    m.check_invariants().expect("invariants");
    assert_eq!(
        figures(&m),
        (2 * MIB as i64, 2 * MIB as i64, 2 * MIB as i64, 1, 0, 0)
    );
    ok(&mut m, 1);
    assert_eq!(figures(&m).0, 2_097_664);
    assert_eq!(figures(&m).1, 4 * MIB as i64);
    assert_eq!(figures(&m).3, 2);
    assert_eq!((figures(&m).4, figures(&m).5), (1, 2_096_640));
}

#[test]
fn free_block_is_not_reused_by_another_stream() {
    let mut m = fresh();
    let a = m.malloc(6 * MIB, 1).expect("fits");
    m.free(a).expect("known");
    let b = m.malloc(6 * MIB, 2).expect("fits");
    assert_ne!(a, b);
    assert_eq!(figures(&m).0, 6 * MIB as i64);
    assert_eq!(figures(&m).1, 40 * MIB as i64);
    m.check_invariants().expect("invariants");
}

#[test]
fn oversize_block_refused_for_a_normal_request() {
    let mut m = fresh_with("max_split_size_mb:40", 80 * GIB);
    let a = ok(&mut m, 50 * MIB);
    free(&mut m, a);
    ok(&mut m, 30 * MIB);
    assert_eq!(
        figures(&m),
        (30 * MIB as i64, 80 * MIB as i64, 30 * MIB as i64, 2, 0, 0)
    );
}

#[test]
fn oversize_block_reused_whole_within_20_mib() {
    let mut m = fresh_with("max_split_size_mb:40", 80 * GIB);
    let a = ok(&mut m, 60 * MIB);
    free(&mut m, a);
    let b = ok(&mut m, 45 * MIB);
    assert_eq!(a, b);
    assert_eq!(
        figures(&m),
        (60 * MIB as i64, 60 * MIB as i64, 45 * MIB as i64, 1, 0, 0)
    );
    assert_eq!(cur(&m, "oversize_allocations.current"), 1);
    assert_eq!(cur(&m, "oversize_segments.current"), 1);
}

#[test]
fn oversize_block_refused_beyond_20_mib_of_slack() {
    let mut m = fresh_with("max_split_size_mb:40", 80 * GIB);
    let a = ok(&mut m, 66 * MIB);
    free(&mut m, a);
    ok(&mut m, 45 * MIB);
    assert_eq!(
        figures(&m),
        (46 * MIB as i64, 112 * MIB as i64, 45 * MIB as i64, 2, 0, 0)
    );
}

#[test]
fn failed_cudamalloc_releases_cache_and_retries() {
    let mut m = fresh_with("", 100 * MIB);
    let a = ok(&mut m, 60 * MIB);
    let _b = ok(&mut m, 20 * MIB);
    free(&mut m, a);
    ok(&mut m, 70 * MIB);
    assert_eq!(figures(&m).0, 90 * MIB as i64);
    assert_eq!(figures(&m).1, 90 * MIB as i64);
    assert_eq!(figures(&m).3, 2);
    assert_eq!(cur(&m, "num_alloc_retries"), 1);
    assert_eq!(cur(&m, "num_ooms"), 0);
    assert_eq!(cur(&m, "num_device_alloc"), 3);
    assert_eq!(cur(&m, "num_device_free"), 1);
    assert_eq!(cur(&m, "num_sync_all_streams"), 1);
}

fn oom_of(m: &mut Model, n: u64) -> String {
    match m.malloc(n, 0) {
        Err(AllocError::OutOfMemory(o)) => o.message(),
        other => panic!("expected OOM, got {other:?}"),
    }
}

#[test]
fn oom_message_reports_the_segment_size_in_pytorch_words() {
    let mut m = fresh_with("", 0);
    let msg = oom_of(&mut m, 1);
    assert!(msg.starts_with("CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 0 bytes of which 0 bytes is free."), "{msg}");
    assert!(oom_of(&mut m, 5 * MIB).contains("Tried to allocate 20.00 MiB."));
    assert!(oom_of(&mut m, 11 * MIB).contains("Tried to allocate 12.00 MiB."));
    assert!(msg.contains("to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"));
    assert_eq!(cur(&m, "num_ooms"), 3);
    assert_eq!(cur(&m, "num_alloc_retries"), 3);
    let ooms: Vec<_> = m.trace().filter(|e| e.action == TraceAction::Oom).collect();
    assert_eq!(ooms.len(), 3);
    assert_eq!(ooms[0].size, 512, "the oom entry holds the rounded request");
}

#[test]
fn oom_reports_reserved_but_unallocated_after_release() {
    let mut m = fresh_with("", 100 * MIB);
    let _a = ok(&mut m, 30 * MIB);
    let b = ok(&mut m, 30 * MIB);
    let _c = ok(&mut m, 6 * MIB);
    m.free(b).expect("known");
    // 30 MiB is cached, 20 MiB of the device is free: 70 MiB cannot fit even
    // after the retry path released the cached 30 MiB segment (50 MiB free).
    let msg = oom_of(&mut m, 70 * MIB);
    assert!(msg.contains("Tried to allocate 70.00 MiB."), "{msg}");
    assert!(msg.contains("of which 50.00 MiB is free"), "{msg}");
    assert!(msg.contains("Of the allocated memory 36.00 MiB is allocated by PyTorch, and 14.00 MiB is reserved by PyTorch but unallocated."), "{msg}");
}

#[test]
fn pytorch_test_out_of_memory_huge_request() {
    let mut m = fresh_with("", 80 * GIB);
    let msg = oom_of(
        &mut m,
        1024u64.pow(3) * 800_000_000 / 1024 / 1024 / 1024 * GIB,
    );
    assert!(msg.contains("Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of"));
    assert_eq!(
        m.malloc(1 << 60, 0),
        Err(AllocError::MoreThanOneExabyte),
        "≥ 1 EB is refused before anything else"
    );
    assert_eq!(
        AllocError::MoreThanOneExabyte.to_string(),
        "CUDA out of memory. Tried to allocate more than 1EB memory."
    );
}

#[test]
fn pytorch_test_memory_stats_active_bytes() {
    let mut m = fresh();
    let before = cur(&m, "active_bytes.all.current");
    let p = ok(&mut m, 256 * 4);
    assert_eq!(cur(&m, "active_bytes.all.current"), before + 1024);
    assert_eq!(cur(&m, "active_bytes.all.freed"), 0);
    free(&mut m, p);
    m.empty_cache();
    assert_eq!(cur(&m, "active_bytes.all.current"), before);
    assert_eq!(cur(&m, "active_bytes.all.freed"), 1024);
    let peak = cur(&m, "active_bytes.all.peak");
    m.reset_peak_stats();
    assert_eq!(
        cur(&m, "active_bytes.all.peak"),
        cur(&m, "active_bytes.all.current")
    );
    assert!(peak >= 1024);
}

#[test]
fn pytorch_test_out_of_memory_retry_after_del() {
    let total = 1000 * MIB;
    let mut m = fresh_with("", total);
    let a = ok(&mut m, total / 2 + MIB);
    assert!(
        m.malloc(total / 2 + MIB, 0).is_err(),
        "twice half the GPU does not fit"
    );
    free(&mut m, a);
    ok(&mut m, total / 2 + MIB);
}

#[test]
fn pytorch_test_set_per_process_memory_fraction() {
    // A capacity that is not a multiple of 2 MiB, like real GPUs'.
    let total = 85_031_714_816;
    let mut m = fresh_with("", total);
    m.set_memory_fraction(0.5).expect("valid fraction");
    assert!((m.memory_fraction() - 0.5).abs() < 1e-9);
    let fits = (total as f64 * 0.499) as u64;
    let p = ok(&mut m, fits);
    free(&mut m, p);
    let msg = oom_of(&mut m, (total as f64 * 0.5) as u64);
    assert!(msg.contains("out of memory"));
    let allowed = vramtop::alloc::format_size((total as f64 * 0.5) as u64);
    assert!(msg.contains(&format!("{allowed} allowed; ")), "{msg}");
    assert!(m.set_memory_fraction(1.5).is_err());
    assert!(m.set_memory_fraction(-0.1).is_err());
    m.set_memory_fraction(0.0).expect("0 is valid");
    assert_eq!(m.memory_fraction(), 0.0);
}

#[test]
fn pytorch_test_allocator_settings_rounding() {
    let mut m = fresh();
    let before = cur(&m, "active_bytes.all.allocated");
    ok(&mut m, 84 * MIB);
    assert_eq!(
        cur(&m, "active_bytes.all.allocated") - before,
        84 * MIB as i64
    );

    let mut m = fresh_with("roundup_power2_divisions:4", 80 * GIB);
    let req_before = cur(&m, "requested_bytes.all.allocated");
    ok(&mut m, 84 * MIB);
    assert_eq!(cur(&m, "active_bytes.all.allocated"), 96 * MIB as i64);
    assert_eq!(
        cur(&m, "requested_bytes.all.allocated") - req_before,
        84 * MIB as i64
    );

    m.set_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
        .expect("valid");
    let before = cur(&m, "active_bytes.all.allocated");
    ok(&mut m, 84 * MIB);
    assert_eq!(
        cur(&m, "active_bytes.all.allocated") - before,
        84 * MIB as i64
    );

    m.set_settings("release_lock_on_cudamalloc:True")
        .expect("valid");
    let before = cur(&m, "active_bytes.all.allocated");
    ok(&mut m, 84 * MIB);
    assert_eq!(
        cur(&m, "active_bytes.all.allocated") - before,
        84 * MIB as i64
    );
    assert!(m.set_settings("foo:1").is_err());
}

#[test]
fn pytorch_test_raw_alloc_requested_bytes_exact() {
    let mut m = fresh();
    ok(&mut m, MIB);
    assert_eq!(cur(&m, "requested_bytes.all.allocated"), MIB as i64);
}

#[test]
fn pytorch_test_memory_snapshot_tiles_one_segment_with_512_byte_tensors() {
    let mut m = fresh();
    let ptrs: Vec<u64> = (0..1000)
        .map(|_| m.malloc(128 * 4, 0).expect("fits"))
        .collect();
    let layout = m.layout();
    assert_eq!(layout.len(), 1);
    assert!(ptrs.windows(2).all(|w| w[1] == w[0] + 512));
    let x = ok(&mut m, 311 * 411 * 4);
    let seg = m
        .layout()
        .into_iter()
        .find(|s| s.blocks.iter().any(|b| b.address == x))
        .expect("x is in the layout");
    assert!(seg.blocks.iter().any(|b| b.requested_size == 311 * 411 * 4));
    free(&mut m, x);
    for p in ptrs {
        free(&mut m, p);
    }
    m.empty_cache();
    let last = m.trace().last().expect("trace recorded").action;
    assert!(matches!(
        last,
        TraceAction::SegmentFree | TraceAction::SegmentUnmap
    ));
}

#[test]
fn record_stream_defers_the_free_until_the_stream_completes() {
    let mut m = fresh();
    let x = m.malloc(4 * MIB, 0).expect("fits");
    m.record_stream(x, 7).expect("known");
    m.free(x).expect("known");
    assert_eq!(cur(&m, "allocated_bytes.all.current"), 0);
    assert_eq!(cur(&m, "active_bytes.all.current"), 4 * MIB as i64);
    let state = m.layout()[0].blocks[0].state;
    assert_eq!(state, BlockState::ActivePendingFree);
    let actions: Vec<_> = m.trace().map(|e| e.action).collect();
    assert!(actions.contains(&TraceAction::FreeRequested));
    assert!(!actions.contains(&TraceAction::FreeCompleted));
    m.check_invariants().expect("invariants");

    // Not complete yet: a malloc does not free it.
    m.malloc(512, 0).expect("fits");
    assert_eq!(cur(&m, "active_bytes.large_pool.current"), 4 * MIB as i64);
    m.complete_stream_work(7);
    m.malloc(512, 0).expect("fits");
    assert_eq!(cur(&m, "active_bytes.large_pool.current"), 0);
    assert!(
        m.trace()
            .any(|e| e.action == TraceAction::FreeCompleted && e.addr == x)
    );
    m.check_invariants().expect("invariants");
}

#[test]
fn empty_cache_synchronises_pending_frees_first() {
    let mut m = fresh();
    let x = m.malloc(4 * MIB, 0).expect("fits");
    m.record_stream(x, 3).expect("known");
    m.record_stream(x, 3).expect("recording twice adds one use");
    m.record_stream(x, 0).expect("own stream ignored");
    m.free(x).expect("known");
    m.empty_cache();
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 0);
    assert_eq!(cur(&m, "num_sync_all_streams"), 1);
    m.check_invariants().expect("invariants");
}

#[test]
fn expandable_segments_vectors() {
    let mut m = fresh_with("expandable_segments:True", 80 * GIB);
    let a = ok(&mut m, 1);
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 2 * MIB as i64);
    assert_eq!(cur(&m, "segment.all.current"), 0);
    assert_eq!(cur(&m, "num_device_alloc"), 1);
    let b = ok(&mut m, MIB + 1);
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 22 * MIB as i64);
    free(&mut m, a);
    free(&mut m, b);
    m.empty_cache();
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 0);
    assert_eq!(
        cur(&m, "num_device_free"),
        2,
        "one unmap call per mapped range"
    );

    let mut m = fresh_with("expandable_segments:True", 80 * GIB);
    ok(&mut m, 30 * MIB);
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 40 * MIB as i64);
    let layout = m.layout();
    assert_eq!(layout.len(), 1);
    assert!(layout[0].is_expandable);
    assert_eq!(
        layout_sizes(&m),
        vec![vec![
            (30 * MIB, BlockState::ActiveAllocated),
            (10 * MIB, BlockState::Inactive)
        ]]
    );
    assert_eq!(
        cur(&m, "inactive_split.all.current"),
        0,
        "expandable blocks are excluded"
    );
    let maps: Vec<_> = m
        .trace()
        .filter(|e| e.action == TraceAction::SegmentMap)
        .collect();
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].size, 40 * MIB);
}

#[test]
fn expandable_segment_grows_in_place_instead_of_new_segments() {
    let mut m = fresh_with("expandable_segments:True", 80 * GIB);
    let a = ok(&mut m, 30 * MIB);
    let b = ok(&mut m, 30 * MIB);
    assert_eq!(
        b,
        a + 30 * MIB,
        "the second tensor follows the first in one VA range"
    );
    assert_eq!(m.layout().len(), 1);
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 60 * MIB as i64);
    free(&mut m, a);
    m.empty_cache();
    // The first 20 MiB page is entirely free and gets unmapped; the rest stays.
    let layout = m.layout();
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 40 * MIB as i64);
    assert_eq!(layout.len(), 1, "one contiguous mapped range remains");
    assert!(
        m.trace()
            .any(|e| e.action == TraceAction::SegmentUnmap && e.addr == a && e.size == 20 * MIB)
    );
    free(&mut m, b);
    m.empty_cache();
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 0);
    assert!(m.layout().is_empty());
}

#[test]
fn expandable_segment_grows_into_cached_pages_without_a_retry() {
    // 100 MiB device: a 60 MiB tensor is freed, then 80 MiB is wanted.
    let run = |settings: &str| {
        let mut m = fresh_with(settings, 100 * MIB);
        let a = m.malloc(60 * MIB, 0).expect("fits");
        m.free(a).expect("known");
        let b = m.malloc(80 * MIB, 0).expect("fits one way or another");
        m.check_invariants().expect("invariants");
        (
            b == a,
            cur(&m, "num_alloc_retries"),
            cur(&m, "reserved_bytes.all.current"),
        )
    };
    // Plain segments: cudaMalloc(80 MiB) fails, the cache is released, retry.
    assert_eq!(run(""), (true, 1, 80 * MIB as i64));
    // Expandable: one more 20 MiB page is mapped after the cached 60 MiB.
    assert_eq!(run("expandable_segments:True"), (true, 0, 80 * MIB as i64));
}

#[test]
fn garbage_collection_releases_old_cached_blocks_under_a_fraction() {
    let mut m = fresh_with("garbage_collection_threshold:0.5", 1000 * MIB);
    m.set_memory_fraction(0.5).expect("valid");
    // allowed 500 MiB; GC kicks in above 250 MiB reserved.
    let a = ok(&mut m, 200 * MIB);
    free(&mut m, a);
    let _b = ok(&mut m, 100 * MIB);
    // reserved 300 MiB > 250: the next miss collects the 200 MiB block.
    let _c = ok(&mut m, 100 * MIB);
    assert_eq!(cur(&m, "reserved_bytes.all.current"), 200 * MIB as i64);
    assert_eq!(
        cur(&m, "num_sync_all_streams"),
        0,
        "GC does not synchronise"
    );
}

#[test]
fn private_pool_allocations_are_segregated_and_released_with_the_pool() {
    let mut m = fresh();
    m.begin_allocate_to_pool((1, 0), None).expect("new pool");
    let g = ok(&mut m, 4 * MIB);
    m.end_allocate_to_pool((1, 0)).expect("capturing");
    let layout = m.layout();
    assert_eq!(layout[0].segment_pool_id, (1, 0));
    free(&mut m, g);
    // A default-pool allocation does not reuse the private pool's block.
    let d = ok(&mut m, 4 * MIB);
    assert_ne!(d, g);
    m.empty_cache();
    assert_eq!(
        m.layout().len(),
        2,
        "the private pool is still in use by its graph"
    );
    m.release_pool((1, 0)).expect("known pool");
    m.empty_cache();
    assert_eq!(m.layout().len(), 1);
    assert!(m.malloc(KIB, 0).is_ok());
}

#[test]
fn free_of_unknown_pointer_is_an_error_and_null_is_a_no_op() {
    let mut m = fresh();
    assert_eq!(m.free(0), Ok(()));
    assert_eq!(m.free(0x1234), Err(AllocError::InvalidPointer(0x1234)));
    assert_eq!(m.malloc(0, 0), Ok(0));
    assert_eq!(cur(&m, "allocation.all.allocated"), 0);
}
