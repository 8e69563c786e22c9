//! Writes a large synthetic snapshot made by the allocator model.
//!
//! ```text
//! cargo run --release --example make-snapshot -- --size 1GB OUT.pickle
//! cargo run --release --example make-snapshot -- --size 100MB --stacks 8000 --seed 7 OUT.pickle
//! ```
//!
//! The file is the model's state and trace after a long training-like
//! workload ([`vramtop::snapshot::synth::large`]) in PyTorch's pickle layout,
//! so `vramtop replay OUT.pickle` is a FULL MATCH and `vramtop open` shows
//! the figures the model had. `--size` takes bytes with an optional suffix
//! (kB, MB, GB: powers of 1000; KiB, MiB, GiB: powers of 1024); the result
//! lands within a few percent of it. `--one-stream` keeps every call on the
//! compute stream, for replayers that model one stream only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use vramtop::snapshot::synth::{LargeShape, write_large_file};

const USAGE: &str = "usage: make-snapshot [--size SIZE] [--stacks N] [--layers N] [--seed N] [--one-stream] OUT\n\
    SIZE: bytes, or with kB/MB/GB (1000s) or KiB/MiB/GiB (1024s); default 100MB";

/// `"1GB"` → 10^9, `"512MiB"` → 2^29, `"1234"` → 1234.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * scale;
    (1.0..1e13).contains(&bytes).then_some(bytes as u64)
}

fn main() -> ExitCode {
    let mut size: u64 = 100_000_000;
    let mut stacks = None;
    let mut layers = None;
    let mut seed = None;
    let mut one_stream = false;
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value =
            |parse: &dyn Fn(&str) -> Option<u64>| args.next().as_deref().and_then(parse);
        let number = |s: &str| s.parse::<u64>().ok();
        let ok = match arg.as_str() {
            "--size" => value(&parse_size).map(|v| size = v).is_some(),
            "--stacks" => value(&number).map(|v| stacks = Some(v)).is_some(),
            "--layers" => value(&number).map(|v| layers = Some(v)).is_some(),
            "--seed" => value(&number).map(|v| seed = Some(v)).is_some(),
            "--one-stream" => {
                one_stream = true;
                true
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            path if !path.starts_with('-') && out.is_none() => {
                out = Some(PathBuf::from(path));
                true
            }
            _ => false,
        };
        if !ok {
            eprintln!("make-snapshot: bad argument {arg:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let Some(out) = out else {
        eprintln!("make-snapshot: no output file\n{USAGE}");
        return ExitCode::from(2);
    };
    let mut shape = LargeShape::about_bytes(size);
    if let Some(n) = stacks {
        shape.stacks = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = layers {
        shape.layers = usize::try_from(n).unwrap_or(usize::MAX).clamp(1, 1_000);
    }
    if let Some(n) = seed {
        shape.seed = n;
    }
    shape.one_stream = one_stream;
    let start = Instant::now();
    match write_large_file(&shape, &out) {
        Ok(file) => {
            println!(
                "wrote {}: {} bytes, {} trace entries, {} segments, {} distinct stacks in {:.1} s",
                out.display(),
                file.bytes,
                file.trace_entries,
                file.segments,
                file.distinct_stacks,
                start.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}
