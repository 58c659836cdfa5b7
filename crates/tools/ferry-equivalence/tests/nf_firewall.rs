//! The stateful firewall: connections opened from inside, answers let in,
//! everything else blocked; idle timeouts exact even mid-batch; bad
//! frames; equivalence of 1 and 2 workers; and 4 workers checked against
//! a sequential model of the rules, packet by packet.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};

use ferry_equivalence::equivalence::{assert_equivalent, five_tuple_key, generate_trace, EquivalenceCheck, TraceSpec};
use ferry_parallel::nfs::firewall::{
    Firewall, FirewallConfig, FirewallCounters, FirewallError, EXTERNAL_PORT, INTERNAL_PORT,
};
use ferry_parallel::runtime::{run_trace, OutputPacket, Packet, TraceConfig};
use ferry_parallel::stm::Stm;
use ferry_wire::{build_frame, five_tuple, FiveTuple, FrameSpec, L4Proto, Stamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const SERVER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const MS: u64 = 1_000_000;

fn tuple(proto: L4Proto, src: (impl Into<IpAddr>, u16), dst: (impl Into<IpAddr>, u16)) -> FiveTuple {
    FiveTuple { src_ip: src.0.into(), src_port: src.1, dst_ip: dst.0.into(), dst_port: dst.1, proto }
}

fn reversed(t: FiveTuple) -> FiveTuple {
    tuple(t.proto, (t.dst_ip, t.dst_port), (t.src_ip, t.src_port))
}

/// A frame on `port` at `at`, stamped with `at` so outputs can be told
/// apart.
fn packet(port: u16, at: u64, t: FiveTuple) -> Packet {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 80 };
    let mut data = vec![0u8; 80];
    build_frame(&spec, &t, Some(&Stamp { stream: 0, seq: at as u32, tx_ns: at }), &mut data).unwrap();
    Packet::new(port, at, data)
}

/// Runs `packets` on one worker in batches of `batch_size`; for each
/// packet, the port it left by (`None`: dropped).
fn run(stm: &Stm, firewall: &Firewall, batch_size: usize, packets: Vec<Packet>) -> Vec<Option<u16>> {
    let config = TraceConfig { batch_size, ..firewall.config().trace_config(1) };
    let report = run_trace(stm, firewall, &config, packets.clone()).unwrap();
    let outputs: Vec<&OutputPacket> = report.all_outputs().collect();
    packets.iter().map(|p| outputs.iter().find(|o| o.data == p.data()).map(|o| o.port)).collect()
}

#[test]
fn inside_opens_connections_and_only_answers_come_back() {
    let stm = Stm::new(1).unwrap();
    let firewall = Firewall::new(&stm, FirewallConfig::default()).unwrap();
    let udp = tuple(L4Proto::Udp, (HOST, 5000), (SERVER, 53));
    let tcp = tuple(L4Proto::Tcp, (HOST, 5001), (SERVER, 80));
    let packets = vec![
        packet(EXTERNAL_PORT, 1, reversed(udp)), // before the host asked
        packet(INTERNAL_PORT, 2, udp),
        packet(INTERNAL_PORT, 3, tcp),
        packet(EXTERNAL_PORT, 4, reversed(udp)),
        packet(EXTERNAL_PORT, 5, reversed(tcp)),
        packet(EXTERNAL_PORT, 6, tuple(L4Proto::Udp, (SERVER, 53), (HOST, 5001))), // another port
        packet(EXTERNAL_PORT, 7, tuple(L4Proto::Tcp, (SERVER, 53), (HOST, 5000))), // another protocol
        packet(EXTERNAL_PORT, 8, tuple(L4Proto::Udp, (SERVER, 54), (HOST, 5000))), // another sender
    ];
    let out = run(&stm, &firewall, 32, packets);
    let (i, e) = (Some(INTERNAL_PORT), Some(EXTERNAL_PORT));
    assert_eq!(out, vec![None, e, e, i, i, None, None, None]);
    let counters = firewall.counters();
    assert_eq!(counters, FirewallCounters { opened: 2, outbound: 2, inbound: 2, blocked: 4, ..Default::default() });
}

