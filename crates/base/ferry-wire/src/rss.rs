//! Emulation of NIC receive-side scaling (RSS), to predict which receive
//! queue a flow lands on.
//!
//! Real NICs hash the 5-tuple with a Toeplitz hash and a 40-byte key, then
//! index a 128-entry indirection table that the driver fills round-robin
//! with queue numbers. We use the well-known default key from Microsoft's
//! RSS specification (many drivers ship it; Linux usually randomizes the key
//! at boot unless set with `ethtool -X ... hkey`), so predictions hold only
//! when the device under test is configured with that key. Tests in the
//! testbed can set it with ethtool, or use the queue split of
//! ferry-traffic's `FlowSchedule::for_queue` instead, which needs no NIC help.

use std::net::IpAddr;

use crate::{FiveTuple, L4Proto};

/// The Microsoft RSS verification key.
pub const DEFAULT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b,
    0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac,
    0x01, 0xfa,
];

/// Size of the indirection table most NICs use.
pub const RSS_TABLE_SIZE: u32 = 128;

/// Toeplitz hash of `input` under `key` (key must be at least
/// `input.len() + 4` bytes).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    assert!(key.len() >= input.len() + 4, "RSS key too short for input");
    let mut hash = 0u32;
    // The 32-bit window of the key that lines up with the current input bit.
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, byte) in input.iter().enumerate() {
        let next = key[i + 4];
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | u32::from((next >> (7 - bit)) & 1);
        }
    }
    hash
}

/// RSS hash of a flow as a NIC computes it: the addresses (4 or 16 bytes
/// each) and, for TCP and UDP, the ports (NICs hash ICMP on addresses
/// only; UDP port hashing must be enabled with `ethtool -N ... rx-flow-hash
/// udp4 sdfn` on most drivers). The IPv6 input, 36 bytes, is what the
/// 40-byte key is sized for.
pub fn rss_hash(tuple: &FiveTuple, key: &[u8; 40]) -> u32 {
    let mut input = [0u8; 36];
    let mut len = 0;
    for addr in [tuple.src_ip, tuple.dst_ip] {
        let octets = match addr {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        input[len..len + octets.len()].copy_from_slice(&octets);
        len += octets.len();
    }
    if matches!(tuple.proto, L4Proto::Udp | L4Proto::Tcp) {
        input[len..len + 2].copy_from_slice(&tuple.src_port.to_be_bytes());
        input[len + 2..len + 4].copy_from_slice(&tuple.dst_port.to_be_bytes());
        len += 4;
    }
    toeplitz(key, &input[..len])
}

/// Receive queue for `tuple` among `nqueues`, assuming the default key and
/// a round-robin filled 128-entry indirection table (queue = entry mod n).
pub fn rss_queue(tuple: &FiveTuple, nqueues: u32) -> u32 {
    assert!(nqueues > 0, "nqueues must be positive");
    (rss_hash(tuple, &DEFAULT_RSS_KEY) % RSS_TABLE_SIZE) % nqueues
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(src: &str, sport: u16, dst: &str, dport: u16, proto: L4Proto) -> FiveTuple {
        FiveTuple {
            src_ip: src.parse().unwrap(),
            dst_ip: dst.parse().unwrap(),
            src_port: sport,
            dst_port: dport,
            proto,
        }
    }

    #[test]
    fn microsoft_verification_vectors() {
        // From the "Verifying the RSS Hash Calculation" table of the RSS spec.
        let cases = [
            ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e_8fc2, 0x51cc_c178),
            ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718_262a, 0xc626_b0ea),
            ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0_a5de, 0x5c2b_394a),
        ];
        for (s, sp, d, dp, ip_only, with_ports) in cases {
            assert_eq!(rss_hash(&tuple(s, sp, d, dp, L4Proto::Icmp), &DEFAULT_RSS_KEY), ip_only, "{s}");
            assert_eq!(rss_hash(&tuple(s, sp, d, dp, L4Proto::Tcp), &DEFAULT_RSS_KEY), with_ports, "{s}");
        }
    }

    #[test]
    fn spreads_over_queues() {
        let mut counts = [0u32; 4];
        for i in 0..4000u32 {
            let t = tuple("10.0.0.1", (1024 + i) as u16, "10.1.0.1", 5001, L4Proto::Udp);
            counts[rss_queue(&t, 4) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }
}
