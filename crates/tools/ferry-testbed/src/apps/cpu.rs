//! CPU use of processes and of softirq context over an interval.

use super::error::AppError;
use super::process::parse_stat_fields;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Measures, between [`CpuMeter::start`] and [`CpuMeter::stop`], the CPU
/// time of given processes (user + system, all their threads: the
/// process totals of `/proc/<pid>/stat` include every thread, exited ones
/// too) and the system-wide split from `/proc/stat`, per CPU.
///
/// Softirq time matters because XDP programs and nftables run in softirq
/// context (NAPI poll, or `ksoftirqd` under load), charged to no process
/// of the application; on veth, softirq work is often charged to whichever
/// process happened to be on the CPU, so compare both numbers.
///
/// Resolution is one clock tick (usually 10 ms); measure for a second or
/// more.
#[derive(Debug)]
pub struct CpuMeter {
    started: Instant,
    pids: Vec<(u32, PidSample)>,
    system: Vec<CpuLine>,
    ticks_per_sec: f64,
}

/// What [`CpuMeter::stop`] measured. Every figure uses the same scale:
/// **100 = one CPU fully busy** for the whole interval (so a 2-CPU machine
/// fully busy is 200).
#[derive(Debug, Clone, PartialEq)]
pub struct CpuReport {
    /// Wall-clock length of the interval.
    pub elapsed: Duration,
    /// Per process (in the order given): user + system time of all its
    /// threads.
    pub per_pid_percent: Vec<(u32, f64)>,
    /// Processes that exited (or whose pid was reused) during the interval;
    /// their time is lost and they are not in `per_pid_percent`.
    pub vanished_pids: Vec<u32>,
    /// Softirq share of each CPU (index = CPU number for CPUs online at
    /// both samples, in `/proc/stat` order), 0..=100 each.
    pub softirq_percent_per_cpu: Vec<f64>,
    /// Busy (not idle, not iowait) share of each CPU, 0..=100 each.
    pub busy_percent_per_cpu: Vec<f64>,
    /// Sum of `softirq_percent_per_cpu`.
    pub softirq_percent: f64,
    /// Sum of `busy_percent_per_cpu`: CPUs' worth of busy time × 100.
    pub total_busy_percent: f64,
}

#[derive(Debug, Clone, Copy)]
struct PidSample {
    ticks: u64,
    starttime: u64,
}

/// One `cpuN` line of `/proc/stat` (jiffies).
#[derive(Debug, Clone, PartialEq)]
struct CpuLine {
    cpu: usize,
    total: u64,
    idle: u64,
    softirq: u64,
}

fn proc_err(path: impl Into<PathBuf>, message: impl Into<String>) -> AppError {
    AppError::Proc { path: path.into(), message: message.into() }
}

fn sample_pid(pid: u32) -> Result<PidSample, AppError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| proc_err(&path, e.to_string()))?;
    let f = parse_stat_fields(&text).ok_or_else(|| proc_err(&path, "unparsable"))?;
    Ok(PidSample { ticks: f.utime + f.stime, starttime: f.starttime })
}

/// Parses the per-CPU lines of `/proc/stat` (not the aggregate `cpu`).
/// Fields: user nice system idle iowait irq softirq steal guest
/// guest_nice; guest time is already in user/nice, so it is not added.
fn parse_proc_stat(text: &str) -> Vec<CpuLine> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu = it.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
            let v: Vec<u64> = it.map_while(|x| x.parse().ok()).collect();
            let get = |i: usize| v.get(i).copied().unwrap_or(0);
            Some(CpuLine { cpu, total: (0..8).map(get).sum(), idle: get(3) + get(4), softirq: get(6) })
        })
        .collect()
}

fn sample_system() -> Result<Vec<CpuLine>, AppError> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|e| proc_err("/proc/stat", e.to_string()))?;
    let lines = parse_proc_stat(&text);
    if lines.is_empty() {
        return Err(proc_err("/proc/stat", "no cpuN lines"));
    }
    Ok(lines)
}

/// Per-CPU (softirq %, busy %) between two samples.
fn cpu_deltas(before: &[CpuLine], after: &[CpuLine]) -> Vec<(f64, f64)> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.cpu == a.cpu)?;
            let total = a.total.saturating_sub(b.total);
            if total == 0 {
                return Some((0.0, 0.0));
            }
            let pct = |x: u64| 100.0 * x as f64 / total as f64;
            let idle = a.idle.saturating_sub(b.idle);
            Some((pct(a.softirq.saturating_sub(b.softirq)), pct(total.saturating_sub(idle))))
        })
        .collect()
}

