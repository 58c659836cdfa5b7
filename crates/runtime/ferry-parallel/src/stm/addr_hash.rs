//! A hasher for object addresses, the key of a transaction's access index.
//! Addresses are already unique; one multiply spreads them over the table
//! (std's SipHash would cost more than the rest of an access).

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        // Objects are 64-byte aligned: drop the constant low bits first.
        self.0 = ((n as u64) >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub(crate) type AddrBuildHasher = BuildHasherDefault<AddrHasher>;
