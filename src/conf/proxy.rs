//! `upstream` blocks (servers, balancers, keepalive) and `proxy_pass`. Server
//! names are resolved once, at load, through the system resolver, as nginx does
//! for names without `resolve`. `proxy_pass` targets are tied to upstreams after
//! the whole `http` block is read, creating implicit upstreams for host:port.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::build::{
    Args, Builder, HTTP, LOC, Node, Spec, UPS, duplicate, not_here, number, time_arg,
};
use super::model::*;
use super::tree::Directive;
use super::{ConfError, Src, values, vars};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "upstream",
        ctx: HTTP,
        args: Args::Exactly(1),
        block: true,
        set: set_upstream,
    },
    Spec {
        name: "server",
        ctx: UPS,
        args: Args::AtLeast(1),
        block: false,
        set: set_server,
    },
    Spec {
        name: "keepalive",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_keepalive,
    },
    Spec {
        name: "keepalive_min",
        ctx: UPS,
        args: Args::Exactly(1),
        block: false,
        set: set_keepalive_more,
    },
    Spec {
        name: "pick_first",
        ctx: UPS,
        args: Args::Range(0, 2),
        block: false,
        set: set_balancer,
    },
    Spec {
        name: "keepalive_requests",
        ctx: UPS,
        args: Args::Exactly(1),
        block: false,
        set: set_keepalive_more,
    },
    Spec {
        name: "keepalive_time",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_keepalive_more,
    },
    Spec {
        name: "keepalive_timeout",
        ctx: UPS,
        args: Args::Exactly(1),
        block: false,
        set: set_keepalive_more,
    },
    Spec {
        name: "least_conn",
        ctx: UPS,
        args: Args::Exactly(0),
        block: false,
        set: set_balancer,
    },
    Spec {
        name: "ip_hash",
        ctx: UPS,
        args: Args::Exactly(0),
        block: false,
        set: set_balancer,
    },
    Spec {
        name: "hash",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_balancer,
    },
    Spec {
        name: "random",
        ctx: UPS,
        args: Args::Range(0, 2),
        block: false,
        set: set_balancer,
    },
    Spec {
        name: "state",
        ctx: UPS,
        args: Args::Exactly(1),
        block: false,
        set: set_state,
    },
    Spec {
        name: "zone",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_zone,
    },
    Spec {
        name: "proxy_pass",
        ctx: LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_proxy_pass,
    },
    Spec {
        name: "grpc_pass",
        ctx: LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_proxy_pass,
    },
    Spec {
        name: "fastcgi_pass",
        ctx: LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_proxy_pass,
    },
    Spec {
        name: "queue",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_queue,
    },
    Spec {
        name: "http2_ping_interval",
        ctx: UPS,
        args: Args::Range(1, 2),
        block: false,
        set: set_ping,
    },
];

pub(super) struct UpstreamB {
    name: String,
    servers: Vec<UpstreamServer>,
    /// Where the first `backup` server was, to report a balancer that forbids it.
    backup_src: Option<Src>,
    balancer: Option<(Balancer, Src)>,
    keepalive: Keepalive,
    keepalive_set: [bool; 5],
    /// `http2_ping_interval TIME [timeout=TIME]`.
    ping: Option<Ping>,
    /// `queue N [timeout=TIME]`.
    queue: Option<Queue>,
    /// `zone NAME [SIZE]`, where it was written.
    zone: Option<(String, Option<u64>, Src)>,
    pub(super) resolver: Option<Resolver>,
    pub(super) resolver_timeout: Option<Duration>,
    state: Option<(PathBuf, Src)>,
    /// A `stream` block's: the keep-alive directives are not allowed.
    pub(super) stream: bool,
    /// `sticky`, where it was written.
    pub(super) sticky: Option<(super::sticky::Sticky, Src)>,
    src: Src,
}

/// `proxy_pass` as written, before upstreams are known.
pub(super) struct ProxyPassB {
    /// `https://` (`grpcs://`).
    pub(super) ssl: bool,
    /// `grpc_pass`.
    pub(super) grpc: bool,
    host: String,
    port: Option<u16>,
    uri: Option<String>,
    pub(super) src: Src,
}

