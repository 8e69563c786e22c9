//! The command line: argument parsing (clap) and the headless commands.
//!
//! Every command takes only the options it uses: the option groups below
//! are flattened into the commands that read them (none is global but
//! `--log-file`, which every command honours), so an option a command
//! cannot use is clap's usage error (exit 2).

pub mod check;
pub mod config;
pub mod dashboard;
pub mod demo;
pub mod diff;
pub mod doctor;
pub mod help;
pub mod open;
pub mod recording;
pub mod replay;
pub mod sample_text;
pub mod scenario;
pub mod serve;
pub mod snapshot;
pub mod text;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::alloc::QuantityError;
use crate::alloc::sizing::is_bare_number;
use crate::device::factory::BackendChoice;
use crate::device::sim::SimConfig;
use crate::quote::cut;
use crate::snapshot::peak::At;
use crate::snapshot::sites::Grouping;

/// vramtop: GPU memory made understandable.
///
/// Explains why nvidia-smi, memory_allocated() and memory_reserved() disagree,
/// with a faithful model of PyTorch's CUDA caching allocator.
#[derive(Debug, Parser)]
#[command(
    name = "vramtop",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    after_help = format!("{ATTACH_HELP}\n\n{EXIT_STATUS_HELP}")
)]
pub struct Cli {
    /// The dashboard's options (`vramtop` without a command).
    #[command(flatten)]
    pub dashboard: DashboardArgs,
    /// Write the log to FILE, never to the terminal.
    ///
    /// Default: $XDG_STATE_HOME/vramtop/vramtop.log.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        help_heading = "Global options"
    )]
    pub log_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// `vramtop` without a command: the live dashboard or one `--once` sample.
#[derive(Debug, Clone, Args)]
pub struct DashboardArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub display: DisplayArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print one full sample (GPUs, processes, allocator figures) as text and exit.
    #[arg(long, help_heading = "Dashboard")]
    pub once: bool,
    /// With --once: print it as JSON (fields: docs/cli.md).
    ///
    /// Without it, --once prints the sample as text in 80 columns (ASCII
    /// with --ascii, which --json refuses).
    #[arg(
        long,
        requires = "once",
        conflicts_with = "ascii",
        help_heading = "Dashboard"
    )]
    pub json: bool,
    /// The most the stress panel may hold reserved (e.g. 2GiB).
    ///
    /// A request above it is refused. Default: 50% of the free memory on a
    /// real GPU, no cap on the simulated GPU.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true, help_heading = "Dashboard")]
    pub stress_cap: Option<u64>,
}

/// How often telemetry is sampled (the dashboard, `record`, `serve`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Sampling interval (e.g. 1s, 500ms, 2s; 10ms to 1h).
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = interval_arg, allow_hyphen_values = true)]
    pub interval: u64,
}

/// How things are drawn on the terminal (the dashboard, the viewer).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Display")]
pub struct DisplayArgs {
    /// No colours (also when the NO_COLOR environment variable is set).
    #[arg(long)]
    pub no_color: bool,
    /// Plain ASCII charts and bars, for terminals without braille or block glyphs.
    #[arg(long)]
    pub ascii: bool,
}

/// `--ascii` of the commands that print a text report and no screen
/// (`diff`, `replay`, `scenario`, `demo`): the report in the ASCII
/// stand-ins the screen uses ([`emit_text`]). Flattened only into commands
/// that have a `--json`, which it conflicts with: JSON has no text to
/// change.
#[derive(Debug, Clone, Copy, Args)]
#[command(next_help_heading = "Display")]
pub struct AsciiArgs {
    /// ASCII punctuation in the text.
    ///
    /// "-" for "−", "—" and "·", "~" for "…", "x" for "×": one character
    /// for one, so the columns stay.
    #[arg(long, conflicts_with = "json")]
    pub ascii: bool,
}

/// The config file, read by the commands whose options it sets.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Config file")]
pub struct ConfigArgs {
    /// A TOML config file of defaults for this command's options.
    ///
    /// Default: $XDG_CONFIG_HOME/vramtop/config.toml, or
    /// ~/.config/vramtop/config.toml without XDG_CONFIG_HOME, when it exists
    /// (docs/cli.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Parses a duration argument (milliseconds). A bare number is refused: the
/// unit is part of the value.
pub fn duration_arg(text: &str) -> Result<u64, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "'{}' is negative: a duration is at least 10ms",
            cut(text.trim())
        ));
    }
    if is_bare_number(text) {
        return Err(no_unit(text, &["s", "ms"], duration_with_unit));
    }
    duration_with_unit(text)
}

/// Parses `--interval` (and the config file's `interval`): a duration
/// from 10ms to [`MAX_INTERVAL_MS`], refused past it as a duration past
/// the parser's own limit is: a sampler that ticks once a day would leave
/// the dashboard still, its timeline empty at every zoom.
pub fn interval_arg(text: &str) -> Result<u64, String> {
    if text.trim_start().starts_with('-') {
        return duration_arg(text);
    }
    if is_bare_number(text) {
        return Err(no_unit(text, &["s", "ms"], interval_with_unit));
    }
    interval_with_unit(text)
}

/// [`interval_arg`] of a text that is not a bare number.
fn interval_with_unit(text: &str) -> Result<u64, String> {
    // Checked on the value as written, as the least is: rounded first,
    // 1h plus a fraction of a millisecond would pass.
    match crate::alloc::duration_ms_exact(text) {
        Ok(ms) if ms > MAX_INTERVAL_MS as f64 => Err(interval_too_long(text)),
        Err(QuantityError::TooLarge) => Err(interval_too_long(text)),
        _ => duration_with_unit(text),
    }
}

fn interval_too_long(text: &str) -> String {
    format!(
        "'{}' is too long: the most is {}h",
        cut(text),
        MAX_INTERVAL_MS / 3_600_000
    )
}

/// The longest sampling interval (milliseconds): the timeline's widest
/// window, 1 hour, so that it still draws a line between two samples.
pub const MAX_INTERVAL_MS: u64 =
    crate::app::state::ZOOM_WINDOWS_S[crate::app::state::ZOOM_WINDOWS_S.len() - 1] * 1000;

/// What a bare number is told: the `units` it could be written in, those
/// of them that `parse` takes only (a suggestion is never refused in
/// turn); where it takes none, why the number is refused in the unit
/// `parse` gives a bare number (the limit, not a unit that would not help).
fn no_unit(text: &str, units: &[&str], parse: fn(&str) -> Result<u64, String>) -> String {
    let t = text.trim();
    let taken: Vec<String> = units
        .iter()
        .map(|unit| format!("{t}{unit}"))
        .filter(|with_unit| parse(with_unit).is_ok())
        .map(|with_unit| cut(&with_unit))
        .collect();
    crate::alloc::sizing::no_unit_message(&cut(t), &taken)
        .unwrap_or_else(|| parse(t).err().unwrap_or_default())
}

/// What a bare number of a size is told ([`crate::alloc::sizing::bare_size_message`]):
/// the units `parse` takes it in, up to 1 TiB; where it takes none, why
/// the number is refused in the unit `parse` gives a bare number (bytes).
fn no_size_unit(text: &str, parse: fn(&str) -> Result<u64, String>) -> String {
    use crate::alloc::sizing::{bare_size_message, bare_size_suggestions};
    let t = text.trim();
    let suggestions = bare_size_suggestions(t, |with_unit| parse(with_unit).is_ok());
    bare_size_message(&cut(t), &suggestions, cut)
        .unwrap_or_else(|| parse(t).err().unwrap_or_default())
}

/// [`duration_arg`] of a text that is not a bare number (one that is is
/// read as seconds, as the one parser reads it).
fn duration_with_unit(text: &str) -> Result<u64, String> {
    // The least is checked on the value as written: rounded first, 9.5ms
    // would pass as 10. A value of at least 10 rounds to at least 10.
    match crate::alloc::duration_ms_exact(text) {
        Ok(ms) if ms >= MIN_DURATION_MS as f64 => Ok(ms.round() as u64),
        Ok(_) => Err(format!(
            "'{}' is too short: the least is {MIN_DURATION_MS}ms",
            cut(text)
        )),
        Err(QuantityError::TooLarge) => Err(format!(
            "'{}' is too long: the most is {}h",
            cut(text),
            MAX_DURATION_HOURS
        )),
        Err(QuantityError::Malformed) => Err(format!(
            "'{}' is not a duration: write e.g. 500ms, 1s, 10m",
            cut(text)
        )),
    }
}

/// The shortest duration a duration option takes (milliseconds).
const MIN_DURATION_MS: u64 = 10;

/// The longest duration [`crate::alloc::parse_duration_ms`] takes, in
/// whole hours.
const MAX_DURATION_HOURS: u64 = crate::alloc::sizing::MAX_PARSED_DURATION_MS / 3_600_000;

/// The most simulated GPUs (`--sim-gpus`, `sim_gpus`).
pub const SIM_GPUS_MAX: u32 = 64;
/// The most simulated training processes (`--sim-training`, `sim_training`):
/// each keeps an allocator model of its own.
pub const SIM_TRAINING_MAX: u32 = 64;
/// The largest seed (`--sim-seed`, `sim_seed`): the largest TOML integer, so
/// the command line and the config file take the same seeds.
pub const SIM_SEED_MAX: u64 = i64::MAX as u64;
/// The most DataLoader workers per simulated training process
/// (`--sim-dataloader-workers`, `sim_dataloader_workers`).
pub const SIM_DATALOADER_WORKERS_MAX: u32 = 64;
/// The least memory of a simulated GPU (`--sim-memory`, `sim_memory`),
/// bytes: its CUDA context alone takes
/// [`crate::device::sim::DEFAULT_CONTEXT_OVERHEAD`].
pub const SIM_MEMORY_MIN: u64 = 1 << 30;

/// The most memory of a simulated GPU (`--sim-memory`), bytes: far above
/// any GPU made, low enough that every figure stays readable.
pub const SIM_MEMORY_MAX: u64 = 64 << 40;

/// Parses `--sim-memory`: a size from [`SIM_MEMORY_MIN`] to
/// [`SIM_MEMORY_MAX`].
pub fn sim_memory_arg(text: &str) -> Result<u64, String> {
    // The units a bare number is told are those a simulated GPU takes.
    if is_bare_number(text) {
        return Err(no_size_unit(text, sim_memory_with_unit));
    }
    sim_memory_with_unit(text)
}

