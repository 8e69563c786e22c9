//! The command line: argument parsing (clap) and the headless commands.

pub mod demo;
pub mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// vramtop: GPU memory made understandable.
///
/// Explains why nvidia-smi, memory_allocated() and memory_reserved() disagree,
/// with a faithful model of PyTorch's CUDA caching allocator.
#[derive(Debug, Parser)]
#[command(name = "vramtop", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a PyTorch memory snapshot's trace through the allocator model
    /// and check it event by event against what PyTorch recorded.
    Replay {
        /// A `torch.cuda.memory._dump_snapshot()` pickle (or a pickled
        /// `torch.cuda.memory_snapshot()` segment list).
        file: PathBuf,
        /// Verify: check the invariants and replay every device's trace
        /// (the default, and for now the only mode).
        #[arg(long, default_value_t = true)]
        verify: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Walk through the caching allocator step by step on a simulated 80 GiB
    /// GPU: why reserved stays up after `del`, and what empty_cache frees.
    Demo {
        /// Print each step as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Exit code for bad input (unreadable file, not a snapshot), as clap uses
/// for bad arguments.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when a verification ran but did not match.
pub const EXIT_MISMATCH: u8 = 1;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> color_eyre::Result<ExitCode> {
    match cli.command {
        Some(Command::Replay { file, json, .. }) => replay::run(&file, json),
        Some(Command::Demo { json }) => demo::run(json),
        None => demo::run(false),
    }
}
