//! Packet-set definitions: which header fields, on which port, make two
//! packets belong to the same set (NFOS §4.3, Listing 1).
//!
//! A rule per port lists fields in order; a packet's [`SetKey`] is the
//! fields' bytes in that order, big-endian, exactly as a NIC feeds them to
//! its Toeplitz hash. Two ways to make both directions of a flow one set:
//! * **per port, swapped** (NFOS's two-NIC form): port 0 lists
//!   `[src_ip, dst_ip, src_port, dst_port]`, port 1 lists
//!   `[dst_ip, src_ip, dst_port, src_port]`; a reply on port 1 then yields
//!   the same bytes as the request on port 0;
//! * **symmetric** on one port: each source field and its destination
//!   counterpart are put in a canonical order (the smaller endpoint first),
//!   so `a -> b` and `b -> a` yield the same key.
//!
//! Packets that match no rule (another port, another protocol, a frame
//! without the needed headers) are *orphans*.

use std::fmt;
use std::hash::{Hash, Hasher};

use ferry_wire::prefix::to_flow_space;
use ferry_wire::rss::{toeplitz, DEFAULT_RSS_KEY};
use ferry_wire::{five_tuple, EthernetFrame, L4Proto};

/// Longest key a rule may define, counting IPv4 addresses (4 bytes each):
/// the Toeplitz hash with a 40-byte key takes 36 bytes. An IPv6 frame's
/// addresses take 16 bytes each, so its key may be longer; it is hashed
/// on its first 36 bytes (equal keys still hash equally) and compared
/// whole.
pub const MAX_KEY_LEN: usize = 36;
/// Longest key of any frame: every field, IPv6 addresses included.
const MAX_FRAME_KEY_LEN: usize = 6 + 6 + 16 + 16 + 1 + 2 + 2;

/// A header field a packet set can be defined on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    SrcMac,
    DstMac,
    SrcIp,
    DstIp,
    IpProto,
    SrcPort,
    DstPort,
}

impl Field {
    /// Bytes the field adds to an IPv4 frame's key (IPv6 addresses: 16).
    pub fn width(self) -> usize {
        match self {
            Field::SrcMac | Field::DstMac => 6,
            Field::SrcIp | Field::DstIp => 4,
            Field::IpProto => 1,
            Field::SrcPort | Field::DstPort => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Field::SrcMac => "src_mac",
            Field::DstMac => "dst_mac",
            Field::SrcIp => "src_ip",
            Field::DstIp => "dst_ip",
            Field::IpProto => "ip_proto",
            Field::SrcPort => "src_port",
            Field::DstPort => "dst_port",
        }
    }

    /// The same field of the other endpoint (`IpProto` has none).
    pub fn counterpart(self) -> Option<Field> {
        match self {
            Field::SrcMac => Some(Field::DstMac),
            Field::DstMac => Some(Field::SrcMac),
            Field::SrcIp => Some(Field::DstIp),
            Field::DstIp => Some(Field::SrcIp),
            Field::SrcPort => Some(Field::DstPort),
            Field::DstPort => Some(Field::SrcPort),
            Field::IpProto => None,
        }
    }

    fn needs_ipv4(self) -> bool {
        !matches!(self, Field::SrcMac | Field::DstMac)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The packet-set rule of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRule {
    pub port: u16,
    /// Only packets of this L4 protocol form sets (`None`: any IPv4, or
    /// any frame when the fields are MACs only).
    pub protocol: Option<L4Proto>,
    /// The fields, in key order.
    pub fields: Vec<Field>,
    /// Both directions of a flow on this port are one set.
    pub symmetric: bool,
}

impl PortRule {
    /// True when the rule orders a destination field before its source
    /// counterpart (the second port of NFOS's two-NIC form).
    pub fn is_swapped(&self) -> bool {
        self.fields.iter().enumerate().any(|(i, f)| {
            matches!(f, Field::DstMac | Field::DstIp | Field::DstPort)
                && f.counterpart().is_some_and(|c| self.fields[i..].contains(&c))
        })
    }
}

/// Invalid packet-set definitions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketSetError {
    #[error("port {port}: a packet-set rule needs at least one field")]
    NoFields { port: u16 },
    #[error("port {port}: field {field} is listed twice")]
    DuplicateField { port: u16, field: Field },
    #[error("port {port}: the fields need {len} key bytes, more than the {max} a Toeplitz hash takes")]
    KeyTooLong { port: u16, len: usize, max: usize },
    #[error("port {port}: a symmetric rule lists {field} without {counterpart}")]
    UnpairedSymmetricField { port: u16, field: Field, counterpart: Field },
    #[error("port {port} has two rules")]
    DuplicatePort { port: u16 },
}

/// Which packets form sets, per port. An empty definition makes every
/// packet an orphan (NFs whose state is all aggregate, like a NAT).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketSetDef {
    rules: Vec<PortRule>,
}

