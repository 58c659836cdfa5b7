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
    /// The threads' capture record rings.
    pub capture: SharedWords,
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
        let layout = layout.words(shm::capture_words(plan.tids));
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
        // Captures end with the ferryd that ran them: no thread copies for
        // a capture nobody reads.
        for t in 0..plan.tids {
            for slot in 0..shm::TAP_SLOTS {
                dom.block(t).set(shm::T_TAPS + slot, 0);
            }
        }
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
        let capture = region.words(shm::CAPTURE_WORDS)?;
        let life = Life { epoch: 0, procs: (0..plan.tids).map(|_| None).collect() };
        Ok(Domain {
            plan: plan.clone(),
            umem,
            region,
            data,
            room,
            control,
            owners,
            capture,
            pool,
            life: Mutex::new(life),
        })
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
        let waiting = self.pause_threads(&mut life, dead);
        let mut report = AuditReport {
            domain: self.plan.name.clone(),
            frames_total: self.plan.frames as u64,
            unresponsive: waiting.clone(),
            ..Default::default()
        };
        if waiting.is_empty() {
            self.reclaim(&life, &mut report);
        }
        // Never leave a paused thread paused; never touch memory a running
        // thread may be using (an unresponsive one makes the audit touch
        // nothing).
        self.control.as_slice()[shm::PAUSE_REQ].store(0, Ordering::Release);
        self.wake_everyone();
        report
    }

    /// Marks `dead` dead and asks every live thread to pause, waiting up to
    /// two seconds; returns the live threads that did not acknowledge.
    fn pause_threads(&self, life: &mut Life, dead: &[u32]) -> Vec<u32> {
        // 0 means "no pause": skipped when the count wraps.
        life.epoch = life.epoch.wrapping_add(1).max(1);
        let ep = life.epoch;
        for &t in dead {
            self.block(t).set(shm::T_STATE, shm::STATE_DEAD);
        }
        self.control.as_slice()[shm::PAUSE_REQ].store(ep, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut waiting: Vec<u32> =
            (0..self.plan.tids).filter(|&t| self.block(t).get(shm::T_STATE) == shm::STATE_ALIVE).collect();
        loop {
            waiting.retain(|&t| {
                let b = self.block(t);
                if b.get(shm::T_STATE) != shm::STATE_ALIVE || b.get(shm::T_PAUSE_ACK) == ep {
                    return false;
                }
                if Self::process_exited(life, t) {
                    b.set(shm::T_STATE, shm::STATE_DEAD);
                    return false;
                }
                true
            });
            if waiting.is_empty() || Instant::now() >= deadline {
                return waiting;
            }
            self.wake_everyone();
            std::thread::sleep(Duration::from_micros(300));
        }
    }

    /// With every live thread paused: repairs the rings the dead threads
    /// produced into, takes a census of the frames and gives the pool back
    /// every frame nobody live holds.
    fn reclaim(&self, life: &Life, report: &mut AuditReport) {
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
        let owners: Vec<u64> = self.owners.as_slice().iter().map(|o| o.load(Ordering::Relaxed)).collect();
        let census = FrameCensus {
            frame_size: self.plan.frame_size as u64,
            pool: self.pool.snapshot(),
            rings: (0..self.plan.rings)
                .map(|r| (r, self.ring(r).snapshot().iter().map(|d| d.addr).collect()))
                .collect(),
            dead_rings: dead_rings.iter().copied().collect(),
            owners,
            dead: dead.iter().map(|&t| t as u64).collect(),
            live: live.iter().map(|&t| t as u64).collect(),
            // Frames a dead thread was moving to or from the pool carry no
            // owner (shm::T_POOL_OP).
            dead_in_pool_op: dead.iter().any(|&t| self.block(t).get(shm::T_POOL_OP) != 0),
        }
        .take();
        for &i in &census.unowned {
            self.owners.as_slice()[i].store(NO_OWNER, Ordering::Relaxed);
        }
        for &r in &dead_rings {
            self.ring(r).reset();
        }
        for &t in &dead {
            self.block(t).set(shm::T_POOL_OP, 0);
        }
        report.in_rings = census.in_rings;
        report.held_by_threads = census.held_by_threads;
        (report.reclaimed, report.lost, report.duplicated) = (census.reclaimed, census.lost, census.duplicated);
        if self.pool.rebuild(&census.keep).is_err() {
            report.lost += census.keep.len() as u64;
        }
        // Reclaimed (and lost-then-found) frames now sit in the pool.
        report.in_pool = census.keep.len() as u64;
        let ctl = self.control.as_slice();
        ctl[shm::AUDITS].fetch_add(1, Ordering::Relaxed);
        ctl[shm::RECLAIMED].fetch_add(report.reclaimed, Ordering::Relaxed);
        ctl[shm::LOST].fetch_add(report.lost, Ordering::Relaxed);
        ctl[shm::DUPLICATED].fetch_add(report.duplicated, Ordering::Relaxed);
        report.dead = dead;
    }
}

