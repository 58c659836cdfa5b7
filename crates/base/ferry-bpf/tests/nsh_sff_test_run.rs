//! The NSH service function forwarder (bpf/nsh_sff.bpf.c) run with
//! BPF_PROG_TEST_RUN: a table of roles, forwarding entries and frames,
//! each row's action, counter and the frame the program left (read back
//! with ferry-wire's NSH parser), then the frames that leave with NSH
//! decoded by tshark, an independent reader. Test runs without a context
//! see the frame arrive on the loopback device (ifindex 1): each row gives
//! that device its role; DEVMAP slot 0 sends to it too.

mod common;

use common::privileged;
use ferry_bpf::nsh::{GpeEnd, NshAction, NshEncap, NshRole, NshSff, PathHop, NSH_COUNTER_NAMES};
use ferry_bpf::test_run;
use ferry_wire::classify::Rule;
use ferry_wire::nsh::{NshContext, NshPacket, NshRepr, ETHERTYPE_NSH};
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
const LO: u32 = 1;
const NEXT_SFF: [u8; 6] = [2, 0, 0, 0, 9, 2];
const THIS_SFF: [u8; 6] = [2, 0, 0, 0, 9, 1];
const NEXT_ETHERNET: u8 = 3;
/// A fabric device that takes NSH over Ethernet only.
const FABRIC: NshRole = NshRole::Fabric { gpe: None };

fn inner(dst: [u8; 4]) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
    let t =
        FiveTuple { src_ip: [10, 0, 0, 1].into(), dst_ip: dst.into(), src_port: 1, dst_port: 2, proto: L4Proto::Udp };
    let mut f = vec![0u8; 64];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

/// Outer Ethernet + NSH (MD type 1) + `payload`.
fn with_nsh(spi: u32, si: u8, ttl: u8, next_protocol: u8, payload: &[u8]) -> Vec<u8> {
    with_context(spi, si, ttl, next_protocol, NshContext::Md1([0; 16]), payload)
}

/// Outer Ethernet + NSH with `context` + `payload`.
fn with_context(spi: u32, si: u8, ttl: u8, next_protocol: u8, context: NshContext, payload: &[u8]) -> Vec<u8> {
    let repr = NshRepr { oam: false, ttl, next_protocol, spi, si, context };
    let mut f = [THIS_SFF, [2, 0, 0, 0, 9, 9]].concat();
    f.extend_from_slice(&ETHERTYPE_NSH.to_be_bytes());
    let at = f.len();
    f.resize(at + repr.buffer_len(), 0);
    repr.emit(&mut f[at..]);
    f.extend_from_slice(payload);
    f
}

/// (SPI, SI, TTL, next protocol) of a frame with NSH after Ethernet, and
/// what follows the header.
fn nsh_of(f: &[u8]) -> ((u32, u8, u8, u8), Vec<u8>) {
    assert_eq!(f[12..14], ETHERTYPE_NSH.to_be_bytes(), "an NSH frame: {f:02x?}");
    let p = NshPacket::new_checked(&f[14..]).expect("well-formed NSH");
    ((p.spi(), p.si(), p.ttl(), p.next_protocol()), p.payload().to_vec())
}

fn sff() -> NshSff {
    let mut s = NshSff::load().expect("load (verifier)");
    s.set_dev(0, LO).unwrap();
    let to_acme: Rule = "out=0,dst=10.1.0.0/16".parse().unwrap();
    s.set_classifier(&[to_acme], &[7]).unwrap();
    let hop = |spi, si| PathHop::new(spi, si).unwrap();
    let forward = NshAction::Forward { dev: 0, dst_mac: NEXT_SFF, src_mac: THIS_SFF, encap: NshEncap::Ethernet };
    s.set_hop(hop(7, 255), forward).unwrap();
    s.set_hop(hop(7, 254), NshAction::Proxy { dev: 0 }).unwrap();
    s.set_hop(hop(7, 253), NshAction::End { dev: 0 }).unwrap();
    s.set_hop(hop(8, 200), forward).unwrap();
    // Slot 5 has no device.
    s.set_hop(hop(10, 255), NshAction::End { dev: 5 }).unwrap();
    s
}

/// Runs `f` arriving with `role`: the action, the one exit counter that
/// moved (entry counters aside) and the frame as the program left it.
fn run(s: &mut NshSff, role: NshRole, f: &[u8]) -> (u32, &'static str, Vec<u8>) {
    s.set_role(LO, role).unwrap();
    let before = s.counters().unwrap();
    let out = test_run(s.program_fd().unwrap(), f, 1).unwrap();
    let after = s.counters().unwrap();
    let moved: Vec<&str> = (0..before.len())
        .filter(|&i| after[i] != before[i])
        .map(|i| NSH_COUNTER_NAMES[i])
        .filter(|n| !matches!(*n, "classified" | "returned"))
        .collect();
    assert!(moved.len() == 1, "one exit counter moves per frame: {moved:?}");
    (out.action, moved[0], out.data)
}

