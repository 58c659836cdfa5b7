//! Placement must not change behaviour (P4SFC §III-D, on XDP). The chain
//! in -> firewall -> flow monitor -> IPS -> out runs twice on real veth
//! devices: every NF `offload: never` (three processes), then placed by
//! the orchestrator (firewall and monitor in XDP on the ingress device,
//! the IPS a process fed by the pipeline's AF_XDP hand-off). The same
//! frames go in, allowed, denied, malformed, ARP, IPv6, fragments,
//! a payload the IPS drops, and the same frames, in the same order, come
//! out of both; both equal what the NFs decide in this process. So do
//! in -> firewall -> monitor -> out (all in XDP when placed) and P4SFC's
//! own order, in -> IPS -> monitor -> firewall -> out (the monitor and
//! firewall after the IPS, post-server, on the loop device in front of
//! out).

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use common::chain::*;
use common::*;
use ferry_chain::proto::Status;
use ferry_cli::chainctl;
use ferry_nf::firewall_rules::parse_fw_rules;
use ferry_nf::ips_rules::parse_rules;
use ferry_nf::{Firewall, FlowMonitor, Ips, L2Fwd, Lookup, PacketNf, Verdict};
use ferry_wire::nat::{Endpoint, Headers, Side, Transport};
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

const FW_RULES: &str = "deny proto udp dport 53
allow proto tcp dport 80
deny proto tcp
allow src 10.0.0.0/30
default deny
";
const IPS_RULES: &str = "drop tcp any any -> any 80 (msg:\"attack\"; content:\"attack\"; sid:1;)\n";

/// Waits for frames this long at most: a hang guard, never a pass/fail
/// criterion (the counters decide).
const HANG_GUARD: Duration = Duration::from_secs(20);

/// The NFs of a chain, in path order from in to out.
const FW_MON_IPS: &[&str] = &["fw", "mon", "ips"];
/// In XDP entirely when placed.
const FW_MON: &[&str] = &["fw", "mon"];
/// P4SFC's own order: the IPS first, the monitor and firewall after the
/// last process (post-server).
const IPS_MON_FW: &[&str] = &["ips", "mon", "fw"];
/// A firewall, then the two forwarders (l2fwd last: it counts `rx` as a
/// process and in XDP alike).
const FW_FWD_L2: &[&str] = &["fw", "fwd", "l2"];
/// P4SFC's whole chain: its NAT last, split (its mappings rewritten in
/// XDP with the monitor and firewall, its misses to its process).
const IPS_MON_FW_NAT: &[&str] = &["ips", "mon", "fw", "nat"];
/// A hybrid eFW, then the IPS process: the eFW's fast path in XDP on d0
/// hands what it allows to the IPS's sockets.
const EFW_IPS: &[&str] = &["efw", "ips"];
/// A firewall and a NAT with no process before it: both split over XDP
/// on d0 and the NAT's process (pre-server).
const FW_NAT: &[&str] = &["fw", "nat"];
/// The eFW's rules: a denied subnet, then TCP and UDP allowed; what no
/// rule decides (ICMP, ARP, IPv6, fragments) goes to dut's stack.
const EFW_CONFIG: &str = "firewall:
  rules:
    - { src: 10.0.0.4/30, action: deny }
    - { proto: tcp, action: allow }
    - { proto: udp, action: allow }
";
/// The NAT's public address and first port (`nat.yaml`).
const NAT_PUBLIC: [u8; 4] = [10, 9, 0, 254];
const NAT_FIRST_PORT: u16 = 20000;
const NAT_CONFIG: &str = "nat:\n  public_ip: 10.9.0.254\n  ports: 20000-29999\n  idle_timeout_s: 300\n";

