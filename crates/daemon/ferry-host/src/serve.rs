//! The host process for built-in NFs in a ferryd chain (`ferry-host`).
//! ferryd starts it (as the NF's unprivileged user) with `FERRY_SOCKET` and
//! `FERRY_NF` set; `--kind` picks the NF, `--arg` passes its arguments.
//!
//! Kinds:
//! * any per-packet NF of `ferry nf list`, or several joined with `+`
//!   (`arp-responder+icmp-echo`, arguments of each separated by `--`):
//!   `tx` replies out of the arrival port for responders and forwards on
//!   out-link 0 for the others; `pass` forwards on out-link 0;
//! * `fwd`: forward everything on out-link 0; with `by_port=1`, a frame
//!   that arrived on the thread's i-th port goes to out-link i (to route
//!   through an external program on a veth and back);
//! * `split`: spread flows over all out-links by flow hash (fan-out);
//! * `slow arg work_ns=N`: burn N ns of CPU per packet, then forward;
//! * `source` (args `size=64`, `rate=PPS`, `flows=N`): make stamped UDP
//!   frames in the domain's own UMEM, for measuring chaining without veth;
//! * `sink`: count, check stamps, publish latency percentiles, free;
//! * `parallel-<name>`: a parallel NF on worker threads (`workers=N`), see
//!   [`crate::parallel`];
//! * `tenant-router` (rules `out=N,dst=CIDR,...`): the trusted router of
//!   `classify: router`, each frame to the out-link of its rule's entry;
//! * `flow-monitor`: its flows also go to the table ferryd reads, see
//!   [`crate::flow_monitor`];
//! * `efw`, `elb`, `edpi`, `enat`: a hybrid NF's control plane, see
//!   [`crate::hybrid`].

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use ferry_catalog::Runner;
use ferry_nf::mica_client::{MicaClient, MicaWorkload, BATCH_AT as MICA_BATCH_AT};
use ferry_nf::ROUTER_COUNTERS;
use ferry_nf::{PacketNf, Verdict};
use ferry_parallel::nfs::maglev::{flow_hash, LookupTable, Permutation};
use ferry_sdk::{Nf, NfThread, Packet};
use ferry_wire::classify::{Decision, Table};
use ferry_wire::{build_frame, stamp_offset, FiveTuple, FrameSpec, L4Proto, Stamp};
use hdrhistogram::Histogram;

use ferry_sys::monotonic_ns;

/// Exit status when ferryd closed the control socket.
pub const EXIT_STOPPED: i32 = 0;

const BURST: usize = 32;

/// Runs NF kind `kind` until ferryd stops it. Its kind and arguments are
/// checked against the catalog first, as the chain file was.
pub fn serve(kind: &str, args: &[String]) -> Result<()> {
    let runner = ferry_catalog::runner(kind)?;
    if let Runner::Parallel { name } = runner {
        // Checked there, with the NF's own arguments apart from the host's.
        return crate::parallel::serve(name, kind, args);
    }
    ferry_catalog::check(kind, args)?;
    match runner {
        Runner::Hybrid => crate::hybrid::serve(kind, args),
        Runner::FlowExport => crate::flow_monitor::serve(),
        Runner::HostLoop => host_loop(kind, args),
        Runner::Packet { replies } => serve_packet_nf(kind, args, replies),
        Runner::Parallel { .. } => unreachable!("served above"),
    }
}

/// One of the host's own loops.
fn host_loop(kind: &str, args: &[String]) -> Result<()> {
    if THREADED.contains(&kind) {
        return run_threaded(kind, args, &Hello::Env);
    }
    match kind {
        "maglev" => {
            let v = ferry_catalog::Values::of(kind, args)?;
            let table_size = u32::try_from(v.u64("table_size")?)?;
            let nf = Nf::connect_from_env()?;
            let table = maglev_table(nf.out_links(), table_size)?;
            nf.run(|th| maglev(th, &table))?;
        }
        ferry_catalog::TENANT_ROUTER => {
            let rules: Vec<&str> = args.iter().map(String::as_str).collect();
            let table = Table::parse(&rules).map_err(|(i, e)| anyhow!("{kind}: rule {i}: {e}"))?;
            let nf = Nf::connect_from_env_with(&ROUTER_COUNTERS)?;
            if let Some(r) = table.rules.iter().find(|r| usize::from(r.out) >= nf.out_links().len()) {
                bail!("{kind}: rule {r} picks out-link {}, but the NF has {}", r.out, nf.out_links().len());
            }
            nf.run(|th| tenant_router(th, &table))?;
        }
        _ => bail!("{kind}: the catalog has it run by a host loop the NF host does not have"),
    }
    Ok(())
}

/// A per-packet NF (or several joined with `+`) on each thread.
fn serve_packet_nf(kind: &str, args: &[String], replies: bool) -> Result<()> {
    let build = || ferry_catalog::build_packet(kind, args);
    let first = build()?;
    let names: Vec<&str> = first.spec().counters.to_vec();
    let nf = Nf::connect_from_env_with(&names)?;
    nf.run(|th| {
        let pnf = build().expect("built once already");
        packet_nf(th, pnf, replies)
    })?;
    Ok(())
}

/// The kinds [`run_threaded`] runs: the framework's own threaded NFs.
pub const THREADED: [&str; 5] = ["source", "sink", "fwd", "split", "slow"];

