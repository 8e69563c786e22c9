//! The optional TOML config file: the same keys as the command line
//! (`interval = "2s"`, `backend = "sim"`, `sim_gpus = 4`, …). The command
//! line wins, but a bad value is an error even where the command line
//! overrides it; an unknown key is an error that names its line. Input is
//! quoted cut short ([`crate::quote::cut`]).

use std::path::{Path, PathBuf};

use clap::ArgMatches;
use clap::parser::ValueSource;
use thiserror::Error;

use super::{Cli, SIM_GPUS_MAX, SIM_SEED_MAX, SIM_TRAINING_MAX, duration_arg, size_arg};
use crate::device::factory::BackendChoice;
use crate::quote::cut;

/// Keys the file may hold, with what each expects.
pub const KNOWN_KEYS: &[(&str, &str)] = &[
    ("interval", "a duration string such as \"1s\""),
    ("backend", "\"auto\", \"sim\" or \"nvml\""),
    ("sim_gpus", "an integer 1–64"),
    ("sim_memory", "a size string such as \"80GiB\""),
    ("sim_seed", "an integer 0–9223372036854775807"),
    ("sim_training", "an integer 0–64"),
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

/// The default location: `$XDG_CONFIG_HOME/vramtop/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("vramtop").join("config.toml"))
}

fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}

/// Reads and validates a config file, then applies every value the command
/// line did not set.
pub fn apply_file(cli: &mut Cli, matches: &ArgMatches, path: &Path) -> Result<(), ConfigFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError::Read {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    apply_text(cli, matches, &shown, &text)
}

