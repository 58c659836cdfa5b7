//! `ferry xdp run`: attach one of Ferry's basic XDP programs to a device,
//! count its verdicts over a measurement window, detach, report. Used by
//! `ferry bench io` for the XDP baselines and as a counting sink.

use std::time::Duration;

use anyhow::{anyhow, Result};
use ferry_bpf::{AttachMode, LoadedXdp, Object, Verdicts, VERDICT_NAMES};
use serde::Serialize;

use crate::util::{RunLimit, Window};

/// Counters over the measurement window.
#[derive(Debug, Serialize, Clone)]
pub struct XdpRunReport {
    pub dev: String,
    pub program: String,
    pub seconds: f64,
    /// Packets per verdict over the window, by name.
    pub packets: Vec<(String, u64)>,
    pub total_packets: u64,
    pub total_bytes: u64,
    pub pps: f64,
    /// Packets per verdict since attach (window and warm-up).
    pub packets_since_attach: u64,
}

/// Program names `ferry xdp run` accepts.
pub const PROGRAMS: [&str; 3] = ["drop", "pass", "tx"];

/// Attaches `program` to `dev`; the measurement window opens `warmup`
/// after the first frame and lasts `window` (None: until a stop signal).
/// Gives up waiting for traffic after `timeout`.
pub fn run(
    dev: &str,
    program: &str,
    mode: AttachMode,
    warmup: Duration,
    window: Option<Duration>,
    timeout: Option<Duration>,
) -> Result<XdpRunReport> {
    if !PROGRAMS.contains(&program) {
        return Err(anyhow!("unknown program {program:?}: one of {}", PROGRAMS.join(", ")));
    }
    let name = format!("ferry_{program}");
    let ifindex = crate::util::ifindex(dev)?;
    let prog = LoadedXdp::attach(Object::Basic, &name, ifindex, mode)?;
    let limit = RunLimit::new(timeout);
    let mut w: Window<Verdicts> = Window::new(warmup, window);
    while !limit.done() && !w.is_closed() {
        std::thread::sleep(Duration::from_millis(5));
        let now = prog.verdicts()?;
        w.observe(now.total_packets() > 0, || now);
    }
    let last = prog.verdicts()?;
    let (seconds, before, after) = w.result(last).unwrap_or((0.0, last, last));
    Ok(window_report(dev, &name, &before, &after, seconds, last.total_packets()))
}

fn window_report(
    dev: &str,
    program: &str,
    before: &Verdicts,
    after: &Verdicts,
    seconds: f64,
    all: u64,
) -> XdpRunReport {
    let mut packets = Vec::new();
    let (mut total_packets, mut total_bytes) = (0, 0);
    for (i, name) in VERDICT_NAMES.iter().enumerate() {
        let p = after.packets[i] - before.packets[i];
        total_packets += p;
        total_bytes += after.bytes[i] - before.bytes[i];
        packets.push((name.to_string(), p));
    }
    XdpRunReport {
        dev: dev.to_string(),
        program: program.to_string(),
        seconds,
        packets,
        total_packets,
        total_bytes,
        pps: total_packets as f64 / seconds.max(1e-9),
        packets_since_attach: all,
    }
}
