//! Byte-exact fixtures captured from Linux, malformed-input tables and
//! fuzz-style tests for the NFs.

use std::net::Ipv4Addr;

use ferry_nf::*;
use ferry_wire::checksum;
use proptest::prelude::*;

/// Linux host A (192.0.2.1) and B (192.0.2.2) on a veth pair.
const MAC_A: [u8; 6] = [0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2];
const MAC_B: [u8; 6] = [0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69];
const IP_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// ARP request "who has 192.0.2.2 tell 192.0.2.1" as sent by A (captured
/// before the NIC pads it to 60 bytes).
const ARP_REQUEST: [u8; 42] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06,
    0x04, 0x00, 0x01, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0xc0, 0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xc0, 0x00, 0x02, 0x02,
];

/// The reply Linux (host B) sent to it.
const ARP_REPLY_LINUX: [u8; 42] = [
    0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06,
    0x04, 0x00, 0x02, 0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69, 0xc0, 0x00, 0x02, 0x02, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2,
    0xc0, 0x00, 0x02, 0x01,
];

/// `ping -c1 192.0.2.2` from A: echo request, id 0x18bc, seq 1, 56 bytes.
const PING_REQUEST: [u8; 98] = [
    0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0x08, 0x00, 0x45, 0x00, 0x00, 0x54, 0x10,
    0x85, 0x40, 0x00, 0x40, 0x01, 0xa6, 0x20, 0xc0, 0x00, 0x02, 0x01, 0xc0, 0x00, 0x02, 0x02, 0x08, 0x00, 0x72, 0xf8,
    0x18, 0xbc, 0x00, 0x01, 0xfe, 0xeb, 0x01, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xa6, 0x20, 0x07, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21,
    0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34,
    0x35, 0x36, 0x37,
];

/// The echo reply Linux (host B) sent back: IP ident 0xc4b4 (its own), no
/// DF, TTL 64, IP checksum 0x31f1, ICMP type 0 with checksum 0x7af8.
const PING_REPLY_LINUX: [u8; 98] = [
    0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0x5a, 0x2a, 0xa2, 0xd2, 0xc4, 0x69, 0x08, 0x00, 0x45, 0x00, 0x00, 0x54, 0xc4,
    0xb4, 0x00, 0x00, 0x40, 0x01, 0x31, 0xf1, 0xc0, 0x00, 0x02, 0x02, 0xc0, 0x00, 0x02, 0x01, 0x00, 0x00, 0x7a, 0xf8,
    0x18, 0xbc, 0x00, 0x01, 0xfe, 0xeb, 0x01, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xa6, 0x20, 0x07, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21,
    0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34,
    0x35, 0x36, 0x37,
];

/// Our expected reply: Linux's, except that we keep the request's IP ident
/// (0x1085) — hence IP checksum 0xe620 (hand-checked: RFC 1624 update of
/// 0x31f1 for ident 0xc4b4 → 0x1085, and equally of the request's 0xa620
/// for flags 0x4000 → 0).
fn expected_ping_reply() -> Vec<u8> {
    let mut r = PING_REPLY_LINUX.to_vec();
    r[18..20].copy_from_slice(&[0x10, 0x85]);
    r[24..26].copy_from_slice(&[0xe6, 0x20]);
    r
}

fn counter(nf: &dyn PacketNf, name: &str) -> u64 {
    let i = nf.spec().counters.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no counter {name}"));
    nf.counters()[i]
}

fn assert_sum(nf: &dyn PacketNf) {
    let c = nf.counters();
    assert_eq!(nf.spec().counters[0], "rx");
    assert_eq!(c.len(), nf.spec().counters.len());
    assert_eq!(c[1..].iter().sum::<u64>(), c[0], "{}: {:?}", nf.spec().name, c);
}

/// Runs `frame` through `nf` and checks verdict and which counter moved.
fn check(nf: &mut dyn PacketNf, frame: &mut [u8], verdict: Verdict, counter_name: &str, what: &str) {
    let before = counter(nf, counter_name);
    let len = frame.len();
    assert_eq!(nf.process(frame), verdict, "{what}");
    assert_eq!(frame.len(), len);
    assert_eq!(counter(nf, counter_name), before + 1, "{what}: counter {counter_name}");
    assert_sum(nf);
}

