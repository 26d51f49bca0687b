//! One request through the pipeline: server and location picked, the handler
//! run (`dispatch`), the reply turned into the response (`finish`: special
//! statuses, `error_page`, internal redirects, `add_header`), the access log
//! attached. The connection it arrived on is `conn.rs`'s.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use crate::h1::head::{Headers, Known};

use crate::conf::model::{ListenAddr, Location, Return, Server};
use crate::conf::ssl::VerifyClient;
use crate::log::Level;
use crate::net::boxed::boxed;
use crate::net::tls::Verify;

use super::access::LoggedBody;
use super::conn::InFlight;
use super::response::Body;
use super::vars::{Asked, ConnInfo, Req};
use super::{
    ClientBody, CloseConnection, Reply, Shared, access, dynamic, framing, proxy, realip, response,
    router, script, static_files, status, uri,
};

/// A request as read from the connection, for the pipeline.
pub(super) struct Incoming {
    pub method: http::Method,
    pub uri: http::Uri,
    pub version: http::Version,
    pub headers: Headers,
    pub body: super::inbound::ReqBody,
    /// The client side of a protocol switch, for a request with `Upgrade`.
    pub upgrade: Option<super::OnUpgrade>,
    /// What the connection's protocol found wrong in the request that the
    /// pipeline answers (an HTTP/2 `:scheme` or `:path` nginx refuses).
    pub refused: Option<framing::Problem>,
}

/// `Host` (or the absolute URI's authority) lowercased, without port or final dot.
/// Err for a host nginx refuses with 400: the request line's, or the
/// `Host` field's even when the line names a host (nginx reads both).
fn request_host(req: &Incoming) -> Result<Option<String>, ()> {
    let field = match req.headers.known(Known::Host) {
        // Bytes above 0x7F pass, as in nginx, when they are UTF-8.
        Some(h) => Some(host_of(std::str::from_utf8(h.as_bytes()).map_err(|_| ())?)?),
        None => None,
    };
    let host = match req.uri.authority() {
        // User information in an absolute target ("http://u@host/") is
        // not a host nginx's request line parser reads.
        Some(a) if a.as_str().contains('@') => return Err(()),
        // HTTP/2's `:authority` is a Host, not a request line's.
        Some(a) if req.version != http::Version::HTTP_2 && !line_authority(a.as_str()) => {
            return Err(());
        }
        Some(a) => host_of(a.host())?,
        None => match field {
            Some(h) => h,
            None => return Ok(None),
        },
    };
    Ok(Some(host.to_ascii_lowercase()))
}

/// Whether an absolute target's authority is one nginx's request line
/// parser reads: letters, digits, `.` and `-`, or an IP literal in
/// brackets, then a port of digits only (`http://a:b/` and
/// `http://examp;e.com/` are refused).
fn line_authority(a: &str) -> bool {
    let (host, port) = match a.strip_prefix('[') {
        Some(rest) => match rest.find(']') {
            Some(end) => {
                let literal = &rest[..end];
                let ok = literal
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b":-._~!$&'()*+,;=".contains(&b));
                if !ok {
                    return false;
                }
                (&a[..end + 2], &a[end + 2..])
            }
            None => return false,
        },
        None => {
            let at = a.find(':').unwrap_or(a.len());
            let host = &a[..at];
            if !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                return false;
            }
            (host, &a[at..])
        }
    };
    !host.is_empty()
        && (port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())))
}

