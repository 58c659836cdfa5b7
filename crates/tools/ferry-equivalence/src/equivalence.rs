//! Correctness of parallel runs: an NF run over a trace on N workers must
//! be equivalent to its run on one worker, which is the sequential program
//! NFOS promises the parallel NF behaves like.
//!
//! # What "equivalent" means
//!
//! Packets of different flows may leave in any relative order (NFOS §3.2,
//! P3), so outputs are compared **per flow**, where the caller says what a
//! flow is (a key over an output's bytes, e.g. its 5-tuple):
//! * each flow has the same multiset of outputs in both runs, and
//! * each worker committed a flow's outputs in the sequential run's order.
//!   A flow whose packets are one packet set runs on one worker, so this is
//!   the flow's whole order; a flow spread over workers (orphans go
//!   round-robin) has no defined order across workers, and the report
//!   counts such flows as `split_flows`.
//!
//! Outputs that legitimately differ are normalised first (a NAT's public
//! port depends on which core's pool it came from), and the caller compares
//! final state with a closure run on the NF after each run.
//!
//! [`EquivalenceCheck::run`] does both runs; [`EquivalenceCheck::record`]
//! and [`EquivalenceReport::compare`] are the pieces, for tests that run
//! an NF more than once (a request trace, then replies built from its
//! output).
//!
//! # Traces
//!
//! [`generate_trace`] builds a deterministic trace: Ethernet/IPv4/UDP and
//! TCP flows between internal hosts (port [`INTERNAL_PORT`]) and external
//! hosts (port [`EXTERNAL_PORT`]), flows interleaved and sized by
//! `ferry-traffic`'s flow schedule (heavy-tailed, CAIDA mean of 21 packets),
//! timestamps increasing. Each frame carries a payload stamp numbering it,
//! so [`GeneratedTrace::flow_of`] finds the generated flow of any output,
//! however an NF rewrote its headers.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use ferry_traffic::{FlowSchedule, FlowSizeDist, IpRange, PortRange, TrafficError, TrafficProfile};
use ferry_wire::flow::IpVersion;
use ferry_wire::{
    build_frame, fill_l4_checksum, find_stamp, five_tuple, stamp_offset, FiveTuple, FrameSpec, L4Proto, Stamp,
    WireError, STAMP_LEN,
};

use ferry_parallel::runtime::{run_trace, OutputPacket, Packet, ParallelNf, RuntimeError, TraceConfig, TraceReport};
use ferry_parallel::stm::{Stm, TxStats};

/// Receive port of the internal network in generated traces.
pub const INTERNAL_PORT: u16 = 0;
/// Receive port of the external network in generated traces.
pub const EXTERNAL_PORT: u16 = 1;

// ---------------------------------------------------------------------------
// Grouping and comparing outputs
// ---------------------------------------------------------------------------

/// Outputs of one NF instance (one run, or several runs on the same NF)
/// grouped per flow; each flow's outputs in commit order, with the worker
/// that committed them (init and exit output count as worker 0's).
#[derive(Debug, Clone)]
pub struct FlowOutputs<K> {
    flows: BTreeMap<Option<K>, Vec<(usize, OutputPacket)>>,
    count: usize,
}

impl<K: Ord> Default for FlowOutputs<K> {
    fn default() -> Self {
        FlowOutputs { flows: BTreeMap::new(), count: 0 }
    }
}

impl<K: Ord + Clone> FlowOutputs<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the committed outputs of `report`. `flow_of` sees each output
    /// as the NF sent it (`None`: the output belongs to no flow; those are
    /// compared as one group); `normalize` then rewrites it for comparison.
    pub fn add_run(
        &mut self,
        report: &TraceReport,
        flow_of: &dyn Fn(&OutputPacket) -> Option<K>,
        normalize: &dyn Fn(&mut OutputPacket),
    ) {
        let init = report.init_outputs.iter().map(|o| (0, o));
        let workers = report.workers.iter().enumerate().flat_map(|(w, r)| r.outputs.iter().map(move |o| (w, o)));
        let exit = report.exit_outputs.iter().map(|o| (0, o));
        for (worker, output) in init.chain(workers).chain(exit) {
            let flow = flow_of(output);
            let mut output = output.clone();
            normalize(&mut output);
            self.flows.entry(flow).or_default().push((worker, output));
            self.count += 1;
        }
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Number of distinct flow keys (the no-flow group counts as one).
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }
}

