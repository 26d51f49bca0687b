//! The HTTP server of a worker: accepts on the inherited listeners, serves
//! HTTP/1.0 and 1.1 with hyper, routes each request to a server and location
//! and runs its handler. Shutdown is driven by a `Phase` watch the worker
//! sets from signals: graceful (stop accepting, close idle connections, let
//! requests finish) or fast. Called by `process::worker` only.

pub mod access;
pub mod case;
pub(crate) mod client_io;
mod dynamic;
mod framing;
pub mod keeper;
mod open_file;
pub mod proxy;
mod proxy_body;
pub mod range;
pub mod realip;
pub mod response;
pub mod router;
pub mod script;
pub mod static_files;
pub mod status;
mod tunnel;
pub mod uri;
pub mod vars;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, Semaphore, watch};

use crate::conf::Config;
use crate::conf::model::{ListenAddr, Location, Return, Server};
use crate::log::Level;
use crate::upstream::Upstreams;
use access::LoggedBody;
use response::Body;
use vars::{ConnInfo, Req};

/// A listening socket given to this worker, with the address it was bound for.
pub struct Listener {
    pub addr: ListenAddr,
    pub fd: OwnedFd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// QUIT: finish what is in flight, then stop.
    Graceful,
    /// TERM/INT: stop now.
    Fast,
}

/// What a handler answers: a response, or a status for nginx's special
/// response (its page, or an `error_page`).
pub enum Reply {
    Full(Response<Body>),
    Status(u16),
    /// An internal redirect to a URI or `@name` (an upstream's
    /// `X-Accel-Redirect`).
    Internal(String),
}

/// The client's request body, or none (an internal redirect has none).
pub enum ClientBody {
    Incoming(Incoming),
    Empty,
}

/// Returned by a handler that wants the connection closed without a response
/// (`return 444`).
#[derive(Debug)]
pub struct CloseConnection;

impl std::fmt::Display for CloseConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed without response")
    }
}
impl std::error::Error for CloseConnection {}

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
pub(crate) struct Tracked(Arc<Shared>);

