//! ARP for Ethernet/IPv4 (RFC 826).

use std::net::Ipv4Addr;

use crate::ethernet::ethertype;
use crate::WireError;

/// ARP operation codes.
pub mod arp_op {
    pub const REQUEST: u16 = 1;
    pub const REPLY: u16 = 2;
}

/// Hardware type for Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// Zero-copy view of an Ethernet/IPv4 ARP packet.
///
/// `new_checked` only accepts htype 1, ptype 0x0800, hlen 6, plen 4, so the
/// address fields are at fixed offsets.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn mac_at(b: &[u8], at: usize) -> [u8; 6] {
    [b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]]
}

fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps after checking the length and the Ethernet/IPv4 format. The
    /// buffer may be longer than 28 bytes (Ethernet padding).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        // The format fields come first so that a short packet of the wrong
        // format reports the format, which is the more useful diagnosis.
        if b.len() < 6 {
            return Err(WireError::Truncated { layer: "arp", need: ARP_LEN, have: b.len() });
        }
        let htype = u16::from_be_bytes([b[0], b[1]]);
        let ptype = u16::from_be_bytes([b[2], b[3]]);
        let (hlen, plen) = (b[4], b[5]);
        if htype != HTYPE_ETHERNET || ptype != ethertype::IPV4 || hlen != 6 || plen != 4 {
            return Err(WireError::UnsupportedArp { htype, ptype, hlen, plen });
        }
        if b.len() < ARP_LEN {
            return Err(WireError::Truncated { layer: "arp", need: ARP_LEN, have: b.len() });
        }
        Ok(ArpPacket { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn htype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn ptype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    /// Operation, see [`arp_op`].
    pub fn oper(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// Sender hardware address.
    pub fn sha(&self) -> [u8; 6] {
        mac_at(self.buffer.as_ref(), 8)
    }

    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 14)
    }

    /// Target hardware address.
    pub fn tha(&self) -> [u8; 6] {
        mac_at(self.buffer.as_ref(), 18)
    }

    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 24)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the fixed Ethernet/IPv4 format fields (htype, ptype, hlen, plen).
    pub fn set_format_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        b[0..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[2..4].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
    }

    pub fn set_oper(&mut self, op: u16) {
        self.buffer.as_mut()[6..8].copy_from_slice(&op.to_be_bytes());
    }

    pub fn set_sha(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[8..14].copy_from_slice(&mac);
    }

    pub fn set_spa(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[14..18].copy_from_slice(&ip.octets());
    }

    pub fn set_tha(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[18..24].copy_from_slice(&mac);
    }

    pub fn set_tpa(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[24..28].copy_from_slice(&ip.octets());
    }
}

/// Owned, parsed form of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub oper: u16,
    pub sha: [u8; 6],
    pub spa: Ipv4Addr,
    pub tha: [u8; 6],
    pub tpa: Ipv4Addr,
}

impl ArpRepr {
    /// Reads the fields of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> ArpRepr {
        ArpRepr { oper: packet.oper(), sha: packet.sha(), spa: packet.spa(), tha: packet.tha(), tpa: packet.tpa() }
    }

    /// Writes the 28-byte packet into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let have = buf.len();
        let Some(b) = buf.get_mut(..ARP_LEN) else {
            return Err(WireError::Truncated { layer: "arp", need: ARP_LEN, have });
        };
        let mut p = ArpPacket::new_unchecked(b);
        p.set_format_ethernet_ipv4();
        p.set_oper(self.oper);
        p.set_sha(self.sha);
        p.set_spa(self.spa);
        p.set_tha(self.tha);
        p.set_tpa(self.tpa);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ARP request captured from Linux (`ping 192.0.2.2` from 192.0.2.1 on a
    /// veth pair), Ethernet header stripped.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2, 0xc0, 0x00, 0x02, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x02, 0x02,
    ];

    #[test]
    fn parse_real_request() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p);
        assert_eq!(r.oper, arp_op::REQUEST);
        assert_eq!(r.sha, [0x8a, 0x34, 0xdc, 0xbe, 0x5d, 0xc2]);
        assert_eq!(r.spa, Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(r.tha, [0; 6]);
        assert_eq!(r.tpa, Ipv4Addr::new(192, 0, 2, 2));
        let mut out = [0u8; 28];
        r.emit(&mut out).unwrap();
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn rejects_other_formats_and_truncation() {
        let mut bad = REQUEST;
        bad[4] = 8;
        assert_eq!(
            ArpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::UnsupportedArp { htype: 1, ptype: 0x0800, hlen: 8, plen: 4 }
        );
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            WireError::Truncated { layer: "arp", need: 28, have: 27 }
        );
        assert!(ArpPacket::new_checked(&REQUEST[..3]).is_err());
        assert!(ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap()).emit(&mut [0u8; 27]).is_err());
    }
}
