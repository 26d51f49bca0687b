//! `listen ... proxy_protocol` for HTTP: the PROXY protocol header is read
//! first, within the default server's `client_header_timeout` (nginx has no
//! `proxy_protocol_timeout` in http), before the TLS handshake on an `ssl`
//! address; a broken header, or none in time, closes the connection with
//! nginx's log line. The parsing is `net::proxy_protocol`'s; what follows
//! is `tls.rs`'s or `conn.rs`'s. Called from the accept loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::conf::model::ListenAddr;
use crate::log::Level;
use crate::net::proxy_protocol::{Outcome, read};
use crate::net::stream::Stream;

use super::conn::{Open, open_conn, serve_conn};
use super::vars::ConnInfo;
use super::{Phase, Shared};

/// Serves a connection accepted on a socket where a PROXY protocol header
/// may be expected: the header (when its address wants one), then TLS
/// (`tls`: the socket may speak it) or plain HTTP.
pub(super) async fn serve(
    mut io: Stream,
    mut info: ConnInfo,
    listen: Arc<ListenAddr>,
    shared: Arc<Shared>,
    open: Open,
    phase: watch::Receiver<Phase>,
    tls: bool,
) {
    if shared.router.proxy_protocol(&listen, info.local) {
        let limit = shared
            .cfg
            .http
            .as_ref()
            .and_then(|h| shared.router.server(h, &listen, info.local, None))
            .map_or(Duration::from_secs(60), |s| s.conf.client_header_timeout);
        let mut stopping = phase.clone();
        let outcome = tokio::select! {
            o = read(&mut io, limit) => o,
            // The worker stops: a header is not worth waiting for.
            () = crate::net::accept::running(&mut stopping) => return,
        };
        match outcome {
            Outcome::Done(addrs) => info.proxy = addrs.map(Box::new),
            Outcome::Broken(b) => {
                if b.logged() {
                    crate::log_conn!(
                        Level::Error,
                        info.number,
                        "{} while reading PROXY protocol{}",
                        b,
                        context(&info)
                    );
                }
                return;
            }
            Outcome::TimedOut => {
                crate::log_conn!(
                    Level::Info,
                    info.number,
                    "client timed out (110: Connection timed out) while reading PROXY protocol{}",
                    context(&info)
                );
                return;
            }
            Outcome::Closed => return,
        }
    }
    if tls {
        return super::tls::serve_conn_tls(io, info, listen, shared, open, phase).await;
    }
    let (ctx, inb) = open_conn(io, info, listen, &shared, open);
    serve_conn(ctx, inb, phase, 0, Instant::now()).await;
}

/// nginx's context for a connection without a request.
fn context(info: &ConnInfo) -> String {
    format!(
        ", client: {}, server: {}",
        info.remote
            .map_or_else(|| "unix:".to_string(), |a| a.ip().to_string()),
        info.local
            .map_or_else(|| info.listen_text.to_string(), |a| a.to_string())
    )
}
