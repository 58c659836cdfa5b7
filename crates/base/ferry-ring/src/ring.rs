//! The MPSC receive ring: many upstream NFs produce, one NF thread consumes.
//!
//! # Algorithm: batch claims recorded in the first slot
//!
//! Positions are unbounded `u64` counters; slot `pos & mask` holds position
//! `pos`. Each slot has a sequence word `seq`:
//!
//! * `seq == pos`       — empty, may be claimed for position `pos`;
//! * `seq == CLAIMED(p, n)` (top bit set) — producer `p` owns `pos..pos+n`;
//! * `seq == pos + 1`   — published, the consumer may take it;
//! * after consuming, the consumer stores `pos + capacity` (empty, next lap).
//!
//! A producer reserves a contiguous range by CASing the slot at `head` from
//! "empty for `head`" to `CLAIMED(id, n)`, then moves `head` to `head + n`
//! (any producer that finds a claim at `head` helps by doing that CAS, so a
//! producer stopped right after claiming never blocks the others). It then
//! writes and publishes the other slots, and publishes the first slot last,
//! so the claim record stays visible until the whole batch is out.
//!
//! Why this and not FLASH's CAS-head-then-publish-in-order: there a producer
//! waits for every earlier reservation to publish, so one producer killed
//! between reserve and publish wedges all the others forever. Here producers
//! never wait for each other (only the consumer stops at an unpublished
//! slot), and the claim carries its owner and length in one atomic word, so
//! after a death the monitor can find exactly the dead producer's range; see
//! `repair.rs`. A plain Vyukov per-slot design has no such record.
//!
//! Every index is masked with the capacity cached locally when the handle was
//! made, so whatever a peer scribbles in shared memory, we never touch memory
//! outside the ring (it can only garble descriptors).

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::desc::Desc;
use crate::notify::Notify;
use crate::sync::{fence, spin_hint, AtomicU32, AtomicU64, Ordering, Padded};
use crate::RingError;

/// Top bit of a slot's `seq` marks a claim. Positions never reach 2^63.
pub(crate) const CLAIM_BIT: u64 = 1 << 63;

pub(crate) fn claim_word(producer: u16, n: u32) -> u64 {
    CLAIM_BIT | (producer as u64) << 32 | n as u64
}

/// `(producer, n)` of a claim word, or None for a plain sequence number.
pub(crate) fn decode_claim(seq: u64) -> Option<(u16, u32)> {
    (seq & CLAIM_BIT != 0).then_some(((seq >> 32) as u16, seq as u32))
}

/// Control words shared by all users of one ring.
#[repr(C)]
pub(crate) struct RingHeader {
    /// Next position to claim; producers only.
    pub(crate) head: Padded<AtomicU64>,
    /// Next position to consume; written only by the consumer.
    pub(crate) tail: Padded<AtomicU64>,
    pub(crate) ctl: Padded<RingCtl>,
}

#[repr(C)]
pub(crate) struct RingCtl {
    /// 1 while the consumer is (about to be) blocked on its data signal.
    pub(crate) consumer_sleeping: AtomicU32,
    /// Number of producers blocked on the room signal.
    pub(crate) room_waiters: AtomicU32,
    /// 1 while a `Consumer` handle exists, anywhere.
    pub(crate) consumer_attached: AtomicU32,
    pub(crate) _reserved: AtomicU32,
    /// Holes written by repairs, for the monitor's statistics.
    pub(crate) holes_total: AtomicU64,
}

/// One descriptor slot: the sequence word plus the descriptor as two words.
/// The descriptor words are atomics too (accessed relaxed; `seq` orders
/// them), so a racing or dead peer can garble data but never cause UB.
#[repr(C, align(32))]
pub(crate) struct Slot {
    pub(crate) seq: AtomicU64,
    pub(crate) addr: AtomicU64,
    pub(crate) meta: AtomicU64,
}

impl RingHeader {
    pub(crate) fn new() -> RingHeader {
        RingHeader {
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            ctl: Padded(RingCtl {
                consumer_sleeping: AtomicU32::new(0),
                room_waiters: AtomicU32::new(0),
                consumer_attached: AtomicU32::new(0),
                _reserved: AtomicU32::new(0),
                holes_total: AtomicU64::new(0),
            }),
        }
    }
}

