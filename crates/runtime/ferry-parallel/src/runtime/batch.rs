//! One worker's processing: a receive batch runs as one transaction.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use super::nf::{Ctx, OutputBuffer, OutputPacket, Packet, ParallelNf};
use super::set_table::{LiveSet, SetTable};
use crate::heap::HeapUse;
use crate::packet_set::SetKey;
use crate::stm::{TxStats, Worker};
use crate::sync::Stamp;

/// A packet and its set (`None`: orphan), as the dispatcher hands it over.
pub(crate) struct BatchItem {
    pub(crate) key: Option<SetKey>,
    pub(crate) packet: Packet,
}

/// What the running attempt did to one set. Attempts work on copies, so an
/// aborted attempt leaves the set table untouched.
struct SetWork<S> {
    /// `None`: not live (never was, or expired in this batch).
    state: Option<S>,
    /// The set's last packet (before this batch: the table's).
    last_seen_ns: u64,
    /// Of the live state.
    idle_timeout_ns: u64,
    /// `first_packet` made the set live in this batch: after the commit it
    /// replaces whatever the table has for the key.
    created: bool,
}

impl<S> SetWork<S> {
    /// Whether the live state expired before a packet at `at` (idle for
    /// its whole timeout, as [`SetTable::due`] counts it).
    fn expired_by(&self, at: u64) -> bool {
        self.state.is_some() && self.last_seen_ns.saturating_add(self.idle_timeout_ns) <= at
    }
}

/// Fires every `period_ns` of packet time, at most once per batch.
pub(crate) struct PeriodicTimer {
    period_ns: u64,
    next_at_ns: Option<u64>,
}

impl PeriodicTimer {
    pub(crate) fn new(period_ns: u64) -> PeriodicTimer {
        PeriodicTimer { period_ns, next_at_ns: None }
    }

    fn due(&mut self, now_ns: u64) -> bool {
        match self.next_at_ns {
            None => {
                self.next_at_ns = Some(now_ns.saturating_add(self.period_ns));
                false
            }
            Some(at) if now_ns >= at => {
                self.next_at_ns = Some(now_ns.saturating_add(self.period_ns));
                true
            }
            Some(_) => false,
        }
    }
}

/// Everything one worker thread owns.
pub(crate) struct WorkerLoop<'a, N: ParallelNf> {
    nf: &'a N,
    worker: Worker<'a>,
    sets: SetTable<N::SetState>,
    periodic: Option<PeriodicTimer>,
    ports: u16,
    outputs: Vec<OutputPacket>,
    keep_outputs: bool,
    output_packets: u64,
    output_bytes: u64,
    busy_ns: u64,
    packets: u64,
    batches: u64,
    scratch: FxHashMap<SetKey, SetWork<N::SetState>>,
    pending: OutputBuffer,
    work_packet: Packet,
}

/// What a worker did over a run.
#[derive(Debug, Clone)]
pub struct WorkerReport {
    pub packets: u64,
    pub batches: u64,
    /// Sets still live at the end.
    pub live_sets: usize,
    pub stats: TxStats,
    /// Committed output, in commit order (empty when the run only counted
    /// it: [`OutputMode::Count`]).
    pub outputs: Vec<OutputPacket>,
    /// Committed output packets and their bytes, in either mode.
    pub output_packets: u64,
    pub output_bytes: u64,
    /// Time spent running batches and ticks (from the expiry check to
    /// the released output): the time [`TxStats::runtime_ns`] is a share of.
    pub busy_ns: u64,
    /// The worker thread's heap growth while it processed its packets (set
    /// table, installed versions, buffers), when the binary counts heap
    /// bytes ([`crate::heap`]) and the run measured it
    /// ([`super::run_trace_presplit`]).
    pub heap: Option<HeapUse>,
}

/// What a worker does with committed output in a trace run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// Keep every packet (to compare runs, or write a pcap).
    #[default]
    Keep,
    /// Count packets and bytes and reuse the buffers: what a benchmark
    /// wants, where thousands of retained packets would measure the memory
    /// allocator rather than the NF.
    Count,
}

impl<'a, N: ParallelNf> WorkerLoop<'a, N> {
    pub(crate) fn new(nf: &'a N, worker: Worker<'a>, ports: u16, periodic: Option<PeriodicTimer>) -> Self {
        WorkerLoop {
            nf,
            worker,
            sets: SetTable::new(),
            periodic,
            ports,
            outputs: Vec::new(),
            keep_outputs: true,
            output_packets: 0,
            output_bytes: 0,
            busy_ns: 0,
            packets: 0,
            batches: 0,
            scratch: FxHashMap::default(),
            pending: OutputBuffer::default(),
            work_packet: Packet::new(0, 0, Vec::new()),
        }
    }

    /// Runs the handlers of `batch` in one transaction, retried until it
    /// commits; then applies set changes and releases the output. Within
    /// the transaction: the expiries and the periodic timer due at the
    /// first packet's time, then each packet, at its own time. A packet
    /// whose set has been idle for its timeout by the packet's time (its
    /// deadline passed within the batch) first expires the set, and is then
    /// the first packet of a new set: what a set's packets see does not
    /// depend on where batches start, so on how many workers share the
    /// traffic.
    pub(crate) fn run_batch(&mut self, batch: &[BatchItem]) {
        let Some(first) = batch.first() else { return };
        self.run_at(first.packet.timestamp_ns(), batch);
    }

