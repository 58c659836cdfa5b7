//! Floods of connections that never say a word, against each of ferryd's
//! listeners in turn: its mutual-TLS port, its NF socket and its admin
//! socket. Each flood holds [`HELD`] connections at once and opens a new
//! one for every one ferryd closes. Meanwhile the operator's requests are
//! answered every time, an NF that is killed restarts and rejoins, and
//! the listeners count what they closed to make room. Loopback and Unix
//! sockets only; every flood is bounded in connections and in time.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::chain::*;
use common::*;
use ferry_chain::proto::{self, Msg, Status};
use ferry_cli::chainctl::{self, RunningChain};

/// Connections a flood holds at once: far more than the Unix sockets let
/// wait (16 of one uid on the NF socket, 64 on the admin socket).
const HELD: usize = 1500;
/// A flood stops by itself after this long, whatever the test does.
const FLOOD_LIMIT: Duration = Duration::from_secs(120);
/// Requests the operator makes under each flood.
const REQUESTS: usize = 5;

/// A thread holding up to HELD connections that never send anything,
/// replacing each one the other side closes.
struct Flood {
    stop: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Flood {
    /// `connect` opens one non-blocking connection.
    fn start(connect: impl Fn() -> std::io::Result<Box<dyn Read + Send>> + Send + 'static) -> Flood {
        let (stop, held) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (s, h) = (stop.clone(), held.clone());
        let thread = std::thread::spawn(move || {
            let (start, mut opened, mut conns) = (Instant::now(), 0u64, Vec::<Box<dyn Read + Send>>::new());
            while !s.load(Ordering::Relaxed) && start.elapsed() < FLOOD_LIMIT {
                // Closed by the other side: read gives 0, or an error that
                // is not "nothing yet".
                conns.retain_mut(
                    |c| matches!(c.read(&mut [0u8; 64]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                );
                while conns.len() < HELD {
                    match connect() {
                        Ok(c) => {
                            conns.push(c);
                            opened += 1;
                        }
                        Err(_) => break,
                    }
                }
                h.fetch_max(conns.len(), Ordering::Relaxed);
                // Pacing between passes over the connections.
                std::thread::sleep(Duration::from_millis(1));
            }
            opened
        });
        Flood { stop, held, thread: Some(thread) }
    }

    /// A flood of the Unix socket at `path`.
    fn unix(path: std::path::PathBuf) -> Flood {
        Flood::start(move || {
            let c = UnixStream::connect(&path)?;
            c.set_nonblocking(true)?;
            Ok(Box::new(c))
        })
    }

    /// Waits until the flood has held HELD connections at once.
    fn wait_full(&self) {
        wait_until("the flood holding its connections", || self.held.load(Ordering::Relaxed) >= HELD);
    }

    /// Stops the flood; the connections it opened in all.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Room for a flood's fds in this process (and ferryd, which inherits it).
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a struct we own; as root the hard
    // limit may be raised too.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_max = lim.rlim_max.max(16384);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0, "{}", std::io::Error::last_os_error());
    }
}

/// `listener.event` of ferryd's listener counters.
fn listener(s: &Status, key: &str) -> u64 {
    s.listeners.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
}

/// Waits until ferryd's listener counter `key` has counted something.
fn wait_counted(rc: &RunningChain, key: &str) {
    wait_until(key, || rc.status().is_ok_and(|s| listener(&s, key) > 0));
}

/// src -> snk, in memory.
const CHAIN: &str = r#"
name: flood
domains: [ { name: main, frames: 2048 } ]
nfs:
  - { name: src, domain: main, kind: source, args: ["rate=1000"] }
  - { name: snk, domain: main, kind: sink }
links:
  - { from: src, to: snk }
"#;

/// ferryd for host h1 with its TLS listener; returns it and the address.
fn tls_ferryd(dir: &TempDir, tls: &Path) -> (RunningChain, String) {
    let (chain, socket) = (dir.path("flood.yaml"), dir.path("ferryd.sock"));
    std::fs::write(&chain, CHAIN).unwrap();
    let child = Command::new(chainctl::ferryd_bin().unwrap())
        .arg(&chain)
        .arg("--socket")
        .arg(&socket)
        .args(["--host", "h1", "--listen", "127.0.0.1:0", "--no-metrics", "--tls-dir"])
        .arg(tls)
        .env("FERRY_HOST", chainctl::host_bin().unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let admin = proto::admin_socket(&socket);
    let listen = wait_for("ferryd's TLS listener", || match proto::request(&admin, &Msg::Info) {
        Ok(Msg::InfoReply { listen: Some(l), .. }) => Some(l),
        _ => None,
    });
    let mut rc = RunningChain { child, socket, admin, name: "flood".into() };
    rc.wait_connected(HANG_GUARD).expect("NFs connected");
    (rc, listen)
}

#[test]
fn floods_of_silent_connections_lock_no_one_out() {
    if !privileged("flood") {
        return;
    }
    raise_fd_limit();
    let dir = TempDir::new("flood");
    let tls = dir.path("tls");
    let out = Command::new(FERRY).args(["tls", "init"]).arg(&tls).args(["--hosts", "h1"]).output().unwrap();
    assert!(out.status.success(), "ferry tls init: {}", String::from_utf8_lossy(&out.stderr));
    let (rc, listen) = tls_ferryd(&dir, &tls);

    // The TLS port: every operator request is answered.
    let to = listen.clone();
    let flood = Flood::start(move || {
        let c = TcpStream::connect(&to)?;
        c.set_nonblocking(true)?;
        Ok(Box::new(c))
    });
    flood.wait_full();
    for _ in 0..REQUESTS {
        let status = Msg::Status { chain: "flood".into() };
        match ferry_remote::request_as(&listen, "h1", &tls, ferry_remote::ADMIN, &status, HANG_GUARD) {
            Ok(Msg::StatusReply(s)) => assert_eq!(s.chain, "flood"),
            other => panic!("the operator's request under a flood of the TLS port: {other:?}"),
        }
    }
    wait_counted(&rc, "tls.handshakes_timed_out");
    let opened = flood.stop();
    eprintln!("TLS flood: {opened} connections opened, {HELD} held");

    // The NF socket: a killed NF restarts and rejoins.
    let flood = Flood::unix(rc.socket.clone());
    flood.wait_full();
    // SAFETY: plain kill of the NF process.
    assert_eq!(unsafe { libc::kill(pid_of(&rc.status().unwrap(), "snk") as i32, libc::SIGKILL) }, 0);
    wait_until("snk restarted and rejoined under a flood of the NF socket", || {
        rc.status().is_ok_and(|s| s.nfs.iter().any(|n| n.name == "snk" && n.connected && n.restarts == 1))
    });
    wait_counted(&rc, "nf_socket.closed_for_limit");
    let opened = flood.stop();
    eprintln!("NF socket flood: {opened} connections opened, {HELD} held");

    // The admin socket: root's requests are answered.
    let flood = Flood::unix(rc.admin.clone());
    flood.wait_full();
    for _ in 0..REQUESTS {
        let s = chainctl::status(&rc.admin, "flood").expect("root's request under a flood of the admin socket");
        assert_eq!(s.chain, "flood");
    }
    let s = rc.status().unwrap();
    assert!(listener(&s, "admin_socket.closed_for_limit") > 0, "{:?}", s.listeners);
    let opened = flood.stop();
    eprintln!("admin socket flood: {opened} connections opened, {HELD} held");
    eprintln!("{}", chainctl::status_table(&rc.status().unwrap()));
    rc.shutdown().unwrap();
}
