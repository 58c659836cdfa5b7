//! `ferry chain capture`: copies of the frames at one point of a running
//! chain, as pcapng, while the chain keeps running.
//!
//! A point resolves to sites: NF threads (armed through their tap word,
//! `ferry_chain::capture`) or a port's XDP program (armed through its tap
//! map, `ferry_bpf::capture`). Each site copies what the point names into
//! a ring of its own and never waits for it; this thread drains the rings,
//! filters, orders the copies by time and writes pcapng blocks to a pipe
//! whose read end the admin client holds. When the client reads slowly the
//! written blocks wait here (up to [`MAX_PENDING`] bytes), then the rings
//! fill, and the sites lose and count copies: never a chain frame.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferry_chain::capture::{CopyMeta, Point, Tap, TapAt, MAX_SESSION};
use ferry_chain::filter::Filter;
use ferry_chain::proto::{CaptureRequest, CaptureStats};
use ferry_chain::shm;
use ferry_ring::{Record, RecordRing};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::blocks::interface_statistics::{InterfaceStatisticsBlock, InterfaceStatisticsOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

use crate::chain::{Chain, XdpNf};
use ferry_bpf::capture::{ArmedTap, TapSide};

/// pcapng bytes kept for a reader that is behind, before the sites' rings
/// are left to fill.
pub const MAX_PENDING: usize = 1 << 20;
/// How often an idle capture looks at its rings and its client.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// How long the last blocks wait for a stalled reader once the capture
/// has ended.
const LAST_WRITE: Duration = Duration::from_secs(2);

static NEXT_SESSION: AtomicU32 = AtomicU32::new(1);

/// One place a point's copies come from.
pub enum Site {
    /// An NF thread: domain index, thread id, where it taps.
    Thread { domain: usize, tid: u32, at: TapAt, what: String },
    /// An NF in XDP: its pipeline's tap, on its input or its output.
    Xdp { nf: XdpNf, side: TapSide, what: String },
}

impl Site {
    fn describe(&self) -> String {
        match self {
            Site::Thread { what, .. } | Site::Xdp { what, .. } => what.clone(),
        }
    }
}

/// A process NF of the plan, or one member of a fused NF.
enum Member {
    Process(usize),
    Fused { nf: usize, stage: usize, stages: Vec<String> },
}

impl Member {
    fn nf(&self) -> usize {
        match self {
            Member::Process(nf) | Member::Fused { nf, .. } => *nf,
        }
    }

    fn is_last(&self) -> bool {
        match self {
            Member::Process(_) => true,
            Member::Fused { stage, stages, .. } => stage + 1 == stages.len(),
        }
    }
}

fn member(chain: &Chain, name: &str) -> Option<Member> {
    for (i, nf) in chain.plan.nfs.iter().enumerate() {
        if nf.kind.as_deref() == Some(ferry_catalog::fused::FUSED) {
            let stages: Vec<String> = ferry_catalog::fused::stages(&nf.args)
                .map(|s| s.iter().map(|s| s.name.to_string()).collect())
                .unwrap_or_default();
            if let Some(stage) = stages.iter().position(|s| s == name) {
                return Some(Member::Fused { nf: i, stage, stages });
            }
        } else if nf.name == name {
            return Some(Member::Process(i));
        }
    }
    None
}

/// The sites of `point` in `chain`, or why it has none.
pub fn resolve(chain: &Chain, point: &Point) -> Result<Vec<Site>> {
    let plan = &chain.plan;
    let threads_of = |nf: usize, at: TapAt, what: &str| -> Vec<Site> {
        let p = &plan.nfs[nf];
        p.threads
            .iter()
            .map(|t| Site::Thread {
                domain: p.domain,
                tid: t.tid,
                at,
                what: format!("{} thread {} ({what})", p.name, t.index),
            })
            .collect()
    };
    let nf_named = |name: &str| {
        member(chain, name).with_context(|| {
            let names: Vec<&str> = plan.nfs.iter().map(|n| n.name.as_str()).collect();
            format!("chain {}: no NF {name:?} (NFs in processes: {})", plan.name, names.join(", "))
        })
    };
    // An NF in XDP, if `name` is one.
    let in_xdp = |name: &str, side: TapSide, what: String| -> Option<Result<Vec<Site>>> {
        let nf = chain.xdp_nf(name)?;
        Some(nf.map(|nf| {
            let what = format!("{name} in XDP on port {} ({what})", nf.port);
            vec![Site::Xdp { nf, side, what }]
        }))
    };
    let port_named = |name: &str| {
        plan.ports.iter().position(|p| p.name == name).with_context(|| {
            let names: Vec<&str> = plan.ports.iter().map(|p| p.name.as_str()).collect();
            format!("chain {}: no port {name:?} (its ports: {})", plan.name, names.join(", "))
        })
    };
    let hop_to = |nf: usize, to: &str| {
        let outs = &plan.nfs[nf].out_names;
        outs.iter().position(|o| o == to).with_context(|| {
            format!("NF {} has no link to {to:?} (it links to: {})", plan.nfs[nf].name, outs.join(", "))
        })
    };
    let sites = match point {
        Point::PortRx(port) if chain.xdp_entry(port_named(port)?).is_some() => {
            // NFs in XDP on the port's device see its frames first.
            let first = chain.xdp_entry(port_named(port)?).expect("checked");
            in_xdp(&first, TapSide::In, format!("port {port} rx")).expect("an NF in XDP")?
        }
        Point::PortRx(port) | Point::PortTx(port) => {
            let p = port_named(port)?;
            let rx = matches!(point, Point::PortRx(_));
            let at = if rx { TapAt::PortRx { port: p as u16 } } else { TapAt::PortTx { port: p as u16 } };
            let mut sites = Vec::new();
            for (i, nf) in plan.nfs.iter().enumerate() {
                if nf.threads.iter().any(|t| t.ports.contains(&p)) && (!rx || plan.ports[p].rx) {
                    sites.extend(threads_of(i, at, &format!("port {port} {}", if rx { "rx" } else { "tx" })));
                }
            }
            sites
        }
        Point::Link { from, to } if member(chain, from).is_none() => {
            in_xdp(from, TapSide::Out, format!("out to {to}")).unwrap_or_else(|| nf_named(from).map(|_| vec![]))?
        }
        Point::NfIn(name) | Point::NfOut(name) if member(chain, name).is_none() => {
            let (side, word) =
                if matches!(point, Point::NfIn(_)) { (TapSide::In, "in") } else { (TapSide::Out, "out") };
            in_xdp(name, side, word.to_string()).unwrap_or_else(|| nf_named(name).map(|_| vec![]))?
        }
        Point::Link { from, to } => match nf_named(from)? {
            Member::Fused { nf, stage, stages } if stage + 1 < stages.len() => {
                if stages[stage + 1] != *to {
                    bail!("NF {from} hands its frames to {} (they run fused), not to {to}", stages[stage + 1]);
                }
                threads_of(nf, TapAt::Stage { stage: stage as u16 }, &format!("fused stage {from} -> {to}"))
            }
            m => {
                let hop = hop_to(m.nf(), to)?;
                threads_of(m.nf(), TapAt::Output { hop: Some(hop as u16) }, &format!("out-link {hop} -> {to}"))
            }
        },
        Point::NfIn(name) => match nf_named(name)? {
            Member::Fused { nf, stage, .. } if stage > 0 => {
                threads_of(nf, TapAt::Stage { stage: stage as u16 - 1 }, &format!("fused, into {name}"))
            }
            m => threads_of(m.nf(), TapAt::Input, "input"),
        },
        Point::NfOut(name) => match nf_named(name)? {
            m @ Member::Fused { .. } if !m.is_last() => {
                let Member::Fused { nf, stage, .. } = m else { unreachable!() };
                threads_of(nf, TapAt::Stage { stage: stage as u16 }, &format!("fused, out of {name}"))
            }
            m => threads_of(m.nf(), TapAt::Output { hop: None }, "output"),
        },
    };
    if sites.is_empty() {
        bail!(
            "chain {}: nothing runs at {point} (a port's frames are seen by the NF that reads or sends them)",
            plan.name
        );
    }
    Ok(sites)
}

/// An armed site: a thread's tap word and ring (with the ring's counts
/// when it was armed), or a pipeline's tap.
enum Armed<'a> {
    Thread { ring: RecordRing<'a>, word: &'a std::sync::atomic::AtomicU64, tap: u64, taken0: u64, lost0: u64 },
    Xdp { tap: ArmedTap },
}

