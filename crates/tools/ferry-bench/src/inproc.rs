//! The "upper bound" scenario of `ferry bench chain` (FLASH, Fig. 10/11):
//! every NF of a chain is a thread of this one process, and frames move
//! between them through in-process [`MpscRing`]s. No kernel, no shared
//! memory across processes, no copies: what is left is the cost of the ring
//! protocol, of the wake-ups, and of the NFs themselves.
//!
//! ```text
//!  source --ring 0--> l2fwd 0 --ring 1--> l2fwd 1 ... --ring n--> sink
//!    ^                                                              |
//!    +------------------ FramePool (free frames) <------------------+
//! ```
//!
//! * The "UMEM" is a heap array of 2048-byte frames. A frame's address is
//!   its byte offset, as in an AF_XDP UMEM.
//! * The source takes free frames through a [`PoolCache`], copies a UDP
//!   frame built once with `ferry_wire::build_frame` into each, writes a
//!   stamp (stream 0, sequence number, CLOCK_MONOTONIC time read once per
//!   batch) and enqueues `batch` descriptors at a time.
//! * Each NF thread dequeues up to `rx_burst` descriptors, runs
//!   [`L2Fwd::process`] on each frame and enqueues them to the next ring,
//!   `batch` at a time (`batch == 1` is FLASH's "batched redirect off":
//!   one ring operation, and one wake-up check, per frame).
//! * The sink reads each stamp, checks the sequence, records the latency of
//!   frames received inside the measured window into an HDR histogram, and
//!   frees the frame to the pool.
//!
//! Enqueueing follows the ring's partial-batch rule: what did not fit stays
//! with the sender and is retried, after busy-polling for `busy_poll_us`
//! and then blocking on the ring's room eventfd. A thread with an empty
//! input ring busy-polls the same way and then blocks on its data eventfd,
//! so idle threads sleep: the machine has two vCPUs and up to ten threads.
//! No thread is pinned. With more threads than CPUs, the numbers measure
//! the scheduler and the wake-ups as much as the rings.
//!
//! The run offers as much load as the chain takes, so the latency reported
//! is the latency at saturation: it is dominated by the frames queued in
//! the rings (up to `ring_size` per ring), not by the per-hop cost.
//!
//! At the end the chain drains (the source stops, each stage finishes what
//! its upstream sent, then stops), and frame conservation is checked: every
//! frame of the UMEM is back in the pool or still in a ring, and every frame
//! the source sent reached the sink or was dropped by an NF.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_nf::{L2Fwd, PacketNf, Verdict};
use ferry_ring::{Consumer, Desc, EventFd, FramePool, MpscRing, PoolCache, PoolConfig, Producer, RingConfig};
use ferry_wire::flow::IpVersion;
use ferry_wire::{build_frame, has_stamp_room, stamp_offset, FiveTuple, FrameSpec, L4Proto, Stamp, MIN_FRAME_LEN};
use hdrhistogram::Histogram;
use serde::Serialize;

use ferry_sys::monotonic_ns;

