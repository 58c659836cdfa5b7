//! The free-frame pool and per-thread caches: batching and conservation.
#![cfg(not(loom))]

use std::collections::HashSet;

use ferry_ring::{FramePool, PoolCache, PoolConfig, RingError};

fn frames(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 2048).collect()
}

#[test]
fn config_and_seed_are_validated() {
    assert!(PoolConfig::new(100).is_err());
    let pool = FramePool::new_heap(PoolConfig::new(8).unwrap());
    assert!(matches!(pool.seed(&frames(9)), Err(RingError::PoolOverflow { capacity: 8, requested: 9 })));
    pool.seed(&frames(8)).unwrap();
    assert_eq!((pool.frames_total(), pool.available()), (8, 8));
    assert_eq!(pool.put_batch(&[1]), 0, "full pool takes nothing");
    assert!(PoolCache::with_batch(pool, 0).is_err());
}

#[test]
fn take_and_put_wrap_around() {
    let pool = FramePool::new_heap(PoolConfig::new(4).unwrap());
    pool.seed(&frames(3)).unwrap();
    let mut out = Vec::new();
    for _ in 0..100 {
        assert_eq!(pool.take_batch(2, &mut out), 2);
        assert_eq!(pool.put_batch(&out), 2);
        out.clear();
    }
    assert_eq!(pool.take_batch(10, &mut out), 3);
    assert_eq!(pool.take_batch(10, &mut out), 0, "empty");
    out.sort();
    assert_eq!(out, frames(3));
}

#[test]
fn cache_touches_pool_once_per_batch() {
    let pool = FramePool::new_heap(PoolConfig::new(256).unwrap());
    pool.seed(&frames(256)).unwrap();
    let mut cache = PoolCache::new(pool.clone());
    let f = cache.alloc().unwrap();
    assert_eq!((cache.len(), pool.available()), (31, 224));
    cache.free(f);
    let more: Vec<u64> = (0..31).map(|_| cache.alloc().unwrap()).collect();
    assert_eq!((cache.len(), pool.available()), (1, 224));
    more.into_iter().for_each(|f| cache.free(f));
    assert_eq!(cache.len(), 32, "below two batches: nothing spilled");
    for _ in 0..32 {
        let f = pool_take_one(&pool);
        cache.free(f);
    }
    assert_eq!(cache.len(), 32, "one batch spilled at 64");
    drop(cache);
    assert_eq!(pool.available(), 256, "drop flushes");
}

fn pool_take_one(pool: &FramePool) -> u64 {
    let mut v = Vec::new();
    assert_eq!(pool.take_batch(1, &mut v), 1);
    v[0]
}

#[test]
fn threads_conserve_frames() {
    const TOTAL: u64 = 1024;
    let pool = FramePool::new_heap(PoolConfig::new(1024).unwrap());
    pool.seed(&frames(TOTAL)).unwrap();
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut cache = PoolCache::with_batch(pool, 8 + t * 8).unwrap();
                let mut held = Vec::new();
                for i in 0..100_000u64 {
                    if (i * 7 + t as u64) % 5 < 3 {
                        if let Some(f) = cache.alloc() {
                            held.push(f);
                        }
                    } else if let Some(f) = held.pop() {
                        cache.free(f);
                    }
                }
                held.into_iter().for_each(|f| cache.free(f));
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let mut all = Vec::new();
    while pool.take_batch(64, &mut all) > 0 {}
    assert_eq!(all.len() as u64, pool.frames_total());
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), TOTAL as usize, "no duplicates");
}

#[test]
fn snapshot_and_rebuild_for_the_monitor() {
    let pool = FramePool::new_heap(PoolConfig::new(16).unwrap());
    pool.seed(&(0..10).map(|i| i * 2048).collect::<Vec<_>>()).unwrap();
    let mut took = Vec::new();
    pool.take_batch(4, &mut took);
    let mut snap = pool.snapshot();
    snap.sort();
    assert_eq!(snap.len(), 6);
    assert!(took.iter().all(|t| !snap.contains(t)));
    // The monitor reclaims what a dead thread held.
    let mut all = snap.clone();
    all.extend(&took);
    pool.rebuild(&all).unwrap();
    assert_eq!(pool.available(), 10);
    assert_eq!(pool.frames_total(), 10);
    let mut again = pool.snapshot();
    again.sort();
    all.sort();
    assert_eq!(again, all);
}