/// Arms every site (all or none): a thread in a free tap slot, a
/// pipeline if no other capture holds its tap.
fn arm<'a>(chain: &'a Chain, sites: Vec<Site>, snaplen: u16, session: u32) -> Result<Vec<Armed<'a>>> {
    let mut armed: Vec<Armed> = Vec::new();
    for site in sites {
        let done = match site {
            Site::Thread { domain, tid, at, what } => arm_thread(chain, domain, tid, Tap { at, snaplen, session })
                .with_context(|| {
                    format!("{what} is in {} captures already (at most that many at a time)", shm::TAP_SLOTS)
                }),
            Site::Xdp { nf: XdpNf { id, taps, .. }, side, what } => {
                match taps.arm(chain.id, id, side, snaplen.into(), session) {
                    Ok(Some(tap)) => Ok(Armed::Xdp { tap }),
                    Ok(None) => Err(anyhow::anyhow!(
                        "{what}: its pipeline is in {} captures already (at most that many at a time)",
                        ferry_bpf::capture::TAP_SLOTS
                    )),
                    Err(e) => Err(e.into()),
                }
            }
        };
        match done {
            Ok(a) => armed.push(a),
            Err(e) => {
                disarm(&mut armed);
                return Err(e);
            }
        }
    }
    Ok(armed)
}

