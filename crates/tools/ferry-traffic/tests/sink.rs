//! Sink statistics over synthetic frames built with ferry-wire.

use std::net::Ipv4Addr;

use ferry_traffic::SinkStats;
use ferry_wire::{build_frame, FiveTuple, FrameSpec, L4Proto, Stamp};

const SPEC: FrameSpec = FrameSpec { src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], frame_len: 64 };

fn frame(stream: u16, seq: u32, tx_ns: u64) -> Vec<u8> {
    let tuple = FiveTuple {
        src_ip: Ipv4Addr::new(10, 0, 0, 1).into(),
        dst_ip: Ipv4Addr::new(10, 1, 0, 1).into(),
        src_port: 1000 + stream,
        dst_port: 5001,
        proto: L4Proto::Udp,
    };
    let mut buf = vec![0u8; SPEC.frame_len];
    build_frame(&SPEC, &tuple, Some(&Stamp { stream, seq, tx_ns }), &mut buf).unwrap();
    buf
}

/// Records `seqs` of `stream`, each with latency `lat` and rx times 1 µs apart.
fn feed(stats: &mut SinkStats, stream: u16, seqs: impl IntoIterator<Item = u32>, lat: u64) {
    for (i, seq) in seqs.into_iter().enumerate() {
        let rx = 1_000_000_000 + i as u64 * 1_000;
        stats.record(&frame(stream, seq, rx - lat), rx);
    }
}

#[test]
fn in_order_no_loss() {
    let mut s = SinkStats::new();
    feed(&mut s, 0, 0..1000, 5_000);
    let r = s.report(None);
    assert_eq!((r.packets, r.bytes, r.stamped), (1000, 64_000, 1000));
    assert_eq!((r.lost, r.reordered, r.duplicates, r.bad_timestamps), (0, 0, 0, 0));
    let l = r.latency.as_ref().unwrap();
    // min and max are exact, not rounded to a histogram bucket.
    assert_eq!((l.samples, l.min_ns, l.max_ns), (1000, 5_000, 5_000));
    assert_eq!(r.duration_ns, Some(999_000));
    let pps = r.pps.unwrap();
    assert!((pps - 1000.0 / 999e-6).abs() < 1.0, "{pps}");
}

#[test]
fn loss_from_gaps_and_from_sent() {
    let mut s = SinkStats::new();
    feed(&mut s, 0, (0..1000).filter(|q| q % 10 != 3), 1_000);
    let r = s.report(None);
    assert_eq!(r.lost, 100);
    assert!((r.loss_ratio - 0.1).abs() < 1e-12);
    // The generator's count also sees packets lost after the last arrival.
    let r = s.report(Some(1200));
    assert_eq!((r.lost, r.sent), (300, Some(1200)));
    assert!((r.loss_ratio - 0.25).abs() < 1e-12);
}

#[test]
fn reordering_and_duplicates() {
    let mut s = SinkStats::new();
    // 0 1 2 5 3 4 6 6 4 7, then seq 1 again far behind after a jump.
    feed(&mut s, 0, [0, 1, 2, 5, 3, 4, 6, 6, 4, 7, 500, 1], 1_000);
    let r = s.report(None);
    // 3 and 4 arrived after 5; the last 1 is 499 behind 500, beyond the
    // 128-packet duplicate window, so it counts as a late packet too.
    assert_eq!(r.reordered, 3);
    assert_eq!(r.duplicates, 2, "the second 6 and the second 4");
    assert_eq!(r.streams[0].received, 10);
    assert_eq!(r.lost, 501 - 10);
}

#[test]
fn sequence_wrap_is_not_loss() {
    let mut s = SinkStats::new();
    let start = u32::MAX - 499;
    feed(&mut s, 0, (0..1000u32).map(|i| start.wrapping_add(i)), 1_000);
    let r = s.report(None);
    assert_eq!((r.reordered, r.duplicates), (0, 0));
    assert_eq!(r.streams[0].max_seq, i64::from(u32::MAX) + 500);
    // Loss counts from 0, so the 2^32 - 500 sequence numbers before the
    // first one received are missing; against `sent` it is exact.
    assert_eq!(r.lost, u64::from(start));
    assert_eq!(s.report(Some(1000)).lost, 0);
}

