//! The parallel NFs a host builds (`RegisteredNf`): each is built from `key=value`
//! arguments (defaults, good values that reach the NF's configuration, and
//! bad values refused with an error naming the argument), with its packet
//! sets and periodic timer; a short trace through the built NF shows the
//! arguments took effect and the port mapping.
#![cfg(not(loom))]

use std::net::Ipv4Addr;

use ferry_nf::args::{ArgError, NfArgs};
use ferry_parallel::live::counter::DstCounter;
use ferry_parallel::live::nfs_args::{parse_backends, parse_port_range, NAT_KEYS};
use ferry_parallel::live::registry::{NfEnv, NfSetup, RegisteredNf};
use ferry_parallel::nfs::policer::Policer;
use ferry_parallel::nfs::{anti_ddos::AntiDdos, bridge::Bridge, firewall::Firewall, maglev::Maglev, nat::Nat};
use ferry_parallel::runtime::{run_trace, OutputPacket, Packet, TraceConfig};
use ferry_parallel::stm::Stm;
use ferry_wire::{build_frame, five_tuple, FiveTuple, FrameSpec, L4Proto};

/// The NFs that declare `RegisteredNf`, by the name the catalog gives
/// them (`parallel-<name>`).
const NAMES: [&str; 7] = ["counter", "nat", "bridge", "firewall", "maglev", "policer", "anti_ddos"];

/// What a build gave: the setup, the counters the NF declares and names,
/// and the output of `packets` run through the NF (all workers', sorted by
/// port then bytes).
struct Built {
    setup: NfSetup,
    declared: &'static [&'static str],
    named: Vec<&'static str>,
    outputs: Vec<OutputPacket>,
}

/// Builds `N` and runs it over `packets` in trace mode, with the setup it
/// gave (packet sets, periodic timer).
fn run_over<N: RegisteredNf>(stm: &Stm, env: NfEnv, args: &NfArgs, packets: Vec<Packet>) -> Result<Built, ArgError> {
    let (nf, setup) = N::build(stm, &env, args)?;
    let config = TraceConfig {
        workers: env.workers,
        batch_size: 32,
        ports: env.ports,
        periodic_ns: setup.periodic_ns,
        packet_sets: setup.packet_sets.clone(),
    };
    let named = nf.named_counters().into_iter().map(|(name, _)| name).collect();
    let report = run_trace(stm, &nf, &config, packets).expect("the trace runs");
    let mut outputs: Vec<OutputPacket> = report.workers.into_iter().flat_map(|w| w.outputs).collect();
    outputs.sort_by(|a, b| (a.port, &a.data).cmp(&(b.port, &b.data)));
    Ok(Built { setup, declared: N::COUNTERS, named, outputs })
}

fn build_with(name: &str, args: &[&str], ports: u16, workers: usize, packets: Vec<Packet>) -> Result<Built, ArgError> {
    let stm = Stm::new(workers).unwrap();
    let env = NfEnv { ports, workers };
    let args = NfArgs::parse(args)?;
    match name {
        "counter" => run_over::<DstCounter>(&stm, env, &args, packets),
        "nat" => run_over::<Nat>(&stm, env, &args, packets),
        "bridge" => run_over::<Bridge>(&stm, env, &args, packets),
        "firewall" => run_over::<Firewall>(&stm, env, &args, packets),
        "maglev" => run_over::<Maglev>(&stm, env, &args, packets),
        "policer" => run_over::<Policer>(&stm, env, &args, packets),
        "anti_ddos" => run_over::<AntiDdos>(&stm, env, &args, packets),
        _ => panic!("no parallel NF {name}"),
    }
}

/// Builds with two out-links and two workers, running nothing.
fn build(name: &str, args: &[&str]) -> Result<Built, ArgError> {
    build_with(name, args, 2, 2, Vec::new())
}

/// The error of a build that must fail.
fn error(name: &str, args: &[&str], ports: u16) -> ArgError {
    match build_with(name, args, ports, 2, Vec::new()) {
        Ok(_) => panic!("{name} {args:?} with {ports} out-links was accepted"),
        Err(e) => e,
    }
}

