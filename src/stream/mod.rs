//! The TCP (stream) proxy of a worker, on the same upstream layer as HTTP:
//! accept on the stream listeners, pick a peer with the upstream's balancer
//! (zones, resolve and failure accounting as for HTTP), connect within
//! `proxy_connect_timeout`, trying the next peer only when connecting fails
//! (`proxy_next_upstream`, `_tries`, `_timeout`), then copy bytes both ways
//! until either side closes (both with `proxy_half_close`) or nothing moves
//! for `proxy_timeout`. `return` sends its text and closes. A graceful stop
//! closes the listeners and lets sessions finish (bounded by
//! `worker_shutdown_timeout`). TLS: `listen ... ssl` terminates it before
//! anything else, `ssl_preread` peeks at the ClientHello (`ssl.rs`), and
//! `proxy_ssl` speaks it to the upstream. `listen ... udp` addresses go to
//! `udp.rs` (datagram sessions). Called by `process::worker`.

mod ssl;
mod udp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, watch};

use crate::conf::Config;
use crate::conf::map::{Captures, Evaluator, MapCache};
use crate::conf::model::{ListenAddr, NextUpstream, StreamServer, StreamTarget};
use crate::conf::vars::{Segment, Template, Var};
use crate::net::accept::{Listener, Phase, Sock, running, wind_down};
use crate::net::slots::Slots;
use crate::net::stream::Stream;
use crate::upstream::attempt::{
    Attempts, Connected, Failure, Kind, Plain, Policy, Requester, Side,
};
use crate::upstream::tls::Tls;
use crate::upstream::{Outcome, UpstreamRt, Upstreams, Zones};

struct Shared {
    cfg: Arc<Config>,
    upstreams: Upstreams,
    /// Shared with the worker's HTTP server.
    next_conn: Arc<AtomicU64>,
    slots: Arc<Slots>,
    /// Open sessions, for a graceful stop.
    conns: Arc<crate::net::track::Tracker>,
    /// Names looked up for `proxy_pass` with variables.
    dns: crate::upstream::dns::Cache,
    /// Each server's rustls configuration (`listen ... ssl`).
    tls: Vec<Option<ssl::Config>>,
    /// Client configurations for `proxy_ssl`.
    upstream_tls: Arc<crate::net::tls_client::Clients>,
    /// `limit_conn_zone` zones.
    limits: Arc<crate::net::limit::LimitZones>,
    /// The generation's `stub_status` counters (sessions, for the metrics).
    stats: Option<Arc<crate::net::stats::Stats>>,
}

/// A session counted as open in the shared counters until dropped.
struct Counted(Option<Arc<crate::net::stats::Stats>>);

