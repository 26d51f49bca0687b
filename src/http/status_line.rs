//! nginx answers every request with an `HTTP/1.1` status line; hyper answers
//! an HTTP/1.0 request with `HTTP/1.0`. This wrapper around the client's
//! connection changes that one byte of the next response's status line when
//! the service has just answered an HTTP/1.0 request, and nothing else.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct StatusLine<T> {
    inner: T,
    /// Set by the service: the next bytes written start a response head.
    head: Arc<AtomicBool>,
    /// Where, in what is still to be written, the '0' of "HTTP/1.0" is.
    patch: Option<usize>,
}

impl<T> StatusLine<T> {
    pub fn new(inner: T, head: Arc<AtomicBool>) -> Self {
        StatusLine {
            inner,
            head,
            patch: None,
        }
    }

    /// Arms the patch when a response head starts with `HTTP/1.0 `.
    fn arm(&mut self, first: &[u8]) {
        if self.patch.is_none()
            && self.head.swap(false, Ordering::AcqRel)
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

impl<T: AsyncRead + Unpin> AsyncRead for StatusLine<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StatusLine<T> {
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
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn patches_only_an_armed_head() {
        let head = Arc::new(AtomicBool::new(false));
        let mut w = StatusLine::new(Vec::new(), head.clone());
        w.write_all(b"HTTP/1.0 200 OK\r\n\r\nbody HTTP/1.0 x")
            .await
            .unwrap();
        head.store(true, Ordering::Release);
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
