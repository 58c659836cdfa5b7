//! `ferry-bench` (also run as `ferry bench`): Ferry's benchmarks, each a
//! JSON report and a readable table, side by side in one run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use ferry_bench::{
    chain, cost, evnf, firewall, io, ips, nsh, offload, parallel, peers, pipeline, realworld, soak, tenant,
};
use ferry_cli::util::{install_stop_handler, parse_duration};
use serde::Serialize;

/// Counts heap bytes per thread (a few instructions per allocation), so
/// `ferry bench parallel` can report the memory each worker core costs.
#[global_allocator]
static ALLOCATOR: ferry_parallel::heap::CountingAlloc = ferry_parallel::heap::CountingAlloc;

#[derive(Parser)]
#[command(name = "ferry bench", bin_name = "ferry bench", version, about = "Ferry's benchmarks: JSON plus a table")]
struct Cli {
    #[command(subcommand)]
    cmd: BenchCmd,
}

/// How `bench offload` and `bench tenant` measure each point.
#[derive(Args, Clone)]
struct MeasureArgs {
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Flat-out window of each throughput measurement.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    window: Duration,
    /// Offered load of each latency measurement (frames per second).
    #[arg(long, default_value_t = 20_000)]
    latency_pps: u64,
    /// Frames of each latency measurement.
    #[arg(long, default_value_t = 20_000)]
    latency_frames: u64,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// XDP_DROP, XDP_TX, AF_XDP RX-and-drop and AF_XDP l2fwd at 64 and 1500 B.
    Io {
        #[arg(long, value_delimiter = ',', default_value = "64,1500")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, value_parser = parse_duration, default_value = "1s")]
        warmup: Duration,
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        window: Duration,
        /// Scenarios (comma separated): xdp-drop, xdp-tx, afxdp-rxdrop, afxdp-l2fwd.
        #[arg(long, value_delimiter = ',', value_parser = io::parse_scenario)]
        scenarios: Option<Vec<io::Scenario>>,
        /// Also write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// P4SFC Fig. 5: the same chains placed by the orchestrator (NFs in XDP) vs all processes.
    Offload {
        /// Scenarios (comma separated): firewall (in -> fw -> out), firewall6 (the same with IPv6 frames,
        /// throughput only), chain (in -> fw -> monitor -> IPS -> out),
        /// p4sfc (in -> IPS -> monitor -> fw -> out), nat (the NAT whole in a process vs split: enat),
        /// scan (in -> payload scan -> out: in XDP vs a process).
        #[arg(long, value_delimiter = ',', default_value = "firewall,chain,p4sfc")]
        scenarios: Vec<String>,
        #[arg(long, value_delimiter = ',', default_value = "64,512,1500")]
        sizes: Vec<usize>,
        #[command(flatten)]
        measure: MeasureArgs,
        /// Also run each chain placed by this cost model (`ferry bench cost
        /// --out FILE`), with `fuse: auto`: the by-cost variant.
        #[arg(long)]
        cost_model: Option<PathBuf>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The SmartNIC paper's Fig. 5 (two tenants: XDP classification vs a router NF) and Fig. 6
    /// (latency of payload scan in XDP, in an NF, and forwarding only).
    Tenant {
        /// Figures (comma separated): classify (Fig. 5), scan (Fig. 6).
        #[arg(long, value_delimiter = ',', default_value = "classify,scan")]
        figures: Vec<String>,
        #[arg(long, value_delimiter = ',', default_value = "64,256,512,1024,1500")]
        sizes: Vec<usize>,
        #[command(flatten)]
        measure: MeasureArgs,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// What a host hop costs: one chain with its NFs on one, two and three
    /// hosts (network namespaces with their own ferryd), NSH between them.
    Nsh {
        #[arg(long, value_delimiter = ',', default_value = "64,256,512,1024,1500")]
        sizes: Vec<usize>,
        #[command(flatten)]
        measure: MeasureArgs,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The firewall's lookups at N rules: FLASH's linear scan vs the bit-vector classifier.
    Firewall {
        #[arg(long, default_value_t = 1000)]
        rules: usize,
        #[arg(long, default_value_t = 200_000)]
        packets: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The IPS at 1 000 and 10 000 generated rules against the same NF
    /// with none, on one mixed payload corpus: load time, ns per packet,
    /// packets per second.
    Ips {
        /// Rule counts (the NF with no rules is always measured too).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        rules: Vec<usize>,
        #[arg(long, default_value_t = 100_000)]
        packets: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Write the first count of generated rules (about one in seven
        /// needing an option the IPS does not run) to FILE, then stop:
        /// a ruleset to try `skip-unsupported` on.
        #[arg(long, value_name = "FILE")]
        write_rules: Option<PathBuf>,
        /// Also measure the rules of FILE (an operator's ruleset), loaded
        /// skipping what the IPS does not run.
        #[arg(long, value_name = "FILE")]
        rule_file: Option<PathBuf>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The per-frame costs placement weighs (a loop-device crossing, an XDP
    /// stage, a fused stage, a process hop), written as a cost model for
    /// `ferryd --cost-model`.
    Cost {
        /// Runs of the chain measurements (each figure the median).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, value_parser = parse_duration, default_value = "700ms")]
        warmup: Duration,
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        window: Duration,
        /// Write the cost model here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Ferry against what operators run instead (Open vSwitch with AF_XDP
    /// ports, nftables, IPVS, the Linux bridge), on one testbed, side by
    /// side, as ratios. Configurations: examples/peers/.
    Peers {
        /// Runs per figure (the median is reported), the systems interleaved.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Window of each measurement.
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        window: Duration,
        /// Systems (comma separated; default: all). Port to port: ovs-afxdp, linux-bridge,
        /// ferry-process, ferry-process-busy, ferry-xdp. 1000-rule ACL: nft-linear, nft-set,
        /// ovs-afxdp-acl, ferry-firewall, ferry-firewall-busy, ferry-efw. Load balancer: ipvs-nat,
        /// ipvs-dr, nft-lb, ferry-elb. NAT: nft-masquerade, ferry-enat-split, ferry-enat-whole.
        /// Chain: nft-chain, ovs-afxdp-chain, ferry-chain.
        #[arg(long, value_delimiter = ',', value_parser = peers::parse_system)]
        systems: Vec<peers::System>,
        /// One run per system at 5 kpps, 1000 frames, no saturation: do
        /// they all forward (counts, not speed)?
        #[arg(long)]
        smoke: bool,
        /// Where d0's NAPI runs for systems that forward in its XDP hook:
        /// thread (on the system's CPU) or softirq (on the sending CPU);
        /// default: both, as two rows.
        #[arg(long, value_enum)]
        xdp_napi: Option<peers::XdpNapi>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Cost of the XDP stage pipeline per element (P4SFC Fig. 6).
    Pipeline {
        /// Runs per measurement (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Packets per BPF_PROG_TEST_RUN call.
        #[arg(long, default_value_t = 1_000_000)]
        repeat: u32,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// eVNF §V in namespaces: SFC 1 (nftables+HAProxy vs eFW+eLB), SFC 2
    /// (nDPI alone vs eDPI), and the pipeline overhead (P4SFC Fig. 6).
    Evnf {
        /// Scenarios (comma separated): sfc1, sfc2, pipeline.
        #[arg(long, value_delimiter = ',', default_value = "sfc1,sfc2,pipeline")]
        scenarios: Vec<String>,
        /// wrk connection counts for SFC 1.
        #[arg(long, value_delimiter = ',', default_value = "4,12,20,36")]
        conns: Vec<u32>,
        /// Elephant-flow shares (%) for SFC 2.
        #[arg(long, value_delimiter = ',', default_value = "0,25,50,75,100")]
        elephants: Vec<u32>,
        /// Length of each measurement (whole seconds).
        #[arg(long, value_parser = parse_duration, default_value = "5s")]
        duration: Duration,
        /// Runs per variant, alternating which goes first; the median run
        /// of each point is reported.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The parallel runtime over in-memory traces: 1 vs 2 workers for each
    /// NF, and NFOS's three case studies with the profiler's diagnosis.
    Parallel {
        /// NFs (comma separated).
        #[arg(long, value_delimiter = ',', default_value = "firewall,policer,maglev,nat,bridge,anti_ddos")]
        nfs: Vec<String>,
        /// Packets in each NF's trace.
        #[arg(long, default_value_t = 1_000_000)]
        packets: usize,
        /// Runs per point; the median is reported.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Leave out the case studies.
        #[arg(long)]
        no_case_studies: bool,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Two chains under traffic for MINUTES while a driver deploys and
    /// removes a third, reloads, kills NFs (one, two at once), stops a
    /// sink, and ends ferryd --persist by SIGTERM and SIGKILL for a new one
    /// to adopt; fails on a lost frame, an audit not conserved, or memory
    /// or fd growth past its bounds. A table, soak.json and soak.png.
    Soak {
        #[arg(long, default_value_t = 60)]
        minutes: u64,
        /// Frames per second of each steady chain's source.
        #[arg(long, default_value_t = 50_000)]
        rate: u64,
        /// Directory for the chain files, ferryd's log, soak.json and soak.png.
        #[arg(long, default_value = "target/soak")]
        out: PathBuf,
        /// One fault every this long.
        #[arg(long, value_parser = parse_duration, default_value = "5s")]
        every: Duration,
    },
    /// FLASH §6.3's real-world chain in memory mode: Fig. 14 (offered
    /// load, backpressure on and off), Table 2 (each NF's capacity), Fig.
    /// 16/17 (fan-in, fan-out).
    Realworld {
        /// Scenarios (comma separated): fig14, table2, fig16-17.
        #[arg(long, value_delimiter = ',', default_value = "fig14,table2,fig16-17")]
        scenarios: Vec<String>,
        /// The firewall's rules.
        #[arg(long, default_value = "examples/chains/flash-fw-1000.rules")]
        rules: PathBuf,
        /// Frame length, bytes (FLASH: 512).
        #[arg(long, default_value_t = 512)]
        size: u64,
        /// Where `make -C examples/c-nf` built the C NFs (Table 2's MICA).
        #[arg(long, default_value = "examples/c-nf")]
        cnf: PathBuf,
        #[arg(long, value_parser = parse_duration, default_value = "700ms")]
        warmup: Duration,
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        window: Duration,
        /// Also write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// FLASH's chaining experiments (Fig. 10, Fig. 11, Table 1, idle CPU).
    Chain {
        /// Scenarios (comma separated): fig10, fig11, table1, idle, load (latency against offered load),
        /// roundtrip (default polling against busy mode, one NF alone on a CPU).
        #[arg(long, value_delimiter = ',', default_value = "fig10,fig11,table1,idle,load,roundtrip")]
        scenarios: Vec<String>,
        /// Chain lengths for fig10.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        nfs: Vec<usize>,
        /// Chain lengths for load.
        #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
        load_nfs: Vec<usize>,
        /// Every NF's smart polling, as the chain file's `poll: { ... }`
        /// says it, e.g. "idle_timeout_us: 0" (default: the file's defaults,
        /// `idle_polls` settled by ferryd).
        #[arg(long)]
        poll: Option<String>,
        #[arg(long, value_parser = parse_duration, default_value = "700ms")]
        warmup: Duration,
        #[arg(long, value_parser = parse_duration, default_value = "2s")]
        window: Duration,
        /// Leave out the kernel (veth + XDP redirect) chain.
        #[arg(long)]
        no_kernel: bool,
        /// Also write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// `--poll`, checked as the chain file would check it, before it goes
/// verbatim into every chain the bench writes.
fn check_poll(poll: Option<&str>) -> Result<()> {
    if let Some(text) = poll {
        serde_yaml::from_str::<ferry_chain::spec::PollSpec>(&format!("{{ {text} }}"))
            .with_context(|| format!("--poll {text:?}: not a chain file's poll: {{ ... }}"))?;
    }
    Ok(())
}

/// Prints `report` as its table and writes it to `json` (if given).
fn show<R: Serialize>(report: &R, table: fn(&R) -> String, json: Option<&std::path::Path>) -> Result<()> {
    print!("{}", table(report));
    write_json(json, report)
}

/// Writes a benchmark report to `path` (if given), creating its directory.
fn write_json<T: Serialize>(path: Option<&std::path::Path>, report: &T) -> Result<()> {
    if let Some(path) = path {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(report)?)?;
        println!("JSON: {}", path.display());
    }
    Ok(())
}

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).init();
    install_stop_handler();
    if let Err(e) = run(Cli::parse().cmd) {
        eprintln!("ferry bench: {e:#}");
        std::process::exit(1);
    }
}

fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Io { sizes, runs, warmup, window, scenarios, json } => {
            let opts = io::BenchIoOptions {
                sizes,
                runs: runs.max(1),
                warmup,
                window,
                scenarios: scenarios.unwrap_or_else(|| io::Scenario::ALL.to_vec()),
            };
            show(&io::run_io(&opts)?, io::table, json.as_deref())
        }
        BenchCmd::Realworld { scenarios, rules, size, cnf, warmup, window, json } => {
            // NFs run with / as their working directory.
            let rules = std::fs::canonicalize(&rules).with_context(|| format!("{}", rules.display()))?;
            let cnf = std::path::absolute(&cnf)?;
            let opts = realworld::BenchRealworldOptions { scenarios, warmup, window, rules, size, cnf };
            show(&realworld::run(&opts)?, realworld::table, json.as_deref())
        }
        BenchCmd::Chain { scenarios, nfs, load_nfs, poll, warmup, window, no_kernel, json } => {
            check_poll(poll.as_deref())?;
            let opts = chain::BenchChainOptions { scenarios, nfs, load_nfs, poll, warmup, window, kernel: !no_kernel };
            show(&chain::run(&opts)?, chain::table, json.as_deref())
        }
        BenchCmd::Soak { minutes, rate, out, every } => {
            let report = soak::run(&soak::SoakOptions { minutes: minutes.max(1), rate, out, every })?;
            print!("{}", soak::table(&report));
            Ok(())
        }
        BenchCmd::Peers { runs, window, systems, smoke, xdp_napi, json } => {
            let systems = if systems.is_empty() { peers::System::ALL.to_vec() } else { systems };
            let opts = peers::BenchPeersOptions { runs: runs.max(1), window, systems, smoke, xdp_napi };
            show(&peers::run(&opts)?, peers::table, json.as_deref())
        }
        BenchCmd::Offload { scenarios, sizes, measure, cost_model, json } => {
            if let Some(m) = &cost_model {
                ferry_place::CostModel::load(m)?;
            }
            for sc in &scenarios {
                if !["firewall", "firewall6", "chain", "p4sfc", "nat", "scan"].contains(&sc.as_str()) {
                    return Err(anyhow!("unknown scenario {sc:?} (firewall, firewall6, chain, p4sfc, nat, scan)"));
                }
            }
            let opts = offload::BenchOffloadOptions {
                scenarios,
                sizes,
                runs: measure.runs.max(1),
                window: measure.window,
                latency_pps: measure.latency_pps,
                latency_frames: measure.latency_frames,
                cost_model,
            };
            show(&offload::run(&opts)?, offload::table, json.as_deref())
        }
        BenchCmd::Tenant { figures, sizes, measure, json } => {
            tenant::check_figures(&figures)?;
            let opts = tenant::BenchTenantOptions {
                figures,
                sizes,
                runs: measure.runs.max(1),
                window: measure.window,
                latency_pps: measure.latency_pps,
                latency_frames: measure.latency_frames,
            };
            show(&tenant::run(&opts)?, tenant::table, json.as_deref())
        }
        BenchCmd::Nsh { sizes, measure, json } => {
            nsh::check_sizes(&sizes)?;
            let opts = nsh::BenchNshOptions {
                sizes,
                runs: measure.runs.max(1),
                window: measure.window,
                latency_pps: measure.latency_pps,
                latency_frames: measure.latency_frames,
            };
            show(&nsh::run(&opts)?, nsh::table, json.as_deref())
        }
        BenchCmd::Firewall { rules, packets, runs, json } => {
            show(&firewall::run(rules, packets, runs)?, firewall::table, json.as_deref())
        }
        BenchCmd::Ips { rules, write_rules: Some(file), .. } => {
            let n = rules.first().copied().unwrap_or(1000);
            ips::write_rules(&file, n, 0x1d5).with_context(|| format!("writing {}", file.display()))?;
            println!("{}: {n} generated rules", file.display());
            Ok(())
        }
        BenchCmd::Ips { rules, packets, runs, write_rules: None, rule_file, json } => {
            show(&ips::run(&rules, rule_file.as_deref(), packets, runs)?, ips::table, json.as_deref())
        }
        BenchCmd::Cost { runs, warmup, window, out, json } => {
            let opts = cost::BenchCostOptions { runs, warmup, window, pipeline_runs: 3, pipeline_repeat: 200_000 };
            let report = cost::run(&opts)?;
            if let Some(out) = &out {
                std::fs::write(out, serde_json::to_string_pretty(&report.model)?)
                    .with_context(|| format!("writing {}", out.display()))?;
                println!("cost model: {} (give it to ferryd --cost-model)", out.display());
            }
            show(&report, cost::table, json.as_deref())
        }
        BenchCmd::Pipeline { runs, repeat, json } => {
            show(&pipeline::run(repeat, runs.max(1))?, pipeline::table, json.as_deref())
        }
        BenchCmd::Evnf { scenarios, conns, elephants, duration, runs, json } => {
            let opts = evnf::BenchEvnfOptions { scenarios, conns, elephants, duration, runs };
            show(&evnf::run(&opts)?, evnf::table, json.as_deref())
        }
        BenchCmd::Parallel { nfs, packets, runs, no_case_studies, json } => {
            let opts = parallel::BenchParallelOptions { nfs, packets, runs, case_studies: !no_case_studies };
            show(&parallel::run(&opts)?, parallel::table, json.as_deref())
        }
    }
}
