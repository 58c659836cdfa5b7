//! `ferry bench firewall`: the firewall's two lookups at N rules (FLASH's
//! 1000): the linear scan FLASH uses and the bit-vector classifier, on the
//! same random rules and packets, in alternating order, with identical
//! verdicts checked on every packet. Reports the median nanoseconds per
//! lookup of each and their ratio.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{bail, Result};
use ferry_nf::firewall_rules::{first_match_linear, BitVectorClassifier, FwRule, RandomRules, Tuple};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct BenchFirewallReport {
    pub machine: String,
    pub rules: usize,
    pub packets: usize,
    pub runs: usize,
    /// Packets some rule matched (the rest take the default).
    pub matched: usize,
    /// Rules the linear scan looks at per packet, on average.
    pub mean_scanned: f64,
    pub linear_ns: f64,
    pub bitvector_ns: f64,
    /// linear_ns / bitvector_ns.
    pub speedup: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per lookup of `lookup` over `packets`.
fn time(packets: &[Tuple], lookup: impl Fn(&Tuple) -> Option<usize>) -> f64 {
    let start = Instant::now();
    for t in packets {
        black_box(lookup(black_box(t)));
    }
    start.elapsed().as_nanos() as f64 / packets.len() as f64
}

pub fn run(rules: usize, packets: usize, runs: usize) -> Result<BenchFirewallReport> {
    if rules == 0 || packets == 0 || runs == 0 {
        bail!("--rules, --packets and --runs must be at least 1");
    }
    let mut g = RandomRules::new(0x5eed_f1e1);
    // Specific rules, as real ACLs have (no /0 or /8 source or
    // destination): a packet then usually scans far before its match, or
    // all the way to the default, as in FLASH's firewall.
    let specific = |r: &FwRule| r.src.1 - r.src.0 < 1 << 16 && r.dst.1 - r.dst.0 < 1 << 16;
    let list: Vec<FwRule> = std::iter::repeat_with(|| g.rule()).filter(specific).take(rules).collect();
    let tuples: Vec<Tuple> = (0..packets).map(|_| g.tuple()).collect();
    let fast = BitVectorClassifier::new(&list);
    let (mut matched, mut scanned) = (0, 0);
    for t in &tuples {
        let want = first_match_linear(&list, t);
        if fast.first_match(t) != want {
            bail!("the lookups disagree on {t:?}: linear {want:?}, bit-vector {:?}", fast.first_match(t));
        }
        matched += want.is_some() as usize;
        scanned += want.map_or(list.len(), |i| i + 1);
    }
    let (mut linear, mut bitvector) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // Alternate which goes first, so neither always gets the warm cache.
        let mut pair = [false, true];
        if run % 2 == 1 {
            pair.reverse();
        }
        for fast_one in pair {
            if fast_one {
                bitvector.push(time(&tuples, |t| fast.first_match(t)));
            } else {
                linear.push(time(&tuples, |t| first_match_linear(&list, t)));
            }
        }
    }
    let (linear_ns, bitvector_ns) = (median(linear), median(bitvector));
    Ok(BenchFirewallReport {
        machine: crate::io::machine_summary(),
        rules,
        packets,
        runs,
        matched,
        mean_scanned: scanned as f64 / packets as f64,
        linear_ns,
        bitvector_ns,
        speedup: linear_ns / bitvector_ns,
    })
}

pub fn table(r: &BenchFirewallReport) -> String {
    format!(
        "machine: {}\nfirewall lookups: {} rules, {} packets ({} matched a rule; the scan looks at {:.0} rules per \
         packet), median of {} runs\n\
         {:<12} {:>10}\n{:<12} {:>10.1}\n{:<12} {:>10.1}\nbit-vector is {:.1}x the linear scan\n",
        r.machine,
        r.rules,
        r.packets,
        r.matched,
        r.mean_scanned,
        r.runs,
        "lookup",
        "ns/packet",
        "linear",
        r.linear_ns,
        "bit-vector",
        r.bitvector_ns,
        r.speedup
    )
}
