//! rtnetlink on real devices. Needs root and iproute2 (which checks what
//! the kernel was told). Each test gets its own network namespace and
//! runs the code under test on a thread that has joined it, so the host's
//! links are never touched.

use std::io;
use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use ferry_sys::link::{self, KernelError};

/// A named netns (`ip netns add`), deleted on drop, also when a test panics.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("ferry-link-{}-{n}", std::process::id());
        let ok = Command::new("ip").args(["netns", "add", &name]).status().unwrap().success();
        assert!(ok, "ip netns add {name} failed");
        Netns { name }
    }

    /// Runs `f` on a thread inside this netns; a panic in `f` is re-raised
    /// here, after which `Drop` removes the netns.
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        ferry_sys::in_netns(Some(&self.name), f).expect("enter the test namespace")
    }

    /// `ip -n NS ARGS...` output; panics if ip fails.
    fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip").arg("-n").arg(&self.name).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ip {args:?}: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn errno(err: &io::Error) -> i32 {
    link::errno(err).unwrap_or_else(|| panic!("no errno in {err:?}"))
}

#[test]
fn fresh_netns_has_only_loopback() {
    let ns = Netns::new();
    let links = ns.run(link::links).unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    let lo = &links[0];
    assert_eq!((lo.index, lo.name.as_str(), lo.mtu), (1, "lo", 65536));
    assert_eq!(lo.mac, Some([0; 6]));
    assert_eq!(ns.run(|| link::link("lo")).unwrap().as_ref(), Some(lo));
}

#[test]
fn veth_lifecycle() {
    let ns = Netns::new();
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    let v4: IpAddr = "192.0.2.1".parse().unwrap();
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    ns.run(|| link::add_veth("nlp-a", "nlp-b", Some(4), Some(9000))).unwrap();

    // Both ends carry the queues and mtu, seen by us and by iproute2.
    for name in ["nlp-a", "nlp-b"] {
        let l = ns.run(|| link::link(name)).unwrap().expect(name);
        assert_eq!((l.name.as_str(), l.mtu, l.num_tx_queues, l.num_rx_queues), (name, 9000, 4, 4));
        assert!(l.mac.is_some());
        let ip = ns.ip(&["-d", "-o", "link", "show", name]);
        assert!(ip.contains(" mtu 9000 "), "{ip}");
        assert!(ip.contains("numtxqueues 4 numrxqueues 4"), "{ip}");
        assert!(ip.contains(" veth "), "{ip}");
        assert_eq!(l.kind.as_deref(), Some("veth"));
    }
    let all = ns.run(link::links).unwrap();
    let names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&"nlp-a") && names.contains(&"nlp-b"), "{names:?}");
    // The host netns was not touched.
    assert!(!Command::new("ip").args(["link", "show", "nlp-a"]).output().unwrap().status.success());

    ns.run(|| link::set_mac("nlp-a", mac)).unwrap();
    assert_eq!(ns.run(|| link::link("nlp-a")).unwrap().unwrap().mac, Some(mac));
    let ip = ns.ip(&["-o", "link", "show", "nlp-a"]);
    assert!(ip.contains("link/ether 02:11:22:33:44:55 "), "{ip}");

    ns.run(|| link::set_up("nlp-a").and_then(|()| link::set_up("nlp-b"))).unwrap();
    for name in ["nlp-a", "nlp-b"] {
        let ip = ns.ip(&["-o", "link", "show", name]);
        assert!(ip.contains(",UP,") && ip.contains(" state UP "), "{ip}");
    }

    ns.run(|| link::add_address("nlp-a", v4, 24).and_then(|()| link::add_address("nlp-a", v6, 64))).unwrap();
    let ip = ns.ip(&["addr", "show", "dev", "nlp-a"]);
    assert!(ip.contains("inet 192.0.2.1/24 "), "{ip}");
    assert!(ip.contains("inet6 2001:db8::1/64 "), "{ip}");

    // Deleting one end removes the pair.
    ns.run(|| link::delete("nlp-a")).unwrap();
    assert_eq!(ns.run(|| link::link("nlp-a")).unwrap(), None);
    assert_eq!(ns.run(|| link::link("nlp-b")).unwrap(), None);
    assert!(!ns.ip(&["-o", "link"]).contains("nlp-"));
}