/// How an NF says hello to ferryd: as its environment says (`ferry-host serve`,
/// one NF per process), or by name on a given socket (`ferry-host host`, several
/// NFs as threads of one process).
pub enum Hello<'a> {
    Env,
    Named { socket: &'a Path, name: &'a str },
}

impl Hello<'_> {
    fn connect(&self, counters: &[&str]) -> Result<Nf> {
        Ok(match self {
            Hello::Env => Nf::connect_from_env_with(counters)?,
            Hello::Named { socket, name } => Nf::connect(socket, name, counters)?,
        })
    }
}

/// Runs one of the [`THREADED`] kinds until ferryd stops it.
pub fn run_threaded(kind: &str, args: &[String], hello: &Hello) -> Result<()> {
    ferry_catalog::check(kind, args)?;
    let v = ferry_catalog::Values::of(kind, args)?;
    match kind {
        "source" => {
            let nf = hello.connect(&["made"])?;
            let (size, rate, flows) = (v.u64("size")? as usize, v.u64("rate")?, v.u64("flows")?);
            let count = v.u64("count")?;
            let mica: Option<MicaWorkload> = match v.text("mica").unwrap_or_default() {
                "" => None,
                spec => Some(spec.parse().map_err(|e| anyhow!("source: mica={spec}: {e}"))?),
            };
            nf.run(|th| source(th, size, rate, flows, count, mica.clone()))?;
        }
        "sink" => {
            let nf = hello.connect(&["sunk", "stamped", "lat_p50_ns", "lat_p99_ns", "lat_max_ns", "lat_p999_ns"])?;
            nf.run(sink)?;
        }
        "fwd" | "split" | "slow" => {
            let work_ns = if kind == "slow" { v.u64("work_ns")? } else { 0 };
            let nf = hello.connect(&[])?;
            let route = match kind {
                "split" => Route::FlowHash,
                "fwd" if v.u64("by_port")? == 1 => Route::ByPort,
                _ => Route::First,
            };
            nf.run(|th| forward(th, route, work_ns))?;
        }
        _ => bail!("{kind} is not a threaded NF kind ({})", THREADED.join(", ")),
    }
    Ok(())
}

/// `ferry-host host`: NFs given as `NAME=KIND[:ARG,ARG...]`, each connecting to
/// ferryd at `socket` as NF NAME and running as threads of this process.
/// The one-process bound of `bench chain` on the SDK's own code: the same
/// NF code, rings and frame pool as `ferry-host serve`, without the processes.
pub fn host(socket: &Path, nfs: &[String]) -> Result<()> {
    let parsed = nfs.iter().map(|spec| hosted_nf(spec)).collect::<Result<Vec<_>>>()?;
    std::thread::scope(|s| {
        let handles: Vec<_> = parsed
            .iter()
            .map(|(name, kind, args)| {
                s.spawn(move || {
                    run_threaded(kind, args, &Hello::Named { socket, name }).map_err(|e| e.context(name.clone()))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("an NF thread panicked"))?)
    })
}

/// `NAME=KIND[:ARG,ARG...]` as (name, kind, arguments).
fn hosted_nf(spec: &str) -> Result<(String, String, Vec<String>)> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| anyhow::anyhow!("{spec:?}: NAME=KIND[:ARG,ARG...]"))?;
    if name.is_empty() || rest.is_empty() {
        bail!("{spec:?}: NAME=KIND[:ARG,ARG...]");
    }
    let (kind, args) = rest.split_once(':').unwrap_or((rest, ""));
    let args = args.split(',').filter(|a| !a.is_empty()).map(str::to_string).collect();
    Ok((name.to_string(), kind.to_string(), args))
}

fn packet_nf(mut th: NfThread, mut nf: Box<dyn PacketNf>, reply: bool) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for mut pkt in burst.drain(..) {
            match nf.process(pkt.data_mut()) {
                Verdict::Tx if reply => th.reply(pkt),
                Verdict::Tx | Verdict::Pass if th.out_links() > 0 => th.send(pkt, 0),
                Verdict::Tx => th.reply(pkt),
                Verdict::Pass | Verdict::Drop => th.drop_packet(pkt),
            }
        }
        for (i, &v) in nf.counters().iter().enumerate() {
            th.set_nf_counter(i, v);
        }
    }
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
/// frames without an IPv4 5-tuple are dropped (counted `drop_nf`).
fn maglev(mut th: NfThread, table: &LookupTable) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for pkt in burst.drain(..) {
            let hop = ferry_wire::five_tuple(pkt.data())
                .and_then(|t| table.lookup(flow_hash(t.src_ip, t.dst_ip, t.proto.ip_proto(), t.src_port, t.dst_port)));
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
        let off = stamp_offset(L4Proto::Udp);
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
    let off = stamp_offset(L4Proto::Udp);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_nfs_are_name_kind_and_arguments() {
        let nf = |spec: &str| hosted_nf(spec).unwrap();
        assert_eq!(
            nf("src=source:rate=1000,size=64"),
            ("src".into(), "source".into(), vec!["rate=1000".into(), "size=64".into()])
        );
        assert_eq!(nf("nf1=fwd"), ("nf1".into(), "fwd".into(), vec![]));
        assert_eq!(nf("nf1=fwd:"), ("nf1".into(), "fwd".into(), vec![]));
        for bad in ["fwd", "=fwd", "nf1="] {
            assert!(hosted_nf(bad).is_err(), "{bad}");
        }
    }
}