/// The host part of a `Host` value (or an authority's host), without port
/// or final dot; Err where nginx refuses it (what nginx refuses anywhere in
/// the value, the port too: `a:1 2`).
fn host_of(raw: &str) -> Result<&str, ()> {
    if refused_in_host(raw.as_bytes()) {
        return Err(());
    }
    let host = if raw.starts_with('[') {
        // An unclosed literal is the whole value, as nginx's validation
        // leaves it.
        match raw.find(']') {
            Some(end) => &raw[..=end],
            None => raw,
        }
    } else {
        raw.split(':').next().unwrap_or("")
    };
    // The host is a part of `raw`, checked whole above.
    if host.starts_with('.') {
        return Err(());
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    // A Host that names nothing ("", ".", ":80") is refused, as nginx does.
    if host.is_empty() {
        return Err(());
    }
    Ok(host)
}

/// A slash, a backslash, two dots in a row, a space or a control
/// character: what nginx refuses in a host (spaces and control characters
/// since nginx 1.21.1). One pass over the bytes, a table lookup each
/// (`contains("..")` set up a substring search for every request).
fn refused_in_host(host: &[u8]) -> bool {
    const REFUSED: [bool; 256] = {
        let mut t = [false; 256];
        let mut b = 0;
        while b <= b' ' {
            t[b as usize] = true;
            b += 1;
        }
        t[0x7f] = true;
        t[b'/' as usize] = true;
        t[b'\\' as usize] = true;
        t
    };
    let mut dot = false;
    for &b in host {
        if REFUSED[usize::from(b)] || (dot && b == b'.') {
            return true;
        }
        dot = b == b'.';
    }
    false
}

/// `ssl_verify_client` of the request's server: 495 for a certificate that
/// did not verify (unless `optional_no_ca` lets its unknown issuer
/// through), 496 for none when one is required; logged as nginx does.
fn client_cert_problem(r: &Req, mode: VerifyClient) -> Option<u16> {
    let t = r.conn.tls()?;
    if mode == VerifyClient::Off {
        return None;
    }
    match &t.verify {
        Verify::Failed(code, why)
            if !(mode == VerifyClient::OptionalNoCa && t.verify.no_ca_only()) =>
        {
            crate::log_conn!(
                Level::Info,
                r.conn.number,
                "client SSL certificate verify error: ({}:{}) while reading client request headers{}",
                code,
                why,
                r.log_context(None)
            );
            Some(495)
        }
        Verify::None if mode == VerifyClient::On && t.client_cert.is_none() => {
            crate::log_conn!(
                Level::Info,
                r.conn.number,
                "client sent no required SSL certificate while reading client request headers{}",
                r.log_context(None)
            );
            Some(496)
        }
        _ => None,
    }
}

/// nginx's check of a `Host` that names another server than the SNI name
/// the handshake chose its server by: when the request's server verifies
/// client certificates, the certificate (or its absence) was judged by the
/// other server's settings, so the request is refused with 421. `host`:
/// lowercased, without port or final dot.
fn misdirected(r: &Req, host: Option<&str>, server: &Server) -> bool {
    if server.ssl.verify_client == VerifyClient::Off {
        return false;
    }
    let (Some(sni), Some(host)) = (r.conn.tls().and_then(|t| t.server_name.as_deref()), host)
    else {
        return false;
    };
    let sni = sni.strip_suffix('.').unwrap_or(sni);
    !sni.eq_ignore_ascii_case(host)
}

/// Serves one request: picks server and location, runs the handler, and
/// wraps the response so that the access log is written when it is sent.
pub(super) async fn handle(
    shared: &Arc<Shared>,
    info: Arc<ConnInfo>,
    listen: &ListenAddr,
    req: Incoming,
    nth: u64,
    flight: InFlight,
) -> Result<Response<LoggedBody>, CloseConnection> {
    let Some(http) = shared.cfg.http.as_ref() else {
        return Err(CloseConnection);
    };
    let host = request_host(&req);
    // Without a Host, the server the handshake chose by SNI (nginx's
    // connection config, set by its servername callback).
    let sni = match (&host, info.tls()) {
        (Ok(None), Some(t)) => t
            .server_name
            .as_deref()
            .map(|n| n.strip_suffix('.').unwrap_or(n).to_ascii_lowercase()),
        _ => None,
    };
    let Some(server) = shared.router.server(
        http,
        listen,
        info.local,
        host.as_ref()
            .ok()
            .and_then(|h| h.as_deref())
            .or(sni.as_deref()),
    ) else {
        return Err(CloseConnection);
    };
    let Incoming {
        method,
        uri: req_uri,
        version,
        headers,
        body,
        upgrade,
        refused: bad_pseudo,
    } = req;
    // nginx parses the URI with the settings of the server the address
    // (and SNI) chose, before the Host header picks one: merge_slashes is
    // that server's.
    let merge = shared
        .router
        .server(
            http,
            listen,
            info.local,
            info.tls()
                .and_then(|t| t.server_name.as_deref())
                .map(|n| n.strip_suffix('.').unwrap_or(n).to_ascii_lowercase())
                .as_deref(),
        )
        .is_none_or(|s| s.conf.merge_slashes);
    let normalized = uri::normalize(req_uri.path(), merge);
    let location = normalized
        .as_deref()
        .and_then(|u| router::find_location(&server.locations, u));
    let conf = location
        .map(|l| l.conf.clone())
        .unwrap_or_else(|| server.conf.clone());
    // A target the parser refused (answered 400 below).
    let bad_target = normalized.is_none();
    // The host moves into the request (its `$host`).
    let host_valid = host.is_ok();
    let host_given = matches!(host, Ok(Some(_)));
    let mut unfinished = Unfinished(Some(Box::write(
        Box::new_uninit(),
        Req::new(Asked {
            conn: info,
            method,
            version,
            request_uri: req_uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            uri: normalized.unwrap_or_else(|| req_uri.path().to_string()),
            // An empty query ("/a?") is no arguments, as nginx's `$args` and
            // `$is_args` have it.
            args: req_uri
                .query()
                .filter(|q| !q.is_empty())
                .map(str::to_string),
            headers,
            host: match host {
                Ok(Some(h)) => h,
                _ => server.primary_name.to_string(),
            },
            host_given,
            server_name: server.primary_name.clone(),
            conf,
            conn_requests: nth,
        }),
    )));
    let Some(r) = unfinished.0.as_mut() else {
        return Err(CloseConnection);
    };
    r.request_length = r.headers.wire_len() as u64;
    // A regex server name's captures (nginx's `server_name ~^(?<sub>.+)\.`).
    if server.has_regex_name() {
        let name = if host_given {
            Some(r.host.clone())
        } else {
            sni
        };
        if let Some(name) = name {
            if let Some(re) = router::chosen_by_regex(server, &name) {
                if let Some(c) = re.captures(&name) {
                    r.set_captures(re, &c);
                }
            }
        }
    }
    flight.keepalive(r.conf.keepalive_timeout);
    let mut closing = false;
    // A target the request line parser refuses is nginx's first finding
    // (a 400 before any header is read), whatever the headers hold.
    // A host nginx refuses it finds while it reads the head's fields,
    // before the checks it makes once the head is whole; only the request
    // line's findings come before it.
    let bad = if bad_target {
        None
    } else {
        bad_pseudo
            .filter(|p| p.in_line || host_valid)
            .or_else(|| framing::request_problem(r, host_valid).filter(|p| p.in_line || host_valid))
    };
    let reply = if let Some(framing::Problem { code, why, in_line }) = bad {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "{} while reading client request {}{}",
            why,
            if in_line { "line" } else { "headers" },
            r.log_context(None)
        );
        // A request nginx refuses while reading its head (TRACE's 405 too)
        // also ends its connection: keep-alive is not yet decided then.
        closing = true;
        Ok(Reply::Status(code))
    } else if !host_valid {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "client sent invalid host header while reading client request headers{}",
            r.log_context(None)
        );
        // A 400 ends the connection, as nginx's does.
        closing = true;
        Ok(Reply::Status(400))
    } else if bad_target {
        // A target nginx's request line parser refuses (CONNECT's
        // authority form too): 400, and the connection ends.
        closing = true;
        Ok(Reply::Status(400))
    } else if matches!(r.conn.tls, super::vars::ConnTls::Plain) {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "client sent plain HTTP request to HTTPS port while reading client request headers{}",
            r.log_context(None)
        );
        closing = true;
        Ok(Reply::Status(497))
    } else if misdirected(r, r.host_given.then_some(r.host.as_str()), server) {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "client attempted to request the server name different from the one that was negotiated while reading client request headers{}",
            r.log_context(None)
        );
        closing = true;
        Ok(Reply::Status(421))
    } else if let Some(code) = client_cert_problem(r, server.ssl.verify_client) {
        closing = true;
        Ok(Reply::Status(code))
    } else {
        dispatch(shared, r, server, None, ClientBody::Incoming(body), upgrade).await
    };
    let resp = match reply {
        Ok(reply) => finish(shared, r, server, reply).await,
        Err(e) => Err(e),
    };
    let mut resp = match resp {
        Ok(resp) => resp,
        Err(close) => {
            // 444: logged, then the connection closes without a response.
            r.status = 444;
            access::write(r);
            unfinished.0 = None;
            return Err(close);
        }
    };
    // Client keep-alive limits: `keepalive_timeout 0` and `keepalive_requests`.
    if closing
        || shared.draining.get().is_some()
        || r.conf.keepalive_timeout.is_zero()
        || nth >= r.conf.keepalive_requests
    {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::header::HeaderValue::from_static("close"),
        );
    } else if let Some(secs) = r.conf.keepalive_header {
        if let Ok(v) = http::header::HeaderValue::from_str(&format!("timeout={secs}")) {
            resp.headers_mut().insert("keep-alive", v);
        }
    }
    r.status = resp.status().as_u16();
    // Only an access log reads $bytes_sent and $sent_http_NAME.
    let mut head_len = None;
    if !r.conf.access_log.is_empty() {
        r.bytes_sent = header_bytes(resp.headers(), r);
        let h = access::HeadLen::default();
        resp.extensions_mut().insert(h.clone());
        head_len = Some(h);
        if access::reads(&r.conf.access_log, |f| f.sent_http) {
            r.sent_headers = Some(resp.headers().clone());
        }
    }
    let (parts, mut body) = resp.into_parts();
    if let Some(mut b) = super::rate::client_bucket(r) {
        // nginx limits what the connection sent (c->sent), the head
        // included: the head's bytes use the bucket before the body's.
        b.used(header_bytes(&parts.headers, r));
        body = http_body_util::BodyExt::boxed(super::rate::Limited::new(body, b));
    }
    let Some(r) = unfinished.0.take() else {
        return Err(CloseConnection);
    };
    Ok(Response::from_parts(
        parts,
        LoggedBody::new(body, r, flight, head_len),
    ))
}

