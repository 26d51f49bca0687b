//! The access log: one line per finished request, written when the response
//! body has been sent (or dropped, for an aborted request), in the location's
//! `log_format` with nginx's escaping. The line goes to files the master opened.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::response::{Body, BoxError};
use super::vars::Req;
use crate::conf::loc::Escape;
use crate::log::escape::{escape_default, escape_json};

/// nginx's default escaping of a value in a log line: an empty value is
/// `-`, but for the variables nginx finds with an empty value (`$is_args`
/// without arguments, `$https` on a plain connection, `$request_completion`
/// of a response cut short), which it logs empty.
fn logged(v: &crate::conf::vars::Var, value: &str, out: &mut String) {
    use crate::conf::vars::Var;
    let found_empty = matches!(v, Var::IsArgs | Var::Https | Var::RequestCompletion);
    if !(value.is_empty() && found_empty) {
        escape_default(value, out);
    }
}

/// Whether one of `logs`' formats says so (`want`: `LogFormat::sent_http`,
/// `upstream_http`): what the request keeps for its log line depends on it.
pub(crate) fn reads(
    logs: &[crate::conf::loc::AccessLog],
    want: impl Fn(&crate::conf::loc::LogFormat) -> bool,
) -> bool {
    logs.iter().any(|l| want(&l.format))
}

/// Writes the request's line to each of its access logs.
pub fn write(req: &Req) {
    for log in &req.conf.access_log {
        if let Some(c) = &log.cond {
            let v = req.eval(c);
            if v.is_empty() || v == "0" {
                continue;
            }
        }
        let Some(file) = crate::log::files::get(&log.path) else {
            continue;
        };
        let mut line = match log.format.escape {
            Escape::Default => req.eval_with(&log.format.template, logged),
            Escape::Json => req.eval_with(&log.format.template, |_, v, o| escape_json(v, o)),
            Escape::None => req.eval_with(&log.format.template, |_, v, o| o.push_str(v)),
        };
        line.push('\n');
        // Unescaped values (`escape=none`, `json`) go as the bytes they
        // stand for, as nginx writes them.
        file.write_line(&crate::octets::bytes(&line));
    }
}

/// The response body as sent to the client: counts the bytes and writes the
/// access log line when it ends or is dropped.
pub struct LoggedBody {
    /// None once finished (dropped first, see `finish`).
    inner: Option<Body>,
    req: Option<Box<Req>>,
    /// Ends the request for the connection's keep-alive clock.
    flight: Option<super::InFlight>,
    /// What the connection wrote besides the body's data (HTTP/1), for
    /// `$bytes_sent`; 0 until the head is written.
    head: Option<HeadLen>,
}

/// Where an HTTP/1 connection counts the bytes it wrote besides the body's
/// data: the response's head (its status line, its fields and what it
/// adds: `Date`, `Connection`, the framing) and a chunked body's framing,
/// for `$bytes_sent`. A response's extension, made only when an access
/// log is on.
#[derive(Clone, Default)]
pub(crate) struct HeadLen(pub std::sync::Arc<std::sync::atomic::AtomicU64>);

impl LoggedBody {
    pub(crate) fn new(
        inner: Body,
        req: Box<Req>,
        flight: super::InFlight,
        head: Option<HeadLen>,
    ) -> LoggedBody {
        LoggedBody {
            inner: Some(inner),
            req: Some(req),
            flight: Some(flight),
            head,
        }
    }

    /// The response's header lines as the upstream sent them, if it
    /// carries them so (`Req::as_received`).
    pub(crate) fn as_received(&self) -> Option<&crate::h1::head::AsReceived> {
        self.req.as_ref()?.as_received.as_ref()
    }

    /// The same, taken (for a writer that puts them in its map).
    pub(crate) fn take_as_received(&mut self) -> Option<crate::h1::head::AsReceived> {
        self.req.as_mut()?.as_received.take()
    }

    /// The request's `send_timeout`.
    pub(crate) fn send_timeout(&self) -> std::time::Duration {
        self.req
            .as_ref()
            .map_or(std::time::Duration::from_secs(60), |r| r.conf.send_timeout)
    }

    /// The request's `chunked_transfer_encoding`: off, a body of unknown
    /// length goes until the connection closes, as to an HTTP/1.0 client.
    pub(crate) fn chunked_transfer_encoding(&self) -> bool {
        self.req
            .as_ref()
            .is_none_or(|r| r.conf.chunked_transfer_encoding)
    }

    /// The request's `http2_chunk_size`.
    pub(crate) fn http2_chunk_size(&self) -> usize {
        self.req
            .as_ref()
            .map_or(8192, |r| r.conf.http2_chunk_size as usize)
    }

    fn finish(&mut self) {
        if let Some(mut req) = self.req.take() {
            // The inner body goes first: a proxied body records the upstream's
            // response time and length when it ends.
            self.inner = None;
            if let Some(f) = &self.flight {
                req.request_length += f.body_read();
            }
            // The head as written, in place of the estimate made before.
            let written = self
                .head
                .as_ref()
                .map_or(0, |h| h.0.load(std::sync::atomic::Ordering::Relaxed));
            if written > 0 {
                req.bytes_sent = written + req.body_bytes_sent;
            }
            req.upstream
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .observe();
            write(&req);
        }
        self.flight = None;
    }
}

impl HttpBody for LoggedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = Pin::new(inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let (Some(d), Some(req)) = (f.data_ref(), self.req.as_mut()) {
                    req.body_bytes_sent += d.len() as u64;
                    req.bytes_sent += d.len() as u64;
                }
            }
            Poll::Ready(Some(Err(e))) => {
                if let (Some(u), Some(req)) = (
                    e.downcast_ref::<super::proxy_body::UpstreamBodyError>(),
                    self.req.as_ref(),
                ) {
                    crate::log_conn!(
                        crate::log::Level::Error,
                        req.conn.number,
                        "{}{}",
                        u.message,
                        req.log_context(Some(&u.url))
                    );
                }
                self.finish();
            }
            Poll::Ready(None) => {
                if let Some(req) = self.req.as_mut() {
                    req.completed = true;
                }
                self.finish();
            }
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map(|b| b.size_hint())
            .unwrap_or_else(|| SizeHint::with_exact(0))
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.finish();
    }
}
