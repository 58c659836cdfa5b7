//! The software transactional memory that all aggregate NF state lives in.
//!
//! # What it guarantees
//!
//! Every transaction is **serializable** and every transaction, including
//! one that will abort, only ever sees a **consistent snapshot** (opacity):
//! handler code never observes half of another transaction's writes, so it
//! cannot trip over a broken invariant before the engine gets a chance to
//! abort it. Conflicts are detected per object ([`TObj`]): one element of a
//! `Vector`, one bucket of a `Map`, one pool of an `Allocator`.
//!
//! # The algorithm (multi-version TL2 with read-set validation)
//!
//! State shared by all workers of one [`Stm`]:
//! * a **global version clock**, a counter bumped once per writing commit;
//! * per object a **lock word** (either "unlocked, newest version `v`" or
//!   "locked by worker `w`") and a **version chain**: immutable nodes
//!   `(version, value, who wrote it)`, newest first;
//! * per worker an **announce slot**: a lower bound of the snapshot of its
//!   running transaction, or "idle".
//!
//! A transaction:
//! 1. **Begins** by announcing the clock and then taking its snapshot
//!    version `rv` from the clock.
//! 2. **Reads** an object by waiting while it is locked (a commit holds a
//!    lock only while it installs, never while user code runs) and then
//!    walking the chain to the newest node with `version <= rv`. Reads take
//!    no lock and write no shared memory. If the object has a newer version
//!    than `rv`, the transaction first tries to *extend* its snapshot
//!    (re-validate what it read so far against the current clock; if all of
//!    it is still the newest, move `rv` forward) so it can read the newest
//!    value; if that fails it reads the old version and is marked *doomed*
//!    (it may still finish as a read-only transaction).
//! 3. **Writes** into a private write set (a fresh version node, not yet
//!    visible); reads of an object it wrote return its own pending value.
//!    A doomed transaction aborts at its first write, and a write to an
//!    object it read that has since changed aborts at once, rather than
//!    carrying on to certain failure at commit.
//! 4. **Commits**. With no writes there is nothing to do: the snapshot it
//!    read is a consistent state at `rv`, so it serializes there and never
//!    aborts. With writes: try-lock each written object (abort if another
//!    commit holds it: no waiting, so no deadlock), take the commit version
//!    `wv = clock + 1` by fetch-and-add, validate that every object it read
//!    is unlocked (or locked by itself) with newest version `<= rv` (skipped
//!    when `wv == rv + 1`: nobody committed in between), then link the new
//!    nodes at the heads of their chains with version `wv` and unlock.
//! 5. **Aborts** by releasing the locks it took and dropping its write set.
//!    The caller's body is re-run (see [`Worker::atomically`]) after a short
//!    randomised back-off. Output produced by the body must be buffered by
//!    the caller and released only after the commit returns.
//!
//! Old versions are reclaimed when a writer installs a new one: every node
//! older than the newest node with `version <= horizon` is freed, where the
//! horizon is the minimum over the announce slots and the clock. Every
//! running transaction has `rv >= horizon`, so none of them walks past that
//! node. (Announce, then read the clock; the reclaimer reads the clock,
//! then the slots; sequentially consistent fences make one of them see the
//! other.) A worker caches its horizon for a few commits: an old horizon is
//! lower, hence still safe, just less eager.
//!
//! # Why readers do not abort writers
//!
//! A read leaves no trace in shared memory: no lock, no reader count, no
//! timestamp on the object. A writer's commit only looks at its own read
//! set and at lock words, so nothing any reader does can make a writer
//! fail. In the other direction, multi-versioning means a concurrent writer
//! does not abort a reader either: a transaction that only reads always
//! commits, because the versions it needs stay in the chain until it
//! finishes. The one conflict left is the one serializability demands: a
//! transaction that *read* `x` and also *writes* something aborts if `x`
//! changed after its snapshot (otherwise its writes would be based on a
//! value that no serial order can explain). That is the NFOS behaviour
//! (MV-RLU with read-set validation), specified as TL2 plus a version chain
//! instead of a log: TL2 alone aborts a reader that meets a newer version,
//! MV-RLU's log-based copies are the part we replace with immutable nodes
//! (same effect, safe to reason about in Rust).
//!
//! Why not the alternatives: a global commit lock (JVSTM style) makes
//! readers trivially safe but serialises every writing commit; locking
//! objects at access time (2PL) makes readers block writers; a single-version
//! TL2 aborts read-only transactions whenever a hot object is updated.
//!
//! # Attribution
//!
//! Every access carries an [`Access`]: the data-structure operation, the NF
//! source line (via `#[track_caller]`) and a key tag. Version nodes keep the
//! access that wrote them, so an abort names both sides of the conflict
//! ([`Abort`]); [`Worker::stats`] counts them per [`ConflictSite`] for the
//! profiler.

mod abort;
mod access;
mod addr_hash;
mod engine;
mod lockstep;
mod object;
mod stats;
mod tx;
mod worker;

pub use abort::{Abort, ConflictKind};
pub use access::{Access, ElementClass, ObjectId, Op, StructureId, StructureInfo, StructureKind};
pub use engine::{Stm, StmError};
pub use lockstep::{LeaveOnDrop, Lockstep};
pub use object::TObj;
pub use stats::{ConflictSite, SiteAccess, TxStats};
pub(crate) use tx::CommitHook;
pub use tx::Tx;
pub use worker::Worker;