/// [`sim_memory_arg`] of a text that is not a bare number.
fn sim_memory_with_unit(text: &str) -> Result<u64, String> {
    let bytes = size_with_unit(text)?;
    if bytes > SIM_MEMORY_MAX {
        return Err(format!(
            "'{}' is too large for a simulated GPU: the most is 64TiB",
            cut(text)
        ));
    }
    if bytes < SIM_MEMORY_MIN {
        return Err(format!(
            "'{}' is too small for a simulated GPU: the least is 1GiB (its CUDA context alone \
             takes {})",
            cut(text),
            crate::alloc::human_bytes(crate::device::sim::DEFAULT_CONTEXT_OVERHEAD)
        ));
    }
    Ok(bytes)
}

/// The simulated GPU's memory when none is given (`--sim-memory`).
pub const SIM_MEMORY_DEFAULT: &str = "80GiB";

/// Where GPU facts come from.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Telemetry")]
pub struct DeviceArgs {
    /// Telemetry backend: auto = NVML if it initialises, else the simulated GPU.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    #[command(flatten)]
    pub sim: SimArgs,
}

/// The simulated GPUs (`--backend sim`, or auto without NVML).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Simulated GPU")]
pub struct SimArgs {
    /// Number of simulated GPUs.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = sim_gpus_arg,
          allow_negative_numbers = true)]
    pub sim_gpus: u32,
    /// Memory of each simulated GPU (e.g. 80GiB, 24G, 141GB).
    #[arg(long, default_value = SIM_MEMORY_DEFAULT, value_name = "SIZE", value_parser = sim_memory_arg, allow_hyphen_values = true)]
    pub sim_memory: u64,
    /// Seed of the simulation (same seed, same run).
    #[arg(long, default_value_t = 42, value_name = "SEED",
          value_parser = seed_arg, allow_negative_numbers = true)]
    pub sim_seed: u64,
    /// Simulated training processes, spread over the simulated GPUs.
    ///
    /// They give the dashboard a living allocator to show.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = sim_training_arg,
          allow_negative_numbers = true)]
    pub sim_training: u32,
    /// DataLoader workers per simulated training process.
    ///
    /// Each worker that touched CUDA holds its own CUDA context (see the
    /// dataloader_workers scenario).
    #[arg(long, default_value_t = 0, value_name = "N",
          value_parser = sim_dataloader_workers_arg,
          allow_negative_numbers = true)]
    pub sim_dataloader_workers: u32,
}

impl DeviceArgs {
    pub fn sim_config(&self) -> SimConfig {
        SimConfig {
            gpus: self.sim.sim_gpus as usize,
            seed: self.sim.sim_seed,
            training_processes: self.sim.sim_training as usize,
            dataloader_workers: self.sim.sim_dataloader_workers as usize,
            ..SimConfig::default()
        }
        .with_memory(self.sim.sim_memory)
    }
}

/// Parses a count argument (how many lines or sites to list): 0 or more.
/// A negative number gets its own words, not the standard library's
/// "invalid digit found in string".
pub fn count_arg(text: &str) -> Result<usize, String> {
    let trimmed = unsigned_zero(text.trim());
    if trimmed.starts_with('-') {
        return Err(format!(
            "'{}' is negative: a count is 0 or more",
            cut(trimmed)
        ));
    }
    match trimmed.parse::<usize>() {
        Ok(n) => Ok(n),
        // Digits past what a count holds are a count too large, not "not
        // a count".
        Err(_) if crate::quote::is_digits(trimmed) => Err(crate::quote::not_in_range(
            trimmed,
            0,
            u64::try_from(usize::MAX).unwrap_or(u64::MAX),
        )),
        Err(_) => Err(format!(
            "'{}' is not a count: write a whole number, e.g. 10",
            cut(trimmed)
        )),
    }
}

/// A whole number in `min..=max` for a numeric flag or argument, its
/// errors naming the range as clap's ranged parsers do. The argument takes
/// `allow_negative_numbers`, so that "-1" reaches here instead of clap's
/// "unexpected argument '-1' found".
fn whole_in(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let trimmed = unsigned_zero(text.trim());
    let range = format!("{min}..={max}");
    if trimmed.starts_with('-') {
        return Err(format!(
            "'{}' is negative: write a whole number in {range}",
            cut(trimmed)
        ));
    }
    if !crate::quote::is_digits(trimmed) {
        return Err(format!(
            "'{}' is not a whole number: write one in {range}",
            cut(trimmed)
        ));
    }
    match trimmed.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(crate::quote::not_in_range(trimmed, min, max)),
    }
}

/// `-0` (or `-00`) as the zero it is, without its sign: not negative,
/// as clap's own ranged parsers (`--sim-gpus`) read it. Any other text as
/// it is.
fn unsigned_zero(text: &str) -> &str {
    match text.strip_prefix('-') {
        Some(rest) if !rest.is_empty() && rest.bytes().all(|b| b == b'0') => rest,
        _ => text,
    }
}

/// `--sim-gpus`: 1 to [`SIM_GPUS_MAX`]; any other whole number, however
/// long, is said with the range (clap's ranged parser said "number too
/// large to fit in target type" past `u32`).
pub fn sim_gpus_arg(text: &str) -> Result<u32, String> {
    small_count(text, 1, SIM_GPUS_MAX)
}

/// `--sim-training`: 0 to [`SIM_TRAINING_MAX`].
pub fn sim_training_arg(text: &str) -> Result<u32, String> {
    small_count(text, 0, SIM_TRAINING_MAX)
}

/// `--sim-dataloader-workers`: 0 to [`SIM_DATALOADER_WORKERS_MAX`].
pub fn sim_dataloader_workers_arg(text: &str) -> Result<u32, String> {
    small_count(text, 0, SIM_DATALOADER_WORKERS_MAX)
}

/// A whole number in `min..=max` that fits a `u32`.
fn small_count(text: &str, min: u32, max: u32) -> Result<u32, String> {
    let n = whole_in(text, u64::from(min), u64::from(max))?;
    u32::try_from(n).map_err(|_| crate::quote::not_in_range(text.trim(), min.into(), max.into()))
}

/// `--sim-seed`: 0 to [`SIM_SEED_MAX`].
pub fn seed_arg(text: &str) -> Result<u64, String> {
    whole_in(text, 0, SIM_SEED_MAX)
}

/// A GPU's index (`check --device`, `diff --device`) or a process id
/// (`snapshot PID`): any u32.
pub fn u32_arg(text: &str) -> Result<u32, String> {
    let n = whole_in(text, 0, u64::from(u32::MAX))?;
    u32::try_from(n).map_err(|_| crate::quote::not_in_range(text.trim(), 0, u32::MAX.into()))
}

/// Parses `serve --listen`: an IP address and a port. The standard
/// library's "invalid socket address syntax" said neither what is wrong
/// nor what to write.
pub fn listen_arg(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!(
            "'{}' is not an address and port: write an IP address and port, e.g. {} or \
             [::1]:9400",
            cut(text.trim()),
            crate::serve::DEFAULT_LISTEN
        )
    })
}

/// `--group`: how allocation sites are grouped, the viewer's groupings
/// (`g`) by the names it shows, spaces as dashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum GroupArg {
    /// The innermost Python frame outside PyTorch, the standard library
    /// and launchers (runpy, the probe): your line, or a library's that
    /// your code called (einops, diffusers; open --summary lists the
    /// callers)
    #[default]
    #[value(alias = "user_frame")]
    UserFrame,
    /// The innermost Python frame, torch's own included
    #[value(alias = "python_frame")]
    PythonFrame,
    /// The innermost frame with a source line, C++ included
    #[value(name = "file-line", alias = "file:line", alias = "file_line")]
    FileLine,
    /// The user frame's function, every line of it merged; a frame has
    /// only a file, a line and a name, so functions of one name in one
    /// file merge: every module's forward in model.py is one site
    Function,
    /// The whole cleaned stack, named after its user frame
    #[value(alias = "stack")]
    WholeStack,
}

impl GroupArg {
    pub fn grouping(self) -> Grouping {
        match self {
            GroupArg::UserFrame => Grouping::UserFrame,
            GroupArg::PythonFrame => Grouping::PythonFrame,
            GroupArg::FileLine => Grouping::FileLine,
            GroupArg::Function => Grouping::Function,
            GroupArg::WholeStack => Grouping::Stack,
        }
    }
}

/// Parses `--at`: an event number as the viewer shows it, a trace index
/// (`#N`), a word, or `mark:N`.
pub fn at_arg(text: &str) -> Result<At, String> {
    text.parse()
}

/// `open --at`: a moment of a snapshot's trace (which a recording reads
/// its own way: start, end, peak, oom, the N-th sample), or a time, which
/// only a recording has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAt {
    Moment(At),
    Time(crate::device::recording::RecordingTime),
}

impl OpenAt {
    pub fn moment(self) -> Option<At> {
        match self {
            OpenAt::Moment(at) => Some(at),
            OpenAt::Time(_) => None,
        }
    }

    pub fn time(self) -> Option<crate::device::recording::RecordingTime> {
        match self {
            OpenAt::Time(t) => Some(t),
            OpenAt::Moment(_) => None,
        }
    }
}

/// Parses `open --at`: a moment ([`at_arg`]) or a recording's time; the
/// moment's error, with what a recording takes, where it is neither.
pub fn open_at_arg(text: &str) -> Result<OpenAt, String> {
    use crate::device::recording::{TIME_FORMS, parse_time};
    // `+DURATION` is a recording's alone: its own error first, which
    // says what is wrong with the duration (a term without a unit, too
    // long), then what a snapshot's trace takes.
    if text.trim_start().starts_with('+') {
        return parse_time(text).map(OpenAt::Time).map_err(|why| {
            format!(
                "{why}; of a snapshot's trace: an event number or {}",
                crate::snapshot::peak::AT_FORMS
            )
        });
    }
    match at_arg(text) {
        Ok(at) => Ok(OpenAt::Moment(at)),
        Err(why) => parse_time(text)
            .map(OpenAt::Time)
            .map_err(|_| format!("{why}; of a recording: {TIME_FORMS}")),
    }
}

/// Parses a size argument, with a message that shows the accepted forms. A
/// bare number is refused: `24` could be bytes or GiB.
pub fn size_arg(text: &str) -> Result<u64, String> {
    if is_bare_number(text) {
        return Err(no_size_unit(text, size_with_unit));
    }
    size_with_unit(text)
}

