//! The NAT: mapping and filtering behaviour (RFC 4787), leases (expiry,
//! refresh interval), checksums, bad frames; equivalence of 1 and 2
//! workers; and scarce ports fought over by many flows on 4 workers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use ferry_equivalence::equivalence::{
    assert_equivalent, generate_trace, EquivalenceCheck, EquivalenceReport, FlowOutputs, GeneratedTrace, RunRecord,
    RunSummary, TraceSpec,
};
use ferry_parallel::nfs::nat::{
    Endpoint, Nat, NatConfig, NatCounters, NatError, Transport, EXTERNAL_PORT, INTERNAL_PORT,
};
use ferry_parallel::runtime::{run_trace, run_trace_lockstep, OutputPacket, Packet, TraceConfig, TraceReport};
use ferry_parallel::stm::Stm;
use ferry_wire::{build_frame, fill_l4_checksum, five_tuple, verify_checksums, FiveTuple, FrameSpec, L4Proto, Stamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const SERVER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const OTHER_SERVER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 99);
const MS: u64 = 1_000_000;

fn config() -> NatConfig {
    NatConfig { public_ip: PUBLIC, ports: 20_000..=20_999, buckets: 256, ..NatConfig::default() }
}

fn tuple(proto: L4Proto, src: (impl Into<IpAddr>, u16), dst: (impl Into<IpAddr>, u16)) -> FiveTuple {
    FiveTuple { src_ip: src.0.into(), src_port: src.1, dst_ip: dst.0.into(), dst_port: dst.1, proto }
}

/// A valid frame (UDP with a real checksum unless `udp_checksum` is false)
/// carrying a stamp, so tests can tell packets apart.
fn frame(t: &FiveTuple, seq: u32, udp_checksum: bool) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 80 };
    let mut data = vec![0u8; 80];
    build_frame(&spec, t, Some(&Stamp { stream: 7, seq, tx_ns: 0 }), &mut data).unwrap();
    if t.proto == L4Proto::Udp && udp_checksum {
        fill_l4_checksum(&mut data).unwrap();
    }
    data
}

fn out(t: FiveTuple, at: u64) -> Packet {
    Packet::new(INTERNAL_PORT, at, frame(&t, 0, true))
}

fn inbound(t: FiveTuple, at: u64) -> Packet {
    Packet::new(EXTERNAL_PORT, at, frame(&t, 0, true))
}

/// Runs `packets` through `nat` on one worker, one packet per batch.
fn run(stm: &Stm, nat: &Nat, packets: Vec<Packet>) -> Vec<OutputPacket> {
    let config = TraceConfig { batch_size: 1, ..nat.config().trace_config(1) };
    run_trace(stm, nat, &config, packets).unwrap().all_outputs().cloned().collect()
}

fn one_output(outputs: &[OutputPacket]) -> (u16, FiveTuple) {
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert!(verify_checksums(&outputs[0].data).unwrap(), "bad checksum");
    (outputs[0].port, five_tuple(&outputs[0].data).unwrap())
}

#[test]
fn outbound_packets_get_the_public_address_and_valid_checksums() {
    let stm = Stm::new(1).unwrap();
    let nat = Nat::new(&stm, config()).unwrap();
    for (i, proto) in [L4Proto::Udp, L4Proto::Tcp].into_iter().enumerate() {
        let sent = tuple(proto, (HOST, 5000), (SERVER, 53));
        let outputs = run(&stm, &nat, vec![out(sent, i as u64)]);
        let (port, got) = one_output(&outputs);
        assert_eq!(port, EXTERNAL_PORT);
        assert_eq!((got.src_ip, got.dst_ip, got.dst_port, got.proto), (PUBLIC.into(), SERVER.into(), 53, proto));
        assert!((20_000..=20_999).contains(&got.src_port));
        // Only the addresses, ports and checksums changed.
        let original = frame(&sent, 0, true);
        let changed: Vec<usize> = (0..80).filter(|i| original[*i] != outputs[0].data[*i]).collect();
        let allowed = [24, 25, 26, 27, 28, 29, 34, 35, 40, 41, 50, 51];
        assert!(changed.iter().all(|i| allowed.contains(i)), "{proto:?}: changed bytes {changed:?}");
    }
    // A UDP checksum of 0 means "none" and stays 0.
    let outputs = run(
        &stm,
        &nat,
        vec![Packet::new(INTERNAL_PORT, 5, frame(&tuple(L4Proto::Udp, (HOST, 6000), (SERVER, 53)), 0, false))],
    );
    assert_eq!(&outputs[0].data[40..42], &[0, 0]);
    assert_eq!(nat.counters(), NatCounters { outbound: 3, mappings_created: 3, ..NatCounters::default() });
}

