//! The upstream's response body as the proxy streams it: what
//! `proxy_buffering` read ahead first, then the rest with
//! `proxy_read_timeout` between reads; at its end the connection returns to
//! the keep-alive cache and the peer is released. Errors carry the upstream
//! URL for the access-log body to report with the request's context.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};

use super::response::BoxError;
use super::vars::UpstreamLog;
use crate::upstream::attempt::Kind;
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers, Pooled, UpstreamRt};

/// The upstream's response body on its way to the client. When it ends, the
/// connection goes back to the keep-alive cache and the peer is released;
/// `proxy_read_timeout` bounds the wait between two reads.
pub(crate) struct ProxyBody {
    pub(crate) inner: Incoming,
    /// What `proxy_buffering` read ahead, sent before the rest.
    pub(crate) ahead: VecDeque<Bytes>,
    pub(crate) conn: Option<Pooled>,
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
    pub(crate) uri: String,
}

/// An upstream failure while streaming the response body; the body that owns
/// the request logs it with the request's context.
#[derive(Debug)]
pub struct UpstreamBodyError {
    pub message: &'static str,
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
        f.write_str(self.message)
    }
}

impl std::error::Error for UpstreamBodyError {}

impl ProxyBody {
    pub(crate) fn finish(&mut self, complete: bool) {
        let Some((peers, id)) = self.peer.take() else {
            return;
        };
        let now = Instant::now();
        if let Some(a) = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempts
            .last_mut()
        {
            a.response = Some(self.attempt_start.elapsed());
            a.length = Some(self.received);
            a.received = self.received;
        }
        if complete {
            if let Some(c) = self.conn.take() {
                self.ups.pool().put(c, now);
            }
        }
        self.conn = None;
        if self.received > 0 {
            peers
                .get(id)
                .live
                .received
                .fetch_add(self.received, std::sync::atomic::Ordering::Relaxed);
        }
        peers.release(id, Outcome::Ok, now_ms());
    }
}

/// nginx's words for a body that failed: a chunked body that does not
/// parse (hyper's decoder reports it as invalid input or data) is the
/// upstream's fault in a different way from one cut short.
fn body_failure(e: &hyper::Error) -> &'static str {
    let invalid = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
            )
        });
    if invalid {
        "upstream sent invalid chunked response while reading upstream"
    } else {
        "upstream prematurely closed connection while reading upstream"
    }
}

impl ProxyBody {
    fn url(&self) -> String {
        format!("http://{}{}", self.peer_name, self.uri)
    }

    /// `proxy_buffering on`: reads the upstream's body into memory, up to
    /// `room` bytes, so that a response that fits frees its upstream
    /// connection before the client has read it.
    pub(crate) async fn read_ahead(&mut self, room: u64) -> Result<(), UpstreamBodyError> {
        let mut held: u64 = 0;
        while held < room {
            if self.inner.is_end_stream() {
                self.finish(true);
                return Ok(());
            }
            match tokio::time::timeout(self.read_timeout, self.inner.frame()).await {
                Err(_) => {
                    self.finish(false);
                    return Err(UpstreamBodyError {
                        message: "upstream timed out (110: Connection timed out) while reading upstream",
                        url: self.url(),
                        kind: Kind::Timeout,
                    });
                }
                Ok(None) => {
                    self.finish(true);
                    return Ok(());
                }
                Ok(Some(Err(e))) => {
                    self.finish(false);
                    return Err(UpstreamBodyError {
                        message: body_failure(&e),
                        url: self.url(),
                        kind: Kind::Closed,
                    });
                }
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        held += d.len() as u64;
                        self.received += d.len() as u64;
                        self.ahead.push_back(d);
                    }
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
        if let Some(b) = self.ahead.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if self.peer.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.received += d.len() as u64;
                }
                self.timer = None;
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(None) => {
                self.finish(true);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.finish(false);
                let url = self.url();
                Poll::Ready(Some(Err(Box::new(UpstreamBodyError {
                    message: body_failure(&e),
                    url,
                    kind: Kind::Closed,
                }))))
            }
            Poll::Pending => {
                let timeout = self.read_timeout;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if timer.as_mut().poll(cx).is_ready() {
                    self.finish(false);
                    let url = self.url();
                    return Poll::Ready(Some(Err(Box::new(UpstreamBodyError {
                        message: "upstream timed out (110: Connection timed out) while reading upstream",
                        url,
                        kind: Kind::Timeout,
                    }))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && (self.peer.is_none() || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self.ahead.iter().map(|b| b.len() as u64).sum();
        let mut h = if self.peer.is_none() {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        };
        // Upper first: set_lower insists on lower <= upper.
        if let Some(u) = h.upper() {
            h.set_upper(u + ahead);
        }
        h.set_lower(h.lower() + ahead);
        h
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // The client went away (or the body was never read, as for HEAD):
        // release the peer; the half-read connection is not reused.
        let complete = self.inner.is_end_stream();
        self.finish(complete);
    }
}
