//! A trust domain's memory: the UMEM, the shared region (rings, pool,
//! control words, owner table) and the eventfds of its rings; and the audit
//! that pauses the domain, reclaims dead threads' frames and checks that
//! every frame is in exactly one place.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferry_chain::plan::DomainPlan;
use ferry_chain::proto::AuditReport;
use ferry_chain::shm::{self, ThreadBlock, NO_OWNER};
use ferry_ring::{EventFd, FramePool, MpscRing, Notify, PoolConfig, RegionLayout, RingConfig, SharedWords, ShmRegion};
use ferry_xsk::{Umem, UmemConfig};

use crate::persist::{self, DomainIds, Harvest};
use crate::spawn;

/// How far an adopting ferryd's first pause epoch lies past any it finds.
const EPOCH_MARGIN: u64 = 1 << 16;

pub struct Domain {
    pub plan: DomainPlan,
    pub umem: Arc<Umem>,
    pub region: ShmRegion,
    /// Per ring: data signal (its consumer waits) and room signal (its
    /// producers wait).
    pub data: Vec<EventFd>,
    pub room: Vec<EventFd>,
    pub control: SharedWords,
    pub owners: SharedWords,
    pub pool: FramePool,
    /// What ferryd alone knows of the threads; its lock serialises audits
    /// and attaches.
    life: Mutex<Life>,
}

/// The audit's own record, kept out of the shared memory NFs can write.
struct Life {
    /// Pause epochs.
    epoch: u64,
    /// Per tid: the process running it (None for never-attached NF threads
    /// and for ferryd's copy links, which die only with ferryd).
    procs: Vec<Option<Process>>,
}

struct Process {
    /// None: a thread found dead when a persistent ferryd adopted its
    /// domain (its process had gone while no ferryd watched).
    pidfd: Option<Arc<OwnedFd>>,
    /// The thread's receive ring, reset when it dies.
    ring: u32,
}

impl Domain {
    /// The region a domain of `plan` has.
    fn layout(plan: &DomainPlan) -> Result<RegionLayout> {
        let producers = u16::try_from(plan.tids.max(1)).context("too many threads")?;
        let ring = RingConfig::new(plan.ring_size, producers)?.with_low_watermark(plan.ring_size / 2)?;
        let mut layout = RegionLayout::new();
        for _ in 0..plan.rings {
            layout = layout.ring(ring);
        }
        let layout = layout.pool(PoolConfig::new(plan.frames)?).words(shm::control_words(plan.tids)).words(plan.frames);
        Ok(layout)
    }

    pub fn create(plan: &DomainPlan) -> Result<Domain> {
        let cfg = UmemConfig { frame_count: plan.frames, frame_size: plan.frame_size, headroom: 0 };
        let umem = Arc::new(Umem::create(&format!("ferry-{}", plan.name), cfg).context("creating the UMEM")?);
        let region = ShmRegion::create(&Self::layout(plan)?).context("creating the shared region")?;
        let owners = region.words(shm::OWNER_WORDS)?;
        for w in owners.as_slice() {
            w.store(NO_OWNER, Ordering::Relaxed);
        }
        let frames: Vec<u64> = (0..plan.frames).map(|i| umem.frame_addr(i)).collect();
        region.pool(shm::POOL)?.seed(&frames)?;
        let mut data = Vec::new();
        let mut room = Vec::new();
        for _ in 0..plan.rings {
            data.push(EventFd::new()?);
            room.push(EventFd::new_semaphore()?);
        }
        Self::assemble(plan, umem, region, data, room)
    }

