//! Loom models of the commit, validation and reclamation protocol. They run
//! the engine's own code on loom's atomics:
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p ferry-parallel --release --test loom
//!
//! Version nodes are marked instead of freed under loom, and every read
//! asserts it did not read a marked node, so a reclamation race shows up as
//! a failed assertion.
#![cfg(loom)]

use std::sync::Arc;

use ferry_parallel::stm::{Stm, StructureKind, TObj};
use loom::thread;

/// Loom's DPOR keeps one last access per atomic, so a store that follows
/// the same thread's own load of that atomic hides a race with another
/// thread's earlier load. Loads racing with earlier stores are always
/// found, so the models run the writer on the main thread (first in the
/// initial schedule) and spawn the reader: every reader load then races
/// with the writer's stores and the reader is tried at each of them. (A
/// check that this finds real bugs: removing the announce slots from the
/// reclamation horizon makes `reclamation_never_frees_...` fail.)
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // LOOM_MAX_PREEMPTIONS overrides; 3 keeps the whole file at a few
    // seconds while covering every schedule with up to three preemptions.
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

struct Shared {
    stm: Stm,
    x: TObj<u64>,
    y: TObj<u64>,
}

fn shared(workers: usize, x: u64, y: u64) -> Arc<Shared> {
    let stm = Stm::new(workers).unwrap();
    let id = stm.register(StructureKind::Object, "xy");
    let x = TObj::new(&stm, id, 0, x);
    let y = TObj::new(&stm, id, 1, y);
    Arc::new(Shared { stm, x, y })
}

/// Two read-modify-write transactions on one object: both commit (after
/// retries) and neither increment is lost.
#[test]
fn concurrent_increments_are_not_lost() {
    model(|| {
        let s = shared(2, 0, 0);
        let other = {
            let s = s.clone();
            thread::spawn(move || {
                let mut w = s.stm.worker(1).unwrap();
                w.atomically(0, |tx| s.x.update(tx, |v| *v += 1));
            })
        };
        let mut w = s.stm.worker(0).unwrap();
        w.atomically(0, |tx| s.x.update(tx, |v| *v += 1));
        other.join().unwrap();
        assert_eq!(w.atomically(0, |tx| s.x.read(tx)), 2);
    });
}

/// A read-only transaction racing a transfer sees either all of it or none
/// of it, and never aborts.
#[test]
fn a_reader_sees_a_whole_transfer_or_none_and_never_aborts() {
    model(|| {
        let s = shared(2, 5, 5);
        let reader = {
            let s = s.clone();
            thread::spawn(move || {
                let mut r = s.stm.worker(0).unwrap();
                let seen = r.try_once(0, |tx| Ok((s.x.read(tx)?, s.y.read(tx)?)));
                let (x, y) = seen.expect("a read-only transaction aborted");
                assert!((x, y) == (5, 5) || (x, y) == (4, 6), "torn read {x} {y}");
            })
        };
        let mut w = s.stm.worker(1).unwrap();
        w.set_reclaim_period(1);
        w.atomically(0, |tx| {
            s.x.update(tx, |v| *v -= 1)?;
            s.y.update(tx, |v| *v += 1)
        });
        reader.join().unwrap();
    });
}

/// Write skew: each transaction sets its own flag only if both are clear.
/// Serializability allows exactly one flag set at the end.
#[test]
fn write_skew_cannot_happen() {
    model(|| {
        let s = shared(2, 0, 0);
        let other = {
            let s = s.clone();
            thread::spawn(move || {
                let mut w = s.stm.worker(1).unwrap();
                w.atomically(0, |tx| {
                    if s.x.read(tx)? + s.y.read(tx)? == 0 {
                        s.y.write(tx, 1)?;
                    }
                    Ok(())
                });
            })
        };
        let mut w = s.stm.worker(0).unwrap();
        w.atomically(0, |tx| {
            if s.x.read(tx)? + s.y.read(tx)? == 0 {
                s.x.write(tx, 1)?;
            }
            Ok(())
        });
        other.join().unwrap();
        assert_eq!(w.atomically(0, |tx| Ok(s.x.read(tx)? + s.y.read(tx)?)), 1);
    });
}

/// A writer reclaiming eagerly (every commit) while a reader holds a
/// snapshot: the reader reads the same value twice and never a reclaimed
/// version (asserted inside the engine under loom).
#[test]
fn reclamation_never_frees_a_version_a_snapshot_can_reach() {
    model(|| {
        let s = shared(2, 0, 0);
        let reader = {
            let s = s.clone();
            thread::spawn(move || {
                let mut r = s.stm.worker(0).unwrap();
                let (first, second) = r.try_once(0, |tx| Ok((s.x.read(tx)?, s.x.read(tx)?))).unwrap();
                assert_eq!(first, second, "a snapshot changed under a reader");
            })
        };
        let mut w = s.stm.worker(1).unwrap();
        w.set_reclaim_period(1);
        for _ in 0..2 {
            w.atomically(0, |tx| s.x.update(tx, |v| *v += 1));
        }
        reader.join().unwrap();
    });
}
