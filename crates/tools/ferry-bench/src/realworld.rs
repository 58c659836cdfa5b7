//! `ferry bench realworld`: FLASH §6.3's real-world chain, in memory mode
//! (the chain's own `source` and `sink` NFs, 512-byte frames as in FLASH,
//! 64 flows), each part side by side in one run:
//!
//! * `fig14`: FLASH Fig. 13's linear chain, firewall (1000 rules, the
//!   linear scan: the bottleneck) -> Maglev -> l2fwd, at offered loads
//!   from a quarter of its saturation to twice it, with blocking
//!   backpressure and with none: throughput, latency, CPU per NF.
//! * `table2`: each NF alone (source -> NF -> sink, flat out), one
//!   thread: its capacity; and the chain's service rate.
//! * `fig16-17`: fan-in (1 to 4 sources into one NF, whose ring then has
//!   that many producers) and fan-out (one NF spreading flows over 1 to 4
//!   out-links, each to its own sink).
//!
//! Ferry has one ring type, multi-producer: "SPSC" here is that ring with
//! one producer. Table 2's MICA row runs the C cache (built by `make -C
//! examples/c-nf`) behind a source that makes MICA request batches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::chain::{measure_yaml, BenchChainOptions, Row};
use ferry_cli::chainctl::counter;

pub struct BenchRealworldOptions {
    pub scenarios: Vec<String>,
    pub warmup: Duration,
    pub window: Duration,
    /// The firewall's rules (FLASH's 1000).
    pub rules: PathBuf,
    /// Frame length, bytes.
    pub size: u64,
    /// Where the C NFs were built (`make -C examples/c-nf`): the MICA
    /// cache for Table 2.
    pub cnf: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct BenchRealworldReport {
    pub machine: String,
    pub frame_len: u64,
    pub rows: Vec<Row>,
    /// At the highest overload: blocking backpressure against none.
    pub overload: Option<Overload>,
    /// What could not be measured, and why.
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Overload {
    pub offered_pps: u64,
    /// Blocking over none.
    pub throughput_ratio: f64,
    /// 1 - blocking's total NF CPU / none's (FLASH: 32% lower).
    pub cpu_reduction: f64,
    /// 1 - blocking's p99 / none's (FLASH: 94% lower).
    pub p99_reduction: f64,
}

/// Offered loads as shares of the chain's saturation.
const SHARES: [f64; 5] = [0.25, 0.5, 0.9, 1.5, 2.0];

/// A chain file's NFs (name, kind or, if it is an absolute path, the
/// program to run, args) and links.
struct Graph {
    nfs: Vec<(String, String, Vec<String>)>,
    links: Vec<(String, String)>,
}

impl Graph {
    fn nf(mut self, name: &str, kind: &str, args: &[String]) -> Graph {
        self.nfs.push((name.into(), kind.into(), args.to_vec()));
        self
    }

    fn link(mut self, from: &str, to: &str) -> Graph {
        self.links.push((from.into(), to.into()));
        self
    }

    /// The chain file: one domain, every NF with `backpressure`.
    fn yaml(&self, name: &str, backpressure: &str) -> String {
        let mut y = format!("name: {name}\ndomains:\n  - {{ name: main, frames: 16384 }}\nnfs:\n");
        for (n, kind, args) in &self.nfs {
            let args = args.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
            let what = if kind.starts_with('/') { format!("exec: [{kind:?}]") } else { format!("kind: {kind}") };
            y += &format!(
                "  - {{ name: {n}, domain: main, {what}, args: [{args}], backpressure: {{ mode: {backpressure} }} }}\n"
            );
        }
        y += "links:\n";
        for (a, b) in &self.links {
            y += &format!("  - {{ from: {a}, to: {b} }}\n");
        }
        y
    }
}

fn graph() -> Graph {
    Graph { nfs: Vec::new(), links: Vec::new() }
}

fn source_args(o: &BenchRealworldOptions, rate: Option<u64>) -> Vec<String> {
    let mut a = vec![format!("size={}", o.size), "flows=64".to_string()];
    a.extend(rate.map(|r| format!("rate={r}")));
    a
}

fn firewall_args(o: &BenchRealworldOptions, lookup: &str) -> Vec<String> {
    vec![o.rules.display().to_string(), lookup.to_string()]
}

/// FLASH Fig. 13's chain between the source and the sink.
fn fig13(o: &BenchRealworldOptions, rate: Option<u64>) -> Graph {
    graph()
        .nf("src", "source", &source_args(o, rate))
        .nf("fw", "firewall", &firewall_args(o, "linear"))
        .nf("lb", "maglev", &[])
        .nf("fwd", "fwd", &[])
        .nf("snk", "sink", &[])
        .link("src", "fw")
        .link("fw", "lb")
        .link("lb", "fwd")
        .link("fwd", "snk")
}

struct Run<'a> {
    dir: &'a Path,
    chain: BenchChainOptions,
}

impl Run<'_> {
    fn measure(&self, name: &str, g: &Graph, bp: &str, sinks: &[&str]) -> Result<Row> {
        let (mut row, st) = measure_yaml(self.dir, name, &g.yaml(name, bp), false, sinks, &self.chain)?;
        let nf_cpu: f64 = row.cpu_percent.iter().filter(|(k, _)| *k != "ferryd").map(|(_, v)| v).sum();
        row.notes.insert("nf_cpu_total".into(), nf_cpu);
        let dropped: u64 = g.nfs.iter().map(|(n, _, _)| counter(&st, n, "drop_full")).sum();
        row.notes.insert("drop_full".into(), dropped as f64);
        row.nfs = g.nfs.len();
        Ok(row)
    }
}