/// The first difference found between the two runs' outputs (flows in key
/// order, so the same runs always report the same mismatch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch<K> {
    /// The flow's outputs differ as multisets: `missing` is an output only
    /// the sequential run sent, `extra` one only the parallel run sent.
    Outputs {
        flow: Option<K>,
        sequential: usize,
        parallel: usize,
        missing: Option<OutputPacket>,
        extra: Option<OutputPacket>,
    },
    /// Same outputs, but `worker` committed `first` before `then`, which
    /// the sequential run sent in the other order.
    Order { flow: Option<K>, worker: usize, first: OutputPacket, then: OutputPacket },
}

impl<K: fmt::Debug> fmt::Display for Mismatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Outputs { flow, sequential, parallel, missing, extra } => {
                write!(f, "flow {flow:?}: {sequential} outputs sequentially, {parallel} in parallel")?;
                if let Some(o) = missing {
                    write!(f, "\n  only sequential: {}", describe(o))?;
                }
                if let Some(o) = extra {
                    write!(f, "\n  only parallel:   {}", describe(o))?;
                }
                Ok(())
            }
            Mismatch::Order { flow, worker, first, then } => write!(
                f,
                "flow {flow:?}: worker {worker} sent\n  {}\nbefore\n  {}\nwhich the sequential run sent the other way round",
                describe(first),
                describe(then)
            ),
        }
    }
}

/// An output in one line: port, timestamp, length and the first bytes.
fn describe(output: &OutputPacket) -> String {
    const SHOWN: usize = 64;
    let hex: String = output.data.iter().take(SHOWN).map(|b| format!("{b:02x}")).collect();
    let more = if output.data.len() > SHOWN { ".." } else { "" };
    format!("port {} t={}ns {} bytes {hex}{more}", output.port, output.timestamp_ns, output.data.len())
}

fn output_order(a: &OutputPacket, b: &OutputPacket) -> std::cmp::Ordering {
    (a.port, a.timestamp_ns, &a.data).cmp(&(b.port, b.timestamp_ns, &b.data))
}

/// Compares one flow; `None` when equivalent.
fn compare_flow<K: Clone>(
    flow: &Option<K>,
    sequential: &[(usize, OutputPacket)],
    parallel: &[(usize, OutputPacket)],
) -> Option<Mismatch<K>> {
    let mut seq: Vec<&OutputPacket> = sequential.iter().map(|(_, o)| o).collect();
    let mut par: Vec<&OutputPacket> = parallel.iter().map(|(_, o)| o).collect();
    seq.sort_by(|a, b| output_order(a, b));
    par.sort_by(|a, b| output_order(a, b));
    if seq != par {
        let (missing, extra) = first_differences(&seq, &par);
        return Some(Mismatch::Outputs {
            flow: flow.clone(),
            sequential: seq.len(),
            parallel: par.len(),
            missing: missing.cloned(),
            extra: extra.cloned(),
        });
    }
    // Same multiset: each worker's part must be a subsequence of the
    // sequential order (greedy matching decides that, duplicates included).
    let mut workers: Vec<usize> = parallel.iter().map(|(w, _)| *w).collect();
    workers.sort_unstable();
    workers.dedup();
    for worker in workers {
        let mut reference = sequential.iter().map(|(_, o)| o);
        let mut previous: Option<&OutputPacket> = None;
        for output in parallel.iter().filter(|(w, _)| *w == worker).map(|(_, o)| o) {
            if !reference.any(|r| r == output) {
                let first = previous.unwrap_or(output).clone();
                return Some(Mismatch::Order { flow: flow.clone(), worker, first, then: output.clone() });
            }
            previous = Some(output);
        }
    }
    None
}

/// The smallest output only in `a` and the smallest only in `b` (both
/// sorted).
fn first_differences<'o>(
    a: &[&'o OutputPacket],
    b: &[&'o OutputPacket],
) -> (Option<&'o OutputPacket>, Option<&'o OutputPacket>) {
    let (mut i, mut j) = (0, 0);
    let (mut only_a, mut only_b) = (None, None);
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => output_order(x, y),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Equal => (i, j) = (i + 1, j + 1),
            std::cmp::Ordering::Less => {
                only_a = only_a.or(Some(a[i]));
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                only_b = only_b.or(Some(b[j]));
                j += 1;
            }
        }
        if only_a.is_some() && only_b.is_some() {
            break;
        }
    }
    (only_a, only_b)
}

