//! AF_XDP on real veths: TX on one end, RX on the other, in copy mode,
//! with shared UMEM across queues, and from an unprivileged process that
//! received the socket and UMEM fds over a Unix socket.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{frame, privileged, VethNs};
use ferry_bpf::{AttachMode, LoadedXdp, Object};
use ferry_xsk::{fdpass, BindMode, Port, RingSizes, SocketConfig, Umem, UmemConfig, XdpDesc, XskSocket};

fn cfg(rx: bool) -> SocketConfig {
    SocketConfig {
        rings: RingSizes { rx: if rx { 512 } else { 0 }, tx: 512, fill: 512, comp: 512 },
        bind: BindMode::Copy,
        need_wakeup: true,
        busy_poll: None,
    }
}

fn umem() -> Arc<Umem> {
    Arc::new(Umem::create("test", UmemConfig { frame_count: 1024, ..Default::default() }).unwrap())
}

/// How long a loop waits for frames before the test fails: only a guard
/// against a hang (every loop ends as soon as its count is reached), far
/// above what a loaded machine needs.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Sends `frames` out of `port`, waiting for completions.
fn send_all(port: &mut Port, frames: &[Vec<u8>]) {
    let parked = port.frames_in_flight();
    for f in frames {
        let mut d = port.alloc(f.len() as u32).expect("free frame");
        d.len = f.len() as u32;
        port.frame_mut(&d).unwrap().copy_from_slice(f);
        assert_eq!(port.send(&[d]).unwrap(), 1);
    }
    let deadline = Instant::now() + HANG_GUARD;
    while port.frames_in_flight() > parked && Instant::now() < deadline {
        port.reclaim();
        let _ = port.socket().kick_tx();
    }
    assert_eq!(port.frames_in_flight(), parked, "all transmitted frames completed");
}

/// Receives until `n` frames arrived or [`HANG_GUARD`] passed; returns their
/// bytes.
fn recv_n(port: &mut Port, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut descs: Vec<XdpDesc> = Vec::new();
    let deadline = Instant::now() + HANG_GUARD;
    while got.len() < n && Instant::now() < deadline {
        descs.clear();
        if port.recv(64, &mut descs) == 0 {
            port.socket().poll_rx(10);
            continue;
        }
        for d in &descs {
            got.push(port.frame_mut(d).unwrap().to_vec());
            port.release(d.addr);
        }
    }
    got
}

#[test]
fn copy_mode_tx_to_rx_across_a_veth() {
    if !privileged() {
        return;
    }
    let ns = VethNs::new("a", 1);
    std::thread::spawn(move || {
        ns.enter();
        let a = ferry_xsk::ifindex("xa").unwrap();
        let b = ferry_xsk::ifindex("xb").unwrap();
        let mut prog = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", b, AttachMode::Driver).unwrap();
        let rx_sock = XskSocket::create(umem(), b, 0, &cfg(true), None).unwrap();
        prog.register_xsk(0, &rx_sock).unwrap();
        let mut rx = Port::new(rx_sock, 0..1024, 512).unwrap();
        let mut tx = Port::new(XskSocket::create(umem(), a, 0, &cfg(false), None).unwrap(), 0..1024, 0).unwrap();

        let frames: Vec<Vec<u8>> = (0..100u8).map(frame).collect();
        send_all(&mut tx, &frames);
        let got = recv_n(&mut rx, 100);
        assert_eq!(got, frames, "every frame arrived intact and in order");
        assert_eq!(rx.counters.rx_packets, 100);
        assert_eq!(prog.verdicts().unwrap().packets[4], 100, "100 redirects counted by XDP");
        assert_eq!(rx.socket().statistics().unwrap().rx_dropped, 0);
        // Conservation: what is not free sits on the fill ring.
        assert_eq!(rx.frames_in_flight() + rx.frames_free(), 1024);
    })
    .join()
    .unwrap();
}

