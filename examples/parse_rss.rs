//! Peak memory of reading a large snapshot.
//!
//! ```text
//! cargo run --release --example parse_rss -- generate /tmp/big.pickle 1024   # ~1024 MiB
//! cargo run --release --example parse_rss -- parse /tmp/big.pickle
//! cargo run --release --example parse_rss -- staged /tmp/big.pickle
//! ```
//!
//! `generate` writes a realistic synthetic snapshot
//! ([`vramtop::snapshot::synth::large`], PyTorch's layout: a new frames list
//! per trace entry); `parse` reads it in a fresh process (so the generator's
//! memory does not count) and prints the time, MB/s and the peak resident
//! set (`VmHWM` from `/proc/self/status`) against the file size; `staged`
//! reads it in two stages and prints when the segments stage arrived too.

use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use vramtop::snapshot::synth::{LargeShape, large};
use vramtop::snapshot::{
    WriteOptions, read_snapshot_file_staged, read_snapshot_file_with_progress, write_snapshot_with,
};

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The heap as the vramtop binary sets it, so the figures are its own.
    vramtop::shell::heap::tune();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["generate", path, mib] => {
            let bytes = mib.parse::<u64>()? << 20;
            let snapshot = large(&LargeShape::about_bytes(bytes));
            let file = std::fs::File::create(path)?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            write_snapshot_with(
                &snapshot,
                &mut out,
                &WriteOptions {
                    fresh_frame_lists: true,
                },
            )?;
            drop(out);
            let len = std::fs::metadata(path)?.len();
            println!(
                "wrote {path}: {len} bytes, {} trace entries, {} segments",
                snapshot.device_traces[0].len(),
                snapshot.segments.len()
            );
        }
        ["parse", path] => {
            let len = std::fs::metadata(path)?.len();
            let progress = AtomicU64::new(0);
            let start = Instant::now();
            let snapshot = read_snapshot_file_with_progress(Path::new(path), &progress)?;
            let seconds = start.elapsed().as_secs_f64();
            let hwm = vm_hwm_kib().unwrap_or(0) * 1024;
            let entries: usize = snapshot.device_traces.iter().map(Vec::len).sum();
            println!(
                "parsed {path}: {len} bytes, {entries} trace entries in {seconds:.2} s = {:.0} MB/s; \
                 peak RSS (VmHWM) {} MiB = {:.2} x the file",
                len as f64 / 1e6 / seconds,
                hwm >> 20,
                hwm as f64 / len as f64
            );
            // The process exits now: let it go as the binary does, not
            // with a drop that walks every entry (the comparison times the
            // whole process).
            vramtop::cli::leave_to_exit(snapshot);
        }
        ["staged", path] => {
            let len = std::fs::metadata(path)?.len();
            let progress = AtomicU64::new(0);
            let start = Instant::now();
            let mut stage = None;
            let snapshot = read_snapshot_file_staged(Path::new(path), &progress, |s| {
                stage = Some((start.elapsed().as_secs_f64(), s.segments.len()));
            })?;
            let seconds = start.elapsed().as_secs_f64();
            let hwm = vm_hwm_kib().unwrap_or(0) * 1024;
            match stage {
                Some((at, segments)) => {
                    println!(
                        "segments stage of {path}: {segments} segments after {:.1} ms",
                        at * 1e3
                    )
                }
                None => println!("{path} has no segments stage"),
            }
            let entries: usize = snapshot.device_traces.iter().map(Vec::len).sum();
            println!(
                "complete: {len} bytes, {entries} trace entries in {seconds:.2} s; \
                 peak RSS (VmHWM) {} MiB = {:.2} x the file",
                hwm >> 20,
                hwm as f64 / len as f64
            );
        }
        _ => {
            eprintln!("usage: parse_rss generate FILE MIB | parse_rss parse|staged FILE");
            std::process::exit(2);
        }
    }
    Ok(())
}
