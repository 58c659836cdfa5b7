//! Named NFs over generated traces, for benchmarks and the case-study
//! tests: the trace each NF serves, one run through the live registry
//! (so any NF by name), and NFOS's three case studies.

use std::time::Duration;

use ferry_traffic::IpRange;

use crate::equivalence::{generate_trace, TraceSpec};
use ferry_nf::args::NfArgs;
use ferry_parallel::heap::{self, HeapMark, HeapUse};
use ferry_parallel::live::registry::{NfEnv, NfSetup};

use crate::by_name::{self as registry, NfVisitor};
use ferry_parallel::profiler::{Profile, Profiler, RootCause};
use ferry_parallel::runtime::{
    run_control_presplit, run_trace_lockstep, run_trace_presplit, ControlWork, OutputMode, Packet, ParallelNf,
    TraceConfig, TraceReport,
};
use ferry_parallel::stm::Stm;

/// The Maglev workload's virtual address.
pub const MAGLEV_VIP: &str = "198.18.0.1";

/// An NF's arguments and trace: the generated trace, shaped to what the NF
/// serves (connections to the VIP for Maglev; new TCP flows for the
/// anti-DDoS detector, at 10 Mpps of trace time as in NFOS's traffic).
pub fn workload(nf: &str, packets: usize) -> Result<(Vec<String>, Vec<Packet>), String> {
    let mut spec = TraceSpec { seed: 7, packets, ..TraceSpec::default() };
    let args = match nf {
        "maglev" => {
            spec.external_hosts = IpRange::single(MAGLEV_VIP.parse::<std::net::IpAddr>().expect("valid literal"));
            spec.reply_percent = 0;
            spec.unsolicited_percent = 0;
            vec![format!("vip={MAGLEV_VIP}")]
        }
        "anti_ddos" => {
            // The staleness bound (0.1 ms) then spans a thousand packets.
            spec.gap_ns = 100;
            spec.tcp_percent = 90;
            spec.reply_percent = 0;
            spec.unsolicited_percent = 0;
            vec![]
        }
        _ => vec![],
    };
    let trace = generate_trace(&spec).map_err(|e| format!("{nf}: trace: {e}"))?.packets;
    Ok((args, trace))
}

/// The engine, parsed arguments and environment NF `nf` is built with for
/// a benchmark run on `workers` workers.
fn prepare(nf: &str, args: &[String], workers: usize) -> Result<(Stm, NfArgs, NfEnv), String> {
    let stm = Stm::new(workers).map_err(|e| e.to_string())?;
    let args = NfArgs::parse(args).map_err(|e| format!("{nf}: {e}"))?;
    Ok((stm, args, NfEnv { ports: 2, workers }))
}

/// A benchmark run's configuration: NFOS's receive batches of 32, two
/// ports, the NF's packet sets and timer.
fn bench_config(workers: usize, setup: NfSetup) -> TraceConfig {
    TraceConfig { workers, batch_size: 32, ports: 2, periodic_ns: setup.periodic_ns, packet_sets: setup.packet_sets }
}

/// One run: its report, the workers' time and the profiler's view.
pub struct NamedRun {
    pub report: TraceReport,
    pub elapsed: Duration,
    pub packets: usize,
    pub profile: Profile,
    /// Heap bytes building the engine and the NF took (its shared
    /// structures, with their per-worker parts), when the binary counts
    /// heap bytes ([`ferry_parallel::heap`]).
    pub build_heap: Option<HeapUse>,
}

struct Run<'a> {
    stm: &'a Stm,
    workers: usize,
    trace: Vec<Packet>,
    /// Taken before the engine was made.
    before_build: Option<HeapMark>,
}

impl NfVisitor for Run<'_> {
    type Output = Result<NamedRun, String>;

    fn visit<N: ParallelNf>(self, nf: N, setup: NfSetup) -> Result<NamedRun, String> {
        let build_heap = self.before_build.map(|mark| mark.usage());
        let config = bench_config(self.workers, setup);
        let packets = self.trace.len();
        let (report, elapsed) =
            run_trace_presplit(self.stm, &nf, &config, self.trace, OutputMode::Count).map_err(|e| e.to_string())?;
        let profile = Profiler::new(self.stm).profile(&report);
        Ok(NamedRun { report, elapsed, packets, profile, build_heap })
    }
}

/// Runs NF `nf` (a live-registry name) with `args` over `trace` on
/// `workers` workers, the trace split over them beforehand.
pub fn run_named(nf: &str, args: &[String], trace: &[Packet], workers: usize) -> Result<NamedRun, String> {
    let trace = trace.to_vec();
    let before_build = heap::mark();
    let (stm, args, env) = prepare(nf, args, workers)?;
    let run = Run { stm: &stm, workers, trace, before_build };
    registry::build(nf, &stm, &env, &args, run).map_err(|e| format!("{nf}: {e}"))?
}

