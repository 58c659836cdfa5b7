//! `Statistics`: an NF's counters, kept per core outside the transactional
//! memory.
//!
//! Counters are written on nearly every packet and read by no handler (an
//! operator or a test reads them), so giving them transactional objects
//! (a [`super::DistributedObj`]) would make every batch a writing
//! transaction for numbers nobody decides anything on: a version node
//! allocated, a lock taken and the global clock bumped per batch. Like a
//! VPP per-thread counter, a `Statistics` part belongs to one worker; what
//! makes it safe under aborts is that an attempt's updates go to a pending
//! delta, folded into the worker's committed part only when the attempt
//! commits (an aborted attempt's delta is dropped when the next attempt
//! starts). So the counters count exactly the committed work, as if they
//! were transactional, while costing a few instructions per update.
//!
//! What it gives up: handlers cannot read it inside a transaction (a
//! value a handler decides on belongs in a `DistributedObj`), and a reader
//! sees each worker's part as of its last commit, not one snapshot.

use std::cell::UnsafeCell;
use std::sync::{Mutex, PoisonError};

use crate::stm::{CommitHook, Stm, Tx};
use crate::sync::Padded;

/// Folds one part (or delta) into an accumulator.
type MergeFn<T> = Box<dyn Fn(&mut T, &T) + Send + Sync>;

/// One worker's part: committed counts, and the running attempt's delta.
struct Part<T> {
    committed: Mutex<T>,
    /// The attempt (see [`Tx::attempt`]) the delta belongs to, and the
    /// delta. Only the worker whose index this part has touches it.
    pending: UnsafeCell<Option<(u64, T)>>,
}

/// Per-core counters of type `T` (usually a struct of `u64`s), merged by
/// the NF's merge function, which must be associative with `identity` as
/// its neutral element (a field-wise sum is).
pub struct Statistics<T> {
    /// Padded: each worker writes its delta on nearly every packet, so two
    /// parts on one cache line would bounce it between cores.
    parts: Box<[Padded<Part<T>>]>,
    identity: T,
    merge: MergeFn<T>,
}

// SAFETY: `committed` is behind a mutex. `pending` of part `w` is only
// touched through `update` and `on_commit` with a transaction of worker
// `w`: the engine hands out one `Worker` per index at a time, a worker runs
// one transaction at a time, and both calls hold that transaction mutably
// (or are called by its worker after its commit), so no two threads ever
// access the same `pending` at once. `T: Send` lets the value move between
// the threads that take turns with it.
unsafe impl<T: Send> Sync for Statistics<T> {}

impl<T: Clone + Send + 'static> Statistics<T> {
    /// Counters for every worker of `stm`, all starting at `identity`.
    pub fn new(stm: &Stm, identity: T, merge: impl Fn(&mut T, &T) + Send + Sync + 'static) -> Statistics<T> {
        let parts = (0..stm.workers())
            .map(|_| Padded(Part { committed: Mutex::new(identity.clone()), pending: UnsafeCell::new(None) }))
            .collect();
        Statistics { parts, identity, merge: Box::new(merge) }
    }

    /// Changes the calling worker's counters; the change counts once the
    /// transaction commits.
    pub fn update<'a>(&'a self, tx: &mut Tx<'a>, f: impl FnOnce(&mut T)) {
        let (worker, attempt) = (tx.worker(), tx.attempt());
        let part = &self.parts[worker];
        // SAFETY: see the `Sync` impl: we hold worker `worker`'s running
        // transaction mutably.
        let pending = unsafe { &mut *part.pending.get() };
        match pending {
            Some((of, delta)) if *of == attempt => f(delta),
            _ => {
                let mut delta = self.identity.clone();
                f(&mut delta);
                *pending = Some((attempt, delta));
                tx.on_commit(self);
            }
        }
    }

    /// All workers' committed counts, merged. Callable at any time from any
    /// thread (not a snapshot: each part as of its worker's last commit).
    pub fn merged(&self) -> T {
        let mut acc = self.identity.clone();
        for part in self.parts.iter() {
            (self.merge)(&mut acc, &part.committed.lock().unwrap_or_else(PoisonError::into_inner));
        }
        acc
    }
}

impl<T: Send> CommitHook for Statistics<T> {
    fn on_commit(&self, worker: usize, attempt: u64) {
        let part = &self.parts[worker];
        // SAFETY: called by worker `worker` right after its transaction
        // committed, before it starts another (see the `Sync` impl).
        let pending = unsafe { &mut *part.pending.get() };
        if let Some((of, delta)) = pending.take() {
            if of == attempt {
                (self.merge)(&mut part.committed.lock().unwrap_or_else(PoisonError::into_inner), &delta);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::stm::{Abort, ConflictKind, StructureKind, TObj};

    fn packets(stm: &Stm) -> Statistics<u64> {
        Statistics::new(stm, 0, |acc: &mut u64, part: &u64| *acc += part)
    }

    #[test]
    fn updates_count_once_their_transaction_commits() {
        let stm = Stm::new(2).unwrap();
        let stats = packets(&stm);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        a.atomically(0, |tx| {
            stats.update(tx, |n| *n += 2);
            stats.update(tx, |n| *n += 1);
            assert_eq!(stats.merged(), 0, "not before the commit");
            Ok(())
        });
        b.atomically(0, |tx| {
            stats.update(tx, |n| *n += 10);
            Ok(())
        });
        assert_eq!(stats.merged(), 13);
    }

    #[test]
    fn an_aborted_attempt_counts_nothing() {
        let stm = Stm::new(2).unwrap();
        let id = stm.register(StructureKind::Object, "x");
        let x = TObj::new(&stm, id, 0, 0u64);
        let stats = packets(&stm);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        let mut attempts = 0;
        a.atomically(0, |tx| {
            attempts += 1;
            stats.update(tx, |n| *n += 1);
            let seen = x.read(tx)?;
            if attempts == 1 {
                b.atomically(0, |btx| x.write(btx, 7));
            }
            x.write(tx, seen + 1)
        });
        assert_eq!(attempts, 2);
        assert_eq!(stats.merged(), 1, "the aborted attempt's update is gone");
        let abort: Abort = a
            .try_once(0, |tx| {
                stats.update(tx, |n| *n += 100);
                let seen = x.read(tx)?;
                b.atomically(0, |btx| x.write(btx, 9));
                x.write(tx, seen + 1)
            })
            .unwrap_err();
        assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
        a.atomically(0, |tx| {
            stats.update(tx, |n| *n += 1);
            Ok(())
        });
        assert_eq!(stats.merged(), 2, "a failed try_once leaves no delta behind");
    }
}
