//! Conflict causes and scalability recipes (NFOS §4.6, Tables 3-5): which
//! pair of data-structure operations, on which kind of structure, means
//! which root cause, and what relaxes it.
//!
//! The table is in the module docs of [`super`].
//!
//! Why the Allocator pairs mean what they mean (see `ds::Allocator`): a
//! core only ever pops its own free pool unless it is empty (then it
//! steals), and pushes freed and expired indices on its own pool. It
//! expires from its own lease list, and, when its pool is empty, from the
//! lists of cores that stopped calling `expire` (stranded leases);
//! `refresh` and `free` work on the list the lease lives on, which may be
//! another core's; `lease_expiry` only reads a lease. The conflict site names the class of
//! object it was on ([`ElementClass`]), which settles most pairs:
//! * on a **free pool**, every conflict involves a core stealing from a
//!   pool that is not its own (only thieves read another core's pool);
//! * on a **lease list**, a `free` is one of another core's lease, and
//!   `expire` against `allocate` or `expire` is a sweep of another core's
//!   list;
//! * on a **slot** (an index's state and list links, which neighbours in
//!   a list update too) the operations decide, as they did before classes:
//!   `allocate` × `allocate`/`expire` is a steal, `free` × `allocate` a
//!   steal or a remote free, `expire` × `expire` a sweep.
//!
//! `refresh` against anything is a refresh moving a lease (it writes the
//! slot and the list); a `lease_expiry` query against anything else read a
//! lease that another core then allocated, freed, expired or relinked.

use serde::{Deserialize, Serialize};

use crate::stm::{ElementClass, Op, StructureKind};

/// The root cause of a group of aborts: a condition between two operations
/// of one built-in data structure that makes them conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootCause {
    /// Map, Table 3: both operations used the same key.
    MapSameKey,
    /// Map, Table 3: different keys that hash to the same bucket (also
    /// used when the other key is unknown).
    MapSameBucket,
    /// DistributedObj, Table 4: a read found its cached merge older than
    /// the maximum staleness (always, with staleness 0), so it merged every
    /// core's part while another core updated its part.
    DistributedStaleRead,
    /// Allocator, Table 5 (`allocate` × `allocate`): a core's local pool
    /// ran dry, so it allocated from another core's pool.
    AllocatorPoolExhausted,
    /// Allocator, Table 5 (`allocate` × `refresh`): refreshes move leases
    /// on a lease list other cores also use.
    AllocatorLeaseListRefresh,
    /// Allocator: a lease is freed by another core than the one whose
    /// lease list holds it.
    AllocatorRemoteFree,
    /// Allocator, `free` × `allocate` on a slot: either of the two above
    /// (a dry pool stealing from the pool a free refills, or a remote free).
    AllocatorPoolOrRemoteFree,
    /// Allocator: a core short of indices reclaimed leases stranded on the
    /// lease list of a core that had stopped calling `expire`, while that
    /// core changed the list (it was only behind, or got traffic again).
    AllocatorRemoteExpiry,
    /// Allocator: `lease_expiry` read a lease that another core then
    /// allocated, freed or expired, or linked a lease next to in a list.
    AllocatorLeaseRead,
    /// Vector: read/write or write/write of one element.
    VectorSameElement,
    /// A bare transactional object shared by all cores.
    ObjectShared,
    /// A pair the table has no cause for.
    Unclassified,
}

/// A scalability recipe: what to change, usually one parameter where the
/// data structure is created. Most relax the NF's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recipe {
    /// Give the Allocator more indices (`AllocatorConfig::capacity`).
    OverprovisionResource,
    /// Raise `AllocatorConfig::refresh_interval_ns`.
    RaiseRefreshInterval,
    /// Raise the DistributedObj's maximum staleness.
    RaiseStaleness,
    /// More buckets (`Map::new`'s `buckets`) or another `BucketHash`.
    EnlargeMapOrChangeHash,
    /// Keep the contended value in a DistributedObj.
    UseDistributedObj,
    /// Allocate and free a resource on one core (one packet set), or let
    /// its lease expire instead of freeing it.
    FreeOnAllocatingCore,
    /// No specific recipe: reduce sharing of the structure.
    ReduceSharing,
}

