//! `ferry gen xsk`: user-space generation through AF_XDP TX, one socket per
//! chosen queue. veth hands a frame sent on transmit queue N to the peer's
//! receive queue N, so picking queues emulates a NIC's RSS spreading flows.
//! Frames come from a traffic profile's flow schedule (stamped per packet),
//! from a pcap file (replayed as is), or are MICA request batches over the
//! profile's flows (`--mica`, FLASH's key-value workload; not stamped: the
//! cache answers in place).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use ferry_traffic::{split_evenly, FlowSchedule, TemplateCache, TrafficProfile};
use ferry_wire::{FrameSpec, Stamp};
use ferry_xsk::XdpDesc;
use serde::Serialize;

use crate::util::stop_requested;
use crate::xskport::{self, PortSpec};
use ferry_nf::mica_client::{MicaClient, MicaSent, MicaWorkload, BATCH_AT as MICA_BATCH_AT};
use ferry_sys::monotonic_ns;
use ferry_sys::Pacer;

pub struct XskGenOptions {
    pub port: PortSpec,
    pub profile: TrafficProfile,
    /// Replay this capture instead of generating from the profile.
    pub pcap: Option<PathBuf>,
    /// Stamp stream of queue i is `stream_base + i`.
    pub stream_base: u16,
    pub batch: usize,
    /// Also receive on the same sockets and measure what comes back (a
    /// tester that loops traffic through a device under test). Receiving
    /// stops once nothing arrived for `rx_idle` after sending ended.
    pub rx: bool,
    pub rx_idle: Duration,
    /// Receive on this device's queue 0 instead of the sending sockets.
    pub rx_dev: Option<String>,
    /// Send MICA request batches of this workload over the profile's flows.
    pub mica: Option<MicaWorkload>,
}

#[derive(Debug, Serialize)]
pub struct XskGenReport {
    pub dev: String,
    pub queues: Vec<u32>,
    /// Frames the kernel completed (really transmitted), per queue.
    pub sent_per_queue: Vec<u64>,
    pub sent: u64,
    pub flows_started: u64,
    pub seconds: f64,
    pub pps: f64,
    /// MICA requests written (queued; `sent` says how many left), with `--mica`.
    pub mica: Option<MicaSent>,
    /// What came back, with `--rx`.
    pub received: Option<ferry_traffic::SinkReport>,
}

/// What one queue sends from.
enum Source {
    Profile {
        schedule: Box<FlowSchedule>,
        templates: TemplateCache,
        stream: u16,
        seq: u32,
    },
    Pcap {
        frames: std::sync::Arc<Vec<Vec<u8>>>,
        next: usize,
    },
    /// UDP frames of `spec`'s length whose payload is a request batch.
    Mica {
        schedule: Box<FlowSchedule>,
        spec: FrameSpec,
        client: Box<MicaClient>,
    },
}

impl Source {
    /// Writes the next frame into `out`; returns its length.
    fn write(&mut self, out: &mut [u8]) -> Result<usize> {
        match self {
            Source::Profile { schedule, templates, stream, seq } => {
                let pkt = schedule.next_packet();
                let stamp = Stamp { stream: *stream, seq: *seq, tx_ns: monotonic_ns() };
                *seq = seq.wrapping_add(1);
                Ok(templates.write_frame(&pkt, &stamp, out)?)
            }
            Source::Mica { schedule, spec, client } => {
                let pkt = schedule.next_packet();
                let len = ferry_wire::build_frame(spec, &pkt.tuple, None, out)?;
                client.write_batch(&mut out[MICA_BATCH_AT..len])?;
                Ok(len)
            }
            Source::Pcap { frames, next } => {
                let f = &frames[*next % frames.len()];
                *next += 1;
                let n = f.len().min(out.len());
                out[..n].copy_from_slice(&f[..n]);
                Ok(n)
            }
        }
    }

    fn flows_started(&self) -> u64 {
        match self {
            Source::Profile { schedule, .. } | Source::Mica { schedule, .. } => schedule.flows_started(),
            Source::Pcap { .. } => 0,
        }
    }
}

