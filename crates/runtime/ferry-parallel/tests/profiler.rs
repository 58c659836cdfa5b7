//! The scalability profiler on small synthetic NFs, one per root cause of
//! NFOS Tables 3-5: each NF runs on 2 workers, the profile must name the
//! cause, the recipe and the NF line, and applying the recipe (with the
//! profiler's own suggested value where it gives one) must lower the abort
//! rate. These NFs are stand-ins for the real NAT, bridge and anti-DDoS.
//!
//! Free-running workers conflict only when the OS happens to run their
//! transactions at the same time, so shares and rates would depend on the
//! machine's load. Every run here is a lockstep run (`run_trace_lockstep`):
//! the two workers' attempts overlap pairwise in a fixed order, so each
//! run's aborts, and so every figure asserted on, are the same on every
//! machine under any load.
#![cfg(not(loom))]

use std::net::Ipv4Addr;

use ferry_parallel::ds::{Allocator, AllocatorConfig, DefaultBucketHash, DistributedObj, Map, Vector};
use ferry_parallel::packet_set::{Field, PacketSetDef, PortRule};
use ferry_parallel::profiler::{Profile, Profiler, Recipe, RootCause, StructureConfig, IMBALANCE_THRESHOLD};
use ferry_parallel::runtime::{
    run_trace_lockstep, worker_of, Ctx, NewSet, Packet, ParallelNf, TraceConfig, TraceReport,
};
use ferry_parallel::stm::{Abort, Stm};
use ferry_wire::{build_frame, five_tuple, FiveTuple, FrameSpec, L4Proto};

const WORKERS: usize = 2;
/// Packets 100 ns apart in packet time.
const SPACING_NS: u64 = 100;
/// Aborts a contended run must show to be ranked.
const MIN_ABORTS: u64 = 10;

const THIS_FILE: &str = include_str!("profiler.rs");

/// The text of line `line` of this file (to check the profiler names the
/// line of the data-structure call).
fn source_line(line: u32) -> &'static str {
    THIS_FILE.lines().nth(line as usize - 1).unwrap_or("")
}

// ---------------------------------------------------------------- traffic

fn udp_flows() -> PacketSetDef {
    let fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort];
    PacketSetDef::new(vec![PortRule { port: 0, protocol: Some(L4Proto::Udp), fields, symmetric: false }]).unwrap()
}

fn config(packet_sets: PacketSetDef) -> TraceConfig {
    TraceConfig { workers: WORKERS, batch_size: 32, ports: 2, periodic_ns: None, packet_sets }
}

fn tuple(flow: usize) -> FiveTuple {
    FiveTuple {
        src_ip: Ipv4Addr::new(10, (flow >> 16) as u8, (flow >> 8) as u8, flow as u8).into(),
        dst_ip: Ipv4Addr::new(192, 168, 0, 1).into(),
        src_port: 1024 + (flow % 60000) as u16,
        dst_port: 53,
        proto: L4Proto::Udp,
    }
}

fn frame(src_mac: [u8; 6], tuple: &FiveTuple) -> Vec<u8> {
    let spec = FrameSpec { src_mac, dst_mac: [2, 0, 0, 0, 0, 0xff], frame_len: 64 };
    let mut buf = vec![0u8; 64];
    build_frame(&spec, tuple, None, &mut buf).unwrap();
    buf
}

fn mac(host: usize) -> [u8; 6] {
    [2, 0, 0, 0, (host >> 8) as u8, host as u8]
}