/// nginx 1.31's implicit `keepalive 32 local` with its companions' defaults.
pub(super) fn default_keepalive() -> Keepalive {
    Keepalive {
        min: 0,
        max: 32,
        local: true,
        requests: 1000,
        time: Duration::from_secs(3600),
        timeout: Duration::from_secs(60),
        jitter: 0,
    }
}

fn set_upstream(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Http(h) = n else {
        return Err(not_here(d));
    };
    let u = new_upstream(b, d, &h.upstreams, false)?;
    h.upstreams.push(u);
    Ok(())
}

/// Reads an `upstream` block (http or stream).
pub(super) fn new_upstream(
    b: &mut Builder,
    d: &Directive,
    known: &[UpstreamB],
    stream: bool,
) -> Result<UpstreamB, ConfError> {
    let name = d.args[0].clone();
    if known.iter().any(|u| u.name.eq_ignore_ascii_case(&name)) {
        return Err(ConfError::at(
            format!("duplicate upstream \"{name}\""),
            &d.src,
        ));
    }
    let mut u = UpstreamB {
        name,
        servers: Vec::new(),
        backup_src: None,
        balancer: None,
        keepalive: default_keepalive(),
        keepalive_set: [false; 5],
        ping: None,
        queue: None,
        zone: None,
        resolver: None,
        resolver_timeout: None,
        state: None,
        stream,
        sticky: None,
        src: d.src.clone(),
    };
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Upstream(&mut u),
        UPS,
    )?;
    if u.servers.is_empty() {
        return Err(ConfError::at("no servers are inside upstream", &d.src));
    }
    Ok(u)
}

/// The addresses a `server` (or `proxy_pass`) host stands for.
fn resolve(host: &str, port: u16, src: &Src, what: &str) -> Result<Vec<PeerAddr>, ConfError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![PeerAddr::Inet(SocketAddr::new(ip, port))]);
    }
    let mut v: Vec<PeerAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|_| ConfError::at(format!("host not found in {what}"), src))?
        .map(PeerAddr::Inet)
        .collect();
    v.dedup();
    if v.is_empty() {
        return Err(ConfError::at(format!("host not found in {what}"), src));
    }
    Ok(v)
}

/// `unix:PATH`, `[v6]:port`, `host:port` or `host` (port 80).
pub(super) fn parse_peer(text: &str, src: &Src, what: &str) -> Result<Vec<PeerAddr>, ConfError> {
    if let Some(p) = text.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(ConfError::at(
                format!("no path in the unix domain socket in {what}"),
                src,
            ));
        }
        return Ok(vec![PeerAddr::Unix(PathBuf::from(p))]);
    }
    let hp = values::split_host_port(text)
        .map_err(|_| ConfError::at(format!("invalid port in {what}"), src))?;
    resolve(hp.host, hp.port.unwrap_or(80), src, what)
}

