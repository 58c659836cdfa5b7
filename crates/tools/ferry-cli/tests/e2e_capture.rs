//! `ferry chain capture` on a running chain: the copies are the frames
//! (same bytes, same order), tshark reads the file, and a capture whose
//! reader stalls loses its own copies, never a chain frame.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::chain::*;
use common::*;
use ferry_chain::proto::CaptureRequest;
use ferry_cli::chainctl::{self, RunningChain};

/// Where the chain's two NFs run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Placed {
    Processes,
    Fused,
    Xdp,
}

/// in -> fw -> mon -> out. The firewall denies the UDP source ports
/// below 32768 (the generator draws them from 1024-65535), so it passes
/// about half.
fn start_chain(tb: &ferry_testbed::Testbed, dir: &TempDir, placed: Placed) -> RunningChain {
    let dut = tb.ns_name("dut").to_string();
    let rules = dir.path("fw.rules");
    std::fs::write(&rules, "deny proto udp sport 1024-32767\ndefault allow\n").unwrap();
    let fuse = match placed {
        Placed::Processes => "offload: never, ",
        Placed::Fused => "offload: never, fuse: auto, ",
        Placed::Xdp => "offload: force, ",
    };
    let yaml = format!(
        r#"
name: cap
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: fw, domain: main, kind: firewall, {fuse}args: ["{}"] }}
  - {{ name: mon, domain: main, kind: flow-monitor, {fuse}}}
links:
  - {{ from: in, to: fw }}
  - {{ from: fw, to: mon }}
  - {{ from: mon, to: out }}
"#,
        rules.display()
    );
    start(dir, &yaml).0
}

/// The frames of a pcapng file, in order.
fn frames(file: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(file).unwrap();
    let mut reader = pcap_file::pcapng::PcapNgReader::new(&data[..]).expect("a pcapng file");
    let mut out = Vec::new();
    while let Some(block) = reader.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(p) = block.expect("a valid block") {
            out.push(p.data.into_owned());
        }
    }
    out
}

/// How many frames tshark reads from `file`.
fn tshark_count(file: &Path) -> usize {
    let out = Command::new("tshark").args(["-r"]).arg(file).args(["-T", "fields", "-e", "frame.len"]).output().unwrap();
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// What the firewall's rules let through: UDP from a source port of
/// 32768 or more.
fn passes(frame: &[u8]) -> bool {
    let flow = ferry_wire::flow::parse(frame).expect("the generator's frames parse");
    flow.proto == 17 && flow.sport >= 32768
}

fn capture_both_points(placed: Placed) {
    let tb = testbed(PORTS_TESTBED, &format!("capture-{placed:?}.yaml"));
    let dir = TempDir::new("capture");
    let rc = start_chain(&tb, &dir, placed);
    // At the port, through the CLI (stopped with Ctrl-C as an operator
    // would); at the link, through the library, both on fw's threads.
    let at_port = dir.path("in.pcapng");
    let admin = rc.admin.display().to_string();
    let mut cli = Ferry::spawn_here(&[
        "chain",
        "capture",
        "cap",
        "--at",
        "in",
        "-w",
        at_port.to_str().unwrap(),
        "--admin",
        &admin,
    ]);
    let req = CaptureRequest { chain: "cap".into(), at: "fw->mon".into(), ..Default::default() };
    let link = chainctl::capture_start(&rc.admin, &req).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(link.sites.iter().all(|s| s.starts_with("fw")), "{:?}", link.sites);
    if placed == Placed::Xdp {
        assert!(link.sites.iter().all(|s| s.contains("in XDP")), "{:?}", link.sites);
    }
    let stop = link.stopper().unwrap();
    let at_link = dir.path("link.pcapng");
    let mut file = std::fs::File::create(&at_link).unwrap();
    let reader = std::thread::spawn(move || link.copy_to(&mut file).unwrap());
    wait_until("the CLI's capture armed", || {
        assert!(cli.running(), "the CLI's capture ended early");
        std::fs::metadata(&at_port).is_ok_and(|m| m.len() > 0)
    });
    // The sink ends 1.5 s after the last frame: by then fw has them all.
    let report = generator_to_sink(&tb, 4000, 20_000, 256);
    let st = rc.status().unwrap();
    stop.stop().unwrap();
    let link_stats = reader.join().unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cli.pid(), libc::SIGINT) };
    let done = cli.finish(Duration::from_secs(30));
    assert!(done.status.success(), "{}", done.stderr);
    let (received, passed) = (frames(&at_port), frames(&at_link));
    if placed == Placed::Xdp {
        // The port's XDP program counts every frame it took, whatever its
        // verdict: each was captured as received.
        let port = st.ports.iter().find(|p| p.name == "in").expect("port in's XDP verdicts");
        let taken: u64 = port.verdicts.iter().map(|(_, packets, _)| packets).sum();
        assert!(taken > 0 && received.len() as u64 == taken, "{} captured, {taken} counted", received.len());
        assert_eq!(passed.len() as u64, u(&report, "/packets"), "what fw passed reached the sink");
    } else {
        let fw_in = c(&st, "fw", "rx_port");
        // A fused NF carries its members' counters as MEMBER.COUNTER.
        let denied = c(&st, "fw", if placed == Placed::Fused { "fw.drop_denied" } else { "drop_denied" });
        assert!(fw_in > 0 && fw_in == u(&report, "/packets") + denied, "{report:#}");
        assert_eq!(received.len() as u64, fw_in, "every frame fw received, captured at in");
    }
    let expected: Vec<Vec<u8>> = received.iter().filter(|f| passes(f)).cloned().collect();
    assert!(!expected.is_empty() && expected.len() < received.len(), "the rules pass some, deny some");
    assert_eq!(passed.len(), expected.len(), "fw->mon holds what fw passed");
    assert!(passed == expected, "same bytes, same order");
    assert_eq!(link_stats.written, passed.len() as u64);
    assert_eq!(link_stats.lost, 0, "{link_stats:?}");
    assert_eq!(tshark_count(&at_port), received.len(), "tshark reads the file");
    assert_eq!(tshark_count(&at_link), passed.len());
    assert!(done.stderr.contains(&format!("{} frames written", received.len())), "{}", done.stderr);
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

