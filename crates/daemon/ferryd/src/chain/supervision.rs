//! Supervision: starting a chain's NFs (ferryd's own processes and its
//! copy links), watching each until it goes, reclaiming what a dead NF
//! held, restarting it, reloading and stopping them all.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use ferry_chain::proto::{self, Msg, NfReload};

use crate::classify::EdgeClassifier;
use crate::copy_link;
use crate::persist::NfRecord;
use crate::process::signalled;
use crate::spawn;

use super::{adopt, Chain, Running};

impl Chain {
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

    pub(super) fn start_copy_links(&self) -> Result<()> {
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
    pub(super) fn start_nf(daemon: &Arc<Chain>, i: usize) -> Result<()> {
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
    pub(super) fn supervise(&self, i: usize, first: Running) {
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
            if tries % 30 == 0 {
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

    /// Re-reads the files its NFs read and applies them without
    /// restarting anything: the configuration files of its hybrid NFs
    /// (ferryd re-applies the firewalls' nftables rulesets first) and the
    /// rule files of its per-packet NFs (firewall, IPS). It tells each NF
    /// (SIGHUP) to re-read its file, and waits until each says it did: its
    /// `reloads` or `reload_errors` counter moves. A file that does not
    /// parse changes nothing.
    pub fn reload(&self) -> Result<Vec<NfReload>> {
        let (names, mut outcomes) = self.reloading_nfs()?;
        outcomes.extend(self.signal_reload(names));
        Ok(outcomes)
    }

    /// The NFs a reload signals: the hybrid NFs and split NATs (their
    /// files checked first) and the per-packet NFs in processes that read
    /// a rule file; and the outcomes of those it cannot reload (a fused
    /// NF's stages read their files only when the NF starts).
    fn reloading_nfs(&self) -> Result<(Vec<String>, Vec<NfReload>)> {
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
        let file_readers = self.plan.nfs.iter().filter(|n| n.kind.as_deref().is_some_and(ferry_catalog::reloads_file));
        names.extend(file_readers.map(|n| n.name.clone()));
        let fused = self.plan.nfs.iter().filter(|n| n.kind.as_deref() == Some(ferry_catalog::fused::FUSED));
        let unreloaded: Vec<NfReload> = fused
            .filter(|n| {
                ferry_catalog::fused::stages(&n.args)
                    .is_ok_and(|st| st.iter().any(|s| ferry_catalog::reloads_file(s.kind)))
            })
            .map(|n| NfReload { nf: n.name.clone(), outcome: "fused: not reloaded (redeploy the chain)".into() })
            .collect();
        if names.is_empty() && unreloaded.is_empty() {
            bail!(
                "chain {:?} has no NF that reads a configuration file (config=) or rule file in a process",
                self.plan.name
            );
        }
        Ok((names, unreloaded))
    }

    /// Sends each NF of `names` SIGHUP and waits until every thread of it
    /// has answered: its `reloads` and `reload_errors` risen by its thread
    /// count (a thread that backpressure holds answers once it can send).
    fn signal_reload(&self, names: Vec<String>) -> Vec<NfReload> {
        let [applied, failed] = ferry_evnf::types::RELOAD_COUNTERS;
        let mut outcomes = Vec::new();
        let mut waiting = Vec::new();
        for name in names {
            let Some(i) = self.plan.nfs.iter().position(|n| n.name == name) else { continue };
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
                let ok = self.nf_counter(*i, &st, applied).saturating_sub(*ok0);
                let refused = self.nf_counter(*i, &st, failed).saturating_sub(*err0);
                let outcome = match (ok, refused) {
                    _ if ok + refused < self.plan.nfs[*i].threads.len() as u64 => return true,
                    (_, 0) => "applied",
                    (0, _) => "failed",
                    _ => "partly applied",
                };
                outcomes.push(NfReload { nf: name.clone(), outcome: outcome.into() });
                false
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        outcomes.extend(waiting.into_iter().map(|(nf, _, _)| NfReload { nf, outcome: "no answer".into() }));
        outcomes
    }
}
