//! Connecting to ferryd and building the NF's threads from what it sends.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_chain::frames::FrameCache;
use ferry_chain::plan::OutLink;
use ferry_chain::proto::{self, FdRole, Msg, Welcome};
use ferry_chain::shm::{self, ThreadBlock};
use ferry_ring::{EventFd, Notify, ShmRegion};
use ferry_xsk::{Umem, UmemConfig, XskSocket};

use crate::spin::SpinWindow;
use crate::thread::{NfThread, Out, PortSock, Target};
use crate::wait::PollSet;
use crate::SdkError;

/// A connected NF: its plan, its shared memory and its fds.
pub struct Nf {
    welcome: Welcome,
    umem: Arc<Umem>,
    region: ShmRegion,
    data: HashMap<u32, EventFd>,
    room: HashMap<u32, EventFd>,
    sockets: Mutex<HashMap<(u32, usize), OwnedFd>>,
    taps: HashMap<usize, Arc<OwnedFd>>,
    /// A hybrid NF's fast-path maps, until its control plane takes them.
    maps: Mutex<Vec<(String, OwnedFd)>>,
    /// Files ferryd opened for the NF, by path, until it takes them.
    files: Mutex<Vec<(String, OwnedFd)>>,
    stop: Arc<AtomicBool>,
    _ctrl: Arc<UnixStream>,
}

impl Nf {
    /// Connects using `FERRY_SOCKET` and `FERRY_NF`.
    pub fn connect_from_env() -> Result<Nf, SdkError> {
        Self::connect_from_env_with(&[])
    }

    /// As `connect_from_env`, declaring the NF's own counter names.
    pub fn connect_from_env_with(counters: &[&str]) -> Result<Nf, SdkError> {
        let path = std::env::var_os(proto::ENV_SOCKET).ok_or(SdkError::MissingEnv { var: proto::ENV_SOCKET })?;
        let nf = std::env::var(proto::ENV_NF).map_err(|_| SdkError::MissingEnv { var: proto::ENV_NF })?;
        Self::connect(Path::new(&path), &nf, counters)
    }

