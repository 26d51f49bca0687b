//! The gzip filter: decides, as nginx's gzip header filter and
//! `ngx_http_gzip_ok` do, whether a response is compressed for this client,
//! then streams its body through a gzip stream (`gzip_stream`), flushing whenever
//! the source has nothing more ready so a slow upstream's pieces are not
//! held back. Also what `gzip_static` needs to decide. Called by the
//! pipeline's `finish` (after `add_header` and `expires`) and by
//! `static_files`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, Version};

use super::body_filter::{Filter, filtered};
use super::gzip_stream::GzipStream;
use super::response::{Body, BoxError};
use super::vars::Req;
use crate::conf::gzip::{GzipDisable, proxied};
use crate::conf::loc::LocConf;

/// Compressed output is passed on once this much is ready (a flush passes
/// on whatever there is).
const OUT_CHUNK: usize = 16 * 1024;

/// A response nginx marks `gzip_vary` for: `gzip_static on` found the
/// file's `.gz` (whether or not it was sent).
#[derive(Debug, Clone, Copy)]
pub struct Vary;

/// What `$gzip_ratio` reads: the body's size before and after, set when
/// the compressed body ends.
#[derive(Debug, Default)]
pub struct Ratio {
    zin: AtomicU64,
    zout: AtomicU64,
}

impl Ratio {
    /// nginx's `%ui.%02ui` with its rounding; empty while unknown.
    pub fn text(&self) -> String {
        let zin = self.zin.load(Ordering::Relaxed);
        let zout = self.zout.load(Ordering::Relaxed);
        ratio_text(zin, zout)
    }
}

fn ratio_text(zin: u64, zout: u64) -> String {
    if zout == 0 {
        return String::new();
    }
    let mut int = zin / zout;
    let mut frac = (zin * 100 / zout) % 100;
    if (zin * 1000 / zout) % 10 > 4 {
        frac += 1;
        if frac > 99 {
            int += 1;
            frac = 0;
        }
    }
    format!("{int}.{frac:02}")
}

/// The q-value after `q=` in an Accept-Encoding item, in thousandths; 0
/// when it does not read as one (as nginx's `ngx_http_gzip_quantity`).
fn quantity(s: &[u8]) -> u32 {
    let mut i = 0;
    let digit = |i: usize| s.get(i).copied().filter(u8::is_ascii_digit);
    let Some(first) = digit(i) else { return 0 };
    let mut q = u32::from(first - b'0') * 1000;
    i += 1;
    if q > 1000 {
        return 0;
    }
    match s.get(i) {
        Some(b'.') => i += 1,
        None | Some(b',' | b' ' | b';') => return q,
        Some(_) => return 0,
    }
    let mut scale = 100;
    while scale > 0 {
        match digit(i) {
            Some(d) => {
                q += u32::from(d - b'0') * scale;
                i += 1;
                scale /= 10;
            }
            None => break,
        }
    }
    if q > 1000 || !matches!(s.get(i), None | Some(b',' | b' ' | b';')) {
        return 0;
    }
    q
}

/// Whether `Accept-Encoding` lets gzip through: a `gzip` token (not
/// `x-gzip`) without `q=0`, as nginx reads it.
pub fn accepts_gzip(ae: &[u8]) -> bool {
    let mut start = 0;
    let at = loop {
        let Some(p) = ae[start..]
            .windows(4)
            .position(|w| w.eq_ignore_ascii_case(b"gzip"))
        else {
            return false;
        };
        let p = start + p;
        if p == 0 || ae[p - 1] == b',' || ae[p - 1] == b' ' {
            break p + 4;
        }
        start = p + 4;
    };
    let mut i = at;
    while i < ae.len() {
        match ae[i] {
            b',' => return true,
            b' ' => i += 1,
            b';' => {
                i += 1;
                while i < ae.len() && ae[i] == b' ' {
                    i += 1;
                }
                if !matches!(ae.get(i), Some(b'q' | b'Q')) || ae.get(i + 1) != Some(&b'=') {
                    return false;
                }
                return quantity(&ae[i + 2..]) > 0;
            }
            _ => return false,
        }
    }
    true
}

