//! Cost of reading a live probe: parsing one `stats` line (the 122 keys of
//! `memory_stats()`, once a second per device) and one `segments` line of a
//! big process (1000 segments, 3 blocks each, every 5 s), through the line
//! reader as the registry does.

use std::hint::black_box;
use std::io::BufReader;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramtop::alloc::DeviceStats;
use vramtop::probe::protocol::{LineReader, parse_line};

fn stats_line() -> String {
    let stats = DeviceStats::default().memory_stats();
    let body =
        serde_json::json!({"v": 1, "type": "stats", "time": 1.0, "device": 0, "stats": stats});
    format!("{body}\n")
}

fn segments_line(count: u64) -> String {
    let mib = 1u64 << 20;
    let segments: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            serde_json::json!({
                "address": 0x7f00_0000_0000u64 + i * 20 * mib, "total_size": 20 * mib, "stream": 0,
                "segment_type": "large", "allocated_size": 12 * mib, "active_size": 12 * mib,
                "requested_size": 12 * mib - 256, "is_expandable": false,
                "blocks": [[8 * mib, 8 * mib - 256, "active_allocated"],
                           [4 * mib, 4 * mib, "active_allocated"], [8 * mib, 0, "inactive"]]
            })
        })
        .collect();
    let body = serde_json::json!({"v": 1, "type": "segments", "time": 1.0, "device": 0, "segments": segments});
    format!("{body}\n")
}

fn read_and_parse(bytes: &[u8]) -> usize {
    let mut reader = LineReader::new(BufReader::with_capacity(64 * 1024, bytes));
    let mut n = 0;
    while let Ok(Some(Ok((_, line)))) = reader.next_line() {
        if parse_line(&line).is_ok() {
            n += 1;
        }
    }
    n
}

fn bench_probe(c: &mut Criterion) {
    for (name, line) in [
        ("stats_122_keys", stats_line()),
        ("segments_1000", segments_line(1000)),
    ] {
        let mut group = c.benchmark_group("probe_line");
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| read_and_parse(black_box(line.as_bytes())))
        });
        group.finish();
    }
}

criterion_group!(benches, bench_probe);
criterion_main!(benches);
