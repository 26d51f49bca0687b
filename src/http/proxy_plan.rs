//! What every attempt of a proxied request sends, made once: the client's
//! body (in memory or spooled to a temporary file past
//! `client_body_buffer_size`, as nginx keeps it), the URI with nginx's
//! `proxy_pass` rules, and the headers in nginx's order, which each attempt
//! writes. Called by `proxy::run`.

use bytes::{Bytes, BytesMut};
use http::Version;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http_body_util::BodyExt;
use std::sync::Arc;

use super::ClientBody;
use super::vars::Req;
use crate::conf::model::ProxyPass;
use crate::log::Level;
use crate::upstream::body::{Payload, Spool};

const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "expect",
    "upgrade",
    "proxy-connection",
];

/// Escapes a decoded path for the upstream request line, as nginx does when
/// it changes the URI.
fn escape_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b <= 0x20 || b >= 0x7f || matches!(b, b'#' | b'%' | b'?') {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// The URI sent upstream: the client's as received, or with the location's
/// prefix replaced by `proxy_pass`'s URI part.
pub(super) fn upstream_uri(r: &Req, pp: &ProxyPass) -> String {
    match &pp.uri {
        // After a rewrite the changed URI goes, escaped, with its arguments.
        None if r.uri_changed => {
            let mut s = escape_path(&r.uri);
            if let Some(a) = &r.args {
                s.push('?');
                s.push_str(a);
            }
            s
        }
        None => r.request_uri.clone(),
        // With variables nginx sends the URI part as it is.
        Some(u) if pp.dynamic => u.clone(),
        Some(u) => {
            let rest = r
                .uri
                .strip_prefix(pp.location_prefix.as_str())
                .unwrap_or("");
            let mut s = format!("{u}{}", escape_path(rest));
            if let Some(a) = &r.args {
                s.push('?');
                s.push_str(a);
            }
            s
        }
    }
}

/// Reads the whole client body (nginx buffers it before connecting, which is
/// what lets a retry send it again): in memory up to
/// `client_body_buffer_size`, in a temporary file in `client_body_temp_path`
/// past it, as nginx. Err is the status to answer with.
async fn read_body(r: &Req, body: ClientBody) -> Result<Payload, u16> {
    let mut body = match body {
        ClientBody::Incoming(b) => b,
        ClientBody::Empty => return Ok(Payload::default()),
    };
    body.limit(r.conf.client_max_body_size);
    let max = r.conf.client_max_body_size;
    let declared = r
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared {
        if max > 0 && len > max {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "client intended to send too large body: {} bytes{}",
                len,
                r.log_context(None)
            );
            return Err(413);
        }
    }
    let room = r.conf.client_body_buffer_size;
    // Memory for what the body declares, up to the buffer; past it, a file.
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(room) as usize);
    let mut spool: Option<Spool> = None;
    let mut total: u64 = 0;
    loop {
        let frame = match tokio::time::timeout(r.conf.client_body_timeout, body.frame()).await {
            Err(_) => {
                crate::log_conn!(
                    Level::Info,
                    r.conn.number,
                    "client timed out (110: Connection timed out) while reading client request body{}",
                    r.log_context(None)
                );
                return Err(408);
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                if let Some(big) = e.downcast_ref::<super::inbound::TooLarge>() {
                    crate::log_conn!(
                        Level::Error,
                        r.conn.number,
                        "{}{}",
                        big,
                        r.log_context(None)
                    );
                    return Err(413);
                }
                let level = if e.is::<super::inbound::BodyReadError>()
                    && e.to_string().contains("invalid")
                {
                    Level::Error
                } else {
                    Level::Info
                };
                crate::log_conn!(
                    level,
                    r.conn.number,
                    "{} while reading client request body{}",
                    e,
                    r.log_context(None)
                );
                return Err(400);
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(d) = frame.into_data() else {
            continue;
        };
        total += d.len() as u64;
        if max > 0 && total > max {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "client intended to send too large chunked body: {} bytes{}",
                total,
                r.log_context(None)
            );
            return Err(413);
        }
        if spool.is_none() && (buf.len() + d.len()) as u64 <= room {
            buf.extend_from_slice(d.as_ref());
            continue;
        }
        let file = match &mut spool {
            Some(f) => f,
            None => {
                let f = spool_file(r)?;
                spool.insert(f)
            }
        };
        let written = if buf.is_empty() {
            file.write(d.as_ref())
        } else {
            let first = std::mem::take(&mut buf);
            file.write(&first).and_then(|()| file.write(d.as_ref()))
        };
        if let Err(e) = written {
            crate::log_conn!(
                Level::Crit,
                r.conn.number,
                "write() \"{}\" failed ({}){}",
                file.path.display(),
                crate::log::errno_text(&e),
                r.log_context(None)
            );
            return Err(500);
        }
    }
    Ok(match spool {
        Some(f) => Payload::File(Arc::new(f)),
        None => Payload::Mem(buf.freeze()),
    })
}

