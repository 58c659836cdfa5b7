//! An aborted batch leaves no trace: set states, new sets and output are
//! rolled back, and the retry sees the original packet bytes.

use std::sync::Mutex;

use super::*;
use crate::runtime::NewSet;
use crate::stm::{Abort, Stm, StructureKind, TObj};

/// On the first attempt of the batch, a handler lets another worker commit
/// to the object it read, so the attempt aborts at its write.
struct Interfered<'s> {
    shared: &'s TObj<u64>,
    other: Mutex<Option<Worker<'s>>>,
    attempts: Mutex<u32>,
}

impl ParallelNf for Interfered<'_> {
    type SetState = u32;

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<u32>>, Abort> {
        packet.data_mut()[0] += 1;
        ctx.send(packet, 1);
        Ok(Some(NewSet { state: 1, idle_timeout_ns: 1_000 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, count: &mut u32, packet: &mut Packet) -> Result<(), Abort> {
        *count += 1;
        packet.data_mut()[0] += 1;
        let seen = self.shared.read(ctx.tx())?;
        let mut attempts = self.attempts.lock().unwrap();
        *attempts += 1;
        if *attempts == 1 {
            let mut other = self.other.lock().unwrap();
            other.as_mut().unwrap().atomically(0, |tx| self.shared.write(tx, 100));
        }
        self.shared.write(ctx.tx(), seen + 1)?;
        ctx.send(packet, 1);
        Ok(())
    }
}

#[test]
fn an_aborted_batch_is_rolled_back_and_retried_from_the_original_packets() {
    let stm = Stm::new(2).unwrap();
    let id = stm.register(StructureKind::Object, "shared");
    let shared = TObj::new(&stm, id, 0, 0u64);
    let nf = Interfered { shared: &shared, other: Mutex::new(Some(stm.worker(1).unwrap())), attempts: Mutex::new(0) };
    let mut worker = WorkerLoop::new(&nf, stm.worker(0).unwrap(), 2, None);
    let key = crate::packet_set::PacketSetDef::new(vec![crate::packet_set::PortRule {
        port: 0,
        protocol: None,
        fields: vec![crate::packet_set::Field::SrcMac],
        symmetric: false,
    }])
    .unwrap()
    .classify(0, &[0u8; 60]);
    assert!(key.is_some());
    let item = |t| BatchItem { key, packet: Packet::new(0, t, vec![0u8; 60]) };
    // One batch: the first packet creates the set, the second one aborts
    // the first attempt and is retried.
    worker.run_batch(&[item(0), item(1)]);
    let report = worker.finish();
    assert_eq!(report.stats.aborts, 1);
    assert_eq!(report.stats.commits, 1);
    assert_eq!(*nf.attempts.lock().unwrap(), 2);
    // Output of the committed attempt only, from the original bytes.
    assert_eq!(report.outputs.len(), 2);
    assert!(report.outputs.iter().all(|o| o.data[0] == 1));
    assert_eq!(report.live_sets, 1);
    drop(nf.other.lock().unwrap().take());
    let mut check = stm.worker(1).unwrap();
    assert_eq!(check.atomically(0, |tx| nf.shared.read(tx)), 101);
}

/// Emits one byte when a set expires (its state) and when the timer fires.
struct Timed;

impl ParallelNf for Timed {
    type SetState = u8;

    fn first_packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _packet: &mut Packet) -> Result<Option<NewSet<u8>>, Abort> {
        Ok(Some(NewSet { state: 7, idle_timeout_ns: 100 }))
    }

    fn packet<'a>(&'a self, _ctx: &mut Ctx<'_, 'a>, _state: &mut u8, _packet: &mut Packet) -> Result<(), Abort> {
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, state: &u8) -> Result<(), Abort> {
        let now = ctx.now_ns();
        ctx.emit(0, now, &[*state]);
        Ok(())
    }

    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        let now = ctx.now_ns();
        ctx.emit(0, now, &[1]);
        Ok(())
    }
}

fn mac_key() -> Option<SetKey> {
    crate::packet_set::PacketSetDef::new(vec![crate::packet_set::PortRule {
        port: 0,
        protocol: None,
        fields: vec![crate::packet_set::Field::SrcMac],
        symmetric: false,
    }])
    .unwrap()
    .classify(0, &[0u8; 60])
}

#[test]
fn a_tick_runs_the_expiries_due_and_no_transaction_when_none_is() {
    let stm = Stm::new(1).unwrap();
    let mut worker = WorkerLoop::new(&Timed, stm.worker(0).unwrap(), 1, None);
    assert!(!worker.has_timers());
    worker.run_batch(&[BatchItem { key: mac_key(), packet: Packet::new(0, 10, vec![0u8; 60]) }]);
    assert!(worker.has_timers(), "a live set can expire");
    worker.run_tick(50);
    assert_eq!(worker.stats().commits, 1, "nothing due: no transaction");
    worker.run_tick(110);
    assert_eq!(worker.stats().commits, 2);
    let mut out = Vec::new();
    worker.take_outputs(&mut out);
    assert_eq!(out, vec![OutputPacket { port: 0, timestamp_ns: 110, data: vec![7] }]);
    assert!(!worker.has_timers());
    let report = worker.finish();
    assert_eq!((report.packets, report.batches, report.live_sets), (1, 1, 0), "a tick is not a batch");
    assert!(report.outputs.is_empty(), "taken already");
}

