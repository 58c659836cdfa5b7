//! The maps of the hybrid NFs' fast paths that their control planes work
//! on: rule tables, connection tables, counters. [`HybridMaps`] is built
//! either from the loaded object (ferryd, tests) or from map fds
//! an unprivileged control plane received from ferryd by SCM_RIGHTS; with
//! an fd in hand, a process needs no capability to read and write a map
//! (Linux 6.5 and later check privileges when maps are created, not when
//! they are used). The programs, the chaining table and the socket map
//! stay with whoever loaded the object ([`crate::hybrid::HybridPipeline`]).

use std::net::IpAddr;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use aya::maps::lpm_trie::{Key as LpmKey, LpmTrie};
use aya::maps::{Array, HashMap, Map, MapData, MapType, PerCpuArray};
use aya::Ebpf;

use ferry_wire::IpPrefix;

use crate::abi::In6;
use crate::batch;
use crate::hybrid::*;
use crate::pipeline::PlCount;
use crate::BpfError;

/// Every map a control plane may hold, with its kernel type.
const CONTROL_MAPS: [(&str, MapType); 11] = [
    ("ferry_fw_subnets", MapType::LpmTrie),
    ("ferry_fw_ports", MapType::Hash),
    ("ferry_fw_hits", MapType::PerCpuArray),
    ("ferry_lb_vips", MapType::Hash),
    ("ferry_lb_ring", MapType::Array),
    ("ferry_lb_backends", MapType::Array),
    ("ferry_lb_conns", MapType::LruHash),
    ("ferry_lb_replies", MapType::LruHash),
    ("ferry_lb_backend_stats", MapType::PerCpuArray),
    ("ferry_dpi_bypass", MapType::LruHash),
    ("ferry_nat_map", MapType::Hash),
];

/// The per-NF counters, which every control plane holds.
const STATS: (&str, MapType) = ("ferry_hyb_stats", MapType::PerCpuArray);

/// Maps only the data path writes: a control plane gets them read-only,
/// so it cannot forge counters (the per-NF counters are every hybrid NF's
/// of the chain).
const READ_ONLY: [&str; 3] = ["ferry_hyb_stats", "ferry_fw_hits", "ferry_lb_backend_stats"];

/// `BPF_MAP_GET_FD_BY_ID` and `BPF_F_RDONLY` (linux/bpf.h).
const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
const BPF_F_RDONLY: u32 = 1 << 3;

