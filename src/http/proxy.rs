//! The proxy handler (`proxy_pass`): with the request's plan
//! (`proxy_plan`), asks the attempt engine (`upstream::attempt`) for a
//! connected peer (a cached connection or a new one), sends the request,
//! reads the response head under nginx's framing rules, and on a
//! `proxy_next_upstream` condition goes back to the engine for the next
//! peer. The response streams back; its body returns the connection to the
//! keep-alive cache when it ends.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http_body_util::BodyExt;

use super::framing::upstream_framing;
use super::proxy_body::ProxyBody;
use super::proxy_plan::{Plan, next_upstream, plan};
use super::proxy_stream::Broken;
use super::response;
use super::vars::{Attempt, Req};
use super::{ClientBody, Reply};
use crate::conf::model::{NextUpstream, PeerAddr, ProxyPass};
use crate::conf::proxy_more::ignore;
use crate::conf::vars::Template;
use crate::h1::body::{Decoder, Framing};
use crate::h1::head::{AsReceived, Headers, Known, Mapped, Names, Reason, ResponseHead};
use crate::log::Level;
use crate::upstream::attempt::{Attempts, Connected, Connector, Failure, Kind, Requester};
use crate::upstream::h1conn::{self, H1};
use crate::upstream::tls::Tls;
use crate::upstream::{Outcome, Pooled, UpstreamRt};

/// Response headers nginx does not pass from the upstream unless
/// `proxy_pass_header` names them (lowercase, as in a `HeaderMap`).
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
pub(super) fn record(r: &Req, a: Attempt) {
    let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
    log.in_flight = None;
    log.attempts.push(a);
}

/// The client went away while an attempt was under way: the attempt goes
/// into `$upstream_*` as nginx has it (no status, no header time, the time
/// until then as its response time).
pub(super) fn abandoned(r: &Req) {
    let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = log.in_flight.take() {
        log.attempts.push(Attempt {
            addr: f.addr,
            connect: Some(f.connect),
            response: Some(crate::net::clock::since(f.began)),
            sent: f.sent,
            ..Attempt::default()
        });
    }
}

/// The request's TLS to the upstream (`proxy_pass https://`).
pub(super) fn tls_for_request(r: &Req, pp: &ProxyPass, shared: &super::Shared) -> Option<Tls> {
    if !pp.ssl {
        return None;
    }
    // Every location whose proxy_pass may be https has its settings
    // (`conf::http::finish_location`).
    let ssl = r.conf.proxy_ssl.clone()?;
    let name = match &ssl.name {
        Some(t) => r.eval(t),
        None => pp.proxy_host.to_string(),
    };
    Some(Tls::new(shared.upstream_tls.clone(), ssl, &name))
}

/// Opens a connection to a peer within `proxy_connect_timeout`, and makes
/// its TLS handshake (within `proxy_connect_timeout` again, as nginx).
async fn connect(
    addr: &PeerAddr,
    timeout: Duration,
    tls: Option<&Tls>,
    bind: Option<std::net::IpAddr>,
    keepalive: bool,
) -> Result<H1, Failure> {
    let s = crate::net::stream::connect_from(addr, bind, timeout)
        .await
        .map_err(|e| Failure::connect(addr, e))?;
    // `proxy_socket_keepalive on`.
    if let (true, crate::net::stream::Stream::Tcp(t)) = (keepalive, &s) {
        let _ = socket2::SockRef::from(t).set_keepalive(true);
    }
    match tls {
        None => Ok(H1::new(s)),
        Some(t) => t.handshake(addr, s, timeout).await.map(H1::new),
    }
}

/// `proxy_bind` for this request: None when off or empty; Err (logged as
/// nginx logs it) for a value that is no address.
fn local_address(r: &Req) -> Result<Option<std::net::IpAddr>, ()> {
    let crate::conf::proxy_more::Bind::Addr(t) = &r.conf.proxy_bind else {
        return Ok(None);
    };
    let v = r.eval(t);
    if v.is_empty() {
        return Ok(None);
    }
    match v.parse() {
        Ok(ip) => Ok(Some(ip)),
        Err(_) => {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "invalid local address \"{}\"{}",
                v,
                r.log_context(None)
            );
            Err(())
        }
    }
}

/// The keep-alive cache's key besides the peer and location: the TLS
/// settings and the `proxy_bind` address, so that a connection is reused
/// only by a request that would have opened the same one.
fn pool_key(tls: Option<&Tls>, bind: Option<std::net::IpAddr>) -> u64 {
    use std::hash::{Hash, Hasher};
    let key = tls.map_or(0, |t| t.key);
    let Some(ip) = bind else { return key };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ip.hash(&mut h);
    key ^ h.finish()
}

/// Opens a connection for the keep-alive cache: `connect` with its record.
pub(crate) async fn open(
    addr: PeerAddr,
    timeout: Duration,
    max_age: Duration,
    location: usize,
    tls: Option<Tls>,
    bind: Option<std::net::IpAddr>,
    keepalive: bool,
) -> Result<Pooled, Failure> {
    let h1 = connect(&addr, timeout, tls.as_ref(), bind, keepalive).await?;
    let key = pool_key(tls.as_ref(), bind);
    Ok(Pooled::new(
        h1,
        addr,
        crate::net::clock::now(),
        max_age,
        location,
        key,
    ))
}