/// Asserts that the build fails with an error whose text names `key`.
fn refused(name: &str, args: &[&str], key: &str) -> ArgError {
    let e = error(name, args, 2);
    assert!(e.to_string().contains(key), "{name} {args:?}: the error does not name {key}: {e}");
    e
}

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> FiveTuple {
    FiveTuple { src_ip: src.into(), dst_ip: dst.into(), src_port: sport, dst_port: dport, proto: L4Proto::Udp }
}

fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> FiveTuple {
    FiveTuple { proto: L4Proto::Tcp, ..udp(src, sport, dst, dport) }
}

const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn frame_from(src_mac: [u8; 6], dst_mac: [u8; 6], tuple: &FiveTuple) -> Vec<u8> {
    let spec = FrameSpec { src_mac, dst_mac, frame_len: 64 };
    let mut buf = vec![0u8; 64];
    build_frame(&spec, tuple, None, &mut buf).unwrap();
    buf
}

fn packet(port: u16, ts_ns: u64, tuple: &FiveTuple) -> Packet {
    Packet::new(port, ts_ns, frame_from(HOST_MAC, PEER_MAC, tuple))
}

#[test]
fn the_table_lists_all_seven_nfs_and_each_builds_with_its_defaults() {
    for name in NAMES.iter().filter(|n| **n != "maglev") {
        let built = build(name, &[]).unwrap_or_else(|e| panic!("{name} with no arguments: {e}"));
        assert!(!built.setup.packet_sets.rules().is_empty(), "{name} has packet sets");
    }
    // Maglev's one required argument.
    let e = refused("maglev", &[], "vip");
    assert!(matches!(e, ArgError::Missing { .. }), "{e:?}");
    build("maglev", &["vip=192.0.2.10"]).unwrap();
    // Unknown keys are refused, with the list of known ones.
    for name in NAMES {
        let args: &[&str] = if name == "maglev" { &["vip=192.0.2.10", "colour=red"] } else { &["colour=red"] };
        let e = refused(name, args, "colour");
        assert!(matches!(e, ArgError::Unknown { .. }), "{name}: {e:?}");
    }
    let e = refused("nat", &["colour=red"], "colour");
    assert!(e.to_string().contains(&NAT_KEYS.join(", ")), "{e}");
}

#[test]
fn the_argument_parsers_take_good_values_and_refuse_bad_ones() {
    assert_eq!(parse_port_range("1024-2047"), Some(1024..=2047));
    assert_eq!(parse_port_range("5000"), Some(5000..=5000));
    for bad in ["2047-1024", "1024-", "-5", "1024-70000", "x"] {
        assert_eq!(parse_port_range(bad), None, "{bad}");
    }
    let backends = parse_backends("a:1:02:00:00:00:00:01, b:2:02:00:00:00:00:02").unwrap();
    assert_eq!(backends.len(), 2);
    assert_eq!((backends[1].name.as_str(), backends[1].port, backends[1].mac), ("b", 2, [2, 0, 0, 0, 0, 2]));
    for bad in ["a:1", "a:x:02:00:00:00:00:01", ":1:02:00:00:00:00:01", "a:1:02:00:00:00:00:01,", "a:1:nope"] {
        assert!(parse_backends(bad).is_none(), "{bad}");
    }
}

