//! `ferry bench soak`: Ferry run for a long time under change, with
//! nothing lost.
//!
//! Two chains forward under traffic (each a source at a fixed rate and a
//! count, through process NFs, to a sink; the second crosses domains by a
//! copy link) under a `ferryd --persist`, while a driver loops through
//! the faults an operator's day brings ([`faults`]): a third chain
//! deployed and removed, `ferry chain reload`, one NF killed, two at
//! once, a consumer stopped and continued; and, a few times a run,
//! ferryd ended by SIGTERM and by SIGKILL and a new one adopting the
//! chains. Every domain is audited after every fault.
//!
//! Every minute it records ferryd's RSS, fds and threads, each NF's RSS,
//! the audits and whether they conserved every frame, and the frames made
//! and sunk by the two chains ([`sample`]). At the end the sources have
//! made their count, and it fails on:
//! - a frame lost: made − sunk − counted drops beyond what the audits
//!   reclaimed (frames a killed NF held or had queued, and the burst a
//!   killed ferryd's copy link held: at most 64 per kill);
//! - a reclaim beyond that bound, or an audit that was not conserved;
//! - growth past the stated bounds ([`Bounds`]) of one process's own
//!   memory or fds between its first and last sample.
//!
//! It writes `soak.json` (every sample and the verdict) and `soak.png`
//! (memory and throughput over time, by matplotlib) to its directory.

mod faults;
mod sample;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

pub use faults::Soak;
pub use sample::Sample;

pub struct SoakOptions {
    pub minutes: u64,
    /// Frames per second of each steady chain's source.
    pub rate: u64,
    /// One fault every this long: the pace of an operator's busy day,
    /// which lets the sources keep their rate between faults.
    pub every: Duration,
    /// Where the chain files, the state, `soak.json` and `soak.png` go.
    pub out: PathBuf,
}

/// How much one process may grow between its first and last sample: its
/// own pages (RssAnon; the shared UMEM and regions fill as frames spread
/// over them) and ferryd's fds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bounds {
    pub ferryd_anon_kib: u64,
    pub ferryd_fds: u64,
    pub nf_anon_kib: u64,
    /// Frames one killed NF thread may take with it: its receive ring
    /// and a burst it held (the chains' ring size and batch).
    pub reclaim_per_nf_kill: u64,
    /// Frames a copy link may hold when ferryd is killed.
    pub reclaim_per_ferryd_kill: u64,
}

pub const BOUNDS: Bounds = Bounds {
    ferryd_anon_kib: 16 * 1024,
    ferryd_fds: 8,
    nf_anon_kib: 8 * 1024,
    reclaim_per_nf_kill: faults::RING_SIZE + faults::BATCH,
    reclaim_per_ferryd_kill: 64,
};

/// One steady chain's frames at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Tally {
    pub chain: String,
    pub made: u64,
    pub sunk: u64,
    pub dropped: u64,
    pub reclaimed: u64,
    /// made − sunk − dropped − reclaimed, if positive: frames gone unseen.
    pub lost: u64,
    pub reclaim_bound: u64,
}

#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub minutes: u64,
    pub rate: u64,
    pub bounds: Bounds,
    pub samples: Vec<Sample>,
    pub faults: BTreeMap<String, u64>,
    pub audits: u64,
    pub audits_conserved: u64,
    pub tallies: Vec<Tally>,
    /// Why the run failed; empty when it passed.
    pub failures: Vec<String>,
    pub plot: Option<PathBuf>,
}

pub fn run(opts: &SoakOptions) -> Result<SoakReport> {
    std::fs::create_dir_all(&opts.out)?;
    let out = std::path::absolute(&opts.out)?;
    let count = opts.rate * 60 * opts.minutes;
    let mut soak = Soak::start(&out, opts.rate, count)?;
    let start = Instant::now();
    let outcome = drive(&mut soak, opts, start);
    let mut report = soak.finish(opts, start, outcome)?;
    report.plot = sample::plot(&report, &out.join("soak.png"));
    std::fs::write(out.join("soak.json"), serde_json::to_string_pretty(&report)?)?;
    if !report.failures.is_empty() {
        print!("{}", table(&report));
        bail!("the soak failed: {}", report.failures.join("; "));
    }
    Ok(report)
}

/// The fault loop until the time is up; ferryd is ended (SIGTERM, then
/// SIGKILL, alternately) at each third of the run.
fn drive(soak: &mut Soak, opts: &SoakOptions, start: Instant) -> Result<()> {
    let total = Duration::from_secs(opts.minutes * 60);
    let mut restarts = 0;
    soak.sample(start)?;
    for (n, step) in faults::Step::ALL.iter().cycle().enumerate() {
        // The driver's pace, not a wait for an event.
        std::thread::sleep((start + opts.every * n as u32).saturating_duration_since(Instant::now()));
        if start.elapsed() >= total || ferry_cli::util::stop_requested() {
            break;
        }
        if start.elapsed() >= total * (restarts + 1) / 3 && restarts < 2 {
            let signal = if restarts == 0 { libc::SIGTERM } else { libc::SIGKILL };
            soak.restart_ferryd(signal)?;
            restarts += 1;
        }
        soak.apply(*step)?;
        soak.audit()?;
        if soak.sample_due() {
            soak.sample(start)?;
        }
    }
    Ok(())
}

pub fn table(r: &SoakReport) -> String {
    let mut s = format!(
        "soak: {} min, {} fps per chain; faults: {}\n\n",
        r.minutes,
        r.rate,
        r.faults.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    );
    s += &sample::table(&r.samples);
    s += &format!("\naudits: {} answered by every live thread, {} conserved\n\n", r.audits, r.audits_conserved);
    s += "chain        made         sunk     dropped  reclaimed (bound)  lost\n";
    for t in &r.tallies {
        s += &format!(
            "{:<10} {:>10} {:>12} {:>10} {:>10} ({:>5}) {:>5}\n",
            t.chain, t.made, t.sunk, t.dropped, t.reclaimed, t.reclaim_bound, t.lost
        );
    }
    if let Some(p) = &r.plot {
        s += &format!("\nplot: {}\n", p.display());
    }
    s += &match r.failures.is_empty() {
        true => "\nverdict: pass\n".to_string(),
        false => format!("\nverdict: FAIL\n  {}\n", r.failures.join("\n  ")),
    };
    s
}
