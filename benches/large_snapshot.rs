//! A 1 GB snapshot: read, ready to view, and the peak memory it takes.
//!
//! ```text
//! cargo bench --bench large_snapshot                 # 1 GB, 5 rounds
//! VRAMTOP_BENCH_LARGE_BYTES=200000000 VRAMTOP_BENCH_ROUNDS=7 cargo bench --bench large_snapshot
//! VRAMTOP_BENCH_LARGE_FILE=target/bench-data/model-1GB.pickle cargo bench --bench large_snapshot
//! ```
//!
//! The file is generated once by the allocator model
//! ([`vramtop::snapshot::synth::cached_large_file`]: a valid, replayable
//! training-like trace with thousands of distinct tracebacks) and cached
//! under `target/bench-data/`. Each round runs in a fresh child process (this
//! binary again, with `--child FILE`) so that the peak resident set
//! (`VmHWM` of `/proc/self/status`) is the reading's alone, not the
//! generator's or an earlier round's. A round measures the reader
//! ([`read_snapshot_file`], "read") and then the viewer's state built on the
//! result ([`ViewerState::new`], "ready": what `vramtop open FILE` has
//! before it draws), then one frame of the viewer at 120×40 ("frame": what
//! every key press costs before the screen changes; the median of
//! [`FRAMES`] draws). Prints the minimum and the median of the rounds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use vramtop::app::keymap::Keymap;
use vramtop::app::viewer::ViewerState;
use vramtop::snapshot::read_snapshot_file;
use vramtop::snapshot::synth::cached_large_file;
use vramtop::ui::{Theme, render_viewer};

const DEFAULT_BYTES: u64 = 1_000_000_000;
/// Draws per round for the frame figure.
const FRAMES: usize = 5;
const DEFAULT_ROUNDS: usize = 5;

fn vm_hwm_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// One round, in this (fresh) process: prints
/// `read_s ready_s peak_bytes frame_s`.
fn child(path: &Path) -> Result<(), String> {
    let start = Instant::now();
    let snapshot = read_snapshot_file(path).map_err(|e| e.to_string())?;
    let read = start.elapsed().as_secs_f64();
    let viewer = ViewerState::new(path.display().to_string(), snapshot);
    let ready = start.elapsed().as_secs_f64();
    let peak = vm_hwm_bytes().unwrap_or(0);
    let area = Rect::new(0, 0, 120, 40);
    let mut frames: Vec<f64> = (0..FRAMES)
        .map(|_| {
            let mut buf = Buffer::empty(area);
            let drawn = Instant::now();
            render_viewer(
                area,
                &mut buf,
                &viewer,
                &Keymap::default(),
                &Theme::colored(),
            );
            std::hint::black_box(&buf);
            drawn.elapsed().as_secs_f64()
        })
        .collect();
    let (_, frame) = min_median(&mut frames);
    println!("{read} {ready} {peak} {frame}");
    Ok(())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (min, median) of `values` (not empty).
fn min_median(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[0], values[values.len() / 2])
}

fn main() {
    // The heap as the vramtop binary sets it, so the figures are its own.
    vramtop::shell::heap::tune();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let Some(path) = args.get(i + 1) else {
            eprintln!("--child needs a file");
            std::process::exit(2);
        };
        if let Err(e) = child(Path::new(path)) {
            eprintln!("cannot read {path}: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `cargo test --benches` runs bench binaries with `--test`: nothing to check here.
    if args.iter().any(|a| a == "--test") {
        return;
    }
    let bytes: u64 = env_or("VRAMTOP_BENCH_LARGE_BYTES", DEFAULT_BYTES);
    let rounds: usize = env_or("VRAMTOP_BENCH_ROUNDS", DEFAULT_ROUNDS).max(1);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let started = Instant::now();
    // A file made elsewhere (scripts/compare-peers.py's, by make-snapshot)
    // is used as it is.
    let given = std::env::var_os("VRAMTOP_BENCH_LARGE_FILE").map(PathBuf::from);
    let made = match given {
        Some(p) => Ok(p),
        None => cached_large_file(&dir, bytes),
    };
    let path = match made {
        Ok(p) => p,
        Err(e) => {
            eprintln!("note: cannot generate the large snapshot: {e}");
            return;
        }
    };
    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "large snapshot {} ({len} bytes), ready in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("note: cannot find this bench binary to run its rounds");
        return;
    };
    let (mut reads, mut readies, mut peaks, mut frames) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let output = match Command::new(&exe).arg("--child").arg(&path).output() {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                eprintln!(
                    "round {round} failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                return;
            }
            Err(e) => {
                eprintln!("round {round} did not start: {e}");
                return;
            }
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let figures: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let [read, ready, peak, frame] = figures[..] else {
            eprintln!("round {round}: unexpected output {text:?}");
            return;
        };
        eprintln!(
            "round {round}: read {read:.2} s, ready {ready:.2} s, peak RSS {:.0} MiB, frame {:.1} ms",
            peak / f64::from(1u32 << 20),
            frame * 1e3
        );
        reads.push(read);
        readies.push(ready);
        peaks.push(peak);
        frames.push(frame);
    }
    let (read_min, read_median) = min_median(&mut reads);
    let (ready_min, ready_median) = min_median(&mut readies);
    let (peak_min, peak_median) = min_median(&mut peaks);
    let (frame_min, frame_median) = min_median(&mut frames);
    let file = len.max(1) as f64;
    println!(
        "large_snapshot {len} B, {rounds} rounds (min / median):\n  \
         read   {read_min:.2} s / {read_median:.2} s = {:.0} MB/s at the median\n  \
         ready  {ready_min:.2} s / {ready_median:.2} s\n  \
         frame  {:.1} ms / {:.1} ms (the viewer drawn at 120x40)\n  \
         peak RSS {:.0} MiB / {:.0} MiB = {:.2}x / {:.2}x the file",
        file / 1e6 / read_median,
        frame_min * 1e3,
        frame_median * 1e3,
        peak_min / f64::from(1u32 << 20),
        peak_median / f64::from(1u32 << 20),
        peak_min / file,
        peak_median / file,
    );
}
