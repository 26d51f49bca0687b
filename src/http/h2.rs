//! HTTP/2 from clients, on the `h2` crate (frames, HPACK, flow control):
//! the prior-knowledge preface told from an HTTP/1 request on a plain port,
//! the connection's loop (accept streams, GOAWAY after `keepalive_requests`
//! streams, when idle for `keepalive_timeout` and when the worker drains),
//! and each stream turned into the same `Incoming` the HTTP/1 side builds,
//! run through `pipeline::handle`, its response sent in DATA frames of
//! `http2_chunk_size` as the client's windows allow. Called from `conn.rs`
//! (h2c) and `tls.rs` (ALPN `h2`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::{CatchUnwind, FutureExt as _};
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use futures_util::task::AtomicWaker;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, DATE, HeaderValue, TE};
use http::{Method, Response, Version};
use http_body::{Body as _, Frame, SizeHint};
use tokio::sync::watch;

use crate::conf::model::ListenAddr;
use crate::log::Level;

use super::access::LoggedBody;
use super::conn::{ConnCtx, InFlight, Io, Waited, wait_for_bytes};
use super::inbound::{Inbound, ReqBody, TooLarge};
use super::response::BoxError;
use super::vars::ConnInfo;
use super::{Phase, Shared};

/// The client connection preface of RFC 9113.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a plain connection with HTTP/2 on starts with.
pub(super) enum Preface {
    Http2,
    Http1,
    /// Closed, timed out or the worker stops, before it was known.
    Closed,
}

/// Reads the first bytes of a plain connection until they are known to be
/// the HTTP/2 preface or not (nginx 1.25's test: as many bytes as came,
/// compared with the preface), within `client_header_timeout`. The bytes
/// stay unread, for whichever protocol it is.
pub(super) async fn sniff_preface(
    ctx: &ConnCtx,
    inb: &Inbound,
    phase: &mut watch::Receiver<Phase>,
) -> Preface {
    let start = crate::net::clock::now();
    match wait_for_bytes(inb, &ctx.shared, phase, ctx.head_limit, start, None).await {
        Waited::Bytes => {}
        Waited::Close | Waited::Park => return Preface::Closed,
    }
    let deadline = tokio::time::Instant::from_std(start + ctx.head_limit);
    loop {
        let seen = inb.with_buf(|b| {
            let n = b.len().min(PREFACE.len());
            if b[..n] != PREFACE[..n] {
                Some(Preface::Http1)
            } else if n == PREFACE.len() {
                Some(Preface::Http2)
            } else {
                None
            }
        });
        if let Some(p) = seen {
            return p;
        }
        let fill = std::future::poll_fn(|cx| inb.poll_fill(cx, 64));
        match crate::net::clock::timeout_at(deadline, fill).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Preface::Closed,
        }
    }
}

/// What a connection's streams share.
struct Conn {
    shared: Arc<Shared>,
    info: Arc<ConnInfo>,
    listen: Arc<ListenAddr>,
    /// Which header names requests keep (the default server's settings).
    names: super::conn::HeaderNames,
    /// Streams being handled or answered.
    active: AtomicUsize,
    /// Streams the client reset before their response was sent, and
    /// responses sent whole: the rapid-reset check compares them.
    resets: AtomicU64,
    done: AtomicU64,
    /// When the last stream ended, in milliseconds since `born`.
    last: AtomicU64,
    born: Instant,
    /// The connection's loop, woken when its last stream ends: that one
    /// may have run in a task of its own, and the loop's timer then moves
    /// from the busy connection's deadline to the idle one's.
    idle: AtomicWaker,
}

impl Conn {
    fn since_last(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        crate::net::clock::since(self.born).saturating_sub(last)
    }

