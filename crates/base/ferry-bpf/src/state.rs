//! The state library (P4SFC Table II) for NFs partly offloaded to XDP: a
//! user-space NF and the BPF maps of its offloaded part share a
//! [`StateTable`] (keys and values are lists of fields) and
//! [`StateCounter`]s, without the NF handling the synchronisation.
//!
//! # Consistency
//!
//! * The NF's own view (`get`) always reflects its own updates at once
//!   (read-your-writes), in either mode.
//! * `Update::Blocking`: when `create` / `remove` returns, the BPF map holds
//!   the change, so every packet the data path starts processing afterwards
//!   sees it. A failure (e.g. the map is full) is returned and the NF's view
//!   is left unchanged.
//! * `Update::NonBlocking`: the call returns at once; a background thread
//!   applies updates to the map in the order they were issued. The data
//!   path sees them eventually; `flush` waits until every earlier update is
//!   in the map and reports the first failure since the last flush (the
//!   NF's view then differs from the map for that key until it retries).
//! * Each entry is updated atomically (one BPF map update); there is no
//!   atomicity across entries, and packets in flight during an update see
//!   either the old or the new entry.
//! * Counters live in the data path's per-CPU arrays: `get` sums them (a
//!   snapshot that may miss increments in flight); `set` replaces every
//!   CPU's value at once (CPU 0 gets the value, the others 0), so
//!   increments racing with a `set` can be lost (last writer wins).

use std::collections::HashMap as StdHashMap;
use std::hash::Hash;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};

use aya::maps::{HashMap, Map, MapData, PerCpuArray, PerCpuValues};
use aya::util::nr_cpus;
use aya::Pod;

use crate::batch;
use crate::pipeline::PlCount;
use crate::BpfError;

/// How an update reaches the BPF map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    Blocking,
    NonBlocking,
}

enum Op<K, V> {
    Insert(K, V),
    Remove(K),
}

/// Non-blocking updates not yet applied, and the first failure since the
/// last flush.
#[derive(Default)]
struct Pending {
    count: u64,
    error: Option<String>,
}

/// A table kept consistent between an NF and a BPF hash map.
pub struct StateTable<K: Pod + Eq + Hash, V: Pod> {
    name: String,
    key_names: Vec<String>,
    val_names: Vec<String>,
    local: StdHashMap<K, V>,
    kernel: Arc<Mutex<HashMap<MapData, K, V>>>,
    /// The map's descriptor again, for batch reads beside `kernel`.
    batch_fd: Option<OwnedFd>,
    pending: Arc<(Mutex<Pending>, Condvar)>,
    queue: Sender<Op<K, V>>,
}

fn apply<K: Pod, V: Pod>(map: &mut HashMap<MapData, K, V>, op: &Op<K, V>, name: &str) -> Result<(), String> {
    match op {
        Op::Insert(k, v) => map.insert(k, v, 0).map_err(|e| format!("{name}: insert: {e}")),
        // Removing what is not there leaves the map as asked: the data
        // path may have lost it first (an LRU map evicts). aya reports
        // the kernel's ENOENT as a failed syscall, not as KeyNotFound.
        Op::Remove(k) => match map.remove(k) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(format!("{name}: remove: {e}")),
        },
    }
}