/// Like [`apply_file`], for the file's text.
pub fn apply_text(
    cli: &mut Cli,
    matches: &ArgMatches,
    path: &str,
    text: &str,
) -> Result<(), ConfigFileError> {
    let invalid = |message: String| ConfigFileError::Invalid {
        path: path.to_string(),
        message,
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        // The message without toml's echo of the source line (which may be
        // megabytes long).
        let line = e
            .span()
            .and_then(|span| text.get(..span.start))
            .map_or(0, |before| before.lines().count().max(1));
        invalid(format!(
            "line {line}: {}",
            cut(e.message().trim()).replace('\n', " ")
        ))
    })?;
    let from_cli = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    // A value the command line overrides is still checked, into these.
    let mut overridden_device = cli.device.clone();
    let mut overridden_display = cli.display.clone();
    for (key, value) in &table {
        let line = line_of(text, key);
        let Some((_, expected)) = KNOWN_KEYS.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = KNOWN_KEYS.iter().map(|(k, _)| *k).collect();
            return Err(invalid(format!(
                "line {line}: unknown key '{}' (known: {})",
                cut(key),
                known.join(", ")
            )));
        };
        let bad = || {
            invalid(format!(
                "line {line}: '{key}' expects {expected}, found {}",
                cut(&value.to_string())
            ))
        };
        let (device, display) = if from_cli(key) {
            (&mut overridden_device, &mut overridden_display)
        } else {
            (&mut cli.device, &mut cli.display)
        };
        match key.as_str() {
            "interval" => {
                display.interval = duration_arg(value.as_str().ok_or_else(bad)?)
                    .map_err(|e| invalid(format!("line {line}: {e}")))?;
            }
            "backend" => {
                device.backend = match value.as_str() {
                    Some("auto") => BackendChoice::Auto,
                    Some("sim") => BackendChoice::Sim,
                    Some("nvml") => BackendChoice::Nvml,
                    _ => return Err(bad()),
                };
            }
            "sim_gpus" => {
                device.sim_gpus = value
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=SIM_GPUS_MAX).contains(n))
                    .ok_or_else(bad)?;
            }
            "sim_memory" => {
                device.sim_memory = size_arg(value.as_str().ok_or_else(bad)?)
                    .map_err(|e| invalid(format!("line {line}: {e}")))?;
            }
            "sim_seed" => {
                device.sim_seed = value
                    .as_integer()
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| *n <= SIM_SEED_MAX)
                    .ok_or_else(bad)?;
            }
            "sim_training" => {
                device.sim_training = value
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n <= SIM_TRAINING_MAX)
                    .ok_or_else(bad)?;
            }
            "no_color" => display.no_color = value.as_bool().ok_or_else(bad)?,
            "ascii" => display.ascii = value.as_bool().ok_or_else(bad)?,
            _ => return Err(bad()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn parse(args: &[&str]) -> (Cli, ArgMatches) {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("vramtop").chain(args.iter().copied()))
            .expect("valid arguments");
        let cli = Cli::from_arg_matches(&matches).expect("valid arguments");
        (cli, matches)
    }

    #[test]
    fn file_values_apply_where_the_command_line_is_silent() {
        let (mut cli, m) = parse(&["--sim-gpus", "2"]);
        apply_text(
            &mut cli,
            &m,
            "c.toml",
            "interval = \"2s\"\nsim_gpus = 8\nbackend = \"sim\"\nsim_memory = \"24GiB\"\nascii = true\n",
        )
        .expect("valid file");
        assert_eq!(cli.display.interval, 2000);
        assert_eq!(cli.device.sim_gpus, 2, "the command line wins");
        assert_eq!(cli.device.backend, BackendChoice::Sim);
        assert_eq!(cli.device.sim_memory, 24 << 30);
        assert!(cli.display.ascii);
    }

    #[test]
    fn unknown_keys_are_reported_with_their_line() {
        let (mut cli, m) = parse(&[]);
        let err = apply_text(
            &mut cli,
            &m,
            "c.toml",
            "interval = \"1s\"\n\nintervl = \"2s\"\n",
        )
        .expect_err("typo");
        let text = err.to_string();
        assert!(
            text.contains("line 3") && text.contains("intervl") && text.contains("interval"),
            "{text}"
        );
    }

    #[test]
    fn wrong_types_and_bad_toml_say_what_was_expected() {
        let (mut cli, m) = parse(&[]);
        let err = apply_text(&mut cli, &m, "c.toml", "sim_gpus = \"four\"\n").expect_err("type");
        assert!(err.to_string().contains("expects an integer"), "{err}");
        let err = apply_text(&mut cli, &m, "c.toml", "interval = [\n").expect_err("syntax");
        assert!(err.to_string().starts_with("c.toml:"), "{err}");
    }

    #[test]
    fn numeric_options_have_the_same_bounds_on_the_command_line_and_in_the_file() {
        let ints: &[i64] = &[-1, 0, 1, 64, 65, 100_000, 4_294_967_295, i64::MAX];
        for (key, flag) in [
            ("sim_gpus", "--sim-gpus"),
            ("sim_training", "--sim-training"),
            ("sim_seed", "--sim-seed"),
        ] {
            for v in ints {
                let arg = format!("{flag}={v}");
                let cli_ok = Cli::command()
                    .try_get_matches_from(["vramtop", arg.as_str()])
                    .is_ok();
                let (mut cli, m) = parse(&[]);
                let file_ok = apply_text(&mut cli, &m, "c.toml", &format!("{key} = {v}\n")).is_ok();
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
                &["9ms", "10ms", "1s", "10m", "99999999999999999999s", "x"][..],
            ),
            (
                "sim_memory",
                "--sim-memory",
                &["0", "1", "80GiB", "16EiB", "1e30", "big"][..],
            ),
        ] {
            for t in texts {
                let arg = format!("{flag}={t}");
                let cli_ok = Cli::command()
                    .try_get_matches_from(["vramtop", arg.as_str()])
                    .is_ok();
                let (mut cli, m) = parse(&[]);
                let file_ok =
                    apply_text(&mut cli, &m, "c.toml", &format!("{key} = \"{t}\"\n")).is_ok();
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
            let (mut cli, m) = parse(&[]);
            let err = apply_text(&mut cli, &m, "c.toml", &text).expect_err("bad value");
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
    fn a_bad_value_overridden_on_the_command_line_is_still_reported() {
        let (mut cli, m) = parse(&["--interval", "2s", "--sim-gpus", "3"]);
        let err =
            apply_text(&mut cli, &m, "c.toml", "interval = \"soon\"\n").expect_err("a bad value");
        assert!(
            err.to_string().contains("'soon' is not a duration"),
            "{err}"
        );
        let err = apply_text(&mut cli, &m, "c.toml", "sim_gpus = 500\n").expect_err("too many");
        assert!(err.to_string().contains("expects an integer 1–64"), "{err}");
        // A good value is still overridden.
        apply_text(&mut cli, &m, "c.toml", "interval = \"5s\"\n").expect("valid");
        assert_eq!(cli.display.interval, 2000);
    }
}