/// A request being handled: if its handling is dropped before a response
/// (the client went away), its access log line is written with nginx's
/// 499.
///
/// The request is boxed from the start, made in its box (`Box::write`, as
/// `net::boxed` makes futures): it is some 860 bytes, which the handler's
/// future would hold and then copy into the response body's box.
struct Unfinished(Option<Box<Req>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(mut r) = self.0.take() {
            r.status = 499;
            super::proxy::abandoned(&r);
            access::write(&r);
        }
    }
}

/// About what the status line and headers take on the wire, for
/// `$bytes_sent`: the map's lines and the upstream's as received.
fn header_bytes(h: &http::HeaderMap, r: &Req) -> u64 {
    let map: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    let lines = r.as_received.as_ref().map_or(0, |a| a.wire_len());
    (17 + map + lines + 2) as u64
}

/// nginx's 301 to the URI with its "/" added (`router::auto_redirect`),
/// made with the settings of the location that asked for it, as nginx
/// (its `absolute_redirect` and kin).
fn auto_redirect(r: &mut Req, by: &Location) -> Reply {
    r.conf = by.conf.clone();
    let mut target = format!("{}/", r.uri);
    if let Some(a) = r.args.as_deref().filter(|a| !a.is_empty()) {
        target.push('?');
        target.push_str(a);
    }
    let target = script::absolute(r, &target);
    Reply::Full(super::response::redirect(
        301,
        &target,
        r.conf.server_tokens,
    ))
}

