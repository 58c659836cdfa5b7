//! ICMPv6 (RFC 4443), with echo accessors, and Neighbor Discovery's
//! neighbor solicitation and advertisement (RFC 4861 §4.3-4.4).

use std::net::Ipv6Addr;

use crate::checksum;
use crate::ipv6::next_header;
use crate::mac::MacAddr;
use crate::WireError;

/// ICMPv6 message types used here.
pub mod icmpv6_type {
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const NEIGHBOR_SOLICITATION: u8 = 135;
    pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
}

/// Length of the ICMPv6 header (type, code, checksum, 4 bytes of message
/// body that every type has).
pub const ICMPV6_HEADER_LEN: usize = 8;

/// Zero-copy view of an ICMPv6 message.
///
/// The buffer must be exactly the upper-layer payload: the checksum covers
/// the whole message, and the IPv6 pseudo-header (RFC 4443 §2.3), so
/// checking and filling it take the packet's addresses. `new_checked`
/// guarantees at least 8 bytes.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps without checks (for emitters); accessors may panic on a short
    /// buffer.
    pub fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let have = buffer.as_ref().len();
        if have < ICMPV6_HEADER_LEN {
            return Err(WireError::Truncated { layer: "icmpv6", need: ICMPV6_HEADER_LEN, have });
        }
        Ok(Icmpv6Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// Echo identifier (echo request and reply only, RFC 4443 §4).
    pub fn echo_ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// Echo sequence number (echo request and reply only).
    pub fn echo_seq(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// The message after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[ICMPV6_HEADER_LEN..]
    }

    /// Verifies the checksum: the message and the pseudo-header of a packet
    /// from `src` to `dst` sum to all ones (RFC 4443 §2.3).
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        checksum::add(self.pseudo_header(src, dst), checksum::ones_sum(self.buffer.as_ref())) == 0xffff
    }

    fn pseudo_header(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        checksum::pseudo_header_v6(src, dst, next_header::ICMPV6, self.buffer.as_ref().len() as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[6..8].copy_from_slice(&v.to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[ICMPV6_HEADER_LEN..]
    }

    /// Recomputes the checksum over the message and the pseudo-header of a
    /// packet from `src` to `dst`.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let sum = checksum::add(self.pseudo_header(src, dst), checksum::ones_sum(self.buffer.as_ref()));
        self.set_checksum(!sum);
    }
}

// Neighbor Discovery (RFC 4861).

/// All nodes on the link, ff02::1 (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The solicited-node multicast address of `target`: ff02::1:ff00:0/104
/// and its low 24 bits (RFC 4291 §2.7.1), where solicitations for it go.
pub fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let low24 = u128::from(target) & 0xff_ffff;
    Ipv6Addr::from(u128::from(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0)) | low24)
}

/// The target address follows the 4-byte flags/reserved word (§4.3, §4.4).
const ND_TARGET: usize = 8;
/// Where a solicitation's or advertisement's options start.
const ND_OPTIONS: usize = 24;
/// Advertisement flags, in the first byte after the header (§4.4).
const ND_ROUTER: u8 = 0x80;
const ND_SOLICITED: u8 = 0x40;
const ND_OVERRIDE: u8 = 0x20;
/// Option types (§4.6.1) and the length of a link-layer address option for
/// Ethernet, in 8-octet units.
const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
const OPT_LLADDR_UNITS: u8 = 1;

/// A neighbor solicitation or advertisement, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpRepr {
    /// "Who has `target`?", with the sender's link-layer address when it
    /// has an address to send from (not during DAD, §4.3).
    Solicit { target: Ipv6Addr, source_lladdr: Option<MacAddr> },
    /// "`target` is at `target_lladdr`."
    Advert { router: bool, solicited: bool, override_: bool, target: Ipv6Addr, target_lladdr: Option<MacAddr> },
}

