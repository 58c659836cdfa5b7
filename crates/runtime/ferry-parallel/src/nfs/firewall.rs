//! Stateful firewall: internal hosts open connections; the outside may
//! only answer them.
//!
//! * A TCP or UDP packet from the internal port opens its connection (or
//!   keeps it open) and goes out of the external port.
//! * A packet from the external port goes in only when it answers an open
//!   connection: its reversed 5-tuple was opened from inside and the
//!   connection has not been idle for `idle_timeout_ns`. Answers keep the
//!   connection open too; blocked packets do not.
//! * Connections are the packet sets: the 5-tuple, with sources and
//!   destinations swapped on the external port (NFOS's two-NIC form), so
//!   both directions of a connection are one set on one core and its state
//!   is packet-set state. There is no aggregate state but the counters.
//! * The runtime expires an idle set only when a batch starts, so a
//!   timeout that passes in the middle of a batch would leave the set live
//!   until the batch ends, and batches differ with the number of cores. The
//!   firewall therefore also checks the idle time itself, per packet: exact
//!   timeouts, the same decisions on any number of cores.
//! * Flow-based, like Vigor's firewall: no TCP state machine (no SYN
//!   needed to open, FIN and RST do not close). IPv4 and IPv6 alike.
//!   Frames with no IP header, ICMP and other protocols, non-first
//!   fragments and frames on other ports are dropped and counted, as are
//!   frames the shared flow parser calls malformed.

use ferry_wire::{flow, ip_proto};

use crate::ds::Statistics;
use crate::packet_set::{Field, PacketSetDef, PortRule};
use crate::runtime::{Ctx, NewSet, Packet, ParallelNf, TraceConfig};
use crate::stm::{Abort, Stm};

/// The port facing the protected hosts.
pub const INTERNAL_PORT: u16 = 0;
/// The port facing the outside.
pub const EXTERNAL_PORT: u16 = 1;

/// How the firewall is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConfig {
    /// A connection without allowed traffic for this long is closed.
    pub idle_timeout_ns: u64,
}

impl Default for FirewallConfig {
    fn default() -> Self {
        FirewallConfig { idle_timeout_ns: 60_000_000_000 }
    }
}

impl FirewallConfig {
    /// How to run the firewall over a trace: two ports and its packet sets.
    pub fn trace_config(&self, workers: usize) -> TraceConfig {
        TraceConfig { workers, batch_size: 32, ports: 2, periodic_ns: None, packet_sets: Firewall::packet_sets() }
    }
}

/// Invalid firewall configurations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirewallError {
    #[error("idle_timeout_ns must be at least 1")]
    ZeroTimeout,
}

/// What the firewall did, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirewallCounters {
    /// Connections opened (again, after idling out) from inside.
    pub opened: u64,
    /// Internal → external packets passed.
    pub outbound: u64,
    /// External → internal packets passed (answers).
    pub inbound: u64,
    /// External packets that answer no open connection.
    pub blocked: u64,
    /// Connections the runtime removed after their idle timeout.
    pub expired: u64,
    /// Frames whose headers do not parse.
    pub dropped_malformed: u64,
    /// No IP header, not TCP or UDP, non-first fragments, unknown ports.
    pub dropped_unsupported: u64,
}

impl FirewallCounters {
    /// The counters a live host publishes, by name.
    pub const NAMES: [&'static str; 7] =
        ["opened", "outbound", "inbound", "blocked", "expired", "dropped_malformed", "dropped_unsupported"];

    /// The values of [`FirewallCounters::NAMES`], in that order.
    pub fn values(&self) -> [u64; 7] {
        [
            self.opened,
            self.outbound,
            self.inbound,
            self.blocked,
            self.expired,
            self.dropped_malformed,
            self.dropped_unsupported,
        ]
    }
}

impl FirewallCounters {
    fn merge(&mut self, other: &FirewallCounters) {
        self.opened += other.opened;
        self.outbound += other.outbound;
        self.inbound += other.inbound;
        self.blocked += other.blocked;
        self.expired += other.expired;
        self.dropped_malformed += other.dropped_malformed;
        self.dropped_unsupported += other.dropped_unsupported;
    }
}

/// The state of one connection (its packet set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// When it last passed a packet; open while younger than the timeout.
    last_active_ns: u64,
}

/// The firewall.
pub struct Firewall {
    config: FirewallConfig,
    counters: Statistics<FirewallCounters>,
}

