//! The hybrid NFs' fast paths (bpf/include/ferry_hybrid.h), as elements
//! of the stage pipeline: BPF_PROG_TEST_RUN tables. Each
//! test runs in a fresh network namespace with one device, dummy0
//! (10.9.0.1/24) and one neighbour (10.9.0.2), so the chain's end routes
//! frames for 10.9.0.2 out of that device and leaves every other
//! destination to the kernel: nothing depends on the host's routes.

mod common;

use std::net::Ipv4Addr;
use std::process::Command;

use aya::maps::HashMap;
use common::privileged;
use ferry_bpf::abi::{SlowMeta, SLOW_MISS};
use ferry_bpf::hybrid::*;
use ferry_bpf::{test_run, SLOT_MALFORMED};
use ferry_wire::{build_frame, verify_checksums, FiveTuple, FrameSpec, L4Proto};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
const CLIENT: [u8; 4] = [10, 10, 1, 2];
const VIP: [u8; 4] = [10, 10, 9, 9];
const BACKEND: [u8; 4] = [10, 9, 0, 2];
const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 9, 2];
const DUMMY_MAC: [u8; 6] = [2, 0, 0, 0, 9, 1];

/// A namespace with the dummy device; deleted on drop.
struct TestNs(String);

impl TestNs {
    fn new() -> TestNs {
        let name = format!("fyevnf{}-{}", std::process::id(), unique_suffix());
        let ip = |args: &[&str]| {
            let ok = Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false);
            assert!(ok, "ip {}", args.join(" "));
        };
        ip(&["netns", "add", &name]);
        let ns = TestNs(name);
        let n = ns.0.as_str();
        ip(&["-n", n, "link", "set", "lo", "up"]);
        // A router: bpf_fib_lookup refuses to forward otherwise.
        ip(&["netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // No dummy driver on every kernel: a veth pair with one end used.
        ip(&[
            "-n",
            n,
            "link",
            "add",
            "dummy0",
            "address",
            "02:00:00:00:09:01",
            "type",
            "veth",
            "peer",
            "name",
            "peer0",
        ]);
        ip(&["-n", n, "link", "set", "peer0", "up"]);
        ip(&["-n", n, "link", "set", "dummy0", "up"]);
        ip(&["-n", n, "addr", "add", "10.9.0.1/24", "dev", "dummy0"]);
        ip(&["-n", n, "neigh", "add", "10.9.0.2", "lladdr", "02:00:00:00:09:02", "dev", "dummy0"]);
        ns
    }

    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        ferry_sys::in_netns(Some(&self.0), f).expect("enter the test namespace")
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Unique within this process (the pid in the name covers other processes):
/// two tests running at once never pick the same namespace.
fn unique_suffix() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn frame(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: L4Proto) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 1, 2], dst_mac: [2, 0, 0, 0, 1, 1], frame_len: 80 };
    let t = FiveTuple { src_ip: src.into(), dst_ip: dst.into(), src_port: sport, dst_port: dport, proto };
    let mut f = vec![0u8; 80];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

fn ip_of(f: &[u8], offset: usize) -> Ipv4Addr {
    Ipv4Addr::new(f[offset], f[offset + 1], f[offset + 2], f[offset + 3])
}
fn src_of(f: &[u8]) -> (Ipv4Addr, u16) {
    (ip_of(f, 26), u16::from_be_bytes([f[34], f[35]]))
}
fn dst_of(f: &[u8]) -> (Ipv4Addr, u16) {
    (ip_of(f, 30), u16::from_be_bytes([f[36], f[37]]))
}

/// Test runs see frames arrive on the loopback device.
const LO: u32 = 1;

/// Runs `f` through `nf` alone (then the route element).
fn run(ev: &mut HybridPipeline, nf: HybridElement, f: &[u8]) -> (u32, Vec<u8>) {
    run_path(ev, &[nf], f)
}

/// Runs `f` through the hybrid path `path`, deployed as chain 0 for LO.
fn run_path(ev: &mut HybridPipeline, path: &[HybridElement], f: &[u8]) -> (u32, Vec<u8>) {
    ev.remove(LO).unwrap();
    ev.deploy(0, LO, &[], path, None).unwrap();
    let out = test_run(ev.program_fd().unwrap(), f, 1).unwrap();
    (out.action, out.data)
}

