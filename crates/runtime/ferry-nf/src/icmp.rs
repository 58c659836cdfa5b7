//! ICMP echo responder ("ping responder") for IPv4.

use std::net::Ipv4Addr;

use ferry_wire::checksum;
use ferry_wire::ethernet::{ethertype, is_multicast_mac, EthernetFrame};
use ferry_wire::icmpv4::{icmp_type, Icmpv4Packet};
use ferry_wire::ipv4::{ip_proto, Ipv4Packet, IPV4_MIN_HEADER_LEN};

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

/// TTL of replies (Linux's default `ip_default_ttl`).
const REPLY_TTL: u8 = 64;

/// Answers IPv4 ICMP echo requests to a set of addresses, in place.
///
/// Rules, in order:
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
/// frame keeps its length). A VLAN tag and Ethernet padding are kept.
#[derive(Debug)]
pub struct IcmpEchoResponder {
    addrs: Vec<Ipv4Addr>,
    counters: [u64; 9],
}

fn bad_source(ip: Ipv4Addr) -> bool {
    ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback()
}

impl IcmpEchoResponder {
    pub fn new(addrs: Vec<Ipv4Addr>) -> Self {
        IcmpEchoResponder { addrs, counters: [0; 9] }
    }

    pub fn addrs(&self) -> &[Ipv4Addr] {
        &self.addrs
    }

    fn classify(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let Ok(eth) = EthernetFrame::new_checked(&*frame) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        if eth.ethertype() != ethertype::IPV4 {
            return (Verdict::Pass, PASS);
        }
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
