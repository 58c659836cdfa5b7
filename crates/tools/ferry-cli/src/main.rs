//! `ferry`: chains, testbeds, NF processes, traffic generator and sink;
//! `ferry bench` runs the `ferry-bench` binary.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use ferry_bpf::AttachMode;
use ferry_cli::util::{install_stop_handler, parse_duration};
use ferry_cli::xskport::XskOptions;
use ferry_cli::{chainctl, demo, genlive, genxsk, nfrun, sink, txonly, xdprun};
use ferry_traffic::TrafficProfile;
use ferry_xsk::{BindMode, BusyPoll};
use serde::Serialize;

#[derive(Parser)]
#[command(name = "ferry", version, about = "Ferry: network functions on AF_XDP and XDP")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Network-namespace testbeds described in YAML.
    #[command(subcommand)]
    Testbed(TestbedCmd),
    /// Network functions on AF_XDP.
    #[command(subcommand)]
    Nf(NfCmd),
    /// Basic XDP programs (drop, pass, tx) with verdict counters.
    #[command(subcommand)]
    Xdp(XdpCmd),
    /// Chains run by ferryd (see `ferryd --help` and docs/ARCHITECTURE.md).
    #[command(subcommand)]
    Chain(ChainCmd),
    /// A live view of ferryd's NF threads and XDP programs, redrawn every interval.
    Top {
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        interval: std::time::Duration,
        /// Draw this many views, then exit (default: until Ctrl-C).
        #[arg(long)]
        count: Option<u64>,
        /// Print the views one after another instead of redrawing.
        #[arg(long)]
        no_clear: bool,
    },
    /// Kubernetes: the kubelet device plugin for NF pods.
    #[command(subcommand)]
    K8s(K8sCmd),
    /// Keys for the control channel between hosts (mutual TLS).
    #[command(subcommand)]
    Tls(TlsCmd),
    /// Traffic generators.
    #[command(subcommand)]
    Gen(GenCmd),
    /// Receive traffic on AF_XDP and report counts, loss, reordering, latency.
    Sink(SinkArgs),
    /// Benchmarks (JSON + a table): runs `ferry-bench`, installed next to
    /// `ferry` (`ferry bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build a testbed, ping through the AF_XDP responders, push generator
    /// traffic through l2fwd, print per-NF stats, tear down.
    Demo {
        /// Packets the generator sends through l2fwd.
        #[arg(long, default_value_t = 200_000)]
        packets: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write the man pages (ferry.1, ferryd.8) and the shell completions
    /// (bash, zsh, fish) of ferry and ferryd into DIR: what a package
    /// installs.
    #[command(hide = true)]
    Generate { dir: PathBuf },
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Create the testbed described in FILE (stays up until `down`).
    Up { file: PathBuf },
    /// Tear down the testbed of FILE (or the testbed named NAME).
    Down { file_or_name: String },
    /// Delete namespaces left by testbeds whose owner died.
    Sweep,
}

#[derive(Args, Clone)]
struct XskArgs {
    /// XDP attach mode: driver or generic.
    #[arg(long, default_value = "driver")]
    mode: AttachMode,
    /// AF_XDP bind mode: auto, copy or zero-copy.
    #[arg(long, default_value = "auto")]
    bind: BindMode,
    /// Do not use the need_wakeup flag.
    #[arg(long)]
    no_need_wakeup: bool,
    /// Busy-poll budget in microseconds (SO_BUSY_POLL); 0 = off.
    #[arg(long, default_value_t = 0)]
    busy_poll_us: u32,
    /// UMEM frames (power of two).
    #[arg(long, default_value_t = 8192)]
    frames: u32,
    /// Ring size (power of two).
    #[arg(long, default_value_t = 2048)]
    ring: u32,
}

impl PortArgs {
    fn spec(&self) -> ferry_cli::xskport::PortSpec {
        ferry_cli::xskport::PortSpec { dev: self.dev.clone(), queues: self.queues.clone(), xsk: self.xsk.options() }
    }
}

impl XskArgs {
    fn options(&self) -> XskOptions {
        XskOptions {
            mode: self.mode,
            bind: self.bind,
            need_wakeup: !self.no_need_wakeup,
            busy_poll: (self.busy_poll_us > 0).then_some(BusyPoll {
                usecs: self.busy_poll_us,
                budget: 64,
                prefer: true,
            }),
            frames: self.frames,
            ring: self.ring,
        }
    }
}

/// The AF_XDP ports a command opens: a device, its queues, socket options.
#[derive(Args, Clone)]
struct PortArgs {
    /// The network device (as `ip link` names it in this namespace).
    #[arg(long)]
    dev: String,
    /// Queues (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    queues: Vec<u32>,
    #[command(flatten)]
    xsk: XskArgs,
}