/// The chain in -> `order` -> out, every NF with `offload: {offload}`.
fn chain(dut: &str, dir: &TempDir, offload: &str, order: &[&str]) -> String {
    let (fw, ips) = (dir.path("fw.rules"), dir.path("ips.rules"));
    let nf = |name: &&str| match *name {
        "fw" => format!(
            "  - {{ name: fw, domain: main, kind: firewall, args: [\"{}\"], offload: {offload} }}\n",
            fw.display()
        ),
        "mon" => format!("  - {{ name: mon, domain: main, kind: flow-monitor, offload: {offload} }}\n"),
        "fwd" => format!("  - {{ name: fwd, domain: main, kind: fwd, offload: {offload} }}\n"),
        "l2" => format!("  - {{ name: l2, domain: main, kind: l2fwd, offload: {offload} }}\n"),
        "efw" => format!(
            "  - {{ name: efw, domain: main, kind: efw, args: [\"config={}\"] }}\n",
            dir.path("efw.yaml").display()
        ),
        "nat" => format!(
            "  - {{ name: nat, domain: main, kind: enat, args: [\"config={}\"], offload: {offload} }}\n",
            dir.path("nat.yaml").display()
        ),
        _ => {
            format!("  - {{ name: ips, domain: main, kind: ips, args: [\"{}\"], offload: {offload} }}\n", ips.display())
        }
    };
    let nodes: Vec<&str> = std::iter::once("in").chain(order.iter().copied()).chain(["out"]).collect();
    let links: String = nodes.windows(2).map(|w| format!("  - {{ from: {}, to: {} }}\n", w[0], w[1])).collect();
    format!(
        r#"
name: sfc
domains: [ {{ name: main, frames: 2048, ring_size: 512 }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
{}links:
{links}"#,
        order.iter().map(nf).collect::<String>()
    )
}

fn frame(t: FiveTuple, len: usize, payload: &[u8]) -> Vec<u8> {
    let (src_mac, dst_mac) = ([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 1]);
    let mut f = vec![0u8; len];
    let n = build_frame(&FrameSpec { src_mac, dst_mac, frame_len: len }, &t, None, &mut f).expect("a frame");
    f.truncate(n);
    let at = ferry_wire::stamp_offset(t.version(), t.proto);
    f[at..at + payload.len()].copy_from_slice(payload);
    f
}

/// An IPv6 flow from 2001:db8::`src` to 2001:db8:9::1.
fn tuple6(src: u16, proto: L4Proto, sport: u16, dport: u16) -> FiveTuple {
    let a = |s: String| s.parse().expect("an IPv6 address");
    let (src_ip, dst_ip) = (a(format!("2001:db8::{src:x}")), a("2001:db8:9::1".to_string()));
    FiveTuple { src_ip, dst_ip, src_port: sport, dst_port: dport, proto }
}

fn tuple(src: u8, proto: L4Proto, sport: u16, dport: u16) -> FiveTuple {
    FiveTuple { src_ip: [10, 0, 0, src].into(), dst_ip: [10, 9, 0, 1].into(), src_port: sport, dst_port: dport, proto }
}

/// The input: every kind of frame the NFs tell apart. (Not 802.1Q tags:
/// veth moves such a tag sent over AF_PACKET out of the frame into the
/// skb's metadata, so neither placement ever sees it; the parser tests in
/// ferry-bpf and ferry-place cover tagged frames. An 802.1ad tag stays.)
fn input() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..48u16 {
        let dport = [53, 9, 80, 443][usize::from(i % 4)];
        let proto = if i % 3 == 0 { L4Proto::Tcp } else { L4Proto::Udp };
        v.push(frame(tuple(1 + (i % 5) as u8, proto, 1000 + i, dport), 64 + usize::from(i), b""));
    }
    v.push(frame(tuple(1, L4Proto::Tcp, 2000, 80), 128, b"GET /attack HTTP/1.1"));
    v.push(frame(tuple(1, L4Proto::Tcp, 2001, 80), 128, b"GET /index HTTP/1.1"));
    // IPv6: the same rules (a rule without a prefix matches both
    // versions, the default denies IPv6 too), the same IPS.
    v.push(frame(tuple6(1, L4Proto::Tcp, 2100, 80), 128, b"GET /attack HTTP/1.1"));
    v.push(frame(tuple6(1, L4Proto::Tcp, 2101, 80), 128, b"GET /index HTTP/1.1"));
    v.push(frame(tuple6(2, L4Proto::Udp, 2102, 9), 80, b""));
    v.push(frame(tuple6(3, L4Proto::Icmp, 7, 0), 80, b""));
    let mut qinq6 = frame(tuple6(4, L4Proto::Tcp, 2103, 80), 128, b"GET /index HTTP/1.1");
    qinq6.splice(12..12, [0x88, 0xa8, 0x00, 0x06, 0x81, 0x00, 0x00, 0x07]);
    v.push(qinq6);
    v.push(frame(tuple(2, L4Proto::Icmp, 0, 0), 64, b""));
    let mut arp = frame(tuple(1, L4Proto::Udp, 1, 9), 60, b"");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    v.push(arp);
    let mut ipv6 = vec![0u8; 14 + 40 + 16];
    ipv6[..12].copy_from_slice(&[2, 0, 0, 0, 2, 1, 2, 0, 0, 0, 1, 1]);
    ipv6[12..16].copy_from_slice(&[0x86, 0xdd, 0x60, 0]);
    ipv6[14 + 4..14 + 8].copy_from_slice(&[0, 16, 17, 64]);
    ipv6[54..58].copy_from_slice(&[0x03, 0xe8, 0x00, 0x09]);
    ipv6[58..60].copy_from_slice(&[0, 16]);
    v.push(ipv6);
    let mut later_fragment = frame(tuple(1, L4Proto::Udp, 3000, 9), 64, b"");
    later_fragment[14 + 7] = 0x10;
    v.push(later_fragment);
    // A first fragment: more fragments follow, and its UDP length covers
    // the whole datagram.
    let mut first_fragment = frame(tuple(1, L4Proto::Udp, 3001, 9), 64, b"");
    first_fragment[14 + 6] = 0x20;
    first_fragment[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&1000u16.to_be_bytes());
    let mut qinq = frame(tuple(1, L4Proto::Udp, 3002, 9), 64, b"");
    qinq.splice(12..12, [0x88, 0xa8, 0x00, 0x05]);
    v.push(first_fragment);
    v.push(qinq);
    let mut udp_past_total = frame(tuple(1, L4Proto::Udp, 3003, 9), 64, b"");
    udp_past_total[14 + 3] = 24;
    v.push(udp_past_total);
    let mut bad_version = frame(tuple(1, L4Proto::Udp, 3004, 9), 64, b"");
    bad_version[14] = 0x55;
    v.push(bad_version);
    v.push(frame(tuple(1, L4Proto::Udp, 3005, 9), 64, b"")[..40].to_vec());
    v
}

/// What the NFs, run here in `order`, let through, and how many frames
/// reach the last one.
fn expected(input: &[Vec<u8>], order: &[&str]) -> (Vec<Vec<u8>>, u64) {
    let mut fw = Firewall::new(parse_fw_rules(FW_RULES).unwrap(), Lookup::BitVector);
    let mut mon = FlowMonitor::new();
    let mut ips = Ips::new(parse_rules(IPS_RULES).unwrap());
    let mut nat = NatModel::default();
    let (mut out, mut last_rx) = (Vec::new(), 0);
    'frames: for f in input {
        let mut f = f.clone();
        for (i, name) in order.iter().enumerate() {
            if i + 1 == order.len() {
                last_rx += 1;
            }
            if *name == "nat" {
                if !nat.process(&mut f) {
                    continue 'frames;
                }
                continue;
            }
            if *name == "efw" {
                if !efw_allows(&f) {
                    continue 'frames;
                }
                continue;
            }
            // fwd passes every frame on unchanged; l2fwd swaps its MACs
            // (its Tx) and, having an out-link, sends it on.
            if *name == "fwd" {
                continue;
            }
            if *name == "l2" {
                if L2Fwd::new().process(&mut f) != Verdict::Tx {
                    continue 'frames;
                }
                continue;
            }
            let nf: &mut dyn PacketNf = match *name {
                "fw" => &mut fw,
                "mon" => &mut mon,
                _ => &mut ips,
            };
            if nf.process(&mut f) != Verdict::Pass {
                continue 'frames;
            }
        }
        out.push(f);
    }
    (out, last_rx)
}

