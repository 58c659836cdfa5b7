//! The free-frame pool of one UMEM / trust domain, and per-thread caches.
//!
//! # Algorithm
//!
//! A bounded MPMC ring of frame addresses with a sequence word per slot
//! (Vyukov's scheme, extended to batches): slot for position `pos` is free
//! for a putter when `seq == pos`, holds a frame when `seq == pos + 1`.
//! A putter (taker) first checks that a run of slots from `enq` (`deq`) is
//! in the right state, then reserves the run with one CAS on `enq` (`deq`),
//! moves the addresses and flips each slot's `seq`. A slot's state for a
//! given position only changes by the one thread that reserved it, so the
//! pre-CAS check stays true after a successful CAS. Operations never wait on
//! one another; a slow putter only makes takers see "empty" early.
//!
//! Caches touch the shared pool once per `batch` (default 32) frames.
//!
//! Not robust to a process killed mid-operation: its reserved slots stay
//! half-done. After a death in the domain the monitor rebuilds the pool.

use std::any::Any;
use std::sync::Arc;

use crate::sync::{spin_hint, AtomicU64, Ordering, Padded};
use crate::RingError;

#[repr(C)]
pub(crate) struct PoolHeader {
    pub(crate) enq: Padded<AtomicU64>,
    pub(crate) deq: Padded<AtomicU64>,
    /// Frames seeded into the domain; for conservation checks.
    pub(crate) frames_total: Padded<AtomicU64>,
}

#[repr(C, align(16))]
pub(crate) struct PoolSlot {
    seq: AtomicU64,
    addr: AtomicU64,
}

/// Validated geometry of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    capacity: u32,
}

