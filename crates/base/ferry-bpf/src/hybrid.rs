//! The fast paths of the hybrid NFs (`bpf/include/ferry_hybrid.h`):
//! typed mirrors of the map layouts in `ferry_abi.h`, and [`HybridPipeline`], the
//! stage pipeline with hybrid NFs (eFW, eLB, eLB reply, eDPI, eNAT, eNAT
//! reply) deployed as its elements. They chain the way every pipeline
//! element does, by the stage tables; the control planes that fill their
//! tables are in `crates/runtime/ferry-evnf`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, BorrowedFd};

pub use crate::hybrid_maps::HybridMaps;
use crate::pipeline::{Element, ElementKind, Forward, Pipeline, PlKey, FWD_XSK};

/// The forward config that hands a hybrid path's frames to the socket of
/// their queue.
const TO_SOCKET: u32 = 1;
use crate::abi::In6;
use crate::{AttachMode, BpfError, Verdicts};

/// The hybrid NFs' fast paths (`FERRY_HYBRID_*`): their pipeline elements, and
/// their NF ids and counter rows when they run alone in a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HybridElement {
    Firewall = 0,
    Balancer = 1,
    BalancerReply = 2,
    Dpi = 3,
    Nat = 4,
    NatReply = 5,
}

impl HybridElement {
    pub const ALL: [HybridElement; 6] = [
        HybridElement::Firewall,
        HybridElement::Balancer,
        HybridElement::BalancerReply,
        HybridElement::Dpi,
        HybridElement::Nat,
        HybridElement::NatReply,
    ];

    /// Its NF id in the pipeline's stage tables and slow-path metadata:
    /// above the ids ferryd's allocator gives, so NFs of both kinds share
    /// a pipeline without sharing keys.
    pub fn id(self) -> u32 {
        HYBRID_IDS + self as u32
    }

    /// Its element in the stage pipeline.
    pub fn element(self) -> ElementKind {
        match self {
            HybridElement::Firewall => ElementKind::Efw,
            HybridElement::Balancer => ElementKind::Elb,
            HybridElement::BalancerReply => ElementKind::ElbReply,
            HybridElement::Dpi => ElementKind::Edpi,
            HybridElement::Nat => ElementKind::Enat,
            HybridElement::NatReply => ElementKind::EnatReply,
        }
    }

    /// Names of the NF's counter slots, in slot order (`FERRY_*_C_*`).
    pub fn counter_names(self) -> &'static [&'static str] {
        match self {
            HybridElement::Firewall => &["allow", "deny", "to_kernel", "not_ip", "malformed"],
            HybridElement::Balancer => &["new_conn", "tracked", "not_vip", "no_backend", "malformed"],
            HybridElement::BalancerReply => &["reply_rewritten", "reply_not_tracked", "reply_malformed"],
            HybridElement::Dpi => &["bypass", "to_slow_path", "not_inspected", "malformed"],
            HybridElement::Nat => &["rewritten", "to_slow_path", "not_natted", "fragment", "malformed"],
            HybridElement::NatReply => &["reply_rewritten", "reply_not_mapped", "reply_malformed"],
        }
    }
}

/// The first of the hybrid NFs' ids ([`HybridElement::id`]).
pub const HYBRID_IDS: u32 = 0xffff_ff00;

/// Slots per NF in `ferry_hyb_stats`.
pub const COUNTERS: u32 = 8;
/// Row of the route element (a hybrid path's end) in `ferry_hyb_stats`,
/// and its slot names.
pub const ROUTE_ROW: u32 = 6;
pub const ROUTE_COUNTER_NAMES: [&str; 2] = ["routed", "to_kernel"];

pub const FW_ALLOW: u32 = 0;
pub const FW_DENY: u32 = 1;
pub const FW_MAX_RULES: u32 = 1024;
pub const LB_MAX_VIPS: u32 = 16;
pub const LB_RING: usize = 1024;
pub const LB_MAX_BACKENDS: u32 = 256;
pub const LB_NO_BACKEND: u32 = u32::MAX;
pub const LB_CLOSING: u32 = 1;

/// `struct ferry_fw_port_key`: port in network order, 0 for every port.
pub type FwPortKey = crate::abi::gen::ferry_fw_port_key;

/// `struct ferry_fw_rule`.
pub type FwRule = crate::abi::gen::ferry_fw_rule;

/// `struct ferry_lb_vip_key`: address and port in network order.
pub type LbVipKey = crate::abi::gen::ferry_lb_vip_key;

/// `struct ferry_lb_vip`.
pub type LbVip = crate::abi::gen::ferry_lb_vip;

/// `struct ferry_lb_backend`: address and port in network order.
pub type LbBackend = crate::abi::gen::ferry_lb_backend;