fn fig14(run: &Run, o: &BenchRealworldOptions, rows: &mut Vec<Row>) -> Result<Option<Overload>> {
    let mut flat = run.measure("rw-fig13-flat", &fig13(o, None), "block", &["snk"])?;
    (flat.scenario, flat.variant) = ("fig14".into(), "saturation".into());
    let saturation = (flat.mpps * 1e6) as u64;
    rows.push(flat);
    let mut at_peak: BTreeMap<&str, Row> = BTreeMap::new();
    for share in SHARES {
        let rate = ((saturation as f64 * share) as u64).max(1000);
        for bp in ["block", "none"] {
            let mut row = run.measure(&format!("rw-fig14-{bp}-{rate}"), &fig13(o, Some(rate)), bp, &["snk"])?;
            (row.scenario, row.variant, row.offered_pps) = ("fig14".into(), format!("backpressure-{bp}"), Some(rate));
            if share == SHARES[SHARES.len() - 1] {
                at_peak.insert(bp, row.clone());
            }
            rows.push(row);
        }
    }
    Ok(match (at_peak.get("block"), at_peak.get("none")) {
        (Some(b), Some(n)) => {
            let cpu = |r: &Row| r.notes.get("nf_cpu_total").copied().unwrap_or(0.0);
            Some(Overload {
                offered_pps: b.offered_pps.unwrap_or(0),
                throughput_ratio: b.mpps / n.mpps.max(1e-9),
                cpu_reduction: 1.0 - cpu(b) / cpu(n).max(1e-9),
                p99_reduction: 1.0 - b.p99_us.unwrap_or(0.0) / n.p99_us.unwrap_or(0.0).max(1e-9),
            })
        }
        _ => None,
    })
}

/// FLASH's MICA workload for Table 2: 95% GETs of 100 000 keys, Zipf 0.99,
/// 64-byte values, 4 requests a datagram.
const MICA_WORKLOAD: &str = "keys=100000,get=0.95,dist=zipf:0.99,value=64,batch=4";

fn table2(run: &Run, o: &BenchRealworldOptions, rows: &mut Vec<Row>, missing: &mut Vec<String>) -> Result<()> {
    let alone: [(&str, &str, Vec<String>); 4] = [
        ("firewall-linear", "firewall", firewall_args(o, "linear")),
        ("firewall-classifier", "firewall", firewall_args(o, "bitvector")),
        ("maglev", "maglev", vec![]),
        ("l2fwd", "fwd", vec![]),
    ];
    for (variant, kind, args) in alone {
        let g = graph()
            .nf("src", "source", &source_args(o, None))
            .nf("nf", kind, &args)
            .nf("snk", "sink", &[])
            .link("src", "nf")
            .link("nf", "snk");
        let mut row = run.measure(&format!("rw-t2-{variant}"), &g, "block", &["snk"])?;
        (row.scenario, row.variant) = ("table2".into(), variant.into());
        rows.push(row);
    }
    let mica = o.cnf.join("mica");
    if mica.is_file() {
        let mut src = source_args(o, None);
        src.push(format!("mica={MICA_WORKLOAD}"));
        let cache = ["keys=100000", "value_size=64", "log_mb=64"].map(String::from);
        let g = graph()
            .nf("src", "source", &src)
            .nf("nf", &mica.display().to_string(), &cache)
            .nf("snk", "sink", &[])
            .link("src", "nf")
            .link("nf", "snk");
        let mut row = run.measure("rw-t2-mica", &g, "block", &["snk"])?;
        (row.scenario, row.variant) = ("table2".into(), "mica (C)".into());
        rows.push(row);
    } else {
        missing.push(format!("table2 mica: {} not built (make -C examples/c-nf)", mica.display()));
    }
    let mut chain = run.measure("rw-t2-chain", &fig13(o, None), "block", &["snk"])?;
    (chain.scenario, chain.variant) = ("table2".into(), "chain (fig. 13)".into());
    rows.push(chain);
    Ok(())
}