/// What a paused domain holds, for [`FrameCensus::take`]: where every frame
/// is seen (the pool, the rings) and whom the owner table gives the rest.
struct FrameCensus {
    frame_size: u64,
    /// Frame addresses in the free pool.
    pool: Vec<u64>,
    /// Per ring, the frame addresses queued on it.
    rings: Vec<(u32, Vec<u64>)>,
    /// Rings whose consumer died: what they hold is the dead thread's.
    dead_rings: HashSet<u32>,
    /// Per frame, the thread that owns it (or [`NO_OWNER`]).
    owners: Vec<u64>,
    dead: HashSet<u64>,
    live: HashSet<u64>,
    /// A dead thread died moving frames to or from the pool, so ownerless
    /// frames outside the pool are its frames, not lost ones.
    dead_in_pool_op: bool,
}

/// Where the frames are, and what goes back to the pool.
#[derive(Debug, Default, PartialEq, Eq)]
struct Census {
    in_rings: u64,
    held_by_threads: u64,
    reclaimed: u64,
    lost: u64,
    duplicated: u64,
    /// Frame addresses the rebuilt pool holds: the pool's own, then every
    /// frame nobody live holds.
    keep: Vec<u64>,
    /// Frames whose owner entry is cleared (they go back to the pool).
    unowned: Vec<usize>,
}

impl FrameCensus {
    /// Places every frame once: in the pool, in a live ring, held by a live
    /// thread; or else reclaimed (a dead thread's) or lost (nobody's: a
    /// bug). A frame seen twice counts as duplicated.
    fn take(self) -> Census {
        let n = self.owners.len();
        let fs = self.frame_size;
        let mut census = Census::default();
        let mut seen = vec![false; n];
        for &a in &self.pool {
            let i = (a / fs) as usize;
            if i < n {
                if std::mem::replace(&mut seen[i], true) {
                    census.duplicated += 1;
                    continue;
                }
                census.keep.push(a - a % fs);
            }
        }
        let mut in_dead_ring = vec![false; n];
        for (r, addrs) in &self.rings {
            for i in addrs.iter().map(|a| (a / fs) as usize).filter(|i| *i < n) {
                if self.dead_rings.contains(r) {
                    in_dead_ring[i] = true;
                } else if std::mem::replace(&mut seen[i], true) {
                    census.duplicated += 1;
                } else {
                    census.in_rings += 1;
                }
            }
        }
        for i in (0..n).filter(|i| !seen[*i]) {
            let owner = self.owners[i];
            if !in_dead_ring[i] && self.live.contains(&owner) {
                census.held_by_threads += 1;
                continue;
            }
            let dead_thread_had_it =
                in_dead_ring[i] || self.dead.contains(&owner) || (owner == NO_OWNER && self.dead_in_pool_op);
            if dead_thread_had_it {
                census.reclaimed += 1;
            } else {
                census.lost += 1;
            }
            census.unowned.push(i);
            census.keep.push(i as u64 * fs);
        }
        census
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
    /// Four frames of 2 kB: the census places each once.
    fn census(pool: &[u64], rings: &[(u32, &[u64])], owners: [u64; 4], dead: &[u64], live: &[u64]) -> FrameCensus {
        FrameCensus {
            frame_size: 2048,
            pool: pool.to_vec(),
            rings: rings.iter().map(|(r, a)| (*r, a.to_vec())).collect(),
            dead_rings: HashSet::new(),
            owners: owners.to_vec(),
            dead: dead.iter().copied().collect(),
            live: live.iter().copied().collect(),
            dead_in_pool_op: false,
        }
    }

    #[test]
    fn a_census_places_every_frame_once_and_gives_a_dead_threads_frames_back() {
        // Frame 0 free, frame 1 queued, frame 2 held by live thread 1,
        // frame 3 held by dead thread 0.
        let c = census(&[0], &[(0, &[2048 + 100])], [NO_OWNER, NO_OWNER, 1, 0], &[0], &[1]).take();
        assert_eq!((c.in_rings, c.held_by_threads, c.reclaimed, c.lost, c.duplicated), (1, 1, 1, 0, 0));
        assert_eq!(c.keep, vec![0, 3 * 2048], "the pool's frame, then the reclaimed one");
        assert_eq!(c.unowned, vec![3]);
    }

    #[test]
    fn a_census_counts_a_frame_seen_twice_and_a_frame_nobody_has() {
        // Frame 0 in the pool twice and on a ring; frame 1 owned by nobody
        // with no thread dead: lost. Frames 2 and 3 held by thread 1.
        let c = census(&[0, 100], &[(0, &[0])], [NO_OWNER, NO_OWNER, 1, 1], &[], &[1]).take();
        assert_eq!((c.held_by_threads, c.lost, c.duplicated), (2, 1, 2));
        assert_eq!(c.keep, vec![0, 2048], "a lost frame goes back to the pool too");
    }

    #[test]
    fn what_a_dead_consumers_ring_holds_is_reclaimed() {
        let mut f = census(&[0, 2048], &[(1, &[2 * 2048, 3 * 2048])], [NO_OWNER; 4], &[0], &[]);
        f.dead_rings.insert(1);
        let c = f.take();
        assert_eq!((c.in_rings, c.reclaimed, c.lost), (0, 2, 0));
        assert_eq!(c.keep.len(), 4);
    }
}
