//! Endpoint-independent NAT (RFC 4787) for UDP and TCP over IPv4.
//!
//! Internal hosts (port [`INTERNAL_PORT`]) reach the outside (port
//! [`EXTERNAL_PORT`]) through one public address:
//! * **Mapping** is endpoint-independent (REQ-1): an internal endpoint
//!   (address, port, protocol) gets one public port whatever it talks to,
//!   leased from an [`Allocator`] for `lease_ns` and refreshed by outbound
//!   traffic (REQ-6 asks for outbound refresh; inbound does not refresh).
//! * **Filtering** is endpoint-independent (RFC 4787 §5): any external
//!   endpoint may send to a live mapping's public port and is translated
//!   back; packets to anything else are dropped.
//! * **Refresh interval**: refreshing a lease writes its worker's lease
//!   list, so refreshing on every packet makes packets of one mapping on
//!   different cores conflict (NFOS §5.4). A lease refreshed less than
//!   `refresh_interval_ns` ago is left alone (a read), at the price of a
//!   mapping expiring up to one interval early.
//! * Checksums (IPv4 header, TCP, UDP) are updated incrementally (RFC
//!   1624); a UDP checksum of 0 ("none") stays 0.
//! * Not translated, dropped and counted as unsupported: non-IPv4 frames,
//!   ICMP and other protocols, fragments. No hairpinning.
//!
//! State is all aggregate (NFOS Table 6), per protocol: a `Map` from
//! internal endpoint to port index, a `Vector` from port index to its owner
//! (for the way back, and to remove the mapping when its lease expires) and
//! the `Allocator` of port indices. A lease that has expired is dead even
//! before it is reclaimed (its worker reclaims it in the periodic handler
//! or when the pools run dry; another worker does when its own pool is
//! empty, or in its sweep once per lease period, so the leases of a worker
//! that stopped getting traffic come back too).
//!
//! Packet sets (the 4-tuple on each port) hold no state (`first_packet`
//! never registers one); they only keep a flow on one core, as RSS would,
//! so its packets leave in order.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

pub use ferry_wire::nat::{Endpoint, Transport};
use ferry_wire::nat::{Headers, Side, Unparsed};

use crate::ds::{Allocator, AllocatorConfig, DefaultBucketHash, DsError, Map, Statistics, Vector};
use crate::packet_set::{Field, PacketSetDef, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf, TraceConfig};
use crate::stm::{Abort, Stm, Tx};

/// The port facing the internal hosts.
pub const INTERNAL_PORT: u16 = 0;
/// The port facing the outside.
pub const EXTERNAL_PORT: u16 = 1;

/// How the NAT is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatConfig {
    /// The address internal endpoints appear under outside.
    pub public_ip: Ipv4Addr,
    /// Public ports handed out (per protocol).
    pub ports: RangeInclusive<u16>,
    /// A mapping without outbound traffic for this long expires (RFC 4787
    /// REQ-5: at least 2 minutes, 5 recommended).
    pub lease_ns: u64,
    /// Outbound packets refresh a mapping at most this often (0: every
    /// packet).
    pub refresh_interval_ns: u64,
    /// Buckets of each mapping table.
    pub buckets: usize,
    /// How often each worker reclaims its expired leases (the periodic
    /// handler's period; see [`NatConfig::trace_config`]).
    pub reclaim_period_ns: u64,
    /// Most leases reclaimed in one go.
    pub reclaim_batch: usize,
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            public_ip: Ipv4Addr::new(198, 51, 100, 1),
            ports: 1024..=u16::MAX,
            lease_ns: 300_000_000_000,
            refresh_interval_ns: 1_000_000_000,
            buckets: 16_384,
            reclaim_period_ns: 100_000_000,
            reclaim_batch: 64,
        }
    }
}

impl NatConfig {
    /// How to run the NAT over a trace: two ports, its packet sets, and the
    /// periodic handler that reclaims expired leases.
    pub fn trace_config(&self, workers: usize) -> TraceConfig {
        TraceConfig {
            workers,
            batch_size: 32,
            ports: 2,
            periodic_ns: Some(self.reclaim_period_ns),
            packet_sets: Nat::packet_sets(),
        }
    }
}

/// Invalid NAT configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatError {
    #[error("the public port range {first}..={last} is empty")]
    NoPorts { first: u16, last: u16 },
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error(transparent)]
    Ds(#[from] DsError),
}