    fn run_at(&mut self, now_ns: u64, batch: &[BatchItem]) {
        let started = Stamp::now();
        self.run_timed(now_ns, batch);
        self.busy_ns += started.nanos_until(Stamp::now());
    }

    fn run_timed(&mut self, now_ns: u64, batch: &[BatchItem]) {
        let due = self.sets.due(now_ns);
        let periodic_due = self.periodic.as_mut().is_some_and(|p| p.due(now_ns));
        if batch.is_empty() && due.is_empty() && !periodic_due {
            return;
        }
        let (nf, sets, ports) = (self.nf, &self.sets, self.ports);
        let (scratch, pending, work) = (&mut self.scratch, &mut self.pending, &mut self.work_packet);
        self.worker.atomically(now_ns, |tx| {
            scratch.clear();
            pending.reset();
            let mut ctx = Ctx::new(tx, pending, ports);
            for key in &due {
                if let Some(set) = sets.get(key) {
                    nf.expired(&mut ctx, &set.state)?;
                }
                let gone = SetWork { state: None, last_seen_ns: now_ns, idle_timeout_ns: 0, created: false };
                scratch.insert(*key, gone);
            }
            if periodic_due {
                nf.periodic(&mut ctx)?;
            }
            for item in batch {
                let at = item.packet.timestamp_ns();
                ctx.tx().set_now_ns(at);
                work.copy_from(&item.packet);
                let Some(key) = item.key else {
                    nf.orphan(&mut ctx, work)?;
                    continue;
                };
                let set = match scratch.entry(key) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(v) => v.insert(match sets.get(&key) {
                        Some(live) => SetWork {
                            state: Some(live.state.clone()),
                            last_seen_ns: live.last_seen_ns,
                            idle_timeout_ns: live.idle_timeout_ns,
                            created: false,
                        },
                        None => SetWork { state: None, last_seen_ns: at, idle_timeout_ns: 0, created: false },
                    }),
                };
                if set.expired_by(at) {
                    if let Some(state) = set.state.take() {
                        nf.expired(&mut ctx, &state)?;
                    }
                    set.created = false;
                }
                set.last_seen_ns = at;
                match &mut set.state {
                    Some(state) => nf.packet(&mut ctx, state, work)?,
                    None => {
                        if let Some(new) = nf.first_packet(&mut ctx, work)? {
                            set.state = Some(new.state);
                            set.idle_timeout_ns = new.idle_timeout_ns;
                            set.created = true;
                        }
                    }
                }
            }
            Ok(())
        });
        for (key, work) in self.scratch.drain() {
            match work.state {
                Some(state) if work.created => self.sets.insert(
                    key,
                    LiveSet { state, last_seen_ns: work.last_seen_ns, idle_timeout_ns: work.idle_timeout_ns },
                ),
                Some(state) => self.sets.touch(&key, state, work.last_seen_ns),
                None => self.sets.remove(&key),
            }
        }
        for packet in &self.pending.packets {
            self.output_packets += 1;
            self.output_bytes += packet.data.len() as u64;
        }
        if self.keep_outputs {
            self.outputs.append(&mut self.pending.packets);
        } else {
            self.pending.reset();
        }
        if !batch.is_empty() {
            self.packets += batch.len() as u64;
            self.batches += 1;
        }
    }

    pub(crate) fn set_output_mode(&mut self, mode: OutputMode) {
        self.keep_outputs = mode == OutputMode::Keep;
    }

    pub(crate) fn finish(mut self) -> WorkerReport {
        WorkerReport {
            packets: self.packets,
            batches: self.batches,
            live_sets: self.sets.len(),
            stats: self.worker.take_stats(),
            outputs: self.outputs,
            output_packets: self.output_packets,
            output_bytes: self.output_bytes,
            busy_ns: self.busy_ns,
            heap: None,
        }
    }
}

/// What the live mode (`crate::live`) adds: time without packets, and
/// output taken batch by batch.
#[cfg(not(loom))]
impl<N: ParallelNf> WorkerLoop<'_, N> {
    /// Time passed without packets (live mode): the expiries and the
    /// periodic timer due at `now_ns`, as one transaction; nothing at all
    /// when none is due.
    pub(crate) fn run_tick(&mut self, now_ns: u64) {
        self.run_at(now_ns, &[]);
    }

    /// True when time alone can make work for this worker (live sets that
    /// may expire, or a periodic timer), so it needs ticks while idle.
    pub(crate) fn has_timers(&self) -> bool {
        self.periodic.is_some() || self.sets.len() > 0
    }

    pub(crate) fn stats(&self) -> &TxStats {
        self.worker.stats()
    }

    /// Moves the committed output so far to the end of `into`.
    pub(crate) fn take_outputs(&mut self, into: &mut Vec<OutputPacket>) {
        into.append(&mut self.outputs);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
