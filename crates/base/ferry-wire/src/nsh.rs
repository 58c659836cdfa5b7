//! NSH, the Network Service Header (RFC 8300): a base header, a service
//! path header (SPI: which chain; SI: which hop, counting down from 255)
//! and context headers, MD type 1 (16 fixed bytes) or MD type 2 (variable
//! TLVs). Carried over Ethernet (ethertype [`ETHERTYPE_NSH`]) or over
//! VXLAN-GPE ([`crate::vxlan_gpe`]).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |Ver|O|U|    TTL    |   Length  |U|U|U|U|MD Type| Next Protocol |
//! |          Service Path Identifier (SPI)        | Service Index |
//! |                 Context headers (MD type 1: 16 bytes)  ...    |
//! ```

use crate::WireError;

/// EtherType of NSH over Ethernet.
pub const ETHERTYPE_NSH: u16 = 0x894f;
/// Base header + service path header.
pub const NSH_MIN_LEN: usize = 8;
/// An MD type 1 header: 8 + 16 bytes of fixed context.
pub const NSH_MD1_LEN: usize = 24;
/// TTL of a new header (RFC 8300 §2.2).
pub const DEFAULT_TTL: u8 = 63;
/// The first service index of a path.
pub const FIRST_SI: u8 = 255;
/// Largest SPI (24 bits).
pub const MAX_SPI: u32 = 0x00ff_ffff;

/// Next Protocol values (RFC 8300 §11.2.5).
pub mod next_proto {
    pub const IPV4: u8 = 0x1;
    pub const IPV6: u8 = 0x2;
    pub const ETHERNET: u8 = 0x3;
    pub const NSH: u8 = 0x4;
    pub const MPLS: u8 = 0x5;
}

/// MD types (RFC 8300 §11.2.4).
pub mod md_type {
    pub const TYPE1: u8 = 0x1;
    pub const TYPE2: u8 = 0x2;
}

mod field {
    pub const VER_O_TTL_LEN: core::ops::Range<usize> = 0..2;
    pub const MD_TYPE: usize = 2;
    pub const NEXT_PROTO: usize = 3;
    pub const SPI_SI: core::ops::Range<usize> = 4..8;
}

