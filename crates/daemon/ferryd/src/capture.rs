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
use ferry_chain::capture::{CopyMeta, Point, Tap, TapAt, MAX_SESSION, TAP_DRAINING};
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
    let r = Resolver { chain, plan: &chain.plan };
    let sites = match point {
        Point::PortRx(port) | Point::PortTx(port) => r.port(port, matches!(point, Point::PortRx(_)))?,
        Point::Link { from, to } => r.link(from, to)?,
        Point::NfIn(name) => r.nf_side(name, true)?,
        Point::NfOut(name) => r.nf_side(name, false)?,
    };
    if sites.is_empty() {
        bail!(
            "chain {}: nothing runs at {point} (a port's frames are seen by the NF that reads or sends them)",
            r.plan.name
        );
    }
    Ok(sites)
}

/// Names in a placed chain, and the sites they have.
struct Resolver<'a> {
    chain: &'a Chain,
    plan: &'a ferry_chain::plan::ChainPlan,
}

impl Resolver<'_> {
    fn threads_of(&self, nf: usize, at: TapAt, what: &str) -> Vec<Site> {
        let p = &self.plan.nfs[nf];
        let site = |t: &ferry_chain::plan::ThreadPlan| Site::Thread {
            domain: p.domain,
            tid: t.tid,
            at,
            what: format!("{} thread {} ({what})", p.name, t.index),
        };
        p.threads.iter().map(site).collect()
    }

    fn nf_named(&self, name: &str) -> Result<Member> {
        member(self.chain, name).with_context(|| {
            let names: Vec<&str> = self.plan.nfs.iter().map(|n| n.name.as_str()).collect();
            format!("chain {}: no NF {name:?} (NFs in processes: {})", self.plan.name, names.join(", "))
        })
    }

    /// NF `name` in XDP, if it runs there.
    fn in_xdp(&self, name: &str, side: TapSide, what: &str) -> Option<Vec<Site>> {
        let nf = self.chain.xdp_nf(name)?;
        let what = format!("{name} in XDP on port {} ({what})", nf.port);
        Some(vec![Site::Xdp { nf, side, what }])
    }

    fn port_named(&self, name: &str) -> Result<usize> {
        self.plan.ports.iter().position(|p| p.name == name).with_context(|| {
            let names: Vec<&str> = self.plan.ports.iter().map(|p| p.name.as_str()).collect();
            format!("chain {}: no port {name:?} (its ports: {})", self.plan.name, names.join(", "))
        })
    }

    /// A port as received (`rx`) or as sent: NFs in XDP on its device see
    /// its frames first; else the threads that hold its sockets.
    fn port(&self, port: &str, rx: bool) -> Result<Vec<Site>> {
        let p = self.port_named(port)?;
        if let Some(first) = self.chain.xdp_entry(p).filter(|_| rx) {
            return Ok(self.in_xdp(&first, TapSide::In, &format!("port {port} rx")).unwrap_or_default());
        }
        let at = if rx { TapAt::PortRx { port: p as u16 } } else { TapAt::PortTx { port: p as u16 } };
        let what = format!("port {port} {}", if rx { "rx" } else { "tx" });
        let mut sites = Vec::new();
        for (i, nf) in self.plan.nfs.iter().enumerate() {
            if nf.threads.iter().any(|t| t.ports.contains(&p)) && (!rx || self.plan.ports[p].rx) {
                sites.extend(self.threads_of(i, at, &what));
            }
        }
        Ok(sites)
    }

    /// What NF `from` sends to `to`.
    fn link(&self, from: &str, to: &str) -> Result<Vec<Site>> {
        if member(self.chain, from).is_none() {
            let known =
                member(self.chain, to).is_some() || self.chain.xdp_nf(to).is_some() || self.port_named(to).is_ok();
            if !known {
                bail!("chain {}: no NF or port {to:?} for {from} to send to", self.plan.name);
            }
            let sites = self.in_xdp(from, TapSide::Out, &format!("out to {to}"));
            return sites.map_or_else(|| self.nf_named(from).map(|_| vec![]), Ok);
        }
        match self.nf_named(from)? {
            Member::Fused { nf, stage, stages } if stage + 1 < stages.len() => {
                if stages[stage + 1] != to {
                    bail!("NF {from} hands its frames to {} (they run fused), not to {to}", stages[stage + 1]);
                }
                Ok(self.threads_of(nf, TapAt::Stage { stage: stage as u16 }, &format!("fused stage {from} -> {to}")))
            }
            m => {
                let outs = &self.plan.nfs[m.nf()].out_names;
                let hop = outs
                    .iter()
                    .position(|o| o == to)
                    .with_context(|| format!("NF {from} has no link to {to:?} (it links to: {})", outs.join(", ")))?;
                let at = TapAt::Output { hop: Some(hop as u16) };
                Ok(self.threads_of(m.nf(), at, &format!("out-link {hop} -> {to}")))
            }
        }
    }

    /// What NF `name` takes in (`input`) or sends on.
    fn nf_side(&self, name: &str, input: bool) -> Result<Vec<Site>> {
        if member(self.chain, name).is_none() {
            let (side, word) = if input { (TapSide::In, "in") } else { (TapSide::Out, "out") };
            return self.in_xdp(name, side, word).map_or_else(|| self.nf_named(name).map(|_| vec![]), Ok);
        }
        let m = self.nf_named(name)?;
        Ok(match (m, input) {
            (Member::Fused { nf, stage, .. }, true) if stage > 0 => {
                self.threads_of(nf, TapAt::Stage { stage: stage as u16 - 1 }, &format!("fused, into {name}"))
            }
            (m, true) => self.threads_of(m.nf(), TapAt::Input, "input"),
            (m, false) if !m.is_last() => {
                let Member::Fused { nf, stage, .. } = m else { unreachable!("a process NF is its own last") };
                self.threads_of(nf, TapAt::Stage { stage: stage as u16 }, &format!("fused, out of {name}"))
            }
            (m, false) => self.threads_of(m.nf(), TapAt::Output { hop: None }, "output"),
        })
    }
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
                stop_copying(&mut armed);
                release(&mut armed);
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