/// `struct ferry_flow`: a directional 5-tuple of either family (IPv4
/// addresses IPv4-mapped), network order.
pub type FlowTuple = crate::abi::gen::ferry_flow;

impl FlowTuple {
    /// From host-order values; an IPv4 address is held IPv4-mapped.
    pub fn new(src: impl Into<In6>, sport: u16, dst: impl Into<In6>, dport: u16, proto: u8) -> FlowTuple {
        FlowTuple {
            saddr: src.into(),
            daddr: dst.into(),
            sport: sport.to_be(),
            dport: dport.to_be(),
            proto,
            _pad: [0; 3],
        }
    }

    /// The same flow seen from the other side.
    pub fn reversed(&self) -> FlowTuple {
        FlowTuple { saddr: self.daddr, daddr: self.saddr, sport: self.dport, dport: self.sport, ..*self }
    }

    /// The source in its own family.
    pub fn src(&self) -> (IpAddr, u16) {
        (self.saddr.to_ip(), u16::from_be(self.sport))
    }

    /// The destination in its own family.
    pub fn dst(&self) -> (IpAddr, u16) {
        (self.daddr.to_ip(), u16::from_be(self.dport))
    }
}

impl std::fmt::Display for FlowTuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ((sa, sp), (da, dp)) = (self.src(), self.dst());
        write!(f, "{sa}:{sp} -> {da}:{dp} proto {}", self.proto)
    }
}

/// `struct ferry_lb_conn`.
pub type LbConn = crate::abi::gen::ferry_lb_conn;

/// `struct ferry_lb_reply`.
pub type LbReply = crate::abi::gen::ferry_lb_reply;

/// `struct ferry_dpi_bypass`.
pub type DpiBypass = crate::abi::gen::ferry_dpi_bypass;

/// `FERRY_NAT_OUT`, `FERRY_NAT_IN`: which endpoint a NAT key holds.
pub const NAT_OUT: u8 = 0;
pub const NAT_IN: u8 = 1;
/// `FERRY_NAT_MAP_ENTRIES`: both halves of every port of both protocols.
pub const NAT_MAP_ENTRIES: u32 = 4 * 65536;

/// `struct ferry_nat_key`: an endpoint, network order.
pub type NatKey = crate::abi::gen::ferry_nat_key;

impl NatKey {
    /// From host-order values.
    pub fn new(addr: Ipv4Addr, port: u16, proto: u8, dir: u8) -> NatKey {
        NatKey { addr: u32::from_ne_bytes(addr.octets()), port: port.to_be(), proto, dir }
    }
}

/// `struct ferry_nat_entry`: what the key's endpoint becomes.
pub type NatEntry = crate::abi::gen::ferry_nat_entry;

impl NatEntry {
    /// From host-order values.
    pub fn new(addr: Ipv4Addr, port: u16, last_seen_ns: u64) -> NatEntry {
        NatEntry { addr: u32::from_ne_bytes(addr.octets()), port: port.to_be(), _pad: 0, last_seen_ns }
    }
}

const _: () = assert!(std::mem::size_of::<NatKey>() == 8);
const _: () = assert!(std::mem::size_of::<NatEntry>() == 16);
const _: () = assert!(std::mem::size_of::<FwPortKey>() == 4);
const _: () = assert!(std::mem::size_of::<FwRule>() == 8);
const _: () = assert!(std::mem::size_of::<LbVipKey>() == 20);
const _: () = assert!(std::mem::size_of::<LbVip>() == 8);
const _: () = assert!(std::mem::size_of::<LbBackend>() == 20);
const _: () = assert!(std::mem::size_of::<FlowTuple>() == 40);
const _: () = assert!(std::mem::size_of::<LbConn>() == 32);
const _: () = assert!(std::mem::size_of::<LbReply>() == 32);
const _: () = assert!(std::mem::size_of::<DpiBypass>() == 32);

// SAFETY: plain-old-data; every bit pattern is valid (padding is explicit).
unsafe impl aya::Pod for FwPortKey {}
unsafe impl aya::Pod for FwRule {}
unsafe impl aya::Pod for LbVipKey {}
unsafe impl aya::Pod for LbVip {}
unsafe impl aya::Pod for LbBackend {}
unsafe impl aya::Pod for FlowTuple {}
unsafe impl aya::Pod for LbConn {}
unsafe impl aya::Pod for LbReply {}
unsafe impl aya::Pod for DpiBypass {}
unsafe impl aya::Pod for NatKey {}
unsafe impl aya::Pod for NatEntry {}

