//! A transactional object: a lock word and a chain of immutable versions.

use std::any::Any;
use std::marker::PhantomData;
use std::ptr;

use super::abort::Abort;
use super::access::{Access, ElementClass, ObjectId, Op, StructureId};
use super::engine::Stm;
use super::tx::Tx;
#[cfg(loom)]
use crate::sync::AtomicBool;
use crate::sync::{AtomicPtr, AtomicU64, Ordering, SpinWait};

// Lock word: bit 0 set = locked, bits 1.. = owner worker index;
// bit 0 clear = unlocked, bits 1.. = version of the newest node.
pub(crate) fn is_locked(word: u64) -> bool {
    word & 1 == 1
}

pub(crate) fn version_of(word: u64) -> u64 {
    word >> 1
}

pub(crate) fn unlocked(version: u64) -> u64 {
    version << 1
}

pub(crate) fn locked_by(worker: usize) -> u64 {
    ((worker as u64) << 1) | 1
}

/// One version of an object's value. Immutable once linked into a chain
/// (except `older`, which only the reclaimer cuts), so nodes of different
/// objects sharing a cache line only ever share it for reading: unlike the
/// object slots, they need no cache-line alignment (which would cost an
/// aligned allocation per write).
pub(crate) struct Node<T> {
    version: u64,
    written_by: Option<Access>,
    older: AtomicPtr<Node<T>>,
    /// Under loom, reclaimed nodes are marked instead of freed, and readers
    /// assert they never read a marked one: the model checker then proves
    /// the reclamation rule, which it could not see through a real free.
    #[cfg(loom)]
    retired: AtomicBool,
    value: T,
}

impl<T> Node<T> {
    fn new(version: u64, value: T, written_by: Option<Access>) -> Node<T> {
        Node {
            version,
            written_by,
            older: AtomicPtr::new(ptr::null_mut()),
            #[cfg(loom)]
            retired: AtomicBool::new(false),
            value,
        }
    }

    pub(crate) fn value(&self) -> &T {
        &self.value
    }

    pub(crate) fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }

    pub(crate) fn set_written_by(&mut self, access: Access) {
        self.written_by = Some(access);
    }
}

/// A pending write: the node that will become the new head at commit.
pub(crate) fn pending_node<T: Send + 'static>(value: T, access: Access) -> Box<dyn Any + Send> {
    Box::new(Node::new(0, value, Some(access)))
}

/// A value under transactional control. Aligned to a cache line so lock
/// words of neighbouring objects (vector elements, map buckets) do not
/// share one; versions are separate allocations.
///
/// Access goes through a [`Tx`]: `read`, `read_with`, `write`, `update`.
/// Built-in data structures are made of these; NF code normally uses the
/// structures, but a bare `TObj` is a fine aggregate variable too.
#[repr(align(64))]
pub struct TObj<T> {
    lock: AtomicU64,
    head: AtomicPtr<Node<T>>,
    id: ObjectId,
    stm: u32,
    _owns: PhantomData<Box<Node<T>>>,
}

