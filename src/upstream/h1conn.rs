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
use http::{Method, Version};
use tokio::io::AsyncWrite;

use super::body::Payload;
use crate::h1::body::{BodyError, Decoder, Framing, Piece};
use crate::h1::head::{Headers, Known, ResponseHead, parse_response};
use crate::net::stream::Stream;

/// A body this small goes out in the same write as the head.
pub const WITH_HEAD: usize = 16 * 1024;
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

/// Why no FastCGI record came.
#[derive(Debug)]
pub enum FcgiError {
    /// Closed (or failed) before the record, or after the request's end.
    Closed,
    Invalid(super::fcgi::Invalid),
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
    /// Bytes written and read since the last request began to go
    /// (`$upstream_bytes_sent`, `$upstream_bytes_received`: all of it on
    /// the wire, as nginx counts).
    wrote: u64,
    got: u64,
    /// The timer of the waits for a response head (`proxy_read_timeout`):
    /// made on the connection's first wait and moved on for each after
    /// it. A later deadline moves a timer tokio holds with one atomic
    /// exchange, where a timer made and dropped for each request took the
    /// timer driver's lock twice (to enter its wheel and to leave it).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The response's body framing, by nginx's rules: none for a HEAD request
/// and for 1xx, 204 and 304; else chunks, a length, or until close.
/// `upstream_framing` has already refused a head that could be read two ways.
pub fn framing(method: &Method, head: &ResponseHead) -> Framing {
    let s = head.status.as_u16();
    if *method == Method::HEAD || s < 200 || s == 204 || s == 304 {
        return Framing::Empty;
    }
    if head.raw.known(Known::TransferEncoding).is_some() {
        return Framing::Chunked;
    }
    match head
        .raw
        .known(Known::ContentLength)
        .and_then(|v| crate::h1::body::content_length(v.as_bytes()))
    {
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    }
}

/// Whether the upstream lets the connection be reused after this response:
/// HTTP/1.1 without `Connection: close`, HTTP/1.0 with `keep-alive`.
pub fn keeps_alive(version: Version, headers: &Headers) -> bool {
    match version {
        Version::HTTP_11 => !headers.has_known_token(Known::Connection, b"close"),
        Version::HTTP_10 => headers.has_known_token(Known::Connection, b"keep-alive"),
        _ => false,
    }
}

/// One look at what has come of a response head: the head once it is whole
/// (a 1xx other than 101 passed over), an error, or None to read more. A
/// head longer than `limit` is too big however it came, in one read or in
/// many (nginx's `proxy_buffer_size` holds the head whole).
fn head_step(buf: &mut BytesMut, limit: usize) -> Option<Result<ResponseHead, Error>> {
    loop {
        if buf.is_empty() {
            return None;
        }
        return Some(match parse_response(buf) {
            Ok(Some(h)) if h.len > limit => Err(Error::TooBig),
            Ok(Some(h)) if h.status.is_informational() && h.status != 101 => continue,
            Ok(Some(h)) => Ok(h),
            Ok(None) if buf.len() >= limit => Err(Error::TooBig),
            Ok(None) => return None,
            Err(text) => Err(Error::Invalid(text)),
        });
    }
}

impl H1 {
    pub fn new(io: Stream) -> H1 {
        H1 {
            io,
            buf: None,
            eof: false,
            wrote: 0,
            got: 0,
            timer: None,
        }
    }

    /// Bytes (written, read) on the wire for the current request.
    pub fn wire(&self) -> (u64, u64) {
        (self.wrote, self.got)
    }

    /// Whether an idle connection may still carry a request: open, and the
    /// upstream sent nothing unasked. Costs nothing while the socket is not
    /// readable; else one non-blocking peek (which clears a stale
    /// readiness).
    pub fn is_open(&self) -> bool {
        if self.eof || self.buf.as_ref().is_some_and(|b| !b.is_empty()) {
            return false;
        }
        self.io.quiet()
    }

