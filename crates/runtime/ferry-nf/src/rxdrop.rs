//! Drops every frame: the receive-only baseline of `ferry bench io`.

use crate::{count, NfSpec, PacketNf, Verdict};

const DROP: usize = 1;

pub(crate) static SPEC: NfSpec = NfSpec { name: "rxdrop", counters: &["rx", "drop"] };

/// Counts and drops every frame without looking at it.
#[derive(Debug, Default)]
pub struct RxDrop {
    counters: [u64; 2],
}

impl RxDrop {
    pub fn new() -> Self {
        Self::default()
    }
}

impl PacketNf for RxDrop {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, _frame: &mut [u8]) -> Verdict {
        count(&mut self.counters, (Verdict::Drop, DROP))
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
    fn drops_everything() {
        let mut nf = RxDrop::new();
        for n in [0usize, 14, 60] {
            assert_eq!(nf.process(&mut vec![0u8; n]), Verdict::Drop);
        }
        assert_eq!(nf.counters(), &[3, 3]);
        assert_sum(&nf);
    }
}
