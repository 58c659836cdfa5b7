//! ICMP echo responder ("ping responder") for IPv4 and ICMPv6 echo
//! responder for IPv6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferry_wire::checksum;
use ferry_wire::ethernet::{ethertype, is_multicast_mac, EthernetFrame};
use ferry_wire::icmpv4::{icmp_type, Icmpv4Packet};
use ferry_wire::icmpv6::{icmpv6_type, Icmpv6Packet};
use ferry_wire::ipv4::{ip_proto, Ipv4Packet, IPV4_MIN_HEADER_LEN};
use ferry_wire::ipv6::{next_header, walk_extensions, Ipv6Packet, IPV6_HEADER_LEN};

use crate::{count, NfSpec, PacketNf, Verdict};

const TX: usize = 1;
const PASS: usize = 2;
const DROP_MALFORMED: usize = 3;
const DROP_BAD_CHECKSUM: usize = 4;
const DROP_FRAGMENT: usize = 5;
const DROP_NOT_FOR_US: usize = 6;
const DROP_UNHANDLED: usize = 7;
const DROP_BAD_SOURCE: usize = 8;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "icmp-echo",
    counters: &[
        "rx",
        "tx",
        "pass",
        "drop_malformed",
        "drop_bad_checksum",
        "drop_fragment",
        "drop_not_for_us",
        "drop_unhandled",
        "drop_bad_source",
    ],
};

/// TTL of replies (Linux's default `ip_default_ttl`), and hop limit of
/// IPv6 replies (its default `hop_limit`).
const REPLY_TTL: u8 = 64;

/// Answers ICMP echo requests to a set of IPv4 addresses and ICMPv6 echo
/// requests to a set of IPv6 addresses, in place.
///
/// IPv4 rules, in order:
/// - shorter than an Ethernet (+VLAN) header → `drop_malformed`;
/// - not IPv4 (ARP, IPv6, QinQ, …) → `Pass`;
/// - fewer than 20 IPv4 bytes or version ≠ 4 → `drop_malformed` (the
///   protocol byte can't be trusted);
/// - protocol ≠ ICMP → `Pass` (left to the next NF, which validates it);
/// - IHL < 5, header longer than the frame, total length < header or longer
///   than the frame (a longer frame is Ethernet padding, fine) →
///   `drop_malformed`;
/// - bad IPv4 header checksum → `drop_bad_checksum`;
/// - destination not one of ours → `drop_not_for_us`; so is a group
///   Ethernet destination, since the reply needs our unicast MAC as source;
/// - any fragment (MF or offset ≠ 0) → `drop_fragment` (no reassembly);
/// - source 0.0.0.0, broadcast, multicast, loopback, or a group Ethernet
///   source → `drop_bad_source` (never reply to those);
/// - ICMP shorter than 8 bytes → `drop_malformed`;
/// - not an echo request (type 8, code 0) → `drop_unhandled`;
/// - bad ICMP checksum (over the whole ICMP message) → `drop_bad_checksum`;
/// - otherwise → `Tx` with the reply built in place.
///
/// The reply is what Linux sends: MACs and IPs swapped, TTL 64, TOS kept,
/// flags and fragment offset cleared (Linux's ICMP socket doesn't set DF),
/// type 0, same id, seq and data, both checksums recomputed. The
/// differences: the IP ident (Linux draws a new one, we keep the request's:
/// no state, no RNG on the hot path) and IP options, which the reply never
/// carries. RFC 1122 §3.2.2.6 asks a reply to include the request's options
/// with a source route reversed and record-route and timestamp options
/// updated; echoing them verbatim (as this responder once did) breaks a
/// source route and reflects invalid options back at the requester. A
/// reply without options is valid for any request, so the options are
/// dropped: the ICMP message moves up over them, the total length shrinks,
/// and the freed bytes at the end become zeroed Ethernet padding (the
/// frame keeps its length). VLAN tags and Ethernet padding are kept.
///
/// IPv6 rules (RFC 4443 §4, RFC 8200), in order:
/// - a header cut short, a payload length past the frame, or extension
///   headers Ferry does not walk → `drop_malformed`;
/// - not ICMPv6 → `Pass`; Neighbor Discovery (types 133-137) → `Pass`,
///   the address resolution responder's;
/// - destination not one of ours, or a group Ethernet destination →
///   `drop_not_for_us`;
/// - a fragment header → `drop_fragment`;
/// - source unspecified, multicast or loopback, or a group Ethernet
///   source → `drop_bad_source`;
/// - not an echo request (type 128, code 0) → `drop_unhandled`;
/// - a bad checksum (over the message and the pseudo-header) →
///   `drop_bad_checksum`;
/// - otherwise → `Tx`: addresses and MACs swapped, hop limit 64, type
///   129, the checksum updated for the one changed word (swapping the
///   addresses leaves the pseudo-header's sum as it was). Extension
///   headers are dropped as IPv4 options are: the message moves up, the
///   payload length shrinks, the freed bytes become zeroed padding. The
///   flow label is kept (Linux draws a new one).
#[derive(Debug)]
pub struct IcmpEchoResponder {
    addrs: Vec<Ipv4Addr>,
    addrs6: Vec<Ipv6Addr>,
    counters: [u64; 9],
}

