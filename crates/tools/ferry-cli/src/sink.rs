//! `ferry sink`: AF_XDP receive on a device's queues; counts packets, bytes,
//! loss, reordering and latency (from the generator's stamp), optionally
//! writing every frame to a pcap file.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_nf::mica_client::MicaWorkload;
use ferry_traffic::{PcapWriter, SinkReport, SinkStats};
use ferry_xsk::XdpDesc;

use crate::util::RunLimit;
use crate::xskport::{self, PortSpec};
use ferry_sys::monotonic_ns;

pub struct SinkOptions {
    pub port: PortSpec,
    pub duration: Option<Duration>,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop when nothing arrived for this long after the first frame.
    pub idle_exit: Option<Duration>,
    pub pcap: Option<PathBuf>,
    /// Frames the generator reported sending, for the loss figure.
    pub sent: Option<u64>,
    pub batch: usize,
    /// Check every datagram as a response to this MICA workload.
    pub mica: Option<MicaWorkload>,
}

pub fn run(opts: &SinkOptions) -> Result<SinkReport> {
    let mut io = xskport::open(&opts.port, true).context("opening AF_XDP ports")?;
    let mut pcap = match &opts.pcap {
        Some(path) => Some(PcapWriter::create(path, 65535)?),
        None => None,
    };
    let mut stats = match &opts.mica {
        Some(w) => SinkStats::new().check_mica(w.value_len),
        None => SinkStats::new(),
    };
    let limit = RunLimit::new(opts.duration);
    let mut descs: Vec<XdpDesc> = Vec::with_capacity(opts.batch);
    let mut last_rx: Option<Instant> = None;
    while !limit.done() {
        if opts.count.is_some_and(|c| stats.packets() >= c) {
            break;
        }
        if let (Some(idle), Some(last)) = (opts.idle_exit, last_rx) {
            if last.elapsed() >= idle {
                break;
            }
        }
        let mut got = 0;
        for port in io.ports.iter_mut() {
            descs.clear();
            if port.recv(opts.batch, &mut descs) == 0 {
                continue;
            }
            got += descs.len();
            let rx_ns = monotonic_ns();
            for d in &descs {
                if let Some(frame) = port.frame_mut(d) {
                    stats.record(frame, rx_ns);
                    if let Some(w) = pcap.as_mut() {
                        w.write(frame, rx_ns)?;
                    }
                }
                port.release(d.addr);
            }
        }
        if got > 0 {
            last_rx = Some(Instant::now());
        } else {
            io.wait_readable(10);
        }
    }
    if let Some(w) = pcap {
        w.finish()?;
    }
    Ok(stats.report(opts.sent))
}
