//! Active health checks (`health_check`): in every worker one task per
//! checked zone upstream, but only the holder of the zone's health-check
//! lease (taken and renewed in `Upstreams::tick`, freed by the master when
//! its worker dies) sends checks: an HTTP `GET` (http; HTTP/1.1, or HTTP/2
//! where the location speaks it), the gRPC health-checking protocol's
//! `Check` (`type=grpc`), or a TCP connect with an optional
//! `send`/`expect` exchange (stream) to every peer, every `interval` (+ up
//! to `jitter`). Peers the location reaches over TLS are checked over TLS
//! with its `proxy_ssl_*` settings (`upstream::tls`). With
//! `keepalive_time` one connection per peer is kept between checks. The
//! verdict (`fails`/`passes` in a row) and the counters go into the peer's
//! zone record, so every worker's balancer skips unhealthy peers.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::UpstreamRt;
use super::h2set::{ConnState, Sender};
use super::peers::{Ms, PeerLive, now_ms};
use super::tls::Tls;
use crate::conf::model::{GrpcCheck, HealthCheck, PeerAddr};
use crate::log::Level;
use crate::net::stream::Stream;

/// `PeerLive::health`: never checked (up, unless `mandatory`).
pub const UNCHECKED: u32 = 0;
pub const HEALTHY: u32 = 1;
pub const UNHEALTHY: u32 = 2;

/// The most of a response a check reads.
const READ_MAX: usize = 256 * 1024;

/// Starts the checking task of every zone upstream with a `health_check`.
pub fn spawn_all(upstreams: &super::Upstreams) {
    for u in upstreams.iter() {
        if u.zone().is_some() && u.cfg.health.is_some() {
            tokio::spawn(check_loop(u.clone()));
        }
    }
}

/// A connection kept between checks (`keepalive_time`).
enum Conn {
    H1(Stream),
    H2(Sender, Arc<ConnState>),
}

struct Kept {
    conn: Conn,
    born: Instant,
}

impl Kept {
    /// Still fit for another check: young enough, and the peer has not
    /// closed it (nor sent anything on an idle HTTP/1.1 connection).
    fn usable(&self, max_age: Duration) -> bool {
        self.born.elapsed() < max_age
            && match &self.conn {
                Conn::H1(s) => s.quiet(),
                Conn::H2(_, st) => !st.is_closed() && !st.going_away(),
            }
    }
}

