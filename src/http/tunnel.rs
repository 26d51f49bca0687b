//! Protocol switches (WebSocket and other `Upgrade`s): after a 101 from the
//! upstream, the upstream connection's socket (and what it sent past the
//! head) is one end, the client's connection, handed over once the 101
//! went out, the other; bytes are copied both ways. Called by the proxy handler.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::header;
use http::response::Parts;
use tokio::io::AsyncWriteExt;

use super::response;
use super::vars::Req;
use super::{Io, Reply, Tracked};
use crate::log::Level;
use crate::upstream::h1conn::Upgraded;
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers};

/// The client side of a switch: the connection, once the 101 went out.
pub(crate) type ClientUpgrade = super::OnUpgrade;

/// A 101 from the upstream: answer 101 to the client and, once it has
/// switched, copy bytes both ways until either closes or stays silent for
/// `proxy_read_timeout`. The tunnel counts as an active connection for a
/// graceful stop.
pub(crate) fn switch_protocols(
    r: &mut Req,
    mut parts: Parts,
    upstream: Upgraded,
    client_upgrade: Option<ClientUpgrade>,
    peers: Arc<Peers>,
    id: PeerId,
    tracked: Tracked,
) -> Reply {
    let idle = r.conf.proxy_read_timeout;
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
    let number = r.conn.number;
    tokio::spawn(async move {
        let _tracked = tracked;
        let client = match client_up.get().await.ok_or("the client connection closed") {
            Ok(c) => c,
            Err(e) => {
                crate::log_conn!(Level::Info, number, "upgrade failed: {}", e);
                peers.release(id, Outcome::Ok, now_ms());
                return;
            }
        };
        relay(client, upstream, idle).await;
        peers.release(id, Outcome::Ok, now_ms());
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
