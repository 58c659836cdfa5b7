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

/// Which kind of object inside its structure an object is. Structures
/// made of one kind of object (a bare [`super::TObj`], a `Vector`'s
/// elements, a `Map`'s buckets) use [`ElementClass::Element`]; the
/// `Allocator` and the `DistributedObj` have several, and a conflict means
/// different things on each (a free pool: a core stealing; a lease list:
/// work on another core's leases), so the profiler looks at the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ElementClass {
    /// The only kind of object of its structure.
    #[default]
    Element,
    /// An `Allocator` index (its state, expiry and list links).
    AllocatorSlot,
    /// A core's free pool of an `Allocator`.
    AllocatorFreePool,
    /// A core's lease list of an `Allocator`.
    AllocatorLeaseList,
    /// A core's part of a `DistributedObj`.
    DistributedPart,
    /// A core's cached merge of a `DistributedObj`.
    DistributedMerged,
}

impl ElementClass {
    pub fn name(self) -> &'static str {
        match self {
            ElementClass::Element => "element",
            ElementClass::AllocatorSlot => "slot",
            ElementClass::AllocatorFreePool => "free pool",
            ElementClass::AllocatorLeaseList => "lease list",
            ElementClass::DistributedPart => "part",
            ElementClass::DistributedMerged => "cached merge",
        }
    }
}

/// One transactional object: a structure, an element inside it (a vector
/// index, a map bucket, an allocator pool; each structure documents its
/// numbering) and the element's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub structure: StructureId,
    pub element: u64,
    pub class: ElementClass,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "structure #{} element {}", self.structure.0, self.element)?;
        if self.class != ElementClass::Element {
            write!(f, " ({})", self.class.name())?;
        }
        Ok(())
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
    /// A read-only query of a lease (`Allocator::lease_expiry`).
    AllocatorQuery,
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
            Op::AllocatorQuery => "Allocator::lease_expiry",
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