/// What one run (or one NF instance over several runs) did.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub workers: usize,
    /// Packets fed in.
    pub packets: usize,
    /// Outputs committed.
    pub outputs: usize,
    pub stats: TxStats,
    /// Busiest worker's packets over the mean (see
    /// [`TraceReport::load_imbalance`]).
    pub load_imbalance: f64,
}

impl RunSummary {
    /// The summary of one [`run_trace`] report.
    pub fn of(report: &TraceReport, packets: usize) -> RunSummary {
        RunSummary {
            workers: report.workers.len(),
            packets,
            outputs: report.all_outputs().count(),
            stats: report.total_stats(),
            load_imbalance: report.load_imbalance(),
        }
    }

    /// Adds a further run on the same NF instance (the load imbalance is
    /// the worse of the two).
    pub fn add(&mut self, other: &RunSummary) {
        self.packets += other.packets;
        self.outputs += other.outputs;
        self.stats.merge(&other.stats);
        self.load_imbalance = self.load_imbalance.max(other.load_imbalance);
    }
}

/// One side of a comparison: what an NF instance sent, and its final state
/// as the caller's closure saw it.
#[derive(Debug, Clone)]
pub struct RunRecord<K, S> {
    pub summary: RunSummary,
    pub outputs: FlowOutputs<K>,
    pub state: S,
}

/// The outcome of comparing a parallel run with the sequential one.
#[derive(Debug, Clone)]
pub struct EquivalenceReport<K, S> {
    pub sequential: RunSummary,
    pub parallel: RunSummary,
    /// Distinct flow keys over both runs.
    pub flows: usize,
    /// Flows whose outputs differ (in content or order).
    pub mismatched_flows: usize,
    /// Flows whose parallel outputs came from more than one worker (their
    /// order across workers is undefined and not checked).
    pub split_flows: usize,
    pub first_mismatch: Option<Mismatch<K>>,
    pub sequential_state: S,
    pub parallel_state: S,
}

impl<K: Ord + Clone, S> EquivalenceReport<K, S> {
    /// Compares two records flow by flow.
    pub fn compare(sequential: RunRecord<K, S>, parallel: RunRecord<K, S>) -> Self {
        let (seq, par) = (&sequential.outputs.flows, &parallel.outputs.flows);
        let mut keys: Vec<&Option<K>> = seq.keys().chain(par.keys()).collect();
        keys.sort();
        keys.dedup();
        let (mut mismatched_flows, mut split_flows, mut first_mismatch) = (0, 0, None);
        for key in &keys {
            let s = seq.get(*key).map(Vec::as_slice).unwrap_or_default();
            let p = par.get(*key).map(Vec::as_slice).unwrap_or_default();
            if p.iter().any(|(w, _)| *w != p[0].0) {
                split_flows += 1;
            }
            if let Some(mismatch) = compare_flow(key, s, p) {
                mismatched_flows += 1;
                first_mismatch = first_mismatch.or(Some(mismatch));
            }
        }
        EquivalenceReport {
            flows: keys.len(),
            sequential: sequential.summary,
            parallel: parallel.summary,
            mismatched_flows,
            split_flows,
            first_mismatch,
            sequential_state: sequential.state,
            parallel_state: parallel.state,
        }
    }
}

impl<K, S: PartialEq> EquivalenceReport<K, S> {
    pub fn outputs_equivalent(&self) -> bool {
        self.mismatched_flows == 0
    }

    pub fn states_equal(&self) -> bool {
        self.sequential_state == self.parallel_state
    }

    pub fn is_equivalent(&self) -> bool {
        self.outputs_equivalent() && self.states_equal()
    }
}

impl<K: fmt::Debug, S: PartialEq + fmt::Debug> EquivalenceReport<K, S> {
    /// Panics with the report unless the runs are equivalent.
    #[track_caller]
    pub fn assert_equivalent(&self) {
        assert!(self.is_equivalent(), "parallel run differs from the sequential run:\n{self}");
    }
}