fn bad_source(ip: Ipv4Addr) -> bool {
    ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback()
}

fn bad_source6(ip: Ipv6Addr) -> bool {
    ip.is_unspecified() || ip.is_multicast() || ip.is_loopback()
}

/// Neighbor Discovery's messages: router and neighbor solicitations and
/// advertisements, redirect (RFC 4861 §4).
fn is_neighbor_discovery(msg_type: u8) -> bool {
    (133..=137).contains(&msg_type)
}

impl IcmpEchoResponder {
    pub fn new(addrs: Vec<IpAddr>) -> Self {
        let addrs4 = addrs.iter().filter_map(|a| if let IpAddr::V4(v4) = a { Some(*v4) } else { None }).collect();
        let addrs6 = addrs.iter().filter_map(|a| if let IpAddr::V6(v6) = a { Some(*v6) } else { None }).collect();
        IcmpEchoResponder { addrs: addrs4, addrs6, counters: [0; 9] }
    }

    fn classify(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let Ok(eth) = EthernetFrame::new_checked(&*frame) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        match eth.ethertype() {
            ethertype::IPV4 => self.classify_v4(frame),
            ethertype::IPV6 => self.classify_v6(frame),
            _ => (Verdict::Pass, PASS),
        }
    }

    fn classify_v6(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let eth = EthernetFrame::new_unchecked(&*frame);
        let (eth_dst, eth_src, l3) = (eth.dst(), eth.src(), eth.header_len());
        let Ok(ip) = Ipv6Packet::new_checked(&frame[l3..]) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        let Ok(upper) = walk_extensions(ip.next_header(), ip.payload()) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        let (src, dst, end) = (ip.src_addr(), ip.dst_addr(), IPV6_HEADER_LEN + usize::from(ip.payload_len()));
        let at = IPV6_HEADER_LEN + upper.offset;
        let msg_type = frame.get(l3 + at).copied();
        let neighbor_discovery = !upper.later_fragment && msg_type.is_some_and(is_neighbor_discovery);
        if upper.proto != next_header::ICMPV6 || neighbor_discovery {
            return (Verdict::Pass, PASS);
        }
        if !self.addrs6.contains(&dst) || is_multicast_mac(&eth_dst) {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        }
        if upper.fragment {
            return (Verdict::Drop, DROP_FRAGMENT);
        }
        if bad_source6(src) || is_multicast_mac(&eth_src) {
            return (Verdict::Drop, DROP_BAD_SOURCE);
        }
        let ipb = &mut frame[l3..l3 + end];
        let Ok(mut icmp) = Icmpv6Packet::new_checked(&mut ipb[at..]) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        if icmp.msg_type() != icmpv6_type::ECHO_REQUEST || icmp.code() != 0 {
            return (Verdict::Drop, DROP_UNHANDLED);
        }
        if !icmp.verify_checksum(src, dst) {
            return (Verdict::Drop, DROP_BAD_CHECKSUM);
        }
        let csum = checksum::update16(
            icmp.checksum(),
            u16::from(icmpv6_type::ECHO_REQUEST) << 8,
            u16::from(icmpv6_type::ECHO_REPLY) << 8,
        );
        icmp.set_msg_type(icmpv6_type::ECHO_REPLY);
        icmp.set_checksum(csum);
        if at > IPV6_HEADER_LEN {
            // Extension headers are not echoed: the message moves up.
            ipb.copy_within(at..end, IPV6_HEADER_LEN);
            ipb[end - (at - IPV6_HEADER_LEN)..end].fill(0);
        }
        let mut ip = Ipv6Packet::new_unchecked(&mut ipb[..]);
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_hop_limit(REPLY_TTL);
        ip.set_next_header(next_header::ICMPV6);
        ip.set_payload_len((end - at) as u16);
        EthernetFrame::new_unchecked(&mut *frame).swap_addrs();
        (Verdict::Tx, TX)
    }

