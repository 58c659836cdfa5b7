//! Passing file descriptors between processes over a Unix stream socket
//! (SCM_RIGHTS), with a payload. This is how a privileged process hands an
//! AF_XDP socket and its UMEM to an unprivileged NF.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::XskError;

/// Most fds one message carries.
pub const MAX_FDS: usize = 250;

/// Sends `payload` and `fds` in one message.
pub fn send_with_fds(sock: &UnixStream, payload: &[u8], fds: &[RawFd]) -> Result<(), XskError> {
    if fds.len() > MAX_FDS || payload.is_empty() {
        return Err(XskError::Config { field: "fds", reason: "at most 250 fds and a non-empty payload" });
    }
    let iov = [IoSlice::new(payload)];
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr points at live buffers; CMSG macros stay inside cbuf.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg) as *mut RawFd, fds.len());
        }
        if libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(XskError::sys("sendmsg SCM_RIGHTS"));
        }
    }
    Ok(())
}

/// Receives one message: its payload bytes (into `buf`, returning the
/// length) and any fds, which become owned (closed on drop).
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), XskError> {
    let mut iov = [IoSliceMut::new(buf)];
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    let mut fds = Vec::new();
    // SAFETY: as in send_with_fds; fds the kernel installed are ours.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(XskError::sys("recvmsg SCM_RIGHTS"));
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let count = ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(*data.add(i)));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(XskError::Config { field: "fds", reason: "control message truncated (too many fds)" });
        }
        n as usize
    };
    Ok((n, fds))
}
