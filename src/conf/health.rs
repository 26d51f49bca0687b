//! Active health checks, in NGINX Plus's shapes: `health_check` in an http
//! location (with `type=grpc`, `keepalive_time=`, and what the location's
//! proxy settings give it: TLS, plain `proxy_set_header` fields, HTTP/2) or
//! a stream server (with `udp`), `health_check_timeout` in stream, and the
//! `match NAME { ... }` blocks (http: `status`, `header`, `body`; stream:
//! `send`, `expect`) a check may name. Only parsing and the pure matching
//! of a response against a `match`; the checker is `upstream::health`.

use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use super::build::{Args, Builder, HTTP, LOC, Node, SSRV, STREAM, Spec, duplicate, not_here};
use super::proxy_ssl::ProxySsl;
use super::tree::Directive;
use super::values::parse_time;
use super::{ConfError, Src};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "health_check",
        ctx: LOC | SSRV,
        args: Args::Range(0, 13),
        block: false,
        set: set_health_check,
    },
    Spec {
        name: "health_check_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_health_check_timeout,
    },
    Spec {
        name: "match",
        ctx: HTTP | STREAM,
        args: Args::Exactly(1),
        block: true,
        set: set_match,
    },
];

/// `health_check` as written, before its `match=` is looked up and its
/// upstream known.
#[derive(Debug, Clone)]
pub(super) struct HealthCheckB {
    pub(super) check: HealthCheck,
    pub(super) match_name: Option<String>,
    pub(super) src: Src,
}

/// One upstream's active health check.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub interval: Duration,
    pub jitter: Duration,
    pub fails: u32,
    pub passes: u32,
    /// http: the request's URI.
    pub uri: String,
    /// `port=`: checked there instead of each peer's port.
    pub port: Option<u16>,
    pub matcher: Option<Arc<Match>>,
    /// A new peer gets no traffic until its first check passes.
    pub mandatory: bool,
    /// With `mandatory`: a peer healthy before a reload stays up.
    pub persistent: bool,
    /// http: the `Host` header (the location's `proxy_set_header Host`
    /// when it is a plain text, else `$proxy_host`).
    pub host: String,
    /// Connect and read limits (http: the location's `proxy_connect_timeout`
    /// and `proxy_read_timeout`; stream: `health_check_timeout`).
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Stream: a TCP check (no HTTP request).
    pub stream: bool,
    /// Stream `udp`: a UDP check.
    pub udp: bool,
    /// `type=grpc`: the gRPC health-checking protocol over HTTP/2.
    pub grpc: Option<GrpcCheck>,
    /// `keepalive_time=`: checks reuse one connection per peer while it is
    /// younger than this (None: a connection per check).
    pub keepalive_time: Option<Duration>,
    /// http: the location's `proxy_set_header` fields without variables
    /// (not `Host`, nor those the checker owns), in order.
    pub headers: Vec<(String, String)>,
    /// http: TLS to the peers (`proxy_pass https://`, `grpc_pass
    /// grpcs://`): the location's `proxy_ssl_*` settings, and the name the
    /// handshake uses.
    pub tls: Option<(Arc<ProxySsl>, String)>,
    /// http: the location speaks HTTP/2 to its peers (`grpc_pass`,
    /// `proxy_http_version 2`): so do its checks.
    pub h2: bool,
}

/// `type=grpc [grpc_service=NAME] [grpc_status=CODE]`.
#[derive(Debug, Clone, Default)]
pub struct GrpcCheck {
    /// `HealthCheckRequest.service` (empty: the server as a whole).
    pub service: String,
    /// The `grpc-status` that passes instead of `SERVING`.
    pub status: Option<u32>,
}

impl Default for HealthCheck {
    fn default() -> HealthCheck {
        HealthCheck {
            interval: Duration::from_secs(5),
            jitter: Duration::ZERO,
            fails: 1,
            passes: 1,
            uri: "/".into(),
            port: None,
            matcher: None,
            mandatory: false,
            persistent: false,
            host: String::new(),
            connect_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(60),
            stream: false,
            udp: false,
            grpc: None,
            keepalive_time: None,
            headers: Vec::new(),
            tls: None,
            h2: false,
        }
    }
}

