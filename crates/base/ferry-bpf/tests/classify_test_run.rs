//! The edge classifier (bpf/classify.bpf.c) decides every frame as the
//! router NF's table (ferry-nf's classify::Table) does: a decision table
//! of fields and first matches run with BPF_PROG_TEST_RUN, then random
//! mutations and truncations of tagged and untagged frames. The rule a
//! frame took is read from the program's per-rule hit counters.

mod common;

use std::net::IpAddr;

use common::{mutated_frames_agree, privileged};
use ferry_bpf::classify::{Classifier, Unmatched};
use ferry_bpf::test_run;
use ferry_wire::classify::{Decision, Table};
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};
use proptest::prop_assert_eq;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
/// Entry 0 has a device (loopback); entry 1 has none, so its frames drop.
const LO: u32 = 1;
const RULES: [&str; 8] = [
    "out=0,src=10.9.0.0/16,dport=53",
    "out=1,vlan=200",
    "out=0,dst=10.1.0.0/16",
    "out=1,dport=80",
    "out=0,src=192.168.0.0/24,dst=192.168.1.0/24,vlan=7,dport=443",
    "out=1,src=2001:db8:9::/48,dport=53",
    "out=0,vlan=100,inner_vlan=300",
    "out=0,dst=2001:db8::/32",
];

fn classifier(unmatched: Unmatched) -> Classifier {
    let mut c = Classifier::load(&Table::parse(&RULES).unwrap().rules, unmatched).expect("load (verifier)");
    c.set_entry(0, LO).unwrap();
    c
}

fn frame(proto: L4Proto, src: [u8; 4], dst: [u8; 4], dport: u16, vlan: Option<u16>) -> Vec<u8> {
    tagged(build(proto, src.into(), dst.into(), dport), vlan.as_slice())
}

fn frame6(proto: L4Proto, src: &str, dst: &str, dport: u16, vlans: &[u16]) -> Vec<u8> {
    tagged(build(proto, src.parse().unwrap(), dst.parse().unwrap(), dport), vlans)
}

fn build(proto: L4Proto, src_ip: IpAddr, dst_ip: IpAddr, dport: u16) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 80 };
    let t = FiveTuple { src_ip, dst_ip, src_port: 1000, dst_port: dport, proto };
    let mut f = vec![0u8; spec.frame_len];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

/// `f` with VLAN tags of ids `vlans` (outermost first): one 802.1Q tag, or
/// an 802.1ad tag and an 802.1Q one.
fn tagged(mut f: Vec<u8>, vlans: &[u16]) -> Vec<u8> {
    for (i, vid) in vlans.iter().enumerate().rev() {
        let tpid: u16 = if i == 0 && vlans.len() > 1 { 0x88a8 } else { 0x8100 };
        f.splice(12..12, [(tpid >> 8) as u8, tpid as u8, (vid >> 8) as u8, *vid as u8]);
    }
    f
}

/// What the program did with `f`: its action and the rule whose hit
/// counter moved (None: the default's moved).
fn run(c: &Classifier, f: &[u8]) -> (u32, Option<usize>) {
    let (before, default_before) = c.hits(RULES.len()).unwrap();
    let action = test_run(c.program_fd().unwrap(), f, 1).unwrap().action;
    let (after, default_after) = c.hits(RULES.len()).unwrap();
    let moved: Vec<usize> = (0..RULES.len()).filter(|&i| after[i] != before[i]).collect();
    match (moved.as_slice(), default_after - default_before) {
        ([], 1) => (action, None),
        ([i], 0) => (action, Some(*i)),
        ([], 0) => (action, None),
        other => panic!("hit counters moved oddly: {other:?}"),
    }
}

/// The action and rule the router's decision implies here.
fn expected(table: &Table, f: &[u8], unmatched: u32) -> (u32, Option<usize>) {
    match table.decide(f) {
        Decision::Malformed => (XDP_DROP, None),
        Decision::Default => (unmatched, None),
        Decision::Rule(i) if table.rules[i].out == 0 => (XDP_REDIRECT, Some(i)),
        Decision::Rule(i) => (XDP_DROP, Some(i)),
    }
}

