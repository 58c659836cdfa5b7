//! Live mode: a parallel NF as one NF of a ferryd chain, fed by AF_XDP
//! ports and the rings of other NFs, like any NF written with the SDK.
//!
//! ```text
//!  upstream (ring / ports)                                   out-links
//!        |                                                       ^
//!  chain thread (the NF's single ferry thread, `threads: 1`)     |
//!    recv_burst -> timestamp (CLOCK_MONOTONIC, once per burst)   |
//!    -> set key (PacketSetDef) -> copy the bytes, free the frame |
//!    -> batch for worker_of(key, N) (orphans round-robin)        |
//!    -> bounded queue ---------> worker i: WorkerLoop::run_batch |
//!                                 (one transaction per batch,   |
//!                                  output released at commit)    |
//!    <- done queue (committed output, spent buffers) <--------   |
//!    per output: alloc a frame, copy, send(out-link = port) -----+
//! ```
//!
//! * **Threads.** The calling thread owns the [`NfThread`] (its frames are
//!   `!Send`, so only it touches them); `N` worker threads each run a
//!   `WorkerLoop` (`runtime/batch.rs`), the same code the trace runner
//!   uses. A worker that hands back work wakes the chain thread with the
//!   SDK's [`Waker`], which makes an idle `recv_burst` return.
//! * **Copies.** A frame's bytes are copied once into a buffer on receive
//!   (the frame is freed at once: the SDK counts it as `drop_nf`, so that
//!   counter equals the frames received), and each committed output is
//!   copied once into a fresh frame ([`NfThread::alloc`]). Buffers come back
//!   with the worker's completion and are reused.
//! * **Ports.** A frame that arrived on the thread's `i`-th AF_XDP socket
//!   (ports in order of first mention in the chain file's links) is NF
//!   port `i`; a frame from another NF's ring is port
//!   [`LiveConfig::ring_port`]. Output on NF port `p` goes to out-link `p`
//!   (the NF's `p`-th `from:` line); an output for a port with no out-link
//!   is counted (`bad_port`) and not sent.
//! * **Batches.** A receive burst takes up to `batch_size x workers`
//!   packets; each worker's share goes out in batches of at most
//!   `batch_size`, the last (partial) one at the end of the burst, so no
//!   packet waits for more traffic. One batch is one transaction.
//! * **Order.** All packets of a set go to one worker, through FIFO queues,
//!   and its outputs come back through a FIFO channel: a set's (a flow's)
//!   packets leave in arrival order. Orphans have no order guarantee.
//! * **Backpressure.** Worker queues hold `queued_batches` batches. When
//!   one is full the batch waits in the chain thread and the chain thread
//!   stops receiving (it keeps sending completed output), so its ring
//!   fills and ferry's backpressure reaches upstream; from a port the
//!   kernel drops at the socket. When a downstream ring is full,
//!   `recv_burst` blocks the chain thread and the same happens. Packets in
//!   the NF (received, and not yet sent or dropped) are bounded: per
//!   worker `queued_batches` queued batches, one in work and at most
//!   `queued_batches + 2` completed ones whose output the chain thread has
//!   not handled yet (the completion channel's share), plus one held-back
//!   burst: `workers x (2 queued_batches + 3) x batch_size + workers x
//!   batch_size` in all. The `in_flight_max` counter shows the most seen,
//!   typically `workers x (queued_batches + 1) x batch_size` plus a burst.
//! * **Time.** Packets carry CLOCK_MONOTONIC at receive. Expiries and the
//!   periodic handler run at the start of each batch, at its first
//!   packet's time; a worker with live sets or a periodic timer that gets
//!   no batch for `tick_ns` asks the chain thread for a tick, which comes
//!   through the same queue (so a worker's clock never goes backwards) and
//!   runs the expiries and timer due as one transaction.
//! * **Counters.** Published as the NF's ferry counters (`ferry nf list`,
//!   `chain status`): the chain thread's [`COUNTERS`], then the NF's own
//!   ([`ParallelNf::named_counters`], merged over workers at most once a
//!   millisecond, since the merge takes each worker's part lock, and as
//!   soon as nothing is in flight, so an idle NF shows final values), then packets
//!   per worker for as many workers as ferry's 24 counters leave room for.
//! * **Shutdown.** When ferryd stops the NF (`recv_burst` fails), or the
//!   host asks ([`run_live_until`]; the NF host does on SIGTERM), the
//!   batches in the NF are processed and their output sent, the workers
//!   stop, and the exit handler runs (as init does, alone, on worker 0's
//!   engine slot) and its output is sent.
//!
//! [`registry`] is what an NF declares so that a host can build it from
//! `key=value` arguments (the catalog's `parallel-<name>` kinds);
//! [`counter`] is a small NF for tests.

