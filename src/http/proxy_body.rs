//! The upstream's response body as the proxy streams it: what
//! `proxy_buffering` read ahead first, then the rest with
//! `proxy_read_timeout` between reads; at its end the connection returns to
//! the keep-alive cache and the peer is released. Errors carry the upstream
//! URL for the access-log body to report with the request's context.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::response::BoxError;
use super::vars::UpstreamLog;
use crate::h1::body::Decoder;
use crate::upstream::attempt::Kind;
use crate::upstream::h1conn::ReadError;
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers, Pooled, UpstreamRt};

/// The upstream's response body on its way to the client, read from the
/// connection by the task that sends it on. When it ends, the connection
/// goes back to the keep-alive cache and the peer is released;
/// `proxy_read_timeout` bounds the wait between two reads.
pub(crate) struct ProxyBody {
    /// The connection the body is read from, until its end.
    pub(crate) conn: Option<Pooled>,
    pub(crate) decoder: Decoder,
    /// The body ended cleanly.
    pub(crate) ended: bool,
    /// The upstream lets the connection serve again after this body.
    pub(crate) keep: bool,
    /// What `proxy_buffering` read ahead, sent before the rest.
    pub(crate) ahead: Ahead,
    pub(crate) ups: Arc<UpstreamRt>,
    /// The request's snapshot of the peers and the one that answered.
    pub(crate) peer: Option<(Arc<Peers>, PeerId)>,
    pub(crate) log: Arc<Mutex<UpstreamLog>>,
    pub(crate) attempt_start: Instant,
    pub(crate) received: u64,
    pub(crate) read_timeout: Duration,
    /// Armed only while waiting: a body that is ready at once needs no timer.
    pub(crate) timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// For the upstream URL an error names: the peer and the URI sent.
    pub(crate) peer_name: Arc<str>,
    /// `http` or `https`.
    pub(crate) scheme: &'static str,
    pub(crate) uri: super::proxy_plan::UpUri,
    /// A failure held back one poll so that what came before it is written
    /// out first.
    pub(crate) held_error: Option<ReadError>,
    /// `proxy_limit_rate` (with `proxy_buffering`): reads wait for room.
    pub(crate) limit: Option<super::rate::Bucket>,
    /// Waiting for `limit`, not for the upstream: no read timeout runs.
    pub(crate) rate_wait: bool,
    /// `sticky learn` without `header`: the session is learned when the
    /// body has ended well (nginx learns as it frees the peer).
    pub(crate) learn: Option<Box<dyn FnOnce() + Send + Sync>>,
    /// `fastcgi_pass`: the body is STDOUT records, not HTTP framing.
    pub(crate) fcgi: Option<Box<super::fastcgi::Stdout>>,
    /// A chunked body's trailer fields, sent after its last data (to an
    /// HTTP/1.1 client whose response is chunked, or an HTTP/2 one) once
    /// the fields that may not be trailers are left out.
    pub(crate) trailers: Option<Box<http::HeaderMap>>,
}

/// An upstream failure while streaming the response body; the body that owns
/// the request logs it with the request's context.
#[derive(Debug)]
pub struct UpstreamBodyError {
    /// nginx's words for it, "while reading upstream" included.
    pub message: std::borrow::Cow<'static, str>,
    pub url: String,
    /// Timed out, or failed otherwise: 504 or 502 before the head went out.
    pub kind: Kind,
}

impl UpstreamBodyError {
    pub fn status(&self) -> u16 {
        if self.kind == Kind::Timeout { 504 } else { 502 }
    }
}

impl std::fmt::Display for UpstreamBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UpstreamBodyError {}

