//! An AF_XDP socket: creation and binding (privileged), or adoption of an
//! already bound socket received from another process (unprivileged).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::ring::{ConsumerRing, ProducerRing};
use crate::sys::*;
use crate::{Umem, XskError};

/// Most sendto() calls one [`XskSocket::kick_tx_until_sent`] makes.
const MAX_KICKS: usize = 64;

/// How the socket moves frames between the driver and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// Let the kernel choose (zero-copy when the driver supports it).
    #[default]
    Auto,
    /// Force copy mode (veth only supports this).
    Copy,
    /// Force zero-copy mode; fails where the driver does not support it.
    ZeroCopy,
}

impl std::str::FromStr for BindMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BindMode::Auto),
            "copy" => Ok(BindMode::Copy),
            "zero-copy" | "zerocopy" | "zc" => Ok(BindMode::ZeroCopy),
            _ => Err(format!("unknown bind mode {s:?} (auto|copy|zero-copy)")),
        }
    }
}

/// Busy-poll socket options (SO_BUSY_POLL and friends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    pub usecs: u32,
    pub budget: u32,
    pub prefer: bool,
}

/// Ring sizes (each a power of two; 0 means "no such ring").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    pub rx: u32,
    pub tx: u32,
    pub fill: u32,
    pub comp: u32,
}

impl Default for RingSizes {
    fn default() -> Self {
        RingSizes { rx: 2048, tx: 2048, fill: 2048, comp: 2048 }
    }
}

/// Everything needed to create and bind a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketConfig {
    pub rings: RingSizes,
    pub bind: BindMode,
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

/// A bound AF_XDP socket with its rings mapped.
pub struct XskSocket {
    fd: OwnedFd,
    umem: Arc<Umem>,
    /// None when the socket shares the fill/completion rings of another
    /// socket bound to the same device and queue.
    pub(crate) fill: Option<ProducerRing<u64>>,
    pub(crate) comp: Option<ConsumerRing<u64>>,
    pub(crate) rx: Option<ConsumerRing<XdpDesc>>,
    pub(crate) tx: Option<ProducerRing<XdpDesc>>,
}

fn check_ring_size(field: &'static str, size: u32) -> Result<(), XskError> {
    if size != 0 && !size.is_power_of_two() {
        return Err(XskError::Config { field, reason: "must be a power of two" });
    }
    Ok(())
}

