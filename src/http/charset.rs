//! nginx's charset filter: `charset` adds `; charset=NAME` to the
//! Content-Type of the types in `charset_types`; with `source_charset` (or,
//! under `override_charset on`, the charset a proxied response declares) the
//! body is recoded on its way, with encoding_rs, across piece boundaries.
//! Runs on every response before gzip (`pipeline`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use encoding_rs::{Decoder, Encoder, Encoding};
use http::Response;
use http::header::{self, HeaderValue};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::response::{Body, BoxError};
use super::vars::Req;

/// The MIME type and the charset parameter of a Content-Type value.
fn split(ct: &str) -> (&str, Option<&str>) {
    let mut parts = ct.split(';');
    let mime = parts.next().unwrap_or("").trim();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"'))
    });
    (mime, charset)
}

/// What the filter does to a response: the Content-Type to write, and the
/// recoding (from, to) if any.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub content_type: Option<String>,
    pub recode: Option<(&'static Encoding, &'static Encoding)>,
}

/// nginx's header filter, as a pure function of the configuration, the
/// status and the response's Content-Type. None: the response is left as
/// it is.
pub(crate) fn plan(
    conf: &crate::conf::loc::LocConf,
    status: u16,
    ct: &str,
    proxied: bool,
) -> Option<Plan> {
    let to = conf.charset.as_deref()?;
    if ct.is_empty() {
        return None;
    }
    let (mime, declared) = split(ct);
    if !conf.charset_types.matches(mime) {
        return None;
    }
    let from = match declared {
        // A response that names its charset keeps it, unless a proxied one
        // is to be recoded (`override_charset on`).
        Some(d) if !(proxied && conf.override_charset) => {
            let _ = d;
            return None;
        }
        Some(d) => Some(d),
        None => conf.source_charset.as_deref(),
    };
    let with = |name: &str| Some(format!("{mime}; charset={name}"));
    let Some(from) = from.filter(|f| !f.eq_ignore_ascii_case(to)) else {
        return Some(Plan {
            content_type: with(to),
            recode: None,
        });
    };
    // nginx sends a redirect it would recode without a charset.
    if status == 301 || status == 302 {
        return Some(Plan {
            content_type: Some(mime.to_string()),
            recode: None,
        });
    }
    let (Some(f), Some(t)) = (
        Encoding::for_label(from.as_bytes()),
        Encoding::for_label(to.as_bytes()),
    ) else {
        // Not recodable (only a declared charset can get here: the
        // configured pair is checked at load): passed on as declared.
        return None;
    };
    Some(Plan {
        content_type: with(to),
        recode: (f != t).then_some((f, t)),
    })
}

/// Applies the filter to a response.
pub fn filter(r: &Req, mut resp: Response<Body>, proxied: bool) -> Response<Body> {
    // nginx leaves an encoded (compressed) response alone, header too.
    if r.conf.charset.is_none() || resp.headers().contains_key(header::CONTENT_ENCODING) {
        return resp;
    }
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(p) = plan(&r.conf, resp.status().as_u16(), ct, proxied) else {
        return resp;
    };
    let h = resp.headers_mut();
    if let Some(v) = p.content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::CONTENT_TYPE, v);
    }
    let Some((from, to)) = p.recode else {
        return resp;
    };
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    let (parts, body) = resp.into_parts();
    let body = Recode {
        inner: body,
        decoder: from.new_decoder_without_bom_handling(),
        encoder: (to != encoding_rs::UTF_8).then(|| to.new_encoder()),
        done: false,
    };
    Response::from_parts(parts, body.boxed())
}

/// A body recoded piece by piece; the decoder keeps a sequence cut between
/// two pieces until the next.
struct Recode {
    inner: Body,
    decoder: Decoder,
    /// None: the target is UTF-8, what the decoder writes.
    encoder: Option<Encoder>,
    done: bool,
}

