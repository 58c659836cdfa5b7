//! ICMPv4 (RFC 792), with echo request/reply accessors.

use crate::checksum;
use crate::WireError;

/// ICMP message types used here.
pub mod icmp_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
}

/// Length of the ICMP header (type, code, checksum, 4 bytes rest-of-header).
pub const ICMP_HEADER_LEN: usize = 8;

/// Zero-copy view of an ICMPv4 message.
///
/// The buffer must be exactly the IPv4 payload because the checksum covers
/// the whole message. `new_checked` guarantees at least 8 bytes.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let have = buffer.as_ref().len();
        if have < ICMP_HEADER_LEN {
            return Err(WireError::Truncated { layer: "icmp", need: ICMP_HEADER_LEN, have });
        }
        Ok(Icmpv4Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// Echo identifier (meaningful for echo request/reply only).
    pub fn echo_ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// Echo sequence number (meaningful for echo request/reply only).
    pub fn echo_seq(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// Data after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[ICMP_HEADER_LEN..]
    }

    /// Verifies the checksum over the whole message.
    pub fn verify_checksum(&self) -> bool {
        checksum::ones_sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[ICMP_HEADER_LEN..]
    }

    /// Recomputes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let csum = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(csum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ICMP part of an echo request sent by Linux `ping` (iputils, 56 data
    /// bytes: 8-byte timestamp then 0x10..0x37).
    pub(crate) const PING_ICMP: [u8; 64] = [
        0x08, 0x00, 0x72, 0xf8, 0x18, 0xbc, 0x00, 0x01, 0xfe, 0xeb, 0x01, 0x6b, 0x00, 0x00, 0x00, 0x00, 0xa6, 0x20,
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b,
        0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d,
        0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
    ];

    #[test]
    fn real_ping_request_and_reply_checksum() {
        let p = Icmpv4Packet::new_checked(&PING_ICMP[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!((p.msg_type(), p.code()), (icmp_type::ECHO_REQUEST, 0));
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x18bc, 1));
        assert_eq!(p.payload().len(), 56);

        // Linux answered this request with checksum 0x7af8 (captured).
        let mut reply = PING_ICMP;
        let mut r = Icmpv4Packet::new_checked(&mut reply[..]).unwrap();
        r.set_msg_type(icmp_type::ECHO_REPLY);
        assert!(!r.verify_checksum());
        r.fill_checksum();
        assert_eq!(r.checksum(), 0x7af8);
        assert!(r.verify_checksum());
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Icmpv4Packet::new_checked(&PING_ICMP[..7]).unwrap_err(),
            WireError::Truncated { layer: "icmp", need: 8, have: 7 }
        );
    }
}
