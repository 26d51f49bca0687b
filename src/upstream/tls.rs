//! TLS to an upstream peer on a connected socket, as both proxies make it
//! (`proxy_pass https://` in http, `proxy_ssl on` in stream): the settings
//! of a location or stream server, the name its handshakes use, and the
//! handshake within a time limit, whose failure is a typed [`Failure`] the
//! attempt engine retries as `proxy_next_upstream` says. The rustls side
//! (configs, verification, the handshake itself) is `net::tls_client`.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::ServerName;

use super::attempt::{Failure, Kind};
use crate::conf::model::PeerAddr;
use crate::conf::proxy_ssl::ProxySsl;
use crate::net::stream::Stream;
use crate::net::tls_client::{self, Clients};

/// TLS to the upstream: the settings, the worker's client configurations,
/// and the name the handshakes use.
#[derive(Clone)]
pub struct Tls {
    pub clients: Arc<Clients>,
    pub ssl: Arc<ProxySsl>,
    /// `proxy_ssl_name`'s value without its port.
    pub name: Arc<str>,
    /// As rustls takes it (None: neither a host name nor an address).
    pub server_name: Option<ServerName<'static>>,
    /// The keep-alive cache's key: the same settings and name make the
    /// same handshake (never 0, which is plain).
    pub key: u64,
}

impl Tls {
    /// `name`: `proxy_ssl_name`'s value.
    pub fn new(clients: Arc<Clients>, ssl: Arc<ProxySsl>, name: &str) -> Tls {
        let server_name = tls_client::server_name(name);
        let name: Arc<str> = match &server_name {
            Some(n) => n.to_str().into(),
            None => name.into(),
        };
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(ssl.id, &*name), &mut h);
        Tls {
            key: std::hash::Hasher::finish(&h) | 1,
            clients,
            ssl,
            name,
            server_name,
        }
    }

    /// The handshake on a connected socket, within `timeout`.
    pub async fn handshake(
        &self,
        addr: &PeerAddr,
        s: Stream,
        timeout: Duration,
    ) -> Result<Stream, Failure> {
        let Stream::Tcp(tcp) = s else {
            return Err(Failure::upstream(
                Kind::Error,
                "SSL to upstream unix sockets is not supported",
            ));
        };
        let config = self.clients.config(&self.ssl, addr).map_err(|e| {
            Failure::upstream(Kind::Error, format!("SSL_CTX_new() failed (SSL: {e})"))
        })?;
        // A name that is no name: the peer's address stands in (no SNI).
        let name = match (&self.server_name, addr) {
            (Some(n), _) => n.clone(),
            (None, PeerAddr::Inet(a)) => ServerName::IpAddress(a.ip().into()),
            (None, PeerAddr::Unix(_)) => {
                ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
            }
        };
        match tokio::time::timeout(timeout, tls_client::connect(tcp, config, name)).await {
            Err(_) => Err(Failure::handshake_timeout()),
            Ok(Err(e)) => Err(Failure::handshake(&e, &self.name)),
            Ok(Ok(t)) => Ok(Stream::Tls(Box::new(t))),
        }
    }
}
