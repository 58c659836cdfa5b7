//! A port's XDP part: the stage pipeline with the offloaded NFs installed
//! as its elements. The pre-server NFs run on the port's device and hand
//! what survives to the server NF's AF_XDP sockets (or redirect it out of
//! another port); the post-server NFs run on the port's loop device
//! ([`crate::loopdev`]) and redirect what survives out of the port.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::os::fd::AsRawFd;

use anyhow::{Context, Result};
use ferry_bpf::abi::Verdicts;
use ferry_bpf::capture::PipelineTaps;
use ferry_bpf::hybrid::HybridPipeline;
use ferry_bpf::pipeline::{FlowKey, Pipeline, PlCount};
use ferry_bpf::AttachMode;
use ferry_chain::plan::PortPlan;
use ferry_chain::proto::{FlowStatus, OffloadedStatus};
use ferry_place::{install, Installed, Lowering, OffloadedNf, Target};
use ferry_wire::prefix::from_flow_space;

/// Flows of a flow monitor a status carries: the busiest ones (a full
/// table would not fit in one admin message).
pub const FLOWS_IN_STATUS: usize = 1000;

pub struct FastPath {
    /// The stage pipeline, with the hybrid NFs' tables for a split NF.
    pipeline: HybridPipeline,
    installed: Installed,
    port: String,
    /// The split NF whose stateless part ends the path (shown with its
    /// process, not here).
    split: Option<String>,
    /// Its capture taps, opened with it.
    taps: std::sync::Arc<PipelineTaps>,
}

/// The ids a port's XDP part is installed with, and where it ends.
pub struct FastPathIds<'a> {
    pub chain: u32,
    /// One per NF of the path.
    pub nfs: &'a [u32],
    pub then: FastPathEnd,
}

/// Where a port's XDP part sends what passes.
pub enum FastPathEnd {
    /// The AF_XDP sockets of this server NF (by its id).
    Nf(u32),
    /// Out of this device (in the port's namespace).
    Device(u32),
}

impl FastPath {
    /// Loads a pipeline, installs `path` (NFs in order) in it and attaches
    /// it to device `ifindex` in the port's namespace: configs first, so
    /// the first frame already meets every element.
    pub fn open(
        plan: &PortPlan,
        ifindex: u32,
        mode: AttachMode,
        path: &[OffloadedNf],
        ids: FastPathIds,
    ) -> Result<FastPath> {
        let split = path.iter().find(|n| matches!(n.lowering, Lowering::Split(_))).map(|n| n.name.clone());
        let mut pipeline = HybridPipeline::load_with(split.is_some()).context("loading the stage pipeline")?;
        let target = match ids.then {
            FastPathEnd::Nf(nf) => Target::Xsk { nf },
            FastPathEnd::Device(ifindex) => Target::Redirect { ifindex },
        };
        let installed = install(pipeline.pipeline_mut(), ids.chain, ifindex, path, ids.nfs, target)
            .context("installing the XDP part")?;
        let pipeline = ferry_sys::in_netns(plan.netns.as_deref(), move || -> Result<HybridPipeline> {
            if let Target::Redirect { ifindex: out } = target {
                pipeline.pipeline_mut().add_device(out).context("adding the egress device to the pipeline's devmap")?;
            }
            pipeline.attach(ifindex, mode).context("attaching the stage pipeline")?;
            Ok(pipeline)
        })??;
        let taps = PipelineTaps::open(pipeline.pipeline()).context("opening the pipeline's capture taps")?;
        Ok(FastPath { pipeline, installed, port: plan.name.clone(), split, taps })
    }

    /// Steers queue `queue`'s frames that reach the end of the path to
    /// `socket`.
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<()> {
        Ok(self.pipeline.register_xsk(queue, socket)?)
    }

    pub fn verdicts(&self) -> Option<Verdicts> {
        self.pipeline.verdicts().ok()
    }

    /// The pipeline, with the hybrid tables of a split NF it runs.
    pub fn evnf(&self) -> &HybridPipeline {
        &self.pipeline
    }

    /// The NFs it runs, by name and id, in order.
    pub fn nfs(&self) -> impl Iterator<Item = (&str, u32)> {
        self.installed.nfs.iter().map(|n| (n.name.as_str(), n.id))
    }

    /// Its capture taps and rings.
    pub fn taps(&self) -> std::sync::Arc<PipelineTaps> {
        self.taps.clone()
    }

    /// The offloaded NFs' counters and flows (but a split NF's).
    pub fn status(&self) -> Vec<OffloadedStatus> {
        let all = offloaded_status(self.pipeline.pipeline(), &self.installed, &self.port);
        all.into_iter().filter(|n| Some(&n.name) != self.split.as_ref()).collect()
    }
}

/// The counters and flows of the NFs `installed` in pipeline `p` for port
/// `port` (a port's XDP part, or the NFs ahead of a hybrid path).
pub fn offloaded_status(p: &Pipeline, installed: &Installed, port: &str) -> Vec<OffloadedStatus> {
    let counters = installed.counters(p).unwrap_or_default();
    installed
        .nfs
        .iter()
        .enumerate()
        .map(|(i, nf)| {
            let flows = |config| flow_statuses(p.flows(config).unwrap_or_default());
            let (flows_total, flows) = nf.flow_monitor.map(flows).unwrap_or_default();
            OffloadedStatus {
                name: nf.name.clone(),
                id: nf.id,
                kind: nf.kind.clone(),
                port: port.to_string(),
                counters: counters.get(i).cloned().unwrap_or_default(),
                flows_total,
                flows,
            }
        })
        .collect()
}

/// How many flows `entries` hold (entries of one 5-tuple under several
/// configs, a process's threads, summed), and the busiest
/// [`FLOWS_IN_STATUS`] of them.
pub fn flow_statuses(entries: Vec<(FlowKey, PlCount)>) -> (u64, Vec<FlowStatus>) {
    let mut by_flow: BTreeMap<(Ipv6Addr, Ipv6Addr, u16, u16, u8), PlCount> = BTreeMap::new();
    for (k, c) in entries {
        let key = (k.flow.saddr.to_ipv6(), k.flow.daddr.to_ipv6(), k.flow.sport, k.flow.dport, k.flow.proto);
        let sum = by_flow.entry(key).or_default();
        // A process NF wrote these: sums must not overflow.
        sum.packets = sum.packets.saturating_add(c.packets);
        sum.bytes = sum.bytes.saturating_add(c.bytes);
    }
    let mut flows: Vec<FlowStatus> = by_flow
        .into_iter()
        .map(|((saddr, daddr, sport, dport, proto), c)| FlowStatus {
            src: from_flow_space(saddr).to_string(),
            dst: from_flow_space(daddr).to_string(),
            proto,
            sport: u16::from_be(sport),
            dport: u16::from_be(dport),
            packets: c.packets,
            bytes: c.bytes,
        })
        .collect();
    flows.sort_by(|a, b| b.packets.cmp(&a.packets).then_with(|| (&a.src, &a.dst).cmp(&(&b.src, &b.dst))));
    let total = flows.len() as u64;
    flows.truncate(FLOWS_IN_STATUS);
    (total, flows)
}
