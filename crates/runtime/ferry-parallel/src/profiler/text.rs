//! The text report.

use std::fmt::{self, Display, Formatter, Write as _};

use super::profile::{CauseProfile, Profile, SourceLine};
use super::StructureConfig;

/// `1 s`, `100 µs`, `250 ns`: the largest unit that divides the value,
/// else with a fraction.
pub(super) fn duration(ns: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"), (1, "ns")];
    if ns == 0 {
        return "0 ns".to_string();
    }
    for (scale, unit) in UNITS {
        if ns >= scale {
            return if ns % scale == 0 {
                format!("{} {unit}", ns / scale)
            } else {
                format!("{:.2} {unit}", ns as f64 / scale as f64)
            };
        }
    }
    unreachable!("ns >= 1")
}

/// The file name without its directories.
pub(super) fn short_file(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// `12,345`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

fn config_text(config: &StructureConfig) -> String {
    match config {
        StructureConfig::Allocator { capacity, lease_ns, refresh_interval_ns } => format!(
            "capacity {capacity}, lease {}, refresh interval {}",
            duration(*lease_ns),
            duration(*refresh_interval_ns)
        ),
        StructureConfig::DistributedObj { max_staleness_ns } => {
            format!("max staleness {}", duration(*max_staleness_ns))
        }
        StructureConfig::Map { buckets, keys, longest_bucket } => {
            let mut s = format!("{buckets} buckets");
            if let Some(keys) = keys {
                let _ = write!(s, ", {keys} keys");
            }
            if let Some(longest) = longest_bucket {
                let _ = write!(s, ", longest bucket {longest}");
            }
            s
        }
        StructureConfig::Vector { len } => format!("{len} elements"),
    }
}

fn write_cause(f: &mut Formatter<'_>, c: &CauseProfile) -> fmt::Result {
    writeln!(f, "  #{} {} of aborts ({}): {}", c.rank, percent(c.share), count(c.aborts), c.cause.name())?;
    let mut what = format!("{} `{}`", c.structure.kind, c.structure.name);
    let mut about = Vec::new();
    if let Some(at) = &c.structure.created_at {
        about.push(format!("created at {}", at.short()));
    }
    if let Some(config) = &c.structure.config {
        about.push(config_text(config));
    }
    if !about.is_empty() {
        let _ = write!(what, " ({})", about.join("; "));
    }
    writeln!(f, "      {what}")?;
    let second = match &c.second {
        Some(s) => format!("{} at {}", s.op, s.line.short()),
        None => "a write the engine no longer knew".to_string(),
    };
    writeln!(f, "      {} at {} conflicts with {second}", c.first.op, c.first.line.short())?;
    if c.elements.keys().any(|class| class != "element") {
        let on: Vec<String> = c.elements.iter().map(|(class, n)| format!("{class} {}", count(*n))).collect();
        writeln!(f, "      on:     {}", on.join(", "))?;
    }
    writeln!(f, "      cause:  {}", c.detail)?;
    for (i, recipe) in c.recipes.iter().enumerate() {
        let label = if i == 0 { "recipe:" } else { "    or:" };
        writeln!(f, "      {label} {}", recipe.text())?;
    }
    if let Some(s) = &c.suggestion {
        let (from, to) = if s.parameter.ends_with("_ns") {
            (duration(s.current), duration(s.suggested))
        } else {
            (count(s.current), count(s.suggested))
        };
        writeln!(f, "      try:    {} {from} → {to}, then profile again", s.parameter)?;
    }
    Ok(())
}

impl Display for SourceLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

impl Display for Profile {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = &self.summary;
        write!(f, "Scalability profile: {} worker{}", s.workers, if s.workers == 1 { "" } else { "s" })?;
        if let (Some(packets), Some(batches)) = (s.packets, s.batches) {
            write!(f, ", {} packets in {} batches", count(packets), count(batches))?;
        }
        writeln!(f)?;
        writeln!(f, "  transactions  {} committed ({} read-only)", count(s.transactions), count(s.read_only))?;
        writeln!(f, "  attempts      {}", count(s.attempts))?;
        writeln!(f, "  aborts        {} (= retries)   abort rate {}", count(s.aborts), percent(s.abort_rate))?;
        if s.unknown_other_side > 0 {
            writeln!(f, "  aborts whose other side is unknown: {}", count(s.unknown_other_side))?;
        }
        writeln!(f)?;
        writeln!(f, "{}", self.headline)?;

        if !self.lines.is_empty() {
            writeln!(f)?;
            writeln!(f, "Aborts by NF source line (aborted: the losing access was here; caused: the winning one)")?;
            writeln!(f, "  {:>9} {:>6} {:>9}  line", "aborted", "share", "caused")?;
            for l in &self.lines {
                writeln!(
                    f,
                    "  {:>9} {:>6} {:>9}  {}  {}",
                    count(l.aborted),
                    percent(l.share),
                    count(l.caused),
                    l.line.short(),
                    l.accesses.join(", ")
                )?;
                writeln!(f, "  {:>26}  ({})", "", l.line.file)?;
            }
        }

        if !self.root_causes.is_empty() {
            writeln!(f)?;
            writeln!(f, "Root causes")?;
            for t in &self.root_causes {
                writeln!(f, "  {:>6}  {}", percent(t.share), t.summary)?;
            }
        }

        if !self.causes.is_empty() {
            writeln!(f)?;
            writeln!(f, "Conflicting operations, ranked")?;
            for c in &self.causes {
                write_cause(f, c)?;
            }
        }

        if let Some(load) = &self.load {
            writeln!(f)?;
            writeln!(f, "Load per core")?;
            writeln!(
                f,
                "  {:>6} {:>10} {:>8} {:>8} {:>8} {:>7}",
                "worker", "packets", "batches", "commits", "aborts", "abort%"
            )?;
            for w in &load.workers {
                writeln!(
                    f,
                    "  {:>6} {:>10} {:>8} {:>8} {:>8} {:>7}",
                    w.worker,
                    count(w.packets),
                    count(w.batches),
                    count(w.commits),
                    count(w.aborts),
                    percent(w.abort_rate)
                )?;
            }
            writeln!(
                f,
                "  imbalance (max/mean packets) {:.2}, NFOS threshold {}: {}",
                load.imbalance,
                load.threshold,
                if load.advice.is_some() { "IMBALANCED" } else { "balanced" }
            )?;
            if let Some(advice) = &load.advice {
                writeln!(f, "  advice: {advice}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_counts_and_files() {
        assert_eq!(duration(0), "0 ns");
        assert_eq!(duration(100_000), "100 µs");
        assert_eq!(duration(1_000_000_000), "1 s");
        assert_eq!(duration(1_500), "1.50 µs");
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(123), "123");
        assert_eq!(short_file("crates/runtime/ferry-parallel/src/nfs/nat.rs"), "nat.rs");
    }
}