async fn check_loop(u: Arc<UpstreamRt>) {
    let (Some(zone), Some(hc)) = (u.zone().cloned(), u.cfg.health.clone()) else {
        return;
    };
    let me = std::process::id();
    let holds = || zone.hc_lease().is_some_and(|l| l.holder() == me);
    let tls = hc.tls.as_ref().map(|(ssl, name)| {
        let clients = Arc::new(crate::net::tls_client::Clients::new());
        Tls::new(clients, ssl.clone(), name)
    });
    let mut kept: HashMap<SocketAddr, Kept> = HashMap::new();
    // Each peer on its own: a check still under way (a peer that hangs,
    // up to the timeouts) is not sent again, and the others go on at their
    // interval.
    let mut set = tokio::task::JoinSet::new();
    let mut inflight: HashSet<SocketAddr> = HashSet::new();
    let mut next_round = tokio::time::Instant::now();
    let mut held = false;
    loop {
        if !holds() {
            held = false;
            kept.clear();
            set.abort_all();
            inflight.clear();
            tokio::time::sleep(super::resolve::LEASE_TICK).await;
            continue;
        }
        if !held {
            held = true;
            next_round = tokio::time::Instant::now();
            crate::log!(
                Level::Notice,
                "health checks of upstream \"{}\" in zone \"{}\" run in this worker",
                u.cfg.name,
                zone.name
            );
        }
        let now = tokio::time::Instant::now();
        if now >= next_round {
            let peers = u.peers();
            let mut listed = HashSet::new();
            for p in peers.primary.iter().chain(peers.backup.iter()) {
                let PeerAddr::Inet(addr) = p.addr else {
                    continue;
                };
                let addr = SocketAddr::new(addr.ip(), hc.port.unwrap_or(addr.port()));
                listed.insert(addr);
                if !inflight.insert(addr) {
                    continue;
                }
                let (hc, live, name) = (hc.clone(), p.live.clone(), p.name.clone());
                let reuse = kept.remove(&addr);
                let tls = tls.clone();
                set.spawn(async move {
                    let (verdict, back) = check(addr, &hc, tls.as_ref(), reuse).await;
                    (verdict, live, name, addr, back)
                });
            }
            // Connections of peers no longer there are dropped.
            kept.retain(|a, _| listed.contains(a));
            let jitter = if hc.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_millis(
                    super::random::next_u64() % (hc.jitter.as_millis() as u64 + 1),
                )
            };
            next_round = now + hc.interval + jitter;
        }
        // Wake for the next round, a check's end, or to look at the lease.
        let wake = next_round.min(now + super::resolve::LEASE_TICK);
        let done = tokio::select! {
            d = set.join_next(), if !set.is_empty() => d,
            _ = tokio::time::sleep_until(wake) => None,
        };
        let Some(Ok((verdict, live, name, addr, back))) = done else {
            continue;
        };
        inflight.remove(&addr);
        // A worker that lost the lease meanwhile publishes nothing.
        if !holds() {
            continue;
        }
        if let Some(k) = back {
            kept.insert(addr, k);
        }
        let was = live.health.load(Relaxed);
        let now = apply(&live, verdict.is_ok(), &hc, now_ms());
        if now == UNHEALTHY && was != UNHEALTHY {
            crate::log!(
                Level::Warn,
                "peer is unhealthy while {}, health check \"{}\" of peer {} in upstream \"{}\"",
                verdict.err().unwrap_or_default(),
                if hc.stream || hc.grpc.is_some() {
                    ""
                } else {
                    hc.uri.as_str()
                },
                name,
                u.cfg.name
            );
        } else if now == HEALTHY && was == UNHEALTHY {
            crate::log!(
                Level::Notice,
                "peer is healthy, health check of peer {} in upstream \"{}\"",
                name,
                u.cfg.name
            );
        }
    }
}

/// Records one check's result and returns the peer's verdict: `fails`
/// failures in a row make it unhealthy, `passes` passes in a row healthy
/// again; a peer never checked takes the first result (a `mandatory` one
/// is waiting for it).
pub fn apply(l: &PeerLive, passed: bool, hc: &HealthCheck, now: Ms) -> u32 {
    let h = &l.hc;
    h.checks.fetch_add(1, Relaxed);
    let state = l.health.load(Relaxed);
    if passed {
        h.last_passed.store(1, Relaxed);
        h.fail_run.store(0, Relaxed);
        let run = h.pass_run.fetch_add(1, Relaxed) + 1;
        if state == UNCHECKED || (state == UNHEALTHY && run >= hc.passes) {
            let since = h.downstart.swap(0, Relaxed);
            if since != 0 {
                h.downtime.fetch_add(now.saturating_sub(since), Relaxed);
                h.recovered.store(now.max(1), Relaxed);
            }
            l.health.store(HEALTHY, Relaxed);
            return HEALTHY;
        }
        return state;
    }
    h.fails.fetch_add(1, Relaxed);
    h.last_passed.store(0, Relaxed);
    h.pass_run.store(0, Relaxed);
    let run = h.fail_run.fetch_add(1, Relaxed) + 1;
    if state != UNHEALTHY && (run >= hc.fails || (state == UNCHECKED && hc.mandatory)) {
        h.unhealthy.fetch_add(1, Relaxed);
        h.downstart.store(now.max(1), Relaxed);
        l.health.store(UNHEALTHY, Relaxed);
        return UNHEALTHY;
    }
    state
}

type Verdict = Result<(), &'static str>;