/// A `match` block.
#[derive(Debug, Clone)]
pub struct Match {
    pub name: String,
    pub status: Option<StatusCond>,
    pub headers: Vec<HeaderCond>,
    /// `body ~ RE` (true) or `body !~ RE` (false).
    pub body: Vec<(bool, Regex)>,
    /// Stream: bytes sent after connecting.
    pub send: Option<Vec<u8>>,
    pub expect: Option<Expect>,
    pub src: Src,
}

/// `status [!] CODE|FROM-TO ...`.
#[derive(Debug, Clone)]
pub struct StatusCond {
    pub negate: bool,
    pub ranges: Vec<(u16, u16)>,
}

#[derive(Debug, Clone)]
pub enum HeaderCond {
    Present(String),
    Absent(String),
    Eq(String, String),
    Ne(String, String),
    Re(String, Regex),
    NotRe(String, Regex),
}

/// Stream `expect STRING` (the reply starts with it) or `expect ~ RE`.
#[derive(Debug, Clone)]
pub enum Expect {
    Text(Vec<u8>),
    Re(Regex),
}

impl Match {
    /// Whether an HTTP response (status, headers as (name, value), body)
    /// meets every condition.
    pub fn http_ok(&self, status: u16, headers: &[(String, String)], body: &[u8]) -> bool {
        if let Some(s) = &self.status {
            let inside = s.ranges.iter().any(|&(a, b)| (a..=b).contains(&status));
            if inside == s.negate {
                return false;
            }
        }
        fn vals<'a>(
            headers: &'a [(String, String)],
            n: &'a str,
        ) -> impl Iterator<Item = &'a str> + 'a {
            headers
                .iter()
                .filter(move |(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_str())
        }
        for h in &self.headers {
            let ok = match h {
                HeaderCond::Present(n) => vals(headers, n).next().is_some(),
                HeaderCond::Absent(n) => vals(headers, n).next().is_none(),
                HeaderCond::Eq(n, v) => vals(headers, n).any(|x| x == v),
                HeaderCond::Ne(n, v) => vals(headers, n)
                    .next()
                    .is_some_and(|_| vals(headers, n).all(|x| x != v)),
                HeaderCond::Re(n, r) => vals(headers, n).any(|x| r.is_match(x)),
                HeaderCond::NotRe(n, r) => {
                    vals(headers, n).next().is_some() && vals(headers, n).all(|x| !r.is_match(x))
                }
            };
            if !ok {
                return false;
            }
        }
        let text = String::from_utf8_lossy(body);
        self.body.iter().all(|(want, r)| r.is_match(&text) == *want)
    }

    /// Whether a stream reply meets `expect` (none: any reply, even none).
    pub fn stream_ok(&self, reply: &[u8]) -> bool {
        match &self.expect {
            None => true,
            Some(Expect::Text(t)) => reply.starts_with(t),
            Some(Expect::Re(r)) => r.is_match(&String::from_utf8_lossy(reply)),
        }
    }
}

fn at(m: impl Into<String>, d: &Directive) -> ConfError {
    ConfError::at(m, &d.src)
}

fn invalid(p: &str, d: &Directive) -> ConfError {
    at(format!("invalid parameter \"{p}\""), d)
}