fn firewall() -> HybridPipeline {
    let mut ev = HybridPipeline::load().expect("load the stage pipeline (verifier)");
    ev.maps_mut().fw_set_subnet("10.10.66.0/24".parse().unwrap(), FwRule { action: FW_DENY, rule_id: 1 }).unwrap();
    ev.maps_mut().fw_set_port(6, 80, FwRule { action: FW_ALLOW, rule_id: 2 }).unwrap();
    ev.maps_mut().fw_set_port(17, 0, FwRule { action: FW_ALLOW, rule_id: 3 }).unwrap();
    ev
}

#[test]
fn firewall_table() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = firewall();
        let web = frame(CLIENT, 40000, VIP, 80, L4Proto::Tcp);
        let denied = frame([10, 10, 66, 2], 40000, VIP, 80, L4Proto::Tcp);
        let ssh = frame(CLIENT, 40000, VIP, 22, L4Proto::Tcp);
        let dns_to_backend = frame(CLIENT, 40000, BACKEND, 53, L4Proto::Udp);
        let mut arp = frame(CLIENT, 1, VIP, 1, L4Proto::Udp);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut short_ip = web.clone();
        short_ip.truncate(30);
        // (frame, expected action, output bytes equal to input?)
        let table: [(&str, &[u8], u32, bool); 6] = [
            ("subnet deny beats the port allow", &denied, XDP_DROP, true),
            ("port allow, no route here: kernel", &web, XDP_PASS, true),
            ("no fast rule: nftables decides", &ssh, XDP_PASS, true),
            ("protocol-wide allow, routed out", &dns_to_backend, XDP_REDIRECT, false),
            ("ARP is not the firewall's", &arp, XDP_PASS, true),
            ("truncated IPv4 header", &short_ip, XDP_DROP, true),
        ];
        for (what, f, action, same) in table {
            let (got, out) = run(&mut ev, HybridElement::Firewall, f);
            assert_eq!(got, action, "{what}");
            assert_eq!(out == f, same, "{what}: output bytes");
        }
        let c = ev.maps().counters(HybridElement::Firewall).unwrap();
        let count = |n: &str| c.iter().find(|(name, _)| *name == n).unwrap().1.packets;
        assert_eq!((count("allow"), count("deny"), count("to_kernel")), (2, 1, 1));
        // A malformed frame never reaches an element: the pipeline's parser
        // counts it, once for the whole path.
        assert_eq!((count("not_ip"), count("malformed")), (1, 0));
        assert_eq!(ev.maps().fw_rule_hits(1).unwrap().packets, 1);
        assert_eq!(ev.maps().fw_rule_hits(2).unwrap().packets, 1);
        assert_eq!(ev.verdicts().unwrap().packets[SLOT_MALFORMED], 1);
        let [routed, kernel] = ev.maps().route_counters().unwrap();
        assert_eq!((routed.packets, kernel.packets), (1, 1));
        // The routed frame: neighbour's MAC, the device's MAC, TTL - 1, valid checksum.
        let (_, out) = run(&mut ev, HybridElement::Firewall, &dns_to_backend);
        assert_eq!(&out[0..6], &BACKEND_MAC);
        assert_eq!(&out[6..12], &DUMMY_MAC);
        assert_eq!(out[22], dns_to_backend[22] - 1);
        assert!(verify_checksums(&out).unwrap());
    });
}

fn balancer() -> HybridPipeline {
    let mut ev = HybridPipeline::load().expect("load the stage pipeline (verifier)");
    ev.maps_mut().lb_set_vip(VIP.into(), 80, 6, 0).unwrap();
    ev.maps_mut().lb_set_vip(VIP.into(), 53, 17, 1).unwrap();
    ev.maps_mut().lb_set_backend(0, BACKEND.into(), 8080).unwrap();
    ev.maps_mut().lb_set_backend(1, Ipv4Addr::new(10, 9, 0, 3).into(), 8080).unwrap();
    ev.maps_mut().lb_set_ring(0, &[0; LB_RING]).unwrap();
    ev.maps_mut().lb_set_ring(1, &[LB_NO_BACKEND; LB_RING]).unwrap();
    ev
}

