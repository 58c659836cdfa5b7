//! Frame builder, stamp and 5-tuple tests, cross-checked against etherparse
//! (an independent implementation) and against frames captured from Linux.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{IpHeaders, IpNumber, Ipv4Header, Ipv6Header, PacketBuilder};
use ferry_wire::flow::IpVersion;
use ferry_wire::*;
use proptest::prelude::*;

const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

fn tuple(proto: L4Proto) -> FiveTuple {
    FiveTuple {
        src_ip: Ipv4Addr::new(198, 18, 0, 1).into(),
        dst_ip: Ipv4Addr::new(198, 19, 0, 1).into(),
        src_port: 4321,
        dst_port: if proto == L4Proto::Icmp { 0 } else { 9 },
        proto,
    }
}

fn tuple6(proto: L4Proto) -> FiveTuple {
    let a = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
    FiveTuple { src_ip: a("2001:db8::1"), dst_ip: a("2001:db8:1::2"), ..tuple(proto) }
}

/// Every version and protocol's tuple.
fn tuples() -> Vec<FiveTuple> {
    let protos = [L4Proto::Udp, L4Proto::Tcp, L4Proto::Icmp];
    protos.iter().map(|&p| tuple(p)).chain(protos.iter().map(|&p| tuple6(p))).collect()
}

fn spec(frame_len: usize) -> FrameSpec {
    FrameSpec { src_mac: SRC_MAC, dst_mac: DST_MAC, frame_len }
}

const STAMP: Stamp = Stamp { stream: 7, seq: 0x0102_0304, tx_ns: 0x1122_3344_5566_7788 };

/// The same frame as etherparse builds it (it always fills the UDP checksum).
fn etherparse_frame(t: &FiveTuple, payload: &[u8]) -> Vec<u8> {
    let l4_len = t.proto.header_len() + payload.len();
    let ip = match (t.src_ip, t.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpHeaders::Ipv4(
            Ipv4Header::new(l4_len as u16, 64, IpNumber(t.protocol()), s.octets(), d.octets()).unwrap(),
            Default::default(),
        ),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpHeaders::Ipv6(
            Ipv6Header {
                payload_length: l4_len as u16,
                next_header: IpNumber(t.protocol()),
                hop_limit: 64,
                source: s.octets(),
                destination: d.octets(),
                ..Default::default()
            },
            Default::default(),
        ),
        _ => unreachable!("one family per tuple"),
    };
    let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC).ip(ip);
    let mut out = Vec::new();
    match (t.proto, t.version()) {
        (L4Proto::Udp, _) => b.udp(t.src_port, t.dst_port).write(&mut out, payload).unwrap(),
        (L4Proto::Tcp, _) => b.tcp(t.src_port, t.dst_port, 1, 0xffff).psh().ack(0).write(&mut out, payload).unwrap(),
        (L4Proto::Icmp, IpVersion::V4) => b.icmpv4_echo_request(t.src_port, 0).write(&mut out, payload).unwrap(),
        (L4Proto::Icmp, IpVersion::V6) => b.icmpv6_echo_request(t.src_port, 0).write(&mut out, payload).unwrap(),
    }
    out
}

#[test]
fn built_frames_match_etherparse() {
    for t in tuples() {
        let (version, proto) = (t.version(), t.proto);
        for len in [60, 64, 69, 70, 74, 128, 1514] {
            let mut buf = [0xeeu8; 1600];
            if version == IpVersion::V6 && len < stamp_offset(version, proto) {
                assert!(build_frame(&spec(len), &t, Some(&STAMP), &mut buf).is_err(), "{t:?} {len}");
                continue;
            }
            assert_eq!(build_frame(&spec(len), &t, Some(&STAMP), &mut buf), Ok(len));
            let frame = &mut buf[..len];
            let off = stamp_offset(version, proto);
            let mut payload = vec![0u8; len - off];
            let stamped = has_stamp_room(version, proto, len);
            if stamped {
                STAMP.write(&mut payload);
            }
            assert_eq!(find_stamp(frame), stamped.then_some(STAMP), "{proto:?} {len}");
            assert_eq!(five_tuple(frame), Some(t));
            assert_eq!(verify_checksums(frame), Ok(true));
            if proto == L4Proto::Udp && version == IpVersion::V4 {
                assert_eq!(&frame[40..42], &[0, 0], "generated UDP over IPv4 has checksum 0");
                fill_l4_checksum(frame).unwrap();
                assert_eq!(verify_checksums(frame), Ok(true));
            }
            assert_eq!(frame, &etherparse_frame(&t, &payload)[..], "{t:?} {len}");
        }
    }
}