/// The IPv6 hosts of `linux6`'s frames: ::a asks, ::b answers.
const IP6_B: &str = "2001:db8::b";
const MAC6_B: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];

fn arp_nf() -> ArpResponder {
    ArpResponder::new(vec![
        (Ipv4Addr::new(192, 0, 2, 9).into(), [2, 0, 0, 0, 0, 9]),
        (IP_B.into(), MAC_B),
        (IP6_B.parse().unwrap(), MAC6_B),
    ])
}

fn icmp_nf() -> IcmpEchoResponder {
    IcmpEchoResponder::new(vec![Ipv4Addr::new(198, 51, 100, 1).into(), IP_B.into(), IP6_B.parse().unwrap()])
}

/// Frames Linux sent between 2001:db8::a and ::b (ping -6, neighbor
/// solicitation and advertisement).
#[allow(dead_code)]
mod linux6 {
    include!("../../../base/ferry-wire/testdata/linux_ipv6_frames.rs");
}
use linux6::{NEIGHBOR_ADVERTISEMENT, NEIGHBOR_SOLICITATION, PING6_REPLY, PING6_REQUEST};

/// Recomputes the ICMPv6 checksum of an IPv6 frame whose message follows
/// the fixed header (after an edit, to reach the checks behind it).
fn fix_icmpv6(f: &mut [u8]) {
    let (src, dst): ([u8; 16], [u8; 16]) = (f[22..38].try_into().unwrap(), f[38..54].try_into().unwrap());
    let end = 54 + usize::from(u16::from_be_bytes([f[18], f[19]]));
    ferry_wire::Icmpv6Packet::new_unchecked(&mut f[54..end]).fill_checksum(src.into(), dst.into());
}

#[test]
fn ping6_reply_matches_linux() {
    let mut nf = icmp_nf();
    let mut f = PING6_REQUEST;
    check(&mut nf, &mut f, Verdict::Tx, "tx", "ping -6");
    // Linux's reply but for the flow label, which Linux draws anew.
    assert_eq!(&f[..15], &PING6_REPLY[..15]);
    assert_eq!(&f[15..18], &PING6_REQUEST[15..18], "the request's flow label");
    assert_eq!(&f[18..], &PING6_REPLY[18..]);
    assert_eq!(ferry_wire::verify_checksums(&f), Ok(true));
    // Tagged twice (QinQ): answered, tags kept.
    let reply = f;
    let mut f = tagged(&tagged(&PING6_REQUEST));
    check(&mut nf, &mut f, Verdict::Tx, "tx", "QinQ ping -6");
    assert_eq!(f, tagged(&tagged(&reply)));
}

#[test]
fn neighbor_advertisement_matches_linux() {
    let mut nf = arp_nf();
    let mut f = NEIGHBOR_SOLICITATION;
    check(&mut nf, &mut f, Verdict::Tx, "tx", "neighbor solicitation");
    assert_eq!(f, NEIGHBOR_ADVERTISEMENT);
    // The echo responder leaves Neighbor Discovery to it.
    check(&mut icmp_nf(), &mut NEIGHBOR_SOLICITATION.clone(), Verdict::Pass, "pass", "NS through icmp-echo");
    check(&mut nf, &mut PING6_REQUEST.clone(), Verdict::Pass, "pass", "echo through arp-responder");
}

