//! eNAT: a NAT split as P4SFC splits a partially offloadable NF. The
//! stateless part, rewriting frames of established mappings, runs in XDP
//! (`ferry_enat` outbound on the inside port, `ferry_enat_reply` inbound on
//! the outside ports); the stateful part, making mappings, runs here, in
//! the slow path. An inside endpoint's first frame misses in XDP and comes
//! here: this allocates a public port, installs both halves of the mapping
//! through the state library (inbound first, so the first reply finds
//! it), translates the frame and hands it on to the stack.
//!
//! RFC 4787: mapping is endpoint-independent (REQ-1: one public port per
//! inside endpoint and protocol, whatever it talks to) and so is filtering
//! (any outside endpoint may send to a live mapping). Outbound traffic
//! refreshes a mapping (REQ-6); inbound does not. A mapping idle for the
//! timeout (REQ-5: 300 s by default) expires, both halves at once, and its
//! port is free again. Not translated, and dropped: fragments (counted by
//! the fast path), frames that are not IPv4 TCP or UDP reach here only if
//! malformed. No hairpinning.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ferry_bpf::abi::SlowMeta;
use ferry_bpf::hybrid::{HybridMaps, NatEntry, NatKey, NAT_IN, NAT_OUT};
use ferry_wire::ipv4::ip_proto;
use ferry_wire::nat::{Endpoint, Headers, Side, Transport};

use crate::config::EvnfSpec;
use crate::config::NatSpec;
use ferry_sys::monotonic_ns;

use crate::hybrid::{FastTable, HybridNf, SlowVerdict, Stamped};
use crate::EvnfError;

impl Stamped for NatEntry {
    fn last_seen_ns(&self) -> u64 {
        self.last_seen_ns
    }
}

/// The public ports of one protocol that no mapping holds. Taking one
/// costs O(1) however large the range and however many are in use, so a
/// NAT out of ports refuses a new endpoint at once instead of searching
/// the range for every frame. Ports come out in the order they went in:
/// the one free the longest first, so a port just freed is reused last
/// (late frames of its old mapping find nothing new there).
#[derive(Default)]
struct PortPool {
    free: VecDeque<u16>,
}

/// The protocols a NAPT maps, in [`Nat::pools`] order.
const TRANSPORTS: [Transport; 2] = [Transport::Udp, Transport::Tcp];

/// `t`'s index in [`TRANSPORTS`].
fn pool_of(t: Transport) -> usize {
    match t {
        Transport::Udp => 0,
        Transport::Tcp => 1,
    }
}

impl PortPool {
    /// The ports `first..=last` but those `in_use` says a mapping holds.
    fn new(first: u16, last: u16, in_use: impl Fn(u16) -> bool) -> PortPool {
        PortPool { free: (first..=last).filter(|&p| !in_use(p)).collect() }
    }

    fn take(&mut self) -> Option<u16> {
        self.free.pop_front()
    }

    /// A port whose mapping ended: free again, after every other.
    fn give_back(&mut self, port: u16) {
        self.free.push_back(port);
    }
}

/// How often a mapping seen in the process is written to the table again.
const REINSTALL_NS: u64 = 1_000_000_000;

pub struct Nat {
    spec: NatSpec,
    ports: (u16, u16),
    table: FastTable<NatKey, NatEntry>,
    /// Inside endpoint -> public port, and back, per protocol.
    public_of: HashMap<(Transport, Endpoint), u16>,
    inside_of: HashMap<(Transport, u16), Endpoint>,
    /// Free public ports of UDP and TCP ([`pool_of`]), made once the
    /// adopted mappings are known.
    pools: [PortPool; 2],
    /// When each mapping was last written to the table.
    installed_at: HashMap<(Transport, Endpoint), u64>,
    made: u64,
    expired: u64,
    exhausted: u64,
    /// Mappings the fast path's table would not take.
    errors: u64,
    /// Frames the process dropped (malformed, fragments) or passed on
    /// unchanged (not IPv4 TCP/UDP).
    refused: u64,
    not_natted: u64,
    /// Frames the process translated.
    translated: u64,
}

fn out_key(t: Transport, inside: Endpoint) -> NatKey {
    NatKey::new(ipv4(inside), inside.port, t.ip_proto(), NAT_OUT)
}

/// The eNAT translates IPv4 (NAPT, RFC 3022): every endpoint it keeps is
/// IPv4, as [`Nat::on_slow_path`] lets nothing else in.
fn ipv4(e: Endpoint) -> Ipv4Addr {
    match e.ip {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => unreachable!("eNAT endpoints are IPv4: on_slow_path lets only IPv4 in"),
    }
}

fn in_key(t: Transport, public_ip: Ipv4Addr, port: u16) -> NatKey {
    NatKey::new(public_ip, port, t.ip_proto(), NAT_IN)
}

