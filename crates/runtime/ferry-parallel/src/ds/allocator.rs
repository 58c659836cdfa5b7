//! `Allocator`: leases on the indices `0..capacity` (NAT ports, table
//! rows), with expiry and refresh, per-core free pools with stealing and
//! per-core lease lists ordered by expiry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::DsError;
use crate::stm::{Abort, Access, ElementClass, Op, Stm, StructureId, StructureKind, TObj, Tx};
use crate::sync::Padded;

/// "No index" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// Object element ids: slot `i` is `i` (class
/// [`ElementClass::AllocatorSlot`]); worker `w`'s free pool is
/// `FREE_POOL_ELEMENT + w` ([`ElementClass::AllocatorFreePool`]); its lease
/// list is `LEASE_LIST_ELEMENT + w` ([`ElementClass::AllocatorLeaseList`]).
pub const FREE_POOL_ELEMENT: u64 = 1 << 32;
pub const LEASE_LIST_ELEMENT: u64 = 2 << 32;

/// Sizing and timing of an [`Allocator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatorConfig {
    /// Number of indices (at most `u32::MAX - 1`).
    pub capacity: u32,
    /// A lease expires this long after it was taken or last refreshed.
    pub lease_ns: u64,
    /// `refresh` within this long of the previous refresh does nothing (a
    /// read, no write): the NFOS recipe "raise the refresh interval" for
    /// conflicting refreshes. 0 refreshes every time.
    pub refresh_interval_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Leased,
}

/// One index. `home` is the worker whose pool or lease list holds it;
/// `prev`/`next` link it into that list (a free pool uses `next` only; a
/// lease list runs from newest via `next` to oldest).
#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    home: u32,
    prev: u32,
    next: u32,
    expires_at: u64,
    refreshed_at: u64,
}

