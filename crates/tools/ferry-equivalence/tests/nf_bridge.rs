//! The MAC-learning bridge: learning, forwarding, flooding, filtering,
//! moves, ageing and its refresh interval, a full table, bad frames;
//! equivalence of 1 and 2 workers; and a tiny table fought over by many
//! stations on 4 workers.

use std::collections::{BTreeSet, HashMap};

use ferry_equivalence::equivalence::{
    assert_equivalent, five_tuple_key, generate_trace, host_mac, EquivalenceCheck, TraceSpec,
};
use ferry_parallel::nfs::bridge::{Bridge, BridgeConfig, BridgeCounters, BridgeError};
use ferry_parallel::runtime::{run_trace, OutputPacket, Packet, TraceConfig};
use ferry_parallel::stm::Stm;
use ferry_wire::EthernetFrame;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
const BROADCAST: [u8; 6] = [0xff; 6];
const MULTICAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];
const MS: u64 = 1_000_000;

fn config() -> BridgeConfig {
    BridgeConfig { ports: 3, capacity: 64, buckets: 64, ..BridgeConfig::default() }
}

/// A frame from `src` to `dst` arriving on `port` at `at` (ARP-sized; the
/// bridge only reads the Ethernet header).
fn frame(port: u16, at: u64, src: [u8; 6], dst: [u8; 6]) -> Packet {
    let mut data = vec![0u8; 60];
    data[..6].copy_from_slice(&dst);
    data[6..12].copy_from_slice(&src);
    data[12..14].copy_from_slice(&[0x08, 0x06]);
    data[59] = at as u8; // tells frames apart
    Packet::new(port, at, data)
}

/// Runs `frames` on one worker, one per batch; the ports each frame went
/// out of.
fn run(stm: &Stm, bridge: &Bridge, frames: Vec<Packet>) -> Vec<Vec<u16>> {
    let config = TraceConfig { batch_size: 1, ..bridge.config().trace_config(1) };
    let report = run_trace(stm, bridge, &config, frames.clone()).unwrap();
    let outputs: Vec<&OutputPacket> = report.all_outputs().collect();
    frames.iter().map(|f| outputs.iter().filter(|o| o.data == f.data()).map(|o| o.port).collect()).collect()
}

#[test]
fn learns_sources_and_forwards_known_unicast() {
    let stm = Stm::new(1).unwrap();
    let mut bridge = Bridge::new(&stm, config()).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 1, A, B), frame(1, 2, B, A), frame(0, 3, A, B), frame(2, 4, C, B)]);
    assert_eq!(out, vec![vec![1, 2], vec![0], vec![1], vec![1]]);
    let counters = bridge.counters();
    assert_eq!((counters.flooded, counters.forwarded, counters.learnt), (1, 3, 3));
    assert_eq!(bridge.audit(&stm, 4).unwrap(), vec![(A, 0), (B, 1), (C, 2)]);
}

#[test]
fn group_destinations_flood_and_group_sources_are_dropped() {
    let stm = Stm::new(1).unwrap();
    let bridge = Bridge::new(&stm, config()).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 1, A, BROADCAST), frame(1, 2, B, MULTICAST), frame(2, 3, MULTICAST, A)]);
    assert_eq!(out, vec![vec![1, 2], vec![0, 2], vec![]]);
    let counters = bridge.counters();
    assert_eq!((counters.flooded, counters.dropped_group_source, counters.learnt), (2, 1, 2));
}

#[test]
fn a_destination_on_the_receive_port_is_filtered() {
    let stm = Stm::new(1).unwrap();
    let bridge = Bridge::new(&stm, config()).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 1, C, A), frame(0, 2, A, C)]);
    assert_eq!(out, vec![vec![1, 2], vec![]]);
    assert_eq!(bridge.counters().filtered, 1);
}

#[test]
fn a_station_that_moves_is_learnt_on_its_new_port() {
    let stm = Stm::new(1).unwrap();
    let bridge = Bridge::new(&stm, config()).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 1, A, B), frame(2, 2, A, B), frame(1, 3, B, A)]);
    assert_eq!(out[2], vec![2]);
    assert_eq!(bridge.counters().moved, 1);
}

#[test]
fn entries_age_out_and_their_stations_are_flooded_to_again() {
    let stm = Stm::new(1).unwrap();
    let bridge = Bridge::new(&stm, BridgeConfig { mac_timeout_ns: 10 * MS, ..config() }).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 0, A, B), frame(1, 5 * MS, B, A), frame(1, 10 * MS, B, A)]);
    assert_eq!(out, vec![vec![1, 2], vec![0], vec![0, 2]]);
    // A is learnt again from its next frame.
    let out = run(&stm, &bridge, vec![frame(0, 11 * MS, A, B), frame(1, 12 * MS, B, A)]);
    assert_eq!(out, vec![vec![1], vec![0]]);
    let counters = bridge.counters();
    assert_eq!((counters.learnt, counters.expired), (3, 1));
}

