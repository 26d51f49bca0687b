//! The typed, immutable configuration that `build` produces and every other layer
//! reads. Field names follow nginx's directive names so one grep finds a setting
//! in `man/`, `conf/`, `src/` and `t/`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use super::vars::Template;
use super::{Files, Src};
use crate::log::LogSpec;

pub use super::health::{GrpcCheck, HealthCheck, Match};
pub use super::loc::{AccessLog, LocConf, LogFormat, NextUpstream};

#[derive(Debug, Clone)]
pub struct Config {
    pub prefix: PathBuf,
    pub conf_file: PathBuf,
    /// Every file read, in order, for `-T`.
    pub files: Files,
    pub main: Main,
    pub events: Events,
    pub http: Option<Http>,
    pub stream: Option<Stream>,
    /// `limit_req_zone` and `limit_conn_zone` (http and stream).
    pub limit_zones: Vec<super::limit::LimitZoneSpec>,
    /// `access_log ... buffer=|gzip`: each buffered file's settings.
    pub access_log_buffers: Vec<(PathBuf, crate::log::files::Buffering)>,
}

/// The `stream` block: TCP servers proxying to upstreams.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    pub servers: Vec<StreamServer>,
    /// `upstream` blocks, then implicit ones for `proxy_pass host:port`
    /// (`StreamTarget::Upstream` indexes them), and their zones.
    pub upstreams: UpstreamBlocks,
    /// Every access log file it names, for the master to open.
    pub access_log_paths: Vec<PathBuf>,
    /// The stream block's `resolver` (with its `resolver_timeout`), for
    /// `proxy_pass` with variables.
    pub resolver: Option<Resolver>,
}

impl Config {
    /// Every access log file of the http and stream blocks.
    pub fn access_log_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = self
            .http
            .iter()
            .flat_map(|h| h.access_log_paths.iter())
            .chain(self.stream.iter().flat_map(|s| s.access_log_paths.iter()))
            // A syslog target is no file (`log::files::get` makes its sender).
            .filter(|p| !p.to_str().is_some_and(crate::log::syslog::is_syslog))
            .cloned()
            .collect();
        all.dedup();
        all
    }

    /// The upstream blocks of every context (http's, then stream's): what
    /// the zones of a generation are made from.
    pub fn upstream_blocks(&self) -> Vec<&UpstreamBlocks> {
        self.http
            .iter()
            .map(|h| &h.upstreams)
            .chain(self.stream.iter().map(|s| &s.upstreams))
            .collect()
    }
}

/// The upstream blocks of one context (`http` or `stream`): its upstreams
/// and the shared zones they name. Zones are made, carried over at reload
/// and upgrade, seeded from state files and read by workers from these; a
/// zone name belongs to one context only, so a zone upstream is known by
/// its zone's name and its own (`upstream u` may be in both contexts).
#[derive(Debug, Clone, Default)]
pub struct UpstreamBlocks {
    /// Explicit `upstream` blocks first, then the implicit ones `proxy_pass
    /// host:port` creates; `ProxyPass::upstream` and
    /// `StreamTarget::Upstream` index this list.
    pub list: Vec<Arc<Upstream>>,
    /// Shared memory zones the upstreams name (`zone NAME SIZE`).
    pub zones: Vec<ZoneSpec>,
    /// `metrics_buckets` (ms): the bounds of the zone upstreams' time
    /// histograms (none in stream).
    pub time_buckets: Vec<u32>,
}

impl UpstreamBlocks {
    pub fn iter(&self) -> std::slice::Iter<'_, Arc<Upstream>> {
        self.list.iter()
    }

    pub fn get(&self, i: usize) -> Option<&Arc<Upstream>> {
        self.list.get(i)
    }

    /// The upstream `name` of zone `zone`.
    pub fn in_zone(&self, zone: &str, name: &str) -> Option<&Arc<Upstream>> {
        self.list
            .iter()
            .find(|u| u.name == name && u.zone.as_deref() == Some(zone))
    }

    /// The upstreams zone `spec` holds, in its order.
    pub fn of_zone<'a>(&'a self, spec: &'a ZoneSpec) -> impl Iterator<Item = &'a Arc<Upstream>> {
        spec.upstreams
            .iter()
            .filter_map(|name| self.in_zone(&spec.name, name))
    }
}

/// The upstream `name` of zone `zone`, in whichever context's blocks hold
/// it.
pub fn zone_upstream<'a>(
    blocks: &[&'a UpstreamBlocks],
    zone: &str,
    name: &str,
) -> Option<&'a Arc<Upstream>> {
    blocks.iter().find_map(|b| b.in_zone(zone, name))
}