    /// Ready once no stream is active.
    async fn went_idle(&self) {
        std::future::poll_fn(|cx| {
            self.idle.register(cx.waker());
            if self.active.load(Ordering::Acquire) == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// Counts a stream as active while held.
struct Active(Arc<Conn>);

impl Active {
    fn new(c: &Arc<Conn>) -> Active {
        c.active.fetch_add(1, Ordering::Relaxed);
        Active(c.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let c = &self.0;
        c.last.store(
            crate::net::clock::since(c.born).as_millis() as u64,
            Ordering::Relaxed,
        );
        if c.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            c.idle.wake();
        }
    }
}

/// The most request-header bytes h2 itself decodes for one request
/// (beyond it, h2 answers 431): twice what `large_client_header_buffers`
/// allows, so that nginx's own checks (`too_large`) decide first.
fn header_list_max(count: u32, size: u64) -> u32 {
    (u64::from(count) * size * 2).clamp(16 * 1024, 16 << 20) as u32
}

/// nginx's limits on a request's fields: each name and value at most one
/// large header buffer, all of them at most NUMBER of them. Some(log line)
/// when the request passes them.
///
/// As nginx, the total counts the pseudo-header fields too, names and
/// values (`:method`, `:scheme`, `:authority`, `:path`).
fn too_large(req: &http::Request<h2::RecvStream>, count: u32, size: u64) -> Option<&'static str> {
    let size = size as usize;
    let path = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if path > size {
        return Some("client sent too large header field");
    }
    let uri = req.uri();
    let mut total = ":method".len() + req.method().as_str().len();
    if let Some(s) = uri.scheme_str() {
        total += ":scheme".len() + s.len();
    }
    if let Some(a) = uri.authority() {
        total += ":authority".len() + a.as_str().len();
    }
    if uri.path_and_query().is_some() {
        total += ":path".len() + path;
    }
    for (n, v) in req.headers() {
        if n.as_str().len() > size || v.len() > size {
            return Some("client sent too large header field");
        }
        total += n.as_str().len() + v.len();
    }
    (total > count as usize * size).then_some("client sent too large header")
}

/// Serves an HTTP/2 connection (after its preface was seen, or ALPN chose
/// `h2`) until the client or a GOAWAY ends it.
pub(super) async fn serve<T: Io>(io: T, ctx: ConnCtx, phase: watch::Receiver<Phase>) {
    let shared = ctx.shared.clone();
    let Some(http) = shared.cfg.http.as_ref() else {
        return;
    };
    // The server whose settings the connection has: SNI's, else the
    // address's default (nginx's connection config).
    let sni = ctx
        .info
        .tls()
        .and_then(|t| t.server_name.as_deref())
        .map(|n| n.strip_suffix('.').unwrap_or(n).to_ascii_lowercase());
    let Some(server) = shared
        .router
        .server(http, &ctx.listen, ctx.info.local, sni.as_deref())
    else {
        return;
    };
    let conf = server.conf.clone();
    let number = ctx.info.number;
    let streams = conf.http2_max_concurrent_streams;
    // The client may have this much request body in flight on each stream,
    // and on the whole connection (where a window below 65535 cannot be
    // advertised: the connection's starts at 65535 and only grows).
    let window = conf.http2_recv_buffer_size.min((1 << 31) - 1) as u32;
    let (count, size) = conf.large_client_header_buffers;
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(streams)
        .initial_window_size(window)
        .initial_connection_window_size(window.max(65_535))
        .max_header_list_size(header_list_max(count, size))
        .max_send_buffer_size((conf.http2_chunk_size as usize).max(64 * 1024))
        // CVE-2023-44487: streams the client resets before they are
        // accepted (nginx allows 2 x max_concurrent_streams new streams at
        // once), and streams h2 had to reset for the client's errors.
        .max_pending_accept_reset_streams((2 * streams as usize).max(20))
        .max_local_error_reset_streams(Some((2 * streams as usize).max(100)));
    let handshake = builder.handshake::<T, Bytes>(io);
    let mut h2c = match crate::net::clock::timeout(ctx.head_limit, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            crate::log_conn!(
                Level::Info,
                number,
                "client sent invalid HTTP/2 preface ({e})"
            );
            return;
        }
        Err(_) => {
            crate::log_conn!(
                Level::Info,
                number,
                "client timed out (110: Connection timed out) while reading client request headers"
            );
            return;
        }
    };
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        info: ctx.info.clone(),
        listen: ctx.listen.clone(),
        names: ctx.names,
        active: AtomicUsize::new(0),
        resets: AtomicU64::new(0),
        done: AtomicU64::new(0),
        last: AtomicU64::new(0),
        born: crate::net::clock::now(),
        idle: AtomicWaker::new(),
    });
    let keepalive = conf.keepalive_timeout;
    let max_requests = conf.keepalive_requests;
    let flood = u64::from(streams).max(50) * 2;
    let mut accepted: u64 = 0;
    // Set once a GOAWAY went: when it went.
    let mut going: Option<Instant> = None;
    let timer = crate::net::clock::sleep(keepalive);
    tokio::pin!(timer);
    // A stream that has the connection to itself runs in a task of its
    // own; one that joins others runs in this task, beside the connection
    // that carries them. With one stream at a time per connection (a
    // browser's page, `h2load -m 1`), separate tasks let a turn of the
    // event loop read every upstream's answer before the connections'
    // writes, which then go out together: 37,100 requests/s, where every
    // stream in this task made about 31,000 (16 connections, one worker,
    // alternating runs). With many at once (`-m 100`), the streams polled
    // in this task have their answers written in one go, without a task
    // each to make, schedule and wake: 30,200 requests/s against 22,000
    // with a task per stream, 33 us of worker CPU per request against 45.
    let mut streams = Streams::new();
    // The connection is polled when it asked to be (its socket, or a
    // stream that wrote), not each time one of its streams is.
    let woken = Woken::new();
    // Waits across the loop's turns: a `changed()` made anew on each turn
    // would join and leave the channel's list of waiters every time. And
    // polled only once woken: each poll of a waiting `changed()` takes the
    // channel's lock to look at its waker (160 instructions, twice a
    // request with one stream per connection).
    let mut phase_change = Box::pin(next_phase(phase));
    let phase_woken = Woken::new();
    loop {
        // Idle: no stream for `keepalive_timeout` (nginx 1.19.7's
        // `http2_idle_timeout`); going away: once the last stream ended,
        // the client gets a moment to read the GOAWAY.
        let idle = conn.active.load(Ordering::Relaxed) == 0;
        let wait = match going {
            Some(at) if idle => {
                GONE.saturating_sub(crate::net::clock::since(at).min(conn.since_last()))
            }
            None if idle => keepalive.saturating_sub(conn.since_last()),
            _ => keepalive.max(Duration::from_secs(1)),
        };
        // The timer is moved only to an earlier time, or once it fired: a
        // later one is seen to when it fires (its arm checks again), so a
        // busy connection does not move it on for every stream.
        let at = crate::net::clock::deadline(wait.max(Duration::from_millis(10)));
        if at < timer.deadline() || timer.is_elapsed() {
            timer.as_mut().reset(at);
        }
        tokio::select! {
            // Streams first: what they answered goes out in this same poll
            // (the connection's arm below writes it).
            biased;
            Some(()) = streams.next(), if !streams.is_empty() => {}
            // The last stream, in a task of its own, ended: the timer's
            // deadline is now the idle connection's.
            () = conn.went_idle(), if !idle => {}
            r = woken.gate(h2c.accept()) => match r {
                Some(Ok((req, respond))) => {
                    accepted += 1;
                    if let Some(why) = too_large(&req, count, size) {
                        crate::log_conn!(Level::Info, number, "{why}");
                        h2c.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                        going.get_or_insert_with(Instant::now);
                        continue;
                    }
                    let alone = conn.active.load(Ordering::Relaxed) == 0;
                    let active = Active::new(&conn);
                    // Made in its box: a stream's future is kilobytes.
                    let stream = crate::net::boxed::boxed(|| {
                        serve_stream(conn.clone(), active, req, respond, accepted)
                    });
                    if alone {
                        crate::net::clock::spawn(stream);
                    } else {
                        streams.push(stream);
                    }
                    // Rapid reset: far more streams reset by the client
                    // than answered.
                    let resets = conn.resets.load(Ordering::Relaxed);
                    if resets > flood && resets > 2 * conn.done.load(Ordering::Relaxed) {
                        crate::log_conn!(Level::Info, number, "http2 flood detected");
                        h2c.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                        going.get_or_insert_with(Instant::now);
                    } else if accepted >= max_requests && going.is_none() {
                        // keepalive_requests: no stream after this one.
                        h2c.graceful_shutdown();
                        going = Some(crate::net::clock::now());
                    }
                }
                Some(Err(e)) => {
                    if e.is_go_away() && e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) {
                        crate::log_conn!(Level::Info, number, "http2 flood detected");
                    } else if e.is_library() {
                        // h2 found the client's frames at fault (and sent
                        // it GOAWAY): not a close of the client's.
                        crate::log_conn!(Level::Info, number, "client sent invalid HTTP/2 frames: {e}");
                    } else if !e.is_io() || !is_reset(&e) {
                        crate::log_conn!(Level::Info, number, "client closed HTTP/2 connection: {e}");
                    }
                    break;
                }
                None => break,
            },
            (rx, ch) = phase_woken.gate(&mut phase_change) => {
                if ch.is_err() {
                    break;
                }
                let now = *rx.borrow();
                phase_change = Box::pin(next_phase(rx));
                match now {
                    Phase::Running => {}
                    Phase::Graceful => {
                        // In-flight streams finish; then the connection
                        // closes.
                        if going.is_none() {
                            h2c.graceful_shutdown();
                            // Its GOAWAY goes out when the gate polls it.
                            woken.poke();
                            going = Some(crate::net::clock::now());
                        }
                    }
                    Phase::Fast => break,
                }
            }
            () = &mut timer => {
                if conn.active.load(Ordering::Relaxed) > 0 {
                    continue;
                }
                match going {
                    None if conn.since_last() >= keepalive => {
                        h2c.graceful_shutdown();
                        woken.poke();
                        going = Some(crate::net::clock::now());
                    }
                    // The client did not close after the GOAWAY.
                    Some(at) if crate::net::clock::since(at).min(conn.since_last()) >= GONE => break,
                    _ => {}
                }
            }
        }
    }
    drop(h2c);
    drop(ctx);
    // The streams still running finish on their own, as they would in
    // tasks of their own: their upstream exchanges end and are logged.
    while streams.next().await.is_some() {}
}

