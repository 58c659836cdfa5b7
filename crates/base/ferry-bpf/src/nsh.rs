//! The NSH service function forwarder in XDP (`bpf/nsh_sff.bpf.c`): the
//! roles of a host's devices, the classifier's rules and paths, the
//! forwarding table keyed by (SPI, SI), and the devices frames leave by.
//! Every table changes at run time by map updates, as the stage
//! pipeline's do.

use std::net::Ipv4Addr;

use aya::maps::{Array, DevMap, HashMap};

use crate::attach::{per_cpu_sums, LoadedXdp};
use crate::classify::{write_rules, CLS_MAX_RULES};
use crate::{AttachMode, BpfError, Object};
use ferry_wire::classify::Rule;

const PORTS: &str = "ferry_nsh_ports";
const PATHS: &str = "ferry_nsh_paths";
const HOPS: &str = "ferry_nsh_hops";
const DEVS: &str = "ferry_nsh_devs";
const COUNTERS: &str = "ferry_nsh_counters";

/// Paths the classifier's rules pick from (`FERRY_NSH_PATHS`).
pub const NSH_PATHS: usize = 64;
/// The largest SPI (24 bits).
pub const MAX_SPI: u32 = 0x00ff_ffff;
/// The counters, in `FERRY_NSH_*` order.
pub const NSH_COUNTER_NAMES: [&str; 14] = [
    "classified",
    "unclassified",
    "returned",
    "forwarded",
    "proxied",
    "ended",
    "no_hop",
    "ttl_expired",
    "si_expired",
    "malformed",
    "not_ethernet",
    "not_nsh",
    "refused",
    "no_dev",
];

/// `struct ferry_nsh_port`.
type NshPortRaw = crate::abi::gen::ferry_nsh_port;
const _: () = assert!(std::mem::size_of::<NshPortRaw>() == 24);
// SAFETY: plain-old-data; every bit pattern is valid.
unsafe impl aya::Pod for NshPortRaw {}

/// `struct ferry_nsh_hop`.
type NshHopRaw = crate::abi::gen::ferry_nsh_hop;
const _: () = assert!(std::mem::size_of::<NshHopRaw>() == 36);
// SAFETY: plain-old-data; every bit pattern is valid.
unsafe impl aya::Pod for NshHopRaw {}

/// A service path hop: (SPI, SI), valid on construction: SI 0 is a path
/// whose index is used up, never a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathHop {
    spi: u32,
    si: u8,
}

impl PathHop {
    pub fn new(spi: u32, si: u8) -> Result<PathHop, BpfError> {
        if spi > MAX_SPI {
            return Err(BpfError::Config(format!("SPI {spi} is more than 24 bits")));
        }
        if si == 0 {
            return Err(BpfError::Config(format!("SPI {spi} SI 0: an index used up is no hop")));
        }
        Ok(PathHop { spi, si })
    }

    pub fn spi(&self) -> u32 {
        self.spi
    }

    pub fn si(&self) -> u8 {
        self.si
    }

    fn key(&self) -> u32 {
        self.spi << 8 | u32::from(self.si)
    }
}

/// What a device of the host does with what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NshRole {
    /// The classifier: a frame a rule matches gets NSH pushed.
    Classify,
    /// Frames with NSH from other hosts: after Ethernet, and in VXLAN-GPE
    /// when `gpe` says at which address and VNI (from the SFFs added with
    /// [`NshSff::add_peer`] only).
    Fabric { gpe: Option<GpeEnd> },
    /// An NSH-unaware NF's way back: its frames get `hop`'s header (TTL
    /// `ttl`) restored.
    Return { hop: PathHop, ttl: u8 },
}

/// How a frame travels to the next SFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NshEncap {
    /// NSH right after Ethernet (EtherType 0x894F): the next SFF is on
    /// the same link.
    Ethernet,
    /// In VXLAN-GPE over IPv4/UDP 4790, from `src` to `dst` (the next
    /// SFF's address; the MACs are the next IP hop's), with VNI `vni`.
    VxlanGpe { src: Ipv4Addr, dst: Ipv4Addr, vni: u32 },
}

/// This host's end of VXLAN-GPE on a fabric device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpeEnd {
    pub addr: Ipv4Addr,
    pub vni: u32,
}

