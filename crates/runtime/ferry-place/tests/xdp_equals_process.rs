//! An NF placed in XDP decides every frame as its process does: the
//! lowered firewall and flow monitor, installed in a real stage pipeline
//! and run with BPF_PROG_TEST_RUN, against the NFs themselves, on random
//! and mutated frames of both IP versions, untagged and with one to
//! three VLAN tags. Test runs without a context see the frame arrive
//! on the loopback device (ifindex 1).

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv6Addr};

use ferry_bpf::pipeline::Pipeline;
use ferry_bpf::{test_run, SLOT_NO_SOCKET};
use ferry_nf::firewall_rules::parse_fw_rules;
use ferry_nf::flow_monitor::FlowKey;
use ferry_nf::{Firewall, FlowMonitor, Lookup, PacketNf, Verdict};
use ferry_place::{install, lower, OffloadedNf, Target};
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const LO: u32 = 1;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const RULES: &str = "deny src 10.0.0.0/8 proto udp dport 53
allow proto tcp dport 80-90
deny dst 192.0.2.0/24
allow proto icmp
allow src 172.16.0.0/12 sport 1000-1999
deny src 2001:db8:1::/48 dport 80-90
allow src 2001:db8::/32 proto udp
allow dst fe80::/10 proto icmpv6
default deny
";
/// The same rules, with frames that carry no IP header denied too.
const RULES_NON_IP_DENY: &str = "allow proto tcp dport 80-90
allow src 2001:db8::/32 proto udp
non-ip deny
default deny
";

fn privileged() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "BPF tests need root (CAP_BPF, CAP_NET_ADMIN) in CI");
    eprintln!("skipping: BPF tests need root");
    false
}

/// What the placed pipeline did with `f`: XDP_PASS where it handed the
/// frame on to the next NF's AF_XDP socket. A test run binds no socket,
/// so that frame is counted `no_socket` and dropped: that count tells it.
fn pipeline_action(pipeline: &Pipeline, f: &[u8]) -> u32 {
    let handed_on = || pipeline.program().verdicts().unwrap().packets[SLOT_NO_SOCKET];
    let before = handed_on();
    let action = test_run(pipeline.program().program_fd().unwrap(), f, 1).unwrap().action;
    if handed_on() > before {
        XDP_PASS
    } else {
        action
    }
}

fn frame(
    src: impl Into<IpAddr>,
    dst: impl Into<IpAddr>,
    proto: L4Proto,
    sport: u16,
    dport: u16,
    len: usize,
) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len };
    let t = FiveTuple { src_ip: src.into(), dst_ip: dst.into(), src_port: sport, dst_port: dport, proto };
    let mut f = vec![0u8; len];
    let n = build_frame(&spec, &t, None, &mut f).unwrap();
    f.truncate(n);
    f
}

/// The firewall then the flow monitor, placed in XDP on ifindex 1.
fn placed(rule_file: &std::path::Path) -> (Pipeline, ferry_place::Installed) {
    let nf = |name: &str, kind: &str, args: &[String]| OffloadedNf {
        name: name.into(),
        kind: kind.into(),
        lowering: lower(kind, args).unwrap(),
    };
    let path = [nf("fw", "firewall", &[rule_file.display().to_string()]), nf("mon", "flow-monitor", &[])];
    let mut p = Pipeline::load().expect("load the pipeline (verifier)");
    let installed = install(&mut p, 7, LO, &path, &[11, 12], Target::Xsk { nf: 13 }).unwrap();
    (p, installed)
}

/// A pair of addresses of one version: IPv4 from a few rule-relevant
/// ones and random, or IPv6 likewise.
fn addr_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    let v4 = prop_oneof![
        Just([10, 1, 2, 3]),
        Just([172, 16, 9, 9]),
        Just([192, 0, 2, 7]),
        Just([198, 51, 100, 1]),
        any::<[u8; 4]>()
    ]
    .prop_map(IpAddr::from);
    let v6 = prop_oneof![
        Just("2001:db8::1".parse::<Ipv6Addr>().unwrap()),
        Just("2001:db8:1::7".parse().unwrap()),
        Just("fe80::1".parse().unwrap()),
        any::<u128>().prop_map(Ipv6Addr::from)
    ]
    .prop_map(IpAddr::V6);
    prop_oneof![(v4.clone(), v4), (v6.clone(), v6)]
}

/// `f` with `tags` VLAN tags pushed after the MACs (802.1ad outermost).
fn tagged(mut f: Vec<u8>, tags: usize) -> Vec<u8> {
    for i in 0..tags {
        let tpid: u16 = if i + 1 == tags && tags > 1 { 0x88a8 } else { 0x8100 };
        f.splice(12..12, [(tpid >> 8) as u8, tpid as u8, 0, i as u8 + 1]);
    }
    f
}

fn frames() -> impl Strategy<Value = Vec<u8>> {
    let proto = prop_oneof![Just(L4Proto::Udp), Just(L4Proto::Tcp), Just(L4Proto::Icmp)];
    let port = prop_oneof![Just(53u16), 79..92u16, 999..1001u16, any::<u16>()];
    let edits = proptest::collection::vec((0usize..80, any::<u8>()), 0..3);
    let tags = prop_oneof![4 => Just(0usize), 1 => Just(1), 1 => Just(2), 1 => Just(3)];
    let shape = (addr_pair(), proto, port.clone(), port, 80usize..200, tags);
    (shape, edits, proptest::option::of(0usize..80)).prop_map(
        |(((src, dst), proto, sport, dport, len, tags), edits, cut)| {
            let mut f = tagged(frame(src, dst, proto, sport, dport, len), tags);
            for (pos, byte) in edits {
                f[pos] = byte;
            }
            if let Some(n) = cut.filter(|n| *n >= 14) {
                f.truncate(n);
            }
            f
        },
    )
}

