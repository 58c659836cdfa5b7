//! FLASH's real-world chains with real traffic, each deployed by ferryd
//! from its example chain file on a veth testbed (gen -> dut -> sink),
//! the firewall's rules a deny of 10.99.0.0/16 ahead of FLASH's 1000:
//!
//! * Fig. 13 (`flash-fig13.yaml`: ARP and ping responders, firewall,
//!   Maglev, l2fwd in C, in a line): ping answered by the responders, a
//!   denied source's frames dropped, stamped UDP frames all out. d0 has
//!   four receive queues, so the responders run four threads (one socket
//!   per queue): ping passes whichever queue the sender's kernel picks,
//!   and the generator sends on each queue in turn.
//! * Fig. 15 (`flash-fig15.yaml`: firewall on four threads -> Maglev ->
//!   two MICA caches in C -> l2fwd in C), fed by `ferry gen xsk --mica` on
//!   four queues, its responses checked by `ferry sink --mica`: every GET
//!   hit's value byte for byte, every SET stored; Maglev keeps a flow on
//!   the cache its table names.
//!
//! In both the NFs' counters add up to what was sent and what the sink
//! saw, and the domain conserves its frames.
//!
//! Needs root and a C compiler; skipped without them, failed under
//! CI=true (as `c_example`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{build_setup, compile, profile_dir, workspace};
use ferry_cli::chainctl::{self, counter, RunningChain};

/// A hang guard only: every wait is for frames, counters or exits.
const HANG_GUARD: Duration = Duration::from_secs(60);
const WORKLOAD: &str = "keys=100000,get=0.9,dist=zipf:0.99,value=64,batch=4";
/// Frames of the allowed run, 125 per queue.
const ALLOWED: u64 = 500;
const DENIED: u64 = 100;
/// The receive and fill rings of port in's sockets: each can hold every
/// frame of a test, on whichever queue they land, so none is lost even
/// while the NFs are kept off their CPUs however long.
const PORT_RING: u64 = 1024;
const _: () = assert!(ALLOWED + DENIED + 3 * ONE_FLOW <= PORT_RING);
const ONE_FLOW: u64 = 100;

/// d0's MAC: the Fig. 13 chain's ARP responder answers with it.
const D0_MAC: &str = "02:00:00:00:01:02";

const TESTBED: &str = r#"
name: NAME
namespaces:
  - name: gen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: sink
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:01:01", addrs: ["10.0.0.1/24"] }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:01:02" }
    queues: 4
  - a: { ns: dut, dev: d1, mac: "02:00:00:00:0f:03" }
    b: { ns: sink, dev: s0, mac: "02:00:00:00:0f:04" }
"#;

