//! One NF data-path thread: its receive ring, its sockets, its out-links.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_chain::capture::Tap;
use ferry_chain::flow_hash;
use ferry_chain::frames::FrameCache;
use ferry_chain::shm::{self, c, ThreadBlock};
use ferry_chain::spec::{BackpressureMode, BackpressureSpec, DownPolicy, PollSpec};
use ferry_ring::{Consumer, Desc, EventFd, Notify, Producer, SharedWords};
use ferry_xsk::{Umem, XdpDesc, XskSocket};

use crate::packet::{Origin, Packet, ORPHANS};
use crate::spin::SpinWindow;
use crate::SdkError;

use ferry_chain::frames::CACHE_BATCH;
/// Empty polls between two returns of a busy thread's free frames to the
/// shared pool.
const BUSY_SPILL_EVERY: u32 = 1024;
/// Longest single block, so pause requests and stops are seen promptly.
const MAX_BLOCK: Duration = Duration::from_millis(50);
/// Longest block while frames wait on a TX ring for a kick (poll()'s
/// resolution is a millisecond).
const TX_RETRY: Duration = Duration::from_millis(1);

pub(crate) struct Target {
    pub(crate) producer: Producer,
    pub(crate) tid: u32,
    pub(crate) pending: Vec<Desc>,
}

pub(crate) enum Out {
    Nf {
        targets: Vec<Target>,
    },
    Copy {
        target: Target,
    },
    Port {
        sock: usize,
    },
    /// The kernel stack, through a TAP device (one write per frame).
    Kernel {
        tap: Arc<std::os::fd::OwnedFd>,
    },
}

pub(crate) struct PortSock {
    pub(crate) sock: XskSocket,
    /// The chain's index of its port (what a capture names).
    pub(crate) port: u16,
    pub(crate) pending: Vec<XdpDesc>,
    /// Frames to keep on the fill ring (0 for a TX-only port).
    pub(crate) fill_target: u32,
    pub(crate) on_fill: u32,
    /// The last flush's kicks made the kernel take frames.
    pub(crate) tx_moving: bool,
}

/// Where a flush stopped.
#[derive(Debug, Clone, Copy)]
enum Blocked {
    Ring { out: usize, target: usize },
    DeadTarget,
    Port,
}

/// One data-path thread of an NF. Not `Send` once running: packets borrow
/// its UMEM mapping. Create it with [`crate::Nf::run`] or `Nf::take_threads`.
pub struct NfThread {
    pub(crate) nf_name: String,
    pub(crate) index: u32,
    pub(crate) tid: u32,
    pub(crate) control: SharedWords,
    /// The domain's capture rings (this thread writes its own).
    pub(crate) capture: SharedWords,
    /// The taps ferryd armed, read once per burst, and whether any is.
    pub(crate) taps: [Option<Tap>; shm::TAP_SLOTS],
    pub(crate) tapping: bool,
    pub(crate) cache: FrameCache,
    pub(crate) consumer: Consumer,
    pub(crate) outs: Vec<Out>,
    pub(crate) ports: Vec<PortSock>,
    pub(crate) umem: Arc<Umem>,
    pub(crate) frame_size: u64,
    pub(crate) batch: usize,
    pub(crate) poll: PollSpec,
    pub(crate) bp: BackpressureSpec,
    pub(crate) down: DownPolicy,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) last_ack: u64,
    pub(crate) last_busy: Instant,
    /// The last non-empty burst reached `busy_threshold`.
    pub(crate) busy: bool,
    /// Polls in a row that found nothing since then (`idle_polls`).
    pub(crate) empty_polls: u32,
    /// How long to keep polling through an idle gap (`poll.spin_us`).
    pub(crate) spin: SpinWindow,
    pub(crate) scratch_desc: Vec<Desc>,
    pub(crate) scratch_xdp: Vec<XdpDesc>,
    pub(crate) scratch_addr: Vec<u64>,
    /// Raised by a [`Waker`]; `recv_burst` returns early when it is set.
    pub(crate) woken: Arc<AtomicBool>,
    /// A clone of the receive ring's data eventfd, for [`Waker`]s.
    pub(crate) wake_fd: Arc<EventFd>,
}