/// One check of one peer: Ok when it passed, else what failed (for the
/// log); and the connection to keep for the next check (`keepalive_time`,
/// after a check that passed on a connection fit for more).
async fn check(
    addr: SocketAddr,
    hc: &HealthCheck,
    tls: Option<&Tls>,
    kept: Option<Kept>,
) -> (Verdict, Option<Kept>) {
    if hc.stream {
        return (stream_check(addr, hc).await, None);
    }
    let kept = match hc.keepalive_time {
        Some(t) => kept.filter(|k| k.usable(t)),
        None => None,
    };
    if hc.grpc.is_some() || hc.h2 {
        return h2_check(addr, hc, tls, kept).await;
    }
    let (mut s, born) = match kept {
        Some(Kept {
            conn: Conn::H1(s),
            born,
        }) => (s, born),
        _ => match open(addr, hc, tls).await {
            Ok(s) => (s, Instant::now()),
            Err(e) => return (Err(e), None),
        },
    };
    let keep = hc.keepalive_time.is_some();
    let req = h1_request(hc, keep);
    let io = async {
        s.write_all(req.as_bytes())
            .await
            .map_err(|_| "sending request to upstream")?;
        read_response(&mut s).await
    };
    let answer = match tokio::time::timeout(hc.read_timeout, io).await {
        Err(_) => Err("reading response header from upstream"),
        Ok(r) => r,
    };
    let ((status, headers, body), reusable) = match answer {
        Ok(a) => a,
        Err(e) => return (Err(e), None),
    };
    let ok = match &hc.matcher {
        Some(m) => m.http_ok(status, &headers, &body),
        None => (200..400).contains(&status),
    };
    if !ok {
        return (Err("checking response of upstream"), None);
    }
    let back = (keep && reusable).then_some(Kept {
        conn: Conn::H1(s),
        born,
    });
    (Ok(()), back)
}

/// A new connection to the peer within `proxy_connect_timeout`, with its
/// TLS handshake when the location's peers are reached over TLS.
async fn open(
    addr: SocketAddr,
    hc: &HealthCheck,
    tls: Option<&Tls>,
) -> Result<Stream, &'static str> {
    let peer = PeerAddr::Inet(addr);
    let s = crate::net::stream::connect(&peer, hc.connect_timeout)
        .await
        .map_err(|_| "connecting to upstream")?;
    match tls {
        None => Ok(s),
        Some(t) => t
            .handshake(&peer, s, hc.connect_timeout)
            .await
            .map_err(|_| "SSL handshaking to upstream"),
    }
}