impl Counted {
    fn new(stats: &Option<Arc<crate::net::stats::Stats>>) -> Counted {
        if let Some(c) = stats.as_ref().and_then(|s| s.counters()) {
            c.stream_sessions.fetch_add(1, Ordering::Relaxed);
            c.stream_active.fetch_add(1, Ordering::Relaxed);
        }
        Counted(stats.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_ref().and_then(|s| s.counters()) {
            c.stream_active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Serves the stream listeners until the phase leaves `Running`, then waits
/// for the sessions (bounded by `worker_shutdown_timeout`).
#[allow(clippy::too_many_arguments)] // the worker's parts, handed over once
pub async fn serve(
    cfg: Arc<Config>,
    listeners: Vec<Listener>,
    mut phase: watch::Receiver<Phase>,
    zones: Zones,
    saved: Option<Arc<Notify>>,
    slot: usize,
    next_conn: Arc<AtomicU64>,
    slots: Arc<Slots>,
    tls: crate::net::tls::TlsShared,
    limits: Arc<crate::net::limit::LimitZones>,
    stats: Option<Arc<crate::net::stats::Stats>>,
) {
    let Some(stream) = cfg.stream.as_ref() else {
        return;
    };
    let shared = Arc::new(Shared {
        upstreams: Upstreams::new(Some(&stream.upstreams), &zones),
        cfg: cfg.clone(),
        next_conn,
        slots,
        conns: crate::net::track::Tracker::new(),
        dns: crate::upstream::dns::Cache::new(),
        tls: ssl::configs(stream, &tls),
        upstream_tls: Arc::new(crate::net::tls_client::Clients::new()),
        limits,
        stats,
    });
    if !zones.is_empty() {
        crate::upstream::resolve::start_upkeep(&shared.upstreams, slot, saved);
    }
    let mut accepts = tokio::task::JoinSet::new();
    for l in listeners {
        let Some(server) = server_for(stream.servers.as_slice(), &l.addr) else {
            continue;
        };
        if let ListenAddr::Udp(_) = l.addr {
            accepts.spawn(udp::serve(l, server, shared.clone(), phase.clone()));
            continue;
        }
        let tls = stream
            .servers
            .get(server)
            .is_some_and(|s| ssl::is_ssl(s, &l.addr));
        let pp = stream
            .servers
            .get(server)
            .is_some_and(|s| ssl::listen_has(s, &l.addr, |l| l.proxy_protocol));
        accepts.spawn(accept_loop(l, server, Flags { tls, pp }, shared.clone()));
    }
    running(&mut phase).await;
    wind_down(
        &mut accepts,
        &shared.conns,
        &mut phase,
        cfg.main.worker_shutdown_timeout,
    )
    .await;
}

/// The server a listener was bound for.
fn server_for(servers: &[StreamServer], addr: &ListenAddr) -> Option<usize> {
    servers
        .iter()
        .position(|s| s.listen.iter().any(|l| &l.addr == addr))
        .or_else(|| {
            // A specific address served by a wildcard listener.
            let port = match addr {
                ListenAddr::Inet(a) => a.port(),
                ListenAddr::Unix(_) | ListenAddr::Udp(_) => return None,
            };
            servers.iter().position(|s| {
                s.listen
                    .iter()
                    .any(|l| matches!(&l.addr, ListenAddr::Inet(a) if a.port() == port))
            })
        })
}

/// The listeners of `cfg` that belong to stream servers.
pub fn is_stream_listener(cfg: &Config, addr: &ListenAddr) -> bool {
    cfg.stream
        .as_ref()
        .is_some_and(|st| server_for(&st.servers, addr).is_some())
}

/// What a listener's connections start with.
#[derive(Clone, Copy)]
struct Flags {
    /// A TLS handshake (`listen ... ssl`).
    tls: bool,
    /// A PROXY protocol header (`listen ... proxy_protocol`), before TLS.
    pp: bool,
}

async fn accept_loop(l: Listener, server: usize, flags: Flags, shared: Arc<Shared>) {
    let listen = l.addr.to_string();
    let Some(mut sock) = Sock::adopt(l, &shared.cfg.events) else {
        return;
    };
    loop {
        let Some(((io, remote, local), permit)) = sock.accept(&shared.slots).await else {
            return;
        };
        let guard = (shared.conns.enter(), Counted::new(&shared.stats));
        let session = Session::new(&shared, remote, local, listen.clone(), false);
        let shared = shared.clone();
        // The session's future (about 3 kB; 6 kB when the copies below were
        // counted) made in its box, and the task holding only the box: tokio
        // writes a task's whole stage, future included, at each step of its
        // end (done, then output taken), and an `async` block awaiting `run`
        // moved `run`'s future into itself at its first poll. Those copies,
        // 30 kB a session, were a fifth of a session's instructions in the
        // worker (`COST_PROTO=stream scripts/cost`: 26,800 a session, then
        // 22,300; nginx 10,000).
        crate::net::clock::spawn(crate::net::boxed::boxed(|| {
            run(io, session, server, flags, shared, (permit, guard))
        }));
    }
}

/// One connection attempt of a session: the peer, how long connecting
/// took (None: it failed), and how long the attempt took.
pub(super) struct Try {
    pub(super) peer: String,
    pub(super) connect: Option<Duration>,
    pub(super) took: Duration,
}

/// One client session, and what its access log line says.
struct Session {
    number: u64,
    /// The client: the peer, or the address its PROXY protocol header
    /// names when the peer is trusted (`set_real_ip_from`).
    remote: Option<SocketAddr>,
    /// The peer itself (`$realip_remote_addr`, `_port`).
    peer: Option<SocketAddr>,
    /// What its PROXY protocol header said.
    proxy: Option<Box<crate::net::proxy_protocol::Addrs>>,
    local: Option<SocketAddr>,
    listen: String,
    start: Instant,
    /// nginx's stream `$status`: 200, or 502 when no upstream could be had.
    status: u16,
    /// Per connection attempt: the peer and how long connecting took (None:
    /// it failed).
    attempts: Vec<Try>,
    /// The PROXY protocol header sent to the upstream (counted in
    /// `$upstream_bytes_sent`, as nginx counts it).
    pp_sent: u64,
    copied: crate::net::copy::Copied,
    connected_at: Option<Instant>,
    ended: Option<Instant>,
    /// The `map` variables evaluated so far.
    maps: MapCache,
    /// The client's TLS, on a `listen ... ssl` address.
    tls: Option<Box<crate::net::tls::Details>>,
    /// What `ssl_preread` read of the ClientHello.
    preread: Option<crate::net::preread::Hello>,
    /// The preread phase ran (its variables are found, empty or not).
    prereading: bool,
    /// The bytes it saw: nginx leaves them out of `$bytes_received`.
    preread_len: u64,
    /// `$limit_conn_status`, and the counts the session holds.
    limit_status: Option<&'static str>,
    holds: Vec<(Arc<crate::net::limit::LimitZone>, crate::net::limit::Held)>,
    /// What `set` gave, in order.
    vars: Vec<(String, String)>,
    /// A UDP session (`udp.rs`): nginx's log context says "udp client".
    udp: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        for (z, h) in self.holds.drain(..) {
            z.conn_release(h);
        }
    }
}

impl Evaluator for Session {
    fn maps(&self) -> &MapCache {
        &self.maps
    }

    fn text(&self, t: &Template, caps: Option<&Captures>) -> String {
        crate::conf::map::eval_with_captures(t, caps, |v| self.var(v))
    }

    fn assigned(&self, name: &str) -> Option<String> {
        self.assigned_var(name)
    }

    fn cycle(&self, name: &str) {
        crate::log_conn!(
            crate::log::Level::Error,
            self.number,
            "cycle while evaluating variable \"{}\"{}",
            name,
            self.short_context()
        );
    }
}

impl Session {
    /// A session that starts now, numbered as the worker's connections are.
    fn new(
        shared: &Shared,
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
        listen: String,
        udp: bool,
    ) -> Session {
        Session {
            number: shared.next_conn.fetch_add(1, Ordering::Relaxed),
            remote,
            peer: remote,
            proxy: None,
            local,
            listen,
            start: crate::net::clock::now(),
            // 000 until the session ends (200 then, unless set), as
            // nginx's `$status` reads inside a `return`.
            status: 0,
            attempts: Vec::new(),
            pp_sent: 0,
            copied: Default::default(),
            connected_at: None,
            ended: None,
            maps: Default::default(),
            tls: None,
            preread: None,
            prereading: false,
            preread_len: 0,
            limit_status: None,
            holds: Vec::new(),
            vars: Vec::new(),
            udp,
        }
    }

    fn client(&self) -> String {
        self.remote
            .map(|a| a.ip().to_string())
            .unwrap_or_else(|| "unix:".into())
    }

    /// nginx's stream log context while connecting: nothing moved yet.
    fn context(&self, upstream: &str) -> String {
        format!(
            ", {}client: {}, server: {}, upstream: \"{}\", bytes from/to client:0/0, bytes from/to upstream:0/0",
            if self.udp { "udp " } else { "" },
            self.client(),
            self.listen,
            upstream,
        )
    }

    /// nginx's stream log context while proxying: the bytes each way.
    fn proxying_context(&self, upstream: &str) -> String {
        format!(
            ", {}client: {}, server: {}, upstream: \"{}\", {}",
            if self.udp { "udp " } else { "" },
            self.client(),
            self.listen,
            upstream,
            self.byte_counts()
        )
    }

    /// nginx's "bytes from/to client:R/S, bytes from/to upstream:R/S":
    /// what the preread phase saw is not counted from the client, the
    /// PROXY protocol header is counted to the upstream.
    fn byte_counts(&self) -> String {
        let (ab, ba) = (self.copied.ab, self.copied.ba);
        format!(
            "bytes from/to client:{}/{ba}, bytes from/to upstream:{ba}/{}",
            ab.saturating_sub(self.preread_len),
            ab + self.pp_sent
        )
    }

    /// nginx's stream log context before an upstream is chosen.
    fn short_context(&self) -> String {
        format!(
            ", {}client: {}, server: {}",
            if self.udp { "udp " } else { "" },
            self.client(),
            self.listen
        )
    }

    /// The variables a stream template may use here.
    fn eval(&self, t: &Template) -> String {
        self.text(t, None)
    }

    fn var(&self, v: &Var) -> String {
        match v {
            Var::RemoteAddr => self.client(),
            // The address's bytes, as they are (`octets`).
            Var::BinaryRemoteAddr => crate::net::vars::binary_addr(self.remote.map(|a| a.ip())),
            Var::RemotePort => self
                .remote
                .map(|a| a.port().to_string())
                .unwrap_or_default(),
            Var::ServerAddr => self.local.map(|a| a.ip().to_string()).unwrap_or_default(),
            Var::ServerPort => self.local.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::Connection => self.number.to_string(),
            Var::Pid => std::process::id().to_string(),
            Var::NginxVersion | Var::Hostname | Var::Msec | Var::TimeLocal | Var::TimeIso8601 => {
                crate::net::vars::value(v)
            }
            Var::Status => format!("{:03}", self.status),
            Var::Protocol => if self.udp { "UDP" } else { "TCP" }.into(),
            Var::UpstreamAddr => self.list(|t| t.peer.clone()),
            Var::UpstreamConnectTime => self.list(|t| t.connect.map_or("-".into(), secs)),
            // One item per attempt, as nginx's: a failed one sent and got
            // nothing, had no first byte, and lasted until it failed.
            Var::UpstreamFirstByteTime => {
                self.list(
                    |t| match (t.connect, self.connected_at, self.copied.first_ba) {
                        (Some(_), Some(c), Some(f)) => secs(f.duration_since(c)),
                        _ => "-".into(),
                    },
                )
            }
            Var::UpstreamSessionTime => {
                self.list(|t| match (t.connect, self.connected_at, self.ended) {
                    (Some(_), Some(c), Some(e)) => secs(e.duration_since(c)),
                    (Some(_), _, _) => "-".into(),
                    (None, _, _) => secs(t.took),
                })
            }
            Var::UpstreamBytesSent => self.list(|t| match t.connect {
                Some(_) => (self.copied.ab + self.pp_sent).to_string(),
                None => "0".into(),
            }),
            Var::UpstreamBytesReceived => self.list(|t| match t.connect {
                Some(_) => self.copied.ba.to_string(),
                None => "0".into(),
            }),
            Var::SessionTime => {
                secs(self.ended.unwrap_or_else(crate::net::clock::now) - self.start)
            }
            // Seen from the client: sent to it, received from it.
            Var::BytesSent => self.copied.ba.to_string(),
            Var::BytesReceived => self.copied.ab.saturating_sub(self.preread_len).to_string(),
            Var::SslProtocol
            | Var::SslCipher
            | Var::SslServerName
            | Var::SslSessionReused
            | Var::SslClientVerify
            | Var::SslClientSDn
            | Var::SslClientIDn
            | Var::SslClientSerial
            | Var::SslClientFingerprint
            | Var::SslClientEscapedCert
            | Var::SslClientCert
            | Var::SslClientRawCert
            | Var::SslAlpnProtocol => self
                .tls
                .as_ref()
                .and_then(|t| t.value(v))
                .unwrap_or_default(),
            Var::SslPrereadServerName => self.hello(|h| &h.server_name),
            Var::SslPrereadAlpnProtocols => self.hello(|h| &h.alpn),
            Var::SslPrereadProtocol => self.hello(|h| h.protocol),
            Var::LimitConnStatus => self.limit_status.unwrap_or_default().to_string(),
            Var::RealipRemoteAddr => self
                .peer
                .map(|a| a.ip().to_string())
                .unwrap_or_else(|| "unix:".into()),
            Var::RealipRemotePort => self.peer.map(|a| a.port().to_string()).unwrap_or_default(),
            Var::ProxyProtocolAddr => self.pp(|p| p.src_addr.clone()),
            Var::ProxyProtocolPort => {
                self.pp(|p| crate::net::proxy_protocol::Addrs::port_text(p.src_port))
            }
            Var::ProxyProtocolServerAddr => self.pp(|p| p.dst_addr.clone()),
            Var::ProxyProtocolServerPort => {
                self.pp(|p| crate::net::proxy_protocol::Addrs::port_text(p.dst_port))
            }
            Var::ProxyProtocolTlv(k) => match self.proxy.as_ref().map(|p| p.tlv(*k)) {
                None | Some(Ok(None)) => String::new(),
                Some(Ok(Some(v))) => String::from_utf8_lossy(&v).into_owned(),
                Some(Err(_)) => {
                    crate::log_conn!(
                        crate::log::Level::Error,
                        self.number,
                        "broken PROXY protocol TLV{}",
                        self.short_context()
                    );
                    String::new()
                }
            },
            Var::Map(m) => crate::conf::map::value(self, m),
            // What `set` gave, else a named capture of a map regex.
            Var::User(n) => self
                .assigned_var(n)
                .or_else(|| self.maps.named(n))
                .unwrap_or_default(),
            _ => String::new(),
        }
    }

    /// Whether nginx has a value for `v`, empty as it may be: what `set`
    /// names (set in this session or not), and what `ssl_preread` read.
    fn found_empty(&self, v: &Var) -> bool {
        match v {
            Var::User(_) => true,
            Var::SslPrereadServerName | Var::SslPrereadAlpnProtocols | Var::SslPrereadProtocol => {
                self.prereading
            }
            _ => false,
        }
    }

    fn assigned_var(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn pp(&self, f: impl Fn(&crate::net::proxy_protocol::Addrs) -> String) -> String {
        self.proxy.as_deref().map(f).unwrap_or_default()
    }

    fn hello(&self, f: impl Fn(&crate::net::preread::Hello) -> &str) -> String {
        self.preread
            .as_ref()
            .map(|h| f(h).to_string())
            .unwrap_or_default()
    }

    /// One item per attempt; none (empty: `-` in a log line) without one.
    fn list(&self, f: impl Fn(&Try) -> String) -> String {
        self.attempts.iter().map(f).collect::<Vec<_>>().join(", ")
    }

    /// The session's access log lines.
    fn log(&self, logs: &[crate::conf::loc::AccessLog]) {
        use crate::conf::loc::Escape;
        for l in logs {
            if let Some(c) = &l.cond {
                let mut v = String::new();
                for seg in &c.segments {
                    match seg {
                        Segment::Lit(s) => v.push_str(s),
                        Segment::Var(var) => v.push_str(&self.var(var)),
                    }
                }
                if v.is_empty() || v == "0" {
                    continue;
                }
            }
            let Some(file) = crate::log::files::get(&l.path) else {
                continue;
            };
            let mut line = String::new();
            for seg in &l.format.template.segments {
                match seg {
                    Segment::Lit(s) => line.push_str(s),
                    Segment::Var(v) => {
                        let value = self.var(v);
                        match l.format.escape {
                            // An empty value nginx found (not `-`).
                            Escape::Default if value.is_empty() && self.found_empty(v) => {}
                            Escape::Default => {
                                crate::log::escape::escape_default(&value, &mut line)
                            }
                            Escape::Json => crate::log::escape::escape_json(&value, &mut line),
                            Escape::None => line.push_str(&value),
                        }
                    }
                }
            }
            line.push('\n');
            file.write_line(&crate::octets::bytes(&line));
        }
    }
}

/// Seconds with milliseconds, as nginx prints times.
fn secs(d: Duration) -> String {
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

async fn run(
    mut client: Stream,
    mut s: Session,
    server: usize,
    flags: Flags,
    shared: Arc<Shared>,
    // What the session holds until it ends: its `worker_connections` slot
    // and its place among the worker's connections.
    _held: impl Send,
) {
    let shared = &*shared;
    let Some(conf) = shared
        .cfg
        .stream
        .as_ref()
        .and_then(|st| st.servers.get(server))
    else {
        return;
    };
    if let Some(peer) = s.peer {
        crate::log_conn!(
            crate::log::Level::Info,
            s.number,
            "client {} connected to {}",
            peer,
            s.listen
        );
    }
    // The PROXY protocol header comes before the session's phases; then
    // nginx's phases: post-accept (realip), preaccess (limit_conn), access,
    // ssl, preread, content.
    if flags.pp && !proxy_protocol(&mut client, &mut s, conf).await {
        return end(&mut s, conf);
    }
    if !preaccess(&mut s, conf, shared) {
        s.status = 503;
        return end(&mut s, conf);
    }
    if crate::conf::allow::allowed(&conf.access, s.remote.map(|a| a.ip())) == Some(false) {
        crate::log_conn!(
            crate::log::Level::Error,
            s.number,
            "access forbidden by rule while initializing session{}",
            s.short_context()
        );
        s.status = 403;
        return end(&mut s, conf);
    }
    if flags.tls {
        let config = shared.tls.get(server).and_then(Option::as_ref);
        // In a box of its own: the handshake's future (4.6 kB, rustls's
        // state) would otherwise size every session's, TLS or not (5.7 kB
        // against 3.0 kB; `-Zprint-type-sizes`).
        let handshake = crate::net::boxed::boxed(|| ssl::handshake(client, &mut s, conf, config));
        match handshake.await {
            Some(c) => client = c,
            None => return end(&mut s, conf),
        }
    }
    if conf.ssl_preread && !ssl::read_hello(&client, &mut s, conf).await {
        return end(&mut s, conf);
    }
    match &conf.target {
        StreamTarget::Return(t) => {
            // The bytes the text stands for (`$binary_remote_addr`'s).
            let text = crate::octets::into_bytes(s.eval(t));
            if client.write_all(&text).await.is_ok() {
                s.copied.ba = text.len() as u64;
            }
            let _ = client.shutdown().await;
        }
        StreamTarget::Upstream(i) => {
            if let Some(ups) = shared.upstreams.get(*i).cloned() {
                proxy(client, &mut s, conf, &ups, shared).await;
            }
        }
        StreamTarget::Dynamic(t) => {
            if let Some(ups) = dynamic(&mut s, t, conf, shared).await {
                proxy(client, &mut s, conf, &ups, shared).await;
            }
        }
    }
    end(&mut s, conf);
}

/// Reads the PROXY protocol header within `proxy_protocol_timeout`, and
/// applies the realip module: a trusted peer's header names the client.
/// False (logged, status set as nginx) to end the session.
async fn proxy_protocol(client: &mut Stream, s: &mut Session, conf: &StreamServer) -> bool {
    use crate::net::proxy_protocol::{Outcome, read};
    match read(client, conf.proxy_protocol_timeout).await {
        Outcome::Done(addrs) => s.proxy = addrs.map(Box::new),
        Outcome::Broken(b) => {
            if b.logged() {
                crate::log_conn!(
                    crate::log::Level::Error,
                    s.number,
                    "{} while reading PROXY protocol{}",
                    b,
                    s.short_context()
                );
            }
            s.status = 400;
            return false;
        }
        // Nothing came: nginx's stream module reads an empty header.
        Outcome::Closed => {
            crate::log_conn!(
                crate::log::Level::Error,
                s.number,
                "broken header: \"\" while reading PROXY protocol{}",
                s.short_context()
            );
            s.status = 400;
            return false;
        }
        Outcome::TimedOut => {
            crate::log_conn!(
                crate::log::Level::Info,
                s.number,
                "client timed out (110: Connection timed out) while reading PROXY protocol{}",
                s.short_context()
            );
            return false;
        }
    }
    let trusted = conf
        .set_real_ip_from
        .iter()
        .any(|t| t.contains(s.peer.map(|a| a.ip())));
    if trusted {
        if let Some(p) = &s.proxy {
            if let Ok(ip) = p.src_addr.parse::<std::net::IpAddr>() {
                s.remote = Some(SocketAddr::new(ip, p.src_port));
            }
        }
    }
    true
}

/// nginx's stream `limit_conn`: false to close the session (503).
/// nginx's preaccess phase: the set module's handler, then limit_conn's
/// (false: refused, 503).
fn preaccess(s: &mut Session, conf: &StreamServer, shared: &Shared) -> bool {
    for (name, t) in &conf.more.set {
        let v = s.eval(t);
        s.vars.push((name.clone(), v));
    }
    limit_conn(s, conf, shared)
}

fn limit_conn(s: &mut Session, conf: &StreamServer, shared: &Shared) -> bool {
    use crate::net::limit::Acquire;
    for l in &conf.limit_conn {
        let (Some(zone), Some(spec)) = (
            shared.limits.get(&l.zone),
            shared.cfg.limit_zones.iter().find(|z| z.name == l.zone),
        ) else {
            continue;
        };
        let key = s.eval(&spec.key);
        if key.is_empty() {
            continue;
        }
        if key.len() > 255 {
            crate::log_conn!(
                crate::log::Level::Error,
                s.number,
                "the value of the \"{}\" key is more than 255 bytes: \"{}\"{}",
                spec.key_text,
                key,
                s.short_context()
            );
            continue;
        }
        s.limit_status = Some("PASSED");
        let busy = match zone.conn_acquire(key.as_bytes(), l.conn) {
            Acquire::Held(h) => {
                s.holds.push((zone.clone(), h));
                continue;
            }
            Acquire::Skipped => continue,
            Acquire::Busy => true,
            Acquire::NoMemory => false,
        };
        if busy {
            crate::log_conn!(
                conf.limit_conn_log_level,
                s.number,
                "limiting connections{} by zone \"{}\" while initializing session{}",
                if conf.limit_conn_dry_run {
                    ", dry run,"
                } else {
                    ""
                },
                l.zone,
                s.short_context()
            );
        } else {
            crate::log!(
                crate::log::Level::Crit,
                "ngx_slab_alloc() failed: no memory in limit_conn zone \"{}\"",
                l.zone
            );
        }
        for (z, h) in s.holds.drain(..) {
            z.conn_release(h);
        }
        if conf.limit_conn_dry_run {
            s.limit_status = Some("REJECTED_DRY_RUN");
            return true;
        }
        s.limit_status = Some("REJECTED");
        return false;
    }
    true
}

/// The session's end: its access log lines.
fn end(s: &mut Session, conf: &StreamServer) {
    if s.status == 0 {
        s.status = 200;
    }
    s.ended = Some(crate::net::clock::now());
    s.log(&conf.access_log);
}

/// Connects to a peer of `ups` and relays the session until either side ends.
async fn proxy(
    mut client: Stream,
    s: &mut Session,
    conf: &StreamServer,
    ups: &Arc<UpstreamRt>,
    shared: &Shared,
) {
    // A client that leaves while its upstream connects ends the attempt: the
    // engine's guards release the peer. What it sends meanwhile waits in the
    // relay's buffer.
    let Ok(bind) = local_address(s, conf) else {
        s.status = 500;
        return;
    };
    let mut relay = crate::net::copy::Relay::with_buffer(conf.more.proxy_buffer_size);
    let connected = tokio::select! {
        c = connect(s, conf, ups, shared, bind) => Some(c),
        () = relay.early(&mut client) => None,
    };
    match connected {
        None => {
            let gone = Failure {
                side: Side::Client,
                kind: Kind::Closed,
                text: "client closed connection".into(),
                stage: crate::upstream::attempt::CONNECTING,
            };
            crate::log_conn!(
                crate::log::Level::Info,
                s.number,
                "{} while connecting to upstream{}",
                gone.text,
                Session::context(s, &ups.cfg.name)
            );
            s.status = gone.status();
        }
        Some(None) => s.status = 502,
        Some(Some(mut c)) => {
            s.connected_at = Some(crate::net::clock::now());
            let info = crate::log::enabled(crate::log::Level::Info);
            if let Some(local) = c.conn.local_addr().filter(|_| info) {
                crate::log_conn!(
                    crate::log::Level::Info,
                    s.number,
                    "proxy {} connected to {}",
                    local,
                    c.name
                );
            }
            let rate = |t: &Option<Template>| crate::conf::rate::size(t.as_ref(), |t| s.eval(t));
            let (up, down) = (
                rate(&conf.more.proxy_upload_rate),
                rate(&conf.more.proxy_download_rate),
            );
            relay.set_rates(up, down);
            s.copied = relay
                .run(
                    &mut client,
                    &mut c.conn,
                    conf.proxy_timeout,
                    conf.proxy_half_close,
                )
                .await;
            // Why it ended, in nginx's words: nothing moved for
            // proxy_timeout, or a read failed (an upstream's at error
            // level, a client's at info, as nginx's connection errors).
            let why = if s.copied.timed_out {
                Some((
                    crate::log::Level::Info,
                    "connection timed out (110: Connection timed out) while proxying connection"
                        .to_string(),
                ))
            } else {
                s.copied.read_failed.map(|(upstream, errno)| {
                    let e = std::io::Error::from_raw_os_error(errno);
                    let text = format!(
                        "recv() failed ({}) while proxying and reading from {}",
                        crate::log::errno_text(&e),
                        if upstream { "upstream" } else { "client" }
                    );
                    let level = if upstream {
                        crate::log::Level::Error
                    } else {
                        crate::log::Level::Info
                    };
                    (level, text)
                })
            };
            if let Some((level, text)) = &why {
                crate::log_conn!(*level, s.number, "{}{}", text, s.proxying_context(&c.name));
            }
            // nginx's line when a side's end (or failure) ends the session
            // (no context after it).
            let ended = match s.copied.read_failed {
                Some((upstream, _)) => Some(upstream),
                None if !s.copied.timed_out => s.copied.ended_by_b,
                None => None,
            };
            if let Some(by_upstream) = ended.filter(|_| info) {
                crate::log_conn!(
                    crate::log::Level::Info,
                    s.number,
                    "{} disconnected, {}",
                    if by_upstream { "upstream" } else { "client" },
                    s.byte_counts()
                );
            }
            // TLS ends with close_notify (if the socket takes it now), as
            // nginx's SSL_shutdown() at close.
            client.close_notify();
            c.conn.close_notify();
            c.held.account(s.copied.ab, s.copied.ba);
            c.held.finish(Outcome::Ok);
        }
    }
}

/// `proxy_bind` for this session: None when off or empty; Err (logged as
/// nginx logs it) for a value that is no address.
fn local_address(s: &Session, conf: &StreamServer) -> Result<Option<std::net::IpAddr>, ()> {
    let crate::conf::proxy_more::Bind::Addr(t) = &conf.more.proxy_bind else {
        return Ok(None);
    };
    let v = s.eval(t);
    if v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).map_err(|_| {
        crate::log_conn!(
            crate::log::Level::Error,
            s.number,
            "invalid local address \"{}\"{}",
            v,
            s.short_context()
        );
    })
}

/// `proxy_pass` with variables, as nginx's stream proxy: the text names an
/// `upstream` block (without a port), or a `proxy_pass host:port` of the
/// configuration, or is `address:port`, or `name:port` looked up with the
/// stream block's `resolver`. None (status set, error logged) when it is
/// none of these.
async fn dynamic(
    s: &mut Session,
    t: &Template,
    conf: &StreamServer,
    shared: &Shared,
) -> Option<Arc<UpstreamRt>> {
    let stream = shared.cfg.stream.as_ref()?;
    let text = s.eval(t);
    // nginx's proxy module logs these with its context: the bytes so far.
    let fail = |s: &mut Session, status: u16, msg: String| {
        crate::log_conn!(
            crate::log::Level::Error,
            s.number,
            "{}{}, {}",
            msg,
            s.short_context(),
            s.byte_counts()
        );
        s.status = status;
        None
    };
    let (host, port) = match crate::conf::values::split_host_port(&text) {
        Ok(hp) if !hp.host.is_empty() => (hp.written, hp.port),
        _ => return fail(s, 500, format!("invalid port in upstream \"{text}\"")),
    };
    let known = stream.upstreams.iter().position(|u| match port {
        None => !u.implicit && u.name.eq_ignore_ascii_case(host),
        Some(_) => u.implicit && u.name.eq_ignore_ascii_case(&text),
    });
    if let Some(ups) = known.and_then(|i| shared.upstreams.get(i)) {
        return Some(ups.clone());
    }
    let Some(port) = port else {
        return fail(s, 500, format!("no port in upstream \"{host}\""));
    };
    let addrs = match host.trim_start_matches('[').trim_end_matches(']').parse() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let Some(resolver) = &conf.more.resolver else {
                return fail(s, 500, format!("no resolver defined to resolve {host}"));
            };
            match shared.dns.lookup(host, resolver).await {
                Ok(a) => a,
                Err(code) => {
                    let why = crate::upstream::dns::strerror(code);
                    return fail(
                        s,
                        502,
                        format!("{host} could not be resolved ({code}: {why})"),
                    );
                }
            }
        }
    };
    Some(UpstreamRt::for_addresses(&text, host, port, addrs))
}

impl Requester for Session {
    fn number(&self) -> u64 {
        self.number
    }

    fn hash_text(&self, key: &Template) -> String {
        self.eval(key)
    }

    fn client_ip(&self) -> Option<std::net::IpAddr> {
        self.remote.map(|a| a.ip())
    }

    fn context(&self, peer: &str) -> String {
        Session::context(self, peer)
    }

    fn record_failed(&mut self, peer: &Arc<str>, _: &Failure, took: std::time::Duration) {
        self.attempts.push(Try {
            peer: peer.to_string(),
            connect: None,
            took,
        });
    }
}

/// Picks and connects through the attempt engine, trying the next peer
/// when connecting fails, as `proxy_next_upstream` allows.
async fn connect(
    s: &mut Session,
    conf: &StreamServer,
    ups: &Arc<UpstreamRt>,
    shared: &Shared,
    bind: Option<std::net::IpAddr>,
) -> Option<Connected<Stream>> {
    let policy = Policy {
        mask: NextUpstream(if conf.proxy_next_upstream {
            NextUpstream::ERROR | NextUpstream::TIMEOUT
        } else {
            0
        }),
        tries: conf.proxy_next_upstream_tries,
        timeout: conf.proxy_next_upstream_timeout,
        race: conf.proxy_connect_race,
        non_idempotent: false,
    };
    let mut attempts = Attempts::new(ups, policy, s).await;
    // `proxy_ssl_name`, or the host of `proxy_pass` (the port goes).
    let tls = conf.proxy_ssl.as_ref().map(|ssl| {
        let name = match &ssl.name {
            Some(t) => s.eval(t),
            None => ups.cfg.name.clone(),
        };
        Tls::new(shared.upstream_tls.clone(), ssl.clone(), &name)
    });
    let header = conf
        .proxy_protocol
        .then(|| crate::net::proxy_protocol::v1_header(s.remote, s.local));
    let pp_len = header.as_ref().map_or(0, |h| h.len() as u64);
    let plain = Plain {
        timeout: conf.proxy_connect_timeout,
        tls,
        proxy_protocol: header.map(Into::into),
        bind,
        keepalive: conf.more.proxy_socket_keepalive,
    };
    let c = attempts.connect(&plain, s).await.ok()?;
    let took = crate::net::clock::since(c.began);
    s.attempts.push(Try {
        peer: c.name.to_string(),
        connect: Some(took),
        took,
    });
    s.pp_sent = pp_len;
    Some(c)
}