#[test]
fn mapping_is_endpoint_independent() {
    let stm = Stm::new(1).unwrap();
    let nat = Nat::new(&stm, config()).unwrap();
    let udp = |src, dst| tuple(L4Proto::Udp, src, dst);
    let packets = vec![
        out(udp((HOST, 5000), (SERVER, 53)), 1),
        out(udp((HOST, 5000), (OTHER_SERVER, 443)), 2),
        out(udp((HOST, 5001), (SERVER, 53)), 3),
        out(udp((Ipv4Addr::new(10, 0, 0, 6), 5000), (SERVER, 53)), 4),
    ];
    let ports: Vec<u16> = run(&stm, &nat, packets).iter().map(|o| five_tuple(&o.data).unwrap().src_port).collect();
    assert_eq!(ports[0], ports[1], "same internal endpoint, any destination: same public port");
    assert_ne!(ports[0], ports[2]);
    assert_ne!(ports[0], ports[3]);
    assert_ne!(ports[2], ports[3]);
}

#[test]
fn filtering_is_endpoint_independent() {
    let stm = Stm::new(1).unwrap();
    let nat = Nat::new(&stm, config()).unwrap();
    let outputs = run(&stm, &nat, vec![out(tuple(L4Proto::Tcp, (HOST, 5000), (SERVER, 80)), 1)]);
    let public_port = five_tuple(&outputs[0].data).unwrap().src_port;
    let to_public = |from: (Ipv4Addr, u16), port: u16| tuple(L4Proto::Tcp, from, (PUBLIC, port));

    // The server answers, and so does a host the internal one never
    // contacted: both reach it.
    for (i, from) in [(SERVER, 80), (OTHER_SERVER, 1234)].into_iter().enumerate() {
        let outputs = run(&stm, &nat, vec![inbound(to_public(from, public_port), 10 + i as u64)]);
        let (port, got) = one_output(&outputs);
        assert_eq!(port, INTERNAL_PORT);
        assert_eq!(got, tuple(L4Proto::Tcp, from, (HOST, 5000)));
    }
    // Not mapped: another port, another address, another protocol.
    let dropped = vec![
        inbound(to_public((SERVER, 80), public_port + 1), 20),
        inbound(to_public((SERVER, 80), 80), 21),
        inbound(tuple(L4Proto::Tcp, (SERVER, 80), (HOST, 5000)), 22),
        inbound(tuple(L4Proto::Udp, (SERVER, 80), (PUBLIC, public_port)), 23),
    ];
    assert!(run(&stm, &nat, dropped).is_empty());
    let counters = nat.counters();
    assert_eq!((counters.inbound, counters.dropped_unmapped), (2, 4));
}

