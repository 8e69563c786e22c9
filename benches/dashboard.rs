//! The dashboard's drawing cost and memory.
//!
//! - `render_full_frame_200x60`: one full frame of every pane into a 200×60
//!   test terminal, from a state with 60 samples of two simulated GPUs and a
//!   training process. Target: < 1 ms.
//! - `rss_after_10_simulated_minutes` (printed once): the dashboard's state
//!   fed 600 samples, one per simulated second, and a frame drawn after each;
//!   then this process's resident set size. Target: < 20 MB.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use vramtop::app::keymap::Keymap;
use vramtop::app::source::allocator_views;
use vramtop::app::state::{AppState, StatusState};
use vramtop::device::Telemetry;
use vramtop::device::sim::{SimCluster, SimConfig};
use vramtop::ui::{self, Theme};

fn fed_state(samples: u64) -> (AppState, SimCluster) {
    let cluster = SimCluster::new(SimConfig {
        gpus: 2,
        training_processes: 1,
        seed: 7,
        ..SimConfig::default()
    });
    let mut state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    let mut telemetry = cluster.telemetry();
    for i in 0..samples {
        cluster.advance(1000);
        let readings = telemetry.sample().unwrap_or_default();
        state.apply_sample(i * 1000, readings, allocator_views(Some(&cluster)));
    }
    (state, cluster)
}

fn render(c: &mut Criterion) {
    let (state, _cluster) = fed_state(60);
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let Ok(mut terminal) = Terminal::new(TestBackend::new(200, 60));
    c.bench_function("render_full_frame_200x60", |b| {
        b.iter(|| {
            terminal
                .draw(|f| ui::draw(f, black_box(&state), &keymap, &theme))
                .map(|_| ())
        })
    });
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rss(_c: &mut Criterion) {
    let before = rss_kib();
    let (mut state, cluster) = fed_state(0);
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let Ok(mut terminal) = Terminal::new(TestBackend::new(120, 40));
    let mut telemetry = cluster.telemetry();
    for i in 0..600u64 {
        cluster.advance(1000);
        let readings = telemetry.sample().unwrap_or_default();
        let views: BTreeMap<_, _> = allocator_views(Some(&cluster));
        state.apply_sample(i * 1000, readings, views);
        let _ = terminal.draw(|f| ui::draw(f, &state, &keymap, &theme));
    }
    let after = rss_kib();
    match (before, after) {
        (Some(b), Some(a)) => println!(
            "rss_after_10_simulated_minutes: {:.1} MB resident ({:+.1} MB over the bench harness \
             before the run), {} timeline points per GPU",
            a as f64 / 1024.0,
            (a as f64 - b as f64) / 1024.0,
            state.gpus.first().map_or(0, |g| g.history.points.len())
        ),
        _ => println!("rss_after_10_simulated_minutes: /proc/self/status unreadable"),
    }
}

criterion_group!(benches, render, rss);
criterion_main!(benches);
