//! The cost of rendering `/metrics`.
//!
//! - `serve_render_8_gpus_4_procs`: the text exposition of one sample of
//!   eight simulated GPUs with four training processes each (driver process
//!   rows plus 32 allocator views), as `vramtop serve` renders it once per
//!   sample. Scrapes themselves only copy the rendered body.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use vramtop::app::state::AllocatorView;
use vramtop::device::Telemetry;
use vramtop::device::sim::{SimCluster, SimConfig};
use vramtop::serve::metrics::{AllocatorFigures, MetricsInput, render};

fn render_8x4(c: &mut Criterion) {
    let cluster = SimCluster::new(SimConfig {
        gpus: 8,
        training_processes: 32,
        ..SimConfig::default()
    });
    // Let the trainers start and allocate (simulated ms).
    cluster.advance(5_000);
    let readings = cluster
        .telemetry()
        .sample()
        .expect("the simulation samples");
    let views: Vec<(u32, AllocatorView)> = cluster
        .trainers()
        .into_iter()
        .map(|t| {
            (
                t.gpu,
                AllocatorView::new(format!("pid {}", t.pid), Some(t.pid), t.stats, t.layout),
            )
        })
        .collect();
    assert_eq!(views.len(), 32);
    let allocators: Vec<AllocatorFigures<'_>> = views
        .iter()
        .map(|(gpu, v)| AllocatorFigures {
            gpu: *gpu,
            pid: v.pid,
            stats: &v.stats,
            fragmentation: &v.fragmentation,
        })
        .collect();
    let input = MetricsInput {
        version: env!("CARGO_PKG_VERSION"),
        backend: "sim",
        readings: &readings,
        allocators: &allocators,
        samples_total: 1_000,
        scrape_errors_total: 0,
        last_sample_unix_s: Some(1.7e9),
    };
    let body = render(&input);
    eprintln!(
        "serve_render_8_gpus_4_procs: body of {} bytes, {} lines",
        body.len(),
        body.lines().count()
    );
    c.bench_function("serve_render_8_gpus_4_procs", |b| {
        b.iter(|| black_box(render(black_box(&input))))
    });
}

criterion_group!(benches, render_8x4);
criterion_main!(benches);
