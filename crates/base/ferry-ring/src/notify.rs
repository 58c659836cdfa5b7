//! Cross-process wake-ups: the `Notify` seam and its eventfd implementation.
//!
//! The ring code only needs "raise" and "block until raised or timeout";
//! making that a trait lets the loom tests check the sleeping-flag protocol
//! with a modelled condition variable in place of a kernel eventfd.

use std::io;
use std::time::Duration;

/// A wake-up channel between processes or threads.
pub trait Notify: Send + Sync {
    /// Raise the signal `n` times (a waiter may return once per raise).
    fn notify(&self, n: u32) -> io::Result<()>;
    /// Block until raised (consuming a raise) or until `timeout` expires.
    /// Spurious returns are allowed: callers always re-check their ring.
    fn wait(&self, timeout: Option<Duration>) -> io::Result<()>;
}

#[cfg(not(loom))]
pub use self::eventfd::EventFd;

#[cfg(not(loom))]
mod eventfd {
    use super::Notify;
    use crate::RingError;
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    /// A non-blocking eventfd. The monitor creates one per signal and
    /// passes it to the processes involved; they wrap it with `from_owned`.
    #[derive(Debug)]
    pub struct EventFd {
        fd: OwnedFd,
    }

    impl EventFd {
        /// A counter eventfd: one `wait` drains every pending raise. Right
        /// for the data signal, whose only waiter is the ring's consumer.
        pub fn new() -> Result<EventFd, RingError> {
            Self::create(0)
        }

        /// A semaphore eventfd: each `wait` takes one raise. Right for the
        /// room signal, where several producers may wait and the consumer
        /// raises once per waiter it saw.
        pub fn new_semaphore() -> Result<EventFd, RingError> {
            Self::create(libc::EFD_SEMAPHORE)
        }

        fn create(extra: libc::c_int) -> Result<EventFd, RingError> {
            // SAFETY: plain syscall; the result is checked before use.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK | extra) };
            if fd < 0 {
                return Err(RingError::sys("eventfd"));
            }
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
        }

        /// Wraps an eventfd received from the monitor. It is switched to
        /// non-blocking mode because `wait` blocks in poll(), never in read().
        pub fn from_owned(fd: OwnedFd) -> Result<EventFd, RingError> {
            // SAFETY: fcntl on an fd we own.
            let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
            if fl < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
                return Err(RingError::sys("fcntl eventfd"));
            }
            Ok(EventFd { fd })
        }

        pub fn try_clone(&self) -> Result<EventFd, RingError> {
            let fd = self.fd.try_clone().map_err(|source| RingError::Sys { op: "dup eventfd", source })?;
            Ok(EventFd { fd })
        }

        pub fn into_owned(self) -> OwnedFd {
            self.fd
        }
    }

    impl AsFd for EventFd {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.fd.as_fd()
        }
    }

    impl Notify for EventFd {
        fn notify(&self, n: u32) -> io::Result<()> {
            let v = n.max(1) as u64;
            // SAFETY: writes 8 bytes from a live u64.
            let r = unsafe { libc::write(self.fd.as_raw_fd(), &v as *const u64 as *const libc::c_void, 8) };
            // EAGAIN means the counter is saturated: the waiter is already
            // bound to wake, so the raise is not lost.
            if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
            let ms = match timeout {
                None => -1,
                Some(t) => t.as_millis().min(i32::MAX as u128) as i32,
            };
            let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
            }
            if r > 0 {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a live u64. EAGAIN (another
                // waiter took the raise first) is a spurious wake-up.
                unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
            }
            Ok(())
        }
    }
}