impl NdpRepr {
    /// Parses a solicitation or an advertisement. Malformed (RFC 4861
    /// §7.1.1-7.1.2): code not 0, shorter than 24 bytes, an option of
    /// length 0 or past the message. Unknown options are skipped.
    pub fn parse<T: AsRef<[u8]>>(p: &Icmpv6Packet<T>) -> Result<NdpRepr, WireError> {
        let b = p.buffer.as_ref();
        if p.code() != 0 {
            return Err(WireError::BadLength { layer: "ndp", field: "code", value: usize::from(p.code()) });
        }
        if b.len() < ND_OPTIONS {
            return Err(WireError::Truncated { layer: "ndp", need: ND_OPTIONS, have: b.len() });
        }
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&b[ND_TARGET..ND_TARGET + 16]);
        let target = Ipv6Addr::from(octets);
        match p.msg_type() {
            icmpv6_type::NEIGHBOR_SOLICITATION => {
                Ok(NdpRepr::Solicit { target, source_lladdr: lladdr_option(&b[ND_OPTIONS..], OPT_SOURCE_LLADDR)? })
            }
            icmpv6_type::NEIGHBOR_ADVERTISEMENT => Ok(NdpRepr::Advert {
                router: b[4] & ND_ROUTER != 0,
                solicited: b[4] & ND_SOLICITED != 0,
                override_: b[4] & ND_OVERRIDE != 0,
                target,
                target_lladdr: lladdr_option(&b[ND_OPTIONS..], OPT_TARGET_LLADDR)?,
            }),
            other => Err(WireError::BadLength { layer: "ndp", field: "type", value: usize::from(other) }),
        }
    }

    /// The message's length once emitted.
    pub fn buffer_len(&self) -> usize {
        let lladdr = match self {
            NdpRepr::Solicit { source_lladdr, .. } => source_lladdr.is_some(),
            NdpRepr::Advert { target_lladdr, .. } => target_lladdr.is_some(),
        };
        ND_OPTIONS + if lladdr { 8 } else { 0 }
    }

    /// Writes the message (checksum 0: fill it with
    /// [`Icmpv6Packet::fill_checksum`] once the addresses are known) into
    /// the first [`buffer_len`](Self::buffer_len) bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let (need, have) = (self.buffer_len(), buf.len());
        let b = buf.get_mut(..need).ok_or(WireError::Truncated { layer: "ndp", need, have })?;
        b.fill(0);
        let (msg_type, target, option) = match *self {
            NdpRepr::Solicit { target, source_lladdr } => {
                (icmpv6_type::NEIGHBOR_SOLICITATION, target, source_lladdr.map(|m| (OPT_SOURCE_LLADDR, m)))
            }
            NdpRepr::Advert { router, solicited, override_, target, target_lladdr } => {
                b[4] = (if router { ND_ROUTER } else { 0 })
                    | (if solicited { ND_SOLICITED } else { 0 })
                    | (if override_ { ND_OVERRIDE } else { 0 });
                (icmpv6_type::NEIGHBOR_ADVERTISEMENT, target, target_lladdr.map(|m| (OPT_TARGET_LLADDR, m)))
            }
        };
        b[0] = msg_type;
        b[ND_TARGET..ND_TARGET + 16].copy_from_slice(&target.octets());
        if let Some((kind, mac)) = option {
            b[ND_OPTIONS] = kind;
            b[ND_OPTIONS + 1] = OPT_LLADDR_UNITS;
            b[ND_OPTIONS + 2..ND_OPTIONS + 8].copy_from_slice(&mac.0);
        }
        Ok(())
    }
}

