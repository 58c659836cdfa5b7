//! Frames and the datagrams inside them: ferry-wire's flow parser, the
//! header reprs, NSH and VXLAN-GPE, MICA batches.

use ferry_wire::flow::{self, Flow, IpVersion};
use ferry_wire::mica::{self, MicaBatch};
use ferry_wire::nsh::{NshPacket, NshRepr};
use ferry_wire::stamp::Stamp;
use ferry_wire::vxlan_gpe::{self, VxlanGpePacket};
use ferry_wire::{
    ethertype, ArpPacket, ArpRepr, EthernetFrame, Icmpv6Packet, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, NdpRepr,
};

/// A frame through `flow::parse`, then through each header view and repr
/// it names.
pub fn frame(data: &[u8]) {
    if let Ok(f) = flow::parse(data) {
        flow_holds(&f, data);
        reprs_round_trip(&f, data);
    }
}

/// What a parsed flow promises: offsets inside the frame, fields only
/// where their header was, addresses in the space of their family.
fn flow_holds(f: &Flow, data: &[u8]) {
    assert!(data.len() >= 14, "a {}-byte frame parsed", data.len());
    assert!(f.l3_offset <= data.len(), "l3 offset {} past {} bytes", f.l3_offset, data.len());
    assert!(f.inner_vlan.is_none() || f.outer_vlan.is_some(), "an inner VLAN without an outer one");
    if let Some(l4) = f.l4_offset {
        let min = match f.proto {
            6 => 20,
            17 | 1 | 58 => 8,
            p => panic!("an L4 offset for protocol {p}"),
        };
        assert!(l4 + min <= data.len(), "L4 header at {l4} (+{min}) past {} bytes", data.len());
        assert!(l4 > f.l3_offset, "L4 at {l4} before L3 at {}", f.l3_offset);
    }
    if f.later_fragment {
        assert!(f.fragment && f.l4_offset.is_none() && f.sport == 0 && f.dport == 0, "a later fragment with L4 fields");
    }
    match f.ip {
        None => assert!(
            f.src.is_unspecified() && f.dst.is_unspecified() && f.proto == 0 && f.l4_offset.is_none(),
            "IP fields without an IP header: {f:?}"
        ),
        Some(IpVersion::V4) => assert!(f.src.to_ipv4_mapped().is_some() && f.dst.to_ipv4_mapped().is_some()),
        Some(IpVersion::V6) => assert!(f.src.to_ipv4_mapped().is_none() && f.dst.to_ipv4_mapped().is_none()),
    }
    if !matches!(f.proto, 6 | 17) || f.l4_offset.is_none() {
        assert!(f.sport == 0 && f.dport == 0, "ports without a TCP or UDP header: {f:?}");
    }
}

/// Each header the flow names re-emits from its repr to what it parsed
/// from (the fields a repr holds: IPv4 options and the IPv6 flow label
/// are not among them).
fn reprs_round_trip(f: &Flow, data: &[u8]) {
    let eth = EthernetFrame::new_checked(data).expect("flow::parse took it");
    let l3 = &data[f.l3_offset..];
    match (f.ethertype, f.ip) {
        (ethertype::ARP, _) => {
            if let Ok(p) = ArpPacket::new_checked(l3) {
                let r = ArpRepr::parse(&p);
                let mut out = [0u8; 28];
                r.emit(&mut out).expect("28 bytes");
                assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&out[..]).expect("emitted")), r);
            }
        }
        (_, Some(IpVersion::V4)) => ipv4_round_trips(l3),
        (_, Some(IpVersion::V6)) => ipv6_round_trips(l3, f),
        _ => {}
    }
    let _ = eth.ethertype();
    if let Some(l4) = f.l4_offset.filter(|_| f.proto == 17) {
        // A Ferry stamp rides right after the UDP header.
        if let Some(s) = Stamp::read(&data[l4 + 8..]) {
            let mut out = [0u8; 16];
            assert!(s.write(&mut out));
            assert_eq!(Stamp::read(&out), Some(s));
        }
    }
}

