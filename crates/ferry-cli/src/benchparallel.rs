//! `ferry bench parallel`: the parallel runtime (NFOS) driven by in-memory
//! traces, so that the traffic generator does not compete with the
//! workers for this machine's 2 vCPUs.
//!
//! * Scaling: each of the six NFs over the same trace on 1 and 2 worker
//!   cores: Mpps, speedup, transactions, abort rate, an estimate of the
//!   share of worker time spent in the transaction runtime, load imbalance
//!   and resident memory per worker.
//! * NFOS's three case studies, run as the profiler would be used: the
//!   "before" configuration is profiled, the profiler's own report names
//!   the root cause and recipe, and the "after" configuration applies it.
//!
//! The trace is split over the workers (Toeplitz hash over the NF's
//! packet-set fields, as RSS would spread it over queues) before the clock
//! starts, so the time measured is the workers' alone: on 2 vCPUs a
//! dispatcher thread would compete with them.

use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use ferry_parallel::profiler::Profile;
use ferry_parallel::runtime::Packet;
use ferry_parallel::stm::{Stm, StructureKind, TObj};
use ferry_parallel::workloads::{run_named, workload, CASE_STUDIES};
use serde::Serialize;

pub struct BenchParallelOptions {
    pub nfs: Vec<String>,
    pub packets: usize,
    pub runs: usize,
    pub case_studies: bool,
}

