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

/// A wait loop's pause. Under loom it yields so the model checker
/// schedules the thread we wait for instead of exploring an endless spin.
/// Natively it spins with the CPU's hint for a while and then yields the
/// core: the thread we wait for (a committer holding a lock) may have been
/// preempted, and spinning until its next time slice would cost
/// milliseconds when workers outnumber cores.
#[derive(Default)]
pub(crate) struct SpinWait {
    #[cfg_attr(loom, allow(dead_code))]
    spins: u32,
}

/// Spins before [`SpinWait`] starts yielding (a commit's install phase is
/// far shorter than this when its thread is running).
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 64;

impl SpinWait {
    #[inline]
    pub(crate) fn pause(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        {
            if self.spins < SPINS_BEFORE_YIELD {
                self.spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A single spin-wait hint (back-off loops that do not wait for anyone).
#[cfg(not(loom))]
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

/// A point in wall time for the engine's own accounting (commit and
/// aborted-attempt durations in [`crate::stm::TxStats`]). Under loom there
/// is no clock: every duration is 0.
#[derive(Clone, Copy)]
pub(crate) struct Stamp {
    #[cfg(not(loom))]
    at: std::time::Instant,
}

impl Stamp {
    #[inline]
    pub(crate) fn now() -> Stamp {
        Stamp {
            #[cfg(not(loom))]
            at: std::time::Instant::now(),
        }
    }

    /// What timing nothing measures: the mean of back-to-back clock reads
    /// (measured once; the mean, not the least, since sampled intervals
    /// pay the clock's typical cost). Short sampled intervals subtract it.
    pub(crate) fn overhead_ns() -> u64 {
        #[cfg(not(loom))]
        {
            const PAIRS: u64 = 4096;
            static OVERHEAD_NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            *OVERHEAD_NS.get_or_init(|| (0..PAIRS).map(|_| Stamp::now().nanos_until(Stamp::now())).sum::<u64>() / PAIRS)
        }
        #[cfg(loom)]
        0
    }

    /// Nanoseconds from `self` to `later` (0 if `later` is not later).
    #[inline]
    pub(crate) fn nanos_until(self, later: Stamp) -> u64 {
        #[cfg(not(loom))]
        {
            u64::try_from(later.at.saturating_duration_since(self.at).as_nanos()).unwrap_or(u64::MAX)
        }
        #[cfg(loom)]
        {
            let _ = later;
            0
        }
    }
}