pub(super) async fn dispatch(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    named: Option<&Location>,
    body: ClientBody,
    upgrade: Option<super::OnUpgrade>,
) -> Result<Reply, CloseConnection> {
    // realip runs first, with the server's settings (nginx's post-read phase).
    let location_conf = std::mem::replace(&mut r.conf, server.conf.clone());
    realip::apply(r);
    r.conf = location_conf;
    // The server's rewrite directives run before a location is chosen.
    if named.is_none() {
        if let script::Flow::Done(reply) = script::run(&server.script, r) {
            return reply;
        }
    }
    if named.is_none() {
        if let Some(by) = router::auto_redirect(&server.locations, &r.uri) {
            return Ok(auto_redirect(r, by));
        }
    }
    let mut location = named.or_else(|| router::find_location(&server.locations, &r.uri));
    let mut searches = 0;
    loop {
        loop {
            r.conf = location
                .map(|l| l.conf.clone())
                .unwrap_or_else(|| server.conf.clone());
            // A location chosen (again): no `if` of another has held yet.
            r.if_pass = None;
            let Some(l) = location else { break };
            // A regex location's captures, for `$1` and named ones.
            if let Some(re) = &l.regex {
                let uri = r.uri.clone();
                if let Some(c) = re.captures(&uri) {
                    r.set_captures(re, &c);
                }
            }
            // Only internal redirects and rewrites reach an `internal` one.
            if l.internal && !r.uri_changed {
                return Ok(Reply::Status(404));
            }
            // A method `limit_except` restricts is handled with the
            // block's settings, which the rewrite directives (`return`,
            // `rewrite`, `set`, `if`) are not inherited into: they do not
            // run for it, and the access phase comes next (nginx).
            let restricted = r
                .conf
                .limit_except
                .as_ref()
                .is_some_and(|le| le.restricts(r.method.as_str()));
            let flow = if restricted {
                script::Flow::Next
            } else {
                script::run(&l.script, r)
            };
            match flow {
                script::Flow::Done(reply) => return reply,
                script::Flow::Last => {
                    if let Some(reply) = redirect_cycle(r, &mut searches, "processing") {
                        return Ok(reply);
                    }
                    if let Some(by) = router::auto_redirect(&server.locations, &r.uri) {
                        return Ok(auto_redirect(r, by));
                    }
                    location = router::find_location(&server.locations, &r.uri);
                }
                script::Flow::Next | script::Flow::Break => break,
            }
        }
        // Else with the location's (nginx's preaccess phase).
        realip::apply(r);
        // limit_req, then limit_conn (a delayed request holds no connection
        // while it waits), as nginx runs its preaccess handlers; once per
        // request, however often try_files sends it round.
        // A subrequest has neither (nginx runs them for the main request).
        // The phases that may wait are boxed and entered only when
        // configured: their state stays out of every request's future.
        if !r.subrequest {
            if !r.conf.limit_req.is_empty() {
                if let Some(code) = Box::pin(super::limit::limit_req(shared, r)).await {
                    drop(body);
                    return Ok(Reply::Status(code));
                }
            }
            if let Some(code) = super::limit::limit_conn(shared, r) {
                drop(body);
                return Ok(Reply::Status(code));
            }
            // allow/deny and auth_basic (nginx's access phase), again for
            // the location an internal redirect leads to; then auth_request.
            // limit_except: a method the block does not list is checked
            // with the block's rules (nginx's limit_except location).
            let location_conf = limited(r).map(|c| std::mem::replace(&mut r.conf, c));
            let refused = if !r.conf.access_rules.is_empty() || r.conf.auth_basic.is_some() {
                Box::pin(super::access_phase::check(r)).await
            } else {
                None
            };
            if let Some(c) = location_conf {
                r.conf = c;
            }
            if let Some(code) = refused {
                drop(body);
                auth_delay(r, code).await;
                return Ok(Reply::Status(code));
            }
            if let Some(uri) = r.conf.auth_request.clone() {
                if let Some(code) = Box::pin(auth_request(shared, r, server, &uri)).await {
                    drop(body);
                    auth_delay(r, code).await;
                    return Ok(Reply::Status(code));
                }
            }
        }
        // try_files (nginx's precontent phase): the first file that exists
        // becomes the URI this location serves; else the last argument.
        let tried = match location {
            Some(l) => l.try_files.as_deref(),
            None => server.try_files.as_deref(),
        };
        let Some(tf) = tried else { break };
        match super::try_files::run(r, tf) {
            super::try_files::Tried::Found => break,
            super::try_files::Tried::Code(code) => return Ok(Reply::Status(code)),
            super::try_files::Tried::Redirect(target) => {
                if let Some(reply) = redirect_cycle(r, &mut searches, "internally redirecting to") {
                    return Ok(reply);
                }
                // The method and the body stay, as nginx's internal redirect
                // keeps them.
                // A URI starts over at the server's rewrite directives, as
                // nginx's internal redirect does; a named location does not.
                location = match redirect_to(r, server, &target) {
                    Ok(Some(named)) => Some(named),
                    Ok(None) => {
                        if let script::Flow::Done(reply) = script::run(&server.script, r) {
                            return reply;
                        }
                        router::find_location(&server.locations, &r.uri)
                    }
                    Err(()) => return Ok(Reply::Status(500)),
                };
            }
        }
    }
    // mirror (nginx's precontent phase), once for the client's request.
    let mut body = body;
    if !r.subrequest && !r.conf.mirror.is_empty() && matches!(body, ClientBody::Incoming(_)) {
        body = match super::mirror::start(shared, r, server, body).await {
            Ok(b) => b,
            Err(code) => return Ok(Reply::Status(code)),
        };
    }
    if let Some(l) = location {
        match l.handler {
            Some(crate::conf::model::Handler::Api { write })
                if r.method != http::Method::GET && r.method != http::Method::HEAD =>
            {
                return Ok(Box::pin(super::api_write::request(
                    r,
                    &l.uri,
                    &shared.upstreams,
                    &shared.stream_upstreams,
                    write,
                    body,
                    shared.saved.as_deref(),
                ))
                .await);
            }
            Some(crate::conf::model::Handler::Api { .. }) => {
                drop(body);
                return Ok(status::api(
                    r,
                    &l.uri,
                    &shared.upstreams,
                    &shared.stream_upstreams,
                    shared.stats.as_deref(),
                    shared.generation,
                ));
            }
            Some(crate::conf::model::Handler::StubStatus) => {
                drop(body);
                return Ok(status::stub_status(r, shared.stats.as_deref()));
            }
            Some(crate::conf::model::Handler::Metrics) => {
                drop(body);
                let main = &shared.cfg.main;
                let process = super::metrics::Process {
                    workers: if main.master_process {
                        main.worker_processes
                    } else {
                        1
                    },
                    generation: shared.generation,
                    upgrades: crate::process::upgrades(),
                    master: if main.master_process {
                        nix::unistd::getppid().as_raw()
                    } else {
                        std::process::id() as i32
                    },
                };
                return Ok(super::metrics::serve(
                    r,
                    &shared.upstreams,
                    &shared.stream_upstreams,
                    shared.stats.as_deref(),
                    &process,
                ));
            }
            None => {}
        }
        // An `if` with a `proxy_pass` of its own that held: its pass.
        let if_pass = r.if_pass.clone();
        let l = if_pass.as_deref().unwrap_or(l);
        // A subrequest shares the connection: its location's setting is
        // not the request's.
        if (l.proxy_pass_var.is_some() || l.proxy_pass.is_some()) && !r.subrequest {
            r.conn.ignore_abort.store(
                r.conf.proxy_ignore_client_abort,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        if let Some(t) = &l.proxy_pass_var {
            let id = l as *const Location as usize;
            return Ok(boxed(|| dynamic::run(r, t, id, body, upgrade, shared)).await);
        }
        if let Some(pp) = &l.proxy_pass {
            let Some(ups) = shared.upstreams.get(pp.upstream) else {
                return Ok(Reply::Status(500));
            };
            if r.conf.proxy_http_version == 20 {
                return Ok(boxed(|| super::proxy_h2::run(r, ups.clone(), pp, body, shared)).await);
            }
            let id = l as *const Location as usize;
            return Ok(proxy::run(r, ups.clone(), pp, id, body, upgrade, shared).await);
        }
    }
    drop(body);
    Ok(static_files::serve(r).await)
}

/// A subrequest of `r` (nginx's `ngx_http_subrequest`): the request's
/// connection, URI, arguments, headers, variables and body, with `method`;
/// no access phase runs for it and it writes no access log line.
pub(super) fn subrequest(r: &Req, method: http::Method) -> Req {
    let mut sub = Req::new(Asked {
        conn: r.conn.clone(),
        method,
        version: r.version,
        request_uri: r.request_uri.clone(),
        uri: r.uri.clone(),
        args: r.args.clone(),
        headers: r.headers.clone(),
        host: r.host.clone(),
        host_given: r.host_given,
        server_name: r.server_name.clone(),
        conf: r.conf.clone(),
        conn_requests: r.conn_requests,
    });
    sub.vars = r.vars.clone();
    sub.realip = r.realip;
    sub.request_id = r.request_id.clone();
    sub.request_body = r.request_body.clone();
    sub.subrequest = true;
    sub
}

/// `auth_request`: a GET subrequest to `uri` with the request's headers
/// and no body, answered in full (its body dropped). 2xx lets the request
/// on; 401 (with the subrequest's `WWW-Authenticate`) and 403 are the
/// answer; any other status is logged and 500. `auth_request_set` takes
/// its values from the subrequest whatever it answered, as nginx's.
async fn auth_request(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    uri: &str,
) -> Option<u16> {
    let mut sub = subrequest(r, http::Method::GET);
    let status = match redirect_to(&mut sub, server, uri) {
        Err(()) => 500,
        Ok(named) => {
            let reply =
                boxed(|| dispatch(shared, &mut sub, server, named, ClientBody::Empty, None)).await;
            let resp = match reply {
                Ok(reply) => Box::pin(finish(shared, &mut sub, server, reply)).await,
                Err(e) => Err(e),
            };
            match resp {
                Ok(resp) => {
                    if let Some(v) = resp
                        .headers()
                        .get(http::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                    {
                        r.www_authenticate = Some(v.to_string());
                    }
                    resp.status().as_u16()
                }
                Err(CloseConnection) => 500,
            }
        }
    };
    let conf = r.conf.clone();
    for (name, t) in conf.auth_request_set.iter() {
        let v = sub.eval(t);
        r.set_var(name, v);
    }
    match status {
        200..=299 => None,
        401 | 403 => Some(status),
        _ => {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "auth request unexpected status: {}{}",
                status,
                r.log_context(None)
            );
            Some(500)
        }
    }
}

/// Statuses `add_header` applies to without `always`, as nginx's.
const ADD_HEADER_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// Turns a reply into the response: a special status goes through
/// `error_page` (an internal redirect, a named location or a redirect) or
/// gets its built-in page; then `add_header` applies.
pub(super) async fn finish(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    reply: Reply,
) -> Result<Response<Body>, CloseConnection> {
    let tokens = r.conf.server_tokens;
    let mut reply = reply;
    let mut redirects = 0;
    let mut resp = loop {
        match reply {
            Reply::Full(resp) => break resp,
            Reply::Status(code) => {
                // Lines as received belong to a proxied response only.
                r.as_received = None;
                let page = r
                    .conf
                    .error_page
                    .iter()
                    .find(|p| p.codes.contains(&code))
                    .cloned();
                break match page {
                    None => response::status_page(code, tokens),
                    Some(page) => Box::pin(error_page(shared, r, server, code, &page)).await?,
                };
            }
            Reply::Internal(target) => {
                redirects += 1;
                if redirects > 10 {
                    crate::log_conn!(
                        Level::Error,
                        r.conn.number,
                        "rewrite or internal redirection cycle while internally redirecting to \"{}\"{}",
                        target,
                        r.log_context(None)
                    );
                    break response::status_page(500, tokens);
                }
                reply = internal_redirect(shared, r, server, &target).await?;
            }
        }
    };
    // A response with an upstream attempt behind it is a proxied one.
    let proxied = !r
        .upstream
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .attempts
        .is_empty();
    // nginx's not-modified filter, on a 200 of sluice's own (a proxied
    // one passes as it came, as nginx's does without a cache).
    if resp.status() == http::StatusCode::OK
        && !r.subrequest
        && !proxied
        && super::conditional::asked(r)
    {
        not_modified(r, &mut resp, tokens);
    }
    let status = resp.status().as_u16();
    // nginx's header filter sends a time of sluice's own only with 200,
    // 206 and 304, and its range filter says "Accept-Ranges" only on a
    // 200 (an error_page's file is a 404 with neither).
    if !proxied && !matches!(status, 200 | 206 | 304) {
        resp.headers_mut().remove(http::header::LAST_MODIFIED);
        resp.headers_mut().remove(http::header::ACCEPT_RANGES);
    }
    if status == 401 {
        if let Some(v) = r
            .www_authenticate
            .as_deref()
            .and_then(|v| http::header::HeaderValue::from_str(v).ok())
        {
            resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
        }
    }
    super::expires::apply(r, &mut resp);
    for h in &r.conf.add_header {
        if !h.always && !ADD_HEADER_STATUSES.contains(&status) {
            continue;
        }
        let v = r.eval(&h.value);
        // Last-Modified and ETag replace the response's own (an empty
        // value removes it), as nginx's headers filter sets them.
        let replaces =
            h.name.eq_ignore_ascii_case("last-modified") || h.name.eq_ignore_ascii_case("etag");
        if replaces {
            resp.headers_mut().remove(h.name.as_str());
        }
        if v.is_empty() {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::header::HeaderName::from_bytes(h.name.as_bytes()),
            http::header::HeaderValue::from_bytes(&crate::octets::bytes(&v)),
        ) {
            resp.headers_mut().append(n, v);
            // Written as configured, as nginx writes it.
            let names = resp.extensions_mut();
            match names.get_mut::<crate::h1::head::Names>() {
                Some(m) => m.0.insert(0, Bytes::from(h.name.clone())),
                None => {
                    names.insert(crate::h1::head::Names(vec![Bytes::from(h.name.clone())]));
                }
            }
        }
    }
    // sub_filter, then charset, then gzip: nginx's filter order.
    let resp = super::sub_filter::filter(r, resp);
    // Charset before gzip, as nginx's filters run (`override_charset`
    // for a proxied response).
    let resp = super::charset::filter(r, resp, proxied);
    Ok(super::gzip::filter(r, resp))
}

/// The request's preconditions against a 200 of sluice's own: 412 (the
/// status page), 304 (no body, no type, length or ranges), or as it is.
fn not_modified(r: &Req, resp: &mut Response<Body>, tokens: bool) {
    use super::conditional::{Verdict, http_time, verdict};
    use http::header::{ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_TYPE, ETAG, LAST_MODIFIED};
    let h = resp.headers();
    let modified = h
        .get(LAST_MODIFIED)
        .and_then(|v| v.to_str().ok())
        .and_then(http_time);
    let etag = h.get(ETAG).and_then(|v| v.to_str().ok());
    match verdict(r, modified, etag) {
        Verdict::Send => {}
        Verdict::Failed => *resp = response::status_page(412, tokens),
        Verdict::NotModified => {
            set_status(resp, 304);
            let h = resp.headers_mut();
            for n in [CONTENT_LENGTH, CONTENT_TYPE, ACCEPT_RANGES] {
                h.remove(n);
            }
            *resp.body_mut() = response::full(Bytes::new());
        }
    }
}

/// Sets a response's status with nginx's reason phrase.
fn set_status(resp: &mut Response<Body>, code: u16) {
    if let Ok(s) = http::StatusCode::from_u16(code) {
        *resp.status_mut() = s;
    }
    resp.extensions_mut().remove::<crate::h1::head::Reason>();
}

async fn error_page(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    code: u16,
    page: &crate::conf::loc::ErrorPage,
) -> Result<Response<Body>, CloseConnection> {
    use crate::conf::loc::ErrorPageStatus;
    let tokens = r.conf.server_tokens;
    let (mut code, mut page) = (code, page.clone());
    let mut pages = 0;
    loop {
        let target = r.eval(&page.target);
        if !target.starts_with('/') && !target.starts_with('@') {
            let code = match page.status {
                ErrorPageStatus::Code(c @ (301 | 302 | 303 | 307 | 308)) => c,
                _ => 302,
            };
            return Ok(response::redirect(code, &target, tokens));
        }
        // The location that sent the error decides whether the target's
        // own error may use error_page again (nginx's
        // recursive_error_pages); nginx's budget of URI changes bounds it.
        let recursive = r.conf.recursive_error_pages;
        pages += 1;
        if pages > 10 {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "rewrite or internal redirection cycle while internally redirecting to \"{}\"{}",
                target,
                r.log_context(None)
            );
            return Ok(response::status_page(500, tokens));
        }
        // `$status` in the page's location: the code `=CODE` names, else the
        // error's, or none with `=` (nginx's err_status).
        r.status = match page.status {
            ErrorPageStatus::Keep => code,
            ErrorPageStatus::Code(c) => c,
            ErrorPageStatus::Target => 0,
        };
        let inner = internal_redirect(shared, r, server, &target).await?;
        let mut resp = match inner {
            Reply::Full(resp) => resp,
            Reply::Status(c) => {
                let again = recursive
                    .then(|| r.conf.error_page.iter().find(|p| p.codes.contains(&c)))
                    .flatten()
                    .cloned();
                if let Some(next) = again {
                    (code, page) = (c, next);
                    continue;
                }
                // The page failed (a missing file: 404): its own status
                // and page, as nginx answers, not the first error's code.
                return Ok(response::status_page(c, tokens));
            }
            Reply::Internal(_) => response::status_page(500, tokens),
        };
        match page.status {
            ErrorPageStatus::Keep => set_status(&mut resp, code),
            ErrorPageStatus::Code(c) => set_status(&mut resp, c),
            ErrorPageStatus::Target => {}
        }
        return Ok(resp);
    }
}

/// An internal redirect: GET (HEAD stays HEAD; a named location keeps the
/// method), the new URI (or a named location), the location chosen again,
/// its handler run without a body.
async fn internal_redirect(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    target: &str,
) -> Result<Reply, CloseConnection> {
    // A named location keeps the method, as nginx's does.
    if r.method != http::Method::HEAD && !target.starts_with('@') {
        r.method = http::Method::GET;
    }
    let Ok(named) = redirect_to(r, server, target) else {
        return Ok(Reply::Status(500));
    };
    boxed(|| dispatch(shared, r, server, named, ClientBody::Empty, None)).await
}

/// Points the request at an internal redirect's target: a named location
/// (Err when the server has none of that name, logged as nginx logs it) or
/// a URI with its own arguments (none when it has no `?`), whose location
/// the caller looks up.
pub(super) fn redirect_to<'s>(
    r: &mut Req,
    server: &'s Server,
    target: &str,
) -> Result<Option<&'s Location>, ()> {
    if target.starts_with('@') {
        return match router::named_location(server, target) {
            Some(l) => Ok(Some(l)),
            None => {
                crate::log_conn!(
                    Level::Error,
                    r.conn.number,
                    "could not find named location \"{}\"{}",
                    target,
                    r.log_context(None)
                );
                Err(())
            }
        };
    }
    let (path, args) = match target.split_once('?') {
        Some((p, a)) => (p.to_string(), Some(a.to_string()).filter(|a| !a.is_empty())),
        None => (target.to_string(), None),
    };
    r.uri = uri::normalize(&path, server.conf.merge_slashes).unwrap_or(path);
    r.args = args;
    r.uri_changed = true;
    Ok(None)
}

