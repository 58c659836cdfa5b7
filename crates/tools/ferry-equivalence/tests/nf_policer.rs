//! The policer NF: the rate over simulated time, both packet-set choices,
//! drops; and what 2 workers give compared with 1.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use ferry_equivalence::equivalence::{
    assert_equivalent, five_tuple_key, generate_trace, EquivalenceCheck, EquivalenceReport, TraceSpec, TupleKey,
};
use ferry_parallel::nfs::policer::{Policer, PolicerConfig, PolicerCounters, PolicerError, PolicerSets};
use ferry_parallel::runtime::{run_trace, Packet, TraceConfig, TraceReport};
use ferry_parallel::stm::Stm;
use ferry_traffic::IpRange;
use ferry_wire::{build_frame, five_tuple, FiveTuple, FrameSpec, L4Proto};

const WAN: u16 = 0;
const LAN: u16 = 1;

fn host(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 1, i)
}

fn udp(src: u32, src_port: u16, dst: Ipv4Addr) -> FiveTuple {
    FiveTuple {
        src_ip: Ipv4Addr::from(0xc633_0000 + src).into(),
        dst_ip: dst.into(),
        src_port,
        dst_port: 4242,
        proto: L4Proto::Udp,
    }
}

/// A UDP frame of `len` bytes whose last 4 bytes carry `seq`, so equal
/// flows' frames can be told apart (UDP checksum 0 stays valid).
fn frame(tuple: &FiveTuple, len: usize, seq: u32) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len };
    let mut buf = vec![0u8; len];
    build_frame(&spec, tuple, None, &mut buf).unwrap();
    buf[len - 4..].copy_from_slice(&seq.to_be_bytes());
    buf
}

fn run(stm: &Stm, nf: &Policer, workers: usize, trace: impl IntoIterator<Item = Packet>) -> TraceReport {
    let config =
        TraceConfig { workers, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: nf.packet_sets().clone() };
    run_trace(stm, nf, &config, trace).unwrap()
}

/// Per flow (by 5-tuple), the (port, frame) sequence sent, in order.
fn outputs_per_flow(report: &TraceReport) -> HashMap<FiveTuple, Vec<(u16, Vec<u8>)>> {
    let mut per_flow: HashMap<FiveTuple, Vec<(u16, Vec<u8>)>> = HashMap::new();
    for out in report.all_outputs() {
        per_flow.entry(five_tuple(&out.data).unwrap()).or_default().push((out.port, out.data.clone()));
    }
    per_flow
}

/// Checks the token-bucket guarantee on the frames that passed to one host:
/// within any interval `[a, b]`, at most `burst + rate * (b - a)` bytes.
fn assert_within_rate(passed: &[(u64, u64)], rate_bytes_per_sec: u64, burst_bytes: u64) {
    for (i, (start, _)) in passed.iter().enumerate() {
        let mut bytes = 0u128;
        for (at, len) in &passed[i..] {
            bytes += u128::from(*len);
            let allowed =
                u128::from(burst_bytes) * 1_000_000_000 + u128::from(at - start) * u128::from(rate_bytes_per_sec);
            assert!(bytes * 1_000_000_000 <= allowed, "{bytes} bytes in [{start}, {at}] ns");
        }
    }
}

#[test]
fn a_host_receives_its_rate_plus_one_burst_and_no_more() {
    const RATE: u64 = 100_000; // bytes per second
    const BURST: u64 = 10_000;
    const LEN: usize = 1_000;
    let stm = Stm::new(1).unwrap();
    let nf = Policer::new(&stm, PolicerConfig::new(RATE, BURST)).unwrap();
    // Host 1 gets 1000 frames per second (10x its rate) for 2 s, then,
    // after a silence long enough to refill the bucket, another 1000 per
    // second for 0.1 s. Host 2 gets 50 frames per second, half its rate.
    let heavy = udp(1, 1000, host(1));
    let light = udp(2, 2000, host(2));
    let mut trace = Vec::new();
    for ms in 0..2_000u64 {
        trace.push(Packet::new(WAN, ms * 1_000_000, frame(&heavy, LEN, ms as u32)));
        if ms % 20 == 0 {
            trace.push(Packet::new(WAN, ms * 1_000_000 + 1, frame(&light, LEN, ms as u32)));
        }
    }
    for ms in 3_000..3_100u64 {
        trace.push(Packet::new(WAN, ms * 1_000_000, frame(&heavy, LEN, ms as u32)));
    }
    let report = run(&stm, &nf, 1, trace);
    let per_flow = outputs_per_flow(&report);
    assert!(per_flow.values().flatten().all(|(port, _)| *port == LAN));

    let passed_heavy: Vec<(u64, u64)> = per_flow[&heavy]
        .iter()
        .map(|(_, data)| {
            let ms = u32::from_be_bytes(data[LEN - 4..].try_into().unwrap());
            (u64::from(ms) * 1_000_000, LEN as u64)
        })
        .collect();
    assert_within_rate(&passed_heavy, RATE, BURST);
    let first_phase = passed_heavy.iter().filter(|(at, _)| *at < 2_000_000_000).count() as u64;
    // Exactly what fits: the burst plus 1.999 s of refill, in whole frames.
    assert_eq!(first_phase, (BURST + RATE * 1_999 / 1_000) / LEN as u64);
    // After the silence the bucket is full again: a burst, then the rate.
    let second_phase = passed_heavy.len() as u64 - first_phase;
    assert_eq!(second_phase, (BURST + RATE * 99 / 1_000) / LEN as u64);
    assert_eq!(per_flow[&light].len(), 100, "a host under its rate loses nothing");

    let c = nf.counters();
    assert_eq!(c.passed, first_phase + second_phase + 100);
    assert_eq!(c.passed + c.over_rate, 2_000 + 100 + 100);
    assert_eq!(c.passed_bytes, c.passed * LEN as u64);
}

