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
//! Frames keep their order through the stages. A panic in a stage ends
//! the process: ferryd restarts the fused NF, as it restarts any NF, and
//! reclaims its frames (the audit stays conserved).

use anyhow::Result;
use ferry_nf::{PacketNf, Verdict};
use ferry_sdk::{NfThread, Packet};

use super::{Launch, BURST};
use crate::fused::{self, Stage};
use crate::Runner;

/// One stage as a thread runs it.
struct Step {
    /// None for `fwd`, which only forwards.
    nf: Option<Box<dyn PacketNf>>,
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
    nf.run(|th| {
        let steps = steps(&stages).expect("built once already");
        run(th, steps)
    })?;
    Ok(())
}

fn steps(stages: &[Stage]) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut first_counter = 0;
    for s in stages {
        let nf = if s.kind == "fwd" { None } else { Some(crate::build_packet(s.kind, s.args)?) };
        let replies = crate::runner(s.kind)? == Runner::Packet { replies: true };
        let counters = nf.as_ref().map_or(0, |nf| nf.spec().counters.len());
        steps.push(Step { nf, replies, first_counter });
        first_counter += counters;
    }
    Ok(steps)
}

fn run(mut th: NfThread, mut steps: Vec<Step>) {
    let mut burst: Vec<Packet> = Vec::with_capacity(BURST);
    let mut kept: Vec<Packet> = Vec::with_capacity(BURST);
    while th.recv_burst(&mut burst, BURST).is_ok() {
        for (k, step) in steps.iter_mut().enumerate() {
            let Some(nf) = step.nf.as_mut() else { continue };
            for mut pkt in burst.drain(..) {
                match nf.process(pkt.data_mut()) {
                    Verdict::Drop => th.drop_packet(pkt),
                    Verdict::Tx if step.replies && k == 0 && pkt.arrived_on_port().is_some() => th.reply(pkt),
                    Verdict::Tx | Verdict::Pass => kept.push(pkt),
                }
            }
            std::mem::swap(&mut burst, &mut kept);
        }
        for pkt in burst.drain(..) {
            if th.out_links() > 0 {
                th.send(pkt, 0);
            } else {
                th.drop_packet(pkt);
            }
        }
        for step in &steps {
            let Some(nf) = &step.nf else { continue };
            for (i, &v) in nf.counters().iter().enumerate() {
                th.set_nf_counter(step.first_counter + i, v);
            }
        }
    }
}