fn set_server(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    let what = format!("\"{}\" of the \"server\" directive", d.args[0]);
    let wants_service = d.args[1..].iter().any(|a| a.starts_with("service="));
    if wants_service && !d.args[1..].iter().any(|a| a == "resolve") {
        return Err(ConfError::at(
            "service upstream \"service=\" requires \"resolve\" and a host name",
            &d.src,
        ));
    }
    // `resolve` on a name: no lookup now, the zone's resolver follows it.
    let run_time = d.args[1..]
        .iter()
        .any(|a| a == "resolve")
        .then(|| run_time_name(&d.args[0]))
        .flatten();
    let addrs = match &run_time {
        Some(_) => Vec::new(),
        None => {
            parse_peer(&d.args[0], &d.src, &format!("upstream \"{}\"", d.args[0])).map_err(|e| {
                if e.message.starts_with("invalid port") {
                    ConfError::at(format!("invalid port in {what}"), &d.src)
                } else {
                    e
                }
            })?
        }
    };
    let mut s = UpstreamServer::new(d.args[0].clone(), addrs);
    let invalid = |p: &str| ConfError::at(format!("invalid parameter \"{p}\""), &d.src);
    let service = d.args[1..].iter().find_map(|a| a.strip_prefix("service="));
    if let Some(service) = service {
        if run_time.is_none() {
            return Err(ConfError::at(
                "service upstream \"service=\" requires \"resolve\" and a host name",
                &d.src,
            ));
        }
        if d.args[0].contains(':') {
            return Err(ConfError::at(
                format!("service upstream \"{}\" may not have port", d.args[0]),
                &d.src,
            ));
        }
        if service.is_empty() {
            return Err(invalid(&format!("service={service}")));
        }
        s.service = Some(service.to_string());
    }
    if let Some((host, port)) = run_time {
        s.resolve = true;
        s.host = host;
        s.port = port.ok_or_else(|| ConfError::at(format!("invalid port in {what}"), &d.src))?;
    }
    for p in &d.args[1..] {
        if let Some(v) = p.strip_prefix("weight=") {
            s.weight = number(v).filter(|w| *w > 0).ok_or_else(|| invalid(p))?;
            s.weight_set = true;
        } else if let Some(v) = p.strip_prefix("max_fails=") {
            s.max_fails = number(v).ok_or_else(|| invalid(p))?;
        } else if let Some(v) = p.strip_prefix("fail_timeout=") {
            s.fail_timeout = super::values::parse_time(v, false).ok_or_else(|| invalid(p))?;
        } else if let Some(v) = p.strip_prefix("max_conns=") {
            s.max_conns = number(v).ok_or_else(|| invalid(p))?;
        } else if let Some(v) = p.strip_prefix("slow_start=") {
            s.slow_start = super::values::parse_time(v, false).ok_or_else(|| invalid(p))?;
        } else if p == "backup" {
            if let Some((b, _)) = &u.balancer {
                if !b.allows_backup() {
                    return Err(ConfError::at(
                        "balancing method does not support parameter \"backup\"",
                        &d.src,
                    ));
                }
            }
            s.backup = true;
            u.backup_src.get_or_insert(d.src.clone());
        } else if let Some(v) = p.strip_prefix("route=") {
            // nginx keeps a peer's id in 32 bytes (an MD5 in hex).
            if v.is_empty()
                || v.len() > 32
                || v.bytes().any(|b| b <= b' ' || b >= 0x7f || b == b';')
            {
                return Err(invalid(p));
            }
            s.route = Some(v.to_string());
        } else if p == "down" {
            s.down = true;
        } else if p == "resolve" {
            // Handled above; no effect on an address literal.
        } else if p.starts_with("service=") {
            // Handled above.
        } else {
            return Err(invalid(p));
        }
    }
    u.servers.push(s);
    Ok(())
}

fn set_keepalive(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    if u.stream {
        return Err(not_here(d));
    }
    if u.keepalive_set[0] {
        return Err(duplicate(d));
    }
    u.keepalive_set[0] = true;
    u.keepalive.max = number(&d.args[0]).ok_or_else(|| {
        ConfError::at(
            format!("invalid value \"{}\" in \"keepalive\" directive", d.args[0]),
            &d.src,
        )
    })?;
    u.keepalive.local = match d.args.get(1).map(String::as_str) {
        None => false,
        Some("local") => true,
        Some(other) => {
            return Err(ConfError::at(
                format!("invalid parameter \"{other}\""),
                &d.src,
            ));
        }
    };
    Ok(())
}

/// The `upstream` block of an http-only upstream directive (refused in a
/// stream upstream and elsewhere).
fn http_upstream<'a>(d: &Directive, n: &'a mut Node<'_>) -> Result<&'a mut UpstreamB, ConfError> {
    match n {
        Node::Upstream(u) if !u.stream => Ok(u),
        _ => Err(not_here(d)),
    }
}

/// A `timeout=TIME` parameter (above zero); `None` when it is absent.
fn timeout_param(d: &Directive, at: usize) -> Result<Option<Duration>, ConfError> {
    d.args
        .get(at)
        .map(|p| {
            p.strip_prefix("timeout=")
                .and_then(|v| values::parse_time(v, true))
                .filter(|t| !t.is_zero())
                .ok_or_else(|| ConfError::at(format!("invalid parameter \"{p}\""), &d.src))
        })
        .transpose()
}

