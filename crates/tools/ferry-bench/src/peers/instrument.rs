//! The instrument: one `ferry gen xsk --rx --rx-dev g1` process on its own
//! CPU sends stamped frames into g0 and reads them back on g1, so one
//! process stamps and measures, with the same frames for every system;
//! and the CPU time of both CPUs over its run (`CpuMeter`, `/proc/stat`).

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use ferry_cli::proc::{self, num};
use ferry_testbed::apps::CpuMeter;

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
    let meter = CpuMeter::start(&[])?;
    let gen = proc::spawn(ns, &args, Some(cpu))?.wait(budget + Duration::from_secs(60))?;
    let used = meter.stop()?;
    let of = |per_cpu: &[f64], i: usize| per_cpu.get(i).copied().ok_or_else(|| anyhow!("no CPU {i} in /proc/stat"));
    let us = |p: &str| gen.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    // Distinct stamped frames of this run (the sink report's loss is
    // counted against them): a stray frame on g1 (a bridge's own, one
    // left from the system before) is not one of the generator's.
    let sent = num(&gen, "/sent");
    let received = sent - num(&gen, "/received/lost");
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
        cpu_percent: of(&used.busy_percent_per_cpu, sut_cpu)?,
        softirq0_percent: of(&used.softirq_percent_per_cpu, cpu)?,
    })
}
