//! Setting a chain up: its domains, edge classifiers and NSH attachments,
//! ports (with the XDP, post-server and hybrid parts placed in front of
//! them), kernel hops, flow tables, users and keys. Nothing starts yet.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use ferry_bpf::alert_table::AlertTable;
use ferry_bpf::flow_table::FlowTable;
use ferry_chain::plan::{ChainPlan, PortPlan};
use ferry_chain::proto;
use ferry_nf::flow_monitor::MAX_FLOWS;
use ferry_place::{HybridPath, OffloadedNf, PostPath, Then, XdpPath};

use super::{adopt, Chain, ChainSetup, NfAlerts, NfState, Split};
use crate::classify::EdgeClassifier;
use crate::domain::Domain;
use crate::fastpath::{FastPathEnd, FastPathIds};
use crate::hybrid::Hybrids;
use crate::keys::NfKey;
use crate::nsh::{NshInstall, NshSetup};
use crate::persist::NfRecord;
use crate::ports::{Port, PortParts, PostParts};
use crate::spawn;
use crate::tap::Tap;
use crate::users::{self, Creds};

/// What the orchestrator placed in front of the ports, with the ids ferryd
/// gave the chain and its NFs.
struct Placed<'a> {
    id: u32,
    nf_ids: &'a [u32],
    xdp: &'a [(XdpPath, Vec<u32>)],
    post: &'a [(PostPath, Vec<u32>)],
    hybrid: &'a [HybridPath],
}

impl Chain {
    /// Creates the chain's domains, ports, kernel hops, uids and keys;
    /// starts nothing yet.
    pub fn setup(c: ChainSetup) -> Result<Chain> {
        let ChainSetup {
            id,
            nf_ids,
            file,
            set,
            mut plan,
            socket,
            spawn,
            uids,
            xdp,
            post,
            hybrid,
            ahead_ids,
            whole,
            ..
        } = c;
        if c.persist.is_some() {
            adopt::check_persistable(&plan, &xdp, &post, &hybrid, &whole, c.nsh.is_some())?;
        }
        let (creds, leases) = users::resolve(&plan, uids)?;
        log_users(&plan, &creds);
        let domains = Arc::new(plan.domains.iter().map(Domain::create).collect::<Result<Vec<_>>>()?);
        let splits = splits_of(&plan, &xdp, &post);
        // Classifiers first: they make their entries' devices, which the
        // entries' ports bind to. NSH attachments next: the same.
        let classifiers = open_classifiers(&mut plan)?;
        let nsh = open_nsh(c.nsh.as_ref(), &mut plan)?;
        let placed = Placed { id, nf_ids: &nf_ids, xdp: &xdp, post: &post, hybrid: &hybrid };
        let ports = open_ports(&plan, &placed, &splits, c.persist.as_deref())?;
        let offloaded = xdp.iter().map(|(path, _)| path.nfs.len()).sum::<usize>()
            + post.iter().map(|(p, _)| p.nfs.len()).sum::<usize>()
            + hybrid.iter().map(|h| h.before.len()).sum::<usize>()
            - splits.len();
        let id_of = |name: &str| plan.nfs.iter().position(|n| n.name == name).map(|i| nf_ids[i]);
        let hybrids = Hybrids::setup(id, &plan, (&hybrid, &ahead_ids), &whole, id_of).context("hybrid NFs")?;
        let flow_tables = flow_tables(&plan)?;
        let alerts = alert_outputs(&plan)?;
        let taps = plan.kernel.iter().map(Tap::create).collect::<Result<Vec<_>>>()?;
        // Keys last: nothing after them can fail and leave them behind.
        let keys = issue_keys(&plan, &creds, &socket, spawn)?;
        let needs_host = spawn && plan.nfs.iter().any(|n| n.spawn && n.kind.is_some());
        let host_bin = if needs_host { Some(spawn::host_bin()?) } else { None };
        Ok(Chain {
            id,
            nf_ids,
            file,
            set,
            socket,
            domains,
            ports,
            classifiers: Mutex::new(classifiers),
            taps,
            nfs: plan.nfs.iter().map(|_| Mutex::new(NfState::default())).collect(),
            records: Mutex::new(plan.nfs.iter().map(|_| NfRecord::default()).collect()),
            creds,
            keys,
            leases,
            host_bin,
            spawn,
            stop: Arc::new(AtomicBool::new(false)),
            nsh: Mutex::new(nsh),
            copy_links: Mutex::new(Vec::new()),
            offloaded,
            hybrids: Mutex::new(hybrids),
            splits,
            flow_tables,
            alerts,
            placement: c.placement,
            persist: c.persist,
            plan,
        })
    }
}

