//! The optional TOML config file: the same keys as the command line
//! (`interval = "2s"`, `backend = "sim"`, `sim_gpus = 4`, …). The command
//! line wins, but a bad value is an error even where the command line
//! overrides it or the command has no such option. An unknown key names
//! its line and the known key it is nearest to; the commands that sample
//! (the dashboard, `record`, `serve`) refuse it, the rest warn and go on
//! ([`UnknownKeys`]). The file is read into [`ConfigFile`], a typed
//! struct whose values pass the flags' own parsers and ranges. Input is
//! quoted cut short ([`crate::quote::cut`]).

use std::path::{Path, PathBuf};

use clap::ArgMatches;
use clap::parser::ValueSource;
use thiserror::Error;
use toml::de::{DeTable, DeValue};

use super::{
    ConfigTargets, SIM_DATALOADER_WORKERS_MAX, SIM_GPUS_MAX, SIM_SEED_MAX, SIM_TRAINING_MAX,
    interval_arg, sim_memory_arg,
};
use crate::device::factory::BackendChoice;
use crate::quote::{cut, parser_complaint};

/// How a problem of an unknown key starts (after its line).
const UNKNOWN_KEY: &str = "unknown key";

/// How an unknown key's problem names the known key it is nearest to.
const DID_YOU_MEAN: &str = "did you mean";

/// The most problems of one file its error lists (the rest are counted).
const MAX_LISTED_PROBLEMS: usize = 5;

/// The most characters of the TOML parser's message an error keeps.
const MAX_PARSER_MESSAGE_CHARS: usize = 200;

/// Keys the file may hold, with what each expects.
pub const KNOWN_KEYS: &[(&str, &str)] = &[
    ("interval", "a duration string such as \"1s\""),
    ("backend", "\"auto\", \"sim\" or \"nvml\""),
    ("sim_gpus", "an integer 1–64"),
    ("sim_memory", "a size string such as \"80GiB\""),
    ("sim_seed", "an integer 0–9223372036854775807"),
    ("sim_training", "an integer 0–64"),
    ("sim_dataloader_workers", "an integer 0–64"),
    ("no_color", "true or false"),
    ("ascii", "true or false"),
];

#[derive(Debug, Error, PartialEq)]
pub enum ConfigFileError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
}

impl ConfigFileError {
    /// Why the file was not used, without its path: "line 1: …", or
    /// "cannot read it: …".
    pub fn reason(&self) -> String {
        match self {
            ConfigFileError::Invalid { message, .. } => message.clone(),
            ConfigFileError::Read { message, .. } => format!("cannot read it: {message}"),
        }
    }
}

/// The default location: `$XDG_CONFIG_HOME/vramtop/config.toml`
/// (`~/.config/vramtop/config.toml` when it is unset).
pub fn default_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("vramtop").join("config.toml"))
}

/// The line (from 1) of the byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    let before = text.get(..offset).unwrap_or(text);
    before.bytes().filter(|b| *b == b'\n').count() + 1
}

/// What a value was, for "found …": its text in the file (escaped and cut
/// short), or its kind where the file has no one text of it (a table).
fn found(text: &str, value: &toml::Spanned<DeValue<'_>>) -> String {
    match value.get_ref() {
        DeValue::Table(_) => "a table".to_string(),
        _ => text
            .get(value.span())
            .map_or_else(|| value.get_ref().type_str().to_string(), cut),
    }
}

/// A TOML integer of any size the file may write (one past `u64` or
/// `i64` included, so it is "out of range", not a parser's complaint).
fn integer(value: &DeValue<'_>) -> Option<i128> {
    match value {
        DeValue::Integer(n) => i128::from_str_radix(n.as_str(), n.radix()).ok(),
        _ => None,
    }
}

/// A config file's values, each checked with the same parser and range as
/// its flag; `None` where the file is silent.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConfigFile {
    /// `interval`, milliseconds.
    pub interval: Option<u64>,
    pub backend: Option<BackendChoice>,
    pub sim_gpus: Option<u32>,
    /// `sim_memory`, bytes.
    pub sim_memory: Option<u64>,
    pub sim_seed: Option<u64>,
    pub sim_training: Option<u32>,
    pub sim_dataloader_workers: Option<u32>,
    pub no_color: Option<bool>,
    pub ascii: Option<bool>,
}

/// Reads and validates a config file.
pub fn read_file(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let (shown, text) = read_text(path)?;
    parse_text(&shown, &text)
}