impl<T: Send + Sync + 'static> TObj<T> {
    /// A new object of `stm` holding `value` as version 0 (visible to every
    /// snapshot), of class [`ElementClass::Element`].
    pub fn new(stm: &Stm, structure: StructureId, element: u64, value: T) -> TObj<T> {
        TObj::with_class(stm, structure, element, ElementClass::Element, value)
    }

    /// A new object of a structure made of several kinds of object.
    pub(crate) fn with_class(
        stm: &Stm,
        structure: StructureId,
        element: u64,
        class: ElementClass,
        value: T,
    ) -> TObj<T> {
        let head = Box::into_raw(Box::new(Node::new(0, value, None)));
        TObj {
            lock: AtomicU64::new(unlocked(0)),
            head: AtomicPtr::new(head),
            id: ObjectId { structure, element, class },
            stm: stm.id(),
            _owns: PhantomData,
        }
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// The value in `tx`'s snapshot (or `tx`'s own pending write).
    #[track_caller]
    pub fn read<'a>(&'a self, tx: &mut Tx<'a>) -> Result<T, Abort>
    where
        T: Clone,
    {
        tx.read_with(self, Access::here(Op::Read, 0), T::clone)
    }

    /// Calls `f` on the value in `tx`'s snapshot, without cloning it.
    #[track_caller]
    pub fn read_with<'a, R>(&'a self, tx: &mut Tx<'a>, f: impl FnOnce(&T) -> R) -> Result<R, Abort> {
        tx.read_with(self, Access::here(Op::Read, 0), f)
    }

    /// Replaces the value (a blind write: it does not read the old one).
    #[track_caller]
    pub fn write<'a>(&'a self, tx: &mut Tx<'a>, value: T) -> Result<(), Abort> {
        tx.write(self, Access::here(Op::Write, 0), value)
    }

    /// Read-modify-write.
    #[track_caller]
    pub fn update<'a, R>(&'a self, tx: &mut Tx<'a>, f: impl FnOnce(&mut T) -> R) -> Result<R, Abort>
    where
        T: Clone,
    {
        tx.update(self, Access::here(Op::Write, 0), f)
    }

    /// The newest value, outside any transaction (`&mut self` proves no
    /// transaction is running on it).
    pub fn get_mut(&mut self) -> &mut T {
        let head = self.head.load(Ordering::Acquire);
        // SAFETY: the head node is live (never freed while it is the head),
        // and `&mut self` excludes every other access to the chain.
        unsafe { &mut (*head).value }
    }

    /// Calls `f` on the newest version at or below `rv`.
    ///
    /// The caller must be a running transaction whose announcement is at
    /// most `rv` (see the module docs): that keeps every node it can reach
    /// alive, and keeps a node at or below `rv` in the chain.
    pub(crate) fn with_visible<R>(&self, rv: u64, f: impl FnOnce(&T) -> R) -> R {
        let mut current = self.head.load(Ordering::Acquire);
        loop {
            // SAFETY: `current` came from `head` or an `older` link of a
            // node we could reach; the caller's announcement (<= rv) keeps
            // every node down to the first one at or below rv from being
            // reclaimed (reclaimers free only nodes past the newest one at
            // or below the minimum announcement), and nodes are never
            // mutated after publication apart from `older`.
            let node = unsafe { &*current };
            if node.version <= rv {
                let result = f(&node.value);
                #[cfg(loom)]
                assert!(!node.retired.load(Ordering::SeqCst), "read a reclaimed version");
                return result;
            }
            current = node.older.load(Ordering::Acquire);
            assert!(!current.is_null(), "no version of {} at or below snapshot {rv}: reclamation bug", self.id);
        }
    }
}

/// The engine's view of an object, whatever its value type: what the read
/// and write sets of a transaction hold.
pub(crate) trait ErasedObj: Sync {
    fn lock_word(&self) -> &AtomicU64;
    fn object_id(&self) -> ObjectId;
    fn engine_id(&self) -> u32;
    /// Spins while a commit holds the lock; returns the newest version.
    fn wait_unlocked(&self) -> u64;
    /// The access that wrote the oldest version newer than `rv` (the write
    /// that a transaction with snapshot `rv` conflicted with). Same safety
    /// contract as [`TObj::with_visible`].
    fn first_write_after(&self, rv: u64) -> Option<Access>;
    /// Links `pending` (a `Node<T>` from [`pending_node`]) as the newest
    /// version and frees versions no snapshot can reach any more. The
    /// caller holds the lock.
    fn install(&self, pending: Box<dyn Any + Send>, version: u64, horizon: u64);
}

impl<T: Send + Sync + 'static> ErasedObj for TObj<T> {
    fn lock_word(&self) -> &AtomicU64 {
        &self.lock
    }

    fn object_id(&self) -> ObjectId {
        self.id
    }

    fn engine_id(&self) -> u32 {
        self.stm
    }

    fn wait_unlocked(&self) -> u64 {
        let mut wait = SpinWait::default();
        loop {
            let word = self.lock.load(Ordering::Acquire);
            if !is_locked(word) {
                return version_of(word);
            }
            wait.pause();
        }
    }

    fn first_write_after(&self, rv: u64) -> Option<Access> {
        let mut current = self.head.load(Ordering::Acquire);
        let mut found = None;
        while !current.is_null() {
            // SAFETY: as in `with_visible`; we stop at the first node at or
            // below rv, which the caller's announcement keeps alive.
            let node = unsafe { &*current };
            if node.version <= rv {
                break;
            }
            found = node.written_by;
            current = node.older.load(Ordering::Acquire);
        }
        found
    }

    fn install(&self, pending: Box<dyn Any + Send>, version: u64, horizon: u64) {
        let mut node: Box<Node<T>> = match pending.downcast() {
            Ok(node) => node,
            Err(_) => unreachable!("a pending write of another type for {}", self.id),
        };
        node.version = version;
        // Only the lock holder links or cuts nodes, so this is the head.
        node.older.store(self.head.load(Ordering::Relaxed), Ordering::Relaxed);
        let new_head = Box::into_raw(node);
        self.head.store(new_head, Ordering::Release);
        self.reclaim_below(new_head, horizon);
    }
}