/// The Ethernet address in the first option of type `kind`, walking the
/// options' type-length chain (§4.6).
fn lladdr_option(mut opts: &[u8], kind: u8) -> Result<Option<MacAddr>, WireError> {
    while !opts.is_empty() {
        let (t, units) = match opts {
            [t, units, ..] => (*t, usize::from(*units)),
            _ => return Err(WireError::Truncated { layer: "ndp option", need: 2, have: opts.len() }),
        };
        let len = units * 8;
        if len == 0 {
            return Err(WireError::BadLength { layer: "ndp option", field: "length", value: 0 });
        }
        let opt = opts.get(..len).ok_or(WireError::Truncated { layer: "ndp option", need: len, have: opts.len() })?;
        if t == kind && len == 8 {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&opt[2..8]);
            return Ok(Some(MacAddr(mac)));
        }
        opts = &opts[len..];
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6::{walk_extensions, Ipv6Packet, IPV6_HEADER_LEN};

    const ETH: usize = 14;

    fn ip(frame: &[u8]) -> Ipv6Packet<&[u8]> {
        Ipv6Packet::new_checked(&frame[ETH..]).unwrap()
    }

    #[test]
    fn a_kernel_echo_request_and_its_reply_verify() {
        let p = ip(&PING6_REQUEST);
        let m = Icmpv6Packet::new_checked(p.payload()).unwrap();
        assert!(m.verify_checksum(p.src_addr(), p.dst_addr()));
        assert_eq!((m.msg_type(), m.code(), m.echo_ident(), m.echo_seq()), (icmpv6_type::ECHO_REQUEST, 0, 0x12e8, 1));
        assert_eq!(m.payload().len(), 8);

        // The reply: the same message, type 129, between the swapped
        // addresses: the kernel's answer byte for byte.
        let mut reply = p.payload().to_vec();
        let mut r = Icmpv6Packet::new_checked(&mut reply[..]).unwrap();
        r.set_msg_type(icmpv6_type::ECHO_REPLY);
        assert!(!r.verify_checksum(p.dst_addr(), p.src_addr()));
        r.fill_checksum(p.dst_addr(), p.src_addr());
        assert_eq!(reply, ip(&PING6_REPLY).payload());
    }

    #[test]
    fn a_checksum_covers_the_pseudo_header() {
        let p = ip(&PING6_REQUEST);
        let m = Icmpv6Packet::new_checked(p.payload()).unwrap();
        assert!(!m.verify_checksum(p.src_addr(), "2001:db8::c".parse().unwrap()));
    }

    #[test]
    fn a_kernel_neighbor_solicitation() {
        let p = ip(&NEIGHBOR_SOLICITATION);
        assert_eq!(p.hop_limit(), 255, "RFC 4861 §7.1.1: hop limit 255");
        let m = Icmpv6Packet::new_checked(p.payload()).unwrap();
        assert!(m.verify_checksum(p.src_addr(), p.dst_addr()));
        let repr = NdpRepr::parse(&m).unwrap();
        let mac = MacAddr([2, 0, 0, 0, 0, 0x0a]);
        assert_eq!(repr, NdpRepr::Solicit { target: "2001:db8::b".parse().unwrap(), source_lladdr: Some(mac) });
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out).unwrap();
        let mut emitted = Icmpv6Packet::new_checked(&mut out[..]).unwrap();
        emitted.fill_checksum(p.src_addr(), p.dst_addr());
        assert_eq!(out, p.payload());
    }

    #[test]
    fn a_kernel_neighbor_advertisement() {
        let p = ip(&NEIGHBOR_ADVERTISEMENT);
        let m = Icmpv6Packet::new_checked(p.payload()).unwrap();
        assert!(m.verify_checksum(p.src_addr(), p.dst_addr()));
        let repr = NdpRepr::parse(&m).unwrap();
        let want = NdpRepr::Advert {
            router: false,
            solicited: true,
            override_: true,
            target: "2001:db8::b".parse().unwrap(),
            target_lladdr: Some(MacAddr([2, 0, 0, 0, 0, 0x0b])),
        };
        assert_eq!(repr, want);
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out).unwrap();
        Icmpv6Packet::new_checked(&mut out[..]).unwrap().fill_checksum(p.src_addr(), p.dst_addr());
        assert_eq!(out, p.payload());
    }

    #[test]
    fn malformed_neighbor_messages() {
        let p = ip(&NEIGHBOR_SOLICITATION);
        let body = p.payload().to_vec();
        let parse = |b: &[u8]| NdpRepr::parse(&Icmpv6Packet::new_checked(b).unwrap());
        assert!(parse(&body[..23]).is_err(), "shorter than the target");
        let mut zero_len = body.clone();
        zero_len[25] = 0;
        assert!(parse(&zero_len).is_err(), "an option of length 0");
        let mut long = body.clone();
        long[25] = 2;
        assert!(parse(&long).is_err(), "an option past the message");
        let mut code = body.clone();
        code[1] = 1;
        assert!(parse(&code).is_err(), "code not 0");
        // Without options: no link-layer address, as in DAD.
        assert_eq!(
            parse(&body[..24]).unwrap(),
            NdpRepr::Solicit { target: "2001:db8::b".parse().unwrap(), source_lladdr: None }
        );
    }

    /// An MLDv2 report from the kernel: a hop-by-hop header (router alert)
    /// before ICMPv6, from the unspecified address.
    #[test]
    fn a_kernel_mld_report_walks_its_hop_by_hop_header() {
        let p = ip(&MLD_REPORT);
        let at = walk_extensions(p.next_header(), p.payload()).unwrap();
        assert_eq!((at.proto, at.offset, at.fragment), (next_header::ICMPV6, 8, false));
        let m = Icmpv6Packet::new_checked(&p.payload()[at.offset..]).unwrap();
        assert_eq!(m.msg_type(), 143);
        assert!(m.verify_checksum(p.src_addr(), p.dst_addr()));
        assert_eq!(IPV6_HEADER_LEN + usize::from(p.payload_len()), MLD_REPORT.len() - ETH);
    }

    include!("../testdata/linux_ipv6_frames.rs");
}
