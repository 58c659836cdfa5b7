//! The edge classifier (`bpf/classify.bpf.c`): tenant classification in
//! XDP. Its table is ferry-wire's `classify::Table` (the router NF's
//! parser reads the rules), converted rule by rule to `struct
//! ferry_cls_rule`; each tenant entry is a
//! DEVMAP slot holding the device frames for it are redirected to.

/// Rules the program holds (`FERRY_CLS_MAX_RULES`).
pub const CLS_MAX_RULES: usize = 64;

use aya::maps::{Array, DevMap};
use std::net::Ipv6Addr;

use ferry_wire::classify::Rule;
use ferry_wire::IpPrefix;

use crate::abi::{In6, Verdicts};
use crate::attach::{per_cpu_sums, LoadedXdp};
use crate::{AttachMode, BpfError, Object};

const RULES: &str = "ferry_cls_rules";
const CONFIG: &str = "ferry_cls_config";
const DEVS: &str = "ferry_cls_devs";
const HITS: &str = "ferry_cls_hits";

/// `struct ferry_cls_rule`.
pub type ClsRule = crate::abi::gen::ferry_cls_rule;
const _: () = assert!(std::mem::size_of::<ClsRule>() == 76);
// SAFETY: plain-old-data; every bit pattern is valid.
unsafe impl aya::Pod for ClsRule {}

/// `struct ferry_cls_config`.
pub type ClsConfig = crate::abi::gen::ferry_cls_config;
const _: () = assert!(std::mem::size_of::<ClsConfig>() == 8);
// SAFETY: plain-old-data; every bit pattern is valid.
unsafe impl aya::Pod for ClsConfig {}

const FIELD_SRC: u16 = 1;
const FIELD_DST: u16 = 2;
const FIELD_VLAN: u16 = 4;
const FIELD_DPORT: u16 = 8;
const FIELD_INNER_VLAN: u16 = 16;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

impl From<&Rule> for ClsRule {
    fn from(r: &Rule) -> ClsRule {
        let mut c = ClsRule { out: r.out, ..ClsRule::default() };
        let mask = |p: IpPrefix| In6::from(Ipv6Addr::from(p.mask()));
        if let Some(p) = r.src {
            (c.src, c.src_mask, c.fields) = (p.addr().into(), mask(p), c.fields | FIELD_SRC);
        }
        if let Some(p) = r.dst {
            (c.dst, c.dst_mask, c.fields) = (p.addr().into(), mask(p), c.fields | FIELD_DST);
        }
        if let Some(v) = r.vlan {
            (c.vlan, c.fields) = (v, c.fields | FIELD_VLAN);
        }
        if let Some(v) = r.inner_vlan {
            (c.inner_vlan, c.fields) = (v, c.fields | FIELD_INNER_VLAN);
        }
        if let Some(p) = r.dport {
            (c.dport, c.fields) = (p.to_be(), c.fields | FIELD_DPORT);
        }
        c
    }
}

/// Writes `table` into the rules map (`ferry_classify.h`) of `ebpf`.
pub(crate) fn write_rules(ebpf: &mut aya::Ebpf, table: &[Rule]) -> Result<(), BpfError> {
    if table.len() > CLS_MAX_RULES {
        return Err(BpfError::Config(format!("{} rules; the table holds {CLS_MAX_RULES}", table.len())));
    }
    let mut rules: Array<_, ClsRule> = Array::try_from(ebpf.map_mut(RULES).ok_or(BpfError::NoMap { name: RULES })?)
        .map_err(|source| BpfError::Map { name: RULES, source })?;
    for (i, r) in table.iter().enumerate() {
        rules.set(i as u32, ClsRule::from(r), 0).map_err(|source| BpfError::Map { name: RULES, source })?;
    }
    Ok(())
}

// The parser's limits are the program's: rules in its table, entries (a
// rule's `out`) in its DEVMAP.
const _: () = assert!(ferry_wire::classify::MAX_RULES == CLS_MAX_RULES);
const _: () = assert!(ferry_wire::classify::MAX_OUTS <= CLS_MAX_RULES);

/// What the classifier does with a frame no rule takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    Drop,
    /// To the edge device's kernel stack.
    Kernel,
}

/// The loaded classifier, attached or not. Dropping it detaches it.
pub struct Classifier {
    xdp: LoadedXdp,
}

impl Classifier {
    /// Loads the program with `table` in its maps (entries still without
    /// devices: frames for them are dropped until [`Classifier::set_entry`]).
    pub fn load(table: &[Rule], unmatched: Unmatched) -> Result<Classifier, BpfError> {
        let mut xdp = LoadedXdp::load(Object::Classify, "ferry_classify")?;
        let ebpf = xdp.ebpf_mut();
        write_rules(ebpf, table)?;
        let mut config: Array<_, ClsConfig> =
            Array::try_from(ebpf.map_mut(CONFIG).ok_or(BpfError::NoMap { name: CONFIG })?)
                .map_err(|source| BpfError::Map { name: CONFIG, source })?;
        let default_action = match unmatched {
            Unmatched::Drop => XDP_DROP,
            Unmatched::Kernel => XDP_PASS,
        };
        let cfg = ClsConfig { rules: table.len() as u32, default_action };
        config.set(0, cfg, 0).map_err(|source| BpfError::Map { name: CONFIG, source })?;
        Ok(Classifier { xdp })
    }

    /// Makes entry `out` redirect to device `ifindex`. The kernel resolves
    /// it in the calling thread's network namespace: call from the
    /// device's.
    pub fn set_entry(&mut self, out: u16, ifindex: u32) -> Result<(), BpfError> {
        let map = self.xdp.ebpf_mut().map_mut(DEVS).ok_or(BpfError::NoMap { name: DEVS })?;
        let mut devs = DevMap::try_from(map).map_err(|source| BpfError::Map { name: DEVS, source })?;
        devs.set(u32::from(out), ifindex, None, 0).map_err(|source| BpfError::XdpMap { name: DEVS, source })
    }

    /// Attaches to device `ifindex` (in the calling thread's namespace).
    pub fn attach(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        self.xdp.attach_to(ifindex, mode)
    }

    /// Frames each rule took, in rule order, then those no rule took.
    pub fn hits(&self, rules: usize) -> Result<(Vec<u64>, u64), BpfError> {
        let indices = (0..rules.min(CLS_MAX_RULES) as u32).chain([CLS_MAX_RULES as u32]);
        let mut hits = per_cpu_sums(self.xdp.ebpf(), HITS, indices)?;
        let unmatched = hits.pop().unwrap_or_default();
        Ok((hits, unmatched))
    }

    pub fn verdicts(&self) -> Result<Verdicts, BpfError> {
        self.xdp.verdicts()
    }

    /// The program, for BPF_PROG_TEST_RUN.
    pub fn program_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>, BpfError> {
        self.xdp.program_fd()
    }
}
