//! Token-bucket rate limiter for the transmit loop.
//!
//! The I/O loop asks "how many may I send now?" with the current monotonic
//! time, sends up to that many, and reports what it really sent. Tokens are
//! kept in integer units of 1e-9 packet so that no rounding error
//! accumulates: as long as the bucket never overflows (the sender keeps up),
//! after T seconds exactly burst + floor(T * pps) packets have been allowed,
//! however often the loop polls.

const NS_PER_SEC: u128 = 1_000_000_000;

/// Token bucket: `pps` tokens per second, at most `burst` banked.
#[derive(Debug, Clone)]
pub struct Pacer {
    pps: Option<u64>,
    burst: u64,
    tokens: u64,
    /// Fraction of a token, in units of 1/1e9 token (so < pps when scaled).
    frac: u128,
    last_ns: Option<u64>,
}

impl Pacer {
    /// A pacer for `pps` packets per second (None = unlimited) letting at
    /// most `burst` packets (min 1) go back to back. The bucket starts full
    /// at the first [`Pacer::allowance`] call.
    pub fn new(pps: Option<u64>, burst: u64) -> Self {
        Pacer { pps: pps.filter(|&p| p > 0), burst: burst.max(1), tokens: 0, frac: 0, last_ns: None }
    }

    /// The configured rate; None when unlimited.
    pub fn pps(&self) -> Option<u64> {
        self.pps
    }

    /// Packets that may be sent at `now_ns` (monotonic clock). Does not
    /// consume them: call [`Pacer::consume`] with what was actually sent.
    /// `u64::MAX` when unlimited. A clock that goes backwards adds nothing.
    pub fn allowance(&mut self, now_ns: u64) -> u64 {
        let Some(pps) = self.pps else { return u64::MAX };
        let Some(last) = self.last_ns else {
            self.last_ns = Some(now_ns);
            self.tokens = self.burst;
            return self.tokens;
        };
        if now_ns > last {
            // Elapsed ns times pps = new tokens in 1e-9 units.
            let total = u128::from(now_ns - last) * u128::from(pps) + self.frac;
            let add = total / NS_PER_SEC;
            self.frac = total % NS_PER_SEC;
            self.tokens = self.tokens.saturating_add(u64::try_from(add).unwrap_or(u64::MAX));
            if self.tokens >= self.burst {
                // A full bucket discards the leftover fraction too.
                self.tokens = self.burst;
                self.frac = 0;
            }
            self.last_ns = Some(now_ns);
        }
        self.tokens
    }

    /// Records that `sent` packets went out (saturates at zero tokens).
    pub fn consume(&mut self, sent: u64) {
        if self.pps.is_some() {
            self.tokens = self.tokens.saturating_sub(sent);
        }
    }

    /// `allowance` capped at `max`, consumed at once: for loops that always
    /// send everything they are allowed.
    pub fn take(&mut self, now_ns: u64, max: u64) -> u64 {
        let n = self.allowance(now_ns).min(max);
        self.consume(n);
        n
    }

    /// Earliest time at which at least one token will be available, for a
    /// loop that wants to sleep or spin until then. `now_ns` if one is
    /// available already (or unlimited).
    pub fn next_token_ns(&self, now_ns: u64) -> u64 {
        match (self.pps, self.last_ns) {
            (Some(pps), Some(last)) if self.tokens == 0 => {
                let missing = NS_PER_SEC - self.frac; // in 1e-9-token units
                let wait = missing.div_ceil(u128::from(pps));
                let at = u128::from(last) + wait;
                u64::try_from(at).unwrap_or(u64::MAX).max(now_ns)
            }
            _ => now_ns,
        }
    }

    /// A pacer for a sender of `batch`-frame bursts at `rate` frames per
    /// second (None: flat out). Its bucket holds 1 ms of traffic, and at
    /// least one burst: a sleep overshoots by tens of µs and a sender may be
    /// off its CPU for a while, and a smaller bucket would drop what came due
    /// meanwhile and offer less than `rate`. It starts full.
    pub fn for_frames(rate: Option<u64>, batch: usize) -> Pacer {
        let bucket = rate.map_or(0, |r| r / 1_000).max(batch as u64);
        Pacer::new(rate, bucket)
    }

