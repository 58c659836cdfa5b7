//! BPF_PROG_TEST_RUN tables: for each program, input frame → expected
//! action and output bytes, plus the verdict counters it must have bumped.

mod common;

use common::{pin_to_this_cpu, privileged, udp_frame};
use ferry_bpf::abi::{GEN_HEADERS_IP, GEN_HEADERS_UDP};
use ferry_bpf::{test_run, GenConfig, LoadedXdp, Object, SLOT_MALFORMED, SLOT_NO_SOCKET};

const XDP_ABORTED: u32 = 0;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

struct Case {
    name: &'static str,
    program: &'static str,
    input: Vec<u8>,
    action: u32,
    output: Vec<u8>,
    slot: usize,
}

fn swapped(mut f: Vec<u8>) -> Vec<u8> {
    let (dst, src) = f.split_at_mut(6);
    dst.swap_with_slice(&mut src[..6]);
    f
}

#[test]
fn basic_programs_table() {
    if !privileged() {
        return;
    }
    let cases = vec![
        Case {
            name: "drop udp",
            program: "ferry_drop",
            input: udp_frame(),
            action: XDP_DROP,
            output: udp_frame(),
            slot: XDP_DROP as usize,
        },
        Case {
            name: "pass udp",
            program: "ferry_pass",
            input: udp_frame(),
            action: XDP_PASS,
            output: udp_frame(),
            slot: XDP_PASS as usize,
        },
        Case {
            name: "tx swaps macs",
            program: "ferry_tx",
            input: udp_frame(),
            action: XDP_TX,
            output: swapped(udp_frame()),
            slot: XDP_TX as usize,
        },
        // The kernel refuses test frames shorter than an Ethernet header, so
        // the shortest input is exactly one header.
        Case {
            name: "tx of a bare ethernet header",
            program: "ferry_tx",
            input: udp_frame()[..14].to_vec(),
            action: XDP_TX,
            output: swapped(udp_frame()[..14].to_vec()),
            slot: XDP_TX as usize,
        },
    ];
    for case in cases {
        let prog = LoadedXdp::load(Object::Basic, case.program).expect("load");
        let out = test_run(prog.program_fd().unwrap(), &case.input, 1).expect("test run");
        assert_eq!(out.action, case.action, "{}: action", case.name);
        assert_eq!(out.data, case.output, "{}: output bytes", case.name);
        let v = prog.verdicts().unwrap();
        assert_eq!(v.packets[case.slot], 1, "{}: verdict slot {}", case.name, case.slot);
        assert_eq!(v.total_packets(), 1, "{}: exactly one verdict counted", case.name);
        assert_eq!(v.bytes[case.slot], case.input.len() as u64, "{}: bytes", case.name);
    }
}

/// A frame on a queue with no socket is counted `no_socket` and dropped,
/// or passed to the kernel only where the port says so.
#[test]
fn xsk_redirect_without_socket_counts_and_drops_unless_told_to_pass() {
    if !privileged() {
        return;
    }
    for (to_kernel, action) in [(false, XDP_DROP), (true, XDP_PASS)] {
        let mut prog = LoadedXdp::load(Object::XskRedirect, "ferry_xsk_redirect").unwrap();
        prog.set_unowned_queues(to_kernel).unwrap();
        let out = test_run(prog.program_fd().unwrap(), &udp_frame(), 1).unwrap();
        assert_eq!(out.action, action, "to the kernel: {to_kernel}");
        assert_eq!(out.data, udp_frame());
        let v = prog.verdicts().unwrap();
        assert_eq!((v.packets[SLOT_NO_SOCKET], v.total_packets()), (1, 1), "counted once, as no_socket");
    }
}

