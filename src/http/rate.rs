//! Rate limits on a response body, as nginx's: `limit_rate` (and
//! `limit_rate_after`) on what goes to the client, `proxy_limit_rate` on what
//! is read from the upstream. One bucket per request: by `t` seconds after
//! the start, `after + rate * (t + 1)` bytes may have gone (nginx grants the
//! first second at once); past that the body sleeps until there is room.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::response::{Body, BoxError};
use crate::conf::rate::{AFTER_IN_IF, size};
use crate::conf::values::parse_size;

pub use crate::net::rate::Bucket;

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
