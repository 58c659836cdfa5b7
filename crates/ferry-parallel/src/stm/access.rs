//! Names for what a transaction touches and where in the NF it did so.

use std::fmt;
use std::panic::Location;

/// One registered data structure of an [`super::Stm`] (an index into its
/// registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StructureId(pub u32);

/// The built-in data structure kinds; the profiler maps conflicts to causes
/// and recipes per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StructureKind {
    /// A bare [`super::TObj`] used directly (tests, runtime internals).
    Object,
    Vector,
    Map,
    Allocator,
    DistributedObj,
}

/// What the registry knows about a data structure: the profiler reports it
/// by name and by the NF line that created it.
#[derive(Debug, Clone)]
pub struct StructureInfo {
    pub id: StructureId,
    pub kind: StructureKind,
    pub name: String,
    pub created_at: &'static Location<'static>,
}

/// One transactional object: a structure and an element inside it (a
/// vector index, a map bucket, an allocator pool; each structure documents
/// its numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub structure: StructureId,
    pub element: u64,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "structure #{} element {}", self.structure.0, self.element)
    }
}

/// The data-structure operation behind an access. Conflict causes are
/// defined on pairs of these (NFOS Tables 3-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Direct [`super::TObj`] read.
    Read,
    /// Direct [`super::TObj`] write or update.
    Write,
    VectorRead,
    VectorWrite,
    MapGet,
    MapSet,
    MapRemove,
    AllocatorAllocate,
    AllocatorFree,
    AllocatorRefresh,
    AllocatorExpire,
    DistributedRead,
    DistributedUpdate,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::VectorRead => "Vector::read",
            Op::VectorWrite => "Vector::write",
            Op::MapGet => "Map::get",
            Op::MapSet => "Map::set",
            Op::MapRemove => "Map::remove",
            Op::AllocatorAllocate => "Allocator::allocate",
            Op::AllocatorFree => "Allocator::free",
            Op::AllocatorRefresh => "Allocator::refresh",
            Op::AllocatorExpire => "Allocator::expire",
            Op::DistributedRead => "DistributedObj::read",
            Op::DistributedUpdate => "DistributedObj::update",
        }
    }
}

/// One access by NF code: which operation, from which source line, and a
/// tag of the key it used (equal keys give equal tags; `0` when the
/// operation has no key). The tag lets the profiler tell "same key" from
/// "different keys that share a bucket".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub op: Op,
    pub location: &'static Location<'static>,
    pub key: u64,
}

impl Access {
    /// An access at the caller's location. Data-structure methods are
    /// `#[track_caller]` all the way down, so this is the NF's line.
    #[track_caller]
    pub fn here(op: Op, key: u64) -> Access {
        Access { op, location: Location::caller(), key }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.op.name(), self.location)
    }
}
