//! Hybrid NFs (eVNF): an NF whose fast path is an element of the stage
//! pipeline (`bpf/include/ferry_hybrid.h`) and whose control plane is a
//! process. ferryd loads one pipeline per chain for them, deploys each
//! port's path of hybrid NFs in its stage tables, attaches it to the
//! port's device, and starts each control plane as an unprivileged NF
//! process that receives the fast path's map fds.
//!
//! A hybrid path is straight: from a port (through fully offloadable NFs,
//! which run ahead of the hybrid ones in their pipeline), through hybrid
//! NFs, and
//! it ends where eVNF's chains end, in the kernel's routing (a FIB lookup
//! in XDP, or the stack for what that cannot resolve). So the last hybrid
//! NF has no out-link, but for one with a slow path (the eDPI), which ends
//! the path: its one out-link is the kernel hop it reinjects inspected
//! frames into, and its process owns the port's AF_XDP sockets, which
//! ferryd registers in the pipeline's socket map. Each hybrid type
//! appears at most once per chain: the pipeline's tables are one per type.

use std::collections::HashSet;
use std::path::PathBuf;

use ferry_chain::spec::{ChainSpec, Node, OffloadPolicy};
use ferry_config::Seg;
use ferry_evnf::types::{HybridType, REPLY_PORTS};

use crate::PlaceError;

/// A hybrid NF, placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridNf {
    pub name: String,
    pub kind: String,
    /// Its eVNF file (`config=`).
    pub config: PathBuf,
    /// Where the other direction arrives (the eLB's backends, the eNAT's
    /// outside): its reply half runs there.
    pub reply_ports: Vec<String>,
    /// It has a slow path (eDPI, eNAT): its process owns the path's port
    /// sockets and sends what it handled to its kernel hop.
    pub slow_path: bool,
}

/// The hybrid NFs reached from one port, in path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HybridPath {
    pub port: String,
    /// Fully offloadable NFs between the port and the first hybrid NF:
    /// elements of the same pipeline, ahead of the hybrid ones.
    pub before: Vec<crate::OffloadedNf>,
    pub nfs: Vec<HybridNf>,
    /// The NF process that gets what passes the hybrid NFs, on the port's
    /// AF_XDP sockets; None: the path ends in the kernel's routing.
    pub then: Option<String>,
}

const NO_PORT: &str = "no port leads to it through hybrid NFs, or NFs that run in XDP ahead of them, only: a hybrid \
                       NF's fast path runs on the device of the port its path starts at";

/// NF `i`'s hybrid type, if it is a hybrid NF.
pub fn hybrid_type(spec: &ChainSpec, i: usize) -> Option<&'static HybridType> {
    ferry_evnf::types::find(spec.nfs[i].kind.as_deref()?)
}

pub fn is_hybrid(spec: &ChainSpec, i: usize) -> bool {
    hybrid_type(spec, i).is_some()
}

/// NF `i` is an eNAT inside a chain: one link in, from a port or an NF
/// that is not a hybrid one, and one out, to a port or such an NF (not a
/// kernel hop: that is a hybrid path's eNAT, whose slow path hands frames
/// to the stack). It is on no hybrid path. As P4SFC places a partially
/// offloadable NF: split where it borders a port with only XDP between
/// (its mappings rewritten in XDP, its misses handled by its process),
/// after the chain's last process or before any process; whole as a
/// process anywhere else, and with `offload: never`.
pub fn is_chain_nat(spec: &ChainSpec, i: usize) -> bool {
    if hybrid_type(spec, i).map(|t| t.fast_paths.first()) != Some(Some(&ferry_bpf::hybrid::HybridElement::Nat)) {
        return false;
    }
    let name = &spec.nfs[i].name;
    let ins: Vec<&str> = spec.links.iter().filter(|l| &l.to == name).map(|l| l.from.as_str()).collect();
    let outs: Vec<&str> = spec.links.iter().filter(|l| &l.from == name).map(|l| l.to.as_str()).collect();
    let chained = |node: &str| match spec.node(node) {
        Some(Node::Nf(j)) => !is_hybrid(spec, j),
        Some(Node::Port(_)) => true,
        _ => false,
    };
    matches!((&ins[..], &outs[..]), ([from], [to]) if chained(from) && chained(to))
}