#[test]
fn balancer_table() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = balancer();
        let syn = frame(CLIENT, 40000, VIP, 80, L4Proto::Tcp);
        let (action, out) = run(&mut ev, HybridElement::Balancer, &syn);
        assert_eq!(action, XDP_REDIRECT, "DNAT to the backend, routed out of dummy0");
        assert_eq!(dst_of(&out), (BACKEND.into(), 8080));
        assert_eq!(src_of(&out), (CLIENT.into(), 40000));
        assert_eq!(&out[0..6], &BACKEND_MAC);
        assert!(verify_checksums(&out).unwrap(), "IP and TCP checksums after DNAT");

        let conns: HashMap<_, FlowTuple, LbConn> =
            HashMap::try_from(ev.maps().map_handle("ferry_lb_conns").unwrap()).unwrap();
        let flow = FlowTuple::new(Ipv4Addr::from(CLIENT), 40000, Ipv4Addr::from(VIP), 80, 6);
        assert_eq!(conns.get(&flow, 0).unwrap().backend, 0);

        // The reply half puts the VIP back as the source.
        let reply = frame(BACKEND, 8080, CLIENT, 40000, L4Proto::Tcp);
        let (action, out) = run(&mut ev, HybridElement::BalancerReply, &reply);
        assert_eq!(action, XDP_PASS, "no route to the client in this namespace");
        assert_eq!(src_of(&out), (VIP.into(), 80));
        assert!(verify_checksums(&out).unwrap(), "checksums after the reverse NAT");
        let stranger = frame(BACKEND, 8080, CLIENT, 40001, L4Proto::Tcp);
        assert_eq!(
            run(&mut ev, HybridElement::BalancerReply, &stranger).1,
            stranger,
            "untracked replies pass untouched"
        );

        // New weights: new flows go to backend 1, the tracked flow stays.
        ev.maps_mut().lb_set_ring(0, &[1; LB_RING]).unwrap();
        assert_eq!(dst_of(&run(&mut ev, HybridElement::Balancer, &syn).1).0, Ipv4Addr::from(BACKEND));
        let other = frame(CLIENT, 40001, VIP, 80, L4Proto::Tcp);
        assert_eq!(dst_of(&run(&mut ev, HybridElement::Balancer, &other).1).0, Ipv4Addr::new(10, 9, 0, 3));

        let not_vip = frame(CLIENT, 40000, VIP, 443, L4Proto::Tcp);
        assert_eq!(run(&mut ev, HybridElement::Balancer, &not_vip).1, not_vip);
        let no_backend = frame(CLIENT, 40000, VIP, 53, L4Proto::Udp);
        assert_eq!(run(&mut ev, HybridElement::Balancer, &no_backend).0, XDP_DROP);
        let count = |n: &str| ev.maps().counter(HybridElement::Balancer, n).unwrap();
        assert_eq!((count("new_conn"), count("tracked"), count("not_vip"), count("no_backend")), (2, 1, 1, 1));
        assert_eq!(ev.maps().lb_backend_load(0).unwrap().packets, 2);
        assert_eq!(ev.maps().lb_backend_load(1).unwrap().packets, 1);
    });
}

fn frame6(src: &str, sport: u16, dst: &str, dport: u16, proto: L4Proto) -> Vec<u8> {
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 1, 2], dst_mac: [2, 0, 0, 0, 1, 1], frame_len: 100 };
    let (src_ip, dst_ip) = (src.parse().unwrap(), dst.parse().unwrap());
    let t = FiveTuple { src_ip, dst_ip, src_port: sport, dst_port: dport, proto };
    let mut f = vec![0u8; 100];
    build_frame(&spec, &t, None, &mut f).unwrap();
    f
}

/// An IPv6 frame's endpoints: (source, destination) as text and ports.
fn endpoints6(f: &[u8]) -> ((String, u16), (String, u16)) {
    let t = ferry_wire::five_tuple(f).expect("an IPv6 TCP or UDP frame");
    ((t.src_ip.to_string(), t.src_port), (t.dst_ip.to_string(), t.dst_port))
}