#[test]
fn ticks_drive_the_periodic_timer_without_packets() {
    let stm = Stm::new(1).unwrap();
    let mut worker = WorkerLoop::new(&Timed, stm.worker(0).unwrap(), 1, Some(PeriodicTimer::new(100)));
    assert!(worker.has_timers());
    worker.run_tick(0);
    worker.run_tick(99);
    worker.run_tick(100);
    worker.run_tick(150);
    worker.run_tick(200);
    let report = worker.finish();
    let at: Vec<u64> = report.outputs.iter().map(|o| o.timestamp_ns).collect();
    assert_eq!(at, vec![100, 200], "armed at the first tick, then every 100 ns");
    assert_eq!(report.stats.commits, 2);
}

/// Labels what happened to a set in its output: `F` first packet, `P`
/// later packet, `E` expiry; each with the packet's (or the expiry's)
/// time. Idle timeout 100 ns.
struct Labelled;

impl ParallelNf for Labelled {
    type SetState = ();

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
        ctx.emit(0, packet.timestamp_ns(), b"F");
        Ok(Some(NewSet { state: (), idle_timeout_ns: 100 }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &mut (), packet: &mut Packet) -> Result<(), Abort> {
        ctx.emit(0, packet.timestamp_ns(), b"P");
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &()) -> Result<(), Abort> {
        let now = ctx.now_ns();
        ctx.emit(0, now, b"E");
        Ok(())
    }
}

fn labels(outputs: &[OutputPacket]) -> Vec<(u64, char)> {
    outputs.iter().map(|o| (o.timestamp_ns, o.data[0] as char)).collect()
}

#[test]
fn a_set_idle_past_its_timeout_within_a_batch_expires_before_its_next_packet() {
    let item = |t| BatchItem { key: mac_key(), packet: Packet::new(0, t, vec![0u8; 60]) };
    let stm = Stm::new(1).unwrap();
    // One batch: created at 0, seen at 50 (deadline 150), idle until 200
    // (expired), seen at 200 (a new set, deadline 300); then 260 (new
    // deadline 360) is a packet of that set again.
    let mut worker = WorkerLoop::new(&Labelled, stm.worker(0).unwrap(), 1, None);
    worker.run_batch(&[item(0), item(50), item(200), item(260)]);
    let mut out = Vec::new();
    worker.take_outputs(&mut out);
    let expected = vec![(0, 'F'), (50, 'P'), (200, 'E'), (200, 'F'), (260, 'P')];
    assert_eq!(labels(&out), expected);
    assert_eq!(worker.stats().commits, 1, "one transaction");
    // The same packets one per batch give the same result.
    let stm = Stm::new(1).unwrap();
    let mut single = WorkerLoop::new(&Labelled, stm.worker(0).unwrap(), 1, None);
    for t in [0, 50, 200, 260] {
        single.run_batch(&[item(t)]);
    }
    let mut one_by_one = Vec::new();
    single.take_outputs(&mut one_by_one);
    assert_eq!(labels(&one_by_one), expected);
    // The replaced set has one timer: it expires once, at its deadline.
    worker.run_tick(359);
    worker.run_tick(360);
    worker.run_tick(1_000);
    out.clear();
    worker.take_outputs(&mut out);
    assert_eq!(labels(&out), vec![(360, 'E')]);
    let report = worker.finish();
    assert_eq!((report.live_sets, report.stats.commits), (0, 2));
}

#[test]
fn a_set_expired_mid_batch_and_not_started_again_is_gone() {
    /// Starts a set only from packets whose first byte is 1.
    struct Picky;
    impl ParallelNf for Picky {
        type SetState = ();
        fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
            ctx.emit(0, packet.timestamp_ns(), b"F");
            Ok((packet.data()[0] == 1).then_some(NewSet { state: (), idle_timeout_ns: 100 }))
        }
        fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &mut (), packet: &mut Packet) -> Result<(), Abort> {
            ctx.emit(0, packet.timestamp_ns(), b"P");
            Ok(())
        }
        fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &()) -> Result<(), Abort> {
            let now = ctx.now_ns();
            ctx.emit(0, now, b"E");
            Ok(())
        }
    }
    let item = |t, first| {
        let mut data = vec![0u8; 60];
        data[0] = first;
        BatchItem { key: mac_key(), packet: Packet::new(0, t, data) }
    };
    let stm = Stm::new(1).unwrap();
    let mut worker = WorkerLoop::new(&Picky, stm.worker(0).unwrap(), 1, None);
    worker.run_batch(&[item(0, 1), item(150, 0), item(160, 1)]);
    worker.run_tick(10_000);
    let report = worker.finish();
    assert_eq!(labels(&report.outputs), vec![(0, 'F'), (150, 'E'), (150, 'F'), (160, 'F'), (10_000, 'E')]);
    assert_eq!(report.live_sets, 0);
}
