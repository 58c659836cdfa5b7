//! Maglev: a connection-consistent load balancer (Eisenbud et al., NSDI
//! 2016), written as a sequential NF on the parallel runtime.
//!
//! # What it does to a packet
//!
//! Clients send to one virtual IP (the VIP). The balancer picks a backend
//! per connection and forwards the frame to it by **direct server return**:
//! only the Ethernet addresses change (destination: the backend's MAC,
//! source: the balancer's), and the frame leaves through the backend's
//! port. Each backend has the VIP on a loopback interface and answers the
//! client directly, so the IP and L4 headers, and their checksums, reach it
//! exactly as the client sent them and the return path skips the balancer.
//!
//! # Backend choice (Maglev §3.4)
//!
//! A lookup table of prime size `M` (65537 by default) maps a connection's
//! 5-tuple hash modulo `M` to a backend. Backend `i` prefers the entries
//! `(offset_i + j * skip_i) mod M` for `j = 0, 1, ...`, with `offset_i` and
//! `skip_i` two hashes of its name (`skip` in `1..M`; `M` prime makes
//! every such sequence a permutation of the entries). The table is filled
//! in rounds; in each round every backend that is up takes its most
//! preferred entry still free. So:
//!
//! * **balance**: every backend gets `floor(M/N)` or `ceil(M/N)` entries
//!   (each round gives each backend exactly one; only the last round stops
//!   early). The paper asks for `M > 100 N`, which keeps the difference
//!   under 1%;
//! * **minimal disruption**: when a backend goes down the table is rebuilt
//!   for the others; its entries move, and most entries of the others stay
//!   (a backend's preferences do not depend on who else is up; only the
//!   contest for entries changes). Not perfect: some entries of surviving
//!   backends move too (see `tests/nf_maglev.rs` for the measured bound).
//!
//! Names rather than positions seed the permutations, so a backend keeps
//! its entries when others are added, and every balancer instance given
//! the same backend list (in the same order: the fill visits backends in
//! list order) builds the same table. For that the hashes are specified
//! here (FNV-1a with a MurmurHash3 finalizer) rather than std's
//! `DefaultHasher`, whose algorithm may change between Rust releases.
//!
//! # State, NFOS style (NFOS Table 6, "Load balancer")
//!
//! * packet set: a connection, i.e. the 5-tuple of TCP/UDP packets (IPv4
//!   or IPv6, of the VIP's version) on the client port;
//! * set state: the connection's backend. This is connection affinity: a
//!   connection keeps its backend when the table changes, as long as that
//!   backend is up; when it is marked down, the connection's next packet
//!   picks a new backend from the current table;
//! * aggregate state: backend health (one [`Vector`] element per backend,
//!   so a packet's health check touches only its own backend) and the
//!   lookup table (one [`Vector`] element holding the whole table: it is
//!   replaced whole, in the same transaction as the health change that
//!   caused it, so no lookup sees a table that disagrees with the health
//!   vector). Packets only read both; a batch that read them aborts
//!   only if a rebuild commits meanwhile (its transaction writes the
//!   statistics, so it is validated), and rebuilds are rare. The
//!   statistics are a [`DistributedObj`] that is never read in a
//!   transaction, so updating them conflicts with nothing.
//!
//! Health changes come from a schedule in the configuration, applied by the
//! periodic handler (NFOS's place for backend health checks): in trace
//! mode the schedule stands in for the probe results a live health checker
//! would report. [`Maglev::set_backends_up`] is the transactional operation
//! behind it.

use std::net::IpAddr;

use ferry_wire::{five_tuple, EthernetFrame, L4Proto};

use crate::ds::{DsError, Statistics, Vector};
use crate::packet_set::{Field, PacketSetDef, PacketSetError, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf};
use crate::stm::{Abort, Stm};

/// The table size the Maglev paper evaluates and Katran uses.
pub const DEFAULT_TABLE_SIZE: u32 = 65_537;

