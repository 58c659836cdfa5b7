//! The daemon: sets a chain up, serves its Unix socket, starts and watches
//! NFs, recovers after an NF dies.

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::{self, DomainStatus, FdRole, Msg, NfStatus, ProtoError, Status, Welcome};
use ferry_chain::shm::{self, COUNTERS};
use ferry_xsk::XskSocket;

use crate::bridge;
use crate::domain::Domain;
use crate::keys::NfKey;
use crate::ports::{Port, XSK_RINGS};
use crate::spawn;
use crate::tap::Tap;
use crate::users::{self, Creds, Lease, UidRange};

/// What `ferryd` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    pub chain: PathBuf,
    pub socket: Option<PathBuf>,
    /// Start the NFs marked `spawn: true` (default).
    pub spawn: bool,
    /// Where domains that name no user get their uids.
    pub uids: UidRange,
}

#[derive(Default)]
struct NfState {
    /// The process ferryd started for the NF, until it is reaped: the only
    /// pid admitted as this NF.
    child: Option<u32>,
    pid: Option<u32>,
    connected: bool,
    restarts: u32,
    generation: u64,
    counters: Vec<String>,
}

pub struct Daemon {
    pub plan: ChainPlan,
    pub socket: PathBuf,
    pub domains: Vec<Domain>,
    ports: Vec<Option<Mutex<Port>>>,
    taps: Vec<Tap>,
    nfs: Vec<Mutex<NfState>>,
    /// Per NF: what it runs as.
    creds: Vec<Creds>,
    /// Per NF: its key, if ferryd does not start it.
    keys: Vec<Option<NfKey>>,
    _leases: Vec<Lease>,
    ferry_bin: Option<PathBuf>,
    spawn: bool,
    pub stop: AtomicBool,
}

fn log(msg: impl AsRef<str>) {
    eprintln!("ferryd: {}", msg.as_ref());
}

/// Sets the chain up, serves until `Shutdown` or SIGTERM/SIGINT, tears down.
pub fn run(opts: &Options) -> Result<()> {
    let spec = ferry_catalog::parse_chain(&opts.chain)?;
    let plan = ChainPlan::compile(&spec);
    let socket = opts.socket.clone().unwrap_or_else(|| proto::default_socket(&plan.name));
    let daemon = Arc::new(Daemon::setup(plan, socket, opts)?);
    install_signal_handlers();
    let listener = daemon.listen()?;
    log(format!("chain {:?} up; listening on {}", daemon.plan.name, daemon.socket.display()));
    for b in 0..daemon.plan.bridges.len() {
        bridge::start(daemon.clone(), b)?;
    }
    for i in 0..daemon.plan.nfs.len() {
        if daemon.spawn && daemon.plan.nfs[i].spawn {
            Daemon::start_nf(&daemon, i)?;
        }
    }
    listener.set_nonblocking(true)?;
    while !daemon.stop.load(Ordering::Acquire) && !signalled() {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let d = daemon.clone();
                std::thread::spawn(move || d.serve(stream));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
            Err(e) => log(format!("accept: {e}")),
        }
    }
    daemon.stop.store(true, Ordering::Release);
    daemon.stop_nfs();
    let _ = std::fs::remove_file(&daemon.socket);
    for (nf, key) in daemon.plan.nfs.iter().zip(&daemon.keys) {
        if key.is_some() {
            let _ = std::fs::remove_file(proto::key_path(&daemon.socket, &nf.name));
        }
    }
    if let Some(dir) = proto::key_path(&daemon.socket, "-").parent() {
        // Only if empty: it is ours, but say nothing of what else is there.
        let _ = std::fs::remove_dir(dir);
    }
    log("stopped");
    Ok(())
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Release);
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

fn signalled() -> bool {
    SIGNALLED.load(Ordering::Acquire)
}

impl Daemon {
    fn setup(plan: ChainPlan, socket: PathBuf, opts: &Options) -> Result<Daemon> {
        let spawn = opts.spawn;
        let (creds, leases) = users::resolve(&plan, opts.uids)?;
        for (d, dom) in plan.domains.iter().enumerate() {
            let runs_as: Vec<&str> =
                plan.nfs.iter().zip(&creds).filter(|(n, _)| n.domain == d).map(|(_, c)| c.shown.as_str()).collect();
            log(format!("domain {} runs as {runs_as:?}", dom.name));
        }
        let mut keys = Vec::new();
        for (nf, c) in plan.nfs.iter().zip(&creds) {
            keys.push(if spawn && nf.spawn {
                None
            } else {
                Some(NfKey::issue(&proto::key_path(&socket, &nf.name), c.uid, c.gid)?)
            });
        }
        let domains = plan.domains.iter().map(Domain::create).collect::<Result<Vec<_>>>()?;
        let mut ports = Vec::new();
        for p in &plan.ports {
            ports.push(match p.nf {
                Some(_) => Some(Mutex::new(Port::open(p).with_context(|| format!("port {}", p.name))?)),
                None => None,
            });
        }
        let taps = plan.kernel.iter().map(Tap::create).collect::<Result<Vec<_>>>()?;
        let nfs = plan.nfs.iter().map(|_| Mutex::new(NfState::default())).collect();
        let ferry_bin = if plan.nfs.iter().any(|n| n.spawn && n.kind.is_some()) && spawn {
            Some(spawn::ferry_bin()?)
        } else {
            None
        };
        Ok(Daemon {
            plan,
            socket,
            domains,
            ports,
            taps,
            nfs,
            creds,
            keys,
            _leases: leases,
            ferry_bin,
            spawn,
            stop: AtomicBool::new(false),
        })
    }