#[test]
fn idle_connections_close_and_reopen_from_inside() {
    let stm = Stm::new(1).unwrap();
    let firewall = Firewall::new(&stm, FirewallConfig { idle_timeout_ns: 10 * MS }).unwrap();
    let udp = tuple(L4Proto::Udp, (HOST, 5000), (SERVER, 53));
    let packets = vec![
        packet(INTERNAL_PORT, 0, udp),
        packet(EXTERNAL_PORT, 9 * MS, reversed(udp)), // answers keep it open...
        packet(EXTERNAL_PORT, 18 * MS, reversed(udp)), // ...until 19 ms
        packet(EXTERNAL_PORT, 28 * MS, reversed(udp)), // idle for exactly 10 ms
        packet(INTERNAL_PORT, 30 * MS, udp),          // opens it again
        packet(EXTERNAL_PORT, 31 * MS, reversed(udp)),
    ];
    let out = run(&stm, &firewall, 1, packets);
    let (i, e) = (Some(INTERNAL_PORT), Some(EXTERNAL_PORT));
    assert_eq!(out, vec![e, i, i, None, e, i]);
    let counters = firewall.counters();
    assert_eq!((counters.opened, counters.blocked, counters.expired), (2, 1, 1));
}

#[test]
fn a_timeout_that_passes_mid_batch_is_exact() {
    let stm = Stm::new(1).unwrap();
    let firewall = Firewall::new(&stm, FirewallConfig { idle_timeout_ns: 10_000 }).unwrap();
    let a = tuple(L4Proto::Tcp, (HOST, 5000), (SERVER, 80));
    let b = tuple(L4Proto::Tcp, (HOST, 5001), (SERVER, 80));
    // Batches of two: the second starts at 5 µs, when connection `a`
    // (opened at 0, timeout 10 µs) is still open, and its answer comes at
    // 15 µs, in the same batch.
    let packets = vec![
        packet(INTERNAL_PORT, 0, a),
        packet(INTERNAL_PORT, 1_000, b),
        packet(INTERNAL_PORT, 5_000, b),
        packet(EXTERNAL_PORT, 15_000, reversed(a)),
    ];
    let out = run(&stm, &firewall, 2, packets);
    assert_eq!(out[3], None);
}