fn arm_thread(chain: &Chain, domain: usize, tid: u32, tap: Tap) -> Option<Armed<'_>> {
    let dom = &chain.domains[domain];
    let word = tap.encode();
    let (word_ref, ring) = (0..shm::TAP_SLOTS).find_map(|slot| {
        let w = dom.block(tid).word(shm::T_TAPS + slot);
        let ring = shm::capture_ring(dom.capture.as_slice(), tid, slot)?;
        // Claimed before the ring is emptied: nobody else reads it then.
        w.compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire).ok()?;
        Some((w, ring))
    })?;
    // Copies an earlier capture left are dropped; copies of ours taken
    // meanwhile are told apart by the session.
    ring.skip_all();
    Some(Armed::Thread { ring, word: word_ref, tap: word, taken0: ring.taken(), lost0: ring.lost() })
}

/// Takes every tap off; what the pipelines' taps took and lost.
fn disarm(armed: &mut [Armed]) -> (u64, u64) {
    let (mut taken, mut lost) = (0, 0);
    for a in armed {
        match a {
            Armed::Thread { word, tap, .. } => {
                let _ = word.compare_exchange(*tap, 0, Ordering::AcqRel, Ordering::Acquire);
            }
            Armed::Xdp { tap } => {
                if let Ok((t, l)) = tap.disarm() {
                    (taken, lost) = (taken + t, lost + l);
                }
            }
        }
    }
    (taken, lost)
}

/// Starts a capture: checks the request and arms its sites. What
/// [`Capture::run`] then writes.
pub struct Capture<'a> {
    chain: &'a Chain,
    armed: Vec<Armed<'a>>,
    session: u32,
    filter: Filter,
    req: CaptureRequest,
    pub point: String,
    pub sites: Vec<String>,
}