/// Whether a future polled through [`Woken::gate`] was woken since its
/// last poll: the connection shares its task with its streams, and a
/// stream's wake-up (its upstream answered) need not read the client's
/// socket or walk h2's state, nor look at the worker's phase.
struct Woken {
    flag: Arc<Flag>,
    waker: Waker,
}

struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Woken {
    fn new() -> Woken {
        // Set at first: the first poll registers the flag's waker.
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Woken {
            waker: Waker::from(flag.clone()),
            flag,
        }
    }

    /// Has the next [`gate`](Self::gate) poll its future: what changed
    /// its state (a GOAWAY asked for) woke nothing.
    fn poke(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }

    /// `fut`, polled with the flag's waker, and only when it was woken
    /// (or last returned ready: it may have more to give at once).
    async fn gate<F: Future>(&self, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            self.flag.task.register(cx.waker());
            if !self.flag.woken.swap(false, Ordering::AcqRel) {
                return Poll::Pending;
            }
            let polled = fut.as_mut().poll(&mut Context::from_waker(&self.waker));
            if polled.is_ready() {
                self.flag.woken.store(true, Ordering::Release);
            }
            polled
        })
        .await
    }
}

/// The worker's next change of phase, with the receiver to wait for the
/// one after.
async fn next_phase(
    mut rx: watch::Receiver<Phase>,
) -> (watch::Receiver<Phase>, Result<(), watch::error::RecvError>) {
    let changed = rx.changed().await;
    (rx, changed)
}

