//! `ferry bench chain --scenarios load`: latency against offered load
//! At each load, a chain of N forwarding NFs and its
//! comparison run side by side, one after the other:
//!
//! * memory mode: Ferry zero-copy (ferryd, the in-domain `source` paced at
//!   the load, N `fwd` NFs, `sink`) against two one-process bounds: the
//!   same NFs on the SDK as threads of one `ferry-host host` process (the
//!   same code, rings and pool; only the processes differ), and the
//!   hand-written threads of `inproc.rs`, its source paced the same way;
//! * veth mode: Ferry on the demo testbed (`gen live` paced into d0, N
//!   `fwd` NFs kept processes with `offload: never`, else placement would
//!   run them in XDP, out of d1 into the AF_XDP sink) against the kernel chain
//!   (each NF a namespace, veth pairs, XDP redirect).
//!
//! Loads: 10 kpps, then 25%, 50% and 80% of saturation, and saturation
//! itself (flat out). Saturation is what the Ferry chain carries flat out
//! in that mode, measured first, so both columns get the same offered
//! loads. Each row has p50, p99 and p99.9 and the CPU of each NF process
//! (for the one-process bound, the whole process).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::chain::{inproc_row, measure_chain, BenchChainOptions, ChainShape, CpuSample, Row, ZERO_COPY};
use crate::inproc::InprocOptions;
use crate::kchain::{run_kernel_chain, KernelChainMode, KernelChainOptions};
use ferry_cli::chainctl;
use ferry_cli::demo::{DEMO_TESTBED, IN_MAC};
use ferry_cli::proc::{self, num, wait_for_xdp};

const GEN_CPU: usize = 0;
/// The sink and every NF process (XDP runs where frames arrive).
const CHAIN_CPU: usize = 1;
/// The paced loads below saturation, as shares of it.
const SHARES: [f64; 3] = [0.25, 0.5, 0.8];
/// The lowest load, frames per second.
const LOW_PPS: u64 = 10_000;

/// The loads to offer, in frames per second (None: flat out), given the
/// saturation rate.
fn loads(saturation_pps: f64) -> Vec<Option<u64>> {
    let mut v = vec![Some(LOW_PPS)];
    v.extend(SHARES.iter().map(|s| Some((saturation_pps * s) as u64)).filter(|r| r.is_some_and(|r| r > LOW_PPS)));
    v.push(None);
    v
}

fn load_label(rate: Option<u64>) -> String {
    rate.map_or("saturation".into(), |r| format!("{} kpps", r / 1000))
}

fn memory_rows(dir: &Path, n: usize, o: &BenchChainOptions, rows: &mut Vec<Row>) -> Result<()> {
    let chain = |rate: Option<u64>, hosted: bool, fused: bool| -> Result<Row> {
        let name = format!("load-{n}-{}-{hosted}-{fused}", rate.unwrap_or(0));
        let shape = ChainShape { fwds: n, source_rate: rate, hosted, fused, poll: o.poll.as_deref(), ..ZERO_COPY };
        let (mut row, _) = measure_chain(dir, &name, shape, o)?;
        row.scenario = "load".into();
        row.variant = match (hosted, fused) {
            (true, _) => "one-process-sdk",
            (false, true) => "ferry-fused",
            (false, false) => "ferry-zero-copy",
        }
        .into();
        row.nfs = n;
        row.offered_pps = rate;
        Ok(row)
    };
    let flat = chain(None, false, false)?;
    for rate in loads(flat.mpps * 1e6) {
        rows.push(chain(rate, false, true)?);
        rows.push(match rate {
            None => flat.clone(),
            Some(_) => chain(rate, false, false)?,
        });
        rows.push(chain(rate, true, false)?);
        let opts = InprocOptions { nfs: n, duration: o.window, warmup: o.warmup, rate_pps: rate, ..Default::default() };
        rows.push(inproc_row("load", "one-process-threads", &opts)?);
    }
    Ok(())
}