/// What the NAT did, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatCounters {
    /// Internal → external packets translated.
    pub outbound: u64,
    /// External → internal packets translated back.
    pub inbound: u64,
    pub mappings_created: u64,
    /// Leases reclaimed after expiring (also the ones ended when their
    /// endpoint came back after expiry).
    pub mappings_expired: u64,
    /// Inbound packets for no live mapping.
    pub dropped_unmapped: u64,
    /// Outbound packets of a new endpoint while every port was leased.
    pub dropped_pool_exhausted: u64,
    /// Frames whose headers do not parse.
    pub dropped_malformed: u64,
    /// Non-IPv4, ICMP, other protocols, fragments, unknown ports.
    pub dropped_unsupported: u64,
}

impl NatCounters {
    /// The counters a live host publishes, by name.
    pub const NAMES: [&'static str; 8] = [
        "outbound",
        "inbound",
        "mappings_created",
        "mappings_expired",
        "dropped_unmapped",
        "dropped_pool_exhausted",
        "dropped_malformed",
        "dropped_unsupported",
    ];

    /// The values of [`NatCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 8] {
        [
            self.outbound,
            self.inbound,
            self.mappings_created,
            self.mappings_expired,
            self.dropped_unmapped,
            self.dropped_pool_exhausted,
            self.dropped_malformed,
            self.dropped_unsupported,
        ]
    }
}

impl NatCounters {
    fn merge(&mut self, other: &NatCounters) {
        self.outbound += other.outbound;
        self.inbound += other.inbound;
        self.mappings_created += other.mappings_created;
        self.mappings_expired += other.mappings_expired;
        self.dropped_unmapped += other.dropped_unmapped;
        self.dropped_pool_exhausted += other.dropped_pool_exhausted;
        self.dropped_malformed += other.dropped_malformed;
        self.dropped_unsupported += other.dropped_unsupported;
    }

    pub fn dropped(&self) -> u64 {
        self.dropped_unmapped + self.dropped_pool_exhausted + self.dropped_malformed + self.dropped_unsupported
    }
}

/// One protocol's mappings.
struct PortSpace {
    /// Internal endpoint → port index.
    mappings: Map<Endpoint, u32>,
    /// Port index → the internal endpoint holding it.
    owners: Vector<Option<Endpoint>>,
    /// Leases on port indices (index `i` is public port `first_port + i`).
    leases: Allocator,
}

impl PortSpace {
    fn new(stm: &Stm, name: &str, config: &NatConfig, capacity: u32) -> Result<PortSpace, DsError> {
        let lease =
            AllocatorConfig { capacity, lease_ns: config.lease_ns, refresh_interval_ns: config.refresh_interval_ns };
        Ok(PortSpace {
            mappings: Map::new(stm, &format!("{name} mappings"), config.buckets, DefaultBucketHash)?,
            owners: Vector::new(stm, &format!("{name} port owners"), capacity as usize, |_| None)?,
            leases: Allocator::new(stm, &format!("{name} ports"), lease)?,
        })
    }

    /// Whether port index `index` is leased and its lease has not expired
    /// (reclaimed or not).
    fn is_live<'a>(&'a self, tx: &mut Tx<'a>, index: u32) -> Result<bool, Abort> {
        let now = tx.now_ns();
        Ok(self.leases.lease_expiry(tx, index)?.is_some_and(|at| at > now))
    }

    /// Ends the mapping on `index` (lease, owner, table entry).
    fn end<'a>(&'a self, tx: &mut Tx<'a>, index: u32, owner: Endpoint) -> Result<(), Abort> {
        self.leases.free(tx, index)?;
        self.forget(tx, index, owner)
    }

    /// Removes the owner and the table entry of a port whose lease is gone.
    fn forget<'a>(&'a self, tx: &mut Tx<'a>, index: u32, owner: Endpoint) -> Result<(), Abort> {
        self.owners.write(tx, index as usize, None)?;
        self.mappings.remove(tx, &owner)?;
        Ok(())
    }
}

/// The NAT: its configuration and its aggregate state.
pub struct Nat {
    config: NatConfig,
    first_port: u16,
    udp: PortSpace,
    tcp: PortSpace,
    counters: Statistics<NatCounters>,
}

impl Nat {
    pub fn new(stm: &Stm, config: NatConfig) -> Result<Nat, NatError> {
        let (first, last) = (*config.ports.start(), *config.ports.end());
        if first > last {
            return Err(NatError::NoPorts { first, last });
        }
        if config.reclaim_batch == 0 {
            return Err(NatError::Zero("reclaim_batch"));
        }
        if config.reclaim_period_ns == 0 {
            return Err(NatError::Zero("reclaim_period_ns"));
        }
        let capacity = u32::from(last - first) + 1;
        Ok(Nat {
            udp: PortSpace::new(stm, "nat udp", &config, capacity)?,
            tcp: PortSpace::new(stm, "nat tcp", &config, capacity)?,
            counters: Statistics::new(stm, NatCounters::default(), NatCounters::merge),
            first_port: first,
            config,
        })
    }