/// [`size_arg`] of a text that is not a bare number (one that is is read
/// as bytes, as the one parser reads it).
fn size_with_unit(text: &str) -> Result<u64, String> {
    let quoted = cut(text.trim());
    crate::alloc::sizing::typed_size(text, crate::alloc::sizing::MAX_PARSED_SIZE)
        .map_err(|why| why.message(&quoted, crate::alloc::sizing::MAX_PARSED_SIZE_TEXT))
}

/// `replay --capacity`: a size, or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityArg {
    Bytes(u64),
    Unlimited,
}

/// [`CapacityArg`] of `text`: `unlimited` (any case), else [`size_arg`].
pub fn capacity_arg(text: &str) -> Result<CapacityArg, String> {
    if text.trim().eq_ignore_ascii_case("unlimited") {
        return Ok(CapacityArg::Unlimited);
    }
    size_arg(text).map(CapacityArg::Bytes)
}

/// The options of `open` that only its `--summary` takes (each is
/// `requires = "summary"` below; `--at` is the viewer's too).
pub const SUMMARY_ONLY_OPTIONS: [&str; 4] = ["--json", "--top", "--no-trace", "--group"];

/// The usage error of a summary-only option given without `--summary`
/// (`open FILE --top 3`), in place of clap's "the following required
/// arguments were not provided: --summary", which reads as if `open`
/// always needs `--summary`: the options of [`SUMMARY_ONLY_OPTIONS`] among
/// `args` (the command line's arguments), and what they apply to: of a
/// snapshot, the summary and not the viewer; of a `vramtop record` file
/// (which has no viewer), its summary, or snapshots only. `None` when
/// `args` has none of them.
pub fn summary_only_message(args: &[String]) -> Option<String> {
    // The file as `open` would read it, told by its content as `open`
    // tells it; standard input is not peeked (a usage error waits for
    // nothing).
    let recording = open_file(args).filter(|file| {
        file.as_os_str() != STDIN_ARG && recording::opened(file) == recording::Opened::Recording
    });
    match recording {
        Some(file) => recording_summary_only_message(args, &file),
        None => snapshot_summary_only_message(args),
    }
}

/// The options of [`SUMMARY_ONLY_OPTIONS`] typed in `args` (before a
/// `--`), in the table's order.
fn summary_only_given(args: &[String]) -> Vec<&'static str> {
    let typed: Vec<&String> = args.iter().take_while(|a| *a != "--").collect();
    SUMMARY_ONLY_OPTIONS
        .into_iter()
        .filter(|option| {
            typed.iter().any(|a| {
                a.strip_prefix(option)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
            })
        })
        .collect()
}

/// The FILE of an `open` command line refused for a summary-only option:
/// the command line parsed again with `--summary` added.
fn open_file(args: &[String]) -> Option<PathBuf> {
    let at = args
        .iter()
        .take_while(|a| *a != "--")
        .position(|a| a == "open")?;
    let mut with = vec!["vramtop".to_string()];
    with.extend_from_slice(&args[..=at]);
    with.push("--summary".to_string());
    with.extend_from_slice(&args[at + 1..]);
    match Cli::try_parse_from(with).ok()?.command? {
        Command::Open { file, .. } => Some(file),
        _ => None,
    }
}