/// The file's path as messages name it, and its text.
fn read_text(path: &Path) -> Result<(String, String), ConfigFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError::Read {
        path: shown.clone(),
        message: crate::quote::io_reason(&e),
    })?;
    Ok((shown, text))
}

/// What a command does with a config file's unknown keys (a bad value is
/// an error for every command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownKeys {
    /// An error, as a bad value is: for the commands that sample (the
    /// dashboard, `record`, `serve`). The file is mostly their settings
    /// (`interval`, `backend`, `sim_*`), so an unknown key is most likely a
    /// misspelt one of them, which they would otherwise run without: a
    /// recording at another interval, the dashboard on another backend. A
    /// warning would not do: the dashboard's screen covers stderr at once,
    /// and `record` and `serve` run on long after it scrolled away.
    Refuse,
    /// A warning, and the rest of the file applies: for the one-shot
    /// commands (`open`, `doctor`, `check`), whose warning stays on the
    /// terminal above their output, and which most keys do not concern
    /// (`open` reads a file: `intervall = "2s"` changes nothing it does).
    Warn,
}

/// Reads a config file and applies every value the command line did not set
/// to the options the command has (a key for another command's option is
/// checked, then left alone: one file serves every command). `Ok` carries
/// the warning to say when `unknown` is [`UnknownKeys::Warn`] and the file
/// has unknown keys: the file, their lines and what they may have meant.
pub fn apply_file(
    targets: ConfigTargets<'_>,
    matches: &ArgMatches,
    path: &Path,
    unknown: UnknownKeys,
) -> Result<Option<String>, ConfigFileError> {
    let (shown, text) = read_text(path)?;
    let (file, warning) = parse_text_with(&shown, &text, unknown)?;
    file.apply(targets, matches);
    Ok(warning)
}

/// Like [`read_file`], for the file's text (`path` names it in messages):
/// an unknown key is an error.
pub fn parse_text(path: &str, text: &str) -> Result<ConfigFile, ConfigFileError> {
    parse_text_with(path, text, UnknownKeys::Refuse).map(|(file, _)| file)
}

/// [`parse_text`], doing with unknown keys what `unknown` says: with
/// [`UnknownKeys::Warn`], a file whose only problems are unknown keys is
/// read, and the warning saying them comes with it (in one line, as an
/// error would say them, and that the rest of the file applies).
pub fn parse_text_with(
    path: &str,
    text: &str,
    unknown: UnknownKeys,
) -> Result<(ConfigFile, Option<String>), ConfigFileError> {
    let invalid = |message: String| ConfigFileError::Invalid {
        path: path.to_string(),
        message,
    };
    // The spanned parse: each key knows where it is written, and values
    // are checked here against their flags' ranges (an integer past `i64`
    // too), not by a deserializer's wording.
    let document = DeTable::parse(text).map_err(|e| {
        // The message without toml's echo of the source line (which may be
        // megabytes long).
        invalid(parser_complaint(
            text,
            e.span().map(|span| span.start),
            e.message(),
            MAX_PARSER_MESSAGE_CHARS,
        ))
    })?;
    let mut entries: Vec<_> = document.get_ref().iter().collect();
    // In the file's order, so problems are said as they are met reading it.
    entries.sort_by_key(|(key, _)| key.span().start);
    let mut file = ConfigFile::default();
    let mut problems = Vec::new();
    let mut only_unknown_keys = true;
    for (key, value) in entries {
        if let Err(problem) = read_entry(&mut file, text, key, value) {
            only_unknown_keys &= problem.unknown_key;
            problems.push(problem.text);
        }
    }
    if problems.is_empty() {
        return Ok((file, None));
    }
    let message = problems_line(&problems);
    if only_unknown_keys && unknown == UnknownKeys::Warn {
        return Ok((
            file,
            Some(format!(
                "{path}: {message}; ignored, the rest of the file applies"
            )),
        ));
    }
    Err(invalid(message))
}