impl CpuMeter {
    /// Takes the first sample. Fails if a pid does not exist.
    pub fn start(pids: &[u32]) -> Result<CpuMeter, AppError> {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let ticks_per_sec = if hz > 0 { hz as f64 } else { 100.0 };
        let system = sample_system()?;
        let pids = pids.iter().map(|&p| sample_pid(p).map(|s| (p, s))).collect::<Result<Vec<_>, _>>()?;
        Ok(CpuMeter { started: Instant::now(), pids, system, ticks_per_sec })
    }

    /// Takes the second sample and reports the differences.
    pub fn stop(self) -> Result<CpuReport, AppError> {
        let system = sample_system()?;
        let elapsed = self.started.elapsed();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut per_pid_percent = Vec::new();
        let mut vanished_pids = Vec::new();
        for (pid, before) in &self.pids {
            match sample_pid(*pid) {
                Ok(after) if after.starttime == before.starttime => {
                    let ticks = after.ticks.saturating_sub(before.ticks) as f64;
                    per_pid_percent.push((*pid, 100.0 * ticks / self.ticks_per_sec / secs));
                }
                _ => vanished_pids.push(*pid),
            }
        }
        let deltas = cpu_deltas(&self.system, &system);
        let softirq_percent_per_cpu: Vec<f64> = deltas.iter().map(|d| d.0).collect();
        let busy_percent_per_cpu: Vec<f64> = deltas.iter().map(|d| d.1).collect();
        Ok(CpuReport {
            elapsed,
            per_pid_percent,
            vanished_pids,
            softirq_percent: softirq_percent_per_cpu.iter().sum(),
            total_busy_percent: busy_percent_per_cpu.iter().sum(),
            softirq_percent_per_cpu,
            busy_percent_per_cpu,
        })
    }
}

impl CpuReport {
    /// The percent of `pid`, if it was measured.
    pub fn pid_percent(&self, pid: u32) -> Option<f64> {
        self.per_pid_percent.iter().find(|(p, _)| *p == pid).map(|(_, v)| *v)
    }

    /// Sum over `pids` (e.g. nginx master and workers) of the measured ones.
    pub fn sum_percent(&self, pids: &[u32]) -> f64 {
        self.per_pid_percent.iter().filter(|(p, _)| pids.contains(p)).map(|(_, v)| v).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_A: &str = "cpu  100 0 50 1000 10 0 20 0 0 0
cpu0 60 0 30 400 5 0 15 0 0 0
cpu1 40 0 20 600 5 0 5 0 0 0
intr 12345
ctxt 999
";
    const STAT_B: &str = "cpu  300 0 150 1200 10 0 120 0 0 0
cpu0 160 0 80 400 5 0 115 0 0 0
cpu1 140 0 70 800 5 0 5 0 0 0
intr 12345
";

    #[test]
    fn per_cpu_shares() {
        let a = parse_proc_stat(STAT_A);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], CpuLine { cpu: 0, total: 510, idle: 405, softirq: 15 });
        let d = cpu_deltas(&a, &parse_proc_stat(STAT_B));
        // cpu0: +100 user +50 system +100 softirq, no idle: 250 ticks busy.
        assert_eq!(d[0], (40.0, 100.0));
        // cpu1: +100 user +50 system +200 idle = 350 ticks, 150 busy.
        assert!((d[1].0 - 0.0).abs() < 1e-9);
        assert!((d[1].1 - 100.0 * 150.0 / 350.0).abs() < 1e-9);
    }

    #[test]
    fn measures_this_process() {
        let me = std::process::id();
        let m = CpuMeter::start(&[me]).unwrap();
        // Spin for 300 ms of this thread's own CPU time (not of wall-clock
        // time, which a loaded machine stretches), then check the meter
        // saw at least that much CPU time spent: its shares times the
        // interval, less a few clock ticks of sampling error.
        let cpu_time = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime into a timespec we own.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let start = cpu_time();
        let mut x = 0u64;
        while cpu_time() - start < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let r = m.stop().unwrap();
        let seconds = |percent: f64| percent / 100.0 * r.elapsed.as_secs_f64();
        // Other tests run in this process too: at least our busy loop.
        assert!(seconds(r.pid_percent(me).unwrap()) >= 0.25, "{r:?}");
        assert!(seconds(r.total_busy_percent) >= 0.25, "{r:?}");
        assert!(r.vanished_pids.is_empty());
        assert!(!r.softirq_percent_per_cpu.is_empty());
    }

    #[test]
    fn missing_pid_is_an_error() {
        assert!(matches!(CpuMeter::start(&[u32::MAX]), Err(AppError::Proc { .. })));
    }
}
