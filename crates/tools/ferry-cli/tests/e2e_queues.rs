//! A receiving port covers its device's receive queues. Frames are sent
//! from each of the generator's four transmit queues (a veth hands a
//! frame to its peer's queue by the queue it was sent on, as a NIC's RSS
//! spreads flows), and every one is received by the NF or counted as
//! `no_socket` by the port's XDP program:
//!
//! * with a socket on every queue, the NF receives every frame;
//! * a port with fewer sockets than queues is refused at deploy, naming
//!   the file, line and field, unless it says `unowned_queues: kernel`;
//!   then what arrives on the other queues is counted and passed;
//! * a device that gains queues after deploy: frames on the new queues
//!   are counted and dropped, never silently passed to the kernel;
//! * a receiving port whose MTU lets in frames larger than a UMEM frame
//!   is refused (Ferry's sockets do not use AF_XDP multi-buffer).

mod common;

use common::chain::*;
use common::*;
use ferry_cli::chainctl::{self, RunningChain};

/// PORTS_TESTBED with four queues on each link.
fn queues_testbed() -> String {
    let four = |end: &str| format!("{end}\n    queues: 4");
    let (d0, s0) = (
        r#"b: { ns: dut, dev: d0, mac: "02:00:00:00:01:02" }"#,
        r#"b: { ns: sink, dev: s0, mac: "02:00:00:00:02:01" }"#,
    );
    let text = PORTS_TESTBED.replace(d0, &four(d0)).replace(s0, &four(s0));
    assert_eq!(text.matches("queues: 4").count(), 2, "PORTS_TESTBED's links changed: {text}");
    text
}

/// Frames sent from each of g0's queues.
const PER_QUEUE: u64 = 200;
/// The receive and fill rings of port in's sockets: one can hold every
/// frame of a run, so none is lost however long the NF is off its CPU.
const PORT_RING: u64 = 1024;
const _: () = assert!(4 * PER_QUEUE <= PORT_RING);

/// in -> fwd (`threads`) -> out, with `extra` on port in; fwd kept a
/// process (`offload: never`): its sockets are what the queues reach.
fn chain(name: &str, dut: &str, threads: u32, extra: &str) -> String {
    format!(
        r#"name: {name}
domains: [ {{ name: main, frames: 8192 }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0, queues: {threads}, rings: {{ rx: {PORT_RING}, fill: {PORT_RING} }}{extra} }}
  - {{ name: out, netns: {dut}, netdev: d1, queues: {threads} }}
nfs:
  - {{ name: fwd, domain: main, kind: fwd, offload: never, threads: {threads} }}
links:
  - {{ from: in, to: fwd }}
  - {{ from: fwd, to: out }}
"#
    )
}

/// Sends PER_QUEUE frames from each of g0's four queues.
fn send_on_every_queue(tb: &ferry_testbed::Testbed) {
    for q in ["0", "1", "2", "3"] {
        let count = PER_QUEUE.to_string();
        let args = ["gen", "xsk", "--dev", "g0", "--queues", q, "--count", &count, "--rate", "20000", "--json"];
        let report =
            Ferry::spawn(tb, "gen", &[&args[..], &["--dst-mac", "02:00:00:00:01:02"]].concat()).wait_json(HANG_GUARD);
        assert_eq!(u(&report, "/sent"), PER_QUEUE, "queue {q}: {report:#}");
    }
}

/// Waits until every frame sent is received by fwd or counted on port
/// in as having no socket; returns the (received, no_socket) split.
fn all_accounted(rc: &RunningChain, chain: &str) -> (u64, u64) {
    let sent = 4 * PER_QUEUE;
    wait_for("every frame received or counted", || {
        let s = chainctl::status(&rc.admin, chain).ok()?;
        let (got, counted) = (c(&s, "fwd", "rx_port"), chainctl::port_verdict(&s, "in", "no_socket"));
        assert!(got + counted <= sent, "more frames than were sent: {}", chainctl::status_table(&s));
        (got + counted == sent).then_some((got, counted))
    })
}

