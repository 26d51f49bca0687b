//! `proxy_pass` with variables: the URL is evaluated per request; its host
//! names an `upstream` block, or is an address, or is looked up with the
//! location's `resolver` (through the worker's cache). The request then goes
//! through the proxy like any other, to a round robin made for it. Called by
//! the dispatcher.

use std::net::IpAddr;
use std::sync::Arc;

use super::vars::Req;
use super::{ClientBody, Reply, proxy};
use crate::conf::model::ProxyPass;
use crate::conf::vars::Template;
use crate::log::Level;
use crate::upstream::UpstreamRt;
use crate::upstream::dns::strerror;

pub(crate) async fn run(
    r: &mut Req,
    url_tpl: &Template,
    location_id: usize,
    body: ClientBody,
    upgrade: Option<super::OnUpgrade>,
    shared: &Arc<super::Shared>,
) -> Reply {
    let url = r.eval(url_tpl);
    // fastcgi_pass: an address, an upstream's name or unix:PATH, read as
    // proxy_pass reads what follows its scheme.
    let url = if r.conf.fastcgi {
        format!("http://{url}")
    } else {
        url
    };
    let (ssl, rest) = match url.strip_prefix("http://") {
        Some(rest) => (false, Some(rest)),
        None => (true, url.strip_prefix("https://")),
    };
    let Some(rest) = rest else {
        crate::log_conn!(
            Level::Error,
            r.conn.number,
            "invalid URL prefix in \"{}\"{}",
            url,
            r.log_context(None)
        );
        return Reply::Status(500);
    };
    // A unix socket: "unix:/path", or "unix:/path:/uri" (nginx's form).
    if let Some(path) = rest.strip_prefix("unix:") {
        let (path, uri) = match path.find(':') {
            Some(i) => (&path[..i], Some(path[i + 1..].to_string())),
            None => (path, None),
        };
        if path.is_empty() {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "no path in the unix domain socket \"{}\"{}",
                rest,
                r.log_context(None)
            );
            return Reply::Status(500);
        }
        let name = format!("unix:{path}");
        let pp = ProxyPass {
            grpc: false,
            dynamic: true,
            ssl,
            upstream: usize::MAX,
            uri,
            proxy_host: "localhost".into(),
            proxy_port: if ssl { 443 } else { 80 },
            location_prefix: String::new(),
        };
        let peer = crate::conf::model::PeerAddr::Unix(path.into());
        let ups = UpstreamRt::for_peers(&name, &name, 0, vec![peer]);
        if r.conf.proxy_http_version == 20 {
            return super::proxy_h2::run(r, ups, &pp, body, shared).await;
        }
        return proxy::run(r, ups, &pp, location_id, body, upgrade, shared).await;
    }
    let (hostport, uri) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], Some(rest[i..].to_string())),
        None => (rest, None),
    };
    let (host, port) = match crate::conf::values::split_host_port(hostport) {
        Ok(hp) if !hostport.is_empty() => (hp.written, hp.port),
        _ => {
            crate::log_conn!(
                Level::Error,
                r.conn.number,
                "invalid port in upstream \"{}\"{}",
                hostport,
                r.log_context(None)
            );
            return Reply::Status(500);
        }
    };
    let default_port = if ssl { 443 } else { 80 };
    let proxy_host = match port {
        Some(p) if p != default_port => format!("{host}:{p}"),
        _ => host.to_string(),
    };
    let pp = |upstream| ProxyPass {
        grpc: false,
        dynamic: true,
        ssl,
        upstream,
        uri: uri.clone(),
        proxy_host: proxy_host.as_str().into(),
        proxy_port: port.unwrap_or(default_port),
        location_prefix: String::new(),
    };
    // An upstream block of that name (without a port in the URL).
    if port.is_none() {
        let named = shared.cfg.http.as_ref().and_then(|h| {
            h.upstreams
                .iter()
                .position(|u| !u.implicit && u.name.eq_ignore_ascii_case(host))
        });
        if let Some(i) = named {
            if let Some(ups) = shared.upstreams.get(i) {
                let ups = ups.clone();
                if r.conf.proxy_http_version == 20 {
                    return super::proxy_h2::run(r, ups, &pp(i), body, shared).await;
                }
                return proxy::run(r, ups, &pp(i), location_id, body, upgrade, shared).await;
            }
        }
    }
    let port = port.unwrap_or(default_port);
    let addrs: Vec<IpAddr> = match host.trim_start_matches('[').trim_end_matches(']').parse() {
        Ok(ip) => vec![ip],
        Err(_) => {
            // A name a static proxy_pass made an upstream of (same name and
            // port): that one, no lookup (nginx's implicit upstreams).
            let implicit = shared.cfg.http.as_ref().and_then(|h| {
                h.upstreams.iter().position(|u| {
                    u.implicit
                        && matches!(
                            u.servers.first().and_then(|s| s.addrs.first()),
                            Some(crate::conf::model::PeerAddr::Inet(a)) if a.port() == port
                        )
                        && (u.name.eq_ignore_ascii_case(&format!("{host}:{port}"))
                            || (port == default_port && u.name.eq_ignore_ascii_case(host)))
                })
            });
            if let Some(ups) = implicit.and_then(|i| shared.upstreams.get(i).map(|u| (i, u))) {
                let (i, ups) = (ups.0, ups.1.clone());
                if r.conf.proxy_http_version == 20 {
                    return super::proxy_h2::run(r, ups, &pp(i), body, shared).await;
                }
                return proxy::run(r, ups, &pp(i), location_id, body, upgrade, shared).await;
            }
            let Some(resolver) = r.conf.resolver.clone() else {
                crate::log_conn!(
                    Level::Error,
                    r.conn.number,
                    "no resolver defined to resolve {}{}",
                    host,
                    r.log_context(None)
                );
                return Reply::Status(502);
            };
            let resolver = crate::conf::model::Resolver {
                timeout: r.conf.resolver_timeout,
                ..resolver
            };
            match shared.dns.lookup(host, &resolver).await {
                Ok(a) => a,
                Err(code) => {
                    crate::log_conn!(
                        Level::Error,
                        r.conn.number,
                        "{} could not be resolved ({}: {}){}",
                        host,
                        code,
                        strerror(code),
                        r.log_context(None)
                    );
                    return Reply::Status(502);
                }
            }
        }
    };
    let ups = UpstreamRt::for_addresses(hostport, host, port, addrs);
    if r.conf.proxy_http_version == 20 {
        return super::proxy_h2::run(r, ups, &pp(usize::MAX), body, shared).await;
    }
    proxy::run(r, ups, &pp(usize::MAX), location_id, body, upgrade, shared).await
}