fn ipv4_round_trips(l3: &[u8]) {
    let mut header = l3.to_vec();
    let Ok(mut p) = Ipv4Packet::new_checked(&mut header[..]) else { return };
    // The repr refuses a bad checksum; the fuzzer seldom finds one.
    p.fill_checksum();
    let Ok(r) = Ipv4Repr::parse(&p) else { return };
    let mut out = vec![0u8; 20 + r.payload_len];
    r.emit(&mut out).expect("room for the header");
    let again = Ipv4Repr::parse(&Ipv4Packet::new_checked(&out[..]).expect("emitted header")).expect("emitted repr");
    assert_eq!(again, r);
}

fn ipv6_round_trips(l3: &[u8], f: &Flow) {
    let p = Ipv6Packet::new_checked(l3).expect("flow::parse took it");
    let r = Ipv6Repr::parse(&p);
    let mut out = vec![0u8; 40 + usize::from(r.payload_len)];
    r.emit(&mut out).expect("room for the header");
    assert_eq!(out[4..40], l3[4..40], "bytes 4-40 re-emit");
    if f.proto == 58 {
        if let Some(l4) = f.l4_offset {
            let icmp = &l3[l4 - f.l3_offset..40 + usize::from(r.payload_len)];
            if let Ok(ndp) = Icmpv6Packet::new_checked(icmp).and_then(|p| NdpRepr::parse(&p)) {
                let mut out = vec![0u8; ndp.buffer_len()];
                ndp.emit(&mut out).expect("buffer_len bytes");
                let again = NdpRepr::parse(&Icmpv6Packet::new_checked(&out[..]).expect("emitted")).expect("emitted");
                assert_eq!(again, ndp);
            }
        }
    }
}

/// An NSH header (as received after Ethernet) and a VXLAN-GPE header (as
/// received after UDP): each either refused or viewed, and re-emitted
/// to the bytes it came from, reserved bits aside.
pub fn nsh(data: &[u8]) {
    if let Ok(p) = NshPacket::new_checked(data) {
        assert!(p.header_len() <= data.len() && p.header_len() >= 8, "header length {}", p.header_len());
        let r = NshRepr::parse(&p);
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        let mut want = data[..p.header_len()].to_vec();
        // The U bits (RFC 8300 2.2: unassigned, sent as zero).
        want[0] &= 0xef;
        want[2] &= 0x0f;
        assert_eq!(out, want, "NSH re-emits");
        assert_eq!(p.payload().len(), data.len() - p.header_len());
    }
    if let Ok(p) = VxlanGpePacket::new_checked(data) {
        assert_eq!(p.payload().len(), data.len() - 8);
        if let Some(vni) = p.vni() {
            let mut out = [0u8; 8];
            vxlan_gpe::emit(&mut out, vni, p.next_protocol());
            let mut want: [u8; 8] = data[..8].try_into().expect("8 bytes");
            // Reserved fields and flags other than I and P (RFC draft
            // ietf-nvo3-vxlan-gpe 3.2) are not kept.
            want[0] &= 0x0c;
            want[1..3].fill(0);
            want[7] = 0;
            assert_eq!(out, want, "VXLAN-GPE re-emits");
        }
    }
}

/// A MICA batch: either refused, or every request parsed within the
/// buffer and the batch re-emitted parses to the same requests.
pub fn mica(data: &[u8]) {
    let Ok(batch) = MicaBatch::new_checked(data) else { return };
    let Ok(requests) = batch.requests() else { return };
    let len = mica::batch_len(&requests);
    assert!(len <= data.len(), "{len} bytes of requests in a {}-byte batch", data.len());
    let mut out = vec![0u8; len];
    mica::emit_batch(&mut out, batch.magic(), &requests);
    let again = MicaBatch::new_checked(&out[..]).expect("emitted batch");
    assert_eq!(again.requests().expect("emitted requests"), requests);
}
