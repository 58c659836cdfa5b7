//! Contention stress on the built-in data structures.
#![cfg(not(loom))]

use std::collections::HashSet;
use std::thread;

use ferry_parallel::ds::{Allocator, AllocatorConfig, DefaultBucketHash, DistributedObj, Map};
use ferry_parallel::stm::Stm;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn allocator_never_leases_an_index_twice_under_contention() {
    const WORKERS: usize = 2;
    const CAPACITY: u32 = 48;
    let stm = Stm::new(WORKERS).unwrap();
    let config = AllocatorConfig { capacity: CAPACITY, lease_ns: u64::MAX / 4, refresh_interval_ns: 0 };
    let mut alloc = Allocator::new(&stm, "ports", config).unwrap();
    let held: Vec<Vec<u32>> = thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|i| {
                let (stm, alloc) = (&stm, &alloc);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(i as u64);
                    let mut w = stm.worker(i).unwrap();
                    let mut held: Vec<u32> = Vec::new();
                    for t in 0..20_000u64 {
                        match rng.gen_range(0..10) {
                            // Mostly allocate, so pools run dry and workers steal.
                            0..=4 => {
                                if let Some(index) = w.atomically(t, |tx| alloc.allocate(tx)) {
                                    held.push(index);
                                }
                            }
                            5..=7 if !held.is_empty() => {
                                let index = held.swap_remove(rng.gen_range(0..held.len()));
                                assert!(w.atomically(t, |tx| alloc.free(tx, index)), "{index} was not leased");
                            }
                            _ if !held.is_empty() => {
                                let index = held[rng.gen_range(0..held.len())];
                                assert!(w.atomically(t, |tx| alloc.refresh(tx, index)), "{index} lost its lease");
                            }
                            _ => {}
                        }
                    }
                    eprintln!("allocator worker {i}: {:?}", w.stats().aborts);
                    held
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = HashSet::new();
    for index in held.iter().flatten() {
        assert!(all.insert(*index), "index {index} leased to two workers");
    }
    let free: u32 = alloc.pool_lengths_mut().iter().sum();
    let leased: u32 = alloc.lease_counts_mut().iter().sum();
    assert_eq!(leased as usize, all.len());
    assert_eq!(free + leased, CAPACITY);
}

#[test]
fn map_and_distributed_counter_agree_under_contention() {
    const WORKERS: usize = 2;
    const OPS: u64 = 10_000;
    let stm = Stm::new(WORKERS).unwrap();
    let mut map: Map<u8, u64> = Map::new(&stm, "per_key", 2, DefaultBucketHash).unwrap();
    let mut total = DistributedObj::new(&stm, "total", 0u64, |acc: &mut u64, part: &u64| *acc += part, 0);
    thread::scope(|s| {
        for i in 0..WORKERS {
            let (stm, map, total) = (&stm, &map, &total);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(10 + i as u64);
                let mut w = stm.worker(i).unwrap();
                for t in 0..OPS {
                    let key = rng.gen_range(0..8u8);
                    w.atomically(t, |tx| {
                        let n = map.get(tx, &key)?.unwrap_or(0);
                        map.set(tx, key, n + 1)?;
                        total.update(tx, |v| *v += 1)
                    });
                }
            });
        }
    });
    let sum: u64 = map.entries_mut().iter().map(|(_, n)| n).sum();
    assert_eq!(sum, WORKERS as u64 * OPS);
    assert_eq!(total.merged_mut(), WORKERS as u64 * OPS);
}
