//! The L4 payload of a frame, as the NFs that read payloads (the IPS,
//! the payload scan) see it: one parse, the shared flow parser's, so they
//! agree with it (and with the XDP pipeline) on what is malformed, what
//! is a fragment and where the payload ends: the IPv4 total length or
//! the IPv6 payload length (Ethernet padding is not payload). IPv4 and
//! IPv6 alike, through up to two VLAN tags.

use ferry_wire::flow::{self, IpVersion};
use ferry_wire::ipv4::{ip_proto, Ipv4Packet};
use ferry_wire::ipv6::{Ipv6Packet, IPV6_HEADER_LEN};
use ferry_wire::tcp::TcpPacket;
use ferry_wire::udp::UDP_HEADER_LEN;

use crate::ips_rules::Proto;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L4Payload<'a> {
    /// Malformed by the shared flow parser.
    Malformed,
    /// No IP header, or neither TCP nor UDP: there is no payload to read.
    NotInspected,
    /// A fragment (IPv4, or IPv6 by its fragment header): no reassembly,
    /// so its payload is not the whole.
    Fragment,
    Payload {
        proto: Proto,
        dst_port: u16,
        bytes: &'a [u8],
    },
}

pub(crate) fn l4_payload(frame: &[u8]) -> L4Payload<'_> {
    let Ok(f) = flow::parse(frame) else {
        return L4Payload::Malformed;
    };
    let (Some(version), proto) = (f.ip, f.proto) else {
        return L4Payload::NotInspected;
    };
    let proto = match proto {
        ip_proto::TCP => Proto::Tcp,
        ip_proto::UDP => Proto::Udp,
        _ => return L4Payload::NotInspected,
    };
    if f.fragment {
        return L4Payload::Fragment;
    }
    // The parse checked every length these views read: a TCP or UDP
    // header of an unfragmented packet is there, within the IP payload.
    let Some(l4_at) = f.l4_offset else {
        return L4Payload::Malformed;
    };
    let ip = &frame[f.l3_offset..];
    let ip_len = match version {
        IpVersion::V4 => Ipv4Packet::new_unchecked(ip).total_len(),
        IpVersion::V6 => IPV6_HEADER_LEN + usize::from(Ipv6Packet::new_unchecked(ip).payload_len()),
    };
    let l4_end = f.l3_offset + ip_len;
    let header = match proto {
        Proto::Tcp => TcpPacket::new_unchecked(&frame[l4_at..l4_end]).header_len(),
        Proto::Udp => UDP_HEADER_LEN,
    };
    L4Payload::Payload { proto, dst_port: f.dport, bytes: &frame[l4_at + header..l4_end] }
}
