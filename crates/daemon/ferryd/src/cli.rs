//! ferryd's command line, in the library so that `ferry generate` can
//! render its man page and completions with the CLI's.

use std::path::PathBuf;

use clap::Parser;

/// Ferry's monitor: sets up a chain file's domains, ports and NFs.
#[derive(Parser)]
#[command(name = "ferryd", version)]
pub struct Args {
    /// A chain file (YAML), or a directory of them (`*.yaml`, in name
    /// order), to deploy at start; more come with `ferry chain deploy`.
    /// Under systemd (`Type=notify`) ferryd is ready once they are all up.
    pub chain: Option<PathBuf>,
    /// Fill placeholder `{KEY}` of the chain file with VALUE (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = ferry_chain::spec::placeholder_value)]
    pub set: Vec<(String, String)>,
    /// The NF socket (default /run/ferry/ferryd.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The admin socket, root's (default: the NF socket's path + ".admin").
    #[arg(long)]
    pub admin: Option<PathBuf>,
    /// Do not start NFs; wait for them to connect (each with its key).
    #[arg(long)]
    pub no_spawn: bool,
    /// Serve Prometheus metrics (GET /metrics) on this address.
    #[arg(long, default_value = "127.0.0.1:9469")]
    pub metrics: std::net::SocketAddr,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics")]
    pub no_metrics: bool,
    /// Chains outlive ferryd: SIGTERM (or a crash) leaves them forwarding,
    /// and a ferryd started with --persist on the same socket adopts them.
    #[arg(long)]
    pub persist: bool,
    /// This ferryd's host in chains over hosts (the chain file's `hosts`).
    #[arg(long)]
    pub host: Option<String>,
    /// Serve admin requests of other hosts' operators on this TCP address,
    /// over mutual TLS (needs --host and --tls-dir).
    #[arg(long, requires_all = ["host", "tls_dir"])]
    pub listen: Option<std::net::SocketAddr>,
    /// The TLS directory (`ferry tls init`): hosts-ca.pem,
    /// operators-ca.pem, and this host's <host>.pem and <host>.key (also
    /// what it probes the other hosts with).
    #[arg(long)]
    pub tls_dir: Option<PathBuf>,
    /// Place chains by this cost model (`ferry bench cost --out FILE`
    /// writes one); also FERRY_COST_MODEL. Without one, placement goes by
    /// its rules alone.
    #[arg(long)]
    pub cost_model: Option<PathBuf>,
    /// uids to allocate to domains that name no user, FIRST-LAST.
    #[arg(long, default_value = "2130706432-2130771967")]
    pub uid_range: crate::users::UidRange,
}
