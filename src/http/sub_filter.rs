//! The sub filter: decides, as nginx's sub header filter does, whether a
//! response's body has its `sub_filter` strings replaced (patterns set, a
//! type of `sub_filter_types`, a body that is not empty and not encoded),
//! fixes the headers (no `Content-Length`; `Last-Modified` and `ETag` gone
//! unless `sub_filter_last_modified`), then streams the body through
//! `sub_match`. Called by the pipeline's `finish`, before gzip.

use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderMap, HeaderValue};

use super::body_filter::{Filter, filtered};
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
    let body = filtered(body, Sub(Matcher::new(pats, r.conf.sub_filter_once)));
    Response::from_parts(parts, body)
}

/// A body's strings replaced as it streams.
struct Sub(Matcher);

impl Filter for Sub {
    fn data(&mut self, d: &[u8]) -> Result<Bytes, BoxError> {
        let mut out = Vec::with_capacity(d.len());
        self.0.feed(d, &mut out);
        Ok(Bytes::from(out))
    }

    fn end(&mut self) -> Result<Bytes, BoxError> {
        let mut out = Vec::new();
        self.0.finish(&mut out);
        Ok(Bytes::from(out))
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