impl Slot {
    fn new(pos: u64) -> Slot {
        Slot { seq: AtomicU64::new(pos), addr: AtomicU64::new(0), meta: AtomicU64::new(0) }
    }

    #[inline]
    pub(crate) fn write(&self, d: &Desc) {
        self.addr.store(d.addr, Ordering::Relaxed);
        self.meta.store(d.meta(), Ordering::Relaxed);
    }

    #[inline]
    fn read(&self) -> Desc {
        Desc::from_words(self.addr.load(Ordering::Relaxed), self.meta.load(Ordering::Relaxed))
    }
}

/// Validated geometry of one ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    capacity: u32,
    max_producers: u16,
    low_watermark: u32,
}

impl RingConfig {
    pub const MAX_CAPACITY: u32 = 1 << 24;
    pub const MAX_PRODUCERS: u16 = 4096;

    /// `capacity` must be a power of two in 2..=2^24; producer ids will be
    /// `0..max_producers`. The low watermark defaults to a quarter full.
    pub fn new(capacity: u32, max_producers: u16) -> Result<RingConfig, RingError> {
        if !(2..=Self::MAX_CAPACITY).contains(&capacity) || !capacity.is_power_of_two() {
            return Err(RingError::config("ring capacity", capacity as u64, "must be a power of two in 2..=2^24"));
        }
        if max_producers == 0 || max_producers > Self::MAX_PRODUCERS {
            return Err(RingError::config("max_producers", max_producers as u64, "must be in 1..=4096"));
        }
        Ok(RingConfig { capacity, max_producers, low_watermark: capacity / 4 })
    }

    /// Room is signalled to blocked producers once the fill level is at or
    /// below `low`. Must be below the capacity.
    pub fn with_low_watermark(mut self, low: u32) -> Result<RingConfig, RingError> {
        if low >= self.capacity {
            return Err(RingError::config("low_watermark", low as u64, "must be below the capacity"));
        }
        self.low_watermark = low;
        Ok(self)
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    pub fn max_producers(&self) -> u16 {
        self.max_producers
    }
    pub fn low_watermark(&self) -> u32 {
        self.low_watermark
    }
}

/// The memory behind a ring when it is not in a shared region.
struct HeapRing {
    hdr: RingHeader,
    slots: Box<[Slot]>,
}

struct RingShared {
    hdr: *const RingHeader,
    slots: *const Slot,
    cfg: RingConfig,
    mask: u64,
    /// Keeps the mapping or heap allocation behind the pointers alive.
    _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the pointers target atomics only, kept alive by `_keep`.
unsafe impl Send for RingShared {}
unsafe impl Sync for RingShared {}

/// A handle to one ring. Cheap to clone; producers and the consumer are made
/// from it.
#[derive(Clone)]
pub struct MpscRing {
    s: Arc<RingShared>,
}

impl fmt::Debug for MpscRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpscRing").field("cfg", &self.s.cfg).field("fill", &self.fill_level()).finish()
    }
}

impl MpscRing {
    /// A ring in private heap memory: for threads of one process, for the
    /// benchmark and for the loom models.
    pub fn new_heap(cfg: RingConfig) -> MpscRing {
        let slots: Box<[Slot]> = (0..cfg.capacity as u64).map(Slot::new).collect();
        let heap = Arc::new(HeapRing { hdr: RingHeader::new(), slots });
        let hdr: *const RingHeader = &heap.hdr;
        let slots = heap.slots.as_ptr();
        // SAFETY: both pointers point into `heap`, which the handle keeps.
        unsafe { MpscRing::from_raw(hdr, slots, cfg, heap) }
    }

    /// # Safety
    /// `hdr` and `slots` (capacity entries) must point to initialised
    /// values that `keep` keeps alive and in place.
    pub(crate) unsafe fn from_raw(
        hdr: *const RingHeader,
        slots: *const Slot,
        cfg: RingConfig,
        keep: Arc<dyn Any + Send + Sync>,
    ) -> MpscRing {
        let mask = cfg.capacity as u64 - 1;
        MpscRing { s: Arc::new(RingShared { hdr, slots, cfg, mask, _keep: keep }) }
    }

