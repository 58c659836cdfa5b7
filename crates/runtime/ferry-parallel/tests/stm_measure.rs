//! Rough numbers for the engine (ignored by default; run with
//! `cargo test -p ferry-parallel --release --test stm_measure -- --ignored --nocapture`).
#![cfg(not(loom))]

use std::thread;
use std::time::Instant;

use ferry_parallel::stm::{Stm, StructureKind, TObj};

fn objects(stm: &Stm, n: usize) -> Vec<TObj<u64>> {
    let id = stm.register(StructureKind::Vector, "objects");
    (0..n).map(|i| TObj::new(stm, id, i as u64, 0)).collect()
}

#[test]
#[ignore]
fn single_thread_cost_per_access() {
    let stm = Stm::new(1).unwrap();
    let objs = objects(&stm, 1024);
    let mut w = stm.worker(0).unwrap();
    const TXS: usize = 200_000;
    for (label, accesses, write) in [("read-only", 32, false), ("read-modify-write", 32, true), ("1 rmw", 1, true)] {
        let start = Instant::now();
        for t in 0..TXS {
            w.atomically(0, |tx| {
                for k in 0..accesses {
                    let obj = &objs[(t * 7 + k * 31) % objs.len()];
                    if write {
                        obj.update(tx, |v| *v += 1)?;
                    } else {
                        obj.read(tx)?;
                    }
                }
                Ok(())
            });
        }
        let per_tx = start.elapsed().as_nanos() as f64 / TXS as f64;
        println!("{label}: {accesses} accesses/tx: {per_tx:.0} ns/tx, {:.1} ns/access", per_tx / accesses as f64);
    }
}

#[test]
#[ignore]
fn two_thread_throughput() {
    const TXS: u64 = 500_000;
    for (label, shared) in [("disjoint objects", false), ("one shared counter", true)] {
        let stm = Stm::new(2).unwrap();
        let objs = objects(&stm, 64);
        let start = Instant::now();
        let aborts: u64 = thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|i| {
                    let (stm, objs) = (&stm, &objs);
                    s.spawn(move || {
                        let mut w = stm.worker(i).unwrap();
                        for t in 0..TXS as usize {
                            let obj = if shared { &objs[0] } else { &objs[i * 32 + t % 32] };
                            w.atomically(0, |tx| obj.update(tx, |v| *v += 1));
                        }
                        w.stats().aborts
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        let secs = start.elapsed().as_secs_f64();
        println!(
            "2 threads, {label}: {:.2} M commits/s, {aborts} aborts ({:.1}%)",
            2.0 * TXS as f64 / secs / 1e6,
            aborts as f64 * 100.0 / (2 * TXS + aborts) as f64
        );
    }
}
