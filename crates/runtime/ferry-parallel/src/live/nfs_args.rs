//! The six NFs of [`crate::nfs`] as hosts build them ([`super::registry`]):
//! how each is built from `key=value` arguments (`args:` of a
//! `parallel-<name>` NF in a chain file), and its packet
//! sets and periodic timer. Every argument has a default, except Maglev's
//! `vip`; an error names the argument at fault.
//!
//! # Ports
//!
//! In live mode an NF receives on NF port `i` what arrived on the `i`-th
//! AF_XDP socket of its thread (the chain's ports in order of first
//! mention in the links, `from:` or `to:`; frames from another NF's ring
//! come in on the host's `ring_port`, default 0), and what it sends on NF
//! port `p` leaves through out-link `p` (its `p`-th `from:` line). The
//! output ports an NF is configured with are checked against its
//! out-links ([`NfEnv::ports`]) when it is built. A two-sided NF wants
//! side `i` both ways, so list its links so that the two numberings agree
//! (`examples/chains/parallel.yaml`):
//!
//! ```yaml
//! links:
//!   - { from: inside, to: fw }    # socket 0: NF port 0 in
//!   - { from: outside, to: fw }   # socket 1: NF port 1 in
//!   - { from: fw, to: inside }    # out-link 0: NF port 0 out
//!   - { from: fw, to: outside }   # out-link 1: NF port 1 out
//! ```
//!
//! # The NFs
//!
//! Durations are whole milliseconds (`_ms`) or microseconds (`_us`).
//!
//! * `nat` ([`Nat`]): NF port 0 is the internal side (in: from the
//!   internal hosts; out-link 0: inbound traffic translated back), port 1
//!   the external side (in: from outside; out-link 1: translated outbound
//!   traffic). Needs 2 out-links. `public_ip` (198.51.100.1), `ports=lo-hi`
//!   public ports, per protocol (1024-65535), `lease_ms` (300000),
//!   `refresh_ms` (1000; 0: refresh on every packet), `buckets` (16384),
//!   `reclaim_ms` (100: the periodic handler's period), `reclaim_batch`
//!   (64).
//! * `bridge` ([`Bridge`]): NF port `i` is bridge port `i`, both ways
//!   (frames in from socket `i`, out through out-link `i`; floods go out
//!   of every out-link but the arrival port's). `ports` (the NF's
//!   out-links, at least 2), `capacity` (65536 addresses), `timeout_ms`
//!   (120000), `refresh_ms` (1000), `buckets` (16384), `reclaim_ms` (100:
//!   the periodic handler's period), `reclaim_batch` (64).
//! * `firewall` ([`Firewall`]): NF port 0 is the internal side (in: from
//!   the protected hosts; out-link 0: answers let in), port 1 the external
//!   side (in: from outside, answers or unsolicited; out-link 1: traffic
//!   from inside). Needs 2 out-links. `idle_ms` (60000). No timer.
//! * `maglev` ([`Maglev`]): clients' packets arrive on NF port
//!   `client_port` (0); each backend's frames leave through the out-link
//!   given as its port (nothing comes back: direct server return). `vip`
//!   (required), `mac` (the balancer's, written as the source;
//!   02:00:00:00:00:fe), `backends=name:port:mac,...` (4 backends
//!   `backend-0`..`backend-3` on out-link 0 with MACs 02:be:00:00:00:00..03),
//!   `table_size` (65537, a prime), `idle_ms` (30000). No timer: every
//!   backend stays up (the health schedule is a trace-mode feature).
//! * `policer` ([`Policer`]): NF port `wan_port` (0) both ways: policed
//!   traffic in, LAN traffic out; `lan_port` (1) both ways: the LAN hosts'
//!   traffic in, conforming traffic out. Both must be out-links. `rate`
//!   (bytes per second per destination host, 12500000 = 100 Mbit/s),
//!   `burst` (bytes, 125000), `sets=dst|flow` (dst: a bucket per
//!   destination set; flow: per-flow sets, buckets in a Map), `buckets`
//!   (4096, the Map's, `sets=flow` only). No timer.
//! * `anti_ddos` ([`AntiDdos`]): monitored traffic arrives on NF port
//!   `in_port` (0) and accepted traffic leaves through out-link `out_port`
//!   (1). `threshold` (80: attack while more than this percentage of live
//!   flows are one-packet flows), `min_flows` (100), `idle_ms` (6000),
//!   `staleness_us` (100: how stale the merged flow counts may be; 0 merges
//!   on every read). No timer.

