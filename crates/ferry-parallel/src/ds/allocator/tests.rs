use super::*;
use crate::stm::ConflictKind;

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
