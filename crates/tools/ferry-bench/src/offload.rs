//! `ferry bench offload` (P4SFC Fig. 5 on XDP): the same chain file run
//! with every NF `offload: never` (all processes: "software") and placed by
//! the orchestrator (`auto`: "placed"), side by side, in alternating order.
//!
//! * `firewall`: in -> firewall -> out. Placed, it runs in XDP alone (the
//!   pipeline redirects d0 to d1); in software it is one AF_XDP process.
//! * `firewall6`: the same, the generator's frames IPv6 (`--profile
//!   ipv6`, one rule of the file allows them). The live generator sends
//!   IPv6 frames unstamped (their UDP checksum would need rewriting per
//!   frame), so this scenario has throughput and CPU, no latency.
//! * `chain`: in -> firewall -> monitor -> IPS -> out. Placed, the firewall
//!   and the monitor run in XDP on d0 (pre-server) and hand frames to the
//!   IPS process; in software all three are processes.
//! * `p4sfc`: P4SFC's chain, in -> IPS -> monitor -> firewall -> NAT ->
//!   out (the NAT an `enat`). Placed, the IPS is one process; the monitor,
//!   the firewall and the NAT's stateless part run after it
//!   (post-server), in XDP on the loop device ferryd puts in front of d1,
//!   and the NAT's process makes the mappings (each new inside endpoint's
//!   first frame); in software all four are processes, the NAT whole. The
//!   generator's frames come from 64 source ports, as in `nat`.
//! * `scan`: in -> payload scan -> out (the SmartNIC paper's payload-scan
//!   offload, Fig. 6): placed, the scan element runs in XDP on d0 and the
//!   pipeline redirects to d1; in software it is one AF_XDP process. Its
//!   pattern never occurs, so every frame's whole window is searched.
//! * `nat`: the NAT, whole in a process (`parallel-nat`, one worker;
//!   "software") against split as P4SFC splits it (`enat`: established
//!   mappings rewritten in XDP, then routed by the FIB from XDP; each new
//!   flow's first frame made into a mapping by the NF's process and routed
//!   by dut's stack; "placed"). The generator's frames come from 64 source
//!   ports, so 64 mappings carry everything.
//!
//! Each measurement: a flat-out window of the live-frames generator into
//! d0 (throughput at the AF_XDP sink on s0, machine CPU over the window),
//! then a paced run at a fixed rate (latency p50/p99 from the frames'
//! stamps). Generator on CPU 0; sink and the chain's NF processes on CPU
//! 1 (XDP runs where the frames arrive, in the generator's softirq);
//! ports in driver mode. Medians over the runs, and
//! placed/software ratios.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use ferry_cli::chainctl;
use ferry_cli::demo::{DEMO_TESTBED, IN_MAC};
use ferry_cli::proc::{self, num, wait_for_xdp};
use ferry_testbed::apps::CpuMeter;

const GEN_CPU: usize = 0;
const SINK_CPU: usize = 1;
/// Where the chain's NF processes run (XDP runs where frames arrive).
const NF_CPU: usize = 1;

#[derive(Debug, Clone)]
pub struct BenchOffloadOptions {
    pub scenarios: Vec<String>,
    pub sizes: Vec<usize>,
    pub runs: usize,
    /// Flat-out window per throughput measurement.
    pub window: Duration,
    /// Offered load of the latency measurement, frames per second.
    pub latency_pps: u64,
    /// Frames of the latency measurement.
    pub latency_frames: u64,
    /// Also run each chain placed by this cost model (`bench cost --out`),
    /// with `fuse: auto`: the "by-cost" variant.
    pub cost_model: Option<std::path::PathBuf>,
}

