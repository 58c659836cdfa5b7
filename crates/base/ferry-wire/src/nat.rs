//! What a NAT or a load balancer reads and rewrites in a frame: the TCP
//! or UDP endpoints of an IPv4 or IPv6 packet, located once
//! ([`Headers::parse`], by the shared flow parser), and replaced with the
//! checksums updated incrementally (RFC 1624): the IPv4 header checksum,
//! and the L4 checksum, whose pseudo-header covers the addresses in both
//! families (IPv6 has no header checksum). Whatever was right or wrong
//! about them stays so. An IPv4 UDP checksum of 0 ("none") stays 0. The
//! parallel runtime's NAT and load balancer and the eNAT's slow path all
//! translate with it.

use std::net::IpAddr;

use crate::checksum::{update16, update_bytes};
use crate::flow::{self, IpVersion};
use crate::ip_proto;

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
    pub ip: IpAddr,
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
    /// Not TCP or UDP over IP, or a fragment (later pieces carry no ports).
    Unsupported,
}

/// Where the fields a NAT reads and rewrites sit in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    ip_at: usize,
    l4_at: usize,
    version: IpVersion,
    pub transport: Transport,
    pub src: Endpoint,
    pub dst: Endpoint,
}

impl Headers {
    pub fn parse(frame: &[u8]) -> Result<Headers, Unparsed> {
        let f = flow::parse(frame).map_err(|_| Unparsed::Malformed)?;
        let (Some(version), Some(l4_at)) = (f.ip, f.l4_offset) else { return Err(Unparsed::Unsupported) };
        let transport = match f.proto {
            ip_proto::UDP => Transport::Udp,
            ip_proto::TCP => Transport::Tcp,
            _ => return Err(Unparsed::Unsupported),
        };
        if f.fragment {
            return Err(Unparsed::Unsupported);
        }
        let ip = |a| flow_space_to_ip(a, version);
        Ok(Headers {
            ip_at: f.l3_offset,
            l4_at,
            version,
            transport,
            src: Endpoint { ip: ip(f.src), port: f.sport },
            dst: Endpoint { ip: ip(f.dst), port: f.dport },
        })
    }

    /// Replaces one endpoint of `frame` (the frame these headers were
    /// parsed from) with `to`, of the frame's IP version, and updates the
    /// checksums for the change.
    ///
    /// # Panics
    /// If `to` is of the other IP version: a translator between versions
    /// (NAT64) rewrites whole headers, not fields.
    pub fn rewrite(&self, frame: &mut [u8], side: Side, to: Endpoint) {
        let from = match side {
            Side::Source => self.src,
            Side::Destination => self.dst,
        };
        let (old_addr, new_addr) = (octets(from.ip), octets(to.ip));
        assert_eq!(old_addr.len(), new_addr.len(), "a rewrite keeps the IP version");
        // RFC 791 / RFC 8200 §3: where the addresses sit in the header.
        let (src_at, dst_at) = match self.version {
            IpVersion::V4 => (12, 16),
            IpVersion::V6 => (8, 24),
        };
        let (addr_at, port_at) = match side {
            Side::Source => (self.ip_at + src_at, self.l4_at),
            Side::Destination => (self.ip_at + dst_at, self.l4_at + 2),
        };
        if self.version == IpVersion::V4 {
            let ip_checksum_at = self.ip_at + 10;
            write16(frame, ip_checksum_at, update_bytes(read16(frame, ip_checksum_at), &old_addr, &new_addr));
        }
        // The L4 checksum covers the addresses (pseudo-header) and ports.
        let l4_checksum_at = self.l4_at + if self.transport == Transport::Udp { 6 } else { 16 };
        let old = read16(frame, l4_checksum_at);
        // A UDP checksum of 0 ("none", IPv4) stays 0; in IPv6 it is invalid
        // either way, and left as it came, as the XDP rewrite does.
        if !(self.transport == Transport::Udp && old == 0) {
            let mut new = update16(update_bytes(old, &old_addr, &new_addr), from.port, to.port);
            if self.transport == Transport::Udp && new == 0 {
                new = 0xffff; // 0 means "no checksum" in UDP (RFC 768)
            }
            write16(frame, l4_checksum_at, new);
        }
        frame[addr_at..addr_at + new_addr.len()].copy_from_slice(&new_addr);
        write16(frame, port_at, to.port);
    }
}

/// A flow-key address as the frame's IP version holds it.
fn flow_space_to_ip(a: std::net::Ipv6Addr, version: IpVersion) -> IpAddr {
    match (version, a.to_ipv4_mapped()) {
        (IpVersion::V4, Some(v4)) => IpAddr::V4(v4),
        _ => IpAddr::V6(a),
    }
}

/// The address's bytes as the header holds them (4 or 16).
fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
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
    use std::net::Ipv4Addr;

    fn frame(proto: L4Proto) -> Vec<u8> {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
        let t = FiveTuple {
            src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
            dst_ip: Ipv4Addr::new(192, 0, 2, 9).into(),
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
            assert_eq!(h.src, Endpoint { ip: Ipv4Addr::new(10, 0, 0, 1).into(), port: 40000 });
            let public = Endpoint { ip: Ipv4Addr::new(203, 0, 113, 1).into(), port: 20000 };
            h.rewrite(&mut f, Side::Source, public);
            assert!(verify_checksums(&f).unwrap(), "{proto:?}");
            let h = Headers::parse(&f).unwrap();
            assert_eq!((h.src, h.dst.port), (public, 80));
            let inside = Endpoint { ip: Ipv4Addr::new(10, 0, 0, 7).into(), port: 7 };
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
        h.rewrite(&mut no_sum, Side::Source, Endpoint { ip: Ipv4Addr::new(1, 2, 3, 4).into(), port: 5 });
        assert_eq!(&no_sum[40..42], &[0, 0], "a UDP frame without checksum keeps none");
    }

    #[test]
    fn rewrites_ipv6_endpoints_with_valid_checksums() {
        let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 96 };
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        for proto in [L4Proto::Tcp, L4Proto::Udp] {
            let t = FiveTuple {
                src_ip: a("2001:db8::1"),
                dst_ip: a("2001:db8:9::9"),
                src_port: 40000,
                dst_port: 80,
                proto,
            };
            let mut f = vec![0u8; 96];
            build_frame(&spec, &t, None, &mut f).unwrap();
            let h = Headers::parse(&f).unwrap();
            assert_eq!(h.dst, Endpoint { ip: a("2001:db8:9::9"), port: 80 });
            let backend = Endpoint { ip: a("2001:db8:2::11"), port: 8080 };
            h.rewrite(&mut f, Side::Destination, backend);
            assert!(verify_checksums(&f).unwrap(), "{proto:?}");
            assert_eq!(Headers::parse(&f).unwrap().dst, backend);
        }
    }
}