/// `flows` UDP flows of `per_flow` packets, `window` of them interleaved
/// round-robin at a time (a finished flow's slot goes to the next flow), so
/// a new flow starts every `per_flow` packets on average.
fn flow_trace(flows: usize, per_flow: u32, window: usize) -> Vec<Packet> {
    let mut active: Vec<(usize, u32)> = (0..window.min(flows)).map(|f| (f, per_flow)).collect();
    let mut next_flow = active.len();
    let mut trace = Vec::with_capacity(flows * per_flow as usize);
    let mut slot = 0;
    while !active.is_empty() {
        slot %= active.len();
        let (flow, left) = &mut active[slot];
        let t = trace.len() as u64 * SPACING_NS;
        trace.push(Packet::new(0, t, frame(mac(1), &tuple(*flow))));
        *left -= 1;
        if *left == 0 {
            if next_flow < flows {
                active[slot] = (next_flow, per_flow);
                next_flow += 1;
            } else {
                active.swap_remove(slot);
            }
        }
        slot += 1;
    }
    trace
}

/// Like [`flow_trace`], but worker 0 (by the runtime's own dispatch)
/// gets flows of 2 packets and worker 1 flows of 6, each half of the
/// packets: worker 0 starts new flows three times as often.
fn skewed_trace(packets: usize) -> Vec<Packet> {
    let sets = udp_flows();
    let worker = |flow: usize| worker_of(&sets.classify(0, &frame(mac(1), &tuple(flow))).unwrap(), WORKERS);
    let mut cursor = [0usize; WORKERS];
    let mut next_flow_of = |w: usize| {
        while worker(cursor[w]) != w {
            cursor[w] += 1;
        }
        cursor[w] += 1;
        cursor[w] - 1
    };
    const PER_FLOW: [u32; WORKERS] = [2, 6];
    let mut active: Vec<Vec<(usize, u32)>> =
        (0..WORKERS).map(|w| (0..32).map(|_| (next_flow_of(w), PER_FLOW[w])).collect()).collect();
    let mut slots = [0usize; WORKERS];
    let mut trace = Vec::with_capacity(packets);
    while trace.len() < packets {
        let w = trace.len() % WORKERS;
        let slot = slots[w] % active[w].len();
        slots[w] = slot + 1;
        let (flow, left) = &mut active[w][slot];
        trace.push(Packet::new(0, trace.len() as u64 * SPACING_NS, frame(mac(1), &tuple(*flow))));
        *left -= 1;
        if *left == 0 {
            active[w][slot] = (next_flow_of(w), PER_FLOW[w]);
        }
    }
    trace
}

/// A finished run and the profiler for its engine.
type Run = (TraceReport, Profiler);

fn profile_of((report, profiler): Run) -> Profile {
    profiler.profile(&report)
}

/// Profiles a contended NF's run, which must show enough aborts to rank.
fn contended_profile(run: Run) -> Profile {
    let profile = profile_of(run);
    assert!(profile.summary.aborts >= MIN_ABORTS, "no contention:\n{profile}");
    profile
}

/// Checks what every contended profile must say: the top cause, its main
/// recipe, that the explanation names the structure, and that the top
/// line is a call of `call` in this file.
fn assert_top(profile: &Profile, structure: &str, cause: RootCause, recipe: Recipe, call: &str) {
    let text = profile.to_string();
    eprintln!("{text}");
    let root = profile.top_root_cause().expect("a contended run has causes");
    assert_eq!((root.cause, root.structure.name.as_str()), (cause, structure), "{text}");
    assert_eq!(root.recipes[0], recipe, "{text}");
    assert!(root.share > 0.5, "the cause explains most aborts: {text}");
    assert!(profile.headline.contains(&root.summary), "{}", profile.headline);
    // Its most frequent operation pair.
    let top = profile.top_cause().unwrap();
    assert_eq!((top.cause, top.structure.name.as_str()), (cause, structure), "{text}");
    assert!(top.explanation.contains(&format!("`{structure}`")), "{}", top.explanation);
    assert!(top.explanation.contains(recipe.text()), "{}", top.explanation);
    assert!(text.contains(cause.name()) && text.contains(recipe.text()), "{text}");
    assert!(text.contains(&top.explanation) || text.contains(&top.detail), "{text}");
    let line = &profile.lines[0];
    assert!(line.line.file.ends_with("tests/profiler.rs"), "{:?}", line.line);
    assert!(source_line(line.line.line).contains(call), "line {} is `{}`", line.line.line, source_line(line.line.line));
    assert!(top.explanation.contains(&format!("profiler.rs:{}", top.first.line.line)), "{}", top.explanation);
    // The JSON says the same.
    let json: serde_json::Value = serde_json::from_str(&profile.to_json()).unwrap();
    assert_eq!(json["causes"][0]["cause"], cause.name());
    assert_eq!(json["causes"][0]["recipes"][0], recipe.name());
    assert_eq!(json["causes"][0]["structure"]["name"], structure);
    assert_eq!(json["summary"]["aborts"], profile.summary.aborts);
    let back: Profile = serde_json::from_str(&profile.to_json()).unwrap();
    assert_eq!(back.causes.len(), profile.causes.len());
}