impl ProxyBody {
    pub(crate) fn finish(&mut self, complete: bool) {
        let Some((peers, id)) = self.peer.take() else {
            return;
        };
        if let Some(learn) = self.learn.take().filter(|_| complete) {
            learn();
        }
        let now = crate::net::clock::now();
        let wire = self.conn.as_ref().map(|c| c.h1.wire().1);
        if let Some(a) = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempts
            .last_mut()
        {
            a.response = Some(crate::net::clock::since(self.attempt_start));
            a.length = Some(self.received);
            // The head and the body as they came on the wire.
            a.received = wire.unwrap_or(a.received + self.received);
        }
        if let Some(mut c) = self.conn.take() {
            // Reused only after a clean end with nothing more unread.
            if complete && self.keep && c.h1.idle() {
                self.ups.pool().put(c, now);
            }
        }
        if self.received > 0 {
            peers
                .get(id)
                .live
                .received
                .fetch_add(self.received, std::sync::atomic::Ordering::Relaxed);
        }
        peers.release(id, Outcome::Ok, now_ms());
    }

    fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.peer_name, self.uri)
    }

    fn failed(&self, e: ReadError) -> UpstreamBodyError {
        UpstreamBodyError {
            // nginx's words: a chunked body that does not parse is the
            // upstream's fault in a different way from one cut short.
            message: match e {
                ReadError::Invalid => {
                    "upstream sent invalid chunked response while reading upstream"
                }
                ReadError::Truncated => {
                    "upstream prematurely closed connection while reading upstream"
                }
            }
            .into(),
            url: self.url(),
            kind: Kind::Closed,
        }
    }

    fn timed_out(&self) -> UpstreamBodyError {
        UpstreamBodyError {
            message: "upstream timed out (110: Connection timed out) while reading upstream".into(),
            url: self.url(),
            kind: Kind::Timeout,
        }
    }

    /// The next bytes from the upstream: Ok(None) at the end (the peer is
    /// then released), Err when it failed (likewise).
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ReadError>> {
        if self.ended || self.peer.is_none() {
            self.finish(true);
            return Poll::Ready(Ok(None));
        }
        let Some(c) = self.conn.as_mut() else {
            return Poll::Ready(Ok(None));
        };
        self.rate_wait = false;
        if let Some(b) = self.limit.as_mut() {
            if b.poll_room(cx).is_pending() {
                self.rate_wait = true;
                return Poll::Pending;
            }
        }
        let polled = match self.fcgi.as_mut() {
            Some(out) => super::fastcgi::poll_body(c, out, cx),
            None => c.h1.poll_body(&mut self.decoder, &mut self.trailers, cx),
        };
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(d))) => {
                self.received += d.len() as u64;
                if let Some(b) = self.limit.as_mut() {
                    b.used(d.len() as u64);
                }
                Poll::Ready(Ok(Some(d)))
            }
            Poll::Ready(Ok(None)) => {
                self.ended = true;
                self.finish(true);
                Poll::Ready(Ok(None))
            }
            Poll::Ready(Err(e)) => {
                self.finish(false);
                Poll::Ready(Err(e))
            }
        }
    }

    /// `proxy_buffering on`: reads the upstream's body into memory, up to
    /// `room` bytes, so that a response that fits frees its upstream
    /// connection before the client has read it.
    pub(crate) async fn read_ahead(&mut self, room: u64) -> Result<(), UpstreamBodyError> {
        let mut held: u64 = 0;
        while held < room {
            // The wait for `proxy_limit_rate` is not the upstream's.
            if let Some(b) = self.limit.as_mut() {
                poll_fn(|cx| b.poll_room(cx)).await;
            }
            let timeout = self.read_timeout;
            let next = crate::net::clock::timeout(timeout, poll_fn(|cx| self.poll_next(cx))).await;
            match next {
                Err(_) => {
                    self.finish(false);
                    return Err(self.timed_out());
                }
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(self.failed(e)),
                Ok(Ok(Some(d))) => {
                    held += d.len() as u64;
                    self.ahead.push_back(d);
                }
            }
        }
        Ok(())
    }
}