impl PacketSetDef {
    pub fn new(rules: Vec<PortRule>) -> Result<PacketSetDef, PacketSetError> {
        for (i, rule) in rules.iter().enumerate() {
            validate(rule)?;
            if rules[..i].iter().any(|r| r.port == rule.port) {
                return Err(PacketSetError::DuplicatePort { port: rule.port });
            }
        }
        Ok(PacketSetDef { rules })
    }

    /// No packet sets: every packet is an orphan.
    pub fn none() -> PacketSetDef {
        PacketSetDef::default()
    }

    pub fn rules(&self) -> &[PortRule] {
        &self.rules
    }

    /// The set `frame`, received on `port`, belongs to; `None` for an
    /// orphan. Never panics.
    pub fn classify(&self, port: u16, frame: &[u8]) -> Option<SetKey> {
        let rule = self.rules.iter().find(|r| r.port == port)?;
        let headers = Headers::parse(frame, rule)?;
        Some(headers.key(rule))
    }
}

fn validate(rule: &PortRule) -> Result<(), PacketSetError> {
    let port = rule.port;
    if rule.fields.is_empty() {
        return Err(PacketSetError::NoFields { port });
    }
    for (i, field) in rule.fields.iter().enumerate() {
        if rule.fields[..i].contains(field) {
            return Err(PacketSetError::DuplicateField { port, field: *field });
        }
        if rule.symmetric {
            if let Some(counterpart) = field.counterpart() {
                if !rule.fields.contains(&counterpart) {
                    return Err(PacketSetError::UnpairedSymmetricField { port, field: *field, counterpart });
                }
            }
        }
    }
    let len: usize = rule.fields.iter().map(|f| f.width()).sum();
    if len > MAX_KEY_LEN {
        return Err(PacketSetError::KeyTooLong { port, len, max: MAX_KEY_LEN });
    }
    Ok(())
}

/// The field values of one frame.
struct Headers {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    /// Addresses in the flow key's 128-bit space (IPv4 mapped).
    src_ip: [u8; 16],
    dst_ip: [u8; 16],
    /// The key takes the whole address (IPv6) or its last 4 bytes.
    ipv6: bool,
    ip_proto: u8,
    src_port: [u8; 2],
    dst_port: [u8; 2],
}

