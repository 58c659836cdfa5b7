//! One deployed chain: its domains, ports, kernel hops and copy links;
//! starting, admitting and watching its NFs; recovery after one dies.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_bpf::abi::VERDICT_NAMES;
use ferry_bpf::flow_table::FlowTable;
use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::{
    self, ChainSummary, DomainStatus, FdRole, Msg, NfReload, NfStatus, PortStatus, RingStatus, Status, Welcome,
};
use ferry_chain::shm::{self, COUNTERS};
use ferry_nf::flow_monitor::MAX_FLOWS;
use ferry_place::{HybridNf, HybridPath, PostPath, Then, XdpPath};
use ferry_xsk::XskSocket;

use crate::classify::EdgeClassifier;
use crate::copy_link;
use crate::domain::Domain;
use crate::fastpath::{FastPathEnd, FastPathIds};
use crate::hybrid::Hybrids;
use crate::keys::NfKey;
use crate::nsh::{NshInstall, NshSetup};
use crate::persist::NfRecord;
use crate::ports::{Port, PortParts, PostParts};
use crate::process::signalled;
use crate::spawn;
use crate::tap::Tap;
use crate::users::{self, Creds, Lease, UidRange};

mod adopt;
pub use adopt::abandon;

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
    /// The chain file it came from.
    pub file: PathBuf,
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

/// An XDP program's verdict counters as (verdict, packets, bytes).
fn verdict_list(v: &ferry_bpf::Verdicts) -> Vec<(String, u64, u64)> {
    VERDICT_NAMES.iter().enumerate().map(|(i, name)| (name.to_string(), v.packets[i], v.bytes[i])).collect()
}

/// A NF split over the post-server part in front of a port (its fast
/// path) and a process that gets the misses on the miss port.
struct Split {
    nf: String,
    port: usize,
    miss: usize,
}