#[test]
fn stamp_offsets() {
    assert_eq!(stamp_offset(IpVersion::V4, L4Proto::Udp), 42);
    assert_eq!(stamp_offset(IpVersion::V4, L4Proto::Icmp), 42);
    assert_eq!(stamp_offset(IpVersion::V4, L4Proto::Tcp), 54);
    assert_eq!(stamp_offset(IpVersion::V6, L4Proto::Udp), 62);
    assert!(has_stamp_room(IpVersion::V4, L4Proto::Udp, 60));
    assert!(!has_stamp_room(IpVersion::V4, L4Proto::Tcp, 64));
    assert!(has_stamp_room(IpVersion::V4, L4Proto::Tcp, 70));
    assert!(!has_stamp_room(IpVersion::V6, L4Proto::Udp, 70));
    assert!(has_stamp_room(IpVersion::V6, L4Proto::Udp, 78));
}

#[test]
fn build_errors() {
    let mut buf = [0u8; 100];
    let t = tuple(L4Proto::Udp);
    assert_eq!(
        build_frame(&spec(59), &t, None, &mut buf),
        Err(WireError::FrameLength { len: 59, min: 60, max: MAX_FRAME_LEN })
    );
    assert_eq!(
        build_frame(&spec(MAX_FRAME_LEN + 1), &t, None, &mut buf),
        Err(WireError::FrameLength { len: MAX_FRAME_LEN + 1, min: 60, max: MAX_FRAME_LEN })
    );
    assert_eq!(
        build_frame(&spec(101), &t, None, &mut buf),
        Err(WireError::Truncated { layer: "frame buffer", need: 101, have: 100 })
    );
    let mut big = vec![0u8; MAX_FRAME_LEN];
    assert_eq!(build_frame(&spec(MAX_FRAME_LEN), &t, None, &mut big), Ok(MAX_FRAME_LEN));
    assert_eq!(verify_checksums(&big), Ok(true));
}

#[test]
fn restamp_keeps_checksums_valid() {
    for t in tuples() {
        let proto = t.proto;
        let mut buf = [0u8; 128];
        build_frame(&spec(128), &t, Some(&STAMP), &mut buf).unwrap();
        if proto == L4Proto::Udp {
            // Exercise the incremental path for UDP too.
            fill_l4_checksum(&mut buf).unwrap();
        }
        for i in 0..500u32 {
            let s = Stamp { stream: i as u16, seq: i.wrapping_mul(0x9e37_79b9), tx_ns: u64::from(i) << 33 | 0xffff };
            restamp(&mut buf, &s).unwrap();
            assert_eq!(find_stamp(&buf), Some(s));
            assert_eq!(verify_checksums(&buf), Ok(true), "{proto:?} {i}");
        }
        // Someone else (the BPF generator) writes the stamp, we fix after.
        let off = stamp_offset(t.version(), proto);
        let old: [u8; STAMP_LEN] = buf[off..off + STAMP_LEN].try_into().unwrap();
        STAMP.write(&mut buf[off..]);
        if proto != L4Proto::Udp || buf[40..42] != [0, 0] {
            assert_eq!(verify_checksums(&buf), Ok(false));
        }
        fix_stamp_checksum(&mut buf, &old).unwrap();
        assert_eq!(verify_checksums(&buf), Ok(true));
    }
    // Generated UDP: checksum 0 stays 0.
    let mut buf = [0u8; 64];
    build_frame(&spec(64), &tuple(L4Proto::Udp), None, &mut buf).unwrap();
    restamp(&mut buf, &STAMP).unwrap();
    assert_eq!(&buf[40..42], &[0, 0]);
    assert_eq!(find_stamp(&buf), Some(STAMP));
    // No room: 64-byte TCP.
    build_frame(&spec(64), &tuple(L4Proto::Tcp), None, &mut buf).unwrap();
    assert_eq!(restamp(&mut buf, &STAMP), Err(WireError::Truncated { layer: "stamp", need: 16, have: 10 }));
}

