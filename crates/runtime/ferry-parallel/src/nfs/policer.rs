//! Policer: limits the traffic to each LAN host to a rate with a token
//! bucket (NFOS §5, "a traffic policer that rate-limits traffic by
//! destination IP").
//!
//! Frames from the WAN port to a host are policed: a frame passes to the
//! LAN port if the host's bucket holds at least the frame's length in
//! tokens (bytes of Ethernet frame, without FCS), which it then loses;
//! otherwise it is dropped and counted. A bucket holds at most `burst`
//! bytes and gains `rate` bytes per second of packet time. Frames from the
//! LAN port go to the WAN port unpoliced.
//!
//! # Where the bucket lives: two packet-set choices
//!
//! The bucket is per destination, so the packet-set definition decides
//! whether it is set state or aggregate state (NFOS §6 on the trade-off):
//!
//! * [`PolicerSets::PerDestination`] (NFOS Table 6: "packets to a LAN
//!   host", state "incoming packet rate of the host", no aggregate state):
//!   a set is all frames to one host, and the bucket is its set state. No
//!   transaction ever conflicts, and every worker count gives exactly the
//!   sequential result, since a host's frames are all policed on one
//!   worker in arrival order. The cost: one busy host loads one core, and
//!   a set keyed by the destination address alone is not a field set the
//!   mainstream NICs of [`crate::rss_check`] hash, so it needs software
//!   dispatch (or a NIC's destination-only RSS mode).
//! * [`PolicerSets::PerFlow`]: a set is a flow (5-tuple); the buckets live
//!   in a [`Map`] keyed by destination. One host's flows spread over
//!   cores, but they draw from one bucket: its Map bucket is a conflict
//!   hot spot (recipe: more buckets only helps between hosts), and frames
//!   of different flows draw tokens in commit order rather than arrival
//!   order, so which frames are dropped can differ from a sequential run.
//!   Over a whole run a host still receives at most `burst + rate *
//!   (last arrival - first arrival)` bytes (a bucket's clock only moves
//!   forward, so no time is refilled twice), but over a short window it
//!   can get more than `burst + rate * window`: a frame policed ahead of
//!   earlier arrivals (on another worker) refills the bucket up to its own
//!   time, and those earlier frames then spend that refill.
//!
//! Per-destination sets expire when a bucket would be full again, so
//! forgetting a set changes nothing: a new set starts with a full bucket.
//!
//! Frames from the LAN port form per-flow sets too, with no state: that
//! keeps each flow on one worker, so its frames leave in order (orphans
//! are spread round-robin and may overtake each other).

use std::net::IpAddr;

use ferry_wire::five_tuple;

use crate::ds::{DefaultBucketHash, DsError, Map, Statistics};
use crate::packet_set::{Field, PacketSetDef, PacketSetError, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf};
use crate::stm::{Abort, Stm};

/// Token amounts are kept in nanobytes (10^-9 byte), so refilling
/// `rate` bytes per second for `t` ns adds exactly `rate * t` and the
/// bucket is exact integer arithmetic: the same decisions on every run.
const NANOBYTES_PER_BYTE: u64 = 1_000_000_000;

/// Largest burst: its nanobytes must fit in a `u64` (about 18 GB).
pub const MAX_BURST_BYTES: u64 = u64::MAX / NANOBYTES_PER_BYTE;

/// How long a per-flow set (which holds nothing) stays without packets.
const FLOW_SET_IDLE_TIMEOUT_NS: u64 = 10_000_000_000;

/// Which packets form a set, and so where the buckets live (see the
/// module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicerSets {
    /// A set per destination host; the bucket is set state.
    PerDestination,
    /// A set per flow; the buckets are in a Map keyed by destination.
    PerFlow,
}

/// How to build a [`Policer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicerConfig {
    /// Where traffic to the LAN hosts arrives (policed).
    pub wan_port: u16,
    /// Where the LAN hosts are (their traffic is not policed).
    pub lan_port: u16,
    /// Bucket refill rate, bytes per second.
    pub rate_bytes_per_sec: u64,
    /// Bucket size, bytes: the longest burst at line rate a host receives.
    pub burst_bytes: u64,
    pub sets: PolicerSets,
    /// Buckets of the per-destination Map ([`PolicerSets::PerFlow`] only).
    pub map_buckets: usize,
}

impl PolicerConfig {
    /// WAN port 0, LAN port 1, per-destination sets.
    pub fn new(rate_bytes_per_sec: u64, burst_bytes: u64) -> PolicerConfig {
        PolicerConfig {
            wan_port: 0,
            lan_port: 1,
            rate_bytes_per_sec,
            burst_bytes,
            sets: PolicerSets::PerDestination,
            map_buckets: 4096,
        }
    }
}

/// Invalid configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicerError {
    #[error("rate must be at least 1 byte per second")]
    ZeroRate,
    #[error("burst must be 1..={max} bytes, not {burst}")]
    Burst { burst: u64, max: u64 },
    #[error("WAN and LAN port are both {port}")]
    SamePorts { port: u16 },
    #[error(transparent)]
    Ds(#[from] DsError),
    #[error(transparent)]
    PacketSet(#[from] PacketSetError),
}

/// One host's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    tokens_nanobytes: u64,
    /// Packet time the tokens were counted at; never moves backwards.
    updated_ns: u64,
}

