//! The mutual-TLS listener of a host's ferryd.
//!
//! Anyone who can reach the port may connect, so what a connection costs
//! before its client proved who it is stays small, and a flood of idle
//! connections cannot keep an operator out:
//!
//! * Handshakes are tasks of one asynchronous thread (tokio with
//!   tokio-rustls). A connection that says nothing costs a socket and a
//!   few hundred bytes, not a thread.
//! * A handshake must end within [`HANDSHAKE`] of accept, however slowly
//!   its bytes drip in.
//! * At most [`MAX_HANDSHAKES`] are under way at once (fewer if the open
//!   file limit is lower). One more closes the oldest (the nearest its
//!   deadline anyway) rather than the new one: a flood pushes out its own
//!   connections, while an operator's handshake, a few milliseconds long,
//!   ends before that many newer ones arrive.
//! * The accept loop yields to the handshakes after every accept: a
//!   connection storm cannot starve the handshakes under way.
//! * A client the CAs signed is served on a thread of its own, at most
//!   [`MAX_SESSIONS`] at once: only a signed key gets that far.
//!
//! Per-address limits are not used: on loopback, behind NAT or through a
//! bastion host the operator shares the attacker's address.

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_chain::proto::{self, Msg, ProtoError};
use rustls::{ServerConnection, StreamOwned};
use tokio::task::AbortHandle;

use crate::{Role, Server, IDLE};

/// How long a handshake may take, from accept.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Handshakes under way at once, at most.
const MAX_HANDSHAKES: usize = 4096;
/// Fds kept for everything but handshakes (NF sockets, maps, sessions).
const OTHER_FDS: u64 = 1024;
/// Authenticated connections served at once, at most.
const MAX_SESSIONS: usize = 64;
/// How often the accept loop asks whether to stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Answers a request from a client of a role.
pub type Answer = dyn Fn(Msg, Role) -> Msg + Send + Sync;

/// What became of the connections a listener accepted.
#[derive(Debug, Default)]
pub struct ListenerStats {
    accepted: AtomicU64,
    authenticated: AtomicU64,
    /// The handshake failed: no certificate, one no CA of ours signed, an
    /// old protocol version, bytes that are not TLS.
    refused: AtomicU64,
    /// The handshake did not end within [`HANDSHAKE`].
    timed_out: AtomicU64,
    /// Closed mid-handshake to make room ([`MAX_HANDSHAKES`]).
    evicted: AtomicU64,
    /// Authenticated, but [`MAX_SESSIONS`] were being served.
    sessions_refused: AtomicU64,
}

impl ListenerStats {
    /// The counters by name, in a fixed order.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("accepted", get(&self.accepted)),
            ("authenticated", get(&self.authenticated)),
            ("handshakes_refused", get(&self.refused)),
            ("handshakes_timed_out", get(&self.timed_out)),
            ("closed_for_limit", get(&self.evicted)),
            ("sessions_refused", get(&self.sessions_refused)),
        ]
    }

    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The handshakes under way, oldest first.
#[derive(Default)]
struct Handshakes {
    next: u64,
    tasks: VecDeque<(u64, AbortHandle)>,
}

/// What every connection's task shares.
struct Shared {
    server: Server,
    acceptor: tokio_rustls::TlsAcceptor,
    answer: Arc<Answer>,
    stats: Arc<ListenerStats>,
    handshakes: Mutex<Handshakes>,
    /// [`MAX_HANDSHAKES`], or what the open file limit leaves room for.
    max_handshakes: usize,
    sessions: AtomicUsize,
}

/// How many handshakes the soft open file limit leaves room for.
fn handshake_room() -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit into a struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
    usize::try_from(soft.saturating_sub(OTHER_FDS)).unwrap_or(usize::MAX).clamp(64, MAX_HANDSHAKES)
}

/// Serves `listener` until `stop` says so, on a thread of its own:
/// TLS-authenticated by `server`, each request answered by `answer` with
/// the client's role. Returns the listener's counters.
pub fn serve(
    listener: TcpListener,
    server: Server,
    answer: Arc<Answer>,
    stop: Arc<dyn Fn() -> bool + Send + Sync>,
) -> std::io::Result<Arc<ListenerStats>> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
    let stats = Arc::new(ListenerStats::default());
    let shared = Arc::new(Shared {
        acceptor: tokio_rustls::TlsAcceptor::from(server.config.clone()),
        server,
        answer,
        stats: stats.clone(),
        handshakes: Mutex::new(Handshakes::default()),
        max_handshakes: handshake_room(),
        sessions: AtomicUsize::new(0),
    });
    std::thread::Builder::new().name("tls-listen".into()).spawn(move || {
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
            let mut poll_stop = tokio::time::interval(STOP_POLL);
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => {
                            start_handshake(&shared, tcp);
                            tokio::task::yield_now().await;
                        }
                        // Out of fds, say: back off rather than spin.
                        Err(_) => tokio::time::sleep(STOP_POLL).await,
                    },
                    _ = poll_stop.tick() => if stop() { return },
                }
            }
        })
    })?;
    Ok(stats)
}