/// Largest table accepted (Envoy's limit for the same algorithm): a table
/// is rebuilt inside a transaction, which must stay short.
pub const MAX_TABLE_SIZE: u32 = 5_000_011;

/// Backends are numbered by `u16` in the table.
pub const MAX_BACKENDS: usize = u16::MAX as usize;

/// Idle time after which a connection's set expires (and with it its
/// backend choice).
pub const DEFAULT_FLOW_IDLE_TIMEOUT_NS: u64 = 30_000_000_000;

/// One backend server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Its identity: seeds its table preferences.
    pub name: String,
    /// The port its frames leave through.
    pub port: u16,
    /// Its MAC address, written as the frames' destination.
    pub mac: [u8; 6],
}

/// A health-check result: from `at_ns` (packet time) on, the backend named
/// `backend` is up or down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthEvent {
    pub at_ns: u64,
    pub backend: String,
    pub up: bool,
}

/// How to build a [`Maglev`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaglevConfig {
    /// The service address clients connect to, IPv4 or IPv6; other
    /// destinations are dropped.
    pub vip: IpAddr,
    /// The port clients' packets arrive on.
    pub client_port: u16,
    /// The balancer's MAC, written as the forwarded frames' source.
    pub mac: [u8; 6],
    /// All backends, up at start. Their order is part of the table's
    /// definition (see the module docs).
    pub backends: Vec<Backend>,
    /// Lookup-table size `M`: a prime, at least the number of backends
    /// (the paper recommends more than 100 per backend).
    pub table_size: u32,
    pub flow_idle_timeout_ns: u64,
    /// Health changes to apply, in any order; the periodic handler applies
    /// each once packet time reaches it.
    pub health_events: Vec<HealthEvent>,
}

impl MaglevConfig {
    /// A configuration with the default table size and timeout, client port
    /// 0 and no health events.
    pub fn new(vip: impl Into<IpAddr>, mac: [u8; 6], backends: Vec<Backend>) -> MaglevConfig {
        MaglevConfig {
            vip: vip.into(),
            client_port: 0,
            mac,
            backends,
            table_size: DEFAULT_TABLE_SIZE,
            flow_idle_timeout_ns: DEFAULT_FLOW_IDLE_TIMEOUT_NS,
            health_events: Vec::new(),
        }
    }
}

