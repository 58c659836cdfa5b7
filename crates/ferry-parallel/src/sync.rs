//! The atomics the transaction engine uses.
//!
//! Under `--cfg loom` they are loom's model-checked atomics, otherwise std's.
//! The engine is written once against this module, so `tests/loom.rs`
//! checks the very commit, validation and reclamation code that runs in
//! production.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Called in every wait loop. Under loom it yields so the model checker
/// schedules the thread we wait for instead of exploring an endless spin;
/// natively it is the CPU's spin-wait hint.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Keeps a hot word on its own cache lines (128 bytes also covers the
/// adjacent-line prefetcher on x86), so workers writing their own word do
/// not invalidate each other's.
#[repr(C, align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
