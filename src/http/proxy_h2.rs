//! The proxy over HTTP/2 (`grpc_pass`, `proxy_http_version 2`): the same
//! plan and attempt engine as `proxy::run`, each attempt one stream on the
//! upstream's HTTP/2 connection set (`upstream::h2set`). The request body
//! goes as it comes (flow control respected, trailers passed) and is kept
//! for a retry while it fits `client_body_buffer_size`; the response
//! streams back with its trailers. A stream the peer never processed
//! (after its GOAWAY, or refused) goes to another connection without
//! counting a failure. With `grpc_next_upstream unavailable` (or
//! `grpc_status=`) a Trailers-Only answer with that status fails the peer
//! over; a gRPC request that gets no answer gets a Trailers-Only one.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::proxy::{Asking, filter_response_headers, record, redirect_headers, tls_for_request};
use super::proxy_body::UpstreamBodyError;
use super::proxy_plan::{Plan, body_failed_at, body_timed_out_at, next_upstream, plan};
use super::response::{self, BoxError};
use super::vars::{Attempt, Req, UpstreamLog};
use super::{ClientBody, Reply};
use crate::conf::model::{NextUpstream, PeerAddr, ProxyPass};
use crate::log::Level;
use crate::upstream::attempt::{Attempts, Connector, Failure, Kind};
use crate::upstream::body::Payload;
use crate::upstream::h2set::{H2Sets, Opener, Slot};
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers, UpstreamRt};

/// Request headers never sent over HTTP/2 (connection-specific), whatever
/// sets them; `te` only as `trailers`.
const NOT_OVER_H2: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
];

/// The HTTP/2 connector: a slot on the set's best connection, else one
/// waited for (or a connection opened) within the connect timeout.
struct H2Cache {
    ups: Arc<UpstreamRt>,
    peers: Arc<Peers>,
    opener: Opener,
}

impl Connector for H2Cache {
    type Conn = Slot;

    fn cached(&self, addr: &PeerAddr) -> Option<Slot> {
        self.ups.h2.take(&self.opener.key(addr))
    }

    fn open(
        &self,
        addr: PeerAddr,
    ) -> impl std::future::Future<Output = Result<Slot, Failure>> + Send + 'static {
        H2Sets::acquire(
            self.ups.h2.clone(),
            addr,
            self.opener.clone(),
            self.ups.reg.clone(),
            self.peers.clone(),
        )
    }
}

/// How the upstream's connections to `ups` are opened for a location.
pub(crate) fn opener(
    ups: &UpstreamRt,
    conf: &crate::conf::loc::LocConf,
    tls: Option<crate::upstream::tls::Tls>,
) -> Opener {
    Opener {
        timeout: conf.proxy_connect_timeout,
        tls,
        ping: ups.cfg.ping,
        keepalive: conf.proxy_socket_keepalive,
        target: ups.cfg.keepalive.min.max(1),
        keepalive_time: ups.cfg.keepalive.clone(),
        head_max: conf.proxy_buffer_size,
    }
}

/// An h2 error of an upstream's connection or stream, in nginx's words
/// (its grpc module's where it has them): h2 found the upstream's frames at
/// fault, the upstream reset the stream or sent GOAWAY, or it closed.
fn upstream_error(e: &h2::Error) -> Failure {
    if e.is_library() {
        return Failure::upstream(
            Kind::InvalidHeader,
            format!("upstream sent invalid HTTP/2 ({e})"),
        );
    }
    let code = e.reason().map_or(0, u32::from);
    let text = if e.is_remote() && e.is_reset() {
        format!("upstream rejected request with error {code}")
    } else if e.is_remote() && e.is_go_away() {
        format!("upstream sent goaway with error {code}")
    } else {
        format!("upstream prematurely closed connection ({e})")
    };
    Failure::upstream(Kind::Closed, text)
}

/// A gRPC request (`content-type: application/grpc...`).
fn is_grpc(r: &Req) -> bool {
    r.headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A gRPC request that got no answer gets a Trailers-Only one: status
/// 200, `grpc-status` 14 (UNAVAILABLE) for 502 and 503, 4
/// (DEADLINE_EXCEEDED) for 504, no body.
pub(super) fn grpc_error(r: &Req, reply: Reply) -> Reply {
    let Reply::Status(code @ (502..=504)) = reply else {
        return reply;
    };
    if !is_grpc(r) {
        return reply;
    }
    let (status, message) = match code {
        504 => ("4", "upstream timed out"),
        _ => ("14", "upstream unavailable"),
    };
    let mut resp = Response::new(response::full(Bytes::new()));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from_static(status));
    h.insert("grpc-message", HeaderValue::from_static(message));
    h.insert(
        header::SERVER,
        response::server_header(r.conf.server_tokens),
    );
    Reply::Full(resp)
}

