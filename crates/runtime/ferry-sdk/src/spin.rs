//! How long an idle NF thread keeps polling before it sleeps: a window
//! sized by the idle gaps it has seen, as the kernel's halt-polling sizes
//! a vCPU's (`Documentation/virt/kvm/halt-polling.rst`).
//!
//! A sleeping thread pays a wake-up on the next frame (tens of µs on a
//! virtual machine whose idle CPU halts). Polling through a gap avoids it
//! but burns the CPU for the whole gap, so it only pays when gaps are
//! short. [`SpinWindow`] grows when the gap that just ended was no longer
//! than its cap (polling that long would have caught the frame) and halves
//! when it was longer (polling would only have burnt the CPU).

use std::time::{Duration, Instant};

/// The spin window of one NF thread. Guarantees: the window never exceeds
/// the cap; with a cap of zero it is always zero (the thread sleeps at
/// once, as without it); a run of gaps longer than the cap shrinks it to
/// zero within `log2(cap in ns)` gaps, so traffic too sparse to catch
/// costs no spinning after that.
#[derive(Debug, Clone)]
pub(crate) struct SpinWindow {
    cap: Duration,
    window: Duration,
    /// When the current idle gap began (the first poll that found nothing).
    idle_since: Option<Instant>,
}

/// A window this small is not worth keeping: it rounds to zero.
const MIN_WINDOW: Duration = Duration::from_micros(1);

impl SpinWindow {
    pub(crate) fn new(cap: Duration) -> SpinWindow {
        SpinWindow { cap, window: Duration::ZERO, idle_since: None }
    }

    /// A poll found nothing: true while the thread should keep polling,
    /// false once it should sleep.
    pub(crate) fn keep_polling(&mut self, now: Instant) -> bool {
        let since = *self.idle_since.get_or_insert(now);
        now.duration_since(since) < self.window
    }

    /// Input arrived: the gap that ended sizes the next window. A gap the
    /// window caught sets it to the gap with a quarter to spare (so it
    /// follows gaps down); a gap it missed but the cap covers sets it the
    /// same way but at least doubles it (so it catches up fast); a gap
    /// past the cap halves it.
    pub(crate) fn input(&mut self, now: Instant) {
        let Some(since) = self.idle_since.take() else { return };
        let gap = now.duration_since(since);
        let covering = (gap + gap / 4).max(MIN_WINDOW);
        self.window = if gap <= self.window {
            covering.min(self.cap)
        } else if gap <= self.cap {
            covering.max(self.window * 2).min(self.cap)
        } else if self.window / 2 < MIN_WINDOW {
            Duration::ZERO
        } else {
            self.window / 2
        };
    }

    /// Whether the window is in use at all (a zero cap turns it off).
    pub(crate) fn enabled(&self) -> bool {
        !self.cap.is_zero()
    }

    /// Whether an idle gap is running (input will end it).
    pub(crate) fn in_gap(&self) -> bool {
        self.idle_since.is_some()
    }

    #[cfg(test)]
    pub(crate) fn window(&self) -> Duration {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Runs one idle gap of `gap`: polls until told to sleep, then input.
    /// Returns whether the thread was still polling when input came.
    fn gap(w: &mut SpinWindow, t: &mut Instant, gap: Duration) -> bool {
        let start = *t;
        assert!(w.keep_polling(start) || w.window() == Duration::ZERO);
        let caught = w.keep_polling(start + gap - Duration::from_nanos(1));
        *t = start + gap;
        w.input(*t);
        caught
    }

    #[test]
    fn a_zero_cap_never_polls() {
        let (mut w, mut t) = (SpinWindow::new(Duration::ZERO), Instant::now());
        for _ in 0..10 {
            assert!(!gap(&mut w, &mut t, 5 * US));
            assert_eq!(w.window(), Duration::ZERO);
        }
    }

    #[test]
    fn short_gaps_are_caught_after_the_first() {
        let (mut w, mut t) = (SpinWindow::new(50 * US), Instant::now());
        assert!(!gap(&mut w, &mut t, 20 * US), "the first gap finds a zero window");
        for _ in 0..10 {
            assert!(gap(&mut w, &mut t, 20 * US), "then the window covers the gap");
            assert_eq!(w.window(), 25 * US);
        }
    }

    #[test]
    fn long_gaps_shrink_the_window_to_zero() {
        let (mut w, mut t) = (SpinWindow::new(50 * US), Instant::now());
        gap(&mut w, &mut t, 40 * US);
        assert_eq!(w.window(), 50 * US, "capped");
        let mut gaps = 0;
        while w.window() > Duration::ZERO {
            assert!(!gap(&mut w, &mut t, 100 * US), "a gap past the cap is never caught");
            gaps += 1;
            assert!(w.window() <= 50 * US);
        }
        assert!(gaps <= 16, "log2(50 µs in ns) < 16; took {gaps}");
        assert!(!w.keep_polling(t), "and then the thread sleeps at once");
    }

    #[test]
    fn a_window_that_just_missed_at_least_doubles() {
        let (mut w, mut t) = (SpinWindow::new(200 * US), Instant::now());
        gap(&mut w, &mut t, 4 * US);
        assert_eq!(w.window(), 5 * US);
        assert!(!gap(&mut w, &mut t, 6 * US), "5 µs does not cover 6");
        assert_eq!(w.window(), 10 * US, "max(6 + 1.5, 2 × 5)");
        assert!(gap(&mut w, &mut t, 4 * US));
        assert_eq!(w.window(), 5 * US, "a caught gap brings the window down to it");
    }
}