impl HttpBody for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(b) = this.ahead.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if let Some(e) = this.held_error.take() {
            return Poll::Ready(Some(Err(Box::new(this.failed(e)))));
        }
        match this.poll_next(cx) {
            Poll::Ready(Ok(Some(d))) => {
                this.timer = None;
                Poll::Ready(Some(Ok(Frame::data(d))))
            }
            Poll::Ready(Ok(None)) => match this.trailers.take() {
                Some(t) => Poll::Ready(trailers_passed(*t).map(|t| Ok(Frame::trailers(t)))),
                None => Poll::Ready(None),
            },
            // The bytes before the failure go out first: the writer
            // flushes when the body is pending.
            Poll::Ready(Err(e)) if this.received > 0 => {
                this.held_error = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(Box::new(this.failed(e))))),
            Poll::Pending if this.rate_wait => {
                this.timer = None;
                Poll::Pending
            }
            Poll::Pending => {
                let timeout = this.read_timeout;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(crate::net::clock::sleep(timeout)));
                if timer.as_mut().poll(cx).is_ready() {
                    this.finish(false);
                    return Poll::Ready(Some(Err(Box::new(this.timed_out()))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && (self.peer.is_none() || self.ended) && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self.ahead.iter().map(|b| b.len() as u64).sum();
        // A body read whole is sent with its length, unless trailers
        // follow it: then chunked, which carries them.
        if (self.peer.is_none() || self.ended) && self.trailers.is_none() {
            return SizeHint::with_exact(ahead);
        }
        let mut h = SizeHint::default();
        h.set_lower(ahead);
        h
    }
}

/// An upstream's trailer fields as they go on: without those RFC 9110
/// (6.5.1) does not allow in a trailer section (framing, routing,
/// connection and content fields), None when nothing is left.
pub(super) fn trailers_passed(mut t: http::HeaderMap) -> Option<http::HeaderMap> {
    use http::header::*;
    const NOT_TRAILERS: [HeaderName; 12] = [
        CONTENT_LENGTH,
        TRANSFER_ENCODING,
        CONNECTION,
        TE,
        TRAILER,
        UPGRADE,
        HOST,
        CONTENT_TYPE,
        CONTENT_ENCODING,
        CONTENT_RANGE,
        SET_COOKIE,
        AUTHORIZATION,
    ];
    for n in &NOT_TRAILERS {
        t.remove(n);
    }
    t.remove("keep-alive");
    t.remove("proxy-connection");
    (!t.is_empty()).then_some(t)
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // The client went away (or the body was never read, as for HEAD):
        // release the peer; a half-read connection is not reused.
        let complete = self.ended;
        self.finish(complete);
    }
}

/// The buffers `proxy_buffering` read ahead, oldest first: the first in
/// place, so the common answer that comes in one read allocates no queue.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    first: Option<Bytes>,
    rest: VecDeque<Bytes>,
}

impl Ahead {
    pub(crate) fn push_back(&mut self, b: Bytes) {
        // `first` is only ever the oldest: it is filled when all is empty.
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(b);
        } else {
            self.rest.push_back(b);
        }
    }

    pub(crate) fn pop_front(&mut self) -> Option<Bytes> {
        self.first.take().or_else(|| self.rest.pop_front())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.first.iter().chain(self.rest.iter())
    }

    /// Takes them all, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Bytes> + '_ {
        self.first.take().into_iter().chain(self.rest.drain(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read-ahead queue gives its buffers back oldest first, however
    /// pushes and pops interleave, and counts and drains them all.
    #[test]
    fn ahead_keeps_its_order() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let mut a = Ahead::default();
        assert!(a.is_empty());
        a.push_back(b("1"));
        a.push_back(b("2"));
        assert_eq!(a.len(), 2);
        assert_eq!(a.pop_front(), Some(b("1")));
        a.push_back(b("3"));
        assert_eq!(a.iter().cloned().collect::<Vec<_>>(), vec![b("2"), b("3")]);
        assert_eq!(a.pop_front(), Some(b("2")));
        assert_eq!(a.pop_front(), Some(b("3")));
        assert_eq!(a.pop_front(), None);
        assert!(a.is_empty());
        for s in ["4", "5", "6"] {
            a.push_back(b(s));
        }
        assert_eq!(a.drain().collect::<Vec<_>>(), vec![b("4"), b("5"), b("6")]);
        assert!(a.is_empty());
        assert_eq!(a.len(), 0);
    }
}