#[test]
fn capture_at_a_link_holds_exactly_what_the_firewall_passed() {
    if !privileged("capture_link") {
        return;
    }
    capture_both_points(Placed::Processes);
}

#[test]
fn capture_between_fused_nfs_holds_exactly_what_the_first_passed() {
    if !privileged("capture_fused") {
        return;
    }
    capture_both_points(Placed::Fused);
}

#[test]
fn capture_between_nfs_in_xdp_holds_exactly_what_the_first_passed() {
    if !privileged("capture_xdp") {
        return;
    }
    capture_both_points(Placed::Xdp);
}

/// The reader never reads until the traffic is over: the pipe, ferryd's
/// buffer and the thread's ring fill, and the capture loses copies. The
/// chain loses nothing: every frame fw passed left by out, and the copies
/// taken and lost add up to them.
#[test]
fn a_stalled_capture_reader_costs_copies_never_chain_frames() {
    if !privileged("capture_stall") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "capture-stall.yaml");
    let dir = TempDir::new("capture-stall");
    let rc = start_chain(&tb, &dir, Placed::Processes);
    let req = CaptureRequest { chain: "cap".into(), at: "fw->mon".into(), ..Default::default() };
    let link = chainctl::capture_start(&rc.admin, &req).unwrap_or_else(|e| panic!("{e:#}"));
    let stop = link.stopper().unwrap();
    let report = generator_to_sink(&tb, 60_000, 40_000, 256);
    let st = rc.status().unwrap();
    let passed = c(&st, "fw", "pass");
    assert_eq!(u(&report, "/packets"), passed, "every frame fw passed reached the sink");
    assert_eq!(c(&st, "mon", "tx_port"), passed);
    stop.stop().unwrap();
    let mut out = Vec::new();
    let stats = link.copy_to(&mut out).unwrap();
    eprintln!("{stats:?}");
    assert!(stats.lost > 0, "the stalled capture lost copies: {stats:?}");
    assert_eq!(stats.copied + stats.lost, passed, "every frame at the point copied or counted lost");
    assert_eq!(stats.written, stats.copied);
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// Bad requests are refused with what would be right, and a capture on the
/// TLS listener's path is not served (root's admin socket only).
#[test]
fn capture_requests_that_name_nothing_are_refused() {
    if !privileged("capture_refused") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "capture-refused.yaml");
    let dir = TempDir::new("capture-refused");
    let rc = start_chain(&tb, &dir, Placed::Processes);
    let refused = |at: &str, filter: &str| {
        let req = CaptureRequest { chain: "cap".into(), at: at.into(), filter: filter.into(), ..Default::default() };
        format!("{:#}", chainctl::capture_start(&rc.admin, &req).err().expect("refused"))
    };
    assert!(refused("nowhere", "").contains("no port \"nowhere\" (its ports: in, out)"));
    assert!(refused("fw->out", "").contains("NF fw has no link to \"out\" (it links to: mon)"));
    assert!(refused("fw:sideways", "").contains("no side of a point"));
    assert!(refused("in", "port 99999").contains("a port number"));
    // Two captures at once share a thread; a third is refused.
    let req = CaptureRequest { chain: "cap".into(), at: "fw:in".into(), ..Default::default() };
    let a = chainctl::capture_start(&rc.admin, &req).unwrap();
    let b = chainctl::capture_start(&rc.admin, &req).unwrap();
    assert!(refused("fw:out", "").contains("in 2 captures already"));
    for h in [a, b] {
        h.stopper().unwrap().stop().unwrap();
        let stats = h.copy_to(&mut std::io::sink()).unwrap();
        assert_eq!(stats.written, 0);
    }
    // Disarmed: a new capture has a slot again.
    let c = chainctl::capture_start(&rc.admin, &req).unwrap();
    c.stopper().unwrap().stop().unwrap();
    c.copy_to(&mut std::io::sink()).unwrap();
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// Two tenants, each with its own uid and memory, their sources making
/// frames of different lengths: a capture of one tenant's link holds that
/// tenant's frames only, and its sites are that tenant's threads.
#[test]
fn a_capture_of_one_tenants_link_shows_none_of_anothers_frames() {
    if !privileged("capture_tenants") {
        return;
    }
    let dir = TempDir::new("capture-tenants");
    let yaml = r#"
name: tenants
tenants: [ { name: acme }, { name: zeta } ]
domains:
  - { name: a, frames: 1024, tenant: acme }
  - { name: z, frames: 1024, tenant: zeta }
nfs:
  - { name: srca, domain: a, kind: source, args: ["rate=20000", "size=100"] }
  - { name: fa, domain: a, kind: fwd }
  - { name: snka, domain: a, kind: sink }
  - { name: srcz, domain: z, kind: source, args: ["rate=20000", "size=200"] }
  - { name: fz, domain: z, kind: fwd }
  - { name: snkz, domain: z, kind: sink }
links:
  - { from: srca, to: fa }
  - { from: fa, to: snka }
  - { from: srcz, to: fz }
  - { from: fz, to: snkz }
"#;
    let (rc, _) = start(&dir, yaml);
    for (at, tenant_nfs, len) in [("fa->snka", ["fa"], 100), ("srcz->fz", ["srcz"], 200)] {
        let req = CaptureRequest { chain: "tenants".into(), at: at.into(), count: 500, ..Default::default() };
        let h = chainctl::capture_start(&rc.admin, &req).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(h.sites.iter().all(|s| tenant_nfs.iter().any(|n| s.starts_with(n))), "{at}: {:?}", h.sites);
        let file = dir.path("tenant.pcapng");
        let stats = h.copy_to(&mut std::fs::File::create(&file).unwrap()).unwrap();
        let got = frames(&file);
        assert_eq!((got.len(), stats.written), (500, 500), "{at}");
        assert!(got.iter().all(|f| f.len() == len), "{at}: a frame of another tenant's length");
    }
    // A filter sees whole frames even with a snap length: the snap length
    // is applied when the copy is written.
    let req = CaptureRequest {
        chain: "tenants".into(),
        at: "fa:out".into(),
        count: 50,
        snaplen: 20,
        filter: "udp and dst port 9".into(),
        ..Default::default()
    };
    let h = chainctl::capture_start(&rc.admin, &req).unwrap();
    let file = dir.path("snap.pcapng");
    let stats = h.copy_to(&mut std::fs::File::create(&file).unwrap()).unwrap();
    assert_eq!((stats.written, stats.filtered), (50, 0), "{stats:?}");
    let data = std::fs::read(&file).unwrap();
    let mut reader = pcap_file::pcapng::PcapNgReader::new(&data[..]).unwrap();
    let mut n = 0;
    while let Some(block) = reader.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(p) = block.unwrap() {
            assert_eq!((p.data.len(), p.original_len), (20, 100));
            n += 1;
        }
    }
    assert_eq!(n, 50);
    // A filter that takes nothing writes nothing and counts what it left.
    let req =
        CaptureRequest { chain: "tenants".into(), at: "fa:out".into(), filter: "tcp".into(), ..Default::default() };
    let h = chainctl::capture_start(&rc.admin, &req).unwrap();
    let stop = h.stopper().unwrap();
    let reader = std::thread::spawn(move || h.copy_to(&mut std::io::sink()).unwrap());
    wait_until("fa to pass frames under a capture", || {
        let s = rc.status().unwrap();
        c(&s, "fa", "to_nf") > 0
    });
    let before = c(&rc.status().unwrap(), "fa", "to_nf");
    wait_until("more frames through fa", || c(&rc.status().unwrap(), "fa", "to_nf") > before + 100);
    stop.stop().unwrap();
    let stats = reader.join().unwrap();
    assert!(stats.written == 0 && stats.filtered > 0 && stats.filtered <= stats.copied, "{stats:?}");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}