impl Headers {
    fn parse(frame: &[u8], rule: &PortRule) -> Option<Headers> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        let mut headers = Headers {
            src_mac: eth.src(),
            dst_mac: eth.dst(),
            src_ip: [0; 16],
            dst_ip: [0; 16],
            ipv6: false,
            ip_proto: 0,
            src_port: [0; 2],
            dst_port: [0; 2],
        };
        if rule.protocol.is_some() || rule.fields.iter().any(|f| f.needs_ipv4()) {
            let tuple = five_tuple(frame)?;
            if rule.protocol.is_some_and(|p| p != tuple.proto) {
                return None;
            }
            headers.ipv6 = tuple.src_ip.is_ipv6();
            headers.src_ip = to_flow_space(tuple.src_ip).octets();
            headers.dst_ip = to_flow_space(tuple.dst_ip).octets();
            headers.ip_proto = tuple.protocol();
            headers.src_port = tuple.src_port.to_be_bytes();
            headers.dst_port = tuple.dst_port.to_be_bytes();
        }
        Some(headers)
    }

    fn bytes(&self, field: Field) -> &[u8] {
        match field {
            Field::SrcMac => &self.src_mac,
            Field::DstMac => &self.dst_mac,
            Field::SrcIp => &self.src_ip[self.ip_skip()..],
            Field::DstIp => &self.dst_ip[self.ip_skip()..],
            Field::IpProto => std::slice::from_ref(&self.ip_proto),
            Field::SrcPort => &self.src_port,
            Field::DstPort => &self.dst_port,
        }
    }

    /// The bytes of the 128-bit address the key leaves out.
    fn ip_skip(&self) -> usize {
        if self.ipv6 {
            0
        } else {
            12
        }
    }

    fn key(&self, rule: &PortRule) -> SetKey {
        let forward = SetKey::from_fields(rule.fields.iter().map(|f| self.bytes(*f)));
        if !rule.symmetric {
            return forward.hashed();
        }
        let backward = SetKey::from_fields(rule.fields.iter().map(|f| self.reversed_bytes(*f)));
        forward.min(backward).hashed()
    }

    fn reversed_bytes(&self, field: Field) -> &[u8] {
        match field.counterpart() {
            Some(counterpart) => self.bytes(counterpart),
            None => self.bytes(field),
        }
    }
}

/// Bytes a key holds: the longest key rounded up to whole words, so keys
/// compare a word at a time.
const KEY_STORAGE: usize = MAX_FRAME_KEY_LEN.div_ceil(8) * 8;

/// The identity of a packet set: its fields' bytes in rule order, and
/// their Toeplitz hash, computed once when the packet is classified (as a
/// NIC hands the RSS hash over with the packet). The dispatcher picks the
/// worker by it and the worker's set table hashes by it, so a set lookup
/// hashes nothing. Bytes past `len` are always zero.
#[derive(Clone, Copy)]
pub struct SetKey {
    len: u8,
    rss: u32,
    bytes: [u8; KEY_STORAGE],
}

impl SetKey {
    /// The key of these field values, without its hash yet.
    fn from_fields<'b>(fields: impl Iterator<Item = &'b [u8]>) -> SetKey {
        let mut key = SetKey { len: 0, rss: 0, bytes: [0; KEY_STORAGE] };
        for field in fields {
            let at = key.len as usize;
            key.bytes[at..at + field.len()].copy_from_slice(field);
            key.len += field.len() as u8;
        }
        key
    }

    fn hashed(mut self) -> SetKey {
        let bytes = self.as_bytes();
        self.rss = toeplitz(&DEFAULT_RSS_KEY, &bytes[..bytes.len().min(MAX_KEY_LEN)]);
        self
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The Toeplitz hash of the key under the Microsoft RSS key: what a NIC
    /// computes over the same fields.
    pub fn rss_hash(&self) -> u32 {
        self.rss
    }

    fn words(&self) -> [u64; KEY_STORAGE / 8] {
        std::array::from_fn(|i| u64::from_ne_bytes(self.bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
    }
}

/// Equal keys have equal hashes, so the hash rejects most unequal keys
/// before the bytes are compared (a word at a time, not by `memcmp`).
impl PartialEq for SetKey {
    fn eq(&self, other: &SetKey) -> bool {
        // XOR-folded rather than `==` on the arrays, which compiles to a
        // call to memcmp.
        let differing = self.words().iter().zip(other.words()).fold(0, |acc, (a, b)| acc | (a ^ b));
        self.rss == other.rss && self.len == other.len && differing == 0
    }
}

impl Eq for SetKey {}

/// By bytes (then length), not by hash: the symmetric form picks the
/// smaller of a key and its reverse, which must not depend on the hash.
impl Ord for SetKey {
    fn cmp(&self, other: &SetKey) -> std::cmp::Ordering {
        self.bytes.cmp(&other.bytes).then(self.len.cmp(&other.len))
    }
}

impl PartialOrd for SetKey {
    fn partial_cmp(&self, other: &SetKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Feeds the RSS hash only: it is a function of the bytes, so equal keys
/// hash equally, and the hasher just spreads it.
impl Hash for SetKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.rss);
    }
}

impl fmt::Debug for SetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SetKey(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests;