/// One stream `server`.
#[derive(Debug, Clone)]
pub struct StreamServer {
    /// `access_log PATH FORMAT` (a session's line when it ends).
    pub access_log: Vec<super::loc::AccessLog>,
    pub listen: Vec<Listen>,
    pub target: StreamTarget,
    pub proxy_connect_timeout: Duration,
    /// `proxy_connect_race TIME | off`.
    pub proxy_connect_race: Option<Duration>,
    pub proxy_timeout: Duration,
    pub proxy_next_upstream: bool,
    pub proxy_next_upstream_tries: u32,
    pub proxy_next_upstream_timeout: Duration,
    pub proxy_half_close: bool,
    /// `proxy_responses N`: datagrams expected from the upstream per client
    /// datagram (UDP); None: not limited (nginx's default).
    pub proxy_responses: Option<u32>,
    /// `proxy_requests N`: client datagrams after which a UDP session stops
    /// taking the client's datagrams (0: no limit).
    pub proxy_requests: u32,
    /// The `ssl_*` settings, for `listen ... ssl` (certificates loaded).
    pub ssl: Arc<super::ssl::ServerSsl>,
    /// `proxy_ssl on`: TLS to the upstream with these settings.
    pub proxy_ssl: Option<Arc<super::proxy_ssl::ProxySsl>>,
    /// `ssl_preread on`: the ClientHello is read (not consumed) first.
    pub ssl_preread: bool,
    pub preread_timeout: Duration,
    pub preread_buffer_size: usize,
    /// `limit_conn` lines (the stream level's when the server has none),
    /// `limit_conn_log_level`, `limit_conn_dry_run`.
    pub limit_conn: Vec<super::limit::LimitConn>,
    pub limit_conn_log_level: crate::log::Level,
    pub limit_conn_dry_run: bool,
    /// `allow` and `deny`, in order.
    pub access: Arc<Vec<super::allow::Rule>>,
    /// `proxy_protocol_timeout`: how long the PROXY protocol header of a
    /// `listen ... proxy_protocol` address may take (30s).
    pub proxy_protocol_timeout: Duration,
    /// `proxy_protocol on`: a PROXY protocol (v1) header goes to the
    /// upstream before anything else, on every attempt.
    pub proxy_protocol: bool,
    /// The stream realip module's `set_real_ip_from`: peers whose PROXY
    /// protocol header names the client.
    pub set_real_ip_from: Vec<super::loc::Trusted>,
    /// `proxy_bind`, `proxy_buffer_size`, `proxy_download_rate`,
    /// `proxy_upload_rate`.
    pub more: super::stream_more::StreamMore,
    pub src: Src,
}

/// What a stream server does with a session.
#[derive(Debug, Clone)]
pub enum StreamTarget {
    /// `proxy_pass`: index into `Stream::upstreams`.
    Upstream(usize),
    /// `return TEXT`: send it and close.
    Return(Template),
    /// `proxy_pass` with variables: an upstream's name or `host:port`,
    /// evaluated per session.
    Dynamic(Template),
}

#[derive(Debug, Clone)]
pub struct Main {
    /// `worker_processes N|auto`, default 1.
    pub worker_processes: usize,
    /// `pid FILE`, default `logs/nginx.pid` under the prefix.
    pub pid: PathBuf,
    /// `error_log FILE|stderr [LEVEL]`, default `logs/error.log error`.
    pub error_log: Vec<LogSpec>,
    pub daemon: bool,
    pub master_process: bool,
    /// `user USER [GROUP]`; applies only when the master runs as root.
    pub user: User,
    pub worker_rlimit_nofile: Option<u64>,
    pub worker_shutdown_timeout: Option<Duration>,
    /// `worker_priority`, `worker_cpu_affinity`, `worker_rlimit_core`,
    /// `working_directory`, `env`.
    pub worker_setup: super::worker_setup::WorkerSetup,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub user: String,
    /// None: the group named like the user, else the user's primary group.
    pub group: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Events {
    /// `worker_connections N`, default 512.
    pub worker_connections: usize,
    /// `multi_accept on|off` (None: not set, `net::accept::BATCH` at a
    /// time).
    pub multi_accept: Option<bool>,
    /// `accept_balance on|off`, default on (None: not set).
    pub accept_balance: Option<bool>,
}

#[derive(Debug, Clone, Default)]
pub struct Http {
    pub servers: Vec<Server>,
    pub error_log: Vec<LogSpec>,
    /// `upstream` blocks, then the implicit ones `proxy_pass
    /// http://host:port` creates, and their zones.
    pub upstreams: UpstreamBlocks,
    /// Every access log file any level names, for the master to open.
    pub access_log_paths: Vec<PathBuf>,
    /// Every temp directory any level names, for the master to create.
    pub temp_paths: Vec<PathBuf>,
}

/// `resolver` with `resolver_timeout`: how run-time names are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    pub servers: Vec<SocketAddr>,
    /// `valid=`: replaces the answers' TTL.
    pub valid: Option<Duration>,
    pub ipv4: bool,
    pub ipv6: bool,
    /// `resolver_timeout` (default 30s).
    pub timeout: Duration,
}

