//! What the soak records every minute, the growth it allows, and the
//! plot of a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use ferry_cli::chainctl::counter;
use serde::Serialize;

use super::faults::{Soak, STEADY};
use super::{Bounds, SoakReport};

/// One process's size, from /proc.
#[derive(Debug, Clone, Serialize)]
pub struct ProcSize {
    pub name: String,
    pub pid: u32,
    pub rss_kib: u64,
    /// Its own pages: RSS less shared memory (the domains' UMEM and
    /// regions, which fill as frames spread over them), what a leak grows.
    pub anon_kib: u64,
    pub fds: u64,
    pub threads: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub minute: f64,
    pub ferryd: ProcSize,
    pub nfs: Vec<ProcSize>,
    /// Per steady chain: (made, sunk).
    pub frames: BTreeMap<String, (u64, u64)>,
    /// Audits every live thread answered so far, and those conserved.
    pub audits: u64,
    pub audits_conserved: u64,
    pub faults: u64,
}

/// `pid`'s RSS, open fds and threads (zeros for a process gone).
fn proc_size(name: String, pid: u32) -> ProcSize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    ProcSize { name, pid, rss_kib: field("VmRSS:"), anon_kib: field("RssAnon:"), fds, threads: field("Threads:") }
}

pub fn take(soak: &Soak, start: Instant, (audits, audits_conserved): (u64, u64), faults: u64) -> Result<Sample> {
    let mut nfs = Vec::new();
    let mut frames = BTreeMap::new();
    for (chain, _) in STEADY {
        let s = soak.status(chain)?;
        for n in &s.nfs {
            nfs.extend(n.pid.map(|pid| proc_size(format!("{chain}/{}", n.name), pid)));
        }
        frames.insert(chain.to_string(), (counter(&s, "src", "made"), counter(&s, "snk", "sunk")));
    }
    Ok(Sample {
        minute: start.elapsed().as_secs_f64() / 60.0,
        ferryd: proc_size("ferryd".into(), soak.ferryd_pid()),
        nfs,
        frames,
        audits,
        audits_conserved,
        faults,
    })
}

pub fn row(s: &Sample) -> String {
    let nf_anon: u64 = s.nfs.iter().map(|n| n.anon_kib).sum();
    let frames: Vec<String> = s.frames.iter().map(|(c, (m, k))| format!("{c} {m}/{k}")).collect();
    format!(
        "{:>6.1} {:>7} {:>9} {:>9} {:>4} {:>4} {:>10} {:>7}/{:<7} {:>6}  {}",
        s.minute,
        s.ferryd.pid,
        s.ferryd.rss_kib,
        s.ferryd.anon_kib,
        s.ferryd.fds,
        s.ferryd.threads,
        nf_anon,
        s.audits_conserved,
        s.audits,
        s.faults,
        frames.join("  ")
    )
}

pub fn table(samples: &[Sample]) -> String {
    let mut t = String::from(
        "minute  ferryd  rss(KiB) anon(KiB)  fds  thr nfs anon(KiB)  audits ok/all  faults  made/sunk per chain\n",
    );
    for s in samples {
        t += &row(s);
        t.push('\n');
    }
    t
}

/// Each process's growth from its first sample to its last, beyond the
/// bounds: one line per offender.
pub fn growth(samples: &[Sample], b: &Bounds) -> Vec<String> {
    let mut first: BTreeMap<(String, u32), &ProcSize> = BTreeMap::new();
    let mut out = Vec::new();
    let all = samples.iter().flat_map(|s| std::iter::once(&s.ferryd).chain(&s.nfs));
    let mut last: BTreeMap<(String, u32), &ProcSize> = BTreeMap::new();
    for p in all.filter(|p| p.rss_kib > 0) {
        first.entry((p.name.clone(), p.pid)).or_insert(p);
        last.insert((p.name.clone(), p.pid), p);
    }
    for (key, l) in &last {
        let f = first[key];
        let (rss, fds) = if l.name == "ferryd" { (b.ferryd_anon_kib, b.ferryd_fds) } else { (b.nf_anon_kib, u64::MAX) };
        if l.anon_kib > f.anon_kib + rss {
            out.push(format!("{} (pid {}): RssAnon {} -> {} KiB, over +{rss}", l.name, l.pid, f.anon_kib, l.anon_kib));
        }
        if l.fds > f.fds.saturating_add(fds) {
            out.push(format!("{} (pid {}): fds {} -> {}, over +{fds}", l.name, l.pid, f.fds, l.fds));
        }
    }
    out
}

/// Memory and throughput over the run, drawn by matplotlib into `png`;
/// None (and why, on stderr) without it. Debian's python3 first (where
/// `make soak` installs python3-matplotlib), then the one on the PATH.
pub fn plot(report: &SoakReport, png: &Path) -> Option<PathBuf> {
    let data = serde_json::to_string(report).ok()?;
    let mut why = Vec::new();
    for python in ["/usr/bin/python3", "python3"] {
        match draw(python, &data, png) {
            Ok(()) => return Some(png.to_path_buf()),
            Err(e) => why.push(format!("{python}: {e}")),
        }
    }
    eprintln!("no plot ({}): needs python3 with matplotlib (Debian: python3-matplotlib)", why.join("; "));
    None
}

fn draw(python: &str, report: &str, png: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut child = std::process::Command::new(python)
        .args(["-c", include_str!("plot.py"), &png.to_string_lossy()])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    child.stdin.take().expect("piped").write_all(report.as_bytes())?;
    match child.wait()? {
        st if st.success() => Ok(()),
        st => Err(std::io::Error::other(format!("exited with {st}"))),
    }
}
