//! Trace-driven runs: packets from memory (a pcap read into memory, or a
//! generated trace) through the software dispatcher to worker threads.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::{self, ScopedJoinHandle};
use std::time::Duration;

use ferry_wire::rss::RSS_TABLE_SIZE;

use super::batch::{BatchItem, OutputMode, PeriodicTimer, WorkerLoop, WorkerReport};
use super::nf::{Ctx, OutputBuffer, OutputPacket, Packet, ParallelNf};
use super::pinned::{own_copy, presplit, run_pinned};
use super::RuntimeError;
use crate::heap;
use crate::packet_set::{PacketSetDef, SetKey};
use crate::stm::{Abort, LeaveOnDrop, Lockstep, Stm, TxStats};

/// Batches queued per worker before the dispatcher waits (bounds memory
/// when a worker falls behind, as a NIC queue would).
const QUEUED_BATCHES: usize = 8;

/// How to run an NF over a trace.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// Worker threads; must equal the engine's worker count.
    pub workers: usize,
    /// Packets per receive batch, i.e. per transaction (NFOS: 32).
    pub batch_size: usize,
    /// Ports the NF has (for `flood`).
    pub ports: u16,
    /// Period of the periodic handler in packet time, if any.
    pub periodic_ns: Option<u64>,
    pub packet_sets: PacketSetDef,
}

/// The worker a packet set goes to: its Toeplitz hash through a 128-entry
/// indirection table filled round-robin, as a NIC spreads queues.
pub fn worker_of(key: &SetKey, workers: usize) -> usize {
    ((key.rss_hash() % RSS_TABLE_SIZE) as usize) % workers
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct TraceReport {
    pub workers: Vec<WorkerReport>,
    /// Output of the init and exit handlers.
    pub init_outputs: Vec<OutputPacket>,
    pub exit_outputs: Vec<OutputPacket>,
}

impl TraceReport {
    /// Transaction counts of all workers together.
    pub fn total_stats(&self) -> TxStats {
        let mut total = TxStats::default();
        for w in &self.workers {
            total.merge(&w.stats);
        }
        total
    }

    /// Busiest worker's packets over the mean (1.0 is perfect balance;
    /// NFOS suggests finer packet sets above 1.5).
    pub fn load_imbalance(&self) -> f64 {
        let total: u64 = self.workers.iter().map(|w| w.packets).sum();
        let max = self.workers.iter().map(|w| w.packets).max().unwrap_or(0);
        if total == 0 {
            1.0
        } else {
            max as f64 * self.workers.len() as f64 / total as f64
        }
    }

    /// Every committed output packet of every worker.
    pub fn all_outputs(&self) -> impl Iterator<Item = &OutputPacket> {
        self.init_outputs.iter().chain(self.workers.iter().flat_map(|w| w.outputs.iter())).chain(&self.exit_outputs)
    }
}

/// Runs `nf` over `packets` on `config.workers` threads: init on worker 0,
/// then every packet (dispatched by packet set; orphans round-robin), then
/// exit on worker 0.
pub fn run_trace<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &TraceConfig,
    packets: impl IntoIterator<Item = Packet>,
) -> Result<TraceReport, RuntimeError> {
    validate(stm, config)?;
    let init_outputs = run_alone(stm, config, |ctx| nf.init(ctx))?;
    let workers = thread::scope(|scope| {
        let mut senders = Vec::with_capacity(config.workers);
        let mut handles = Vec::with_capacity(config.workers);
        for index in 0..config.workers {
            let (sender, receiver) = sync_channel::<Vec<BatchItem>>(QUEUED_BATCHES);
            senders.push(sender);
            handles.push(scope.spawn(move || worker_thread(stm, nf, config, index, receiver)));
        }
        // A worker that died is reported when it is joined.
        dispatch(config, packets, |target, batch| {
            let _ = senders[target].send(batch);
        });
        drop(senders);
        join_workers(handles)
    })?;
    let exit_outputs = run_alone(stm, config, |ctx| nf.exit(ctx))?;
    Ok(TraceReport { workers, init_outputs, exit_outputs })
}

