//! The layouts shared with the BPF programs. `bpf/include/ferry_abi.h` is
//! their one definition: the build generates [`gen`] from it with bindgen,
//! and this crate names the generated types (`Verdicts` is
//! `struct ferry_verdicts`) and adds their methods. Sizes are checked at
//! compile time against the same numbers the C header asserts, so a layout
//! change is a deliberate change on both sides.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferry_wire::prefix::{from_flow_space, to_flow_space};
use ferry_wire::{flow, nsh, vxlan_gpe};

/// What bindgen generated from `ferry_abi.h`: every `ferry_*` struct and
/// `FERRY_*` constant, named as in C.
#[allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all)]
pub mod gen {
    include!(concat!(env!("OUT_DIR"), "/abi.rs"));
}

/// One slot per XDP action, plus [`SLOT_MALFORMED`] and [`SLOT_NO_SOCKET`].
pub const VERDICT_SLOTS: usize = 7;
/// Frames a program refused as malformed before choosing an action.
pub const SLOT_MALFORMED: usize = 5;
/// Frames bound for an AF_XDP socket that arrived on a receive queue
/// with none; dropped, or passed to the kernel where the port says so.
pub const SLOT_NO_SOCKET: usize = 6;
/// `ferry_xsk_unowned`: frames on a queue with no socket are dropped ...
pub const UNOWNED_DROP: u32 = 0;
/// ... or handed to the kernel stack.
pub const UNOWNED_KERNEL: u32 = 1;
/// Names of the verdict slots, in slot order.
pub const VERDICT_NAMES: [&str; VERDICT_SLOTS] =
    ["aborted", "drop", "pass", "tx", "redirect", "malformed", "no_socket"];

/// `struct ferry_verdicts`.
pub type Verdicts = crate::abi::gen::ferry_verdicts;
const _: () = assert!(std::mem::size_of::<Verdicts>() == 112);

impl Verdicts {
    /// Adds another CPU's counters to these.
    pub fn add(&mut self, other: &Verdicts) {
        for i in 0..VERDICT_SLOTS {
            self.packets[i] += other.packets[i];
            self.bytes[i] += other.bytes[i];
        }
    }

    /// All packets counted, whatever the verdict.
    pub fn total_packets(&self) -> u64 {
        self.packets.iter().sum()
    }
}

/// `struct ferry_gen_config`.
pub type GenConfig = crate::abi::gen::ferry_gen_config;
const _: () = assert!(std::mem::size_of::<GenConfig>() == 104);

/// `FERRY_GEN_HEADERS_*`: Ethernet + IPv4, and UDP too.
pub const GEN_HEADERS_MAX: usize = 64;
pub const GEN_HEADERS_IP: u32 = 34;
pub const GEN_HEADERS_UDP: u32 = 42;
pub const GEN_HEADERS_TCP: u32 = 54;

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            ifindex: 0,
            stream: 0,
            stamp_offset: 0,
            sport_offset: 0,
            sport_min: 0,
            sport_count: 0,
            clock_shift: 0,
            interval_ns: 0,
            limit: 0,
            headers_len: 0,
            _pad: 0,
            headers: [0; GEN_HEADERS_MAX],
        }
    }
}

impl GenConfig {
    /// Writes the first `len` bytes of `template` ([`GEN_HEADERS_IP`],
    /// [`GEN_HEADERS_UDP`] or [`GEN_HEADERS_TCP`]) back into every frame.
    pub fn with_headers(mut self, template: &[u8], len: u32) -> GenConfig {
        let n = len as usize;
        if [GEN_HEADERS_IP, GEN_HEADERS_UDP, GEN_HEADERS_TCP].contains(&len) && template.len() >= n {
            self.headers[..n].copy_from_slice(&template[..n]);
            self.headers_len = len;
        }
        self
    }
}

/// `struct ferry_gen_state`.
pub type GenState = crate::abi::gen::ferry_gen_state;
const _: () = assert!(std::mem::size_of::<GenState>() == 24);

/// `struct ferry_slow_meta`: what precedes every frame the stage pipeline
/// (every fast path, hybrid NFs' included) hands to an AF_XDP slow path;
/// read it from the XDP metadata area.
pub type SlowMeta = crate::abi::gen::ferry_slow_meta;
const _: () = assert!(std::mem::size_of::<SlowMeta>() == 16);
pub const SLOW_NO_RULE: u32 = 1;
pub const SLOW_FORWARDED: u32 = 2;
/// A hybrid NF's table missed: its server part decides (`FERRY_SLOW_MISS`).
pub const SLOW_MISS: u32 = 3;

impl SlowMeta {
    /// Reads one from the metadata bytes in front of a frame.
    pub fn from_bytes(b: &[u8]) -> Option<SlowMeta> {
        let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
        let ne32 = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(SlowMeta { reason: ne32(0), chain: ne32(4), nf: ne32(8), stage: ne32(12) })
    }
}

/// `struct ferry_parse_result`: the BPF parser's answer for one frame,
/// written by `ferry_parse_probe` as XDP metadata. Network order for
/// addresses and ports, as in the frame.
pub type ParseResult = crate::abi::gen::ferry_parse_result;
const _: () = assert!(std::mem::size_of::<ParseResult>() == 52);

impl ParseResult {
    /// Reads one from the first bytes of a test run's output.
    pub fn from_bytes(b: &[u8]) -> Option<ParseResult> {
        let b = b.get(..std::mem::size_of::<ParseResult>())?;
        // SAFETY: the length is checked; ParseResult is Pod (every bit
        // pattern valid), and the read is unaligned.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<ParseResult>()) })
    }

