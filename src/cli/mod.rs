//! The command line: argument parsing (clap) and the headless commands.

pub mod check;
pub mod config;
pub mod dashboard;
pub mod demo;
pub mod diff;
pub mod doctor;
pub mod open;
pub mod replay;
pub mod scenario;
pub mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::alloc::parse_size;
use crate::device::factory::BackendChoice;
use crate::device::sim::SimConfig;

/// vramtop: GPU memory made understandable.
///
/// Explains why nvidia-smi, memory_allocated() and memory_reserved() disagree,
/// with a faithful model of PyTorch's CUDA caching allocator.
#[derive(Debug, Parser)]
#[command(name = "vramtop", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub display: DisplayArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// How the dashboard samples and draws.
#[derive(Debug, Clone, Args)]
pub struct DisplayArgs {
    /// Sampling interval (e.g. 1s, 500ms, 2s).
    #[arg(long, default_value = "1s", global = true, value_parser = duration_arg)]
    pub interval: u64,
    /// Print one full sample (GPUs, processes, allocator figures) and exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: print it as JSON (the only format for now).
    #[arg(long, requires = "once")]
    pub json: bool,
    /// No colours (also when the NO_COLOR environment variable is set).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// Plain ASCII charts and bars, for terminals without braille or block glyphs.
    #[arg(long, global = true)]
    pub ascii: bool,
    /// A TOML config file (default: $XDG_CONFIG_HOME/vramtop/config.toml when it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Write the log here (default: $XDG_STATE_HOME/vramtop/vramtop.log); never to the terminal.
    #[arg(long, global = true)]
    pub log_file: Option<PathBuf>,
    /// The most the stress panel may hold reserved (e.g. 2GiB): a request
    /// above it is refused. Default: 50 % of the free memory on a real GPU,
    /// no cap on the simulated GPU.
    #[arg(long, value_parser = size_arg)]
    pub stress_cap: Option<u64>,
    /// Test hook: panic on purpose after this long (checks terminal restoration).
    #[arg(long, hide = true, value_parser = duration_arg)]
    pub debug_panic_after: Option<u64>,
}

/// Parses a duration argument (milliseconds).
pub fn duration_arg(text: &str) -> Result<u64, String> {
    match crate::alloc::parse_duration_ms(text) {
        Some(ms) if ms >= 10 => Ok(ms),
        Some(_) => Err(format!("'{text}' is too short: the least is 10ms")),
        None => Err(format!(
            "'{text}' is not a duration: write e.g. 500ms, 1s, 10m"
        )),
    }
}

/// Where GPU facts come from.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Telemetry backend: auto = NVML if it initialises, else the simulated GPU.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto, global = true)]
    pub backend: BackendChoice,
    /// Number of simulated GPUs.
    #[arg(long, default_value_t = 1, global = true,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub sim_gpus: u32,
    /// Memory of each simulated GPU (e.g. 80GiB, 24G, 141GB).
    #[arg(long, default_value = "80GiB", global = true, value_parser = size_arg)]
    pub sim_memory: u64,
    /// Seed of the simulation (same seed, same run).
    #[arg(long, default_value_t = 42, global = true)]
    pub sim_seed: u64,
    /// Simulated training processes (spread over the simulated GPUs), so the
    /// dashboard has a living allocator to show.
    #[arg(long, default_value_t = 1, global = true)]
    pub sim_training: u32,
}

impl DeviceArgs {
    pub fn sim_config(&self) -> SimConfig {
        SimConfig {
            gpus: self.sim_gpus as usize,
            memory_per_gpu: self.sim_memory,
            seed: self.sim_seed,
            training_processes: self.sim_training as usize,
            ..SimConfig::default()
        }
    }
}