/// A connection's streams, each polled where it was made. A stream that
/// panics ends alone, as a task of its own would (the panic hook has
/// logged it).
struct Streams(FuturesUnordered<CatchUnwind<AssertUnwindSafe<StreamFuture>>>);

/// A stream's future, made in its box.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Streams {
    fn new() -> Streams {
        Streams(FuturesUnordered::new())
    }

    fn push(&mut self, stream: StreamFuture) {
        self.0.push(AssertUnwindSafe(stream).catch_unwind());
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next stream to end (`None` once there are none).
    async fn next(&mut self) -> Option<()> {
        self.0.next().await.map(|_| ())
    }
}

/// How long a connection that sent its final GOAWAY, with no stream left,
/// waits for the client to close.
const GONE: Duration = Duration::from_secs(2);

fn is_reset(e: &h2::Error) -> bool {
    e.get_io().is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof
        )
    })
}

/// The request head as the pipeline reads it: the fields as they came,
/// cookies joined into one `Cookie` with "; " (nginx's), `:authority` as
/// `Host`; names `underscores_in_headers` and `ignore_invalid_headers`
/// refuse dropped and logged. A `Host` field beside `:authority` must name
/// the same host (RFC 9113 8.3.1): one that does is kept as the host, one
/// that does not is kept after it, and the pipeline refuses the two as a
/// duplicate host (400, as nginx; a server picked by one and a backend
/// addressed by the other is how a request reaches what it should not).
fn request_headers(
    parts: &http::request::Parts,
    number: u64,
    names: super::conn::HeaderNames,
) -> crate::h1::head::Headers {
    let h = &parts.headers;
    let cookies: Vec<&[u8]> = h
        .get_all(http::header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let cookie = cookies.join(&b"; "[..]);
    let authority = parts.uri.authority().map(|a| a.as_str().as_bytes());
    let host = match (authority, h.get(http::header::HOST)) {
        (Some(a), Some(given)) if given.as_bytes().eq_ignore_ascii_case(a) => None,
        (a, _) => a,
    }
    .map(|a| (&b"host"[..], a));
    let mut cookie_done = false;
    let fields = h.iter().filter_map(|(n, v)| {
        if names.drops(n.as_str().as_bytes()) {
            crate::log_conn!(
                Level::Info,
                number,
                "client sent invalid header line: \"{}\" while reading client request headers",
                n.as_str()
            );
            return None;
        }
        if n == http::header::COOKIE {
            if cookie_done {
                return None;
            }
            cookie_done = true;
            return Some((n.as_str().as_bytes(), cookie.as_slice()));
        }
        Some((n.as_str().as_bytes(), v.as_bytes()))
    });
    // The head's size, for its buffers: every field but the cookies, the
    // joined cookie, the host from `:authority`.
    let (mut count, mut bytes) = (0, 0);
    for (n, v) in h {
        if n != http::header::COOKIE {
            count += 1;
            bytes += n.as_str().len() + v.len();
        }
    }
    if !cookies.is_empty() {
        count += 1;
        bytes += "cookie".len() + cookie.len();
    }
    if let Some((n, v)) = host {
        count += 1;
        bytes += n.len() + v.len();
    }
    crate::h1::head::Headers::from_byte_pairs_in(host.into_iter().chain(fields), count, bytes)
}

/// One stream: its request through the pipeline, its response sent.
async fn serve_stream(
    conn: Arc<Conn>,
    _active: Active,
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    nth: u64,
) {
    let number = conn.info.number;
    let id = respond.stream_id().as_u32();
    let (mut parts, recv) = req.into_parts();
    let is_head = parts.method == Method::HEAD;
    let headers = request_headers(&parts, number, conn.names);
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| crate::h1::body::content_length(v.as_bytes()));
    let connect = parts.method == Method::CONNECT;
    let mut refused = if connect {
        None
    } else {
        super::framing::h2_pseudo_problem(&parts.method, &parts.uri)
    };
    // The path as h2 parsed it, shared, not parsed and copied again.
    let uri = match std::mem::take(&mut parts.uri).into_parts().path_and_query {
        Some(p) => {
            let mut path = http::uri::Parts::default();
            path.path_and_query = Some(p);
            http::Uri::from_parts(path).unwrap_or_else(|_| http::Uri::from_static("/"))
        }
        None => {
            // No `:path` (h2 refuses that only beside an `:authority`; with
            // a Host field instead, its URI reads as "/"): 400, as nginx.
            if !connect && refused.is_none() {
                refused = Some(super::framing::h2_no_path());
            }
            http::Uri::from_static("/")
        }
    };
    let req = super::pipeline::Incoming {
        method: parts.method,
        uri,
        version: Version::HTTP_2,
        headers,
        body: ReqBody::h2(StreamBody::new(recv, declared)),
        // WebSocket over HTTP/2 (RFC 8441) is not offered: a request that
        // asks to switch protocols is handled as a plain one, as nginx.
        upgrade: None,
        refused,
    };
    let shared = &conn.shared;
    let flight = InFlight::start(None, shared.stats.as_ref());
    let handled = tokio::select! {
        biased;
        // Boxed: the pipeline's future is large, and is made in place in
        // its box rather than moved into this one.
        r = crate::net::boxed::boxed(|| super::pipeline::handle(shared, conn.info.clone(), &conn.listen, req, nth, flight)) => r,
        reason = std::future::poll_fn(|cx| respond.poll_reset(cx)) => {
            // An error: the connection went, not the stream alone.
            if let Ok(reason) = reason {
                client_reset(&conn, id, reason);
            }
            return;
        }
    };
    let Ok(resp) = handled else {
        // `return 444`: the stream ends without a response.
        respond.send_reset(h2::Reason::INTERNAL_ERROR);
        return;
    };
    match send_response(&mut respond, resp, is_head, number).await {
        Ok(()) => {
            conn.done.fetch_add(1, Ordering::Relaxed);
        }
        Err(Stop::Reset(reason)) => client_reset(&conn, id, reason),
        Err(Stop::Failed) => {}
    }
}

