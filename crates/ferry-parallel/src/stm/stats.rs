//! Per-worker transaction counters and conflict counts: the raw input of
//! the scalability profiler.

use std::collections::HashMap;
use std::panic::Location;

use super::abort::{Abort, ConflictKind};
use super::access::{Access, Op, StructureId};

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
        ConflictSite {
            structure: abort.object().structure,
            kind: abort.kind(),
            ours: ours.into(),
            theirs: theirs.map(SiteAccess::from),
            same_key,
        }
    }
}

/// What one worker's transactions did.
#[derive(Debug, Clone, Default)]
pub struct TxStats {
    /// Committed transactions (read-only ones included).
    pub commits: u64,
    /// Committed transactions that wrote nothing (these never abort).
    pub read_only_commits: u64,
    /// Aborted attempts; each was retried.
    pub aborts: u64,
    /// Aborts per conflict site.
    pub conflicts: HashMap<ConflictSite, u64>,
}

impl TxStats {
    pub(crate) fn record_abort(&mut self, abort: &Abort) {
        self.aborts += 1;
        *self.conflicts.entry(ConflictSite::of(abort)).or_insert(0) += 1;
    }

    /// Adds another worker's counts.
    pub fn merge(&mut self, other: &TxStats) {
        self.commits += other.commits;
        self.read_only_commits += other.read_only_commits;
        self.aborts += other.aborts;
        for (site, n) in &other.conflicts {
            *self.conflicts.entry(*site).or_insert(0) += n;
        }
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
