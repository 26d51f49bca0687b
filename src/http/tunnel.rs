//! Protocol switches (WebSocket and other `Upgrade`s): after a 101 from the
//! upstream, the upstream connection's socket (and what it sent past the
//! head) is one end, the client's connection the other; bytes are copied
//! both ways by the client connection's own task once its 101 went out (no
//! task or channel of its own). Made by the proxy handler.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::header;
use http::response::Parts;
use tokio::io::AsyncWriteExt;

use super::response;
use super::vars::Req;
use super::{Io, OnUpgrade, Reply};
use crate::log::Level;
use crate::upstream::h1conn::Upgraded;
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers};

/// The upstream's side of a switch, for the client's connection to relay
/// once its 101 went out. It holds the peer until dropped.
pub(crate) struct Switch {
    upstream: Option<Upgraded>,
    idle: Duration,
    peers: Arc<Peers>,
    id: PeerId,
    number: u64,
}

impl Switch {
    /// Copies both ways until either side closes or stays silent for
    /// `proxy_read_timeout`.
    pub(crate) async fn relay(mut self, client: impl Io) {
        if let Some(upstream) = self.upstream.take() {
            relay(client, upstream, self.idle).await;
        }
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        if self.upstream.is_some() {
            crate::log_conn!(
                Level::Info,
                self.number,
                "upgrade failed: the client connection closed"
            );
        }
        self.peers.release(self.id, Outcome::Ok, now_ms());
    }
}

/// A 101 from the upstream: answer 101 to the client, and leave the
/// upstream's side for its connection to relay.
pub(crate) fn switch_protocols(
    r: &mut Req,
    mut parts: Parts,
    upstream: Upgraded,
    client_upgrade: Option<OnUpgrade>,
    peers: Arc<Peers>,
    id: PeerId,
) -> Reply {
    let Some(client_up) = client_upgrade else {
        crate::log_conn!(
            Level::Error,
            r.conn.number,
            "upstream sent \"101 Switching Protocols\" but the client connection cannot be upgraded while reading response header from upstream{}",
            r.log_context(None)
        );
        peers.release(id, Outcome::Ok, now_ms());
        return Reply::Status(502);
    };
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::SERVER);
    parts.headers.insert(
        header::SERVER,
        response::server_header(r.conf.server_tokens),
    );
    client_up.set(Switch {
        upstream: Some(upstream),
        idle: r.conf.proxy_read_timeout,
        peers,
        id,
        number: r.conn.number,
    });
    Reply::Full(Response::from_parts(parts, response::full(Bytes::new())))
}

/// Copies both ways; what the upstream sent right after its head goes to
/// the client first.
async fn relay(mut client: impl Io, upstream: Upgraded, idle: Duration) {
    if upstream.read_ahead.is_empty() || client.write_all(&upstream.read_ahead).await.is_ok() {
        crate::net::copy::both(client, upstream.io, idle, true).await;
    }
}
