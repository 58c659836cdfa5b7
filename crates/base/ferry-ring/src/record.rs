//! A single-producer, single-consumer ring of variable-length records in
//! shared words: how an NF thread hands copies of frames (a capture) to
//! ferryd without ever waiting for it.
//!
//! Layout of the words (`AtomicU64`, so both sides touch them only through
//! atomics and a garbled peer can garble records, never memory):
//!
//! ```text
//!   [HEAD] [TAIL] [LOST] [TAKEN] [4 spare]  [data: capacity words ...]
//! ```
//!
//! A record is one length word (`words << 32 | bytes`), [`META_WORDS`]
//! caller words, then the bytes packed little-endian into words. A record
//! never wraps: when it does not fit before the end, the writer puts a
//! [`WRAP`] word there and starts again at word 0 of the data.
//!
//! # Invariants
//! * Only the writer stores `HEAD`, `LOST` and `TAKEN`; only the reader
//!   stores `TAIL`. `TAIL <= HEAD <= TAIL + capacity` (word counts that
//!   only grow; the position is the count modulo the capacity).
//! * The writer never waits: a record that does not fit is not written
//!   and `LOST` counts it. So a reader that stalls costs the writer one
//!   failed check per record, and loses only copies.
//! * Words between `TAIL` and `HEAD` are complete records: the writer
//!   fills them before it publishes `HEAD` (Release), the reader reads
//!   them after loading `HEAD` (Acquire) and frees them by publishing
//!   `TAIL` (Release) only after it has read them.

use crate::sync::{AtomicU64, Ordering};

const HEAD: usize = 0;
const TAIL: usize = 1;
const LOST: usize = 2;
const TAKEN: usize = 3;
/// Header words before the data.
pub const RECORD_HEADER_WORDS: usize = 8;
/// Caller-defined words in every record (a capture's timestamp and
/// original length).
pub const META_WORDS: usize = 2;
/// Length word of the filler that sends the reader back to word 0.
const WRAP: u64 = u64::MAX;

/// One record read back: its caller words and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub meta: [u64; META_WORDS],
    pub bytes: Vec<u8>,
}

/// The ring over `words` (header plus data); both ends use this type.
#[derive(Clone, Copy)]
pub struct RecordRing<'a> {
    words: &'a [AtomicU64],
}