fn fan(run: &Run, o: &BenchRealworldOptions, rows: &mut Vec<Row>) -> Result<()> {
    for k in 1..=4usize {
        let mut g = graph().nf("nf", "fwd", &[]).nf("snk", "sink", &[]).link("nf", "snk");
        for i in 1..=k {
            g = g.nf(&format!("src{i}"), "source", &source_args(o, None)).link(&format!("src{i}"), "nf");
        }
        let mut row = run.measure(&format!("rw-fanin-{k}"), &g, "block", &["snk"])?;
        (row.scenario, row.variant) = ("fig16-17".into(), format!("fan-in-{k}"));
        row.notes.insert("producers".into(), k as f64);
        rows.push(row);
    }
    for k in 1..=4usize {
        let mut g = graph().nf("src", "source", &source_args(o, None)).nf("nf", "split", &[]).link("src", "nf");
        let sinks: Vec<String> = (1..=k).map(|i| format!("snk{i}")).collect();
        for s in &sinks {
            g = g.nf(s, "sink", &[]).link("nf", s);
        }
        let names: Vec<&str> = sinks.iter().map(String::as_str).collect();
        let mut row = run.measure(&format!("rw-fanout-{k}"), &g, "block", &names)?;
        (row.scenario, row.variant) = ("fig16-17".into(), format!("fan-out-{k}"));
        rows.push(row);
    }
    Ok(())
}

pub fn run(o: &BenchRealworldOptions) -> Result<BenchRealworldReport> {
    for s in &o.scenarios {
        if !["fig14", "table2", "fig16-17"].contains(&s.as_str()) {
            anyhow::bail!("unknown scenario {s:?} (fig14, table2, fig16-17)");
        }
    }
    // Removed when done, or when a measurement fails.
    let dir = ferry_cli::util::Scratch::new("bench-realworld")?;
    let chain = BenchChainOptions { warmup: o.warmup, window: o.window, ..Default::default() };
    let run = Run { dir: dir.path(), chain };
    let want = |s: &str| o.scenarios.iter().any(|x| x == s);
    let (mut rows, mut missing) = (Vec::new(), Vec::new());
    let mut overload = None;
    if want("fig14") {
        overload = fig14(&run, o, &mut rows)?;
    }
    if want("table2") {
        table2(&run, o, &mut rows, &mut missing)?;
    }
    if want("fig16-17") {
        fan(&run, o, &mut rows)?;
    }
    Ok(BenchRealworldReport { machine: crate::io::machine_summary(), frame_len: o.size, rows, overload, missing })
}

pub fn table(r: &BenchRealworldReport) -> String {
    let mut out = format!("machine: {}; {}-byte frames, memory mode\n", r.machine, r.frame_len);
    out += &format!(
        "{:<9} {:<22} {:>10} {:>8} {:>9} {:>9} {:>7} {:>10}  CPU % per NF\n",
        "scenario", "variant", "offered", "Mpps", "p50 us", "p99 us", "NF CPU", "drop_full"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    for row in &r.rows {
        let cpu: Vec<String> =
            row.cpu_percent.iter().filter(|(k, _)| *k != "ferryd").map(|(k, v)| format!("{k}={v:.0}")).collect();
        out += &format!(
            "{:<9} {:<22} {:>10} {:>8.3} {:>9} {:>9} {:>7.0} {:>10}  {}\n",
            row.scenario,
            row.variant,
            row.offered_pps.map_or("flat out".to_string(), |p| format!("{} kpps", p / 1000)),
            row.mpps,
            f(row.p50_us),
            f(row.p99_us),
            row.notes.get("nf_cpu_total").copied().unwrap_or(0.0),
            row.notes.get("drop_full").copied().unwrap_or(0.0),
            cpu.join(" ")
        );
    }
    for m in &r.missing {
        out += &format!("not measured: {m}\n");
    }
    if let Some(x) = &r.overload {
        out += &format!(
            "overload ({} kpps offered): blocking backpressure / none = {:.2}x throughput, {:.0}% less NF CPU, {:.0}% \
             lower p99 (FLASH: 32% and 94%)\n",
            x.offered_pps / 1000,
            x.throughput_ratio,
            x.cpu_reduction * 100.0,
            x.p99_reduction * 100.0
        );
    }
    out
}