/// Echo request captured from Linux `ping -c1 192.0.2.2` on a veth pair.
const PING_REQUEST: &[u8] = &[
    0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0x08, 0x00, 0x45, 0x00, 0x00, 0x54, 0x10,
    0x85, 0x40, 0x00, 0x40, 0x01, 0xa6, 0x20, 0xc0, 0x00, 0x02, 0x01, 0xc0, 0x00, 0x02, 0x02, 0x08, 0x00, 0x72, 0xf8,
    0x18, 0xbc, 0x00, 0x01, 0xfe, 0xeb, 0x01, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xa6, 0x20, 0x07, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21,
    0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34,
    0x35, 0x36, 0x37,
];

#[test]
fn real_ping_frame() {
    assert_eq!(verify_checksums(PING_REQUEST), Ok(true));
    assert_eq!(
        five_tuple(PING_REQUEST),
        Some(FiveTuple {
            src_ip: Ipv4Addr::new(192, 0, 2, 1).into(),
            dst_ip: Ipv4Addr::new(192, 0, 2, 2).into(),
            src_port: 0x18bc,
            dst_port: 0,
            proto: L4Proto::Icmp,
        })
    );
    assert_eq!(find_stamp(PING_REQUEST), None, "ping's payload is not a stamp");
    // The same parse through etherparse agrees on the layout.
    let p = etherparse::SlicedPacket::from_ethernet(PING_REQUEST).unwrap();
    assert!(matches!(p.transport, Some(etherparse::TransportSlice::Icmpv4(_))));
}

/// Puts a VLAN tag and IPv4 options into a built frame and fixes lengths and
/// checksums, to check that lookups skip both.
fn tagged_with_options(proto: L4Proto) -> Vec<u8> {
    let mut buf = [0u8; 100];
    let len = build_frame(&spec(100), &tuple(proto), Some(&STAMP), &mut buf).unwrap();
    let mut v = Vec::new();
    v.extend_from_slice(&buf[..12]);
    v.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    v.extend_from_slice(&buf[12..14]);
    v.extend_from_slice(&buf[14..34]);
    v.extend_from_slice(&[0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00]); // router alert, NOP x3, EOL
    v.extend_from_slice(&buf[34..len]);
    v.extend_from_slice(&[0u8; 6]); // trailing Ethernet padding is ignored
    let mut ip = Ipv4Packet::new_unchecked(&mut v[18..]);
    ip.set_version_and_header_len(28);
    ip.set_total_len((len - 14 + 8) as u16);
    ip.fill_checksum();
    v
}

#[test]
fn vlan_and_ip_options() {
    for proto in [L4Proto::Udp, L4Proto::Tcp, L4Proto::Icmp] {
        let mut v = tagged_with_options(proto);
        assert_eq!(find_stamp(&v), Some(STAMP));
        assert_eq!(five_tuple(&v), Some(tuple(proto)));
        assert_eq!(verify_checksums(&v), Ok(true));
        let s = Stamp { stream: 1, seq: 2, tx_ns: 3 };
        restamp(&mut v, &s).unwrap();
        assert_eq!(find_stamp(&v), Some(s));
        assert_eq!(verify_checksums(&v), Ok(true));
    }
}

#[test]
fn lookups_reject_other_traffic() {
    let mut buf = [0u8; 64];
    build_frame(&spec(64), &tuple(L4Proto::Udp), Some(&STAMP), &mut buf).unwrap();
    let mut f = buf;
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    assert_eq!((five_tuple(&f), find_stamp(&f)), (None, None));
    let mut f = buf;
    f[23] = 47; // GRE
    assert_eq!((five_tuple(&f), find_stamp(&f)), (None, None));
    let mut f = buf;
    f[21] = 1; // fragment offset 8: no L4 header here
    assert_eq!((five_tuple(&f), find_stamp(&f)), (None, None));
    let mut f = buf;
    f[20] = 0x20; // first fragment (MF): header is there
    assert_eq!(find_stamp(&f), Some(STAMP));
    assert!(fill_l4_checksum(&mut f).is_err());
    let mut f = buf;
    f[38..40].copy_from_slice(&20u16.to_be_bytes()); // UDP length cuts the stamp
    assert_eq!(find_stamp(&f), None);
    assert!(five_tuple(&f).is_some());
    let mut f = buf;
    f[34] = 3; // ICMP-like bytes but UDP: irrelevant
    f[23] = 1; // now ICMP type 3: not an echo, no stamp, id not reported
    let t = five_tuple(&f).unwrap();
    assert_eq!((t.proto, t.src_port, t.dst_port), (L4Proto::Icmp, 0, 0));
    assert_eq!(find_stamp(&f), None);
}

