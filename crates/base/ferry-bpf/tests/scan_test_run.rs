//! The payload-scan element (bpf/include/ferry_scan.h) in `ferry_pipeline`:
//! BPF_PROG_TEST_RUN tables for where a pattern lies (start, middle, end
//! of the 256-byte window, across it, past it, in TCP options, in
//! Ethernet padding) and for what is not scanned, then a differential
//! test against the payload-scan NF (crates/runtime/ferry-nf/src/payload_scan.rs)
//! on mutated frames: placement must not change a decision.

mod common;

use common::{mutated_frames_agree, privileged};
use ferry_bpf::pipeline::*;
use ferry_bpf::scan::{PlScan, SCAN_DROP, SCAN_PASS, SCAN_WINDOW};
use ferry_bpf::test_run;
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto};

const XDP_DROP: u32 = 1;
const XDP_TX: u32 = 3;
const LO: u32 = 1;
const PATTERNS: [&[u8]; 2] = [b"attack", &[0xde, 0xad, 0xbe, 0xef]];
/// Counter configs: frames in, frames on, matches.
const RX: u32 = 1;
const ON: u32 = 2;
const MATCHED: u32 = 3;

/// Counter, scan, counter, then XDP_TX: the scan's verdict is the
/// program's (drop, or TX for a frame that went on).
fn pipeline(action: u32) -> Pipeline {
    let mut p = Pipeline::load().expect("load the pipeline (verifier)");
    let patterns: Vec<Vec<u8>> = PATTERNS.iter().map(|p| p.to_vec()).collect();
    p.set_scan(1, &PlScan::new(&patterns, action, MATCHED).unwrap()).unwrap();
    p.set_forward(1, Forward { action: FWD_TX, ifindex: 0 }).unwrap();
    let el = |kind, config| Element { kind, config, nf: 1 };
    let chain = [
        el(ElementKind::Counter, RX),
        el(ElementKind::Scan, 1),
        el(ElementKind::Counter, ON),
        el(ElementKind::Forward, 1),
    ];
    p.deploy(7, LO, &chain).unwrap();
    p
}

