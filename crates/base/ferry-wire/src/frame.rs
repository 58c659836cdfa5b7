//! Whole-frame helpers for the traffic generator and sink: build a frame
//! (IPv4 or IPv6, by the tuple's addresses), find its 5-tuple and stamp,
//! rewrite the stamp and keep checksums valid.
//!
//! # Checksums of generated frames
//!
//! The BPF generator and the AF_XDP generator rewrite the stamp of every
//! packet, so [`build_frame`] emits IPv4 **UDP with checksum 0** ("not
//! computed", legal for UDP over IPv4, RFC 768): the stamp can then be
//! rewritten with no checksum work at all. IPv6 makes the UDP checksum
//! mandatory (RFC 8200 §8.1), so IPv6 UDP carries one, as TCP, ICMP and
//! ICMPv6 always do; after
//! rewriting their stamp call [`restamp`] (writes and fixes) or
//! [`fix_stamp_checksum`] (someone else wrote it) which apply the RFC 1624
//! incremental update over the 16 changed bytes. Both also keep a UDP
//! checksum valid if one was filled in with [`fill_l4_checksum`].

use std::net::IpAddr;

use crate::checksum;
use crate::ethernet::{ethertype, EthernetFrame, ETH_HEADER_LEN};
use crate::flow::IpVersion;
use crate::icmpv4::{icmp_type, Icmpv4Packet, ICMP_HEADER_LEN};
use crate::icmpv6::{icmpv6_type, Icmpv6Packet};
use crate::ipv4::{ip_proto, Ipv4Packet, Ipv4Repr, IPV4_MIN_HEADER_LEN};
use crate::ipv6::{next_header, walk_extensions, Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use crate::stamp::{Stamp, STAMP_LEN};
use crate::tcp::{tcp_flags, TcpPacket, TCP_MIN_HEADER_LEN};
use crate::udp::{UdpPacket, UDP_HEADER_LEN};
use crate::WireError;

/// Smallest Ethernet frame without FCS; shorter frames must be padded.
pub const MIN_FRAME_LEN: usize = 60;
/// Largest frame [`build_frame`] can describe (IPv4 total length is 16 bits).
pub const MAX_FRAME_LEN: usize = ETH_HEADER_LEN + 65535;
/// TTL (IPv4) and hop limit (IPv6) of generated frames (Linux's default).
pub const DEFAULT_TTL: u8 = 64;

/// The L4 protocol of a generated flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4Proto {
    Udp,
    Tcp,
    /// ICMP echo request (ICMPv6's in IPv6).
    Icmp,
}

impl L4Proto {
    /// The IPv4 protocol number.
    pub fn ip_proto(self) -> u8 {
        self.protocol(IpVersion::V4)
    }

    /// The protocol (IPv4) or next header (IPv6) number in `version`.
    pub fn protocol(self, version: IpVersion) -> u8 {
        match (self, version) {
            (L4Proto::Udp, _) => ip_proto::UDP,
            (L4Proto::Tcp, _) => ip_proto::TCP,
            (L4Proto::Icmp, IpVersion::V4) => ip_proto::ICMP,
            (L4Proto::Icmp, IpVersion::V6) => next_header::ICMPV6,
        }
    }

    /// L4 header length in generated frames.
    pub fn header_len(self) -> usize {
        match self {
            L4Proto::Udp => UDP_HEADER_LEN,
            L4Proto::Tcp => TCP_MIN_HEADER_LEN,
            L4Proto::Icmp => ICMP_HEADER_LEN,
        }
    }
}

/// A flow, IPv4 or IPv6 (both addresses of one family). For ICMP echo,
/// `src_port` is the echo identifier and `dst_port` is unused (built
/// frames carry sequence number 0; [`five_tuple`] reports `dst_port` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: L4Proto,
}

/// Layer-2 part and size of generated frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Ethernet frame length without FCS, e.g. 60 (the minimum) or 1514.
    pub frame_len: usize,
}

/// Offset of the stamp inside frames built by [`build_frame`]:
/// 14+20+8 for UDP and ICMP echo, 14+20+20 for TCP; 20 more in IPv6.
/// This is where the BPF generator writes it.
pub fn stamp_offset(version: IpVersion, proto: L4Proto) -> usize {
    ETH_HEADER_LEN + ip_header_len(version) + proto.header_len()
}