impl<'a> Capture<'a> {
    pub fn start(chain: &'a Chain, req: &CaptureRequest) -> Result<Capture<'a>> {
        let point: Point = req.at.parse().map_err(anyhow::Error::msg)?;
        let filter: Filter = req.filter.parse()?;
        if req.snaplen > u16::MAX as u32 {
            bail!("snaplen {}: at most 65535 (0: whole frames)", req.snaplen);
        }
        let sites = resolve(chain, &point)?;
        let session = NEXT_SESSION.fetch_add(1, Ordering::Relaxed) % MAX_SESSION + 1;
        let described = sites.iter().map(Site::describe).collect();
        let armed = arm(chain, sites, req.snaplen as u16, session)?;
        let sites = described;
        Ok(Capture { chain, armed, session, filter, req: req.clone(), point: point.to_string(), sites })
    }

    /// Copies until the request's count or duration, the chain's removal,
    /// the client's stop (any message), or its going (its connection or
    /// the pipe closed), then disarms the sites and writes the statistics
    /// block.
    pub fn run(mut self, out: File, client: &UnixStream) -> Result<CaptureStats> {
        set_nonblocking(&out)?;
        let mut w = Writer::new(out, &self.req, &format!("{}:{}", self.chain.plan.name, self.point))?;
        let deadline = (self.req.duration_ms > 0).then(|| Instant::now() + Duration::from_millis(self.req.duration_ms));
        let mut stats = CaptureStats::default();
        let count = self.req.count;
        let full = |stats: &CaptureStats| count > 0 && stats.written >= count;
        while !full(&stats)
            && !self.chain.stop.load(Ordering::Acquire)
            && deadline.map_or(true, |d| Instant::now() < d)
            && !w.gone
        {
            if w.pending() < MAX_PENDING {
                self.take(&mut w, &mut stats)?;
            }
            w.flush_some()?;
            wait(&w, client, POLL_EVERY);
            match client_word(client) {
                ClientWord::Nothing => {}
                ClientWord::Stop => break,
                ClientWord::Gone => w.gone = true,
            }
        }
        let (xdp_taken, xdp_lost) = disarm(&mut self.armed);
        if !full(&stats) && !w.gone {
            // Copies taken before the disarm are all in the rings: a thread
            // or a program copies a frame before it passes it on.
            self.take(&mut w, &mut stats)?;
        }
        (stats.copied, stats.lost) = (xdp_taken, xdp_lost);
        for a in &self.armed {
            if let Armed::Thread { ring, taken0, lost0, .. } = a {
                stats.copied += ring.taken() - taken0;
                stats.lost += ring.lost() - lost0;
            }
        }
        w.finish(&stats)?;
        Ok(stats)
    }

    /// Drains every ring, orders what it took by time, filters and writes.
    fn take(&mut self, w: &mut Writer, stats: &mut CaptureStats) -> Result<()> {
        let mut copies: Vec<(CopyMeta, Vec<u8>)> = Vec::new();
        for a in &mut self.armed {
            match a {
                Armed::Thread { ring, .. } => {
                    ring.drain(|Record { meta, bytes }| copies.push((CopyMeta::of(meta), bytes)));
                }
                Armed::Xdp { tap } => {
                    tap.drain(|c| {
                        let meta = CopyMeta { monotonic_ns: c.ts_ns, session: c.session, orig_len: c.orig_len };
                        copies.push((meta, c.bytes))
                    });
                }
            }
        }
        copies.retain(|(m, _)| m.session == self.session);
        copies.sort_by_key(|(m, _)| m.monotonic_ns);
        for (meta, bytes) in copies {
            if self.req.count > 0 && stats.written >= self.req.count {
                break;
            }
            if !self.filter.matches(&bytes) {
                stats.filtered += 1;
                continue;
            }
            w.packet(meta, &bytes)?;
            stats.written += 1;
        }
        Ok(())
    }
}

/// pcapng blocks on their way to the client's pipe.
struct Writer {
    pcap: PcapNgWriter<Vec<u8>>,
    out: File,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, for the blocks' timestamps.
    epoch_offset_ns: u64,
    /// The reader closed its end.
    gone: bool,
}

impl Writer {
    fn new(out: File, req: &CaptureRequest, name: &str) -> Result<Writer> {
        let mut pcap = PcapNgWriter::new(Vec::new())?;
        pcap.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: req.snaplen,
            options: vec![
                InterfaceDescriptionOption::IfName(name.to_string().into()),
                // Timestamps in nanoseconds (the EPBs carry them so).
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        })?;
        let real = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
        let epoch_offset_ns = real.saturating_sub(ferry_sys::monotonic_ns());
        Ok(Writer { pcap, out, epoch_offset_ns, gone: false })
    }

