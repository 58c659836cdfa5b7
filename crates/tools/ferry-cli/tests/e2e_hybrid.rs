//! Hybrid NFs under ferryd, end to end on examples/testbeds/sfc.yaml. A
//! chain file names eFW and eLB by kind, behind a flow monitor; ferryd
//! runs the three as elements of one stage pipeline on the client's port
//! and applies the firewall's nftables ruleset; the hybrid NFs' control
//! planes run as unprivileged NF processes holding only the fast path's
//! map fds. Real HTTP goes through eFW -> eLB to two nginx backends, and
//! iperf3 through eFW -> eDPI, whose slow path ferryd hands to the eDPI's
//! process on the port's AF_XDP socket. `ferry chain reload` changes the
//! balancer's weights and feedback while connections are open.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::chain::*;
use common::*;
use ferry_chain::proto::Status;
use ferry_cli::chainctl;
use ferry_cli::sfc::{established, run_in, sfc_testbed, SfcChain, EDGE, SFC1, VIP};
use ferry_testbed::apps::{self, CurlOpts, Iperf3Server, IperfJob, IperfOpts, Nginx, NginxOpts};

fn chain(dut: &str, config: &str) -> String {
    format!(
        r#"
name: edge
domains: [ {{ name: main, frames: 1024, ring_size: 256 }} ]
ports:
  - {{ name: client, netns: {dut}, netdev: d0 }}
  - {{ name: b1, netns: {dut}, netdev: d1 }}
  - {{ name: b2, netns: {dut}, netdev: d2 }}
nfs:
  - {{ name: mon, domain: main, kind: flow-monitor }}
  - {{ name: fw, domain: main, kind: efw, args: ["config={config}"] }}
  - {{ name: lb, domain: main, kind: elb, args: ["config={config}", "reply_ports=b1,b2"] }}
links:
  - {{ from: client, to: mon }}
  - {{ from: mon, to: fw }}
  - {{ from: fw, to: lb }}
"#
    )
}

/// How many distinct BPF maps process `pid` holds fds of (a map may be
/// behind several fds).
fn bpf_maps(pid: u32) -> usize {
    bpf_map_ids(pid).len()
}

/// The ids of the BPF maps process `pid` holds fds of.
fn bpf_map_ids(pid: u32) -> std::collections::BTreeSet<String> {
    bpf_map_fds(pid).into_keys().collect()
}

/// How many distinct BPF maps process `pid` can write through an fd.
fn writable_bpf_maps(pid: u32) -> usize {
    bpf_map_fds(pid).into_values().filter(|w| *w).count()
}

/// The BPF maps process `pid` holds fds of, by id: whether some fd of it
/// is open for writing (O_WRONLY or O_RDWR in its fdinfo flags, octal).
fn bpf_map_fds(pid: u32) -> BTreeMap<String, bool> {
    let mut maps = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        if !std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == "anon_inode:bpf-map") {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy())).unwrap();
        let field = |key: &str| info.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).map(str::to_string);
        let id = field("map_id:").expect("a map's fdinfo has its id");
        let flags = u32::from_str_radix(&field("flags:").expect("fdinfo has flags"), 8).unwrap();
        *maps.entry(id).or_insert(false) |= flags & 3 != 0;
    }
    maps
}

/// `requests` GETs of the VIP, each answered 200 (or the test fails): how
/// many each backend answered.
fn backends_seen(tb: &ferry_testbed::Testbed, requests: usize) -> BTreeMap<String, u32> {
    let mut seen = BTreeMap::new();
    for _ in 0..requests {
        let r = apps::curl_get(tb, "client", &format!("http://{VIP}/"), CurlOpts::default()).expect("GET via the VIP");
        assert_eq!(r.status, 200);
        *seen.entry(r.body.trim().to_string()).or_default() += 1;
    }
    seen
}

/// Waits until every NF's thread has looped twice: its process took its
/// welcome (and the fds in it) and runs.
fn wait_running(rc: &chainctl::RunningChain) -> Status {
    wait_for("every NF's thread running", || {
        let s = rc.status().ok()?;
        s.nfs.iter().all(|n| n.connected && n.rings.iter().all(|r| r.loops >= 2)).then_some(s)
    })
}

fn xdp_on(tb: &ferry_testbed::Testbed, dev: &str) -> bool {
    run_in(tb, "dut", "ip", &["link", "show", "dev", dev]).unwrap().contains("xdp")
}