impl Nat {
    pub fn new(fast: &HybridMaps, spec: NatSpec) -> Result<Nat, EvnfError> {
        let ports = spec.port_range().map_err(EvnfError::Config)?;
        let table = FastTable::new(
            fast.map_handle("ferry_nat_map")?,
            "nat",
            &["addr", "port", "proto", "dir"],
            &["addr", "port", "last_seen_ns"],
            Duration::from_secs_f64(spec.idle_timeout_s),
        )?;
        let mut nat = Nat {
            spec,
            ports,
            table,
            public_of: HashMap::new(),
            inside_of: HashMap::new(),
            pools: [PortPool::default(), PortPool::default()],
            installed_at: HashMap::new(),
            made: 0,
            expired: 0,
            exhausted: 0,
            errors: 0,
            refused: 0,
            not_natted: 0,
            translated: 0,
        };
        nat.adopt()?;
        let ((first, last), inside_of) = (nat.ports, &nat.inside_of);
        nat.pools = TRANSPORTS.map(|t| PortPool::new(first, last, |p| inside_of.contains_key(&(t, p))));
        Ok(nat)
    }

    /// Takes over the mappings the fast path holds (a restarted control
    /// plane), so it never hands out a port in use. A mapping that does not
    /// fit the configuration now (another public address, a port out of
    /// the range) or lacks a half is removed, both halves.
    fn adopt(&mut self) -> Result<(), EvnfError> {
        let entries = self.table.entries();
        let (first, last) = self.ports;
        let mut kept: Vec<NatKey> = Vec::new();
        for (k, v) in &entries {
            let Some((t, inside, port)) = outbound(k, v) else { continue };
            let public = Ipv4Addr::from(v.addr.to_ne_bytes());
            let back = in_key(t, public, port);
            let whole = self.table.get(&back)?.is_some_and(|b| {
                Ipv4Addr::from(b.addr.to_ne_bytes()) == inside.ip && u16::from_be(b.port) == inside.port
            });
            if whole && public == self.spec.public_ip && (first..=last).contains(&port) {
                self.public_of.insert((t, inside), port);
                self.inside_of.insert((t, port), inside);
                kept.extend([*k, back]);
            }
        }
        for (k, _) in entries {
            if !kept.contains(&k) {
                self.table.remove(&k)?;
            }
        }
        Ok(())
    }

    /// The public endpoint of `inside`, made now if it has none. A known
    /// mapping is installed again, at most every [`REINSTALL_NS`]: its
    /// frame came here because the fast path lost it, or because there is
    /// no fast path (the NAT runs whole as a process), and then the write
    /// is the mapping's last-seen stamp, which its expiry reads.
    fn mapping(&mut self, t: Transport, inside: Endpoint, now: u64) -> Option<Endpoint> {
        let public_ip = self.spec.public_ip;
        let known = self.public_of.get(&(t, inside)).copied();
        if let (Some(port), Some(at)) = (known, self.installed_at.get(&(t, inside))) {
            if now.saturating_sub(*at) < REINSTALL_NS {
                return Some(Endpoint { ip: public_ip.into(), port });
            }
        }
        let Some(port) = known.or_else(|| self.pools[pool_of(t)].take()) else {
            self.exhausted += 1;
            return None;
        };
        let back = NatEntry::new(ipv4(inside), inside.port, now);
        let out = NatEntry::new(public_ip, port, now);
        let installed = self
            .table
            .install(in_key(t, public_ip, port), back)
            .and_then(|()| self.table.install(out_key(t, inside), out));
        if let Err(e) = installed {
            tracing::warn!("eNAT: mapping {inside:?} -> {port}: {e}");
            let _ = self.table.remove(&in_key(t, public_ip, port));
            self.errors += 1;
            if known.is_none() {
                self.pools[pool_of(t)].give_back(port);
            }
            return None;
        }
        if known.is_none() {
            self.public_of.insert((t, inside), port);
            self.inside_of.insert((t, port), inside);
            self.made += 1;
        }
        self.installed_at.insert((t, inside), now);
        Some(Endpoint { ip: public_ip.into(), port })
    }

    /// Ends the mapping of `inside` to `port` (both halves; the port is
    /// free again).
    fn end(&mut self, t: Transport, inside: Endpoint, port: u16) -> Result<(), EvnfError> {
        self.public_of.remove(&(t, inside));
        if self.inside_of.remove(&(t, port)).is_some() {
            self.pools[pool_of(t)].give_back(port);
        }
        self.installed_at.remove(&(t, inside));
        self.table.remove(&out_key(t, inside))?;
        self.table.remove(&in_key(t, self.spec.public_ip, port))?;
        self.expired += 1;
        Ok(())
    }
}