/// One shared zone: its size and the upstreams (by name) that keep their
/// peers in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSpec {
    pub name: String,
    /// Always set once the configuration is finished.
    pub size: Option<u64>,
    pub upstreams: Vec<String>,
    /// The `zone` directive that gave its size (errors creating it point there).
    pub src: super::Src,
}

impl ZoneSpec {
    /// nginx's smallest zone: eight pages.
    pub const MIN_SIZE: u64 = 8 * 4096;
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Inet(SocketAddr),
    Unix(PathBuf),
    /// A stream `listen ... udp` address: a datagram socket, a different
    /// listener from a TCP one on the same port.
    Udp(SocketAddr),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Inet(a) | ListenAddr::Udp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: ListenAddr,
    pub default_server: bool,
    pub reuseport: bool,
    /// `ssl`: connections to this address speak TLS (for all its servers,
    /// when one of them says so, as nginx).
    pub ssl: bool,
    /// `http2` (nginx 1.22's way): HTTP/2 on this address, for all its
    /// servers, as `http2 on` in each of them.
    pub http2: bool,
    /// `backlog=N`, default 511 as nginx.
    pub backlog: i32,
    /// `proxy_protocol`: connections to this address start with a PROXY
    /// protocol header (for all its servers, when one of them says so).
    pub proxy_protocol: bool,
    /// `rcvbuf=` and `sndbuf=`.
    pub sock: super::listen_opts::SockParams,
    pub src: Src,
}

#[derive(Debug, Clone)]
pub enum ServerName {
    /// `example.com`, lowercased.
    Exact(String),
    /// `*.example.com` or `.example.com`: stored as the suffix `.example.com`;
    /// `.example.com` also matches `example.com` itself.
    Front { suffix: String, bare_too: bool },
    /// `www.example.*`: stored as the prefix `www.example.`.
    Back(String),
    /// `~regex`.
    Regex(Regex),
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: Vec<Listen>,
    pub server_name: Vec<ServerName>,
    /// The first name, for `$server_name` (shared with each request).
    pub primary_name: std::sync::Arc<str>,
    /// The rewrite module's directives at server level, run before any
    /// location is chosen.
    pub script: Vec<Stmt>,
    pub locations: Vec<Location>,
    pub error_log: Vec<LogSpec>,
    /// Settings for requests no location matches.
    pub conf: Arc<LocConf>,
    /// TLS settings and certificates (`ssl_*`).
    pub ssl: Arc<super::ssl::ServerSsl>,
    /// `try_files` for requests no location matches.
    pub try_files: Option<Arc<super::try_files::TryFiles>>,
    pub src: Src,
}

