//! Loom models of the ring, the wake-up protocols and the pool. They run the
//! crate's own code on loom's atomics over heap memory:
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p ferry-ring --release --test loom
#![cfg(loom)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ferry_ring::{Desc, FramePool, MpscRing, Notify, PoolCache, PoolConfig, RingConfig};
use loom::sync::{Condvar, Mutex};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // LOOM_MAX_PREEMPTIONS overrides; 2 keeps the whole file under a minute.
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

/// A counting semaphore standing in for an eventfd. It blocks with no
/// timeout, so a lost wake-up shows up as a loom deadlock.
#[derive(Default)]
struct Sem {
    count: Mutex<u32>,
    cv: Condvar,
}

impl Notify for Sem {
    fn notify(&self, n: u32) -> std::io::Result<()> {
        *self.count.lock().unwrap() += n.max(1);
        self.cv.notify_all();
        Ok(())
    }
    fn wait(&self, _timeout: Option<Duration>) -> std::io::Result<()> {
        let mut g = self.count.lock().unwrap();
        while *g == 0 {
            g = self.cv.wait(g).unwrap();
        }
        *g -= 1;
        Ok(())
    }
}

fn tagged(producer: u16, n: u64) -> Vec<Desc> {
    (0..n).map(|s| Desc { addr: s, len: 0, next_hop: producer, flags: 0 }).collect()
}

/// Pushes all of `descs`, keeping the unsent rest on a partial batch and
/// blocking on the room signal when the ring is full. (Blocking, not
/// spinning: loom explores unfair schedules of two spinning threads.)
fn push_all(p: &ferry_ring::Producer, descs: &[Desc]) {
    let mut sent = 0;
    while sent < descs.len() {
        let n = p.send(&descs[sent..]).unwrap();
        if n == 0 {
            p.wait_for_room(1, None).unwrap();
        }
        sent += n;
    }
}

/// Drains `total` descriptors, blocking on the data signal when empty, and
/// checks exactly-once and per-producer order.
fn drain_checked(c: &mut ferry_ring::Consumer, total: usize, producers: usize) {
    let mut next = vec![0u64; producers];
    let mut out = Vec::new();
    while out.len() < total {
        if c.recv(total, &mut out).unwrap() == 0 {
            c.wait_for_data(None).unwrap();
        }
    }
    for d in &out {
        assert_eq!(d.addr, next[d.next_hop as usize], "lost, duplicated or reordered: {out:?}");
        next[d.next_hop as usize] += 1;
    }
    assert_eq!(c.dequeue_batch(1, &mut out), 0, "nothing extra");
}

/// A ring whose producers and consumer are wired to two loom semaphores.
fn wired(cap: u32, producers: u16) -> (Vec<ferry_ring::Producer>, ferry_ring::Consumer, MpscRing, Arc<Sem>) {
    let ring = MpscRing::new_heap(RingConfig::new(cap, producers).unwrap().with_low_watermark(0).unwrap());
    let (data, room) = (Arc::new(Sem::default()), Arc::new(Sem::default()));
    let ps = (0..producers)
        .map(|id| {
            let mut p = ring.producer(id).unwrap();
            p.set_data_notify(data.clone());
            p.set_room_notify(room.clone());
            p
        })
        .collect();
    let mut c = ring.consumer().unwrap();
    c.set_data_notify(data.clone());
    c.set_room_notify(room);
    (ps, c, ring, data)
}

