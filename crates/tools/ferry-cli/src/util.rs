//! Small process-level helpers shared by the subcommands.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM ask the running loop to finish cleanly (print
/// its counters, detach its programs) instead of killing the process.
pub fn install_stop_handler() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// True once a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// A run limit: until a deadline, a stop signal, or both.
pub struct RunLimit {
    deadline: Option<Instant>,
}

impl RunLimit {
    pub fn new(duration: Option<Duration>) -> Self {
        RunLimit { deadline: duration.map(|d| Instant::now() + d) }
    }
    pub fn done(&self) -> bool {
        stop_requested() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Index of a device in this process's network namespace.
pub fn ifindex(dev: &str) -> Result<u32> {
    ferry_xsk::ifindex(dev).ok_or_else(|| anyhow!("no such device {dev:?} in this network namespace"))
}

/// MAC address of a device, from sysfs.
pub fn dev_mac(dev: &str) -> Result<ferry_wire::MacAddr> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
        .with_context(|| format!("reading the MAC address of {dev}"))?;
    text.trim().parse().map_err(|e| anyhow!("MAC address of {dev}: {e}"))
}

/// Parses "5s", "500ms", "2" (seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| c.is_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" => v * 60.0,
        _ => return Err(format!("invalid duration unit in {s:?} (s, ms, us, m)")),
    };
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A measurement window over counters of type `T`: it opens `warmup`
/// after the first traffic is seen and closes `length` later (or stays open
/// until the run ends). Timing from the first packet, not from process
/// start, keeps measurements aligned with the traffic whatever the start-up
/// order of the processes involved.
pub struct Window<T> {
    warmup: Duration,
    length: Option<Duration>,
    first: Option<Instant>,
    open: Option<(Instant, T)>,
    closed: Option<(f64, T, T)>,
}

impl<T: Copy> Window<T> {
    pub fn new(warmup: Duration, length: Option<Duration>) -> Self {
        Window { warmup, length, first: None, open: None, closed: None }
    }

    /// Feeds the current state: whether traffic was seen so far, and the
    /// counters (taken only when the window opens or closes).
    pub fn observe(&mut self, traffic_seen: bool, counters: impl FnOnce() -> T) {
        if self.closed.is_some() || !traffic_seen {
            return;
        }
        let now = Instant::now();
        let first = *self.first.get_or_insert(now);
        match self.open {
            None if now.duration_since(first) >= self.warmup => self.open = Some((now, counters())),
            Some((at, start)) if self.length.is_some_and(|l| now.duration_since(at) >= l) => {
                self.closed = Some((now.duration_since(at).as_secs_f64(), start, counters()));
            }
            _ => {}
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// (seconds, counters at open, counters at close); a window still open
    /// is closed now with `current`. None if it never opened.
    pub fn result(&self, current: T) -> Option<(f64, T, T)> {
        self.closed.or_else(|| self.open.map(|(at, start)| (at.elapsed().as_secs_f64(), start, current)))
    }
}

/// A private directory for config files, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Result<Scratch> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos();
        let dir = std::env::temp_dir().join(format!("ferry-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.0.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("5h").is_err());
    }

    #[test]
    fn window_opens_after_first_traffic_and_closes() {
        let mut w: Window<u64> = Window::new(Duration::ZERO, Some(Duration::from_millis(20)));
        w.observe(false, || 1);
        assert!(w.result(5).is_none(), "no traffic, no window");
        w.observe(true, || 10);
        assert_eq!(w.result(15).map(|r| (r.1, r.2)), Some((10, 15)), "open window closes at `current`");
        std::thread::sleep(Duration::from_millis(25));
        w.observe(true, || 40);
        assert!(w.is_closed());
        w.observe(true, || 99);
        let (secs, a, b) = w.result(100).unwrap();
        assert_eq!((a, b), (10, 40), "closed window keeps its counters");
        assert!(secs >= 0.02);
    }
}
