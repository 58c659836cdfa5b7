//! `ferry bench parallel`: the parallel runtime (NFOS) driven by in-memory
//! traces, so that the traffic generator does not compete with the
//! workers for this machine's 2 vCPUs.
//!
//! * Scaling: each of the six NFs over the same trace on 1 and 2 worker
//!   cores: Mpps, speedup, transactions, abort rate, the share of worker
//!   time spent in the transaction runtime (measured by the engine: begin
//!   and commit timed, accesses timed on a random sample), load imbalance
//!   and memory: heap bytes building the NF's shared structures took and
//!   each worker's heap growth over its packets (counted per thread by
//!   `ferry_parallel::heap::CountingAlloc`, this binary's allocator), whose
//!   growth from 1 to 2 workers is what a core costs, next to the run's
//!   peak resident memory (NFOS's measure, dominated here by the trace in
//!   memory); in the same rounds, two controls on the
//!   same queues without the runtime or an NF (a set lookup and a copy per
//!   packet; register arithmetic only), whose ratios are what this
//!   machine gives two independent cores.
//! * NFOS's three case studies, run as the profiler would be used: the
//!   "before" configuration is profiled, the profiler's own report names
//!   the root cause and recipe, and the "after" configuration applies it.
//!
//! The trace is split over the workers (Toeplitz hash over the NF's
//! packet-set fields, as RSS would spread it over queues) before the clock
//! starts, so the time measured is the workers' alone: on 2 vCPUs a
//! dispatcher thread would compete with them.

use anyhow::{anyhow, Context, Result};
use ferry_equivalence::workloads::{run_control, run_named, workload, CASE_STUDIES};
use ferry_parallel::profiler::Profile;
use ferry_parallel::runtime::{ControlWork, Packet};
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
    /// Heap bytes building the engine and the NF took (the shared
    /// structures, with their per-worker parts), KiB.
    pub shared_kib: f64,
    /// Each worker's peak heap growth over its packets (set table,
    /// installed versions, buffers), KiB.
    pub worker_kib: Vec<f64>,
    /// Peak resident memory of the process during the run (the trace's
    /// copies included), MiB.
    pub peak_rss_mib: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Speedup {
    pub nf: String,
    /// The median over alternating pairs of runs of the 1-worker time over
    /// the 2-worker time.
    pub speedup_2_over_1: f64,
    /// NF state (shared plus every worker's, as in [`ScalingRow`]) on 2
    /// workers minus on 1: what the second core costs, KiB.
    pub extra_worker_kib: f64,
    /// The same difference in peak resident memory, MiB: the trace's
    /// copies make it mostly noise.
    pub extra_worker_rss_mib: f64,
    /// The controls, run in the same rounds over the same queues with no
    /// runtime and no NF: their median 2-worker over 1-worker ratios. The
    /// lookup control looks each packet's set up in a per-worker hash
    /// table and copies the packet (`lookup_control_mpps`: on 1 and 2
    /// workers); the compute control does only register arithmetic, about
    /// as long per packet as the light NFs take.
    pub lookup_control_speedup: f64,
    pub lookup_control_mpps: [f64; 2],
    pub compute_control_speedup: f64,
    /// The median over rounds of the NF's ratio over the lookup control's
    /// ratio in the same round.
    pub of_lookup_control: f64,
    /// Every round, in order: what the medians are taken over.
    pub rounds: Vec<ScalingRound>,
}

/// One round of [`Speedup`]: the NF and both controls on 1 and 2 workers.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingRound {
    /// The NF's Mpps on 1 and 2 workers.
    pub mpps: [f64; 2],
    pub speedup: f64,
    pub lookup_control_speedup: f64,
    pub compute_control_speedup: f64,
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
    shared_kib: f64,
    worker_kib: Vec<f64>,
    peak_rss_mib: f64,
    profile: Profile,
}

impl RunResult {
    /// The NF's state in this run: shared plus every worker's, KiB.
    fn state_kib(&self) -> f64 {
        self.shared_kib + self.worker_kib.iter().sum::<f64>()
    }
}

const KIB: f64 = 1024.0;

fn run_once(nf: &str, args: &[String], trace: &[Packet], workers: usize) -> Result<RunResult> {
    reset_peak_rss();
    let run = run_named(nf, args, trace, workers).map_err(|e| anyhow!(e))?;
    let peak_rss_mib = status_kib("VmHWM:") / 1024.0;
    let stats = run.report.total_stats();
    let busy_ns: u64 = run.report.workers.iter().map(|w| w.busy_ns).sum();
    let missing =
        || anyhow!("heap bytes not counted: the binary's allocator is not ferry_parallel::heap::CountingAlloc");
    let shared_kib = run.build_heap.ok_or_else(missing)?.net_bytes as f64 / KIB;
    let worker_kib = run
        .report
        .workers
        .iter()
        .map(|w| w.heap.map(|h| h.peak_bytes as f64 / KIB).ok_or_else(missing))
        .collect::<Result<Vec<f64>>>()?;
    Ok(RunResult {
        seconds: run.elapsed.as_secs_f64(),
        packets: run.packets,
        transactions: stats.commits,
        aborts: stats.aborts,
        abort_rate: stats.abort_ratio(),
        runtime_share: (stats.runtime_ns() as f64 / busy_ns.max(1) as f64).min(1.0),
        imbalance: run.report.load_imbalance(),
        shared_kib,
        worker_kib,
        peak_rss_mib,
        profile: run.profile,
    })
}

/// Register arithmetic per packet in the compute control: about 120 ns,
/// what the light NFs take per packet here.
const COMPUTE_CONTROL_ROUNDS: u32 = 100;

