//! The built-in data structures NF aggregate state lives in (NFOS §4.5).
//! Each is made of [`crate::stm::TObj`]s, so its conflicts are exactly the
//! conflict causes the profiler reports for it:
//!
//! * [`Vector`]: one object per element (cache-line aligned); conflicts
//!   are read/write or write/write on one element.
//! * [`Map`]: one object per bucket, user-chosen bucket count and hash;
//!   conflicts are the same key, or different keys in one bucket.
//! * [`Allocator`]: leases with expiry and refresh over per-core free pools
//!   with stealing and per-core lease lists; conflicts are pool exhaustion
//!   (stealing), refreshes on one lease list, and frees or expiry sweeps
//!   on another core's lease list.
//! * [`DistributedObj`]: per-core parts with a merge function and a
//!   maximum staleness; conflicts are merges that read parts being updated.
//! * [`Statistics`]: an NF's counters, per core and outside the
//!   transactional memory (no conflicts, no versions): updates count when
//!   their transaction commits; handlers never read them.
//!
//! Every operation is `#[track_caller]`, so aborts name the NF line.

mod allocator;
mod distributed;
mod key_tag;
mod map;
mod statistics;
mod vector;

pub use allocator::{Allocator, AllocatorConfig};
pub use distributed::DistributedObj;
pub use key_tag::key_tag;
pub use map::{BucketHash, DefaultBucketHash, Map};
pub use statistics::Statistics;
pub use vector::Vector;

/// Invalid data-structure parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsError {
    #[error("{structure} \"{name}\": {what} must be at least 1")]
    Empty { structure: &'static str, name: String, what: &'static str },
    #[error("{structure} \"{name}\": {what} = {value} exceeds the maximum {max}")]
    TooLarge { structure: &'static str, name: String, what: &'static str, value: u64, max: u64 },
}