fn any_builder_input() -> impl Strategy<Value = (usize, usize, u16, u16)> {
    (0usize..3, 60usize..300, any::<u16>(), any::<u16>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random bytes never make a lookup or a view panic.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), tag in any::<bool>(), ipv4 in any::<bool>()) {
        let mut f = bytes;
        // Bias towards the interesting paths: IPv4 ethertype, version 4.
        if ipv4 && f.len() > 14 + usize::from(tag) * 4 {
            if tag { f[12] = 0x81; f[13] = 0; }
            let at = 12 + usize::from(tag) * 4;
            f[at] = 0x08; f[at + 1] = 0;
            f[at + 2] = 0x40 | (f[at + 2] & 0x0f);
        }
        let _ = five_tuple(&f);
        let _ = find_stamp(&f);
        let _ = verify_checksums(&f);
        let mut g = f.clone();
        let _ = restamp(&mut g, &STAMP);
        let _ = fill_l4_checksum(&mut g);
        let _ = fix_stamp_checksum(&mut g, &[0u8; 16]);
        exercise_views(&mut f);
    }

    /// Every truncation and every single-byte corruption of a valid frame is
    /// handled without panicking.
    #[test]
    fn mutated_valid_frames_never_panic((p, len, sp, dp) in any_builder_input(), cut in any::<prop::sample::Index>(), at in any::<prop::sample::Index>(), val in any::<u8>()) {
        let proto = [L4Proto::Udp, L4Proto::Tcp, L4Proto::Icmp][p];
        let t = FiveTuple { src_port: sp, dst_port: dp, ..tuple(proto) };
        let mut buf = vec![0u8; len];
        build_frame(&spec(len), &t, Some(&STAMP), &mut buf).unwrap();
        prop_assert_eq!(verify_checksums(&buf), Ok(true));
        let mut f = buf.clone();
        let i = at.index(f.len());
        f[i] = val;
        let _ = five_tuple(&f);
        let _ = find_stamp(&f);
        let _ = restamp(&mut f, &STAMP);
        exercise_views(&mut f);
        let cut = cut.index(buf.len() + 1);
        let mut f = buf[..cut].to_vec();
        let _ = five_tuple(&f);
        let _ = find_stamp(&f);
        let _ = verify_checksums(&f);
        let _ = restamp(&mut f, &STAMP);
        exercise_views(&mut f);
    }
}

/// Calls every accessor of every view that `new_checked` accepts at every
/// plausible offset: the contract says none of them may panic.
fn exercise_views(f: &mut [u8]) {
    for off in [0usize, 14, 18, 34, 38, 42] {
        let Some(b) = f.get_mut(off..) else { continue };
        if let Ok(mut e) = EthernetFrame::new_checked(&mut *b) {
            let _ = (e.dst(), e.src(), e.vlan_id(), e.ethertype(), e.payload().len());
            e.swap_addrs();
            e.swap_addrs();
        }
        if let Ok(a) = ArpPacket::new_checked(&*b) {
            let _ = ArpRepr::parse(&a);
        }
        if let Ok(mut ip) = Ipv4Packet::new_checked(&mut *b) {
            let _ = (ip.options().len(), ip.payload().len(), ip.is_fragment(), ip.verify_checksum());
            let _ = Ipv4Repr::parse(&ip);
            let c = ip.checksum();
            ip.fill_checksum();
            ip.set_checksum(c);
            let _ = ip.payload_mut().len();
        }
        let (s, d) = (Ipv4Addr::LOCALHOST, Ipv4Addr::BROADCAST);
        if let Ok(u) = UdpPacket::new_checked(&*b) {
            let _ = (u.payload().len(), u.verify_checksum(s, d));
        }
        if let Ok(t) = TcpPacket::new_checked(&*b) {
            let _ = (t.options().len(), t.payload().len(), t.verify_checksum(s, d), t.flags());
        }
        if let Ok(i) = Icmpv4Packet::new_checked(&*b) {
            let _ = (i.payload().len(), i.verify_checksum(), i.echo_ident(), i.echo_seq());
        }
    }
}