/// Whether B's frame at `probe_at` still finds A, learnt at 0 and seen
/// again at `again_at`, with a 10 ms ageing time.
fn still_known(refresh_interval_ns: u64, again_at: u64, probe_at: u64) -> bool {
    let stm = Stm::new(1).unwrap();
    let config = BridgeConfig { mac_timeout_ns: 10 * MS, refresh_interval_ns, ..config() };
    let bridge = Bridge::new(&stm, config).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 0, A, B), frame(0, again_at, A, B), frame(1, probe_at, B, A)]);
    out[2] == vec![0]
}

#[test]
fn frames_refresh_an_entry_at_most_once_per_interval() {
    // NFOS's default semantics: every frame refreshes.
    assert!(still_known(0, 2 * MS, 11 * MS));
    // Their recipe: refresh only an entry older than the interval; the
    // frame at 2 ms leaves it alone, so A ages out at 10 ms...
    assert!(!still_known(3 * MS, 2 * MS, 11 * MS));
    // ...and the frame at 4 ms refreshes it until 14 ms.
    assert!(still_known(3 * MS, 4 * MS, 13 * MS));
    assert!(!still_known(3 * MS, 4 * MS, 14 * MS));
}

#[test]
fn a_full_table_learns_nothing_until_an_entry_ages_out() {
    let stm = Stm::new(1).unwrap();
    let mut bridge = Bridge::new(&stm, BridgeConfig { capacity: 2, mac_timeout_ns: 10 * MS, ..config() }).unwrap();
    let out = run(&stm, &bridge, vec![frame(0, 0, A, B), frame(1, 1, B, A), frame(2, 2, C, A), frame(0, 3, A, C)]);
    assert_eq!(out[3], vec![1, 2], "C was not learnt");
    assert_eq!(bridge.counters().table_full, 1);
    let out = run(&stm, &bridge, vec![frame(2, 20 * MS, C, A), frame(0, 21 * MS, A, C)]);
    assert_eq!(out[1], vec![2], "learnt once A and B aged out");
    assert_eq!(bridge.audit(&stm, 21 * MS).unwrap(), vec![(A, 0), (C, 2)]);
}

#[test]
fn bad_frames_are_counted_and_dropped_never_a_panic() {
    let stm = Stm::new(1).unwrap();
    let mut bridge = Bridge::new(&stm, config()).unwrap();
    let mut short = frame(0, 1, A, B);
    short.data_mut().truncate(13);
    let mut vlan_cut = frame(0, 2, A, B);
    vlan_cut.data_mut()[12..14].copy_from_slice(&[0x81, 0x00]);
    vlan_cut.data_mut().truncate(16);
    let out = run(&stm, &bridge, vec![short, vlan_cut, frame(7, 3, A, B)]);
    assert!(out.iter().all(Vec::is_empty));
    let counters = bridge.counters();
    assert_eq!((counters.dropped_malformed, counters.dropped_unknown_port, counters.learnt), (2, 1, 0));

    let mut rng = StdRng::seed_from_u64(5);
    let frames: Vec<Packet> = (0..3_000u64)
        .map(|i| {
            let mut data: Vec<u8> = (0..rng.gen_range(0..70)).map(|_| rng.gen()).collect();
            if data.len() >= 14 && rng.gen() {
                data[12..14].copy_from_slice(&[0x81, 0x00]);
            }
            Packet::new(rng.gen_range(0..4), 10 + i, data)
        })
        .collect();
    let config = bridge.config().trace_config(1);
    run_trace(&stm, &bridge, &config, frames).unwrap();
    let c = bridge.counters();
    let handled = c.forwarded + c.flooded + c.filtered + c.dropped_malformed + c.dropped_group_source;
    assert_eq!(handled + c.dropped_unknown_port, 3_003);
    bridge.audit(&stm, 3_010).expect("consistent table");
}

#[test]
fn bad_configurations_are_refused() {
    let stm = Stm::new(1).unwrap();
    assert!(matches!(Bridge::new(&stm, BridgeConfig { ports: 1, ..config() }), Err(BridgeError::TooFewPorts(1))));
    assert!(matches!(Bridge::new(&stm, BridgeConfig { reclaim_batch: 0, ..config() }), Err(BridgeError::Zero(_))));
    assert!(matches!(Bridge::new(&stm, BridgeConfig { capacity: 0, ..config() }), Err(BridgeError::Ds(_))));
}

// ---------------------------------------------------------------------------
// Parallel runs
// ---------------------------------------------------------------------------

/// Counters that do not depend on the order in which cores learnt: with
/// two ports a flood and a forward send the same frame out of the same
/// port, so which one a frame got may differ.
fn comparable(c: BridgeCounters) -> (u64, u64, u64, u64) {
    (c.forwarded + c.flooded, c.filtered, c.dropped_malformed + c.dropped_group_source, c.dropped_unknown_port)
}

