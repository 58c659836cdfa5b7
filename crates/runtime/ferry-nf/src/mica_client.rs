//! FLASH's MICA workload: the client that writes request batches
//! ([`MicaClient`]) and the check the sink runs on the responses
//! ([`MicaCheck`]).
//!
//! Keys are the MICA NF's preloaded set (`ferry_wire::mica::key_of`),
//! drawn uniformly or by Zipf popularity. Every request carries its key's
//! index as its opaque, and a SET of key `i` writes `value_of(i, len)`,
//! the value the cache preloads for it: so the value a GET returns is
//! known from the response alone, and the sink checks it byte for byte
//! without keeping state.

use std::str::FromStr;

use ferry_wire::mica::{self, operation, result, MicaBatch, MicaRequestRepr, MAGIC_REQUEST, MAGIC_RESPONSE};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use rand_pcg::Pcg64Mcg;
use serde::Serialize;

/// Why a MICA workload or batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MicaError {
    #[error("bad {field} {value:?}: {reason}")]
    Bad { field: &'static str, value: String, reason: &'static str },
    #[error("buffer of {have} bytes cannot hold a {need}-byte batch")]
    BufferTooSmall { need: usize, have: usize },
}

impl MicaError {
    fn bad(field: &'static str, value: impl ToString, reason: &'static str) -> MicaError {
        MicaError::Bad { field, value: value.to_string(), reason }
    }
}

type Result<T> = std::result::Result<T, MicaError>;

/// Where the batch starts in the frames Ferry's generators build: after
/// Ethernet, IPv4 without options and UDP headers.
pub const BATCH_AT: usize = 14 + 20 + 8;

/// Key popularity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    Uniform,
    /// Zipf with this exponent (FLASH and MICA use 0.99).
    Zipf(f64),
}

/// What the client sends: `keys=N,get=F,dist=uniform|zipf:S,value=B,batch=R`.
#[derive(Debug, Clone, PartialEq)]
pub struct MicaWorkload {
    /// Keys `0..keys`, as the cache preloads them.
    pub keys: u64,
    /// Share of GETs; the rest are SETs.
    pub get_ratio: f64,
    pub dist: KeyDist,
    /// Value length of SETs, and of the cache's preloaded values.
    pub value_len: usize,
    /// Requests per datagram.
    pub batch: usize,
}

impl Default for MicaWorkload {
    /// MICA's usual mix: 95% GETs, Zipf 0.99, 8-byte keys; FLASH's cache
    /// holds 64-byte values.
    fn default() -> Self {
        MicaWorkload { keys: 100_000, get_ratio: 0.95, dist: KeyDist::Zipf(0.99), value_len: 64, batch: 4 }
    }
}

/// Requests per datagram: MICA's count is one byte.
const MAX_BATCH: usize = 255;

impl FromStr for MicaWorkload {
    type Err = MicaError;

    fn from_str(spec: &str) -> Result<MicaWorkload> {
        let mut w = MicaWorkload::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) =
                item.split_once('=').ok_or_else(|| MicaError::bad("mica", item, "expected KEY=VALUE"))?;
            match key {
                "keys" => {
                    w.keys = value.parse().map_err(|_| MicaError::bad("mica keys", value, "a count"))?;
                    if w.keys == 0 || w.keys > u64::from(u32::MAX) {
                        return Err(MicaError::bad("mica keys", value, "1 to 2^32 - 1 (the opaque holds the key)"));
                    }
                }
                "get" => {
                    w.get_ratio = value.parse().map_err(|_| MicaError::bad("mica get", value, "a share"))?;
                    if !(0.0..=1.0).contains(&w.get_ratio) {
                        return Err(MicaError::bad("mica get", value, "a share from 0 to 1"));
                    }
                }
                "dist" => {
                    w.dist = match value.split_once(':') {
                        None if value == "uniform" => KeyDist::Uniform,
                        Some(("zipf", s)) => match s.parse::<f64>() {
                            Ok(s) if s.is_finite() && s > 0.0 => KeyDist::Zipf(s),
                            _ => return Err(MicaError::bad("mica dist", value, "zipf:S with S > 0")),
                        },
                        _ => return Err(MicaError::bad("mica dist", value, "uniform or zipf:S")),
                    }
                }
                "value" => {
                    w.value_len = value.parse().map_err(|_| MicaError::bad("mica value", value, "bytes"))?;
                    if w.value_len == 0 || w.value_len > 1024 {
                        return Err(MicaError::bad("mica value", value, "1 to 1024 bytes"));
                    }
                }
                "batch" => {
                    w.batch = value.parse().map_err(|_| MicaError::bad("mica batch", value, "a count"))?;
                    if w.batch == 0 || w.batch > MAX_BATCH {
                        return Err(MicaError::bad("mica batch", value, "1 to 255 requests"));
                    }
                }
                _ => return Err(MicaError::bad("mica", key, "keys, get, dist, value or batch")),
            }
        }
        Ok(w)
    }
}

