//! End to end: the `ferry` command's error reporting on bad input, and
//! smoke runs of `ferry demo` and the benchmarks (those that need one build
//! and tear down their own testbeds).

mod common;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use common::*;

/// `demo` and `bench io` create namespaces with the same logical names; run
/// them one at a time so that each one's leftovers can be told apart.
static OWN_TESTBEDS: Mutex<()> = Mutex::new(());

/// Benchmarks pin work to CPUs and saturate them: two at once starve each
/// other (a `bench io` window once counted nothing while `bench evnf` ran).
static BENCHES: Mutex<()> = Mutex::new(());

/// Runs `ferry ARGS` in this namespace to completion.
fn ferry(args: &[&str], timeout: Duration) -> Finished {
    Ferry::spawn_here(args).finish(timeout)
}

#[test]
fn testbed_up_reports_file_line_and_field() {
    let dir = TempDir::new("badspec");
    let name = format!("e2e-bad-{}", std::process::id());
    // Line 6 holds the bad MAC.
    let bad_mac = format!(
        "name: {name}\nnamespaces:\n  - name: a\n  - name: b\nlinks:\n  - a: {{ ns: a, dev: a0, mac: \"02:00:00:00:00:zz\" }}\n    b: {{ ns: b, dev: b0 }}\n"
    );
    // Line 7 names a namespace that does not exist (a cross-reference check).
    let bad_ref = format!(
        "name: {name}\nnamespaces:\n  - name: a\n  - name: b\nlinks:\n  - a: {{ ns: a, dev: a0 }}\n    b: {{ ns: nosuch, dev: b0 }}\n"
    );
    for (file, text, line, field, what) in [
        ("bad-mac.yaml", bad_mac, 6, "links[0].a.mac", "02:00:00:00:00:zz"),
        ("bad-ref.yaml", bad_ref, 7, "links[0].b.ns", "nosuch"),
    ] {
        let path = dir.path(file);
        std::fs::write(&path, text).unwrap();
        let r = ferry(&["testbed", "up", path.to_str().unwrap()], Duration::from_secs(20));
        if r.status.success() {
            // Do not leave a detached testbed behind, then fail.
            let _ = ferry(&["testbed", "down", &name], Duration::from_secs(20));
            panic!("`ferry testbed up {file}` accepted a bad spec:\n{}", r.stdout);
        }
        let err = r.stderr;
        assert!(err.contains(&format!("{}:{line}:", path.display())), "file and line {line} in: {err}");
        assert!(err.contains(field), "field path {field} in: {err}");
        assert!(err.contains(what), "the bad value {what} in: {err}");
        assert_eq!(err.lines().count(), 1, "one error line: {err}");
    }
}