/// The request as every attempt sends it: `:authority` from
/// `proxy_set_header Host` (`grpc_set_header`), else the client's `Host`
/// for gRPC, else `$proxy_host`; the configured headers, then the client's,
/// less the connection-specific ones.
fn request_head(r: &Req, pp: &ProxyPass, uri: &str, length: Option<u64>) -> Option<Request<()>> {
    let conf = &r.conf;
    let user_sets = |n: &[u8]| {
        conf.proxy_set_header
            .iter()
            .any(|(h, _)| h.as_bytes().eq_ignore_ascii_case(n))
    };
    let mut authority = if pp.grpc {
        r.headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .unwrap_or_else(|| r.proxy_host.to_string())
    } else {
        r.proxy_host.to_string()
    };
    let mut h = HeaderMap::new();
    let passes = |name: &[u8], value: &[u8]| {
        let lower = name.to_ascii_lowercase();
        if NOT_OVER_H2.iter().any(|n| n.as_bytes() == lower) {
            return false;
        }
        lower != b"te" || value.eq_ignore_ascii_case(b"trailers")
    };
    for (name, t) in &conf.proxy_set_header {
        let v = r.eval(t);
        if v.is_empty() {
            continue;
        }
        if name.eq_ignore_ascii_case("host") {
            authority = v;
            continue;
        }
        if !passes(name.as_bytes(), v.as_bytes()) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&crate::octets::bytes(&v)),
        ) {
            h.append(n, v);
        }
    }
    if conf.proxy_pass_request_headers {
        for (name, value) in r.headers.iter() {
            if !passes(name, value.as_bytes())
                || (!conf.proxy_set_header.is_empty() && user_sets(name))
            {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                h.append(n, v);
            }
        }
    }
    if let Some(n) = length {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    let scheme = if pp.ssl { "https" } else { "http" };
    // `:path` takes no raw byte: one that is not UTF-8 goes encoded.
    let uri = crate::octets::escaped(uri);
    let target: http::Uri = format!("{scheme}://{authority}{uri}").parse().ok()?;
    let mut req = Request::new(());
    *req.method_mut() = super::proxy_plan::upstream_method(r);
    *req.uri_mut() = target;
    *req.version_mut() = http::Version::HTTP_2;
    *req.headers_mut() = h;
    Some(req)
}

pub(crate) async fn run(
    r: &mut Req,
    ups: Arc<UpstreamRt>,
    pp: &ProxyPass,
    body: ClientBody,
    shared: &Arc<super::Shared>,
) -> Reply {
    let mut intercepted = false;
    let reply = attempts(r, ups, pp, body, shared, &mut intercepted).await;
    // An upstream's own error status that `error_page` takes over is an
    // answer: its page goes to the client, as nginx's, not a gRPC status.
    if intercepted {
        return reply;
    }
    grpc_error(r, reply)
}

/// What the body sender reports when it is done.
struct BodySent {
    /// The whole body, when it fitted `client_body_buffer_size`: a retry
    /// sends it again.
    kept: Option<Bytes>,
}

enum BodyBroken {
    /// The client's side failed (logged): the status to answer with.
    Client(u16),
    /// The upstream's side failed; with the client's whole body when it
    /// had all arrived within `client_body_buffer_size` (another attempt
    /// may send it).
    Upstream(Failure, Option<Bytes>),
}

/// Where an attempt's request body comes from.
enum Source {
    /// Read whole before (or kept from an earlier attempt).
    Whole(Payload),
    /// The client's, as it comes.
    Client(super::inbound::ReqBody),
}

