//! One transaction attempt: its snapshot, read set and write set, and the
//! commit protocol (see the module docs of [`crate::stm`]).

use std::any::Any;
use std::collections::HashMap;

use super::abort::Abort;
use super::access::Access;
use super::addr_hash::AddrBuildHasher;
use super::engine::Stm;
use super::object::{is_locked, locked_by, pending_node, unlocked, version_of, ErasedObj, Node, TObj};
use crate::sync::{Ordering, SpinWait, Stamp};

/// How many times a read may move the snapshot forward before it settles
/// for the old version (bounds the work under a storm of commits).
const MAX_EXTENSIONS_PER_READ: u32 = 4;

/// One access in this many (on average) is timed for the runtime's
/// accounting.
const ACCESS_SAMPLE_ODDS: u64 = 16;

/// Longest timed access counted (a longer one was preempted).
const MAX_ACCESS_SAMPLE_NS: u64 = 20_000;

/// One object this transaction writes.
pub(crate) struct Entry<'a> {
    obj: &'a dyn ErasedObj,
    /// The access that read `obj` from the committed state before its
    /// first write, if one did (later reads see our own pending value).
    read: Option<Access>,
    /// The node that becomes the new head at commit, and the access that
    /// last wrote it (taken at install).
    write: Option<(Box<dyn Any + Send>, Access)>,
    /// At commit: the unlocked lock word we replaced, to restore on abort.
    locked_from: Option<u64>,
}

/// The buffers a worker lends to each of its transactions, so a
/// transaction allocates nothing but the version nodes it writes.
///
/// The read set is a log, not a set: a read appends the object (unless it
/// is the one read last), which is all a read-only transaction ever pays
/// for it; only commit validation and snapshot extension walk it, and
/// checking an object twice is harmless. The write set is indexed by
/// object, since reads must find their own pending writes.
pub(crate) struct TxBuffers<'a> {
    /// Objects written, in first-write order.
    entries: Vec<Entry<'a>>,
    /// Object address to its index in `entries`.
    index: HashMap<usize, u32, AddrBuildHasher>,
    /// Objects read from the committed state, with the access that read
    /// them.
    reads: Vec<(&'a dyn ErasedObj, Access)>,
    /// What to tell when the attempt commits.
    hooks: Vec<&'a dyn CommitHook>,
    /// xorshift64 state choosing which accesses are timed (never 0).
    sample_state: u64,
}

impl TxBuffers<'_> {
    pub(crate) fn new(worker: usize) -> Self {
        TxBuffers {
            entries: Vec::new(),
            index: HashMap::default(),
            reads: Vec::new(),
            hooks: Vec::new(),
            sample_state: 0x9e37_79b9_7f4a_7c15 ^ (worker as u64).wrapping_mul(0x2545_f491_4f6c_dd1d),
        }
    }
}

/// Something outside the transactional memory that follows a worker's
/// transactions (see [`crate::ds::Statistics`]): told after an attempt it
/// joined commits, on the worker that ran it.
pub(crate) trait CommitHook: Sync {
    fn on_commit(&self, worker: usize, attempt: u64);
}

/// A running transaction. Handlers get `&mut Tx` (inside their context)
/// and pass it to data-structure calls; it is the only way to touch
/// aggregate state.
pub struct Tx<'a> {
    stm: &'a Stm,
    worker: usize,
    /// This attempt's number among its worker's attempts.
    attempt: u64,
    rv: u64,
    now_ns: u64,
    buffers: TxBuffers<'a>,
    writes: usize,
    /// Set when a read had to return a version older than the newest: the
    /// transaction can still commit read-only, but not write.
    doomed: Option<Abort>,
    /// Object accesses so far (an `update` is one of each), for
    /// [`super::TxStats`].
    read_accesses: u64,
    write_accesses: u64,
    /// Estimated time in accesses (see [`Tx::sampled`]).
    sampled_access_ns: u64,
    /// The object address and entry index [`Tx::entry_of`] found last.
    last_entry: Option<(usize, u32)>,
    /// A 256-bit filter over the addresses in the read log.
    read_filter: [u64; 4],
}

