//! The L4 payload of a frame, as the NFs that read payloads (the IPS,
//! the payload scan) see it: one parse, the shared flow parser's, so they
//! agree with it (and with the XDP pipeline) on what is malformed, what
//! is a fragment and where the payload ends: the IPv4 total length or
//! the IPv6 payload length (Ethernet padding is not payload). IPv4 and
//! IPv6 alike, through up to two VLAN tags.

use std::net::Ipv6Addr;

use ferry_wire::flow::{self, IpVersion};
use ferry_wire::icmpv4::ICMP_HEADER_LEN;
use ferry_wire::ipv4::{ip_proto, Ipv4Packet};
use ferry_wire::ipv6::{next_header, Ipv6Packet, IPV6_HEADER_LEN};
use ferry_wire::tcp::TcpPacket;
use ferry_wire::udp::UDP_HEADER_LEN;

/// What a payload-reading NF sees of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inspect<'a> {
    /// Malformed by the shared flow parser.
    Malformed,
    /// No IP header.
    NotIp,
    /// A fragment (IPv4, or IPv6 by its fragment header): no reassembly,
    /// so its payload is not the whole.
    Fragment {
        proto: u8,
    },
    Ip(IpPacket<'a>),
}

/// An unfragmented IP packet's addresses, ports and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpPacket<'a> {
    /// The IPv4 protocol or the IPv6 next header after its extensions.
    pub proto: u8,
    /// IPv4 addresses IPv4-mapped.
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// 0 where the protocol has no ports.
    pub sport: u16,
    pub dport: u16,
    /// TCP's flags byte (CWR..FIN), None for other protocols.
    pub tcp_flags: Option<u8>,
    /// TCP or UDP data, or an ICMP/ICMPv6 message past its 8-byte header;
    /// empty for other protocols.
    pub payload: &'a [u8],
}

pub(crate) fn inspect(frame: &[u8]) -> Inspect<'_> {
    let Ok(f) = flow::parse(frame) else {
        return Inspect::Malformed;
    };
    let Some(version) = f.ip else {
        return Inspect::NotIp;
    };
    if f.fragment {
        return Inspect::Fragment { proto: f.proto };
    }
    let ip = &frame[f.l3_offset..];
    let ip_len = match version {
        IpVersion::V4 => Ipv4Packet::new_unchecked(ip).total_len(),
        IpVersion::V6 => IPV6_HEADER_LEN + usize::from(Ipv6Packet::new_unchecked(ip).payload_len()),
    };
    let l4_end = f.l3_offset + ip_len;
    let mut packet = IpPacket {
        proto: f.proto,
        src: f.src,
        dst: f.dst,
        sport: f.sport,
        dport: f.dport,
        tcp_flags: None,
        payload: &[],
    };
    // The parse checked every length these views read: a TCP, UDP, ICMP
    // or ICMPv6 header of an unfragmented packet is there, within the IP
    // payload.
    let Some(l4_at) = f.l4_offset else {
        return Inspect::Ip(packet);
    };
    let header = match (f.proto, version) {
        (ip_proto::TCP, _) => {
            let tcp = TcpPacket::new_unchecked(&frame[l4_at..l4_end]);
            packet.tcp_flags = Some(frame[l4_at + TCP_FLAGS_AT]);
            tcp.header_len()
        }
        (ip_proto::UDP, _) => UDP_HEADER_LEN,
        (ip_proto::ICMP, IpVersion::V4) | (next_header::ICMPV6, IpVersion::V6) => ICMP_HEADER_LEN,
        _ => return Inspect::Ip(packet),
    };
    packet.payload = frame.get(l4_at + header..l4_end).unwrap_or(&[]);
    Inspect::Ip(packet)
}

/// Where TCP's flags byte is, from the start of its header (RFC 9293,
/// section 3.1).
const TCP_FLAGS_AT: usize = 13;

/// The payload scan's view: TCP and UDP only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L4Payload<'a> {
    Malformed,
    /// No IP header, or neither TCP nor UDP: there is no payload to read.
    NotInspected,
    Fragment,
    Payload {
        bytes: &'a [u8],
    },
}

fn is_tcp_or_udp(proto: u8) -> bool {
    proto == ip_proto::TCP || proto == ip_proto::UDP
}

pub(crate) fn l4_payload(frame: &[u8]) -> L4Payload<'_> {
    match inspect(frame) {
        Inspect::Malformed => L4Payload::Malformed,
        Inspect::NotIp => L4Payload::NotInspected,
        Inspect::Fragment { proto } if is_tcp_or_udp(proto) => L4Payload::Fragment,
        Inspect::Ip(p) if is_tcp_or_udp(p.proto) => L4Payload::Payload { bytes: p.payload },
        Inspect::Fragment { .. } | Inspect::Ip(_) => L4Payload::NotInspected,
    }
}
