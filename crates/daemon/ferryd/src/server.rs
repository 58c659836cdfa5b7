//! The daemon: hosts any number of chains, deployed and removed while it
//! runs, each with its own domains, ports, NFs and uids (P4SFC's server
//! daemon, §III-E). Two sockets:
//! * the NF socket (mode 0666): NFs of every chain say hello there, and
//!   `admit` checks who they are;
//! * the admin socket (mode 0600, and the peer must be root or ferryd's
//!   own uid): deploy, remove, list, status, audit, shutdown.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use ferry_chain::plan::ChainPlan;
use ferry_chain::proto::{self, ChainSummary, Msg, NfReload, ProtoError};

use crate::chain::{Chain, ChainSetup};
use crate::nsh::{Fabric, NshInstall, NshSetup};
use crate::process::{install_signal_handlers, signalled};
use crate::spawn;
use crate::users::UidRange;
use crate::waiting::{Seat, WaitingRoom};

/// What `ferryd` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// A chain file to deploy at start.
    pub chain: Option<PathBuf>,
    /// The NF socket (default [`proto::default_socket`]).
    pub socket: Option<PathBuf>,
    /// The admin socket (default: the NF socket's [`proto::admin_socket`]).
    pub admin: Option<PathBuf>,
    /// Start the NFs marked `spawn: true` (default).
    pub spawn: bool,
    /// Where domains that name no user get their uids.
    pub uids: UidRange,
    /// Where to serve Prometheus metrics (None: nowhere).
    pub metrics: Option<std::net::SocketAddr>,
    /// Chains outlive ferryd: on SIGTERM (or a crash) it leaves them
    /// forwarding, and at start it adopts those a ferryd before it left
    /// (see `chain::adopt`).
    pub persist: bool,
    /// The host this ferryd is in chains over hosts (`--host`).
    pub host: Option<String>,
    /// Where to serve admin requests over mutual TLS (`ferry_remote`).
    pub listen: Option<std::net::SocketAddr>,
    /// The TLS directory: the listener's, and this host's key for probing
    /// the other hosts.
    pub tls_dir: Option<PathBuf>,
}

/// How often a host probes the hosts its parts send to.
const PROBE_EVERY: Duration = Duration::from_millis(200);
/// How long a probe waits for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Probes failed in a row that make a host unreachable (a host that is
/// gone refuses at once; one merely slow must stay silent 10 s).
const DOWN_AFTER: u32 = 5;

/// How long a removed chain's NFs get between SIGTERM and SIGKILL.
const REMOVE_GRACE: Duration = Duration::from_secs(5);

/// Connections to the NF socket waiting to say hello: at most 16 of one
/// uid, 256 in all (anyone may connect; each holds a thread).
const NF_WAITING: (usize, usize) = (16, 256);
/// Connections to the admin socket waiting to ask (root's, so one uid).
const ADMIN_WAITING: usize = 64;
/// Connections taken from one socket's backlog before the other's turn.
const ACCEPT_BURST: usize = 64;

pub struct Daemon {
    socket: PathBuf,
    admin: PathBuf,
    spawn: bool,
    uids: UidRange,
    persist: bool,
    /// Where a persistent ferryd keeps its chains' state (next to its
    /// admin socket, root's).
    state_dir: PathBuf,
    chains: Mutex<Vec<Arc<Chain>>>,
    /// Serialises deploys and removes (a deploy takes a while; status and
    /// hellos keep being served meanwhile).
    changes: Mutex<()>,
    next_chain: AtomicU32,
    next_nf: AtomicU32,
    stop: AtomicBool,
    /// Connections to the NF socket that have not said hello yet.
    nf_waiting: Arc<WaitingRoom>,
    /// Connections to the admin socket that have not asked yet.
    admin_waiting: Arc<WaitingRoom>,
    /// What became of the connections to the mutual-TLS listener.
    tls_stats: Mutex<Option<Arc<ferry_remote::ListenerStats>>>,
    /// The address metrics are served on.
    metrics: Mutex<Option<std::net::SocketAddr>>,
    /// The address of its mutual-TLS admin listener.
    listen: Mutex<Option<std::net::SocketAddr>>,
    /// Its TLS directory (its host's key probes the other hosts).
    tls_dir: Option<PathBuf>,
    /// This ferryd's host in chains over hosts (`--host`).
    host: Option<String>,
    /// The NSH forwarder on the host's fabric, once a chain needs it.
    fabric: Mutex<Option<Arc<Mutex<Fabric>>>>,
    /// Parts of chains over hosts with no NF here: NSH entries only.
    paths: Mutex<Vec<(String, NshInstall)>>,
}