/// The visitor behind [`profile_named_lockstep`].
struct LockstepRun<'a> {
    stm: &'a Stm,
    workers: usize,
    trace: Vec<Packet>,
}

impl NfVisitor for LockstepRun<'_> {
    type Output = Result<(TraceReport, Profile), String>;

    fn visit<N: ParallelNf>(self, nf: N, setup: NfSetup) -> Result<(TraceReport, Profile), String> {
        let config = bench_config(self.workers, setup);
        let report = run_trace_lockstep(self.stm, &nf, &config, self.trace).map_err(|e| e.to_string())?;
        let profile = Profiler::new(self.stm).profile(&report);
        Ok((report, profile))
    }
}

/// Runs NF `nf` as [`run_named`] does, but with the workers' transactions
/// in lockstep ([`run_trace_lockstep`]): the report and profile are the
/// same on every machine, so tests can assert on the profiler's findings.
/// Not timed.
pub fn profile_named_lockstep(
    nf: &str,
    args: &[String],
    trace: &[Packet],
    workers: usize,
) -> Result<(TraceReport, Profile), String> {
    let (stm, args, env) = prepare(nf, args, workers)?;
    let run = LockstepRun { stm: &stm, workers, trace: trace.to_vec() };
    registry::build(nf, &stm, &env, &args, run).map_err(|e| format!("{nf}: {e}"))?
}

/// The runtime-free visitor behind [`run_control`]: only the NF's
/// packet-set definition is used.
struct Control {
    workers: usize,
    trace: Vec<Packet>,
    work: ControlWork,
}

impl NfVisitor for Control {
    type Output = Result<(Duration, usize), String>;

    fn visit<N: ParallelNf>(self, _nf: N, setup: NfSetup) -> Result<(Duration, usize), String> {
        let config = bench_config(self.workers, setup);
        let packets = self.trace.len();
        let (_, elapsed) = run_control_presplit(&config, self.trace, self.work).map_err(|e| e.to_string())?;
        Ok((elapsed, packets))
    }
}

/// A control run ([`run_control_presplit`]) doing `work` over `trace`
/// split as NF `nf` splits it: the workers' time and the packets.
pub fn run_control(
    nf: &str,
    args: &[String],
    trace: &[Packet],
    workers: usize,
    work: ControlWork,
) -> Result<(Duration, usize), String> {
    let (stm, args, env) = prepare(nf, args, workers)?;
    let control = Control { workers, trace: trace.to_vec(), work };
    registry::build(nf, &stm, &env, &args, control).map_err(|e| format!("{nf}: {e}"))?
}

/// One of NFOS's case studies: a configuration with a scalability
/// bottleneck, the root cause the profiler should name, and the
/// configuration after its recipe.
pub struct CaseStudy {
    pub name: &'static str,
    pub nf: &'static str,
    pub before: &'static [&'static str],
    pub after: &'static [&'static str],
    pub cause: RootCause,
}

/// NFOS §6's case studies, sized for this trace (1 µs between packets,
/// 256 flows open at a time): the NAT's pool of 128 ports (64 per core)
/// is just short of what a core needs with 1 ms leases.
pub const CASE_STUDIES: [CaseStudy; 3] = [
    CaseStudy {
        name: "anti-DDoS: staleness 0 vs 0.1 ms",
        nf: "anti_ddos",
        before: &["staleness_us=0"],
        after: &["staleness_us=100"],
        cause: RootCause::DistributedStaleRead,
    },
    CaseStudy {
        name: "NAT: scarce vs overprovisioned public ports",
        nf: "nat",
        before: &["lease_ms=1", "reclaim_ms=1", "ports=1024-1151"],
        after: &["lease_ms=1", "reclaim_ms=1", "ports=1024-65535"],
        cause: RootCause::AllocatorPoolExhausted,
    },
    CaseStudy {
        name: "bridge: refresh on every packet vs once per second",
        nf: "bridge",
        before: &["refresh_ms=0"],
        after: &["refresh_ms=1000"],
        cause: RootCause::AllocatorLeaseListRefresh,
    },
];

impl CaseStudy {
    /// The NF's arguments before (or after) the recipe.
    pub fn args(&self, base: &[String], after: bool) -> Vec<String> {
        let extra = if after { self.after } else { self.before };
        base.iter().cloned().chain(extra.iter().map(|s| s.to_string())).collect()
    }
}
