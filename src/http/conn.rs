//! A client connection's life: the accept loop, hyper's connection driven
//! until it ends or parks, the keep-alive clock (`Idle`, `InFlight`), and the
//! graceful drain shared with the stream proxy. What a request does once read
//! is the pipeline's (`pipeline.rs`). Called by `serve`, from `process::worker`.

use crate::net::accept::{Sock, running, wind_down};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, watch};

use crate::conf::Config;
use crate::conf::model::ListenAddr;
use crate::log::Level;
use crate::upstream::Upstreams;
use crate::upstream::clock::Clock;

use super::access::LoggedBody;
use super::pipeline::handle;
use super::vars::ConnInfo;
use super::{Listener, Phase, Shared, case, client_io, keeper, router, status};

/// A client connection's keep-alive clock: requests in flight, and when the
/// last one finished. The connection closes after `keepalive_timeout` idle.
pub(crate) struct Idle {
    born: std::time::Instant,
    inflight: AtomicUsize,
    /// Milliseconds after `born` when the last request finished.
    since: AtomicU64,
    /// The idle limit in milliseconds (the last request's `keepalive_timeout`).
    limit: AtomicU64,
    /// Wakes the connection's watcher when the idle limit changes.
    changed: Notify,
    /// While a response body is being sent: when the client last took data
    /// (ms after `born`), and the `send_timeout` in ms (0: not sending).
    sent_at: AtomicU64,
    send_limit: AtomicU64,
    /// Requests ended on this connection.
    ended: AtomicU64,
    /// `client_header_timeout` in ms: from the first byte of a request head
    /// this bounds the head instead of `keepalive_timeout`, so a head sent
    /// slowly (slowloris) is cut as nginx cuts it.
    head_limit: u64,
    /// A head has started arriving and its clock runs...
    head_clock: std::sync::atomic::AtomicBool,
    /// ...since then (ms after `born`).
    head_since: AtomicU64,
    pub(crate) flags: client_io::Flags,
}