#[test]
fn efw_and_elb_in_a_chain_with_unprivileged_control_planes() {
    if !privileged("hybrid_chain") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    let b1 = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", NginxOpts::default()).expect("nginx b1");
    let b2 = Nginx::start(&tb, "b2", "10.10.3.12:80".parse().unwrap(), "b2", NginxOpts::default()).expect("nginx b2");
    let dir = TempDir::new("hybrid-chain");
    let config = dir.path("sfc1.yaml");
    // Connections expire five seconds after their last packet: the
    // control plane's expiry (map reads and deletes) shows within the
    // test, and no stall of a loaded machine ends a connection in use.
    std::fs::write(&config, SFC1.replace("idle_timeout_s: 60", "idle_timeout_s: 5")).unwrap();
    let (mut rc, _) = start(&dir, &chain(tb.ns_name("dut"), &config.display().to_string()));
    rc.wait_connected(HANG_GUARD).unwrap();
    let st = wait_running(&rc);
    assert!(xdp_on(&tb, "d0") && xdp_on(&tb, "d1") && xdp_on(&tb, "d2"), "fast paths attached by ferryd");

    // The control planes: unprivileged, no capabilities, and holding the
    // maps of their own type only (eFW 4, eLB 7), the counters the data
    // path writes read-only (eFW: rule hits and NF counters; eLB: backend
    // load and NF counters).
    for (nf, maps, writable) in [("fw", 4, 2), ("lb", 7, 5)] {
        let pid = pid_of(&st, nf);
        let uids = proc_status(pid, "Uid:");
        assert!(uids.iter().all(|u| u != "0"), "{nf} runs as a user, not root: {uids:?}");
        assert_eq!(proc_status(pid, "CapEff:"), ["0000000000000000"], "{nf} has no capability");
        assert_eq!(bpf_maps(pid), maps, "{nf} holds its type's maps");
        assert_eq!(writable_bpf_maps(pid), writable, "{nf} writes only its tables");
    }

    // Traffic: new connections spread over both backends; a denied subnet
    // is dropped in XDP; nftables (applied by ferryd) decides the rest.
    let seen = backends_seen(&tb, 20);
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["backend b1", "backend b2"], "{seen:?}");
    let denied = tb
        .exec("client", "curl", ["-s", "-m", "1", "--interface", "10.10.66.2", &format!("http://{VIP}/")])
        .status()
        .unwrap();
    assert!(!denied.success(), "the denied subnet gets no answer");
    let ssh = tb.exec("client", "curl", ["-s", "-m", "1", "http://10.10.2.11:22/"]).status().unwrap();
    assert!(!ssh.success(), "port 22 is dropped by nftables");
    let (dropped, _) = apps::nft_counter(&tb, "dut", "inet", "ferry_efw", "kernel_dropped").unwrap();
    assert!(dropped >= 1, "nftables in dut saw what no fast rule decided");

    // The counters the control planes publish: the fast paths', and the
    // eLB's expiry, which only its unprivileged process does.
    let counter = |s: &Status, nf: &str, name: &str| c(s, nf, name);
    let st = wait_for("the eLB's control plane to expire the 20 connections", || {
        let s = rc.status().ok()?;
        // Each control plane publishes on its own wake-ups.
        let fw_published = counter(&s, "fw", "deny") >= 1 && counter(&s, "fw", "allow") >= 20;
        (counter(&s, "lb", "conns_expired") >= 20 && fw_published).then_some(s)
    });
    assert!(counter(&st, "fw", "deny") >= 1 && counter(&st, "fw", "allow") >= 20, "{st:?}");
    assert!(counter(&st, "lb", "new_conn") >= 20 && counter(&st, "lb", "reply_rewritten") >= 20, "{st:?}");
    // The monitor ran ahead of them, in their pipeline: it saw every frame
    // the firewall decided, and the flows of the GETs to the VIP.
    let mon = st.offloaded.iter().find(|n| n.name == "mon").expect("the monitor in XDP");
    assert_eq!(mon.port, "client");
    let mon_rx = mon.counters.iter().find(|(k, _)| k == "rx").map_or(0, |(_, v)| *v);
    let fw_decided: u64 = ["allow", "deny", "to_kernel", "not_ip"].iter().map(|k| counter(&st, "fw", k)).sum();
    assert!(mon_rx >= fw_decided && fw_decided > 0, "monitor rx {mon_rx}, firewall decided {fw_decided}");
    assert!(mon.flows.iter().any(|f| f.dst == VIP && f.dport == 80), "{:?}", mon.flows);
    assert_eq!((counter(&st, "fw", "malformed"), counter(&st, "lb", "malformed")), (0, 0));

    // The fast path does not need its control planes: with both stopped,
    // every new connection to the VIP is still balanced and answered.
    let (fw_pid, old) = (pid_of(&st, "fw"), pid_of(&st, "lb"));
    let maps_before = bpf_map_ids(old);
    for pid in [fw_pid, old] {
        // SAFETY: kill(2) with pids ferryd reported for the NFs.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    }
    let seen = backends_seen(&tb, 10);
    assert_eq!(seen.values().sum::<u32>(), 10, "answered while the control planes are stopped: {seen:?}");
    for pid in [fw_pid, old] {
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
    // A control plane that dies is restarted, with the same maps.
    // SAFETY: as above.
    unsafe { libc::kill(old as i32, libc::SIGKILL) };
    let st = wait_for("the eLB's control plane restarted", || {
        let s = rc.status().ok()?;
        let lb = s.nfs.iter().find(|n| n.name == "lb")?;
        let new = lb.pid.filter(|p| *p != old)?;
        // Its maps arrive with its welcome: wait until the new process holds them.
        (lb.connected && lb.restarts == 1 && bpf_map_ids(new) == maps_before).then_some(s)
    });
    assert_eq!(bpf_map_ids(pid_of(&st, "lb")), maps_before, "the restarted control plane holds the same maps");
    assert_eq!(backends_seen(&tb, 6).values().sum::<u32>(), 6, "answered after the restart");

    // Removed: programs off the devices, nftables table gone.
    chainctl::remove(&rc.admin, "edge").expect("remove the chain");
    assert!(!xdp_on(&tb, "d0") && !xdp_on(&tb, "d1") && !xdp_on(&tb, "d2"), "fast paths detached");
    let tables = run_in(&tb, "dut", "nft", &["list", "tables"]).unwrap();
    assert!(!tables.contains("ferry_efw"), "the firewall's nftables table goes with the chain: {tables}");
    rc.shutdown().unwrap();
    drop((b1, b2));
    down_and_check(tb);
}

/// examples/chains/edge-dpi.yaml (eVNF's SFC 2 as a chain: client -> eFW
/// -> eDPI -> kernel hop), filled in for this testbed.
fn dpi_chain(dut: &str) -> String {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/chains");
    let examples = examples.canonicalize().unwrap();
    let text = std::fs::read_to_string(examples.join("edge-dpi.yaml")).unwrap();
    text.replace("{dut}", dut).replace("{examples}", &examples.display().to_string())
}

#[test]
fn edpi_in_a_chain_inspects_on_its_slow_path_and_bypasses_the_elephant() {
    if !privileged("hybrid_dpi_chain") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    let server = "10.10.2.11".parse().unwrap();
    let _elephant = Iperf3Server::start(&tb, "b1", server, 5201, None).expect("iperf3 server 5201");
    let _mouse = Iperf3Server::start(&tb, "b1", server, 5301, None).expect("iperf3 server 5301");
    let dir = TempDir::new("hybrid-dpi");
    let (mut rc, _) = start(&dir, &dpi_chain(tb.ns_name("dut")));
    rc.wait_connected(HANG_GUARD).unwrap();
    let st = wait_running(&rc);
    let pid = pid_of(&st, "dpi");
    assert!(proc_status(pid, "Uid:").iter().all(|u| u != "0"), "the eDPI runs as a user");
    assert_eq!(proc_status(pid, "CapEff:"), ["0000000000000000"], "the eDPI has no capability");
    assert_eq!(bpf_maps(pid), 2, "the eDPI holds its bypass table and the counters");
    assert_eq!(writable_bpf_maps(pid), 1, "the counters read-only");

    // As in the eVNF test; the inspected flow goes through the kernel hop.
    elephant_and_mouse(&tb, server);
    // Every frame the eDPI's thread received went on into the kernel.
    let settled = |s: &Status| {
        let received = c(s, "dpi", "rx_port");
        c(s, "dpi", "bypass_installed") >= 2 && received > 0 && c(s, "dpi", "to_kernel") == received
    };
    let s = wait_for("the flows classified and the slow path drained", || rc.status().ok().filter(settled));
    let (bypassed, inspected) = (c(&s, "dpi", "bypass"), c(&s, "dpi", "rx_port"));
    assert!(bypassed > 1000 && inspected > 1000, "the elephant bypassed, the mouse inspected: {s:?}");
    assert!(c(&s, "dpi", "to_slow_path") >= inspected, "{s:?}");
    assert_eq!((c(&s, "dpi", "drop_nf"), c(&s, "dpi", "malformed")), (0, 0), "{s:?}");
    // The unprivileged control plane ages the idle rules out (idle timeout
    // 5 s in examples/evnf/sfc2.yaml).
    wait_until("the idle bypass rules to age out", || rc.status().is_ok_and(|s| c(&s, "dpi", "bypass_expired") >= 2));

    // A restarted eDPI process gets the slow path back: ferryd registers
    // its new socket, and a new flow reaches it.
    let old = pid_of(&s, "dpi");
    // SAFETY: kill(2) with the pid ferryd reported for the NF.
    unsafe { libc::kill(old as i32, libc::SIGKILL) };
    let s = wait_for("the eDPI restarted and receiving", || {
        let s = rc.status().ok()?;
        let dpi = s.nfs.iter().find(|n| n.name == "dpi")?;
        let up = dpi.connected && dpi.pid.is_some_and(|p| p != old) && dpi.restarts == 1;
        (up && dpi.rings.iter().all(|r| r.loops >= 2)).then_some(s)
    });
    let before = c(&s, "dpi", "rx_port");
    let small = IperfOpts { bytes: Some(1 << 20), bitrate: Some(40_000_000), ..Default::default() };
    let report = apps::iperf3_clients(&tb, "client", &[IperfJob { server, port: 5301, opts: small }]).unwrap();
    assert!(report[0].bytes_received > 0, "{report:?}");
    wait_until("the new process inspected the new flow", || {
        rc.status()
            .is_ok_and(|s| c(&s, "dpi", "rx_port") > before && c(&s, "dpi", "to_kernel") == c(&s, "dpi", "rx_port"))
    });

    // Two chains' firewalls in one namespace: the second's nftables table
    // would replace the first's, so that deploy is refused, until the
    // first chain (and its table) is gone.
    let fw_chain = |name: &str, dev: &str| {
        let file = dir.path(&format!("{name}.yaml"));
        let sfc1 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/evnf/sfc1.yaml");
        let text = format!(
            "name: {name}\ndomains: [ {{ name: main, frames: 1024 }} ]\nports:\n  - {{ name: p, netns: {}, netdev: {dev} \
             }}\nnfs:\n  - {{ name: fw, domain: main, kind: efw, args: [\"config={}\"] }}\nlinks:\n  - {{ from: p, to: \
             fw }}\n",
            tb.ns_name("dut"),
            sfc1.canonicalize().unwrap().display()
        );
        std::fs::write(&file, text).unwrap();
        file
    };
    let (one, two) = (fw_chain("fw1", "d1"), fw_chain("fw2", "d2"));
    chainctl::deploy(&rc.admin, &one).expect("the first firewall chain");
    let err = chainctl::deploy(&rc.admin, &two).expect_err("a second ferry_efw table in dut");
    assert!(err.to_string().contains("already exist in namespace"), "{err:#}");
    assert!(!xdp_on(&tb, "d2"), "the refused chain left nothing attached");
    chainctl::remove(&rc.admin, "fw1").expect("remove the first");
    chainctl::deploy(&rc.admin, &two).expect("the table is free again");
    chainctl::remove(&rc.admin, "fw2").expect("remove the second");

    chainctl::remove(&rc.admin, "sfc2").expect("remove the chain");
    assert!(!xdp_on(&tb, "d0"), "the fast path left d0");
    let tables = run_in(&tb, "dut", "nft", &["list", "tables"]).unwrap();
    assert!(!tables.contains("ferry_efw"), "{tables}");
    rc.shutdown().unwrap();
    down_and_check(tb);
}

/// eVNF's weights and feedback, changed at run time by `ferry chain
/// reload`: open connections stay on their backend, new ones follow the
/// weights in force; a bad file is refused and changes nothing.
#[test]
fn reload_moves_new_connections_and_keeps_open_ones() {
    if !privileged("hybrid_reload") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    // /big: 3 MiB at 32 KiB/s, about 96 s per download, so the four
    // downloads are still open while the reloads run, the feedback
    // settles and the twenty requests below run: all that takes seconds,
    // and a loaded machine has many times that (checked after the
    // requests).
    let opts = NginxOpts { big_file_bytes: 3 << 20, limit_rate: Some(32 << 10), ..Default::default() };
    let _b1 = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", opts.clone()).expect("nginx b1");
    let _b2 = Nginx::start(&tb, "b2", "10.10.3.12:80".parse().unwrap(), "b2", opts).expect("nginx b2");
    // Weight 0 for b2: every new connection goes to b1.
    let only_b1 = SFC1.replace("10.10.3.12:80, weight: 1", "10.10.3.12:80, weight: 0");
    let chain = SfcChain::start(&tb, EDGE, &only_b1, None).expect("eFW -> eLB under ferryd");
    let downloads: Vec<_> = (0..4)
        .map(|_| {
            let names = (*tb).clone();
            std::thread::spawn(move || {
                let opts = CurlOpts { timeout: Duration::from_secs(240), local_port: None };
                apps::curl_get(&names, "client", &format!("http://{VIP}/big"), opts)
            })
        })
        .collect();
    wait_until("the four downloads open at b1", || established(&tb, "b1", 80).unwrap().len() >= 4);
    assert!(established(&tb, "b2", 80).unwrap().is_empty(), "no connection to the weight-0 backend");

    // A file that does not parse is refused, with its line and field, and
    // changes nothing.
    let bad = only_b1.replace("weight: 0", "weight: 20000");
    let err = chain.reload(&bad).expect_err("a weight over the limit");
    assert!(err.to_string().contains("evnf.yaml:") && err.to_string().contains("backends[1].weight"), "{err:#}");
    let s = chain.rc.status().unwrap();
    assert_eq!((c(&s, "lb", "reloads"), c(&s, "lb", "reload_errors")), (0, 0), "nothing was applied");
    // A ruleset that would replace a table someone else holds in dut is
    // refused, as at deploy, and the table stays.
    run_in(&tb, "dut", "nft", &["add", "table", "inet", "ferry_host"]).unwrap();
    let takeover =
        only_b1.replace("    table inet ferry_efw {", "    table inet ferry_host { }\n    table inet ferry_efw {");
    assert_ne!(takeover, only_b1, "the example's ruleset declares table inet ferry_efw");
    let err = chain.reload(&takeover).expect_err("a reload that takes over a table");
    assert!(err.to_string().contains("already exist in namespace"), "{err:#}");
    let tables = run_in(&tb, "dut", "nft", &["list", "tables"]).unwrap();
    assert!(tables.contains("ferry_host") && tables.contains("ferry_efw"), "{tables}");

    // Equal weights, with feedback: b1 carries 4 open connections, b2 none.
    // Each round moves b1's weight by 1/sqrt(2) down and b2's up to the
    // range limit (4x); after four rounds both sit at their limits, 0.25
    // and 4.0, where they stay while the downloads last.
    let feedback = SFC1.replace("  idle_timeout_s: 60", "  idle_timeout_s: 60\n  feedback: { interval_ms: 100 }");
    chain.reload(&feedback).expect("reload with feedback: both NFs apply it");
    let s = chain.rc.status().unwrap();
    assert_eq!((c(&s, "fw", "reloads"), c(&s, "lb", "reloads")), (1, 1), "{s:?}");
    wait_until("four feedback rounds", || chain.rc.status().is_ok_and(|s| c(&s, "lb", "feedback_rounds") >= 4));
    // New connections now go mostly to b2: it holds 400 of every 425 slots
    // of the selection ring. Fixed source ports make the flow hashes, so the
    // slots the connections land in, the same on every run.
    let mut to_b2 = 0;
    for port in 42_000..42_020 {
        let opts = CurlOpts { local_port: Some(port), ..CurlOpts::default() };
        let r = apps::curl_get(&tb, "client", &format!("http://{VIP}/"), opts).unwrap();
        to_b2 += (r.body.trim() == "backend b2") as u32;
    }
    assert!(to_b2 >= 14, "{to_b2} of 20 new connections went to the idle backend");
    // The premise held throughout: the downloads were still open at b1.
    assert!(established(&tb, "b1", 80).unwrap().len() >= 4, "the downloads stay at b1 over the reloads");
    let s = chain.rc.status().unwrap();
    assert!(c(&s, "lb", "conns_open") >= 4, "{s:?}");
    for d in downloads {
        let r = d.join().unwrap().expect("downloads complete");
        assert_eq!((r.status, r.body.len()), (200, 3 << 20), "complete, from their original backend");
    }
    chain.stop().unwrap();
    down_and_check(tb);
}