/// Size of one UMEM frame (the AF_XDP default chunk size).
pub const FRAME_SIZE: usize = 2048;
/// Most NFs a chain may have.
pub const MAX_NFS: usize = 8;
/// Blocking waits time out after this and re-check everything, so that a
/// missed wake-up would cost throughput (visible) rather than hang the run.
const WAIT_TIMEOUT: Duration = Duration::from_millis(50);
/// Frames moved between a thread's cache and the shared pool at a time.
const POOL_CACHE_BATCH: usize = PoolCache::DEFAULT_BATCH;
/// Latencies above this (60 s) count as bad stamps.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InprocOptions {
    /// l2fwd NFs between the source and the sink, 1..=8.
    pub nfs: usize,
    /// Descriptors per ring enqueue, 1..=4096 (1 = batched redirect off).
    pub batch: usize,
    /// Descriptors per ring dequeue, 1..=4096.
    pub rx_burst: usize,
    /// Ethernet frame length without FCS, 60..=2048.
    pub frame_len: usize,
    /// Length of the measured window.
    pub duration: Duration,
    /// Traffic before the window, not measured.
    pub warmup: Duration,
    /// How long a thread spins on an empty (or full) ring before blocking
    /// on its eventfd; 0 (the default) blocks at once. With more threads
    /// than CPUs, spinning mostly takes the CPU from the thread being
    /// waited for: on 2 vCPUs, 20 µs lost 2-5x the throughput of 0.
    pub busy_poll_us: u64,
    /// Capacity of every ring (a power of two, 2..=2^24).
    pub ring_size: u32,
    /// Frames in the UMEM; `None` sizes it so the source never finds the
    /// pool empty: every ring full plus every thread's cache and buffers.
    pub umem_frames: Option<u32>,
    /// Offered load, frames per second, paced frame by frame as the
    /// chain's `source` NF paces; None: flat out.
    pub rate_pps: Option<u64>,
}

impl Default for InprocOptions {
    fn default() -> Self {
        InprocOptions {
            nfs: 1,
            batch: 32,
            rx_burst: 32,
            frame_len: 64,
            duration: Duration::from_secs(2),
            warmup: Duration::from_millis(500),
            busy_poll_us: 0,
            ring_size: 1024,
            umem_frames: None,
            rate_pps: None,
        }
    }
}

impl InprocOptions {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_NFS).contains(&self.nfs) {
            bail!("nfs = {}: must be in 1..={MAX_NFS}", self.nfs);
        }
        if !(1..=4096).contains(&self.batch) {
            bail!("batch = {}: must be in 1..=4096", self.batch);
        }
        if !(1..=4096).contains(&self.rx_burst) {
            bail!("rx_burst = {}: must be in 1..=4096", self.rx_burst);
        }
        if !(MIN_FRAME_LEN..=FRAME_SIZE).contains(&self.frame_len)
            || !has_stamp_room(IpVersion::V4, L4Proto::Udp, self.frame_len)
        {
            bail!("frame_len = {}: must be in {MIN_FRAME_LEN}..={FRAME_SIZE}", self.frame_len);
        }
        if self.duration.is_zero() {
            bail!("duration must be positive");
        }
        Ok(())
    }

    /// Frames in flight at most: every ring full, plus what each thread can
    /// hold (its cache of up to two pool batches, its input burst and its
    /// unsent output), plus slack.
    fn auto_frames(&self) -> u64 {
        let stages = self.nfs as u64 + 2;
        let rings = (self.nfs as u64 + 1) * self.ring_size as u64;
        rings + stages * (2 * POOL_CACHE_BATCH + self.rx_burst + self.batch) as u64 + 1024
    }
}

/// Counters of one thread of the chain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageStats {
    /// "source", "nf0".."nf7", "sink".
    pub name: String,
    /// Frames dequeued (the source: frames allocated).
    pub rx: u64,
    /// Frames enqueued downstream (the sink: frames freed to the pool).
    pub tx: u64,
    /// Frames the NF dropped (freed to the pool).
    pub dropped: u64,
    /// Ring enqueue calls that moved at least one descriptor.
    pub enqueue_calls: u64,
    /// Enqueue calls that found the ring full (part of a batch stays).
    pub ring_full: u64,
    /// Times the thread blocked on the room eventfd.
    pub room_waits: u64,
    /// Times the thread blocked on its data eventfd.
    pub data_waits: u64,
    /// Source only: times the pool (and its cache) had no free frame.
    pub pool_empty: u64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct InprocResult {
    pub nfs: usize,
    pub batch: usize,
    pub frame_len: usize,
    /// Length of the measured window, seconds.
    pub window_s: f64,
    /// Frames the sink received inside the window.
    pub measured_frames: u64,
    /// `measured_frames / window_s`, in millions.
    pub mpps: f64,
    /// Latency source to sink of the frames received in the window, µs.
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_p999_us: f64,
    pub latency_max_us: f64,
    /// Frames the source sent into the chain over the whole run.
    pub sent: u64,
    /// Frames the sink received over the whole run.
    pub received: u64,
    /// Frames the NFs dropped.
    pub dropped: u64,
    /// Stamps whose sequence was not the previous one plus one (loss or
    /// reordering; a FIFO chain has none).
    pub seq_errors: u64,
    /// Frames reaching the sink without a readable stamp or with a
    /// timestamp from the future.
    pub bad_stamps: u64,
    /// Frames in the UMEM.
    pub frames_total: u64,
    /// Frames back in the pool after the run.
    pub frames_returned: u64,
    /// Frames still in a ring after the run (0 after a clean drain).
    pub frames_in_flight: u64,
    /// `frames_returned + frames_in_flight == frames_total` and
    /// `sent == received + dropped`.
    pub conserved: bool,
    /// Source, NFs in chain order, sink.
    pub stages: Vec<StageStats>,
}

