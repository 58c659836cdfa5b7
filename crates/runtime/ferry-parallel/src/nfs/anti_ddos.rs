//! Anti-DDoS: the SYN-flood detector of NFOS §4.8 (Listing 2, adapted
//! there from NFF-Go's anti-DDoS example).
//!
//! # Semantics (Listing 2)
//!
//! A packet set is a TCP flow on the input port (Listing 1: source and
//! destination address and port). Two counters are aggregate state:
//! `flows`, the live flows, and `one_packet_flows`, those that have had
//! only one packet so far. The detector declares an attack while more than
//! 80% of the live flows are one-packet flows: a flood of spoofed SYNs
//! makes many flows that never send a second packet.
//!
//! * first packet of a flow: `flows += 1`, `one_packet_flows += 1` (the
//!   flow counts as a one-packet flow until proven otherwise), then read
//!   the counters; under attack the packet is dropped (Listing 2's
//!   `handle_ddos()`, left open there; NFF-Go drops packets of flows not
//!   seen before while the attack lasts), otherwise it is sent on. Either
//!   way the flow is registered, so a real client's retry, its second
//!   packet, gets through;
//! * a later packet: the first one takes the flow out of
//!   `one_packet_flows`; every later packet is sent on;
//! * a flow expires after `flow_idle_timeout_ns` without packets (NFF-Go's
//!   monitoring window, 6 s): `flows -= 1`, and `one_packet_flows -= 1` if
//!   it never had a second packet. So the counts cover the flows active
//!   within the window, and an attack ends once its flows time out.
//!
//! What Listing 2 leaves out and this NF adds:
//!
//! * `min_flows`: no verdict below it. Read literally, Listing 2 flags the
//!   very first flow of a run (`1 > 0.8 * 1`) and every quiet period;
//! * non-TCP IPv4 packets on the input port are sent on unchanged and
//!   counted (Listing 2 has no orphan handler, so NFOS would drop them);
//!   frames that are not IPv4 TCP/UDP/ICMP, and packets on other ports,
//!   are dropped and counted.
//!
//! Detection is global, as in the paper: it does not tell attack sources
//! from others, and under attack every new flow's first packet is
//! dropped, whatever its source.
//!
//! # The counters and their staleness (NFOS Figure 4)
//!
//! The counters are a [`DistributedObj`]: each worker updates its own
//! part, and a read merges all parts. With a maximum staleness of 0 (the
//! paper's default semantics) every first packet merges, and its
//! transaction, which also updates its own part, aborts whenever another
//! worker updated a part since: under a flood of one-packet flows almost
//! every transaction conflicts. Allowing reads up to 0.1 ms stale (the
//! paper's recipe, [`DEFAULT_COUNTER_STALENESS_NS`]) lets a worker reuse
//! its last merge for that long, at the price of a verdict that lags the
//! counts by up to that much packet time.

use ferry_wire::{five_tuple, L4Proto};

use crate::ds::{DistributedObj, Statistics};
use crate::packet_set::{Field, PacketSetDef, PacketSetError, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf};
use crate::stm::{Abort, Stm};

/// Listing 2's threshold: more than 80% one-packet flows.
pub const DEFAULT_ONE_PACKET_FLOW_PERCENT: u32 = 80;

/// NFF-Go's monitoring window: a flow is forgotten after 6 s without
/// packets.
pub const DEFAULT_FLOW_IDLE_TIMEOUT_NS: u64 = 6_000_000_000;

/// The staleness NFOS's case study settles on (0.1 ms).
pub const DEFAULT_COUNTER_STALENESS_NS: u64 = 100_000;

/// No verdict with fewer live flows than this.
pub const DEFAULT_MIN_FLOWS: i64 = 100;