/// The HTTP/1.1 check request: `GET uri` with the `Host`, the location's
/// plain `proxy_set_header` fields, and `Connection: close` unless the
/// connection is kept.
fn h1_request(hc: &HealthCheck, keep: bool) -> String {
    let mut req = format!("GET {} HTTP/1.1\r\nHost: {}\r\n", hc.uri, hc.host);
    let mut agent = false;
    for (n, v) in &hc.headers {
        agent |= n.eq_ignore_ascii_case("user-agent");
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if !agent {
        req.push_str("User-Agent: sluice health check\r\n");
    }
    if !keep {
        req.push_str("Connection: close\r\n");
    }
    req.push_str("\r\n");
    req
}

/// A check over HTTP/2: the `GET` of an http check in a location that
/// speaks HTTP/2 to its peers, or the gRPC `Check` of `type=grpc`.
async fn h2_check(
    addr: SocketAddr,
    hc: &HealthCheck,
    tls: Option<&Tls>,
    kept: Option<Kept>,
) -> (Verdict, Option<Kept>) {
    let (send, state, born) = match kept {
        Some(Kept {
            conn: Conn::H2(send, state),
            born,
        }) => (send, state, born),
        _ => {
            let o = super::h2set::Opener {
                timeout: hc.connect_timeout,
                tls: tls.cloned(),
                ping: None,
                keepalive: false,
                target: 1,
                keepalive_time: crate::conf::model::Keepalive::off(),
                // The floor (1 MiB): a check reads the status and trailers.
                head_max: 0,
            };
            match super::h2set::open(PeerAddr::Inet(addr), o).await {
                Ok(opened) => {
                    let (send, state) = opened.into_parts();
                    (send, state, Instant::now())
                }
                Err(f) => return (Err(f.stage), None),
            }
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (path, body) = match &hc.grpc {
        Some(g) => (
            "/grpc.health.v1.Health/Check",
            Bytes::from(grpc_request(&g.service)),
        ),
        None => (hc.uri.as_str(), Bytes::new()),
    };
    let mut b = http::Request::builder()
        .method(if hc.grpc.is_some() { "POST" } else { "GET" })
        .uri(format!("{scheme}://{}{path}", hc.host));
    if hc.grpc.is_some() {
        b = b
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    }
    let mut agent = false;
    for (n, v) in &hc.headers {
        let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n.as_bytes()),
            http::HeaderValue::from_str(v),
        ) else {
            continue;
        };
        agent |= n == http::header::USER_AGENT;
        b = b.header(n, v);
    }
    if !agent {
        b = b.header("user-agent", "sluice health check");
    }
    let Ok(req) = b.body(()) else {
        return (Err("sending request to upstream"), None);
    };
    let answer =
        match tokio::time::timeout(hc.read_timeout, h2_exchange(send.clone(), req, body)).await {
            Err(_) => Err("reading response header from upstream"),
            Ok(r) => r,
        };
    let verdict = answer.and_then(|(status, headers, body, trailers)| match &hc.grpc {
        Some(g) => grpc_verdict(g, status, &headers, &body, &trailers),
        None => {
            let ok = match &hc.matcher {
                Some(m) => m.http_ok(status, &headers, &body),
                None => (200..400).contains(&status),
            };
            if ok {
                Ok(())
            } else {
                Err("checking response of upstream")
            }
        }
    });
    let back = (verdict.is_ok() && hc.keepalive_time.is_some()).then_some(Kept {
        conn: Conn::H2(send, state),
        born,
    });
    (verdict, back)
}

type H2Answer = (u16, Headers, Vec<u8>, Headers);

/// One request on an HTTP/2 connection: the status, the headers, the
/// body (at most `READ_MAX`) and the trailers.
async fn h2_exchange(
    send: Sender,
    req: http::Request<()>,
    body: Bytes,
) -> Result<H2Answer, &'static str> {
    const SENDING: &str = "sending request to upstream";
    let mut send = send.ready().await.map_err(|_| SENDING)?;
    let (resp, mut out) = send
        .send_request(req, body.is_empty())
        .map_err(|_| SENDING)?;
    if !body.is_empty() {
        out.send_data(body, true).map_err(|_| SENDING)?;
    }
    let resp = resp
        .await
        .map_err(|_| "reading response header from upstream")?;
    let (parts, mut recv) = resp.into_parts();
    let pairs = |m: &http::HeaderMap| -> Headers {
        m.iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect()
    };
    let headers = pairs(&parts.headers);
    let mut data = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(|_| "reading response from upstream")?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
        if data.len() >= READ_MAX {
            return Err("reading response from upstream");
        }
    }
    let trailers = recv
        .trailers()
        .await
        .map_err(|_| "reading response from upstream")?
        .map(|t| pairs(&t))
        .unwrap_or_default();
    Ok((parts.status.as_u16(), headers, data, trailers))
}