/// Binds `path` with mode `mode`, unless another ferryd serves it.
fn listen(path: &Path, mode: u32) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("another ferryd is serving {}", path.display());
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Raises the soft limit on open files to the hard one: every connection
/// waiting in a listener's limits (up to about 1,400) holds an fd.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Serves until `Shutdown` or SIGTERM/SIGINT, then stops every chain.
pub fn run(opts: &Options) -> Result<()> {
    raise_fd_limit();
    let socket = opts.socket.clone().unwrap_or_else(proto::default_socket);
    let admin = opts.admin.clone().unwrap_or_else(|| proto::admin_socket(&socket));
    let state_dir = crate::persist::state_dir(&admin);
    let daemon = Arc::new(Daemon {
        socket,
        admin,
        spawn: opts.spawn,
        uids: opts.uids,
        persist: opts.persist,
        state_dir,
        chains: Mutex::new(Vec::new()),
        changes: Mutex::new(()),
        next_chain: AtomicU32::new(1),
        next_nf: AtomicU32::new(1),
        stop: AtomicBool::new(false),
        nf_waiting: Arc::new(WaitingRoom::new(NF_WAITING.0, NF_WAITING.1)),
        admin_waiting: Arc::new(WaitingRoom::new(ADMIN_WAITING, ADMIN_WAITING)),
        tls_stats: Mutex::new(None),
        metrics: Mutex::new(None),
        listen: Mutex::new(None),
        tls_dir: opts.tls_dir.clone(),
        host: opts.host.clone(),
        fabric: Mutex::new(None),
        paths: Mutex::new(Vec::new()),
    });
    install_signal_handlers();
    // Anyone may connect to the NF socket: who may be which NF is checked
    // per connection. The admin socket is root's.
    let nf_listener = listen(&daemon.socket, 0o666)?;
    let admin_listener = listen(&daemon.admin, 0o600)?;
    // Bound first (so no other ferryd serves these chains), served after:
    // NFs knocking meanwhile wait in the backlog for their chain.
    if daemon.persist {
        // Pins are what outlives ferryd: no bpffs, no persistence.
        ferry_bpf::pinned::ensure_bpffs().context("--persist pins its ports' programs in bpffs")?;
        daemon.adopt_all();
    }
    if let Some(addr) = &opts.listen {
        let host = daemon.host.clone().ok_or_else(|| anyhow!("--listen needs --host"))?;
        let dir = opts.tls_dir.as_ref().ok_or_else(|| anyhow!("--listen needs --tls-dir"))?;
        let config = ferry_remote::TlsDir::new(dir).server(&host)?;
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
        let bound = listener.local_addr()?;
        let (d, s) = (daemon.clone(), daemon.clone());
        // Another host's key asks for status (its probes) and nothing else.
        let answer = move |m: Msg, role: ferry_remote::Role| match (role, m) {
            (ferry_remote::Role::Host, m @ Msg::Status { .. }) | (ferry_remote::Role::Operator, m) => {
                d.answer(m).unwrap_or_else(|e| Msg::Error { message: format!("{e:#}") })
            }
            (ferry_remote::Role::Host, m) => {
                Msg::Error { message: format!("another host may only ask for status, not {:?}", kind_name(&m)) }
            }
        };
        let stop = move || s.stop.load(Ordering::Acquire) || signalled();
        let stats = ferry_remote::serve(listener, config, Arc::new(answer), Arc::new(stop))?;
        *daemon.tls_stats.lock().expect("tls stats lock") = Some(stats);
        tracing::info!("admin requests over mutual TLS on {bound} (host {host})");
        *daemon.listen.lock().expect("listen lock") = Some(bound);
    }
    if daemon.host.is_some() {
        daemon.redeploy_parts();
        let d = daemon.clone();
        std::thread::Builder::new().name("peers".into()).spawn(move || d.watch_peers())?;
    }
    if let Some(addr) = opts.metrics {
        let (d, l) = (daemon.clone(), daemon.clone());
        let bound = crate::metrics::serve(
            addr,
            move || d.chains.lock().expect("chains lock").clone(),
            move || l.listener_counters(),
        )?;
        tracing::info!("metrics on http://{bound}/metrics");
        *daemon.metrics.lock().expect("metrics lock") = Some(bound);
    }
    if let Some(file) = &opts.chain {
        let file = std::fs::canonicalize(file).with_context(|| format!("{}", file.display()))?;
        let name = ferry_catalog::parse_chain(&file)?.name();
        if daemon.chain(&name).is_ok() {
            tracing::info!(
                "chain {name:?} of {} runs already (adopted, or a part over hosts): not deployed again",
                file.display()
            );
        } else if let Err(e) = daemon.deploy(&file) {
            // The chains adopted meanwhile run on for the next ferryd.
            if daemon.persist {
                daemon.leave();
            } else {
                daemon.shutdown();
            }
            return Err(e);
        }
    }
    tracing::info!("serving NFs on {} and admin requests on {}", daemon.socket.display(), daemon.admin.display());
    while !daemon.stop.load(Ordering::Acquire) && !signalled() {
        let mut pfds = [nf_listener.as_raw_fd(), admin_listener.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(pfds.as_mut_ptr(), 2, 100) };
        for (listener, admin) in [(&nf_listener, false), (&admin_listener, true)] {
            // A burst of what waits: a flood must not hold a prompt client
            // long in the backlog behind it, nor starve the other socket.
            for _ in 0..ACCEPT_BURST {
                match listener.accept() {
                    Ok((stream, _)) => daemon.clone().take(stream, admin),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // Out of fds, say: the socket stays readable, so
                        // back off instead of spinning.
                        tracing::warn!("accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        break;
                    }
                }
            }
        }
    }
    if daemon.persist && !daemon.stop.load(Ordering::Acquire) {
        daemon.leave();
    } else {
        daemon.shutdown();
    }
    tracing::info!("stopped");
    Ok(())
}

