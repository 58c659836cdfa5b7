//! Helpers shared by the `ferry` end-to-end tests: root check, testbeds,
//! `ferry` processes inside namespaces (killed on drop), AF_PACKET sockets
//! opened from inside a namespace, an independent Internet checksum.
#![allow(dead_code)]

pub mod chain;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferry_testbed::{Testbed, TestbedSpec};
use serde_json::Value;

/// The `ferry` binary under test.
pub const FERRY: &str = env!("CARGO_BIN_EXE_ferry");

/// True if the test can run (root + iproute2). Otherwise prints a skip
/// notice, or panics under `CI=true` so that CI cannot pass by skipping.
pub fn privileged(test: &str) -> bool {
    match ferry_testbed::preflight() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but the end-to-end test {test} cannot run: it needs root and iproute2 ({e})")
        }
        Err(e) => {
            eprintln!("SKIP {test}: end-to-end tests need root and iproute2: {e}");
            false
        }
    }
}

/// How long the waiting helpers wait before they fail the test. A
/// deadline here only stops a hung test: it says nothing about speed, and
/// a loaded CI machine can take many times as long as an idle one to start
/// an NF, so it is far above anything a working setup needs.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// Waits for `f` to hold (an event: a counter reached, a process gone),
/// failing the test after [`HANG_GUARD`].
pub fn wait_until(what: &str, f: impl FnMut() -> bool) {
    ferry_cli::util::wait_until(what, HANG_GUARD, f).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Waits for `f` to return something (a status showing the event) and
/// returns it, failing the test after [`HANG_GUARD`].
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    ferry_cli::util::wait_for(what, HANG_GUARD, f).unwrap_or_else(|e| panic!("{e:#}"))
}

/// gen (g0) -- (d0) dut: one device to receive on, frames sent into it
/// from `gen`.
pub const GEN_DUT_TESTBED: &str = r#"
name: gen-dut
namespaces:
  - name: gen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01" }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:01:02" }
"#;

/// Brings up a testbed from YAML text.
pub fn testbed(yaml: &str, origin: &str) -> Testbed {
    let spec = TestbedSpec::from_yaml_str(yaml, origin).unwrap_or_else(|e| panic!("testbed spec {origin}: {e}"));
    ferry_testbed::up(&spec).unwrap_or_else(|e| panic!("testbed {origin} up: {e}"))
}

/// Names listed by `ip netns list`.
pub fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
}