/// `"--a"`, `"--a and --b"`, `"--a, --b and --c"`.
fn options_words(options: &[&str]) -> String {
    match options.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// [`summary_only_message`] of a `vramtop record` file, which has no
/// viewer: its `--at` prints a sample without `--summary`, `--top` and
/// `--json` are its summary's, `--no-trace` and `--group` a snapshot's
/// only (adding `--summary` would be refused in turn). Ends with the
/// command line to type where it can be shown and parses.
fn recording_summary_only_message(args: &[String], file: &std::path::Path) -> Option<String> {
    let given = summary_only_given(args);
    if given.is_empty() {
        return None;
    }
    let snapshot_only: Vec<&str> = given
        .iter()
        .copied()
        .filter(|o| matches!(*o, "--no-trace" | "--group"))
        .collect();
    let summary: Vec<&str> = given
        .iter()
        .copied()
        .filter(|o| !snapshot_only.contains(o))
        .collect();
    let name = input_name(file);
    let mut parts = Vec::new();
    if !snapshot_only.is_empty() {
        let (verb, them) = if snapshot_only.len() == 1 {
            ("is", "it")
        } else {
            ("are", "them")
        };
        parts.push(format!(
            "{} {verb} for snapshots: leave {them} out",
            options_words(&snapshot_only)
        ));
    }
    match summary.as_slice() {
        [] => {}
        ["--json"] => parts.push("--json prints its summary as JSON: add --summary".to_string()),
        _ => parts.push(format!(
            "{} {} to its summary: add --summary",
            options_words(&summary),
            if summary.len() == 1 {
                "applies"
            } else {
                "apply"
            }
        )),
    }
    let mut message = format!("{name} is a `vramtop record` file: {}", parts.join("; "));
    if let Some(line) = recording_command_line(args, file, &summary) {
        message.push_str(&format!(" ({line})"));
    }
    Some(message)
}

/// The command line that does what `args` asked of a recording: the
/// snapshot-only options (and their values) left out, `--summary` added
/// after `file` where a summary option stays or nothing else would be
/// printed (no `--at`). `None` where an argument cannot be shown whole
/// or the line would not parse.
fn recording_command_line(
    args: &[String],
    file: &std::path::Path,
    summary: &[&str],
) -> Option<String> {
    let at = args
        .iter()
        .take_while(|a| *a != "--")
        .position(|a| a == "open")?;
    let mut kept: Vec<&String> = Vec::new();
    let mut rest = args[at + 1..].iter();
    let mut after_separator = false;
    while let Some(a) = rest.next() {
        if !after_separator {
            if a == "--" {
                after_separator = true;
            } else if a == "--no-trace" || a.starts_with("--group=") {
                continue;
            } else if a == "--group" {
                rest.next();
                continue;
            }
        }
        kept.push(a);
    }
    let has_at = kept
        .iter()
        .take_while(|a| **a != "--")
        .any(|a| *a == "--at" || a.starts_with("--at="));
    let summary_flag = "--summary".to_string();
    if !summary.is_empty() || !has_at {
        // After the file as typed (`open r.jsonl --summary …`), or before
        // a `--` (after it, it would be a file's name).
        let typed = kept.iter().take_while(|a| **a != "--").count();
        let at_file = kept[..typed]
            .iter()
            .position(|a| std::path::Path::new(a.as_str()) == file)
            .map_or(typed, |i| i + 1);
        kept.insert(at_file, &summary_flag);
    }
    let mut line: Vec<&String> = vec![&args[at]];
    line.extend(kept);
    let showable = line.iter().all(|a| {
        a.chars().count() <= crate::quote::MAX_QUOTED_CHARS && !a.chars().any(char::is_control)
    });
    let argv = std::iter::once("vramtop").chain(line.iter().map(|a| a.as_str()));
    let parses = Cli::try_parse_from(argv).is_ok_and(|cli| cli.usage_problem().is_none());
    if !(showable && parses) {
        return None;
    }
    let words: Vec<String> = line
        .iter()
        .map(|a| crate::quote::shell_word(a).into_owned())
        .collect();
    Some(format!("vramtop {}", words.join(" ")))
}

/// [`summary_only_message`] of a snapshot (or of what is not known to
/// be a recording): the options are the summary's, not the viewer's.
fn snapshot_summary_only_message(args: &[String]) -> Option<String> {
    let given = summary_only_given(args);
    let (last, rest) = given.split_last()?;
    // JSON is no text: --json alone says what it prints.
    if rest.is_empty() && *last == "--json" {
        return Some(
            "--json prints the summary as JSON: add --summary (vramtop open FILE --summary \
             --json)"
                .to_string(),
        );
    }
    let (named, verb) = if rest.is_empty() {
        ((*last).to_string(), "applies")
    } else {
        (format!("{} and {last}", rest.join(", ")), "apply")
    };
    Some(format!(
        "{named} {verb} to the summary, not the viewer: add --summary \
         (vramtop open FILE --summary {last} …)"
    ))
}

/// The tip for options written before the command they were meant for
/// (`vramtop --no-color open x.pickle`), which clap refuses as "the
/// subcommand 'open' cannot be used with '--no-color'" (a command's
/// options come after it): `args` (the command line's arguments) with
/// those options moved after the command's name, where that command line
/// parses; else, where the command takes them all, where to write them;
/// else which of them the command does not take. So the tip never names
/// a command line that is refused in turn. `None` when no command is
/// named after an option.
pub fn misplaced_options_tip(args: &[String]) -> Option<String> {
    use clap::CommandFactory as _;
    let mut root = Cli::command();
    // Built, so that the global options (--log-file) are the commands' too.
    root.build();
    let typed = args.iter().take_while(|a| *a != "--");
    let at = typed
        .clone()
        .position(|a| !a.starts_with('-') && root.find_subcommand(a).is_some())?;
    let (before, after) = (&args[..at], &args[at + 1..]);
    let sub = root.find_subcommand(&args[at])?;
    let name = sub.get_name();
    let options: Vec<&str> = before
        .iter()
        .filter(|a| a.starts_with('-') && a.len() > 1)
        .map(|a| a.split_once('=').map_or(a.as_str(), |(option, _)| option))
        .collect();
    if options.is_empty() {
        return None;
    }
    let takes = |option: &str| {
        // `help` reads --no-color of its own (help::help_command_args).
        (name == "help" && option == "--no-color")
            || sub.get_arguments().any(|arg| {
                option
                    .strip_prefix("--")
                    .is_some_and(|long| arg.get_long() == Some(long))
                    || (option.len() == 2
                        && option
                            .strip_prefix('-')
                            .and_then(|short| short.chars().next())
                            .is_some_and(|short| arg.get_short() == Some(short)))
            })
    };
    let foreign: Vec<String> = options
        .iter()
        .filter(|option| !takes(option))
        .map(|option| cut(option))
        .collect();
    if !foreign.is_empty() {
        return Some(format!("'{name}' takes no {}", foreign.join(", ")));
    }
    let moved: Vec<&String> = std::iter::once(&args[at])
        .chain(before)
        .chain(after)
        .collect();
    // Shown as typed only where the whole of it can be: no argument cut
    // short or with a control character escaped.
    let showable = moved.iter().all(|a| {
        a.chars().count() <= crate::quote::MAX_QUOTED_CHARS && !a.chars().any(char::is_control)
    });
    let argv = std::iter::once("vramtop".to_string()).chain(moved.iter().map(|a| (*a).clone()));
    let parses = match Cli::try_parse_from(help::help_command_args(
        argv.map(std::ffi::OsString::from).collect(),
    )) {
        Ok(cli) => cli.usage_problem().is_none(),
        Err(e) => matches!(
            e.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        ),
    };
    if showable && parses {
        let words: Vec<String> = moved
            .iter()
            .map(|a| crate::quote::shell_word(a).into_owned())
            .collect();
        return Some(format!(
            "a command's options come after it: vramtop {}",
            words.join(" ")
        ));
    }
    let options: Vec<String> = options.iter().map(|option| cut(option)).collect();
    Some(format!(
        "a command's options come after it: write {} after '{name}'",
        options.join(", ")
    ))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two memory snapshots, or two moments of one's trace.
    ///
    /// Two PyTorch memory snapshots (e.g. N steps apart), or two moments of
    /// one snapshot's trace (`--at A --at B`): reserved, allocated and
    /// segments before, after and the change; the segments only in BEFORE /
    /// only in AFTER (by address and size, as `_memory_viz.py compare`);
    /// the live bytes by allocation site (new, grown, shrunk, gone), by
    /// change.
    ///
    /// Exit 2 when a file cannot be read, the files are of different
    /// devices (unless `--devices` says which to compare) or `--at` names
    /// no moment of the trace.
    Diff {
        /// The earlier snapshot (`-`: standard input).
        ///
        /// With --at, the one snapshot whose two moments are compared. A
        /// file named `-` is `./-`.
        before: PathBuf,
        /// The later snapshot (`-`: standard input); none with --at.
        // Which options each form takes, and that one file comes with
        // --at, is checked after parsing (`diff::form_problem`), not by
        // clap's conflicts and requirements, so that the refusal says what
        // each form takes in vramtop's own words.
        after: Option<PathBuf>,
        /// Print the comparison as JSON (every segment and site).
        #[arg(long)]
        json: bool,
        /// Compare a GPU of BEFORE with a GPU of AFTER: `0:1` is GPU 0 of
        /// BEFORE with GPU 1 of AFTER.
        ///
        /// One device of each file: two ranks' dumps, or a run that moved
        /// GPU.
        #[arg(long, value_name = "GPU:GPU", value_parser = diff::parse_device_pair)]
        devices: Option<(u32, u32)>,
        /// Twice: the two moments of the one snapshot's trace to compare.
        ///
        /// As the viewer's A/B marks do (the earlier is BEFORE): event
        /// numbers as the viewer shows them ("event 40/97" is 40), #N (just
        /// after the event replay and the viewer call #N: "event 41/97
        /// (#40)" is #40 or 41), or start,
        /// peak (of allocated), end, oom (the last OOM), mark:N (just after
        /// the N-th snapshot/annotate entry, as open --summary lists them),
        /// mark:last. Adds the highest
        /// allocated between them and the blocks allocated between them
        /// still alive at the later.
        #[arg(long, value_name = "EVENT", value_parser = at_arg, allow_hyphen_values = true, help_heading = "Two moments of one file")]
        at: Vec<At>,
        /// With --at: the GPU whose trace to compare.
        ///
        /// Needed when several GPUs of the file have one.
        // Needs --at and one file: checked after parsing, with the other
        // forms' options (`diff::form_problem`).
        #[arg(
            long,
            value_name = "N",
            value_parser = u32_arg,
            allow_negative_numbers = true,
            help_heading = "Two moments of one file"
        )]
        device: Option<u32>,
        /// How allocation sites are grouped, as the viewer's `g` groups them.
        #[arg(long, value_enum, value_name = "G", default_value_t = GroupArg::UserFrame)]
        group: GroupArg,
        /// Sites and segments listed in the text output per section.
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = count_arg, default_value_t = diff::DEFAULT_LINES)]
        top: usize,
        #[command(flatten)]
        text: AsciiArgs,
    },
    /// Replay a snapshot's trace through the allocator model.
    ///
    /// Two modes: verify (the default, or --verify) checks the invariants and
    /// replays every device's trace, checking it event by event against what
    /// PyTorch recorded; what-if (--alloc-conf, --capacity) replays the
    /// trace's allocations under other settings. Verify mode
    /// ends with a verdict, one of FULL MATCH, MISMATCH, NOT REPLAYABLE or
    /// NO TRACE: whether vramtop's allocator model reproduces the recording,
    /// not whether the program is right. What-if mode prints a comparison
    /// table and no verdict of its own: of a file verify mode fails it gives
    /// verify's verdict and exit status too (MISMATCH or NOT REPLAYABLE,
    /// exit 1, for a trace the model cannot replay; NOT REPLAYABLE, exit 2,
    /// for a file that contradicts itself), and NO TRACE for a file without
    /// a trace.
    Replay {
        /// The snapshot pickle to replay (`-`: standard input).
        ///
        /// A `torch.cuda.memory._dump_snapshot()` pickle (or a pickled
        /// `torch.cuda.memory_snapshot()` segment list); `-` reads it from
        /// standard input (a file named `-` is `./-`).
        file: PathBuf,
        /// Verify mode (the default).
        ///
        /// Check the invariants and replay every device's trace against what
        /// PyTorch recorded.
        #[arg(long, conflicts_with_all = ["alloc_conf", "capacity"], help_heading = "Verify mode")]
        verify: bool,
        /// Print the report as JSON.
        ///
        /// As the text says it: in verify mode its `result` is the verdict;
        /// the what-if report has no `result` unless the file has no trace
        /// or verify mode fails it (then verify's).
        #[arg(long)]
        json: bool,
        /// What-if: replay under these PYTORCH_CUDA_ALLOC_CONF settings.
        ///
        /// The trace's allocations, under the settings parsed from
        /// PyTorch's defaults, like a fresh process with that variable
        /// (a trace that begins mid-run starts from its rebuilt start
        /// state); repeat for a comparison table. See docs/whatif.md.
        #[arg(
            long = "alloc-conf",
            value_name = "CONF",
            help_heading = "What-if mode"
        )]
        alloc_conf: Vec<String>,
        /// What-if: the memory cudaMalloc may take (e.g. 23GiB, or unlimited).
        ///
        /// The card's memory less
        /// the CUDA context (~0.5 GiB) and other processes, e.g. --capacity
        /// 23GiB for a 24 GB card (a unit is required). When absent: what
        /// the recording shows at its out-of-memory (reserved + the
        /// device's free bytes then), unlimited for a file that never ran
        /// out. It replays the recorded settings at SIZE too, in a
        /// column before those of --alloc-conf. A trace that
        /// starts mid-run holding more than SIZE is said not to fit, not
        /// replayed.
        #[arg(long, value_name = "SIZE", value_parser = capacity_arg, allow_hyphen_values = true, help_heading = "What-if mode")]
        capacity: Option<CapacityArg>,
        #[command(flatten)]
        text: AsciiArgs,
    },
    /// Open a memory snapshot in the viewer, or print its summary.
    // The long help lists the viewer's keys from its keymap
    // (`open::long_about`), so it names them as they act.
    #[command(long_about = open::long_about())]
    Open {
        /// The snapshot pickle or `vramtop record` file to open.
        ///
        /// A `torch.cuda.memory._dump_snapshot()` pickle (or a pickled
        /// `torch.cuda.memory_snapshot()` segment list), or the JSON lines
        /// of `vramtop record`; with --summary, `-` reads it from standard
        /// input (a file named `-` is `./-`).
        file: PathBuf,
        /// Print the summary instead of opening the viewer.
        #[arg(long)]
        summary: bool,
        /// With --summary: print it as JSON.
        #[arg(long, requires = "summary", conflicts_with = "ascii")]
        json: bool,
        /// With --summary: how many allocation sites to list.
        ///
        /// At the end and at the peak of allocated bytes; of a recording,
        /// the processes at each GPU's memory peak.
        #[arg(long, value_name = "N", requires = "summary", allow_negative_numbers = true, value_parser = count_arg, default_value_t = crate::snapshot::summary::DEFAULT_TOP_SITES)]
        top: usize,
        /// With --summary: read only the final state, not the trace.
        ///
        /// The segments, at the start of the file: milliseconds on a GB
        /// file. No peaks and no sites at the peak, which need the trace.
        #[arg(long, requires = "summary")]
        no_trace: bool,
        /// With --summary: how allocation sites are grouped.
        ///
        /// As the viewer's `g` groups them.
        #[arg(long, value_enum, value_name = "G", requires = "summary", default_value_t = GroupArg::UserFrame)]
        group: GroupArg,
        /// Open the viewer at this moment, its sites pane open; with
        /// --summary, list the sites there.
        ///
        /// Of each GPU's trace, where the viewer's cursor starts and the
        /// summary lists the sites: an event number as the viewer shows it
        /// ("event 40/97" is 40), #N (just after the event replay and the
        /// viewer call #N: "event 41/97 (#40)" is #40 or 41), start, peak
        /// (of allocated), end, oom (the last OOM), mark:N (just after the
        /// N-th snapshot/annotate entry the summary lists), mark:last. end
        /// is the file's final state: it needs no trace (and works with
        /// --no-trace). The viewer of a big file opens once its trace is
        /// read.
        ///
        /// Of a recording: print the sample nearest a UTC time (03:14:07,
        /// 2026-12-07T03:14:07Z), +DURATION after its first sample (+90s,
        /// +2m30s, +1h30m, +1.5h), start, end, peak (of memory used), oom
        /// (the last rise of num_ooms) or the N-th sample, as --once
        /// prints one.
        #[arg(long, value_name = "MOMENT", value_parser = open_at_arg, allow_hyphen_values = true)]
        at: Option<OpenAt>,
        #[command(flatten)]
        display: DisplayArgs,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Append one JSON line per sample to FILE.
    ///
    /// Each line flushed as it is written, until --duration passes or
    /// vramtop is stopped. `vramtop open FILE --summary` reads it back:
    /// per GPU the peak and whose it was, each OOM with its time.
    Record {
        /// The JSON-lines file to append to (`-`: stdout).
        ///
        /// A file named `-` is `./-`.
        file: PathBuf,
        /// Stop after this long (default: until stopped).
        ///
        /// The samples of the ticks before it, the first at once (10m at
        /// --interval 1s: 600).
        #[arg(long, value_name = "DURATION", value_parser = duration_arg, allow_hyphen_values = true)]
        duration: Option<u64>,
        #[command(flatten)]
        device: DeviceArgs,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Walk through the caching allocator on a simulated GPU.
    ///
    /// Step by step, on a simulated GPU of 80 GiB unless --sim-memory says
    /// otherwise: why reserved stays up after `del`, and what empty_cache
    /// frees (printed, no dashboard).
    Demo {
        /// Print each step as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the demo's allocator as a snapshot pickle.
        ///
        /// A PyTorch memory snapshot: segments and the whole trace; opens in
        /// `vramtop open`, `vramtop replay` and PyTorch's memory_viz.
        #[arg(long, value_name = "FILE")]
        save_snapshot: Option<PathBuf>,
        /// Replace the --save-snapshot FILE when it exists.
        #[arg(long, requires = "save_snapshot")]
        force: bool,
        /// Memory of the simulated GPU (e.g. 80GiB, 24G, 141GB).
        #[arg(long, default_value = SIM_MEMORY_DEFAULT, value_name = "SIZE",
              value_parser = sim_memory_arg, allow_hyphen_values = true, help_heading = "Simulated GPU")]
        sim_memory: u64,
        #[command(flatten)]
        text: AsciiArgs,
    },
    /// Explain what was found, which backend was chosen and why.
    ///
    /// What was found: the driver, NVML, CUDA, NVRTC, the GPUs, the
    /// probes and the folders looked in for them (VRAMTOP_PROBE_DIR where
    /// set); which backend was chosen and why, and what to install.
    ///
    /// Exits 0 whatever it finds (2 only for a usage error), also with a
    /// broken config file (said as a warning).
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        device: DeviceArgs,
        #[command(flatten)]
        config: ConfigArgs,
        /// Why the config file (`config.config`) was not used, when it
        /// was not; set by the binary, never by an option.
        #[arg(skip)]
        config_error: Option<String>,
    },
    /// Self-test the memory path on the GPU (or the simulated GPU).
    ///
    /// The allocator model on real CUDA memory (or the simulated GPU),
    /// fill/verify kernels, driver-used vs reserved, empty_cache.
    #[command(after_help = CHECK_EXIT_STATUS_HELP)]
    Check {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// The GPU to test.
        #[arg(long, default_value_t = 0, value_name = "INDEX", value_parser = u32_arg, allow_negative_numbers = true)]
        device: u32,
        /// The most to allocate at once (at least 70 MiB).
        ///
        /// On a real GPU also at most 5% of its free memory.
        #[arg(long, default_value = "512MiB", value_name = "SIZE", value_parser = size_arg, allow_hyphen_values = true)]
        budget: u64,
        #[command(flatten)]
        telemetry: DeviceArgs,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Run a scripted scenario of allocations and frees.
    ///
    /// A built-in scenario or a .toml file; prints per step allocated,
    /// reserved, driver used, segments, fragmentation and the outcome.
    Scenario {
        /// A built-in scenario (see --list) or the path of a scenario .toml file.
        #[arg(required_unless_present = "list")]
        name: Option<String>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// List the built-in scenarios and exit (with --json, as JSON).
        #[arg(long, conflicts_with_all = ["name", "save_snapshot"])]
        list: bool,
        /// Also write each variant's allocator as a snapshot pickle.
        ///
        /// A PyTorch memory snapshot of the allocator at the end of the
        /// run, in FILE; with several variants FILE's name gets `-VARIANT`
        /// before its extension.
        #[arg(long, value_name = "FILE")]
        save_snapshot: Option<PathBuf>,
        /// Replace the --save-snapshot files when they exist.
        #[arg(long, requires = "save_snapshot")]
        force: bool,
        #[command(flatten)]
        text: AsciiArgs,
    },
    /// Serve the GPUs' telemetry as Prometheus metrics over HTTP.
    ///
    /// Runs headless and serves the GPUs' telemetry and every visible
    /// allocator's figures at http://ADDR/metrics in the Prometheus text
    /// format (sampled every --interval). Stops on SIGINT/SIGTERM.
    Serve {
        /// The address to listen on (port 0: a free port).
        ///
        /// The address listened on is printed on stderr.
        #[arg(long, default_value = crate::serve::DEFAULT_LISTEN, value_parser = listen_arg)]
        listen: SocketAddr,
        /// Accept a --listen address that is not loopback.
        ///
        /// The metrics name processes and GPUs: expose them on purpose only.
        #[arg(long)]
        allow_remote: bool,
        #[command(flatten)]
        device: DeviceArgs,
        #[command(flatten)]
        sampling: SamplingArgs,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Copy a running process's PyTorch memory snapshot to a file.
    ///
    /// Asks the process's probe (python -m vramtop_probe) for the snapshot:
    /// segments and blocks, and the trace when the probe records history
    /// (--record-history). Opens in `vramtop open` and `vramtop replay`.
    /// The probe's socket is looked for where the dashboard looks
    /// (VRAMTOP_PROBE_DIR where set).
    ///
    /// Exit 2 when PID has no probe or its probe cannot take snapshots
    /// (v1), 1 when the probe failed or did not answer in time.
    Snapshot {
        /// The process (its pid as `ps` shows it here).
        #[arg(value_parser = u32_arg, allow_negative_numbers = true)]
        pid: u32,
        /// Where to write the snapshot (`-`: stdout).
        ///
        /// Default: PID-<UTC time>.pickle in the current folder. Created
        /// with mode 0600. `-` writes it to stdout (not a terminal), e.g.
        /// over ssh to a local file; a file named `-` is `./-`.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace FILE when it exists.
        #[arg(long)]
        force: bool,
        /// How long to wait for the probe's answer (e.g. 30s).
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg, allow_hyphen_values = true)]
        timeout: u64,
    },
    /// Print a shell completion script for vramtop on stdout.
    ///
    /// For example:
    /// `vramtop completions bash > ~/.local/share/bash-completion/completions/vramtop`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print vramtop's man page (roff) on stdout.
    ///
    /// For example `vramtop man > vramtop.1`. With a command, that command's
    /// own page with its options (e.g. `vramtop man record >
    /// vramtop-record.1`): the pages the main one lists as
    /// vramtop-COMMAND(1).
    Man {
        /// The command whose page to print.
        ///
        /// The pages the main one lists as vramtop-COMMAND(1).
        command: Option<String>,
    },
}

