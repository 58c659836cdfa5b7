//! The hybrid NFs end to end on examples/testbeds/sfc.yaml: real HTTP
//! through eFW -> eLB to two nginx backends and back, weights changed at
//! run time, the firewall's kernel half (nftables), and iperf3 flows
//! through eFW -> eDPI with nDPI classifying and bypass rules aging out.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use ferry_cli::evnfproc::{established, run_in, sfc_testbed, EvnfProc, SFC1, SFC2, VIP};
use ferry_testbed::apps::{self, CurlOpts, Iperf3Server, Nginx, NginxOpts};

fn backend_of(body: &str) -> String {
    body.trim().strip_prefix("backend ").unwrap_or(body).to_string()
}

#[test]
fn http_through_efw_and_elb_to_two_nginx_backends() {
    if !privileged("evnf_http") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    // /big: 3 MiB at 512 KiB/s, a download of about 6 s: long enough to be
    // seen at its backend and still be under way at the reload, however
    // slowly a loaded machine runs the steps in between.
    let opts = NginxOpts { big_file_bytes: 3 << 20, limit_rate: Some(512 << 10), ..Default::default() };
    let b1 = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", opts.clone()).expect("nginx b1");
    let b2 = Nginx::start(&tb, "b2", "10.10.3.12:80".parse().unwrap(), "b2", opts).expect("nginx b2");
    let mut nf = EvnfProc::start(Path::new(FERRY), &tb, SFC1, None).expect("ferry evnf run");

    // New connections spread over both backends.
    let url = format!("http://{VIP}/");
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..20 {
        let r = apps::curl_get(&tb, "client", &url, CurlOpts::default()).expect("GET through the chain");
        assert_eq!(r.status, 200);
        *seen.entry(backend_of(&r.body)).or_default() += 1;
    }
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), ["b1", "b2"], "both backends answer: {seen:?}");

    // Requests on one connection stay on its backend.
    let urls: Vec<String> = (0..5).map(|_| url.clone()).collect();
    let bodies = apps::curl_many(&tb, "client", &urls).expect("keep-alive requests");
    assert!(bodies.iter().all(|b| *b == bodies[0]), "one connection, one backend: {bodies:?}");

    // A long download is under way; its backend gets weight 0. New
    // connections move to the other backend, the download does not.
    let download = {
        let names = (*tb).clone();
        std::thread::spawn(move || {
            // Below the kernel's ephemeral range (32768-60999), so no earlier
            // connection of this client (in TIME_WAIT, say) can hold the port.
            let opts = CurlOpts { timeout: Duration::from_secs(120), local_port: Some(31_000) };
            apps::curl_get(&names, "client", &format!("http://{VIP}/big"), opts)
        })
    };
    let busy = wait_for("the download's connection at a backend", || {
        assert!(!download.is_finished(), "the download ended before its backend was seen");
        ["b1", "b2"]
            .into_iter()
            .find(|ns| established(&tb, ns, 80).unwrap().iter().any(|(_, peer)| peer.ends_with(":31000")))
    });
    let other = if busy == "b1" { "b2" } else { "b1" };
    let reweighted = if busy == "b1" {
        SFC1.replace("10.10.2.11:80, weight: 1", "10.10.2.11:80, weight: 0")
    } else {
        SFC1.replace("10.10.3.12:80, weight: 1", "10.10.3.12:80, weight: 0")
    };
    let status = nf.reload(&reweighted).expect("reload with new weights");
    assert_eq!(status["generation"], 2);
    for _ in 0..10 {
        let r = apps::curl_get(&tb, "client", &url, CurlOpts::default()).expect("GET after the reload");
        assert_eq!(backend_of(&r.body), other, "new connections avoid the weight-0 backend");
    }
    let big = download.join().unwrap().expect("the download survives the weight change");
    assert_eq!((big.status, big.body.len()), (200, 3 << 20), "complete, from its original backend");

    // The firewall: a denied subnet dropped in XDP; ping and SSH decided by
    // nftables in the kernel (accepted, dropped).
    let denied = tb
        .exec("client", "curl", ["-s", "-m", "1", "--interface", "10.10.66.2", &url])
        .status()
        .expect("curl from the denied subnet");
    assert!(!denied.success(), "the denied subnet gets no answer");
    run_in(&tb, "client", "ping", &["-c", "2", "-W", "10", "10.10.2.11"]).expect("ping via the kernel's nftables");
    let ssh = tb.exec("client", "curl", ["-s", "-m", "1", "http://10.10.2.11:22/"]).status().unwrap();
    assert!(!ssh.success(), "port 22 is dropped by nftables");
    let (accepted, _) = apps::nft_counter(&tb, "dut", "inet", "ferry_efw", "kernel_accepted").unwrap();
    let (dropped, _) = apps::nft_counter(&tb, "dut", "inet", "ferry_efw", "kernel_dropped").unwrap();
    assert!(accepted >= 2 && dropped >= 1, "nftables saw the undecided frames: {accepted} accepted, {dropped} dropped");

    let report = nf.stop().expect("final report");
    let fw = &report["nfs"]["firewall"]["counters"];
    let lb = &report["nfs"]["balancer"]["counters"];
    assert!(fw["deny"].as_u64().unwrap() >= 1, "{fw}");
    assert!(fw["to_kernel"].as_u64().unwrap() >= 3, "{fw}");
    assert!(lb["new_conn"].as_u64().unwrap() >= 32, "{lb}");
    assert_eq!((fw["malformed"].as_u64(), lb["malformed"].as_u64()), (Some(0), Some(0)));
    let nft_left = run_in(&tb, "dut", "nft", &["list", "tables"]).unwrap();
    assert!(!nft_left.contains("ferry_efw"), "the firewall's nftables table is removed when it stops");
    drop((b1, b2));
    down_and_check(tb);
}

