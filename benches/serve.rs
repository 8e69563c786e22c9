//! The cost of rendering `/metrics`, and of a scrape over loopback.
//!
//! - `serve_render_8_gpus_4_procs`: the text exposition of one sample of
//!   eight simulated GPUs with four training processes each (driver process
//!   rows plus 32 allocator views), as `vramtop serve` renders it once per
//!   sample. Scrapes themselves only copy the rendered body.
//! - `serve_scrape_kept_alive_8_gpus`: one scrape of that body on a
//!   kept-alive connection to the HTTP server `vramtop serve` runs (request
//!   written, whole answer read), as Prometheus scrapes: the time is the
//!   round trip, its inverse the requests per second of one scraper.
//! - `serve_scrape_fresh_connection_8_gpus`: the same on a new connection
//!   per scrape (connect, request, answer, close).
//!
//! The load and abuse figures of the whole process (a client that never
//! reads, slowloris, huge headers, 200 scrapers) are measured by
//! `scripts/serve-load.py`.

use std::hint::black_box;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use tokio::sync::watch;
use vramtop::app::state::AllocatorView;
use vramtop::device::Telemetry;
use vramtop::device::sim::{SimCluster, SimConfig};
use vramtop::serve::http::{self, Limits};
use vramtop::serve::metrics::{AllocatorFigures, MetricsInput, render};

/// Calls `f` with the input of one sample of eight simulated GPUs with
/// four training processes each.
fn with_input_8x4<R>(f: impl FnOnce(&MetricsInput<'_>) -> R) -> R {
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
            unknown: &v.unknown,
            ooms_seen: None,
        })
        .collect();
    f(&MetricsInput {
        version: env!("CARGO_PKG_VERSION"),
        backend: "sim",
        readings: &readings,
        allocators: &allocators,
        samples_total: 1_000,
        scrape_errors_total: 0,
        last_sample_unix_s: Some(1.7e9),
        last_seen: &std::collections::BTreeMap::new(),
    })
}

fn render_8x4(c: &mut Criterion) {
    with_input_8x4(|input| {
        let body = render(input);
        eprintln!(
            "serve_render_8_gpus_4_procs: body of {} bytes, {} lines",
            body.len(),
            body.lines().count()
        );
        c.bench_function("serve_render_8_gpus_4_procs", |b| {
            b.iter(|| black_box(render(black_box(input))))
        });
    });
}

/// Reads one answer with a `Content-Length` off `stream`; returns its body
/// length.
fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).expect("the answer arrives");
        assert!(n > 0, "closed mid-answer");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..end]).expect("an ASCII head");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Content-Length");
        if buf.len() >= end + 4 + length {
            return length;
        }
    }
}

fn scrapes(c: &mut Criterion) {
    let body = with_input_8x4(render);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let listener =
        http::bind(SocketAddr::from(([127, 0, 0, 1], 0)), runtime.handle()).expect("binds");
    let addr = listener.local_addr().expect("an address");
    let (_publish, metrics) = watch::channel(Bytes::from(body.clone()));
    runtime.spawn(http::serve(listener, metrics, Limits::default()));

    let mut buf = Vec::new();
    let mut kept = TcpStream::connect(addr).expect("connects");
    c.bench_function("serve_scrape_kept_alive_8_gpus", |b| {
        b.iter(|| {
            kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
                .expect("request sent");
            assert_eq!(read_answer(&mut kept, &mut buf), body.len());
        })
    });
    let mut group = c.benchmark_group("fresh");
    // Each scrape leaves a socket in TIME_WAIT: a short run stays far from
    // running out of loopback ports.
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group.bench_function("serve_scrape_fresh_connection_8_gpus", |b| {
        b.iter(|| {
            let mut s = TcpStream::connect(addr).expect("connects");
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                .expect("request sent");
            assert_eq!(read_answer(&mut s, &mut buf), body.len());
        })
    });
    group.finish();
}

criterion_group!(benches, render_8x4, scrapes);
criterion_main!(benches);