/// The part of `union bpf_attr` that BPF_MAP_GET_FD_BY_ID reads.
#[repr(C)]
struct GetFdById {
    map_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// A new fd of `data` that only reads: writes through it fail (EPERM).
/// Opening a map by id needs CAP_SYS_ADMIN, which ferryd has.
fn read_only_fd(name: &'static str, data: &MapData) -> Result<OwnedFd, BpfError> {
    let map_id = data.info().map_err(|source| BpfError::Map { name, source })?.id();
    let attr = GetFdById { map_id, next_id: 0, open_flags: BPF_F_RDONLY };
    // SAFETY: bpf(2) reads `size_of::<GetFdById>()` bytes of an attribute we
    // own; the rest of bpf_attr is taken as zero.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_MAP_GET_FD_BY_ID, &attr as *const GetFdById, std::mem::size_of::<GetFdById>())
    };
    if fd < 0 {
        return Err(BpfError::Syscall {
            what: "BPF_MAP_GET_FD_BY_ID (read-only)",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: the kernel just returned this fd; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl HybridElement {
    /// The maps its control plane works on.
    pub fn control_maps(self) -> &'static [&'static str] {
        match self {
            HybridElement::Firewall => &["ferry_fw_subnets", "ferry_fw_ports", "ferry_fw_hits", "ferry_hyb_stats"],
            HybridElement::Balancer | HybridElement::BalancerReply => &[
                "ferry_lb_vips",
                "ferry_lb_ring",
                "ferry_lb_backends",
                "ferry_lb_conns",
                "ferry_lb_replies",
                "ferry_lb_backend_stats",
                "ferry_hyb_stats",
            ],
            HybridElement::Dpi => &["ferry_dpi_bypass", "ferry_hyb_stats"],
            HybridElement::Nat | HybridElement::NatReply => &["ferry_nat_map", "ferry_hyb_stats"],
        }
    }
}

fn known(name: &str) -> Option<(&'static str, MapType)> {
    CONTROL_MAPS.iter().chain([&STATS]).find(|(n, _)| *n == name).copied()
}

/// `data` as the [`Map`] variant of its kernel type.
fn wrap(name: &'static str, data: MapData, want: MapType) -> Result<Map, BpfError> {
    let got = data.info().and_then(|i| i.map_type()).map_err(|source| BpfError::Map { name, source })?;
    if got as u32 != want as u32 {
        return Err(BpfError::Config(format!("map {name}: the fd is a map of type {got:?}, not {want:?}")));
    }
    Ok(match want {
        MapType::Hash => Map::HashMap(data),
        MapType::LruHash => Map::LruHashMap(data),
        MapType::Array => Map::Array(data),
        MapType::PerCpuArray => Map::PerCpuArray(data),
        MapType::LpmTrie => Map::LpmTrie(data),
        _ => return Err(BpfError::NoMap { name }),
    })
}

/// The control maps of one loaded eVNF object, or the subset a control
/// plane was given.
pub struct HybridMaps {
    maps: Vec<(&'static str, Map)>,
    /// The counters' array, read in batches (None: row by row).
    stats: Option<batch::PerCpuRows<PlCount>>,
}

impl HybridMaps {
    /// Takes every control map out of the loaded object.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<HybridMaps, BpfError> {
        let mut maps = Vec::new();
        for (name, _) in CONTROL_MAPS.iter().chain([&STATS]) {
            maps.push((*name, ebpf.take_map(name).ok_or(BpfError::NoMap { name })?));
        }
        Ok(HybridMaps::of(maps))
    }

    /// From fds received by name (ferryd's welcome). Each name must be a
    /// control map's, and each fd a map of that map's type.
    pub fn from_fds(fds: Vec<(String, OwnedFd)>) -> Result<HybridMaps, BpfError> {
        let mut maps = Vec::new();
        for (name, fd) in fds {
            let (name, want) =
                known(&name).ok_or_else(|| BpfError::Config(format!("{name:?} is not a hybrid NF's map")))?;
            let data = MapData::from_fd(fd).map_err(|source| BpfError::Map { name, source })?;
            maps.push((name, wrap(name, data, want)?));
        }
        Ok(HybridMaps::of(maps))
    }

    /// The maps, with a batch reader of the counters where the kernel
    /// has one.
    fn of(maps: Vec<(&'static str, Map)>) -> HybridMaps {
        let stats = maps.iter().find_map(|(n, m)| match m {
            Map::PerCpuArray(data) if *n == "ferry_hyb_stats" => batch::PerCpuRows::new(data.fd().as_fd()).ok(),
            _ => None,
        });
        HybridMaps { maps, stats }
    }

    /// New fds of maps `names`, to hand to a control plane: read-only for
    /// the maps only the data path writes.
    pub fn fds(&self, names: &[&'static str]) -> Result<Vec<(&'static str, OwnedFd)>, BpfError> {
        names
            .iter()
            .map(|&name| {
                let map = self.map(name).ok_or(BpfError::NoMap { name })?;
                let data: &MapData = match map {
                    Map::HashMap(d) | Map::LruHashMap(d) | Map::Array(d) | Map::PerCpuArray(d) | Map::LpmTrie(d) => d,
                    _ => return Err(BpfError::NoMap { name }),
                };
                if READ_ONLY.contains(&name) {
                    return Ok((name, read_only_fd(name, data)?));
                }
                let fd = data
                    .fd()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|source| BpfError::Syscall { what: "dup map fd", source })?;
                Ok((name, fd))
            })
            .collect()
    }

    fn map(&self, name: &str) -> Option<&Map> {
        self.maps.iter().find(|(n, _)| *n == name).map(|(_, m)| m)
    }

    fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        self.maps.iter_mut().find(|(n, _)| *n == name).map(|(_, m)| m)
    }

    fn dup(&self, name: &'static str) -> Result<Map, BpfError> {
        crate::attach::dup_map(self.map(name).ok_or(BpfError::NoMap { name })?, name)
    }

    /// An independent handle on one of the maps (for the state library).
    pub fn map_handle(&self, name: &'static str) -> Result<aya::maps::Map, BpfError> {
        self.dup(name)
    }

    fn per_cpu_sum(&self, name: &'static str, index: u32) -> Result<PlCount, BpfError> {
        let map = self.map(name).ok_or(BpfError::NoMap { name })?;
        let arr: PerCpuArray<&MapData, PlCount> =
            PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let per_cpu = arr.get(&index, 0).map_err(|source| BpfError::Map { name, source })?;
        Ok(per_cpu
            .iter()
            .fold(PlCount::default(), |a, c| PlCount { packets: a.packets + c.packets, bytes: a.bytes + c.bytes }))
    }

    /// `nf`'s counters by name, summed over CPUs: its rows in one batch
    /// read where the kernel can (a control plane publishes them after
    /// every burst), else row by row.
    pub fn counters(&self, nf: HybridElement) -> Result<Vec<(&'static str, PlCount)>, BpfError> {
        let (row, names) = (nf as u32 * COUNTERS, nf.counter_names());
        if let Some(stats) = &self.stats {
            let add = |a: PlCount, c: PlCount| PlCount { packets: a.packets + c.packets, bytes: a.bytes + c.bytes };
            if let Ok(sums) = stats.read(row, names.len() as u32, add) {
                if sums.len() == names.len() {
                    return Ok(names.iter().copied().zip(sums).collect());
                }
            }
        }
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Ok((*name, self.per_cpu_sum("ferry_hyb_stats", row + i as u32)?)))
            .collect()
    }

    /// One counter of `nf` by name (0 if the name is unknown).
    pub fn counter(&self, nf: HybridElement, name: &str) -> Result<u64, BpfError> {
        Ok(self.counters(nf)?.into_iter().find(|(n, _)| *n == name).map_or(0, |(_, c)| c.packets))
    }

    /// The chain end's counters: frames routed out, frames left to the kernel.
    pub fn route_counters(&self) -> Result<[PlCount; 2], BpfError> {
        let row = ROUTE_ROW * COUNTERS;
        Ok([self.per_cpu_sum("ferry_hyb_stats", row)?, self.per_cpu_sum("ferry_hyb_stats", row + 1)?])
    }

    // ---- eFW ----

    /// Source subnet `subnet` (IPv4 or IPv6) gets `rule`.
    pub fn fw_set_subnet(&mut self, subnet: IpPrefix, rule: FwRule) -> Result<(), BpfError> {
        const NAME: &str = "ferry_fw_subnets";
        check_rule(rule)?;
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut trie: LpmTrie<&mut MapData, In6, FwRule> =
            LpmTrie::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        trie.insert(&subnet_key(subnet), rule, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Destination port `port` (host order; 0 = every port) of `proto` gets `rule`.
    pub fn fw_set_port(&mut self, proto: u8, port: u16, rule: FwRule) -> Result<(), BpfError> {
        const NAME: &str = "ferry_fw_ports";
        check_rule(rule)?;
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut ports: HashMap<&mut MapData, FwPortKey, FwRule> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let key = FwPortKey { proto, _pad: 0, port: port.to_be() };
        ports.insert(key, rule, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Removes every fast firewall rule not in `subnets` / `ports` (after
    /// installing a new set, so that no rule is missing in between).
    pub fn fw_retain(&mut self, subnets: &[IpPrefix], ports: &[(u8, u16)]) -> Result<(), BpfError> {
        const SUBNETS: &str = "ferry_fw_subnets";
        const PORTS: &str = "ferry_fw_ports";
        let keep: Vec<(u32, In6)> = subnets.iter().map(|p| (u32::from(p.prefix_len()), p.addr().into())).collect();
        let map = self.map_mut(SUBNETS).ok_or(BpfError::NoMap { name: SUBNETS })?;
        let mut trie: LpmTrie<&mut MapData, In6, FwRule> =
            LpmTrie::try_from(map).map_err(|source| BpfError::Map { name: SUBNETS, source })?;
        let stale: Vec<LpmKey<In6>> =
            trie.keys().filter_map(Result::ok).filter(|k| !keep.contains(&(k.prefix_len(), k.data()))).collect();
        for k in stale {
            trie.remove(&k).map_err(|source| BpfError::Map { name: SUBNETS, source })?;
        }
        let keep: Vec<FwPortKey> =
            ports.iter().map(|(proto, port)| FwPortKey { proto: *proto, _pad: 0, port: port.to_be() }).collect();
        let map = self.map_mut(PORTS).ok_or(BpfError::NoMap { name: PORTS })?;
        let mut table: HashMap<&mut MapData, FwPortKey, FwRule> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: PORTS, source })?;
        let stale: Vec<FwPortKey> = table.keys().filter_map(Result::ok).filter(|k| !keep.contains(k)).collect();
        for k in stale {
            table.remove(&k).map_err(|source| BpfError::Map { name: PORTS, source })?;
        }
        Ok(())
    }

    /// Packets and bytes rule `rule_id` matched.
    pub fn fw_rule_hits(&self, rule_id: u32) -> Result<PlCount, BpfError> {
        self.per_cpu_sum("ferry_fw_hits", rule_id)
    }

    // ---- eLB ----

    /// Declares VIP `addr:port/proto` (IPv4 or IPv6) as `vip_id`.
    pub fn lb_set_vip(&mut self, addr: IpAddr, port: u16, proto: u8, vip_id: u32) -> Result<(), BpfError> {
        const NAME: &str = "ferry_lb_vips";
        if vip_id >= LB_MAX_VIPS {
            return Err(BpfError::Config(format!("VIP id {vip_id}: at most {LB_MAX_VIPS} VIPs")));
        }
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut vips: HashMap<&mut MapData, LbVipKey, LbVip> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let key = LbVipKey { addr: addr.into(), port: port.to_be(), proto, _pad: 0 };
        vips.insert(key, LbVip { vip_id, _pad: 0 }, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Removes VIP `addr:port/proto` (new flows to it are no longer balanced).
    pub fn lb_remove_vip(&mut self, addr: IpAddr, port: u16, proto: u8) -> Result<(), BpfError> {
        const NAME: &str = "ferry_lb_vips";
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut vips: HashMap<&mut MapData, LbVipKey, LbVip> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let key = LbVipKey { addr: addr.into(), port: port.to_be(), proto, _pad: 0 };
        match vips.remove(&key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(BpfError::Map { name: NAME, source }),
        }
    }

    /// Backend `index` is `addr:port`, of its VIP's family.
    pub fn lb_set_backend(&mut self, index: u32, addr: IpAddr, port: u16) -> Result<(), BpfError> {
        const NAME: &str = "ferry_lb_backends";
        if index >= LB_MAX_BACKENDS {
            return Err(BpfError::Config(format!("backend {index}: at most {LB_MAX_BACKENDS} backends")));
        }
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut arr: Array<&mut MapData, LbBackend> =
            Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let be = LbBackend { addr: addr.into(), port: port.to_be(), _pad: 0 };
        arr.set(index, be, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Writes VIP `vip_id`'s server-selection array (one backend index per
    /// slot). New flows hash to a slot; tracked flows keep their backend.
    pub fn lb_set_ring(&mut self, vip_id: u32, ring: &[u32]) -> Result<(), BpfError> {
        const NAME: &str = "ferry_lb_ring";
        if ring.len() != LB_RING || vip_id >= LB_MAX_VIPS {
            return Err(BpfError::Config(format!("ring of VIP {vip_id}: needs {LB_RING} slots, got {}", ring.len())));
        }
        let map = self.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut arr: Array<&mut MapData, u32> =
            Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        for (slot, backend) in ring.iter().enumerate() {
            arr.set(vip_id * LB_RING as u32 + slot as u32, *backend, 0)
                .map_err(|source| BpfError::Map { name: NAME, source })?;
        }
        Ok(())
    }

    /// Packets and bytes sent to backend `index`.
    pub fn lb_backend_load(&self, index: u32) -> Result<PlCount, BpfError> {
        self.per_cpu_sum("ferry_lb_backend_stats", index)
    }
}

fn check_rule(rule: FwRule) -> Result<(), BpfError> {
    if rule.action > FW_DENY || rule.rule_id >= FW_MAX_RULES {
        return Err(BpfError::Config(format!(
            "firewall rule {}: action {} (0 allow, 1 deny), ids below {FW_MAX_RULES}",
            rule.rule_id, rule.action
        )));
    }
    Ok(())
}

/// The LPM key of `subnet`: its address and length in the 128-bit space.
fn subnet_key(subnet: IpPrefix) -> LpmKey<In6> {
    LpmKey::new(u32::from(subnet.prefix_len()), subnet.addr().into())
}
