//! MAC-learning bridge: IEEE 802.1Q learning and forwarding between N
//! ports (no spanning tree, no VLAN separation).
//!
//! * **Learning**: a frame's source address is learnt on its receive port
//!   for `mac_timeout_ns`; later frames from it refresh the entry, at most
//!   once per `refresh_interval_ns`. Refreshing writes the entry's lease
//!   list, which every entry learnt on the same core shares, so refreshing
//!   on every frame makes frames on different cores conflict; NFOS §5.4
//!   refreshes at most once a second instead (91x the throughput), at the
//!   price of entries expiring up to one interval early and a few extra
//!   floods. A station seen on another port moves there at once.
//! * **Forwarding**: group (broadcast, multicast) destinations and unknown
//!   or expired ones are flooded out of every port but the receive port; a
//!   learnt destination goes out of its port, or is filtered (dropped) when
//!   that is the receive port.
//! * Dropped and counted: frames shorter than an Ethernet header, frames
//!   with a group source address (invalid, not learnt), frames on a port
//!   the bridge does not have.
//!
//! State is all aggregate (NFOS Table 6): a `Map` from address to entry
//! (index and port), a `Vector` from index to address (to remove an entry
//! whose lease expired) and the `Allocator` of entry indices, whose leases
//! are the entries' ages. An entry whose lease has expired is dead even
//! before it is reclaimed (by the core that learnt it, or by another core
//! sweeping for the entries of a core without traffic). Packet sets (the 4-tuple on
//! every port, as RSS would spread frames; non-IP frames are orphans) hold
//! no state: they only keep a flow's frames in order.

use ferry_wire::ethernet::is_multicast_mac;
use ferry_wire::EthernetFrame;

use crate::ds::{Allocator, AllocatorConfig, DefaultBucketHash, DsError, Map, Statistics, Vector};
use crate::packet_set::{Field, PacketSetDef, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf, TraceConfig};
use crate::stm::{Abort, Stm, Tx};

/// How the bridge is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    /// Ports `0..ports` (at least 2).
    pub ports: u16,
    /// Most addresses learnt at once.
    pub capacity: u32,
    /// An entry without frames from its address for this long expires
    /// (NFOS: 2 minutes; 802.1Q's default ageing time is 5).
    pub mac_timeout_ns: u64,
    /// Frames refresh an entry at most this often (0: every frame).
    pub refresh_interval_ns: u64,
    /// Buckets of the address table.
    pub buckets: usize,
    /// How often each worker reclaims its expired entries (the periodic
    /// handler's period; see [`BridgeConfig::trace_config`]).
    pub reclaim_period_ns: u64,
    /// Most entries reclaimed in one go.
    pub reclaim_batch: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            ports: 2,
            capacity: 65_536,
            mac_timeout_ns: 120_000_000_000,
            refresh_interval_ns: 1_000_000_000,
            buckets: 16_384,
            reclaim_period_ns: 100_000_000,
            reclaim_batch: 64,
        }
    }
}

impl BridgeConfig {
    /// How to run the bridge over a trace: its ports, its packet sets and
    /// the periodic handler that reclaims expired entries.
    pub fn trace_config(&self, workers: usize) -> TraceConfig {
        TraceConfig {
            workers,
            batch_size: 32,
            ports: self.ports,
            periodic_ns: Some(self.reclaim_period_ns),
            packet_sets: Bridge::packet_sets(self.ports),
        }
    }
}

/// Invalid bridge configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("a bridge needs at least 2 ports, not {0}")]
    TooFewPorts(u16),
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error(transparent)]
    Ds(#[from] DsError),
}

/// What the bridge did, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeCounters {
    /// Frames sent out of their destination's learnt port.
    pub forwarded: u64,
    /// Frames flooded (group or unknown destination), counted once each.
    pub flooded: u64,
    /// Frames dropped because their destination is on the receive port.
    pub filtered: u64,
    /// Addresses learnt (new entries).
    pub learnt: u64,
    /// Learnt addresses seen on another port and moved there.
    pub moved: u64,
    /// Entries removed after expiring.
    pub expired: u64,
    /// Source addresses not learnt because the table was full.
    pub table_full: u64,
    /// Frames shorter than an Ethernet header.
    pub dropped_malformed: u64,
    /// Frames with a group source address.
    pub dropped_group_source: u64,
    /// Frames on a port the bridge does not have.
    pub dropped_unknown_port: u64,
}