#[test]
fn multiple_streams_and_merge() {
    let mut a = SinkStats::new();
    let mut b = SinkStats::new();
    // Stream 0 split over two threads (odd/even), stream 3 only on b.
    feed(&mut a, 0, (0..100).filter(|q| q % 2 == 0), 1_000);
    feed(&mut b, 0, (0..100).filter(|q| q % 2 == 1 && *q != 51), 1_000);
    feed(&mut b, 3, (0..50).rev(), 1_000);
    a.merge(&b);
    let r = a.report(None);
    assert_eq!(r.packets, 50 + 49 + 50);
    assert_eq!(r.streams.iter().map(|s| s.stream).collect::<Vec<_>>(), [0, 3]);
    assert_eq!((r.streams[0].lost, r.streams[0].reordered), (1, 0));
    assert_eq!((r.streams[1].lost, r.streams[1].reordered), (0, 49));
    assert_eq!((r.lost, r.reordered), (1, 49));
    assert_eq!(r.latency.unwrap().samples, 149);
}

#[test]
fn latency_percentiles() {
    let mut s = SinkStats::new();
    // Latencies 1..=1000 µs, one each: p50 = 500 µs, p99 = 990 µs, max 1 ms.
    for i in 1..=1000u64 {
        let rx = 10_000_000_000 + i;
        s.record(&frame(0, i as u32 - 1, rx - i * 1_000), rx);
    }
    let l = s.report(None).latency.unwrap();
    let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.001 + 1.0;
    assert!(near(l.p50_ns, 500_000), "p50 {}", l.p50_ns);
    assert!(near(l.p99_ns, 990_000), "p99 {}", l.p99_ns);
    assert!(near(l.p999_ns, 999_000), "p99.9 {}", l.p999_ns);
    assert!(near(l.max_ns, 1_000_000), "max {}", l.max_ns);
    assert!(near(l.min_ns, 1_000), "min {}", l.min_ns);
    assert!((l.mean_ns - 500_500.0).abs() < 500.0, "mean {}", l.mean_ns);
}

#[test]
fn bad_timestamps_and_unstamped_frames() {
    let mut s = SinkStats::new();
    s.record(&frame(0, 0, 2_000), 1_000); // tx after rx
    s.record(&frame(0, 1, 0), 61_000_000_000); // 61 s old
    s.record(&[0u8; 60], 5); // not even IPv4
    s.record(&[], 6); // empty: counted, never panics
    let r = s.report(None);
    assert_eq!((r.packets, r.stamped, r.bad_timestamps), (4, 2, 2));
    assert!(r.latency.is_none());
    assert_eq!(r.bytes, 64 * 2 + 60);
    // Without stamps, `sent` is compared with all packets.
    let mut u = SinkStats::new();
    u.record(&[0u8; 60], 1);
    assert_eq!(u.report(Some(3)).lost, 2);
}

#[test]
fn report_display_and_json() {
    let mut s = SinkStats::new();
    feed(&mut s, 0, (0..2000).filter(|q| q % 100 != 0), 12_345);
    feed(&mut s, 1, 0..10, 12_345);
    let r = s.report(None);
    let text = r.to_string();
    for want in ["packets", "1,990", "lost", "20 (0.9950%)", "p99.9", "12.3 us", "stream"] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["packets"], 1990);
    assert_eq!(json["latency"]["p50_ns"], r.latency.as_ref().unwrap().p50_ns);
    assert_eq!(json["streams"][1]["received"], 10);
    let empty = SinkStats::default().report(None).to_string();
    assert!(empty.contains("no stamped packets"), "{empty}");
}

/// IPv6 frames, untagged and behind two VLAN tags: read and counted as
/// IPv4 ones are.
#[test]
fn ipv6_and_tagged_frames_are_read_alike() {
    let spec = FrameSpec { frame_len: 96, ..SPEC };
    let (src_ip, dst_ip) = ("2001:db8::1".parse().unwrap(), "2001:db8:1::1".parse().unwrap());
    let tuple = FiveTuple { src_ip, dst_ip, src_port: 1000, dst_port: 5001, proto: L4Proto::Udp };
    let mut s = SinkStats::new();
    for seq in 0..10u32 {
        let mut f = vec![0u8; spec.frame_len];
        build_frame(&spec, &tuple, Some(&Stamp { stream: 3, seq, tx_ns: 1_000 }), &mut f).unwrap();
        if seq % 2 == 1 {
            f.splice(12..12, [0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2]);
        }
        s.record(&f, 2_000);
    }
    let r = s.report(None);
    assert_eq!((r.packets, r.stamped, r.lost, r.reordered), (10, 10, 0, 0));
    assert_eq!(r.latency.as_ref().unwrap().max_ns, 1_000);
}