/// Ferry on the demo testbed: d0 -> N fwd -> d1, at `rate` (None: flat
/// out for the window), every frame counted at the sink; `fused`: with
/// `fuse: auto`, the N forwarders in one NF's threads.
fn ferry_veth(
    tb: &ferry_testbed::Testbed,
    dir: &Path,
    (n, fused): (usize, bool),
    rate: Option<u64>,
    o: &BenchChainOptions,
) -> Result<Row> {
    let dut = tb.ns_name("dut");
    let poll = o.poll.as_ref().map_or(String::new(), |p| format!(", poll: {{ {p} }}"));
    let nf = |i: usize| {
        format!("  - {{ name: nf{i}, domain: main, kind: fwd, offload: never, cpus: [{CHAIN_CPU}]{poll} }}\n")
    };
    let nodes: Vec<String> =
        std::iter::once("in".to_string()).chain((1..=n).map(|i| format!("nf{i}"))).chain(["out".into()]).collect();
    let links: String = nodes.windows(2).map(|w| format!("  - {{ from: {}, to: {} }}\n", w[0], w[1])).collect();
    let yaml = format!(
        "name: veth\ndomains: [ {{ name: main, frames: 8192, fuse: {} }} ]\nports:\n  - {{ name: in, netns: \"{dut}\", netdev: d0, xdp_mode: \
         driver }}\n  - {{ name: out, netns: \"{dut}\", netdev: d1, xdp_mode: driver }}\nnfs:\n{}links:\n{links}",
        if fused { "auto" } else { "never" },
        (1..=n).map(nf).collect::<String>()
    );
    let chain = dir.join(format!("veth-{n}.yaml"));
    std::fs::write(&chain, yaml)?;
    let rc = chainctl::start(&chain, &dir.join("veth.sock"), true).context("starting ferryd")?;
    let (gen_ns, sink_ns) = (tb.ns_name("gen"), tb.ns_name("sink"));
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    let cap = ms(o.window + Duration::from_secs(30));
    let mut sink_args = vec!["sink", "--dev", "s0", "--idle-exit", "1s", "--duration", &cap];
    let mut gen_args = vec!["gen", "live", "--dev", "g0", "--dst-mac", IN_MAC, "--size", "64"];
    let (count, rate_s, window) = (
        rate.map(|r| (r as f64 * o.window.as_secs_f64()) as u64).unwrap_or(0).to_string(),
        rate.unwrap_or(0).to_string(),
        ms(o.window),
    );
    match rate {
        Some(_) => {
            sink_args.extend(["--count", &count]);
            gen_args.extend(["--rate", &rate_s, "--count", &count]);
        }
        None => gen_args.extend(["--duration", &window]),
    }
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let sink = proc::spawn(sink_ns, &owned(&sink_args), Some(CHAIN_CPU))?;
    wait_for_xdp(sink_ns, "s0", Duration::from_secs(60))?;
    let st = rc.status()?;
    let cpu = CpuSample::start(st.nfs.iter().filter_map(|n| n.pid.map(|p| (n.name.clone(), p))).collect());
    let gen = proc::spawn(gen_ns, &owned(&gen_args), Some(GEN_CPU))?.wait(o.window + Duration::from_secs(60))?;
    let sink: Value = sink.finish(Duration::from_secs(10)).context("sink")?;
    let cpu_percent = cpu.percent();
    rc.shutdown()?;
    let us = |p: &str| sink.pointer(p).and_then(Value::as_f64).map(|ns| ns / 1e3);
    let sent = num(&gen, "/sent");
    let received = num(&sink, "/packets");
    Ok(Row {
        scenario: "load".into(),
        variant: if fused { "ferry-veth-fused" } else { "ferry-veth" }.into(),
        nfs: n,
        mode: "veth".into(),
        mpps: num(&sink, "/pps") / 1e6,
        offered_pps: rate,
        p50_us: us("/latency/p50_ns"),
        p99_us: us("/latency/p99_ns"),
        p999_us: us("/latency/p999_ns"),
        cpu_percent,
        notes: BTreeMap::from([("lost".to_string(), (sent - received).max(0.0))]),
    })
}

