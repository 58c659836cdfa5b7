//! Heap bytes per thread: what "memory per core" is measured with.
//!
//! A process's peak resident memory (what NFOS reports) is dominated here
//! by the in-memory trace and each worker's copy of its queue, so the
//! difference a second core makes disappears in noise. Counting heap bytes
//! per thread instead gives each worker's own growth while it processes
//! packets (its set table, the versions it installs, its buffers) and the
//! bytes building the NF's shared structures took.
//!
//! [`CountingAlloc`] is the system allocator plus two per-thread counters
//! (bytes live, and the highest that reached since the last [`mark`]). A
//! binary opts in with `#[global_allocator]`; without it [`mark`] returns
//! `None` and nothing is measured. Counts are of requested bytes (the
//! allocator's own headers and rounding are not included), and a block
//! freed by another thread than the one that allocated it counts on the
//! freeing thread, so one thread's net count can go below its mark; the sum
//! over threads is exact.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The system allocator, counting heap bytes per thread.
pub struct CountingAlloc;

/// Set once a probe allocation was seen counted: the binary counts.
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Bytes this thread allocated minus bytes it freed.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// The highest `LIVE` since the thread's last [`mark`].
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn add(bytes: usize) {
    // `try_with`: a thread being torn down may still allocate.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + bytes as i64;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn sub(bytes: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get() - bytes as i64));
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// thread-local cells with constant initialisers (no allocation, no
// destructor), so counting cannot re-enter the allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            sub(layout.size());
            add(new_size);
        }
        p
    }
}

/// Where a thread's count stood at a [`mark`].
#[derive(Debug, Clone, Copy)]
pub struct HeapMark {
    live: i64,
}

/// A thread's heap use since a [`mark`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapUse {
    /// Bytes allocated minus bytes freed since the mark (negative when the
    /// thread freed more than it allocated, e.g. other threads' blocks).
    pub net_bytes: i64,
    /// The most bytes live above the mark at any moment since (≥ 0).
    pub peak_bytes: i64,
}

/// Marks the calling thread's count and restarts its peak there; `None`
/// when the binary does not count ([`CountingAlloc`] not installed).
pub fn mark() -> Option<HeapMark> {
    if !INSTALLED.load(Ordering::Relaxed) && !probe() {
        return None;
    }
    let live = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(live));
    Some(HeapMark { live })
}

/// Allocates one byte and sees whether the calling thread's count moved.
fn probe() -> bool {
    let before = LIVE.with(Cell::get);
    let probe = std::hint::black_box(Box::new(0u8));
    let counted = LIVE.with(Cell::get) != before;
    drop(probe);
    if counted {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    counted
}

impl HeapMark {
    /// The calling thread's use since this mark (taken on the same thread).
    pub fn usage(&self) -> HeapUse {
        let live = LIVE.with(Cell::get);
        let peak = PEAK.with(Cell::get);
        HeapUse { net_bytes: live - self.live, peak_bytes: (peak - self.live).max(0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The unit-test binary does not install CountingAlloc, so the counters
    // are driven directly; tests/heap.rs runs with it installed.

    #[test]
    fn usage_counts_growth_and_peak_since_the_mark() {
        let mark = HeapMark { live: LIVE.with(Cell::get) };
        PEAK.with(|p| p.set(mark.live));
        add(1000);
        sub(600);
        add(100);
        assert_eq!(mark.usage(), HeapUse { net_bytes: 500, peak_bytes: 1000 });
        sub(500);
    }

    #[test]
    fn freeing_more_than_allocated_goes_negative_but_peak_stays_at_zero() {
        let mark = HeapMark { live: LIVE.with(Cell::get) };
        PEAK.with(|p| p.set(mark.live));
        sub(64);
        assert_eq!(mark.usage(), HeapUse { net_bytes: -64, peak_bytes: 0 });
        add(64);
    }

    #[test]
    fn without_the_counting_allocator_nothing_is_measured() {
        assert!(mark().is_none());
    }
}