#[test]
fn generator_stamps_and_cycles_source_port() {
    if !privileged() {
        return;
    }
    pin_to_this_cpu();
    let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen").unwrap();
    let cfg = GenConfig {
        ifindex: 1,
        stream: 7,
        stamp_offset: 42,
        sport_offset: 34,
        sport_min: 5000,
        sport_count: 2,
        ..Default::default()
    };
    prog.set_gen_config(cfg).unwrap();
    let fd = prog.program_fd().unwrap();
    let mut ports = Vec::new();
    let mut seqs = Vec::new();
    for _ in 0..3 {
        let out = test_run(fd, &udp_frame(), 1).unwrap();
        assert_eq!(out.action, XDP_REDIRECT);
        assert_eq!(&out.data[..34], &udp_frame()[..34], "headers before the port untouched");
        ports.push(u16::from_be_bytes([out.data[34], out.data[35]]));
        let stamp = ferry_wire_stamp(&out.data[42..58]);
        assert_eq!(stamp.0, 0x7946, "magic");
        assert!(stamp.1 >= 7, "stream = base + cpu");
        seqs.push(stamp.2);
        assert!(stamp.3 > 0, "timestamp written");
    }
    assert_eq!(ports, vec![5000, 5001, 5000]);
    assert_eq!(seqs[1], seqs[0] + 1);
    assert_eq!(seqs[2], seqs[1] + 1);
}

/// A recycled live frame comes back as the device under test left it: the
/// generator writes the template's headers back, so a NAT's or router's
/// rewrite (addresses, ports, TTL, MACs) never reaches the next frame.
#[test]
fn generator_writes_the_templates_headers_back() {
    if !privileged() {
        return;
    }
    pin_to_this_cpu();
    let template = udp_frame();
    for (len, restored) in [(GEN_HEADERS_UDP, 42), (GEN_HEADERS_IP, 34), (0, 0)] {
        let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen").unwrap();
        prog.set_gen_config(GenConfig { ifindex: 1, ..Default::default() }.with_headers(&template, len)).unwrap();
        let mut left_over = template.clone();
        for b in &mut left_over[..42] {
            *b ^= 0x5a;
        }
        let out = test_run(prog.program_fd().unwrap(), &left_over, 1).unwrap();
        assert_eq!(out.action, XDP_REDIRECT);
        assert_eq!(&out.data[..restored], &template[..restored], "{len}: the template's headers");
        assert_eq!(&out.data[restored..42], &left_over[restored..42], "{len}: nothing past them");
    }
}

#[test]
fn generator_stops_at_its_limit_and_paces() {
    if !privileged() {
        return;
    }
    pin_to_this_cpu();
    let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen").unwrap();
    prog.set_gen_config(GenConfig { ifindex: 1, limit: 3, ..Default::default() }).unwrap();
    let fd = prog.program_fd().unwrap();
    let actions: Vec<u32> = (0..5).map(|_| test_run(fd, &udp_frame(), 1).unwrap().action).collect();
    assert_eq!(actions, vec![XDP_REDIRECT, XDP_REDIRECT, XDP_REDIRECT, XDP_DROP, XDP_DROP], "limit 3");

    // One frame per hour: the first run sends, the next ones are early.
    let mut paced = LoadedXdp::load(Object::Gen, "ferry_gen").unwrap();
    paced.set_gen_config(GenConfig { ifindex: 1, interval_ns: 3_600_000_000_000, ..Default::default() }).unwrap();
    let out = test_run(paced.program_fd().unwrap(), &udp_frame(), 50).unwrap();
    assert_eq!(out.action, XDP_DROP, "the last of 50 back-to-back runs is early");
    let v = paced.verdicts().unwrap();
    assert_eq!(v.packets[XDP_REDIRECT as usize], 1);
    assert_eq!(v.packets[XDP_DROP as usize], 49);
}

#[test]
fn generator_refuses_frame_too_short_for_stamp() {
    if !privileged() {
        return;
    }
    let mut prog = LoadedXdp::load(Object::Gen, "ferry_gen").unwrap();
    prog.set_gen_config(GenConfig { ifindex: 1, stamp_offset: 50, ..Default::default() }).unwrap();
    let out = test_run(prog.program_fd().unwrap(), &udp_frame(), 1).unwrap();
    assert_eq!(out.action, XDP_ABORTED);
    assert_eq!(prog.verdicts().unwrap().packets[SLOT_MALFORMED], 1);
}

/// (magic, stream, seq, tx_ns) read the way the ABI header lays it out.
fn ferry_wire_stamp(b: &[u8]) -> (u16, u16, u32, u64) {
    (
        u16::from_le_bytes([b[0], b[1]]),
        u16::from_le_bytes([b[2], b[3]]),
        u32::from_le_bytes(b[4..8].try_into().unwrap()),
        u64::from_le_bytes(b[8..16].try_into().unwrap()),
    )
}
