//! The mirror module: for a request whose location has `mirror URI`, one
//! background subrequest to each URI (with the request's method, headers,
//! arguments and, with `mirror_request_body on`, its body, read whole
//! first), answered in full and thrown away. Unlike nginx, the client's
//! request does not wait for them: its response, access log line and
//! keep-alive go on at once. Called by the pipeline's `dispatch`.

use std::sync::Arc;

use http_body_util::BodyExt;

use crate::conf::model::Server;
use crate::upstream::body::Payload;

use super::vars::Req;
use super::{ClientBody, Shared, pipeline};

/// Reads the body when the mirrors get it, starts one subrequest per
/// mirror URI, and gives back the body for the request's own handler.
/// Err: the status to answer with (the body could not be read). A named
/// `dyn Send` future: the subrequests it spawns run the pipeline that
/// calls it, a cycle the compiler cannot see through an opaque type.
pub(super) fn start<'a>(
    shared: &'a Arc<Shared>,
    r: &'a mut Req,
    server: &'a Server,
    body: ClientBody,
) -> Pending<'a, Result<ClientBody, u16>> {
    Box::pin(start_inner(shared, r, server, body))
}

async fn start_inner(
    shared: &Arc<Shared>,
    r: &mut Req,
    server: &Server,
    body: ClientBody,
) -> Result<ClientBody, u16> {
    // Without the body for the mirrors, the handler reads it as usual.
    let (payload, rest) = if r.conf.mirror_request_body {
        let p = super::proxy_plan::read_body(r, body).await?;
        if let Payload::Mem(b) = &p {
            r.request_body = Some(b.clone());
        }
        (Some(p.clone()), ClientBody::Read(p))
    } else {
        (None, body)
    };
    // The task finds the server again by its place: it outlives `server`'s
    // borrow, not the configuration `shared` holds.
    let index = shared
        .cfg
        .http
        .as_ref()
        .and_then(|h| h.servers.iter().position(|s| std::ptr::eq(s, server)));
    if let Some(index) = index {
        for uri in r.conf.mirror.iter() {
            let mut sub = pipeline::subrequest(r, r.method.clone());
            let body = match &payload {
                Some(p) => ClientBody::Read(p.clone()),
                None => ClientBody::Empty,
            };
            let shared = shared.clone();
            let uri = uri.clone();
            // Made in its box: a subrequest runs the whole pipeline, and a
            // task's future is copied whole at its spawn and its end.
            tokio::spawn(crate::net::boxed::boxed(|| async move {
                let Some(server) = shared.cfg.http.as_ref().and_then(|h| h.servers.get(index))
                else {
                    return;
                };
                run(&shared, &mut sub, server, &uri, body).await;
            }));
        }
    }
    Ok(rest)
}

type Pending<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// One mirror subrequest: the URI's location (its arguments the
/// request's, as nginx passes them), its handler, its whole response read
/// and dropped (so an upstream connection can go back to its pool).
async fn run(shared: &Arc<Shared>, sub: &mut Req, server: &Server, uri: &str, body: ClientBody) {
    let args = sub.args.clone();
    let Ok(named) = pipeline::redirect_to(sub, server, uri) else {
        return;
    };
    if !uri.contains('?') {
        sub.args = args;
    }
    // Boxed as `dyn Send`: the subrequest's future holds the pipeline's,
    // which can spawn this one; naming the trait object ends the cycle
    // the compiler would otherwise have to see through.
    let reply: Pending<'_, _> =
        Box::pin(pipeline::dispatch(shared, sub, server, named, body, None));
    let Ok(reply) = reply.await else { return };
    let resp: Pending<'_, _> = Box::pin(pipeline::finish(shared, sub, server, reply));
    let Ok(resp) = resp.await else {
        return;
    };
    let _ = resp.into_body().collect().await;
}
