//! Ethernet II frames with at most one 802.1Q VLAN tag.

use crate::{MacAddr, WireError};

/// EtherType values this crate knows about.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ). Not unwrapped: reported as the
    /// EtherType so callers can reject it.
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// The broadcast MAC address, as the bytes of a header.
pub const BROADCAST_MAC: [u8; 6] = MacAddr::BROADCAST.0;

/// True for group (multicast and broadcast) addresses: the I/G bit is set.
pub fn is_multicast_mac(mac: &[u8; 6]) -> bool {
    MacAddr(*mac).is_multicast()
}

/// Length of an untagged Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// Zero-copy view of an Ethernet II frame (without FCS).
///
/// When the outer EtherType is 0x8100 the 4-byte tag is skipped and
/// [`ethertype`](Self::ethertype) returns the inner one. Only one tag is
/// unwrapped; a second tag shows up as `ethertype() == 0x8100`.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter
    /// than the header. Meant for emitters that size the buffer themselves.
    pub fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps `buffer` after checking that the whole header (with the VLAN tag
    /// if the outer EtherType says there is one) is present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < ETH_HEADER_LEN {
            return Err(WireError::Truncated { layer: "ethernet", need: ETH_HEADER_LEN, have: b.len() });
        }
        let frame = EthernetFrame { buffer };
        let need = frame.header_len();
        let have = frame.buffer.as_ref().len();
        if have < need {
            return Err(WireError::Truncated { layer: "vlan", need, have });
        }
        Ok(frame)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        let b = self.buffer.as_ref();
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }

    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        let b = self.buffer.as_ref();
        [b[6], b[7], b[8], b[9], b[10], b[11]]
    }

    /// The EtherType at offset 12 (0x8100 for a tagged frame).
    pub fn outer_ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[12], b[13]])
    }

    /// True when the frame carries an 802.1Q tag.
    pub fn has_vlan(&self) -> bool {
        self.outer_ethertype() == ethertype::VLAN
    }

    /// The tag control information (PCP, DEI, VID) if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        if self.has_vlan() {
            let b = self.buffer.as_ref();
            Some(u16::from_be_bytes([b[14], b[15]]))
        } else {
            None
        }
    }

    /// The 12-bit VLAN id if tagged.
    pub fn vlan_id(&self) -> Option<u16> {
        self.vlan_tci().map(|tci| tci & 0x0fff)
    }

    /// The EtherType of the payload (after the VLAN tag if any).
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        let at = self.header_len() - 2;
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.has_vlan() {
            ETH_HEADER_LEN + VLAN_TAG_LEN
        } else {
            ETH_HEADER_LEN
        }
    }

    /// Everything after the header, including any Ethernet padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[0..6].copy_from_slice(&mac);
    }

    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[6..12].copy_from_slice(&mac);
    }

    /// Swaps source and destination MAC in place.
    pub fn swap_addrs(&mut self) {
        let (dst, rest) = self.buffer.as_mut().split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
    }

    /// Sets the outer EtherType (offset 12). For an untagged frame this is
    /// the payload's EtherType; use it to write a fresh header.
    pub fn set_outer_ethertype(&mut self, value: u16) {
        self.buffer.as_mut()[12..14].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the payload EtherType (after the VLAN tag if any).
    pub fn set_ethertype(&mut self, value: u16) {
        let at = self.header_len() - 2;
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&value.to_be_bytes());
    }

    /// Mutable payload, including any Ethernet padding.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_and_tagged() {
        let mut f = [0u8; 20];
        f[0..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        f[6..12].copy_from_slice(&[7, 8, 9, 10, 11, 12]);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), ethertype::ARP);
        assert_eq!(e.header_len(), 14);
        assert_eq!(e.vlan_id(), None);
        assert_eq!(e.payload().len(), 6);

        f[12..18].copy_from_slice(&[0x81, 0x00, 0xa0, 0x64, 0x08, 0x00]);
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        assert_eq!(e.vlan_id(), Some(100));
        assert_eq!(e.vlan_tci(), Some(0xa064));
        assert_eq!(e.ethertype(), ethertype::IPV4);
        assert_eq!(e.header_len(), 18);
        e.swap_addrs();
        assert_eq!(e.dst(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(e.src(), [1, 2, 3, 4, 5, 6]);
        e.set_ethertype(ethertype::IPV6);
        assert_eq!(e.ethertype(), ethertype::IPV6);
        assert_eq!(e.outer_ethertype(), ethertype::VLAN);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(),
            WireError::Truncated { layer: "ethernet", need: 14, have: 13 }
        );
        let mut f = [0u8; 17];
        f[12] = 0x81;
        assert_eq!(
            EthernetFrame::new_checked(&f[..]).unwrap_err(),
            WireError::Truncated { layer: "vlan", need: 18, have: 17 }
        );
    }
}
