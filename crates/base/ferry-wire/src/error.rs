//! The one error type of this crate.

/// Why a buffer could not be viewed, parsed or built.
///
/// Variants carry the layer and the numbers involved so that a counter name
/// or a log line can be derived without formatting strings on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before the header (or the length a header claims).
    #[error("{layer}: truncated, need {need} bytes, have {have}")]
    Truncated { layer: &'static str, need: usize, have: usize },
    /// A length field is impossible (e.g. IHL < 5, UDP length < 8, IPv4 total
    /// length shorter than its own header).
    #[error("{layer}: bad {field} {value}")]
    BadLength { layer: &'static str, field: &'static str, value: usize },
    /// The IP version nibble is not 4.
    #[error("ipv4: bad version {0}")]
    BadVersion(u8),
    /// The IP version nibble of an IPv6 header is not 6.
    #[error("ipv6: bad version {0}")]
    BadIpv6Version(u8),
    /// An IPv6 extension header chain Ferry does not follow (RFC 8200 §4).
    #[error("ipv6: extension header {header}: {reason}")]
    Ipv6Extension { header: u8, reason: &'static str },
    /// A checksum does not verify.
    #[error("{layer}: bad checksum")]
    BadChecksum { layer: &'static str },
    /// The EtherType (after the VLAN tags) is not one we handle, or is a
    /// tag Ferry does not unwrap.
    #[error("unsupported ethertype {0:#06x}")]
    UnsupportedEthertype(u16),
    /// The IPv4 protocol is not UDP, TCP or ICMP.
    #[error("unsupported IP protocol {0}")]
    UnsupportedProtocol(u8),
    /// An ARP packet that is not Ethernet/IPv4 (RFC 826 with hlen 6, plen 4).
    #[error("unsupported ARP format: htype {htype}, ptype {ptype:#06x}, hlen {hlen}, plen {plen}")]
    UnsupportedArp { htype: u16, ptype: u16, hlen: u8, plen: u8 },
    /// An IPv6 address that must not be on the wire there: an IPv4-mapped
    /// address (RFC 4291 §2.5.5.2) would match IPv4 rules in Ferry's one
    /// flow key.
    #[error("ipv6: IPv4-mapped address on the wire")]
    Ipv4MappedOnWire,
    /// A non-first fragment: it has no L4 header to look at. `offset`:
    /// IPv4's fragment offset in bytes; for IPv6, where the fragment's
    /// data starts in the IPv6 payload.
    #[error("non-first fragment (offset {offset} bytes)")]
    Fragment { offset: usize },
    /// A flow whose source and destination are of two address families.
    #[error("source and destination are of different IP versions")]
    MixedFamilies,
    /// A requested frame length is outside what the builder can produce.
    #[error("frame length {len} outside {min}..={max}")]
    FrameLength { len: usize, min: usize, max: usize },
}
