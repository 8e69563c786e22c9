use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use vramtop::cli::{self, Cli, config};

/// Logs go to a file, never to the terminal (the dashboard owns it).
fn init_logging(cli: &Cli) {
    let path = cli.display.log_file.clone().or_else(|| {
        dirs::state_dir()
            .or_else(dirs::cache_dir)
            .map(|d| d.join("vramtop").join("vramtop.log"))
    });
    let Some(path) = path else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("VRAMTOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
}

fn main() -> ExitCode {
    // color-eyre first, so that ratatui's panic hook (installed later)
    // restores the terminal before the report is printed.
    if let Err(e) = color_eyre::install() {
        eprintln!("vramtop: cannot install the error reporter: {e}");
    }
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let config_path = cli
        .display
        .config
        .clone()
        .or_else(|| config::default_path().filter(|p| p.exists()));
    if let Some(path) = config_path
        && let Err(e) = config::apply_file(&mut cli, &matches, &path)
    {
        eprintln!("vramtop: {e}");
        return ExitCode::from(cli::EXIT_BAD_INPUT);
    }
    init_logging(&cli);
    match cli::run(cli) {
        Ok(code) => code,
        Err(report) => {
            eprintln!("vramtop: {report:#}");
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