fn set_health_check(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let stream = matches!(n, Node::StreamServer(_));
    let slot = match n {
        Node::Location(l) => &mut l.health_check,
        Node::StreamServer(s) => &mut s.health_check,
        _ => return Err(not_here(d)),
    };
    if slot.is_some() {
        return Err(duplicate(d));
    }
    let mut c = HealthCheck {
        stream,
        ..HealthCheck::default()
    };
    let mut match_name = None;
    let mut uri_set = false;
    for a in &d.args {
        let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
        let time = || parse_time(v, true).filter(|t| !t.is_zero() || k == "jitter");
        let count = || v.parse::<u32>().ok().filter(|&n| n > 0);
        // Plus: grpc_service= and grpc_status= come after type=grpc.
        let grpc = c.grpc.is_some();
        match (k, a.contains('=')) {
            ("interval", true) => c.interval = time().ok_or_else(|| invalid(a, d))?,
            ("jitter", true) => c.jitter = time().ok_or_else(|| invalid(a, d))?,
            ("fails", true) => c.fails = count().ok_or_else(|| invalid(a, d))?,
            ("passes", true) => c.passes = count().ok_or_else(|| invalid(a, d))?,
            ("uri", true) if !stream && v.starts_with('/') => {
                c.uri = v.to_string();
                uri_set = true;
            }
            ("port", true) => {
                c.port = Some(
                    v.parse::<u16>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| invalid(a, d))?,
                )
            }
            ("match", true) if !v.is_empty() => match_name = Some(v.to_string()),
            ("mandatory", false) => c.mandatory = true,
            ("persistent", false) => c.persistent = true,
            ("keepalive_time", true) if !stream => {
                c.keepalive_time = Some(time().ok_or_else(|| invalid(a, d))?)
            }
            ("udp", false) if stream => c.udp = true,
            ("type", true) if !stream && v == "grpc" && !grpc => {
                c.grpc = Some(GrpcCheck::default())
            }
            ("grpc_service", true) if grpc => {
                if let Some(g) = c.grpc.as_mut() {
                    g.service = v.to_string();
                }
            }
            ("grpc_status", true) if grpc => {
                let code = v.parse::<u32>().ok().ok_or_else(|| invalid(a, d))?;
                if let Some(g) = c.grpc.as_mut() {
                    g.status = Some(code);
                }
            }
            _ => return Err(invalid(a, d)),
        }
    }
    if c.persistent && !c.mandatory {
        return Err(at(
            "\"persistent\" requires \"mandatory\" in \"health_check\"",
            d,
        ));
    }
    if c.grpc.is_some() && (uri_set || match_name.is_some()) {
        return Err(at(
            "\"health_check\" type=grpc cannot be used with \"uri\" or \"match\"",
            d,
        ));
    }
    *slot = Some(HealthCheckB {
        check: c,
        match_name,
        src: d.src.clone(),
    });
    Ok(())
}

fn set_health_check_timeout(
    _: &mut Builder,
    d: &Directive,
    n: &mut Node<'_>,
) -> Result<(), ConfError> {
    let t = parse_time(&d.args[0], true)
        .filter(|t| !t.is_zero())
        .ok_or_else(|| super::build::invalid_value(d))?;
    let slot = match n {
        Node::Stream(s) => &mut s.health_check_timeout,
        Node::StreamServer(s) => &mut s.health_check_timeout,
        _ => return Err(not_here(d)),
    };
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(t);
    Ok(())
}

fn set_match(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let (list, stream) = match n {
        Node::Http(h) => (&mut h.matches, false),
        Node::Stream(s) => (&mut s.matches, true),
        _ => return Err(not_here(d)),
    };
    let name = &d.args[0];
    if list.iter().any(|m| m.name == *name) {
        return Err(at(format!("duplicate match \"{name}\""), d));
    }
    let mut m = Match {
        name: name.clone(),
        status: None,
        headers: Vec::new(),
        body: Vec::new(),
        send: None,
        expect: None,
        src: d.src.clone(),
    };
    for e in d.block.as_deref().unwrap_or_default() {
        if e.block.is_some() {
            return Err(at("unexpected \"{\"", e));
        }
        match (e.name.as_str(), stream) {
            ("status", false) => status(&mut m, e)?,
            ("header", false) => m.headers.push(header(e)?),
            ("body", false) => {
                let [op, re] = e.args.as_slice() else {
                    return Err(invalid_args(e));
                };
                let want = match op.as_str() {
                    "~" => true,
                    "!~" => false,
                    _ => return Err(invalid(op, e)),
                };
                m.body.push((want, regex(re, e)?));
            }
            ("send", true) => {
                let [text] = e.args.as_slice() else {
                    return Err(invalid_args(e));
                };
                if m.send.is_some() {
                    return Err(duplicate(e));
                }
                m.send = Some(unescape(text));
            }
            ("expect", true) => {
                if m.expect.is_some() {
                    return Err(duplicate(e));
                }
                m.expect = Some(match e.args.as_slice() {
                    [t] => Expect::Text(unescape(t)),
                    [op, re] if op == "~" => Expect::Re(regex(re, e)?),
                    [op, _] => return Err(invalid(op, e)),
                    _ => return Err(invalid_args(e)),
                });
            }
            _ => return Err(at(format!("unknown directive \"{}\"", e.name), e)),
        }
    }
    list.push(Arc::new(m));
    Ok(())
}