/// Whether the eFW (`EFW_CONFIG`) sends `f` on down the chain: a fast
/// rule allows it. Malformed frames never reach it; what it denies is
/// dropped, and what no rule decides goes to the stack.
fn efw_allows(f: &[u8]) -> bool {
    let Ok(flow) = ferry_wire::flow::parse(f) else { return false };
    let denied = flow.src_v4().is_some_and(|a| a.octets()[..3] == [10, 0, 0] && (4..8).contains(&a.octets()[3]));
    flow.ip.is_some() && !flow.fragment && !denied && [6, 17].contains(&flow.proto)
}

/// What the NAT does, by RFC 4787's endpoint-independent mapping: each
/// inside endpoint of a protocol gets the next public port, in the order
/// endpoints first appear; frames that are not IPv4 TCP/UDP go on
/// unchanged, fragments are dropped. False: dropped.
#[derive(Default)]
struct NatModel {
    ports: std::collections::HashMap<(Transport, Endpoint), u16>,
    next: std::collections::HashMap<Transport, u16>,
}

impl NatModel {
    fn process(&mut self, f: &mut [u8]) -> bool {
        let Ok(flow) = ferry_wire::flow::parse(f) else { return false };
        if !(flow.is_ipv4() && [6, 17].contains(&flow.proto)) {
            return true;
        }
        let Ok(h) = Headers::parse(f) else { return false };
        let next = self.next.entry(h.transport).or_insert(NAT_FIRST_PORT);
        let port = *self.ports.entry((h.transport, h.src)).or_insert_with(|| {
            *next += 1;
            *next - 1
        });
        h.rewrite(f, Side::Source, Endpoint { ip: NAT_PUBLIC.into(), port });
        true
    }
}

/// Every NF process can take frames: connected (its sockets registered)
/// and past its second loop (its fill rings filled in the first), so a
/// frame that comes now is not dropped for want of a buffer.
fn receiving(st: &Status) -> bool {
    st.nfs.iter().all(|n| n.connected && !n.rings.is_empty() && n.rings.iter().all(|r| r.loops >= 2))
}

/// NF `nf`'s counter `name`, as a process or in XDP.
fn count(st: &Status, nf: &str, name: &str) -> u64 {
    let xdp = st.offloaded.iter().filter(|n| n.name == nf).flat_map(|n| n.counters.iter());
    c(st, nf, name) + xdp.filter(|(k, _)| k == name).map(|(_, v)| v).sum::<u64>()
}

