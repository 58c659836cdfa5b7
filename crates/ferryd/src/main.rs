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
    /// Do not start NFs; wait for them to connect (each with its key).
    #[arg(long)]
    no_spawn: bool,
    /// uids to allocate to domains that name no user, FIRST-LAST.
    #[arg(long, default_value = "2130706432-2130771967")]
    uid_range: ferryd::users::UidRange,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let opts = ferryd::Options { chain: a.chain, socket: a.socket, spawn: !a.no_spawn, uids: a.uid_range };
    match ferryd::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferryd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
