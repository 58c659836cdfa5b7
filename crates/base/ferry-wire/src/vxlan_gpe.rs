//! VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe): VXLAN with a next-protocol
//! field, the UDP encapsulation NSH uses between hosts (UDP port 4790,
//! next protocol 4 = NSH).
//!
//! ```text
//! |R|R|Ver|I|P|B|O|       Reserved                |Next Protocol  |
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! ```

use crate::WireError;

/// IANA's UDP port for VXLAN-GPE.
pub const UDP_PORT: u16 = 4790;
pub const VXLAN_GPE_LEN: usize = 8;

/// Next Protocol values.
pub mod next_proto {
    pub const IPV4: u8 = 0x1;
    pub const IPV6: u8 = 0x2;
    pub const ETHERNET: u8 = 0x3;
    pub const NSH: u8 = 0x4;
}

/// Flags byte: the I bit (VNI valid) and the P bit (next protocol present).
const FLAG_I: u8 = 0x08;
const FLAG_P: u8 = 0x04;

/// Zero-copy view of a VXLAN-GPE header and its payload. `new_checked`
/// guarantees 8 bytes, version 0, and the P bit set (without it the
/// next-protocol field means nothing).
#[derive(Debug, Clone)]
pub struct VxlanGpePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanGpePacket<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        VxlanGpePacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < VXLAN_GPE_LEN {
            return Err(WireError::Truncated { layer: "vxlan-gpe", need: VXLAN_GPE_LEN, have: b.len() });
        }
        let version = (b[0] >> 4) & 0x3;
        if version != 0 {
            return Err(WireError::BadLength { layer: "vxlan-gpe", field: "version", value: version.into() });
        }
        if b[0] & FLAG_P == 0 {
            return Err(WireError::BadLength { layer: "vxlan-gpe", field: "P flag", value: 0 });
        }
        Ok(VxlanGpePacket { buffer })
    }

    pub fn next_protocol(&self) -> u8 {
        self.buffer.as_ref()[3]
    }

    /// The VNI, if the I flag says it is valid.
    pub fn vni(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        (b[0] & FLAG_I != 0).then(|| u32::from_be_bytes([0, b[4], b[5], b[6]]))
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[VXLAN_GPE_LEN..]
    }
}

/// Writes a VXLAN-GPE header (I and P set) at the start of `buf`.
pub fn emit(buf: &mut [u8], vni: u32, next_protocol: u8) {
    buf[..VXLAN_GPE_LEN].fill(0);
    buf[0] = FLAG_I | FLAG_P;
    buf[3] = next_protocol;
    buf[4..7].copy_from_slice(&vni.to_be_bytes()[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// I and P set, next protocol NSH, VNI 0x000abc.
    const HDR: [u8; 8] = [0x0c, 0x00, 0x00, 0x04, 0x00, 0x0a, 0xbc, 0x00];

    #[test]
    fn parses_and_emits_the_same_bytes() {
        let p = VxlanGpePacket::new_checked(&HDR[..]).unwrap();
        assert_eq!((p.next_protocol(), p.vni()), (next_proto::NSH, Some(0xabc)));
        let mut out = [0xffu8; 8];
        emit(&mut out, 0xabc, next_proto::NSH);
        assert_eq!(out, HDR);
    }

    #[test]
    fn malformed_headers_are_refused() {
        for (bytes, want) in [
            (HDR[..7].to_vec(), "truncated"),
            ([&[0x1c], &HDR[1..]].concat(), "bad version 1"),
            ([&[0x08], &HDR[1..]].concat(), "bad P flag"),
        ] {
            let e = VxlanGpePacket::new_checked(&bytes[..]).unwrap_err().to_string();
            assert!(e.contains(want), "{bytes:02x?}: {e}");
        }
    }
}
