//! A frame parsed down to its flow: the one L2–L4 parse that NFs which
//! classify by 5-tuple share, and the same parser as the BPF side's
//! `ferry_parse_l4` (bpf/include/ferry_parse.h). An NF placed in XDP and
//! the same NF run in user space must agree on every frame, malformed
//! ones included; a differential test in ferry-bpf runs both on random
//! and mutated frames and compares the answers field by field.
//!
//! The rules, in order:
//! - Ethernet, with at most one 802.1Q tag; stacked tags (802.1ad, or a
//!   second 802.1Q) are malformed: an NF that lets "not IP" pass would
//!   otherwise let the inner frame by unchecked;
//! - IPv4: the header must be valid ([`Ipv4Packet::new_checked`]); a
//!   non-first fragment stops there (no L4 header);
//! - IPv6: the fixed 40-byte header; the next header is taken as the L4
//!   protocol (extension headers are not walked);
//! - L4: TCP, UDP and ICMP headers must fit in the IP payload (IPv4: up
//!   to its total length; IPv6: up to the end of the frame), and so must
//!   the UDP length, but for an IPv4 first fragment (its UDP length
//!   covers the whole datagram); other protocols carry no L4 fields.
//!
//! Anything else (ARP, unknown EtherTypes) parses fine with no IP fields.

use std::net::Ipv4Addr;

use crate::ethernet::{ethertype, EthernetFrame};
use crate::icmpv4::Icmpv4Packet;
use crate::ipv4::{ip_proto, Ipv4Packet};
use crate::ipv6::{Ipv6Packet, IPV6_HEADER_LEN};
use crate::tcp::TcpPacket;
use crate::udp::{UdpPacket, UDP_HEADER_LEN};
use crate::WireError;

/// What [`parse`] found. Addresses are IPv4 only (unspecified otherwise);
/// ports are 0 unless the L4 header is TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The EtherType after at most one 802.1Q tag.
    pub ethertype: u16,
    /// An IPv4 header was parsed.
    pub is_ipv4: bool,
    /// The IPv4 protocol or the IPv6 next header; 0 for non-IP frames.
    pub proto: u8,
    /// An IPv4 fragment after the first: no L4 fields.
    pub later_fragment: bool,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    /// Where the TCP, UDP or ICMP header starts in the frame.
    pub l4_offset: Option<usize>,
}