use std::net::IpAddr;
use std::ops::RangeInclusive;

use ferry_nf::model::{Element, Offload};

use super::registry::{NfEnv, NfSetup, RegisteredNf};
use crate::nfs::anti_ddos::{AntiDdos, AntiDdosConfig, AntiDdosCounters};
use crate::nfs::bridge::{Bridge, BridgeConfig, BridgeCounters};
use crate::nfs::firewall::{Firewall, FirewallConfig, FirewallCounters};
use crate::nfs::maglev::{Backend, Maglev, MaglevConfig, MaglevCounters, MaglevError};
use crate::nfs::nat::{Nat, NatConfig, NatCounters};
use crate::nfs::policer::{Policer, PolicerConfig, PolicerCounters, PolicerSets, MAX_BURST_BYTES};
use crate::runtime::TraceConfig;
use crate::stm::Stm;
use ferry_nf::args::{bad_value, ArgError, NfArgs};

/// Nanoseconds per millisecond and per microsecond.
const MS: u64 = 1_000_000;
const US: u64 = 1_000;

const NOT_A_NUMBER: &str = "not a non-negative integer";

pub const NAT_KEYS: &[&str] =
    &["public_ip", "ports", "lease_ms", "refresh_ms", "buckets", "reclaim_ms", "reclaim_batch"];
pub const BRIDGE_KEYS: &[&str] =
    &["ports", "capacity", "timeout_ms", "refresh_ms", "buckets", "reclaim_ms", "reclaim_batch"];
pub const FIREWALL_KEYS: &[&str] = &["idle_ms"];
pub const MAGLEV_KEYS: &[&str] = &["vip", "mac", "backends", "client_port", "table_size", "idle_ms"];
pub const POLICER_KEYS: &[&str] = &["rate", "burst", "sets", "wan_port", "lan_port", "buckets"];
pub const ANTI_DDOS_KEYS: &[&str] = &["in_port", "out_port", "threshold", "min_flows", "idle_ms", "staleness_us"];

/// Maglev's default balancer MAC.
pub const DEFAULT_MAGLEV_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// The policer's default rate (bytes per second: 100 Mbit/s) and burst
/// (bytes: 10 ms at that rate).
pub const DEFAULT_POLICER_RATE: u64 = 12_500_000;
pub const DEFAULT_POLICER_BURST: u64 = 125_000;

/// Maglev's default backends: `backend-0`..`backend-3` on out-link 0.
pub fn default_maglev_backends() -> Vec<Backend> {
    (0..4u8).map(|i| Backend { name: format!("backend-{i}"), port: 0, mac: [0x02, 0xbe, 0, 0, 0, i] }).collect()
}

/// A MAC address's bytes, from ferry-wire's one text form.
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    s.parse::<ferry_wire::MacAddr>().ok().map(|m| m.0)
}

/// `lo-hi` (or one port `p`), with `lo <= hi`.
pub fn parse_port_range(s: &str) -> Option<RangeInclusive<u16>> {
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
        None => {
            let p = s.trim().parse().ok()?;
            (p, p)
        }
    };
    (lo <= hi).then_some(lo..=hi)
}

/// `name:port:mac[,name:port:mac...]` (the MAC keeps its colons; names
/// are non-empty and contain neither `:` nor `,`).
pub fn parse_backends(s: &str) -> Option<Vec<Backend>> {
    s.split(',')
        .map(|b| {
            let mut it = b.trim().splitn(3, ':');
            let (name, port, mac) = (it.next()?, it.next()?, it.next()?);
            if name.is_empty() {
                return None;
            }
            Some(Backend { name: name.to_string(), port: port.parse().ok()?, mac: parse_mac(mac)? })
        })
        .collect()
}

fn number<T: std::str::FromStr>(args: &NfArgs, key: &str, default: T) -> Result<T, ArgError> {
    args.parse_or(key, default, NOT_A_NUMBER, |v| v.parse().ok())
}

/// `value` (of `key`) must be at least 1.
/// The lease-table settings NAT and the bridge both take: the refresh
/// interval of their Allocator, their Map's buckets and the periodic
/// reclaim of expired leases.
struct LeaseTable {
    refresh_interval_ns: u64,
    buckets: usize,
    reclaim_period_ns: u64,
    reclaim_batch: usize,
}