/// The IP header length of generated frames: no options or extensions.
pub fn ip_header_len(version: IpVersion) -> usize {
    match version {
        IpVersion::V4 => IPV4_MIN_HEADER_LEN,
        IpVersion::V6 => IPV6_HEADER_LEN,
    }
}

/// True when a frame of `frame_len` built for `proto` carries a stamp
/// (e.g. false for 60-byte TCP frames, whose payload is 6 bytes).
pub fn has_stamp_room(version: IpVersion, proto: L4Proto, frame_len: usize) -> bool {
    frame_len >= stamp_offset(version, proto) + STAMP_LEN
}

impl FiveTuple {
    /// The family of its addresses (the source's: [`build_frame`] refuses
    /// a tuple whose two differ).
    pub fn version(&self) -> IpVersion {
        if self.src_ip.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        }
    }

    /// Its protocol number in its family.
    pub fn protocol(&self) -> u8 {
        self.proto.protocol(self.version())
    }
}

/// Builds a complete valid frame into `out[..spec.frame_len]`: Ethernet II
/// (no VLAN), then IPv4 (no options, TTL 64, DF, ident 0, TOS 0) or IPv6
/// (no extension headers, hop limit 64, flow label 0), then
/// - UDP with checksum 0 in IPv4 (see the module docs), a valid one in
///   IPv6,
/// - TCP with seq 1, ack 0, flags PSH|ACK, window 65535, valid checksum,
/// - ICMP (ICMPv6) echo request with id `src_port`, seq 0, valid checksum,
///
/// and a zero payload, with the stamp written right after the L4 header when
/// there is room for it (see [`has_stamp_room`]). The IP length covers the
/// whole frame, so there is no Ethernet padding. Returns `frame_len`.
///
/// Errors: `frame_len` outside `MIN_FRAME_LEN..=MAX_FRAME_LEN`
/// ([`WireError::FrameLength`]; 60 covers every IPv4 header here, an IPv6
/// frame needs 62 for UDP or ICMPv6 and 74 for TCP), larger than `out`
/// ([`WireError::Truncated`]), or addresses of two families.
pub fn build_frame(
    spec: &FrameSpec,
    tuple: &FiveTuple,
    stamp: Option<&Stamp>,
    out: &mut [u8],
) -> Result<usize, WireError> {
    let len = spec.frame_len;
    if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
        return Err(WireError::FrameLength { len, min: MIN_FRAME_LEN, max: MAX_FRAME_LEN });
    }
    let have = out.len();
    let Some(f) = out.get_mut(..len) else {
        return Err(WireError::Truncated { layer: "frame buffer", need: len, have });
    };
    f.fill(0);

    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    eth.set_dst(spec.dst_mac);
    eth.set_src(spec.src_mac);
    let version = tuple.version();
    eth.set_outer_ethertype(match version {
        IpVersion::V4 => ethertype::IPV4,
        IpVersion::V6 => ethertype::IPV6,
    });

    let l3 = ETH_HEADER_LEN;
    let l4 = l3 + ip_header_len(version);
    if len < l4 + tuple.proto.header_len() {
        let min = l4 + tuple.proto.header_len();
        return Err(WireError::FrameLength { len, min, max: MAX_FRAME_LEN });
    }
    emit_ip_header(tuple, len - l4, &mut f[l3..l4])?;
    let seg = &mut f[l4..];
    if let Some(s) = stamp {
        // Returns false (writes nothing) when there is no room: documented.
        s.write(&mut seg[tuple.proto.header_len()..]);
    }
    emit_l4(tuple, seg);
    Ok(len)
}

/// The IP header of a generated frame whose IP payload is `payload_len`.
fn emit_ip_header(tuple: &FiveTuple, payload_len: usize, out: &mut [u8]) -> Result<(), WireError> {
    match (tuple.src_ip, tuple.dst_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Ipv4Repr {
            src,
            dst,
            protocol: tuple.protocol(),
            payload_len,
            ttl: DEFAULT_TTL,
            tos: 0,
            // RFC 6864: the ident of an atomic (DF, unfragmented) datagram
            // has no meaning, so a constant keeps frames reproducible.
            ident: 0,
            dont_frag: true,
        }
        .emit(out),
        (IpAddr::V6(src), IpAddr::V6(dst)) => Ipv6Repr {
            src,
            dst,
            next_header: tuple.protocol(),
            // Fits: len <= MAX_FRAME_LEN keeps it <= 65535 - 40.
            payload_len: payload_len as u16,
            hop_limit: DEFAULT_TTL,
        }
        .emit(out),
        _ => Err(WireError::MixedFamilies),
    }
}