/// `ferry ARGS` in namespace `ns`, stdout captured.
fn ferry(tb: &ferry_testbed::Testbed, ns: &str, args: &[&str]) -> Child {
    tb.exec(ns, profile_dir().join("ferry"), args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting ferry")
}

/// Waits for `child` to exit successfully; its stdout as JSON.
fn json_of(child: Child, what: &str) -> serde_json::Value {
    let deadline = Instant::now() + HANG_GUARD;
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish within {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{what} failed: {}", out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A generator run into d0, 512-byte UDP frames (FLASH's size): MICA
/// requests with `mica`, else stamped frames.
fn generate(tb: &ferry_testbed::Testbed, queues: &str, count: u64, flow: &[&str], mica: bool) -> serde_json::Value {
    let mut args = vec!["gen", "xsk", "--dev", "g0", "--queues", queues, "--json"];
    if mica {
        args.extend(["--mica", WORKLOAD]);
    }
    args.extend(["--proto", "udp", "--size", "512", "--rate", "20000", "--dst-mac", D0_MAC]);
    let count = count.to_string();
    args.extend(["--count", &count]);
    for f in flow {
        args.extend(["--set", f]);
    }
    json_of(ferry(tb, "gen", &args), "ferry gen xsk")
}

/// Waits until counter `name`, summed over NFs `nfs`, is `want`.
fn wait_counter(rc: &RunningChain, nfs: &[&str], name: &str, want: u64) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = rc.status().expect("status");
        let have: u64 = nfs.iter().map(|nf| counter(&s, nf, name)).sum();
        if have == want {
            return;
        }
        assert!(Instant::now() < deadline, "{nfs:?} {name} is {have}, not {want}:\n{}", chainctl::status_table(&s));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Example chain file `file`, filled in: the C NFs built into `bin`, the
/// firewall's rules a deny of 10.99.0.0/16 ahead of FLASH's 1000.
fn chain_file(tb: &ferry_testbed::Testbed, file: &str, dir: &Path, bin: &Path) -> PathBuf {
    let examples = workspace().join("examples/chains");
    let rules = dir.join("fw.rules");
    let flash = std::fs::read_to_string(examples.join("flash-fw-1000.rules")).unwrap();
    std::fs::write(&rules, format!("deny src 10.99.0.0/16\n{flash}")).unwrap();
    let text = std::fs::read_to_string(examples.join(file))
        .unwrap()
        .replace("{dut}", tb.ns_name("dut"))
        .replace("{examples}/flash-fw-1000.rules", &rules.display().to_string())
        .replace("{cnf}", &bin.display().to_string())
        // A socket on each of d0's four queues (Fig. 15 has them already).
        .replace("netdev: d0 }", "netdev: d0, queues: 4 }")
        .replace(
            "netdev: d0, queues: 4 }",
            &format!("netdev: d0, queues: 4, rings: {{ rx: {PORT_RING}, fill: {PORT_RING} }} }}"),
        )
        .replace("kind: arp-responder+icmp-echo,", "kind: arp-responder+icmp-echo, threads: 4,");
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

/// What a chain test needs: the C NFs built, the testbed up, and the
/// chain running under ferryd.
struct Setup {
    dir: PathBuf,
    tb: ferry_testbed::Testbed,
    rc: RunningChain,
}

impl Setup {
    fn start(test: &str, name: &str, chain: &str) -> Option<Setup> {
        let (cc, libdir) = build_setup(test)?;
        let dir = std::env::temp_dir().join(format!("ferry-capi-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for nf in ["mica", "l2fwd"] {
            compile(&cc, &workspace().join(format!("examples/c-nf/{nf}.c")), &dir.join(nf), &libdir);
        }
        let spec = ferry_testbed::TestbedSpec::from_yaml_str(&TESTBED.replace("NAME", name), "flash.yaml").unwrap();
        let tb = ferry_testbed::up(&spec).expect("testbed");
        let file = chain_file(&tb, chain, &dir, &dir);
        let quiet = std::env::var_os("FERRY_TEST_VERBOSE").is_none();
        let rc = chainctl::start(&file, &dir.join("ferryd.sock"), quiet).expect("ferryd runs the chain");
        Some(Setup { dir, tb, rc })
    }

    /// `ferry sink ARGS` on s0, ready (its program attached) when this
    /// returns.
    fn sink(&self, args: &[&str]) -> Child {
        let mut all = vec!["sink", "--dev", "s0", "--json", "--duration", "50s"];
        all.extend_from_slice(args);
        let sink = ferry(&self.tb, "sink", &all);
        let deadline = Instant::now() + HANG_GUARD;
        let attached = || {
            let out = Command::new("ip").args(["-n", self.tb.ns_name("sink"), "link", "show", "s0"]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
        };
        while !attached() {
            assert!(Instant::now() < deadline, "the sink did not attach to s0");
            std::thread::sleep(Duration::from_millis(20));
        }
        sink
    }

    fn finish(self) {
        for r in self.rc.audit().expect("audit") {
            assert!(r.conserved(), "domain {} conserves its frames: {r:?}", r.domain);
        }
        self.rc.shutdown().expect("shutdown");
        self.tb.down().expect("testbed down");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_fig13_chain_answers_ping_drops_the_denied_and_forwards_the_rest() {
    let test = "flash_chains::the_fig13_chain_answers_ping_drops_the_denied_and_forwards_the_rest";
    let Some(s) = Setup::start(test, "fig13", "flash-fig13.yaml") else { return };
    // ARP and ICMP for 10.0.0.2 are answered by the responders.
    let ping = s.tb.exec("gen", "ping", ["-c", "3", "-i", "0.2", "-W", "10", "10.0.0.2"]).output().unwrap();
    assert!(
        ping.status.success(),
        "ping through the responders: {}\n{}",
        String::from_utf8_lossy(&ping.stdout),
        chainctl::status_table(&s.rc.status().unwrap())
    );

    let sink = s.sink(&["--count", &ALLOWED.to_string(), "--sent", &ALLOWED.to_string()]);
    let denied = generate(&s.tb, "0", DENIED, &["src-ip=10.99.0.1"], false);
    assert_eq!(denied["sent"], DENIED);
    wait_counter(&s.rc, &["fw"], "drop_denied", DENIED);
    // From each of g0's queues, which a veth hands to a queue of d0.
    let allowed = generate(&s.tb, "0,1,2,3", ALLOWED, &["src-ip=10.0.0.1-10.0.0.8", "flows=64"], false);
    assert_eq!(allowed["sent"], ALLOWED);
    let report = json_of(sink, "ferry sink");
    assert_eq!((report["packets"].as_u64(), report["stamped"].as_u64()), (Some(ALLOWED), Some(ALLOWED)), "{report:#}");
    assert_eq!(report["lost"], 0, "{report:#}");

    let st = s.rc.status().unwrap();
    let c = |nf: &str, name: &str| counter(&st, nf, name);
    // One process answers ARP and ping (at least one ARP reply, three
    // echo replies) and passes every UDP frame on.
    let table = chainctl::status_table(&st);
    assert!(c("resp", "tx") >= 4 && c("resp", "unclaimed") == DENIED + ALLOWED, "{table}");
    assert_eq!((c("fw", "pass"), c("fw", "drop_denied"), c("fw", "drop_malformed")), (ALLOWED, DENIED, 0));
    assert_eq!(c("fwd", "swapped"), ALLOWED, "l2fwd forwarded every allowed frame");
    // Every queue of d0 has a socket: nothing reached one without.
    assert_eq!(chainctl::port_verdict(&st, "in", "no_socket"), 0, "{table}");
    s.finish();
}

#[test]
fn the_fig15_chain_answers_mica_requests_through_four_nfs() {
    let test = "flash_chains::the_fig15_chain_answers_mica_requests_through_four_nfs";
    let Some(s) = Setup::start(test, "fig15", "flash-fig15.yaml") else { return };
    let (tb, rc) = (&s.tb, &s.rc);
    let expected = ALLOWED + ONE_FLOW;
    let sink = s.sink(&["--mica", WORKLOAD, "--count", &expected.to_string()]);

    // A denied source: the firewall drops every request.
    let denied = generate(tb, "0", DENIED, &["src-ip=10.99.0.1"], true);
    assert_eq!(denied["sent"], DENIED);
    wait_counter(rc, &["fw"], "drop_denied", DENIED);

    // Allowed sources, 64 flows over four queues: every request answered.
    let allowed = generate(tb, "0,1,2,3", ALLOWED, &["src-ip=10.0.0.1-10.0.0.8", "dst-ip=10.0.1.1", "flows=64"], true);
    assert_eq!(allowed["sent"], ALLOWED);
    wait_counter(rc, &["fw"], "pass", ALLOWED);

    // One flow: all its requests at the one cache Maglev's table names,
    // counted from when the caches have served all of the run before.
    wait_counter(rc, &["kv1", "kv2"], "requests", 4 * ALLOWED);
    let before = rc.status().unwrap();
    let one = ["src-ip=10.0.0.9", "dst-ip=10.0.1.1", "src-port=4000", "dst-port=9"];
    let single = generate(tb, "0", ONE_FLOW, &one, true);
    assert_eq!(single["sent"], ONE_FLOW);
    let report = json_of(sink, "ferry sink --mica");
    let st = rc.status().unwrap();
    let table = ferry_catalog::host::maglev_table(&["kv1".into(), "kv2".into()], 65537).unwrap();
    let h = ferry_parallel::nfs::maglev::flow_hash([10, 0, 0, 9].into(), [10, 0, 1, 1].into(), 17, 4000, 9);
    let (to, other) = if table.lookup(h).unwrap() == 0 { ("kv1", "kv2") } else { ("kv2", "kv1") };
    let grew = |nf: &str| counter(&st, nf, "requests") - counter(&before, nf, "requests");
    assert_eq!((grew(to), grew(other)), (4 * ONE_FLOW, 0), "the flow stays on {to}");

    // What the sink saw: every batch answered, every value right.
    let m = &report["mica"];
    let sent_gets = allowed["mica"]["gets"].as_u64().unwrap() + single["mica"]["gets"].as_u64().unwrap();
    let sent_sets = allowed["mica"]["sets"].as_u64().unwrap() + single["mica"]["sets"].as_u64().unwrap();
    assert_eq!((report["packets"].as_u64(), m["batches"].as_u64()), (Some(expected), Some(expected)), "{report:#}");
    assert_eq!((m["wrong"].as_u64(), m["malformed"].as_u64()), (Some(0), Some(0)), "{m:#}");
    assert_eq!(m["get_hits"].as_u64().unwrap() + m["get_misses"].as_u64().unwrap(), sent_gets, "{m:#}");
    assert_eq!(m["sets_stored"].as_u64().unwrap() + m["sets_failed"].as_u64().unwrap(), sent_sets, "{m:#}");
    assert!(m["get_hits"].as_u64().unwrap() > 0 && m["sets_stored"].as_u64().unwrap() > 0, "{m:#}");

    // The NFs' counters add up to it.
    let c = |nf: &str, name: &str| counter(&st, nf, name);
    assert_eq!(c("fw", "rx"), DENIED + expected);
    assert_eq!((c("fw", "pass"), c("fw", "drop_denied"), c("fw", "drop_malformed")), (expected, DENIED, 0));
    assert_eq!(c("kv1", "requests") + c("kv2", "requests"), 4 * expected);
    assert_eq!(c("kv1", "gets") + c("kv2", "gets"), sent_gets);
    let hits = c("kv1", "get_hits") + c("kv2", "get_hits");
    assert_eq!(hits, m["get_hits"].as_u64().unwrap(), "the caches' hits are the sink's");
    assert_eq!(c("kv1", "drop_malformed") + c("kv2", "drop_malformed"), 0);
    assert_eq!(c("fwd", "swapped"), expected, "l2fwd forwarded every response");
    s.finish();
}

/// `ferry bench realworld`'s Table 2 row for the MICA cache: the C cache
/// behind the in-chain source making MICA request batches, answered on
/// to the sink.
#[test]
fn table2_measures_the_mica_cache_behind_a_mica_source() {
    let Some((cc, libdir)) = build_setup("flash_chains::table2_measures_the_mica_cache_behind_a_mica_source") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ferry-capi-table2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    compile(&cc, &workspace().join("examples/c-nf/mica.c"), &dir.join("mica"), &libdir);
    let rules = workspace().join("examples/chains/flash-fw-1000.rules");
    let out = dir.join("realworld.json");
    let st = Command::new(profile_dir().join("ferry"))
        .args(["bench", "realworld", "--scenarios", "table2", "--warmup", "100ms", "--window", "200ms"])
        .arg("--rules")
        .arg(&rules)
        .arg("--cnf")
        .arg(&dir)
        .arg("--json")
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("ferry bench realworld");
    assert!(st.success(), "ferry bench realworld: {st}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let row = r["rows"].as_array().unwrap().iter().find(|x| x["variant"] == "mica (C)").expect("a MICA row");
    assert!(row["mpps"].as_f64().unwrap() > 0.0, "the cache answered on to the sink: {row}");
    assert_eq!(row["notes"]["conserved"], 1.0, "{row}");
    assert_eq!(r["missing"].as_array().map(Vec::len), Some(0), "{r:#}");
    let _ = std::fs::remove_dir_all(&dir);
}