impl XskSocket {
    /// Creates a socket on `ifindex`/`queue` over `umem` and binds it.
    ///
    /// With `share_with` the socket joins the UMEM already registered by
    /// that socket (XDP_SHARED_UMEM); it may be on another queue or device,
    /// in which case it gets fill and completion rings of its own.
    pub fn create(
        umem: Arc<Umem>,
        ifindex: u32,
        queue: u32,
        config: &SocketConfig,
        share_with: Option<(&XskSocket, u32, u32)>,
    ) -> Result<XskSocket, XskError> {
        let r = config.rings;
        check_ring_size("rx ring", r.rx)?;
        check_ring_size("tx ring", r.tx)?;
        check_ring_size("fill ring", r.fill)?;
        check_ring_size("completion ring", r.comp)?;
        if r.rx == 0 && r.tx == 0 {
            return Err(XskError::Config { field: "rings", reason: "a socket needs an RX or a TX ring" });
        }
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    XskError::NotSupported { need: "CAP_NET_RAW to create AF_XDP sockets (ask ferryd)", source: e }
                }
                Some(libc::EAFNOSUPPORT) => {
                    XskError::NotSupported { need: "a kernel with CONFIG_XDP_SOCKETS", source: e }
                }
                _ => XskError::Sys { what: "socket(AF_XDP)", source: e },
            });
        }
        // SAFETY: raw is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();

        // Same device and queue as the sharing socket: the kernel uses that
        // socket's fill and completion rings and refuses new ones.
        let own_fq = match share_with {
            None => {
                let reg = XdpUmemReg {
                    addr: umem.base() as u64,
                    len: umem.config().len() as u64,
                    chunk_size: umem.config().frame_size,
                    headroom: umem.config().headroom,
                    ..Default::default()
                };
                setsockopt(s, SOL_XDP, XDP_UMEM_REG, &reg)
                    .map_err(|e| XskError::Sys { what: "XDP_UMEM_REG", source: e })?;
                true
            }
            Some((_, other_ifindex, other_queue)) => other_ifindex != ifindex || other_queue != queue,
        };
        if own_fq {
            setsockopt(s, SOL_XDP, XDP_UMEM_FILL_RING, &r.fill)
                .map_err(|e| XskError::Sys { what: "XDP_UMEM_FILL_RING", source: e })?;
            setsockopt(s, SOL_XDP, XDP_UMEM_COMPLETION_RING, &r.comp)
                .map_err(|e| XskError::Sys { what: "XDP_UMEM_COMPLETION_RING", source: e })?;
        }
        if r.rx > 0 {
            setsockopt(s, SOL_XDP, XDP_RX_RING, &r.rx).map_err(|e| XskError::Sys { what: "XDP_RX_RING", source: e })?;
        }
        if r.tx > 0 {
            setsockopt(s, SOL_XDP, XDP_TX_RING, &r.tx).map_err(|e| XskError::Sys { what: "XDP_TX_RING", source: e })?;
        }
        // A socket joining a shared UMEM inherits copy/zero-copy and
        // need_wakeup from it; the kernel refuses those flags on it.
        let (flags, shared_fd) = match share_with {
            Some((other, _, _)) => (XDP_SHARED_UMEM, other.fd.as_raw_fd() as u32),
            None => {
                let mode = match config.bind {
                    BindMode::Auto => 0,
                    BindMode::Copy => XDP_COPY,
                    BindMode::ZeroCopy => XDP_ZEROCOPY,
                };
                (if config.need_wakeup { mode | XDP_USE_NEED_WAKEUP } else { mode }, 0)
            }
        };
        // Rings are mapped before bind so a failed bind still unmaps them.
        let sizes = RingSizes { fill: if own_fq { r.fill } else { 0 }, comp: if own_fq { r.comp } else { 0 }, ..r };
        let sock = Self::map_rings(fd, umem, sizes)?;
        let addr = SockaddrXdp { family: AF_XDP as u16, flags, ifindex, queue_id: queue, shared_umem_fd: shared_fd };
        bind_when_free(s, &addr).map_err(|e| match (config.bind, e) {
            (BindMode::ZeroCopy, BindError::Os(e)) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                XskError::NotSupported { need: "a driver with AF_XDP zero-copy support", source: e }
            }
            (_, BindError::Os(source)) => XskError::Bind { ifindex, queue, source },
            (_, BindError::Busy { waited_ms }) => XskError::Busy { ifindex, queue, waited_ms },
        })?;
        if let Some(bp) = config.busy_poll {
            setsockopt(s, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, &(bp.prefer as libc::c_int))
                .map_err(|e| XskError::Sys { what: "SO_PREFER_BUSY_POLL", source: e })?;
            setsockopt(s, libc::SOL_SOCKET, SO_BUSY_POLL, &(bp.usecs as libc::c_int))
                .map_err(|e| XskError::Sys { what: "SO_BUSY_POLL", source: e })?;
            setsockopt(s, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, &(bp.budget as libc::c_int))
                .map_err(|e| XskError::Sys { what: "SO_BUSY_POLL_BUDGET", source: e })?;
        }
        Ok(sock)
    }

    /// Adopts a socket that another (privileged) process created and bound,
    /// received over a Unix socket. Needs no privilege: it only maps the
    /// rings that already exist.
    pub fn from_fd(fd: OwnedFd, umem: Arc<Umem>, sizes: RingSizes) -> Result<XskSocket, XskError> {
        Self::map_rings(fd, umem, sizes)
    }

    fn map_rings(fd: OwnedFd, umem: Arc<Umem>, sizes: RingSizes) -> Result<XskSocket, XskError> {
        let s = fd.as_raw_fd();
        let off: XdpMmapOffsets = getsockopt(s, SOL_XDP, XDP_MMAP_OFFSETS)
            .map_err(|e| XskError::Sys { what: "XDP_MMAP_OFFSETS", source: e })?;
        let fill = if sizes.fill > 0 {
            Some(ProducerRing::map(s, &off.fr, sizes.fill, XDP_UMEM_PGOFF_FILL_RING)?)
        } else {
            None
        };
        let comp = if sizes.comp > 0 {
            Some(ConsumerRing::map(s, &off.cr, sizes.comp, XDP_UMEM_PGOFF_COMPLETION_RING)?)
        } else {
            None
        };
        let rx = if sizes.rx > 0 { Some(ConsumerRing::map(s, &off.rx, sizes.rx, XDP_PGOFF_RX_RING)?) } else { None };
        let tx = if sizes.tx > 0 { Some(ProducerRing::map(s, &off.tx, sizes.tx, XDP_PGOFF_TX_RING)?) } else { None };
        Ok(XskSocket { fd, umem, fill, comp, rx, tx })
    }

    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Kicks the kernel to transmit what is on the TX ring. Copy mode
    /// transmits only from this call, so it is needed on every batch there.
    pub fn kick_tx(&self) -> Result<(), XskError> {
        // SAFETY: a zero-length send on our socket.
        let rc =
            unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            // These mean "busy, try again", not failure.
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::ENETDOWN) => {}
                _ => return Err(XskError::Sys { what: "sendto (TX kick)", source: e }),
            }
        }
        Ok(())
    }

    /// Kicks the kernel until the TX ring is empty or a kick moves nothing
    /// (at most 64 kicks): copy mode transmits only inside a
    /// kick, at most 32 frames each; in zero-copy mode the driver drains
    /// the ring itself after the first. Returns whether the kernel took
    /// any frames.
    pub fn kick_tx_until_sent(&self) -> Result<bool, XskError> {
        let pending = || self.tx.as_ref().map_or(0, |t| t.pending());
        let (mut before, mut moved) = (pending(), false);
        for _ in 0..MAX_KICKS {
            self.kick_tx()?;
            let now = pending();
            if now == before {
                break;
            }
            moved = true;
            before = now;
            if now == 0 {
                break;
            }
        }
        Ok(moved)
    }

    /// Kicks the kernel's receive side without waiting: a zero-length
    /// recvfrom(). On a socket with preferred busy polling this runs the
    /// device's NAPI here, in this thread (poll() does not, unless the
    /// `net.core.busy_poll` sysctl is set).
    pub fn kick_rx(&self) {
        // SAFETY: a zero-length, non-blocking receive on our socket;
        // EAGAIN (nothing there) is the common answer and is harmless.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout_ms` for received frames (also wakes the driver's
    /// RX processing when need_wakeup is in use). Returns true if readable.
    pub fn poll_rx(&self, timeout_ms: i32) -> bool {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        rc > 0 && pfd.revents & libc::POLLIN != 0
    }

    /// The kernel's drop and error counters for this socket.
    pub fn statistics(&self) -> Result<XdpStatistics, XskError> {
        getsockopt(self.fd.as_raw_fd(), SOL_XDP, XDP_STATISTICS)
            .map_err(|e| XskError::Sys { what: "XDP_STATISTICS", source: e })
    }

    /// The fill ring, for NF runtimes that manage frames themselves (a
    /// shared pool instead of `Port`'s private range). None when shared.
    pub fn fill_ring(&mut self) -> Option<&mut ProducerRing<u64>> {
        self.fill.as_mut()
    }

    /// The completion ring (None when shared).
    pub fn comp_ring(&mut self) -> Option<&mut ConsumerRing<u64>> {
        self.comp.as_mut()
    }

    /// The RX ring (None for a TX-only socket).
    pub fn rx_ring(&mut self) -> Option<&mut ConsumerRing<XdpDesc>> {
        self.rx.as_mut()
    }

    /// The TX ring (None for an RX-only socket).
    pub fn tx_ring(&mut self) -> Option<&mut ProducerRing<XdpDesc>> {
        self.tx.as_mut()
    }

    /// True when the fill ring asks for a wakeup (need_wakeup mode).
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.as_ref().is_some_and(|f| f.needs_wakeup())
    }

    /// True when the TX ring asks for a wakeup (need_wakeup mode).
    pub fn tx_needs_wakeup(&self) -> bool {
        self.tx.as_ref().is_some_and(|t| t.needs_wakeup())
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }
}

/// Why [`bind_when_free`] failed.
enum BindError {
    Os(std::io::Error),
    Busy { waited_ms: u64 },
}

/// Binds AF_XDP socket `s` to `addr`'s queue, waiting while the queue is
/// busy. A socket on the queue that was just closed (by a program that
/// ran before, or a restarted NF) gives it up only when the kernel's
/// deferred release runs, a moment later; until then bind says EBUSY.
/// Polled at growing intervals, up to [`BUSY_WAIT_MS`] in all.
fn bind_when_free(s: libc::c_int, addr: &SockaddrXdp) -> Result<(), BindError> {
    let start = std::time::Instant::now();
    let mut pause_ms = 1;
    loop {
        // SAFETY: addr is a valid sockaddr_xdp.
        let rc = unsafe {
            libc::bind(
                s,
                addr as *const SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(BindError::Os(e));
        }
        // Measured, not summed: sleeps overrun and binds take time.
        let waited_ms = start.elapsed().as_millis() as u64;
        if waited_ms >= BUSY_WAIT_MS {
            return Err(BindError::Busy { waited_ms });
        }
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        pause_ms = (pause_ms * 2).min(100);
    }
}

/// How long a bind waits for a busy queue.
const BUSY_WAIT_MS: u64 = 2000;