pub mod counter;
pub mod nfs_args;
pub mod registry;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread;
use std::time::Duration;

use ferry_sdk::{NfThread, Packet as Frame, Waker};

use crate::packet_set::PacketSetDef;
use crate::runtime::{
    run_alone, validate, worker_of, BatchItem, OutputPacket, Packet, ParallelNf, PeriodicTimer, RuntimeError,
    TraceConfig, WorkerLoop, WorkerReport,
};
use crate::stm::Stm;

/// Default batches queued per worker.
pub const DEFAULT_QUEUED_BATCHES: usize = 8;
/// Default tick of idle workers that have timers: 10 ms.
pub const DEFAULT_TICK_NS: u64 = 10_000_000;
/// Counters an NF may declare (ferry's limit).
const MAX_COUNTERS: usize = ferry_sdk::MAX_NF_COUNTERS;
/// How often the chain thread publishes the NF's own counters (merging
/// them takes a lock per worker, too much for every burst).
const NF_COUNTERS_EVERY_NS: u64 = 1_000_000;
/// Spare byte buffers the chain thread keeps for copies.
const SPARE_BUFFERS: usize = 4096;
/// Longest wait for a completion while a full queue holds input back.
const HELD_WAIT: Duration = Duration::from_millis(1);

/// The NF counters the live mode publishes (before the NF's own).
pub const COUNTERS: [&str; 8] =
    ["received", "outputs", "sent", "no_frame", "bad_port", "commits", "aborts", "in_flight_max"];

/// The names to declare when connecting ([`ferry_sdk::Nf::connect_from_env_with`]):
/// [`COUNTERS`], then the NF's own (`nf_counters`: what its
/// [`ParallelNf::named_counters`] names, e.g.
/// [`registry::RegisteredNf::COUNTERS`]), then `w<i>_packets` for as many workers as
/// ferry's 24 counters leave room for.
pub fn counter_names(workers: usize, nf_counters: &[&str]) -> Vec<String> {
    COUNTERS
        .iter()
        .chain(nf_counters)
        .map(|s| s.to_string())
        .chain((0..worker_counters(workers, nf_counters.len())).map(|i| format!("w{i}_packets")))
        .collect()
}

/// Workers that get a `w<i>_packets` counter next to `nf_counters` of the NF.
fn worker_counters(workers: usize, nf_counters: usize) -> usize {
    workers.min(MAX_COUNTERS.saturating_sub(COUNTERS.len() + nf_counters))
}

/// How to run an NF live.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Workers (must equal the engine's), transaction batch size, ports,
    /// periodic timer and packet sets, as for a trace run. `ports` is
    /// normally the thread's out-link count.
    pub run: TraceConfig,
    /// Batches queued per worker before the chain thread stops receiving.
    pub queued_batches: usize,
    /// How long an idle worker with timers waits before it asks for a tick.
    pub tick_ns: u64,
    /// The NF port of frames that came from another NF's ring.
    pub ring_port: u16,
}

impl LiveConfig {
    /// Defaults: transactions of up to 32 packets, no periodic handler,
    /// [`DEFAULT_QUEUED_BATCHES`], [`DEFAULT_TICK_NS`], ring frames on port 0.
    pub fn new(workers: usize, ports: u16, packet_sets: PacketSetDef) -> LiveConfig {
        LiveConfig {
            run: TraceConfig { workers, batch_size: 32, ports, periodic_ns: None, packet_sets },
            queued_batches: DEFAULT_QUEUED_BATCHES,
            tick_ns: DEFAULT_TICK_NS,
            ring_port: 0,
        }
    }
}

