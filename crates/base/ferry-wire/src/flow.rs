//! A frame parsed down to its flow: the one L2–L4 parse that NFs which
//! classify by 5-tuple share, and the same parser as the BPF side's
//! `ferry_parse_l4` (bpf/include/ferry_parse.h). An NF placed in XDP and
//! the same NF run in user space must agree on every frame, malformed
//! ones included; a differential test in ferry-bpf runs both on random
//! and mutated frames and compares the answers field by field.
//!
//! The rules, in order:
//! - Ethernet, with up to two tags ([`EthernetFrame`]: an outer 802.1ad
//!   or 802.1Q tag, an inner 802.1Q tag); a third tag, or an 802.1ad tag
//!   inside, is malformed: an NF that lets "not IP" pass would otherwise
//!   let the inner frame by unchecked;
//! - IPv4: the header must be valid ([`Ipv4Packet::new_checked`]); a
//!   non-first fragment stops there (no L4 header);
//! - IPv6: the fixed header must be valid ([`Ipv6Packet::new_checked`]:
//!   version 6, the payload length within the frame); neither address
//!   may be IPv4-mapped; the extension headers are walked
//!   ([`walk_extensions`], at most four) and a non-first fragment stops
//!   there;
//! - L4: TCP, UDP, ICMP (in IPv4) and ICMPv6 (in IPv6) headers must fit
//!   in the IP payload (up to the IPv4 total length or the IPv6 payload
//!   length), and so must the UDP length, but for a first fragment (its
//!   UDP length covers the whole datagram); other protocols carry no L4
//!   fields.
//!
//! Anything else (ARP, unknown EtherTypes) parses fine with no IP fields.
//!
//! Addresses are one 128-bit key for both families: an IPv4 address is
//! held IPv4-mapped (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2), so a rule, a
//! table or a hash over the key needs no second code path.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::ethernet::{ethertype, EthernetFrame};
use crate::icmpv4::Icmpv4Packet;
use crate::icmpv6::Icmpv6Packet;
use crate::ipv4::{ip_proto, Ipv4Packet};
use crate::ipv6::{next_header, walk_extensions, Ipv6Packet, IPV6_HEADER_LEN};
use crate::tcp::TcpPacket;
use crate::udp::{UdpPacket, UDP_HEADER_LEN};
use crate::WireError;

/// The IP version of a parsed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    V4,
    V6,
}

/// What [`parse`] found. Addresses are unspecified for non-IP frames;
/// ports are 0 unless the L4 header is TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The EtherType after the tags.
    pub ethertype: u16,
    /// The outer (or only) tag's VLAN id.
    pub outer_vlan: Option<u16>,
    /// The inner tag's VLAN id, when there are two.
    pub inner_vlan: Option<u16>,
    /// Where the IP header (or whatever the EtherType names) starts.
    pub l3_offset: usize,
    /// The IP header parsed, if any.
    pub ip: Option<IpVersion>,
    /// The upper-layer protocol: the IPv4 protocol, or the IPv6 next
    /// header after the extension headers; 0 for non-IP frames.
    pub proto: u8,
    /// A fragment, the first included.
    pub fragment: bool,
    /// A fragment after the first: no L4 fields.
    pub later_fragment: bool,
    /// Source and destination, IPv4 ones IPv4-mapped.
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub sport: u16,
    pub dport: u16,
    /// Where the TCP, UDP, ICMP or ICMPv6 header starts in the frame.
    pub l4_offset: Option<usize>,
}

impl Flow {
    pub fn is_ipv4(&self) -> bool {
        self.ip == Some(IpVersion::V4)
    }

    pub fn is_ipv6(&self) -> bool {
        self.ip == Some(IpVersion::V6)
    }

    /// The IPv4 source, for an IPv4 frame.
    pub fn src_v4(&self) -> Option<Ipv4Addr> {
        self.is_ipv4().then(|| self.src.to_ipv4_mapped()).flatten()
    }

    /// The IPv4 destination, for an IPv4 frame.
    pub fn dst_v4(&self) -> Option<Ipv4Addr> {
        self.is_ipv4().then(|| self.dst.to_ipv4_mapped()).flatten()
    }
}

