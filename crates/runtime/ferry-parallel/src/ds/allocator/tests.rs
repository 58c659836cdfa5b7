use super::*;
use crate::stm::{ConflictKind, ElementClass, Worker};

fn config(capacity: u32, lease_ns: u64, refresh_interval_ns: u64) -> AllocatorConfig {
    AllocatorConfig { capacity, lease_ns, refresh_interval_ns }
}

#[test]
fn allocates_from_its_own_pool_then_steals_then_runs_out() {
    let stm = Stm::new(2).unwrap();
    let mut alloc = Allocator::new(&stm, "ports", config(4, 1_000, 0)).unwrap();
    let mut w = stm.worker(0).unwrap();
    let got: Vec<_> = (0..5).map(|_| w.atomically(0, |tx| alloc.allocate(tx))).collect();
    // Worker 0 owns 0 and 1, then steals 2 and 3 from worker 1.
    assert_eq!(got, vec![Some(0), Some(1), Some(2), Some(3), None]);
    drop(w);
    assert_eq!(alloc.pool_lengths_mut(), vec![0, 0]);
    assert_eq!(alloc.lease_counts_mut(), vec![4, 0]);
}

#[test]
fn leases_expire_oldest_first_unless_refreshed() {
    let stm = Stm::new(1).unwrap();
    let mut alloc = Allocator::new(&stm, "ports", config(3, 100, 0)).unwrap();
    let mut w = stm.worker(0).unwrap();
    for t in [0, 10, 20] {
        w.atomically(t, |tx| alloc.allocate(tx));
    }
    let mut expired = Vec::new();
    assert_eq!(w.atomically(50, |tx| alloc.expire(tx, 10, &mut expired)), 0);
    assert!(w.atomically(60, |tx| alloc.refresh(tx, 0)));
    assert_eq!(w.atomically(60, |tx| alloc.lease_expiry(tx, 0)), Some(160));
    // At 125, leases 1 (expires 110) and 2 (120) are due; 0 was refreshed.
    assert_eq!(w.atomically(125, |tx| alloc.expire(tx, 10, &mut expired)), 2);
    assert_eq!(expired, vec![1, 2]);
    assert_eq!(w.atomically(125, |tx| alloc.lease_expiry(tx, 1)), None);
    expired.clear();
    assert_eq!(w.atomically(200, |tx| alloc.expire(tx, 1, &mut expired)), 1);
    assert_eq!(expired, vec![0]);
    drop(w);
    assert_eq!((alloc.pool_lengths_mut(), alloc.lease_counts_mut()), (vec![3], vec![0]));
}

#[test]
fn refresh_within_the_interval_is_a_read() {
    let stm = Stm::new(1).unwrap();
    let alloc = Allocator::new(&stm, "macs", config(2, 1_000, 100)).unwrap();
    let mut w = stm.worker(0).unwrap();
    let index = w.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    let wrote = w.atomically(50, |tx| {
        assert!(alloc.refresh(tx, index)?);
        Ok(tx.is_writer())
    });
    assert!(!wrote);
    assert_eq!(w.atomically(50, |tx| alloc.lease_expiry(tx, index)), Some(1_000));
    let wrote = w.atomically(150, |tx| {
        alloc.refresh(tx, index)?;
        Ok(tx.is_writer())
    });
    assert!(wrote);
    assert_eq!(w.atomically(150, |tx| alloc.lease_expiry(tx, index)), Some(1_150));
}

#[test]
fn free_returns_to_the_freeing_workers_pool_once() {
    let stm = Stm::new(2).unwrap();
    let mut alloc = Allocator::new(&stm, "rows", config(4, 1_000, 0)).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    let index = w1.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    assert_eq!(index, 2);
    let mut w0 = stm.worker(0).unwrap();
    assert!(w0.atomically(0, |tx| alloc.free(tx, index)));
    assert!(!w0.atomically(0, |tx| alloc.free(tx, index)));
    assert!(!w0.atomically(0, |tx| alloc.refresh(tx, index)));
    drop((w0, w1));
    assert_eq!(alloc.pool_lengths_mut(), vec![3, 1]);
    assert_eq!(alloc.lease_counts_mut(), vec![0, 0]);
}

