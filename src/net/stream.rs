//! A connected stream socket, TCP or unix: a client's accepted connection
//! or a connection to an upstream peer, with tokio's read and write. The
//! upstream side is opened here too, within a connect timeout. No protocol.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::conf::model::PeerAddr;

/// An accepted client connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Ready when the client has sent something (or closed). On a `fresh`
    /// stream readiness alone is not enough: tokio reports a newly accepted
    /// stream as readable, so a one-byte peek confirms it (and clears the
    /// assumed readiness). Later, readiness comes from the poller and hyper's
    /// last read, which cleared it.
    pub fn poll_readable(&self, cx: &mut Context<'_>, fresh: bool) -> Poll<std::io::Result<()>> {
        loop {
            if !fresh {
                return match self {
                    Stream::Tcp(s) => s.poll_read_ready(cx),
                    Stream::Unix(s) => s.poll_read_ready(cx),
                };
            }
            let peeked = match self {
                Stream::Tcp(s) => {
                    std::task::ready!(s.poll_read_ready(cx))?;
                    s.try_io(tokio::io::Interest::READABLE, || peek(s))
                }
                Stream::Unix(s) => {
                    std::task::ready!(s.poll_read_ready(cx))?;
                    s.try_io(tokio::io::Interest::READABLE, || peek(s))
                }
            };
            match peeked {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
                Ok(()) => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// One byte peeked (or end of stream): the client has sent something.
fn peek(s: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    peek_len(s).map(|_| ())
}

/// How many bytes one peek sees (0: the peer closed).
fn peek_len(s: &impl std::os::fd::AsFd) -> std::io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    recv(s.as_fd().as_raw_fd(), &mut b, MsgFlags::MSG_PEEK).map_err(std::io::Error::from)
}

impl Stream {
    /// Ends when the peer closes (or the socket fails) before sending
    /// anything; once it has sent data it is there, and this never ends.
    /// Reads nothing: what it sent stays for whoever reads next.
    pub async fn hung_up(&self) {
        loop {
            let seen = match self {
                Stream::Tcp(s) => {
                    if s.readable().await.is_err() {
                        return;
                    }
                    s.try_io(tokio::io::Interest::READABLE, || peek_len(s))
                }
                Stream::Unix(s) => {
                    if s.readable().await.is_err() {
                        return;
                    }
                    s.try_io(tokio::io::Interest::READABLE, || peek_len(s))
                }
            };
            match seen {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Ok(n) if n > 0 => return std::future::pending().await,
                _ => return,
            }
        }
    }
}

macro_rules! both {
    ($self:expr, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        both!(self, s => Pin::new(s).poll_shutdown(cx))
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
    let attempt = match addr {
        PeerAddr::Inet(a) => tokio::time::timeout(timeout, TcpStream::connect(a))
            .await
            .map(|r| r.map(Stream::Tcp)),
        PeerAddr::Unix(p) => tokio::time::timeout(timeout, UnixStream::connect(p))
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
