//! The NF host's own loops: the forwarders (`fwd`, `split`, `slow`), the
//! measurement NFs (`source`, `sink`), Maglev and the tenant router of
//! `classify: router`. Each `serve_*` is the [`super::Serve`] of its
//! catalog entry.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use ferry_nf::mica_client::{MicaClient, MicaWorkload, BATCH_AT as MICA_BATCH_AT};
use ferry_nf::ROUTER_COUNTERS;
use ferry_parallel::nfs::maglev::{flow_hash, LookupTable, Permutation};
use ferry_sdk::{NfThread, Packet};
use ferry_sys::monotonic_ns;
use ferry_wire::classify::{Decision, Table};
use ferry_wire::flow::IpVersion;
use ferry_wire::{build_frame, stamp_offset, FiveTuple, FrameSpec, L4Proto, Stamp};
use hdrhistogram::Histogram;

use super::{Launch, BURST};
use crate::Values;

/// `fwd`, `split` and `slow`.
pub fn serve_forward(l: &Launch) -> Result<()> {
    let v = Values::of(l.kind, l.args)?;
    let work_ns = if l.kind == "slow" { v.u64("work_ns")? } else { 0 };
    let route = match l.kind {
        "split" => Route::FlowHash,
        "fwd" if v.u64("by_port")? == 1 => Route::ByPort,
        _ => Route::First,
    };
    let nf = l.hello.connect(&[])?;
    nf.run(|th| forward(th, route, work_ns))?;
    Ok(())
}

/// `source`.
pub fn serve_source(l: &Launch) -> Result<()> {
    let v = Values::of(l.kind, l.args)?;
    let (size, rate, flows) = (v.u64("size")? as usize, v.u64("rate")?, v.u64("flows")?);
    let count = v.u64("count")?;
    let mica: Option<MicaWorkload> = match v.text("mica").unwrap_or_default() {
        "" => None,
        spec => Some(spec.parse().map_err(|e| anyhow!("source: mica={spec}: {e}"))?),
    };
    let nf = l.hello.connect(&["made"])?;
    nf.run(|th| source(th, size, rate, flows, count, mica.clone()))?;
    Ok(())
}

/// `sink`.
pub fn serve_sink(l: &Launch) -> Result<()> {
    let nf = l.hello.connect(&["sunk", "stamped", "lat_p50_ns", "lat_p99_ns", "lat_max_ns", "lat_p999_ns"])?;
    nf.run(sink)?;
    Ok(())
}

/// `maglev`: one Maglev table over the NF's out-links.
pub fn serve_maglev(l: &Launch) -> Result<()> {
    let v = Values::of(l.kind, l.args)?;
    let table_size = u32::try_from(v.u64("table_size")?)?;
    let nf = l.hello.connect(&[])?;
    let table = maglev_table(nf.out_links(), table_size)?;
    nf.run(|th| maglev(th, &table))?;
    Ok(())
}

/// The tenant router: its positional arguments are the edge's rules.
pub fn serve_tenant_router(l: &Launch) -> Result<()> {
    let rules: Vec<&str> = l.args.iter().map(String::as_str).collect();
    let table = Table::parse(&rules).map_err(|(i, e)| anyhow!("{}: rule {i}: {e}", l.kind))?;
    let nf = l.hello.connect(&ROUTER_COUNTERS)?;
    if let Some(r) = table.rules.iter().find(|r| usize::from(r.out) >= nf.out_links().len()) {
        bail!("{}: rule {r} picks out-link {}, but the NF has {}", l.kind, r.out, nf.out_links().len());
    }
    nf.run(|th| tenant_router(th, &table))?;
    Ok(())
}

