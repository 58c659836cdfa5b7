//! A throwaway network namespace holding one veth pair, for AF_XDP tests.

use std::os::fd::AsRawFd;

/// One namespace holding the veth pair `xa` <-> `xb`, built by the testbed
/// crate: unique name, torn down on drop, and by its reaper process if the
/// test process is killed.
pub struct VethNs {
    pub name: String,
    _testbed: ferry_testbed::Testbed,
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

impl VethNs {
    /// Creates the namespace with `queues` queues on each veth end. IPv6 is
    /// off: its router and multicast-listener messages would land in the
    /// sockets under test between the frames the tests send.
    pub fn new(tag: &str, queues: u32) -> VethNs {
        let yaml = format!(
            r#"
name: xsk-{tag}
namespaces:
  - name: x
    sysctls: {{ net.ipv6.conf.all.disable_ipv6: "1" }}
links:
  - a: {{ ns: x, dev: xa, mac: "02:00:00:00:00:0a" }}
    b: {{ ns: x, dev: xb, mac: "02:00:00:00:00:0b" }}
    queues: {queues}
"#
        );
        let spec = ferry_testbed::TestbedSpec::from_yaml_str(&yaml, "veth test").expect("valid spec");
        let testbed = ferry_testbed::up(&spec).expect("testbed up");
        VethNs { name: testbed.ns_name("x").to_string(), _testbed: testbed }
    }

    /// Moves the calling thread into the namespace (network namespaces are
    /// per thread, so tests do this on a thread of their own).
    pub fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
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