/// Every problem at once, so one edit fixes the file; the count bounds the
/// line a file of thousands of bad keys makes.
fn problems_line(problems: &[String]) -> String {
    let mut message = problems.first().cloned().unwrap_or_default();
    for problem in problems.iter().skip(1).take(MAX_LISTED_PROBLEMS - 1) {
        message.push_str("; ");
        message.push_str(problem);
    }
    if problems.len() > MAX_LISTED_PROBLEMS {
        message.push_str(&format!(
            "; and {} more",
            problems.len() - MAX_LISTED_PROBLEMS
        ));
    }
    // The known keys, where an unknown key's own text does not already
    // name the one it is nearest to.
    if problems
        .iter()
        .any(|p| p.contains(UNKNOWN_KEY) && !p.contains(DID_YOU_MEAN))
    {
        let known: Vec<&str> = KNOWN_KEYS.iter().map(|(k, _)| *k).collect();
        message.push_str(&format!(" (known keys: {})", known.join(", ")));
    }
    message
}

/// What is wrong with one `key = value` of the file.
struct Problem {
    /// "line N: …".
    text: String,
    /// Whether it is an unknown key (else a bad value).
    unknown_key: bool,
}

impl From<String> for Problem {
    fn from(text: String) -> Self {
        Problem {
            text,
            unknown_key: false,
        }
    }
}

/// The known key `key` is most likely a misspelling of
/// ([`crate::alloc::spelling::nearest`], as the allocator settings'
/// options suggest theirs).
fn nearest_key(key: &str) -> Option<&'static str> {
    crate::alloc::spelling::nearest(key, KNOWN_KEYS.iter().map(|(known, _)| *known))
}

/// Reads one `key = value` of the file into `file`, or says what is wrong
/// with it ("line N: …").
fn read_entry(
    file: &mut ConfigFile,
    text: &str,
    key: &toml::Spanned<std::borrow::Cow<'_, str>>,
    value: &toml::Spanned<DeValue<'_>>,
) -> Result<(), Problem> {
    let line = format!("line {}: ", line_at(text, key.span().start));
    let key = key.get_ref().as_ref();
    let Some((_, expected)) = KNOWN_KEYS.iter().find(|(k, _)| *k == key) else {
        let near = nearest_key(key)
            .map(|known| format!(" ({DID_YOU_MEAN} '{known}'?)"))
            .unwrap_or_default();
        return Err(Problem {
            text: format!("{line}{UNKNOWN_KEY} '{}'{near}", cut(key)),
            unknown_key: true,
        });
    };
    let bad = || {
        format!(
            "{line}'{key}' expects {expected}, found {}",
            found(text, value)
        )
    };
    let value = value.get_ref();
    match key {
        "interval" => {
            file.interval = Some(
                interval_arg(value.as_str().ok_or_else(bad)?)
                    .map_err(|e| format!("{line}'{key}': {e}"))?,
            );
        }
        "backend" => {
            file.backend = Some(match value.as_str() {
                Some("auto") => BackendChoice::Auto,
                Some("sim") => BackendChoice::Sim,
                Some("nvml") => BackendChoice::Nvml,
                _ => return Err(bad().into()),
            });
        }
        "sim_gpus" => file.sim_gpus = Some(u32_in(value, 1..=SIM_GPUS_MAX).ok_or_else(bad)?),
        "sim_memory" => {
            file.sim_memory = Some(
                sim_memory_arg(value.as_str().ok_or_else(bad)?)
                    .map_err(|e| format!("{line}'{key}': {e}"))?,
            );
        }
        "sim_seed" => {
            file.sim_seed = Some(
                integer(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| *n <= SIM_SEED_MAX)
                    .ok_or_else(bad)?,
            );
        }
        "sim_training" => {
            file.sim_training = Some(u32_in(value, 0..=SIM_TRAINING_MAX).ok_or_else(bad)?);
        }
        "sim_dataloader_workers" => {
            file.sim_dataloader_workers =
                Some(u32_in(value, 0..=SIM_DATALOADER_WORKERS_MAX).ok_or_else(bad)?);
        }
        "no_color" => file.no_color = Some(value.as_bool().ok_or_else(bad)?),
        "ascii" => file.ascii = Some(value.as_bool().ok_or_else(bad)?),
        _ => return Err(bad().into()),
    }
    Ok(())
}

/// A TOML integer in `range`, as its flag's `u32` value parser takes it.
fn u32_in(value: &DeValue<'_>, range: std::ops::RangeInclusive<u32>) -> Option<u32> {
    integer(value)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| range.contains(n))
}