/// Parses `frame` to its flow; an error means the frame is malformed (the
/// caller counts and drops it).
pub fn parse(frame: &[u8]) -> Result<Flow, WireError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3_offset = eth.header_len();
    let mut flow = Flow {
        ethertype: eth.ethertype(),
        is_ipv4: false,
        proto: 0,
        later_fragment: false,
        src: Ipv4Addr::UNSPECIFIED,
        dst: Ipv4Addr::UNSPECIFIED,
        sport: 0,
        dport: 0,
        l4_offset: None,
    };
    if matches!(flow.ethertype, ethertype::VLAN | ethertype::QINQ) {
        return Err(WireError::UnsupportedEthertype(flow.ethertype));
    }
    let mut first_fragment = false;
    let (l4, l4_offset) = match flow.ethertype {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(eth.payload())?;
            flow.is_ipv4 = true;
            flow.proto = ip.protocol();
            flow.src = ip.src_addr();
            flow.dst = ip.dst_addr();
            if ip.frag_offset() != 0 {
                flow.later_fragment = true;
                return Ok(flow);
            }
            first_fragment = ip.more_frags();
            let (header, total) = (ip.header_len(), ip.total_len());
            (&eth.payload()[header..total], l3_offset + header)
        }
        ethertype::IPV6 => {
            let payload = eth.payload();
            if payload.len() < IPV6_HEADER_LEN {
                return Err(WireError::Truncated { layer: "ipv6", need: IPV6_HEADER_LEN, have: payload.len() });
            }
            // The fixed header only, as the BPF side reads it: no version
            // or payload-length check here (yet).
            flow.proto = Ipv6Packet::new_unchecked(payload).next_header();
            (&payload[IPV6_HEADER_LEN..], l3_offset + IPV6_HEADER_LEN)
        }
        _ => return Ok(flow),
    };
    match flow.proto {
        ip_proto::TCP => {
            let tcp = TcpPacket::new_checked(l4)?;
            (flow.sport, flow.dport) = (tcp.src_port(), tcp.dst_port());
        }
        // Only the header is here: the UDP length covers the whole datagram.
        ip_proto::UDP if first_fragment => {
            let have = l4.len();
            let header = l4.get(..UDP_HEADER_LEN).ok_or(WireError::Truncated { layer: "udp", need: 8, have })?;
            let udp = UdpPacket::new_unchecked(header);
            (flow.sport, flow.dport) = (udp.src_port(), udp.dst_port());
        }
        ip_proto::UDP => {
            let udp = UdpPacket::new_checked(l4)?;
            (flow.sport, flow.dport) = (udp.src_port(), udp.dst_port());
        }
        ip_proto::ICMP => {
            Icmpv4Packet::new_checked(l4)?;
        }
        _ => return Ok(flow),
    }
    flow.l4_offset = Some(l4_offset);
    Ok(flow)
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
        assert_eq!((f.ethertype, f.is_ipv4, f.proto), (0x0800, true, 17));
        assert_eq!((f.src, f.dst), (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 1, 2)));
        assert_eq!((f.sport, f.dport, f.l4_offset), (1000, 53, Some(34)));
    }

    #[test]
    fn vlan_is_unwrapped_once() {
        let mut f = ipv4_frame(17, 0, &UDP_1000_53);
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        let flow = parse(&f).unwrap();
        assert_eq!((flow.dport, flow.l4_offset), (53, Some(38)));
        // Stacked tags: refused, outer 802.1ad or a second 802.1Q.
        f[12..14].copy_from_slice(&[0x88, 0xa8]);
        assert_eq!(parse(&f), Err(WireError::UnsupportedEthertype(0x88a8)));
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f.splice(16..16, [0x81, 0x00, 0x00, 0x08]);
        assert_eq!(parse(&f), Err(WireError::UnsupportedEthertype(0x8100)));
    }

    #[test]
    fn later_fragment_has_no_ports() {
        let f = parse(&ipv4_frame(17, 1, &[0; 8])).unwrap();
        assert!(f.later_fragment && f.is_ipv4);
        assert_eq!((f.sport, f.dport, f.l4_offset), (0, 0, None));
        // A first fragment (more-fragments flag only) has its ports, and
        // its UDP length may run past it (it covers the whole datagram).
        let mut first = UDP_1000_53;
        first[5] = 200;
        assert_eq!(parse(&ipv4_frame(17, 0x2000, &first)).unwrap().dport, 53);
        assert!(parse(&ipv4_frame(17, 0, &first)).is_err(), "not a fragment: the UDP length must fit");
        assert!(parse(&ipv4_frame(17, 0x2000, &first[..6])).is_err(), "a cut header still is malformed");
    }

    #[test]
    fn ipv6_next_header_is_the_protocol() {
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 17;
        f[54..62].copy_from_slice(&UDP_1000_53);
        let flow = parse(&f).unwrap();
        assert_eq!((flow.is_ipv4, flow.proto, flow.dport, flow.l4_offset), (false, 17, 53, Some(54)));
        assert!(parse(&f[..14 + 39]).is_err());
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
        assert_eq!((flow.ethertype, flow.is_ipv4, flow.proto, flow.l4_offset), (0x0806, false, 0, None));
        let gre = parse(&ipv4_frame(47, 0, &[])).unwrap();
        assert_eq!((gre.proto, gre.sport, gre.l4_offset), (47, 0, None));
    }
}