/// What a chain is set up from.
pub struct ChainSetup {
    pub id: u32,
    pub nf_ids: Vec<u32>,
    pub file: PathBuf,
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
    /// Creates the chain's domains, ports, kernel hops, uids and keys;
    /// starts nothing yet.
    pub fn setup(c: ChainSetup) -> Result<Chain> {
        let ChainSetup {
            id,
            nf_ids,
            file,
            mut plan,
            socket,
            spawn,
            uids,
            xdp,
            post,
            hybrid,
            ahead_ids,
            whole,
            placement,
            persist,
            nsh,
        } = c;
        if persist.is_some() {
            adopt::check_persistable(&plan, &xdp, &post, &hybrid, &whole, nsh.is_some())?;
        }
        let (creds, leases) = users::resolve(&plan, uids)?;
        for (d, dom) in plan.domains.iter().enumerate() {
            let runs_as: Vec<&str> =
                plan.nfs.iter().zip(&creds).filter(|(n, _)| n.domain == d).map(|(_, c)| c.shown.as_str()).collect();
            tracing::info!("chain {}: domain {} runs as {runs_as:?}", plan.name, dom.name);
        }
        let domains = Arc::new(plan.domains.iter().map(Domain::create).collect::<Result<Vec<_>>>()?);
        // Split NFs: (name, its port, its miss port), by index.
        let splits: Vec<Split> = post
            .iter()
            .filter_map(|(p, _)| {
                let at = |name: &str| plan.ports.iter().position(|q| q.name == name);
                Some(Split { nf: p.split.clone()?, port: at(&p.port)?, miss: at(&p.miss_port()?)? })
            })
            .collect();
        // Classifiers first: they make their entries' devices, which the
        // entries' ports bind to.
        let mut classifiers = Vec::new();
        for c in 0..plan.ports.len() {
            if plan.ports[c].classify.is_some() {
                let name = plan.ports[c].name.clone();
                classifiers.push(EdgeClassifier::open(&mut plan, c).with_context(|| format!("port {name}"))?);
            }
        }
        // NSH attachments next: the same.
        let nsh = match &nsh {
            Some(s) => Some(
                NshInstall::open(&s.fabric, &plan.name.clone(), &s.part, &s.peers, &s.macs, Some(&mut plan))
                    .context("this host's part of the service path")?,
            ),
            None => None,
        };
        let mut ports: Vec<Option<Mutex<Port>>> = Vec::new();
        for (index, p) in plan.ports.iter().enumerate() {
            let fast = match xdp.iter().find(|(path, _)| path.port == p.name) {
                Some((path, ids)) => {
                    let then = match &path.then {
                        Then::Nf(nf) => {
                            let i = plan.nfs.iter().position(|n| &n.name == nf).expect("the placed chain has it");
                            FastPathEnd::Nf(nf_ids[i])
                        }
                        Then::Port(out) => {
                            let out = plan.ports.iter().find(|q| &q.name == out).expect("the placed chain has it");
                            FastPathEnd::Device(Port::ifindex(out).with_context(|| format!("port {}", out.name))?)
                        }
                    };
                    Some((path.nfs.as_slice(), FastPathIds { chain: id, nfs: ids, then }))
                }
                None => None,
            };
            let post = post.iter().find(|(path, _)| path.port == p.name).map(|(path, ids)| PostParts {
                nfs: &path.nfs,
                chain: id,
                ids,
                split: path.split.as_deref(),
            });
            let hybrid = hybrid.iter().any(|h| h.port == p.name);
            // A split NF's miss port: the loop device in front of its port,
            // which is opened before it (the placement appends it).
            if let Some(s) = splits.iter().find(|s| s.miss == index) {
                let of = ports.get(s.port).and_then(Option::as_ref);
                let of = of.ok_or_else(|| anyhow!("port {}: its loop device is not open", p.name))?;
                let port = Port::open_miss(p, &of.lock().expect("port lock"))?;
                ports.push(Some(Mutex::new(port)));
                continue;
            }
            let pin = persist.is_some().then(|| adopt::pin_dir(id, index));
            ports.push(match (p.nf, &fast) {
                (None, None) => None,
                _ => Some(Mutex::new(
                    Port::open(p, PortParts { fast, post, hybrid, pin: pin.as_deref() })
                        .with_context(|| format!("port {}", p.name))?,
                )),
            });
        }
        let offloaded = xdp.iter().map(|(path, _)| path.nfs.len()).sum::<usize>()
            + post.iter().map(|(p, _)| p.nfs.len()).sum::<usize>()
            + hybrid.iter().map(|h| h.before.len()).sum::<usize>()
            - splits.len();
        let hybrids = Mutex::new(
            Hybrids::setup(id, &plan, (&hybrid, &ahead_ids), &whole, |name| {
                plan.nfs.iter().position(|n| n.name == name).map(|i| nf_ids[i])
            })
            .context("hybrid NFs")?,
        );
        let mut flow_tables = Vec::new();
        for nf in &plan.nfs {
            flow_tables.push(match nf.kind.as_deref() {
                // Each thread counts its own flows (its index is their key's
                // config), as many as the NF's table holds.
                Some("flow-monitor") => Some(
                    FlowTable::create(MAX_FLOWS as u32 * nf.threads.len() as u32)
                        .with_context(|| format!("NF {}: its flow table", nf.name))?,
                ),
                _ => None,
            });
        }
        let taps = plan.kernel.iter().map(Tap::create).collect::<Result<Vec<_>>>()?;
        let nfs = plan.nfs.iter().map(|_| Mutex::new(NfState::default())).collect();
        let records = Mutex::new(plan.nfs.iter().map(|_| NfRecord::default()).collect());
        // Keys last: nothing after them can fail and leave them behind.
        let mut keys = Vec::new();
        for (nf, c) in plan.nfs.iter().zip(&creds) {
            keys.push(if spawn && nf.spawn {
                None
            } else {
                Some(NfKey::issue(&proto::key_path(&socket, &plan.name, &nf.name), c.uid, c.gid)?)
            });
        }

        let host_bin =
            if plan.nfs.iter().any(|n| n.spawn && n.kind.is_some()) && spawn { Some(spawn::host_bin()?) } else { None };
        Ok(Chain {
            id,
            nf_ids,
            file,
            plan,
            socket,
            domains,
            ports,
            classifiers: Mutex::new(classifiers),
            taps,
            nfs,
            creds,
            keys,
            leases,
            host_bin,
            spawn,
            stop: Arc::new(AtomicBool::new(false)),
            nsh: Mutex::new(nsh),
            copy_links: Mutex::new(Vec::new()),
            offloaded,
            hybrids,
            splits,
            flow_tables,
            placement,
            persist,
            records,
        })
    }

    /// Starts the copy links and the NFs ferryd starts.
    pub fn start(self: &Arc<Self>) -> Result<()> {
        self.start_copy_links()?;
        for i in 0..self.plan.nfs.len() {
            if self.spawn && self.plan.nfs[i].spawn {
                Chain::start_nf(self, i)?;
            }
        }
        Ok(())
    }

    fn start_copy_links(&self) -> Result<()> {
        for b in &self.plan.copy_links {
            let name = format!("copy-{}-{}", self.plan.nfs[b.from_nf].name, self.plan.nfs[b.to_nf].name);
            let thread = copy_link::start(self.domains.clone(), self.stop.clone(), b, name)?;
            self.copy_links.lock().expect("copy links lock").push(thread);
        }
        Ok(())
    }