#[test]
fn mappings_expire_without_outbound_traffic() {
    let stm = Stm::new(1).unwrap();
    let mut nat = Nat::new(&stm, NatConfig { lease_ns: 10 * MS, refresh_interval_ns: 0, ..config() }).unwrap();
    let sent = tuple(L4Proto::Udp, (HOST, 5000), (SERVER, 53));
    let first = run(&stm, &nat, vec![out(sent, 0)]);
    let public_port = five_tuple(&first[0].data).unwrap().src_port;
    let reply = tuple(L4Proto::Udp, (SERVER, 53), (PUBLIC, public_port));
    // Inbound traffic does not refresh (RFC 4787 REQ-6): the mapping made
    // at 0 ms dies at 10 ms although replies keep coming.
    let outputs = run(&stm, &nat, vec![inbound(reply, 5 * MS), inbound(reply, 9 * MS), inbound(reply, 10 * MS)]);
    assert_eq!(outputs.len(), 2);
    // Outbound traffic after expiry makes a new mapping.
    run(&stm, &nat, vec![out(sent, 30 * MS)]);
    let counters = nat.counters();
    assert_eq!((counters.mappings_created, counters.mappings_expired, counters.dropped_unmapped), (2, 1, 1));
    let audit = nat.audit(&stm, 30 * MS).unwrap();
    assert_eq!(audit.live.len(), 1);
    assert_eq!((audit.live[0].0, audit.live[0].1), (Transport::Udp, Endpoint { ip: HOST.into(), port: 5000 }));
}

/// Whether an inbound reply at `reply_at` still finds the mapping made at
/// 0 and used again at `again_at`, with a 10 ms lease.
fn alive_after_refresh(refresh_interval_ns: u64, again_at: u64, reply_at: u64) -> bool {
    let stm = Stm::new(1).unwrap();
    let nat = Nat::new(&stm, NatConfig { lease_ns: 10 * MS, refresh_interval_ns, ..config() }).unwrap();
    let sent = tuple(L4Proto::Udp, (HOST, 5000), (SERVER, 53));
    let first = run(&stm, &nat, vec![out(sent, 0), out(sent, again_at)]);
    let public_port = five_tuple(&first[0].data).unwrap().src_port;
    let reply = tuple(L4Proto::Udp, (SERVER, 53), (PUBLIC, public_port));
    !run(&stm, &nat, vec![inbound(reply, reply_at)]).is_empty()
}

#[test]
fn outbound_traffic_refreshes_at_most_once_per_interval() {
    // Every packet refreshes: used at 2 ms, alive until 12 ms.
    assert!(alive_after_refresh(0, 2 * MS, 11 * MS));
    // Refresh interval 3 ms: the packet at 2 ms does not refresh (the lease
    // is 2 ms old), so the mapping dies at 10 ms as made...
    assert!(!alive_after_refresh(3 * MS, 2 * MS, 11 * MS));
    // ...while a packet at 4 ms does, so it lives until 14 ms.
    assert!(alive_after_refresh(3 * MS, 4 * MS, 13 * MS));
    assert!(!alive_after_refresh(3 * MS, 4 * MS, 14 * MS));
}

#[test]
fn new_endpoints_are_dropped_while_every_port_is_leased() {
    let stm = Stm::new(1).unwrap();
    let config = NatConfig { ports: 20_000..=20_001, lease_ns: 10 * MS, ..config() };
    let mut nat = Nat::new(&stm, config).unwrap();
    let from = |port| tuple(L4Proto::Udp, (HOST, port), (SERVER, 53));
    let outputs = run(&stm, &nat, vec![out(from(1), 0), out(from(2), 1), out(from(3), 2)]);
    assert_eq!(outputs.len(), 2);
    assert_eq!(nat.counters().dropped_pool_exhausted, 1);
    // Once a lease has expired the worker reclaims it on demand.
    let outputs = run(&stm, &nat, vec![out(from(3), 11 * MS)]);
    let (_, got) = one_output(&outputs);
    assert!(got.src_port == 20_000 || got.src_port == 20_001);
    let counters = nat.counters();
    assert_eq!((counters.mappings_created, counters.mappings_expired), (3, 2));
    assert_eq!(nat.audit(&stm, 11 * MS).unwrap().mappings, 1);
}

