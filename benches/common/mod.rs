//! Inputs shared by the benches. Each bench compiles this module on its own.

use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
use vramtop::snapshot::Snapshot;
use vramtop::snapshot::capture::snapshot_of;

const GIB: u64 = 1 << 30;

/// A long recorded trace of `events` events through the allocator model on
/// an 80 GiB device: 55 % allocations of log-uniform sizes (1 B to 64 MiB)
/// while fewer than `max_live` are live, frees of a random live one
/// otherwise; the same every run (xorshift from a fixed seed).
pub fn random_trace(events: usize, max_live: usize) -> Snapshot {
    let mut m = CachingAllocator::new(InMemoryDevice::new(80 * GIB), 0, AllocatorConfig::default());
    m.record_history(Some(events));
    let mut state = 0x9e37_79b9_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut live: Vec<u64> = Vec::new();
    let mut t = 0u64;
    while m.trace_len() < events {
        t += 1;
        m.set_time_us(t);
        if (next() % 100 < 55 && live.len() < max_live) || live.is_empty() {
            let log2 = (next() % 2600) as f64 / 100.0;
            if let Ok(p) = m.malloc(2f64.powf(log2) as u64, 0) {
                live.push(p);
            }
        } else {
            let p = live.swap_remove((next() as usize) % live.len());
            let _ = m.free(p);
        }
    }
    snapshot_of(&m, 0)
}
