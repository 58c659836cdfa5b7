//! The run-time programmable stage pipeline (`bpf/pipeline.bpf.c`): typed
//! mirrors of its map layouts and the map updates that deploy and remove
//! chains. The program itself never changes after loading.
//!
//! Deploying a chain writes its element configs, then its element-control
//! entries, and last its stage-control entry (the ingress ifindex): until
//! that last write no packet can reach the new entries. Removing goes the
//! other way round. Other chains' entries are never touched, so their
//! traffic loses nothing meanwhile.

use std::os::fd::AsRawFd;

use aya::maps::{Array, DevMapHash, HashMap, MapData, PerCpuArray, ProgramArray, XskMap};
use aya::programs::Xdp;

use crate::scan::{PlScan, SCAN_CONFIGS};
use crate::{AttachMode, BpfError, LoadedXdp, Object};

/// Generic stages in the program (`FERRY_PL_STAGES`).
pub const STAGES: u32 = 4;
/// `next_stage` value that ends the chain (`FERRY_PL_END`).
pub const END: u8 = 0xff;
/// Most rules one ACL config holds.
pub const ACL_MAX_RULES: usize = 32;
/// Counter configs (`ferry_pl_counters` entries).
pub const MAX_COUNTERS: u32 = 1024;

/// `enum ferry_pl_element`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ElementKind {
    Acl = 1,
    Counter = 2,
    FlowMonitor = 3,
    Rewrite = 4,
    Policer = 5,
    Forward = 6,
    /// The hybrid NFs' fast paths (`crate::hybrid`); their config is unused.
    Efw = 7,
    Elb = 8,
    ElbReply = 9,
    Edpi = 10,
    Enat = 11,
    EnatReply = 12,
    /// A hybrid path's end: out by the kernel's FIB, else to the stack.
    Route = 13,
    /// Payload scan (`crate::scan`).
    Scan = 14,
    /// Source and destination MAC swapped; its config is unused.
    EtherSwap = 15,
}

/// `struct ferry_pl_entry`.
pub type PlEntry = crate::abi::gen::ferry_pl_entry;

/// `struct ferry_pl_key`.
pub type PlKey = crate::abi::gen::ferry_pl_key;

/// `struct ferry_pl_ctl`.
pub type PlCtl = crate::abi::gen::ferry_pl_ctl;

/// `struct ferry_pl_acl_key`.
pub type AclKey = crate::abi::gen::ferry_pl_acl_key;

/// `struct ferry_pl_acl_rule`: addresses in network order, ports in host
/// order (inclusive ranges), `proto` 0 for any.
pub type AclRule = crate::abi::gen::ferry_pl_acl_rule;

pub const ACL_ALLOW: u8 = 0;
pub const ACL_DENY: u8 = 1;

impl AclRule {
    /// A rule matching everything, with `action`.
    pub fn any(action: u8) -> AclRule {
        AclRule { action, sport_hi: u16::MAX, dport_hi: u16::MAX, ..Default::default() }
    }
}

/// `struct ferry_pl_acl_meta`.
pub type AclMeta = crate::abi::gen::ferry_pl_acl_meta;

impl AclMeta {
    /// The meta of an ACL of `rules` rules (at most ACL_MAX_RULES).
    pub fn new(rules: usize, default_action: u8, non_ip_action: u8) -> AclMeta {
        AclMeta {
            rules: rules as u32,
            default_action: default_action.into(),
            non_ip_action: non_ip_action.into(),
            _pad: 0,
        }
    }
}

/// `struct ferry_pl_count`.
pub type PlCount = crate::abi::gen::ferry_pl_count;

/// `struct ferry_pl_flow_key`.
pub type FlowKey = crate::abi::gen::ferry_pl_flow_key;

pub const RW_SRC_IP: u32 = 1;
pub const RW_DST_IP: u32 = 1 << 1;
pub const RW_SPORT: u32 = 1 << 2;
pub const RW_DPORT: u32 = 1 << 3;
pub const RW_SRC_MAC: u32 = 1 << 4;
pub const RW_DST_MAC: u32 = 1 << 5;

/// `struct ferry_pl_rewrite`: addresses and ports in network order.
pub type Rewrite = crate::abi::gen::ferry_pl_rewrite;

/// `struct ferry_pl_policer` (the leading bpf_spin_lock is 4 bytes).
pub type Policer = crate::abi::gen::ferry_pl_policer;

