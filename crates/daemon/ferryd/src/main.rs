use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Ferry's monitor: sets up a chain file's domains, ports and NFs.
#[derive(Parser)]
#[command(name = "ferryd", version)]
struct Args {
    /// A chain file (YAML) to deploy at start; more come with `ferry chain deploy`.
    chain: Option<PathBuf>,
    /// Fill placeholder `{KEY}` of the chain file with VALUE (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = ferry_chain::spec::placeholder_value)]
    set: Vec<(String, String)>,
    /// The NF socket (default /run/ferry/ferryd.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The admin socket, root's (default: the NF socket's path + ".admin").
    #[arg(long)]
    admin: Option<PathBuf>,
    /// Do not start NFs; wait for them to connect (each with its key).
    #[arg(long)]
    no_spawn: bool,
    /// Serve Prometheus metrics (GET /metrics) on this address.
    #[arg(long, default_value = "127.0.0.1:9469")]
    metrics: std::net::SocketAddr,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics")]
    no_metrics: bool,
    /// Chains outlive ferryd: SIGTERM (or a crash) leaves them forwarding,
    /// and a ferryd started with --persist on the same socket adopts them.
    #[arg(long)]
    persist: bool,
    /// This ferryd's host in chains over hosts (the chain file's `hosts`).
    #[arg(long)]
    host: Option<String>,
    /// Serve admin requests of other hosts' operators on this TCP address,
    /// over mutual TLS (needs --host and --tls-dir).
    #[arg(long, requires_all = ["host", "tls_dir"])]
    listen: Option<std::net::SocketAddr>,
    /// The TLS directory (`ferry tls init`): hosts-ca.pem,
    /// operators-ca.pem, and this host's <host>.pem and <host>.key (also
    /// what it probes the other hosts with).
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Place chains by this cost model (`ferry bench cost --out FILE`
    /// writes one); also FERRY_COST_MODEL. Without one, placement goes by
    /// its rules alone.
    #[arg(long)]
    cost_model: Option<PathBuf>,
    /// uids to allocate to domains that name no user, FIRST-LAST.
    #[arg(long, default_value = "2130706432-2130771967")]
    uid_range: ferryd::users::UidRange,
}

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