impl<K: fmt::Debug, S: PartialEq + fmt::Debug> fmt::Display for EquivalenceReport<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, p) = (&self.sequential, &self.parallel);
        writeln!(f, "sequential: {} packets -> {} outputs", s.packets, s.outputs)?;
        writeln!(
            f,
            "parallel:   {} packets -> {} outputs on {} workers ({} commits, {} aborts, load imbalance {:.2})",
            p.packets, p.outputs, p.workers, p.stats.commits, p.stats.aborts, p.load_imbalance
        )?;
        writeln!(
            f,
            "flows: {} ({} mismatched, {} split over workers)",
            self.flows, self.mismatched_flows, self.split_flows
        )?;
        if let Some(mismatch) = &self.first_mismatch {
            writeln!(f, "first mismatch: {mismatch}")?;
        }
        if !self.states_equal() {
            writeln!(
                f,
                "final state differs:\n  sequential: {:?}\n  parallel:   {:?}",
                self.sequential_state, self.parallel_state
            )?;
        }
        Ok(())
    }
}

/// Leaves outputs as they are (the default normalisation).
pub fn keep_output(_: &mut OutputPacket) {}

/// How to compare an NF's parallel run with its sequential run.
pub struct EquivalenceCheck<'c, K> {
    /// Batch size, ports, timer and packet sets of both runs; `workers` is
    /// set per run.
    pub config: TraceConfig,
    /// Workers of the parallel run.
    pub workers: usize,
    /// The flow of an output (see [`FlowOutputs::add_run`]).
    pub flow_of: &'c dyn Fn(&OutputPacket) -> Option<K>,
    /// Rewrites outputs before comparison ([`keep_output`] by default).
    pub normalize: &'c dyn Fn(&mut OutputPacket),
}

impl<'c, K: Ord + Clone> EquivalenceCheck<'c, K> {
    pub fn new(config: TraceConfig, workers: usize, flow_of: &'c dyn Fn(&OutputPacket) -> Option<K>) -> Self {
        EquivalenceCheck { config, workers, flow_of, normalize: &keep_output }
    }

    /// Runs a fresh NF (`make_nf` builds it on the run's engine) over
    /// `trace` on `workers` workers, then `final_state` on it.
    pub fn record<N: ParallelNf, S>(
        &self,
        workers: usize,
        make_nf: impl Fn(&Stm) -> N,
        trace: &[Packet],
        final_state: impl FnOnce(&Stm, &mut N) -> S,
    ) -> Result<RunRecord<K, S>, RuntimeError> {
        let stm = Stm::new(workers)?;
        let mut nf = make_nf(&stm);
        let config = TraceConfig { workers, ..self.config.clone() };
        let report = run_trace(&stm, &nf, &config, trace.iter().cloned())?;
        let mut outputs = FlowOutputs::new();
        outputs.add_run(&report, self.flow_of, self.normalize);
        let state = final_state(&stm, &mut nf);
        Ok(RunRecord { summary: RunSummary::of(&report, trace.len()), outputs, state })
    }

    /// Runs the NF on one worker and on `self.workers` and compares.
    pub fn run<N: ParallelNf, S>(
        &self,
        make_nf: impl Fn(&Stm) -> N,
        trace: &[Packet],
        mut final_state: impl FnMut(&Stm, &mut N) -> S,
    ) -> Result<EquivalenceReport<K, S>, RuntimeError> {
        let sequential = self.record(1, &make_nf, trace, &mut final_state)?;
        let parallel = self.record(self.workers, &make_nf, trace, &mut final_state)?;
        Ok(EquivalenceReport::compare(sequential, parallel))
    }
}

/// Runs `check` and panics (with the report) unless the parallel run is
/// equivalent to the sequential one; returns the report otherwise.
#[track_caller]
pub fn assert_equivalent<K, N, S>(
    check: &EquivalenceCheck<'_, K>,
    make_nf: impl Fn(&Stm) -> N,
    trace: &[Packet],
    final_state: impl FnMut(&Stm, &mut N) -> S,
) -> EquivalenceReport<K, S>
where
    K: Ord + Clone + fmt::Debug,
    N: ParallelNf,
    S: PartialEq + fmt::Debug,
{
    let report = check.run(make_nf, trace, final_state).expect("the runs start");
    report.assert_equivalent();
    report
}

