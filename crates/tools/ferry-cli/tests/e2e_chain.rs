//! End-to-end tests of chains run by ferryd: real AF_XDP ports in network
//! namespaces, NF processes as allocated uids, kill -9 recovery, copy links,
//! protocol robustness, ferryd restarts.

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;

use common::chain::*;
use common::*;
use ferry_chain::proto::{self, Msg};
use ferry_cli::chainctl;

/// The NF process runs as a uid ferryd allocated (no account's), with no
/// capabilities and no_new_privs; returns the uid.
fn assert_unprivileged(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("NF /proc status");
    let field =
        |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string()).unwrap_or_default();
    let uids: Vec<u32> = field("Uid:").split_whitespace().map(|u| u.parse().unwrap()).collect();
    let range = ferryd::users::DEFAULT_RANGE;
    assert!(
        uids.len() == 4 && uids.iter().all(|&u| u == uids[0] && (range.first..range.first + range.count).contains(&u)),
        "uids of NF pid {pid}: {uids:?}, not one allocated uid"
    );
    for cap in ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:"] {
        assert_eq!(field(cap), "0000000000000000", "{cap} of NF pid {pid}");
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_unreachable_by_its_uid(pid, uids[0]);
    uids[0]
}

/// The NF is not dumpable, so a process with exactly its credentials (its
/// uid, no capabilities, no_new_privs) cannot list or open its fds nor
/// read its memory through /proc: even a process of the NF's own user
/// cannot map its UMEM.
fn assert_unreachable_by_its_uid(pid: u32, uid: u32) {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}/fd")).expect("NF /proc entry").uid();
    assert_eq!(owner, 0, "NF pid {pid} is not dumpable: its /proc entries belong to root");
    let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={uid}"));
    for path in [format!("/proc/{pid}/fd/"), format!("/proc/{pid}/fd/3"), format!("/proc/{pid}/mem")] {
        let out = std::process::Command::new("setpriv")
            .args([reuid.as_str(), regid.as_str(), "--clear-groups", "--no-new-privs", "--inh-caps=-all"])
            .args(["head", "-c", "1", &path])
            .output()
            .expect("run setpriv (util-linux)");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("Permission denied"), "uid {uid} read {path}: {err}");
    }
}

#[test]
fn fan_out_and_fan_in_forward_generator_traffic_with_consistent_counters() {
    if !privileged("fan_out_and_fan_in") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "chain-e2e.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("fan");
    let yaml = format!(
        r#"
name: fan
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: s, domain: main, kind: split }}
  - {{ name: a, domain: main, kind: fwd }}
  - {{ name: b, domain: main, kind: fwd }}
  - {{ name: c, domain: main, kind: l2fwd }}
links:
  - {{ from: in, to: s }}
  - {{ from: s, to: a }}
  - {{ from: s, to: b }}
  - {{ from: a, to: c }}
  - {{ from: b, to: c }}
  - {{ from: c, to: out }}
"#
    );
    let (rc, _) = start(&dir, &yaml);
    let st = rc.status().unwrap();
    let uids: Vec<u32> = ["s", "a", "b", "c"].iter().map(|nf| assert_unprivileged(pid_of(&st, nf))).collect();
    assert!(uids.iter().all(|&u| u == uids[0]), "one domain, one uid: {uids:?}");
    let sent = 20_000u64;
    let report = generator_to_sink(&tb, sent, 20_000, 64);
    let got = u(&report, "/packets");
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert!(got >= sent * 9 / 10, "only {got} of {sent} arrived: {report:#}");
    assert_eq!(c(&st, "c", "tx_port"), got, "c sent exactly what the sink got");
    assert_eq!(c(&st, "s", "rx_port"), c(&st, "s", "to_nf"), "split forwards everything");
    let (a, b) = (c(&st, "a", "rx_ring"), c(&st, "b", "rx_ring"));
    assert!(a > 0 && b > 0, "both branches carry flows: a={a} b={b}");
    assert_eq!(a + b, c(&st, "s", "to_nf"), "fan-out: the branches got what split sent");
    assert_eq!(c(&st, "c", "rx_ring"), c(&st, "a", "to_nf") + c(&st, "b", "to_nf"), "fan-in");
    assert_eq!(c(&st, "c", "rx_ring"), c(&st, "c", "tx_port"));
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

fn memory_chain(name: &str, src_args: &str, mid: &str) -> String {
    format!(
        r#"
name: {name}
domains: [ {{ name: main, frames: 4096, ring_size: 512 }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: [{src_args}] }}
  - {{ name: mid, domain: main, {mid} }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: mid }}
  - {{ from: mid, to: snk }}
"#
    )
}

