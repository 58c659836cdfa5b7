//! End-to-end tests of the parallel runtime's live mode: a parallel NF
//! (`kind: parallel-counter`, two workers) as one NF of a ferryd chain.
//! The NF forwards every packet and, when asked, sends a marker frame when
//! a packet set expires or its exit handler runs. Then a real NF from the
//! live table, the stateful firewall, between two sides of a testbed.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use common::chain::*;
use common::*;
use ferry_cli::chainctl;
use ferry_parallel::live::counter::{DstCounter, MARKER_ETHERTYPE, MARKER_EXPIRY};
use ferry_parallel::runtime::worker_of;
use ferry_wire::{build_frame, find_stamp, five_tuple, FiveTuple, FrameSpec, L4Proto};

/// The second test saturates the CPUs on purpose; the first must not lose
/// packets meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_parallel_nf_in_a_chain_forwards_every_packet_in_flow_order_on_both_workers() {
    if !privileged("parallel_nf_in_a_chain") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed(PORTS_TESTBED, "e2e_parallel/ports.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("par");
    let yaml = format!(
        r#"
name: par
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: par, domain: main, kind: parallel-counter, args: ["workers=2", "idle_ms=200", "expiry_marker=1"] }}
links:
  - {{ from: in, to: par }}
  - {{ from: par, to: out }}
"#
    );
    let (rc, _) = start(&dir, &yaml);
    let pcap = dir.path("out.pcap");
    let sent = 20_000u64;
    let report = {
        let pcap_arg = pcap.to_str().unwrap();
        let sink = spawn_sink(&tb, "sink", "s0", &["--idle-exit", "1500ms", "--pcap", pcap_arg]);
        let (count, rate) = (sent.to_string(), "10000");
        let args = [
            "gen",
            "xsk",
            "--dev",
            "g0",
            "--count",
            &count,
            "--rate",
            rate,
            "--dst-mac",
            "02:00:00:00:01:02",
            "--set",
            "flows=64",
            "--json",
        ];
        let gen = Ferry::spawn(&tb, "gen", &args).wait_json(Duration::from_secs(60));
        assert_eq!(u(&gen, "/sent"), sent, "{gen:#}");
        sink.wait_json(Duration::from_secs(30))
    };
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));

    // Every packet comes out, and the NF's counters agree at every step.
    // Besides the packets, the NF sent one marker per expired set.
    let outputs = c(&st, "par", "outputs");
    let markers = outputs - sent;
    assert_eq!(u(&report, "/packets"), outputs, "the sink got every packet and marker: {report:#}");
    assert_eq!(u(&report, "/streams/0/received"), sent, "the sink got every packet: {report:#}");
    assert_eq!(c(&st, "par", "rx_port"), sent, "the NF's socket received everything");
    assert_eq!(c(&st, "par", "received"), sent, "the chain thread dispatched everything");
    assert_eq!(c(&st, "par", "sent"), outputs, "every output got a frame and an out-link");
    assert_eq!(c(&st, "par", "tx_port"), outputs);
    assert_eq!(c(&st, "par", "no_frame") + c(&st, "par", "bad_port"), 0);
    assert!(c(&st, "par", "commits") > 0);

    // Both workers got work, exactly the flows the Toeplitz dispatch gives
    // them; and each flow's packets left in the order they were sent.
    let (w0, w1) = (c(&st, "par", "w0_packets"), c(&st, "par", "w1_packets"));
    assert!(w0 > 0 && w1 > 0, "both workers got packets: w0={w0} w1={w1}");
    assert_eq!(w0 + w1, sent);
    let frames = ferry_traffic::read_pcap(&pcap).expect("the sink's pcap");
    assert_eq!(frames.len() as u64, outputs);
    let sets = DstCounter::packet_sets();
    let mut per_worker = [0u64; 2];
    let mut last_seq = HashMap::new();
    let mut last_seen_ns = HashMap::new();
    let mut marker_times = Vec::new();
    let mut cross_flow_reorders = 0u64;
    let mut previous_seq = None;
    for (ts_ns, frame) in &frames {
        if frame[12..14] == MARKER_ETHERTYPE.to_be_bytes() {
            assert_eq!(frame[14], MARKER_EXPIRY);
            marker_times.push(*ts_ns);
            continue;
        }
        let tuple = five_tuple(frame).expect("generated UDP");
        last_seen_ns.insert(tuple, *ts_ns);
        let stamp = find_stamp(frame).expect("stamped frame");
        if let Some(prev) = last_seq.insert(tuple, stamp.seq) {
            assert!(stamp.seq > prev, "flow {tuple:?}: seq {} came after {prev}", stamp.seq);
        }
        if previous_seq.is_some_and(|p| stamp.seq < p) {
            cross_flow_reorders += 1;
        }
        previous_seq = Some(stamp.seq);
        per_worker[worker_of(&sets.classify(0, frame).expect("a flow"), 2)] += 1;
    }
    eprintln!("{} flows; {cross_flow_reorders} packets overtaken by another flow's", last_seq.len());
    assert!(last_seq.len() >= 64, "the traffic had many flows: {}", last_seq.len());
    assert_eq!(per_worker, [w0, w1], "per-worker counts match the dispatch of the flows seen");

    // Sets expire by time alone: the flows seen in the last 100 ms of
    // traffic were live (idle timeout 200 ms) when it stopped, and their
    // expiries came after the last packet, driven by the workers' ticks.
    assert_eq!(marker_times.len() as u64, markers);
    assert!(markers >= last_seq.len() as u64, "every flow's set expired: {markers} markers");
    let end = last_seen_ns.values().copied().max().unwrap();
    let live_at_end = last_seen_ns.values().filter(|&&t| t + 100_000_000 >= end).count();
    let expired_after = marker_times.iter().filter(|&&t| t > end).count();
    eprintln!("{markers} expiries, {expired_after} after the last packet; {live_at_end} flows live at the end");
    assert!(live_at_end > 0 && expired_after >= live_at_end, "{expired_after} expiries after the end");

    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