/// An IPv4 frame of `proto` whose L4 payload is exactly `payload`.
fn frame(proto: L4Proto, payload: &[u8]) -> Vec<u8> {
    let at = 14 + 20 + proto.header_len();
    let len = at + payload.len();
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: len.max(60) };
    let t = FiveTuple { src_ip: [10, 0, 0, 1].into(), dst_ip: [10, 0, 0, 2].into(), src_port: 1, dst_port: 2, proto };
    let mut f = vec![0u8; spec.frame_len];
    build_frame(&spec, &t, None, &mut f).unwrap();
    // Shorter payloads: the IP total length says where the payload ends.
    let ip_len = (len - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    let csum = ferry_wire::checksum::checksum(&{
        let mut h = f[14..34].to_vec();
        h[10..12].fill(0);
        h
    });
    f[24..26].copy_from_slice(&csum.to_be_bytes());
    if proto == L4Proto::Udp {
        f[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    }
    f[at..len].copy_from_slice(payload);
    f
}

/// `filler` bytes, then `tail`.
fn after(filler: usize, tail: &[u8]) -> Vec<u8> {
    let mut v = vec![b'.'; filler];
    v.extend_from_slice(tail);
    v
}

fn run(p: &Pipeline, f: &[u8]) -> u32 {
    test_run(p.program().program_fd().unwrap(), f, 1).unwrap().action
}

#[test]
fn where_a_pattern_lies_decides() {
    if !privileged() {
        return;
    }
    let p = pipeline(SCAN_DROP);
    // TCP with 12 bytes of options (data offset 8): a pattern there is
    // header, not payload.
    let mut options = frame(L4Proto::Tcp, &after(12, b"...."));
    options[14 + 20 + 12] = 8 << 4;
    options[14 + 20 + 20..14 + 20 + 26].copy_from_slice(b"attack");
    let mut after_options = options.clone();
    after_options[14 + 20 + 32..14 + 20 + 36].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    // A pattern in Ethernet padding, past the IP total length.
    let mut padded = frame(L4Proto::Udp, b"hi");
    padded.extend_from_slice(b"attack");
    let mut fragment = frame(L4Proto::Udp, b"peace");
    fragment[20] = 0x20;
    let rows: Vec<(&str, Vec<u8>, u32)> = vec![
        ("at the start", frame(L4Proto::Udp, b"attack at dawn"), XDP_DROP),
        ("in the middle, tcp", frame(L4Proto::Tcp, &after(100, b"attack!")), XDP_DROP),
        ("the other pattern", frame(L4Proto::Udp, &after(7, &[0xde, 0xad, 0xbe, 0xef])), XDP_DROP),
        ("ending at the window's end", frame(L4Proto::Udp, &after(SCAN_WINDOW - 6, b"attack")), XDP_DROP),
        ("across the window's end", frame(L4Proto::Udp, &after(SCAN_WINDOW - 3, b"attack")), XDP_TX),
        ("past the window", frame(L4Proto::Udp, &after(400, b"attack")), XDP_TX),
        ("none", frame(L4Proto::Udp, &after(300, b"peace")), XDP_TX),
        ("shorter than a pattern", frame(L4Proto::Udp, b"att"), XDP_TX),
        ("empty payload", frame(L4Proto::Udp, b""), XDP_TX),
        ("in TCP options", options, XDP_TX),
        ("right after TCP options", after_options, XDP_DROP),
        ("in Ethernet padding", padded, XDP_TX),
        ("a fragment", fragment, XDP_DROP),
        ("ICMP is not scanned", frame(L4Proto::Icmp, b"attack"), XDP_TX),
    ];
    let mut drops = 0;
    for (what, f, want) in &rows {
        assert_eq!(run(&p, f), *want, "{what}");
        drops += (*want == XDP_DROP) as u64;
    }
    let (rx, on, matched) = (p.counter(RX).unwrap(), p.counter(ON).unwrap(), p.counter(MATCHED).unwrap());
    assert_eq!(rx.packets, rows.len() as u64);
    assert_eq!(on.packets, rows.len() as u64 - drops);
    assert_eq!(matched.packets, drops - 1, "every drop but the fragment's is a match");
}

#[test]
fn count_lets_matches_go_on() {
    if !privileged() {
        return;
    }
    let p = pipeline(SCAN_PASS);
    assert_eq!(run(&p, &frame(L4Proto::Udp, b"attack")), XDP_TX);
    assert_eq!(run(&p, &frame(L4Proto::Udp, b"peace")), XDP_TX);
    assert_eq!((p.counter(MATCHED).unwrap().packets, p.counter(ON).unwrap().packets), (1, 2));
}

/// The element and the NF on the same mutated frames: the NF drops
/// exactly what the pipeline drops (a malformed frame included: the
/// pipeline's parser drops it before the element).
#[test]
fn the_element_and_the_nf_agree_on_mutated_frames() {
    if !privileged() {
        return;
    }
    let p = pipeline(SCAN_DROP);
    let templates = || {
        let mut trailer = frame(L4Proto::Udp, &after(10, b"peace"));
        trailer.extend_from_slice(b"attack");
        let mut before_trailer = frame(L4Proto::Tcp, &after(10, b"attack"));
        before_trailer.extend_from_slice(b"zzzzzz");
        // One 802.1Q tag (VLAN 20) in front of the IPv4 header.
        let mut vlan = frame(L4Proto::Udp, &after(5, b"attack"));
        vlan.splice(12..12, [0x81, 0x00, 0x00, 20]);
        vec![
            frame(L4Proto::Udp, &after(20, b"attack")),
            frame(L4Proto::Tcp, &after(3, &[0xde, 0xad, 0xbe, 0xef])),
            frame(L4Proto::Udp, &after(SCAN_WINDOW - 8, b"attack..")),
            frame(L4Proto::Tcp, &after(60, b"peaceful")),
            trailer,
            before_trailer,
            vlan,
        ]
    };
    let nf = std::cell::RefCell::new(
        ferry_nf::by_name("payload-scan", &["drop", "attack", "hex:deadbeef"]).expect("the payload-scan NF"),
    );
    mutated_frames_agree(templates, 90, |f| {
        // The kernel runs no program on less than an Ethernet header.
        if f.len() < 14 {
            return Ok(());
        }
        let xdp = run(&p, f);
        let verdict = nf.borrow_mut().process(&mut f.to_vec());
        let nf_drops = verdict == ferry_nf::Verdict::Drop;
        proptest::prop_assert_eq!(xdp == XDP_DROP, nf_drops, "XDP action {}, NF {:?}: {:02x?}", xdp, verdict, f);
        Ok(())
    });
}