/// Where the frame at a (SPI, SI) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NshAction {
    /// On to the next SFF, out of DEVMAP slot `dev`, to `dst_mac` from
    /// `src_mac` (TTL decremented), encapsulated as `encap` says.
    Forward { dev: u32, dst_mac: [u8; 6], src_mac: [u8; 6], encap: NshEncap },
    /// To a local NSH-unaware NF on slot `dev`, the header stripped.
    Proxy { dev: u32 },
    /// The path's end: the header popped, the inner frame out of `dev`.
    End { dev: u32 },
}

/// The loaded forwarder. Dropping it detaches it from every device. Its
/// roles and device slots are keyed by ifindex: one forwarder serves the
/// devices of one network namespace.
pub struct NshSff {
    xdp: LoadedXdp,
}

impl NshSff {
    pub fn load() -> Result<NshSff, BpfError> {
        Ok(NshSff { xdp: LoadedXdp::load(Object::NshSff, "ferry_nsh_sff")? })
    }

    /// Attaches to device `ifindex` (in the calling thread's namespace);
    /// give it a role with [`NshSff::set_role`].
    pub fn attach(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        self.xdp.attach_to(ifindex, mode)
    }

    /// As [`NshSff::attach`], for a device the program must leave again
    /// while the forwarder stays ([`NshSff::detach`]).
    pub fn attach_one(&mut self, ifindex: u32, mode: AttachMode) -> Result<crate::Attachment, BpfError> {
        self.xdp.attach_one(ifindex, mode)
    }

    pub fn detach(&mut self, attachment: crate::Attachment) -> Result<(), BpfError> {
        self.xdp.detach_from(attachment)
    }