/// The HTTP proxy's connector: the upstream's keep-alive cache first, new
/// connections with their `keepalive_time` age drawn.
struct Cache {
    ups: Arc<UpstreamRt>,
    location: usize,
    timeout: Duration,
    tls: Option<Tls>,
    /// `proxy_bind`: the local address of new connections.
    bind: Option<std::net::IpAddr>,
    /// `proxy_socket_keepalive`.
    keepalive: bool,
}

impl Connector for Cache {
    type Conn = Pooled;

    fn cached(&self, addr: &PeerAddr) -> Option<Pooled> {
        let key = pool_key(self.tls.as_ref(), self.bind);
        self.ups
            .pool()
            .take(addr, self.location, key, crate::net::clock::now())
    }

    fn caches(&self) -> bool {
        self.ups.pool().caches()
    }

    fn open(
        &self,
        addr: PeerAddr,
    ) -> impl std::future::Future<Output = Result<Pooled, Failure>> + Send + 'static {
        let max_age = self
            .ups
            .cfg
            .keepalive
            .age_limit(crate::upstream::random::next_u64);
        open(
            addr,
            self.timeout,
            max_age,
            self.location,
            self.tls.clone(),
            self.bind,
            self.keepalive,
        )
    }
}

/// A request as the attempt engine sees it: its key, its log context with
/// the upstream URL, and its `$upstream_*` record.
pub(super) struct Asking<'a> {
    pub(super) r: &'a Req,
    pub(super) uri: &'a str,
    /// `http` or `https`.
    pub(super) scheme: &'static str,
}

impl Requester for Asking<'_> {
    fn number(&self) -> u64 {
        self.r.conn.number
    }

    fn hash_text(&self, key: &Template) -> String {
        self.r.eval(key)
    }

    fn client_ip(&self) -> Option<std::net::IpAddr> {
        self.r.client_ip()
    }

    fn context(&self, peer: &str) -> String {
        self.r
            .log_context(Some(&format!("{}://{peer}{}", self.scheme, self.uri)))
    }

    fn record_failed(&mut self, peer: &Arc<str>, f: &Failure, took: Duration) {
        record(
            self.r,
            Attempt {
                addr: peer.clone(),
                status: Some(f.status()),
                response: Some(took),
                ..Attempt::default()
            },
        );
    }
}

