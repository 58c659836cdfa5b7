//! Receive-side statistics for `ferry sink`.
//!
//! One [`SinkStats`] per receive thread records every frame (no allocation
//! except the first time a new stream shows up); the threads' stats are
//! [`merge`](SinkStats::merge)d at the end and turned into a [`SinkReport`].
//!
//! Loss, reordering and duplicates are tracked per stream (the stamp's
//! `stream`, one per generator queue), because sequence numbers are only
//! ordered within a stream. Sequence numbers are 32-bit and wrap; each one
//! is extended to 64 bits relative to the highest seen so far, so a run may
//! exceed 2^32 packets per stream as long as reordering stays below 2^31.

use hdrhistogram::Histogram;

use crate::report::{LatencyReport, SinkReport, StreamReport};
use ferry_nf::mica_client::MicaCheck;

/// Latencies above this (60 s) are not plausible and count as bad timestamps.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// How far back (in sequence numbers) duplicates are recognised.
const DUP_WINDOW: i64 = 128;

#[derive(Debug, Clone, Copy, Default)]
struct StreamStats {
    seen: bool,
    /// Packets received, duplicates excluded.
    received: u64,
    /// Highest sequence number seen, extended past 2^32.
    max_seq: i64,
    /// Bit i set: `max_seq - i` was received (i < 128).
    window: u128,
    reordered: u64,
    duplicates: u64,
}

impl StreamStats {
    fn record(&mut self, seq: u32) {
        if !self.seen {
            *self = StreamStats { seen: true, received: 1, max_seq: i64::from(seq), window: 1, ..*self };
            return;
        }
        // Signed distance from the highest seq, modulo 2^32.
        let delta = i64::from(seq.wrapping_sub(self.max_seq as u32) as i32);
        if delta > 0 {
            self.window = if delta >= DUP_WINDOW { 1 } else { (self.window << delta) | 1 };
            self.max_seq += delta;
            self.received += 1;
        } else if delta == 0 {
            self.duplicates += 1;
        } else if -delta < DUP_WINDOW {
            let bit = 1u128 << -delta;
            if self.window & bit != 0 {
                self.duplicates += 1;
            } else {
                self.window |= bit;
                self.received += 1;
                self.reordered += 1;
            }
        } else {
            // Too old to tell a duplicate from a late packet: call it late.
            self.received += 1;
            self.reordered += 1;
        }
    }

    fn merge(&mut self, o: &StreamStats) {
        if !o.seen {
            return;
        }
        if !self.seen {
            *self = *o;
            return;
        }
        let (hi, lo) = if self.max_seq >= o.max_seq { (*self, *o) } else { (*o, *self) };
        let shift = hi.max_seq - lo.max_seq;
        let window = if shift >= DUP_WINDOW { hi.window } else { hi.window | (lo.window << shift) };
        *self = StreamStats {
            seen: true,
            received: self.received + o.received,
            max_seq: hi.max_seq,
            window,
            reordered: self.reordered + o.reordered,
            duplicates: self.duplicates + o.duplicates,
        };
    }

    /// Sequence numbers 0..=max_seq that never arrived.
    fn lost(&self) -> u64 {
        u64::try_from(self.max_seq + 1).unwrap_or(0).saturating_sub(self.received)
    }
}

fn combine(a: Option<u64>, b: Option<u64>, pick: fn(u64, u64) -> u64) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

/// Counters of one receive thread.
#[derive(Debug, Clone)]
pub struct SinkStats {
    packets: u64,
    bytes: u64,
    stamped: u64,
    bad_timestamps: u64,
    /// Indexed by stream id; grows on demand (at most 65536 entries).
    streams: Vec<StreamStats>,
    latency: Histogram<u64>,
    /// Exact extremes: the histogram only knows them to 3 digits.
    min_latency_ns: u64,
    max_latency_ns: u64,
    first_rx_ns: Option<u64>,
    last_rx_ns: Option<u64>,
    /// With [`SinkStats::check_mica`]: the value length and the check.
    mica: Option<(usize, MicaCheck)>,
}

impl Default for SinkStats {
    fn default() -> Self {
        Self::new()
    }
}

impl SinkStats {
    /// Empty statistics.
    pub fn new() -> Self {
        SinkStats {
            packets: 0,
            bytes: 0,
            stamped: 0,
            bad_timestamps: 0,
            streams: Vec::new(),
            // 1 ns .. 60 s at 3 significant digits: ~30 KiB per thread.
            latency: Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("constant bounds are valid"),
            min_latency_ns: u64::MAX,
            max_latency_ns: 0,
            first_rx_ns: None,
            last_rx_ns: None,
            mica: None,
        }
    }

    /// Also checks every UDP datagram as a MICA response batch of a
    /// workload with values of `value_len` bytes ([`MicaCheck`]).
    pub fn check_mica(mut self, value_len: usize) -> Self {
        self.mica = Some((value_len, MicaCheck::default()));
        self
    }