/// Parses `frame` to its flow; an error means the frame is malformed (the
/// caller counts and drops it).
pub fn parse(frame: &[u8]) -> Result<Flow, WireError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut flow = Flow {
        ethertype: eth.ethertype(),
        outer_vlan: eth.vlan_id(),
        inner_vlan: eth.inner_vlan_id(),
        l3_offset: eth.header_len(),
        ip: None,
        proto: 0,
        fragment: false,
        later_fragment: false,
        src: Ipv6Addr::UNSPECIFIED,
        dst: Ipv6Addr::UNSPECIFIED,
        sport: 0,
        dport: 0,
        l4_offset: None,
    };
    if matches!(flow.ethertype, ethertype::VLAN | ethertype::QINQ) {
        return Err(WireError::UnsupportedEthertype(flow.ethertype));
    }
    let l4 = match flow.ethertype {
        ethertype::IPV4 => ipv4(eth.payload(), &mut flow)?,
        ethertype::IPV6 => ipv6(eth.payload(), &mut flow)?,
        _ => None,
    };
    if let Some((l4, offset)) = l4 {
        if upper_layer(l4, &mut flow)? {
            flow.l4_offset = Some(flow.l3_offset + offset);
        }
    }
    Ok(flow)
}

/// The IPv4 header; its L4 bytes (to the total length) and their offset
/// from the header, unless a later fragment.
fn ipv4<'a>(payload: &'a [u8], flow: &mut Flow) -> Result<Option<(&'a [u8], usize)>, WireError> {
    let ip = Ipv4Packet::new_checked(payload)?;
    flow.ip = Some(IpVersion::V4);
    flow.proto = ip.protocol();
    flow.src = ip.src_addr().to_ipv6_mapped();
    flow.dst = ip.dst_addr().to_ipv6_mapped();
    flow.fragment = ip.more_frags() || ip.frag_offset() != 0;
    flow.later_fragment = ip.frag_offset() != 0;
    let (header, total) = (ip.header_len(), ip.total_len());
    Ok((!flow.later_fragment).then(|| (&payload[header..total], header)))
}

/// The IPv6 header and its extension headers; the upper-layer bytes (to
/// the payload length) and their offset from the header, unless a later
/// fragment.
fn ipv6<'a>(payload: &'a [u8], flow: &mut Flow) -> Result<Option<(&'a [u8], usize)>, WireError> {
    let ip = Ipv6Packet::new_checked(payload)?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if src.to_ipv4_mapped().is_some() || dst.to_ipv4_mapped().is_some() {
        return Err(WireError::Ipv4MappedOnWire);
    }
    let upper = walk_extensions(ip.next_header(), ip.payload())?;
    flow.ip = Some(IpVersion::V6);
    flow.proto = upper.proto;
    (flow.src, flow.dst) = (src, dst);
    (flow.fragment, flow.later_fragment) = (upper.fragment, upper.later_fragment);
    let end = IPV6_HEADER_LEN + usize::from(ip.payload_len());
    let start = IPV6_HEADER_LEN + upper.offset;
    Ok((!flow.later_fragment).then(|| (&payload[start..end], start)))
}

