//! One deployed chain: its domains, ports, kernel hops and copy links;
//! starting, admitting and watching its NFs; recovery after one dies.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use ferry_bpf::abi::VERDICT_NAMES;
use ferry_bpf::alert_table::AlertTable;
use ferry_bpf::flow_table::FlowTable;
use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::ChainSummary;
use ferry_place::{HybridNf, HybridPath, PostPath, XdpPath};

use crate::classify::EdgeClassifier;
use crate::domain::Domain;
use crate::hybrid::Hybrids;
use crate::keys::NfKey;
use crate::nsh::{NshInstall, NshSetup};
use crate::persist::NfRecord;
use crate::ports::Port;
use crate::tap::Tap;
use crate::users::{Creds, Lease, UidRange};

mod admission;
pub(crate) mod adopt;
mod setup;
mod status;
mod supervision;
pub use adopt::abandon;

/// What ferryd made for an NF that raises alerts (an IPS).
pub(crate) struct NfAlerts {
    /// Each thread's alerts per rule: the NF writes, ferryd reads.
    table: AlertTable,
    /// The EVE files its arguments name, by path, opened for appending.
    eve: Vec<(String, std::fs::File)>,
}

/// An NF process a supervisor waits for.
enum Running {
    /// One this ferryd started.
    Child(std::process::Child),
    /// One an earlier ferryd started, by pidfd (`--persist`).
    Adopted(Arc<OwnedFd>),
}

#[derive(Default)]
struct NfState {
    /// The process ferryd started for the NF, until it is reaped: the only
    /// pid admitted as this NF.
    child: Option<u32>,
    pid: Option<u32>,
    /// ferryd's end of the admitted NF's connection: shutting it down is
    /// how ferryd tells an NF to stop (the SDK stops on EOF).
    conn: Option<UnixStream>,
    /// The admitted process, by pidfd: signals never reach a process that
    /// reused its pid.
    pidfd: Option<Arc<OwnedFd>>,
    /// The admitted process's start time: with its pid, what a persistent
    /// ferryd records to know it again.
    start: Option<u64>,
    /// Adopted from an earlier ferryd, and not rejoined yet.
    awaiting_rejoin: bool,
    /// Its frames are being reclaimed (by [`Chain::nf_gone`]).
    reclaiming: bool,
    connected: bool,
    restarts: u32,
    generation: u64,
    counters: Vec<String>,
}

pub struct Chain {
    /// Assigned by ferryd.
    pub id: u32,
    /// Per NF: its id, assigned by ferryd.
    pub nf_ids: Vec<u32>,
    /// The chain file it came from, and the values its placeholders were
    /// filled with (`--set`).
    pub file: PathBuf,
    pub set: Vec<(String, String)>,
    pub plan: ChainPlan,
    /// ferryd's NF socket (NFs it starts are told to connect there).
    pub socket: PathBuf,
    pub domains: Arc<Vec<Domain>>,
    ports: Vec<Option<Mutex<Port>>>,
    /// Taken away on stop, after the ports' programs.
    classifiers: Mutex<Vec<EdgeClassifier>>,
    taps: Vec<Tap>,
    nfs: Vec<Mutex<NfState>>,
    /// Per NF: what it runs as.
    creds: Vec<Creds>,
    /// Per NF: its key, if ferryd does not start it.
    keys: Vec<Option<NfKey>>,
    leases: Vec<Lease>,
    host_bin: Option<PathBuf>,
    spawn: bool,
    /// Set when the chain is removed (or ferryd stops).
    pub stop: Arc<AtomicBool>,
    /// Its part of a service path over hosts; None once the chain stops.
    nsh: Mutex<Option<NshInstall>>,
    /// The copy links' threads.
    copy_links: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// NFs placed in XDP (their ids and counters live with their port).
    offloaded: usize,
    /// The hybrid NFs' fast paths; None once the chain stops.
    hybrids: Mutex<Option<Hybrids>>,
    /// NFs split over a post-server part and a process.
    splits: Vec<Split>,
    /// Per NF: the flow table of a flow monitor running as a process.
    flow_tables: Vec<Option<FlowTable>>,
    /// Per NF: an alerting NF's alert table and EVE files.
    alerts: Vec<Option<NfAlerts>>,
    /// Where each NF runs and why.
    placement: String,
    /// Started by `ferryd --persist`: the chain outlives ferryd, which
    /// keeps its state file current in this directory
    /// ([`crate::persist`]).
    persist: Option<PathBuf>,
    /// Per NF: what the state file says of it. Locked after an NF's lock,
    /// never before.
    records: Mutex<Vec<NfRecord>>,
}