#[test]
fn kill_9_of_an_nf_under_load_leaks_no_frame_and_the_chain_resumes() {
    if !privileged("kill_9") {
        return;
    }
    let dir = TempDir::new("kill9");
    let (rc, _) = start(&dir, &memory_chain("kill9", "\"rate=300000\"", "kind: fwd"));
    for round in 1..=3u32 {
        wait_until("traffic before the kill", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 0));
        let before = rc.status().unwrap();
        let pid = pid_of(&before, "mid");
        // SAFETY: plain kill of the NF process ferryd started.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        wait_until("mid to be restarted", || {
            rc.status().is_ok_and(|s| s.nfs.iter().any(|n| n.name == "mid" && n.connected && n.restarts >= round))
        });
        let restarted = rc.status().unwrap();
        assert_ne!(pid_of(&restarted, "mid"), pid);
        let sunk = c(&restarted, "snk", "sunk");
        wait_until("traffic after the restart", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 10_000));
    }
    let st = rc.status().unwrap();
    eprintln!("{}", chainctl::status_table(&st));
    assert!(st.domains[0].reclaimed > 0, "ferryd reclaimed the dead NF's frames");
    assert!(
        c(&st, "src", "drop_down") + c(&st, "src", "bp_blocks") > 0,
        "upstream saw the dead NF (drops or backpressure)"
    );
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