/// The L4 header over `seg` (the whole IP payload, stamp included).
fn emit_l4(tuple: &FiveTuple, seg: &mut [u8]) {
    let (src, dst) = (tuple.src_ip, tuple.dst_ip);
    match (tuple.proto, src, dst) {
        (L4Proto::Udp, ..) => {
            let l4_len = seg.len();
            let mut u = UdpPacket::new_unchecked(seg);
            u.set_src_port(tuple.src_port);
            u.set_dst_port(tuple.dst_port);
            // Fits: len <= MAX_FRAME_LEN keeps l4_len <= 65535 - 20.
            u.set_len(l4_len as u16);
            u.set_checksum(0);
            if src.is_ipv6() {
                u.fill_checksum(src, dst);
            }
        }
        (L4Proto::Tcp, ..) => {
            let mut t = TcpPacket::new_unchecked(seg);
            t.set_src_port(tuple.src_port);
            t.set_dst_port(tuple.dst_port);
            t.set_seq_number(1);
            t.set_ack_number(0);
            t.set_header_len(TCP_MIN_HEADER_LEN);
            t.set_flags(tcp_flags::PSH | tcp_flags::ACK);
            t.set_window(0xffff);
            t.fill_checksum(src, dst);
        }
        (L4Proto::Icmp, IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut i = Icmpv6Packet::new_unchecked(seg);
            i.set_msg_type(icmpv6_type::ECHO_REQUEST);
            i.set_code(0);
            i.set_echo_ident(tuple.src_port);
            i.set_echo_seq(0);
            i.fill_checksum(src, dst);
        }
        (L4Proto::Icmp, ..) => {
            let mut i = Icmpv4Packet::new_unchecked(seg);
            i.set_msg_type(icmp_type::ECHO_REQUEST);
            i.set_code(0);
            i.set_echo_ident(tuple.src_port);
            i.set_echo_seq(0);
            i.fill_checksum();
        }
    }
}

/// Where the L4 segment of a frame is.
#[derive(Debug, Clone, Copy)]
struct L4Loc {
    proto: L4Proto,
    src: IpAddr,
    dst: IpAddr,
    /// Offset of the L4 header in the frame.
    off: usize,
    /// End of the L4 segment (the IP payload's end, or UDP length for UDP).
    end: usize,
    /// L4 header length.
    hl: usize,
    /// A first fragment: the L4 checksum covers data not in this frame.
    more_frags: bool,
}

impl L4Loc {
    fn payload_at(&self) -> usize {
        self.off + self.hl
    }

    fn checksum_at(&self) -> usize {
        self.off
            + match self.proto {
                L4Proto::Udp => 6,
                L4Proto::Tcp => 16,
                L4Proto::Icmp => 2,
            }
    }
}

/// Where the IP payload of a frame is: addresses, upper-layer protocol,
/// its offset and end, and whether it is a first fragment. Non-first
/// fragments are refused.
struct IpLoc {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    off: usize,
    end: usize,
    more_frags: bool,
}

fn locate_ip(frame: &[u8]) -> Result<IpLoc, WireError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3 = eth.header_len();
    match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(&frame[l3..])?;
            if ip.frag_offset() != 0 {
                return Err(WireError::Fragment { offset: ip.frag_offset() });
            }
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            let (off, end) = (l3 + ip.header_len(), l3 + ip.total_len());
            Ok(IpLoc { src, dst, protocol: ip.protocol(), off, end, more_frags: ip.more_frags() })
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(&frame[l3..])?;
            let upper = walk_extensions(ip.next_header(), ip.payload())?;
            if upper.later_fragment {
                return Err(WireError::Fragment { offset: upper.offset });
            }
            let (src, dst) = (ip.src_addr().into(), ip.dst_addr().into());
            let off = l3 + IPV6_HEADER_LEN + upper.offset;
            let end = l3 + IPV6_HEADER_LEN + usize::from(ip.payload_len());
            Ok(IpLoc { src, dst, protocol: upper.proto, off, end, more_frags: upper.fragment })
        }
        other => Err(WireError::UnsupportedEthertype(other)),
    }
}

