//! Classifies real IPv4 packets with the system libndpi 4.2.

use etherparse::PacketBuilder;
use ferry_ndpi::{Classification, Flow, Ndpi, NdpiError, UNKNOWN};
use std::path::PathBuf;

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [10, 0, 0, 2];
const CLIENT_PORT: u16 = 40000;

#[derive(Clone, Copy)]
enum Tcp {
    Syn,
    SynAck,
    Ack,
    /// Client data with PSH|ACK.
    Data,
}

/// One packet of a TCP connection CLIENT:40000 <-> SERVER:`port`.
fn tcp(port: u16, kind: Tcp, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sport, dport) = match kind {
        Tcp::SynAck => (SERVER, CLIENT, port, CLIENT_PORT),
        _ => (CLIENT, SERVER, CLIENT_PORT, port),
    };
    let builder = PacketBuilder::ipv4(src, dst, 64).tcp(sport, dport, 1000, 64240);
    let builder = match kind {
        Tcp::Syn => builder.syn(),
        Tcp::SynAck => builder.syn().ack(1001),
        Tcp::Ack => builder.ack(1),
        Tcp::Data => builder.psh().ack(1),
    };
    let mut packet = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut packet, payload).unwrap();
    packet
}

/// Runs a three-way handshake and then `payload` through `ndpi`, returning
/// each packet's classification.
fn connection(ndpi: &mut Ndpi, flow: &mut Flow, port: u16, payloads: &[&[u8]]) -> Vec<Classification> {
    let mut packets = vec![tcp(port, Tcp::Syn, &[]), tcp(port, Tcp::SynAck, &[]), tcp(port, Tcp::Ack, &[])];
    packets.extend(payloads.iter().map(|p| tcp(port, Tcp::Data, p)));
    packets.iter().enumerate().map(|(i, p)| ndpi.process(flow, p, 1000 + i as u64)).collect()
}