impl Default for BenchOffloadOptions {
    fn default() -> Self {
        BenchOffloadOptions {
            scenarios: vec!["firewall".into(), "chain".into(), "p4sfc".into()],
            sizes: vec![64, 512, 1500],
            runs: 3,
            window: Duration::from_secs(2),
            latency_pps: 20_000,
            latency_frames: 20_000,
            cost_model: None,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub scenario: String,
    pub variant: String,
    pub size: usize,
    pub run: usize,
    pub mpps: f64,
    pub gbps: f64,
    /// Busy time of all CPUs during the flat-out window (generator and
    /// sink included), 100 = one CPU.
    pub cpu_percent: f64,
    /// The softirq part of it: where XDP (and the kernel's veth and
    /// AF_XDP copy work) runs, charged to no process.
    pub softirq_percent: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    /// Frames of the latency run that did not arrive.
    pub latency_lost: u64,
}

/// Medians of one (scenario, size), both variants, with ratios.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub size: usize,
    pub software: Medians,
    pub placed: Medians,
    /// Placed with `fuse: auto` too: what placement keeps in processes,
    /// adjacent NFs that fuse run in one process's threads (and after the
    /// last process they fuse rather than cross a loop device).
    pub fused: Medians,
    /// placed / software throughput.
    pub throughput_ratio: f64,
    /// fused / software throughput.
    pub fused_ratio: f64,
    /// Placed by the cost model, with `fuse: auto` (with `--cost-model`).
    pub by_cost: Option<Medians>,
    /// by-cost / software throughput.
    pub by_cost_ratio: Option<f64>,
    /// 1 - by-cost p50 / software p50.
    pub by_cost_p50_reduction: Option<f64>,
    /// 1 - placed p50 / software p50 (positive: placed is faster).
    pub p50_reduction: Option<f64>,
    pub p99_reduction: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Medians {
    pub mpps: f64,
    pub gbps: f64,
    pub cpu_percent: f64,
    pub softirq_percent: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchOffloadReport {
    pub machine: String,
    pub rows: Vec<Row>,
    pub samples: Vec<Sample>,
}

const FW_RULES: &str = "deny proto tcp dport 22
deny src 192.168.0.0/16
deny dst 172.16.0.0/12 proto udp dport 53
allow src 10.0.0.0/8 proto udp
allow src 2001:db8::/32 proto udp
default deny
";
/// Contents the generator's frames lack: the IPS scans every payload and
/// passes it.
const IPS_RULES: &str = "drop udp any any -> any any (msg:\"shell\"; content:\"/bin/sh\"; sid:1;)
alert udp any any -> any any (msg:\"probe\"; content:\"|de ad be ef|\"; sid:2;)
";

/// dut's routing for the `nat` scenario: d1 holds the public address, the
/// generator's destinations (10.1.0.0/16) are behind the sink, whose MAC
/// is known, and dut forwards.
const NAT_PUBLIC: &str = "10.0.2.1";
const NAT_ROUTING: [&[&str]; 4] = [
    &["addr", "add", "10.0.2.1/24", "dev", "d1"],
    &["neigh", "replace", "10.0.2.2", "lladdr", "02:00:00:00:02:01", "dev", "d1", "nud", "permanent"],
    &["route", "replace", "10.1.0.0/16", "via", "10.0.2.2", "dev", "d1"],
    &["link", "set", "dev", "d1", "up"],
];
/// The generator's source ports in the `nat` scenario: 64 flows.
const NAT_SOURCE_PORTS: &str = "src-port=40000-40063";

fn nat_chain(dut: &str, dir: &Path, offload: &str, cpus: &str) -> String {
    let head = "name: offload\ndomains: [ { name: main, frames: 8192 } ]\n";
    let port =
        |name: &str, dev: &str| format!("  - {{ name: {name}, netns: \"{dut}\", netdev: {dev}, xdp_mode: driver }}\n");
    let ports = format!("ports:\n{}{}", port("in", "d0"), port("out", "d1"));
    if offload == "never" {
        let nat = format!(
            "  - {{ name: nat, domain: main, kind: parallel-nat, args: [\"public_ip={NAT_PUBLIC}\", \
             \"ports=20000-29999\"], offload: never{cpus} }}\n"
        );
        let links = "  - { from: in, to: nat }\n  - { from: out, to: nat }\n  - { from: nat, to: in }\n  - { from: nat, to: out }\n";
        return format!("{head}{ports}nfs:\n{nat}links:\n{links}");
    }
    let config = dir.join("nat.yaml");
    let kernel = format!("kernel:\n  - {{ name: stack, netns: \"{dut}\", dev: fy-nat0, mac: \"{IN_MAC}\" }}\n");
    let nat = format!(
        "  - {{ name: nat, domain: main, kind: enat, args: [\"config={}\", \"reply_ports=out\"]{cpus} }}\n",
        config.display()
    );
    format!("{head}{ports}{kernel}nfs:\n{nat}links:\n  - {{ from: in, to: nat }}\n  - {{ from: nat, to: stack }}\n")
}

pub(crate) fn chain_yaml(scenario: &str, dut: &str, dir: &Path, offload: &str, cpu: Option<usize>) -> String {
    let fw = dir.join("fw.rules");
    let ips = dir.join("ips.rules");
    let cpus = cpu.map_or(String::new(), |c| format!(", cpus: [{c}]"));
    if scenario == "nat" {
        return nat_chain(dut, dir, offload, &cpus);
    }
    let nf = |name: &str, kind: &str, args: &str| {
        format!("  - {{ name: {name}, domain: main, kind: {kind}, args: [{args}], offload: {offload}{cpus} }}\n")
    };
    let (fw, ips) = (format!("\"{}\"", fw.display()), format!("\"{}\"", ips.display()));
    let (nfs, links) = match scenario {
        "firewall" | "firewall6" => {
            (nf("fw", "firewall", &fw), "  - { from: in, to: fw }\n  - { from: fw, to: out }\n".into())
        }
        "scan" => (
            nf("scan", "payload-scan", "\"drop\", \"/bin/sh\""),
            "  - { from: in, to: scan }\n  - { from: scan, to: out }\n".into(),
        ),
        "p4sfc" => (
            nf("ips", "ips", &ips)
                + &nf("mon", "flow-monitor", "")
                + &nf("fw", "firewall", &fw)
                + &nf("nat", "enat", &format!("\"config={}\"", dir.join("nat.yaml").display())),
            "  - { from: in, to: ips }\n  - { from: ips, to: mon }\n  - { from: mon, to: fw }\n  - { from: fw, to: nat }\n  \
             - { from: nat, to: out }\n"
                .to_string(),
        ),
        _ => (
            nf("fw", "firewall", &fw) + &nf("mon", "flow-monitor", "") + &nf("ips", "ips", &ips),
            "  - { from: in, to: fw }\n  - { from: fw, to: mon }\n  - { from: mon, to: ips }\n  - { from: ips, to: out }\n"
                .to_string(),
        ),
    };
    format!(
        "name: offload\ndomains: [ {{ name: main, frames: 8192 }} ]\nports:\n  - {{ name: in, netns: \"{dut}\", netdev: d0, \
         xdp_mode: driver }}\n  - {{ name: out, netns: \"{dut}\", netdev: d1, xdp_mode: driver }}\nnfs:\n{nfs}links:\n{links}"
    )
}

/// `yaml` (a chain file [`chain_yaml`] wrote) with `fuse: auto` on its
/// domain; the file must say what it says.
fn with_fuse(yaml: &str) -> String {
    const DOMAIN: &str = "{ name: main, frames: 8192 }";
    assert!(yaml.contains(DOMAIN), "chain_yaml's domain line changed: {yaml}");
    yaml.replace(DOMAIN, "{ name: main, frames: 8192, fuse: auto }")
}

/// The median of the runs (every variant has at least one).
fn median(mut v: Vec<f64>) -> f64 {
    crate::io::median(&mut v)
}

fn median_opt(v: Vec<Option<f64>>) -> Option<f64> {
    let mut v: Vec<f64> = v.into_iter().flatten().collect();
    (!v.is_empty()).then(|| crate::io::median(&mut v))
}

/// The medians of the samples of (`scenario`, `size`, `variant`).
pub(crate) fn medians(samples: &[Sample], scenario: &str, size: usize, variant: &str) -> Medians {
    let v: Vec<&Sample> =
        samples.iter().filter(|s| s.scenario == scenario && s.size == size && s.variant == variant).collect();
    Medians {
        mpps: median(v.iter().map(|s| s.mpps).collect()),
        gbps: median(v.iter().map(|s| s.gbps).collect()),
        cpu_percent: median(v.iter().map(|s| s.cpu_percent).collect()),
        softirq_percent: median(v.iter().map(|s| s.softirq_percent).collect()),
        p50_us: median_opt(v.iter().map(|s| s.p50_us).collect()),
        p99_us: median_opt(v.iter().map(|s| s.p99_us).collect()),
    }
}

/// One variant on the running testbed: ferryd up on its chain file, a
/// throughput window and a latency run ([`drive`]), ferryd down.
fn measure(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchOffloadOptions,
    key: (&str, &str, usize, usize),
) -> Result<Sample> {
    let (scenario, variant, size, run) = key;
    let offload = if variant == "software" { "never" } else { "auto" };
    let chain = dir.join(format!("{scenario}-{variant}.yaml"));
    let mut yaml = chain_yaml(scenario, tb.ns_name("dut"), dir, offload, nf_cpu());
    if variant == "fused" || variant == "by-cost" {
        yaml = with_fuse(&yaml);
    }
    std::fs::write(&chain, yaml)?;
    let placing = match (variant, &o.cost_model) {
        ("by-cost", Some(model)) => chainctl::Placing::ByCost(model),
        _ => chainctl::Placing::ByRules,
    };
    let rc = chainctl::start_placing(&chain, &dir.join("ferryd.sock"), true, placing).context("starting ferryd")?;
    let gen_extra: &[&str] = match scenario {
        "nat" | "p4sfc" => &["--set", NAT_SOURCE_PORTS],
        "firewall6" => &["--profile", "ipv6"],
        _ => &[],
    };
    let d = drive(tb, o, size, gen_extra)?;
    rc.shutdown()?;
    Ok(d.sample(scenario, variant, size, run))
}

/// Where a chain's NF processes may run: with the sink, never with the
/// generator. The live-frames generator runs inside the kernel
/// (BPF_PROG_RUN), which on a kernel without preemption keeps a woken NF
/// waiting for the next scheduler tick (4 ms at HZ=250); that measured the
/// generator, not the chain.
pub(crate) fn nf_cpu() -> Option<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus > NF_CPU).then_some(NF_CPU)
}

/// What [`drive`] measured of whatever forwards d0 to d1.
pub(crate) struct Driven {
    mpps: f64,
    cpu: ferry_testbed::apps::CpuReport,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    latency_lost: u64,
}

impl Driven {
    pub(crate) fn sample(&self, scenario: &str, variant: &str, size: usize, run: usize) -> Sample {
        Sample {
            scenario: scenario.into(),
            variant: variant.into(),
            size,
            run,
            mpps: self.mpps,
            gbps: self.mpps * 1e6 * size as f64 * 8.0 / 1e9,
            cpu_percent: self.cpu.total_busy_percent,
            softirq_percent: self.cpu.softirq_percent,
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            latency_lost: self.latency_lost,
        }
    }
}

/// Drives whatever forwards d0 to d1 on the running testbed: a flat-out
/// window of the live-frames generator into d0 (throughput at the AF_XDP
/// sink on s0, machine CPU over the window), then a paced run (latency
/// from the frames' stamps). `gen_extra`: more generator arguments.
pub(crate) fn drive(
    tb: &ferry_testbed::Testbed,
    o: &BenchOffloadOptions,
    size: usize,
    gen_extra: &[&str],
) -> Result<Driven> {
    let (gen_ns, sink_ns) = (tb.ns_name("gen"), tb.ns_name("sink"));
    let size_arg = size.to_string();
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let extra = gen_extra.iter().map(|a| a.to_string());

    // Throughput: flat out for the window; the sink's own rate is the
    // chain's.
    let sink_cap = ms(o.window + Duration::from_secs(30));
    let sink_args = ["sink", "--dev", "s0", "--idle-exit", "1s", "--duration", &sink_cap];
    let sink = proc::spawn(sink_ns, &sink_args.map(String::from), Some(SINK_CPU))?;
    wait_for_xdp(sink_ns, "s0", Duration::from_secs(60))?;
    let window = ms(o.window);
    let mut gen_args: Vec<String> =
        ["gen", "live", "--dev", "g0", "--dst-mac", IN_MAC, "--size", &size_arg, "--duration", &window]
            .map(String::from)
            .to_vec();
    gen_args.extend(extra.clone());
    let meter = CpuMeter::start(&[]).context("CPU meter")?;
    let gen = proc::spawn(gen_ns, &gen_args, Some(GEN_CPU))?;
    gen.wait(o.window + Duration::from_secs(30)).context("generator")?;
    let cpu = meter.stop().context("CPU meter")?;
    let sink_report: Value = sink.finish(Duration::from_secs(10)).context("sink")?;
    let mpps = num(&sink_report, "/pps") / 1e6;

    // Latency: paced, every frame counted.
    let count = o.latency_frames.to_string();
    let sink_args = ["sink", "--dev", "s0", "--idle-exit", "1s", "--count", &count, "--duration", &sink_cap];
    let sink = proc::spawn(sink_ns, &sink_args.map(String::from), Some(SINK_CPU))?;
    wait_for_xdp(sink_ns, "s0", Duration::from_secs(60))?;
    let rate = o.latency_pps.to_string();
    let mut gen_args: Vec<String> =
        ["gen", "live", "--dev", "g0", "--dst-mac", IN_MAC, "--size", &size_arg, "--rate", &rate, "--count", &count]
            .map(String::from)
            .to_vec();
    gen_args.extend(extra);
    let gen_report =
        proc::spawn(gen_ns, &gen_args, Some(GEN_CPU))?.wait(Duration::from_secs(120)).context("paced generator")?;
    let lat = sink.finish(Duration::from_secs(10)).context("latency sink")?;
    let us = |p: &str| lat.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    let sent = num(&gen_report, "/sent") as u64;
    let received = num(&lat, "/packets") as u64;
    Ok(Driven {
        mpps,
        cpu,
        p50_us: us("/latency/p50_ns"),
        p99_us: us("/latency/p99_ns"),
        latency_lost: sent.saturating_sub(received),
    })
}

pub fn run(o: &BenchOffloadOptions) -> Result<BenchOffloadReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let dir = std::env::temp_dir().join(format!("ferry-bench-offload-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("fw.rules"), FW_RULES)?;
    std::fs::write(dir.join("ips.rules"), IPS_RULES)?;
    std::fs::write(dir.join("nat.yaml"), format!("nat:\n  public_ip: {NAT_PUBLIC}\n  ports: 20000-29999\n"))?;
    if o.scenarios.iter().any(|s| s == "nat") {
        for args in NAT_ROUTING {
            ferry_cli::sfc::run_in(&tb, "dut", "ip", args)?;
        }
        ferry_cli::sfc::run_in(&tb, "dut", "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    }
    let mut samples = Vec::new();
    let result = (|| -> Result<()> {
        for scenario in &o.scenarios {
            for &size in &o.sizes {
                for run in 0..o.runs {
                    // Alternating order: neither variant always goes first.
                    let mut variants = vec!["software", "placed", "fused"];
                    if o.cost_model.is_some() {
                        variants.push("by-cost");
                    }
                    let n = variants.len();
                    variants.rotate_left(run % n);
                    for variant in variants {
                        let s = measure(&tb, &dir, o, (scenario, variant, size, run))
                            .with_context(|| format!("{scenario} {variant} {size} B run {run}"))?;
                        eprintln!(
                            "[offload] {scenario:<8} {variant:<8} {size:>4} B run {run}: {:.3} Mpps, p50 {:?} us",
                            s.mpps, s.p50_us
                        );
                        samples.push(s);
                    }
                }
            }
        }
        Ok(())
    })();
    let down = tb.down();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    down?;
    let mut rows = Vec::new();
    for scenario in &o.scenarios {
        for &size in &o.sizes {
            let of = |variant: &str| medians(&samples, scenario, size, variant);
            let (software, placed, fused) = (of("software"), of("placed"), of("fused"));
            let reduction = |p: Option<f64>, s: Option<f64>| match (p, s) {
                (Some(p), Some(s)) if s > 0.0 => Some(1.0 - p / s),
                _ => None,
            };
            let by_cost = o.cost_model.as_ref().map(|_| of("by-cost"));
            let ratio = |m: &Medians| if software.mpps > 0.0 { m.mpps / software.mpps } else { 0.0 };
            rows.push(Row {
                scenario: scenario.clone(),
                size,
                throughput_ratio: if software.mpps > 0.0 { placed.mpps / software.mpps } else { 0.0 },
                fused_ratio: if software.mpps > 0.0 { fused.mpps / software.mpps } else { 0.0 },
                p50_reduction: reduction(placed.p50_us, software.p50_us),
                p99_reduction: reduction(placed.p99_us, software.p99_us),
                by_cost_ratio: by_cost.as_ref().map(ratio),
                by_cost_p50_reduction: by_cost.as_ref().and_then(|b| reduction(b.p50_us, software.p50_us)),
                by_cost,
                software,
                placed,
                fused,
            });
        }
    }
    Ok(BenchOffloadReport { machine: crate::io::machine_summary(), rows, samples })
}

/// The readable table.
pub fn table(r: &BenchOffloadReport) -> String {
    let mut s = format!(
        "ferry bench offload — {} (medians; placed = `offload: auto`, software = `never`, fused = `auto` with \
             `fuse: auto`)\n",
        r.machine
    );
    s += "scenario  size  software Mpps  placed Mpps  ratio  fused Mpps  ratio  software p50/p99 us  placed p50/p99 us  fused \
          p50/p99 us  p50 -%  CPU% (softirq) sw / placed\n";
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0}"));
    for row in &r.rows {
        s += &format!(
            "{:<9} {:>4}  {:>13.3}  {:>11.3}  {:>5.2}  {:>10.3}  {:>5.2}  {:>9}/{:<9}  {:>8}/{:<8}  {:>7}/{:<8}  {:>6}  \
             {:>4.0} ({:>3.0}) / {:>4.0} ({:>3.0})\n",
            row.scenario,
            row.size,
            row.software.mpps,
            row.placed.mpps,
            row.throughput_ratio,
            row.fused.mpps,
            row.fused_ratio,
            f(row.software.p50_us),
            f(row.software.p99_us),
            f(row.placed.p50_us),
            f(row.placed.p99_us),
            f(row.fused.p50_us),
            f(row.fused.p99_us),
            row.p50_reduction.map_or("-".to_string(), |x| format!("{:.0}", x * 100.0)),
            row.software.cpu_percent,
            row.software.softirq_percent,
            row.placed.cpu_percent,
            row.placed.softirq_percent,
        );
    }
    let by_cost: Vec<&Row> = r.rows.iter().filter(|row| row.by_cost.is_some()).collect();
    if !by_cost.is_empty() {
        s += "placed by the cost model (with `fuse: auto`):\nscenario  size  by-cost Mpps  ratio  p50/p99 us  p50 -%\n";
    }
    for row in by_cost {
        let b = row.by_cost.as_ref().expect("filtered");
        s += &format!(
            "{:<9} {:>4}  {:>12.3}  {:>5.2}  {:>4}/{:<5}  {:>6}\n",
            row.scenario,
            row.size,
            b.mpps,
            row.by_cost_ratio.unwrap_or(0.0),
            f(b.p50_us),
            f(b.p99_us),
            row.by_cost_p50_reduction.map_or("-".to_string(), |x| format!("{:.0}", x * 100.0)),
        );
    }
    s
}