    /// Records one received frame (without FCS) at `rx_ns` on the same
    /// clock the generator stamps with (CLOCK_MONOTONIC). Frames without a
    /// stamp are only counted.
    pub fn record(&mut self, frame: &[u8], rx_ns: u64) {
        self.packets += 1;
        self.bytes += frame.len() as u64;
        self.first_rx_ns = Some(self.first_rx_ns.map_or(rx_ns, |f| f.min(rx_ns)));
        self.last_rx_ns = Some(self.last_rx_ns.map_or(rx_ns, |l| l.max(rx_ns)));
        if let Some((value_len, check)) = self.mica.as_mut() {
            match ferry_wire::flow::parse(frame) {
                Ok(flow) if flow.proto == ferry_wire::ip_proto::UDP && flow.l4_offset.is_some() => {
                    let payload = flow.l4_offset.map_or(&[][..], |at| frame.get(at + 8..).unwrap_or_default());
                    check.record(payload, *value_len);
                }
                _ => check.malformed += 1,
            }
            return;
        }
        let Some(stamp) = ferry_wire::find_stamp(frame) else {
            return;
        };
        self.stamped += 1;
        let i = usize::from(stamp.stream);
        if i >= self.streams.len() {
            self.streams.resize(i + 1, StreamStats::default());
        }
        self.streams[i].record(stamp.seq);
        match rx_ns.checked_sub(stamp.tx_ns) {
            Some(lat) if lat <= MAX_LATENCY_NS => {
                self.latency.saturating_record(lat);
                self.min_latency_ns = self.min_latency_ns.min(lat);
                self.max_latency_ns = self.max_latency_ns.max(lat);
            }
            _ => self.bad_timestamps += 1,
        }
    }

    /// Adds another thread's statistics into these.
    pub fn merge(&mut self, other: &SinkStats) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.stamped += other.stamped;
        self.bad_timestamps += other.bad_timestamps;
        if other.streams.len() > self.streams.len() {
            self.streams.resize(other.streams.len(), StreamStats::default());
        }
        for (mine, theirs) in self.streams.iter_mut().zip(&other.streams) {
            mine.merge(theirs);
        }
        self.latency.add(&other.latency).expect("histograms share bounds");
        self.min_latency_ns = self.min_latency_ns.min(other.min_latency_ns);
        self.max_latency_ns = self.max_latency_ns.max(other.max_latency_ns);
        self.first_rx_ns = combine(self.first_rx_ns, other.first_rx_ns, u64::min);
        self.last_rx_ns = combine(self.last_rx_ns, other.last_rx_ns, u64::max);
        if let (Some((_, mine)), Some((_, theirs))) = (self.mica.as_mut(), other.mica.as_ref()) {
            mine.merge(theirs);
        }
    }

    /// Frames recorded so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The latency histogram (ns), e.g. to save it in full.
    pub fn latency(&self) -> &Histogram<u64> {
        &self.latency
    }

    /// Summarises the statistics. With `sent` (the generator's count),
    /// loss is `sent - received`, where received counts distinct stamped
    /// packets (or all packets when none was stamped, e.g. 60-byte TCP);
    /// without it, loss is inferred per stream from sequence gaps, which
    /// cannot see packets lost after the last one received.
    pub fn report(&self, sent: Option<u64>) -> SinkReport {
        let streams: Vec<StreamReport> = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.seen)
            .map(|(i, s)| StreamReport {
                stream: i as u16,
                received: s.received,
                max_seq: s.max_seq,
                lost: s.lost(),
                reordered: s.reordered,
                duplicates: s.duplicates,
            })
            .collect();
        let unique: u64 = streams.iter().map(|s| s.received).sum();
        let received = if self.stamped > 0 { unique } else { self.packets };
        let (lost, expected) = match sent {
            Some(sent) => (sent.saturating_sub(received), sent),
            None => {
                let lost: u64 = streams.iter().map(|s| s.lost).sum();
                (lost, unique + lost)
            }
        };
        let duration_ns = match (self.first_rx_ns, self.last_rx_ns) {
            (Some(f), Some(l)) if l > f => Some(l - f),
            _ => None,
        };
        let per_sec = |n: u64| duration_ns.map(|d| n as f64 * 1e9 / d as f64);
        let h = &self.latency;
        let latency = (!h.is_empty()).then(|| LatencyReport {
            samples: h.len(),
            min_ns: self.min_latency_ns,
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: self.max_latency_ns,
        });
        SinkReport {
            packets: self.packets,
            bytes: self.bytes,
            stamped: self.stamped,
            sent,
            lost,
            loss_ratio: if expected > 0 { lost as f64 / expected as f64 } else { 0.0 },
            reordered: streams.iter().map(|s| s.reordered).sum(),
            duplicates: streams.iter().map(|s| s.duplicates).sum(),
            bad_timestamps: self.bad_timestamps,
            latency,
            duration_ns,
            pps: per_sec(self.packets),
            bits_per_sec: per_sec(self.bytes * 8),
            streams,
            mica: self.mica.map(|(_, check)| check),
        }
    }
}