/// Makes an [`NfThread`]'s [`NfThread::recv_burst`] return (with 0
/// packets) instead of waiting for input: for NFs that also have work
/// coming from their own helper threads (e.g. results to send). `Send`
/// and `Sync`; get one with [`NfThread::waker`].
#[derive(Clone)]
pub struct Waker {
    woken: Arc<AtomicBool>,
    wake_fd: Arc<EventFd>,
}

impl Waker {
    /// The thread's current or next `recv_burst` returns as soon as it has
    /// flushed its sends and found no input. Cheap when repeated: only the
    /// first call after that return writes the thread's eventfd.
    pub fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            let _ = self.wake_fd.notify(1);
        }
    }
}

impl Waker {
    /// Wakes the thread every `period` until the [`Ticker`] is dropped:
    /// for an NF with timers to run (expiry, exports) while no frames come.
    pub fn every(self, period: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                self.wake();
            }
        });
        Ticker { stop, thread: Some(thread) }
    }
}

/// A thread waking an NF thread periodically ([`Waker::every`]); stopped
/// and joined on drop.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").field("woken", &self.woken.load(Ordering::Relaxed)).finish()
    }
}

// SAFETY: an NfThread is built on one thread and moved once to the thread
// that runs it; everything inside is either owned or shared memory used
// through atomics. Packets (which are !Send) are what pin frames to it.
unsafe impl Send for NfThread {}

impl NfThread {
    pub fn nf_name(&self) -> &str {
        &self.nf_name
    }

    /// Index of this thread within its NF.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Number of out-links.
    pub fn out_links(&self) -> usize {
        self.outs.len()
    }

    /// A handle other threads use to make `recv_burst` return early.
    pub fn waker(&self) -> Waker {
        Waker { woken: self.woken.clone(), wake_fd: self.wake_fd.clone() }
    }

