//! `Allocator`: leases on the indices `0..capacity` (NAT ports, table
//! rows), with expiry and refresh, per-core free pools with stealing and
//! per-core lease lists ordered by expiry.

use super::DsError;
use crate::stm::{Abort, Access, Op, Stm, StructureId, StructureKind, TObj, Tx};

/// "No index" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// Object element ids: slot `i` is `i`; worker `w`'s free pool is
/// `FREE_POOL_ELEMENT + w`; its lease list is `LEASE_LIST_ELEMENT + w`.
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

/// Leases on `0..capacity`.
///
/// * `allocate` pops the calling worker's free pool; when it is empty it
///   steals from the next non-empty pool after its own (scanning reads only
///   empty pools and the victim, so a steal conflicts with the victim's
///   owner rather than with every worker, as choosing the fullest pool
///   would). The lease goes at the newest end of the worker's lease list.
/// * `refresh` moves a lease to the newest end of its list and pushes its
///   expiry; `expire` frees the calling worker's leases from the oldest end.
/// * `free` returns an index to the calling worker's pool.
///
/// Conflict causes (NFOS Table 5): allocations that steal from another
/// pool (recipe: overprovision), and refreshes on one lease list (recipe:
/// raise the refresh interval).
pub struct Allocator {
    structure: StructureId,
    config: AllocatorConfig,
    slots: Box<[TObj<Slot>]>,
    pools: Box<[TObj<FreePool>]>,
    leases: Box<[TObj<LeaseList>]>,
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
                TObj::new(stm, structure, u64::from(i), slot)
            })
            .collect();
        let pools = (0..workers)
            .map(|w| {
                let first = w * per_worker;
                let len = capacity.saturating_sub(first).min(per_worker);
                let pool = FreePool { head: if len > 0 { first } else { NIL }, len };
                TObj::new(stm, structure, FREE_POOL_ELEMENT + u64::from(w), pool)
            })
            .collect();
        let leases = (0..workers)
            .map(|w| {
                let list = LeaseList { newest: NIL, oldest: NIL, len: 0 };
                TObj::new(stm, structure, LEASE_LIST_ELEMENT + u64::from(w), list)
            })
            .collect();
        Ok(Allocator { structure, config, slots, pools, leases })
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

    /// Pushes the expiry of `index` to `now + lease_ns`, unless it was
    /// refreshed less than `refresh_interval_ns` ago. Returns whether
    /// `index` is leased.
    #[track_caller]
    pub fn refresh<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<bool, Abort> {
        let access = Access::here(Op::AllocatorRefresh, u64::from(index) + 1);
        let slot = tx.read_with(&self.slots[index as usize], access, |s| *s)?;
        if slot.state != SlotState::Leased {
            return Ok(false);
        }
        let now = tx.now_ns();
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

    /// Frees up to `max` of the calling worker's leases that have expired
    /// (`expires_at <= now`), oldest first, appending their indices to
    /// `expired`. Returns how many.
    #[track_caller]
    pub fn expire<'a>(&'a self, tx: &mut Tx<'a>, max: usize, expired: &mut Vec<u32>) -> Result<usize, Abort> {
        let access = Access::here(Op::AllocatorExpire, 0);
        let worker = tx.worker();
        let now = tx.now_ns();
        let mut count = 0;
        while count < max {
            let oldest = tx.read_with(&self.leases[worker], access, |l| l.oldest)?;
            if oldest == NIL {
                break;
            }
            let slot = tx.read_with(&self.slots[oldest as usize], access, |s| *s)?;
            if slot.expires_at > now {
                break;
            }
            self.unlink_lease(tx, oldest, slot, access)?;
            self.push_free(tx, worker as u32, oldest, access)?;
            expired.push(oldest);
            count += 1;
        }
        Ok(count)
    }

    /// Whether `index` is leased, and until when.
    #[track_caller]
    pub fn lease_expiry<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<Option<u64>, Abort> {
        let access = Access::here(Op::AllocatorRefresh, u64::from(index) + 1);
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
