//! A client connection's read side (HTTP/1): the socket, the bytes read and not yet
//! used (a buffer from `h1::pool`, held only while there is something to
//! read), and the request body's decoder. The connection reads heads from it,
//! a handler reads the body through `ReqBody`, and a protocol switch hands
//! the socket over as `Upgraded`; they take turns, so the lock is never
//! contended and never held across an await. `ReqBody` is also what an
//! HTTP/2 stream's body looks like to a handler (`h2.rs`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use crate::h1::body::{BodyError, Decoder, Framing, Piece};
use crate::h1::pool;
use crate::net::stream::Stream;

use super::response::BoxError;

/// Room asked for before a read of body bytes.
const BODY_READ: usize = 16 * 1024;
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

pub(crate) struct Inbound {
    pub(crate) io: Stream,
    st: Mutex<State>,
    /// The keep-alive limit in milliseconds: the last request's
    /// `keepalive_timeout`, set once its location is known.
    keepalive: AtomicU64,
}

struct State {
    /// None while there is nothing unread (the buffer is back in the pool).
    buf: Option<BytesMut>,
    body: Decoder,
    /// The request framed a body (a length, even 0, or chunks).
    framed: bool,
    /// The peer closed its side.
    eof: bool,
    /// Bytes of "100 Continue" still to send before the body is read (None:
    /// none asked for, or sent).
    expect: Option<usize>,
    /// The body could not be read: the connection is not reused.
    broken: bool,
    /// `client_max_body_size` (0: none), and the body's bytes so far.
    limit: u64,
    taken: u64,
}

impl Inbound {
    /// `keepalive`: the wait for the next request until one sets its own.
    pub(crate) fn new(io: Stream, keepalive: Duration) -> Inbound {
        Inbound {
            io,
            keepalive: AtomicU64::new(keepalive.as_millis() as u64),
            st: Mutex::new(State {
                buf: None,
                body: Decoder::new(Framing::Empty),
                framed: false,
                eof: false,
                expect: None,
                broken: false,
                limit: 0,
                taken: 0,
            }),
        }
    }

    /// How long the connection may wait for its next request.
    pub(crate) fn keepalive(&self) -> Duration {
        Duration::from_millis(self.keepalive.load(Ordering::Relaxed))
    }