#[derive(Subcommand)]
enum NfCmd {
    /// Run NFs on a device: each frame is offered to the NFs in order.
    /// Example: ferry nf run --dev d0 arp-responder 10.0.0.2=02:00:00:00:00:02 -- icmp-echo 10.0.0.2
    Run {
        #[command(flatten)]
        port: PortArgs,
        /// Frames per receive or send call.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Stop after this long (default: until SIGINT/SIGTERM).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        #[command(flatten)]
        measure: WindowArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// NFs and their arguments; separate NFs with `--`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        nfs: Vec<String>,
    },
    /// List the NFs.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Host a built-in NF in a ferryd chain: runs the NF host,
    /// `ferry-host serve`, which reads FERRY_SOCKET and FERRY_NF (ferryd
    /// starts `ferry-host` itself).
    Serve {
        /// The NF kind (`ferry nf list`).
        #[arg(long)]
        kind: String,
        /// NF arguments (repeat).
        #[arg(long = "arg", allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Several `spawn: false` NFs of one chain as threads of one process
    /// (`ferry-host host`: source, sink, fwd, split, slow), each `NAME=KIND[:ARG,ARG...]`;
    /// set FERRY_CHAIN to the chain's name (each NF's key is read from
    /// the file ferryd wrote for it).
    Host {
        /// ferryd's NF socket.
        #[arg(long)]
        socket: PathBuf,
        nfs: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ChainCmd {
    /// Check FILE as ferryd would (NF kinds and arguments included), without running it.
    Check {
        /// The chain file (YAML).
        file: PathBuf,
        /// Fill placeholder `{KEY}` of the file with VALUE (repeatable),
        /// e.g. `--set dut=fy1234-dut` for an example's `{dut}`.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = ferry_chain::spec::placeholder_value)]
        set: Vec<(String, String)>,
        /// Also print where each NF would run (XDP or a process) and why.
        #[arg(long)]
        explain: bool,
        /// Also check what deploying it needs of this machine (as root):
        /// namespaces, devices (queues, MTU), `exec` programs, files the
        /// NFs read; and, with ferryd running at --admin, that its name and
        /// devices are free.
        #[arg(long)]
        live: bool,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// Place by this cost model, as `ferryd --cost-model` does (also
        /// FERRY_COST_MODEL).
        #[arg(long)]
        cost_model: Option<PathBuf>,
    },
    /// Run ferryd in the foreground with FILE deployed, until Ctrl-C.
    Up {
        /// The chain file (YAML).
        file: PathBuf,
        /// Fill placeholder `{KEY}` of FILE with VALUE (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = ferry_chain::spec::placeholder_value)]
        set: Vec<(String, String)>,
        /// Where ferryd serves Prometheus metrics.
        #[arg(long, default_value = "127.0.0.1:9469", value_name = "ADDR:PORT")]
        metrics: String,
        /// ferryd's NF socket (default /run/ferry/ferryd.sock; its admin socket is this + ".admin").
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Deploy FILE on a running ferryd, next to its other chains; a chain
    /// over hosts (`hosts:`) on each host's ferryd.
    Deploy {
        /// The chain file (YAML).
        file: PathBuf,
        /// Fill placeholder `{KEY}` of FILE with VALUE (repeatable),
        /// e.g. `--set dut=fy1234-dut` for an example's `{dut}`.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = ferry_chain::spec::placeholder_value)]
        set: Vec<(String, String)>,
        /// The TLS directory of the operator, for hosts reached over TLS.
        #[arg(long)]
        tls: Option<PathBuf>,
        /// Print where ferryd placed each NF (XDP or a process) and why.
        #[arg(long)]
        explain: bool,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove chain NAME (the only one if none is named) from a running
    /// ferryd; its NFs are stopped.
    Remove {
        name: Option<String>,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// A chain over hosts: remove it from every host FILE names.
        #[arg(long)]
        over: Option<PathBuf>,
        /// The operator's TLS directory (`ferry tls init`), for hosts reached over TLS.
        #[arg(long)]
        tls: Option<PathBuf>,
    },
    /// Re-read the files chain NAME's NFs read and apply them without a
    /// restart: the hybrid NFs' configuration (config=FILE: rules,
    /// nftables, backends and weights, timeouts) and the rule files of
    /// firewalls and IPSes running as processes.
    Reload {
        /// The chain (empty: every chain ferryd runs; what systemd's
        /// `ExecReload` asks).
        #[arg(default_value = "")]
        name: String,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
    },
    /// The chains a ferryd runs.
    List {
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Per-NF counters of chain NAME (empty: the only chain).
    Show {
        #[arg(default_value = "")]
        name: String,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// A chain over hosts: each host FILE names, in turn.
        #[arg(long)]
        over: Option<PathBuf>,
        /// The operator's TLS directory (`ferry tls init`), for hosts reached over TLS.
        #[arg(long)]
        tls: Option<PathBuf>,
    },
    /// Pause chain NAME's domains and check that every frame is in exactly one place.
    Audit {
        #[arg(default_value = "")]
        name: String,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
    },
    /// Copy the frames at one point of chain NAME into pcapng (root's admin
    /// socket only). The chain keeps running: a capture that falls behind
    /// loses and counts its own copies, never the chain's frames.
    ///
    /// Read it live with `ferry chain capture NAME --at fw->mon | tshark -r -`.
    Capture {
        /// The chain (empty: the only one).
        #[arg(default_value = "")]
        name: String,
        /// Where: PORT or PORT:rx (as received), PORT:tx (as sent), A->B (a
        /// link), NF:in or NF:out.
        #[arg(long)]
        at: String,
        /// Write pcapng to FILE (`-`: standard output).
        #[arg(short = 'w', long = "write", default_value = "-")]
        write: PathBuf,
        /// Stop after N frames.
        #[arg(short = 'c', long)]
        count: Option<u64>,
        /// Stop after this long (e.g. 10s, 500ms).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<std::time::Duration>,
        /// Bytes kept of each frame (default: all).
        #[arg(short = 's', long, default_value_t = 0)]
        snaplen: u32,
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
        /// A filter, as tcpdump's: host, net, port (each with src or dst),
        /// ip, ip6, tcp, udp, icmp, icmp6, arp, vlan, with and, or, not.
        filter: Vec<String>,
    },
    /// Stop ferryd, every chain and their NFs.
    Down {
        /// ferryd's admin socket.
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: PathBuf,
    },
}

#[derive(Subcommand)]
enum TlsCmd {
    /// Write a deployment CA and a key and certificate for each host (for
    /// `ferryd --host H --listen ADDR --tls-dir DIR`) and for the operator
    /// (`ferry chain deploy --tls DIR`) into DIR.
    Init {
        /// Where to write the keys and certificates.
        dir: PathBuf,
        /// The hosts, as the chain files name them.
        #[arg(long, value_delimiter = ',', required = true)]
        hosts: Vec<String>,
    },
}

/// ferryd's admin socket unless told otherwise.
const DEFAULT_ADMIN: &str = "/run/ferry/ferryd.sock.admin";

#[derive(Subcommand)]
enum XdpCmd {
    /// Attach a basic program, count verdicts over a window, detach.
    Run {
        /// The network device (as `ip link` names it in this namespace).
        #[arg(long)]
        dev: String,
        /// drop, pass or tx.
        #[arg(long)]
        prog: String,
        /// XDP attach mode: driver or generic (skb).
        #[arg(long, default_value = "driver")]
        mode: AttachMode,
        // After the window the program is detached and the report printed.
        #[command(flatten)]
        measure: WindowArgs,
        /// Give up (and report) after this long even without a window.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// A measurement window: what a run reports is counted in it.
#[derive(Args, Clone)]
struct WindowArgs {
    /// The measurement window opens this long after the first frame...
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    warmup: Duration,
    /// ...and lasts this long (default: until the run ends).
    #[arg(long, value_parser = parse_duration)]
    window: Option<Duration>,
}

#[derive(Args, Clone)]
struct ProfileArgs {
    /// A traffic profile: a built-in one (ipv4, ipv6) or a file (YAML or
    /// JSON); flags below override it.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Overrides, KEY=VALUE: proto, src-mac, dst-mac, src-ip, dst-ip,
    /// src-port, dst-port, size, dist, flows, rate, burst, duration, count, seed.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Shorthands for common overrides.
    #[arg(long)]
    size: Option<usize>,
    /// udp, tcp or icmp (default: the profile's).
    #[arg(long)]
    proto: Option<String>,
    /// Destination MAC of the frames made (default: the profile's).
    #[arg(long)]
    dst_mac: Option<String>,
    /// Source MAC of the frames made (default: the device's).
    #[arg(long)]
    src_mac: Option<String>,
    /// Stop after this many frames (default: no limit).
    #[arg(long)]
    count: Option<u64>,
    /// Frames per second, in total (default: as fast as it can).
    #[arg(long)]
    rate: Option<u64>,
    /// Stop after this long: 500ms, 5s, 2m (default: no limit).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
}

impl ProfileArgs {
    /// The profile: file (if any), then flags; the source MAC defaults to
    /// the device's own.
    fn profile(&self, dev: &str) -> Result<TrafficProfile> {
        let builtin = self.profile.as_deref().and_then(|p| p.to_str()).and_then(TrafficProfile::builtin);
        let mut p = match (&self.profile, builtin) {
            (_, Some(p)) => p,
            (Some(path), None) => {
                let (text, origin) = ferry_config::read_file(path).with_context(|| {
                    format!(
                        "--profile {}: neither a file nor one of {:?}",
                        path.display(),
                        ferry_traffic::BUILTIN_PROFILES
                    )
                })?;
                ferry_config::parse_located(&text, &origin, |_: &TrafficProfile| Ok(()))?
            }
            (None, None) => TrafficProfile::default(),
        };
        if self.src_mac.is_none() {
            if let Ok(mac) = ferry_cli::util::dev_mac(dev) {
                p.src_mac = mac;
            }
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        for kv in &self.set {
            let (k, v) = kv.split_once('=').ok_or_else(|| anyhow!("--set {kv:?}: expected KEY=VALUE"))?;
            pairs.push((k.into(), v.into()));
        }
        let shorthands = [
            ("size", self.size.map(|v| v.to_string())),
            ("proto", self.proto.clone()),
            ("dst-mac", self.dst_mac.clone()),
            ("src-mac", self.src_mac.clone()),
            ("count", self.count.map(|v| v.to_string())),
            ("rate", self.rate.map(|v| v.to_string())),
            ("duration", self.duration.map(|d| format!("{}ms", d.as_millis()))),
        ];
        for (k, v) in shorthands {
            if let Some(v) = v {
                pairs.push((k.into(), v));
            }
        }
        for (k, v) in pairs {
            p.set(&k, &v)?;
        }
        p.validate()?;
        Ok(p)
    }
}

#[derive(Subcommand)]
enum GenCmd {
    /// Kernel-side generation: BPF_PROG_RUN live frames redirected out of DEV
    /// (UDP: stamped, source port cycled over the profile's range).
    Live {
        /// The network device (as `ip link` names it in this namespace).
        #[arg(long)]
        dev: String,
        #[command(flatten)]
        profile: ProfileArgs,
        /// Stamp stream id (CPU number is added).
        #[arg(long, default_value_t = 0)]
        stream: u16,
        /// Pin to this CPU.
        #[arg(long)]
        cpu: Option<usize>,
        /// Read the clock for the stamp every 2^N frames (faster; frames of
        /// one burst then share a transmit time).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=15))]
        clock_shift: u16,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// AF_XDP transmit only: one frame (the profile's first flow) in every
    /// buffer, sent as fast as the socket takes it: the device's AF_XDP
    /// transmit limit.
    Txonly {
        #[command(flatten)]
        port: PortArgs,
        #[command(flatten)]
        profile: ProfileArgs,
        /// Frames per receive or send call.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Stop after this long (default: until SIGINT/SIGTERM).
        #[arg(long = "run-for", value_parser = parse_duration)]
        run_for: Option<Duration>,
        #[command(flatten)]
        measure: WindowArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// AF_XDP TX on chosen queues, from a profile or a pcap file.
    Xsk {
        #[command(flatten)]
        port: PortArgs,
        #[command(flatten)]
        profile: ProfileArgs,
        /// Replay this pcap file instead of the profile's flows.
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Stream id stamped in each frame (a sink tells streams apart by it).
        #[arg(long, default_value_t = 1000)]
        stream: u16,
        /// Frames per receive or send call.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Also receive on the same sockets and report what came back
        /// (loss, reordering, latency): traffic looped through a DUT.
        #[arg(long)]
        rx: bool,
        /// With --rx: stop once nothing arrived for this long after sending.
        #[arg(long, value_parser = parse_duration, default_value = "500ms")]
        rx_idle: Duration,
        /// With --rx: receive on this device's queue 0 instead of the
        /// sending sockets (a DUT that forwards from one port to another,
        /// both looped back to this namespace).
        #[arg(long, requires = "rx")]
        rx_dev: Option<String>,
        /// Send MICA request batches (FLASH's key-value workload) over the
        /// profile's flows: keys=N,get=F,dist=uniform|zipf:S,value=B,batch=R
        /// (default keys=100000,get=0.95,dist=zipf:0.99,value=64,batch=4).
        #[arg(long)]
        mica: Option<ferry_nf::mica_client::MicaWorkload>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct SinkArgs {
    #[command(flatten)]
    port: PortArgs,
    /// Stop after this long: 500ms, 5s, 2m (default: no limit).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many frames (default: no limit).
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long without traffic (once traffic was seen).
    #[arg(long, value_parser = parse_duration)]
    idle_exit: Option<Duration>,
    /// Write every received frame to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Frames sent, if known, for the loss figure.
    #[arg(long)]
    sent: Option<u64>,
    /// Check every datagram as a MICA response to this workload (as
    /// `gen xsk --mica`): each GET's value, byte for byte; misses counted.
    #[arg(long)]
    mica: Option<ferry_nf::mica_client::MicaWorkload>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum K8sCmd {
    /// Serve the kubelet device plugin (API v1beta1) until Ctrl-C: it
    /// advertises NF slots and gives each NF container ferryd's NF socket
    /// and keys (deploy/kubernetes/).
    DevicePlugin {
        /// The extended resource NF pods ask for.
        #[arg(long, default_value = ferry_k8s::DEFAULT_RESOURCE)]
        resource: String,
        /// NF pods this node takes.
        #[arg(long, default_value_t = 16)]
        slots: u32,
        /// ferryd's NF socket on the host, in a directory of its own (the
        /// plugin mounts the directory: the socket and its keys).
        #[arg(long, default_value = ferry_k8s::DEFAULT_FERRYD_SOCKET)]
        ferryd_socket: PathBuf,
        /// The kubelet's device-plugin directory.
        #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
        plugin_dir: PathBuf,
        /// The plugin's socket name in it.
        #[arg(long, default_value = "ferry-nf.sock")]
        endpoint: String,
    },
}

/// Prints a report as JSON (`--json`) or as text.
fn emit<T: Serialize>(json: bool, value: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(value)?);
    } else {
        print!("{}", text(value));
    }
    Ok(())
}

fn pretty<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

/// `ferry bench ...` is `ferry-bench ...`: the benchmarks are a binary of
/// their own, so the control commands do not carry them.
fn run_bench(args: &[String]) -> Result<()> {
    exec_sibling("ferry-bench", "FERRY_BENCH", args)
}

/// Replaces this process with Ferry binary `name` (next to this one, or
/// `$env`) run with `args`: `ferry nf serve` is the NF host's `serve`, in
/// the same process, so ferryd sees the pid it expects.
fn exec_sibling(name: &str, env: &str, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = chainctl::sibling_bin(name, env)?;
    Err(anyhow!(std::process::Command::new(&exe).args(args).exec()).context(format!("running {}", exe.display())))
}

/// Splits `a x y -- b z` into [[a, x, y], [b, z]].
fn split_nf_args(args: &[String]) -> Vec<Vec<&str>> {
    args.split(|a| a == "--").filter(|g| !g.is_empty()).map(|g| g.iter().map(String::as_str).collect()).collect()
}

fn main() {
    // The libraries' warnings (hybrid NFs, BPF loading) on stderr; an NF
    // ferryd started logs there too.
    // RUST_LOG filters as everywhere in the tracing world (`RUST_LOG=ferry_bpf=debug`); warnings by default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("ferry: {}", render_error(&e));
        std::process::exit(1);
    }
}

/// The error and its causes on one line. Ferry's error types already put
/// their source into their message, so a cause whose text is already shown
/// is skipped rather than repeated.
fn render_error(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn run(cli: Cli) -> Result<()> {
    install_stop_handler();
    match cli.cmd {
        Cmd::Testbed(cmd) => run_testbed(cmd),
        Cmd::Nf(cmd) => run_nf(cmd),
        Cmd::Chain(cmd) => run_chain(cmd),
        Cmd::Gen(cmd) => run_gen(cmd),
        Cmd::Top { admin, interval, count, no_clear } => ferry_cli::top::run(&admin, interval, count, !no_clear),
        Cmd::Tls(TlsCmd::Init { dir, hosts }) => {
            ferry_remote::issue(&dir, &hosts)?;
            println!("wrote a CA and keys for {} and admin into {}", hosts.join(", "), dir.display());
            Ok(())
        }
        Cmd::K8s(K8sCmd::DevicePlugin { resource, slots, ferryd_socket, plugin_dir, endpoint }) => {
            install_stop_handler();
            let cfg = ferry_k8s::PluginConfig { resource_name: resource, slots, ferryd_socket, plugin_dir, endpoint };
            Ok(ferry_k8s::run(cfg, ferry_cli::util::stop_requested)?)
        }
        Cmd::Xdp(XdpCmd::Run { dev, prog, mode, measure: WindowArgs { warmup, window }, timeout, json }) => {
            let report = xdprun::run(&dev, &prog, mode, warmup, window, timeout)?;
            emit(json, &report, pretty)
        }
        Cmd::Sink(a) => {
            let opts = sink::SinkOptions {
                port: a.port.spec(),
                duration: a.duration,
                count: a.count,
                idle_exit: a.idle_exit,
                pcap: a.pcap,
                sent: a.sent,
                batch: 64,
                mica: a.mica,
            };
            let report = sink::run(&opts)?;
            emit(a.json, &report, |r| r.to_string())
        }
        Cmd::Bench { args } => run_bench(&args),
        Cmd::Generate { dir } => generate(&dir),
        Cmd::Demo { packets, json } => {
            let report = demo::run(packets)?;
            emit(json, &report, demo::text)
        }
    }
}

/// `ferry testbed ...`.
fn run_testbed(cmd: TestbedCmd) -> Result<()> {
    match cmd {
        TestbedCmd::Up { file } => {
            let spec = ferry_testbed::parse(&file)?;
            let tb = ferry_testbed::up_detached(&spec)?;
            println!("testbed {} is up:", tb.name());
            let mut vars = Vec::new();
            for (logical, real) in tb.namespaces() {
                println!("  {logical:<12} ip netns exec {real} ...");
                let var: String = logical.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                vars.push(format!("{}={real}", var.to_uppercase()));
            }
            // The examples' commands name the namespaces by these.
            println!("export {}", vars.join(" "));
            Ok(())
        }
        TestbedCmd::Down { file_or_name } => {
            let path = PathBuf::from(&file_or_name);
            if path.exists() {
                ferry_testbed::down_file(&path)?;
            } else {
                ferry_testbed::down_by_name(&file_or_name)?;
            }
            println!("testbed {file_or_name} is down: its namespaces and devices are gone");
            Ok(())
        }
        TestbedCmd::Sweep => {
            for ns in ferry_testbed::sweep_stale()? {
                println!("removed stale namespace {ns}");
            }
            Ok(())
        }
    }
}

/// `ferry nf ...`.
fn run_nf(cmd: NfCmd) -> Result<()> {
    match cmd {
        NfCmd::Serve { kind, args } => {
            let mut argv = vec!["serve".to_string(), "--kind".into(), kind];
            argv.extend(args.into_iter().flat_map(|a| ["--arg".to_string(), a]));
            exec_sibling("ferry-host", "FERRY_HOST", &argv)
        }
        NfCmd::Host { socket, nfs } => {
            let mut argv = vec!["host".to_string(), "--socket".into(), socket.display().to_string()];
            argv.extend(nfs);
            exec_sibling("ferry-host", "FERRY_HOST", &argv)
        }
        NfCmd::List { json } => {
            if json {
                println!("{}", ferry_catalog::json());
            } else {
                print!("{}", ferry_catalog::table());
            }
            Ok(())
        }
        NfCmd::Run { port, batch, duration, measure: WindowArgs { warmup, window }, json, nfs } => {
            let mut built = Vec::new();
            for group in split_nf_args(&nfs) {
                built.push(ferry_nf::by_name(group[0], &group[1..])?);
            }
            let opts = nfrun::NfRunOptions { port: port.spec(), batch, duration, warmup, window, idle_poll_ms: 100 };
            let report = nfrun::run(&opts, built)?;
            emit(json, &report, pretty)
        }
    }
}

/// `ferry chain ...`.
fn run_chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Up { file, set, metrics, socket } => {
            let socket = socket.unwrap_or_else(ferry_chain::proto::default_socket);
            let up = chainctl::UpOptions { set, metrics: Some(metrics) };
            let mut rc = chainctl::start_with(&file, &socket, false, chainctl::Placing::AsConfigured, &up)?;
            println!("chain {} up; `ferry chain show --admin {}`; Ctrl-C stops it", rc.name, rc.admin.display());
            if let Some(addr) = chainctl::metrics_addr(&rc.admin)? {
                println!("metrics: http://{addr}/metrics");
            }
            let status = rc.child.wait()?;
            println!("ferryd exited: {status}");
            Ok(())
        }
        ChainCmd::Deploy { file, set, tls, explain, admin: _, json }
            if ferry_cli::hostctl::spans_hosts(&file, &set) =>
        {
            if !set.is_empty() {
                bail!(
                    "--set is not taken for chains over hosts yet: fill {} with sed and deploy the copy",
                    file.display()
                );
            }
            let parts = ferry_cli::hostctl::deploy(&file, tls.as_deref())?;
            emit(json, &parts, |parts| {
                let mut out = String::new();
                for p in parts {
                    let (host, c) = (&p.host, &p.deployed);
                    let placed = if explain { c.placement.clone() } else { String::new() };
                    out += &format!("{placed}host {host}: deployed chain {} (id {}): {} NFs\n", c.name, c.id, c.nfs);
                }
                out
            })
        }
        ChainCmd::Deploy { file, set, tls: _, explain, admin, json } => {
            let summary = chainctl::deploy_filled(&admin, &file, &set)?;
            emit(json, &summary, |c| {
                let placed = if explain { c.placement.clone() } else { String::new() };
                format!("{placed}deployed chain {} (id {}): {} NFs\n", c.name, c.id, c.nfs)
            })
        }
        ChainCmd::Remove { name, admin: _, over: Some(file), tls } => {
            let name = name.ok_or_else(|| anyhow!("name the chain over hosts to remove"))?;
            ferry_cli::hostctl::check_name(&file, &name)?;
            ferry_cli::hostctl::remove(&file, tls.as_deref())?;
            println!("removed chain {name} from every host of {}", file.display());
            Ok(())
        }
        ChainCmd::Remove { name, admin, over: None, tls: _ } => {
            let name = match name {
                Some(n) => n,
                None => chainctl::only_chain(&admin)?,
            };
            chainctl::remove(&admin, &name)?;
            println!("removed chain {name}: its NFs are stopped, its devices released");
            Ok(())
        }
        ChainCmd::Reload { name, admin } => {
            let name_was_empty = name.is_empty();
            let names = match name.is_empty() {
                true => {
                    chainctl::list(&admin)?.into_iter().filter(|c| c.placement != "nsh only").map(|c| c.name).collect()
                }
                false => vec![name],
            };
            let every = name_was_empty;
            let mut outcomes = Vec::new();
            for name in &names {
                match chainctl::reload(&admin, name) {
                    Ok(o) => outcomes.extend(o),
                    // Every chain: one without such NFs has nothing to reload.
                    Err(e) if every && format!("{e:#}").contains("no NF that reads a configuration file") => {
                        println!("{name}: no NF reads a configuration or rule file")
                    }
                    Err(e) => return Err(e),
                }
            }
            for r in &outcomes {
                println!("{}: {}", r.nf, r.outcome);
            }
            if outcomes.iter().all(|r| r.outcome == "applied" || r.outcome == "not running") {
                Ok(())
            } else {
                Err(anyhow!("not every NF applied the reload"))
            }
        }
        ChainCmd::List { admin, json } => emit(json, &chainctl::list(&admin)?, chainctl::list_table),
        ChainCmd::Show { name, admin: _, json, over: Some(file), tls } => {
            chain_show_over(&name, &file, tls.as_deref(), json)
        }
        ChainCmd::Show { name, admin, json, over: None, tls: _ } => {
            let s = chainctl::status(&admin, &name)?;
            emit(json, &s, chainctl::status_table)
        }
        ChainCmd::Audit { name, admin } => chain_audit(&name, &admin),
        ChainCmd::Capture { name, at, write, count, duration, snaplen, admin, filter } => {
            let req = ferry_chain::proto::CaptureRequest {
                chain: name,
                at,
                snaplen,
                count: count.unwrap_or(0),
                duration_ms: duration.map_or(0, |d| d.as_millis().max(1) as u64),
                filter: filter.join(" "),
            };
            chain_capture(&admin, &req, &write)
        }
        ChainCmd::Check { file, set, explain, live, admin, cost_model } => {
            let (placement, text) = chain_check(&file, &set, explain, cost_model)?;
            match live {
                true => check_live(&file, &set, &admin, &placement, &text),
                false => Ok(()),
            }
        }
        ChainCmd::Down { admin } => {
            chainctl::shutdown(&admin)?;
            println!("ferryd at {} is stopping, and every chain it runs with it", admin.display());
            Ok(())
        }
    }
}

/// `ferry gen ...`.
fn run_gen(cmd: GenCmd) -> Result<()> {
    match cmd {
        GenCmd::Live { dev, profile, stream, cpu, clock_shift, json } => {
            let p = profile.profile(&dev)?;
            let mut opts = genlive::LiveGenOptions::from_profile(&dev, &p, stream, cpu)?;
            opts.clock_shift = clock_shift;
            let report = genlive::run(&opts)?;
            emit(json, &report, pretty)
        }
        GenCmd::Txonly { port, profile, batch, run_for, measure: WindowArgs { warmup, window }, json } => {
            let p = profile.profile(&port.dev)?;
            let frame = p.first_frame()?;
            let opts = txonly::TxOnlyOptions { port: port.spec(), frame, batch, duration: run_for, warmup, window };
            let report = txonly::run(&opts)?;
            emit(json, &report, pretty)
        }
        GenCmd::Xsk { port, profile, pcap, stream, batch, rx, rx_idle, rx_dev, mica, json } => {
            let p = profile.profile(&port.dev)?;
            let opts = genxsk::XskGenOptions {
                port: port.spec(),
                profile: p,
                pcap,
                stream_base: stream,
                batch,
                rx,
                rx_idle,
                rx_dev,
                mica,
            };
            let report = genxsk::run(&opts)?;
            emit(json, &report, pretty)
        }
    }
}

/// Man pages and completions of ferry and ferryd, into `dir`: `man1`,
/// `man8` and `completions/{bash,zsh,fish}`.
fn generate(dir: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let commands = [(Cli::command(), "1"), (ferryd::cli::Args::command(), "8")];
    for (cmd, section) in &commands {
        let name = cmd.get_name().to_string();
        let man_dir = dir.join(format!("man{section}"));
        std::fs::create_dir_all(&man_dir)?;
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).section(*section).render(&mut page)?;
        std::fs::write(man_dir.join(format!("{name}.{section}")), page)?;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let out = dir.join("completions").join(shell.to_string());
            std::fs::create_dir_all(&out)?;
            clap_complete::generate_to(shell, &mut cmd.clone(), &name, &out)?;
        }
    }
    Ok(())
}

/// `ferry chain capture`: the pcapng to a file or standard output, the
/// account to standard error (as tcpdump's).
fn chain_capture(
    admin: &std::path::Path,
    req: &ferry_chain::proto::CaptureRequest,
    write: &std::path::Path,
) -> Result<()> {
    req.at.parse::<ferry_chain::capture::Point>().map_err(anyhow::Error::msg)?;
    req.filter.parse::<ferry_chain::filter::Filter>()?;
    let handle = chainctl::capture_start(admin, req)?;
    eprintln!("capturing at {} ({})", handle.point, handle.sites.join(", "));
    // Ctrl-C ends the capture as its count would: every copy taken is
    // written and the statistics block closes the file.
    let stopper = handle.stopper()?;
    install_stop_handler();
    std::thread::spawn(move || {
        while !ferry_cli::util::stop_requested() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = stopper.stop();
    });
    let stats = if write == std::path::Path::new("-") {
        handle.copy_to(&mut std::io::stdout().lock())?
    } else {
        let mut file = std::fs::File::create(write).with_context(|| format!("{}", write.display()))?;
        handle.copy_to(&mut file)?
    };
    eprintln!(
        "{} frames written; {} copied, {} lost (the capture fell behind), {} not taken by the filter",
        stats.written, stats.copied, stats.lost, stats.filtered
    );
    Ok(())
}

/// `ferry chain audit`: the frame census of every domain, and whether it holds.
fn chain_audit(name: &str, admin: &std::path::Path) -> Result<()> {
    let reports = chainctl::audit(admin, name)?;
    for r in &reports {
        println!(
            "domain {}: {} frames = {} in pool + {} in rings + {} held by threads; lost {}, duplicated {}, reclaimed {} -> {}",
            r.domain,
            r.frames_total,
            r.in_pool,
            r.in_rings,
            r.held_by_threads,
            r.lost,
            r.duplicated,
            r.reclaimed,
            if r.conserved() { "conserved" } else { "NOT CONSERVED" }
        );
    }
    if reports.iter().all(|r| r.conserved()) {
        Ok(())
    } else {
        Err(anyhow!("frame conservation violated"))
    }
}

/// `ferry chain check`: the file as ferryd would take it, placed.
fn chain_check(
    file: &std::path::Path,
    set: &[(String, String)],
    explain: bool,
    cost_model: Option<PathBuf>,
) -> Result<(ferry_place::Placement, String)> {
    let model = ferry_place::CostModel::configured(cost_model.as_deref())?;
    let (text, origin) = ferry_chain::spec::read_filled(file, set)?;
    let (spec, placement) = ferry_place::load_str_with(&text, &origin, model.as_ref())?;
    if explain {
        print!("{}", placement.explain());
    }
    println!(
        "{}: chain {:?} is valid: {} NFs in {} domains, {} ports, {} links",
        file.display(),
        spec.name(),
        spec.nfs.len(),
        spec.domains.len(),
        spec.ports.len(),
        spec.links.len()
    );
    for nf in &spec.nfs {
        let Some(kind) = nf.kind.as_deref() else { continue };
        for line in ferry_catalog::loaded(kind, &nf.args) {
            println!("  NF {}: {line}", nf.name);
        }
    }
    Ok((placement, text))
}

/// `ferry chain check --live`: asks the ferryd at `admin` whether it would
/// deploy `file` (filled by `set`); with none running, checks what the
/// deploy needs of this machine, as ferryd would.
fn check_live(
    file: &std::path::Path,
    set: &[(String, String)],
    admin: &std::path::Path,
    placement: &ferry_place::Placement,
    text: &str,
) -> Result<()> {
    if std::os::unix::net::UnixStream::connect(admin).is_ok() {
        let s = chainctl::check_deploy(admin, file, set)?;
        println!("live: the ferryd at {} would deploy chain {:?} ({} NFs)", admin.display(), s.name, s.nfs);
        return Ok(());
    }
    let plan = ferry_chain::plan::ChainPlan::compile(&placement.server);
    ferryd::preflight::check(&plan, placement, text, &file.display().to_string())?;
    println!(
        "live: this machine has what chain {:?} needs (no ferryd at {} to ask whether its devices are free)",
        plan.name,
        admin.display()
    );
    Ok(())
}

/// `ferry chain show --over FILE`: every host's part of a chain over hosts.
fn chain_show_over(name: &str, file: &std::path::Path, tls: Option<&std::path::Path>, json: bool) -> Result<()> {
    ferry_cli::hostctl::check_name(file, name)?;
    let parts = ferry_cli::hostctl::status(file, tls)?;
    emit(json, &parts, |parts| {
        parts
            .iter()
            .map(|p| match (&p.status, &p.error) {
                (Some(s), _) => format!("host {}:\n{}", p.host, chainctl::status_table(s)),
                (None, e) => format!("host {}: no answer: {}\n", p.host, e.as_deref().unwrap_or("")),
            })
            .collect()
    })?;
    match parts.iter().filter(|p| p.status.is_none()).count() {
        0 => Ok(()),
        n => Err(anyhow!("{n} hosts did not answer")),
    }
}