impl TokenBucket {
    fn full(capacity_nanobytes: u64, now_ns: u64) -> TokenBucket {
        TokenBucket { tokens_nanobytes: capacity_nanobytes, updated_ns: now_ns }
    }

    /// Refills for the time since the last update (none if `now_ns` is
    /// older: in per-flow mode frames of one host may be policed out of
    /// arrival order), then takes `bytes` if there are enough tokens.
    fn take(&mut self, bytes: u64, now_ns: u64, rate_bytes_per_sec: u64, capacity_nanobytes: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.updated_ns);
        let refill = u128::from(elapsed) * u128::from(rate_bytes_per_sec);
        let tokens = (u128::from(self.tokens_nanobytes) + refill).min(u128::from(capacity_nanobytes));
        self.tokens_nanobytes = tokens as u64;
        self.updated_ns = self.updated_ns.max(now_ns);
        let need = bytes.saturating_mul(NANOBYTES_PER_BYTE);
        if self.tokens_nanobytes >= need {
            self.tokens_nanobytes -= need;
            true
        } else {
            false
        }
    }

    /// Whole bytes of tokens left at the last update.
    pub fn tokens_bytes(&self) -> u64 {
        self.tokens_nanobytes / NANOBYTES_PER_BYTE
    }

    pub fn updated_ns(&self) -> u64 {
        self.updated_ns
    }
}

/// What the policer did, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicerCounters {
    /// WAN to LAN frames within the rate, sent on.
    pub passed: u64,
    pub passed_bytes: u64,
    /// WAN to LAN frames over the rate, dropped.
    pub over_rate: u64,
    pub over_rate_bytes: u64,
    /// LAN to WAN frames, sent on unpoliced.
    pub lan_to_wan: u64,
    /// Dropped: on the WAN port but not a parsable IPv4 TCP/UDP/ICMP frame
    /// (truncated, another EtherType, a non-first fragment).
    pub unparsable: u64,
    /// Dropped: arrived on neither the WAN nor the LAN port.
    pub wrong_port: u64,
}

impl PolicerCounters {
    /// The counters a live host publishes, by name.
    pub const NAMES: [&'static str; 7] =
        ["passed", "passed_bytes", "over_rate", "over_rate_bytes", "lan_to_wan", "unparsable", "wrong_port"];

    /// The values of [`PolicerCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 7] {
        [
            self.passed,
            self.passed_bytes,
            self.over_rate,
            self.over_rate_bytes,
            self.lan_to_wan,
            self.unparsable,
            self.wrong_port,
        ]
    }
}

impl PolicerCounters {
    fn merge(acc: &mut PolicerCounters, part: &PolicerCounters) {
        acc.passed += part.passed;
        acc.passed_bytes += part.passed_bytes;
        acc.over_rate += part.over_rate;
        acc.over_rate_bytes += part.over_rate_bytes;
        acc.lan_to_wan += part.lan_to_wan;
        acc.unparsable += part.unparsable;
        acc.wrong_port += part.wrong_port;
    }
}

/// The policer NF. See the module docs.
pub struct Policer {
    config: PolicerConfig,
    capacity_nanobytes: u64,
    /// Idle timeout of a per-destination set: the time an empty bucket
    /// takes to fill.
    refill_ns: u64,
    packet_sets: PacketSetDef,
    /// Per-destination buckets in [`PolicerSets::PerFlow`] mode.
    shared_buckets: Option<Map<IpAddr, TokenBucket>>,
    counters: Statistics<PolicerCounters>,
}

