//! `proxy_request_buffering off`: the client's body goes upstream as it
//! arrives, after the request head, with the client's `Content-Length` or
//! chunk by chunk (a chunked body, to an HTTP/1.1 upstream). Reading it keeps
//! the rules of a buffered body: `client_body_timeout` between reads,
//! `client_max_body_size`, "100 Continue" at the first read. Called by
//! `proxy::exchange`; whether a failed attempt may be retried is decided
//! there (once any of the request went, it may not: nginx's rule).

use http_body_util::BodyExt;

use super::inbound::ReqBody;
use super::proxy_plan::{body_failed, body_timed_out, over_limit};
use super::vars::Req;
use crate::h1::body::chunk_head;
use crate::upstream::h1conn::{self, H1};

/// A client body still to be sent as it arrives.
pub(super) struct Streamed {
    pub(super) body: ReqBody,
    /// Sent in chunks (the client's was chunked).
    pub(super) chunked: bool,
    /// Body bytes sent upstream so far.
    pub(super) sent: u64,
}

/// Why a streamed body did not all go.
pub(super) enum Broken {
    /// The client's side failed (logged): the status to answer with.
    Client(u16),
    /// Writing to the upstream failed.
    Upstream(h1conn::Error),
}

impl Streamed {
    pub(super) fn new(body: ReqBody, chunked: bool) -> Streamed {
        Streamed {
            body,
            chunked,
            sent: 0,
        }
    }

    /// Reads the body from the client and writes each piece upstream as it
    /// comes (`proxy_send_timeout` between writes), then the last chunk of a
    /// chunked body, with the client's trailer fields (those a trailer may
    /// carry).
    pub(super) async fn send(&mut self, h1: &mut H1, r: &Req) -> Result<(), Broken> {
        let conf = &r.conf;
        let mut total: u64 = 0;
        let mut framed = Vec::new();
        let mut trailers = None;
        loop {
            let next = tokio::time::timeout(conf.client_body_timeout, self.body.frame()).await;
            let frame = match next {
                Err(_) => return Err(Broken::Client(body_timed_out(r))),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(Broken::Client(body_failed(r, &e))),
                Ok(Some(Ok(f))) => f,
            };
            let d = match frame.into_data() {
                Ok(d) => d,
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        trailers = super::proxy_body::trailers_passed(t);
                    }
                    continue;
                }
            };
            if d.is_empty() {
                continue;
            }
            total += d.len() as u64;
            if let Some(status) = over_limit(r, total) {
                return Err(Broken::Client(status));
            }
            let piece: &[u8] = if self.chunked {
                framed.clear();
                chunk_head(d.len(), &mut framed);
                framed.extend_from_slice(&d);
                framed.extend_from_slice(b"\r\n");
                &framed
            } else {
                &d
            };
            h1.write_more(piece, conf.proxy_send_timeout)
                .await
                .map_err(Broken::Upstream)?;
            self.sent += d.len() as u64;
        }
        if self.chunked {
            framed.clear();
            crate::h1::body::last_chunk(trailers.as_ref(), &mut framed);
            h1.write_more(&framed, conf.proxy_send_timeout)
                .await
                .map_err(Broken::Upstream)?;
        }
        Ok(())
    }
}