/// Stops every site's copies, keeping the slots (so that this capture
/// alone reads their rings until [`release`]); what the pipelines' taps
/// took and lost.
fn stop_copying(armed: &mut [Armed]) -> (u64, u64) {
    let (mut taken, mut lost) = (0, 0);
    for a in armed {
        match a {
            Armed::Thread { word, tap, .. } => {
                let _ = word.compare_exchange(*tap, TAP_DRAINING, Ordering::AcqRel, Ordering::Acquire);
            }
            Armed::Xdp { tap } => {
                if let Ok((t, l)) = tap.stop() {
                    (taken, lost) = (taken + t, lost + l);
                }
            }
        }
    }
    (taken, lost)
}

/// Frees every slot [`stop_copying`] kept.
fn release(armed: &mut [Armed]) {
    for a in armed {
        match a {
            Armed::Thread { word, .. } => {
                let _ = word.compare_exchange(TAP_DRAINING, 0, Ordering::AcqRel, Ordering::Acquire);
            }
            Armed::Xdp { tap } => {
                let _ = tap.release();
            }
        }
    }
}

/// Starts a capture: checks the request and arms its sites. What
/// [`Capture::run`] then writes.
pub struct Capture<'a> {
    chain: &'a Chain,
    armed: Vec<Armed<'a>>,
    session: u32,
    filter: Filter,
    req: CaptureRequest,
    /// Its sites' taps are off and its slots free again.
    released: bool,
    pub point: String,
    pub sites: Vec<String>,
}

impl Drop for Capture<'_> {
    /// A capture that ended early (an error writing, a client gone before
    /// it ran) takes its taps off all the same.
    fn drop(&mut self) {
        if !self.released {
            stop_copying(&mut self.armed);
            release(&mut self.armed);
        }
    }
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
        // A filter reads the whole frame (the flow parse checks the IP
        // lengths): the sites copy it whole, the snap length is applied
        // when written.
        let site_snaplen = if req.filter.trim().is_empty() { req.snaplen as u16 } else { 0 };
        let armed = arm(chain, sites, site_snaplen, session)?;
        let (req, point, sites) = (req.clone(), point.to_string(), described);
        Ok(Capture { chain, armed, session, filter, req, released: false, point, sites })
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
        let (xdp_taken, xdp_lost) = stop_copying(&mut self.armed);
        if !full(&stats) && !w.gone {
            // Copies taken before the stop are all in the rings: a thread
            // or a program copies a frame before it passes it on. (A thread
            // reads its tap once per burst: copies of the burst under way
            // come after this and are counted, not written.)
            self.take(&mut w, &mut stats)?;
        }
        (stats.copied, stats.lost) = (xdp_taken, xdp_lost);
        for a in &self.armed {
            if let Armed::Thread { ring, taken0, lost0, .. } = a {
                stats.copied += ring.taken().wrapping_sub(*taken0);
                stats.lost += ring.lost().wrapping_sub(*lost0);
            }
        }
        release(&mut self.armed);
        self.released = true;
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
            let snap = if self.req.snaplen == 0 { bytes.len() } else { bytes.len().min(self.req.snaplen as usize) };
            w.packet(meta, &bytes[..snap])?;
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
