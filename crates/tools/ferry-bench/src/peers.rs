//! `ferry bench peers`: Ferry against what operators run instead, on one
//! testbed, with one instrument, side by side in one run.
//!
//! The testbed: `gen` (g0) — d0 `dut` d1 — (g1) `gen`. The system under
//! test takes frames in at d0 and sends them out of d1 inside `dut`; one
//! `ferry gen xsk --rx --rx-dev g1` process ([`instrument`]) sends 64 B
//! stamped UDP frames into g0 and reads them back on g1: one instrument,
//! the same frames for every system.
//!
//! Layout (2 CPUs): the system owns CPU 1: its processes, PMD and NF
//! threads; for kernel forwarders, its stack work, handed over by RPS;
//! for systems that forward in d0's XDP hook, d0's NAPI, made a kernel
//! thread pinned there. The instrument owns CPU 0. Otherwise veth receive
//! work runs in softirq on the CPU that sent (g0 -> d0 on CPU 0: an
//! AF_XDP system's copy into its socket). A system's CPU is CPU 1's busy
//! time plus CPU 0's softirq time, both reported.
//!
//! The systems and their scenarios are data ([`system`]); their exact
//! configurations are the committed files of `examples/peers/`
//! ([`configs`]). A system this machine cannot run (IPVS without the
//! kernel's IP_VS, say) is listed with what it needs, not measured.
//!
//! Each figure is the median of `runs` runs, the systems of a scenario
//! interleaved run by run. Offered loads: saturation (the generator flat
//! out), then 10 kpps and 25%, 50% and 80% of the scenario's slowest
//! saturation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use ferry_cli::chainctl::RunningChain;
use ferry_cli::proc::set_napi_thread;

pub mod configs;
mod ferry;
pub mod instrument;
mod kernel;
mod ovs;
pub mod system;

use instrument::{Offer, Sample};
pub use system::{parse_system, Scenario, Setup, System};

/// gen (g0) -> d0 [dut] d1 -> (g1) gen: both ends of the system under
/// test in the generator's namespace, so one process sends and receives.
const TESTBED: &str = r#"
name: peers
namespaces:
  - { name: gen, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: dut, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01" }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:01:02" }
  - a: { ns: dut, dev: d1, mac: "02:00:00:00:02:02" }
    b: { ns: gen, dev: g1, mac: "02:00:00:00:02:01" }
"#;

const INSTRUMENT_CPU: usize = 0;
const SUT_CPU: usize = 1;
/// g1's MAC: a forwarder's frames are addressed to the receiving end.
const SINK_MAC: &str = "02:00:00:00:02:01";
/// d0's MAC: a router's frames are addressed to it.
const D0_MAC: &str = "02:00:00:00:01:02";
/// The lowest offered load, and the shares of the slowest saturation.
const LOW_PPS: u64 = 10_000;
const SHARES: [f64; 3] = [0.25, 0.5, 0.8];
/// A smoke run: this many frames at this rate per system.
const SMOKE: Offer = Offer::Rate { pps: 5_000, count: 1_000 };

#[derive(Debug, Clone)]
pub struct BenchPeersOptions {
    pub runs: usize,
    pub window: Duration,
    pub systems: Vec<System>,
    /// One run per system at a low fixed load, no saturation: does every
    /// system forward the frames (counts, not speed)?
    pub smoke: bool,
    /// Where d0's NAPI runs for systems that forward in its XDP hook;
    /// None: both ways, as two rows.
    pub xdp_napi: Option<XdpNapi>,
}

/// A system in one layout: where d0's NAPI runs, for a system forwarding
/// in d0's XDP hook (None for the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    system: System,
    napi: Option<XdpNapi>,
}

impl Variant {
    /// Each layout `o` asks for: two for an XDP system by default.
    fn of(system: System, o: &BenchPeersOptions) -> Vec<Variant> {
        let napis = match o.xdp_napi {
            _ if !system.forwards_in_xdp() => vec![None],
            Some(n) => vec![Some(n)],
            None => vec![Some(XdpNapi::Softirq), Some(XdpNapi::Thread)],
        };
        napis.into_iter().map(|napi| Variant { system, napi }).collect()
    }

    /// The system's name, with `/napi-thread` for that layout.
    fn label(self) -> String {
        label(self.system, self.napi)
    }
}

