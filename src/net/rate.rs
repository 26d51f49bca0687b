//! A token bucket for rate limits, as nginx paces: by `t` seconds after the
//! start, `after + rate * (t + 1)` bytes may have gone (nginx grants the
//! first second at once); past that the caller waits until there is room.
//! http's `limit_rate` and `proxy_limit_rate` (`http::rate`) and stream's
//! `proxy_download_rate` / `proxy_upload_rate` (`net::copy`) use it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

/// A per-request (or per-direction) token bucket.
pub struct Bucket {
    /// Bytes per second; never 0 (no bucket then).
    rate: u64,
    /// Bytes that go before the limit starts.
    after: u64,
    start: Instant,
    used: u64,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Bucket {
    /// None when `rate` is 0 (no limit).
    pub fn new(rate: u64, after: u64) -> Option<Bucket> {
        (rate > 0).then(|| Bucket {
            rate,
            after,
            start: Instant::now(),
            used: 0,
            sleep: None,
        })
    }

    /// Bytes that may go by `elapsed` after the start.
    fn allowed(&self, elapsed: Duration) -> u64 {
        let by_time = u128::from(self.rate) * (elapsed.as_millis() + 1000) / 1000;
        u64::try_from(by_time)
            .unwrap_or(u64::MAX)
            .saturating_add(self.after)
    }

    /// How many bytes may go now (at least one), or Pending with a timer
    /// armed for when some may.
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<u64> {
        loop {
            if let Some(s) = self.sleep.as_mut() {
                if s.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let allowed = self.allowed(self.start.elapsed());
            if allowed > self.used {
                return Poll::Ready(allowed - self.used);
            }
            // The time by which `used + 1` bytes are allowed.
            let over = self.used - self.after.min(self.used) + 1;
            let ms = (u128::from(over) * 1000).div_ceil(u128::from(self.rate));
            let ms = u64::try_from(ms.saturating_sub(1000)).unwrap_or(u64::MAX);
            let at = self.start + Duration::from_millis(ms.min(86_400_000));
            self.sleep = Some(Box::pin(tokio::time::sleep_until(at)));
        }
    }

    /// Counts bytes that went.
    pub fn used(&mut self, n: u64) {
        self.used = self.used.saturating_add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_grants_the_first_second_and_after() {
        let b = Bucket::new(1000, 500).unwrap();
        assert_eq!(b.allowed(Duration::ZERO), 1500);
        assert_eq!(b.allowed(Duration::from_millis(2500)), 4000);
        assert!(Bucket::new(0, 10).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_room() {
        let mut b = Bucket::new(1000, 0).unwrap();
        let start = Instant::now();
        let room = std::future::poll_fn(|cx| b.poll_room(cx)).await;
        assert_eq!(room, 1000);
        b.used(3000);
        let room = std::future::poll_fn(|cx| b.poll_room(cx)).await;
        assert!(room >= 1);
        // 3000 bytes at 1000/s with the first second free: two seconds.
        assert!(start.elapsed() >= Duration::from_millis(2000));
        assert!(start.elapsed() < Duration::from_millis(2100));
    }
}
