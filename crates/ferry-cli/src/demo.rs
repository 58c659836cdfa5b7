//! `ferry demo` (what `make demo` runs): builds the demo testbed, answers
//! ping from a client namespace through the AF_XDP ARP + ICMP responders,
//! pushes generator traffic through an AF_XDP l2fwd and back to the
//! generator's own AF_XDP sockets (which measure loss, reordering and
//! latency), prints per-NF statistics and tears everything down.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::proc::{self, num};

pub const DEMO_TESTBED: &str = include_str!("../../../examples/testbeds/demo.yaml");
pub const RESPONDER_IP: &str = "10.0.1.2";
pub const RESPONDER_MAC: &str = "02:00:00:00:01:02";
pub const L2FWD_MAC: &str = "02:00:00:00:02:02";

#[derive(Debug, Serialize)]
pub struct DemoReport {
    pub ping_output: String,
    pub ping_replies: u32,
    pub responder: Value,
    pub l2fwd: Value,
    pub generator: Value,
    pub sink: Value,
}

pub fn run(packets: u64) -> Result<DemoReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    eprintln!("[demo] creating testbed: client -- dut(d0: ARP+ICMP responder), gen -- dut(d1: l2fwd)");
    let tb = ferry_testbed::up(&spec)?;
    let (gen, dut) = (tb.ns_name("gen"), tb.ns_name("dut"));
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let responder = proc::spawn(
        dut,
        &args(&[
            "nf",
            "run",
            "--dev",
            "d0",
            "arp-responder",
            &format!("{RESPONDER_IP}={RESPONDER_MAC}"),
            "--",
            "icmp-echo",
            RESPONDER_IP,
        ]),
        None,
    )?;
    let l2fwd = proc::spawn(dut, &args(&["nf", "run", "--dev", "d1", "l2fwd"]), None)?;
    for (ns, dev) in [(dut, "d0"), (dut, "d1")] {
        proc::wait_for_xdp(ns, dev, Duration::from_secs(10))?;
    }

    eprintln!("[demo] ping {RESPONDER_IP} from the client namespace (answered by the AF_XDP responder)");
    let out = tb
        .exec("client", "ping", ["-c", "5", "-i", "0.2", "-W", "1", RESPONDER_IP])
        .output()
        .context("running ping")?;
    let ping_output = String::from_utf8_lossy(&out.stdout).to_string();
    eprint!("{ping_output}");
    let ping_replies = ping_output.lines().filter(|l| l.contains("bytes from")).count() as u32;

    eprintln!("[demo] generator: {packets} UDP frames at 200 kpps, AF_XDP TX on g0 -> l2fwd on d1 -> back to g0");
    let gen_args = args(&[
        "gen",
        "xsk",
        "--dev",
        "g0",
        "--rx",
        "--dst-mac",
        L2FWD_MAC,
        "--count",
        &packets.to_string(),
        "--rate",
        "200000",
        "--set",
        "flows=256",
    ]);
    let generator = proc::spawn(gen, &gen_args, None)?.wait(Duration::from_secs(60)).context("generator")?;
    // The generator received the looped-back frames on its own sockets.
    let sink = generator["received"].clone();
    let responder = responder.stop().context("responder")?;
    let l2fwd = l2fwd.stop().context("l2fwd")?;
    tb.down()?;
    eprintln!("[demo] testbed torn down");
    if ping_replies == 0 {
        return Err(anyhow!("no ping replies: the responder did not answer\n{ping_output}"));
    }
    Ok(DemoReport { ping_output, ping_replies, responder, l2fwd, generator, sink })
}

/// The per-NF table and the traffic summary.
pub fn text(r: &DemoReport) -> String {
    let mut s = String::from("\nper-NF statistics\n");
    s += &format!("{:<24} {:>10} {:>10}  {}\n", "NF (process, device)", "rx", "tx", "other verdicts");
    for (proc_name, report) in [("responder d0", &r.responder), ("l2fwd d1", &r.l2fwd)] {
        for nf in report["nfs"].as_array().into_iter().flatten() {
            let counters: Vec<(String, u64)> = serde_json::from_value(nf["counters"].clone()).unwrap_or_default();
            let get = |k: &str| counters.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
            let others: Vec<String> = counters
                .iter()
                .filter(|(n, v)| n != "rx" && n != "tx" && *v > 0)
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            s += &format!(
                "{:<24} {:>10} {:>10}  {}\n",
                format!("{} ({proc_name})", nf["name"].as_str().unwrap_or("?")),
                get("rx"),
                get("tx"),
                others.join(" ")
            );
        }
        s += &format!(
            "{:<24} {:>10} {:>10}  unclaimed={} tx_ring_full={} xsk_rx_dropped={}\n",
            format!("  AF_XDP port ({proc_name})"),
            num(report, "/rx_packets"),
            num(report, "/tx_packets"),
            num(report, "/drop_unclaimed"),
            num(report, "/drop_tx_full"),
            num(report, "/xsk_rx_dropped")
        );
    }
    s += &format!("\nping: {} of 5 replies\n", r.ping_replies);
    s += &format!(
        "generator: {} frames sent in {:.2} s\nsink: {} received, {} lost, {} reordered; latency p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us\n",
        num(&r.generator, "/sent"),
        num(&r.generator, "/seconds"),
        num(&r.sink, "/packets"),
        num(&r.sink, "/lost"),
        num(&r.sink, "/reordered"),
        num(&r.sink, "/latency/p50_ns") / 1e3,
        num(&r.sink, "/latency/p99_ns") / 1e3,
        num(&r.sink, "/latency/p999_ns") / 1e3,
    );
    s
}