/// The options a config file may set, where the parsed command has them.
#[derive(Debug, Default)]
pub struct ConfigTargets<'a> {
    /// `--config`, when the command reads a config file at all.
    pub path: Option<&'a Option<PathBuf>>,
    pub device: Option<&'a mut DeviceArgs>,
    pub sampling: Option<&'a mut SamplingArgs>,
    pub display: Option<&'a mut DisplayArgs>,
}

impl ConfigTargets<'_> {
    /// What the command does with a config file's unknown keys: the
    /// commands that sample (the dashboard, `record`, `serve`: those with a
    /// sampling interval) refuse them, the rest warn
    /// ([`config::UnknownKeys`] says why).
    pub fn unknown_keys(&self) -> config::UnknownKeys {
        if self.sampling.is_some() {
            config::UnknownKeys::Refuse
        } else {
            config::UnknownKeys::Warn
        }
    }
}

impl Cli {
    /// The options of the parsed command that a config file may set;
    /// `path` is `None` for a command that reads no config file.
    pub fn config_targets(&mut self) -> ConfigTargets<'_> {
        match &mut self.command {
            None => {
                let d = &mut self.dashboard;
                ConfigTargets {
                    path: Some(&d.config.config),
                    device: Some(&mut d.device),
                    sampling: Some(&mut d.sampling),
                    display: Some(&mut d.display),
                }
            }
            Some(Command::Open {
                display, config, ..
            }) => ConfigTargets {
                path: Some(&config.config),
                display: Some(display),
                ..ConfigTargets::default()
            },
            Some(
                Command::Record {
                    device,
                    sampling,
                    config,
                    ..
                }
                | Command::Serve {
                    device,
                    sampling,
                    config,
                    ..
                },
            ) => ConfigTargets {
                path: Some(&config.config),
                device: Some(device),
                sampling: Some(sampling),
                display: None,
            },
            Some(
                Command::Doctor { device, config, .. }
                | Command::Check {
                    telemetry: device,
                    config,
                    ..
                },
            ) => ConfigTargets {
                path: Some(&config.config),
                device: Some(device),
                ..ConfigTargets::default()
            },
            Some(
                Command::Diff { .. }
                | Command::Replay { .. }
                | Command::Demo { .. }
                | Command::Scenario { .. }
                | Command::Snapshot { .. }
                | Command::Completions { .. }
                | Command::Man { .. },
            ) => ConfigTargets::default(),
        }
    }

    /// The usage error clap's definition cannot say in vramtop's words, if
    /// the parsed command line has one: `diff`'s options of one form given
    /// to the other. The caller says it as it says clap's (one line, exit
    /// 2, the help to read), before anything runs.
    pub fn usage_problem(&self) -> Option<String> {
        match &self.command {
            Some(Command::Diff {
                after,
                devices,
                at,
                device,
                ..
            }) => diff::form_problem(diff::FormArgs {
                two_files: after.is_some(),
                devices: devices.is_some(),
                at: !at.is_empty(),
                device: device.is_some(),
            }),
            _ => None,
        }
    }

    /// Whether the command is `doctor`, which runs on with a broken config file.
    pub fn is_doctor(&self) -> bool {
        matches!(self.command, Some(Command::Doctor { .. }))
    }

    /// Tells `doctor` the config file it found (the default one too), and
    /// why it was not used (`error`: "line 1: …"), so its report names it
    /// and says whether its values apply.
    pub fn note_config(&mut self, path: PathBuf, error: Option<String>) {
        if let Some(Command::Doctor {
            config,
            config_error,
            ..
        }) = &mut self.command
        {
            config.config = Some(path);
            *config_error = error;
        }
    }
}

/// Lets go of a command's snapshot without dropping it: the process exits
/// right after, and the system takes a process's memory back at once,
/// where a drop walks every trace entry and traceback (14 ms for a 198 MB
/// file, 72 ms for 1 GB). Only for the end of a one-shot command.
pub fn leave_to_exit<T>(value: T) {
    std::mem::forget(value);
}

/// Writes command output to stdout. A closed pipe (`vramtop … | head`)
/// is returned as the error it is, for the command to stop at: the binary
/// edge ends the run quietly with success ([`is_closed_output`]).
pub fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    // Names from snapshots and probes are in the text: none may act on the
    // terminal (JSON escapes them itself; this changes nothing there).
    let text = crate::quote::for_terminal(text);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// Whether a command failed because its output's reader has gone (a
