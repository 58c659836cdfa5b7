//! `ferry top`: a live view of a ferryd's chains, like VPP's `show
//! runtime` or bpftop: per NF thread the packet rate, packets per receive
//! call, its NF's CPU share, ring fill, drops and wake-ups; below, each
//! port's XDP program by verdict, then each NF placed in XDP by counter.
//! Rates are differences of two status samples over the time between
//! them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry_chain::proto::{NfStatus, Status};

use crate::chainctl;

/// Every chain's status at one moment.
pub struct Sample {
    pub at: Instant,
    pub chains: Vec<Status>,
}

/// Asks ferryd at `admin` for every chain's status.
pub fn sample(admin: &Path) -> Result<Sample> {
    let mut chains = Vec::new();
    for c in chainctl::list(admin)? {
        chains.push(chainctl::status(admin, &c.name)?);
    }
    Ok(Sample { at: Instant::now(), chains })
}

fn counter(t: &[(String, u64)], name: &str) -> u64 {
    t.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
}

/// Frames a thread took in (from its ports, its ring, or made).
fn taken_in(t: &[(String, u64)]) -> u64 {
    counter(t, "rx_port") + counter(t, "rx_ring") + counter(t, "alloc")
}

/// Frames the framework dropped (full rings, a downstream NF down, a bad
/// hop, malformed); not those the NF itself chose to drop (`drop_nf`: a
/// firewall's verdict, a sink's job).
fn drops(t: &[(String, u64)]) -> u64 {
    t.iter().filter(|(k, _)| k.starts_with("drop_") && k != "drop_nf").map(|(_, v)| v).sum()
}

/// The same NF in the earlier sample, if it has not restarted since
/// (a restart zeroes its counters).
fn before<'a>(prev: &'a Sample, chain: &Status, nf: &NfStatus) -> Option<&'a NfStatus> {
    let c = prev.chains.iter().find(|c| c.id == chain.id)?;
    c.nfs.iter().find(|n| n.name == nf.name && n.restarts == nf.restarts)
}

/// The view between two samples.
pub fn render(prev: &Sample, now: &Sample) -> String {
    let dt = now.at.duration_since(prev.at).as_secs_f64().max(1e-6);
    let rate = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / dt;
    let mut out = format!("ferry top: {} chains, rates over {:.1} s\n\n", now.chains.len(), dt);
    out += &format!(
        "{:<12} {:<12} {:>3} {:>11} {:>9} {:>6} {:>10} {:>10} {:>10}\n",
        "CHAIN", "NF", "THR", "PKTS/S", "PKTS/CALL", "CPU%", "RING", "DROPS/S", "WAKEUPS/S"
    );
    for c in &now.chains {
        for n in &c.nfs {
            let old = before(prev, c, n);
            let cpu = match (old.and_then(|o| o.cpu_seconds), n.cpu_seconds) {
                (Some(a), Some(b)) => format!("{:.0}", (b - a).max(0.0) / dt * 100.0),
                _ => "-".into(),
            };
            for (t, th) in n.threads.iter().enumerate() {
                let o = old.and_then(|o| o.threads.get(t));
                let (rx0, dr0, wk0) = o.map_or((0, 0, 0), |o| (taken_in(o), drops(o), counter(o, "wakeups_sent")));
                let ring = n.rings.get(t).copied().unwrap_or_default();
                let loops0 = old.and_then(|o| o.rings.get(t)).map_or(0, |r| r.loops);
                let calls = ring.loops.saturating_sub(loops0);
                let per_call = if calls > 0 {
                    format!("{:.1}", taken_in(th).saturating_sub(rx0) as f64 / calls as f64)
                } else {
                    "-".into()
                };
                out += &format!(
                    "{:<12} {:<12} {:>3} {:>11.0} {:>9} {:>6} {:>10} {:>10.0} {:>10.0}\n",
                    c.chain,
                    n.name,
                    t,
                    rate(rx0, taken_in(th)),
                    per_call,
                    if t == 0 { cpu.clone() } else { String::new() },
                    format!("{}/{}", ring.depth, ring.capacity),
                    rate(dr0, drops(th)),
                    rate(wk0, counter(th, "wakeups_sent")),
                );
            }
        }
    }
    let ports: Vec<_> = now.chains.iter().flat_map(|c| c.ports.iter().map(move |p| (c, p))).collect();
    if !ports.is_empty() {
        out += &format!("\n{:<12} {:<12} {:<10} {:>11}\n", "CHAIN", "XDP PORT", "VERDICT", "PKTS/S");
        for (c, p) in ports {
            let old = prev.chains.iter().find(|o| o.id == c.id).and_then(|o| o.ports.iter().find(|q| q.name == p.name));
            for (verdict, packets, _) in &p.verdicts {
                let p0 = old.and_then(|o| o.verdicts.iter().find(|v| &v.0 == verdict)).map_or(0, |v| v.1);
                out += &format!("{:<12} {:<12} {:<10} {:>11.0}\n", c.chain, p.name, verdict, rate(p0, *packets));
            }
        }
    }
    let offloaded: Vec<_> = now.chains.iter().flat_map(|c| c.offloaded.iter().map(move |n| (c, n))).collect();
    if !offloaded.is_empty() {
        out += &format!("\n{:<12} {:<12} {:<12} {:<10} {:>11}\n", "CHAIN", "NF IN XDP", "PORT", "COUNTER", "PKTS/S");
        for (c, n) in offloaded {
            let old = prev.chains.iter().find(|o| o.id == c.id).and_then(|o| o.offloaded.iter().find(|q| q.id == n.id));
            for (name, packets) in &n.counters {
                let p0 = old.and_then(|o| o.counters.iter().find(|(k, _)| k == name)).map_or(0, |(_, v)| *v);
                out += &format!(
                    "{:<12} {:<12} {:<12} {:<10} {:>11.0}\n",
                    c.chain,
                    n.name,
                    n.port,
                    name,
                    rate(p0, *packets)
                );
            }
        }
    }
    out
}

