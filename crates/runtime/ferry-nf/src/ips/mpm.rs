//! The IPS's multi-pattern matcher: which of its fast patterns occur in
//! a payload, ASCII case folded, each found wherever it occurs
//! (overlapping ones included).
//!
//! A hash filter, as the Wu-Manber family and Snort's and Suricata's
//! hash matchers do, rather than an Aho-Corasick automaton: an
//! automaton's walk is one chain of dependent loads through a table that
//! outgrows the cache past a few hundred patterns (a cache miss a byte),
//! while here each position is looked up on its own in a bitmap sized
//! to stay in cache:
//! * a pattern of 4 bytes or more is filed under its first 4; each
//!   position's 4 bytes are hashed into the bitmap, and only a set bit
//!   looks the patterns filed under them up and compares them whole;
//! * one of 2 or 3 bytes is filed under its first 2, in a bitmap of
//!   every 2-byte value (8 KiB), and one of 1 byte in a 256-bit one.
//!
//! Guarantee: [`Mpm::find`] reports pattern `p` if and only if `p`
//! occurs in the payload, case folded (checked against a plain search
//! in the tests).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hash-filter bits per long pattern: about one position in 64 passes
/// the filter without a pattern behind it.
const BITS_PER_PATTERN: usize = 64;

/// Largest payload folded without allocating (a jumbo frame's).
const MAX_FOLDED: usize = 9216;

pub struct Mpm {
    /// Case-folded patterns, by id.
    patterns: Vec<Vec<u8>>,
    /// Long patterns by their first 4 bytes (as a little-endian u32).
    long: HashMap<u32, Vec<u32>, BuildHasherDefault<KeyHasher>>,
    /// One bit per hash of a long pattern's first 4 bytes.
    filter: Vec<u64>,
    shift: u32,
    /// Patterns of 2 or 3 bytes by their first 2 (little-endian), and
    /// which 2-byte values have any.
    short: HashMap<u16, Vec<u32>, BuildHasherDefault<KeyHasher>>,
    short_filter: Vec<u64>,
    /// Patterns of 1 byte, by it, and which bytes have any.
    single: Vec<Vec<u32>>,
    single_filter: [u64; 4],
    /// The payload, case folded.
    folded: Vec<u8>,
}

impl Mpm {
    /// A matcher of `patterns` (none empty), ids in their order.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a [u8]>) -> Mpm {
        let patterns: Vec<Vec<u8>> = patterns.into_iter().map(|p| p.to_ascii_lowercase()).collect();
        let n_long = patterns.iter().filter(|p| p.len() >= 4).count();
        let bits = (n_long * BITS_PER_PATTERN).next_power_of_two().max(1 << 12);
        let mut m = Mpm {
            long: HashMap::default(),
            filter: vec![0; bits / 64],
            shift: 32 - bits.trailing_zeros(),
            short: HashMap::default(),
            short_filter: vec![0; (1 << 16) / 64],
            single: vec![Vec::new(); 256],
            single_filter: [0; 4],
            folded: Vec::with_capacity(MAX_FOLDED),
            patterns: Vec::new(),
        };
        for (id, p) in patterns.iter().enumerate() {
            assert!(!p.is_empty(), "an empty pattern");
            if p.len() >= 4 {
                let key = key(p);
                let h = m.hash(key);
                m.filter[h / 64] |= 1 << (h % 64);
                m.long.entry(key).or_default().push(id as u32);
            } else if p.len() >= 2 {
                let key = u16::from_le_bytes([p[0], p[1]]);
                m.short_filter[usize::from(key / 64)] |= 1 << (key % 64);
                m.short.entry(key).or_default().push(id as u32);
            } else {
                m.single_filter[usize::from(p[0] >> 6)] |= 1 << (p[0] & 63);
                m.single[usize::from(p[0])].push(id as u32);
            }
        }
        m.patterns = patterns;
        m
    }

    /// The patterns of 1 to 3 bytes that start `rest` (not empty).
    #[inline]
    fn short_at(&self, rest: &[u8], found: &mut impl FnMut(u32)) {
        let b = rest[0];
        if self.single_filter[usize::from(b >> 6)] & (1 << (b & 63)) != 0 {
            self.single[usize::from(b)].iter().for_each(|&id| found(id));
        }
        let [_, second, ..] = *rest else { return };
        let key = u16::from_le_bytes([b, second]);
        if self.short_filter[usize::from(key / 64)] & (1 << (key % 64)) == 0 {
            return;
        }
        for &id in self.short.get(&key).into_iter().flatten() {
            let p = &self.patterns[id as usize];
            if p.len() == 2 || rest.get(2) == p.get(2) {
                found(id);
            }
        }
    }

    fn hash(&self, key: u32) -> usize {
        (key.wrapping_mul(0x9E37_79B1) >> self.shift) as usize
    }

    /// Calls `found` with the id of each pattern at each place it occurs
    /// in `payload` (a pattern found twice is reported twice).
    pub fn find(&mut self, payload: &[u8], mut found: impl FnMut(u32)) {
        if self.patterns.is_empty() {
            return;
        }
        let mut folded = std::mem::take(&mut self.folded);
        folded.clear();
        folded.extend_from_slice(payload);
        folded.make_ascii_lowercase();
        // Most rulesets' fast patterns are all 4 bytes or longer.
        let any_short = !self.short.is_empty() || self.single_filter != [0; 4];
        for i in 0..folded.len() {
            let rest = &folded[i..];
            if any_short {
                self.short_at(rest, &mut found);
            }
            if rest.len() < 4 {
                continue;
            }
            let key = key(rest);
            let h = self.hash(key);
            if self.filter[h / 64] & (1 << (h % 64)) == 0 {
                continue;
            }
            for &id in self.long.get(&key).into_iter().flatten() {
                if rest.starts_with(&self.patterns[id as usize]) {
                    found(id);
                }
            }
        }
        // Keep the buffer (and its capacity) for the next payload.
        self.folded = folded;
    }
}

