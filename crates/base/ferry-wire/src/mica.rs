//! MICA's datagram protocol (the key-value cache of FLASH's real-world
//! chain): a UDP payload holding a batch of requests, answered by a batch
//! of responses. Fields are little-endian, as MICA lays them out on x86.
//!
//! ```text
//! batch:    magic (0x78 request, 0x79 response) | count | reserved (4)
//! request:  operation | result | reserved (2) | key_len << 24 | value_len (4)
//!           key hash (8) | opaque (4) | reserved (4)
//!           key, padded to 8 | value, padded to 8
//! ```
//!
//! A response has the request's operation, key hash and opaque, its
//! result, no key, and (for a GET that found the key) the value.
//!
//! Ferry's MICA NF (`examples/c-nf/mica.c`) preloads keys `0..n`: key `i`
//! is `i` as 8 little-endian bytes, hashed with [`key_hash`], and its value
//! is [`value_of`]`(i, size)`, which is also what a SET of key `i` writes,
//! so a client can check every GET reply without state.

use crate::WireError;

pub const MAGIC_REQUEST: u8 = 0x78;
pub const MAGIC_RESPONSE: u8 = 0x79;
pub const BATCH_HEADER_LEN: usize = 6;
pub const REQUEST_HEADER_LEN: usize = 24;
/// Longest key (8 bits of the length word).
pub const MAX_KEY_LEN: usize = 255;
/// Longest value (24 bits of the length word).
pub const MAX_VALUE_LEN: usize = (1 << 24) - 1;

/// Operations (MICA's `Operation`).
pub mod operation {
    pub const SET: u8 = 4;
    pub const GET: u8 = 5;
}

/// Results (MICA's `Result`).
pub mod result {
    pub const SUCCESS: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const INSUFFICIENT_SPACE: u8 = 2;
    pub const NOT_FOUND: u8 = 4;
    pub const NOT_PROCESSED: u8 = 6;
    pub const NOT_SUPPORTED: u8 = 7;
}

mod field {
    pub const MAGIC: usize = 0;
    pub const COUNT: usize = 1;
    pub const OPERATION: usize = 0;
    pub const RESULT: usize = 1;
    pub const KV_LENGTHS: core::ops::Range<usize> = 4..8;
    pub const KEY_HASH: core::ops::Range<usize> = 8..16;
    pub const OPAQUE: core::ops::Range<usize> = 16..20;
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// FNV-1a, 64 bits: the key hash clients send (MICA leaves the hash to
/// the client; the cache partitions and indexes by it).
pub fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Key `i` of the preloaded set: `i` as 8 little-endian bytes.
pub fn key_of(i: u64) -> [u8; 8] {
    i.to_le_bytes()
}

/// The value of key `i`, `len` bytes: byte `j` is `(i * 131 + j * 7) mod 256`.
pub fn value_of(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i.wrapping_mul(131).wrapping_add(j as u64 * 7)) as u8).collect()
}

/// One request or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MicaRequestRepr<'a> {
    pub operation: u8,
    pub result: u8,
    pub key_hash: u64,
    pub opaque: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> MicaRequestRepr<'a> {
    /// Parses the request at the start of `buf`; returns it and its
    /// length (padding included).
    pub fn parse(buf: &'a [u8]) -> Result<(MicaRequestRepr<'a>, usize), WireError> {
        if buf.len() < REQUEST_HEADER_LEN {
            return Err(WireError::Truncated { layer: "mica request", need: REQUEST_HEADER_LEN, have: buf.len() });
        }
        let lengths = u32::from_le_bytes(buf[field::KV_LENGTHS].try_into().expect("4 bytes"));
        let (key_len, value_len) = ((lengths >> 24) as usize, (lengths & 0x00ff_ffff) as usize);
        let key_at = REQUEST_HEADER_LEN;
        let value_at = key_at + pad8(key_len);
        let end = value_at + pad8(value_len);
        if buf.len() < end {
            return Err(WireError::Truncated { layer: "mica key-value", need: end, have: buf.len() });
        }
        let repr = MicaRequestRepr {
            operation: buf[field::OPERATION],
            result: buf[field::RESULT],
            key_hash: u64::from_le_bytes(buf[field::KEY_HASH].try_into().expect("8 bytes")),
            opaque: u32::from_le_bytes(buf[field::OPAQUE].try_into().expect("4 bytes")),
            key: &buf[key_at..key_at + key_len],
            value: &buf[value_at..value_at + value_len],
        };
        Ok((repr, end))
    }

    pub fn buffer_len(&self) -> usize {
        REQUEST_HEADER_LEN + pad8(self.key.len()) + pad8(self.value.len())
    }

    /// Writes the request at the start of `buf` (`buffer_len` bytes,
    /// padding zeroed). Keys over 255 bytes and values over 16 MiB - 1 do
    /// not fit the length word: the caller keeps within them.
    pub fn emit(&self, buf: &mut [u8]) {
        assert!(self.key.len() <= MAX_KEY_LEN && self.value.len() <= MAX_VALUE_LEN, "MICA key or value too long");
        let len = self.buffer_len();
        buf[..len].fill(0);
        buf[field::OPERATION] = self.operation;
        buf[field::RESULT] = self.result;
        let lengths = ((self.key.len() as u32) << 24) | self.value.len() as u32;
        buf[field::KV_LENGTHS].copy_from_slice(&lengths.to_le_bytes());
        buf[field::KEY_HASH].copy_from_slice(&self.key_hash.to_le_bytes());
        buf[field::OPAQUE].copy_from_slice(&self.opaque.to_le_bytes());
        let key_at = REQUEST_HEADER_LEN;
        buf[key_at..key_at + self.key.len()].copy_from_slice(self.key);
        let value_at = key_at + pad8(self.key.len());
        buf[value_at..value_at + self.value.len()].copy_from_slice(self.value);
    }
}