    /// Says hello to ferryd at `path` as NF `name` and maps what it sends.
    ///
    /// First the process makes itself non-dumpable: then no other process
    /// of its uid (another domain's NF, anything else running as that user)
    /// can open its fds or read its memory through /proc, so the UMEM and
    /// rings it is about to receive are its own. It has to happen here,
    /// after exec (exec makes a process dumpable again), and before hello:
    /// ferryd refuses a dumpable NF.
    pub fn connect(path: &Path, name: &str, counters: &[&str]) -> Result<Nf, SdkError> {
        // SAFETY: prctl with plain integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(SdkError::Undumpable(std::io::Error::last_os_error()));
        }
        let connect = || {
            UnixStream::connect(path).map_err(|source| SdkError::Connect { path: path.display().to_string(), source })
        };
        let (chain, key) = chain_and_key(path, name);
        let hello = Msg::Hello {
            key: key.clone(),
            chain,
            nf: name.to_string(),
            pid: std::process::id(),
            counters: counters.iter().map(|s| s.to_string()).collect(),
        };
        let proto::Answered { sock: ctrl, reply, fds } = proto::ask(connect, &hello)?;
        let welcome = match reply {
            Msg::Welcome(w) => *w,
            Msg::Error { message } => return Err(SdkError::Refused { nf: name.to_string(), message }),
            other => {
                return Err(SdkError::Refused { nf: name.to_string(), message: format!("unexpected reply {other:?}") })
            }
        };
        if fds.len() != welcome.fds.len() {
            return Err(SdkError::FdCount { got: fds.len(), want: welcome.fds.len() });
        }
        let d = &welcome.domain;
        let cfg = UmemConfig { frame_count: d.frames, frame_size: d.frame_size, headroom: 0 };
        let mut umem = None;
        let mut region = None;
        let (mut data, mut room, mut sockets) = (HashMap::new(), HashMap::new(), HashMap::new());
        let mut taps = HashMap::new();
        let (mut maps, mut files) = (Vec::new(), Vec::new());
        for (role, fd) in welcome.fds.iter().zip(fds) {
            match role {
                FdRole::Umem => umem = Some(Arc::new(Umem::from_fd(fd, cfg)?)),
                FdRole::Region => region = Some(ShmRegion::from_fd(fd)?),
                FdRole::RingData(r) => {
                    data.insert(*r, EventFd::from_owned(fd)?);
                }
                FdRole::RingRoom(r) => {
                    room.insert(*r, EventFd::from_owned(fd)?);
                }
                FdRole::Xsk { thread, port } => {
                    sockets.insert((*thread, *port), fd);
                }
                FdRole::Tap(k) => {
                    taps.insert(*k, Arc::new(fd));
                }
                FdRole::Map(name) => maps.push((name.clone(), fd)),
                FdRole::File(path) => files.push((path.clone(), fd)),
            }
        }
        let missing = |what: &'static str| SdkError::Refused { nf: name.to_string(), message: format!("no {what} fd") };
        let umem = umem.ok_or_else(|| missing("UMEM"))?;
        let region = region.ok_or_else(|| missing("region"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let ctrl = Arc::new(ctrl);
        // ferryd says nothing to a running NF but "stop" (or anything
        // else, which means the same). EOF means ferryd went away: the NF
        // stops, unless ferryd runs with --persist, when it keeps
        // forwarding and rejoins the next ferryd.
        let rejoin = welcome.outlives_ferryd.then(|| Rejoin {
            path: path.to_path_buf(),
            msg: Msg::Rejoin { chain: welcome.chain.clone(), nf: name.to_string(), key },
        });
        let (mut watch, flag) = (ctrl.clone(), stop.clone());
        let wake: Vec<EventFd> = welcome
            .nf
            .threads
            .iter()
            .filter_map(|t| data.get(&t.ring).and_then(|e: &EventFd| e.try_clone().ok()))
            .collect();
        std::thread::Builder::new().name("ferry-ctrl".into()).spawn(move || {
            // A message is "stop"; a closed or broken connection is ferryd
            // going away.
            while proto::recv(&watch).is_err() {
                match rejoin.as_ref().and_then(Rejoin::wait) {
                    Some(again) => watch = Arc::new(again),
                    None => break,
                }
            }
            flag.store(true, Ordering::Release);
            for e in &wake {
                let _ = e.notify(1);
            }
        })?;
        Ok(Nf {
            welcome,
            umem,
            region,
            data,
            room,
            sockets: Mutex::new(sockets),
            taps,
            maps: Mutex::new(maps),
            files: Mutex::new(files),
            stop,
            _ctrl: ctrl,
        })
    }

    /// The maps ferryd sent (a hybrid NF's fast-path maps, a flow
    /// monitor's or an IPS's table), by name; empty
    /// after the first call.
    pub fn take_maps(&self) -> Vec<(String, OwnedFd)> {
        std::mem::take(&mut *self.maps.lock().expect("maps lock"))
    }

    /// The map ferryd sent by `name`, if it did and it was not taken yet.
    pub fn take_map(&self, name: &str) -> Option<OwnedFd> {
        let mut maps = self.maps.lock().expect("maps lock");
        let at = maps.iter().position(|(n, _)| n == name)?;
        Some(maps.swap_remove(at).1)
    }

    /// The files ferryd opened for the NF to append to, by path; empty
    /// after the first call.
    pub fn take_files(&self) -> Vec<(String, OwnedFd)> {
        std::mem::take(&mut *self.files.lock().expect("files lock"))
    }

    /// The chain the NF is part of.
    pub fn chain(&self) -> &str {
        &self.welcome.chain
    }

    pub fn name(&self) -> &str {
        &self.welcome.nf.name
    }

    pub fn threads(&self) -> usize {
        self.welcome.nf.threads.len()
    }

    /// Names of the out-links, in hop order.
    pub fn out_links(&self) -> &[String] {
        &self.welcome.nf.out_names
    }

    /// Arguments from the chain file (`args:`).
    pub fn args(&self) -> &[String] {
        &self.welcome.nf.args
    }

    /// True once ferryd asked the NF to stop (or went away).
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn eventfd(map: &HashMap<u32, EventFd>, ring: u32) -> Result<Arc<EventFd>, SdkError> {
        let e = map
            .get(&ring)
            .ok_or(SdkError::Refused { nf: String::new(), message: format!("no eventfd for ring {ring}") })?;
        Ok(Arc::new(e.try_clone()?))
    }

    fn target(&self, tid: u32, ring: u32, my_tid: u32) -> Result<Target, SdkError> {
        let mut producer = self.region.ring(ring as usize)?.producer(my_tid as u16)?;
        producer.set_data_notify(Self::eventfd(&self.data, ring)?);
        producer.set_room_notify(Self::eventfd(&self.room, ring)?);
        Ok(Target { producer, tid, pending: Vec::with_capacity(64) })
    }

    /// Builds thread `index` (each exactly once).
    pub fn thread(&self, index: usize) -> Result<NfThread, SdkError> {
        let w = &self.welcome;
        let plan =
            w.nf.threads
                .get(index)
                .ok_or(SdkError::Refused { nf: w.nf.name.clone(), message: format!("no thread {index}") })?;
        let control = self.region.words(shm::CONTROL_WORDS)?;
        let owners = self.region.words(shm::OWNER_WORDS)?;
        if ThreadBlock::of(control.as_slice(), plan.tid).is_none() {
            return Err(SdkError::Refused {
                nf: w.nf.name.clone(),
                message: "thread id outside the control block".into(),
            });
        }
        let mut consumer = self.region.ring(plan.ring as usize)?.consumer()?;
        consumer.set_room_notify(Self::eventfd(&self.room, plan.ring)?);
        let mut ports = Vec::new();
        let mut port_slot = HashMap::new();
        for &p in &plan.ports {
            let rings = w.port_rings.get(p).copied().unwrap_or_default();
            let fd = self.sockets.lock().expect("not poisoned").remove(&(plan.index, p)).ok_or(SdkError::Refused {
                nf: w.nf.name.clone(),
                message: format!("no socket for thread {} port {p}", plan.index),
            })?;
            let sock = XskSocket::from_fd(fd, self.umem.clone(), rings.sizes())?;
            port_slot.insert(p, ports.len());
            // Receive frames only on ports that deliver to us.
            let fill_target = if w.port_rx.get(p).copied().unwrap_or(false) { rings.parked() } else { 0 };
            ports.push(PortSock {
                sock,
                port: p as u16,
                pending: Vec::with_capacity(64),
                fill_target,
                on_fill: 0,
                tx_moving: false,
            });
        }
        let eventfd = self
            .data
            .get(&plan.ring)
            .ok_or(SdkError::Refused { nf: w.nf.name.clone(), message: "no data eventfd".into() })?;
        let pollset =
            PollSet { eventfd: eventfd.try_clone()?, sockets: ports.iter().map(|p| p.sock.as_raw_fd()).collect() };
        consumer.set_data_notify(Arc::new(pollset));
        let mut outs = Vec::new();
        for o in &w.nf.outs {
            outs.push(match o {
                OutLink::Nf { rings, tids, .. } => Out::Nf {
                    targets: rings
                        .iter()
                        .zip(tids)
                        .map(|(&r, &t)| self.target(t, r, plan.tid))
                        .collect::<Result<_, _>>()?,
                },
                OutLink::Copy { ring, tid, .. } => Out::Copy { target: self.target(*tid, *ring, plan.tid)? },
                OutLink::Kernel { kernel } => Out::Kernel {
                    tap: self.taps.get(kernel).cloned().ok_or(SdkError::Refused {
                        nf: w.nf.name.clone(),
                        message: format!("no TAP fd for kernel hop {kernel}"),
                    })?,
                },
                OutLink::Port { port } => Out::Port {
                    sock: *port_slot.get(port).ok_or(SdkError::Refused {
                        nf: w.nf.name.clone(),
                        message: format!("out-link to port {port} without a socket"),
                    })?,
                },
            });
        }
        let block = ThreadBlock::of(control.as_slice(), plan.tid).expect("checked above");
        block.set(shm::T_PID, std::process::id() as u64);
        Ok(NfThread {
            nf_name: w.nf.name.clone(),
            index: plan.index,
            tid: plan.tid,
            cache: FrameCache::new(
                self.region.pool(shm::POOL)?,
                owners,
                control.clone(),
                plan.tid,
                w.domain.frame_size,
            ),
            control,
            capture: self.region.words(shm::CAPTURE_WORDS)?,
            taps: [None; shm::TAP_SLOTS],
            tapping: false,
            consumer,
            outs,
            ports,
            umem: self.umem.clone(),
            frame_size: w.domain.frame_size as u64,
            batch: w.nf.batch.max(1) as usize,
            poll: w.nf.poll,
            bp: w.nf.backpressure,
            down: w.nf.on_downstream_down,
            stop: self.stop.clone(),
            last_ack: 0,
            last_busy: Instant::now(),
            busy: false,
            empty_polls: 0,
            spin: SpinWindow::new(Duration::from_micros(w.nf.poll.spin_us.into())),
            scratch_desc: Vec::with_capacity(256),
            scratch_xdp: Vec::with_capacity(256),
            scratch_addr: Vec::with_capacity(1024),
            woken: Arc::new(AtomicBool::new(false)),
            wake_fd: Arc::new(eventfd.try_clone()?),
        })
    }

    /// Runs `body` on one OS thread per NF thread and waits for all of them.
    pub fn run<F>(&self, body: F) -> Result<(), SdkError>
    where
        F: Fn(NfThread) + Sync,
    {
        let threads: Vec<NfThread> = (0..self.threads()).map(|i| self.thread(i)).collect::<Result<_, _>>()?;
        std::thread::scope(|s| {
            for (i, th) in threads.into_iter().enumerate() {
                let body = &body;
                std::thread::Builder::new()
                    .name(format!("{}-{i}", self.name()))
                    .spawn_scoped(s, move || body(th))
                    .expect("spawn NF thread");
            }
        });
        Ok(())
    }
}

/// How an NF of a persistent ferryd finds the next one.
struct Rejoin {
    path: std::path::PathBuf,
    msg: Msg,
}

impl Rejoin {
    /// How often the NF knocks while no ferryd answers.
    const EVERY: std::time::Duration = std::time::Duration::from_millis(20);

