//! ferryd's control protocol: framed, versioned messages on a Unix stream
//! socket, with fds attached by SCM_RIGHTS.
//!
//! A frame is a 12-byte header — magic `"FY"`, version, kind, body length —
//! followed by a JSON body. The receiver checks magic, version and length
//! before reading the body; a bad frame gets an [`Msg::Error`] reply and the
//! connection is closed, and ferryd goes on serving everybody else.

use std::io::{Read, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

use crate::plan::{DomainPlan, NfPlan};

pub const MAGIC: [u8; 2] = *b"FY";
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 12;
/// Largest body accepted.
pub const MAX_BODY: u32 = 1 << 20;

/// Longest client-supplied string (in characters) that an error reply or
/// a log line repeats; see [`echoed`].
pub const MAX_ECHOED: usize = 64;

/// A string a client sent, as ferryd repeats it in error replies and logs:
/// quoted, and cut to [`MAX_ECHOED`] characters with its full length noted,
/// so a client cannot make ferryd write or send back megabytes.
pub fn echoed(client: &str) -> String {
    if client.chars().count() <= MAX_ECHOED {
        return format!("{client:?}");
    }
    let cut: String = client.chars().take(MAX_ECHOED).collect();
    format!("{cut:?}… ({} bytes)", client.len())
}

/// Environment variables ferryd sets for the NFs it starts.
pub const ENV_SOCKET: &str = "FERRY_SOCKET";
pub const ENV_CHAIN: &str = "FERRY_CHAIN";
pub const ENV_NF: &str = "FERRY_NF";
/// For an NF ferryd does not start: the file with its key, if not at
/// [`key_path`].
pub const ENV_KEY: &str = "FERRY_KEY";

/// Where ferryd writes the key of NF `nf` of chain `chain` that it does
/// not start itself: `<socket>.keys/<chain>/<nf>`, readable only by the
/// NF's user.
pub fn key_path(socket: &std::path::Path, chain: &str, nf: &str) -> std::path::PathBuf {
    keys_dir(socket).join(chain).join(nf)
}

/// The directory of every chain's keys: `<socket>.keys`.
pub fn keys_dir(socket: &std::path::Path) -> std::path::PathBuf {
    let mut dir = socket.as_os_str().to_owned();
    dir.push(".keys");
    std::path::PathBuf::from(dir)
}

/// ferryd's admin socket next to its NF socket `socket`: `<socket>.admin`.
pub fn admin_socket(socket: &std::path::Path) -> std::path::PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".admin");
    std::path::PathBuf::from(p)
}

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection closed")]
    Closed,
    #[error("bad frame: {0}")]
    BadFrame(String),
    #[error("protocol version {found} (this build speaks {VERSION})")]
    BadVersion { found: u16 },
    #[error("bad message body: {0}")]
    BadBody(#[from] serde_json::Error),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("fd passing: {0}")]
    Fds(#[from] ferry_xsk::XskError),
    #[error(
        "ferryd closed the request unread {tries} times to make room for other connections \
         (a flood of its socket?): try again"
    )]
    Busy { tries: usize },
}

