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
use ferry_chain::proto::{self, Msg, ProtoError};

use crate::chain::Chain;
use crate::nsh::{Fabric, NshInstall};
use crate::process::{install_signal_handlers, signalled};
use crate::users::UidRange;
use crate::waiting::{Seat, WaitingRoom};

mod admin;
mod deploy;
mod fabric;

use admin::kind_name;

/// What `ferryd` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// A chain file to deploy at start, and the values of its
    /// placeholders.
    pub chain: Option<PathBuf>,
    pub set: Vec<(String, String)>,
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
    /// Place chains by it (`ferry_place::cost`); None: by the rules.
    pub cost_model: Option<ferry_place::CostModel>,
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
    /// What placement weighs post-server parts by (`--cost-model`).
    cost_model: Option<ferry_place::CostModel>,
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
    // Other users are to connect (the NFs, each a uid of its own): a
    // directory on the way that shuts them out is a chain that never
    // comes up, so it is refused here with its fix.
    if mode & 0o002 != 0 {
        if let Some(closed) = crate::preflight::closed_to_others(path, 0o002) {
            bail!(
                "{}: {} is closed to other users, and each NF connects as a uid of its own: `chmod o+x` it, or \
                 serve the socket elsewhere (--socket)",
                path.display(),
                closed.display()
            );
        }
    }
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
    let daemon = Arc::new(Daemon::new(opts));
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
        serve_tls(&daemon, addr, opts.tls_dir.as_deref())?;
    }
    if daemon.host.is_some() {
        daemon.redeploy_parts();
        let d = daemon.clone();
        std::thread::Builder::new().name("peers".into()).spawn(move || d.watch_peers())?;
    }
    if let Some(addr) = opts.metrics {
        serve_metrics(&daemon, addr)?;
    }
    if let Some(path) = &opts.chain {
        for file in chain_files(path)? {
            deploy_at_start(&daemon, &file, &opts.set)?;
        }
    }
    tracing::info!("serving NFs on {} and admin requests on {}", daemon.socket.display(), daemon.admin.display());
    let d = daemon.clone();
    std::thread::Builder::new().name("ready".into()).spawn(move || d.notify_ready())?;
    accept_until_stopped(&daemon, &nf_listener, &admin_listener);
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    if daemon.persist && !daemon.stop.load(Ordering::Acquire) {
        daemon.leave();
    } else {
        daemon.shutdown();
    }
    tracing::info!("stopped");
    Ok(())
}

impl Daemon {
    fn new(opts: &Options) -> Daemon {
        let socket = opts.socket.clone().unwrap_or_else(proto::default_socket);
        let admin = opts.admin.clone().unwrap_or_else(|| proto::admin_socket(&socket));
        let state_dir = crate::persist::state_dir(&admin);
        Daemon {
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
            cost_model: opts.cost_model.clone(),
            fabric: Mutex::new(None),
            paths: Mutex::new(Vec::new()),
        }
    }
}

/// Serves admin requests over mutual TLS on `addr`: an operator's key may
/// ask anything, another host's key only for status (its probes).
fn serve_tls(daemon: &Arc<Daemon>, addr: &std::net::SocketAddr, tls_dir: Option<&Path>) -> Result<()> {
    let host = daemon.host.clone().ok_or_else(|| anyhow!("--listen needs --host"))?;
    let dir = tls_dir.ok_or_else(|| anyhow!("--listen needs --tls-dir"))?;
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
    Ok(())
}

fn serve_metrics(daemon: &Arc<Daemon>, addr: std::net::SocketAddr) -> Result<()> {
    let (d, l) = (daemon.clone(), daemon.clone());
    let bound = crate::metrics::serve(
        addr,
        move || d.chains.lock().expect("chains lock").clone(),
        move || l.listener_counters(),
    )?;
    tracing::info!("metrics on http://{bound}/metrics");
    *daemon.metrics.lock().expect("metrics lock") = Some(bound);
    Ok(())
}

/// Deploys the chain file ferryd was started with, unless it runs already.
/// The chain files `path` names: itself, or the `*.yaml` and `*.yml` files
/// of a directory in name order (a service's `/etc/ferry/chains`).
fn chain_files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("{}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

impl Daemon {
    /// Tells systemd (`Type=notify`; nothing without `$NOTIFY_SOCKET`)
    /// that ferryd is ready once every chain deployed at start has all the
    /// NFs ferryd starts itself connected.
    fn notify_ready(&self) {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let chains: Vec<Arc<Chain>> = self.chains.lock().expect("chains lock").clone();
            if chains.iter().all(|c| c.started_nfs_up()) {
                let names: Vec<String> = chains.iter().map(|c| c.plan.name.clone()).collect();
                let status = format!("{} chains up: {}", names.len(), names.join(", "));
                if let Err(e) =
                    sd_notify::notify(false, &[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(&status)])
                {
                    tracing::warn!("telling systemd ferryd is ready: {e}");
                }
                tracing::info!("ready: {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn deploy_at_start(daemon: &Arc<Daemon>, file: &Path, set: &[(String, String)]) -> Result<()> {
    let file = std::fs::canonicalize(file).with_context(|| format!("{}", file.display()))?;
    let (text, origin) = ferry_chain::spec::read_filled(&file, set)?;
    let name = ferry_catalog::parse_chain_str(&text, &origin)?.name();
    if daemon.chain(&name).is_ok() {
        tracing::info!(
            "chain {name:?} of {} runs already (adopted, or a part over hosts): not deployed again",
            file.display()
        );
    } else if let Err(e) = daemon.deploy(&file, set) {
        // The chains adopted meanwhile run on for the next ferryd.
        if daemon.persist {
            daemon.leave();
        } else {
            daemon.shutdown();
        }
        return Err(e);
    }
    Ok(())
}

/// Takes connections from both sockets until ferryd stops.
fn accept_until_stopped(daemon: &Arc<Daemon>, nf_listener: &UnixListener, admin_listener: &UnixListener) {
    while !daemon.stop.load(Ordering::Acquire) && !signalled() {
        let mut pfds = [nf_listener.as_raw_fd(), admin_listener.as_raw_fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(pfds.as_mut_ptr(), 2, 100) };
        for (listener, admin) in [(nf_listener, false), (admin_listener, true)] {
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

    /// The first message on `stream`, which leaves its seat then; a
    /// message of a connection closed for room meanwhile is dropped
    /// unread (its client was told Busy and sends it again).
    fn first_message(seat: Seat, stream: &UnixStream) -> Result<(Msg, Vec<OwnedFd>), ProtoError> {
        let first = proto::recv(stream);
        if matches!(&first, Err(ProtoError::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)) {
            seat.timed_out();
            return first;
        }
        if seat.leave() {
            first
        } else {
            Err(ProtoError::Closed)
        }
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
            match self.deploy(&state.file, &state.set) {
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
}