/// Deterministic bytes with no protocol in them.
fn noise(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn protocols_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("ferry-ndpi-{}-{name}.txt", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

const GET: &[u8] =
    b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n";

#[test]
fn http_get_with_host_is_http_on_the_first_payload_packet() {
    let mut ndpi = Ndpi::new(None).unwrap();
    let mut flow = Flow::new();
    let results = connection(&mut ndpi, &mut flow, 80, &[GET]);
    // The handshake carries nothing to match; the GET decides it.
    assert!(results[..3].iter().all(|c| !c.done && c.protocol() == UNKNOWN), "{results:?}");
    let http = results[3];
    assert!(http.done, "{http:?}");
    assert_eq!((http.master, ndpi.protocol_name(http.app).as_str()), (UNKNOWN, "HTTP"));
    assert_eq!(ndpi.protocol_id("http"), Some(http.app));
    // Final: later packets and giveup do not change it.
    assert_eq!(ndpi.process(&mut flow, &tcp(80, Tcp::Data, &noise(1, 64)), 2000), http);
    assert_eq!(ndpi.giveup(&mut flow), http);

    // Mid-stream (no handshake seen) and off the default port: same.
    let mut flow = Flow::new();
    assert_eq!(ndpi.process(&mut flow, &tcp(80, Tcp::Data, GET), 1), http);
    let mut flow = Flow::new();
    assert_eq!(connection(&mut ndpi, &mut flow, 8080, &[GET])[3], http);
}

#[test]
fn custom_port_protocol_is_found_on_the_syn() {
    let path = protocols_file("iperf", "# iperf3 data and control\ntcp:5201@Iperf\n");
    let mut ndpi = Ndpi::new(Some(&path)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let iperf = ndpi.protocol_id("Iperf").expect("custom protocol is registered");
    assert_eq!(ndpi.protocol_id("IPERF"), Some(iperf));
    assert_eq!(ndpi.protocol_name(iperf), "Iperf");

    let mut flow = Flow::new();
    let results = connection(&mut ndpi, &mut flow, 5201, &[&noise(3, 100)]);
    let expected = Classification { master: UNKNOWN, app: iperf, done: true };
    // nDPI reports it on the SYN only; the flow keeps it afterwards.
    assert!(results.iter().all(|c| *c == expected), "{results:?}");

    // Without the file the id does not exist and port 5201 is not Iperf.
    let mut plain = Ndpi::new(None).unwrap();
    assert_eq!(plain.protocol_id("Iperf"), None);
    let mut flow = Flow::new();
    assert_ne!(plain.process(&mut flow, &tcp(5201, Tcp::Syn, &[]), 1).app, iperf);
}

#[test]
fn unknown_payload_stays_open_until_giveup_or_packet_32() {
    let mut ndpi = Ndpi::new(None).unwrap();
    let mut flow = Flow::new();
    let results = connection(&mut ndpi, &mut flow, 47123, &[&noise(7, 200)]);
    assert!(results.iter().all(|c| !c.done && c.protocol() == UNKNOWN), "{results:?}");
    // Private addresses and an unassigned port leave nothing to guess from.
    let unknown = Classification { master: UNKNOWN, app: UNKNOWN, done: true };
    assert_eq!(ndpi.giveup(&mut flow), unknown);
    assert_eq!(ndpi.process(&mut flow, &tcp(47123, Tcp::Data, GET), 9), unknown);

    // nDPI stops dissecting after NDPI_MAX_NUM_PKTS_PER_FLOW_TO_DISSECT (32)
    // packets; the shim then reports giveup's result as done.
    let mut flow = Flow::new();
    let payloads: Vec<Vec<u8>> = (0..40).map(|i| noise(100 + i, 200)).collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let results = connection(&mut ndpi, &mut flow, 47123, &payloads);
    let first_done = results.iter().position(|c| c.done);
    assert_eq!(first_done, Some(31), "{results:?}");
    assert_eq!(results[31], unknown);
}

#[test]
fn short_and_malformed_packets_are_not_classified_and_do_not_crash() {
    let mut ndpi = Ndpi::new(None).unwrap();
    let good = tcp(80, Tcp::Data, GET);
    let mut cases: Vec<Vec<u8>> =
        vec![vec![], vec![0x45], good[..19].to_vec(), good[..20].to_vec(), good[..30].to_vec()];
    let mut ihl_too_big = good.clone();
    ihl_too_big[0] = 0x4f;
    cases.push(ihl_too_big[..40].to_vec());
    let mut total_len_too_big = good.clone();
    total_len_too_big[2..4].copy_from_slice(&4000u16.to_be_bytes());
    cases.push(total_len_too_big);
    let mut tcp_offset_too_big = good[..44].to_vec();
    tcp_offset_too_big[32] = 0xf0;
    cases.push(tcp_offset_too_big);
    let mut v6_short = vec![0x60; 39];
    v6_short[4..6].copy_from_slice(&1000u16.to_be_bytes());
    cases.push(v6_short);
    cases.push(vec![0x60; 70_000]);
    for (i, packet) in cases.iter().enumerate() {
        let mut flow = Flow::new();
        let c = ndpi.process(&mut flow, packet, 1);
        assert_eq!(c.protocol(), UNKNOWN, "case {i}: {c:?}");
    }
    // Random bytes behind plausible IPv4 and IPv6 first bytes, one flow.
    let mut flow = Flow::new();
    for seed in 0..2000u32 {
        let mut packet = noise(seed, (seed % 120) as usize);
        if let Some(first) = packet.first_mut() {
            *first = if seed % 2 == 0 { 0x45 } else { 0x60 };
        }
        ndpi.process(&mut flow, &packet, u64::from(seed));
    }
}

#[test]
fn protocols_file_errors_name_the_file() {
    let missing = std::env::temp_dir().join("ferry-ndpi-no-such-dir/protos.txt");
    let err = Ndpi::new(Some(&missing)).err().expect("missing file is an error");
    assert!(matches!(err, NdpiError::ProtocolsFileIo { ref path, .. } if *path == missing), "{err:?}");
    assert!(err.to_string().contains("ferry-ndpi-no-such-dir/protos.txt"), "{err}");

    let path = protocols_file("bad-rule", "tcp:5201@Iperf\nudp:80000@Big\n");
    let err = Ndpi::new(Some(&path)).err().expect("bad rule is an error");
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(err, NdpiError::ProtocolsRule { line: 2, .. }), "{err:?}");
    assert!(err.to_string().starts_with(&format!("{}:2: ", path.display())), "{err}");
}

#[test]
#[should_panic(expected = "second Ndpi")]
fn a_flow_belongs_to_one_module() {
    let mut a = Ndpi::new(None).unwrap();
    let mut b = Ndpi::new(None).unwrap();
    let mut flow = Flow::new();
    a.process(&mut flow, &tcp(80, Tcp::Syn, &[]), 1);
    b.process(&mut flow, &tcp(80, Tcp::Ack, &[]), 2);
}

#[test]
fn modules_are_built_and_used_on_several_threads() {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let mut ndpi = Ndpi::new(None).unwrap();
                let mut flow = Flow::new();
                let c = ndpi.process(&mut flow, &tcp(80, Tcp::Data, GET), 1);
                ndpi.protocol_name(c.app)
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), "HTTP");
    }
}
