use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, FromArgMatches};
use vramtop::cli::{self, Cli, config};
use vramtop::quote::cut;

/// The first failed write to the log file: said once, at exit (during the
/// dashboard stderr is the screen).
static LOG_WRITE_ERROR: OnceLock<String> = OnceLock::new();

/// The log file as tracing writes it: a write that fails is remembered
/// (the first one) and the line dropped, so nothing is printed over the
/// dashboard and the run goes on.
struct LogFile {
    file: std::fs::File,
    path: PathBuf,
}

impl std::io::Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Err(e) = self.file.write_all(buf) {
            let _ = LOG_WRITE_ERROR.set(format!(
                "cannot write the log file {}: {e}; the log lines from then on are lost",
                self.path.display()
            ));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.file.flush();
        Ok(())
    }
}

/// Whether `path`'s folder exists: vramtop creates no folder for a path it
/// was given (a typo would otherwise make a tree somewhere).
fn missing_folder(path: &Path) -> Option<&Path> {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
}

/// Logs go to a file, never to the terminal (the dashboard owns it). A
/// `--log-file` in a missing folder or that cannot be opened is an error;
/// the default file's folder is created, and when that file cannot be
/// opened it is said once and logging is off.
fn init_logging(cli: &Cli) -> Result<(), String> {
    let (path, explicit) = match &cli.log_file {
        Some(p) => (p.clone(), true),
        None => {
            let Some(p) = dirs::state_dir()
                .or_else(dirs::cache_dir)
                .map(|d| d.join("vramtop").join("vramtop.log"))
            else {
                return Ok(());
            };
            (p, false)
        }
    };
    if explicit {
        if let Some(dir) = missing_folder(&path) {
            return Err(format!(
                "cannot write the log file {}: its folder {} does not exist \
                 (vramtop creates no folders for --log-file)",
                path.display(),
                dir.display()
            ));
        }
    } else if let Some(dir) = path.parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        cli::say_warning(format_args!(
            "cannot create {} for the log: {e}; logging is off (--log-file FILE to choose one)",
            dir.display()
        ));
        return Ok(());
    }
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if explicit => {
            return Err(format!("cannot open the log file {}: {e}", path.display()));
        }
        Err(e) => {
            cli::say_warning(format_args!(
                "cannot open the log file {}: {e}; logging is off (--log-file FILE to choose one)",
                path.display()
            ));
            return Ok(());
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("VRAMTOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .log_internal_errors(false)
        .with_writer(std::sync::Mutex::new(LogFile { file, path }))
        .try_init();
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "vramtop started");
    Ok(())
}

/// Exits with clap's usage error (exit 2) under vramtop's one error
/// prefix, the invalid value quoted cut short (an argument may be 128 KiB
/// long); `--help` and `--version` print as clap prints them.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    if let Some(ContextValue::String(value)) = e.get(ContextKind::InvalidValue)
        && cut(value) != *value
    {
        let arg = e
            .get(ContextKind::InvalidArg)
            .map_or_else(String::new, |a| format!(" for '{a}'"));
        let why = std::error::Error::source(&e)
            .map(|s| format!(": {}", s.to_string().replace(value.as_str(), &cut(value))))
            .unwrap_or_default();
        let _ = writeln!(
            std::io::stderr(),
            "{}invalid value '{}'{arg}{why}\n\nFor more information, try '--help'.",
            cli::ERROR_PREFIX,
            cut(value)
        );
        std::process::exit(i32::from(cli::EXIT_BAD_INPUT));
    }
    // clap's text starts with "error: "; the prefix names the program.
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let text = with_vramtop_tips(e.kind(), text);
    let _ = write!(std::io::stderr(), "{}{text}", cli::ERROR_PREFIX);
    std::process::exit(i32::from(cli::EXIT_BAD_INPUT));
}

/// clap's usage text with its tips made right for vramtop: an option the
/// command does not take is not a value to pass after `--` (clap's tip
/// for it), and a command's option written before the command is told
/// where it goes.
fn with_vramtop_tips(kind: clap::error::ErrorKind, text: &str) -> String {
    use clap::error::ErrorKind;
    let mut lines: Vec<String> = Vec::new();
    let mut skip_blank = false;
    for line in text.lines() {
        if kind == ErrorKind::UnknownArgument
            && line.trim_start().starts_with("tip: to pass '")
            && line.contains("as a value, use '-- ")
        {
            // The blank line after the tip goes with it.
            skip_blank = true;
            continue;
        }
        if skip_blank && line.is_empty() {
            skip_blank = false;
            continue;
        }
        skip_blank = false;
        lines.push(line.to_string());
    }
    if kind == ErrorKind::ArgumentConflict
        && let Some(first) = lines.first().cloned()
        && let Some(rest) = first.strip_prefix("the subcommand '")
        && let Some((command, rest)) = rest.split_once('\'')
        && let Some(option) = rest
            .strip_prefix(" cannot be used with '")
            .and_then(|o| o.strip_suffix('\''))
    {
        lines.insert(1, String::new());
        lines.insert(
            2,
            format!("  tip: a command's options come after it: vramtop {command} {option}"),
        );
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn main() -> ExitCode {
    vramtop::shell::heap::tune();
    // color-eyre first, so that ratatui's panic hook (installed later)
    // restores the terminal before the report is printed.
    if let Err(e) = color_eyre::install() {
        eprintln!("vramtop: cannot install the error reporter: {e}");
    }
    let matches = Cli::command()
        .try_get_matches()
        .unwrap_or_else(|e| usage_error(e));
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    let own_matches = matches.subcommand().map_or(&matches, |(_, m)| m);
    let is_doctor = cli.is_doctor();
    let targets = cli.config_targets();
    let mut config_read = None;
    // A command that reads no config file has no `--config`.
    if let Some(explicit) = targets.path {
        let config_path = explicit
            .clone()
            .or_else(|| config::default_path().filter(|p| p.exists()));
        if let Some(path) = config_path {
            match config::apply_file(targets, own_matches, &path) {
                Ok(()) => config_read = Some(path),
                // doctor is where a broken setup is diagnosed: it runs on.
                Err(e) if is_doctor => {
                    cli::say_warning(format_args!("{e}; doctor runs without the config file"));
                }
                Err(e) => {
                    cli::say_error(e);
                    return ExitCode::from(cli::EXIT_BAD_INPUT);
                }
            }
        }
    }
    if let Some(path) = config_read {
        cli.note_config_read(path);
    }
    if let Err(e) = init_logging(&cli) {
        cli::say_error(e);
        return ExitCode::from(cli::EXIT_BAD_INPUT);
    }
    let code = match cli::run(cli) {
        Ok(code) => code,
        Err(report) => {
            cli::say_error(format_args!("{report:#}"));
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    };
    if let Some(e) = LOG_WRITE_ERROR.get() {
        cli::say_warning(e);
    }
    code
}