async fn attempts(
    r: &mut Req,
    ups: Arc<UpstreamRt>,
    pp: &ProxyPass,
    body: ClientBody,
    shared: &Arc<super::Shared>,
    intercepted_status: &mut bool,
) -> Reply {
    let mut plan: Plan = match plan(r, pp, body).await {
        Ok(p) => p,
        Err(status) => return Reply::Status(status),
    };
    let conf = r.conf.clone();
    let policy = next_upstream(r);
    // As nginx's log lines name the upstream.
    let scheme = match (pp.grpc, pp.ssl) {
        (true, false) => "grpc",
        (true, true) => "grpcs",
        (false, false) => "http",
        (false, true) => "https",
    };
    let uri = plan.uri.clone();
    let mut attempts = Attempts::new(
        &ups,
        policy,
        &Asking {
            r,
            uri: &uri,
            scheme,
        },
    )
    .await;
    {
        let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
        log.queued = Some(attempts.queued);
        log.upstream(&ups);
    }
    let snap = attempts.snap.clone();
    let cache = H2Cache {
        ups: ups.clone(),
        peers: snap.clone(),
        opener: opener(&ups, &conf, tls_for_request(r, pp, shared)),
    };
    // The body: whole, or the client's as it comes (then kept, if it fits,
    // for another attempt).
    let mut source = match plan.stream.take() {
        Some(s) => Some(Source::Client(s.body)),
        None => Some(Source::Whole(std::mem::take(&mut plan.body))),
    };
    let whole = match &source {
        Some(Source::Whole(p)) => Some(p.clone()),
        _ => None,
    };
    let length = match (&source, &r.headers.get(header::CONTENT_LENGTH)) {
        (Some(Source::Whole(p)), _) => Some(p.len()).filter(|n| *n > 0 || r.method != "GET"),
        (_, Some(v)) => crate::h1::body::content_length(v.as_bytes()),
        _ => None,
    };
    let Some(head) = request_head(r, pp, &uri, length) else {
        return Reply::Status(400);
    };
    let url = |name: &str| format!("{scheme}://{name}{uri}");
    // Streams the peer never processed, sent again for free: at most 4
    // times when the peer had refused them all (it may refuse every
    // stream), at most 64 when a graceful GOAWAY kept others (under load a
    // stream can meet several connections that each end after so many).
    let (mut stale_left, mut goaway_left): (u32, u32) = (4, 64);
    loop {
        let connected = attempts
            .connect(
                &cache,
                &mut Asking {
                    r,
                    uri: &uri,
                    scheme,
                },
            )
            .await;
        let mut c = match connected {
            Ok(c) => c,
            Err(status) => return Reply::Status(status),
        };
        let connect_time = crate::net::clock::since(c.began);
        let ex = exchange(&c.conn, r, &head, source.take()).await;
        let (resp, state, head_wire) = match ex {
            Ok(x) => x,
            Err((Failed::Client(status), _)) => {
                c.held.done();
                attempts.release(c.id, Outcome::Ok, || r.log_context(Some(&url(&c.name))));
                record(
                    r,
                    Attempt {
                        addr: c.name.clone(),
                        connect: Some(connect_time),
                        ..Attempt::default()
                    },
                );
                return Reply::Status(status);
            }
            Err((
                Failed::Upstream {
                    f,
                    stage,
                    unprocessed,
                },
                back,
            )) => {
                // Kept for another attempt: the whole body, or what the
                // sender kept of the client's.
                source = back;
                let can_retry = source.is_some();
                // A peer that refuses every stream is not retried for ever.
                let stale = unprocessed && can_retry && {
                    let left = if c.conn.state.processed_some() {
                        &mut goaway_left
                    } else {
                        &mut stale_left
                    };
                    let free = *left > 0;
                    *left = left.saturating_sub(1);
                    free
                };
                let level = if stale { Level::Info } else { Level::Error };
                let ctx = r.log_context(Some(&url(&c.name)));
                crate::log_conn!(level, r.conn.number, "{} while {}{}", f.text, stage, ctx);
                c.held.done();
                let outcome = if stale {
                    Outcome::Next
                } else {
                    Outcome::Failed
                };
                attempts.release(c.id, outcome, || ctx);
                if stale {
                    attempts.stale();
                }
                record(
                    r,
                    Attempt {
                        addr: c.name.clone(),
                        status: Some(f.status()),
                        connect: Some(connect_time),
                        ..Attempt::default()
                    },
                );
                if can_retry && (stale || attempts.retry(f.condition(), !unprocessed)) {
                    continue;
                }
                return Reply::Status(f.status());
            }
        };
        let status = resp.status().as_u16();
        snap.responded(c.id, status);
        let answered = Attempt {
            addr: c.name.clone(),
            status: Some(status),
            connect: Some(connect_time),
            header: Some(crate::net::clock::since(c.began)),
            sent: super::h2_wire::request(&head, whole.as_ref().map(Payload::len)),
            received: head_wire,
            ..Attempt::default()
        };
        // Another try needs the body again: whole, or kept whole.
        let again = whole.is_some()
            || match &state {
                BodyState::Kept(k) => k.is_some(),
                BodyState::Going(t) => t.is_finished(),
            };
        let by_status = NextUpstream::for_status(status);
        if let Some(bits) = by_status
            .or_else(|| trailers_only_status(&resp))
            .filter(|_| again)
        {
            // A Trailers-Only gRPC status: by gRPC's rules the call was
            // not processed, so it may go on even for a POST.
            if attempts.retry(bits, by_status.is_some()) {
                let next = match (&whole, state) {
                    (Some(p), _) => Some(Source::Whole(p.clone())),
                    (None, BodyState::Kept(k)) => k.map(|k| Source::Whole(Payload::Mem(k))),
                    (None, BodyState::Going(t)) => match t.await {
                        Ok(Ok(BodySent { kept: Some(k), .. })) => {
                            Some(Source::Whole(Payload::Mem(k)))
                        }
                        _ => None,
                    },
                };
                let outcome = if bits == NextUpstream::HTTP_403 || bits == NextUpstream::HTTP_404 {
                    Outcome::Next
                } else {
                    Outcome::Failed
                };
                if by_status.is_none() {
                    crate::log_conn!(
                        Level::Error,
                        r.conn.number,
                        "upstream answered {} while reading response header from upstream{}",
                        describe(&resp),
                        r.log_context(Some(&url(&c.name)))
                    );
                }
                c.held.done();
                attempts.release(c.id, outcome, || r.log_context(Some(&url(&c.name))));
                // A gRPC status that fails the peer is logged as the 502 it
                // counts as (the HTTP status was 200).
                let status = if by_status.is_none() {
                    Some(502)
                } else {
                    answered.status
                };
                record(r, Attempt { status, ..answered });
                if let Some(next) = next {
                    source = Some(next);
                    continue;
                }
                return Reply::Status(502);
            }
        }
        let sender = match state {
            BodyState::Going(t) => Some(t),
            BodyState::Kept(_) => None,
        };
        let (parts, recv) = resp.into_parts();
        let intercepted = conf.proxy_intercept_errors
            && status >= 300
            && conf.error_page.iter().any(|p| p.codes.contains(&status));
        if intercepted {
            c.held.finish(Outcome::Ok);
            record(r, answered);
            *intercepted_status = true;
            return Reply::Status(status);
        }
        let mut parts = parts;
        parts.version = http::Version::HTTP_11;
        {
            let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
            log.attempts.push(answered);
        }
        // `sticky`: the cookie, and the session to learn.
        let learn = match ups.cfg.sticky {
            Some(_) => {
                let (sid, session) = (attempts.sid(c.id), attempts.session.clone());
                let raw = crate::h1::head::Headers::from_map(&parts.headers);
                super::proxy::sticky_response(r, &ups, &mut parts.headers, &raw, sid, session)
            }
            None => None,
        };
        redirect_headers(r, pp, &mut parts.headers);
        super::proxy_cookie::rewrite(r, &mut parts.headers);
        filter_response_headers(
            &mut parts.headers,
            &conf.proxy_hide_header,
            &conf.proxy_pass_header,
            conf.server_tokens,
        );
        c.held.done();
        let ended = recv.is_end_stream();
        let body = H2Body {
            recv,
            slot: Some(c.conn),
            peer: Some((snap.clone(), c.id)),
            log: r.upstream.clone(),
            attempt_start: c.began,
            received: 0,
            wire: head_wire,
            read_timeout: conf.proxy_read_timeout,
            timer: None,
            data_done: ended,
            ended: false,
            url: url(&c.name),
            _sender: sender,
            learn,
            // As over HTTP/1: nginx limits the reads only when it buffers.
            limit: if conf.proxy_buffering {
                let rate = crate::conf::rate::size(conf.proxy_limit_rate.as_ref(), |t| r.eval(t));
                super::rate::Bucket::new(rate, 0)
            } else {
                None
            },
        };
        return Reply::Full(Response::from_parts(parts, body.boxed()));
    }
}