impl Server {
    /// Whether a `server_name` is a regex (whose captures a request gets).
    pub fn has_regex_name(&self) -> bool {
        self.server_name
            .iter()
            .any(|n| matches!(n, ServerName::Regex(_)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modifier {
    /// `location = /uri`
    Exact,
    /// `location /uri`
    Prefix,
    /// `location ^~ /uri`: a longest prefix match that stops the regex search.
    PrefixNoRegex,
    /// `location ~ re`
    Regex,
    /// `location ~* re`
    RegexCaseless,
    /// `location @name`
    Named,
}

#[derive(Debug, Clone)]
pub struct Location {
    pub modifier: Modifier,
    pub uri: String,
    pub regex: Option<Regex>,
    /// The rewrite module's directives in this location, in order.
    pub script: Vec<Stmt>,
    pub locations: Vec<Location>,
    pub error_log: Vec<LogSpec>,
    /// The settings in force here, merged from the enclosing levels.
    pub conf: Arc<LocConf>,
    /// `proxy_pass` (not inherited by nested locations, as in nginx).
    pub proxy_pass: Option<ProxyPass>,
    /// `proxy_pass` with variables: the URL, evaluated per request.
    pub proxy_pass_var: Option<Template>,
    /// `api`, `stub_status` or `metrics` (not inherited either).
    pub handler: Option<Handler>,
    /// `try_files` (not inherited).
    pub try_files: Option<Arc<super::try_files::TryFiles>>,
    /// `internal`: only internal redirects and rewrites reach it.
    pub internal: bool,
    pub src: Src,
}

/// A location's built-in content handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// `api [write=on|off]`: the NGINX Plus-shaped JSON API (`write=on`:
    /// PATCH of a zone upstream's servers, `http::api_write`).
    Api { write: bool },
    /// `stub_status`: nginx's text status.
    StubStatus,
    /// `metrics`: the Prometheus text exposition.
    Metrics,
}

/// One rewrite-module directive.
#[derive(Debug, Clone)]
pub enum Stmt {
    Return(Return),
    Rewrite {
        regex: Regex,
        replacement: Template,
        flag: RewriteFlag,
        /// The request's arguments follow the new ones: false when the
        /// replacement ends with "?" (nginx's rule).
        add_args: bool,
    },
    Set {
        var: String,
        value: Template,
    },
    If {
        cond: Cond,
        body: Vec<Stmt>,
        /// An `if` in a location whose block sets the location's own
        /// settings (nginx's: `add_header`, `root`, `expires`, ...): what
        /// the request takes from then on when the condition holds.
        conf: Option<IfConf>,
    },
    Break,
}

/// The settings of an `if` block in a location.
#[derive(Debug, Clone)]
pub enum IfConf {
    /// While the configuration is read: which of its location's `if`
    /// blocks (their settings are merged once the location's are known).
    Pending(usize),
    Ready(Arc<IfBlock>),
}

/// What an `if` block in a location gives a request when it holds.
#[derive(Debug)]
pub struct IfBlock {
    /// The location's settings with the block's on top.
    pub conf: Arc<super::loc::LocConf>,
    /// A `proxy_pass` of its own: the block finished as a location, whose
    /// pass the request takes (else the location's stays).
    pub pass: Option<Arc<Location>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteFlag {
    None,
    Last,
    Break,
    Redirect,
    Permanent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileTest {
    File,
    Dir,
    Exists,
    Exec,
}

/// An `if` condition.
#[derive(Debug, Clone)]
pub enum Cond {
    /// `($var)`: true unless empty or "0".
    Truthy(Template),
    Eq {
        value: Template,
        text: String,
        negate: bool,
    },
    Match {
        value: Template,
        regex: Regex,
        negate: bool,
    },
    File {
        test: FileTest,
        path: Template,
        negate: bool,
    },
}

/// `return CODE [TEXT|URL]` or `return URL`.
#[derive(Debug, Clone)]
pub struct Return {
    pub code: u16,
    pub text: Option<Template>,
}

/// Where a peer is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PeerAddr {
    Inet(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Inet(a) => write!(f, "{a}"),
            PeerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One `server` line of an upstream.
#[derive(Debug, Clone)]
pub struct UpstreamServer {
    /// The address as written (`backend.example:8080`).
    pub text: String,
    /// Every address it stands for (a name resolved once at load).
    pub addrs: Vec<PeerAddr>,
    pub weight: u32,
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub max_conns: u32,
    pub backup: bool,
    pub down: bool,
    /// `resolve`: the name follows DNS at run time (no addresses at load).
    pub resolve: bool,
    /// The host and port to resolve (`resolve` only).
    pub host: String,
    pub port: u16,
    /// `service=`: resolve SRV records of this service instead.
    pub service: Option<String>,
    /// `weight=` was written (an SRV record's weight is used otherwise).
    pub weight_set: bool,
    /// `slow_start=`: how long a recovered peer takes to reach its weight.
    pub slow_start: Duration,
    /// `route=`: the peer's id for `sticky` (else the MD5 of its address).
    pub route: Option<String>,
}

impl UpstreamServer {
    /// A server with nginx's defaults: weight=1 max_fails=1 fail_timeout=10s.
    pub fn new(text: String, addrs: Vec<PeerAddr>) -> UpstreamServer {
        UpstreamServer {
            text,
            addrs,
            weight: 1,
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            max_conns: 0,
            backup: false,
            down: false,
            resolve: false,
            host: String::new(),
            port: 0,
            service: None,
            weight_set: false,
            slow_start: Duration::ZERO,
            route: None,
        }
    }
}

/// Which balancer an upstream uses.
#[derive(Debug, Clone)]
pub enum Balancer {
    RoundRobin,
    LeastConn,
    Hash {
        key: Template,
        consistent: bool,
    },
    IpHash,
    Random {
        two: bool,
    },
    /// `pick_first [warm=N] [revert]`: one peer takes every request.
    PickFirst {
        warm: usize,
        revert: bool,
    },
}

impl Balancer {
    /// nginx allows `backup` servers only with these balancers.
    pub fn allows_backup(&self) -> bool {
        matches!(self, Balancer::RoundRobin | Balancer::LeastConn)
    }

    pub fn is_pick_first(&self) -> bool {
        matches!(self, Balancer::PickFirst { .. })
    }
}

/// `keepalive N [local]` and its companions.
#[derive(Debug, Clone)]
pub struct Keepalive {
    /// Idle connections cached per worker; 0 turns the cache off.
    pub max: usize,
    /// `keepalive_min N`: connections each worker keeps open to every peer.
    pub min: usize,
    pub local: bool,
    pub requests: u64,
    pub time: Duration,
    pub timeout: Duration,
    /// `keepalive_time ... jitter=PERCENT`: each connection's age limit is
    /// `time` less up to this share of it, so connections do not all
    /// reconnect at once.
    pub jitter: u8,
}

impl Keepalive {
    /// No cache: upstreams that are not configured (synthesized from a
    /// zone, made at run time by `proxy_pass` with variables).
    pub fn off() -> Keepalive {
        Keepalive {
            min: 0,
            max: 0,
            local: false,
            requests: 0,
            time: Duration::ZERO,
            timeout: Duration::ZERO,
            jitter: 0,
        }
    }

    /// The age limit of one connection: `time`, less a share of it drawn
    /// from `seed()` within `jitter` percent (drawn only with a jitter: a
    /// worker's random numbers cost a `getpid`).
    pub fn age_limit(&self, seed: impl FnOnce() -> u64) -> Duration {
        if self.jitter == 0 {
            return self.time;
        }
        let seed = seed();
        // splitmix64: any seed spreads over the range.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let share = (z % 10_001) as f64 / 10_000.0 * f64::from(self.jitter) / 100.0;
        self.time.mul_f64(1.0 - share)
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub balancer: Balancer,
    pub keepalive: Keepalive,
    /// `http2_ping_interval`: liveness of its HTTP/2 connections.
    pub ping: Option<Ping>,
    /// `zone NAME`: the shared zone holding its peers.
    pub zone: Option<String>,
    /// The resolver for its `resolve` servers (the upstream's own, else
    /// the http level's).
    pub resolver: Option<std::sync::Arc<Resolver>>,
    /// `state FILE`: resolved peers kept for a cold start.
    pub state: Option<PathBuf>,
    /// Made by `proxy_pass http://host:port`, not by an `upstream` block.
    pub implicit: bool,
    /// `health_check` (in a location or stream server proxying to it).
    pub health: Option<Arc<HealthCheck>>,
    /// `queue N [timeout=TIME]`: requests that find no peer wait.
    pub queue: Option<Queue>,
    /// `sticky cookie|route|learn`: session affinity.
    pub sticky: Option<super::sticky::Sticky>,
    pub src: Src,
}

/// `queue N [timeout=TIME]` (NGINX Plus's): a request whose first pick finds
/// no peer (all down, failed, unhealthy or at `max_conns`, or a `resolve`
/// name not answered yet) waits for one, up to `max` such requests per
/// worker and for `timeout`; past either it gets 502.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub max: usize,
    pub timeout: Duration,
}

/// `http2_ping_interval TIME [timeout=TIME]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    pub interval: Duration,
    pub timeout: Duration,
}

/// `proxy_pass http://NAME[:PORT][URI]`.
#[derive(Debug, Clone)]
pub struct ProxyPass {
    /// Made at run time from a `proxy_pass` with variables: a URI part then
    /// replaces the whole request URI, as nginx does.
    pub dynamic: bool,
    /// `https://`: TLS to the upstream (the location's `proxy_ssl`).
    pub ssl: bool,
    /// `grpc_pass`: gRPC over HTTP/2.
    pub grpc: bool,
    /// Index into `Http::upstreams`.
    pub upstream: usize,
    /// The URI part, when given: it replaces the matched location prefix.
    pub uri: Option<String>,
    /// `$proxy_host`: the host (and port when not 80) as written.
    pub proxy_host: std::sync::Arc<str>,
    /// `$proxy_port`.
    pub proxy_port: u16,
    /// The location prefix the URI part replaces.
    pub location_prefix: String,
}

#[cfg(test)]
mod tests {
    use super::Keepalive;
    use std::time::Duration;

    #[test]
    fn jittered_age_limits_spread_below_keepalive_time() {
        let k = Keepalive {
            min: 0,
            max: 1,
            local: false,
            requests: 1,
            time: Duration::from_secs(100),
            timeout: Duration::ZERO,
            jitter: 20,
        };
        let ages: Vec<Duration> = (0..1000).map(|i| k.age_limit(|| i)).collect();
        let (min, max) = (ages.iter().min().copied(), ages.iter().max().copied());
        assert!(min.is_some_and(|m| m >= Duration::from_secs(80) && m < Duration::from_secs(82)));
        assert!(max.is_some_and(|m| m <= Duration::from_secs(100) && m > Duration::from_secs(98)));
        let none = Keepalive { jitter: 0, ..k };
        assert_eq!(
            none.age_limit(|| unreachable!("no jitter, no draw")),
            Duration::from_secs(100)
        );
        let (c, _) = super::super::testutil::try_build(
            "events {} http { upstream u { server 127.0.0.1:1; keepalive_time 10s jitter=25%; } }",
        )
        .expect("config");
        assert_eq!(c.http.expect("http").upstreams.list[0].keepalive.jitter, 25);
        for bad in ["jitter=101%", "jitter=x", "spread=5%"] {
            let e = super::super::testutil::err(&format!(
                "events {{}} http {{ upstream u {{ server 127.0.0.1:1; keepalive_time 10s {bad}; }} }}"
            ));
            assert!(e.contains(&format!("invalid parameter \"{bad}\"")), "{e}");
        }
    }

    #[test]
    fn keepalive_min_pick_first_and_connect_race() {
        use super::super::testutil::{err, try_build};
        let (c, _) = try_build(
            "events {} http { upstream u { server 127.0.0.1:1; server 127.0.0.1:2; \
             keepalive_min 4; pick_first warm=2 revert; } \
             server { listen 127.0.0.1:1; proxy_connect_race 150ms; \
             location /off { proxy_connect_race off; } } } \
             stream { upstream s { pick_first; server 127.0.0.1:3; } \
             server { listen 127.0.0.1:2; proxy_pass s; proxy_connect_race 50ms; } }",
        )
        .expect("config");
        let h = c.http.expect("http");
        let u = &h.upstreams.list[0];
        assert_eq!(u.keepalive.min, 4);
        assert!(matches!(
            u.balancer,
            super::Balancer::PickFirst {
                warm: 2,
                revert: true
            }
        ));
        assert_eq!(
            h.servers[0].conf.proxy_connect_race,
            Some(Duration::from_millis(150))
        );
        assert_eq!(h.servers[0].locations[0].conf.proxy_connect_race, None);
        let st = c.stream.expect("stream");
        assert_eq!(
            st.servers[0].proxy_connect_race,
            Some(Duration::from_millis(50))
        );
        for (text, want) in [
            (
                "keepalive_min x;",
                "invalid value \"x\" in \"keepalive_min\" directive",
            ),
            ("keepalive_min 2000;", "invalid value \"2000\""),
            (
                "keepalive_min 1; keepalive_min 2;",
                "\"keepalive_min\" directive is duplicate",
            ),
            ("pick_first warm=x;", "invalid parameter \"warm=x\""),
            ("pick_first sticky;", "invalid parameter \"sticky\""),
            (
                "pick_first; server 127.0.0.1:3 backup;",
                "does not support parameter \"backup\"",
            ),
        ] {
            let e = err(&format!(
                "events {{}} http {{ upstream u {{ server 127.0.0.1:1; {text} }} }}"
            ));
            assert!(e.contains(want), "{text}: {e}");
        }
        // The keep-alive directives are HTTP's, as in nginx.
        for d in ["keepalive 2", "keepalive_min 2", "keepalive_time 1s"] {
            let e = err(&format!(
                "events {{}} stream {{ upstream s {{ server 127.0.0.1:1; {d}; }} }}"
            ));
            assert!(e.contains("directive is not allowed here"), "{d}: {e}");
        }
        for bad in ["0", "x"] {
            let e = err(&format!(
                "events {{}} http {{ server {{ proxy_connect_race {bad}; }} }}"
            ));
            assert!(e.contains("\"proxy_connect_race\" directive"), "{e}");
        }
    }
}
