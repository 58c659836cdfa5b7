//! `ferry gen txonly`: AF_XDP transmit and nothing else. Every buffer of
//! the UMEM holds the same frame, written once; the loop only moves
//! descriptors from the completion ring back to the TX ring and kicks the
//! kernel. What it reaches is the device's AF_XDP transmit limit (copy
//! mode on veth: one copy per frame inside `sendto`), which `ferry bench
//! io` sets beside the receive limit and l2fwd.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::util::{RunLimit, Window};
use crate::xskport::{self, PortSpec};

pub struct TxOnlyOptions {
    pub port: PortSpec,
    /// The frame every buffer carries.
    pub frame: Vec<u8>,
    pub batch: usize,
    pub duration: Option<Duration>,
    /// The measurement window opens this long after the first completion...
    pub warmup: Duration,
    /// ...and lasts this long (None: until the run ends).
    pub window: Option<Duration>,
}

#[derive(Debug, Serialize)]
pub struct TxOnlyReport {
    pub dev: String,
    pub queues: Vec<u32>,
    pub frame_len: usize,
    /// Frames the kernel completed (really transmitted).
    pub completed: u64,
    /// Completions in the measurement window, and its length.
    pub window_seconds: f64,
    pub window_tx: u64,
}

fn completed(io: &xskport::XskPorts) -> u64 {
    io.ports.iter().map(|p| p.counters.tx_completed).sum()
}

pub fn run(opts: &TxOnlyOptions) -> Result<TxOnlyReport> {
    let mut io = xskport::open(&opts.port, false).context("opening AF_XDP ports")?;
    let len = opts.frame.len() as u32;
    // Write the frame into every buffer once: transmitting leaves it as is.
    for port in io.ports.iter_mut() {
        let mut all = Vec::new();
        while let Some(desc) = port.alloc(len) {
            port.frame_mut(&desc).context("a buffer of this port")?.copy_from_slice(&opts.frame);
            all.push(desc.addr);
        }
        for addr in all {
            port.release(addr);
        }
    }
    let limit = RunLimit::new(opts.duration);
    let mut window: Window<u64> = Window::new(opts.warmup, opts.window);
    let mut batch = Vec::with_capacity(opts.batch);
    while !limit.done() {
        let done = completed(&io);
        window.observe(done > 0, || done);
        for port in io.ports.iter_mut() {
            port.reclaim();
            batch.clear();
            while batch.len() < opts.batch {
                match port.alloc(len) {
                    Some(desc) => batch.push(desc),
                    None => break,
                }
            }
            let sent = port.send(&batch)?;
            for d in &batch[sent..] {
                port.release(d.addr);
            }
        }
    }
    let mut report = TxOnlyReport {
        dev: opts.port.dev.clone(),
        queues: io.queues.clone(),
        frame_len: opts.frame.len(),
        completed: 0,
        window_seconds: 0.0,
        window_tx: 0,
    };
    if let Some((seconds, start, end)) = window.result(completed(&io)) {
        report.window_seconds = seconds;
        report.window_tx = end - start;
    }
    for port in io.ports.iter_mut() {
        port.reclaim();
    }
    report.completed = completed(&io);
    Ok(report)
}