impl Daemon {
    /// Seats an accepted connection in its listener's [`WaitingRoom`] and
    /// serves it on a thread of its own, which waits for its first message.
    fn take(self: Arc<Self>, stream: UnixStream, admin: bool) {
        let _ = stream.set_nonblocking(false);
        let room = if admin { &self.admin_waiting } else { &self.nf_waiting };
        let seat = match room.enter(&stream) {
            Ok(Some(seat)) => seat,
            Ok(None) => return,
            Err(e) => return tracing::warn!("a connection with no credentials: {e}"),
        };
        let spawned = std::thread::Builder::new()
            .name(if admin { "admin".into() } else { "nf-conn".into() })
            .spawn(move || if admin { self.serve_admin(stream, seat) } else { self.serve_nf(stream, seat) });
        if let Err(e) = spawned {
            tracing::warn!("no thread for a connection: {e}");
        }
    }

    /// The first message on `stream`, which leaves its seat then.
    fn first_message(seat: Seat, stream: &UnixStream) -> Result<(Msg, Vec<OwnedFd>), ProtoError> {
        let first = proto::recv(stream);
        if matches!(&first, Err(ProtoError::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)) {
            seat.timed_out();
        }
        first
    }

    /// The counters of ferryd's listeners, by `listener.counter`.
    fn listener_counters(&self) -> Vec<(String, u64)> {
        let mut all = Vec::new();
        for (listener, room) in [("nf_socket", &*self.nf_waiting), ("admin_socket", &*self.admin_waiting)] {
            all.extend(room.counters().iter().map(|(k, v)| (format!("{listener}.{k}"), *v)));
        }
        if let Some(tls) = self.tls_stats.lock().expect("tls stats lock").as_ref() {
            all.extend(tls.counters().into_iter().map(|(k, v)| (format!("tls.{k}"), v)));
        }
        all
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let chains: Vec<Arc<Chain>> = self.chains.lock().expect("chains lock").drain(..).collect();
        for c in &chains {
            c.stop(Duration::from_secs(1));
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.admin);
        // Only if empty: it is ours, but say nothing of what else is there.
        let _ = std::fs::remove_dir(proto::keys_dir(&self.socket));
    }

    /// ferryd goes, its chains stay (`--persist`, on a signal): they go on
    /// forwarding, and the next ferryd adopts them.
    fn leave(&self) {
        let chains: Vec<Arc<Chain>> = self.chains.lock().expect("chains lock").drain(..).collect();
        for c in &chains {
            c.leave();
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.admin);
        tracing::info!("left {} chains running for the next ferryd", chains.len());
    }