pub(crate) async fn run(
    r: &mut Req,
    ups: Arc<UpstreamRt>,
    pp: &ProxyPass,
    location_id: usize,
    body: ClientBody,
    client_upgrade: Option<super::OnUpgrade>,
    shared: &Arc<super::Shared>,
) -> Reply {
    let mut plan = match plan(r, pp, body).await {
        Ok(p) => p,
        Err(status) => return Reply::Status(status),
    };
    let conf = r.conf.clone();
    let policy = next_upstream(r);
    let bind = match local_address(r) {
        Ok(b) => b,
        Err(()) => return Reply::Status(500),
    };
    let cache = Cache {
        ups: ups.clone(),
        location: location_id,
        timeout: conf.proxy_connect_timeout,
        tls: tls_for_request(r, pp, shared),
        bind,
        keepalive: conf.proxy_socket_keepalive,
    };
    let scheme = if conf.fastcgi {
        // nginx names a FastCGI upstream `fastcgi://ADDRESS`, no URI.
        plan.uri = Default::default();
        plan.head = super::fastcgi::request_head(r, &plan.body).into();
        "fastcgi"
    } else if pp.ssl {
        "https"
    } else {
        "http"
    };
    // The peers as this request sees them, for all its tries (a name with
    // no answer yet: wait for it, bounded, not a 502 at once).
    let uri = &plan.uri;
    let mut attempts = Attempts::new(&ups, policy, &Asking { r, uri, scheme }).await;
    {
        let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
        log.queued = Some(attempts.queued);
        log.upstream(&ups);
    }
    let snap = attempts.snap.clone();
    let as_received = !conf.fastcgi && headers_as_received(r, &conf, &ups);
    loop {
        let connected = attempts
            .connect(
                &cache,
                &mut Asking {
                    r,
                    uri: &plan.uri,
                    scheme,
                },
            )
            .await;
        let mut c = match connected {
            Ok(c) => c,
            Err(status) => return Reply::Status(status),
        };
        c.conn.track(&ups.reg, &snap, c.id);
        let connect_time = crate::net::clock::since(c.began);
        r.upstream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .in_flight = Some(super::vars::InFlight {
            addr: c.name.clone(),
            connect: connect_time,
            began: c.began,
            sent: plan.head.len() as u64 + plan.sent(),
        });
        // Only a log line needs the upstream URL.
        let url = |c: &Connected<Pooled>, uri: &str| format!("{scheme}://{}{uri}", c.name);
        let got = if conf.fastcgi {
            super::fastcgi::exchange(&mut c.conn, r, &mut plan, &conf)
                .await
                .map(|(head, out, rest)| (head, Some((out, rest))))
        } else {
            exchange(&mut c.conn, r, &mut plan, &conf, as_received)
                .await
                .map(|head| (head, None))
        };
        let (head, fcgi) = match got {
            Ok(got) => got,
            // The client's body could not be read while it streamed: the
            // attempt ends, the peer did nothing wrong (nginx frees it as
            // after a success), and its connection is not reused.
            Err(Failed::Client(status)) => {
                c.held.done();
                attempts.release(c.id, Outcome::Ok, || {
                    r.log_context(Some(&url(&c, &plan.uri)))
                });
                let (sent, received) = c.conn.h1.wire();
                record(
                    r,
                    Attempt {
                        addr: c.name.clone(),
                        connect: Some(connect_time),
                        response: Some(crate::net::clock::since(c.began)),
                        sent,
                        received,
                        ..Attempt::default()
                    },
                );
                return Reply::Status(status);
            }
            Err(Failed::Upstream(Unanswered { f, unsent, stage })) => {
                let went = !unsent;
                // A body streamed as it arrived cannot be sent again once
                // any of the request went (nginx's rule).
                let last = went && plan.streams();
                // A cached connection the upstream had closed: try again
                // without using up a try, as nginx does, and (unlike nginx)
                // without counting a failure: the peer did nothing wrong, and
                // pick_first must not move away from it.
                let stale = c.cached && f.kind == Kind::Closed && !last;
                let level = if stale { Level::Info } else { Level::Error };
                let ctx = r.log_context(Some(&url(&c, &plan.uri)));
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
                let (sent, received) = c.conn.h1.wire();
                record(
                    r,
                    Attempt {
                        addr: c.name.clone(),
                        status: Some(f.status()),
                        connect: Some(connect_time),
                        response: Some(crate::net::clock::since(c.began)),
                        sent,
                        received,
                        ..Attempt::default()
                    },
                );
                if !last && attempts.retry(f.condition(), went) {
                    continue;
                }
                return Reply::Status(f.status());
            }
        };
        let sent = plan.sent();
        let status = head.status.as_u16();
        snap.responded(c.id, status);
        if sent > 0 {
            snap.get(c.id)
                .live
                .sent
                .fetch_add(sent, std::sync::atomic::Ordering::Relaxed);
        }
        // The attempt's record once the upstream has answered.
        let answered = Attempt {
            addr: c.name.clone(),
            status: Some(status),
            connect: Some(connect_time),
            header: Some(crate::net::clock::since(c.began)),
            sent: c.conn.h1.wire().0,
            received: c.conn.h1.wire().1,
            ..Attempt::default()
        };
        // proxy_next_upstream http_5xx/403/404/429; not for a body that
        // streamed: it went, and is gone.
        if let Some(bits) = NextUpstream::for_status(status).filter(|_| !plan.streams()) {
            if attempts.retry(bits, true) {
                let outcome = if bits == NextUpstream::HTTP_403 || bits == NextUpstream::HTTP_404 {
                    Outcome::Next
                } else {
                    Outcome::Failed
                };
                c.held.done();
                attempts.release(c.id, outcome, || r.log_context(Some(&url(&c, &plan.uri))));
                record(r, answered);
                continue;
            }
        }
        // `sticky`: the answering peer's id and the session the request
        // brought, for the cookie and the learning.
        let sticky = ups
            .cfg
            .sticky
            .as_ref()
            .map(|_| (attempts.sid(c.id), attempts.session.clone()));
        let answer = Answer {
            sticky,
            c,
            head,
            // A request sent with `Connection: close` leaves nothing to reuse.
            asked_close: plan.asks_close,
            record: answered,
            ups: &ups,
            snap: &snap,
            uri: std::mem::take(&mut plan.uri),
            client_upgrade,
            fcgi,
        };
        return respond(r, pp, answer).await;
    }
}

/// Whether the responses to `r` may go on with the upstream's headers as
/// received (`AsReceived`) rather than in a map: the request is an HTTP/1
/// client's own (not a subrequest, whose response other code reads), and
/// its location has nothing that reads or changes a response's headers
/// after the proxy: no `sticky`, `expires`, `gzip`, `charset` or
/// `sub_filter`, no `add_header` of `Last-Modified` or `ETag` (which
/// replace the upstream's; other names are added after its lines), no
/// access log that reads `$sent_http_*`, no challenge kept from an
/// intercepted 401. `proxy_redirect` and `proxy_cookie_*` depend on the
/// head (`rewrites`).
fn headers_as_received(r: &Req, conf: &crate::conf::loc::LocConf, ups: &UpstreamRt) -> bool {
    use crate::conf::expires::{Expires, ExpiresConf};
    let replaces =
        |n: &str| n.eq_ignore_ascii_case("last-modified") || n.eq_ignore_ascii_case("etag");
    let reads_sent = super::access::reads(&conf.access_log, |f| f.sent_http);
    r.version != http::Version::HTTP_2
        && !r.subrequest
        && r.www_authenticate.is_none()
        && ups.cfg.sticky.is_none()
        && matches!(conf.expires, ExpiresConf::Fixed(Expires::Off))
        && !conf.gzip
        && conf.charset.is_none()
        && conf.sub_filter.is_empty()
        && !conf.add_header.iter().any(|h| replaces(&h.name))
        && !reads_sent
}