#[test]
fn neighbor_discovery_rejects() {
    let mut nf = arp_nf();
    let edit = |at: usize, v: u8, fix: bool| {
        let mut f = NEIGHBOR_SOLICITATION.to_vec();
        f[at] = v;
        if fix {
            fix_icmpv6(&mut f);
        }
        f
    };
    let rows: Vec<(Vec<u8>, Verdict, &str, &str)> = vec![
        (edit(21, 254, false), Verdict::Drop, "drop_malformed", "hop limit 254: off-link"),
        (edit(57, 0, false), Verdict::Drop, "drop_malformed", "bad checksum"),
        (edit(55, 1, true), Verdict::Drop, "drop_malformed", "code 1"),
        (edit(79, 0, true), Verdict::Drop, "drop_malformed", "an option of length 0"),
        (edit(77, 0x0c, true), Verdict::Drop, "drop_not_for_us", "target ::c"),
        (edit(62, 0xff, true), Verdict::Drop, "drop_malformed", "a multicast target"),
    ];
    for (mut f, verdict, counter_name, what) in rows {
        check(&mut nf, &mut f, verdict, counter_name, what);
    }
    // Duplicate Address Detection: from ::, to the solicited-node address.
    let mut dad = NEIGHBOR_SOLICITATION.to_vec();
    dad[22..38].fill(0);
    dad[78..86].copy_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]); // a nonce option (RFC 7527)
    fix_icmpv6(&mut dad);
    check(&mut nf, &mut dad, Verdict::Tx, "tx", "a DAD probe, defended");
    assert_eq!(&dad[..6], &[0x33, 0x33, 0, 0, 0, 1], "to all nodes");
    assert_eq!(&dad[38..54], &"ff02::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    assert_eq!(dad[58] & 0x40, 0, "not solicited");
    assert_eq!(ferry_wire::verify_checksums(&dad), Err(ferry_wire::WireError::UnsupportedProtocol(58)).or(Ok(true)));
    let mut bare = NEIGHBOR_SOLICITATION[..78].to_vec();
    bare[18..20].copy_from_slice(&24u16.to_be_bytes());
    bare[22..38].fill(0);
    fix_icmpv6(&mut bare);
    check(&mut nf, &mut bare, Verdict::Drop, "drop_unhandled", "a DAD probe with no room for the option");
    let mut with_lladdr = NEIGHBOR_SOLICITATION.to_vec();
    with_lladdr[22..38].fill(0);
    fix_icmpv6(&mut with_lladdr);
    check(&mut nf, &mut with_lladdr, Verdict::Drop, "drop_malformed", "DAD with a source link-layer address");
    assert_sum(&nf);
}

#[test]
fn ping6_rejects() {
    let mut nf = icmp_nf();
    let edit = |at: usize, v: u8, fix: bool| {
        let mut f = PING6_REQUEST.to_vec();
        f[at] = v;
        if fix {
            fix_icmpv6(&mut f);
        }
        f
    };
    let rows: Vec<(Vec<u8>, Verdict, &str, &str)> = vec![
        (edit(53, 0x0c, true), Verdict::Drop, "drop_not_for_us", "to ::c"),
        (edit(22, 0xff, true), Verdict::Drop, "drop_bad_source", "from a multicast address"),
        (edit(54, 129, true), Verdict::Drop, "drop_unhandled", "an echo reply"),
        (edit(56, 0, false), Verdict::Drop, "drop_bad_checksum", "bad checksum"),
        (edit(14, 0x40, false), Verdict::Drop, "drop_malformed", "version 4"),
        (PING6_REQUEST[..60].to_vec(), Verdict::Drop, "drop_malformed", "cut short"),
        (edit(20, 17, false), Verdict::Pass, "pass", "UDP"),
    ];
    for (mut f, verdict, counter_name, what) in rows {
        check(&mut nf, &mut f, verdict, counter_name, what);
    }
    // A destination-options header is walked over and not echoed.
    let mut ext = PING6_REQUEST[..54].to_vec();
    ext[20] = 60;
    ext[18..20].copy_from_slice(&24u16.to_be_bytes());
    ext.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0]);
    ext.extend_from_slice(&PING6_REQUEST[54..]);
    check(&mut nf, &mut ext, Verdict::Tx, "tx", "ping with a destination-options header");
    assert_eq!((ext[20], u16::from_be_bytes([ext[18], ext[19]])), (58, 16));
    assert_eq!(&ext[54..70], &PING6_REPLY[54..70]);
    assert_eq!(&ext[70..], &[0; 8], "freed bytes zeroed");
    assert_sum(&nf);
}

fn padded(frame: &[u8]) -> Vec<u8> {
    let mut v = frame.to_vec();
    v.resize(60.max(frame.len()), 0);
    v
}

/// Inserts an 802.1Q tag (VID 100, PCP 5).
fn tagged(frame: &[u8]) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    v.extend_from_slice(&[0x81, 0x00, 0xa0, 0x64]);
    v.extend_from_slice(&frame[12..]);
    v
}