    /// Sleeps as a paced sender with nothing due should: until its next
    /// frame is due, at most 50 µs (a sleep overshoots by tens of µs, and
    /// whatever came due meanwhile goes back to back, at most the burst).
    pub fn wait(&self, now_ns: u64) {
        let wait = self.next_token_ns(now_ns).saturating_sub(now_ns).clamp(1_000, 50_000);
        std::thread::sleep(std::time::Duration::from_nanos(wait));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_frame_pacer_holds_a_millisecond_or_a_burst() {
        // 1 Mpps: 1000 frames may go back to back after a stall.
        let mut p = super::Pacer::for_frames(Some(1_000_000), 32);
        assert_eq!(p.allowance(0), 1000);
        // 10 kpps: one burst at least.
        let mut p = super::Pacer::for_frames(Some(10_000), 32);
        assert_eq!(p.allowance(0), 32);
        p.consume(32);
        // 100 µs later, one more frame is due.
        assert_eq!(p.allowance(100_000), 1);
        assert_eq!(super::Pacer::for_frames(None, 32).allowance(0), u64::MAX);
    }

    use super::*;

    #[test]
    fn unlimited() {
        let mut p = Pacer::new(None, 32);
        assert_eq!(p.allowance(0), u64::MAX);
        p.consume(1_000_000);
        assert_eq!(p.take(5, 64), 64);
        assert_eq!(Pacer::new(Some(0), 1).pps(), None);
    }

    #[test]
    fn starts_with_a_full_bucket_then_refills_at_rate() {
        let mut p = Pacer::new(Some(1000), 10); // one token per ms
        let t0 = 5_000_000_000;
        assert_eq!(p.take(t0, u64::MAX), 10);
        assert_eq!(p.allowance(t0), 0);
        assert_eq!(p.allowance(t0 + 999_999), 0);
        assert_eq!(p.allowance(t0 + 1_000_000), 1);
        assert_eq!(p.allowance(t0 + 3_500_000), 3);
        // Capped at burst after a long pause.
        assert_eq!(p.allowance(t0 + 1_000_000_000), 10);
    }

    #[test]
    fn exact_long_run_rate_with_odd_polling() {
        // 3 pps polled every 7 ms for 10 s, burst 2: exact, no drift.
        let mut p = Pacer::new(Some(3), 2);
        let mut sent = 0;
        let mut t = 0;
        while t <= 10_000_000_000 {
            sent += p.take(t, u64::MAX);
            t += 7_000_000;
        }
        // Last poll at 9.996 s: floor(9.996 * 3) = 29 tokens earned + 2 initial.
        assert_eq!(sent, 31);

        let mut p = Pacer::new(Some(1_000_000), 32);
        let mut sent = 0;
        for step in 0..=100_000u64 {
            sent += p.take(step * 10_000, 16); // 10 us steps, batches of 16
        }
        // 1 s at 1 Mpps plus the initial bucket of 32 (never full again).
        assert_eq!(sent, 1_000_032);
    }

    #[test]
    fn clock_going_backwards_adds_nothing() {
        let mut p = Pacer::new(Some(1000), 5);
        assert_eq!(p.take(10_000_000, u64::MAX), 5);
        assert_eq!(p.allowance(1_000_000), 0);
        assert_eq!(p.allowance(11_000_000), 1);
    }

    #[test]
    fn consume_partial_send() {
        let mut p = Pacer::new(Some(1000), 8);
        assert_eq!(p.allowance(0), 8);
        p.consume(3); // ring was full
        assert_eq!(p.allowance(0), 5);
        p.consume(100);
        assert_eq!(p.allowance(0), 0);
    }

    #[test]
    fn next_token_time() {
        let mut p = Pacer::new(Some(4), 1); // one token every 250 ms
        assert_eq!(p.take(1_000, 1), 1);
        assert_eq!(p.allowance(100_000_000), 0);
        let at = p.next_token_ns(100_000_000);
        assert_eq!(at, 250_001_000);
        assert_eq!(p.allowance(at - 1), 0);
        assert_eq!(p.allowance(at), 1);
        assert_eq!(p.next_token_ns(at), at);
    }
}
