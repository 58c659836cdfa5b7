//! The control words of a domain's shared region, defined once for ferryd,
//! the SDK and the C API.
//!
//! A domain's region (`ferry_ring::ShmRegion`) holds: ring `i` per the plan,
//! pool 0 (free frames), word array [`CONTROL_WORDS`], word array
//! [`OWNER_WORDS`] (one word per UMEM frame) and word array
//! [`CAPTURE_WORDS`] (a record ring per thread, for captures; memfd pages
//! a capture never wrote are never allocated).
//!
//! # The frame-owner table and why a killed NF leaks nothing
//!
//! Every frame is, at any moment, in the pool, in a ring, or in the hands of
//! one thread (its cache, a batch being processed, its sockets' kernel rings).
//! Threads keep the owner table true at the only two moments that matter:
//! * taking frames from the pool: mark them `tid` (freeing marks them
//!   [`NO_OWNER`] before the put), and
//! * dequeuing from their ring: mark `tid` while the slot is still published
//!   (`Consumer::dequeue_batch_with`).
//!
//! Frames sitting in a ring keep their sender's mark; the ring itself is the
//! record. So after a thread dies, with the domain paused, a frame belongs
//! to nobody — and is reclaimed — exactly when it is in no live ring and not
//! in the pool, and it sits in the dead thread's ring or is marked with a
//! dead thread, or with no owner while a dead thread was inside a pool
//! operation ([`T_POOL_OP`]). ferryd's audit does that walk; any other
//! frame in no place is lost (a bug), and counted so.
//!
//! # Pausing a domain
//!
//! ferryd writes a new epoch to [`PAUSE_REQ`] and wakes every thread; each
//! thread, between operations (never inside a pool or ring call), copies the
//! epoch to its [`T_PAUSE_ACK`] and waits until `PAUSE_REQ` changes. ferryd
//! audits once every live thread acknowledged, then writes 0.

use std::sync::atomic::{AtomicU64, Ordering};

/// Index of the control word array in a domain region.
pub const CONTROL_WORDS: usize = 0;
/// Index of the frame-owner word array.
pub const OWNER_WORDS: usize = 1;
/// Index of the capture record rings' word array.
pub const CAPTURE_WORDS: usize = 2;
/// Words of one thread's capture ring (256 KiB: some 3000 copies of
/// 64-byte frames between two reads).
pub const CAPTURE_RING_WORDS: usize = 32 * 1024;
/// The free-frame pool's index.
pub const POOL: usize = 0;

/// Owner-table value of a frame in the pool (or in transit to it).
pub const NO_OWNER: u64 = u64::MAX;

// Domain header words.
/// Nonzero: ferryd asks every thread to pause (the value is the epoch).
pub const PAUSE_REQ: usize = 0;
/// Bumped by ferryd after each audit.
pub const AUDITS: usize = 1;
/// Frames reclaimed from dead threads so far.
pub const RECLAIMED: usize = 2;
/// Frames audits found in no place, so far (must stay 0).
pub const LOST: usize = 3;
/// Frames audits found in two places at once, so far (must stay 0).
pub const DUPLICATED: usize = 4;
pub const HEADER_WORDS: usize = 16;

/// Words per thread block.
pub const THREAD_WORDS: usize = 64;

// Thread block words.
pub const T_STATE: usize = 0;
pub const T_PID: usize = 1;
pub const T_PAUSE_ACK: usize = 2;
/// Loop iterations, to see a thread is alive and not stuck.
pub const T_LOOPS: usize = 3;
/// Nonzero while the thread moves frames between its cache and the pool
/// (`FrameCache`): between taking frames and marking them, and between
/// unmarking frames and putting them, the owner table cannot say whose
/// they are. A thread that dies there leaves frames marked with no owner
/// outside the pool; the audit gives them to the dead thread instead of
/// calling them lost.
pub const T_POOL_OP: usize = 4;
/// The thread's taps (`crate::capture::Tap`), one word per slot, written
/// by ferryd; 0: off. Two slots: two captures may share a thread (a port
/// and a link of the NF that reads it, or two stages of a fused NF).
pub const T_TAPS: usize = 26;
pub const TAP_SLOTS: usize = 2;
/// First fixed counter; see [`COUNTERS`].
pub const T_COUNTERS: usize = 8;
/// First NF-defined counter (up to [`MAX_NF_COUNTERS`]).
pub const T_NF_COUNTERS: usize = 40;
pub const MAX_NF_COUNTERS: usize = 24;

pub const STATE_FREE: u64 = 0;
pub const STATE_ALIVE: u64 = 1;
pub const STATE_DEAD: u64 = 2;