/// Parses Ethernet (up to two tags) / IPv4 (any IHL) or IPv6 (extension
/// headers walked) / UDP|TCP|ICMP|ICMPv6. Does not verify checksums: the
/// sink's fast path does not want to pay for it.
fn locate(frame: &[u8]) -> Result<L4Loc, WireError> {
    let IpLoc { src, dst, protocol, off, end, more_frags } = locate_ip(frame)?;
    let seg = &frame[off..end];
    let (proto, hl, end) = match (protocol, src.is_ipv6()) {
        (ip_proto::UDP, _) => {
            let u = UdpPacket::new_checked(seg)?;
            (L4Proto::Udp, UDP_HEADER_LEN, off + u.len())
        }
        (ip_proto::TCP, _) => (L4Proto::Tcp, TcpPacket::new_checked(seg)?.header_len(), end),
        (ip_proto::ICMP, false) => {
            Icmpv4Packet::new_checked(seg)?;
            (L4Proto::Icmp, ICMP_HEADER_LEN, end)
        }
        (next_header::ICMPV6, true) => {
            Icmpv6Packet::new_checked(seg)?;
            (L4Proto::Icmp, ICMP_HEADER_LEN, end)
        }
        (p, _) => return Err(WireError::UnsupportedProtocol(p)),
    };
    Ok(L4Loc { proto, src, dst, off, end, hl, more_frags })
}

fn is_echo(frame: &[u8], loc: &L4Loc) -> bool {
    let t = frame[loc.off];
    match loc.src {
        IpAddr::V4(_) => matches!(t, icmp_type::ECHO_REQUEST | icmp_type::ECHO_REPLY),
        IpAddr::V6(_) => matches!(t, icmpv6_type::ECHO_REQUEST | icmpv6_type::ECHO_REPLY),
    }
}

/// The stamp right after the L4 header of an Ethernet (optional VLAN) /
/// IPv4 (any IHL) / UDP, TCP or ICMP echo (request or reply, so stamps
/// survive an echo responder) frame, if present within the L4 length and
/// its magic matches. Never panics.
pub fn find_stamp(frame: &[u8]) -> Option<Stamp> {
    let loc = locate(frame).ok()?;
    if loc.proto == L4Proto::Icmp && !is_echo(frame, &loc) {
        return None;
    }
    Stamp::read(frame.get(loc.payload_at()..loc.end)?)
}

/// The 5-tuple of an IPv4 or IPv6 UDP/TCP/ICMP(v6) frame, `None` for
/// anything else, including non-first fragments. For ICMP echo
/// request/reply `src_port` is the identifier; for other ICMP it is 0;
/// `dst_port` is 0 for all ICMP. Never panics.
pub fn five_tuple(frame: &[u8]) -> Option<FiveTuple> {
    let loc = locate(frame).ok()?;
    let seg = frame.get(loc.off..loc.end)?;
    let (src_port, dst_port) = match loc.proto {
        L4Proto::Udp | L4Proto::Tcp => (u16::from_be_bytes([seg[0], seg[1]]), u16::from_be_bytes([seg[2], seg[3]])),
        L4Proto::Icmp if is_echo(frame, &loc) => (u16::from_be_bytes([seg[4], seg[5]]), 0),
        L4Proto::Icmp => (0, 0),
    };
    Some(FiveTuple { src_ip: loc.src, dst_ip: loc.dst, src_port, dst_port, proto: loc.proto })
}

fn stamp_slot(loc: &L4Loc) -> Result<usize, WireError> {
    let at = loc.payload_at();
    let have = loc.end.saturating_sub(at);
    if have < STAMP_LEN {
        return Err(WireError::Truncated { layer: "stamp", need: STAMP_LEN, have });
    }
    Ok(at)
}

