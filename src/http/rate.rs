//! Rate limits on a response body, as nginx's: `limit_rate` (and
//! `limit_rate_after`) on what goes to the client, `proxy_limit_rate` on what
//! is read from the upstream. One bucket per request: by `t` seconds after
//! the start, `after + rate * (t + 1)` bytes may have gone (nginx grants the
//! first second at once); past that the body sleeps until there is room.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::response::{Body, BoxError};
use crate::conf::rate::{AFTER_IN_IF, size};
use crate::conf::values::parse_size;

/// A per-request token bucket.
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

/// The request's `limit_rate` bucket: the upstream's `X-Accel-Limit-Rate`
/// first, then `set $limit_rate`, then `limit_rate`; `limit_rate_after`
/// bytes go first. None without a limit.
pub fn client_bucket(r: &super::vars::Req) -> Option<Bucket> {
    let rate = match (
        r.accel_limit_rate,
        r.vars.iter().find(|(n, _)| n == "limit_rate"),
    ) {
        (Some(n), _) => n,
        (None, Some((_, v))) => parse_size(v.trim()).unwrap_or(0),
        (None, None) => size(r.conf.limit_rate.as_ref(), |t| r.eval(t)),
    };
    if rate == 0 {
        return None;
    }
    let after = match r.vars.iter().find(|(n, _)| n == AFTER_IN_IF) {
        Some((_, v)) => parse_size(v.trim()).unwrap_or(0),
        None => size(r.conf.limit_rate_after.as_ref(), |t| r.eval(t)),
    };
    Bucket::new(rate, after)
}

/// A body sent no faster than its bucket allows: a piece larger than the
/// room waits for the rest.
pub struct Limited {
    inner: Body,
    bucket: Bucket,
    /// The part of a piece that did not fit yet.
    rest: Option<Bytes>,
}

impl Limited {
    pub fn new(inner: Body, bucket: Bucket) -> Limited {
        Limited {
            inner,
            bucket,
            rest: None,
        }
    }
}

impl HttpBody for Limited {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let room = match this.bucket.poll_room(cx) {
            Poll::Ready(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Poll::Pending => return Poll::Pending,
        };
        let mut data = match this.rest.take() {
            Some(d) => d,
            None => match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => d,
                    Err(f) => return Poll::Ready(Some(Ok(f))),
                },
                other => return other,
            },
        };
        if data.len() > room {
            this.rest = Some(data.split_off(room));
        }
        this.bucket.used(data.len() as u64);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.as_ref().map_or(0, |b| b.len() as u64);
        let h = self.inner.size_hint();
        let mut out = SizeHint::new();
        out.set_lower(h.lower().saturating_add(rest));
        if let Some(u) = h.upper() {
            out.set_upper(u.saturating_add(rest));
        }
        out
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