/// An outbound half's protocol, inside endpoint and public port.
fn outbound(k: &NatKey, v: &NatEntry) -> Option<(Transport, Endpoint, u16)> {
    let t = [Transport::Udp, Transport::Tcp].into_iter().find(|t| t.ip_proto() == k.proto)?;
    let inside = Endpoint { ip: Ipv4Addr::from(k.addr.to_ne_bytes()).into(), port: u16::from_be(k.port) };
    (k.dir == NAT_OUT).then_some((t, inside, u16::from_be(v.port)))
}

impl HybridNf for Nat {
    fn name(&self) -> &'static str {
        "nat"
    }

    /// Only the idle timeout may change: the public address and ports are
    /// in the mappings the fast path holds.
    fn reconfigure(&mut self, spec: &EvnfSpec) -> Result<(), EvnfError> {
        let new = spec.nat.clone().ok_or_else(|| spec.missing("nat"))?;
        if new.public_ip != self.spec.public_ip || new.ports != self.spec.ports {
            return Err(EvnfError::Config(format!(
                "{}: nat.public_ip and nat.ports change only when the chain is deployed again",
                spec.origin
            )));
        }
        self.table.set_idle(Duration::from_secs_f64(new.idle_timeout_s));
        self.spec = new;
        Ok(())
    }

    fn install(&mut self, _fast: &mut HybridMaps) -> Result<(), EvnfError> {
        Ok(())
    }

    /// The fast path's decision table (`ferry_el_enat`), for what reaches
    /// the process: every frame when the NAT runs whole as a process, its
    /// misses (IPv4 TCP/UDP without a mapping) when it is split. Frames
    /// that are not IPv4 TCP/UDP go on unchanged; fragments and malformed
    /// frames are dropped.
    fn on_slow_path(&mut self, _fast: &mut HybridMaps, frame: &mut [u8], _meta: SlowMeta) -> SlowVerdict {
        let translatable = match ferry_wire::flow::parse(frame) {
            Ok(f) => f.is_ipv4() && [ip_proto::TCP, ip_proto::UDP].contains(&f.proto),
            Err(_) => {
                self.refused += 1;
                return SlowVerdict::Drop;
            }
        };
        if !translatable {
            self.not_natted += 1;
            return SlowVerdict::Reinject;
        }
        let Ok(headers) = Headers::parse(frame) else {
            self.refused += 1;
            return SlowVerdict::Drop;
        };
        match self.mapping(headers.transport, headers.src, monotonic_ns()) {
            Some(public) => {
                headers.rewrite(frame, Side::Source, public);
                self.translated += 1;
                SlowVerdict::Reinject
            }
            None => SlowVerdict::Drop,
        }
    }

    /// Mappings whose outbound half has been idle for the timeout end.
    fn on_tick(&mut self, _fast: &mut HybridMaps, now_ns: u64) -> Result<(), EvnfError> {
        let idle = self.table.idle_ns();
        let stale: Vec<(Transport, Endpoint, u16)> = self
            .table
            .entries()
            .into_iter()
            .filter(|(_, v)| now_ns.saturating_sub(v.last_seen_ns) > idle)
            .filter_map(|(k, v)| outbound(&k, &v))
            .collect();
        for (t, inside, port) in stale {
            // Traffic may have refreshed it since the snapshot.
            let now_seen = self.table.get(&out_key(t, inside))?.map_or(0, |v| v.last_seen_ns);
            if now_ns.saturating_sub(now_seen) > idle {
                self.end(t, inside, port)?;
            }
        }
        Ok(())
    }

    /// Idle mappings are found by reading the table whole: not more often
    /// than their timeout needs.
    fn tick_interval(&self) -> Duration {
        crate::hybrid::scan_interval(Duration::from_nanos(self.table.idle_ns()))
    }

    /// `mappings`, `mappings_made`, `mappings_expired`, `ports_exhausted`,
    /// `mapping_errors`, `process_translated`, `process_not_natted`,
    /// `process_refused`.
    fn control_counters(&self) -> Vec<u64> {
        vec![
            self.public_of.len() as u64,
            self.made,
            self.expired,
            self.exhausted,
            self.errors,
            self.translated,
            self.not_natted,
            self.refused,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::PortPool;

    #[test]
    fn a_pool_skips_ports_in_use_and_runs_out_without_searching() {
        let mut pool = PortPool::new(100, 104, |p| p == 101);
        let taken: Vec<u16> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(taken, [100, 102, 103, 104], "101 was adopted in use");
        assert_eq!(pool.take(), None, "out of ports");
        pool.give_back(102);
        pool.give_back(100);
        assert_eq!((pool.take(), pool.take(), pool.take()), (Some(102), Some(100), None), "freed first, taken first");
    }

    #[test]
    fn a_port_given_back_waits_behind_every_free_one() {
        let mut pool = PortPool::new(1, 3, |_| false);
        let first = pool.take().unwrap();
        pool.give_back(first);
        assert_eq!([pool.take(), pool.take(), pool.take()], [Some(2), Some(3), Some(first)]);
    }
}