impl<'a> Tx<'a> {
    pub(crate) fn begin(stm: &'a Stm, worker: usize, attempt: u64, now_ns: u64, buffers: TxBuffers<'a>) -> Tx<'a> {
        let rv = stm.begin(worker);
        Tx {
            stm,
            worker,
            attempt,
            rv,
            now_ns,
            buffers,
            writes: 0,
            doomed: None,
            read_accesses: 0,
            write_accesses: 0,
            sampled_access_ns: 0,
            last_entry: None,
            read_filter: [0; 4],
        }
    }

    /// Ends the attempt (committed or not) and hands the buffers back.
    pub(crate) fn finish(mut self) -> TxBuffers<'a> {
        self.stm.end(self.worker);
        self.buffers.entries.clear();
        self.buffers.index.clear();
        self.buffers.reads.clear();
        self.buffers.hooks.clear();
        self.buffers
    }

    /// This attempt's number: unique among the attempts of its worker.
    pub(crate) fn attempt(&self) -> u64 {
        self.attempt
    }

    /// Tells `hook` when this attempt commits (once per call).
    pub(crate) fn on_commit(&mut self, hook: &'a dyn CommitHook) {
        self.buffers.hooks.push(hook);
    }

    /// After a successful commit: tells every hook.
    pub(crate) fn run_commit_hooks(&mut self) {
        for hook in self.buffers.hooks.drain(..) {
            hook.on_commit(self.worker, self.attempt);
        }
    }

    /// The time this transaction runs at, in nanoseconds (the runtime sets
    /// it per receive batch: the clock in live mode, packet timestamps in
    /// a trace).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves the transaction's time forward: the runtime sets it to each
    /// packet's arrival time within a batch.
    pub(crate) fn set_now_ns(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// The index of the worker running this transaction (per-core parts of
    /// data structures are indexed by it).
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// How many workers the engine has.
    pub fn workers(&self) -> usize {
        self.stm.workers()
    }

    /// True once this transaction has buffered a write.
    pub fn is_writer(&self) -> bool {
        self.writes > 0
    }

    pub(crate) fn is_read_only(&self) -> bool {
        self.writes == 0
    }

    /// Object reads and writes this attempt made (each call counts, an
    /// `update` as one of each; reads of our own pending writes included).
    pub(crate) fn access_counts(&self) -> (u64, u64) {
        (self.read_accesses, self.write_accesses)
    }

    /// The entry of `obj`, if this attempt wrote it. The last one found
    /// is remembered: handlers tend to hit one object several times in a
    /// row, and then this skips the index.
    fn entry_of(&mut self, obj: &dyn ErasedObj) -> Option<usize> {
        if self.buffers.entries.is_empty() {
            return None;
        }
        let addr = address(obj);
        if let Some((last, i)) = self.last_entry {
            if last == addr {
                return Some(i as usize);
            }
        }
        let i = *self.buffers.index.get(&addr)?;
        self.last_entry = Some((addr, i));
        Some(i as usize)
    }

    fn entry_or_insert(&mut self, obj: &'a dyn ErasedObj) -> usize {
        if let Some(i) = self.entry_of(obj) {
            return i;
        }
        let i = self.buffers.entries.len();
        let read = self.has_read(obj);
        self.buffers.entries.push(Entry { obj, read, write: None, locked_from: None });
        self.buffers.index.insert(address(obj), i as u32);
        self.last_entry = Some((address(obj), i as u32));
        i
    }

    /// Runs one access, timing it with probability 1 /
    /// [`ACCESS_SAMPLE_ODDS`] and counting the time that many times over:
    /// an unbiased estimate of the time in accesses (see
    /// [`super::TxStats::access_ns`]) for two clock reads per
    /// `ACCESS_SAMPLE_ODDS` accesses. Random rather than every n-th, so a
    /// handler's fixed pattern of accesses cannot line up with the samples.
    fn sampled<R>(&mut self, access: impl FnOnce(&mut Self) -> R) -> R {
        let x = &mut self.buffers.sample_state;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        if *x % ACCESS_SAMPLE_ODDS != 0 {
            return access(self);
        }
        let start = Stamp::now();
        let result = access(self);
        let took = start.nanos_until(Stamp::now()).saturating_sub(Stamp::overhead_ns());
        // A sample this long caught the thread being preempted: weighted
        // sixteenfold it would swamp the estimate with the scheduler's time.
        if took <= MAX_ACCESS_SAMPLE_NS {
            self.sampled_access_ns += took * ACCESS_SAMPLE_ODDS;
        }
        result
    }

    /// The estimated time this attempt spent in accesses so far.
    pub(crate) fn sampled_access_ns(&self) -> u64 {
        self.sampled_access_ns
    }

    fn check_engine(&self, obj: &dyn ErasedObj) {
        assert_eq!(obj.engine_id(), self.stm.id(), "{} belongs to another Stm than this transaction", obj.object_id());
    }

    /// Calls `f` on the value of `obj` this transaction sees.
    pub(crate) fn read_with<T, R>(
        &mut self,
        obj: &'a TObj<T>,
        access: Access,
        f: impl FnOnce(&T) -> R,
    ) -> Result<R, Abort>
    where
        T: Send + Sync + 'static,
    {
        self.sampled(|tx| tx.read_with_untimed(obj, access, f))
    }

    fn read_with_untimed<T, R>(&mut self, obj: &'a TObj<T>, access: Access, f: impl FnOnce(&T) -> R) -> Result<R, Abort>
    where
        T: Send + Sync + 'static,
    {
        self.check_engine(obj);
        self.read_accesses += 1;
        if let Some(i) = self.entry_of(obj) {
            if let Some((pending, _)) = &self.buffers.entries[i].write {
                return Ok(f(pending_value(pending)));
            }
        }
        self.settle_snapshot(obj, access)?;
        let result = obj.with_visible(self.rv, f);
        let repeated = self.buffers.reads.last().is_some_and(|(last, _)| address(*last) == address(obj));
        if !repeated {
            self.buffers.reads.push((obj, access));
            let (word, bit) = read_filter_bit(obj);
            self.read_filter[word] |= bit;
        }
        Ok(result)
    }

    /// The first access that read `obj` from the committed state, if any:
    /// a walk of the read log, skipped when the filter rules `obj` out.
    /// Once per object this attempt writes.
    fn has_read(&self, obj: &dyn ErasedObj) -> Option<Access> {
        let (word, bit) = read_filter_bit(obj);
        if self.read_filter[word] & bit == 0 {
            return None;
        }
        self.buffers.reads.iter().find(|(read, _)| address(*read) == address(obj)).map(|(_, access)| *access)
    }

    /// Calls `f` on the value of `obj` in this transaction's snapshot (or
    /// on its own pending write) without recording the read: commit does
    /// not validate it and it never dooms the transaction, so it adds
    /// nothing to the conflict footprint. The value is only a hint (a
    /// commit may have changed `obj` since the snapshot, or be installing
    /// a version within it), for decisions that a recorded read confirms
    /// before anything depends on it. Counted as a read in the stats.
    pub(crate) fn peek_with<T, R>(&mut self, obj: &'a TObj<T>, f: impl FnOnce(&T) -> R) -> R
    where
        T: Send + Sync + 'static,
    {
        self.sampled(|tx| tx.peek_with_untimed(obj, f))
    }

    fn peek_with_untimed<T, R>(&mut self, obj: &'a TObj<T>, f: impl FnOnce(&T) -> R) -> R
    where
        T: Send + Sync + 'static,
    {
        self.check_engine(obj);
        self.read_accesses += 1;
        if let Some((pending, _)) = self.entry_of(obj).and_then(|i| self.buffers.entries[i].write.as_ref()) {
            return f(pending_value(pending));
        }
        // Memory safety as for any read: our announcement (at most `rv`)
        // keeps every version down to the newest one at or below `rv`.
        obj.with_visible(self.rv, f)
    }

    /// Makes sure reading `obj` at `self.rv` is safe: no commit that must
    /// be in our snapshot still holds its lock. Moves the snapshot forward
    /// if `obj` has a newer version and nothing we read has changed; else
    /// the read will be of an older version and the transaction is doomed.
    fn settle_snapshot(&mut self, obj: &'a dyn ErasedObj, access: Access) -> Result<(), Abort> {
        let mut extensions = 0;
        loop {
            let newest = obj.wait_unlocked();
            if newest <= self.rv {
                return Ok(());
            }
            if extensions < MAX_EXTENSIONS_PER_READ && self.try_extend() {
                // The snapshot moved: a commit whose version is now below it
                // may have locked `obj` since we looked, so look again.
                extensions += 1;
                continue;
            }
            let abort = Abort::ReadThenOverwritten {
                object: obj.object_id(),
                ours: access,
                theirs: obj.first_write_after(self.rv),
            };
            if self.is_writer() {
                return Err(abort);
            }
            self.doomed.get_or_insert(abort);
            return Ok(());
        }
    }

    /// Moves the snapshot to the current clock if everything read so far
    /// is still the newest version (LSA-style extension).
    fn try_extend(&mut self) -> bool {
        let now = self.stm.current_version();
        for (obj, _) in &self.buffers.reads {
            let word = obj.lock_word().load(Ordering::Acquire);
            if is_locked(word) || version_of(word) > self.rv {
                return false;
            }
        }
        self.rv = now;
        true
    }

    /// Buffers `value` as the new value of `obj`.
    pub(crate) fn write<T>(&mut self, obj: &'a TObj<T>, access: Access, value: T) -> Result<(), Abort>
    where
        T: Send + Sync + 'static,
    {
        self.sampled(|tx| tx.write_untimed(obj, access, value))
    }

    fn write_untimed<T>(&mut self, obj: &'a TObj<T>, access: Access, value: T) -> Result<(), Abort>
    where
        T: Send + Sync + 'static,
    {
        self.check_engine(obj);
        self.write_accesses += 1;
        let i = self.prepare_write(obj, access)?;
        match &mut self.buffers.entries[i].write {
            Some((pending, last)) => {
                let node = pending_node_mut::<T>(pending);
                *node.value_mut() = value;
                node.set_written_by(access);
                *last = access;
            }
            slot @ None => {
                *slot = Some((pending_node(value, access), access));
                self.writes += 1;
            }
        }
        Ok(())
    }

    /// Read-modify-write of `obj`: `f` sees our pending value if we wrote
    /// `obj` before, else a copy of the snapshot value.
    pub(crate) fn update<T, R>(
        &mut self,
        obj: &'a TObj<T>,
        access: Access,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, Abort>
    where
        T: Clone + Send + Sync + 'static,
    {
        self.sampled(|tx| tx.update_untimed(obj, access, f))
    }

    fn update_untimed<T, R>(
        &mut self,
        obj: &'a TObj<T>,
        access: Access,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, Abort>
    where
        T: Clone + Send + Sync + 'static,
    {
        self.check_engine(obj);
        if let Some(i) = self.entry_of(obj) {
            if self.buffers.entries[i].write.is_some() {
                self.read_accesses += 1;
                self.write_accesses += 1;
                // The object's own conflicts were checked when it was first
                // written (and commit checks them again); only a doomed
                // snapshot stops a further write.
                if let Some(abort) = self.doomed {
                    return Err(abort);
                }
                let (pending, last) = self.buffers.entries[i].write.as_mut().expect("checked above");
                let node = pending_node_mut::<T>(pending);
                node.set_written_by(access);
                *last = access;
                return Ok(f(node.value_mut()));
            }
        }
        let mut value = self.read_with_untimed(obj, access, T::clone)?;
        let result = f(&mut value);
        self.write_untimed(obj, access, value)?;
        Ok(result)
    }

    /// Checks a write may go ahead and returns the object's entry. Aborts
    /// early when the commit would certainly fail: the transaction already
    /// read a stale version, or it read `obj` itself and `obj` has changed.
    fn prepare_write(&mut self, obj: &'a dyn ErasedObj, access: Access) -> Result<usize, Abort> {
        if let Some(abort) = self.doomed {
            return Err(abort);
        }
        let i = self.entry_or_insert(obj);
        if self.buffers.entries[i].read.is_some() {
            let word = obj.lock_word().load(Ordering::Acquire);
            if is_locked(word) {
                let mut abort = Abort::ReadWhileCommitting { object: obj.object_id(), ours: access, theirs: None };
                abort.set_theirs(self.wait_for_theirs(obj));
                return Err(abort);
            }
            if version_of(word) > self.rv {
                let theirs = obj.first_write_after(self.rv);
                return Err(Abort::ReadThenOverwritten { object: obj.object_id(), ours: access, theirs });
            }
        }
        Ok(i)
    }

    /// Waits out another commit holding `obj` and returns its access, if it
    /// committed (commits never wait, so this is short).
    fn wait_for_theirs(&self, obj: &dyn ErasedObj) -> Option<Access> {
        let mut wait = SpinWait::default();
        while is_locked(obj.lock_word().load(Ordering::Acquire)) {
            wait.pause();
        }
        obj.first_write_after(self.rv)
    }

    /// Commits: lock the write set, take a version, validate the read set,
    /// install, unlock. `horizon` bounds what may be reclaimed. On abort
    /// every lock taken is released and nothing is visible.
    pub(crate) fn commit(&mut self, horizon: u64) -> Result<(), Abort> {
        if self.is_read_only() {
            return Ok(());
        }
        if let Err((abort, at)) = self.lock_write_set() {
            return Err(self.abort_commit(abort, at));
        }
        let wv = self.stm.next_commit_version();
        if wv != self.rv + 1 {
            if let Err((abort, at)) = self.validate_read_set() {
                return Err(self.abort_commit(abort, at));
            }
        }
        for entry in &mut self.buffers.entries {
            if let Some((pending, _)) = entry.write.take() {
                entry.obj.install(pending, wv, horizon);
                entry.obj.lock_word().store(unlocked(wv), Ordering::Release);
                entry.locked_from = None;
            }
        }
        Ok(())
    }

    /// Errors carry the object that conflicted.
    fn lock_write_set(&mut self) -> Result<(), (Abort, &'a dyn ErasedObj)> {
        let mine = locked_by(self.worker);
        for entry in self.buffers.entries.iter_mut() {
            let Some((_, access)) = &entry.write else { continue };
            let lock = entry.obj.lock_word();
            let mut word = lock.load(Ordering::Acquire);
            loop {
                if is_locked(word) {
                    let abort =
                        Abort::WriteWhileCommitting { object: entry.obj.object_id(), ours: *access, theirs: None };
                    return Err((abort, entry.obj));
                }
                match lock.compare_exchange_weak(word, mine, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        entry.locked_from = Some(word);
                        break;
                    }
                    Err(current) => word = current,
                }
            }
        }
        Ok(())
    }

    fn validate_read_set(&self) -> Result<(), (Abort, &'a dyn ErasedObj)> {
        let mine = locked_by(self.worker);
        for &(obj, access) in &self.buffers.reads {
            let word = obj.lock_word().load(Ordering::Acquire);
            let newest = if word == mine {
                let i = self.buffers.index[&address(obj)] as usize;
                version_of(self.buffers.entries[i].locked_from.expect("an object locked by us has its old word"))
            } else if is_locked(word) {
                let abort = Abort::ReadWhileCommitting { object: obj.object_id(), ours: access, theirs: None };
                return Err((abort, obj));
            } else {
                version_of(word)
            };
            if newest > self.rv {
                let theirs = obj.first_write_after(self.rv);
                return Err((Abort::ReadThenOverwritten { object: obj.object_id(), ours: access, theirs }, obj));
            }
        }
        Ok(())
    }

    /// Releases the locks a failed commit took and learns the other side of
    /// a "while committing" conflict.
    fn abort_commit(&mut self, mut abort: Abort, at: &'a dyn ErasedObj) -> Abort {
        for entry in &mut self.buffers.entries {
            if let Some(word) = entry.locked_from.take() {
                entry.obj.lock_word().store(word, Ordering::Release);
            }
        }
        if abort.theirs().is_none() {
            abort.set_theirs(self.wait_for_theirs(at));
        }
        abort
    }
}

fn address(obj: &dyn ErasedObj) -> usize {
    obj as *const dyn ErasedObj as *const () as usize
}

/// Where `obj` sits in [`Tx::read_filter`]: a word and a bit in it.
fn read_filter_bit(obj: &dyn ErasedObj) -> (usize, u64) {
    // Objects are 64-byte aligned; a multiply spreads the rest over 8 bits.
    let spread = ((address(obj) as u64 >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
    (spread >> 6, 1 << (spread & 63))
}

// Both helpers take the Box itself and deref it explicitly: a `&Box<dyn
// Any>` would coerce to `&dyn Any` of the *Box* and never downcast.
#[allow(clippy::borrowed_box)]
fn pending_value<T: 'static>(pending: &Box<dyn Any + Send>) -> &T {
    match (**pending).downcast_ref::<Node<T>>() {
        Some(node) => node.value(),
        None => unreachable!("pending write of another type than its object"),
    }
}

fn pending_node_mut<T: 'static>(pending: &mut Box<dyn Any + Send>) -> &mut Node<T> {
    match (**pending).downcast_mut::<Node<T>>() {
        Some(node) => node,
        None => unreachable!("pending write of another type than its object"),
    }
}