/// Invalid configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaglevError {
    #[error("maglev needs at least one backend")]
    NoBackends,
    #[error("{count} backends; at most {max}")]
    TooManyBackends { count: usize, max: usize },
    #[error("two backends are named \"{name}\"")]
    DuplicateBackend { name: String },
    #[error("table size {size} is not a prime")]
    TableSizeNotPrime { size: u32 },
    #[error("table size {size} is smaller than the {backends} backends")]
    TableTooSmall { size: u32, backends: usize },
    #[error("table size {size} exceeds the maximum {max}")]
    TableTooLarge { size: u32, max: u32 },
    #[error("flow idle timeout must be at least 1 ns")]
    ZeroIdleTimeout,
    #[error("health event at {at_ns} ns names unknown backend \"{name}\"")]
    UnknownBackend { at_ns: u64, name: String },
    #[error(transparent)]
    Ds(#[from] DsError),
    #[error(transparent)]
    PacketSet(#[from] PacketSetError),
}

/// FNV-1a (64-bit) over `bytes` starting from a seeded basis, then
/// MurmurHash3's 64-bit finalizer (FNV alone leaves the low bits, which
/// `mod M` keeps, poorly mixed).
fn hash64(seed: u64, bytes: &[u8]) -> u64 {
    const FNV_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_BASIS ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Seeds of the two name hashes (the paper's `h1`, `h2`) and the flow hash:
/// independent functions from one specified algorithm.
const OFFSET_SEED: u64 = 0x6f66_6673_6574_0001;
const SKIP_SEED: u64 = 0x736b_6970_0000_0002;
const FLOW_SEED: u64 = 0x666c_6f77_0000_0003;

/// The hash of a connection that indexes the table: over source and
/// destination address (4 bytes each in IPv4, 16 in IPv6), IP protocol,
/// source and destination port.
pub fn flow_hash(src_ip: IpAddr, dst_ip: IpAddr, ip_proto: u8, src_port: u16, dst_port: u16) -> u64 {
    let mut bytes = [0u8; 37];
    let mut len = 0;
    for a in [src_ip, dst_ip] {
        let octets = match a {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        bytes[len..len + octets.len()].copy_from_slice(&octets);
        len += octets.len();
    }
    bytes[len] = ip_proto;
    bytes[len + 1..len + 3].copy_from_slice(&src_port.to_be_bytes());
    bytes[len + 3..len + 5].copy_from_slice(&dst_port.to_be_bytes());
    hash64(FLOW_SEED, &bytes[..len + 5])
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let n = u64::from(n);
    (2u64..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

/// A backend's preference order over the table's entries: `offset`,
/// `offset + skip`, `offset + 2 skip`, ... (mod `M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    pub offset: u32,
    pub skip: u32,
}

impl Permutation {
    /// The permutation of the backend called `name` in a table of
    /// `table_size` entries (a prime of at least 2).
    pub fn of(name: &str, table_size: u32) -> Permutation {
        let m = u64::from(table_size);
        let offset = hash64(OFFSET_SEED, name.as_bytes()) % m;
        let skip = hash64(SKIP_SEED, name.as_bytes()) % (m - 1) + 1;
        Permutation { offset: offset as u32, skip: skip as u32 }
    }
}

/// A Maglev lookup table: entry `i` is the index (in the configuration's
/// backend list) of the backend serving flow hashes `h` with
/// `h mod M == i`. Empty when no backend is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupTable {
    entries: Box<[u16]>,
}

impl LookupTable {
    /// Fills a table of `table_size` entries for the backends `b` with
    /// `up[b]`, round-robin over them in index order (Maglev's population
    /// algorithm). `permutations` and `up` are indexed by backend;
    /// `table_size` must be a prime of at least the number of backends up.
    pub fn build(permutations: &[Permutation], up: &[bool], table_size: u32) -> LookupTable {
        const EMPTY: u16 = u16::MAX;
        let live: Vec<usize> = (0..permutations.len()).filter(|b| up.get(*b).copied().unwrap_or(false)).collect();
        if live.is_empty() {
            return LookupTable { entries: Box::new([]) };
        }
        let m = table_size as usize;
        let mut entries = vec![EMPTY; m];
        // Each live backend's next candidate entry, advanced by its skip.
        let mut candidate: Vec<usize> = live.iter().map(|b| permutations[*b].offset as usize).collect();
        let mut filled = 0;
        'rounds: loop {
            for (slot, backend) in candidate.iter_mut().zip(&live) {
                let skip = permutations[*backend].skip as usize;
                // Terminates: `skip` and the prime `m` are coprime, so the
                // sequence visits every entry, and one is still free.
                while entries[*slot] != EMPTY {
                    *slot = (*slot + skip) % m;
                }
                entries[*slot] = *backend as u16;
                *slot = (*slot + skip) % m;
                filled += 1;
                if filled == m {
                    break 'rounds;
                }
            }
        }
        LookupTable { entries: entries.into_boxed_slice() }
    }

    /// The backend for a flow hash; `None` when no backend is up.
    pub fn lookup(&self, hash: u64) -> Option<u16> {
        if self.entries.is_empty() {
            return None;
        }
        Some(self.entries[(hash % self.entries.len() as u64) as usize])
    }

    pub fn entries(&self) -> &[u16] {
        &self.entries
    }

    /// Entries per backend, for `backends` backends.
    pub fn entry_counts(&self, backends: usize) -> Vec<usize> {
        let mut counts = vec![0; backends];
        for b in self.entries.iter() {
            if let Some(count) = counts.get_mut(*b as usize) {
                *count += 1;
            }
        }
        counts
    }
}

/// What the balancer did, summed over workers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaglevCounters {
    /// Frames sent to a backend.
    pub forwarded: u64,
    /// Connections assigned a backend by the table.
    pub new_flows: u64,
    /// Connections moved because their backend was marked down.
    pub reassigned_flows: u64,
    /// Dropped: no backend up.
    pub no_backend: u64,
    /// Dropped: to another address than the VIP.
    pub not_vip: u64,
    /// Dropped: neither TCP nor UDP (e.g. ICMP) to the VIP.
    pub unsupported_protocol: u64,
    /// Dropped: on the client port but not a parsable TCP/UDP/ICMP frame
    /// of either IP version (truncated, another EtherType, a non-first
    /// fragment).
    pub unparsable: u64,
    /// Dropped: arrived on another port than the client port.
    pub wrong_port: u64,
    /// Table rebuilds (health changes applied).
    pub table_rebuilds: u64,
    /// Frames forwarded per backend (indexed like the backend list).
    pub per_backend: Vec<u64>,
}

impl MaglevCounters {
    /// The counters a live host publishes, by name (the per-backend counts are left out: their number varies).
    pub const NAMES: [&'static str; 9] = [
        "forwarded",
        "new_flows",
        "reassigned_flows",
        "no_backend",
        "not_vip",
        "unsupported_protocol",
        "unparsable",
        "wrong_port",
        "table_rebuilds",
    ];

    /// The values of [`MaglevCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 9] {
        [
            self.forwarded,
            self.new_flows,
            self.reassigned_flows,
            self.no_backend,
            self.not_vip,
            self.unsupported_protocol,
            self.unparsable,
            self.wrong_port,
            self.table_rebuilds,
        ]
    }
}

impl MaglevCounters {
    fn merge(acc: &mut MaglevCounters, part: &MaglevCounters) {
        acc.forwarded += part.forwarded;
        acc.new_flows += part.new_flows;
        acc.reassigned_flows += part.reassigned_flows;
        acc.no_backend += part.no_backend;
        acc.not_vip += part.not_vip;
        acc.unsupported_protocol += part.unsupported_protocol;
        acc.unparsable += part.unparsable;
        acc.wrong_port += part.wrong_port;
        acc.table_rebuilds += part.table_rebuilds;
        if acc.per_backend.len() < part.per_backend.len() {
            acc.per_backend.resize(part.per_backend.len(), 0);
        }
        for (a, p) in acc.per_backend.iter_mut().zip(&part.per_backend) {
            *a += p;
        }
    }
}

/// A connection's state: its backend, and its flow hash (kept so a
/// reassignment does not parse the packet again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    pub backend: u16,
    pub flow_hash: u64,
}