#[test]
fn shared_umem_across_queues_and_devices() {
    if !privileged() {
        return;
    }
    let ns = VethNs::new("s", 2);
    std::thread::spawn(move || {
        ns.enter();
        let a = ferry_xsk::ifindex("xa").unwrap();
        let b = ferry_xsk::ifindex("xb").unwrap();
        let mut prog = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", b, AttachMode::Driver).unwrap();
        // One UMEM for three sockets: b/q0 (registers it), b/q1 and a/q1.
        let shared = umem();
        let s0 = XskSocket::create(shared.clone(), b, 0, &cfg(true), None).unwrap();
        let s1 = XskSocket::create(shared.clone(), b, 1, &cfg(true), Some((&s0, b, 0))).unwrap();
        let sa = XskSocket::create(shared.clone(), a, 1, &cfg(false), Some((&s0, b, 0))).unwrap();
        prog.register_xsk(0, &s0).unwrap();
        prog.register_xsk(1, &s1).unwrap();
        let mut rx0 = Port::new(s0, 0..256, 128).unwrap();
        let mut rx1 = Port::new(s1, 256..512, 128).unwrap();
        let mut txa1 = Port::new(sa, 512..768, 0).unwrap();
        // A separate UMEM transmitting on queue 0 of xa.
        let mut txa0 = Port::new(XskSocket::create(umem(), a, 0, &cfg(false), None).unwrap(), 0..256, 0).unwrap();

        // veth delivers to the peer's receive queue matching the sender's
        // transmit queue: picking the TX queue emulates RSS.
        send_all(&mut txa0, &[frame(1), frame(2)]);
        send_all(&mut txa1, &[frame(3), frame(4), frame(5)]);
        assert_eq!(recv_n(&mut rx0, 2), vec![frame(1), frame(2)]);
        assert_eq!(recv_n(&mut rx1, 3), vec![frame(3), frame(4), frame(5)]);
    })
    .join()
    .unwrap();
}

/// Child side of the unprivileged test: runs in a re-executed copy of this
/// test binary, drops to nobody with no capabilities, adopts the socket and
/// UMEM from fds and echoes frames back (l2fwd without the MAC swap).
#[test]
fn unprivileged_child() {
    let Ok(fd) = std::env::var("FERRY_TEST_CHILD_FD") else { return };
    let ctl = unsafe { UnixStream::from_raw_fd(fd.parse().unwrap()) };
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let cap_eff = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    assert!(cap_eff.ends_with("0000000000000000"), "no capabilities left: {cap_eff}");
    // A privileged operation must fail now.
    assert!(LoadedXdp::load(Object::Basic, "ferry_drop").is_err(), "BPF load must fail unprivileged");

    let mut buf = [0u8; 64];
    let (_, mut fds) = fdpass::recv_with_fds(&ctl, &mut buf).unwrap();
    assert_eq!(fds.len(), 2);
    let sock_fd: OwnedFd = fds.remove(0);
    let umem_fd: OwnedFd = fds.remove(0);
    let umem = Arc::new(Umem::from_fd(umem_fd, UmemConfig { frame_count: 1024, ..Default::default() }).unwrap());
    let sock = XskSocket::from_fd(sock_fd, umem, cfg(true).rings).unwrap();
    let mut port = Port::new(sock, 0..1024, 512).unwrap();
    fdpass::send_with_fds(&ctl, b"ready", &[]).unwrap();
    let mut echoed = 0;
    let mut descs = Vec::new();
    let deadline = Instant::now() + HANG_GUARD;
    while echoed < 50 && Instant::now() < deadline {
        port.reclaim();
        descs.clear();
        if port.recv(64, &mut descs) == 0 {
            port.socket().poll_rx(10);
            continue;
        }
        echoed += port.send(&descs).unwrap();
    }
    fdpass::send_with_fds(&ctl, &(echoed as u32).to_le_bytes(), &[]).unwrap();
}

