//! Transaction-engine semantics, with interleavings made deterministic by
//! running one worker's whole transaction inside another worker's body.
#![cfg(not(loom))]

use ferry_parallel::stm::{Abort, ConflictKind, Op, Stm, StmError, StructureKind, TObj};

fn engine(workers: usize) -> Stm {
    Stm::new(workers).unwrap()
}

fn counter(stm: &Stm, element: u64, value: u64) -> TObj<u64> {
    let id = stm.register(StructureKind::Object, format!("obj{element}"));
    TObj::new(stm, id, element, value)
}

#[test]
fn committed_writes_are_visible_and_own_writes_are_read_back() {
    let stm = engine(1);
    let x = counter(&stm, 0, 1);
    let mut w = stm.worker(0).unwrap();
    let seen = w.atomically(0, |tx| {
        x.write(tx, 7)?;
        let own = x.read(tx)?;
        x.update(tx, |v| *v += 1)?;
        Ok((own, x.read(tx)?))
    });
    assert_eq!(seen, (7, 8));
    assert_eq!(w.atomically(0, |tx| x.read(tx)), 8);
    assert_eq!(w.stats().commits, 2);
    assert_eq!(w.stats().read_only_commits, 1);
    assert_eq!(w.stats().aborts, 0);
}

#[test]
fn a_reader_keeps_its_snapshot_and_neither_side_aborts() {
    let stm = engine(2);
    let x = counter(&stm, 0, 10);
    let y = counter(&stm, 1, 20);
    let mut reader = stm.worker(0).unwrap();
    let mut writer = stm.worker(1).unwrap();
    let result = reader.try_once(0, |tx| {
        let x0 = x.read(tx)?;
        // A whole writing transaction commits in the middle of the reader.
        writer.atomically(0, |wtx| {
            x.update(wtx, |v| *v -= 5)?;
            y.update(wtx, |v| *v += 5)
        });
        // The reader cannot extend its snapshot (x changed), so it keeps
        // reading the old state: a consistent sum, and no abort.
        let y0 = y.read(tx)?;
        assert!(!tx.is_writer());
        Ok(x0 + y0)
    });
    assert_eq!(result, Ok(30));
    assert_eq!(reader.stats().aborts, 0);
    assert_eq!(writer.stats().aborts, 0, "a reader never aborts a writer");
    assert_eq!(reader.atomically(0, |tx| Ok((x.read(tx)?, y.read(tx)?))), (5, 25));
}

#[test]
fn a_reader_that_writes_after_its_read_was_overwritten_aborts_at_once_and_names_both_sides() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let y = counter(&stm, 1, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let mut their_line = 0;
    let mut our_line = 0;
    let result = a.try_once(0, |tx| {
        our_line = line!() + 1;
        let seen = x.read(tx)?;
        b.atomically(0, |btx| {
            their_line = line!() + 1;
            x.write(btx, 1)
        });
        y.write(tx, seen + 1)?;
        Ok(())
    });
    let abort = result.unwrap_err();
    assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
    assert_eq!(abort.object(), x.id());
    assert_eq!((abort.ours().op, abort.ours().location.line()), (Op::Read, our_line));
    let theirs = abort.theirs().expect("the winning write is known");
    assert_eq!((theirs.op, theirs.location.line()), (Op::Write, their_line));
    assert_eq!(a.stats().aborts, 1);
    // Nothing of the aborted attempt is visible.
    assert_eq!(a.atomically(0, |tx| y.read(tx)), 0);
}

#[test]
fn a_snapshot_is_extended_when_nothing_read_so_far_changed() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let y = counter(&stm, 1, 100);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result = a.try_once(0, |tx| {
        let y0 = y.read(tx)?;
        b.atomically(0, |btx| x.write(btx, 5));
        // x is newer than the snapshot, but y is unchanged: extend and read
        // the newest x, so the write below is still valid.
        let x0 = x.read(tx)?;
        y.write(tx, y0 + x0)?;
        Ok(x0)
    });
    assert_eq!(result, Ok(5));
    assert_eq!(a.atomically(0, |tx| y.read(tx)), 105);
}

#[test]
fn write_skew_is_caught_by_commit_time_validation() {
    // Invariant: at most one of x, y is 1. Each transaction sets one if both
    // are 0. Under snapshot isolation both would commit; serializability
    // must abort one.
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let y = counter(&stm, 1, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result = a.try_once(0, |tx| {
        let both_zero = x.read(tx)? + y.read(tx)? == 0;
        b.atomically(0, |btx| {
            if x.read(btx)? + y.read(btx)? == 0 {
                x.write(btx, 1)?;
            }
            Ok(())
        });
        if both_zero {
            y.write(tx, 1)?;
        }
        Ok(())
    });
    let abort = result.unwrap_err();
    assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
    assert_eq!(abort.object(), x.id());
    assert_eq!(a.atomically(0, |tx| Ok((x.read(tx)?, y.read(tx)?))), (1, 0));
}

#[test]
fn blind_writes_do_not_conflict() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result = a.try_once(0, |tx| {
        x.write(tx, 1)?;
        b.atomically(0, |btx| x.write(btx, 2));
        Ok(())
    });
    assert_eq!(result, Ok(()));
    // A serialized after B.
    assert_eq!(a.atomically(0, |tx| x.read(tx)), 1);
}