// ------------------------------------------- Allocator: pool exhaustion

/// A NAT-like NF: each new flow leases a public port from a pool shared by
/// all flows and counts the translation (or the drop) in a DistributedObj;
/// the periodic handler expires leases older than `lease_ns`.
struct PortPool {
    ports: Allocator,
    /// (translated, dropped). Updates go to per-core parts: never a
    /// conflict, but they make every new flow's transaction a writer.
    counts: DistributedObj<(u64, u64)>,
}

impl ParallelNf for PortPool {
    type SetState = Option<u32>;

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<Self::SetState>>, Abort> {
        let port = self.ports.allocate(ctx.tx())?;
        if port.is_some() {
            self.counts.update(ctx.tx(), |c| c.0 += 1)?;
            ctx.send(packet, 1);
        } else {
            self.counts.update(ctx.tx(), |c| c.1 += 1)?;
        }
        Ok(Some(NewSet { state: port, idle_timeout_ns: 1_000_000 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, port: &mut Option<u32>, packet: &mut Packet) -> Result<(), Abort> {
        if port.is_some() {
            ctx.send(packet, 1);
        }
        Ok(())
    }

    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        let mut expired = Vec::new();
        self.ports.expire(ctx.tx(), 64, &mut expired)?;
        Ok(())
    }
}

fn run_port_pool(capacity: u32, trace: &[Packet]) -> Run {
    let stm = Stm::new(WORKERS).unwrap();
    let ports = AllocatorConfig { capacity, lease_ns: 5_000, refresh_interval_ns: 0 };
    let sum = |acc: &mut (u64, u64), part: &(u64, u64)| {
        acc.0 += part.0;
        acc.1 += part.1;
    };
    let nf = PortPool {
        ports: Allocator::new(&stm, "nat_ports", ports).unwrap(),
        counts: DistributedObj::new(&stm, "nat_counts", (0, 0), sum, 0),
    };
    let config = TraceConfig { periodic_ns: Some(5_000), ..config(udp_flows()) };
    let report = run_trace_lockstep(&stm, &nf, &config, trace.iter().cloned()).unwrap();
    (report, Profiler::new(&stm).with(&nf.ports).with(&nf.counts))
}

#[test]
fn scarce_pool_is_reported_and_overprovisioning_removes_the_conflicts() {
    // A port is held for 5 µs plus up to 5 µs until the periodic expiry.
    // Worker 0 starts a flow every 400 ns (12 to 25 ports in use), worker
    // 1 every 1.2 µs (4 to 9): with 20 ports, 10 per core, worker 0's pool
    // runs dry and it takes from worker 1's.
    let trace = skewed_trace(16_000);
    let scarce = contended_profile(run_port_pool(20, &trace));
    assert_top(&scarce, "nat_ports", RootCause::AllocatorPoolExhausted, Recipe::OverprovisionResource, ".allocate(");
    let top = scarce.top_cause().unwrap();
    assert!(top.explanation.contains("capacity 20 = 10 per core on 2 cores"), "{}", top.explanation);
    assert_eq!(top.first.op, "Allocator::allocate");
    assert!(scarce.share_of(RootCause::AllocatorPoolExhausted) > 0.9);

    // Follow the profiler: apply its suggested capacity and profile again
    // while the cause stays (NFOS's NAT: 53 -> 55 public IPs).
    let mut capacity = 20;
    let mut profile = scarce.clone();
    for _ in 0..6 {
        let Some(top) = profile.top_cause().filter(|c| c.cause == RootCause::AllocatorPoolExhausted) else { break };
        let suggestion = top.suggestion.as_ref().expect("the allocator's configuration was given");
        assert_eq!((suggestion.parameter.as_str(), suggestion.current), ("capacity", u64::from(capacity)));
        assert!(suggestion.suggested > suggestion.current);
        capacity = suggestion.suggested as u32;
        profile = profile_of(run_port_pool(capacity, &trace));
        eprintln!("capacity {capacity}: abort rate {:.2}%", profile.summary.abort_rate * 100.0);
    }
    assert!(capacity > 20);
    assert!(profile.summary.abort_rate < scarce.summary.abort_rate);
    // A generous pool: no core ever steals, so nothing is shared at all.
    let generous = profile_of(run_port_pool(4096, &trace));
    assert_eq!(generous.summary.aborts, 0, "{generous}");
    assert!(generous.causes.is_empty());
}

// ------------------------------------- Allocator: refresh on every packet

/// A bridge-like NF: a MAC table (Map) of leases (Allocator), learnt at
/// init; every packet refreshes its source MAC's lease, and the periodic
/// handler expires old leases. No packet sets: packets go to both cores round-robin, as a
/// bridge's do.
struct Learner {
    macs: Map<[u8; 6], u32>,
    leases: Allocator,
}

const HOSTS: usize = 16;

impl ParallelNf for Learner {
    type SetState = ();

    fn init<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        for host in 0..HOSTS {
            let lease = self.leases.allocate(ctx.tx())?.expect("capacity for every host");
            self.macs.set(ctx.tx(), mac(host), lease)?;
        }
        Ok(())
    }

    fn first_packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
        unreachable!("no packet sets")
    }