    pub(crate) fn set_keepalive(&self, limit: Duration) {
        self.keepalive
            .store(limit.as_millis() as u64, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes read and not used yet (a pipelined request).
    pub(crate) fn has_unread(&self) -> bool {
        self.lock().buf.as_ref().is_some_and(|b| !b.is_empty())
    }

    /// Gives the buffer back to the pool if nothing in it is unread; true
    /// if one was given back.
    pub(crate) fn release(&self) -> bool {
        match self.lock().buf.take_if(|b| b.is_empty()) {
            Some(b) => {
                pool::give(b);
                true
            }
            None => false,
        }
    }

    /// Runs `f` on the unread bytes.
    pub(crate) fn with_buf<R>(&self, f: impl FnOnce(&mut BytesMut) -> R) -> R {
        let mut st = self.lock();
        f(st.buf.get_or_insert_with(pool::take))
    }

    /// Reads more bytes (0: the peer closed), with at least `room` free.
    pub(crate) fn poll_fill(
        &self,
        cx: &mut Context<'_>,
        room: usize,
    ) -> Poll<std::io::Result<usize>> {
        let mut st = self.lock();
        let st = &mut *st;
        let buf = st.buf.get_or_insert_with(pool::take);
        if buf.capacity() - buf.len() < room {
            buf.reserve(room);
        }
        let n = std::task::ready!(self.io.poll_read_into(cx, buf))?;
        if n == 0 {
            st.eof = true;
        }
        Poll::Ready(Ok(n))
    }

    /// Waits for bytes holding no buffer, then reads them into one from the
    /// pool (0: the peer closed).
    pub(crate) fn poll_arrive(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.io.poll_read_ready(cx))?;
            let mut st = self.lock();
            let st = &mut *st;
            let buf = st.buf.get_or_insert_with(pool::take);
            match self.io.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(b) = st.buf.take_if(|b| b.is_empty()) {
                        pool::give(b);
                    }
                }
                Ok(n) => {
                    st.eof |= n == 0;
                    return Poll::Ready(Ok(n));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// A request's body starts: how it is framed, and whether the client
    /// waits for "100 Continue" before sending it.
    pub(crate) fn start_body(&self, framing: Framing, expect: bool) {
        let mut st = self.lock();
        st.body = Decoder::new(framing);
        st.framed = framing != Framing::Empty;
        st.limit = 0;
        st.taken = 0;
        st.expect =
            (expect && framing != Framing::Empty && framing != Framing::Length(0)).then_some(0);
    }

    /// The body was read to its end (or had none).
    pub(crate) fn body_done(&self) -> bool {
        let st = self.lock();
        !st.broken && (st.body.is_done() || st.body.is_ending())
    }

    /// The request body's data bytes read so far.
    pub(crate) fn body_read(&self) -> u64 {
        self.lock().taken
    }

    /// The body could not be read (bad framing, a failed read).
    pub(crate) fn body_broken(&self) -> bool {
        self.lock().broken
    }

    /// The client was never told to send the body it announced.
    pub(crate) fn body_unasked(&self) -> bool {
        self.lock().expect == Some(0)
    }

    /// Reads and drops what is left of the body; false if it cannot be
    /// (bad framing, the peer closed).
    pub(crate) fn poll_discard(&self, cx: &mut Context<'_>) -> Poll<bool> {
        loop {
            match std::task::ready!(poll_body(self, cx)) {
                None => return Poll::Ready(true),
                Some(Ok(_)) => {}
                Some(Err(_)) => return Poll::Ready(false),
            }
        }
    }
}

/// Why the request body could not be read, as nginx logs it.
#[derive(Debug)]
pub struct BodyReadError(pub BodyError);

impl std::fmt::Display for BodyReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            BodyError::Invalid => "client sent invalid chunked body",
            BodyError::Truncated => "client prematurely closed connection",
        })
    }
}

impl std::error::Error for BodyReadError {}

/// The request body as a handler reads it, whichever protocol carries it.
pub struct ReqBody(Source);

enum Source {
    /// Decoded from the HTTP/1 connection's bytes.
    H1(Arc<Inbound>),
    /// An HTTP/2 stream's DATA frames (and trailers).
    H2(super::h2::StreamBody),
}

impl ReqBody {
    pub(crate) fn new(inb: Arc<Inbound>) -> ReqBody {
        ReqBody(Source::H1(inb))
    }

    pub(crate) fn h2(body: super::h2::StreamBody) -> ReqBody {
        ReqBody(Source::H2(body))
    }

    /// Whether the request framed a body, even of no bytes: an HTTP/1
    /// length or chunks, HTTP/2 DATA frames.
    pub(crate) fn framed(&self) -> bool {
        match &self.0 {
            Source::H1(inb) => inb.lock().framed,
            Source::H2(b) => b.framed(),
        }
    }

    /// Whether the request has no body bytes and nothing to do first (no
    /// "100 Continue" to send): if so its end is taken, and a handler that
    /// reads the body whole need not poll it. An HTTP/2 body is polled.
    pub(crate) fn end_if_empty(&self) -> bool {
        match &self.0 {
            Source::H1(inb) => {
                let mut st = inb.lock();
                !st.broken && st.expect.is_none() && st.taken == 0 && st.body.end_at_once()
            }
            Source::H2(_) => false,
        }
    }

    /// `client_max_body_size`: a chunk that would take the body past it
    /// fails the read as soon as its size is known (`TooLarge`).
    pub fn limit(&self, max: u64) {
        match &self.0 {
            Source::H1(inb) => inb.lock().limit = max,
            Source::H2(b) => b.limit(max),
        }
    }
}

