use std::process::ExitCode;

use clap::Parser;
use vramtop::cli::{self, Cli};

fn main() -> ExitCode {
    if let Err(e) = color_eyre::install() {
        eprintln!("vramtop: cannot install the error reporter: {e}");
    }
    let cli = Cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(report) => {
            eprintln!("vramtop: {report:#}");
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
