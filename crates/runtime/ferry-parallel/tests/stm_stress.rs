//! Contention stress: real threads hammering few objects.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use ferry_parallel::stm::{Stm, StructureKind, TObj, TxStats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn concurrent_increments_of_one_counter_are_never_lost() {
    const THREADS: usize = 4;
    const INCREMENTS: u64 = 20_000;
    let stm = Stm::new(THREADS).unwrap();
    let id = stm.register(StructureKind::Object, "counter");
    let counter = TObj::new(&stm, id, 0, 0u64);
    let stats: Vec<TxStats> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (stm, counter) = (&stm, &counter);
                s.spawn(move || {
                    let mut w = stm.worker(i).unwrap();
                    for _ in 0..INCREMENTS {
                        w.atomically(0, |tx| counter.update(tx, |v| *v += 1));
                    }
                    w.take_stats()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut w = stm.worker(0).unwrap();
    assert_eq!(w.atomically(0, |tx| counter.read(tx)), THREADS as u64 * INCREMENTS);
    let mut total = TxStats::default();
    stats.iter().for_each(|s| total.merge(s));
    assert_eq!(total.commits, THREADS as u64 * INCREMENTS);
    eprintln!("increments: {} commits, {} aborts ({:.1}%)", total.commits, total.aborts, total.abort_ratio() * 100.0);
}

#[test]
fn transfers_preserve_the_total_and_read_only_auditors_never_abort() {
    const ACCOUNTS: usize = 8;
    const WRITERS: usize = 3;
    const TRANSFERS: usize = 20_000;
    const INITIAL: i64 = 1_000;
    let stm = Stm::new(WRITERS + 1).unwrap();
    let id = stm.register(StructureKind::Vector, "accounts");
    let accounts: Vec<TObj<i64>> = (0..ACCOUNTS).map(|i| TObj::new(&stm, id, i as u64, INITIAL)).collect();
    let total = INITIAL * ACCOUNTS as i64;
    let done = AtomicBool::new(false);
    // Audits finished so far: each writer waits halfway for the first one,
    // so the auditor runs while transfers are still being committed,
    // however the threads happen to be scheduled (a loaded machine could
    // otherwise run every writer to the end before the auditor starts).
    let audited = AtomicU64::new(0);
    let (audits, auditor_stats) = thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (stm, accounts, audited) = (&stm, &accounts, &audited);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(i as u64);
                    let mut w = stm.worker(i).unwrap();
                    for n in 0..TRANSFERS {
                        if n == TRANSFERS / 2 {
                            while audited.load(Ordering::Acquire) == 0 {
                                thread::yield_now();
                            }
                        }
                        let from = rng.gen_range(0..ACCOUNTS);
                        let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
                        let amount = rng.gen_range(1..50);
                        w.atomically(0, |tx| {
                            // Overdrafts are allowed; the point is the sum.
                            accounts[from].update(tx, |v| *v -= amount)?;
                            accounts[to].update(tx, |v| *v += amount)
                        });
                    }
                })
            })
            .collect();
        let auditor = {
            let (stm, accounts, done, audited) = (&stm, &accounts, &done, &audited);
            s.spawn(move || {
                let mut w = stm.worker(WRITERS).unwrap();
                let mut audits = 0u64;
                loop {
                    // Read before the audit: the audit after the writers
                    // finished is the last one.
                    let last = done.load(Ordering::Acquire);
                    let sum = w.atomically(0, |tx| {
                        let mut sum = 0;
                        for a in accounts {
                            sum += a.read(tx)?;
                        }
                        Ok(sum)
                    });
                    assert_eq!(sum, total, "an auditor saw a torn snapshot");
                    audits += 1;
                    audited.store(audits, Ordering::Release);
                    if last {
                        break;
                    }
                }
                (audits, w.take_stats())
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        auditor.join().unwrap()
    });
    assert!(audits >= 2, "one audit while the writers ran, one after");
    assert_eq!(auditor_stats.aborts, 0, "writers aborted a read-only transaction");
    assert_eq!(auditor_stats.read_only_commits, audits);
    let mut w = stm.worker(0).unwrap();
    let sum: i64 = w.atomically(0, |tx| accounts.iter().map(|a| a.read(tx)).sum());
    assert_eq!(sum, total);
}

#[test]
fn multi_object_batches_stay_serializable_under_contention() {
    // Each transaction moves one unit from a random slot to a random other
    // slot and bumps a global operation count; at the end the count equals
    // the number of transactions and the slots still sum to zero. The count
    // is a single hot object read-modify-written by every transaction.
    const THREADS: usize = 2;
    const OPS: u64 = 10_000;
    let stm = Stm::new(THREADS).unwrap();
    let vid = stm.register(StructureKind::Vector, "slots");
    let slots: Vec<TObj<i64>> = (0..4).map(|i| TObj::new(&stm, vid, i, 0)).collect();
    let cid = stm.register(StructureKind::Object, "ops");
    let ops = TObj::new(&stm, cid, 0, 0u64);
    thread::scope(|s| {
        for i in 0..THREADS {
            let (stm, slots, ops) = (&stm, &slots, &ops);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + i as u64);
                let mut w = stm.worker(i).unwrap();
                w.set_reclaim_period(1);
                for _ in 0..OPS {
                    let (a, b) = (rng.gen_range(0..4), rng.gen_range(0..4));
                    w.atomically(0, |tx| {
                        slots[a].update(tx, |v| *v -= 1)?;
                        slots[b].update(tx, |v| *v += 1)?;
                        ops.update(tx, |v| *v += 1)
                    });
                }
            });
        }
    });
    let mut w = stm.worker(0).unwrap();
    let (sum, count) = w.atomically(0, |tx| {
        let mut sum = 0;
        for slot in &slots {
            sum += slot.read(tx)?;
        }
        Ok((sum, ops.read(tx)?))
    });
    assert_eq!((sum, count), (0, THREADS as u64 * OPS));
}