/// Whether `proxy_redirect` or `proxy_cookie_*` would rewrite a header
/// this head has: such a response's headers go in a map.
fn rewrites(conf: &crate::conf::loc::LocConf, raw: &Headers) -> bool {
    let redirect = conf.proxy_redirect.is_some()
        && (raw.contains_key(header::LOCATION) || raw.contains_key(header::REFRESH));
    let cookie = super::proxy_cookie::rewrites_any(conf) && raw.contains_key(header::SET_COOKIE);
    redirect || cookie
}

/// Sends the request (`proxy_send_timeout` between writes) and reads the
/// response head (`proxy_read_timeout` between reads). A head whose framing
/// could be read two ways, or a switch the client did not ask for, is an
/// invalid header, as nginx has it: passing it on would desync the client
/// connection. The headers that go on are put in the head's map unless
/// `as_received` (`headers_as_received`) and nothing in this head needs
/// one.
async fn exchange(
    conn: &mut Pooled,
    r: &Req,
    plan: &mut Plan,
    conf: &crate::conf::loc::LocConf,
    as_received: bool,
) -> Result<ResponseHead, Failed> {
    use h1conn::Error;
    conn.requests += 1;
    conn.h1
        .send(&plan.head, &plan.body, conf.proxy_send_timeout)
        .await
        .map_err(head_unsent)?;
    // `proxy_request_buffering off`: the body, as it arrives.
    if let Some(stream) = plan.stream.as_mut() {
        match stream.send(&mut conn.h1, r).await {
            Ok(()) => {}
            Err(Broken::Client(status)) => return Err(Failed::Client(status)),
            Err(Broken::Upstream(e)) => return Err(unsent_write(&e)),
        }
    }
    let limit = usize::try_from(conf.proxy_buffer_size).unwrap_or(usize::MAX);
    let mut head = match conn.h1.read_head(conf.proxy_read_timeout, limit).await {
        Ok(h) => h,
        Err(Error::ReadTimeout) => return Err(unanswered(Kind::Timeout, timed_out(), READING)),
        Err(Error::Invalid(text)) => return Err(unanswered(Kind::InvalidHeader, text, READING)),
        Err(Error::TooBig) => {
            return Err(unanswered(
                Kind::InvalidHeader,
                "upstream sent too big header".into(),
                READING,
            ));
        }
        Err(_) => {
            return Err(unanswered(
                Kind::Closed,
                "upstream prematurely closed connection".into(),
                READING,
            ));
        }
    };
    if head.status == 101 && r.headers.known(Known::Upgrade).is_none() {
        return Err(unanswered(
            Kind::InvalidHeader,
            "upstream sent \"101 Switching Protocols\" to a request without \"Upgrade\"".into(),
            READING,
        ));
    }
    upstream_framing(&head.raw).map_err(|m| unanswered(Kind::InvalidHeader, m, READING))?;
    // An HTTP/1.0 response cannot be chunked.
    if head.version == http::Version::HTTP_10 && head.raw.known(Known::TransferEncoding).is_some() {
        return Err(unanswered(
            Kind::InvalidHeader,
            "upstream sent invalid header".into(),
            READING,
        ));
    }
    if !as_received || head.status == 101 || rewrites(conf, &head.raw) {
        // The headers the client never gets are not put in the map at all.
        let passes = |n: &[u8]| passes_on(n, &conf.proxy_hide_header, &conf.proxy_pass_header);
        head.map(&passes)
            .map_err(|m| unanswered(Kind::InvalidHeader, m, READING))?;
    }
    Ok(head)
}

/// Why an exchange ended without a response head.
pub(super) enum Failed {
    Upstream(Unanswered),
    /// The client's body, streamed as it arrived, could not be read: the
    /// status to answer with.
    Client(u16),
}

/// The stages nginx's log lines name for a failed attempt.
pub(super) const SENDING: &str = "sending request to upstream";
pub(super) const READING: &str = "reading response header from upstream";

/// An attempt that failed before the upstream answered, at `stage`.
pub(super) fn unanswered(kind: Kind, text: String, stage: &'static str) -> Failed {
    Failed::Upstream(Unanswered {
        f: Failure::upstream(kind, text),
        unsent: false,
        stage,
    })
}

pub(super) fn timed_out() -> String {
    "upstream timed out (110: Connection timed out)".to_string()
}

/// A write of the request that failed: the socket's error, or the send
/// timeout.
pub(super) fn unsent_write(e: &h1conn::Error) -> Failed {
    match e {
        h1conn::Error::Write { e, .. } => {
            let text = format!("writev() failed ({})", crate::log::errno_text(e));
            unanswered(Kind::Closed, text, SENDING)
        }
        _ => unanswered(Kind::Timeout, timed_out(), SENDING),
    }
}

/// The first write of the request failed. Nothing went: a stale cached
/// connection, as nginx's `request_sent` (the attempt can go again
/// elsewhere); else as any failed write.
pub(super) fn head_unsent(e: h1conn::Error) -> Failed {
    match e {
        h1conn::Error::Write { sent: false, .. } => Failed::Upstream(Unanswered {
            f: Failure::upstream(Kind::Closed, "upstream prematurely closed connection"),
            unsent: true,
            stage: READING,
        }),
        e => unsent_write(&e),
    }
}

