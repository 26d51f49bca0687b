//! A client connection's life: the accept loop, then request after request
//! on the connection's own task: the head read (`crate::h1`) into a buffer
//! held only while there is something to read, the pipeline run, the
//! response written with its framing, the rest of an unread body discarded,
//! the keep-alive wait with no buffer, and the graceful drain shared with
//! the stream proxy. What a request does once read is the pipeline's
//! (`pipeline.rs`). Called by `serve`, from `process::worker`.

use crate::net::accept::{Sock, running, wind_down};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, SERVER, TRANSFER_ENCODING};
use http::{Method, Response, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use crate::h1::body::{self, Framing};
use crate::h1::head::{
    AsReceived, HeadError, Known, Limits, Names, Reason, RequestHead, parse_request, same_name,
};
use crate::h1::write;

use crate::conf::Config;
use crate::conf::model::ListenAddr;
use crate::log::Level;
use crate::upstream::Upstreams;
use crate::upstream::clock::Clock;

use super::access::LoggedBody;
use super::inbound::{Inbound, ReqBody, Upgraded};
use super::pipeline::handle;
use super::vars::ConnInfo;
use super::{Listener, Phase, Shared, case, keeper, response, router, status};

/// Counts a tunnel (an upgraded connection) in `stub_status`'s Writing while
/// its connection relays it, as nginx's request stays Writing while it
/// proxies an upgraded connection. (The connection itself stays Active, in
/// the graceful stop's count and in its `worker_connections` slot, for it
/// goes on in its own task.)
struct Tunneling(Option<Arc<crate::net::stats::Stats>>);

impl Tunneling {
    fn new(shared: &Shared) -> Tunneling {
        if let Some(c) = shared.stats.as_ref().and_then(|s| s.counters()) {
            c.writing.fetch_add(1, Ordering::Relaxed);
        }
        Tunneling(shared.stats.clone())
    }
}

impl Drop for Tunneling {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_ref().and_then(|s| s.counters()) {
            c.writing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Counts a connection in `stub_status`'s Reading while it reads a request
/// head, until the head is read, refused or given up (dropped: the count
/// cannot be left behind).
struct Reading<'a>(Option<&'a crate::shm::records::StatusCounters>);

impl<'a> Reading<'a> {
    fn new(counters: Option<&'a crate::shm::records::StatusCounters>) -> Reading<'a> {
        if let Some(c) = counters {
            c.reading.fetch_add(1, Ordering::Relaxed);
        }
        Reading(counters)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.reading.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A client connection counted while it is open, wherever it is (its task
/// or the parker): for a graceful stop, and as `stub_status`'s Active.
pub(super) struct Open {
    _guard: crate::net::track::Guard,
    stats: Option<Arc<crate::net::stats::Stats>>,
}

impl Open {
    fn new(shared: &Shared) -> Open {
        if let Some(c) = shared.stats.as_ref().and_then(|s| s.counters()) {
            c.accepted.fetch_add(1, Ordering::Relaxed);
            c.handled.fetch_add(1, Ordering::Relaxed);
            c.active.fetch_add(1, Ordering::Relaxed);
        }
        Open {
            _guard: shared.conns.enter(),
            stats: shared.stats.clone(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(c) = self.stats.as_ref().and_then(|s| s.counters()) {
            c.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Held while a request is in flight (nginx's `Writing`): on HTTP/1 with
/// the connection's read side, whose keep-alive limit the request's
/// location sets; an HTTP/2 stream's connection keeps its own.
pub(crate) struct InFlight(Option<Arc<Inbound>>, Option<Arc<crate::net::stats::Stats>>);

impl InFlight {
    pub(super) fn start(
        inb: Option<&Arc<Inbound>>,
        stats: Option<&Arc<crate::net::stats::Stats>>,
    ) -> InFlight {
        if let Some(c) = stats.and_then(|s| s.counters()) {
            c.requests.fetch_add(1, Ordering::Relaxed);
            c.writing.fetch_add(1, Ordering::Relaxed);
        }
        InFlight(inb.cloned(), stats.cloned())
    }

    /// The request body's bytes read so far (for `$request_length`).
    pub(crate) fn body_read(&self) -> u64 {
        self.0.as_ref().map_or(0, |inb| inb.body_read())
    }

    /// Sets the connection's keep-alive limit (the location's).
    pub(super) fn keepalive(&self, limit: Duration) {
        if let Some(inb) = &self.0 {
            inb.set_keepalive(limit);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
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
    crate::net::stats::publish(shm.stats.as_ref());
    let shared = Arc::new(Shared {
        slots,
        upstreams: Upstreams::new(cfg.http.as_ref().map(|h| &h.upstreams), &shm.zones)
            .with_sessions(&shm.sticky),
        stream_upstreams: Upstreams::new(cfg.stream.as_ref().map(|s| &s.upstreams), &shm.zones),
        stats: shm.stats.clone(),
        saved: shm.saved.clone(),
        limits: shm.limits.clone(),
        generation: shm.generation,
        dns: crate::upstream::dns::Cache::new(),
        draining: std::sync::OnceLock::new(),
        drain: cfg
            .main
            .worker_shutdown_timeout
            .map_or(DRAIN, |t| t.min(DRAIN)),
        tls: super::tls::Configs::new(cfg.http.as_ref(), &shm.tls),
        upstream_tls: Arc::new(crate::net::tls_client::Clients::new()),
        cfg: cfg.clone(),
        router,
        next_conn,
        conns: crate::net::track::Tracker::new(),
        parker: crate::net::park::Parker::new().ok().map(Arc::new),
        idle: crate::net::idle::IdleClock::new(),
    });
    // Until the worker ends, connections draining included.
    let idle_clock = tokio::spawn({
        let shared = shared.clone();
        async move { shared.idle.run().await }
    });
    // A change of phase wakes the connections waiting between requests
    // (they do not each watch the phase: see `net::idle`).
    let phase_relay = tokio::spawn({
        let shared = shared.clone();
        let mut phase = phase.clone();
        async move {
            loop {
                let ended = phase.changed().await.is_err();
                shared.idle.wake_all(ended);
                if ended {
                    return;
                }
            }
        }
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
    for (i, u) in shared.upstreams.iter().enumerate() {
        // Over HTTP/2: the connection set's keeper, whatever keepalive_min.
        let h2 = cfg
            .http
            .as_ref()
            .and_then(|h| keeper::h2_for(h, i, u, &shared.upstream_tls));
        if let Some(o) = h2 {
            keepers.spawn(keeper::keep_h2(u.clone(), o, Clock::new()));
            continue;
        }
        if keeper::wants_keeper(&u.cfg) {
            let tls = cfg
                .http
                .as_ref()
                .and_then(|h| keeper::tls_for(h, i, &shared.upstream_tls));
            keepers.spawn(keeper::keep(u.clone(), connect_timeout, Clock::new(), tls));
        }
    }
    // Idle upstream connections over `keepalive N` close once idle
    // `pool::GRACE`: the caches are looked at every `GRACE`.
    let cached: Vec<Arc<crate::upstream::UpstreamRt>> = shared
        .upstreams
        .iter()
        .filter(|u| u.cfg.keepalive.max > 0)
        .cloned()
        .collect();
    if !cached.is_empty() {
        keepers.spawn(purge_surplus(cached));
    }
    if let Some(p) = &shared.parker {
        keepers.spawn(run_parker(p.clone(), phase.clone()));
        // Out of worker_connections, the oldest parked connections close
        // first, as nginx reuses idle keep-alive connections.
        let weak: std::sync::Weak<dyn crate::net::slots::Reclaim> =
            Arc::downgrade(&(p.clone() as Arc<dyn crate::net::slots::Reclaim>));
        shared.slots.reclaim_from(weak);
    }
    let mut accepts = tokio::task::JoinSet::new();
    for l in listeners {
        let shared = shared.clone();
        let phase = phase.clone();
        accepts.spawn(accept_loop(l, shared, phase));
    }
    running(&mut phase).await;
    keepers.shutdown().await;
    // Parked connections are idle: they close now, as nginx closes idle
    // keep-alive connections when it stops.
    if let Some(p) = &shared.parker {
        drop(p.take_all());
    }
    shared.start_draining();
    wind_down(
        &mut accepts,
        &shared.conns,
        &mut phase,
        cfg.main.worker_shutdown_timeout,
    )
    .await;
    idle_clock.abort();
    phase_relay.abort();
}

async fn accept_loop(l: Listener, shared: Arc<Shared>, phase: watch::Receiver<Phase>) {
    // Shared by its connections (a parked one keeps only a pointer).
    let addr = Arc::new(l.addr.clone());
    let listen_text: Arc<str> = addr.to_string().into();
    let tls_port = shared.router.ssl_on(&addr);
    let pp_port = shared.router.proxy_protocol_on(&addr);
    let Some(mut sock) = Sock::adopt(l, &shared.cfg.events) else {
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
            listen_text: listen_text.clone(),
            slot: Some(permit),
            tls: Default::default(),
            proxy: None,
            ignore_abort: Default::default(),
        };
        let open = Open::new(&shared);
        if pp_port || tls_port {
            // The PROXY protocol header first (then TLS, if the address
            // speaks it), or the handshake (or a plain request's 497), in
            // the connection's own task (its future in its box: see
            // `spawn_conn`).
            let (listen, shared, phase) = (addr.clone(), shared.clone(), phase.clone());
            if pp_port {
                crate::net::clock::spawn(crate::net::boxed::boxed(|| {
                    super::proxy_protocol::serve(io, info, listen, shared, open, phase, tls_port)
                }));
            } else {
                crate::net::clock::spawn(crate::net::boxed::boxed(|| {
                    super::tls::serve_conn_tls(io, info, listen, shared, open, phase)
                }));
            }
            continue;
        }
        let (ctx, inb) = open_conn(io, info, addr.clone(), &shared, open);
        spawn_conn(ctx, inb, phase.clone(), 0, crate::net::clock::now());
        // The next accept at once, without yielding first: `Sock` takes no
        // more than its batch before the event loop's next turn, and the
        // connections taken run then. A yield here made a turn of the event
        // loop for every new connection (new connections a second, `wrk
        // -c32` with `Connection: close`: x1.03 of nginx's with, x1.08
        // without).
    }
}

pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// What a connection's requests share: its limits and who it is.
pub(super) type ConnCtx = Ctx<Arc<ConnInfo>>;

/// A parked connection's context: its `ConnInfo` moved into the parker's
/// slab beside it, not left in a heap block of its own. A block left behind
/// by each of thousands of connections pins the pages the requests' short
/// allocations shared with it, and the heap cannot give them back.
pub(super) type ParkedCtx = Ctx<Held<ConnInfo>>;

/// A connection's context, its `ConnInfo` held as `I` says.
pub(super) struct Ctx<I> {
    pub(super) shared: Arc<Shared>,
    pub(super) info: I,
    pub(super) listen: Arc<ListenAddr>,
    /// `client_header_timeout` of the default server: the first request's
    /// wait, and each head's from its first byte.
    pub(super) head_limit: Duration,
    pub(super) limits: Limits,
    /// The default server's `underscores_in_headers` and
    /// `ignore_invalid_headers`: which header names a request keeps.
    pub(super) names: HeaderNames,
    /// Prior-knowledge HTTP/2 (h2c) may come instead of a first request.
    h2c: bool,
    /// Counted until the connection ends (the context is dropped).
    _open: Open,
}

/// A value owned inline, or shared with others still holding it.
pub(super) enum Held<T> {
    Own(T),
    Shared(Arc<T>),
}

impl<I> Ctx<I> {
    /// The same context with its `ConnInfo` held another way.
    fn hold<J>(self, f: impl FnOnce(I) -> J) -> Ctx<J> {
        Ctx {
            info: f(self.info),
            shared: self.shared,
            listen: self.listen,
            head_limit: self.head_limit,
            limits: self.limits,
            names: self.names,
            h2c: self.h2c,
            _open: self._open,
        }
    }
}

impl ConnCtx {
    fn park(self) -> ParkedCtx {
        self.hold(|info| match Arc::try_unwrap(info) {
            Ok(i) => Held::Own(i),
            Err(a) => Held::Shared(a),
        })
    }
}

impl ParkedCtx {
    fn resume(self) -> ConnCtx {
        self.hold(|info| match info {
            Held::Own(i) => Arc::new(i),
            Held::Shared(a) => a,
        })
    }
}

/// A new connection's settings (its default server's) and read side, made
/// before its task starts so that the task holds only what it uses.
pub(super) fn open_conn(
    stream: crate::net::stream::Stream,
    info: ConnInfo,
    listen: Arc<ListenAddr>,
    shared: &Arc<Shared>,
    open: Open,
) -> (ConnCtx, Arc<Inbound>) {
    let ctx = conn_ctx(info, listen, shared, open);
    let inb = Arc::new(Inbound::new(stream, ctx.head_limit));
    (ctx, inb)
}

/// A new connection's settings, its default server's.
pub(super) fn conn_ctx(
    info: ConnInfo,
    listen: Arc<ListenAddr>,
    shared: &Arc<Shared>,
    open: Open,
) -> ConnCtx {
    let info = Arc::new(info);
    let default_server = shared
        .cfg
        .http
        .as_ref()
        .and_then(|h| shared.router.server(h, &listen, info.local, None));
    let head_limit =
        default_server.map_or(Duration::from_secs(60), |s| s.conf.client_header_timeout);
    let limits = default_server.map_or_else(Limits::default, |s| {
        let (count, size) = s.conf.large_client_header_buffers;
        Limits {
            first: s.conf.client_header_buffer_size as usize,
            count: count as usize,
            size: size as usize,
        }
    });
    let names = default_server.map_or(HeaderNames::default(), |s| HeaderNames {
        underscores: s.conf.underscores_in_headers,
        ignore_invalid: s.conf.ignore_invalid_headers,
    });
    // Plain connections only: over TLS, ALPN said which.
    let h2c = matches!(info.tls, super::vars::ConnTls::None)
        && shared.router.http2(&listen, info.local, default_server);
    ConnCtx {
        shared: shared.clone(),
        info,
        listen,
        head_limit,
        limits,
        names,
        h2c,
        _open: open,
    }
}

/// A connection's task, its future made in its box (`net::boxed`): tokio
/// keeps a task's future in the task and writes its whole stage at each
/// step of its end, and the spawn moves it in, so a 1.4 kB future (10.7 kB
/// over TLS) was copied about six times a connection (`COST_PROTO=close
/// scripts/cost`: 35,600 instructions a connection, 2,950 of them `memcpy`;
/// 34,500 and 2,060 boxed).
fn spawn_conn(
    ctx: ConnCtx,
    inb: Arc<Inbound>,
    phase: watch::Receiver<Phase>,
    served: u64,
    idle_since: std::time::Instant,
) {
    crate::net::clock::spawn(crate::net::boxed::boxed(|| {
        serve_conn(ctx, inb, phase, served, idle_since)
    }));
}

pub(super) async fn serve_conn(
    ctx: ConnCtx,
    inb: Arc<Inbound>,
    mut phase: watch::Receiver<Phase>,
    served: u64,
    idle_since: std::time::Instant,
) {
    let (mut served, mut idle_since) = (served, idle_since);
    if served == 0 && ctx.h2c {
        match super::h2::sniff_preface(&ctx, &inb, &mut phase).await {
            super::h2::Preface::Http2 => {
                // Boxed: an HTTP/1 connection's task does not carry an
                // HTTP/2 connection's state.
                crate::net::boxed::boxed(|| super::h2::serve(Upgraded::new(inb), ctx, phase)).await;
                return;
            }
            super::h2::Preface::Http1 => {}
            super::h2::Preface::Closed => return,
        }
    }
    let mut may_park = true;
    loop {
        let Some(idle_at) =
            serve_requests(&ctx, &inb, &mut phase, served, idle_since, may_park).await
        else {
            break;
        };
        (served, idle_since) = idle_at;
        // Idle for a while: park it, out of the runtime. A connection whose
        // read side is still shared stays in its task.
        let Some(parker) = ctx.shared.parker.clone() else {
            may_park = false;
            continue;
        };
        if Arc::strong_count(&inb) > 1 {
            may_park = false;
            continue;
        }
        let Ok(inb) = Arc::try_unwrap(inb) else {
            break;
        };
        let limit = inb.keepalive();
        let Ok(sock) = crate::net::park::Parked::from_stream(inb.io) else {
            break;
        };
        let resume = Resume {
            ctx: ctx.park(),
            limit,
            served,
            idle_since,
        };
        // Not watched (the worker stops): it closes (with its context).
        let _ = parker.park(sock, resume, idle_since + limit);
        return;
    }
}

/// Which request header names nginx keeps: letters, digits and `-`, and
/// `_` with `underscores_in_headers`; the others are dropped only with
/// `ignore_invalid_headers`.
#[derive(Clone, Copy)]
pub(super) struct HeaderNames {
    underscores: bool,
    ignore_invalid: bool,
}

impl Default for HeaderNames {
    fn default() -> HeaderNames {
        HeaderNames {
            underscores: false,
            ignore_invalid: true,
        }
    }
}

impl HeaderNames {
    /// Whether a request header of this name is dropped.
    pub(super) fn drops(self, name: &[u8]) -> bool {
        self.ignore_invalid && self.invalid(name)
    }

    fn invalid(self, name: &[u8]) -> bool {
        // A byte at a time through a table: every request header's name
        // passes here.
        let allowed = if self.underscores {
            NAME_BYTE | UNDERSCORE
        } else {
            NAME_BYTE
        };
        name.iter()
            .any(|&b| NAME_CLASS[usize::from(b)] & allowed == 0)
    }
}

/// `NAME_CLASS` bits: a letter, digit or `-`; an underscore.
const NAME_BYTE: u8 = 1;
const UNDERSCORE: u8 = 2;

/// The class of each byte in a request header's name, as nginx takes it
/// with `ignore_invalid_headers`.
const NAME_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'-' {
            t[b] = NAME_BYTE;
        } else if c == b'_' {
            t[b] = UNDERSCORE;
        }
        b += 1;
    }
    t
};

/// What a parked connection needs to go on.
pub(crate) struct Resume {
    ctx: ParkedCtx,
    limit: Duration,
    served: u64,
    idle_since: std::time::Instant,
}

/// How long a keep-alive connection waits in its task before it is parked.
const PARK_AFTER: Duration = Duration::from_millis(100);

/// Every `GRACE`, closes the idle connections over `keepalive N` that have
/// been idle that long, in each of `cached`'s keep-alive caches
/// (`upstream::pool`).
async fn purge_surplus(cached: Vec<Arc<crate::upstream::UpstreamRt>>) {
    use crate::upstream::pool::GRACE;
    loop {
        tokio::time::sleep(GRACE).await;
        let now = std::time::Instant::now();
        for u in &cached {
            u.pool().purge(now);
        }
    }
}

/// Resumes parked connections that woke, closes those whose time passed,
/// and all of them once the worker stops.
async fn run_parker(
    parker: Arc<crate::net::park::Parker<Resume>>,
    mut phase: watch::Receiver<Phase>,
) {
    use crate::net::park::Wake;
    // The heap is trimmed when `trim_due` says, asked here every
    // `TRIM_QUIET`, not on each park.
    let mut quiet = tokio::time::interval(crate::net::park::TRIM_QUIET);
    quiet.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = quiet.tick() => {
                if parker.trim_due() {
                    crate::process::trim_heap();
                }
            }
            woke = parker.next() => {
                for w in woke {
                    match w {
                        Wake::Ready(sock, r) => {
                            let Ok(stream) = sock.into_stream() else {
                                continue;
                            };
                            let inb = Arc::new(Inbound::new(stream, r.limit));
                            spawn_conn(r.ctx.resume(), inb, phase.clone(), r.served, r.idle_since);
                        }
                        // Closed, and no longer counted.
                        Wake::Expired(sock, r) => drop((sock, r)),
                    }
                }
            }
            ch = phase.changed() => {
                if ch.is_err() || *phase.borrow() != Phase::Running {
                    drop(parker.take_all());
                    return;
                }
            }
        }
    }
}

/// Whether the client asked to keep the connection: HTTP/1.1 unless it said
/// `close`, HTTP/1.0 only if it said `keep-alive`.
fn client_keeps_alive(head: &RequestHead) -> bool {
    if head.version == Version::HTTP_10 {
        // `close` beside `keep-alive` closes, as in nginx.
        head.headers
            .has_known_token(Known::Connection, b"keep-alive")
            && !head.headers.has_known_token(Known::Connection, b"close")
    } else {
        !head.headers.has_known_token(Known::Connection, b"close")
    }
}

/// The connection's requests, one after another, until one closes it. Only
/// the wait between requests lives in this future; each request's state is
/// boxed while it runs (`serve_one`), so a connection's task stays small
/// (inline, every task carried the request's kilobytes: 10,000 idle
/// connections cost 1.2 kB each instead of 0.5 kB). The phases that wait
/// are boxed apart in the pipeline, so that box stays small too.
/// Some((requests served, idle since)) when it has been idle long enough to
/// be parked (`may_park`).
async fn serve_requests(
    ctx: &ConnCtx,
    inb: &Arc<Inbound>,
    phase: &mut watch::Receiver<Phase>,
    mut served: u64,
    mut idle_since: std::time::Instant,
    may_park: bool,
) -> Option<(u64, std::time::Instant)> {
    loop {
        if !inb.has_unread() {
            // Idle: no buffer is held while waiting.
            if inb.release() && served > 0 {
                crate::log_conn!(
                    Level::Debug,
                    ctx.info.number,
                    "http keepalive: connection parked, buffers freed"
                );
            }
            let wait = if served == 0 {
                ctx.head_limit
            } else {
                inb.keepalive()
            };
            let park_at = (may_park && served > 0).then(|| crate::net::clock::now() + PARK_AFTER);
            match wait_for_bytes(inb, &ctx.shared, phase, wait, idle_since, park_at).await {
                Waited::Bytes => {}
                Waited::Close => return None,
                Waited::Park => return Some((served, idle_since)),
            }
        }
        served += 1;
        match crate::net::boxed::boxed(|| serve_one(ctx, inb, served)).await {
            Next::Keep => {}
            Next::Close => return None,
            Next::Tunnel(switch) => {
                // Both ways until either side closes or stays silent for
                // proxy_read_timeout; the connection ends with the tunnel.
                // In a box of its own once the request's is freed: every
                // request's box would otherwise make room for it too.
                let _writing = Tunneling::new(&ctx.shared);
                crate::net::boxed::boxed(|| switch.relay(Upgraded::new(inb.clone()))).await;
                return None;
            }
        }
        idle_since = crate::net::clock::now();
    }
}

/// What follows a request on its connection.
enum Next {
    /// The next request.
    Keep,
    Close,
    /// The 101 went out: the upstream's side of the switch, to relay.
    Tunnel(super::tunnel::Switch),
}

/// One request: its head read, handled, answered, and what is left of its
/// body discarded.
async fn serve_one(ctx: &ConnCtx, inb: &Arc<Inbound>, served: u64) -> Next {
    let shared = &ctx.shared;
    let mut head = match read_head(ctx, inb).await {
        Ok(head) => head,
        Err(HeadFail::Closed) => return Next::Close,
        Err(HeadFail::Refused(e)) => {
            refuse(ctx, inb, &e).await;
            return Next::Close;
        }
    };
    // `ignore_invalid_headers` (on by default): a name with characters
    // nginx does not take (an underscore unless `underscores_in_headers`)
    // is dropped and logged. Those a header name cannot hold at all
    // (`Fo@o`) the parser left out already; kept, they would have to pass
    // on as sent, which sluice does not do: refused then.
    let number = ctx.info.number;
    let invalid_line = |line: &[u8]| {
        crate::log_conn!(
            Level::Info,
            number,
            "client sent invalid header line: \"{}\" while reading client request headers",
            String::from_utf8_lossy(line)
        );
    };
    if !head.ignored.is_empty() {
        if !ctx.names.ignore_invalid {
            let line = String::from_utf8_lossy(&head.ignored[0]);
            let e = HeadError::header(400, format!("client sent invalid header line: \"{line}\""));
            refuse(ctx, inb, &e).await;
            return Next::Close;
        }
        head.ignored.iter().for_each(|l| invalid_line(l));
    }
    if head.headers.iter().any(|(n, _)| ctx.names.drops(n)) {
        head.headers.retain(|n, v| {
            let bad = ctx.names.drops(n);
            if bad {
                invalid_line(&[n, b": ", v].concat());
            }
            !bad
        });
    }
    let keep = client_keeps_alive(&head);
    let is_head = head.method == Method::HEAD;
    let version = head.version;
    let framing = request_framing(&head);
    let expect = head.version == Version::HTTP_11
        && head
            .headers
            .known(Known::Expect)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    // A request whose body could be framed two ways is refused by the
    // pipeline; its body is not read and the connection closes.
    inb.start_body(framing.unwrap_or(Framing::Empty), expect);
    let upgrade = head
        .headers
        .known(Known::Upgrade)
        .is_some()
        .then(OnUpgrade::default);
    let req = super::pipeline::Incoming {
        method: head.method,
        uri: head.uri,
        version: head.version,
        headers: head.headers,
        body: ReqBody::new(inb.clone()),
        upgrade: upgrade.clone(),
        refused: None,
    };
    let flight = InFlight::start(Some(inb), shared.stats.as_ref());
    // A client that goes away while its request is handled ends it (the
    // upstream attempt with it), as nginx does without
    // `proxy_ignore_client_abort`.
    ctx.info.ignore_abort.store(false, Ordering::Relaxed);
    let handling = handle(shared, ctx.info.clone(), &ctx.listen, req, served, flight);
    tokio::pin!(handling);
    let handled = tokio::select! {
        biased;
        r = &mut handling => r,
        () = inb.io.hung_up() => {
            crate::log_conn!(
                Level::Info,
                ctx.info.number,
                "client prematurely closed connection while processing request"
            );
            // With proxy_ignore_client_abort the upstream request goes on
            // to its end (and its log line), and its answer is written, as
            // nginx writes it: a client that shut only its side of the
            // connection reads it. Sent or not, the connection closes.
            if !ctx.info.ignore_abort.load(Ordering::Relaxed) {
                return Next::Close;
            }
            if let Ok(resp) = handling.await {
                let v11 = version == Version::HTTP_11;
                send_response(inb, resp, is_head, v11, false, ctx.info.number, true).await;
            }
            return Next::Close;
        }
    };
    let Ok(resp) = handled else {
        return Next::Close;
    };
    let sent = send_response(
        inb,
        resp,
        is_head,
        version == Version::HTTP_11,
        // A client still waiting for "100 Continue" is told the connection
        // closes: its body is not asked for.
        keep && framing.is_some() && !inb.body_broken() && !inb.body_unasked(),
        ctx.info.number,
        false,
    )
    .await;
    match sent {
        Sent::Closed => return Next::Close,
        Sent::Switched => {
            // The 101 went out: the connection becomes the tunnel.
            return upgrade
                .as_ref()
                .and_then(OnUpgrade::take)
                .map_or(Next::Close, Next::Tunnel);
        }
        Sent::Kept => {}
    }
    if !inb.body_done() {
        // The rest of a body nobody read is read and dropped, as nginx
        // discards it; a client still waiting for "100 Continue" is not
        // asked for it: the connection closes instead.
        if inb.body_unasked() {
            return Next::Close;
        }
        let discard = std::future::poll_fn(|cx| inb.poll_discard(cx));
        if !matches!(
            crate::net::clock::timeout(ctx.head_limit, discard).await,
            Ok(true)
        ) {
            return Next::Close;
        }
    }
    Next::Keep
}

/// Where the proxy leaves the upstream's side of a protocol switch for the
/// connection, which relays it once its 101 went out (a request with
/// `Upgrade` has one). Left unused (the 101 did not go out), the switch
/// goes with it and releases its peer.
#[derive(Clone, Default)]
pub(crate) struct OnUpgrade(Arc<std::sync::Mutex<Option<super::tunnel::Switch>>>);

impl OnUpgrade {
    pub(crate) fn set(&self, switch: super::tunnel::Switch) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(switch);
    }

    fn take(&self) -> Option<super::tunnel::Switch> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// How a request's body is framed; None for framing headers nginx refuses
/// (two lengths, a coding other than `chunked`, both): `request_problem`
/// answers those.
fn request_framing(head: &RequestHead) -> Option<Framing> {
    let h = &head.headers;
    let mut te = h.known_all(Known::TransferEncoding);
    let mut cl = h.known_all(Known::ContentLength);
    match (te.next(), cl.next()) {
        (None, None) => Some(Framing::Empty),
        (Some(t), None) => (te.next().is_none()
            && head.version == Version::HTTP_11
            && t.as_bytes().eq_ignore_ascii_case(b"chunked"))
        .then_some(Framing::Chunked),
        (None, Some(l)) => cl
            .next()
            .is_none()
            .then(|| body::content_length(l.as_bytes()))
            .flatten()
            .map(Framing::Length),
        (Some(_), Some(_)) => None,
    }
}

/// Writing to the client failed (logged as nginx logs it). With `rest`,
/// the body's rest is read and dropped first, so that the upstream answer
/// is taken whole and the access log line written
/// (`proxy_ignore_client_abort`); each read is bounded by the proxy's own
/// timeouts.
async fn give_up(e: &std::io::Error, number: u64, rest: Option<&mut LoggedBody>) -> Sent {
    if let Some(body) = rest {
        use http_body_util::BodyExt;
        while let Some(f) = body.frame().await {
            if f.is_err() {
                break;
            }
        }
    }
    send_failed(e, number)
}

enum HeadFail {
    /// The client closed, failed or timed out (logged).
    Closed,
    /// A head nginx refuses: answered, then the connection closes.
    Refused(HeadError),
}

/// Reads a request head within `client_header_timeout` from its first byte
/// (nginx's `Reading` in `stub_status` meanwhile).
async fn read_head(ctx: &ConnCtx, inb: &Inbound) -> Result<RequestHead, HeadFail> {
    let _reading = Reading::new(ctx.shared.stats.as_ref().and_then(|s| s.counters()));
    let deadline = crate::net::clock::deadline(ctx.head_limit);
    let number = ctx.info.number;
    loop {
        let parsed = inb.with_buf(|buf| {
            if buf.is_empty() {
                return Ok(None);
            }
            // The head against the buffers nginx would have given it.
            ctx.limits.check(buf)?;
            parse_request(buf)
        });
        match parsed {
            Ok(Some(h)) => return Ok(h),
            Err(e) => return Err(HeadFail::Refused(e)),
            Ok(None) => {}
        }
        let fill = std::future::poll_fn(|cx| inb.poll_fill(cx, 1024));
        match crate::net::clock::timeout_at(deadline, fill).await {
            Err(_) => {
                crate::log_conn!(
                    Level::Info,
                    number,
                    "client timed out (110: Connection timed out) while reading client request headers"
                );
                return Err(HeadFail::Closed);
            }
            Ok(Ok(0)) => {
                if inb.has_unread() {
                    crate::log_conn!(
                        Level::Info,
                        number,
                        "client prematurely closed connection while reading client request headers"
                    );
                }
                return Err(HeadFail::Closed);
            }
            Ok(Err(e)) => {
                crate::log_conn!(
                    Level::Info,
                    number,
                    "recv() failed ({}) while reading client request headers",
                    crate::log::errno_text(&e)
                );
                return Err(HeadFail::Closed);
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// Answers a head nginx refuses (its page, `Connection: close`) and logs why.
async fn refuse(ctx: &ConnCtx, inb: &Inbound, e: &HeadError) {
    crate::log_conn!(
        Level::Info,
        ctx.info.number,
        "{} while reading client request {}",
        e.why,
        if e.in_line { "line" } else { "headers" }
    );
    let tokens = ctx
        .shared
        .cfg
        .http
        .as_ref()
        .and_then(|h| {
            ctx.shared
                .router
                .server(h, &ctx.listen, ctx.info.local, None)
        })
        .is_none_or(|s| s.conf.server_tokens);
    let resp = response::status_page(e.code, tokens);
    let mut out = Vec::with_capacity(512);
    let (parts, body) = resp.into_parts();
    // The page's own length stays; the connection closes.
    let own = Own {
        length: None,
        chunked: false,
        connection: "close",
    };
    write_head(&parts, None, Some(&own), &mut out);
    if let Ok(b) = body.collect().await {
        out.extend_from_slice(&b.to_bytes());
    }
    let _ = inb.io.write_all_ref(&out, Duration::from_secs(5)).await;
    linger(inb).await;
}

/// The end of a connection whose response went whole: as nginx's default
/// `lingering_close on`, it lingers only while the client may still be
/// sending (a request body not read to its end, more bytes already read or
/// waiting on the socket). Else it closes at once, over TLS after its
/// close_notify: no shutdown, no wait for the client's end.
async fn close(inb: &Inbound) {
    if !inb.body_done() || inb.has_unread() || !inb.io.quiet() {
        linger(inb).await;
    } else {
        inb.io.close_notify();
    }
}

/// Before closing on a client that may still be sending: stop writing, and
/// read what comes for a moment, so that the response is not lost to a
/// reset (nginx's lingering close).
async fn linger(inb: &Inbound) {
    inb.io.shutdown_write();
    let drain = async {
        loop {
            inb.with_buf(BytesMut::clear);
            match std::future::poll_fn(|cx| inb.poll_fill(cx, 4096)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let _ = crate::net::clock::timeout(Duration::from_secs(2), drain).await;
    inb.release();
}

/// A response that could not be sent, logged as nginx logs it.
fn send_failed(e: &std::io::Error, number: u64) -> Sent {
    if e.kind() == std::io::ErrorKind::TimedOut {
        crate::log_conn!(
            Level::Info,
            number,
            "client timed out (110: Connection timed out) while sending response to client"
        );
    } else {
        crate::log_conn!(
            Level::Info,
            number,
            "writev() failed ({}) while sending response to client",
            crate::log::errno_text(e)
        );
    }
    Sent::Closed
}

/// How a response went out.
enum Sent {
    /// The connection may carry another request.
    Kept,
    /// It must close (or failed).
    Closed,
    /// A 101 went out: the connection becomes the tunnel.
    Switched,
}

/// The status line and headers as written: `Server` and `Date` first, as
/// nginx's, names in the case they arrived in. The upstream's lines of a
/// response that carries them as received (`AsReceived`) come before the
/// map's.
fn write_head(
    parts: &http::response::Parts,
    lines: Option<&AsReceived>,
    own: Option<&Own>,
    out: &mut Vec<u8>,
) {
    let reason = parts.extensions.get::<Reason>().map(|r| r.0.as_ref());
    let code = parts.status.as_u16();
    let nginx = response::reason(code).map(str::as_bytes);
    write::status_line(parts.status, reason.or(nginx), out);
    let names = parts.extensions.get::<Names>();
    let h = &parts.headers;
    // One pass for Server and Date, which go first, as nginx writes them:
    // the few headers a response has cost less to walk than two lookups.
    let mut server = None;
    let mut date = false;
    for (n, v) in h {
        if *n == SERVER {
            server = server.or(Some(v));
        } else if *n == DATE {
            date = true;
        }
    }
    // Lines as received carry the Server that goes first: sluice's, or the
    // upstream's (`proxy_pass_header`). One in the map (`add_header
    // Server`) is not written, as it is not beside a map's own.
    match lines {
        Some(l) => {
            date |= l.date;
            if let Some(v) = &l.own_server {
                write::header(&SERVER, v, names, out);
            } else if let Some((n, v)) = l.iter().find(|(n, _)| same_name(n, b"server")) {
                write::raw_header(n, v.as_bytes(), out);
            }
        }
        None => {
            if let Some(v) = server {
                write::header(&SERVER, v, names, out);
            }
        }
    }
    if !date {
        out.extend_from_slice(b"Date: ");
        write::date(out);
        out.extend_from_slice(b"\r\n");
    }
    // The handler's headers but Server (written) and, where sluice frames
    // the response, the framing and keep-alive ones it writes itself.
    let skip = |n: &http::HeaderName| {
        *n == SERVER
            || own.is_some_and(|o| {
                *n == CONNECTION
                    || *n == TRANSFER_ENCODING
                    || (o.connection == "close" && n.as_str() == "keep-alive")
            })
    };
    // The upstream's lines (the hop-by-hop ones never among them): all
    // but `Server`, written first.
    for (n, v) in lines.iter().flat_map(|l| l.iter()) {
        if !same_name(n, b"server") {
            write::raw_header(n, v.as_bytes(), out);
        }
    }
    match parts.extensions.get::<crate::h1::head::Order>() {
        None => {
            for (n, v) in h {
                if !skip(n) {
                    write::header(n, v, names, out);
                }
            }
        }
        // The upstream's order first (each line the next value of its
        // name still there), then what was added.
        Some(order) => {
            let mut done: Vec<(&http::HeaderName, usize)> = Vec::new();
            for n in order.0.iter().filter(|n| !skip(n)) {
                let k = match done.iter_mut().find(|(d, _)| *d == n) {
                    Some((_, k)) => {
                        *k += 1;
                        *k - 1
                    }
                    None => {
                        done.push((n, 1));
                        0
                    }
                };
                if let Some(v) = h.get_all(n).iter().nth(k) {
                    write::header(n, v, names, out);
                }
            }
            for n in h.keys().filter(|n| !skip(n)) {
                let skip = done.iter().find(|(d, _)| *d == n).map_or(0, |d| d.1);
                for v in h.get_all(n).iter().skip(skip) {
                    write::header(n, v, names, out);
                }
            }
        }
    }
    if let Some(o) = own {
        if let Some(n) = o.length {
            use std::io::Write;
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        if o.chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        out.extend_from_slice(b"Connection: ");
        out.extend_from_slice(o.connection.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The framing and keep-alive headers sluice writes after the handler's
/// (which lose theirs of these names): a length it knows when the handler
/// gave none, chunked, and `Connection`.
struct Own {
    length: Option<u64>,
    chunked: bool,
    connection: &'static str,
}

/// Writes a response: its head with the framing headers it needs, then its
/// body (length, chunked to a client that reads chunks, else until close),
/// each write within `send_timeout`. `chunks`: the client reads chunks
/// (HTTP/1.1; an HTTP/1.0 one, or any with `chunked_transfer_encoding off`,
/// gets a body of unknown length until close).
/// `keep`: the client would keep the connection. `finish_body`: should a
/// write fail, the body is still read to its end (`give_up`).
async fn send_response(
    inb: &Inbound,
    resp: Response<LoggedBody>,
    is_head: bool,
    chunks: bool,
    keep: bool,
    number: u64,
    finish_body: bool,
) -> Sent {
    let (parts, mut body) = resp.into_parts();
    let send_timeout = body.send_timeout();
    let code = parts.status.as_u16();
    let switched = code == 101;
    let bodiless = is_head || code < 200 || code == 204 || code == 304;
    // One pass over the handler's headers (a response has few): a
    // `Connection: close` it asks for, and whether it gave a length. A 101
    // keeps its `Connection`; any other response gets sluice's own, and
    // its framing headers (`write_head` leaves the handler's out).
    let mut asks_close = false;
    let lines = body.as_received();
    let mut has_length = lines.is_some_and(|a| a.length);
    for (n, v) in &parts.headers {
        if *n == CONNECTION {
            asks_close |= v.as_bytes().eq_ignore_ascii_case(b"close");
        } else if *n == CONTENT_LENGTH {
            has_length = true;
        }
    }
    let mut keep = keep && !asks_close;
    let mut chunked = false;
    let mut length = None;
    if !switched && !has_length && code != 204 && code != 304 && code >= 200 {
        match body.size_hint().exact() {
            // A HEAD's body is empty whatever the GET's would be: no
            // length is made up for it.
            _ if is_head => {}
            Some(n) => length = Some(n),
            None if chunks && body.chunked_transfer_encoding() => chunked = true,
            None => keep = false,
        }
    }
    let own = (!switched).then_some(Own {
        length,
        chunked,
        connection: if keep { "keep-alive" } else { "close" },
    });
    let mut out = crate::h1::pool::Out::take();
    write_head(&parts, lines, own.as_ref(), &mut out);
    // `$bytes_sent`: the head, and each chunk's framing as it is written
    // (the last chunk's 5 bytes now: the log line is written when the
    // body ends, before them).
    let sent = parts.extensions.get::<super::access::HeadLen>().cloned();
    let count = |n: usize| {
        if let Some(s) = &sent {
            s.0.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    count(out.len() + if chunked && !bodiless { 5 } else { 0 });
    // The body's first piece goes with the head when it is there already.
    let mut ended = false;
    loop {
        let next = std::future::poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Pending if !out.is_empty() => Poll::Ready(None),
            p => p.map(Some),
        });
        let frame = match next.await {
            // Nothing yet: send what is ready, then wait for the source.
            None => {
                if let Err(e) = inb.io.write_all_ref(&out, send_timeout).await {
                    return give_up(&e, number, finish_body.then_some(&mut body)).await;
                }
                out.clear();
                continue;
            }
            Some(f) => f,
        };
        match frame {
            None => {
                ended = true;
                if chunked && !bodiless {
                    body::last_chunk(None, &mut out);
                }
                break;
            }
            Some(Err(_)) => break,
            Some(Ok(f)) => {
                let f = match f.into_data() {
                    Ok(d) => {
                        if bodiless || d.is_empty() {
                            continue;
                        }
                        if chunked {
                            let before = out.len();
                            body::chunk_head(d.len(), &mut out);
                            count(out.len() - before + 2);
                        }
                        if out.len() + d.len() <= 16 * 1024 {
                            out.extend_from_slice(&d);
                        } else {
                            let sent = match inb.io.write_all_ref(&out, send_timeout).await {
                                Ok(()) => inb.io.write_all_ref(&d, send_timeout).await,
                                e => e,
                            };
                            if let Err(e) = sent {
                                return give_up(&e, number, finish_body.then_some(&mut body)).await;
                            }
                            out.clear();
                        }
                        if chunked {
                            out.extend_from_slice(b"\r\n");
                        }
                        continue;
                    }
                    Err(f) => f,
                };
                if let Ok(t) = f.into_trailers() {
                    if chunked && !bodiless {
                        let before = out.len();
                        body::last_chunk(Some(&t), &mut out);
                        count((out.len() - before).saturating_sub(5));
                        chunked = false;
                    }
                }
            }
        }
    }
    drop(body);
    if !out.is_empty() {
        // With the other responses of this turn (`net::turn`).
        crate::net::turn::later().await;
        if let Err(e) = inb.io.write_all_ref(&out, send_timeout).await {
            return send_failed(&e, number);
        }
    }
    if switched {
        return Sent::Switched;
    }
    if !ended || !keep {
        if !ended {
            return Sent::Closed;
        }
        close(inb).await;
        return Sent::Closed;
    }
    Sent::Kept
}

/// How long a keep-alive connection may stay idle once a graceful stop began
/// (nginx closes idle ones at once, racing clients that send right then).
const DRAIN: Duration = Duration::from_secs(1);

impl Shared {
    /// While stopping gracefully: how much longer a connection idle for
    /// `idle_for` may stay (zero: close it now). None while running.
    fn drain_left(&self, idle_for: Duration) -> Option<Duration> {
        let since = self.draining.get()?;
        Some(
            self.drain
                .saturating_sub(idle_for.min(crate::net::clock::since(*since))),
        )
    }

    fn start_draining(&self) {
        self.draining.get_or_init(std::time::Instant::now);
    }
}

/// What ended a wait between requests.
pub(super) enum Waited {
    Bytes,
    /// The wait passed, the worker stops, or the client left.
    Close,
    /// Still nothing at `park_at`, with time left.
    Park,
}

/// Waits, holding no buffer, until the client sends, or the wait passes or
/// the worker stops, or `park_at` comes while running. A graceful stop
/// shortens the wait to the drain time. The wait's end and `park_at` are
/// seen at the worker's idle tick (`net::idle::TICK` apart).
pub(super) async fn wait_for_bytes(
    inb: &Inbound,
    shared: &Shared,
    phase: &mut watch::Receiver<Phase>,
    limit: Duration,
    idle_since: std::time::Instant,
    park_at: Option<std::time::Instant>,
) -> Waited {
    let deadline = idle_since + limit;
    // Deadlines are checked at the worker's idle tick, not with a timer of
    // this wait's own (see `net::idle`).
    let waiting = shared.idle.wait();
    loop {
        // Made first: a phase change after the check below still wakes it.
        let tick = waiting.tick();
        if shared.idle.ended() {
            return Waited::Close;
        }
        let now = crate::net::clock::now();
        let mut wait = deadline.saturating_duration_since(now);
        let mut park = park_at;
        match *phase.borrow_and_update() {
            Phase::Fast => return Waited::Close,
            Phase::Graceful => {
                shared.start_draining();
                wait = wait.min(
                    shared
                        .drain_left(crate::net::clock::since(idle_since))
                        .unwrap_or_default(),
                );
                park = None;
            }
            Phase::Running => {}
        }
        if wait.is_zero() {
            return Waited::Close;
        }
        if park.is_some_and(|at| at <= now) {
            return Waited::Park;
        }
        tokio::select! {
            biased;
            r = std::future::poll_fn(|cx| inb.poll_arrive(cx)) => {
                return if matches!(r, Ok(n) if n > 0) { Waited::Bytes } else { Waited::Close };
            }
            // A tick, or the phase changed (`phase_relay`).
            () = tick => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_name_bytes_as_nginx_takes_them() {
        for underscores in [false, true] {
            let names = HeaderNames {
                underscores,
                ignore_invalid: true,
            };
            for b in 0..=255u8 {
                let ok = b.is_ascii_alphanumeric() || b == b'-' || (b == b'_' && underscores);
                assert_eq!(
                    names.drops(&[b'x', b]),
                    !ok,
                    "byte {b}, underscores {underscores}"
                );
            }
            assert!(!names.drops(b"Content-Type"));
            assert_eq!(names.drops(b"X_Forwarded"), !underscores);
        }
        let off = HeaderNames {
            underscores: false,
            ignore_invalid: false,
        };
        assert!(!off.drops(b"x_y") && !off.drops(b"x.y"));
    }
}
