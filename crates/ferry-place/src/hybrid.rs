//! Hybrid NFs (eVNF): an NF whose fast path is an XDP program of
//! `bpf/evnf.bpf.c` and whose control plane is a process. ferryd loads
//! one eVNF object per chain, chains the hybrid NFs of each port's path
//! with the object's next-NF table, attaches the first to the port's
//! device, and starts each control plane as an unprivileged NF process
//! that receives the fast path's map fds.
//!
//! A hybrid path is straight: from a port, through hybrid NFs only, and
//! it ends where eVNF's chains end, in the kernel's routing (a FIB lookup
//! in XDP, or the stack for what that cannot resolve). So the last hybrid
//! NF has no out-link, but for one with a slow path (the eDPI), which ends
//! the path: its one out-link is the kernel hop it reinjects inspected
//! frames into, and its process owns the port's AF_XDP sockets, which
//! ferryd registers in the eVNF object's socket map. Each hybrid type
//! appears at most once per chain: the object's tables are one per type.

use std::collections::HashSet;
use std::path::PathBuf;

use ferry_chain::spec::{ChainSpec, Node, OffloadPolicy};
use ferry_nf::model::ExecModel;
use ferry_testbed::yamlloc::Seg;

use crate::PlaceError;

/// A hybrid NF, placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridNf {
    pub name: String,
    pub kind: String,
    /// Its eVNF file (`config=`).
    pub config: PathBuf,
    /// An eLB's ports where backends' replies arrive.
    pub reply_ports: Vec<String>,
    /// It has a slow path (the eDPI): its process owns the path's port
    /// sockets and sends what it inspected to its kernel hop.
    pub slow_path: bool,
}

/// The hybrid NFs reached from one port, in path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridPath {
    pub port: String,
    pub nfs: Vec<HybridNf>,
}

const NO_PORT: &str = "no port leads to it through hybrid NFs only: a hybrid NF's fast path runs on the device of the \
                       port its path starts at";

pub fn is_hybrid(spec: &ChainSpec, i: usize) -> bool {
    let kind = spec.nfs[i].kind.as_deref().unwrap_or_default();
    ferry_catalog::find(kind).is_some_and(|t| t.model == ExecModel::Hybrid)
}

