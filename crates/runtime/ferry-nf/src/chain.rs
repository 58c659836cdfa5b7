//! Running several NFs on one port, in order.

use crate::{count, NfSpec, PacketNf, Verdict};

const TX: usize = 1;
const DROP: usize = 2;
const UNCLAIMED: usize = 3;

static SPEC: NfSpec = NfSpec { name: "chain", counters: &["rx", "tx", "drop", "unclaimed"] };

/// A list of NFs run in order on each frame: the first verdict other than
/// `Pass` wins; a frame every NF passes on is `Pass` for the chain too and
/// counted as `unclaimed` (a standalone runner drops it; in a ferryd chain
/// it goes on to the next NF).
///
/// Its own counters: `rx`, `tx`, `drop` (an NF dropped it; the NF's
/// counters say why), `unclaimed`.
pub struct NfChainLocal {
    nfs: Vec<Box<dyn PacketNf>>,
    counters: [u64; 4],
}

impl NfChainLocal {
    pub fn new(nfs: Vec<Box<dyn PacketNf>>) -> Self {
        NfChainLocal { nfs, counters: [0; 4] }
    }

    /// The NFs, in order (for reporting their counters).
    pub fn nfs(&self) -> &[Box<dyn PacketNf>] {
        &self.nfs
    }

    /// Frames no NF took.
    pub fn unclaimed(&self) -> u64 {
        self.counters[UNCLAIMED]
    }
}

impl std::fmt::Debug for NfChainLocal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.nfs.iter().map(|n| n.spec().name).collect();
        f.debug_struct("NfChainLocal").field("nfs", &names).field("counters", &self.counters).finish()
    }
}

impl PacketNf for NfChainLocal {
    fn spec(&self) -> &'static NfSpec {
        &SPEC
    }

    fn process(&mut self, frame: &mut [u8]) -> Verdict {
        let mut r = (Verdict::Pass, UNCLAIMED);
        for nf in &mut self.nfs {
            match nf.process(frame) {
                Verdict::Pass => continue,
                Verdict::Tx => r = (Verdict::Tx, TX),
                Verdict::Drop => r = (Verdict::Drop, DROP),
            }
            break;
        }
        count(&mut self.counters, r)
    }

    fn counters(&self) -> &[u64] {
        &self.counters
    }

    fn drain_alerts(&mut self, out: &mut dyn FnMut(crate::EveAlert<'_>)) -> u64 {
        self.nfs.iter_mut().map(|nf| nf.drain_alerts(out)).sum()
    }
}