#[test]
fn bad_frames_are_counted_and_dropped_never_a_panic() {
    let stm = Stm::new(1).unwrap();
    let firewall = Firewall::new(&stm, FirewallConfig::default()).unwrap();
    let udp = tuple(L4Proto::Udp, (HOST, 5000), (SERVER, 53));
    let good = packet(INTERNAL_PORT, 0, udp).data().to_vec();
    let mut cut_udp = good.clone();
    cut_udp[16..18].copy_from_slice(&24u16.to_be_bytes()); // IPv4 total length: 4 bytes of UDP
    let mut later_fragment = good.clone();
    later_fragment[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let icmp = packet(INTERNAL_PORT, 0, tuple(L4Proto::Icmp, (HOST, 1), (SERVER, 0))).data().to_vec();
    let packets = vec![
        Packet::new(INTERNAL_PORT, 1, good[..20].to_vec()),
        Packet::new(INTERNAL_PORT, 2, cut_udp),
        Packet::new(EXTERNAL_PORT, 3, later_fragment),
        Packet::new(INTERNAL_PORT, 4, arp),
        Packet::new(INTERNAL_PORT, 5, icmp),
        Packet::new(2, 6, good),
    ];
    assert!(run(&stm, &firewall, 32, packets).iter().all(Option::is_none));
    let counters = firewall.counters();
    assert_eq!((counters.dropped_malformed, counters.dropped_unsupported, counters.opened), (2, 4, 0));

    let mut rng = StdRng::seed_from_u64(9);
    let packets: Vec<Packet> = (0..5_000u64)
        .map(|i| {
            let proto = if rng.gen() { L4Proto::Udp } else { L4Proto::Tcp };
            let mut data = packet(0, i, tuple(proto, (HOST, rng.gen_range(1..9)), (SERVER, 53))).data().to_vec();
            data.truncate(rng.gen_range(0..=data.len()));
            for _ in 0..rng.gen_range(0..4) {
                if !data.is_empty() {
                    let at = rng.gen_range(0..data.len());
                    data[at] = rng.gen();
                }
            }
            Packet::new(rng.gen_range(0..3), 10 + i, data)
        })
        .collect();
    run(&stm, &firewall, 32, packets);
    let c = firewall.counters();
    let total = c.outbound + c.inbound + c.blocked + c.dropped_malformed + c.dropped_unsupported;
    assert_eq!(total, 5_006);
}

#[test]
fn a_zero_timeout_is_refused() {
    let stm = Stm::new(1).unwrap();
    assert!(matches!(Firewall::new(&stm, FirewallConfig { idle_timeout_ns: 0 }), Err(FirewallError::ZeroTimeout)));
}

// ---------------------------------------------------------------------------
// Parallel runs
// ---------------------------------------------------------------------------

#[test]
fn parallel_firewall_equals_sequential() {
    let trace = generate_trace(&TraceSpec { seed: 31, packets: 24_000, ..TraceSpec::default() }).unwrap();
    // Short enough that many connections idle out and are blocked or
    // reopened mid-trace.
    let config = FirewallConfig { idle_timeout_ns: 500_000 };
    let check = EquivalenceCheck::new(config.trace_config(2), 2, &five_tuple_key);
    let report = assert_equivalent(
        &check,
        |stm| Firewall::new(stm, config.clone()).unwrap(),
        &trace.packets,
        // When the runtime removes an idle set depends on batch timing.
        |_, firewall| FirewallCounters { expired: 0, ..firewall.counters() },
    );
    eprintln!("{report}{:?}", report.sequential_state);
    let c = report.sequential_state;
    assert!(c.inbound > 5_000 && c.blocked > 1_000 && c.opened > c.outbound / 20, "{c:?}");
}

/// The rules applied to the trace in order: for each packet, whether it
/// passes.
fn model(packets: &[Packet], idle_timeout_ns: u64) -> Vec<bool> {
    let mut last_active: HashMap<(u8, IpAddr, u16, IpAddr, u16), u64> = HashMap::new();
    packets
        .iter()
        .map(|p| {
            let t = five_tuple(p.data()).unwrap();
            let inside = p.port() == INTERNAL_PORT;
            let (t, now) = (if inside { t } else { reversed(t) }, p.timestamp_ns());
            let key = (t.proto.ip_proto(), t.src_ip, t.src_port, t.dst_ip, t.dst_port);
            let open = last_active.get(&key).is_some_and(|at| now - at < idle_timeout_ns);
            if inside || open {
                last_active.insert(key, now);
            }
            inside || open
        })
        .collect()
}

#[test]
fn four_workers_follow_the_rules_packet_by_packet() {
    let spec = TraceSpec { seed: 32, packets: 40_000, active_flows: 1024, reply_percent: 60, ..TraceSpec::default() };
    let trace = generate_trace(&spec).unwrap();
    for idle_timeout_ns in [200_000, 2 * MS] {
        let expected: BTreeSet<usize> = model(&trace.packets, idle_timeout_ns)
            .iter()
            .enumerate()
            .filter(|(_, pass)| **pass)
            .map(|(i, _)| i)
            .collect();
        let stm = Stm::new(4).unwrap();
        let config = FirewallConfig { idle_timeout_ns };
        let firewall = Firewall::new(&stm, config.clone()).unwrap();
        let report = run_trace(&stm, &firewall, &config.trace_config(4), trace.packets.iter().cloned()).unwrap();
        let mut passed = BTreeSet::new();
        for output in report.all_outputs() {
            let index = trace.packet_of(&output.data).unwrap();
            assert!(passed.insert(index), "packet {index} sent twice");
            assert_ne!(output.port, trace.packets[index].port(), "packet {index} sent back");
        }
        let first_difference = expected.symmetric_difference(&passed).next();
        assert_eq!(
            first_difference,
            None,
            "timeout {idle_timeout_ns}: expected {} passes, got {}",
            expected.len(),
            passed.len()
        );
        let counters = firewall.counters();
        eprintln!("timeout {idle_timeout_ns} ns: {counters:?}, {} aborts", report.total_stats().aborts);
        assert_eq!(counters.blocked as usize, trace.packets.len() - expected.len());
    }
}