    /// Stops the chain: its NFs (SIGTERM, then SIGKILL after `grace`) and
    /// copy links; returns once every NF connection is gone. What it holds
    /// (memory, sockets, XDP programs, TAPs, uids) goes with the last
    /// reference.
    pub fn stop(&self, grace: Duration) {
        // Forgotten first: a ferryd that dies while this one stops the
        // chain must not bring it back. Under the records' lock, so no
        // state written meanwhile brings it back either.
        let pins: Vec<PathBuf> = self.pin_dirs().into_iter().flatten().collect();
        {
            let _records = self.records.lock().expect("records lock");
            self.stop.store(true, Ordering::Release);
            if let Some(dir) = &self.persist {
                crate::persist::ChainState::remove(dir, &self.plan.name);
            }
        }
        self.stop_nfs();
        let start = Instant::now();
        let mut killed = false;
        loop {
            let alive: Vec<(Option<Arc<OwnedFd>>, Option<u32>)> = self
                .nfs
                .iter()
                .map(|n| {
                    let st = n.lock().expect("nf lock");
                    (st.pidfd.clone(), st.child)
                })
                .filter(|(fd, child)| fd.is_some() || child.is_some())
                .collect();
            if alive.is_empty() {
                break;
            }
            if start.elapsed() >= grace && !killed {
                for (fd, child) in &alive {
                    if let Some(fd) = fd {
                        spawn::pidfd_signal(fd, libc::SIGKILL);
                    }
                    if let Some(pid) = child {
                        // SAFETY: an unreaped child of ours: its pid is its own.
                        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                    }
                }
                killed = true;
            }
            // A process in uninterruptible sleep outlives even SIGKILL for a
            // while: give up waiting rather than hold up every other chain.
            if start.elapsed() >= grace + Duration::from_secs(10) {
                tracing::info!(
                    "chain {}: {} NF processes would not exit; going on without them",
                    self.plan.name,
                    alive.len()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for (nf, key) in self.plan.nfs.iter().zip(&self.keys) {
            if key.is_some() {
                let _ = std::fs::remove_file(proto::key_path(&self.socket, &self.plan.name, &nf.name));
            }
        }
        if let Some(dir) = proto::key_path(&self.socket, &self.plan.name, "-").parent() {
            let _ = std::fs::remove_dir(dir);
        }
        // The XDP programs leave the devices now, not when the last thread
        // holding the chain lets go of it: a redeploy may attach at once.
        // Classifiers first: nothing is redirected into an entry whose
        // port lost its program (its frames would reach the edge's stack).
        let mut classifiers = self.classifiers.lock().expect("classifiers lock");
        classifiers.iter_mut().for_each(EdgeClassifier::detach);
        for port in self.ports.iter().flatten() {
            port.lock().expect("port lock").detach();
        }
        classifiers.clear();
        drop(classifiers);
        *self.hybrids.lock().expect("hybrids lock") = None;
        *self.nsh.lock().expect("nsh lock") = None;
        adopt::forget(&pins);
    }

    /// Starts NF `i` under a supervisor thread that restarts it after it
    /// dies, once its frames are reclaimed. The supervisor starts every
    /// process of the NF itself, the first one too: PR_SET_PDEATHSIG fires
    /// when the parent *thread* exits, and the thread that calls this (a
    /// deploy's admin connection) may end long before the NF should.
    fn start_nf(daemon: &Arc<Chain>, i: usize) -> Result<()> {
        let d = daemon.clone();
        let (started, first_result) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new().name(format!("nf-{}", d.plan.nfs[i].name)).spawn(move || {
            let first = match d.spawn_child(i) {
                Ok(c) => {
                    let _ = started.send(Ok(()));
                    c
                }
                Err(e) => {
                    let _ = started.send(Err(format!("{e:#}")));
                    return;
                }
            };
            d.supervise(i, Running::Child(first));
        })?;
        first_result
            .recv()
            .map_err(|_| anyhow!("NF {}'s supervisor ended", daemon.plan.nfs[i].name))?
            .map_err(|e| anyhow!(e))
    }

    /// Waits for NF `i`'s process to exit; once its frames are reclaimed,
    /// starts it again if ferryd starts it and it restarts; and so on.
    fn supervise(&self, i: usize, first: Running) {
        let name = self.plan.nfs[i].name.clone();
        let mut running = Some(first);
        while let Some(r) = running.take() {
            match r {
                Running::Child(mut c) => {
                    let pid = c.id();
                    tracing::info!("started NF {name} (pid {pid}, {})", self.creds[i].shown);
                    if let Err(e) = spawn::wait_exited(pid) {
                        tracing::warn!("waiting for NF {name} (pid {pid}): {e}");
                    }
                    // Forget the pid before reaping frees it for reuse.
                    self.nfs[i].lock().expect("nf lock").child = None;
                    let status = c.wait();
                    tracing::info!("NF {name} exited: {status:?}");
                }
                Running::Adopted(fd) => {
                    while !spawn::pidfd_exited(&fd, 1000) {}
                    tracing::info!("NF {name} (adopted) exited");
                    // Its connection's handler may reclaim it too, if it
                    // rejoined: whichever comes first does, once.
                    self.nf_gone(i, &fd);
                }
            }
            // Its connection handler reclaims its frames and resets its
            // rings; a new process before that would find them taken.
            let waited = Instant::now();
            let mut told = false;
            while self.nfs[i].lock().expect("nf lock").connected {
                if self.stop.load(Ordering::Acquire) || signalled() {
                    return;
                }
                if !told && waited.elapsed() > Duration::from_secs(5) {
                    tracing::warn!("NF {name}: still waiting to reclaim its frames before restarting it");
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let starts_it = self.spawn && self.plan.nfs[i].spawn && self.plan.nfs[i].restart;
            if self.stop.load(Ordering::Acquire) || signalled() || !starts_it {
                return;
            }
            let restarts = {
                let mut st = self.nfs[i].lock().expect("nf lock");
                st.restarts += 1;
                st.restarts
            };
            // Back off a little more for an NF that keeps dying.
            std::thread::sleep(Duration::from_millis(50 * restarts.min(20) as u64));
            match self.spawn_child(i) {
                Ok(c) => running = Some(Running::Child(c)),
                Err(e) => tracing::warn!("restarting NF {name}: {e:#}"),
            }
        }
    }

    /// Starts NF `i`'s process and records its pid, under the NF's lock so
    /// that its hello (which takes the lock) finds the pid recorded.
    fn spawn_child(&self, i: usize) -> Result<std::process::Child> {
        let ferry = self.host_bin.clone().unwrap_or_default();
        let mut st = self.nfs[i].lock().expect("nf lock");
        // Checked under the lock `stop_nfs` takes: a chain being removed
        // starts no process its stop would miss.
        if self.stop.load(Ordering::Acquire) {
            bail!("chain {} is stopping", self.plan.name);
        }
        let log = self.persist.as_ref().map(|dir| adopt::nf_log(dir, &self.plan.name, &self.plan.nfs[i].name));
        let child =
            spawn::spawn_nf(&self.plan.name, &self.plan.nfs[i], &self.creds[i], &self.socket, &ferry, log.as_deref())?;
        st.child = Some(child.id());
        Ok(child)
    }

    /// Tells every NF to stop: admitted ones by closing their connection
    /// (the SDK stops on EOF), and every NF process with SIGTERM too (a
    /// parallel NF drains on it; one that has not said hello yet stops).
    pub fn stop_nfs(&self) {
        // Said, not just closed: an NF of a persistent ferryd takes a bare
        // EOF for ferryd going away, and waits for the next. Said outside
        // the NFs' locks, and never waiting long for an NF that does not
        // read.
        let conns: Vec<UnixStream> = self
            .nfs
            .iter()
            .filter_map(|st| st.lock().expect("nf lock").conn.as_ref().and_then(|c| c.try_clone().ok()))
            .collect();
        for c in &conns {
            let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = proto::send(c, &Msg::Shutdown, &[]);
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        for st in &self.nfs {
            let st = st.lock().expect("nf lock");
            if let Some(fd) = &st.pidfd {
                spawn::pidfd_signal(fd, libc::SIGTERM);
            }
            if let Some(pid) = st.child {
                // SAFETY: an unreaped child of ours: its pid is its own.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
        }
    }

    /// Checks who an NF is, creates its sockets and sends it everything it
    /// needs.
    pub fn admit(
        &self,
        stream: &UnixStream,
        name: &str,
        _claimed_pid: u32,
        counters: Vec<String>,
        key: &str,
    ) -> Result<usize> {
        let i = self
            .plan
            .nf_index(name)
            .ok_or_else(|| anyhow!("no NF {} in chain {:?}", proto::echoed(name), self.plan.name))?;
        let nf = &self.plan.nfs[i];
        let (pid, uid, _) = spawn::peer_cred(stream)?;
        let want = &self.creds[i];
        if uid != want.uid {
            bail!("peer uid {uid} is not NF {name:?}'s user ({}, uid {})", want.shown, want.uid);
        }
        let mut st = self.nfs[i].lock().expect("nf lock");
        // Who it is. A uid is not enough: any process of that user could
        // say hello while the NF is down and take its memory.
        match &self.keys[i] {
            None if st.child != Some(pid) => bail!(
                "pid {pid} is not the process ferryd started as NF {name:?} ({}): ferryd starts this NF itself",
                st.child.map_or("none is running".to_string(), |c| format!("that is pid {c}"))
            ),
            Some(k) if !k.matches(key) => bail!(
                "NF {name:?} is started outside ferryd, so its hello carries the key in {} (readable by its user \
                 only); this one {}",
                proto::key_path(&self.socket, &self.plan.name, name).display(),
                if key.is_empty() { "has none" } else { "is wrong" }
            ),
            _ => {}
        }
        // A dumpable NF would expose the domain's memory to every process of
        // its uid through /proc (root sees everything anyway).
        if uid != 0 && spawn::is_dumpable(pid)? {
            bail!(
                "NF {name:?} (pid {pid}) is dumpable, so any process of uid {uid} could open its fds and memory: \
                 an NF calls prctl(PR_SET_DUMPABLE, 0) before hello (ferry's SDKs do)"
            );
        }
        if counters.len() > shm::MAX_NF_COUNTERS {
            bail!("{} NF counters, at most {}", counters.len(), shm::MAX_NF_COUNTERS);
        }
        // Counter names are shown by status and logs: bounded like echoes.
        if let Some(long) = counters.iter().find(|c| c.chars().count() > proto::MAX_ECHOED) {
            bail!("counter name {} is over {} characters", proto::echoed(long), proto::MAX_ECHOED);
        }
        if st.connected {
            bail!("NF {name:?} is already connected (pid {:?})", st.pid);
        }
        let dom = &self.domains[nf.domain];
        let mut sockets: Vec<(FdRole, XskSocket)> = Vec::new();
        for t in &nf.threads {
            for &p in &t.ports {
                let port = self.ports[p].as_ref().ok_or_else(|| anyhow!("port {p} not open"))?;
                let sock = port.lock().expect("port lock").socket(&dom.umem, t.index)?;
                if let Some(h) = self.hybrids.lock().expect("hybrids lock").as_mut() {
                    h.register_socket(name, &self.plan.ports[p].name, t.index, &sock)?;
                }
                if let Some(s) = self.splits.iter().find(|s| s.miss == p) {
                    let of = self.ports[s.port].as_ref().ok_or_else(|| anyhow!("port {} not open", s.port))?;
                    of.lock().expect("port lock").register_miss_socket(t.index, &sock)?;
                }
                sockets.push((FdRole::Xsk { thread: t.index, port: p }, sock));
            }
        }
        let mut roles = vec![FdRole::Umem, FdRole::Region];
        let mut fds: Vec<RawFd> = vec![dom.umem.as_fd().as_raw_fd(), dom.region.fd().as_raw_fd()];
        for r in 0..dom.plan.rings {
            roles.push(FdRole::RingData(r));
            fds.push(dom.data[r as usize].as_fd().as_raw_fd());
            roles.push(FdRole::RingRoom(r));
            fds.push(dom.room[r as usize].as_fd().as_raw_fd());
        }
        for (role, s) in &sockets {
            roles.push(role.clone());
            fds.push(s.as_raw_fd());
        }
        for o in &nf.outs {
            if let ferry_chain::plan::OutLink::Kernel { kernel } = o {
                roles.push(FdRole::Tap(*kernel));
                fds.push(self.taps[*kernel].fd.as_raw_fd());
            }
        }
        // A hybrid NF's control plane: its fast path's maps.
        let maps =
            match (self.hybrids.lock().expect("hybrids lock").as_ref(), self.splits.iter().find(|s| s.nf == name)) {
                (_, Some(s)) => {
                    let port = self.ports[s.port].as_ref().ok_or_else(|| anyhow!("port {} not open", s.port))?;
                    let kind = nf.kind.as_deref().unwrap_or_default();
                    let t = ferry_evnf::types::find(kind).ok_or_else(|| anyhow!("{kind}: not a hybrid type"))?;
                    let fds = port.lock().expect("port lock").split_map_fds(&ferry_evnf::types::control_maps(t))?;
                    fds
                }
                (Some(h), None) => h.map_fds(name)?,
                (None, None) => Vec::new(),
            };
        for (map, fd) in &maps {
            roles.push(FdRole::Map(map.to_string()));
            fds.push(fd.as_raw_fd());
        }
        let flow_table = self.flow_tables[i].as_ref().map(FlowTable::fd).transpose()?;
        if let Some(fd) = &flow_table {
            roles.push(FdRole::Map(ferry_bpf::flow_table::MAP_NAME.to_string()));
            fds.push(fd.as_raw_fd());
        }
        let pidfd = Arc::new(spawn::pidfd_open(pid).with_context(|| format!("pidfd of NF pid {pid}"))?);
        let start = crate::persist::start_time(pid).ok_or_else(|| anyhow!("NF pid {pid} is gone"))?;
        st.generation += 1;
        // The next ferryd must know the process before it holds anything
        // that outlives this one.
        if self.persist.is_some() {
            let record = NfRecord {
                process: Some((pid, start)),
                generation: st.generation,
                restarts: st.restarts,
                counters: counters.clone(),
            };
            if let Err(e) = self.record(i, record) {
                st.generation -= 1;
                return Err(e);
            }
        }
        let threads: Vec<(u32, u32)> = nf.threads.iter().map(|t| (t.tid, t.ring)).collect();
        dom.attach(&threads, pid, pidfd.clone(), true);
        let welcome = Welcome {
            chain: self.plan.name.clone(),
            nf_index: i,
            nf: nf.clone(),
            domain: dom.plan.clone(),
            fds: roles,
            port_rings: self.plan.ports.iter().map(|p| p.rings).collect(),
            port_rx: self.plan.ports.iter().map(|p| p.rx).collect(),
            generation: st.generation,
            outlives_ferryd: self.persist.is_some(),
        };
        if let Err(e) = proto::send(stream, &Msg::Welcome(Box::new(welcome)), &fds) {
            for t in &nf.threads {
                dom.block(t.tid).set(shm::T_STATE, shm::STATE_DEAD);
            }
            return Err(e.into());
        }
        // Our copies of the sockets close here: the NF holds the only ones,
        // so its death releases them.
        drop(sockets);
        st.connected = true;
        st.pid = Some(pid);
        st.conn = stream.try_clone().ok();
        st.pidfd = Some(pidfd);
        st.start = Some(start);
        st.counters = counters;
        tracing::info!("NF {name} connected (pid {pid}, uid {uid})");
        Ok(i)
    }

    /// Waits for an admitted NF's connection to close, then recovers.
    pub fn nf_lifetime(&self, stream: &UnixStream, i: usize) {
        let pidfd = self.nfs[i].lock().expect("nf lock").pidfd.clone();
        // An NF that keeps talking without reading must not block this
        // thread in a reply: then its connection's end would go unseen.
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        while proto::recv(stream).is_ok() {
            let m = Msg::Error { message: "an NF sends nothing after hello".into() };
            let _ = proto::send(stream, &m, &[]);
        }
        if let Some(fd) = pidfd {
            self.nf_gone(i, &fd);
        }
    }

    /// The NF's connection closed: make sure the process is gone, then
    /// reclaim every frame it held or had queued.
    ///
    /// For the process of `gone` only, and once: its connection's handler
    /// and an adopted NF's supervisor may both call it, and a call for a
    /// process that was already reclaimed (and maybe followed by a new one)
    /// does nothing.
    fn nf_gone(&self, i: usize, gone: &Arc<OwnedFd>) {
        let nf = &self.plan.nfs[i];
        let (pid, pidfd) = {
            let mut st = self.nfs[i].lock().expect("nf lock");
            if st.reclaiming || !st.pidfd.as_ref().is_some_and(|fd| Arc::ptr_eq(fd, gone)) {
                return;
            }
            st.reclaiming = true;
            (st.pid, st.pidfd.clone())
        };
        if let (Some(pid), Some(fd)) = (pid, pidfd) {
            // Wait for it to exit: its frames cannot be reclaimed while it
            // might touch them. One that closed its socket but lives on is
            // ended after 200 ms; one that outlives SIGKILL (uninterruptible
            // sleep) is waited for, as long as it takes.
            let start = Instant::now();
            let (mut killed, mut told) = (false, false);
            while !spawn::pidfd_exited(&fd, 50) {
                if !killed && start.elapsed() > Duration::from_millis(200) {
                    spawn::pidfd_signal(&fd, libc::SIGKILL);
                    killed = true;
                }
                if !told && start.elapsed() > Duration::from_secs(5) {
                    tracing::info!("NF {} (pid {pid}) will not die yet; its frames stay out until it does", nf.name);
                    told = true;
                }
            }
        }
        let dom = &self.domains[nf.domain];
        let tids: Vec<u32> = nf.threads.iter().map(|t| t.tid).collect();
        // The NF may restart only once its frames are back and its rings
        // reset, or the new process would find its ring still attached.
        // An audit that a live thread did not answer (stopped, or off its
        // CPU) reclaimed nothing, so try again until one did.
        let mut tries = 0u64;
        let report = loop {
            let report = dom.audit(&tids);
            if report.unresponsive.is_empty() || self.stop.load(Ordering::Acquire) || signalled() {
                break report;
            }
            // Said once, then now and then: a stopped NF can hold this up
            // for as long as it stays stopped.
            if tries.is_multiple_of(30) {
                tracing::info!(
                    "NF {} gone, but threads {:?} of domain {} did not pause: its frames stay out until they do",
                    nf.name,
                    report.unresponsive,
                    report.domain
                );
            }
            tries += 1;
            std::thread::sleep(Duration::from_millis(100));
        };
        tracing::info!(
            "NF {} gone: reclaimed {} frames (dead threads {:?}); domain {}: {} in pool, {} in rings, {} held, {} lost, {} duplicated",
            nf.name,
            report.reclaimed,
            report.dead,
            report.domain,
            report.in_pool,
            report.in_rings,
            report.held_by_threads,
            report.lost,
            report.duplicated
        );
        let mut st = self.nfs[i].lock().expect("nf lock");
        st.connected = false;
        st.pid = None;
        st.conn = None;
        st.pidfd = None;
        st.start = None;
        st.reclaiming = false;
        st.awaiting_rejoin = false;
        if self.persist.is_some() && !self.stop.load(Ordering::Acquire) {
            let record = NfRecord { process: None, ..self.records.lock().expect("records lock")[i].clone() };
            if let Err(e) = self.record(i, record) {
                tracing::info!("NF {}: {e:#}", nf.name);
            }
        }
    }

    /// Re-reads the configuration files its hybrid NFs name and applies
    /// them without restarting anything: ferryd re-applies the firewalls'
    /// nftables rulesets, then tells each NF's control plane (SIGHUP) to
    /// re-read its file and write its tables, and waits until each says it
    /// did: its `reloads` or `reload_errors` counter moves. A file that
    /// does not parse changes nothing.
    pub fn reload(&self) -> Result<Vec<NfReload>> {
        // The NATs split over a post-server part and a process: their
        // files checked first, like the hybrid NFs'.
        let mut split_names = Vec::new();
        for split in &self.splits {
            let nf = self.plan.nfs.iter().find(|n| n.name == split.nf).ok_or_else(|| anyhow!("no NF {}", split.nf))?;
            let kind = nf.kind.as_deref().unwrap_or_default();
            let values = ferry_catalog::Values::of(kind, &nf.args)?;
            let config = std::path::Path::new(values.text("config").unwrap_or_default());
            ferry_evnf::chained::config(kind, config).map_err(|e| anyhow!("NF {}: {e}", nf.name))?;
            split_names.push(nf.name.clone());
        }
        let mut names = match self.hybrids.lock().expect("hybrids lock").as_mut() {
            Some(h) => h.reload()?,
            None => Vec::new(),
        };
        names.extend(split_names);
        if names.is_empty() {
            bail!("chain {:?} has no NF that reads a configuration file (config=)", self.plan.name);
        }
        let [applied, failed] = ferry_evnf::types::RELOAD_COUNTERS;
        let mut outcomes = Vec::new();
        let mut waiting = Vec::new();
        for name in names {
            let i = self.plan.nfs.iter().position(|n| n.name == name).ok_or_else(|| anyhow!("no NF {name}"))?;
            let st = self.nfs[i].lock().expect("nf lock");
            match st.pidfd.as_ref().filter(|_| st.connected) {
                Some(fd) => {
                    let before = (self.nf_counter(i, &st, applied), self.nf_counter(i, &st, failed));
                    spawn::pidfd_signal(fd, libc::SIGHUP);
                    waiting.push((name, i, before));
                }
                None => outcomes.push(NfReload { nf: name, outcome: "not running".into() }),
            }
        }
        // A control plane wakes every 100 ms; ten seconds is a guard
        // against one that is stopped or hung, not a wait for a slow one.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !waiting.is_empty() && std::time::Instant::now() < deadline {
            waiting.retain(|(name, i, (ok0, err0))| {
                let st = self.nfs[*i].lock().expect("nf lock");
                let outcome = if self.nf_counter(*i, &st, applied) > *ok0 {
                    "applied"
                } else if self.nf_counter(*i, &st, failed) > *err0 {
                    "failed"
                } else {
                    return true;
                };
                outcomes.push(NfReload { nf: name.clone(), outcome: outcome.into() });
                false
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        outcomes.extend(waiting.into_iter().map(|(nf, _, _)| NfReload { nf, outcome: "no answer".into() }));
        Ok(outcomes)
    }

    /// NF `i`'s own counter `name`, summed over its threads (0 if it has
    /// none of that name).
    fn nf_counter(&self, i: usize, st: &NfState, name: &str) -> u64 {
        let Some(k) = st.counters.iter().position(|c| c == name) else { return 0 };
        let dom = &self.domains[self.plan.nfs[i].domain];
        self.plan.nfs[i].threads.iter().map(|t| dom.block(t.tid).nf_counter(k).load(Ordering::Relaxed)).sum()
    }

    pub fn status(&self) -> Status {
        let mut s = Status { chain: self.plan.name.clone(), id: self.id, ..Default::default() };
        for (i, nf) in self.plan.nfs.iter().enumerate() {
            let st = self.nfs[i].lock().expect("nf lock");
            let dom = &self.domains[nf.domain];
            let threads = nf
                .threads
                .iter()
                .map(|t| {
                    let b = dom.block(t.tid);
                    let mut v: Vec<(String, u64)> =
                        COUNTERS.iter().enumerate().map(|(k, n)| (n.to_string(), b.counter(k))).collect();
                    for (k, n) in st.counters.iter().enumerate() {
                        v.push((n.clone(), b.nf_counter(k).load(Ordering::Relaxed)));
                    }
                    v
                })
                .collect();
            let rings = nf
                .threads
                .iter()
                .map(|t| {
                    let ring = dom.ring(t.ring);
                    let loops = dom.block(t.tid).get(shm::T_LOOPS);
                    RingStatus { depth: ring.fill_level(), capacity: ring.capacity(), loops }
                })
                .collect();
            s.nfs.push(NfStatus {
                name: nf.name.clone(),
                id: self.nf_ids[i],
                domain: dom.plan.name.clone(),
                pid: st.pid,
                uid: Some(self.creds[i].uid),
                connected: st.connected,
                restarts: st.restarts,
                awaiting_rejoin: st.awaiting_rejoin,
                threads,
                rings,
                cpu_seconds: st.pid.and_then(spawn::cpu_seconds),
                poll: nf.poll,
                ..Default::default()
            });
            if let Some(table) = &self.flow_tables[i] {
                let n = s.nfs.last_mut().expect("just pushed");
                (n.flows_total, n.flows) = crate::fastpath::flow_statuses(table.flows());
            }
        }
        for d in self.domains.iter() {
            let ctl = d.control.as_slice();
            s.domains.push(DomainStatus {
                name: d.plan.name.clone(),
                tenant: d.plan.tenant.clone(),
                frames_total: d.pool.frames_total(),
                in_pool: d.pool.available(),
                reclaimed: ctl[shm::RECLAIMED].load(Ordering::Relaxed),
                audits: ctl[shm::AUDITS].load(Ordering::Relaxed),
                lost: ctl[shm::LOST].load(Ordering::Relaxed),
                duplicated: ctl[shm::DUPLICATED].load(Ordering::Relaxed),
            });
        }
        for port in self.ports.iter().flatten() {
            let port = port.lock().expect("port lock");
            s.offloaded.extend(port.offloaded());
            if let Some(v) = port.verdicts() {
                s.ports.push(PortStatus { name: port.plan.name.clone(), verdicts: verdict_list(&v), classified: None });
            }
        }
        for c in self.classifiers.lock().expect("classifiers lock").iter() {
            let verdicts = verdict_list(&c.verdicts().unwrap_or_default());
            s.ports.push(PortStatus { name: c.port.clone(), verdicts, classified: Some(c.status()) });
        }
        if let Some(h) = self.hybrids.lock().expect("hybrids lock").as_ref() {
            s.offloaded.extend(h.offloaded());
        }
        if let Some(n) = self.nsh.lock().expect("nsh lock").as_ref() {
            s.nsh = n.counters();
        }
        s
    }

    /// The hosts its part of a service path sends to.
    pub fn nsh_next_hosts(&self) -> Vec<ferry_chain::hosts::HostSpec> {
        self.nsh.lock().expect("nsh lock").as_ref().map(NshInstall::next_hosts).unwrap_or_default()
    }

    /// See [`NshInstall::set_reachable`].
    pub fn nsh_set_reachable(&self, host: &str, up: bool) -> bool {
        self.nsh.lock().expect("nsh lock").as_mut().is_some_and(|n| n.set_reachable(host, up))
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