/// As [`run_trace`], but the whole trace is classified and cut into each
/// worker's batches before the workers start, as a NIC's RSS would have
/// spread it over receive queues. The workers then run with no dispatcher
/// thread competing for CPUs. The returned duration is their processing
/// alone, for benchmarks: from the moment all of them are set up and
/// released together to the end of the last one's last batch. Starting
/// threads and tearing down their set tables is not packet processing (a
/// live NF's workers are up before traffic comes), and on 2 vCPUs thread
/// start-up alone varied by 2 ms, a few percent of a run. `output` says
/// whether workers keep their committed output or only count it
/// ([`WorkerReport::output_packets`]): a benchmark counts, so that it
/// measures the NF rather than the memory allocator. Each worker's heap
/// growth over its packets is in [`WorkerReport::heap`] when the binary
/// counts heap bytes.
pub fn run_trace_presplit<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &TraceConfig,
    packets: impl IntoIterator<Item = Packet>,
    output: OutputMode,
) -> Result<(TraceReport, Duration), RuntimeError> {
    validate(stm, config)?;
    let queues = presplit(config, packets);
    let init_outputs = run_alone(stm, config, |ctx| nf.init(ctx))?;
    let (workers, elapsed) = run_pinned(&queues, |index, batches, start| {
        let periodic = config.periodic_ns.map(PeriodicTimer::new);
        let worker = stm.worker(index);
        let batches = own_copy(batches);
        // Every worker crosses the start line, even one whose setup failed,
        // or the others would wait there forever.
        let started = start.cross();
        let heap_mark = heap::mark();
        let mut worker = WorkerLoop::new(nf, worker?, config.ports, periodic);
        worker.set_output_mode(output);
        for batch in &batches {
            worker.run_batch(batch);
        }
        let ended = start.now();
        // Before `finish`, while the set table is still the worker's.
        let used = heap_mark.map(|mark| mark.usage());
        Ok((WorkerReport { heap: used, ..worker.finish() }, started, ended))
    })?;
    // The dispatcher's packets are freed by this thread, whose allocator
    // arena they are from (freeing them from the workers would serialise
    // them on that arena's lock).
    drop(queues);
    let exit_outputs = run_alone(stm, config, |ctx| nf.exit(ctx))?;
    Ok((TraceReport { workers, init_outputs, exit_outputs }, elapsed))
}

/// As [`run_trace`], but the workers' transactions interleave in a fixed
/// order ([`Lockstep`]): each round, every worker runs the body of its next
/// transaction and then tries to commit, one worker at a time, and those
/// whose commit failed retry within the round until each has committed.
/// Every pair of transactions in a round overlaps, so the run shows the
/// most contention the NF's sharing can cause, and its outputs, aborts and
/// profile are the same on every run and under any load. The trace is cut into each
/// worker's batches first ([`run_trace_presplit`]): a worker's turns must
/// not wait on a dispatcher. Workers take turns, so this measures
/// contention, never speed.
pub fn run_trace_lockstep<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &TraceConfig,
    packets: impl IntoIterator<Item = Packet>,
) -> Result<TraceReport, RuntimeError> {
    validate(stm, config)?;
    let queues = presplit(config, packets);
    let init_outputs = run_alone(stm, config, |ctx| nf.init(ctx))?;
    let lockstep = Arc::new(Lockstep::new(config.workers));
    let workers = thread::scope(|scope| {
        let handles: Vec<_> = queues
            .iter()
            .enumerate()
            .map(|(index, batches)| {
                let lockstep = Arc::clone(&lockstep);
                scope.spawn(move || {
                    // However this thread ends, the others stop waiting for it.
                    let _leave = LeaveOnDrop { lockstep: &lockstep, worker: index };
                    let mut worker = stm.worker(index)?;
                    worker.set_lockstep(Arc::clone(&lockstep));
                    let periodic = config.periodic_ns.map(PeriodicTimer::new);
                    let mut worker = WorkerLoop::new(nf, worker, config.ports, periodic);
                    for batch in batches {
                        worker.run_batch(batch);
                    }
                    Ok(worker.finish())
                })
            })
            .collect();
        join_workers(handles)
    })?;
    let exit_outputs = run_alone(stm, config, |ctx| nf.exit(ctx))?;
    Ok(TraceReport { workers, init_outputs, exit_outputs })
}

