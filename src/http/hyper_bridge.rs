//! TEMPORARY, until the client-facing side is our own HTTP/1 engine too
//! (then this file goes): hyper's server keeps a request's header-name case
//! in a map only hyper can read, and writes a response's names in their case
//! only from such a map. The upstream side now reads and writes with
//! `h1::head::Names`; this translates between the two by letting hyper
//! itself write or parse a head on an in-memory pipe.

use std::cell::RefCell;
use std::collections::HashMap;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Extensions, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::h1::head::Names;

/// Distinct sets of upstream names kept, per worker thread.
const KEEP: usize = 256;

thread_local! {
    static CASES: RefCell<HashMap<Vec<Bytes>, Extensions>> = RefCell::new(HashMap::new());
}

/// Serves one exchange on `server`: reads a request head, writes `answer`
/// (if any), and returns the head read. Never ends after answering, so that
/// the caller's other branch decides.
async fn serve(server: &mut DuplexStream, answer: Option<&[u8]>) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match server.read(&mut buf).await {
            Ok(0) | Err(_) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    match answer {
        Some(a) => {
            let _ = server.write_all(a).await;
            std::future::pending().await
        }
        None => seen,
    }
}

/// The client's header names in the case it sent them, recovered from
/// hyper's map in the request's extensions. None when only names sluice
/// writes itself came (nothing to recover).
pub(crate) async fn request_names(ext: &Extensions, headers: &HeaderMap) -> Option<Names> {
    let own = |n: &http::HeaderName| {
        n == http::header::HOST
            || n == http::header::CONNECTION
            || n == http::header::CONTENT_LENGTH
    };
    if headers.keys().all(own) {
        return None;
    }
    let (client, mut server) = tokio::io::duplex(64 * 1024);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(client))
        .await
        .ok()?;
    let mut req = Request::new(Empty::new());
    *req.headers_mut() = headers.clone();
    *req.extensions_mut() = ext.clone();
    let head = tokio::select! {
        h = serve(&mut server, None) => h,
        _ = conn => return None,
        _ = sender.send_request(req) => return None,
    };
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Request::new(&mut slots);
    parsed.parse(&head).ok()?;
    Some(Names(
        parsed
            .headers
            .iter()
            .map(|h| Bytes::copy_from_slice(h.name.as_bytes()))
            .collect(),
    ))
}

/// hyper's extensions that make its server write a proxied response's
/// names in the upstream's case and its reason phrase as the upstream's.
/// Made once per distinct set of names.
pub(crate) async fn response_ext(names: &Names, reason: &Bytes, status: StatusCode) -> Extensions {
    let mut ext = CASES
        .with(|c| c.borrow().get(&names.0).cloned())
        .unwrap_or_default();
    if ext.is_empty() && !names.0.is_empty() {
        if let Some(made) = case_map(names).await {
            CASES.with(|c| {
                let mut c = c.borrow_mut();
                if c.len() >= KEEP {
                    c.clear();
                }
                c.insert(names.0.clone(), made.clone());
            });
            ext = made;
        }
    }
    if status.canonical_reason().map(str::as_bytes) != Some(reason.as_ref()) {
        if let Ok(r) = hyper::ext::ReasonPhrase::try_from(reason.clone()) {
            ext.insert(r);
        }
    }
    ext
}

/// Parses, with hyper, a response naming `names`: its extensions hold
/// hyper's case map.
async fn case_map(names: &Names) -> Option<Extensions> {
    let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
    for n in &names.0 {
        if n.eq_ignore_ascii_case(b"transfer-encoding") {
            continue;
        }
        text.extend_from_slice(n);
        if n.eq_ignore_ascii_case(b"content-length") {
            text.extend_from_slice(b": 0\r\n");
        } else {
            text.extend_from_slice(b": x\r\n");
        }
    }
    text.extend_from_slice(b"\r\n");
    let (client, mut server) = tokio::io::duplex(64 * 1024);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(client))
        .await
        .ok()?;
    tokio::select! {
        _ = serve(&mut server, Some(&text)) => None,
        _ = conn => None,
        r = sender.send_request(Request::new(Empty::new())) => r.ok().map(|r| r.extensions().clone()),
    }
}