/// `HealthCheckRequest { string service = 1; }` as one gRPC message
/// (uncompressed, length-prefixed).
fn grpc_request(service: &str) -> Vec<u8> {
    let mut msg = Vec::new();
    if !service.is_empty() {
        msg.push(0x0a); // field 1, length-delimited
        put_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut out = vec![0u8];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A protobuf varint at the start of `b`, which it then skips.
fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&x, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// `HealthCheckResponse.status` (field 1, an enum) of the answer's first
/// gRPC message; 0 (UNKNOWN) when the field is absent. None: no whole
/// uncompressed message, or one that is no protobuf.
fn grpc_serving_status(body: &[u8]) -> Option<u64> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 {
        return None;
    }
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let mut m = rest.get(4..4usize.checked_add(len)?)?;
    let mut status = 0;
    while !m.is_empty() {
        let key = varint(&mut m)?;
        let skip = match (key >> 3, key & 7) {
            (1, 0) => {
                status = varint(&mut m)?;
                0
            }
            (1, _) => return None,
            (_, 0) => {
                varint(&mut m)?;
                0
            }
            (_, 1) => 8,
            (_, 2) => usize::try_from(varint(&mut m)?).ok()?,
            (_, 5) => 4,
            _ => return None,
        };
        m = m.get(skip..)?;
    }
    Some(status)
}

/// Whether a gRPC `Check`'s answer passes: HTTP 200 with `grpc-status`
/// (trailers, or the headers of a Trailers-Only answer) 0 and a
/// `HealthCheckResponse` saying SERVING (1); with `grpc_status=CODE`, a
/// `grpc-status` of CODE.
fn grpc_verdict(
    g: &GrpcCheck,
    status: u16,
    headers: &Headers,
    body: &[u8],
    trailers: &Headers,
) -> Verdict {
    const BAD: &str = "checking response of upstream";
    if status != 200 {
        return Err(BAD);
    }
    let code = trailers
        .iter()
        .chain(headers.iter())
        .find(|(k, _)| k.eq_ignore_ascii_case("grpc-status"))
        .and_then(|(_, v)| v.trim().parse::<u32>().ok())
        .ok_or(BAD)?;
    if let Some(want) = g.status {
        return if code == want { Ok(()) } else { Err(BAD) };
    }
    if code == 0 && grpc_serving_status(body) == Some(1) {
        Ok(())
    } else {
        Err(BAD)
    }
}

type Headers = Vec<(String, String)>;
type Response = (u16, Headers, Vec<u8>);

/// How a response's body ends.
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// Reads a response: to its `Content-Length`, or the end of its chunked
/// body (decoded), else to the end of the connection (at most
/// `READ_MAX`). Also whether the connection may carry another request.
async fn read_response<S: AsyncRead + Unpin>(s: &mut S) -> Result<(Response, bool), &'static str> {
    let mut buf = Vec::with_capacity(4096);
    let mut head: Option<(u16, Headers, usize, Framing, bool)> = None;
    let mut done = false;
    loop {
        if let Some((_, _, len, framing, _)) = &head {
            let body = buf.get(*len..).unwrap_or_default();
            done = match framing {
                Framing::Length(n) => body.len() >= *n,
                Framing::Chunked => chunked_end(body).is_some(),
                Framing::Close => false,
            };
            if done {
                break;
            }
        }
        if buf.len() >= READ_MAX {
            break;
        }
        let mut chunk = [0u8; 8192];
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|_| "reading response from upstream")?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if head.is_none() {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            match r.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let headers: Headers = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    let status = r.code.unwrap_or(0);
                    let has = |name: &str, token: &str| {
                        headers.iter().any(|(k, v)| {
                            k.eq_ignore_ascii_case(name) && v.to_ascii_lowercase().contains(token)
                        })
                    };
                    let cl = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.trim().parse::<usize>().ok());
                    let framing = if status < 200 || status == 204 || status == 304 {
                        Framing::Length(0)
                    } else if has("transfer-encoding", "chunked") {
                        Framing::Chunked
                    } else if let Some(n) = cl {
                        Framing::Length(n)
                    } else {
                        Framing::Close
                    };
                    let persistent = r.version == Some(1) && !has("connection", "close");
                    head = Some((status, headers, len, framing, persistent));
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err("reading response header from upstream"),
            }
        }
    }
    let (status, headers, len, framing, persistent) =
        head.ok_or("reading response header from upstream")?;
    let mut body = buf.split_off(len.min(buf.len()));
    let reusable = match framing {
        Framing::Length(n) => done && body.len() == n && persistent,
        Framing::Chunked => {
            done && persistent && chunked_end(&body).is_some_and(|end| end == body.len())
        }
        Framing::Close => false,
    };
    if matches!(framing, Framing::Chunked) {
        body = dechunk(&body);
    }
    Ok(((status, headers, body), reusable))
}

