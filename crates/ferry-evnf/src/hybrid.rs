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
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use aya::maps::Map;
use aya::Pod;
use ferry_bpf::abi::SlowMeta;
use ferry_bpf::evnf::{DpiBypass, Evnf, EvnfMaps, LbConn, LbReply};
use ferry_bpf::state::{StateTable, Update};
use ferry_xsk::{BindMode, Port, RingSizes, SocketConfig, Umem, UmemConfig, XdpDesc, XskSocket};

use crate::EvnfError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Proactive,
    Reactive,
    Offloading,
}

/// Now on the clock `bpf_ktime_get_ns()` reads (CLOCK_MONOTONIC).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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

/// What the slow path does with a frame once its handler has seen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowVerdict {
    /// Back to the kernel stack (through the TUN device), which routes it.
    Reinject,
    Drop,
}

/// Slow-path counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SlowCounters {
    pub received: u64,
    pub reinjected: u64,
    pub dropped: u64,
    /// Frames without the fast path's metadata or without an IP header.
    pub malformed: u64,
    pub reinject_errors: u64,
    /// Frames the kernel could not hand to the socket (its RX ring full,
    /// or no free frame on the fill ring): counted by the kernel.
    pub socket_dropped: u64,
}

/// One slow-path AF_XDP socket: a device queue, its own UMEM, registered
/// in the fast path's socket map.
pub struct SlowPath {
    port: Port,
    descs: Vec<XdpDesc>,
    pub counters: SlowCounters,
}

const SLOW_FRAMES: u32 = 4096;
const SLOW_RING: u32 = 2048;

impl SlowPath {
    /// Opens the socket on `ifindex`/`queue` (copy mode: works on every
    /// device) and registers it with the fast path.
    pub fn open(evnf: &mut Evnf, ifindex: u32, queue: u32) -> Result<SlowPath, EvnfError> {
        let umem = std::sync::Arc::new(Umem::create(
            "ferry-slow-path",
            UmemConfig { frame_count: SLOW_FRAMES, ..Default::default() },
        )?);
        let rings = RingSizes { rx: SLOW_RING, tx: 0, fill: SLOW_RING, comp: SLOW_RING };
        let cfg = SocketConfig { rings, bind: BindMode::Copy, need_wakeup: true, busy_poll: None };
        let sock = XskSocket::create(umem, ifindex, queue, &cfg, None)?;
        evnf.register_xsk(queue, &sock)?;
        let port = Port::new(sock, 0..SLOW_FRAMES, SLOW_RING)?;
        Ok(SlowPath { port, descs: Vec::with_capacity(64), counters: SlowCounters::default() })
    }

    pub fn fd(&self) -> i32 {
        self.port.socket().as_raw_fd()
    }

    /// Counters, with the kernel's drop count for the socket.
    pub fn counters(&self) -> SlowCounters {
        let stats = self.port.socket().statistics().unwrap_or_default();
        SlowCounters {
            socket_dropped: stats.rx_dropped + stats.rx_ring_full + stats.rx_fill_ring_empty_descs,
            ..self.counters
        }
    }

    /// Hands every received frame to `handler` (which may rewrite it),
    /// then reinjects or drops it. Returns how many frames it handled.
    pub fn service(
        &mut self,
        tun: &OwnedFd,
        handler: &mut dyn FnMut(&mut [u8], SlowMeta) -> SlowVerdict,
    ) -> Result<usize, EvnfError> {
        self.descs.clear();
        let n = self.port.recv(64, &mut self.descs);
        for i in 0..n {
            let desc = self.descs[i];
            self.counters.received += 1;
            let meta = self.port.metadata(&desc, std::mem::size_of::<SlowMeta>()).and_then(SlowMeta::from_bytes);
            match (meta, self.port.frame_mut(&desc)) {
                (Some(meta), Some(frame)) if meta.reason != 0 && ip_packet(frame).is_some() => {
                    match handler(frame, meta) {
                        SlowVerdict::Reinject => {
                            match ip_packet(frame).map(|ip| ferry_xsk::tun::write_packet(tun, ip)) {
                                Some(Ok(())) => self.counters.reinjected += 1,
                                _ => self.counters.reinject_errors += 1,
                            }
                        }
                        SlowVerdict::Drop => self.counters.dropped += 1,
                    }
                }
                _ => self.counters.malformed += 1,
            }
            self.port.release(desc.addr);
        }
        Ok(n)
    }
}

/// The IP packet inside an Ethernet frame (one VLAN tag allowed), or None
/// for a frame that carries none.
pub fn ip_packet(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = |at: usize| frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut at = 12;
    if matches!(ethertype(at)?, 0x8100 | 0x88a8) {
        at += 4;
    }
    match ethertype(at)? {
        0x0800 | 0x86dd => frame.get(at + 2..).filter(|p| !p.is_empty()),
        _ => None,
    }
}

/// A hybrid NF: its fast path is one of the eVNF programs; the runner
/// ([`crate::runner`]) calls these from one thread.
pub trait HybridNf {
    fn name(&self) -> &'static str;
    fn mode(&self) -> Mode;
    /// Writes the NF's proactive rules and configuration into the fast
    /// path (at start and on reload).
    fn install(&mut self, fast: &mut EvnfMaps) -> Result<(), EvnfError>;
    /// A frame the fast path sent up because no rule covered it; the NF
    /// may rewrite it before it goes on.
    fn on_slow_path(&mut self, _fast: &mut EvnfMaps, _frame: &mut [u8], _meta: SlowMeta) -> SlowVerdict {
        SlowVerdict::Reinject
    }
    /// Periodic work: expire rules, read statistics, recompute.
    fn on_tick(&mut self, fast: &mut EvnfMaps, now_ns: u64) -> Result<(), EvnfError>;
    /// How often `on_tick` should run.
    fn tick_interval(&self) -> Duration {
        Duration::from_millis(500)
    }
    /// The NF's statistics, fast and slow path.
    fn report(&self, fast: &EvnfMaps) -> serde_json::Value;
    /// The control plane's own counters, as its type declares them
    /// ([`crate::types::HybridType::control_counters`]), in that order.
    fn control_counters(&self) -> Vec<u64> {
        Vec::new()
    }
    /// Undoes what `install` did outside the fast path (e.g. nftables).
    fn shutdown(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

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