/// A new temporary file for a body, logged as nginx logs it.
fn spool_file(r: &Req) -> Result<Spool, u16> {
    match Spool::create(&r.conf.client_body_temp_path) {
        Ok(f) => {
            crate::log_conn!(
                Level::Warn,
                r.conn.number,
                "a client request body is buffered to a temporary file {}{}",
                f.path.display(),
                r.log_context(None)
            );
            Ok(f)
        }
        Err(e) => {
            crate::log_conn!(
                Level::Crit,
                r.conn.number,
                "open() \"{}\" failed ({}){}",
                r.conf.client_body_temp_path.display(),
                crate::log::errno_text(&e),
                r.log_context(None)
            );
            Err(500)
        }
    }
}

/// The request headers sent upstream, in nginx's order: `proxy_set_header`
/// (with the default `Host: $proxy_host`) first, then the client's.
pub(super) fn upstream_headers(r: &Req, body_len: u64) -> HeaderMap {
    let conf = &r.conf;
    let mut out = HeaderMap::with_capacity(r.headers.len() + conf.proxy_set_header.len() + 2);
    let user_sets = |n: &str| {
        conf.proxy_set_header
            .iter()
            .any(|(h, _)| h.eq_ignore_ascii_case(n))
    };
    let host_set = user_sets("host");
    if !host_set {
        if let Ok(v) = HeaderValue::from_str(&r.proxy_host) {
            out.append(header::HOST, v);
        }
    }
    let close = conf.proxy_http_version == 10 && !user_sets("connection");
    if close {
        out.append(header::CONNECTION, HeaderValue::from_static("close"));
    }
    for (name, t) in &conf.proxy_set_header {
        let v = r.eval(t);
        // An empty value means: do not send this header at all.
        if v.is_empty() {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            out.append(n, v);
        }
    }
    if conf.proxy_pass_request_headers {
        for (name, value) in &r.headers {
            let n = name.as_str();
            if n == "host"
                || n == "content-length"
                || n == "transfer-encoding"
                || HOP_BY_HOP.contains(&n)
                || (!conf.proxy_set_header.is_empty() && user_sets(n))
            {
                continue;
            }
            out.append(name.clone(), value.clone());
        }
    }
    if body_len > 0 {
        out.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    }
    out
}

/// Everything an attempt needs that stays the same across attempts.
pub(super) struct Plan {
    pub(super) uri: String,
    pub(super) headers: HeaderMap,
    pub(super) extensions: http::Extensions,
    pub(super) body: Payload,
    pub(super) version: Version,
}

/// Reads the client's body and builds what every attempt sends. Err: the
/// status to answer with.
pub(super) async fn plan(
    r: &mut Req,
    pp: &ProxyPass,
    body: ClientBody,
    extensions: http::Extensions,
) -> Result<Plan, u16> {
    r.proxy_host = pp.proxy_host.clone();
    r.proxy_port = pp.proxy_port;
    let mut payload = if r.conf.proxy_pass_request_body {
        read_body(r, body).await?
    } else {
        drop(body);
        Payload::default()
    };
    if let Some(t) = &r.conf.proxy_set_body {
        payload = Payload::Mem(Bytes::from(r.eval(t)));
    }
    Ok(Plan {
        uri: upstream_uri(r, pp),
        headers: upstream_headers(r, payload.len()),
        extensions,
        body: payload,
        version: if r.conf.proxy_http_version == 10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_rules() {
        let mut r = super::super::vars::tests::req();
        let pp = |uri: Option<&str>, prefix: &str| ProxyPass {
            dynamic: false,
            upstream: 0,
            uri: uri.map(String::from),
            proxy_host: "b".into(),
            proxy_port: 80,
            location_prefix: prefix.into(),
        };
        r.request_uri = "/app/a%20b?x=1".into();
        r.uri = "/app/a b".into();
        r.args = Some("x=1".into());
        assert_eq!(upstream_uri(&r, &pp(None, "/app/")), "/app/a%20b?x=1");
        assert_eq!(upstream_uri(&r, &pp(Some("/"), "/app/")), "/a%20b?x=1");
        assert_eq!(
            upstream_uri(&r, &pp(Some("/v2/"), "/app/")),
            "/v2/a%20b?x=1"
        );
    }
}