fn set_keepalive_more(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let u = http_upstream(d, n)?;
    let i = match d.name.as_str() {
        "keepalive_requests" => 1,
        "keepalive_time" => 2,
        "keepalive_min" => 4,
        _ => 3,
    };
    if u.keepalive_set[i] {
        return Err(duplicate(d));
    }
    u.keepalive_set[i] = true;
    match i {
        1 => {
            u.keepalive.requests = number(&d.args[0]).ok_or_else(|| {
                ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src)
            })?
        }
        2 => {
            u.keepalive.time = time_arg(d, 0)?;
            if let Some(p) = d.args.get(1) {
                u.keepalive.jitter = p
                    .strip_prefix("jitter=")
                    .map(|v| v.strip_suffix('%').unwrap_or(v))
                    .and_then(number::<u8>)
                    .filter(|j| *j <= 100)
                    .ok_or_else(|| ConfError::at(format!("invalid parameter \"{p}\""), &d.src))?;
            }
        }
        4 => {
            u.keepalive.min = number(&d.args[0])
                .filter(|n: &usize| *n <= MAX_KEEPALIVE_MIN)
                .ok_or_else(|| {
                    ConfError::at(
                        format!(
                            "invalid value \"{}\" in \"keepalive_min\" directive",
                            d.args[0]
                        ),
                        &d.src,
                    )
                })?
        }
        _ => u.keepalive.timeout = time_arg(d, 0)?,
    }
    Ok(())
}

/// `http2_ping_interval TIME [timeout=TIME]`: a PING on each HTTP/2
/// connection every TIME; no answer within the timeout (by default TIME
/// again) closes it.
fn set_ping(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let u = http_upstream(d, n)?;
    if u.ping.is_some() {
        return Err(duplicate(d));
    }
    let interval = time_arg(d, 0)?;
    if interval.is_zero() {
        return Err(super::build::invalid_value(d));
    }
    let timeout = timeout_param(d, 1)?.unwrap_or(interval);
    u.ping = Some(Ping { interval, timeout });
    Ok(())
}

/// `queue N [timeout=TIME]` (http upstreams only, as NGINX Plus has it).
fn set_queue(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let u = http_upstream(d, n)?;
    if u.queue.is_some() {
        return Err(duplicate(d));
    }
    let max = number(&d.args[0])
        .filter(|n: &usize| *n > 0)
        .ok_or_else(|| super::build::invalid_value(d))?;
    let timeout = timeout_param(d, 1)?.unwrap_or(Duration::from_secs(60));
    u.queue = Some(Queue { max, timeout });
    Ok(())
}

/// The most connections `keepalive_min` keeps open to one peer per worker.
const MAX_KEEPALIVE_MIN: usize = 1024;