/// One NF's scaling: `runs` rounds of the NF on 1 and 2 workers and each
/// control on 1 and 2 workers, in turn, so drift in the machine's speed
/// hits all of them alike.
fn scaling(runs: usize, nf: &str, args: &[String], trace: &[Packet]) -> Result<(RunResult, RunResult, Speedup)> {
    let control = |work: ControlWork| -> Result<(f64, f64, f64)> {
        let mut seconds = [0.0; 2];
        let mut packets = 0;
        for (slot, workers) in [1, 2].into_iter().enumerate() {
            let (elapsed, n) = run_control(nf, args, trace, workers, work)
                .map_err(|e| anyhow!("{work:?} control on {workers} workers: {e}"))?;
            seconds[slot] = elapsed.as_secs_f64();
            packets = n;
        }
        let mpps = |s: f64| packets as f64 / s / 1e6;
        Ok((seconds[0] / seconds[1], mpps(seconds[0]), mpps(seconds[1])))
    };
    let (mut ones, mut twos, mut ratios, mut of_lookup) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut lookup, mut lookup_1, mut lookup_2, mut compute) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut rounds = Vec::new();
    for _ in 0..runs.max(1) {
        let one = run_once(nf, args, trace, 1).with_context(|| format!("{nf} on 1 worker"))?;
        let two = run_once(nf, args, trace, 2).with_context(|| format!("{nf} on 2 workers"))?;
        let (lookup_ratio, mpps_1, mpps_2) = control(ControlWork::LookupAndCopy)?;
        let (compute_ratio, _, _) = control(ControlWork::Arithmetic { rounds: COMPUTE_CONTROL_ROUNDS })?;
        let ratio = one.seconds / two.seconds;
        let mpps = |r: &RunResult| r.packets as f64 / r.seconds / 1e6;
        rounds.push(ScalingRound {
            mpps: [mpps(&one), mpps(&two)],
            speedup: ratio,
            lookup_control_speedup: lookup_ratio,
            compute_control_speedup: compute_ratio,
        });
        ratios.push(ratio);
        of_lookup.push(ratio / lookup_ratio);
        lookup.push(lookup_ratio);
        lookup_1.push(mpps_1);
        lookup_2.push(mpps_2);
        compute.push(compute_ratio);
        ones.push(one);
        twos.push(two);
    }
    let (one, two) = (median(ones), median(twos));
    let speedup = Speedup {
        nf: nf.to_string(),
        speedup_2_over_1: median_f64(ratios),
        extra_worker_kib: two.state_kib() - one.state_kib(),
        extra_worker_rss_mib: two.peak_rss_mib - one.peak_rss_mib,
        lookup_control_speedup: median_f64(lookup),
        lookup_control_mpps: [median_f64(lookup_1), median_f64(lookup_2)],
        compute_control_speedup: median_f64(compute),
        of_lookup_control: median_f64(of_lookup),
        rounds,
    };
    Ok((one, two, speedup))
}

fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
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
    Ok((median(all_a), median(all_b), median_f64(ratios)))
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
        shared_kib: r.shared_kib,
        worker_kib: r.worker_kib.clone(),
        peak_rss_mib: r.peak_rss_mib,
    }
}

pub fn run(opts: &BenchParallelOptions) -> Result<BenchParallelReport> {
    let mut report = BenchParallelReport {
        machine: crate::io::machine_summary(),
        packets: opts.packets,
        runs: opts.runs.max(1),
        ..Default::default()
    };
    for nf in opts.nfs.iter().filter(|n| !n.is_empty() && *n != "none") {
        let (args, trace) = workload(nf, opts.packets).map_err(|e| anyhow!(e))?;
        let (one, two, speedup) = scaling(opts.runs, nf, &args, &trace)?;
        report.speedups.push(speedup);
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
        "\n{:<10} {:>7} {:>8} {:>9} {:>8} {:>7} {:>9} {:>9} {:>10} {:>15} {:>8}\n",
        "NF",
        "workers",
        "Mpps",
        "txs",
        "aborts",
        "abort%",
        "runtime%",
        "imbalance",
        "shared KiB",
        "per-worker KiB",
        "peak MiB"
    );
    for x in &r.scaling {
        let per_worker: Vec<String> = x.worker_kib.iter().map(|k| format!("{k:.0}")).collect();
        out += &format!(
            "{:<10} {:>7} {:>8.3} {:>9} {:>8} {:>7.2} {:>9.1} {:>9.2} {:>10.0} {:>15} {:>8.0}\n",
            x.nf,
            x.workers,
            x.mpps,
            x.transactions,
            x.aborts,
            x.abort_rate * 100.0,
            x.runtime_share * 100.0,
            x.imbalance,
            x.shared_kib,
            per_worker.join(" + "),
            x.peak_rss_mib
        );
    }
    for s in &r.speedups {
        out += &format!(
            "  {}: 2 workers / 1 worker = {:.2}x; the second worker adds {:.0} KiB of NF state ({:+.0} MiB peak RSS)\n    same queues, no runtime: \
             lookup+copy control {:.2}x ({:.1} -> {:.1} Mpps; the NF's ratio is {:.0}% of it), compute control {:.2}x\n",
            s.nf,
            s.speedup_2_over_1,
            s.extra_worker_kib,
            s.extra_worker_rss_mib,
            s.lookup_control_speedup,
            s.lookup_control_mpps[0],
            s.lookup_control_mpps[1],
            s.of_lookup_control * 100.0,
            s.compute_control_speedup
        );
        let each: Vec<String> = s.rounds.iter().map(|r| format!("{:.2}", r.speedup)).collect();
        out += &format!("    rounds' 2/1 ratios: {}\n", each.join(" "));
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