    /// Adopts every chain a ferryd before this one left (`--persist`). A
    /// chain that cannot be adopted is abandoned (what of it still runs is
    /// stopped, so nothing lingers unsupervised) and, once every other
    /// chain is adopted, deployed afresh from its file.
    fn adopt_all(&self) {
        let states = match crate::persist::ChainState::load_all(&self.state_dir) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("adopting nothing: {e:#}");
                return;
            }
        };
        let mut failed = Vec::new();
        for (file, state) in states {
            let state = match state {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!("{e:#}; moved aside");
                    let _ = std::fs::rename(&file, file.with_extension("json.bad"));
                    continue;
                }
            };
            let (name, id) = (state.plan.name.clone(), state.id);
            let last_nf = state.nf_ids.iter().copied().max().unwrap_or(0);
            let chain = match Chain::adopt(state.clone(), self.socket.clone(), self.state_dir.clone(), self.spawn) {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    failed.push((state, e));
                    continue;
                }
            };
            // Listed before it starts: its NFs' rejoins look it up.
            self.chains.lock().expect("chains lock").push(chain.clone());
            if let Err(e) = chain.start_adopted() {
                self.chains.lock().expect("chains lock").retain(|c| !Arc::ptr_eq(c, &chain));
                chain.stop(REMOVE_GRACE);
                failed.push((state, e));
                continue;
            }
            self.next_chain.fetch_max(id + 1, Ordering::Relaxed);
            self.next_nf.fetch_max(last_nf + 1, Ordering::Relaxed);
            tracing::info!("adopted chain {name:?} (id {id}): {} NF processes running", chain.summary().connected);
        }
        for (state, e) in failed {
            let name = &state.plan.name;
            tracing::info!("chain {name:?} cannot be adopted: {e:#}; stopping what is left of it");
            crate::chain::abandon(&self.socket, &self.state_dir, &state);
            // A new ferryd whose state version differs (its region layout
            // may too) comes here: the chain starts afresh.
            match self.deploy(&state.file) {
                Ok(_) => tracing::info!("chain {name:?} deployed afresh from {}", state.file.display()),
                Err(e) => tracing::info!("chain {name:?} not deployed afresh: {e:#}"),
            }
        }
    }

    /// The chain named `name`; an empty name means the only one.
    fn chain(&self, name: &str) -> Result<Arc<Chain>> {
        let chains = self.chains.lock().expect("chains lock");
        if name.is_empty() {
            return match chains.as_slice() {
                [one] => Ok(one.clone()),
                _ => bail!("{} chains are deployed: name one (`ferry chain list`)", chains.len()),
            };
        }
        chains.iter().find(|c| c.plan.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = chains.iter().map(|c| c.plan.name.as_str()).collect();
            anyhow!("no chain {} (deployed: {})", proto::echoed(name), names.join(", "))
        })
    }

    /// Deploys the chain file `file` next to the chains already running.
    /// Nothing they use is touched: a new chain gets its own domains,
    /// ports, kernel hops, NF processes and uids, and one whose ports or
    /// kernel hops are another chain's is refused.
    pub fn deploy(&self, file: &Path) -> Result<ChainSummary> {
        let _changing = self.changes.lock().expect("changes lock");
        let (text, origin) = ferry_config::read_file(file)?;
        let (spec, placement) = ferry_place::load_str(&text, &origin)?;
        if !spec.hosts.is_empty() {
            bail!(
                "{} is a chain over hosts: deploy it with `ferry chain deploy`, which gives each host's ferryd its part",
                file.display()
            );
        }
        self.deploy_placed(file, &text, placement, None)
    }

    /// Deploys this host's part of the chain over hosts in `text`
    /// ([`ferry_chain::hosts`]): its NFs and ports as a chain of this
    /// ferryd, and its NSH attachments and entries on the host's
    /// forwarder; a part with no NF is only the entries.
    pub fn deploy_part(&self, text: &str, origin: &str, macs: &[(String, String)]) -> Result<ChainSummary> {
        let _changing = self.changes.lock().expect("changes lock");
        let host = self.host.as_deref().ok_or_else(|| {
            anyhow!("this ferryd was started without --host, so it has no part in a chain over hosts")
        })?;
        if self.persist {
            bail!("parts of chains over hosts cannot outlive ferryd yet: this ferryd runs with --persist");
        }
        let spec = ferry_catalog::parse_chain_str(text, origin)?;
        let part = spec.host_part(host).map_err(|e| anyhow!("{origin}: {e}"))?;
        let name = spec.name();
        if self.chain(&name).is_ok() || self.paths.lock().expect("paths lock").iter().any(|(n, _)| *n == name) {
            bail!("chain {name:?} is already deployed");
        }
        let mut by_host = std::collections::HashMap::new();
        for (h, mac) in macs {
            let mac = mac.parse::<ferry_wire::MacAddr>().map_err(|e| anyhow!("host {h}: {e}"))?;
            by_host.insert(h.clone(), mac.0);
        }
        let fabric = self.fabric(&part.host)?;
        let setup = NshSetup { fabric, part, peers: spec.hosts.clone(), macs: by_host };
        let Some(local) = setup.part.chain.clone() else {
            let install = NshInstall::open(&setup.fabric, &name, &setup.part, &setup.peers, &setup.macs, None)?;
            self.keep_part(&name, text, origin, macs)?;
            self.paths.lock().expect("paths lock").push((name.clone(), install));
            tracing::info!("deployed chain {name:?}: NSH forwarding only on host {host}");
            let id = self.next_chain.fetch_add(1, Ordering::Relaxed);
            return Ok(ChainSummary {
                id,
                name,
                file: origin.to_string(),
                placement: "nsh only".into(),
                ..Default::default()
            });
        };
        let placement = ferry_place::place(&local).map_err(|e| anyhow!("{origin}: {}", e.message))?;
        let summary = self.deploy_placed(Path::new(origin), text, placement, Some(setup))?;
        if let Err(e) = self.keep_part(&name, text, origin, macs) {
            if let Ok(c) = self.chain(&name) {
                self.chains.lock().expect("chains lock").retain(|x| !Arc::ptr_eq(x, &c));
                c.stop(REMOVE_GRACE);
            }
            return Err(e);
        }
        Ok(summary)
    }

    /// Keeps a part this ferryd deployed, to deploy it again when it starts
    /// after a crash: the other hosts' forwarders find this host again.
    fn keep_part(&self, name: &str, text: &str, origin: &str, macs: &[(String, String)]) -> Result<()> {
        let record = crate::persist::PartRecord { text: text.into(), origin: origin.into(), macs: macs.to_vec() };
        record.save(&self.state_dir, name)
    }

    /// Deploys again the parts of chains over hosts this host had when its
    /// ferryd went away.
    fn redeploy_parts(&self) {
        let parts = match crate::persist::PartRecord::load_all(&self.state_dir) {
            Ok((parts, bad)) => {
                bad.iter().for_each(|b| tracing::warn!("{b}"));
                parts
            }
            Err(e) => {
                tracing::warn!("deploying no earlier part: {e:#}");
                return;
            }
        };
        for (name, p) in parts {
            match self.deploy_part(&p.text, &p.origin, &p.macs) {
                Ok(_) => tracing::info!("deployed again this host's part of chain {name:?}"),
                Err(e) => tracing::info!("this host's part of chain {name:?} not deployed again: {e:#}"),
            }
        }
    }

    /// Probes, every [`PROBE_EVERY`], the hosts this host's parts send to
    /// (a status request for the chain, over the control channel). After
    /// [`DOWN_AFTER`] failures in a row a host is unreachable: the entries
    /// that send to it are taken out, so its frames are dropped and
    /// counted here (`no_hop`) instead of vanishing in a host that lost its
    /// part; its first answer puts them back.
    fn watch_peers(self: Arc<Self>) {
        let mut failures: std::collections::HashMap<(String, String), u32> = Default::default();
        let me = self.host.clone().unwrap_or_default();
        // Made once: a probe every 200 ms reads no key file.
        let tls = match self.tls_dir.as_deref().map(|d| ferry_remote::TlsDir::new(d).client(&me)).transpose() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!("probing over TLS impossible: {e}");
                None
            }
        };
        while !self.stop.load(Ordering::Acquire) && !signalled() {
            std::thread::sleep(PROBE_EVERY);
            let mut targets: Vec<(String, ferry_chain::hosts::HostSpec)> = Vec::new();
            for c in self.chains.lock().expect("chains lock").iter() {
                targets.extend(c.nsh_next_hosts().into_iter().map(|h| (c.plan.name.clone(), h)));
            }
            for (name, install) in self.paths.lock().expect("paths lock").iter() {
                targets.extend(install.next_hosts().into_iter().map(|h| (name.clone(), h)));
            }
            for (chain, host) in targets {
                let Some(control) = host.control.as_deref() else { continue };
                let msg = Msg::Status { chain: chain.clone() };
                // Up once its part is there and its NFs are connected: a
                // host that is still starting them would lose frames
                // nobody counts.
                let answered = matches!(
                    ferry_remote::request_control(control, &host.name, tls.as_ref(), &msg, PROBE_TIMEOUT),
                    Ok(Msg::StatusReply(s)) if s.nfs.iter().all(|n| n.connected)
                );
                let n = failures.entry((chain.clone(), host.name.clone())).or_default();
                *n = if answered { 0 } else { *n + 1 };
                let up = *n < DOWN_AFTER;
                let changed = match self.chain(&chain) {
                    Ok(c) => c.nsh_set_reachable(&host.name, up),
                    Err(_) => self
                        .paths
                        .lock()
                        .expect("paths lock")
                        .iter_mut()
                        .find(|(n, _)| *n == chain)
                        .is_some_and(|(_, i)| i.set_reachable(&host.name, up)),
                };
                if changed {
                    let now = if up { "reachable again" } else { "unreachable: its frames are dropped here" };
                    tracing::info!("chain {chain:?}: host {} is {now}", host.name);
                }
            }
        }
    }

    /// The forwarder on this host's fabric, loaded for the first chain
    /// over hosts; every later one must name the same fabric.
    fn fabric(&self, host: &ferry_chain::hosts::HostSpec) -> Result<Arc<Mutex<Fabric>>> {
        let mut fabric = self.fabric.lock().expect("fabric lock");
        if let Some(f) = fabric.as_ref() {
            let have = f.lock().expect("fabric lock").host.clone();
            if !Fabric::same(&have, host) {
                bail!("host {:?}: its fabric is {:?}; this chain gives {:?}", have.name, have.fabric, host.fabric);
            }
            return Ok(f.clone());
        }
        let f = Arc::new(Mutex::new(Fabric::open(host)?));
        *fabric = Some(f.clone());
        Ok(f)
    }

    /// This host's fabric MAC, for a chain over hosts.
    fn fabric_mac(&self, text: &str, origin: &str) -> Result<Msg> {
        let host = self.host.as_deref().ok_or_else(|| anyhow!("this ferryd was started without --host"))?;
        let spec = ferry_catalog::parse_chain_str(text, origin)?;
        let me = spec.hosts.iter().find(|h| h.name == host).ok_or_else(|| anyhow!("{origin}: no host {host:?}"))?;
        let mac = crate::nsh::mac_of(me.netns.as_deref(), &me.fabric.dev)?;
        Ok(Msg::FabricReply { host: host.to_string(), mac: ferry_wire::MacAddr(mac).to_string() })
    }

    fn deploy_placed(
        &self,
        file: &Path,
        text: &str,
        placement: ferry_place::Placement,
        nsh: Option<NshSetup>,
    ) -> Result<ChainSummary> {
        let mut plan = ChainPlan::compile(&placement.server);
        crate::devices::check(&plan, &placement, text, &file.display().to_string())?;
        // NFs started without `cpus` inherit ferryd's CPU set.
        plan.settle_polling(std::thread::available_parallelism().map_or(1, |n| n.get()));
        for nf in &plan.nfs {
            let offline = crate::spawn::offline_cpus(&nf.cpus);
            if !offline.is_empty() {
                bail!("NF {}: cpus: {offline:?} not online on this machine", nf.name);
            }
        }
        self.check_free(&plan)?;
        let id = self.next_chain.fetch_add(1, Ordering::Relaxed);
        let new_id = || self.next_nf.fetch_add(1, Ordering::Relaxed);
        let nf_ids: Vec<u32> = plan.nfs.iter().map(|_| new_id()).collect();
        let xdp = placement.xdp.iter().map(|p| (p.clone(), p.nfs.iter().map(|_| new_id()).collect())).collect();
        // A split NF is one NF: its element has its process's id.
        let process_id = |name: &str| plan.nfs.iter().position(|n| n.name == name).map(|i| nf_ids[i]);
        let post = placement
            .post
            .iter()
            .map(|p| {
                let ids = p
                    .nfs
                    .iter()
                    .map(|n| {
                        (p.split.as_ref() == Some(&n.name))
                            .then(|| process_id(&n.name))
                            .flatten()
                            .unwrap_or_else(new_id)
                    })
                    .collect();
                (p.clone(), ids)
            })
            .collect();
        let ahead_ids = placement.hybrid.iter().map(|h| h.before.iter().map(|_| new_id()).collect()).collect();
        let setup = ChainSetup {
            id,
            nf_ids,
            file: file.to_path_buf(),
            plan,
            socket: self.socket.clone(),
            spawn: self.spawn,
            uids: self.uids,
            xdp,
            post,
            hybrid: placement.hybrid.clone(),
            ahead_ids,
            whole: placement.whole.clone(),
            placement: placement.explain(),
            persist: self.persist.then(|| self.state_dir.clone()),
            nsh,
        };
        let chain = Arc::new(Chain::setup(setup).with_context(|| format!("chain from {}", file.display()))?);
        // Listed before its NFs start: their hellos look it up.
        self.chains.lock().expect("chains lock").push(chain.clone());
        if let Err(e) = chain.start().and_then(|()| chain.save_state()) {
            self.chains.lock().expect("chains lock").retain(|c| c.id != id);
            chain.stop(REMOVE_GRACE);
            return Err(e);
        }
        let summary = chain.summary();
        let processes = chain.plan.nfs.len();
        tracing::info!(
            "deployed chain {:?} (id {id}) from {}: {processes} NF processes, {} NFs in XDP",
            chain.plan.name,
            file.display(),
            summary.nfs - processes
        );
        Ok(summary)
    }

    /// Refuses a chain whose name, ports or kernel hops are taken.
    fn check_free(&self, plan: &ChainPlan) -> Result<()> {
        if self.paths.lock().expect("paths lock").iter().any(|(n, _)| *n == plan.name) {
            bail!("chain {:?} is already deployed (its part over hosts here)", plan.name);
        }
        for c in self.chains.lock().expect("chains lock").iter() {
            if c.plan.name == plan.name {
                bail!("chain {:?} is already deployed (id {})", plan.name, c.id);
            }
            for p in &plan.ports {
                if let Some(q) = c.plan.ports.iter().find(|q| q.netns == p.netns && q.netdev == p.netdev) {
                    bail!(
                        "port {:?}: device {} (netns {}) is already port {:?} of chain {:?}",
                        p.name,
                        p.netdev,
                        p.netns.as_deref().unwrap_or("(root)"),
                        q.name,
                        c.plan.name
                    );
                }
            }
            for k in &plan.kernel {
                if c.plan.kernel.iter().any(|q| q.netns == k.netns && q.dev == k.dev) {
                    bail!("kernel hop {:?}: device {} is already chain {:?}'s", k.name, k.dev, c.plan.name);
                }
            }
        }
        Ok(())
    }

    /// Removes chain `name`: it stops taking hellos, its NFs are stopped
    /// and everything it holds is released. Other chains are not touched.
    pub fn remove(&self, name: &str) -> Result<()> {
        let _changing = self.changes.lock().expect("changes lock");
        crate::persist::PartRecord::remove(&self.state_dir, name);
        let mut paths = self.paths.lock().expect("paths lock");
        if let Some(i) = paths.iter().position(|(n, _)| n == name) {
            paths.remove(i);
            tracing::info!("removed chain {name:?} (NSH forwarding only)");
            return Ok(());
        }
        drop(paths);
        let chain = self.chain(name)?;
        self.chains.lock().expect("chains lock").retain(|c| c.id != chain.id);
        chain.stop(REMOVE_GRACE);
        tracing::info!("removed chain {:?} (id {})", chain.plan.name, chain.id);
        Ok(())
    }

    /// Re-reads the configuration files of chain `name`'s hybrid NFs and
    /// applies them, without restarting anything (see [`Chain::reload`]).
    pub fn reload(&self, name: &str) -> Result<Vec<NfReload>> {
        let _changing = self.changes.lock().expect("changes lock");
        let chain = self.chain(name)?;
        let outcomes = chain.reload()?;
        tracing::info!("reloaded chain {:?}: {outcomes:?}", chain.plan.name);
        Ok(outcomes)
    }

    /// An NF's connection: one hello, then its lifetime.
    fn serve_nf(self: Arc<Self>, stream: UnixStream, seat: Seat) {
        let reply_error = |message: String| {
            let _ = proto::send(&stream, &Msg::Error { message }, &[]);
        };
        match Self::first_message(seat, &stream) {
            Ok((Msg::Hello { chain, nf, pid, counters, key }, _)) => {
                let admitted = self.chain(&chain).and_then(|c| Ok((c.admit(&stream, &nf, pid, counters, &key)?, c)));
                // An NF's lifetime is one long wait for its connection to
                // close.
                let _ = stream.set_read_timeout(None);
                match admitted {
                    Ok((i, c)) => c.nf_lifetime(&stream, i),
                    Err(e) => {
                        tracing::warn!("refused NF {}: {e:#}", proto::echoed(&nf));
                        reply_error(format!("{e:#}"));
                    }
                }
            }
            Ok((Msg::Rejoin { chain, nf, key }, _)) => {
                let _ = stream.set_read_timeout(None);
                match self.chain(&chain).and_then(|c| Ok((c.rejoin(&stream, &nf, &key)?, c))) {
                    Ok((i, c)) => {
                        if proto::send(&stream, &Msg::Ok, &[]).is_ok() {
                            c.nf_lifetime(&stream, i);
                        } else {
                            // It will knock again.
                            c.unjoin(i);
                        }
                    }
                    Err(e) => {
                        tracing::warn!("refused NF {} rejoining: {e:#}", proto::echoed(&nf));
                        reply_error(format!("{e:#}"));
                    }
                }
            }
            Ok((other, _)) => reply_error(format!(
                "unexpected message {:?} on the NF socket (admin requests go to {})",
                kind_name(&other),
                self.admin.display()
            )),
            Err(ProtoError::Closed) => {}
            Err(e) => reply_error(e.to_string()),
        }
    }

    /// An admin connection: requests until it closes.
    fn serve_admin(self: Arc<Self>, stream: UnixStream, seat: Seat) {
        if let Err(e) = require_admin(&stream) {
            let _ = proto::send(&stream, &Msg::Error { message: format!("{e:#}") }, &[]);
            return;
        }
        let mut first = Some(Self::first_message(seat, &stream));
        // Root's own connection: no deadline once it has asked.
        let _ = stream.set_read_timeout(None);
        loop {
            let msg = match first.take().unwrap_or_else(|| proto::recv(&stream)) {
                Ok((m, _fds)) => m,
                Err(ProtoError::Closed) => return,
                Err(e) => {
                    let _ = proto::send(&stream, &Msg::Error { message: e.to_string() }, &[]);
                    return;
                }
            };
            let reply = match self.answer(msg) {
                Ok(m) => m,
                Err(e) => Msg::Error { message: format!("{e:#}") },
            };
            if proto::send(&stream, &reply, &[]).is_err() {
                return;
            }
        }
    }

    fn answer(&self, msg: Msg) -> Result<Msg> {
        Ok(match msg {
            Msg::Status { chain } => Msg::StatusReply(Box::new(self.status(&chain)?)),
            Msg::Audit { chain } => {
                Msg::AuditReply { domains: self.chain(&chain)?.domains.iter().map(|d| d.audit(&[])).collect() }
            }
            Msg::Deploy { file } => Msg::Deployed(Box::new(self.deploy(Path::new(&file))?)),
            Msg::Remove { chain } => {
                self.remove(&chain)?;
                Msg::Ok
            }
            Msg::List => {
                // Copied out first: a summary takes each NF's lock, which an
                // admission can hold for a while.
                let chains: Vec<Arc<Chain>> = self.chains.lock().expect("chains lock").clone();
                let mut list: Vec<ChainSummary> = chains.iter().map(|c| c.summary()).collect();
                for (name, _) in self.paths.lock().expect("paths lock").iter() {
                    list.push(ChainSummary { name: name.clone(), placement: "nsh only".into(), ..Default::default() });
                }
                Msg::ListReply { chains: list }
            }
            Msg::Reload { chain } => Msg::Reloaded { nfs: self.reload(&chain)? },
            Msg::Fabric { text, origin } => self.fabric_mac(&text, &origin)?,
            Msg::DeployPart { text, origin, macs } => Msg::Deployed(Box::new(self.deploy_part(&text, &origin, &macs)?)),
            Msg::Info => Msg::InfoReply {
                metrics: self.metrics.lock().expect("metrics lock").map(|a| a.to_string()),
                listen: self.listen.lock().expect("listen lock").map(|a| a.to_string()),
            },
            Msg::Shutdown => {
                self.stop.store(true, Ordering::Release);
                Msg::Ok
            }
            other => bail!("unexpected message {:?} on the admin socket", kind_name(&other)),
        })
    }
}

