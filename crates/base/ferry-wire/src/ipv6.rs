//! IPv6 headers (RFC 8200) and the walk over their extension headers to
//! the upper-layer header.

use std::net::Ipv6Addr;

use crate::WireError;

/// Next-header values of the extension headers walked here, and of the
/// upper layers Ferry reads (RFC 8200 §4; ICMPv6: RFC 4443).
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT_HEADER: u8 = 59;
    pub const DESTINATION_OPTIONS: u8 = 60;
}

/// Length of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// The most extension headers [`walk_extensions`] follows before it calls
/// the packet malformed: the BPF side must bound its loop, and the two
/// parsers must agree.
pub const MAX_EXTENSION_HEADERS: usize = 4;

// Field offsets in the fixed header (RFC 8200 §3).
const PAYLOAD_LEN: usize = 4;
const NEXT_HEADER: usize = 6;
const HOP_LIMIT: usize = 7;
const SRC: usize = 8;
const DST: usize = 24;

/// Length of the fragment header (RFC 8200 §4.5), which has no length field.
const FRAGMENT_HEADER_LEN: usize = 8;

/// Zero-copy view of an IPv6 packet.
///
/// The buffer may extend past the packet (Ethernet padding); `new_checked`
/// guarantees `40 + payload_len() <= buffer.len()`, and
/// [`payload`](Self::payload) stops there. A payload length of 0 (a jumbo
/// payload's hop-by-hop option, RFC 2675) is taken literally: Ferry's
/// frames are never jumbograms.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps after checking the version and the payload length against the
    /// buffer.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let have = b.len();
        if have < IPV6_HEADER_LEN {
            return Err(WireError::Truncated { layer: "ipv6", need: IPV6_HEADER_LEN, have });
        }
        let version = b[0] >> 4;
        if version != 6 {
            return Err(WireError::BadIpv6Version(version));
        }
        let need = IPV6_HEADER_LEN + usize::from(u16::from_be_bytes([b[PAYLOAD_LEN], b[PAYLOAD_LEN + 1]]));
        if have < need {
            return Err(WireError::Truncated { layer: "ipv6 payload", need, have });
        }
        Ok(Ipv6Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn traffic_class(&self) -> u8 {
        let b = self.buffer.as_ref();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }

    /// Bytes after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[PAYLOAD_LEN], b[PAYLOAD_LEN + 1]])
    }

    /// The header after the fixed one: an extension header or the upper
    /// layer.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[NEXT_HEADER]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[SRC..SRC + 16])
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[DST..DST + 16])
    }

    /// The payload, up to the payload length (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[PAYLOAD_LEN..PAYLOAD_LEN + 2].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[NEXT_HEADER] = v;
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[HOP_LIMIT] = v;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[SRC..SRC + 16].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[DST..DST + 16].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = IPV6_HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[IPV6_HEADER_LEN..end]
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(b);
    Ipv6Addr::from(o)
}

/// The fixed header as values: what an emitter writes (flow label and
/// traffic class 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: u16,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Ipv6Repr {
        Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
        }
    }

    /// Writes the 40-byte header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let have = buf.len();
        let h = buf.get_mut(..IPV6_HEADER_LEN).ok_or(WireError::Truncated {
            layer: "ipv6",
            need: IPV6_HEADER_LEN,
            have,
        })?;
        h[..4].copy_from_slice(&[0x60, 0, 0, 0]);
        h[PAYLOAD_LEN..PAYLOAD_LEN + 2].copy_from_slice(&self.payload_len.to_be_bytes());
        h[NEXT_HEADER] = self.next_header;
        h[HOP_LIMIT] = self.hop_limit;
        h[SRC..SRC + 16].copy_from_slice(&self.src.octets());
        h[DST..DST + 16].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Where the extension headers end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol (or [`next_header::NO_NEXT_HEADER`]).
    pub proto: u8,
    /// Its offset in the IPv6 payload.
    pub offset: usize,
    /// A fragment header was passed: the packet is a fragment.
    pub fragment: bool,
    /// A fragment other than the first: no upper-layer header is here, and
    /// `offset` is where the fragment's data starts.
    pub later_fragment: bool,
}