/// Redraws the view every `interval` until `frames` views were drawn (or
/// for ever); `clear` clears the terminal first.
pub fn run(admin: &Path, interval: Duration, frames: Option<u64>, clear: bool) -> Result<()> {
    let mut prev = sample(admin)?;
    let mut drawn = 0;
    while frames.map_or(true, |f| drawn < f) && !crate::util::stop_requested() {
        std::thread::sleep(interval);
        // ferryd stopping ends the view; it is not top's error.
        let Ok(now) = sample(admin) else {
            println!("ferryd at {} stopped answering; top exits", admin.display());
            return Ok(());
        };
        print!("{}{}", if clear { "\x1b[H\x1b[2J" } else { "" }, render(&prev, &now));
        prev = now;
        drawn += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_chain::proto::{OffloadedStatus, PortStatus, RingStatus};

    fn status(rx: u64, drops: u64, loops: u64, cpu: f64, redirected: u64) -> Status {
        let thread = vec![("rx_ring".to_string(), rx), ("drop_full".to_string(), drops)];
        Status {
            chain: "c".into(),
            id: 1,
            nfs: vec![NfStatus {
                name: "mid".into(),
                threads: vec![thread],
                rings: vec![RingStatus { depth: 3, capacity: 512, loops }],
                cpu_seconds: Some(cpu),
                ..Default::default()
            }],
            ports: vec![PortStatus {
                name: "in".into(),
                verdicts: vec![("redirect".into(), redirected, 0)],
                classified: None,
            }],
            offloaded: vec![OffloadedStatus {
                name: "fw".into(),
                id: 2,
                kind: "firewall".into(),
                port: "in".into(),
                counters: vec![("rx".into(), redirected), ("pass".into(), redirected / 2)],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let t0 = Instant::now();
        let prev = Sample { at: t0, chains: vec![status(1000, 5, 100, 1.0, 50)] };
        let now = Sample { at: t0 + Duration::from_secs(2), chains: vec![status(3000, 9, 200, 2.0, 250)] };
        let text = render(&prev, &now);
        let row = text.lines().find(|l| l.starts_with("c ") && l.contains("mid")).expect(&text);
        let cols: Vec<&str> = row.split_whitespace().collect();
        // chain nf thread pkts/s pkts/call cpu% ring drops/s wakeups/s
        assert_eq!(cols, ["c", "mid", "0", "1000", "20.0", "50", "3/512", "2", "0"], "{text}");
        let xdp = text.lines().find(|l| l.contains("redirect")).expect(&text);
        assert!(xdp.trim_end().ends_with(" 100"), "{xdp}");
        // An NF placed in XDP: its counters' rates.
        let fw: Vec<&str> = text.lines().filter(|l| l.starts_with("c ") && l.contains(" fw ")).collect();
        assert_eq!(fw.len(), 2, "{text}");
        assert!(fw[0].contains(" rx ") && fw[0].trim_end().ends_with(" 100"), "{text}");
        assert!(fw[1].contains(" pass ") && fw[1].trim_end().ends_with(" 50"), "{text}");
    }

    /// A restarted NF's counters start again from 0: its row shows no
    /// negative or made-up rate.
    #[test]
    fn a_restart_does_not_make_rates_up() {
        let t0 = Instant::now();
        let mut restarted = status(10, 0, 5, 0.1, 0);
        restarted.nfs[0].restarts = 1;
        let prev = Sample { at: t0, chains: vec![status(5000, 0, 100, 1.0, 0)] };
        let now = Sample { at: t0 + Duration::from_secs(1), chains: vec![restarted] };
        let text = render(&prev, &now);
        let row = text.lines().find(|l| l.contains("mid")).expect(&text);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cols[3..6], ["10", "2.0", "-"], "{text}");
    }
}
