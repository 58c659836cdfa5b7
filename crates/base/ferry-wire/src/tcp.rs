//! TCP headers (RFC 9293) over IPv4 and IPv6 — enough to build and
//! classify segments.

use std::net::IpAddr;

use crate::checksum;
use crate::ipv4::ip_proto;
use crate::WireError;

pub const TCP_MIN_HEADER_LEN: usize = 20;

/// TCP flag bits (low byte of the flags field).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
}

/// Zero-copy view of a TCP segment.
///
/// The buffer must be exactly the IP payload (TCP has no length field, so
/// the segment length — which the checksum covers — is the buffer length).
/// `new_checked` guarantees `20 <= header_len() <= buffer.len()`.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// or inconsistent buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let have = b.len();
        if have < TCP_MIN_HEADER_LEN {
            return Err(WireError::Truncated { layer: "tcp", need: TCP_MIN_HEADER_LEN, have });
        }
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < TCP_MIN_HEADER_LEN {
            return Err(WireError::BadLength { layer: "tcp", field: "data offset", value: hl / 4 });
        }
        if have < hl {
            return Err(WireError::Truncated { layer: "tcp options", need: hl, have });
        }
        Ok(TcpPacket { buffer })
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

    pub fn seq_number(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }

    pub fn ack_number(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[8], b[9], b[10], b[11]])
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }

    /// The flag bits, see [`tcp_flags`].
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[13]
    }

    pub fn window(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[14], b[15]])
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[16], b[17]])
    }

    pub fn urgent(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[18], b[19]])
    }

    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[TCP_MIN_HEADER_LEN..self.header_len()]
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    fn sum(&self, src: IpAddr, dst: IpAddr) -> u16 {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header(src, dst, ip_proto::TCP, b.len());
        checksum::add(ph, checksum::ones_sum(b))
    }

    /// Verifies the checksum with the pseudo-header of the addresses' family.
    pub fn verify_checksum(&self, src: impl Into<IpAddr>, dst: impl Into<IpAddr>) -> bool {
        self.sum(src.into(), dst.into()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[0..2].copy_from_slice(&port.to_be_bytes());
    }

    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&port.to_be_bytes());
    }

    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[8..12].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the data offset from a header length in bytes (multiple of 4).
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len & 3 == 0 && (20..=60).contains(&len));
        let b = self.buffer.as_mut();
        b[12] = ((len / 4) as u8) << 4 | (b[12] & 0x0f);
    }

    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[13] = flags;
    }

    pub fn set_window(&mut self, v: u16) {
        self.buffer.as_mut()[14..16].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[16..18].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_urgent(&mut self, v: u16) {
        self.buffer.as_mut()[18..20].copy_from_slice(&v.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }

    /// Computes the checksum over pseudo-header, header and payload.
    pub fn fill_checksum(&mut self, src: impl Into<IpAddr>, dst: impl Into<IpAddr>) {
        self.set_checksum(0);
        let csum = !self.sum(src.into(), dst.into());
        self.set_checksum(csum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn fields_and_checksum() {
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut buf = [0u8; 27];
        let mut t = TcpPacket::new_unchecked(&mut buf[..]);
        t.set_src_port(80);
        t.set_dst_port(40000);
        t.set_seq_number(0x01020304);
        t.set_ack_number(0x05060708);
        t.set_header_len(24);
        t.set_flags(tcp_flags::SYN | tcp_flags::ACK);
        t.set_window(1000);
        t.set_urgent(0);
        t.payload_mut().copy_from_slice(&[9, 8, 7]);
        t.fill_checksum(s, d);
        let t = TcpPacket::new_checked(&buf[..]).unwrap();
        assert!(t.verify_checksum(s, d));
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.options(), &[0; 4]);
        assert_eq!(t.payload(), &[9, 8, 7]);
        assert_eq!((t.seq_number(), t.ack_number(), t.window()), (0x01020304, 0x05060708, 1000));
        assert_eq!(t.flags(), 0x12);
    }

    #[test]
    fn rejects() {
        let mut buf = [0u8; 20];
        assert_eq!(
            TcpPacket::new_checked(&buf[..]).unwrap_err(),
            WireError::BadLength { layer: "tcp", field: "data offset", value: 0 }
        );
        buf[12] = 0x60;
        assert_eq!(
            TcpPacket::new_checked(&buf[..]).unwrap_err(),
            WireError::Truncated { layer: "tcp options", need: 24, have: 20 }
        );
        assert!(TcpPacket::new_checked(&buf[..19]).is_err());
    }
}
