//! A thread's cache of free frames in front of its domain's pool, keeping
//! the frame-owner table true (see [`crate::shm`]): frames it takes from
//! the pool are marked with its thread id, frames it gives back are marked
//! ownerless before they go in. Used by NF threads and ferryd's copy links.

use std::sync::atomic::{fence, Ordering};

use ferry_ring::{FramePool, SharedWords};

use crate::shm::{ThreadBlock, NO_OWNER, T_POOL_OP};

/// Frames moved between a cache and the pool at a time.
pub const CACHE_BATCH: usize = 32;

pub struct FrameCache {
    pool: FramePool,
    owners: SharedWords,
    /// The domain's control words: this thread's [`T_POOL_OP`] is there.
    control: SharedWords,
    tid: u64,
    frame_size: u64,
    local: Vec<u64>,
    scratch: Vec<u64>,
}

impl FrameCache {
    /// A cache for thread `tid`, whose block must be in `control`.
    pub fn new(pool: FramePool, owners: SharedWords, control: SharedWords, tid: u32, frame_size: u32) -> FrameCache {
        assert!(ThreadBlock::of(control.as_slice(), tid).is_some(), "thread {tid} has no control block");
        FrameCache {
            pool,
            owners,
            control,
            tid: tid as u64,
            frame_size: frame_size as u64,
            local: Vec::with_capacity(4 * CACHE_BATCH),
            scratch: Vec::with_capacity(CACHE_BATCH),
        }
    }

    /// Records `owner` for the frame holding `addr` (any offset in it).
    #[inline]
    pub fn mark(&self, addr: u64, owner: u64) {
        if let Some(w) = self.owners.as_slice().get((addr / self.frame_size) as usize) {
            w.store(owner, Ordering::Relaxed);
        }
    }

    /// Marks a frame as this thread's (after dequeuing it from a ring).
    #[inline]
    pub fn mark_mine(&self, addr: u64) {
        self.mark(addr, self.tid);
    }

    pub fn tid(&self) -> u32 {
        self.tid as u32
    }

    /// Says whether this thread is between the pool and the owner table.
    /// Raised before, and lowered after, the owner-table stores it covers
    /// (the fences keep those stores on their side of it).
    fn pool_op(&self, busy: bool) {
        let block = ThreadBlock::of(self.control.as_slice(), self.tid as u32).expect("checked in new");
        if !busy {
            fence(Ordering::SeqCst);
        }
        block.set(T_POOL_OP, u64::from(busy));
        if busy {
            fence(Ordering::SeqCst);
        }
    }

    /// A free frame (its start address), or None when the domain has none.
    pub fn alloc(&mut self) -> Option<u64> {
        if self.local.is_empty() {
            self.scratch.clear();
            self.pool_op(true);
            self.pool.take_batch(CACHE_BATCH, &mut self.scratch);
            for &f in &self.scratch {
                self.mark(f, self.tid);
            }
            self.pool_op(false);
            self.local.extend_from_slice(&self.scratch);
        }
        self.local.pop()
    }

    /// Takes back the frame holding `addr`; spills a batch to the pool once
    /// the cache holds two.
    pub fn free(&mut self, addr: u64) {
        self.local.push(addr - addr % self.frame_size);
        if self.local.len() >= 2 * CACHE_BATCH {
            self.spill(self.local.len() - CACHE_BATCH);
        }
    }

    /// Returns every cached frame to the pool (before sleeping, so a
    /// sleeping thread never sits on frames others need).
    pub fn spill_all(&mut self) {
        self.spill(0);
    }

    fn spill(&mut self, from: usize) {
        self.pool_op(true);
        for i in from..self.local.len() {
            self.mark(self.local[i], NO_OWNER);
        }
        let n = self.pool.put_batch(&self.local[from..]);
        // The pool has room for every frame of the domain, so it never
        // refuses; if it did, what stays here is ours again.
        for i in from + n..self.local.len() {
            self.mark(self.local[i], self.tid);
        }
        self.pool_op(false);
        self.local.drain(from..from + n);
    }

    pub fn len(&self) -> usize {
        self.local.len()
    }

    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }
}