    /// Writes the initial state into freshly zeroed shared memory.
    #[cfg(not(loom))]
    pub(crate) fn init_fresh(&self) {
        for pos in 0..self.s.cfg.capacity as u64 {
            self.slot(pos).seq.store(pos, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn hdr(&self) -> &RingHeader {
        // SAFETY: valid for the handle's lifetime (see `from_raw`).
        unsafe { &*self.s.hdr }
    }

    #[inline]
    pub(crate) fn slot(&self, pos: u64) -> &Slot {
        // SAFETY: the index is masked by the locally cached capacity, so it
        // is in bounds whatever the shared memory says.
        unsafe { &*self.s.slots.add((pos & self.s.mask) as usize) }
    }

    pub fn config(&self) -> RingConfig {
        self.s.cfg
    }

    pub fn capacity(&self) -> u64 {
        self.s.cfg.capacity as u64
    }

    /// Claimed-or-published slots not yet consumed (a snapshot).
    pub fn fill_level(&self) -> u64 {
        let tail = self.hdr().tail.load(Ordering::Acquire);
        let head = self.hdr().head.load(Ordering::Acquire);
        head.saturating_sub(tail).min(self.capacity())
    }

    /// Slots a producer could claim right now (a snapshot).
    pub fn free_slots(&self) -> u64 {
        self.capacity() - self.fill_level()
    }

    /// A producer handle. The monitor must give each producing thread its
    /// own id: repair after a death works per id.
    pub fn producer(&self, id: u16) -> Result<Producer, RingError> {
        let max = self.s.cfg.max_producers;
        if id >= max {
            return Err(RingError::BadProducer { id, max });
        }
        Ok(Producer { ring: self.clone(), id, data: None, room: None })
    }

    /// The consumer handle; only one may exist at a time across all
    /// processes (enforced through shared memory).
    pub fn consumer(&self) -> Result<Consumer, RingError> {
        let ctl = &self.hdr().ctl;
        if ctl.consumer_attached.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return Err(RingError::ConsumerBusy);
        }
        let pos = self.hdr().tail.load(Ordering::Acquire);
        let holes = vec![0; self.s.cfg.max_producers as usize + 1];
        Ok(Consumer { ring: self.clone(), pos, holes, data: None, room: None })
    }

    /// For the monitor, after the consumer's process died: lets a new
    /// `Consumer` attach. The dead one must really be gone.
    pub fn force_detach_consumer(&self) {
        self.hdr().ctl.consumer_attached.store(0, Ordering::Release);
    }

    /// Claims up to `want` contiguous slots for producer `id`; returns the
    /// first position and the count, or None when the ring is full.
    fn claim(&self, id: u16, want: usize) -> Option<(u64, usize)> {
        if want == 0 {
            return None;
        }
        let hdr = self.hdr();
        let cap = self.capacity();
        loop {
            // Order matters: tail, then head, then the slot. tail <= head
            // always holds for reads in this order, and a tail showing room
            // for `head` proves (Acquire) the consumer already recycled the
            // slot of position `head - capacity` before we read that slot.
            let tail = hdr.tail.load(Ordering::Acquire);
            let head = hdr.head.load(Ordering::Acquire);
            // More than `cap` apart only if the consumer moved between the
            // two loads; report full rather than spin, the caller retries.
            let free = cap.saturating_sub(head.wrapping_sub(tail));
            if free == 0 {
                return None;
            }
            let n = (want as u64).min(free) as u32;
            let first = self.slot(head);
            let seq = first.seq.load(Ordering::Acquire);
            if seq == head {
                let claim = claim_word(id, n);
                if first.seq.compare_exchange(head, claim, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    // Someone may already have helped; either way head moves.
                    let _ = hdr.head.compare_exchange(head, head + n as u64, Ordering::AcqRel, Ordering::Relaxed);
                    return Some((head, n as usize));
                }
            } else if let Some((_, len)) = decode_claim(seq) {
                // A claim at `head` whose owner has not moved head yet:
                // move it for them. If `head` is stale the CAS just fails.
                let _ = hdr.head.compare_exchange(head, head + len as u64, Ordering::AcqRel, Ordering::Relaxed);
            }
            spin_hint();
        }
    }

    /// Test hook: what a producer killed mid-enqueue leaves behind. Claims
    /// like `enqueue_batch`, publishes only slots `1..=publish_tail` of the
    /// range (the first slot is always published last), then stops.
    /// Returns the claimed length. Never use it outside tests.
    #[doc(hidden)]
    pub fn abandon_after_claim(&self, id: u16, descs: &[Desc], publish_tail: usize) -> usize {
        let Some((start, n)) = self.claim(id, descs.len()) else { return 0 };
        for (i, d) in descs.iter().enumerate().take(n.min(publish_tail + 1)).skip(1) {
            let s = self.slot(start + i as u64);
            s.write(d);
            s.seq.store(start + i as u64 + 1, Ordering::Release);
        }
        n
    }

    /// Raises `signal` if the consumer is (about to be) asleep; for the
    /// producers and for the monitor after a repair. Returns whether it did.
    ///
    /// The SeqCst fence pairs with the one in `Consumer::wait_for_data`:
    /// either the consumer's re-check sees our published slots or we see
    /// its sleeping flag (the store-buffering outcome is excluded).
    pub fn wake_consumer(&self, signal: Option<&dyn Notify>) -> std::io::Result<bool> {
        let ctl = &self.hdr().ctl;
        fence(Ordering::SeqCst);
        // Only the caller that clears the flag writes the eventfd.
        if ctl.consumer_sleeping.swap(0, Ordering::Relaxed) == 0 {
            return Ok(false);
        }
        if let Some(n) = signal {
            n.notify(1)?;
        }
        Ok(true)
    }

    /// The descriptors published and not yet consumed, in ring order
    /// (holes left out). Exact only while nobody uses the ring: the monitor
    /// calls it with the domain paused.
    pub fn snapshot(&self) -> Vec<Desc> {
        let tail = self.hdr().tail.load(Ordering::Acquire);
        let head = self.hdr().head.load(Ordering::Acquire);
        let mut out = Vec::new();
        for pos in tail..head.min(tail + self.capacity()) {
            let s = self.slot(pos);
            if s.seq.load(Ordering::Acquire) == pos + 1 {
                let d = s.read();
                if !d.is_hole() {
                    out.push(d);
                }
            }
        }
        out
    }

    /// Empties the ring and lets a new consumer attach: for the monitor,
    /// after the consumer's process died, with the domain paused (no
    /// producer inside `enqueue_batch`). The caller reclaims the frames
    /// `snapshot` returned first. Producers blocked waiting for room stay
    /// counted and are woken by the caller.
    #[cfg(not(loom))]
    pub fn reset(&self) {
        let h = self.hdr();
        self.init_fresh();
        h.tail.store(0, Ordering::Release);
        h.head.store(0, Ordering::Release);
        h.ctl.consumer_sleeping.store(0, Ordering::Release);
        h.ctl.consumer_attached.store(0, Ordering::Release);
    }

    /// Holes written into this ring by all repairs so far.
    pub fn holes_written(&self) -> u64 {
        self.hdr().ctl.holes_total.load(Ordering::Relaxed)
    }
}

/// Enqueues into one ring under a fixed producer id.
pub struct Producer {
    ring: MpscRing,
    id: u16,
    data: Option<Arc<dyn Notify>>,
    room: Option<Arc<dyn Notify>>,
}

impl Producer {
    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn ring(&self) -> &MpscRing {
        &self.ring
    }

    /// The consumer's data signal, raised by `send` when it sleeps.
    pub fn set_data_notify(&mut self, n: Arc<dyn Notify>) {
        self.data = Some(n);
    }

    /// The ring's room signal, waited on by `wait_for_room`.
    pub fn set_room_notify(&mut self, n: Arc<dyn Notify>) {
        self.room = Some(n);
    }

    pub fn free_slots(&self) -> u64 {
        self.ring.free_slots()
    }

    /// Enqueues a prefix of `descs` as one contiguous batch and returns its
    /// length: all of them if there is room, fewer if the ring is nearly
    /// full, 0 if it is full. The caller keeps `descs[n..]` for a later try
    /// (the partial-batch rule), so nothing is dropped. No syscall.
    pub fn enqueue_batch(&self, descs: &[Desc]) -> usize {
        match self.ring.claim(self.id, descs.len()) {
            Some((start, n)) => {
                self.publish(start, &descs[..n]);
                n
            }
            None => 0,
        }
    }

    /// Writes a claimed range; the first slot (holding the claim) last.
    fn publish(&self, start: u64, descs: &[Desc]) {
        for (i, d) in descs.iter().enumerate().skip(1) {
            let pos = start + i as u64;
            let s = self.ring.slot(pos);
            s.write(d);
            s.seq.store(pos + 1, Ordering::Release);
        }
        let s = self.ring.slot(start);
        s.write(&descs[0]);
        s.seq.store(start + 1, Ordering::Release);
    }

    /// Raises the consumer's data signal if it is (about to be) asleep.
    /// Returns whether it raised. Call after enqueuing.
    ///
    /// The SeqCst fence pairs with the one in `Consumer::wait_for_data`:
    /// either the consumer's re-check sees our published slots or we see
    /// its sleeping flag (the store-buffering case is excluded).
    pub fn wake_consumer(&self) -> std::io::Result<bool> {
        self.ring.wake_consumer(self.data.as_deref())
    }

    /// `enqueue_batch` plus `wake_consumer` when anything was enqueued.
    pub fn send(&self, descs: &[Desc]) -> std::io::Result<usize> {
        let n = self.enqueue_batch(descs);
        if n > 0 {
            self.wake_consumer()?;
        }
        Ok(n)
    }

    /// Backpressure: returns at once if `min_free` slots are free, else
    /// blocks on the room signal until the consumer drains the ring to its
    /// low watermark, or `timeout`. `min_free` is capped at
    /// `capacity - low_watermark` so the consumer's signal always suffices.
    /// Returns whether the room is there now.
    pub fn wait_for_room(&self, min_free: u64, timeout: Option<Duration>) -> std::io::Result<bool> {
        let cfg = self.ring.config();
        let need = min_free.clamp(1, cfg.capacity as u64 - cfg.low_watermark as u64);
        if self.free_slots() >= need {
            return Ok(true);
        }
        let ctl = &self.ring.hdr().ctl;
        ctl.room_waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `Consumer::signal_room`.
        fence(Ordering::SeqCst);
        if self.free_slots() < need {
            if let Some(n) = &self.room {
                n.wait(timeout)?;
            } else if let Some(t) = timeout {
                std::thread::sleep(t);
            }
        }
        ctl.room_waiters.fetch_sub(1, Ordering::Relaxed);
        Ok(self.free_slots() >= need)
    }
}

/// The single consumer of a ring.
pub struct Consumer {
    ring: MpscRing,
    /// Next position to read; mirrors the shared `tail`, which only we write.
    pos: u64,
    /// Holes seen per producer id; the last entry counts unknown ids.
    holes: Vec<u64>,
    data: Option<Arc<dyn Notify>>,
    room: Option<Arc<dyn Notify>>,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.ring.hdr().ctl.consumer_attached.store(0, Ordering::Release);
    }
}

impl Consumer {
    pub fn ring(&self) -> &MpscRing {
        &self.ring
    }

