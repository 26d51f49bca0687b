//! The sub filter: decides, as nginx's sub header filter does, whether a
//! response's body has its `sub_filter` strings replaced (patterns set, a
//! type of `sub_filter_types`, a body that is not empty and not encoded),
//! fixes the headers (no `Content-Length`; `Last-Modified` and `ETag` gone
//! unless `sub_filter_last_modified`), then streams the body through
//! `sub_match`. Called by the pipeline's `finish`, before gzip.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderMap, HeaderValue};
use http_body::{Body as HttpBody, Frame};
use http_body_util::BodyExt;

use super::response::{Body, BoxError};
use super::sub_match::{Matcher, Pattern};
use super::vars::Req;

/// Whether the response qualifies (nginx's header filter conditions).
fn eligible(r: &Req, h: &HeaderMap) -> bool {
    if r.conf.sub_filter.is_empty() {
        return false;
    }
    if h.get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0")
    {
        return false;
    }
    // An encoded body (a gzipped upstream answer) is left alone.
    if h.get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.is_empty())
    {
        return false;
    }
    let Some(ctype) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    r.conf.sub_filter_types.matches(ctype)
}

/// nginx's weak ETag: a strong one gets `W/`, one that is no quoted
/// string goes.
fn weaken_etag(h: &mut HeaderMap) {
    let Some(v) = h.get(header::ETAG) else { return };
    let b = v.as_bytes();
    if b.starts_with(b"W/") {
        return;
    }
    let weak = (b.first() == Some(&b'"'))
        .then(|| HeaderValue::from_bytes(&[b"W/".as_slice(), b].concat()).ok())
        .flatten();
    match weak {
        Some(w) => {
            h.insert(header::ETAG, w);
        }
        None => {
            h.remove(header::ETAG);
        }
    }
}

/// The filter. Replacements (and patterns with variables) are evaluated
/// when the response starts.
pub fn filter(r: &Req, mut resp: Response<Body>) -> Response<Body> {
    if !eligible(r, resp.headers()) {
        return resp;
    }
    let pats: Vec<Pattern> = r
        .conf
        .sub_filter
        .iter()
        .map(|s| Pattern {
            find: match s.find.as_literal() {
                Some(lit) => lit.as_bytes().to_vec(),
                None => r.eval(&s.find).to_ascii_lowercase().into_bytes(),
            },
            replace: r.eval(&s.replace).into_bytes(),
        })
        .filter(|p| !p.find.is_empty())
        .collect();
    if pats.is_empty() {
        return resp;
    }
    let h = resp.headers_mut();
    h.remove(header::CONTENT_LENGTH);
    if r.conf.sub_filter_last_modified {
        weaken_etag(h);
    } else {
        h.remove(header::LAST_MODIFIED);
        h.remove(header::ETAG);
    }
    let (parts, body) = resp.into_parts();
    let body = SubBody {
        inner: body,
        m: Some(Matcher::new(pats, r.conf.sub_filter_once)),
    }
    .boxed();
    Response::from_parts(parts, body)
}

/// A body with its strings replaced as it streams.
struct SubBody {
    inner: Body,
    /// None once finished.
    m: Option<Matcher>,
}

impl HttpBody for SubBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let Some(m) = this.m.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers describe the body before replacement: dropped.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let mut out = Vec::with_capacity(data.len());
                    m.feed(&data, &mut out);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.m = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    let mut out = Vec::new();
                    if let Some(mut m) = this.m.take() {
                        m.finish(&mut out);
                    }
                    if out.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_weakened_or_dropped() {
        let mut h = HeaderMap::new();
        h.insert(header::ETAG, HeaderValue::from_static("\"abc\""));
        weaken_etag(&mut h);
        assert_eq!(h.get(header::ETAG).unwrap(), "W/\"abc\"");
        h.insert(header::ETAG, HeaderValue::from_static("abc"));
        weaken_etag(&mut h);
        assert!(h.get(header::ETAG).is_none());
    }
}
