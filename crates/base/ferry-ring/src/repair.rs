//! Recovery after a producer died between claiming slots and publishing them.
//!
//! # What can be left behind
//!
//! A producer runs: claim the first slot (one CAS), help `head` past the
//! range, write and publish slots 1..n, publish slot 0. Killed anywhere in
//! there, it leaves exactly one claim word naming it, in the first slot of
//! its range; some of the other slots of that range may be published. Other
//! producers are never blocked by this (they help `head` past the claim);
//! the consumer is, at the claimed slot.
//!
//! # The guarantee
//!
//! Precondition: the producer id really is dead (its process exited and it
//! had no other thread using that id). Then `repair_after_producer_death(id)`
//! on return has:
//! * published every slot of the dead producer's unfinished range: the ones
//!   it had published keep its descriptors and are delivered; every other
//!   one, always including the first, holds a `Desc::HOLE` whose `next_hop`
//!   is the dead id — the consumer skips it and counts it in `holes_from`;
//! * moved `head` past that range;
//! * touched no slot of any other producer;
//! * returned the number of holes it wrote, which is exactly the number of
//!   descriptors the producer had claimed and that will never be delivered.
//!
//! It is idempotent (a second call finds no claim and returns 0), and safe to
//! run while other producers and the consumer keep going. The frames the lost
//! descriptors pointed at are unknown to the ring; reclaiming them is the
//! monitor's job (e.g. rebuilding the pool when the domain is quiesced).
//!
//! Calling it for a producer that is still running breaks delivery (its
//! slots would be overwritten) but not memory safety: everything is atomics.

use crate::desc::Desc;
use crate::ring::{decode_claim, MpscRing};
use crate::sync::Ordering;

/// What a repair did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RepairReport {
    /// Ring position of the dead producer's claim, if one was found.
    pub claim_pos: Option<u64>,
    /// Length of that claim.
    pub claimed: u32,
    /// Slots of the claim the producer had already published (delivered).
    pub kept: u32,
    /// Slots turned into holes (never delivered).
    pub holes: u32,
}

impl MpscRing {
    /// See the module documentation for the exact guarantee.
    pub fn repair_after_producer_death(&self, dead: u16) -> RepairReport {
        let cap = self.capacity();
        // A producer holds at most one claim, and a claim word carries no
        // position, so scan the whole ring for it (the monitor's slow path).
        for i in 0..cap {
            let seq = self.slot(i).seq.load(Ordering::Acquire);
            let Some((owner, n)) = decode_claim(seq) else { continue };
            if owner != dead {
                continue;
            }
            // The consumer cannot pass an unpublished claim, so it sits in
            // tail..tail+capacity: recover its position from the index.
            let tail = self.hdr().tail.load(Ordering::Acquire);
            let start = tail + (i.wrapping_sub(tail) & (cap - 1));
            let n = (n as u64).min(cap);
            let mut report = RepairReport { claim_pos: Some(start), claimed: n as u32, ..Default::default() };
            let hole = Desc::hole(dead);
            for pos in start + 1..start + n {
                let s = self.slot(pos);
                if s.seq.load(Ordering::Acquire) == pos + 1 {
                    report.kept += 1;
                    continue;
                }
                s.write(&hole);
                s.seq.store(pos + 1, Ordering::Release);
                report.holes += 1;
            }
            // The claim slot last, as its owner would have: until now the
            // consumer stays before this range.
            let s = self.slot(start);
            s.write(&hole);
            s.seq.store(start + 1, Ordering::Release);
            report.holes += 1;
            // If it died before moving head, move it (fails harmlessly if
            // someone already did).
            let _ = self.hdr().head.compare_exchange(start, start + n, Ordering::AcqRel, Ordering::Relaxed);
            self.hdr().ctl.holes_total.fetch_add(report.holes as u64, Ordering::Relaxed);
            return report;
        }
        RepairReport::default()
    }
}