#[test]
fn stealing_conflicts_with_the_victims_allocation() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(4, 1_000, 0)).unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    a.atomically(0, |tx| alloc.allocate(tx));
    a.atomically(0, |tx| alloc.allocate(tx));
    let abort = a
        .try_once(0, |tx| {
            alloc.allocate(tx)?; // pool 0 is empty: steals from pool 1
            b.atomically(0, |btx| alloc.allocate(btx));
            Ok(())
        })
        .unwrap_err();
    assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
    assert_eq!(abort.object().element, FREE_POOL_ELEMENT + 1);
    assert_eq!(abort.object().class, ElementClass::AllocatorFreePool);
    assert_eq!((abort.ours().op, abort.theirs().unwrap().op), (Op::AllocatorAllocate, Op::AllocatorAllocate));
}

#[test]
fn refreshes_on_one_lease_list_conflict() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "macs", config(4, 1_000, 0)).unwrap();
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let first = a.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    let second = a.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    let abort = a
        .try_once(10, |tx| {
            alloc.refresh(tx, first)?;
            b.atomically(10, |btx| alloc.refresh(btx, second));
            Ok(())
        })
        .unwrap_err();
    assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
    assert_eq!((abort.ours().op, abort.theirs().unwrap().op), (Op::AllocatorRefresh, Op::AllocatorRefresh));
}

#[test]
fn rejects_empty_and_oversized_configs() {
    let stm = Stm::new(1).unwrap();
    assert!(matches!(Allocator::new(&stm, "a", config(0, 1, 0)), Err(DsError::Empty { .. })));
    assert!(matches!(Allocator::new(&stm, "a", config(u32::MAX, 1, 0)), Err(DsError::TooLarge { .. })));
}

#[test]
fn refresh_does_not_revive_an_expired_lease_that_was_not_reclaimed_yet() {
    let stm = Stm::new(1).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(3, 100, 0)).unwrap();
    let mut w = stm.worker(0).unwrap();
    let (a, b) = (w.atomically(0, |tx| alloc.allocate(tx)).unwrap(), w.atomically(0, |tx| alloc.allocate(tx)).unwrap());
    assert!(w.atomically(99, |tx| alloc.refresh(tx, a)), "live until 100");
    // b expired at 100 (an expiry at or before now is past) and nobody
    // reclaimed it: a refresh leaves it as it is, and writes nothing.
    for at in [100, 150] {
        let (live, wrote) = w.atomically(at, |tx| Ok((alloc.refresh(tx, b)?, tx.is_writer())));
        assert_eq!((live, wrote), (false, false), "refresh at {at}");
        assert_eq!(w.atomically(at, |tx| alloc.lease_expiry(tx, b)), Some(100), "still leased, not renewed");
    }
    let mut expired = Vec::new();
    assert_eq!(w.atomically(150, |tx| alloc.expire(tx, 10, &mut expired)), 1);
    assert_eq!(expired, vec![b]);
    assert!(w.atomically(150, |tx| alloc.refresh(tx, a)), "a was refreshed at 99, live until 199");
}

#[test]
fn an_expired_lease_within_the_refresh_interval_is_not_live_either() {
    let stm = Stm::new(1).unwrap();
    let alloc = Allocator::new(&stm, "macs", config(1, 100, 1_000)).unwrap();
    let mut w = stm.worker(0).unwrap();
    let index = w.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    assert!(w.atomically(50, |tx| alloc.refresh(tx, index)), "within the interval: a read, and live");
    assert!(!w.atomically(150, |tx| alloc.refresh(tx, index)), "within the interval, but expired");
}

impl Allocator {
    fn pool_len<'a>(&'a self, tx: &mut Tx<'a>, worker: usize) -> Result<u32, Abort> {
        tx.read_with(&self.pools[worker], Access::here(Op::Read, 0), |p| p.len)
    }
}

const IDLE: usize = IDLE_AFTER_CALLS as usize;