fn spin_for(ns: u64) {
    let start = Instant::now();
    while (start.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// How `fwd`/`split`/`slow` pick the out-link.
#[derive(Clone, Copy)]
enum Route {
    First,
    FlowHash,
    ByPort,
}

fn forward(mut th: NfThread, route: Route, work_ns: u64) {
    let outs = th.out_links().max(1);
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        if work_ns == 0 && matches!(route, Route::First) {
            th.send_all(&mut burst, 0);
            continue;
        }
        for pkt in burst.drain(..) {
            if work_ns > 0 {
                spin_for(work_ns);
            }
            let hop = match route {
                Route::First => 0,
                Route::FlowHash => ferry_sdk::flow_hash(pkt.data()) as usize % outs,
                Route::ByPort => pkt.arrived_on_port().map_or(0, usize::from),
            };
            th.send(pkt, hop);
        }
    }
}

/// The Maglev lookup table over out-links `backends` (named by the NF they
/// lead to), with the parallel runtime's Maglev code: the same hash, the
/// same permutations, the same population.
pub fn maglev_table(backends: &[String], table_size: u32) -> Result<LookupTable> {
    if backends.is_empty() {
        bail!("maglev needs out-links: one per backend");
    }
    let prime = table_size >= 2
        && (2..)
            .take_while(|d: &u32| u64::from(*d) * u64::from(*d) <= u64::from(table_size))
            .all(|d| table_size % d != 0);
    if !prime || (table_size as usize) < backends.len() {
        bail!(
            "maglev: table_size {table_size} must be a prime of at least the number of backends ({})",
            backends.len()
        );
    }
    let perms: Vec<Permutation> = backends.iter().map(|b| Permutation::of(b, table_size)).collect();
    Ok(LookupTable::build(&perms, &vec![true; backends.len()], table_size))
}

/// Sends each frame to the backend (out-link) Maglev picks for its flow;
/// frames without a TCP, UDP or ICMP 5-tuple (IPv4 or IPv6) are dropped
/// (counted `drop_nf`).
fn maglev(mut th: NfThread, table: &LookupTable) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for pkt in burst.drain(..) {
            let hop = ferry_wire::five_tuple(pkt.data())
                .and_then(|t| table.lookup(flow_hash(t.src_ip, t.dst_ip, t.protocol(), t.src_port, t.dst_port)));
            match hop {
                Some(b) => th.send(pkt, usize::from(b)),
                None => th.drop_packet(pkt),
            }
        }
    }
}

/// The trusted router of `classify: router` (the SmartNIC paper's
/// baseline): classifies each frame with the edge's table and sends it
/// on the out-link of the tenant entry its rule picks, a copy link into
/// that tenant's memory; what no rule takes is dropped.
fn tenant_router(mut th: NfThread, table: &Table) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut counts = [0u64; ROUTER_COUNTERS.len()];
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for pkt in burst.drain(..) {
            match table.decide(pkt.data()) {
                Decision::Rule(i) => {
                    counts[0] += 1;
                    th.send(pkt, usize::from(table.rules[i].out));
                }
                Decision::Default => {
                    counts[1] += 1;
                    th.drop_packet(pkt);
                }
                Decision::Malformed => {
                    counts[2] += 1;
                    th.drop_packet(pkt);
                }
            }
        }
        for (i, &v) in counts.iter().enumerate() {
            th.set_nf_counter(i, v);
        }
    }
}