    /// The signal `wait_for_data` blocks on.
    pub fn set_data_notify(&mut self, n: Arc<dyn Notify>) {
        self.data = Some(n);
    }

    /// The signal raised for producers blocked in `wait_for_room`.
    pub fn set_room_notify(&mut self, n: Arc<dyn Notify>) {
        self.room = Some(n);
    }

    pub fn fill_level(&self) -> u64 {
        self.ring.fill_level()
    }

    /// True if the next slot is published.
    pub fn has_data(&self) -> bool {
        self.ring.slot(self.pos).seq.load(Ordering::Acquire) == self.pos + 1
    }

    /// Appends up to `max` descriptors to `out`, in ring order, and returns
    /// how many. Holes (slots of a dead producer, see `repair`) are consumed
    /// and counted, never returned. No syscall.
    pub fn dequeue_batch(&mut self, max: usize, out: &mut Vec<Desc>) -> usize {
        self.dequeue_batch_with(max, out, |_| {})
    }

    /// `dequeue_batch`, calling `on_take` for each descriptor while its slot
    /// is still published. An NF records "this frame is mine now" there: if
    /// it is killed at any point, each frame is either still in the ring or
    /// already recorded as its own, never in neither place.
    pub fn dequeue_batch_with(&mut self, max: usize, out: &mut Vec<Desc>, mut on_take: impl FnMut(&Desc)) -> usize {
        let r = &self.ring;
        let cap = r.capacity();
        let mut pos = self.pos;
        let mut got = 0;
        // Bounded by one lap so a run of holes cannot keep us here forever.
        while got < max && pos - self.pos < cap {
            let s = r.slot(pos);
            if s.seq.load(Ordering::Acquire) != pos + 1 {
                break;
            }
            let d = s.read();
            if !d.is_hole() {
                on_take(&d);
            }
            // Recycle the slot for the next lap before moving on.
            s.seq.store(pos + cap, Ordering::Release);
            pos += 1;
            if d.is_hole() {
                let i = (d.next_hop as usize).min(self.holes.len() - 1);
                self.holes[i] += 1;
            } else {
                out.push(d);
                got += 1;
            }
        }
        if pos != self.pos {
            self.pos = pos;
            r.hdr().tail.store(pos, Ordering::Release);
        }
        got
    }