/// `NAME[:PORT]` that is a name, not an address literal: (host, port); the
/// port is None when it is not a number. Port 80 by default.
fn run_time_name(text: &str) -> Option<(String, Option<u16>)> {
    if text.starts_with("unix:") || text.starts_with('[') || text.parse::<IpAddr>().is_ok() {
        return None;
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (h, values::parse_port(p)),
        None => (text, Some(80)),
    };
    if host.parse::<IpAddr>().is_ok() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

/// `state FILE`: where the resolved peers are kept for a cold start.
fn set_state(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    if u.state.is_some() {
        return Err(duplicate(d));
    }
    u.state = Some((b.path(&d.args[0]), d.src.clone()));
    Ok(())
}

/// `zone NAME [SIZE]`: the peers live in shared memory. nginx's checks.
fn set_zone(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    if u.zone.is_some() {
        return Err(duplicate(d));
    }
    let size = match d.args.get(1) {
        None => None,
        Some(text) => {
            let size = super::values::parse_size(text)
                .ok_or_else(|| ConfError::at(format!("invalid zone size \"{text}\""), &d.src))?;
            if size < ZoneSpec::MIN_SIZE {
                return Err(ConfError::at(
                    format!("zone \"{}\" is too small", d.args[0]),
                    &d.src,
                ));
            }
            Some(size)
        }
    };
    u.zone = Some((d.args[0].clone(), size, d.src.clone()));
    Ok(())
}

fn set_balancer(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    let bal = match d.name.as_str() {
        "least_conn" => Balancer::LeastConn,
        "ip_hash" => Balancer::IpHash,
        "pick_first" => {
            let (mut warm, mut revert) = (1, false);
            for a in &d.args {
                if let Some(v) = a.strip_prefix("warm=") {
                    warm = number(v)
                        .filter(|n: &usize| *n <= MAX_KEEPALIVE_MIN)
                        .ok_or_else(|| {
                            ConfError::at(format!("invalid parameter \"{a}\""), &d.src)
                        })?;
                } else if a == "revert" {
                    revert = true;
                } else {
                    return Err(ConfError::at(format!("invalid parameter \"{a}\""), &d.src));
                }
            }
            Balancer::PickFirst { warm, revert }
        }
        "hash" => {
            let consistent = match d.args.get(1).map(String::as_str) {
                None => false,
                Some("consistent") => true,
                Some(other) => {
                    return Err(ConfError::at(
                        format!("invalid parameter \"{other}\""),
                        &d.src,
                    ));
                }
            };
            let key = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
            Balancer::Hash { key, consistent }
        }
        _ => {
            let two = match d.args.as_slice() {
                [] => false,
                [t] if t == "two" => true,
                [t, m] if t == "two" && m == "least_conn" => true,
                args => {
                    let bad = args
                        .iter()
                        .find(|a| *a != "two" && *a != "least_conn")
                        .unwrap_or(&args[0]);
                    return Err(ConfError::at(
                        format!("invalid parameter \"{bad}\""),
                        &d.src,
                    ));
                }
            };
            Balancer::Random { two }
        }
    };
    if !bal.allows_backup() && u.backup_src.is_some() {
        return Err(ConfError::at(
            format!(
                "balancing method \"{}\" does not support parameter \"backup\"",
                d.name
            ),
            &d.src,
        ));
    }
    // nginx: `sticky` wraps the balancer defined before it; one defined
    // after replaces both.
    if u.balancer.is_some() || u.sticky.is_some() {
        b.warnings
            .push(ConfError::at("load balancing method redefined", &d.src));
        u.sticky = None;
    }
    u.balancer = Some((bal, d.src.clone()));
    Ok(())
}

fn set_proxy_pass(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Location(l) = n else {
        return Err(not_here(d));
    };
    if l.proxy_pass.is_some() || l.proxy_pass_var.is_some() {
        return Err(duplicate(d));
    }
    let url = &d.args[0];
    let grpc = d.name == "grpc_pass";
    let fastcgi = d.name == "fastcgi_pass";
    l.fastcgi = fastcgi;
    if grpc && url.contains('$') {
        return Err(ConfError::at(
            "variables in \"grpc_pass\" are not supported",
            &d.src,
        ));
    }
    if url.contains('$') {
        // Evaluated per request: an upstream name, an address, or a name
        // the location's resolver looks up.
        let t = vars::compile(url).map_err(|m| ConfError::at(m, &d.src))?;
        l.proxy_pass_var = Some(t);
        return Ok(());
    }
    let (ssl, rest) = if fastcgi {
        // An address, an upstream's name or unix:PATH; no scheme, no URI.
        // nginx reads it as an upstream's address: a scheme or a path
        // is not part of one.
        if url.contains("://") || (!url.starts_with("unix:") && url.contains('/')) {
            return Err(ConfError::at(
                format!("invalid host in upstream \"{url}\""),
                &d.src,
            ));
        }
        (false, url.as_str())
    } else if grpc {
        match (url.strip_prefix("grpc://"), url.strip_prefix("grpcs://")) {
            (Some(r), _) => (false, r),
            (_, Some(r)) => (true, r),
            // nginx: a bare address is grpc://.
            _ if !url.contains("://") => (false, url.as_str()),
            _ => {
                return Err(ConfError::at(
                    format!("invalid URL prefix in \"{url}\""),
                    &d.src,
                ));
            }
        }
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(ConfError::at(
            format!("invalid URL prefix in \"{url}\""),
            &d.src,
        ));
    };
    // unix:/path:/uri keeps its colon-separated URI.
    let (hostport, uri) = if fastcgi {
        (rest.to_string(), None)
    } else if let Some(u) = rest.strip_prefix("unix:") {
        match u.split_once(':') {
            Some((p, uri)) => (format!("unix:{p}"), Some(uri.to_string())),
            None => (format!("unix:{u}"), None),
        }
    } else {
        match rest.find('/') {
            Some(i) => (rest[..i].to_string(), Some(rest[i..].to_string())),
            None => (rest.to_string(), None),
        }
    };
    if hostport.is_empty() {
        return Err(ConfError::at(
            format!("no host in \"{url}\" of the \"{}\" directive", d.name),
            &d.src,
        ));
    }
    if grpc && uri.is_some() {
        // nginx 1.22's words: the address after the scheme is an
        // upstream's, which has no path.
        return Err(ConfError::at(
            format!("invalid host in upstream \"{rest}\""),
            &d.src,
        ));
    }
    let (host, port) = if hostport.starts_with("unix:") {
        (hostport, None)
    } else {
        values::split_host_port(&hostport)
            .map(|hp| (hp.host.to_string(), hp.port))
            .map_err(|_| {
                ConfError::at(format!("invalid port in upstream \"{hostport}\""), &d.src)
            })?
    };
    l.proxy_pass = Some(ProxyPassB {
        ssl,
        grpc,
        host,
        port,
        uri,
        src: d.src.clone(),
    });
    Ok(())
}

/// The explicit upstreams, checked and finished.
pub(super) fn finish_upstreams(
    list: Vec<UpstreamB>,
    http: &super::loc::LocB,
) -> Result<(Vec<Upstream>, Vec<ZoneSpec>), ConfError> {
    // One zone per name: sizes must agree, and one of them must give it.
    let mut zones: Vec<ZoneSpec> = Vec::new();
    for u in &list {
        let Some((name, size, src)) = &u.zone else {
            continue;
        };
        match zones.iter().position(|z| &z.name == name) {
            Some(i) => {
                let z = &mut zones[i];
                match (z.size, size) {
                    (Some(have), Some(new)) if have != *new => {
                        return Err(ConfError::at(
                            format!(
                                "the size {new} of shared memory zone \"{name}\" conflicts with already declared size {have}"
                            ),
                            src,
                        ));
                    }
                    (None, Some(new)) => {
                        z.size = Some(*new);
                        z.src = src.clone();
                    }
                    _ => {}
                }
                z.upstreams.push(u.name.clone());
            }
            None => {
                zones.push(ZoneSpec {
                    name: name.clone(),
                    size: *size,
                    upstreams: vec![u.name.clone()],
                    src: src.clone(),
                });
            }
        }
    }
    if let Some(i) = zones.iter().position(|z| z.size.is_none()) {
        return Err(ConfError::at(
            format!("zero size shared memory zone \"{}\"", zones[i].name),
            &zones[i].src,
        ));
    }
    // A learn zone serves one upstream (nginx's rule).
    let mut learn: Vec<(&str, &str)> = Vec::new();
    for u in &list {
        if let Some((super::sticky::Sticky::Learn(l), src)) = &u.sticky {
            if let Some((_, owner)) = learn.iter().find(|(z, _)| *z == l.zone) {
                return Err(ConfError::at(
                    format!(
                        "sticky zone \"{}\" is already used in upstream \"{owner}\"",
                        l.zone
                    ),
                    src,
                ));
            }
            learn.push((&l.zone, &u.name));
        }
    }
    let mut upstreams = Vec::with_capacity(list.len());
    for u in list {
        // The upstream's own resolver wins; its timeout, else the http one.
        let timeout = u
            .resolver_timeout
            .or(http.resolver_timeout)
            .unwrap_or(Duration::from_secs(30));
        let resolver = u
            .resolver
            .clone()
            .or_else(|| http.resolver.clone().flatten())
            .map(|mut r| {
                r.timeout = timeout;
                std::sync::Arc::new(r)
            });
        if u.servers.iter().any(|s| s.resolve) {
            let at = format!(
                "{}:{}",
                u.src
                    .file
                    .as_ref()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default(),
                u.src.line
            );
            if u.zone.is_none() {
                return Err(ConfError::at(
                    format!(
                        "resolving names at run time requires upstream \"{}\" in {at} to be in shared memory",
                        u.name
                    ),
                    &u.src,
                ));
            }
            if resolver.is_none() {
                return Err(ConfError::at(
                    format!(
                        "no resolver defined to resolve names at run time in upstream \"{}\"",
                        u.name
                    ),
                    &u.src,
                ));
            }
        }
        if let (Some((_, src)), None) = (&u.state, &u.zone) {
            return Err(ConfError::at(
                "\"state\" requires upstream in shared memory (\"zone\")",
                src,
            ));
        }
        upstreams.push(Upstream {
            state: u.state.map(|(p, _)| p),
            name: u.name,
            servers: u.servers,
            balancer: u.balancer.map(|(b, _)| b).unwrap_or(Balancer::RoundRobin),
            keepalive: u.keepalive,
            ping: u.ping,
            zone: u.zone.map(|(name, _, _)| name),
            resolver,
            implicit: false,
            health: None,
            queue: u.queue,
            sticky: u.sticky.map(|(s, _)| s),
            src: u.src,
        });
    }
    Ok((upstreams, zones))
}

/// Ties a `proxy_pass` to its upstream, making an implicit one for host:port.
pub(super) fn resolve_proxy_pass(
    p: ProxyPassB,
    modifier: Modifier,
    location: &str,
    upstreams: &mut Vec<Upstream>,
) -> Result<ProxyPass, ConfError> {
    if p.uri.is_some()
        && matches!(
            modifier,
            Modifier::Regex | Modifier::RegexCaseless | Modifier::Named
        )
    {
        return Err(ConfError::at(
            "\"proxy_pass\" cannot have URI part in location given by regular expression, or inside named location, or inside \"if\" statement, or inside \"limit_except\" block",
            &p.src,
        ));
    }
    let proxy_port = p.port.unwrap_or(if p.ssl { 443 } else { 80 });
    let proxy_host = match p.port {
        Some(port) => format!("{}:{port}", bracket(&p.host)),
        None => bracket(&p.host),
    };
    let explicit = p.port.is_none().then(|| {
        upstreams
            .iter()
            .position(|u| !u.implicit && u.name.eq_ignore_ascii_case(&p.host))
    });
    let index = match explicit.flatten() {
        Some(i) => i,
        // http://h and https://h are two upstreams (ports 80 and 443).
        None => match upstreams.iter().position(|u| {
            u.implicit
                && u.name == proxy_host
                && implicit_port(u).is_none_or(|port| port == proxy_port)
        }) {
            Some(i) => i,
            None => {
                let what = format!("upstream \"{proxy_host}\"");
                let addrs = if p.host.starts_with("unix:") {
                    parse_peer(&p.host, &p.src, &what)?
                } else {
                    resolve(&p.host, proxy_port, &p.src, &what)?
                };
                upstreams.push(Upstream {
                    name: proxy_host.clone(),
                    servers: vec![UpstreamServer::new(proxy_host.clone(), addrs)],
                    balancer: Balancer::RoundRobin,
                    keepalive: default_keepalive(),
                    ping: None,
                    zone: None,
                    resolver: None,
                    state: None,
                    implicit: true,
                    health: None,
                    queue: None,
                    sticky: None,
                    src: p.src.clone(),
                });
                upstreams.len() - 1
            }
        },
    };
    Ok(ProxyPass {
        dynamic: false,
        ssl: p.ssl,
        grpc: p.grpc,
        upstream: index,
        uri: p.uri,
        proxy_host: proxy_host.into(),
        proxy_port,
        location_prefix: location.to_string(),
    })
}

/// The port of an implicit upstream's address (None: a unix socket).
fn implicit_port(u: &Upstream) -> Option<u16> {
    match u.servers.first().and_then(|s| s.addrs.first()) {
        Some(PeerAddr::Inet(a)) => Some(a.port()),
        _ => None,
    }
}

/// An IPv6 literal goes back into brackets.
fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with("unix:") {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