impl Idle {
    /// The client took a piece of the response (or the response started).
    pub(crate) fn sending(&self, limit: Duration) {
        self.sent_at.store(self.now_ms(), Ordering::Relaxed);
        self.send_limit
            .store(limit.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// The body waits for its source (the upstream), not for the client.
    pub(crate) fn waiting(&self) {
        self.send_limit.store(0, Ordering::Relaxed);
    }

    /// `send_timeout`: the client has not taken data for that long.
    fn send_stalled(&self) -> bool {
        let limit = self.send_limit.load(Ordering::Relaxed);
        limit > 0
            && self
                .now_ms()
                .saturating_sub(self.sent_at.load(Ordering::Relaxed))
                >= limit
    }

    pub(crate) fn new(limit: Duration) -> Idle {
        Idle {
            born: std::time::Instant::now(),
            inflight: AtomicUsize::new(0),
            since: AtomicU64::new(0),
            limit: AtomicU64::new(limit.as_millis() as u64),
            changed: Notify::new(),
            sent_at: AtomicU64::new(0),
            send_limit: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            head_limit: limit.as_millis() as u64,
            head_clock: std::sync::atomic::AtomicBool::new(false),
            head_since: AtomicU64::new(0),
            flags: client_io::Flags::default(),
        }
    }

    /// Bytes of a request arrived: between requests, the first of them
    /// starts the head's clock (`client_header_timeout`). Only a store: the
    /// watcher is not woken, it looks at least every `head_limit` while
    /// idle (see `remaining`), so a request costs no extra wake-up.
    pub(crate) fn bytes_arrived(&self) {
        if self.inflight.load(Ordering::Acquire) == 0 && !self.head_clock.load(Ordering::Relaxed) {
            self.head_since.store(self.now_ms(), Ordering::Relaxed);
            self.head_clock.store(true, Ordering::Release);
        }
    }

    /// A head began and was not complete within `client_header_timeout`.
    fn head_overdue(&self) -> bool {
        self.inflight.load(Ordering::Acquire) == 0
            && self.head_clock.load(Ordering::Acquire)
            && self
                .now_ms()
                .saturating_sub(self.head_since.load(Ordering::Relaxed))
                >= self.head_limit
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// How long no request has been in flight (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.inflight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.since.load(Ordering::Acquire)),
        )
    }

    /// How long to wait before checking again; zero when the limit has passed.
    fn remaining(&self) -> Duration {
        let limit = self.limit.load(Ordering::Relaxed);
        // While a request is in flight, look again each second (send_timeout).
        if self.inflight.load(Ordering::Acquire) > 0 {
            return Duration::from_secs(1);
        }
        let now = self.now_ms();
        if self.head_clock.load(Ordering::Acquire) {
            // A head has begun: its own limit replaces the keep-alive one.
            let began = self.head_since.load(Ordering::Relaxed);
            return Duration::from_millis(
                self.head_limit.saturating_sub(now.saturating_sub(began)),
            );
        }
        let idle = now.saturating_sub(self.since.load(Ordering::Acquire));
        // Look again within head_limit: a head may begin meanwhile.
        let left = limit.saturating_sub(idle);
        Duration::from_millis(if self.head_limit > 0 {
            left.min(self.head_limit)
        } else {
            left
        })
    }
}

/// Counts a tunnel (an upgraded connection) as active until dropped, so that a
/// graceful stop waits for it (bounded by `worker_shutdown_timeout`).
/// A tunnel also keeps its client connection's `worker_connections` slot,
/// which would otherwise go back when the HTTP connection hands over.
pub(crate) struct Tracked {
    shared: Arc<Shared>,
    /// Held for as long as the tunnel lives.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Tracked {
    pub(crate) fn new(shared: &Arc<Shared>, conn: &ConnInfo) -> Tracked {
        shared.active.fetch_add(1, Ordering::AcqRel);
        let slot = conn.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        Tracked {
            shared: shared.clone(),
            _slot: slot,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.shared.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.drained.notify_waiters();
        }
    }
}

/// Held while a request is in flight; its end starts the idle clock.
pub(crate) struct InFlight(Arc<Idle>, Option<Arc<status::Stats>>);

impl InFlight {
    fn start(idle: &Arc<Idle>, stats: Option<&Arc<status::Stats>>) -> InFlight {
        idle.inflight.fetch_add(1, Ordering::AcqRel);
        idle.head_clock.store(false, Ordering::Release);
        if let Some(c) = stats.and_then(|s| s.counters()) {
            c.requests.fetch_add(1, Ordering::Relaxed);
            c.writing.fetch_add(1, Ordering::Relaxed);
        }
        InFlight(idle.clone(), stats.cloned())
    }

    /// Sets the idle limit; the watcher re-arms only when it changes, so a
    /// busy connection costs no timer work per request.
    pub(crate) fn idle(&self) -> &Arc<Idle> {
        &self.0
    }