/// closed pipe: `vramtop … | head -1`). That is no failure: the reader has
/// what it wanted, and the run ends with success and nothing said, as
/// coreutils and ripgrep end.
pub fn is_closed_output(report: &color_eyre::Report) -> bool {
    report.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints a command's text report; with `--ascii`, in the ASCII stand-ins
/// the screen uses (`open --summary --ascii` the same), one character for
/// one, so the report's columns stay.
pub fn emit_text(text: &str, ascii: bool) -> std::io::Result<()> {
    if ascii {
        emit(&crate::ui::theme::ascii_text(text))
    } else {
        emit(text)
    }
}

/// Test hooks are environment variables, not flags: hidden flags still
/// appear in the generated shell completions. `VRAMTOP_DEBUG_PANIC_AFTER`
/// (a duration) makes the dashboard panic on purpose, to check that the
/// terminal is restored; `VRAMTOP_DEBUG_BACKGROUND_LOAD=1` makes the viewer
/// read any file behind its progress screen.
pub const DEBUG_PANIC_AFTER_ENV: &str = "VRAMTOP_DEBUG_PANIC_AFTER";
/// See [`DEBUG_PANIC_AFTER_ENV`].
pub const DEBUG_BACKGROUND_LOAD_ENV: &str = "VRAMTOP_DEBUG_BACKGROUND_LOAD";
/// `VRAMTOP_DEBUG_STDOUT_TERMINAL=1`: the text reports lay out their file's
/// path as on a terminal (folders elided to fit 80 columns) though stdout
/// is a pipe, so that tests can check that layout.
pub const DEBUG_STDOUT_TERMINAL_ENV: &str = "VRAMTOP_DEBUG_STDOUT_TERMINAL";

/// The prefix of every error message on stderr (clap's usage errors too).
pub const ERROR_PREFIX: &str = "vramtop: error: ";
/// The prefix of every warning on stderr.
pub const WARNING_PREFIX: &str = "vramtop: warning: ";

/// What a command writes, for the file name an error suggests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// A PyTorch memory snapshot pickle.
    Snapshot,
    /// `record`'s JSON lines.
    JsonLines,
}

impl OutputKind {
    /// A file name to suggest inside a folder given as the output.
    fn example_name(self) -> &'static str {
        match self {
            OutputKind::Snapshot => "NAME.pickle",
            OutputKind::JsonLines => "NAME.jsonl",
        }
    }
}

/// Why `file` cannot be written as asked, or None: it exists and `force`
/// was not given, or its folder does not exist (vramtop makes no folders:
/// a typo would otherwise make a tree). `kind` names the file an error
/// suggests when `file` is a folder.
pub fn output_file_problem(
    file: &std::path::Path,
    force: bool,
    kind: OutputKind,
) -> Option<String> {
    if let Some(dir) = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        return Some(format!(
            "cannot write {}: its folder {} does not exist (vramtop creates no folders)",
            file.display(),
            dir.display()
        ));
    }
    // Even with --force: a folder is never replaced, and the write would
    // fail only after the work (a snapshot, a scenario) was done.
    if file.is_dir() {
        return Some(format!(
            "cannot write {}: it is a folder; name a file in it ({})",
            file.display(),
            file.join(kind.example_name()).display()
        ));
    }
    if !force && file.exists() {
        return Some(format!(
            "{} exists: add --force to replace it, or choose another name",
            file.display()
        ));
    }
    None
}

/// The FILE argument that means standard input.
pub const STDIN_ARG: &str = "-";

/// The name errors give standard input when a snapshot is read from it.
const STDIN_NAME: &str = "standard input";

/// FILE as reports name it: `-` is "standard input".
pub fn input_name(file: &std::path::Path) -> String {
    if file.as_os_str() == STDIN_ARG {
        STDIN_NAME.to_string()
    } else {
        file.display().to_string()
    }
}

/// Reads the snapshot FILE names: `-` is standard input (refused when it
/// is a terminal: nothing would arrive until the user typed a pickle).
pub fn read_snapshot_arg(
    file: &std::path::Path,
) -> Result<crate::snapshot::Snapshot, crate::snapshot::SnapshotError> {
    read_snapshot_arg_with(file, crate::snapshot::Stacks::Read)
}

/// [`read_snapshot_arg`], converting the stacks or not (a command that
/// shows none skips them: they are most of a long trace's conversion).
pub fn read_snapshot_arg_with(
    file: &std::path::Path,
    stacks: crate::snapshot::Stacks,
) -> Result<crate::snapshot::Snapshot, crate::snapshot::SnapshotError> {
    if file.as_os_str() != STDIN_ARG {
        return crate::snapshot::read_snapshot_file_with(file, stacks);
    }
    read_stdin_snapshot(piped_stdin()?, stacks)
}

/// Standard input to read a snapshot from, refused when it is a terminal
/// (nothing would arrive until the user typed a pickle).
pub fn piped_stdin() -> Result<std::io::StdinLock<'static>, crate::snapshot::SnapshotError> {
    use std::io::IsTerminal as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(crate::snapshot::SnapshotError::Io {
            path: std::path::PathBuf::from(STDIN_NAME),
            source: std::io::Error::other(
                "it is a terminal: pipe a snapshot into this command (`vramtop snapshot PID -o \
                 -` writes one to a pipe)",
            ),
            near: crate::snapshot::near::Near::default(),
        });
    }
    Ok(stdin.lock())
}

/// Reads a snapshot from `input`, standard input ([`piped_stdin`]) or a
/// reader passing its bytes on, its errors naming standard input.
pub fn read_stdin_snapshot(
    input: impl std::io::Read,
    stacks: crate::snapshot::Stacks,
) -> Result<crate::snapshot::Snapshot, crate::snapshot::SnapshotError> {
    crate::snapshot::read_snapshot_from_with(input, std::path::Path::new(STDIN_NAME), stacks)
}

/// [`read_stdin_snapshot`] as far as the final state only (`--no-trace`):
/// the rest of `input` is left unread.
pub fn read_stdin_final_state(
    input: impl std::io::Read,
) -> Result<crate::snapshot::Snapshot, crate::snapshot::SnapshotError> {
    crate::snapshot::read_snapshot_from_final_state(input, std::path::Path::new(STDIN_NAME))
}

/// What a command reads, so that its bad-file line names only that: `open`
/// reads memory snapshots and `vramtop record` files (told by content),
/// `replay` and `diff` snapshots alone, where a hint about recordings
/// would send the user to a file the command cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    SnapshotsAndRecordings,
    Snapshots,
}

impl Reads {
    /// What an empty input holds none of ("no memory snapshot").
    fn none_of(self) -> &'static str {
        match self {
            Reads::SnapshotsAndRecordings => recording::NEITHER,
            Reads::Snapshots => "no memory snapshot",
        }
    }
}

/// Why the snapshot `file` could not be read, as one line: the reader's
/// error and, when the damage lies past the file's final state (a trace
/// cut short, a file still being copied), how to read that state, which
/// the viewer and `--summary --no-trace` show on their own. A failed read
/// only: the final state is read again to know (its beginning alone).
pub fn snapshot_read_error(
    file: &std::path::Path,
    error: &crate::snapshot::SnapshotError,
    reads: Reads,
) -> String {
    // Nothing at all is said in one line whichever command read it, naming
    // what that command reads: "not a pickle" would read as a wrong file,
    // not as one still being written.
    if is_empty_input(error) {
        return recording::empty_input(file, reads);
    }
    let readable_before = file.as_os_str() != STDIN_ARG
        && !matches!(error, crate::snapshot::SnapshotError::Io { .. })
        && crate::snapshot::read_snapshot_file_final_state(file).is_ok_and(|s| s.trace_not_read);
    // A cut file is said the same way wherever the cut falls.
    let mut said =
        ends_early(error, file.as_os_str() == STDIN_ARG).unwrap_or_else(|| error.to_string());
    if reads == Reads::SnapshotsAndRecordings {
        recording_hint(&mut said);
    } else if is_text_refusal(&said) && recording::is_recording_file(file) {
        // "not a pickle: looks like JSON" of a file `open` reads: said what
        // it is and which command reads it.
        let shown = crate::quote::shell_path(&file.display().to_string());
        return format!(
            "{}: a `vramtop record` file, not a memory snapshot: `vramtop open {shown} \
             --summary` summarises it",
            input_name(file)
        );
    }
    if readable_before {
        // Quoted for a shell, to be pasted; say_error then escapes what a
        // terminal would act on, the name included.
        let shown = crate::quote::shell_path(&file.display().to_string());
        format!(
            "{said}; this command reads the whole file, but its final state, before the \
             damage, is readable: `vramtop open {shown} --summary --no-trace`, or the viewer \
             (`vramtop open {shown}`)"
        )
    } else {
        said
    }
}

/// Whether `error` is the reader's refusal of an input without a byte.
fn is_empty_input(error: &crate::snapshot::SnapshotError) -> bool {
    use crate::snapshot::SnapshotError;
    match error {
        SnapshotError::Pickle(crate::snapshot::pickle::PickleError::Empty) => true,
        SnapshotError::InFile { source, .. } => is_empty_input(source),
        _ => false,
    }
}

/// Whether `said` is the pickle reader's refusal of text or JSON (the
/// error may carry the path before its words).
fn is_text_refusal(said: &str) -> bool {
    said.contains("not a pickle: looks like text") || said.contains("not a pickle: looks like JSON")
}

/// A refusal of text as a pickle, completed for a recording: text that
/// is not a recording either (`open` takes both) says what one needs.
pub(crate) fn recording_hint(said: &mut String) {
    // The pickle reader's words for text (the error may carry the path
    // before them).
    if is_text_refusal(said) {
        said.push_str(
            "; if this is a `vramtop record` file, no line of its first 16 KiB is a sample \
             (`vramtop open FILE --summary` reads one)",
        );
    }
}

/// A truncated pickle said as a user needs it first (see
/// [`crate::ui::format::file_cut_text`]); `None` for any other error.
pub(crate) fn ends_early(
    error: &crate::snapshot::SnapshotError,
    from_stdin: bool,
) -> Option<String> {
    crate::ui::format::file_cut_text(error, from_stdin)
}

/// Says an error on stderr, with the one prefix.
pub fn say_error(message: impl std::fmt::Display) {
    let message = message.to_string();
    eprintln!("{ERROR_PREFIX}{}", crate::quote::for_terminal(&message));
}