#[test]
fn bad_frames_are_counted_and_dropped_never_a_panic() {
    let stm = Stm::new(1).unwrap();
    let nat = Nat::new(&stm, config()).unwrap();
    let good = frame(&tuple(L4Proto::Tcp, (HOST, 5000), (SERVER, 80)), 0, true);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x44;
    let mut fragment = good.clone();
    fragment[20] = 0x20; // MF
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let icmp = frame(&tuple(L4Proto::Icmp, (HOST, 1), (SERVER, 0)), 0, true);
    let packets = vec![
        Packet::new(INTERNAL_PORT, 0, good[..10].to_vec()),
        Packet::new(INTERNAL_PORT, 1, good[..40].to_vec()),
        Packet::new(INTERNAL_PORT, 2, bad_ihl),
        Packet::new(EXTERNAL_PORT, 3, fragment),
        Packet::new(INTERNAL_PORT, 4, arp),
        Packet::new(INTERNAL_PORT, 5, icmp),
        Packet::new(2, 6, good.clone()),
    ];
    assert!(run(&stm, &nat, packets).is_empty());
    let counters = nat.counters();
    assert_eq!((counters.dropped_malformed, counters.dropped_unsupported, counters.outbound), (3, 4, 0));

    // Random truncations and byte flips of valid frames, both ways.
    let mut rng = StdRng::seed_from_u64(3);
    let mut packets = Vec::new();
    for i in 0..5_000u64 {
        let proto = if rng.gen() { L4Proto::Udp } else { L4Proto::Tcp };
        let mut data = frame(&tuple(proto, (HOST, rng.gen()), (PUBLIC, rng.gen_range(20_000..21_000))), 0, true);
        data.truncate(rng.gen_range(0..=data.len()));
        for _ in 0..rng.gen_range(0..4) {
            if !data.is_empty() {
                let at = rng.gen_range(0..data.len());
                data[at] = rng.gen();
            }
        }
        packets.push(Packet::new(rng.gen_range(0..2), 10 + i, data));
    }
    let outputs = run(&stm, &nat, packets);
    let counters = nat.counters();
    assert_eq!(counters.outbound + counters.inbound, outputs.len() as u64);
    assert_eq!(counters.outbound + counters.inbound + counters.dropped(), 5_007);
}

#[test]
fn bad_configurations_are_refused() {
    let stm = Stm::new(1).unwrap();
    #[allow(clippy::reversed_empty_ranges)]
    let empty = 2000..=1999;
    assert!(matches!(Nat::new(&stm, NatConfig { ports: empty, ..config() }), Err(NatError::NoPorts { .. })));
    assert!(matches!(Nat::new(&stm, NatConfig { reclaim_batch: 0, ..config() }), Err(NatError::Zero(_))));
    assert!(matches!(Nat::new(&stm, NatConfig { buckets: 0, ..config() }), Err(NatError::Ds(_))));
}

// ---------------------------------------------------------------------------
// Parallel runs
// ---------------------------------------------------------------------------

fn trace_spec(seed: u64) -> TraceSpec {
    TraceSpec { seed, packets: 24_000, ..TraceSpec::default() }
}

/// Outputs differ only by the public port (and so the L4 checksum) the
/// NAT picked, which depends on which core's pool it came from.
fn blank_public_port(output: &mut OutputPacket) {
    if output.port == EXTERNAL_PORT && output.data.len() >= 54 {
        let checksum_at = if output.data[23] == 17 { 40 } else { 50 };
        output.data[34..36].fill(0);
        output.data[checksum_at..checksum_at + 2].fill(0);
    }
}

fn assert_checksums_valid(report: &TraceReport) {
    for output in report.all_outputs() {
        assert!(verify_checksums(&output.data).unwrap(), "{output:?}");
    }
}

/// Counters that do not depend on when each worker reclaimed leases.
fn comparable(counters: NatCounters) -> NatCounters {
    NatCounters { mappings_expired: 0, ..counters }
}