#[test]
fn iperf3_through_efw_and_edpi_with_bypass_rules_that_age_out() {
    if !privileged("evnf_dpi") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    let server = "10.10.2.11".parse().unwrap();
    let _elephant = Iperf3Server::start(&tb, "b1", server, 5201, None).expect("iperf3 server 5201");
    let _mouse = Iperf3Server::start(&tb, "b1", server, 5301, None).expect("iperf3 server 5301");
    let config = SFC2.replace("idle_timeout_s: 5", "idle_timeout_s: 1");
    let nf = EvnfProc::start(Path::new(FERRY), &tb, &config, None).expect("ferry evnf run");

    // The bypass rule is installed reactively, within milliseconds of the
    // elephant's first classified packets; "more than 1000 bypassed"
    // leaves it nearly three seconds, a hundred times that.
    elephant_and_mouse(&tb, server);

    // The status is written periodically: wait for one written after the
    // flows were classified and the slow path drained its socket (every
    // frame sent to it accounted for).
    let settled = |s: &serde_json::Value| {
        let (dpi, sp) = (&s["nfs"]["dpi"], &s["slow_path"][0]);
        let accounted = sp["received"].as_u64().unwrap_or(0) + sp["socket_dropped"].as_u64().unwrap_or(0);
        dpi["bypass_installed"].as_u64().unwrap_or(0) >= 2
            && Some(accounted) == dpi["counters"]["to_slow_path"].as_u64()
    };
    let s = wait_for("the flows classified and the slow path drained", || nf.status().ok().filter(settled));
    let dpi = &s["nfs"]["dpi"];
    assert!(dpi["classified_flows"]["Iperf"].as_u64().unwrap_or(0) >= 1, "{dpi}");
    let (bypassed, slow) =
        (dpi["counters"]["bypass"].as_u64().unwrap(), dpi["counters"]["to_slow_path"].as_u64().unwrap());
    assert!(bypassed > 1000 && slow > 1000, "the elephant is bypassed, the mouse inspected: {dpi}");
    let sp = &s["slow_path"][0];
    let (received, reinjected) = (sp["received"].as_u64().unwrap(), sp["reinjected"].as_u64().unwrap());
    assert_eq!(received + sp["socket_dropped"].as_u64().unwrap(), slow, "every slow-path frame is accounted for: {s}");
    assert_eq!(reinjected, received, "slow-path frames go back to the kernel: {s}");
    // Only the elephant's flows have rules, and they name the port.
    for r in dpi["bypass_rules"].as_array().unwrap() {
        assert!(r["flow"].as_str().unwrap().contains("5201"), "{r}");
    }
    // Idle rules age out (idle timeout 1 s, checked every 0.5 s).
    let s = wait_for("the idle bypass rules to age out", || {
        nf.status().ok().filter(|s| s["nfs"]["dpi"]["bypass_rules"].as_array().is_some_and(Vec::is_empty))
    });
    let dpi = &s["nfs"]["dpi"];
    assert_eq!(dpi["bypass_rules"].as_array().map(Vec::len), Some(0), "{dpi}");
    assert!(dpi["bypass_expired"].as_u64().unwrap() >= 2, "{dpi}");
    let _ = nf.stop().expect("final report");
    down_and_check(tb);
}