/// Every message, both directions.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Msg {
    /// NF -> ferryd: "I am NF `nf`". Its counter names are stored for stats.
    /// `key`: the NF's key if ferryd did not start it (see `key_path`);
    /// empty for an NF ferryd started, which it knows by its pid.
    Hello {
        /// The chain's name (`FERRY_CHAIN`); empty: the only chain.
        #[serde(default)]
        chain: String,
        nf: String,
        pid: u32,
        counters: Vec<String>,
        #[serde(default)]
        key: String,
    },
    /// ferryd -> NF: everything it needs, plus fds in the order of `fds`.
    Welcome(Box<Welcome>),
    /// NF -> a restarted ferryd (`ferryd --persist`): "I am NF `nf`,
    /// still running with what the ferryd before you sent me". No fds
    /// either way; the reply is `Ok` or `Error`. ferryd knows the NF by
    /// its pid and start time (recorded in its state), plus its key if
    /// ferryd does not start it.
    Rejoin {
        chain: String,
        nf: String,
        #[serde(default)]
        key: String,
    },
    /// Admin -> ferryd (on the admin socket, as the rest down to
    /// `Shutdown`): chain `chain`'s status (empty: the only chain).
    Status {
        #[serde(default)]
        chain: String,
    },
    StatusReply(Box<Status>),
    /// Pause chain `chain`'s domains, check frame conservation, resume.
    Audit {
        #[serde(default)]
        chain: String,
    },
    AuditReply {
        domains: Vec<AuditReport>,
    },
    /// Deploy the chain file `file` (a path ferryd reads) next to the
    /// chains already running, its placeholders `{KEY}` filled with
    /// `set`'s values.
    Deploy {
        file: String,
        #[serde(default)]
        set: Vec<(String, String)>,
    },
    /// Check that [`Msg::Deploy`] of the same would deploy, deploying
    /// nothing: `Deployed` with id 0, or an error. (A message of its own:
    /// a ferryd that does not know it refuses it rather than deploy.)
    CheckDeploy {
        file: String,
        #[serde(default)]
        set: Vec<(String, String)>,
    },
    Deployed(Box<ChainSummary>),
    /// Stop chain `chain`'s NFs and release everything it holds.
    Remove {
        chain: String,
    },
    List,
    ListReply {
        chains: Vec<ChainSummary>,
    },
    /// Re-read the configuration files chain `chain`'s hybrid NFs name
    /// (`config=FILE`) and apply them where they run, without a restart.
    Reload {
        chain: String,
    },
    /// Per hybrid NF: what became of the reload.
    Reloaded {
        nfs: Vec<NfReload>,
    },
    /// ferryd itself: where it serves metrics.
    Info,
    InfoReply {
        /// `host:port` of `GET /metrics`, if served.
        metrics: Option<String>,
        /// `host:port` of its mutual-TLS admin listener, if it has one.
        #[serde(default)]
        listen: Option<String>,
    },
    /// Admin -> the ferryd of one host of a chain over hosts
    /// ([`crate::hosts`]): the chain file's text; it answers with the MAC
    /// of its fabric device, which the other hosts' forwarders send to.
    Fabric {
        text: String,
        origin: String,
    },
    FabricReply {
        host: String,
        mac: String,
    },
    /// Deploy this host's part of the chain file `text` (`origin` names it
    /// in errors), given every host's fabric MAC (host, MAC).
    DeployPart {
        text: String,
        origin: String,
        macs: Vec<(String, String)>,
    },
    /// Admin (root's admin socket only) -> ferryd: copy the frames at a
    /// point of chain `chain` into pcapng. The reply is `CaptureStarted`
    /// with the read end of a pipe the pcapng comes through; when the
    /// capture ends (its count or duration, the reader gone, the chain
    /// removed), ferryd closes the pipe and sends `CaptureDone`.
    Capture(Box<CaptureRequest>),
    CaptureStarted {
        /// The point as ferryd resolved it, and where it copies from.
        point: String,
        sites: Vec<String>,
    },
    CaptureDone(CaptureStats),
    /// Stop every chain and exit.
    Shutdown,
    Ok,
    Error {
        message: String,
    },
    /// ferryd closed the connection without reading the request, to make
    /// room for other connections: sending it again is safe ([`ask`]).
    Busy,
}

/// What `ferry chain capture` asks for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct CaptureRequest {
    /// Empty: the only chain.
    pub chain: String,
    /// A [`crate::capture::Point`] in its text form.
    pub at: String,
    /// Bytes kept of each frame (0: all of it, up to 65535).
    pub snaplen: u32,
    /// Stop after this many frames written (0: no limit).
    pub count: u64,
    /// Stop after this many milliseconds (0: no limit).
    pub duration_ms: u64,
    /// A [`crate::filter::Filter`] in its text form (empty: every frame).
    pub filter: String,
}

/// What a capture took, and what it lost.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct CaptureStats {
    /// Copies the point's threads or programs took.
    pub copied: u64,
    /// Copies lost because the capture fell behind (never the chain's
    /// frames: those went on).
    pub lost: u64,
    /// Copies the filter did not take.
    pub filtered: u64,
    /// Frames written to the pcapng.
    pub written: u64,
}