/// Says a warning on stderr, with the one prefix.
pub fn say_warning(message: impl std::fmt::Display) {
    let message = message.to_string();
    eprintln!("{WARNING_PREFIX}{}", crate::quote::for_terminal(&message));
}

/// Exit code for bad input or usage (unreadable file, not a snapshot, a bad
/// option), as clap uses for bad arguments.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when a verification ran but did not match, or a self-test failed.
pub const EXIT_MISMATCH: u8 = 1;
/// Exit code of `check` when nothing was checked: every part was skipped,
/// the device having too little free. Not 0, so that CI running `check` on
/// a device too small to check anything does not read it as a pass; 77 is
/// what the automake and meson test harnesses read as "skipped".
pub const EXIT_NOTHING_CHECKED: u8 = 77;

/// The exit codes as `vramtop --help` says them; docs/cli.md has the table.
/// How a training run gets its probe, which nothing else in the help
/// names: without one vramtop sees only the driver's figures.
pub const ATTACH_HELP: &str = "Attach a PyTorch training run: pip install ./python, then python -m \
     vramtop_probe train.py … (or import vramtop_probe; vramtop_probe.start()); the dashboard, \
     --once and record then show its allocator (docs/attach.md). The probe listens in \
     $XDG_RUNTIME_DIR/vramtop or /tmp/vramtop-<user>, where vramtop looks; set VRAMTOP_PROBE_DIR \
     for both to use that folder instead.";

pub const EXIT_STATUS_HELP: &str = "Exit status: 0 success, 1 a verification found a mismatch or a \
     self-test failed, 2 bad input or usage, 77 check had nothing to check, 128+N the dashboard or \
     the viewer stopped by signal N (docs/cli.md).";

/// The exit code of a dashboard or viewer stopped by `signal` (SIGTERM,
/// SIGHUP, …) once the terminal is restored: 128 + its number, what a
/// shell reports of a process the signal killed (143 for SIGTERM), so a
/// script or supervisor can tell a stop from a quit. Past 127, which no
/// signal is, 128 + 127.
pub fn signal_exit_code(signal: i32) -> ExitCode {
    let n = u8::try_from(signal).unwrap_or(127).min(127);
    ExitCode::from(128 + n)
}

/// `check`'s exit codes as `vramtop check --help` says them.
pub const CHECK_EXIT_STATUS_HELP: &str = "Exit status: 0 on PASS (also with parts skipped for want \
     of free memory), 1 on FAIL (a step failed), 77 on SKIP (nothing was checked: the device has \
     too little free for any part), 2 on bad usage (docs/cli.md).";

/// Runs the parsed command line.
pub fn run(cli: Cli) -> color_eyre::Result<ExitCode> {
    use std::io::IsTerminal as _;
    // Into a pipe or a file, a report's path is printed whole (grep-able);
    // on a terminal its folders give way to the 80 columns.
    let terminal = std::io::stdout().is_terminal()
        || std::env::var_os(DEBUG_STDOUT_TERMINAL_ENV).is_some_and(|v| v == "1");
    text::print_paths_whole(!terminal);
    match cli.command {
        Some(Command::Diff {
            before,
            after,
            json,
            devices,
            at,
            device,
            group,
            top,
            text,
        }) => {
            let output = diff::Output {
                json,
                top,
                ascii: text.ascii,
                grouping: group.grouping(),
            };
            match after {
                Some(after) => diff::run(&before, &after, devices, output),
                None => diff::run_moments(&before, &at, device, output),
            }
        }
        Some(Command::Record {
            file,
            duration,
            device,
            sampling,
            ..
        }) => dashboard::record(&device, &sampling, &file, duration),
        Some(Command::Replay {
            file,
            json,
            alloc_conf,
            capacity,
            text,
            ..
        }) if !alloc_conf.is_empty() || capacity.is_some() => {
            replay::run_whatif(&file, &alloc_conf, capacity, json, text.ascii)
        }
        Some(Command::Replay {
            file, json, text, ..
        }) => replay::run(&file, json, text.ascii),
        Some(Command::Open {
            file,
            summary,
            json,
            top,
            no_trace,
            group,
            at,
            display,
            ..
        }) => open::run(
            &file,
            summary,
            open::SummaryOptions {
                json,
                top,
                no_trace,
                grouping: group.grouping(),
                at: at.and_then(OpenAt::moment),
                at_time: at.and_then(OpenAt::time),
            },
            &display,
        ),
        Some(Command::Demo {
            json,
            save_snapshot,
            force,
            sim_memory,
            text,
        }) => demo::run(
            json,
            save_snapshot.as_deref(),
            force,
            sim_memory,
            text.ascii,
        ),
        Some(Command::Doctor {
            json,
            device,
            config,
            config_error,
        }) => doctor::run(&device, config.config.as_deref(), config_error, json),
        Some(Command::Check {
            json,
            device,
            budget,
            telemetry,
            ..
        }) => check::run(&telemetry, device, budget, json),
        Some(Command::Scenario {
            name,
            json,
            list,
            save_snapshot,
            force,
            text,
        }) => scenario::run(
            name.as_deref(),
            json,
            list,
            save_snapshot.as_deref(),
            force,
            text.ascii,
        ),
        Some(Command::Serve {
            listen,
            allow_remote,
            device,
            sampling,
            ..
        }) => serve::run(&device, &sampling, listen, allow_remote),
        Some(Command::Snapshot {
            pid,
            output,
            force,
            timeout,
        }) => snapshot::run(pid, output.as_deref(), timeout, force),
        Some(Command::Completions { shell }) => completions(shell),
        Some(Command::Man { command }) => man_page(command.as_deref()),
        None if cli.dashboard.once => dashboard::once(&cli.dashboard),
        None => dashboard::run(&cli.dashboard),
    }
}

/// `vramtop completions SHELL`: the completion script, from the same clap
/// definition as the parser.
fn completions(shell: clap_complete::Shell) -> color_eyre::Result<ExitCode> {
    use clap::CommandFactory as _;
    use color_eyre::eyre::WrapErr as _;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "vramtop", &mut script);
    emit(&String::from_utf8_lossy(&script)).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// `vramtop man [COMMAND]`: the man page (roff), from the same clap
