//! Real processes sharing one region: producers are this test binary
//! re-executed (`child_producer` below) with the region memfd and the data
//! eventfd left inheritable and their numbers passed in the environment.
#![cfg(not(loom))]

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_ring::{Consumer, Desc, EventFd, RegionLayout, RingConfig, ShmRegion};

const ENV_ROLE: &str = "FERRY_RING_CHILD";

/// A copy of `fd` without close-on-exec, so a child inherits it.
fn inheritable(fd: impl AsFd) -> i32 {
    // SAFETY: dup of a valid fd; the copy is deliberately leaked to children.
    let n = unsafe { libc::dup(fd.as_fd().as_raw_fd()) };
    assert!(n >= 0);
    n
}

fn env_u64(k: &str) -> u64 {
    std::env::var(k).unwrap().parse().unwrap()
}

/// Child side. Does nothing in a normal test run.
#[test]
fn child_producer() {
    let Ok(mode) = std::env::var(ENV_ROLE) else { return };
    // SAFETY: the parent passed these fds to us and nothing else owns them.
    let (region_fd, event_fd) = unsafe {
        (OwnedFd::from_raw_fd(env_u64("FR_REGION") as i32), OwnedFd::from_raw_fd(env_u64("FR_EVENT") as i32))
    };
    let region = ShmRegion::from_fd(region_fd).unwrap();
    let id = env_u64("FR_ID") as u16;
    let count = env_u64("FR_COUNT");
    let mut p = region.ring(0).unwrap().producer(id).unwrap();
    p.set_data_notify(Arc::new(EventFd::from_owned(event_fd).unwrap()));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (id as u64 + 1);
    let mut batch = Vec::with_capacity(64);
    let mut seq = 0u64;
    while seq < count {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = (rng % 64 + 1).min(count - seq);
        batch.clear();
        batch.extend((seq..seq + k).map(|s| Desc { addr: s, len: 64, next_hop: id, flags: 0 }));
        let mut sent = 0;
        while sent < batch.len() {
            let n = p.send(&batch[sent..]).unwrap();
            if n == 0 {
                std::hint::spin_loop();
            }
            sent += n;
        }
        seq += k;
    }
    if mode == "abandon" {
        // Die (later, by SIGKILL) holding a claim of 8 with 3 published.
        let tail: Vec<Desc> = (seq..seq + 8).map(|s| Desc { addr: s, len: 64, next_hop: id, flags: 0 }).collect();
        assert_eq!(p.ring().abandon_after_claim(id, &tail, 3), 8);
        p.wake_consumer().unwrap();
        std::thread::sleep(Duration::from_secs(60));
    }
}

struct Setup {
    region: ShmRegion,
    consumer: Consumer,
    event: Arc<EventFd>,
}

fn setup() -> Setup {
    let region = ShmRegion::create(&RegionLayout::new().ring(RingConfig::new(1024, 2).unwrap())).unwrap();
    let event = Arc::new(EventFd::new().unwrap());
    let mut consumer = region.ring(0).unwrap().consumer().unwrap();
    consumer.set_data_notify(event.clone());
    Setup { region, consumer, event }
}

fn spawn(s: &Setup, id: u16, count: u64, mode: &str) -> Child {
    let (r, e) = (inheritable(s.region.fd()), inheritable(s.event.as_fd()));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_producer", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, mode)
        .env("FR_REGION", r.to_string())
        .env("FR_EVENT", e.to_string())
        .env("FR_ID", id.to_string())
        .env("FR_COUNT", count.to_string())
        // The child's own libtest summary would read like ours; keep stderr
        // for its panics.
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // SAFETY: our copies; the child has its own after fork.
    unsafe {
        libc::close(r);
        libc::close(e);
    }
    child
}

/// Per-producer delivery record: next expected seq is not assumed, only
/// strict increase, so holes can be accounted for afterwards.
#[derive(Default, Clone)]
struct Seen {
    count: u64,
    last: Option<u64>,
}

fn consume(c: &mut Consumer, seen: &mut [Seen], out: &mut Vec<Desc>) {
    out.clear();
    if c.dequeue_batch(256, out) == 0 {
        c.wait_for_data(Some(Duration::from_millis(5))).unwrap();
        return;
    }
    for d in out.iter() {
        let s = &mut seen[d.next_hop as usize];
        if let Some(l) = s.last {
            assert!(d.addr > l, "producer {} reordered or duplicated {}", d.next_hop, d.addr);
        }
        s.last = Some(d.addr);
        s.count += 1;
    }
}

/// How long the consumer may see nothing new before a test calls the ring
/// wedged. A loaded machine slows the producers down but they still make
/// progress, so the guard is on progress, not on the whole run's time.
const STALL: Duration = Duration::from_secs(60);

/// Fails the test when `delivered` has not grown for [`STALL`].
struct StallGuard {
    delivered: u64,
    since: Instant,
}