impl<'a> RecordRing<'a> {
    /// The ring over `words`, or None if they cannot hold a record of one
    /// word.
    pub fn new(words: &'a [AtomicU64]) -> Option<RecordRing<'a>> {
        (words.len() > RECORD_HEADER_WORDS + 1 + META_WORDS).then_some(RecordRing { words })
    }

    fn capacity(&self) -> u64 {
        (self.words.len() - RECORD_HEADER_WORDS) as u64
    }

    fn data(&self, pos: u64) -> &AtomicU64 {
        &self.words[RECORD_HEADER_WORDS + (pos % self.capacity()) as usize]
    }

    /// Records the writer could not write (the ring was full).
    pub fn lost(&self) -> u64 {
        self.words[LOST].load(Ordering::Relaxed)
    }

    /// Records the writer wrote.
    pub fn taken(&self) -> u64 {
        self.words[TAKEN].load(Ordering::Relaxed)
    }

    /// Writer: appends a record, or counts it lost when it does not fit.
    /// Never waits. Returns whether it was written.
    pub fn push(&self, meta: [u64; META_WORDS], bytes: &[u8]) -> bool {
        let need = (1 + META_WORDS + bytes.len().div_ceil(8)) as u64;
        let cap = self.capacity();
        let head = self.words[HEAD].load(Ordering::Relaxed);
        let tail = self.words[TAIL].load(Ordering::Acquire);
        let to_end = cap - head % cap;
        let skip = if need > to_end { to_end } else { 0 };
        if need > cap || head.wrapping_sub(tail) + skip + need > cap {
            bump(&self.words[LOST]);
            return false;
        }
        if skip > 0 {
            self.data(head).store(WRAP, Ordering::Relaxed);
        }
        let start = head + skip;
        self.data(start).store(need << 32 | bytes.len() as u64, Ordering::Relaxed);
        for (i, m) in meta.iter().enumerate() {
            self.data(start + 1 + i as u64).store(*m, Ordering::Relaxed);
        }
        let body = start + 1 + META_WORDS as u64;
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.data(body + i as u64).store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        bump(&self.words[TAKEN]);
        self.words[HEAD].store(start + need, Ordering::Release);
        true
    }

    /// Reader: hands every complete record to `f`, oldest first, then
    /// frees their words. Returns how many. A head the writer could not
    /// have written (behind the tail, or more than the ring ahead of it),
    /// or a length word that cannot be a record, is a garbled writer: the
    /// read ends and drops what is left, so it reads at most the ring once.
    pub fn drain(&self, mut f: impl FnMut(Record)) -> usize {
        let cap = self.capacity();
        let head = self.words[HEAD].load(Ordering::Acquire);
        let mut tail = self.words[TAIL].load(Ordering::Relaxed);
        if head < tail || head - tail > cap {
            self.words[TAIL].store(head, Ordering::Release);
            return 0;
        }
        let mut n = 0;
        while tail < head {
            let len = self.data(tail).load(Ordering::Relaxed);
            if len == WRAP {
                tail += cap - tail % cap;
                if tail > head {
                    tail = head;
                }
                continue;
            }
            let (words, bytes) = (len >> 32, (len & 0xffff_ffff) as usize);
            let fits = words >= (1 + META_WORDS) as u64 && words <= cap - tail % cap && tail + words <= head;
            if !fits || bytes.div_ceil(8) as u64 != words - 1 - META_WORDS as u64 {
                tail = head;
                break;
            }
            let meta = std::array::from_fn(|i| self.data(tail + 1 + i as u64).load(Ordering::Relaxed));
            let mut out = Vec::with_capacity(bytes.next_multiple_of(8));
            for i in 0..bytes.div_ceil(8) as u64 {
                out.extend_from_slice(
                    &self.data(tail + 1 + META_WORDS as u64 + i).load(Ordering::Relaxed).to_le_bytes(),
                );
            }
            out.truncate(bytes);
            f(Record { meta, bytes: out });
            tail += words;
            n += 1;
        }
        self.words[TAIL].store(tail, Ordering::Release);
        n
    }

    /// Reader: forgets every record written so far (a new capture starts
    /// with an empty ring, whatever an earlier one left).
    pub fn skip_all(&self) {
        let head = self.words[HEAD].load(Ordering::Acquire);
        self.words[TAIL].store(head, Ordering::Release);
    }
}

/// Adds one to a word only its owner writes (no locked RMW).
fn bump(w: &AtomicU64) {
    w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    fn read_all(r: &RecordRing) -> Vec<Record> {
        let mut v = Vec::new();
        r.drain(|rec| v.push(rec));
        v
    }

    #[test]
    fn records_come_back_whole_and_in_order() {
        let w = words(RECORD_HEADER_WORDS + 64);
        let r = RecordRing::new(&w).unwrap();
        assert!(r.push([1, 2], b"hello"));
        assert!(r.push([3, 4], &[0xab; 17]));
        assert!(r.push([5, 6], b""));
        let got = read_all(&r);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Record { meta: [1, 2], bytes: b"hello".to_vec() });
        assert_eq!(got[1].bytes, vec![0xab; 17]);
        assert_eq!(got[2].bytes, b"");
        assert_eq!(r.taken(), 3);
    }

    #[test]
    fn a_full_ring_loses_and_counts_never_overwrites() {
        // 16 data words: a 40-byte record takes 1 + 2 + 5 = 8 words.
        let w = words(RECORD_HEADER_WORDS + 16);
        let r = RecordRing::new(&w).unwrap();
        assert!(r.push([1, 0], &[1; 40]));
        assert!(r.push([2, 0], &[2; 40]));
        assert!(!r.push([3, 0], &[3; 40]));
        assert_eq!((r.taken(), r.lost()), (2, 1));
        let got = read_all(&r);
        assert_eq!(got.iter().map(|g| g.meta[0]).collect::<Vec<_>>(), vec![1, 2]);
        assert!(r.push([4, 0], &[4; 40]));
        assert_eq!(read_all(&r)[0].bytes, vec![4; 40]);
    }

