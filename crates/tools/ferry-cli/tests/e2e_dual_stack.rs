//! Dual stack, end to end on real sockets and real kernels:
//! - `ping` and `ping -6` answered by the responders (ARP and Neighbor
//!   Discovery, ICMP and ICMPv6 echo) behind a firewall whose rule file
//!   ends in `default deny`: the IPv6 echo it allows is answered, the
//!   IPv6 echo no rule allows is dropped and counted;
//! - IPv6 TCP (HTTP) through the eFW and the eLB under ferryd to both
//!   nginx backends, the segments captured on both sides and read by
//!   tshark, which finds every TCP checksum good after the eLB's
//!   rewrites (IPv6 has no header checksum: the pseudo-header is all).
//!
//! Needs root.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::chain::c;
use common::*;
use ferry_cli::sfc::{sfc_testbed, SfcChain, EDGE, SFC1_IPV6, VIP6};
use ferry_testbed::apps::{self, CurlOpts, Nginx, NginxOpts};
use ferry_wire::flow::{self, IpVersion};

const DUAL_BED: &str = r#"
name: e2e-dual
namespaces:
  - name: dclient
  - name: ddut
links:
  - a: { ns: dclient, dev: c0, mac: "02:00:00:00:06:01", addrs: ["10.0.6.1/24", "2001:db8:6::1/64", "2001:db8:6::99/64"] }
    b: { ns: ddut, dev: d0, mac: "02:00:00:00:06:02" }
"#;

/// The firewall's rules: ICMP echo from the client's IPv4 subnet and
/// ICMPv6 from its first IPv6 address; nothing else.
const RULES: &str = "allow src 10.0.6.0/24 proto icmp\nallow src 2001:db8:6::1 proto icmpv6\ndefault deny\n";

#[test]
fn ping_and_ping6_answered_and_ipv6_no_rule_allows_dropped() {
    if !privileged("dual_stack_ping") {
        return;
    }
    let tb = testbed(DUAL_BED, "e2e_dual_stack/ping.yaml");
    let dir = TempDir::new("dual-ping");
    let rules = dir.path("fw.rules");
    std::fs::write(&rules, RULES).unwrap();
    let rules = rules.display().to_string();
    let args = [
        "nf",
        "run",
        "--dev",
        "d0",
        "--json",
        "firewall",
        &rules,
        "--",
        "arp-responder",
        "10.0.6.2=02:00:00:00:06:02",
        "2001:db8:6::2=02:00:00:00:06:02",
        "--",
        "icmp-echo",
        "10.0.6.2",
        "2001:db8:6::2",
    ];
    let mut nf = Ferry::spawn(&tb, "ddut", &args);
    wait_attached(&tb, "ddut", "d0", &mut nf);
    let report = {
        let nf = nf;
        let (ok, out) = ping(&tb, "dclient", "10.0.6.2", 3);
        assert!(ok && out.contains(" 0% packet loss"), "ping:\n{out}");
        let ping6 = |from: &str, count: &str| {
            let args = ["-6", "-c", count, "-i", "0.2", "-W", "5", "-I", from, "2001:db8:6::2"];
            let out = tb.exec("dclient", "ping", args).output().expect("run ping -6");
            (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let (ok, out) = ping6("2001:db8:6::1", "3");
        assert!(ok && out.contains(" 0% packet loss"), "ping -6 from an allowed address:\n{out}");
        // The neighbor entry is there now: these echoes reach the firewall.
        let (ok, out) = ping6("2001:db8:6::99", "2");
        assert!(!ok && out.contains("100% packet loss"), "ping -6 from an address no rule allows:\n{out}");
        nf.stop_json()
    };
    let fw = nf_counters(&report, "firewall");
    let icmp = nf_counters(&report, "icmp-echo");
    let arp = nf_counters(&report, "arp-responder");
    for (name, c) in [("firewall", &fw), ("icmp-echo", &icmp), ("arp-responder", &arp)] {
        assert_partition(name, c);
    }
    assert_eq!(counter(&icmp, "tx"), 6, "3 pings and 3 pings -6 answered: {report:#}");
    assert!(counter(&fw, "drop_denied") >= 2, "the 2 echoes from ::99 denied: {report:#}");
    assert!(counter(&fw, "pass_not_ip") >= 1, "the kernel's ARP passed: {report:#}");
    assert!(counter(&arp, "tx") >= 2, "ARP and a neighbor solicitation answered: {report:#}");
    down_and_check(tb);
}

/// Received frames of IPv6 TCP on `sock` until `done` holds for them;
/// the frames.
fn capture(sock: &RawSock, what: &str, done: impl Fn(&[Vec<u8>]) -> bool) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let found = sock.recv_match(HANG_GUARD, |f| {
        if flow::parse(f).is_ok_and(|fl| fl.ip == Some(IpVersion::V6) && fl.proto == 6) {
            frames.push(f.to_vec());
        }
        done(&frames)
    });
    assert!(found.is_some(), "{what}: captured only {} frames", frames.len());
    frames
}

/// TCP segments with SYN set among `frames`.
fn syns(frames: &[Vec<u8>]) -> usize {
    frames
        .iter()
        .filter(|f| flow::parse(f).ok().and_then(|fl| f.get(fl.l4_offset? + 13)).is_some_and(|b| b & 2 != 0))
        .count()
}

/// tshark's reading of `frames`: (IPv6 source, destination, TCP checksum
/// status) per frame, with checksum validation on.
fn tshark_checksums(dir: &TempDir, name: &str, frames: &[Vec<u8>]) -> Vec<(String, String, String)> {
    let path = dir.path(name);
    let mut w = ferry_traffic::PcapWriter::create(&path, 0).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(f, i as u64).unwrap();
    }
    w.finish().unwrap();
    let out = std::process::Command::new("tshark")
        .args(["-n", "-o", "tcp.check_checksum:TRUE", "-T", "fields", "-e", "ipv6.src", "-e", "ipv6.dst"])
        .args(["-e", "tcp.checksum.status", "-r"])
        .arg(&path)
        .output()
        .expect("run tshark (apt install tshark)");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[1].to_string(), f.get(2).unwrap_or(&"").to_string())
        })
        .collect()
}

