//! An HTTP/1 connection to an upstream peer, driven by the request that
//! uses it: no task of its own, no channel. `send` writes the request head
//! (and its body, whole in memory or spooled) with `proxy_send_timeout`
//! between writes; `read_head` reads the response head with
//! `proxy_read_timeout` between reads, skipping interim 1xx answers; the
//! body is then read by `poll_body` through the `h1::body` decoder, and the
//! connection goes back to the keep-alive cache only once its body ended
//! cleanly with nothing unread. An idle connection holds no read buffer and
//! is not read until taken again; `is_open` then tells (without a read)
//! whether the upstream closed it meanwhile, as nginx's keepalive close
//! handler does.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Version};
use tokio::io::AsyncWrite;

use super::body::Payload;
use crate::h1::body::{BodyError, Decoder, Framing, Piece};
use crate::h1::head::{Names, ResponseHead, parse_response};
use crate::net::stream::Stream;

/// A body this small goes out in the same write as the head.
const WITH_HEAD: usize = 16 * 1024;
/// Free room a read while reading a body asks for.
const READ_ROOM: usize = 16 * 1024;

/// Why an exchange failed.
#[derive(Debug)]
pub enum Error {
    /// Writing failed; `sent`: some of the request had gone.
    Write { e: std::io::Error, sent: bool },
    /// `proxy_send_timeout` between two writes.
    SendTimeout,
    /// `proxy_read_timeout` while waiting for the head.
    ReadTimeout,
    /// The upstream closed (or reset) before the head was complete.
    Closed,
    /// The head does not parse: nginx's text.
    Invalid(String),
    /// The head does not fit in `proxy_buffer_size`.
    TooBig,
}

/// Why a body could not be read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// Chunk framing that does not parse.
    Invalid,
    /// Closed (or failed) before the end.
    Truncated,
}

/// An upstream connection: the socket and what was read past the last
/// message.
pub struct H1 {
    io: Stream,
    /// Taken from `h1::pool` when a read starts, given back when the
    /// connection goes idle with nothing unread.
    buf: Option<BytesMut>,
    /// The upstream closed its side.
    eof: bool,
}

/// The response's body framing, by nginx's rules: none for a HEAD request
/// and for 1xx, 204 and 304; else chunks, a length, or until close.
/// `upstream_framing` has already refused a head that could be read two ways.
pub fn framing(method: &Method, head: &ResponseHead) -> Framing {
    let s = head.status.as_u16();
    if *method == Method::HEAD || s < 200 || s == 204 || s == 304 {
        return Framing::Empty;
    }
    if head.headers.contains_key(header::TRANSFER_ENCODING) {
        return Framing::Chunked;
    }
    match head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    }
}

/// Whether the upstream lets the connection be reused after this response:
/// HTTP/1.1 without `Connection: close`, HTTP/1.0 with `keep-alive`.
pub fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let has = |token: &str| {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match version {
        Version::HTTP_11 => !has("close"),
        Version::HTTP_10 => has("keep-alive"),
        _ => false,
    }
}

/// Names sluice writes in its own spelling, whatever the client's case.
fn own_name(n: &HeaderName) -> bool {
    n == header::HOST || n == header::CONNECTION || n == header::CONTENT_LENGTH
}

