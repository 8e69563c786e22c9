//! Time of a what-if replay (`replay FILE --alloc-conf …`) on the largest
//! shared trace, JasperSolt (5,803 entries, mid-run start): the original's
//! replica plus one or three what-if models in lockstep.
//!
//! The input lives outside the repository (`../shared/snapshots`); without
//! it the benchmark prints a note and measures nothing.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vramtop::alloc::AllocatorConfig;
use vramtop::snapshot::read_snapshot_file;
use vramtop::snapshot::whatif::{WhatIfSetting, whatif};

const FILE: &str = "JasperSolt_EoR_NN_snapshot.pickle";

fn setting(conf: &str) -> WhatIfSetting {
    WhatIfSetting {
        conf: conf.to_string(),
        config: AllocatorConfig::parse(conf).expect("valid conf"),
    }
}

fn bench_whatif(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/snapshots")
        .join(FILE);
    let snapshot = match read_snapshot_file(&path) {
        Ok(s) => s,
        Err(err) => {
            eprintln!("note: skipping {FILE}: {err}");
            return;
        }
    };
    let entries: usize = snapshot.device_traces.iter().map(Vec::len).sum();
    let one = [setting("expandable_segments:True")];
    let three = [
        setting("expandable_segments:True"),
        setting("max_split_size_mb:20"),
        setting("roundup_power2_divisions:4"),
    ];
    let mut group = c.benchmark_group("whatif_jaspersolt");
    group.throughput(Throughput::Elements(entries as u64));
    group.bench_function("one_conf_unlimited", |b| {
        b.iter(|| whatif(black_box(&snapshot), &one, None))
    });
    group.bench_function("three_confs_capacity_100MiB", |b| {
        b.iter(|| whatif(black_box(&snapshot), &three, Some(100 << 20)))
    });
    group.finish();
}

criterion_group!(benches, bench_whatif);
criterion_main!(benches);
