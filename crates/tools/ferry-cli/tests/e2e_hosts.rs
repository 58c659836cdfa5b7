//! A chain over three "hosts" (network namespaces, each with its own
//! ferryd), joined by a fabric (a bridge): deployed over mutual TLS,
//! carrying NSH in VXLAN-GPE between them, decoded by tshark hop by hop;
//! frames with an expired TTL or SI and malformed NSH counted and dropped;
//! a deploy with another CA's key refused.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use ferry_chain::proto::{self, Msg, Status};
use ferry_cli::chainctl::{self, RunningChain};

/// gen -> h1 (c0) ... fabric (bridge in `fab`) ... h3 (s0) -> sink.
const TESTBED: &str = r#"
name: hosts
namespaces:
  - { name: gen, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h1, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h2, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: h3, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: fab, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
  - { name: sink, sysctls: { net.ipv6.conf.all.disable_ipv6: "1" } }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01" }
    b: { ns: h1, dev: c0, mac: "02:00:00:00:01:02" }
  - a: { ns: h1, dev: f1, mac: "02:00:00:00:09:01", addrs: ["10.9.0.1/24"] }
    b: { ns: fab, dev: p1 }
    mtu: 1600
  - a: { ns: h2, dev: f2, mac: "02:00:00:00:09:02", addrs: ["10.9.0.2/24"] }
    b: { ns: fab, dev: p2 }
    mtu: 1600
  - a: { ns: h3, dev: f3, mac: "02:00:00:00:09:03", addrs: ["10.9.0.3/24"] }
    b: { ns: fab, dev: p3 }
    mtu: 1600
  - a: { ns: h3, dev: s0, mac: "02:00:00:00:02:02" }
    b: { ns: sink, dev: k0, mac: "02:00:00:00:02:01" }
  - a: { ns: gen, dev: g1, mac: "02:00:00:00:03:01" }
    b: { ns: h1, dev: c1, mac: "02:00:00:00:03:02" }
  - a: { ns: h3, dev: s1, mac: "02:00:00:00:04:02" }
    b: { ns: sink, dev: k1, mac: "02:00:00:00:04:01" }
"#;

const FABRIC_MACS: [&str; 3] = ["02:00:00:00:09:01", "02:00:00:00:09:02", "02:00:00:00:09:03"];

/// A ferryd for host `host`, with its TLS listener on a port of its
/// choosing; returns it and that address.
fn host_ferryd(dir: &TempDir, host: &str, tls: &Path, listen: &str) -> (RunningChain, String) {
    let socket = dir.path(&format!("{host}.sock"));
    let child = Command::new(chainctl::ferryd_bin().unwrap())
        .arg("--socket")
        .arg(&socket)
        .args(["--host", host, "--listen", listen, "--tls-dir"])
        .arg(tls)
        .args(["--metrics", "127.0.0.1:0"])
        .env("FERRY_HOST", chainctl::host_bin().unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let admin = proto::admin_socket(&socket);
    let listen = wait_for(&format!("ferryd of {host}"), || match proto::request(&admin, &Msg::Info) {
        Ok(Msg::InfoReply { listen: Some(l), .. }) => Some(l),
        _ => None,
    });
    (RunningChain { child, socket, admin, name: "across".into() }, listen)
}

/// in2 (h1) -> x (h1) -> out2 (h3): a second chain, not through h2.
fn side_chain(across: &str) -> String {
    let hosts = &across[across.find("hosts:").unwrap()..across.find("ports:").unwrap()];
    format!(
        r#"
name: side
spi: 8
domains: [ {{ name: main }} ]
{hosts}ports:
  - {{ name: in2, netdev: c1, location: h1 }}
  - {{ name: out2, netdev: s1, location: h3 }}
nfs:
  - {{ name: x, domain: main, kind: fwd, offload: never, location: h1 }}
links:
  - {{ from: in2, to: x }}
  - {{ from: x, to: out2 }}
"#
    )
}

fn chain_file(tb: &ferry_testbed::Testbed, listen: &[String]) -> String {
    let ns = |n: &str| tb.ns_name(n).to_string();
    format!(
        r#"
name: across
spi: 7
domains: [ {{ name: main }} ]
hosts:
  - {{ name: h1, control: "{l1}", netns: {h1}, fabric: {{ dev: f1, addr: 10.9.0.1 }} }}
  - {{ name: h2, control: "{l2}", netns: {h2}, fabric: {{ dev: f2, addr: 10.9.0.2 }} }}
  - {{ name: h3, control: "{l3}", netns: {h3}, fabric: {{ dev: f3, addr: 10.9.0.3 }} }}
ports:
  - {{ name: in, netdev: c0, location: h1 }}
  - {{ name: out, netdev: s0, location: h3 }}
nfs:
  - {{ name: a, domain: main, kind: fwd, offload: never, location: h1 }}
  - {{ name: b, domain: main, kind: fwd, offload: never, location: h2 }}
  - {{ name: c, domain: main, kind: fwd, offload: never, location: h2 }}
links:
  - {{ from: in, to: a }}
  - {{ from: a, to: b }}
  - {{ from: b, to: c }}
  - {{ from: c, to: out }}
"#,
        l1 = listen[0],
        l2 = listen[1],
        l3 = listen[2],
        h1 = ns("h1"),
        h2 = ns("h2"),
        h3 = ns("h3"),
    )
}

fn ferry(args: &[&str]) -> std::process::Output {
    Command::new(FERRY).args(args).output().unwrap()
}

/// Each host's status, over TLS.
fn statuses(file: &Path, tls: &Path) -> Vec<(String, Status)> {
    let out = ferry(&[
        "chain",
        "show",
        "across",
        "--over",
        &file.to_string_lossy(),
        "--tls",
        &tls.to_string_lossy(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all: Vec<ferry_cli::hostctl::HostStatus> = serde_json::from_slice(&out.stdout).expect("statuses");
    all.into_iter().map(|h| (h.host, h.status.expect("every host answers"))).collect()
}

fn nsh(s: &Status, name: &str) -> u64 {
    s.nsh.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
}

/// dumpcap on `dev` in namespace `ns`, writing pcap to `file`; returns
/// once it captures. (Its stderr goes to a file: a closed pipe would
/// kill it before it flushed the capture.)
fn capture(ns: &str, dev: &str, file: &Path) -> Child {
    let log = file.with_extension("log");
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "dumpcap", "-q", "-P", "-i", dev, "-w"])
        .arg(file)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("dumpcap (tshark's package)");
    wait_until(&format!("dumpcap capturing on {dev}"), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("Capturing on"))
    });
    child
}

fn stop_capture(mut c: Child) {
    // SAFETY: plain kill of our child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    c.wait().unwrap();
}

/// Frames of `pcap` that tshark's display filter `filter` keeps.
fn tshark_count(pcap: &Path, filter: &str) -> usize {
    let out = Command::new("tshark").arg("-n").arg("-r").arg(pcap).args(["-Y", filter]).output().unwrap();
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_chain_over_three_hosts_carries_nsh_between_them() {
    if !privileged("chain_over_hosts") {
        return;
    }
    let tb = testbed(TESTBED, "hosts-e2e.yaml");
    let fab = tb.ns_name("fab").to_string();
    let macs: Vec<ferry_wire::MacAddr> = FABRIC_MACS.iter().map(|m| m.parse().unwrap()).collect();
    tb.bridge("fab", "br0", &[("p1", macs[0]), ("p2", macs[1]), ("p3", macs[2])]).expect("the fabric");
    let dir = TempDir::new("hosts");
    let (tls, other) = (dir.path("tls"), dir.path("other-ca"));
    for (d, hosts) in [(&tls, "h1,h2,h3"), (&other, "h1,h2,h3")] {
        let out = ferry(&["tls", "init", &d.to_string_lossy(), "--hosts", hosts]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut ferryds: Vec<(RunningChain, String)> =
        ["h1", "h2", "h3"].iter().map(|h| host_ferryd(&dir, h, &tls, "127.0.0.1:0")).collect();
    let listen: Vec<String> = ferryds.iter().map(|(_, l)| l.clone()).collect();
    let file = dir.path("across.yaml");
    std::fs::write(&file, chain_file(&tb, &listen)).unwrap();
    let file_s = file.to_string_lossy().to_string();

    // Another deployment's operator key, even trusting our hosts: every
    // host refuses it, and nothing is deployed.
    let ours = tls.join(format!("{}.pem", ferry_remote::HOSTS_CA));
    std::fs::copy(&ours, other.join(format!("{}.pem", ferry_remote::HOSTS_CA))).unwrap();
    let refused = ferry(&["chain", "deploy", &file_s, "--tls", &other.to_string_lossy()]);
    assert!(!refused.status.success(), "a deploy with another CA's key");
    let text = std::fs::read_to_string(&file).unwrap();
    let part = Msg::DeployPart { text: text.clone(), origin: "across.yaml".into(), macs: Vec::new() };
    for (i, (rc, listen)) in ferryds.iter().enumerate() {
        let host = format!("h{}", i + 1);
        // Every host refuses the foreign operator at the handshake...
        assert!(ferry_remote::request(listen, &host, &other, &part).is_err(), "{host} took another CA's operator");
        // ...and another host's key may ask for status, nothing more.
        let peer = if i == 0 { "h2" } else { "h1" };
        let as_peer = ferry_remote::request_as(listen, &host, &tls, peer, &part, std::time::Duration::from_secs(30));
        assert!(
            matches!(&as_peer, Ok(Msg::Error { message }) if message.contains("may only ask for status")),
            "{host} let {peer}'s key deploy: {as_peer:?}"
        );
        let list = chainctl::list(&rc.admin).unwrap();
        assert!(list.is_empty(), "nothing deployed with wrong credentials: {list:?}");
    }

    let out = ferry(&["chain", "deploy", &file_s, "--tls", &tls.to_string_lossy()]);
    assert!(out.status.success(), "deploy: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    wait_until("every NF connected on every host", || {
        statuses(&file, &tls).iter().all(|(_, s)| s.nfs.iter().all(|n| n.connected))
    });

    let (p1, p3) = (dir.path("p1.pcap"), dir.path("p3.pcap"));
    let (c1, c3) = (capture(&fab, "p1", &p1), capture(&fab, "p3", &p3));
    let sink = spawn_sink(&tb, "sink", "k0", &["--idle-exit", "2s"]);
    let sent = 5000u64;
    let args = ["gen", "xsk", "--dev", "g0", "--count", "5000", "--rate", "5000", "--dst-mac", "02:00:00:00:01:02"];
    let gen = Ferry::spawn(&tb, "gen", &[&args[..], &["--set", "flows=16", "--json"]].concat()).wait_json(HANG_GUARD);
    assert_eq!(u(&gen, "/sent"), sent, "{gen:#}");
    let report = sink.wait_json(HANG_GUARD);
    let got = u(&report, "/packets");
    stop_capture(c1);
    stop_capture(c3);
    let st = statuses(&file, &tls);
    for (host, s) in &st {
        eprintln!("host {host}:\n{}", chainctl::status_table(s));
    }
    let (h1, h2, h3) = (&st[0].1, &st[1].1, &st[2].1);
    assert!(got >= sent * 9 / 10, "only {got} of {sent} arrived: {report:#}");
    // Counts consistent end to end: each hop hands on what it took.
    let c = chainctl::counter;
    assert_eq!(nsh(h1, "returned"), c(h1, "a", "tx_port"), "h1 pushed NSH on what a sent");
    assert_eq!(nsh(h1, "forwarded"), nsh(h1, "returned"), "h1 forwarded all of it");
    assert_eq!(nsh(h2, "proxied"), c(h2, "b", "rx_port"), "h2 handed b what it took");
    assert_eq!(nsh(h2, "forwarded"), c(h2, "c", "tx_port"), "h2 forwarded what c sent");
    assert_eq!(nsh(h3, "ended"), got, "h3 ended the path into the sink");
    // tshark on the fabric, hop by hop: h1 -> h2 at SI 255, h2 -> h3 at
    // SI 254, TTL 62 each (63, less the forwarding SFF's one).
    let at_p1 = "eth.dst == 02:00:00:00:09:02 && udp.dstport == 4790";
    let hop1 = tshark_count(&p1, &format!("{at_p1} && nsh.spi == 7 && nsh.si == 255 && nsh.ttl == 62"));
    assert_eq!(hop1, tshark_count(&p1, at_p1), "every frame h1 -> h2 is SPI 7, SI 255, TTL 62");
    assert!(hop1 as u64 >= got, "{hop1} frames between h1 and h2, {got} at the sink");
    let at_p3 = "eth.dst == 02:00:00:00:09:03 && udp.dstport == 4790";
    let hop2 = tshark_count(&p3, &format!("{at_p3} && nsh.spi == 7 && nsh.si == 254 && nsh.ttl == 62"));
    assert_eq!(hop2, tshark_count(&p3, at_p3), "every frame h2 -> h3 is SPI 7, SI 254, TTL 62");
    assert!(hop2 as u64 >= got, "{hop2} frames between h2 and h3, {got} at the sink");

    // Expired TTL and SI, malformed NSH: a frame as h1 sends it, edited,
    // into h2's fabric; each dropped and counted once.
    let frame =
        ferry_traffic::read_pcap(&p1).unwrap().into_iter().map(|(_, f)| f).find(|f| f[..6] == [2, 0, 0, 0, 9, 2]);
    let frame = frame.expect("a frame h1 sent h2");
    let nsh_at = 14 + 20 + 8 + 8;
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut g = frame.clone();
        f(&mut g);
        g
    };
    // NSH base header: ver(2) O U TTL(6) Length(6) ...; service path: SPI(24) SI(8).
    let ttl1_si254 = edit(&|g| {
        // TTL 1: its upper four bits 0, its lower two 01.
        g[nsh_at] &= 0xf0;
        g[nsh_at + 1] = (1 << 6) | (g[nsh_at + 1] & 0x3f);
        g[nsh_at + 7] = 254;
    });
    let si0 = edit(&|g| g[nsh_at + 7] = 0);
    let malformed = edit(&|g| g[nsh_at + 1] = (g[nsh_at + 1] & 0xc0) | 1);
    let before = statuses(&file, &tls)[1].1.clone();
    let raw = in_netns(&fab, || RawSock::open("p2"));
    for f in [&ttl1_si254, &si0, &malformed] {
        raw.send(f);
    }
    wait_until("h2 counted the three frames", || {
        let now = &statuses(&file, &tls)[1].1;
        ["ttl_expired", "si_expired", "malformed"].iter().all(|k| nsh(now, k) > nsh(&before, k))
    });
    let after = &statuses(&file, &tls)[1].1;
    for k in ["ttl_expired", "si_expired", "malformed"] {
        assert_eq!(nsh(after, k), nsh(&before, k) + 1, "{k}");
    }
    assert_eq!(nsh(after, "forwarded"), nsh(&before, "forwarded"), "none of them went on");

    // A host fails: h2's ferryd is killed (its NFs and forwarder go with
    // it). h1 finds h2 unreachable and counts the frames for it as
    // dropped; the chain that does not cross h2 goes on untouched; h2's
    // next ferryd deploys its parts again and the chain recovers.
    let side = dir.path("side.yaml");
    std::fs::write(&side, side_chain(&std::fs::read_to_string(&file).unwrap())).unwrap();
    let side_s = side.to_string_lossy().to_string();
    let out = ferry(&["chain", "deploy", &side_s, "--tls", &tls.to_string_lossy()]);
    assert!(out.status.success(), "deploy side: {}", String::from_utf8_lossy(&out.stderr));
    // h1's status of side (x runs there), from its admin socket.
    let h1_admin = ferryds[0].0.admin.clone();
    let side_status = || match proto::request(&h1_admin, &Msg::Status { chain: "side".into() }) {
        Ok(Msg::StatusReply(s)) => *s,
        other => panic!("h1: {other:?}"),
    };
    wait_until("side's NF connected", || side_status().nfs.iter().all(|n| n.connected));
    let (sink1, sink2) =
        (spawn_sink(&tb, "sink", "k0", &["--idle-exit", "2s"]), spawn_sink(&tb, "sink", "k1", &["--idle-exit", "2s"]));
    let flow = |dev: &str, mac: &str| {
        let args = ["gen", "xsk", "--dev", dev, "--count", "100000000", "--rate", "2000", "--dst-mac", mac];
        Ferry::spawn(&tb, "gen", &[&args[..], &["--set", "flows=16"]].concat())
    };
    let (gen1, gen2) = (flow("g0", "02:00:00:00:01:02"), flow("g1", "02:00:00:00:03:02"));
    let ended = |st: &[(String, Status)]| nsh(&st[2].1, "ended");
    let before = ended(&statuses(&file, &tls));
    wait_until("both chains flowing", || ended(&statuses(&file, &tls)) > before + 500);
    let h1_drops = |st: &[(String, Status)]| nsh(&st[0].1, "no_hop");
    let drops_before = h1_drops(&statuses(&file, &tls));
    let h2 = ferryds.remove(1);
    let h2_listen = h2.1.clone();
    let mut h2 = h2.0;
    h2.child.kill().unwrap();
    h2.child.wait().unwrap();
    drop(h2);
    let side_x = |s: &Status| chainctl::counter(s, "x", "tx_port");
    let side_before = side_x(&side_status());
    // Only h1 and h3 answer now: their statuses, one by one.
    let h1_status = || match proto::request(&ferryds[0].0.admin, &Msg::Status { chain: "across".into() }) {
        Ok(Msg::StatusReply(s)) => *s,
        other => panic!("h1: {other:?}"),
    };
    wait_until("h1 counting the frames for h2 as dropped", || nsh(&h1_status(), "no_hop") > drops_before + 100);
    wait_until("side flowing while h2 is down", || side_x(&side_status()) > side_before + 500);
    ferryds.insert(1, host_ferryd(&dir, "h2", &tls, &h2_listen));
    let h3_ended = || match proto::request(&ferryds[2].0.admin, &Msg::Status { chain: "across".into() }) {
        Ok(Msg::StatusReply(s)) => nsh(&s, "ended"),
        other => panic!("h3: {other:?}"),
    };
    let ended_down = h3_ended();
    wait_until("across through the new h2 again", || h3_ended() > ended_down + 500);
    let st = statuses(&file, &tls);
    assert!(st[1].1.nfs.iter().all(|n| n.connected), "h2's new NFs run");
    assert!(h1_drops(&st) > drops_before, "h1 counted the frames for h2 while it was down");
    drop((gen1, gen2));
    let (r1, r2) = (sink1.wait_json(HANG_GUARD), sink2.wait_json(HANG_GUARD));
    assert!(u(&r1, "/packets") > 0, "{r1:#}");
    assert_eq!(u(&r2, "/packets"), side_x(&side_status()), "side lost nothing while h2 was down: {r2:#}");
    let out = ferry(&["chain", "remove", "side", "--over", &side_s, "--tls", &tls.to_string_lossy()]);
    assert!(out.status.success(), "remove side: {}", String::from_utf8_lossy(&out.stderr));

    let out = ferry(&["chain", "remove", "across", "--over", &file_s, "--tls", &tls.to_string_lossy()]);
    assert!(out.status.success(), "remove: {}", String::from_utf8_lossy(&out.stderr));
    for (rc, _) in &ferryds {
        assert!(chainctl::list(&rc.admin).unwrap().is_empty(), "removed everywhere");
    }
    for (rc, _) in ferryds {
        rc.shutdown().unwrap();
    }
    down_and_check(tb);
}

/// `ferry bench nsh` deploys its chain on one, two and three hosts and
/// reports them side by side (a smoke test: figures are not asserted).
#[test]
fn bench_nsh_smoke() {
    if !privileged("bench_nsh") {
        return;
    }
    let dir = TempDir::new("bench-nsh");
    let json = dir.path("nsh.json");
    let args = ["bench", "nsh", "--sizes", "64", "--runs", "1", "--window", "300ms", "--latency-frames", "500"];
    let out =
        Command::new(FERRY).args(args).args(["--json", json.to_str().unwrap()]).output().expect("ferry bench nsh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let variants: Vec<&str> = v["samples"].as_array().unwrap().iter().map(|s| s["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["one", "two", "three"], "{v}");
    assert!(v["samples"].as_array().unwrap().iter().all(|s| s["mpps"].is_number()), "{v}");
}
