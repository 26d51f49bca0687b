//! A connected stream socket, TCP or unix: a client's accepted connection
//! or a connection to an upstream peer, with tokio's read and write. The
//! upstream side is opened here too, within a connect timeout. No protocol.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::tls::TlsStream;
use crate::conf::model::PeerAddr;

/// An accepted client connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TLS over TCP, after its handshake (boxed: the plain variants stay
    /// small).
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The local address (a unix socket's: none).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Tcp(t) => t.local_addr().ok(),
            Stream::Tls(t) => t.tcp().local_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    /// An idle connection is still quiet: open, nothing sent. Costs nothing
    /// while the socket is not readable; else one non-blocking peek (which
    /// clears a stale readiness).
    pub fn quiet(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let peeked = match self {
            Stream::Tcp(s) => match s.poll_read_ready(&mut cx) {
                Poll::Pending => return true,
                Poll::Ready(Err(_)) => return false,
                Poll::Ready(Ok(())) => s.try_io(tokio::io::Interest::READABLE, || peek_len(s)),
            },
            Stream::Unix(s) => match s.poll_read_ready(&mut cx) {
                Poll::Pending => return true,
                Poll::Ready(Err(_)) => return false,
                Poll::Ready(Ok(())) => s.try_io(tokio::io::Interest::READABLE, || peek_len(s)),
            },
            Stream::Tls(t) => {
                if t.has_buffered() {
                    return false;
                }
                match t.tcp().poll_read_ready(&mut cx) {
                    Poll::Pending => return true,
                    Poll::Ready(Err(_)) => return false,
                    // Records came: rustls reads them (tickets are no data).
                    Poll::Ready(Ok(())) => return t.quiet(),
                }
            }
        };
        // WouldBlock: nothing there after all (and the readiness cleared).
        matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// How many bytes one peek sees (0: the peer closed).
fn peek_len(s: &impl std::os::fd::AsFd) -> std::io::Result<usize> {
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

impl Stream {
    /// Ends when the peer closes (or the socket fails) before sending
    /// anything; once it has sent data it is there, and this never ends.
    /// Reads nothing: what it sent stays for whoever reads next.
    ///
    /// It waits on the socket's read readiness as a read does
    /// (`poll_read_ready`, the one waker the socket keeps for reading),
    /// not through `readable()`, whose future joins and leaves the
    /// socket's list of waiters under its lock on every request (some 250
    /// instructions of each proxied request, callgrind). The reads of the
    /// request's body are the same task's, whose waker it is as well.
    pub async fn hung_up(&self) {
        loop {
            let seen = match self {
                Stream::Tcp(s) => {
                    if std::future::poll_fn(|cx| s.poll_read_ready(cx))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    s.try_io(tokio::io::Interest::READABLE, || peek_len(s))
                }
                Stream::Unix(s) => {
                    if std::future::poll_fn(|cx| s.poll_read_ready(cx))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    s.try_io(tokio::io::Interest::READABLE, || peek_len(s))
                }
                Stream::Tls(t) => return t.hung_up().await,
            };
            match seen {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Ok(n) if n > 0 => return std::future::pending().await,
                _ => return,
            }
        }
    }
}

/// Reads and writes through a shared reference, so that one connection's
/// request body and its response can use the socket at once (tokio's
/// readiness, then a non-blocking call).
macro_rules! by_ref {
    ($self:expr, $cx:expr, $ready:ident, $try:ident($($arg:expr),*)) => {
        loop {
            let r = match $self {
                Stream::Tcp(s) => {
                    std::task::ready!(s.$ready($cx))?;
                    s.$try($($arg),*)
                }
                Stream::Unix(s) => {
                    std::task::ready!(s.$ready($cx))?;
                    s.$try($($arg),*)
                }
                // Callers take TLS apart before.
                Stream::Tls(_) => Err(std::io::ErrorKind::Unsupported.into()),
            };
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    };
}

impl Stream {
    /// Ready when the socket may be read (or has closed).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
            Stream::Tls(t) => t.poll_read_ready(cx),
        }
    }

    /// Reads without waiting (WouldBlock when nothing is there). A read
    /// that did not fill the room clears the socket's readiness, as tokio's
    /// own reads do (and nginx's): the next wait goes to the poller instead
    /// of a read that would only say EAGAIN.
    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> std::io::Result<usize> {
        let room = buf.capacity() - buf.len();
        self.try_read_room(buf, room)
    }

    /// `try_read_buf` into any buffer with `room` bytes of spare capacity:
    /// the bytes land in it as they come, with no zeroing of the room first.
    fn try_read_room<B: bytes::BufMut>(&self, buf: &mut B, room: usize) -> std::io::Result<usize> {
        let mut got = None;
        // The read runs inside `try_io`, so that readiness is cleared as of
        // before it: bytes that arrive after it are not missed.
        macro_rules! read {
            ($s:expr) => {
                $s.try_io(tokio::io::Interest::READABLE, || {
                    let n = $s.try_read_buf(buf)?;
                    got = Some(n);
                    if n > 0 && n < room {
                        return Err(std::io::ErrorKind::WouldBlock.into());
                    }
                    Ok(n)
                })
            };
        }
        let r = match self {
            Stream::Tcp(s) => read!(s),
            Stream::Unix(s) => read!(s),
            Stream::Tls(t) => return t.try_read_buf(buf, room),
        };
        match (r, got) {
            (Err(e), Some(n)) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(n),
            (r, _) => r,
        }
    }

    /// Reads what is there into the spare room of `buf` (0: the peer closed).
    pub fn poll_read_into(
        &self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
    ) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.poll_read_ready(cx))?;
            match self.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    /// Reads what is there into `out` (nothing added: the peer closed).
    pub fn poll_read_slice(
        &self,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // The room is read into as it is (tokio's `ReadBuf` takes bytes
        // through `BufMut`): a fresh `ReadBuf` over a buffer's spare
        // capacity, as codecs make one for every read, is not zeroed first.
        let room = out.remaining();
        if room == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            std::task::ready!(self.poll_read_ready(cx))?;
            match self.try_read_room(out, room) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r.map(drop)),
            }
        }
    }

    /// Writes what the socket takes of `data`.
    pub fn poll_write_ref(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Stream::Tls(t) = self {
            return t.poll_write(cx, &[IoSlice::new(data)]);
        }
        by_ref!(self, cx, poll_write_ready, try_write(data))
    }

    /// Writes what the socket takes of `bufs`, in order.
    pub fn poll_write_vectored_ref(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Stream::Tls(t) = self {
            return t.poll_write(cx, bufs);
        }
        by_ref!(self, cx, poll_write_ready, try_write_vectored(bufs))
    }

    /// Writes all of `data`, each step within `timeout` (nginx's
    /// `send_timeout` is between two writes, not over the whole).
    pub async fn write_all_ref(&self, data: &[u8], timeout: Duration) -> std::io::Result<()> {
        let mut at = 0;
        while at < data.len() {
            let step = std::future::poll_fn(|cx| self.poll_write_ref(cx, &data[at..]));
            match crate::net::clock::timeout(timeout, step).await {
                Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => at += n,
            }
        }
        Ok(())
    }

    /// TLS: says close_notify (sent if the socket takes it now), as nginx's
    /// SSL_shutdown() at close. Nothing to say in clear.
    pub fn close_notify(&self) {
        if let Stream::Tls(t) = self {
            t.close_notify();
        }
    }

    /// Ends the write side (FIN; close_notify first over TLS), leaving
    /// reads open.
    pub fn shutdown_write(&self) {
        self.close_notify();
        let fd = match self {
            Stream::Tcp(s) => std::os::fd::AsFd::as_fd(s),
            Stream::Unix(s) => std::os::fd::AsFd::as_fd(s),
            Stream::Tls(t) => std::os::fd::AsFd::as_fd(t.tcp()),
        };
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            nix::sys::socket::Shutdown::Write,
        );
    }
}