/// One UMEM frame. The cell lets threads write frames they own through a
/// shared `&Umem`.
#[repr(C, align(64))]
struct FrameCell(UnsafeCell<[u8; FRAME_SIZE]>);

/// The heap "UMEM": `n` frames, addressed by byte offset.
///
/// Ownership rule (what makes [`Umem::frame`] sound): at any time each frame
/// is owned by exactly one place — the free pool, one thread's pool cache or
/// hands, or one ring slot. Only a thread that took the frame from the pool
/// or dequeued its descriptor touches its bytes, and it stops before it frees
/// or enqueues the frame. The pool's and the rings' Release/Acquire
/// publication orders one owner's accesses before the next owner's.
struct Umem {
    frames: Box<[FrameCell]>,
}

// SAFETY: frames are only accessed under the ownership rule above, so no
// two threads ever access the same frame concurrently.
unsafe impl Sync for Umem {}

impl Umem {
    fn new(n: usize) -> Umem {
        Umem { frames: (0..n).map(|_| FrameCell(UnsafeCell::new([0; FRAME_SIZE]))).collect() }
    }

    fn addrs(&self) -> Vec<u64> {
        (0..self.frames.len() as u64).map(|i| i * FRAME_SIZE as u64).collect()
    }

    /// The first `len` bytes of the frame at `addr`; None for an address or
    /// length that is not a frame of this UMEM.
    ///
    /// # Safety
    /// The caller must own the frame (see the type's docs) for as long as
    /// it uses the returned slice.
    // The cell hands out `&mut` from `&self` by design; the ownership rule
    // (the caller's obligation) is what keeps the borrows exclusive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn frame(&self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let index = addr / FRAME_SIZE as u64;
        if index * FRAME_SIZE as u64 != addr || len > FRAME_SIZE {
            return None;
        }
        let cell = self.frames.get(usize::try_from(index).ok()?)?;
        // SAFETY: the caller owns the frame, so nobody else accesses it.
        let bytes = unsafe { &mut *cell.0.get() };
        Some(&mut bytes[..len])
    }
}

/// The shared state every thread sees.
struct Shared<'a> {
    umem: &'a Umem,
    pool: &'a FramePool,
    /// `done[i]`: the producer of ring `i` has finished sending.
    done: &'a [AtomicBool],
    /// Some thread failed: everyone stops as soon as possible.
    abort: &'a AtomicBool,
    busy_poll: Duration,
}

/// Spins (checking `ready`) for up to `budget`; returns whether it became
/// ready. The clock is read once per 64 checks.
fn spin_until(budget: Duration, mut ready: impl FnMut() -> bool) -> bool {
    if ready() {
        return true;
    }
    if budget.is_zero() {
        return false;
    }
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            std::hint::spin_loop();
            if ready() {
                return true;
            }
        }
        if start.elapsed() >= budget {
            return false;
        }
    }
}

