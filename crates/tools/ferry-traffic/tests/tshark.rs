//! Cross-checks our pcap output with tshark, an independent reader.
//!
//! Skipped with a notice when tshark is missing, except under CI=true where
//! a missing tshark fails the test: CI must install it (`apt-get install -y
//! tshark`) so that this check really runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_traffic::{read_pcap, FlowSchedule, PcapWriter, TemplateCache, TrafficProfile};
use ferry_wire::Stamp;

fn tshark_available() -> bool {
    let found = Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("tshark not found but CI=true: install it with `apt-get install -y tshark`");
        }
        eprintln!("NOTICE: tshark not installed; skipping the tshark cross-check");
    }
    found
}

fn tshark(file: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark").arg("-n").arg("-r").arg(file).args(args).output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-traffic-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// 200 generated UDP frames, 1 µs + 1 ns apart, and the lines tshark should print.
fn write_capture(path: &Path) -> (Vec<(u64, Vec<u8>)>, Vec<String>) {
    let mut p = TrafficProfile { frame_len: 128, active_flows: 8, seed: 11, ..Default::default() };
    p.set("dst_port", "7000-7010").unwrap();
    let mut sched = FlowSchedule::new(&p).unwrap();
    let mut cache = TemplateCache::new(p.frame_spec(), p.version(), p.proto.into(), sched.active_flows());
    let mut w = PcapWriter::create(path, 0).unwrap();
    let (mut frames, mut lines) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 256];
    for seq in 0..200u32 {
        let pkt = sched.next_packet();
        let ts = 1_700_000_000_000_000_001 + u64::from(seq) * 1_001;
        let n = cache.write_frame(&pkt, &Stamp { stream: 0, seq, tx_ns: ts }, &mut buf).unwrap();
        w.write(&buf[..n], ts).unwrap();
        frames.push((ts, buf[..n].to_vec()));
        lines.push(format!("{}\t{}\t{}", n, pkt.tuple.src_ip, pkt.tuple.dst_port));
    }
    w.finish().unwrap();
    (frames, lines)
}

#[test]
fn tshark_reads_our_pcap() {
    if !tshark_available() {
        return;
    }
    let path = tmp("gen.pcap");
    let (frames, want) = write_capture(&path);
    let got = tshark(&path, &["-T", "fields", "-e", "frame.len", "-e", "ip.src", "-e", "udp.dstport"]);
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    // Nanosecond timestamps survive.
    let times = tshark(&path, &["-T", "fields", "-e", "frame.time_epoch"]);
    let first = times.lines().next().unwrap();
    assert_eq!(first, "1700000000.000000001", "{times}");
    assert_eq!(read_pcap(&path).unwrap(), frames);
}

/// IPv6 frames the generator stamps (UDP, TCP, ICMPv6 echo): tshark reads
/// the addresses and finds every checksum good, the pseudo-header's
/// included.
#[test]
fn tshark_finds_ipv6_checksums_good() {
    if !tshark_available() {
        return;
    }
    for proto in ["udp", "tcp", "icmp"] {
        let mut p = TrafficProfile { frame_len: 128, active_flows: 4, seed: 3, ..Default::default() };
        for (k, v) in [("proto", proto), ("src_ip", "2001:db8::/124"), ("dst_ip", "2001:db8:1::1")] {
            p.set(k, v).unwrap();
        }
        p.validate().unwrap();
        let mut sched = FlowSchedule::new(&p).unwrap();
        let mut cache = TemplateCache::new(p.frame_spec(), p.version(), p.proto.into(), sched.active_flows());
        let path = tmp(&format!("gen6-{proto}.pcap"));
        let mut w = PcapWriter::create(&path, 0).unwrap();
        let mut buf = [0u8; 256];
        for seq in 0..50u32 {
            let pkt = sched.next_packet();
            let n =
                cache.write_frame(&pkt, &Stamp { stream: 1, seq, tx_ns: 1_000 + u64::from(seq) }, &mut buf).unwrap();
            assert_eq!(ferry_wire::verify_checksums(&buf[..n]), Ok(true), "{proto} {seq}");
            w.write(&buf[..n], u64::from(seq)).unwrap();
        }
        w.finish().unwrap();
        let field = match proto {
            "udp" => "udp.checksum.status",
            "tcp" => "tcp.checksum.status",
            _ => "icmpv6.checksum.status",
        };
        let checks = ["-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"];
        let out = tshark(&path, &[&checks[..], &["-T", "fields", "-e", "ipv6.dst", "-e", field]].concat());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 50, "{proto}: {out}");
        // checksum.status: 0 bad, 1 good, 2 unverified.
        assert!(lines.iter().all(|l| *l == "2001:db8:1::1\t1"), "{proto}: tshark says\n{out}");
    }
}