/// A failed exchange: what failed, at which stage, and whether nothing of
/// the request left (nginx retries a POST only if it was not sent).
pub(super) struct Unanswered {
    pub(super) f: Failure,
    pub(super) unsent: bool,
    pub(super) stage: &'static str,
}

/// An attempt the upstream answered, on its way to the client.
struct Answer<'a> {
    c: Connected<Pooled>,
    head: ResponseHead,
    asked_close: bool,
    /// Its `$upstream_*` record so far.
    record: Attempt,
    ups: &'a Arc<UpstreamRt>,
    snap: &'a Arc<crate::upstream::Peers>,
    uri: super::proxy_plan::UpUri,
    client_upgrade: Option<super::OnUpgrade>,
    /// `sticky`: (the answering peer's id, the session id the request
    /// brought).
    sticky: Option<(String, Option<String>)>,
    /// `fastcgi_pass`: the STDOUT reader and the body bytes that came
    /// with the head.
    fcgi: Option<(Box<super::fastcgi::Stdout>, Bytes)>,
}

/// Turns the upstream's answer into the reply: a tunnel for a 101, an
/// internal redirect for X-Accel-Redirect, sluice's own page for an
/// intercepted error, else the response with nginx's header rules and its
/// body streamed (read ahead first with `proxy_buffering`).
async fn respond(r: &mut Req, pp: &ProxyPass, a: Answer<'_>) -> Reply {
    let Answer {
        c,
        head,
        asked_close,
        record: answered,
        ups,
        snap,
        uri,
        client_upgrade,
        sticky,
        fcgi,
    } = a;
    let conf = r.conf.clone();
    let status = head.status.as_u16();
    let mut c = c;
    // The head's parts for the client: the upstream's names' case and
    // status line go with it.
    // FastCGI: the body is STDOUT up to END_REQUEST, whatever the head
    // says, and the connection stays only with FCGI_KEEP_CONN.
    let framing = if fcgi.is_some() {
        Framing::Close
    } else {
        h1conn::framing(&r.method, &head)
    };
    let keep = if fcgi.is_some() {
        conf.fastcgi_keep_conn
    } else {
        h1conn::keeps_alive(head.version, &head.raw) && !asked_close
    };
    let ResponseHead {
        status: code,
        reason,
        raw,
        mapped,
        ..
    } = head;
    let (
        mapped,
        Mapped {
            headers,
            names,
            order,
        },
    ) = match mapped {
        Some(m) => (true, *m),
        None => (false, Mapped::default()),
    };
    let mut resp = Response::new(());
    *resp.status_mut() = code;
    *resp.headers_mut() = headers;
    let (mut parts, ()) = resp.into_parts();
    if status == 101 {
        // The tunnel releases the peer.
        c.held.done();
        keep_spelling(&mut parts, reason, names, order);
        return super::tunnel::switch_protocols(
            r,
            parts,
            c.conn.into_conn().h1.upgrade(),
            client_upgrade,
            snap.clone(),
            c.id,
        );
    }
    // X-Accel-Redirect: the upstream asks for an internal redirect; an
    // intercepted error is answered by sluice, not passed through.
    let redirect = raw
        .get("x-accel-redirect")
        .and_then(|v| v.to_str().ok())
        .filter(|t| t.starts_with('/') || t.starts_with('@'))
        .filter(|_| conf.proxy_ignore_headers & ignore::X_ACCEL_REDIRECT == 0)
        .map(str::to_string);
    let intercepted = conf.proxy_intercept_errors
        && status >= 300
        && conf.error_page.iter().any(|p| p.codes.contains(&status));
    if redirect.is_some() || intercepted {
        c.held.finish(Outcome::Ok);
        record(r, answered);
        // The request that follows still sees this response's
        // $upstream_http_*; an intercepted 401 keeps its challenge (nginx).
        if status == 401 && redirect.is_none() {
            if let Some(v) = raw
                .get(http::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
            {
                r.www_authenticate = Some(v.to_string());
            }
        }
        r.upstream.lock().unwrap_or_else(|e| e.into_inner()).headers = Some(raw);
        return match redirect {
            Some(target) => Reply::Internal(target),
            None => Reply::Status(status),
        };
    }
    // `sticky`: read the upstream's cookies, as received, before they are
    // rewritten.
    let learn = sticky
        .and_then(|(sid, session)| sticky_response(r, ups, &mut parts.headers, &raw, sid, session));
    if conf.proxy_ignore_headers & ignore::X_ACCEL_LIMIT_RATE == 0 {
        if let Some(n) = raw
            .get("x-accel-limit-rate")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            r.accel_limit_rate = Some(n);
        }
    }
    // Kept only for a log format that reads $upstream_http_* or
    // $upstream_cookie_*.
    let logs_raw = r.subrequest || super::access::reads(&conf.access_log, |f| f.upstream_http);
    // The head's own lines go on when no map was made (`exchange`).
    let (logged, as_received) = match (mapped, logs_raw) {
        (true, logs) => (logs.then_some(raw), None),
        (false, true) => (Some(raw.clone()), Some(raw)),
        (false, false) => (None, Some(raw)),
    };
    {
        let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
        if logged.is_some() {
            log.headers = logged;
        }
        log.in_flight = None;
        log.attempts.push(answered);
    }
    // The lines that go on, with sluice's Server unless the upstream's
    // is one of them. They go with the response (`full`), not before: an
    // error reading the body ahead answers with a page of sluice's own.
    let as_received = as_received.map(|raw| {
        let mut lines = AsReceived::pick(raw, |n| {
            passes_on(n, &conf.proxy_hide_header, &conf.proxy_pass_header)
        });
        if !lines.server {
            lines.own_server = Some(response::server_header(conf.server_tokens));
        }
        lines
    });
    if as_received.is_none() {
        redirect_headers(r, pp, &mut parts.headers);
        super::proxy_cookie::rewrite(r, &mut parts.headers);
        // A FastCGI head is read unfiltered; a `sticky cookie` adds its own
        // Set-Cookie, which `proxy_hide_header` may name.
        if fcgi.is_some() || (ups.cfg.sticky.is_some() && !conf.proxy_hide_header.is_empty()) {
            filter_response_headers(
                &mut parts.headers,
                &conf.proxy_hide_header,
                &conf.proxy_pass_header,
                conf.server_tokens,
            );
        } else {
            // Else the head was read with the same rule (`exchange`'s
            // `passes`): nothing hidden reached the map.
            server_unless_passed(&mut parts.headers, conf.server_tokens);
        }
    }
    // The body releases the peer.
    c.held.done();
    let mut body = ProxyBody {
        ended: fcgi.is_none() && matches!(framing, Framing::Empty | Framing::Length(0)),
        decoder: Decoder::new(framing),
        keep: keep && (fcgi.is_some() || framing != Framing::Close),
        conn: Some(c.conn),
        ahead: Default::default(),
        ups: ups.clone(),
        peer: Some((snap.clone(), c.id)),
        log: r.upstream.clone(),
        attempt_start: c.began,
        received: 0,
        read_timeout: conf.proxy_read_timeout,
        timer: None,
        peer_name: c.name.clone(),
        scheme: if conf.fastcgi {
            "fastcgi"
        } else if pp.ssl {
            "https"
        } else {
            "http"
        },
        uri,
        held_error: None,
        trailers: None,
        // nginx limits the reads only when it buffers.
        limit: if conf.proxy_buffering {
            let rate = crate::conf::rate::size(conf.proxy_limit_rate.as_ref(), |t| r.eval(t));
            super::rate::Bucket::new(rate, 0)
        } else {
            None
        },
        rate_wait: false,
        learn,
        fcgi: None,
    };
    if let Some((out, rest)) = fcgi {
        if !rest.is_empty() {
            body.received += rest.len() as u64;
            body.ahead.push_back(rest);
        }
        body.fcgi = Some(out);
    }
    keep_spelling(&mut parts, reason, names, order);
    let full = |r: &mut Req, resp: Response<response::Body>| {
        r.as_received = as_received;
        Reply::Full(resp)
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
            return Reply::Status(e.status());
        }
        if body.peer.is_none() && body.trailers.is_none() {
            // All of it fitted: the upstream connection is already back in
            // the keep-alive cache. (With trailers the body stays a stream:
            // they follow its data, chunked.)
            let whole = match body.ahead.len() {
                0 => Bytes::new(),
                1 => body.ahead.pop_front().unwrap_or_default(),
                _ => {
                    let parts: Vec<Bytes> = body.ahead.drain().collect();
                    Bytes::from(parts.concat())
                }
            };
            return full(r, Response::from_parts(parts, response::full(whole)));
        }
        if conf.proxy_max_temp_file_size > 0 {
            // The rest is read on at the upstream's pace, past the buffers
            // into a temporary file, so a slow client does not hold it.
            let url = format!("{}://{}{}", body.scheme, body.peer_name, body.uri);
            let temp = super::proxy_temp::TempConf {
                room,
                max_file: conf.proxy_max_temp_file_size,
                dir: conf.proxy_temp_path.clone(),
                conn: r.conn.number,
                ctx: r.log_context(Some(&url)),
            };
            let relay = super::proxy_temp::relay(body, temp);
            return full(r, Response::from_parts(parts, relay.boxed()));
        }
    }
    full(r, Response::from_parts(parts, body.boxed()))
}