#[test]
fn arp_reply_matches_linux() {
    let mut nf = arp_nf();
    // Unpadded, as captured.
    let mut f = ARP_REQUEST;
    check(&mut nf, &mut f, Verdict::Tx, "tx", "arp request");
    assert_eq!(f, ARP_REPLY_LINUX);
    assert_eq!((&f[..6], &f[32..38], &f[38..42]), (&MAC_A[..], &MAC_A[..], &IP_A.octets()[..]));
    // Padded to 60 bytes as on the wire: padding kept untouched.
    let mut f = padded(&ARP_REQUEST);
    f[42..].fill(0xa5);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "padded arp request");
    assert_eq!(&f[..42], &ARP_REPLY_LINUX);
    assert!(f[42..].iter().all(|&b| b == 0xa5));
    // VLAN-tagged: tag kept.
    let mut f = tagged(&ARP_REQUEST);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "tagged arp request");
    assert_eq!(f, tagged(&ARP_REPLY_LINUX));
    // Unicast to our MAC (cache refresh) is answered too.
    let mut f = ARP_REQUEST;
    f[..6].copy_from_slice(&MAC_B);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "unicast arp request");
    assert_eq!(f, ARP_REPLY_LINUX);
    // A probe (RFC 5227, sender IP 0) gets a reply with target IP 0.
    let mut f = ARP_REQUEST;
    f[28..32].fill(0);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "arp probe");
    let mut want = ARP_REPLY_LINUX;
    want[38..42].fill(0);
    assert_eq!(f, want);
    // Another of our bindings.
    let mut f = ARP_REQUEST;
    f[41] = 9;
    check(&mut nf, &mut f, Verdict::Tx, "tx", "second binding");
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 9]);
    assert_eq!(&f[22..32], &[2, 0, 0, 0, 0, 9, 192, 0, 2, 9]);
}

#[test]
fn arp_rejects() {
    let mut nf = arp_nf();
    type Mutation = fn(&mut Vec<u8>);
    let table: &[(&str, Mutation, Verdict, &str)] = &[
        ("ipv4 frame", |f| f[12..14].copy_from_slice(&[0x08, 0x00]), Verdict::Pass, "pass"),
        ("ipv6 frame", |f| f[12..14].copy_from_slice(&[0x86, 0xdd]), Verdict::Pass, "pass"),
        ("qinq: the inner ARP answered", |f| f.splice(12..12, [0x88, 0xa8, 0, 1]).for_each(drop), Verdict::Tx, "tx"),
        (
            "three tags",
            |f| f.splice(12..12, [0x88, 0xa8, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3]).for_each(drop),
            Verdict::Pass,
            "pass",
        ),
        ("hlen 8", |f| f[18] = 8, Verdict::Drop, "drop_malformed"),
        ("plen 16", |f| f[19] = 16, Verdict::Drop, "drop_malformed"),
        ("htype 6", |f| f[15] = 6, Verdict::Drop, "drop_malformed"),
        ("ptype ipv6", |f| f[16..18].copy_from_slice(&[0x86, 0xdd]), Verdict::Drop, "drop_malformed"),
        ("multicast sender mac", |f| f[22] = 0x01, Verdict::Drop, "drop_malformed"),
        ("reply", |f| f[21] = 2, Verdict::Drop, "drop_unhandled"),
        ("rarp op 3", |f| f[21] = 3, Verdict::Drop, "drop_unhandled"),
        ("gratuitous", |f| f[31] = 2, Verdict::Drop, "drop_unhandled"),
        ("other target", |f| f[41] = 3, Verdict::Drop, "drop_not_for_us"),
        (
            "unicast to another mac",
            |f| f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x77]),
            Verdict::Drop,
            "drop_not_for_us",
        ),
        ("vlan then truncated", |f| *f = tagged(&f[..30]), Verdict::Drop, "drop_malformed"),
    ];
    for (what, mutate, verdict, ctr) in table {
        let mut f = padded(&ARP_REQUEST);
        mutate(&mut f);
        let orig = f.clone();
        check(&mut nf, &mut f, *verdict, ctr, what);
        if *verdict != Verdict::Tx {
            assert_eq!(f, orig, "{what}: a frame that is not sent must not be modified");
        }
    }
    // Truncated at every length.
    for n in 0..42 {
        let mut f = ARP_REQUEST[..n].to_vec();
        check(&mut nf, &mut f, Verdict::Drop, "drop_malformed", &format!("truncated at {n}"));
    }
}