impl RootCause {
    /// The cause for a conflict between `a` and `b` (`None`: the other side
    /// is unknown) on an object of class `class` of a structure of `kind`.
    /// Symmetric in `a` and `b`.
    pub fn classify(
        kind: StructureKind,
        class: ElementClass,
        a: Op,
        b: Option<Op>,
        same_key: Option<bool>,
    ) -> RootCause {
        let has = |op: Op| a == op || b == Some(op);
        match kind {
            StructureKind::Map => match same_key {
                Some(true) => RootCause::MapSameKey,
                _ => RootCause::MapSameBucket,
            },
            StructureKind::DistributedObj if has(Op::DistributedRead) => RootCause::DistributedStaleRead,
            StructureKind::DistributedObj => RootCause::Unclassified,
            StructureKind::Allocator => {
                if has(Op::AllocatorRefresh) {
                    RootCause::AllocatorLeaseListRefresh
                } else if has(Op::AllocatorQuery) {
                    RootCause::AllocatorLeaseRead
                } else if class == ElementClass::AllocatorFreePool {
                    RootCause::AllocatorPoolExhausted
                } else if class == ElementClass::AllocatorLeaseList {
                    if has(Op::AllocatorFree) {
                        RootCause::AllocatorRemoteFree
                    } else if has(Op::AllocatorExpire) {
                        RootCause::AllocatorRemoteExpiry
                    } else {
                        RootCause::Unclassified
                    }
                } else if has(Op::AllocatorFree) && has(Op::AllocatorAllocate) {
                    RootCause::AllocatorPoolOrRemoteFree
                } else if has(Op::AllocatorFree) {
                    RootCause::AllocatorRemoteFree
                } else if has(Op::AllocatorAllocate) {
                    RootCause::AllocatorPoolExhausted
                } else if a == Op::AllocatorExpire && b == Some(Op::AllocatorExpire) {
                    RootCause::AllocatorRemoteExpiry
                } else {
                    RootCause::Unclassified
                }
            }
            StructureKind::Vector => RootCause::VectorSameElement,
            StructureKind::Object => RootCause::ObjectShared,
        }
    }

    /// The recipes for this cause, the first one the main one.
    pub fn recipes(self) -> &'static [Recipe] {
        match self {
            RootCause::MapSameKey => &[Recipe::UseDistributedObj],
            RootCause::MapSameBucket => &[Recipe::EnlargeMapOrChangeHash],
            RootCause::DistributedStaleRead => &[Recipe::RaiseStaleness],
            RootCause::AllocatorPoolExhausted => &[Recipe::OverprovisionResource],
            RootCause::AllocatorLeaseListRefresh => &[Recipe::RaiseRefreshInterval],
            RootCause::AllocatorRemoteFree => &[Recipe::FreeOnAllocatingCore],
            RootCause::AllocatorPoolOrRemoteFree => &[Recipe::OverprovisionResource, Recipe::FreeOnAllocatingCore],
            RootCause::AllocatorRemoteExpiry => &[Recipe::OverprovisionResource],
            RootCause::AllocatorLeaseRead => &[Recipe::ReduceSharing],
            RootCause::VectorSameElement => &[Recipe::UseDistributedObj],
            RootCause::ObjectShared => &[Recipe::UseDistributedObj, Recipe::ReduceSharing],
            RootCause::Unclassified => &[Recipe::ReduceSharing],
        }
    }

    /// Short name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            RootCause::MapSameKey => "map_same_key",
            RootCause::MapSameBucket => "map_same_bucket",
            RootCause::DistributedStaleRead => "distributed_stale_read",
            RootCause::AllocatorPoolExhausted => "allocator_pool_exhausted",
            RootCause::AllocatorLeaseListRefresh => "allocator_lease_list_refresh",
            RootCause::AllocatorRemoteFree => "allocator_remote_free",
            RootCause::AllocatorPoolOrRemoteFree => "allocator_pool_or_remote_free",
            RootCause::AllocatorRemoteExpiry => "allocator_remote_expiry",
            RootCause::AllocatorLeaseRead => "allocator_lease_read",
            RootCause::VectorSameElement => "vector_same_element",
            RootCause::ObjectShared => "object_shared",
            RootCause::Unclassified => "unclassified",
        }
    }

    /// The condition, in the words of the NFOS tables (without the
    /// structure's configuration; the report adds that).
    pub fn condition(self) -> &'static str {
        match self {
            RootCause::MapSameKey => "both operations use the same key",
            RootCause::MapSameBucket => "different keys hash to the same bucket",
            RootCause::DistributedStaleRead => {
                "the read's cached merge is older than the maximum staleness, so it merges every core's part"
            }
            RootCause::AllocatorPoolExhausted => {
                "a core's local pool is exhausted, so it allocates from another core's pool"
            }
            RootCause::AllocatorLeaseListRefresh => "refreshes move leases on one lease list that several cores use",
            RootCause::AllocatorRemoteFree => "a lease is freed by another core than the one whose list holds it",
            RootCause::AllocatorPoolOrRemoteFree => {
                "a dry pool steals from the pool a free refills, or a lease is freed on another core"
            }
            RootCause::AllocatorRemoteExpiry => {
                "a core short of indices reclaims leases stranded on the lease list of a core that stopped calling \
                 expire, while that core changes the list"
            }
            RootCause::AllocatorLeaseRead => {
                "a lease's expiry is read while another core allocates, frees or expires it, or links a lease \
                 next to it"
            }
            RootCause::VectorSameElement => "both operations use the same element",
            RootCause::ObjectShared => "both operations use the same object",
            RootCause::Unclassified => "no known cause for this operation pair",
        }
    }
}

