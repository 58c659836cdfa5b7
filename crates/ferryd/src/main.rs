use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Ferry's monitor: sets up a chain file's domains, ports and NFs.
#[derive(Parser)]
#[command(name = "ferryd", version)]
struct Args {
    /// The chain file (YAML).
    chain: PathBuf,
    /// Unix socket to serve (default /run/ferry/<chain>.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Do not start NFs; wait for them to connect.
    #[arg(long)]
    no_spawn: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let opts = ferryd::Options { chain: a.chain, socket: a.socket, spawn: !a.no_spawn };
    match ferryd::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferryd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