#[test]
fn parallel_nat_equals_sequential_while_mappings_expire() {
    let trace = generate_trace(&trace_spec(11)).unwrap();
    let config = NatConfig { lease_ns: MS, refresh_interval_ns: 100_000, reclaim_period_ns: 250_000, ..config() };
    let config = NatConfig { ports: 1024..=u16::MAX, ..config };
    let flow_of = |o: &OutputPacket| trace.flow_of(&o.data);
    let mut check = EquivalenceCheck::new(config.trace_config(2), 2, &flow_of);
    check.normalize = &blank_public_port;
    let report = assert_equivalent(
        &check,
        |stm| Nat::new(stm, config.clone()).unwrap(),
        &trace.packets,
        |stm, nat| {
            let end = trace.packets.last().unwrap().timestamp_ns();
            nat.audit(stm, end).expect("consistent state");
            comparable(nat.counters())
        },
    );
    let counters = report.sequential_state;
    eprintln!("{report}{counters:?}");
    assert!(counters.outbound > 10_000 && counters.dropped_unmapped > 5_000);
    let endpoints: std::collections::HashSet<(u8, IpAddr, u16)> = trace
        .packets
        .iter()
        .filter(|p| p.port() == INTERNAL_PORT)
        .map(|p| five_tuple(p.data()).unwrap())
        .map(|t| (t.proto.ip_proto(), t.src_ip, t.src_port))
        .collect();
    assert!(counters.mappings_created > endpoints.len() as u64 + 50, "some endpoints idled past their lease");
}

/// Replies to every outbound packet of `report`, in trace order, each from
/// the server it went to except every third, which comes from another
/// host (endpoint-independent filtering lets it in). Each carries the
/// original's stamp, so the trace knows its flow.
fn replies(trace: &GeneratedTrace, report: &TraceReport, start_ns: u64) -> Vec<Packet> {
    let mut sent: Vec<(usize, &OutputPacket)> = report
        .all_outputs()
        .filter(|o| o.port == EXTERNAL_PORT)
        .map(|o| (trace.packet_of(&o.data).expect("stamped"), o))
        .collect();
    sent.sort_by_key(|(index, _)| *index);
    sent.iter()
        .enumerate()
        .map(|(k, (index, output))| {
            let t = five_tuple(&output.data).unwrap();
            let from = if index % 3 == 0 { (Ipv4Addr::new(192, 0, 2, 1).into(), 7) } else { (t.dst_ip, t.dst_port) };
            let reply = tuple(t.proto, from, (t.src_ip, t.src_port));
            Packet::new(EXTERNAL_PORT, start_ns + k as u64 * 1_000, frame(&reply, *index as u32, true))
        })
        .collect()
}

/// What is compared after the runs: the counters, the live mappings
/// without their public ports, and the number of table entries.
type FinalState = (NatCounters, Vec<(Transport, Endpoint)>, usize);

/// A NAT on `workers` workers over the trace, then over replies to what it
/// sent.
fn run_with_replies(workers: usize, trace: &GeneratedTrace, config: &NatConfig) -> RunRecord<u32, FinalState> {
    let stm = Stm::new(workers).unwrap();
    let mut nat = Nat::new(&stm, config.clone()).unwrap();
    let trace_config = config.trace_config(workers);
    let requests = run_trace(&stm, &nat, &trace_config, trace.packets.iter().cloned()).unwrap();
    let end = trace.packets.last().unwrap().timestamp_ns();
    let reply_trace = replies(trace, &requests, end + MS);
    let answers = run_trace(&stm, &nat, &trace_config, reply_trace.iter().cloned()).unwrap();
    let flow_of = |o: &OutputPacket| trace.flow_of(&o.data);
    let mut outputs = FlowOutputs::new();
    let mut summary = RunSummary::of(&requests, trace.packets.len());
    summary.add(&RunSummary::of(&answers, reply_trace.len()));
    for report in [&requests, &answers] {
        assert_checksums_valid(report);
        outputs.add_run(report, &flow_of, &blank_public_port);
    }
    let audit = nat.audit(&stm, end).unwrap();
    let live = audit.live.iter().map(|(transport, endpoint, _)| (*transport, *endpoint)).collect();
    RunRecord { summary, outputs, state: (nat.counters(), live, audit.mappings) }
}

