//! `Map`: a bucket hash table whose buckets are transactional objects.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::{key_tag, DsError};
use crate::stm::{Abort, Access, Op, Stm, StructureId, StructureKind, TObj, Tx};

/// Most buckets a map may have (bucket ids are object element ids).
pub const MAX_BUCKETS: usize = 1 << 32;

/// Picks a key's bucket: `hash(key) % buckets`. The NF chooses it (NFOS
/// recipe "change the hash function" when keys crowd into few buckets).
pub trait BucketHash<K>: Send + Sync {
    fn hash(&self, key: &K) -> u64;
}

impl<K, F: Fn(&K) -> u64 + Send + Sync> BucketHash<K> for F {
    fn hash(&self, key: &K) -> u64 {
        self(key)
    }
}

/// SipHash-1-3 with fixed keys (std's `DefaultHasher::new()`): well mixed
/// and the same in every run, so traces replay identically.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultBucketHash;

impl<K: Hash> BucketHash<K> for DefaultBucketHash {
    fn hash(&self, key: &K) -> u64 {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        hasher.finish()
    }
}

/// One bucket: its entries, few by design (a long bucket is a conflict
/// hot spot the profiler reports).
type Bucket<K, V> = Vec<(K, V)>;

/// A key-value map with a fixed number of buckets. Each bucket (a short
/// vector of entries) is one transactional object, so transactions on keys
/// in different buckets never conflict; two keys in one bucket do, and the
/// profiler then suggests more buckets or another hash. Bucket `b` has
/// object element id `b`.
pub struct Map<K, V, H = DefaultBucketHash> {
    structure: StructureId,
    buckets: Box<[TObj<Bucket<K, V>>]>,
    hash: H,
}

impl<K, V, H> Map<K, V, H>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    H: BucketHash<K>,
{
    /// A map with `buckets` buckets (the NF's size parameter) and `hash`.
    #[track_caller]
    pub fn new(stm: &Stm, name: &str, buckets: usize, hash: H) -> Result<Map<K, V, H>, DsError> {
        if buckets == 0 {
            return Err(DsError::Empty { structure: "Map", name: name.to_string(), what: "bucket count" });
        }
        if buckets > MAX_BUCKETS {
            let max = MAX_BUCKETS as u64;
            let (name, value) = (name.to_string(), buckets as u64);
            return Err(DsError::TooLarge { structure: "Map", name, what: "bucket count", value, max });
        }
        let structure = stm.register(StructureKind::Map, name);
        let buckets = (0..buckets).map(|b| TObj::new(stm, structure, b as u64, Vec::new())).collect();
        Ok(Map { structure, buckets, hash })
    }

    pub fn structure(&self) -> StructureId {
        self.structure
    }

    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// The bucket `key` lives in.
    pub fn bucket_of(&self, key: &K) -> usize {
        (self.hash.hash(key) % self.buckets.len() as u64) as usize
    }

    /// The value of `key`, if any.
    #[track_caller]
    pub fn get<'a>(&'a self, tx: &mut Tx<'a>, key: &K) -> Result<Option<V>, Abort> {
        let bucket = &self.buckets[self.bucket_of(key)];
        let access = Access::here(Op::MapGet, key_tag(key));
        tx.read_with(bucket, access, |entries| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    }

