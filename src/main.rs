use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, FromArgMatches};
use vramtop::cli::{self, Cli, config};
use vramtop::quote::{cut, escape_controls};

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

/// Exits with clap's usage error (exit 2) as one line under vramtop's
/// error prefix, ending with the help to read ("(see 'vramtop open
/// --help')"): clap's own text without its usage block and "For more
/// information" line, its tips and lists folded into the line; the
/// arguments it quotes cut short (an argument may be 128 KiB long) and
/// their control characters escaped. The help (`-h`, `--help`, `vramtop
/// help COMMAND`) prints wrapped to the terminal (`cli::help`), the
/// version as clap prints it.
fn usage_error(mut e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        cli::help::print_and_exit(&e)
    }
    if e.kind() == ErrorKind::DisplayVersion {
        e.exit()
    }
    // What the user typed, which clap quotes whole: cut short and its
    // control characters escaped before clap renders it. Not after:
    // rendering drops escape sequences as if they were clap's own colours,
    // so an argument with one would read as something else typed and the
    // rest of its control characters could no longer be found to escape.
    let quoted: Vec<_> = e
        .context()
        .filter_map(|(kind, value)| match value {
            ContextValue::String(v) => Some((kind, ContextValue::String(cut(v)))),
            ContextValue::Strings(vs) => Some((
                kind,
                ContextValue::Strings(vs.iter().map(|v| cut(v)).collect()),
            )),
            _ => None,
        })
        .collect();
    for (kind, value) in quoted {
        e.insert(kind, value);
    }
    // clap's text starts with "error: "; the prefix names the program.
    let rendered = e.render().to_string();
    let text = rendered.strip_prefix("error: ").unwrap_or(&rendered);
    // `open FILE --at oom`: "--summary not provided" would read as if
    // `open` always needs it.
    let missing_summary = e.kind() == ErrorKind::MissingRequiredArgument
        && matches!(
            e.get(ContextKind::InvalidArg),
            Some(ContextValue::Strings(missing)) if missing.len() == 1 && missing[0] == "--summary"
        );
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // `vramtop --no-color open FILE`: the command line with the option
    // where it goes, or why it cannot go there.
    let misplaced = (e.kind() == ErrorKind::ArgumentConflict
        && text.starts_with("the subcommand '"))
    .then(|| cli::misplaced_options_tip(&args))
    .flatten();
    let message = missing_summary
        .then(|| cli::summary_only_message(&args))
        .flatten()
        .unwrap_or_else(|| one_line_usage_error(e.kind(), text, misplaced));
    exit_usage(&message)
}

/// Exits with a usage error (exit 2): `message` on one line under
/// vramtop's error prefix, ending with the help to read. Every usage error
/// ends here, clap's and those checked after parsing.
fn exit_usage(message: &str) -> ! {
    // A value parser's own message may quote input too: whatever control
    // character is left is shown, never sent to the terminal.
    let message = escape_controls(message);
    let _ = writeln!(
        std::io::stderr(),
        "{}{message} (see '{} --help')",
        cli::ERROR_PREFIX,
        help_command(std::env::args_os().skip(1))
    );
    std::process::exit(i32::from(cli::EXIT_BAD_INPUT));
}

/// The command whose `--help` a usage error points to: `vramtop` and the
/// subcommands named in `args` (the first argument naming one, then
/// within it), so that `vramtop open a b` points to `vramtop open --help`.
fn help_command(args: impl Iterator<Item = std::ffi::OsString>) -> String {
    let mut command = Cli::command();
    let mut path = vec![command.get_name().to_string()];
    for arg in args {
        let Some(arg) = arg.to_str() else {
            continue;
        };
        if arg == "--" {
            break;
        }
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_string());
        command = sub;
    }
    path.join(" ")
}

