//! The HTTP server of a worker: accepts on the inherited listeners, serves
//! HTTP/1.0 and 1.1 with hyper, routes each request to a server and location
//! and runs its handler. Shutdown is driven by a `Phase` watch the worker
//! sets from signals: graceful (stop accepting, close idle connections, let
//! requests finish) or fast. Called by `process::worker` only. Here: the
//! types both halves share; `conn.rs` is a connection's life (accept, keep-
//! alive, parking, drain), `pipeline.rs` a request's (route, handle, finish).

pub mod access;
pub mod case;
pub(crate) mod client_io;
mod conn;
mod dynamic;
mod framing;
mod hyper_bridge;
pub mod keeper;
mod open_file;
mod pipeline;
pub mod proxy;
mod proxy_body;
mod proxy_plan;
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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use hyper::Response;
use hyper::body::Incoming;
use tokio::sync::Notify;

use crate::conf::Config;
use crate::upstream::Upstreams;
use response::Body;

pub use conn::serve;
pub(crate) use conn::{Idle, InFlight, Io, Tracked};
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
    slots: Arc<crate::net::slots::Slots>,
}