/// The sending side of a stage: a ring producer and the frames not yet
/// enqueued (the partial-batch rule: what did not fit stays here).
struct Output {
    prod: Producer,
    data: Arc<EventFd>,
    pending: Vec<Desc>,
    batch: usize,
}

impl Output {
    /// Enqueues everything pending, `batch` descriptors per call, waiting
    /// for room when the ring is full.
    fn flush(&mut self, sh: &Shared<'_>, st: &mut StageStats) -> Result<()> {
        let mut sent = 0;
        while sent < self.pending.len() {
            let end = self.pending.len().min(sent + self.batch);
            let n = self.prod.send(&self.pending[sent..end]).context("waking the consumer")?;
            if n > 0 {
                sent += n;
                st.tx += n as u64;
                st.enqueue_calls += 1;
                continue;
            }
            st.ring_full += 1;
            if sh.abort.load(Ordering::Relaxed) {
                bail!("aborted with {} frames unsent", self.pending.len() - sent);
            }
            let want = (end - sent) as u64;
            if !spin_until(sh.busy_poll, || self.prod.free_slots() >= want) {
                st.room_waits += 1;
                self.prod.wait_for_room(want, Some(WAIT_TIMEOUT)).context("waiting for room")?;
            }
        }
        self.pending.clear();
        Ok(())
    }
}

/// Marks a stage's output ring as finished when the stage ends, however it
/// ends, and raises the consumer's data eventfd unconditionally (the
/// consumer may be blocked with nothing to read). A stage that did not
/// complete sets `abort` as well.
struct FinishGuard<'a> {
    done: &'a AtomicBool,
    abort: &'a AtomicBool,
    data: Arc<EventFd>,
    completed: bool,
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        if !self.completed {
            self.abort.store(true, Ordering::Relaxed);
        }
        // Release: the consumer that sees `done` sees every enqueue before.
        self.done.store(true, Ordering::Release);
        let _ = ferry_ring::Notify::notify(&*self.data, 1);
    }
}

/// The receiving side of a stage.
struct Input {
    cons: Consumer,
    burst: usize,
}

impl Input {
    /// Dequeues up to `burst` descriptors into `out` (cleared first),
    /// blocking while the ring is empty. Returns 0 only once the upstream
    /// has finished and everything it sent has been taken, or on abort.
    /// `on_idle` runs before each block: the caller hands its cached free
    /// frames back to the pool there, so that a small UMEM cannot starve
    /// the source while frames sit in an idle thread's cache.
    fn recv(
        &mut self,
        sh: &Shared<'_>,
        upstream: &AtomicBool,
        out: &mut Vec<Desc>,
        st: &mut StageStats,
        on_idle: &mut dyn FnMut(),
    ) -> Result<usize> {
        out.clear();
        loop {
            let n = self.cons.recv(self.burst, out).context("signalling room")?;
            if n > 0 {
                st.rx += n as u64;
                return Ok(n);
            }
            // Acquire pairs with the upstream's Release: once `done` is
            // seen, all its enqueues are visible, so one more empty read
            // means the ring is drained for good.
            if upstream.load(Ordering::Acquire) {
                let n = self.cons.recv(self.burst, out).context("signalling room")?;
                st.rx += n as u64;
                return Ok(n);
            }
            if sh.abort.load(Ordering::Relaxed) {
                return Ok(0);
            }
            if !spin_until(sh.busy_poll, || self.cons.has_data() || upstream.load(Ordering::Relaxed)) {
                on_idle();
                st.data_waits += 1;
                self.cons.wait_for_data(Some(WAIT_TIMEOUT)).context("waiting for data")?;
            }
        }
    }
}

/// The two eventfds of one ring and its handles.
struct RingWiring {
    ring: MpscRing,
    data: Arc<EventFd>,
    room: Arc<EventFd>,
}