/// `sticky` on a response from the peer `sid`: `cookie` adds its
/// `Set-Cookie` (on every response, as nginx); `learn` takes the session id
/// from the first non-empty `create=` (else the one the request brought, to
/// keep it alive) and learns it now with `header`, else returns the learning
/// for the end of the body.
pub(super) fn sticky_response(
    r: &Req,
    ups: &Arc<UpstreamRt>,
    headers: &mut http::HeaderMap,
    raw: &Headers,
    sid: String,
    session: Option<String>,
) -> Option<Box<dyn FnOnce() + Send + Sync>> {
    use crate::conf::sticky::{Create, Sticky};
    use crate::upstream::sticky;
    match ups.cfg.sticky.as_ref()? {
        Sticky::Cookie(c) => {
            let domain = c.domain.as_ref().map(|t| r.eval(t)).unwrap_or_default();
            let samesite = c.samesite.as_ref().map(|t| r.eval(t)).unwrap_or_default();
            let now = chrono::Utc::now().timestamp();
            let line = sticky::cookie_line(c, &sid, &domain, &samesite, now);
            match http::HeaderValue::from_str(&line) {
                Ok(v) => {
                    headers.append(http::header::SET_COOKIE, v);
                }
                Err(_) => crate::log_conn!(
                    Level::Warn,
                    r.conn.number,
                    "sticky: invalid cookie \"{}\"{}",
                    line.escape_default(),
                    r.log_context(None)
                ),
            }
            None
        }
        Sticky::Route(_) => None,
        Sticky::Learn(l) => {
            let zone = ups.sessions.get()?.clone();
            if l.create.iter().any(|c| matches!(c, Create::Var(_))) {
                // `$upstream_http_*` reads the head kept in the log.
                let mut log = r.upstream.lock().unwrap_or_else(|e| e.into_inner());
                log.headers.get_or_insert_with(|| raw.clone());
            }
            let created = l
                .create
                .iter()
                .map(|c| match c {
                    Create::UpstreamCookie(name) => {
                        sticky::upstream_cookie(raw, name).unwrap_or_default()
                    }
                    Create::Var(t) => r.eval(t),
                })
                .find(|v| !v.is_empty());
            let (id, create) = match (created, session) {
                (Some(id), _) => (id, true),
                (None, Some(id)) => (id, false),
                (None, None) => return None,
            };
            let timeout = l.timeout;
            let learn = move || sticky::learn(&zone, &id, &sid, create, timeout);
            if l.header {
                learn();
                None
            } else {
                Some(Box::new(learn))
            }
        }
    }
}