fn label(system: System, napi: Option<XdpNapi>) -> String {
    match napi {
        Some(XdpNapi::Thread) => format!("{}/napi-thread", system.name()),
        _ => system.name().to_string(),
    }
}

/// Where d0's NAPI poll, and so an XDP system's work, runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum XdpNapi {
    /// A kernel thread pinned to the system's CPU: the system's work on
    /// its own CPU, at the cost of waking that CPU for each batch.
    Thread,
    /// Softirq on the sending CPU, the veth default (as a NIC runs XDP on
    /// its IRQ's CPU): no hand-over, but the work shares the instrument's
    /// CPU.
    Softirq,
}

/// One system at one offered load: medians over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRow {
    pub scenario: Scenario,
    pub system: System,
    /// Where d0's NAPI ran, for a system forwarding in d0's XDP hook.
    pub xdp_napi: Option<XdpNapi>,
    /// None: saturation (the generator flat out).
    pub offered_pps: Option<u64>,
    pub sent: f64,
    pub received: f64,
    pub mpps: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    /// CPU 1's busy time, percent of one CPU.
    pub cpu_percent: f64,
    /// CPU 0's softirq time: veth receive work the kernel ran on the
    /// sending CPU (the instrument's), the system's XDP or bridge work
    /// among it.
    pub softirq0_percent: f64,
    pub runs: usize,
}

impl PeerRow {
    /// (CPU 1 busy and CPU 0 softirq, percent) per Mpps forwarded.
    pub fn cpu_per_mpps(&self) -> Option<f64> {
        (self.mpps > 0.0).then(|| (self.cpu_percent + self.softirq0_percent) / self.mpps)
    }

    pub fn lost(&self) -> f64 {
        (self.sent - self.received).max(0.0)
    }
}

/// A system in the report: what it is.
#[derive(Debug, Clone, Serialize)]
pub struct SystemNote {
    pub system: System,
    pub scenario: Scenario,
    pub what: &'static str,
}