#[test]
fn nf_run_unknown_nf_is_named() {
    let r = ferry(&["nf", "run", "--dev", "lo", "bogus-nf"], Duration::from_secs(20));
    assert!(!r.status.success(), "ferry nf run bogus-nf succeeded");
    assert!(r.stderr.contains("bogus-nf"), "NF name in: {}", r.stderr);
    assert!(r.stdout.is_empty(), "no report on failure: {}", r.stdout);

    // A known NF with a bad argument names the NF and the argument.
    let r = ferry(&["nf", "run", "--dev", "lo", "arp-responder", "10.0.0.1=zz"], Duration::from_secs(20));
    assert!(!r.status.success());
    assert!(r.stderr.contains("arp-responder") && r.stderr.contains("10.0.0.1=zz"), "{}", r.stderr);

    // `nf list` shows every NF with its counters.
    let r = ferry(&["nf", "list"], Duration::from_secs(20));
    assert!(r.status.success(), "{}", r.stderr);
    for nf in ["l2fwd", "arp-responder", "icmp-echo", "rxdrop"] {
        assert!(r.stdout.contains(nf), "{nf} in nf list:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("drop_bad_checksum"), "{}", r.stdout);
    // And the parallel runtime's NFs, with their own counters and the
    // host's arguments.
    for nf in ["parallel-nat", "parallel-bridge", "parallel-firewall", "parallel-maglev", "parallel-anti_ddos"] {
        assert!(r.stdout.contains(nf), "{nf} in nf list:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("mappings_created") && r.stdout.contains("workers="), "{}", r.stdout);
}

/// `ferry chain check` reads a chain file as ferryd does: an unknown NF
/// type, an unknown argument or a bad value is named with file, line and
/// field; `nf list` shows every type's model, offloadability and elements.
#[test]
fn chain_check_names_bad_kinds_and_arguments_where_they_are() {
    let dir = TempDir::new("chaincheck");
    let chain = |nf: &str| {
        format!(
            "name: chk\ndomains: [ {{ name: main }} ]\nnfs:\n  - {{ name: b, domain: main, kind: sink }}\n  - {nf}\nlinks:\n  - {{ from: a, to: b }}\n"
        )
    };
    for (file, nf, field, what) in [
        ("kind.yaml", "{ name: a, domain: main, kind: arp-icmp }", "nfs[1].kind", "unknown NF type \"arp-icmp\""),
        (
            "arg.yaml",
            "{ name: a, domain: main, kind: source, args: [\"rate=10\", \"speed=2\"] }",
            "nfs[1].args[1]",
            "unknown argument speed=",
        ),
        (
            "value.yaml",
            "{ name: a, domain: main, kind: parallel-nat, args: [\"workers=0\"] }",
            "nfs[1].args[0]",
            "workers=0: expected an integer in 1..=64",
        ),
        (
            "hybrid.yaml",
            "{ name: a, domain: main, kind: edpi, args: [\"config=/nonexistent/x.yaml\"] }",
            "nfs[1].args[0]",
            "edpi: /nonexistent/x.yaml: cannot read",
        ),
        (
            "config.yaml",
            "{ name: a, domain: main, kind: efw, args: [\"config=fw.yaml\"] }",
            "nfs[1].args[0]",
            "efw: config=fw.yaml: give an absolute path",
        ),
        (
            "offload.yaml",
            "{ name: a, domain: main, kind: source, offload: always }",
            "nfs[1].offload",
            "unknown variant `always`",
        ),
        (
            "force.yaml",
            "{ name: a, domain: main, kind: source, offload: force }",
            "nfs[1].offload",
            "a: offload: force, but source declares no elements that could run in XDP",
        ),
    ] {
        let path = dir.path(file);
        std::fs::write(&path, chain(nf)).unwrap();
        let r = ferry(&["chain", "check", path.to_str().unwrap()], Duration::from_secs(20));
        assert!(!r.status.success(), "`ferry chain check {file}` accepted it:\n{}", r.stdout);
        let err = r.stderr;
        assert!(err.contains(&format!("{}:5:", path.display())), "{file}: file and line 5 in: {err}");
        assert!(err.contains(&format!("{field}: ")) && err.contains(what), "{file}: {field} and {what:?} in: {err}");
    }
    // A loop between NFs, blamed on the link that closes it (line 10).
    let looped = dir.path("loop.yaml");
    let text = chain("{ name: a, domain: main, kind: fwd }").replace("kind: sink", "kind: fwd")
        + "  - { from: b, to: c }\n  - { from: c, to: a }\n";
    let text = text.replace("nfs:\n", "nfs:\n  - { name: c, domain: main, kind: fwd }\n");
    std::fs::write(&looped, text).unwrap();
    let r = ferry(&["chain", "check", looped.to_str().unwrap()], Duration::from_secs(20));
    assert!(!r.status.success(), "a loop was accepted:\n{}", r.stdout);
    assert!(r.stderr.contains(&format!("{}:10:", looped.display())), "line 10 in: {}", r.stderr);
    assert!(r.stderr.contains("links[2].to: this link closes a loop (a -> b -> c -> a)"), "{}", r.stderr);
    let good = dir.path("good.yaml");
    std::fs::write(&good, chain("{ name: a, domain: main, kind: source, args: [\"rate=10\"] }")).unwrap();
    let r = ferry(&["chain", "check", good.to_str().unwrap()], Duration::from_secs(20));
    assert!(r.status.success() && r.stdout.contains("is valid: 2 NFs"), "{}{}", r.stdout, r.stderr);

    // Every example chain file is valid once its placeholders are filled
    // in (`--set`), as its header says; unfilled, it is refused with the
    // placeholder's line and what to do.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/chains");
    let examples = examples.canonicalize().unwrap();
    let set_examples = format!("examples={}", examples.display());
    for e in std::fs::read_dir(&examples).unwrap().flatten() {
        if e.path().extension() != Some(std::ffi::OsStr::new("yaml")) {
            continue;
        }
        let file = e.path().display().to_string();
        let sets = ["--set", &set_examples, "--set", "dut=dut", "--set", "cnf=/usr/local/lib/ferry"];
        let r = ferry(&[&["chain", "check"][..], &sets, &[&file]].concat(), Duration::from_secs(20));
        assert!(r.status.success(), "{file}: {}", r.stderr);
        let text = std::fs::read_to_string(e.path()).unwrap();
        if let Some((line, _, name)) = ferry_chain::spec::unfilled_placeholder(&text) {
            let r = ferry(&["chain", "check", &file], Duration::from_secs(20));
            assert!(!r.status.success(), "{file}: unfilled {{{name}}} accepted");
            let want = format!("{file}:{line}:");
            assert!(r.stderr.contains(&want) && r.stderr.contains(&format!("--set {name}=VALUE")), "{}", r.stderr);
        }
    }
    let r = ferry(&["nf", "list"], Duration::from_secs(20));
    for line in ["parallel-nat", "partially offloadable", "ip-rewriter", "edpi", "hybrid"] {
        assert!(r.stdout.contains(line), "{line} in nf list:\n{}", r.stdout);
    }
}

/// `bench firewall` checks the two lookups agree on every packet before
/// it times them; its report says how far the scan went.
#[test]
fn bench_firewall_smoke() {
    let dir = TempDir::new("bench-fw");
    let out = dir.path("fw.json");
    let args = ["bench", "firewall", "--rules", "200", "--packets", "5000", "--runs", "1", "--json"];
    let r = ferry(&[&args[..], &[out.to_str().unwrap()]].concat(), Duration::from_secs(60));
    assert!(r.status.success(), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((v["rules"].as_u64(), v["packets"].as_u64()), (Some(200), Some(5000)), "{v}");
    assert!(v["mean_scanned"].as_f64().is_some_and(|m| m > 1.0 && m <= 200.0), "{v}");
    assert!(r.stdout.contains("bit-vector is"), "{}", r.stdout);
}

#[test]
fn gen_on_missing_device_is_named() {
    for sub in ["live", "xsk"] {
        let r = ferry(&["gen", sub, "--dev", "nosuchdev", "--count", "10", "--json"], Duration::from_secs(20));
        assert!(!r.status.success(), "ferry gen {sub} on a missing device succeeded");
        assert!(r.stderr.contains("nosuchdev"), "gen {sub}: device name in: {}", r.stderr);
        assert!(r.stdout.is_empty(), "gen {sub}: no report on failure: {}", r.stdout);
    }
}

/// Namespaces that `pid` created (per the testbed markers) or that carry no
/// marker, among those not in `before` and ending in one of `suffixes`.
fn leftovers(before: &[String], pid: i32, suffixes: &[&str]) -> Vec<String> {
    netns_list()
        .into_iter()
        .filter(|n| !before.contains(n) && n.starts_with("fy") && suffixes.iter().any(|s| n.ends_with(s)))
        .filter(|n| {
            let marker = Path::new(ferry_testbed::STATE_DIR).join("by-ns").join(format!("{n}.pid"));
            match std::fs::read_to_string(marker) {
                Ok(text) => text.split_whitespace().next() == Some(&pid.to_string()),
                Err(_) => true,
            }
        })
        .collect()
}

#[test]
fn demo_json_smoke() {
    if !privileged("demo_json_smoke") {
        return;
    }
    let _serial = OWN_TESTBEDS.lock().unwrap_or_else(|e| e.into_inner());
    let before = netns_list();
    let demo = Ferry::spawn_here(&["demo", "--packets", "20000", "--json"]);
    let pid = demo.pid();
    let d = demo.wait_json(Duration::from_secs(120));
    assert_eq!(u(&d, "/ping_replies"), 5, "demo report: {d:#}");
    assert!(u(&d, "/sink/packets") > 0, "demo report: {d:#}");
    assert_eq!(u(&d, "/generator/sent"), 20000, "demo report: {d:#}");
    // The chain's counters. The demo's three NFs run fused as one NF, resp:
    // it sent the responder's replies out of d0 and the rest, through
    // l2fwd and fwd, out of d1 to the sink.
    let chain: ferry_chain::proto::Status = serde_json::from_value(d["chain"].clone()).expect("chain status");
    let names: Vec<&str> = chain.nfs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["resp"], "{d:#}");
    let nf = |counter: &str| ferry_cli::chainctl::counter(&chain, "resp", counter);
    assert!(nf("resp.tx") >= 5, "ping replies went out of d0: {d:#}");
    assert_eq!(nf("tx_port"), nf("resp.tx") + u(&d, "/sink/packets"), "{d:#}");
    assert_eq!(nf("l2fwd.tx"), u(&d, "/sink/packets"), "{d:#}");
    for a in d["audit"].as_array().into_iter().flatten() {
        assert_eq!(a["lost"], 0, "{d:#}");
        assert_eq!(a["duplicated"], 0, "{d:#}");
    }
    let left = leftovers(&before, pid, &["-sink", "-gen", "-dut"]);
    assert!(left.is_empty(), "ferry demo left namespaces behind: {left:?}");
}

#[test]
fn bench_io_smoke() {
    if !privileged("bench_io_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let _serial = OWN_TESTBEDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench");
    let out = dir.path("io.json");
    let before = netns_list();
    let bench = Ferry::spawn_here(&[
        "bench",
        "io",
        "--runs",
        "1",
        "--warmup",
        "200ms",
        "--window",
        "300ms",
        "--sizes",
        "64",
        "--scenarios",
        "xdp-drop,afxdp-rxdrop,afxdp-txonly",
        "--json",
        out.to_str().unwrap(),
    ]);
    let pid = bench.pid();
    let r = bench.finish(Duration::from_secs(120));
    assert!(r.status.success(), "ferry bench io failed ({}):\n{}", r.status, r.stderr);
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("bench JSON");
    let results = v["results"].as_array().unwrap_or_else(|| panic!("no results in {v:#}"));
    assert_eq!(results.len(), 3, "{v:#}");
    let names: Vec<&str> = results.iter().filter_map(|r| r["scenario"].as_str()).collect();
    assert_eq!(names, ["xdp-drop", "afxdp-rxdrop", "afxdp-txonly"], "{v:#}");
    for res in results {
        assert_eq!(res["frame_len"], 64, "{res:#}");
        let mpps = res["median_mpps"].as_f64().unwrap_or(0.0);
        assert!(mpps > 0.0, "median_mpps must be > 0: {res:#}");
    }
    let left = leftovers(&before, pid, &["-gen", "-dut"]);
    assert!(left.is_empty(), "ferry bench io left namespaces behind: {left:?}");
    // The text table went to stdout as well.
    assert!(r.stdout.contains("xdp-drop"), "{}", r.stdout);
}

#[test]
fn bench_chain_smoke() {
    if !privileged("bench_chain_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-chain");
    let out = dir.path("chain.json");
    let bench = Ferry::spawn_here(&[
        "bench",
        "chain",
        "--scenarios",
        "fig10,fig11,table1,idle",
        "--nfs",
        "1",
        "--no-kernel",
        "--warmup",
        "200ms",
        "--window",
        "300ms",
        "--json",
        out.to_str().unwrap(),
    ]);
    let done = bench.finish(Duration::from_secs(180));
    assert!(done.status.success(), "bench chain failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let variants = [
        "ferry-zero-copy",
        "ferry-copy",
        "one-process-threads",
        "one-process-sdk",
        "ferry-batch-1",
        "backpressure-none",
    ];
    for variant in variants {
        let row = rows.iter().find(|x| x["variant"] == variant).unwrap_or_else(|| panic!("no {variant} row: {r:#}"));
        assert!(row["mpps"].as_f64().unwrap() > 0.0, "{row:#}");
        assert_eq!(row["notes"]["conserved"], 1.0, "{row:#}");
    }
    let idle = rows.iter().find(|x| x["scenario"] == "idle").unwrap();
    for (nf, cpu) in idle["cpu_percent"].as_object().unwrap() {
        assert!(cpu.as_f64().unwrap() < 20.0, "idle NF {nf} uses {cpu}% CPU: {idle:#}");
    }
}

/// `bench peers --smoke`: every peer (Open vSwitch, nftables, the Linux
/// bridge) and every Ferry system of every scenario forwards all the
/// frames it is offered, and tears down. IPVS alone may be missing, and
/// only where the kernel has no IP_VS.
#[test]
fn bench_peers_smoke() {
    if !privileged("bench_peers_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let _serial = OWN_TESTBEDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-peers");
    let out = dir.path("peers.json");
    let before = netns_list();
    let bench = Ferry::spawn_here(&["bench", "peers", "--smoke", "--json", out.to_str().unwrap()]);
    let pid = bench.pid();
    let done = bench.finish(Duration::from_secs(300));
    assert!(done.status.success(), "bench peers failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let systems: Vec<&str> = r["systems"].as_array().unwrap().iter().map(|s| s["system"].as_str().unwrap()).collect();
    assert!(systems.len() >= 21, "{systems:?}");
    let ipvs_missing = !Path::new("/proc/net/ip_vs").exists();
    for system in systems {
        let not_run = r["not_run"].as_array().unwrap().iter().find(|n| n["system"] == system);
        if let Some(n) = not_run {
            let reason = n["reason"].as_str().unwrap();
            assert!(ipvs_missing && system.starts_with("ipvs-"), "{system} did not run: {reason}");
            assert!(reason.starts_with("not supported: needs a kernel with IP_VS"), "{reason}");
            continue;
        }
        // A system forwarding in XDP has a row per NAPI layout.
        let rows: Vec<&serde_json::Value> =
            r["rows"].as_array().unwrap().iter().filter(|x| x["system"] == system).collect();
        assert!(!rows.is_empty(), "no row for {system}: {r:#}");
        for row in rows {
            assert_eq!(row["sent"], 1000.0, "{row:#}");
            assert_eq!(row["received"], row["sent"], "{system} lost frames: {row:#}");
        }
    }
    let left = leftovers(&before, pid, &["-gen", "-dut"]);
    assert!(left.is_empty(), "ferry bench peers left namespaces behind: {left:?}");
    let switches = std::process::Command::new("pgrep").args(["-f", "ferry-bench-peers-"]).output().unwrap();
    assert!(
        switches.stdout.is_empty(),
        "OVS of bench peers left running: {}",
        String::from_utf8_lossy(&switches.stdout)
    );
}

/// The load scenario offers the same loads to both columns of each mode,
/// from 10 kpps to saturation, and measures latency at each.
#[test]
fn bench_chain_load_smoke() {
    if !privileged("bench_chain_load_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-load");
    let out = dir.path("load.json");
    let args = [
        "bench",
        "chain",
        "--scenarios",
        "load,roundtrip",
        "--load-nfs",
        "1",
        "--warmup",
        "200ms",
        "--window",
        "300ms",
    ];
    let done =
        Ferry::spawn_here(&[&args[..], &["--json", out.to_str().unwrap()]].concat()).finish(Duration::from_secs(300));
    assert!(done.status.success(), "bench chain load failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let modes: [(&str, &[&str]); 2] = [
        ("memory", &["ferry-zero-copy", "ferry-fused", "one-process-sdk", "one-process-threads"]),
        ("veth", &["ferry-veth", "ferry-veth-fused", "kernel-xdp-redirect"]),
    ];
    let load: Vec<&serde_json::Value> = rows.iter().filter(|x| x["scenario"] == "load").collect();
    for (mode, variants) in modes {
        let of = |v: &str| -> Vec<serde_json::Value> {
            load.iter().filter(|x| x["mode"] == mode && x["variant"] == v).map(|x| x["offered_pps"].clone()).collect()
        };
        let first = of(variants[0]);
        for v in &variants[1..] {
            assert_eq!(of(v), first, "{mode}: the same loads for {v}: {r:#}");
        }
        assert_eq!(first.first().and_then(|v| v.as_u64()), Some(10_000), "{mode}: from 10 kpps: {r:#}");
        assert!(first.last().is_some_and(|v| v.is_null()), "{mode}: to saturation: {r:#}");
    }
    // The round trip: each polling mode, four NFs fused, and l2fwd in
    // XDP, at each of the four loads.
    let modes = ["default", "spin50", "adaptive50", "busy", "xdp"].map(|m| format!("ferry-l2fwd-{m}"));
    for v in modes.iter().map(String::as_str).chain(["ferry-4-fused-busy"]) {
        let loads: Vec<u64> = rows
            .iter()
            .filter(|x| x["scenario"] == "roundtrip" && x["variant"] == v)
            .filter_map(|x| x["offered_pps"].as_u64())
            .collect();
        assert_eq!(loads, [10_000, 50_000, 100_000, 200_000], "{v}: {r:#}");
    }
    // Latency comes from the stamps of the frames that arrived.
    for row in rows {
        assert!(row["p50_us"].is_number() && row["p999_us"].is_number(), "{row:#}");
    }
    assert!(done.stdout.contains("latency against offered load"), "{}", done.stdout);
}

/// `bench cost` writes a cost model that placement reads (a smoke test:
/// the figures are not asserted, only that each is a cost).
#[test]
fn bench_cost_writes_a_model_placement_reads() {
    if !privileged("bench_cost_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-cost");
    let model = dir.path("model.json");
    let args =
        ["bench", "cost", "--runs", "1", "--warmup", "200ms", "--window", "300ms", "--out", model.to_str().unwrap()];
    let done = Ferry::spawn_here(&args).finish(Duration::from_secs(300));
    assert!(done.status.success(), "bench cost failed: {}", done.stderr);
    assert!(done.stdout.contains("3 NF(s) after the last process: XDP on a loop device"), "{}", done.stdout);
    let m = ferry_place::CostModel::load(&model).expect("a model placement reads");
    assert!(m.origin.starts_with("ferry bench cost on "), "{m:?}");
    for ns in [m.loop_crossing_ns, m.xdp_stage_ns, m.fused_stage_ns, m.process_hop_ns] {
        assert!(ns.is_finite() && ns >= 0.0, "{m:?}");
    }
}

#[test]
fn bench_pipeline_smoke() {
    if !privileged("bench_pipeline_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    // A hang guard, not a time limit: a loaded CI machine took over 60 s.
    let done =
        Ferry::spawn_here(&["bench", "pipeline", "--runs", "1", "--repeat", "10000"]).finish(Duration::from_secs(300));
    assert!(done.status.success(), "bench pipeline failed: {}", done.stderr);
    for row in ["none (parse + drop)", "counter", "acl (8 rules)", "flow monitor", "rewrite (IP + port)", "policer"] {
        assert!(done.stdout.contains(row), "no {row} row:\n{}", done.stdout);
    }
    assert!(done.stdout.contains("9-element chain"), "{}", done.stdout);
}

/// `bench ips`: a row per rule count, after the one with no rules, and
/// the generated rules written out load (skipping some) in a chain check.
#[test]
fn bench_ips_smoke() {
    let dir = TempDir::new("bench-ips");
    let args = ["bench", "ips", "--rules", "100,400", "--packets", "2000", "--runs", "1"];
    let done = Ferry::spawn_here(&args).finish(Duration::from_secs(300));
    assert!(done.status.success(), "bench ips failed: {}", done.stderr);
    let rows: Vec<&str> = done.stdout.lines().skip_while(|l| !l.contains("ns/packet")).skip(1).collect();
    let counts: Vec<&str> = rows.iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(counts, ["0", "100", "400"], "{}", done.stdout);
    let rules = dir.path("generated.rules");
    let write = ["bench", "ips", "--rules", "1200", "--write-rules", rules.to_str().unwrap()];
    assert!(Ferry::spawn_here(&write).finish(Duration::from_secs(60)).status.success());
    let chain = dir.path("ips.yaml");
    let yaml = format!(
        "name: ips\ndomains: [ {{ name: main }} ]\nnfs:\n  - {{ name: src, domain: main, kind: source }}\n  \
         - {{ name: ips, domain: main, kind: ips, args: [\"{}\", skip-unsupported] }}\n  \
         - {{ name: snk, domain: main, kind: sink }}\nlinks:\n  - {{ from: src, to: ips }}\n  - {{ from: ips, to: snk }}\n",
        rules.display()
    );
    std::fs::write(&chain, yaml).unwrap();
    let check = ferry(&["chain", "check", chain.to_str().unwrap()], Duration::from_secs(60));
    assert!(check.status.success(), "{}", check.stderr);
    let line =
        check.stdout.lines().find(|l| l.starts_with("  NF ips: ips: ")).unwrap_or_else(|| panic!("{}", check.stdout));
    assert!(line.contains(" skipped as unsupported (by option: ") && line.contains("flowbits "), "{line}");
    let loaded: usize = line["  NF ips: ips: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(loaded >= 1000, "{line}");
}

#[test]
fn bench_realworld_smoke() {
    if !privileged("bench_realworld_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-realworld");
    let out = dir.path("realworld.json");
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/chains/flash-fw-1000.rules");
    // No C NFs built there: the MICA row is reported missing (ferry-capi's
    // flash_chains test runs it).
    let cnf = dir.path("no-c-nfs");
    let args = ["bench", "realworld", "--scenarios", "table2", "--rules", rules, "--cnf", cnf.to_str().unwrap()];
    let tail = ["--warmup", "100ms", "--window", "200ms", "--json", out.to_str().unwrap()];
    let done = Ferry::spawn_here(&[&args[..], &tail].concat()).finish(HANG_GUARD * 4);
    assert!(done.status.success(), "bench realworld failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let variants: Vec<&str> = r["rows"].as_array().unwrap().iter().map(|x| x["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["firewall-linear", "firewall-classifier", "maglev", "l2fwd", "chain (fig. 13)"]);
    for row in r["rows"].as_array().unwrap() {
        // Each chain carried frames, and lost none it had taken in.
        assert!(row["mpps"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["notes"]["conserved"], 1.0, "{row}");
    }
    assert_eq!(r["frame_len"], 512);
    assert!(r["missing"][0].as_str().unwrap().contains("mica"), "{r:#}");
}

#[test]
fn bench_parallel_smoke_reports_each_workers_memory() {
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-parallel");
    let out = dir.path("parallel.json");
    let args = ["bench", "parallel", "--nfs", "maglev", "--packets", "20000", "--runs", "1", "--no-case-studies"];
    let done =
        Ferry::spawn_here(&[&args[..], &["--json", out.to_str().unwrap()]].concat()).finish(Duration::from_secs(120));
    assert!(done.status.success(), "bench parallel failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = r["scaling"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{r:#}");
    for row in rows {
        let workers = row["workers"].as_u64().unwrap() as usize;
        let per_worker = row["worker_kib"].as_array().unwrap();
        assert_eq!(per_worker.len(), workers, "{row:#}");
        // Every worker keeps a set table of the flows it saw.
        assert!(per_worker.iter().all(|k| k.as_f64().unwrap() > 0.0), "{row:#}");
        // Maglev's lookup table alone is 65537 entries.
        assert!(row["shared_kib"].as_f64().unwrap() >= 128.0, "{row:#}");
    }
    assert!(r["speedups"][0]["extra_worker_kib"].is_number(), "{r:#}");
    assert!(done.stdout.contains("per-worker KiB"), "{}", done.stdout);
}

#[test]
fn bench_evnf_smoke() {
    if !privileged("bench_evnf_smoke") {
        return;
    }
    let _bench = BENCHES.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("bench-evnf");
    let out = dir.path("evnf.json");
    let args = ["bench", "evnf", "--scenarios", "sfc1,sfc2", "--conns", "4", "--elephants", "100"];
    let bench =
        Ferry::spawn_here(&[&args[..], &["--duration", "1s", "--runs", "1", "--json", out.to_str().unwrap()]].concat());
    let done = bench.finish(Duration::from_secs(180));
    assert!(done.status.success(), "bench evnf failed: {}", done.stderr);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let variants: Vec<&str> = r["sfc1"].as_array().unwrap().iter().map(|x| x["variant"].as_str().unwrap()).collect();
    assert_eq!(variants, ["nftables+haproxy", "efw+elb"]);
    for row in r["sfc1"].as_array().unwrap() {
        assert!(row["requests_per_sec"].as_f64().unwrap() > 0.0, "{row}");
        // A request slower than wrk's timeout is load, not a fault.
        let errors = row["socket_errors"].as_u64().unwrap() - row["timeouts"].as_u64().unwrap();
        assert_eq!(errors, 0, "{row}");
    }
    let dpi: Vec<f64> = r["sfc2"].as_array().unwrap().iter().map(|x| x["gbit_per_sec"].as_f64().unwrap()).collect();
    assert!(dpi.len() == 2 && dpi.iter().all(|g| *g > 0.0), "{dpi:?}");
    assert!(r["sfc1_ratios"][0]["rps_ratio"].as_f64().unwrap() > 0.0);
    assert!(done.stdout.contains("eDPI / nDPI alone"), "{}", done.stdout);
    // Each Ferry run's chain status: eFW -> eLB once, eFW -> eDPI twice.
    let statuses = r["ferry_status"].as_array().unwrap();
    let chains: Vec<&str> = statuses.iter().map(|s| s["chain"].as_str().unwrap()).collect();
    assert_eq!(chains, ["edge", "sfc2", "sfc2"]);
}

/// The `ferry` and `ferryd` commands the README's `sh` blocks and the
/// example chains' headers show are commands the binaries take: each
/// subcommand and flag is known (clap checks them before `--help`), so
/// the docs cannot drift from the CLI unnoticed.
#[test]
fn documented_commands_are_the_clis() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let mut commands = sh_block_commands(&std::fs::read_to_string(root.join("README.md")).unwrap());
    for e in std::fs::read_dir(root.join("examples/chains")).unwrap().flatten() {
        if e.path().extension() == Some(std::ffi::OsStr::new("yaml")) {
            commands.extend(header_commands(&std::fs::read_to_string(e.path()).unwrap()));
        }
    }
    assert!(commands.len() > 40, "found only {} commands", commands.len());
    let ferryd = Path::new(FERRY).with_file_name("ferryd");
    for words in &commands {
        let (program, args) = match words[0].as_str() {
            "ferry" => (Path::new(FERRY).to_path_buf(), &words[1..]),
            _ => (ferryd.clone(), &words[1..]),
        };
        // `nf run` takes NFs and their arguments last: `--help` goes in
        // front of the first NF, whose name the catalog knows.
        let nf_run = args.len() > 2 && args[0] == "nf" && args[1] == "run";
        let nfs_at = args.iter().position(|w| ferry_catalog::find(w).is_some()).filter(|_| nf_run);
        let (flags, nfs) = args.split_at(nfs_at.unwrap_or(args.len()));
        let mut cmd = std::process::Command::new(&program);
        cmd.args(flags).arg("--help").env("FERRY_BENCH", Path::new(FERRY).with_file_name("ferry-bench"));
        assert!(nfs.iter().all(|w| !w.starts_with('-')), "{words:?}: NF arguments are not flags");
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{words:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The commands of `text`'s ```sh blocks: the `$ ` lines of a block that
/// has prompts, else every line; continuations joined, comments dropped.
fn sh_block_commands(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut block, line.trim_start()) {
            (None, l) if l.starts_with("```sh") => block = Some(Vec::new()),
            (Some(lines), l) if l.starts_with("```") => {
                let prompted = lines.iter().any(|l| l.starts_with("$ "));
                let wanted = lines.iter().filter_map(|l| if prompted { l.strip_prefix("$ ") } else { Some(l) });
                out.extend(commands_of(&joined(wanted)));
                block = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    out
}

/// The commands of a chain file's header: its `#   ` lines.
fn header_commands(text: &str) -> Vec<Vec<String>> {
    let lines = text.lines().take_while(|l| l.starts_with('#')).filter_map(|l| l.strip_prefix("#   "));
    commands_of(&joined(lines))
}

/// Lines with their `\` continuations joined.
fn joined<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for l in lines {
        let (body, continues) = match l.trim_end().strip_suffix('\\') {
            Some(b) => (b, true),
            None => (l, false),
        };
        match out.last_mut() {
            Some(last) if open => last.push_str(body),
            _ => out.push(body.to_string()),
        }
        open = continues;
    }
    out
}

/// The `ferry`/`ferryd` commands of shell `lines`, as words: comments
/// dropped, split at `;`, `&&`, `|` and `&`, `ip netns exec NS` taken off.
fn commands_of(lines: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in lines {
        let words = shell_words(line);
        for part in words.split(|w| [";", "&&", "|", "&", "||"].contains(&w.as_str())) {
            let part = match part {
                [ip, netns, exec, _, rest @ ..]
                    if (ip.as_str(), netns.as_str(), exec.as_str()) == ("ip", "netns", "exec") =>
                {
                    rest
                }
                p => p,
            };
            let is_ferry = |w: &String| w == "ferry" || w == "ferryd";
            match part.iter().position(is_ferry) {
                Some(0) => out.push(part.to_vec()),
                Some(_) => panic!("{line:?}: a ferry command this test cannot tell apart"),
                None => {}
            }
        }
    }
    out
}

/// `line` split as a shell splits it (quotes, a trailing `# comment`);
/// `;` and `&` become words of their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if word.is_empty() => break,
            (None, ' ' | '\t') => words.extend((!word.is_empty()).then(|| std::mem::take(&mut word))),
            (None, ';' | '&' | '|') => {
                words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
                let mut op = c.to_string();
                if chars.peek() == Some(&c) {
                    op.push(chars.next().unwrap());
                }
                words.push(op);
            }
            (None, c) => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// The README's blocks marked `<!-- runs: ... -->` run as they stand, in
/// order, as root, each on a testbed of its own: a command's `export
/// NAME=VALUE` output line sets what later commands' `$NAME` means (as
/// the user who runs it would), `$PWD` is the checkout, and a command
/// ending in `&` runs on in the background (its first line says it is
/// up). Whatever a block leaves running is stopped, pass or fail.
#[test]
fn readme_blocks_marked_to_run_run_as_written() {
    if !privileged("readme_walk") {
        return;
    }
    let _serial = OWN_TESTBEDS.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = marked_blocks(&readme);
    assert!(!blocks.is_empty(), "the README marks no block to run");
    for block in blocks {
        let mut walk = Walk { root: root.clone(), vars: Vec::new(), background: Vec::new(), testbeds: Vec::new() };
        for line in joined(block.iter().map(String::as_str)) {
            walk.run(&line);
        }
    }
}

/// The ```sh blocks of `text` right after a `<!-- runs: ... -->` line.
fn marked_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("<!-- runs:") {
            continue;
        }
        assert_eq!(lines.next().map(str::trim), Some("```sh"), "a block follows its <!-- runs: --> mark");
        blocks.push(lines.by_ref().take_while(|l| !l.starts_with("```")).map(str::to_string).collect());
    }
    blocks
}

/// A README block being run.
struct Walk {
    root: std::path::PathBuf,
    /// What `export` lines set.
    vars: Vec<(String, String)>,
    background: Vec<std::process::Child>,
    /// The testbed files brought up, to bring down if the block does not.
    testbeds: Vec<String>,
}

impl Walk {
    fn run(&mut self, line: &str) {
        let mut words = shell_words(line);
        if words.is_empty() || (words[0] == "export" && words.iter().any(|w| w.starts_with("PATH="))) {
            return; // The test's own binaries come first on its PATH.
        }
        let background = words.last().is_some_and(|w| w == "&");
        if background {
            words.pop();
        }
        let one_command = |w: &String| !["&", "&&", ";", "|", "||"].contains(&w.as_str());
        assert!(words.iter().all(one_command), "`{line}`: one command a line, in a block marked to run");
        let words: Vec<String> = words.iter().map(|w| self.expand(w)).collect();
        eprintln!("readme: {}", words.join(" "));
        match (words[0].as_str(), words.get(1).map(String::as_str), words.get(2).map(String::as_str)) {
            ("ferry", Some("testbed"), Some("up")) => self.testbeds.push(words[3].clone()),
            ("ferry", Some("testbed"), Some("down")) => self.testbeds.retain(|t| *t != words[3]),
            _ => {}
        }
        let cmd = self.command(&words);
        if background {
            self.start(cmd, line);
            return;
        }
        let out = Ferry::spawn_cmd(cmd, line.to_string()).finish(Duration::from_secs(180));
        assert!(out.status.success(), "`{line}` failed:\n{}{}", out.stdout, out.stderr);
        for l in out.stdout.lines().filter_map(|l| l.strip_prefix("export ")) {
            self.vars
                .extend(l.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())));
        }
    }

    /// `word` with `$NAME` replaced by its value (`$PWD`: the checkout).
    fn expand(&self, word: &str) -> String {
        let mut out = word.replace("$PWD", &self.root.display().to_string());
        // Longest names first: $DUT must not eat the start of $DUT2.
        let mut vars: Vec<&(String, String)> = self.vars.iter().collect();
        vars.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        for (k, v) in vars {
            out = out.replace(&format!("${k}"), v);
        }
        assert!(!out.contains('$'), "{word}: a variable the block never set");
        out
    }

    fn command(&self, words: &[String]) -> std::process::Command {
        let bin = Path::new(FERRY).parent().unwrap();
        let mut cmd = std::process::Command::new(bin.join(&words[0]));
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        cmd.args(&words[1..]).current_dir(&self.root).env("PATH", path);
        cmd
    }

    /// Starts `cmd` in the background and waits for its first line.
    fn start(&mut self, mut cmd: std::process::Command, line: &str) {
        use std::io::BufRead;
        cmd.stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        self.background.push(child);
        // A guard against a hang only: the first line is the event.
        let first = rx.recv_timeout(Duration::from_secs(120));
        assert!(first.is_ok(), "`{line}` said nothing");
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        if !self.background.is_empty() {
            let _ = self.command(&["ferry".into(), "chain".into(), "down".into()]).output();
        }
        for child in &mut self.background {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        for t in std::mem::take(&mut self.testbeds) {
            let _ = self.command(&["ferry".into(), "testbed".into(), "down".into(), t]).output();
        }
    }
}