    /// The domain of a chain the ferryd before this one set up, from the
    /// objects taken from one of its NFs (`persist::harvest`). Nothing in
    /// the memory is reset: the NFs never stopped using it.
    pub fn adopt(plan: &DomainPlan, h: Harvest) -> Result<Domain> {
        let cfg = UmemConfig { frame_count: plan.frames, frame_size: plan.frame_size, headroom: 0 };
        let umem = Arc::new(Umem::from_fd(h.umem, cfg).context("mapping the UMEM")?);
        let region = ShmRegion::from_fd(h.region).context("mapping the shared region")?;
        if region.layout() != &Self::layout(plan)? {
            bail!("domain {}: the region's layout is not the one its plan gives", plan.name);
        }
        let wrap = |fds: Vec<std::os::fd::OwnedFd>| -> Result<Vec<EventFd>> {
            Ok(fds.into_iter().map(EventFd::from_owned).collect::<Result<_, _>>()?)
        };
        let dom = Self::assemble(plan, umem, region, wrap(h.data)?, wrap(h.room)?)?;
        // A thread takes a pause request equal to the last one it answered
        // for one it answered already (and its answer is still there): the
        // epochs go on past the highest answered or asked, never again from
        // 0, with a margin for a thread that read a request it has not
        // answered yet.
        let answered = (0..plan.tids).map(|t| dom.block(t).get(shm::T_PAUSE_ACK)).max().unwrap_or(0);
        let asked = dom.control.as_slice()[shm::PAUSE_REQ].load(Ordering::Acquire);
        dom.life.lock().expect("audit lock").epoch = answered.max(asked).wrapping_add(EPOCH_MARGIN);
        Ok(dom)
    }

    fn assemble(
        plan: &DomainPlan,
        umem: Arc<Umem>,
        region: ShmRegion,
        data: Vec<EventFd>,
        room: Vec<EventFd>,
    ) -> Result<Domain> {
        let pool = region.pool(shm::POOL)?;
        let control = region.words(shm::CONTROL_WORDS)?;
        let owners = region.words(shm::OWNER_WORDS)?;
        let life = Life { epoch: 0, procs: (0..plan.tids).map(|_| None).collect() };
        Ok(Domain { plan: plan.clone(), umem, region, data, room, control, owners, pool, life: Mutex::new(life) })
    }

    /// What the kernel calls its memory and eventfds (for the state a
    /// persistent ferryd leaves; needs eventfd ids in fdinfo).
    pub fn ids(&self) -> Result<DomainIds> {
        persist::domain_ids(self.umem.as_fd(), self.region.fd(), &self.data, &self.room)
    }

