//! `fused`: a run of NFs in one NF's threads ([`crate::fused`]). Each
//! thread takes a burst and runs it through each stage in turn, as VPP
//! runs a vector through its graph nodes: no ring, no wake-up and no
//! second process between the stages.
//!
//! Each stage does what its own process would have done with the frame:
//! - `Drop`: the frame is dropped, counted `drop_nf` for the fused NF and
//!   by the stage's own counters;
//! - `Tx` from a responder in the first stage, for a frame that arrived on
//!   a port: the reply leaves by that port;
//! - anything else: on to the next stage (a stage's out-link 0 was the next
//!   stage), and after the last, out-link 0 of the fused NF (the last
//!   stage's), or dropped if it has none.
//!
//! A flow monitor stage (at most one per fused NF) exports its flows to
//! the table ferryd made for the fused NF, as the flow monitor's own
//! process does ([`super::flow_monitor`]).
//!
//! Frames keep their order through the stages. A panic in a stage ends
//! the process: ferryd restarts the fused NF, as it restarts any NF, and
//! reclaims its frames (the audit stays conserved).

use std::sync::Mutex;

use anyhow::Result;
use ferry_bpf::flow_table::FlowTable;
use ferry_nf::{FlowMonitor, PacketNf, Verdict};
use ferry_sdk::{NfThread, Packet};

use super::alerts::{AlertOut, AlertSinks};
use super::flow_monitor::{thread_tables, Exporter, EXPORT_EVERY};
use super::{Launch, BURST};
use crate::fused::{self, Stage};
use crate::Runner;

/// A stage's NF.
enum StageNf {
    /// `fwd`, which only forwards.
    Forward,
    Packet(Box<dyn PacketNf>),
    /// The flow monitor, with the exporter of its thread's flows.
    Monitor(Box<(FlowMonitor, Exporter)>),
}

impl StageNf {
    fn nf(&mut self) -> Option<&mut dyn PacketNf> {
        match self {
            StageNf::Forward => None,
            StageNf::Packet(nf) => Some(nf.as_mut()),
            StageNf::Monitor(m) => Some(&mut m.0),
        }
    }
}

/// One stage as a thread runs it.
struct Step {
    nf: StageNf,
    /// A responder: its `Tx` is a reply out of the arrival port.
    replies: bool,
    /// Where its counters start among the fused NF's.
    first_counter: usize,
}

pub fn serve(l: &Launch) -> Result<()> {
    let stages = fused::stages(l.args)?;
    let names = fused::counters(&stages)?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let nf = l.hello.connect(&names)?;
    let monitors = stages.iter().any(|s| crate::runner(s.kind).ok() == Some(Runner::FlowExport));
    let tables: Vec<Mutex<Option<FlowTable>>> = if monitors { thread_tables(&nf)? } else { Vec::new() };
    let sinks = crate::raises_alerts(l.kind, l.args).then(|| AlertSinks::take(&nf));
    let outs = sinks.map(|s| s.per_thread(nf.threads())).transpose()?.unwrap_or_default();
    nf.run(|th| {
        let table = tables.get(th.index() as usize).and_then(|t| t.lock().expect("tables lock").take());
        let steps = steps(&stages, table, th.index()).expect("built once already");
        let alerts = outs.get(th.index() as usize).and_then(|o| o.lock().expect("alerts lock").take());
        run(th, steps, alerts)
    })?;
    Ok(())
}

/// The stages of thread `index`; `table` is its handle on the flow table,
/// if a stage is a flow monitor.
fn steps(stages: &[Stage], mut table: Option<FlowTable>, index: u32) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut first_counter = 0;
    for s in stages {
        let runner = crate::runner(s.kind)?;
        let nf = match (s.kind, runner) {
            ("fwd", _) => StageNf::Forward,
            (_, Runner::FlowExport) => {
                let t = table.take().ok_or_else(|| anyhow::anyhow!("{}: no flow table", s.name))?;
                let (exporter, monitor) = Exporter::open(t, index);
                StageNf::Monitor(Box::new((monitor, exporter)))
            }
            _ => StageNf::Packet(crate::build_packet(s.kind, s.args)?),
        };
        let mut step = Step { nf, replies: runner == Runner::Packet { replies: true }, first_counter };
        first_counter += step.nf.nf().map_or(0, |nf| nf.spec().counters.len());
        steps.push(step);
    }
    Ok(steps)
}

fn run(mut th: NfThread, mut steps: Vec<Step>, mut alerts: Option<AlertOut>) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut kept: Vec<Packet> = Vec::with_capacity(BURST);
    // A flow monitor's last counts get out while no frames come.
    let monitors = steps.iter().any(|s| matches!(s.nf, StageNf::Monitor(_)));
    let ticker = (monitors || alerts.is_some()).then(|| th.waker().every(EXPORT_EVERY));
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for (k, step) in steps.iter_mut().enumerate() {
            let Some(nf) = step.nf.nf() else { continue };
            for mut pkt in burst.drain(..) {
                match nf.process(pkt.data_mut()) {
                    Verdict::Drop => th.drop_packet(pkt),
                    Verdict::Tx if step.replies && k == 0 && pkt.arrived_on_port().is_some() => th.reply(pkt),
                    Verdict::Tx | Verdict::Pass => kept.push(pkt),
                }
            }
            std::mem::swap(&mut burst, &mut kept);
            th.tap_stage(k, &burst);
        }
        // On to out-link 0 (the last stage's), or dropped without one.
        if th.out_links() > 0 {
            th.send_all(&mut burst, 0);
        } else {
            burst.drain(..).for_each(|pkt| th.drop_packet(pkt));
        }
        for step in &mut steps {
            let first = step.first_counter;
            if let StageNf::Monitor(m) = &mut step.nf {
                let (nf, exporter) = &mut **m;
                exporter.tick(nf);
            }
            let Some(nf) = step.nf.nf() else { continue };
            if let Some(out) = &mut alerts {
                out.collect(nf);
            }
            for (i, &v) in nf.counters().iter().enumerate() {
                th.set_nf_counter(first + i, v);
            }
        }
    }
    for step in &mut steps {
        if let StageNf::Monitor(m) = &mut step.nf {
            let (nf, exporter) = &mut **m;
            exporter.export(nf);
        }
    }
    if let Some(out) = &mut alerts {
        out.export();
    }
    drop(ticker);
}
