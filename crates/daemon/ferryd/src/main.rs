use std::process::ExitCode;

use clap::Parser;
use ferryd::cli::Args;

fn main() -> ExitCode {
    // ferryd's events (chains deployed, NFs started and restarted) and the
    // libraries' warnings on stderr. RUST_LOG filters as everywhere in the
    // tracing world (`RUST_LOG=ferry_bpf=debug`).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,ferryd=info".into());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    let a = Args::parse();
    let cost_model = match ferry_place::CostModel::configured(a.cost_model.as_deref()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ferryd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = ferryd::Options {
        chain: a.chain,
        set: a.set,
        socket: a.socket,
        admin: a.admin,
        spawn: !a.no_spawn,
        uids: a.uid_range,
        metrics: (!a.no_metrics).then_some(a.metrics),
        persist: a.persist,
        host: a.host,
        listen: a.listen,
        tls_dir: a.tls_dir,
        cost_model,
    };
    match ferryd::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferryd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