/// The settings the access phase uses for a method `limit_except` does not
/// list: the location's, with the block's rules where it has any.
fn limited(r: &Req) -> Option<Arc<crate::conf::loc::LocConf>> {
    let le = r.conf.limit_except.as_ref()?;
    if !le.restricts(r.method.as_str()) {
        return None;
    }
    let mut c = (*r.conf).clone();
    if let Some(a) = &le.access_rules {
        c.access_rules = a.clone();
    }
    if let Some(a) = &le.auth_basic {
        c.auth_basic = a.clone();
    }
    if let Some(a) = &le.auth_basic_user_file {
        c.auth_basic_user_file = a.clone();
    }
    Some(Arc::new(c))
}

/// `auth_delay`: a 401 of the access phase waits before it is sent, so
/// that its timing tells an attacker nothing (nginx 1.17.10).
async fn auth_delay(r: &Req, code: u16) {
    if code == 401 && !r.conf.auth_delay.is_zero() {
        crate::net::clock::sleep(r.conf.auth_delay).await;
    }
}

/// The cycle nginx stops after ten URI changes: logged, then 500.
fn redirect_cycle(r: &Req, searches: &mut u32, what: &str) -> Option<Reply> {
    *searches += 1;
    if *searches <= 10 {
        return None;
    }
    crate::log_conn!(
        Level::Error,
        r.conn.number,
        "rewrite or internal redirection cycle while {} \"{}\"{}",
        what,
        r.uri,
        r.log_context(None)
    );
    Some(Reply::Status(500))
}

