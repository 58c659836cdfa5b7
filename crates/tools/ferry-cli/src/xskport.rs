//! Opening AF_XDP ports on a device: one UMEM shared by one socket per
//! queue (XDP_SHARED_UMEM), and the steering program that feeds them.

use std::sync::Arc;

use anyhow::{Context, Result};
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use ferry_xsk::{BindMode, BusyPoll, Port, RingSizes, SocketConfig, Umem, UmemConfig, XskSocket};

/// How to open the ports.
#[derive(Debug, Clone)]
pub struct XskOptions {
    pub mode: AttachMode,
    pub bind: BindMode,
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
    /// UMEM frames in total, split evenly between the queues.
    pub frames: u32,
    /// Size of each ring.
    pub ring: u32,
}

impl Default for XskOptions {
    fn default() -> Self {
        XskOptions {
            mode: AttachMode::Driver,
            bind: BindMode::Auto,
            need_wakeup: true,
            busy_poll: None,
            frames: 8192,
            ring: 2048,
        }
    }
}

/// Which ports to open: a device, its queues and the socket options.
#[derive(Debug, Clone)]
pub struct PortSpec {
    pub dev: String,
    pub queues: Vec<u32>,
    pub xsk: XskOptions,
}

/// Ports on one device plus the program steering frames to them. Dropping
/// it detaches the program and closes the sockets.
pub struct XskPorts {
    pub ports: Vec<Port>,
    pub queues: Vec<u32>,
    /// None for transmit-only ports.
    pub program: Option<LoadedXdp>,
}

/// Opens one socket per queue on `dev`, all over one memfd UMEM. With
/// `receive` every socket is registered in the xsk-redirect program's
/// XSKMAP and its fill ring stocked before the program is attached, so
/// once the device shows the program, frames reach a socket ready for
/// them (a test or script can wait for that instead of sleeping).
pub fn open(spec: &PortSpec, receive: bool) -> Result<XskPorts> {
    let (dev, queues, opts) = (spec.dev.as_str(), spec.queues.as_slice(), &spec.xsk);
    let ifindex = crate::util::ifindex(dev)?;
    let umem = Arc::new(Umem::create("ferry-umem", UmemConfig { frame_count: opts.frames, ..Default::default() })?);
    let per_port = opts.frames / queues.len() as u32;
    let rings = RingSizes { rx: if receive { opts.ring } else { 0 }, tx: opts.ring, fill: opts.ring, comp: opts.ring };
    let cfg = SocketConfig { rings, bind: opts.bind, need_wakeup: opts.need_wakeup, busy_poll: opts.busy_poll };
    let mut program = if receive {
        Some(LoadedXdp::load(Object::XskRedirect, "ferry_xsk_redirect").context("loading the xsk-redirect program")?)
    } else {
        None
    };
    let mut sockets: Vec<XskSocket> = Vec::new();
    for &q in queues {
        let share = sockets.first().map(|first| (first, ifindex, queues[0]));
        let sock = XskSocket::create(umem.clone(), ifindex, q, &cfg, share)
            .with_context(|| format!("AF_XDP socket on {dev} queue {q}"))?;
        if let Some(p) = program.as_mut() {
            p.register_xsk(q, &sock)?;
        }
        sockets.push(sock);
    }
    let mut ports = Vec::new();
    for (i, sock) in sockets.into_iter().enumerate() {
        let start = i as u32 * per_port;
        // Half the frames wait on the fill ring for reception; the rest are
        // free for what the port transmits.
        let rx_frames = if receive { per_port / 2 } else { 0 };
        ports.push(Port::new(sock, start..start + per_port, rx_frames)?);
    }
    if let Some(p) = program.as_mut() {
        p.attach_to(ifindex, opts.mode).with_context(|| format!("attaching XDP to {dev}"))?;
    }
    Ok(XskPorts { ports, queues: queues.to_vec(), program })
}

impl XskPorts {
    /// Blocks until any port has received frames or `timeout_ms` passed, so
    /// an idle process costs no CPU whichever queue traffic resumes on.
    pub fn wait_readable(&self, timeout_ms: i32) {
        use std::os::fd::AsRawFd;
        let mut fds: Vec<libc::pollfd> = self
            .ports
            .iter()
            .map(|p| libc::pollfd { fd: p.socket().as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: fds is a valid array of pollfd of the given length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    }
}