impl MicaWorkload {
    /// The longest request batch: every request a SET.
    pub fn max_batch_len(&self) -> usize {
        let key = mica::key_of(0);
        let value = vec![0; self.value_len];
        let set =
            MicaRequestRepr { operation: operation::SET, result: 0, key_hash: 0, opaque: 0, key: &key, value: &value };
        mica::batch_len(&vec![set; self.batch])
    }
}

/// What a client sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MicaSent {
    pub batches: u64,
    pub gets: u64,
    pub sets: u64,
}

/// Writes request batches of one workload, reproducibly from a seed.
pub struct MicaClient {
    w: MicaWorkload,
    rng: Pcg64Mcg,
    zipf: Option<Zipf<f64>>,
    /// Values of SETs are built per request: a buffer for them.
    values: Vec<Vec<u8>>,
    pub sent: MicaSent,
}

impl MicaClient {
    pub fn new(w: MicaWorkload, seed: u64) -> Result<MicaClient> {
        let zipf = match w.dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => {
                Some(Zipf::new(w.keys, s).map_err(|_| MicaError::bad("mica dist", s, "zipf:S with S > 0"))?)
            }
        };
        let values = vec![Vec::with_capacity(w.value_len); w.batch];
        Ok(MicaClient { w, rng: Pcg64Mcg::seed_from_u64(seed), zipf, values, sent: MicaSent::default() })
    }

    fn next_key(&mut self) -> u64 {
        match &self.zipf {
            // Zipf draws 1..=keys, the most popular first.
            Some(z) => (z.sample(&mut self.rng) as u64).clamp(1, self.w.keys) - 1,
            None => self.rng.gen_range(0..self.w.keys),
        }
    }

    /// Writes the next request batch at the start of `out`; returns its
    /// length, or an error if `out` is shorter than the longest batch.
    pub fn write_batch(&mut self, out: &mut [u8]) -> Result<usize> {
        let need = self.w.max_batch_len();
        if out.len() < need {
            return Err(MicaError::BufferTooSmall { need, have: out.len() });
        }
        let mut picks = Vec::with_capacity(self.w.batch);
        for i in 0..self.w.batch {
            let index = self.next_key();
            let get = self.rng.gen_bool(self.w.get_ratio);
            self.values[i].clear();
            if !get {
                self.values[i].extend(mica::value_of(index, self.w.value_len));
            }
            picks.push((index, get));
        }
        let keys: Vec<[u8; 8]> = picks.iter().map(|(index, _)| mica::key_of(*index)).collect();
        let requests: Vec<MicaRequestRepr> = picks
            .iter()
            .zip(&keys)
            .zip(&self.values)
            .map(|(((index, get), key), value)| MicaRequestRepr {
                operation: if *get { operation::GET } else { operation::SET },
                result: 0,
                key_hash: mica::key_hash(key),
                opaque: *index as u32,
                key,
                value: if *get { &[] } else { value },
            })
            .collect();
        let len = mica::batch_len(&requests);
        mica::emit_batch(&mut out[..len], MAGIC_REQUEST, &requests);
        let gets = picks.iter().filter(|(_, get)| *get).count() as u64;
        self.sent.batches += 1;
        self.sent.gets += gets;
        self.sent.sets += self.w.batch as u64 - gets;
        Ok(len)
    }
}

/// What the sink found in the responses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MicaCheck {
    /// Response batches, and the responses in them.
    pub batches: u64,
    pub responses: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub sets_stored: u64,
    /// SETs the cache refused (no room), and other results.
    pub sets_failed: u64,
    pub other_results: u64,
    /// GET hits whose value, or responses whose key hash, is not the
    /// key's: must stay 0.
    pub wrong: u64,
    /// Datagrams that are not a well-formed response batch.
    pub malformed: u64,
}

impl MicaCheck {
    /// Checks one UDP payload against the workload's value length.
    pub fn record(&mut self, payload: &[u8], value_len: usize) {
        let batch = MicaBatch::new_checked(payload).ok().filter(|b| b.magic() == MAGIC_RESPONSE);
        // The responses borrow the payload: nothing is copied per response.
        let Some(responses) = batch.as_ref().and_then(|b| b.requests().ok()) else {
            self.malformed += 1;
            return;
        };
        self.batches += 1;
        for r in responses {
            self.responses += 1;
            let index = u64::from(r.opaque);
            if r.key_hash != mica::key_hash(&mica::key_of(index)) {
                self.wrong += 1;
                continue;
            }
            match (r.operation, r.result) {
                (operation::GET, result::SUCCESS) if r.value == mica::value_of(index, value_len) => self.get_hits += 1,
                (operation::GET, result::SUCCESS) => self.wrong += 1,
                (operation::GET, result::NOT_FOUND) => self.get_misses += 1,
                (operation::SET, result::SUCCESS) => self.sets_stored += 1,
                (operation::SET, _) => self.sets_failed += 1,
                _ => self.other_results += 1,
            }
        }
    }