fn log_users(plan: &ChainPlan, creds: &[Creds]) {
    for (d, dom) in plan.domains.iter().enumerate() {
        let runs_as: Vec<&str> =
            plan.nfs.iter().zip(creds).filter(|(n, _)| n.domain == d).map(|(_, c)| c.shown.as_str()).collect();
        tracing::info!("chain {}: domain {} runs as {runs_as:?}", plan.name, dom.name);
    }
}

/// Split NFs: their name, port and miss port, by index.
fn splits_of(plan: &ChainPlan, xdp: &[(XdpPath, Vec<u32>)], post: &[(PostPath, Vec<u32>)]) -> Vec<Split> {
    let at = |name: &str| plan.ports.iter().position(|q| q.name == name);
    let pre = xdp.iter().filter_map(|(p, _)| Some(Split { nf: p.split.clone()?, port: at(&p.port)?, miss: None }));
    let post = post.iter().filter_map(|(p, _)| {
        Some(Split { nf: p.split.clone()?, port: at(&p.port)?, miss: Some(at(&p.miss_port()?)?) })
    });
    pre.chain(post).collect()
}

fn open_classifiers(plan: &mut ChainPlan) -> Result<Vec<EdgeClassifier>> {
    let mut classifiers = Vec::new();
    for c in 0..plan.ports.len() {
        if plan.ports[c].classify.is_some() {
            let name = plan.ports[c].name.clone();
            classifiers.push(EdgeClassifier::open(plan, c).with_context(|| format!("port {name}"))?);
        }
    }
    Ok(classifiers)
}

fn open_nsh(nsh: Option<&NshSetup>, plan: &mut ChainPlan) -> Result<Option<NshInstall>> {
    let Some(s) = nsh else { return Ok(None) };
    let name = plan.name.clone();
    NshInstall::open(&s.fabric, &name, &s.part, &s.peers, &s.macs, Some(plan))
        .map(Some)
        .context("this host's part of the service path")
}

/// Opens every port that carries an NF or an XDP part, in plan order. A
/// split NF's miss port is the loop device in front of its port, opened
/// before it (the placement appends it).
fn open_ports(
    plan: &ChainPlan,
    placed: &Placed,
    splits: &[Split],
    persist: Option<&Path>,
) -> Result<Vec<Option<Mutex<Port>>>> {
    let mut ports: Vec<Option<Mutex<Port>>> = Vec::new();
    for (index, p) in plan.ports.iter().enumerate() {
        if let Some(s) = splits.iter().find(|s| s.miss == Some(index)) {
            let of = ports.get(s.port).and_then(Option::as_ref);
            let of = of.ok_or_else(|| anyhow!("port {}: its loop device is not open", p.name))?;
            let port = Port::open_miss(p, &of.lock().expect("port lock"))?;
            check_busy_pollable(plan, p, &port)?;
            ports.push(Some(Mutex::new(port)));
            continue;
        }
        let fast = fast_path(plan, placed, &p.name)?;
        let post = placed.post.iter().find(|(path, _)| path.port == p.name).map(|(path, ids)| PostParts {
            nfs: &path.nfs,
            chain: placed.id,
            ids,
            split: path.split.as_deref(),
        });
        let hybrid = placed.hybrid.iter().any(|h| h.port == p.name);
        let pin = persist.is_some().then(|| adopt::pin_dir(placed.id, index));
        ports.push(match (p.nf, &fast) {
            (None, None) => None,
            _ => {
                let port = Port::open(p, PortParts { fast, post, hybrid, pin: pin.as_deref() })
                    .with_context(|| format!("port {}", p.name))?;
                check_busy_pollable(plan, p, &port)?;
                Some(Mutex::new(port))
            }
        });
    }
    Ok(ports)
}