/// The hybrid NFs' fast paths, loaded: a stage pipeline (the one XDP
/// program of every fast path) whose hybrid tables ([`HybridMaps`]) are
/// taken out to be filled by the control planes or handed on as fds.
/// Whoever holds it deploys paths of hybrid NFs as pipeline elements and
/// attaches the pipeline to devices.
pub struct HybridPipeline {
    pipeline: Pipeline,
    maps: HybridMaps,
    /// What each device enters: its chain id and elements.
    entered: HashMap<u32, (u32, Vec<Element>)>,
}

impl HybridPipeline {
    /// Loads the pipeline and takes its hybrid tables.
    pub fn load() -> Result<HybridPipeline, BpfError> {
        Self::load_with(true)
    }

    /// As [`HybridPipeline::load`]; with `full_tables` false the hybrid NFs' large
    /// tables are tiny, for a pipeline that runs none of them.
    pub fn load_with(full_tables: bool) -> Result<HybridPipeline, BpfError> {
        let mut pipeline = if full_tables { Pipeline::load_sized(&[])? } else { Pipeline::load()? };
        let maps = HybridMaps::take(pipeline.ebpf_mut())?;
        Ok(HybridPipeline { pipeline, maps, entered: HashMap::new() })
    }

    /// Frames arriving on device `ifindex` run the elements `before`
    /// (their configs written already), then the hybrid NFs of `path` in
    /// order, as NFs of chain `chain` (each hybrid NF's id is
    /// [`HybridElement::id`]), and then go to the AF_XDP socket of their queue, the
    /// slow-path metadata naming NF `then` (the process after the path),
    /// or, without one, are routed out (the route element). Map updates
    /// only. A device enters one path: another path for it is refused (two
    /// ports in different namespaces can share an ifindex) until
    /// [`Self::remove`].
    pub fn deploy(
        &mut self,
        chain: u32,
        ifindex: u32,
        before: &[Element],
        path: &[HybridElement],
        then: Option<u32>,
    ) -> Result<(), BpfError> {
        let Some(last) = path.last() else { return Ok(()) };
        let mut elements = before.to_vec();
        elements.extend(path.iter().map(|nf| Element { kind: nf.element(), config: 0, nf: nf.id() }));
        elements.push(match then {
            Some(nf) => {
                self.pipeline.set_forward(TO_SOCKET, Forward { action: FWD_XSK, ifindex: 0 })?;
                Element { kind: ElementKind::Forward, config: TO_SOCKET, nf }
            }
            None => Element { kind: ElementKind::Route, config: 0, nf: last.id() },
        });
        if let Some((c, e)) = self.entered.get(&ifindex) {
            if *c == chain && *e == elements {
                return Ok(());
            }
            return Err(BpfError::Config(format!(
                "device ifindex {ifindex} already enters chain {c}: one pipeline serves each ifindex once (ports in \
                 different namespaces may share an ifindex)"
            )));
        }
        self.pipeline.deploy(chain, ifindex, &elements)?;
        self.entered.insert(ifindex, (chain, elements));
        Ok(())
    }

    /// Removes what [`Self::deploy`] wrote for device `ifindex`, but for
    /// the element-control entries another device's path still uses (the
    /// reply ports of one balancer share theirs).
    pub fn remove(&mut self, ifindex: u32) -> Result<(), BpfError> {
        let Some((chain, elements)) = self.entered.remove(&ifindex) else { return Ok(()) };
        self.pipeline.remove_entry(ifindex)?;
        for (i, e) in elements.iter().enumerate() {
            let stage = i as u32 % crate::pipeline::STAGES;
            let shared = self.entered.values().any(|(c, others)| {
                *c == chain
                    && others
                        .iter()
                        .enumerate()
                        .any(|(j, o)| o.nf == e.nf && j as u32 % crate::pipeline::STAGES == stage)
            });
            if !shared {
                self.pipeline.remove_ctl(stage, PlKey { chain, nf: e.nf })?;
            }
        }
        Ok(())
    }

    /// Attaches the pipeline to a device (in the calling thread's
    /// namespace); frames arriving there run the path deployed for it.
    pub fn attach(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        self.pipeline.attach(ifindex, mode)
    }

    /// The control maps (rules, connections, counters).
    pub fn maps(&self) -> &HybridMaps {
        &self.maps
    }

    pub fn maps_mut(&mut self) -> &mut HybridMaps {
        &mut self.maps
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The program's fd, for BPF_PROG_RUN.
    pub fn program_fd(&self) -> Result<BorrowedFd<'_>, BpfError> {
        self.pipeline.program().program_fd()
    }

    pub fn verdicts(&self) -> Result<Verdicts, BpfError> {
        self.pipeline.program().verdicts()
    }

    /// The slow-path AF_XDP socket of receive queue `queue`.
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), BpfError> {
        self.pipeline.register_xsk(queue, socket)
    }
}
