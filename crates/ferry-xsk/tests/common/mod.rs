//! A throwaway network namespace holding one veth pair, for AF_XDP tests.
//! The namespace is deleted on drop; a killed test leaves it to the sweep
//! that `make test` runs (names start with `fyx`).

use std::os::fd::AsRawFd;
use std::process::Command;

pub struct VethNs {
    pub name: String,
}

/// Root is needed for namespaces, XDP and AF_XDP; skipped without it
/// except under CI=true, where a skip would hide a broken setup.
pub fn privileged() -> bool {
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "AF_XDP tests need root in CI");
    eprintln!("skipping: AF_XDP tests need root");
    false
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl VethNs {
    /// Creates namespace with veth `xa` <-> `xb` (both inside), `queues`
    /// queues each, both up.
    pub fn new(tag: &str, queues: u32) -> VethNs {
        let name = format!("fyx{}{}", std::process::id(), tag);
        ip(&["netns", "add", &name]);
        let ns = VethNs { name };
        // No IPv6: its router and multicast-listener messages would land in
        // the sockets under test between the frames the tests send.
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            .args(["net.ipv6.conf.default.disable_ipv6=1"])
            .output()
            .expect("run sysctl");
        assert!(out.status.success(), "sysctl: {}", String::from_utf8_lossy(&out.stderr));
        let q = queues.to_string();
        ip(&[
            "-n",
            &ns.name,
            "link",
            "add",
            "xa",
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "xb",
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ]);
        ip(&["-n", &ns.name, "link", "set", "xa", "address", "02:00:00:00:00:0a"]);
        ip(&["-n", &ns.name, "link", "set", "xb", "address", "02:00:00:00:00:0b"]);
        ip(&["-n", &ns.name, "link", "set", "xa", "up"]);
        ip(&["-n", &ns.name, "link", "set", "xb", "up"]);
        ns
    }

    /// Moves the calling thread into the namespace (network namespaces are
    /// per thread, so tests do this on a thread of their own).
    pub fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A 60-byte UDP frame with `tag` in its payload.
pub fn frame(tag: u8) -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0,
        0, 1, 10, 0, 0, 2, 0x03, 0xe8, 0x07, 0xd0, 0, 26, 0, 0,
    ];
    f.resize(60, tag);
    f
}