/// What a NAT inside a chain may not have: more than one thread (its
/// mappings are one table), or reply ports (replies are not its chain's
/// traffic: an eNAT that starts a hybrid path translates them).
pub fn check_chain_nat(spec: &ChainSpec, i: usize) -> Result<(), PlaceError> {
    use Seg::{Index, Key};
    let nf = &spec.nfs[i];
    if nf.threads != 1 {
        return Err(PlaceError {
            at: vec![Key("nfs"), Index(i), Key("threads")],
            message: format!("{}: a NAT inside a chain is one thread (its mappings are one table)", nf.threads),
        });
    }
    let (replies, at) = reply_ports(spec, i);
    if !replies.is_empty() {
        return Err(PlaceError {
            at: vec![Key("nfs"), Index(i), Key("args"), Index(at)],
            message: "not supported: a NAT inside a chain translates its chain's direction only; replies are \
                      translated back by an eNAT that starts a hybrid path (leave out reply_ports)"
                .into(),
        });
    }
    Ok(())
}

/// NF `i`'s arguments (the chain parser checked them against its type).
fn values(spec: &ChainSpec, i: usize) -> Option<ferry_catalog::Values> {
    ferry_catalog::Values::of(spec.nfs[i].kind.as_deref()?, &spec.nfs[i].args).ok()
}

/// NF `i`'s reply ports, and the index of the argument naming them.
fn reply_ports(spec: &ChainSpec, i: usize) -> (Vec<String>, usize) {
    let text = values(spec, i).and_then(|v| v.text(REPLY_PORTS).map(str::to_string)).unwrap_or_default();
    let at = spec.nfs[i].args.iter().position(|a| a.starts_with(&format!("{REPLY_PORTS}="))).unwrap_or(0);
    (text.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect(), at)
}

/// Hybrid NF `i`, as placed.
pub fn hybrid_nf(spec: &ChainSpec, i: usize) -> HybridNf {
    let t = hybrid_type(spec, i).expect("a hybrid NF");
    let config = values(spec, i).and_then(|v| v.text("config").map(PathBuf::from)).unwrap_or_default();
    HybridNf {
        name: spec.nfs[i].name.clone(),
        kind: t.kind.to_string(),
        config,
        reply_ports: reply_ports(spec, i).0,
        slow_path: t.slow_path,
    }
}

