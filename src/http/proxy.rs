//! The proxy handler (`proxy_pass`): reads the client's body, picks a peer,
//! connects (or reuses a cached connection), forwards the request with nginx's
//! header rules, and on a `proxy_next_upstream` condition tries the next peer
//! within `proxy_next_upstream_tries` and `_timeout`. The response streams back;
//! its body returns the connection to the keep-alive cache when it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Version};
use hyper_util::rt::TokioIo;

use super::Io;
use super::framing::{Bad, upstream_framing};
use super::proxy_body::ProxyBody;
use super::response;
use super::vars::{Attempt, Req};
use super::{ClientBody, Reply};
use crate::conf::model::{Balancer, NextUpstream, PeerAddr, ProxyPass};
use crate::log::Level;
use crate::upstream::balancer::{Key, PickState};
use crate::upstream::body::{Payload, Spool, UpBody};
use crate::upstream::peers::now_ms;
use crate::upstream::race::{Ended, Race};
use crate::upstream::{Outcome, PeerId, Peers, Pooled, Released, Tried, UpstreamRt};

/// Why an attempt failed, as `proxy_next_upstream` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Error,
    Timeout,
    InvalidHeader,
}

impl Failure {
    fn bits(self) -> u32 {
        match self {
            Failure::Error => NextUpstream::ERROR,
            Failure::Timeout => NextUpstream::TIMEOUT,
            Failure::InvalidHeader => NextUpstream::INVALID_HEADER,
        }
    }
}

/// The status nginx answers with when it gives up on a condition.
fn final_status(bits: u32) -> u16 {
    match bits {
        NextUpstream::TIMEOUT | NextUpstream::HTTP_504 => 504,
        NextUpstream::HTTP_500 => 500,
        NextUpstream::HTTP_503 => 503,
        NextUpstream::HTTP_403 => 403,
        NextUpstream::HTTP_404 => 404,
        NextUpstream::HTTP_429 => 429,
        _ => 502,
    }
}

/// nginx's next-upstream decision: another try is allowed when tries are left,
/// the condition is listed, a non-idempotent request that reached the upstream
/// has `non_idempotent`, and `proxy_next_upstream_timeout` has not passed.
fn may_retry(
    bits: u32,
    mask: NextUpstream,
    tries_left: usize,
    request_sent: bool,
    method: &Method,
    elapsed: Duration,
    timeout: Duration,
) -> bool {
    let non_idempotent = matches!(method.as_str(), "POST" | "LOCK" | "PATCH");
    tries_left > 0
        && mask.has(bits)
        && !(request_sent && non_idempotent && !mask.has(NextUpstream::NON_IDEMPOTENT))
        && crate::upstream::in_time(elapsed, timeout)
}

const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "expect",
    "upgrade",
    "proxy-connection",
];

/// Response headers nginx does not pass from the upstream unless
/// `proxy_pass_header` names them.
const HIDDEN_BY_DEFAULT: [&str; 8] = [
    "date",
    "server",
    "x-pad",
    "x-accel-expires",
    "x-accel-redirect",
    "x-accel-limit-rate",
    "x-accel-buffering",
    "x-accel-charset",
];

/// Adds one attempt to the request's `$upstream_*` record.
fn record(r: &Req, a: Attempt) {
    r.upstream
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .attempts
        .push(a);
}

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
fn upstream_uri(r: &Req, pp: &ProxyPass) -> String {
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
    // A body declared larger than the buffer goes to a file from its start.
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
            Ok(Some(Err(_))) => return Err(400),
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
fn upstream_headers(r: &Req, body_len: u64) -> HeaderMap {
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

/// Opens a connection to a peer within `proxy_connect_timeout`.
async fn connect(
    addr: &PeerAddr,
    timeout: Duration,
) -> Result<hyper::client::conn::http1::SendRequest<UpBody>, (Failure, String)> {
    let io: Box<dyn Io> = match addr {
        PeerAddr::Inet(sa) => {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(sa)).await {
                Err(_) => {
                    return Err((
                        Failure::Timeout,
                        "upstream timed out (110: Connection timed out)".into(),
                    ));
                }
                Ok(Err(e)) => {
                    return Err((
                        Failure::Error,
                        format!("connect() failed ({})", crate::log::errno_text(&e)),
                    ));
                }
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    Box::new(s)
                }
            }
        }
        PeerAddr::Unix(p) => {
            match tokio::time::timeout(timeout, tokio::net::UnixStream::connect(p)).await {
                Err(_) => {
                    return Err((
                        Failure::Timeout,
                        "upstream timed out (110: Connection timed out)".into(),
                    ));
                }
                Ok(Err(e)) => {
                    return Err((
                        Failure::Error,
                        format!(
                            "connect() to unix:{} failed ({})",
                            p.display(),
                            crate::log::errno_text(&e)
                        ),
                    ));
                }
                Ok(Ok(s)) => Box::new(s),
            }
        }
    };
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| (Failure::Error, format!("handshake failed ({e})")))?;
    tokio::spawn(async move {
        // with_upgrades: a 101 hands the connection over to a tunnel.
        let _ = conn.with_upgrades().await;
    });
    Ok(sender)
}