    fn pending(&self) -> usize {
        self.pcap.get_ref().len()
    }

    fn packet(&mut self, meta: CopyMeta, bytes: &[u8]) -> Result<()> {
        self.pcap.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(meta.monotonic_ns + self.epoch_offset_ns),
            original_len: meta.orig_len,
            data: bytes.into(),
            options: vec![],
        })?;
        Ok(())
    }

    /// Writes what the pipe takes now.
    fn flush_some(&mut self) -> Result<()> {
        let buf = self.pcap.get_mut();
        while !buf.is_empty() && !self.gone {
            match self.out.write(buf) {
                Ok(n) => {
                    buf.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => self.gone = true,
                Err(e) => return Err(e).context("writing the capture"),
            }
        }
        Ok(())
    }

    /// The statistics block, then everything pending, for at most
    /// [`LAST_WRITE`].
    fn finish(mut self, stats: &CaptureStats) -> Result<()> {
        let now = ferry_sys::monotonic_ns() + self.epoch_offset_ns;
        self.pcap.write_pcapng_block(InterfaceStatisticsBlock {
            interface_id: 0,
            // In the interface's resolution, nanoseconds.
            timestamp: now,
            options: vec![
                InterfaceStatisticsOption::IsbIfRecv(stats.copied + stats.lost),
                InterfaceStatisticsOption::IsbIfDrop(stats.lost),
                InterfaceStatisticsOption::IsbFilterAccept(stats.copied - stats.filtered.min(stats.copied)),
            ],
        })?;
        let end = Instant::now() + LAST_WRITE;
        while self.pending() > 0 && !self.gone && Instant::now() < end {
            self.flush_some()?;
            poll_one(self.out.as_fd().as_raw_fd(), libc::POLLOUT, POLL_EVERY);
        }
        Ok(())
    }
}

/// A pipe: (read end, write end), close-on-exec.
pub fn pipe() -> Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: a valid array of two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    // SAFETY: two fresh fds nobody else owns.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

fn set_nonblocking(f: &File) -> Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error()).context("making the capture pipe non-blocking");
    }
    Ok(())
}

/// Waits up to `timeout` for room in the pipe (if blocks wait) or word
/// from the client.
fn wait(w: &Writer, client: &UnixStream, timeout: Duration) {
    let mut fds = [
        libc::pollfd { fd: client.as_raw_fd(), events: libc::POLLIN | libc::POLLRDHUP, revents: 0 },
        libc::pollfd { fd: w.out.as_raw_fd(), events: if w.pending() > 0 { libc::POLLOUT } else { 0 }, revents: 0 },
    ];
    // SAFETY: two valid pollfds.
    unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout.as_millis() as i32) };
}

fn poll_one(fd: i32, events: i16, timeout: Duration) {
    let mut p = libc::pollfd { fd, events, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
}

/// What the client said during a capture.
enum ClientWord {
    Nothing,
    /// A message (any): end the capture, everything taken written.
    Stop,
    /// Its connection closed: end it, no one reads any more.
    Gone,
}

/// The client asked the capture to stop (and its message waits).
pub fn client_stopped(client: &UnixStream) -> bool {
    matches!(client_word(client), ClientWord::Stop)
}

fn client_word(client: &UnixStream) -> ClientWord {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a valid buffer, without waiting.
    let n = unsafe {
        libc::recv(
            client.as_raw_fd(),
            &mut byte as *mut u8 as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1 => ClientWord::Stop,
        0 => ClientWord::Gone,
        _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock => ClientWord::Nothing,
        _ => ClientWord::Gone,
    }
}