#[test]
fn ping_reply_matches_linux() {
    let mut nf = icmp_nf();
    let mut f = PING_REQUEST;
    check(&mut nf, &mut f, Verdict::Tx, "tx", "ping");
    assert_eq!(&f[..], &expected_ping_reply()[..]);
    // The ICMP part (id, seq, data, checksum) is byte-identical to Linux's.
    assert_eq!(&f[34..], &PING_REPLY_LINUX[34..]);
    assert_eq!(ferry_wire::verify_checksums(&f), Ok(true));

    // Padding after the IP packet is kept and not checksummed.
    let mut f = PING_REQUEST.to_vec();
    f.extend_from_slice(&[0xa5; 6]);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "padded ping");
    assert_eq!(&f[..98], &expected_ping_reply()[..]);
    assert_eq!(&f[98..], &[0xa5; 6]);

    // VLAN tag kept.
    let mut f = tagged(&PING_REQUEST);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "tagged ping");
    assert_eq!(f, tagged(&expected_ping_reply()));

    // IP options never reach the reply (RFC 1122 §3.2.2.6 would have a
    // source route reversed; a reply without options is valid for any
    // request): the reply is the option-less one, then 4 bytes of padding.
    let mut f = with_ip_options(&PING_REQUEST, &NOPS);
    check(&mut nf, &mut f, Verdict::Tx, "tx", "ping with options");
    assert_eq!(f.len(), PING_REQUEST.len() + 4, "the frame keeps its length");
    assert_eq!(&f[..98], &expected_ping_reply()[..]);
    assert_eq!(&f[98..], &[0; 4]);
    assert_eq!(ferry_wire::verify_checksums(&f), Ok(true));
}

#[test]
fn ping_reply_drops_a_source_route_and_invalid_options() {
    let mut nf = icmp_nf();
    // Loose source route via 10.0.1.9, pointer at its first address, then
    // EOL: RFC 1122 would reverse it; the reply carries no route at all.
    const LSRR: [u8; 8] = [131, 7, 4, 10, 0, 1, 9, 0];
    // An option whose length runs past the header: never reflected.
    const INVALID: [u8; 4] = [68, 40, 5, 0];
    for (what, options) in [("source route", &LSRR[..]), ("invalid option", &INVALID[..])] {
        let mut f = with_ip_options(&PING_REQUEST, options);
        check(&mut nf, &mut f, Verdict::Tx, "tx", what);
        assert_eq!(f[14], 0x45, "{what}: IHL 5, no options");
        assert_eq!(&f[..98], &expected_ping_reply()[..], "{what}");
        assert!(f[98..].iter().all(|b| *b == 0), "{what}: zeroed padding");
        assert_eq!(ferry_wire::verify_checksums(&f), Ok(true), "{what}");
    }
}

/// NOP NOP NOP EOL.
const NOPS: [u8; 4] = [1, 1, 1, 0];

/// Adds `options` (a multiple of 4 bytes) to an untagged frame and fixes
/// IHL, total length and checksum.
fn with_ip_options(frame: &[u8], options: &[u8]) -> Vec<u8> {
    let mut v = frame.to_vec();
    v.splice(34..34, options.iter().copied());
    v[14] = 0x45 + (options.len() / 4) as u8;
    let tl = u16::from_be_bytes([v[16], v[17]]) + options.len() as u16;
    v[16..18].copy_from_slice(&tl.to_be_bytes());
    fix_ip(&mut v, 14);
    v
}

