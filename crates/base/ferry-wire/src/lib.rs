//! Packet views and builders for Ferry.
//!
//! Modelled on smoltcp's `wire` module: each protocol has a zero-copy view
//! `XxxPacket<T: AsRef<[u8]>>` over a byte buffer, plus a `Repr` where an
//! owned form is useful (ARP, IPv4).
//!
//! # Contract
//!
//! `XxxPacket::new_checked(buf)` validates every length the view relies on,
//! once. After it returns `Ok`, **no accessor or setter of that view
//! panics**, whatever the bytes are. `new_unchecked` skips the checks and is
//! meant for emitters that size the buffer themselves; its accessors may
//! panic on a buffer that is too short. Nothing in the per-packet path
//! allocates.
//!
//! Views check lengths, not checksums: each view has `verify_checksum` /
//! `fill_checksum`, and [`checksum`] has the RFC 1071 sum and the RFC 1624
//! incremental update.
//!
//! # Layout
//! - [`ethernet`]: Ethernet II with at most one 802.1Q tag.
//! - [`mac`]: the MAC address type and its one text parser.
//! - [`arp`]: Ethernet/IPv4 ARP.
//! - [`ipv4`], [`udp`], [`tcp`], [`icmpv4`].
//! - [`ipv6`] with its extension headers walked, and [`icmpv6`] with
//!   Neighbor Discovery's solicitation and advertisement.
//! - [`classify`]: the tenant classifier's rule table, which the XDP
//!   classifier and the `tenant-router` NF evaluate alike.
//! - [`flow`]: a frame parsed to its 5-tuple, the same parse as the BPF
//!   side's `ferry_parse_l4`.
//! - [`nat`]: the endpoints a NAT rewrites, with incremental checksums.
//! - [`rss`]: NIC receive-side scaling (Toeplitz), to predict a flow's queue.
//! - [`nsh`] (RFC 8300, MD types 1 and 2) and [`vxlan_gpe`], its UDP
//!   encapsulation.
//! - [`frame`]: the generator's frame builder and the sink's stamp and
//!   5-tuple lookup.
//! - [`stamp`]: the 16-byte payload stamp.
//!
//! # Example
//!
//! ```
//! use ferry_wire::{build_frame, find_stamp, five_tuple, FiveTuple, FrameSpec, L4Proto, Stamp};
//! use std::net::Ipv4Addr;
//!
//! let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
//! let tuple = FiveTuple {
//!     src_ip: Ipv4Addr::new(198, 18, 0, 1).into(),
//!     dst_ip: Ipv4Addr::new(198, 19, 0, 1).into(),
//!     src_port: 1024,
//!     dst_port: 9,
//!     proto: L4Proto::Udp,
//! };
//! let stamp = Stamp { stream: 0, seq: 42, tx_ns: 1 };
//! let mut buf = [0u8; 2048];
//! let len = build_frame(&spec, &tuple, Some(&stamp), &mut buf).unwrap();
//! assert_eq!(find_stamp(&buf[..len]), Some(stamp));
//! assert_eq!(five_tuple(&buf[..len]), Some(tuple));
//! ```

pub mod arp;
pub mod checksum;
pub mod classify;
mod error;
pub mod ethernet;
pub mod flow;
pub mod frame;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod mac;
pub mod mica;
pub mod nat;
pub mod nsh;
pub mod prefix;
pub mod rss;
pub mod stamp;
pub mod tcp;
pub mod udp;
pub mod vxlan_gpe;

pub use arp::{arp_op, ArpPacket, ArpRepr};
pub use error::WireError;
pub use ethernet::{ethertype, EthernetFrame};
pub use frame::{
    build_frame, fill_l4_checksum, find_stamp, five_tuple, fix_stamp_checksum, has_stamp_room, restamp, stamp_offset,
    verify_checksums, FiveTuple, FrameSpec, L4Proto, MAX_FRAME_LEN, MIN_FRAME_LEN,
};
pub use icmpv4::{icmp_type, Icmpv4Packet};
pub use icmpv6::{icmpv6_type, Icmpv6Packet, NdpRepr};
pub use ipv4::{ip_proto, Ipv4Packet, Ipv4Repr};
pub use ipv6::{next_header, Ipv6Packet, Ipv6Repr};
pub use mac::{MacAddr, MacError};
pub use prefix::IpPrefix;
pub use stamp::{Stamp, STAMP_LEN, STAMP_MAGIC};
pub use tcp::{tcp_flags, TcpPacket};
pub use udp::UdpPacket;
