//! The scalability profiler (NFOS §4.6): turns a run's transaction counts
//! and abort attributions into what an NF author can act on.
//!
//! It reports
//! * transactions, commits, aborts (each one a retry) and the abort rate;
//! * aborts per NF source line: the `file:line` of the data-structure call
//!   whose access lost ("aborted here") and of the committed access it lost
//!   to ("caused here"), via the `#[track_caller]` locations the STM keeps;
//! * a ranked list of conflict causes: for each structure and pair of
//!   conflicting operations, its [`RootCause`] (NFOS Tables 3-5, below),
//!   its [`Recipe`]s, the parameter to change with a suggested value,
//!   and a one-line explanation naming the structure and both operations;
//! * per-core load: packets per worker and the max/mean imbalance, with
//!   NFOS's advice (finer packet sets) above [`IMBALANCE_THRESHOLD`].
//!
//! # Causes and recipes
//!
//! Classified from the structure's kind, the class of object the conflict
//! was on ([`crate::stm::ElementClass`]) and the two operations
//! ([`RootCause::classify`]); the pair order does not matter. Rules are
//! tried top to bottom within a structure.
//!
//! | structure | operation pair (object) | root cause | recipes |
//! |---|---|---|---|
//! | Map | any × `set`/`remove`, same key | [`RootCause::MapSameKey`] | use a `DistributedObj` |
//! | Map | any × `set`/`remove`, other keys | [`RootCause::MapSameBucket`] | enlarge the map or change its hash |
//! | DistributedObj | `read` × `update` | [`RootCause::DistributedStaleRead`] | raise the allowed staleness |
//! | Allocator | `refresh` × anything | [`RootCause::AllocatorLeaseListRefresh`] | raise the refresh interval |
//! | Allocator | `lease_expiry` × anything else | [`RootCause::AllocatorLeaseRead`] | reduce sharing |
//! | Allocator | anything (free pool) | [`RootCause::AllocatorPoolExhausted`] | overprovision the resource |
//! | Allocator | `free` × anything (lease list) | [`RootCause::AllocatorRemoteFree`] | free on the allocating core |
//! | Allocator | `expire` × `allocate`/`expire` (lease list) | [`RootCause::AllocatorRemoteExpiry`] | overprovision the resource |
//! | Allocator | `allocate` × `allocate`/`expire` (slot) | [`RootCause::AllocatorPoolExhausted`] | overprovision the resource |
//! | Allocator | `free` × `free`/`expire` (slot) | [`RootCause::AllocatorRemoteFree`] | free on the allocating core |
//! | Allocator | `free` × `allocate` (slot) | [`RootCause::AllocatorPoolOrRemoteFree`] | overprovision; free on the allocating core |
//! | Allocator | `expire` × `expire` (slot) | [`RootCause::AllocatorRemoteExpiry`] | overprovision the resource |
//! | Vector | read/write × write, one element | [`RootCause::VectorSameElement`] | use a `DistributedObj` |
//! | bare object | read/write × write | [`RootCause::ObjectShared`] | use a built-in structure that spreads it |
//! | anything else (`allocate` × unknown on a lease list, `update` × `update`) | | [`RootCause::Unclassified`] | reduce sharing |
//!
//! When the engine no longer knew the other side, the pair is classified
//! by our side and the object alone (e.g. `allocate` on a slot → pool
//! exhausted).
//!
//! Suggested values (a starting point: apply, profile again, repeat while
//! the cause stays on top): capacity × 2; refresh interval from 0 to a
//! hundredth of the lease (NFOS's bridge: 1 s for 2-minute entries), else
//! × 10 up to half the lease; staleness from 0 to 0.1 ms (NFOS's
//! anti-DDoS), else × 10; buckets the largest of × 16, 4 per key and
//! 16·k² for k packets per transaction (two transactions of k keys share
//! a bucket with probability about k²/buckets), as a power of two.
//!
//! The result is a [`Profile`]: `Display` gives the text report,
//! [`Profile::to_json`] the same content as JSON.
//!
//! ```ignore
//! let report = run_trace(&stm, &nf, &config, trace)?;
//! let profile = Profiler::new(&stm).with(&nf.ports).with(&nf.counters).profile(&report);
//! println!("{profile}");
//! ```
//!
//! The profiler reads the structure registry of the [`Stm`] (names and
//! where each structure was created) and, for the structures passed to
//! [`Profiler::with`], their configuration, so an explanation can say
//! "refresh interval 0" and a suggestion can name the parameter's new
//! value. Unlike NFOS it does not sample: every abort is counted.
//!
//! What it cannot tell: [`crate::stm::ConflictSite`] keeps the structure,
//! the class of object and the operations but not which object of the
//! class. On an Allocator slot (whose list links neighbours update too) a
//! `free` × `allocate` conflict is therefore still reported as "a dry
//! pool, or a lease freed on another core" with both recipes; on a free
//! pool or a lease list the class decides. Each cause lists its aborts
//! per class of object (`elements`).

mod causes;
mod profile;
mod text;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use causes::{Recipe, RootCause};
pub use profile::{
    CauseProfile, LineProfile, LoadProfile, OpSite, Profile, RootCauseTotal, SourceLine, StructureRef, Suggestion,
    Summary, WorkerLoad,
};

