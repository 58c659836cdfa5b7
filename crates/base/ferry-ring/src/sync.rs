//! The atomics every algorithm in this crate uses.
//!
//! Under `--cfg loom` they are loom's model-checked atomics, otherwise std's.
//! The ring and pool code is written once against this module, so the loom
//! tests check the very code that runs over shared memory (loom cannot see
//! across processes, so there it runs over heap-allocated headers/slots).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Called in every retry loop. Under loom it yields so the model checker
/// schedules the thread we are waiting for instead of exploring an endless
/// spin; natively it is the CPU's spin-wait hint.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Keeps two hot counters on separate cache lines (128 bytes covers the
/// adjacent-line prefetcher on x86), so producers bumping `head` do not
/// invalidate the consumer's `tail` line.
#[repr(C, align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