/// One NF's part of a reload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NfReload {
    pub nf: String,
    /// `applied`; `failed` (its log says why: its tables keep what they
    /// had, while a firewall's nftables ruleset, which ferryd applies
    /// first, is already the new one); `not running` (it reads the file
    /// when it starts); or `no answer`.
    pub outcome: String,
}

/// The fds of a Welcome, in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum FdRole {
    Umem,
    Region,
    /// Data (consumer waits) and room (producers wait) eventfds of ring i.
    RingData(u32),
    RingRoom(u32),
    /// AF_XDP socket of thread `thread` on port `port`.
    Xsk {
        thread: u32,
        port: usize,
    },
    /// The TAP device of kernel hop `i`.
    Tap(usize),
    /// A hybrid NF's fast-path map, by its name in `bpf/include/ferry_hybrid_maps.h`: its
    /// control plane reads and writes the map through this fd, with no
    /// capability of its own.
    Map(String),
    /// A file ferryd opened for the NF to append to, by the path its
    /// arguments give (an IPS's EVE file): the NF's own user need not be
    /// able to open it.
    File(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    pub chain: String,
    pub nf_index: usize,
    pub nf: NfPlan,
    pub domain: DomainPlan,
    pub fds: Vec<FdRole>,
    /// Per port of the chain: its sockets' ring sizes.
    pub port_rings: Vec<crate::spec::PortRings>,
    /// Per port of the chain: whether it delivers received frames.
    pub port_rx: Vec<bool>,
    /// How many times this NF has been (re)started.
    pub generation: u64,
    /// ferryd runs with `--persist`: when the control socket closes, the
    /// NF keeps forwarding and rejoins the next ferryd (`Msg::Rejoin`)
    /// instead of stopping.
    #[serde(default)]
    pub outlives_ferryd: bool,
}

/// One deployed chain, as `ferry chain list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct ChainSummary {
    /// Assigned by ferryd, never reused while it runs (a failed deploy gives
    /// its ids back: no chain ran with them).
    pub id: u32,
    pub name: String,
    /// The chain file it came from.
    pub file: String,
    pub nfs: usize,
    pub connected: usize,
    pub domains: usize,
    /// Where each NF runs and why (`ferry chain deploy --explain`).
    #[serde(default)]
    pub placement: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Status {
    pub chain: String,
    #[serde(default)]
    pub id: u32,
    pub nfs: Vec<NfStatus>,
    pub domains: Vec<DomainStatus>,
    #[serde(default)]
    pub ports: Vec<PortStatus>,
    /// NFs the orchestrator placed in XDP.
    #[serde(default)]
    pub offloaded: Vec<OffloadedStatus>,
    /// A chain over hosts: this host's NSH forwarder's counters (shared by
    /// its chains), by name.
    #[serde(default)]
    pub nsh: Vec<(String, u64)>,
    /// The daemon's listeners (NF socket, admin socket, mutual TLS): what
    /// became of their connections, by `listener.event`.
    #[serde(default)]
    pub listeners: Vec<(String, u64)>,
}

/// An NF running as elements of the XDP pipeline on a port.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct OffloadedStatus {
    pub name: String,
    /// Assigned by ferryd, unique among all its chains' NFs.
    pub id: u32,
    pub kind: String,
    /// The port whose device runs it.
    pub port: String,
    /// Packets, by counter name.
    pub counters: Vec<(String, u64)>,
    /// A flow monitor's flows: how many, and the busiest (at most 1000).
    #[serde(default)]
    pub flows_total: u64,
    #[serde(default)]
    pub flows: Vec<FlowStatus>,
}