    /// Writes the request: `head` (taken, to append a small body to) and
    /// the body. `proxy_send_timeout` bounds each wait for the socket.
    pub async fn send(
        &mut self,
        head: &[u8],
        body: &Payload,
        timeout: Duration,
    ) -> Result<(), Error> {
        // At once, not at the turn's end as a response (`net::turn`).
        let mut sent = false;
        self.wrote = 0;
        self.got = 0;
        let mut run = async |buf: &[u8], sent: &mut bool| -> Result<(), Error> {
            write_all(&mut self.io, buf, timeout, sent).await?;
            self.wrote += buf.len() as u64;
            Ok(())
        };
        match body {
            // Most requests: the head alone, written as it is.
            Payload::Mem(b) if b.is_empty() => run(head, &mut sent).await,
            // A small body goes in the same write.
            Payload::Mem(b) if b.len() <= WITH_HEAD => {
                let mut one = Vec::with_capacity(head.len() + b.len());
                one.extend_from_slice(head);
                one.extend_from_slice(b);
                run(&one, &mut sent).await
            }
            Payload::Mem(b) => {
                run(head, &mut sent).await?;
                run(b, &mut sent).await
            }
            Payload::File(_) => {
                run(head, &mut sent).await?;
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

    /// Writes more of a request whose head already went (a body streamed as
    /// it arrives): `proxy_send_timeout` bounds each wait for the socket. A
    /// failed write reports that the request had been sent.
    pub async fn write_more(&mut self, buf: &[u8], timeout: Duration) -> Result<(), Error> {
        write_all(&mut self.io, buf, timeout, &mut true).await?;
        self.wrote += buf.len() as u64;
        Ok(())
    }

    /// Reads the response head, skipping interim responses other than 101
    /// (nginx ignores a 100 or 103 from the upstream). `limit`:
    /// `proxy_buffer_size`. The head's headers are not yet in its map
    /// (`ResponseHead::map`).
    pub async fn read_head(
        &mut self,
        timeout: Duration,
        limit: usize,
    ) -> Result<ResponseHead, Error> {
        let mut buf = self.buf.take().unwrap_or_else(crate::h1::pool::take);
        let got = loop {
            if let Some(got) = head_step(&mut buf, limit) {
                break got;
            }
            if self.eof {
                break Err(Error::Closed);
            }
            match read_timed(&mut self.io, &mut buf, timeout, &mut self.timer).await {
                Ok(0) => self.eof = true,
                Ok(n) => self.got += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    break Err(Error::ReadTimeout);
                }
                Err(_) => break Err(Error::Closed),
            }
        };
        self.buf = Some(buf);
        got
    }

    /// The next body bytes by `d`: Ready(Ok(None)) at its clean end. A
    /// chunked body's trailer fields go into `trailers`.
    pub fn poll_body(
        &mut self,
        d: &mut Decoder,
        trailers: &mut Option<Box<http::HeaderMap>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, ReadError>> {
        let buf = self.buf.get_or_insert_with(crate::h1::pool::take);
        loop {
            match d.decode(buf, self.eof) {
                Ok(Some(Piece::Data(b))) => return Poll::Ready(Ok(Some(b))),
                Ok(Some(Piece::Trailers(t))) => {
                    *trailers = Some(Box::new(t));
                    continue;
                }
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
                Poll::Ready(Ok(n)) => self.got += n as u64,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(ReadError::Truncated)),
            }
        }
    }

    /// The next FastCGI record of the answer (`fastcgi_pass`: the same
    /// socket and buffer, records instead of HTTP framing).
    pub fn poll_fcgi(
        &mut self,
        rd: &mut super::fcgi::Reader,
        cx: &mut Context<'_>,
    ) -> Poll<Result<super::fcgi::Event, FcgiError>> {
        let buf = self.buf.get_or_insert_with(crate::h1::pool::take);
        loop {
            match rd.next(buf) {
                Ok(Some(e)) => return Poll::Ready(Ok(e)),
                Ok(None) if rd.ended || self.eof => return Poll::Ready(Err(FcgiError::Closed)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(FcgiError::Invalid(e))),
            }
            if buf.capacity() - buf.len() < READ_ROOM / 4 {
                buf.reserve(READ_ROOM);
            }
            match poll_read_buf(&mut self.io, buf, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => self.eof = true,
                Poll::Ready(Ok(n)) => self.got += n as u64,
                Poll::Ready(Err(_)) => return Poll::Ready(Err(FcgiError::Closed)),
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

/// The timer in `slot`, started (to expire after `timeout`) the first time
/// it is asked for. Kept in the waiting future itself: a boxed one was an
/// allocation per upstream read.
fn armed(
    mut slot: Pin<&mut Option<tokio::time::Sleep>>,
    timeout: Duration,
) -> Pin<&mut tokio::time::Sleep> {
    if slot.is_none() {
        slot.set(Some(crate::net::clock::sleep(timeout)));
    }
    match slot.as_pin_mut() {
        Some(t) => t,
        None => unreachable!("the timer was set just above"),
    }
}

/// One read, waiting at most `timeout` from the first time the socket has
/// nothing (no timer is touched while it has): `timer`, the connection's,
/// is set to that deadline then. TimedOut when it expired.
async fn read_timed(
    io: &mut Stream,
    buf: &mut BytesMut,
    timeout: Duration,
    timer: &mut Option<Pin<Box<tokio::time::Sleep>>>,
) -> std::io::Result<usize> {
    let mut set = false;
    poll_fn(|cx| match poll_read_buf(io, buf, cx) {
        Poll::Ready(r) => Poll::Ready(r),
        Poll::Pending => {
            let made = timer.is_none();
            let t = timer.get_or_insert_with(|| Box::pin(crate::net::clock::sleep(timeout)));
            if !set && !made {
                t.as_mut().reset(crate::net::clock::deadline(timeout));
            }
            set = true;
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
    let mut timer = std::pin::pin!(None::<tokio::time::Sleep>);
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
                    timer.set(None);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Write { e, sent: *sent })),
                Poll::Pending => {
                    return match armed(timer.as_mut(), timeout).poll(cx) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    const T: Duration = Duration::from_secs(5);

    fn pair() -> (H1, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (H1::new(Stream::Unix(a)), b)
    }

    /// Reads a response: its head, its body, and whether the connection
    /// may then serve again.
    async fn read(h: &mut H1, method: &Method) -> Result<(ResponseHead, Vec<u8>, bool), String> {
        let mut head = h
            .read_head(T, 64 * 1024)
            .await
            .map_err(|e| format!("{e:?}"))?;
        head.map(&|_| true)?;
        let mut d = Decoder::new(framing(method, &head));
        let mut body = Vec::new();
        loop {
            match poll_fn(|cx| h.poll_body(&mut d, &mut None, cx)).await {
                Ok(Some(b)) => body.extend_from_slice(&b),
                Ok(None) => break,
                Err(e) => return Err(format!("{e:?}")),
            }
        }
        let idle = h.idle();
        Ok((head, body, idle))
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn the_request_goes_out_as_written() {
        let (mut h, mut peer) = pair();
        let head =
            b"POST /a?b HTTP/1.1\r\nHost: b\r\nx-lower: 1\r\nContent-Length: 3\r\n\r\n".to_vec();
        let body = Payload::Mem(Bytes::from_static(b"abc"));
        h.send(&head, &body, T).await.unwrap();
        let mut got = vec![0u8; 200];
        let n = peer.read(&mut got).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got[..n]),
            "POST /a?b HTTP/1.1\r\nHost: b\r\nx-lower: 1\r\nContent-Length: 3\r\n\r\nabc"
        );
        // A body past one write follows the head whole.
        let big = Bytes::from(vec![b'z'; 100_000]);
        let head = b"PUT / HTTP/1.0\r\n\r\n".to_vec();
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut b = [0u8; 8192];
            while all.len() < 100_000 + 18 {
                let n = peer.read(&mut b).await.unwrap();
                all.extend_from_slice(&b[..n]);
            }
            all
        });
        h.send(&head, &Payload::Mem(big), T).await.unwrap();
        let all = reader.await.unwrap();
        assert!(all.starts_with(b"PUT / HTTP/1.0\r\n\r\nzzz"));
        assert_eq!(all.len(), 18 + 100_000);
    }

    #[tokio::test]
    async fn bodies_by_length_chunks_and_close_and_interim_answers_skipped() {
        let (mut h, mut peer) = pair();
        peer.write_all(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
              HTTP/1.1 200 Fine\r\nx-a: 1\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await
        .unwrap();
        let (head, body, idle) = read(&mut h, &Method::GET).await.unwrap();
        assert_eq!(
            (head.status.as_u16(), &head.reason[..]),
            (200, &b"Fine"[..])
        );
        // Only the names sluice would spell otherwise are kept.
        assert_eq!(
            head.mapped.as_ref().map(|m| m.names.0.clone()),
            Some(vec![Bytes::from_static(b"x-a")])
        );
        assert_eq!((body.as_slice(), idle), (&b"hello"[..], true));

        peer.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
        )
        .await
        .unwrap();
        let (_, body, idle) = read(&mut h, &Method::GET).await.unwrap();
        assert_eq!((body.as_slice(), idle), (&b"abc"[..], true));

        // HEAD and 304: no body, whatever the length says.
        peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
            .await
            .unwrap();
        let (_, body, idle) = read(&mut h, &Method::HEAD).await.unwrap();
        assert_eq!((body.len(), idle), (0, true));

        // Bytes past the end: not reused.
        peer.write_all(b"HTTP/1.1 204 No Content\r\n\r\nextra")
            .await
            .unwrap();
        let (_, body, idle) = read(&mut h, &Method::GET).await.unwrap();
        assert_eq!((body.len(), idle), (0, false));

        // Until close: the body is all, the connection is done.
        let (mut h, mut peer) = pair();
        peer.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil close")
            .await
            .unwrap();
        drop(peer);
        let (head, body, idle) = read(&mut h, &Method::GET).await.unwrap();
        assert_eq!(head.version, Version::HTTP_10);
        assert_eq!((body.as_slice(), idle), (&b"until close"[..], false));

        // Cut short: an error, not an end.
        let (mut h, mut peer) = pair();
        peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
            .await
            .unwrap();
        drop(peer);
        assert_eq!(read(&mut h, &Method::GET).await.unwrap_err(), "Truncated");
        // Closed before any head.
        let (mut h, peer) = pair();
        drop(peer);
        assert!(matches!(h.read_head(T, 4096).await, Err(Error::Closed)));
        // A head past the limit.
        let (mut h, mut peer) = pair();
        peer.write_all(&[b'x'; 5000]).await.unwrap();
        assert!(matches!(
            h.read_head(T, 4096).await,
            Err(Error::Invalid(_) | Error::TooBig)
        ));
        let (mut h, mut peer) = pair();
        peer.write_all(b"HTTP/1.1 200 OK\r\nX: ").await.unwrap();
        peer.write_all(&[b'x'; 5000]).await.unwrap();
        assert!(matches!(h.read_head(T, 4096).await, Err(Error::TooBig)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_upstream_times_out() {
        let (mut h, _peer) = pair();
        assert!(matches!(
            h.read_head(Duration::from_secs(60), 4096).await,
            Err(Error::ReadTimeout)
        ));
    }

    /// An upstream that answers once more, a little after its response
    /// (a second answer to one request): the bytes come while the
    /// connection is idle, and it may not serve again.
    #[tokio::test]
    async fn an_idle_connection_the_upstream_sent_more_on_is_not_open() {
        let (mut h, mut peer) = pair();
        let head = b"GET /a HTTP/1.1\r\nHost: b\r\n\r\n".to_vec();
        h.send(&head, &Payload::Mem(Bytes::new()), T).await.unwrap();
        let mut got = vec![0u8; 200];
        let _ = peer.read(&mut got).await.unwrap();
        peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        let (_, body, idle) = read(&mut h, &Method::GET).await.unwrap();
        assert_eq!(body, b"ok");
        assert!(idle);
        assert!(h.is_open(), "nothing more yet");
        peer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra")
            .await
            .unwrap();
        // The bytes reach the poller.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!h.is_open(), "an unasked answer came");
    }

    #[tokio::test]
    async fn an_idle_connection_the_upstream_closed_is_seen_without_a_read() {
        let (h, peer) = pair();
        assert!(h.is_open());
        assert!(h.is_open(), "asking twice changes nothing");
        drop(peer);
        // The close arrives through the poller.
        tokio::task::yield_now().await;
        let mut tries = 0;
        while h.is_open() && tries < 100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tries += 1;
        }
        assert!(!h.is_open());
        // Bytes nobody asked for: not usable either.
        let (h, mut peer) = pair();
        peer.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let mut tries = 0;
        while h.is_open() && tries < 100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tries += 1;
        }
        assert!(!h.is_open());
    }

    #[tokio::test]
    async fn a_write_to_a_closed_connection_is_unsent_only_if_nothing_went() {
        let (mut h, peer) = pair();
        drop(peer);
        let r = h
            .send(b"GET / HTTP/1.1\r\n\r\n", &Payload::default(), T)
            .await;
        assert!(matches!(r, Err(Error::Write { sent: false, .. })), "{r:?}");
    }

    /// Feeds `wire` to a connection in the pieces `cuts` makes, then closes.
    fn feed(wire: &[u8], cuts: &[usize], method: Method) -> Result<(u16, Vec<u8>, bool), String> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces = Vec::new();
        let mut at = 0;
        for c in cuts {
            pieces.push(wire[at..c].to_vec());
            at = c;
        }
        pieces.push(wire[at..].to_vec());
        rt().block_on(async move {
            let (mut h, mut peer) = pair();
            let writer = tokio::spawn(async move {
                for p in pieces {
                    if peer.write_all(&p).await.is_err() {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            });
            let got = read(&mut h, &method).await;
            let _ = writer.await;
            got.map(|(head, body, idle)| (head.status.as_u16(), body, idle))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Any bytes in any pieces: an answer or an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..6),
            prefix in any::<bool>(),
        ) {
            let mut wire = if prefix { b"HTTP/1.1 200 OK\r\n".to_vec() } else { Vec::new() };
            wire.extend_from_slice(&bytes);
            let _ = feed(&wire, &cuts, Method::GET);
        }

        /// A response head, well formed with hostile bytes put anywhere or
        /// arbitrary, read as `read_head` reads it (a look at all that came
        /// after each read) in pieces of any sizes, reads as it does whole:
        /// the same head, or an error where the whole is refused, or still
        /// waiting where the whole is incomplete. Within a tiny
        /// `proxy_buffer_size` or the default one.
        #[test]
        fn a_head_in_pieces_reads_as_the_whole(
            headers in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,8}", "[ -~]{0,12}"), 0..6),
            informational in any::<bool>(),
            hostile in crate::h1::splits::hostile(),
            noise in proptest::collection::vec(any::<u8>(), 0..200),
            arbitrary in any::<bool>(),
            cuts in proptest::collection::vec(1usize..40, 1..40),
            tiny in any::<bool>(),
        ) {
            use crate::h1::splits;
            let wire = if arbitrary {
                noise
            } else {
                let first = if informational {
                    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"
                } else {
                    "HTTP/1.1 200 OK"
                };
                let mut headers = headers;
                headers.push(("Content-Length".into(), "2".into()));
                splits::head(first, &headers, b"ok", &hostile)
            };
            let limit = if tiny { 48 } else { 4096 };
            let shown = |got: Option<Result<ResponseHead, Error>>| {
                got.map(|r| match r {
                    Ok(h) => {
                        let lines: Vec<(Vec<u8>, Vec<u8>)> =
                            h.raw.iter().map(|(n, v)| (n.to_vec(), v.as_bytes().to_vec())).collect();
                        format!("{} {:?} {:?} {} {lines:?}", h.status, h.version, h.reason, h.len)
                    }
                    Err(e) => format!("error {e:?}"),
                })
            };
            let whole = shown(head_step(&mut BytesMut::from(&wire[..]), limit));
            let got = splits::in_pieces(&wire, &cuts, |buf| shown(head_step(buf, limit)));
            let refused = |g: &Option<String>| g.as_ref().is_some_and(|g| g.starts_with("error"));
            if !(refused(&whole) && refused(&got)) {
                prop_assert_eq!(&whole, &got, "{}", wire.escape_ascii());
            }
        }

        /// A valid response reads the same however it is split.
        #[test]
        fn a_response_in_any_pieces_reads_the_same(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            chunk in 1usize..64,
            chunked in any::<bool>(),
            cuts in proptest::collection::vec(0usize..600, 0..8),
        ) {
            let mut wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX-A: b\r\n".to_vec();
            if chunked {
                wire.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                for c in body.chunks(chunk) {
                    crate::h1::body::chunk_head(c.len(), &mut wire);
                    wire.extend_from_slice(c);
                    wire.extend_from_slice(b"\r\n");
                }
                crate::h1::body::last_chunk(None, &mut wire);
            } else {
                wire.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                wire.extend_from_slice(&body);
            }
            let got = feed(&wire, &cuts, Method::GET);
            prop_assert_eq!(got, Ok((200, body, true)));
        }
    }
}