#[test]
fn the_forwarding_table() {
    if !privileged() {
        return;
    }
    let mut s = sff();
    let acme = inner([10, 1, 0, 5]);
    let hop = |spi, si| PathHop::new(spi, si).unwrap();

    // The classifier pushes NSH (SI 255, TTL 63) and the first hop forwards
    // it: TTL 62, the next SFF's MACs.
    let (action, counter, out) = run(&mut s, NshRole::Classify, &acme);
    assert_eq!((action, counter), (XDP_REDIRECT, "forwarded"));
    assert_eq!((&out[..6], &out[6..12]), (&NEXT_SFF[..], &THIS_SFF[..]));
    assert_eq!(nsh_of(&out), ((7, 255, 62, NEXT_ETHERNET), acme.clone()));
    // What no rule takes is the kernel's, untouched.
    let other = inner([10, 2, 0, 5]);
    assert_eq!(run(&mut s, NshRole::Classify, &other), (XDP_PASS, "unclassified", other.clone()));

    // From the fabric: the proxy strips the header for a local NF, the
    // path's end pops it; the inner frame leaves either way.
    let at = |si, ttl| with_nsh(7, si, ttl, NEXT_ETHERNET, &acme);
    assert_eq!(run(&mut s, FABRIC, &at(254, 9)), (XDP_REDIRECT, "proxied", acme.clone()));
    assert_eq!(run(&mut s, FABRIC, &at(253, 9)), (XDP_REDIRECT, "ended", acme.clone()));
    // The NF's frame comes back: the proxy restores the header (its hop's
    // SPI and SI - 1, the TTL configured), then forwards.
    let back = NshRole::Return { hop: hop(8, 200), ttl: 40 };
    let (action, counter, out) = run(&mut s, back, &acme);
    assert_eq!((action, counter), (XDP_REDIRECT, "forwarded"));
    assert_eq!(nsh_of(&out), ((8, 200, 39, NEXT_ETHERNET), acme.clone()));

    // MD type 2: the whole header goes, its TLVs too (one TLV: class,
    // type, length 4, then 4 bytes).
    let tlv = [0x01, 0x02, 0x03, 0x04, 0xaa, 0xbb, 0xcc, 0xdd];
    let md2 = with_context(7, 253, 9, NEXT_ETHERNET, NshContext::Md2(&tlv), &acme);
    assert_eq!(run(&mut s, FABRIC, &md2), (XDP_REDIRECT, "ended", acme.clone()));

    // Expiry (TTL 1 cannot go on, TTL 0 goes nowhere, SI 0 is used up,
    // entry or not), no entry, no device, malformed, not Ethernet inside,
    // not NSH at all, and NSH where only the fabric may bring it.
    let ttl1 = with_nsh(7, 255, 1, NEXT_ETHERNET, &acme);
    let (action, counter, _) = run(&mut s, FABRIC, &ttl1);
    assert_eq!((action, counter), (XDP_DROP, "ttl_expired"));
    assert_eq!(run(&mut s, FABRIC, &at(254, 0)).1, "ttl_expired");
    assert_eq!(run(&mut s, FABRIC, &with_nsh(7, 0, 9, NEXT_ETHERNET, &acme)).1, "si_expired");
    assert_eq!(run(&mut s, FABRIC, &with_nsh(10, 255, 9, NEXT_ETHERNET, &acme)).1, "no_dev");
    assert_eq!(run(&mut s, FABRIC, &with_nsh(99, 255, 9, NEXT_ETHERNET, &acme)).1, "no_hop");
    assert_eq!(run(&mut s, FABRIC, &with_nsh(7, 254, 9, 1, &acme[14..])).1, "not_ethernet");
    let mut bad_len = at(254, 9);
    bad_len[15] = (bad_len[15] & 0xc0) | 5;
    let mut bad_md = at(254, 9);
    bad_md[16] = 3;
    let mut bad_next = at(254, 9);
    bad_next[17] = 9;
    for (what, f) in
        [("length", bad_len), ("MD type", bad_md), ("next protocol", bad_next), ("cut", at(254, 9)[..30].to_vec())]
    {
        let (action, counter, _) = run(&mut s, FABRIC, &f);
        assert_eq!((action, counter), (XDP_DROP, "malformed"), "{what}");
    }
    assert_eq!(run(&mut s, FABRIC, &acme), (XDP_PASS, "not_nsh", acme.clone()));
    for role in [NshRole::Classify, NshRole::Return { hop: hop(8, 200), ttl: 40 }] {
        let (action, counter, _) = run(&mut s, role, &at(254, 9));
        assert_eq!((action, counter), (XDP_DROP, "refused"), "{role:?}");
    }

    // The tables change at run time: without (7, 255)'s entry the
    // classified frame is dropped and counted; a new classifier table
    // sends 10.2/16 down path 8 and leaves 10.1/16 to the kernel.
    s.remove_hop(hop(7, 255)).unwrap();
    assert_eq!(run(&mut s, NshRole::Classify, &acme).1, "no_hop");
    let to_zeta: Rule = "out=0,dst=10.2.0.0/16".parse().unwrap();
    s.set_classifier(&[to_zeta], &[8]).unwrap();
    s.set_hop(hop(8, 255), NshAction::End { dev: 0 }).unwrap();
    assert_eq!(run(&mut s, NshRole::Classify, &acme), (XDP_PASS, "unclassified", acme.clone()));
    assert_eq!(run(&mut s, NshRole::Classify, &other), (XDP_REDIRECT, "ended", other.clone()));
    assert!(PathHop::new(7, 0).is_err() && PathHop::new(1 << 24, 1).is_err());
}

