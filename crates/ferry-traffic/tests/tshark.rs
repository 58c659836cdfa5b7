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
    let mut cache = TemplateCache::new(p.frame_spec(), p.proto.into(), sched.active_flows());
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