/// How to build an [`AntiDdos`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AntiDdosConfig {
    /// Where the monitored traffic arrives.
    pub in_port: u16,
    /// Where accepted traffic leaves.
    pub out_port: u16,
    /// Attack while more than this percentage of live flows are one-packet
    /// flows.
    pub one_packet_flow_percent: u32,
    /// No attack is declared with fewer live flows.
    pub min_flows: i64,
    pub flow_idle_timeout_ns: u64,
    /// How old (in packet time) the merged counters a verdict uses may be;
    /// 0 merges on every read.
    pub counter_staleness_ns: u64,
}

impl AntiDdosConfig {
    /// In port 0, out port 1, and the defaults above.
    pub fn new() -> AntiDdosConfig {
        AntiDdosConfig {
            in_port: 0,
            out_port: 1,
            one_packet_flow_percent: DEFAULT_ONE_PACKET_FLOW_PERCENT,
            min_flows: DEFAULT_MIN_FLOWS,
            flow_idle_timeout_ns: DEFAULT_FLOW_IDLE_TIMEOUT_NS,
            counter_staleness_ns: DEFAULT_COUNTER_STALENESS_NS,
        }
    }
}

impl Default for AntiDdosConfig {
    fn default() -> AntiDdosConfig {
        AntiDdosConfig::new()
    }
}

/// Invalid configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AntiDdosError {
    #[error("one-packet flow percentage must be at most 100, not {0}")]
    Percent(u32),
    #[error("flow idle timeout must be at least 1 ns")]
    ZeroIdleTimeout,
    #[error("in and out port are both {port}")]
    SamePorts { port: u16 },
    #[error(transparent)]
    PacketSet(#[from] PacketSetError),
}

/// Listing 2's `cntrs`. Signed: a worker's part only ever counts flows of
/// its own sets, so it never goes below 0, but the type does not rely on
/// that.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    pub flows: i64,
    pub one_packet_flows: i64,
}

impl FlowCounts {
    fn merge(acc: &mut FlowCounts, part: &FlowCounts) {
        acc.flows += part.flows;
        acc.one_packet_flows += part.one_packet_flows;
    }
}

/// What the detector did, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AntiDdosCounters {
    /// TCP packets sent on.
    pub forwarded: u64,
    /// TCP flows seen (first packets).
    pub new_flows: u64,
    /// First packets dropped because an attack was declared.
    pub dropped_new_flows: u64,
    /// Non-TCP IPv4 packets sent on unchecked.
    pub not_tcp: u64,
    /// Dropped: on the input port but not a parsable IPv4 TCP/UDP/ICMP
    /// frame (truncated, another EtherType, a non-first fragment).
    pub unparsable: u64,
    /// Dropped: arrived on another port than the input port.
    pub wrong_port: u64,
}

impl AntiDdosCounters {
    /// The counters a live host publishes, by name.
    pub const NAMES: [&'static str; 6] =
        ["forwarded", "new_flows", "dropped_new_flows", "not_tcp", "unparsable", "wrong_port"];

    /// The values of [`AntiDdosCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 6] {
        [self.forwarded, self.new_flows, self.dropped_new_flows, self.not_tcp, self.unparsable, self.wrong_port]
    }
}

impl AntiDdosCounters {
    fn merge(acc: &mut AntiDdosCounters, part: &AntiDdosCounters) {
        acc.forwarded += part.forwarded;
        acc.new_flows += part.new_flows;
        acc.dropped_new_flows += part.dropped_new_flows;
        acc.not_tcp += part.not_tcp;
        acc.unparsable += part.unparsable;
        acc.wrong_port += part.wrong_port;
    }
}

/// Listing 2's `isOnePktFlow`: the flow has had one packet only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowState {
    pub one_packet: bool,
}

/// The detector NF. See the module docs.
pub struct AntiDdos {
    config: AntiDdosConfig,
    packet_sets: PacketSetDef,
    flow_counts: DistributedObj<FlowCounts>,
    /// Statistics only: never read in a transaction, so updating them
    /// conflicts with nothing (kept apart from `flow_counts` so they do
    /// not change its conflict profile).
    counters: Statistics<AntiDdosCounters>,
}

