//! The BPF NSH parser (`ferry_parse_nsh`, and `ferry_parse_vxlan_gpe`
//! before it, run by `ferry_nsh_probe`) and ferry-wire's `NshPacket` /
//! `VxlanGpePacket` are one parser written twice: an SFF in XDP and the
//! tools in user space must agree on every frame. This holds the two to
//! the same answer, field by field, on headers of every kind (MD type 1,
//! MD type 2 with and without TLVs, over Ethernet and over VXLAN-GPE),
//! on the malformed ones RFC 8300 says to drop, and on random mutations
//! and truncations of them.

mod common;

use common::privileged;
use ferry_bpf::abi::NshParseResult;
use ferry_bpf::{test_run, LoadedXdp, Object};
use ferry_wire::nsh::{NshContext, NshRepr, ETHERTYPE_NSH};
use ferry_wire::vxlan_gpe;
use proptest::prelude::*;

const ETH: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
/// An inner IPv4/UDP packet for the NSH header to carry.
const INNER: [u8; 28] =
    [0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 2, 0x03, 0xe8, 0x00, 0x35, 0x00, 0x08, 0, 0];

fn nsh(context: NshContext, next: u8) -> Vec<u8> {
    let repr = NshRepr { oam: false, ttl: 63, next_protocol: next, spi: 0x12_3456, si: 254, context };
    let mut h = vec![0u8; repr.buffer_len()];
    repr.emit(&mut h);
    h.extend_from_slice(&INNER);
    h
}

fn over_ethernet(nsh: &[u8]) -> Vec<u8> {
    [&ETH[..], &ETHERTYPE_NSH.to_be_bytes(), nsh].concat()
}

/// NSH in VXLAN-GPE in UDP (port 4790) in IPv4 in Ethernet.
fn over_vxlan_gpe(nsh: &[u8]) -> Vec<u8> {
    let mut gpe = [0u8; 8];
    vxlan_gpe::emit(&mut gpe, 7, vxlan_gpe::next_proto::NSH);
    let udp_len = (8 + gpe.len() + nsh.len()) as u16;
    let total = 20 + udp_len;
    let ip = [0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 2, 2];
    let udp = [[0xc0, 0x00], vxlan_gpe::UDP_PORT.to_be_bytes(), udp_len.to_be_bytes(), [0, 0]].concat();
    [&ETH[..], &[0x08, 0x00], &ip, &udp, &gpe, nsh].concat()
}

/// Well-formed headers of each kind, then the malformed ones RFC 8300
/// drops (an unknown MD type, an unknown next protocol, a bad length,
/// a TLV past the header).
fn templates() -> Vec<Vec<u8>> {
    let tlvs: Vec<u8> = vec![0x01, 0x02, 0x03, 0x05, 1, 2, 3, 4, 5, 0, 0, 0, 0x01, 0x02, 0x04, 0x00];
    let md1 = nsh(NshContext::Md1([7; 16]), 1);
    let md2 = nsh(NshContext::Md2(&tlvs), 1);
    let empty_md2 = nsh(NshContext::Md2(&[]), 3);
    let mut unknown_md = md1.clone();
    unknown_md[2] = 3;
    let mut unknown_next = md1.clone();
    unknown_next[3] = 9;
    let mut short_md1 = md1.clone();
    short_md1[1] = (short_md1[1] & 0xc0) | 5;
    let mut tlv_past_end = md2.clone();
    tlv_past_end[8 + 3] = 0x0d;
    vec![
        over_ethernet(&md1),
        over_ethernet(&md2),
        over_ethernet(&empty_md2),
        over_vxlan_gpe(&md1),
        over_vxlan_gpe(&md2),
        over_ethernet(&unknown_md),
        over_ethernet(&unknown_next),
        over_ethernet(&short_md1),
        over_ethernet(&tlv_past_end),
    ]
}
const WELL_FORMED: usize = 5;

/// ferry-wire's answer: where the NSH header is (and how it came), if the
/// frame carries one, and what the probe should report: `ok` 0 for a
/// malformed header.
fn bpf_parse(probe: &LoadedXdp, frame: &[u8]) -> NshParseResult {
    let out = test_run(probe.program_fd().unwrap(), frame, 1).expect("test run");
    assert_eq!(out.action, 2, "ferry_nsh_probe returns XDP_PASS");
    NshParseResult::from_bytes(&out.data).expect("the probe's metadata")
}

fn agree(probe: &LoadedXdp, frame: &[u8]) -> Result<(), TestCaseError> {
    if frame.len() < 14 {
        return Ok(());
    }
    let want = NshParseResult::of_frame(frame);
    prop_assert_eq!(bpf_parse(probe, frame), want, "frame {:02x?}", frame);
    Ok(())
}

fn probe() -> LoadedXdp {
    LoadedXdp::load(Object::Elements, "ferry_nsh_probe").expect("load ferry_nsh_probe (verifier)")
}

#[test]
fn every_template_agrees() {
    if !privileged() {
        return;
    }
    let probe = probe();
    for (i, t) in templates().iter().enumerate() {
        let r = bpf_parse(&probe, t);
        assert_eq!(r.ok == 1, i < WELL_FORMED, "template {i}: {r:?}");
        agree(&probe, t).unwrap_or_else(|e| panic!("template {i}: {e}"));
    }
    let r = bpf_parse(&probe, &templates()[1]);
    assert_eq!((r.spi, r.si, r.ttl, r.md_type, r.hdr_len), (0x12_3456, 254, 63, 2, 24));
}

#[test]
fn mutated_and_truncated_frames_agree() {
    if !privileged() {
        return;
    }
    let probe = probe();
    common::mutated_frames_agree(templates, 110, |f| agree(&probe, f));
}