#[test]
fn unprivileged_process_uses_rings_from_passed_fds() {
    if !privileged() {
        return;
    }
    let ns = VethNs::new("u", 1);
    std::thread::spawn(move || {
        ns.enter();
        let a = ferry_xsk::ifindex("xa").unwrap();
        let b = ferry_xsk::ifindex("xb").unwrap();
        // Privileged side: program, UMEM, socket, XSKMAP entry.
        let mut prog = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", b, AttachMode::Driver).unwrap();
        let shared = umem();
        let sock = XskSocket::create(shared.clone(), b, 0, &cfg(true), None).unwrap();
        prog.register_xsk(0, &sock).unwrap();
        // Receiver on xa to see the echoes: it needs an XDP program too.
        let mut prog_a = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", a, AttachMode::Driver).unwrap();
        let sa = XskSocket::create(umem(), a, 0, &cfg(true), None).unwrap();
        prog_a.register_xsk(0, &sa).unwrap();
        let mut pa = Port::new(sa, 0..1024, 512).unwrap();

        let (parent, child) = UnixStream::pair().unwrap();
        let child_fd = child.as_raw_fd();
        unsafe { libc::fcntl(child_fd, libc::F_SETFD, 0) };
        let exe = std::env::current_exe().unwrap();
        let mut proc = Command::new(exe)
            .args(["--exact", "unprivileged_child", "--nocapture", "--test-threads=1"])
            .env("FERRY_TEST_CHILD_FD", child_fd.to_string())
            .spawn()
            .unwrap();
        drop(child);
        fdpass::send_with_fds(&parent, b"xsk", &[sock.as_raw_fd(), shared.as_fd_raw()]).unwrap();
        let mut ready = [0u8; 8];
        let (n, _) = fdpass::recv_with_fds(&parent, &mut ready).unwrap();
        assert_eq!(&ready[..n], b"ready");

        let frames: Vec<Vec<u8>> = (0..50u8).map(frame).collect();
        send_all(&mut pa, &frames);
        let back = recv_n(&mut pa, 50);
        let mut buf = [0u8; 8];
        let (n, _) = fdpass::recv_with_fds(&parent, &mut buf).unwrap();
        assert_eq!(n, 4);
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), 50, "child echoed 50 frames");
        assert!(proc.wait().unwrap().success(), "child passed its own assertions");
        assert_eq!(back, frames, "echoes arrived back intact");
    })
    .join()
    .unwrap();
}

trait RawUmemFd {
    fn as_fd_raw(&self) -> i32;
}
impl RawUmemFd for Umem {
    fn as_fd_raw(&self) -> i32 {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

#[test]
fn generic_mode_with_busy_poll_options_and_without_need_wakeup() {
    if !privileged() {
        return;
    }
    let ns = VethNs::new("g", 1);
    std::thread::spawn(move || {
        ns.enter();
        let a = ferry_xsk::ifindex("xa").unwrap();
        let b = ferry_xsk::ifindex("xb").unwrap();
        let mut prog = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", b, AttachMode::Generic).unwrap();
        let mut rx_cfg = cfg(true);
        rx_cfg.need_wakeup = false;
        rx_cfg.busy_poll = Some(ferry_xsk::BusyPoll { usecs: 20, budget: 64, prefer: true });
        let rx_sock = XskSocket::create(umem(), b, 0, &rx_cfg, None).unwrap();
        prog.register_xsk(0, &rx_sock).unwrap();
        let mut rx = Port::new(rx_sock, 0..1024, 512).unwrap();
        let mut tx = Port::new(XskSocket::create(umem(), a, 0, &cfg(false), None).unwrap(), 0..1024, 0).unwrap();
        let frames: Vec<Vec<u8>> = (0..20u8).map(frame).collect();
        send_all(&mut tx, &frames);
        assert_eq!(recv_n(&mut rx, 20), frames, "generic-mode XDP delivers to the socket too");
    })
    .join()
    .unwrap();
}

#[test]
fn zero_copy_on_veth_fails_with_a_clear_error() {
    if !privileged() {
        return;
    }
    let ns = VethNs::new("z", 1);
    std::thread::spawn(move || {
        ns.enter();
        let b = ferry_xsk::ifindex("xb").unwrap();
        let _prog = LoadedXdp::attach(Object::XskRedirect, "ferry_xsk_redirect", b, AttachMode::Driver).unwrap();
        let mut zc = cfg(true);
        zc.bind = BindMode::ZeroCopy;
        let err = XskSocket::create(umem(), b, 0, &zc, None).err().expect("veth has no zero-copy AF_XDP");
        let text = err.to_string();
        eprintln!("zero-copy on veth: {text}");
        assert!(text.contains("not supported: needs a driver with AF_XDP zero-copy support"), "error says why: {text}");
    })
    .join()
    .unwrap();
}