/// An NF placed in XDP, as a capture finds it.
pub(crate) struct XdpNf {
    pub port: String,
    pub id: u32,
    pub taps: std::sync::Arc<ferry_bpf::capture::PipelineTaps>,
}

/// An XDP program's verdict counters as (verdict, packets, bytes).
fn verdict_list(v: &ferry_bpf::Verdicts) -> Vec<(String, u64, u64)> {
    VERDICT_NAMES.iter().enumerate().map(|(i, name)| (name.to_string(), v.packets[i], v.bytes[i])).collect()
}

/// A NF split over an XDP part of a port (its fast path) and a process
/// that gets the misses: on the port's own sockets (pre-server), or on
/// the miss port, the loop device in front of the port (post-server).
struct Split {
    nf: String,
    port: usize,
    miss: Option<usize>,
}

/// What a chain is set up from.
pub struct ChainSetup {
    pub id: u32,
    pub nf_ids: Vec<u32>,
    pub file: PathBuf,
    pub set: Vec<(String, String)>,
    pub plan: ChainPlan,
    pub socket: PathBuf,
    /// Start the NFs marked `spawn: true`.
    pub spawn: bool,
    pub uids: UidRange,
    /// The orchestrator's XDP parts, by port name, with their NFs' ids.
    pub xdp: Vec<(XdpPath, Vec<u32>)>,
    /// Its post-server parts, likewise.
    pub post: Vec<(PostPath, Vec<u32>)>,
    /// The orchestrator's hybrid paths, and per path the ids of the NFs
    /// ahead of its hybrid NFs.
    pub hybrid: Vec<HybridPath>,
    /// Per hybrid path, the ids of the NFs ahead of its hybrid NFs.
    pub ahead_ids: Vec<Vec<u32>>,
    /// Hybrid NFs that run whole as processes.
    pub whole: Vec<HybridNf>,
    /// `Placement::explain`.
    pub placement: String,
    /// Make the chain outlive ferryd (`--persist`), with its state in this
    /// directory.
    pub persist: Option<PathBuf>,
    /// This host's part of a chain over hosts.
    pub nsh: Option<NshSetup>,
}

impl Chain {
    /// The hosts its part of a service path sends to.
    pub fn nsh_next_hosts(&self) -> Vec<ferry_chain::hosts::HostSpec> {
        self.nsh.lock().expect("nsh lock").as_ref().map(NshInstall::next_hosts).unwrap_or_default()
    }

    /// See [`NshInstall::set_reachable`].
    pub fn nsh_set_reachable(&self, host: &str, up: bool) -> bool {
        self.nsh.lock().expect("nsh lock").as_mut().is_some_and(|n| n.set_reachable(host, up))
    }

    /// Where NF `name` runs in XDP, if it does: its port's name, its id,
    /// and a handle on that pipeline's capture taps.
    pub(crate) fn xdp_nf(&self, name: &str) -> Option<XdpNf> {
        for (i, port) in self.ports.iter().enumerate() {
            let Some(port) = port else { continue };
            let port = port.lock().expect("port lock");
            for fast in port.fast_paths() {
                let Some(pos) = fast.nfs().position(|(n, _)| n == name) else { continue };
                let id = fast.nfs().nth(pos).map(|(_, id)| id).expect("found");
                return Some(XdpNf { port: self.plan.ports[i].name.clone(), id, taps: fast.taps() });
            }
        }
        None
    }

    /// The first NF of the XDP part on port `port`'s own device, if any.
    pub(crate) fn xdp_entry(&self, port: usize) -> Option<String> {
        let port = self.ports.get(port)?.as_ref()?.lock().expect("port lock");
        let pre = port.fast_paths().into_iter().next().filter(|_| port.xdp.is_some())?;
        let first = pre.nfs().next().map(|(n, _)| n.to_string());
        first
    }

    /// Every NF ferryd starts itself has connected (an NF it does not
    /// start, `spawn: false` or `ferryd --no-spawn`, comes when its
    /// operator starts it: not a condition of ferryd being up).
    pub(crate) fn started_nfs_up(&self) -> bool {
        let started = |i: usize| self.spawn && self.plan.nfs[i].spawn;
        self.nfs.iter().enumerate().all(|(i, n)| !started(i) || n.lock().expect("nf lock").connected)
    }

    /// What `ferry chain list` shows of the chain.
    pub fn summary(&self) -> ChainSummary {
        ChainSummary {
            id: self.id,
            name: self.plan.name.clone(),
            file: self.file.display().to_string(),
            nfs: self.plan.nfs.len() + self.offloaded,
            connected: self.nfs.iter().filter(|n| n.lock().expect("nf lock").connected).count(),
            domains: self.plan.domains.len(),
            placement: self.placement.clone(),
        }
    }
}