    fn packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _state: &mut (), _packet: &mut Packet) -> Result<(), Abort> {
        unreachable!("no packet sets")
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        let src: [u8; 6] = packet.data()[6..12].try_into().unwrap();
        if let Some(lease) = self.macs.get(ctx.tx(), &src)? {
            self.leases.refresh(ctx.tx(), lease)?;
        }
        ctx.flood(packet);
        Ok(())
    }

    /// Forgets hosts not heard from for a lease (none, in these traces).
    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        let mut expired = Vec::new();
        self.leases.expire(ctx.tx(), 64, &mut expired)?;
        Ok(())
    }
}

fn mac_trace(packets: usize) -> Vec<Packet> {
    (0..packets).map(|i| Packet::new(0, i as u64 * SPACING_NS, frame(mac(i % HOSTS), &tuple(i % HOSTS)))).collect()
}

fn run_learner(refresh_interval_ns: u64, trace: &[Packet]) -> Run {
    let stm = Stm::new(WORKERS).unwrap();
    let leases = AllocatorConfig { capacity: 64, lease_ns: 1_000_000_000, refresh_interval_ns };
    let nf = Learner {
        macs: Map::new(&stm, "mac_table", 64, DefaultBucketHash).unwrap(),
        leases: Allocator::new(&stm, "mac_leases", leases).unwrap(),
    };
    let config = TraceConfig { periodic_ns: Some(1_000), ..config(PacketSetDef::none()) };
    let report = run_trace_lockstep(&stm, &nf, &config, trace.iter().cloned()).unwrap();
    (report, Profiler::new(&stm).with(&nf.macs).with(&nf.leases))
}