pub fn run(opts: &XskGenOptions) -> Result<XskGenReport> {
    let p = &opts.profile;
    p.validate()?;
    let pcap_frames = load_pcap(opts)?;
    let mut io = xskport::open(&opts.port, opts.rx && opts.rx_dev.is_none()).context("opening AF_XDP ports")?;
    let mut rx_io = match &opts.rx_dev {
        Some(dev) => {
            let spec = PortSpec { dev: dev.clone(), queues: vec![0], xsk: opts.port.xsk.clone() };
            Some(xskport::open(&spec, true).with_context(|| format!("opening the receiving port on {dev}"))?)
        }
        None => None,
    };
    let mut stats = match &opts.mica {
        Some(w) => ferry_traffic::SinkStats::new().check_mica(w.value_len),
        None => ferry_traffic::SinkStats::new(),
    };
    let mut lanes = lanes(opts, pcap_frames.as_ref(), mica_spec(opts)?)?;
    let deadline = p.duration_ns().map(|d| Instant::now() + Duration::from_nanos(d));
    let start = Instant::now();
    let mut last_activity = Instant::now();
    let mut rx_descs: Vec<XdpDesc> = Vec::with_capacity(opts.batch);
    let mut descs: Vec<XdpDesc> = Vec::with_capacity(opts.batch);
    let running = || !stop_requested() && deadline.map_or(true, |d| Instant::now() < d);
    while running() {
        let all_done = send_round(&mut io.ports, &mut lanes, &mut descs, opts.batch)?;
        let rx_ports = match rx_io.as_mut() {
            Some(r) => &mut r.ports,
            None => &mut io.ports,
        };
        if opts.rx && receive_round(rx_ports, &mut stats, &mut rx_descs, opts.batch) {
            last_activity = Instant::now();
        }
        if all_done && (!opts.rx || last_activity.elapsed() >= opts.rx_idle) {
            break;
        }
        if !all_done {
            last_activity = Instant::now();
        }
    }
    drain(&mut io.ports, &lanes);
    let seconds = start.elapsed().as_secs_f64();
    let sent_per_queue: Vec<u64> = io.ports.iter().map(|p| p.counters.tx_completed).collect();
    let sent = sent_per_queue.iter().sum();
    Ok(XskGenReport {
        dev: opts.port.dev.clone(),
        queues: opts.port.queues.clone(),
        sent_per_queue,
        sent,
        flows_started: lanes.iter().map(|l| l.source.flows_started()).sum(),
        mica: opts.mica.as_ref().map(|_| mica_sent(&lanes)),
        seconds,
        pps: sent as f64 / seconds.max(1e-9),
        received: opts.rx.then(|| stats.report(Some(sent))),
    })
}

/// What one queue sends: its frames, its pace and its share of the count.
struct Lane {
    source: Source,
    pacer: Pacer,
    /// Frames left to queue in all (None: no limit).
    budget: Option<u64>,
    queued: u64,
}

/// The frames of `--pcap`, replayed in order.
fn load_pcap(opts: &XskGenOptions) -> Result<Option<std::sync::Arc<Vec<Vec<u8>>>>> {
    let Some(path) = &opts.pcap else { return Ok(None) };
    let frames: Vec<Vec<u8>> = ferry_traffic::read_pcap(path)?.into_iter().map(|(_, f)| f).collect();
    if frames.is_empty() {
        return Err(anyhow!("{} holds no packets", path.display()));
    }
    Ok(Some(std::sync::Arc::new(frames)))
}

/// The frame a MICA request batch rides in: long enough for the longest
/// batch (all SETs), and at least the profile's size (FLASH sends 512-byte
/// frames).
fn mica_spec(opts: &XskGenOptions) -> Result<Option<FrameSpec>> {
    let p = &opts.profile;
    match &opts.mica {
        Some(_) if p.proto != ferry_traffic::Proto::Udp => Err(anyhow!("--mica sends UDP: set proto=udp")),
        Some(w) => Ok(Some(FrameSpec {
            frame_len: p.frame_spec().frame_len.max(MICA_BATCH_AT + w.max_batch_len()),
            ..p.frame_spec()
        })),
        None => Ok(None),
    }
}