    /// Knocks until a ferryd takes the NF back (its connection) or
    /// refuses it (None: the chain is gone, so the NF stops).
    fn wait(&self) -> Option<UnixStream> {
        loop {
            std::thread::sleep(Self::EVERY);
            let Ok(conn) = UnixStream::connect(&self.path) else { continue };
            if proto::send(&conn, &self.msg, &[]).is_err() {
                continue;
            }
            match proto::recv(&conn) {
                Ok((Msg::Ok, _)) => return Some(conn),
                Ok((Msg::Error { message }, _)) => {
                    // Said if it can be: a full or closed stderr must not
                    // stop this thread before it stops the NF.
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr(), "ferry: ferryd did not take this NF back: {message}");
                    return None;
                }
                // Closed before answering: a ferryd starting or stopping.
                _ => continue,
            }
        }
    }
}

/// The NF's chain and key. ferryd names the chain (`FERRY_CHAIN`) for
/// the NFs it starts, which need no key (it knows them by their pid). An
/// NF started by hand reads its key from `FERRY_KEY`'s file, else from
/// the file ferryd writes next to its socket; without `FERRY_CHAIN`, the
/// chain is the one whose keys hold this NF's. None found: an empty key,
/// which ferryd refuses for an NF it does not start.
fn chain_and_key(socket: &Path, nf: &str) -> (String, String) {
    let read = |file: &Path| std::fs::read_to_string(file).map(|k| k.trim().to_string()).unwrap_or_default();
    let chain = std::env::var(proto::ENV_CHAIN).unwrap_or_default();
    if let Some(file) = std::env::var_os(proto::ENV_KEY) {
        return (chain, read(Path::new(&file)));
    }
    if !chain.is_empty() {
        let key = read(&proto::key_path(socket, &chain, nf));
        return (chain, key);
    }
    let holding: Vec<String> = std::fs::read_dir(proto::keys_dir(socket))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join(nf).exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match holding.as_slice() {
        [only] => (only.clone(), read(&proto::key_path(socket, only, nf))),
        _ => (chain, String::new()),
    }
}
