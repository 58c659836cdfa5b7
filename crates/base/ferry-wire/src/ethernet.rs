//! Ethernet II frames with up to two VLAN tags: an outer 802.1ad (QinQ)
//! or 802.1Q tag, and an inner 802.1Q tag.

use crate::{MacAddr, WireError};

/// EtherType values this crate knows about.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (S-tag, QinQ): only ever the outer tag.
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
/// Length of one 802.1Q or 802.1ad tag.
pub const VLAN_TAG_LEN: usize = 4;
/// The most tags unwrapped: an outer (S- or C-) tag and an inner C-tag.
pub const MAX_VLAN_TAGS: usize = 2;

/// Zero-copy view of an Ethernet II frame (without FCS).
///
/// Up to [`MAX_VLAN_TAGS`] tags are skipped (IEEE 802.1Q-2018 §9.5): an
/// outer tag of TPID 0x88a8 (S-tag) or 0x8100 (C-tag), then an inner
/// C-tag; [`ethertype`](Self::ethertype) returns the EtherType after them.
/// Anything further (a third tag, an S-tag inside) shows up as
/// `ethertype()` 0x8100 or 0x88a8, for the caller to refuse.
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
        // The second tag's TPID lies inside the first tag: check it is
        // there before `tags` reads it.
        let have = b.len();
        let first = u16::from_be_bytes([b[12], b[13]]);
        if is_outer_tpid(first) && have < ETH_HEADER_LEN + VLAN_TAG_LEN {
            let need = ETH_HEADER_LEN + VLAN_TAG_LEN;
            return Err(WireError::Truncated { layer: "vlan", need, have });
        }
        let frame = EthernetFrame { buffer };
        let need = frame.header_len();
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

    /// The EtherType at offset 12 (a TPID for a tagged frame).
    pub fn outer_ethertype(&self) -> u16 {
        self.u16_at(12)
    }

    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// How many tags are unwrapped: 0, 1 or 2 (outer, then inner C-tag).
    pub fn tags(&self) -> usize {
        if !is_outer_tpid(self.outer_ethertype()) {
            0
        } else if self.u16_at(ETH_HEADER_LEN + 2) == ethertype::VLAN {
            2
        } else {
            1
        }
    }

    /// True when the frame carries a tag.
    pub fn has_vlan(&self) -> bool {
        self.tags() > 0
    }

    /// The outer (or only) tag's control information (PCP, DEI, VID).
    pub fn vlan_tci(&self) -> Option<u16> {
        self.has_vlan().then(|| self.u16_at(ETH_HEADER_LEN))
    }

    /// The outer (or only) tag's 12-bit VLAN id.
    pub fn vlan_id(&self) -> Option<u16> {
        self.vlan_tci().map(|tci| tci & 0x0fff)
    }

    /// The inner tag's 12-bit VLAN id, when there are two tags.
    pub fn inner_vlan_id(&self) -> Option<u16> {
        (self.tags() == 2).then(|| self.u16_at(ETH_HEADER_LEN + VLAN_TAG_LEN) & 0x0fff)
    }

    /// The EtherType of the payload (after the tags).
    pub fn ethertype(&self) -> u16 {
        self.u16_at(self.header_len() - 2)
    }

    /// 14, plus 4 per tag.
    pub fn header_len(&self) -> usize {
        ETH_HEADER_LEN + VLAN_TAG_LEN * self.tags()
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

    /// Sets the payload EtherType (after the tags).
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

/// A TPID an outer tag may carry: 802.1ad's S-tag or 802.1Q's C-tag.
fn is_outer_tpid(t: u16) -> bool {
    t == ethertype::QINQ || t == ethertype::VLAN
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
    fn stacked_tags() {
        // S-tag 100, C-tag 200, IPv6; then two C-tags; then a third tag.
        let mut f = [0u8; 30];
        f[12..22].copy_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x86, 0xdd]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!((e.tags(), e.vlan_id(), e.inner_vlan_id()), (2, Some(100), Some(200)));
        assert_eq!((e.ethertype(), e.header_len()), (ethertype::IPV6, 22));
        f[12] = 0x81;
        f[13] = 0x00;
        assert_eq!(EthernetFrame::new_checked(&f[..]).unwrap().tags(), 2);
        f[20..22].copy_from_slice(&[0x81, 0x00]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!((e.tags(), e.ethertype()), (2, ethertype::VLAN), "a third tag is left to the caller");
        // An S-tag inside is not unwrapped either.
        f[16..18].copy_from_slice(&[0x88, 0xa8]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!((e.tags(), e.ethertype()), (1, ethertype::QINQ));
        let mut cut = [0u8; 21];
        cut[12..18].copy_from_slice(&[0x81, 0x00, 0, 1, 0x81, 0x00]);
        assert_eq!(
            EthernetFrame::new_checked(&cut[..]).unwrap_err(),
            WireError::Truncated { layer: "vlan", need: 22, have: 21 }
        );
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