/// The client reset a stream before its response was sent: counted (the
/// rapid-reset check, and the workers' count the metrics show) and logged
/// as nginx logs it.
fn client_reset(conn: &Conn, id: u32, reason: h2::Reason) {
    conn.resets.fetch_add(1, Ordering::Relaxed);
    if let Some(c) = conn.shared.stats.as_ref().and_then(|s| s.counters()) {
        c.h2_client_resets.fetch_add(1, Ordering::Relaxed);
    }
    crate::log_conn!(Level::Info, conn.info.number, "{}", reset_text(id, reason));
}

/// nginx's words for a client's RST_STREAM (`ngx_http_v2_state_rst_stream`).
fn reset_text(id: u32, reason: h2::Reason) -> String {
    match reason {
        h2::Reason::CANCEL => format!("client canceled stream {id}"),
        h2::Reason::REFUSED_STREAM => format!("client refused stream {id}"),
        h2::Reason::INTERNAL_ERROR => {
            format!("client terminated stream {id} due to internal error")
        }
        r => format!("client terminated stream {id} with status {}", u32::from(r)),
    }
}

/// Why a response stopped before its end.
enum Stop {
    /// The client reset the stream, with this code.
    Reset(h2::Reason),
    /// The body failed, a send timed out, or the connection went.
    Failed,
}