impl LeaseTable {
    /// `refresh_ms`, `buckets`, `reclaim_ms` and `reclaim_batch` from
    /// `args`, each defaulting to the field of `defaults`.
    fn parse(args: &NfArgs, defaults: LeaseTable) -> Result<LeaseTable, ArgError> {
        Ok(LeaseTable {
            refresh_interval_ns: args.duration_ns_or("refresh_ms", MS, defaults.refresh_interval_ns)?,
            buckets: positive(args, "buckets", number(args, "buckets", defaults.buckets)?)?,
            reclaim_period_ns: positive(
                args,
                "reclaim_ms",
                args.duration_ns_or("reclaim_ms", MS, defaults.reclaim_period_ns)?,
            )?,
            reclaim_batch: positive(args, "reclaim_batch", number(args, "reclaim_batch", defaults.reclaim_batch)?)?,
        })
    }
}

fn positive<T: PartialEq + Default>(args: &NfArgs, key: &str, value: T) -> Result<T, ArgError> {
    if value == T::default() {
        return Err(bad_value(key, args.get(key).unwrap_or("0"), "must be at least 1"));
    }
    Ok(value)
}

/// Output port `port` (argument `key`) must be an out-link.
fn out_link(env: &NfEnv, key: &str, port: u16) -> Result<u16, ArgError> {
    if port >= env.ports {
        return Err(ArgError::NoOutLink { key: key.to_string(), port, out_links: env.ports });
    }
    Ok(port)
}

/// A two-sided NF (port 0 inside, port 1 outside) needs both out-links.
fn two_sided(nf: &'static str, env: &NfEnv) -> Result<(), ArgError> {
    if env.ports < 2 {
        let message =
            format!("needs 2 out-links (0: the internal side, 1: the external side); the NF has {}", env.ports);
        return Err(ArgError::Build { nf, message });
    }
    Ok(())
}

fn built(nf: &'static str, e: impl std::fmt::Display) -> ArgError {
    ArgError::Build { nf, message: e.to_string() }
}

fn setup(trace: TraceConfig) -> NfSetup {
    NfSetup { packet_sets: trace.packet_sets, periodic_ns: trace.periodic_ns }
}

impl RegisteredNf for Nat {
    const SUMMARY: &'static str = "endpoint-independent NAT (RFC 4787), ports leased from per-core pools";
    const IP: &'static str = "a NAT44: IPv4 only; IPv6 dropped and counted (dropped_unsupported): no NAT66 (RFC 6296 prefix translation is a different NF, not built)";
    // XDP rewrites established mappings; a new flow needs a lease.
    const ELEMENTS: &'static [Element] = &[
        Element { name: "ip-classifier", offload: Offload::Full },
        Element { name: "ip-rewriter", offload: Offload::Partial },
    ];
    const ARGS: &'static [&'static str] = NAT_KEYS;
    const COUNTERS: &'static [&'static str] = &NatCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        two_sided("nat", env)?;
        let d = NatConfig::default();
        let public_ip = args.parse_or("public_ip", d.public_ip, "not an IPv4 address", |v| v.parse().ok())?;
        let ports = args.parse_or("ports", d.ports, "not a port range lo-hi with lo <= hi", parse_port_range)?;
        let lease_ns = positive(args, "lease_ms", args.duration_ns_or("lease_ms", MS, d.lease_ns)?)?;
        let table = LeaseTable::parse(
            args,
            LeaseTable {
                refresh_interval_ns: d.refresh_interval_ns,
                buckets: d.buckets,
                reclaim_period_ns: d.reclaim_period_ns,
                reclaim_batch: d.reclaim_batch,
            },
        )?;
        let config = NatConfig {
            public_ip,
            ports,
            lease_ns,
            refresh_interval_ns: table.refresh_interval_ns,
            buckets: table.buckets,
            reclaim_period_ns: table.reclaim_period_ns,
            reclaim_batch: table.reclaim_batch,
        };
        let trace = config.trace_config(env.workers);
        let nf = Nat::new(stm, config).map_err(|e| built("nat", e))?;
        Ok((nf, setup(trace)))
    }
}