/// A Trailers-Only answer's gRPC status as a next-upstream condition: a
/// `grpc-status` in the response head (HEADERS with END_STREAM, or a head
/// that carries it, as only a Trailers-Only answer does; what body follows
/// is dropped).
fn trailers_only_status(resp: &Response<h2::RecvStream>) -> Option<u32> {
    let code: u32 = resp
        .headers()
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    NextUpstream::for_grpc_status(code)
}

/// An answer for the error log: its status, and its gRPC status if any.
fn describe(resp: &Response<h2::RecvStream>) -> String {
    match resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
    {
        Some(g) => format!("with grpc-status {g}"),
        None => format!("{}", resp.status().as_u16()),
    }
}

/// Why an exchange ended without a response head.
enum Failed {
    Client(u16),
    Upstream {
        f: Failure,
        stage: &'static str,
        /// The peer never processed the stream (refused, or after its
        /// GOAWAY): another connection may take it at no cost.
        unprocessed: bool,
    },
}

type Sender = tokio::task::JoinHandle<Result<BodySent, BodyBroken>>;

/// The request body once the response head came.
enum BodyState {
    /// Still going (a gRPC stream), in its task.
    Going(Sender),
    /// All gone; the client's kept whole if it fitted.
    Kept(Option<Bytes>),
}

