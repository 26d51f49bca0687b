//! The HTTP server of a worker: accepts on the inherited listeners, serves
//! HTTP/1.0 and 1.1 on its own codec (`crate::h1`) and HTTP/2 on the `h2`
//! crate (`h2.rs`), routes each request to a server and location
//! and runs its handler. Shutdown is driven by a `Phase` watch the worker
//! sets from signals: graceful (stop accepting, close idle connections, let
//! requests finish) or fast. Called by `process::worker` only. Here: the
//! types both halves share; `conn.rs` is a connection's life (accept, keep-
//! alive, parking, drain), `pipeline.rs` a request's (route, handle, finish).

pub mod access;
mod access_phase;
mod api_write;
mod auth_basic;
mod autoindex;
mod body_filter;
pub mod case;
mod charset;
mod conditional;
mod conn;
mod dashboard;
mod dynamic;
mod expires;
mod fastcgi;
mod framing;
pub mod gzip;
mod gzip_stream;
mod h2;
mod h2_wire;
pub mod htpasswd;
pub(crate) mod inbound;
pub mod keeper;
pub mod limit;
pub mod metrics;
mod mirror;
mod open_file;
mod pipeline;
pub mod proxy;
mod proxy_body;
mod proxy_cookie;
mod proxy_h2;
mod proxy_plan;
mod proxy_protocol;
mod proxy_stream;
mod proxy_temp;
pub mod range;
mod rate;
pub mod realip;
pub mod response;
pub mod router;
pub mod script;
pub mod static_files;
pub mod status;
mod sub_filter;
pub mod sub_match;
mod tls;
mod try_files;
mod tunnel;
pub mod uri;
pub mod vars;
pub mod vars_more;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use http::Response;

use crate::conf::Config;
use crate::upstream::Upstreams;
use response::Body;

pub use conn::serve;
pub(crate) use conn::{InFlight, Io, OnUpgrade};
pub(crate) use pipeline::do_return;

pub use crate::net::accept::{Listener, Phase};

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
    Incoming(inbound::ReqBody),
    /// Read whole already (for `mirror`, whose subrequests get it too).
    Read(crate::upstream::body::Payload),
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

pub(crate) struct Shared {
    cfg: Arc<Config>,
    router: router::Router,
    upstreams: Upstreams,
    /// Connection numbers (`*N` in the error log), shared with the
    /// worker's stream proxy so that no two connections share one.
    next_conn: Arc<AtomicU64>,
    /// Open client connections (tunnels included), for a graceful stop.
    conns: Arc<crate::net::track::Tracker>,
    /// `stub_status` counters, when a location has it.
    stats: Option<Arc<crate::net::stats::Stats>>,
    /// `limit_req_zone` and `limit_conn_zone` zones.
    limits: Arc<crate::net::limit::LimitZones>,
    /// The master's generation number for this configuration.
    generation: u64,
    /// Names looked up for `proxy_pass` with variables.
    dns: crate::upstream::dns::Cache,
    /// The stream block's upstreams, for the API (their state is the zones').
    stream_upstreams: Upstreams,
    /// Told when the API changed a peer of an upstream with a state file
    /// (the master writes it); None: written here.
    saved: Option<Arc<tokio::sync::Notify>>,
    /// Set when a graceful stop began: responses then carry `Connection:
    /// close`, and a connection closes once idle for `drain`.
    draining: std::sync::OnceLock<std::time::Instant>,
    drain: Duration,
    slots: Arc<crate::net::slots::Slots>,
    /// Where connections idle for `conn::PARK_AFTER` wait (None if its epoll
    /// set could not be made: they then wait in their tasks).
    parker: Option<Arc<crate::net::park::Parker<conn::Resume>>>,
    /// The servers' TLS configurations (this worker's).
    tls: tls::Configs,
    /// The tick connections waiting between requests check their
    /// deadlines at.
    idle: crate::net::idle::IdleClock,
    /// TLS client configurations for upstreams (this worker's, with its
    /// sessions).
    upstream_tls: Arc<crate::net::tls_client::Clients>,
}
