//! `ferry bench io`: the packet-I/O baselines of this machine, side by side
//! in one run — XDP_DROP, XDP_TX, AF_XDP RX-and-drop, AF_XDP TX-only and
//! AF_XDP l2fwd, at 64 B and 1500 B, each the median of several runs.
//! l2fwd receives and transmits, so it is bounded by the lower of the
//! RX-and-drop and TX-only rates.
//!
//! Topology: namespace `gen` (g0) <-> namespace `dut` (d0), one veth pair.
//! The live-frames generator runs in `gen` pinned to CPU 0 and redirects
//! frames out of g0; the device under test runs on d0 pinned to CPU 1;
//! frames sent back (XDP_TX, l2fwd) are counted by an XDP drop on g0.
//! TX-only sends from d0 on its own (no generator): one frame written into
//! every buffer once, descriptors recycled from the completion ring.
//! d0's receive processing (veth NAPI) runs threaded and pinned to CPU 1
//! too, so that everything the device under test does is on CPU 1, as it
//! would be on the core that owns a NIC queue. The generator reads the
//! clock once per 16 frames (`--clock-shift 4`): the stamps are not used
//! here and the clock is its largest cost in a VM.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use ferry_cli::proc::{self, num};

pub const BENCH_TESTBED: &str = r#"
name: bench-io
namespaces:
  - name: gen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:00:01", addrs: ["10.77.0.1/24"] }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:00:02", addrs: ["10.77.0.2/24"] }
"#;

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    XdpDrop,
    XdpTx,
    XskRxDrop,
    XskTxOnly,
    XskL2fwd,
}

impl Scenario {
    pub const ALL: [Scenario; 5] =
        [Scenario::XdpDrop, Scenario::XdpTx, Scenario::XskRxDrop, Scenario::XskTxOnly, Scenario::XskL2fwd];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::XdpDrop => "xdp-drop",
            Scenario::XdpTx => "xdp-tx",
            Scenario::XskRxDrop => "afxdp-rxdrop",
            Scenario::XskTxOnly => "afxdp-txonly",
            Scenario::XskL2fwd => "afxdp-l2fwd",
        }
    }

    fn returns_traffic(self) -> bool {
        matches!(self, Scenario::XdpTx | Scenario::XskTxOnly | Scenario::XskL2fwd)
    }
}

#[derive(Debug, Clone)]
pub struct BenchIoOptions {
    pub sizes: Vec<usize>,
    pub runs: usize,
    pub warmup: Duration,
    pub window: Duration,
    pub scenarios: Vec<Scenario>,
}

/// One scenario at one size: all runs and their median.
#[derive(Debug, Serialize)]
pub struct IoResult {
    pub scenario: &'static str,
    pub frame_len: usize,
    /// Packets per second handled by the device under test, per run.
    pub runs_mpps: Vec<f64>,
    pub median_mpps: f64,
    /// Generator rate (frames redirected out of g0), median.
    pub generator_mpps: f64,
    /// Frames that came back to g0 (XDP_TX and l2fwd), median, Mpps.
    pub returned_mpps: Option<f64>,
    pub median_gbps: f64,
}

#[derive(Debug, Serialize)]
pub struct BenchIoReport {
    pub machine: String,
    pub results: Vec<IoResult>,
}

/// The middle value of `v` (the upper one of an even count); `v` must
/// not be empty.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