#[test]
fn placed_firewall_and_monitor_decide_as_their_processes() {
    if !privileged() {
        return;
    }
    for (i, rules) in [RULES, RULES_NON_IP_DENY].into_iter().enumerate() {
        for lookup in [Lookup::BitVector, Lookup::Linear] {
            placed_and_process_agree(rules, lookup, i);
        }
    }
}

fn placed_and_process_agree(rules: &str, lookup: Lookup, case: usize) {
    let dir = std::env::temp_dir().join(format!("ferry-place-equal-{}-{case}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("fw.rules");
    std::fs::write(&file, rules).unwrap();
    let (pipeline, installed) = placed(&file);
    // Both sides see every frame the runner tries, shrinking included.
    let fw = RefCell::new(Firewall::new(parse_fw_rules(rules).unwrap(), lookup));
    let mon = RefCell::new(FlowMonitor::new());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(2000));
    let (passed, dropped) = (Cell::new(0), Cell::new(0));
    let result = runner.run(&frames(), |f| {
        let mut copy = f.clone();
        let mut want = fw.borrow_mut().process(&mut copy);
        if want == Verdict::Pass {
            want = mon.borrow_mut().process(&mut copy);
        }
        let got = pipeline_action(&pipeline, &f);
        let want = match want {
            Verdict::Pass => XDP_PASS,
            _ => XDP_DROP,
        };
        prop_assert_eq!(got, want, "frame {:02x?}", f);
        let tally = if got == XDP_PASS { &passed } else { &dropped };
        tally.set(tally.get() + 1);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (passed, dropped, fw, mon) = (passed.get(), dropped.get(), fw.into_inner(), mon.into_inner());
    assert!(passed > 100 && dropped > 100, "both ways taken: {passed} passed, {dropped} dropped");
    // The same counts: the firewall's rx and pass, the monitor's rx and
    // every flow's packets and bytes.
    let counters = installed.counters(&pipeline).unwrap();
    let fw_counts = fw.counters();
    let malformed = fw_counts[4];
    assert_eq!(
        counters[0],
        [("rx".to_string(), fw_counts[0] - malformed), ("pass".to_string(), fw_counts[1] + fw_counts[2])]
    );
    assert_eq!(counters[1], [("rx".to_string(), mon.counters()[0])]);
    let mut xdp_flows: Vec<(FlowKey, u64, u64)> = pipeline
        .flows(installed.nfs[1].flow_monitor.unwrap())
        .unwrap()
        .into_iter()
        .map(|(k, c)| {
            let key = FlowKey {
                src: k.flow.saddr.to_ipv6(),
                dst: k.flow.daddr.to_ipv6(),
                sport: u16::from_be(k.flow.sport),
                dport: u16::from_be(k.flow.dport),
                proto: k.flow.proto,
            };
            (key, c.packets, c.bytes)
        })
        .collect();
    xdp_flows.sort();
    let nf_flows: Vec<(FlowKey, u64, u64)> = mon.flows().into_iter().map(|(k, c)| (k, c.packets, c.bytes)).collect();
    assert_eq!(xdp_flows, nf_flows);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The payload scan as placement lowers and installs it: the same
/// verdicts as its process on frames with and without the patterns, and
/// its `matched` counter the process's drop_matched.
#[test]
fn a_placed_payload_scan_decides_as_its_process() {
    if !privileged() {
        return;
    }
    let args = ["drop".to_string(), "attack".into(), "hex:00ff00".into()];
    let path = [OffloadedNf {
        name: "scan".into(),
        kind: "payload-scan".into(),
        lowering: lower("payload-scan", &args).unwrap(),
    }];
    let mut pipeline = Pipeline::load().expect("load the pipeline (verifier)");
    let installed = install(&mut pipeline, 7, LO, &path, &[11], Target::Xsk { nf: 12 }).unwrap();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let nf = RefCell::new(ferry_nf::by_name("payload-scan", &argv).unwrap());
    let payload = proptest::collection::vec(
        prop_oneof![Just(b'a'), Just(b't'), Just(b'c'), Just(b'k'), Just(0u8), Just(0xff)],
        0..300,
    );
    let strategy = (prop_oneof![Just(L4Proto::Udp), Just(L4Proto::Tcp)], payload, 0usize..300, any::<bool>());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(600));
    let result = runner.run(&strategy, |(proto, mut payload, at, v6)| {
        // Plant a pattern somewhere in half the frames.
        if at % 2 == 0 && at / 2 + 6 <= payload.len() {
            payload[at / 2..at / 2 + 6].copy_from_slice(b"attack");
        }
        let (src, dst, ip_len): (IpAddr, IpAddr, usize) = if v6 {
            ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap(), 40)
        } else {
            ([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 20)
        };
        let at = 14 + ip_len + proto.header_len();
        let mut f = frame(src, dst, proto, 1, 2, at + payload.len().max(26));
        f[at..at + payload.len()].copy_from_slice(&payload);
        let want = match nf.borrow_mut().process(&mut f.clone()) {
            Verdict::Pass => XDP_PASS,
            _ => XDP_DROP,
        };
        let got = pipeline_action(&pipeline, &f);
        prop_assert_eq!(got, want, "frame {:02x?}", f);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let counts = nf.into_inner().counters().to_vec();
    let drop_matched = counts[4];
    assert!(drop_matched > 100 && counts[1] > 100, "both ways taken: {counts:?}");
    let xdp = installed.counters(&pipeline).unwrap();
    assert_eq!(
        xdp[0],
        [
            ("rx".to_string(), counts[0]),
            ("matched".to_string(), drop_matched),
            ("on".to_string(), counts[0] - drop_matched)
        ]
    );
}
