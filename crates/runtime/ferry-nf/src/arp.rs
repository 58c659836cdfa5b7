//! Address resolution responder: ARP (RFC 826, Ethernet/IPv4) for its
//! IPv4 bindings, Neighbor Discovery (RFC 4861) for its IPv6 ones.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferry_wire::arp::{arp_op, ArpPacket};
use ferry_wire::ethernet::{ethertype, is_multicast_mac, EthernetFrame};
use ferry_wire::icmpv6::{icmpv6_type, solicited_node, Icmpv6Packet, NdpRepr, ALL_NODES};
use ferry_wire::ipv6::{next_header, Ipv6Packet, IPV6_HEADER_LEN};
use ferry_wire::MacAddr;

use crate::{count, NfSpec, PacketNf, Verdict};

const TX: usize = 1;
const PASS: usize = 2;
const DROP_MALFORMED: usize = 3;
const DROP_NOT_FOR_US: usize = 4;
const DROP_UNHANDLED: usize = 5;

pub(crate) static SPEC: NfSpec = NfSpec {
    name: "arp-responder",
    counters: &["rx", "tx", "pass", "drop_malformed", "drop_not_for_us", "drop_unhandled"],
};

/// Answers ARP requests for a fixed set of (IPv4, MAC) bindings, and
/// Neighbor Solicitations for a fixed set of (IPv6, MAC) bindings.
///
/// ARP rules, in order:
/// - shorter than an Ethernet (+VLAN) header → `drop_malformed`;
/// - not ARP → `Pass` (`pass`);
/// - not Ethernet/IPv4 ARP (htype ≠ 1, ptype ≠ 0x0800, hlen ≠ 6, plen ≠ 4)
///   or shorter than 28 bytes, or a group (multicast) sender MAC →
///   `drop_malformed`;
/// - not a request (replies, RARP, …), or a gratuitous request (sender IP ==
///   target IP: someone announcing, we keep no cache) → `drop_unhandled`;
/// - target IP not ours, or a unicast Ethernet destination that is not the
///   MAC bound to that IP (Linux drops "other host" frames too) →
///   `drop_not_for_us`;
/// - otherwise the frame becomes the reply in place: oper 2, sender = our
///   MAC/IP, target = requester's MAC/IP, Ethernet dst = requester's sender
///   MAC, src = our MAC → `Tx`. ARP probes (sender IP 0.0.0.0, RFC 5227) are
///   answered the same way, as Linux does. VLAN tag and Ethernet padding are
///   kept as they are.
///
/// Neighbor Discovery rules (RFC 4861), in order:
/// - an IPv6 header that does not parse, not ICMPv6 right after the fixed
///   header (Neighbor Discovery carries no extension headers), or ICMPv6
///   but not a Neighbor Solicitation (type 135) → `Pass`;
/// - a hop limit other than 255 (§7.1.1: it came from off-link), a code
///   other than 0, shorter than 24 bytes, an option of length 0 or past
///   the message, a multicast target, a bad checksum, or from the
///   unspecified address (Duplicate Address Detection) but not to a
///   solicited-node multicast address or with a source link-layer
///   address → `drop_malformed`;
/// - target not ours, or a unicast Ethernet destination that is not the
///   MAC bound to it → `drop_not_for_us`;
/// - otherwise the frame becomes the Neighbor Advertisement in place
///   (§7.2.4): from the target address to the solicitation's source,
///   solicited and override set, with our link-layer address; to the
///   solicitation's link-layer address option, else its Ethernet source.
///   A DAD probe is answered to all-nodes (ff02::1), not solicited, when
///   it carries room for the option (Linux's nonce option leaves it);
///   one without → `drop_unhandled`. Hop limit 255; a longer
///   solicitation's freed bytes become zeroed padding.
#[derive(Debug)]
pub struct ArpResponder {
    entries: Vec<(Ipv4Addr, [u8; 6])>,
    entries6: Vec<(Ipv6Addr, [u8; 6])>,
    counters: [u64; 6],
}

/// The Neighbor Advertisement's length: the message and a target
/// link-layer address option.
const NA_LEN: usize = 32;
/// Neighbor Discovery's hop limit, sent and required (RFC 4861 §7.1).
const ND_HOP_LIMIT: u8 = 255;

impl ArpResponder {
    pub fn new(entries: Vec<(IpAddr, [u8; 6])>) -> Self {
        let mut r = ArpResponder { entries: Vec::new(), entries6: Vec::new(), counters: [0; 6] };
        for (ip, mac) in entries {
            match ip {
                IpAddr::V4(v4) => r.entries.push((v4, mac)),
                IpAddr::V6(v6) => r.entries6.push((v6, mac)),
            }
        }
        r
    }

    fn classify(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let Ok(eth) = EthernetFrame::new_checked(&*frame) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        match eth.ethertype() {
            ethertype::ARP => self.classify_arp(frame),
            ethertype::IPV6 => self.classify_ns(frame),
            _ => (Verdict::Pass, PASS),
        }
    }