impl Policer {
    pub fn new(stm: &Stm, config: PolicerConfig) -> Result<Policer, PolicerError> {
        if config.rate_bytes_per_sec == 0 {
            return Err(PolicerError::ZeroRate);
        }
        if config.burst_bytes == 0 || config.burst_bytes > MAX_BURST_BYTES {
            return Err(PolicerError::Burst { burst: config.burst_bytes, max: MAX_BURST_BYTES });
        }
        if config.wan_port == config.lan_port {
            return Err(PolicerError::SamePorts { port: config.wan_port });
        }
        let capacity_nanobytes = config.burst_bytes * NANOBYTES_PER_BYTE;
        let refill_ns = capacity_nanobytes.div_ceil(config.rate_bytes_per_sec);
        let (fields, shared_buckets) = match config.sets {
            PolicerSets::PerDestination => (vec![Field::DstIp], None),
            PolicerSets::PerFlow => {
                let fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort, Field::IpProto];
                let map = Map::new(stm, "policer.buckets", config.map_buckets, DefaultBucketHash)?;
                (fields, Some(map))
            }
        };
        let wan = PortRule { port: config.wan_port, protocol: None, fields, symmetric: false };
        let lan_fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort, Field::IpProto];
        let lan = PortRule { port: config.lan_port, protocol: None, fields: lan_fields, symmetric: false };
        let packet_sets = PacketSetDef::new(vec![wan, lan])?;
        let counters = Statistics::new(stm, PolicerCounters::default(), PolicerCounters::merge);
        Ok(Policer { config, capacity_nanobytes, refill_ns, packet_sets, shared_buckets, counters })
    }

    pub fn packet_sets(&self) -> &PacketSetDef {
        &self.packet_sets
    }

    pub fn config(&self) -> &PolicerConfig {
        &self.config
    }

    /// The counters, outside any transaction (after a run).
    pub fn counters(&self) -> PolicerCounters {
        self.counters.merged()
    }

    /// The per-destination Map's buckets ([`PolicerSets::PerFlow`]; empty
    /// otherwise), sorted by address, outside any transaction.
    pub fn shared_buckets(&mut self) -> Vec<(IpAddr, TokenBucket)> {
        let mut buckets = self.shared_buckets.as_mut().map(|m| m.entries_mut()).unwrap_or_default();
        buckets.sort_by_key(|(addr, _)| *addr);
        buckets
    }

    fn take(&self, bucket: &mut TokenBucket, bytes: u64, now_ns: u64) -> bool {
        bucket.take(bytes, now_ns, self.config.rate_bytes_per_sec, self.capacity_nanobytes)
    }

    /// Polices `packet` against its destination's bucket in the Map.
    fn take_shared<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        map: &'a Map<IpAddr, TokenBucket>,
        packet: &Packet,
    ) -> Result<Option<bool>, Abort> {
        let Some(tuple) = five_tuple(packet.data()) else { return Ok(None) };
        let now = ctx.now_ns();
        let mut bucket = map.get(ctx.tx(), &tuple.dst_ip)?.unwrap_or(TokenBucket::full(self.capacity_nanobytes, now));
        let conforms = self.take(&mut bucket, packet.data().len() as u64, now);
        map.set(ctx.tx(), tuple.dst_ip, bucket)?;
        Ok(Some(conforms))
    }

    fn lan_to_wan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &Packet) {
        ctx.send(packet, self.config.wan_port);
        self.counters.update(ctx.tx(), |c| c.lan_to_wan += 1);
    }

    /// Sends a conforming frame on, counts a non-conforming one.
    fn verdict<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &Packet, conforms: Option<bool>) {
        let bytes = packet.data().len() as u64;
        match conforms {
            Some(true) => {
                ctx.send(packet, self.config.lan_port);
                self.counters.update(ctx.tx(), |c| {
                    c.passed += 1;
                    c.passed_bytes += bytes;
                });
            }
            Some(false) => self.counters.update(ctx.tx(), |c| {
                c.over_rate += 1;
                c.over_rate_bytes += bytes;
            }),
            None => self.counters.update(ctx.tx(), |c| c.unparsable += 1),
        }
    }
}

impl ParallelNf for Policer {
    /// The host's bucket for per-destination sets; `None` for per-flow
    /// sets (WAN ones with per-flow buckets, and all LAN ones), whose only
    /// job is to keep a flow on one worker, in order.
    type SetState = Option<TokenBucket>;

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        PolicerCounters::NAMES.into_iter().zip(self.counters().values()).collect()
    }

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<Option<TokenBucket>>>, Abort> {
        let new_set = if packet.port() == self.config.lan_port {
            self.lan_to_wan(ctx, packet);
            NewSet { state: None, idle_timeout_ns: FLOW_SET_IDLE_TIMEOUT_NS }
        } else if let Some(map) = &self.shared_buckets {
            let conforms = self.take_shared(ctx, map, packet)?;
            self.verdict(ctx, packet, conforms);
            NewSet { state: None, idle_timeout_ns: FLOW_SET_IDLE_TIMEOUT_NS }
        } else {
            let mut bucket = TokenBucket::full(self.capacity_nanobytes, ctx.now_ns());
            let conforms = self.take(&mut bucket, packet.data().len() as u64, ctx.now_ns());
            self.verdict(ctx, packet, Some(conforms));
            NewSet { state: Some(bucket), idle_timeout_ns: self.refill_ns.max(1) }
        };
        Ok(Some(new_set))
    }

    fn packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        bucket: &mut Option<TokenBucket>,
        packet: &mut Packet,
    ) -> Result<(), Abort> {
        if packet.port() == self.config.lan_port {
            self.lan_to_wan(ctx, packet);
            return Ok(());
        }
        let conforms = match (bucket, &self.shared_buckets) {
            (Some(bucket), _) => Some(self.take(bucket, packet.data().len() as u64, ctx.now_ns())),
            (None, Some(map)) => self.take_shared(ctx, map, packet)?,
            // Unreachable: a per-destination WAN set always has a bucket.
            (None, None) => None,
        };
        self.verdict(ctx, packet, conforms);
        Ok(())
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        if packet.port() == self.config.lan_port {
            self.lan_to_wan(ctx, packet);
        } else if packet.port() == self.config.wan_port {
            self.counters.update(ctx.tx(), |c| c.unparsable += 1);
        } else {
            self.counters.update(ctx.tx(), |c| c.wrong_port += 1);
        }
        Ok(())
    }
}
