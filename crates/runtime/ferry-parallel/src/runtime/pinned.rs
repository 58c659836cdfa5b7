//! Benchmark runs on pinned workers: the trace split over the workers
//! beforehand (as RSS spreads a NIC's traffic over its queues), one worker
//! thread per CPU, all released together, and only their packet
//! processing timed. Also the bare control those runs are compared with.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::batch::BatchItem;
use super::nf::Packet;
use super::trace::{check_config, dispatch, TraceConfig};
use super::RuntimeError;
use crate::packet_set::SetKey;

/// Each worker's receive batches, in order.
pub(crate) type Queues = Vec<Vec<Vec<BatchItem>>>;

/// Classifies the whole trace and cuts it into each worker's batches.
/// Workers run on their own copy ([`own_copy`]).
pub(crate) fn presplit(config: &TraceConfig, packets: impl IntoIterator<Item = Packet>) -> Queues {
    let mut queues: Queues = (0..config.workers).map(|_| Vec::new()).collect();
    dispatch(config, packets, |target, batch| queues[target].push(batch));
    queues
}

/// A worker's own copy of its batches, made by the worker thread before
/// its clock starts. A NIC queue's packets sit in that queue's own
/// buffers; the trace's packets are allocated in arrival order, so each
/// worker's are interleaved with the others', and glibc hands a copy made
/// by the dispatching thread the slot the original just freed. Read from
/// there, two workers scaled worse than one (0.8x for a plain copy loop on
/// this VM); copied by the worker, in its own allocator arena, its packets
/// are contiguous and first touched by its own CPU.
pub(crate) fn own_copy(batches: &[Vec<BatchItem>]) -> Vec<Vec<BatchItem>> {
    batches
        .iter()
        .map(|batch| {
            batch
                .iter()
                .map(|item| {
                    let p = &item.packet;
                    BatchItem { key: item.key, packet: Packet::new(p.port(), p.timestamp_ns(), p.data().to_vec()) }
                })
                .collect()
        })
        .collect()
}

/// Where the timed part of every worker starts: all of them at once, once
/// each is set up. Starting threads and tearing down their tables is not
/// packet processing (a live NF's workers are up before traffic comes), and
/// on 2 vCPUs thread start-up alone varied by 2 ms, a few percent of a run.
pub(crate) struct StartLine {
    barrier: Barrier,
    epoch: Instant,
}

impl StartLine {
    /// Waits for every worker, then returns the time this one starts at.
    pub(crate) fn cross(&self) -> Duration {
        self.barrier.wait();
        self.epoch.elapsed()
    }

    pub(crate) fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

/// Runs `work(index, batches, start)` for every queue on its own named
/// thread pinned to its own CPU. `work` returns its result and the times
/// it started (after crossing `start`) and ended; the returned duration
/// runs from the first start to the last end.
pub(crate) fn run_pinned<R: Send>(
    queues: &Queues,
    work: impl Fn(usize, &[Vec<BatchItem>], &StartLine) -> Result<(R, Duration, Duration), RuntimeError> + Sync,
) -> Result<(Vec<R>, Duration), RuntimeError> {
    let start = StartLine { barrier: Barrier::new(queues.len()), epoch: Instant::now() };
    let (start, work) = (&start, &work);
    let timed = thread::scope(|scope| {
        let handles: Vec<_> = queues
            .iter()
            .enumerate()
            .map(|(index, batches)| {
                // Named, so profilers can tell the workers' time apart.
                thread::Builder::new().name(format!("ferry-worker-{index}")).spawn_scoped(scope, move || {
                    pin_to_cpu(index);
                    work(index, batches, start)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(worker, spawned)| {
                let handle = spawned.map_err(|_| RuntimeError::WorkerPanicked { worker })?;
                handle.join().map_err(|_| RuntimeError::WorkerPanicked { worker })?
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    let started = timed.iter().map(|(_, started, _)| *started).min().unwrap_or_default();
    let ended = timed.iter().map(|(_, _, ended)| *ended).max().unwrap_or_default();
    Ok((timed.into_iter().map(|(result, _, _)| result).collect(), ended.saturating_sub(started)))
}

/// What a worker of a control run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct ControlReport {
    pub packets: u64,
    pub bytes: u64,
    pub flows: usize,
}

/// The work a control run does per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlWork {
    /// Look the packet's set up in the worker's own hash table (inserted
    /// when new) and copy the packet out: the floor of what any NF here
    /// does per packet, with none of the runtime.
    LookupAndCopy,
    /// Arithmetic in registers (`rounds` xorshift steps), touching neither
    /// packets nor tables: how the CPUs alone scale.
    Arithmetic { rounds: u32 },
}

/// A control run: the same queues on the same pinned workers as
/// [`super::run_trace_presplit`], without the runtime or any NF. Its
/// 2-worker over 1-worker ratio is what this machine gives two independent
/// cores doing `work`, so an NF's own ratio can be read against it, in the
/// same run.
pub fn run_control_presplit(
    config: &TraceConfig,
    packets: impl IntoIterator<Item = Packet>,
    work: ControlWork,
) -> Result<(Vec<ControlReport>, Duration), RuntimeError> {
    check_config(config)?;
    let queues = presplit(config, packets);
    let result = run_pinned(&queues, |index, batches, start| {
        let mut report = ControlReport::default();
        let batches = &own_copy(batches)[..];
        let started = start.cross();
        match work {
            ControlWork::LookupAndCopy => lookup_and_copy(batches, &mut report),
            ControlWork::Arithmetic { rounds } => arithmetic(batches, rounds, index as u64, &mut report),
        }
        Ok((report, started, start.now()))
    });
    drop(queues);
    result
}

fn lookup_and_copy(batches: &[Vec<BatchItem>], report: &mut ControlReport) {
    let mut last_seen: FxHashMap<SetKey, u64> = FxHashMap::default();
    let mut out: Vec<u8> = Vec::with_capacity(2048);
    for item in batches.iter().flatten() {
        if let Some(key) = item.key {
            last_seen.insert(key, item.packet.timestamp_ns());
        }
        out.clear();
        out.extend_from_slice(item.packet.data());
        report.packets += 1;
        report.bytes += std::hint::black_box(&out).len() as u64;
    }
    report.flows = last_seen.len();
}

fn arithmetic(batches: &[Vec<BatchItem>], rounds: u32, seed: u64, report: &mut ControlReport) {
    let mut x = 0x9e37_79b9_7f4a_7c15 ^ seed;
    for batch in batches {
        for _ in 0..batch.len() {
            for _ in 0..rounds {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            x = std::hint::black_box(x);
            report.packets += 1;
        }
    }
}

/// Pins the calling thread to the `index`-th CPU it may run on (modulo
/// their number), as NFOS pins each receive queue's core: a benchmark's
/// workers then do not migrate, and two workers never share a CPU while
/// another sits idle. Best effort: left unpinned if the kernel refuses.
fn pin_to_cpu(index: usize) {
    #[cfg(not(loom))]
    if let Ok(allowed) = ferry_sys::CpuSet::allowed() {
        let cpus = allowed.cpus();
        if let Some(cpu) = cpus.get(index % cpus.len().max(1)) {
            let _ = ferry_sys::pin_thread(*cpu);
        }
    }
    #[cfg(loom)]
    let _ = index;
}