/// Makes `count` frames per thread (0: for ever) of `size` bytes at `rate`
/// per second (0: as fast as it can), cycling over `flows` UDP flows;
/// stamped, or carrying MICA request batches of workload `mica` (then at
/// least as long as the longest batch needs).
fn source(mut th: NfThread, size: usize, rate: u64, flows: u64, count: u64, mica: Option<MicaWorkload>) {
    let need = mica.as_ref().map_or(60, |w| MICA_BATCH_AT + w.max_batch_len());
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: size.max(need) };
    if spec.frame_len > th.frame_size() {
        tracing::error!(
            "source: {}-byte frames do not fit the domain's {}-byte frames",
            spec.frame_len,
            th.frame_size()
        );
        return;
    }
    let client = match mica.map(|w| MicaClient::new(w, th.index() as u64)) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            tracing::error!("source: mica: {e}");
            return;
        }
        None => None,
    };
    let Some(templates) = flow_templates(&spec, flows) else { return };
    let mut made = Made { templates, client, stream: th.index() as u16, seq: 0, count: 0, limit: count };
    // Frame by frame: a frame goes when it is due, not when a burst of
    // them is, so that latency at a paced load is not queueing behind the
    // source's own burst.
    let mut pacer = ferry_sys::Pacer::for_frames((rate > 0).then_some(rate), BURST);
    while th.service().is_ok() {
        if made.all_made() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let now = monotonic_ns();
        let due = pacer.allowance(now).min(BURST as u64);
        if due == 0 {
            pacer.wait(now);
            continue;
        }
        let Some(sent) = made.send(&mut th, spec.frame_len, due, now) else { return };
        pacer.consume(sent);
        th.set_nf_counter(0, made.count);
        if sent == 0 && !made.all_made() {
            // The pool is empty: every frame is downstream. Let the NFs
            // that hold them run rather than spin.
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// One stamped UDP frame per flow, from 10.0.0.1:1024+f to 10.0.1.1:9.
fn flow_templates(spec: &FrameSpec, flows: u64) -> Option<Vec<Vec<u8>>> {
    let mut templates = Vec::new();
    for f in 0..flows {
        let tuple = FiveTuple {
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 1, 1].into(),
            src_port: 1024 + f as u16,
            dst_port: 9,
            proto: L4Proto::Udp,
        };
        let mut buf = vec![0u8; spec.frame_len];
        build_frame(spec, &tuple, Some(&Stamp::default()), &mut buf).ok()?;
        templates.push(buf);
    }
    Some(templates)
}

/// What a source thread makes: its flows' frames, stamped or carrying
/// MICA request batches, up to `limit` (0: no limit).
struct Made {
    templates: Vec<Vec<u8>>,
    client: Option<MicaClient>,
    stream: u16,
    seq: u32,
    count: u64,
    limit: u64,
}

impl Made {
    fn all_made(&self) -> bool {
        self.limit > 0 && self.count >= self.limit
    }

    /// Sends up to `due` frames of `len` bytes; how many, or None when the
    /// MICA client fails.
    fn send(&mut self, th: &mut NfThread, len: usize, due: u64, now: u64) -> Option<u64> {
        let before = self.count;
        let off = stamp_offset(IpVersion::V4, L4Proto::Udp);
        for _ in 0..due {
            if self.all_made() {
                break;
            }
            let Some(mut pkt) = th.alloc(len) else { break };
            let d = pkt.data_mut();
            d.copy_from_slice(&self.templates[(self.seq as u64 % self.templates.len() as u64) as usize]);
            match self.client.as_mut() {
                Some(c) => {
                    if let Err(e) = c.write_batch(&mut d[MICA_BATCH_AT..]) {
                        tracing::error!("source: mica: {e}");
                        return None;
                    }
                }
                None => {
                    Stamp { stream: self.stream, seq: self.seq, tx_ns: now }.write(&mut d[off..]);
                }
            }
            self.seq = self.seq.wrapping_add(1);
            self.count += 1;
            th.send(pkt, 0);
        }
        Some(self.count - before)
    }
}

fn sink(mut th: NfThread) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let (mut sunk, mut stamped) = (0u64, 0u64);
    let mut window = Instant::now();
    let off = stamp_offset(IpVersion::V4, L4Proto::Udp);
    loop {
        let r = th.recv_burst(&mut burst, BURST);
        let now = monotonic_ns();
        for pkt in burst.drain(..) {
            if let Some(s) = pkt.data().get(off..).and_then(Stamp::read) {
                stamped += 1;
                let _ = hist.record(now.saturating_sub(s.tx_ns).max(1));
            }
            sunk += 1;
            th.drop_packet(pkt);
        }
        th.set_nf_counter(0, sunk);
        th.set_nf_counter(1, stamped);
        // Publish the last full window's percentiles.
        if window.elapsed() >= Duration::from_millis(500) && !hist.is_empty() {
            th.set_nf_counter(2, hist.value_at_quantile(0.5));
            th.set_nf_counter(3, hist.value_at_quantile(0.99));
            th.set_nf_counter(4, hist.max());
            th.set_nf_counter(5, hist.value_at_quantile(0.999));
            hist.reset();
            window = Instant::now();
        }
        if r.is_err() {
            return;
        }
    }
}