/// The Maglev NF. See the module docs.
pub struct Maglev {
    config: MaglevConfig,
    permutations: Vec<Permutation>,
    /// `(at_ns, backend, up)`, sorted by time.
    health_schedule: Vec<(u64, usize, bool)>,
    packet_sets: PacketSetDef,
    backend_up: Vector<bool>,
    /// One element: the table for the backends up now.
    table: Vector<LookupTable>,
    counters: Statistics<MaglevCounters>,
}

impl Maglev {
    pub fn new(stm: &Stm, config: MaglevConfig) -> Result<Maglev, MaglevError> {
        let backends = &config.backends;
        if backends.is_empty() {
            return Err(MaglevError::NoBackends);
        }
        if backends.len() > MAX_BACKENDS {
            return Err(MaglevError::TooManyBackends { count: backends.len(), max: MAX_BACKENDS });
        }
        for (i, b) in backends.iter().enumerate() {
            if backends[..i].iter().any(|other| other.name == b.name) {
                return Err(MaglevError::DuplicateBackend { name: b.name.clone() });
            }
        }
        let size = config.table_size;
        if size > MAX_TABLE_SIZE {
            return Err(MaglevError::TableTooLarge { size, max: MAX_TABLE_SIZE });
        }
        if !is_prime(size) {
            return Err(MaglevError::TableSizeNotPrime { size });
        }
        if (size as usize) < backends.len() {
            return Err(MaglevError::TableTooSmall { size, backends: backends.len() });
        }
        if config.flow_idle_timeout_ns == 0 {
            return Err(MaglevError::ZeroIdleTimeout);
        }
        let mut health_schedule = Vec::with_capacity(config.health_events.len());
        for event in &config.health_events {
            let Some(backend) = backends.iter().position(|b| b.name == event.backend) else {
                return Err(MaglevError::UnknownBackend { at_ns: event.at_ns, name: event.backend.clone() });
            };
            health_schedule.push((event.at_ns, backend, event.up));
        }
        // Stable: of two events at one time for one backend, the later
        // listed wins.
        health_schedule.sort_by_key(|(at, _, _)| *at);

        let permutations: Vec<Permutation> = backends.iter().map(|b| Permutation::of(&b.name, size)).collect();
        let all_up = vec![true; backends.len()];
        let initial = LookupTable::build(&permutations, &all_up, size);
        let fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort, Field::IpProto];
        let rule = PortRule { port: config.client_port, protocol: None, fields, symmetric: false };
        let packet_sets = PacketSetDef::new(vec![rule])?;
        let backend_up = Vector::new(stm, "maglev.backend_up", backends.len(), |_| true)?;
        let table = Vector::new(stm, "maglev.table", 1, |_| initial.clone())?;
        let identity = MaglevCounters { per_backend: vec![0; backends.len()], ..MaglevCounters::default() };
        let counters = Statistics::new(stm, identity, MaglevCounters::merge);
        Ok(Maglev { config, permutations, health_schedule, packet_sets, backend_up, table, counters })
    }

    /// Connections on the client port (5-tuple plus IP protocol; RSS can
    /// serve it by hashing the 4-tuple).
    pub fn packet_sets(&self) -> &PacketSetDef {
        &self.packet_sets
    }

    pub fn config(&self) -> &MaglevConfig {
        &self.config
    }

    pub fn permutations(&self) -> &[Permutation] {
        &self.permutations
    }

    /// Marks backends up or down (`changes`: backend index, up) and, if
    /// any changed, rebuilds the table, all in the caller's transaction.
    /// Returns whether the table was rebuilt. Indices outside the backend
    /// list are ignored.
    pub fn set_backends_up<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, changes: &[(usize, bool)]) -> Result<bool, Abort> {
        let mut changed = false;
        for &(backend, up) in changes {
            if backend >= self.backend_up.len() {
                continue;
            }
            if self.backend_up.read(ctx.tx(), backend)? != up {
                self.backend_up.write(ctx.tx(), backend, up)?;
                changed = true;
            }
        }
        if !changed {
            return Ok(false);
        }
        let mut up = Vec::with_capacity(self.backend_up.len());
        for backend in 0..self.backend_up.len() {
            up.push(self.backend_up.read(ctx.tx(), backend)?);
        }
        let table = LookupTable::build(&self.permutations, &up, self.config.table_size);
        self.table.write(ctx.tx(), 0, table)?;
        self.counters.update(ctx.tx(), |c| c.table_rebuilds += 1);
        Ok(true)
    }

    /// The counters, outside any transaction (after a run).
    pub fn counters(&self) -> MaglevCounters {
        self.counters.merged()
    }

    /// The current table, outside any transaction.
    pub fn table(&mut self) -> LookupTable {
        self.table.get_mut(0).clone()
    }

    /// Backend health, outside any transaction.
    pub fn backends_up(&mut self) -> Vec<bool> {
        (0..self.backend_up.len()).map(|b| *self.backend_up.get_mut(b)).collect()
    }

    fn count<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, f: impl FnOnce(&mut MaglevCounters)) {
        self.counters.update(ctx.tx(), f);
    }

    /// Rewrites the frame's MACs for `backend` and sends it out of the
    /// backend's port.
    fn forward<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet, backend: u16) {
        let target = &self.config.backends[backend as usize];
        let Ok(mut eth) = EthernetFrame::new_checked(packet.data_mut().as_mut_slice()) else {
            return self.count(ctx, |c| c.unparsable += 1);
        };
        eth.set_dst(target.mac);
        eth.set_src(self.config.mac);
        ctx.send(packet, target.port);
        self.count(ctx, |c| {
            c.forwarded += 1;
            c.per_backend[backend as usize] += 1;
        });
    }

    fn lookup<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, flow_hash: u64) -> Result<Option<u16>, Abort> {
        self.table.read_with(ctx.tx(), 0, |t| t.lookup(flow_hash))
    }
}