fn secs(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Runs one measurement; returns (dut pps, generator pps, returned pps).
fn measure_once(
    tb: &ferry_testbed::Testbed,
    s: Scenario,
    size: usize,
    o: &BenchIoOptions,
) -> Result<(f64, f64, Option<f64>)> {
    let (gen_ns, dut_ns) = (tb.ns_name("gen").to_string(), tb.ns_name("dut").to_string());
    let total = o.warmup + o.window;
    // Each side times its window from the first frame it sees, so process
    // start-up order does not matter; the timeout only bounds a broken run.
    let timeout = secs(total + Duration::from_secs(20));
    let (warmup, window) = (secs(o.warmup), secs(o.window));
    let dut_args = dut_args(s, size, (&warmup, &window, &timeout), total);
    // TX-only sends by itself: it starts once g0 counts what arrives.
    let dut = (s != Scenario::XskTxOnly).then(|| proc::spawn(&dut_ns, &dut_args, Some(1))).transpose()?;
    // The returning frames need an XDP program on g0 to be received there.
    let ret = if s.returns_traffic() {
        let args = argv(&["xdp", "run", "--dev", "g0", "--prog", "drop"]);
        let window_flags = argv(&["--warmup", &warmup, "--window", &window, "--timeout", &timeout]);
        Some(proc::spawn(&gen_ns, &[args, window_flags].concat(), Some(0))?)
    } else {
        None
    };
    if s.returns_traffic() {
        proc::wait_for_xdp(&gen_ns, "g0", Duration::from_secs(60))?;
    }
    if s == Scenario::XskTxOnly {
        let dut_report = proc::spawn(&dut_ns, &dut_args, Some(1))?.wait(total + Duration::from_secs(30))?;
        let returned = ret.expect("TX-only returns traffic").wait(total + Duration::from_secs(30))?;
        let pps = num(&dut_report, "/window_tx") / num(&dut_report, "/window_seconds").max(1e-9);
        return Ok((pps, 0.0, Some(num(&returned, "/pps"))));
    }
    // Traffic starts once the DUT (and the return sink) are attached.
    proc::wait_for_xdp(&dut_ns, "d0", Duration::from_secs(60))?;
    // The testbed is reused across scenarios, so set the NAPI mode every
    // time (the setting outlives the program that made it possible).
    let napi_cpu = matches!(s, Scenario::XdpDrop | Scenario::XdpTx).then_some(1);
    proc::set_napi_thread(&dut_ns, "d0", napi_cpu)?;
    let gen_time = secs(total + Duration::from_millis(500));
    let size = size.to_string();
    let gen_args = argv(&[
        "gen",
        "live",
        "--dev",
        "g0",
        "--dst-mac",
        "02:00:00:00:00:02",
        "--size",
        &size,
        "--clock-shift",
        "4",
        "--duration",
        &gen_time,
    ]);
    let gen = proc::spawn(&gen_ns, &gen_args, Some(0))?;
    let budget = total + Duration::from_secs(30);
    let gen_report = gen.wait(budget).context("generator")?;
    // The NF runs until stopped; its window closed while traffic flowed.
    let dut = dut.context("the device under test runs")?;
    let dut_report = match s {
        Scenario::XskRxDrop | Scenario::XskL2fwd => dut.stop(),
        _ => dut.wait(budget),
    }
    .context("device under test")?;
    let returned = match ret {
        Some(r) => {
            let v = r.wait(budget)?;
            Some(num(&v, "/pps"))
        }
        None => None,
    };
    let dut_pps = dut_pps(s, &dut_report);
    Ok((dut_pps, num(&gen_report, "/pps"), returned))
}

/// The device under test's `ferry` subcommand for scenario `s`, given the
/// window's (warmup, window, timeout) as flags.
fn dut_args(s: Scenario, size: usize, (warmup, window, timeout): (&str, &str, &str), total: Duration) -> Vec<String> {
    match s {
        Scenario::XdpDrop | Scenario::XdpTx => {
            let prog = if s == Scenario::XdpDrop { "drop" } else { "tx" };
            argv(&[
                "xdp",
                "run",
                "--dev",
                "d0",
                "--prog",
                prog,
                "--warmup",
                warmup,
                "--window",
                window,
                "--timeout",
                timeout,
            ])
        }
        Scenario::XskRxDrop | Scenario::XskL2fwd => {
            let nf = if s == Scenario::XskRxDrop { "rxdrop" } else { "l2fwd" };
            argv(&["nf", "run", "--dev", "d0", "--warmup", warmup, "--window", window, "--duration", timeout, nf])
        }
        Scenario::XskTxOnly => {
            let run_for = secs(total + Duration::from_millis(200));
            let size = size.to_string();
            argv(&[
                "gen",
                "txonly",
                "--dev",
                "d0",
                "--size",
                &size,
                "--dst-mac",
                "02:00:00:00:00:01",
                "--warmup",
                warmup,
                "--window",
                window,
                "--run-for",
                &run_for,
            ])
        }
    }
}

/// What the device under test achieved, from its report.
fn dut_pps(s: Scenario, dut_report: &serde_json::Value) -> f64 {
    match s {
        Scenario::XdpDrop | Scenario::XdpTx => num(dut_report, "/pps"),
        Scenario::XskRxDrop => num(dut_report, "/window_rx") / num(dut_report, "/window_seconds").max(1e-9),
        Scenario::XskL2fwd | Scenario::XskTxOnly => {
            num(dut_report, "/window_tx") / num(dut_report, "/window_seconds").max(1e-9)
        }
    }
}

/// Runs the whole matrix on a fresh testbed and tears it down.
pub fn run_io(o: &BenchIoOptions) -> Result<BenchIoReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(BENCH_TESTBED, "bench-io (built in)")?;
    let tb = ferry_testbed::up(&spec)?;
    let mut results = Vec::new();
    for &s in &o.scenarios {
        for &size in &o.sizes {
            let (mut dut, mut gen, mut ret) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..o.runs {
                let (d, g, r) = measure_once(&tb, s, size, o).with_context(|| format!("{} at {size} B", s.name()))?;
                dut.push(d / 1e6);
                gen.push(g / 1e6);
                if let Some(r) = r {
                    ret.push(r / 1e6);
                }
            }
            let runs_mpps = dut.clone();
            let m = median(&mut dut);
            results.push(IoResult {
                scenario: s.name(),
                frame_len: size,
                runs_mpps,
                median_mpps: m,
                generator_mpps: median(&mut gen),
                returned_mpps: if ret.is_empty() { None } else { Some(median(&mut ret)) },
                // On the wire a frame also carries FCS, preamble and gap: 24 B.
                median_gbps: m * 1e6 * ((size + 24) * 8) as f64 / 1e9,
            });
        }
    }
    tb.down()?;
    Ok(BenchIoReport { machine: machine_summary(), results })
}

/// A one-line description of the machine, for the report.
pub fn machine_summary() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} vCPU {model}, Linux {}", kernel.trim())
}

/// The readable table.
pub fn table(r: &BenchIoReport) -> String {
    let mut s = format!("ferry bench io — {}\n", r.machine);
    s += &format!(
        "{:<14} {:>6} {:>12} {:>10} {:>12} {:>12}  {}\n",
        "scenario", "bytes", "median Mpps", "Gbit/s", "gen Mpps", "back Mpps", "runs (Mpps)"
    );
    for x in &r.results {
        let back = x.returned_mpps.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
        let runs: Vec<String> = x.runs_mpps.iter().map(|v| format!("{v:.3}")).collect();
        s += &format!(
            "{:<14} {:>6} {:>12.3} {:>10.2} {:>12.3} {:>12}  {}\n",
            x.scenario,
            x.frame_len,
            x.median_mpps,
            x.median_gbps,
            x.generator_mpps,
            back,
            runs.join(" ")
        );
    }
    s
}

/// Parses one scenario name.
pub fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
        let names: Vec<&str> = Scenario::ALL.iter().map(|x| x.name()).collect();
        format!("unknown scenario {s:?}: one of {}", names.join(", "))
    })
}