/// Zero-copy view of an NSH header and what follows it.
///
/// `new_checked` guarantees: version 0; a length of at least 8 bytes that
/// fits the buffer; MD type 1 with exactly 24 bytes, or MD type 2 whose
/// context headers (TLVs) tile the header exactly; a known next protocol.
#[derive(Debug, Clone)]
pub struct NshPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NshPacket<T> {
    /// Wraps without checks (for emitters).
    pub fn new_unchecked(buffer: T) -> Self {
        NshPacket { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = NshPacket { buffer };
        let have = p.buffer.as_ref().len();
        if have < NSH_MIN_LEN {
            return Err(WireError::Truncated { layer: "nsh", need: NSH_MIN_LEN, have });
        }
        if p.version() != 0 {
            return Err(WireError::BadLength { layer: "nsh", field: "version", value: p.version().into() });
        }
        let len = p.header_len();
        if len < NSH_MIN_LEN {
            return Err(WireError::BadLength { layer: "nsh", field: "length", value: len });
        }
        if have < len {
            return Err(WireError::Truncated { layer: "nsh context", need: len, have });
        }
        match p.md_type() {
            md_type::TYPE1 if len != NSH_MD1_LEN => {
                return Err(WireError::BadLength { layer: "nsh md type 1", field: "length", value: len })
            }
            md_type::TYPE1 => {}
            md_type::TYPE2 => check_tlvs(p.context())?,
            other => return Err(WireError::BadLength { layer: "nsh", field: "md type", value: other.into() }),
        }
        if !matches!(p.next_protocol(), 1..=5) {
            return Err(WireError::BadLength { layer: "nsh", field: "next protocol", value: p.next_protocol().into() });
        }
        Ok(p)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::VER_O_TTL_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn version(&self) -> u8 {
        (self.word0() >> 14) as u8
    }

    /// The O bit: an OAM packet.
    pub fn oam(&self) -> bool {
        self.word0() & 0x2000 != 0
    }

    pub fn ttl(&self) -> u8 {
        ((self.word0() >> 6) & 0x3f) as u8
    }

    /// The whole NSH header's length in bytes (the Length field counts
    /// 4-byte words).
    pub fn header_len(&self) -> usize {
        usize::from(self.word0() & 0x3f) * 4
    }

    pub fn md_type(&self) -> u8 {
        self.buffer.as_ref()[field::MD_TYPE] & 0x0f
    }

    pub fn next_protocol(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_PROTO]
    }

    fn spi_si(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::SPI_SI];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    pub fn spi(&self) -> u32 {
        self.spi_si() >> 8
    }

    pub fn si(&self) -> u8 {
        self.spi_si() as u8
    }

    /// The context headers: MD type 1's 16 bytes, or MD type 2's TLVs.
    pub fn context(&self) -> &[u8] {
        &self.buffer.as_ref()[NSH_MIN_LEN..self.header_len()]
    }

    /// What the header carries (its next protocol's packet).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NshPacket<T> {
    fn set_word0(&mut self, w: u16) {
        self.buffer.as_mut()[field::VER_O_TTL_LEN].copy_from_slice(&w.to_be_bytes());
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        let w = (self.word0() & !(0x3f << 6)) | (u16::from(ttl & 0x3f) << 6);
        self.set_word0(w);
    }

    pub fn set_si(&mut self, si: u8) {
        self.buffer.as_mut()[7] = si;
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.header_len();
        &mut self.buffer.as_mut()[len..]
    }
}

/// MD type 2 context headers must tile the context exactly: each is a
/// 4-byte TLV header (class 16 bits, type 8, length 7 bits in bytes)
/// followed by its value padded to 4 bytes.
fn check_tlvs(mut ctx: &[u8]) -> Result<(), WireError> {
    while !ctx.is_empty() {
        if ctx.len() < 4 {
            return Err(WireError::Truncated { layer: "nsh md type 2 tlv", need: 4, have: ctx.len() });
        }
        let len = usize::from(ctx[3] & 0x7f);
        let padded = 4 + len.div_ceil(4) * 4;
        if ctx.len() < padded {
            return Err(WireError::Truncated { layer: "nsh md type 2 tlv", need: padded, have: ctx.len() });
        }
        ctx = &ctx[padded..];
    }
    Ok(())
}

/// The context an NSH header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NshContext<'a> {
    /// MD type 1: 16 bytes, meaning defined by the chain.
    Md1([u8; 16]),
    /// MD type 2: context headers (TLVs), as bytes; empty is allowed.
    Md2(&'a [u8]),
}

/// An NSH header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NshRepr<'a> {
    pub oam: bool,
    pub ttl: u8,
    pub next_protocol: u8,
    pub spi: u32,
    pub si: u8,
    pub context: NshContext<'a>,
}

