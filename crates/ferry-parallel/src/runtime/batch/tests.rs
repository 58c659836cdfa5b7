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
