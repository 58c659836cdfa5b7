//! `ferry_pipeline` (bpf/pipeline.bpf.c): BPF_PROG_TEST_RUN tables. Test
//! runs without a context see the frame arrive on the loopback device
//! (ifindex 1), so chains are deployed for ifindex 1. The output of a test
//! run starts with the XDP metadata, if the program wrote any.

mod common;

use common::privileged;
use ferry_bpf::pipeline::*;
use ferry_bpf::{test_run, SLOT_MALFORMED, SLOT_NO_SOCKET};
use ferry_wire::{build_frame, fill_l4_checksum, verify_checksums, FiveTuple, FrameSpec, L4Proto};

const XDP_ABORTED: u32 = 0;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const LO: u32 = 1;

fn frame(proto: L4Proto, dport: u16) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 80 };
    let t = FiveTuple {
        src_ip: [10, 0, 0, 1].into(),
        dst_ip: [10, 0, 1, 2].into(),
        src_port: 1000,
        dst_port: dport,
        proto,
    };
    let mut f = vec![0u8; 80];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

fn el(kind: ElementKind, config: u32, nf: u32) -> Element {
    Element { kind, config, nf }
}

fn run(p: &Pipeline, f: &[u8]) -> (u32, Vec<u8>) {
    let out = test_run(p.program().program_fd().unwrap(), f, 1).unwrap();
    (out.action, out.data)
}

fn verdict(p: &Pipeline, slot: usize) -> u64 {
    p.program().verdicts().unwrap().packets[slot]
}

fn loaded() -> Pipeline {
    Pipeline::load().expect("load the pipeline (verifier)")
}

#[test]
fn unknown_ingress_goes_to_the_kernel() {
    if !privileged() {
        return;
    }
    let p = loaded();
    assert_eq!(run(&p, &frame(L4Proto::Udp, 53)).0, XDP_PASS);
    assert_eq!(verdict(&p, XDP_PASS as usize), 1);
}

#[test]
fn firewall_counter_forward_chain() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    // NF 1 = firewall (ACL), NF 2 = monitor (counter, flows), NF 3 = forwarder.
    let deny_dns = AclRule { proto: 17, dport_lo: 53, dport_hi: 53, action: ACL_DENY, ..AclRule::any(ACL_DENY) };
    p.set_acl(1, &[deny_dns], ACL_ALLOW, ACL_ALLOW).unwrap();
    p.set_forward(1, Forward { action: FWD_TX, ifindex: 0 }).unwrap();
    let chain = [
        el(ElementKind::Acl, 1, 1),
        el(ElementKind::Counter, 7, 2),
        el(ElementKind::FlowMonitor, 7, 2),
        el(ElementKind::Forward, 1, 3),
    ];
    p.deploy(10, LO, &chain).unwrap();
    let dns = frame(L4Proto::Udp, 53);
    assert_eq!(run(&p, &dns).0, XDP_DROP, "denied by the ACL");
    let web = frame(L4Proto::Tcp, 80);
    let (action, out) = run(&p, &web);
    assert_eq!(action, XDP_TX);
    assert_eq!(&out[..6], &web[6..12], "TX swaps the MACs");
    assert_eq!(&out[12..], &web[12..], "and changes nothing else");
    assert_eq!(p.counter(7).unwrap(), PlCount { packets: 1, bytes: web.len() as u64 });
    let flows = p.flows(7).unwrap();
    assert_eq!(flows.len(), 1);
    assert_eq!((u16::from_be(flows[0].0.flow.dport), flows[0].1.packets), (80, 1));
    assert_eq!(verdict(&p, XDP_DROP as usize) + verdict(&p, XDP_TX as usize), 2, "one verdict per frame");
}

#[test]
fn rewrite_keeps_checksums_valid() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    let rw = Rewrite {
        fields: RW_DST_IP | RW_DPORT | RW_DST_MAC,
        dst_ip: std::net::Ipv4Addr::new(192, 168, 7, 9).into(),
        dport: 8080u16.to_be(),
        dst_mac: [2, 0, 0, 0, 0, 0x99],
        ..Default::default()
    };
    p.set_rewrite(3, rw).unwrap();
    p.set_forward(2, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    p.deploy(11, LO, &[el(ElementKind::Rewrite, 3, 1), el(ElementKind::Forward, 2, 1)]).unwrap();
    let f = frame(L4Proto::Tcp, 80);
    assert!(verify_checksums(&f).unwrap());
    let (action, out) = run(&p, &f);
    assert_eq!(action, XDP_PASS);
    assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 0x99]);
    assert_eq!(&out[30..34], &[192, 168, 7, 9], "destination address");
    assert_eq!(&out[36..38], &8080u16.to_be_bytes(), "destination port");
    assert!(verify_checksums(&out).unwrap(), "IPv4 and TCP checksums updated incrementally");
}