impl StallGuard {
    fn new() -> StallGuard {
        StallGuard { delivered: 0, since: Instant::now() }
    }

    fn check(&mut self, delivered: u64, state: impl FnOnce() -> String) {
        if delivered > self.delivered {
            self.delivered = delivered;
            self.since = Instant::now();
        }
        assert!(self.since.elapsed() < STALL, "nothing new for {STALL:?}: {}", state());
    }
}

#[test]
fn two_producer_processes_exactly_once_in_order() {
    const N: u64 = 2_000_000;
    let mut s = setup();
    let children = [spawn(&s, 0, N, "run"), spawn(&s, 1, N, "run")];
    let mut seen = vec![Seen::default(); 2];
    let mut out = Vec::new();
    let mut guard = StallGuard::new();
    while seen.iter().map(|x| x.count).sum::<u64>() < 2 * N {
        let total = seen.iter().map(|x| x.count).sum();
        guard.check(total, || format!("stalled at {:?}", seen.iter().map(|x| x.count).collect::<Vec<_>>()));
        consume(&mut s.consumer, &mut seen, &mut out);
    }
    for mut ch in children {
        assert!(ch.wait().unwrap().success());
    }
    for x in &seen {
        // Strictly increasing and N of them starting at 0: exactly 0..N.
        assert_eq!((x.count, x.last), (N, Some(N - 1)));
    }
    assert_eq!(s.consumer.holes_total(), 0);
    assert_eq!(s.region.ring(0).unwrap().fill_level(), 0);
}

/// Checks the hole accounting for a producer that died: its deliveries are
/// strictly increasing from 0, and together with its holes they are
/// exactly the prefix 0..(delivered + holes) it had claimed.
fn check_dead_accounting(seen: &Seen, holes: u64) {
    let claimed = seen.count + holes;
    if let Some(last) = seen.last {
        assert!(last < claimed, "delivered seq {last} beyond claimed prefix {claimed}");
    }
}

#[test]
fn sigkill_mid_run_then_repair_unwedges() {
    let mut s = setup();
    let ring = s.region.ring(0).unwrap();
    let mut victim = spawn(&s, 1, u64::MAX / 2, "run");
    let mut survivor = spawn(&s, 0, 1_000_000, "run");
    let mut seen = vec![Seen::default(); 2];
    let mut out = Vec::new();
    let mut guard = StallGuard::new();
    while seen[1].count < 300_000 {
        guard.check(seen[1].count, || format!("the victim stopped at {}", seen[1].count));
        consume(&mut s.consumer, &mut seen, &mut out);
    }
    // Kill while it is pushing as fast as it can (likely inside a claim).
    victim.kill().unwrap();
    victim.wait().unwrap();
    let report = ring.repair_after_producer_death(1);
    let mut guard = StallGuard::new();
    while seen[0].count < 1_000_000 || ring.fill_level() > 0 {
        let total = seen[0].count + seen[1].count;
        guard.check(total, || format!("wedged: {:?} blocked_by {:?}", report, s.consumer.blocked_by()));
        consume(&mut s.consumer, &mut seen, &mut out);
    }
    assert!(survivor.wait().unwrap().success());
    let holes = s.consumer.holes_from(1);
    assert_eq!(holes, report.holes as u64, "consumer saw every hole the repair wrote");
    check_dead_accounting(&seen[1], holes);
    assert_eq!((seen[0].count, seen[0].last), (1_000_000, Some(999_999)));
    eprintln!("killed producer: delivered {}, holes {}, report {:?}", seen[1].count, holes, report);
}

#[test]
fn killed_holding_a_claim_is_repaired_exactly() {
    let mut s = setup();
    let ring = s.region.ring(0).unwrap();
    let mut victim = spawn(&s, 1, 5_000, "abandon");
    let mut seen = vec![Seen::default(); 2];
    let mut out = Vec::new();
    let mut guard = StallGuard::new();
    // Everything before the abandoned claim arrives, then the consumer is stuck.
    while seen[1].count < 5_000 || s.consumer.blocked_by().is_none() {
        guard.check(seen[1].count, || format!("at {} blocked_by {:?}", seen[1].count, s.consumer.blocked_by()));
        consume(&mut s.consumer, &mut seen, &mut out);
    }
    assert_eq!(s.consumer.blocked_by(), Some((1, 8)));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let report = ring.repair_after_producer_death(1);
    assert_eq!((report.claimed, report.kept, report.holes), (8, 3, 5));
    for _ in 0..3 {
        consume(&mut s.consumer, &mut seen, &mut out);
    }
    assert_eq!(s.consumer.holes_from(1), 5);
    // 5000 plain + the 3 published slots of the claim (seqs 5001..=5003).
    assert_eq!((seen[1].count, seen[1].last), (5_003, Some(5_003)));
    check_dead_accounting(&seen[1], 5);
    assert_eq!(ring.fill_level(), 0);
}