/// Starts the handshake of `tcp` as a task, making room for it first.
/// Runs on the listener's one thread: the task cannot start before it is
/// listed.
fn start_handshake(shared: &Arc<Shared>, tcp: tokio::net::TcpStream) {
    ListenerStats::count(&shared.stats.accepted);
    let mut handshakes = shared.handshakes.lock().expect("handshakes lock");
    let id = handshakes.next;
    handshakes.next += 1;
    let task = tokio::spawn(handshake(shared.clone(), id, tcp));
    handshakes.tasks.push_back((id, task.abort_handle()));
    while handshakes.tasks.len() > shared.max_handshakes {
        let (_, oldest) = handshakes.tasks.pop_front().expect("over the limit, so not empty");
        oldest.abort();
        ListenerStats::count(&shared.stats.evicted);
    }
}

/// One handshake; an authenticated client is then served.
async fn handshake(shared: Arc<Shared>, id: u64, tcp: tokio::net::TcpStream) {
    let outcome = tokio::time::timeout(HANDSHAKE, shared.acceptor.accept(tcp)).await;
    shared.handshakes.lock().expect("handshakes lock").tasks.retain(|(i, _)| *i != id);
    let stats = &shared.stats;
    let tls = match outcome {
        Err(_) => return ListenerStats::count(&stats.timed_out),
        // tokio-rustls sent the alert that says why.
        Ok(Err(_)) => return ListenerStats::count(&stats.refused),
        Ok(Ok(tls)) => tls,
    };
    let Some(role) = shared.server.role(tls.get_ref().1) else { return ListenerStats::count(&stats.refused) };
    ListenerStats::count(&stats.authenticated);
    if shared.sessions.fetch_add(1, Ordering::AcqRel) >= MAX_SESSIONS {
        shared.sessions.fetch_sub(1, Ordering::AcqRel);
        ListenerStats::count(&stats.sessions_refused);
        return say_busy(tls).await;
    }
    let (tcp, conn) = tls.into_inner();
    let Ok(tcp) = tcp.into_std() else {
        shared.sessions.fetch_sub(1, Ordering::AcqRel);
        return;
    };
    let s = shared.clone();
    let spawned = std::thread::Builder::new().name("tls-session".into()).spawn(move || {
        session(conn, tcp, role, s.answer.as_ref());
        s.sessions.fetch_sub(1, Ordering::AcqRel);
    });
    if spawned.is_err() {
        shared.sessions.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Tells an authenticated client that every session is taken, within
/// [`HANDSHAKE`], and closes.
async fn say_busy(mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    use tokio::io::AsyncWriteExt;
    let message = format!("ferryd serves {MAX_SESSIONS} sessions at once: try again when one ends");
    let Ok(frame) = proto::frame(&Msg::Error { message }) else { return };
    let _ = tokio::time::timeout(HANDSHAKE, async {
        tls.write_all(&frame).await?;
        tls.shutdown().await
    })
    .await;
}

/// An authenticated client's requests, until it closes or stays silent
/// (or does not read its answers) for [`IDLE`].
fn session(conn: ServerConnection, tcp: std::net::TcpStream, role: Role, answer: &Answer) {
    let blocking = tcp.set_nonblocking(false).and_then(|()| tcp.set_read_timeout(Some(IDLE)));
    if blocking.and_then(|()| tcp.set_write_timeout(Some(IDLE))).is_err() {
        return;
    }
    let mut tls = StreamOwned::new(conn, tcp);
    loop {
        match proto::read_msg(&mut tls) {
            Ok(msg) => {
                if proto::write_msg(&mut tls, &answer(msg, role)).is_err() {
                    return;
                }
            }
            Err(ProtoError::Closed) => return,
            // A stream that framed badly is out of step: said, and closed.
            Err(e) => {
                let _ = proto::write_msg(&mut tls, &Msg::Error { message: e.to_string() });
                return;
            }
        }
    }
}