#[test]
fn dynamic_feedback_shifts_weight_away_from_the_loaded_backend() {
    if !privileged("evnf_feedback") {
        return;
    }
    let tb = sfc_testbed().expect("SFC testbed");
    // /big: 3 MiB at 64 KiB/s, about 48 s per download, so the four
    // downloads are still open while the feedback settles and the twenty
    // requests below run, however slowly a loaded machine gets there
    // (checked after the requests).
    let opts = NginxOpts { big_file_bytes: 3 << 20, limit_rate: Some(64 << 10), ..Default::default() };
    let _b1 = Nginx::start(&tb, "b1", "10.10.2.11:80".parse().unwrap(), "b1", opts.clone()).expect("nginx b1");
    let _b2 = Nginx::start(&tb, "b2", "10.10.3.12:80".parse().unwrap(), "b2", opts).expect("nginx b2");
    // All new connections to b1 first.
    let only_b1 = SFC1.replace("10.10.3.12:80, weight: 1", "10.10.3.12:80, weight: 0");
    let mut nf = EvnfProc::start(Path::new(FERRY), &tb, &only_b1, None).expect("ferry evnf run");
    let downloads: Vec<_> = (0..4)
        .map(|_| {
            let names = (*tb).clone();
            std::thread::spawn(move || {
                let opts = CurlOpts { timeout: Duration::from_secs(120), local_port: None };
                apps::curl_get(&names, "client", &format!("http://{VIP}/big"), opts)
            })
        })
        .collect();
    wait_until("the four downloads open at b1", || established(&tb, "b1", 80).unwrap().len() >= 4);
    // Equal weights, with feedback: b1 carries 4 open connections, b2 none.
    // Each round moves b1's weight by 1/sqrt(2) down and b2's up to the
    // range limit (4x); after four rounds both sit at their limits, 0.25
    // and 4.0, where they stay while the downloads last.
    let feedback = SFC1.replace("  idle_timeout_s: 60", "  idle_timeout_s: 60\n  feedback: { interval_ms: 100 }");
    nf.reload(&feedback).expect("reload with feedback");
    let weight =
        |s: &serde_json::Value, backend: usize| s["nfs"]["balancer"]["backends"][backend]["weight_now"].as_f64();
    let s = wait_for("the feedback to settle at its limits", || {
        nf.status().ok().filter(|s| weight(s, 0) == Some(0.25) && weight(s, 1) == Some(4.0))
    });
    let be = &s["nfs"]["balancer"]["backends"];
    assert_eq!(be[0]["open_conns"], 4, "{be}");
    assert!(s["nfs"]["balancer"]["feedback_rounds"].as_u64().unwrap() >= 4);
    // New connections now go mostly to b2: it holds 400 of every 425 slots
    // of the selection ring. Fixed source ports make the flow hashes, so the
    // slots the connections land in, the same on every run.
    let mut to_b2 = 0;
    for port in 42_000..42_020 {
        let opts = CurlOpts { local_port: Some(port), ..CurlOpts::default() };
        let r = apps::curl_get(&tb, "client", &format!("http://{VIP}/"), opts).unwrap();
        to_b2 += (backend_of(&r.body) == "b2") as u32;
    }
    assert!(to_b2 >= 14, "{to_b2} of 20 new connections went to the idle backend");
    // The premise held throughout: the downloads were still open and the
    // weights still at their limits.
    let s = nf.status().unwrap();
    assert!(s["nfs"]["balancer"]["backends"][0]["open_conns"].as_u64() >= Some(4), "{s}");
    assert_eq!((weight(&s, 0), weight(&s, 1)), (Some(0.25), Some(4.0)), "{s}");
    for d in downloads {
        let r = d.join().unwrap().expect("downloads complete");
        assert_eq!(r.body.len(), 3 << 20);
    }
    nf.stop().expect("final report");
    down_and_check(tb);
}