impl RegisteredNf for Bridge {
    const SUMMARY: &'static str = "MAC-learning bridge with entry expiry and a refresh interval";
    const IP: &'static str = "layer 2: any frame, IPv4 or IPv6, tagged or not";
    // Forwarding to a learnt MAC is a lookup; learning creates entries.
    const ELEMENTS: &'static [Element] = &[Element { name: "mac-learning-forward", offload: Offload::Partial }];
    const ARGS: &'static [&'static str] = BRIDGE_KEYS;
    const COUNTERS: &'static [&'static str] = &BridgeCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        let d = BridgeConfig::default();
        let ports: u16 = number(args, "ports", env.ports)?;
        if ports < 2 {
            let reason = "a bridge needs at least 2 ports (out-links)";
            return Err(ArgError::BadValue { key: "ports".into(), value: ports.to_string(), reason });
        }
        if ports > env.ports {
            // Bridge port i is out-link i.
            return Err(ArgError::NoOutLink { key: "ports".into(), port: ports - 1, out_links: env.ports });
        }
        let capacity = positive(args, "capacity", number(args, "capacity", d.capacity)?)?;
        let mac_timeout_ns = positive(args, "timeout_ms", args.duration_ns_or("timeout_ms", MS, d.mac_timeout_ns)?)?;
        let table = LeaseTable::parse(
            args,
            LeaseTable {
                refresh_interval_ns: d.refresh_interval_ns,
                buckets: d.buckets,
                reclaim_period_ns: d.reclaim_period_ns,
                reclaim_batch: d.reclaim_batch,
            },
        )?;
        let config = BridgeConfig {
            ports,
            capacity,
            mac_timeout_ns,
            refresh_interval_ns: table.refresh_interval_ns,
            buckets: table.buckets,
            reclaim_period_ns: table.reclaim_period_ns,
            reclaim_batch: table.reclaim_batch,
        };
        let trace = config.trace_config(env.workers);
        let nf = Bridge::new(stm, config).map_err(|e| built("bridge", e))?;
        Ok((nf, setup(trace)))
    }
}

impl RegisteredNf for Firewall {
    const SUMMARY: &'static str = "stateful firewall: inside opens connections, outside only answers";
    const IP: &'static str =
        "IPv4 and IPv6 connections alike (packet sets over 128-bit addresses), through up to two VLAN tags";
    // Answers on a known connection are a lookup; a new one is an entry.
    const ELEMENTS: &'static [Element] = &[
        Element { name: "ip-filter", offload: Offload::Full },
        Element { name: "connection-tracker", offload: Offload::Partial },
    ];
    const ARGS: &'static [&'static str] = FIREWALL_KEYS;
    const COUNTERS: &'static [&'static str] = &FirewallCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        two_sided("firewall", env)?;
        let d = FirewallConfig::default();
        let config = FirewallConfig {
            idle_timeout_ns: positive(args, "idle_ms", args.duration_ns_or("idle_ms", MS, d.idle_timeout_ns)?)?,
        };
        let trace = config.trace_config(env.workers);
        let nf = Firewall::new(stm, config).map_err(|e| built("firewall", e))?;
        Ok((nf, setup(trace)))
    }
}

impl RegisteredNf for Maglev {
    const SUMMARY: &'static str = "Maglev load balancer with connection affinity";
    const IP: &'static str = "one VIP, IPv4 or IPv6 (vip=); the connection hash covers either version's addresses";
    const ELEMENTS: &'static [Element] = &[
        Element { name: "ip-classifier", offload: Offload::Full },
        Element { name: "lb-rewriter", offload: Offload::Partial },
    ];
    const ARGS: &'static [&'static str] = MAGLEV_KEYS;
    const COUNTERS: &'static [&'static str] = &MaglevCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        let vip: IpAddr = args.parse_required("vip", "an IPv4 or IPv6 address", |v| v.parse().ok())?;
        let mac = args.parse_or("mac", DEFAULT_MAGLEV_MAC, "not a MAC address aa:bb:cc:dd:ee:ff", parse_mac)?;
        let backends = args.parse_or(
            "backends",
            default_maglev_backends(),
            "not a list name:port:mac[,name:port:mac...]",
            parse_backends,
        )?;
        for b in &backends {
            out_link(env, "backends", b.port)?;
        }
        let mut config = MaglevConfig::new(vip, mac, backends);
        config.client_port = number(args, "client_port", config.client_port)?;
        config.table_size = number(args, "table_size", config.table_size)?;
        config.flow_idle_timeout_ns =
            positive(args, "idle_ms", args.duration_ns_or("idle_ms", MS, config.flow_idle_timeout_ns)?)?;
        let nf = Maglev::new(stm, config).map_err(|e| match e {
            MaglevError::TableSizeNotPrime { .. }
            | MaglevError::TableTooSmall { .. }
            | MaglevError::TableTooLarge { .. } => built("maglev", format!("table_size: {e}")),
            MaglevError::NoBackends | MaglevError::TooManyBackends { .. } | MaglevError::DuplicateBackend { .. } => {
                built("maglev", format!("backends: {e}"))
            }
            e => built("maglev", e),
        })?;
        let packet_sets = nf.packet_sets().clone();
        Ok((nf, NfSetup { packet_sets, periodic_ns: None }))
    }
}