#[test]
fn lan_traffic_passes_unpoliced_and_junk_is_counted() {
    let stm = Stm::new(1).unwrap();
    // A burst smaller than any frame: everything WAN to LAN is over rate.
    let nf = Policer::new(&stm, PolicerConfig::new(1, 10)).unwrap();
    let to_host = udp(1, 1, host(1));
    let from_host = FiveTuple { src_ip: host(1).into(), dst_ip: Ipv4Addr::new(8, 8, 8, 8).into(), ..to_host };
    let mut arp = frame(&to_host, 64, 0);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let mut truncated = frame(&to_host, 64, 0);
    truncated.truncate(25);
    let trace = vec![
        Packet::new(WAN, 1, frame(&to_host, 64, 1)),
        Packet::new(LAN, 2, frame(&from_host, 64, 2)),
        Packet::new(WAN, 3, arp),
        Packet::new(WAN, 4, truncated),
        Packet::new(WAN, 5, Vec::new()),
        Packet::new(9, 6, frame(&to_host, 64, 3)),
        Packet::new(LAN, 7, vec![1, 2, 3]),
    ];
    let report = run(&stm, &nf, 1, trace);
    let sent: Vec<(u16, Vec<u8>)> = report.all_outputs().map(|o| (o.port, o.data.clone())).collect();
    assert_eq!(sent, vec![(WAN, frame(&from_host, 64, 2)), (WAN, vec![1, 2, 3])], "LAN to WAN is not parsed");
    let c = nf.counters();
    assert_eq!(
        c,
        PolicerCounters { over_rate: 1, over_rate_bytes: 64, lan_to_wan: 2, unparsable: 3, wrong_port: 1, ..c }
    );
    assert_eq!(c.passed, 0);
}

#[test]
fn bad_configurations_are_refused() {
    let stm = Stm::new(1).unwrap();
    assert_eq!(Policer::new(&stm, PolicerConfig::new(0, 10)).err(), Some(PolicerError::ZeroRate));
    assert!(matches!(Policer::new(&stm, PolicerConfig::new(1, 0)).err(), Some(PolicerError::Burst { burst: 0, .. })));
    let same = PolicerConfig { lan_port: 0, ..PolicerConfig::new(1, 1) };
    assert_eq!(Policer::new(&stm, same).err(), Some(PolicerError::SamePorts { port: 0 }));
}

/// 16 LAN hosts; flows from WAN clients to them (and unsolicited ones
/// from them), with replies: the harness's trace, 80-byte frames 1 µs
/// apart, about 60% of them WAN to LAN, so about 3 MB/s per host on
/// average and much more in its busy moments.
fn wan_lan_trace(seed: u64) -> Vec<Packet> {
    let lan_hosts: IpRange = "198.18.0.0/28".parse().unwrap();
    let spec = TraceSpec { seed, packets: 24_000, external_hosts: lan_hosts, ..TraceSpec::default() };
    let mut trace = generate_trace(&spec).unwrap().packets;
    let at = trace.last().unwrap().timestamp_ns();
    trace.push(Packet::new(WAN, at + 1, vec![0xff; 30]));
    trace
}

const RATE: u64 = 2_000_000; // bytes per second per host
const BURST: u64 = 2_000;