#[test]
fn refresh_on_every_packet_is_reported_and_a_refresh_interval_removes_the_conflicts() {
    let trace = mac_trace(20_000);
    let every_packet = contended_profile(run_learner(0, &trace));
    assert_top(
        &every_packet,
        "mac_leases",
        RootCause::AllocatorLeaseListRefresh,
        Recipe::RaiseRefreshInterval,
        ".refresh(",
    );
    let top = every_packet.top_cause().unwrap();
    assert!(top.explanation.contains("refresh interval 0"), "{}", top.explanation);
    assert!(top.explanation.contains("refresh at profiler.rs:"), "{}", top.explanation);
    assert!(every_packet.share_of(RootCause::AllocatorLeaseListRefresh) > 0.9);
    // Refresh against refresh, and (less often: a write that finds its
    // read overwritten is blamed on the write) the periodic expire.
    assert!(every_packet.causes.iter().all(|c| c.cause == RootCause::AllocatorLeaseListRefresh), "{every_packet}");

    // The suggested interval: a hundredth of the 1 s lease (NFOS's bridge:
    // 1 s for 2-minute entries).
    let suggestion = top.suggestion.clone().unwrap();
    assert_eq!(
        (suggestion.parameter.as_str(), suggestion.current, suggestion.suggested),
        ("refresh_interval_ns", 0, 10_000_000)
    );
    let relaxed = profile_of(run_learner(suggestion.suggested, &trace));
    eprintln!("{relaxed}");
    assert_eq!(relaxed.summary.aborts, 0, "refreshes within the interval only read");
    assert!(relaxed.summary.abort_rate < every_packet.summary.abort_rate);
}

// ---------------------------------------- DistributedObj: staleness 0

/// An anti-DDoS-like NF: global flow counters (flows, one-packet flows) in
/// a DistributedObj, updated and read by every new flow.
struct FlowCounters {
    counters: DistributedObj<(i64, i64)>,
}