    fn classify_v4(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let eth = EthernetFrame::new_unchecked(&*frame);
        let (eth_dst, eth_src, l3) = (eth.dst(), eth.src(), eth.header_len());
        let ipb = &mut frame[l3..];
        if ipb.len() < IPV4_MIN_HEADER_LEN || ipb[0] >> 4 != 4 {
            return (Verdict::Drop, DROP_MALFORMED);
        }
        if ipb[9] != ip_proto::ICMP {
            return (Verdict::Pass, PASS);
        }
        let Ok(mut ip) = Ipv4Packet::new_checked(ipb) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        if !ip.verify_checksum() {
            return (Verdict::Drop, DROP_BAD_CHECKSUM);
        }
        if !self.addrs.contains(&ip.dst_addr()) || is_multicast_mac(&eth_dst) {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        }
        if ip.is_fragment() {
            return (Verdict::Drop, DROP_FRAGMENT);
        }
        if bad_source(ip.src_addr()) || is_multicast_mac(&eth_src) {
            return (Verdict::Drop, DROP_BAD_SOURCE);
        }
        let Ok(mut icmp) = Icmpv4Packet::new_checked(ip.payload_mut()) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        if icmp.msg_type() != icmp_type::ECHO_REQUEST || icmp.code() != 0 {
            return (Verdict::Drop, DROP_UNHANDLED);
        }
        if !icmp.verify_checksum() {
            return (Verdict::Drop, DROP_BAD_CHECKSUM);
        }
        // The checksum verified, so the RFC 1624 update of the one changed
        // word gives exactly what a full recomputation would, without a
        // second pass over the payload.
        let csum = checksum::update16(icmp.checksum(), u16::from(icmp_type::ECHO_REQUEST) << 8, 0);
        icmp.set_msg_type(icmp_type::ECHO_REPLY);
        icmp.set_checksum(csum);

        ip.swap_addrs();
        ip.set_ttl(REPLY_TTL);
        ip.set_flags_and_frag_offset(false, false, 0);
        // new_checked guaranteed 20 <= header_len <= total_len <= buffer.
        let (header_len, total_len) = (ip.header_len(), ip.total_len());
        let options = header_len - IPV4_MIN_HEADER_LEN;
        if options > 0 {
            ip.set_version_and_header_len(IPV4_MIN_HEADER_LEN);
            ip.set_total_len((total_len - options) as u16);
        }
        ip.fill_checksum();
        if options > 0 {
            // The ICMP message moves up over the options; what it leaves at
            // the end becomes zeroed padding.
            let ipb = &mut frame[l3..];
            ipb.copy_within(header_len..total_len, IPV4_MIN_HEADER_LEN);
            ipb[total_len - options..total_len].fill(0);
        }
        EthernetFrame::new_unchecked(&mut *frame).swap_addrs();
        (Verdict::Tx, TX)
    }
}

impl PacketNf for IcmpEchoResponder {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, frame: &mut [u8]) -> Verdict {
        let r = self.classify(frame);
        count(&mut self.counters, r)
    }

    fn counters(&self) -> &[u64] {
        &self.counters
    }
}
