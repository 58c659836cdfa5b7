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
    // Offsets into `frame`: the wrappers' payloads borrow the wrappers.
    let l4_at = frame.len() - eth.payload().len() + (eth.payload().len() - ip.payload().len());
    let l4_end = l4_at + ip.payload().len();
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
