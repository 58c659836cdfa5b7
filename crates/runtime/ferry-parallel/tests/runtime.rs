//! The trace-driven runtime: a sequential NF gives the same result on 1, 2
//! and 3 workers, and the handlers fire when the model says they do.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use ferry_parallel::ds::{DefaultBucketHash, Map};
use ferry_parallel::packet_set::{Field, PacketSetDef, PortRule};
use ferry_parallel::runtime::{
    run_control_presplit, run_trace, run_trace_presplit, ControlWork, Ctx, NewSet, OutputMode, Packet, ParallelNf,
    RuntimeError, TraceConfig, TraceReport,
};
use ferry_parallel::stm::{Abort, Stm, StructureKind, TObj};
use ferry_wire::{build_frame, five_tuple, FiveTuple, FrameSpec, L4Proto};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ORPHAN_KEY: [u8; 4] = [0; 4];

/// The traces here are IPv4: an address's four bytes.
fn octets(a: IpAddr) -> [u8; 4] {
    let IpAddr::V4(v4) = a else { unreachable!("IPv4 traces") };
    v4.octets()
}

/// Counts packets per destination address in a Map (aggregate state) and
/// numbers each flow's packets in its set state, writing the number into
/// the packet's last four bytes before forwarding it out of port 1.
struct PerDestinationCounter {
    per_destination: Map<[u8; 4], u64>,
}

impl PerDestinationCounter {
    fn new(stm: &Stm) -> PerDestinationCounter {
        // Few buckets: destinations share them, so workers do conflict.
        PerDestinationCounter { per_destination: Map::new(stm, "per_destination", 4, DefaultBucketHash).unwrap() }
    }

    fn count<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, destination: [u8; 4]) -> Result<(), Abort> {
        let seen = self.per_destination.get(ctx.tx(), &destination)?.unwrap_or(0);
        self.per_destination.set(ctx.tx(), destination, seen + 1)?;
        Ok(())
    }

    fn forward(ctx: &mut Ctx<'_, '_>, packet: &mut Packet, ordinal: u32) {
        let data = packet.data_mut();
        let at = data.len() - 4;
        data[at..].copy_from_slice(&ordinal.to_be_bytes());
        ctx.send(packet, 1);
    }
}

impl ParallelNf for PerDestinationCounter {
    type SetState = u32;

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<u32>>, Abort> {
        let tuple = five_tuple(packet.data()).expect("sets are UDP flows");
        self.count(ctx, octets(tuple.dst_ip))?;
        Self::forward(ctx, packet, 1);
        Ok(Some(NewSet { state: 1, idle_timeout_ns: u64::MAX / 2 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, ordinal: &mut u32, packet: &mut Packet) -> Result<(), Abort> {
        let tuple = five_tuple(packet.data()).expect("sets are UDP flows");
        self.count(ctx, octets(tuple.dst_ip))?;
        *ordinal += 1;
        Self::forward(ctx, packet, *ordinal);
        Ok(())
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        self.count(ctx, ORPHAN_KEY)?;
        Self::forward(ctx, packet, 0);
        Ok(())
    }
}

fn udp_flows_on_port_0() -> PacketSetDef {
    let fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort];
    PacketSetDef::new(vec![PortRule { port: 0, protocol: Some(L4Proto::Udp), fields, symmetric: false }]).unwrap()
}

fn frame(tuple: &FiveTuple) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
    let mut buf = vec![0u8; 64];
    build_frame(&spec, tuple, None, &mut buf).unwrap();
    buf
}

/// `flows` UDP flows of 1..=40 packets to 6 destinations, interleaved at
/// random, plus a TCP packet (an orphan) every 10 packets; 1 µs apart.
fn generated_trace(seed: u64, flows: usize) -> Vec<Packet> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut remaining: Vec<(FiveTuple, u32)> = (0..flows)
        .map(|i| {
            let tuple = FiveTuple {
                src_ip: Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250) as u8 + 1).into(),
                dst_ip: Ipv4Addr::new(192, 168, 0, rng.gen_range(1..=6)).into(),
                src_port: rng.gen_range(1024..65535),
                dst_port: 53,
                proto: L4Proto::Udp,
            };
            (tuple, rng.gen_range(1..=40))
        })
        .collect();
    let mut trace = Vec::new();
    while !remaining.is_empty() {
        let i = rng.gen_range(0..remaining.len());
        let t = trace.len() as u64 * 1_000;
        trace.push(Packet::new(0, t, frame(&remaining[i].0)));
        remaining[i].1 -= 1;
        if remaining[i].1 == 0 {
            remaining.swap_remove(i);
        }
        if trace.len() % 10 == 0 {
            let tcp = FiveTuple { proto: L4Proto::Tcp, ..remaining.first().map(|r| r.0).unwrap_or(FIVE_TUPLE) };
            trace.push(Packet::new(0, t + 500, frame(&tcp)));
        }
    }
    trace
}

