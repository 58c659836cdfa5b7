//! `ferry bench parallel`: the parallel runtime (NFOS) driven by in-memory
//! traces, so that the traffic generator does not compete with the
//! workers for this machine's 2 vCPUs.
//!
//! * Scaling: each of the six NFs over the same trace on 1 and 2 worker
//!   cores: Mpps, speedup, transactions, abort rate, the share of worker
//!   time spent in the transaction runtime (measured by the engine: begin
//!   and commit timed, accesses timed on a random sample), load imbalance
//!   and the run's peak resident memory (its growth from 1 to 2 workers is
//!   the memory a core costs).
//! * NFOS's three case studies, run as the profiler would be used: the
//!   "before" configuration is profiled, the profiler's own report names
//!   the root cause and recipe, and the "after" configuration applies it.
//!
//! The trace is split over the workers (Toeplitz hash over the NF's
//! packet-set fields, as RSS would spread it over queues) before the clock
//! starts, so the time measured is the workers' alone: on 2 vCPUs a
//! dispatcher thread would compete with them.

use anyhow::{anyhow, Context, Result};
use ferry_parallel::profiler::Profile;
use ferry_parallel::runtime::Packet;
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
    /// Share of the workers' busy time spent in the transaction runtime
    /// (`TxStats::runtime_ns` over `WorkerReport::busy_ns`).
    pub runtime_share: f64,
    pub imbalance: f64,
    /// Peak resident memory of the process during the run (the trace's
    /// copy included), MiB.
    pub peak_rss_mib: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Speedup {
    pub nf: String,
    /// The median over alternating pairs of runs of the 1-worker time over
    /// the 2-worker time.
    pub speedup_2_over_1: f64,
    /// Peak memory on 2 workers minus on 1: what the second core costs.
    pub extra_worker_mib: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseStudyRow {
    pub name: &'static str,
    pub before: String,
    pub after: String,
    pub mpps_before: f64,
    pub mpps_after: f64,
    /// The median over alternating pairs of runs of the time before over
    /// the time after.
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
    runtime_share: f64,
    imbalance: f64,
    peak_rss_mib: f64,
    profile: Profile,
}

fn run_once(nf: &str, args: &[String], trace: &[Packet], workers: usize) -> Result<RunResult> {
    reset_peak_rss();
    let run = run_named(nf, args, trace, workers).map_err(|e| anyhow!(e))?;
    let peak_rss_mib = status_kib("VmHWM:") / 1024.0;
    let stats = run.report.total_stats();
    let busy_ns: u64 = run.report.workers.iter().map(|w| w.busy_ns).sum();
    Ok(RunResult {
        seconds: run.elapsed.as_secs_f64(),
        packets: run.packets,
        transactions: stats.commits,
        aborts: stats.aborts,
        abort_rate: stats.abort_ratio(),
        runtime_share: (stats.runtime_ns() as f64 / busy_ns.max(1) as f64).min(1.0),
        imbalance: run.report.load_imbalance(),
        peak_rss_mib,
        profile: run.profile,
    })
}

/// Runs `a` and `b` alternately `runs` times (so drift in the machine's
/// speed hits both alike) and returns the median-throughput run of each
/// and the median of the per-pair ratios of `a`'s time to `b`'s (how many
/// times faster `b` is).
fn alternate(
    runs: usize,
    mut a: impl FnMut() -> Result<RunResult>,
    mut b: impl FnMut() -> Result<RunResult>,
) -> Result<(RunResult, RunResult, f64)> {
    let (mut all_a, mut all_b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let (x, y) = (a()?, b()?);
        ratios.push(x.seconds / y.seconds);
        all_a.push(x);
        all_b.push(y);
    }
    ratios.sort_by(f64::total_cmp);
    Ok((median(all_a), median(all_b), ratios[ratios.len() / 2]))
}

fn median(mut all: Vec<RunResult>) -> RunResult {
    all.sort_by(|a, b| (a.packets as f64 / a.seconds).total_cmp(&(b.packets as f64 / b.seconds)));
    all.swap_remove(all.len() / 2)
}

/// A field of /proc/self/status, in KiB (0 if unreadable).
fn status_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Gives freed heap back to the kernel and restarts the peak-RSS count
/// (`VmHWM`), so the next run's peak is its own.
fn reset_peak_rss() {
    // SAFETY: malloc_trim only releases free memory of glibc's heaps.
    unsafe { libc::malloc_trim(0) };
    // "5" resets the peak RSS (proc(5), clear_refs); if the kernel refuses,
    // the peak stays the process's and the column over-reports.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn row(nf: &str, workers: usize, r: &RunResult) -> ScalingRow {
    ScalingRow {
        nf: nf.to_string(),
        workers,
        mpps: r.packets as f64 / r.seconds / 1e6,
        transactions: r.transactions,
        aborts: r.aborts,
        abort_rate: r.abort_rate,
        runtime_share: r.runtime_share,
        imbalance: r.imbalance,
        peak_rss_mib: r.peak_rss_mib,
    }
}

pub fn run(opts: &BenchParallelOptions) -> Result<BenchParallelReport> {
    let mut report = BenchParallelReport {
        machine: crate::bench::machine_summary(),
        packets: opts.packets,
        runs: opts.runs.max(1),
        ..Default::default()
    };
    for nf in opts.nfs.iter().filter(|n| !n.is_empty() && *n != "none") {
        let (args, trace) = workload(nf, opts.packets).map_err(|e| anyhow!(e))?;
        let (one, two, speedup) = alternate(
            opts.runs,
            || run_once(nf, &args, &trace, 1).with_context(|| format!("{nf} on 1 worker")),
            || run_once(nf, &args, &trace, 2).with_context(|| format!("{nf} on 2 workers")),
        )?;
        report.speedups.push(Speedup {
            nf: nf.clone(),
            speedup_2_over_1: speedup,
            extra_worker_mib: two.peak_rss_mib - one.peak_rss_mib,
        });
        report.scaling.push(row(nf, 1, &one));
        report.scaling.push(row(nf, 2, &two));
    }
    if opts.case_studies {
        for case in &CASE_STUDIES {
            let (base, trace) = workload(case.nf, opts.packets).map_err(|e| anyhow!(e))?;
            let name = case.name;
            let (before_args, after_args) = (case.args(&base, false), case.args(&base, true));
            let (b, a, improvement) = alternate(
                opts.runs,
                || run_once(case.nf, &before_args, &trace, 2).with_context(|| format!("{name}: before")),
                || run_once(case.nf, &after_args, &trace, 2).with_context(|| format!("{name}: after")),
            )?;
            let (mb, ma) = (b.packets as f64 / b.seconds / 1e6, a.packets as f64 / a.seconds / 1e6);
            report.case_studies.push(CaseStudyRow {
                name,
                before: case.before.join(" "),
                after: case.after.join(" "),
                mpps_before: mb,
                mpps_after: ma,
                improvement,
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
    let mut out =
        format!(
        "machine: {}; trace of {} packets in memory; {} alternating runs per comparison, medians (ratios: median of the pairs')\n",
        r.machine, r.packets, r.runs
    );
    out += &format!(
        "\n{:<10} {:>7} {:>8} {:>9} {:>8} {:>7} {:>9} {:>9} {:>10}\n",
        "NF", "workers", "Mpps", "txs", "aborts", "abort%", "runtime%", "imbalance", "peak MiB"
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
            x.peak_rss_mib
        );
    }
    for s in &r.speedups {
        out += &format!(
            "  {}: 2 workers / 1 worker = {:.2}x; the second worker adds {:.1} MiB\n",
            s.nf, s.speedup_2_over_1, s.extra_worker_mib
        );
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
