//! `ferry bench ips`: the IPS at 1 000 and 10 000 rules against the same
//! NF with none, on one mixed payload corpus: HTTP requests, DNS queries
//! and binary payloads over TCP connections it saw open, some carrying a
//! rule's pattern. The rules are generated like a ruleset's (variables,
//! lists, several contents with relative modifiers, pcre, flow, dsize),
//! from one seed. Reports each rule count's load time, median
//! nanoseconds per packet and packets per second, as a ratio to no rules.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ferry_nf::ips_rules::load_rules;
use ferry_nf::{Ips, PacketNf, Verdict};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::Serialize;

mod corpus;
mod rules;

pub use rules::write_rules;

#[derive(Debug, Clone, Serialize)]
pub struct BenchIpsReport {
    pub machine: String,
    pub packets: usize,
    /// TCP connections the corpus opens before its payloads.
    pub connections: usize,
    pub runs: usize,
    pub rows: Vec<IpsRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct IpsRow {
    pub rules: usize,
    /// The rule file, when not generated.
    pub file: Option<String>,
    /// Parsing the rule text and building the prefilter.
    pub load_ms: f64,
    pub ns_per_packet: f64,
    pub mpps: f64,
    /// ns_per_packet / the same with no rules.
    pub cost_vs_no_rules: f64,
    /// Of the corpus, per pass: packets an alert rule matched, packets a
    /// drop rule dropped.
    pub alerted: u64,
    pub dropped: u64,
}

/// Runs the bench for each count in `rule_counts` (0 is added: the NF
/// with no rules is the baseline), and for the rules of `file` (loaded
/// skipping what the IPS does not run), if given.
pub fn run(rule_counts: &[usize], file: Option<&Path>, packets: usize, runs: usize) -> Result<BenchIpsReport> {
    if packets == 0 || runs == 0 {
        bail!("--packets and --runs must be at least 1");
    }
    let mut counts = vec![0];
    counts.extend(rule_counts.iter().copied().filter(|&n| n > 0));
    let mut rng = Pcg64Mcg::seed_from_u64(0x1d5_5eed);
    let biggest = counts.iter().copied().max().unwrap_or(0);
    let generated = rules::generate(&mut rng, biggest, false);
    let corpus = corpus::Corpus::new(&mut rng, &generated.patterns, packets);
    let mut rows = Vec::new();
    for &n in &counts {
        let text = generated.text(n);
        rows.push(row(&text, false, &corpus, runs).with_context(|| format!("the {n} generated rules"))?);
    }
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let mut r = row(&text, true, &corpus, runs).with_context(|| file.display().to_string())?;
        r.file = Some(file.display().to_string());
        rows.push(r);
    }
    let base = rows[0].ns_per_packet;
    for r in &mut rows {
        r.cost_vs_no_rules = r.ns_per_packet / base;
    }
    Ok(BenchIpsReport {
        machine: crate::io::machine_summary(),
        packets: corpus.payloads.len(),
        connections: corpus.opening.len() / 3,
        runs,
        rows,
    })
}

/// The row of rule file `text`.
fn row(text: &str, skip_unsupported: bool, corpus: &corpus::Corpus, runs: usize) -> Result<IpsRow> {
    let start = Instant::now();
    let set = load_rules(text, skip_unsupported)?;
    let n = set.rules.len();
    let nf = Ips::new(set.rules);
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(measure(nf, corpus, runs, n, load_ms))
}

/// One rule count's row: the connections opened, one pass counted, then
/// `runs` timed passes (the median).
fn measure(mut nf: Ips, corpus: &corpus::Corpus, runs: usize, rules: usize, load_ms: f64) -> IpsRow {
    let mut frames = corpus.opening.clone();
    for f in &mut frames {
        nf.process(f);
    }
    let mut payloads = corpus.payloads.clone();
    let (mut alerted, mut dropped) = (0, 0);
    for f in &mut payloads {
        let before = nf.counters()[2];
        match nf.process(f) {
            Verdict::Drop => dropped += 1,
            _ => alerted += nf.counters()[2] - before,
        }
    }
    nf.drain_alerts(&mut |_| {});
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        for f in &mut payloads {
            black_box(nf.process(black_box(f)));
        }
        times.push(start.elapsed().as_nanos() as f64 / payloads.len() as f64);
        // What an NF host does after each burst; not timed.
        nf.drain_alerts(&mut |_| {});
    }
    times.sort_by(f64::total_cmp);
    let ns = times[times.len() / 2];
    IpsRow { rules, file: None, load_ms, ns_per_packet: ns, mpps: 1e3 / ns, cost_vs_no_rules: 1.0, alerted, dropped }
}

pub fn table(r: &BenchIpsReport) -> String {
    let mut out = format!(
        "machine: {}\nips: {} payload packets over {} TCP connections and UDP, one thread, median of {} runs\n\
         {:>6} {:>9} {:>10} {:>7} {:>12} {:>8} {:>8}\n",
        r.machine,
        r.packets,
        r.connections,
        r.runs,
        "rules",
        "load ms",
        "ns/packet",
        "Mpps",
        "vs no rules",
        "alerted",
        "dropped"
    );
    for row in &r.rows {
        out += &format!(
            "{:>6} {:>9.1} {:>10.1} {:>7.2} {:>11.2}x {:>8} {:>8}{}\n",
            row.rules,
            row.load_ms,
            row.ns_per_packet,
            row.mpps,
            row.cost_vs_no_rules,
            row.alerted,
            row.dropped,
            row.file.as_ref().map(|f| format!("  (from {f})")).unwrap_or_default()
        );
    }
    out
}

/// A random lowercase word of 4 to 10 letters.
fn word(rng: &mut Pcg64Mcg) -> String {
    let n = rng.gen_range(4..=10);
    (0..n).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
}

fn pick<'a, T>(rng: &mut Pcg64Mcg, items: &'a [T]) -> &'a T {
    items.choose(rng).expect("a non-empty list")
}
