//! The bench's frames: TCP connections opened by their handshakes, then
//! payloads over them (HTTP requests and responses, binary data), DNS
//! queries, other UDP and ICMP echoes; about one packet in thirty
//! carries a rule's pattern somewhere in its payload.

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::{pick, word};

/// TCP connections the corpus opens.
const CONNECTIONS: usize = 512;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;

pub struct Corpus {
    /// Each connection's SYN, SYN-ACK and ACK: what the IPS's flow table
    /// needs to call the connection established.
    pub opening: Vec<Vec<u8>>,
    pub payloads: Vec<Vec<u8>>,
}

/// A TCP connection: client and server address and port.
#[derive(Clone, Copy)]
struct Conn {
    client: [u8; 4],
    server: [u8; 4],
    cport: u16,
    sport: u16,
}

impl Corpus {
    pub fn new(rng: &mut Pcg64Mcg, patterns: &[Vec<u8>], packets: usize) -> Corpus {
        let conns: Vec<Conn> = (0..CONNECTIONS)
            .map(|i| Conn {
                client: [198, 51, 100, (i % 250) as u8 + 1],
                server: [10, 0, (i / 250) as u8, rng.gen_range(1..255)],
                cport: 20000 + i as u16,
                sport: *pick(rng, &[80, 8080, 443, 25, 8000]),
            })
            .collect();
        let mut opening = Vec::new();
        for c in &conns {
            opening.push(tcp(c, true, SYN, &[]));
            opening.push(tcp(c, false, SYN | ACK, &[]));
            opening.push(tcp(c, true, ACK, &[]));
        }
        let payloads = (0..packets).map(|_| packet(rng, &conns, patterns)).collect();
        Corpus { opening, payloads }
    }
}

fn packet(rng: &mut Pcg64Mcg, conns: &[Conn], patterns: &[Vec<u8>]) -> Vec<u8> {
    let c = pick(rng, conns);
    let mut payload = match rng.gen_range(0..20) {
        0..=8 => http_request(rng),
        9..=10 => http_response(rng),
        11..=12 => binary(rng),
        13..=16 => dns_query(rng),
        17..=18 => binary(rng),
        _ => binary(rng)[..32].to_vec(),
    };
    if !patterns.is_empty() && rng.gen_ratio(1, 30) {
        let at = rng.gen_range(0..=payload.len());
        payload.splice(at..at, pick(rng, patterns).iter().copied());
    }
    let server = [10, 0, rng.gen_range(0..3), rng.gen_range(1..255)];
    match rng.gen_range(0..20) {
        0..=10 => tcp(c, true, PSH_ACK, &payload),
        11..=12 => tcp(c, false, PSH_ACK, &payload),
        13..=16 => ip(c.client, server, 17, &udp(rng.gen_range(1024..65535), 53, &payload)),
        17..=18 => ip(c.client, server, 17, &udp(rng.gen_range(1024..65535), rng.gen_range(1..65535), &payload)),
        _ => ip(c.client, server, 1, &[&[8, 0, 0, 0, 0, 1, 0, 1][..], &payload].concat()),
    }
}

fn http_request(rng: &mut Pcg64Mcg) -> Vec<u8> {
    let path: Vec<String> = (0..rng.gen_range(1..5)).map(|_| word(rng)).collect();
    let method = pick(rng, &["GET", "GET", "POST", "HEAD"]);
    format!(
        "{method} /{}?id={} HTTP/1.1\r\nHost: www.{}.example\r\nUser-Agent: Mozilla/5.0 ({})\r\nAccept: */*\r\n\r\n",
        path.join("/"),
        rng.gen_range(0..100000),
        word(rng),
        word(rng)
    )
    .into_bytes()
}

fn http_response(rng: &mut Pcg64Mcg) -> Vec<u8> {
    let body: Vec<String> = (0..rng.gen_range(10..150)).map(|_| word(rng)).collect();
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html><body>{}</body></html>", body.join(" "))
        .into_bytes()
}

fn binary(rng: &mut Pcg64Mcg) -> Vec<u8> {
    (0..rng.gen_range(64..1400)).map(|_| rng.gen()).collect()
}

fn dns_query(rng: &mut Pcg64Mcg) -> Vec<u8> {
    let mut q = vec![0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    q[..2].copy_from_slice(&rng.gen::<u16>().to_be_bytes());
    for label in [word(rng), word(rng), "com".to_string()] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// A TCP segment of `c`, from the client when `to_server`.
fn tcp(c: &Conn, to_server: bool, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sport, dport) =
        if to_server { (c.client, c.server, c.cport, c.sport) } else { (c.server, c.client, c.sport, c.cport) };
    let mut h = vec![0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    h[14..16].copy_from_slice(&65535u16.to_be_bytes());
    h.extend_from_slice(payload);
    ip(src, dst, 6, &h)
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 8];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// Ethernet and IPv4 (checksum left zero: the IPS does not read it)
/// around `l4`.
fn ip(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + l4.len()) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0]);
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(l4);
    f
}