/// Applies the RFC 1624 update for the stamp slot changing from `old` to the
/// bytes now in the frame. The slot starts at an even offset from the L4
/// header (8 or a multiple of 4), so 16-bit words line up.
fn update_l4_checksum(frame: &mut [u8], loc: &L4Loc, at: usize, old: &[u8]) {
    let c = loc.checksum_at();
    let csum = u16::from_be_bytes([frame[c], frame[c + 1]]);
    if loc.proto == L4Proto::Udp && csum == 0 {
        return; // no checksum to keep valid
    }
    let mut new = checksum::update_bytes(csum, old, &frame[at..at + STAMP_LEN]);
    if loc.proto == L4Proto::Udp && new == 0 {
        new = 0xffff;
    }
    frame[c..c + 2].copy_from_slice(&new.to_be_bytes());
}

/// Writes `stamp` right after the L4 header and fixes the L4 checksum
/// incrementally (TCP, ICMP, and UDP unless its checksum is 0). Errors when
/// the frame does not parse or has no room for a stamp.
pub fn restamp(frame: &mut [u8], stamp: &Stamp) -> Result<(), WireError> {
    let loc = locate(frame)?;
    let at = stamp_slot(&loc)?;
    let mut old = [0u8; STAMP_LEN];
    old.copy_from_slice(&frame[at..at + STAMP_LEN]);
    stamp.write(&mut frame[at..at + STAMP_LEN]);
    update_l4_checksum(frame, &loc, at, &old);
    Ok(())
}

/// For frames whose stamp was rewritten by someone else (e.g. a copied
/// template): given the 16 bytes that were there before, fixes the L4
/// checksum incrementally so that the frame is valid again.
pub fn fix_stamp_checksum(frame: &mut [u8], old_stamp: &[u8; STAMP_LEN]) -> Result<(), WireError> {
    let loc = locate(frame)?;
    let at = stamp_slot(&loc)?;
    update_l4_checksum(frame, &loc, at, old_stamp);
    Ok(())
}

/// Computes the L4 checksum of a frame from scratch (UDP included, e.g. to
/// generate checksummed UDP). Errors for fragments (MF set), whose checksum
/// covers data this frame does not hold.
pub fn fill_l4_checksum(frame: &mut [u8]) -> Result<(), WireError> {
    let loc = locate(frame)?;
    if loc.more_frags {
        return Err(WireError::Fragment { offset: 0 });
    }
    let seg = &mut frame[loc.off..loc.end];
    match (loc.proto, loc.src, loc.dst) {
        (L4Proto::Udp, ..) => UdpPacket::new_unchecked(seg).fill_checksum(loc.src, loc.dst),
        (L4Proto::Tcp, ..) => TcpPacket::new_unchecked(seg).fill_checksum(loc.src, loc.dst),
        (L4Proto::Icmp, IpAddr::V6(s), IpAddr::V6(d)) => Icmpv6Packet::new_unchecked(seg).fill_checksum(s, d),
        (L4Proto::Icmp, ..) => Icmpv4Packet::new_unchecked(seg).fill_checksum(),
    }
    Ok(())
}

/// Verifies the IPv4 header checksum (IPv6 has none) and the L4 checksum
/// of a frame (a UDP checksum of 0 counts as valid in IPv4 only).
/// `Ok(false)` on a mismatch.
pub fn verify_checksums(frame: &[u8]) -> Result<bool, WireError> {
    let loc = locate(frame)?;
    if loc.more_frags {
        return Err(WireError::Fragment { offset: 0 });
    }
    let eth = EthernetFrame::new_checked(frame)?;
    if loc.src.is_ipv4() && !Ipv4Packet::new_checked(eth.payload())?.verify_checksum() {
        return Ok(false);
    }
    let seg = &frame[loc.off..loc.end];
    Ok(match (loc.proto, loc.src, loc.dst) {
        (L4Proto::Udp, ..) => UdpPacket::new_unchecked(seg).verify_checksum(loc.src, loc.dst),
        (L4Proto::Tcp, ..) => TcpPacket::new_unchecked(seg).verify_checksum(loc.src, loc.dst),
        (L4Proto::Icmp, IpAddr::V6(s), IpAddr::V6(d)) => Icmpv6Packet::new_unchecked(seg).verify_checksum(s, d),
        (L4Proto::Icmp, ..) => Icmpv4Packet::new_unchecked(seg).verify_checksum(),
    })
}