/// Checks the L4 header in `l4` and takes its ports; false for a protocol
/// with no L4 fields.
fn upper_layer(l4: &[u8], flow: &mut Flow) -> Result<bool, WireError> {
    match (flow.proto, flow.ip) {
        (ip_proto::TCP, _) => {
            let tcp = TcpPacket::new_checked(l4)?;
            (flow.sport, flow.dport) = (tcp.src_port(), tcp.dst_port());
        }
        // Only the header is here: the UDP length covers the whole datagram.
        (ip_proto::UDP, _) if flow.fragment => {
            let have = l4.len();
            let header = l4.get(..UDP_HEADER_LEN).ok_or(WireError::Truncated { layer: "udp", need: 8, have })?;
            let udp = UdpPacket::new_unchecked(header);
            (flow.sport, flow.dport) = (udp.src_port(), udp.dst_port());
        }
        (ip_proto::UDP, _) => {
            let udp = UdpPacket::new_checked(l4)?;
            (flow.sport, flow.dport) = (udp.src_port(), udp.dst_port());
        }
        (ip_proto::ICMP, Some(IpVersion::V4)) => {
            Icmpv4Packet::new_checked(l4)?;
        }
        (next_header::ICMPV6, Some(IpVersion::V6)) => {
            Icmpv6Packet::new_checked(l4)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (20 bytes, total length `total`) + `l4`.
    fn ipv4_frame(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let total = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 1]);
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 1, 2]);
        f.extend_from_slice(l4);
        f
    }

    const UDP_1000_53: [u8; 8] = [0x03, 0xe8, 0x00, 0x35, 0x00, 0x08, 0, 0];

    #[test]
    fn udp_flow() {
        let f = parse(&ipv4_frame(17, 0, &UDP_1000_53)).unwrap();
        assert_eq!((f.ethertype, f.is_ipv4(), f.proto, f.l3_offset), (0x0800, true, 17, 14));
        assert_eq!((f.src_v4(), f.dst_v4()), (Some(Ipv4Addr::new(10, 0, 0, 1)), Some(Ipv4Addr::new(10, 0, 1, 2))));
        assert_eq!(f.src, "::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap(), "one key: IPv4-mapped");
        assert_eq!((f.sport, f.dport, f.l4_offset), (1000, 53, Some(34)));
    }

    #[test]
    fn up_to_two_tags_are_unwrapped() {
        let mut f = ipv4_frame(17, 0, &UDP_1000_53);
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        let flow = parse(&f).unwrap();
        assert_eq!((flow.outer_vlan, flow.inner_vlan, flow.dport, flow.l4_offset), (Some(7), None, 53, Some(38)));
        // QinQ: an 802.1ad outer tag and an 802.1Q inner one, or two 802.1Q.
        f.splice(12..12, [0x88, 0xa8, 0x00, 0x64]);
        let flow = parse(&f).unwrap();
        assert_eq!(
            (flow.outer_vlan, flow.inner_vlan, flow.l3_offset, flow.l4_offset),
            (Some(100), Some(7), 22, Some(42))
        );
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_eq!(parse(&f).unwrap().inner_vlan, Some(7));
        // A third tag, or an 802.1ad tag inside, is malformed.
        f.splice(16..16, [0x81, 0x00, 0x00, 0x08]);
        assert_eq!(parse(&f), Err(WireError::UnsupportedEthertype(0x8100)));
        let mut s_inside = ipv4_frame(17, 0, &UDP_1000_53);
        s_inside.splice(12..12, [0x81, 0x00, 0x00, 0x07, 0x88, 0xa8, 0x00, 0x08]);
        assert_eq!(parse(&s_inside), Err(WireError::UnsupportedEthertype(0x88a8)));
        // A stack cut short.
        assert!(parse(&f[..20]).is_err());
    }

    #[test]
    fn later_fragment_has_no_ports() {
        let f = parse(&ipv4_frame(17, 1, &[0; 8])).unwrap();
        assert!(f.later_fragment && f.fragment && f.is_ipv4());
        assert_eq!((f.sport, f.dport, f.l4_offset), (0, 0, None));
        // A first fragment (more-fragments flag only) has its ports, and
        // its UDP length may run past it (it covers the whole datagram).
        let mut first = UDP_1000_53;
        first[5] = 200;
        assert_eq!(parse(&ipv4_frame(17, 0x2000, &first)).unwrap().dport, 53);
        assert!(parse(&ipv4_frame(17, 0, &first)).is_err(), "not a fragment: the UDP length must fit");
        assert!(parse(&ipv4_frame(17, 0x2000, &first[..6])).is_err(), "a cut header still is malformed");
    }

    /// Ethernet + IPv6 (2001:db8::1 → 2001:db8::2) + `ext` + `l4`, the
    /// first header `first`.
    fn ipv6_frame(first: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let len = (ext.len() + l4.len()) as u16;
        f.extend_from_slice(&[0x60, 0, 0, 0, (len >> 8) as u8, len as u8, first, 64]);
        f.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(ext);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn ipv6_flows_walk_the_extension_headers() {
        let f = parse(&ipv6_frame(17, &[], &UDP_1000_53)).unwrap();
        assert_eq!((f.is_ipv6(), f.proto, f.dport, f.l4_offset), (true, 17, 53, Some(54)));
        assert_eq!(f.src, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(f.src_v4(), None);
        // Hop-by-hop (8 bytes, PadN) then destination options, then UDP.
        let hbh_dst = [60, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0];
        let f = parse(&ipv6_frame(0, &hbh_dst, &UDP_1000_53)).unwrap();
        assert_eq!((f.proto, f.dport, f.l4_offset), (17, 53, Some(70)));
        // A first fragment has its ports; a later one has none.
        let mut first = UDP_1000_53;
        first[5] = 200;
        let f = parse(&ipv6_frame(44, &[17, 0, 0, 1, 0, 0, 0, 9], &first)).unwrap();
        assert_eq!((f.fragment, f.later_fragment, f.dport), (true, false, 53));
        let f = parse(&ipv6_frame(44, &[17, 0, 0, 8, 0, 0, 0, 9], &[0; 8])).unwrap();
        assert_eq!((f.fragment, f.later_fragment, f.proto, f.l4_offset), (true, true, 17, None));
        // ICMPv6's header must fit; no next header has no L4.
        assert!(parse(&ipv6_frame(58, &[], &[128, 0, 0])).is_err());
        assert_eq!(parse(&ipv6_frame(59, &[], &[])).unwrap().l4_offset, None);
        // ICMP (for IPv4) in IPv6 carries no L4 fields.
        assert_eq!(parse(&ipv6_frame(1, &[], &[])).unwrap().l4_offset, None);
    }

    #[test]
    fn malformed_ipv6() {
        let good = ipv6_frame(17, &[], &UDP_1000_53);
        let mut version_4 = good.clone();
        version_4[14] = 0x40;
        let mut mapped = good.clone();
        mapped[14 + 8..14 + 24].copy_from_slice(&"::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
        let mut long_payload = good.clone();
        long_payload[14 + 5] += 1;
        let mut jumbo = good.clone();
        jumbo[14 + 4..14 + 6].copy_from_slice(&[0, 0]);
        let cases: [(&str, Vec<u8>); 7] = [
            ("header cut", good[..14 + 39].to_vec()),
            ("version 4", version_4),
            ("IPv4-mapped source", mapped),
            ("payload length past the frame", long_payload),
            ("payload length 0 (a jumbogram)", jumbo),
            ("hop-by-hop not first", ipv6_frame(60, &[0, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0], &UDP_1000_53)),
            ("five extension headers", ipv6_frame(60, &[60, 0, 1, 4, 0, 0, 0, 0].repeat(5), &UDP_1000_53)),
        ];
        for (what, f) in cases {
            assert!(parse(&f).is_err(), "{what}: parsed");
        }
    }

    #[test]
    fn malformed_frames() {
        // The UDP header is past the IPv4 total length (padding follows).
        let mut short_total = ipv4_frame(17, 0, &UDP_1000_53);
        short_total[17] = 24;
        // UDP length 7, and UDP length past the IP payload.
        let mut udp_len_7 = ipv4_frame(17, 0, &UDP_1000_53);
        udp_len_7[14 + 20 + 5] = 7;
        let mut udp_len_long = ipv4_frame(17, 0, &UDP_1000_53);
        udp_len_long[14 + 20 + 5] = 9;
        let mut version_6 = ipv4_frame(17, 0, &UDP_1000_53);
        version_6[14] = 0x65;
        let cases: [(&str, Vec<u8>); 7] = [
            ("runt", vec![0; 13]),
            ("IPv4 header cut", ipv4_frame(17, 0, &UDP_1000_53)[..30].to_vec()),
            ("TCP header cut", ipv4_frame(6, 0, &[0; 12])),
            ("L4 past total length", short_total),
            ("UDP length 7", udp_len_7),
            ("UDP length past payload", udp_len_long),
            ("version 6 in an IPv4 frame", version_6),
        ];
        for (what, f) in cases {
            assert!(parse(&f).is_err(), "{what}: parsed");
        }
    }

    #[test]
    fn other_frames_parse_without_ip_fields() {
        let mut arp = ipv4_frame(17, 0, &UDP_1000_53);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let flow = parse(&arp).unwrap();
        assert_eq!((flow.ethertype, flow.ip, flow.proto, flow.l4_offset), (0x0806, None, 0, None));
        let gre = parse(&ipv4_frame(47, 0, &[])).unwrap();
        assert_eq!((gre.proto, gre.sport, gre.l4_offset), (47, 0, None));
    }
}