impl ParallelNf for FlowCounters {
    type SetState = bool;

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<bool>>, Abort> {
        self.counters.update(ctx.tx(), |(flows, one_packet)| {
            *flows += 1;
            *one_packet += 1;
        })?;
        let (flows, one_packet) = self.counters.read(ctx.tx())?;
        if 10 * one_packet <= 8 * flows {
            ctx.send(packet, 1);
        }
        Ok(Some(NewSet { state: true, idle_timeout_ns: 1_000_000 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, one_packet: &mut bool, packet: &mut Packet) -> Result<(), Abort> {
        if std::mem::replace(one_packet, false) {
            self.counters.update(ctx.tx(), |(_, one_packet)| *one_packet -= 1)?;
        }
        ctx.send(packet, 1);
        Ok(())
    }
}

fn run_flow_counters(max_staleness_ns: u64, trace: &[Packet]) -> Run {
    let stm = Stm::new(WORKERS).unwrap();
    let merge = |acc: &mut (i64, i64), part: &(i64, i64)| {
        acc.0 += part.0;
        acc.1 += part.1;
    };
    let nf = FlowCounters { counters: DistributedObj::new(&stm, "flow_counters", (0, 0), merge, max_staleness_ns) };
    let report = run_trace_lockstep(&stm, &nf, &config(udp_flows()), trace.iter().cloned()).unwrap();
    (report, Profiler::new(&stm).with(&nf.counters))
}

#[test]
fn zero_staleness_is_reported_and_allowing_staleness_lowers_the_abort_rate() {
    // Many short flows: a counter read on every other packet.
    let trace = flow_trace(10_000, 2, 64);
    let fresh = contended_profile(run_flow_counters(0, &trace));
    assert_top(&fresh, "flow_counters", RootCause::DistributedStaleRead, Recipe::RaiseStaleness, ".read(");
    let top = fresh.top_cause().unwrap();
    assert!(top.explanation.contains("max staleness 0"), "{}", top.explanation);
    assert_eq!(top.first.op, "DistributedObj::read");
    assert_eq!(top.second.as_ref().unwrap().op, "DistributedObj::update");
    assert!(fresh.share_of(RootCause::DistributedStaleRead) > 0.99);

    // NFOS's anti-DDoS recipe: 0 -> 0.1 ms.
    let suggestion = top.suggestion.clone().unwrap();
    assert_eq!((suggestion.parameter.as_str(), suggestion.suggested), ("max_staleness_ns", 100_000));
    let stale = profile_of(run_flow_counters(suggestion.suggested, &trace));
    assert!(
        stale.summary.abort_rate < fresh.summary.abort_rate / 2.0,
        "staleness 0: {:.3}, 0.1 ms: {:.3}",
        fresh.summary.abort_rate,
        stale.summary.abort_rate
    );
}

// ------------------------------------------------ Map: crowded buckets

/// Counts packets per source address in a Map; each flow's key is its
/// own, so only a shared bucket makes flows on two cores conflict.
struct SourceCounter {
    per_source: Map<std::net::IpAddr, u64>,
}

impl SourceCounter {
    fn count<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &Packet) -> Result<(), Abort> {
        let source = five_tuple(packet.data()).expect("UDP").src_ip;
        let seen = self.per_source.get(ctx.tx(), &source)?.unwrap_or(0);
        self.per_source.set(ctx.tx(), source, seen + 1)?;
        Ok(())
    }
}

impl ParallelNf for SourceCounter {
    type SetState = ();

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
        self.count(ctx, packet)?;
        Ok(Some(NewSet { state: (), idle_timeout_ns: 1_000_000 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &mut (), packet: &mut Packet) -> Result<(), Abort> {
        self.count(ctx, packet)
    }
}

fn run_source_counter(buckets: usize, trace: &[Packet]) -> Run {
    let stm = Stm::new(WORKERS).unwrap();
    let mut nf = SourceCounter { per_source: Map::new(&stm, "per_source", buckets, DefaultBucketHash).unwrap() };
    let report = run_trace_lockstep(&stm, &nf, &config(udp_flows()), trace.iter().cloned()).unwrap();
    let profiler = Profiler::new(&stm).with_map_contents(&mut nf.per_source);
    (report, profiler)
}

#[test]
fn a_crowded_map_is_reported_and_more_buckets_lower_the_abort_rate() {
    // 256 flows of 80 packets, all interleaved: 256 keys.
    let trace = flow_trace(256, 80, 256);
    let crowded = contended_profile(run_source_counter(1, &trace));
    assert_top(&crowded, "per_source", RootCause::MapSameBucket, Recipe::EnlargeMapOrChangeHash, "per_source.");
    let top = crowded.top_cause().unwrap();
    assert!(top.explanation.contains("1 bucket, 256 keys, longest bucket 256"), "{}", top.explanation);
    assert_eq!(crowded.share_of(RootCause::MapSameKey), 0.0, "keys belong to one flow, hence one core");
    assert!(crowded
        .causes
        .iter()
        .all(|c| c.structure.config
            == Some(StructureConfig::Map { buckets: 1, keys: Some(256), longest_bucket: Some(256) })));

    let suggestion = top.suggestion.clone().unwrap();
    assert_eq!((suggestion.parameter.as_str(), suggestion.current, suggestion.suggested), ("buckets", 1, 16_384));
    let spread = profile_of(run_source_counter(suggestion.suggested as usize, &trace));
    assert!(
        spread.summary.abort_rate < crowded.summary.abort_rate / 2.0,
        "1 bucket: {:.3}, {} buckets: {:.3}",
        crowded.summary.abort_rate,
        suggestion.suggested,
        spread.summary.abort_rate
    );
}

// ------------------------------------------------------ load imbalance

#[test]
fn one_heavy_set_is_reported_as_load_imbalance() {
    let one_flow: Vec<Packet> = (0..2_000).map(|i| Packet::new(0, i * SPACING_NS, frame(mac(1), &tuple(7)))).collect();
    let (report, profiler) = run_source_counter(1024, &one_flow);
    let profile = profiler.profile(&report);
    eprintln!("{profile}");
    let load = profile.load.as_ref().unwrap();
    assert_eq!(load.imbalance, 2.0, "every packet on one of two cores");
    assert_eq!(load.imbalance, report.load_imbalance());
    assert_eq!(load.max_packets, 2_000);
    assert_eq!(load.mean_packets, 1_000.0);
    assert_eq!(load.workers.iter().map(|w| w.packets).sum::<u64>(), 2_000);
    let advice = load.advice.as_ref().expect("above the threshold");
    assert!(advice.contains("finer-grained packet sets"), "{advice}");
    assert!(profile.to_string().contains("IMBALANCED"));
    assert_eq!(profile.summary.aborts, 0);
    assert!(profile.headline.contains("not a bottleneck"), "{}", profile.headline);

    let balanced = profile_of(run_source_counter(1024, &flow_trace(512, 4, 64)));
    let load = balanced.load.as_ref().unwrap();
    assert!(load.imbalance < IMBALANCE_THRESHOLD, "{balanced}");
    assert!(load.advice.is_none());
    assert!(balanced.to_string().contains("balanced"));
}

// ------------------- deterministic pairs: one transaction inside another

#[test]
fn same_key_conflicts_get_the_distributed_obj_recipe() {
    let stm = Stm::new(2).unwrap();
    let map: Map<u32, u64> = Map::new(&stm, "hot_entry", 64, DefaultBucketHash).unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result = a.try_once(0, |tx| {
        map.set(tx, 7, 1)?;
        b.atomically(0, |btx| map.set(btx, 7, 2).map(drop));
        Ok(())
    });
    assert!(result.is_err());
    let profile = Profiler::new(&stm).with(&map).profile_stats([a.stats(), b.stats()]);
    eprintln!("{profile}");
    assert_eq!(profile.summary.aborts, 1);
    assert!(profile.load.is_none());
    let top = profile.top_cause().unwrap();
    assert_eq!(top.cause, RootCause::MapSameKey);
    assert_eq!(top.recipes, vec![Recipe::UseDistributedObj]);
    assert!(top.suggestion.is_none());
    assert!(source_line(top.first.line.line).contains("map.set(tx, 7, 1)"));
    assert!(source_line(top.second.as_ref().unwrap().line.line).contains("map.set(btx, 7, 2)"));
    assert_eq!(profile.lines[0].aborted, 1);
}

#[test]
fn a_lease_freed_on_another_core_is_a_remote_free() {
    let stm = Stm::new(2).unwrap();
    let pool =
        Allocator::new(&stm, "sessions", AllocatorConfig { capacity: 8, lease_ns: 1_000, refresh_interval_ns: 0 })
            .unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    // Two leases on worker 0's lease list.
    let (x, y) = a.atomically(0, |tx| Ok((pool.allocate(tx)?.unwrap(), pool.allocate(tx)?.unwrap())));
    // Worker 1 frees one while worker 0 frees the other: both unlink from
    // worker 0's list.
    let result = b.try_once(0, |tx| {
        pool.free(tx, x)?;
        a.atomically(0, |atx| pool.free(atx, y).map(drop));
        Ok(())
    });
    assert!(result.is_err());
    let profile = Profiler::new(&stm).with(&pool).profile_stats([a.stats(), b.stats()]);
    eprintln!("{profile}");
    let top = profile.top_cause().unwrap();
    assert_eq!(top.cause, RootCause::AllocatorRemoteFree);
    assert_eq!(top.recipes, vec![Recipe::FreeOnAllocatingCore]);
    assert!(top.explanation.contains("free at profiler.rs:"), "{}", top.explanation);
}

#[test]
fn a_lease_query_is_not_counted_as_a_refresh() {
    let stm = Stm::new(2).unwrap();
    let config = AllocatorConfig { capacity: 4, lease_ns: 1_000, refresh_interval_ns: 0 };
    let ports = Allocator::new(&stm, "ports", config).unwrap();
    let mark = DistributedObj::new(&stm, "mark", 0u64, |acc: &mut u64, part: &u64| *acc += part, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let leased = b.atomically(0, |tx| pool_index(ports.allocate(tx)));
    // Worker 0 checks the lease (as a NAT checks a port on the way back)
    // and writes something; meanwhile worker 1 allocates, which links the
    // new lease next to the one worker 0 read.
    let result = a.try_once(10, |tx| {
        ports.lease_expiry(tx, leased)?;
        b.atomically(10, |btx| ports.allocate(btx));
        mark.update(tx, |m| *m += 1)
    });
    assert!(result.is_err());
    let profile = Profiler::new(&stm).with(&ports).profile_stats([a.stats(), b.stats()]);
    eprintln!("{profile}");
    let top = profile.top_cause().unwrap();
    assert_eq!(top.cause, RootCause::AllocatorLeaseRead, "{profile}");
    assert_eq!(top.recipes, vec![Recipe::ReduceSharing]);
    assert_eq!(
        (top.first.op.as_str(), top.second.as_ref().map(|s| s.op.as_str())),
        ("Allocator::lease_expiry", Some("Allocator::allocate"))
    );
    assert_eq!(top.elements.keys().collect::<Vec<_>>(), vec!["slot"]);
    assert!(!profile.to_string().contains("refresh interval ("), "{profile}");
}

fn pool_index(allocated: Result<Option<u32>, Abort>) -> Result<u32, Abort> {
    allocated.map(|index| index.expect("a free index"))
}

#[test]
fn a_free_refilling_a_pool_a_thief_takes_from_is_pool_exhaustion() {
    let stm = Stm::new(2).unwrap();
    let config = AllocatorConfig { capacity: 4, lease_ns: 1_000, refresh_interval_ns: 0 };
    let ports = Allocator::new(&stm, "ports", config).unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    // Worker 0's pool runs dry; worker 1 holds one of its own.
    for _ in 0..2 {
        a.atomically(0, |tx| pool_index(ports.allocate(tx)));
    }
    let held = b.atomically(0, |tx| pool_index(ports.allocate(tx)));
    // Worker 0 steals from worker 1's pool while worker 1 frees into it.
    let result = a.try_once(10, |tx| {
        ports.allocate(tx)?;
        b.atomically(10, |btx| ports.free(btx, held));
        Ok(())
    });
    assert!(result.is_err());
    let profile = Profiler::new(&stm).with(&ports).profile_stats([a.stats(), b.stats()]);
    eprintln!("{profile}");
    let top = profile.top_cause().unwrap();
    // The object was a free pool, so not "a dry pool, or a remote free".
    assert_eq!(top.cause, RootCause::AllocatorPoolExhausted, "{profile}");
    assert_eq!(top.recipes, vec![Recipe::OverprovisionResource]);
    assert_eq!(top.elements.keys().collect::<Vec<_>>(), vec!["free pool"]);
    assert!(profile.to_string().contains("on:     free pool 1"), "{profile}");
}

#[test]
fn a_hot_vector_element_gets_the_distributed_obj_recipe() {
    let stm = Stm::new(2).unwrap();
    let v = Vector::new(&stm, "totals", 4, |_| 0u64).unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result = a.try_once(0, |tx| {
        v.update(tx, 0, |n| *n += 1)?;
        b.atomically(0, |btx| v.update(btx, 0, |n| *n += 1));
        Ok(())
    });
    assert!(result.is_err());
    let profile = Profiler::new(&stm).with(&v).profile_stats([a.stats(), b.stats()]);
    let top = profile.top_cause().unwrap();
    assert_eq!(top.cause, RootCause::VectorSameElement);
    assert_eq!(top.recipes, vec![Recipe::UseDistributedObj]);
    assert_eq!(top.structure.config, Some(StructureConfig::Vector { len: 4 }));
    let json = profile.to_json();
    eprintln!("{json}");
    assert!(json.contains("\"vector_same_element\""));
}

#[test]
fn an_idle_profile_says_so() {
    let stm = Stm::new(2).unwrap();
    let profile = Profiler::new(&stm).profile_stats([]);
    assert_eq!(profile.summary.attempts, 0);
    assert_eq!(profile.headline, "no transactions ran");
    assert!(profile.causes.is_empty() && profile.lines.is_empty());
    let _ = profile.to_string();
}