#[test]
fn the_decision_table() {
    if !privileged() {
        return;
    }
    use L4Proto::{Tcp, Udp};
    let c = classifier(Unmatched::Drop);
    let rows: Vec<(&str, Vec<u8>, u32, Option<usize>)> = vec![
        ("src prefix and port", frame(Udp, [10, 9, 1, 1], [10, 1, 0, 1], 53, None), XDP_REDIRECT, Some(0)),
        ("src prefix, other port: dst", frame(Udp, [10, 9, 1, 1], [10, 1, 0, 1], 54, None), XDP_REDIRECT, Some(2)),
        (
            "vlan first (entry without a device)",
            frame(Udp, [10, 0, 0, 1], [10, 1, 0, 1], 9, Some(200)),
            XDP_DROP,
            Some(1),
        ),
        ("other vlan: dst", frame(Udp, [10, 0, 0, 1], [10, 1, 0, 1], 9, Some(201)), XDP_REDIRECT, Some(2)),
        ("tcp port", frame(Tcp, [10, 0, 0, 1], [10, 2, 0, 1], 80, None), XDP_DROP, Some(3)),
        ("every field", frame(Tcp, [192, 168, 0, 9], [192, 168, 1, 9], 443, Some(7)), XDP_REDIRECT, Some(4)),
        ("every field but the vlan", frame(Tcp, [192, 168, 0, 9], [192, 168, 1, 9], 443, None), XDP_DROP, None),
        ("nothing matches", frame(Udp, [10, 0, 0, 1], [10, 2, 0, 1], 81, None), XDP_DROP, None),
        ("IPv6 src prefix and port", frame6(Udp, "2001:db8:9::1", "2001:db9::1", 53, &[]), XDP_DROP, Some(5)),
        ("IPv6 dst prefix", frame6(Tcp, "2001:db9::1", "2001:db8::7", 22, &[]), XDP_REDIRECT, Some(7)),
        ("an IPv4 prefix never matches IPv6", frame6(Udp, "::1:1", "::10.1.0.1", 9, &[]), XDP_DROP, None),
        ("QinQ 100/300", frame6(Udp, "fe80::1", "2001:db9::1", 9, &[100, 300]), XDP_REDIRECT, Some(6)),
        ("QinQ 200/300: outer 200", frame6(Udp, "fe80::1", "2001:db9::1", 9, &[200, 300]), XDP_DROP, Some(1)),
        ("QinQ 100/301", frame6(Udp, "fe80::1", "2001:db9::1", 9, &[100, 301]), XDP_DROP, None),
    ];
    for (what, f, action, rule) in rows {
        assert_eq!(run(&c, &f), (action, rule), "{what}");
    }
    let v = c.verdicts().unwrap();
    let truncated = frame(Udp, [10, 9, 1, 1], [10, 1, 0, 1], 53, None)[..30].to_vec();
    assert_eq!(run(&c, &truncated), (XDP_DROP, None), "malformed");
    assert_eq!(c.verdicts().unwrap().packets[5], v.packets[5] + 1, "counted as malformed");
    let kernel = classifier(Unmatched::Kernel);
    assert_eq!(run(&kernel, &frame(Udp, [10, 0, 0, 1], [10, 2, 0, 1], 81, None)), (XDP_PASS, None), "default: kernel");
}

#[test]
fn xdp_decides_as_the_router_on_mutated_frames() {
    if !privileged() {
        return;
    }
    let table = Table::parse(&RULES).unwrap();
    let c = classifier(Unmatched::Kernel);
    let templates = || {
        vec![
            frame(L4Proto::Udp, [10, 9, 1, 1], [10, 1, 0, 1], 53, None),
            frame(L4Proto::Tcp, [192, 168, 0, 9], [192, 168, 1, 9], 443, Some(7)),
            frame(L4Proto::Udp, [10, 0, 0, 1], [10, 1, 0, 1], 9, Some(200)),
            frame(L4Proto::Tcp, [10, 0, 0, 1], [10, 2, 0, 1], 80, None),
            frame6(L4Proto::Udp, "2001:db8:9::1", "2001:db8::2", 53, &[]),
            frame6(L4Proto::Tcp, "fe80::1", "2001:db9::1", 9, &[100, 300]),
        ]
    };
    mutated_frames_agree(templates, 80, |f| {
        // BPF_PROG_TEST_RUN refuses a frame shorter than Ethernet's header
        // (no driver hands one to XDP either).
        if f.len() < 14 {
            return Ok(());
        }
        let (action, rule) = expected(&table, f, XDP_PASS);
        prop_assert_eq!(run(&c, f), (action, rule), "frame {:02x?}", f);
        Ok(())
    });
}