    fn block(&self) -> ThreadBlock<'_> {
        ThreadBlock::of(self.control.as_slice(), self.tid).expect("tid validated at connect")
    }

    /// Publishes NF-specific counter `i` (names given at connect).
    pub fn set_nf_counter(&self, i: usize, value: u64) {
        self.block().nf_counter(i).store(value, Ordering::Relaxed);
    }

    #[inline]
    fn count(&self, i: usize, n: u64) {
        if n > 0 {
            self.block().add(i, n);
        }
    }

    /// The longest frame the domain's frames hold.
    pub fn frame_size(&self) -> usize {
        self.frame_size as usize
    }

    /// Allocates an empty packet of `len` bytes (for sources and replies
    /// that need a new frame). None when the domain has no free frame.
    pub fn alloc(&mut self, len: usize) -> Option<Packet> {
        if len > self.frame_size as usize {
            return None;
        }
        let f = self.cache.alloc()?;
        self.count(c::ALLOC, 1);
        // SAFETY: f is a whole frame of our UMEM, now owned by this thread.
        Some(unsafe { Packet::new(self.umem.base(), f, len as u32, self.frame_size as u32, Origin::Alloc) })
    }

    /// Drops a packet (counted as `drop_nf`).
    pub fn drop_packet(&mut self, pkt: Packet) {
        let (addr, _, _) = pkt.into_raw();
        self.count(c::DROP_NF, 1);
        self.cache.free(addr);
    }

    /// Sends a packet on out-link `hop` (order of the chain file's links).
    /// Frames queue per destination and move in batches; see `recv_burst`.
    pub fn send(&mut self, pkt: Packet, hop: usize) {
        if self.tapping {
            self.copy_where(pkt.data(), |t| t.takes_output(Some(hop as u16), self.port_of_hop(hop)));
        }
        let (addr, len, _) = pkt.into_raw();
        let desc = Desc { addr, len, next_hop: hop as u16, flags: 0 };
        match self.outs.get(hop) {
            None => {
                self.count(c::DROP_BAD_HOP, 1);
                self.cache.free(addr);
            }
            Some(Out::Nf { targets }) => {
                let t = if targets.len() > 1 {
                    // SAFETY: the frame is ours until queued; read-only peek.
                    // The whole frame: the flow parse checks the IP lengths
                    // against it (and reads the headers only).
                    let data = unsafe { std::slice::from_raw_parts(self.umem.base().add(addr as usize), len as usize) };
                    flow_hash(data) as usize % targets.len()
                } else {
                    0
                };
                self.queue_ring(hop, t, desc);
            }
            Some(Out::Copy { .. }) => self.queue_ring(hop, 0, desc),
            Some(Out::Port { sock }) => self.queue_port(*sock, addr, len),
            Some(Out::Kernel { tap }) => {
                use std::os::fd::AsRawFd;
                // SAFETY: writes `len` bytes of a frame we own.
                let r = unsafe {
                    libc::write(
                        tap.as_raw_fd(),
                        self.umem.base().add(addr as usize) as *const libc::c_void,
                        len as usize,
                    )
                };
                let counter = if r == len as isize { c::TO_KERNEL } else { c::DROP_FULL };
                self.count(counter, 1);
                self.cache.free(addr);
            }
        }
    }

    /// Sends every packet of `pkts` on out-link `hop`, leaving `pkts`
    /// empty: as [`NfThread::send`] on each, but a burst bound for one
    /// ring is queued in one go rather than one call per packet.
    pub fn send_all(&mut self, pkts: &mut Vec<Packet>, hop: usize) {
        let one_ring = match self.outs.get(hop) {
            Some(Out::Nf { targets }) => targets.len() == 1,
            Some(Out::Copy { .. }) => true,
            _ => false,
        };
        if !one_ring {
            for pkt in pkts.drain(..) {
                self.send(pkt, hop);
            }
            return;
        }
        if self.tapping {
            pkts.iter().for_each(|pkt| self.copy_where(pkt.data(), |t| t.takes_output(Some(hop as u16), None)));
        }
        // As `send` does frame by frame: a full batch goes at once, so the
        // batch size and the backpressure check per batch still hold.
        let batch = self.batch;
        let mut frames = pkts.drain(..).map(|pkt| {
            let (addr, len, _) = pkt.into_raw();
            Desc { addr, len, next_hop: hop as u16, flags: 0 }
        });
        loop {
            let target = self.target_mut(hop, 0);
            let room = batch.saturating_sub(target.pending.len()).max(1);
            let before = target.pending.len();
            target.pending.extend(frames.by_ref().take(room));
            if target.pending.len() == before {
                return;
            }
            if target.pending.len() >= batch {
                let _ = self.flush_target(hop, 0);
            }
        }
    }

    /// Sends a packet back out of the port it arrived on; one that came
    /// from another NF goes to out-link 0.
    pub fn reply(&mut self, pkt: Packet) {
        match pkt.origin {
            Origin::Port(i) => {
                if self.tapping {
                    let port = self.ports[i as usize].port;
                    self.copy_where(pkt.data(), |t| t.takes_output(None, Some(port)));
                }
                let (addr, len, _) = pkt.into_raw();
                self.queue_port(i as usize, addr, len);
            }
            _ => self.send(pkt, 0),
        }
    }

    /// Copies the frames a fused NF's stage `stage` passes on, if a
    /// capture asks for them (see `ferry_chain::capture`).
    pub fn tap_stage(&self, stage: usize, pkts: &[Packet]) {
        if self.tapping {
            let at = ferry_chain::capture::TapAt::Stage { stage: stage as u16 };
            pkts.iter().for_each(|pkt| self.copy_where(pkt.data(), |t| t.at == at));
        }
    }

    /// The port out-link `hop` leads to, if it leads to a port.
    fn port_of_hop(&self, hop: usize) -> Option<u16> {
        match self.outs.get(hop) {
            Some(Out::Port { sock }) => Some(self.ports[*sock].port),
            _ => None,
        }
    }

    /// Puts a copy of `frame` (its first `snaplen` bytes) in the capture
    /// ring of every tap that `takes`; a full ring loses the copy, never
    /// the frame.
    #[cold]
    fn copy_where(&self, frame: &[u8], takes: impl Fn(&Tap) -> bool) {
        for (slot, tap) in self.taps.iter().enumerate() {
            let Some(tap) = tap.filter(|t| takes(t)) else { continue };
            let snap = if tap.snaplen == 0 { frame.len() } else { frame.len().min(tap.snaplen.into()) };
            if let Some(ring) = shm::capture_ring(self.capture.as_slice(), self.tid, slot) {
                ring.push(tap.meta(ferry_sys::monotonic_ns(), frame.len()), &frame[..snap]);
            }
        }
    }

    /// Reads the tap words ferryd writes (once per burst).
    fn read_taps(&mut self) {
        let block = self.block();
        let taps: [Option<Tap>; shm::TAP_SLOTS] = std::array::from_fn(|i| Tap::decode(block.get(shm::T_TAPS + i)));
        self.tapping = taps.iter().any(Option::is_some);
        self.taps = taps;
    }

    /// Queues a descriptor for target `t` of out-link `out`; a full batch
    /// goes at once.
    fn queue_ring(&mut self, out: usize, t: usize, desc: Desc) {
        let batch = self.batch;
        let target = self.target_mut(out, t);
        target.pending.push(desc);
        if target.pending.len() >= batch {
            let _ = self.flush_target(out, t);
        }
    }

    /// Queues a frame for socket `s`'s TX ring; a full batch goes at once.
    fn queue_port(&mut self, s: usize, addr: u64, len: u32) {
        self.ports[s].pending.push(XdpDesc { addr, len, options: 0 });
        if self.ports[s].pending.len() >= self.batch {
            let _ = self.flush_port(s);
        }
    }

    fn target_mut(&mut self, out: usize, t: usize) -> &mut Target {
        match &mut self.outs[out] {
            Out::Nf { targets } => &mut targets[t],
            Out::Copy { target } => target,
            Out::Port { .. } | Out::Kernel { .. } => unreachable!("no ring target"),
        }
    }

    /// Moves a target's pending descriptors into its ring: as many as fit
    /// (the rest stay queued), or none while the ring is over the
    /// backpressure threshold.
    fn flush_target(&mut self, out: usize, t: usize) -> Option<Blocked> {
        let bp = self.bp;
        let down = self.down;
        let is_copy = matches!(self.outs[out], Out::Copy { .. });
        let target = self.target_mut(out, t);
        if target.pending.is_empty() {
            return None;
        }
        let tid = target.tid;
        // A copy link's target is a ferryd copy link, which does not die alone.
        let dead = !is_copy
            && ThreadBlock::of(self.control.as_slice(), tid).is_some_and(|b| b.get(shm::T_STATE) == shm::STATE_DEAD);
        if dead {
            if down == DownPolicy::Wait {
                return Some(Blocked::DeadTarget);
            }
            let frames: Vec<Desc> = std::mem::take(&mut self.target_mut(out, t).pending);
            self.count(c::DROP_DOWN, frames.len() as u64);
            for d in frames {
                self.cache.free(d.addr);
            }
            return None;
        }
        let target = self.target_mut(out, t);
        let ring = target.producer.ring();
        if bp.mode != BackpressureMode::None {
            let limit = (bp.threshold * ring.capacity() as f64) as u64;
            if ring.fill_level() >= limit.max(1) {
                return Some(Blocked::Ring { out, target: t });
            }
        }
        let n = target.producer.enqueue_batch(&target.pending);
        let woke = n > 0 && target.producer.wake_consumer().unwrap_or(false);
        target.pending.drain(..n);
        let left = target.pending.len();
        let rest: Vec<Desc> = if left > 0 && bp.mode == BackpressureMode::None {
            std::mem::take(&mut target.pending)
        } else {
            Vec::new()
        };
        self.count(if is_copy { c::TO_COPY } else { c::TO_NF }, n as u64);
        self.count(c::WAKEUPS_SENT, woke as u64);
        if !rest.is_empty() {
            self.count(c::DROP_FULL, rest.len() as u64);
            for d in rest {
                self.cache.free(d.addr);
            }
            return None;
        }
        (left > 0).then_some(Blocked::Ring { out, target: t })
    }

    /// Puts a socket's pending frames on its TX ring and kicks the kernel:
    /// after new frames, and whenever the kernel asks for a wakeup while
    /// frames wait on the ring. In copy mode (which always asks) the
    /// kernel sends only inside a kick (a sendto(), or the poll() a
    /// sleeping thread makes), 32 frames at most, so a kick that left
    /// frames behind is repeated on the next flush.
    fn flush_port(&mut self, s: usize) -> Option<Blocked> {
        let p = &mut self.ports[s];
        let tx = p.sock.tx_ring()?;
        let n = if p.pending.is_empty() { 0 } else { tx.produce(&p.pending) };
        p.pending.drain(..n);
        let kick = tx.pending() > 0 && (n > 0 || tx.needs_wakeup());
        p.tx_moving = kick && p.sock.kick_tx_until_sent().unwrap_or(false);
        let left = p.pending.len();
        self.count(c::TX_PORT, n as u64);
        (left > 0).then_some(Blocked::Port)
    }

    /// Flushes every out-link; returns the first one that could not drain.
    fn flush_all(&mut self) -> Option<Blocked> {
        let mut blocked = None;
        for o in 0..self.outs.len() {
            let targets = match &self.outs[o] {
                Out::Nf { targets } => targets.len(),
                Out::Copy { .. } => 1,
                Out::Port { .. } | Out::Kernel { .. } => 0,
            };
            for t in 0..targets {
                if let Some(b) = self.flush_target(o, t) {
                    blocked = blocked.or(Some(b));
                }
            }
        }
        for s in 0..self.ports.len() {
            if let Some(b) = self.flush_port(s) {
                blocked = blocked.or(Some(b));
            }
        }
        blocked
    }

    /// Sends everything queued now (also done by every `recv_burst`).
    pub fn flush(&mut self) {
        self.take_orphans();
        let _ = self.flush_all();
    }

    fn take_orphans(&mut self) {
        let orphans: Vec<u64> = ORPHANS.with(|o| std::mem::take(&mut *o.borrow_mut()));
        self.count(c::DROP_NF, orphans.len() as u64);
        for a in orphans {
            self.cache.free(a);
        }
    }

    /// Completed transmissions go back to the cache.
    fn reap_completions(&mut self) {
        let mut done = std::mem::take(&mut self.scratch_addr);
        for s in 0..self.ports.len() {
            done.clear();
            if let Some(comp) = self.ports[s].sock.comp_ring() {
                comp.consume(1024, &mut done);
            }
            self.count(c::TX_COMPLETED, done.len() as u64);
            for &a in &done {
                self.cache.free(a);
            }
        }
        self.scratch_addr = done;
    }

    /// Tops up every receiving socket's fill ring from the pool.
    fn refill(&mut self) {
        for s in 0..self.ports.len() {
            let want = self.ports[s].fill_target.saturating_sub(self.ports[s].on_fill);
            if want < CACHE_BATCH as u32 / 2 {
                continue;
            }
            let mut frames = Vec::with_capacity(want as usize);
            while frames.len() < want as usize {
                match self.cache.alloc() {
                    Some(f) => frames.push(f),
                    None => break,
                }
            }
            let n = self.ports[s].sock.fill_ring().map_or(0, |f| f.produce(&frames));
            self.ports[s].on_fill += n as u32;
            for &f in &frames[n..] {
                self.cache.free(f);
            }
        }
    }

    /// Reads up to `max` packets from the sockets and the receive ring.
    fn read_input(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        let base = self.umem.base();
        let umem_len = self.umem.config().len() as u64;
        let fs = self.frame_size;
        let napi_poll = self.poll.prefer_busy_poll.is_some();
        let mut got = 0;
        for s in 0..self.ports.len() {
            if got >= max {
                break;
            }
            let p = &mut self.ports[s];
            if p.fill_target == 0 {
                continue;
            }
            if napi_poll {
                // Preferred busy polling: the NAPI runs only when an NF
                // syscall (or, late, the device's flush timer) runs it.
                p.sock.kick_rx();
            } else if p.sock.fill_needs_wakeup() {
                p.sock.poll_rx(0);
            }
            let mut descs = std::mem::take(&mut self.scratch_xdp);
            descs.clear();
            let n = p.sock.rx_ring().map_or(0, |rx| rx.consume(max - got, &mut descs));
            p.on_fill = p.on_fill.saturating_sub(n as u32);
            if self.tapping {
                let port = p.port;
                for d in &descs {
                    // SAFETY: the kernel gave us this frame of our UMEM.
                    let data = unsafe { std::slice::from_raw_parts(base.add(d.addr as usize), d.len as usize) };
                    self.copy_where(data, |t| t.takes_input(Some(port)));
                }
            }
            for d in &descs {
                let room = (fs - d.addr % fs) as u32;
                // SAFETY: the kernel gave us this frame of our UMEM.
                out.push(unsafe { Packet::new(base, d.addr, d.len, room, Origin::Port(s as u16)) });
            }
            self.count(c::RX_PORT, n as u64);
            got += n;
            self.scratch_xdp = descs;
        }
        if got < max {
            let mut descs = std::mem::take(&mut self.scratch_desc);
            descs.clear();
            let cache = &self.cache;
            let n = self.consumer.dequeue_batch_with(max - got, &mut descs, |d| cache.mark_mine(d.addr));
            if n > 0 {
                let _ = self.consumer.signal_room();
            }
            let mut bad = 0;
            for d in &descs {
                let room = fs - d.addr % fs;
                if d.addr >= umem_len || d.len as u64 > room {
                    // A garbled descriptor: count it, free the frame if it is one.
                    bad += 1;
                    if d.addr < umem_len {
                        self.cache.free(d.addr);
                    }
                    continue;
                }
                // SAFETY: in range, and handed to us by the ring.
                let pkt = unsafe { Packet::new(base, d.addr, d.len, room as u32, Origin::Ring) };
                if self.tapping {
                    self.copy_where(pkt.data(), |t| t.takes_input(None));
                }
                out.push(pkt);
            }
            self.count(c::RX_RING, n as u64 - bad);
            self.count(c::DROP_MALFORMED, bad);
            got += n - bad as usize;
            self.scratch_desc = descs;
        }
        got
    }

    /// Answers a pause request from ferryd (see `ferry_chain::shm`).
    fn maybe_pause(&mut self) {
        let req = &self.control.as_slice()[shm::PAUSE_REQ];
        let p = req.load(Ordering::Acquire);
        if p == 0 || p == self.last_ack {
            return;
        }
        self.last_ack = p;
        self.block().set(shm::T_PAUSE_ACK, p);
        while req.load(Ordering::Acquire) == p && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn throttle(&mut self, b: Blocked) {
        match b {
            Blocked::Ring { out, target } => match self.bp.mode {
                BackpressureMode::Sleep => {
                    self.count(c::BP_SLEEPS, 1);
                    std::thread::sleep(Duration::from_micros(self.bp.sleep_us));
                }
                _ => {
                    self.count(c::BP_BLOCKS, 1);
                    let t = self.target_mut(out, target);
                    let cap = t.producer.ring().capacity();
                    let need = cap - (self.bp.threshold * cap as f64) as u64 + 1;
                    let t = self.target_mut(out, target);
                    let _ = t.producer.wait_for_room(need, Some(MAX_BLOCK));
                }
            },
            Blocked::DeadTarget => std::thread::sleep(Duration::from_millis(1)),
            Blocked::Port => std::thread::yield_now(),
        }
    }

    /// One round of the framework's work without reading input, for NFs
    /// that only produce (sources): flush, backpressure, completions, pause.
    pub fn service(&mut self) -> Result<(), SdkError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(SdkError::Stopped { reason: "ferryd stopped the NF or went away" });
        }
        self.maybe_pause();
        self.read_taps();
        self.take_orphans();
        self.reap_completions();
        if let Some(b) = self.flush_all() {
            self.throttle(b);
        }
        Ok(())
    }

    /// Receives a burst of up to `max` packets into `out`, doing all the
    /// framework's work first (see the crate docs). Blocks while idle.
    /// Returns `Ok(0)` when there is no input and a [`Waker`] was woken
    /// (never while backpressure holds the thread), and
    /// `Err(SdkError::Stopped)` when the NF must exit.
    pub fn recv_burst(&mut self, out: &mut Vec<Packet>, max: usize) -> Result<usize, SdkError> {
        let max = max.clamp(1, 1024);
        let idle = Duration::from_micros(self.poll.idle_timeout_us);
        let idle_polls = self.poll.idle_polls.unwrap_or(u32::MAX);
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(SdkError::Stopped { reason: "ferryd stopped the NF or went away" });
            }
            self.maybe_pause();
            let loops = self.block().word(shm::T_LOOPS);
            loops.store(loops.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            self.read_taps();
            self.take_orphans();
            self.reap_completions();
            if let Some(b) = self.flush_all() {
                // Backpressure: take no new input until downstream has room.
                self.throttle(b);
                continue;
            }
            self.refill();
            let n = self.read_input(out, max);
            if n > 0 {
                if self.spin.in_gap() {
                    self.spin.input(Instant::now());
                }
                // Smart polling (FLASH §4): only a busy burst keeps the
                // thread polling through the next empty ones.
                self.busy = n as u32 >= self.poll.busy_threshold;
                if self.busy {
                    self.last_busy = Instant::now();
                }
                self.empty_polls = 0;
                return Ok(n);
            }
            if self.woken.swap(false, Ordering::AcqRel) {
                return Ok(0);
            }
            if self.poll.busy {
                // Busy mode: no sleep, no yield; the NF has CPUs of its own.
                // Now and then the free frames it holds go back to the
                // shared pool, as a sleeping thread's do.
                self.empty_polls = self.empty_polls.wrapping_add(1);
                if self.empty_polls % BUSY_SPILL_EVERY == 0 {
                    self.cache.spill_all();
                }
                std::hint::spin_loop();
                continue;
            }
            let spinning = self.spin.enabled() && self.spin.keep_polling(Instant::now());
            if self.busy && self.empty_polls < idle_polls && self.last_busy.elapsed() < idle {
                self.empty_polls += 1;
                std::thread::yield_now();
                continue;
            }
            if spinning && self.empty_polls < idle_polls {
                // Within the window the recent gaps sized: a frame is
                // likely soon, and catching it awake saves the wake-up.
                self.empty_polls += 1;
                std::hint::spin_loop();
                continue;
            }
            self.empty_polls = 0;
            self.busy = false;
            self.count(c::SLEEPS, 1);
            // A sleeping thread must not sit on free frames others need.
            self.cache.spill_all();
            // Frames a kick left on a TX ring while the kernel was taking
            // them wait for the next kick: sleep briefly, not for the full
            // block. (A kernel that takes none, as on a link that is down,
            // gets the full block.)
            let unsent =
                self.ports.iter_mut().any(|p| p.tx_moving && p.sock.tx_ring().is_some_and(|t| t.pending() > 0));
            let _ = self.consumer.wait_for_data(Some(if unsent { TX_RETRY } else { MAX_BLOCK }));
        }
    }
}
