//! The generator's payload stamp.
//!
//! Every generated packet carries a 16-byte stamp right after its L4 header
//! so that the sink can count loss and reordering per stream and compute
//! latency. The same layout is written by the BPF live-frames generator; it is
//! mirrored once in `bpf/include/ferry_abi.h` (`struct ferry_stamp`).
//! All fields are little-endian because both writers run on the same host.

/// Magic value identifying a Ferry stamp ("Fy").
pub const STAMP_MAGIC: u16 = 0x7946;
/// Size of the stamp on the wire.
pub const STAMP_LEN: usize = 16;

/// A decoded stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp {
    /// Which generator stream (thread or queue) produced the packet.
    pub stream: u16,
    /// Per-stream sequence number, starting at 0; wraps at 2^32.
    pub seq: u32,
    /// Transmit time, CLOCK_MONOTONIC nanoseconds.
    pub tx_ns: u64,
}

impl Stamp {
    /// Reads a stamp from the first [`STAMP_LEN`] bytes of `bytes`.
    /// Returns `None` when the slice is too short or the magic does not match.
    pub fn read(bytes: &[u8]) -> Option<Stamp> {
        let b = bytes.get(..STAMP_LEN)?;
        if u16::from_le_bytes([b[0], b[1]]) != STAMP_MAGIC {
            return None;
        }
        Some(Stamp {
            stream: u16::from_le_bytes([b[2], b[3]]),
            seq: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            tx_ns: u64::from_le_bytes(b[8..16].try_into().ok()?),
        })
    }

    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `bytes`.
    /// Returns `false` (and writes nothing) when the slice is too short.
    pub fn write(&self, bytes: &mut [u8]) -> bool {
        let Some(b) = bytes.get_mut(..STAMP_LEN) else {
            return false;
        };
        b[0..2].copy_from_slice(&STAMP_MAGIC.to_le_bytes());
        b[2..4].copy_from_slice(&self.stream.to_le_bytes());
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.tx_ns.to_le_bytes());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let s = Stamp { stream: 3, seq: 0xdead_beef, tx_ns: 123_456_789_012 };
        let mut buf = [0u8; 20];
        assert!(s.write(&mut buf));
        assert_eq!(&buf[0..2], &[0x46, 0x79]);
        assert_eq!(Stamp::read(&buf), Some(s));
    }

    #[test]
    fn rejects_short_and_wrong_magic() {
        let mut buf = [0u8; 15];
        assert!(!Stamp::default().write(&mut buf));
        assert_eq!(Stamp::read(&buf), None);
        assert_eq!(Stamp::read(&[0u8; 16]), None);
    }
}
