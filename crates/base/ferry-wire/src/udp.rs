//! UDP (RFC 768) over IPv4 and IPv6.

use std::net::IpAddr;

use crate::checksum;
use crate::ipv4::ip_proto;
use crate::WireError;

pub const UDP_HEADER_LEN: usize = 8;

/// Zero-copy view of a UDP datagram.
///
/// The buffer should be the IP payload; `new_checked` guarantees
/// `8 <= len() <= buffer.len()`, and everything after `len()` is ignored.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// or inconsistent buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let have = b.len();
        if have < UDP_HEADER_LEN {
            return Err(WireError::Truncated { layer: "udp", need: UDP_HEADER_LEN, have });
        }
        let len = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if len < UDP_HEADER_LEN {
            return Err(WireError::BadLength { layer: "udp", field: "length", value: len });
        }
        if have < len {
            return Err(WireError::Truncated { layer: "udp payload", need: len, have });
        }
        Ok(UdpPacket { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn dst_port(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// The length field: header plus payload.
    pub fn len(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(u16::from_be_bytes([b[4], b[5]]))
    }

    /// True when there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == UDP_HEADER_LEN
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HEADER_LEN..self.len()]
    }

    /// Verifies the checksum with the pseudo-header of the addresses'
    /// family. A zero checksum means "not computed" in IPv4 (RFC 768) and
    /// is accepted there; IPv6 makes the checksum mandatory (RFC 8200
    /// §8.1), so there it fails.
    pub fn verify_checksum(&self, src: impl Into<IpAddr>, dst: impl Into<IpAddr>) -> bool {
        let (src, dst) = (src.into(), dst.into());
        if self.checksum() == 0 {
            return src.is_ipv4() && dst.is_ipv4();
        }
        let len = self.len();
        let ph = checksum::pseudo_header(src, dst, ip_proto::UDP, len);
        checksum::add(ph, checksum::ones_sum(&self.buffer.as_ref()[..len])) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[0..2].copy_from_slice(&port.to_be_bytes());
    }

    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&port.to_be_bytes());
    }

    pub fn set_len(&mut self, len: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&len.to_be_bytes());
    }

    pub fn set_checksum(&mut self, csum: u16) {
        self.buffer.as_mut()[6..8].copy_from_slice(&csum.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.buffer.as_mut()[UDP_HEADER_LEN..len]
    }

    /// Computes the checksum over pseudo-header, header and payload. A
    /// computed 0 is sent as 0xffff, since 0 means "no checksum".
    pub fn fill_checksum(&mut self, src: impl Into<IpAddr>, dst: impl Into<IpAddr>) {
        self.set_checksum(0);
        let len = self.len();
        let ph = checksum::pseudo_header(src.into(), dst.into(), ip_proto::UDP, len);
        let csum = !checksum::add(ph, checksum::ones_sum(&self.buffer.as_ref()[..len]));
        self.set_checksum(if csum == 0 { 0xffff } else { csum });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn fill_verify_and_zero() {
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut buf = [0u8; 14];
        let mut u = UdpPacket::new_unchecked(&mut buf[..]);
        u.set_src_port(1234);
        u.set_dst_port(5678);
        u.set_len(12);
        u.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert!(u.verify_checksum(s, d), "zero checksum means not computed");
        u.fill_checksum(s, d);
        assert_ne!(u.checksum(), 0);
        assert!(u.verify_checksum(s, d));
        assert!(!u.verify_checksum(s, Ipv4Addr::new(10, 0, 0, 3)));
        let u = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(u.payload(), &[1, 2, 3, 4]);
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (1234, 5678, 12));
    }

    #[test]
    fn rejects() {
        let mut buf = [0u8; 10];
        buf[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength { layer: "udp", field: "length", value: 7 }
        );
        buf[5] = 11;
        assert_eq!(
            UdpPacket::new_checked(&buf[..]).unwrap_err(),
            WireError::Truncated { layer: "udp payload", need: 11, have: 10 }
        );
        assert!(UdpPacket::new_checked(&buf[..7]).is_err());
    }
}