fn arg<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter().find_map(|a| a.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// The chain's hybrid paths, checked.
pub fn paths(spec: &ChainSpec) -> Result<Vec<HybridPath>, PlaceError> {
    use Seg::{Index, Key};
    let nf_at = |i: usize, field: &'static str| vec![Key("nfs"), Index(i), Key(field)];
    let mut kinds: HashSet<&str> = HashSet::new();
    let mut first_group: Option<(String, &str)> = None;
    for i in (0..spec.nfs.len()).filter(|&i| is_hybrid(spec, i)) {
        let nf = &spec.nfs[i];
        let kind = nf.kind.as_deref().unwrap_or_default();
        let fail = |field, message: String| Err(PlaceError { at: nf_at(i, field), message });
        // Their control planes all hold the object's counter map: only
        // NFs that run as one uid may share it.
        let group = spec.uid_group(&nf.domain);
        match &first_group {
            Some((g, other)) if *g != group => {
                return fail(
                    "domain",
                    format!(
                        "{group}, but hybrid NF {other} runs in {g}: a chain's hybrid NFs share one eVNF object (its \
                         counters), so they run as one tenant or domain"
                    ),
                )
            }
            Some(_) => {}
            None => first_group = Some((group, nf.name.as_str())),
        }
        if !kinds.insert(kind) {
            return fail(
                "kind",
                format!("a second {kind}: one chain has one of each hybrid NF type (their tables are one per type)"),
            );
        }
        if nf.offload == OffloadPolicy::Never {
            return fail("offload", "a hybrid NF's fast path always runs in XDP: `never` does not apply".into());
        }
        if nf.threads != 1 {
            return fail("threads", format!("{}: a hybrid NF's control plane is one thread", nf.threads));
        }
        let ins: Vec<usize> = (0..spec.links.len()).filter(|&l| spec.links[l].to == nf.name).collect();
        if ins.is_empty() {
            return fail("name", NO_PORT.into());
        }
        if ins.len() > 1 {
            return fail(
                "name",
                format!("frames reach it from {} places; a hybrid path is straight, from one port", ins.len()),
            );
        }
        let outs: Vec<usize> = (0..spec.links.len()).filter(|&l| spec.links[l].from == nf.name).collect();
        let slow = ferry_evnf::chained::has_slow_path(kind);
        if slow && outs.len() != 1 {
            return fail(
                "name",
                format!(
                    "{kind} hands the frames its slow path inspected back to the kernel: link it to one kernel hop \
                     (it has {} out-links)",
                    outs.len()
                ),
            );
        }
        for &l in &outs {
            let to = &spec.links[l].to;
            let fits = match spec.node(to) {
                Some(Node::Nf(j)) => !slow && outs.len() == 1 && is_hybrid(spec, j),
                Some(Node::Kernel(_)) => slow,
                _ => false,
            };
            if !fits {
                let end = if slow {
                    "its one out-link goes to a kernel hop, into which it reinjects what its slow path inspected"
                } else {
                    "its path goes on to hybrid NFs only, once, and ends in the kernel's routing (leave out its \
                     out-link)"
                };
                return Err(PlaceError {
                    at: vec![Key("links"), Index(l), Key("to")],
                    message: format!("{} is a hybrid NF: {end}, so it cannot send to {to:?}", nf.name),
                });
            }
        }
        for p in arg(&nf.args, ferry_evnf::types::REPLY_PORTS).unwrap_or_default().split(',').filter(|p| !p.is_empty())
        {
            let at = nf.args.iter().position(|a| a.starts_with(ferry_evnf::types::REPLY_PORTS)).unwrap_or(0);
            let used = spec.links.iter().any(|l| l.from == p || l.to == p);
            if !matches!(spec.node(p), Some(Node::Port(_))) || used {
                return Err(PlaceError {
                    at: vec![Key("nfs"), Index(i), Key("args"), Index(at)],
                    message: format!("reply port {p:?}: name a port of this chain that no link uses"),
                });
            }
        }
    }
    let mut out = Vec::new();
    let mut reached: HashSet<usize> = HashSet::new();
    for port in &spec.ports {
        let Some(first) = spec.links.iter().find(|l| l.from == port.name) else { continue };
        let mut nfs = Vec::new();
        let mut to = Some(first.to.as_str());
        while let Some(Node::Nf(i)) = to.and_then(|t| spec.node(t)) {
            if !is_hybrid(spec, i) {
                break;
            }
            reached.insert(i);
            let nf = &spec.nfs[i];
            nfs.push(HybridNf {
                name: nf.name.clone(),
                kind: nf.kind.clone().unwrap_or_default(),
                config: PathBuf::from(arg(&nf.args, "config").unwrap_or_default()),
                reply_ports: arg(&nf.args, ferry_evnf::types::REPLY_PORTS)
                    .unwrap_or_default()
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
                slow_path: ferry_evnf::chained::has_slow_path(nf.kind.as_deref().unwrap_or_default()),
            });
            to = spec.links.iter().find(|l| l.from == nf.name).map(|l| l.to.as_str());
            if nfs.last().is_some_and(|n: &HybridNf| n.slow_path) {
                break;
            }
        }
        if !nfs.is_empty() {
            out.push(HybridPath { port: port.name.clone(), nfs });
        }
    }
    if let Some(i) = (0..spec.nfs.len()).find(|&i| is_hybrid(spec, i) && !reached.contains(&i)) {
        return Err(PlaceError { at: nf_at(i, "name"), message: NO_PORT.into() });
    }
    Ok(out)
}