impl RegisteredNf for Policer {
    const SUMMARY: &'static str = "per-destination token-bucket policer";
    const IP: &'static str = "a bucket per destination, IPv4 or IPv6";
    const ELEMENTS: &'static [Element] = &[Element { name: "policer", offload: Offload::Full }];
    const ARGS: &'static [&'static str] = POLICER_KEYS;
    const COUNTERS: &'static [&'static str] = &PolicerCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        let rate = positive(args, "rate", number(args, "rate", DEFAULT_POLICER_RATE)?)?;
        let burst = number(args, "burst", DEFAULT_POLICER_BURST)?;
        if burst == 0 || burst > MAX_BURST_BYTES {
            return Err(bad_value("burst", args.get("burst").unwrap_or("0"), "must be 1..=18446744073 bytes"));
        }
        let mut config = PolicerConfig::new(rate, burst);
        config.sets = args.parse_or("sets", config.sets, "not dst or flow", |v| match v {
            "dst" | "destination" | "per-destination" => Some(PolicerSets::PerDestination),
            "flow" | "per-flow" => Some(PolicerSets::PerFlow),
            _ => None,
        })?;
        config.wan_port = out_link(env, "wan_port", number(args, "wan_port", config.wan_port)?)?;
        config.lan_port = out_link(env, "lan_port", number(args, "lan_port", config.lan_port)?)?;
        if config.wan_port == config.lan_port {
            let v = config.lan_port.to_string();
            return Err(bad_value("lan_port", &v, "must differ from wan_port"));
        }
        config.map_buckets = positive(args, "buckets", number(args, "buckets", config.map_buckets)?)?;
        let nf = Policer::new(stm, config).map_err(|e| built("policer", e))?;
        let packet_sets = nf.packet_sets().clone();
        Ok((nf, NfSetup { packet_sets, periodic_ns: None }))
    }
}

impl RegisteredNf for AntiDdos {
    const SUMMARY: &'static str = "SYN-flood detector over distributed flow counters (NFOS Listing 2)";
    const IP: &'static str = "TCP over IPv4 and IPv6 alike";
    // Counting distinct flows per destination creates entries.
    const ELEMENTS: &'static [Element] = &[Element { name: "flow-counter", offload: Offload::Partial }];
    const ARGS: &'static [&'static str] = ANTI_DDOS_KEYS;
    const COUNTERS: &'static [&'static str] = &AntiDdosCounters::NAMES;

    fn build(stm: &Stm, env: &NfEnv, args: &NfArgs) -> Result<(Self, NfSetup), ArgError> {
        args.only(Self::ARGS)?;
        let mut config = AntiDdosConfig::new();
        config.in_port = number(args, "in_port", config.in_port)?;
        config.out_port = out_link(env, "out_port", number(args, "out_port", config.out_port)?)?;
        if config.in_port == config.out_port {
            let v = config.out_port.to_string();
            return Err(bad_value("out_port", &v, "must differ from in_port"));
        }
        config.one_packet_flow_percent =
            args.parse_or("threshold", config.one_packet_flow_percent, "not a percentage 0..=100", |v| {
                v.parse().ok().filter(|p| *p <= 100)
            })?;
        config.min_flows = args.parse_or("min_flows", config.min_flows, NOT_A_NUMBER, |v| {
            v.parse::<u64>().ok().and_then(|n| i64::try_from(n).ok())
        })?;
        config.flow_idle_timeout_ns =
            positive(args, "idle_ms", args.duration_ns_or("idle_ms", MS, config.flow_idle_timeout_ns)?)?;
        config.counter_staleness_ns = args.duration_ns_or("staleness_us", US, config.counter_staleness_ns)?;
        let nf = AntiDdos::new(stm, config).map_err(|e| built("anti_ddos", e))?;
        let packet_sets = nf.packet_sets().clone();
        Ok((nf, NfSetup { packet_sets, periodic_ns: None }))
    }
}
