//! End to end: the kernel-chain baseline (`ferry_bench::kchain`), a chain of
//! l2fwd NFs built from namespaces, veths and the stock kernel (XDP
//! redirect or a Linux bridge in each NF), with the live generator and the
//! AF_XDP sink as `ferry` processes. Needs root.
//!
//! `kernel_chain_sweep` (ignored) measures nfs = 1, 2, 4 in both modes
//! flat out and prints a table: `cargo test --release -p ferry-cli --test
//! e2e_kchain -- --ignored --nocapture` (`KCHAIN_NAPI_CPU=1` runs the NF
//! namespaces' NAPI in threads pinned to CPU 1).

mod common;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use ferry_bench::kchain::{run_kernel_chain, table, KernelChainMode, KernelChainOptions, KernelChainResult};

/// The chains share two CPUs with everything else: one at a time.
static ONE_CHAIN: Mutex<()> = Mutex::new(());

/// The sink's rings hold all of them (see `kchain::run_traffic`).
const PACKETS: u64 = 20_000;
const RATE_PPS: u64 = 100_000;

/// Prerequisites beyond root and iproute2: the bridge mode turns GRO on
/// with ethtool.
fn ready(test: &str) -> bool {
    if !privileged(test) {
        return false;
    }
    let ethtool = std::process::Command::new("ethtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ethtool {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but {test} cannot run: it needs ethtool");
        eprintln!("SKIP {test}: needs ethtool");
        return false;
    }
    true
}

fn chain(
    nfs: usize,
    mode: KernelChainMode,
    rate_pps: Option<u64>,
    count: Option<u64>,
    napi_cpu: Option<usize>,
) -> KernelChainResult {
    let _one = ONE_CHAIN.lock().unwrap_or_else(|e| e.into_inner());
    let opts = KernelChainOptions {
        nfs,
        mode,
        frame_len: 64,
        rate_pps,
        count,
        duration: Duration::from_secs(if count.is_some() { 10 } else { 2 }),
        napi_cpu,
        ferry_exe: Some(PathBuf::from(FERRY)),
    };
    let r = run_kernel_chain(&opts).unwrap_or_else(|e| panic!("kernel chain, {nfs} NFs, {}: {e:#}", mode.name()));
    let prefix = format!("{}-", r.testbed_instance);
    let left: Vec<String> = netns_list().into_iter().filter(|n| n.starts_with(&prefix)).collect();
    assert!(left.is_empty(), "the kernel chain left namespaces behind: {left:?}");
    r
}

/// Tries a bounded run up to three times. The sink's rings hold the whole
/// run, so a sink kept off its CPU by other jobs loses nothing; the veths'
/// queues between the NFs can still overflow when the kernel defers their
/// NAPI to a ksoftirqd that the same load keeps off its CPU. A broken
/// chain fails every attempt.
fn check_bounded_run(mode: KernelChainMode) {
    let mut r = chain(2, mode, Some(RATE_PPS), Some(PACKETS), None);
    for _ in 0..2 {
        if r.received * 10 > PACKETS * 9 {
            break;
        }
        eprintln!(
            "{}: {} of {PACKETS} frames reached the sink (NFs forwarded {:?}); p99 latency {:?} us: trying again",
            mode.name(),
            r.received,
            r.hops.iter().map(|h| h.in_rx_packets).collect::<Vec<_>>(),
            r.latency_p99_us
        );
        r = chain(2, mode, Some(RATE_PPS), Some(PACKETS), None);
    }
    let report = serde_json::to_string_pretty(&r).unwrap();
    assert_eq!(r.sent, PACKETS, "generator sent its count: {report}");
    assert!(r.received * 10 > PACKETS * 9, "over 90% reach the sink: {report}");
    assert!(r.received <= PACKETS, "no frame counted twice: {report}");
    let (p50, p99) = (r.latency_p50_us.expect("p50 latency"), r.latency_p99_us.expect("p99 latency"));
    assert!(p50 > 0.0 && p50 <= p99, "latency percentiles: {report}");
    assert!(r.rx_mpps > 0.0 && r.offered_pps > 0.0, "rates: {report}");
    assert_eq!(r.hops.len(), 2);
    for hop in &r.hops {
        assert!(hop.in_rx_packets * 10 > PACKETS * 9, "every NF saw the traffic: {report}");
        match mode {
            KernelChainMode::XdpRedirect => {
                let redirected = hop.xdp_redirected.expect("redirect counters in XDP mode");
                assert!(redirected * 10 > PACKETS * 9, "every NF redirected the traffic: {report}");
            }
            KernelChainMode::Bridge => {
                assert!(hop.xdp_redirected.is_none(), "no XDP in bridge mode: {report}");
                assert!(hop.out_tx_packets * 10 > PACKETS * 9, "every bridge forwarded: {report}");
            }
        }
    }
    eprint!("{}", table(&[r]));
}

#[test]
fn two_nf_xdp_redirect_chain_delivers() {
    if !ready("two_nf_xdp_redirect_chain_delivers") {
        return;
    }
    check_bounded_run(KernelChainMode::XdpRedirect);
}

#[test]
fn two_nf_bridge_chain_delivers() {
    if !ready("two_nf_bridge_chain_delivers") {
        return;
    }
    check_bounded_run(KernelChainMode::Bridge);
}

#[test]
fn failed_run_tears_the_testbed_down() {
    if !ready("failed_run_tears_the_testbed_down") {
        return;
    }
    let _one = ONE_CHAIN.lock().unwrap_or_else(|e| e.into_inner());
    // The generator refuses a frame too short for its headers, after the
    // testbed is up and the NFs and the sink are attached.
    let opts = KernelChainOptions {
        nfs: 2,
        frame_len: 20,
        count: Some(10),
        ferry_exe: Some(PathBuf::from(FERRY)),
        ..Default::default()
    };
    let e = format!("{:#}", run_kernel_chain(&opts).expect_err("a 20-byte frame cannot be generated"));
    assert!(e.contains("generator"), "the error names the failed step: {e}");
    // "... on testbed fy123456: ...": the namespaces' prefix.
    let instance = e
        .split_once("on testbed ")
        .map(|(_, rest)| rest.chars().take_while(char::is_ascii_alphanumeric).collect::<String>())
        .unwrap_or_else(|| panic!("the error names the testbed: {e}"));
    assert!(instance.starts_with("fy") && instance.len() == 8, "testbed instance {instance:?} in: {e}");
    let prefix = format!("{instance}-");
    let left: Vec<String> = netns_list().into_iter().filter(|n| n.starts_with(&prefix)).collect();
    assert!(left.is_empty(), "a failed kernel chain left its namespaces behind: {left:?}");
}

#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn kernel_chain_sweep() {
    if !ready("kernel_chain_sweep") {
        return;
    }
    let napi_cpu = std::env::var("KCHAIN_NAPI_CPU").ok().map(|v| v.parse().expect("KCHAIN_NAPI_CPU: a CPU number"));
    let mut results = Vec::new();
    for mode in KernelChainMode::ALL {
        for nfs in [1, 2, 4] {
            results.push(chain(nfs, mode, None, None, napi_cpu));
        }
    }
    println!("{}", table(&results));
    println!("{}", serde_json::to_string_pretty(&results).unwrap());
}
