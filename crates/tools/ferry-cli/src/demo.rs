//! `ferry demo` (what `make demo` runs): builds the demo testbed, starts
//! ferryd on the demo chain (responder -> l2fwd -> fwd between d0 and d1),
//! pings the chain's AF_XDP responder, pushes generator traffic through the
//! chain to an AF_XDP sink, prints per-NF statistics and the frame audit,
//! and tears everything down.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use ferry_chain::proto::{AuditReport, Status};
use serde::Serialize;
use serde_json::Value;

use crate::chainctl;
use crate::proc::{self, num};

pub const DEMO_TESTBED: &str = include_str!("../../../../examples/testbeds/demo.yaml");
pub const DEMO_CHAIN: &str = include_str!("../../../../examples/chains/demo.yaml");
pub const RESPONDER_IP: &str = "10.0.1.2";
pub const IN_MAC: &str = "02:00:00:00:01:02";

#[derive(Debug, Serialize)]
pub struct DemoReport {
    pub ping_output: String,
    pub ping_replies: u32,
    pub chain: Status,
    pub audit: Vec<AuditReport>,
    pub generator: Value,
    pub sink: Value,
}

/// The demo chain for the testbed's `dut` namespace, its NFs on `cpu`
/// if given.
fn demo_chain(dut: &str, cpu: Option<usize>) -> Result<String> {
    let text = DEMO_CHAIN.replace("{dut}", dut);
    let Some(cpu) = cpu else { return Ok(text) };
    let mut spec = ferry_catalog::parse_chain_str(&text, "examples/chains/demo.yaml")?;
    for nf in &mut spec.nfs {
        nf.cpus = vec![cpu as u32];
    }
    Ok(serde_yaml::to_string(&spec)?)
}

pub fn run(packets: u64) -> Result<DemoReport> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    eprintln!("[demo] testbed: gen (g0) -- dut (d0 ... d1) -- sink (s0)");
    let tb = ferry_testbed::up(&spec)?;
    let (gen, dut, sink_ns) = (tb.ns_name("gen"), tb.ns_name("dut"), tb.ns_name("sink"));
    let dir = std::env::temp_dir().join(format!("ferry-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // The generator paces by spinning on its CPU; an NF woken there waits
    // for the scheduler tick (4 ms at HZ=250 without preemption), which
    // made the demo's p99 about 4 ms. So the generator gets CPU 0 and the
    // sink and the NF processes (`cpus:`, set by ferryd) share CPU 1 (p99
    // about 40 us).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (gen_cpu, sink_cpu) = if cpus >= 2 { (Some(0), Some(1)) } else { (None, None) };
    let chain = dir.join("demo.yaml");
    std::fs::write(&chain, demo_chain(dut, sink_cpu)?)?;
    eprintln!(
        "[demo] ferryd: chain in(d0) -> resp (ARP+ICMP) -> l2fwd -> fwd -> out(d1), fused (fuse: auto): one process \
         runs the three NFs to completion, as the domain's own allocated uid"
    );
    let rc = chainctl::start(&chain, &dir.join("ferryd.sock"), true)?;
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    eprintln!("[demo] ping {RESPONDER_IP} from gen (answered by the chain's AF_XDP responder)");
    // A reply counts as lost only after 10 s: a loaded machine is slow, not lossy.
    let out = tb.exec("gen", "ping", ["-c", "5", "-i", "0.2", "-W", "10", RESPONDER_IP]).output().context("ping")?;
    let ping_output = String::from_utf8_lossy(&out.stdout).to_string();
    eprint!("{ping_output}");
    let ping_replies = ping_output.lines().filter(|l| l.contains("bytes from")).count() as u32;

    // Roomy sink rings: 32768 frames are 0.65 s of the demo's traffic, so a
    // sink kept off its CPU by other load does not turn into chain loss.
    let sink_args = ["sink", "--dev", "s0", "--idle-exit", "1500ms", "--ring", "32768", "--frames", "65536"];
    let sink = proc::spawn(sink_ns, &args(&sink_args), sink_cpu)?;
    proc::wait_for_xdp(sink_ns, "s0", Duration::from_secs(60))?;
    eprintln!("[demo] generator: {packets} UDP frames at 50 kpps into d0; the chain sends them out of d1 to the sink");
    let gen_args = args(&[
        "gen",
        "xsk",
        "--dev",
        "g0",
        "--dst-mac",
        IN_MAC,
        "--count",
        &packets.to_string(),
        "--rate",
        "50000",
        "--set",
        "flows=256",
    ]);
    let generator = proc::spawn(gen, &gen_args, gen_cpu)?.wait(Duration::from_secs(120)).context("generator")?;
    let sink = sink.wait(Duration::from_secs(30)).context("sink")?;
    let status = rc.status()?;
    let audit = rc.audit()?;
    rc.shutdown()?;
    tb.down()?;
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("[demo] chain stopped, testbed torn down");
    if ping_replies == 0 {
        return Err(anyhow!("no ping replies: the chain's responder did not answer\n{ping_output}"));
    }
    Ok(DemoReport { ping_output, ping_replies, chain: status, audit, generator, sink })
}

/// The per-NF table, the audit and the traffic summary.
pub fn text(r: &DemoReport) -> String {
    let mut s = String::from("\nper-NF statistics (ferry chain show)\n");
    s += &chainctl::status_table(&r.chain);
    for a in &r.audit {
        s += &format!(
            "frame audit, domain {}: {} frames = {} in pool + {} in rings + {} held; {}\n",
            a.domain,
            a.frames_total,
            a.in_pool,
            a.in_rings,
            a.held_by_threads,
            if a.conserved() { "conserved" } else { "NOT CONSERVED" }
        );
    }
    s += &format!("\nping: {} of 5 replies\n", r.ping_replies);
    s += &format!(
        "generator: {} frames sent in {:.2} s\nsink: {} received, {} lost, {} reordered; latency p50 {:.1} us, p99 {:.1} us\n",
        num(&r.generator, "/sent"),
        num(&r.generator, "/seconds"),
        num(&r.sink, "/packets"),
        num(&r.sink, "/lost"),
        num(&r.sink, "/reordered"),
        num(&r.sink, "/latency/p50_ns") / 1e3,
        num(&r.sink, "/latency/p99_ns") / 1e3,
    );
    s
}