#[test]
fn veth_defaults() {
    let ns = Netns::new();
    ns.run(|| link::add_veth("nlp-c", "nlp-d", None, None)).unwrap();
    for name in ["nlp-c", "nlp-d"] {
        let l = ns.run(|| link::link(name)).unwrap().unwrap();
        // Without IFLA_NUM_*_QUEUES veth picks its own count (the number of
        // possible CPUs on recent kernels), so compare with iproute2 instead.
        assert_eq!(l.mtu, 1500, "{l:?}");
        assert!(l.num_tx_queues >= 1 && l.num_rx_queues >= 1, "{l:?}");
        let queues = format!("numtxqueues {} numrxqueues {}", l.num_tx_queues, l.num_rx_queues);
        let ip = ns.ip(&["-d", "-o", "link", "show", name]);
        assert!(ip.contains(" mtu 1500 ") && ip.contains(&queues), "{ip}");
    }
}

#[test]
fn kernel_errors_carry_errno_op_and_device() {
    let ns = Netns::new();
    ns.run(|| {
        link::add_veth("nlp-e", "nlp-f", Some(2), None).unwrap();

        let err = link::add_veth("nlp-e", "nlp-g", None, None).unwrap_err();
        assert_eq!(errno(&err), libc::EEXIST);
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let text = err.to_string();
        assert!(text.starts_with("add veth nlp-e: "), "{text}");
        let inner = err.get_ref().unwrap().downcast_ref::<KernelError>().unwrap();
        assert_eq!((inner.op, inner.dev.as_str()), ("add veth", "nlp-e"));

        assert_eq!(link::link("nlp-none").unwrap(), None);
        for (op, err) in [
            ("delete link", link::delete("nlp-none").unwrap_err()),
            ("set up", link::set_up("nlp-none").unwrap_err()),
            ("set mac", link::set_mac("nlp-none", [2, 0, 0, 0, 0, 1]).unwrap_err()),
            ("add address", link::add_address("nlp-none", "192.0.2.9".parse().unwrap(), 24).unwrap_err()),
        ] {
            assert_eq!(errno(&err), libc::ENODEV, "{op}: {err}");
            assert!(err.to_string().starts_with(&format!("{op} nlp-none: ")), "{err}");
        }

        let addr: IpAddr = "2001:db8::2".parse().unwrap();
        link::add_address("nlp-e", addr, 64).unwrap();
        let err = link::add_address("nlp-e", addr, 64).unwrap_err();
        assert_eq!(errno(&err), libc::EEXIST, "{err}");

        // The kernel explains this EINVAL in an extended ACK; it must reach the message.
        let err = link::add_veth("nlp-h", "nlp-i", Some(0), None).unwrap_err();
        assert_eq!(errno(&err), libc::EINVAL, "{err}");
        let inner = err.get_ref().unwrap().downcast_ref::<KernelError>().unwrap();
        assert_eq!(inner.extack.as_deref(), Some("Invalid number of transmit queues"));
        assert!(err.to_string().ends_with("(Invalid number of transmit queues)"), "{err}");
    });
}

/// A device's sysfs attributes are those of its own namespace's device:
/// written there, read back there, and the host's sysfs never sees them.
#[test]
fn device_attributes_in_another_namespace() {
    use ferry_sys::devattr;
    let ns = Netns::new();
    ns.run(|| link::add_veth("nla-a", "nla-b", None, None)).unwrap();
    let at = Some(ns.name.as_str());
    let old = devattr::replace(at, "nla-a", "gro_flush_timeout", "200000").unwrap();
    assert_eq!(old, "0");
    assert_eq!(devattr::read(at, "nla-a", "gro_flush_timeout").unwrap(), "200000");
    assert_eq!(devattr::read(at, "nla-b", "gro_flush_timeout").unwrap(), "0", "only the one device");
    assert!(devattr::read(None, "nla-a", "gro_flush_timeout").is_err(), "not a device of the host's namespace");
    devattr::write(at, "nla-a", "gro_flush_timeout", &old).unwrap();
    assert_eq!(devattr::read(at, "nla-a", "gro_flush_timeout").unwrap(), "0");
    assert_eq!(ns.run(|| link::link("lo")).unwrap().unwrap().kind, None, "lo has no kind");
}