impl AntiDdos {
    pub fn new(stm: &Stm, config: AntiDdosConfig) -> Result<AntiDdos, AntiDdosError> {
        if config.one_packet_flow_percent > 100 {
            return Err(AntiDdosError::Percent(config.one_packet_flow_percent));
        }
        if config.flow_idle_timeout_ns == 0 {
            return Err(AntiDdosError::ZeroIdleTimeout);
        }
        if config.in_port == config.out_port {
            return Err(AntiDdosError::SamePorts { port: config.in_port });
        }
        let fields = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort];
        let rule = PortRule { port: config.in_port, protocol: Some(L4Proto::Tcp), fields, symmetric: false };
        let packet_sets = PacketSetDef::new(vec![rule])?;
        let flow_counts = DistributedObj::new(
            stm,
            "anti_ddos.flow_counts",
            FlowCounts::default(),
            FlowCounts::merge,
            config.counter_staleness_ns,
        );
        let counters = Statistics::new(stm, AntiDdosCounters::default(), AntiDdosCounters::merge);
        Ok(AntiDdos { config, packet_sets, flow_counts, counters })
    }

    /// TCP flows on the input port (Listing 1).
    pub fn packet_sets(&self) -> &PacketSetDef {
        &self.packet_sets
    }

    pub fn config(&self) -> &AntiDdosConfig {
        &self.config
    }

    /// The flow counts, outside any transaction (after a run).
    pub fn flow_counts(&mut self) -> FlowCounts {
        self.flow_counts.merged_mut()
    }

    /// The statistics, outside any transaction (after a run).
    pub fn counters(&self) -> AntiDdosCounters {
        self.counters.merged()
    }

    /// Listing 2's test, with the `min_flows` guard.
    pub fn is_attack(&self, counts: &FlowCounts) -> bool {
        counts.flows >= self.config.min_flows
            && i128::from(counts.one_packet_flows) * 100
                > i128::from(self.config.one_packet_flow_percent) * i128::from(counts.flows)
    }

    fn count<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, f: impl FnOnce(&mut AntiDdosCounters)) {
        self.counters.update(ctx.tx(), f);
    }
}

impl ParallelNf for AntiDdos {
    type SetState = FlowState;

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        AntiDdosCounters::NAMES.into_iter().zip(self.counters().values()).collect()
    }

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<FlowState>>, Abort> {
        self.flow_counts.update(ctx.tx(), |c| {
            c.flows += 1;
            c.one_packet_flows += 1;
        })?;
        let counts = self.flow_counts.read(ctx.tx())?;
        if self.is_attack(&counts) {
            self.count(ctx, |c| {
                c.new_flows += 1;
                c.dropped_new_flows += 1;
            });
        } else {
            ctx.send(packet, self.config.out_port);
            self.count(ctx, |c| {
                c.new_flows += 1;
                c.forwarded += 1;
            });
        }
        let state = FlowState { one_packet: true };
        Ok(Some(NewSet { state, idle_timeout_ns: self.config.flow_idle_timeout_ns }))
    }

    fn packet<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, flow: &mut FlowState, packet: &mut Packet) -> Result<(), Abort> {
        if flow.one_packet {
            flow.one_packet = false;
            self.flow_counts.update(ctx.tx(), |c| c.one_packet_flows -= 1)?;
        }
        ctx.send(packet, self.config.out_port);
        self.count(ctx, |c| c.forwarded += 1);
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, flow: &FlowState) -> Result<(), Abort> {
        let one_packet = flow.one_packet;
        self.flow_counts.update(ctx.tx(), |c| {
            c.flows -= 1;
            if one_packet {
                c.one_packet_flows -= 1;
            }
        })
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        if packet.port() != self.config.in_port {
            self.count(ctx, |c| c.wrong_port += 1);
        } else if five_tuple(packet.data()).is_some() {
            // TCP frames on the input port are sets; an orphan that parses
            // is UDP or ICMP.
            ctx.send(packet, self.config.out_port);
            self.count(ctx, |c| c.not_tcp += 1);
        } else {
            self.count(ctx, |c| c.unparsable += 1);
        }
        Ok(())
    }
}