fn invalid_args(e: &Directive) -> ConfError {
    at(
        format!("invalid number of arguments in \"{}\" directive", e.name),
        e,
    )
}

fn regex(re: &str, e: &Directive) -> Result<Regex, ConfError> {
    Regex::new(re).map_err(|_| at(format!("invalid regex \"{re}\""), e))
}

/// `status 200;`, `status ! 500;`, `status 200 204;`, `status 200-399;`.
fn status(m: &mut Match, e: &Directive) -> Result<(), ConfError> {
    if m.status.is_some() {
        return Err(duplicate(e));
    }
    let mut args = e.args.iter().peekable();
    let negate = args.next_if(|a| *a == "!").is_some();
    let code = |s: &str| s.parse::<u16>().ok().filter(|c| (100..=599).contains(c));
    let mut ranges = Vec::new();
    for a in args {
        let r = match a.split_once('-') {
            Some((f, t)) => code(f).zip(code(t)).filter(|(f, t)| f <= t),
            None => code(a).map(|c| (c, c)),
        };
        ranges.push(r.ok_or_else(|| invalid(a, e))?);
    }
    if ranges.is_empty() {
        return Err(invalid_args(e));
    }
    m.status = Some(StatusCond { negate, ranges });
    Ok(())
}

/// `header NAME;`, `header ! NAME;`, `header NAME OP VALUE;` with `=`,
/// `!=`, `~` or `!~`.
fn header(e: &Directive) -> Result<HeaderCond, ConfError> {
    Ok(match e.args.as_slice() {
        [n] => HeaderCond::Present(n.clone()),
        [bang, n] if bang == "!" => HeaderCond::Absent(n.clone()),
        [n, op, v] => match op.as_str() {
            "=" => HeaderCond::Eq(n.clone(), v.clone()),
            "!=" => HeaderCond::Ne(n.clone(), v.clone()),
            "~" => HeaderCond::Re(n.clone(), regex(v, e)?),
            "!~" => HeaderCond::NotRe(n.clone(), regex(v, e)?),
            _ => return Err(invalid(op, e)),
        },
        _ => return Err(invalid_args(e)),
    })
}