    /// The answer as ferry-wire's flow, to hold it to `flow::parse`; None
    /// for a frame the BPF parser found malformed.
    pub fn to_flow(&self) -> Option<flow::Flow> {
        (self.ok == 1).then(|| flow::Flow {
            ethertype: u16::from_be(self.ethertype),
            outer_vlan: (self.tags >= 1).then_some(self.outer_vid),
            inner_vlan: (self.tags == 2).then_some(self.inner_vid),
            l3_offset: usize::from(self.l3_off),
            ip: match self.ip_version {
                4 => Some(flow::IpVersion::V4),
                6 => Some(flow::IpVersion::V6),
                _ => None,
            },
            proto: self.proto,
            fragment: self.fragment == 1,
            later_fragment: self.later_fragment == 1,
            src: self.saddr.to_ipv6(),
            dst: self.daddr.to_ipv6(),
            sport: u16::from_be(self.sport),
            dport: u16::from_be(self.dport),
            l4_offset: (self.l4_off != 0).then_some(usize::from(self.l4_off)),
        })
    }
}

/// `struct ferry_in6`: an address in the flow key's 128-bit space, IPv4
/// ones IPv4-mapped (as ferry-wire's flow parser holds them).
pub type In6 = crate::abi::gen::ferry_in6;
const _: () = assert!(std::mem::size_of::<In6>() == 16);

impl From<Ipv6Addr> for In6 {
    fn from(a: Ipv6Addr) -> In6 {
        let o = a.octets();
        In6 { w: std::array::from_fn(|i| u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]])) }
    }
}

impl From<IpAddr> for In6 {
    fn from(a: IpAddr) -> In6 {
        to_flow_space(a).into()
    }
}

impl From<Ipv4Addr> for In6 {
    fn from(a: Ipv4Addr) -> In6 {
        a.to_ipv6_mapped().into()
    }
}

impl In6 {
    pub fn to_ipv6(self) -> Ipv6Addr {
        let mut o = [0u8; 16];
        for (i, w) in self.w.iter().enumerate() {
            o[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
        }
        Ipv6Addr::from(o)
    }

    /// The address in its own family: IPv4-mapped ones as IPv4.
    pub fn to_ip(self) -> IpAddr {
        from_flow_space(self.to_ipv6())
    }
}

/// `struct ferry_nsh_result`: what `ferry_nsh_probe` (elements.bpf.c)
/// writes in front of a frame, `ferry_parse_nsh`'s answer, for the
/// differential test against ferry-wire's NSH parser.
pub type NshParseResult = crate::abi::gen::ferry_nsh_result;
const _: () = assert!(std::mem::size_of::<NshParseResult>() == 16);
/// `FERRY_NSH_IN_ETHERNET`, `FERRY_NSH_IN_VXLAN_GPE`.
pub const NSH_IN_ETHERNET: u8 = 1;
pub const NSH_IN_VXLAN_GPE: u8 = 2;

impl NshParseResult {
    /// Reads one from the first bytes of a test run's output.
    pub fn from_bytes(b: &[u8]) -> Option<NshParseResult> {
        let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
        Some(NshParseResult {
            ok: b[0],
            encap: b[1],
            md_type: b[2],
            next_proto: b[3],
            ttl: b[4],
            si: b[5],
            oam: b[6],
            hdr_len: b[7],
            spi: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            nsh_off: u16::from_ne_bytes([b[12], b[13]]),
            _pad: 0,
        })
    }

    /// What `ferry_nsh_probe` must answer for `frame`, by ferry-wire's
    /// parsers: an NSH header after Ethernet, or after VXLAN-GPE (next
    /// protocol NSH) over IPv4/UDP port 4790; all zero when there is none.
    pub fn of_frame(frame: &[u8]) -> NshParseResult {
        Self::of_frame_or_none(frame).unwrap_or_default()
    }

    fn of_frame_or_none(frame: &[u8]) -> Option<NshParseResult> {
        let f = flow::parse(frame).ok()?;
        let (encap, at) = if f.ethertype == nsh::ETHERTYPE_NSH {
            (NSH_IN_ETHERNET, 14)
        } else if f.is_ipv4() && f.proto == 17 && f.dport == vxlan_gpe::UDP_PORT {
            let at = f.l4_offset? + 8;
            let gpe = vxlan_gpe::VxlanGpePacket::new_checked(&frame[at..]).ok()?;
            if gpe.next_protocol() != vxlan_gpe::next_proto::NSH {
                return None;
            }
            (NSH_IN_VXLAN_GPE, at + vxlan_gpe::VXLAN_GPE_LEN)
        } else {
            return None;
        };
        let Ok(p) = nsh::NshPacket::new_checked(&frame[at..]) else {
            return Some(NshParseResult { encap, ..Default::default() });
        };
        Some(NshParseResult {
            ok: 1,
            encap,
            md_type: p.md_type(),
            next_proto: p.next_protocol(),
            ttl: p.ttl(),
            si: p.si(),
            oam: p.oam() as u8,
            hdr_len: p.header_len() as u8,
            spi: p.spi(),
            nsh_off: at as u16,
            _pad: 0,
        })
    }
}

// SAFETY: plain-old-data, no padding, every bit pattern is valid.
unsafe impl aya::Pod for Verdicts {}
unsafe impl aya::Pod for In6 {}
unsafe impl aya::Pod for GenConfig {}
unsafe impl aya::Pod for GenState {}