/// clap's usage-error text as one line, with its tips made right for
/// vramtop: the first line, then what clap lists under it (the missing
/// arguments, the possible values), then its tips after "; ". The usage
/// block and the "For more information" line go: the caller names the
/// help instead. An option the command does not take is not a value to
/// pass after `--` (clap's tip for it is dropped); `misplaced` is the tip
/// for a command's options written before the command
/// ([`cli::misplaced_options_tip`]), said first.
fn one_line_usage_error(
    kind: clap::error::ErrorKind,
    text: &str,
    misplaced: Option<String>,
) -> String {
    use clap::error::ErrorKind;
    let mut lines = text
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .map(str::trim)
        .filter(|line| !line.is_empty());
    let mut message = lines.next().unwrap_or("bad command line").to_string();
    let mut listed: Vec<&str> = Vec::new();
    let mut tips: Vec<String> = Vec::new();
    for line in lines {
        match line.strip_prefix("tip: ") {
            Some(tip)
                if kind == ErrorKind::UnknownArgument
                    && tip.starts_with("to pass '")
                    && tip.contains("as a value, use '-- ") => {}
            Some(_) => tips.push(line.to_string()),
            None => listed.push(line),
        }
    }
    if let Some(tip) = misplaced {
        tips.insert(0, format!("tip: {tip}"));
    }
    if !listed.is_empty() {
        // "not provided:" lists one argument a line: a list after a colon.
        let separator = if message.ends_with(':') { ", " } else { " " };
        message.push(' ');
        message.push_str(&listed.join(separator));
    }
    for tip in tips {
        message.push_str("; ");
        message.push_str(&tip);
    }
    message
}

fn main() -> ExitCode {
    vramtop::shell::heap::tune();
    // color-eyre first, so that ratatui's panic hook (installed later)
    // restores the terminal before the report is printed.
    if let Err(e) = color_eyre::install() {
        eprintln!("vramtop: cannot install the error reporter: {e}");
    }
    // `vramtop --no-color help open`: what `help` reads of its own taken
    // out, where clap would refuse it.
    let args = cli::help::help_command_args(std::env::args_os().collect());
    let matches = cli::help::command()
        .try_get_matches_from(args)
        .unwrap_or_else(|e| usage_error(e));
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    if let Some(problem) = cli.usage_problem() {
        exit_usage(&problem);
    }
    let own_matches = matches.subcommand().map_or(&matches, |(_, m)| m);
    let is_doctor = cli.is_doctor();
    let targets = cli.config_targets();
    // The file found and why it was not used, if it was not.
    let mut config_read = None;
    // A command that reads no config file has no `--config`.
    if let Some(explicit) = targets.path {
        let config_path = explicit
            .clone()
            .or_else(|| config::default_path().filter(|p| p.exists()));
        if let Some(path) = config_path {
            let unknown_keys = targets.unknown_keys();
            match config::apply_file(targets, own_matches, &path, unknown_keys) {
                Ok(warning) => {
                    if let Some(warning) = warning {
                        cli::say_warning(warning);
                    }
                    config_read = Some((path, None));
                }
                // doctor is where a broken setup is diagnosed: it runs on,
                // and its report names the file and why it was not used.
                Err(e) if is_doctor => {
                    cli::say_warning(format_args!("{e}; doctor runs without the config file"));
                    config_read = Some((path, Some(e.reason())));
                }
                Err(e) => {
                    cli::say_error(e);
                    return ExitCode::from(cli::EXIT_BAD_INPUT);
                }
            }
        }
    }
    if let Some((path, error)) = config_read {
        cli.note_config(path, error);
    }
    if let Err(e) = init_logging(&cli) {
        cli::say_error(e);
        return ExitCode::from(cli::EXIT_BAD_INPUT);
    }
    let code = match cli::run(cli) {
        Ok(code) => code,
        // The one place a closed stdout is handled, for every command.
        Err(report) if cli::is_closed_output(&report) => ExitCode::SUCCESS,
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