/// IPv6: the rewrite element changes an IPv6 destination of TCP, UDP and
/// ICMPv6 (whose checksum covers the pseudo-header too) with the
/// checksum updated; an IPv4 rewrite leaves IPv6 addresses alone.
#[test]
fn rewrite_keeps_ipv6_checksums_valid() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    let to: std::net::IpAddr = "2001:db8:7::9".parse().unwrap();
    p.set_rewrite(3, Rewrite { fields: RW_DST_IP, dst_ip: to.into(), ..Default::default() }).unwrap();
    p.set_rewrite(
        4,
        Rewrite { fields: RW_DST_IP, dst_ip: std::net::Ipv4Addr::new(192, 168, 7, 9).into(), ..Default::default() },
    )
    .unwrap();
    p.set_forward(2, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 96 };
    for proto in [L4Proto::Tcp, L4Proto::Udp, L4Proto::Icmp] {
        let (src_ip, dst_ip) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        let t = FiveTuple { src_ip, dst_ip, src_port: 1000, dst_port: 80, proto };
        let mut f = vec![0u8; 96];
        build_frame(&spec, &t, None, &mut f).unwrap();
        let mut through = |config: u32| {
            let path = [el(ElementKind::Rewrite, config, 1), el(ElementKind::Forward, 2, 1)];
            p.deploy(11, LO, &path).unwrap();
            let out = run(&p, &f);
            p.remove(11, LO, &path).unwrap();
            out
        };
        let (action, out) = through(3);
        assert_eq!(action, XDP_PASS);
        assert_eq!(ferry_wire::five_tuple(&out).unwrap().dst_ip, to, "{proto:?}");
        assert!(verify_checksums(&out).unwrap(), "{proto:?}: the checksum over the new pseudo-header");
        assert_eq!(through(4).1, f, "{proto:?}: an IPv4 address is not written into an IPv6 header");
    }
}

/// A UDP checksum that a rewrite brings to 0 leaves as 0xffff: in UDP, 0
/// means "no checksum" (RFC 768). One rewrite helper serves the pipeline
/// and the hybrid NFs, so both get this right.
#[test]
fn rewrite_never_leaves_a_udp_checksum_of_zero() {
    if !privileged() {
        return;
    }
    const UDP_CHECKSUM: std::ops::Range<usize> = 40..42;
    let mut f = frame(L4Proto::Udp, 9);
    fill_l4_checksum(&mut f).unwrap();
    assert_ne!(f[UDP_CHECKSUM], [0, 0], "a frame with a UDP checksum");
    // The one source port for which the correct checksum folds to 0 (and
    // is sent as 0xffff): found by filling it in from scratch.
    let sport = (1..=u16::MAX)
        .find(|p| {
            let mut g = f.clone();
            g[34..36].copy_from_slice(&p.to_be_bytes());
            fill_l4_checksum(&mut g).unwrap();
            g[UDP_CHECKSUM] == [0xff, 0xff]
        })
        .expect("a port whose checksum folds to 0");
    let mut p = loaded();
    p.set_rewrite(5, Rewrite { fields: RW_SPORT, sport: sport.to_be(), ..Default::default() }).unwrap();
    p.set_forward(6, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    p.deploy(14, LO, &[el(ElementKind::Rewrite, 5, 1), el(ElementKind::Forward, 6, 1)]).unwrap();
    let (action, out) = run(&p, &f);
    assert_eq!(action, XDP_PASS);
    assert_eq!(&out[34..36], &sport.to_be_bytes());
    assert_eq!(&out[UDP_CHECKSUM], &[0xff, 0xff], "never 0: that would mean no checksum");
    assert!(verify_checksums(&out).unwrap());
}

#[test]
fn chains_longer_than_the_stages_recirculate() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    p.set_forward(4, Forward { action: FWD_DROP, ifindex: 0 }).unwrap();
    // Nine elements over four stages: three passes, two tail calls.
    let mut chain: Vec<Element> = (0..8).map(|i| el(ElementKind::Counter, 20 + i, 1 + i)).collect();
    chain.push(el(ElementKind::Forward, 4, 9));
    p.deploy(12, LO, &chain).unwrap();
    assert_eq!(run(&p, &frame(L4Proto::Udp, 9)).0, XDP_DROP);
    for i in 0..8 {
        assert_eq!(p.counter(20 + i).unwrap().packets, 1, "counter {i}");
    }
    assert_eq!(verdict(&p, XDP_DROP as usize), 1);
}