#[derive(Debug, Clone, Copy)]
struct FreePool {
    head: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct LeaseList {
    newest: u32,
    oldest: u32,
    len: u32,
}

/// A worker's `expire` calls without a call of another worker before it
/// counts that worker as idle (besides a lease period of time). As many as
/// the batches a trace run queues per worker, so that a worker that is
/// merely behind is rarely taken for idle when NFs expire once per batch.
const IDLE_AFTER_CALLS: u64 = 8;

/// A worker's `expire` calls, counted once per distinct time (so retries
/// of an aborted attempt, which run at the same time, count once).
struct Activity {
    calls: AtomicU64,
    last_call_ns: AtomicU64,
}

impl Activity {
    fn record(&self, now: u64) {
        if self.last_call_ns.swap(now, Ordering::Relaxed) != now {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// What a worker last saw of another worker's `expire` calls, and when
/// (its own time, and its own call count) it last saw their count change.
#[derive(Default)]
struct Seen {
    calls: AtomicU64,
    changed_at_ns: AtomicU64,
    changed_at_call: AtomicU64,
}

/// Leases on `0..capacity`.
///
/// * `allocate` pops the calling worker's free pool; when it is empty it
///   steals from the next non-empty pool after its own (scanning reads only
///   empty pools and the victim, so a steal conflicts with the victim's
///   owner rather than with every worker, as choosing the fullest pool
///   would). The lease goes at the newest end of the worker's lease list.
/// * A lease is live until its expiry (`expires_at > now`). Once expired it
///   is dead even before it is reclaimed: `refresh` does not revive it
///   (it returns `false`), so whether a lease survives does not depend on
///   when a core gets round to reclaiming it.
/// * `refresh` moves a live lease to the newest end of its list and pushes
///   its expiry. `expire` reclaims expired leases, oldest first, into the
///   calling worker's pool: from the caller's own lease list, and, when
///   the caller's pool is empty, from the lists of workers that have
///   stopped calling `expire` (see [`Allocator::expire`]), so the leases of
///   a worker that stopped getting traffic are not stranded.
/// * `free` returns an index to the calling worker's pool.
///
/// Conflict causes (NFOS Table 5): allocations that steal from another
/// pool (recipe: overprovision), and refreshes on one lease list (recipe:
/// raise the refresh interval); also frees and expiries on another core's
/// lease list. The objects carry their [`ElementClass`] (slot, free pool,
/// lease list) so the profiler can tell these apart.
pub struct Allocator {
    structure: StructureId,
    config: AllocatorConfig,
    slots: Box<[TObj<Slot>]>,
    pools: Box<[TObj<FreePool>]>,
    leases: Box<[TObj<LeaseList>]>,
    /// Per worker, its `expire` calls so far: a liveness signal the other
    /// workers read outside transactions (plain atomics, not part of any
    /// transaction's footprint; not model-checked under loom).
    activity: Box<[Padded<Activity>]>,
    /// Per worker, what it saw of each worker's `activity` (allocated
    /// at its first look; only that worker writes it).
    seen: Box<[OnceLock<Box<[Seen]>>]>,
}

impl Allocator {
    /// An allocator with the indices split evenly over the workers' pools.
    #[track_caller]
    pub fn new(stm: &Stm, name: &str, config: AllocatorConfig) -> Result<Allocator, DsError> {
        if config.capacity == 0 {
            return Err(DsError::Empty { structure: "Allocator", name: name.to_string(), what: "capacity" });
        }
        if config.capacity == u32::MAX {
            let (name, value, max) = (name.to_string(), u64::from(config.capacity), u64::from(u32::MAX - 1));
            return Err(DsError::TooLarge { structure: "Allocator", name, what: "capacity", value, max });
        }
        let structure = stm.register(StructureKind::Allocator, name);
        let workers = stm.workers() as u32;
        let (capacity, per_worker) = (config.capacity, config.capacity.div_ceil(workers));
        let pool_of = |index: u32| index / per_worker;
        let slots = (0..capacity)
            .map(|i| {
                let next = if i + 1 < capacity && pool_of(i + 1) == pool_of(i) { i + 1 } else { NIL };
                let slot =
                    Slot { state: SlotState::Free, home: pool_of(i), prev: NIL, next, expires_at: 0, refreshed_at: 0 };
                TObj::with_class(stm, structure, u64::from(i), ElementClass::AllocatorSlot, slot)
            })
            .collect();
        let pools = (0..workers)
            .map(|w| {
                let first = w * per_worker;
                let len = capacity.saturating_sub(first).min(per_worker);
                let pool = FreePool { head: if len > 0 { first } else { NIL }, len };
                TObj::with_class(
                    stm,
                    structure,
                    FREE_POOL_ELEMENT + u64::from(w),
                    ElementClass::AllocatorFreePool,
                    pool,
                )
            })
            .collect();
        let leases = (0..workers)
            .map(|w| {
                let list = LeaseList { newest: NIL, oldest: NIL, len: 0 };
                let element = LEASE_LIST_ELEMENT + u64::from(w);
                TObj::with_class(stm, structure, element, ElementClass::AllocatorLeaseList, list)
            })
            .collect();
        let activity = (0..workers)
            .map(|_| Padded(Activity { calls: AtomicU64::new(0), last_call_ns: AtomicU64::new(u64::MAX) }))
            .collect();
        let seen = (0..workers).map(|_| OnceLock::new()).collect();
        Ok(Allocator { structure, config, slots, pools, leases, activity, seen })
    }

    pub fn structure(&self) -> StructureId {
        self.structure
    }

    pub fn config(&self) -> AllocatorConfig {
        self.config
    }

    /// Leases a free index until `now + lease_ns`; `None` when every index
    /// is leased.
    #[track_caller]
    pub fn allocate<'a>(&'a self, tx: &mut Tx<'a>) -> Result<Option<u32>, Abort> {
        let access = Access::here(Op::AllocatorAllocate, 0);
        let worker = tx.worker();
        let index = match self.pop_free(tx, worker, access)? {
            Some(index) => index,
            None => match self.steal(tx, worker, access)? {
                Some(index) => index,
                None => return Ok(None),
            },
        };
        let now = tx.now_ns();
        self.push_lease(tx, worker as u32, index, now, access)?;
        Ok(Some(index))
    }

    /// Pushes the expiry of a live lease on `index` to `now + lease_ns`,
    /// unless it was refreshed less than `refresh_interval_ns` ago. Returns
    /// whether `index` holds a live lease: `false` when it is free, and
    /// also when its lease has expired (`expires_at <= now`) but was not
    /// reclaimed yet. Such a lease is not revived: it stays as it is until
    /// [`Allocator::expire`] reclaims it or the caller [`Allocator::free`]s
    /// it (an NF that finds its entry expired frees it and allocates anew).
    #[track_caller]
    pub fn refresh<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<bool, Abort> {
        let access = Access::here(Op::AllocatorRefresh, u64::from(index) + 1);
        let slot = tx.read_with(&self.slots[index as usize], access, |s| *s)?;
        let now = tx.now_ns();
        if slot.state != SlotState::Leased || slot.expires_at <= now {
            return Ok(false);
        }
        if now.saturating_sub(slot.refreshed_at) < self.config.refresh_interval_ns {
            return Ok(true);
        }
        self.unlink_lease(tx, index, slot, access)?;
        self.push_lease(tx, slot.home, index, now, access)?;
        Ok(true)
    }

    /// Ends the lease on `index` now. Returns whether it was leased.
    #[track_caller]
    pub fn free<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<bool, Abort> {
        let access = Access::here(Op::AllocatorFree, u64::from(index) + 1);
        let slot = tx.read_with(&self.slots[index as usize], access, |s| *s)?;
        if slot.state != SlotState::Leased {
            return Ok(false);
        }
        self.unlink_lease(tx, index, slot, access)?;
        self.push_free(tx, tx.worker() as u32, index, access)?;
        Ok(true)
    }

    /// Reclaims up to `max` expired leases into the calling worker's free
    /// pool, oldest first, appending their indices to `expired`. Returns
    /// how many.
    ///
    /// Which leases. NFOS expires per core: each core reclaims its own
    /// lease list, so a core that stops getting traffic (and so stops
    /// calling `expire`) strands its expired leases and the pool shrinks.
    /// Here:
    /// * from the caller's own list, every expired lease (`expires_at <=
    ///   now`), first;
    /// * then, if `max` is not reached and the caller's pool is still
    ///   empty (it is short of indices: its next allocation would steal, or
    ///   fail), from the list of each other worker (in turn, starting after
    ///   the caller) that is **idle**: the caller has seen no `expire` call
    ///   of it for a lease period of the caller's time and over the
    ///   caller's last eight calls (calls are counted once per distinct
    ///   time, so retried attempts count once). From an idle worker's list it takes the
    ///   leases that expired at least a further lease period ago
    ///   (`expires_at + lease_ns <= now`). Stranded leases thus come back
    ///   as soon as a worker needs them, a lease period after they expired.
    ///
    /// Why this footprint. Reclaiming from another core's list conflicts
    /// with that core (its allocations, refreshes and expiries write the
    /// list), and even reading it does when the caller's transaction
    /// writes anything. So nothing of another worker is read unless the
    /// caller is short and that worker does not reclaim its own leases:
    /// the caller's pool is peeked at (an unrecorded read: a recorded one
    /// would conflict with thieves), idleness is a plain counter of
    /// `expire` calls (outside transactions), and an idle worker's list is
    /// peeked at first and read for real only when it holds a lease old
    /// enough. A worker with free indices never sweeps: stranded leases
    /// are dead (`refresh` and the NFs' liveness checks see them expired)
    /// and cost capacity only when someone runs short. The idleness window
    /// is in time and in calls so that an active worker is not taken for
    /// idle when it calls `expire` less often than once per lease (NFs
    /// reclaim on a periodic timer) or lags behind in time (each worker
    /// runs at its own packets' times); the extra lease period keeps a
    /// sweep from taking a lease that a worker waking up would still find
    /// live, unless the workers' times are a lease apart. The price: an NF
    /// that never calls `expire` on a core has that core's leases
    /// reclaimed by short cores.
    ///
    /// Work per call: at most `max` leases reclaimed; when short, one
    /// atomic load per other worker and two peeks per idle one.
    #[track_caller]
    pub fn expire<'a>(&'a self, tx: &mut Tx<'a>, max: usize, expired: &mut Vec<u32>) -> Result<usize, Abort> {
        let access = Access::here(Op::AllocatorExpire, 0);
        let worker = tx.worker();
        let now = tx.now_ns();
        self.activity[worker].record(now);
        let mut count = self.reclaim_list(tx, worker, now, max, expired, access)?;
        let workers = self.leases.len();
        // Nothing of another worker's qualifies before a lease period. The
        // own pool is peeked at (its reads would conflict with thieves).
        let Some(cutoff) = now.checked_sub(self.config.lease_ns) else { return Ok(count) };
        if count >= max || workers == 1 || tx.peek_with(&self.pools[worker], |p| p.head != NIL) {
            return Ok(count);
        }
        for offset in 1..workers {
            if count >= max {
                break;
            }
            let owner = (worker + offset) % workers;
            if !self.is_idle(worker, owner, now) {
                continue;
            }
            let oldest = tx.peek_with(&self.leases[owner], |l| l.oldest);
            if oldest == NIL || tx.peek_with(&self.slots[oldest as usize], |s| s.expires_at) > cutoff {
                continue;
            }
            count += self.reclaim_list(tx, owner, cutoff, max - count, expired, access)?;
        }
        Ok(count)
    }

    /// Whether `worker` has seen no `expire` call of `owner` for a lease
    /// period of its time `now` and over its own last [`IDLE_AFTER_CALLS`]
    /// calls. Only `worker` updates what it saw; a retried attempt (same
    /// time, same own call count) gets the answer the first one got unless
    /// `owner` has called since.
    fn is_idle(&self, worker: usize, owner: usize, now: u64) -> bool {
        let calls = self.activity[owner].calls();
        let own_calls = self.activity[worker].calls();
        let row = self.seen[worker].get_or_init(|| (0..self.leases.len()).map(|_| Seen::default()).collect());
        let seen = &row[owner];
        if seen.calls.load(Ordering::Relaxed) != calls {
            seen.calls.store(calls, Ordering::Relaxed);
            seen.changed_at_ns.store(now, Ordering::Relaxed);
            seen.changed_at_call.store(own_calls, Ordering::Relaxed);
            return false;
        }
        now.saturating_sub(seen.changed_at_ns.load(Ordering::Relaxed)) >= self.config.lease_ns
            && own_calls.saturating_sub(seen.changed_at_call.load(Ordering::Relaxed)) >= IDLE_AFTER_CALLS
    }

    /// Whether `index` is leased, and until when (an expiry at or before
    /// the transaction's time: expired, not reclaimed yet). A read-only
    /// query ([`Op::AllocatorQuery`]).
    #[track_caller]
    pub fn lease_expiry<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<Option<u64>, Abort> {
        let access = Access::here(Op::AllocatorQuery, u64::from(index) + 1);
        tx.read_with(&self.slots[index as usize], access, |s| (s.state == SlotState::Leased).then_some(s.expires_at))
    }

    /// Free indices per worker pool, outside any transaction.
    pub fn pool_lengths_mut(&mut self) -> Vec<u32> {
        self.pools.iter_mut().map(|p| p.get_mut().len).collect()
    }

    /// Leased indices per worker, outside any transaction.
    pub fn lease_counts_mut(&mut self) -> Vec<u32> {
        self.leases.iter_mut().map(|l| l.get_mut().len).collect()
    }

    /// Moves up to `max` leases that expired at or before `cutoff` from the
    /// oldest end of `owner`'s lease list to the calling worker's pool.
    fn reclaim_list<'a>(
        &'a self,
        tx: &mut Tx<'a>,
        owner: usize,
        cutoff: u64,
        max: usize,
        expired: &mut Vec<u32>,
        access: Access,
    ) -> Result<usize, Abort> {
        let mut count = 0;
        while count < max {
            let oldest = tx.read_with(&self.leases[owner], access, |l| l.oldest)?;
            if oldest == NIL {
                break;
            }
            let slot = tx.read_with(&self.slots[oldest as usize], access, |s| *s)?;
            if slot.expires_at > cutoff {
                break;
            }
            self.unlink_lease(tx, oldest, slot, access)?;
            self.push_free(tx, tx.worker() as u32, oldest, access)?;
            expired.push(oldest);
            count += 1;
        }
        Ok(count)
    }

