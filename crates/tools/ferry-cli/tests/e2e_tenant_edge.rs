//! Tenant classification at the edge (the SmartNIC paper's, on XDP): two
//! tenants' traffic arrives mixed on one device; the classifier decides
//! each frame's tenant and it lands in that tenant's memory, at that
//! tenant's NF, and nowhere else. Run twice: `classify: xdp` (the edge's
//! XDP program redirects into a device per tenant entry) and `classify:
//! router` (a trusted router NF receives everything and copies). Both
//! must deliver exactly the same frames to each tenant.

mod common;

use common::chain::*;
use common::*;
use ferry_chain::proto::Status;

fn chain(dut: &str, mode: &str) -> String {
    format!(
        r#"
name: edge
tenants: [ {{ name: acme }}, {{ name: zeta }} ]
domains:
  - {{ name: a, frames: 1024, tenant: acme }}
  - {{ name: z, frames: 1024, tenant: zeta }}
ports:
  - name: edge
    netns: {dut}
    netdev: d0
    classify:
      mode: {mode}
      rules:
        - {{ dst: 10.1.0.0/16, to: acme-in }}
        - {{ vlan: 200, to: zeta-in }}
        - {{ src: 10.9.0.0/16, dport: 53, to: zeta-in }}
  - {{ name: acme-in, via: edge, tenant: acme }}
  - {{ name: zeta-in, via: edge, tenant: zeta }}
nfs:
  - {{ name: acme-sink, domain: a, kind: sink }}
  - {{ name: zeta-sink, domain: z, kind: sink }}
links:
  - {{ from: acme-in, to: acme-sink }}
  - {{ from: zeta-in, to: zeta-sink }}
"#
    )
}

/// A UDP frame from `src` to `dst`:`dport`, tagged with `vlan` if given.
fn frame(src: [u8; 4], dst: [u8; 4], dport: u16, vlan: Option<u16>) -> Vec<u8> {
    use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 1, 1], dst_mac: [2, 0, 0, 0, 1, 2], frame_len: 64 };
    let t = FiveTuple { src_ip: src.into(), dst_ip: dst.into(), src_port: 4000, dst_port: dport, proto: L4Proto::Udp };
    let mut f = vec![0u8; spec.frame_len];
    build_frame(&spec, &t, None, &mut f).unwrap();
    if let Some(vid) = vlan {
        f.splice(12..12, [0x81, 0x00, (vid >> 8) as u8, vid as u8]);
    }
    f
}

/// What was sent, by where it must end.
struct Mix {
    frames: Vec<Vec<u8>>,
    acme: u64,
    zeta: u64,
    unmatched: u64,
    malformed: u64,
}

/// acme's subnet, zeta's VLAN, zeta's DNS clients, frames no rule takes
/// (another subnet; zeta's clients to another port) and malformed ones
/// (an IPv4 header cut short), interleaved.
fn mix() -> Mix {
    let mut frames = Vec::new();
    for i in 0..300u16 {
        frames.push(frame([10, 0, 0, 1], [10, 1, (i >> 8) as u8, i as u8], 9, None));
        if i % 3 == 0 {
            frames.push(frame([10, 0, 0, 2], [10, 2, 0, 1], 9, Some(200)));
        }
        if i % 3 == 1 {
            frames.push(frame([10, 9, 0, (i % 250) as u8], [10, 2, 0, 1], 53, None));
        }
        if i % 6 == 2 {
            frames.push(frame([10, 9, 0, 1], [10, 2, 0, 1], 54, None));
        }
        if i % 15 == 4 {
            frames.push(frame([10, 0, 0, 1], [10, 1, 0, 1], 9, None)[..30].to_vec());
        }
    }
    Mix { frames, acme: 300, zeta: 200, unmatched: 50, malformed: 20 }
}

/// Frames sent before waiting for the edge to take them.
const CHUNK: usize = 64;

fn sunk(st: &Status, nf: &str) -> u64 {
    c(st, nf, "sunk")
}

/// Frames no tenant got: what no rule took, and the malformed, as the
/// classifier (xdp) or the router NF counted them.
fn not_delivered(st: &Status, mode: &str) -> u64 {
    if mode != "xdp" {
        return c(st, "edge-router", "unmatched") + c(st, "edge-router", "drop_malformed");
    }
    let edge = st.ports.iter().find(|p| p.name == "edge").expect("the edge port's status");
    let malformed = edge.verdicts.iter().find(|v| v.0 == "malformed").map_or(0, |v| v.1);
    edge.classified.as_ref().map_or(0, |c| c.unmatched) + malformed
}

fn receiving(st: &Status) -> bool {
    st.nfs.iter().all(|n| n.connected && !n.rings.is_empty() && n.rings.iter().all(|r| r.loops >= 2))
}