impl<'a> NshRepr<'a> {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a NshPacket<&'a T>) -> NshRepr<'a> {
        let context = match p.md_type() {
            md_type::TYPE1 => {
                let mut c = [0u8; 16];
                c.copy_from_slice(p.context());
                NshContext::Md1(c)
            }
            _ => NshContext::Md2(p.context()),
        };
        NshRepr { oam: p.oam(), ttl: p.ttl(), next_protocol: p.next_protocol(), spi: p.spi(), si: p.si(), context }
    }

    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        NSH_MIN_LEN
            + match self.context {
                NshContext::Md1(_) => 16,
                NshContext::Md2(c) => c.len(),
            }
    }

    /// Writes the header at the start of `buf` (at least `buffer_len()`
    /// bytes). The SPI is cut to 24 bits, the TTL to 6; MD type 2 context
    /// must be TLVs that tile it (`check` on parse), a multiple of 4 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let len = self.buffer_len();
        let (md, ctx): (u8, &[u8]) = match &self.context {
            NshContext::Md1(c) => (md_type::TYPE1, c),
            NshContext::Md2(c) => (md_type::TYPE2, c),
        };
        let w0 = (u16::from(self.oam) << 13) | (u16::from(self.ttl & 0x3f) << 6) | ((len / 4) as u16 & 0x3f);
        buf[0..2].copy_from_slice(&w0.to_be_bytes());
        buf[field::MD_TYPE] = md;
        buf[field::NEXT_PROTO] = self.next_protocol;
        buf[4..8].copy_from_slice(&(((self.spi & MAX_SPI) << 8) | u32::from(self.si)).to_be_bytes());
        buf[NSH_MIN_LEN..len].copy_from_slice(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MD type 1, TTL 63, length 6, next protocol IPv4, SPI 0x123456,
    /// SI 255, context 0x01..0x10; then 4 payload bytes.
    const MD1: [u8; 28] = [
        0x0f, 0xc6, 0x01, 0x01, 0x12, 0x34, 0x56, 0xff, //
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, //
        0xde, 0xad, 0xbe, 0xef,
    ];

    /// MD type 2, TTL 1, O bit, next protocol Ethernet, SPI 7, SI 3, one
    /// TLV (class 0x0100, type 0x01, 3 bytes 0xaa 0xbb 0xcc, padded).
    const MD2: [u8; 16] = [
        0x20, 0x44, 0x02, 0x03, 0x00, 0x00, 0x07, 0x03, //
        0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc, 0x00,
    ];

    #[test]
    fn md_type_1_parses_and_emits_the_same_bytes() {
        let p = NshPacket::new_checked(&MD1[..]).unwrap();
        assert_eq!((p.version(), p.oam(), p.ttl(), p.header_len()), (0, false, 63, 24));
        assert_eq!((p.md_type(), p.next_protocol(), p.spi(), p.si()), (1, next_proto::IPV4, 0x123456, 255));
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let r = NshRepr::parse(&p);
        assert_eq!(r.buffer_len(), 24);
        let mut out = [0u8; 24];
        r.emit(&mut out);
        assert_eq!(out, MD1[..24]);
    }

    #[test]
    fn md_type_2_parses_and_emits_the_same_bytes() {
        let p = NshPacket::new_checked(&MD2[..]).unwrap();
        assert_eq!((p.oam(), p.ttl(), p.header_len(), p.md_type()), (true, 1, 16, 2));
        assert_eq!((p.next_protocol(), p.spi(), p.si()), (next_proto::ETHERNET, 7, 3));
        let r = NshRepr::parse(&p);
        assert_eq!(r.context, NshContext::Md2(&MD2[8..]));
        let mut out = [0u8; 16];
        r.emit(&mut out);
        assert_eq!(out, MD2);
    }

    #[test]
    fn ttl_and_si_are_rewritten_in_place() {
        let mut b = MD1;
        let mut p = NshPacket::new_checked(&mut b[..]).unwrap();
        p.set_ttl(p.ttl() - 1);
        p.set_si(p.si() - 1);
        assert_eq!((p.ttl(), p.si(), p.spi(), p.header_len()), (62, 254, 0x123456, 24));
    }

    /// Each malformation, and what it is reported as.
    #[test]
    fn malformed_headers_are_refused() {
        let with = |i: usize, v: u8| {
            let mut b = MD1.to_vec();
            b[i] = v;
            b
        };
        let table: [(Vec<u8>, &str); 8] = [
            (MD1[..7].to_vec(), "nsh: truncated"),
            (with(0, 0x4f), "bad version 1"),
            (with(1, 0xc1), "bad length 4"),
            (with(1, 0xc7), "nsh md type 1: bad length 28"),
            (MD1[..20].to_vec(), "nsh context: truncated"),
            (with(2, 0x03), "bad md type 3"),
            (with(3, 0x09), "bad next protocol 9"),
            ([&MD2[..11], &[0x09], &MD2[12..]].concat(), "nsh md type 2 tlv: truncated"),
        ];
        for (bytes, want) in table {
            let e = NshPacket::new_checked(&bytes[..]).unwrap_err().to_string();
            assert!(e.contains(want), "{bytes:02x?}: {e} lacks {want:?}");
        }
    }

    proptest::proptest! {
        /// MD type 1 headers from any fields emit and parse back to them.
        #[test]
        fn md1_fields_round_trip(ttl in 0u8..64, spi in 0u32..=MAX_SPI, si in proptest::prelude::any::<u8>(),
                                 np in 1u8..=5, ctx in proptest::prelude::any::<[u8; 16]>(), oam in proptest::prelude::any::<bool>()) {
            let r = NshRepr { oam, ttl, next_protocol: np, spi, si, context: NshContext::Md1(ctx) };
            let mut buf = [0u8; NSH_MD1_LEN];
            r.emit(&mut buf);
            let p = NshPacket::new_checked(&buf[..]).expect("an emitted header views");
            proptest::prop_assert_eq!(NshRepr::parse(&p), r);
        }

        /// Whatever the bytes: no panic, and a header that views parses to
        /// a Repr that emits to the same header bytes.
        #[test]
        fn any_bytes_view_or_refuse_and_round_trip(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            if let Ok(p) = NshPacket::new_checked(&bytes[..]) {
                let (_, _, _, _) = (p.ttl(), p.spi(), p.si(), p.payload().len());
                let r = NshRepr::parse(&p);
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut out);
                // Reserved bits aside (U bits are zero when emitted).
                let mut want = bytes[..p.header_len()].to_vec();
                want[0] &= 0xef;
                want[2] &= 0x0f;
                proptest::prop_assert_eq!(out, want);
            }
        }
    }
}
