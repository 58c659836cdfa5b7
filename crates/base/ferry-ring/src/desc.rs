//! The descriptor NFs hand to each other, and how it is packed into a slot.

/// One frame handed from NF to NF: where it is in the UMEM, how long the
/// packet is, which out-link to take, and flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Desc {
    /// Offset of the packet in the shared UMEM.
    pub addr: u64,
    /// Packet length in bytes.
    pub len: u32,
    /// Index of the out-link when the sending NF has several.
    pub next_hop: u16,
    /// `Desc::HOLE` and future flags.
    pub flags: u16,
}

const _: () = assert!(std::mem::size_of::<Desc>() == 16);

impl Desc {
    /// Set only by `MpscRing::repair_after_producer_death` on slots whose
    /// producer died before publishing them. `Consumer` never hands such a
    /// descriptor to its caller: it counts it and skips it. `next_hop`
    /// then carries the dead producer's id and `addr` is `HOLE_ADDR`.
    pub const HOLE: u16 = 1 << 15;
    /// The `addr` of a hole (no frame can live there).
    pub const HOLE_ADDR: u64 = u64::MAX;

    pub fn new(addr: u64, len: u32) -> Desc {
        Desc { addr, len, next_hop: 0, flags: 0 }
    }

    pub(crate) fn hole(producer: u16) -> Desc {
        Desc { addr: Desc::HOLE_ADDR, len: 0, next_hop: producer, flags: Desc::HOLE }
    }

    pub fn is_hole(&self) -> bool {
        self.flags & Desc::HOLE != 0
    }

    /// The non-address half, packed so a slot stores a descriptor in two
    /// atomic words.
    #[inline]
    pub(crate) fn meta(&self) -> u64 {
        self.len as u64 | (self.next_hop as u64) << 32 | (self.flags as u64) << 48
    }

    #[inline]
    pub(crate) fn from_words(addr: u64, meta: u64) -> Desc {
        Desc { addr, len: meta as u32, next_hop: (meta >> 32) as u16, flags: (meta >> 48) as u16 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_roundtrip() {
        let d = Desc { addr: 0xdead_beef_0000, len: 1514, next_hop: 7, flags: 0x8001 };
        assert_eq!(Desc::from_words(d.addr, d.meta()), d);
        assert!(d.is_hole());
        assert!(!Desc::new(0, 60).is_hole());
    }
}