/// Joins the worker threads in order; a panicked one is an error.
fn join_workers(
    handles: Vec<ScopedJoinHandle<'_, Result<WorkerReport, RuntimeError>>>,
) -> Result<Vec<WorkerReport>, RuntimeError> {
    handles
        .into_iter()
        .enumerate()
        .map(|(worker, h)| h.join().map_err(|_| RuntimeError::WorkerPanicked { worker })?)
        .collect()
}

pub(crate) fn validate(stm: &Stm, config: &TraceConfig) -> Result<(), RuntimeError> {
    if config.workers != stm.workers() {
        return Err(RuntimeError::WorkerCount { config: config.workers, engine: stm.workers() });
    }
    check_config(config)
}

/// What a run's configuration needs whether or not an engine runs it.
pub(super) fn check_config(config: &TraceConfig) -> Result<(), RuntimeError> {
    if config.workers == 0 {
        return Err(RuntimeError::Config { field: "workers", reason: "must be at least 1" });
    }
    if config.batch_size == 0 {
        return Err(RuntimeError::Config { field: "batch_size", reason: "must be at least 1" });
    }
    if config.periodic_ns == Some(0) {
        return Err(RuntimeError::Config { field: "periodic_ns", reason: "must be at least 1" });
    }
    Ok(())
}

/// Runs one handler as a transaction on worker 0 while no other worker
/// runs (init, exit).
pub(crate) fn run_alone<'a>(
    stm: &'a Stm,
    config: &TraceConfig,
    mut handler: impl FnMut(&mut Ctx<'_, 'a>) -> Result<(), Abort>,
) -> Result<Vec<OutputPacket>, RuntimeError> {
    let mut worker = stm.worker(0)?;
    let mut out = OutputBuffer::default();
    worker.atomically(0, |tx| {
        out.reset();
        handler(&mut Ctx::new(tx, &mut out, config.ports))
    });
    Ok(out.packets)
}

fn worker_thread<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &TraceConfig,
    index: usize,
    batches: Receiver<Vec<BatchItem>>,
) -> Result<WorkerReport, RuntimeError> {
    let periodic = config.periodic_ns.map(PeriodicTimer::new);
    let mut worker = WorkerLoop::new(nf, stm.worker(index)?, config.ports, periodic);
    for batch in batches {
        worker.run_batch(&batch);
    }
    Ok(worker.finish())
}

/// The software dispatcher: classifies each packet, gives its set's worker
/// and orphans round-robin, in batches of `batch_size`, to `emit(worker,
/// batch)`.
pub(super) fn dispatch(
    config: &TraceConfig,
    packets: impl IntoIterator<Item = Packet>,
    mut emit: impl FnMut(usize, Vec<BatchItem>),
) {
    let workers = config.workers;
    let mut pending: Vec<Vec<BatchItem>> = (0..workers).map(|_| Vec::with_capacity(config.batch_size)).collect();
    let mut next_orphan_worker = 0;
    for packet in packets {
        let key = config.packet_sets.classify(packet.port(), packet.data());
        let target = match &key {
            Some(key) => worker_of(key, workers),
            None => {
                next_orphan_worker = (next_orphan_worker + 1) % workers;
                next_orphan_worker
            }
        };
        pending[target].push(BatchItem { key, packet });
        if pending[target].len() == config.batch_size {
            emit(target, std::mem::replace(&mut pending[target], Vec::with_capacity(config.batch_size)));
        }
    }
    for (target, batch) in pending.into_iter().enumerate() {
        if !batch.is_empty() {
            emit(target, batch);
        }
    }
}