impl ParallelNf for Maglev {
    type SetState = Connection;

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        MaglevCounters::NAMES.into_iter().zip(self.counters().values()).collect()
    }

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<Connection>>, Abort> {
        let Some(tuple) = five_tuple(packet.data()) else {
            self.count(ctx, |c| c.unparsable += 1);
            return Ok(None);
        };
        if tuple.dst_ip != self.config.vip {
            self.count(ctx, |c| c.not_vip += 1);
            return Ok(None);
        }
        if !matches!(tuple.proto, L4Proto::Tcp | L4Proto::Udp) {
            self.count(ctx, |c| c.unsupported_protocol += 1);
            return Ok(None);
        }
        let hash = flow_hash(tuple.src_ip, tuple.dst_ip, tuple.protocol(), tuple.src_port, tuple.dst_port);
        let Some(backend) = self.lookup(ctx, hash)? else {
            // Not registered: the connection's next packet tries again.
            self.count(ctx, |c| c.no_backend += 1);
            return Ok(None);
        };
        self.count(ctx, |c| c.new_flows += 1);
        self.forward(ctx, packet, backend);
        let state = Connection { backend, flow_hash: hash };
        Ok(Some(NewSet { state, idle_timeout_ns: self.config.flow_idle_timeout_ns }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, conn: &mut Connection, packet: &mut Packet) -> Result<(), Abort> {
        if !self.backend_up.read(ctx.tx(), conn.backend as usize)? {
            let Some(backend) = self.lookup(ctx, conn.flow_hash)? else {
                self.count(ctx, |c| c.no_backend += 1);
                return Ok(());
            };
            conn.backend = backend;
            self.count(ctx, |c| c.reassigned_flows += 1);
        }
        self.forward(ctx, packet, conn.backend);
        Ok(())
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        if packet.port() == self.config.client_port {
            self.count(ctx, |c| c.unparsable += 1);
        } else {
            self.count(ctx, |c| c.wrong_port += 1);
        }
        Ok(())
    }

    /// Applies the health events due by now whose outcome differs from the
    /// current health. Every worker runs this; the first to commit a change
    /// rebuilds the table, the others then find nothing to change.
    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        let now = ctx.now_ns();
        let due = self.health_schedule.partition_point(|(at, _, _)| *at <= now);
        if due == 0 {
            return Ok(());
        }
        // The latest due event per backend decides its health.
        let mut desired: Vec<Option<bool>> = vec![None; self.config.backends.len()];
        for &(_, backend, up) in &self.health_schedule[..due] {
            desired[backend] = Some(up);
        }
        let changes: Vec<(usize, bool)> =
            desired.iter().enumerate().filter_map(|(b, up)| up.map(|up| (b, up))).collect();
        self.set_backends_up(ctx, &changes)?;
        Ok(())
    }
}