impl Firewall {
    pub fn new(stm: &Stm, config: FirewallConfig) -> Result<Firewall, FirewallError> {
        if config.idle_timeout_ns == 0 {
            return Err(FirewallError::ZeroTimeout);
        }
        let counters = Statistics::new(stm, FirewallCounters::default(), FirewallCounters::merge);
        Ok(Firewall { config, counters })
    }

    pub fn config(&self) -> &FirewallConfig {
        &self.config
    }

    /// A connection per 5-tuple, the external port's fields swapped so an
    /// answer has the key of the packet it answers.
    pub fn packet_sets() -> PacketSetDef {
        let inside = vec![Field::SrcIp, Field::DstIp, Field::SrcPort, Field::DstPort, Field::IpProto];
        let outside = vec![Field::DstIp, Field::SrcIp, Field::DstPort, Field::SrcPort, Field::IpProto];
        let rule = |port, fields| PortRule { port, protocol: None, fields, symmetric: false };
        PacketSetDef::new(vec![rule(INTERNAL_PORT, inside), rule(EXTERNAL_PORT, outside)])
            .expect("a valid packet-set definition")
    }

    /// The counters, outside any transaction.
    pub fn counters(&self) -> FirewallCounters {
        self.counters.merged()
    }

    fn is_open(&self, connection: &Connection, now_ns: u64) -> bool {
        now_ns.saturating_sub(connection.last_active_ns) < self.config.idle_timeout_ns
    }

    fn count<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, f: impl FnOnce(&mut FirewallCounters)) {
        self.counters.update(ctx.tx(), f);
    }
}

/// Whether a packet that matched a packet set is TCP or UDP (sets are
/// formed for any IP packet with a 5-tuple, ICMP included).
fn is_tcp_or_udp(frame: &[u8]) -> bool {
    flow::parse(frame).is_ok_and(|f| f.ip.is_some() && matches!(f.proto, ip_proto::TCP | ip_proto::UDP))
}

/// Whether a frame on port 0 or 1 that formed no packet set is malformed
/// (by the shared flow parser), rather than something the firewall does
/// not handle.
fn is_malformed(frame: &[u8]) -> bool {
    flow::parse(frame).is_err()
}

impl ParallelNf for Firewall {
    type SetState = Connection;

    fn named_counters(&self) -> Vec<(&'static str, u64)> {
        FirewallCounters::NAMES.into_iter().zip(self.counters().values()).collect()
    }

    fn first_packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        packet: &mut Packet,
    ) -> Result<Option<NewSet<Connection>>, Abort> {
        if !is_tcp_or_udp(packet.data()) {
            self.count(ctx, |c| c.dropped_unsupported += 1);
            return Ok(None);
        }
        if packet.port() != INTERNAL_PORT {
            self.count(ctx, |c| c.blocked += 1);
            return Ok(None);
        }
        ctx.send(packet, EXTERNAL_PORT);
        self.count(ctx, |c| {
            c.opened += 1;
            c.outbound += 1;
        });
        let state = Connection { last_active_ns: ctx.now_ns() };
        Ok(Some(NewSet { state, idle_timeout_ns: self.config.idle_timeout_ns }))
    }

    fn packet<'a>(
        &'a self,
        ctx: &mut Ctx<'_, 'a>,
        connection: &mut Connection,
        packet: &mut Packet,
    ) -> Result<(), Abort> {
        let now = ctx.now_ns();
        let open = self.is_open(connection, now);
        if packet.port() == INTERNAL_PORT {
            connection.last_active_ns = now;
            ctx.send(packet, EXTERNAL_PORT);
            self.count(ctx, |c| {
                c.opened += u64::from(!open);
                c.outbound += 1;
            });
        } else if !open {
            self.count(ctx, |c| c.blocked += 1);
        } else {
            connection.last_active_ns = now;
            ctx.send(packet, INTERNAL_PORT);
            self.count(ctx, |c| c.inbound += 1);
        }
        Ok(())
    }

    fn expired<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, _connection: &Connection) -> Result<(), Abort> {
        self.count(ctx, |c| c.expired += 1);
        Ok(())
    }

    fn orphan<'a>(&'a self, ctx: &mut Ctx<'_, 'a>, packet: &mut Packet) -> Result<(), Abort> {
        let known_port = matches!(packet.port(), INTERNAL_PORT | EXTERNAL_PORT);
        if known_port && is_malformed(packet.data()) {
            self.count(ctx, |c| c.dropped_malformed += 1);
        } else {
            self.count(ctx, |c| c.dropped_unsupported += 1);
        }
        Ok(())
    }
}