    fn pop_free<'a>(&'a self, tx: &mut Tx<'a>, worker: usize, access: Access) -> Result<Option<u32>, Abort> {
        let pool = tx.read_with(&self.pools[worker], access, |p| *p)?;
        if pool.head == NIL {
            return Ok(None);
        }
        let next = tx.read_with(&self.slots[pool.head as usize], access, |s| s.next)?;
        tx.write(&self.pools[worker], access, FreePool { head: next, len: pool.len - 1 })?;
        Ok(Some(pool.head))
    }

    fn steal<'a>(&'a self, tx: &mut Tx<'a>, thief: usize, access: Access) -> Result<Option<u32>, Abort> {
        let workers = self.pools.len();
        for offset in 1..workers {
            if let Some(index) = self.pop_free(tx, (thief + offset) % workers, access)? {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    fn push_free<'a>(&'a self, tx: &mut Tx<'a>, worker: u32, index: u32, access: Access) -> Result<(), Abort> {
        let pool = tx.read_with(&self.pools[worker as usize], access, |p| *p)?;
        let slot =
            Slot { state: SlotState::Free, home: worker, prev: NIL, next: pool.head, expires_at: 0, refreshed_at: 0 };
        tx.write(&self.slots[index as usize], access, slot)?;
        tx.write(&self.pools[worker as usize], access, FreePool { head: index, len: pool.len + 1 })
    }

    fn push_lease<'a>(
        &'a self,
        tx: &mut Tx<'a>,
        worker: u32,
        index: u32,
        now: u64,
        access: Access,
    ) -> Result<(), Abort> {
        let list = tx.read_with(&self.leases[worker as usize], access, |l| *l)?;
        let slot = Slot {
            state: SlotState::Leased,
            home: worker,
            prev: NIL,
            next: list.newest,
            expires_at: now.saturating_add(self.config.lease_ns),
            refreshed_at: now,
        };
        tx.write(&self.slots[index as usize], access, slot)?;
        if list.newest != NIL {
            tx.update(&self.slots[list.newest as usize], access, |s| s.prev = index)?;
        }
        let oldest = if list.oldest == NIL { index } else { list.oldest };
        tx.write(&self.leases[worker as usize], access, LeaseList { newest: index, oldest, len: list.len + 1 })
    }

    fn unlink_lease<'a>(&'a self, tx: &mut Tx<'a>, index: u32, slot: Slot, access: Access) -> Result<(), Abort> {
        let home = &self.leases[slot.home as usize];
        let mut list = tx.read_with(home, access, |l| *l)?;
        if slot.prev == NIL {
            list.newest = slot.next;
        } else {
            tx.update(&self.slots[slot.prev as usize], access, |s| s.next = slot.next)?;
        }
        if slot.next == NIL {
            list.oldest = slot.prev;
        } else {
            tx.update(&self.slots[slot.next as usize], access, |s| s.prev = slot.prev)?;
        }
        debug_assert!(list.len > 0, "unlinking {index} from an empty lease list");
        list.len -= 1;
        tx.write(home, access, list)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