/// Hashes a 4-byte key by one multiplication: the keys are the
/// patterns' own, not an attacker's choice of many.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u16(&mut self, key: u16) {
        self.write_u32(u32::from(key));
    }

    fn write_u32(&mut self, key: u32) {
        self.0 = u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The first 4 bytes, as a number.
fn key(bytes: &[u8]) -> u32 {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(m: &mut Mpm, payload: &[u8]) -> Vec<u32> {
        let mut ids = Vec::new();
        m.find(payload, |id| ids.push(id));
        ids.sort();
        ids
    }

    #[test]
    fn every_occurrence_short_long_and_overlapping() {
        let pats: [&[u8]; 5] = [b"abcab", b"cab", b"a", b"GET /", b"\x00\xff"];
        let mut m = Mpm::new(pats);
        assert_eq!(found(&mut m, b"xabcabcabx"), [0, 0, 1, 1, 2, 2, 2]);
        assert_eq!(found(&mut m, b"get /x"), [3]);
        assert_eq!(found(&mut m, b"\x00\xff\x00"), [4]);
        assert_eq!(found(&mut m, b""), Vec::<u32>::new());
        assert_eq!(found(&mut Mpm::new([]), b"abc"), Vec::<u32>::new());
    }

    proptest::proptest! {
        /// The matcher reports what a plain search finds, position by
        /// position, over a small alphabet (so patterns overlap, share
        /// prefixes and differ only in case).
        #[test]
        fn it_finds_what_a_plain_search_finds(
            pats in proptest::collection::vec(proptest::collection::vec(proptest::sample::select(b"abAB\x00".to_vec()), 1..7), 1..40),
            payload in proptest::collection::vec(proptest::sample::select(b"abAB\x00x".to_vec()), 0..64),
        ) {
            let mut m = Mpm::new(pats.iter().map(Vec::as_slice));
            let folded = payload.to_ascii_lowercase();
            let mut want: Vec<u32> = Vec::new();
            for (id, p) in pats.iter().enumerate() {
                let p = p.to_ascii_lowercase();
                want.extend(folded.windows(p.len()).filter(|w| *w == p.as_slice()).map(|_| id as u32));
            }
            want.sort();
            proptest::prop_assert_eq!(found(&mut m, &payload), want);
        }
    }
}
