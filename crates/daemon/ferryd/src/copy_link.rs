//! Copy links: a ferryd thread per link that maps both domains, copies each
//! frame from the sender's UMEM into a frame of the receiver's, and queues
//! it on the receiving NF's ring. This is what FLASH's kernel does for NFs
//! in different UMEMs; NFs themselves never map another domain's memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry_chain::frames::FrameCache;
use ferry_chain::plan::CopyLinkPlan;
use ferry_chain::shm::{self, c};
use ferry_ring::{Consumer, Desc, Notify, Producer};

use crate::domain::Domain;

const BURST: usize = 64;

struct Target {
    producer: Producer,
    tid: u32,
    pending: Vec<Desc>,
}

impl Target {
    /// Queues as many of the pending copies as the ring takes, waking its
    /// consumer, counted in `bt`; whether some are left.
    fn hand_on(&mut self, bt: shm::ThreadBlock<'_>) -> bool {
        let n = self.producer.enqueue_batch(&self.pending);
        if n > 0 && self.producer.wake_consumer().unwrap_or(false) {
            bt.add(c::WAKEUPS_SENT, 1);
        }
        bt.add(c::TO_NF, n as u64);
        self.pending.drain(..n);
        !self.pending.is_empty()
    }
}

/// How long a stopping copy link tries to hand on what it copied already.
const FLUSH_GRACE: Duration = Duration::from_secs(1);

/// Starts copy link `plan` between two of `domains` in thread `name`,
/// until `stop`. When stopped, it hands on what it copied already (given
/// room within [`FLUSH_GRACE`]; what is still pending then is left held,
/// and the next audit reclaims it: dropped) and returns its cached frames
/// to the pools. A killed ferryd's copy link may lose the burst it held.
pub fn start(
    domains: Arc<Vec<Domain>>,
    stop: Arc<AtomicBool>,
    plan: &CopyLinkPlan,
    name: String,
) -> Result<JoinHandle<()>> {
    let plan = plan.clone();
    let (from, to) = (&domains[plan.from_domain], &domains[plan.to_domain]);
    let mut consumer = from.ring(plan.ring).consumer()?;
    consumer.set_data_notify(Arc::new(from.data[plan.ring as usize].try_clone()?));
    consumer.set_room_notify(Arc::new(from.room[plan.ring as usize].try_clone()?));
    let mut targets = Vec::new();
    for (&r, &tid) in plan.to_rings.iter().zip(&plan.to_tids) {
        let mut p = to.ring(r).producer(plan.to_tid as u16)?;
        p.set_data_notify(Arc::new(to.data[r as usize].try_clone()?));
        p.set_room_notify(Arc::new(to.room[r as usize].try_clone()?));
        targets.push(Target { producer: p, tid, pending: Vec::with_capacity(BURST) });
    }
    from.block(plan.from_tid).set(shm::T_STATE, shm::STATE_ALIVE);
    to.block(plan.to_tid).set(shm::T_STATE, shm::STATE_ALIVE);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let (from, to) = (&domains[plan.from_domain], &domains[plan.to_domain]);
        let cache = |d: &Domain, tid: u32| {
            FrameCache::new(d.pool.clone(), d.owners.clone(), d.control.clone(), tid, d.plan.frame_size)
        };
        let mut link = Link {
            from,
            to,
            src: cache(from, plan.from_tid),
            dst: cache(to, plan.to_tid),
            bf: from.block(plan.from_tid),
            bt: to.block(plan.to_tid),
            targets,
            geometry: Geometry {
                from_frame: from.plan.frame_size as u64,
                from_len: from.umem.config().len() as u64,
                to_frame: to.plan.frame_size as u64,
                to_len: to.umem.config().len() as u64,
            },
        };
        link.run(&mut consumer, &stop);
    })?;
    Ok(thread)
}

/// A running copy link: the two domains, a frame cache in each, and the
/// copies pending for each of the receiving NF's rings.
struct Link<'d> {
    from: &'d Domain,
    to: &'d Domain,
    src: FrameCache,
    dst: FrameCache,
    bf: shm::ThreadBlock<'d>,
    bt: shm::ThreadBlock<'d>,
    targets: Vec<Target>,
    /// Both UMEMs' frame sizes and lengths, read once: every copied frame
    /// is checked against them.
    geometry: Geometry,
}

#[derive(Clone, Copy)]
struct Geometry {
    from_frame: u64,
    from_len: u64,
    to_frame: u64,
    to_len: u64,
}