/// Tears the testbed down and asserts that none of its namespaces remains.
pub fn down_and_check(tb: Testbed) {
    let names: Vec<String> = tb.namespaces().values().cloned().collect();
    tb.down().expect("testbed teardown");
    let left: Vec<String> = netns_list().into_iter().filter(|n| names.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left after teardown: {left:?}");
}

/// MAC of `dev` in logical namespace `ns`.
pub fn mac(tb: &Testbed, ns: &str, dev: &str) -> [u8; 6] {
    tb.mac(ns, dev).unwrap_or_else(|e| panic!("MAC of {dev}: {e}")).0
}

pub fn parse_mac(s: &str) -> [u8; 6] {
    s.parse::<ferry_wire::MacAddr>().unwrap_or_else(|e| panic!("{e}")).0
}

pub fn fmt_mac(m: [u8; 6]) -> String {
    ferry_wire::MacAddr(m).to_string()
}

/// A unique scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let p = std::env::temp_dir().join(format!("ferry-e2e-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `ferry` process inside a testbed namespace. Dropping it kills it
/// (SIGKILL) if it still runs, so no process outlives a failed assertion.
pub struct Ferry {
    child: Child,
    what: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// How a `ferry` process ended.
pub struct Finished {
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// The JSON report on stdout; panics (with stderr) if the process failed.
    pub fn json(&self) -> Value {
        assert!(self.status.success(), "{} failed ({}); stderr:\n{}", self.what, self.status, self.stderr);
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("{}: stdout is not one JSON report ({e}):\n{}", self.what, self.stdout))
    }
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

impl Ferry {
    /// `ip netns exec <real ns> ferry ARGS...` in logical namespace `ns`.
    pub fn spawn(tb: &Testbed, ns: &str, args: &[&str]) -> Ferry {
        Self::spawn_cmd(tb.exec(ns, FERRY, args), format!("ferry {} (in {ns})", args.join(" ")))
    }

    /// `ferry ARGS...` in this (the root) namespace.
    pub fn spawn_here(args: &[&str]) -> Ferry {
        let mut c = Command::new(FERRY);
        c.args(args);
        Self::spawn_cmd(c, format!("ferry {}", args.join(" ")))
    }

    pub fn spawn_cmd(mut cmd: Command, what: String) -> Ferry {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {what}: {e}"));
        let stdout = child.stdout.take().map(reader);
        let stderr = child.stderr.take().map(reader);
        Ferry { child, what, stdout, stderr }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `timeout` for the process to end by itself; on timeout it
    /// is killed and the test fails.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
                panic!("{} did not finish within {timeout:?}; stderr:\n{err}", self.what);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.stdout.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let stderr = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Finished { what: self.what.clone(), status, stdout, stderr }
    }

    /// Waits for the process to end by itself and returns its JSON report.
    pub fn wait_json(self, timeout: Duration) -> Value {
        self.finish(timeout).json()
    }

    /// SIGINT (a clean stop), then its JSON report.
    pub fn stop_json(self) -> Value {
        // `ip netns exec` execs ferry, so the pid is ferry's own.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        self.finish(HANG_GUARD).json()
    }
}

impl Drop for Ferry {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `dev` in the testbed's namespace `ns` carries an XDP program
/// (the process on it attached; `ferry`'s ports attach only once their
/// sockets are registered and stocked, so they are ready then). Fails the
/// test if `proc` exits first, or after [`HANG_GUARD`].
pub fn wait_attached(tb: &Testbed, ns: &str, dev: &str, proc: &mut Ferry) {
    wait_until(&format!("an XDP program on {dev} (ns {ns}) from {}", proc.what), || {
        assert!(proc.running(), "{} exited before attaching to {dev}", proc.what);
        xdp_attached(tb.ns_name(ns), dev)
    });
}

/// Whether an XDP program is on `dev` in namespace `real_ns`, as ip shows it.
pub fn xdp_attached(real_ns: &str, dev: &str) -> bool {
    let out = Command::new("ip").args(["-n", real_ns, "link", "show", "dev", dev]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Packets `dev` in namespace `real_ns` counted in direction `dir`
/// ("rx" or "tx"), from `ip -s -j link`.
pub fn link_packets(real_ns: &str, dev: &str, dir: &str) -> u64 {
    let out = Command::new("ip").args(["-n", real_ns, "-s", "-j", "link", "show", dev]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
    v[0]["stats64"][dir]["packets"].as_u64().unwrap_or(0)
}

/// Whether process `pid` is gone (or a zombie).
pub fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"))
}

/// `ferry sink --dev DEV --json` plus `args` in namespace `ns`, attached
/// and ready. Its receive and fill rings hold 32768 frames, more than any
/// test sends: frames it has not collected yet wait in its ring, so a sink
/// kept off its CPU by other load loses none.
pub fn spawn_sink(tb: &Testbed, ns: &str, dev: &str, args: &[&str]) -> Ferry {
    let mut all = vec!["sink", "--dev", dev, "--json", "--ring", "32768", "--frames", "65536"];
    all.extend_from_slice(args);
    let mut sink = Ferry::spawn(tb, ns, &all);
    wait_attached(tb, ns, dev, &mut sink);
    sink
}

/// `ping -c COUNT -W 10 IP` from namespace `ns`; returns (success, output).
/// A reply only counts as lost after 10 s: a loaded machine can be slow to
/// answer, and a test asserts on whether replies come, not how fast.
pub fn ping(tb: &Testbed, ns: &str, ip: &str, count: u32) -> (bool, String) {
    let out = tb.exec(ns, "ping", ["-c", &count.to_string(), "-i", "0.2", "-W", "10", ip]).output().expect("run ping");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Reads a u64 at a JSON pointer; panics with the report if absent.
pub fn u(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no integer at {pointer} in {v:#}"))
}

/// The counters of NF `name` in an `nf run` report, as (name, value) pairs.
pub fn nf_counters(report: &Value, name: &str) -> Vec<(String, u64)> {
    let nf = report["nfs"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["name"] == name))
        .unwrap_or_else(|| panic!("no NF {name} in report {report:#}"));
    serde_json::from_value(nf["counters"].clone()).unwrap_or_else(|e| panic!("counters of {name}: {e}"))
}

pub fn counter(counters: &[(String, u64)], name: &str) -> u64 {
    counters.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no counter {name}"))
}

/// Asserts that an NF's counters start with `rx` and the others sum to it.
pub fn assert_partition(nf: &str, counters: &[(String, u64)]) {
    assert_eq!(counters.first().map(|c| c.0.as_str()), Some("rx"), "{nf}: {counters:?}");
    let rest: u64 = counters[1..].iter().map(|c| c.1).sum();
    assert_eq!(rest, counters[0].1, "{nf}: verdict counters do not sum to rx: {counters:?}");
}

/// Runs `f` on a thread that has joined the network namespace `real_ns`.
pub fn in_netns<T: Send>(real_ns: &str, f: impl FnOnce() -> T + Send) -> T {
    ferry_sys::in_netns(Some(real_ns), f).unwrap_or_else(|e| panic!("entering {real_ns}: {e}"))
}

/// An AF_PACKET SOCK_RAW socket bound to one device (all protocols).
pub struct RawSock {
    fd: OwnedFd,
    ifindex: i32,
}

const ETH_P_ALL: u16 = 0x0003;

impl RawSock {
    /// Opens the socket on `dev` of the calling thread's namespace.
    pub fn open(dev: &str) -> RawSock {
        let cdev = std::ffi::CString::new(dev).unwrap();
        // SAFETY: plain syscalls on values we own; results are checked.
        unsafe {
            let ifindex = libc::if_nametoindex(cdev.as_ptr()) as i32;
            assert!(ifindex > 0, "no device {dev}");
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(ETH_P_ALL.to_be()));
            assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
            let fd = OwnedFd::from_raw_fd(fd);
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = ETH_P_ALL.to_be();
            sll.sll_ifindex = ifindex;
            let rc = libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(rc, 0, "bind AF_PACKET to {dev}: {}", std::io::Error::last_os_error());
            let tv = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
            let rc = libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            assert_eq!(rc, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
            // The kernel lifts a received frame's outer VLAN tag into the
            // skb: ask for it back, as libpcap does.
            let on: libc::c_int = 1;
            let rc = libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_AUXDATA,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
            assert_eq!(rc, 0, "PACKET_AUXDATA: {}", std::io::Error::last_os_error());
            RawSock { fd, ifindex }
        }
    }

    /// Sends one complete Ethernet frame.
    pub fn send(&self, frame: &[u8]) {
        // SAFETY: valid buffer and fd.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr() as *const libc::c_void, frame.len(), 0) };
        assert_eq!(n, frame.len() as isize, "AF_PACKET send: {}", std::io::Error::last_os_error());
    }

    /// Received (not outgoing) frames until `pred` accepts one or `timeout`
    /// passes; returns the accepted frame. A VLAN tag the kernel lifted off
    /// a frame is put back where it was on the wire.
    pub fn recv_match(&self, timeout: Duration, mut pred: impl FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 65536];
        while Instant::now() < deadline {
            let Some((n, outgoing, ifindex, tag)) = self.recv_one(&mut buf) else {
                continue; // timeout (EAGAIN) or EINTR: check the deadline
            };
            if outgoing || ifindex != self.ifindex {
                continue;
            }
            let mut frame = buf[..n].to_vec();
            if let (Some(tag), true) = (tag, n >= 12) {
                frame.splice(12..12, tag);
            }
            if pred(&frame) {
                return Some(frame);
            }
        }
        None
    }

    /// One frame into `buf`: its length, whether it is outgoing, its
    /// device and the tag the kernel lifted off it (TPID and TCI).
    fn recv_one(&self, buf: &mut [u8]) -> Option<(usize, bool, i32, Option<[u8; 4]>)> {
        // SAFETY: zeroed sockaddr_ll, msghdr and control buffer we own,
        // a buffer we own; the cmsg walk stays within `control`.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            let mut control = [0u64; 16];
            let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = &mut sll as *mut libc::sockaddr_ll as *mut libc::c_void;
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&control);
            let n = libc::recvmsg(self.fd.as_raw_fd(), &mut msg, 0);
            if n < 0 {
                return None;
            }
            let mut tag = None;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                    let aux = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata);
                    if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                        let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                            aux.tp_vlan_tpid
                        } else {
                            0x8100
                        };
                        let [a, b] = tpid.to_be_bytes();
                        let [c0, c1] = aux.tp_vlan_tci.to_be_bytes();
                        tag = Some([a, b, c0, c1]);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            Some((n as usize, sll.sll_pkttype == libc::PACKET_OUTGOING, sll.sll_ifindex, tag))
        }
    }
}

/// The Internet checksum (RFC 1071) of `data`; 0 over a block that
/// contains a correct checksum. Written here, independent of ferry-wire.
pub fn inet_csum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// eVNF SFC 2's traffic from namespace `client` to `server`: an elephant
/// (port 5201) and a mouse (5301) iperf3 flow, each a fixed amount at a
/// fixed pace (16 MiB at 40 Mbit/s, about 11,600 full-size segments over
/// 3.4 s), so the packet counts of a test do not depend on how fast a
/// loaded machine moves them. Both must have carried traffic.
pub fn elephant_and_mouse(tb: &Testbed, server: std::net::Ipv4Addr) {
    use ferry_testbed::apps::{self, IperfJob, IperfOpts};
    const FLOW_BYTES: u64 = 16 << 20;
    let opts = IperfOpts { bytes: Some(FLOW_BYTES), bitrate: Some(40_000_000), ..Default::default() };
    let jobs =
        [IperfJob { server, port: 5201, opts: opts.clone() }, IperfJob { server, port: 5301, opts: opts.clone() }];
    let reports = apps::iperf3_clients(tb, "client", &jobs).expect("iperf3 flows through the chain");
    // With a byte count, iperf3 ends the test once the sender has written
    // it all, so the receiver's report may stop short of it.
    assert!(
        reports.iter().all(|r| r.bytes_sent >= FLOW_BYTES && r.bytes_received > 0),
        "both flows carried traffic: {reports:?}"
    );
}