const FIVE_TUPLE: FiveTuple = FiveTuple {
    src_ip: IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)),
    dst_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    src_port: 1,
    dst_port: 2,
    proto: L4Proto::Tcp,
};

/// A run's outcome: the per-destination counts and the output, both
/// sorted, and the report.
struct Outcome {
    counts: Vec<([u8; 4], u64)>,
    outputs: Vec<Vec<u8>>,
    report: TraceReport,
}

fn run(workers: usize, trace: &[Packet]) -> Outcome {
    let stm = Stm::new(workers).unwrap();
    let mut nf = PerDestinationCounter::new(&stm);
    let config =
        TraceConfig { workers, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: udp_flows_on_port_0() };
    let report = run_trace(&stm, &nf, &config, trace.iter().cloned()).unwrap();
    let mut counts = nf.per_destination.entries_mut();
    counts.sort();
    let mut outputs: Vec<Vec<u8>> = report.all_outputs().map(|o| o.data.clone()).collect();
    outputs.sort();
    Outcome { counts, outputs, report }
}

#[test]
fn parallel_runs_equal_the_sequential_run() {
    let trace = generated_trace(7, 400);
    let mut expected: HashMap<[u8; 4], u64> = HashMap::new();
    for packet in &trace {
        let tuple = five_tuple(packet.data()).unwrap();
        let key = if tuple.proto == L4Proto::Udp { octets(tuple.dst_ip) } else { ORPHAN_KEY };
        *expected.entry(key).or_insert(0) += 1;
    }
    let mut expected: Vec<_> = expected.into_iter().collect();
    expected.sort();

    let sequential = run(1, &trace);
    assert_eq!(sequential.counts, expected);
    assert_eq!(sequential.outputs.len(), trace.len());
    assert_eq!(sequential.report.total_stats().aborts, 0, "one worker never conflicts");

    for workers in [2, 3] {
        let Outcome { counts, outputs, report } = run(workers, &trace);
        assert_eq!(counts, sequential.counts, "{workers} workers: aggregate state differs");
        // Same packets with the same per-flow ordinals: every set was
        // handled in order on one worker, and aborted batches rolled back.
        assert_eq!(outputs, sequential.outputs, "{workers} workers: output differs");
        assert!(report.workers.iter().all(|w| w.packets > 0), "{workers} workers: idle worker");
        assert_eq!(report.workers.iter().map(|w| w.packets).sum::<u64>(), trace.len() as u64);
        let stats = report.total_stats();
        eprintln!(
            "{workers} workers: {} packets, {} commits, {} aborts, load imbalance {:.2}",
            trace.len(),
            stats.commits,
            stats.aborts,
            report.load_imbalance()
        );
    }
}

/// The benchmark's way to run (trace split beforehand, output counted, not
/// kept) computes what the dispatcher's way does.
#[test]
fn presplit_runs_count_the_output_they_do_not_keep() {
    let trace = generated_trace(11, 300);
    let sequential = run(1, &trace);
    let bytes: u64 = sequential.outputs.iter().map(|o| o.len() as u64).sum();
    for (mode, kept) in [(OutputMode::Keep, trace.len()), (OutputMode::Count, 0)] {
        let stm = Stm::new(2).unwrap();
        let mut nf = PerDestinationCounter::new(&stm);
        let config =
            TraceConfig { workers: 2, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: udp_flows_on_port_0() };
        let (report, _) = run_trace_presplit(&stm, &nf, &config, trace.iter().cloned(), mode).unwrap();
        let mut counts = nf.per_destination.entries_mut();
        counts.sort();
        assert_eq!(counts, sequential.counts, "{mode:?}: aggregate state differs");
        assert_eq!(report.all_outputs().count(), kept, "{mode:?}");
        assert_eq!(report.workers.iter().map(|w| w.output_packets).sum::<u64>(), trace.len() as u64, "{mode:?}");
        assert_eq!(report.workers.iter().map(|w| w.output_bytes).sum::<u64>(), bytes, "{mode:?}");
    }
}