    fn classify_ns(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let eth = EthernetFrame::new_unchecked(&*frame);
        let (eth_dst, eth_src, l3) = (eth.dst(), eth.src(), eth.header_len());
        // A header that does not parse may be some later NF's to judge:
        // as far as this one can tell, it is no solicitation.
        let Ok(ip) = Ipv6Packet::new_checked(&frame[l3..]) else {
            return (Verdict::Pass, PASS);
        };
        let is_ns = ip.payload().first() == Some(&icmpv6_type::NEIGHBOR_SOLICITATION);
        if ip.next_header() != next_header::ICMPV6 || !is_ns {
            return (Verdict::Pass, PASS);
        }
        let Some(ns) = solicitation(&ip) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        let Some(&(ours, our_mac)) = self.entries6.iter().find(|(a, _)| *a == ns.target) else {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        };
        if !is_multicast_mac(&eth_dst) && eth_dst != our_mac {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        }
        let dad = ns.src.is_unspecified();
        if usize::from(ip.payload_len()) < NA_LEN {
            // A DAD probe without options: the answer's option won't fit.
            return (Verdict::Drop, DROP_UNHANDLED);
        }
        let (to, to_mac) = match (dad, ns.source_lladdr) {
            (true, _) => (ALL_NODES, MacAddr::ipv6_multicast(ALL_NODES).0),
            (false, Some(mac)) => (ns.src, mac.0),
            (false, None) => (ns.src, eth_src),
        };
        let advert = NdpRepr::Advert {
            router: false,
            solicited: !dad,
            override_: true,
            target: ours,
            target_lladdr: Some(MacAddr(our_mac)),
        };
        write_advert(&mut frame[l3..], &advert, ours, to);
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst(to_mac);
        eth.set_src(our_mac);
        (Verdict::Tx, TX)
    }

    fn classify_arp(&self, frame: &mut [u8]) -> (Verdict, usize) {
        let eth = EthernetFrame::new_unchecked(&*frame);
        let eth_dst = eth.dst();
        let hl = eth.header_len();
        let Ok(mut arp) = ArpPacket::new_checked(&mut frame[hl..]) else {
            return (Verdict::Drop, DROP_MALFORMED);
        };
        let (sha, spa, tpa) = (arp.sha(), arp.spa(), arp.tpa());
        if is_multicast_mac(&sha) {
            return (Verdict::Drop, DROP_MALFORMED);
        }
        if arp.oper() != arp_op::REQUEST || spa == tpa {
            return (Verdict::Drop, DROP_UNHANDLED);
        }
        // Linear search: NFs hold a handful of addresses, and a Vec keeps
        // the hot path free of hashing.
        let Some(&(our_ip, our_mac)) = self.entries.iter().find(|(ip, _)| *ip == tpa) else {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        };
        if !is_multicast_mac(&eth_dst) && eth_dst != our_mac {
            return (Verdict::Drop, DROP_NOT_FOR_US);
        }
        arp.set_oper(arp_op::REPLY);
        arp.set_tha(sha);
        arp.set_tpa(spa);
        arp.set_sha(our_mac);
        arp.set_spa(our_ip);
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst(sha);
        eth.set_src(our_mac);
        (Verdict::Tx, TX)
    }
}

/// A Neighbor Solicitation that passed RFC 4861 §7.1.1's validity checks.
struct Solicitation {
    src: Ipv6Addr,
    target: Ipv6Addr,
    source_lladdr: Option<MacAddr>,
}

/// The solicitation in `ip` (ICMPv6 type 135 right after the fixed
/// header), if valid (§7.1.1).
fn solicitation(ip: &Ipv6Packet<&[u8]>) -> Option<Solicitation> {
    let msg = Icmpv6Packet::new_checked(ip.payload()).ok()?;
    if ip.hop_limit() != ND_HOP_LIMIT || !msg.verify_checksum(ip.src_addr(), ip.dst_addr()) {
        return None;
    }
    let NdpRepr::Solicit { target, source_lladdr } = NdpRepr::parse(&msg).ok()? else { return None };
    let src = ip.src_addr();
    let dad_ok = !src.is_unspecified() || (ip.dst_addr() == solicited_node(target) && source_lladdr.is_none());
    (!target.is_multicast() && dad_ok).then_some(Solicitation { src, target, source_lladdr })
}

/// Writes `advert` from `from` to `to` over the IPv6 packet in `ipb` (at
/// least [`NA_LEN`] bytes of payload), zeroing what the solicitation had
/// beyond it.
fn write_advert(ipb: &mut [u8], advert: &NdpRepr, from: Ipv6Addr, to: Ipv6Addr) {
    let end = IPV6_HEADER_LEN + usize::from(Ipv6Packet::new_unchecked(&*ipb).payload_len());
    let msg = &mut ipb[IPV6_HEADER_LEN..end];
    advert.emit(msg).expect("the caller checked the room");
    msg[NA_LEN..].fill(0);
    Icmpv6Packet::new_unchecked(&mut msg[..NA_LEN]).fill_checksum(from, to);
    let mut ip = Ipv6Packet::new_unchecked(&mut *ipb);
    ip.set_src_addr(from);
    ip.set_dst_addr(to);
    ip.set_hop_limit(ND_HOP_LIMIT);
    ip.set_payload_len(NA_LEN as u16);
}

impl PacketNf for ArpResponder {
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
