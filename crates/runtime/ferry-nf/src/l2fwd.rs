//! Swaps MACs and sends the frame back: the simplest NF, used to measure
//! the I/O path itself.

use ferry_wire::ethernet::ETH_HEADER_LEN;

use crate::{count, NfSpec, PacketNf, Verdict};

const TX: usize = 1;
const DROP_MALFORMED: usize = 2;

pub(crate) static SPEC: NfSpec = NfSpec { name: "l2fwd", counters: &["rx", "tx", "drop_malformed"] };

/// Swaps source and destination MAC of every frame and returns it (`Tx`);
/// frames shorter than an Ethernet header are `drop_malformed`. Nothing else
/// is looked at, so VLAN tags and payloads pass untouched.
#[derive(Debug, Default)]
pub struct L2Fwd {
    counters: [u64; 3],
}

impl L2Fwd {
    pub fn new() -> Self {
        Self::default()
    }
}

impl PacketNf for L2Fwd {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, frame: &mut [u8]) -> Verdict {
        let r = if frame.len() < ETH_HEADER_LEN {
            (Verdict::Drop, DROP_MALFORMED)
        } else {
            let (dst, rest) = frame.split_at_mut(6);
            dst.swap_with_slice(&mut rest[..6]);
            (Verdict::Tx, TX)
        };
        count(&mut self.counters, r)
    }

    fn counters(&self) -> &[u64] {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn swaps_and_counts() {
        let mut nf = L2Fwd::new();
        let mut f: Vec<u8> = (0..60).collect();
        assert_eq!(nf.process(&mut f), Verdict::Tx);
        assert_eq!(&f[..12], &[6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5]);
        assert_eq!(&f[12..], &(12..60).collect::<Vec<u8>>()[..]);
        for n in 0..14 {
            assert_eq!(nf.process(&mut f[..n]), Verdict::Drop);
        }
        assert_eq!(nf.process(&mut f[..14]), Verdict::Tx);
        assert_eq!(nf.counters(), &[16, 2, 14]);
        assert_sum(&nf);
    }
}