    /// Device `ifindex` has no role any more (its frames go to the kernel).
    pub fn clear_role(&mut self, ifindex: u32) -> Result<(), BpfError> {
        let map = self.xdp.ebpf_mut().map_mut(PORTS).ok_or(BpfError::NoMap { name: PORTS })?;
        let mut ports: HashMap<_, u32, NshPortRaw> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: PORTS, source })?;
        ports.remove(&ifindex).map_err(|source| BpfError::Map { name: PORTS, source })
    }

    pub fn set_role(&mut self, ifindex: u32, role: NshRole) -> Result<(), BpfError> {
        let raw = match role {
            NshRole::Classify => NshPortRaw { role: 1, ..NshPortRaw::default() },
            NshRole::Fabric { gpe: None } => NshPortRaw { role: 2, ..NshPortRaw::default() },
            NshRole::Fabric { gpe: Some(GpeEnd { addr, vni }) } => {
                if vni > 0x00ff_ffff || addr.is_unspecified() {
                    return Err(BpfError::Config(format!("VXLAN-GPE at {addr} VNI {vni}: an address and 24 bits")));
                }
                NshPortRaw { role: 2, addr: u32::from(addr).to_be(), vni, ..NshPortRaw::default() }
            }
            NshRole::Return { hop, ttl } => {
                if !(1..=63).contains(&ttl) {
                    return Err(BpfError::Config(format!("TTL {ttl}: NSH's is 1 to 63")));
                }
                NshPortRaw { role: 3, spi_si: hop.key(), ttl: u32::from(ttl), ..NshPortRaw::default() }
            }
        };
        let map = self.xdp.ebpf_mut().map_mut(PORTS).ok_or(BpfError::NoMap { name: PORTS })?;
        let mut ports: HashMap<_, u32, NshPortRaw> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: PORTS, source })?;
        ports.insert(ifindex, raw, 0).map_err(|source| BpfError::Map { name: PORTS, source })
    }

    /// Fabric devices take VXLAN-GPE from the SFF at `addr`.
    pub fn add_peer(&mut self, addr: Ipv4Addr) -> Result<(), BpfError> {
        const PEERS: &str = "ferry_nsh_peers";
        let map = self.xdp.ebpf_mut().map_mut(PEERS).ok_or(BpfError::NoMap { name: PEERS })?;
        let mut peers: HashMap<_, u32, u8> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: PEERS, source })?;
        peers.insert(u32::from(addr).to_be(), 1, 0).map_err(|source| BpfError::Map { name: PEERS, source })
    }

    /// The classifier's rules; rule `out = i` picks path `spis[i]`.
    pub fn set_classifier(&mut self, rules: &[Rule], spis: &[u32]) -> Result<(), BpfError> {
        if spis.len() > NSH_PATHS || spis.iter().any(|&s| s > MAX_SPI) {
            return Err(BpfError::Config(format!("paths {spis:?}: at most {NSH_PATHS} SPIs of 24 bits")));
        }
        if let Some(r) = rules.iter().find(|r| usize::from(r.out) >= spis.len()) {
            return Err(BpfError::Config(format!("a rule picks path {}, but there are {}", r.out, spis.len())));
        }
        let set_count = |ebpf: &mut aya::Ebpf, count: u32| -> Result<(), BpfError> {
            let map = ebpf.map_mut(PATHS).ok_or(BpfError::NoMap { name: PATHS })?;
            let mut paths: Array<_, u32> =
                Array::try_from(map).map_err(|source| BpfError::Map { name: PATHS, source })?;
            paths.set(0, count, 0).map_err(|source| BpfError::Map { name: PATHS, source })
        };
        let ebpf = self.xdp.ebpf_mut();
        // A table replaced at run time: no rule is walked while rules and
        // paths are rewritten (frames meanwhile go unclassified, to the
        // kernel), and no path of the old table survives.
        set_count(ebpf, 0)?;
        write_rules(ebpf, rules)?;
        let map = ebpf.map_mut(PATHS).ok_or(BpfError::NoMap { name: PATHS })?;
        let mut paths: Array<_, u32> = Array::try_from(map).map_err(|source| BpfError::Map { name: PATHS, source })?;
        for i in 0..NSH_PATHS {
            let spi = spis.get(i).copied().unwrap_or(0);
            paths.set(i as u32 + 1, spi, 0).map_err(|source| BpfError::Map { name: PATHS, source })?;
        }
        set_count(ebpf, rules.len().min(CLS_MAX_RULES) as u32)
    }

    pub fn set_hop(&mut self, at: PathHop, action: NshAction) -> Result<(), BpfError> {
        let raw = match action {
            NshAction::Forward { dev, dst_mac, src_mac, encap: NshEncap::Ethernet } => {
                NshHopRaw { action: 1, dev, dst_mac, src_mac, ..NshHopRaw::default() }
            }
            NshAction::Forward { dev, dst_mac, src_mac, encap: NshEncap::VxlanGpe { src, dst, vni } } => {
                if vni > 0x00ff_ffff {
                    return Err(BpfError::Config(format!("VNI {vni} is more than 24 bits")));
                }
                let (src_ip, dst_ip) = (u32::from(src).to_be(), u32::from(dst).to_be());
                NshHopRaw { action: 1, dev, dst_mac, src_mac, encap: 1, src_ip, dst_ip, vni }
            }
            NshAction::Proxy { dev } => NshHopRaw { action: 2, dev, ..NshHopRaw::default() },
            NshAction::End { dev } => NshHopRaw { action: 3, dev, ..NshHopRaw::default() },
        };
        let map = self.xdp.ebpf_mut().map_mut(HOPS).ok_or(BpfError::NoMap { name: HOPS })?;
        let mut hops: HashMap<_, u32, NshHopRaw> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: HOPS, source })?;
        hops.insert(at.key(), raw, 0).map_err(|source| BpfError::Map { name: HOPS, source })
    }

    /// Takes (SPI, SI)'s entry out: its frames are dropped and counted.
    pub fn remove_hop(&mut self, at: PathHop) -> Result<(), BpfError> {
        let map = self.xdp.ebpf_mut().map_mut(HOPS).ok_or(BpfError::NoMap { name: HOPS })?;
        let mut hops: HashMap<_, u32, NshHopRaw> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: HOPS, source })?;
        hops.remove(&at.key()).map_err(|source| BpfError::Map { name: HOPS, source })
    }

    /// DEVMAP slot `slot` sends out of device `ifindex` (resolved in the
    /// calling thread's namespace).
    pub fn set_dev(&mut self, slot: u32, ifindex: u32) -> Result<(), BpfError> {
        let map = self.xdp.ebpf_mut().map_mut(DEVS).ok_or(BpfError::NoMap { name: DEVS })?;
        let mut devs = DevMap::try_from(map).map_err(|source| BpfError::Map { name: DEVS, source })?;
        devs.set(slot, ifindex, None, 0).map_err(|source| BpfError::XdpMap { name: DEVS, source })
    }

    /// The counters, in [`NSH_COUNTER_NAMES`] order.
    pub fn counters(&self) -> Result<Vec<u64>, BpfError> {
        per_cpu_sums(self.xdp.ebpf(), COUNTERS, 0..NSH_COUNTER_NAMES.len() as u32)
    }

    pub fn verdicts(&self) -> Result<crate::Verdicts, BpfError> {
        self.xdp.verdicts()
    }

    /// The program, for BPF_PROG_TEST_RUN.
    pub fn program_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>, BpfError> {
        self.xdp.program_fd()
    }
}