/// Where a whole chunked body (its last chunk and trailer included) ends,
/// when it has all come.
fn chunked_end(b: &[u8]) -> Option<usize> {
    let line = |at: usize| -> Option<usize> {
        b.get(at..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| at + p)
    };
    let mut at = 0;
    loop {
        let eol = line(at)?;
        let size = std::str::from_utf8(&b[at..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())?;
        at = eol + 2;
        if size == 0 {
            loop {
                let eol = line(at)?;
                let empty = eol == at;
                at = eol + 2;
                if empty {
                    return Some(at);
                }
            }
        }
        at = at.checked_add(size)?.checked_add(2)?;
        if at > b.len() {
            return None;
        }
    }
}

/// A chunked body's data (what arrived of it).
fn dechunk(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = b;
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        let data = &rest[eol + 2..];
        out.extend_from_slice(&data[..size.min(data.len())]);
        rest = data.get(size + 2..).unwrap_or_default();
    }
    out
}

/// A stream check: a TCP connection and the match's exchange.
async fn stream_check(addr: SocketAddr, hc: &HealthCheck) -> Verdict {
    if hc.udp {
        return udp_check(addr, hc).await;
    }
    let mut s = match tokio::time::timeout(hc.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        _ => return Err("connecting to upstream"),
    };
    stream_exchange(&mut s, hc).await
}

/// What a UDP check sends without a match's `send` (NGINX Plus's words).
const UDP_PROBE: &[u8] = b"nginx health check";

/// A UDP check: a datagram (the match's `send`, else `UDP_PROBE`) on a
/// connected socket. With the match's `expect` the first datagram back
/// must meet it within the timeout; without, the check passes unless an
/// ICMP port unreachable comes back within the timeout (which the
/// connected socket's receive reports as ECONNREFUSED).
async fn udp_check(addr: SocketAddr, hc: &HealthCheck) -> Verdict {
    let any: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = tokio::net::UdpSocket::bind(any)
        .await
        .map_err(|_| "connecting to upstream")?;
    s.connect(addr)
        .await
        .map_err(|_| "connecting to upstream")?;
    let m = hc.matcher.as_deref();
    let probe = m
        .and_then(|m| m.send.as_deref())
        .filter(|b| !b.is_empty())
        .unwrap_or(UDP_PROBE);
    s.send(probe)
        .await
        .map_err(|_| "sending data to upstream")?;
    let expect = m.is_some_and(|m| m.expect.is_some());
    let mut buf = vec![0u8; 65536];
    match tokio::time::timeout(hc.read_timeout, s.recv(&mut buf)).await {
        Err(_) if expect => Err("reading data from upstream"),
        Err(_) => Ok(()),
        Ok(Err(_)) => Err("reading data from upstream"),
        Ok(Ok(n)) => match m {
            Some(m) if !m.stream_ok(&buf[..n]) => Err("checking response of upstream"),
            _ => Ok(()),
        },
    }
}

