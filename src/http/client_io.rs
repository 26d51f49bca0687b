//! The client's connection as hyper sees it: a TCP or unix stream with
//! three small jobs.
//!
//! - nginx answers every request with an `HTTP/1.1` status line; hyper
//!   answers an HTTP/1.0 request with `HTTP/1.0`. When the service has just
//!   answered an HTTP/1.0 request, the one byte of the next response's status
//!   line is changed, nothing else.
//! - Parking: an idle keep-alive connection does not keep hyper's buffers.
//!   When a request without a body has been answered and none is in flight,
//!   `serve_conn` ends hyper's connection without closing the socket (the
//!   `parking` flag turns `shutdown` into a no-op),
//!   waits for readability with no buffer at all (as nginx frees an idle
//!   connection's buffers), and starts a new hyper connection when the client
//!   sends again.
//! - Bytes hyper had read but not used when it let go are given back first
//!   ([`ClientIo::unread`]).

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Idle;

pub(crate) use crate::net::stream::Stream;

/// The flags the connection shares with its service and watcher.
#[derive(Default)]
pub(crate) struct Flags {
    /// Set by the service: the next bytes written start a response head
    /// that answers an HTTP/1.0 request.
    pub(crate) head_next: AtomicBool,
    /// Set by the service while the request carries a body: hyper may still
    /// be reading (or draining) it after the response, so no parking.
    pub(crate) body: AtomicBool,
    /// Set by the watcher when it ends hyper's connection to park it:
    /// `shutdown` then leaves the socket open.
    pub(crate) parking: AtomicBool,
    /// Set once the connection switched protocols: never parked again.
    pub(crate) no_park: AtomicBool,
}

pub(crate) struct ClientIo<T> {
    inner: T,
    conn: Arc<Idle>,
    /// Bytes given back by hyper, read before the stream.
    unread: Bytes,
    /// Where, in what is still to be written, the '0' of "HTTP/1.0" is.
    patch: Option<usize>,
}

impl<T> ClientIo<T> {
    pub(crate) fn new(inner: T, conn: Arc<Idle>) -> Self {
        ClientIo {
            inner,
            conn,
            unread: Bytes::new(),
            patch: None,
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Gives back bytes read from the stream but not used: `first`, then
    /// whatever was still unread here.
    pub(crate) fn unread(&mut self, first: Bytes) {
        if first.is_empty() {
            return;
        }
        if self.unread.is_empty() {
            self.unread = first;
        } else {
            let mut v = Vec::with_capacity(first.len() + self.unread.len());
            v.extend_from_slice(&first);
            v.extend_from_slice(&self.unread);
            self.unread = Bytes::from(v);
        }
    }

    pub(crate) fn has_unread(&self) -> bool {
        !self.unread.is_empty()
    }

    /// Arms the patch when a response head starts with `HTTP/1.0 `.
    fn arm(&mut self, first: &[u8]) {
        if self.patch.is_none()
            && self.conn.flags.head_next.swap(false, Ordering::AcqRel)
            && first.starts_with(b"HTTP/1.0 ")
        {
            self.patch = Some(7);
        }
    }

    fn advance(&mut self, n: usize) {
        self.patch = match self.patch {
            Some(p) if p >= n => Some(p - n),
            _ => None,
        };
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ClientIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.unread.is_empty() {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread[..n]);
            self.unread.advance(n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.bytes_arrived();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ClientIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.arm(buf);
        let r = match self.patch {
            Some(p) if p < buf.len() => {
                let mut copy = buf.to_vec();
                copy[p] = b'1';
                Pin::new(&mut self.inner).poll_write(cx, &copy)
            }
            _ => Pin::new(&mut self.inner).poll_write(cx, buf),
        };
        if let Poll::Ready(Ok(n)) = r {
            self.advance(n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            self.arm(first);
        }
        let r = match self.patch {
            Some(p) => {
                // Find the slice holding the byte and write a patched copy of it.
                let mut at = p;
                let mut idx = None;
                for (i, b) in bufs.iter().enumerate() {
                    if at < b.len() {
                        idx = Some(i);
                        break;
                    }
                    at -= b.len();
                }
                match idx {
                    Some(i) => {
                        let mut copy = bufs[i].to_vec();
                        copy[at] = b'1';
                        let mut v: Vec<IoSlice<'_>> = bufs.to_vec();
                        v[i] = IoSlice::new(&copy);
                        Pin::new(&mut self.inner).poll_write_vectored(cx, &v)
                    }
                    None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
                }
            }
            None => Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
        };
        if let Poll::Ready(Ok(n)) = r {
            self.advance(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.conn.flags.parking.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn unread_bytes_come_first_and_parking_keeps_the_stream_open() {
        use tokio::io::AsyncReadExt;
        let (a, mut b) = tokio::io::duplex(64);
        let conn = Arc::new(Idle::new(std::time::Duration::from_secs(1)));
        let mut io = ClientIo::new(a, conn.clone());
        b.write_all(b" world").await.unwrap();
        io.unread(Bytes::from_static(b"lo"));
        io.unread(Bytes::from_static(b"hel"));
        assert!(io.has_unread());
        let mut got = [0u8; 11];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
        assert!(!io.has_unread());
        // Parking: shutdown leaves the stream open.
        conn.flags.parking.store(true, Ordering::Release);
        io.shutdown().await.unwrap();
        io.write_all(b"more").await.unwrap();
        let mut four = [0u8; 4];
        b.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"more");
        // Not parking: shutdown ends the stream.
        conn.flags.parking.store(false, Ordering::Release);
        io.shutdown().await.unwrap();
        assert_eq!(b.read(&mut four).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn patches_only_an_armed_head() {
        let conn = Arc::new(Idle::new(std::time::Duration::from_secs(1)));
        let mut w = ClientIo::new(Vec::new(), conn.clone());
        w.write_all(b"HTTP/1.0 200 OK\r\n\r\nbody HTTP/1.0 x")
            .await
            .unwrap();
        conn.flags.head_next.store(true, Ordering::Release);
        w.write_all(b"HTTP/1.0 404 Not Found\r\n\r\n")
            .await
            .unwrap();
        w.write_all(b"HTTP/1.0 200").await.unwrap();
        assert_eq!(
            String::from_utf8(w.inner).unwrap(),
            "HTTP/1.0 200 OK\r\n\r\nbody HTTP/1.0 xHTTP/1.1 404 Not Found\r\n\r\nHTTP/1.0 200"
        );
    }
}