/// The bare control the benchmark compares with sees every packet once, on
/// the worker its set belongs to, and copies all of its bytes.
#[test]
fn control_runs_handle_every_packet_on_its_sets_worker() {
    let trace = generated_trace(11, 300);
    let bytes: u64 = trace.iter().map(|p| p.data().len() as u64).sum();
    for workers in [1, 2] {
        let config =
            TraceConfig { workers, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: udp_flows_on_port_0() };
        let (reports, _) = run_control_presplit(&config, trace.iter().cloned(), ControlWork::LookupAndCopy).unwrap();
        assert_eq!(reports.len(), workers);
        assert_eq!(reports.iter().map(|r| r.packets).sum::<u64>(), trace.len() as u64, "{workers} workers");
        assert_eq!(reports.iter().map(|r| r.bytes).sum::<u64>(), bytes, "{workers} workers");
        // Each of the 300 UDP flows lives on exactly one worker.
        assert_eq!(reports.iter().map(|r| r.flows).sum::<usize>(), 300, "{workers} workers");
        if workers == 2 {
            assert!(reports.iter().all(|r| r.flows > 0), "the hash left a worker without flows");
        }
        let (reports, _) =
            run_control_presplit(&config, trace.iter().cloned(), ControlWork::Arithmetic { rounds: 4 }).unwrap();
        assert_eq!(reports.iter().map(|r| r.packets).sum::<u64>(), trace.len() as u64, "{workers} workers");
    }
    let config =
        TraceConfig { workers: 0, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: udp_flows_on_port_0() };
    assert!(matches!(
        run_control_presplit(&config, trace, ControlWork::LookupAndCopy),
        Err(RuntimeError::Config { field: "workers", .. })
    ));
}

/// Counts handler calls in transactional counters.
struct Lifecycle {
    expired: TObj<u64>,
    periodic: TObj<u64>,
    inits: TObj<u64>,
}

impl ParallelNf for Lifecycle {
    type SetState = ();

    fn init<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        self.inits.update(ctx.tx(), |n| *n += 1)
    }

    fn first_packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
        Ok(Some(NewSet { state: (), idle_timeout_ns: 100 }))
    }

    fn packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _state: &mut (), _packet: &mut Packet) -> Result<(), Abort> {
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &()) -> Result<(), Abort> {
        self.expired.update(ctx.tx(), |n| *n += 1)
    }

    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        self.periodic.update(ctx.tx(), |n| *n += 1)
    }
}

#[test]
fn idle_sets_expire_and_the_timer_fires_in_packet_time() {
    let stm = Stm::new(1).unwrap();
    let id = stm.register(StructureKind::Object, "counters");
    let mut nf = Lifecycle {
        expired: TObj::new(&stm, id, 0, 0),
        periodic: TObj::new(&stm, id, 1, 0),
        inits: TObj::new(&stm, id, 2, 0),
    };
    let flow = |src: u8| FiveTuple { src_ip: Ipv4Addr::new(10, 0, 0, src).into(), proto: L4Proto::Udp, ..FIVE_TUPLE };
    // Flow 1 at 0 and 50 (alive), flow 2 at 120. At 500 both are idle for
    // more than 100 ns: both expire before the packet, which starts flow 1
    // anew. At 900 flow 1 has been idle 400 ns: it expires again and the
    // packet starts it again (live at the end). Timer: 200 ns after the
    // first packet, at most once per batch: fires at 500 and 900.
    let trace = vec![
        Packet::new(0, 0, frame(&flow(1))),
        Packet::new(0, 50, frame(&flow(1))),
        Packet::new(0, 120, frame(&flow(2))),
        Packet::new(0, 500, frame(&flow(1))),
        Packet::new(0, 900, frame(&flow(1))),
    ];
    let config =
        TraceConfig { workers: 1, batch_size: 1, ports: 2, periodic_ns: Some(200), packet_sets: udp_flows_on_port_0() };
    let report = run_trace(&stm, &nf, &config, trace).unwrap();
    assert_eq!(report.workers[0].live_sets, 1);
    assert_eq!(*nf.expired.get_mut(), 3);
    assert_eq!(*nf.periodic.get_mut(), 2);
    assert_eq!(*nf.inits.get_mut(), 1);
}

