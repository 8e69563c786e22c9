//! Property tests: random operation sequences under random settings keep the
//! allocator model's layout and counters consistent.

use proptest::prelude::*;
use vramtop::alloc::{AllocatorConfig, CachingAllocator, DeviceMemory, InMemoryDevice};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    /// log2 of the size (fractional), and the stream.
    Malloc(f64, u64),
    /// Index into the live list.
    Free(usize),
    /// Free with a recorded use on another stream.
    FreeAfterUseOn(usize, u64),
    /// The given stream's queued work completes.
    CompleteStream(u64),
    EmptyCache,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0.0f64..28.0, 0u64..2).prop_map(|(l, s)| Op::Malloc(l, s)),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 2u64..4).prop_map(|(i, s)| Op::FreeAfterUseOn(i, s)),
        1 => (2u64..4).prop_map(Op::CompleteStream),
        1 => Just(Op::EmptyCache),
    ]
}

fn settings() -> impl Strategy<Value = (String, Option<f64>)> {
    (
        any::<bool>(),
        prop_oneof![Just(None), (20u64..400).prop_map(Some)],
        prop_oneof![Just(0u64), Just(2), Just(4), Just(8)],
        prop_oneof![Just(None), (0.1f64..0.9).prop_map(Some)],
        prop_oneof![Just(None), (0.3f64..1.0).prop_map(Some)],
    )
        .prop_map(|(expandable, max_split, divisions, gc, fraction)| {
            let mut parts = vec![format!(
                "expandable_segments:{}",
                if expandable { "True" } else { "False" }
            )];
            if let Some(m) = max_split {
                parts.push(format!("max_split_size_mb:{m}"));
            }
            if divisions > 0 {
                parts.push(format!("roundup_power2_divisions:{divisions}"));
            }
            if let Some(g) = gc {
                parts.push(format!("garbage_collection_threshold:{g:.2}"));
            }
            (parts.join(","), fraction)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_layout_and_counters_consistent(
        (conf, fraction) in settings(),
        capacity_mib in 64u64..2048,
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let capacity = capacity_mib * MIB;
        let config = AllocatorConfig::parse(&conf).expect("generated settings are valid");
        let mut m = CachingAllocator::new(InMemoryDevice::new(capacity), 0, config);
        if let Some(f) = fraction {
            m.set_memory_fraction(f).expect("valid fraction");
        }
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Malloc(log2, stream) => {
                    let size = 2f64.powf(log2) as u64;
                    match m.malloc(size, stream) {
                        Ok(p) => {
                            prop_assert!(p != 0);
                            live.push((p, size));
                        }
                        Err(e) => prop_assert!(e.as_oom().is_some(), "only OOM may fail: {e}"),
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let (p, _) = live.swap_remove(i % live.len());
                    m.free(p).expect("live pointer");
                }
                Op::FreeAfterUseOn(i, s) if !live.is_empty() => {
                    let (p, _) = live.swap_remove(i % live.len());
                    m.record_stream(p, s).expect("live pointer");
                    m.free(p).expect("live pointer");
                }
                Op::CompleteStream(s) => m.complete_stream_work(s),
                Op::EmptyCache => m.empty_cache(),
                _ => {}
            }
            if let Err(why) = m.check_invariants() {
                prop_assert!(false, "invariant broken: {why}");
            }
            let allocated = m.memory_allocated();
            let reserved = m.memory_reserved();
            prop_assert!(allocated <= reserved, "allocated {allocated} > reserved {reserved}");
            prop_assert!(reserved <= capacity, "reserved {reserved} > capacity {capacity}");
            prop_assert_eq!(m.device().used_by_allocator(), reserved);
            if let Some(max) = m.allowed_memory_maximum() {
                // PyTorch checks the fraction against the segment size, but an
                // expandable segment maps whole 20 MiB pages: it may overshoot
                // by less than one page (faithful, see docs/allocator.md).
                let slack = if m.config().expandable_segments { 20 * MIB } else { 0 };
                prop_assert!(reserved <= max + slack, "reserved {reserved} beyond the fraction {max}");
            }
        }
        // Everything the client holds is at least its request.
        let by_addr: std::collections::HashMap<u64, u64> = live.iter().copied().collect();
        for a in m.live_allocations() {
            prop_assert!(a.size >= by_addr[&a.address]);
        }
        for (p, _) in live.drain(..) {
            m.free(p).expect("live pointer");
        }
        m.empty_cache();
        prop_assert_eq!(m.memory_reserved(), 0);
        prop_assert_eq!(m.memory_allocated(), 0);
        prop_assert!(m.layout().is_empty());
        prop_assert_eq!(m.device().mem_get_info().free, capacity);
        m.check_invariants().map_err(TestCaseError::fail)?;
    }
}
