//! The fast paths of the hybrid NFs (`bpf/evnf.bpf.c`): typed mirrors of
//! the map layouts in `ferry_abi.h`, and [`Evnf`], the loaded object with
//! its six programs (eFW, eLB, eLB reply, eDPI, eNAT, eNAT reply). A chain of them is the
//! next-NF table, changed with map updates; the control planes that fill
//! the tables are in `crates/ferry-evnf`.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::maps::{Array, MapData, PerCpuArray, ProgramArray, XskMap};
use aya::programs::Xdp;
use aya::Ebpf;

use crate::attach::{load_object, xdp_mut};
pub use crate::evnf_maps::EvnfMaps;
use crate::{AttachMode, BpfError, Object, Verdicts};

/// The hybrid NFs' fast-path programs (`FERRY_EV_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EvNf {
    Firewall = 0,
    Balancer = 1,
    BalancerReply = 2,
    Dpi = 3,
    Nat = 4,
    NatReply = 5,
}

impl EvNf {
    pub const ALL: [EvNf; 6] =
        [EvNf::Firewall, EvNf::Balancer, EvNf::BalancerReply, EvNf::Dpi, EvNf::Nat, EvNf::NatReply];

    pub fn program(self) -> &'static str {
        match self {
            EvNf::Firewall => "ferry_efw",
            EvNf::Balancer => "ferry_elb",
            EvNf::BalancerReply => "ferry_elb_reply",
            EvNf::Dpi => "ferry_edpi",
            EvNf::Nat => "ferry_enat",
            EvNf::NatReply => "ferry_enat_reply",
        }
    }

    /// Names of the NF's counter slots, in slot order (`FERRY_*_C_*`).
    pub fn counter_names(self) -> &'static [&'static str] {
        match self {
            EvNf::Firewall => &["allow", "deny", "to_kernel", "not_ip", "malformed"],
            EvNf::Balancer => &["new_conn", "tracked", "not_vip", "no_backend", "malformed"],
            EvNf::BalancerReply => &["reply_rewritten", "reply_not_tracked", "reply_malformed"],
            EvNf::Dpi => &["bypass", "to_slow_path", "not_inspected", "malformed"],
            EvNf::Nat => &["rewritten", "to_slow_path", "not_natted", "fragment", "malformed"],
            EvNf::NatReply => &["reply_rewritten", "reply_not_mapped", "reply_malformed"],
        }
    }
}

/// Slots per NF in `ferry_ev_stats`.
pub const COUNTERS: u32 = 8;
/// Row of the chain's end in `ferry_ev_stats`, and its slot names.
pub const ROUTE_ROW: u32 = 6;
pub const ROUTE_COUNTER_NAMES: [&str; 2] = ["routed", "to_kernel"];
/// `FERRY_EV_END`.
pub const END: u32 = u32::MAX;

pub const FW_ALLOW: u32 = 0;
pub const FW_DENY: u32 = 1;
pub const FW_MAX_RULES: u32 = 1024;
pub const LB_MAX_VIPS: u32 = 16;
pub const LB_RING: usize = 1024;
pub const LB_MAX_BACKENDS: u32 = 256;
pub const LB_NO_BACKEND: u32 = u32::MAX;
pub const LB_CLOSING: u32 = 1;

/// `struct ferry_fw_port_key`: port in network order, 0 for every port.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FwPortKey {
    pub proto: u8,
    pub _pad: u8,
    pub port: u16,
}

/// `struct ferry_fw_rule`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FwRule {
    pub action: u32,
    pub rule_id: u32,
}

/// `struct ferry_lb_vip_key`: address and port in network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LbVipKey {
    pub addr: u32,
    pub port: u16,
    pub proto: u8,
    pub _pad: u8,
}

/// `struct ferry_lb_vip`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LbVip {
    pub vip_id: u32,
    pub _pad: u32,
}

/// `struct ferry_lb_backend`: address and port in network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LbBackend {
    pub addr: u32,
    pub port: u16,
    pub _pad: u16,
}

/// `struct ferry_ev_flow`: a directional IPv4 5-tuple, network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EvFlow {
    pub saddr: u32,
    pub daddr: u32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub _pad: [u8; 3],
}

