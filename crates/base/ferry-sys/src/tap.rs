//! TAP devices: the way user-space packet paths hand frames back to the
//! kernel stack (one write() per frame; the kernel receives it as if it
//! had arrived on the device). The device lives as long as the fd.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates (or attaches to) TAP device `name` in the calling thread's
/// network namespace and returns its fd. The device is down and has no
/// address.
pub fn open_tap(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() > 15 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("TAP device name {name:?}: 1 to 15 bytes")));
    }
    // SAFETY: open(2) of a path literal; the result is checked.
    let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("not supported: needs the tun driver (/dev/net/tun): {e}")));
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReq { name: [0; 16], flags: IFF_TAP | IFF_NO_PI, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes an ifreq we own.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("TUNSETIFF (creating TAP device {name}): {e}")));
    }
    Ok(fd)
}