impl Recipe {
    pub fn name(self) -> &'static str {
        match self {
            Recipe::OverprovisionResource => "overprovision_resource",
            Recipe::RaiseRefreshInterval => "raise_refresh_interval",
            Recipe::RaiseStaleness => "raise_staleness",
            Recipe::EnlargeMapOrChangeHash => "enlarge_map_or_change_hash",
            Recipe::UseDistributedObj => "use_distributed_obj",
            Recipe::FreeOnAllocatingCore => "free_on_allocating_core",
            Recipe::ReduceSharing => "reduce_sharing",
        }
    }

    /// What to do, in one line.
    pub fn text(self) -> &'static str {
        match self {
            Recipe::OverprovisionResource => "overprovision the resource (a larger Allocator capacity)",
            Recipe::RaiseRefreshInterval => "raise the refresh interval (AllocatorConfig::refresh_interval_ns)",
            Recipe::RaiseStaleness => "raise the allowed staleness of the DistributedObj",
            Recipe::EnlargeMapOrChangeHash => "enlarge the map (more buckets) or change its hash",
            Recipe::UseDistributedObj => "keep the contended value in a DistributedObj",
            Recipe::FreeOnAllocatingCore => {
                "free a resource on the core that allocated it (one packet set), or let its lease expire"
            }
            Recipe::ReduceSharing => "reduce sharing of this state between packet sets",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        use ElementClass as E;
        use Op::*;
        use StructureKind as K;
        let c = |kind, a, b, same_key| RootCause::classify(kind, E::Element, a, b, same_key);
        assert_eq!(c(K::Map, MapGet, Some(MapSet), Some(true)), RootCause::MapSameKey);
        assert_eq!(c(K::Map, MapSet, Some(MapSet), Some(false)), RootCause::MapSameBucket);
        assert_eq!(c(K::Map, MapRemove, None, None), RootCause::MapSameBucket);
        for class in [E::DistributedPart, E::DistributedMerged] {
            let c = |a, b| RootCause::classify(K::DistributedObj, class, a, b, None);
            assert_eq!(c(DistributedRead, Some(DistributedUpdate)), RootCause::DistributedStaleRead);
            assert_eq!(c(DistributedUpdate, Some(DistributedRead)), RootCause::DistributedStaleRead);
            assert_eq!(c(DistributedUpdate, None), RootCause::Unclassified);
        }
        // On a slot (and on objects of no known class) the operations
        // decide.
        for (a, b, cause) in [
            (AllocatorAllocate, Some(AllocatorAllocate), RootCause::AllocatorPoolExhausted),
            (AllocatorExpire, Some(AllocatorAllocate), RootCause::AllocatorPoolExhausted),
            (AllocatorAllocate, None, RootCause::AllocatorPoolExhausted),
            (AllocatorRefresh, Some(AllocatorExpire), RootCause::AllocatorLeaseListRefresh),
            (AllocatorAllocate, Some(AllocatorRefresh), RootCause::AllocatorLeaseListRefresh),
            (AllocatorRefresh, Some(AllocatorFree), RootCause::AllocatorLeaseListRefresh),
            (AllocatorQuery, Some(AllocatorRefresh), RootCause::AllocatorLeaseListRefresh),
            (AllocatorQuery, Some(AllocatorAllocate), RootCause::AllocatorLeaseRead),
            (AllocatorQuery, Some(AllocatorFree), RootCause::AllocatorLeaseRead),
            (AllocatorQuery, Some(AllocatorExpire), RootCause::AllocatorLeaseRead),
            (AllocatorQuery, None, RootCause::AllocatorLeaseRead),
            (AllocatorFree, Some(AllocatorExpire), RootCause::AllocatorRemoteFree),
            (AllocatorFree, Some(AllocatorFree), RootCause::AllocatorRemoteFree),
            (AllocatorAllocate, Some(AllocatorFree), RootCause::AllocatorPoolOrRemoteFree),
            (AllocatorExpire, Some(AllocatorExpire), RootCause::AllocatorRemoteExpiry),
            (AllocatorExpire, None, RootCause::Unclassified),
        ] {
            for class in [E::AllocatorSlot, E::Element] {
                let c = |a, b| RootCause::classify(K::Allocator, class, a, b, None);
                assert_eq!(c(a, b), cause, "{a:?} x {b:?} on {class:?}");
                if let Some(b) = b {
                    assert_eq!(c(b, Some(a)), cause, "{b:?} x {a:?} on {class:?}");
                }
            }
        }
        // The class tells a steal from work on another core's lease list.
        for (class, a, b, cause) in [
            (E::AllocatorFreePool, AllocatorAllocate, Some(AllocatorFree), RootCause::AllocatorPoolExhausted),
            (E::AllocatorFreePool, AllocatorAllocate, Some(AllocatorExpire), RootCause::AllocatorPoolExhausted),
            (E::AllocatorFreePool, AllocatorAllocate, Some(AllocatorAllocate), RootCause::AllocatorPoolExhausted),
            (E::AllocatorFreePool, AllocatorAllocate, None, RootCause::AllocatorPoolExhausted),
            (E::AllocatorLeaseList, AllocatorAllocate, Some(AllocatorFree), RootCause::AllocatorRemoteFree),
            (E::AllocatorLeaseList, AllocatorFree, Some(AllocatorExpire), RootCause::AllocatorRemoteFree),
            (E::AllocatorLeaseList, AllocatorAllocate, Some(AllocatorExpire), RootCause::AllocatorRemoteExpiry),
            (E::AllocatorLeaseList, AllocatorExpire, Some(AllocatorExpire), RootCause::AllocatorRemoteExpiry),
            (E::AllocatorLeaseList, AllocatorExpire, None, RootCause::AllocatorRemoteExpiry),
            (E::AllocatorLeaseList, AllocatorRefresh, Some(AllocatorExpire), RootCause::AllocatorLeaseListRefresh),
            (E::AllocatorLeaseList, AllocatorAllocate, None, RootCause::Unclassified),
        ] {
            let c = |a, b| RootCause::classify(K::Allocator, class, a, b, None);
            assert_eq!(c(a, b), cause, "{a:?} x {b:?} on {class:?}");
            if let Some(b) = b {
                assert_eq!(c(b, Some(a)), cause, "{b:?} x {a:?} on {class:?}");
            }
        }
        assert_eq!(c(K::Vector, VectorRead, Some(VectorWrite), Some(true)), RootCause::VectorSameElement);
        assert_eq!(c(K::Object, Read, Some(Write), None), RootCause::ObjectShared);
        assert_eq!(RootCause::AllocatorPoolExhausted.recipes(), &[Recipe::OverprovisionResource]);
    }

    #[test]
    fn names_match_serde() {
        for cause in [
            RootCause::MapSameBucket,
            RootCause::AllocatorPoolOrRemoteFree,
            RootCause::AllocatorRemoteExpiry,
            RootCause::AllocatorLeaseRead,
            RootCause::Unclassified,
        ] {
            assert_eq!(serde_json::to_value(cause).unwrap(), cause.name());
            for recipe in cause.recipes() {
                assert_eq!(serde_json::to_value(recipe).unwrap(), recipe.name());
            }
        }
    }
}