#[test]
fn nat_translates_to_the_configured_address_and_ports_and_refuses_bad_arguments() {
    let args = ["public_ip=203.0.113.7", "ports=40000-40031", "lease_ms=5000", "refresh_ms=0", "reclaim_ms=50"];
    let inside: Vec<FiveTuple> =
        (0..6).map(|i| udp([10, 0, 0, 1 + i], 1000 + u16::from(i), [8, 8, 8, 8], 53)).collect();
    let packets = inside.iter().enumerate().map(|(i, t)| packet(0, 1_000 + i as u64, t)).collect();
    let built = build_with("nat", &args, 2, 2, packets).unwrap();
    assert_eq!(built.setup.periodic_ns, Some(50_000_000), "the reclaim timer");
    assert_eq!(built.outputs.len(), inside.len());
    let mut public_ports = Vec::new();
    for out in &built.outputs {
        assert_eq!(out.port, 1, "internal (0) to external (1)");
        let t = five_tuple(&out.data).unwrap();
        assert_eq!(t.src_ip, Ipv4Addr::new(203, 0, 113, 7));
        assert!((40_000..=40_031).contains(&t.src_port), "{t:?}");
        public_ports.push(t.src_port);
    }
    public_ports.sort();
    public_ports.dedup();
    assert_eq!(public_ports.len(), inside.len(), "one public port per internal endpoint");
    // Defaults.
    assert_eq!(build("nat", &[]).unwrap().setup.periodic_ns, Some(100_000_000));

    refused("nat", &["public_ip=203.0.113"], "public_ip=203.0.113");
    refused("nat", &["ports=2000-1000"], "ports=2000-1000");
    refused("nat", &["ports=0-70000"], "ports=0-70000");
    refused("nat", &["lease_ms=0"], "lease_ms");
    refused("nat", &["lease_ms=soon"], "lease_ms");
    refused("nat", &["lease_ms=99999999999999999"], "lease_ms");
    refused("nat", &["reclaim_ms=0"], "reclaim_ms");
    refused("nat", &["reclaim_batch=0"], "reclaim_batch");
    refused("nat", &["buckets=-1"], "buckets");
    let e = error("nat", &[], 1);
    assert!(matches!(e, ArgError::Build { nf: "nat", .. }) && e.to_string().contains("2 out-links"), "{e}");
}

#[test]
fn bridge_spans_the_out_links_floods_and_refuses_bad_arguments() {
    let broadcast = Packet::new(0, 1_000, frame_from(HOST_MAC, [0xff; 6], &udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2)));
    let built =
        build_with("bridge", &["capacity=16", "timeout_ms=1000", "reclaim_ms=20"], 3, 1, vec![broadcast]).unwrap();
    assert_eq!(built.setup.packet_sets.rules().len(), 3, "a rule per bridge port: ports defaults to the out-links");
    assert_eq!(built.setup.periodic_ns, Some(20_000_000));
    let ports: Vec<u16> = built.outputs.iter().map(|o| o.port).collect();
    assert_eq!(ports, [1, 2], "flooded out of every out-link but the arrival port");
    let two = build_with("bridge", &["ports=2"], 3, 1, Vec::new()).unwrap();
    assert_eq!(two.setup.packet_sets.rules().len(), 2);

    let e = error("bridge", &["ports=4"], 3);
    assert!(matches!(e, ArgError::NoOutLink { port: 3, out_links: 3, .. }) && e.key() == Some("ports"), "{e}");
    let e = error("bridge", &[], 1);
    assert!(e.to_string().contains("at least 2 ports"), "{e}");
    refused("bridge", &["ports=1"], "ports=1");
    refused("bridge", &["capacity=0"], "capacity");
    refused("bridge", &["capacity=4294967296"], "capacity");
    refused("bridge", &["timeout_ms=0"], "timeout_ms");
    refused("bridge", &["refresh_ms=1s"], "refresh_ms");
    refused("bridge", &["reclaim_batch=0"], "reclaim_batch");
}

#[test]
fn firewall_lets_inside_out_and_only_answers_in_and_refuses_bad_arguments() {
    let out = udp([10, 0, 0, 1], 1234, [192, 0, 2, 1], 53);
    let answer = udp([192, 0, 2, 1], 53, [10, 0, 0, 1], 1234);
    let unsolicited = udp([192, 0, 2, 1], 53, [10, 0, 0, 1], 4321);
    let packets = vec![packet(1, 500, &answer), packet(0, 1_000, &out), packet(1, 2_000, &answer)];
    let packets = packets.into_iter().chain([packet(1, 3_000, &unsolicited)]).collect();
    let built = build_with("firewall", &["idle_ms=5000"], 2, 1, packets).unwrap();
    assert_eq!(built.setup.periodic_ns, None);
    let seen: Vec<(u16, FiveTuple)> = built.outputs.iter().map(|o| (o.port, five_tuple(&o.data).unwrap())).collect();
    assert_eq!(seen, [(0, answer), (1, out)], "the early answer and the unsolicited packet were dropped");

    refused("firewall", &["idle_ms=0"], "idle_ms=0");
    refused("firewall", &["idle_ms=-5"], "idle_ms=-5");
    refused("firewall", &["idle_timeout_ns=5"], "idle_timeout_ns");
    let e = error("firewall", &[], 1);
    assert!(matches!(e, ArgError::Build { nf: "firewall", .. }), "{e}");
}