/// The upstream's reason phrase and header names' case go on with the
/// response, when they differ from what sluice would write (most heads
/// need neither, and then the response carries no extension).
fn keep_spelling(
    parts: &mut http::response::Parts,
    reason: Bytes,
    names: Names,
    order: Option<crate::h1::head::Order>,
) {
    if super::response::reason(parts.status.as_u16()).map(str::as_bytes) != Some(&reason[..]) {
        parts.extensions.insert(Reason(reason));
    }
    if !names.0.is_empty() {
        parts.extensions.insert(names);
    }
    if let Some(o) = order {
        parts.extensions.insert(o);
    }
}

/// `proxy_redirect`: rewrites the prefix of the upstream's `Location` and
/// `Refresh` headers, or (a regex rule) the whole URL.
pub(super) fn redirect_headers(r: &Req, pp: &ProxyPass, h: &mut HeaderMap) {
    use crate::conf::loc::Redirect;
    use crate::conf::map::{Captures, eval_with_captures};
    let Some(rules) = &r.conf.proxy_redirect else {
        return;
    };
    let scheme = if pp.ssl { "https" } else { "http" };
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
                        format!("{scheme}://{}{u}", pp.proxy_host),
                        pp.location_prefix.clone(),
                    ),
                    None => (format!("{scheme}://{}/", pp.proxy_host), "/".to_string()),
                },
                Redirect::Rule(f, t) => (r.eval(f), r.eval(t)),
                Redirect::Regex(re, t) => {
                    let Some(c) = re.captures(&url) else {
                        continue;
                    };
                    // A regex without groups leaves `$1` to the last one
                    // that had, as nginx.
                    let caps = (re.captures_len() > 1).then(|| Captures::of(re, &c));
                    let to = eval_with_captures(t, caps.as_ref(), |v| r.value(v));
                    let to = completed(r, &name, to);
                    if let Ok(v) = HeaderValue::from_str(&format!("{head}{to}")) {
                        h.insert(name.clone(), v);
                    }
                    break;
                }
            };
            if let Some(rest) = url.strip_prefix(from.as_str()) {
                let to = completed(r, &name, format!("{to}{rest}"));
                if let Ok(v) = HeaderValue::from_str(&format!("{head}{to}")) {
                    h.insert(name.clone(), v);
                }
                break;
            }
        }
    }
}

