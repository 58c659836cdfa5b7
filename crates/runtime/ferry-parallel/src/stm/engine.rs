//! The shared part of the engine: the version clock, the workers' announce
//! slots and the registry of data structures.

use std::panic::Location;
use std::sync::Mutex;

use super::access::{StructureId, StructureInfo, StructureKind};
use super::worker::Worker;
use crate::sync::{fence, AtomicBool, AtomicU64, Ordering, Padded};

/// Announce-slot value of a worker with no running transaction.
pub(crate) const IDLE: u64 = u64::MAX;

/// Most workers one engine serves: a locked lock word stores the owner's
/// index, and per-worker tables stay small.
pub const MAX_WORKERS: usize = 1024;

/// Errors setting up an engine or its workers (transaction conflicts are
/// [`super::Abort`], not errors).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StmError {
    #[error("an engine needs 1..={max} workers, not {requested}")]
    WorkerCount { requested: usize, max: usize },
    #[error("worker {index} out of range: this engine has {workers}")]
    NoSuchWorker { index: usize, workers: usize },
    #[error("worker {index} is already in use by another thread")]
    WorkerTaken { index: usize },
}

struct Slot {
    /// Lower bound of the snapshot of the worker's running transaction, or
    /// [`IDLE`].
    announce: AtomicU64,
    /// Set while a [`Worker`] handle for this slot exists: two handles on
    /// one slot would overwrite each other's announcements.
    claimed: AtomicBool,
}

/// One transactional memory: all the data structures of one NF instance
/// and the workers that run its handlers.
pub struct Stm {
    id: u32,
    clock: Padded<AtomicU64>,
    slots: Box<[Padded<Slot>]>,
    registry: Mutex<Vec<StructureInfo>>,
}

impl Stm {
    /// An engine for `workers` worker threads (each takes one with
    /// [`Stm::worker`]).
    pub fn new(workers: usize) -> Result<Stm, StmError> {
        if workers == 0 || workers > MAX_WORKERS {
            return Err(StmError::WorkerCount { requested: workers, max: MAX_WORKERS });
        }
        // Process-wide, never model-checked: only tells engines apart.
        static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let slots = (0..workers)
            .map(|_| Padded(Slot { announce: AtomicU64::new(IDLE), claimed: AtomicBool::new(false) }))
            .collect();
        Ok(Stm {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            clock: Padded(AtomicU64::new(0)),
            slots,
            registry: Mutex::new(Vec::new()),
        })
    }

    pub fn workers(&self) -> usize {
        self.slots.len()
    }

    /// Registers a data structure; its objects carry the returned id and
    /// the profiler reports it by `name` and by the caller's line.
    #[track_caller]
    pub fn register(&self, kind: StructureKind, name: impl Into<String>) -> StructureId {
        let created_at = Location::caller();
        let mut registry = self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let id = StructureId(registry.len() as u32);
        registry.push(StructureInfo { id, kind, name: name.into(), created_at });
        id
    }

    pub fn structures(&self) -> Vec<StructureInfo> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub fn structure(&self, id: StructureId) -> Option<StructureInfo> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(id.0 as usize).cloned()
    }

    /// The handle worker `index` runs transactions with. One per index at a
    /// time; dropping it frees the index.
    pub fn worker(&self, index: usize) -> Result<Worker<'_>, StmError> {
        let slot = self.slots.get(index).ok_or(StmError::NoSuchWorker { index, workers: self.slots.len() })?;
        if slot.claimed.swap(true, Ordering::Acquire) {
            return Err(StmError::WorkerTaken { index });
        }
        Ok(Worker::new(self, index))
    }

    /// The current value of the version clock (number of writing commits
    /// so far, plus commit attempts that aborted after taking a version).
    pub fn clock(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn release_worker(&self, index: usize) {
        self.slots[index].announce.store(IDLE, Ordering::SeqCst);
        self.slots[index].claimed.store(false, Ordering::Release);
    }

    /// Starts a transaction of `worker`: announces, then returns the
    /// snapshot version. The announcement is a clock value read *before*
    /// the store and the snapshot one read *after* it, so the announcement
    /// never exceeds the snapshot, and a reclaimer that missed the store
    /// (see [`Stm::horizon`]) read the clock no later than we do.
    pub(crate) fn begin(&self, worker: usize) -> u64 {
        let lower = self.clock.load(Ordering::SeqCst);
        self.slots[worker].announce.store(lower, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.clock.load(Ordering::SeqCst)
    }

    /// Ends the running transaction of `worker`: after this, versions it
    /// could see may be freed. SeqCst so a reclaimer that reads IDLE
    /// synchronises with every read the transaction made before.
    pub(crate) fn end(&self, worker: usize) {
        self.slots[worker].announce.store(IDLE, Ordering::SeqCst);
    }

    /// Reads the clock to extend a snapshot.
    pub(crate) fn current_version(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Takes a commit version. AcqRel: the locks our caller took are
    /// visible to anyone who reads this clock value (so a reader with
    /// `rv >= wv` finds our objects locked), and we see the locks of every
    /// commit that took an earlier version (so validation finds them).
    pub(crate) fn next_commit_version(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The oldest snapshot any running or future transaction can have:
    /// nodes older than the newest node at or below it are unreachable.
    pub(crate) fn horizon(&self) -> u64 {
        let mut horizon = self.clock.load(Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for slot in self.slots.iter() {
            horizon = horizon.min(slot.announce.load(Ordering::SeqCst));
        }
        horizon
    }
}
