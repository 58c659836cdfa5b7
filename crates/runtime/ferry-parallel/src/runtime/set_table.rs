//! A worker's live packet sets: their state and idle timers. Owned by one
//! worker thread, so plain (non-transactional) data.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use crate::packet_set::SetKey;

pub(crate) struct LiveSet<S> {
    pub(crate) state: S,
    pub(crate) last_seen_ns: u64,
    pub(crate) idle_timeout_ns: u64,
}

impl<S> LiveSet<S> {
    /// The set expires when it has seen no packet up to this time
    /// (inclusive).
    pub(crate) fn deadline(&self) -> u64 {
        self.last_seen_ns.saturating_add(self.idle_timeout_ns)
    }
}

/// A live set and the generation of its timer.
struct Entry<S> {
    set: LiveSet<S>,
    generation: u64,
}

/// Live sets plus a lazy timer heap: one entry per live set, re-armed
/// at its real deadline when it pops early (the set saw packets since).
/// A set replaced by a new one of the same key (it expired in the middle
/// of a batch and its packet started it again) gets a new timer; the old
/// one is recognised by its generation and dropped when it pops, so a set
/// never has two timers (which would expire it twice).
pub(crate) struct SetTable<S> {
    live: FxHashMap<SetKey, Entry<S>>,
    timers: BinaryHeap<Reverse<(u64, SetKey, u64)>>,
    next_generation: u64,
}

impl<S> SetTable<S> {
    pub(crate) fn new() -> SetTable<S> {
        SetTable { live: FxHashMap::default(), timers: BinaryHeap::new(), next_generation: 0 }
    }

    pub(crate) fn get(&self, key: &SetKey) -> Option<&LiveSet<S>> {
        self.live.get(key).map(|e| &e.set)
    }

    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// The live sets idle since before `now` (at their deadline or past).
    /// They stay in the table until [`SetTable::remove`].
    pub(crate) fn due(&mut self, now_ns: u64) -> Vec<SetKey> {
        let mut due = Vec::new();
        while let Some(Reverse((deadline, key, generation))) = self.timers.peek().copied() {
            if deadline > now_ns {
                break;
            }
            self.timers.pop();
            let Some(entry) = self.live.get(&key).filter(|e| e.generation == generation) else { continue };
            if entry.set.deadline() <= now_ns {
                due.push(key);
            } else {
                self.timers.push(Reverse((entry.set.deadline(), key, generation)));
            }
        }
        due
    }

    /// Makes `key` live with `set`, replacing a set of that key still in
    /// the table (and its timer).
    pub(crate) fn insert(&mut self, key: SetKey, set: LiveSet<S>) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.timers.push(Reverse((set.deadline(), key, generation)));
        self.live.insert(key, Entry { set, generation });
    }

    /// Updates a live set after a committed batch.
    pub(crate) fn touch(&mut self, key: &SetKey, state: S, last_seen_ns: u64) {
        if let Some(entry) = self.live.get_mut(key) {
            entry.set.state = state;
            entry.set.last_seen_ns = last_seen_ns;
        }
    }

    pub(crate) fn remove(&mut self, key: &SetKey) {
        self.live.remove(key);
    }
}
