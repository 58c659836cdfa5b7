//! `DistributedObj`: a value updated on every core, read rarely.

use crate::stm::{Abort, Access, ElementClass, Op, Stm, StructureId, StructureKind, TObj, Tx};

/// Object element ids: worker `w`'s part is `w` (class
/// [`ElementClass::DistributedPart`]); its cached merge is
/// `MERGED_ELEMENT + w` ([`ElementClass::DistributedMerged`]).
pub const MERGED_ELEMENT: u64 = 1 << 32;

/// Folds one part into an accumulator.
type MergeFn<T> = Box<dyn Fn(&mut T, &T) + Send + Sync>;

#[derive(Clone)]
struct Merged<T> {
    value: T,
    merged_at: Option<u64>,
}

/// A value kept as one part per worker that handlers also read (global
/// counters a decision depends on; counters only an operator reads belong
/// in [`super::Statistics`]).
/// `update` changes only the calling worker's part, so updates on
/// different cores never conflict. `read` merges all parts with the NF's
/// merge function, which reads every part and so conflicts with updates
/// elsewhere (NFOS Table 4); with a maximum staleness above 0 a worker
/// reuses its last merge while it is younger than that (recipe: raise the
/// allowed staleness). Staleness is measured in transaction time
/// ([`Tx::now_ns`]).
pub struct DistributedObj<T> {
    structure: StructureId,
    parts: Box<[TObj<T>]>,
    merged: Box<[TObj<Merged<T>>]>,
    identity: T,
    merge: MergeFn<T>,
    max_staleness_ns: u64,
}

impl<T: Clone + Send + Sync + 'static> DistributedObj<T> {
    /// Every part starts as `identity`; `merge(acc, part)` folds a part
    /// into an accumulator that starts as `identity`.
    #[track_caller]
    pub fn new(
        stm: &Stm,
        name: &str,
        identity: T,
        merge: impl Fn(&mut T, &T) + Send + Sync + 'static,
        max_staleness_ns: u64,
    ) -> DistributedObj<T> {
        let structure = stm.register(StructureKind::DistributedObj, name);
        let workers = stm.workers() as u64;
        let parts = (0..workers)
            .map(|w| TObj::with_class(stm, structure, w, ElementClass::DistributedPart, identity.clone()))
            .collect();
        let merged = (0..workers)
            .map(|w| {
                let empty = Merged { value: identity.clone(), merged_at: None };
                TObj::with_class(stm, structure, MERGED_ELEMENT + w, ElementClass::DistributedMerged, empty)
            })
            .collect();
        DistributedObj { structure, parts, merged, identity, merge: Box::new(merge), max_staleness_ns }
    }

    pub fn structure(&self) -> StructureId {
        self.structure
    }

    pub fn max_staleness_ns(&self) -> u64 {
        self.max_staleness_ns
    }

    /// Changes the calling worker's part.
    #[track_caller]
    pub fn update<'a, R>(&'a self, tx: &mut Tx<'a>, f: impl FnOnce(&mut T) -> R) -> Result<R, Abort> {
        let worker = tx.worker();
        tx.update(&self.parts[worker], Access::here(Op::DistributedUpdate, 0), f)
    }

    /// The merged value, at most `max_staleness_ns` old.
    #[track_caller]
    pub fn read<'a>(&'a self, tx: &mut Tx<'a>) -> Result<T, Abort> {
        let access = Access::here(Op::DistributedRead, 0);
        let (worker, now, max) = (tx.worker(), tx.now_ns(), self.max_staleness_ns);
        if max > 0 {
            let fresh = |m: &Merged<T>| match m.merged_at {
                Some(at) if now.saturating_sub(at) <= max => Some(m.value.clone()),
                _ => None,
            };
            if let Some(value) = tx.read_with(&self.merged[worker], access, fresh)? {
                return Ok(value);
            }
        }
        let mut acc = self.identity.clone();
        for part in self.parts.iter() {
            tx.read_with(part, access, |value| (self.merge)(&mut acc, value))?;
        }
        if max > 0 {
            // With no staleness allowed a cache is useless; not writing it
            // keeps a reading transaction read-only.
            tx.write(&self.merged[worker], access, Merged { value: acc.clone(), merged_at: Some(now) })?;
        }
        Ok(acc)
    }

    /// The merged value outside any transaction (NF exit, tests).
    pub fn merged_mut(&mut self) -> T {
        let mut acc = self.identity.clone();
        for part in self.parts.iter_mut() {
            (self.merge)(&mut acc, part.get_mut());
        }
        acc
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::stm::ConflictKind;

    fn counter(stm: &Stm, staleness: u64) -> DistributedObj<u64> {
        DistributedObj::new(stm, "packets", 0, |acc: &mut u64, part: &u64| *acc += part, staleness)
    }

    #[test]
    fn updates_go_to_per_worker_parts_and_reads_merge_them() {
        let stm = Stm::new(2).unwrap();
        let mut c = counter(&stm, 0);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        // Concurrent updates on two cores: no conflict.
        let result = a.try_once(0, |tx| {
            c.update(tx, |v| *v += 2)?;
            b.atomically(0, |btx| c.update(btx, |v| *v += 3));
            Ok(())
        });
        assert!(result.is_ok());
        assert_eq!(a.atomically(0, |tx| c.read(tx)), 5);
        drop((a, b));
        assert_eq!(c.merged_mut(), 5);
    }

    #[test]
    fn a_merge_within_the_staleness_bound_is_reused() {
        let stm = Stm::new(2).unwrap();
        let c = counter(&stm, 100);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        b.atomically(0, |tx| c.update(tx, |v| *v += 1));
        assert_eq!(a.atomically(10, |tx| c.read(tx)), 1);
        b.atomically(20, |tx| c.update(tx, |v| *v += 1));
        assert_eq!(a.atomically(110, |tx| c.read(tx)), 1, "stale but within 100 ns");
        assert_eq!(a.atomically(111, |tx| c.read(tx)), 2, "too old: merged again");
    }

    #[test]
    fn a_merging_writer_conflicts_with_an_update_elsewhere() {
        let stm = Stm::new(2).unwrap();
        let c = counter(&stm, 0);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        let abort = a
            .try_once(0, |tx| {
                c.read(tx)?;
                b.atomically(0, |btx| c.update(btx, |v| *v += 1));
                c.update(tx, |v| *v += 1)
            })
            .unwrap_err();
        assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
        assert_eq!((abort.ours().op, abort.theirs().unwrap().op), (Op::DistributedRead, Op::DistributedUpdate));
        assert_eq!(abort.object().class, ElementClass::DistributedPart);
    }
}