use crate::ds::{Allocator, BucketHash, DistributedObj, Map, Vector};
use crate::runtime::TraceReport;
use crate::stm::{Stm, StructureId, StructureInfo, TxStats};

/// Load imbalance (busiest worker's packets over the mean) above which the
/// profiler advises finer packet sets, as NFOS does.
pub const IMBALANCE_THRESHOLD: f64 = 1.5;

/// The parameters of a data structure that its recipes change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StructureConfig {
    Allocator {
        capacity: u32,
        lease_ns: u64,
        refresh_interval_ns: u64,
    },
    DistributedObj {
        max_staleness_ns: u64,
    },
    Map {
        buckets: u64,
        /// Entries and the longest bucket at the end of the run, when the
        /// map was passed to [`Profiler::with_map_contents`].
        keys: Option<u64>,
        longest_bucket: Option<u64>,
    },
    Vector {
        len: u64,
    },
}

/// A built-in data structure the profiler can read the configuration of.
pub trait Profiled {
    fn structure_id(&self) -> StructureId;
    fn structure_config(&self) -> StructureConfig;
}

impl Profiled for Allocator {
    fn structure_id(&self) -> StructureId {
        self.structure()
    }

    fn structure_config(&self) -> StructureConfig {
        let c = self.config();
        StructureConfig::Allocator {
            capacity: c.capacity,
            lease_ns: c.lease_ns,
            refresh_interval_ns: c.refresh_interval_ns,
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Profiled for DistributedObj<T> {
    fn structure_id(&self) -> StructureId {
        self.structure()
    }

    fn structure_config(&self) -> StructureConfig {
        StructureConfig::DistributedObj { max_staleness_ns: self.max_staleness_ns() }
    }
}

impl<K, V, H> Profiled for Map<K, V, H>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    H: BucketHash<K>,
{
    fn structure_id(&self) -> StructureId {
        self.structure()
    }

    fn structure_config(&self) -> StructureConfig {
        StructureConfig::Map { buckets: self.bucket_count() as u64, keys: None, longest_bucket: None }
    }
}

impl<T: Send + Sync + 'static> Profiled for Vector<T> {
    fn structure_id(&self) -> StructureId {
        self.structure()
    }

    fn structure_config(&self) -> StructureConfig {
        StructureConfig::Vector { len: self.len() as u64 }
    }
}

/// Builds [`Profile`]s from run statistics. Holds the structure registry
/// and the configurations it was given; reusable across runs of the same
/// engine.
#[derive(Debug, Clone)]
pub struct Profiler {
    workers: usize,
    structures: Vec<StructureInfo>,
    configs: HashMap<StructureId, StructureConfig>,
}

impl Profiler {
    /// A profiler for the structures registered in `stm` so far.
    pub fn new(stm: &Stm) -> Profiler {
        Profiler::from_registry(stm.workers(), stm.structures())
    }

    /// A profiler from a registry taken earlier (e.g. when the engine is
    /// gone).
    pub fn from_registry(workers: usize, structures: Vec<StructureInfo>) -> Profiler {
        Profiler { workers, structures, configs: HashMap::new() }
    }

    /// Adds `structure`'s configuration, used in explanations and
    /// suggestions.
    pub fn with(mut self, structure: &impl Profiled) -> Profiler {
        self.configs.insert(structure.structure_id(), structure.structure_config());
        self
    }

    /// Adds a configuration by hand (a structure built outside `ds`).
    pub fn with_config(mut self, id: StructureId, config: StructureConfig) -> Profiler {
        self.configs.insert(id, config);
        self
    }

    /// Adds a map's configuration and what it holds at the end of the run
    /// (entries, longest bucket), so a bucket conflict can say how crowded
    /// the buckets are. Needs `&mut` because it reads outside transactions.
    pub fn with_map_contents<K, V, H>(mut self, map: &mut Map<K, V, H>) -> Profiler
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        H: BucketHash<K>,
    {
        let entries = map.entries_mut();
        let mut per_bucket: HashMap<usize, u64> = HashMap::new();
        for (key, _) in &entries {
            *per_bucket.entry(map.bucket_of(key)).or_insert(0) += 1;
        }
        let config = StructureConfig::Map {
            buckets: map.bucket_count() as u64,
            keys: Some(entries.len() as u64),
            longest_bucket: Some(per_bucket.values().copied().max().unwrap_or(0)),
        };
        self.configs.insert(map.structure(), config);
        self
    }

    /// The profile of a trace run: counts, causes and per-core load.
    pub fn profile(&self, report: &TraceReport) -> Profile {
        profile::build(self, report.workers.iter().map(|w| &w.stats), Some(report))
    }

    /// The profile of bare per-worker statistics (no packet counts, so no
    /// load section).
    pub fn profile_stats<'s>(&self, stats: impl IntoIterator<Item = &'s TxStats>) -> Profile {
        profile::build(self, stats, None)
    }

    fn info(&self, id: StructureId) -> Option<&StructureInfo> {
        self.structures.iter().find(|s| s.id == id)
    }

    fn config(&self, id: StructureId) -> Option<&StructureConfig> {
        self.configs.get(&id)
    }
}