const SENDING: &str = "sending request to upstream";
const READING: &str = "reading response header from upstream";

/// Opens the stream, starts the body on its way (a task of its own: the
/// response may come before the body has all gone, as in a gRPC stream),
/// and waits for the response head (`proxy_read_timeout` once the body has
/// gone). Err also gives back the body source when it can go again.
async fn exchange(
    slot: &Slot,
    r: &Req,
    head: &Request<()>,
    source: Option<Source>,
) -> Result<(Response<h2::RecvStream>, BodyState, u64), (Failed, Option<Source>)> {
    let conf = &r.conf;
    let empty = match &source {
        Some(Source::Whole(p)) => p.is_empty(),
        Some(Source::Client(_)) => false,
        None => true,
    };
    // The stream (`id`, once it has one) failed with `e`. The peer never
    // processed it when it had no stream yet, came after the peer's GOAWAY,
    // or was refused by the peer (h2 refuses nothing of its own accord that
    // the peer did not process).
    let failed = |e: &h2::Error, id: Option<u32>| Failed::Upstream {
        f: upstream_error(e),
        stage: READING,
        unprocessed: id.is_none_or(|id| slot.state.refused(id))
            || (e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM)),
    };
    let mut req = Request::new(());
    *req.method_mut() = head.method().clone();
    *req.uri_mut() = head.uri().clone();
    *req.version_mut() = http::Version::HTTP_2;
    *req.headers_mut() = head.headers().clone();
    let ready = match crate::net::clock::timeout(conf.proxy_send_timeout, slot.send.clone().ready())
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err((failed(&e, None), source)),
        Err(_) => {
            let f = Failure::upstream(
                Kind::Timeout,
                "upstream timed out (110: Connection timed out)",
            );
            return Err((
                Failed::Upstream {
                    f,
                    stage: SENDING,
                    unprocessed: false,
                },
                source,
            ));
        }
    };
    let mut ready = ready;
    let (resp, tx) = match ready.send_request(req, empty) {
        Ok(x) => x,
        Err(e) => return Err((failed(&e, None), source)),
    };
    let id = resp.stream_id().as_u32();
    // The whole body stays here for another attempt; the client's goes
    // with the task.
    let (kept_whole, sender) = match source {
        Some(Source::Whole(p)) if !p.is_empty() => {
            let task = tokio::spawn(send_whole(tx, p.clone(), conf.proxy_send_timeout));
            (Some(p), Some(task))
        }
        Some(Source::Whole(p)) => (Some(p), None),
        Some(Source::Client(b)) => {
            let limits = Limits {
                send_timeout: conf.proxy_send_timeout,
                body_timeout: conf.client_body_timeout,
                max: conf.client_max_body_size,
                keep: conf.client_body_buffer_size,
                number: r.conn.number,
                ctx: r.log_context(None),
            };
            (None, Some(tokio::spawn(send_client(tx, b, limits))))
        }
        None => (None, None),
    };
    let no_body = sender.is_none();
    let back = |kept: Option<Bytes>| -> Option<Source> {
        match (&kept_whole, kept) {
            (Some(p), _) => Some(Source::Whole(p.clone())),
            (None, Some(k)) => Some(Source::Whole(Payload::Mem(k))),
            (None, None) if no_body => Some(Source::Whole(Payload::default())),
            _ => None,
        }
    };
    let mut resp = resp;
    let mut sender = sender;
    let mut body_done = sender.is_none();
    let mut kept: Option<Bytes> = None;
    let mut deadline = crate::net::clock::deadline(conf.proxy_read_timeout);
    loop {
        let waiting_body = !body_done;
        tokio::select! {
            // The response first: a peer that answered and then reset the
            // stream (RST_STREAM NO_ERROR: it needs no more of the body)
            // fails the body's sender at the same time, and its complete
            // response must not be dropped for that (RFC 9113, 8.1).
            biased;
            got = &mut resp => {
                return match got {
                    Ok(resp) => {
                        // The response head as the upstream sent it, before
                        // any header is hidden from the client: within
                        // proxy_buffer_size (grpc_buffer_size), as nginx's
                        // grpc module has it read into that buffer.
                        let wire = super::h2_wire::response_head(resp.status(), resp.headers());
                        if wire > conf.proxy_buffer_size {
                            // Dropped: its stream is reset.
                            drop(resp);
                            let f = Failure::upstream(Kind::InvalidHeader, "upstream sent too big header");
                            return Err((Failed::Upstream { f, stage: READING, unprocessed: false }, back(kept.take())));
                        }
                        Ok((resp, match sender {
                            Some(t) => BodyState::Going(t),
                            None => BodyState::Kept(kept.take()),
                        }, wire))
                    }
                    // Nothing went for certain only when refused.
                    Err(e) => {
                        // The stream's end fails its sender too: given a
                        // turn, it hands back the body if it all came.
                        let mut kept = kept.take();
                        if let Some(t) = sender.take().filter(|_| kept.is_none()) {
                            tokio::task::yield_now().await;
                            if t.is_finished() {
                                kept = match t.await {
                                    Ok(Ok(sent)) => sent.kept,
                                    Ok(Err(BodyBroken::Upstream(_, whole))) => whole,
                                    _ => None,
                                };
                            }
                        }
                        Err((failed(&e, Some(id)), back(kept)))
                    }
                };
            }
            done = async { sender.as_mut().expect("checked").await }, if waiting_body => {
                body_done = true;
                sender = None;
                match done {
                    Ok(Ok(s)) => {
                        kept = s.kept;
                        deadline = crate::net::clock::deadline(conf.proxy_read_timeout);
                    }
                    Ok(Err(BodyBroken::Client(status))) => {
                        return Err((Failed::Client(status), None));
                    }
                    Ok(Err(BodyBroken::Upstream(f, whole))) => {
                        let refused = slot.state.refused(id);
                        return Err((
                            Failed::Upstream { f, stage: SENDING, unprocessed: refused },
                            back(whole),
                        ));
                    }
                    Err(_) => {
                        let f = Failure::upstream(Kind::Error, "request body task ended");
                        return Err((Failed::Upstream { f, stage: SENDING, unprocessed: false }, None));
                    }
                }
            }
            () = tokio::time::sleep_until(deadline), if !waiting_body => {
                let f = Failure::upstream(Kind::Timeout, "upstream timed out (110: Connection timed out)");
                return Err((Failed::Upstream { f, stage: READING, unprocessed: false }, back(kept.take())));
            }
        }
    }
}