/// Runs the chain in `mode`, sends the mix into d0 and returns the status
/// once both tenants' sinks hold what they were sent and the classifier
/// has counted the rest.
fn run(mode: &str) -> Status {
    let tb = testbed(GEN_DUT_TESTBED, &format!("e2e_tenant_edge/{mode}.yaml"));
    let (dut, gen) = (tb.ns_name("dut").to_string(), tb.ns_name("gen").to_string());
    let dir = TempDir::new(&format!("edge-{mode}"));
    let (rc, _) = start(&dir, &chain(&dut, mode));
    wait_until("every NF receiving", || rc.status().is_ok_and(|s| receiving(&s)));
    let m = mix();
    // Where a frame is counted once a socket took it off its ring: a
    // tenant's (xdp mode) or the router's, or the classifier dropped it.
    let taken = |st: &Status| match mode {
        "xdp" => c(st, "acme-sink", "rx_port") + c(st, "zeta-sink", "rx_port") + not_delivered(st, mode),
        _ => c(st, "edge-router", "rx_port"),
    };
    // In chunks well under a socket's rings, each taken off them before
    // the next: a burst the receiver has no CPU for would overflow its
    // receive ring (the kernel drops and counts that, and this test counts
    // frames).
    in_netns(&gen, || {
        let sock = RawSock::open("g0");
        for (i, chunk) in m.frames.chunks(CHUNK).enumerate() {
            chunk.iter().for_each(|f| sock.send(f));
            let sent = (i * CHUNK + chunk.len()) as u64;
            wait_until("the edge took every frame sent", || rc.status().is_ok_and(|st| taken(&st) >= sent));
        }
    });
    let st = wait_for("both tenants hold their frames and the rest is counted", || {
        let st = rc.status().ok()?;
        let done = sunk(&st, "acme-sink") >= m.acme && sunk(&st, "zeta-sink") >= m.zeta;
        (done && not_delivered(&st, mode) >= m.unmatched + m.malformed).then_some(st)
    });
    assert_eq!(sunk(&st, "acme-sink"), m.acme, "acme's sink holds acme's frames, no more");
    assert_eq!(sunk(&st, "zeta-sink"), m.zeta, "zeta's sink holds zeta's frames, no more");
    assert_conserved(&rc);
    let links = || String::from_utf8(tb.exec("dut", "ip", ["-o", "link", "show"]).output().unwrap().stdout).unwrap();
    if mode == "xdp" {
        // Each entry's sending end drops what a tenant's sockets send back.
        let closed = links().lines().filter(|l| l.contains("fyl") && l.contains("ferry_drop")).count();
        assert_eq!(closed, 2, "an XDP drop on each entry's sending end:\n{}", links());
        let addr = ferry_cli::chainctl::metrics_addr(&rc.admin).unwrap().expect("ferryd serves metrics");
        let (_, metrics) = http_get(&addr, "/metrics");
        let line = "ferry_classifier_frames_total{chain=\"edge\",port=\"edge\",rule=\"0\",entry=\"acme-in\"} 300";
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
        let pool = "ferry_domain_frames{chain=\"edge\",domain=\"a\",tenant=\"acme\"} 1024";
        assert!(metrics.lines().any(|l| l == pool), "{pool} in:\n{metrics}");
    }
    // Removing the chain takes the classifier and the entries' devices
    // away while ferryd runs on (a redeploy may make them again at once).
    ferry_cli::chainctl::remove(&rc.admin, "edge").expect("remove the chain");
    wait_until("the entries' devices gone with the chain", || !links().contains("fyl"));
    let d0 = String::from_utf8(tb.exec("dut", "ip", ["link", "show", "dev", "d0"]).output().unwrap().stdout).unwrap();
    assert!(!d0.contains("xdp"), "the classifier left d0: {d0}");
    drop(rc);
    down_and_check(tb);
    st
}

#[test]
fn xdp_classification_puts_each_frame_in_its_tenants_memory() {
    if !privileged("xdp_classification_puts_each_frame_in_its_tenants_memory") {
        return;
    }
    let st = run("xdp");
    let edge = st.ports.iter().find(|p| p.name == "edge").unwrap();
    let classified = edge.classified.as_ref().expect("the classifier's counts");
    let per_rule: Vec<(&str, u64)> = classified.rules.iter().map(|(_, entry, n)| (entry.as_str(), *n)).collect();
    assert_eq!(per_rule, [("acme-in", 300), ("zeta-in", 100), ("zeta-in", 100)]);
    assert_eq!(classified.unmatched, 50);
    let verdict = |name: &str| edge.verdicts.iter().find(|v| v.0 == name).map_or(0, |v| v.1);
    assert_eq!((verdict("redirect"), verdict("drop"), verdict("malformed")), (500, 50, 20));
    // No router: each tenant's NF is the only process of its chain part.
    assert_eq!(st.nfs.len(), 2, "{:?}", st.nfs.iter().map(|n| &n.name).collect::<Vec<_>>());
}

