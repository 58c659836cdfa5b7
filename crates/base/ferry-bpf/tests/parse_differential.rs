//! The BPF parser (`ferry_parse_l4`, run by `ferry_parse_probe`) and
//! ferry-wire's `flow::parse` are one parser written twice: an NF placed
//! in XDP must decide every frame as the same NF in user space does. This
//! holds the two to the same answer, field by field, on well-formed
//! frames of every shape they handle and on random mutations and
//! truncations of them.

mod common;

use common::privileged;
use ferry_bpf::abi::ParseResult;
use ferry_bpf::{test_run, LoadedXdp, Object};
use ferry_wire::flow;
use proptest::prelude::*;

const ETH: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

/// IPv4 header (no options) with `proto`, fragment field `frag` and room
/// for `l4_len` bytes.
fn ipv4(proto: u8, frag: u16, l4_len: usize) -> Vec<u8> {
    let total = (20 + l4_len) as u16;
    let mut h = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1];
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 1, 2]);
    h
}

fn with_eth(ethertype: u16, rest: &[u8]) -> Vec<u8> {
    let mut f = ETH.to_vec();
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(rest);
    f
}

const UDP: [u8; 16] = [0x03, 0xe8, 0x00, 0x35, 0x00, 0x10, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
const TCP: [u8; 24] =
    [0x03, 0xe8, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xff, 0xff, 0, 0, 0, 0, 2, 4, 5, 0xb4];
const ICMP: [u8; 8] = [8, 0, 0, 0, 0, 1, 0, 1];
const ICMPV6_ECHO: [u8; 8] = [128, 0, 0, 0, 0, 1, 0, 1];

/// IPv6 header (2001:db8::1 → 2001:db8::2) with first next header `nh`,
/// then `rest` (extension headers and upper layer), its payload length
/// covering `rest`.
fn ipv6(nh: u8, rest: &[u8]) -> Vec<u8> {
    let len = rest.len() as u16;
    let mut h = vec![0x60, 0, 0, 0, (len >> 8) as u8, len as u8, nh, 64];
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(rest);
    h
}

/// `parts` joined.
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// IPv6 frames: every extension header the walk follows, fragments first
/// and later, and upper layers with and without L4 fields.
fn ipv6_templates() -> Vec<Vec<u8>> {
    // Hop-by-hop (PadN to 8 bytes) → destination options → routing (type
    // 0 segments-left 0, 8 bytes) → upper layer.
    let hbh = |next: u8| [next, 0, 1, 4, 0, 0, 0, 0];
    let frag = |next: u8, offset: u16, more: bool| {
        let field = offset << 3 | u16::from(more);
        let [a, b] = field.to_be_bytes();
        [next, 0, a, b, 0, 0, 0, 7]
    };
    vec![
        with_eth(0x86dd, &ipv6(17, &UDP)),
        with_eth(0x86dd, &ipv6(6, &TCP)),
        with_eth(0x86dd, &ipv6(58, &ICMPV6_ECHO)),
        with_eth(0x86dd, &ipv6(0, &cat(&[&hbh(60), &hbh(43), &[17, 0, 0, 0, 0, 0, 0, 0], &UDP]))),
        with_eth(0x86dd, &ipv6(44, &cat(&[&frag(17, 0, true), &UDP]))),
        with_eth(0x86dd, &ipv6(44, &cat(&[&frag(17, 3, false), &UDP]))),
        with_eth(0x86dd, &ipv6(59, &[])),
        with_eth(0x86dd, &ipv6(50, &[0; 16])),
    ]
}

/// One frame of each shape the parsers handle; all well-formed but the
/// last [`MALFORMED_TEMPLATES`] (a third VLAN tag, an 802.1ad tag inside,
/// five IPv6 extension headers, an IPv4-mapped IPv6 source).
fn templates() -> Vec<Vec<u8>> {
    let v4 = |proto: u8, frag: u16, l4: &[u8]| {
        let mut ip = ipv4(proto, frag, l4.len());
        ip.extend_from_slice(l4);
        ip
    };
    let mut vlan = vec![0x00, 0x07, 0x08, 0x00];
    vlan.extend_from_slice(&v4(17, 0, &UDP));
    let mut ip6 = vec![0x60, 0, 0, 0, 0, 16, 17, 64];
    ip6.extend_from_slice(&[0; 32]);
    ip6.extend_from_slice(&UDP);
    let mut padded = with_eth(0x0800, &v4(17, 0, &UDP));
    padded.resize(80, 0);
    // A real first fragment: its UDP length (1000) covers the datagram.
    let mut first_fragment_udp = UDP;
    first_fragment_udp[4..6].copy_from_slice(&1000u16.to_be_bytes());
    let mut qinq_inner = vec![0x00, 0x07, 0x81, 0x00];
    qinq_inner.extend_from_slice(&vlan);
    let qinq_v6 = cat(&[&[0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x86, 0xdd], &ipv6(17, &UDP)]);
    let mut three_tags = vec![0x00, 0x07, 0x81, 0x00];
    three_tags.extend_from_slice(&qinq_inner);
    let s_tag_inside = cat(&[&[0x00, 0x07, 0x88, 0xa8], &vlan]);
    let mut all = vec![
        with_eth(0x0800, &v4(17, 0, &UDP)),
        with_eth(0x0800, &v4(6, 0, &TCP)),
        with_eth(0x0800, &v4(1, 0, &ICMP)),
        with_eth(0x0800, &v4(17, 0x2000, &UDP)),
        with_eth(0x0800, &v4(17, 0x0003, &UDP)),
        with_eth(0x0800, &v4(47, 0, &[0; 8])),
        with_eth(0x0800, &v4(17, 0x2000, &first_fragment_udp)),
        with_eth(0x8100, &vlan),
        with_eth(0x86dd, &ip6),
        with_eth(0x0806, &[0; 28]),
        padded,
        with_eth(0x88a8, &vlan),
        with_eth(0x8100, &qinq_inner),
        with_eth(0x88a8, &qinq_v6),
    ];
    all.extend(ipv6_templates());
    // At the bound: four extension headers; past it, five.
    let opts = |next: u8| [next, 0, 1, 4, 0, 0, 0, 0];
    let four: Vec<u8> = [opts(60), opts(60), opts(60), opts(17)].concat();
    all.push(with_eth(0x86dd, &ipv6(60, &cat(&[&four, &UDP]))));
    let five: Vec<u8> = [opts(60), opts(60), opts(60), opts(60), opts(17)].concat();
    let mut mapped = ipv6(17, &UDP);
    mapped[8..24].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]);
    all.extend([
        with_eth(0x88a8, &three_tags),
        with_eth(0x8100, &s_tag_inside),
        with_eth(0x86dd, &ipv6(60, &cat(&[&five, &UDP]))),
        with_eth(0x86dd, &mapped),
    ]);
    all
}