#[test]
fn an_aborted_attempt_is_retried_until_it_commits() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let mut attempts = 0;
    let value = a.atomically(0, |tx| {
        attempts += 1;
        let v = x.read(tx)?;
        if attempts == 1 {
            b.atomically(0, |btx| x.update(btx, |v| *v += 10));
        }
        x.write(tx, v + 1)?;
        Ok(v + 1)
    });
    assert_eq!((attempts, value), (2, 11));
    assert_eq!(a.stats().aborts, 1);
    assert_eq!(a.stats().commits, 1);
    let (site, count) = a.stats().conflicts.iter().next().unwrap();
    assert_eq!(*count, 1);
    assert_eq!(site.kind, ConflictKind::ReadThenOverwritten);
    assert_eq!(site.theirs.map(|t| t.op), Some(Op::Write));
}

#[test]
fn update_reads_and_writes_in_one_call() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    let result: Result<(), Abort> = a.try_once(0, |tx| {
        x.update(tx, |v| *v += 1)?;
        b.atomically(0, |btx| x.update(btx, |v| *v += 1));
        Ok(())
    });
    // update() read x, so B's commit makes A's commit fail validation.
    assert_eq!(result.unwrap_err().kind(), ConflictKind::ReadThenOverwritten);
}

#[test]
fn worker_handles_are_exclusive_and_checked() {
    let stm = engine(2);
    let w0 = stm.worker(0).unwrap();
    assert_eq!(stm.worker(0).err(), Some(StmError::WorkerTaken { index: 0 }));
    assert_eq!(stm.worker(2).err(), Some(StmError::NoSuchWorker { index: 2, workers: 2 }));
    drop(w0);
    assert!(stm.worker(0).is_ok());
    assert!(matches!(Stm::new(0), Err(StmError::WorkerCount { requested: 0, .. })));
}

#[test]
#[should_panic(expected = "belongs to another Stm")]
fn objects_of_another_engine_are_refused() {
    let stm = engine(1);
    let other = engine(1);
    let x = counter(&other, 0, 0);
    let mut w = stm.worker(0).unwrap();
    w.atomically(0, |tx| x.read(tx));
}

#[test]
fn registry_names_structures_and_their_creation_line() {
    let stm = engine(1);
    let line = line!() + 1;
    let id = stm.register(StructureKind::Map, "mac_table");
    let info = stm.structure(id).unwrap();
    assert_eq!((info.name.as_str(), info.kind, info.created_at.line()), ("mac_table", StructureKind::Map, line));
}

#[test]
fn get_mut_sees_the_newest_value_outside_transactions() {
    let stm = engine(1);
    let mut x = counter(&stm, 0, 0);
    {
        let mut w = stm.worker(0).unwrap();
        w.atomically(0, |tx| x.write(tx, 42));
    }
    assert_eq!(*x.get_mut(), 42);
}

#[test]
fn stats_count_accesses_of_every_attempt_commit_and_aborted_time_and_retries() {
    let stm = engine(2);
    let x = counter(&stm, 0, 0);
    let y = counter(&stm, 1, 0);
    let mut a = stm.worker(0).unwrap();
    let mut b = stm.worker(1).unwrap();
    // Read-only: 2 reads, no commit time (nothing to commit).
    a.atomically(0, |tx| Ok(x.read(tx)? + y.read(tx)?));
    let s = a.stats();
    assert_eq!((s.reads, s.writes, s.commit_ns, s.aborted_ns, s.max_retries), (2, 0, 0, 0, 0));
    // Aborts twice (B commits to x after each of A's first two reads of
    // it), then commits: each attempt reads x and y (update) and writes y.
    let mut attempts = 0;
    a.atomically(0, |tx| {
        attempts += 1;
        let v = x.read(tx)?;
        if attempts <= 2 {
            b.atomically(0, |btx| x.update(btx, |v| *v += 1));
        }
        y.update(tx, |w| *w += v)
    });
    assert_eq!(attempts, 3);
    let s = a.stats().clone();
    assert_eq!((s.commits, s.aborts, s.max_retries), (2, 2, 2));
    assert_eq!((s.reads, s.writes), (2 + 3 * 2, 3), "aborted attempts count too");
    assert!(s.aborted_ns > 0, "two attempts were thrown away, each around B's whole transaction");
    assert!(s.commit_ns > 0, "the third attempt committed a write (and the first two failed in commit)");
    // A later transaction that commits at once does not lower the maximum.
    a.atomically(0, |tx| x.update(tx, |v| *v += 1));
    assert_eq!(a.stats().max_retries, 2);
    // B: two writing commits, no aborts.
    let sb = b.stats().clone();
    assert_eq!((sb.reads, sb.writes, sb.aborts, sb.aborted_ns, sb.max_retries), (2, 2, 0, 0, 0));
    assert!(sb.commit_ns > 0);
    // merge sums the counts and times and keeps the larger maximum.
    let mut total = sb.clone();
    total.merge(a.stats());
    let sa = a.stats();
    assert_eq!((total.reads, total.writes), (sa.reads + sb.reads, sa.writes + sb.writes));
    assert_eq!((total.commit_ns, total.aborted_ns), (sa.commit_ns + sb.commit_ns, sa.aborted_ns + sb.aborted_ns));
    assert_eq!(total.max_retries, 2);
    let mut other_order = a.stats().clone();
    other_order.merge(&sb);
    assert_eq!(other_order.max_retries, 2);
}