/// A port whose NF asks for preferred busy polling must be able to do it
/// (checked once, at open, so a deploy fails rather than the NF's start).
fn check_busy_pollable(plan: &ChainPlan, p: &PortPlan, port: &Port) -> Result<()> {
    match p.nf {
        Some(i) if plan.nfs[i].poll.prefer_busy_poll.is_some() => port.check_busy_pollable(),
        _ => Ok(()),
    }
}

/// The XDP part placed in front of port `port`, if any, with where it ends:
/// an NF's ring or another port's device.
fn fast_path<'a>(
    plan: &ChainPlan,
    placed: &'a Placed,
    port: &str,
) -> Result<Option<(&'a [OffloadedNf], FastPathIds<'a>)>> {
    let Some((path, ids)) = placed.xdp.iter().find(|(path, _)| path.port == port) else { return Ok(None) };
    let then = match &path.then {
        Then::Nf(nf) => {
            let i = plan.nfs.iter().position(|n| &n.name == nf).expect("the placed chain has it");
            FastPathEnd::Nf(placed.nf_ids[i])
        }
        Then::Port(out) => {
            let out = plan.ports.iter().find(|q| &q.name == out).expect("the placed chain has it");
            FastPathEnd::Device(Port::ifindex(out).with_context(|| format!("port {}", out.name))?)
        }
    };
    Ok(Some((path.nfs.as_slice(), FastPathIds { chain: placed.id, nfs: ids, then })))
}

/// A flow table per flow monitor run as a process (alone, or fused with
/// other NFs): each thread counts its own flows (its index is their key's
/// config), as many as the NF's table holds.
fn flow_tables(plan: &ChainPlan) -> Result<Vec<Option<FlowTable>>> {
    plan.nfs
        .iter()
        .map(|nf| match nf.kind.as_deref() {
            Some(kind) if ferry_catalog::fused::exports_flows(kind, &nf.args) => {
                FlowTable::create(MAX_FLOWS as u32 * nf.threads.len() as u32)
                    .map(Some)
                    .with_context(|| format!("NF {}: its flow table", nf.name))
            }
            _ => Ok(None),
        })
        .collect()
}

/// Per NF that raises alerts (an IPS, alone, joined or fused): its alert
/// table, each thread's counts of each rule (as many rules as an IPS
/// holds: entries are allocated as they are set), and the EVE files its
/// arguments name, opened for appending as ferryd's user: the NF's own
/// user need not be able to open them.
fn alert_outputs(plan: &ChainPlan) -> Result<Vec<Option<NfAlerts>>> {
    plan.nfs
        .iter()
        .map(|nf| {
            let Some(kind) = nf.kind.as_deref().filter(|k| ferry_catalog::raises_alerts(k, &nf.args)) else {
                return Ok(None);
            };
            let table = AlertTable::create(MAX_ALERT_RULES * nf.threads.len() as u32)
                .with_context(|| format!("NF {}: its alert table", nf.name))?;
            let open = |path: String| {
                let file = std::fs::OpenOptions::new().append(true).create(true).mode(0o640).open(&path);
                file.map(|f| (path.clone(), f)).with_context(|| format!("NF {}: its EVE file {path}", nf.name))
            };
            let eve = ferry_catalog::eve_files(kind, &nf.args).into_iter().map(open).collect::<Result<_>>()?;
            Ok(Some(NfAlerts { table, eve }))
        })
        .collect()
}

/// Rules per thread an IPS's alert table counts at most.
const MAX_ALERT_RULES: u32 = 1 << 16;

/// A key per NF ferryd does not start itself, readable by its user only.
fn issue_keys(plan: &ChainPlan, creds: &[Creds], socket: &Path, spawn: bool) -> Result<Vec<Option<NfKey>>> {
    let mut keys = Vec::new();
    for (nf, c) in plan.nfs.iter().zip(creds) {
        keys.push(if spawn && nf.spawn {
            None
        } else {
            Some(NfKey::issue(&proto::key_path(socket, &plan.name, &nf.name), c.uid, c.gid)?)
        });
    }
    Ok(keys)
}