/// A `Location` that `proxy_redirect` made relative is completed as
/// sluice's own redirects are (`absolute_redirect`): nginx's upstream
/// module hands a rewritten one to its header filter. `Refresh` and an
/// upstream's own relative `Location` stay as they are.
fn completed(r: &Req, name: &HeaderName, url: String) -> String {
    if *name == header::LOCATION {
        super::script::absolute(r, &url)
    } else {
        url
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

/// Whether an upstream's response header goes on to the client: not
/// hop-by-hop, not hidden by default unless `proxy_pass_header` names it,
/// not named by `proxy_hide_header`. The name in any case: as the upstream
/// spelled it (read before it is made a `HeaderName`) or a map's lowercase
/// one; the lists are lowercase.
fn passes_on(n: &[u8], hide: &[String], pass: &[String]) -> bool {
    let is = |x: &str| crate::h1::head::same_name(x.as_bytes(), n);
    // Most names (Content-Type, Content-Length) have a length no name of
    // the two lists has: no scan of them.
    let listed = n.len() < 64 && LISTED_LENGTHS & (1 << n.len()) != 0;
    let hop_by_hop = listed && HOP_BY_HOP_RESPONSE.iter().any(|x| is(x));
    let hidden = listed && HIDDEN_BY_DEFAULT.iter().any(|x| is(x)) && !pass.iter().any(|p| is(p));
    !(hop_by_hop || hidden || hide.iter().any(|x| is(x)))
}

/// A bit for the length of each name of `HOP_BY_HOP_RESPONSE` and
/// `HIDDEN_BY_DEFAULT` (all shorter than 64).
const LISTED_LENGTHS: u64 = {
    let mut bits = 0u64;
    let mut i = 0;
    while i < HOP_BY_HOP_RESPONSE.len() {
        bits |= 1 << HOP_BY_HOP_RESPONSE[i].len();
        i += 1;
    }
    let mut i = 0;
    while i < HIDDEN_BY_DEFAULT.len() {
        bits |= 1 << HIDDEN_BY_DEFAULT[i].len();
        i += 1;
    }
    bits
};

pub(super) fn filter_response_headers(
    h: &mut HeaderMap,
    hide: &[String],
    pass: &[String],
    tokens: bool,
) {
    // One pass over the (few) headers present, instead of a lookup for each
    // name that might be: names are already lowercase here. The names to
    // drop are gathered a few at a time on the stack, not in a vector.
    let dropped = |n: &str| !passes_on(n.as_bytes(), hide, pass);
    loop {
        let mut found: [Option<HeaderName>; 8] = Default::default();
        let mut n = 0;
        for k in h.keys() {
            if dropped(k.as_str()) {
                if let Some(slot) = found.get_mut(n) {
                    *slot = Some(k.clone());
                }
                n += 1;
                if n == found.len() {
                    break;
                }
            }
        }
        for k in found.iter_mut().filter_map(Option::take) {
            h.remove(k);
        }
        if n < found.len() {
            break;
        }
    }
    server_unless_passed(h, tokens);
}

/// sluice's `Server`, unless the upstream's was passed on
/// (`proxy_pass_header Server`).
fn server_unless_passed(h: &mut HeaderMap, tokens: bool) {
    h.entry(header::SERVER)
        .or_insert_with(|| response::server_header(tokens));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name as the upstream spelled it is judged as nginx's rule judges
    /// its lowercase form: every listed name in three spellings, and others
    /// beside them.
    #[test]
    fn raw_names_pass_as_lowercase_ones() {
        let hide = vec!["x-secret".to_string()];
        let pass = vec!["date".to_string()];
        let names = HOP_BY_HOP_RESPONSE
            .iter()
            .chain(HIDDEN_BY_DEFAULT.iter())
            .copied()
            .chain(["x-secret", "content-type", "x-dat", "dates", "t", "tee"]);
        for n in names {
            for (h, p) in [(&hide, &pass), (&vec![], &vec![])] {
                let listed = |l: &[String]| l.iter().any(|x| x == n);
                let want = !(HOP_BY_HOP_RESPONSE.contains(&n)
                    || (HIDDEN_BY_DEFAULT.contains(&n) && !listed(p))
                    || listed(h));
                let upper = n.to_ascii_uppercase();
                let mixed: String = n
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if i % 2 == 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect();
                for spelled in [n, upper.as_str(), mixed.as_str()] {
                    assert_eq!(passes_on(spelled.as_bytes(), h, p), want, "{spelled}");
                }
            }
        }
        assert!(!passes_on(b"Date", &[], &[]));
        assert!(passes_on(b"Date", &[], &pass));
        assert!(!passes_on(b"X-Secret", &hide, &[]));
        assert!(passes_on(b"X-Other", &hide, &pass));
    }

    /// Every hop-by-hop and hidden header goes, however many there are
    /// (more than the eight gathered at a time), repeated ones too; the
    /// rest stay, `proxy_pass_header` keeps a hidden one and
    /// `proxy_hide_header` drops another; `Server` becomes sluice's.
    #[test]
    fn response_headers_filtered() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("connection", "keep-alive"),
            ("x-one", "1"),
            ("keep-alive", "timeout=5"),
            ("date", "x"),
            ("server", "backend"),
            ("x-pad", "p"),
            ("x-accel-expires", "1"),
            ("x-accel-redirect", "/r"),
            ("x-two", "2"),
            ("x-accel-limit-rate", "1"),
            ("x-accel-buffering", "no"),
            ("x-accel-charset", "utf-8"),
            ("proxy-connection", "close"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("x-secret", "s"),
            ("x-one", "1b"),
            ("connection", "close"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        filter_response_headers(
            &mut h,
            &["x-secret".to_string()],
            &["x-pad".to_string()],
            false,
        );
        // (The map's own order changes as entries go; the wire order is
        // the head's, kept apart.)
        let mut left: Vec<(&str, &str)> = h
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("?")))
            .collect();
        left.sort();
        assert_eq!(
            left,
            vec![
                ("server", "sluice"),
                ("x-one", "1"),
                ("x-one", "1b"),
                ("x-pad", "p"),
                ("x-two", "2"),
            ]
        );
    }
}
