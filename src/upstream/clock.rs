//! The clock a worker's timed loops read (the keeper today): tokio's, so that a
//! test pauses and advances it (`#[tokio::test(start_paused = true)]`) instead
//! of sleeping. Its milliseconds are CLOCK_MONOTONIC's, as `peers::now_ms`,
//! so the times it gives mean the same as those other processes wrote into a
//! zone. Pure time arithmetic stays in functions that take `now` as input.

use std::time::Duration;

use super::peers::Ms;
#[cfg(test)]
use super::peers::now_ms;

/// A monotonic clock: tokio's instant, and the zone's milliseconds derived
/// from it. In a worker both run with CLOCK_MONOTONIC; under paused time both
/// move only when tokio's clock is advanced.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: tokio::time::Instant,
    /// CLOCK_MONOTONIC at `base`, in nanoseconds (whole milliseconds would
    /// lag `now_ms` by up to one).
    base_ns: u64,
}

impl Clock {
    /// Reads both clocks once; every later reading is an offset from here.
    pub fn new() -> Clock {
        Clock {
            base: tokio::time::Instant::now(),
            base_ns: crate::net::clock::mono_ns(),
        }
    }

    pub fn now(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }

    /// Milliseconds on the zones' clock (`peers::now_ms`).
    pub fn now_ms(&self) -> Ms {
        (self.base_ns + self.elapsed().as_nanos() as u64) / 1_000_000
    }

    fn elapsed(&self) -> Duration {
        self.now().saturating_duration_since(self.base)
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_and_advances_with_tokio() {
        let c = Clock::new();
        let (t0, ms0) = (c.now(), c.now_ms());
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(c.now() - t0, Duration::from_millis(1500));
        assert_eq!(c.now_ms() - ms0, 1500);
    }

    #[test]
    fn follows_the_zone_clock_when_running() {
        let c = Clock::new();
        let (a, b) = (c.now_ms(), now_ms());
        assert!(a.abs_diff(b) <= 1, "{a} {b}");
    }
}