/// What the chain thread counted (also published as NF counters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCounters {
    /// Frames received and dispatched.
    pub received: u64,
    /// Committed output packets (init and exit output included).
    pub outputs: u64,
    /// Outputs sent on an out-link.
    pub sent: u64,
    /// Outputs lost for want of a free frame (or too big for one).
    pub no_frame: u64,
    /// Outputs for a port with no out-link.
    pub bad_port: u64,
    /// Transactions committed and attempts aborted, all workers.
    pub commits: u64,
    pub aborts: u64,
    /// Most packets between receive and their worker's commit.
    pub in_flight_max: u64,
    /// Packets each worker processed.
    pub per_worker: Vec<u64>,
}

/// What a live run did.
#[derive(Debug, Clone)]
pub struct LiveReport {
    pub counters: LiveCounters,
    /// The NF's own counters at the end ([`ParallelNf::named_counters`]).
    pub nf_counters: Vec<(&'static str, u64)>,
    /// Per worker, at the end (their `outputs` are empty: output was sent).
    pub workers: Vec<WorkerReport>,
}

/// Work for a worker, with the vector its output goes into.
enum Work {
    Batch { items: Vec<BatchItem>, outputs: Vec<OutputPacket> },
    Tick { now_ns: u64, outputs: Vec<OutputPacket> },
}

/// A worker finished a [`Work`]: its committed output, the batch (whose
/// buffers the chain thread reuses) and the worker's totals so far.
struct Done {
    worker: usize,
    items: Vec<BatchItem>,
    outputs: Vec<OutputPacket>,
    commits: u64,
    aborts: u64,
}

/// Runs `nf` live on `th` until ferryd stops the NF: init, packets, exit.
/// Publishes [`counter_names`] counters on `th`: declare
/// `counter_names(workers, names)` at connect, with `names` the ones
/// `nf.named_counters()` gives ([`registry::RegisteredNf::COUNTERS`]).
pub fn run_live<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &LiveConfig,
    th: &mut NfThread,
) -> Result<LiveReport, RuntimeError> {
    run_live_until(stm, nf, config, th, &AtomicBool::new(false))
}

/// [`run_live`] that also stops cleanly (drain, exit handler) once `stop`
/// is set. Whoever sets it wakes the thread too ([`NfThread::waker`]), e.g.
/// a thread that waits for SIGTERM.
pub fn run_live_until<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &LiveConfig,
    th: &mut NfThread,
    stop: &AtomicBool,
) -> Result<LiveReport, RuntimeError> {
    validate(stm, &config.run)?;
    if config.queued_batches == 0 {
        return Err(RuntimeError::Config { field: "queued_batches", reason: "must be at least 1" });
    }
    if config.tick_ns == 0 {
        return Err(RuntimeError::Config { field: "tick_ns", reason: "must be at least 1" });
    }
    let workers = config.run.workers;
    let nf_counters = || nf.named_counters();
    let mut chain = ChainThread::new(config, &nf_counters);
    let init = run_alone(stm, &config.run, |ctx| nf.init(ctx))?;
    chain.emit_all(th, init);
    chain.publish(th, ferry_sys::monotonic_ns(), true);
    let reports = thread::scope(|scope| {
        let (done_tx, done_rx) = sync_channel::<Done>(workers * (config.queued_batches + 2));
        let mut handles = Vec::with_capacity(workers);
        for index in 0..workers {
            let (input_tx, input_rx) = sync_channel::<Work>(config.queued_batches);
            chain.inputs.push(input_tx);
            let (done, waker) = (done_tx.clone(), th.waker());
            handles.push(scope.spawn(move || worker_thread(stm, nf, config, index, input_rx, done, waker)));
        }
        drop(done_tx);
        chain.serve(th, &done_rx, stop);
        chain.drain(th, &done_rx);
        handles
            .into_iter()
            .enumerate()
            .map(|(worker, h)| h.join().map_err(|_| RuntimeError::WorkerPanicked { worker })?)
            .collect::<Result<Vec<_>, _>>()
    });
    let workers = reports?;
    let exit = run_alone(stm, &config.run, |ctx| nf.exit(ctx))?;
    chain.emit_all(th, exit);
    th.flush();
    chain.publish(th, ferry_sys::monotonic_ns(), true);
    Ok(LiveReport { counters: chain.counters, nf_counters: nf.named_counters(), workers })
}