/// Sends `data` on the stream as the peer's flow control lets it, each
/// wait for room within `timeout`; `end`: the stream ends with it.
async fn send_data(
    tx: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    timeout: Duration,
) -> Result<(), Failure> {
    let closed = |e: h2::Error| {
        Failure::upstream(
            Kind::Closed,
            format!("upstream closed the stream while the request was sent ({e})"),
        )
    };
    if data.is_empty() {
        return if end {
            tx.send_data(data, true).map_err(closed)
        } else {
            Ok(())
        };
    }
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let room = crate::net::clock::timeout(timeout, poll_fn(|cx| tx.poll_capacity(cx))).await;
        let n = match room {
            Err(_) => {
                return Err(Failure::upstream(
                    Kind::Timeout,
                    "upstream timed out (110: Connection timed out)",
                ));
            }
            Ok(None) => {
                return Err(Failure::upstream(
                    Kind::Closed,
                    "upstream closed the stream while the request was sent",
                ));
            }
            Ok(Some(Err(e))) => return Err(closed(e)),
            Ok(Some(Ok(n))) => n,
        };
        if n == 0 {
            continue;
        }
        let piece = data.split_to(n.min(data.len()));
        tx.send_data(piece, end && data.is_empty())
            .map_err(closed)?;
    }
    Ok(())
}

/// Sends a body read whole before.
async fn send_whole(
    mut tx: h2::SendStream<Bytes>,
    p: Payload,
    timeout: Duration,
) -> Result<BodySent, BodyBroken> {
    let mut b = p.body();
    let mut next = b
        .next_chunk()
        .map_err(|e| BodyBroken::Upstream(Failure::upstream(Kind::Error, e.to_string()), None))?;
    while let Some(d) = next.take() {
        next = b.next_chunk().map_err(|e| {
            BodyBroken::Upstream(Failure::upstream(Kind::Error, e.to_string()), None)
        })?;
        send_data(&mut tx, d, next.is_none(), timeout)
            .await
            .map_err(|f| BodyBroken::Upstream(f, None))?;
    }
    Ok(BodySent { kept: None })
}