/// IPv6 through the eFW and the eLB: subnet and port rules match IPv6;
/// the VIP's flows go to the IPv6 backend and back with the L4 checksum
/// valid over the new pseudo-header.
#[test]
fn ipv6_through_the_firewall_and_the_balancer() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = firewall();
        ev.maps_mut()
            .fw_set_subnet("2001:db8:66::/48".parse().unwrap(), FwRule { action: FW_DENY, rule_id: 4 })
            .unwrap();
        let web = frame6("2001:db8:1::2", 40000, "2001:db8:9::9", 80, L4Proto::Tcp);
        let denied = frame6("2001:db8:66::2", 40000, "2001:db8:9::9", 80, L4Proto::Tcp);
        let ssh = frame6("2001:db8:1::2", 40000, "2001:db8:9::9", 22, L4Proto::Tcp);
        assert_eq!(run(&mut ev, HybridElement::Firewall, &denied).0, XDP_DROP, "an IPv6 subnet rule");
        assert_eq!(run(&mut ev, HybridElement::Firewall, &ssh).0, XDP_PASS, "no fast rule: the kernel's");
        let (action, out) = run(&mut ev, HybridElement::Firewall, &web);
        assert_eq!((action, out == web), (XDP_PASS, true), "the port rule allows; no IPv6 route here: kernel");
        assert_eq!(ev.maps().fw_rule_hits(4).unwrap().packets, 1);

        let mut ev = balancer();
        ev.maps_mut().lb_set_vip("2001:db8:9::9".parse().unwrap(), 80, 6, 2).unwrap();
        ev.maps_mut().lb_set_backend(2, "2001:db8:2::11".parse().unwrap(), 8080).unwrap();
        ev.maps_mut().lb_set_ring(2, &[2; LB_RING]).unwrap();
        let (action, out) = run(&mut ev, HybridElement::Balancer, &web);
        assert_eq!(action, XDP_PASS, "DNAT to the backend; the kernel routes IPv6");
        assert_eq!(endpoints6(&out), (("2001:db8:1::2".into(), 40000), ("2001:db8:2::11".into(), 8080)));
        assert!(verify_checksums(&out).unwrap(), "the TCP checksum after an IPv6 DNAT");
        let reply = frame6("2001:db8:2::11", 8080, "2001:db8:1::2", 40000, L4Proto::Tcp);
        let (_, out) = run(&mut ev, HybridElement::BalancerReply, &reply);
        assert_eq!(endpoints6(&out).0, ("2001:db8:9::9".into(), 80), "the VIP back as the source");
        assert!(verify_checksums(&out).unwrap(), "the TCP checksum after the reverse NAT");
        let v4_vip_port_on_v6 = frame6("2001:db8:1::2", 40000, "::ffff:1.2.3.4", 80, L4Proto::Tcp);
        assert_eq!(
            run(&mut ev, HybridElement::Balancer, &v4_vip_port_on_v6).0,
            XDP_DROP,
            "IPv4-mapped on the wire: malformed"
        );
    });
}

#[test]
fn udp_without_checksum_keeps_none() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = balancer();
        ev.maps_mut().lb_set_ring(1, &[0; LB_RING]).unwrap();
        let mut f = frame(CLIENT, 5000, VIP, 53, L4Proto::Udp);
        f[40..42].copy_from_slice(&[0, 0]);
        let (_, out) = run(&mut ev, HybridElement::Balancer, &f);
        assert_eq!(dst_of(&out), (BACKEND.into(), 8080));
        assert_eq!(&out[40..42], &[0, 0], "a UDP frame without checksum gets none");
    });
}

#[test]
fn firewall_then_balancer_by_stage_tables() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = balancer();
        ev.maps_mut().fw_set_port(6, 80, FwRule { action: FW_ALLOW, rule_id: 2 }).unwrap();
        let both = [HybridElement::Firewall, HybridElement::Balancer];
        let (action, out) = run_path(&mut ev, &both, &frame(CLIENT, 40000, VIP, 80, L4Proto::Tcp));
        assert_eq!(action, XDP_REDIRECT);
        assert_eq!(dst_of(&out), (BACKEND.into(), 8080), "the balancer ran after the firewall");
        assert_eq!(ev.maps().counter(HybridElement::Firewall, "allow").unwrap(), 1);
        assert_eq!(ev.maps().counter(HybridElement::Balancer, "new_conn").unwrap(), 1);
        // Unchained again: the firewall is the last NF.
        let (_, out) = run(&mut ev, HybridElement::Firewall, &frame(CLIENT, 40001, VIP, 80, L4Proto::Tcp));
        assert_eq!(dst_of(&out), (VIP.into(), 80));
    });
}