/// IP packets the kernel stack of `dut` took in (`Ip: InReceives` of its
/// /proc/net/snmp): what the XDP programs there passed to it. Nothing else
/// reaches that stack in this testbed (no addresses, IPv6 off).
fn kernel_received(tb: &ferry_testbed::Testbed) -> u64 {
    let out = tb.exec("dut", "cat", ["/proc/net/snmp"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
    let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
    let at = names.split_whitespace().position(|n| n == "InReceives").expect("InReceives");
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

fn ethtool_channels(tb: &ferry_testbed::Testbed, dev: &str, n: u32) {
    let n = n.to_string();
    let out = tb.exec("dut", "ethtool", ["-L", dev, "rx", &n, "tx", &n]).output().unwrap();
    assert!(out.status.success(), "ethtool -L {dev}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn every_frame_on_every_queue_is_received_or_counted() {
    if !privileged("every_queue") {
        return;
    }
    let tb = testbed(&queues_testbed(), "queues.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("queues");

    // A socket on each of d0's four queues: every frame reaches the NF.
    let (mut rc, _) = start(&dir, &chain("owned", &dut, 4, ""));
    rc.wait_connected(HANG_GUARD).expect("NFs connected");
    send_on_every_queue(&tb);
    assert_eq!(all_accounted(&rc, "owned"), (4 * PER_QUEUE, 0));
    assert_conserved(&rc);
    chainctl::remove(&rc.admin, "owned").expect("remove owned");

    // One socket on a four-queue device: refused where the file says so.
    let one = dir.path("one.yaml");
    std::fs::write(&one, chain("one", &dut, 1, "")).unwrap();
    let e = format!("{:#}", chainctl::deploy(&rc.admin, &one).unwrap_err());
    assert!(e.contains("one.yaml:4:") && e.contains("ports[0].queues: d0 receives on 4 queues"), "{e}");
    assert!(e.contains("threads: 4") && e.contains("unowned_queues: kernel"), "the error says the fixes: {e}");

    // A jumbo MTU on a receiving port: refused, saying why and the fix.
    let mtu = |m: &str| assert!(tb.exec("dut", "ip", ["link", "set", "d0", "mtu", m]).status().unwrap().success());
    mtu("9000");
    let jumbo = dir.path("jumbo.yaml");
    std::fs::write(&jumbo, chain("jumbo", &dut, 4, "")).unwrap();
    let e = format!("{:#}", chainctl::deploy(&rc.admin, &jumbo).unwrap_err());
    assert!(e.contains("ports[0].netdev: d0's MTU 9000") && e.contains("multi-buffer"), "{e}");
    mtu("1500");

    // Unless the other queues' frames are the kernel's: counted, passed.
    let shared = dir.path("shared.yaml");
    std::fs::write(&shared, chain("shared", &dut, 1, ", unowned_queues: kernel")).unwrap();
    chainctl::deploy(&rc.admin, &shared).expect("deploy shared");
    wait_until("shared connected", || {
        chainctl::status(&rc.admin, "shared").is_ok_and(|s| s.nfs.iter().all(|n| n.connected))
    });
    let kernel_before = kernel_received(&tb);
    send_on_every_queue(&tb);
    let (got, counted) = all_accounted(&rc, "shared");
    assert!(got >= PER_QUEUE && counted >= PER_QUEUE, "queue 0 to the NF, the others counted: {got} {counted}");
    wait_until("the counted frames in the kernel's stack", || kernel_received(&tb) - kernel_before == counted);
    chainctl::remove(&rc.admin, "shared").expect("remove shared");

    // A device that gains queues after deploy: their frames are counted
    // and dropped, not handed to the kernel.
    ethtool_channels(&tb, "d0", 1);
    let grown = dir.path("grown.yaml");
    std::fs::write(&grown, chain("grown", &dut, 1, "")).unwrap();
    chainctl::deploy(&rc.admin, &grown).expect("deploy grown on a one-queue d0");
    wait_until("grown connected", || {
        chainctl::status(&rc.admin, "grown").is_ok_and(|s| s.nfs.iter().all(|n| n.connected))
    });
    ethtool_channels(&tb, "d0", 4);
    let kernel_before = kernel_received(&tb);
    send_on_every_queue(&tb);
    let (got, counted) = all_accounted(&rc, "grown");
    let s = chainctl::status(&rc.admin, "grown").unwrap();
    eprintln!("{}", chainctl::status_table(&s));
    assert!(got >= PER_QUEUE && counted >= PER_QUEUE, "{}", chainctl::status_table(&s));
    assert_eq!(kernel_received(&tb), kernel_before, "nothing went to the kernel: {}", chainctl::status_table(&s));
    rc.shutdown().unwrap();
    down_and_check(tb);
}
