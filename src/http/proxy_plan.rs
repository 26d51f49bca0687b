//! What every attempt of a proxied request sends, made once: the client's
//! body (in memory or spooled to a temporary file past
//! `client_body_buffer_size`, as nginx keeps it), the URI with nginx's
//! `proxy_pass` rules, and the headers in nginx's order, which each attempt
//! writes. Called by `proxy::run`.

use bytes::{Bytes, BytesMut};
use http::Version;

use crate::h1::head::{Known, valid_value};
use http_body_util::BodyExt;
use std::sync::Arc;

use super::ClientBody;
use super::proxy_stream::Streamed;
use super::vars::Req;
use crate::conf::loc::BodyInFile;
use crate::conf::model::ProxyPass;
use crate::h1::body::Framing;
use crate::log::Level;
use crate::upstream::attempt::Policy;
use crate::upstream::body::{Keep, Payload, Spool};

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
    super::uri::escape_into(p, super::uri::Escape::Path, &mut out);
    out
}

/// The URI sent upstream: the client's as received, or with the location's
/// prefix replaced by `proxy_pass`'s URI part.
pub(super) fn upstream_uri(r: &Req, pp: &ProxyPass) -> UpUri {
    UpUri::Made(match &pp.uri {
        // After a rewrite the changed URI goes, escaped, with its arguments.
        None if r.uri_changed => {
            let mut s = escape_path(&r.uri);
            if let Some(a) = &r.args {
                s.push('?');
                s.push_str(a);
            }
            s
        }
        // The client's own, shared: the common case allocates nothing.
        None => return UpUri::Same(r.request_uri.clone()),
        // With variables nginx sends the URI part as it is (a byte that is
        // not UTF-8 as that byte: `upstream_head`).
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
    })
}

/// The body's declared `Content-Length`, refused with 413 (logged as nginx
/// logs it) when it is over `client_max_body_size`.
fn declared_length(r: &Req) -> Result<Option<u64>, u16> {
    let max = r.conf.client_max_body_size;
    let declared = r
        .headers
        .known(Known::ContentLength)
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
    Ok(declared)
}

/// `client_body_timeout` passed between two reads of the body: logged, and
/// the status to answer with.
pub(super) fn body_timed_out(r: &Req) -> u16 {
    body_timed_out_at(r.conn.number, &r.log_context(None))
}

/// `body_timed_out` for request `number` with its log context `ctx`.
pub(super) fn body_timed_out_at(number: u64, ctx: &str) -> u16 {
    crate::log_conn!(
        Level::Info,
        number,
        "client timed out (110: Connection timed out) while reading client request body{}",
        ctx
    );
    408
}

/// The body could not be read (over `client_max_body_size`, bad chunks, the
/// client gone): logged as nginx logs it, and the status to answer with.
pub(super) fn body_failed(r: &Req, e: &super::response::BoxError) -> u16 {
    body_failed_at(r.conn.number, &r.log_context(None), e)
}

/// `body_failed` for request `number` with its log context `ctx`.
pub(super) fn body_failed_at(number: u64, ctx: &str, e: &super::response::BoxError) -> u16 {
    if let Some(big) = e.downcast_ref::<super::inbound::TooLarge>() {
        crate::log_conn!(Level::Error, number, "{}{}", big, ctx);
        return 413;
    }
    let level = if e.is::<super::inbound::BodyReadError>() && e.to_string().contains("invalid") {
        Level::Error
    } else {
        Level::Info
    };
    crate::log_conn!(
        level,
        number,
        "{} while reading client request body{}",
        e,
        ctx
    );
    400
}

/// The body has grown past `client_max_body_size` (a chunked body, whose
/// size nobody declared): logged, and the status to answer with.
pub(super) fn over_limit(r: &Req, total: u64) -> Option<u16> {
    let max = r.conf.client_max_body_size;
    if max == 0 || total <= max {
        return None;
    }
    crate::log_conn!(
        Level::Error,
        r.conn.number,
        "client intended to send too large chunked body: {} bytes{}",
        total,
        r.log_context(None)
    );
    Some(413)
}