/// Parses a size argument, with a message that shows the accepted forms.
pub fn size_arg(text: &str) -> Result<u64, String> {
    match parse_size(text) {
        Some(0) | None => Err(format!(
            "'{text}' is not a size: write e.g. 512, 37MiB, 1.5GiB, 80G (binary) or 80GB (decimal)"
        )),
        Some(n) => Ok(n),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two PyTorch memory snapshots (e.g. N steps apart): reserved,
    /// allocated and segments before, after and the change; the segments
    /// only in BEFORE / only in AFTER (by address and size, as
    /// `_memory_viz.py compare`); the live bytes by allocation site (new,
    /// grown, shrunk, gone), by change. Exit 2 when a file cannot be read
    /// or the files are of different devices.
    Diff {
        /// The earlier snapshot.
        before: PathBuf,
        /// The later snapshot.
        after: PathBuf,
        /// Print the comparison as JSON (every segment and site).
        #[arg(long)]
        json: bool,
        /// Sites and segments listed in the text output per section.
        #[arg(long, value_name = "N", default_value_t = diff::DEFAULT_LINES)]
        top: usize,
    },
    /// Replay a PyTorch memory snapshot's trace through the allocator model
    /// and check it event by event against what PyTorch recorded.
    Replay {
        /// A `torch.cuda.memory._dump_snapshot()` pickle (or a pickled
        /// `torch.cuda.memory_snapshot()` segment list).
        file: PathBuf,
        /// Verify: check the invariants and replay every device's trace
        /// (the default; --alloc-conf or --capacity run a what-if replay).
        #[arg(long, default_value_t = true)]
        verify: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// What-if: replay the trace's allocations under these
        /// PYTORCH_CUDA_ALLOC_CONF settings (parsed from PyTorch's defaults,
        /// like a fresh process with that variable); repeat for a comparison
        /// table. See docs/whatif.md.
        #[arg(long = "alloc-conf", value_name = "CONF")]
        alloc_conf: Vec<String>,
        /// What-if: the bytes cudaMalloc may take (e.g. 24GiB); unlimited
        /// when absent. Alone, it replays the recorded settings.
        #[arg(long, value_name = "SIZE", value_parser = size_arg)]
        capacity: Option<u64>,
    },
    /// Open a PyTorch memory snapshot in the interactive viewer: scrub
    /// through its trace (←/→, PgUp/PgDn, Home/End, o/n/e jump to OOMs,
    /// segment_allocs, empty_cache points), select a block, Enter shows the
    /// stack of its allocation. With --summary: print per device and in
    /// total the segments, reserved/allocated bytes, block states, segment
    /// sizes, `_memory_viz.py segsum` figures and fragmentation, then the
    /// top allocation sites at the end and at the peak of allocated bytes,
    /// and the file's allocator settings.
    Open {
        /// A `torch.cuda.memory._dump_snapshot()` pickle (or a pickled
        /// `torch.cuda.memory_snapshot()` segment list).
        file: PathBuf,
        /// Print the summary instead of opening the viewer.
        #[arg(long)]
        summary: bool,
        /// With --summary: print it as JSON.
        #[arg(long)]
        json: bool,
        /// With --summary: how many allocation sites to list at the end
        /// and at the peak of allocated bytes.
        #[arg(long, value_name = "N", default_value_t = crate::snapshot::summary::DEFAULT_TOP_SITES)]
        top: usize,
        /// Test hook: read the file on the loader thread behind the
        /// progress screen whatever its size.
        #[arg(long, hide = true)]
        debug_background_load: bool,
    },
    /// Append one JSON line per sample to FILE (flushed per line) until
    /// --duration passes or vramtop is stopped.
    Record {
        /// The JSON-lines file to append to.
        file: PathBuf,
        /// Stop after this long (e.g. 10m); default: until stopped.
        #[arg(long, value_parser = duration_arg)]
        duration: Option<u64>,
    },
    /// Walk through the caching allocator step by step on a simulated 80 GiB
    /// GPU: why reserved stays up after `del`, and what empty_cache frees
    /// (printed, no dashboard).
    Demo {
        /// Print each step as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the demo's allocator as a PyTorch memory snapshot
        /// pickle (segments and the whole trace; opens in `vramtop open`,
        /// `vramtop replay` and PyTorch's memory_viz).
        #[arg(long, value_name = "FILE")]
        save_snapshot: Option<PathBuf>,
    },
    /// Explain what was found (driver, NVML, CUDA, NVRTC, GPUs), why a
    /// fallback happened, and what to install. Always exits 0.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Self-test the memory path: the allocator model on real CUDA memory (or
    /// the simulated GPU), fill/verify kernels, driver-used vs reserved,
    /// empty_cache. Exits 1 if a step fails.
    Check {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// The GPU to test.
        #[arg(long, default_value_t = 0)]
        device: u32,
        /// The most to allocate at once; on a real GPU also at most 5 % of
        /// its free memory.
        #[arg(long, default_value = "512MiB", value_parser = size_arg)]
        budget: u64,
    },
    /// Run a scripted scenario of allocations and frees (a built-in name or a
    /// .toml file) and print per-step allocated, reserved, driver used,
    /// segments, fragmentation and the outcome.
    Scenario {
        /// A built-in scenario (see --list) or the path of a scenario .toml file.
        name: Option<String>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// List the built-in scenarios and exit.
        #[arg(long)]
        list: bool,
        /// Also write each variant's allocator at the end of the run as a
        /// PyTorch memory snapshot pickle (FILE; with several variants
        /// FILE's name gets `-VARIANT` before its extension).
        #[arg(long, value_name = "FILE")]
        save_snapshot: Option<PathBuf>,
    },
    /// Run headless and serve the GPUs' telemetry and every visible
    /// allocator's figures at http://ADDR/metrics in the Prometheus text
    /// format (sampled every --interval). Stops on SIGINT/SIGTERM.
    Serve {
        /// The address to listen on; port 0 picks a free port (the address
        /// is printed on stderr).
        #[arg(long, default_value = crate::serve::DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// Accept a --listen address that is not loopback (the metrics
        /// name processes and GPUs: expose them on purpose only).
        #[arg(long)]
        allow_remote: bool,
    },
}

/// Writes command output to stdout. A closed pipe (`vramtop … | head`) is
/// not an error worth a panic or a message: the reader has what it wanted.
pub fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Exit code for bad input (unreadable file, not a snapshot), as clap uses
/// for bad arguments.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when a verification ran but did not match.
pub const EXIT_MISMATCH: u8 = 1;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> color_eyre::Result<ExitCode> {
    match cli.command {
        Some(Command::Diff {
            before,
            after,
            json,
            top,
        }) => diff::run(&before, &after, json, top),
        Some(Command::Record { file, duration }) => {
            dashboard::record(&cli.device, &cli.display, &file, duration)
        }
        Some(Command::Replay {
            file,
            json,
            alloc_conf,
            capacity,
            ..
        }) if !alloc_conf.is_empty() || capacity.is_some() => {
            replay::run_whatif(&file, &alloc_conf, capacity, json)
        }
        Some(Command::Replay { file, json, .. }) => replay::run(&file, json),
        Some(Command::Open {
            file,
            summary,
            json,
            top,
            debug_background_load,
        }) => open::run(
            &file,
            summary,
            json,
            top,
            debug_background_load,
            &cli.display,
        ),
        Some(Command::Demo {
            json,
            save_snapshot,
        }) => demo::run(json, save_snapshot.as_deref()),
        Some(Command::Doctor { json }) => doctor::run(&cli.device, json),
        Some(Command::Check {
            json,
            device,
            budget,
        }) => check::run(&cli.device, device, budget, json),
        Some(Command::Scenario {
            name,
            json,
            list,
            save_snapshot,
        }) => scenario::run(name.as_deref(), json, list, save_snapshot.as_deref()),
        Some(Command::Serve {
            listen,
            allow_remote,
        }) => serve::run(&cli.device, &cli.display, listen, allow_remote),
        None if cli.display.once => dashboard::once(&cli.device),
        None => dashboard::run(&cli.device, &cli.display),
    }
}