impl Daemon {
    /// Chain `name`'s status; a part over hosts with no NF here shows the
    /// forwarder's counters alone.
    fn status(&self, name: &str) -> Result<proto::Status> {
        if let Some((n, install)) = self.paths.lock().expect("paths lock").iter().find(|(n, _)| n == name) {
            let listeners = self.listener_counters();
            return Ok(proto::Status { chain: n.clone(), nsh: install.counters(), listeners, ..Default::default() });
        }
        Ok(proto::Status { listeners: self.listener_counters(), ..self.chain(name)?.status() })
    }
}

fn require_admin(stream: &UnixStream) -> Result<()> {
    let (_, uid, _) = spawn::peer_cred(stream)?;
    // SAFETY: plain getter.
    if uid != 0 && uid != unsafe { libc::geteuid() } {
        bail!("only root may administer ferryd (peer uid {uid})");
    }
    Ok(())
}

fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Hello { .. } => "hello",
        Msg::Welcome(_) => "welcome",
        Msg::Rejoin { .. } => "rejoin",
        Msg::Fabric { .. } => "fabric",
        Msg::FabricReply { .. } => "fabric-reply",
        Msg::DeployPart { .. } => "deploy-part",
        Msg::Status { .. } => "status",
        Msg::StatusReply(_) => "status-reply",
        Msg::Audit { .. } => "audit",
        Msg::AuditReply { .. } => "audit-reply",
        Msg::Deploy { .. } => "deploy",
        Msg::Deployed(_) => "deployed",
        Msg::Remove { .. } => "remove",
        Msg::List => "list",
        Msg::ListReply { .. } => "list-reply",
        Msg::Info => "info",
        Msg::InfoReply { .. } => "info-reply",
        Msg::Reload { .. } => "reload",
        Msg::Reloaded { .. } => "reloaded",
        Msg::Shutdown => "shutdown",
        Msg::Ok => "ok",
        Msg::Error { .. } => "error",
    }
}
