//! IPv4 headers, with options (IHL > 5).

use std::net::Ipv4Addr;

use crate::checksum;
use crate::WireError;

/// IP protocol numbers used here.
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
}

/// Length of an IPv4 header without options.
pub const IPV4_MIN_HEADER_LEN: usize = 20;

/// Flag bits in the flags/fragment-offset word.
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// Zero-copy view of an IPv4 packet.
///
/// The buffer may extend past the packet (Ethernet padding); `new_checked`
/// guarantees `20 <= header_len() <= total_len() <= buffer.len()`, and
/// [`payload`](Self::payload) stops at `total_len()`.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// or inconsistent buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps after checking version, IHL and total length against the buffer.
    /// The header checksum is *not* checked here (see
    /// [`verify_checksum`](Self::verify_checksum)) because some users (the
    /// sink) don't want to pay for it.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let have = b.len();
        if have < IPV4_MIN_HEADER_LEN {
            return Err(WireError::Truncated { layer: "ipv4", need: IPV4_MIN_HEADER_LEN, have });
        }
        let version = b[0] >> 4;
        if version != 4 {
            return Err(WireError::BadVersion(version));
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        if hl < IPV4_MIN_HEADER_LEN {
            return Err(WireError::BadLength { layer: "ipv4", field: "ihl", value: hl / 4 });
        }
        if have < hl {
            return Err(WireError::Truncated { layer: "ipv4 options", need: hl, have });
        }
        let total = usize::from(u16::from_be_bytes([b[2], b[3]]));
        if total < hl {
            return Err(WireError::BadLength { layer: "ipv4", field: "total length", value: total });
        }
        if have < total {
            return Err(WireError::Truncated { layer: "ipv4 payload", need: total, have });
        }
        Ok(Ipv4Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Header length in bytes (IHL * 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// The DSCP/ECN byte.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn total_len(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(u16::from_be_bytes([b[2], b[3]]))
    }

    pub fn ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    fn flags_frag(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> usize {
        usize::from(self.flags_frag() & FRAG_OFFSET_MASK) * 8
    }

    /// True for any fragment of a fragmented datagram (MF set or offset ≠ 0).
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[10], b[11]])
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// The option bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV4_MIN_HEADER_LEN..self.header_len()]
    }

    /// The whole header, options included.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The L4 payload, up to `total_len()` (excludes Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }

    /// True when the header checksum (over the whole header, options
    /// included) verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::ones_sum(self.header()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        debug_assert!(header_len & 3 == 0 && (20..=60).contains(&header_len));
        self.buffer.as_mut()[0] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[1] = tos;
    }

    pub fn set_total_len(&mut self, len: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&len.to_be_bytes());
    }

    pub fn set_ident(&mut self, ident: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&ident.to_be_bytes());
    }

    /// Sets DF, MF and the fragment offset (bytes, multiple of 8).
    pub fn set_flags_and_frag_offset(&mut self, dont_frag: bool, more_frags: bool, offset: usize) {
        let mut v = ((offset / 8) as u16) & FRAG_OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        self.buffer.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[8] = ttl;
    }

    pub fn set_protocol(&mut self, proto: u8) {
        self.buffer.as_mut()[9] = proto;
    }

    pub fn set_checksum(&mut self, csum: u16) {
        self.buffer.as_mut()[10..12].copy_from_slice(&csum.to_be_bytes());
    }

    pub fn set_src_addr(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&ip.octets());
    }

    pub fn set_dst_addr(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&ip.octets());
    }

    /// Swaps source and destination address (the header checksum does not
    /// change: the same words are summed).
    pub fn swap_addrs(&mut self) {
        let b = self.buffer.as_mut();
        let (src, dst) = b[12..20].split_at_mut(4);
        src.swap_with_slice(dst);
    }

    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let csum = checksum::checksum(self.header());
        self.set_checksum(csum);
    }

    /// Mutable L4 payload, up to `total_len()`.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// Owned form of an option-less IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    /// L4 length; total length is this plus 20.
    pub payload_len: usize,
    pub ttl: u8,
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Reads a checked packet, verifying its header checksum. Options are
    /// skipped (not represented); fragments are rejected because a Repr of
    /// one fragment would misstate `payload_len`.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr, WireError> {
        if !packet.verify_checksum() {
            return Err(WireError::BadChecksum { layer: "ipv4" });
        }
        if packet.is_fragment() {
            return Err(WireError::Fragment { offset: packet.frag_offset() });
        }
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() - packet.header_len(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Writes a 20-byte header with a valid checksum into the start of `buf`.
    /// The payload itself is not touched.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let have = buf.len();
        let total = self.payload_len + IPV4_MIN_HEADER_LEN;
        let Ok(total16) = u16::try_from(total) else {
            return Err(WireError::BadLength { layer: "ipv4", field: "total length", value: total });
        };
        let Some(b) = buf.get_mut(..IPV4_MIN_HEADER_LEN) else {
            return Err(WireError::Truncated { layer: "ipv4", need: IPV4_MIN_HEADER_LEN, have });
        };
        let mut p = Ipv4Packet::new_unchecked(b);
        p.set_version_and_header_len(IPV4_MIN_HEADER_LEN);
        p.set_tos(self.tos);
        p.set_total_len(total16);
        p.set_ident(self.ident);
        p.set_flags_and_frag_offset(self.dont_frag, false, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 header of an echo request sent by Linux ping (192.0.2.1 → 192.0.2.2).
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x54, 0x10, 0x85, 0x40, 0x00, 0x40, 0x01, 0xa6, 0x20, 0xc0, 0x00, 0x02, 0x01, 0xc0, 0x00,
        0x02, 0x02,
    ];

    fn packet(extra: usize) -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(0x54 + extra, 0xab);
        v
    }

    #[test]
    fn parse_real_header() {
        let buf = packet(6);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 64);
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(192, 0, 2, 2),
                protocol: ip_proto::ICMP,
                payload_len: 64,
                ttl: 64,
                tos: 0,
                ident: 0x1085,
                dont_frag: true,
            }
        );
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, HDR);
    }

    #[test]
    fn options_are_covered() {
        // IHL 6 with a 4-byte option (NOP NOP NOP EOL).
        let mut buf = [0u8; 28];
        buf[..20].copy_from_slice(&HDR);
        buf[0] = 0x46;
        buf[2..4].copy_from_slice(&28u16.to_be_bytes());
        buf[20..24].copy_from_slice(&[1, 1, 1, 0]);
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0; 4]);
    }

    #[test]
    fn rejects() {
        let buf = packet(0);
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..19]).unwrap_err(),
            WireError::Truncated { layer: "ipv4", need: 20, have: 19 }
        );
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..83]).unwrap_err(),
            WireError::Truncated { layer: "ipv4 payload", need: 84, have: 83 }
        );
        let mut b = buf.clone();
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::BadLength { layer: "ipv4", field: "ihl", value: 4 }
        );
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), WireError::BadVersion(6));
        let mut b = buf.clone();
        b[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..40]).unwrap_err(),
            WireError::Truncated { layer: "ipv4 options", need: 60, have: 40 }
        );
        let mut b = buf.clone();
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::BadLength { layer: "ipv4", field: "total length", value: 19 }
        );
        let mut b = buf;
        b[6] = 0x20; // MF
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_fragment() && p.more_frags() && p.frag_offset() == 0);
        assert!(matches!(Ipv4Repr::parse(&p), Err(WireError::BadChecksum { .. })));
    }
}
