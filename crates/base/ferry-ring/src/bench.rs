//! Throughput micro-benchmark, for `ferry bench chain` (not a timed test).

use std::time::Instant;

use crate::{Desc, MpscRing, RingConfig};

/// Best effort: with fewer CPUs the thread is left unpinned.
fn pin_to_cpu(cpu: usize) {
    let _ = ferry_sys::pin_thread(cpu);
}

/// Moves `n` descriptors from one producer thread (pinned to CPU 0) to the
/// consumer thread (CPU 1) through a heap `MpscRing` of 4096 slots, in
/// batches of `batch`, busy-polling. Returns descriptors per second.
pub fn bench_spsc_cross_core(batch: usize, n: u64) -> f64 {
    let batch = batch.clamp(1, 2048);
    let ring = MpscRing::new_heap(RingConfig::new(4096, 1).expect("valid config"));
    let producer = ring.producer(0).expect("id 0 is valid");
    let mut consumer = ring.consumer().expect("fresh ring");
    let start = Instant::now();
    let prod = std::thread::spawn(move || {
        pin_to_cpu(0);
        let mut buf = vec![Desc::default(); batch];
        let mut next = 0u64;
        while next < n {
            let k = (batch as u64).min(n - next) as usize;
            for (i, d) in buf[..k].iter_mut().enumerate() {
                *d = Desc::new(next + i as u64, 64);
            }
            let mut sent = 0;
            while sent < k {
                sent += producer.enqueue_batch(&buf[sent..k]);
            }
            next += k as u64;
        }
    });
    pin_to_cpu(1);
    let mut out = Vec::with_capacity(batch);
    let mut got = 0u64;
    let mut check = 0u64;
    while got < n {
        out.clear();
        got += consumer.dequeue_batch(batch, &mut out) as u64;
        // Touch the data so the reads are not optimised away.
        check = check.wrapping_add(out.iter().map(|d| d.addr).sum::<u64>());
    }
    prod.join().expect("producer thread");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(check, n.wrapping_mul(n.wrapping_sub(1)) / 2, "descriptors lost or corrupted");
    n as f64 / secs
}
