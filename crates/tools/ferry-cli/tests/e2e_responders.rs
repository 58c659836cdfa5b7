//! End to end: the AF_XDP ARP + ICMP echo responders of `ferry nf run`,
//! answering real ping/arping and hand-built frames (etherparse and raw
//! bytes, not ferry-wire) sent over an AF_PACKET socket in the client
//! namespace; malformed frames are counted and dropped. Needs root.

mod common;

use std::time::Duration;

use common::*;
use etherparse::{Icmpv4Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

/// The demo's client <-> dut link. IPv6 off so that no router/multicast
/// chatter mixes with the counters.
const RESPONDER_BED: &str = r#"
name: e2e-responder
namespaces:
  - name: rclient
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
  - name: rdut
    sysctls: { net.ipv6.conf.all.disable_ipv6: "1" }
links:
  - a: { ns: rclient, dev: c0, mac: "02:00:00:00:01:01", addrs: ["10.0.1.1/24"] }
    b: { ns: rdut, dev: d0, mac: "02:00:00:00:01:02" }
"#;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
const RESP_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
const CLIENT_IP: [u8; 4] = [10, 0, 1, 1];
const RESP_IP: [u8; 4] = [10, 0, 1, 2];

/// Testbed plus `ferry nf run --dev d0 arp-responder ... -- icmp-echo ...`,
/// attached.
fn responder() -> (ferry_testbed::Testbed, Ferry) {
    let tb = testbed(RESPONDER_BED, "e2e_responders/responder.yaml");
    let mut nf = Ferry::spawn(
        &tb,
        "rdut",
        &[
            "nf",
            "run",
            "--dev",
            "d0",
            "--json",
            "arp-responder",
            "10.0.1.2=02:00:00:00:01:02",
            "--",
            "icmp-echo",
            "10.0.1.2",
        ],
    );
    wait_attached(&tb, "rdut", "d0", &mut nf);
    // The MACs the spec asked for are the ones the devices have.
    assert_eq!(mac(&tb, "rclient", "c0"), CLIENT_MAC);
    assert_eq!(mac(&tb, "rdut", "d0"), RESP_MAC);
    (tb, nf)
}

/// An ICMP echo request from the client to the responder, built by etherparse.
fn echo_request(id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, RESP_MAC).ipv4(CLIENT_IP, RESP_IP, 31).icmpv4_echo_request(id, seq);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// An Ethernet/IPv4 ARP request, byte by byte (RFC 826).
fn arp_request(eth_dst: [u8; 6], sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&eth_dst);
    f.extend_from_slice(&sha);
    f.extend_from_slice(&[0x08, 0x06]); // ARP
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // htype 1, ptype IPv4, hlen 6, plen 4, oper 1
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa);
    f
}

fn is_arp_reply(f: &[u8]) -> bool {
    f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 2]
}