/// Walks the extension headers of an IPv6 payload whose first header is
/// `first` (the fixed header's next header), to the upper layer.
///
/// Follows hop-by-hop options (only first, RFC 8200 §4.1), routing,
/// fragment and destination options headers, at most
/// [`MAX_EXTENSION_HEADERS`] of them; stops at the first other header (the
/// upper layer, or one it does not know) and at a non-first fragment.
/// Malformed: a header cut short by the payload, a hop-by-hop header not
/// first, more headers than the bound.
pub fn walk_extensions(first: u8, payload: &[u8]) -> Result<UpperLayer, WireError> {
    let mut at = UpperLayer { proto: first, offset: 0, fragment: false, later_fragment: false };
    for walked in 0..=MAX_EXTENSION_HEADERS {
        let len = match at.proto {
            next_header::HOP_BY_HOP if walked > 0 => {
                return Err(WireError::Ipv6Extension { header: at.proto, reason: "hop-by-hop options not first" })
            }
            next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DESTINATION_OPTIONS => {
                // Hdr Ext Len: 8-octet units after the first 8 (§4.3-4.6).
                let len_byte = ext_byte(payload, at.offset + 1)?;
                8 + usize::from(len_byte) * 8
            }
            next_header::FRAGMENT => FRAGMENT_HEADER_LEN,
            _ => return Ok(at),
        };
        if walked == MAX_EXTENSION_HEADERS {
            return Err(WireError::Ipv6Extension {
                header: at.proto,
                reason: "more extension headers than Ferry walks",
            });
        }
        let header = payload.get(at.offset..at.offset + len).ok_or(WireError::Truncated {
            layer: "ipv6 extension header",
            need: at.offset + len,
            have: payload.len(),
        })?;
        if at.proto == next_header::FRAGMENT {
            // Fragment Offset: the high 13 bits of bytes 2-3 (§4.5).
            let frag_offset = u16::from_be_bytes([header[2], header[3]]) >> 3;
            at.fragment = true;
            at.later_fragment = frag_offset != 0;
        }
        at.proto = header[0];
        at.offset += len;
        if at.later_fragment {
            return Ok(at);
        }
    }
    unreachable!("the loop returns by its last pass")
}