pub(crate) fn do_return(ret: &Return, r: &mut Req) -> Result<Reply, CloseConnection> {
    if ret.code == 444 {
        return Err(CloseConnection);
    }
    // `$status` in the text is the code, as nginx sets it before the text
    // is made (an error page's code, set before, comes first).
    if r.status == 0 {
        r.status = ret.code;
    }
    let r = &*r;
    let tokens = r.conf.server_tokens;
    let text = ret.text.as_ref().map(|t| r.eval(t));
    match (ret.code, text) {
        // A redirect's status goes through error_page like any other (nginx
        // sends it as a special response); the page replaces it.
        (code @ (301 | 302 | 303 | 307 | 308), Some(_))
            if r.conf.error_page.iter().any(|p| p.codes.contains(&code)) =>
        {
            Ok(Reply::Status(code))
        }
        (301 | 302 | 303 | 307 | 308, Some(loc)) => {
            // absolute_redirect and its kin decide, as nginx's header filter.
            let loc = script::absolute(r, &loc);
            Ok(Reply::Full(response::redirect(ret.code, &loc, tokens)))
        }
        (code, Some(body)) => Ok(Reply::Full(response::build(
            code,
            Some(&r.conf.default_type),
            Bytes::from(crate::octets::into_bytes(body)),
            tokens,
        ))),
        // Without text, a code below 400 that has no page of nginx's
        // still has its type (`default_type`), as nginx sends it.
        (code @ (200..=203 | 205..=300 | 305 | 306 | 309..=399), None) => Ok(Reply::Full(
            response::build(code, Some(&r.conf.default_type), Bytes::new(), tokens),
        )),
        (code, None) => Ok(Reply::Status(code)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// An absolute target's authority as nginx's request line parser reads
    /// it; a Host refused for what its port holds too.
    #[test]
    fn authorities_and_hosts_as_nginx() {
        for ok in [
            "a",
            "a.b-c",
            "a:80",
            "a:",
            "[::1]",
            "[::1]:8080",
            "[v1.x!$&'()*+,;=]:1",
        ] {
            assert!(super::line_authority(ok), "{ok}");
        }
        for bad in [
            "",
            ":80",
            "a:b",
            "a:8 0",
            "examp;e.com",
            "a_b",
            "é",
            "[::1",
            "[::1]x",
            "[a b]",
        ] {
            assert!(!super::line_authority(bad), "{bad}");
        }
        assert_eq!(super::host_of("Example.com:80"), Ok("Example.com"));
        assert_eq!(super::host_of("\u{e9}.example"), Ok("\u{e9}.example"));
        for bad in ["a:1 2", "a:1\t", "a:1/2", "a:1..2", "", ".", ":80"] {
            assert_eq!(super::host_of(bad), Err(()), "{bad:?}");
        }
    }

    proptest! {
        // The one-pass test says what the separate searches say.
        #[test]
        fn refused_in_host_is_its_searches(h in "[a/.\\\\ \t\x01\x7fé]{0,12}") {
            let want = h.contains('/')
                || h.contains("..")
                || h.contains('\\')
                || h.bytes().any(|b| b <= b' ' || b == 0x7f);
            prop_assert_eq!(super::refused_in_host(h.as_bytes()), want);
        }
    }
}