/// The limits the client's body is read under, and the request's log
/// context for its errors.
struct Limits {
    send_timeout: Duration,
    body_timeout: Duration,
    max: u64,
    keep: u64,
    number: u64,
    ctx: String,
}

/// Sends the client's body as it comes (`client_body_timeout` between
/// reads, `client_max_body_size`), and its trailers; keeps a copy while it
/// fits `client_body_buffer_size`.
async fn send_client(
    mut tx: h2::SendStream<Bytes>,
    mut body: super::inbound::ReqBody,
    l: Limits,
) -> Result<BodySent, BodyBroken> {
    body.limit(l.max);
    let mut total: u64 = 0;
    let mut kept: Option<Vec<Bytes>> = Some(Vec::new());
    loop {
        let next = crate::net::clock::timeout(l.body_timeout, body.frame()).await;
        let frame = match next {
            Err(_) => return Err(BodyBroken::Client(body_timed_out_at(l.number, &l.ctx))),
            Ok(None) => {
                if let Err(f) = send_data(&mut tx, Bytes::new(), true, l.send_timeout).await {
                    return Err(BodyBroken::Upstream(f, whole(kept)));
                }
                break;
            }
            Ok(Some(Err(e))) => {
                let e: BoxError = e;
                return Err(BodyBroken::Client(body_failed_at(l.number, &l.ctx, &e)));
            }
            Ok(Some(Ok(f))) => f,
        };
        let d = match frame.into_data() {
            Ok(d) => d,
            Err(f) => {
                if let Ok(t) = f.into_trailers() {
                    tx.send_trailers(t).map_err(|e| {
                        BodyBroken::Upstream(Failure::upstream(Kind::Closed, e.to_string()), None)
                    })?;
                    // Trailers end the body: the copy cannot carry them.
                    kept = None;
                    break;
                }
                continue;
            }
        };
        if d.is_empty() {
            continue;
        }
        total += d.len() as u64;
        if let Some(k) = &mut kept {
            if total <= l.keep {
                k.push(d.clone());
            } else {
                kept = None;
            }
        }
        if let Err(f) = send_data(&mut tx, d, false, l.send_timeout).await {
            // The rest of the body, if it is already here: kept whole, it
            // can go to another attempt (a stream the peer refused). Not
            // waited for: a streaming call's client may send no more until
            // it is answered.
            let rest = rest_at_hand(&mut body, kept, total, l.keep).await;
            return Err(BodyBroken::Upstream(f, rest));
        }
    }
    Ok(BodySent { kept: whole(kept) })
}

/// The pieces of a body kept, as one.
fn whole(kept: Option<Vec<Bytes>>) -> Option<Bytes> {
    kept.map(|k| Bytes::from(k.concat()))
}

/// The client's body completed with what has already arrived, without
/// waiting for more: the whole body when it ends within `keep`, else None.
async fn rest_at_hand(
    body: &mut super::inbound::ReqBody,
    mut kept: Option<Vec<Bytes>>,
    mut total: u64,
    keep: u64,
) -> Option<Bytes> {
    loop {
        let k = kept.as_mut()?;
        // A zero timeout still polls the body once: what is there is taken.
        match tokio::time::timeout(Duration::ZERO, body.frame()).await {
            Ok(None) => return whole(kept),
            Ok(Some(Ok(f))) => match f.into_data() {
                Ok(d) => {
                    total += d.len() as u64;
                    if total > keep {
                        return None;
                    }
                    k.push(d);
                }
                // Trailers: the copy cannot carry them.
                Err(_) => return None,
            },
            Ok(Some(Err(_))) | Err(_) => return None,
        }
    }
}

/// The upstream's response body over HTTP/2: data as it comes (its flow
/// control window given back as it is passed on), then its trailers;
/// `proxy_read_timeout` between frames. At its end the stream's slot is
/// free and the peer released.
struct H2Body {
    recv: h2::RecvStream,
    slot: Option<Slot>,
    peer: Option<(Arc<Peers>, PeerId)>,
    log: Arc<Mutex<UpstreamLog>>,
    attempt_start: Instant,
    received: u64,
    /// The response on the wire as estimated (`h2_wire`): head, DATA
    /// frames, trailers.
    wire: u64,
    read_timeout: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    data_done: bool,
    ended: bool,
    url: String,
    /// The request body still going (a gRPC stream).
    _sender: Option<Sender>,
    /// `sticky learn` without `header`: learned when the body ended well.
    learn: Option<Box<dyn FnOnce() + Send + Sync>>,
    /// `proxy_limit_rate`: the next DATA frame is read only when there is
    /// room, so the stream's window fills and the upstream waits.
    limit: Option<super::rate::Bucket>,
}