/// A 5-tuple as a flow key (ordered, unlike [`FiveTuple`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TupleKey {
    pub proto: u8,
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub dst_ip: IpAddr,
    pub dst_port: u16,
}

impl From<FiveTuple> for TupleKey {
    fn from(t: FiveTuple) -> TupleKey {
        TupleKey { proto: t.protocol(), src_ip: t.src_ip, src_port: t.src_port, dst_ip: t.dst_ip, dst_port: t.dst_port }
    }
}

/// The flow of an output by its 5-tuple as sent (`None` for frames that
/// are not IPv4 UDP/TCP/ICMP). For NFs that do not rewrite headers.
pub fn five_tuple_key(output: &OutputPacket) -> Option<TupleKey> {
    five_tuple(&output.data).map(TupleKey::from)
}

// ---------------------------------------------------------------------------
// Trace generation
// ---------------------------------------------------------------------------

/// Shortest frame a generated IPv4 trace may use: a TCP header and the
/// stamp (an IPv6 trace needs 20 bytes more).
pub const MIN_TRACE_FRAME_LEN: usize = 14 + 20 + 20 + STAMP_LEN;

/// What [`generate_trace`] builds.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSpec {
    /// Same seed, same trace.
    pub seed: u64,
    pub packets: usize,
    /// Flows open at once; each packet picks one of them at random.
    pub active_flows: u32,
    /// Packets per flow (default: bounded Pareto with CAIDA's mean of 21).
    pub flow_sizes: FlowSizeDist,
    /// Addresses of internal hosts (behind [`INTERNAL_PORT`]).
    pub internal_hosts: IpRange,
    /// Addresses of external hosts (behind [`EXTERNAL_PORT`]).
    pub external_hosts: IpRange,
    /// Destination ports of flows internal hosts open.
    pub service_ports: PortRange,
    /// Share of flows that are TCP (the rest UDP), in percent.
    pub tcp_percent: u32,
    /// Share of a flow's packets after its first that travel back from the
    /// responder to the initiator, in percent.
    pub reply_percent: u32,
    /// Share of flows an external host opens, in percent.
    pub unsolicited_percent: u32,
    /// Ethernet frame length without FCS (at least [`MIN_TRACE_FRAME_LEN`]).
    pub frame_len: usize,
    /// Timestamp of the first packet.
    pub start_ns: u64,
    /// Time between two packets.
    pub gap_ns: u64,
}

impl Default for TraceSpec {
    fn default() -> Self {
        TraceSpec {
            seed: 1,
            packets: 20_000,
            active_flows: 256,
            flow_sizes: FlowSizeDist::default(),
            internal_hosts: "10.0.0.0/22".parse().expect("valid literal"),
            // RFC 2544's benchmarking range.
            external_hosts: "198.18.0.0/20".parse().expect("valid literal"),
            service_ports: PortRange::new(1, 1023).expect("valid literal"),
            tcp_percent: 40,
            reply_percent: 40,
            unsolicited_percent: 5,
            frame_len: 80,
            start_ns: 1_000_000,
            gap_ns: 1_000,
        }
    }
}

