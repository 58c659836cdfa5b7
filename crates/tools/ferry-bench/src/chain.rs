//! `ferry bench chain`: FLASH's chaining experiments, each side by side in
//! one run, 64-byte frames.
//!
//! * `fig10`: throughput and latency of chains of N l2fwd-style NFs —
//!   Ferry zero-copy (one domain), Ferry copy links (each NF its own
//!   domain, ferryd bridges copy between them), all NFs as threads of one
//!   process (the upper bound), and a kernel chain (each NF a namespace,
//!   veth pairs, XDP redirect).
//! * `fig11`: batched redirect on (32) versus off (1).
//! * `table1`: a 4-NF chain whose third NF is slow, with and without
//!   backpressure: per-NF CPU and end-to-end rate.
//! * `idle`: CPU of a 4-NF chain (and its sink) with no traffic.
//! * `load`: latency against offered load, memory and veth mode
//!   ([`crate::load`]).
//!
//! Mode: Ferry and in-process runs use the in-memory source and sink NFs
//! (frames made and consumed inside the chain's domain), so they measure
//! chaining alone; the kernel chain cannot run without devices and goes
//! through veth with the BPF live-frames generator, so it is a different
//! mode, marked `veth` in the table. Sources run flat out, so latency there
//! is mostly queueing in full rings.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_chain::proto::Status;
use serde::Serialize;

use crate::inproc::{run_inproc_chain, InprocOptions};
use crate::kchain::{run_kernel_chain, KernelChainMode, KernelChainOptions};
use ferry_cli::chainctl::{self, counter};

#[derive(Debug, Clone)]
pub struct BenchChainOptions {
    pub scenarios: Vec<String>,
    pub nfs: Vec<usize>,
    pub warmup: Duration,
    pub window: Duration,
    pub kernel: bool,
    /// Chain lengths for `load`.
    pub load_nfs: Vec<usize>,
    /// Every NF's `poll: { ... }` (the text between the braces); None:
    /// the defaults, as ferryd settles them.
    pub poll: Option<String>,
}