fn ext_byte(payload: &[u8], i: usize) -> Result<u8, WireError> {
    payload.get(i).copied().ok_or(WireError::Truncated {
        layer: "ipv6 extension header",
        need: i + 1,
        have: payload.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fixed_header() {
        let p = Ipv6Packet::new_checked(&UDP_PACKET[..]).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label(), p.payload_len()), (0, 0x12345, 12));
        assert_eq!((p.next_header(), p.hop_limit()), (next_header::UDP, 64));
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &UDP_PACKET[40..52]);
    }

    #[test]
    fn padding_is_not_payload() {
        let mut padded = UDP_PACKET.to_vec();
        padded.extend_from_slice(&[0xee; 6]);
        assert_eq!(Ipv6Packet::new_checked(&padded[..]).unwrap().payload(), &UDP_PACKET[40..52]);
    }

    #[test]
    fn rejects_short_buffers_and_other_versions() {
        assert!(matches!(Ipv6Packet::new_checked(&UDP_PACKET[..39]), Err(WireError::Truncated { layer: "ipv6", .. })));
        assert!(matches!(
            Ipv6Packet::new_checked(&UDP_PACKET[..51]),
            Err(WireError::Truncated { layer: "ipv6 payload", need: 52, have: 51 })
        ));
        let mut v4 = UDP_PACKET;
        v4[0] = 0x45;
        assert_eq!(Ipv6Packet::new_checked(&v4[..]).unwrap_err(), WireError::BadIpv6Version(4));
    }

    #[test]
    fn repr_round_trips() {
        let p = Ipv6Packet::new_checked(&UDP_PACKET[..]).unwrap();
        let repr = Ipv6Repr::parse(&p);
        let mut out = [0u8; 40];
        repr.emit(&mut out).unwrap();
        // The emitter writes no flow label.
        assert_eq!(out[4..], UDP_PACKET[4..40]);
        assert_eq!(out[..4], [0x60, 0, 0, 0]);
        assert!(repr.emit(&mut [0u8; 39]).is_err());
    }

    #[test]
    fn setters_write_in_place() {
        let mut b = UDP_PACKET;
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_hop_limit(1);
        p.set_dst_addr("fe80::1".parse().unwrap());
        assert_eq!((p.hop_limit(), p.dst_addr()), (1, "fe80::1".parse::<Ipv6Addr>().unwrap()));
        assert_eq!(b[24..40], [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn walks_hop_by_hop_routing_and_destination_options_to_tcp() {
        let at = walk_extensions(next_header::HOP_BY_HOP, &EXTENSIONS_TO_TCP).unwrap();
        assert_eq!(
            at,
            UpperLayer { proto: next_header::TCP, offset: 8 + 24 + 8, fragment: false, later_fragment: false }
        );
    }

    #[test]
    fn a_first_fragment_reaches_its_upper_layer_and_a_later_one_stops() {
        let first = walk_extensions(next_header::FRAGMENT, &FIRST_FRAGMENT).unwrap();
        assert_eq!(first, UpperLayer { proto: next_header::UDP, offset: 8, fragment: true, later_fragment: false });
        let later = walk_extensions(next_header::FRAGMENT, &LATER_FRAGMENT).unwrap();
        assert_eq!(later, UpperLayer { proto: next_header::UDP, offset: 8, fragment: true, later_fragment: true });
    }

    #[test]
    fn an_upper_layer_first_is_found_at_once() {
        let at = walk_extensions(next_header::ICMPV6, &[]).unwrap();
        assert_eq!(at, UpperLayer { proto: next_header::ICMPV6, offset: 0, fragment: false, later_fragment: false });
    }

    #[test]
    fn malformed_chains_of_headers() {
        // Cut short: the routing header claims 24 bytes.
        let e = walk_extensions(next_header::HOP_BY_HOP, &EXTENSIONS_TO_TCP[..20]).unwrap_err();
        assert!(matches!(e, WireError::Truncated { layer: "ipv6 extension header", need: 32, have: 20 }), "{e:?}");
        // No room for the length byte.
        assert!(walk_extensions(next_header::ROUTING, &[6]).is_err());
        // Hop-by-hop after another header.
        let mut hbh_second = EXTENSIONS_TO_TCP;
        hbh_second[8] = next_header::HOP_BY_HOP;
        let e = walk_extensions(next_header::HOP_BY_HOP, &hbh_second).unwrap_err();
        assert_eq!(e, WireError::Ipv6Extension { header: 0, reason: "hop-by-hop options not first" });
        // One header past the bound.
        let five: Vec<u8> = (0..5).flat_map(|_| [next_header::DESTINATION_OPTIONS, 0, 1, 4, 0, 0, 0, 0]).collect();
        let e = walk_extensions(next_header::DESTINATION_OPTIONS, &five).unwrap_err();
        assert!(matches!(e, WireError::Ipv6Extension { header: 60, .. }), "{e:?}");
        // Exactly the bound is fine.
        let mut four = five[..32].to_vec();
        four[24] = next_header::NO_NEXT_HEADER;
        let at = walk_extensions(next_header::DESTINATION_OPTIONS, &four).unwrap();
        assert_eq!((at.proto, at.offset), (next_header::NO_NEXT_HEADER, 32));
    }

    /// 2001:db8::1 -> 2001:db8::2, flow label 0x12345, UDP 1000 -> 53 with 4
    /// bytes of data (checksum left 0: not what this test is about).
    const UDP_PACKET: [u8; 52] = [
        0x60, 0x01, 0x23, 0x45, 0x00, 0x0c, 0x11, 0x40, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0x03, 0xe8, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];

    /// Hop-by-hop (8 bytes: a PadN option) -> routing (24 bytes: type 0
    /// header with one address) -> destination options (8 bytes) -> TCP.
    const EXTENSIONS_TO_TCP: [u8; 40] = [
        next_header::ROUTING,
        0,
        1,
        4,
        0,
        0,
        0,
        0, //
        next_header::DESTINATION_OPTIONS,
        2,
        0,
        1,
        0,
        0,
        0,
        0, //
        0x20,
        0x01,
        0x0d,
        0xb8,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0x03, //
        next_header::TCP,
        0,
        1,
        4,
        0,
        0,
        0,
        0,
    ];

    /// A fragment header, offset 0, more fragments (M = 1), id 7.
    const FIRST_FRAGMENT: [u8; 8] = [next_header::UDP, 0, 0x00, 0x01, 0, 0, 0, 7];
    /// A fragment header, offset 185 (1480 bytes), last fragment.
    const LATER_FRAGMENT: [u8; 8] = [next_header::UDP, 0, 0x05, 0xc8, 0, 0, 0, 7];
}
