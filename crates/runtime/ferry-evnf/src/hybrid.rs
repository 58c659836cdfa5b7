//! The hybrid-NF framework (eVNF §III). An NF declares its fast-path
//! tables (BPF maps of `bpf/include/ferry_hybrid_maps.h`, reached through the state
//! library) and a slow-path handler, and runs in one of three modes:
//!
//! * **Proactive**: the NF installs its rules ahead of traffic; every frame
//!   is served in XDP (the eLB: VIP, server-selection array).
//! * **Reactive**: frames no rule covers go to the slow path (an AF_XDP
//!   socket, with metadata saying which NF sent them); the NF looks at a
//!   flow's first packets and installs a rule for the rest (the eDPI).
//! * **Offloading**: the fast path decides what it can and hands the rest
//!   to a legacy NF in the kernel (the eFW, with nftables behind it).
//!
//! Rules expire: tables hold a last-seen stamp the fast path writes on
//! every hit ([`Stamped`]), and [`FastTable::expire`] removes entries idle
//! longer than the NF's timeout. The slow path reads fast-path statistics
//! from the same tables and from the per-NF counters.

use std::hash::Hash;
use std::time::Duration;

use aya::maps::Map;
use aya::Pod;
use ferry_bpf::abi::SlowMeta;
use ferry_bpf::hybrid::{DpiBypass, HybridMaps, LbConn, LbReply};
use ferry_bpf::state::{StateTable, Update};
use ferry_wire::ethernet::{ethertype, EthernetFrame};

use crate::config::EvnfSpec;
use crate::EvnfError;

/// A fast-path table value with the last-seen stamp the data path writes.
pub trait Stamped: Pod {
    fn last_seen_ns(&self) -> u64;
}

impl Stamped for LbConn {
    fn last_seen_ns(&self) -> u64 {
        self.last_seen_ns
    }
}
impl Stamped for LbReply {
    fn last_seen_ns(&self) -> u64 {
        self.last_seen_ns
    }
}
impl Stamped for DpiBypass {
    fn last_seen_ns(&self) -> u64 {
        self.last_seen_ns
    }
}

/// A fast-path table with idle expiry, over the state library.
pub struct FastTable<K: Pod + Eq + Hash, V: Stamped> {
    table: StateTable<K, V>,
    idle_ns: u64,
}

impl<K: Pod + Eq + Hash + Send + 'static, V: Stamped + Send + 'static> FastTable<K, V> {
    pub fn new(map: Map, name: &str, keys: &[&str], vals: &[&str], idle: Duration) -> Result<Self, EvnfError> {
        Ok(FastTable { table: StateTable::init(map, name, keys, vals)?, idle_ns: idle.as_nanos() as u64 })
    }

    /// A new idle timeout (on reload).
    pub fn set_idle(&mut self, idle: Duration) {
        self.idle_ns = idle.as_nanos() as u64;
    }

    pub fn idle_ns(&self) -> u64 {
        self.idle_ns
    }

    /// Installs a rule; the data path sees it when this returns.
    pub fn install(&mut self, key: K, val: V) -> Result<(), EvnfError> {
        Ok(self.table.create(key, val, Update::Blocking)?)
    }

    pub fn remove(&mut self, key: &K) -> Result<(), EvnfError> {
        Ok(self.table.remove(key, Update::Blocking)?)
    }

    /// One entry as the data path holds it now.
    pub fn get(&self, key: &K) -> Result<Option<V>, EvnfError> {
        Ok(self.table.get_in_kernel(key)?)
    }

    /// What the data path holds now, with its statistics.
    pub fn entries(&self) -> Vec<(K, V)> {
        self.table.entries_in_kernel()
    }