pub const FWD_DROP: u32 = 0;
pub const FWD_TX: u32 = 1;
pub const FWD_REDIRECT: u32 = 2;
pub const FWD_XSK: u32 = 3;
pub const FWD_PASS: u32 = 4;

/// `struct ferry_pl_forward`.
pub type Forward = crate::abi::gen::ferry_pl_forward;

pub use crate::abi::{SlowMeta, SLOW_FORWARDED, SLOW_MISS, SLOW_NO_RULE};

const _: () = assert!(std::mem::size_of::<PlEntry>() == 16);
const _: () = assert!(std::mem::size_of::<PlKey>() == 8);
const _: () = assert!(std::mem::size_of::<PlCtl>() == 16);
const _: () = assert!(std::mem::size_of::<AclKey>() == 8);
const _: () = assert!(std::mem::size_of::<AclRule>() == 44);
const _: () = assert!(std::mem::size_of::<AclMeta>() == 16);
const _: () = assert!(std::mem::size_of::<PlCount>() == 16);
const _: () = assert!(std::mem::size_of::<FlowKey>() == 44);
const _: () = assert!(std::mem::size_of::<Rewrite>() == 52);
const _: () = assert!(std::mem::size_of::<Policer>() == 40);
const _: () = assert!(std::mem::size_of::<Forward>() == 8);

// SAFETY: plain-old-data; every bit pattern is valid (padding is explicit).
unsafe impl aya::Pod for PlEntry {}
unsafe impl aya::Pod for PlKey {}
unsafe impl aya::Pod for PlCtl {}
unsafe impl aya::Pod for AclKey {}
unsafe impl aya::Pod for AclRule {}
unsafe impl aya::Pod for AclMeta {}
unsafe impl aya::Pod for PlCount {}
unsafe impl aya::Pod for FlowKey {}
unsafe impl aya::Pod for Rewrite {}
unsafe impl aya::Pod for Policer {}
unsafe impl aya::Pod for Forward {}

/// One element of a chain, as deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element {
    pub kind: ElementKind,
    /// Its config id in the kind's table.
    pub config: u32,
    /// The NF this element belongs to.
    pub nf: u32,
}

const PROGRAM: &str = "ferry_pipeline";

/// The hybrid NFs' large tables, shrunk in a pipeline that runs none
/// (the NAT's alone preallocates some 20 MiB at full size).
const HYBRID_TABLES_UNUSED: &[(&str, u32)] =
    &[("ferry_nat_map", 64), ("ferry_lb_conns", 64), ("ferry_lb_replies", 64), ("ferry_dpi_bypass", 64)];

fn stage_map(stage: u32) -> &'static str {
    ["ferry_pl_stage0", "ferry_pl_stage1", "ferry_pl_stage2", "ferry_pl_stage3"][stage as usize % 4]
}

/// The loaded pipeline program and its maps.
pub struct Pipeline {
    xdp: LoadedXdp,
}

impl Pipeline {
    /// Loads the program and installs it as its own recirculation target.
    /// The hybrid NFs' tables are left tiny: a pipeline that runs hybrid
    /// NFs is loaded by `crate::hybrid::HybridPipeline::load`.
    pub fn load() -> Result<Pipeline, BpfError> {
        Self::load_sized(HYBRID_TABLES_UNUSED)
    }