#[test]
fn parallel_bridge_equals_sequential() {
    let trace = generate_trace(&TraceSpec { seed: 21, packets: 24_000, ..TraceSpec::default() }).unwrap();
    let end = trace.packets.last().unwrap().timestamp_ns();
    // Ageing long enough that every station stays known: the final tables
    // must then be the same.
    for refresh_interval_ns in [0, 1_000_000_000] {
        let config = BridgeConfig { ports: 2, refresh_interval_ns, ..BridgeConfig::default() };
        let check = EquivalenceCheck::new(config.trace_config(2), 2, &five_tuple_key);
        let report = assert_equivalent(
            &check,
            |stm| Bridge::new(stm, config.clone()).unwrap(),
            &trace.packets,
            |stm, bridge| (bridge.audit(stm, end).expect("consistent table"), comparable(bridge.counters())),
        );
        eprintln!("refresh interval {refresh_interval_ns} ns:\n{report}");
        let (table, (sent, ..)) = &report.sequential_state;
        assert_eq!(*sent, 24_000);
        assert!(table.len() > 1_000);
    }
}

#[test]
fn parallel_bridge_equals_sequential_while_entries_age_out() {
    let trace = generate_trace(&TraceSpec { seed: 22, packets: 24_000, ..TraceSpec::default() }).unwrap();
    let config = BridgeConfig {
        ports: 2,
        mac_timeout_ns: MS,
        refresh_interval_ns: 100_000,
        reclaim_period_ns: 250_000,
        ..BridgeConfig::default()
    };
    let check = EquivalenceCheck::new(config.trace_config(2), 2, &five_tuple_key);
    let report = assert_equivalent(
        &check,
        |stm| Bridge::new(stm, config.clone()).unwrap(),
        &trace.packets,
        |stm, bridge| {
            bridge.audit(stm, 0).expect("consistent table");
            comparable(bridge.counters())
        },
    );
    eprintln!("{report}");
}

/// The port a generated host sits behind in the 3-port stress test.
fn port_of(ip: std::net::IpAddr) -> u16 {
    let std::net::IpAddr::V4(ip) = ip else { unreachable!("the bridge's trace is IPv4") };
    (u32::from(ip).wrapping_mul(0x9e37_79b9) >> 30) as u16 % 3
}

#[test]
fn a_tiny_table_fought_over_never_misdirects_a_frame() {
    let spec = TraceSpec {
        seed: 23,
        packets: 30_000,
        active_flows: 512,
        internal_hosts: "10.0.0.0/24".parse().unwrap(),
        external_hosts: "10.0.1.0/24".parse().unwrap(),
        ..TraceSpec::default()
    };
    let mut trace = generate_trace(&spec).unwrap();
    // Put each host behind one of three ports.
    let mut port_of_mac: HashMap<[u8; 6], u16> = HashMap::new();
    for packet in &mut trace.packets {
        let tuple = ferry_wire::five_tuple(packet.data()).unwrap();
        port_of_mac.insert(host_mac(tuple.src_ip), port_of(tuple.src_ip));
        port_of_mac.insert(host_mac(tuple.dst_ip), port_of(tuple.dst_ip));
        *packet = Packet::new(port_of(tuple.src_ip), packet.timestamp_ns(), packet.data().to_vec());
    }
    let stm = Stm::new(4).unwrap();
    let config = BridgeConfig {
        ports: 3,
        capacity: 16,
        mac_timeout_ns: 200_000,
        refresh_interval_ns: 0,
        reclaim_period_ns: 50_000,
        ..BridgeConfig::default()
    };
    let mut bridge = Bridge::new(&stm, config.clone()).unwrap();
    let trace_config = TraceConfig { batch_size: 4, ..config.trace_config(4) };
    let mut aborts = 0;
    for chunk in trace.packets.chunks(7_500) {
        let report = run_trace(&stm, &bridge, &trace_config, chunk.iter().cloned()).unwrap();
        aborts += report.total_stats().aborts;
        let mut out_ports: HashMap<usize, BTreeSet<u16>> = HashMap::new();
        for output in report.all_outputs() {
            assert!(out_ports.entry(trace.packet_of(&output.data).unwrap()).or_default().insert(output.port));
        }
        for (index, ports) in out_ports {
            let packet = &trace.packets[index];
            let dst = EthernetFrame::new_checked(packet.data()).unwrap().dst();
            let others: BTreeSet<u16> = (0..3).filter(|p| *p != packet.port()).collect();
            let right = BTreeSet::from([port_of_mac[&dst]]);
            assert!(ports == others || ports == right, "packet {index} from port {} went to {ports:?}", packet.port());
        }
        let table = bridge.audit(&stm, chunk.last().unwrap().timestamp_ns()).expect("consistent table");
        assert!(table.iter().all(|(mac, port)| port_of_mac[mac] == *port), "a station learnt on the wrong port");
    }
    let counters = bridge.counters();
    eprintln!("{counters:?}, {aborts} aborts");
    assert!(counters.table_full > 1_000 && counters.learnt > 1_000, "the table churned");
    assert!(counters.forwarded > 0 && counters.filtered > 0);
}