macro_rules! both {
    ($self:expr, $s:ident => $e:expr, $tls:ident => $t:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
            $tls => $t,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_read(cx, buf), t => t.poll_read_slice(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write(cx, buf), t => t.poll_write_ref(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write_vectored(cx, bufs), t => t.poll_write_vectored_ref(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_flush(cx), t => match t {
            Stream::Tls(t) => t.poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        })
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_shutdown(cx), t => {
            std::task::ready!(Pin::new(&mut *t).poll_flush(cx))?;
            t.shutdown_write();
            Poll::Ready(Ok(()))
        })
    }
}

/// Why a connect failed.
#[derive(Debug)]
pub enum ConnectError {
    /// Nothing within the timeout.
    Timeout,
    /// The system said no.
    Failed(std::io::Error),
}

/// Connects to a peer within `timeout` (TCP with `TCP_NODELAY`).
pub async fn connect(addr: &PeerAddr, timeout: Duration) -> Result<Stream, ConnectError> {
    connect_from(addr, None, timeout).await
}

/// A TCP connection from the local address `from` (any port).
async fn tcp_from(from: std::net::IpAddr, to: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let s = if from.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    s.bind(std::net::SocketAddr::new(from, 0))?;
    s.connect(to).await
}

/// `connect`, from the local address `from` for a TCP peer (`proxy_bind`).
pub async fn connect_from(
    addr: &PeerAddr,
    from: Option<std::net::IpAddr>,
    timeout: Duration,
) -> Result<Stream, ConnectError> {
    let attempt = match (addr, from) {
        (PeerAddr::Inet(a), Some(ip)) => crate::net::clock::timeout(timeout, tcp_from(ip, *a))
            .await
            .map(|r| r.map(Stream::Tcp)),
        (PeerAddr::Inet(a), None) => crate::net::clock::timeout(timeout, TcpStream::connect(a))
            .await
            .map(|r| r.map(Stream::Tcp)),
        (PeerAddr::Unix(p), _) => crate::net::clock::timeout(timeout, UnixStream::connect(p))
            .await
            .map(|r| r.map(Stream::Unix)),
    };
    match attempt {
        Ok(Ok(c)) => {
            if let Stream::Tcp(t) = &c {
                let _ = t.set_nodelay(true);
            }
            Ok(c)
        }
        Ok(Err(e)) => Err(ConnectError::Failed(e)),
        Err(_) => Err(ConnectError::Timeout),
    }
}