fn policer_check(sets: PolicerSets) -> (EquivalenceCheck<'static, TupleKey>, PolicerConfig) {
    let nf_config = PolicerConfig { sets, ..PolicerConfig::new(RATE, BURST) };
    let stm = Stm::new(1).unwrap();
    let packet_sets = Policer::new(&stm, nf_config.clone()).unwrap().packet_sets().clone();
    let config = TraceConfig { workers: 2, batch_size: 32, ports: 2, periodic_ns: None, packet_sets };
    (EquivalenceCheck::new(config, 2, &five_tuple_key), nf_config)
}

#[test]
fn one_worker_gives_the_same_result_with_either_packet_set_choice() {
    let trace = wan_lan_trace(3);
    let (per_destination, config_d) = policer_check(PolicerSets::PerDestination);
    let (per_flow, config_f) = policer_check(PolicerSets::PerFlow);
    let a =
        per_destination.record(1, |stm| Policer::new(stm, config_d.clone()).unwrap(), &trace, |_, nf| nf.counters());
    let b = per_flow.record(1, |stm| Policer::new(stm, config_f.clone()).unwrap(), &trace, |_, nf| nf.counters());
    let report = EquivalenceReport::compare(a.unwrap(), b.unwrap());
    report.assert_equivalent();
    let c = report.sequential_state;
    assert!(c.passed > 5_000 && c.over_rate > 1_000 && c.lan_to_wan > 5_000 && c.unparsable == 1, "{c:?}");
}

#[test]
fn with_per_destination_sets_two_workers_police_exactly_like_one() {
    let trace = wan_lan_trace(11);
    let (check, config) = policer_check(PolicerSets::PerDestination);
    let report =
        assert_equivalent(&check, |stm| Policer::new(stm, config.clone()).unwrap(), &trace, |_, nf| nf.counters());
    assert!(report.parallel.load_imbalance < 1.5, "both workers carry hosts: {report}");
    let c = report.sequential_state;
    assert!(c.over_rate > 1_000 && c.passed > 5_000, "{c:?}");
    // No aggregate state but statistics: nothing to conflict on.
    assert_eq!(report.parallel.stats.aborts, 0);
}

#[test]
fn with_per_flow_sets_two_workers_keep_flow_order_and_the_rate() {
    // Flows to one host run on both workers and draw from one bucket in
    // commit order, so which frames pass may differ from one worker's
    // run, and over short windows a host may get more than the bucket's
    // bound (see the module docs). What holds: each flow's frames leave in
    // arrival order, every WAN frame is either passed or counted, and over
    // the whole run each host gets at most its burst plus its rate.
    let trace = wan_lan_trace(11);
    let (check, config) = policer_check(PolicerSets::PerFlow);
    let run = |workers| {
        let stm = Stm::new(workers).unwrap();
        let nf = Policer::new(&stm, config.clone()).unwrap();
        let config = TraceConfig { workers, ..check.config.clone() };
        let report = run_trace(&stm, &nf, &config, trace.iter().cloned()).unwrap();
        (outputs_per_flow(&report), nf.counters(), report)
    };
    let (_, c1, _) = run(1);
    let (sent_per_flow, c2, report) = run(2);
    assert!(report.load_imbalance() < 1.5, "both workers carry flows");
    let arrival: HashMap<&[u8], u64> = trace.iter().map(|p| (p.data(), p.timestamp_ns())).collect();
    let mut passed_bytes: HashMap<IpAddr, u64> = HashMap::new();
    for (flow, sent) in &sent_per_flow {
        let times: Vec<u64> = sent.iter().map(|(_, data)| arrival[data.as_slice()]).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{flow:?} reordered");
        if sent[0].0 == LAN {
            *passed_bytes.entry(flow.dst_ip).or_default() += sent.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
        }
    }
    assert_eq!(passed_bytes.len(), 16);
    for (host, bytes) in &passed_bytes {
        let offered: Vec<u64> = trace
            .iter()
            .filter(|p| p.port() == WAN && five_tuple(p.data()).is_some_and(|t| t.dst_ip == *host))
            .map(|p| p.timestamp_ns())
            .collect();
        let span_ns = offered.last().unwrap() - offered.first().unwrap();
        let allowed = u128::from(BURST) * 1_000_000_000 + u128::from(span_ns) * u128::from(RATE);
        assert!(u128::from(*bytes) * 1_000_000_000 <= allowed, "{host}: {bytes} bytes");
    }
    assert_eq!(c1.passed + c1.over_rate, c2.passed + c2.over_rate);
    assert_eq!((c1.lan_to_wan, c1.unparsable), (c2.lan_to_wan, c2.unparsable));
    assert!(c2.over_rate > 1_000, "{c2:?}");
}