/// One NF on one worker count (the median of `runs`).
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRow {
    pub nf: String,
    pub workers: usize,
    pub mpps: f64,
    pub transactions: u64,
    pub aborts: u64,
    pub abort_rate: f64,
    /// Estimated share of worker time in the transaction runtime (accesses
    /// at their measured cost, commits, aborted attempts).
    pub runtime_share: f64,
    pub imbalance: f64,
    /// Growth of the process's resident memory during the run, per worker.
    pub rss_kib_per_worker: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Speedup {
    pub nf: String,
    pub speedup_2_over_1: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseStudyRow {
    pub name: &'static str,
    pub before: String,
    pub after: String,
    pub mpps_before: f64,
    pub mpps_after: f64,
    pub improvement: f64,
    pub abort_rate_before: f64,
    pub abort_rate_after: f64,
    /// The profiler's headline and top root cause on the "before" run.
    pub profiler_headline: String,
    pub profiler_top_cause: Option<String>,
    /// The root cause NFOS found in this case, and whether the profiler's
    /// top cause on the "before" run is it.
    pub expected_cause: &'static str,
    pub profiler_named_it: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct BenchParallelReport {
    pub machine: String,
    pub packets: usize,
    pub runs: usize,
    /// Measured cost of one transactional read / read-modify-write, ns.
    pub read_ns: f64,
    pub write_ns: f64,
    pub scaling: Vec<ScalingRow>,
    pub speedups: Vec<Speedup>,
    pub case_studies: Vec<CaseStudyRow>,
}

struct RunResult {
    seconds: f64,
    packets: usize,
    transactions: u64,
    aborts: u64,
    abort_rate: f64,
    runtime_ns: f64,
    imbalance: f64,
    rss_kib: f64,
    profile: Profile,
}

fn run_once(nf: &str, args: &[String], trace: &[Packet], workers: usize, costs: (f64, f64)) -> Result<RunResult> {
    let rss_before = rss_kib();
    let run = run_named(nf, args, trace, workers).map_err(|e| anyhow!(e))?;
    let stats = run.report.total_stats();
    // Accesses at their measured cost (begin and commit spread over them),
    // plus time in commits and in attempts that aborted.
    let runtime_ns =
        stats.reads as f64 * costs.0 + stats.writes as f64 * costs.1 + stats.commit_ns as f64 + stats.aborted_ns as f64;
    Ok(RunResult {
        seconds: run.elapsed.as_secs_f64(),
        packets: run.packets,
        transactions: stats.commits,
        aborts: stats.aborts,
        abort_rate: stats.abort_ratio(),
        runtime_ns,
        imbalance: run.report.load_imbalance(),
        rss_kib: (rss_kib() - rss_before).max(0.0),
        profile: run.profile,
    })
}

/// The run with the median throughput of `runs`.
fn median_run(
    nf: &str,
    args: &[String],
    trace: &[Packet],
    workers: usize,
    runs: usize,
    costs: (f64, f64),
) -> Result<RunResult> {
    let mut all = (0..runs.max(1)).map(|_| run_once(nf, args, trace, workers, costs)).collect::<Result<Vec<_>>>()?;
    all.sort_by(|a, b| (a.packets as f64 / a.seconds).total_cmp(&(b.packets as f64 / b.seconds)));
    Ok(all.swap_remove(all.len() / 2))
}

fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Cost of one read and one read-modify-write inside transactions of 32
/// accesses on one worker (begin and commit included, spread over them).
fn access_costs() -> Result<(f64, f64)> {
    const TXS: usize = 20_000;
    let stm = Stm::new(1).map_err(|e| anyhow!("{e}"))?;
    let id = stm.register(StructureKind::Object, "bench");
    let objects: Vec<TObj<u64>> = (0..32).map(|i| TObj::new(&stm, id, i, 0)).collect();
    let mut worker = stm.worker(0).map_err(|e| anyhow!("{e}"))?;
    let start = Instant::now();
    for _ in 0..TXS {
        worker.atomically(0, |tx| {
            let mut sum = 0u64;
            for o in &objects {
                sum = sum.wrapping_add(o.read(tx)?);
            }
            Ok(sum)
        });
    }
    let read = start.elapsed().as_nanos() as f64 / (TXS * objects.len()) as f64;
    let start = Instant::now();
    for _ in 0..TXS {
        worker.atomically(0, |tx| {
            for o in &objects {
                o.update(tx, |v| *v += 1)?;
            }
            Ok(())
        });
    }
    let write = start.elapsed().as_nanos() as f64 / (TXS * objects.len()) as f64;
    Ok((read, write))
}

fn row(nf: &str, workers: usize, r: &RunResult) -> ScalingRow {
    ScalingRow {
        nf: nf.to_string(),
        workers,
        mpps: r.packets as f64 / r.seconds / 1e6,
        transactions: r.transactions,
        aborts: r.aborts,
        abort_rate: r.abort_rate,
        runtime_share: (r.runtime_ns / (r.seconds * 1e9 * workers as f64)).min(1.0),
        imbalance: r.imbalance,
        rss_kib_per_worker: r.rss_kib / workers as f64,
    }
}

pub fn run(opts: &BenchParallelOptions) -> Result<BenchParallelReport> {
    let costs = access_costs()?;
    let mut report = BenchParallelReport {
        machine: crate::bench::machine_summary(),
        packets: opts.packets,
        runs: opts.runs.max(1),
        read_ns: costs.0,
        write_ns: costs.1,
        ..Default::default()
    };
    for nf in opts.nfs.iter().filter(|n| !n.is_empty() && *n != "none") {
        let (args, trace) = workload(nf, opts.packets).map_err(|e| anyhow!(e))?;
        let one = median_run(nf, &args, &trace, 1, opts.runs, costs).with_context(|| format!("{nf} on 1 worker"))?;
        let two = median_run(nf, &args, &trace, 2, opts.runs, costs).with_context(|| format!("{nf} on 2 workers"))?;
        report.speedups.push(Speedup { nf: nf.clone(), speedup_2_over_1: one.seconds / two.seconds });
        report.scaling.push(row(nf, 1, &one));
        report.scaling.push(row(nf, 2, &two));
    }
    if opts.case_studies {
        for case in &CASE_STUDIES {
            let (base, trace) = workload(case.nf, opts.packets).map_err(|e| anyhow!(e))?;
            let name = case.name;
            let b = median_run(case.nf, &case.args(&base, false), &trace, 2, opts.runs, costs)
                .with_context(|| format!("{name}: before"))?;
            let a = median_run(case.nf, &case.args(&base, true), &trace, 2, opts.runs, costs)
                .with_context(|| format!("{name}: after"))?;
            let (mb, ma) = (b.packets as f64 / b.seconds / 1e6, a.packets as f64 / a.seconds / 1e6);
            report.case_studies.push(CaseStudyRow {
                name,
                before: case.before.join(" "),
                after: case.after.join(" "),
                mpps_before: mb,
                mpps_after: ma,
                improvement: ma / mb.max(1e-12),
                abort_rate_before: b.abort_rate,
                abort_rate_after: a.abort_rate,
                profiler_headline: b.profile.headline.clone(),
                profiler_top_cause: b.profile.top_root_cause().map(|c| c.summary.clone()),
                expected_cause: case.cause.name(),
                profiler_named_it: b.profile.top_root_cause().is_some_and(|c| c.cause == case.cause),
            });
        }
    }
    Ok(report)
}

pub fn table(r: &BenchParallelReport) -> String {
    let mut out = format!(
        "machine: {}; trace of {} packets in memory, median of {} runs; a transactional read costs {:.0} ns, a read-modify-write {:.0} ns\n",
        r.machine, r.packets, r.runs, r.read_ns, r.write_ns
    );
    out += &format!(
        "\n{:<10} {:>7} {:>8} {:>9} {:>8} {:>7} {:>9} {:>9} {:>10}\n",
        "NF", "workers", "Mpps", "txs", "aborts", "abort%", "runtime%", "imbalance", "RSS KiB/w"
    );
    for x in &r.scaling {
        out += &format!(
            "{:<10} {:>7} {:>8.3} {:>9} {:>8} {:>7.2} {:>9.1} {:>9.2} {:>10.0}\n",
            x.nf,
            x.workers,
            x.mpps,
            x.transactions,
            x.aborts,
            x.abort_rate * 100.0,
            x.runtime_share * 100.0,
            x.imbalance,
            x.rss_kib_per_worker
        );
    }
    for s in &r.speedups {
        out += &format!("  {}: 2 workers / 1 worker = {:.2}x\n", s.nf, s.speedup_2_over_1);
    }
    for c in &r.case_studies {
        out += &format!(
            "\ncase study {}\n  before ({}): {:.3} Mpps, {:.2}% aborts\n  profiler: {}{}\n  after ({}): {:.3} Mpps, {:.2}% aborts: {:.2}x\n",
            c.name,
            c.before,
            c.mpps_before,
            c.abort_rate_before * 100.0,
            c.profiler_top_cause.as_deref().unwrap_or(&c.profiler_headline),
            if c.profiler_named_it { "" } else { " (NOT the expected cause)" },
            c.after,
            c.mpps_after,
            c.abort_rate_after * 100.0,
            c.improvement
        );
    }
    out
}