impl Link<'_> {
    /// Copies bursts until `stop`, then hands on what it holds.
    fn run(&mut self, consumer: &mut Consumer, stop: &AtomicBool) {
        let mut acks = [0u64; 2];
        let mut descs = Vec::with_capacity(BURST);
        while !stop.load(Ordering::Acquire) {
            self.answer_pauses(&mut acks, stop);
            if let Some(i) = self.hand_on_pending() {
                self.bt.add(c::BP_BLOCKS, 1);
                let _ = self.targets[i].producer.wait_for_room(BURST as u64, Some(Duration::from_millis(20)));
                continue;
            }
            descs.clear();
            let n = consumer.dequeue_batch_with(BURST, &mut descs, |d| self.src.mark_mine(d.addr));
            if n == 0 {
                self.dst.spill_all();
                self.src.spill_all();
                self.bf.add(c::SLEEPS, 1);
                let _ = consumer.wait_for_data(Some(Duration::from_millis(50)));
                continue;
            }
            let _ = consumer.signal_room();
            self.bf.add(c::RX_RING, n as u64);
            for s in &descs {
                self.copy(s);
            }
        }
        self.flush();
    }

    /// Pause handshake with both domains (see ferry_chain::shm): a pause
    /// request is acknowledged once and waited out.
    fn answer_pauses(&self, acks: &mut [u64; 2], stop: &AtomicBool) {
        for (k, (dom, blk)) in [(self.from, self.bf), (self.to, self.bt)].into_iter().enumerate() {
            let req = &dom.control.as_slice()[shm::PAUSE_REQ];
            let p = req.load(Ordering::Acquire);
            if p != 0 && p != acks[k] {
                acks[k] = p;
                blk.set(shm::T_PAUSE_ACK, p);
                while req.load(Ordering::Acquire) == p && !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    /// Hands pending copies on; a dead receiver's are dropped and freed.
    /// Returns a target whose ring is full, if one is.
    fn hand_on_pending(&mut self) -> Option<usize> {
        let mut blocked = None;
        for (i, t) in self.targets.iter_mut().enumerate() {
            if t.pending.is_empty() {
                continue;
            }
            if self.to.block(t.tid).get(shm::T_STATE) == shm::STATE_DEAD {
                self.bt.add(c::DROP_DOWN, t.pending.len() as u64);
                for d in t.pending.drain(..) {
                    self.dst.free(d.addr);
                }
                continue;
            }
            if t.hand_on(self.bt) {
                blocked = blocked.or(Some(i));
            }
        }
        blocked
    }

    /// Copies the frame `s` describes into a fresh frame of the receiving
    /// domain and queues it for a target picked by flow hash.
    fn copy(&mut self, s: &Desc) {
        let Geometry { from_frame: fs_from, from_len, to_frame: fs_to, to_len } = self.geometry;
        let room = fs_from - s.addr % fs_from;
        if s.addr >= from_len || s.len as u64 > room || s.len as u64 > fs_to {
            self.bf.add(c::DROP_MALFORMED, 1);
            if s.addr < from_len {
                self.src.free(s.addr);
            }
            return;
        }
        let Some(f) = self.dst.alloc() else {
            self.bf.add(c::DROP_FULL, 1);
            self.src.free(s.addr);
            return;
        };
        // The receiving domain's NFs can write its pool: a frame address
        // from it is checked like any other before ferryd, as root, writes
        // there. A bad one is dropped, not freed.
        if f % fs_to != 0 || f + fs_to > to_len {
            self.bf.add(c::DROP_MALFORMED, 1);
            self.src.free(s.addr);
            return;
        }
        // SAFETY: both ranges were checked against their UMEMs; the source
        // frame is ours (dequeued), the destination frame is fresh from the
        // receiver's pool and inside its UMEM.
        let data = unsafe {
            let dst = self.to.umem.base().add(f as usize);
            std::ptr::copy_nonoverlapping(self.from.umem.base().add(s.addr as usize), dst, s.len as usize);
            std::slice::from_raw_parts(dst, s.len as usize)
        };
        self.src.free(s.addr);
        let n = self.targets.len();
        let i = if n > 1 { ferry_chain::flow_hash(data) as usize % n } else { 0 };
        self.targets[i].pending.push(Desc { addr: f, len: s.len, next_hop: 0, flags: 0 });
        self.bf.add(c::COPIED, 1);
    }

    /// On stop: hands on what it copied (within [`FLUSH_GRACE`]) and
    /// returns its cached frames to the pools.
    fn flush(&mut self) {
        let deadline = Instant::now() + FLUSH_GRACE;
        for t in self.targets.iter_mut() {
            while !t.pending.is_empty() && Instant::now() < deadline {
                if t.hand_on(self.bt) {
                    let _ = t.producer.wait_for_room(BURST as u64, Some(Duration::from_millis(20)));
                }
            }
        }
        self.dst.spill_all();
        self.src.spill_all();
        let _ = (self.from.data.first().map(|e| e.notify(1)), self.to.data.first().map(|e| e.notify(1)));
    }
}
