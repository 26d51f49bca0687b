//! HTTPS listeners: a connection to a TLS address first shows its first
//! byte (plain HTTP there is answered 497, as nginx), then does its
//! handshake within the default server's `ssl_handshake_timeout`, the
//! certificate being that of the server its SNI names (the router's lookup,
//! as for `Host`); then it is served as any connection, over `Stream::Tls`.
//! Called from `conn.rs`'s accept loop for listeners where TLS is possible.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::conf::model::{Http, ListenAddr};
use crate::log::Level;
use crate::net::stream::Stream;
use crate::net::tls::ServerTls;

use super::conn::{Open, open_conn, serve_conn};
use super::vars::{ConnInfo, ConnTls};
use super::{Phase, Shared};

/// A server's rustls configuration, and its client-certificate settings
/// when it asks for certificates; the same configuration offering ALPN
/// `h2` before `http/1.1` (same sessions and tickets), for addresses where
/// HTTP/2 is on.
type Config = (
    ServerTls,
    Option<Arc<crate::net::tls::ClientAuth>>,
    ServerTls,
);

/// Each server's rustls configuration, by its index in `http.servers`
/// (None: it has no certificate). Made once per worker.
pub(super) struct Configs(Vec<Option<Config>>);

impl Configs {
    pub(super) fn new(http: Option<&Http>, shared: &crate::net::tls::TlsShared) -> Configs {
        let Some(http) = http else {
            return Configs(Vec::new());
        };
        Configs(
            http.servers
                .iter()
                .map(|s| {
                    if s.ssl.certs.is_empty() {
                        return None;
                    }
                    match crate::net::tls::server_config(&s.ssl, shared, &[b"http/1.1"]) {
                        Ok((c, auth)) => {
                            let h2 = c.with_alpn(&[b"h2", b"http/1.1"]);
                            Some((c, auth, h2))
                        }
                        Err(e) => {
                            crate::log!(
                                Level::Alert,
                                "cannot set up TLS for the server in {}: {}",
                                s.src,
                                e
                            );
                            None
                        }
                    }
                })
                .collect(),
        )
    }
}

/// Serves a connection accepted on a socket where TLS is possible.
pub(super) async fn serve_conn_tls(
    io: Stream,
    mut info: ConnInfo,
    listen: Arc<ListenAddr>,
    shared: Arc<Shared>,
    open: Open,
    phase: watch::Receiver<Phase>,
) {
    let Some(http) = shared.cfg.http.as_ref() else {
        return;
    };
    let ssl = shared.router.ssl(&listen, info.local);
    let tcp = match io {
        Stream::Tcp(t) if ssl => t,
        // An address of that port without `ssl`.
        io => return start(io, info, listen, &shared, open, phase).await,
    };
    let limit = shared
        .router
        .server(http, &listen, info.local, None)
        .map_or(Duration::from_secs(60), |s| s.ssl.handshake_timeout);
    let number = info.number;
    let context = |info: &ConnInfo| {
        format!(
            ", client: {}, server: {}",
            info.remote
                .map_or_else(|| "unix:".to_string(), |a| a.ip().to_string()),
            info.local
                .map_or_else(|| info.listen_text.to_string(), |a| a.to_string())
        )
    };
    let mut phase_hs = phase.clone();
    // Boxed: the handshake's state (rustls' connection, the peek) is most
    // of 5 kB, and inline it would stay in the connection's task for its
    // whole life.
    let handshake = Box::pin(async {
        // nginx's test: a first byte that starts no TLS record is plain HTTP.
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(1) => {}
            _ => return None,
        }
        if !crate::net::tls::looks_like_tls(first[0]) {
            return Some(Err(tcp));
        }
        let local = info.local;
        let mut auth = None;
        let r = crate::net::tls::accept(tcp, |sni| {
            use crate::net::tls::HandshakeError;
            let name = sni.map(str::to_ascii_lowercase);
            let i = shared
                .router
                .server_index(http, &listen, local, name.as_deref())
                .ok_or(HandshakeError::NoCertificate)?;
            if http.servers.get(i).is_some_and(|s| s.ssl.reject_handshake) {
                return Err(HandshakeError::Rejected);
            }
            let (config, a, h2) = shared
                .tls
                .0
                .get(i)
                .and_then(Option::as_ref)
                .ok_or(HandshakeError::NoCertificate)?;
            auth = a.clone();
            // nginx's ALPN choice: h2 when the address or the server SNI
            // chose has HTTP/2 on.
            if shared.router.http2(&listen, local, http.servers.get(i)) {
                return Ok(h2);
            }
            Ok(config)
        })
        .await;
        Some(Ok(r.map(|t| (t, auth))))
    });
    let outcome = tokio::select! {
        r = crate::net::clock::timeout(limit, handshake) => r,
        // The worker stops: a handshake is not worth waiting for.
        () = crate::net::accept::running(&mut phase_hs) => return,
    };
    let tls = match outcome {
        Err(_) => {
            crate::log_conn!(
                Level::Info,
                number,
                "client timed out (110: Connection timed out) while SSL handshaking{}",
                context(&info)
            );
            return;
        }
        // Closed before its first byte.
        Ok(None) => return,
        Ok(Some(Err(tcp))) => {
            info.tls = ConnTls::Plain;
            return start(Stream::Tcp(tcp), info, listen, &shared, open, phase).await;
        }
        Ok(Some(Ok(Err(e)))) => {
            // A server on the address without a certificate is the
            // configuration's fault (nginx's [error]); the rest the client's.
            let level = match e {
                crate::net::tls::HandshakeError::NoCertificate => Level::Error,
                _ => Level::Info,
            };
            crate::log_conn!(
                level,
                number,
                "{} while SSL handshaking{}",
                e,
                context(&info)
            );
            return;
        }
        Ok(Some(Ok(Ok(t)))) => t,
    };
    let (tls, auth) = tls;
    info.tls = ConnTls::Tls(Box::new(tls.details(auth.as_deref())));
    if tls.alpn_h2() {
        let ctx = super::conn::conn_ctx(info, listen, &shared, open);
        crate::net::boxed::boxed(|| super::h2::serve(Stream::Tls(Box::new(tls)), ctx, phase)).await;
        return;
    }
    start(
        Stream::Tls(Box::new(tls)),
        info,
        listen,
        &shared,
        open,
        phase,
    )
    .await;
}

async fn start(
    io: Stream,
    info: ConnInfo,
    listen: Arc<ListenAddr>,
    shared: &Arc<Shared>,
    open: Open,
    phase: watch::Receiver<Phase>,
) {
    let (ctx, inb) = open_conn(io, info, listen, shared, open);
    serve_conn(ctx, inb, phase, 0, crate::net::clock::now()).await;
}
