//! The crate's single error type.

use std::io;

/// Everything that can go wrong building, mapping or using ring objects.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// A configuration value is out of range.
    #[error("invalid {field} = {value}: {reason}")]
    Config { field: &'static str, value: u64, reason: &'static str },
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The fd does not hold a Ferry ring region.
    #[error("not a ferry-ring region: magic {found:#018x}")]
    BadMagic { found: u64 },
    /// The region was laid out by an incompatible version of this crate.
    #[error("unsupported region layout version {found} (this build speaks {expected})")]
    BadVersion { found: u32, expected: u32 },
    /// The region's size disagrees with its header or is out of bounds.
    #[error("region size mismatch: header/layout says {expected} bytes, fd has {actual}")]
    BadSize { expected: u64, actual: u64 },
    /// The memfd can still be resized, so a peer could SIGBUS us.
    #[error("region fd is not sealed against shrink and grow (seals {seals:#x})")]
    NotSealed { seals: i32 },
    /// The header's object table is inconsistent.
    #[error("corrupt region header: {reason}")]
    Corrupt { reason: &'static str },
    /// Asked for a ring or pool the region does not have.
    #[error("region has no {kind} #{index} (it has {count})")]
    NoSuchObject { kind: &'static str, index: usize, count: usize },
    /// A producer id outside the ring's configured range.
    #[error("producer id {id} out of range: ring accepts 0..{max}")]
    BadProducer { id: u16, max: u16 },
    /// A second consumer tried to attach to a single-consumer ring.
    #[error("ring already has a consumer attached")]
    ConsumerBusy,
    /// Seeding more frames than the pool can ever hold.
    #[error("pool of capacity {capacity} cannot hold {requested} frames")]
    PoolOverflow { capacity: u64, requested: u64 },
}

impl RingError {
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn sys(op: &'static str) -> RingError {
        RingError::Sys { op, source: io::Error::last_os_error() }
    }

    pub(crate) fn config(field: &'static str, value: u64, reason: &'static str) -> RingError {
        RingError::Config { field, value, reason }
    }
}