/// Reads the whole client body (nginx buffers it before connecting, which is
/// what lets a retry send it again): in memory up to
/// `client_body_buffer_size`, in a temporary file in `client_body_temp_path`
/// past it, as nginx. Err is the status to answer with.
pub(super) async fn read_body(r: &Req, body: ClientBody) -> Result<Payload, u16> {
    let mut body = match body {
        ClientBody::Incoming(b) => b,
        ClientBody::Read(p) => return Ok(p),
        ClientBody::Empty => return Ok(Payload::default()),
    };
    let in_file = r.conf.client_body_in_file_only != BodyInFile::Off;
    // Most requests have no body: nothing to read or wait for (a file for
    // `client_body_in_file_only` is made even so, as nginx makes one).
    if !in_file && body.end_if_empty() {
        return Ok(Payload::default());
    }
    body.limit(r.conf.client_max_body_size);
    let declared = declared_length(r)?;
    // client_body_in_file_only: all of it to a file, from the first byte.
    let room = if in_file {
        0
    } else {
        r.conf.client_body_buffer_size
    };
    // Memory for what the body declares, up to the buffer; past it, a file.
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(room) as usize);
    let mut spool: Option<Spool> = if in_file { Some(spool_file(r)?) } else { None };
    let mut total: u64 = 0;
    loop {
        let frame = match crate::net::clock::timeout(r.conf.client_body_timeout, body.frame()).await
        {
            Err(_) => return Err(body_timed_out(r)),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(body_failed(r, &e)),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(d) = frame.into_data() else {
            continue;
        };
        total += d.len() as u64;
        if let Some(status) = over_limit(r, total) {
            return Err(status);
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
    // client_body_in_file_only keeps the file (named by $request_body_file)
    // and logs it at notice, as nginx.
    let (keep, level) = match r.conf.client_body_in_file_only {
        BodyInFile::Off => (Keep::No, Level::Warn),
        BodyInFile::On => (Keep::After, Level::Notice),
        BodyInFile::Clean => (Keep::During, Level::Notice),
    };
    match Spool::create_kept(&r.conf.client_body_temp_path, keep) {
        Ok(f) => {
            crate::log_conn!(
                level,
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
/// replaces or must not pass; last, the body's framing: a length, or
/// chunks for a chunked body streamed as it arrives. True: the head asks the
/// upstream to close (`Connection: close`).
pub(super) fn upstream_head(
    r: &Req,
    uri: &str,
    version: Version,
    body: Framing,
    out: &mut Vec<u8>,
) -> bool {
    use crate::h1::write;
    let conf = &r.conf;
    let user_sets = |n: &[u8]| {
        conf.proxy_set_header
            .iter()
            .any(|(h, _)| h.as_bytes().eq_ignore_ascii_case(n))
    };
    // The bytes the URI stands for (`octets`): a URI part with variables
    // that put a Latin-1 byte of `$uri` in it sends that byte, as nginx.
    write::request_line(
        &upstream_method(r),
        &crate::octets::bytes(uri),
        version,
        out,
    );
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
        // The body's framing is the one sluice sends it with, whatever the
        // configuration says: two lengths would desync the upstream.
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            continue;
        }
        let v = r.eval(t);
        // An empty value means: do not send this header at all.
        if v.is_empty() || !valid_value(v.as_bytes()) {
            continue;
        }
        if name.eq_ignore_ascii_case("connection") && has_token(v.as_bytes(), "close") {
            close = true;
        }
        line(name.as_bytes(), &crate::octets::bytes(&v), out);
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
    match body {
        Framing::Length(n) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
    close
}

/// The method sent upstream: `proxy_method`'s when set (and valid), else
/// the client's.
pub(super) fn upstream_method(r: &Req) -> http::Method {
    r.conf
        .proxy_method
        .as_ref()
        .map(|t| r.eval(t))
        .filter(|m| !m.is_empty())
        .and_then(|m| http::Method::from_bytes(m.as_bytes()).ok())
        .unwrap_or_else(|| r.method.clone())
}

/// The URI an attempt asks the upstream for: the client's own, shared with
/// the request, or one made for this upstream.
#[derive(Debug, Clone)]
pub(crate) enum UpUri {
    Same(http::uri::PathAndQuery),
    Made(String),
}

impl Default for UpUri {
    fn default() -> UpUri {
        UpUri::Made(String::new())
    }
}

impl std::ops::Deref for UpUri {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            UpUri::Same(s) => s.as_str(),
            UpUri::Made(s) => s,
        }
    }
}

impl std::fmt::Display for UpUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// Everything an attempt needs that stays the same across attempts.
pub(super) struct Plan {
    pub(super) uri: UpUri,
    /// The request line and headers as every attempt writes them.
    pub(super) head: crate::h1::pool::Out,
    /// The head asks the upstream to close the connection.
    pub(super) asks_close: bool,
    /// The body, read whole before connecting (empty when it streams).
    pub(super) body: Payload,
    /// `proxy_request_buffering off`: the body, sent as it arrives after
    /// the head.
    pub(super) stream: Option<Streamed>,
}

impl Plan {
    /// The body bytes an attempt sent upstream.
    pub(super) fn sent(&self) -> u64 {
        self.body.len() + self.stream.as_ref().map_or(0, |s| s.sent)
    }

    /// The body goes as it arrives: once any of the request went, the
    /// request cannot go to another peer (nginx's rule).
    pub(super) fn streams(&self) -> bool {
        self.stream.is_some()
    }
}

/// How the client's body will go upstream as it arrives, when it can
/// (nginx's rule): `proxy_request_buffering off`, no `proxy_set_body`, the
/// body passed, and a chunked one only to an HTTP/1.1 upstream. None: read
/// it whole first. `incoming`: the request has the client's body (an
/// internal redirect has none).
fn streamed_framing(r: &Req, incoming: bool) -> Option<Framing> {
    let conf = &r.conf;
    // client_body_in_file_only reads the whole body to its file first.
    if conf.proxy_request_buffering
        || conf.client_body_in_file_only != crate::conf::loc::BodyInFile::Off
        || conf.proxy_set_body.is_some()
        || !conf.proxy_pass_request_body
        || !incoming
    {
        return None;
    }
    // HTTP/2 frames any body: one whose length nobody declared (chunked,
    // or from an HTTP/2 client) goes as it comes.
    if conf.proxy_http_version == 20 {
        return Some(
            match r
                .headers
                .known(Known::ContentLength)
                .and_then(|v| crate::h1::body::content_length(v.as_bytes()))
            {
                Some(n) => Framing::Length(n),
                None => Framing::Chunked,
            },
        );
    }
    // The connection refused any other framing before the handler ran.
    if r.headers.known(Known::TransferEncoding).is_some() {
        return (conf.proxy_http_version == 11).then_some(Framing::Chunked);
    }
    r.headers
        .known(Known::ContentLength)
        .and_then(|v| crate::h1::body::content_length(v.as_bytes()))
        .filter(|&n| n > 0)
        .map(Framing::Length)
}

/// The framing of a body read whole, `len` bytes: its length, also when
/// it is 0 if the client framed a body (`POST` with `Content-Length: 0`,
/// chunks that end at once, HTTP/2 DATA frames without bytes) or
/// `proxy_set_body` made one, as nginx sends it (an upstream may answer
/// 411 to a `POST` without a length); else none. A subrequest's or an
/// internal redirect's body is none, whatever the fields it copied say.
fn buffered_framing(r: &Req, len: u64, framed: bool) -> Framing {
    if len > 0 || (framed && r.conf.proxy_pass_request_body) || r.conf.proxy_set_body.is_some() {
        Framing::Length(len)
    } else {
        Framing::Empty
    }
}

/// The URI goes on the request line as it is: refused (400) if empty or
/// with a byte that would end the line's target (a space, a control byte).
fn sendable(plan: Plan) -> Result<Plan, u16> {
    if plan.uri.is_empty() || plan.uri.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(400);
    }
    Ok(plan)
}

/// What a request's tries may do (`proxy_next_upstream`, its `_tries` and
/// `_timeout`, `proxy_connect_race`), by its location and its method.
pub(super) fn next_upstream(r: &Req) -> Policy {
    let conf = &r.conf;
    Policy {
        mask: conf.proxy_next_upstream,
        tries: conf.proxy_next_upstream_tries,
        timeout: conf.proxy_next_upstream_timeout,
        race: conf.proxy_connect_race,
        non_idempotent: matches!(r.method.as_str(), "POST" | "LOCK" | "PATCH"),
    }
}

/// Reads the client's body and builds what every attempt sends, its URI
/// checked (`sendable`). Err: the status to answer with.
pub(super) async fn plan(r: &mut Req, pp: &ProxyPass, body: ClientBody) -> Result<Plan, u16> {
    r.proxy_host = pp.proxy_host.clone();
    r.proxy_port = pp.proxy_port;
    let uri = upstream_uri(r, pp);
    let version = if r.conf.proxy_http_version == 10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let streamed = streamed_framing(r, matches!(body, ClientBody::Incoming(_)));
    let framed = match &body {
        ClientBody::Incoming(b) => b.framed(),
        ClientBody::Read(_) => {
            r.headers.known(Known::ContentLength).is_some()
                || r.headers.known(Known::TransferEncoding).is_some()
        }
        ClientBody::Empty => false,
    };
    let body = match (streamed, body) {
        (Some(framing), ClientBody::Incoming(incoming)) => {
            // A declared length over the limit is refused before
            // connecting; a chunked body is stopped when it grows past it.
            declared_length(r)?;
            incoming.limit(r.conf.client_max_body_size);
            let mut head = crate::h1::pool::Out::take();
            let asks_close = upstream_head(r, &uri, version, framing, &mut head);
            return sendable(Plan {
                uri,
                head,
                asks_close,
                body: Payload::default(),
                stream: Some(Streamed::new(incoming, framing == Framing::Chunked)),
            });
        }
        (_, body) => body,
    };
    let mut payload = if r.conf.proxy_pass_request_body {
        read_body(r, body).await?
    } else {
        drop(body);
        Payload::default()
    };
    match &payload {
        Payload::Mem(b) => r.request_body = Some(b.clone()),
        Payload::File(f) if r.conf.client_body_in_file_only != BodyInFile::Off => {
            r.request_body_file = Some(f.path.display().to_string());
        }
        Payload::File(_) => {}
    }
    if let Some(t) = &r.conf.proxy_set_body {
        payload = Payload::Mem(Bytes::from(r.eval(t)));
    }
    let mut head = crate::h1::pool::Out::take();
    let framing = buffered_framing(r, payload.len(), framed);
    let asks_close = upstream_head(r, &uri, version, framing, &mut head);
    sendable(Plan {
        uri,
        head,
        asks_close,
        body: payload,
        stream: None,
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
            // Framing stays sluice's: one length, the body's.
            (
                "Content-Length".into(),
                crate::conf::vars::compile("99").unwrap(),
            ),
        ];
        r.conf = std::sync::Arc::new(conf);
        let mut out = Vec::new();
        let close = upstream_head(&r, "/u?a=1", Version::HTTP_11, Framing::Length(5), &mut out);
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
        assert!(upstream_head(
            &r,
            "/",
            Version::HTTP_10,
            Framing::Empty,
            &mut out
        ));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "GET / HTTP/1.0\r\nHost: backend\r\nConnection: close\r\nX-Case: 1\r\n\
             x-case: 2\r\nX-Real-IP: spoofed\r\n\r\n"
        );
    }

    /// A body read whole goes with its length, 0 too when the client
    /// framed one (nginx's `Content-Length: 0` on an empty `POST`); a
    /// request without a body goes without.
    #[test]
    fn an_empty_framed_body_has_a_length() {
        let mut r = super::super::vars::tests::req();
        assert_eq!(buffered_framing(&r, 0, false), Framing::Empty);
        assert_eq!(buffered_framing(&r, 3, false), Framing::Length(3));
        assert_eq!(buffered_framing(&r, 0, true), Framing::Length(0));
        let mut conf = (*r.conf).clone();
        conf.proxy_pass_request_body = false;
        r.conf = std::sync::Arc::new(conf.clone());
        assert_eq!(
            buffered_framing(&r, 0, true),
            Framing::Empty,
            "body not passed"
        );
        conf.proxy_set_body = Some(crate::conf::vars::compile("").expect("compiles"));
        r.conf = std::sync::Arc::new(conf);
        assert_eq!(
            buffered_framing(&r, 0, false),
            Framing::Length(0),
            "proxy_set_body"
        );
        let mut out = Vec::new();
        upstream_head(&r, "/", Version::HTTP_11, Framing::Length(0), &mut out);
        assert!(String::from_utf8_lossy(&out).ends_with("Content-Length: 0\r\n\r\n"));
    }

    /// A body streamed as it arrives keeps its framing: the client's
    /// length, or chunks (the client's own framing headers never pass).
    #[test]
    fn upstream_head_frames_a_streamed_body() {
        let mut r = super::super::vars::tests::req();
        r.proxy_host = "b".into();
        r.headers =
            crate::h1::head::Headers::from_pairs([("Transfer-Encoding", "chunked"), ("X-A", "1")]);
        let mut out = Vec::new();
        upstream_head(&r, "/", Version::HTTP_11, Framing::Chunked, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "GET / HTTP/1.1\r\nHost: b\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
    }

    /// nginx's rule for streaming: off, no proxy_set_body, the body passed,
    /// and chunked only to HTTP/1.1.
    #[test]
    fn which_bodies_stream() {
        let mut r = super::super::vars::tests::req();
        let set = |r: &mut Req, f: &dyn Fn(&mut crate::conf::loc::LocConf)| {
            let mut conf = (*r.conf).clone();
            f(&mut conf);
            r.conf = std::sync::Arc::new(conf);
        };
        r.headers = crate::h1::head::Headers::from_pairs([("Content-Length", "7")]);
        assert_eq!(streamed_framing(&r, true), None, "on: buffered");
        set(&mut r, &|c| c.proxy_request_buffering = false);
        assert_eq!(streamed_framing(&r, true), Some(Framing::Length(7)));
        assert_eq!(streamed_framing(&r, false), None);
        r.headers = crate::h1::head::Headers::from_pairs([("Content-Length", "0")]);
        assert_eq!(streamed_framing(&r, true), None, "nothing to stream");
        r.headers = crate::h1::head::Headers::from_pairs([("Transfer-Encoding", "chunked")]);
        set(&mut r, &|c| c.proxy_http_version = 11);
        assert_eq!(streamed_framing(&r, true), Some(Framing::Chunked));
        set(&mut r, &|c| c.proxy_http_version = 10);
        assert_eq!(streamed_framing(&r, true), None, "chunked to 1.0: buffered");
        set(&mut r, &|c| {
            c.proxy_http_version = 11;
            c.proxy_pass_request_body = false;
        });
        assert_eq!(streamed_framing(&r, true), None);
        set(&mut r, &|c| {
            c.proxy_pass_request_body = true;
            c.proxy_set_body = Some(crate::conf::vars::compile("x").unwrap());
        });
        assert_eq!(streamed_framing(&r, true), None);
    }

    #[test]
    fn uri_rules() {
        let mut r = super::super::vars::tests::req();
        let pp = |uri: Option<&str>, prefix: &str| ProxyPass {
            grpc: false,
            dynamic: false,
            ssl: false,
            upstream: 0,
            uri: uri.map(String::from),
            proxy_host: "b".into(),
            proxy_port: 80,
            location_prefix: prefix.into(),
        };
        r.request_uri = http::uri::PathAndQuery::from_static("/app/a%20b?x=1");
        r.uri = "/app/a b".into();
        r.args = Some("x=1".into());
        assert_eq!(&*upstream_uri(&r, &pp(None, "/app/")), "/app/a%20b?x=1");
        assert_eq!(&*upstream_uri(&r, &pp(Some("/"), "/app/")), "/a%20b?x=1");
        assert_eq!(
            &*upstream_uri(&r, &pp(Some("/v2/"), "/app/")),
            "/v2/a%20b?x=1"
        );
    }
}