/// Response headers that mean nothing on HTTP/2 (RFC 9113 8.2.2): h2
/// refuses to send them.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// A response header HTTP/2 does not carry: a connection-specific one, or
/// `TE` saying more than "trailers".
fn connection_specific(name: &http::HeaderName, value: &HeaderValue) -> bool {
    CONNECTION_SPECIFIC.contains(&name.as_str()) || (name == TE && value != "trailers")
}

/// Sends a response on a stream: HEADERS (with END_STREAM when there is
/// no body: HEAD, 204, 304, or a body that is already empty, such as a
/// gRPC Trailers-Only answer), then DATA frames of `http2_chunk_size` as
/// the windows allow, then trailers or an empty END_STREAM frame.
async fn send_response(
    respond: &mut h2::server::SendResponse<Bytes>,
    resp: Response<LoggedBody>,
    is_head: bool,
    number: u64,
) -> Result<(), Stop> {
    let (mut parts, mut body) = resp.into_parts();
    let send_timeout = body.send_timeout();
    let chunk = body.http2_chunk_size();
    let code = parts.status.as_u16();
    let bodiless = is_head || code < 200 || code == 204 || code == 304;
    // Lines kept as an upstream sent them (`proxy::headers_as_received`
    // keeps HTTP/2 clients' responses in maps; this is for any other).
    if let Some(lines) = body.take_as_received() {
        lines.append_to(&mut parts.headers);
    }
    let h = &mut parts.headers;
    // One look at the names first: there mostly are none to remove, and a
    // removal or a lookup by name hashes it.
    let (mut specific, mut date, mut length) = (false, false, false);
    for (n, v) in h.iter() {
        specific |= connection_specific(n, v);
        date |= *n == DATE;
        length |= *n == CONTENT_LENGTH;
    }
    if specific {
        for name in CONNECTION_SPECIFIC {
            h.remove(name);
        }
        if h.get(TE).is_some_and(|v| v != "trailers") {
            h.remove(TE);
        }
    }
    if !date {
        h.insert(DATE, crate::h1::write::date_value());
    }
    // A 204 has no content (RFC 9110 8.6: no Content-Length either). An
    // upstream's `Content-Length: 5` on one went out with END_STREAM and
    // no DATA, which a strict client refuses as malformed (RFC 9113 8.1.1;
    // curl: "stream 1 was not closed cleanly: PROTOCOL_ERROR"). nginx's
    // HTTP/2 module drops the length and the type of a 204.
    if code == 204 {
        if length {
            h.remove(CONTENT_LENGTH);
        }
        h.remove(CONTENT_TYPE);
    }
    if !bodiless && !length {
        if let Some(n) = body.size_hint().exact() {
            h.insert(CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    // The status line's reason and the header names' case are HTTP/1's.
    parts.extensions.clear();
    let head = Response::from_parts(parts, ());
    // The body's first frame, when it is there already: an empty body goes
    // in the HEADERS frame.
    let first = std::future::poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
        Poll::Pending => Poll::Ready(None),
        Poll::Ready(f) => Poll::Ready(Some(f)),
    })
    .await;
    if bodiless || matches!(first, Some(None)) {
        return match respond.send_response(head, true) {
            Ok(_) => Ok(()),
            Err(e) => Err(stopped(&e)),
        };
    }
    let mut stream = respond
        .send_response(head, false)
        .map_err(|e| stopped(&e))?;
    let mut next = first;
    loop {
        let frame = match next.take() {
            Some(f) => f,
            None => {
                // Waits for the body, watching for the client's reset.
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = stream.poll_reset(cx) {
                        return Poll::Ready(Err(reset(r)));
                    }
                    Pin::new(&mut body).poll_frame(cx).map(Ok)
                })
                .await?
            }
        };
        match frame {
            None => {
                return stream
                    .send_data(Bytes::new(), true)
                    .map_err(|e| stopped(&e));
            }
            Some(Err(_)) => {
                stream.send_reset(h2::Reason::INTERNAL_ERROR);
                return Err(Stop::Failed);
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => {
                    let end = body.is_end_stream();
                    send_data(&mut stream, d, chunk, end, send_timeout, number).await?;
                    if end {
                        return Ok(());
                    }
                }
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        return stream.send_trailers(t).map_err(|e| stopped(&e));
                    }
                }
            },
        }
    }
}