impl<T> TObj<T> {
    /// Cuts the chain after the newest node at or below `horizon`: no
    /// running or future transaction reads past that node.
    fn reclaim_below(&self, head: *mut Node<T>, horizon: u64) {
        let mut current = head;
        loop {
            // SAFETY: we hold the lock, so no one else cuts this chain, and
            // the nodes down to the first one at or below horizon are live.
            let node = unsafe { &*current };
            if node.version <= horizon {
                let tail = node.older.swap(ptr::null_mut(), Ordering::AcqRel);
                free_chain(tail);
                return;
            }
            current = node.older.load(Ordering::Acquire);
            if current.is_null() {
                return;
            }
        }
    }
}

/// Frees a detached tail of a chain.
fn free_chain<T>(mut current: *mut Node<T>) {
    while !current.is_null() {
        #[cfg(not(loom))]
        {
            // SAFETY: the tail was detached from the chain by the only
            // thread allowed to cut it, and no transaction can still be
            // reading it (see `reclaim_below`); each node was created by
            // `Box::into_raw` and is freed once, here.
            let node = unsafe { Box::from_raw(current) };
            current = node.older.load(Ordering::Relaxed);
        }
        #[cfg(loom)]
        {
            // SAFETY: as above; under loom the node is marked, not freed
            // (leaked), so a wrong rule shows as a failed assertion in a
            // reader instead of undefined behaviour.
            let node = unsafe { &*current };
            node.retired.store(true, Ordering::SeqCst);
            current = node.older.load(Ordering::Relaxed);
        }
    }
}

impl<T> Drop for TObj<T> {
    fn drop(&mut self) {
        let mut current = self.head.load(Ordering::Relaxed);
        while !current.is_null() {
            // SAFETY: `&mut self`: no transaction can reach the chain any
            // more; every node was created by `Box::into_raw` and is
            // reachable exactly once (retired nodes under loom are already
            // detached).
            let node = unsafe { Box::from_raw(current) };
            current = node.older.load(Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::stm::StructureKind;

    impl<T> TObj<T> {
        fn chain_len(&self) -> usize {
            let mut n = 0;
            let mut current = self.head.load(Ordering::Acquire);
            while !current.is_null() {
                n += 1;
                // SAFETY: single-threaded test, no reclaimer running.
                current = unsafe { &*current }.older.load(Ordering::Acquire);
            }
            n
        }
    }

    #[test]
    fn old_versions_live_while_a_snapshot_needs_them_and_are_freed_after() {
        let stm = Stm::new(2).unwrap();
        let id = stm.register(StructureKind::Object, "x");
        let x = TObj::new(&stm, id, 0, 0u64);
        let mut reader = stm.worker(0).unwrap();
        let mut writer = stm.worker(1).unwrap();
        writer.set_reclaim_period(1);
        let seen = reader.atomically(0, |tx| {
            let before = x.read(tx)?;
            for _ in 0..100 {
                writer.atomically(0, |wtx| x.update(wtx, |v| *v += 1));
            }
            // Every version since the reader's snapshot is still linked.
            assert_eq!(x.chain_len(), 101);
            Ok((before, x.read(tx)?))
        });
        assert_eq!(seen, (0, 0));
        writer.atomically(0, |wtx| x.update(wtx, |v| *v += 1));
        assert_eq!(x.chain_len(), 2, "the newest and the one the horizon rests on");
        writer.atomically(0, |wtx| x.update(wtx, |v| *v += 1));
        assert_eq!(x.chain_len(), 2);
        assert_eq!(reader.atomically(0, |tx| x.read(tx)), 102);
    }
}