#[test]
fn ipv6_http_through_efw_and_elb_to_both_backends_with_good_checksums() {
    if !privileged("dual_stack_elb") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    let opts = |v6: &str| NginxOpts { also_listen: Some(v6.parse().unwrap()), ..NginxOpts::default() };
    let b1 = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", opts("[2001:db8:2::11]:80")).unwrap();
    let b2 = Nginx::start(&tb, "b2", "10.10.3.12:80".parse().unwrap(), "b2", opts("[2001:db8:3::12]:80")).unwrap();
    let chain = SfcChain::start(&tb, EDGE, SFC1_IPV6, None).expect("the IPv6 eFW -> eLB chain");
    let at_b1 = in_netns(tb.ns_name("b1"), || RawSock::open("e0"));
    let at_client = in_netns(tb.ns_name("client"), || RawSock::open("c0"));

    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..20 {
        let r = apps::curl_get(&tb, "client", &format!("http://[{VIP6}]/"), CurlOpts::default()).expect("GET the VIP");
        assert_eq!(r.status, 200);
        *seen.entry(r.body.trim().to_string()).or_default() += 1;
    }
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["backend b1", "backend b2"], "{seen:?}");
    let denied = tb
        .exec("client", "curl", ["-s", "-m", "2", "--interface", "2001:db8:66::2", &format!("http://[{VIP6}]/")])
        .status()
        .unwrap();
    assert!(!denied.success(), "the denied IPv6 subnet is dropped by the eFW");

    // Every connection b1 served arrived with its SYN; every one the
    // client opened got its SYN-ACK from the VIP.
    let to_b1 = capture(&at_b1, "segments at b1", |f| syns(f) >= seen["backend b1"]);
    let to_client = capture(&at_client, "segments at the client", |f| syns(f) >= 20);
    let dir = TempDir::new("dual-elb");
    for (name, frames, peer) in [("b1.pcap", &to_b1, "2001:db8:2::11"), ("client.pcap", &to_client, VIP6)] {
        let rows = tshark_checksums(&dir, name, frames);
        assert_eq!(rows.len(), frames.len(), "{name}: tshark read every frame");
        for (src, dst, status) in &rows {
            // checksum.status: 0 bad, 1 good, 2 unverified.
            assert_eq!(status, "1", "{name}: {src} -> {dst}: TCP checksum not good");
        }
        let peer: IpAddr = peer.parse().unwrap();
        let rewritten = rows.iter().filter(|(src, dst, _)| *src == peer.to_string() || *dst == peer.to_string());
        assert!(rewritten.count() >= 20.min(frames.len()), "{name}: the rewritten address on the wire");
    }
    let s = chain.rc.status().unwrap();
    assert!(c(&s, "fw", "deny") >= 1, "the denied subnet counted in the fast path: {s:?}");
    assert_eq!(c(&s, "lb", "new_conn"), 20, "every connection balanced in XDP: {s:?}");
    chain.stop().unwrap();
    drop((b1, b2));
    down_and_check(tb);
}
