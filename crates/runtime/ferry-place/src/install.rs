//! Installing a port's XDP part in its stage pipeline, and reading its
//! NFs' counters back. Map updates only: the pipeline program is loaded
//! once per port and never changes.

use ferry_bpf::pipeline::{Element, ElementKind, Forward, Pipeline, FWD_REDIRECT, FWD_XSK};
use ferry_bpf::scan::{PlScan, SCAN_DROP, SCAN_PASS};
use ferry_bpf::BpfError;
use ferry_nf::payload_scan::OnMatch;

use crate::OffloadedNf;
use ferry_catalog::lower::Step;

/// Where the path's last element sends a frame that survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The AF_XDP socket of the frame's queue, with metadata naming the
    /// chain and this NF id (the server NF the path hands frames to).
    Xsk { nf: u32 },
    /// Out of device `ifindex` (in the devmap: `Pipeline::add_device`).
    Redirect { ifindex: u32 },
}

/// An offloaded NF as installed: its id and where its counts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledNf {
    pub name: String,
    pub kind: String,
    pub id: u32,
    /// Counter name and its counter config.
    pub counters: Vec<(&'static str, u32)>,
    /// Its flow-monitor config, if it is a flow monitor.
    pub flow_monitor: Option<u32>,
}

/// A port's XDP part as installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub nfs: Vec<InstalledNf>,
}

/// Config ids, one sequence per element table of one pipeline (they
/// start at 1).
#[derive(Default)]
pub struct Configs {
    counter: u32,
    acl: u32,
    flow: u32,
    scan: u32,
}

fn next(c: &mut u32) -> u32 {
    *c += 1;
    *c
}

/// Writes the element configs of `path` (a pre- or post-server path's
/// NFs, in order) and deploys them as chain `chain` for frames arriving
/// on `ifindex`; `ids[i]` is the NF id of `path[i]`.
pub fn install(
    p: &mut Pipeline,
    chain: u32,
    ifindex: u32,
    path: &[OffloadedNf],
    ids: &[u32],
    target: Target,
) -> Result<Installed, BpfError> {
    assert!(!ids.is_empty() && ids.len() == path.len(), "one id per offloaded NF");
    let (mut elements, installed) = elements(p, path, ids, &mut Configs::default())?;
    // The forward element belongs to the NF it hands frames to (its id
    // is what the AF_XDP metadata names), or else to the last NF.
    let (forward, nf) = match target {
        Target::Xsk { nf } => (Forward { action: FWD_XSK, ifindex: 0 }, nf),
        Target::Redirect { ifindex } => (Forward { action: FWD_REDIRECT, ifindex }, *ids.last().expect("an NF")),
    };
    p.set_forward(1, forward)?;
    elements.push(Element { kind: ElementKind::Forward, config: 1, nf });
    p.deploy(chain, ifindex, &elements)?;
    Ok(installed)
}

/// Writes the element configs of `path` (NF i with id `ids[i]`), taking
/// config ids from `configs`, and returns its elements in order: what
/// [`install`] deploys, and a hybrid path's pipeline ahead of its hybrid
/// NFs.
pub fn elements(
    p: &mut Pipeline,
    path: &[OffloadedNf],
    ids: &[u32],
    configs: &mut Configs,
) -> Result<(Vec<Element>, Installed), BpfError> {
    let mut elements = Vec::new();
    let mut nfs = Vec::new();
    for (nf, &id) in path.iter().zip(ids) {
        let mut installed =
            InstalledNf { name: nf.name.clone(), kind: nf.kind.clone(), id, counters: Vec::new(), flow_monitor: None };
        for step in nf.lowering.steps() {
            let (kind, config) = match step {
                Step::Counter(name) => {
                    let config = next(&mut configs.counter);
                    installed.counters.push((name, config));
                    (ElementKind::Counter, config)
                }
                Step::Acl { rules, default_action, non_ip_action } => {
                    let config = next(&mut configs.acl);
                    p.set_acl(config, rules, default_action, non_ip_action)?;
                    (ElementKind::Acl, config)
                }
                Step::FlowMonitor => {
                    let config = next(&mut configs.flow);
                    installed.flow_monitor = Some(config);
                    (ElementKind::FlowMonitor, config)
                }
                // Its tables are the pipeline's, filled by its process.
                Step::Split(nf) => (nf.element(), 0),
                Step::Scan(c) => {
                    let (config, matched) = (next(&mut configs.scan), next(&mut configs.counter));
                    let action = if c.on_match == OnMatch::Drop { SCAN_DROP } else { SCAN_PASS };
                    p.set_scan(config, &PlScan::new(&c.patterns, action, matched)?)?;
                    installed.counters.push(("matched", matched));
                    (ElementKind::Scan, config)
                }
                Step::EtherSwap => (ElementKind::EtherSwap, 0),
            };
            elements.push(Element { kind, config, nf: id });
        }
        nfs.push(installed);
    }
    Ok((elements, Installed { nfs }))
}

impl Installed {
    /// Each NF's counters by name (packets).
    pub fn counters(&self, p: &Pipeline) -> Result<Vec<Vec<(String, u64)>>, BpfError> {
        self.nfs
            .iter()
            .map(|nf| {
                nf.counters.iter().map(|(name, config)| Ok((name.to_string(), p.counter(*config)?.packets))).collect()
            })
            .collect()
    }
}
