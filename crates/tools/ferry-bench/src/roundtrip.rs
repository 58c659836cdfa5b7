//! `ferry bench chain --scenarios roundtrip`: polling against load, with a
//! clean instrument. One `l2fwd` NF sends each frame back out of the port
//! it came in on (d0); `ferry gen xsk --rx` sends and receives on g0, on
//! CPU 0, and the NF runs alone on CPU 1, so no instrument shares its CPU.
//! At 10, 50, 100 and 200 kpps the NF runs under each polling mode of
//! [`MODES`]: the trade-off between latency and CPU each one buys. The
//! fifth runs four NFs (`l2fwd`, then three `fwd`) fused into one,
//! busy, on the same CPU: a chain that costs one core. The last lets
//! placement run the l2fwd in XDP (its ether-swap element, the frame
//! redirected back out of d0): no process and no AF_XDP hop at all.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::chain::{BenchChainOptions, CpuSample, Row};
use ferry_cli::chainctl;
use ferry_cli::demo::{DEMO_TESTBED, IN_MAC};
use ferry_cli::proc::{self, num};

const GEN_CPU: usize = 0;
const NF_CPU: usize = 1;
/// The paced loads, frames per second.
const RATES: [u64; 4] = [10_000, 50_000, 100_000, 200_000];

/// One polling setup of the NF(s): its row name, NF count, the chain
/// file's `poll:` and `offload:` (`never` keeps them processes, the
/// polling being what the row measures; `auto` lets placement run them
/// in XDP).
struct Mode {
    variant: &'static str,
    nfs: usize,
    poll: &'static str,
    offload: &'static str,
}

/// The rows at each load: the default; a fixed 50 µs spin window after
/// every frame (smart polling's own knobs); an adaptive window of at most
/// 50 µs (`spin_us`); busy mode; four NFs fused and busy; l2fwd in XDP. (The kernel's preferred busy polling is not among them: a veth's
/// AF_XDP sockets get no NAPI id, so ferryd refuses it here.)
const MODES: [Mode; 6] = [
    Mode { variant: "ferry-l2fwd-default", nfs: 1, poll: "", offload: "never" },
    Mode {
        variant: "ferry-l2fwd-spin50",
        nfs: 1,
        poll: "poll: { busy_threshold: 1, idle_timeout_us: 50 }",
        offload: "never",
    },
    Mode { variant: "ferry-l2fwd-adaptive50", nfs: 1, poll: "poll: { spin_us: 50 }", offload: "never" },
    Mode { variant: "ferry-l2fwd-busy", nfs: 1, poll: "poll: { busy: true }", offload: "never" },
    Mode { variant: "ferry-4-fused-busy", nfs: 4, poll: "poll: { busy: true }", offload: "never" },
    Mode { variant: "ferry-l2fwd-xdp", nfs: 1, poll: "", offload: "auto" },
];

/// The roundtrip rows: for each load, each of [`MODES`].
pub fn rows(dir: &Path, o: &BenchChainOptions) -> Result<Vec<Row>> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let mut rows = Vec::new();
    for rate in RATES {
        for mode in &MODES {
            rows.push(one(&tb, dir, mode, rate, o)?);
        }
    }
    tb.down()?;
    Ok(rows)
}

/// d0 -> l2fwd (-> fwd ...: `nfs` NFs, fused) -> d0 at `rate`, for the window.
fn one(tb: &ferry_testbed::Testbed, dir: &Path, mode: &Mode, rate: u64, o: &BenchChainOptions) -> Result<Row> {
    let dut = tb.ns_name("dut");
    let (nfs, poll) = (mode.nfs, if mode.poll.is_empty() { String::new() } else { format!(", {}", mode.poll) });
    let nf = |i: usize| {
        let kind = if i == 1 { "l2fwd" } else { "fwd" };
        format!(
            "  - {{ name: nf{i}, domain: main, kind: {kind}, offload: {}, cpus: [{NF_CPU}]{poll} }}\n",
            mode.offload
        )
    };
    let nodes: Vec<String> =
        std::iter::once("in".to_string()).chain((1..=nfs).map(|i| format!("nf{i}"))).chain(["in".into()]).collect();
    let links: String = nodes.windows(2).map(|w| format!("  - {{ from: {}, to: {} }}\n", w[0], w[1])).collect();
    let yaml = format!(
        "name: roundtrip\ndomains: [ {{ name: main, frames: 8192, fuse: auto }} ]\nports:\n  - {{ name: in, netns: \
         \"{dut}\", netdev: d0, xdp_mode: driver }}\nnfs:\n{}links:\n{links}",
        (1..=nfs).map(nf).collect::<String>()
    );
    let chain = dir.join("roundtrip.yaml");
    std::fs::write(&chain, yaml)?;
    let rc = chainctl::start(&chain, &dir.join("roundtrip.sock"), true).context("starting ferryd")?;
    let count = ((rate as f64 * o.window.as_secs_f64()) as u64).to_string();
    let rate_s = rate.to_string();
    let gen_args: Vec<String> =
        ["gen", "xsk", "--dev", "g0", "--dst-mac", IN_MAC, "--size", "64", "--rx", "--rate", &rate_s]
            .iter()
            .chain(["--count", count.as_str()].iter())
            .map(|s| s.to_string())
            .collect();
    let st = rc.status()?;
    let cpu = CpuSample::start(st.nfs.iter().filter_map(|n| n.pid.map(|p| (n.name.clone(), p))).collect());
    let gen = proc::spawn(tb.ns_name("gen"), &gen_args, Some(GEN_CPU))?.wait(o.window + Duration::from_secs(60))?;
    let cpu_percent = cpu.percent();
    rc.shutdown()?;
    let us = |p: &str| gen.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    let received = num(&gen, "/received/packets");
    Ok(Row {
        scenario: "roundtrip".into(),
        variant: mode.variant.to_string(),
        nfs,
        mode: "veth".into(),
        mpps: received / num(&gen, "/seconds").max(1e-9) / 1e6,
        offered_pps: Some(rate),
        p50_us: us("/received/latency/p50_ns"),
        p99_us: us("/received/latency/p99_ns"),
        p999_us: us("/received/latency/p999_ns"),
        cpu_percent,
        notes: BTreeMap::from([("lost".to_string(), (num(&gen, "/sent") - received).max(0.0))]),
    })
}
