//! What every attempt of a proxied request sends, made once: the client's
//! body (in memory or spooled to a temporary file past
//! `client_body_buffer_size`, as nginx keeps it), the URI with nginx's
//! `proxy_pass` rules, and the headers in nginx's order, which each attempt
//! writes. Called by `proxy::run`.

use bytes::{Bytes, BytesMut};
use http::Version;
use http::header;

use crate::h1::head::valid_value;
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

/// Whether a `Connection` value holds this token.
fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The request head sent upstream, written once for every attempt: the
/// request line, then the headers in nginx's order: `proxy_set_header`
/// (with the default `Host: $proxy_host`) first, as configured, then the
/// client's, in the case and order they arrived, less the ones the proxy
/// replaces or must not pass. True: the head asks the upstream to close
/// (`Connection: close`).
pub(super) fn upstream_head(
    r: &Req,
    uri: &str,
    version: Version,
    body_len: u64,
    out: &mut Vec<u8>,
) -> bool {
    use crate::h1::write;
    let conf = &r.conf;
    let user_sets = |n: &[u8]| {
        conf.proxy_set_header
            .iter()
            .any(|(h, _)| h.as_bytes().eq_ignore_ascii_case(n))
    };
    write::request_line(&r.method, uri.as_bytes(), version, out);
    let line = |n: &[u8], v: &[u8], out: &mut Vec<u8>| {
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    };
    if !user_sets(b"host") && valid_value(r.proxy_host.as_bytes()) {
        line(b"Host", r.proxy_host.as_bytes(), out);
    }
    let mut close = conf.proxy_http_version == 10 && !user_sets(b"connection");
    if close {
        line(b"Connection", b"close", out);
    }
    for (name, t) in &conf.proxy_set_header {
        let v = r.eval(t);
        // An empty value means: do not send this header at all.
        if v.is_empty() || !valid_value(v.as_bytes()) {
            continue;
        }
        if name.eq_ignore_ascii_case("connection") && has_token(v.as_bytes(), "close") {
            close = true;
        }
        line(name.as_bytes(), v.as_bytes(), out);
    }
    if conf.proxy_pass_request_headers {
        for (name, value) in r.headers.iter() {
            if name.eq_ignore_ascii_case(b"host")
                || name.eq_ignore_ascii_case(b"content-length")
                || name.eq_ignore_ascii_case(b"transfer-encoding")
                || HOP_BY_HOP
                    .iter()
                    .any(|h| name.eq_ignore_ascii_case(h.as_bytes()))
                || (!conf.proxy_set_header.is_empty() && user_sets(name))
            {
                continue;
            }
            line(name, value.as_bytes(), out);
        }
    }
    if body_len > 0 {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(body_len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    close
}

/// Everything an attempt needs that stays the same across attempts.
pub(super) struct Plan {
    pub(super) uri: String,
    /// The request line and headers as every attempt writes them.
    pub(super) head: Vec<u8>,
    /// The head asks the upstream to close the connection.
    pub(super) asks_close: bool,
    pub(super) body: Payload,
}

/// Reads the client's body and builds what every attempt sends. Err: the
/// status to answer with.
pub(super) async fn plan(r: &mut Req, pp: &ProxyPass, body: ClientBody) -> Result<Plan, u16> {
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
    let uri = upstream_uri(r, pp);
    let version = if r.conf.proxy_http_version == 10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let mut head = Vec::with_capacity(512);
    let asks_close = upstream_head(r, &uri, version, payload.len(), &mut head);
    Ok(Plan {
        uri,
        head,
        asks_close,
        body: payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head as every attempt writes it: `proxy_set_header` first as
    /// configured, then the client's headers in their order and case, less
    /// the hop-by-hop ones, the framing ones and those the proxy sets.
    #[test]
    fn upstream_head_keeps_the_clients_case_and_order() {
        let mut r = super::super::vars::tests::req();
        r.proxy_host = "backend".into();
        r.headers = crate::h1::head::Headers::from_pairs([
            ("host", "client.example"),
            ("X-Case", "1"),
            ("connection", "keep-alive, Upgrade"),
            ("Upgrade", "websocket"),
            ("x-case", "2"),
            ("Content-Length", "5"),
            ("X-Real-IP", "spoofed"),
            ("TE", "trailers"),
        ]);
        let mut conf = (*r.conf).clone();
        conf.proxy_http_version = 11;
        conf.proxy_set_header = vec![
            (
                "X-Real-IP".into(),
                crate::conf::vars::compile("$remote_addr").unwrap(),
            ),
            (
                "Connection".into(),
                crate::conf::vars::compile("close").unwrap(),
            ),
            ("X-Empty".into(), crate::conf::vars::compile("").unwrap()),
        ];
        r.conf = std::sync::Arc::new(conf);
        let mut out = Vec::new();
        let close = upstream_head(&r, "/u?a=1", Version::HTTP_11, 5, &mut out);
        assert!(close, "the configured Connection: close is seen");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "GET /u?a=1 HTTP/1.1\r\nHost: backend\r\nX-Real-IP: 127.0.0.2\r\n\
             Connection: close\r\nX-Case: 1\r\nx-case: 2\r\nContent-Length: 5\r\n\r\n"
        );
        // HTTP/1.0 upstream: sluice asks to close; no body, no length.
        let mut conf = (*r.conf).clone();
        conf.proxy_http_version = 10;
        conf.proxy_set_header.clear();
        r.conf = std::sync::Arc::new(conf);
        out.clear();
        assert!(upstream_head(&r, "/", Version::HTTP_10, 0, &mut out));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "GET / HTTP/1.0\r\nHost: backend\r\nConnection: close\r\nX-Case: 1\r\n\
             x-case: 2\r\nX-Real-IP: spoofed\r\n\r\n"
        );
    }

    #[test]
    fn uri_rules() {
        let mut r = super::super::vars::tests::req();
        let pp = |uri: Option<&str>, prefix: &str| ProxyPass {
            dynamic: false,
            ssl: false,
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