impl RingWiring {
    fn new(size: u32) -> Result<RingWiring> {
        let cfg = RingConfig::new(size, 1).context("ring size")?;
        Ok(RingWiring {
            ring: MpscRing::new_heap(cfg),
            data: Arc::new(EventFd::new().context("data eventfd")?),
            room: Arc::new(EventFd::new_semaphore().context("room eventfd")?),
        })
    }

    fn output(&self, batch: usize) -> Result<Output> {
        let mut prod = self.ring.producer(0)?;
        prod.set_data_notify(self.data.clone());
        prod.set_room_notify(self.room.clone());
        Ok(Output { prod, data: self.data.clone(), pending: Vec::with_capacity(batch), batch })
    }

    fn input(&self, burst: usize) -> Result<Input> {
        let mut cons = self.ring.consumer()?;
        cons.set_data_notify(self.data.clone());
        cons.set_room_notify(self.room.clone());
        Ok(Input { cons, burst })
    }
}

/// Sends stamped frames into ring 0 until `end_ns`, at `rate_pps` if set.
fn run_source(
    sh: &Shared<'_>,
    mut out: Output,
    template: &[u8],
    end_ns: u64,
    rate_pps: Option<u64>,
) -> Result<StageStats> {
    let mut st = StageStats { name: "source".into(), ..StageStats::default() };
    let mut guard = FinishGuard { done: &sh.done[0], abort: sh.abort, data: out.data.clone(), completed: false };
    let mut cache = PoolCache::with_batch(sh.pool.clone(), POOL_CACHE_BATCH)?;
    let stamp_at = stamp_offset(IpVersion::V4, L4Proto::Udp);
    let len = template.len();
    let mut seq = 0u32;
    let mut pacer = ferry_sys::Pacer::for_frames(rate_pps, out.batch);
    loop {
        let now = monotonic_ns();
        if now >= end_ns || sh.abort.load(Ordering::Relaxed) {
            break;
        }
        let due = pacer.allowance(now).min(out.batch as u64) as usize;
        if due == 0 {
            pacer.wait(now);
            continue;
        }
        let before = out.pending.len();
        while out.pending.len() < due {
            let Some(addr) = cache.alloc() else { break };
            // SAFETY: the frame just came out of the pool: it is ours.
            let f = unsafe { sh.umem.frame(addr, len) }.ok_or_else(|| anyhow!("pool gave a bad frame {addr:#x}"))?;
            f.copy_from_slice(template);
            Stamp { stream: 0, seq, tx_ns: now }.write(&mut f[stamp_at..]);
            seq = seq.wrapping_add(1);
            out.pending.push(Desc::new(addr, len as u32));
            st.rx += 1;
        }
        pacer.consume((out.pending.len() - before) as u64);
        if out.pending.is_empty() {
            // Cannot happen with the automatic UMEM size; with a small one,
            // wait for the sink to free frames.
            st.pool_empty += 1;
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        out.flush(sh, &mut st)?;
    }
    guard.completed = true;
    Ok(st)
}

/// One l2fwd NF: ring `index` to ring `index + 1`.
fn run_nf(sh: &Shared<'_>, index: usize, mut inp: Input, mut out: Output) -> Result<StageStats> {
    let mut st = StageStats { name: format!("nf{index}"), ..StageStats::default() };
    let mut guard =
        FinishGuard { done: &sh.done[index + 1], abort: sh.abort, data: out.data.clone(), completed: false };
    let mut cache = PoolCache::with_batch(sh.pool.clone(), POOL_CACHE_BATCH)?;
    let mut nf = L2Fwd::new();
    let mut buf = Vec::with_capacity(inp.burst);
    while inp.recv(sh, &sh.done[index], &mut buf, &mut st, &mut || cache.flush())? > 0 {
        for d in &buf {
            // SAFETY: we dequeued the descriptor: the frame is ours until
            // we enqueue or free it.
            let verdict = match unsafe { sh.umem.frame(d.addr, d.len as usize) } {
                Some(f) => nf.process(f),
                None => Verdict::Drop,
            };
            match verdict {
                Verdict::Tx | Verdict::Pass => {
                    out.pending.push(*d);
                    if out.pending.len() >= out.batch {
                        out.flush(sh, &mut st)?;
                    }
                }
                Verdict::Drop => {
                    cache.free(d.addr);
                    st.dropped += 1;
                }
            }
        }
        out.flush(sh, &mut st)?;
    }
    guard.completed = !sh.abort.load(Ordering::Relaxed);
    Ok(st)
}

/// What the sink measured.
struct SinkOut {
    st: StageStats,
    hist: Histogram<u64>,
    measured: u64,
    seq_errors: u64,
    bad_stamps: u64,
}

/// Receives from the last ring, measures, frees frames.
fn run_sink(sh: &Shared<'_>, mut inp: Input, upstream: &AtomicBool, window: (u64, u64)) -> Result<SinkOut> {
    let mut st = StageStats { name: "sink".into(), ..StageStats::default() };
    let mut hist = Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_NS, 3).context("histogram")?;
    let mut cache = PoolCache::with_batch(sh.pool.clone(), POOL_CACHE_BATCH)?;
    let stamp_at = stamp_offset(IpVersion::V4, L4Proto::Udp);
    let (mut measured, mut seq_errors, mut bad_stamps) = (0u64, 0u64, 0u64);
    let mut expect = 0u32;
    let mut buf = Vec::with_capacity(inp.burst);
    while inp.recv(sh, upstream, &mut buf, &mut st, &mut || cache.flush())? > 0 {
        let rx_ns = monotonic_ns();
        let in_window = (window.0..window.1).contains(&rx_ns);
        for d in &buf {
            // SAFETY: dequeued, so ours until freed below.
            let stamp =
                unsafe { sh.umem.frame(d.addr, d.len as usize) }.and_then(|f| f.get(stamp_at..)).and_then(Stamp::read);
            match stamp {
                Some(s) => {
                    if s.seq != expect {
                        seq_errors += 1;
                    }
                    expect = s.seq.wrapping_add(1);
                    match rx_ns.checked_sub(s.tx_ns) {
                        Some(lat) if lat <= MAX_LATENCY_NS => {
                            if in_window {
                                hist.saturating_record(lat.max(1));
                                measured += 1;
                            }
                        }
                        _ => bad_stamps += 1,
                    }
                }
                None => bad_stamps += 1,
            }
            cache.free(d.addr);
            st.tx += 1;
        }
    }
    Ok(SinkOut { st, hist, measured, seq_errors, bad_stamps })
}