    #[track_caller]
    pub fn contains_key<'a>(&'a self, tx: &mut Tx<'a>, key: &K) -> Result<bool, Abort> {
        let bucket = &self.buckets[self.bucket_of(key)];
        let access = Access::here(Op::MapGet, key_tag(key));
        tx.read_with(bucket, access, |entries| entries.iter().any(|(k, _)| k == key))
    }

    /// Sets `key` to `value`; returns the previous value.
    #[track_caller]
    pub fn set<'a>(&'a self, tx: &mut Tx<'a>, key: K, value: V) -> Result<Option<V>, Abort> {
        let bucket = &self.buckets[self.bucket_of(&key)];
        let access = Access::here(Op::MapSet, key_tag(&key));
        tx.update(bucket, access, |entries| match entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                entries.push((key, value));
                None
            }
        })
    }

    /// Removes `key`; returns its value. Reads the bucket first and writes
    /// only when the key is there, so removing an absent key is a read.
    #[track_caller]
    pub fn remove<'a>(&'a self, tx: &mut Tx<'a>, key: &K) -> Result<Option<V>, Abort> {
        let bucket = &self.buckets[self.bucket_of(key)];
        let access = Access::here(Op::MapRemove, key_tag(key));
        if !tx.read_with(bucket, access, |entries| entries.iter().any(|(k, _)| k == key))? {
            return Ok(None);
        }
        tx.update(bucket, access, |entries| {
            let at = entries.iter().position(|(k, _)| k == key)?;
            Some(entries.swap_remove(at).1)
        })
    }

    /// All entries, outside any transaction (NF exit, tests, reports), in
    /// bucket order.
    pub fn entries_mut(&mut self) -> Vec<(K, V)> {
        self.buckets.iter_mut().flat_map(|b| b.get_mut().iter().cloned()).collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::stm::ConflictKind;

    #[test]
    fn get_set_remove() {
        let stm = Stm::new(1).unwrap();
        let mut map: Map<u32, &'static str> = Map::new(&stm, "m", 4, DefaultBucketHash).unwrap();
        let mut w = stm.worker(0).unwrap();
        let previous = w.atomically(0, |tx| {
            map.set(tx, 1, "one")?;
            map.set(tx, 2, "two")?;
            map.set(tx, 1, "uno")
        });
        assert_eq!(previous, Some("one"));
        let got = w.atomically(0, |tx| Ok((map.get(tx, &1)?, map.get(tx, &3)?, map.contains_key(tx, &2)?)));
        assert_eq!(got, (Some("uno"), None, true));
        assert_eq!(w.atomically(0, |tx| map.remove(tx, &2)), Some("two"));
        assert_eq!(w.atomically(0, |tx| map.remove(tx, &2)), None);
        drop(w);
        assert_eq!(map.entries_mut(), vec![(1, "uno")]);
    }

    #[test]
    fn user_hash_chooses_buckets_and_same_bucket_keys_conflict_with_distinct_tags() {
        let stm = Stm::new(2).unwrap();
        // Every key lands in bucket 0: the "bad hash" of NFOS Table 3.
        let map: Map<u32, u32, _> = Map::new(&stm, "crowded", 8, |_: &u32| 0).unwrap();
        assert_eq!(map.bucket_of(&5), 0);
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        let abort = a
            .try_once(0, |tx| {
                map.set(tx, 1, 1)?;
                b.atomically(0, |btx| map.set(btx, 2, 2));
                Ok(())
            })
            .unwrap_err();
        assert_eq!(abort.kind(), ConflictKind::ReadThenOverwritten);
        assert_eq!(abort.ours().op, Op::MapSet);
        assert_eq!(abort.theirs().unwrap().op, Op::MapSet);
        assert_ne!(abort.ours().key, abort.theirs().unwrap().key, "different keys, same bucket");
    }

    #[test]
    fn keys_in_different_buckets_do_not_conflict() {
        let stm = Stm::new(2).unwrap();
        let map: Map<u32, u32, _> = Map::new(&stm, "spread", 8, |k: &u32| u64::from(*k)).unwrap();
        let mut a = stm.worker(0).unwrap();
        let mut b = stm.worker(1).unwrap();
        let result = a.try_once(0, |tx| {
            map.set(tx, 1, 1)?;
            b.atomically(0, |btx| map.set(btx, 2, 2));
            Ok(())
        });
        assert!(result.is_ok());
        assert!(Map::<u32, u32, _>::new(&stm, "none", 0, DefaultBucketHash).is_err());
    }
}