impl PoolConfig {
    /// `capacity` is a power of two in 2..=2^24 and must be at least the
    /// number of frames the domain has, so a put can never find it full.
    pub fn new(capacity: u32) -> Result<PoolConfig, RingError> {
        if !(2..=1 << 24).contains(&capacity) || !capacity.is_power_of_two() {
            return Err(RingError::config("pool capacity", capacity as u64, "must be a power of two in 2..=2^24"));
        }
        Ok(PoolConfig { capacity })
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

struct HeapPool {
    hdr: PoolHeader,
    slots: Box<[PoolSlot]>,
}

struct PoolShared {
    hdr: *const PoolHeader,
    slots: *const PoolSlot,
    cfg: PoolConfig,
    _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the pointers target atomics only, kept alive by `_keep`.
unsafe impl Send for PoolShared {}
unsafe impl Sync for PoolShared {}

/// Handle to a shared free-frame pool. Cheap to clone.
#[derive(Clone)]
pub struct FramePool {
    s: Arc<PoolShared>,
}

impl PoolHeader {
    pub(crate) fn new() -> PoolHeader {
        PoolHeader {
            enq: Padded(AtomicU64::new(0)),
            deq: Padded(AtomicU64::new(0)),
            frames_total: Padded(AtomicU64::new(0)),
        }
    }
}

impl FramePool {
    /// A pool in private heap memory (threads of one process, loom models).
    pub fn new_heap(cfg: PoolConfig) -> FramePool {
        let slots = (0..cfg.capacity as u64)
            .map(|pos| PoolSlot { seq: AtomicU64::new(pos), addr: AtomicU64::new(0) })
            .collect::<Box<[_]>>();
        let heap = Arc::new(HeapPool { hdr: PoolHeader::new(), slots });
        let (hdr, slots): (*const PoolHeader, _) = (&heap.hdr, heap.slots.as_ptr());
        // SAFETY: both pointers point into `heap`, which the handle keeps.
        unsafe { FramePool::from_raw(hdr, slots, cfg, heap) }
    }

    /// # Safety
    /// As `MpscRing::from_raw`: valid, initialised, kept alive by `keep`.
    pub(crate) unsafe fn from_raw(
        hdr: *const PoolHeader,
        slots: *const PoolSlot,
        cfg: PoolConfig,
        keep: Arc<dyn Any + Send + Sync>,
    ) -> FramePool {
        FramePool { s: Arc::new(PoolShared { hdr, slots, cfg, _keep: keep }) }
    }

    #[cfg(not(loom))]
    pub(crate) fn init_fresh(&self) {
        for pos in 0..self.capacity() {
            self.slot(pos).seq.store(pos, Ordering::Relaxed);
        }
    }

    fn hdr(&self) -> &PoolHeader {
        // SAFETY: valid for the handle's lifetime (see `from_raw`).
        unsafe { &*self.s.hdr }
    }

    fn slot(&self, pos: u64) -> &PoolSlot {
        // SAFETY: masked by the locally cached capacity: always in bounds.
        unsafe { &*self.s.slots.add((pos & (self.capacity() - 1)) as usize) }
    }

    pub fn capacity(&self) -> u64 {
        self.s.cfg.capacity as u64
    }

    /// Frames seeded into this pool's domain.
    pub fn frames_total(&self) -> u64 {
        self.hdr().frames_total.load(Ordering::Acquire)
    }

    /// Frames in the shared pool right now (a snapshot; excludes caches).
    pub fn available(&self) -> u64 {
        let deq = self.hdr().deq.load(Ordering::Acquire);
        let enq = self.hdr().enq.load(Ordering::Acquire);
        enq.saturating_sub(deq)
    }

    /// The frames in the shared pool (caches excluded). Exact only while
    /// nobody uses the pool: the monitor calls it with the domain paused.
    pub fn snapshot(&self) -> Vec<u64> {
        let deq = self.hdr().deq.load(Ordering::Acquire);
        let enq = self.hdr().enq.load(Ordering::Acquire);
        let mut out = Vec::new();
        for pos in deq..enq.min(deq + self.capacity()) {
            let s = self.slot(pos);
            if s.seq.load(Ordering::Acquire) == pos + 1 {
                out.push(s.addr.load(Ordering::Relaxed));
            }
        }
        out
    }

    /// Re-initialises the pool to hold exactly `frames`, e.g. the frames it
    /// held plus those reclaimed from a dead NF. Also repairs slots a process
    /// killed mid-`put`/`take` left half-done. For the monitor only, with the
    /// domain paused. `frames_total` is unchanged.
    #[cfg(not(loom))]
    pub fn rebuild(&self, frames: &[u64]) -> Result<(), RingError> {
        if frames.len() as u64 > self.capacity() {
            return Err(RingError::PoolOverflow { capacity: self.capacity(), requested: frames.len() as u64 });
        }
        self.init_fresh();
        self.hdr().enq.store(0, Ordering::Release);
        self.hdr().deq.store(0, Ordering::Release);
        let mut rest = frames;
        while !rest.is_empty() {
            rest = &rest[self.put_batch(rest)..];
        }
        Ok(())
    }

    /// Puts the domain's frames in, once, when the domain is set up.
    pub fn seed(&self, frames: &[u64]) -> Result<(), RingError> {
        let total = self.frames_total() + frames.len() as u64;
        if total > self.capacity() {
            return Err(RingError::PoolOverflow { capacity: self.capacity(), requested: total });
        }
        self.hdr().frames_total.store(total, Ordering::Release);
        let mut rest = frames;
        while !rest.is_empty() {
            rest = &rest[self.put_batch(rest)..];
        }
        Ok(())
    }

    /// Returns frames to the pool; returns how many were taken (a prefix).
    /// Fewer than asked only if the pool is (transiently) full.
    pub fn put_batch(&self, frames: &[u64]) -> usize {
        let enq = &self.hdr().enq;
        if frames.is_empty() {
            return 0;
        }
        loop {
            let e = enq.load(Ordering::Acquire);
            let mut k = 0u64;
            let mut stop_seq = 0;
            while (k as usize) < frames.len() {
                let seq = self.slot(e + k).seq.load(Ordering::Acquire);
                if seq != e + k {
                    stop_seq = seq;
                    break;
                }
                k += 1;
            }
            if k == 0 {
                // Behind by a lap: the slot still holds a frame, pool full.
                if (stop_seq.wrapping_sub(e) as i64) < 0 {
                    return 0;
                }
                spin_hint(); // `e` was stale
                continue;
            }
            if enq.compare_exchange(e, e + k, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                for (i, &f) in frames[..k as usize].iter().enumerate() {
                    let s = self.slot(e + i as u64);
                    s.addr.store(f, Ordering::Relaxed);
                    s.seq.store(e + i as u64 + 1, Ordering::Release);
                }
                return k as usize;
            }
            spin_hint();
        }
    }

    /// Takes up to `max` frames into `out`; returns how many.
    pub fn take_batch(&self, max: usize, out: &mut Vec<u64>) -> usize {
        let deq = &self.hdr().deq;
        let cap = self.capacity();
        if max == 0 {
            return 0;
        }
        loop {
            let d = deq.load(Ordering::Acquire);
            let mut k = 0u64;
            let mut stop_seq = 0;
            while (k as usize) < max {
                let seq = self.slot(d + k).seq.load(Ordering::Acquire);
                if seq != d + k + 1 {
                    stop_seq = seq;
                    break;
                }
                k += 1;
            }
            if k == 0 {
                // Slot not yet filled for this position: empty (for now).
                if (stop_seq.wrapping_sub(d + 1) as i64) < 0 {
                    return 0;
                }
                spin_hint();
                continue;
            }
            if deq.compare_exchange(d, d + k, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                for i in 0..k {
                    let s = self.slot(d + i);
                    out.push(s.addr.load(Ordering::Relaxed));
                    s.seq.store(d + i + cap, Ordering::Release);
                }
                return k as usize;
            }
            spin_hint();
        }
    }
}

/// A thread's private stash of free frames in front of a `FramePool`.
pub struct PoolCache {
    pool: FramePool,
    local: Vec<u64>,
    batch: usize,
}

impl PoolCache {
    pub const DEFAULT_BATCH: usize = 32;

    pub fn new(pool: FramePool) -> PoolCache {
        Self::with_batch(pool, Self::DEFAULT_BATCH).expect("default batch is valid")
    }

    /// `batch` frames move between cache and pool at a time (1..=4096).
    pub fn with_batch(pool: FramePool, batch: usize) -> Result<PoolCache, RingError> {
        if !(1..=4096).contains(&batch) {
            return Err(RingError::config("pool cache batch", batch as u64, "must be in 1..=4096"));
        }
        Ok(PoolCache { pool, local: Vec::with_capacity(2 * batch), batch })
    }

    /// A free frame, refilling from the pool when the cache is empty.
    pub fn alloc(&mut self) -> Option<u64> {
        if self.local.is_empty() {
            self.pool.take_batch(self.batch, &mut self.local);
        }
        self.local.pop()
    }

    /// Gives a frame back; spills a batch to the pool once the cache holds
    /// two batches, so alloc/free ping-pong does not touch the pool.
    pub fn free(&mut self, frame: u64) {
        self.local.push(frame);
        if self.local.len() >= 2 * self.batch {
            let at = self.local.len() - self.batch;
            let n = self.pool.put_batch(&self.local[at..]);
            self.local.drain(at..at + n);
            // A pool sized >= frames_total is never really full, so if it
            // refused, the frames simply stay here until the next spill.
        }
    }

    /// Frames held by this cache.
    pub fn len(&self) -> usize {
        self.local.len()
    }

    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }

    /// Returns every cached frame to the pool (also done on drop).
    pub fn flush(&mut self) {
        let mut spins = 0u32;
        while !self.local.is_empty() {
            let n = self.pool.put_batch(&self.local);
            self.local.drain(..n);
            if n == 0 {
                spins += 1;
                // "Full" can only be transient while takers finish
                // recycling; give up after a while rather than hang.
                if spins > 1_000_000 {
                    return;
                }
                spin_hint();
            }
        }
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        self.flush();
    }
}