/// Peers acquired for connect attempts not yet decided: released (without
/// counting a failure) if the request goes away while they connect.
struct Undecided {
    snap: Arc<Peers>,
    ids: Vec<PeerId>,
}

impl Drop for Undecided {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.snap.release(id, Outcome::Next, now_ms());
        }
    }
}

/// The peer of the attempt under way: released (without counting a failure)
/// if the request goes away (the client closed) before the attempt released
/// it or handed it on to the response body or a tunnel.
struct Held {
    snap: Arc<Peers>,
    id: PeerId,
    armed: std::sync::atomic::AtomicBool,
}

impl Held {
    fn new(snap: Arc<Peers>, id: PeerId) -> Held {
        Held {
            snap,
            id,
            armed: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Released or handed on: nothing left to do.
    fn done(&self) {
        self.armed
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if *self.armed.get_mut() {
            self.snap.release(self.id, Outcome::Next, now_ms());
        }
    }
}

/// Opens a connection for the keep-alive cache: `connect` with its record.
pub(crate) async fn open(
    addr: PeerAddr,
    timeout: Duration,
    max_age: Duration,
    location: usize,
) -> Result<Pooled, (Failure, String)> {
    let sender = connect(&addr, timeout).await?;
    Ok(Pooled::new(sender, addr, Instant::now(), max_age, location))
}

/// Releases a peer after an attempt, logging (for connection `number`,
/// with the error log's context from `ctx`) when it reaches `max_fails`.
/// With `pick_first`, a failure moves the choice on.
fn release_peer(
    number: u64,
    ctx: impl FnOnce() -> String,
    snap: &Peers,
    ups: &UpstreamRt,
    id: PeerId,
    outcome: Outcome,
) {
    let now = now_ms();
    if snap.release(id, outcome, now) == Released::Disabled {
        crate::log_conn!(
            Level::Warn,
            number,
            "upstream server temporarily disabled while connecting to upstream{}",
            ctx()
        );
    }
    if outcome == Outcome::Failed && ups.cfg.balancer.is_pick_first() {
        snap.move_on(id, now);
    }
}

/// A connect that failed: logged, the peer released as failed, the attempt
/// recorded. The status to answer with if no other try follows.
#[allow(clippy::too_many_arguments)]
fn connect_failed(
    r: &Req,
    snap: &Peers,
    ups: &UpstreamRt,
    id: PeerId,
    name: &Arc<str>,
    uri: &str,
    f: Failure,
    msg: &str,
) -> u16 {
    let ctx = r.log_context(Some(&format!("http://{name}{uri}")));
    crate::log_conn!(
        Level::Error,
        r.conn.number,
        "{} while connecting to upstream{}",
        msg,
        ctx
    );
    release_peer(r.conn.number, || ctx, snap, ups, id, Outcome::Failed);
    let status = final_status(f.bits());
    record(
        r,
        Attempt {
            addr: name.clone(),
            status: Some(status),
            connect: None,
            ..Attempt::default()
        },
    );
    status
}

/// Whether the upstream lets the connection be reused after this response.
fn upstream_keeps_alive(resp: &Response<Incoming>) -> bool {
    let has = |token: &str| {
        resp.headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match resp.version() {
        Version::HTTP_11 => !has("close"),
        Version::HTTP_10 => has("keep-alive"),
        _ => false,
    }
}

/// Everything an attempt needs that stays the same across attempts.
struct Plan {
    uri: String,
    headers: HeaderMap,
    extensions: hyper::http::Extensions,
    body: Payload,
    version: Version,
}

pub(crate) async fn run(
    r: &mut Req,
    ups: Arc<UpstreamRt>,
    pp: &ProxyPass,
    location_id: usize,
    body: ClientBody,
    mut extensions: hyper::http::Extensions,
    shared: &Arc<super::Shared>,
) -> Reply {
    // The client side of a possible protocol switch stays here; the upstream
    // request carries only the header-case map.
    let client_upgrade = extensions.remove::<hyper::upgrade::OnUpgrade>();
    let tokens = r.conf.server_tokens;
    r.proxy_host = pp.proxy_host.clone();
    r.proxy_port = pp.proxy_port;
    let mut payload = if r.conf.proxy_pass_request_body {
        match read_body(r, body).await {
            Ok(b) => b,
            Err(code) => return Reply::Status(code),
        }
    } else {
        drop(body);
        Payload::default()
    };
    if let Some(t) = &r.conf.proxy_set_body {
        payload = Payload::Mem(Bytes::from(r.eval(t)));
    }
    let mut plan = Plan {
        uri: upstream_uri(r, pp),
        headers: upstream_headers(r, payload.len()),
        extensions,
        body: payload,
        version: if r.conf.proxy_http_version == 10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
    };

    let conf = r.conf.clone();
    let started = Instant::now();
    // What the balancer hashes, computed once per request.
    let hash_text = match &ups.cfg.balancer {
        Balancer::Hash { key, .. } => r.eval(key),
        _ => String::new(),
    };
    let addr_key: Vec<u8> = match (&ups.cfg.balancer, r.client_ip()) {
        (Balancer::IpHash, Some(std::net::IpAddr::V4(ip))) => ip.octets()[..3].to_vec(),
        (Balancer::IpHash, Some(std::net::IpAddr::V6(ip))) => ip.octets().to_vec(),
        (Balancer::IpHash, None) => vec![0, 0, 0],
        _ => Vec::new(),
    };
    let key = match &ups.cfg.balancer {
        Balancer::Hash { .. } => Key::Text(&hash_text),
        Balancer::IpHash => Key::Addr(&addr_key),
        _ => Key::None,
    };
    // Only `random` draws numbers; the others need no seed (and no clock read).
    let seed = match &ups.cfg.balancer {
        Balancer::Random { .. } => crate::upstream::random::next_u64(),
        _ => 0,
    };
    let mut pick_state = PickState::new(seed);
    let method = r.method.clone();
    let retry = |bits: u32, tries_left: usize, request_sent: bool| {
        may_retry(
            bits,
            conf.proxy_next_upstream,
            tries_left,
            request_sent,
            &method,
            started.elapsed(),
            conf.proxy_next_upstream_timeout,
        )
    };
    // The peers as this request sees them, for all its tries (a name with
    // no answer yet: wait for it, bounded, not a 502 at once).
    let snap = ups.peers_ready().await;
    let (mut tried, mut tries_left) = {
        let n = snap.count();
        let limit = conf.proxy_next_upstream_tries as usize;
        (Tried::new(&snap), if limit > 0 { n.min(limit) } else { n })
    };
    let mut first_try = true;
    loop {
        let now = Instant::now();
        let ms = now_ms();
        // nginx: a retry after the zone's peer list changed is refused.
        let moved = !first_try && ups.peers().config != snap.config;
        first_try = false;
        let pick = if moved {
            None
        } else {
            let b = &ups.cfg.balancer;
            snap.take(b, &mut pick_state, &key, &mut tried, &mut tries_left, ms)
                .map(|id| (id, snap.get(id).addr.clone(), snap.get(id).name.clone()))
        };
        let Some((id, addr, name)) = pick else {
            let url = || format!("http://{}{}", ups.cfg.name, plan.uri);
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "no live upstreams while connecting to upstream{}",
                r.log_context(Some(&url()))
            );
            record(
                r,
                Attempt {
                    addr: ups.cfg.name.as_str().into(),
                    status: Some(502),
                    ..Attempt::default()
                },
            );
            return Reply::Status(502);
        };

        // A cached connection, or a new one (raced against the next peers'
        // with `proxy_connect_race`).
        let max_age = || {
            ups.cfg
                .keepalive
                .age_limit(crate::upstream::random::next_u64())
        };
        let cached = ups.pool().take(&addr, location_id, now);
        let (id, name, attempt_start, was_cached, mut conn) = match cached {
            Some(c) => (id, name, now, true, c),
            None => {
                // Per attempt: the peer, its name, when it began, whether cached.
                let mut racers = vec![(id, name, now, false)];
                let mut undecided = Undecided {
                    snap: snap.clone(),
                    ids: vec![id],
                };
                let first = open(addr, conf.proxy_connect_timeout, max_age(), location_id);
                let mut race: Race<Pooled, (Failure, String)> = Race::default();
                let mut failures = Vec::new();
                let ended = race
                    .first(
                        first,
                        conf.proxy_connect_race,
                        |race| {
                            // Another peer only where a failed connect could
                            // go to one, and not after the peers changed.
                            let in_time = crate::upstream::in_time(
                                started.elapsed(),
                                conf.proxy_next_upstream_timeout,
                            );
                            let allowed = conf.proxy_next_upstream.has(NextUpstream::ERROR)
                                || conf.proxy_next_upstream.has(NextUpstream::TIMEOUT);
                            if tries_left == 0
                                || !in_time
                                || !allowed
                                || ups.peers().config != snap.config
                            {
                                return false;
                            }
                            let (b, ms) = (&ups.cfg.balancer, now_ms());
                            let Some(next) = snap.take(
                                b,
                                &mut pick_state,
                                &key,
                                &mut tried,
                                &mut tries_left,
                                ms,
                            ) else {
                                return false;
                            };
                            let p = snap.get(next);
                            let t = Instant::now();
                            let cached = ups.pool().take(&p.addr, location_id, t);
                            racers.push((next, p.name.clone(), t, cached.is_some()));
                            undecided.ids.push(next);
                            match cached {
                                Some(c) => race.start(async move { Ok(c) }),
                                None => race.start(open(
                                    p.addr.clone(),
                                    conf.proxy_connect_timeout,
                                    max_age(),
                                    location_id,
                                )),
                            };
                            true
                        },
                        |k, e| failures.push((k, e)),
                    )
                    .await;
                // Every attempt is accounted for below.
                undecided.ids.clear();
                for (k, (f, msg)) in failures {
                    let (fid, fname, _, _) = &racers[k];
                    connect_failed(r, &snap, &ups, *fid, fname, &plan.uri, f, &msg);
                }
                match ended {
                    Some(Ended::Won(k, c)) if racers.len() == 1 => {
                        let (wid, wname, began, cached) = racers.swap_remove(k);
                        (wid, wname, began, cached, c)
                    }
                    Some(Ended::Won(k, c)) => {
                        // The losers still connecting finish in the
                        // background: one that fails counts as failed, one
                        // that connects is closed unused.
                        let losers: Vec<(PeerId, String)> = racers
                            .iter()
                            .map(|(id, name, ..)| {
                                let url = format!("http://{name}{}", plan.uri);
                                (*id, r.log_context(Some(&url)))
                            })
                            .collect();
                        let (snap, ups, number) = (snap.clone(), ups.clone(), r.conn.number);
                        race.finish(move |j, result| {
                            let Some((id, ctx)) = losers.get(j) else {
                                return;
                            };
                            match result {
                                Ok(_unused) => {
                                    snap.release(*id, Outcome::Next, now_ms());
                                }
                                Err((_, msg)) => {
                                    crate::log_conn!(
                                        Level::Error,
                                        number,
                                        "{} while connecting to upstream{}",
                                        msg,
                                        ctx
                                    );
                                    release_peer(
                                        number,
                                        || ctx.clone(),
                                        &snap,
                                        &ups,
                                        *id,
                                        Outcome::Failed,
                                    );
                                }
                            }
                        });
                        let (wid, wname, began, cached) = racers.swap_remove(k);
                        (wid, wname, began, cached, c)
                    }
                    Some(Ended::Lost(k, (f, msg))) => {
                        let (fid, fname, _, _) = &racers[k];
                        let status =
                            connect_failed(r, &snap, &ups, *fid, fname, &plan.uri, f, &msg);
                        if retry(f.bits(), tries_left, false) {
                            continue;
                        }
                        return Reply::Status(status);
                    }
                    None => return Reply::Status(502),
                }
            }
        };
        conn.track(&ups.reg, &snap, id);
        let held = Held::new(snap.clone(), id);
        let url = || format!("http://{name}{}", plan.uri);
        let release = |outcome: Outcome| {
            held.done();
            release_peer(
                r.conn.number,
                || r.log_context(Some(&url())),
                &snap,
                &ups,
                id,
                outcome,
            )
        };
        let connect_time = attempt_start.elapsed();
        conn.requests += 1;

        let mut req = Request::new(plan.body.body());
        *req.method_mut() = r.method.clone();
        *req.uri_mut() = match plan.uri.parse() {
            Ok(u) => u,
            Err(_) => {
                release(Outcome::Ok);
                return Reply::Status(400);
            }
        };
        *req.version_mut() = plan.version;
        // The last possible attempt takes the plan's headers instead of copying.
        if tries_left == 0 {
            *req.headers_mut() = std::mem::take(&mut plan.headers);
            *req.extensions_mut() = std::mem::take(&mut plan.extensions);
        } else {
            *req.headers_mut() = plan.headers.clone();
            *req.extensions_mut() = plan.extensions.clone();
        }
        let sent_bytes = plan.body.len();

        // Sending and waiting for the header are one future here: a request
        // without a body is sent at once, so only proxy_read_timeout bounds
        // the wait; with a body, proxy_send_timeout as well.
        let header_wait = conf.proxy_read_timeout
            + if plan.body.is_empty() {
                Duration::ZERO
            } else {
                conf.proxy_send_timeout
            };
        let result = match conn.sender.ready().await {
            Err(e) => Err(e),
            Ok(()) => {
                match tokio::time::timeout(header_wait, conn.sender.send_request(req)).await {
                    Ok(r) => r,
                    Err(_) => {
                        let msg = "upstream timed out (110: Connection timed out) while reading response header from upstream";
                        crate::log_conn!(
                            Level::Error,
                            r.conn.number,
                            "{}{}",
                            msg,
                            r.log_context(Some(&url()))
                        );
                        release(Outcome::Failed);
                        record(
                            r,
                            Attempt {
                                addr: name.clone(),
                                status: Some(504),
                                connect: Some(connect_time),
                                sent: sent_bytes,
                                ..Attempt::default()
                            },
                        );
                        if retry(NextUpstream::TIMEOUT, tries_left, true) {
                            continue;
                        }
                        return Reply::Status(504);
                    }
                }
            }
        };
        // A response whose framing could be read two ways is refused, as
        // nginx does: passing it on would desync the client connection.
        let result = match result {
            // A switch the client did not ask for would leave it reading
            // a stream it never agreed to.
            Ok(resp) if resp.status() == 101 && !r.headers.contains_key(header::UPGRADE) => {
                Err(Bad::Framing(
                    "upstream sent \"101 Switching Protocols\" to a request without \"Upgrade\""
                        .into(),
                ))
            }
            Ok(resp) => match upstream_framing(resp.headers()) {
                Ok(()) => Ok(resp),
                Err(msg) => Err(Bad::Framing(msg)),
            },
            Err(e) if e.is_parse() => Err(Bad::Framing("upstream sent invalid header".into())),
            Err(_) => Err(Bad::Closed),
        };
        let resp = match result {
            Ok(resp) => resp,
            Err(bad) => {
                let (f, msg) = match bad {
                    Bad::Framing(m) => (Failure::InvalidHeader, m),
                    Bad::Closed => (
                        Failure::Error,
                        "upstream prematurely closed connection".to_string(),
                    ),
                };
                // A cached connection the upstream had closed: try again
                // without using up a try, as nginx does, and (unlike nginx)
                // without counting a failure: the peer did nothing wrong, and
                // pick_first must not move away from it.
                let stale = was_cached && f == Failure::Error;
                let level = if stale { Level::Info } else { Level::Error };
                crate::log_conn!(
                    level,
                    r.conn.number,
                    "{} while reading response header from upstream{}",
                    msg,
                    r.log_context(Some(&url()))
                );
                release(if stale {
                    Outcome::Next
                } else {
                    Outcome::Failed
                });
                if stale {
                    tries_left += 1;
                    if snap.single() {
                        tried = Tried::new(&snap);
                    }
                }
                let status = final_status(f.bits());
                record(
                    r,
                    Attempt {
                        addr: name.clone(),
                        status: Some(status),
                        connect: Some(connect_time),
                        sent: sent_bytes,
                        ..Attempt::default()
                    },
                );
                if retry(f.bits(), tries_left, !stale) {
                    continue;
                }
                return Reply::Status(status);
            }
        };
        let header_time = attempt_start.elapsed();
        let status = resp.status().as_u16();
        snap.responded(id, status);
        if sent_bytes > 0 {
            snap.get(id)
                .live
                .sent
                .fetch_add(sent_bytes, std::sync::atomic::Ordering::Relaxed);
        }
        // The attempt's record once the upstream has answered.
        let answered = || Attempt {
            addr: name.clone(),
            status: Some(status),
            connect: Some(connect_time),
            header: Some(header_time),
            sent: sent_bytes,
            ..Attempt::default()
        };

        // proxy_next_upstream http_5xx/403/404/429.
        if let Some(bits) = NextUpstream::for_status(status) {
            if retry(bits, tries_left, true) {
                let outcome = if bits == NextUpstream::HTTP_403 || bits == NextUpstream::HTTP_404 {
                    Outcome::Next
                } else {
                    Outcome::Failed
                };
                release(outcome);
                record(r, answered());
                continue;
            }
        }

        if status == 101 {
            let tracked = super::Tracked::new(shared);
            // The tunnel releases the peer.
            held.done();
            return super::tunnel::switch_protocols(
                r,
                resp,
                client_upgrade,
                snap.clone(),
                id,
                conf.proxy_read_timeout,
                tracked,
            );
        }
        // X-Accel-Redirect: the upstream asks for an internal redirect.
        if let Some(target) = resp
            .headers()
            .get("x-accel-redirect")
            .and_then(|v| v.to_str().ok())
            .filter(|t| t.starts_with('/') || t.starts_with('@'))
            .map(str::to_string)
        {
            release(Outcome::Ok);
            record(r, answered());
            return Reply::Internal(target);
        }
        // proxy_intercept_errors: an error the location has an error_page for
        // is answered by sluice, not passed through.
        if conf.proxy_intercept_errors
            && status >= 300
            && conf.error_page.iter().any(|p| p.codes.contains(&status))
        {
            release(Outcome::Ok);
            record(r, answered());
            return Reply::Status(status);
        }
        let keep = upstream_keeps_alive(&resp);
        let (mut parts, incoming) = resp.into_parts();
        {
            let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
            // Kept only for a log format that reads $upstream_http_*.
            if conf.access_log.iter().any(|l| {
                l.format.template.segments.iter().any(|s| {
                    matches!(
                        s,
                        crate::conf::vars::Segment::Var(crate::conf::vars::Var::UpstreamHttp(_))
                    )
                })
            }) {
                log.headers = Some(parts.headers.clone());
            }
            log.attempts.push(answered());
        }
        redirect_headers(r, pp, &mut parts.headers);
        filter_response_headers(
            &mut parts.headers,
            &conf.proxy_hide_header,
            &conf.proxy_pass_header,
            tokens,
        );
        // The body releases the peer.
        held.done();
        let mut body = ProxyBody {
            inner: incoming,
            ahead: std::collections::VecDeque::new(),
            conn: keep.then_some(conn),
            ups: ups.clone(),
            peer: Some((snap.clone(), id)),
            log: r.upstream.clone(),
            attempt_start,
            received: 0,
            read_timeout: conf.proxy_read_timeout,
            timer: None,
            peer_name: name.clone(),
            uri: std::mem::take(&mut plan.uri),
        };
        if conf.proxy_buffering {
            let (count, size) = conf.proxy_buffers;
            let room = conf
                .proxy_buffer_size
                .saturating_add(u64::from(count).saturating_mul(size));
            if let Err(e) = body.read_ahead(room).await {
                crate::log_conn!(
                    Level::Error,
                    r.conn.number,
                    "{}{}",
                    e.message,
                    r.log_context(Some(&e.url))
                );
                return Reply::Status(if e.message.contains("timed out") {
                    504
                } else {
                    502
                });
            }
            if body.peer.is_none() {
                // All of it fitted: the upstream connection is already back in
                // the keep-alive cache.
                let whole = match body.ahead.len() {
                    0 => Bytes::new(),
                    1 => body.ahead.pop_front().unwrap_or_default(),
                    _ => {
                        let parts: Vec<Bytes> = body.ahead.drain(..).collect();
                        Bytes::from(parts.concat())
                    }
                };
                parts.extensions.insert(super::case::Proxied);
                return Reply::Full(Response::from_parts(parts, response::full(whole)));
            }
        }
        parts.extensions.insert(super::case::Proxied);
        return Reply::Full(Response::from_parts(parts, body.boxed()));
    }
}

/// `proxy_redirect`: rewrites the prefix of the upstream's `Location` and
/// `Refresh` headers.
fn redirect_headers(r: &Req, pp: &ProxyPass, h: &mut HeaderMap) {
    use crate::conf::loc::Redirect;
    let Some(rules) = &r.conf.proxy_redirect else {
        return;
    };
    for name in [header::LOCATION, header::REFRESH] {
        let Some(value) = h
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
        else {
            continue;
        };
        // Refresh carries the URL after "url=".
        let (head, url) = if name == header::REFRESH {
            match value.to_ascii_lowercase().find("url=") {
                Some(i) => (value[..i + 4].to_string(), value[i + 4..].to_string()),
                None => continue,
            }
        } else {
            (String::new(), value.clone())
        };
        for rule in rules {
            let (from, to) = match rule {
                Redirect::Default => match &pp.uri {
                    Some(u) => (
                        format!("http://{}{u}", pp.proxy_host),
                        pp.location_prefix.clone(),
                    ),
                    None => (format!("http://{}/", pp.proxy_host), "/".to_string()),
                },
                Redirect::Rule(f, t) => (r.eval(f), r.eval(t)),
            };
            if let Some(rest) = url.strip_prefix(from.as_str()) {
                if let Ok(v) = HeaderValue::from_str(&format!("{head}{to}{rest}")) {
                    h.insert(name.clone(), v);
                }
                break;
            }
        }
    }
}

/// Response headers not passed to the client whatever the configuration.
const HOP_BY_HOP_RESPONSE: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn filter_response_headers(h: &mut HeaderMap, hide: &[String], pass: &[String], tokens: bool) {
    // One pass over the (few) headers present, instead of a lookup for each
    // name that might be: names are already lowercase here.
    let drop: Vec<HeaderName> = h
        .keys()
        .filter(|k| {
            let n = k.as_str();
            HOP_BY_HOP_RESPONSE.contains(&n)
                || (HIDDEN_BY_DEFAULT.contains(&n) && !pass.iter().any(|p| p == n))
                || hide.iter().any(|x| x == n)
        })
        .cloned()
        .collect();
    for n in drop {
        h.remove(n);
    }
    if !h.contains_key(header::SERVER) {
        h.insert(header::SERVER, response::server_header(tokens));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_rules() {
        let m = NextUpstream(NextUpstream::ERROR | NextUpstream::TIMEOUT);
        let z = Duration::ZERO;
        assert!(may_retry(
            NextUpstream::ERROR,
            m,
            1,
            false,
            &Method::GET,
            z,
            z
        ));
        assert!(!may_retry(
            NextUpstream::ERROR,
            m,
            0,
            false,
            &Method::GET,
            z,
            z
        ));
        assert!(!may_retry(
            NextUpstream::HTTP_500,
            m,
            1,
            true,
            &Method::GET,
            z,
            z
        ));
        // A POST that reached the upstream is not retried without non_idempotent...
        assert!(!may_retry(
            NextUpstream::ERROR,
            m,
            1,
            true,
            &Method::POST,
            z,
            z
        ));
        // ...but one that never got there is.
        assert!(may_retry(
            NextUpstream::ERROR,
            m,
            1,
            false,
            &Method::POST,
            z,
            z
        ));
        let m2 = NextUpstream(m.0 | NextUpstream::NON_IDEMPOTENT);
        assert!(may_retry(
            NextUpstream::ERROR,
            m2,
            1,
            true,
            &Method::POST,
            z,
            z
        ));
        // proxy_next_upstream_timeout.
        let t = Duration::from_secs(1);
        assert!(!may_retry(
            NextUpstream::ERROR,
            m,
            1,
            false,
            &Method::GET,
            t,
            t
        ));
        assert!(!may_retry(
            NextUpstream::ERROR,
            NextUpstream(0),
            1,
            false,
            &Method::GET,
            z,
            z
        ));
    }

    #[test]
    fn statuses() {
        assert_eq!(final_status(NextUpstream::TIMEOUT), 504);
        assert_eq!(final_status(NextUpstream::ERROR), 502);
        assert_eq!(final_status(NextUpstream::INVALID_HEADER), 502);
        assert_eq!(final_status(NextUpstream::HTTP_404), 404);
    }

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