/// Whether tshark is here; skipping without it is a failure under CI.
fn tshark_found() -> bool {
    let found = std::process::Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "tshark not found but CI=true: apt-get install tshark");
        eprintln!("NOTICE: tshark not installed; skipping");
    }
    found
}

/// tshark decodes what the forwarder sends with NSH: SPI, SI, TTL and the
/// inner frame, hop by hop along a path of three SFFs (the classifier's
/// SFF, then two forwarding hops with an NF each between them: SI 255,
/// 254, 253).
#[test]
fn tshark_decodes_each_hop() {
    if !privileged() {
        return;
    }
    if !tshark_found() {
        return;
    }
    let mut s = sff();
    let hop = |spi, si| PathHop::new(spi, si).unwrap();
    let forward = NshAction::Forward { dev: 0, dst_mac: NEXT_SFF, src_mac: THIS_SFF, encap: NshEncap::Ethernet };
    s.set_hop(hop(7, 254), forward).unwrap();
    s.set_hop(hop(7, 253), forward).unwrap();
    let acme = inner([10, 1, 0, 5]);
    let mut forwarded = |role| {
        let (action, counter, out) = run(&mut s, role, &acme);
        assert_eq!((action, counter), (XDP_REDIRECT, "forwarded"), "{role:?}");
        out
    };
    let first = forwarded(NshRole::Classify);
    // The NFs of hops 1 and 2 are done: their SFFs get the header back
    // with SI - 1 (as a proxy return would give it).
    let second = forwarded(NshRole::Return { hop: hop(7, 254), ttl: 62 });
    let third = forwarded(NshRole::Return { hop: hop(7, 253), ttl: 61 });
    let dir = std::env::temp_dir().join(format!("ferry-nsh-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("hops.pcap");
    let mut w = ferry_traffic::PcapWriter::create(&pcap, 0).unwrap();
    for (i, f) in [&first, &second, &third].into_iter().enumerate() {
        w.write(f, 1_700_000_000_000_000_000 + i as u64 * 1000).unwrap();
    }
    w.finish().unwrap();
    let fields =
        ["-T", "fields", "-e", "nsh.spi", "-e", "nsh.si", "-e", "nsh.ttl", "-e", "nsh.nextproto", "-e", "ip.dst"];
    let out = std::process::Command::new("tshark").arg("-n").arg("-r").arg(&pcap).args(fields).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // tshark prints some fields in hex (0x003e), others in decimal.
    let number = |v: &str| match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).unwrap(),
        None => v.parse().unwrap(),
    };
    let hops: Vec<(u32, u32, u32, u32, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f.len() == 5 && f.iter().all(|v| !v.is_empty()), "five fields in tshark's line {l:?}");
            (number(f[0]), number(f[1]), number(f[2]), number(f[3]), f[4].to_string())
        })
        .collect();
    let dst = || "10.1.0.5".to_string();
    assert_eq!(hops, [(7, 255, 62, 3, dst()), (7, 254, 61, 3, dst()), (7, 253, 60, 3, dst())]);
    // A display filter picks the frame at SI 254 alone.
    let filtered = std::process::Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "nsh.spi == 7 && nsh.si == 254 && nsh.ttl == 61"])
        .output()
        .unwrap();
    assert!(filtered.status.success(), "{}", String::from_utf8_lossy(&filtered.stderr));
    assert_eq!(String::from_utf8_lossy(&filtered.stdout).lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Between hosts over IP: a hop forwards in VXLAN-GPE (IPv4, UDP 4790,
/// next protocol NSH), read back with ferry-wire and by tshark; the next
/// host's fabric device takes it out of VXLAN-GPE and on.
#[test]
fn vxlan_gpe_between_hosts() {
    if !privileged() {
        return;
    }
    use ferry_wire::ipv4::Ipv4Packet;
    use ferry_wire::udp::UdpPacket;
    use ferry_wire::vxlan_gpe::VxlanGpePacket;
    let mut s = sff();
    let hop = |spi, si| PathHop::new(spi, si).unwrap();
    let (here, there) = ([192, 0, 2, 1].into(), [192, 0, 2, 2].into());
    let encap = NshEncap::VxlanGpe { src: here, dst: there, vni: 77 };
    s.set_hop(hop(11, 254), NshAction::Forward { dev: 0, dst_mac: NEXT_SFF, src_mac: THIS_SFF, encap }).unwrap();
    let acme = inner([10, 1, 0, 5]);
    let (action, counter, sent) = run(&mut s, NshRole::Return { hop: hop(11, 254), ttl: 30 }, &acme);
    assert_eq!((action, counter), (XDP_REDIRECT, "forwarded"));
    assert_eq!((&sent[..6], &sent[6..12], &sent[12..14]), (&NEXT_SFF[..], &THIS_SFF[..], &[0x08, 0x00][..]));
    let ip = Ipv4Packet::new_checked(&sent[14..]).expect("IPv4");
    assert!(ip.verify_checksum(), "the IPv4 header checksum");
    assert_eq!((ip.src_addr(), ip.dst_addr(), ip.protocol(), ip.total_len()), (here, there, 17, sent.len() - 14));
    let udp = UdpPacket::new_checked(ip.payload()).expect("UDP");
    assert_eq!((udp.dst_port(), udp.len()), (4790, sent.len() - 34));
    let gpe = VxlanGpePacket::new_checked(udp.payload()).expect("VXLAN-GPE");
    assert_eq!((gpe.next_protocol(), gpe.vni()), (4, Some(77)));
    let nsh = NshPacket::new_checked(&udp.payload()[8..]).expect("NSH");
    assert_eq!((nsh.spi(), nsh.si(), nsh.ttl(), nsh.payload()), (11, 254, 29, &acme[..]));

    // The next host: its fabric device (at `there`, VNI 77) takes it out
    // of VXLAN-GPE from a known SFF, and this hop ends the path there.
    s.set_hop(hop(11, 254), NshAction::End { dev: 0 }).unwrap();
    let fabric = NshRole::Fabric { gpe: Some(GpeEnd { addr: there, vni: 77 }) };
    assert_eq!(run(&mut s, fabric, &sent).1, "not_nsh", "from an SFF it does not know: the kernel's");
    s.add_peer(here).unwrap();
    assert_eq!(run(&mut s, fabric, &sent), (XDP_REDIRECT, "ended", acme.clone()));
    // Bytes past the UDP datagram are not the inner frame's.
    let mut padded = sent.clone();
    padded.extend_from_slice(&[0xee; 6]);
    assert_eq!(run(&mut s, fabric, &padded), (XDP_REDIRECT, "ended", acme.clone()));
    // Another address, another VNI, OAM, no NSH inside, Ethernet-only
    // fabric, another UDP port: the kernel's.
    let gpe_at = 14 + 20 + 8;
    let edit = |at: usize, byte: u8| {
        let mut f = sent.clone();
        f[at] = byte;
        f
    };
    let cases = [
        ("another VNI", fabric, edit(gpe_at + 6, 78)),
        ("OAM", fabric, edit(gpe_at, sent[gpe_at] | 0x01)),
        ("no NSH inside", fabric, edit(gpe_at + 3, 3)),
        ("Ethernet only", FABRIC, sent.clone()),
        ("another port", fabric, edit(14 + 20 + 3, 0xb7)),
        ("another address", NshRole::Fabric { gpe: Some(GpeEnd { addr: here, vni: 77 }) }, sent.clone()),
    ];
    for (what, role, f) in cases {
        assert_eq!(run(&mut s, role, &f), (XDP_PASS, "not_nsh", f.clone()), "{what}");
    }

    if !tshark_found() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferry-nsh-gpe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("gpe.pcap");
    let mut w = ferry_traffic::PcapWriter::create(&pcap, 0).unwrap();
    w.write(&sent, 1_700_000_000_000_000_000).unwrap();
    w.finish().unwrap();
    // (The inner frame's UDP header is decoded too: the filter asks for
    // the outer port among them.)
    let filter = "udp.dstport == 4790 && nsh.spi == 11 && nsh.si == 254 && nsh.ttl == 29 && ip.dst == 10.1.0.5";
    let out =
        std::process::Command::new("tshark").arg("-n").arg("-r").arg(&pcap).args(["-Y", filter]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1, "tshark decodes NSH in VXLAN-GPE");
    let _ = std::fs::remove_dir_all(&dir);
}