/// definition; a command's page is the one the main page's SUBCOMMANDS
/// section lists as `vramtop-COMMAND(1)`.
fn man_page(command: Option<&str>) -> color_eyre::Result<ExitCode> {
    use clap::CommandFactory as _;
    use color_eyre::eyre::WrapErr as _;
    // Built, as the parser is: the global options (--log-file) are then on
    // every command's page, and the help command the main page lists is
    // a command too.
    let mut cli = Cli::command();
    cli.build();
    let page_of = match command {
        None => cli,
        Some(name) => {
            let Some(sub) = cli.find_subcommand(name) else {
                let names: Vec<&str> = cli
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(clap::Command::get_name)
                    .collect();
                say_error(format!(
                    "no command named '{name}'; man pages: {}",
                    names.join(", ")
                ));
                return Ok(ExitCode::from(2));
            };
            let title = format!("vramtop-{}", sub.get_name());
            sub.clone()
                .name(title)
                .bin_name(format!("vramtop {}", sub.get_name()))
                .version(env!("CARGO_PKG_VERSION"))
        }
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(page_of)
        .render(&mut page)
        .wrap_err("cannot render the man page")?;
    emit(&String::from_utf8_lossy(&page)).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn every_summary_only_option_needs_summary_and_is_said_to_apply_to_it() {
        for (option, value) in [
            ("--json", None),
            ("--top", Some("3")),
            ("--no-trace", None),
            ("--group", Some("function")),
        ] {
            assert!(SUMMARY_ONLY_OPTIONS.contains(&option), "{option}");
            let mut args = vec!["vramtop", "open", "x.pickle", option];
            args.extend(value);
            let e = Cli::try_parse_from(&args).expect_err(option);
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{option}"
            );
            args.push("--summary");
            assert!(Cli::try_parse_from(&args).is_ok(), "{option}");
        }
        // --at is the viewer's too.
        assert!(!SUMMARY_ONLY_OPTIONS.contains(&"--at"));
        assert!(Cli::try_parse_from(["vramtop", "open", "x.pickle", "--at", "oom"]).is_ok());
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            summary_only_message(&args(&["open", "f", "--top=3"])).as_deref(),
            Some(
                "--top applies to the summary, not the viewer: add --summary \
                 (vramtop open FILE --summary --top …)"
            )
        );
        assert_eq!(
            summary_only_message(&args(&["open", "f", "--at=oom"])),
            None
        );
        // JSON is not the text summary.
        assert_eq!(
            summary_only_message(&args(&["open", "f", "--json"])).as_deref(),
            Some(
                "--json prints the summary as JSON: add --summary (vramtop open FILE --summary --json)"
            )
        );
        let both = summary_only_message(&args(&["open", "f", "--group", "function", "--top", "3"]));
        assert!(
            both.as_deref()
                .is_some_and(|m| m.starts_with("--top and --group apply to the summary")),
            "{both:?}"
        );
        // A file named like an option after `--` is not one.
        assert_eq!(summary_only_message(&args(&["open", "--", "--top"])), None);
        assert_eq!(summary_only_message(&args(&["open", "--topaz"])), None);
    }

    #[test]
    fn a_summary_option_given_for_a_recording_says_what_is_true_of_one_and_the_line_to_type() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        let of = |a: &[&str]| {
            recording_summary_only_message(&args(a), std::path::Path::new("r.jsonl"))
                .expect("a summary-only option")
        };
        // A recording has no viewer: --at alone prints its sample.
        let top = of(&["open", "r.jsonl", "--top", "3", "--at", "2"]);
        assert_eq!(
            top,
            "r.jsonl is a `vramtop record` file: --top applies to its summary: add --summary \
             (vramtop open r.jsonl --summary --top 3 --at 2)"
        );
        assert!(!top.contains("viewer"), "{top}");
        assert_eq!(
            of(&["open", "r.jsonl", "--at", "peak", "--json"]),
            "r.jsonl is a `vramtop record` file: --json prints its summary as JSON: add \
             --summary (vramtop open r.jsonl --summary --at peak --json)"
        );
        // --summary would be refused next: the snapshot-only options are
        // left out, and --summary added only where something needs it.
        assert_eq!(
            of(&["open", "r.jsonl", "--group", "function", "--at", "2"]),
            "r.jsonl is a `vramtop record` file: --group is for snapshots: leave it out \
             (vramtop open r.jsonl --at 2)"
        );
        assert_eq!(
            of(&["open", "r.jsonl", "--no-trace", "--group=file"]),
            "r.jsonl is a `vramtop record` file: --no-trace and --group are for snapshots: \
             leave them out (vramtop open r.jsonl --summary)"
        );
        assert_eq!(
            of(&["open", "--top=3", "--no-trace", "--", "r.jsonl"]),
            "r.jsonl is a `vramtop record` file: --no-trace is for snapshots: leave it out; \
             --top applies to its summary: add --summary (vramtop open --top=3 --summary -- \
             r.jsonl)"
        );
        // An argument too long to show whole: the advice without the line.
        let long = "9".repeat(100);
        let cut = of(&["open", "r.jsonl", "--top", "3", "--at", &long]);
        assert!(cut.ends_with("add --summary"), "{cut}");
        assert_eq!(
            recording_summary_only_message(
                &args(&["open", "r.jsonl", "--at", "2"]),
                std::path::Path::new("r.jsonl")
            ),
            None
        );
    }

    #[test]
    fn a_simulated_gpu_smaller_than_its_context_is_refused() {
        for small in ["1B", "512MiB", "1023MiB"] {
            let e = sim_memory_arg(small).expect_err("too small");
            assert!(e.contains("the least is 1GiB"), "{small}: {e}");
        }
        assert_eq!(sim_memory_arg("1GiB"), Ok(1 << 30));
        assert!(
            sim_memory_arg("24")
                .expect_err("no unit")
                .contains("24 what?")
        );
    }

    #[test]
    fn minus_zero_is_zero_not_a_negative_whole_number() {
        assert_eq!(seed_arg("-0"), Ok(0));
        assert_eq!(seed_arg("-00"), Ok(0));
        assert_eq!(u32_arg("-0"), Ok(0));
        assert_eq!(count_arg("-0"), Ok(0));
        // A real negative number still says so, and a bare sign is none.
        assert!(seed_arg("-01").expect_err("-1").contains("is negative"));
        assert!(seed_arg("-").is_err());
    }

    #[test]
    fn sizes_and_durations_out_of_range_say_so_rather_than_not_a_size() {
        for (negative, e) in [
            ("-5GiB", size_arg("-5GiB")),
            ("-1s", duration_arg("-1s")),
            ("-5", size_arg(" -5")),
        ] {
            let e = e.expect_err("negative");
            assert!(e.contains("is negative"), "{negative}: {e}");
        }
        let huge = sim_memory_arg("15EiB").expect_err("too large");
        assert!(huge.contains("the most is 64TiB"), "{huge}");
        assert_eq!(sim_memory_arg("64TiB"), Ok(64 << 40));
        let zero = size_arg("0B").expect_err("zero");
        assert!(zero.contains("is zero"), "{zero}");
        for big in ["99999999999TiB", "18446744073709551616B", "100000000TB"] {
            let e = size_arg(big).expect_err("too big");
            assert!(
                e.contains("more than the largest size, 16 EiB - 1 B (18446744073709551615 B)"),
                "{big}: {e}"
            );
        }
        // The largest size itself is taken, exactly.
        assert_eq!(size_arg("18446744073709551615B"), Ok(u64::MAX));
        // The unit the limit is named in is one the parser takes.
        assert_eq!(size_arg("15EiB"), Ok(15 << 60));
        let past = size_arg("16EiB").expect_err("past the largest");
        assert!(past.contains("more than the largest size"), "{past}");
        let long = duration_arg("99999999999h").expect_err("too long");
        assert!(long.contains("too long: the most is 277777777h"), "{long}");
        assert!(duration_arg("277777777h").is_ok());
        assert!(
            duration_arg("1.5fortnights")
                .expect_err("no unit")
                .contains("not a duration")
        );
    }

    #[test]
    fn a_size_or_duration_with_a_plus_sign_is_not_a_size_or_duration() {
        for text in ["+24GiB", "+1B", " +5MiB"] {
            let e = size_arg(text).expect_err("a sign");
            assert!(e.contains("is not a size: write e.g."), "{text}: {e}");
            let e = sim_memory_arg(text).expect_err("a sign");
            assert!(e.contains("is not a size: write e.g."), "{text}: {e}");
        }
        for text in ["+500ms", "+1s", "+10m"] {
            let e = duration_arg(text).expect_err("a sign");
            assert!(e.contains("is not a duration: write e.g."), "{text}: {e}");
        }
    }

    #[test]
    fn a_signal_exits_128_plus_its_number() {
        use signal_hook::consts::{SIGHUP, SIGTERM};
        assert_eq!(signal_exit_code(SIGTERM), ExitCode::from(143));
        assert_eq!(signal_exit_code(SIGHUP), ExitCode::from(129));
        // Never wraps past 255 nor falls under 128.
        assert_eq!(signal_exit_code(1000), ExitCode::from(255));
        assert_eq!(signal_exit_code(-1), ExitCode::from(255));
    }

    #[test]
    fn an_interval_past_an_hour_is_too_long_and_says_the_most() {
        for long in [
            "99999999h",
            "1.0000001h",
            "61m",
            "3600001ms",
            "99999999999h",
        ] {
            assert_eq!(
                interval_arg(long),
                Err(format!("'{long}' is too long: the most is 1h")),
                "{long}"
            );
        }
        assert_eq!(interval_arg("1h"), Ok(3_600_000));
        assert_eq!(interval_arg("60m"), Ok(3_600_000));
        assert_eq!(interval_arg("500ms"), Ok(500));
        // The least and a sign are said as for any duration.
        assert_eq!(interval_arg("9ms"), duration_arg("9ms"));
        assert_eq!(interval_arg("-1s"), duration_arg("-1s"));
        // A bare number is told only the units an interval takes: 7200 s
        // is too long, 7200 ms is not.
        let e = interval_arg("7200").expect_err("no unit");
        assert!(e.ends_with("write e.g. 7200ms"), "{e}");
        // Too long in every unit: the interval's own limit.
        let bare = "99999999999999999999";
        assert_eq!(
            interval_arg(bare),
            Err(format!("'{bare}' is too long: the most is 1h"))
        );
        // Other durations keep the parser's limit.
        assert!(duration_arg("99999999h").is_ok());
    }

    #[test]
    fn a_duration_under_10ms_is_too_short_even_where_it_rounds_to_10ms() {
        for short in ["9.5ms", "9.999999ms", "0.0095s", "9.4ms", "0.00016m", "0ms"] {
            let e = duration_arg(short).expect_err("under 10ms");
            assert!(e.contains("too short: the least is 10ms"), "{short}: {e}");
        }
        for ok in ["10ms", "0.01s", "10.4ms", "10.0000001ms"] {
            assert_eq!(duration_arg(ok), Ok(10), "{ok}");
        }
        assert_eq!(duration_arg("10.5ms"), Ok(11));
    }

    #[test]
    fn a_long_size_or_duration_argument_is_quoted_cut_short() {
        let long = "9".repeat(100_000) + "zz";
        for e in [size_arg(&long), duration_arg(&long)] {
            let e = e.expect_err("not a size or duration");
            assert!(e.len() < 300, "{} bytes", e.len());
            assert!(e.contains("100002 bytes"), "{e}");
        }
    }

    #[test]
    fn a_size_or_duration_without_a_unit_asks_for_one() {
        let e = size_arg("24").expect_err("no unit");
        assert!(e.contains("24 what? write e.g. 24GiB"), "{e}");
        let e = duration_arg("5").expect_err("no unit");
        assert!(e.contains("5 what?"), "{e}");
        assert_eq!(size_arg("24B"), Ok(24));
        assert_eq!(size_arg("24GiB"), Ok(24 << 30));
        assert_eq!(duration_arg("5s"), Ok(5_000));
    }

    #[test]
    fn a_bare_number_too_long_in_every_unit_says_the_limit_not_a_unit() {
        let bare = "99999999999999999999";
        assert_eq!(
            duration_arg(bare),
            Err(format!("'{bare}' is too long: the most is 277777777h"))
        );
        let e = size_arg(bare).expect_err("too large");
        assert!(
            e.starts_with(&format!("'{bare}' is more than the largest size")),
            "{e}"
        );
        // Too short in every unit says the least.
        let e = duration_arg("0.001").expect_err("too short");
        assert_eq!(e, "'0.001' is too short: the least is 10ms");
    }

    #[test]
    fn a_bare_number_is_told_only_the_units_that_take_it() {
        // 10^13 s is too long (the most is 10^15 ms), 10^13 ms is not; 5 ms
        // is too short.
        let e = duration_arg("10000000000000").expect_err("no unit");
        assert!(e.ends_with("write e.g. 10000000000000ms"), "{e}");
        assert!(
            duration_arg("5")
                .expect_err("no unit")
                .ends_with("write e.g. 5s")
        );
        // Half a byte is none; half a MiB is.
        let e = size_arg("0.5").expect_err("no unit");
        assert!(e.ends_with("write e.g. 0.5GiB or 0.5MiB"), "{e}");
        // A simulated GPU holds 1GiB to 64TiB.
        let e = sim_memory_arg("24").expect_err("no unit");
        assert!(e.ends_with("write e.g. 24GiB"), "{e}");
        for bare in [
            "24",
            "5",
            "0.5",
            "1.5",
            "0.01",
            "10000000000000",
            "17179869184",
        ] {
            for e in [size_arg(bare), duration_arg(bare), sim_memory_arg(bare)] {
                let e = e.expect_err("no unit");
                let Some((_, suggested)) = e.split_once("write e.g. ") else {
                    continue;
                };
                for text in suggested.split(" or ").flat_map(|s| s.split(", ")) {
                    assert!(
                        size_arg(text).is_ok() || duration_arg(text).is_ok(),
                        "{bare}: {text} is suggested and refused"
                    );
                }
            }
        }
    }

    #[test]
    fn a_size_argument_of_a_fraction_of_a_byte_is_refused() {
        for text in ["0.5B", "0.3B", "1.5B"] {
            assert_eq!(
                size_arg(text),
                Err(format!("'{text}' is not a whole number of bytes"))
            );
        }
        assert_eq!(size_arg("1.5KiB"), Ok(1536));
        assert_eq!(
            size_arg("1.1GiB"),
            Ok(1_181_116_006),
            "the whole bytes in it"
        );
    }

    #[test]
    fn the_clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
