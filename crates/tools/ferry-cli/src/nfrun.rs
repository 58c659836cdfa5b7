//! `ferry nf run`: one process running a list of NFs on AF_XDP ports of a
//! device. Per-packet logic lives in `ferry-nf`; this loop batches frames,
//! applies the verdicts and counts what happened to every frame.

use std::time::Duration;

use anyhow::{Context, Result};
use ferry_nf::{NfChainLocal, PacketNf, Verdict};
use ferry_xsk::XdpDesc;
use serde::Serialize;

use crate::util::{RunLimit, Window};
use crate::xskport::{self, PortSpec};

/// What `ferry nf run` prints when it stops.
#[derive(Debug, Serialize)]
pub struct NfRunReport {
    pub dev: String,
    pub queues: Vec<u32>,
    pub nfs: Vec<NfCounters>,
    /// Frames no NF claimed (every NF returned Pass).
    pub drop_unclaimed: u64,
    /// Frames the TX ring had no room for (dropped, counted).
    pub drop_tx_full: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// XDP verdicts of the steering program, by name.
    pub xdp: Vec<(String, u64)>,
    /// Kernel-side socket drops (ring full, fill ring empty...), summed.
    pub xsk_rx_dropped: u64,
    pub xsk_rx_ring_full: u64,
    pub xsk_fill_empty: u64,
    /// Frames still outside the free lists when the loop ended; after the
    /// final reclaim this equals the frames parked on the fill rings.
    pub frames_in_flight: u32,
    /// Packets received and transmitted in the measurement window (after
    /// the warm-up), and its length: what benchmarks read.
    pub window_seconds: f64,
    pub window_rx: u64,
    pub window_tx: u64,
}

#[derive(Debug, Serialize)]
pub struct NfCounters {
    pub name: String,
    pub counters: Vec<(String, u64)>,
}

/// Options of one NF process.
pub struct NfRunOptions {
    pub port: PortSpec,
    pub batch: usize,
    pub duration: Option<Duration>,
    /// The measurement window opens this long after the first frame...
    pub warmup: Duration,
    /// ...and lasts this long (None: until the run ends).
    pub window: Option<Duration>,
    /// Poll timeout when idle: the process sleeps in poll() rather than spin.
    pub idle_poll_ms: i32,
}

/// Runs `nfs` on the device until the duration ends or a stop signal.
pub fn run(opts: &NfRunOptions, nfs: Vec<Box<dyn PacketNf>>) -> Result<NfRunReport> {
    let mut chain = NfChainLocal::new(nfs);
    let mut io = xskport::open(&opts.port, true).context("opening AF_XDP ports")?;
    let limit = RunLimit::new(opts.duration);
    let mut rx: Vec<XdpDesc> = Vec::with_capacity(opts.batch);
    let mut tx: Vec<XdpDesc> = Vec::with_capacity(opts.batch);
    let mut drop_tx_full = 0u64;
    let mut window: Window<(u64, u64)> = Window::new(opts.warmup, opts.window);
    while !limit.done() {
        let (rx_total, tx_total) = totals(&io.ports);
        window.observe(rx_total > 0, || (rx_total, tx_total));
        let got_any = forward_round(&mut io.ports, &mut chain, (&mut rx, &mut tx), opts.batch, &mut drop_tx_full)?;
        if !got_any {
            // Nothing arrived on any port: block briefly instead of spinning,
            // so an idle NF costs no CPU.
            io.wait_readable(opts.idle_poll_ms);
        }
    }
    let mut report = NfRunReport {
        dev: opts.port.dev.clone(),
        queues: io.queues.clone(),
        nfs: chain
            .nfs()
            .iter()
            .map(|nf| NfCounters {
                name: nf.spec().name.to_string(),
                counters: nf.spec().counters.iter().zip(nf.counters()).map(|(n, v)| (n.to_string(), *v)).collect(),
            })
            .collect(),
        drop_unclaimed: chain.unclaimed(),
        drop_tx_full,
        rx_packets: 0,
        tx_packets: 0,
        xdp: Vec::new(),
        xsk_rx_dropped: 0,
        xsk_rx_ring_full: 0,
        xsk_fill_empty: 0,
        frames_in_flight: 0,
        window_seconds: 0.0,
        window_rx: 0,
        window_tx: 0,
    };
    if let Some((seconds, (rx0, tx0), (rx1, tx1))) = window.result(totals(&io.ports)) {
        report.window_seconds = seconds;
        report.window_rx = rx1 - rx0;
        report.window_tx = tx1 - tx0;
    }
    // Let the last transmissions complete before counting frames.
    std::thread::sleep(Duration::from_millis(20));
    count_ports(&mut io, &mut report)?;
    Ok(report)
}

/// One receive burst per port through the NF chain; what it sends back
/// goes out of the same port. Whether anything arrived.
fn forward_round(
    ports: &mut [ferry_xsk::Port],
    chain: &mut NfChainLocal,
    (rx, tx): (&mut Vec<XdpDesc>, &mut Vec<XdpDesc>),
    batch: usize,
    drop_tx_full: &mut u64,
) -> Result<bool> {
    let mut got_any = false;
    for port in ports.iter_mut() {
        port.reclaim();
        rx.clear();
        tx.clear();
        if port.recv(batch, rx) == 0 {
            continue;
        }
        got_any = true;
        for desc in rx.iter() {
            // A descriptor outside the UMEM cannot come from the kernel;
            // if it ever did, dropping it is the only safe choice.
            let verdict = port.frame_mut(desc).map_or(Verdict::Drop, |frame| chain.process(frame));
            match verdict {
                Verdict::Tx => tx.push(*desc),
                Verdict::Drop | Verdict::Pass => port.release(desc.addr),
            }
        }
        let sent = port.send(tx)?;
        for d in &tx[sent..] {
            *drop_tx_full += 1;
            port.release(d.addr);
        }
    }
    Ok(got_any)
}

/// The ports' and sockets' counters, and the XDP program's verdicts.
fn count_ports(io: &mut xskport::XskPorts, report: &mut NfRunReport) -> Result<()> {
    for port in io.ports.iter_mut() {
        port.reclaim();
        report.rx_packets += port.counters.rx_packets;
        report.tx_packets += port.counters.tx_packets;
        report.frames_in_flight += port.frames_in_flight();
        if let Ok(st) = port.socket().statistics() {
            report.xsk_rx_dropped += st.rx_dropped;
            report.xsk_rx_ring_full += st.rx_ring_full;
            report.xsk_fill_empty += st.rx_fill_ring_empty_descs;
        }
    }
    if let Some(p) = io.program.as_ref() {
        let v = p.verdicts()?;
        report.xdp = ferry_bpf::VERDICT_NAMES.iter().zip(v.packets).map(|(n, c)| (n.to_string(), c)).collect();
    }
    Ok(())
}

fn totals(ports: &[ferry_xsk::Port]) -> (u64, u64) {
    ports.iter().fold((0, 0), |(rx, tx), p| (rx + p.counters.rx_packets, tx + p.counters.tx_packets))
}
