//! `ferry-host`: hosts one built-in NF of a ferryd chain (ferryd runs it), or
//! several `spawn: false` NFs as threads of one process. It parses its
//! command line and calls the catalog, which builds and runs each kind
//! (`ferry_catalog::host`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ferry-host", version, about = "Hosts Ferry's built-in NFs in a ferryd chain")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Host one NF (reads FERRY_SOCKET and FERRY_NF, as ferryd sets them).
    Serve {
        #[arg(long)]
        kind: String,
        /// NF arguments (repeat).
        #[arg(long = "arg", allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Several `spawn: false` NFs of one chain as threads, each
    /// `NAME=KIND[:ARG,ARG...]`; FERRY_CHAIN names the chain.
    Host {
        /// ferryd's NF socket.
        #[arg(long)]
        socket: PathBuf,
        nfs: Vec<String>,
    },
}

fn main() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,ferry_host=info".into());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    let result = match Cli::parse().cmd {
        Cmd::Serve { kind, args } => ferry_catalog::host::serve(&kind, &args),
        Cmd::Host { socket, nfs } => ferry_catalog::host::host(&socket, &nfs),
    };
    if let Err(e) = result {
        eprintln!("ferry-host: {e:#}");
        std::process::exit(1);
    }
    std::process::exit(ferry_catalog::host::EXIT_STOPPED);
}