/// A batch: its magic and count, then the requests.
#[derive(Debug, Clone)]
pub struct MicaBatch<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MicaBatch<T> {
    /// A batch header with a known magic.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < BATCH_HEADER_LEN {
            return Err(WireError::Truncated { layer: "mica batch", need: BATCH_HEADER_LEN, have: b.len() });
        }
        if b[field::MAGIC] != MAGIC_REQUEST && b[field::MAGIC] != MAGIC_RESPONSE {
            return Err(WireError::BadLength { layer: "mica batch", field: "magic", value: b[field::MAGIC].into() });
        }
        Ok(MicaBatch { buffer })
    }

    pub fn magic(&self) -> u8 {
        self.buffer.as_ref()[field::MAGIC]
    }

    pub fn count(&self) -> usize {
        self.buffer.as_ref()[field::COUNT].into()
    }

    /// The batch's requests (or responses), all of them or an error.
    pub fn requests(&self) -> Result<Vec<MicaRequestRepr<'_>>, WireError> {
        let mut at = BATCH_HEADER_LEN;
        let mut out = Vec::with_capacity(self.count());
        for _ in 0..self.count() {
            let (r, len) = MicaRequestRepr::parse(&self.buffer.as_ref()[at..])?;
            out.push(r);
            at += len;
        }
        Ok(out)
    }
}

/// The length of a batch of `requests`.
pub fn batch_len(requests: &[MicaRequestRepr]) -> usize {
    BATCH_HEADER_LEN + requests.iter().map(MicaRequestRepr::buffer_len).sum::<usize>()
}

/// Writes a batch (`batch_len` bytes) at the start of `buf`.
pub fn emit_batch(buf: &mut [u8], magic: u8, requests: &[MicaRequestRepr]) {
    assert!(requests.len() <= 255, "a MICA batch holds at most 255 requests");
    buf[..BATCH_HEADER_LEN].fill(0);
    buf[field::MAGIC] = magic;
    buf[field::COUNT] = requests.len() as u8;
    let mut at = BATCH_HEADER_LEN;
    for r in requests {
        r.emit(&mut buf[at..]);
        at += r.buffer_len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of a GET of key 7 (opaque 1) and a SET of key 9 with a
    /// 3-byte value (opaque 2), byte for byte.
    const BATCH: [u8; 6 + 32 + 40] = [
        0x78, 2, 0, 0, 0, 0, //
        5, 0, 0, 0, 0, 0, 0, 8, 0x11, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, //
        7, 0, 0, 0, 0, 0, 0, 0, //
        4, 0, 0, 0, 3, 0, 0, 8, 0x22, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, //
        9, 0, 0, 0, 0, 0, 0, 0, //
        0xa, 0xb, 0xc, 0, 0, 0, 0, 0,
    ];

    fn requests() -> [MicaRequestRepr<'static>; 2] {
        [
            MicaRequestRepr {
                operation: operation::GET,
                result: 0,
                key_hash: 0x11,
                opaque: 1,
                key: &[7, 0, 0, 0, 0, 0, 0, 0],
                value: &[],
            },
            MicaRequestRepr {
                operation: operation::SET,
                result: 0,
                key_hash: 0x22,
                opaque: 2,
                key: &[9, 0, 0, 0, 0, 0, 0, 0],
                value: &[0xa, 0xb, 0xc],
            },
        ]
    }

    #[test]
    fn a_batch_parses_and_emits_back_to_the_same_bytes() {
        let b = MicaBatch::new_checked(&BATCH[..]).unwrap();
        assert_eq!((b.magic(), b.count()), (MAGIC_REQUEST, 2));
        assert_eq!(b.requests().unwrap(), requests());
        let mut out = [0xffu8; BATCH.len()];
        assert_eq!(batch_len(&requests()), BATCH.len());
        emit_batch(&mut out, MAGIC_REQUEST, &requests());
        assert_eq!(out, BATCH);
    }

    #[test]
    fn malformed_batches_are_refused() {
        let e = MicaBatch::new_checked(&BATCH[..5]).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let mut bad = BATCH;
        bad[0] = 0x77;
        assert!(MicaBatch::new_checked(&bad[..]).unwrap_err().to_string().contains("magic"));
        // The second request's value runs past the end.
        let b = MicaBatch::new_checked(&BATCH[..BATCH.len() - 1]).unwrap();
        assert!(b.requests().unwrap_err().to_string().contains("mica key-value"));
    }

    #[test]
    fn preloaded_keys_and_values_are_fixed() {
        assert_eq!(key_of(7), [7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(value_of(2, 4), [6, 13, 20, 27]);
        // FNV-1a 64 of the empty string and of "a".
        assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