impl Default for BenchChainOptions {
    fn default() -> Self {
        BenchChainOptions {
            scenarios: ["fig10", "fig11", "table1", "idle", "load", "roundtrip"].map(String::from).to_vec(),
            nfs: vec![1, 2, 4, 8],
            warmup: Duration::from_millis(700),
            window: Duration::from_secs(2),
            kernel: true,
            load_nfs: vec![1, 4, 8],
            poll: None,
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Row {
    pub scenario: String,
    pub variant: String,
    pub nfs: usize,
    /// `memory` (in-chain source/sink) or `veth`.
    pub mode: String,
    pub mpps: f64,
    /// The paced load offered, frames per second (`load`; None: flat out).
    pub offered_pps: Option<u64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    /// CPU use per NF (percent of one CPU), chain order.
    pub cpu_percent: BTreeMap<String, f64>,
    /// Other facts (ratios, counters).
    pub notes: BTreeMap<String, f64>,
}

impl Row {
    /// CPU time of the processes measured (ferryd left out) per frame
    /// carried, ns; None where no CPU was measured (the kernel chain runs
    /// in softirq) or nothing was carried.
    pub fn cpu_ns_per_frame(&self) -> Option<f64> {
        let percent: f64 = self.cpu_percent.iter().filter(|(k, _)| k.as_str() != "ferryd").map(|(_, v)| v).sum();
        (!self.cpu_percent.is_empty() && self.mpps > 0.0).then(|| percent / 100.0 / (self.mpps * 1e6) * 1e9)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchChainReport {
    pub machine: String,
    pub rows: Vec<Row>,
}

fn cpu_ticks(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some((_, rest)) = s.rsplit_once(')') else { return 0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the name.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn ticks_per_sec() -> f64 {
    // SAFETY: plain sysconf.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// CPU time of some processes from a starting point.
pub(crate) struct CpuSample {
    start: std::time::Instant,
    ticks: Vec<(String, u32, u64)>,
}

impl CpuSample {
    /// Starts counting for `pids` (name, pid).
    pub(crate) fn start(pids: Vec<(String, u32)>) -> CpuSample {
        let ticks = pids.into_iter().map(|(name, pid)| (name, pid, cpu_ticks(pid))).collect();
        CpuSample { start: std::time::Instant::now(), ticks }
    }

    /// Each process's CPU since the start, percent of one CPU.
    pub(crate) fn percent(&self) -> BTreeMap<String, f64> {
        let (hz, secs) = (ticks_per_sec(), self.start.elapsed().as_secs_f64());
        self.ticks
            .iter()
            .map(|(name, pid, t)| (name.clone(), (cpu_ticks(*pid) - t) as f64 / hz / secs * 100.0))
            .collect()
    }
}

/// An NF line of a generated chain file.
struct NfLine {
    name: String,
    domain: String,
    kind: String,
    args: Vec<String>,
    extra: String,
}

fn chain_yaml(name: &str, domains: &[String], nfs: &[NfLine], user: Option<&str>, fused: bool) -> String {
    let mut y = format!("name: {name}\ndomains:\n");
    let user = user.map_or(String::new(), |u| format!(", user: {u}"));
    let fuse = if fused { ", fuse: auto" } else { "" };
    for d in domains {
        y += &format!("  - {{ name: {d}, frames: 8192{user}{fuse} }}\n");
    }
    y += "nfs:\n";
    for n in nfs {
        let args = n.args.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
        y +=
            &format!("  - {{ name: {}, domain: {}, kind: {}, args: [{args}]{} }}\n", n.name, n.domain, n.kind, n.extra);
    }
    y += "links:\n";
    for w in nfs.windows(2) {
        y += &format!("  - {{ from: {}, to: {} }}\n", w[0].name, w[1].name);
    }
    y
}

/// Options of the chains a scenario builds.
#[derive(Clone, Copy)]
pub(crate) struct ChainShape<'a> {
    pub fwds: usize,
    pub copy: bool,
    pub batch: u32,
    /// (index among the fwds, work ns) of a slow NF.
    pub slow: Option<(usize, u64)>,
    pub backpressure: &'a str,
    pub source: bool,
    /// The source's pace, frames per second; None: flat out.
    pub source_rate: Option<u64>,
    /// Every NF a thread of one `ferry-host host` process (run as
    /// [`HOST_USER`]) instead of a process of its own.
    pub hosted: bool,
    /// Every NF's `poll: { ... }` (the text between the braces); None:
    /// the defaults, as ferryd settles them.
    pub poll: Option<&'a str>,
    /// `fuse: auto` on the domains: the forwarders between source and
    /// sink run in one NF's threads.
    pub fused: bool,
}

/// The user the one-process SDK bound runs as: NFs never run as root.
pub(crate) const HOST_USER: &str = "nobody";

/// One domain, source -> one `fwd` -> sink, batches of 32, blocking
/// backpressure, flat out.
pub(crate) const ZERO_COPY: ChainShape<'static> = ChainShape {
    fwds: 1,
    copy: false,
    batch: 32,
    slow: None,
    backpressure: "block",
    source: true,
    source_rate: None,
    hosted: false,
    poll: None,
    fused: false,
};

fn build_chain(name: &str, s: ChainShape) -> String {
    let spawn = if s.hosted { ", spawn: false" } else { "" };
    let poll = s.poll.map_or(String::new(), |p| format!(", poll: {{ {p} }}"));
    let extra = format!(", batch: {}, backpressure: {{ mode: {} }}{spawn}{poll}", s.batch, s.backpressure);
    let mut nfs = Vec::new();
    let dom = |i: usize| if s.copy { format!("d{i}") } else { "main".to_string() };
    if s.source {
        nfs.push(NfLine {
            name: "src".into(),
            domain: dom(0),
            kind: "source".into(),
            args: s.source_rate.map(|r| format!("rate={r}")).into_iter().collect(),
            extra: extra.clone(),
        });
    }
    for i in 0..s.fwds {
        let (kind, args) = match s.slow {
            Some((k, ns)) if k == i => ("slow".to_string(), vec![format!("work_ns={ns}")]),
            _ => ("fwd".to_string(), vec![]),
        };
        nfs.push(NfLine { name: format!("nf{}", i + 1), domain: dom(i + 1), kind, args, extra: extra.clone() });
    }
    // Without a source too: a forwarder's output must go somewhere (the
    // idle chain's sink receives nothing, and idles like the rest).
    nfs.push(NfLine { name: "snk".into(), domain: dom(s.fwds + 1), kind: "sink".into(), args: vec![], extra });
    let mut domains: Vec<String> = nfs.iter().map(|n| n.domain.clone()).collect();
    domains.dedup();
    chain_yaml(name, &domains, &nfs, s.hosted.then_some(HOST_USER), s.fused)
}

/// Starts `ferry-host host` for every NF of chain file `chain` (all
/// `spawn: false`), as [`HOST_USER`].
fn start_host(chain: &Path, socket: &Path) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let spec = ferry_catalog::parse_chain(chain)?;
    let nfs: Vec<String> = spec
        .nfs
        .iter()
        .map(|n| format!("{}={}:{}", n.name, n.kind.as_deref().unwrap_or_default(), n.args.join(",")))
        .collect();
    let (uid, gid) = ferry_sys::lookup_user(HOST_USER)
        .ok_or_else(|| anyhow::anyhow!("no user {HOST_USER:?} to run the one-process bound as"))?;
    std::process::Command::new(ferry_cli::chainctl::host_bin()?)
        .args(["host", "--socket"])
        .arg(socket)
        .args(&nfs)
        .env(ferry_chain::proto::ENV_CHAIN, spec.name())
        .uid(uid)
        .gid(gid)
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting ferry-host host")
}

/// Runs chain `shape` (named `name`) under ferryd and measures it over
/// the window.
pub(crate) fn measure_chain(dir: &Path, name: &str, shape: ChainShape, o: &BenchChainOptions) -> Result<(Row, Status)> {
    let sinks: &[&str] = if shape.source { &["snk"] } else { &[] };
    measure_yaml(dir, name, &build_chain(name, shape), shape.hosted, sinks, o)
}

/// Runs chain file text `yaml` (named `name`) under ferryd and measures it
/// over the window: the rate is what the `sink` NFs `sinks` took, the
/// latency the first one's. `hosted`: every NF is `spawn: false`, run as
/// threads of one `ferry-host host` process.
pub(crate) fn measure_yaml(
    dir: &Path,
    name: &str,
    yaml: &str,
    hosted: bool,
    sinks: &[&str],
    o: &BenchChainOptions,
) -> Result<(Row, Status)> {
    let chain = dir.join(format!("{name}.yaml"));
    std::fs::write(&chain, yaml)?;
    let socket = dir.join(format!("{name}.sock"));
    let (rc, mut host) = if hosted {
        let mut rc = chainctl::launch(&chain, &socket, true, chainctl::Placing::ByRules)
            .with_context(|| format!("chain {name}"))?;
        let host = start_host(&chain, &socket)?;
        rc.wait_connected(Duration::from_secs(60))?;
        (rc, Some(host))
    } else {
        (chainctl::start(&chain, &socket, true).with_context(|| format!("chain {name}"))?, None)
    };
    std::thread::sleep(o.warmup);
    // The sink publishes its percentiles once per 500 ms window: wait for
    // the first, so that a short warm-up still yields them.
    let published = std::time::Instant::now();
    // Frames without stamps (MICA requests) have no latency: then the
    // first frame sunk is enough.
    let waiting = |s: &Status, snk: &str| {
        counter(s, snk, "sunk") == 0 || (counter(s, snk, "stamped") > 0 && counter(s, snk, "lat_p50_ns") == 0)
    };
    while sinks.first().is_some_and(|snk| rc.status().is_ok_and(|s| waiting(&s, snk))) {
        if published.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("chain {name}: the sink took no frame, or published no latency, in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s1 = rc.status()?;
    let mut pids: Vec<(String, u32)> = match &host {
        Some(h) => vec![("process".to_string(), h.id())],
        None => s1.nfs.iter().filter_map(|n| n.pid.map(|p| (n.name.clone(), p))).collect(),
    };
    pids.push(("ferryd".into(), rc.child.id()));
    let cpu = CpuSample::start(pids);
    let start = Instant::now();
    std::thread::sleep(o.window);
    let s2 = rc.status()?;
    let secs = start.elapsed().as_secs_f64();
    let mut row = Row { mode: "memory".into(), cpu_percent: cpu.percent(), ..Default::default() };
    let sunk: u64 = sinks.iter().map(|snk| counter(&s2, snk, "sunk").saturating_sub(counter(&s1, snk, "sunk"))).sum();
    row.mpps = sunk as f64 / secs / 1e6;
    let p50 = sinks.first().map_or(0, |snk| counter(&s2, snk, "lat_p50_ns"));
    if let Some(snk) = sinks.first().filter(|_| p50 > 0) {
        row.p50_us = Some(p50 as f64 / 1e3);
        row.p99_us = Some(counter(&s2, snk, "lat_p99_ns") as f64 / 1e3);
        row.p999_us = Some(counter(&s2, snk, "lat_p999_ns") as f64 / 1e3);
    }
    let audit = rc.audit()?;
    row.notes.insert("conserved".into(), audit.iter().all(|a| a.conserved()) as u8 as f64);
    rc.shutdown()?;
    if let Some(h) = host.as_mut() {
        // ferryd gone, its NFs stop (status 0); reap the process.
        h.wait()?;
    }
    Ok((row, s2))
}

/// This process's CPU time (user + system), seconds.
fn own_cpu_s() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The hand-written one-process chain `opts` as a row, with this process's
/// CPU over the run.
pub(crate) fn inproc_row(scenario: &str, variant: &str, opts: &InprocOptions) -> Result<Row> {
    let cpu0 = own_cpu_s();
    let r = run_inproc_chain(opts)?;
    let cpu = (own_cpu_s() - cpu0) / (opts.duration + opts.warmup).as_secs_f64() * 100.0;
    Ok(Row {
        scenario: scenario.into(),
        variant: variant.into(),
        nfs: opts.nfs,
        mode: "memory".into(),
        mpps: r.mpps,
        offered_pps: opts.rate_pps,
        p50_us: Some(r.latency_p50_us),
        p99_us: Some(r.latency_p99_us),
        p999_us: Some(r.latency_p999_us),
        cpu_percent: BTreeMap::from([("process".to_string(), cpu)]),
        notes: BTreeMap::from([("conserved".to_string(), r.conserved as u8 as f64)]),
    })
}

/// The one-process chain of fig10 and fig11: `nfs` NFs, batch `batch`,
/// flat out over warm-up plus window.
fn inproc_opts(nfs: usize, batch: usize, o: &BenchChainOptions) -> InprocOptions {
    InprocOptions { nfs, batch, duration: o.window + o.warmup, warmup: o.warmup, ..Default::default() }
}

pub fn run(o: &BenchChainOptions) -> Result<BenchChainReport> {
    let dir = std::env::temp_dir().join(format!("ferry-bench-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    let want = |s: &str| o.scenarios.iter().any(|x| x == s);
    let zc = ChainShape { poll: o.poll.as_deref(), ..ZERO_COPY };
    if want("fig10") {
        rows.extend(fig10_rows(&dir, o, zc)?);
    }
    if want("fig11") {
        rows.extend(fig11_rows(&dir, o, zc)?);
    }
    if want("table1") {
        rows.extend(table1_rows(&dir, o, zc)?);
    }
    if want("idle") {
        let shape = ChainShape { fwds: 4, source: false, ..zc };
        let (mut row, _) = measure_chain(&dir, "idle", shape, o)?;
        row.scenario = "idle".into();
        row.variant = "ferry-4-nfs-no-traffic".into();
        row.nfs = 4;
        row.mpps = 0.0;
        rows.push(row);
    }
    if want("load") {
        rows.extend(crate::load::rows(&dir, o)?);
    }
    if want("roundtrip") {
        rows.extend(crate::roundtrip::rows(&dir, o)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(BenchChainReport { machine: crate::io::machine_summary(), rows })
}

/// FLASH Fig. 10: chains of `o.nfs` NFs, zero-copy and copy, beside the
/// one-process bounds and the kernel's XDP-redirect chain.
fn fig10_rows(dir: &Path, o: &BenchChainOptions, zc: ChainShape<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in &o.nfs {
        for (variant, copy, fused) in
            [("ferry-fused", false, true), ("ferry-zero-copy", false, false), ("ferry-copy", true, false)]
        {
            let shape = ChainShape { fwds: n, copy, fused, ..zc };
            let (mut row, _) = measure_chain(dir, &format!("f10-{variant}-{n}"), shape, o)?;
            row.scenario = "fig10".into();
            row.variant = variant.into();
            row.nfs = n;
            rows.push(row);
        }
        rows.push(inproc_row("fig10", "one-process-threads", &inproc_opts(n, 32, o))?);
        let shape = ChainShape { fwds: n, hosted: true, ..zc };
        let (mut row, _) = measure_chain(dir, &format!("f10-sdk-{n}"), shape, o)?;
        row.scenario = "fig10".into();
        row.variant = "one-process-sdk".into();
        row.nfs = n;
        rows.push(row);
        if o.kernel {
            let r = run_kernel_chain(&KernelChainOptions {
                nfs: n,
                mode: KernelChainMode::XdpRedirect,
                duration: o.window + o.warmup,
                ..Default::default()
            })?;
            rows.push(Row {
                scenario: "fig10".into(),
                variant: "kernel-xdp-redirect".into(),
                nfs: n,
                mode: "veth".into(),
                mpps: r.rx_mpps,
                p50_us: r.latency_p50_us,
                p99_us: r.latency_p99_us,
                notes: BTreeMap::from([("loss_ratio".to_string(), r.loss_ratio)]),
                ..Default::default()
            });
        }
    }
    Ok(rows)
}

/// FLASH Fig. 11: four NFs, batches of 32 and of 1.
fn fig11_rows(dir: &Path, o: &BenchChainOptions, zc: ChainShape<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let n = 4;
    for batch in [32u32, 1] {
        let (mut row, _) = measure_chain(dir, &format!("f11-{batch}"), ChainShape { fwds: n, batch, ..zc }, o)?;
        row.scenario = "fig11".into();
        row.variant = format!("ferry-batch-{batch}");
        row.nfs = n;
        rows.push(row);
        rows.push(inproc_row("fig11", &format!("one-process-batch-{batch}"), &inproc_opts(n, batch as usize, o))?);
    }
    Ok(rows)
}

/// FLASH Table 1: a slow NF in a chain, under each backpressure mode.
fn table1_rows(dir: &Path, o: &BenchChainOptions, zc: ChainShape<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // Six threads: on a machine with fewer CPUs ferryd settles
    // `idle_polls` to 6. Two more rows with `block` show the choice
    // against its alternatives: polling for the whole 200 µs after a
    // busy burst (the rule before), and blocking at once.
    let variants = [
        ("block", "block", None),
        ("block-poll-always", "block", Some("idle_polls: 4294967295")),
        ("block-poll-never", "block", Some("idle_timeout_us: 0")),
        ("sleep", "sleep", None),
        ("none", "none", None),
    ];
    for (variant, bp, poll) in variants {
        let shape = ChainShape { fwds: 4, slow: Some((2, 2000)), backpressure: bp, poll: poll.or(zc.poll), ..zc };
        let (mut row, st) = measure_chain(dir, &format!("t1-{variant}"), shape, o)?;
        row.scenario = "table1".into();
        row.variant = format!("backpressure-{variant}");
        row.nfs = 4;
        let dropped: u64 = ["src", "nf1", "nf2", "nf3", "nf4"].iter().map(|n| counter(&st, n, "drop_full")).sum();
        row.notes.insert("drop_full".into(), dropped as f64);
        rows.push(row);
    }
    Ok(rows)
}

/// Table 1's question: how much CPU backpressure saves against none, in
/// total and per Mpps delivered (the variants' throughputs differ on a
/// machine whose CPUs the chain's threads outnumber).
fn table1_summary(rows: &[Row]) -> String {
    let t1 = |v: &str| rows.iter().find(|x| x.scenario == "table1" && x.variant == format!("backpressure-{v}"));
    let Some(none) = t1("none") else { return String::new() };
    let total = |r: &Row| r.cpu_percent.values().sum::<f64>();
    let per_mpps = |r: &Row| if r.mpps > 0.0 { total(r) / r.mpps } else { f64::NAN };
    let mut out = String::new();
    for v in ["block", "block-poll-always", "block-poll-never", "sleep"] {
        let Some(r) = t1(v) else { continue };
        out += &format!(
            "table1 {v} vs none: CPU {:.0}% vs {:.0}% ({:.0}% less), {:.3} vs {:.3} Mpps, CPU per Mpps {:.0} vs {:.0} ({:.0}% less)\n",
            total(r),
            total(none),
            100.0 * (1.0 - total(r) / total(none)),
            r.mpps,
            none.mpps,
            per_mpps(r),
            per_mpps(none),
            100.0 * (1.0 - per_mpps(r) / per_mpps(none)),
        );
    }
    out
}

pub fn table(r: &BenchChainReport) -> String {
    let mut out = format!("machine: {}\n", r.machine);
    out += &format!(
        "{:<8} {:<31} {:>3} {:<6} {:>7} {:>9} {:>9} {:>9}  {}\n",
        "scenario", "variant", "nfs", "mode", "Mpps", "p50 us", "p99 us", "CPU ns/fr", "CPU % per NF / notes"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    for row in r.rows.iter().filter(|x| x.scenario != "load") {
        let cpu: Vec<String> = row.cpu_percent.iter().map(|(k, v)| format!("{k}={v:.0}")).collect();
        let notes: Vec<String> = row.notes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out += &format!(
            "{:<8} {:<31} {:>3} {:<6} {:>7.3} {:>9} {:>9} {:>9}  {} {}\n",
            row.scenario,
            row.variant,
            row.nfs,
            row.mode,
            row.mpps,
            f(row.p50_us),
            f(row.p99_us),
            row.cpu_ns_per_frame().map_or("-".into(), |ns| format!("{ns:.0}")),
            cpu.join(" "),
            notes.join(" ")
        );
    }
    // Ratios against the one-process bounds, per chain length: the SDK's
    // own code as threads of one process, and the hand-written threads.
    for row in r.rows.iter().filter(|x| x.scenario == "fig10" && x.variant.starts_with("ferry")) {
        for (bound, what) in
            [("one-process-sdk", "one-process SDK bound"), ("one-process-threads", "hand-written one-process bound")]
        {
            let ub = r.rows.iter().find(|x| x.scenario == "fig10" && x.variant == bound && x.nfs == row.nfs);
            if let Some(ub) = ub.filter(|ub| ub.mpps > 0.0) {
                out +=
                    &format!("ratio fig10 {} nfs={}: {:.2} of the {what}\n", row.variant, row.nfs, row.mpps / ub.mpps);
            }
        }
    }
    out += &table1_summary(&r.rows);
    let load: Vec<Row> = r.rows.iter().filter(|x| x.scenario == "load").cloned().collect();
    if !load.is_empty() {
        out += &crate::load::table(&load);
    }
    out
}