fn worker_thread<N: ParallelNf>(
    stm: &Stm,
    nf: &N,
    config: &LiveConfig,
    index: usize,
    input: Receiver<Work>,
    done: SyncSender<Done>,
    waker: Waker,
) -> Result<WorkerReport, RuntimeError> {
    let periodic = config.run.periodic_ns.map(PeriodicTimer::new);
    let mut worker = WorkerLoop::new(nf, stm.worker(index)?, config.run.ports, periodic);
    let tick = Duration::from_nanos(config.tick_ns);
    loop {
        let work = if worker.has_timers() {
            match input.recv_timeout(tick) {
                Ok(work) => work,
                Err(RecvTimeoutError::Timeout) => {
                    // Idle with timers: ask the chain thread for a tick.
                    waker.wake();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match input.recv() {
                Ok(work) => work,
                Err(_) => break,
            }
        };
        let (items, mut outputs) = match work {
            Work::Batch { items, outputs } => {
                worker.run_batch(&items);
                (items, outputs)
            }
            Work::Tick { now_ns, outputs } => {
                worker.run_tick(now_ns);
                (Vec::new(), outputs)
            }
        };
        worker.take_outputs(&mut outputs);
        let stats = worker.stats();
        let finished = Done { worker: index, items, outputs, commits: stats.commits, aborts: stats.aborts };
        let sent = match done.try_send(finished) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(finished)) => {
                waker.wake();
                done.send(finished).map_err(|_| ())
            }
            Err(TrySendError::Disconnected(_)) => Err(()),
        };
        if sent.is_err() {
            break;
        }
        waker.wake();
    }
    Ok(worker.finish())
}

/// The chain thread's side: dispatch, completions, output frames.
struct ChainThread<'c> {
    config: &'c LiveConfig,
    inputs: Vec<SyncSender<Work>>,
    /// Work a full queue did not take yet, per worker, in order.
    held: Vec<VecDeque<Work>>,
    /// The batch being filled, per worker.
    pending: Vec<Vec<BatchItem>>,
    last_sent_ns: Vec<u64>,
    next_orphan: usize,
    /// A worker whose queue closed (it panicked).
    dead: bool,
    buffers: Vec<Vec<u8>>,
    item_vecs: Vec<Vec<BatchItem>>,
    output_vecs: Vec<Vec<OutputPacket>>,
    in_flight: u64,
    worker_commits: Vec<u64>,
    worker_aborts: Vec<u64>,
    counters: LiveCounters,
    /// The NF's [`ParallelNf::named_counters`].
    nf_counters: &'c NfCounters<'c>,
    /// How many there are (their place among the published counters).
    nf_counter_count: usize,
    nf_published_ns: u64,
    /// Every packet received so far is committed (or a tick was): the NF's
    /// counters may have changed and the thread may now wait for traffic,
    /// so they are published at once rather than after the interval.
    nf_settled: bool,
}

/// Reads an NF's own counters.
type NfCounters<'n> = dyn Fn() -> Vec<(&'static str, u64)> + 'n;

impl<'c> ChainThread<'c> {
    fn new(config: &'c LiveConfig, nf_counters: &'c NfCounters<'c>) -> Self {
        let workers = config.run.workers;
        ChainThread {
            config,
            inputs: Vec::with_capacity(workers),
            held: (0..workers).map(|_| VecDeque::new()).collect(),
            pending: (0..workers).map(|_| Vec::with_capacity(config.run.batch_size)).collect(),
            last_sent_ns: vec![0; workers],
            next_orphan: 0,
            dead: false,
            buffers: Vec::new(),
            item_vecs: Vec::new(),
            output_vecs: Vec::new(),
            in_flight: 0,
            worker_commits: vec![0; workers],
            worker_aborts: vec![0; workers],
            counters: LiveCounters { per_worker: vec![0; workers], ..LiveCounters::default() },
            nf_counter_count: nf_counters().len(),
            nf_counters,
            nf_published_ns: 0,
            nf_settled: false,
        }
    }