/// How many templates, at the end of [`templates`], are malformed.
const MALFORMED_TEMPLATES: usize = 4;

/// Runs the BPF parser on `frame` (at least 14 bytes: the kernel's test
/// run refuses shorter XDP input).
fn bpf_parse(probe: &LoadedXdp, frame: &[u8]) -> ParseResult {
    let out = test_run(probe.program_fd().unwrap(), frame, 1).expect("test run");
    assert_eq!(out.action, 2, "ferry_parse_probe returns XDP_PASS");
    ParseResult::from_bytes(&out.data).expect("the probe's metadata")
}

/// Both parsers' answers for `frame`, compared; a failure names the frame.
fn agree(probe: &LoadedXdp, frame: &[u8]) -> Result<(), TestCaseError> {
    let rust = flow::parse(frame);
    if frame.len() < 14 {
        prop_assert!(rust.is_err(), "a {}-byte frame parsed", frame.len());
        return Ok(());
    }
    let bpf = bpf_parse(probe, frame);
    match rust {
        Err(e) => prop_assert_eq!(bpf.ok, 0, "Rust says malformed ({}), BPF parsed: {:02x?}", e, frame),
        Ok(f) => {
            prop_assert_eq!(bpf.ok, 1, "Rust parsed {:?}, BPF says malformed: {:02x?}", f, frame);
            let got = bpf.to_flow().expect("ok is 1");
            prop_assert_eq!(got, f, "frame {:02x?}", frame);
        }
    }
    Ok(())
}

fn probe() -> LoadedXdp {
    LoadedXdp::load(Object::Elements, "ferry_parse_probe").expect("load ferry_parse_probe (verifier)")
}

#[test]
fn every_template_agrees_and_parses() {
    if !privileged() {
        return;
    }
    let probe = probe();
    let templates = templates();
    for (i, t) in templates.iter().enumerate() {
        assert_eq!(flow::parse(t).is_ok(), i < templates.len() - MALFORMED_TEMPLATES, "template {i}");
        agree(&probe, t).unwrap();
    }
}

#[test]
fn every_truncation_agrees() {
    if !privileged() {
        return;
    }
    let probe = probe();
    for t in templates() {
        for len in 0..=t.len() {
            agree(&probe, &t[..len]).unwrap();
        }
    }
}

/// Templates with up to four bytes edited (the headers hold the length
/// fields, so edits land in the first 96 bytes, IPv6 extension headers
/// included) and maybe cut short. An
/// edit overwrites a byte, or nudges it by a small amount so that length
/// fields land next to their bounds. One probe serves every case:
/// loading is the slow part.
#[test]
fn mutated_frames_agree() {
    if !privileged() {
        return;
    }
    let probe = probe();
    common::mutated_frames_agree(templates, 96, |f| agree(&probe, f));
}