impl Recode {
    fn convert(&mut self, input: &[u8], last: bool) -> Bytes {
        let mut text = String::with_capacity(
            self.decoder
                .max_utf8_buffer_length(input.len())
                .unwrap_or(input.len().saturating_mul(3).saturating_add(16)),
        );
        let _ = self.decoder.decode_to_string(input, &mut text, last);
        let Some(enc) = self.encoder.as_mut() else {
            return Bytes::from(text.into_bytes());
        };
        let mut out = Vec::with_capacity(text.len() + 16);
        let mut rest = text.as_str();
        loop {
            // Characters the target lacks become `&#N;`, as nginx writes them.
            let (res, read, _) = enc.encode_from_utf8_to_vec(rest, &mut out, last);
            rest = &rest[read..];
            match res {
                encoding_rs::CoderResult::InputEmpty => break,
                encoding_rs::CoderResult::OutputFull => {
                    out.reserve(rest.len().saturating_mul(10).max(32));
                }
            }
        }
        Bytes::from(out)
    }
}

impl HttpBody for Recode {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => {
                        let out = this.convert(&d, false);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(f) => return Poll::Ready(Some(Ok(f))),
                },
                Poll::Ready(None) => {
                    this.done = true;
                    // What the decoder held back (a cut sequence) ends here.
                    let out = this.convert(&[], true);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::loc::LocConf;

    fn conf(charset: Option<&str>, source: Option<&str>, over: bool) -> LocConf {
        let mut c = (*super::super::vars::tests::req().conf).clone();
        c.charset = charset.map(str::to_string);
        c.source_charset = source.map(str::to_string);
        c.override_charset = over;
        c
    }

    #[test]
    fn adds_the_charset_to_listed_types_only() {
        let c = conf(Some("utf-8"), None, false);
        let p = plan(&c, 200, "text/html", false).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert!(p.recode.is_none());
        assert!(plan(&c, 200, "image/png", false).is_none());
        assert!(plan(&c, 200, "", false).is_none());
        assert!(plan(&conf(None, None, false), 200, "text/html", false).is_none());
    }

    #[test]
    fn a_declared_charset_stays_unless_overridden() {
        let c = conf(Some("utf-8"), Some("koi8-r"), false);
        assert!(plan(&c, 200, "text/html; charset=windows-1251", true).is_none());
        let c = conf(Some("utf-8"), None, true);
        let p = plan(&c, 200, "text/html; charset=windows-1251", true).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(
            p.recode,
            Some((encoding_rs::WINDOWS_1251, encoding_rs::UTF_8))
        );
        // Not a proxied response: kept.
        assert!(plan(&c, 200, "text/html; charset=windows-1251", false).is_none());
    }

    #[test]
    fn source_charset_recodes_but_not_redirects() {
        let c = conf(Some("utf-8"), Some("koi8-r"), false);
        let p = plan(&c, 200, "text/plain", false).unwrap();
        assert_eq!(p.recode, Some((encoding_rs::KOI8_R, encoding_rs::UTF_8)));
        let p = plan(&c, 302, "text/html", false).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html"));
        assert!(p.recode.is_none());
        let same = conf(Some("utf-8"), Some("UTF-8"), false);
        assert!(
            plan(&same, 200, "text/html", false)
                .unwrap()
                .recode
                .is_none()
        );
    }

    #[test]
    fn recodes_across_pieces() {
        let mut r = Recode {
            inner: super::super::response::full(Bytes::new()),
            decoder: encoding_rs::UTF_8.new_decoder_without_bom_handling(),
            encoder: Some(encoding_rs::KOI8_R.new_encoder()),
            done: false,
        };
        // "Привет" in UTF-8, cut inside a character; then one koi8-r lacks.
        let s = "Привет €".as_bytes();
        let mut out = r.convert(&s[..3], false).to_vec();
        out.extend_from_slice(&r.convert(&s[3..], false));
        out.extend_from_slice(&r.convert(&[], true));
        assert_eq!(out, b"\xf0\xd2\xc9\xd7\xc5\xd4 &#8364;");
        let mut back = Recode {
            inner: super::super::response::full(Bytes::new()),
            decoder: encoding_rs::KOI8_R.new_decoder_without_bom_handling(),
            encoder: None,
            done: false,
        };
        assert_eq!(&back.convert(b"\xf0\xd2\xc9", true)[..], "При".as_bytes());
    }
}