#[test]
fn configs_that_do_not_fit_the_engine_are_refused() {
    let stm = Stm::new(2).unwrap();
    let nf = PerDestinationCounter::new(&stm);
    let mut config =
        TraceConfig { workers: 1, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: PacketSetDef::none() };
    let err = run_trace(&stm, &nf, &config, Vec::new()).unwrap_err();
    assert!(matches!(err, RuntimeError::WorkerCount { config: 1, engine: 2 }));
    config.workers = 2;
    config.batch_size = 0;
    assert!(matches!(run_trace(&stm, &nf, &config, Vec::new()), Err(RuntimeError::Config { .. })));
}

/// Numbers each set's packets in its state and labels its output: `F` (a
/// first packet), `P` (a later one) with the set's packet count, `E` (an
/// expiry) with the count it ended with; all with the flow's source
/// address.
struct SetLifetimes;

impl SetLifetimes {
    fn label(ctx: &mut Ctx<'_, '_>, what: u8, src: [u8; 4], count: u32) {
        let now = ctx.now_ns();
        let mut data = vec![what];
        data.extend_from_slice(&src);
        data.extend_from_slice(&count.to_be_bytes());
        ctx.emit(1, now, &data);
    }
}

impl ParallelNf for SetLifetimes {
    type SetState = ([u8; 4], u32);

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<([u8; 4], u32)>>, Abort> {
        let src = octets(five_tuple(packet.data()).unwrap().src_ip);
        Self::label(ctx, b'F', src, 1);
        Ok(Some(NewSet { state: (src, 1), idle_timeout_ns: 1_000 }))
    }

    fn packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        state: &mut ([u8; 4], u32),
        _packet: &mut Packet,
    ) -> Result<(), Abort> {
        state.1 += 1;
        Self::label(ctx, b'P', state.0, state.1);
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, state: &([u8; 4], u32)) -> Result<(), Abort> {
        Self::label(ctx, b'E', state.0, state.1);
        Ok(())
    }
}

#[test]
fn set_expiry_does_not_depend_on_batch_boundaries_or_worker_count() {
    // 12 flows, a packet every 100 ns from a random one: a flow's gaps
    // are often longer than the 1 µs idle timeout, and often end inside a
    // batch of 32.
    let mut rng = StdRng::seed_from_u64(3);
    let flow = |src: u8| FiveTuple { src_ip: Ipv4Addr::new(10, 0, 0, src).into(), proto: L4Proto::Udp, ..FIVE_TUPLE };
    let mut trace: Vec<Packet> =
        (0..3_000u64).map(|i| Packet::new(0, i * 100, frame(&flow(rng.gen_range(1..=12))))).collect();
    // Then orphans far in the future, enough for every worker's last
    // batches to start after every deadline: all sets expire at the end.
    let tcp = frame(&FIVE_TUPLE);
    trace.extend((0..6 * 32).map(|i| Packet::new(0, 1_000_000_000 + i, tcp.clone())));
    let run = |workers: usize, batch_size: usize| {
        let stm = Stm::new(workers).unwrap();
        let config =
            TraceConfig { workers, batch_size, ports: 2, periodic_ns: None, packet_sets: udp_flows_on_port_0() };
        let report = run_trace(&stm, &SetLifetimes, &config, trace.iter().cloned()).unwrap();
        assert_eq!(report.workers.iter().map(|w| w.live_sets).sum::<usize>(), 0, "every set expired");
        // Expiries run when the worker notices (at a batch's start or at
        // the set's next packet), so compare what happened, not when.
        let mut labels: Vec<Vec<u8>> = report.all_outputs().map(|o| o.data.clone()).collect();
        labels.sort();
        labels
    };
    let reference = run(1, 1);
    let restarts = reference.iter().filter(|l| l[0] == b'E').count();
    assert!(restarts > 100, "the trace exercises expiry: {restarts} expiries");
    for (workers, batch_size) in [(1, 32), (2, 32), (3, 7)] {
        assert_eq!(run(workers, batch_size), reference, "{workers} workers, batches of {batch_size}");
    }
}