    pub(super) fn keepalive(&self, limit: Duration) {
        let ms = limit.as_millis() as u64;
        if self.0.limit.swap(ms, Ordering::Relaxed) != ms {
            self.0.changed.notify_one();
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.since.store(self.0.now_ms(), Ordering::Release);
        self.0.ended.fetch_add(1, Ordering::AcqRel);
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
        if let Some(c) = self.1.as_ref().and_then(|s| s.counters()) {
            c.writing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Serves until the phase leaves `Running`, then drains as it asks.
/// `shutdown_timeout` bounds a graceful drain (`worker_shutdown_timeout`).
pub async fn serve(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    mut phase: watch::Receiver<Phase>,
    next_conn: Arc<AtomicU64>,
    slots: Arc<crate::net::slots::Slots>,
    shm: status::Shm,
    slot: usize,
) {
    let router = match &cfg.http {
        Some(h) => router::Router::new(h),
        None => router::Router::new(&crate::conf::model::Http::default()),
    };
    let shared = Arc::new(Shared {
        slots,
        upstreams: Upstreams::new(cfg.http.as_ref().map(|h| &h.upstreams), &shm.zones),
        stream_upstreams: Upstreams::new(cfg.stream.as_ref().map(|s| &s.upstreams), &shm.zones),
        stats: shm.stats.clone(),
        generation: shm.generation,
        dns: crate::upstream::dns::Cache::new(),
        draining: std::sync::OnceLock::new(),
        drain: cfg
            .main
            .worker_shutdown_timeout
            .map_or(DRAIN, |t| t.min(DRAIN)),
        header_wait: cfg
            .http
            .iter()
            .flat_map(case::all_confs)
            .map(|c| c.client_header_timeout.max(c.keepalive_timeout))
            .max()
            .unwrap_or(Duration::from_secs(75)),
        header_case: case::template(cfg.http.as_ref()).await,
        cfg: cfg.clone(),
        router,
        next_conn,
        active: AtomicUsize::new(0),
        park_above: (cfg.events.worker_connections / 4).min(256),
        drained: Notify::new(),
    });
    // Zone upstreams: keep snapshots current and tell each zone which
    // publications this worker still holds peers of.
    if !shm.zones.is_empty() {
        crate::upstream::resolve::start_upkeep(&shared.upstreams, slot, shm.saved.clone());
    }
    // keepalive_min and pick_first warm=: connections opened ahead of
    // requests, each within the smallest proxy_connect_timeout configured.
    let mut keepers = tokio::task::JoinSet::new();
    let connect_timeout = cfg
        .http
        .iter()
        .flat_map(case::all_confs)
        .map(|c| c.proxy_connect_timeout)
        .min()
        .unwrap_or(Duration::from_secs(60));
    for u in shared.upstreams.iter() {
        if keeper::wants_keeper(&u.cfg) {
            keepers.spawn(keeper::keep(u.clone(), connect_timeout, Clock::new()));
        }
    }
    let mut accepts = tokio::task::JoinSet::new();
    for l in listeners {
        let shared = shared.clone();
        let phase = phase.clone();
        accepts.spawn(accept_loop(l, shared, phase));
    }
    running(&mut phase).await;
    keepers.shutdown().await;
    shared.start_draining();
    wind_down(
        &mut accepts,
        &shared.active,
        &shared.drained,
        &mut phase,
        cfg.main.worker_shutdown_timeout,
    )
    .await;
}

async fn accept_loop(l: Listener, shared: Arc<Shared>, phase: watch::Receiver<Phase>) {
    let addr = l.addr.clone();
    let Some(sock) = Sock::adopt(l) else {
        return;
    };
    loop {
        let Some(((io, remote, local), permit)) = sock.accept(&shared.slots).await else {
            return;
        };
        let info = ConnInfo {
            number: shared.next_conn.fetch_add(1, Ordering::Relaxed),
            remote,
            local,
            listen_text: addr.to_string(),
            slot: std::sync::Mutex::new(Some(permit)),
        };
        shared.active.fetch_add(1, Ordering::AcqRel);
        if let Some(c) = shared.stats.as_ref().and_then(|s| s.counters()) {
            c.accepted.fetch_add(1, Ordering::Relaxed);
            c.handled.fetch_add(1, Ordering::Relaxed);
            c.active.fetch_add(1, Ordering::Relaxed);
        }
        tokio::spawn(serve_conn(
            io,
            info,
            addr.clone(),
            shared.clone(),
            phase.clone(),
        ));
        // One connection per turn, as nginx's `multi_accept off`: the new
        // connection's request runs before the next accept, so a burst of
        // connections does not hold a burst of buffers at once.
        tokio::task::yield_now().await;
    }
}

pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

async fn serve_conn(
    stream: client_io::Stream,
    info: ConnInfo,
    listen: ListenAddr,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
) {
    let info = Arc::new(info);
    let served = Arc::new(AtomicU64::new(0));
    // Until the first request, and from the first byte of each later head:
    // the default server's client_header_timeout, as nginx.
    let default_server = shared
        .cfg
        .http
        .as_ref()
        .and_then(|h| shared.router.server(h, &listen, info.local, None));
    let head_limit =
        default_server.map_or(Duration::from_secs(60), |s| s.conf.client_header_timeout);
    let idle = Arc::new(Idle::new(head_limit));
    // hyper's read buffer grows to what it is allowed (about 400 kB) while a
    // head or body arrives slowly or faster than it is taken: bound it by
    // what a head may use (large_client_header_buffers) and a little more,
    // so that a head past the limit still reaches `request_problem` for
    // nginx's answer. A head far beyond it gets hyper's 431.
    let read_buf = default_server
        .map_or(32 * 1024, |s| {
            let (count, size) = s.conf.large_client_header_buffers;
            u64::from(count).saturating_mul(size)
        })
        .saturating_add(1024)
        .clamp(8 * 1024, 4 * 1024 * 1024) as usize;
    let svc = {
        let shared = shared.clone();
        let info = info.clone();
        let idle = idle.clone();
        service_fn(move |req: Request<Incoming>| {
            let shared = shared.clone();
            let info = info.clone();
            let listen = listen.clone();
            let served = served.clone();
            let flight = InFlight::start(&idle, shared.stats.as_ref());
            let flags = &idle.flags;
            flags.body.store(
                !hyper::body::Body::is_end_stream(req.body()),
                Ordering::Relaxed,
            );
            let idle = idle.clone();
            async move {
                let n = served.fetch_add(1, Ordering::Relaxed) + 1;
                let v10 = req.version() == hyper::Version::HTTP_10;
                let resp = handle(&shared, info, &listen, req, n, flight).await;
                if let Ok(resp) = &resp {
                    // An HTTP/1.0 request still gets an HTTP/1.1 status line,
                    // as from nginx.
                    if v10 {
                        idle.flags.head_next.store(true, Ordering::Release);
                    }
                    if resp.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                        idle.flags.no_park.store(true, Ordering::Release);
                    }
                }
                resp
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .preserve_header_case(true)
        .title_case_headers(true)
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_wait)
        .max_buf_size(read_buf);
    let mut io = client_io::ClientIo::new(stream, idle.clone());
    let mut fresh = true;
    loop {
        if !io.has_unread() && !wait_for_request(&io, &shared, &idle, &mut phase, fresh).await {
            break;
        }
        fresh = false;
        idle.flags.parking.store(false, Ordering::Release);
        let mut conn = Box::new(
            builder
                .serve_connection(TokioIo::new(io), svc.clone())
                .with_upgrades(),
        );
        if !drive(&mut conn, &shared, &idle, &info, &mut phase).await {
            break;
        }
        // Parked: keep the socket and what hyper read ahead; drop the rest.
        match conn.into_parts() {
            Some(parts) => {
                io = parts.io.into_inner();
                io.unread(parts.read_buf);
                crate::log_conn!(
                    Level::Debug,
                    info.number,
                    "http keepalive: connection parked, buffers freed"
                );
            }
            None => break,
        }
    }
    if let Some(c) = shared.stats.as_ref().and_then(|s| s.counters()) {
        c.active.fetch_sub(1, Ordering::Relaxed);
    }
    if shared.active.fetch_sub(1, Ordering::AcqRel) == 1 {
        shared.drained.notify_waiters();
    }
}

/// How long a keep-alive connection may stay idle once a graceful stop began
/// (nginx closes idle ones at once, racing clients that send right then).
const DRAIN: Duration = Duration::from_secs(1);

impl Shared {
    /// While stopping gracefully: how much longer a connection idle for
    /// `idle_for` may stay (zero: close it now). None while running.
    fn drain_left(&self, idle_for: Duration) -> Option<Duration> {
        let since = self.draining.get()?;
        Some(self.drain.saturating_sub(idle_for.min(since.elapsed())))
    }

    fn start_draining(&self) {
        self.draining.get_or_init(std::time::Instant::now);
    }
}

/// A parked connection waits here, holding no buffer, until the client sends
/// (true) or `keepalive_timeout` passes or the worker stops (false).
async fn wait_for_request(
    io: &client_io::ClientIo<client_io::Stream>,
    shared: &Shared,
    idle: &Idle,
    phase: &mut watch::Receiver<Phase>,
    fresh: bool,
) -> bool {
    loop {
        let mut wait = idle.remaining();
        match *phase.borrow_and_update() {
            Phase::Fast => return false,
            Phase::Graceful => {
                shared.start_draining();
                wait = wait.min(shared.drain_left(idle.idle_for()).unwrap_or_default());
            }
            Phase::Running => {}
        }
        if wait.is_zero() {
            return false;
        }
        tokio::select! {
            r = std::future::poll_fn(|cx| io.get_ref().poll_readable(cx, fresh)) => return r.is_ok(),
            ch = phase.changed() => {
                if ch.is_err() {
                    return false;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

type ClientConn<S> = hyper::server::conn::http1::UpgradeableConnection<
    TokioIo<client_io::ClientIo<client_io::Stream>>,
    S,
>;

/// What woke `drive`.
enum Step {
    /// hyper's connection ended; true when it was parked.
    Done(bool),
    /// The phase changed; true when its sender is gone.
    Phase(bool),
    Timer,
    /// The idle limit changed.
    Limit,
}

/// Runs hyper's connection until it ends. True when it ended because it was
/// parked (the socket stays open for the next request): that is decided
/// right after hyper's own poll, when a request has ended and none is in
/// flight, so parking costs no extra wake-up. Parking costs a new hyper
/// connection per request (about 15% more instructions per request), so it
/// starts only when the worker holds many connections (`Shared::park_above`),
/// where buffers, not instructions, are what runs out.
async fn drive<S>(
    conn: &mut ClientConn<S>,
    shared: &Shared,
    idle: &Idle,
    info: &ConnInfo,
    phase: &mut watch::Receiver<Phase>,
) -> bool
where
    S: hyper::service::HttpService<Incoming, ResBody = LoggedBody> + Unpin,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    ClientConn<S>: Future<Output = hyper::Result<()>> + Unpin,
{
    use std::pin::Pin;
    use std::task::Poll;
    let flags = &idle.flags;
    let ended_before = idle.ended.load(Ordering::Acquire);
    let mut shutting = false;
    loop {
        let mut wait = idle.remaining();
        match *phase.borrow_and_update() {
            Phase::Fast if !shutting => {
                Pin::new(&mut *conn).graceful_shutdown();
                shutting = true;
            }
            // A graceful stop: requests still come (answered with
            // `Connection: close`); a connection idle for the drain time
            // closes.
            Phase::Graceful if !shutting => {
                shared.start_draining();
                let left = shared.drain_left(idle.idle_for()).unwrap_or_default();
                if idle.inflight.load(Ordering::Acquire) == 0 && left.is_zero() {
                    flags.parking.store(false, Ordering::Release);
                    Pin::new(&mut *conn).graceful_shutdown();
                    shutting = true;
                } else if !left.is_zero() {
                    wait = wait.min(left);
                }
            }
            _ => {}
        }
        if shutting {
            let _ = (&mut *conn).await;
            return false;
        }
        let step = {
            let changed = phase.changed();
            let limit = idle.changed.notified();
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(changed, limit, sleep);
            std::future::poll_fn(|cx| {
                if let Poll::Ready(r) = Pin::new(&mut *conn).poll(cx) {
                    return Poll::Ready(Step::Done(
                        r.is_ok() && flags.parking.load(Ordering::Acquire),
                    ));
                }
                if idle.inflight.load(Ordering::Acquire) == 0
                    && idle.ended.load(Ordering::Acquire) != ended_before
                    && shared.draining.get().is_none()
                    && shared.active.load(Ordering::Relaxed) > shared.park_above
                    && !flags.parking.load(Ordering::Acquire)
                    && !flags.body.load(Ordering::Relaxed)
                    && !flags.no_park.load(Ordering::Acquire)
                {
                    flags.parking.store(true, Ordering::Release);
                    Pin::new(&mut *conn).graceful_shutdown();
                    if let Poll::Ready(r) = Pin::new(&mut *conn).poll(cx) {
                        return Poll::Ready(Step::Done(r.is_ok()));
                    }
                }
                if let Poll::Ready(ch) = changed.as_mut().poll(cx) {
                    return Poll::Ready(Step::Phase(ch.is_err()));
                }
                if limit.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Step::Limit);
                }
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Step::Timer);
                }
                Poll::Pending
            })
            .await
        };
        match step {
            Step::Done(parked) => return parked,
            Step::Phase(gone) => {
                if gone {
                    Pin::new(&mut *conn).graceful_shutdown();
                    shutting = true;
                }
            }
            Step::Limit => {}
            // keepalive_timeout: an idle connection closes (one mid-request
            // finishes its request first).
            Step::Timer => {
                if idle.send_stalled() {
                    crate::log_conn!(
                        Level::Info,
                        info.number,
                        "client timed out (110: Connection timed out) while sending response to client"
                    );
                    return false;
                }
                if idle.head_overdue() {
                    // hyper would wait for the rest of a head it began.
                    crate::log_conn!(
                        Level::Info,
                        info.number,
                        "client timed out (110: Connection timed out) while reading client request headers"
                    );
                    return false;
                }
                if idle.remaining().is_zero() {
                    flags.parking.store(false, Ordering::Release);
                    Pin::new(&mut *conn).graceful_shutdown();
                    shutting = true;
                }
            }
        }
    }
}