#[test]
fn maglev_sends_to_the_configured_backends_and_refuses_bad_arguments() {
    let args = [
        "vip=192.0.2.10",
        "mac=02:00:00:00:00:aa",
        "backends=one:1:02:be:00:00:00:01,two:2:02:be:00:00:00:02",
        "table_size=251",
        "idle_ms=1000",
    ];
    let clients: Vec<FiveTuple> = (0..32).map(|i| tcp([10, 0, 0, 1], 2000 + i, [192, 0, 2, 10], 443)).collect();
    let mut packets: Vec<Packet> = clients.iter().map(|t| packet(0, 1_000, t)).collect();
    packets.push(packet(0, 1_000, &tcp([10, 0, 0, 1], 2000, [192, 0, 2, 11], 443))); // not the VIP
    let built = build_with("maglev", &args, 3, 2, packets).unwrap();
    assert_eq!(built.setup.periodic_ns, None);
    assert_eq!(built.outputs.len(), clients.len(), "every packet to the VIP, and only those");
    for out in &built.outputs {
        assert!(matches!(out.port, 1 | 2), "a backend's out-link: {}", out.port);
        assert_eq!(out.data[..6], [2, 0xbe, 0, 0, 0, out.port as u8], "the backend's MAC");
        assert_eq!(out.data[6..12], [2, 0, 0, 0, 0, 0xaa], "the balancer's MAC");
    }
    assert!(built.outputs.iter().any(|o| o.port == 1) && built.outputs.iter().any(|o| o.port == 2));

    refused("maglev", &["vip=192.0.2"], "vip=192.0.2");
    refused("maglev", &["vip=192.0.2.10", "mac=02:00"], "mac=02:00");
    refused("maglev", &["vip=192.0.2.10", "backends=a:1"], "backends=a:1");
    refused("maglev", &["vip=192.0.2.10", "backends=a:0:02:00:00:00:00:01,a:1:02:00:00:00:00:02"], "backends");
    let e = refused("maglev", &["vip=192.0.2.10", "backends=a:2:02:00:00:00:00:01"], "backends");
    assert!(matches!(e, ArgError::NoOutLink { port: 2, out_links: 2, .. }), "{e:?}");
    refused("maglev", &["vip=192.0.2.10", "table_size=100"], "table_size");
    refused("maglev", &["vip=192.0.2.10", "table_size=3"], "table_size"); // fewer entries than the 4 backends
    refused("maglev", &["vip=192.0.2.10", "client_port=x"], "client_port");
    refused("maglev", &["vip=192.0.2.10", "idle_ms=0"], "idle_ms");
}

#[test]
fn policer_polices_at_the_configured_burst_and_refuses_bad_arguments() {
    // 64-byte frames at one instant to one host: a 200-byte burst passes 3.
    for sets in ["dst", "flow"] {
        let sets_arg = format!("sets={sets}");
        let to_host: Vec<Packet> = (0..10)
            .map(|i| packet(0, 1_000, &udp([192, 0, 2, 1], 100 + i, [10, 0, 0, 1], 80)))
            .chain([packet(1, 1_000, &udp([10, 0, 0, 1], 80, [192, 0, 2, 1], 100))])
            .collect();
        let built = build_with("policer", &["rate=1000", "burst=200", &sets_arg], 2, 1, to_host).unwrap();
        assert_eq!(built.setup.periodic_ns, None);
        let ports: Vec<u16> = built.outputs.iter().map(|o| o.port).collect();
        assert_eq!(ports, [0, 1, 1, 1], "{sets}: LAN to WAN unpoliced, 3 of 10 within the burst");
    }
    let swapped = build_with("policer", &["wan_port=1", "lan_port=0"], 2, 1, Vec::new()).unwrap();
    assert_eq!(swapped.setup.packet_sets.rules().len(), 2);

    refused("policer", &["rate=0"], "rate=0");
    refused("policer", &["rate=fast"], "rate=fast");
    refused("policer", &["burst=0"], "burst=0");
    refused("policer", &["burst=18446744074"], "burst");
    refused("policer", &["sets=host"], "sets=host");
    refused("policer", &["lan_port=0"], "lan_port");
    refused("policer", &["buckets=0"], "buckets");
    let e = refused("policer", &["wan_port=2"], "wan_port");
    assert!(matches!(e, ArgError::NoOutLink { port: 2, .. }), "{e:?}");
}

