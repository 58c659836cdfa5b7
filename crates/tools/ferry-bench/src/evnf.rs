//! `ferry bench evnf`: eVNF §V reproduced in network namespaces, both
//! variants on the same testbed (examples/testbeds/sfc.yaml), addresses
//! and CPU pinning, side by side in one run:
//!
//! * SFC 1: wrk (client, CPU 0) -> firewall -> L4 balancer -> two nginx
//!   (b1, b2, CPU 1). Kernel variant: nftables rules equal to the eFW's
//!   fast rules and HAProxy in TCP mode (CPU 1) on the VIP. Ferry variant:
//!   eFW -> eLB in XDP (examples/chains/edge.yaml under ferryd, control
//!   planes on CPU 1).
//!   Requests/s and latency at each connection count; CPU of the balancer
//!   process and of softirq (where XDP and nftables run).
//! * SFC 2: four iperf3 flows (client, CPU 0) -> firewall -> DPI -> b1;
//!   a share of them to the elephant protocol's ports. nDPI alone (every
//!   frame inspected in user space) vs eDPI (bypass rules), both
//!   examples/chains/edge-dpi.yaml under ferryd, NFs on CPU 1.
//! * Pipeline overhead (P4SFC Fig. 6): `bench pipeline`'s measurement.

use std::time::Duration;

use anyhow::{Context, Result};
use ferry_testbed::apps::{
    self, CpuMeter, Haproxy, HaproxyOpts, Iperf3Server, IperfJob, IperfOpts, Nginx, NginxOpts, WrkOpts,
};
use ferry_testbed::{Testbed, TestbedNames};
use serde::Serialize;

use ferry_chain::proto::Status;

use ferry_cli::sfc::{run_in, sfc_testbed, SfcChain, EDGE, EDGE_DPI, SFC1, SFC2, VIP};

