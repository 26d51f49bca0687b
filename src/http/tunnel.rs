//! Protocol switches (WebSocket and other `Upgrade`s): after a 101 from the
//! upstream both sides are handed over by hyper and bytes are copied both
//! ways. Called by the proxy handler.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Response;
use hyper::body::Incoming;
use hyper::header;
use hyper_util::rt::TokioIo;

use super::response;
use super::vars::Req;
use super::{Reply, Tracked};
use crate::log::Level;
use crate::upstream::peers::now_ms;
use crate::upstream::{Outcome, PeerId, Peers};

/// A 101 from the upstream: answer 101 to the client and, once both sides
/// have switched, copy bytes both ways until either closes or stays silent
/// for `proxy_read_timeout`. The tunnel counts as an active connection for a
/// graceful stop.
pub(crate) fn switch_protocols(
    r: &mut Req,
    resp: Response<Incoming>,
    client_upgrade: Option<super::OnUpgrade>,
    peers: Arc<Peers>,
    id: PeerId,
    idle: Duration,
    tracked: Tracked,
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
    let (mut parts, body) = resp.into_parts();
    let upstream_up = hyper::upgrade::on(Response::from_parts(parts.clone(), body));
    parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
    parts.extensions.insert(super::case::Proxied);
    parts.headers.remove(header::TRANSFER_ENCODING);
    parts.headers.remove(header::SERVER);
    parts.headers.insert(
        header::SERVER,
        response::server_header(r.conf.server_tokens),
    );
    let number = r.conn.number;
    tokio::spawn(async move {
        let _tracked = tracked;
        let client_up = async {
            client_up
                .get()
                .await
                .ok_or_else(|| std::io::Error::other("the client connection closed"))
        };
        let upstream_up = async { upstream_up.await.map_err(std::io::Error::other) };
        let (client, upstream) = match tokio::try_join!(client_up, upstream_up) {
            Ok(pair) => pair,
            Err(e) => {
                crate::log_conn!(Level::Info, number, "upgrade failed: {}", e);
                peers.release(id, Outcome::Ok, now_ms());
                return;
            }
        };
        crate::net::copy::both(client, TokioIo::new(upstream), idle, true).await;
        peers.release(id, Outcome::Ok, now_ms());
    });
    Reply::Full(Response::from_parts(parts, response::full(Bytes::new())))
}