impl<K: Pod + Eq + Hash + Send + 'static, V: Pod + Send + 'static> StateTable<K, V> {
    /// `init(KeyNames, ValNames)`: binds to a BPF hash map (e.g. from
    /// `Pipeline::map_handle`). The field names document the key and value
    /// layouts; entries already in the map become the NF's view.
    pub fn init(map: Map, name: &str, key_names: &[&str], val_names: &[&str]) -> Result<Self, BpfError> {
        let batch_fd = match &map {
            Map::HashMap(d) | Map::LruHashMap(d) => d.fd().as_fd().try_clone_to_owned().ok(),
            _ => None,
        };
        let kernel: HashMap<MapData, K, V> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: "state table", source })?;
        let local = kernel.iter().filter_map(Result::ok).collect();
        let kernel = Arc::new(Mutex::new(kernel));
        let pending = Arc::new((Mutex::new(Pending::default()), Condvar::new()));
        let (queue, rx) = channel::<Op<K, V>>();
        let (k2, p2, n2) = (kernel.clone(), pending.clone(), name.to_string());
        std::thread::Builder::new()
            .name(format!("state-{name}"))
            .spawn(move || {
                for op in rx {
                    let r = apply(&mut k2.lock().expect("state map lock"), &op, &n2);
                    let (lock, cv) = &*p2;
                    let mut p = lock.lock().expect("pending lock");
                    p.count -= 1;
                    if let Err(e) = r {
                        p.error.get_or_insert(e);
                    }
                    cv.notify_all();
                }
            })
            .map_err(|e| BpfError::Config(format!("state table {name}: cannot start its thread: {e}")))?;
        Ok(StateTable {
            name: name.to_string(),
            key_names: key_names.iter().map(|s| s.to_string()).collect(),
            val_names: val_names.iter().map(|s| s.to_string()).collect(),
            local,
            kernel,
            batch_fd,
            pending,
            queue,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The names given at `init`: (key fields, value fields).
    pub fn field_names(&self) -> (&[String], &[String]) {
        (&self.key_names, &self.val_names)
    }

    fn submit(&mut self, op: Op<K, V>, mode: Update) -> Result<(), BpfError> {
        match mode {
            Update::Blocking => {
                apply(&mut self.kernel.lock().expect("state map lock"), &op, &self.name).map_err(BpfError::Config)
            }
            Update::NonBlocking => {
                self.pending.0.lock().expect("pending lock").count += 1;
                self.queue.send(op).map_err(|_| {
                    // Nothing will apply it: flush() must not wait for it.
                    self.pending.0.lock().expect("pending lock").count -= 1;
                    BpfError::Config(format!("{}: update thread gone", self.name))
                })
            }
        }
    }

    /// `create(KeyArgs, ValArgs)` (also replaces an existing entry).
    pub fn create(&mut self, key: K, val: V, mode: Update) -> Result<(), BpfError> {
        self.submit(Op::Insert(key, val), mode)?;
        self.local.insert(key, val);
        Ok(())
    }

    /// `get(KeyArgs)`: the NF's view (includes its pending updates).
    pub fn get(&self, key: &K) -> Option<V> {
        self.local.get(key).copied()
    }

    /// What the data path sees for `key` right now.
    pub fn get_in_kernel(&self, key: &K) -> Result<Option<V>, BpfError> {
        match self.kernel.lock().expect("state map lock").get(key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(BpfError::Map { name: "state table", source }),
        }
    }

    /// Every entry the data path sees right now (entries the data path
    /// created itself included), e.g. to read per-entry statistics: read
    /// in batches ([`batch::lookup_all`]) where the kernel can, else
    /// walked key by key. A walk of a map the data path changes meanwhile
    /// (LRU evictions) can restart and see an entry twice: entries are
    /// returned once each.
    pub fn entries_in_kernel(&self) -> Vec<(K, V)> {
        if let Some(Ok(entries)) = self.batch_fd.as_ref().map(|fd| batch::lookup_all(fd.as_fd())) {
            return entries;
        }
        let walked: StdHashMap<K, V> =
            self.kernel.lock().expect("state map lock").iter().filter_map(Result::ok).collect();
        walked.into_iter().collect()
    }

    /// `remove(KeyArgs)`.
    pub fn remove(&mut self, key: &K, mode: Update) -> Result<(), BpfError> {
        self.submit(Op::Remove(*key), mode)?;
        self.local.remove(key);
        Ok(())
    }

    /// Waits until every non-blocking update issued so far is in the map;
    /// returns the first failure since the previous flush.
    pub fn flush(&self) -> Result<(), BpfError> {
        let (lock, cv) = &*self.pending;
        let mut p = lock.lock().expect("pending lock");
        while p.count > 0 {
            p = cv.wait(p).expect("pending lock");
        }
        match p.error.take() {
            Some(e) => Err(BpfError::Config(e)),
            None => Ok(()),
        }
    }
}

/// A counter the data path increments (one index of a per-CPU array of
/// `PlCount`, e.g. a pipeline counter element's config).
pub struct StateCounter {
    name: String,
    map: PerCpuArray<MapData, PlCount>,
    index: u32,
}

impl StateCounter {
    /// `init(Name)`, bound to `index` of a per-CPU counter array.
    pub fn init(map: Map, name: &str, index: u32) -> Result<Self, BpfError> {
        let map = PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name: "state counter", source })?;
        Ok(StateCounter { name: name.to_string(), map, index })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `get()`: packets counted, summed over CPUs.
    pub fn get(&self) -> Result<u64, BpfError> {
        Ok(self.get_full()?.packets)
    }

    /// Packets and bytes, summed over CPUs.
    pub fn get_full(&self) -> Result<PlCount, BpfError> {
        let v = self.map.get(&self.index, 0).map_err(|source| BpfError::Map { name: "state counter", source })?;
        Ok(v.iter()
            .fold(PlCount::default(), |a, c| PlCount { packets: a.packets + c.packets, bytes: a.bytes + c.bytes }))
    }

    /// `set(Val)`: the counter becomes `packets` (bytes reset to 0). Always
    /// blocking: one map update replaces every CPU's value.
    pub fn set(&mut self, packets: u64) -> Result<(), BpfError> {
        let cpus = nr_cpus().map_err(|(_, e)| BpfError::Syscall { what: "possible CPUs", source: e })?;
        let values: Vec<PlCount> =
            (0..cpus).map(|c| PlCount { packets: if c == 0 { packets } else { 0 }, bytes: 0 }).collect();
        let values =
            PerCpuValues::try_from(values).map_err(|e| BpfError::Syscall { what: "per-CPU values", source: e })?;
        self.map.set(self.index, values, 0).map_err(|source| BpfError::Map { name: "state counter", source })
    }
}