pub struct BenchEvnfOptions {
    pub scenarios: Vec<String>,
    pub conns: Vec<u32>,
    pub elephants: Vec<u32>,
    pub duration: Duration,
    /// Runs per variant, alternating which goes first; medians reported.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpRow {
    pub variant: &'static str,
    pub connections: u32,
    pub requests_per_sec: f64,
    pub latency_avg_us: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub socket_errors: u64,
    /// Of the socket errors, requests slower than wrk's timeout.
    pub timeouts: u64,
    /// CPU of the balancer's process (HAProxy, or the eLB control plane), % of one CPU.
    pub balancer_process_cpu: f64,
    /// Softirq CPU summed over CPUs (XDP, nftables, veth), % of one CPU.
    pub softirq_cpu: f64,
    pub busy_cpu: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpRatio {
    pub connections: u32,
    /// eFW+eLB requests/s over nftables+HAProxy requests/s.
    pub rps_ratio: f64,
    /// 1 - eFW+eLB average latency / nftables+HAProxy average latency.
    pub latency_reduction: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DpiRow {
    pub variant: &'static str,
    pub elephant_percent: u32,
    pub gbit_per_sec: f64,
    /// CPU of the DPI process (the slow path), % of one CPU.
    pub dpi_process_cpu: f64,
    pub softirq_cpu: f64,
    pub busy_cpu: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DpiRatio {
    pub elephant_percent: u32,
    /// eDPI throughput over nDPI-alone throughput.
    pub throughput_ratio: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct BenchEvnfReport {
    pub machine: String,
    pub duration_s: f64,
    /// Runs per variant (alternating order); each row is the median run.
    pub runs: usize,
    pub sfc1: Vec<HttpRow>,
    pub sfc1_ratios: Vec<HttpRatio>,
    pub sfc2: Vec<DpiRow>,
    pub sfc2_ratios: Vec<DpiRatio>,
    pub pipeline: Option<crate::pipeline::BenchPipelineReport>,
    /// The Ferry chain's status (every NF's counters) at the end of each
    /// Ferry run.
    pub ferry_status: Vec<Status>,
}

const BACKENDS: [(&str, &str, &str); 2] = [("b1", "10.10.2.11:80", "b1"), ("b2", "10.10.3.12:80", "b2")];

/// The eFW's fast rules as nftables rules, for the kernel variant (HAProxy
/// terminates the connections, so they are on the input hook).
const KERNEL_FIREWALL: &str = "table inet ferry_bench_fw {
  chain input {
    type filter hook input priority 0; policy accept;
    iifname \"d0\" ip saddr 10.10.66.0/24 drop
    iifname \"d0\" tcp dport 80 accept
    iifname \"d0\" icmp type echo-request accept
    iifname \"d0\" ct state established,related accept
    iifname \"d0\" drop
  }
}
";

fn http_runs(tb: &TestbedNames, variant: &'static str, pid: u32, opts: &BenchEvnfOptions) -> Result<Vec<HttpRow>> {
    let url = format!("http://{VIP}/");
    // Warm-up: caches, neighbour entries, connection tracking.
    let warm =
        WrkOpts { connections: 4, threads: 1, duration: Duration::from_secs(1), cpu: Some(0), ..Default::default() };
    apps::wrk(tb, "client", &url, warm).with_context(|| format!("{variant}: warm-up"))?;
    let mut rows = Vec::new();
    for &c in &opts.conns {
        let meter = CpuMeter::start(&[pid])?;
        let wrk = WrkOpts {
            connections: c,
            threads: c.min(2),
            duration: opts.duration,
            cpu: Some(0),
            timeout: Duration::from_secs(2),
        };
        let r = apps::wrk(tb, "client", &url, wrk).with_context(|| format!("{variant}: wrk -c {c}"))?;
        let cpu = meter.stop()?;
        rows.push(HttpRow {
            variant,
            connections: c,
            requests_per_sec: r.requests_per_sec,
            latency_avg_us: r.latency_avg_us,
            latency_p50_us: r.latency_p50_us,
            latency_p99_us: r.latency_p99_us,
            socket_errors: r.socket_errors,
            timeouts: r.timeouts,
            balancer_process_cpu: cpu.pid_percent(pid).unwrap_or(0.0),
            softirq_cpu: cpu.softirq_percent,
            busy_cpu: cpu.total_busy_percent,
        });
    }
    Ok(rows)
}

/// nftables + HAProxy: the VIP is the dut's own address.
fn kernel_balancer(tb: &Testbed, opts: &BenchEvnfOptions) -> Result<Vec<HttpRow>> {
    run_in(tb, "dut", "ip", &["addr", "add", &format!("{VIP}/32"), "dev", "lo"])?;
    apps::nft_apply(tb, "dut", KERNEL_FIREWALL)?;
    let backends: Vec<_> = BACKENDS.iter().map(|(_, a, _)| (a.parse().expect("address"), 1)).collect();
    let haproxy =
        Haproxy::start(tb, "dut", format!("{VIP}:80").parse()?, &backends, HaproxyOpts { cpu: Some(1), nbthread: 1 })?;
    let rows = http_runs(tb, "nftables+haproxy", haproxy.pid(), opts);
    drop(haproxy);
    run_in(tb, "dut", "nft", &["delete", "table", "inet", "ferry_bench_fw"])?;
    run_in(tb, "dut", "ip", &["addr", "del", &format!("{VIP}/32"), "dev", "lo"])?;
    rows
}

/// eFW + eLB in XDP; the balancer's control plane is the process measured.
fn ferry_balancer(tb: &Testbed, opts: &BenchEvnfOptions, reports: &mut Vec<Status>) -> Result<Vec<HttpRow>> {
    let chain = SfcChain::start(tb, EDGE, SFC1, Some(1))?;
    let rows = http_runs(tb, "efw+elb", chain.pid("lb")?, opts)?;
    reports.push(chain.rc.status()?);
    chain.stop()?;
    Ok(rows)
}

/// Of several runs' rows for one point, the one with the median value.
fn median_row<T: Clone>(mut rows: Vec<T>, value: impl Fn(&T) -> f64) -> Option<T> {
    rows.sort_by(|a, b| value(a).total_cmp(&value(b)));
    rows.get(rows.len() / 2).cloned()
}

/// Runs `a` and `b` `runs` times in alternating order (a b, b a, a b, …)
/// so that neither always goes first, and keeps each point's median run.
fn alternate<T: Clone>(
    runs: usize,
    mut a: impl FnMut() -> Result<Vec<T>>,
    mut b: impl FnMut() -> Result<Vec<T>>,
    value: impl Fn(&T) -> f64 + Copy,
) -> Result<(Vec<T>, Vec<T>)> {
    let (mut all_a, mut all_b): (Vec<Vec<T>>, Vec<Vec<T>>) = (Vec::new(), Vec::new());
    for r in 0..runs.max(1) {
        if r % 2 == 0 {
            all_a.push(a()?);
            all_b.push(b()?);
        } else {
            all_b.push(b()?);
            all_a.push(a()?);
        }
    }
    let medians = |all: Vec<Vec<T>>| -> Vec<T> {
        let points = all.first().map_or(0, Vec::len);
        (0..points).filter_map(|i| median_row(all.iter().filter_map(|r| r.get(i).cloned()).collect(), value)).collect()
    };
    Ok((medians(all_a), medians(all_b)))
}

fn sfc1(opts: &BenchEvnfOptions, report: &mut BenchEvnfReport) -> Result<()> {
    let tb = sfc_testbed()?;
    let nginx_opts = NginxOpts { cpu: Some(1), keepalive_requests: 1_000_000, ..Default::default() };
    let _nginx: Vec<Nginx> = BACKENDS
        .iter()
        .map(|(ns, addr, name)| Nginx::start(&tb, ns, addr.parse().expect("address"), name, nginx_opts.clone()))
        .collect::<Result<_, _>>()?;
    let mut statuses = Vec::new();
    let (kernel, ferry) = alternate(
        opts.runs,
        || kernel_balancer(&tb, opts),
        || ferry_balancer(&tb, opts, &mut statuses),
        |r: &HttpRow| r.requests_per_sec,
    )?;
    report.ferry_status.extend(statuses);
    for (k, f) in kernel.iter().zip(&ferry) {
        report.sfc1_ratios.push(HttpRatio {
            connections: k.connections,
            rps_ratio: f.requests_per_sec / k.requests_per_sec.max(1e-9),
            latency_reduction: 1.0 - f.latency_avg_us / k.latency_avg_us.max(1e-9),
        });
    }
    report.sfc1.extend(kernel);
    report.sfc1.extend(ferry);
    Ok(())
}

fn dpi_runs(tb: &TestbedNames, variant: &'static str, pid: u32, opts: &BenchEvnfOptions) -> Result<Vec<DpiRow>> {
    let server = "10.10.2.11".parse()?;
    // Warm-up: neighbour entries, the slow path's first flows.
    let warm = IperfOpts { duration: Duration::from_secs(1), cpu: Some(0), ..Default::default() };
    apps::iperf3_client(tb, "client", server, 5301, warm).with_context(|| format!("{variant}: warm-up"))?;
    let mut rows = Vec::new();
    for &pct in &opts.elephants {
        let elephants = (4 * pct / 100) as u16;
        let jobs: Vec<IperfJob> = (0..4u16)
            .map(|i| IperfJob {
                server,
                port: if i < elephants { 5201 + i } else { 5301 + i },
                opts: IperfOpts { duration: opts.duration, cpu: Some(0), ..Default::default() },
            })
            .collect();
        let meter = CpuMeter::start(&[pid])?;
        let reports = apps::iperf3_clients(tb, "client", &jobs).with_context(|| format!("{variant}: iperf3"))?;
        let cpu = meter.stop()?;
        rows.push(DpiRow {
            variant,
            elephant_percent: pct,
            gbit_per_sec: reports.iter().map(|r| r.bits_per_second).sum::<f64>() / 1e9,
            dpi_process_cpu: cpu.pid_percent(pid).unwrap_or(0.0),
            softirq_cpu: cpu.softirq_percent,
            busy_cpu: cpu.total_busy_percent,
        });
    }
    Ok(rows)
}

fn sfc2(opts: &BenchEvnfOptions, report: &mut BenchEvnfReport) -> Result<()> {
    let tb = sfc_testbed()?;
    let server = "10.10.2.11".parse()?;
    let _servers: Vec<Iperf3Server> = (0..4u16)
        .flat_map(|i| [5201 + i, 5301 + i])
        .map(|port| Iperf3Server::start(&tb, "b1", server, port, Some(1)))
        .collect::<Result<_, _>>()?;
    let alone = SFC2.replace("idle_timeout_s: 5", "idle_timeout_s: 5\n  bypass: false");
    let statuses = std::cell::RefCell::new(Vec::new());
    let dpi = |config: &str, variant: &'static str| -> Result<Vec<DpiRow>> {
        let chain = SfcChain::start(&tb, EDGE_DPI, config, Some(1))?;
        let rows = dpi_runs(&tb, variant, chain.pid("dpi")?, opts)?;
        statuses.borrow_mut().push(chain.rc.status()?);
        chain.stop()?;
        Ok(rows)
    };
    let (ndpi, edpi) =
        alternate(opts.runs, || dpi(&alone, "ndpi-alone"), || dpi(SFC2, "edpi"), |r: &DpiRow| r.gbit_per_sec)?;
    report.ferry_status.extend(statuses.into_inner());
    for (n, e) in ndpi.iter().zip(&edpi) {
        report.sfc2_ratios.push(DpiRatio {
            elephant_percent: n.elephant_percent,
            throughput_ratio: e.gbit_per_sec / n.gbit_per_sec.max(1e-9),
        });
    }
    report.sfc2.extend(ndpi);
    report.sfc2.extend(edpi);
    Ok(())
}

pub fn run(opts: &BenchEvnfOptions) -> Result<BenchEvnfReport> {
    let mut report = BenchEvnfReport {
        machine: crate::io::machine_summary(),
        duration_s: opts.duration.as_secs_f64(),
        runs: opts.runs.max(1),
        ..Default::default()
    };
    for s in &opts.scenarios {
        match s.as_str() {
            "sfc1" => sfc1(opts, &mut report).context("SFC 1")?,
            "sfc2" => sfc2(opts, &mut report).context("SFC 2")?,
            "pipeline" => report.pipeline = Some(crate::pipeline::run(200_000, 3)?),
            other => anyhow::bail!("unknown scenario {other:?} (sfc1, sfc2, pipeline)"),
        }
    }
    Ok(report)
}

pub fn table(r: &BenchEvnfReport) -> String {
    let mut out = format!(
        "machine: {}; {} s per point; median of {} runs per variant, alternating which goes first\n",
        r.machine, r.duration_s, r.runs
    );
    if !r.sfc1.is_empty() {
        out += "\nSFC 1: wrk -> firewall -> L4 balancer -> 2 nginx (requests/s, latency in us, CPU in % of one CPU)\n";
        out += &format!(
            "{:<18} {:>5} {:>10} {:>9} {:>9} {:>9} {:>6} {:>9} {:>8} {:>6}\n",
            "variant", "conns", "req/s", "lat avg", "p50", "p99", "errors", "lb proc", "softirq", "busy"
        );
        for x in &r.sfc1 {
            out += &format!(
                "{:<18} {:>5} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>6} {:>9.1} {:>8.1} {:>6.0}\n",
                x.variant,
                x.connections,
                x.requests_per_sec,
                x.latency_avg_us,
                x.latency_p50_us,
                x.latency_p99_us,
                x.socket_errors,
                x.balancer_process_cpu,
                x.softirq_cpu,
                x.busy_cpu
            );
        }
        for x in &r.sfc1_ratios {
            out += &format!(
                "  {} conns: eFW+eLB / nftables+HAProxy = {:.2}x requests/s, {:.0}% lower latency\n",
                x.connections,
                x.rps_ratio,
                x.latency_reduction * 100.0
            );
        }
    }
    if !r.sfc2.is_empty() {
        out += "\nSFC 2: 4 iperf3 flows -> firewall -> DPI (Gbit/s, CPU in % of one CPU)\n";
        out += &format!(
            "{:<12} {:>10} {:>8} {:>9} {:>8} {:>6}\n",
            "variant", "elephants", "Gbit/s", "dpi proc", "softirq", "busy"
        );
        for x in &r.sfc2 {
            out += &format!(
                "{:<12} {:>9}% {:>8.2} {:>9.1} {:>8.1} {:>6.0}\n",
                x.variant, x.elephant_percent, x.gbit_per_sec, x.dpi_process_cpu, x.softirq_cpu, x.busy_cpu
            );
        }
        for x in &r.sfc2_ratios {
            out += &format!("  {}% elephants: eDPI / nDPI alone = {:.2}x\n", x.elephant_percent, x.throughput_ratio);
        }
    }
    if let Some(p) = &r.pipeline {
        out += "\nPipeline overhead (P4SFC Fig. 6)\n";
        out += &crate::pipeline::table(p);
    }
    out
}
