//! A worker's live packet sets: their state and idle timers. Owned by one
//! worker thread, so plain (non-transactional) data.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::packet_set::SetKey;

pub(crate) struct LiveSet<S> {
    pub(crate) state: S,
    pub(crate) last_seen_ns: u64,
    pub(crate) idle_timeout_ns: u64,
}

impl<S> LiveSet<S> {
    fn deadline(&self) -> u64 {
        self.last_seen_ns.saturating_add(self.idle_timeout_ns)
    }
}

/// Live sets plus a lazy timer heap: one entry per live set, re-armed
/// at its real deadline when it pops early (the set saw packets since).
pub(crate) struct SetTable<S> {
    live: HashMap<SetKey, LiveSet<S>>,
    timers: BinaryHeap<Reverse<(u64, SetKey)>>,
}

impl<S> SetTable<S> {
    pub(crate) fn new() -> SetTable<S> {
        SetTable { live: HashMap::new(), timers: BinaryHeap::new() }
    }

    pub(crate) fn get(&self, key: &SetKey) -> Option<&LiveSet<S>> {
        self.live.get(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// The live sets idle since before `now` (at their deadline or past).
    /// They stay in the table until [`SetTable::remove`].
    pub(crate) fn due(&mut self, now_ns: u64) -> Vec<SetKey> {
        let mut due = Vec::new();
        while let Some(Reverse((deadline, key))) = self.timers.peek().copied() {
            if deadline > now_ns {
                break;
            }
            self.timers.pop();
            let Some(set) = self.live.get(&key) else { continue };
            if set.deadline() <= now_ns {
                due.push(key);
            } else {
                self.timers.push(Reverse((set.deadline(), key)));
            }
        }
        due
    }

    pub(crate) fn insert(&mut self, key: SetKey, set: LiveSet<S>) {
        self.timers.push(Reverse((set.deadline(), key)));
        self.live.insert(key, set);
    }

    /// Updates a live set after a committed batch.
    pub(crate) fn touch(&mut self, key: &SetKey, state: S, last_seen_ns: u64) {
        if let Some(set) = self.live.get_mut(key) {
            set.state = state;
            set.last_seen_ns = last_seen_ns;
        }
    }

    pub(crate) fn remove(&mut self, key: &SetKey) {
        self.live.remove(key);
    }
}