impl ConfigFile {
    /// Sets each option the command has, the file gives and the command line
    /// (`matches`, the command's own) did not set.
    pub fn apply(&self, targets: ConfigTargets<'_>, matches: &ArgMatches) {
        let unset = |id: &str| matches.value_source(id) != Some(ValueSource::CommandLine);
        fn set<T: Copy>(slot: &mut T, value: Option<T>, unset: bool) {
            if let (Some(v), true) = (value, unset) {
                *slot = v;
            }
        }
        if let Some(device) = targets.device {
            set(&mut device.backend, self.backend, unset("backend"));
            set(&mut device.sim.sim_gpus, self.sim_gpus, unset("sim_gpus"));
            set(
                &mut device.sim.sim_memory,
                self.sim_memory,
                unset("sim_memory"),
            );
            set(&mut device.sim.sim_seed, self.sim_seed, unset("sim_seed"));
            set(
                &mut device.sim.sim_training,
                self.sim_training,
                unset("sim_training"),
            );
            set(
                &mut device.sim.sim_dataloader_workers,
                self.sim_dataloader_workers,
                unset("sim_dataloader_workers"),
            );
        }
        if let Some(sampling) = targets.sampling {
            set(&mut sampling.interval, self.interval, unset("interval"));
        }
        if let Some(display) = targets.display {
            set(&mut display.no_color, self.no_color, unset("no_color"));
            set(&mut display.ascii, self.ascii, unset("ascii"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::{CommandFactory, FromArgMatches};

    fn parse(args: &[&str]) -> (Cli, ArgMatches) {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("vramtop").chain(args.iter().copied()))
            .expect("valid arguments");
        let cli = Cli::from_arg_matches(&matches).expect("valid arguments");
        (cli, matches)
    }

    fn apply(cli: &mut Cli, matches: &ArgMatches, text: &str) -> Result<(), ConfigFileError> {
        let file = parse_text("c.toml", text)?;
        let own = matches.subcommand().map_or(matches, |(_, m)| m);
        file.apply(cli.config_targets(), own);
        Ok(())
    }

    #[test]
    fn file_values_apply_where_the_command_line_is_silent() {
        let (mut cli, m) = parse(&["--sim-gpus", "2"]);
        apply(
            &mut cli,
            &m,
            "interval = \"2s\"\nsim_gpus = 8\nbackend = \"sim\"\nsim_memory = \"24GiB\"\nascii = true\n",
        )
        .expect("valid file");
        let d = &cli.dashboard;
        assert_eq!(d.sampling.interval, 2000);
        assert_eq!(d.device.sim.sim_gpus, 2, "the command line wins");
        assert_eq!(d.device.backend, BackendChoice::Sim);
        assert_eq!(d.device.sim.sim_memory, 24 << 30);
        assert!(d.display.ascii);
    }

    #[test]
    fn file_values_apply_to_a_commands_own_options_and_skip_others() {
        let (mut cli, m) = parse(&["serve", "--sim-seed", "7"]);
        apply(
            &mut cli,
            &m,
            "interval = \"3s\"\nsim_seed = 9\nsim_gpus = 4\nascii = true\n",
        )
        .expect("valid file");
        let Some(Command::Serve {
            device, sampling, ..
        }) = &cli.command
        else {
            panic!("serve parsed as {:?}", cli.command);
        };
        assert_eq!(sampling.interval, 3000);
        assert_eq!(device.sim.sim_seed, 7, "the command line wins");
        assert_eq!(device.sim.sim_gpus, 4);
        // `open` has display options only: the telemetry keys are left alone.
        let (mut cli, m) = parse(&["open", "x.pickle"]);
        apply(&mut cli, &m, "sim_gpus = 4\nno_color = true\n").expect("valid file");
        let Some(Command::Open { display, .. }) = &cli.command else {
            panic!("open parsed as {:?}", cli.command);
        };
        assert!(display.no_color);
    }

    #[test]
    fn unknown_keys_are_reported_with_their_line() {
        let err =
            parse_text("c.toml", "interval = \"1s\"\n\nintervl = \"2s\"\n").expect_err("typo");
        let text = err.to_string();
        assert!(
            text.contains("line 3") && text.contains("intervl") && text.contains("interval"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_key_is_a_warning_for_a_command_that_warns_and_the_rest_applies() {
        let text = "ascii = true\nintervall = \"2s\"\n";
        let (file, warning) =
            parse_text_with("c.toml", text, UnknownKeys::Warn).expect("read with a warning");
        assert_eq!(file.ascii, Some(true), "the rest of the file applies");
        let warning = warning.expect("a warning");
        assert!(
            warning
                .starts_with("c.toml: line 2: unknown key 'intervall' (did you mean 'interval'?)"),
            "{warning}"
        );
        assert!(
            warning.ends_with("; ignored, the rest of the file applies"),
            "{warning}"
        );
        assert_eq!(warning.lines().count(), 1, "{warning}");
        let err = parse_text_with("c.toml", text, UnknownKeys::Refuse).expect_err("refused");
        assert!(
            err.to_string()
                .contains("line 2: unknown key 'intervall' (did you mean 'interval'?)"),
            "{err}"
        );
        // A bad value is an error for every command, unknown keys beside it too.
        let bad = "intervall = \"2s\"\nsim_gpus = 0\n";
        let err = parse_text_with("c.toml", bad, UnknownKeys::Warn).expect_err("a bad value");
        assert!(
            err.to_string().contains("intervall") && err.to_string().contains("sim_gpus"),
            "{err}"
        );
        // A file without problems has no warning.
        let (_, warning) =
            parse_text_with("c.toml", "ascii = true\n", UnknownKeys::Warn).expect("fine");
        assert!(warning.is_none());
    }

    #[test]
    fn an_unknown_key_suggests_the_known_key_a_typo_or_two_away_and_no_other() {
        for (key, near) in [
            ("intervall", Some("interval")),
            ("intervl", Some("interval")),
            ("Interval", Some("interval")),
            ("no_colour", Some("no_color")),
            ("backnd", Some("backend")),
            ("sim_gpsu", Some("sim_gpus")),
            ("asci", Some("ascii")),
            ("gpus", None),
            ("theme", None),
            ("a", None),
        ] {
            assert_eq!(nearest_key(key), near, "{key}");
        }
        let err = parse_text("c.toml", "theme = \"dark\"\n").expect_err("unknown");
        assert!(!err.to_string().contains("did you mean"), "{err}");
        assert!(err.to_string().contains("(known keys: "), "{err}");
        // A key with its near key named needs no list of them all.
        let err = parse_text("c.toml", "intervall = \"2s\"\n").expect_err("unknown");
        assert!(!err.to_string().contains("known keys"), "{err}");
    }

    #[test]
    fn the_commands_that_sample_refuse_unknown_keys_and_the_others_warn() {
        for (args, unknown) in [
            (&[][..], UnknownKeys::Refuse),
            (&["--once"][..], UnknownKeys::Refuse),
            (&["record", "r.jsonl"][..], UnknownKeys::Refuse),
            (&["serve"][..], UnknownKeys::Refuse),
            (&["open", "x.pickle", "--summary"][..], UnknownKeys::Warn),
            (&["doctor"][..], UnknownKeys::Warn),
            (&["check"][..], UnknownKeys::Warn),
        ] {
            let (mut cli, _) = parse(args);
            let targets = cli.config_targets();
            assert!(targets.path.is_some(), "{args:?} reads the config file");
            assert_eq!(targets.unknown_keys(), unknown, "{args:?}");
        }
    }

    #[test]
    fn every_problem_of_the_file_is_said_at_once_in_one_line() {
        let err = parse_text("c.toml", "interval = \"1s\"\nbogus = 1\nsim_gpus = 0\n")
            .expect_err("two problems");
        let text = err.to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        let (unknown, range) = (
            text.find("line 2: unknown key 'bogus'"),
            text.find("line 3: 'sim_gpus' expects an integer 1–64, found 0"),
        );
        assert!(
            unknown.is_some() && range.is_some() && unknown < range,
            "{text}"
        );
        // A file of many bad keys lists the first few and counts the rest.
        let many: String = (0..40).map(|i| format!("bad{i} = 1\n")).collect();
        let text = parse_text("c.toml", &many).expect_err("many").to_string();
        assert!(text.contains("bad4") && !text.contains("bad5 "), "{text}");
        assert!(
            text.contains("; and 35 more (known keys: interval,"),
            "{text}"
        );
        assert_eq!(text.matches("known keys").count(), 1, "{text}");
    }

    #[test]
    fn wrong_types_and_bad_toml_say_what_was_expected() {
        let err = parse_text("c.toml", "sim_gpus = \"four\"\n").expect_err("type");
        assert!(err.to_string().contains("expects an integer"), "{err}");
        let err = parse_text("c.toml", "interval = [\n").expect_err("syntax");
        assert!(err.to_string().starts_with("c.toml:"), "{err}");
    }

    #[test]
    fn a_size_or_duration_without_a_unit_is_refused_in_the_file_too() {
        let err = parse_text("c.toml", "sim_memory = \"24\"\n").expect_err("no unit");
        assert!(err.to_string().contains("24 what?"), "{err}");
        let err = parse_text("c.toml", "interval = \"2\"\n").expect_err("no unit");
        assert!(err.to_string().contains("2 what?"), "{err}");
    }

    #[test]
    fn an_interval_past_an_hour_is_refused_in_the_file_as_on_the_command_line() {
        let err = parse_text("c.toml", "interval = \"99999999h\"\n").expect_err("too long");
        assert!(
            err.to_string()
                .contains("line 1: 'interval': '99999999h' is too long: the most is 1h"),
            "{err}"
        );
        let file = parse_text("c.toml", "interval = \"1h\"\n").expect("the most");
        assert_eq!(file.interval, Some(3_600_000));
    }

    #[test]
    fn a_size_or_duration_with_a_plus_sign_is_not_one_in_the_file_either() {
        let err = parse_text("c.toml", "sim_memory = \"+24GiB\"\n").expect_err("a sign");
        assert!(
            err.to_string()
                .contains("line 1: 'sim_memory': '+24GiB' is not a size: write e.g."),
            "{err}"
        );
        let err = parse_text("c.toml", "interval = \"+2s\"\n").expect_err("a sign");
        assert!(
            err.to_string()
                .contains("line 1: 'interval': '+2s' is not a duration: write e.g."),
            "{err}"
        );
    }

    #[test]
    fn numeric_options_have_the_same_bounds_on_the_command_line_and_in_the_file() {
        let ints: &[i64] = &[-1, 0, 1, 64, 65, 100_000, 4_294_967_295, i64::MAX];
        for (key, flag) in [
            ("sim_gpus", "--sim-gpus"),
            ("sim_training", "--sim-training"),
            ("sim_dataloader_workers", "--sim-dataloader-workers"),
            ("sim_seed", "--sim-seed"),
        ] {
            for v in ints {
                let arg = format!("{flag}={v}");
                let cli_ok = Cli::command()
                    .try_get_matches_from(["vramtop", arg.as_str()])
                    .is_ok();
                let file_ok = parse_text("c.toml", &format!("{key} = {v}\n")).is_ok();
                assert_eq!(
                    cli_ok, file_ok,
                    "{key} = {v}: command line {cli_ok}, file {file_ok}"
                );
            }
        }
        for (key, flag, texts) in [
            (
                "interval",
                "--interval",
                &[
                    "9ms",
                    "10ms",
                    "1s",
                    "10m",
                    "5",
                    "99999999999999999999s",
                    "x",
                ][..],
            ),
            (
                "sim_memory",
                "--sim-memory",
                &["0", "1", "1B", "80GiB", "16EiB", "1e30", "big"][..],
            ),
        ] {
            for t in texts {
                let arg = format!("{flag}={t}");
                let cli_ok = Cli::command()
                    .try_get_matches_from(["vramtop", arg.as_str()])
                    .is_ok();
                let file_ok = parse_text("c.toml", &format!("{key} = \"{t}\"\n")).is_ok();
                assert_eq!(
                    cli_ok, file_ok,
                    "{key} = {t}: command line {cli_ok}, file {file_ok}"
                );
            }
        }
    }

    #[test]
    fn sim_training_above_64_is_refused_on_the_command_line() {
        for v in ["65", "100000", "4294967295"] {
            let e = Cli::command()
                .try_get_matches_from(["vramtop", "--sim-training", v])
                .expect_err("above the bound");
            assert!(e.to_string().contains("0..=64"), "{e}");
        }
    }

    #[test]
    fn a_huge_value_or_key_is_quoted_cut_short() {
        let huge = "x".repeat(1 << 20);
        for text in [
            format!("interval = \"{huge}\"\n"),
            format!("sim_memory = \"{huge}\"\n"),
            format!("sim_gpus = \"{huge}\"\n"),
            format!("{huge} = 1\n"),
            format!("interval = {huge}\n"),
        ] {
            let err = parse_text("c.toml", &text).expect_err("bad value");
            let shown = err.to_string();
            assert!(
                shown.len() < 400,
                "{} bytes: {}",
                shown.len(),
                &shown[..400]
            );
            assert!(shown.contains("line 1"), "{shown}");
        }
    }

    #[test]
    fn an_unknown_table_or_dotted_key_names_its_line() {
        for (text, line) in [
            ("interval = \"1s\"\n\n[gpu]\nx = 1\n", 3),
            ("[dashboard]\n", 1),
            ("interval = \"1s\"\n[[x]]\n", 2),
            ("a.b = 1\n", 1),
            ("\"quoted\" = 1\n", 1),
        ] {
            let err = parse_text("c.toml", text).expect_err("unknown key");
            let shown = err.to_string();
            assert!(
                shown.contains(&format!("line {line}: unknown key")),
                "{text:?}: {shown}"
            );
            assert!(!shown.contains("line 0"), "{shown}");
        }
    }

    #[test]
    fn an_unknown_quoted_key_names_the_line_it_is_on() {
        for (text, line, shown_key) in [
            ("interval = \"2s\"\n\n\"interval \" = 2\n", 3, "'interval '"),
            (
                "interval = \"2s\"\n\"\\u001b[31mevil\" = 1\n",
                2,
                "'\\u{1b}[31mevil'",
            ),
            (
                "# interval = 1\nascii = true\n'ascii ' = 1\n",
                3,
                "'ascii '",
            ),
            ("ascii = true\n[\"interval \"]\nx = 1\n", 2, "'interval '"),
            ("ascii = true\n  \"a\" . \"b\" = 1\n", 2, "'a'"),
        ] {
            let err = parse_text("c.toml", text).expect_err("unknown key");
            let shown = err.to_string();
            assert!(
                shown.contains(&format!("line {line}: unknown key {shown_key}")),
                "{text:?}: {shown}"
            );
        }
    }

    #[test]
    fn an_integer_past_i64_or_u64_is_out_of_range_not_a_parser_complaint() {
        for (text, said) in [
            (
                "sim_gpus = 99999999999999999999\n",
                "line 1: 'sim_gpus' expects an integer 1–64, found 99999999999999999999",
            ),
            (
                "\nsim_seed = 18446744073709551615\n",
                "line 2: 'sim_seed' expects an integer 0–9223372036854775807, \
                 found 18446744073709551615",
            ),
            (
                "sim_training = -99999999999999999999\n",
                "line 1: 'sim_training' expects an integer 0–64, found -99999999999999999999",
            ),
            (
                "sim_dataloader_workers = 0xffffffffffffffffffff\n",
                "'sim_dataloader_workers' expects an integer 0–64, found 0xffffffffffffffffffff",
            ),
            (
                "sim_gpus = 9999999999999999999999999999999999999999999\n",
                "'sim_gpus' expects an integer 1–64, found 99999999999999",
            ),
        ] {
            let err = parse_text("c.toml", text).expect_err("out of range");
            let shown = err.to_string();
            assert!(shown.contains(said), "{text:?}: {shown}");
        }
        assert_eq!(
            parse_text("c.toml", "sim_seed = 9_223_372_036_854_775_807\n")
                .expect("the largest seed")
                .sim_seed,
            Some(SIM_SEED_MAX)
        );
        assert_eq!(
            parse_text("c.toml", "sim_gpus = 0x10\n")
                .expect("hex")
                .sim_gpus,
            Some(16)
        );
    }

    #[test]
    fn a_syntax_error_names_its_own_line_and_column_even_at_a_line_start() {
        let err = parse_text("c.toml", "interval = \"2s\"\nsim_gpus = 2\n= 3\n")
            .expect_err("a key is missing");
        let shown = err.to_string();
        assert!(shown.contains("line 3, column 1: "), "{shown}");
        assert!(!shown.contains('\n'), "{shown}");
    }

    #[test]
    fn a_bad_value_overridden_on_the_command_line_is_still_reported() {
        let (mut cli, m) = parse(&["--interval", "2s", "--sim-gpus", "3"]);
        let err = apply(&mut cli, &m, "interval = \"soon\"\n").expect_err("a bad value");
        assert!(
            err.to_string().contains("'soon' is not a duration"),
            "{err}"
        );
        let err = apply(&mut cli, &m, "sim_gpus = 500\n").expect_err("too many");
        assert!(err.to_string().contains("expects an integer 1–64"), "{err}");
        // A good value is still overridden.
        apply(&mut cli, &m, "interval = \"5s\"\n").expect("valid");
        assert_eq!(cli.dashboard.sampling.interval, 2000);
    }
}