#[test]
fn dpi_table() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = HybridPipeline::load().expect("load the stage pipeline (verifier)");
        let f = frame(CLIENT, 40000, BACKEND, 5201, L4Proto::Tcp);
        let (action, out) = run(&mut ev, HybridElement::Dpi, &f);
        assert_eq!(action, XDP_PASS, "no slow-path socket bound: the kernel gets it");
        // The one slow-path metadata of every fast path in front: reason
        // 3 (a table missed), chain 0, the eDPI, stage 0.
        let meta = SlowMeta::from_bytes(&out).unwrap();
        assert_eq!(meta, SlowMeta { reason: SLOW_MISS, chain: 0, nf: HybridElement::Dpi.id(), stage: 0 });
        assert_eq!(&out[16..], &f[..]);

        let mut bypass: HashMap<_, FlowTuple, DpiBypass> =
            HashMap::try_from(ev.maps().map_handle("ferry_dpi_bypass").unwrap()).unwrap();
        bypass
            .insert(
                FlowTuple::new(Ipv4Addr::from(CLIENT), 40000, Ipv4Addr::from(BACKEND), 5201, 6),
                DpiBypass::default(),
                0,
            )
            .unwrap();
        let (action, out) = run(&mut ev, HybridElement::Dpi, &f);
        assert_eq!(action, XDP_REDIRECT, "bypassed flows are routed straight out");
        assert_eq!(&out[0..6], &BACKEND_MAC);
        let rule =
            bypass.get(&FlowTuple::new(Ipv4Addr::from(CLIENT), 40000, Ipv4Addr::from(BACKEND), 5201, 6), 0).unwrap();
        assert_eq!((rule.packets, rule.bytes), (1, 80));
        assert!(rule.last_seen_ns > 0);

        let mut icmp = f.clone();
        icmp[23] = 1;
        assert_eq!(run(&mut ev, HybridElement::Dpi, &icmp).0, XDP_REDIRECT, "not inspected: routed on");
        let count = |n: &str| ev.maps().counter(HybridElement::Dpi, n).unwrap();
        assert_eq!((count("to_slow_path"), count("bypass"), count("not_inspected")), (1, 1, 1));
    });
}

#[test]
fn fragments_go_to_the_kernel_and_are_not_balanced() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = balancer();
        ev.maps_mut().fw_set_port(6, 80, FwRule { action: FW_ALLOW, rule_id: 2 }).unwrap();
        let mut first = frame(CLIENT, 40000, VIP, 80, L4Proto::Tcp);
        first[20] |= 0x20; // more fragments
        assert_eq!(run(&mut ev, HybridElement::Firewall, &first).0, XDP_PASS, "the kernel reassembles and decides");
        assert_eq!(ev.maps().counter(HybridElement::Firewall, "to_kernel").unwrap(), 1);
        let (_, out) = run(&mut ev, HybridElement::Balancer, &first);
        assert_eq!(dst_of(&out), (VIP.into(), 80), "a fragment is not rewritten");
        assert_eq!(ev.maps().counter(HybridElement::Balancer, "not_vip").unwrap(), 1);
    });
}