    /// Removes the entries idle for longer than the timeout, and those
    /// `done` says are finished; returns what it removed.
    pub fn expire(&mut self, now_ns: u64, done: impl Fn(&V) -> bool) -> Result<Vec<(K, V)>, EvnfError> {
        let stale: Vec<(K, V)> = self
            .entries()
            .into_iter()
            .filter(|(_, v)| now_ns.saturating_sub(v.last_seen_ns()) > self.idle_ns || done(v))
            .collect();
        for (k, _) in &stale {
            self.table.remove(k, Update::Blocking)?;
        }
        Ok(stale)
    }
}

/// How often a control plane scans a table whose entries expire after
/// `idle`: a sixteenth of it, from 0.5 s to 10 s. An entry then lives at
/// most idle + idle/16 (RFC 4787 REQ-5 sets only a lower bound, 2 min),
/// and a table of 100 000 flows, read whole on each scan, costs a fraction
/// of a CPU instead of most of one.
pub fn scan_interval(idle: Duration) -> Duration {
    (idle / 16).clamp(Duration::from_millis(500), Duration::from_secs(10))
}

/// What the slow path does with a frame once its handler has seen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowVerdict {
    /// On, to the NF's out-link (a kernel hop, or the next NF).
    Reinject,
    Drop,
}

/// The IP packet inside an Ethernet frame (one VLAN tag allowed, as
/// `ferry_wire`'s Ethernet view reads it), or None for a frame that carries
/// none.
pub fn ip_packet(frame: &[u8]) -> Option<&[u8]> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let at = eth.header_len();
    match eth.ethertype() {
        ethertype::IPV4 | ethertype::IPV6 => frame.get(at..).filter(|p| !p.is_empty()),
        _ => None,
    }
}

/// A hybrid NF's control plane: its fast path is an element of the stage
/// pipeline; the NF host (`ferry-host`) calls these from the NF's one thread.
pub trait HybridNf {
    fn name(&self) -> &'static str;
    /// Takes a changed configuration (the NF's section of `spec`): what
    /// may change while it runs (rules, weights, timeouts) changes; what
    /// may not is refused. [`HybridNf::install`] then writes it.
    fn reconfigure(&mut self, spec: &EvnfSpec) -> Result<(), EvnfError>;
    /// Writes the NF's proactive rules and configuration into the fast
    /// path (at start and on reload).
    fn install(&mut self, fast: &mut HybridMaps) -> Result<(), EvnfError>;
    /// A frame the fast path sent up because no rule covered it; the NF
    /// may rewrite it before it goes on.
    fn on_slow_path(&mut self, _fast: &mut HybridMaps, _frame: &mut [u8], _meta: SlowMeta) -> SlowVerdict {
        SlowVerdict::Reinject
    }
    /// Periodic work: expire rules, read statistics, recompute.
    fn on_tick(&mut self, fast: &mut HybridMaps, now_ns: u64) -> Result<(), EvnfError>;
    /// How often `on_tick` should run.
    fn tick_interval(&self) -> Duration {
        Duration::from_millis(500)
    }
    /// The control plane's own counters, as its type declares them
    /// ([`crate::types::HybridType::control_counters`]), in that order.
    fn control_counters(&self) -> Vec<u64> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_scanned_a_sixteenth_of_their_timeout_apart_within_bounds() {
        assert_eq!(scan_interval(Duration::from_secs(300)), Duration::from_secs(10));
        assert_eq!(scan_interval(Duration::from_secs(60)), Duration::from_millis(3750));
        assert_eq!(scan_interval(Duration::from_secs(2)), Duration::from_millis(500));
    }

    #[test]
    fn ip_packet_skips_ethernet_and_vlan() {
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        assert_eq!(ip_packet(&f).unwrap()[0], 0x45);
        let mut v = vec![0u8; 38];
        v[12..14].copy_from_slice(&[0x81, 0x00]);
        v[16..18].copy_from_slice(&[0x08, 0x00]);
        v[18] = 0x45;
        assert_eq!(ip_packet(&v).unwrap()[0], 0x45);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(ip_packet(&arp).is_none());
        assert!(ip_packet(&f[..10]).is_none());
        assert!(ip_packet(&f[..14]).is_none());
    }
}
