//! Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums are kept as folded, non-inverted 16-bit one's complement values so
//! that partial sums (pseudo-header, header, payload) can be combined with
//! [`add`] and turned into a checksum field with `!sum` only at the end.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One's complement sum of `data` read as big-endian 16-bit words, folded to
/// 16 bits, not inverted. An odd trailing byte is padded with zero, as
/// RFC 1071 requires; so only the *last* piece of a checksummed region may
/// have odd length.
pub fn ones_sum(data: &[u8]) -> u16 {
    // Summing 32-bit words into a u64 is valid because 2^16 ≡ 1 (mod 2^16-1),
    // and roughly halves the work compared with 16-bit words. It cannot
    // overflow for any slice shorter than 2^34 bytes.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc += u64::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
        i += 2;
    }
    if i < rest.len() {
        acc += u64::from(rest[i]) << 8;
    }
    fold(acc)
}

/// Folds a wide sum into 16 bits with end-around carry.
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// One's complement addition of two folded sums.
pub fn add(a: u16, b: u16) -> u16 {
    fold(u64::from(a) + u64::from(b))
}

/// The checksum field value for `data` alone (`!ones_sum(data)`).
pub fn checksum(data: &[u8]) -> u16 {
    !ones_sum(data)
}

/// Sum of the IPv4 pseudo-header used by UDP and TCP (RFC 768, RFC 793):
/// source, destination, zero, protocol, L4 length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u64::from(u16::from_be_bytes([s[0], s[1]]))
        + u64::from(u16::from_be_bytes([s[2], s[3]]))
        + u64::from(u16::from_be_bytes([d[0], d[1]]))
        + u64::from(u16::from_be_bytes([d[2], d[3]]))
        + u64::from(protocol)
        + u64::from(l4_len);
    fold(acc)
}

/// Sum of the IPv6 pseudo-header used by TCP, UDP and ICMPv6 (RFC 8200
/// §8.1): source, destination, the 32-bit upper-layer length, three zero
/// bytes and the next header.
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, upper_len: u32) -> u16 {
    let words = |a: Ipv6Addr| {
        let o = a.octets();
        (0..8).map(move |i| u64::from(u16::from_be_bytes([o[2 * i], o[2 * i + 1]])))
    };
    let acc: u64 = words(src).chain(words(dst)).sum::<u64>()
        + u64::from(upper_len >> 16)
        + u64::from(upper_len & 0xffff)
        + u64::from(next_header);
    fold(acc)
}

/// The pseudo-header sum of an upper-layer header from `src` to `dst`:
/// IPv4's (RFC 768, RFC 793) when both are IPv4, else IPv6's (RFC 8200
/// §8.1), an IPv4 address among them taken IPv4-mapped.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, len: usize) -> u16 {
    use crate::prefix::to_flow_space;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(s, d, protocol, len as u16),
        _ => pseudo_header_v6(to_flow_space(src), to_flow_space(dst), protocol, len as u32),
    }
}

/// RFC 1624 eqn. 3: new checksum after one 16-bit word of the covered data
/// changed from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
///
/// Eqn. 3 (rather than eqn. 2 of RFC 1141) is used because it never turns a
/// valid checksum into the "negative zero" 0xffff form wrongly.
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    !add(add(!csum, !old), new)
}

/// [`update16`] for a whole changed region: `old` and `new` are the bytes
/// before and after the change and must have the same length and start at an
/// even offset within the checksummed data (so words line up).
///
/// Works because the one's complement sum of the complemented words equals
/// the complement of their sum.
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    !add(add(!csum, !ones_sum(old)), ones_sum(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(ones_sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(ones_sum(&[0xff]), 0xff00);
        assert_eq!(ones_sum(&[]), 0);
    }

    #[test]
    fn chunked_sum_matches_word_sum() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut acc = 0u64;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
            acc += u64::from(w);
        }
        assert_eq!(ones_sum(&data), fold(acc));
    }

    #[test]
    fn incremental_matches_full() {
        // ICMP echo request from Linux ping (type 8) turned into a reply (type 0).
        assert_eq!(update16(0x72f8, 0x0800, 0x0000), 0x7af8);
        let mut data: Vec<u8> = (0..64u8).collect();
        let before = checksum(&data);
        let old = data[10..26].to_vec();
        for b in &mut data[10..26] {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let after = update_bytes(before, &old, &data[10..26]);
        assert_eq!(after, checksum(&data));
    }
}