/// nginx's `msie6`: MSIE 4, 5 or 6 (6 without "SV1"), not Opera.
fn is_msie6(ua: &[u8]) -> bool {
    if ua.windows(5).any(|w| w == b"Opera") {
        return false;
    }
    let Some(p) = ua.windows(5).position(|w| w == b"MSIE ") else {
        return false;
    };
    if p + 7 >= ua.len() || ua[p + 6] != b'.' {
        return false;
    }
    match ua[p + 5] {
        b'4' | b'5' => true,
        b'6' => !ua[p + 8..].windows(3).any(|w| w == b"SV1"),
        _ => false,
    }
}

fn header_has_token(h: &HeaderMap, name: &header::HeaderName, token: &str) -> bool {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t.len() >= token.len() && t[..token.len()].eq_ignore_ascii_case(token)
        })
}

/// nginx's `ngx_http_gzip_ok`: the client takes gzip (Accept-Encoding,
/// `gzip_disable`, `gzip_http_version`), and a proxied request (one with
/// `Via`) passes `gzip_proxied` judged by the response headers `out`.
pub fn client_ok(r: &Req, out: &HeaderMap) -> bool {
    let c = &r.conf;
    let Some(ae) = r.headers.get(header::ACCEPT_ENCODING) else {
        return false;
    };
    let ae = ae.as_bytes();
    if ae.len() < 4 || !(ae.starts_with(b"gzip,") || accepts_gzip(ae)) {
        return false;
    }
    let ua = r.headers.get(header::USER_AGENT).map(|v| v.as_bytes());
    let version = match r.version {
        Version::HTTP_09 => 9,
        Version::HTTP_10 => 10,
        _ => 11,
    };
    if version < c.gzip_http_version {
        return false;
    }
    if c.gzip_disable
        .iter()
        .any(|d| matches!(d, GzipDisable::Msie6) && ua.is_some_and(is_msie6))
    {
        return false;
    }
    if r.headers.contains_key(header::VIA)
        && !proxied_ok(c, r.headers.contains_key(header::AUTHORIZATION), out)
    {
        return false;
    }
    if let Some(ua) = ua.and_then(|u| std::str::from_utf8(u).ok()) {
        let hit = c.gzip_disable.iter().any(|d| match d {
            GzipDisable::Regex(re) => re.is_match(ua),
            GzipDisable::Msie6 => false,
        });
        if hit {
            return false;
        }
    }
    true
}

/// `gzip_proxied` for a request that came through a proxy.
fn proxied_ok(c: &LocConf, auth: bool, out: &HeaderMap) -> bool {
    let p = c.gzip_proxied;
    if p & proxied::OFF != 0 {
        return false;
    }
    if p & proxied::ANY != 0 || (auth && p & proxied::AUTH != 0) {
        return true;
    }
    if let Some(e) = out.get(header::EXPIRES) {
        if p & proxied::EXPIRED == 0 {
            return false;
        }
        let Some(expires) = e.to_str().ok().and_then(super::range::http_time) else {
            return false;
        };
        let date = match out.get(header::DATE) {
            Some(d) => match d.to_str().ok().and_then(super::range::http_time) {
                Some(d) => d,
                None => return false,
            },
            None => chrono::Utc::now().timestamp(),
        };
        return expires < date;
    }
    if out.contains_key(header::CACHE_CONTROL) {
        let cc = header::CACHE_CONTROL;
        return (p & proxied::NO_CACHE != 0 && header_has_token(out, &cc, "no-cache"))
            || (p & proxied::NO_STORE != 0 && header_has_token(out, &cc, "no-store"))
            || (p & proxied::PRIVATE != 0 && header_has_token(out, &cc, "private"));
    }
    if p & proxied::NO_LAST_MODIFIED != 0 && out.contains_key(header::LAST_MODIFIED) {
        return false;
    }
    if p & proxied::NO_ETAG != 0 && out.contains_key(header::ETAG) {
        return false;
    }
    true
}