impl BridgeCounters {
    /// The counters a live host publishes, by name.
    pub const NAMES: [&'static str; 10] = [
        "forwarded",
        "flooded",
        "filtered",
        "learnt",
        "moved",
        "expired",
        "table_full",
        "dropped_malformed",
        "dropped_group_source",
        "dropped_unknown_port",
    ];

    /// The values of [`BridgeCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 10] {
        [
            self.forwarded,
            self.flooded,
            self.filtered,
            self.learnt,
            self.moved,
            self.expired,
            self.table_full,
            self.dropped_malformed,
            self.dropped_group_source,
            self.dropped_unknown_port,
        ]
    }
}

impl BridgeCounters {
    fn merge(&mut self, other: &BridgeCounters) {
        self.forwarded += other.forwarded;
        self.flooded += other.flooded;
        self.filtered += other.filtered;
        self.learnt += other.learnt;
        self.moved += other.moved;
        self.expired += other.expired;
        self.table_full += other.table_full;
        self.dropped_malformed += other.dropped_malformed;
        self.dropped_group_source += other.dropped_group_source;
        self.dropped_unknown_port += other.dropped_unknown_port;
    }
}

/// A learnt address: its entry and its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Station {
    index: u32,
    port: u16,
}

/// The bridge: its configuration and its address table.
pub struct Bridge {
    config: BridgeConfig,
    stations: Map<[u8; 6], Station>,
    /// Entry index → address, to remove reclaimed entries from `stations`.
    addresses: Vector<Option<[u8; 6]>>,
    /// Leases on entry indices: the entries' ages.
    ages: Allocator,
    counters: Statistics<BridgeCounters>,
}

impl Bridge {
    pub fn new(stm: &Stm, config: BridgeConfig) -> Result<Bridge, BridgeError> {
        if config.ports < 2 {
            return Err(BridgeError::TooFewPorts(config.ports));
        }
        if config.reclaim_batch == 0 {
            return Err(BridgeError::Zero("reclaim_batch"));
        }
        if config.reclaim_period_ns == 0 {
            return Err(BridgeError::Zero("reclaim_period_ns"));
        }
        let ages = AllocatorConfig {
            capacity: config.capacity,
            lease_ns: config.mac_timeout_ns,
            refresh_interval_ns: config.refresh_interval_ns,
        };
        Ok(Bridge {
            stations: Map::new(stm, "bridge stations", config.buckets, DefaultBucketHash)?,
            addresses: Vector::new(stm, "bridge entry addresses", config.capacity as usize, |_| None)?,
            ages: Allocator::new(stm, "bridge entry ages", ages)?,
            counters: Statistics::new(stm, BridgeCounters::default(), BridgeCounters::merge),
            config,
        })
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// The packet sets: the 4-tuple on every port.
    pub fn packet_sets(ports: u16) -> PacketSetDef {
        let tuple = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort];
        let rules = (0..ports).map(|port| PortRule { port, protocol: None, fields: tuple.clone(), symmetric: false });
        PacketSetDef::new(rules.collect()).expect("a valid packet-set definition")
    }

    /// The counters, outside any transaction.
    pub fn counters(&self) -> BridgeCounters {
        self.counters.merged()
    }

    /// The entries live at `now_ns` (address, port), sorted, outside any
    /// transaction; checked for consistency first: every table entry holds
    /// a leased index that maps back to its address, and vice versa.
    pub fn audit(&mut self, stm: &Stm, now_ns: u64) -> Result<Vec<([u8; 6], u16)>, String> {
        let entries = self.stations.entries_mut();
        let addresses: Vec<Option<[u8; 6]>> = (0..self.addresses.len()).map(|i| *self.addresses.get_mut(i)).collect();
        let leased: u32 = self.ages.lease_counts_mut().iter().sum();
        if leased as usize != entries.len() {
            return Err(format!("{leased} leased entries, {} table entries", entries.len()));
        }
        let mut worker = stm.worker(0).map_err(|e| e.to_string())?;
        let ages = &self.ages;
        let expiries = worker.atomically(now_ns, |tx| {
            (0..addresses.len() as u32).map(|i| ages.lease_expiry(tx, i)).collect::<Result<Vec<_>, _>>()
        });
        let mut live = Vec::new();
        for (mac, station) in &entries {
            let index = station.index as usize;
            if addresses.get(index) != Some(&Some(*mac)) || expiries[index].is_none() {
                return Err(format!("{mac:02x?} has entry {index}, which it does not hold"));
            }
            if expiries[index].is_some_and(|at| at > now_ns) {
                live.push((*mac, station.port));
            }
        }
        let held = addresses.iter().filter(|a| a.is_some()).count();
        if held != entries.len() {
            return Err(format!("{held} entries hold an address, {} table entries", entries.len()));
        }
        live.sort();
        Ok(live)
    }