#[test]
fn ferryd_answers_bad_messages_with_errors_and_checks_credentials() {
    if !privileged("bad_messages") {
        return;
    }
    let dir = TempDir::new("proto");
    let (rc, _) = start(&dir, &memory_chain("proto", "\"rate=1000\"", "kind: fwd"));
    let expect_error = |s: &UnixStream, what: &str| match proto::recv(s).map(|m| m.0) {
        Ok(Msg::Error { message }) => assert!(message.contains(what), "{message:?} lacks {what:?}"),
        other => panic!("expected an error about {what:?}, got {other:?}"),
    };
    let s = UnixStream::connect(&rc.socket).unwrap();
    (&s).write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    expect_error(&s, "bad magic");
    let s = UnixStream::connect(&rc.socket).unwrap();
    (&s).write_all(&[b'F', b'Y', 1, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]).unwrap();
    expect_error(&s, "over the");
    let s = UnixStream::connect(&rc.socket).unwrap();
    proto::send(
        &s,
        &Msg::Hello { chain: String::new(), nf: "nope".into(), pid: 1, counters: vec![], key: String::new() },
        &[],
    )
    .unwrap();
    expect_error(&s, "no NF \"nope\"");
    // A huge name is not echoed back whole (nor logged whole).
    let s = UnixStream::connect(&rc.socket).unwrap();
    proto::send(
        &s,
        &Msg::Hello { chain: String::new(), nf: "n".repeat(900_000), pid: 1, counters: vec![], key: String::new() },
        &[],
    )
    .unwrap();
    match proto::recv(&s).map(|m| m.0) {
        Ok(Msg::Error { message }) => {
            assert!(message.len() < 200 && message.contains("(900000 bytes)"), "{} bytes", message.len())
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // We are root; the NF runs as its domain's allocated uid.
    let s = UnixStream::connect(&rc.socket).unwrap();
    proto::send(
        &s,
        &Msg::Hello { chain: String::new(), nf: "mid".into(), pid: 1, counters: vec![], key: String::new() },
        &[],
    )
    .unwrap();
    expect_error(&s, "is not NF \"mid\"'s user");
    let s = UnixStream::connect(&rc.socket).unwrap();
    proto::send(&s, &Msg::Ok, &[]).unwrap();
    expect_error(&s, "unexpected message");
    // Still serving, and the chain still runs.
    let st = rc.status().unwrap();
    assert!(st.nfs.iter().all(|n| n.connected && n.restarts == 0), "{st:?}");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

#[test]
fn copy_link_between_domains_delivers_copies() {
    if !privileged("copy_link") {
        return;
    }
    let dir = TempDir::new("copy");
    let yaml = r#"
name: copy
domains: [ { name: a, frames: 2048 }, { name: b, frames: 2048 } ]
nfs:
  - { name: src, domain: a, kind: source, args: ["rate=100000"] }
  - { name: f, domain: b, kind: fwd }
  - { name: snk, domain: b, kind: sink }
links:
  - { from: src, to: f }
  - { from: f, to: snk }
"#;
    let (rc, _) = start(&dir, yaml);
    // Each trust domain runs as its own allocated uid.
    let st = rc.status().unwrap();
    let uid = |nf: &str| st.nfs.iter().find(|n| n.name == nf).and_then(|n| n.uid).expect("uid in status");
    assert_ne!(uid("src"), uid("f"), "domains a and b share no uid");
    assert_eq!(uid("f"), uid("snk"), "one domain, one uid");
    assert_unprivileged(pid_of(&st, "src"));
    wait_until("copied traffic at the sink", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 20_000));
    // The copies f received never outnumber what src copied. src counts a
    // batch just after it publishes it, so for a moment (longer if src is
    // kept off its CPU) f can be ahead by a batch: wait for src's count,
    // read after f's, to catch up. A copy link that duplicated frames would
    // keep f ahead for good, and the wait would fail.
    wait_until("src's copies to cover what f received", || {
        let received = c(&rc.status().unwrap(), "f", "rx_ring");
        c(&rc.status().unwrap(), "src", "to_copy") >= received
    });
    let st = rc.status().unwrap();
    assert!(c(&st, "snk", "stamped") > 0, "stamps survive the copy");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

#[test]
fn nfs_stop_cleanly_when_ferryd_dies_and_a_new_ferryd_starts_afresh() {
    if !privileged("ferryd_restart") {
        return;
    }
    let dir = TempDir::new("restart");
    let (mut rc, chain) = start(&dir, &memory_chain("restart", "\"rate=100000\"", "kind: fwd"));
    wait_until("traffic at the sink", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 0));
    let st = rc.status().unwrap();
    let pids: Vec<u32> = ["src", "mid", "snk"].iter().map(|n| pid_of(&st, n)).collect();
    rc.child.kill().unwrap();
    rc.child.wait().unwrap();
    wait_until("the NFs to exit after ferryd died", || pids.iter().all(|&p| gone(p)));
    drop(rc);
    let socket = dir.path("ferryd.sock");
    let rc = chainctl::start(&chain, &socket, false).expect("second ferryd");
    wait_until("traffic with the new ferryd", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > 10_000));
    let st = rc.status().unwrap();
    assert!(st.nfs.iter().all(|n| n.restarts == 0), "fresh NFs, not restarts: {st:?}");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

/// PORTS_TESTBED plus a `legacy` namespace behind d2.
fn legacy_testbed() -> String {
    let legacy_ns = "  - name: legacy\n    sysctls: { net.ipv6.conf.all.disable_ipv6: \"1\" }\nlinks:\n";
    let legacy_link = "  - a: { ns: dut, dev: d2, mac: \"02:00:00:00:03:02\" }\n    b: { ns: legacy, dev: l0, mac: \"02:00:00:00:03:01\" }\n";
    PORTS_TESTBED.replace("name: chain-ports", "name: chain-legacy").replace("links:\n", legacy_ns) + legacy_link
}

/// A legacy AF_XDP program with its own UMEM (`ferry nf run`, which knows
/// nothing of ferryd) joins the chain through a veth port, unmodified.
#[test]
fn legacy_af_xdp_program_joins_the_chain_through_a_veth_port() {
    if !privileged("legacy_af_xdp") {
        return;
    }
    let tb = testbed(&legacy_testbed(), "chain-legacy.yaml");
    let dut = tb.ns_name("dut").to_string();
    let mut legacy = Ferry::spawn(&tb, "legacy", &["nf", "run", "--dev", "l0", "--mode", "generic", "--json", "l2fwd"]);
    wait_attached(&tb, "legacy", "l0", &mut legacy);
    let dir = TempDir::new("legacy");
    let yaml = format!(
        r#"
name: legacy
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
  - {{ name: leg, netns: {dut}, netdev: d2 }}
  - {{ name: out, netns: {dut}, netdev: d1 }}
nfs:
  - {{ name: x, domain: main, kind: fwd, args: ["by_port=1"] }}
links:
  - {{ from: in, to: x }}
  - {{ from: x, to: leg }}
  - {{ from: leg, to: x }}
  - {{ from: x, to: out }}
"#
    );
    let (rc, _) = start(&dir, &yaml);
    let report = generator_to_sink(&tb, 5000, 10_000, 64);
    let got = u(&report, "/packets");
    let st = rc.status().unwrap();
    let legacy = legacy.stop_json();
    let l2 = nf_counters(&legacy, "l2fwd");
    eprintln!("{}\nlegacy: {legacy:#}", chainctl::status_table(&st));
    assert!(got >= 4500, "only {got} of 5000 came back through the legacy program: {report:#}");
    assert!(common::counter(&l2, "tx") >= got, "the legacy l2fwd bounced them");
    assert_eq!(c(&st, "x", "tx_port"), c(&st, "x", "rx_port"), "x sent everything it got, both ways");
    assert!(c(&st, "x", "rx_port") >= 2 * got, "x saw each frame twice: from the generator and back from legacy");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// Preferred busy polling on a veth port is refused, saying why, before
/// ferryd touches the device: a veth's AF_XDP sockets get no NAPI id, so
/// a busy poll would poll nothing.
#[test]
fn preferred_busy_polling_on_a_veth_port_is_refused_and_leaves_the_device_alone() {
    if !privileged("prefer_busy_poll_veth") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "chain-ports.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("napi");
    let yaml = format!(
        "name: napi\ndomains: [ {{ name: main }} ]\nports:\n  - {{ name: in, netns: {dut}, netdev: d0, xdp_mode: driver }}\nnfs:\n  - \
         {{ name: x, domain: main, kind: l2fwd, offload: never, poll: {{ prefer_busy_poll: {{ usecs: 50 }} }} }}\nlinks:\n  - {{ from: \
         in, to: x }}\n  - {{ from: x, to: in }}\n"
    );
    let (rc, _) = start(&dir, &memory_chain("first", "\"count=1\"", "kind: fwd"));
    let napi = dir.path("napi.yaml");
    std::fs::write(&napi, yaml).unwrap();
    let refused = chainctl::deploy(&rc.admin, &napi).expect_err("refused on a veth");
    let text = format!("{refused:#}");
    assert!(text.contains("not supported: preferred busy polling needs a device whose XDP receive queue"), "{text}");
    // Generic-mode XDP names no NAPI either, on any device.
    let generic = std::fs::read_to_string(&napi).unwrap().replace("xdp_mode: driver", "xdp_mode: generic");
    std::fs::write(&napi, generic).unwrap();
    let refused = chainctl::deploy(&rc.admin, &napi).expect_err("refused in generic mode");
    assert!(format!("{refused:#}").contains("preferred busy polling needs driver-mode XDP"), "{refused:#}");
    for attr in ["napi_defer_hard_irqs", "gro_flush_timeout"] {
        assert_eq!(ferry_sys::devattr::read(Some(&dut), "d0", attr).unwrap(), "0", "{attr} untouched");
    }
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// Out-link to the kernel stack: ferryd's TAP device hands frames to the
/// kernel as if they had arrived on it.
#[test]
fn frames_sent_to_the_kernel_hop_reach_the_kernel_stack() {
    if !privileged("kernel_hop") {
        return;
    }
    let tb = testbed(PORTS_TESTBED, "chain-kernel.yaml");
    let dut = tb.ns_name("dut").to_string();
    let dir = TempDir::new("kernel");
    let yaml = format!(
        r#"
name: kernel
domains: [ {{ name: main }} ]
ports:
  - {{ name: in, netns: {dut}, netdev: d0 }}
kernel:
  - {{ name: host, netns: {dut}, dev: fk0, addrs: ["10.0.9.1/24"] }}
nfs:
  - {{ name: x, domain: main, kind: fwd }}
links:
  - {{ from: in, to: x }}
  - {{ from: x, to: host }}
"#
    );
    let (rc, _) = start(&dir, &yaml);
    let before = link_packets(&dut, "fk0", "rx");
    send_from_gen(&tb, 2000, 20000, 64);
    // Wait for the event itself: (nearly) all frames received, every one of
    // them handed to the kernel, and the kernel's count matching; a loss
    // shows as this wait timing out. Not just a moment between bursts.
    wait_until("every frame the NF received at the kernel's fk0", || {
        rc.status().is_ok_and(|s| {
            let (rx, to_kernel) = (c(&s, "x", "rx_port"), c(&s, "x", "to_kernel"));
            rx >= 1900 && to_kernel == rx && link_packets(&dut, "fk0", "rx") - before == to_kernel
        })
    });
    // The port's XDP program shows in the metrics: every frame the NF got
    // was redirected to its socket.
    let addr = chainctl::metrics_addr(&rc.admin).unwrap().expect("metrics served");
    let (_, text) = http_get(&addr, "/metrics");
    let redirected: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("ferry_xdp_packets_total{chain=\"kernel\",port=\"in\",verdict=\"redirect\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no XDP verdicts of port in:\n{text}"));
    assert!(redirected >= c(&rc.status().unwrap(), "x", "rx_port"), "{redirected} redirected");
    assert_conserved(&rc);
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// src -> a (fwd) -> b (l2fwd) -> c (fwd) -> snk in memory, the three in
/// the middle fused into `a` when `fuse` is auto; src makes `count`
/// frames per thread at `rate` (0: flat out).
fn fusable_chain(name: &str, fuse: &str, count: u64, rate: u64) -> String {
    format!(
        r#"
name: {name}
domains: [ {{ name: main, frames: 4096, ring_size: 512, fuse: {fuse} }} ]
nfs:
  - {{ name: src, domain: main, kind: source, args: ["count={count}", "rate={rate}"] }}
  - {{ name: a, domain: main, kind: fwd }}
  - {{ name: b, domain: main, kind: l2fwd }}
  - {{ name: c, domain: main, kind: fwd }}
  - {{ name: snk, domain: main, kind: sink }}
links:
  - {{ from: src, to: a }}
  - {{ from: a, to: b }}
  - {{ from: b, to: c }}
  - {{ from: c, to: snk }}
"#
    )
}

#[test]
fn a_fused_chain_counts_every_frame_as_its_unfused_self_does() {
    if !privileged("fused_counts") {
        return;
    }
    const COUNT: u64 = 20_000;
    for fuse in ["never", "auto"] {
        let dir = TempDir::new(&format!("fused-{fuse}"));
        let (rc, _) = start(&dir, &fusable_chain(&format!("fuse-{fuse}"), fuse, COUNT, 0));
        let st = wait_for("every frame at the sink", || {
            rc.status().ok().filter(|s| c(s, "snk", "sunk") >= COUNT && c(s, "src", "made") == COUNT)
        });
        eprintln!("{}", chainctl::status_table(&st));
        let names: Vec<&str> = st.nfs.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(c(&st, "snk", "sunk"), COUNT, "fuse: {fuse}");
        if fuse == "auto" {
            // One NF runs a, b and c; b's own counters are still there.
            assert_eq!(names, ["src", "a", "snk"]);
            assert_eq!(c(&st, "a", "rx_ring"), COUNT);
            assert_eq!(c(&st, "a", "b.rx"), COUNT);
            assert_eq!(c(&st, "a", "b.tx"), COUNT);
        } else {
            assert_eq!(names, ["src", "a", "b", "c", "snk"]);
            for nf in ["a", "b", "c"] {
                assert_eq!(c(&st, nf, "rx_ring"), COUNT, "{nf}");
            }
            assert_eq!(c(&st, "b", "tx"), COUNT);
        }
        assert_conserved(&rc);
        rc.shutdown().unwrap();
    }
}

#[test]
fn kill_9_of_a_fused_nf_under_load_leaks_no_frame_and_the_chain_resumes() {
    if !privileged("fused_kill_9") {
        return;
    }
    let dir = TempDir::new("fused-kill9");
    let (rc, _) = start(&dir, &fusable_chain("fused-kill9", "auto", 0, 300_000));
    let before = wait_for("traffic before the kill", || rc.status().ok().filter(|s| c(s, "snk", "sunk") > 0));
    let pid = pid_of(&before, "a");
    // SAFETY: plain kill of the NF process ferryd started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    wait_until("the fused NF to be restarted", || {
        rc.status().is_ok_and(|s| s.nfs.iter().any(|n| n.name == "a" && n.connected && n.restarts >= 1))
    });
    let restarted = rc.status().unwrap();
    assert_ne!(pid_of(&restarted, "a"), pid);
    let sunk = c(&restarted, "snk", "sunk");
    wait_until("traffic after the restart", || rc.status().is_ok_and(|s| c(&s, "snk", "sunk") > sunk + 10_000));
    // Whatever the dead NF held at the kill (nothing, if it was between
    // bursts) is back: every frame is in one place.
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}

#[test]
fn a_fused_flow_monitor_exports_every_frame_to_the_fused_nfs_flow_table() {
    if !privileged("fused_monitor") {
        return;
    }
    const COUNT: u64 = 6_400;
    let yaml = fusable_chain("fused-mon", "auto", COUNT, 0)
        .replace("name: b, domain: main, kind: l2fwd", "name: b, domain: main, kind: flow-monitor");
    let dir = TempDir::new("fused-mon");
    let (rc, _) = start(&dir, &yaml);
    // The source's 64 flows, every frame counted, exported within 100 ms.
    let st = wait_for("every frame in the fused monitor's flows", || {
        rc.status().ok().filter(|s| {
            let a = s.nfs.iter().find(|n| n.name == "a").expect("the fused NF");
            c(s, "snk", "sunk") == COUNT && a.flows.iter().map(|f| f.packets).sum::<u64>() == COUNT
        })
    });
    let a = st.nfs.iter().find(|n| n.name == "a").unwrap();
    assert_eq!(a.flows_total, 64);
    assert_eq!(c(&st, "a", "b.rx"), COUNT);
    assert_conserved(&rc);
    rc.shutdown().unwrap();
}