    pub fn config(&self) -> &NatConfig {
        &self.config
    }

    /// The packet sets: the 4-tuple on each port (flows stay on one core).
    pub fn packet_sets() -> PacketSetDef {
        let tuple = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort];
        let rule = |port| PortRule { port, protocol: None, fields: tuple.clone(), symmetric: false };
        PacketSetDef::new(vec![rule(INTERNAL_PORT), rule(EXTERNAL_PORT)]).expect("a valid packet-set definition")
    }

    /// The counters, outside any transaction.
    pub fn counters(&self) -> NatCounters {
        self.counters.merged()
    }

    fn space(&self, transport: Transport) -> &PortSpace {
        match transport {
            Transport::Udp => &self.udp,
            Transport::Tcp => &self.tcp,
        }
    }

    fn public_port(&self, index: u32) -> u16 {
        // index < capacity, so the sum is at most the range's last port.
        self.first_port + index as u16
    }

    /// Handles one packet; its counts go into the worker's part of the
    /// counters in the same transaction.
    fn process<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        let mut tally = NatCounters::default();
        match packet.port() {
            INTERNAL_PORT => self.outbound(ctx, packet, &mut tally)?,
            EXTERNAL_PORT => self.inbound(ctx, packet, &mut tally)?,
            _ => tally.dropped_unsupported += 1,
        }
        self.counters.update(ctx.tx(), |c| c.merge(&tally));
        Ok(())
    }

    fn outbound<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
        tally: &mut NatCounters,
    ) -> Result<(), Abort> {
        let Some(headers) = headers(packet.data(), tally) else { return Ok(()) };
        let Some(index) = self.mapping_of(ctx.tx(), headers.transport, headers.src, tally)? else {
            tally.dropped_pool_exhausted += 1;
            return Ok(());
        };
        let public = Endpoint { ip: self.config.public_ip.into(), port: self.public_port(index) };
        headers.rewrite(packet.data_mut(), Side::Source, public);
        ctx.send(packet, EXTERNAL_PORT);
        tally.outbound += 1;
        Ok(())
    }

    /// The port index of `internal`'s live mapping, refreshed, or of a new
    /// one; `None` when no port is free.
    fn mapping_of<'a>(
        &'a self,
        tx: &mut Tx<'a>,
        transport: Transport,
        internal: Endpoint,
        tally: &mut NatCounters,
    ) -> Result<Option<u32>, Abort> {
        let space = self.space(transport);
        if let Some(index) = space.mappings.get(tx, &internal)? {
            // `refresh` renews only a live lease.
            if space.leases.refresh(tx, index)? {
                return Ok(Some(index));
            }
            // Expired, but not reclaimed yet: the mapping is gone (RFC 4787
            // §4.3), so the endpoint gets a new lease.
            space.end(tx, index, internal)?;
            tally.mappings_expired += 1;
        }
        let index = match space.leases.allocate(tx)? {
            Some(index) => index,
            None => {
                tally.mappings_expired += self.reclaim(tx, space)?;
                match space.leases.allocate(tx)? {
                    Some(index) => index,
                    None => return Ok(None),
                }
            }
        };
        space.owners.write(tx, index as usize, Some(internal))?;
        space.mappings.set(tx, internal, index)?;
        tally.mappings_created += 1;
        Ok(Some(index))
    }

    fn inbound<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet, tally: &mut NatCounters) -> Result<(), Abort> {
        let Some(headers) = headers(packet.data(), tally) else { return Ok(()) };
        let Some(internal) = self.owner_of(ctx.tx(), headers.transport, headers.dst)? else {
            tally.dropped_unmapped += 1;
            return Ok(());
        };
        headers.rewrite(packet.data_mut(), Side::Destination, internal);
        ctx.send(packet, INTERNAL_PORT);
        tally.inbound += 1;
        Ok(())
    }

    /// The internal endpoint behind public endpoint `public`, if it is a
    /// live mapping (whoever sent the packet: endpoint-independent
    /// filtering).
    fn owner_of<'a>(
        &'a self,
        tx: &mut Tx<'a>,
        transport: Transport,
        public: Endpoint,
    ) -> Result<Option<Endpoint>, Abort> {
        if public.ip != self.config.public_ip || !self.config.ports.contains(&public.port) {
            return Ok(None);
        }
        let index = u32::from(public.port - self.first_port);
        let space = self.space(transport);
        let Some(internal) = space.owners.read(tx, index as usize)? else { return Ok(None) };
        Ok(space.is_live(tx, index)?.then_some(internal))
    }

    /// Ends expired leases in `space` (this worker's, and other workers'
    /// when [`Allocator::expire`] sweeps); returns how many.
    fn reclaim<'a>(&'a self, tx: &mut Tx<'a>, space: &'a PortSpace) -> Result<u64, Abort> {
        let mut expired = Vec::new();
        space.leases.expire(tx, self.config.reclaim_batch, &mut expired)?;
        for index in &expired {
            if let Some(owner) = space.owners.read(tx, *index as usize)? {
                space.forget(tx, *index, owner)?;
            }
        }
        Ok(expired.len() as u64)
    }

    /// The live state outside any transaction (after a run), checked for
    /// consistency: every table entry's port is leased and owned by that
    /// entry's endpoint and vice versa (so no port is mapped twice), and
    /// leased plus free ports make up the range. Mappings are live when
    /// their lease runs past `now_ns`.
    pub fn audit(&mut self, stm: &Stm, now_ns: u64) -> Result<NatAudit, String> {
        let mut audit = NatAudit::default();
        for transport in [Transport::Udp, Transport::Tcp] {
            let space = match transport {
                Transport::Udp => &mut self.udp,
                Transport::Tcp => &mut self.tcp,
            };
            let entries = space.mappings.entries_mut();
            let owners: Vec<Option<Endpoint>> = (0..space.owners.len()).map(|i| *space.owners.get_mut(i)).collect();
            let (free, leased) = (space.leases.pool_lengths_mut(), space.leases.lease_counts_mut());
            let (free, leased): (u32, u32) = (free.iter().sum(), leased.iter().sum());
            if (free + leased) as usize != owners.len() || leased as usize != entries.len() {
                return Err(format!("{transport:?}: {free} free + {leased} leased ports, {} mappings", entries.len()));
            }
            let expiries = {
                let space = self.space(transport);
                let mut worker = stm.worker(0).map_err(|e| e.to_string())?;
                worker.atomically(now_ns, |tx| {
                    (0..owners.len() as u32).map(|i| space.leases.lease_expiry(tx, i)).collect::<Result<Vec<_>, _>>()
                })
            };
            for (endpoint, index) in &entries {
                if owners.get(*index as usize) != Some(&Some(*endpoint)) || expiries[*index as usize].is_none() {
                    return Err(format!(
                        "{transport:?}: {endpoint:?} maps to port index {index}, which it does not hold"
                    ));
                }
            }
            for (index, owner) in owners.iter().enumerate() {
                if let Some(owner) = owner {
                    if !entries.contains(&(*owner, index as u32)) {
                        return Err(format!("{transport:?}: port index {index} held by {owner:?} without a mapping"));
                    }
                }
            }
            audit.mappings += entries.len();
            for (endpoint, index) in entries {
                if expiries[index as usize].is_some_and(|at| at > now_ns) {
                    audit.live.push((transport, endpoint, self.public_port(index)));
                }
            }
        }
        audit.live.sort();
        Ok(audit)
    }
}