    fn listen(&self) -> Result<UnixListener> {
        if let Some(dir) = self.socket.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if self.socket.exists() {
            if UnixStream::connect(&self.socket).is_ok() {
                bail!("another ferryd is serving {}", self.socket.display());
            }
            std::fs::remove_file(&self.socket)?;
        }
        let l = UnixListener::bind(&self.socket).with_context(|| format!("binding {}", self.socket.display()))?;
        // Anyone may connect; who may be which NF is checked per connection
        // with SO_PEERCRED.
        std::fs::set_permissions(&self.socket, std::fs::Permissions::from_mode(0o666))?;
        Ok(l)
    }

    /// Starts NF `i` under a supervisor thread that restarts it after it
    /// dies, once its frames are reclaimed. The supervisor is the NF's
    /// parent thread for its whole life, which PR_SET_PDEATHSIG (tied to
    /// the parent thread) needs.
    fn start_nf(daemon: &Arc<Daemon>, i: usize) -> Result<()> {
        let d = daemon.clone();
        let first = d.spawn_child(i)?;
        std::thread::Builder::new().name(format!("nf-{}", d.plan.nfs[i].name)).spawn(move || {
            let name = d.plan.nfs[i].name.clone();
            let mut child = Some(first);
            while let Some(mut c) = child.take() {
                let pid = c.id();
                log(format!("started NF {name} (pid {pid}, {})", d.creds[i].shown));
                if let Err(e) = spawn::wait_exited(pid) {
                    log(format!("waiting for NF {name} (pid {pid}): {e}"));
                }
                // Forget the pid before reaping frees it for reuse.
                d.nfs[i].lock().expect("nf lock").child = None;
                let status = c.wait();
                log(format!("NF {name} exited: {status:?}"));
                // Its connection handler reclaims its frames and resets its
                // rings; a new process before that would find them taken.
                let waited = Instant::now();
                let mut told = false;
                while d.nfs[i].lock().expect("nf lock").connected {
                    if d.stop.load(Ordering::Acquire) || signalled() {
                        return;
                    }
                    if !told && waited.elapsed() > Duration::from_secs(5) {
                        log(format!("NF {name}: still waiting to reclaim its frames before restarting it"));
                        told = true;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                if d.stop.load(Ordering::Acquire) || signalled() || !d.plan.nfs[i].restart {
                    return;
                }
                let restarts = {
                    let mut st = d.nfs[i].lock().expect("nf lock");
                    st.restarts += 1;
                    st.restarts
                };
                // Back off a little more for an NF that keeps dying.
                std::thread::sleep(Duration::from_millis(50 * restarts.min(20) as u64));
                match d.spawn_child(i) {
                    Ok(c) => child = Some(c),
                    Err(e) => log(format!("restarting NF {name}: {e:#}")),
                }
            }
        })?;
        Ok(())
    }

    /// Starts NF `i`'s process and records its pid, under the NF's lock so
    /// that its hello (which takes the lock) finds the pid recorded.
    fn spawn_child(&self, i: usize) -> Result<std::process::Child> {
        let ferry = self.ferry_bin.clone().unwrap_or_default();
        let mut st = self.nfs[i].lock().expect("nf lock");
        let child = spawn::spawn_nf(&self.plan.nfs[i], &self.creds[i], &self.socket, &ferry)?;
        st.child = Some(child.id());
        Ok(child)
    }

    fn stop_nfs(&self) {
        for st in &self.nfs {
            if let Some(pid) = st.lock().expect("nf lock").pid {
                // SAFETY: plain kill on a pid we started or admitted.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
        }
    }

    /// One connection: a request loop for the CLI, or an NF's lifetime.
    fn serve(self: Arc<Self>, stream: UnixStream) {
        loop {
            let msg = match proto::recv(&stream) {
                Ok((m, _fds)) => m,
                Err(ProtoError::Closed) => return,
                Err(e) => {
                    let _ = proto::send(&stream, &Msg::Error { message: e.to_string() }, &[]);
                    return;
                }
            };
            let reply = match msg {
                Msg::Hello { nf, pid, counters, key } => {
                    match self.admit(&stream, &nf, pid, counters, &key) {
                        Ok(i) => self.nf_lifetime(&stream, i),
                        Err(e) => {
                            log(format!("refused NF {}: {e:#}", proto::echoed(&nf)));
                            let _ = proto::send(&stream, &Msg::Error { message: format!("{e:#}") }, &[]);
                        }
                    }
                    return;
                }
                Msg::Status => Msg::StatusReply(Box::new(self.status())),
                Msg::Audit => match self.require_admin(&stream) {
                    Ok(()) => Msg::AuditReply { domains: self.domains.iter().map(|d| d.audit(&[])).collect() },
                    Err(e) => Msg::Error { message: format!("{e:#}") },
                },
                Msg::Shutdown => match self.require_admin(&stream) {
                    Ok(()) => {
                        self.stop.store(true, Ordering::Release);
                        Msg::Ok
                    }
                    Err(e) => Msg::Error { message: format!("{e:#}") },
                },
                other => Msg::Error { message: format!("unexpected message {:?}", kind_name(&other)) },
            };
            if proto::send(&stream, &reply, &[]).is_err() {
                return;
            }
        }
    }

    fn require_admin(&self, stream: &UnixStream) -> Result<()> {
        let (_, uid, _) = spawn::peer_cred(stream)?;
        // SAFETY: plain getter.
        if uid != 0 && uid != unsafe { libc::geteuid() } {
            bail!("only root may do that (peer uid {uid})");
        }
        Ok(())
    }

    /// Checks who an NF is, creates its sockets and sends it everything it
    /// needs.
    fn admit(
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
                proto::key_path(&self.socket, name).display(),
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
        let threads: Vec<(u32, u32)> = nf.threads.iter().map(|t| (t.tid, t.ring)).collect();
        dom.attach(&threads, pid)?;
        st.generation += 1;
        let welcome = Welcome {
            chain: self.plan.name.clone(),
            nf_index: i,
            nf: nf.clone(),
            domain: dom.plan.clone(),
            fds: roles,
            xsk_rings: [XSK_RINGS.rx, XSK_RINGS.tx, XSK_RINGS.fill, XSK_RINGS.comp],
            port_rx: self.plan.ports.iter().map(|p| p.rx).collect(),
            generation: st.generation,
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
        st.counters = counters;
        log(format!("NF {name} connected (pid {pid}, uid {uid})"));
        Ok(i)
    }

    /// Waits for an admitted NF's connection to close, then recovers.
    fn nf_lifetime(&self, stream: &UnixStream, i: usize) {
        while proto::recv(stream).is_ok() {
            let m = Msg::Error { message: "an NF sends nothing after hello".into() };
            let _ = proto::send(stream, &m, &[]);
        }
        self.nf_gone(i);
    }

    /// The NF's connection closed: make sure the process is gone, then
    /// reclaim every frame it held or had queued.
    fn nf_gone(&self, i: usize) {
        let nf = &self.plan.nfs[i];
        let pid = self.nfs[i].lock().expect("nf lock").pid;
        if let Some(pid) = pid {
            let start = Instant::now();
            while !spawn::process_gone(pid) {
                if start.elapsed() > Duration::from_millis(200) {
                    // It closed the socket but lives on: its frames cannot be
                    // reclaimed while it might touch them, so end it.
                    // SAFETY: plain kill.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
                if start.elapsed() > Duration::from_secs(5) {
                    log(format!("NF {} (pid {pid}) will not die; its frames stay out", nf.name));
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
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
                log(format!(
                    "NF {} gone, but threads {:?} of domain {} did not pause: its frames stay out until they do",
                    nf.name, report.unresponsive, report.domain
                ));
            }
            tries += 1;
            std::thread::sleep(Duration::from_millis(100));
        };
        log(format!(
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
        ));
        let mut st = self.nfs[i].lock().expect("nf lock");
        st.connected = false;
        st.pid = None;
    }

    pub fn status(&self) -> Status {
        let mut s = Status { chain: self.plan.name.clone(), ..Default::default() };
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
            s.nfs.push(NfStatus {
                name: nf.name.clone(),
                domain: dom.plan.name.clone(),
                pid: st.pid,
                uid: Some(self.creds[i].uid),
                connected: st.connected,
                restarts: st.restarts,
                threads,
            });
        }
        for d in &self.domains {
            let ctl = d.control.as_slice();
            s.domains.push(DomainStatus {
                name: d.plan.name.clone(),
                frames_total: d.pool.frames_total(),
                in_pool: d.pool.available(),
                reclaimed: ctl[shm::RECLAIMED].load(Ordering::Relaxed),
                audits: ctl[shm::AUDITS].load(Ordering::Relaxed),
                lost: ctl[shm::LOST].load(Ordering::Relaxed),
                duplicated: ctl[shm::DUPLICATED].load(Ordering::Relaxed),
            });
        }
        s
    }
}

fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Hello { .. } => "hello",
        Msg::Welcome(_) => "welcome",
        Msg::Status => "status",
        Msg::StatusReply(_) => "status-reply",
        Msg::Audit => "audit",
        Msg::AuditReply { .. } => "audit-reply",
        Msg::Shutdown => "shutdown",
        Msg::Ok => "ok",
        Msg::Error { .. } => "error",
    }
}