/// The framework's per-thread counters, in block order from `T_COUNTERS`.
/// Every frame a thread takes in (`rx_port`, `rx_ring`, `alloc`) leaves by
/// exactly one of the verdict counters (`tx_port`, `to_nf`, `to_copy`,
/// `to_kernel`, `drop_*`).
pub const COUNTERS: &[&str] = &[
    "rx_port",
    "rx_ring",
    "alloc",
    "tx_port",
    "to_nf",
    "to_copy",
    "drop_nf",
    "drop_full",
    "drop_down",
    "drop_bad_hop",
    "drop_malformed",
    "tx_completed",
    "bp_sleeps",
    "bp_blocks",
    "sleeps",
    "wakeups_sent",
    "copied",
    "to_kernel",
];

/// Index (within [`COUNTERS`]) of each counter, for the writers.
pub mod c {
    pub const RX_PORT: usize = 0;
    pub const RX_RING: usize = 1;
    pub const ALLOC: usize = 2;
    pub const TX_PORT: usize = 3;
    pub const TO_NF: usize = 4;
    pub const TO_COPY: usize = 5;
    pub const DROP_NF: usize = 6;
    pub const DROP_FULL: usize = 7;
    pub const DROP_DOWN: usize = 8;
    pub const DROP_BAD_HOP: usize = 9;
    pub const DROP_MALFORMED: usize = 10;
    pub const TX_COMPLETED: usize = 11;
    pub const BP_SLEEPS: usize = 12;
    pub const BP_BLOCKS: usize = 13;
    pub const SLEEPS: usize = 14;
    pub const WAKEUPS_SENT: usize = 15;
    pub const COPIED: usize = 16;
    pub const TO_KERNEL: usize = 17;
}

const _: () = assert!(T_COUNTERS + COUNTERS.len() <= T_TAPS && T_TAPS + TAP_SLOTS <= T_NF_COUNTERS);
const _: () = assert!(T_NF_COUNTERS + MAX_NF_COUNTERS <= THREAD_WORDS);

/// Length of the control word array for `tids` threads.
pub fn control_words(tids: u32) -> u32 {
    (HEADER_WORDS + tids as usize * THREAD_WORDS) as u32
}

/// Length of the capture word array for `tids` threads.
pub fn capture_words(tids: u32) -> u32 {
    (tids as usize * TAP_SLOTS * CAPTURE_RING_WORDS) as u32
}

/// Thread `tid`'s capture ring of tap slot `slot` inside the capture words.
pub fn capture_ring(words: &[AtomicU64], tid: u32, slot: usize) -> Option<ferry_ring::RecordRing<'_>> {
    if slot >= TAP_SLOTS {
        return None;
    }
    let start = (tid as usize * TAP_SLOTS + slot) * CAPTURE_RING_WORDS;
    words.get(start..start + CAPTURE_RING_WORDS).and_then(ferry_ring::RecordRing::new)
}

/// One thread's block inside the control words.
#[derive(Clone, Copy)]
pub struct ThreadBlock<'a> {
    words: &'a [AtomicU64],
}

impl<'a> ThreadBlock<'a> {
    /// The block of `tid`, or None if the array is too short.
    pub fn of(control: &'a [AtomicU64], tid: u32) -> Option<ThreadBlock<'a>> {
        let start = HEADER_WORDS + tid as usize * THREAD_WORDS;
        control.get(start..start + THREAD_WORDS).map(|words| ThreadBlock { words })
    }

    pub fn word(&self, i: usize) -> &'a AtomicU64 {
        &self.words[i]
    }

    pub fn get(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }

    pub fn set(&self, i: usize, v: u64) {
        self.words[i].store(v, Ordering::Release)
    }

    pub fn counter(&self, i: usize) -> u64 {
        self.words[T_COUNTERS + i].load(Ordering::Relaxed)
    }

    /// Adds to a framework counter. Only the owning thread writes its block,
    /// so a load + store is enough (no locked RMW on the hot path).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        let w = &self.words[T_COUNTERS + i];
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    pub fn nf_counter(&self, i: usize) -> &'a AtomicU64 {
        &self.words[T_NF_COUNTERS + i.min(MAX_NF_COUNTERS - 1)]
    }

    /// Clears everything but the state and the taps (for a restarted
    /// thread: a capture running goes on with it).
    pub fn reset_counters(&self) {
        for (i, w) in self.words.iter().enumerate().skip(T_PAUSE_ACK) {
            if !(T_TAPS..T_TAPS + TAP_SLOTS).contains(&i) {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
}
