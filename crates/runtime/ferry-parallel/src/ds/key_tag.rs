//! Key tags: a cheap 64-bit fingerprint of a key, stored with each access
//! so the profiler can tell "same key" from "same bucket, other key".

use std::hash::{Hash, Hasher};

/// FxHash's mixing step (rotate, xor, multiply): a few cycles per word,
/// and independent of the user's bucket hash.
struct KeyTagHasher(u64);

const SEED: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for KeyTagHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }
}

/// The tag of `key`: equal keys give equal tags; never 0 (0 means "the
/// operation has no key").
pub fn key_tag<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut hasher = KeyTagHasher(0);
    key.hash(&mut hasher);
    hasher.finish() | 1
}

#[cfg(test)]
mod tests {
    use super::key_tag;

    #[test]
    fn equal_keys_equal_tags_and_never_zero() {
        assert_eq!(key_tag(&(1u32, 2u16)), key_tag(&(1u32, 2u16)));
        assert_ne!(key_tag(&1u64), key_tag(&2u64));
        assert_ne!(key_tag(&0u64), 0);
    }
}