/// The chain's hybrid paths, checked.
pub fn paths(spec: &ChainSpec) -> Result<Vec<HybridPath>, PlaceError> {
    use Seg::{Index, Key};
    let nf_at = |i: usize, field: &'static str| vec![Key("nfs"), Index(i), Key(field)];
    let mut kinds: HashSet<&str> = HashSet::new();
    let mut first_runner: Option<(String, &str)> = None;
    let mut replies_taken: HashSet<String> = HashSet::new();
    for i in (0..spec.nfs.len()).filter(|&i| is_hybrid(spec, i)) {
        if is_chain_nat(spec, i) {
            check_chain_nat(spec, i)?;
            continue;
        }
        let (nf, t) = (&spec.nfs[i], hybrid_type(spec, i).expect("a hybrid NF"));
        let fail = |field, message: String| Err(PlaceError { at: nf_at(i, field), message });
        // Their control planes all hold the object's counter map: only
        // NFs that run as one uid may share it.
        let runner = format!("{} as {}", spec.uid_group(&nf.domain), spec.user_of(i).unwrap_or("its allocated uid"));
        match &first_runner {
            Some((r, other)) if *r != runner => {
                return fail(
                    "domain",
                    format!(
                        "{runner}, but hybrid NF {other} runs in {r}: a chain's hybrid NFs share one pipeline \
                         (its counters), so they run as one tenant or domain, as one user"
                    ),
                )
            }
            Some(_) => {}
            None => first_runner = Some((runner, nf.name.as_str())),
        }
        if !kinds.insert(t.kind) {
            let kind = t.kind;
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
        check_out_links(spec, i, t)?;
        let (replies, at) = reply_ports(spec, i);
        let reply_at = vec![Key("nfs"), Index(i), Key("args"), Index(at)];
        if t.fast_paths.len() > 1 && replies.is_empty() {
            return Err(PlaceError { at: reply_at, message: format!("{}: name at least one reply port", t.kind) });
        }
        for p in &replies {
            let used = spec.links.iter().any(|l| &l.from == p || &l.to == p);
            let message = if !matches!(spec.node(p), Some(Node::Port(_))) || used {
                format!("reply port {p:?}: name a port of this chain that no link uses")
            } else if !replies_taken.insert(p.clone()) {
                format!("reply port {p:?} is named twice")
            } else {
                continue;
            };
            return Err(PlaceError { at: reply_at, message });
        }
    }
    let mut out = Vec::new();
    let mut reached: HashSet<usize> = HashSet::new();
    for port in &spec.ports {
        let Some(first) = spec.links.iter().find(|l| l.from == port.name) else { continue };
        let mut to = Some(first.to.as_str());
        // NFs that can move ahead of the hybrid ones run in their pipeline.
        let mut before = Vec::new();
        while let Some(Node::Nf(i)) = to.and_then(|t| spec.node(t)) {
            if is_hybrid(spec, i) {
                break;
            }
            let in_links = spec.links.iter().filter(|l| l.to == spec.nfs[i].name).count();
            let Ok(lowering) = crate::offloadable(spec, i, in_links) else { break };
            before.push((i, lowering));
            to = spec.links.iter().find(|l| l.from == spec.nfs[i].name).map(|l| l.to.as_str());
        }
        let mut nfs = Vec::new();
        while let Some(Node::Nf(i)) = to.and_then(|t| spec.node(t)) {
            let Some(t) = hybrid_type(spec, i) else { break };
            // A NAT inside a chain is no hybrid path's (post_paths places it).
            if is_chain_nat(spec, i) {
                break;
            }
            reached.insert(i);
            let nf = &spec.nfs[i];
            nfs.push(hybrid_nf(spec, i));
            if t.slow_path {
                check_slow_path_port(spec, i, port)?;
                break;
            }
            to = spec.links.iter().find(|l| l.from == nf.name).map(|l| l.to.as_str());
        }
        // An NF process after the last hybrid NF (not one with a slow path,
        // which ends its path) gets what passes on the port's sockets.
        let then = match to.and_then(|t| spec.node(t)) {
            Some(Node::Nf(j)) if !nfs.is_empty() && !nfs.iter().any(|n| n.slow_path) => {
                check_then(spec, j, port)?;
                Some(spec.nfs[j].name.clone())
            }
            _ => None,
        };
        if !nfs.is_empty() {
            out.push(HybridPath { port: port.name.clone(), before: crate::offloaded_nfs(spec, before), nfs, then });
        }
    }
    // A chain's hybrid paths share one pipeline, whose socket map is keyed
    // by receive queue: one of them may hand frames to sockets.
    let to_sockets: Vec<&HybridPath> =
        out.iter().filter(|h| h.then.is_some() || h.nfs.iter().any(|n| n.slow_path)).collect();
    if let [_, second, ..] = to_sockets[..] {
        let at = spec.ports.iter().position(|p| p.name == second.port).expect("a port of the chain");
        return Err(PlaceError {
            at: vec![Key("ports"), Index(at), Key("name")],
            message: format!(
                "a second hybrid path that hands frames to AF_XDP sockets (after {}): a chain's hybrid paths \
                 share one pipeline, whose socket map has one socket per receive queue",
                to_sockets[0].port
            ),
        });
    }
    if let Some(i) =
        (0..spec.nfs.len()).find(|&i| is_hybrid(spec, i) && !is_chain_nat(spec, i) && !reached.contains(&i))
    {
        return Err(PlaceError { at: nf_at(i, "name"), message: NO_PORT.into() });
    }
    Ok(out)
}

/// A hybrid NF's out-links: none (the kernel's routing follows it), or
/// one to the next hybrid NF; one with a slow path links to one kernel
/// hop instead, in its port's namespace.
fn check_out_links(spec: &ChainSpec, i: usize, t: &HybridType) -> Result<(), PlaceError> {
    use Seg::{Index, Key};
    let nf = &spec.nfs[i];
    let outs: Vec<usize> = (0..spec.links.len()).filter(|&l| spec.links[l].from == nf.name).collect();
    if t.slow_path && outs.len() != 1 {
        return Err(PlaceError {
            at: vec![Key("nfs"), Index(i), Key("name")],
            message: format!(
                "{} hands the frames its slow path handled to the kernel: link it to one kernel hop (it has {} \
                 out-links)",
                t.kind,
                outs.len()
            ),
        });
    }
    for &l in &outs {
        let to = &spec.links[l].to;
        let fits = match spec.node(to) {
            // The next hybrid NF, or an NF process after the path.
            Some(Node::Nf(_)) => !t.slow_path && outs.len() == 1,
            Some(Node::Kernel(_)) => t.slow_path,
            _ => false,
        };
        if !fits {
            let end = if t.slow_path {
                "its one out-link goes to a kernel hop, into which it hands what its slow path handled"
            } else {
                "its path goes on to one NF, or ends in the kernel's routing (leave out its out-link)"
            };
            return Err(PlaceError {
                at: vec![Key("links"), Index(l), Key("to")],
                message: format!("{} is a hybrid NF: {end}, so it cannot send to {to:?}", nf.name),
            });
        }
    }
    Ok(())
}

/// The NF process after a hybrid path owns the port's sockets, thread i
/// on queue i: one thread per queue.
fn check_then(spec: &ChainSpec, j: usize, port: &ferry_chain::spec::PortSpec) -> Result<(), PlaceError> {
    use Seg::{Index, Key};
    let nf = &spec.nfs[j];
    if nf.threads == port.queues {
        return Ok(());
    }
    Err(PlaceError {
        at: vec![Key("nfs"), Index(j), Key("threads")],
        message: format!(
            "{} threads after the hybrid path of port {}, which has {} queues: the process after a hybrid path \
             owns the port's sockets, one thread per queue",
            nf.threads, port.name, port.queues
        ),
    })
}

/// A slow path serves one receive queue (its one thread owns the port's
/// socket on it), and hands frames to a kernel hop that the stack takes
/// them in from as if they arrived on the port: same namespace, the
/// port's MAC.
fn check_slow_path_port(spec: &ChainSpec, i: usize, port: &ferry_chain::spec::PortSpec) -> Result<(), PlaceError> {
    use Seg::{Index, Key};
    let nf = &spec.nfs[i];
    if port.via.is_some() {
        let at = spec.ports.iter().position(|p| p.name == port.name).expect("a port of the chain");
        return Err(PlaceError {
            at: vec![Key("ports"), Index(at), Key("via")],
            message: format!(
                "{} is a tenant entry: its device is one ferryd makes, so no kernel hop can take frames in as if \
                 they arrived there; start the hybrid path with a slow path on a port of a device",
                port.name
            ),
        });
    }
    if port.queues != 1 {
        let at = spec.ports.iter().position(|p| p.name == port.name).expect("a port of the chain");
        return Err(PlaceError {
            at: vec![Key("ports"), Index(at), Key("queues")],
            message: format!(
                "{}: {} starts a hybrid path with a slow path, which serves one receive queue (frames of others \
                 would reach the stack unhandled)",
                port.queues, port.name
            ),
        });
    }
    let out = spec.links.iter().find(|l| l.from == nf.name).map(|l| l.to.as_str()).unwrap_or_default();
    if let Some(Node::Kernel(k)) = spec.node(out) {
        let hop = &spec.kernel[k];
        let message = if hop.netns != port.netns {
            format!(
                "kernel hop {} must be in port {}'s namespace: the stack there routes what it is handed",
                hop.name, port.name
            )
        } else if hop.mac.is_none() {
            format!(
                "kernel hop {} needs `mac:`, port {}'s MAC: the stack takes in only frames sent to the device's own \
                 MAC",
                hop.name, port.name
            )
        } else {
            return Ok(());
        };
        return Err(PlaceError { at: vec![Key("kernel"), Index(k), Key("name")], message });
    }
    Ok(())
}
