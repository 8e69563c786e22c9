//! What the dashboard costs a terminal, measured through a pty (`script`):
//!
//! - startup to first frame: from spawning the binary to the first output
//!   that holds the panes' titles (target < 100 ms);
//! - bytes written per second at a 1 s interval with nothing changing (the
//!   simulation idle: no training process), over 10 s after start-up
//!   (target < 3 KB/s).
//!
//! Uses the release binary at target/release/vramtop (build it first:
//! `cargo build --release`); skips with a note when it or `script` is missing.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn main() {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/vramtop");
    if !bin.exists() {
        eprintln!("terminal_io: skipping, build {} first", bin.display());
        return;
    }
    let secs: u64 = std::env::var("VRAMTOP_BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let cmd = format!(
        "stty cols 120 rows 40; {} --backend sim --sim-training 0 --interval 1s",
        bin.display()
    );
    let t0 = Instant::now();
    let Ok(mut child) = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        eprintln!("terminal_io: skipping, `script` is not available");
        return;
    };
    let Some(mut out) = child.stdout.take() else {
        return;
    };
    let received: Arc<Mutex<Vec<(Duration, usize, bool)>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        let mut seen = String::new();
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            let framed = seen.contains("GPUs") && seen.contains("Timeline");
            if let Ok(mut v) = sink.lock() {
                v.push((t0.elapsed(), n, framed));
            }
        }
    });
    let settle = Duration::from_secs(3);
    std::thread::sleep(settle + Duration::from_secs(secs));
    if let Some(stdin) = child.stdin.as_mut() {
        let _ = stdin.write_all(b"q");
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let v = received.lock().map(|v| v.clone()).unwrap_or_default();
    let first_frame = v.iter().find(|(_, _, framed)| *framed).map(|(t, _, _)| *t);
    let idle_bytes: usize = v
        .iter()
        .filter(|(t, _, _)| *t >= settle && *t < settle + Duration::from_secs(secs))
        .map(|(_, n, _)| n)
        .sum();
    match first_frame {
        Some(t) => println!(
            "terminal_io: startup to first frame {:.1} ms (includes the shell and `stty`)",
            t.as_secs_f64() * 1000.0
        ),
        None => println!("terminal_io: no frame seen"),
    }
    println!(
        "terminal_io: {idle_bytes} bytes over {secs} s idle at 1 Hz = {:.0} B/s",
        idle_bytes as f64 / secs as f64
    );
}
