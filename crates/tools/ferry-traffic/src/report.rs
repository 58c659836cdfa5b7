//! The sink's summary: serializable for machines, a small table for people.

use std::fmt;

use serde::Serialize;

/// Latency percentiles, in nanoseconds (hdrhistogram, 3 significant digits).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyReport {
    /// Number of latency samples (stamped packets with a sane timestamp).
    pub samples: u64,
    /// Smallest latency (exact).
    pub min_ns: u64,
    /// Mean latency.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest latency (exact).
    pub max_ns: u64,
}

/// Per-stream (per generator queue) counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// Stream id from the stamp.
    pub stream: u16,
    /// Distinct packets received.
    pub received: u64,
    /// Highest sequence number seen (extended past 2^32 on wrap).
    pub max_seq: i64,
    /// Sequence numbers up to `max_seq` never received.
    pub lost: u64,
    /// Packets that arrived after a higher sequence number.
    pub reordered: u64,
    /// Packets received more than once (detected within 128 sequence numbers).
    pub duplicates: u64,
}

/// What `ferry sink` prints at the end (or as JSON with `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SinkReport {
    /// All frames received.
    pub packets: u64,
    /// Their bytes, without FCS.
    pub bytes: u64,
    /// Frames carrying a Ferry stamp.
    pub stamped: u64,
    /// Packets the generator says it sent, when known.
    pub sent: Option<u64>,
    /// Lost packets (see [`crate::SinkStats::report`]).
    pub lost: u64,
    /// `lost / expected`, 0..=1.
    pub loss_ratio: f64,
    /// Reordered packets, all streams.
    pub reordered: u64,
    /// Duplicated packets, all streams.
    pub duplicates: u64,
    /// Stamps whose tx time is after the rx time or over 60 s before it.
    pub bad_timestamps: u64,
    /// Latency percentiles; None without stamped packets.
    pub latency: Option<LatencyReport>,
    /// Time from the first to the last frame.
    pub duration_ns: Option<u64>,
    /// Average receive rate in packets per second.
    pub pps: Option<f64>,
    /// Average receive rate in bits per second (frames without FCS).
    pub bits_per_sec: Option<f64>,
    /// Per-stream breakdown.
    pub streams: Vec<StreamReport>,
    /// MICA responses checked, when the sink checks them.
    pub mica: Option<ferry_nf::mica_client::MicaCheck>,
}

/// `1234567` → `"1,234,567"`: counts are easier to compare with separators.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    // The leading group has 1..=3 digits, every later group exactly 3.
    let head = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        r => r,
    };
    let mut out = String::from(&digits[..head]);
    for group in digits.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).expect("ASCII digits"));
    }
    out
}

/// SI-scaled rate, e.g. `14.88 M`.
fn si(x: f64) -> String {
    let (v, unit) = match x {
        x if x >= 1e9 => (x / 1e9, "G"),
        x if x >= 1e6 => (x / 1e6, "M"),
        x if x >= 1e3 => (x / 1e3, "k"),
        x => (x, ""),
    };
    format!("{v:.2} {unit}")
}

/// Nanoseconds in the most readable unit, e.g. `12.3 us`.
fn dur(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.3} ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} us", n as f64 / 1e3),
        n => format!("{n} ns"),
    }
}

impl fmt::Display for SinkReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = |f: &mut fmt::Formatter<'_>, k: &str, v: String| writeln!(f, "  {k:<16}{v:>20}");
        writeln!(f, "ferry sink report")?;
        row(f, "packets", thousands(self.packets))?;
        row(f, "bytes", thousands(self.bytes))?;
        row(f, "stamped", thousands(self.stamped))?;
        if let Some(sent) = self.sent {
            row(f, "sent", thousands(sent))?;
        }
        row(f, "lost", format!("{} ({:.4}%)", thousands(self.lost), self.loss_ratio * 100.0))?;
        row(f, "reordered", thousands(self.reordered))?;
        row(f, "duplicates", thousands(self.duplicates))?;
        row(f, "bad timestamps", thousands(self.bad_timestamps))?;
        if let (Some(d), Some(pps), Some(bps)) = (self.duration_ns, self.pps, self.bits_per_sec) {
            row(f, "duration", dur(d))?;
            row(f, "rate", format!("{}pps", si(pps)))?;
            row(f, "throughput", format!("{}bit/s", si(bps)))?;
        }
        match &self.latency {
            Some(l) => {
                writeln!(f, "  latency {:>10} {:>10} {:>10} {:>10} {:>10}", "min", "p50", "p99", "p99.9", "max")?;
                writeln!(
                    f,
                    "          {:>10} {:>10} {:>10} {:>10} {:>10}",
                    dur(l.min_ns),
                    dur(l.p50_ns),
                    dur(l.p99_ns),
                    dur(l.p999_ns),
                    dur(l.max_ns)
                )?;
            }
            None => writeln!(f, "  latency: no stamped packets")?,
        }
        if let Some(m) = &self.mica {
            row(f, "mica batches", thousands(m.batches))?;
            row(f, "  get hits", thousands(m.get_hits))?;
            row(f, "  get misses", thousands(m.get_misses))?;
            row(f, "  sets stored", thousands(m.sets_stored))?;
            row(f, "  sets failed", thousands(m.sets_failed))?;
            row(f, "  wrong", thousands(m.wrong))?;
            row(f, "  malformed", thousands(m.malformed))?;
        }
        if self.streams.len() > 1 {
            writeln!(f, "  {:>6} {:>14} {:>12} {:>12}", "stream", "received", "lost", "reordered")?;
            for s in &self.streams {
                writeln!(
                    f,
                    "  {:>6} {:>14} {:>12} {:>12}",
                    s.stream,
                    thousands(s.received),
                    thousands(s.lost),
                    thousands(s.reordered)
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(si(14_880_952.0), "14.88 M");
        assert_eq!(si(12.0), "12.00 ");
        assert_eq!(dur(999), "999 ns");
        assert_eq!(dur(12_345), "12.3 us");
        assert_eq!(dur(2_500_000_000), "2.500 s");
    }
}