    pub fn block(&self, tid: u32) -> ThreadBlock<'_> {
        ThreadBlock::of(self.control.as_slice(), tid).expect("tid from the plan")
    }

    pub fn ring(&self, i: u32) -> MpscRing {
        self.region.ring(i as usize).expect("ring from the plan")
    }

    fn wake_everyone(&self) {
        for e in &self.data {
            let _ = e.notify(1);
        }
        for e in &self.room {
            let _ = e.notify(8);
        }
    }

    /// Marks NF threads `threads` (tid, receive ring) alive, run by process
    /// `pid` (`pidfd`). Under the audit lock, so no audit sees a thread half
    /// attached. An audit asks the pidfd, not /proc or the shared memory,
    /// whether the process still lives.
    ///
    /// A new process starts from zero; an adopted one (`fresh` false) keeps
    /// the counters it has been counting all along.
    pub fn attach(&self, threads: &[(u32, u32)], pid: u32, pidfd: Arc<OwnedFd>, fresh: bool) {
        let mut life = self.life.lock().expect("audit lock");
        for &(tid, ring) in threads {
            let b = self.block(tid);
            if fresh {
                b.reset_counters();
            }
            b.set(shm::T_PID, pid as u64);
            life.procs[tid as usize] = Some(Process { pidfd: Some(pidfd.clone()), ring });
            b.set(shm::T_STATE, shm::STATE_ALIVE);
        }
    }

    /// Marks NF threads `threads` (tid, receive ring) dead: their process
    /// exited while no ferryd watched. The next audit reclaims their
    /// frames and resets their rings.
    pub fn mark_dead(&self, threads: &[(u32, u32)]) {
        let mut life = self.life.lock().expect("audit lock");
        for &(tid, ring) in threads {
            life.procs[tid as usize] = Some(Process { pidfd: None, ring });
            self.block(tid).set(shm::T_STATE, shm::STATE_DEAD);
        }
    }

    /// Whether thread `tid` runs in a process that has exited.
    fn process_exited(life: &Life, tid: u32) -> bool {
        life.procs[tid as usize].as_ref().and_then(|p| p.pidfd.as_ref()).is_some_and(|fd| spawn::pidfd_exited(fd, 0))
    }

    /// Pauses the domain, reclaims the frames of every dead thread, resets
    /// their receive rings, checks conservation and resumes.
    ///
    /// A thread is dead if it is in `dead` (ferryd saw its NF's connection
    /// close and its process exit), if it was marked dead before and not
    /// attached again, or if its process exits before it acknowledged the
    /// pause. The last case is what lets any number of NFs die together,
    /// or during an audit: a dead thread never acknowledges, and waiting
    /// for it would give up without reclaiming anything. Reclaiming a dead
    /// thread twice is harmless (its frames are already back and its ring
    /// is empty), so every audit reclaims all of them.
    ///
    /// If a live thread does not acknowledge within two seconds (stopped,
    /// or kept off its CPU), the audit touches nothing and reports it in
    /// `unresponsive`; callers that need the reclaim try again.
    pub fn audit(&self, dead: &[u32]) -> AuditReport {
        let mut life = self.life.lock().expect("audit lock");
        // 0 means "no pause": skipped when the count wraps.
        life.epoch = life.epoch.wrapping_add(1).max(1);
        let ep = life.epoch;
        let ctl = self.control.as_slice();
        for &t in dead {
            self.block(t).set(shm::T_STATE, shm::STATE_DEAD);
        }
        ctl[shm::PAUSE_REQ].store(ep, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut waiting: Vec<u32> =
            (0..self.plan.tids).filter(|&t| self.block(t).get(shm::T_STATE) == shm::STATE_ALIVE).collect();
        loop {
            waiting.retain(|&t| {
                let b = self.block(t);
                if b.get(shm::T_STATE) != shm::STATE_ALIVE || b.get(shm::T_PAUSE_ACK) == ep {
                    return false;
                }
                if Self::process_exited(&life, t) {
                    b.set(shm::T_STATE, shm::STATE_DEAD);
                    return false;
                }
                true
            });
            if waiting.is_empty() || Instant::now() >= deadline {
                break;
            }
            self.wake_everyone();
            std::thread::sleep(Duration::from_micros(300));
        }
        let mut report = AuditReport {
            domain: self.plan.name.clone(),
            frames_total: self.plan.frames as u64,
            unresponsive: waiting.clone(),
            ..Default::default()
        };
        if !waiting.is_empty() {
            // Never touch memory a running thread may be using.
            ctl[shm::PAUSE_REQ].store(0, Ordering::Release);
            self.wake_everyone();
            return report;
        }
        let (mut dead, mut live) = (Vec::new(), Vec::new());
        for t in 0..self.plan.tids {
            match self.block(t).get(shm::T_STATE) {
                shm::STATE_DEAD => dead.push(t),
                shm::STATE_ALIVE => live.push(t),
                _ => {}
            }
        }
        let dead_rings: Vec<u32> =
            dead.iter().filter_map(|&t| life.procs[t as usize].as_ref().map(|p| p.ring)).collect();
        for &t in &dead {
            for r in 0..self.plan.rings {
                self.ring(r).repair_after_producer_death(t as u16);
            }
        }
        let fs = self.plan.frame_size as u64;
        let n = self.plan.frames as usize;
        let mut place = vec![0u8; n];
        let in_pool = self.pool.snapshot();
        let mut keep: Vec<u64> = Vec::with_capacity(n);
        let mut dup = 0u64;
        for &a in &in_pool {
            let i = (a / fs) as usize;
            if i < n {
                if place[i] != 0 {
                    dup += 1;
                    continue;
                }
                place[i] = 1;
                keep.push(a - a % fs);
            }
        }
        let dead_ring_set: HashSet<u32> = dead_rings.iter().copied().collect();
        let mut in_dead_ring = vec![false; n];
        for r in 0..self.plan.rings {
            let ring = self.ring(r);
            for d in ring.snapshot() {
                let i = (d.addr / fs) as usize;
                if i >= n {
                    continue;
                }
                if dead_ring_set.contains(&r) {
                    in_dead_ring[i] = true;
                } else if place[i] != 0 {
                    dup += 1;
                } else {
                    place[i] = 2;
                    report.in_rings += 1;
                }
            }
        }
        let dead_set: HashSet<u64> = dead.iter().map(|&t| t as u64).collect();
        // Frames a dead thread was moving to or from the pool carry no
        // owner (shm::T_POOL_OP); without such a death, an ownerless frame
        // outside the pool is lost.
        let dead_in_pool_op = dead.iter().any(|&t| self.block(t).get(shm::T_POOL_OP) != 0);
        let live_set: HashSet<u64> = live.iter().map(|&t| t as u64).collect();
        for i in 0..n {
            if place[i] != 0 {
                continue;
            }
            let owner = self.owners.as_slice()[i].load(Ordering::Relaxed);
            if !in_dead_ring[i] && live_set.contains(&owner) {
                report.held_by_threads += 1;
                continue;
            }
            // Nobody live has it: a dead thread's frame, or (with no thread
            // dead) a frame lost by a bug, which the report shows.
            if in_dead_ring[i] || dead_set.contains(&owner) || (owner == NO_OWNER && dead_in_pool_op) {
                report.reclaimed += 1;
            } else {
                report.lost += 1;
            }
            self.owners.as_slice()[i].store(NO_OWNER, Ordering::Relaxed);
            keep.push(i as u64 * fs);
        }
        report.duplicated = dup;
        for &r in &dead_rings {
            self.ring(r).reset();
        }
        for &t in &dead {
            self.block(t).set(shm::T_POOL_OP, 0);
        }
        if self.pool.rebuild(&keep).is_err() {
            report.lost += keep.len() as u64;
        }
        // Reclaimed (and lost-then-found) frames now sit in the pool.
        report.in_pool = keep.len() as u64;
        ctl[shm::AUDITS].fetch_add(1, Ordering::Relaxed);
        ctl[shm::RECLAIMED].fetch_add(report.reclaimed, Ordering::Relaxed);
        ctl[shm::LOST].fetch_add(report.lost, Ordering::Relaxed);
        ctl[shm::DUPLICATED].fetch_add(report.duplicated, Ordering::Relaxed);
        report.dead = dead;
        ctl[shm::PAUSE_REQ].store(0, Ordering::Release);
        self.wake_everyone();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Domain {
        let plan = DomainPlan {
            name: "d".into(),
            frames: 256,
            frame_size: 2048,
            ring_size: 64,
            tids: 2,
            rings: 2,
            tenant: None,
            uid_group: "domain \"d\"".into(),
        };
        Domain::create(&plan).expect("a domain")
    }

    /// A thread killed between taking frames from the pool and marking
    /// them leaves them ownerless outside the pool: they are its frames
    /// (reclaimed) when it died inside the pool operation, and lost (a
    /// bug) otherwise.
    #[test]
    fn ownerless_frames_go_to_a_thread_that_died_inside_a_pool_operation() {
        for (in_pool_op, reclaimed, lost) in [(true, 32, 0), (false, 0, 32)] {
            let d = domain();
            let mut taken = Vec::new();
            d.pool.take_batch(32, &mut taken);
            assert_eq!(taken.len(), 32);
            d.block(0).set(shm::T_POOL_OP, u64::from(in_pool_op));
            let r = d.audit(&[0]);
            assert_eq!((r.reclaimed, r.lost, r.duplicated), (reclaimed, lost, 0), "in a pool op: {in_pool_op}");
            assert_eq!(r.in_pool, 256, "every frame is back in the pool");
            assert_eq!(d.block(0).get(shm::T_POOL_OP), 0, "the mark goes with the reclaim");
        }
    }
}