/// Stream: `send` the match's bytes, then read until `expect` holds (or the
/// peer closes, or the limit). No match: connecting is the check.
async fn stream_exchange(s: &mut TcpStream, hc: &HealthCheck) -> Result<(), &'static str> {
    let Some(m) = &hc.matcher else {
        return Ok(());
    };
    let io = async {
        if let Some(b) = &m.send {
            s.write_all(b)
                .await
                .map_err(|_| "sending data to upstream")?;
        }
        if m.expect.is_none() {
            return Ok(());
        }
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s
                .read(&mut chunk)
                .await
                .map_err(|_| "reading data from upstream")?;
            got.extend_from_slice(&chunk[..n]);
            if m.stream_ok(&got) {
                return Ok(());
            }
            if n == 0 || got.len() >= READ_MAX {
                return Err("checking response of upstream");
            }
        }
    };
    tokio::time::timeout(hc.read_timeout, io)
        .await
        .map_err(|_| "reading data from upstream")?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hc(fails: u32, passes: u32, mandatory: bool) -> HealthCheck {
        HealthCheck {
            fails,
            passes,
            mandatory,
            ..HealthCheck::default()
        }
    }

    #[test]
    fn fails_and_passes_in_a_row() {
        let l = PeerLive::default();
        let c = hc(2, 3, false);
        assert_eq!(apply(&l, true, &c, 10), HEALTHY);
        assert_eq!(apply(&l, false, &c, 20), HEALTHY, "one failure of two");
        assert_eq!(apply(&l, true, &c, 30), HEALTHY);
        assert_eq!(apply(&l, false, &c, 40), HEALTHY);
        assert_eq!(apply(&l, false, &c, 50), UNHEALTHY);
        assert_eq!(l.hc.unhealthy.load(Relaxed), 1);
        assert_eq!(apply(&l, true, &c, 60), UNHEALTHY);
        assert_eq!(apply(&l, true, &c, 70), UNHEALTHY);
        assert_eq!(apply(&l, true, &c, 80), HEALTHY);
        assert_eq!(l.hc.downtime.load(Relaxed), 30);
        assert_eq!(l.hc.checks.load(Relaxed), 8);
        assert_eq!(l.hc.fails.load(Relaxed), 3);
        assert_eq!(l.hc.last_passed.load(Relaxed), 1);
    }

    #[test]
    fn mandatory_first_check_decides() {
        let l = PeerLive::default();
        assert_eq!(apply(&l, false, &hc(3, 1, true), 10), UNHEALTHY);
        let l = PeerLive::default();
        assert_eq!(apply(&l, false, &hc(3, 1, false), 10), UNCHECKED);
    }

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8];
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(msg);
        out
    }

    #[test]
    fn grpc_request_encodes_the_service() {
        assert_eq!(grpc_request(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(grpc_request("a.B"), frame(b"\x0a\x03a.B"));
        let long = "s".repeat(200);
        let r = grpc_request(&long);
        assert_eq!(&r[5..8], &[0x0a, 0xc8, 0x01]);
        assert_eq!(r.len(), 5 + 3 + 200);
    }

    #[test]
    fn grpc_response_status_field() {
        assert_eq!(grpc_serving_status(&frame(b"\x08\x01")), Some(1));
        assert_eq!(grpc_serving_status(&frame(b"\x08\x02")), Some(2));
        assert_eq!(grpc_serving_status(&frame(b"")), Some(0), "absent: UNKNOWN");
        // Unknown fields of every wire type are skipped.
        assert_eq!(
            grpc_serving_status(&frame(
                b"\x10\x96\x01\x19\0\0\0\0\0\0\0\0\x22\x02hi\x2d\0\0\0\0\x08\x01"
            )),
            Some(1)
        );
        // Short, garbled, compressed, hostile: no status.
        for bad in [
            &b""[..],
            &[0, 0, 0][..],
            &[0, 0, 0, 0, 5, 8][..],
            &[1, 0, 0, 0, 2, 8, 1][..],
            &[0, 0xff, 0xff, 0xff, 0xff, 8, 1][..],
            &frame(b"\x08")[..],
            &frame(b"\x0a\x01\x01")[..],
            &frame(b"\x22\xff\xff\xff\xff\x0f")[..],
            &frame(b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")[..],
            &frame(b"\x0b")[..],
        ] {
            assert_eq!(grpc_serving_status(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn grpc_verdicts() {
        let g = GrpcCheck::default();
        let st = |c: &str| vec![("grpc-status".to_string(), c.to_string())];
        let serving = frame(b"\x08\x01");
        assert!(grpc_verdict(&g, 200, &vec![], &serving, &st("0")).is_ok());
        assert!(grpc_verdict(&g, 200, &vec![], &frame(b"\x08\x02"), &st("0")).is_err());
        assert!(grpc_verdict(&g, 200, &vec![], &serving, &st("5")).is_err());
        assert!(grpc_verdict(&g, 200, &vec![], &serving, &vec![]).is_err());
        assert!(grpc_verdict(&g, 503, &vec![], &serving, &st("0")).is_err());
        // Trailers-Only: the status in the headers.
        let g12 = GrpcCheck {
            status: Some(12),
            ..GrpcCheck::default()
        };
        assert!(grpc_verdict(&g12, 200, &st("12"), b"", &vec![]).is_ok());
        assert!(grpc_verdict(&g12, 200, &vec![], &serving, &st("0")).is_err());
    }

    #[test]
    fn chunked_bodies_end() {
        assert_eq!(chunked_end(b"2\r\nok\r\n0\r\n\r\n"), Some(12));
        assert_eq!(chunked_end(b"2\r\nok\r\n0\r\nX-T: 1\r\n\r\n"), Some(20));
        assert_eq!(chunked_end(b"2\r\nok\r\n0\r\n"), None);
        assert_eq!(chunked_end(b"2\r\nok"), None);
        assert_eq!(chunked_end(b"zz\r\n"), None);
        assert_eq!(chunked_end(b"ffffffffffffffff\r\n"), None);
    }

    #[tokio::test]
    async fn responses_say_whether_the_connection_goes_on() {
        let read = |raw: &'static [u8]| async move {
            let mut r = raw;
            read_response(&mut r).await.map(|((s, _, b), k)| (s, b, k))
        };
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await,
            Ok((200, b"ok".to_vec(), true))
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await,
            Ok((200, b"ok".to_vec(), false))
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
                .await,
            Ok((200, b"ok".to_vec(), true))
        );
        assert_eq!(
            read(b"HTTP/1.1 204 No\r\n\r\n").await,
            Ok((204, Vec::new(), true))
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\n\r\nto the end").await,
            Ok((200, b"to the end".to_vec(), false))
        );
        assert_eq!(
            read(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok").await,
            Ok((200, b"ok".to_vec(), false))
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok").await,
            Ok((200, b"ok".to_vec(), false)),
            "short body"
        );
    }

    #[test]
    fn check_requests() {
        let mut c = HealthCheck {
            uri: "/h".into(),
            host: "b.test".into(),
            headers: vec![("X-A".into(), "1".into())],
            ..HealthCheck::default()
        };
        assert_eq!(
            h1_request(&c, false),
            "GET /h HTTP/1.1\r\nHost: b.test\r\nX-A: 1\r\nUser-Agent: sluice health check\r\nConnection: close\r\n\r\n"
        );
        c.headers.push(("User-Agent".into(), "me".into()));
        assert_eq!(
            h1_request(&c, true),
            "GET /h HTTP/1.1\r\nHost: b.test\r\nX-A: 1\r\nUser-Agent: me\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn udp_checks() {
        let echo = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let at = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut b = [0u8; 512];
            while let Ok((n, from)) = echo.recv_from(&mut b).await {
                let reply: &[u8] = if &b[..n] == b"PING" { b"PONG" } else { b"HUH" };
                let _ = echo.send_to(reply, from).await;
            }
        });
        let closed = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            s.local_addr().expect("addr")
        };
        let mut hc = HealthCheck {
            stream: true,
            udp: true,
            read_timeout: Duration::from_millis(300),
            ..HealthCheck::default()
        };
        assert_eq!(udp_check(at, &hc).await, Ok(()), "no ICMP: up");
        assert!(udp_check(closed, &hc).await.is_err(), "port unreachable");
        let m = |expect: &str| crate::conf::model::Match {
            name: "m".into(),
            status: None,
            headers: Vec::new(),
            body: Vec::new(),
            send: Some(b"PING".to_vec()),
            expect: Some(crate::conf::health::Expect::Text(
                expect.as_bytes().to_vec(),
            )),
            src: crate::conf::Src {
                file: None,
                line: 1,
            },
        };
        hc.matcher = Some(Arc::new(m("PONG")));
        assert_eq!(udp_check(at, &hc).await, Ok(()));
        hc.matcher = Some(Arc::new(m("NOPE")));
        assert_eq!(
            udp_check(at, &hc).await,
            Err("checking response of upstream")
        );
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk(b"2\r\nok\r\n3;x\r\n!!!\r\n0\r\n\r\n"),
            b"ok!!!".to_vec()
        );
    }
}