    fn process<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        let mut tally = BridgeCounters::default();
        self.bridge(ctx, packet, &mut tally)?;
        self.counters.update(ctx.tx(), |c| c.merge(&tally));
        Ok(())
    }

    fn bridge<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &Packet, tally: &mut BridgeCounters) -> Result<(), Abort> {
        let port = packet.port();
        if port >= self.config.ports {
            tally.dropped_unknown_port += 1;
            return Ok(());
        }
        let Ok(frame) = EthernetFrame::new_checked(packet.data()) else {
            tally.dropped_malformed += 1;
            return Ok(());
        };
        let (src, dst) = (frame.src(), frame.dst());
        if is_multicast_mac(&src) {
            tally.dropped_group_source += 1;
            return Ok(());
        }
        self.learn(ctx.tx(), src, port, tally)?;
        if is_multicast_mac(&dst) {
            ctx.flood(packet);
            tally.flooded += 1;
            return Ok(());
        }
        match self.live_station(ctx.tx(), &dst)? {
            Some(station) if station.port == port => tally.filtered += 1,
            Some(station) => {
                ctx.send(packet, station.port);
                tally.forwarded += 1;
            }
            None => {
                ctx.flood(packet);
                tally.flooded += 1;
            }
        }
        Ok(())
    }

    /// The entry of `mac` if its lease has not expired.
    fn live_station<'a>(&'a self, tx: &mut Tx<'a>, mac: &[u8; 6]) -> Result<Option<Station>, Abort> {
        let Some(station) = self.stations.get(tx, mac)? else { return Ok(None) };
        let now = tx.now_ns();
        let live = self.ages.lease_expiry(tx, station.index)?.is_some_and(|at| at > now);
        Ok(live.then_some(station))
    }

    /// Learns (or refreshes, or moves) `mac` on `port`.
    fn learn<'a>(&'a self, tx: &mut Tx<'a>, mac: [u8; 6], port: u16, tally: &mut BridgeCounters) -> Result<(), Abort> {
        if let Some(station) = self.stations.get(tx, &mac)? {
            // `refresh` renews only a live entry.
            if self.ages.refresh(tx, station.index)? {
                if station.port != port {
                    self.stations.set(tx, mac, Station { port, ..station })?;
                    tally.moved += 1;
                }
                return Ok(());
            }
            // Expired, but not reclaimed yet.
            self.ages.free(tx, station.index)?;
            self.forget(tx, station.index, mac)?;
            tally.expired += 1;
        }
        let index = match self.ages.allocate(tx)? {
            Some(index) => index,
            None => {
                tally.expired += self.reclaim(tx)?;
                match self.ages.allocate(tx)? {
                    Some(index) => index,
                    None => {
                        tally.table_full += 1;
                        return Ok(());
                    }
                }
            }
        };
        self.addresses.write(tx, index as usize, Some(mac))?;
        self.stations.set(tx, mac, Station { index, port })?;
        tally.learnt += 1;
        Ok(())
    }

    fn forget<'a>(&'a self, tx: &mut Tx<'a>, index: u32, mac: [u8; 6]) -> Result<(), Abort> {
        self.addresses.write(tx, index as usize, None)?;
        self.stations.remove(tx, &mac)?;
        Ok(())
    }

    /// Removes expired entries (this worker's, and other workers' when
    /// [`Allocator::expire`] sweeps); returns how many.
    fn reclaim<'a>(&'a self, tx: &mut Tx<'a>) -> Result<u64, Abort> {
        let mut expired = Vec::new();
        self.ages.expire(tx, self.config.reclaim_batch, &mut expired)?;
        for index in &expired {
            if let Some(mac) = self.addresses.read(tx, *index as usize)? {
                self.forget(tx, *index, mac)?;
            }
        }
        Ok(expired.len() as u64)
    }
}

impl ParallelNf for Bridge {
    type SetState = ();

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        BridgeCounters::NAMES.into_iter().zip(self.counters().values()).collect()
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
        let expired = self.reclaim(ctx.tx())?;
        if expired > 0 {
            self.counters.update(ctx.tx(), |c| c.expired += expired);
        }
        Ok(())
    }
}
