//! What is process-wide in ferryd: the stop signals. (Its events go
//! through `tracing`, filtered by RUST_LOG.)

use std::sync::atomic::{AtomicBool, Ordering};

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Release);
}

/// SIGTERM and SIGINT stop ferryd (see [`signalled`]); SIGPIPE is
/// ignored, so a client that goes away mid-reply is an error, not a death.
pub(crate) fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// True once SIGTERM or SIGINT arrived.
pub(crate) fn signalled() -> bool {
    SIGNALLED.load(Ordering::Acquire)
}
