//! Chains that outlive ferryd (`ferryd --persist`): what such a chain may
//! hold, the state file it keeps current, and how the next ferryd adopts
//! it while its NFs go on forwarding.
//!
//! What survives ferryd, and where:
//! * the NF processes (no PR_SET_PDEATHSIG; a session and a log file of
//!   their own), with their UMEM, region, eventfds and AF_XDP sockets;
//! * each receiving port's redirect program and maps, pinned in bpffs;
//! * the state file, the NFs' keys and the uid leases' files.
//!
//! What does not: the copy links (ferryd threads), so frames between
//! domains wait in rings (or upstream) until the next ferryd starts them
//! again; and the supervision of NFs, so one that dies meanwhile is
//! reclaimed and restarted only when the next ferryd comes.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::ChainPlan;
use ferry_chain::proto;
use ferry_place::{HybridNf, HybridPath, PostPath, XdpPath};

use super::{Chain, NfState, Running};
use crate::domain::Domain;
use crate::keys::NfKey;
use crate::persist::{self, ChainState, NfRecord, STATE_VERSION};
use crate::ports::Port;
use crate::spawn;
use crate::users::{self, Creds};

/// Refuses, at deploy, what a persistent ferryd cannot hand over yet:
/// everything whose state lives only in ferryd (XDP parts, hybrid NFs'
/// fast paths, classifiers, TAPs, flow tables).
pub(crate) fn check_persistable(
    plan: &ChainPlan,
    xdp: &[(XdpPath, Vec<u32>)],
    post: &[(PostPath, Vec<u32>)],
    hybrid: &[HybridPath],
    whole: &[HybridNf],
    over_hosts: bool,
) -> Result<()> {
    let what = if over_hosts {
        "a part of a chain over hosts (NSH)".to_string()
    } else if let Some((p, _)) = xdp.first() {
        format!("NFs placed in XDP on port {}", p.port)
    } else if let Some((p, _)) = post.first() {
        format!("NFs placed in XDP in front of port {}", p.port)
    } else if let Some(h) = hybrid.first() {
        format!("hybrid NFs on port {}", h.port)
    } else if let Some(h) = whole.first() {
        format!("hybrid NF {}", h.name)
    } else if let Some(p) = plan.ports.iter().find(|p| p.classify.is_some()) {
        format!("tenant classification on port {}", p.name)
    } else if let Some(k) = plan.kernel.first() {
        format!("kernel hop {}", k.name)
    } else if let Some(n) = plan.nfs.iter().find(|n| exports_flows(n.kind.as_deref(), &n.args)) {
        format!("flow monitor {} (its flow table)", n.name)
    } else if let Some(n) =
        plan.nfs.iter().find(|n| n.kind.as_deref().is_some_and(|k| ferry_catalog::raises_alerts(k, &n.args)))
    {
        format!("IPS {} (its alert table and EVE file)", n.name)
    } else if let Some(n) = plan.nfs.iter().find(|n| n.poll.prefer_busy_poll.is_some()) {
        format!("preferred busy polling on NF {} (the device settings it changes)", n.name)
    } else {
        return Ok(());
    };
    bail!(
        "chain {:?}: not supported with ferryd --persist yet: {what}. Only NF processes, zero-copy and copy links, \
         and ports can outlive ferryd; deploy this chain on a ferryd without --persist",
        plan.name
    )
}

/// Where port `index` of chain `id` pins its program.
pub(super) fn pin_dir(id: u32, index: usize) -> PathBuf {
    Path::new(ferry_bpf::pinned::BPFFS)
        .join("ferry")
        .join(format!("{}-{id}", std::process::id()))
        .join(format!("port{index}"))
}

/// The log file of an NF that outlives ferryd, in the state directory.
pub(super) fn nf_log(dir: &Path, chain: &str, nf: &str) -> PathBuf {
    let _ = persist::secure_dir(dir);
    dir.join(format!("{chain}.{nf}.log"))
}