/// A thread's result, with a panic turned into an error.
fn joined<T>(r: std::thread::Result<Result<T>>) -> Result<Result<T>> {
    r.map_err(|_| anyhow!("a chain thread panicked"))
}

/// Runs the chain once: warm-up, measured window, drain, conservation check.
pub fn run_inproc_chain(o: &InprocOptions) -> Result<InprocResult> {
    o.validate()?;
    let frames = match o.umem_frames {
        Some(n) => n as u64,
        None => o.auto_frames(),
    };
    if frames == 0 || frames > 1 << 24 {
        bail!("umem_frames = {frames}: must be in 1..=2^24");
    }

    let umem = Umem::new(frames as usize);
    let pool = FramePool::new_heap(PoolConfig::new((frames as u32).next_power_of_two().max(2))?);
    pool.seed(&umem.addrs())?;
    let rings = (0..=o.nfs).map(|_| RingWiring::new(o.ring_size)).collect::<Result<Vec<_>>>()?;
    let done: Vec<AtomicBool> = (0..=o.nfs).map(|_| AtomicBool::new(false)).collect();
    let abort = AtomicBool::new(false);
    let sh = Shared {
        umem: &umem,
        pool: &pool,
        done: &done,
        abort: &abort,
        busy_poll: Duration::from_micros(o.busy_poll_us),
    };

    let template = udp_template(o.frame_len)?;

    // Handles are made before any thread starts, so a wiring error leaves
    // nothing running.
    let source_out = rings[0].output(o.batch)?;
    let mut nf_ends = Vec::with_capacity(o.nfs);
    for i in 0..o.nfs {
        nf_ends.push((rings[i].input(o.rx_burst)?, rings[i + 1].output(o.batch)?));
    }
    let sink_in = rings[o.nfs].input(o.rx_burst)?;

    let start = monotonic_ns();
    let win_start = start + o.warmup.as_nanos() as u64;
    let win_end = win_start + o.duration.as_nanos() as u64;

    let (source, nfs, sink) = std::thread::scope(|s| -> Result<_> {
        let sh = &sh;
        let template = &template;
        let spawn_err = |e: std::io::Error| {
            abort.store(true, Ordering::Relaxed);
            anyhow!("spawning a chain thread: {e}")
        };
        let sink = std::thread::Builder::new()
            .name("inproc-sink".into())
            .spawn_scoped(s, move || run_sink(sh, sink_in, &sh.done[o.nfs], (win_start, win_end)))
            .map_err(spawn_err)?;
        let mut nfs = Vec::with_capacity(o.nfs);
        for (i, (inp, out)) in nf_ends.into_iter().enumerate() {
            let h = std::thread::Builder::new()
                .name(format!("inproc-nf{i}"))
                .spawn_scoped(s, move || run_nf(sh, i, inp, out))
                .map_err(spawn_err)?;
            nfs.push(h);
        }
        let source = std::thread::Builder::new()
            .name("inproc-source".into())
            .spawn_scoped(s, move || run_source(sh, source_out, template, win_end, o.rate_pps))
            .map_err(spawn_err)?;
        Ok((joined(source.join()), nfs.into_iter().map(|h| joined(h.join())).collect::<Vec<_>>(), joined(sink.join())))
    })?;
    // Every thread has ended (and flushed its pool cache); now report the
    // first failure, if any.
    let source = source??;
    let nfs = nfs.into_iter().map(|r| r.and_then(|x| x)).collect::<Result<Vec<_>>>()?;
    let sink = sink??;

    Ok(result(o, (&pool, &rings), source, nfs, sink))
}