#[test]
fn router_classification_delivers_the_same() {
    if !privileged("router_classification_delivers_the_same") {
        return;
    }
    let st = run("router");
    assert_eq!(c(&st, "edge-router", "classified"), 500);
    assert_eq!(c(&st, "edge-router", "unmatched"), 50);
    assert_eq!(c(&st, "edge-router", "drop_malformed"), 20);
    let router = st.nfs.iter().find(|n| n.name == "edge-router").expect("the router NF");
    let tenants: Vec<u32> = ["acme-sink", "zeta-sink"]
        .iter()
        .map(|nf| st.nfs.iter().find(|n| &n.name == nf).and_then(|n| n.uid).expect("uid"))
        .collect();
    assert!(!tenants.contains(&router.uid.expect("uid")), "the router runs as neither tenant");
}

/// A bad tenant table never reaches ferryd: `ferry chain check` (which
/// `ferry chain deploy` runs first) names the file, the line and the field.
#[test]
fn a_bad_tenant_table_is_refused_with_file_line_and_field() {
    let dir = TempDir::new("edge-bad");
    for (good, bad, line, field, what) in [
        ("dst: 10.1.0.0/16", "dst: 10.1.0.1/16", 14, "ports[0].classify.rules[0].dst: ", "host bits set"),
        ("vlan: 200", "vlan: 4097", 15, "ports[0].classify.rules[1].vlan: ", "0..=4095"),
        ("to: acme-in }", "to: acme-sink }", 14, "ports[0].classify.rules[0].to: ", "not a tenant entry"),
    ] {
        let path = dir.path("chain.yaml");
        std::fs::write(&path, chain("dut", "xdp").replacen(good, bad, 1)).unwrap();
        let r = Ferry::spawn_here(&["chain", "check", path.to_str().unwrap()]).finish(HANG_GUARD);
        assert!(!r.status.success(), "{bad:?} was accepted:\n{}", r.stdout);
        assert!(r.stderr.contains(&format!("{}:{line}:", path.display())), "line {line} in: {}", r.stderr);
        assert!(r.stderr.contains(field) && r.stderr.contains(what), "{field}{what} in: {}", r.stderr);
    }
}

/// `ferry bench tenant` runs both figures' variants and reports them side
/// by side (a smoke test: figures are not asserted).
#[test]
fn bench_tenant_smoke() {
    if !privileged("bench_tenant") {
        return;
    }
    let dir = TempDir::new("bench-tenant");
    let json = dir.path("tenant.json");
    let args = ["bench", "tenant", "--sizes", "64", "--runs", "1", "--window", "300ms", "--latency-frames", "500"];
    let out = std::process::Command::new(FERRY)
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .output()
        .expect("run ferry bench tenant");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Fig. 5") && stdout.contains("Fig. 6"), "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let modes: Vec<&str> =
        v["classify_samples"].as_array().unwrap().iter().map(|s| s["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["xdp", "router"], "{v}");
    let cases: Vec<&str> =
        v["scan_samples"].as_array().unwrap().iter().map(|s| s["variant"].as_str().unwrap()).collect();
    assert_eq!(cases, ["xdp-scan", "nf-scan", "forward"], "{v}");
    // Every case reports its latency fields (null when a loaded machine
    // let no stamped frame through: figures are the benchmark's business).
    for s in v["scan_samples"].as_array().unwrap() {
        assert!(s["p50_us"].is_number() || s["p50_us"].is_null(), "{s}");
    }
}

/// A ferryd killed before it could clean up leaves its entries' devices
/// behind; the next ferryd to make devices in that namespace sweeps them
/// (their names carry the pid of the ferryd that made them).
#[test]
fn a_killed_ferryds_devices_are_swept_by_the_next() {
    if !privileged("a_killed_ferryds_devices_are_swept_by_the_next") {
        return;
    }
    let tb = testbed(GEN_DUT_TESTBED, "e2e_tenant_edge/killed.yaml");
    let dut = tb.ns_name("dut").to_string();
    let links = || String::from_utf8(tb.exec("dut", "ip", ["-o", "link", "show"]).output().unwrap().stdout).unwrap();
    let made_by = |pid: u32| {
        let tag = format!("fyl{pid:06x}");
        links().lines().filter(|l| l.contains(&tag)).count()
    };
    let first_dir = TempDir::new("edge-killed");
    let (mut first, _) = start(&first_dir, &chain(&dut, "xdp"));
    let killed = first.child.id();
    assert_eq!(made_by(killed), 4, "two entries, two ends each:\n{}", links());
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(made_by(killed), 4, "SIGKILL leaves them:\n{}", links());
    let second_dir = TempDir::new("edge-after");
    let (second, _) = start(&second_dir, &chain(&dut, "xdp"));
    assert_eq!(made_by(killed), 0, "the dead ferryd's devices are gone:\n{}", links());
    assert_eq!(made_by(second.child.id()), 4, "the new ferryd's are there:\n{}", links());
    second.shutdown().expect("ferryd stops");
    down_and_check(tb);
}
