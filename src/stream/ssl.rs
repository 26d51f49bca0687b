//! The stream module's TLS phases, before a session is proxied: the TLS
//! handshake of a `listen ... ssl` address (nginx's ngx_stream_ssl_module:
//! within `ssl_handshake_timeout`, a failure ends the session with status
//! 500, as does a client certificate `ssl_verify_client` refuses), and
//! `ssl_preread` (nginx's ngx_stream_ssl_preread_module: the
//! ClientHello peeked at, within `preread_timeout` and
//! `preread_buffer_size`). The TLS itself is `net::tls` and `net::preread`;
//! the proxying after is `stream::run`'s.

use std::sync::Arc;

use super::Session;
use crate::conf::model::StreamServer;
use crate::conf::model::{ListenAddr, Stream as StreamConf};
use crate::conf::ssl::VerifyClient;
use crate::log::Level;
use crate::net::preread::{Outcome, preread};
use crate::net::stream::Stream;
use crate::net::tls::{ClientAuth, Details, HandshakeError, ServerTls, TlsShared, Verify};

/// A server's rustls configuration, and its client-certificate settings
/// when it asks for certificates.
pub(super) type Config = (ServerTls, Option<Arc<ClientAuth>>);

/// Each stream server's rustls configuration, by its index (None: it has
/// no certificate). Made once per worker, without ALPN: a stream server
/// negotiates no protocol, it passes bytes on.
pub(super) fn configs(stream: &StreamConf, shared: &TlsShared) -> Vec<Option<Config>> {
    stream
        .servers
        .iter()
        .map(|s| {
            if s.ssl.certs.is_empty() {
                return None;
            }
            let alpn: Vec<&[u8]> = s.more.ssl_alpn.iter().map(|p| p.as_bytes()).collect();
            match crate::net::tls::server_config(&s.ssl, shared, &alpn) {
                Ok(c) => Some(c),
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
        .collect()
}

/// Whether connections to `addr` (a listener of `server`) speak TLS.
pub(super) fn is_ssl(server: &StreamServer, addr: &ListenAddr) -> bool {
    listen_has(server, addr, |l| l.ssl)
}

/// Whether a `listen` of `server` for `addr` (or its port, bound as a
/// wildcard) has a parameter.
pub(super) fn listen_has(
    server: &StreamServer,
    addr: &ListenAddr,
    has: impl Fn(&crate::conf::model::Listen) -> bool,
) -> bool {
    let port = |a: &ListenAddr| match a {
        ListenAddr::Inet(a) => Some(a.port()),
        ListenAddr::Unix(_) | ListenAddr::Udp(_) => None,
    };
    server.listen.iter().any(|l| {
        has(l) && (&l.addr == addr || (port(&l.addr).is_some() && port(&l.addr) == port(addr)))
    })
}

/// The server side of the handshake, within `ssl_handshake_timeout`. None
/// (logged, status 500 as nginx) when it did not complete.
pub(super) async fn handshake(
    client: Stream,
    s: &mut Session,
    conf: &StreamServer,
    config: Option<&Config>,
) -> Option<Stream> {
    let Stream::Tcp(tcp) = client else {
        return Some(client);
    };
    let mut auth = None;
    let accept = crate::net::tls::accept(tcp, |_| {
        if conf.ssl.reject_handshake {
            return Err(HandshakeError::Rejected);
        }
        let (c, a) = config.ok_or(HandshakeError::NoCertificate)?;
        auth = a.clone();
        Ok(c)
    });
    let why = match tokio::time::timeout(conf.ssl.handshake_timeout, accept).await {
        Ok(Ok(t)) => {
            let details = t.details(auth.as_deref());
            let problem = client_cert_problem(&details, conf.ssl.verify_client);
            s.tls = Some(Box::new(details));
            if let Some(why) = problem {
                crate::log_conn!(
                    Level::Info,
                    s.number,
                    "{} while SSL handshaking{}",
                    why,
                    s.short_context()
                );
                s.status = 500;
                return None;
            }
            return Some(Stream::Tls(Box::new(t)));
        }
        Ok(Err(e)) => e,
        Err(_) => {
            crate::log_conn!(
                Level::Info,
                s.number,
                "client timed out (110: Connection timed out) while SSL handshaking{}",
                s.short_context()
            );
            s.status = 500;
            return None;
        }
    };
    // A server without a certificate is the configuration's fault (nginx's
    // [error]); the rest the client's.
    let level = match why {
        HandshakeError::NoCertificate => Level::Error,
        _ => Level::Info,
    };
    crate::log_conn!(
        level,
        s.number,
        "{} while SSL handshaking{}",
        why,
        s.short_context()
    );
    s.status = 500;
    None
}

/// `ssl_verify_client` after the handshake, as nginx's stream module
/// checks it: a certificate that did not verify (unless `optional_no_ca`
/// lets its unknown issuer through), or none when one is required, ends
/// the session (there is no HTTP answer to give). Its log words.
fn client_cert_problem(t: &Details, mode: VerifyClient) -> Option<String> {
    match &t.verify {
        _ if mode == VerifyClient::Off => None,
        Verify::Failed(code, why)
            if !(mode == VerifyClient::OptionalNoCa && t.verify.no_ca_only()) =>
        {
            Some(format!(
                "client SSL certificate verify error: ({code}:{why})"
            ))
        }
        Verify::None if mode == VerifyClient::On && t.client_cert.is_none() => {
            Some("client sent no required SSL certificate".into())
        }
        _ => None,
    }
}

/// `ssl_preread`: what the ClientHello says goes into the session's
/// variables. False (status set, as nginx) when the session ends here: the
/// client closed or the time ran out (200), or the buffer filled (400).
pub(super) async fn read_hello(client: &Stream, s: &mut Session, conf: &StreamServer) -> bool {
    // nginx's preread variables are found (empty or not) once it took
    // what came for a ClientHello: not for a client that sent nothing or
    // something that is no TLS.
    match preread(client, conf.preread_buffer_size, conf.preread_timeout).await {
        Outcome::Done(h, seen) => {
            s.prereading = h.is_some();
            s.preread = h;
            s.preread_len = seen as u64;
            true
        }
        Outcome::Closed => {
            s.status = 200;
            false
        }
        Outcome::TimedOut => {
            s.prereading = true;
            s.status = 200;
            false
        }
        Outcome::Full => {
            s.prereading = true;
            crate::log_conn!(
                Level::Error,
                s.number,
                "preread buffer full while prereading client data{}",
                s.short_context()
            );
            s.status = 400;
            false
        }
    }
}