/// The first half of nginx's gzip header filter: whether this response is
/// one gzip would compress for a client that takes it (`gzip_vary` then
/// applies).
fn eligible(r: &Req, status: u16, h: &HeaderMap) -> bool {
    let c = &r.conf;
    // HEAD too: its answer says what GET's would (nginx's gzip header
    // filter runs before the request is known to want the head only).
    if !c.gzip || !matches!(status, 200 | 403 | 404) {
        return false;
    }
    if h.get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.is_empty())
    {
        return false;
    }
    let length = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n < c.gzip_min_length) {
        return false;
    }
    let ctype = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    c.gzip_types.matches(ctype)
}

/// Whether a static file's 200 would be compressed: its byte ranges are
/// then not served (nginx's range filter gives way to gzip).
pub fn would_compress(r: &Req, content_type: &str, size: u64, h: &HeaderMap) -> bool {
    let mut h = h.clone();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    eligible(r, 200, &h) && client_ok(r, &h)
}

/// nginx's `ngx_http_weak_etag`: a strong ETag becomes weak, one that is
/// not a quoted string is dropped.
fn weaken_etag(h: &mut HeaderMap) {
    let Some(v) = h.get(header::ETAG) else { return };
    let b = v.as_bytes();
    if b.starts_with(b"W/") {
        return;
    }
    if b.first() == Some(&b'"') {
        let mut w = b"W/".to_vec();
        w.extend_from_slice(b);
        if let Ok(v) = HeaderValue::from_bytes(&w) {
            h.insert(header::ETAG, v);
            return;
        }
    }
    h.remove(header::ETAG);
}

/// The filter: compresses the response when it and the client qualify,
/// adds `Vary: Accept-Encoding` with `gzip_vary`.
pub fn filter(r: &mut Req, mut resp: Response<Body>) -> Response<Body> {
    let status = resp.status().as_u16();
    let mut vary = resp.extensions_mut().remove::<Vary>().is_some();
    let compress = eligible(r, status, resp.headers()) && {
        vary = true;
        client_ok(r, resp.headers())
    };
    if vary && r.conf.gzip_vary {
        resp.headers_mut()
            .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    if !compress {
        return resp;
    }
    let h = resp.headers_mut();
    let len = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    weaken_etag(h);
    if r.method == Method::HEAD {
        // The fields only: there is no body to compress.
        return resp;
    }
    let ratio = Arc::new(Ratio::default());
    r.gzip_ratio = Some(ratio.clone());
    let level = r.conf.gzip_comp_level;
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, filtered(body, Gzip::new(level, len, ratio)))
}

/// A body compressed as it streams.
struct Gzip {
    /// None once finished.
    enc: Option<GzipStream>,
    /// Compressed bytes not passed on yet.
    out: Vec<u8>,
    /// Input written since the last flush.
    unflushed: bool,
    zin: u64,
    zout: u64,
    ratio: Arc<Ratio>,
}

impl Gzip {
    fn new(level: u32, len: Option<u64>, ratio: Arc<Ratio>) -> Gzip {
        Gzip {
            enc: Some(GzipStream::new(level, len)),
            out: Vec::new(),
            unflushed: false,
            zin: 0,
            zout: 0,
            ratio,
        }
    }

    fn take(&mut self) -> Bytes {
        let out = std::mem::take(&mut self.out);
        self.zout += out.len() as u64;
        Bytes::from(out)
    }
}

fn io_err(e: flate2::CompressError) -> BoxError {
    Box::new(e)
}