#[test]
fn nat_table() {
    if !privileged() {
        return;
    }
    const PUBLIC: [u8; 4] = [10, 9, 0, 1];
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = HybridPipeline::load().expect("load the stage pipeline (verifier)");
        let mut nat: HashMap<_, NatKey, NatEntry> =
            HashMap::try_from(ev.maps().map_handle("ferry_nat_map").unwrap()).unwrap();
        // The first frame of an inside endpoint: to the slow path, with the
        // slow-path metadata naming the eNAT in front. No socket is bound
        // here, so it is dropped: untranslated, it must not leave.
        let out_frame = frame(CLIENT, 40000, BACKEND, 80, L4Proto::Tcp);
        let (action, out) = run(&mut ev, HybridElement::Nat, &out_frame);
        assert_eq!(action, XDP_DROP);
        let meta = SlowMeta { reason: SLOW_MISS, chain: 0, nf: HybridElement::Nat.id(), stage: 0 };
        assert_eq!((SlowMeta::from_bytes(&out), &out[16..]), (Some(meta), &out_frame[..]));
        // The mapping the slow path makes, both halves.
        nat.insert(NatKey::new(CLIENT.into(), 40000, 6, NAT_OUT), NatEntry::new(PUBLIC.into(), 20000, 0), 0).unwrap();
        nat.insert(NatKey::new(PUBLIC.into(), 20000, 6, NAT_IN), NatEntry::new(CLIENT.into(), 40000, 0), 0).unwrap();
        let (action, out) = run(&mut ev, HybridElement::Nat, &out_frame);
        assert_eq!(action, XDP_REDIRECT, "translated, then routed to the backend");
        assert_eq!((src_of(&out), dst_of(&out)), ((PUBLIC.into(), 20000), (BACKEND.into(), 80)));
        assert!(verify_checksums(&out).unwrap(), "IP and TCP checksums after SNAT");
        let stamp = nat.get(&NatKey::new(CLIENT.into(), 40000, 6, NAT_OUT), 0).unwrap().last_seen_ns;
        assert!(stamp > 0, "a hit stamps the mapping");
        // Inbound: any remote endpoint may use the mapping (EIF).
        for remote in [(BACKEND, 80), ([10, 9, 0, 3], 5555)] {
            let back = frame(remote.0, remote.1, PUBLIC, 20000, L4Proto::Tcp);
            let (action, out) = run(&mut ev, HybridElement::NatReply, &back);
            assert_eq!(action, XDP_PASS, "no route to the client in this namespace");
            assert_eq!(dst_of(&out), (CLIENT.into(), 40000));
            assert!(verify_checksums(&out).unwrap(), "checksums after the reverse translation");
        }
        let unmapped = frame(BACKEND, 80, PUBLIC, 20001, L4Proto::Tcp);
        assert_eq!(
            run(&mut ev, HybridElement::NatReply, &unmapped),
            (XDP_PASS, unmapped.clone()),
            "not the NAT's: unchanged"
        );
        let udp = frame(CLIENT, 40000, BACKEND, 53, L4Proto::Udp);
        assert_eq!(
            &run(&mut ev, HybridElement::Nat, &udp).1[16..],
            &udp[..],
            "a mapping is per protocol: to the slow path"
        );
        let mut fragment = frame(CLIENT, 40001, BACKEND, 80, L4Proto::Tcp);
        fragment[20] = 0x20; // more fragments
        assert_eq!(run(&mut ev, HybridElement::Nat, &fragment).0, XDP_DROP, "a fragment never leaves untranslated");
        let mut arp = out_frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(run(&mut ev, HybridElement::Nat, &arp).0, XDP_PASS, "not IPv4 TCP/UDP: on unchanged");
        let count = |nf, n: &str| ev.maps().counter(nf, n).unwrap();
        let out_counts = ["rewritten", "to_slow_path", "not_natted", "fragment"].map(|n| count(HybridElement::Nat, n));
        assert_eq!(out_counts, [1, 2, 1, 1]);
        assert_eq!(
            (count(HybridElement::NatReply, "reply_rewritten"), count(HybridElement::NatReply, "reply_not_mapped")),
            (2, 1)
        );
    });
}

/// A control plane gets the maps only the data path writes read-only: it
/// reads its counters, and cannot forge them.
#[test]
fn control_planes_read_counters_through_read_only_fds() {
    if !privileged() {
        return;
    }
    let ns = TestNs::new();
    ns.run(|| {
        let mut ev = HybridPipeline::load().expect("load the stage pipeline (verifier)");
        let fds = ev.maps().fds(HybridElement::Firewall.control_maps()).unwrap();
        let names: Vec<(String, _)> = fds.into_iter().map(|(n, fd)| (n.to_string(), fd)).collect();
        let mut maps = HybridMaps::from_fds(names).unwrap();
        maps.fw_set_subnet("10.10.66.0/24".parse().unwrap(), FwRule { action: FW_DENY, rule_id: 1 })
            .expect("the rule table is the control plane's to write");
        let denied = frame([10, 10, 66, 7], 1000, BACKEND, 80, L4Proto::Tcp);
        assert_eq!(run(&mut ev, HybridElement::Firewall, &denied).0, XDP_DROP, "the rule it wrote is in force");
        assert_eq!(maps.counter(HybridElement::Firewall, "deny").unwrap(), 1, "it reads the counters");
        assert_eq!(maps.fw_rule_hits(1).unwrap().packets, 1);
        let mut stats: aya::maps::PerCpuArray<_, [u64; 2]> =
            aya::maps::PerCpuArray::try_from(maps.map_handle("ferry_hyb_stats").unwrap()).unwrap();
        let forged = aya::maps::PerCpuValues::try_from(vec![[0u64, 0]; aya::util::nr_cpus().unwrap()]).unwrap();
        match stats.set(1, forged, 0) {
            Err(aya::maps::MapError::SyscallError(e)) => {
                assert_eq!(e.io_error.raw_os_error(), Some(libc::EPERM), "{e}")
            }
            other => panic!("a read-only fd writes nothing: {other:?}"),
        }
    });
}