impl Tracked {
    pub(crate) fn new(shared: &Arc<Shared>) -> Tracked {
        shared.active.fetch_add(1, Ordering::AcqRel);
        Tracked(shared.clone())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
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

    fn keepalive(&self, limit: Duration) {
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

pub(crate) struct Shared {
    /// hyper's header-case map for the names sluice writes (see `case`).
    header_case: Option<hyper::http::Extensions>,
    /// How long hyper may wait for a request head: covers both the keep-alive
    /// wait and `client_header_timeout`; `Idle` enforces `keepalive_timeout`.
    header_wait: Duration,
    cfg: Arc<Config>,
    router: router::Router,
    upstreams: Upstreams,
    /// Connection numbers (`*N` in the error log), shared with the
    /// worker's stream proxy so that no two connections share one.
    next_conn: Arc<AtomicU64>,
    active: AtomicUsize,
    /// Idle keep-alive connections are parked (see `client_io`) while the
    /// worker holds more connections than this.
    park_above: usize,
    /// `stub_status` counters, when a location has it.
    stats: Option<Arc<status::Stats>>,
    /// The master's generation number for this configuration.
    generation: u64,
    /// Names looked up for `proxy_pass` with variables.
    dns: crate::upstream::dns::Cache,
    /// The stream block's upstreams, for the API (their state is the zones').
    stream_upstreams: Upstreams,
    /// Set when a graceful stop began: responses then carry `Connection:
    /// close`, and a connection closes once idle for `drain`.
    draining: std::sync::OnceLock<std::time::Instant>,
    drain: Duration,
    drained: Notify,
    slots: Arc<Semaphore>,
}

/// Serves until the phase leaves `Running`, then drains as it asks.
/// `shutdown_timeout` bounds a graceful drain (`worker_shutdown_timeout`).
pub async fn serve(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    mut phase: watch::Receiver<Phase>,
    next_conn: Arc<AtomicU64>,
    shm: status::Shm,
    slot: usize,
) {
    let router = match &cfg.http {
        Some(h) => router::Router::new(h),
        None => router::Router::new(&crate::conf::model::Http::default()),
    };
    let shared = Arc::new(Shared {
        slots: Arc::new(Semaphore::new(cfg.events.worker_connections)),
        upstreams: Upstreams::new(cfg.http.as_ref(), &shm.zones),
        stream_upstreams: Upstreams::from_list(
            cfg.stream
                .as_ref()
                .map(|s| s.upstreams.as_slice())
                .unwrap_or(&[]),
            &shm.zones,
        ),
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
            keepers.spawn(keeper::keep(u.clone(), connect_timeout));
        }
    }
    let mut accepts = tokio::task::JoinSet::new();
    for l in listeners {
        let shared = shared.clone();
        let phase = phase.clone();
        accepts.spawn(accept_loop(l, shared, phase));
    }
    while *phase.borrow_and_update() == Phase::Running {
        if phase.changed().await.is_err() {
            break;
        }
    }
    keepers.shutdown().await;
    shared.start_draining();
    // Stop accepting: the listeners close with their tasks.
    accepts.shutdown().await;
    if *phase.borrow() == Phase::Fast {
        return;
    }
    drain(
        &shared.active,
        &shared.drained,
        &mut phase,
        cfg.main.worker_shutdown_timeout,
    )
    .await;
}

/// A graceful stop: waits until no connection is `active` (each end
/// notifies `drained`), a fast stop, or `limit` (worker_shutdown_timeout),
/// which is logged. Shared by the HTTP server and the stream proxy.
pub(crate) async fn drain(
    active: &AtomicUsize,
    drained: &Notify,
    phase: &mut watch::Receiver<Phase>,
    limit: Option<Duration>,
) {
    let wait = async {
        loop {
            let notified = drained.notified();
            if active.load(Ordering::Acquire) == 0 {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = phase.changed() => {
                    if *phase.borrow() == Phase::Fast {
                        return;
                    }
                }
            }
        }
    };
    match limit {
        Some(t) => {
            if tokio::time::timeout(t, wait).await.is_err() {
                crate::log!(
                    Level::Notice,
                    "worker_shutdown_timeout: closing {} connection(s)",
                    active.load(Ordering::Acquire)
                );
            }
        }
        None => wait.await,
    }
}

/// An accepted connection: the stream, the peer (TCP) and the local address.
pub(crate) type Accepted = (
    client_io::Stream,
    Option<std::net::SocketAddr>,
    Option<std::net::SocketAddr>,
);

/// A listening socket in the worker's runtime.
pub(crate) enum Sock {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Sock {
    /// The runtime's socket for an inherited listener (`[alert]` if unusable).
    pub(crate) fn adopt(l: Listener) -> Option<Sock> {
        let sock = match &l.addr {
            ListenAddr::Inet(_) => {
                tokio::net::TcpListener::from_std(std::net::TcpListener::from(l.fd)).map(Sock::Tcp)
            }
            ListenAddr::Unix(_) => {
                tokio::net::UnixListener::from_std(std::os::unix::net::UnixListener::from(l.fd))
                    .map(Sock::Unix)
            }
        };
        match sock {
            Ok(s) => Some(s),
            Err(e) => {
                crate::log!(
                    Level::Alert,
                    "cannot use listening socket {}: {}",
                    l.addr,
                    e
                );
                None
            }
        }
    }

    /// The next connection. A failed accept (EMFILE and friends: the host is
    /// short of something) is logged and tried again after a back-off.
    pub(crate) async fn accept(&self) -> Accepted {
        loop {
            match self.accept_once().await {
                Ok(a) => return a,
                Err(e) => {
                    crate::log!(
                        Level::Crit,
                        "accept() failed ({})",
                        crate::log::errno_text(&e)
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn accept_once(&self) -> std::io::Result<Accepted> {
        match self {
            Sock::Tcp(t) => t.accept().await.map(|(s, peer)| {
                let local = s.local_addr().ok();
                let _ = s.set_nodelay(true);
                (client_io::Stream::Tcp(s), Some(peer), local)
            }),
            Sock::Unix(u) => u
                .accept()
                .await
                .map(|(s, _)| (client_io::Stream::Unix(s), None, None)),
        }
    }
}

async fn accept_loop(l: Listener, shared: Arc<Shared>, phase: watch::Receiver<Phase>) {
    let addr = l.addr.clone();
    let Some(sock) = Sock::adopt(l) else {
        return;
    };
    let mut warned = false;
    loop {
        let permit = match shared.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !warned {
                    crate::log!(
                        Level::Warn,
                        "{} worker_connections are not enough, waiting for a free one",
                        shared.cfg.events.worker_connections
                    );
                    warned = true;
                }
                match shared.slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                }
            }
        };
        let (io, remote, local) = sock.accept().await;
        let info = ConnInfo {
            number: shared.next_conn.fetch_add(1, Ordering::Relaxed),
            remote,
            local,
            listen_text: addr.to_string(),
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
            permit,
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
    _permit: tokio::sync::OwnedSemaphorePermit,
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

/// `Host` (or the absolute URI's authority) lowercased, without port or final dot.
/// Err for a host nginx refuses with 400.
fn request_host(req: &Request<Incoming>) -> Result<Option<String>, ()> {
    let raw: &str = match req.uri().authority() {
        Some(a) => a.host(),
        None => match req.headers().get(HOST) {
            Some(h) => h.to_str().map_err(|_| ())?,
            None => return Ok(None),
        },
    };
    let host = if raw.starts_with('[') {
        match raw.find(']') {
            Some(end) => &raw[..=end],
            None => return Err(()),
        }
    } else {
        raw.split(':').next().unwrap_or("")
    };
    if host.contains('/') || host.contains("..") || host.starts_with('.') || host.contains('\\') {
        return Err(());
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    Ok(if host.is_empty() {
        None
    } else {
        Some(host.to_ascii_lowercase())
    })
}

/// Serves one request: picks server and location, runs the handler, and
/// wraps the response so that the access log is written when it is sent.
async fn handle(
    shared: &Arc<Shared>,
    info: Arc<ConnInfo>,
    listen: &ListenAddr,
    req: Request<Incoming>,
    nth: u64,
    flight: InFlight,
) -> Result<Response<LoggedBody>, CloseConnection> {
    let Some(http) = shared.cfg.http.as_ref() else {
        return Err(CloseConnection);
    };
    let host = request_host(&req);
    let Some(server) = shared.router.server(
        http,
        listen,
        info.local,
        host.as_ref().ok().and_then(|h| h.as_deref()),
    ) else {
        return Err(CloseConnection);
    };
    let (parts, body) = req.into_parts();
    let normalized = uri::normalize(parts.uri.path());
    let location = normalized
        .as_deref()
        .and_then(|u| router::find_location(&server.locations, u));
    let conf = location
        .map(|l| l.conf.clone())
        .unwrap_or_else(|| server.conf.clone());
    let mut r = Req {
        conn: info,
        start: std::time::Instant::now(),
        method: parts.method,
        version: parts.version,
        request_uri: parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into()),
        uri: normalized
            .clone()
            .unwrap_or_else(|| parts.uri.path().to_string()),
        args: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        host: match &host {
            Ok(Some(h)) => h.clone(),
            _ => server.primary_name.clone(),
        },
        server_name: server.primary_name.clone(),
        conf,
        status: 0,
        body_bytes_sent: 0,
        bytes_sent: 0,
        request_length: 0,
        proxy_host: String::new(),
        proxy_port: 0,
        upstream: Arc::default(),
        vars: Vec::new(),
        captures: Vec::new(),
        uri_changed: false,
        realip: None,
    };
    flight.keepalive(r.conf.keepalive_timeout);
    let mut closing = false;
    let bad = framing::request_problem(&r, host.is_ok());
    let reply = if let Some(framing::Problem { code, why, in_line }) = bad {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "{} while reading client request {}{}",
            why,
            if in_line { "line" } else { "headers" },
            r.log_context(None)
        );
        // A request nginx refuses this way also ends its connection.
        if code == 400 || code == 494 || code == 501 {
            closing = true;
        }
        Ok(Reply::Status(code))
    } else if host.is_err() {
        crate::log_conn!(
            Level::Info,
            r.conn.number,
            "client sent invalid host header while reading client request headers"
        );
        Ok(Reply::Status(400))
    } else if normalized.is_none() {
        Ok(Reply::Status(400))
    } else {
        dispatch(
            shared,
            &mut r,
            server,
            None,
            ClientBody::Incoming(body),
            parts.extensions,
        )
        .await
    };
    let resp = match reply {
        Ok(reply) => finish(shared, &mut r, server, reply).await,
        Err(e) => Err(e),
    };
    let mut resp = match resp {
        Ok(resp) => resp,
        Err(close) => {
            // 444: logged, then the connection closes without a response.
            r.status = 444;
            access::write(&r);
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
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
    } else if let Some(secs) = r.conf.keepalive_header {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("timeout={secs}")) {
            resp.headers_mut().insert("keep-alive", v);
        }
    }
    r.status = resp.status().as_u16();
    // Only an access log reads $bytes_sent.
    if !r.conf.access_log.is_empty() {
        r.bytes_sent = header_bytes(&resp);
    }
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(
        parts,
        LoggedBody::new(body, r, flight),
    ))
}

/// About what the status line and headers take on the wire, for `$bytes_sent`.
fn header_bytes(resp: &Response<Body>) -> u64 {
    let headers: usize = resp
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    (17 + headers + 2) as u64
}

async fn dispatch(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    named: Option<&Location>,
    body: ClientBody,
    extensions: hyper::http::Extensions,
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
    let mut location = named.or_else(|| router::find_location(&server.locations, &r.uri));
    let mut searches = 0;
    loop {
        r.conf = location
            .map(|l| l.conf.clone())
            .unwrap_or_else(|| server.conf.clone());
        let Some(l) = location else { break };
        match script::run(&l.script, r) {
            script::Flow::Done(reply) => return reply,
            script::Flow::Last => {
                searches += 1;
                if searches > 10 {
                    crate::log_conn!(
                        Level::Error,
                        r.conn.number,
                        "rewrite or internal redirection cycle while processing \"{}\"{}",
                        r.uri,
                        r.log_context(None)
                    );
                    return Ok(Reply::Status(500));
                }
                location = router::find_location(&server.locations, &r.uri);
            }
            script::Flow::Next | script::Flow::Break => break,
        }
    }
    // Else with the location's (nginx's preaccess phase).
    realip::apply(r);
    if let Some(l) = location {
        match l.handler {
            Some(crate::conf::model::Handler::Api { .. }) => {
                drop(body);
                return Ok(status::api(
                    r,
                    &l.uri,
                    &shared.upstreams,
                    &shared.stream_upstreams,
                    shared.generation,
                ));
            }
            Some(crate::conf::model::Handler::StubStatus) => {
                drop(body);
                return Ok(status::stub_status(r, shared.stats.as_deref()));
            }
            None => {}
        }
        if let Some(t) = &l.proxy_pass_var {
            let id = l as *const Location as usize;
            return Ok(dynamic::run(r, t, id, body, extensions, shared).await);
        }
        if let Some(pp) = &l.proxy_pass {
            let Some(ups) = shared.upstreams.get(pp.upstream) else {
                return Ok(Reply::Status(500));
            };
            let id = l as *const Location as usize;
            return Ok(proxy::run(r, ups.clone(), pp, id, body, extensions, shared).await);
        }
    }
    drop(body);
    Ok(static_files::serve(r).await)
}

/// Statuses `add_header` applies to without `always`, as nginx's.
const ADD_HEADER_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// Turns a reply into the response: a special status goes through
/// `error_page` (an internal redirect, a named location or a redirect) or
/// gets its built-in page; then `add_header` applies.
async fn finish(
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
                let page = r
                    .conf
                    .error_page
                    .iter()
                    .find(|p| p.codes.contains(&code))
                    .cloned();
                break match page {
                    None => response::status_page(code, tokens),
                    Some(page) => error_page(shared, r, server, code, &page).await?,
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
    // Our own responses get nginx's spelling of the names we write.
    if resp.extensions().get::<case::Proxied>().is_none() {
        if let Some(t) = &shared.header_case {
            resp.extensions_mut().extend(t.clone());
        }
    }
    let status = resp.status().as_u16();
    for h in &r.conf.add_header {
        if !h.always && !ADD_HEADER_STATUSES.contains(&status) {
            continue;
        }
        let v = r.eval(&h.value);
        if v.is_empty() {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(h.name.as_bytes()),
            hyper::header::HeaderValue::from_str(&v),
        ) {
            resp.headers_mut().append(n, v);
        }
    }
    Ok(resp)
}

/// Sets a response's status with nginx's reason phrase.
fn set_status(resp: &mut Response<Body>, code: u16) {
    if let Ok(s) = hyper::StatusCode::from_u16(code) {
        *resp.status_mut() = s;
    }
    resp.extensions_mut().remove::<hyper::ext::ReasonPhrase>();
    if let Some(reason) = response::reason(code) {
        resp.extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(reason.as_bytes()));
    }
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
    let target = r.eval(&page.target);
    if !target.starts_with('/') && !target.starts_with('@') {
        let code = match page.status {
            ErrorPageStatus::Code(c @ (301 | 302 | 303 | 307 | 308)) => c,
            _ => 302,
        };
        return Ok(response::redirect(code, &target, tokens));
    }
    let inner = internal_redirect(shared, r, server, &target).await?;
    // error_page does not apply again (nginx's recursive_error_pages off).
    let mut resp = match inner {
        Reply::Full(resp) => resp,
        Reply::Status(c) => response::status_page(c, tokens),
        Reply::Internal(_) => response::status_page(500, tokens),
    };
    match page.status {
        ErrorPageStatus::Keep => set_status(&mut resp, code),
        ErrorPageStatus::Code(c) => set_status(&mut resp, c),
        ErrorPageStatus::Target => {}
    }
    Ok(resp)
}

/// An internal redirect: GET (HEAD stays HEAD), the new URI (or a named
/// location), the location chosen again, its handler run without a body.
async fn internal_redirect(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    target: &str,
) -> Result<Reply, CloseConnection> {
    if r.method != hyper::Method::HEAD {
        r.method = hyper::Method::GET;
    }
    let named = if target.starts_with('@') {
        router::named_location(server, target)
    } else {
        let (path, args) = match target.split_once('?') {
            Some((p, a)) => (p.to_string(), Some(a.to_string())),
            None => (target.to_string(), None),
        };
        r.uri = uri::normalize(&path).unwrap_or(path);
        r.args = args;
        r.uri_changed = true;
        None
    };
    Box::pin(dispatch(
        shared,
        r,
        server,
        named,
        ClientBody::Empty,
        Default::default(),
    ))
    .await
}

pub(crate) fn do_return(ret: &Return, r: &Req) -> Result<Reply, CloseConnection> {
    if ret.code == 444 {
        return Err(CloseConnection);
    }
    let tokens = r.conf.server_tokens;
    let text = ret.text.as_ref().map(|t| r.eval(t));
    match (ret.code, text) {
        (301 | 302 | 303 | 307 | 308, Some(loc)) => {
            let loc = if loc.starts_with('/') {
                // absolute_redirect on, port_in_redirect on: as nginx builds it.
                let port = r.conn.local.map(|a| a.port()).unwrap_or(80);
                if port == 80 {
                    format!("http://{}{loc}", r.host)
                } else {
                    format!("http://{}:{port}{loc}", r.host)
                }
            } else {
                loc
            };
            Ok(Reply::Full(response::redirect(ret.code, &loc, tokens)))
        }
        (code, Some(body)) => Ok(Reply::Full(response::build(
            code,
            Some(&r.conf.default_type),
            Bytes::from(body),
            tokens,
        ))),
        (code, None) => Ok(Reply::Status(code)),
    }
}
