//! Header-name case for the responses sluice writes itself. hyper writes a
//! name in its original case only when the response carries hyper's private
//! case map, which only its parser makes; so each worker parses, once, a
//! response made of the names sluice writes (`ETag`, `add_header` names as
//! configured, ...) and lends that map to its own responses. Proxied
//! responses keep the upstream's map.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::http::Extensions;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conf::model::{Http, LocConf, Location};

/// Marks a response whose header names come from the upstream.
#[derive(Clone, Copy)]
pub struct Proxied;

/// The names sluice writes, in nginx's spelling.
const OWN: [&str; 10] = [
    "Server",
    "Content-Type",
    "Content-Length",
    "Last-Modified",
    "ETag",
    "Accept-Ranges",
    "Content-Range",
    "Location",
    "Connection",
    "Keep-Alive",
];

fn location_confs<'a>(l: &'a Location, out: &mut Vec<&'a Arc<LocConf>>) {
    out.push(&l.conf);
    for n in &l.locations {
        location_confs(n, out);
    }
}

/// Every location's (and server's) settings.
pub fn all_confs(http: &Http) -> Vec<&Arc<LocConf>> {
    let mut out = Vec::new();
    for s in &http.servers {
        out.push(&s.conf);
        for l in &s.locations {
            location_confs(l, &mut out);
        }
    }
    out
}

/// Parses a response naming every header sluice writes and returns its
/// extensions (hyper's case map), or None if that fails.
pub async fn template(http: Option<&Http>) -> Option<Extensions> {
    let mut names: Vec<String> = OWN.iter().map(|s| s.to_string()).collect();
    if let Some(h) = http {
        for c in all_confs(h) {
            for a in &c.add_header {
                if !names.iter().any(|n| n.eq_ignore_ascii_case(&a.name)) {
                    names.push(a.name.clone());
                }
            }
        }
    }
    let mut text = String::from("HTTP/1.1 200 OK\r\n");
    for n in &names {
        if n.eq_ignore_ascii_case("content-length") {
            text.push_str(&format!("{n}: 0\r\n"));
        } else {
            text.push_str(&format!("{n}: x\r\n"));
        }
    }
    text.push_str("\r\n");
    let (client, mut server) = tokio::io::duplex(64 * 1024);
    // The answer goes out once the request has come: hyper refuses a
    // response that arrives before its request.
    let answer = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = server.write_all(text.as_bytes()).await;
        // Keep our end open until the client has read the answer.
        let _ = server.read(&mut buf).await;
    });
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(client))
        .await
        .ok()?;
    let drive = tokio::spawn(conn);
    let resp = sender
        .send_request(hyper::Request::new(Empty::new()))
        .await
        .ok();
    drive.abort();
    answer.abort();
    resp.map(|r| r.extensions().clone())
}