fn stopped(e: &h2::Error) -> Stop {
    match e.reason() {
        Some(reason) if e.is_reset() && e.is_remote() => Stop::Reset(reason),
        _ => Stop::Failed,
    }
}

/// What `poll_reset` said: the client's reset, or (an error) the
/// connection went.
fn reset(r: Result<h2::Reason, h2::Error>) -> Stop {
    r.map_or(Stop::Failed, Stop::Reset)
}

/// Sends `d` in frames of at most `chunk` bytes, each once the client's
/// windows have room for it (within `send_timeout`); `end`: the last
/// frame ends the stream.
async fn send_data(
    stream: &mut h2::SendStream<Bytes>,
    mut d: Bytes,
    chunk: usize,
    end: bool,
    send_timeout: Duration,
    number: u64,
) -> Result<(), Stop> {
    if d.is_empty() {
        return if end {
            stream.send_data(d, true).map_err(|e| stopped(&e))
        } else {
            Ok(())
        };
    }
    while !d.is_empty() {
        stream.reserve_capacity(d.len().min(chunk));
        let room = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = stream.poll_reset(cx) {
                return Poll::Ready(Err(reset(r)));
            }
            loop {
                if stream.capacity() > 0 {
                    return Poll::Ready(Ok(stream.capacity()));
                }
                match std::task::ready!(stream.poll_capacity(cx)) {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Poll::Ready(Err(stopped(&e))),
                    None => return Poll::Ready(Err(Stop::Failed)),
                }
            }
        });
        let n = match crate::net::clock::timeout(send_timeout, room).await {
            Ok(r) => r?,
            Err(_) => {
                crate::log_conn!(
                    Level::Info,
                    number,
                    "client timed out (110: Connection timed out) while sending response to client"
                );
                stream.send_reset(h2::Reason::PROTOCOL_ERROR);
                return Err(Stop::Failed);
            }
        };
        let piece = d.split_to(n.min(chunk).min(d.len()));
        stream
            .send_data(piece, end && d.is_empty())
            .map_err(|e| stopped(&e))?;
    }
    Ok(())
}

/// A stream's request body: DATA frames handed out as they come, their
/// window given back to the client as the handler takes them; then the
/// trailers, if any.
pub(crate) struct StreamBody {
    recv: h2::RecvStream,
    /// `client_max_body_size` (0: none).
    limit: AtomicU64,
    taken: u64,
    /// The request's `Content-Length`.
    declared: Option<u64>,
    data_done: bool,
    ended: bool,
    /// The request framed a body: a `content-length` (even 0), or DATA
    /// frames after its HEADERS (no END_STREAM there), even empty ones.
    framed: bool,
}

/// The client reset the stream or the connection went while the body
/// was read.
#[derive(Debug)]
pub struct StreamGone;