    /// `dequeue_batch` plus `signal_room`.
    pub fn recv(&mut self, max: usize, out: &mut Vec<Desc>) -> std::io::Result<usize> {
        let n = self.dequeue_batch(max, out);
        if n > 0 {
            self.signal_room()?;
        }
        Ok(n)
    }

    /// Raises the room signal once per blocked producer if the fill level is
    /// at or below the low watermark. Returns whether it raised.
    pub fn signal_room(&self) -> std::io::Result<bool> {
        if self.ring.fill_level() > self.ring.config().low_watermark as u64 {
            return Ok(false);
        }
        // Pairs with the fence in `Producer::wait_for_room`.
        fence(Ordering::SeqCst);
        let waiters = self.ring.hdr().ctl.room_waiters.load(Ordering::Relaxed);
        if waiters == 0 {
            return Ok(false);
        }
        if let Some(n) = &self.room {
            n.notify(waiters)?;
        }
        Ok(true)
    }

    /// Blocks until data is published or `timeout` passes; returns whether
    /// data is there. Protocol: raise the sleeping flag, fence, re-check the
    /// ring, only then block. A producer publishes, fences, then reads the
    /// flag, so one side always sees the other: no lost wake-up.
    pub fn wait_for_data(&self, timeout: Option<Duration>) -> std::io::Result<bool> {
        if self.has_data() {
            return Ok(true);
        }
        let ctl = &self.ring.hdr().ctl;
        // Every write of the flag is an RMW (here, in `wake_consumer`, and
        // below), so its modification order is the order the writes really
        // happened in; with plain stores loom found a schedule where a
        // producer's swap was ordered before this raise and read 0.
        ctl.consumer_sleeping.swap(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !self.has_data() {
            match &self.data {
                Some(n) => n.wait(timeout)?,
                None => {
                    if let Some(t) = timeout {
                        std::thread::sleep(t)
                    }
                }
            }
        }
        ctl.consumer_sleeping.swap(0, Ordering::Relaxed);
        Ok(self.has_data())
    }

    /// Holes consumed that the dead producer `id` left.
    pub fn holes_from(&self, id: u16) -> u64 {
        self.holes.get(id as usize).copied().unwrap_or(0)
    }

    /// All holes consumed so far.
    pub fn holes_total(&self) -> u64 {
        self.holes.iter().sum()
    }

    /// The claim the consumer is stuck behind, if the next slot is claimed
    /// but unpublished: `(producer id, claimed length)`. A monitor that sees
    /// the same claim for long, and knows that producer's process is gone,
    /// calls `MpscRing::repair_after_producer_death`.
    pub fn blocked_by(&self) -> Option<(u16, u32)> {
        decode_claim(self.ring.slot(self.pos).seq.load(Ordering::Acquire))
    }
}
