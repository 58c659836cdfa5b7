//! The eNAT under ferryd on examples/testbeds/sfc.yaml: a NAT split as
//! P4SFC splits a partially offloadable NF. The client (10.10.1.2) reaches
//! the backends through public address 10.10.2.1; established mappings
//! are rewritten in XDP, each inside endpoint's first frame goes to the
//! eNAT's unprivileged process, which makes the mapping (both halves, by
//! the state library), translates the frame and hands it to dut's stack.
//! RFC 4787's endpoint-independent mapping and filtering are checked with
//! UDP sockets in the namespaces; TCP with curl to nginx.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use common::chain::*;
use common::*;
use ferry_chain::proto::Status;
use ferry_cli::chainctl;
use ferry_cli::sfc::sfc_testbed;
use ferry_testbed::apps::{self, CurlOpts, Nginx, NginxOpts};

const PUBLIC: Ipv4Addr = Ipv4Addr::new(10, 10, 2, 1);

fn chain(dut: &str, config: &str) -> String {
    format!(
        r#"
name: natc
domains: [ {{ name: main, frames: 2048, ring_size: 512 }} ]
ports:
  - {{ name: inside, netns: {dut}, netdev: d0 }}
  - {{ name: b1, netns: {dut}, netdev: d1 }}
  - {{ name: b2, netns: {dut}, netdev: d2 }}
kernel:
  - {{ name: stack, netns: {dut}, dev: fy-nat0, mac: "02:00:00:0a:01:01" }}
nfs:
  - {{ name: nat, domain: main, kind: enat, args: ["config={config}", "reply_ports=b1,b2"] }}
links:
  - {{ from: inside, to: nat }}
  - {{ from: nat, to: stack }}
"#
    )
}

/// A UDP socket bound to `addr` in namespace `ns`; reads give up after the
/// hang guard (never a pass/fail criterion: the payloads decide).
fn udp(ns: &str, addr: &str) -> UdpSocket {
    let addr: SocketAddrV4 = addr.parse().unwrap();
    let s = in_netns(ns, || UdpSocket::bind(addr)).unwrap_or_else(|e| panic!("bind {addr} in {ns}: {e}"));
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    s
}

fn recv(s: &UdpSocket) -> (String, SocketAddrV4) {
    let mut buf = [0u8; 64];
    let (n, from) = s.recv_from(&mut buf).expect("a datagram through the NAT");
    let std::net::SocketAddr::V4(from) = from else { panic!("an IPv4 peer") };
    (String::from_utf8_lossy(&buf[..n]).into_owned(), from)
}

#[test]
fn enat_maps_and_filters_independently_of_the_endpoint() {
    if !privileged("enat_chain") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    let b1_web = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", NginxOpts::default()).expect("nginx");
    let dir = TempDir::new("enat");
    let config = dir.path("nat.yaml");
    // Mappings expire 10 s after their last outbound frame: long enough
    // that no stall of a loaded machine ends one the test still uses.
    std::fs::write(&config, "nat:\n  public_ip: 10.10.2.1\n  ports: 20000-20099\n  idle_timeout_s: 10\n").unwrap();
    let (mut rc, _) = start(&dir, &chain(tb.ns_name("dut"), &config.display().to_string()));
    rc.wait_connected(HANG_GUARD).unwrap();
    // The slow path's socket takes frames once the NF's thread has filled
    // its fill ring (in its first loop).
    let st = wait_for("the eNAT's thread receiving", || {
        let s = rc.status().ok()?;
        s.nfs.iter().all(|n| n.rings.iter().all(|r| r.loops >= 2)).then_some(s)
    });
    let pid = pid_of(&st, "nat");
    assert_eq!(proc_status(pid, "CapEff:"), ["0000000000000000"], "the eNAT's process has no capability");

    let (client_ns, b1_ns, b2_ns) = (tb.ns_name("client"), tb.ns_name("b1"), tb.ns_name("b2"));
    let client = udp(client_ns, "10.10.1.2:5555");
    let b1 = udp(b1_ns, "10.10.2.11:7000");
    let b2 = udp(b2_ns, "10.10.3.12:7000");
    // Out: the first datagram makes the mapping in the slow path.
    client.send_to(b"one", "10.10.2.11:7000").unwrap();
    let (what, public) = recv(&b1);
    assert_eq!(what, "one");
    assert_eq!(*public.ip(), PUBLIC, "b1 sees the public address");
    assert!((20000..=20099).contains(&public.port()), "{public}");
    // Back: translated in XDP on d1.
    b1.send_to(b"two", public).unwrap();
    assert_eq!(recv(&client), ("two".into(), "10.10.2.11:7000".parse().unwrap()));
    // Endpoint-independent filtering: b2, which the client never sent to,
    // reaches the client through the mapping (translated on d2).
    b2.send_to(b"three", public).unwrap();
    assert_eq!(recv(&client), ("three".into(), "10.10.3.12:7000".parse().unwrap()));
    // Endpoint-independent mapping: to b2, the same public endpoint, and
    // this time in XDP (the mapping exists).
    client.send_to(b"four", "10.10.3.12:7000").unwrap();
    assert_eq!(recv(&b2), ("four".into(), public));

    // TCP: each connection's SYN makes a mapping; the rest is XDP.
    for _ in 0..10 {
        let r = apps::curl_get(&tb, "client", "http://10.10.2.11/", CurlOpts::default()).expect("GET through the NAT");
        assert_eq!((r.status, r.body.trim()), (200, "backend b1"));
    }
    let c = |s: &Status, name: &str| common::chain::c(s, "nat", name);
    // The process publishes its counters after each burst it handled:
    // wait for the one after the last slow-path frame.
    let s = wait_for("the eNAT's counters published", || {
        let s = rc.status().ok()?;
        let done = c(&s, "mappings_made") >= 11 && c(&s, "to_slow_path") >= 11;
        (done && c(&s, "rx_port") == c(&s, "to_kernel")).then_some(s)
    });
    assert!(c(&s, "mappings_made") >= 11 && c(&s, "to_slow_path") >= 11, "{s:?}");
    // One datagram and at least three frames per connection after its
    // SYN, each way, translated in XDP.
    assert!(c(&s, "rewritten") > 10 * 3, "{s:?}");
    assert!(c(&s, "reply_rewritten") > 10 * 3 + 1, "{s:?}");
    assert_eq!((c(&s, "malformed"), c(&s, "reply_malformed"), c(&s, "ports_exhausted")), (0, 0, 0), "{s:?}");
    // Every slow-path frame the process received went on to the stack.
    assert_eq!(c(&s, "rx_port"), c(&s, "to_kernel"), "{s:?}");

    // Idle mappings expire, both halves; a datagram to an expired public
    // endpoint no longer reaches the client, it is the stack's.
    let made = c(&s, "mappings_made");
    wait_until("the idle mappings to expire", || {
        rc.status().is_ok_and(|s| c(&s, "mappings") == 0 && c(&s, "mappings_expired") >= made)
    });
    let before = c(&rc.status().unwrap(), "reply_not_mapped");
    b2.send_to(b"five", public).unwrap();
    wait_until("the stray datagram counted", || rc.status().is_ok_and(|s| c(&s, "reply_not_mapped") > before));
    client.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(client.recv_from(&mut [0u8; 16]).is_err(), "an expired mapping lets nothing in");

    chainctl::remove(&rc.admin, "natc").expect("remove the chain");
    rc.shutdown().unwrap();
    drop(b1_web);
    down_and_check(tb);
}
