//! Why a transaction aborted. Data-structure calls return `Result<_, Abort>`
//! and NF handlers pass it on with `?`; the runtime then retries.

use super::access::{Access, ObjectId};

/// The kinds of conflict the engine detects, for counting and ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConflictKind {
    /// We read an object that another transaction overwrote after our
    /// snapshot, and we write something, so we cannot serialize.
    ReadThenOverwritten,
    /// At our commit, an object we read was locked by another commit.
    ReadWhileCommitting,
    /// At our commit, an object we write was locked by another commit.
    WriteWhileCommitting,
}

impl ConflictKind {
    pub fn name(self) -> &'static str {
        match self {
            ConflictKind::ReadThenOverwritten => "read, then overwritten by a committed write",
            ConflictKind::ReadWhileCommitting => "read while another transaction was committing it",
            ConflictKind::WriteWhileCommitting => "written while another transaction was committing it",
        }
    }
}

/// An aborted transaction: the object, our access, and (when the engine
/// knows it) the access on the other side. For the "while committing"
/// kinds the other side is learnt by waiting for that commit to finish
/// (commits never wait, so this is short); it is `None` if that commit
/// aborted or its version was already reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Abort {
    #[error("aborted: {ours} read {object}, which was then overwritten by {}", describe(.theirs))]
    ReadThenOverwritten { object: ObjectId, ours: Access, theirs: Option<Access> },
    #[error("aborted: {ours} read {object}, which another transaction was committing ({})", describe(.theirs))]
    ReadWhileCommitting { object: ObjectId, ours: Access, theirs: Option<Access> },
    #[error("aborted: {ours} wrote {object}, which another transaction was committing ({})", describe(.theirs))]
    WriteWhileCommitting { object: ObjectId, ours: Access, theirs: Option<Access> },
}

fn describe(theirs: &Option<Access>) -> String {
    match theirs {
        Some(a) => a.to_string(),
        None => "a write no longer known".to_string(),
    }
}

impl Abort {
    pub fn kind(&self) -> ConflictKind {
        match self {
            Abort::ReadThenOverwritten { .. } => ConflictKind::ReadThenOverwritten,
            Abort::ReadWhileCommitting { .. } => ConflictKind::ReadWhileCommitting,
            Abort::WriteWhileCommitting { .. } => ConflictKind::WriteWhileCommitting,
        }
    }

    pub fn object(&self) -> ObjectId {
        match self {
            Abort::ReadThenOverwritten { object, .. }
            | Abort::ReadWhileCommitting { object, .. }
            | Abort::WriteWhileCommitting { object, .. } => *object,
        }
    }

    /// Our access that lost.
    pub fn ours(&self) -> Access {
        match self {
            Abort::ReadThenOverwritten { ours, .. }
            | Abort::ReadWhileCommitting { ours, .. }
            | Abort::WriteWhileCommitting { ours, .. } => *ours,
        }
    }

    /// The committed access that won, when the engine still has it.
    pub fn theirs(&self) -> Option<Access> {
        match self {
            Abort::ReadThenOverwritten { theirs, .. }
            | Abort::ReadWhileCommitting { theirs, .. }
            | Abort::WriteWhileCommitting { theirs, .. } => *theirs,
        }
    }

    pub(crate) fn set_theirs(&mut self, access: Option<Access>) {
        match self {
            Abort::ReadThenOverwritten { theirs, .. }
            | Abort::ReadWhileCommitting { theirs, .. }
            | Abort::WriteWhileCommitting { theirs, .. } => *theirs = access,
        }
    }
}