#[test]
fn a_slow_parallel_nf_pushes_back_upstream_and_drains_on_sigterm() {
    if !privileged("parallel_nf_backpressure_and_drain") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("parbp");
    // 20 us of work per packet on each of 2 workers: far slower than the
    // source, whose ring then fills.
    let yaml = r#"
name: parbp
domains: [ { name: main, frames: 4096, ring_size: 512 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["flows=64"] }
  - name: par
    domain: main
    kind: parallel-counter
    restart: false
    args: ["workers=2", "batch=8", "queue=2", "work_ns=20000", "exit_marker=1"]
  - { name: snk, domain: main, kind: sink }
links:
  - { from: src, to: par }
  - { from: par, to: snk }
"#;
    let (rc, _) = start(&dir, yaml);
    wait_until("traffic through the parallel NF", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 5_000));
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert!(c(&st, "src", "bp_blocks") + c(&st, "src", "bp_sleeps") > 0, "backpressure reached the source");
    assert_eq!(c(&st, "src", "drop_full"), 0, "nothing dropped upstream");
    // Never more than workers x (2 queue + 3) x batch, plus one burst
    // (batch x workers), inside the NF (see ferry_parallel::live).
    let bound = 2 * (2 * 2 + 3) * 8 + 8 * 2;
    let in_flight = c(&st, "par", "in_flight_max");
    assert!(in_flight > 0 && in_flight <= bound, "packets inside the NF: {in_flight}, bound {bound}");
    assert!(c(&st, "par", "w0_packets") > 0 && c(&st, "par", "w1_packets") > 0);
    assert_conserved(&rc);

    // SIGTERM under load: the NF drains, runs its exit handler (one marker
    // frame) and exits; restart is off, so its counters stay as it left them.
    let pid = pid_of(&st, "par");
    // SAFETY: plain kill of the NF process ferryd started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    wait_until("the NF to exit", || rc.status().is_ok_and(|s| s.nfs.iter().any(|n| n.name == "par" && !n.connected)));
    // The NF is gone, so its counters are final: wait for the sink to have
    // everything it sent (a loss shows as this wait timing out).
    wait_until("the sink to get everything the NF sent", || {
        rc.status().is_ok_and(|s| c(&s, "snk", "sunk") == c(&s, "par", "sent"))
    });
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    let received = c(&st, "par", "received");
    assert_eq!(c(&st, "par", "rx_ring"), received, "everything taken from the ring was dispatched");
    assert_eq!(c(&st, "par", "outputs"), received + 1, "every packet in the NF came out, plus the exit marker");
    assert_eq!(c(&st, "par", "sent"), received + 1);
    assert_eq!(c(&st, "par", "to_nf"), received + 1, "all of it was enqueued downstream");
    assert_eq!(c(&st, "snk", "sunk"), received + 1, "the sink got all of it");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

/// A UDP frame from `src_mac` to `dst_mac`.
fn udp_frame(src_mac: [u8; 6], dst_mac: [u8; 6], tuple: &FiveTuple) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    build_frame(&FrameSpec { src_mac, dst_mac, frame_len: 64 }, tuple, None, &mut buf).expect("a frame");
    buf
}

