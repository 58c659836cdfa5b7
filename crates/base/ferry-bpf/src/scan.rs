//! The payload-scan element's config (`struct ferry_pl_scan`,
//! `bpf/include/ferry_scan.h`): up to [`SCAN_MAX_PATTERNS`] byte strings
//! of 1 to [`SCAN_MAX_LEN`] bytes, looked for in the first
//! [`SCAN_WINDOW`] bytes of an IPv4 TCP or UDP payload. A [`PlScan`] is
//! only built from patterns within those limits.

use crate::BpfError;

pub const SCAN_MAX_PATTERNS: usize = 16;
pub const SCAN_MAX_LEN: usize = 32;
pub const SCAN_WINDOW: usize = 256;
/// Scan configs a pipeline holds (indices 1 to 63: 0 is never used).
pub const SCAN_CONFIGS: u32 = 64;
/// On a match: drop the frame.
pub const SCAN_DROP: u32 = 0;
/// On a match: count it and let the frame go on.
pub const SCAN_PASS: u32 = 1;

/// `struct ferry_pl_scan`.
pub type PlScan = crate::abi::gen::ferry_pl_scan;

const _: () = assert!(std::mem::size_of::<PlScan>() == 16 + 32 + SCAN_MAX_PATTERNS + SCAN_MAX_PATTERNS * SCAN_MAX_LEN);

// SAFETY: plain-old-data; every bit pattern is valid (padding is explicit).
unsafe impl aya::Pod for PlScan {}

impl PlScan {
    /// The config for `patterns`, `action` on a match (SCAN_DROP or
    /// SCAN_PASS), matches counted in counter config `counter`.
    pub fn new(patterns: &[Vec<u8>], action: u32, counter: u32) -> Result<PlScan, BpfError> {
        if patterns.is_empty() || patterns.len() > SCAN_MAX_PATTERNS {
            return Err(BpfError::Config(format!(
                "payload scan: {} patterns, the element takes 1 to {SCAN_MAX_PATTERNS}",
                patterns.len()
            )));
        }
        if action != SCAN_DROP && action != SCAN_PASS {
            return Err(BpfError::Config(format!("payload scan: action {action}, not drop (0) or pass (1)")));
        }
        let mut s = PlScan {
            patterns: patterns.len() as u32,
            action,
            counter,
            _pad: 0,
            first: [0; 32],
            len: [0; SCAN_MAX_PATTERNS],
            bytes: [[0; SCAN_MAX_LEN]; SCAN_MAX_PATTERNS],
        };
        for (i, p) in patterns.iter().enumerate() {
            if p.is_empty() || p.len() > SCAN_MAX_LEN {
                return Err(BpfError::Config(format!(
                    "payload scan: pattern {i} has {} bytes, the element takes 1 to {SCAN_MAX_LEN}",
                    p.len()
                )));
            }
            s.first[usize::from(p[0] >> 3)] |= 1 << (p[0] & 7);
            s.len[i] = p.len() as u8;
            s.bytes[i][..p.len()].copy_from_slice(p);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_within_the_limits_and_names_what_is_over() {
        let s = PlScan::new(&[b"GET /admin".to_vec(), vec![0xde, 0xad]], SCAN_DROP, 7).unwrap();
        assert_eq!((s.patterns, s.len[0], s.len[1], s.counter), (2, 10, 2, 7));
        assert_eq!(&s.bytes[1][..3], &[0xde, 0xad, 0]);
        // First bytes 'G' (0x47) and 0xde.
        assert_eq!((s.first[0x47 >> 3], s.first[0xde >> 3]), (1 << 7, 1 << 6));
        assert_eq!(s.first.iter().map(|b| b.count_ones()).sum::<u32>(), 2);
        let e = PlScan::new(&vec![b"x".to_vec(); 17], SCAN_DROP, 1).unwrap_err().to_string();
        assert!(e.contains("17 patterns"), "{e}");
        let e = PlScan::new(&[vec![b'y'; 33]], SCAN_DROP, 1).unwrap_err().to_string();
        assert!(e.contains("pattern 0 has 33 bytes"), "{e}");
        assert!(PlScan::new(&[vec![]], SCAN_DROP, 1).is_err());
        assert!(PlScan::new(&[b"z".to_vec()], 2, 1).is_err());
    }
}