#[test]
fn parallel_nat_equals_sequential_with_replies() {
    let trace = generate_trace(&trace_spec(12)).unwrap();
    // Nothing expires: replies come after the whole trace.
    let config = NatConfig { lease_ns: 10_000 * MS, ports: 1024..=u16::MAX, ..config() };
    let report = EquivalenceReport::compare(run_with_replies(1, &trace, &config), run_with_replies(2, &trace, &config));
    eprintln!("{report}");
    report.assert_equivalent();
    let (counters, live, _) = &report.sequential_state;
    assert_eq!(counters.inbound, counters.outbound, "every reply got through");
    assert_eq!(counters.mappings_created as usize, live.len());
}

/// One outbound output: when, which public port (protocol and number:
/// each protocol has its own ports), which internal endpoint (from the
/// trace packet it was made from).
struct Use {
    at: u64,
    public_port: (u8, u16),
    internal: (u8, IpAddr, u16),
}

fn uses(trace: &GeneratedTrace, report: &TraceReport) -> Vec<Use> {
    report
        .all_outputs()
        .filter(|o| o.port == EXTERNAL_PORT)
        .map(|o| {
            let original = five_tuple(trace.packets[trace.packet_of(&o.data).unwrap()].data()).unwrap();
            Use {
                at: o.timestamp_ns,
                public_port: (original.proto.ip_proto(), five_tuple(&o.data).unwrap().src_port),
                internal: (original.proto.ip_proto(), original.src_ip, original.src_port),
            }
        })
        .collect()
}

#[test]
fn scarce_ports_are_never_leased_to_two_endpoints_at_once() {
    const LEASE: u64 = MS;
    // Workers run at most a few batches apart (8 queued per worker); with
    // one-packet batches that is well under this much packet time.
    const SKEW: u64 = 300_000;
    let spec =
        TraceSpec { packets: 40_000, active_flows: 512, reply_percent: 0, unsolicited_percent: 0, ..trace_spec(13) };
    let trace = generate_trace(&spec).unwrap();
    for refresh_interval_ns in [0, 100_000] {
        let stm = Stm::new(4).unwrap();
        let config = NatConfig {
            ports: 40_000..=40_031,
            lease_ns: LEASE,
            refresh_interval_ns,
            reclaim_period_ns: 100_000,
            ..config()
        };
        let mut nat = Nat::new(&stm, config).unwrap();
        let trace_config = TraceConfig { batch_size: 1, ..nat.config().trace_config(4) };
        let mut all_uses = Vec::new();
        let mut aborts = 0;
        // Four runs on one NAT, audited in between (workers idle).
        for chunk in trace.packets.chunks(10_000) {
            let report = run_trace(&stm, &nat, &trace_config, chunk.iter().cloned()).unwrap();
            assert_checksums_valid(&report);
            aborts += report.total_stats().aborts;
            all_uses.extend(uses(&trace, &report));
            let audit = nat.audit(&stm, chunk.last().unwrap().timestamp_ns()).expect("consistent state");
            assert!(audit.mappings <= 64, "32 ports per protocol");
        }
        let counters = nat.counters();
        eprintln!("refresh interval {refresh_interval_ns} ns: {counters:?}, {aborts} aborts");
        assert_eq!(counters.outbound + counters.dropped_pool_exhausted, 40_000);
        assert!(counters.dropped_pool_exhausted > 20_000, "the pool was scarce");
        assert!(counters.mappings_created > 500, "ports changed hands many times");

        // Per port, in time order: a new holder only after the previous
        // one's lease (last use + lease - refresh interval) ran out.
        all_uses.sort_by_key(|u| (u.public_port, u.at));
        for pair in all_uses.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if a.public_port == b.public_port && a.internal != b.internal {
                assert!(
                    b.at + SKEW >= a.at + LEASE - refresh_interval_ns,
                    "port {:?} went from {:?} (used at {}) to {:?} at {}",
                    a.public_port,
                    a.internal,
                    a.at,
                    b.internal,
                    b.at
                );
            }
        }
        // Per endpoint, in time order: the port stays while the lease lives.
        let mut by_endpoint: HashMap<(u8, IpAddr, u16), Vec<&Use>> = HashMap::new();
        for u in &all_uses {
            by_endpoint.entry(u.internal).or_default().push(u);
        }
        for (endpoint, mut list) in by_endpoint {
            list.sort_by_key(|u| u.at);
            for pair in list.windows(2) {
                if pair[1].at + SKEW < pair[0].at + LEASE - refresh_interval_ns {
                    assert_eq!(pair[0].public_port, pair[1].public_port, "{endpoint:?} at {}", pair[1].at);
                }
            }
        }
    }
}

