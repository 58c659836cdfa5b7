//! Running code inside a named network namespace.

use std::os::fd::AsRawFd;

/// Runs `f` on a fresh thread that first joins network namespace `ns`
/// (`/run/netns/<ns>`, as `ip netns` names it); `None` runs it in the
/// caller's namespace. Sockets created and devices looked up inside `f`
/// belong to that namespace; the calling thread is never moved.
pub fn in_netns<T: Send>(ns: Option<&str>, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    let Some(ns) = ns else { return Ok(f()) };
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: a valid namespace fd; setns affects only this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(std::io::Error::new(e.kind(), format!("setns into {ns}: {e}")));
            }
            Ok(f())
        })
        .join()
        // A panic in `f` is the caller's, as if `f` had run on its thread.
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