/// Recomputes the IPv4 header checksum of the header at `l3`.
fn fix_ip(f: &mut [u8], l3: usize) {
    let hl = usize::from(f[l3] & 0x0f) * 4;
    f[l3 + 10..l3 + 12].fill(0);
    let c = checksum::checksum(&f[l3..l3 + hl]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Recomputes the ICMP checksum of an untagged, option-less frame.
fn fix_icmp(f: &mut [u8]) {
    let end = 14 + usize::from(u16::from_be_bytes([f[16], f[17]]));
    f[36..38].fill(0);
    let c = checksum::checksum(&f[34..end]);
    f[36..38].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn icmp_rejects() {
    let mut nf = icmp_nf();
    type Mutation = fn(&mut Vec<u8>);
    let table: &[(&str, Mutation, Verdict, &str)] = &[
        ("arp", |f| *f = ARP_REQUEST.to_vec(), Verdict::Pass, "pass"),
        // An IPv4 packet labelled IPv6: as an IPv6 packet, version 4.
        ("ipv6 ethertype", |f| f[12..14].copy_from_slice(&[0x86, 0xdd]), Verdict::Drop, "drop_malformed"),
        ("odd ethertype", |f| f[12..14].copy_from_slice(&[0x88, 0xb5]), Verdict::Pass, "pass"),
        ("802.3 length field", |f| f[12..14].copy_from_slice(&[0x00, 0x54]), Verdict::Pass, "pass"),
        ("qinq: the inner ping answered", |f| *f = tagged(&tagged(f)), Verdict::Tx, "tx"),
        ("three tags", |f| *f = tagged(&tagged(&tagged(f))), Verdict::Pass, "pass"),
        (
            "udp",
            |f| {
                f[23] = 17;
                fix_ip(f, 14)
            },
            Verdict::Pass,
            "pass",
        ),
        (
            "tcp",
            |f| {
                f[23] = 6;
                fix_ip(f, 14)
            },
            Verdict::Pass,
            "pass",
        ),
        ("version 6 in ipv4 ethertype", |f| f[14] = 0x65, Verdict::Drop, "drop_malformed"),
        (
            "ihl 4",
            |f| {
                f[14] = 0x44;
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_malformed",
        ),
        ("ihl 0", |f| f[14] = 0x40, Verdict::Drop, "drop_malformed"),
        (
            "ihl 15 in a short packet",
            |f| {
                f.truncate(70);
                f[16..18].copy_from_slice(&56u16.to_be_bytes());
                f[14] = 0x4f
            },
            Verdict::Drop,
            "drop_malformed",
        ),
        (
            "total length < header",
            |f| {
                f[16..18].copy_from_slice(&19u16.to_be_bytes());
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_malformed",
        ),
        (
            "total length > frame",
            |f| {
                f[16..18].copy_from_slice(&85u16.to_be_bytes());
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_malformed",
        ),
        (
            "icmp shorter than 8",
            |f| {
                f[16..18].copy_from_slice(&27u16.to_be_bytes());
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_malformed",
        ),
        ("bad ip checksum", |f| f[25] ^= 1, Verdict::Drop, "drop_bad_checksum"),
        ("bad icmp checksum", |f| f[97] ^= 0x80, Verdict::Drop, "drop_bad_checksum"),
        (
            "icmp checksum over padding only",
            |f| {
                f[16..18].copy_from_slice(&80u16.to_be_bytes());
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_bad_checksum",
        ),
        (
            "more fragments",
            |f| {
                f[20] = 0x20;
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_fragment",
        ),
        (
            "fragment offset",
            |f| {
                f[20] = 0x00;
                f[21] = 0x10;
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_fragment",
        ),
        (
            "not our address",
            |f| {
                f[33] = 3;
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_not_for_us",
        ),
        (
            "broadcast ip",
            |f| {
                f[30..34].fill(0xff);
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_not_for_us",
        ),
        ("broadcast mac", |f| f[..6].fill(0xff), Verdict::Drop, "drop_not_for_us"),
        (
            "multicast source",
            |f| {
                f[26..30].copy_from_slice(&[224, 0, 0, 1]);
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_bad_source",
        ),
        (
            "source 0.0.0.0",
            |f| {
                f[26..30].fill(0);
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_bad_source",
        ),
        (
            "loopback source",
            |f| {
                f[26..30].copy_from_slice(&[127, 0, 0, 1]);
                fix_ip(f, 14)
            },
            Verdict::Drop,
            "drop_bad_source",
        ),
        ("multicast source mac", |f| f[6] = 0x01, Verdict::Drop, "drop_bad_source"),
        (
            "echo reply",
            |f| {
                f[34] = 0;
                fix_icmp(f)
            },
            Verdict::Drop,
            "drop_unhandled",
        ),
        (
            "echo request code 1",
            |f| {
                f[35] = 1;
                fix_icmp(f)
            },
            Verdict::Drop,
            "drop_unhandled",
        ),
        (
            "timestamp request",
            |f| {
                f[34] = 13;
                fix_icmp(f)
            },
            Verdict::Drop,
            "drop_unhandled",
        ),
    ];
    for (what, mutate, verdict, ctr) in table {
        let mut f = PING_REQUEST.to_vec();
        mutate(&mut f);
        let orig = f.clone();
        check(&mut nf, &mut f, *verdict, ctr, what);
        if *verdict != Verdict::Tx {
            assert_eq!(f, orig, "{what}: a frame that is not sent must not be modified");
        }
    }
    // Truncated at every length: before the IPv4 header is complete the
    // protocol can't be trusted, after it the total length doesn't fit.
    for n in 0..PING_REQUEST.len() {
        let mut f = PING_REQUEST[..n].to_vec();
        check(&mut nf, &mut f, Verdict::Drop, "drop_malformed", &format!("truncated at {n}"));
    }
    // The same at every length with a VLAN tag.
    let t = tagged(&PING_REQUEST);
    for n in 0..t.len() {
        let mut f = t[..n].to_vec();
        check(&mut nf, &mut f, Verdict::Drop, "drop_malformed", &format!("tagged, truncated at {n}"));
    }
}

#[test]
fn chain_runs_in_order_and_counts_unclaimed() {
    let mut chain = NfChainLocal::new(vec![Box::new(arp_nf()), Box::new(icmp_nf())]);
    let mut f = padded(&ARP_REQUEST);
    assert_eq!(chain.process(&mut f), Verdict::Tx);
    assert_eq!(&f[..42], &ARP_REPLY_LINUX);
    let mut f = PING_REQUEST;
    assert_eq!(chain.process(&mut f), Verdict::Tx);
    assert_eq!(&f[..], &expected_ping_reply()[..]);
    let mut f = PING_REQUEST;
    f[97] ^= 1;
    assert_eq!(chain.process(&mut f), Verdict::Drop, "the ICMP NF drops it");
    let mut f = PING_REQUEST;
    f[23] = 17;
    fix_ip(&mut f, 14);
    assert_eq!(chain.process(&mut f), Verdict::Pass, "UDP: nobody's");
    let mut f = PING6_REQUEST;
    f[20] = 17;
    assert_eq!(chain.process(&mut f), Verdict::Pass, "IPv6 UDP: nobody's");
    assert_eq!(chain.counters(), &[5, 2, 1, 2]);
    assert_eq!(chain.unclaimed(), 2);
    assert_sum(&chain);
    let arp = &chain.nfs()[0];
    assert_eq!((counter(&**arp, "rx"), counter(&**arp, "tx"), counter(&**arp, "pass")), (5, 1, 4));
    let icmp = &chain.nfs()[1];
    assert_eq!(counter(&**icmp, "rx"), 4);
    assert_eq!(counter(&**icmp, "drop_bad_checksum"), 1);
    assert_eq!(counter(&**icmp, "pass"), 2);
    for nf in chain.nfs() {
        assert_sum(&**nf);
    }
    // An empty chain claims nothing.
    let mut empty = NfChainLocal::new(Vec::new());
    assert_eq!(empty.process(&mut [0u8; 60]), Verdict::Pass);
    assert_eq!(empty.unclaimed(), 1);
}

/// Every NF, plus a chain of all of them but l2fwd (which takes everything).
/// A well-formed 96-byte UDP or TCP frame from 10.0.0.1 to port `dport`,
/// for the mutation test to start from.
fn l4_frame(proto: ferry_wire::L4Proto, dport: u16) -> Vec<u8> {
    let spec = ferry_wire::FrameSpec { src_mac: MAC_A, dst_mac: MAC_B, frame_len: 96 };
    let t = ferry_wire::FiveTuple {
        src_ip: [10, 0, 0, 1].into(),
        dst_ip: IP_B.into(),
        src_port: 1000,
        dst_port: dport,
        proto,
    };
    let mut f = vec![0u8; 96];
    let n = ferry_wire::build_frame(&spec, &t, None, &mut f).expect("a frame");
    f.truncate(n);
    f
}

fn all_nfs() -> Vec<Box<dyn PacketNf>> {
    let fw = ferry_nf::firewall_rules::parse_fw_rules(
        "deny src 10.0.0.0/8 proto udp dport 53\nallow proto tcp\ndefault deny",
    )
    .expect("firewall rules");
    let ips = ferry_nf::ips_rules::parse_rules(
        "drop tcp any any -> any any (msg:\"a\"; content:\"|00 01|\"; sid:1;)\n\
         alert udp any any -> any 53 (msg:\"b\"; content:\"ab\"; content:\"|ff|\"; sid:2;)",
    )
    .expect("IPS rules");
    vec![
        Box::new(L2Fwd::new()),
        Box::new(arp_nf()),
        Box::new(icmp_nf()),
        Box::new(NfChainLocal::new(vec![Box::new(arp_nf()), Box::new(icmp_nf())])),
        Box::new(Firewall::new(fw.clone(), Lookup::Linear)),
        Box::new(Firewall::new(fw, Lookup::BitVector)),
        Box::new(Ips::new(ips)),
    ]
}

fn run_all(nfs: &mut [Box<dyn PacketNf>], frame: &[u8]) {
    for nf in nfs.iter_mut() {
        let mut f = frame.to_vec();
        let v = nf.process(&mut f);
        assert_eq!(f.len(), frame.len());
        if v == Verdict::Tx && nf.spec().name == "icmp-echo" {
            // Whatever got through must be a valid reply.
            assert_eq!(ferry_wire::verify_checksums(&f), Ok(true));
            assert!(ferry_wire::five_tuple(&f).is_some());
        }
        assert_sum(&**nf);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..160), kind in 0u8..6) {
        let mut f = bytes;
        // Steer some inputs past the EtherType check.
        if f.len() >= 24 {
            match kind {
                0 => { f[12] = 0x08; f[13] = 0x06; f[14..20].copy_from_slice(&[0, 1, 8, 0, 6, 4]); }
                1 => { f[12] = 0x08; f[13] = 0x00; f[14] = 0x45; f[23] = 1; }
                2 => { f[12] = 0x81; f[13] = 0x00; f[16] = 0x08; f[17] = 0x00; f[18] = 0x40 | (f[18] & 0xf); }
                // IPv4 UDP and TCP, for the firewall's and the IPS's deeper checks.
                3 => { f[12] = 0x08; f[13] = 0x00; f[14] = 0x45; f[23] = 17; }
                4 => { f[12] = 0x08; f[13] = 0x00; f[14] = 0x45; f[23] = 6; }
                _ => {}
            }
        }
        let mut nfs = all_nfs();
        run_all(&mut nfs, &f);
    }

    #[test]
    fn mutated_fixtures_never_panic(which in 0usize..8, at in any::<prop::sample::Index>(), val in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let base = match which {
            0 => padded(&ARP_REQUEST),
            1 => PING_REQUEST.to_vec(),
            2 => tagged(&PING_REQUEST),
            3 => with_ip_options(&PING_REQUEST, &NOPS),
            4 => l4_frame(ferry_wire::L4Proto::Udp, 53),
            5 => PING6_REQUEST.to_vec(),
            6 => NEIGHBOR_SOLICITATION.to_vec(),
            _ => l4_frame(ferry_wire::L4Proto::Tcp, 80),
        };
        let mut nfs = all_nfs();
        let mut f = base.clone();
        let i = at.index(f.len());
        f[i] = val;
        run_all(&mut nfs, &f);
        // Also with checksums made consistent again, to reach deeper checks.
        if which == 1 && (14..34).contains(&i) { fix_ip(&mut f, 14); run_all(&mut nfs, &f); }
        if (5..=6).contains(&which) && f.len() == base.len() && i >= 14 && ferry_wire::flow::parse(&f).is_ok_and(|fl| fl.l4_offset == Some(54)) {
            fix_icmpv6(&mut f);
            run_all(&mut nfs, &f);
        }
        let n = cut.index(base.len() + 1);
        run_all(&mut nfs, &base[..n]);
        let mut f = base[..n].to_vec();
        f.resize(base.len() + 7, 0);
        run_all(&mut nfs, &f);
    }
}
