//! Rust mirror of `bpf/include/ferry_abi.h`, the one definition of the
//! layouts shared with the BPF programs. Sizes are checked at compile time
//! against the same numbers the C header asserts.

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
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    pub packets: [u64; VERDICT_SLOTS],
    pub bytes: [u64; VERDICT_SLOTS],
}
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
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenConfig {
    pub ifindex: u32,
    pub stream: u16,
    pub stamp_offset: u16,
    pub sport_offset: u16,
    pub sport_min: u16,
    pub sport_count: u16,
    /// Read the clock every 2^clock_shift frames (0: every frame).
    pub clock_shift: u16,
    /// Pacing: at most one frame per interval (0: no pacing).
    pub interval_ns: u64,
    /// Frames to send in all (0: no limit).
    pub limit: u64,
    /// Bytes of `headers` written back into every frame before it goes
    /// out: 0, [`GEN_HEADERS_IP`], [`GEN_HEADERS_UDP`] or [`GEN_HEADERS_TCP`].
    pub headers_len: u32,
    pub _pad: u32,
    pub headers: [u8; GEN_HEADERS_MAX],
}
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
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenState {
    pub seq: u32,
    pub sport_idx: u32,
    pub now_ns: u64,
    pub next_ns: u64,
}
const _: () = assert!(std::mem::size_of::<GenState>() == 24);

/// `struct ferry_slow_meta`: what precedes every frame the stage pipeline
/// (every fast path, hybrid NFs' included) hands to an AF_XDP slow path;
/// read it from the XDP metadata area.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlowMeta {
    pub reason: u32,
    pub chain: u32,
    pub nf: u32,
    pub stage: u32,
}
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
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseResult {
    pub ok: u8,
    pub proto: u8,
    pub later_fragment: u8,
    pub is_ip4: u8,
    pub ethertype: u16,
    pub sport: u16,
    pub dport: u16,
    pub l4_off: u16,
    pub saddr: u32,
    pub daddr: u32,
}
const _: () = assert!(std::mem::size_of::<ParseResult>() == 20);

impl ParseResult {
    /// Reads one from the first bytes of a test run's output.
    pub fn from_bytes(b: &[u8]) -> Option<ParseResult> {
        let b: &[u8; 20] = b.get(..20)?.try_into().ok()?;
        let ne16 = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let ne32 = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(ParseResult {
            ok: b[0],
            proto: b[1],
            later_fragment: b[2],
            is_ip4: b[3],
            ethertype: ne16(4),
            sport: ne16(6),
            dport: ne16(8),
            l4_off: ne16(10),
            saddr: ne32(12),
            daddr: ne32(16),
        })
    }
}

/// `struct ferry_nsh_result`: what `ferry_nsh_probe` (elements.bpf.c)
/// writes in front of a frame, `ferry_parse_nsh`'s answer, for the
/// differential test against ferry-wire's NSH parser.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NshParseResult {
    pub ok: u8,
    /// `NSH_IN_*`, 0: no NSH header there.
    pub encap: u8,
    pub md_type: u8,
    pub next_proto: u8,
    pub ttl: u8,
    pub si: u8,
    pub oam: u8,
    /// Bytes.
    pub hdr_len: u8,
    /// Host order.
    pub spi: u32,
    pub nsh_off: u16,
    pub _pad: u16,
}
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
}

// SAFETY: plain-old-data, no padding, every bit pattern is valid.
unsafe impl aya::Pod for Verdicts {}
unsafe impl aya::Pod for GenConfig {}
unsafe impl aya::Pod for GenState {}