fn kernel_row(n: usize, rate: Option<u64>, o: &BenchChainOptions) -> Result<Row> {
    let r = run_kernel_chain(&KernelChainOptions {
        nfs: n,
        mode: KernelChainMode::XdpRedirect,
        rate_pps: rate,
        count: rate.map(|r| (r as f64 * o.window.as_secs_f64()) as u64),
        duration: o.window + Duration::from_secs(if rate.is_some() { 30 } else { 0 }),
        ..Default::default()
    })?;
    Ok(Row {
        scenario: "load".into(),
        variant: "kernel-xdp-redirect".into(),
        nfs: n,
        mode: "veth".into(),
        mpps: r.rx_mpps,
        offered_pps: rate,
        p50_us: r.latency_p50_us,
        p99_us: r.latency_p99_us,
        p999_us: r.latency_p999_us,
        notes: BTreeMap::from([("lost".to_string(), r.lost as f64)]),
        ..Default::default()
    })
}

fn veth_rows(dir: &Path, n: usize, o: &BenchChainOptions, rows: &mut Vec<Row>) -> Result<()> {
    let spec = ferry_testbed::TestbedSpec::from_yaml_str(DEMO_TESTBED, "examples/testbeds/demo.yaml")?;
    let tb = ferry_testbed::up(&spec).context("building the testbed")?;
    let flat = ferry_veth(&tb, dir, (n, false), None, o)?;
    let plan = loads(flat.mpps * 1e6);
    for rate in plan {
        rows.push(ferry_veth(&tb, dir, (n, true), rate, o)?);
        let row = match rate {
            None => flat.clone(),
            Some(_) => ferry_veth(&tb, dir, (n, false), rate, o)?,
        };
        rows.push(row);
        if o.kernel {
            rows.push(kernel_row(n, rate, o)?);
        }
    }
    tb.down()?;
    Ok(())
}

/// The load scenario's rows: per chain length, memory mode then veth mode.
pub fn rows(dir: &Path, o: &BenchChainOptions) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in &o.load_nfs {
        memory_rows(dir, n, o, &mut rows)?;
        veth_rows(dir, n, o, &mut rows)?;
    }
    Ok(rows)
}

/// The CPU of a row's processes (NFs, or the one process), percent of
/// one CPU; "-" where none was measured (the kernel chain runs in softirq).
fn cpu(row: &Row) -> String {
    let total: f64 = row.cpu_percent.iter().filter(|(k, _)| k.as_str() != "ferryd").map(|(_, v)| v).sum();
    if row.cpu_percent.is_empty() {
        "-".into()
    } else {
        format!("{total:.0}%")
    }
}

/// Each load's Ferry rows, then its comparisons at the same load, each
/// with every Ferry row's p50 over its own.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "latency against offered load (p50 / p99 / p99.9 us; CPU of the NF processes, and per frame; ratios = each \
         Ferry p50 / this p50)\n",
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let mut ferry: Vec<&Row> = Vec::new();
    let mut last_was_ferry = false;
    for row in rows {
        let is_ferry = row.variant.starts_with("ferry");
        if is_ferry && !last_was_ferry {
            ferry.clear();
        }
        if is_ferry {
            ferry.push(row);
        }
        last_was_ferry = is_ferry;
        let ratio = match row.p50_us.filter(|y| !is_ferry && *y > 0.0) {
            Some(y) => ferry
                .iter()
                .filter_map(|x| x.p50_us.map(|p| format!("{}={:.2}", x.variant, p / y)))
                .collect::<Vec<_>>()
                .join(" "),
            None => String::new(),
        };
        out += &format!(
            "{:<6} nfs={} {:<11} {:<21} {:>6.3} Mpps {:>7}/{:>7}/{:>8} {:>5} {:>8}  {ratio}\n",
            row.mode,
            row.nfs,
            load_label(row.offered_pps),
            row.variant,
            row.mpps,
            f(row.p50_us),
            f(row.p99_us),
            f(row.p999_us),
            cpu(row),
            row.cpu_ns_per_frame().map_or("-".into(), |ns| format!("{ns:.0} ns")),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_run_from_10_kpps_to_saturation() {
        assert_eq!(loads(1_000_000.0), [Some(10_000), Some(250_000), Some(500_000), Some(800_000), None]);
        // A share below 10 kpps is left out: the lowest load comes once.
        assert_eq!(loads(30_000.0), [Some(10_000), Some(15_000), Some(24_000), None]);
        assert_eq!(loads(0.0), [Some(10_000), None]);
        assert_eq!(load_label(Some(250_000)), "250 kpps");
        assert_eq!(load_label(None), "saturation");
    }
}