/// One flow a flow monitor counted.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct FlowStatus {
    pub src: String,
    pub dst: String,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct NfStatus {
    pub name: String,
    /// Assigned by ferryd, unique among all its chains' NFs.
    #[serde(default)]
    pub id: u32,
    pub domain: String,
    pub pid: Option<u32>,
    /// The uid it runs as (its domain's allocated uid, or its named user's).
    #[serde(default)]
    pub uid: Option<u32>,
    pub connected: bool,
    pub restarts: u32,
    /// Adopted by this ferryd from the one before (`--persist`) and
    /// running, but not rejoined yet.
    #[serde(default)]
    pub awaiting_rejoin: bool,
    /// Per thread: framework counters by name, then NF counters by name.
    pub threads: Vec<Vec<(String, u64)>>,
    /// Per thread: its receive ring (frames queued, slots) and its loop
    /// iterations.
    #[serde(default)]
    pub rings: Vec<RingStatus>,
    /// CPU time of the NF's process so far (user + system), while it runs.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// Its smart polling as ferryd settled it (`ChainPlan::settle_polling`).
    #[serde(default)]
    pub poll: crate::spec::PollSpec,
    /// A flow monitor's flows (as of its last export, at most 100 ms
    /// old): how many, and the busiest (at most 1000).
    #[serde(default)]
    pub flows_total: u64,
    #[serde(default)]
    pub flows: Vec<FlowStatus>,
    /// An IPS's alerts per rule, over its threads (as of their last
    /// export, at most 100 ms old), by gid then sid.
    #[serde(default)]
    pub alerts: Vec<RuleAlerts>,
}

/// The alerts one rule raised.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct RuleAlerts {
    pub gid: u32,
    pub sid: u32,
    pub alerts: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct RingStatus {
    pub depth: u64,
    pub capacity: u64,
    /// Data-loop iterations of the thread (each one a receive call).
    pub loops: u64,
}

/// A receiving port's XDP program: packets and bytes by verdict.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct PortStatus {
    pub name: String,
    /// (verdict, packets, bytes).
    pub verdicts: Vec<(String, u64, u64)>,
    /// A classifier port's frames per rule.
    #[serde(default)]
    pub classified: Option<ClassifiedStatus>,
}

/// What a classifier port's rules took.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct ClassifiedStatus {
    /// (rule, as `out=N,...`; its entry's port; frames it took), in order.
    pub rules: Vec<(String, String, u64)>,
    /// Frames no rule took (dropped or to the kernel).
    pub unmatched: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct DomainStatus {
    pub name: String,
    /// Its tenant, if the chain declares tenants.
    #[serde(default)]
    pub tenant: Option<String>,
    pub frames_total: u64,
    pub in_pool: u64,
    pub reclaimed: u64,
    pub audits: u64,
    /// Sums over every audit so far; both must stay 0.
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub duplicated: u64,
}

/// Where every frame of a domain was at a paused instant.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct AuditReport {
    pub domain: String,
    pub frames_total: u64,
    pub in_pool: u64,
    pub in_rings: u64,
    pub held_by_threads: u64,
    /// In no place: a leak (must be 0).
    pub lost: u64,
    /// In two places at once: corruption (must be 0).
    pub duplicated: u64,
    /// Reclaimed by this audit (frames of dead threads).
    pub reclaimed: u64,
    /// Threads that did not acknowledge the pause in time.
    pub unresponsive: Vec<u32>,
    /// Threads found dead, whose frames and rings this audit reclaimed.
    #[serde(default)]
    pub dead: Vec<u32>,
}

impl AuditReport {
    /// The invariant: every frame in exactly one place.
    pub fn conserved(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.in_pool + self.in_rings + self.held_by_threads == self.frames_total
            && self.unresponsive.is_empty()
    }
}

fn kind_of(m: &Msg) -> u16 {
    match m {
        Msg::Hello { .. } => 1,
        Msg::Welcome(_) => 2,
        Msg::Status { .. } => 3,
        Msg::StatusReply(_) => 4,
        Msg::Audit { .. } => 5,
        Msg::AuditReply { .. } => 6,
        Msg::Shutdown => 7,
        Msg::Ok => 8,
        Msg::Error { .. } => 9,
        Msg::Deploy { .. } => 10,
        Msg::Deployed(_) => 11,
        Msg::Remove { .. } => 12,
        Msg::List => 13,
        Msg::ListReply { .. } => 14,
        Msg::Info => 15,
        Msg::InfoReply { .. } => 16,
        Msg::Reload { .. } => 17,
        Msg::Reloaded { .. } => 18,
        Msg::Rejoin { .. } => 19,
        Msg::Fabric { .. } => 20,
        Msg::FabricReply { .. } => 21,
        Msg::DeployPart { .. } => 22,
        Msg::CheckDeploy { .. } => 23,
        Msg::Busy => 24,
        Msg::Capture(_) => 25,
        Msg::CaptureStarted { .. } => 26,
        Msg::CaptureDone(_) => 27,
    }
}