/// Removes the pins a removed chain left for a next ferryd (`pins`: each
/// port's pin directory, which the port empties as it goes) and their
/// directory.
pub(super) fn forget(pins: &[PathBuf]) {
    for dir in pins {
        ferry_bpf::pinned::remove_pins(dir);
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// A chain that could not be adopted: its NFs still running are killed,
/// its programs leave their devices and its state and keys are removed,
/// so nothing of it lingers unsupervised.
pub fn abandon(socket: &Path, dir: &Path, state: &ChainState) {
    for r in &state.nfs {
        if let Some(fd) = r.process.and_then(persist::find_process) {
            spawn::pidfd_signal(&fd, libc::SIGKILL);
        }
    }
    ChainState::remove(dir, &state.plan.name);
    let pins: Vec<PathBuf> = state.pins.iter().flatten().cloned().collect();
    forget(&pins);
    for nf in &state.plan.nfs {
        let _ = std::fs::remove_file(proto::key_path(socket, &state.plan.name, &nf.name));
    }
    if let Some(dir) = proto::key_path(socket, &state.plan.name, "-").parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Audits a domain until every live thread answered, a few times at most
/// (each waits up to 2 s); then the adoption fails.
const ADOPT_AUDITS: u32 = 5;

impl Chain {
    /// Sets NF `i`'s record and writes the state file.
    pub(super) fn record(&self, i: usize, record: NfRecord) -> Result<()> {
        let mut records = self.records.lock().expect("records lock");
        records[i] = record;
        // A chain being removed (or left) has its last state already: an
        // NF admitted now would be unknown to the next ferryd, so none is.
        if self.stop.load(Ordering::Acquire) {
            bail!("chain {} is stopping", self.plan.name);
        }
        let dir = self.persist.as_ref().ok_or_else(|| anyhow!("not a persistent chain"))?;
        self.state(&records)?.save(dir)
    }

    /// Writes the state file as it stands (after a deploy or an adoption);
    /// nothing without `--persist`.
    pub fn save_state(&self) -> Result<()> {
        let Some(dir) = &self.persist else { return Ok(()) };
        let records = self.records.lock().expect("records lock");
        self.state(&records)?.save(dir)
    }

    fn state(&self, records: &[NfRecord]) -> Result<ChainState> {
        Ok(ChainState {
            version: STATE_VERSION,
            id: self.id,
            nf_ids: self.nf_ids.clone(),
            file: self.file.clone(),
            set: self.set.clone(),
            placement: self.placement.clone(),
            plan: self.plan.clone(),
            creds: self.creds.iter().map(|c| (c.uid, c.gid, c.shown.clone())).collect(),
            leases: self.leases.iter().map(|l| l.uid).collect(),
            domains: self.domains.iter().map(Domain::ids).collect::<Result<_>>()?,
            pins: self.pin_dirs(),
            nfs: records.to_vec(),
            keys: self.keys.iter().map(|k| k.as_ref().map(|k| k.text().to_string())).collect(),
        })
    }

    /// Per port: its pin directory, if pinned.
    pub(super) fn pin_dirs(&self) -> Vec<Option<PathBuf>> {
        self.ports.iter().map(|p| p.as_ref().and_then(|p| p.lock().expect("port lock").pin_dir())).collect()
    }

    /// The chain an earlier ferryd left in `state`, taken over as it runs:
    /// its uids leased again, each domain's memory and eventfds taken from
    /// one of its running NFs, its ports' programs from their pins. Starts
    /// nothing (see [`Chain::start_adopted`]). `state` is as
    /// [`ChainState::from_bytes`] checked it.
    pub fn adopt(state: ChainState, socket: PathBuf, dir: PathBuf, spawn: bool) -> Result<Chain> {
        let plan = state.plan;
        let leases = state
            .leases
            .iter()
            .map(|&uid| users::lease_again(uid, Path::new(users::LEASE_DIR)))
            .collect::<Result<Vec<_>, _>>()?;
        let procs: Vec<Option<Arc<OwnedFd>>> =
            state.nfs.iter().map(|r| r.process.and_then(persist::find_process)).collect();
        let domains = adopt_domains(&plan, &state.domains, &state.nfs, &procs)?;
        let mut ports = Vec::new();
        for (p, pin) in plan.ports.iter().zip(&state.pins) {
            ports.push(match p.nf {
                None => None,
                Some(_) => Some(Mutex::new(Port::adopt(p, pin.as_deref())?)),
            });
        }
        let keys = known_keys(&plan, &state.keys, spawn)?;
        let creds: Vec<Creds> = state.creds.into_iter().map(|(uid, gid, shown)| Creds { uid, gid, shown }).collect();
        let nfs = nf_states(&plan, &domains, &state.nfs, &procs);
        let records = state
            .nfs
            .iter()
            .zip(&procs)
            .map(|(r, p)| NfRecord { process: p.as_ref().and(r.process), ..r.clone() })
            .collect();
        let host_bin =
            if plan.nfs.iter().any(|n| n.spawn && n.kind.is_some()) && spawn { Some(spawn::host_bin()?) } else { None };
        Ok(Chain {
            id: state.id,
            nf_ids: state.nf_ids,
            file: state.file,
            set: state.set,
            socket,
            domains: Arc::new(domains),
            ports,
            classifiers: Mutex::new(Vec::new()),
            taps: Vec::new(),
            nfs,
            creds,
            keys,
            leases,
            host_bin,
            spawn,
            stop: Arc::new(AtomicBool::new(false)),
            nsh: Mutex::new(None),
            copy_links: Mutex::new(Vec::new()),
            offloaded: 0,
            hybrids: Mutex::new(None),
            splits: Vec::new(),
            flow_tables: plan.nfs.iter().map(|_| None).collect(),
            alerts: plan.nfs.iter().map(|_| None).collect(),
            placement: state.placement,
            persist: Some(dir),
            records: Mutex::new(records),
            plan,
        })
    }

    /// Starts an adopted chain: reclaims what the dead held (the last
    /// ferryd's copy links, maybe stopped mid-copy, and NFs that died while no
    /// ferryd watched), starts the copy links again, supervises the running
    /// NFs and starts the dead ones ferryd starts.
    pub fn start_adopted(self: &Arc<Self>) -> Result<()> {
        for (d, dom) in self.domains.iter().enumerate() {
            let mut dead: Vec<u32> = Vec::new();
            for b in &self.plan.copy_links {
                if b.from_domain == d {
                    dead.push(b.from_tid);
                }
                if b.to_domain == d {
                    dead.push(b.to_tid);
                }
            }
            for (nf, st) in self.plan.nfs.iter().zip(&self.nfs) {
                if nf.domain == d && st.lock().expect("nf lock").pidfd.is_none() {
                    dead.extend(nf.threads.iter().map(|t| t.tid));
                }
            }
            let mut tries = 0;
            let report = loop {
                let report = dom.audit(&dead);
                tries += 1;
                if report.unresponsive.is_empty() {
                    break report;
                }
                // Copy links must not start on rings nobody repaired.
                if tries == ADOPT_AUDITS {
                    bail!(
                        "domain {}: threads {:?} did not pause in {ADOPT_AUDITS} audits",
                        report.domain,
                        report.unresponsive
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            tracing::info!(
                "chain {}: adopted domain {}: reclaimed {} frames; {} in pool, {} in rings, {} held, {} lost, {} \
                 duplicated{}",
                self.plan.name,
                report.domain,
                report.reclaimed,
                report.in_pool,
                report.in_rings,
                report.held_by_threads,
                report.lost,
                report.duplicated,
                String::new()
            );
        }
        // A killed ferryd's copy links never let go of their input rings.
        for b in &self.plan.copy_links {
            self.domains[b.from_domain].ring(b.ring).force_detach_consumer();
        }
        self.start_copy_links()?;
        for i in 0..self.plan.nfs.len() {
            let adopted = self.nfs[i].lock().expect("nf lock").pidfd.clone();
            match adopted {
                Some(fd) => {
                    let d = self.clone();
                    std::thread::Builder::new()
                        .name(format!("nf-{}", self.plan.nfs[i].name))
                        .spawn(move || d.supervise(i, Running::Adopted(fd)))?;
                }
                None if self.spawn && self.plan.nfs[i].spawn => Chain::start_nf(self, i)?,
                None => {}
            }
        }
        self.save_state()
    }

    /// An adopted NF's `Rejoin`: checks it is the very process the state
    /// recorded (pid, and the pidfd taken at adoption still running, so
    /// the pid still names it), of the NF's uid, not dumpable, with its key
    /// if ferryd does not start it; then its connection is the NF's.
    pub fn rejoin(&self, stream: &UnixStream, name: &str, key: &str) -> Result<usize> {
        let i = self
            .plan
            .nf_index(name)
            .ok_or_else(|| anyhow!("no NF {} in chain {:?}", proto::echoed(name), self.plan.name))?;
        let (pid, uid, _) = spawn::peer_cred(stream)?;
        let mut st = self.nfs[i].lock().expect("nf lock");
        let alive = st.pidfd.as_ref().is_some_and(|fd| !spawn::pidfd_exited(fd, 0));
        if st.pid != Some(pid) || !alive {
            bail!("pid {pid} is not the running NF {name:?} this ferryd adopted");
        }
        if uid != self.creds[i].uid {
            bail!("peer uid {uid} is not NF {name:?}'s uid {}", self.creds[i].uid);
        }
        if let Some(k) = &self.keys[i] {
            if !k.matches(key) {
                bail!("NF {name:?} rejoined without its key");
            }
        }
        if uid != 0 && spawn::is_dumpable(pid)? {
            bail!("NF {name:?} (pid {pid}) is dumpable");
        }
        if st.conn.is_some() {
            bail!("NF {name:?} has rejoined already");
        }
        st.conn = Some(stream.try_clone().context("keeping the NF's connection")?);
        st.awaiting_rejoin = false;
        tracing::info!("NF {name} rejoined (pid {pid}, uid {uid})");
        Ok(i)
    }

    /// Forgets a rejoin whose answer did not reach the NF.
    pub fn unjoin(&self, i: usize) {
        let mut st = self.nfs[i].lock().expect("nf lock");
        st.conn = None;
        st.awaiting_rejoin = true;
    }

    /// ferryd leaves (`--persist`): its copy links stop, handing on what they
    /// copied, and everything else stays as it is for the next ferryd.
    pub fn leave(&self) {
        {
            // Under the records' lock: no state is being written as it stops.
            let _records = self.records.lock().expect("records lock");
            self.stop.store(true, Ordering::Release);
        }
        for port in self.ports.iter().flatten() {
            port.lock().expect("port lock").keep_pinned();
        }
        for thread in self.copy_links.lock().expect("copy links lock").drain(..) {
            let _ = thread.join();
        }
    }
}

/// Each domain's memory and eventfds, taken from one of its running NFs
/// (`procs`, by NF index, as `records` identify them).
fn adopt_domains(
    plan: &ChainPlan,
    ids: &[persist::DomainIds],
    records: &[NfRecord],
    procs: &[Option<Arc<OwnedFd>>],
) -> Result<Vec<Domain>> {
    let mut domains = Vec::new();
    for (d, dplan) in plan.domains.iter().enumerate() {
        let ids = ids.get(d).ok_or_else(|| anyhow!("no identities of domain {}", dplan.name))?;
        let mut tried = Vec::new();
        let mut found = None;
        for (i, _) in plan.nfs.iter().enumerate().filter(|(_, n)| n.domain == d) {
            let (Some(fd), Some((pid, _))) = (&procs[i], records[i].process) else { continue };
            match persist::harvest(pid, fd, ids).and_then(|h| Domain::adopt(dplan, h)) {
                Ok(dom) => {
                    found = Some(dom);
                    break;
                }
                Err(e) => tried.push(format!("pid {pid}: {e:#}")),
            }
        }
        let dom = found
            .ok_or_else(|| anyhow!("domain {}: no running NF holds its memory ({})", dplan.name, tried.join("; ")))?;
        domains.push(dom);
    }
    Ok(domains)
}

/// The keys of the NFs ferryd does not start, as the state keeps them.
fn known_keys(plan: &ChainPlan, keys: &[Option<String>], spawn: bool) -> Result<Vec<Option<NfKey>>> {
    let mut out = Vec::new();
    for (nf, key) in plan.nfs.iter().zip(keys.iter().chain(std::iter::repeat(&None))) {
        out.push(match (spawn && nf.spawn, key) {
            (true, _) => None,
            (false, Some(k)) => Some(NfKey::known(k)),
            (false, None) => bail!("NF {}: the state holds no key of it", nf.name),
        });
    }
    Ok(out)
}

/// Per NF: a running one is attached to its domain, awaiting its rejoin;
/// a gone one's threads are marked dead, for the first audit to reclaim.
fn nf_states(
    plan: &ChainPlan,
    domains: &[Domain],
    records: &[NfRecord],
    procs: &[Option<Arc<OwnedFd>>],
) -> Vec<Mutex<NfState>> {
    let mut nfs = Vec::new();
    for (i, (nf, r)) in plan.nfs.iter().zip(records).enumerate() {
        let dom = &domains[nf.domain];
        let threads: Vec<(u32, u32)> = nf.threads.iter().map(|t| (t.tid, t.ring)).collect();
        let st = match (&procs[i], r.process) {
            (Some(fd), Some((pid, start))) => {
                dom.attach(&threads, pid, fd.clone(), false);
                NfState {
                    pid: Some(pid),
                    pidfd: Some(fd.clone()),
                    start: Some(start),
                    connected: true,
                    awaiting_rejoin: true,
                    ..NfState::default()
                }
            }
            _ => {
                dom.mark_dead(&threads);
                NfState::default()
            }
        };
        nfs.push(Mutex::new(NfState {
            restarts: r.restarts,
            generation: r.generation,
            counters: r.counters.clone(),
            ..st
        }));
    }
    nfs
}

/// Whether an NF of `kind` exports its flows to a table ferryd makes (a
/// table that does not outlive ferryd).
fn exports_flows(kind: Option<&str>, args: &[String]) -> bool {
    kind.is_some_and(|k| ferry_catalog::fused::exports_flows(k, args))
}