#[test]
fn missing_stage_entry_goes_to_the_slow_path_with_metadata() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    // Stage 1 of NF 2 has no entry: the slow path gets it, with the
    // reason in the metadata; no AF_XDP socket is bound on this queue,
    // so it is counted as such and dropped, not handed to the kernel.
    p.set_ctl(
        0,
        PlKey { chain: 13, nf: 1 },
        PlCtl { element: ElementKind::Counter as u32, config: 30, nf_complete: 1, next_stage: 1, next_nf: 2, _pad: 0 },
    )
    .unwrap();
    p.set_entry(LO, PlEntry { chain: 13, nf: 1, stage: 0, _pad: 0 }).unwrap();
    let f = frame(L4Proto::Udp, 9);
    let (action, out) = run(&p, &f);
    assert_eq!(action, XDP_DROP);
    assert_eq!(verdict(&p, SLOT_NO_SOCKET), 1);
    let meta: Vec<u32> = out[..16].chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
    assert_eq!(meta, vec![SLOW_NO_RULE, 13, 2, 1], "reason, chain, NF, stage");
    assert_eq!(&out[16..], &f[..]);
}

#[test]
fn policer_drops_beyond_the_burst() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    p.set_policer(5, 0, 2).unwrap();
    p.set_forward(5, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    p.deploy(14, LO, &[el(ElementKind::Policer, 5, 1), el(ElementKind::Forward, 5, 1)]).unwrap();
    let f = frame(L4Proto::Udp, 9);
    let actions: Vec<u32> = (0..4).map(|_| run(&p, &f).0).collect();
    assert_eq!(actions, vec![XDP_PASS, XDP_PASS, XDP_DROP, XDP_DROP], "burst of 2, no refill at rate 0");
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    p.set_forward(6, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    p.deploy(15, LO, &[el(ElementKind::Forward, 6, 1)]).unwrap();
    let mut f = frame(L4Proto::Tcp, 80);
    f.truncate(40); // IPv4 header, then half a TCP header
    let (action, _) = run(&p, &f);
    assert_eq!(action, XDP_DROP);
    assert_eq!(verdict(&p, SLOT_MALFORMED), 1);
    assert_eq!(verdict(&p, XDP_ABORTED as usize), 0);
}

#[test]
fn removing_a_chain_leaves_the_others_alone() {
    if !privileged() {
        return;
    }
    let mut p = loaded();
    p.set_forward(7, Forward { action: FWD_DROP, ifindex: 0 }).unwrap();
    let a = [el(ElementKind::Counter, 40, 1), el(ElementKind::Forward, 7, 1)];
    let b = [el(ElementKind::Counter, 41, 1), el(ElementKind::Forward, 7, 1)];
    p.deploy(1, LO, &a).unwrap();
    // Chain 2 enters on another ifindex; same NF id, other chain: isolated.
    p.deploy(2, 999, &b).unwrap();
    p.remove(2, 999, &b).unwrap();
    assert_eq!(run(&p, &frame(L4Proto::Udp, 9)).0, XDP_DROP);
    assert_eq!(p.counter(40).unwrap().packets, 1);
    assert_eq!(p.counter(41).unwrap().packets, 0);
    // Two elements of one NF at one stage cannot be expressed.
    let long: Vec<Element> = (0..5).map(|i| el(ElementKind::Counter, 50 + i, 1)).collect();
    assert!(p.deploy(3, 998, &long).is_err());
}

/// Counter, ether-swap, then out to the kernel (XDP_PASS, so the output
/// shows the one swap: a TX would swap once more).
fn l2fwd_pipeline() -> Pipeline {
    let mut p = loaded();
    p.set_forward(8, Forward { action: FWD_PASS, ifindex: 0 }).unwrap();
    let chain = [el(ElementKind::Counter, 60, 1), el(ElementKind::EtherSwap, 0, 1), el(ElementKind::Forward, 8, 1)];
    p.deploy(16, LO, &chain).unwrap();
    p
}

#[test]
fn ether_swap_swaps_the_macs_and_goes_on() {
    if !privileged() {
        return;
    }
    let p = l2fwd_pipeline();
    let f = frame(L4Proto::Udp, 9);
    let (action, out) = run(&p, &f);
    assert_eq!(action, XDP_PASS);
    assert_eq!((&out[..6], &out[6..12]), (&f[6..12], &f[..6]), "MACs swapped");
    assert_eq!(&out[12..], &f[12..], "nothing else changed");
    assert_eq!(p.counter(60).unwrap().packets, 1);
}

/// l2fwd's XDP form against the l2fwd NF on mutated frames: a frame the
/// shared parser accepts leaves with the NF's bytes; one it refuses (the
/// one difference, which the placement docs state) is counted malformed
/// and dropped, where the NF would send it on.
#[test]
fn ether_swap_sends_on_what_the_l2fwd_nf_sends() {
    use ferry_nf::{L2Fwd, PacketNf, Verdict};
    if !privileged() {
        return;
    }
    let p = l2fwd_pipeline();
    let templates = || vec![frame(L4Proto::Udp, 9), frame(L4Proto::Tcp, 80), frame(L4Proto::Icmp, 0)];
    common::mutated_frames_agree(templates, 60, |f| {
        let mut by_nf = f.to_vec();
        let nf_verdict = L2Fwd::new().process(&mut by_nf);
        if f.len() < 14 {
            proptest::prop_assert_eq!(nf_verdict, Verdict::Drop);
            return Ok(());
        }
        proptest::prop_assert_eq!(nf_verdict, Verdict::Tx);
        let malformed = verdict(&p, SLOT_MALFORMED);
        let (action, out) = run(&p, f);
        if ferry_wire::flow::parse(f).is_ok() {
            proptest::prop_assert_eq!(action, XDP_PASS);
            proptest::prop_assert_eq!(out, by_nf, "{:02x?}", f);
        } else {
            proptest::prop_assert_eq!(action, XDP_DROP, "{:02x?}", f);
            proptest::prop_assert_eq!(verdict(&p, SLOT_MALFORMED), malformed + 1);
        }
        Ok(())
    });
}

/// A tap copies what enters or leaves the NF it names, nothing else, and
/// the frames go on as they would have: the ACL NF's "out" holds only what
/// it passed, its "in" every frame, byte for byte, and after disarming
/// nothing more is copied.
#[test]
fn a_tap_copies_one_nf_side_and_changes_no_verdict() {
    use ferry_bpf::capture::{PipelineTaps, TapSide};
    if !privileged() {
        return;
    }
    let mut p = loaded();
    let deny_dns = AclRule { proto: 17, dport_lo: 53, dport_hi: 53, action: ACL_DENY, ..AclRule::any(ACL_DENY) };
    p.set_acl(1, &[deny_dns], ACL_ALLOW, ACL_ALLOW).unwrap();
    p.set_forward(1, Forward { action: FWD_TX, ifindex: 0 }).unwrap();
    p.deploy(10, LO, &[el(ElementKind::Acl, 1, 1), el(ElementKind::Counter, 7, 2), el(ElementKind::Forward, 1, 2)])
        .unwrap();
    let (dns, web) = (frame(L4Proto::Udp, 53), frame(L4Proto::Tcp, 80));
    let taps = PipelineTaps::open(&p).unwrap();
    for (side, expect) in [(TapSide::Out, vec![web.clone()]), (TapSide::In, vec![dns.clone(), web.clone()])] {
        let mut tap = taps.arm(10, 1, side, 0, 7).unwrap().expect("a free slot");
        // Two slots: a second capture on the pipeline, a third refused.
        let mut second = taps.arm(10, 2, TapSide::In, 0, 8).unwrap().expect("the other slot");
        assert!(taps.arm(10, 2, TapSide::In, 0, 9).unwrap().is_none());
        assert_eq!(run(&p, &dns).0, XDP_DROP);
        assert_eq!(run(&p, &web).0, XDP_TX);
        let mut got = Vec::new();
        tap.drain(|c| {
            assert_eq!((c.session, c.orig_len as usize), (7, c.bytes.len()));
            got.push(c.bytes)
        });
        assert_eq!(got, expect, "{side:?}");
        assert_eq!(tap.disarm().unwrap(), (expect.len() as u64, 0));
        let mut at_counter = Vec::new();
        second.drain(|c| at_counter.push(c.bytes));
        assert_eq!(at_counter, vec![web.clone()], "NF 2 got only what NF 1 passed");
    }
    // Another chain's frames, and any frame once disarmed, are not copied.
    let mut other = taps.arm(11, 1, TapSide::In, 16, 9).unwrap().unwrap();
    run(&p, &web);
    other.disarm().unwrap();
    run(&p, &web);
    assert_eq!(other.drain(|_| {}), 0);
    drop(other);
    // A snap length keeps the frame's head and its whole length.
    let mut snap = taps.arm(10, 2, TapSide::In, 16, 10).unwrap().unwrap();
    run(&p, &web);
    let mut got = Vec::new();
    snap.drain(|c| got.push(c));
    assert_eq!((got[0].bytes.as_slice(), got[0].orig_len as usize), (&web[..16], web.len()));
}
