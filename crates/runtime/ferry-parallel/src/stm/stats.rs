//! Per-worker transaction counters and conflict counts: the raw input of
//! the scalability profiler.

use std::collections::HashMap;
use std::panic::Location;

use super::abort::{Abort, ConflictKind};
use super::access::{Access, ElementClass, Op, StructureId};

/// An operation at a source line, without the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteAccess {
    pub op: Op,
    pub location: &'static Location<'static>,
}

impl From<Access> for SiteAccess {
    fn from(access: Access) -> SiteAccess {
        SiteAccess { op: access.op, location: access.location }
    }
}

/// Where aborts come from, aggregated over objects of one structure: the
/// unit the profiler ranks and attaches recipes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConflictSite {
    pub structure: StructureId,
    /// Which kind of object of the structure the conflict was on (e.g. an
    /// Allocator's free pool or lease list); aborts on different objects
    /// of one class are counted together.
    pub element_class: ElementClass,
    pub kind: ConflictKind,
    pub ours: SiteAccess,
    pub theirs: Option<SiteAccess>,
    /// Whether both sides used the same key (`None` when the other side is
    /// unknown or either operation has no key). "Same bucket, different
    /// keys" is the Map cause whose recipe is a larger map or another hash.
    pub same_key: Option<bool>,
}

impl ConflictSite {
    pub fn of(abort: &Abort) -> ConflictSite {
        let ours = abort.ours();
        let theirs = abort.theirs();
        let same_key = match theirs {
            Some(t) if ours.key != 0 && t.key != 0 => Some(ours.key == t.key),
            _ => None,
        };
        let object = abort.object();
        ConflictSite {
            structure: object.structure,
            element_class: object.class,
            kind: abort.kind(),
            ours: ours.into(),
            theirs: theirs.map(SiteAccess::from),
            same_key,
        }
    }
}

/// What one worker's transactions did.
///
/// The times are wall-clock nanoseconds (`std::time::Instant`, read a few
/// times per attempt and around a random sixteenth of the accesses; always
/// 0 under loom).
#[derive(Debug, Clone, Default)]
pub struct TxStats {
    /// Committed transactions (read-only ones included).
    pub commits: u64,
    /// Committed transactions that wrote nothing (these never abort).
    pub read_only_commits: u64,
    /// Aborted attempts; each was retried.
    pub aborts: u64,
    /// Object reads by committed and aborted attempts: every call that
    /// reads a transactional object counts (a data-structure operation
    /// makes one or more), reads of the attempt's own pending writes and
    /// unrecorded peeks (`Allocator::expire` looking at other workers'
    /// lists) included; an `update` counts as a read and a write.
    pub reads: u64,
    /// Object writes by committed and aborted attempts, counted like
    /// `reads`.
    pub writes: u64,
    /// Time spent beginning committed transactions (announcing, taking
    /// the snapshot).
    pub begin_ns: u64,
    /// Estimated time inside the accesses of committed transactions (the
    /// engine's work plus the data structure's own code in the access):
    /// a random sixteenth of the accesses are timed.
    pub access_ns: u64,
    /// Time spent inside commit (locking the write set, validation,
    /// installing, and releasing the locks of a commit that failed), over
    /// all attempts. A read-only commit does nothing and is not timed.
    pub commit_ns: u64,
    /// Time of the attempts that aborted, each from its begin to its abort
    /// (the failed data-structure call, or the end of the failed commit):
    /// work thrown away, back-off not included.
    pub aborted_ns: u64,
    /// The most consecutive aborts of one transaction before it committed
    /// (its retries). [`super::Worker::atomically`] tracks it;
    /// [`super::Worker::try_once`] runs single attempts and counts a
    /// committed one as 0 retries.
    pub max_retries: u32,
    /// Aborts per conflict site.
    pub conflicts: HashMap<ConflictSite, u64>,
}

impl TxStats {
    pub(crate) fn record_abort(&mut self, abort: &Abort) {
        self.aborts += 1;
        *self.conflicts.entry(ConflictSite::of(abort)).or_insert(0) += 1;
    }

    /// Adds another worker's counts (sums, and the larger `max_retries`).
    pub fn merge(&mut self, other: &TxStats) {
        self.commits += other.commits;
        self.read_only_commits += other.read_only_commits;
        self.aborts += other.aborts;
        self.reads += other.reads;
        self.writes += other.writes;
        self.begin_ns += other.begin_ns;
        self.access_ns += other.access_ns;
        self.commit_ns += other.commit_ns;
        self.aborted_ns += other.aborted_ns;
        self.max_retries = self.max_retries.max(other.max_retries);
        for (site, n) in &other.conflicts {
            *self.conflicts.entry(*site).or_insert(0) += n;
        }
    }

    /// Time in the transaction runtime: beginning, accessing and
    /// committing, plus every attempt thrown away.
    pub fn runtime_ns(&self) -> u64 {
        self.begin_ns + self.access_ns + self.commit_ns + self.aborted_ns
    }

    /// Aborted attempts per attempt, 0.0 with no attempts.
    pub fn abort_ratio(&self) -> f64 {
        let attempts = self.commits + self.aborts;
        if attempts == 0 {
            0.0
        } else {
            self.aborts as f64 / attempts as f64
        }
    }
}