#[test]
fn loom_two_producers_batches_capacity_2() {
    model(|| {
        let (ps, mut c, _ring, _) = wired(2, 2);
        let hs: Vec<_> = ps.into_iter().map(|p| thread::spawn(move || push_all(&p, &tagged(p.id(), 2)))).collect();
        drain_checked(&mut c, 4, 2);
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn loom_two_producers_batches_capacity_4() {
    model(|| {
        let (ps, mut c, _ring, _) = wired(4, 2);
        let hs: Vec<_> =
            ps.into_iter().map(|p| thread::spawn(move || push_all(&p, &tagged(p.id(), 3 - p.id() as u64)))).collect();
        drain_checked(&mut c, 5, 2);
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn loom_consumer_sleep_no_lost_wakeup() {
    model(|| {
        let ring = MpscRing::new_heap(RingConfig::new(2, 2).unwrap());
        let sem = Arc::new(Sem::default());
        let hs: Vec<_> = (0..2u16)
            .map(|id| {
                let mut p = ring.producer(id).unwrap();
                p.set_data_notify(sem.clone());
                thread::spawn(move || assert_eq!(p.send(&tagged(id, 1)).unwrap(), 1))
            })
            .collect();
        let mut c = ring.consumer().unwrap();
        c.set_data_notify(sem);
        let mut out = Vec::new();
        // Blocks with no timeout: a lost wake-up is a deadlock loom reports.
        while out.len() < 2 {
            if c.dequeue_batch(2, &mut out) == 0 {
                c.wait_for_data(None).unwrap();
            }
        }
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
}

#[test]
fn loom_producer_room_no_lost_wakeup() {
    model(|| {
        let ring = MpscRing::new_heap(RingConfig::new(2, 1).unwrap().with_low_watermark(0).unwrap());
        let sem = Arc::new(Sem::default());
        let mut p = ring.producer(0).unwrap();
        p.set_room_notify(sem.clone());
        assert_eq!(p.enqueue_batch(&tagged(0, 2)), 2);
        let mut c = ring.consumer().unwrap();
        c.set_room_notify(sem);
        let h = thread::spawn(move || {
            let mut out = Vec::new();
            while out.len() < 2 {
                if c.recv(1, &mut out).unwrap() == 0 {
                    thread::yield_now();
                }
            }
        });
        // Blocks with no timeout until the ring is empty again.
        assert!(p.wait_for_room(2, None).unwrap());
        h.join().unwrap();
    });
}

#[test]
fn loom_repair_while_others_run() {
    model(|| {
        let (mut ps, mut c, ring, data) = wired(4, 2);
        // Producer 1 died holding a claim of 2 with one slot published.
        assert_eq!(ring.abandon_after_claim(1, &tagged(1, 2), 1), 2);
        let p0 = ps.remove(0);
        let h = thread::spawn(move || push_all(&p0, &tagged(0, 2)));
        let monitor = ring.clone();
        let m = thread::spawn(move || {
            let rep = monitor.repair_after_producer_death(1);
            monitor.wake_consumer(Some(&*data)).unwrap();
            rep
        });
        let mut out = Vec::new();
        while out.len() < 3 {
            if c.recv(4, &mut out).unwrap() == 0 {
                c.wait_for_data(None).unwrap();
            }
        }
        h.join().unwrap();
        let rep = m.join().unwrap();
        assert_eq!((rep.kept, rep.holes), (1, 1));
        assert_eq!(c.holes_from(1), 1);
        let from = |id| out.iter().filter(|d| d.next_hop == id).map(|d| d.addr).collect::<Vec<_>>();
        assert_eq!((from(0), from(1)), (vec![0, 1], vec![1]));
    });
}

#[test]
fn loom_pool_with_caches_conserves_frames() {
    model(|| {
        let pool = FramePool::new_heap(PoolConfig::new(4).unwrap());
        pool.seed(&[10, 20, 30]).unwrap();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let pool = pool.clone();
                thread::spawn(move || {
                    let mut cache = PoolCache::with_batch(pool, 1).unwrap();
                    let a = cache.alloc();
                    let b = cache.alloc();
                    if let Some(f) = a {
                        cache.free(f);
                    }
                    if let Some(f) = b {
                        cache.free(f);
                    }
                    // Dropping the cache flushes it back.
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let mut all = Vec::new();
        pool.take_batch(8, &mut all);
        assert_eq!(all.iter().copied().collect::<HashSet<_>>(), HashSet::from([10, 20, 30]), "{all:?}");
        assert_eq!(all.len() as u64, pool.frames_total());
    });
}

/// A capture's record ring: a writer that never waits and a reader that
/// drains while it writes. Every record comes back whole and in order or
/// is counted lost, never torn, whatever the interleaving (the data area
/// holds one 9-byte record at a time, so the wrap and the full ring are
/// both reached).
#[test]
fn loom_record_ring_whole_in_order_or_counted_lost() {
    model(|| {
        let words: Arc<Vec<loom::sync::atomic::AtomicU64>> =
            Arc::new((0..ferry_ring::RECORD_HEADER_WORDS + 7).map(|_| loom::sync::atomic::AtomicU64::new(0)).collect());
        let w = words.clone();
        let writer = thread::spawn(move || {
            let ring = ferry_ring::RecordRing::new(&w).unwrap();
            for i in 1..=3u64 {
                ring.push([i, 0], &[i as u8; 9]);
            }
        });
        let ring = ferry_ring::RecordRing::new(&words).unwrap();
        let mut seen = Vec::new();
        let mut check = |r: ferry_ring::Record| {
            assert_eq!(r.bytes, vec![r.meta[0] as u8; 9], "a torn record");
            seen.push(r.meta[0]);
        };
        ring.drain(&mut check);
        writer.join().unwrap();
        ring.drain(&mut check);
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "{seen:?}");
        assert_eq!(seen.len() as u64 + ring.lost(), 3);
    });
}
