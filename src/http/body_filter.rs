//! One streaming shape for the response body filters (`sub_filter`,
//! `charset`, `gzip`): each says what a piece of the body becomes, what to
//! pass on while the source has nothing ready, and what is left at the end;
//! `filtered` drives it over the body's frames. No I/O of its own.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::response::{Body, BoxError};

/// A body filter's steps. An empty `Bytes` is "nothing to pass on yet".
pub trait Filter: Send + Sync + Unpin + 'static {
    /// Trailers are passed on (true) or dropped: a filter that changes the
    /// body's bytes leaves trailers describing the old body behind.
    const TRAILERS: bool = false;

    /// A piece of the body (never empty).
    fn data(&mut self, d: &[u8]) -> Result<Bytes, BoxError>;

    /// The source has nothing more for now: what should go out meanwhile
    /// (a slow upstream's pieces are not held back).
    fn idle(&mut self) -> Result<Bytes, BoxError> {
        Ok(Bytes::new())
    }

    /// The body ended: what is left.
    fn end(&mut self) -> Result<Bytes, BoxError>;
}

/// `inner` through `f`.
pub fn filtered<F: Filter>(inner: Body, f: F) -> Body {
    Filtered { inner, f: Some(f) }.boxed()
}

struct Filtered<F> {
    inner: Body,
    /// None once ended (or failed).
    f: Option<F>,
}

fn piece(b: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    Poll::Ready(Some(Ok(Frame::data(b))))
}

impl<F: Filter> HttpBody for Filtered<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let Some(f) = this.f.as_mut() else {
                return Poll::Ready(None);
            };
            let step = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(d) if d.is_empty() => continue,
                    Ok(d) => f.data(&d),
                    Err(frame) if F::TRAILERS => return Poll::Ready(Some(Ok(frame))),
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(e))) => Err(e),
                Poll::Ready(None) => {
                    let out = f.end();
                    this.f = None;
                    match out {
                        Ok(b) if b.is_empty() => return Poll::Ready(None),
                        Ok(b) => return piece(b),
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    }
                }
                Poll::Pending => match f.idle() {
                    Ok(b) if b.is_empty() => return Poll::Pending,
                    other => other,
                },
            };
            match step {
                Ok(b) if b.is_empty() => {}
                Ok(b) => return piece(b),
                Err(e) => {
                    this.f = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.f.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upper-cases, and says "idle" when the source waits.
    struct Upper(usize);

    impl Filter for Upper {
        fn data(&mut self, d: &[u8]) -> Result<Bytes, BoxError> {
            Ok(Bytes::from(d.to_ascii_uppercase()))
        }
        fn idle(&mut self) -> Result<Bytes, BoxError> {
            self.0 += 1;
            Ok(Bytes::new())
        }
        fn end(&mut self) -> Result<Bytes, BoxError> {
            Ok(Bytes::from_static(b"!"))
        }
    }

    #[tokio::test]
    async fn pieces_and_end() {
        let inner = super::super::response::full(Bytes::from_static(b"abc"));
        let out = filtered(inner, Upper(0))
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&out[..], b"ABC!");
    }
}