/// Runs the chain in -> `order` -> out with every NF's `offload:` set to
/// `offload`, sends `input` into d0 and returns what leaves d1, in order,
/// with the status once the chain's last NF has counted the `last_rx`
/// frames it gets, and how many loop-device ends ferryd had made in d1's
/// namespace (all gone once the chain is removed).
fn run(offload: &str, order: &[&str], input: &[Vec<u8>], want: usize, last_rx: u64) -> (Vec<Vec<u8>>, Status, usize) {
    let tb = testbed(PORTS_TESTBED, "e2e_placement/ports.yaml");
    let dut = tb.ns_name("dut").to_string();
    let (gen_ns, sink_ns) = (tb.ns_name("gen").to_string(), tb.ns_name("sink").to_string());
    let dir = TempDir::new("place");
    std::fs::write(dir.path("fw.rules"), FW_RULES).unwrap();
    std::fs::write(dir.path("ips.rules"), IPS_RULES).unwrap();
    std::fs::write(dir.path("nat.yaml"), NAT_CONFIG).unwrap();
    std::fs::write(dir.path("efw.yaml"), EFW_CONFIG).unwrap();
    let (rc, _) = start(&dir, &chain(&dut, &dir, offload, order));
    wait_until("every NF process receiving", || rc.status().is_ok_and(|s| receiving(&s)));
    let (ready_tx, ready_rx) = mpsc::channel();
    let got = std::thread::scope(|s| {
        let listener = s.spawn(|| {
            in_netns(&sink_ns, move || {
                let sock = RawSock::open("s0");
                ready_tx.send(()).unwrap();
                let mut got = Vec::new();
                while got.len() < want {
                    match sock.recv_match(HANG_GUARD, |_| true) {
                        Some(f) => got.push(f),
                        None => break,
                    }
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        in_netns(&gen_ns, || {
            let sock = RawSock::open("g0");
            for f in input {
                sock.send(f);
            }
        });
        listener.join().unwrap()
    });
    // The last NF counted every frame it was handed: nothing else can come.
    // (A NAT counts no `rx`: the NF before it.)
    let last = order.iter().rev().find(|n| **n != "nat").expect("an NF");
    let st = wait_for(&format!("{last} counted every frame it was handed"), || {
        let st = rc.status().ok()?;
        (count(&st, last, "rx") == last_rx).then_some(st)
    });
    // A NAT's process publishes its counters (its fast path's among them)
    // on its own wake-ups: wait until they account for every frame the
    // firewall before it passed, in XDP or in the process.
    let st = match order.contains(&"nat") {
        false => st,
        true => wait_for("the NAT's counters account for every frame", || {
            let st = rc.status().ok()?;
            let sum = |names: &[&str]| names.iter().map(|n| c(&st, "nat", n)).sum::<u64>();
            let xdp = sum(&["rewritten", "to_slow_path", "not_natted", "fragment", "malformed"]);
            let process = sum(&["process_translated", "process_not_natted", "process_refused"]);
            let done = match st.offloaded.iter().any(|n| n.name == "fw") {
                // Split: the firewall's element passed what the NAT's saw,
                // and the process handled every miss.
                true => {
                    xdp == count(&st, "fw", "pass")
                        && c(&st, "nat", "process_translated") == c(&st, "nat", "to_slow_path")
                }
                // Whole: the process handled all the firewall sent it.
                false => process == c(&st, "nat", "rx_ring") && c(&st, "nat", "rx_ring") == c(&st, "fw", "to_nf"),
            };
            done.then_some(st)
        }),
    };
    // The eFW's control plane publishes its counters on its own wake-ups:
    // wait until they account for every frame the NF after it got.
    let st = match order.iter().position(|n| *n == "efw") {
        None => st,
        Some(i) => wait_for("the eFW's counters published", || {
            let st = rc.status().ok()?;
            (c(&st, "efw", "allow") == count(&st, order[i + 1], "rx")).then_some(st)
        }),
    };
    // A monitor process writes its flows to the table ferryd reads every
    // 100 ms: wait until they hold every frame it passed.
    let st = match st.nfs.iter().any(|n| n.name == "mon") {
        false => st,
        true => wait_for("the monitor process's flows exported", || {
            let st = rc.status().ok()?;
            let mon = st.nfs.iter().find(|n| n.name == "mon")?;
            (mon.flows.iter().map(|f| f.packets).sum::<u64>() == c(&st, "mon", "pass")).then_some(st)
        }),
    };
    eprintln!("{offload}:\n{}", chainctl::status_table(&st));
    // The XDP NFs' counters are in the metrics too, as `chain show` has them.
    let addr = chainctl::metrics_addr(&rc.admin).unwrap().expect("ferryd serves metrics");
    let (_, metrics) = http_get(&addr, "/metrics");
    for n in &st.offloaded {
        for (name, v) in &n.counters {
            let line = format!(
                "ferry_xdp_nf_counter_total{{chain=\"sfc\",nf=\"{}\",port=\"{}\",name=\"{name}\"}} {v}\n",
                n.name, n.port
            );
            assert!(metrics.contains(&line), "{line} in the metrics:\n{metrics}");
        }
    }
    assert_conserved(&rc);
    // The NFs that read a file apply a reload of it: the eFW, the NAT,
    // split or whole, and the firewall and IPS where they run as
    // processes (in XDP they are no process).
    let mut configured: Vec<&str> =
        st.nfs.iter().map(|n| n.name.as_str()).filter(|n| ["nat", "efw", "fw", "ips"].contains(n)).collect();
    configured.sort();
    if !configured.is_empty() {
        let outcomes = chainctl::reload(&rc.admin, "sfc").expect("reload");
        let mut applied: Vec<&str> =
            outcomes.iter().filter(|r| r.outcome == "applied").map(|r| r.nf.as_str()).collect();
        applied.sort();
        assert_eq!(applied, configured, "{outcomes:?}");
    }
    let loops = loop_devices(&tb).len();
    // Removing a chain returns once its ports are detached.
    chainctl::remove(&rc.admin, "sfc").expect("remove the chain");
    assert_eq!(loop_devices(&tb), Vec::<String>::new(), "removing the chain removed its loop devices");
    rc.shutdown().unwrap();
    down_and_check(tb);
    (got, st, loops)
}

/// A cost model that makes XDP on a loop device dearer than processes.
const DEAR_XDP: &str = r#"{"loop_crossing_ns": 1000, "xdp_stage_ns": 1000, "fused_stage_ns": 10, "process_hop_ns": 10,
"origin": "a test model"}"#;

/// ferryd places by the cost model it is given, and `chain check` with
/// the same model says the same: the NFs after the IPS run as processes,
/// and no loop device is made.
#[test]
fn ferryd_places_by_the_cost_model_it_is_given() {
    if !privileged("placement_by_cost") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "e2e_placement/ports.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("by-cost");
    std::fs::write(dir.path("fw.rules"), FW_RULES).unwrap();
    std::fs::write(dir.path("ips.rules"), IPS_RULES).unwrap();
    let (file, model) = (dir.path("sfc.yaml"), dir.path("model.json"));
    std::fs::write(&file, chain(&dut, &dir, "auto", IPS_MON_FW)).unwrap();
    std::fs::write(&model, DEAR_XDP).unwrap();
    let out = std::process::Command::new(FERRY)
        .args(["chain", "check", "--explain", "--cost-model"])
        .args([&model, &file])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(
            "cost after ips to port out (mon -> fw): XDP on a loop device 3000 ns, fused: cannot, processes 40 ns"
        ) && text.contains("processes of their own (cost model: a test model)"),
        "{text}"
    );
    let placing = chainctl::Placing::ByCost(&model);
    let rc = chainctl::start_placing(&file, &dir.path("ferryd.sock"), false, placing).expect("ferryd up");
    let st = rc.status().unwrap();
    let mut names: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["fw", "ips", "mon"], "every NF a process");
    assert_eq!(loop_devices(&tb), Vec::<String>::new(), "no loop device");
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// The devices ferryd made in the dut namespace for post-server parts.
fn loop_devices(tb: &ferry_testbed::Testbed) -> Vec<String> {
    let out = tb.exec("dut", "ip", ["-o", "link", "show"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().filter_map(|l| l.split(": ").nth(1)).filter(|n| n.starts_with("fyl")).map(str::to_string).collect()
}

#[test]
fn auto_placement_sends_out_the_same_frames_as_all_processes() {
    if !privileged("placement") {
        return;
    }
    let input = input();
    let (want, ips_rx) = expected(&input, FW_MON_IPS);
    assert!(want.len() >= 10 && want.len() + 10 < input.len(), "the input exercises both ways: {}", want.len());

    let (never, st, _) = run("never", FW_MON_IPS, &input, want.len(), ips_rx);
    assert_eq!(st.nfs.len(), 3, "three processes");
    assert!(st.offloaded.is_empty());
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let mut flows_never = st.nfs.iter().find(|n| n.name == "mon").unwrap().flows.clone();

    let (auto, st, _) = run("auto", FW_MON_IPS, &input, want.len(), ips_rx);
    let processes: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(processes, ["ips"], "the firewall and the monitor run in XDP");
    let offloaded: Vec<&str> = st.offloaded.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(offloaded, ["fw", "mon"]);
    assert_eq!(auto, never, "placed in XDP: the same frames, in the same order");
    // Malformed frames never reach an element; every other frame is
    // counted by the firewall, and what it passes by the monitor.
    let (fw, mon) = (&st.offloaded[0], &st.offloaded[1]);
    let n = |s: &ferry_chain::proto::OffloadedStatus, k: &str| {
        s.counters.iter().find(|(name, _)| name == k).map(|(_, v)| *v).unwrap()
    };
    let malformed = st.ports.iter().find(|p| p.name == "in").unwrap().verdicts.iter().find(|v| v.0 == "malformed");
    assert_eq!(n(fw, "rx") + malformed.unwrap().1, input.len() as u64);
    assert_eq!(n(mon, "rx"), n(fw, "pass"));
    assert_eq!(n(mon, "rx"), ips_rx);
    assert_eq!(mon.flows.iter().map(|f| f.packets).sum::<u64>(), ips_rx, "every monitored frame is in a flow");
    // The same flow table, counted in XDP or by the monitor process.
    let mut flows_auto = mon.flows.clone();
    let by_flow = |f: &ferry_chain::proto::FlowStatus| (f.src.clone(), f.dst.clone(), f.sport, f.dport, f.proto);
    flows_never.sort_by_key(by_flow);
    flows_auto.sort_by_key(by_flow);
    assert!(!flows_auto.is_empty());
    assert_eq!(flows_never, flows_auto, "one flow table, wherever the monitor runs");
}

/// in -> fw -> mon -> out placed runs in XDP entirely: no process, the
/// pipeline redirects what passes out of d1; the same frames as two
/// processes send.
#[test]
fn an_all_xdp_path_sends_out_the_same_frames_as_processes() {
    if !privileged("placement_all_xdp") {
        return;
    }
    let input = input();
    let (want, mon_rx) = expected(&input, FW_MON);
    let (never, st, _) = run("never", FW_MON, &input, want.len(), mon_rx);
    assert_eq!(st.nfs.len(), 2);
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let (auto, st, _) = run("auto", FW_MON, &input, want.len(), mon_rx);
    assert!(st.nfs.is_empty() && st.domains.is_empty(), "no process, no shared memory: {:?}", st.nfs);
    assert_eq!(st.offloaded.len(), 2);
    assert_eq!(auto, never, "in XDP: the same frames, in the same order");
    let redirected = st.ports.iter().find(|p| p.name == "in").unwrap().verdicts.iter().find(|v| v.0 == "redirect");
    assert_eq!(redirected.unwrap().1, want.len() as u64, "every frame out went by XDP redirect");
}

/// in -> fw -> fwd -> l2fwd -> out placed runs in XDP entirely (fwd as a
/// counter, l2fwd as its ether-swap element): the same frames leave d1,
/// MACs swapped, as from three processes.
#[test]
fn forwarders_in_xdp_send_out_the_same_frames_as_processes() {
    if !privileged("placement_forwarders") {
        return;
    }
    let input = input();
    let (want, l2_rx) = expected(&input, FW_FWD_L2);
    let (never, st, _) = run("never", FW_FWD_L2, &input, want.len(), l2_rx);
    assert_eq!(st.nfs.len(), 3);
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let (auto, st, _) = run("auto", FW_FWD_L2, &input, want.len(), l2_rx);
    assert!(st.nfs.is_empty(), "no process: {:?}", st.nfs);
    let offloaded: Vec<&str> = st.offloaded.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(offloaded, FW_FWD_L2);
    assert_eq!(auto, never, "in XDP: the same frames, in the same order");
}

/// P4SFC's order, in -> ips -> mon -> fw -> out: placed, the IPS is the
/// only process and the monitor and firewall run after it, in XDP on the
/// loop device ferryd puts in front of d1 (post-server). The same frames
/// leave d1, in the same order, as from three processes, and the monitor
/// counts the same flows.
#[test]
fn post_server_nfs_send_out_the_same_frames_as_processes() {
    if !privileged("placement_post_server") {
        return;
    }
    let input = input();
    let (want, fw_rx) = expected(&input, IPS_MON_FW);
    let (never, st, loops) = run("never", IPS_MON_FW, &input, want.len(), fw_rx);
    assert_eq!((st.nfs.len(), loops), (3, 0));
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let mut flows_never = st.nfs.iter().find(|n| n.name == "mon").unwrap().flows.clone();
    let ips_passed = |st: &Status| ["pass", "pass_alerted", "pass_not_inspected"].map(|k| c(st, "ips", k)).iter().sum();
    let ips_pass: u64 = ips_passed(&st);

    let (auto, st, loops) = run("auto", IPS_MON_FW, &input, want.len(), fw_rx);
    assert_eq!(loops, 2, "one loop device (two veth ends), in front of out");
    let processes: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(processes, ["ips"], "the monitor and the firewall run in XDP");
    let offloaded: Vec<(&str, &str)> = st.offloaded.iter().map(|n| (n.name.as_str(), n.port.as_str())).collect();
    assert_eq!(offloaded, [("mon", "out"), ("fw", "out")], "in front of port out");
    assert_eq!(auto, never, "post-server in XDP: the same frames, in the same order");
    assert_eq!(ips_passed(&st), ips_pass, "the IPS passed as many");
    // What the IPS sends reaches the monitor's element unless it is
    // malformed; every frame out of d1 went by the pipeline's redirect.
    let verdicts = &st.ports.iter().find(|p| p.name == "out").expect("out's pipeline verdicts").verdicts;
    let verdict = |k: &str| verdicts.iter().find(|v| v.0 == k).map_or(0, |v| v.1);
    assert_eq!(count(&st, "mon", "rx") + verdict("malformed"), ips_pass);
    assert_eq!(count(&st, "fw", "rx"), count(&st, "mon", "rx"), "the monitor passes what it counts");
    // What the shared flow parser rejects (the 802.1ad frame among them)
    // is malformed to the IPS as to the pipeline: the IPS drops it, so
    // none reaches the pipeline.
    let rejected = input.iter().filter(|f| ferry_wire::flow::parse(f).is_err()).count() as u64;
    assert_eq!((c(&st, "ips", "drop_malformed"), verdict("malformed")), (rejected, 0));
    assert!(rejected >= 1, "the input has frames the parser rejects");
    assert_eq!(verdict("redirect"), want.len() as u64);
    let mut flows_auto = st.offloaded[0].flows.clone();
    let by_flow = |f: &ferry_chain::proto::FlowStatus| (f.src.clone(), f.dst.clone(), f.sport, f.dport, f.proto);
    flows_never.sort_by_key(by_flow);
    flows_auto.sort_by_key(by_flow);
    assert!(!flows_auto.is_empty());
    assert_eq!(flows_never, flows_auto, "one flow table, before or after the process");
}

/// P4SFC's whole chain, its NAT split: established mappings rewritten in
/// XDP on the loop device after the monitor and firewall, the first frame
/// of each inside endpoint handled by the NAT's process, which gets it on
/// the loop device's receiving end and sends it back through it. The same
/// frames leave as when every NF (the NAT included) is a process, and as
/// the NFs decide here; a frame the process handled may leave after a
/// later one the fast path rewrote, so the frames are compared as sets.
#[test]
fn a_split_nat_last_in_the_chain_sends_out_what_a_nat_process_does() {
    if !privileged("placement_split_nat") {
        return;
    }
    let input = input();
    let (_, fw_rx) = expected(&input, IPS_MON_FW);
    let (mut want, _) = expected(&input, IPS_MON_FW_NAT);
    let translated = translated_by_nat(&want);
    want.sort();
    let (mut never, st, loops) = run("never", IPS_MON_FW_NAT, &input, want.len(), fw_rx);
    assert_eq!((st.nfs.len(), loops), (4, 0));
    never.sort();
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let made = c(&st, "nat", "mappings_made");

    let (mut auto, st, loops) = run("auto", IPS_MON_FW_NAT, &input, want.len(), fw_rx);
    assert_eq!(loops, 2, "one loop device in front of out");
    let processes: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(processes, ["ips", "nat"], "the NAT keeps its process");
    let offloaded: Vec<&str> = st.offloaded.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(offloaded, ["mon", "fw"]);
    auto.sort();
    assert_eq!(auto, want, "split: the same frames");
    assert_split_nat_counts(&st, made, translated);
}

/// How many frames of `want` leave with the NAT's public address as
/// their source (the ones it translated); the input must have some.
fn translated_by_nat(want: &[Vec<u8>]) -> u64 {
    let public = |f: &[u8]| ferry_wire::flow::parse(f).is_ok_and(|fl| fl.src_v4() == Some(NAT_PUBLIC.into()));
    let translated = want.iter().filter(|f| public(f)).count() as u64;
    assert!(translated > 10, "the input has frames to translate: {translated}");
    translated
}

/// A split NAT's counters: as many mappings as the NAT process alone
/// made (`made`), one per inside endpoint, each made by the process from a
/// frame handed to it; and every translated frame counted once, rewritten
/// in XDP or handed to the process.
fn assert_split_nat_counts(st: &Status, made: u64, translated: u64) {
    assert_eq!(c(st, "nat", "mappings_made"), made, "as many mappings");
    let (rewritten, to_slow) = (c(st, "nat", "rewritten"), c(st, "nat", "to_slow_path"));
    assert!(to_slow >= made && made > 0, "to_slow_path {to_slow}, mappings {made}");
    assert_eq!(rewritten + to_slow, translated, "each translated frame once");
}

/// in -> fw -> nat -> out, no process before the NAT: the firewall and
/// the NAT's established mappings run in XDP on d0, which redirects hits
/// out of d1; the first frame of each inside endpoint goes to the NAT's
/// process on d0's socket, which makes the mapping and sends the frame out
/// of d1 itself. The same frames leave as from two processes (as sets: a
/// frame the process handled may leave after a later one XDP rewrote).
#[test]
fn a_split_nat_with_no_process_before_it_sends_out_what_a_nat_process_does() {
    if !privileged("placement_pre_split_nat") {
        return;
    }
    let input = input();
    // What the firewall counts (`run` waits on it): every frame as a
    // process; in XDP, what the pipeline parses (it drops the rest as
    // malformed before any element).
    let (_, fw_rx) = expected(&input, &["fw"]);
    let parsed = input.iter().filter(|f| ferry_wire::flow::parse(f).is_ok()).count() as u64;
    let (mut want, _) = expected(&input, FW_NAT);
    let translated = translated_by_nat(&want);
    want.sort();
    let (mut never, st, _) = run("never", FW_NAT, &input, want.len(), fw_rx);
    assert_eq!(st.nfs.len(), 2);
    never.sort();
    assert_eq!(never, want, "all processes: the NFs' own decisions");
    let made = c(&st, "nat", "mappings_made");

    let (mut auto, st, loops) = run("auto", FW_NAT, &input, want.len(), parsed);
    assert_eq!(loops, 0, "no loop device: the path starts at the port");
    let processes: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(processes, ["nat"], "the NAT keeps its process");
    let offloaded: Vec<(&str, &str)> = st.offloaded.iter().map(|n| (n.name.as_str(), n.port.as_str())).collect();
    assert_eq!(offloaded, [("fw", "in")]);
    auto.sort();
    assert_eq!(auto, want, "split: the same frames");
    assert_split_nat_counts(&st, made, translated);
}

/// A hybrid NF's path goes on to an NF process: the eFW decides in XDP on
/// d0 and hands what it allows to the IPS's AF_XDP sockets (no kernel, no
/// copy in between). What leaves d1 is what the two decide here, in order.
#[test]
fn a_hybrid_path_hands_what_passes_to_the_process_after_it() {
    if !privileged("placement_hybrid_then") {
        return;
    }
    let input = input();
    let (want, ips_rx) = expected(&input, EFW_IPS);
    assert!(want.len() > 10 && ips_rx as usize > want.len(), "the input exercises both: {} {ips_rx}", want.len());
    let (got, st, loops) = run("auto", EFW_IPS, &input, want.len(), ips_rx);
    assert_eq!(loops, 0);
    assert_eq!(got, want, "the eFW's and the IPS's decisions, in order");
    assert_eq!(c(&st, "efw", "allow"), ips_rx, "every frame the eFW allowed reached the IPS");
    let denied = input.iter().filter(|f| {
        ferry_wire::flow::parse(f).is_ok_and(|fl| fl.src_v4().is_some_and(|a| (4..8).contains(&a.octets()[3])))
    });
    assert_eq!(c(&st, "efw", "deny"), denied.count() as u64, "the denied subnet, dropped in XDP");
}

/// `ferry chain check --explain` says where each NF goes and why.
#[test]
fn check_explain_prints_each_nfs_place_and_reason() {
    let dir = TempDir::new("explain");
    std::fs::write(dir.path("fw.rules"), FW_RULES).unwrap();
    std::fs::write(dir.path("ips.rules"), IPS_RULES).unwrap();
    let file = dir.path("sfc.yaml");
    std::fs::write(&file, chain("dut", &dir, "auto", FW_MON_IPS)).unwrap();
    let out = explain(&file);
    let line = |nf: &str| out.lines().find(|l| l.starts_with(nf)).unwrap_or_else(|| panic!("no line for {nf}: {out}"));
    assert!(line("fw ").contains("xdp") && line("fw ").contains("pre-server"), "{out}");
    assert!(line("mon ").contains("xdp"), "{out}");
    assert!(line("ips ").contains("process") && line("ips ").contains("not offloadable: payload-matcher"), "{out}");
    assert!(out.contains("xdp path on port in: fw -> mon -> AF_XDP socket of ips"), "{out}");
}

fn explain(file: &Path) -> String {
    let out = std::process::Command::new(FERRY)
        .args(["chain", "check", "--explain"])
        .arg(file)
        .output()
        .expect("run ferry chain check");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `ferry bench offload` runs both variants of a scenario and reports
/// them side by side (a smoke test: figures are not asserted).
#[test]
fn bench_offload_smoke() {
    if !privileged("bench_offload") {
        return;
    }
    let dir = TempDir::new("bench-offload");
    let json = dir.path("offload.json");
    let model = dir.path("model.json");
    std::fs::write(&model, DEAR_XDP).unwrap();
    let args = [
        "bench",
        "offload",
        "--scenarios",
        "firewall,nat",
        "--sizes",
        "64",
        "--runs",
        "1",
        "--window",
        "300ms",
        "--latency-frames",
        "500",
        "--cost-model",
        model.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    let out = std::process::Command::new(FERRY).args(args).output().expect("run ferry bench offload");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("firewall") && stdout.contains("ratio"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let variants: Vec<&str> = v["samples"].as_array().unwrap().iter().map(|s| s["variant"].as_str().unwrap()).collect();
    let one = ["software", "placed", "fused", "by-cost"];
    assert_eq!(variants, [one, one].concat(), "{v}");
    let rows: Vec<&str> = v["rows"].as_array().unwrap().iter().map(|r| r["scenario"].as_str().unwrap()).collect();
    assert_eq!(rows, ["firewall", "nat"], "{v}");
    // Frames went through every variant (the sink saw stamped ones).
    for s in v["samples"].as_array().unwrap() {
        assert!(s["p50_us"].is_number(), "{s}");
    }
}

/// A placed chain (in -> fw -> mon -> out, all in XDP) is deployed next to
/// a running in-memory chain, carries frames and is removed, five times:
/// the running chain loses nothing and restarts nothing, and each removal
/// takes the pipeline off d0 (no XDP program is left on it).
#[test]
fn placed_chains_deploy_and_remove_without_disturbing_the_others() {
    if !privileged("placement_deploy_remove") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "e2e_placement/deploy.yaml");
    let dut = tb.ns_name("dut").to_string();
    let (gen_ns, sink_ns) = (tb.ns_name("gen").to_string(), tb.ns_name("sink").to_string());
    let sink_ns = sink_ns.as_str();
    let dir = TempDir::new("place-deploy");
    std::fs::write(dir.path("fw.rules"), FW_RULES).unwrap();
    std::fs::write(dir.path("ips.rules"), IPS_RULES).unwrap();
    let running = "name: a\ndomains: [ { name: main, frames: 2048, ring_size: 512 } ]\nnfs:\n  - { name: src, domain: \
                   main, kind: source, args: [\"rate=200000\"] }\n  - { name: snk, domain: main, kind: sink }\nlinks:\n  \
                   - { from: src, to: snk }\n";
    let (rc, _) = start(&dir, running);
    wait_until("traffic in chain a", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 1000));
    let placed = dir.path("sfc.yaml");
    std::fs::write(&placed, chain(&dut, &dir, "auto", FW_MON)).unwrap();
    let frames: Vec<Vec<u8>> = (0..20u16).map(|i| frame(tuple(1, L4Proto::Udp, 4000 + i, 9), 64, b"")).collect();
    for round in 1..=5 {
        let deployed = chainctl::deploy(&rc.admin, &placed).expect("deploy the placed chain");
        assert!(deployed.placement.contains("redirected out of port out"), "{}", deployed.placement);
        let got = std::thread::scope(|s| {
            let (ready_tx, ready_rx) = mpsc::channel();
            let want = frames.len();
            let listener = s.spawn(move || {
                in_netns(sink_ns, move || {
                    let sock = RawSock::open("s0");
                    ready_tx.send(()).unwrap();
                    let mut n = 0;
                    while n < want && sock.recv_match(HANG_GUARD, |f| f.len() == 64).is_some() {
                        n += 1;
                    }
                    n
                })
            });
            ready_rx.recv().unwrap();
            in_netns(&gen_ns, || {
                let sock = RawSock::open("g0");
                for f in &frames {
                    sock.send(f);
                }
            });
            listener.join().unwrap()
        });
        assert_eq!(got, frames.len(), "round {round}: every frame through the XDP chain");
        let st = chainctl::status(&rc.admin, "sfc").unwrap();
        assert_eq!(count(&st, "fw", "rx"), frames.len() as u64, "round {round}");
        let sunk = c(&rc.status().unwrap(), "snk", "sunk");
        chainctl::remove(&rc.admin, "sfc").expect("remove the placed chain");
        let link = tb.exec("dut", "ip", ["link", "show", "dev", "d0"]).output().unwrap();
        let link = String::from_utf8_lossy(&link.stdout);
        assert!(!link.contains("xdp"), "round {round}: the pipeline left d0: {link}");
        wait_until("chain a still flowing", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 1000));
    }
    let a = rc.status().unwrap();
    let drops: Vec<_> = a
        .nfs
        .iter()
        .flat_map(|n| n.threads.iter().flatten())
        .filter(|(k, v)| k.starts_with("drop_") && *v > 0)
        .collect();
    // The sink frees what it sinks through drop_nf; nothing else may drop.
    assert!(drops.iter().all(|(k, _)| k == "drop_nf"), "chain a lost frames: {drops:?}");
    assert!(a.nfs.iter().all(|n| n.connected && n.restarts == 0), "chain a undisturbed: {a:?}");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}
