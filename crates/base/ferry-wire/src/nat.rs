//! What a NAT reads and rewrites in a frame: the IPv4 TCP or UDP
//! endpoints, located once ([`Headers::parse`], every length checked by
//! the views), and replaced with the IPv4 and L4 checksums updated
//! incrementally (RFC 1624), so whatever was right or wrong about them
//! stays so. A UDP checksum of 0 ("none") stays 0. The parallel runtime's
//! NAT and the eNAT's slow path both translate with it.

use std::net::Ipv4Addr;

use crate::checksum::{update16, update_bytes};
use crate::{ethertype, ip_proto, EthernetFrame, Ipv4Packet, TcpPacket, UdpPacket};

/// The protocols a NAT translates; each has its own port space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    /// Its IP protocol number.
    pub fn ip_proto(self) -> u8 {
        match self {
            Transport::Udp => ip_proto::UDP,
            Transport::Tcp => ip_proto::TCP,
        }
    }
}

/// An address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// Which endpoint of a packet a rewrite changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

/// Why a frame is not translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unparsed {
    /// A header is shorter than it says.
    Malformed,
    /// Not IPv4 TCP or UDP, or a fragment (later pieces carry no ports).
    Unsupported,
}

/// Where the fields a NAT reads and rewrites sit in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    ip_at: usize,
    l4_at: usize,
    pub transport: Transport,
    pub src: Endpoint,
    pub dst: Endpoint,
}

impl Headers {
    pub fn parse(frame: &[u8]) -> Result<Headers, Unparsed> {
        let eth = EthernetFrame::new_checked(frame).map_err(|_| Unparsed::Malformed)?;
        if eth.ethertype() != ethertype::IPV4 {
            return Err(Unparsed::Unsupported);
        }
        let ip_at = eth.header_len();
        let ip = Ipv4Packet::new_checked(&frame[ip_at..]).map_err(|_| Unparsed::Malformed)?;
        if ip.is_fragment() {
            return Err(Unparsed::Unsupported);
        }
        let l4_at = ip_at + ip.header_len();
        let segment = &frame[l4_at..ip_at + ip.total_len()];
        let transport = match ip.protocol() {
            ip_proto::UDP => UdpPacket::new_checked(segment).map(|_| Transport::Udp),
            ip_proto::TCP => TcpPacket::new_checked(segment).map(|_| Transport::Tcp),
            _ => return Err(Unparsed::Unsupported),
        }
        .map_err(|_| Unparsed::Malformed)?;
        let port_at = |at: usize| u16::from_be_bytes([segment[at], segment[at + 1]]);
        Ok(Headers {
            ip_at,
            l4_at,
            transport,
            src: Endpoint { ip: ip.src_addr(), port: port_at(0) },
            dst: Endpoint { ip: ip.dst_addr(), port: port_at(2) },
        })
    }

    /// Replaces one endpoint of `frame` (the frame these headers were
    /// parsed from) with `to`, and updates the checksums for the change.
    pub fn rewrite(&self, frame: &mut [u8], side: Side, to: Endpoint) {
        let (addr_at, port_at, from) = match side {
            Side::Source => (self.ip_at + 12, self.l4_at, self.src),
            Side::Destination => (self.ip_at + 16, self.l4_at + 2, self.dst),
        };
        let (old_addr, new_addr) = (from.ip.octets(), to.ip.octets());
        let ip_checksum_at = self.ip_at + 10;
        let ip_checksum = update_bytes(read16(frame, ip_checksum_at), &old_addr, &new_addr);
        write16(frame, ip_checksum_at, ip_checksum);
        // The L4 checksum covers the addresses (pseudo-header) and ports.
        let l4_checksum_at = self.l4_at + if self.transport == Transport::Udp { 6 } else { 16 };
        let old = read16(frame, l4_checksum_at);
        if !(self.transport == Transport::Udp && old == 0) {
            let mut new = update16(update_bytes(old, &old_addr, &new_addr), from.port, to.port);
            if self.transport == Transport::Udp && new == 0 {
                new = 0xffff; // 0 means "no checksum" in UDP (RFC 768)
            }
            write16(frame, l4_checksum_at, new);
        }
        frame[addr_at..addr_at + 4].copy_from_slice(&new_addr);
        write16(frame, port_at, to.port);
    }
}

fn read16(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

fn write16(frame: &mut [u8], at: usize, value: u16) {
    frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_frame, verify_checksums, FiveTuple, FrameSpec, L4Proto};

    fn frame(proto: L4Proto) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
        let t = FiveTuple {
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(192, 0, 2, 9),
            src_port: 40000,
            dst_port: 80,
            proto,
        };
        let mut f = vec![0u8; 64];
        let n = build_frame(&spec, &t, None, &mut f).unwrap();
        f.truncate(n);
        f
    }

    #[test]
    fn rewrites_either_endpoint_with_valid_checksums() {
        for proto in [L4Proto::Tcp, L4Proto::Udp] {
            let mut f = frame(proto);
            let h = Headers::parse(&f).unwrap();
            assert_eq!(h.src, Endpoint { ip: Ipv4Addr::new(10, 0, 0, 1), port: 40000 });
            let public = Endpoint { ip: Ipv4Addr::new(203, 0, 113, 1), port: 20000 };
            h.rewrite(&mut f, Side::Source, public);
            assert!(verify_checksums(&f).unwrap(), "{proto:?}");
            let h = Headers::parse(&f).unwrap();
            assert_eq!((h.src, h.dst.port), (public, 80));
            let inside = Endpoint { ip: Ipv4Addr::new(10, 0, 0, 7), port: 7 };
            h.rewrite(&mut f, Side::Destination, inside);
            assert!(verify_checksums(&f).unwrap(), "{proto:?}");
            assert_eq!(Headers::parse(&f).unwrap().dst, inside);
        }
    }

    #[test]
    fn refuses_what_it_cannot_translate() {
        let f = frame(L4Proto::Udp);
        let mut fragment = f.clone();
        fragment[20] = 0x20;
        assert_eq!(Headers::parse(&fragment), Err(Unparsed::Unsupported));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(Headers::parse(&arp), Err(Unparsed::Unsupported));
        assert_eq!(Headers::parse(&f[..30]), Err(Unparsed::Malformed));
        let mut no_sum = f.clone();
        no_sum[40..42].copy_from_slice(&[0, 0]);
        let h = Headers::parse(&no_sum).unwrap();
        h.rewrite(&mut no_sum, Side::Source, Endpoint { ip: Ipv4Addr::new(1, 2, 3, 4), port: 5 });
        assert_eq!(&no_sum[40..42], &[0, 0], "a UDP frame without checksum keeps none");
    }
}