/// The reverse direction of `t` (an answer to it).
fn reversed(t: &FiveTuple) -> FiveTuple {
    FiveTuple { src_ip: t.dst_ip, dst_ip: t.src_ip, src_port: t.dst_port, dst_port: t.src_port, proto: t.proto }
}

#[test]
fn a_parallel_firewall_in_a_chain_lets_inside_traffic_out_and_only_answers_in() {
    if !privileged("parallel_firewall_in_a_chain") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tb = testbed(PORTS_TESTBED, "e2e_parallel/ports.yaml");
    let dut = tb.ns_name("dut").to_string();
    let (gen_ns, sink_ns) = (tb.ns_name("gen").to_string(), tb.ns_name("sink").to_string());
    let (gen_mac, sink_mac) = (mac(&tb, "gen", "g0"), mac(&tb, "sink", "s0"));
    let dir = TempDir::new("parfw");
    // NF port 0 is the internal side (socket on `inside`, out-link 0 back
    // to it), NF port 1 the external side (`outside`, out-link 1): the
    // links list both ports first, then the out-links in the same order.
    let yaml = format!(
        r#"
name: parfw
domains: [ {{ name: main }} ]
ports:
  - {{ name: inside, netns: {dut}, netdev: d0 }}
  - {{ name: outside, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: fw, domain: main, kind: parallel-firewall, args: ["workers=2", "idle_ms=20000"] }}
links:
  - {{ from: inside, to: fw }}
  - {{ from: outside, to: fw }}
  - {{ from: fw, to: inside }}
  - {{ from: fw, to: outside }}
"#
    );
    let (rc, _) = start(&dir, &yaml);
    let inject = |frames: &[Vec<u8>]| {
        in_netns(&sink_ns, || {
            let sock = RawSock::open("s0");
            for f in frames {
                sock.send(f);
            }
        })
    };

    // Before any connection: unsolicited UDP from outside, shaped like
    // answers of the generator's traffic (from port 5001 of 10.1/16 to
    // 10.0/16). The firewall drops all of it.
    let early: Vec<Vec<u8>> = (0..100u16)
        .map(|i| {
            let t = FiveTuple {
                src_ip: [10, 1, 0, 1 + i as u8].into(),
                dst_ip: [10, 0, 0, 1].into(),
                src_port: 5001,
                dst_port: 40_000 + i,
                proto: L4Proto::Udp,
            };
            udp_frame(sink_mac, gen_mac, &t)
        })
        .collect();

    let pcap = dir.path("out.pcap");
    let sent = 10_000u64;
    let report = {
        let pcap_arg = pcap.to_str().unwrap();
        let sink = spawn_sink(&tb, "sink", "s0", &["--idle-exit", "1500ms", "--pcap", pcap_arg]);
        inject(&early);
        let count = sent.to_string();
        let args = [
            "gen",
            "xsk",
            "--dev",
            "g0",
            "--count",
            &count,
            "--rate",
            "10000",
            "--dst-mac",
            "02:00:00:00:01:02",
            "--set",
            "flows=64",
            "--json",
        ];
        let gen = Ferry::spawn(&tb, "gen", &args).wait_json(Duration::from_secs(30));
        assert_eq!(u(&gen, "/sent"), sent, "{gen:#}");
        sink.wait_json(Duration::from_secs(30))
    };

    // Everything from inside went out, and nothing else did.
    assert_eq!(u(&report, "/packets"), sent, "the sink got every packet from inside and nothing more: {report:#}");
    assert_eq!(u(&report, "/streams/0/received"), sent, "{report:#}");
    let frames = ferry_traffic::read_pcap(&pcap).expect("the sink's pcap");
    assert_eq!(frames.len() as u64, sent);
    let mut connections: Vec<FiveTuple> = Vec::new();
    let mut seen = HashSet::new();
    for (_, frame) in &frames {
        let t = five_tuple(frame).expect("generated UDP");
        assert!(
            ferry_wire::prefix::to_flow_space(t.src_ip).octets()[12..14] == [10, 0] && t.dst_port == 5001,
            "only inside traffic came out: {t:?}"
        );
        if seen.insert(t) {
            connections.push(t);
        }
    }
    assert!(connections.len() >= 64, "many connections: {}", connections.len());

    // Now the outside answers 16 of the connections (they pass, to the
    // generator's side) and sends 16 near-answers from another port (no
    // connection: dropped), interleaved.
    let answers: Vec<FiveTuple> = connections.iter().take(16).map(reversed).collect();
    let strays: Vec<FiveTuple> = answers.iter().map(|a| FiveTuple { src_port: a.src_port + 1, ..*a }).collect();
    let late: Vec<Vec<u8>> = answers
        .iter()
        .zip(&strays)
        .flat_map(|(a, s)| [udp_frame(sink_mac, gen_mac, a), udp_frame(sink_mac, gen_mac, s)])
        .collect();
    let expected = answers.len();
    let (ready_tx, ready_rx) = mpsc::channel();
    let arrived: Vec<FiveTuple> = std::thread::scope(|s| {
        let listener = s.spawn(|| {
            in_netns(&gen_ns, move || {
                let sock = RawSock::open("g0");
                ready_tx.send(()).unwrap();
                let mut got = Vec::new();
                // Until 1 s after the last answer, to catch any stray that
                // got through (a stray later than that goes unseen here but
                // still fails the firewall's counters below); the hang
                // guard only ends a run whose answers never all come.
                let deadline = Instant::now() + HANG_GUARD;
                let mut end = deadline;
                while let Some(f) =
                    sock.recv_match(end.saturating_duration_since(Instant::now()), |f| five_tuple(f).is_some())
                {
                    got.push(five_tuple(&f).unwrap());
                    if got.len() == expected {
                        end = (Instant::now() + Duration::from_secs(1)).min(deadline);
                    }
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        inject(&late);
        listener.join().unwrap()
    });
    let arrived_set: HashSet<FiveTuple> = arrived.iter().copied().collect();
    assert_eq!(arrived.len(), answers.len(), "each answer arrived once, and nothing else: {arrived:?}");
    assert_eq!(arrived_set, answers.iter().copied().collect(), "exactly the answers came in");

    // The NF's counters: everything received, from its two sockets; what
    // it sent is the inside traffic plus the answers; the early
    // unsolicited frames and the strays are the drops.
    let received = sent + early.len() as u64 + late.len() as u64;
    // The NF's own counters are published once it has settled (nothing in
    // flight), which may be a moment after the last receive.
    let accounted = |s: &ferry_chain::proto::Status| -> u64 {
        ["outbound", "inbound", "blocked", "dropped_malformed", "dropped_unsupported"]
            .iter()
            .map(|n| c(s, "fw", n))
            .sum::<u64>()
    };
    wait_until("the firewall to receive and account for everything", || {
        rc.status().is_ok_and(|s| c(&s, "fw", "received") == received && accounted(&s) == received)
    });
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert_eq!(c(&st, "fw", "rx_port"), received, "all of it came from the NF's sockets");
    let outputs = c(&st, "fw", "outputs");
    assert_eq!(outputs, sent + answers.len() as u64, "inside traffic and answers passed");
    assert_eq!(received - outputs, (early.len() + strays.len()) as u64, "the unsolicited frames were dropped");
    assert_eq!(c(&st, "fw", "sent"), outputs);
    assert_eq!(c(&st, "fw", "tx_port"), outputs);
    assert_eq!(c(&st, "fw", "no_frame") + c(&st, "fw", "bad_port"), 0);
    let (w0, w1) = (c(&st, "fw", "w0_packets"), c(&st, "fw", "w1_packets"));
    assert!(w0 > 0 && w1 > 0, "both workers got packets: w0={w0} w1={w1}");
    assert_eq!(w0 + w1, received);

    // The firewall's own counters, published next to the runtime's.
    assert_eq!(c(&st, "fw", "outbound"), sent, "inside traffic passed");
    assert_eq!(c(&st, "fw", "inbound"), answers.len() as u64, "the answers passed");
    assert_eq!(c(&st, "fw", "blocked"), (early.len() + strays.len()) as u64, "unsolicited frames were blocked");
    assert_eq!(c(&st, "fw", "opened"), connections.len() as u64, "one connection per inside flow");
    assert_eq!(c(&st, "fw", "dropped_malformed") + c(&st, "fw", "dropped_unsupported"), 0);

    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}