/// A system that did not run here, and what it needs.
#[derive(Debug, Clone, Serialize)]
pub struct NotRun {
    pub system: System,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct BenchPeersReport {
    pub machine: String,
    pub layout: String,
    pub systems: Vec<SystemNote>,
    pub not_run: Vec<NotRun>,
    pub rows: Vec<PeerRow>,
}

pub fn run(o: &BenchPeersOptions) -> Result<BenchPeersReport> {
    let (mut runnable, mut not_run) = (Vec::new(), Vec::new());
    for &system in &o.systems {
        match probe(system) {
            Ok(()) => runnable.push(system),
            Err(e) => not_run.push(NotRun { system, reason: format!("{e:#}") }),
        }
    }
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(TESTBED, "peers.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let dir = tempdir()?;
    let variants: Vec<Variant> = runnable.iter().flat_map(|&s| Variant::of(s, o)).collect();
    let result = measure_all(&tb, &dir, o, &variants);
    let _ = std::fs::remove_dir_all(&dir);
    tb.down()?;
    let layout = format!(
        "system under test on CPU {SUT_CPU} (its processes, PMD and NF threads; RPS for kernel forwarders; d0's \
         NAPI as a thread there for systems forwarding in d0's XDP, rows marked /napi-thread); one gen xsk sending into g0 and receiving on g1 on \
         CPU {INSTRUMENT_CPU}; other veth receive work in softirq on the sending CPU; CPU1 % = CPU {SUT_CPU} busy, \
         CPU0 si = CPU {INSTRUMENT_CPU} softirq; CPU%/Mpps counts both"
    );
    let systems = o.systems.iter().map(|&s| SystemNote { system: s, scenario: s.scenario(), what: s.what() }).collect();
    Ok(BenchPeersReport { machine: crate::io::machine_summary(), layout, systems, not_run, rows: result? })
}

/// What a system needs that this machine may lack.
fn probe(system: System) -> Result<()> {
    match system.setup() {
        Setup::Ovs { .. } => ovs::probe(),
        Setup::Router { ipvs: Some(_), .. } => kernel::probe_ipvs(),
        Setup::Router { .. } => kernel::probe_nft(),
        Setup::Bridge | Setup::Ferry { .. } => Ok(()),
    }
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("ferry-bench-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Scenario by scenario, in the order of [`Scenario`].
fn measure_all(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchPeersOptions,
    variants: &[Variant],
) -> Result<Vec<PeerRow>> {
    let mut scenarios: Vec<Scenario> = variants.iter().map(|v| v.system.scenario()).collect();
    scenarios.sort();
    scenarios.dedup();
    let mut rows = Vec::new();
    for sc in scenarios {
        let of: Vec<Variant> = variants.iter().copied().filter(|v| v.system.scenario() == sc).collect();
        rows.extend(measure_scenario(tb, dir, o, &of)?);
    }
    Ok(rows)
}

/// Runs by offered load: `None` for saturation.
type Samples = BTreeMap<(usize, Option<u64>), Vec<Sample>>;

/// Saturation first (the systems interleaved run by run), then the fixed
/// loads derived from the slowest saturation; a smoke run only its one
/// fixed load.
fn measure_scenario(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchPeersOptions,
    systems: &[Variant],
) -> Result<Vec<PeerRow>> {
    let mut samples = Samples::new();
    let offers: Vec<(Option<u64>, Offer)> = if o.smoke {
        let Offer::Rate { pps, .. } = SMOKE else { unreachable!("the smoke offer is a rate") };
        vec![(Some(pps), SMOKE)]
    } else {
        interleave(tb, dir, o, systems, &[(None, Offer::FlatOut { window: o.window })], &mut samples)?;
        let slowest = (0..systems.len()).map(|i| median_of(&samples[&(i, None)]).mpps).fold(f64::MAX, f64::min);
        let rate = |pps: u64| Offer::Rate { pps, count: (pps as f64 * o.window.as_secs_f64()) as u64 };
        loads(slowest * 1e6).into_iter().map(|pps| (Some(pps), rate(pps))).collect()
    };
    interleave(tb, dir, o, systems, &offers, &mut samples)?;
    let mut rows = Vec::new();
    for load in std::iter::once(None).chain(offers.iter().map(|&(load, _)| load)) {
        for (i, &v) in systems.iter().enumerate() {
            let Some(runs) = samples.get(&(i, load)) else { continue };
            rows.push(row(v, load, runs));
        }
    }
    Ok(rows)
}

/// `runs` rounds; in each, every system set up once and measured at
/// every offer.
fn interleave(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    o: &BenchPeersOptions,
    systems: &[Variant],
    offers: &[(Option<u64>, Offer)],
    samples: &mut Samples,
) -> Result<()> {
    let rounds = if o.smoke { 1 } else { o.runs };
    for _ in 0..rounds {
        for (i, &v) in systems.iter().enumerate() {
            let (up, system) = (Running::up(tb, dir, v)?, v.system);
            for &(load, offer) in offers {
                let dst_mac = if system.routes() { D0_MAC } else { SINK_MAC };
                let sets = system.scenario().gen_overrides();
                let sample = instrument::run(tb.ns_name("gen"), INSTRUMENT_CPU, SUT_CPU, dst_mac, sets, offer)
                    .with_context(|| format!("measuring {}", v.label()))?;
                if sample.received == 0.0 {
                    bail!("{}: nothing came back of {} frames sent", v.label(), sample.sent);
                }
                samples.entry((i, load)).or_default().push(sample);
            }
            up.down()?;
        }
    }
    Ok(())
}

fn row(v: Variant, offered_pps: Option<u64>, runs: &[Sample]) -> PeerRow {
    let m = median_of(runs);
    PeerRow {
        scenario: v.system.scenario(),
        system: v.system,
        xdp_napi: v.napi,
        offered_pps,
        sent: m.sent,
        received: m.received,
        mpps: m.mpps,
        p50_us: m.p50_us,
        p99_us: m.p99_us,
        p999_us: m.p999_us,
        cpu_percent: m.cpu_percent,
        softirq0_percent: m.softirq0_percent,
        runs: runs.len(),
    }
}

/// 10 kpps, then the shares of `saturation_pps` above it.
fn loads(saturation_pps: f64) -> Vec<u64> {
    let mut v = vec![LOW_PPS];
    v.extend(SHARES.iter().map(|s| (saturation_pps * s) as u64).filter(|&r| r > LOW_PPS));
    v
}

/// Each field's median over `runs` (fields taken apart: a run's p50 and
/// its CPU need not come from the same run).
fn median_of(runs: &[Sample]) -> Sample {
    let med = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let all = |f: fn(&Sample) -> f64| med(runs.iter().map(f).collect());
    let opt = |f: fn(&Sample) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| med(v))
    };
    Sample {
        sent: all(|s| s.sent),
        received: all(|s| s.received),
        mpps: all(|s| s.mpps),
        p50_us: opt(|s| s.p50_us),
        p99_us: opt(|s| s.p99_us),
        p999_us: opt(|s| s.p999_us),
        cpu_percent: all(|s| s.cpu_percent),
        softirq0_percent: all(|s| s.softirq0_percent),
    }
}

/// A system set up in `dut`, torn down by [`Running::down`] (or on drop).
struct Running {
    system: System,
    dut: String,
    chain: Option<RunningChain>,
    ovs: Option<ovs::Ovs>,
    napi: Option<XdpNapi>,
    /// Kernel state set up and not yet undone (bridge, router, RPS).
    kernel_up: bool,
}

impl Running {
    fn up(tb: &ferry_testbed::Testbed, dir: &Path, v: Variant) -> Result<Running> {
        let (dut, system) = (tb.ns_name("dut").to_string(), v.system);
        let mut r = Running { system, dut: dut.clone(), chain: None, ovs: None, napi: v.napi, kernel_up: true };
        match system.setup() {
            Setup::Ovs { flows } => r.ovs = Some(ovs::Ovs::up(&dir.join("ovs"), &dut, SUT_CPU, flows)?),
            Setup::Bridge => kernel::bridge_up(&dut)?,
            Setup::Router { nft, ipvs } => kernel::router_up(&dut, dir, nft, ipvs)?,
            Setup::Ferry { chain, offload, busy, router } => {
                if router {
                    kernel::router_up(&dut, dir, None, None)?;
                }
                r.chain = Some(ferry::up(chain, &dut, dir, offload, SUT_CPU, busy)?);
            }
        }
        if system.uses_stack() {
            // RPS hands d0's frames to the system's CPU after the driver:
            // the kernel's way to give a one-queue receive path a CPU.
            kernel::sh(&dut, &format!("echo {:x} > /sys/class/net/d0/queues/rx-0/rps_cpus", 1u32 << SUT_CPU))?;
        }
        if r.napi_thread() {
            set_napi_thread(&dut, "d0", Some(SUT_CPU))?;
        }
        Ok(r)
    }

    fn down(mut self) -> Result<()> {
        self.teardown()
    }

    fn napi_thread(&self) -> bool {
        self.napi == Some(XdpNapi::Thread)
    }

    /// Tears the system down, every step tried even if one fails (the
    /// first error is returned), and waits until d0 and d1 carry no XDP
    /// program, so the next system starts on bare devices.
    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        // While XDP still gives d0 its NAPI (a crashed chain's is gone).
        if self.napi_thread() && self.chain.is_some() && has_xdp(&self.dut, "d0") {
            note(set_napi_thread(&self.dut, "d0", None));
        }
        if let Some(rc) = self.chain.take() {
            note(rc.shutdown());
        }
        if let Some(o) = self.ovs.take() {
            note(o.down());
        }
        if std::mem::replace(&mut self.kernel_up, false) {
            note(kernel::sh(&self.dut, "echo 0 > /sys/class/net/d0/queues/rx-0/rps_cpus"));
            match self.system.setup() {
                Setup::Bridge => note(kernel::bridge_down(&self.dut)),
                Setup::Router { .. } | Setup::Ferry { router: true, .. } => note(kernel::router_down(&self.dut)),
                _ => {}
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while ["d0", "d1"].iter().any(|d| has_xdp(&self.dut, d)) {
            if Instant::now() > deadline {
                note(Err(anyhow::anyhow!("{}: an XDP program stayed on d0 or d1 after teardown", self.system.name())));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        first
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Whether `dev` in namespace `ns` carries an XDP program.
fn has_xdp(ns: &str, dev: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "link", "show", "dev", dev])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
}

fn load_name(pps: Option<u64>) -> String {
    pps.map_or("saturation".into(), |p| format!("{} kpps", p / 1000))
}

/// The table: per load, each system, then each Ferry system's ratios
/// over each peer (throughput: Ferry / peer; p50 and CPU per Mpps: peer /
/// Ferry; above 1 is Ferry ahead).
pub fn table(r: &BenchPeersReport) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let mut out = format!("{}\n{}\n", r.machine, r.layout);
    out += &format!(
        "{:<13} {:<10} {:<28} {:>7} {:>7} {:>7} {:>8} {:>6} {:>7} {:>9} {:>8}\n",
        "scenario", "load", "system", "Mpps", "p50 us", "p99 us", "p99.9 us", "CPU1 %", "CPU0 si", "CPU%/Mpps", "lost"
    );
    for row in &r.rows {
        out += &format!(
            "{:<13} {:<10} {:<28} {:>7.3} {:>7} {:>7} {:>8} {:>6.0} {:>7.0} {:>9} {:>8.0}\n",
            row.scenario.name(),
            load_name(row.offered_pps),
            label(row.system, row.xdp_napi),
            row.mpps,
            f(row.p50_us),
            f(row.p99_us),
            f(row.p999_us),
            row.cpu_percent,
            row.softirq0_percent,
            f(row.cpu_per_mpps()),
            row.lost()
        );
    }
    for n in &r.not_run {
        out += &format!("not run: {}: {}\n", n.system.name(), n.reason);
    }
    out += &ratios(&r.rows);
    out
}

/// "LOAD ferry-x vs peer-y: throughput A, p50 B, CPU/Mpps C" lines.
fn ratios(rows: &[PeerRow]) -> String {
    let mut out =
        String::from("ratios (above 1: Ferry ahead): throughput Ferry/peer, p50 peer/Ferry, CPU per Mpps peer/Ferry\n");
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    for ferry in rows.iter().filter(|r| r.system.is_ferry()) {
        let same = |r: &&PeerRow| r.scenario == ferry.scenario && r.offered_pps == ferry.offered_pps;
        for peer in rows.iter().filter(|r| !r.system.is_ferry()).filter(same) {
            out += &format!(
                "  {:<13} {:<10} {:<28} vs {:<15} throughput {:>5}  p50 {:>5}  CPU/Mpps {:>5}\n",
                ferry.scenario.name(),
                load_name(ferry.offered_pps),
                label(ferry.system, ferry.xdp_napi),
                peer.system.name(),
                ratio(Some(ferry.mpps), Some(peer.mpps)),
                ratio(peer.p50_us, ferry.p50_us),
                ratio(peer.cpu_per_mpps(), ferry.cpu_per_mpps()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_start_at_10_kpps_and_follow_the_slowest_saturation() {
        assert_eq!(loads(1_000_000.0), [10_000, 250_000, 500_000, 800_000]);
        assert_eq!(loads(20_000.0), [10_000, 16_000]);
    }

    #[test]
    fn medians_are_taken_field_by_field() {
        let s = |mpps, p50| Sample { mpps, p50_us: p50, cpu_percent: mpps * 10.0, ..Sample::default() };
        let m = median_of(&[s(1.0, Some(5.0)), s(3.0, None), s(2.0, Some(4.0))]);
        assert_eq!((m.mpps, m.p50_us, m.cpu_percent), (2.0, Some(5.0), 20.0));
    }

    #[test]
    fn ratios_put_ferry_over_each_peer_of_its_scenario_and_load() {
        let r = |system, mpps, p50| PeerRow {
            scenario: Scenario::PortToPort,
            system,
            xdp_napi: None,
            offered_pps: None,
            sent: 0.0,
            received: 0.0,
            mpps,
            p50_us: Some(p50),
            p99_us: None,
            p999_us: None,
            cpu_percent: 100.0,
            softirq0_percent: 0.0,
            runs: 1,
        };
        let text = ratios(&[r(System::OvsAfxdp, 0.5, 8.0), r(System::FerryXdp, 1.0, 2.0)]);
        let line = text.lines().nth(1).unwrap();
        assert!(line.contains("ferry-xdp") && line.contains("vs ovs-afxdp"), "{line}");
        assert!(line.contains("throughput  2.00  p50  4.00  CPU/Mpps  2.00"), "{line}");
    }
}