/// Invalid trace specifications.
#[derive(Debug, thiserror::Error)]
pub enum TraceSpecError {
    #[error("frame_len {len} cannot hold a TCP header and the stamp (at least {min})")]
    FrameTooShort { len: usize, min: usize },
    #[error("internal_hosts and external_hosts are of two IP versions")]
    MixedVersions,
    #[error("{field} = {value} is not a percentage")]
    Percent { field: &'static str, value: u32 },
    #[error("{0} packets: stamps number packets with 32 bits")]
    TooManyPackets(usize),
    #[error(transparent)]
    Traffic(#[from] TrafficError),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// One generated flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceFlow {
    /// As the flow's first packet travels: the source is the initiator.
    pub tuple: FiveTuple,
    /// The port the first packet arrives on.
    pub initiator_port: u16,
    /// Packets of the flow in the trace (both directions).
    pub packets: u32,
}

/// A generated trace and what each packet is.
#[derive(Debug, Clone)]
pub struct GeneratedTrace {
    pub packets: Vec<Packet>,
    pub flows: Vec<TraceFlow>,
    /// Index into `flows` of each packet.
    flow_of_packet: Vec<u32>,
}

impl GeneratedTrace {
    /// The flow (index into `flows`) of the trace's packet `index`.
    pub fn flow_of_packet(&self, index: usize) -> Option<u32> {
        self.flow_of_packet.get(index).copied()
    }

    /// The trace packet `frame` was made from, by its stamp (which NFs
    /// leave alone: it is payload).
    pub fn packet_of(&self, frame: &[u8]) -> Option<usize> {
        let index = find_stamp(frame)?.seq as usize;
        (index < self.packets.len()).then_some(index)
    }

    /// The generated flow of `frame`, by its stamp: a flow key that holds
    /// however an NF rewrote the headers.
    pub fn flow_of(&self, frame: &[u8]) -> Option<u32> {
        self.flow_of_packet(self.packet_of(frame)?)
    }
}

/// The MAC address of a generated host: locally administered unicast,
/// with the host's IPv4 address in its last four bytes.
pub fn host_mac(ip: IpAddr) -> [u8; 6] {
    let o = ferry_wire::prefix::to_flow_space(ip).octets();
    [0x02, 0x00, o[12], o[13], o[14], o[15]]
}

/// Builds the trace `spec` describes. Deterministic: flows come from
/// `ferry-traffic`'s [`FlowSchedule`] (a PCG stream seeded from
/// `spec.seed`), every other choice from a hash of the seed and the flow
/// or packet number.
pub fn generate_trace(spec: &TraceSpec) -> Result<GeneratedTrace, TraceSpecError> {
    validate(spec)?;
    let profile = TrafficProfile {
        src_ip: spec.internal_hosts,
        dst_ip: spec.external_hosts,
        src_port: PortRange::new(1024, u16::MAX)?,
        dst_port: spec.service_ports,
        frame_len: spec.frame_len,
        flow_sizes: spec.flow_sizes,
        active_flows: spec.active_flows,
        seed: spec.seed,
        ..TrafficProfile::default()
    };
    let mut trace = GeneratedTrace { packets: Vec::new(), flows: Vec::new(), flow_of_packet: Vec::new() };
    let mut index_of: HashMap<u64, u32> = HashMap::new();
    for (i, scheduled) in FlowSchedule::new(&profile)?.take(spec.packets).enumerate() {
        let flow_index = *index_of.entry(scheduled.flow_id).or_insert_with(|| {
            trace.flows.push(new_flow(spec, scheduled.flow_id, scheduled.tuple));
            trace.flows.len() as u32 - 1
        });
        let flow = &mut trace.flows[flow_index as usize];
        flow.packets += 1;
        let reply = flow.packets > 1 && percent(spec.seed, Salt::Reply, i as u64) < spec.reply_percent;
        let (tuple, port) = if reply {
            (reversed(&flow.tuple), other_port(flow.initiator_port))
        } else {
            (flow.tuple, flow.initiator_port)
        };
        let timestamp_ns = spec.start_ns + i as u64 * spec.gap_ns;
        let stamp = Stamp { stream: 0, seq: i as u32, tx_ns: timestamp_ns };
        trace.packets.push(Packet::new(port, timestamp_ns, frame(&tuple, spec.frame_len, &stamp)?));
        trace.flow_of_packet.push(flow_index);
    }
    Ok(trace)
}

fn validate(spec: &TraceSpec) -> Result<(), TraceSpecError> {
    let version = if spec.internal_hosts.is_ipv6() { IpVersion::V6 } else { IpVersion::V4 };
    let min = stamp_offset(version, L4Proto::Tcp) + STAMP_LEN;
    if spec.frame_len < min {
        return Err(TraceSpecError::FrameTooShort { len: spec.frame_len, min });
    }
    if spec.internal_hosts.is_ipv6() != spec.external_hosts.is_ipv6() {
        return Err(TraceSpecError::MixedVersions);
    }
    for (field, value) in [
        ("tcp_percent", spec.tcp_percent),
        ("reply_percent", spec.reply_percent),
        ("unsolicited_percent", spec.unsolicited_percent),
    ] {
        if value > 100 {
            return Err(TraceSpecError::Percent { field, value });
        }
    }
    if u32::try_from(spec.packets).is_err() {
        return Err(TraceSpecError::TooManyPackets(spec.packets));
    }
    Ok(())
}

fn new_flow(spec: &TraceSpec, flow_id: u64, scheduled: FiveTuple) -> TraceFlow {
    let tcp = percent(spec.seed, Salt::Protocol, flow_id) < spec.tcp_percent;
    let tuple = FiveTuple { proto: if tcp { L4Proto::Tcp } else { L4Proto::Udp }, ..scheduled };
    if percent(spec.seed, Salt::Unsolicited, flow_id) < spec.unsolicited_percent {
        TraceFlow { tuple: reversed(&tuple), initiator_port: EXTERNAL_PORT, packets: 0 }
    } else {
        TraceFlow { tuple, initiator_port: INTERNAL_PORT, packets: 0 }
    }
}

fn reversed(t: &FiveTuple) -> FiveTuple {
    FiveTuple { src_ip: t.dst_ip, dst_ip: t.src_ip, src_port: t.dst_port, dst_port: t.src_port, proto: t.proto }
}

fn other_port(port: u16) -> u16 {
    if port == INTERNAL_PORT {
        EXTERNAL_PORT
    } else {
        INTERNAL_PORT
    }
}

/// A frame between two generated hosts, with valid checksums (UDP's too,
/// so NFs that rewrite headers have one to keep right).
fn frame(tuple: &FiveTuple, frame_len: usize, stamp: &Stamp) -> Result<Vec<u8>, TraceSpecError> {
    let spec = FrameSpec { src_mac: host_mac(tuple.src_ip), dst_mac: host_mac(tuple.dst_ip), frame_len };
    let mut data = vec![0u8; frame_len];
    build_frame(&spec, tuple, Some(stamp), &mut data)?;
    debug_assert!(frame_len >= stamp_offset(tuple.version(), tuple.proto) + STAMP_LEN);
    if tuple.proto == L4Proto::Udp {
        fill_l4_checksum(&mut data)?;
    }
    Ok(data)
}

/// Independent decisions drawn from one seed.
#[derive(Clone, Copy)]
enum Salt {
    Protocol = 1,
    Unsolicited = 2,
    Reply = 3,
}

/// A number in 0..100 fixed by (seed, salt, n): SplitMix64's finaliser.
fn percent(seed: u64, salt: Salt, n: u64) -> u32 {
    let mut z = seed ^ (salt as u64).wrapping_mul(0xd1b5_4a32_d192_ed03) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % 100) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_wire::verify_checksums;

    fn small_spec() -> TraceSpec {
        TraceSpec { packets: 3_000, active_flows: 64, ..TraceSpec::default() }
    }

    #[test]
    fn traces_are_deterministic_valid_and_stamped() {
        let a = generate_trace(&small_spec()).unwrap();
        let b = generate_trace(&small_spec()).unwrap();
        assert_eq!(a.packets, b.packets);
        let c = generate_trace(&TraceSpec { seed: 2, ..small_spec() }).unwrap();
        assert_ne!(a.packets, c.packets);
        let mut previous = 0;
        for (i, packet) in a.packets.iter().enumerate() {
            assert!(packet.timestamp_ns() > previous);
            previous = packet.timestamp_ns();
            assert!(verify_checksums(packet.data()).unwrap(), "packet {i}");
            assert_eq!(a.packet_of(packet.data()), Some(i));
            let flow = &a.flows[a.flow_of(packet.data()).unwrap() as usize];
            let tuple = five_tuple(packet.data()).unwrap();
            if packet.port() == flow.initiator_port {
                assert_eq!(tuple, flow.tuple);
            } else {
                assert_eq!(tuple, reversed(&flow.tuple));
            }
        }
        assert_eq!(a.flows.iter().map(|f| f.packets as usize).sum::<usize>(), a.packets.len());
    }

    #[test]
    fn traces_mix_protocols_directions_and_flow_sizes() {
        let trace = generate_trace(&small_spec()).unwrap();
        let tcp = trace.flows.iter().filter(|f| f.tuple.proto == L4Proto::Tcp).count();
        let unsolicited = trace.flows.iter().filter(|f| f.initiator_port == EXTERNAL_PORT).count();
        let replies = trace.packets.iter().filter(|p| p.port() == EXTERNAL_PORT).count();
        let n = trace.flows.len();
        assert!(tcp > n / 5 && tcp < n * 3 / 5, "{tcp} of {n} flows are TCP");
        assert!(unsolicited > 0 && unsolicited < n / 5, "{unsolicited} of {n} flows unsolicited");
        assert!(replies > trace.packets.len() / 5, "{replies} packets on the external port");
        let sizes: Vec<u32> = trace.flows.iter().map(|f| f.packets).collect();
        assert!(sizes.iter().filter(|s| **s == 1).count() > n / 10, "many one-packet flows");
        assert!(*sizes.iter().max().unwrap() > 20, "some long flows");
        // The first packet of every flow comes from its initiator.
        let mut seen = vec![false; n];
        for (i, packet) in trace.packets.iter().enumerate() {
            let flow = trace.flow_of_packet(i).unwrap() as usize;
            if !seen[flow] {
                assert_eq!(packet.port(), trace.flows[flow].initiator_port);
                seen[flow] = true;
            }
        }
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(matches!(
            generate_trace(&TraceSpec { frame_len: 64, ..small_spec() }),
            Err(TraceSpecError::FrameTooShort { len: 64, min: 70 })
        ));
        assert!(matches!(
            generate_trace(&TraceSpec { tcp_percent: 101, ..small_spec() }),
            Err(TraceSpecError::Percent { .. })
        ));
        assert!(generate_trace(&TraceSpec { active_flows: 0, ..small_spec() }).is_err());
    }

    fn output(port: u16, t: u64, byte: u8) -> OutputPacket {
        OutputPacket { port, timestamp_ns: t, data: vec![byte] }
    }

    fn record(outputs: Vec<(usize, u8, OutputPacket)>) -> RunRecord<u8, ()> {
        let mut flows = FlowOutputs::new();
        for (worker, flow, o) in outputs {
            flows.flows.entry(Some(flow)).or_default().push((worker, o));
            flows.count += 1;
        }
        let summary =
            RunSummary { workers: 2, packets: 0, outputs: flows.len(), stats: TxStats::default(), load_imbalance: 1.0 };
        RunRecord { summary, outputs: flows, state: () }
    }

    #[test]
    fn comparison_allows_reordering_across_flows_and_finds_differences_within_one() {
        let (a1, a2, b1) = (output(1, 1, 1), output(1, 2, 2), output(1, 3, 3));
        let sequential = || record(vec![(0, 0, a1.clone()), (0, 0, a2.clone()), (0, 1, b1.clone())]);
        // Flows interleaved differently across workers: equivalent.
        let parallel = record(vec![(1, 1, b1.clone()), (0, 0, a1.clone()), (0, 0, a2.clone())]);
        let report = EquivalenceReport::compare(sequential(), parallel);
        assert!(report.is_equivalent(), "{report}");
        assert_eq!((report.flows, report.split_flows), (2, 0));

        // One worker swapped a flow's outputs.
        let swapped = record(vec![(0, 0, a2.clone()), (0, 0, a1.clone()), (0, 1, b1.clone())]);
        let report = EquivalenceReport::compare(sequential(), swapped);
        assert_eq!(report.mismatched_flows, 1);
        let expected = Mismatch::Order { flow: Some(0), worker: 0, first: a2.clone(), then: a1.clone() };
        assert_eq!(report.first_mismatch, Some(expected));

        // A flow split over workers: each worker's part is in order.
        let split = record(vec![(1, 0, a2.clone()), (0, 0, a1.clone()), (0, 1, b1.clone())]);
        let report = EquivalenceReport::compare(sequential(), split);
        assert!(report.is_equivalent(), "{report}");
        assert_eq!(report.split_flows, 1);

        // A missing and an extra output.
        let changed = record(vec![(0, 0, a1.clone()), (0, 0, output(0, 2, 2)), (0, 1, b1.clone())]);
        let report = EquivalenceReport::compare(sequential(), changed);
        let Some(Mismatch::Outputs { flow, missing, extra, .. }) = report.first_mismatch.clone() else {
            panic!("{report}")
        };
        assert_eq!((flow, missing, extra), (Some(0), Some(a2), Some(output(0, 2, 2))));
        assert!(!report.is_equivalent());
    }
}