impl H2Body {
    fn finish(&mut self, complete: bool) {
        self.slot = None;
        let Some((peers, id)) = self.peer.take() else {
            return;
        };
        if let Some(learn) = self.learn.take().filter(|_| complete) {
            learn();
        }
        if let Some(a) = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempts
            .last_mut()
        {
            a.response = Some(crate::net::clock::since(self.attempt_start));
            a.length = Some(self.received);
            a.received = self.wire;
        }
        if self.received > 0 {
            peers
                .get(id)
                .live
                .received
                .fetch_add(self.received, std::sync::atomic::Ordering::Relaxed);
        }
        peers.release(id, Outcome::Ok, now_ms());
    }

    /// No frame within `proxy_read_timeout`.
    fn timed_out(&mut self) -> BoxError {
        self.finish(false);
        self.ended = true;
        Box::new(UpstreamBodyError {
            message: "upstream timed out (110: Connection timed out) while reading upstream".into(),
            url: self.url.clone(),
            kind: Kind::Timeout,
        })
    }

    /// The stream failed with `e`: in the words `upstream_error` gives the
    /// head's failures (h2 found the upstream at fault, the upstream reset
    /// the stream or went away, or the connection closed).
    fn broke(&mut self, e: &h2::Error) -> BoxError {
        self.finish(false);
        self.ended = true;
        let f = upstream_error(e);
        Box::new(UpstreamBodyError {
            message: format!("{} while reading upstream", f.text).into(),
            url: self.url.clone(),
            kind: f.kind,
        })
    }

    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let timeout = self.read_timeout;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(crate::net::clock::sleep(timeout)));
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(self.timed_out())));
        }
        Poll::Pending
    }
}

impl HttpBody for H2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if !this.data_done {
            if let Some(b) = this.limit.as_mut() {
                if b.poll_room(cx).is_pending() {
                    // Waiting for the limit, not the upstream: no read
                    // timeout runs.
                    this.timer = None;
                    return Poll::Pending;
                }
            }
            match this.recv.poll_data(cx) {
                Poll::Ready(Some(Ok(d))) => {
                    let _ = this.recv.flow_control().release_capacity(d.len());
                    this.received += d.len() as u64;
                    if let Some(b) = this.limit.as_mut() {
                        b.used(d.len() as u64);
                    }
                    this.wire += d.len() as u64 + super::h2_wire::FRAME_HEAD;
                    this.timer = None;
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(this.broke(&e))));
                }
                Poll::Ready(None) => this.data_done = true,
                Poll::Pending => return this.wait(cx),
            }
        }
        match this.recv.poll_trailers(cx) {
            Poll::Ready(Ok(t)) => {
                this.ended = true;
                if let Some(t) = &t {
                    this.wire += super::h2_wire::header_block(&[], t);
                }
                this.finish(true);
                Poll::Ready(t.map(|t| Ok(Frame::trailers(t))))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(this.broke(&e)))),
            Poll::Pending => this.wait(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || (self.data_done && self.recv.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended || (self.data_done && self.recv.is_end_stream()) {
            return SizeHint::with_exact(0);
        }
        SizeHint::default()
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        let complete = self.ended;
        self.finish(complete);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_errors_are_trailers_only() {
        let mut r = super::super::vars::tests::req();
        r.headers = crate::h1::head::Headers::from_pairs([("content-type", "application/grpc")]);
        for (code, want) in [(502, "14"), (503, "14"), (504, "4")] {
            let Reply::Full(resp) = grpc_error(&r, Reply::Status(code)) else {
                panic!("{code}: not turned into a gRPC answer");
            };
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.headers()["grpc-status"], want);
            assert_eq!(resp.headers()["content-type"], "application/grpc");
            assert_eq!(resp.body().size_hint().exact(), Some(0));
        }
        assert!(matches!(
            grpc_error(&r, Reply::Status(404)),
            Reply::Status(404)
        ));
        r.headers = crate::h1::head::Headers::from_pairs([("content-type", "text/plain")]);
        assert!(matches!(
            grpc_error(&r, Reply::Status(502)),
            Reply::Status(502)
        ));
    }
}
