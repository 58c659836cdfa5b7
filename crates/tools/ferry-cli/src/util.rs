//! Small process-level helpers shared by the subcommands.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

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

/// How often the waiting helpers look again.
const POLL: Duration = Duration::from_millis(10);

/// Waits for `f` to return something (a status showing an event) and
/// returns it. The `guard` only stops a hang: it says nothing about speed.
pub fn wait_for<T>(what: &str, guard: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + guard;
    loop {
        if let Some(found) = f() {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {guard:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// Waits for `f` to hold (a counter reached, a process gone).
pub fn wait_until(what: &str, guard: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
    wait_for(what, guard, || f().then_some(()))
}

/// Waits for a counter to reach `goal`, for as long as it keeps rising:
/// the error comes only when `progress` stood still for `stall`, so a slow
/// but moving counter is never cut off. Returns the counter's last value.
pub fn wait_while_progressing(
    what: &str,
    stall: Duration,
    goal: u64,
    mut progress: impl FnMut() -> u64,
) -> Result<u64> {
    let (mut best, mut moved) = (progress(), Instant::now());
    while best < goal {
        if moved.elapsed() >= stall {
            bail!("{what}: stood at {best} of {goal} for {stall:?}");
        }
        std::thread::sleep(POLL);
        let now = progress();
        if now > best {
            (best, moved) = (now, Instant::now());
        }
    }
    Ok(best)
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
    fn waits_end_on_the_event_or_fail_after_the_guard() {
        let mut n = 0;
        assert_eq!(
            wait_for("n at 3", Duration::from_secs(60), || {
                n += 1;
                (n == 3).then_some(n)
            })
            .unwrap(),
            3
        );
        let err = wait_until("never", Duration::ZERO, || false).unwrap_err();
        assert!(err.to_string().contains("waiting for never"), "{err}");
    }

    #[test]
    fn a_progressing_wait_lasts_while_its_counter_rises() {
        // Each look moves the counter by one: no stall, whatever the goal.
        let mut n = 0;
        assert_eq!(
            wait_while_progressing("n", Duration::from_secs(60), 50, || {
                n += 1;
                n
            })
            .unwrap(),
            50
        );
        // A counter that stands still fails once the stall is over.
        let err = wait_while_progressing("frames made", Duration::ZERO, 5, || 2).unwrap_err();
        assert_eq!(err.to_string(), "frames made: stood at 2 of 5 for 0ns");
    }

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