    #[test]
    fn a_record_that_would_cross_the_end_starts_over_at_word_zero() {
        let w = words(RECORD_HEADER_WORDS + 20);
        let r = RecordRing::new(&w).unwrap();
        for round in 0..50u64 {
            let len = (round % 7 * 9) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (i as u64 + round) as u8).collect();
            assert!(r.push([round, len as u64], &bytes), "round {round}");
            let got = read_all(&r);
            assert_eq!(got, vec![Record { meta: [round, len as u64], bytes }]);
        }
    }

    #[test]
    fn a_record_larger_than_the_ring_is_lost() {
        let w = words(RECORD_HEADER_WORDS + 8);
        let r = RecordRing::new(&w).unwrap();
        assert!(!r.push([0, 0], &[0; 100]));
        assert_eq!(r.lost(), 1);
        assert!(read_all(&r).is_empty());
    }

    #[test]
    fn garbled_length_words_end_the_read_without_panicking() {
        let w = words(RECORD_HEADER_WORDS + 32);
        let r = RecordRing::new(&w).unwrap();
        assert!(r.push([0, 0], b"abc"));
        w[RECORD_HEADER_WORDS].store(1000 << 32 | 5, Ordering::Relaxed);
        assert!(read_all(&r).is_empty());
        assert!(r.push([1, 0], b"ok"));
        assert_eq!(read_all(&r)[0].bytes, b"ok");
    }

    #[test]
    fn a_garbled_head_ends_the_read_at_once() {
        let w = words(RECORD_HEADER_WORDS + 32);
        let r = RecordRing::new(&w).unwrap();
        w[HEAD].store(u64::MAX - 3, Ordering::Relaxed);
        assert!(read_all(&r).is_empty());
        w[HEAD].store(5, Ordering::Relaxed);
        w[TAIL].store(9, Ordering::Relaxed);
        assert!(read_all(&r).is_empty());
        assert_eq!(w[TAIL].load(Ordering::Relaxed), 5, "the reader starts over where the writer is");
        // Wrap words all over, the head within one ring: read once, ends.
        for x in &w[RECORD_HEADER_WORDS..] {
            x.store(WRAP, Ordering::Relaxed);
        }
        w[HEAD].store(5 + 32, Ordering::Relaxed);
        assert!(read_all(&r).is_empty());
    }

    #[test]
    fn skip_all_starts_a_capture_empty() {
        let w = words(RECORD_HEADER_WORDS + 32);
        let r = RecordRing::new(&w).unwrap();
        r.push([0, 0], b"old");
        r.skip_all();
        assert!(read_all(&r).is_empty());
    }

    #[test]
    fn a_writer_and_a_reader_on_two_threads_agree() {
        let w = std::sync::Arc::new(words(RECORD_HEADER_WORDS + 64));
        let w2 = w.clone();
        let writer = std::thread::spawn(move || {
            let r = RecordRing::new(&w2).unwrap();
            for i in 0..20_000u64 {
                let bytes = vec![i as u8; (i % 23) as usize];
                r.push([i, 0], &bytes);
            }
        });
        let r = RecordRing::new(&w).unwrap();
        let mut seen = Vec::new();
        let mut check = |rec: Record| {
            assert!(rec.bytes.iter().all(|&b| b == rec.meta[0] as u8));
            assert_eq!(rec.bytes.len() as u64, rec.meta[0] % 23);
            seen.push(rec.meta[0]);
        };
        while !writer.is_finished() {
            r.drain(&mut check);
        }
        writer.join().unwrap();
        r.drain(&mut check);
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "in order");
        assert_eq!(seen.len() as u64 + r.lost(), 20_000);
        assert_eq!(r.taken(), seen.len() as u64);
    }
}