/// One frame: header and JSON body (what [`write_msg`] writes, for a
/// writer of another kind, an asynchronous one).
pub fn frame(msg: &Msg) -> Result<Vec<u8>, ProtoError> {
    let body = serde_json::to_vec(msg)?;
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&VERSION.to_le_bytes());
    frame.extend_from_slice(&kind_of(msg).to_le_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes one frame, with `fds` attached to its first byte.
pub fn send(sock: &UnixStream, msg: &Msg, fds: &[RawFd]) -> Result<(), ProtoError> {
    let frame = frame(msg)?;
    if fds.is_empty() {
        let mut s = sock;
        s.write_all(&frame)?;
    } else {
        // The header goes with the fds; the rest follows as plain bytes.
        ferry_xsk::fdpass::send_with_fds(sock, &frame[..HEADER_LEN], fds)?;
        let mut s = sock;
        s.write_all(&frame[HEADER_LEN..])?;
    }
    Ok(())
}

/// Writes one frame to a stream that carries no fds (a TLS connection).
pub fn write_msg(w: &mut impl Write, msg: &Msg) -> Result<(), ProtoError> {
    w.write_all(&frame(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame from a stream that carries no fds.
pub fn read_msg(r: &mut impl Read) -> Result<Msg, ProtoError> {
    let mut hdr = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut hdr[got..])? {
            0 if got == 0 => return Err(ProtoError::Closed),
            0 => return Err(ProtoError::BadFrame("short header".into())),
            n => got += n,
        }
    }
    body(r, &hdr)
}

/// Reads one frame and the fds that came with it.
pub fn recv(sock: &UnixStream) -> Result<(Msg, Vec<OwnedFd>), ProtoError> {
    let mut hdr = [0u8; HEADER_LEN];
    let (n, fds) = ferry_xsk::fdpass::recv_with_fds(sock, &mut hdr)?;
    if n == 0 {
        return Err(ProtoError::Closed);
    }
    let mut s = sock;
    if n < HEADER_LEN {
        s.read_exact(&mut hdr[n..]).map_err(|_| ProtoError::BadFrame("short header".into()))?;
    }
    Ok((body(&mut s, &hdr)?, fds))
}

/// Checks header `hdr` and reads the body it announces.
fn body(s: &mut impl Read, hdr: &[u8; HEADER_LEN]) -> Result<Msg, ProtoError> {
    if hdr[..2] != MAGIC {
        return Err(ProtoError::BadFrame(format!("bad magic {:02x?}", &hdr[..2])));
    }
    let version = u16::from_le_bytes([hdr[2], hdr[3]]);
    if version != VERSION {
        return Err(ProtoError::BadVersion { found: version });
    }
    let len = u32::from_le_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
    if len > MAX_BODY {
        return Err(ProtoError::BadFrame(format!("body of {len} bytes is over the {MAX_BODY} limit")));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).map_err(|_| ProtoError::BadFrame("short body".into()))?;
    let msg: Msg = serde_json::from_slice(&body)?;
    let kind = u16::from_le_bytes([hdr[4], hdr[5]]);
    if kind != kind_of(&msg) {
        return Err(ProtoError::BadFrame(format!("header kind {kind} does not match the body")));
    }
    Ok(msg)
}

/// Where ferryd listens for NFs unless told otherwise (its admin socket:
/// [`admin_socket`] of it).
pub fn default_socket() -> std::path::PathBuf {
    std::path::PathBuf::from("/run/ferry/ferryd.sock")
}

/// Sends `msg` and waits for one reply (for the CLI).
pub fn request(path: &std::path::Path, msg: &Msg) -> Result<Msg, ProtoError> {
    Ok(ask(|| UnixStream::connect(path).map_err(ProtoError::Io), msg)?.reply)
}

/// Times [`ask`] sends a request, at most, while ferryd answers [`Msg::Busy`].
pub const BUSY_TRIES: usize = 16;

/// A request's connection and the first reply on it.
pub struct Answered {
    pub sock: UnixStream,
    pub reply: Msg,
    pub fds: Vec<OwnedFd>,
}

/// Sends `msg` on a connection from `connect` and reads the reply; sends
/// it again on a new connection while the reply is [`Msg::Busy`] (ferryd
/// never read it), up to [`BUSY_TRIES`] times.
pub fn ask<E: From<ProtoError>>(connect: impl Fn() -> Result<UnixStream, E>, msg: &Msg) -> Result<Answered, E> {
    for _ in 0..BUSY_TRIES {
        let sock = connect()?;
        // A send that ferryd's close cut short may still find its Busy.
        let sent = send(&sock, msg, &[]);
        match (sent, recv(&sock)) {
            (_, Ok((Msg::Busy, _))) => continue,
            (Err(e), _) => return Err(e.into()),
            (Ok(()), Ok((reply, fds))) => return Ok(Answered { sock, reply, fds }),
            (Ok(()), Err(e)) => return Err(e.into()),
        }
    }
    Err(ProtoError::Busy { tries: BUSY_TRIES }.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_strings_are_quoted_and_cut() {
        assert_eq!(echoed("mid"), "\"mid\"");
        let long = "x".repeat(900_000);
        let shown = echoed(&long);
        assert!(shown.len() < 100, "{} bytes", shown.len());
        assert!(shown.ends_with("… (900000 bytes)"), "{shown}");
        // Cut on a character boundary, whatever the bytes.
        assert!(echoed(&"é".repeat(100)).starts_with(&format!("{:?}", "é".repeat(MAX_ECHOED))));
    }

    #[test]
    fn roundtrip_and_rejections() {
        let (a, b) = UnixStream::pair().unwrap();
        send(
            &a,
            &Msg::Hello {
                chain: String::new(),
                nf: "x".into(),
                pid: 7,
                counters: vec!["rx".into()],
                key: String::new(),
            },
            &[],
        )
        .unwrap();
        match recv(&b).unwrap().0 {
            Msg::Hello { nf, pid, .. } => assert_eq!((nf.as_str(), pid), ("x", 7)),
            m => panic!("{m:?}"),
        }
        let mut w = &a;
        w.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(matches!(recv(&b), Err(ProtoError::BadFrame(_))));
        let (a, b) = UnixStream::pair().unwrap();
        let mut w = &a;
        w.write_all(&[b'F', b'Y', 9, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'{', b'}']).unwrap();
        assert!(matches!(recv(&b), Err(ProtoError::BadVersion { found: 9 })));
        let (a, b) = UnixStream::pair().unwrap();
        let mut w = &a;
        w.write_all(&[b'F', b'Y', 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'{', b'}']).unwrap();
        assert!(matches!(recv(&b), Err(ProtoError::BadBody(_))));
        drop(a);
        assert!(matches!(recv(&b), Err(ProtoError::Closed)));
    }

    /// A connector handing out one connection per reply, in order; a
    /// thread answers each with its reply (a Busy one without reading).
    fn answering(replies: Vec<Msg>) -> impl Fn() -> Result<UnixStream, ProtoError> {
        let clients = std::sync::Mutex::new(Vec::new());
        for reply in replies.into_iter().rev() {
            let (client, server) = UnixStream::pair().unwrap();
            std::thread::spawn(move || {
                if !matches!(reply, Msg::Busy) {
                    assert!(matches!(recv(&server).unwrap().0, Msg::List));
                }
                send(&server, &reply, &[]).unwrap();
            });
            clients.lock().unwrap().push(client);
        }
        move || Ok(clients.lock().unwrap().pop().expect("no more connections"))
    }

    #[test]
    fn a_busy_reply_sends_the_request_again_a_bounded_number_of_times() {
        let twice_busy = answering(vec![Msg::Busy, Msg::Busy, Msg::Ok]);
        assert!(matches!(ask(twice_busy, &Msg::List).unwrap().reply, Msg::Ok));
        let always_busy = answering((0..BUSY_TRIES).map(|_| Msg::Busy).collect());
        assert!(matches!(ask(always_busy, &Msg::List), Err(ProtoError::Busy { tries: BUSY_TRIES })));
    }
}
