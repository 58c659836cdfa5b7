//! Blocking on "anything to do": the receive ring's data eventfd plus the
//! AF_XDP sockets, in one poll(). It implements `ferry_ring::Notify`, so
//! the ring's sleeping-flag protocol (no lost wake-up) covers the sockets
//! too: a socket with packets is readable, so poll() returns at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use ferry_ring::{EventFd, Notify};

pub(crate) struct PollSet {
    pub(crate) eventfd: EventFd,
    pub(crate) sockets: Vec<RawFd>,
}

impl Notify for PollSet {
    fn notify(&self, n: u32) -> io::Result<()> {
        self.eventfd.notify(n)
    }

    fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.eventfd.as_fd().as_raw_fd())
            .chain(self.sockets.iter().copied())
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: a valid array of pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(e) };
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64; EAGAIN is harmless.
            unsafe { libc::read(fds[0].fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
        }
        Ok(())
    }
}