#[test]
fn we_read_tshark_pcapng() {
    if !tshark_available() {
        return;
    }
    let path = tmp("gen2.pcap");
    let (frames, _) = write_capture(&path);
    let ng = tmp("conv.pcapng");
    let out = Command::new("tshark").arg("-r").arg(&path).args(["-F", "pcapng", "-w"]).arg(&ng).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(&std::fs::read(&ng).unwrap()[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "not pcapng");
    assert_eq!(read_pcap(&ng).unwrap(), frames);
}

/// NSH frames built with ferry-wire, decoded by tshark: MD type 1 over
/// Ethernet (ethertype 0x894f) and MD type 2 over VXLAN-GPE (UDP 4790).
#[test]
fn tshark_decodes_our_nsh_headers() {
    use ferry_wire::nsh::{next_proto, NshContext, NshRepr, ETHERTYPE_NSH};
    use ferry_wire::{build_frame, vxlan_gpe, FiveTuple, FrameSpec, L4Proto};
    if !tshark_available() {
        return;
    }
    let spec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };
    let inner = |dport: u16| {
        let t = FiveTuple {
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 0, 2].into(),
            src_port: 1000,
            dst_port: dport,
            proto: L4Proto::Udp,
        };
        let mut f = vec![0u8; 64];
        let n = build_frame(&spec, &t, None, &mut f).unwrap();
        f.truncate(n);
        f
    };
    let path = tmp("nsh.pcap");
    let mut w = PcapWriter::create(&path, 0).unwrap();
    // 1: Ethernet / NSH MD1 (SPI 0x123456, SI 255, TTL 63) / IPv4.
    let md1 = NshRepr {
        oam: false,
        ttl: 63,
        next_protocol: next_proto::IPV4,
        spi: 0x123456,
        si: 255,
        context: NshContext::Md1([7; 16]),
    };
    let ip = inner(9)[14..].to_vec();
    let mut f = vec![0u8; 14 + md1.buffer_len()];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE_NSH.to_be_bytes());
    md1.emit(&mut f[14..]);
    f.extend_from_slice(&ip);
    w.write(&f, 1_000_000_000).unwrap();
    // 2: Ethernet / IPv4 / UDP 4790 / VXLAN-GPE / NSH MD2 (SPI 7, SI 254,
    // TTL 5, one TLV) / Ethernet.
    let tlv = [0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc, 0x00];
    let md2 = NshRepr {
        oam: false,
        ttl: 5,
        next_protocol: next_proto::ETHERNET,
        spi: 7,
        si: 254,
        context: NshContext::Md2(&tlv),
    };
    let payload = inner(80);
    let mut tunnel_payload = vec![0u8; vxlan_gpe::VXLAN_GPE_LEN + md2.buffer_len()];
    vxlan_gpe::emit(&mut tunnel_payload, 42, vxlan_gpe::next_proto::NSH);
    md2.emit(&mut tunnel_payload[vxlan_gpe::VXLAN_GPE_LEN..]);
    tunnel_payload.extend_from_slice(&payload);
    let outer = FiveTuple {
        src_ip: [192, 0, 2, 1].into(),
        dst_ip: [192, 0, 2, 2].into(),
        src_port: 50000,
        dst_port: vxlan_gpe::UDP_PORT,
        proto: L4Proto::Udp,
    };
    let outer_len = 14 + 20 + 8 + tunnel_payload.len();
    let mut g = vec![0u8; outer_len];
    let n = build_frame(&FrameSpec { frame_len: outer_len, ..spec }, &outer, None, &mut g).unwrap();
    assert_eq!(n, outer_len);
    g[14 + 20 + 8..].copy_from_slice(&tunnel_payload);
    // The builder filled the UDP checksum over its own payload: 0 (none).
    g[14 + 20 + 6..14 + 20 + 8].fill(0);
    w.write(&g, 2_000_000_000).unwrap();
    w.finish().unwrap();

    let out = tshark(&path, &["-T", "fields", "-e", "nsh.spi", "-e", "nsh.si", "-e", "nsh.ttl", "-e", "nsh.mdtype"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let fields = |l: &str| l.split('\t').map(|v| v.trim().to_string()).collect::<Vec<_>>();
    let (a, b) = (fields(lines[0]), fields(lines[1]));
    let num = |v: &str| {
        if let Some(h) = v.strip_prefix("0x") {
            u64::from_str_radix(h, 16).unwrap()
        } else {
            v.parse::<u64>().unwrap()
        }
    };
    assert_eq!(a.iter().map(|v| num(v)).collect::<Vec<_>>(), [0x123456, 255, 63, 1], "{out}");
    assert_eq!(b.iter().map(|v| num(v)).collect::<Vec<_>>(), [7, 254, 5, 2], "{out}");
    // And tshark follows each header to what it carries.
    let proto = tshark(&path, &["-T", "fields", "-e", "frame.protocols"]);
    let p: Vec<&str> = proto.lines().collect();
    assert!(p[0].contains("nsh:ip:udp"), "{proto}");
    // (tshark lists the VXLAN-GPE layer under udp, not by name.)
    assert!(p[1].contains("udp:nsh:eth"), "{proto}");
    let gpe = tshark(&path, &["-Y", "vxlan.vni == 42 && nsh.spi == 7", "-T", "fields", "-e", "vxlan.next_proto"]);
    assert_eq!(gpe.trim(), "4", "VXLAN-GPE: VNI 42, next protocol NSH: {gpe}");
}
