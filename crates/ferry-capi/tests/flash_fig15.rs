//! FLASH's Fig. 15 chain with real traffic: `examples/chains/flash-fig15.yaml`
//! (firewall on four threads -> Maglev -> two MICA caches in C -> l2fwd in
//! C) deployed by ferryd on a veth testbed, fed by `ferry gen xsk --mica`
//! on four queues, its responses checked by `ferry sink --mica`: every GET
//! hit's value byte for byte, every SET stored. The firewall's deny rule
//! drops a denied source's requests, Maglev keeps a flow on the cache its
//! table names, and the NFs' counters add up to what the sink saw.
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

const TEST: &str = "flash_fig15::the_fig15_chain_answers_mica_requests_through_four_nfs";
/// A hang guard only: every wait is for frames, counters or exits.
const HANG_GUARD: Duration = Duration::from_secs(60);
const WORKLOAD: &str = "keys=100000,get=0.9,dist=zipf:0.99,value=64,batch=4";
/// Frames of the allowed run, 125 per queue: fewer than the port's
/// receive ring holds, so none is lost even while the NFs are off CPU.
const ALLOWED: u64 = 500;
const DENIED: u64 = 100;
const ONE_FLOW: u64 = 100;

const TESTBED: &str = r#"
name: fig15
namespaces:
  - name: gen
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: dut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: sink
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: gen, dev: g0, mac: "02:00:00:00:0f:01" }
    b: { ns: dut, dev: d0, mac: "02:00:00:00:0f:02" }
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