    /// The main loop, until ferryd stops the NF or a worker dies.
    fn serve(&mut self, th: &mut NfThread, done: &Receiver<Done>, stop: &AtomicBool) {
        let workers = self.config.run.workers;
        let max_burst = (self.config.run.batch_size * workers).clamp(1, 1024);
        let mut burst: Vec<Frame> = Vec::with_capacity(max_burst);
        loop {
            if !self.take_done(th, done) || stop.load(Ordering::Acquire) {
                return;
            }
            let clear = self.push_held();
            if self.dead {
                return;
            }
            // One clock read per loop for the ticks and the counters.
            let now_ns = ferry_sys::monotonic_ns();
            self.ticks(now_ns);
            self.publish(th, now_ns, false);
            if !clear {
                // A full queue: take no input until a worker makes room.
                if th.service().is_err() {
                    return;
                }
                match done.recv_timeout(HELD_WAIT) {
                    Ok(d) => self.finish(th, d),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                continue;
            }
            if th.recv_burst(&mut burst, max_burst).is_err() {
                return;
            }
            if !burst.is_empty() {
                self.dispatch(th, &mut burst, ferry_sys::monotonic_ns());
            }
        }
    }

    /// Stop: queued work finishes and its output is sent; the workers end.
    fn drain(&mut self, th: &mut NfThread, done: &Receiver<Done>) {
        for w in 0..self.pending.len() {
            self.queue(w);
        }
        while !self.push_held() && !self.dead {
            match done.recv_timeout(HELD_WAIT) {
                Ok(d) => self.finish(th, d),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.inputs.clear();
        for d in done.iter() {
            self.finish(th, d);
        }
        th.flush();
    }

    fn dispatch(&mut self, th: &mut NfThread, burst: &mut Vec<Frame>, now_ns: u64) {
        let workers = self.config.run.workers;
        let n = burst.len() as u64;
        for frame in burst.drain(..) {
            let port = frame.arrived_on_port().unwrap_or(self.config.ring_port);
            let key = self.config.run.packet_sets.classify(port, frame.data());
            let target = match &key {
                Some(key) => worker_of(key, workers),
                None => {
                    self.next_orphan = (self.next_orphan + 1) % workers;
                    self.next_orphan
                }
            };
            let mut data = self.buffers.pop().unwrap_or_default();
            data.clear();
            data.extend_from_slice(frame.data());
            th.drop_packet(frame);
            self.pending[target].push(BatchItem { key, packet: Packet::new(port, now_ns, data) });
            if self.pending[target].len() >= self.config.run.batch_size {
                self.queue(target);
            }
        }
        for w in 0..workers {
            self.queue(w);
        }
        self.counters.received += n;
        self.in_flight += n;
        self.counters.in_flight_max = self.counters.in_flight_max.max(self.in_flight);
    }

    /// Sends worker `w`'s pending batch, if any.
    fn queue(&mut self, w: usize) {
        if self.pending[w].is_empty() {
            return;
        }
        let fresh = self.item_vecs.pop().unwrap_or_else(|| Vec::with_capacity(self.config.run.batch_size));
        let items = std::mem::replace(&mut self.pending[w], fresh);
        let outputs = self.output_vecs.pop().unwrap_or_default();
        let work = Work::Batch { items, outputs };
        if self.held[w].is_empty() {
            self.try_send(w, work);
        } else {
            self.held[w].push_back(work);
        }
    }

    /// Offers `work` to worker `w`'s queue; holds it if the queue is full.
    fn try_send(&mut self, w: usize, work: Work) {
        match self.inputs[w].try_send(work) {
            Ok(()) => self.last_sent_ns[w] = ferry_sys::monotonic_ns(),
            Err(TrySendError::Full(work)) => self.held[w].push_back(work),
            Err(TrySendError::Disconnected(_)) => self.dead = true,
        }
    }

    /// Moves held work into the queues; true when none is left.
    fn push_held(&mut self) -> bool {
        let mut clear = true;
        for w in 0..self.held.len() {
            while let Some(work) = self.held[w].pop_front() {
                match self.inputs[w].try_send(work) {
                    Ok(()) => self.last_sent_ns[w] = ferry_sys::monotonic_ns(),
                    Err(TrySendError::Full(work)) => {
                        self.held[w].push_front(work);
                        clear = false;
                        break;
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        self.dead = true;
                        self.held[w].clear();
                    }
                }
            }
        }
        clear
    }

    /// Ticks the workers that got nothing for `tick_ns` (a worker without
    /// timers finds nothing due; a busy one gets no tick: its batches
    /// carry the time).
    fn ticks(&mut self, now_ns: u64) {
        for w in 0..self.inputs.len() {
            if !self.held[w].is_empty() || now_ns.saturating_sub(self.last_sent_ns[w]) < self.config.tick_ns {
                continue;
            }
            let outputs = self.output_vecs.pop().unwrap_or_default();
            match self.inputs[w].try_send(Work::Tick { now_ns, outputs }) {
                Ok(()) => self.last_sent_ns[w] = now_ns,
                Err(TrySendError::Full(Work::Tick { outputs, .. })) => self.output_vecs.push(outputs),
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => self.dead = true,
            }
        }
    }

    /// Handles every completion waiting; false once all workers are gone.
    fn take_done(&mut self, th: &mut NfThread, done: &Receiver<Done>) -> bool {
        loop {
            match done.try_recv() {
                Ok(d) => self.finish(th, d),
                Err(std::sync::mpsc::TryRecvError::Empty) => return true,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn finish(&mut self, th: &mut NfThread, mut d: Done) {
        let n = d.items.len() as u64;
        self.in_flight -= n;
        self.nf_settled |= self.in_flight == 0;
        self.counters.per_worker[d.worker] += n;
        self.worker_commits[d.worker] = d.commits;
        self.worker_aborts[d.worker] = d.aborts;
        for out in d.outputs.drain(..) {
            self.emit(th, out);
        }
        for mut item in d.items.drain(..) {
            self.recycle(std::mem::take(item.packet.data_mut()));
        }
        if d.items.capacity() > 0 && self.item_vecs.len() < 4 * self.inputs.len().max(1) {
            self.item_vecs.push(d.items);
        }
        if self.output_vecs.len() < 4 * self.inputs.len().max(1) {
            self.output_vecs.push(d.outputs);
        }
    }

    fn emit_all(&mut self, th: &mut NfThread, outputs: Vec<OutputPacket>) {
        for out in outputs {
            self.emit(th, out);
        }
    }

    /// Copies one committed output into a frame and sends it on out-link
    /// `port`.
    fn emit(&mut self, th: &mut NfThread, out: OutputPacket) {
        self.counters.outputs += 1;
        let hop = out.port as usize;
        if hop >= th.out_links() {
            self.counters.bad_port += 1;
        } else {
            let len = out.data.len();
            let frame = th.alloc(len).or_else(|| {
                // Completed transmissions go back to the pool in service().
                let _ = th.service();
                th.alloc(len)
            });
            match frame {
                Some(mut frame) => {
                    frame.data_mut().copy_from_slice(&out.data);
                    th.send(frame, hop);
                    self.counters.sent += 1;
                }
                None => self.counters.no_frame += 1,
            }
        }
        self.recycle(out.data);
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        if self.buffers.len() < SPARE_BUFFERS && buffer.capacity() > 0 {
            self.buffers.push(buffer);
        }
    }

    /// Publishes the counters [`counter_names`] declares: the chain
    /// thread's own and the workers' every time; the NF's when `all`, when
    /// the NF has settled (nothing in flight), or else at most every
    /// [`NF_COUNTERS_EVERY_NS`].
    fn publish(&mut self, th: &NfThread, now_ns: u64, all: bool) {
        self.counters.commits = self.worker_commits.iter().sum();
        self.counters.aborts = self.worker_aborts.iter().sum();
        let c = &self.counters;
        let fixed = [c.received, c.outputs, c.sent, c.no_frame, c.bad_port, c.commits, c.aborts, c.in_flight_max];
        for (i, v) in fixed.into_iter().enumerate() {
            th.set_nf_counter(i, v);
        }
        let first_worker = COUNTERS.len() + self.nf_counter_count;
        let workers = worker_counters(c.per_worker.len(), self.nf_counter_count);
        for (w, &v) in c.per_worker.iter().take(workers).enumerate() {
            th.set_nf_counter(first_worker + w, v);
        }
        if all || self.nf_settled || now_ns.saturating_sub(self.nf_published_ns) >= NF_COUNTERS_EVERY_NS {
            self.nf_published_ns = now_ns;
            self.nf_settled = false;
            for (i, (_, v)) in (self.nf_counters)().into_iter().take(self.nf_counter_count).enumerate() {
                th.set_nf_counter(COUNTERS.len() + i, v);
            }
        }
    }
}
