//! `ferry chain reload`: ferryd sends the NF process SIGHUP, and each of
//! its threads reads the NF's file again at its next burst or wake-up,
//! then moves one of the counters [`ferry_evnf::types::RELOAD_COUNTERS`]
//! (applied, refused), which ferryd waits for.

use std::sync::atomic::{AtomicU64, Ordering};

/// SIGHUPs received.
static HANGUPS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUPS.fetch_add(1, Ordering::Relaxed);
}

/// Catches SIGHUP from now on. Called before the NF says hello: ferryd
/// signals only NFs that are connected, and SIGHUP's default action would
/// end the process.
pub fn catch_hangups() {
    // SAFETY: the handler only adds to an atomic.
    unsafe { libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t) };
}

/// One thread's view of the reload requests: each SIGHUP is due once.
/// At first every SIGHUP since the process began is due: one that came
/// between the hello and the thread's start is not missed (reading the
/// file once more does no harm).
#[derive(Default)]
pub struct Reloads {
    seen: u64,
}

impl Reloads {
    /// Whether a SIGHUP came since this thread last asked.
    pub fn due(&mut self) -> bool {
        let now = HANGUPS.load(Ordering::Relaxed);
        std::mem::replace(&mut self.seen, now) != now
    }
}