impl EvFlow {
    /// From host-order values.
    pub fn new(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, proto: u8) -> EvFlow {
        EvFlow {
            saddr: u32::from_ne_bytes(src.octets()),
            daddr: u32::from_ne_bytes(dst.octets()),
            sport: sport.to_be(),
            dport: dport.to_be(),
            proto,
            _pad: [0; 3],
        }
    }

    /// The same flow seen from the other side.
    pub fn reversed(&self) -> EvFlow {
        EvFlow { saddr: self.daddr, daddr: self.saddr, sport: self.dport, dport: self.sport, ..*self }
    }

    pub fn src(&self) -> (Ipv4Addr, u16) {
        (Ipv4Addr::from(self.saddr.to_ne_bytes()), u16::from_be(self.sport))
    }

    pub fn dst(&self) -> (Ipv4Addr, u16) {
        (Ipv4Addr::from(self.daddr.to_ne_bytes()), u16::from_be(self.dport))
    }
}

impl std::fmt::Display for EvFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ((sa, sp), (da, dp)) = (self.src(), self.dst());
        write!(f, "{sa}:{sp} -> {da}:{dp} proto {}", self.proto)
    }
}

/// `struct ferry_lb_conn`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LbConn {
    pub backend: u32,
    pub flags: u32,
    pub last_seen_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// `struct ferry_lb_reply`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LbReply {
    pub vip: u32,
    pub vport: u16,
    pub _pad: u16,
    pub last_seen_ns: u64,
}

/// `struct ferry_dpi_bypass`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpiBypass {
    pub app: u32,
    pub _pad: u32,
    pub last_seen_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// `FERRY_NAT_OUT`, `FERRY_NAT_IN`: which endpoint a NAT key holds.
pub const NAT_OUT: u8 = 0;
pub const NAT_IN: u8 = 1;
/// `FERRY_NAT_MAP_ENTRIES`: both halves of every port of both protocols.
pub const NAT_MAP_ENTRIES: u32 = 4 * 65536;

/// `struct ferry_nat_key`: an endpoint, network order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NatKey {
    pub addr: u32,
    pub port: u16,
    pub proto: u8,
    pub dir: u8,
}

impl NatKey {
    /// From host-order values.
    pub fn new(addr: Ipv4Addr, port: u16, proto: u8, dir: u8) -> NatKey {
        NatKey { addr: u32::from_ne_bytes(addr.octets()), port: port.to_be(), proto, dir }
    }
}

/// `struct ferry_nat_entry`: what the key's endpoint becomes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatEntry {
    pub addr: u32,
    pub port: u16,
    pub _pad: u16,
    pub last_seen_ns: u64,
}

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
const _: () = assert!(std::mem::size_of::<LbVipKey>() == 8);
const _: () = assert!(std::mem::size_of::<LbVip>() == 8);
const _: () = assert!(std::mem::size_of::<LbBackend>() == 8);
const _: () = assert!(std::mem::size_of::<EvFlow>() == 16);
const _: () = assert!(std::mem::size_of::<LbConn>() == 32);
const _: () = assert!(std::mem::size_of::<LbReply>() == 16);
const _: () = assert!(std::mem::size_of::<DpiBypass>() == 32);

// SAFETY: plain-old-data; every bit pattern is valid (padding is explicit).
unsafe impl aya::Pod for FwPortKey {}
unsafe impl aya::Pod for FwRule {}
unsafe impl aya::Pod for LbVipKey {}
unsafe impl aya::Pod for LbVip {}
unsafe impl aya::Pod for LbBackend {}
unsafe impl aya::Pod for EvFlow {}
unsafe impl aya::Pod for LbConn {}
unsafe impl aya::Pod for LbReply {}
unsafe impl aya::Pod for DpiBypass {}
unsafe impl aya::Pod for NatKey {}
unsafe impl aya::Pod for NatEntry {}

/// The loaded eVNF object: all six programs, one set of maps. Whoever
/// loads it holds the programs, the chaining table and the socket map;
/// the control maps ([`EvnfMaps`]) can be handed on as fds.
pub struct Evnf {
    ebpf: Ebpf,
    maps: EvnfMaps,
}