/// The one UDP frame the source stamps and sends, 10.0.0.1:1024 to
/// 10.0.0.2:9.
fn udp_template(frame_len: usize) -> Result<Vec<u8>> {
    let mut template = vec![0u8; frame_len];
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len };
    let tuple = FiveTuple {
        src_ip: [10, 0, 0, 1].into(),
        dst_ip: [10, 0, 0, 2].into(),
        src_port: 1024,
        dst_port: 9,
        proto: L4Proto::Udp,
    };
    build_frame(&spec, &tuple, Some(&Stamp::default()), &mut template)?;
    Ok(template)
}

/// The run's result from what each stage counted, with the frame
/// conservation check over the pool and the rings.
fn result(
    o: &InprocOptions,
    (pool, rings): (&FramePool, &[RingWiring]),
    source: StageStats,
    nfs: Vec<StageStats>,
    sink: SinkOut,
) -> InprocResult {
    let frames_total = pool.frames_total();
    let frames_returned = pool.available();
    let frames_in_flight: u64 = rings.iter().map(|r| r.ring.fill_level()).sum();
    let sent = source.tx;
    let received = sink.st.rx;
    let dropped: u64 = nfs.iter().map(|s| s.dropped).sum();
    let conserved = frames_returned + frames_in_flight == frames_total && sent == received + dropped;
    let window_s = o.duration.as_secs_f64();
    let us = |q: f64| if sink.measured == 0 { 0.0 } else { sink.hist.value_at_quantile(q) as f64 / 1e3 };

    let mut stages = Vec::with_capacity(o.nfs + 2);
    stages.push(source);
    stages.extend(nfs);
    stages.push(sink.st);
    InprocResult {
        nfs: o.nfs,
        batch: o.batch,
        frame_len: o.frame_len,
        window_s,
        measured_frames: sink.measured,
        mpps: sink.measured as f64 / window_s / 1e6,
        latency_p50_us: us(0.5),
        latency_p99_us: us(0.99),
        latency_p999_us: us(0.999),
        latency_max_us: if sink.measured == 0 { 0.0 } else { sink.hist.max() as f64 / 1e3 },
        sent,
        received,
        dropped,
        seq_errors: sink.seq_errors,
        bad_stamps: sink.bad_stamps,
        frames_total,
        frames_returned,
        frames_in_flight,
        conserved,
        stages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(nfs: usize, batch: usize) -> InprocOptions {
        InprocOptions {
            nfs,
            batch,
            duration: Duration::from_millis(300),
            warmup: Duration::from_millis(100),
            ..InprocOptions::default()
        }
    }

    fn check(r: &InprocResult) {
        assert!(r.measured_frames > 0, "{r:#?}");
        assert!(r.conserved, "{r:#?}");
        assert_eq!(r.frames_in_flight, 0, "{r:#?}");
        assert_eq!(r.frames_returned, r.frames_total);
        assert_eq!(r.seq_errors, 0, "{r:#?}");
        assert_eq!(r.bad_stamps, 0, "{r:#?}");
        assert_eq!(r.dropped, 0);
        assert_eq!(r.stages.len(), r.nfs + 2);
        // Every stage passed on exactly what it received.
        for s in &r.stages {
            assert_eq!(s.rx, s.tx + s.dropped, "{s:?}");
        }
        assert!(r.latency_p50_us > 0.0 && r.latency_p50_us <= r.latency_p99_us);
    }

    #[test]
    fn inproc_two_nfs_batch_32() {
        let r = run_inproc_chain(&short(2, 32)).unwrap();
        check(&r);
    }

    #[test]
    fn inproc_two_nfs_batch_1() {
        let r = run_inproc_chain(&short(2, 1)).unwrap();
        check(&r);
        // One descriptor per enqueue call.
        assert_eq!(r.stages[1].enqueue_calls, r.stages[1].tx);
    }

    #[test]
    fn inproc_small_umem_and_rings_still_conserve() {
        // Far fewer frames than ring slots: the source runs out of frames
        // and must wait for the sink; tiny rings force partial batches.
        let o = InprocOptions { ring_size: 16, umem_frames: Some(40), busy_poll_us: 0, ..short(3, 32) };
        let r = run_inproc_chain(&o).unwrap();
        check(&r);
        assert_eq!(r.frames_total, 40);
    }

    #[test]
    fn inproc_rejects_bad_options() {
        for o in [
            InprocOptions { nfs: 0, ..InprocOptions::default() },
            InprocOptions { nfs: 9, ..InprocOptions::default() },
            InprocOptions { batch: 0, ..InprocOptions::default() },
            InprocOptions { frame_len: 40, ..InprocOptions::default() },
            InprocOptions { frame_len: 4000, ..InprocOptions::default() },
            InprocOptions { ring_size: 1000, ..InprocOptions::default() },
        ] {
            assert!(run_inproc_chain(&o).is_err(), "{o:?}");
        }
    }

    #[test]
    fn umem_frame_bounds() {
        let u = Umem::new(2);
        // SAFETY: single-threaded test; no other reference to these frames.
        unsafe {
            assert_eq!(u.frame(0, 64).map(|f| f.len()), Some(64));
            assert!(u.frame(FRAME_SIZE as u64, FRAME_SIZE).is_some());
            assert!(u.frame(2 * FRAME_SIZE as u64, 64).is_none());
            assert!(u.frame(1, 64).is_none());
            assert!(u.frame(0, FRAME_SIZE + 1).is_none());
        }
    }
}