/// Fixes the IPv4 header checksum of an Ethernet frame (IHL from the frame).
fn fix_ip_csum(f: &mut [u8]) {
    let hl = usize::from(f[14] & 0x0f) * 4;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = inet_csum(&f[14..14 + hl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn ping_and_echo_reply_bytes() {
    if !privileged("ping_and_echo_reply_bytes") {
        return;
    }
    let (tb, nf) = responder();
    let report = {
        let nf = nf;
        let (ok, out) = ping(&tb, "rclient", "10.0.1.2", 3);
        assert!(ok && out.contains(" 0% packet loss"), "ping through the responder failed:\n{out}");
        assert_eq!(out.lines().filter(|l| l.contains("bytes from 10.0.1.2")).count(), 3, "{out}");

        let payload: Vec<u8> = b"ferry-e2e icmp payload \x00\x01\x02\xff".iter().copied().chain(0..40u8).collect();
        let (id, seq) = (0xfe11, 0x0203);
        let request = echo_request(id, seq, &payload);
        let reply = in_netns(tb.ns_name("rclient"), || {
            let sock = RawSock::open("c0");
            sock.send(&request);
            sock.recv_match(HANG_GUARD, |f| {
                matches!(SlicedPacket::from_ethernet(f), Ok(SlicedPacket {
                    transport: Some(TransportSlice::Icmpv4(icmp)), ..
                }) if matches!(icmp.icmp_type(), Icmpv4Type::EchoReply(h) if h.id == id))
            })
        })
        .expect("no ICMP echo reply to the hand-built request ");

        assert_eq!(reply.len(), request.len(), "reply keeps the frame length");
        assert_eq!(reply[..6], CLIENT_MAC, "eth dst = requester");
        assert_eq!(reply[6..12], RESP_MAC, "eth src = responder");
        assert_eq!(reply[12..14], [0x08, 0x00]);
        let p = SlicedPacket::from_ethernet(&reply).expect("reply parses");
        let Some(NetSlice::Ipv4(ip)) = &p.net else { panic!("reply is not IPv4: {reply:02x?}") };
        let h = ip.header();
        let req = SlicedPacket::from_ethernet(&request).unwrap();
        let Some(NetSlice::Ipv4(req_ip)) = &req.net else { unreachable!() };
        assert_eq!(h.source(), RESP_IP, "IPs swapped");
        assert_eq!(h.destination(), CLIENT_IP, "IPs swapped");
        assert_eq!(h.ttl(), 64, "reply TTL");
        assert_eq!(h.protocol(), etherparse::IpNumber::ICMP);
        assert_eq!(h.total_len(), req_ip.header().total_len());
        assert_eq!(h.identification(), req_ip.header().identification(), "ident kept (documented)");
        assert!(!h.more_fragments() && h.fragments_offset().value() == 0);
        assert_eq!(inet_csum(h.slice()), 0, "IPv4 header checksum of the reply is wrong: {reply:02x?}");
        assert_eq!(
            h.header_checksum(),
            etherparse::Ipv4Header::from_slice(h.slice()).unwrap().0.calc_header_checksum()
        );
        let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else { panic!("no ICMP in reply") };
        assert_eq!(icmp.type_u8(), 0, "ICMP type echo reply");
        assert_eq!(icmp.code_u8(), 0);
        match icmp.icmp_type() {
            Icmpv4Type::EchoReply(e) => assert_eq!((e.id, e.seq), (id, seq), "same id/seq"),
            t => panic!("ICMP type {t:?}"),
        }
        assert_eq!(icmp.payload(), &payload[..], "same payload");
        assert_eq!(inet_csum(icmp.slice()), 0, "ICMP checksum of the reply is wrong: {reply:02x?}");
        nf.stop_json()
    };
    let icmp = nf_counters(&report, "icmp-echo");
    let arp = nf_counters(&report, "arp-responder");
    assert_partition("icmp-echo", &icmp);
    assert_partition("arp-responder", &arp);
    assert_eq!(counter(&icmp, "tx"), 4, "3 pings + the hand-built request: {report:#}");
    assert!(counter(&arp, "tx") >= 1, "the kernel's ARP for 10.0.1.2 was answered: {report:#}");
    assert_eq!(u(&report, "/drop_tx_full"), 0);
    down_and_check(tb);
}

#[test]
fn arp_reply_per_rfc826() {
    if !privileged("arp_reply_per_rfc826") {
        return;
    }
    let (tb, nf) = responder();
    let report = {
        let nf = nf;
        let bcast = [0xff; 6];
        let (reply, other) = in_netns(tb.ns_name("rclient"), || {
            let sock = RawSock::open("c0");
            sock.send(&arp_request(bcast, CLIENT_MAC, CLIENT_IP, RESP_IP));
            let reply = sock.recv_match(HANG_GUARD, is_arp_reply);
            // Who-has 10.0.1.99: not ours, no answer at all.
            sock.send(&arp_request(bcast, CLIENT_MAC, CLIENT_IP, [10, 0, 1, 99]));
            let other = sock.recv_match(Duration::from_millis(700), |f| f.len() >= 14 && f[12..14] == [0x08, 0x06]);
            (reply, other)
        });
        let r = reply.expect("no ARP reply for 10.0.1.2 ");
        assert_eq!(r[12..14], [0x08, 0x06], "ethertype ARP");
        assert_eq!(r[..6], CLIENT_MAC, "eth dst = requester MAC");
        assert_eq!(r[6..12], RESP_MAC, "eth src = the bound MAC");
        let a = &r[14..];
        assert_eq!(a[0..2], [0, 1], "htype Ethernet");
        assert_eq!(a[2..4], [0x08, 0x00], "ptype IPv4");
        assert_eq!(a[4], 6, "hlen");
        assert_eq!(a[5], 4, "plen");
        assert_eq!(a[6..8], [0, 2], "oper reply");
        assert_eq!(a[8..14], RESP_MAC, "sha");
        assert_eq!(a[14..18], RESP_IP, "spa");
        assert_eq!(a[18..24], CLIENT_MAC, "tha = requester MAC");
        assert_eq!(a[24..28], CLIENT_IP, "tpa = requester IP");
        assert_eq!(r.len(), 42, "reply keeps the request's length");
        assert!(other.is_none(), "ARP frame after a request for 10.0.1.99: {:02x?}", other.unwrap());

        match std::process::Command::new("arping").arg("-V").output() {
            Ok(_) => {
                let out =
                    tb.exec("rclient", "arping", ["-c", "1", "-w", "3", "-I", "c0", "10.0.1.2"]).output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success(), "arping failed:\n{text}{}", String::from_utf8_lossy(&out.stderr));
                assert!(text.to_lowercase().contains("02:00:00:00:01:02"), "arping saw another MAC:\n{text}");
            }
            Err(_) => eprintln!("arping not installed: skipping the arping check"),
        }
        nf.stop_json()
    };
    let arp = nf_counters(&report, "arp-responder");
    assert_partition("arp-responder", &arp);
    assert_partition("icmp-echo", &nf_counters(&report, "icmp-echo"));
    assert_eq!(counter(&arp, "drop_not_for_us"), 1, "the request for 10.0.1.99: {report:#}");
    assert!(counter(&arp, "tx") >= 1, "{report:#}");
    assert_eq!(counter(&arp, "drop_malformed"), 0, "{report:#}");
    down_and_check(tb);
}

#[test]
fn malformed_frames_are_counted_and_dropped() {
    if !privileged("malformed_frames_are_counted_and_dropped") {
        return;
    }
    let (tb, nf) = responder();
    let good = echo_request(0x4242, 1, &[0xab; 32]);
    let mut frames: Vec<(&str, Vec<u8>)> = Vec::new();
    // IPv4 header cut after 12 bytes.
    frames.push(("truncated ipv4", good[..14 + 12].to_vec()));
    // Total length beyond the frame.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&1000u16.to_be_bytes());
    fix_ip_csum(&mut f);
    frames.push(("bad total length", f));
    // IHL 3 (12-byte header).
    let mut f = good.clone();
    f[14] = 0x43;
    frames.push(("ihl 3", f));
    // Wrong IPv4 header checksum.
    let mut f = good.clone();
    f[24] ^= 0x5a;
    frames.push(("bad ipv4 checksum", f));
    // Wrong ICMP checksum.
    let mut f = good.clone();
    f[36] ^= 0x5a;
    frames.push(("bad icmp checksum", f));
    // A first fragment (MF set), otherwise a valid echo request to us.
    let mut f = good.clone();
    f[20] = 0x20;
    f[21] = 0;
    fix_ip_csum(&mut f);
    frames.push(("ipv4 fragment", f));
    // ARP with hlen 8.
    let mut f = arp_request([0xff; 6], CLIENT_MAC, CLIENT_IP, RESP_IP);
    f[14 + 4] = 8;
    f.resize(60, 0);
    frames.push(("arp hlen 8", f));
    // ARP cut after 20 of its 28 bytes.
    frames.push(("truncated arp", arp_request([0xff; 6], CLIENT_MAC, CLIENT_IP, RESP_IP)[..14 + 20].to_vec()));
    // An ethertype nobody handles.
    let mut f = [RESP_MAC, CLIENT_MAC].concat();
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(b"local experimental ethertype 1 payload....");
    frames.push(("ethertype 0x88b5", f));
    // IPv6 (UDP to all-nodes).
    let b = PacketBuilder::ethernet2(CLIENT_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            1,
        )
        .udp(5000, 5001);
    let mut f = Vec::new();
    b.write(&mut f, b"ipv6 noise").unwrap();
    frames.push(("ipv6", f));

    let report = {
        let mut nf = nf;
        in_netns(tb.ns_name("rclient"), || {
            let sock = RawSock::open("c0");
            for (_, f) in &frames {
                sock.send(f);
            }
            // Nothing comes back for any of them.
            let back = sock.recv_match(Duration::from_millis(500), |_| true);
            assert!(back.is_none(), "a malformed frame was answered: {:02x?}", back.unwrap());
        });
        assert!(nf.running(), "the NF process died on malformed frames");
        let (ok, out) = ping(&tb, "rclient", "10.0.1.2", 2);
        assert!(ok, "ping after malformed frames failed:\n{out}");
        nf.stop_json()
    };
    let icmp = nf_counters(&report, "icmp-echo");
    let arp = nf_counters(&report, "arp-responder");
    assert_partition("icmp-echo", &icmp);
    assert_partition("arp-responder", &arp);
    // truncated ipv4, bad total length, IHL 3
    assert_eq!(counter(&icmp, "drop_malformed"), 3, "{report:#}");
    // bad IPv4 checksum, bad ICMP checksum
    assert_eq!(counter(&icmp, "drop_bad_checksum"), 2, "{report:#}");
    assert_eq!(counter(&icmp, "drop_fragment"), 1, "{report:#}");
    assert_eq!(counter(&icmp, "tx"), 2, "only the two pings were answered: {report:#}");
    // hlen 8, truncated ARP
    assert_eq!(counter(&arp, "drop_malformed"), 2, "{report:#}");
    // 0x88b5 and IPv6: neither NF claims them.
    assert_eq!(u(&report, "/drop_unclaimed"), 2, "{report:#}");
    assert_eq!(counter(&icmp, "pass"), u(&report, "/drop_unclaimed"), "what icmp-echo passes is unclaimed");
    // Chain bookkeeping: every frame reaches arp-responder first; what it
    // passes reaches icmp-echo; only Tx verdicts are transmitted.
    assert_eq!(counter(&arp, "rx"), u(&report, "/rx_packets"), "{report:#}");
    assert_eq!(counter(&icmp, "rx"), counter(&arp, "pass"), "{report:#}");
    assert_eq!(counter(&arp, "tx") + counter(&icmp, "tx"), u(&report, "/tx_packets"), "{report:#}");
    assert!(u(&report, "/rx_packets") >= frames.len() as u64 + 2);
    down_and_check(tb);
}