/// A request head as written: the request line, then the headers, the
/// client's in the case it sent them (`names`), sluice's own in nginx's.
pub fn request_head(
    method: &Method,
    target: &str,
    version: Version,
    headers: &HeaderMap,
    names: Option<&Names>,
    out: &mut Vec<u8>,
) {
    crate::h1::write::request_line(method, target.as_bytes(), version, out);
    for (n, v) in headers {
        let names = if own_name(n) { None } else { names };
        crate::h1::write::name(n, names, out);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

impl H1 {
    pub fn new(io: Stream) -> H1 {
        H1 {
            io,
            buf: None,
            eof: false,
        }
    }

    /// Whether an idle connection may still carry a request: open, and the
    /// upstream sent nothing unasked. Costs nothing while the socket is not
    /// readable; else one non-blocking peek (which clears a stale
    /// readiness).
    pub fn is_open(&self) -> bool {
        if self.eof || self.buf.as_ref().is_some_and(|b| !b.is_empty()) {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let peeked = match &self.io {
            Stream::Tcp(s) => match s.poll_read_ready(&mut cx) {
                Poll::Pending => return true,
                Poll::Ready(Err(_)) => return false,
                Poll::Ready(Ok(())) => s.try_io(tokio::io::Interest::READABLE, || peek(s)),
            },
            Stream::Unix(s) => match s.poll_read_ready(&mut cx) {
                Poll::Pending => return true,
                Poll::Ready(Err(_)) => return false,
                Poll::Ready(Ok(())) => s.try_io(tokio::io::Interest::READABLE, || peek(s)),
            },
        };
        // WouldBlock: nothing there after all (and the readiness cleared).
        matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Writes the request: `head` (taken, to append a small body to) and
    /// the body. `proxy_send_timeout` bounds each wait for the socket.
    pub async fn send(
        &mut self,
        mut head: Vec<u8>,
        body: &Payload,
        timeout: Duration,
    ) -> Result<(), Error> {
        let mut sent = false;
        let mut run = async |buf: &[u8], sent: &mut bool| -> Result<(), Error> {
            write_all(&mut self.io, buf, timeout, sent).await
        };
        match body {
            Payload::Mem(b) if b.len() <= WITH_HEAD => {
                head.extend_from_slice(b);
                run(&head, &mut sent).await
            }
            Payload::Mem(b) => {
                run(&head, &mut sent).await?;
                run(b, &mut sent).await
            }
            Payload::File(_) => {
                run(&head, &mut sent).await?;
                let mut chunks = body.body();
                loop {
                    match chunks.next_chunk() {
                        Ok(Some(c)) => run(&c, &mut sent).await?,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(Error::Write { e, sent }),
                    }
                }
            }
        }
    }

    /// Reads the response head, skipping interim responses other than 101
    /// (nginx ignores a 100 or 103 from the upstream). `limit`:
    /// `proxy_buffer_size`.
    pub async fn read_head(
        &mut self,
        timeout: Duration,
        limit: usize,
    ) -> Result<ResponseHead, Error> {
        let mut buf = self.buf.take().unwrap_or_else(crate::h1::pool::take);
        let got = loop {
            if !buf.is_empty() {
                match parse_response(&mut buf) {
                    Ok(Some(h)) if h.status.is_informational() && h.status != 101 => continue,
                    Ok(Some(h)) => break Ok(h),
                    Ok(None) if buf.len() >= limit => break Err(Error::TooBig),
                    Ok(None) => {}
                    Err(text) => break Err(Error::Invalid(text)),
                }
            }
            if self.eof {
                break Err(Error::Closed);
            }
            match read_timed(&mut self.io, &mut buf, timeout).await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    break Err(Error::ReadTimeout);
                }
                Err(_) => break Err(Error::Closed),
            }
        };
        self.buf = Some(buf);
        got
    }

    /// The next body bytes by `d`: Ready(Ok(None)) at its clean end.
    pub fn poll_body(
        &mut self,
        d: &mut Decoder,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, ReadError>> {
        let buf = self.buf.get_or_insert_with(crate::h1::pool::take);
        loop {
            match d.decode(buf, self.eof) {
                Ok(Some(Piece::Data(b))) => return Poll::Ready(Ok(Some(b))),
                // nginx does not pass an upstream's trailers on.
                Ok(Some(Piece::Trailers(_))) => continue,
                Ok(Some(Piece::End)) => return Poll::Ready(Ok(None)),
                Ok(None) => {}
                Err(BodyError::Invalid) => return Poll::Ready(Err(ReadError::Invalid)),
                Err(BodyError::Truncated) => return Poll::Ready(Err(ReadError::Truncated)),
            }
            if buf.capacity() - buf.len() < READ_ROOM / 4 {
                buf.reserve(READ_ROOM);
            }
            match poll_read_buf(&mut self.io, buf, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => self.eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Err(ReadError::Truncated)),
            }
        }
    }

    /// After a body's clean end: whether nothing is left unread (the
    /// connection can then serve again); its buffer goes back to the pool.
    pub fn idle(&mut self) -> bool {
        if self.eof || self.buf.as_ref().is_some_and(|b| !b.is_empty()) {
            return false;
        }
        if let Some(b) = self.buf.take() {
            crate::h1::pool::give(b);
        }
        true
    }

    /// The connection for a tunnel after a 101: the socket, and what the
    /// upstream sent past the head (for the client first).
    pub fn upgrade(mut self) -> Upgraded {
        let read_ahead = self.buf.take().map(BytesMut::freeze).unwrap_or_default();
        Upgraded {
            io: self.io,
            read_ahead,
        }
    }
}

/// The upstream half of a protocol switch.
pub struct Upgraded {
    pub io: Stream,
    pub read_ahead: Bytes,
}

fn peek(s: &impl std::os::fd::AsFd) -> std::io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    recv(
        s.as_fd().as_raw_fd(),
        &mut b,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(std::io::Error::from)
}

/// One read into `buf`'s free room.
fn poll_read_buf(
    io: &mut Stream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    if buf.capacity() == buf.len() {
        buf.reserve(crate::h1::pool::SIZE);
    }
    let fut = tokio::io::AsyncReadExt::read_buf(io, buf);
    let mut fut = std::pin::pin!(fut);
    fut.as_mut().poll(cx)
}

/// One read, waiting at most `timeout` (the timer is armed only if the
/// socket has nothing yet). TimedOut when it expired.
async fn read_timed(
    io: &mut Stream,
    buf: &mut BytesMut,
    timeout: Duration,
) -> std::io::Result<usize> {
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| match poll_read_buf(io, buf, cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending => {
            let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            match t.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::ErrorKind::TimedOut.into())),
                Poll::Pending => Poll::Pending,
            }
        }
    })
    .await
}

/// Writes all of `buf`, waiting at most `timeout` for each write to be
/// possible; `sent` is set once any byte went.
async fn write_all(
    io: &mut Stream,
    buf: &[u8],
    timeout: Duration,
    sent: &mut bool,
) -> Result<(), Error> {
    let mut at = 0;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        while at < buf.len() {
            match Pin::new(&mut *io).poll_write(cx, &buf[at..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(Error::Write {
                        e: std::io::ErrorKind::WriteZero.into(),
                        sent: *sent,
                    }));
                }
                Poll::Ready(Ok(n)) => {
                    at += n;
                    *sent = true;
                    timer = None;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Write { e, sent: *sent })),
                Poll::Pending => {
                    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                    return match t.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Err(Error::SendTimeout)),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
        Poll::Ready(Ok(()))
    })
    .await
}
