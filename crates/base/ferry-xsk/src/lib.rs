//! AF_XDP packet I/O over raw syscalls (no libxdp).
//!
//! - [`Umem`]: the frame area, in a sealed memfd so other processes can map it;
//! - [`XskSocket`]: a socket with fill, completion, RX and TX rings; copy or
//!   zero-copy bind, need_wakeup, busy-poll options, XDP_SHARED_UMEM across
//!   queues and devices; or adopted from an fd received from another process;
//! - [`Port`]: a socket with its own frames and the per-batch bookkeeping;
//! - [`fdpass`]: SCM_RIGHTS fd passing.
//!
//! Attaching the XDP program that steers frames into sockets lives in
//! `ferry-bpf`; this crate never needs it.

pub mod fdpass;
mod port;
mod ring;
mod socket;
pub mod sys;
mod umem;

pub use port::{Port, PortCounters};
pub use ring::{ConsumerRing, ProducerRing};
pub use socket::{BindMode, BusyPoll, RingSizes, SocketConfig, XskSocket};
pub use sys::{XdpDesc, XdpStatistics};
pub use umem::{Umem, UmemConfig};

/// Errors of the AF_XDP layer.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("invalid {field}: {reason}")]
    Config { field: &'static str, reason: &'static str },
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("bind AF_XDP socket to ifindex {ifindex} queue {queue}: {source}")]
    Bind {
        ifindex: u32,
        queue: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "bind AF_XDP socket to ifindex {ifindex} queue {queue}: the queue is still another AF_XDP socket's after \
         {waited_ms} ms (a closed socket's is released in the background; one still open keeps it: stop its program)"
    )]
    Busy { ifindex: u32, queue: u32, waited_ms: u64 },
    #[error("not supported: needs {need} ({source})")]
    NotSupported {
        need: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl XskError {
    pub(crate) fn sys(what: &'static str) -> XskError {
        XskError::Sys { what, source: std::io::Error::last_os_error() }
    }
}

/// Index of a network device by name (in the caller's network namespace).
pub fn ifindex(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: c is a valid C string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// The (receive, transmit) queues device `name` (in the caller's network
/// namespace) uses: its current RX (TX) plus combined channels, as
/// `ethtool -l` shows them. A socket binds only to a queue below both.
/// None when the driver does not report channels (ask netlink then).
pub fn queues(name: &str) -> std::io::Result<Option<(u32, u32)>> {
    sys::channels(name).map(|c| c.map(|c| (c.rx_count + c.combined_count, c.tx_count + c.combined_count)))
}