    pub(crate) fn load_sized(sizes: &[(&str, u32)]) -> Result<Pipeline, BpfError> {
        let mut xdp = LoadedXdp::load_sized(Object::Pipeline, PROGRAM, sizes)?;
        let ebpf = xdp.ebpf_mut();
        let fd = {
            let prog: &Xdp = ebpf
                .program(PROGRAM)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| BpfError::NoProgram { object: Object::Pipeline, name: PROGRAM.into() })?;
            prog.fd()
                .map_err(|source| BpfError::Program { name: PROGRAM.into(), source })?
                .try_clone()
                .map_err(|source| BpfError::Syscall { what: "dup program fd", source: std::io::Error::other(source) })?
        };
        const NAME: &str = "ferry_pl_progs";
        let mut progs: ProgramArray<&mut MapData> =
            ProgramArray::try_from(ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?)
                .map_err(|source| BpfError::Map { name: NAME, source })?;
        progs.set(0, &fd, 0).map_err(|source| BpfError::Map { name: NAME, source })?;
        Ok(Pipeline { xdp })
    }

    /// One element as a dedicated program (`ferry_only_counter`, …, of
    /// `elements.bpf.c`), with the same config tables and setters, for
    /// measuring what the pipeline around an element costs. Stage and
    /// entry setters fail on it (it has no such maps).
    pub fn load_dedicated(program: &str) -> Result<Pipeline, BpfError> {
        Ok(Pipeline { xdp: LoadedXdp::load(Object::Elements, program)? })
    }

    /// An independent handle (a dup'd fd) on one of the program's maps,
    /// for the state library (`crate::state`).
    pub fn map_handle(&self, name: &'static str) -> Result<aya::maps::Map, BpfError> {
        crate::attach::map_handle(self.xdp.ebpf(), name)
    }

    /// Attaches to a device (in the calling thread's namespace).
    pub fn attach(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        self.xdp.attach_to(ifindex, mode)
    }

    pub fn program(&self) -> &LoadedXdp {
        &self.xdp
    }

    pub(crate) fn ebpf_mut(&mut self) -> &mut aya::Ebpf {
        self.xdp.ebpf_mut()
    }

    fn hash<K: aya::Pod, V: aya::Pod>(&mut self, name: &'static str) -> Result<HashMap<&mut MapData, K, V>, BpfError> {
        let map = self.xdp.ebpf_mut().map_mut(name).ok_or(BpfError::NoMap { name })?;
        HashMap::try_from(map).map_err(|source| BpfError::Map { name, source })
    }

    fn put<K: aya::Pod, V: aya::Pod>(&mut self, name: &'static str, k: K, v: V) -> Result<(), BpfError> {
        self.hash::<K, V>(name)?.insert(k, v, 0).map_err(|source| BpfError::Map { name, source })
    }

    fn del<K: aya::Pod, V: aya::Pod>(&mut self, name: &'static str, k: &K) -> Result<(), BpfError> {
        match self.hash::<K, V>(name)?.remove(k) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(BpfError::Map { name, source }),
        }
    }

    /// Frames arriving on `ifindex` enter chain `entry.chain` at
    /// `entry.stage` as NF `entry.nf` (the stage-control table).
    pub fn set_entry(&mut self, ifindex: u32, entry: PlEntry) -> Result<(), BpfError> {
        self.put("ferry_pl_chains", ifindex, entry)
    }

    pub fn remove_entry(&mut self, ifindex: u32) -> Result<(), BpfError> {
        self.del::<u32, PlEntry>("ferry_pl_chains", &ifindex)
    }

    /// Element-control entry of `key` at `stage`.
    pub fn set_ctl(&mut self, stage: u32, key: PlKey, ctl: PlCtl) -> Result<(), BpfError> {
        self.put(stage_map(stage), key, ctl)
    }

    pub fn remove_ctl(&mut self, stage: u32, key: PlKey) -> Result<(), BpfError> {
        self.del::<PlKey, PlCtl>(stage_map(stage), &key)
    }

    /// ACL config: rules in order (first match wins), then
    /// `default_action` for IP frames; `non_ip_action` for the others.
    pub fn set_acl(
        &mut self,
        config: u32,
        rules: &[AclRule],
        default_action: u8,
        non_ip_action: u8,
    ) -> Result<(), BpfError> {
        if rules.len() > ACL_MAX_RULES {
            return Err(BpfError::Config(format!("ACL {config}: {} rules, at most {ACL_MAX_RULES}", rules.len())));
        }
        for (i, r) in rules.iter().enumerate() {
            self.put("ferry_pl_acl", AclKey { config, rule: i as u32 }, *r)?;
        }
        self.put("ferry_pl_acl_meta", config, AclMeta::new(rules.len(), default_action, non_ip_action))
    }

    pub fn set_rewrite(&mut self, config: u32, rw: Rewrite) -> Result<(), BpfError> {
        self.put("ferry_pl_rewrites", config, rw)
    }

    /// Token bucket: `rate_pps` packets per second, `burst` packets deep.
    pub fn set_policer(&mut self, config: u32, rate_pps: u64, burst: u64) -> Result<(), BpfError> {
        let p = Policer { rate_pps, burst, tokens_milli: burst * 1000, ..Default::default() };
        self.put("ferry_pl_policers", config, p)
    }

    /// Payload-scan config `config` (1 to SCAN_CONFIGS - 1).
    pub fn set_scan(&mut self, config: u32, scan: &PlScan) -> Result<(), BpfError> {
        const NAME: &str = "ferry_pl_scans";
        if config == 0 || config >= SCAN_CONFIGS {
            return Err(BpfError::Config(format!("payload scan config {config}: 1 to {}", SCAN_CONFIGS - 1)));
        }
        let map = self.xdp.ebpf_mut().map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut scans: Array<&mut MapData, PlScan> =
            Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        scans.set(config, *scan, 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    pub fn set_forward(&mut self, config: u32, fwd: Forward) -> Result<(), BpfError> {
        self.put("ferry_pl_forwards", config, fwd)
    }

    /// Makes device `ifindex` a redirect target (in the calling thread's
    /// namespace).
    pub fn add_device(&mut self, ifindex: u32) -> Result<(), BpfError> {
        const NAME: &str = "ferry_pl_devs";
        let map = self.xdp.ebpf_mut().map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut devs: DevMapHash<&mut MapData> =
            DevMapHash::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        devs.insert(ifindex, ifindex, None, 0).map_err(|source| BpfError::XdpMap { name: NAME, source })
    }

    /// The AF_XDP socket of receive queue `queue` (slow path).
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), BpfError> {
        const NAME: &str = "ferry_pl_xsks";
        let map = self.xdp.ebpf_mut().map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut xsks: XskMap<&mut MapData> =
            XskMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        xsks.set(queue, socket.as_raw_fd(), 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Counter config `config`, summed over CPUs.
    pub fn counter(&self, config: u32) -> Result<PlCount, BpfError> {
        const NAME: &str = "ferry_pl_counters";
        let map = self.xdp.ebpf().map(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let arr: PerCpuArray<&MapData, PlCount> =
            PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let per_cpu = arr.get(&config, 0).map_err(|source| BpfError::Map { name: NAME, source })?;
        Ok(per_cpu
            .iter()
            .fold(PlCount::default(), |a, c| PlCount { packets: a.packets + c.packets, bytes: a.bytes + c.bytes }))
    }

    /// Flows the flow monitor `config` has seen, with their counts.
    pub fn flows(&self, config: u32) -> Result<Vec<(FlowKey, PlCount)>, BpfError> {
        const NAME: &str = "ferry_pl_flows";
        let map = self.xdp.ebpf().map(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let flows: HashMap<&MapData, FlowKey, PlCount> =
            HashMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        Ok(flows.iter().filter_map(Result::ok).filter(|(k, _)| k.config == config).collect())
    }

    /// Deploys chain `chain` for frames arriving on `ifindex`: element i
    /// runs at stage i mod STAGES (the last one of each pass recirculates),
    /// and an element whose successor belongs to another NF completes its
    /// NF. Configs must be set first. Map updates only.
    pub fn deploy(&mut self, chain: u32, ifindex: u32, elements: &[Element]) -> Result<(), BpfError> {
        let Some(first) = elements.first() else { return Ok(()) };
        let mut seen = std::collections::HashSet::new();
        for (i, e) in elements.iter().enumerate() {
            // (stage, NF) is the element-control key within a chain.
            if !seen.insert((i as u32 % STAGES, e.nf)) {
                return Err(BpfError::Config(format!(
                    "chain {chain}: NF {} has two elements at stage {}; an NF gets at most {STAGES} elements",
                    e.nf,
                    i as u32 % STAGES
                )));
            }
        }
        for (i, e) in elements.iter().enumerate() {
            let stage = i as u32 % STAGES;
            let next = elements.get(i + 1);
            let ctl = PlCtl {
                element: e.kind as u32,
                config: e.config,
                nf_complete: !matches!(next, Some(n) if n.nf == e.nf) as u8,
                next_stage: if next.is_some() { ((i as u32 + 1) % STAGES) as u8 } else { END },
                next_nf: next.map_or(e.nf, |n| n.nf),
                _pad: 0,
            };
            self.set_ctl(stage, PlKey { chain, nf: e.nf }, ctl)?;
        }
        self.set_entry(ifindex, PlEntry { chain, nf: first.nf, stage: 0, _pad: 0 })
    }

    /// Removes what `deploy` wrote, entry point first.
    pub fn remove(&mut self, chain: u32, ifindex: u32, elements: &[Element]) -> Result<(), BpfError> {
        self.remove_entry(ifindex)?;
        for (i, e) in elements.iter().enumerate() {
            self.remove_ctl(i as u32 % STAGES, PlKey { chain, nf: e.nf })?;
        }
        Ok(())
    }
}