#[test]
fn anti_ddos_forwards_until_the_threshold_and_refuses_bad_arguments() {
    // Threshold 50%, verdicts from 2 flows on: the first flow passes, the
    // second new flow is 2 of 2 one-packet flows, an attack.
    let flows: Vec<FiveTuple> = (0..3).map(|i| tcp([10, 0, 0, 1], 1000 + i, [10, 0, 0, 2], 80)).collect();
    let packets = flows.iter().enumerate().map(|(i, t)| packet(0, 1_000 + i as u64, t)).collect();
    let args = ["threshold=50", "min_flows=2", "idle_ms=1000", "staleness_us=0", "out_port=2"];
    let built = build_with("anti_ddos", &args, 3, 1, packets).unwrap();
    assert_eq!(built.setup.periodic_ns, None);
    assert_eq!(built.setup.packet_sets.rules().len(), 1);
    let outs: Vec<(u16, FiveTuple)> = built.outputs.iter().map(|o| (o.port, five_tuple(&o.data).unwrap())).collect();
    assert_eq!(outs, [(2, flows[0])], "only the first flow passed, out of out_port");

    refused("anti_ddos", &["threshold=101"], "threshold=101");
    refused("anti_ddos", &["min_flows=-1"], "min_flows=-1");
    refused("anti_ddos", &["min_flows=9223372036854775808"], "min_flows");
    refused("anti_ddos", &["idle_ms=0"], "idle_ms");
    refused("anti_ddos", &["staleness_us=0.1"], "staleness_us");
    refused("anti_ddos", &["in_port=1"], "out_port");
    let e = refused("anti_ddos", &["out_port=2"], "out_port");
    assert!(matches!(e, ArgError::NoOutLink { port: 2, out_links: 2, .. }), "{e:?}");
}

#[test]
fn every_nf_names_the_counters_it_declares_in_order() {
    for name in NAMES {
        let args: &[&str] = if name == "maglev" { &["vip=198.18.0.1"] } else { &[] };
        let built = build_with(name, args, 2, 1, Vec::new()).unwrap();
        assert_eq!(built.named, built.declared, "{name}");
        if name != "counter" {
            assert!(built.named.len() >= 6, "{name} publishes its counters: {:?}", built.named);
        }
        // Declared next to the live mode's own and per-worker counters:
        // no name twice, within ferry's limit, room for 2 workers.
        let declared = ferry_parallel::live::counter_names(64, &built.named);
        assert!(declared.len() <= ferry_sdk::MAX_NF_COUNTERS, "{name}: {declared:?}");
        assert!(declared.contains(&"w1_packets".to_string()), "{name}: {declared:?}");
        let unique: std::collections::HashSet<&String> = declared.iter().collect();
        assert_eq!(unique.len(), declared.len(), "{name}: a name twice in {declared:?}");
    }
}

#[test]
fn a_host_takes_its_keys_and_leaves_the_rest() {
    let mut args = NfArgs::parse(&["workers=2", "buckets=8", "batch=16"]).unwrap();
    let host = args.take(&["workers", "batch"]);
    assert_eq!(host.u64_or("workers", 1), Ok(2));
    assert_eq!(host.u64_or("batch", 32), Ok(16));
    assert_eq!(args.get("buckets"), Some("8"));
    assert_eq!(args.get("workers"), None);
    assert!(args.u64_or("buckets", 0).is_ok());
    assert!(NfArgs::parse(&["n=x"]).unwrap().u64_or("n", 0).is_err());
    assert!(matches!(NfArgs::parse(&["novalue"]), Err(ArgError::NotKeyValue { .. })));
}
