//! The L4 payload of a frame, as the NFs that read payloads (the IPS,
//! the payload scan) see it: one parse, so they agree on what is
//! malformed, what is a fragment and where the payload ends (the IP
//! total length: Ethernet padding is not payload).

use ferry_wire::ethernet::{ethertype, EthernetFrame};
use ferry_wire::ipv4::{ip_proto, Ipv4Packet};
use ferry_wire::tcp::TcpPacket;
use ferry_wire::udp::UdpPacket;

use crate::ips_rules::Proto;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L4Payload<'a> {
    /// Shorter than its Ethernet (+VLAN), IPv4, TCP or UDP header says.
    Malformed,
    /// Not IPv4, or neither TCP nor UDP: there is no payload to read.
    NotInspected,
    /// An IPv4 fragment: no reassembly, so its payload is not the whole.
    Fragment,
    Payload {
        proto: Proto,
        dst_port: u16,
        bytes: &'a [u8],
    },
}

pub(crate) fn l4_payload(frame: &[u8]) -> L4Payload<'_> {
    // What the shared flow parser (and the XDP pipeline's, which drops it
    // before any element) calls malformed is malformed here too.
    if ferry_wire::flow::parse(frame).is_err() {
        return L4Payload::Malformed;
    }
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return L4Payload::Malformed;
    };
    if eth.ethertype() != ethertype::IPV4 {
        return L4Payload::NotInspected;
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return L4Payload::Malformed;
    };
    let proto = match ip.protocol() {
        ip_proto::TCP => Proto::Tcp,
        ip_proto::UDP => Proto::Udp,
        _ => return L4Payload::NotInspected,
    };
    if ip.is_fragment() {
        return L4Payload::Fragment;
    }
    // Offsets into `frame` (the wrappers' payloads borrow the wrappers):
    // the datagram ends at its total length, before any Ethernet padding
    // or trailer.
    let l4_at = eth.header_len() + ip.header_len();
    let l4_end = eth.header_len() + ip.total_len();
    let (dst_port, header) = match proto {
        Proto::Tcp => match TcpPacket::new_checked(ip.payload()) {
            Ok(t) => (t.dst_port(), t.header_len()),
            Err(_) => return L4Payload::Malformed,
        },
        Proto::Udp => match UdpPacket::new_checked(ip.payload()) {
            Ok(u) => (u.dst_port(), ferry_wire::udp::UDP_HEADER_LEN),
            Err(_) => return L4Payload::Malformed,
        },
    };
    L4Payload::Payload { proto, dst_port, bytes: &frame[l4_at + header..l4_end] }
}