/// `\r`, `\n`, `\t`, `\\` and `\xHH` in a `send` or `expect` text (nginx's
/// lexer leaves some of them in place).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            let hex = || {
                std::str::from_utf8(b.get(i + 2..i + 4)?)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            };
            match b[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'\\' => out.push(b'\\'),
                b'x' if hex().is_some() => {
                    out.extend(hex());
                    i += 4;
                    continue;
                }
                other => out.extend([b'\\', other]),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The `proxy_set_header` fields an http check sends: those with a
/// value and no variables, less the ones the checker writes itself.
pub(super) fn check_headers(set: &[(String, super::vars::Template)]) -> Vec<(String, String)> {
    const OWN: &[&str] = &[
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "content-length",
        "content-type",
        "transfer-encoding",
        "te",
        "upgrade",
    ];
    set.iter()
        .filter(|(n, _)| !OWN.iter().any(|o| n.eq_ignore_ascii_case(o)))
        .filter_map(|(n, t)| {
            t.as_literal()
                .filter(|v| !v.is_empty())
                .map(|v| (n.clone(), v.to_string()))
        })
        .collect()
}

/// Ties a `health_check` to its upstream: it must proxy to an upstream
/// with a `zone` (Plus's message otherwise), its `match=` must exist, and
/// an upstream takes one check.
pub(super) fn attach(
    hc: HealthCheckB,
    upstream: Option<&mut super::model::Upstream>,
    matches: &[Arc<Match>],
    fill: impl FnOnce(&mut HealthCheck),
) -> Result<(), ConfError> {
    let src = hc.src.clone();
    let Some(u) = upstream.filter(|u| !u.implicit) else {
        return Err(ConfError::at(
            "\"health_check\" requires an upstream group: \"proxy_pass\" to an upstream block",
            &src,
        ));
    };
    if u.zone.is_none() {
        return Err(ConfError::at(
            format!("upstream \"{}\" must reside in shared memory", u.name),
            &src,
        ));
    }
    if u.health.is_some() {
        return Err(ConfError::at(
            format!(
                "upstream \"{}\" already has a \"health_check\" (sluice runs one per upstream)",
                u.name
            ),
            &src,
        ));
    }
    let mut check = hc.check;
    if let Some(name) = &hc.match_name {
        check.matcher = Some(
            matches
                .iter()
                .find(|m| m.name == *name)
                .cloned()
                .ok_or_else(|| ConfError::at(format!("match \"{name}\" not found"), &src))?,
        );
    }
    fill(&mut check);
    u.health = Some(Arc::new(check));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    fn http(extra: &str, hc: &str) -> String {
        format!(
            "events {{}} http {{ {extra} upstream u {{ zone z 64k; server 127.0.0.1:8081; }} \
             server {{ listen 127.0.0.1:8080; location / {{ proxy_pass http://u; {hc} }} }} }}"
        )
    }

    #[test]
    fn parses_parameters_and_match() {
        let (c, _) = try_build(&http(
            "match ok { status 200-399; header Content-Type ~ text/html; header X-A = b; body ~ \"ok\"; }",
            "health_check interval=1s jitter=100ms fails=2 passes=3 uri=/h port=9 match=ok mandatory persistent;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let h = u.health.as_ref().expect("health");
        assert_eq!(h.interval, Duration::from_secs(1));
        assert_eq!((h.fails, h.passes, h.port), (2, 3, Some(9)));
        assert_eq!(h.uri, "/h");
        assert!(h.mandatory && h.persistent);
        let m = h.matcher.as_ref().expect("match");
        let hdr = |ct: &str| {
            vec![
                ("content-type".into(), ct.into()),
                ("X-A".into(), "b".into()),
            ]
        };
        assert!(m.http_ok(200, &hdr("text/html"), b"all ok"));
        assert!(!m.http_ok(500, &hdr("text/html"), b"all ok"));
        assert!(!m.http_ok(200, &hdr("text/plain"), b"all ok"));
        assert!(!m.http_ok(200, &hdr("text/html"), b"bad"));
    }

    #[test]
    fn status_negation_and_lists() {
        let (c, _) = try_build(&http(
            "match m { status ! 500 502-504; header ! X-Bad; }",
            "health_check match=m;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let m = u
            .health
            .as_ref()
            .and_then(|h| h.matcher.clone())
            .expect("m");
        assert!(m.http_ok(200, &[], b""));
        assert!(!m.http_ok(503, &[], b""));
        assert!(!m.http_ok(200, &[("x-bad".into(), "1".into())], b""));
    }

    #[test]
    fn errors() {
        assert!(
            err("events {} http { upstream u { server 127.0.0.1:1; } server { location / { proxy_pass http://u; health_check; } } }")
                .contains("upstream \"u\" must reside in shared memory")
        );
        assert!(err(&http("", "health_check match=nope;")).contains("match \"nope\" not found"));
        assert!(err(&http("", "health_check fails=0;")).contains("invalid parameter \"fails=0\""));
        assert!(err(&http("", "health_check persistent;")).contains("requires \"mandatory\""));
        assert!(err(&http("match m { status abc; }", "")).contains("invalid parameter \"abc\""));
        assert!(err(&http("match m { send x; }", "")).contains("unknown directive \"send\""));
        assert!(
            err("events {} http { server { location / { health_check; } } }")
                .contains("requires an upstream group")
        );
    }

    fn grpc_loc(hc: &str) -> String {
        format!(
            "events {{}} http {{ upstream u {{ zone z 64k; server 127.0.0.1:8081; }} \
             server {{ listen 127.0.0.1:8080; location / {{ grpc_pass grpc://u; \
             grpc_set_header X-Plain yes; grpc_set_header X-Var $host; {hc} }} }} }}"
        )
    }

    #[test]
    fn grpc_type_and_its_parameters() {
        let (c, _) = try_build(&grpc_loc(
            "health_check interval=1s keepalive_time=30s type=grpc grpc_service=a.B grpc_status=12;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let h = u.health.as_ref().expect("health");
        let g = h.grpc.as_ref().expect("grpc");
        assert_eq!((g.service.as_str(), g.status), ("a.B", Some(12)));
        assert_eq!(h.keepalive_time, Some(Duration::from_secs(30)));
        assert!(h.h2 && h.tls.is_none());
        assert_eq!(h.headers, vec![("X-Plain".to_string(), "yes".to_string())]);
        // grpc_service= before type=grpc, uri= or match= with it.
        for bad in [
            "health_check grpc_service=a type=grpc;",
            "health_check grpc_status=12;",
            "health_check type=grpc grpc_status=x;",
            "health_check type=http;",
        ] {
            assert!(err(&grpc_loc(bad)).contains("invalid parameter"), "{bad}");
        }
        assert!(
            err(&grpc_loc("health_check uri=/x type=grpc;"))
                .contains("type=grpc cannot be used with \"uri\" or \"match\"")
        );
        assert!(
            err(&http(
                "match m { status 200; }",
                "health_check type=grpc match=m;"
            ))
            .contains("cannot be used with")
        );
        assert!(
            err(&http("", "health_check type=grpc;"))
                .contains("requires \"grpc_pass\" or \"proxy_http_version 2\"")
        );
        assert!(err(&http("", "health_check keepalive_time=0;")).contains("invalid parameter"));
    }

    #[test]
    fn tls_settings_and_headers_of_the_location() {
        let (c, _) = try_build(&http(
            "",
            "proxy_ssl_name backend.test; proxy_set_header X-A 1; proxy_set_header Connection \"\"; \
             proxy_set_header X-V $host; proxy_set_header Host h.test; health_check;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let h = u.health.as_ref().expect("health");
        assert!(h.tls.is_none(), "http://: plain");
        assert_eq!(h.host, "h.test");
        assert_eq!(h.headers, vec![("X-A".to_string(), "1".to_string())]);
        let (c, _) = try_build(
            "events {} http { upstream u { zone z 64k; server 127.0.0.1:8081; } \
             server { listen 127.0.0.1:8080; location / { proxy_pass https://u; \
             proxy_ssl_name backend.test; health_check; } } }",
        )
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let h = u.health.as_ref().expect("health");
        let (_, name) = h.tls.as_ref().expect("tls");
        assert_eq!(name, "backend.test");
    }

    #[test]
    fn stream_refuses_http_parameters() {
        let conf = |hc: &str| {
            format!(
                "events {{}} stream {{ upstream u {{ zone z 64k; server 127.0.0.1:8081; }} \
                 server {{ listen 127.0.0.1:8080; proxy_pass u; {hc} }} }}"
            )
        };
        let (c, _) = try_build(&conf("health_check interval=1s;")).expect("config");
        let u = &c.stream.expect("stream").upstreams.list[0];
        assert!(u.health.as_ref().is_some_and(|h| h.stream && !h.udp));
        let (c, _) = try_build(&conf("health_check udp interval=1s;")).expect("config");
        let u = &c.stream.expect("stream").upstreams.list[0];
        assert!(u.health.as_ref().is_some_and(|h| h.stream && h.udp));
        assert!(err(&conf("health_check udp=1;")).contains("invalid parameter \"udp=1\""));
        assert!(err(&http("", "health_check udp;")).contains("invalid parameter \"udp\""));
        assert!(err(&conf("health_check type=grpc;")).contains("invalid parameter"));
        assert!(err(&conf("health_check keepalive_time=1s;")).contains("invalid parameter"));
    }

    #[test]
    fn unescapes() {
        assert_eq!(unescape("a\\r\\n\\x41"), b"a\r\nA".to_vec());
    }
}
