//! `ferry bench cost`: measures the per-frame costs placement weighs
//! ([`ferry_place::cost`]) on this machine, and writes them as a cost
//! model for `ferryd --cost-model` and `ferry chain check --cost-model`.
//!
//! Each unit comes from two measurements that differ in it alone, each
//! the median of `--runs` runs (compare only within one invocation):
//! - a process hop and a fused stage: CPU per frame of `bench chain`'s
//!   memory-mode chains of 1 and 4 `fwd` NFs, as processes and fused;
//!   a third of the difference from 1 to 4 is one more of each (the
//!   fused stage taken off the hop);
//! - a loop-device crossing: a third of the difference in time per frame
//!   between the kernel's XDP-redirect chains of 1 and 4 veth hops at
//!   saturation;
//! - an XDP stage: the median, over `bench pipeline`'s elements, of what
//!   running as a pipeline stage adds to the same work as a dedicated
//!   program.
//!
//! The model counts the NFs' own work on neither side: it assumes an NF's
//! logic costs about the same in XDP as in its process. Its units are not
//! all of one kind: the process hop and the fused stage are CPU time per
//! frame, the loop crossing is time per frame at the kernel chain's
//! saturation (softirq time, which no process is charged for), and the
//! XDP stage is CPU time per frame under BPF_PROG_TEST_RUN.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, Result};
use ferry_place::CostModel;
use serde::Serialize;

use crate::chain::{self, BenchChainOptions, Row};
use crate::pipeline;

pub struct BenchCostOptions {
    /// Runs of the chains; each figure is the median over them.
    pub runs: usize,
    pub warmup: Duration,
    pub window: Duration,
    /// `bench pipeline`'s runs and packets per run.
    pub pipeline_runs: usize,
    pub pipeline_repeat: u32,
}

#[derive(Debug, Serialize)]
pub struct BenchCostReport {
    pub machine: String,
    pub model: CostModel,
    /// The measurements the model was derived from.
    pub inputs: BTreeMap<String, f64>,
}

pub fn run(o: &BenchCostOptions) -> Result<BenchCostReport> {
    let mut rows = Vec::new();
    for _ in 0..o.runs.max(1) {
        let chains = chain::run(&BenchChainOptions {
            scenarios: vec!["fig10".into()],
            nfs: vec![1, 4],
            warmup: o.warmup,
            window: o.window,
            kernel: true,
            ..Default::default()
        })?;
        rows.extend(chains.rows);
    }
    let pipe = pipeline::run(o.pipeline_repeat, o.pipeline_runs.max(1))?;
    let mut inputs = BTreeMap::new();
    let mut input = |name: String, v: f64| {
        inputs.insert(name, v);
        v
    };
    // The median over the runs: one run on a small machine is noisy.
    let median_of = |variant: &str, nfs: usize, figure: fn(&Row) -> Option<f64>| -> Result<f64> {
        let mut v: Vec<f64> = rows.iter().filter(|r| r.variant == variant && r.nfs == nfs).filter_map(figure).collect();
        if v.is_empty() {
            return Err(anyhow!("bench chain gave no {variant} figure at {nfs} NFs"));
        }
        Ok(crate::io::median(&mut v))
    };
    let cpu = |variant: &str, nfs: usize| median_of(variant, nfs, Row::cpu_ns_per_frame);
    let wall = |variant: &str, nfs: usize| median_of(variant, nfs, |r| (r.mpps > 0.0).then(|| 1e3 / r.mpps));
    let per_one_more = |one: f64, four: f64| ((four - one) / 3.0).max(0.0);
    let fused = per_one_more(
        input("fused_1_cpu_ns".into(), cpu("ferry-fused", 1)?),
        input("fused_4_cpu_ns".into(), cpu("ferry-fused", 4)?),
    );
    let processes = per_one_more(
        input("zero_copy_1_cpu_ns".into(), cpu("ferry-zero-copy", 1)?),
        input("zero_copy_4_cpu_ns".into(), cpu("ferry-zero-copy", 4)?),
    );
    let crossing = per_one_more(
        input("kernel_1_ns".into(), wall("kernel-xdp-redirect", 1)?),
        input("kernel_4_ns".into(), wall("kernel-xdp-redirect", 4)?),
    );
    let mut overheads: Vec<f64> =
        pipe.elements.iter().filter(|e| e.element != "none (parse + drop)").map(|e| e.overhead_ns).collect();
    overheads.sort_by(f64::total_cmp);
    let stage = *overheads.get(overheads.len() / 2).ok_or_else(|| anyhow!("bench pipeline measured no element"))?;
    // A difference of two medians: noise can take it below zero.
    let stage = stage.max(0.0);
    let machine = crate::io::machine_summary();
    let model = CostModel {
        loop_crossing_ns: crossing,
        xdp_stage_ns: input("xdp_stage_overhead_ns".into(), stage),
        fused_stage_ns: fused,
        process_hop_ns: (processes - fused).max(0.0),
        origin: format!("ferry bench cost on {machine}, {}", time::OffsetDateTime::now_utc().date()),
    };
    Ok(BenchCostReport { machine, model, inputs })
}

pub fn table(r: &BenchCostReport) -> String {
    let m = &r.model;
    let mut out = format!("machine: {}\nper-frame costs placement weighs, ns\n", r.machine);
    for (unit, ns) in [
        ("loop-device crossing", m.loop_crossing_ns),
        ("XDP pipeline stage", m.xdp_stage_ns),
        ("fused stage", m.fused_stage_ns),
        ("process hop", m.process_hop_ns),
    ] {
        out += &format!("{unit:<22}{ns:>8.0}\n");
    }
    for n in [1, 3] {
        out += &format!("{n} NF(s) after the last process: {}\n", m.estimate(n, true, false).describe());
    }
    out += "measured:";
    for (k, v) in &r.inputs {
        out += &format!(" {k}={v:.0}");
    }
    out + "\n"
}