/// A lane per queue, each with its share of the flows, the rate and the count.
fn lanes(
    opts: &XskGenOptions,
    pcap: Option<&std::sync::Arc<Vec<Vec<u8>>>>,
    mica_spec: Option<FrameSpec>,
) -> Result<Vec<Lane>> {
    let p = &opts.profile;
    let nq = opts.port.queues.len() as u32;
    let mut lanes = Vec::new();
    for i in 0..nq {
        let source = match (pcap, &opts.mica, mica_spec) {
            (Some(frames), _, _) => Source::Pcap { frames: frames.clone(), next: 0 },
            (None, Some(w), Some(spec)) => Source::Mica {
                schedule: Box::new(FlowSchedule::for_queue(p, i, nq)?),
                spec,
                client: Box::new(MicaClient::new(w.clone(), p.seed.wrapping_add(u64::from(i)))?),
            },
            _ => Source::Profile {
                schedule: Box::new(FlowSchedule::for_queue(p, i, nq)?),
                templates: TemplateCache::new(p.frame_spec(), p.version(), p.proto.into(), p.active_flows as usize),
                stream: opts.stream_base + i as u16,
                seq: 0,
            },
        };
        let pacer = Pacer::new(p.rate_pps.map(|r| split_evenly(r, i, nq).max(1)), p.burst);
        // With a pcap and no count, replay the file once.
        let count = p.count.or(pcap.map(|f| f.len() as u64 * nq as u64));
        lanes.push(Lane { source, pacer, budget: count.map(|c| split_evenly(c, i, nq)), queued: 0 });
    }
    Ok(lanes)
}

/// Queues what each lane's pacer allows; true once every lane sent its
/// count.
fn send_round(
    ports: &mut [ferry_xsk::Port],
    lanes: &mut [Lane],
    descs: &mut Vec<XdpDesc>,
    batch: usize,
) -> Result<bool> {
    let mut all_done = true;
    let now = monotonic_ns();
    for (port, lane) in ports.iter_mut().zip(lanes.iter_mut()) {
        port.reclaim();
        let left = lane.budget.map_or(u64::MAX, |b| b - lane.queued);
        if left == 0 {
            continue;
        }
        all_done = false;
        let want = lane.pacer.take(now, (batch as u64).min(left));
        descs.clear();
        for _ in 0..want {
            let Some(mut d) = port.alloc(port.frame_size()) else { break };
            let frame = port.frame_mut(&d).expect("allocated frame lies in the UMEM");
            d.len = lane.source.write(frame)? as u32;
            descs.push(d);
        }
        let sent = port.send(descs)?;
        // Frames the TX ring had no room for are not lost: back to the
        // free list, and the pacer is credited for them.
        for d in &descs[sent..] {
            port.release(d.addr);
        }
        lane.queued += sent as u64;
    }
    Ok(all_done)
}

/// Receives what came back and counts it; true if anything did.
fn receive_round(
    ports: &mut [ferry_xsk::Port],
    stats: &mut ferry_traffic::SinkStats,
    rx_descs: &mut Vec<XdpDesc>,
    batch: usize,
) -> bool {
    let rx_ns = monotonic_ns();
    let mut active = false;
    for port in ports.iter_mut() {
        rx_descs.clear();
        active |= port.recv(batch, rx_descs) > 0;
        for d in rx_descs.iter() {
            if let Some(frame) = port.frame_mut(d) {
                stats.record(frame, rx_ns);
            }
            port.release(d.addr);
        }
    }
    active
}

/// Waits (at most a second) for the kernel to complete what was queued.
fn drain(ports: &mut [ferry_xsk::Port], lanes: &[Lane]) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while ports.iter().zip(lanes).any(|(p, l)| p.counters.tx_completed < l.queued) && Instant::now() < deadline {
        for port in ports.iter_mut() {
            let _ = port.socket().kick_tx();
            port.reclaim();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The MICA batches, GETs and SETs all lanes sent.
fn mica_sent(lanes: &[Lane]) -> MicaSent {
    let mut all = MicaSent::default();
    for lane in lanes {
        if let Source::Mica { client, .. } = &lane.source {
            all.batches += client.sent.batches;
            all.gets += client.sent.gets;
            all.sets += client.sent.sets;
        }
    }
    all
}