/// Worker 1 leases `count` indices at 0 and then gets no traffic.
fn strand<'a>(alloc: &'a Allocator, w1: &mut Worker<'a>, count: usize) -> Vec<u32> {
    (0..count).map(|_| w1.atomically(0, |tx| alloc.allocate(tx)).unwrap()).collect()
}

/// `w` leases every index of its own pool at `at`: it is short.
fn drain<'a>(alloc: &'a Allocator, w: &mut Worker<'a>, at: u64) {
    let own = w.index();
    while w.atomically(at, |tx| alloc.pool_len(tx, own)) > 0 {
        w.atomically(at, |tx| alloc.allocate(tx)).unwrap();
    }
}

/// `w` calls `expire` at each time in `at`; returns what each reclaimed.
fn expire_at<'a>(alloc: &'a Allocator, w: &mut Worker<'a>, at: &[u64], max: usize) -> Vec<Vec<u32>> {
    at.iter()
        .map(|t| {
            let mut expired = Vec::new();
            w.atomically(*t, |tx| {
                expired.clear();
                alloc.expire(tx, max, &mut expired)
            });
            expired
        })
        .collect()
}

#[test]
fn a_short_worker_reclaims_leases_stranded_on_a_worker_that_stopped_expiring() {
    let stm = Stm::new(2).unwrap();
    let mut alloc = Allocator::new(&stm, "ports", config(4, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    // Worker 1 never calls expire. Its leases expire at 100; a short
    // worker takes them a lease period later, from 200, once it has seen
    // worker 1 make no call over IDLE_AFTER_CALLS calls of its own.
    assert_eq!(strand(&alloc, &mut w1, 2), vec![2, 3]);
    drain(&alloc, &mut w0, 150);
    let mut at: Vec<u64> = (0..IDLE as u64 - 1).map(|i| 150 + i).collect();
    at.extend([199, 200, 200]);
    let mut expected = vec![vec![]; IDLE];
    expected.extend([vec![2, 3], vec![]]);
    assert_eq!(expire_at(&alloc, &mut w0, &at, 10), expected, "oldest first");
    assert_eq!(w0.atomically(200, |tx| alloc.allocate(tx)), Some(3), "from its own pool: no stealing");
    drop((w0, w1));
    assert_eq!(alloc.pool_lengths_mut(), vec![1, 0]);
    assert_eq!(alloc.lease_counts_mut(), vec![3, 0]);
}

#[test]
fn a_worker_with_free_indices_does_not_sweep() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(4, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    strand(&alloc, &mut w1, 2);
    let at: Vec<u64> = (0..2 * IDLE as u64).map(|i| 1_000 + i).collect();
    assert!(expire_at(&alloc, &mut w0, &at, 10).iter().all(|got| got.is_empty()));
    drain(&alloc, &mut w0, 1_100);
    assert_eq!(expire_at(&alloc, &mut w0, &[1_100], 10), vec![vec![2, 3]]);
}

#[test]
fn calls_at_one_time_count_once_towards_idleness() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(4, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    strand(&alloc, &mut w1, 2);
    drain(&alloc, &mut w0, 500);
    // Retries of an aborted attempt run at the same time: one call.
    assert!(expire_at(&alloc, &mut w0, &[500; 3 * IDLE], 10).iter().all(|got| got.is_empty()));
    let at: Vec<u64> = (1..IDLE as u64).map(|i| 500 + i).collect();
    let got = expire_at(&alloc, &mut w0, &at, 10);
    assert_eq!(got.last(), Some(&vec![2, 3]), "the {IDLE}th distinct time");
    assert!(got[..got.len() - 1].iter().all(|got| got.is_empty()));
}

#[test]
fn a_worker_that_keeps_expiring_is_not_swept_even_when_behind_in_time() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(6, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    strand(&alloc, &mut w1, 1);
    drain(&alloc, &mut w0, 240);
    // Worker 1 runs far behind worker 0 in time (its lease expired long
    // ago by worker 0's clock, not yet by its own) but calls expire.
    let nothing: Vec<Vec<u32>> = vec![vec![]];
    assert_eq!(expire_at(&alloc, &mut w1, &[10], 10), nothing);
    assert_eq!(expire_at(&alloc, &mut w0, &[250], 10), nothing);
    assert_eq!(expire_at(&alloc, &mut w1, &[50], 10), nothing);
    assert_eq!(expire_at(&alloc, &mut w0, &[260], 10), nothing);
    // Worker 0 keeps its own leases live (so it stays short).
    for index in 0..3 {
        assert!(w0.atomically(335, |tx| alloc.refresh(tx, index)));
    }
    // It last saw a call of worker 1 at its second call, at 260: idle
    // takes a lease period (100) and IDLE_AFTER_CALLS more calls of its own.
    let at: Vec<u64> = (0..IDLE as u64).map(|i| 400 + i).collect();
    let mut expected = vec![vec![]; IDLE - 1];
    expected.push(vec![3]);
    assert_eq!(expire_at(&alloc, &mut w0, &at, 10), expected);
}

#[test]
fn a_sweep_stays_within_the_budget() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(8, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    let stranded = strand(&alloc, &mut w1, 3);
    drain(&alloc, &mut w0, 300);
    let mut expected = vec![vec![]; IDLE - 1];
    expected.push(stranded[..2].to_vec());
    let at: Vec<u64> = (0..IDLE as u64).map(|i| 300 + i).collect();
    assert_eq!(expire_at(&alloc, &mut w0, &at, 2), expected);
    drain(&alloc, &mut w0, 310);
    assert_eq!(expire_at(&alloc, &mut w0, &[310], 10), vec![stranded[2..].to_vec()]);
}

#[test]
fn a_sweep_reads_only_lists_with_stranded_leases() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "ports", config(8, 100, 0)).unwrap();
    let mut w0 = stm.worker(0).unwrap();
    let mut w1 = stm.worker(1).unwrap();
    strand(&alloc, &mut w1, 1);
    drain(&alloc, &mut w0, 149);
    let at: Vec<u64> = (0..IDLE as u64 - 1).map(|i| 149 + i).collect();
    expire_at(&alloc, &mut w0, &at, 10);
    // At 160 worker 1 is idle and its lease has expired, but not a lease
    // period ago: the sweep only peeks at worker 1's list, so worker 1
    // changing it does not abort worker 0.
    let swept = w0.try_once(160, |tx| {
        let mut expired = Vec::new();
        let n = alloc.expire(tx, 10, &mut expired)?;
        w1.atomically(160, |btx| alloc.allocate(btx));
        Ok(n)
    });
    assert_eq!(swept, Ok(0));
    // At 248 (before worker 0's own leases expire) it is stranded: the
    // sweep reclaims it, and so conflicts with worker 1's allocation onto
    // that list.
    let abort = w0
        .try_once(248, |tx| {
            let mut expired = Vec::new();
            assert_eq!(alloc.expire(tx, 10, &mut expired)?, 1);
            w1.atomically(248, |btx| alloc.allocate(btx));
            Ok(())
        })
        .unwrap_err();
    assert_eq!(abort.object().element, LEASE_LIST_ELEMENT + 1);
    assert_eq!(abort.object().class, ElementClass::AllocatorLeaseList);
    assert_eq!((abort.ours().op, abort.theirs().unwrap().op), (Op::AllocatorExpire, Op::AllocatorAllocate));
}

#[test]
fn lease_expiry_is_a_query_not_a_refresh() {
    let stm = Stm::new(2).unwrap();
    let alloc = Allocator::new(&stm, "macs", config(4, 1_000, 0)).unwrap();
    let flag = TObj::new(&stm, stm.register(StructureKind::Object, "flag"), 0, false);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let index = a.atomically(0, |tx| alloc.allocate(tx)).unwrap();
    let abort = a
        .try_once(10, |tx| {
            alloc.lease_expiry(tx, index)?;
            b.atomically(10, |btx| alloc.refresh(btx, index));
            flag.write(tx, true) // a writer, so its read must still hold at commit
        })
        .unwrap_err();
    assert_eq!(abort.object().class, ElementClass::AllocatorSlot);
    assert_eq!((abort.ours().op, abort.theirs().unwrap().op), (Op::AllocatorQuery, Op::AllocatorRefresh));
}