impl std::fmt::Display for StreamGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client prematurely closed stream")
    }
}

impl std::error::Error for StreamGone {}

impl StreamBody {
    fn new(recv: h2::RecvStream, declared: Option<u64>) -> StreamBody {
        let ended = recv.is_end_stream();
        StreamBody {
            recv,
            limit: AtomicU64::new(0),
            taken: 0,
            declared,
            data_done: ended,
            ended,
            framed: !ended || declared.is_some(),
        }
    }

    /// Whether the request framed a body (DATA frames, even empty ones).
    pub(crate) fn framed(&self) -> bool {
        self.framed
    }

    pub(crate) fn limit(&self, max: u64) {
        self.limit.store(max, Ordering::Relaxed);
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match std::task::ready!(self.recv.poll_data(cx)) {
                Some(Ok(d)) => {
                    let n = d.len();
                    let _ = self.recv.flow_control().release_capacity(n);
                    self.taken += n as u64;
                    let max = self.limit.load(Ordering::Relaxed);
                    if max > 0 && self.taken > max {
                        self.ended = true;
                        return Poll::Ready(Some(Err(Box::new(TooLarge(self.taken)))));
                    }
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Some(Err(_)) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(Box::new(StreamGone))));
                }
                None => self.data_done = true,
            }
        }
        let t = std::task::ready!(self.recv.poll_trailers(cx));
        self.ended = true;
        match t {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(_) => Poll::Ready(Some(Err(Box::new(StreamGone)))),
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.ended || self.recv.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        if self.is_end_stream() {
            return SizeHint::with_exact(0);
        }
        match self.declared {
            Some(n) => SizeHint::with_exact(n.saturating_sub(self.taken)),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pairs: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder()
            .method("GET")
            .uri("https://example.com:8443/p?q=1");
        for (n, v) in pairs {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn authority_becomes_host_and_cookies_join() {
        let h = request_headers(
            &req(&[("cookie", "a=1"), ("x-y", "z"), ("cookie", "b=2")]),
            1,
            Default::default(),
        );
        assert_eq!(h.get("host").unwrap(), "example.com:8443");
        assert_eq!(h.get("cookie").unwrap(), "a=1; b=2");
        assert_eq!(h.get_all("cookie").count(), 1);
        assert_eq!(h.get("x-y").unwrap(), "z");
    }

    #[test]
    fn a_host_field_beside_authority_is_one_host_only_when_it_names_the_same() {
        let h = request_headers(&req(&[("host", "Example.COM:8443")]), 1, Default::default());
        let hosts: Vec<_> = h.get_all("host").map(|v| v.as_bytes().to_vec()).collect();
        assert_eq!(hosts, vec![b"Example.COM:8443".to_vec()]);
        // Another host: both, the authority's first (refused as a duplicate).
        let h = request_headers(&req(&[("host", "other.example")]), 1, Default::default());
        let hosts: Vec<_> = h.get_all("host").map(|v| v.as_bytes().to_vec()).collect();
        assert_eq!(
            hosts,
            vec![b"example.com:8443".to_vec(), b"other.example".to_vec()]
        );
        // No authority: the field is the host.
        let mut parts = req(&[("host", "other.example")]);
        parts.uri = http::Uri::from_static("/p");
        let h = request_headers(&parts, 1, Default::default());
        assert_eq!(h.get_all("host").count(), 1);
        assert_eq!(h.get("host").unwrap(), "other.example");
    }

    #[test]
    fn underscores_are_dropped() {
        let h = request_headers(&req(&[("x_a", "1"), ("x-b", "2")]), 1, Default::default());
        assert!(h.get("x_a").is_none());
        assert!(h.get("x-b").is_some());
    }

    #[test]
    fn connection_specific_response_headers() {
        let is = |n: &str, v: &str| {
            connection_specific(
                &http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                &HeaderValue::from_str(v).unwrap(),
            )
        };
        for n in CONNECTION_SPECIFIC {
            assert!(is(n, "x"), "{n}");
        }
        assert!(is("te", "gzip"));
        assert!(!is("te", "trailers"));
        assert!(!is("content-type", "text/plain"));
        assert!(!is("x-connection", "close"));
    }

    #[test]
    fn header_limits_are_nginx_buffers() {
        assert_eq!(header_list_max(4, 8192), 65536);
        assert_eq!(header_list_max(1, 64), 16 * 1024);
    }
}