/// Generator runs from 10.0.0.x (or 10.99.0.1, which the firewall
/// denies) to the cache, 512-byte frames (FLASH's size).
fn generate(tb: &ferry_testbed::Testbed, queues: &str, count: u64, flow: &[String]) -> serde_json::Value {
    let mut args: Vec<String> =
        ["gen", "xsk", "--dev", "g0", "--queues", queues, "--json", "--mica", WORKLOAD].map(String::from).to_vec();
    args.extend(
        ["--proto", "udp", "--size", "512", "--rate", "20000", "--dst-mac", "02:00:00:00:0f:02"].map(String::from),
    );
    args.extend(["--count".to_string(), count.to_string()]);
    for f in flow {
        args.extend(["--set".to_string(), f.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json_of(ferry(tb, "gen", &args), "ferry gen xsk --mica")
}

fn wait_counter(rc: &RunningChain, nf: &str, name: &str, want: u64) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = rc.status().expect("status");
        let have = counter(&s, nf, name);
        if have == want {
            return;
        }
        assert!(Instant::now() < deadline, "{nf}.{name} is {have}, not {want}:\n{}", chainctl::status_table(&s));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The chain file, filled in: the caches and l2fwd built into `bin`, the
/// firewall's rules a deny of 10.99.0.0/16 ahead of FLASH's 1000.
fn chain_file(tb: &ferry_testbed::Testbed, dir: &Path, bin: &Path) -> PathBuf {
    let examples = workspace().join("examples/chains");
    let rules = dir.join("fw.rules");
    let flash = std::fs::read_to_string(examples.join("flash-fw-1000.rules")).unwrap();
    std::fs::write(&rules, format!("deny src 10.99.0.0/16\n{flash}")).unwrap();
    let text = std::fs::read_to_string(examples.join("flash-fig15.yaml"))
        .unwrap()
        .replace("{dut}", tb.ns_name("dut"))
        .replace("{examples}/flash-fw-1000.rules", &rules.display().to_string())
        .replace("{cnf}", &bin.display().to_string());
    let file = dir.join("fig15.yaml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn the_fig15_chain_answers_mica_requests_through_four_nfs() {
    let Some((cc, libdir)) = build_setup(TEST) else { return };
    let dir = std::env::temp_dir().join(format!("ferry-capi-fig15-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for nf in ["mica", "l2fwd"] {
        compile(&cc, &workspace().join(format!("examples/c-nf/{nf}.c")), &dir.join(nf), &libdir);
    }
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(TESTBED, "fig15.yaml").unwrap();
    let tb = ferry_testbed::up(&spec).expect("testbed");
    let chain = chain_file(&tb, &dir, &dir);
    let quiet = std::env::var_os("FERRY_TEST_VERBOSE").is_none();
    let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), quiet).expect("ferryd runs the Fig. 15 chain");

    // The sink, ready (its program on s0) before anything is sent.
    let expected = ALLOWED + ONE_FLOW;
    let sink = ferry(
        &tb,
        "sink",
        &["sink", "--dev", "s0", "--json", "--mica", WORKLOAD, "--count", &expected.to_string(), "--duration", "50s"],
    );
    let deadline = Instant::now() + HANG_GUARD;
    while !String::from_utf8_lossy(
        &Command::new("ip").args(["-n", tb.ns_name("sink"), "link", "show", "s0"]).output().unwrap().stdout,
    )
    .contains("prog/xdp")
    {
        assert!(Instant::now() < deadline, "the sink did not attach to s0");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A denied source: the firewall drops every request.
    let denied = generate(&tb, "0", DENIED, &["src-ip=10.99.0.1".into()]);
    assert_eq!(denied["sent"], DENIED);
    wait_counter(&rc, "fw", "drop_denied", DENIED);

    // Allowed sources, 64 flows over four queues: every request answered.
    let flows = ["src-ip=10.0.0.1-10.0.0.8".to_string(), "dst-ip=10.0.1.1".into(), "flows=64".into()];
    let allowed = generate(&tb, "0,1,2,3", ALLOWED, &flows);
    assert_eq!(allowed["sent"], ALLOWED);
    wait_counter(&rc, "fw", "pass", ALLOWED);

    // One flow: all its requests at the one cache Maglev's table names.
    let before = rc.status().unwrap();
    let one = ["src-ip=10.0.0.9".to_string(), "dst-ip=10.0.1.1".into(), "src-port=4000".into(), "dst-port=9".into()];
    let single = generate(&tb, "0", ONE_FLOW, &one);
    assert_eq!(single["sent"], ONE_FLOW);
    let report = json_of(sink, "ferry sink --mica");
    let s = rc.status().unwrap();
    let table = ferry_cli::serve::maglev_table(&["kv1".into(), "kv2".into()], 65537).unwrap();
    let h = ferry_parallel::nfs::maglev::flow_hash([10, 0, 0, 9].into(), [10, 0, 1, 1].into(), 17, 4000, 9);
    let (to, other) = if table.lookup(h).unwrap() == 0 { ("kv1", "kv2") } else { ("kv2", "kv1") };
    let grew = |nf: &str| counter(&s, nf, "requests") - counter(&before, nf, "requests");
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
    let c = |nf: &str, name: &str| counter(&s, nf, name);
    assert_eq!(c("fw", "rx"), DENIED + expected);
    assert_eq!((c("fw", "pass"), c("fw", "drop_denied"), c("fw", "drop_malformed")), (expected, DENIED, 0));
    assert_eq!(c("kv1", "requests") + c("kv2", "requests"), 4 * expected);
    assert_eq!(c("kv1", "gets") + c("kv2", "gets"), sent_gets);
    let hits = c("kv1", "get_hits") + c("kv2", "get_hits");
    assert_eq!(hits, m["get_hits"].as_u64().unwrap(), "the caches' hits are the sink's");
    assert_eq!(c("kv1", "drop_malformed") + c("kv2", "drop_malformed"), 0);
    assert_eq!(c("fwd", "swapped"), expected, "l2fwd forwarded every response");
    for r in rc.audit().expect("audit") {
        assert!(r.conserved(), "domain {} conserves its frames: {r:?}", r.domain);
    }
    rc.shutdown().expect("shutdown");
    tb.down().expect("testbed down");
    let _ = std::fs::remove_dir_all(&dir);
}