impl Filter for Gzip {
    /// Compressed output goes on in pieces of `OUT_CHUNK`.
    fn data(&mut self, d: &[u8]) -> Result<Bytes, BoxError> {
        let Some(enc) = self.enc.as_mut() else {
            return Ok(Bytes::new());
        };
        enc.write(d, &mut self.out).map_err(io_err)?;
        self.zin += d.len() as u64;
        self.unflushed = true;
        if self.out.len() >= OUT_CHUNK {
            return Ok(self.take());
        }
        Ok(Bytes::new())
    }

    /// Nothing more for now: what was compressed goes out.
    fn idle(&mut self) -> Result<Bytes, BoxError> {
        let Some(enc) = self.enc.as_mut() else {
            return Ok(Bytes::new());
        };
        if !self.unflushed {
            return Ok(Bytes::new());
        }
        self.unflushed = false;
        enc.flush(&mut self.out).map_err(io_err)?;
        Ok(self.take())
    }

    fn end(&mut self) -> Result<Bytes, BoxError> {
        let Some(enc) = self.enc.take() else {
            return Ok(Bytes::new());
        };
        enc.finish(&mut self.out).map_err(io_err)?;
        let out = self.take();
        self.ratio.zin.store(self.zin, Ordering::Relaxed);
        self.ratio.zout.store(self.zout, Ordering::Relaxed);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::Read;

    #[test]
    fn accept_encoding() {
        for yes in [
            "gzip",
            "gzip, deflate",
            "deflate, gzip",
            "br,gzip;q=0.5",
            "gzip;q=1",
            "gzip; q=0.001",
            "GZIP",
            "x-gzip, gzip",
        ] {
            assert!(accepts_gzip(yes.as_bytes()), "{yes}");
        }
        for no in [
            "",
            "deflate",
            "x-gzip",
            "gzip;q=0",
            "gzip;q=0.000",
            "gzip;q=0, deflate",
            "gzipx",
            "gzip;q=2",
            "gzip;x=1",
            "br;q=1",
        ] {
            assert!(!accepts_gzip(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn msie6() {
        assert!(is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)"
        ));
        assert!(is_msie6(b"Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)"));
        assert!(!is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)"
        ));
        assert!(!is_msie6(
            b"Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)"
        ));
        assert!(!is_msie6(b"Opera/9 (compatible; MSIE 6.0; X)"));
        assert!(!is_msie6(b"curl/8"));
    }

    #[test]
    fn ratio_rounds_as_nginx() {
        assert_eq!(ratio_text(0, 0), "");
        assert_eq!(ratio_text(2125, 1000), "2.13");
        assert_eq!(ratio_text(1999, 1000), "2.00");
        assert_eq!(ratio_text(100, 300), "0.33");
    }

    #[test]
    fn etag_weakened() {
        let mut h = HeaderMap::new();
        h.insert(header::ETAG, HeaderValue::from_static("\"abc\""));
        weaken_etag(&mut h);
        assert_eq!(h[header::ETAG], "W/\"abc\"");
        weaken_etag(&mut h);
        assert_eq!(h[header::ETAG], "W/\"abc\"");
        h.insert(header::ETAG, HeaderValue::from_static("abc"));
        weaken_etag(&mut h);
        assert!(!h.contains_key(header::ETAG));
    }

    #[tokio::test]
    async fn body_round_trip() {
        let text = "hello hello hello ".repeat(5000);
        let inner = super::super::response::full(Bytes::from(text.clone()));
        let ratio = Arc::new(Ratio::default());
        let body = filtered(inner, Gzip::new(1, None, ratio.clone()));
        let out = body.collect().await.unwrap().to_bytes();
        let mut d = flate2::read::GzDecoder::new(&out[..]);
        let mut back = String::new();
        d.read_to_string(&mut back).unwrap();
        assert_eq!(back, text);
        assert!(!ratio.text().is_empty());
    }
}