#[test]
fn ports_leased_by_a_worker_that_gets_no_more_traffic_are_not_lost() {
    use ferry_parallel::runtime::worker_of;
    // 8 ports, 4 per worker's pool; leases of 1 ms.
    let config = NatConfig {
        ports: 30_000..=30_007,
        lease_ns: MS,
        refresh_interval_ns: 0,
        reclaim_period_ns: 100_000,
        ..config()
    };
    let sets = Nat::packet_sets();
    let endpoint = |i: u16| tuple(L4Proto::Udp, (HOST, 1_000 + i), (SERVER, 53));
    let sets = &sets;
    let on_worker = |w: usize| {
        (0..u16::MAX)
            .map(endpoint)
            .filter(move |t| worker_of(&sets.classify(INTERNAL_PORT, &frame(t, 0, true)).unwrap(), 2) == w)
    };
    // Worker 1 leases its 4 ports at the start and then gets no traffic
    // (so it never reclaims them). Worker 0 starts a new mapping every
    // 200 µs, each used once: 5 leases live at a time, more than its own
    // 4 ports, and worker 1's pool is empty, so there is nothing to steal.
    let mut packets: Vec<Packet> = on_worker(1).take(4).zip(1..).map(|(t, at)| out(t, at * 1_000)).collect();
    packets.extend(on_worker(0).take(50).zip(1..).map(|(t, k)| out(t, k * 200_000)));
    let stm = Stm::new(2).unwrap();
    let mut nat = Nat::new(&stm, config).unwrap();
    let trace_config = TraceConfig { batch_size: 1, ..nat.config().trace_config(2) };
    // In lockstep, worker 1's four leases (its first four transactions) are
    // taken before worker 0 needs its fifth port (its fifth transaction):
    // free-running, a loaded machine could run worker 1 last, after worker
    // 0 had taken its empty pool, and the stranded leases this test is
    // about would never exist.
    let report = run_trace_lockstep(&stm, &nat, &trace_config, packets.clone()).unwrap();
    let sent_at: Vec<u64> = report.all_outputs().map(|o| o.timestamp_ns).collect();
    let dropped_at: Vec<u64> = packets.iter().map(|p| p.timestamp_ns()).filter(|at| !sent_at.contains(at)).collect();
    eprintln!("dropped at {dropped_at:?}");
    // Short of ports until worker 1's leases (expired at 1 ms) have been
    // dead a lease period and worker 0 has taken them over: the drops are
    // worker 0's (its packets are 200 µs apart from 200 µs on; worker 1's
    // four are at 1-4 µs).
    assert!(!dropped_at.is_empty(), "4 ports were not enough");
    assert!(dropped_at.iter().all(|at| *at >= MS), "only worker 0 ran short: {dropped_at:?}");
    assert!(dropped_at.iter().all(|at| *at < 3 * MS), "8 ports are enough once worker 1's are back");
    let counters = nat.counters();
    assert_eq!(counters.dropped_pool_exhausted, dropped_at.len() as u64);
    assert!(counters.mappings_expired >= 4, "{counters:?}");
    nat.audit(&stm, 10 * MS + 1).expect("consistent state");
}
