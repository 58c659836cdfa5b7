//! The instrument: one `ferry gen xsk --rx --rx-dev g1` process on its own
//! CPU sends stamped frames into g0 and reads them back on g1, so one
//! process stamps and measures, with the same frames for every system;
//! and the CPU time of both CPUs over its run, from `/proc/stat`.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use ferry_cli::proc::{self, num};

/// How long the instrument waits after its last frame for stragglers.
const RX_IDLE: Duration = Duration::from_millis(100);

/// What the instrument sends: a fixed rate for a count of frames, or flat
/// out for a window.
#[derive(Debug, Clone, Copy)]
pub enum Offer {
    Rate { pps: u64, count: u64 },
    FlatOut { window: Duration },
}

/// One run's figures.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub sent: f64,
    pub received: f64,
    pub mpps: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    /// The system's CPU busy (user, system, irq, softirq), percent.
    pub cpu_percent: f64,
    /// The instrument CPU's softirq share, percent: veth receive work
    /// runs on the sending CPU, a kernel or XDP system's forwarding with it.
    pub softirq0_percent: f64,
}

/// Runs the instrument in namespace `ns` on `cpu`, addressing frames to
/// `dst_mac`, with the profile overrides `sets`, while `sut_cpu` is the
/// system's.
pub fn run(ns: &str, cpu: usize, sut_cpu: usize, dst_mac: &str, sets: &[&str], offer: Offer) -> Result<Sample> {
    let mut args: Vec<String> =
        ["gen", "xsk", "--dev", "g0", "--rx", "--rx-dev", "g1", "--size", "64"].into_iter().map(String::from).collect();
    args.extend(["--rx-idle".into(), format!("{}ms", RX_IDLE.as_millis()), "--dst-mac".into(), dst_mac.into()]);
    for s in sets {
        args.extend(["--set".into(), s.to_string()]);
    }
    let budget = match offer {
        Offer::Rate { pps, count } => {
            args.extend(["--rate".into(), pps.to_string(), "--count".into(), count.to_string()]);
            Duration::from_secs_f64(count as f64 / pps as f64)
        }
        Offer::FlatOut { window } => {
            args.extend(["--duration".into(), format!("{}ms", window.as_millis())]);
            window
        }
    };
    let before = (cpu_jiffies(sut_cpu)?, cpu_jiffies(cpu)?);
    let gen = proc::spawn(ns, &args, Some(cpu))?.wait(budget + Duration::from_secs(60))?;
    let after = (cpu_jiffies(sut_cpu)?, cpu_jiffies(cpu)?);
    let us = |p: &str| gen.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    let (sent, received) = (num(&gen, "/sent"), num(&gen, "/received/packets"));
    if sent == 0.0 {
        bail!("the generator sent nothing");
    }
    Ok(Sample {
        sent,
        received,
        // gen's seconds end after RX_IDLE with nothing arriving.
        mpps: received / (num(&gen, "/seconds") - RX_IDLE.as_secs_f64()).max(1e-3) / 1e6,
        p50_us: us("/received/latency/p50_ns"),
        p99_us: us("/received/latency/p99_ns"),
        p999_us: us("/received/latency/p999_ns"),
        cpu_percent: share(before.0, after.0, Jiffies::Busy),
        softirq0_percent: share(before.1, after.1, Jiffies::Softirq),
    })
}

#[derive(Clone, Copy)]
enum Jiffies {
    Busy = 0,
    Softirq = 1,
}

/// CPU `cpu`'s jiffies (`/proc/stat`): busy, softirq, total.
fn cpu_jiffies(cpu: usize) -> Result<[u64; 3]> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| anyhow!("no {name} in /proc/stat"))?;
    // user nice system idle iowait irq softirq steal
    let v: Vec<u64> = line.split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect();
    let busy = v.iter().enumerate().filter(|(i, _)| ![3, 4].contains(i)).map(|(_, x)| x).sum();
    Ok([busy, v.get(6).copied().unwrap_or(0), v.iter().sum()])
}

/// Percent of one CPU between two [`cpu_jiffies`] readings.
fn share(before: [u64; 3], after: [u64; 3], k: Jiffies) -> f64 {
    let k = k as usize;
    100.0 * after[k].saturating_sub(before[k]) as f64 / after[2].saturating_sub(before[2]).max(1) as f64
}