impl Evnf {
    /// Loads the object and its programs, fills the program array and
    /// makes every NF the last of its chain.
    pub fn load() -> Result<Evnf, BpfError> {
        let mut ebpf = load_object(Object::Evnf)?;
        let mut fds = Vec::new();
        for nf in EvNf::ALL {
            let prog = xdp_mut(&mut ebpf, Object::Evnf, nf.program())?;
            prog.load().map_err(|source| BpfError::Program { name: nf.program().into(), source })?;
            let fd = prog
                .fd()
                .map_err(|source| BpfError::Program { name: nf.program().into(), source })?
                .try_clone()
                .map_err(|e| BpfError::Syscall { what: "dup program fd", source: std::io::Error::other(e) })?;
            fds.push((nf, fd));
        }
        const PROGS: &str = "ferry_ev_progs";
        let mut progs: ProgramArray<&mut MapData> =
            ProgramArray::try_from(ebpf.map_mut(PROGS).ok_or(BpfError::NoMap { name: PROGS })?)
                .map_err(|source| BpfError::Map { name: PROGS, source })?;
        for (nf, fd) in &fds {
            progs.set(*nf as u32, fd, 0).map_err(|source| BpfError::Map { name: PROGS, source })?;
        }
        let maps = EvnfMaps::take(&mut ebpf)?;
        let mut evnf = Evnf { ebpf, maps };
        for nf in EvNf::ALL {
            evnf.set_next(nf, None)?;
        }
        Ok(evnf)
    }

    /// Attaches `nf`'s program to a device (in the calling thread's
    /// namespace): frames arriving there start their chain at `nf`.
    pub fn attach(&mut self, nf: EvNf, ifindex: u32, mode: AttachMode) -> Result<(), BpfError> {
        let prog = xdp_mut(&mut self.ebpf, Object::Evnf, nf.program())?;
        prog.attach_to_if_index(ifindex, mode.flags())
            .map_err(|source| BpfError::Program { name: nf.program().into(), source })?;
        Ok(())
    }

    /// What runs after `nf` (None: the frame is routed out).
    pub fn set_next(&mut self, nf: EvNf, next: Option<EvNf>) -> Result<(), BpfError> {
        const NAME: &str = "ferry_ev_next";
        let map = self.ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut arr: Array<&mut MapData, u32> =
            Array::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        arr.set(nf as u32, next.map_or(END, |n| n as u32), 0).map_err(|source| BpfError::Map { name: NAME, source })
    }

    /// Chains `nfs` in order; the last routes frames out.
    pub fn set_chain(&mut self, nfs: &[EvNf]) -> Result<(), BpfError> {
        for (i, nf) in nfs.iter().enumerate() {
            self.set_next(*nf, nfs.get(i + 1).copied())?;
        }
        Ok(())
    }

    /// The control maps (rules, connections, counters).
    pub fn maps(&self) -> &EvnfMaps {
        &self.maps
    }

    pub fn maps_mut(&mut self) -> &mut EvnfMaps {
        &mut self.maps
    }

    /// The program's fd, for BPF_PROG_RUN.
    pub fn program_fd(&self, nf: EvNf) -> Result<BorrowedFd<'_>, BpfError> {
        let prog: &Xdp = self
            .ebpf
            .program(nf.program())
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| BpfError::NoProgram { object: Object::Evnf, name: nf.program().into() })?;
        let fd = prog.fd().map_err(|source| BpfError::Program { name: nf.program().into(), source })?;
        Ok(fd.as_fd())
    }

    pub fn verdicts(&self) -> Result<Verdicts, BpfError> {
        const NAME: &str = "ferry_verdicts";
        let map = self.ebpf.map(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let arr: PerCpuArray<&MapData, Verdicts> =
            PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        let mut sum = Verdicts::default();
        for v in arr.get(&0, 0).map_err(|source| BpfError::Map { name: NAME, source })?.iter() {
            sum.add(v);
        }
        Ok(sum)
    }

    /// The slow-path AF_XDP socket of receive queue `queue`.
    pub fn register_xsk(&mut self, queue: u32, socket: &impl AsRawFd) -> Result<(), BpfError> {
        const NAME: &str = "ferry_ev_xsks";
        let map = self.ebpf.map_mut(NAME).ok_or(BpfError::NoMap { name: NAME })?;
        let mut xsks: XskMap<&mut MapData> =
            XskMap::try_from(map).map_err(|source| BpfError::Map { name: NAME, source })?;
        xsks.set(queue, socket.as_raw_fd(), 0).map_err(|source| BpfError::Map { name: NAME, source })
    }
}