/// The NAT's state as [`Nat::audit`] found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatAudit {
    /// Table entries, expired ones not yet reclaimed included.
    pub mappings: usize,
    /// Live mappings: protocol, internal endpoint, public port; sorted.
    pub live: Vec<(Transport, Endpoint, u16)>,
}

impl ParallelNf for Nat {
    type SetState = ();

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        NatCounters::NAMES.into_iter().zip(self.counters().values()).collect()
    }

    fn first_packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<Option<NewSet<()>>, Abort> {
        self.process(ctx, packet)?;
        Ok(None)
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _state: &mut (), packet: &mut Packet) -> Result<(), Abort> {
        self.process(ctx, packet)
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        self.process(ctx, packet)
    }

    fn periodic<'a>(&'a self, ctx: &mut Ctx<'_, 'a>) -> Result<(), Abort> {
        let mut expired = 0;
        for space in [&self.udp, &self.tcp] {
            expired += self.reclaim(ctx.tx(), space)?;
        }
        if expired > 0 {
            self.counters.update(ctx.tx(), |c| c.mappings_expired += expired);
        }
        Ok(())
    }
}

/// The headers of `frame`; `None` (counted in `tally`) for frames the NAT
/// does not translate: it is a NAT44 (NAPT, RFC 3022), so IPv6 frames
/// are unsupported here, as fragments and other protocols are.
fn headers(frame: &[u8], tally: &mut NatCounters) -> Option<Headers> {
    match Headers::parse(frame) {
        Ok(headers) if headers.src.ip.is_ipv4() => Some(headers),
        Ok(_) => {
            tally.dropped_unsupported += 1;
            None
        }
        Err(Unparsed::Malformed) => {
            tally.dropped_malformed += 1;
            None
        }
        Err(Unparsed::Unsupported) => {
            tally.dropped_unsupported += 1;
            None
        }
    }
}