/// The body would pass `client_max_body_size`: the bytes it would make.
#[derive(Debug)]
pub struct TooLarge(pub u64);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "client intended to send too large chunked body: {} bytes",
            self.0
        )
    }
}

impl std::error::Error for TooLarge {}

/// The next piece of the body on `inb`: "100 Continue" first when the
/// client waits for it, then frames until the end.
fn poll_body(inb: &Inbound, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    let mut st = inb.lock();
    let st = &mut *st;
    if st.broken {
        return Poll::Ready(Some(Err(Box::new(BodyReadError(BodyError::Invalid)))));
    }
    while let Some(at) = st.expect {
        match std::task::ready!(inb.io.poll_write_ref(cx, &CONTINUE[at..])) {
            Ok(n) if at + n < CONTINUE.len() => st.expect = Some(at + n),
            Ok(_) => st.expect = None,
            Err(e) => {
                st.broken = true;
                return Poll::Ready(Some(Err(Box::new(e))));
            }
        }
    }
    loop {
        let buf = st.buf.get_or_insert_with(pool::take);
        let decoded = st.body.decode(buf, st.eof);
        let would = st.taken.saturating_add(st.body.at_least());
        if st.limit > 0 && would > st.limit {
            st.broken = true;
            return Poll::Ready(Some(Err(Box::new(TooLarge(would)))));
        }
        match decoded {
            Ok(Some(Piece::Data(d))) => {
                st.taken += d.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(d))));
            }
            Ok(Some(Piece::Trailers(t))) => return Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(Some(Piece::End)) => return Poll::Ready(None),
            Ok(None) => {
                if buf.capacity() - buf.len() < BODY_READ / 4 {
                    buf.reserve(BODY_READ);
                }
                match std::task::ready!(inb.io.poll_read_into(cx, buf)) {
                    Ok(0) => st.eof = true,
                    Ok(_) => {}
                    Err(e) => {
                        st.broken = true;
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                }
            }
            Err(e) => {
                st.broken = true;
                return Poll::Ready(Some(Err(Box::new(BodyReadError(e)))));
            }
        }
    }
}

impl http_body::Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Source::H1(inb) => poll_body(inb, cx),
            Source::H2(b) => b.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        let inb = match &self.0 {
            Source::H1(inb) => inb,
            Source::H2(b) => return b.is_end_stream(),
        };
        let st = inb.lock();
        st.body.is_done() || st.body.is_ending()
    }

    fn size_hint(&self) -> SizeHint {
        let inb = match &self.0 {
            Source::H1(inb) => inb,
            Source::H2(b) => return b.size_hint(),
        };
        let st = inb.lock();
        match st.body.left() {
            Some(n) => SizeHint::with_exact(n),
            None => {
                let mut h = SizeHint::default();
                h.set_lower(st.body.at_least());
                h
            }
        }
    }
}

/// The client's side of a protocol switch: the socket, with the bytes read
/// past the request head first.
pub struct Upgraded {
    inb: Arc<Inbound>,
}

impl Upgraded {
    pub(crate) fn new(inb: Arc<Inbound>) -> Upgraded {
        Upgraded { inb }
    }
}

impl tokio::io::AsyncRead for Upgraded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut st = self.inb.lock();
        if let Some(b) = st.buf.as_mut().filter(|b| !b.is_empty()) {
            let n = b.len().min(out.remaining());
            out.put_slice(&b[..n]);
            b.advance(n);
            return Poll::Ready(Ok(()));
        }
        drop(st);
        self.inb.io.poll_read_slice(cx, out)
    }
}

impl tokio::io::AsyncWrite for Upgraded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.inb.io.poll_write_ref(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.inb.io.shutdown_write();
        Poll::Ready(Ok(()))
    }
}