    pub fn merge(&mut self, o: &MicaCheck) {
        self.batches += o.batches;
        self.responses += o.responses;
        self.get_hits += o.get_hits;
        self.get_misses += o.get_misses;
        self.sets_stored += o.sets_stored;
        self.sets_failed += o.sets_failed;
        self.other_results += o.other_results;
        self.wrong += o.wrong;
        self.malformed += o.malformed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_and_names_bad_fields() {
        let w: MicaWorkload = "keys=1000,get=0.5,dist=uniform,value=16,batch=8".parse().unwrap();
        assert_eq!(w, MicaWorkload { keys: 1000, get_ratio: 0.5, dist: KeyDist::Uniform, value_len: 16, batch: 8 });
        assert_eq!("dist=zipf:0.99".parse::<MicaWorkload>().unwrap().dist, KeyDist::Zipf(0.99));
        for (bad, field) in [
            ("keys=0", "mica keys"),
            ("get=1.5", "mica get"),
            ("dist=zipf", "mica dist"),
            ("batch=256", "mica batch"),
            ("value=0", "mica value"),
            ("colour=red", "mica"),
        ] {
            let e = bad.parse::<MicaWorkload>().unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad {field} ")), "{bad}: {e}");
        }
    }

    /// What the cache answers for `batch`: every key preloaded, every SET
    /// stored (the way examples/c-nf/mica.c answers when nothing was
    /// evicted).
    fn answer(batch: &[u8], value_len: usize) -> Vec<u8> {
        let b = MicaBatch::new_checked(batch).unwrap();
        let requests = b.requests().unwrap();
        let values: Vec<Vec<u8>> = requests
            .iter()
            .map(|r| if r.operation == operation::GET { mica::value_of(r.opaque.into(), value_len) } else { vec![] })
            .collect();
        let responses: Vec<MicaRequestRepr> = requests
            .iter()
            .zip(&values)
            .map(|(r, v)| MicaRequestRepr { result: result::SUCCESS, key: &[], value: v, ..*r })
            .collect();
        let mut out = vec![0; mica::batch_len(&responses)];
        mica::emit_batch(&mut out, MAGIC_RESPONSE, &responses);
        out
    }

    #[test]
    fn the_sink_checks_what_the_client_asked_for() {
        let w: MicaWorkload = "keys=50,get=0.7,value=24,batch=6".parse().unwrap();
        let mut client = MicaClient::new(w.clone(), 7).unwrap();
        let mut check = MicaCheck::default();
        let mut buf = vec![0; w.max_batch_len()];
        for _ in 0..200 {
            let n = client.write_batch(&mut buf).unwrap();
            check.record(&answer(&buf[..n], 24), 24);
        }
        let sent = client.sent;
        assert_eq!((sent.batches, sent.gets + sent.sets), (200, 1200));
        assert!(sent.gets > 700 && sent.sets > 250, "{sent:?}");
        assert_eq!(
            (check.batches, check.get_hits, check.sets_stored, check.wrong, check.malformed),
            (200, sent.gets, sent.sets, 0, 0)
        );
        // A wrong value, a wrong key hash, a miss and a request are seen.
        let n = client.write_batch(&mut buf).unwrap();
        let mut reply = answer(&buf[..n], 24);
        let mut one = MicaCheck::default();
        one.record(&reply, 25);
        assert_eq!(one.wrong, client.sent.gets - sent.gets, "a value of the wrong length is wrong");
        reply[6 + 8] ^= 1;
        let mut hashed = MicaCheck::default();
        hashed.record(&reply, 24);
        assert_eq!(hashed.wrong, 1, "the first response's key hash no longer matches");
        let mut request = MicaCheck::default();
        request.record(&buf[..n], 24);
        assert_eq!((request.malformed, request.batches), (1, 0));
        request.record(&buf[..3], 24);
        assert_eq!(request.malformed, 2);
    }

    #[test]
    fn zipf_keys_favour_the_first_and_stay_in_range() {
        let w: MicaWorkload = "keys=1000,dist=zipf:0.99,batch=1".parse().unwrap();
        let mut client = MicaClient::new(w, 1).unwrap();
        let mut counts = vec![0u32; 1000];
        for _ in 0..20_000 {
            let k = client.next_key();
            counts[k as usize] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > counts[500], "{:?}", &counts[..12]);
        assert!(counts[0] > 1000, "key 0 takes about 1/H(1000) = 13% of draws: {}", counts[0]);
    }

    #[test]
    fn a_seed_replays_the_same_batches() {
        let w = MicaWorkload::default();
        let (mut a, mut b) = (MicaClient::new(w.clone(), 3).unwrap(), MicaClient::new(w.clone(), 3).unwrap());
        let (mut x, mut y) = (vec![0; w.max_batch_len()], vec![0; w.max_batch_len()]);
        for _ in 0..10 {
            let (n, m) = (a.write_batch(&mut x).unwrap(), b.write_batch(&mut y).unwrap());
            assert_eq!(x[..n], y[..m]);
        }
    }
}
