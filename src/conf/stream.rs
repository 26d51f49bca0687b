//! The `stream` block: `upstream` (the http module's builder, the same
//! directives), `server { listen; proxy_pass; return; }`, the proxy timeouts
//! and retry settings (stream level, inherited by servers), `resolver` and
//! `resolver_timeout`, `ssl_preread` and the preread limits, `proxy_ssl`.
//! The `ssl_*` and `proxy_ssl_*` directives are the http ones (`ssl.rs`,
//! `proxy_ssl.rs`), set here per stream level and finished here. Parsing and
//! checks only.

use std::time::Duration;

use super::build::{
    Args, Builder, MAIN, Node, SSRV, STREAM, Spec, duplicate, not_here, number, size_arg, time_arg,
};
use super::model::*;
use super::proxy::UpstreamB;
use super::tree::Directive;
use super::vars;
use super::{ConfError, Src};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "stream",
        ctx: MAIN,
        args: Args::Exactly(0),
        block: true,
        set: set_stream,
    },
    Spec {
        name: "upstream",
        ctx: STREAM,
        args: Args::Exactly(1),
        block: true,
        set: set_upstream,
    },
    Spec {
        name: "server",
        ctx: STREAM,
        args: Args::Exactly(0),
        block: true,
        set: set_server,
    },
    Spec {
        name: "listen",
        ctx: SSRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_listen,
    },
    Spec {
        name: "proxy_pass",
        ctx: SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_proxy_pass,
    },
    Spec {
        name: "return",
        ctx: SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_return,
    },
    Spec {
        name: "proxy_connect_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_connect_race",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_next_upstream",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_next_upstream_tries",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_next_upstream_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_responses",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_requests",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_half_close",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_ssl",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "ssl_preread",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "preread_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "preread_buffer_size",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_protocol",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
    Spec {
        name: "proxy_protocol_timeout",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_setting,
    },
];

/// Settings a stream server takes from the stream level when it has none.
#[derive(Default, Clone)]
pub(super) struct Settings {
    connect_timeout: Option<Duration>,
    race: Option<Option<Duration>>,
    timeout: Option<Duration>,
    next_upstream: Option<bool>,
    tries: Option<u32>,
    next_timeout: Option<Duration>,
    half_close: Option<bool>,
    responses: Option<u32>,
    requests: Option<u32>,
    proxy_ssl: Option<bool>,
    ssl_preread: Option<bool>,
    preread_timeout: Option<Duration>,
    preread_buffer_size: Option<u64>,
    proxy_protocol: Option<bool>,
    proxy_protocol_timeout: Option<Duration>,
}

#[derive(Default)]
pub(super) struct StreamB {
    servers: Vec<StreamServerB>,
    upstreams: Vec<UpstreamB>,
    settings: Settings,
    pub(super) resolver: Option<Resolver>,
    pub(super) resolver_timeout: Option<Duration>,
    pub(super) access_log: Option<Vec<super::loc::AccessLog>>,
    /// The `ssl_*` directives.
    pub(super) ssl: super::ssl::SslB,
    /// The `proxy_ssl_*` directives (the http location settings' fields).
    pub(super) proxy_ssl: super::loc::LocB,
    /// `match` blocks and `health_check_timeout`.
    pub(super) matches: Vec<std::sync::Arc<super::health::Match>>,
    pub(super) health_check_timeout: Option<Duration>,
    /// `proxy_bind`, `proxy_buffer_size`, the rates (`stream_more.rs`).
    more: super::stream_more::MoreB,
}

impl StreamB {
    pub(super) fn more_b(&mut self) -> &mut super::stream_more::MoreB {
        &mut self.more
    }
}

impl StreamServerB {
    pub(super) fn more_b(&mut self) -> &mut super::stream_more::MoreB {
        &mut self.more
    }
}

pub(super) struct StreamServerB {
    pub(super) access_log: Option<Vec<super::loc::AccessLog>>,
    pub(super) ssl: super::ssl::SslB,
    pub(super) proxy_ssl: super::loc::LocB,
    listen: Vec<Listen>,
    proxy_pass: Option<(String, Src)>,
    proxy_pass_var: Option<vars::Template>,
    ret: Option<vars::Template>,
    settings: Settings,
    pub(super) health_check: Option<super::health::HealthCheckB>,
    pub(super) health_check_timeout: Option<Duration>,
    more: super::stream_more::MoreB,
    src: Src,
}

fn set_stream(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Main(m) = n else {
        return Err(not_here(d));
    };
    if m.stream.is_some() {
        return Err(duplicate(d));
    }
    let mut st = StreamB::default();
    let _scope = vars::in_stream();
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::Stream(&mut st),
        STREAM,
    )?;
    m.stream = Some(st);
    Ok(())
}

fn set_upstream(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Stream(st) = n else {
        return Err(not_here(d));
    };
    let u = super::proxy::new_upstream(b, d, &st.upstreams, true)?;
    st.upstreams.push(u);
    Ok(())
}

fn set_server(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Stream(st) = n else {
        return Err(not_here(d));
    };
    let mut s = StreamServerB {
        access_log: None,
        ssl: Default::default(),
        proxy_ssl: Default::default(),
        listen: Vec::new(),
        proxy_pass: None,
        proxy_pass_var: None,
        ret: None,
        settings: Settings::default(),
        health_check: None,
        health_check_timeout: None,
        more: Default::default(),
        src: d.src.clone(),
    };
    b.walk(
        d.block.as_deref().unwrap_or_default(),
        &mut Node::StreamServer(&mut s),
        SSRV,
    )?;
    st.servers.push(s);
    Ok(())
}

fn set_listen(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::StreamServer(s) = n else {
        return Err(not_here(d));
    };
    let addrs =
        super::listen_opts::stream_addrs(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    let mut reuseport = false;
    let mut ssl = false;
    let mut proxy_protocol = false;
    let mut backlog = 511;
    let mut sock = super::listen_opts::SockParams::default();
    let mut udp = false;
    let mut backlog_set = false;
    for p in &d.args[1..] {
        if super::listen_opts::sock_param(p, &mut sock, false, d)? {
            continue;
        }
        if p == "udp" {
            udp = true;
        } else if p == "reuseport" {
            reuseport = true;
        } else if p == "proxy_protocol" {
            proxy_protocol = true;
        } else if p == "ssl" {
            if matches!(addrs.first(), Some(ListenAddr::Unix(_))) {
                return Err(ConfError::at(
                    "\"ssl\" on unix sockets is not supported yet",
                    &d.src,
                ));
            }
            ssl = true;
        } else if let Some(v) = p.strip_prefix("backlog=") {
            backlog = number::<i32>(v)
                .ok_or_else(|| ConfError::at(format!("invalid backlog \"{v}\""), &d.src))?;
            backlog_set = true;
        } else {
            return Err(ConfError::at(format!("invalid parameter \"{p}\""), &d.src));
        }
    }
    let addrs = if udp {
        super::stream_udp::listen_udp(addrs, ssl, proxy_protocol, backlog_set, &d.src)?
    } else {
        addrs
    };
    for addr in addrs {
        s.listen.push(Listen {
            addr,
            default_server: false,
            reuseport,
            ssl,
            http2: false,
            backlog,
            proxy_protocol,
            sock,
            src: d.src.clone(),
        });
    }
    Ok(())
}

fn set_proxy_pass(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::StreamServer(s) = n else {
        return Err(not_here(d));
    };
    if s.proxy_pass.is_some() || s.proxy_pass_var.is_some() || s.ret.is_some() {
        return Err(duplicate(d));
    }
    let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    if t.as_literal().is_some() {
        s.proxy_pass = Some((d.args[0].clone(), d.src.clone()));
    } else {
        s.proxy_pass_var = Some(t);
    }
    Ok(())
}

fn set_return(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::StreamServer(s) = n else {
        return Err(not_here(d));
    };
    if s.proxy_pass.is_some() || s.proxy_pass_var.is_some() || s.ret.is_some() {
        return Err(duplicate(d));
    }
    s.ret = Some(vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?);
    Ok(())
}

fn set_setting(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let set = match n {
        Node::Stream(st) => &mut st.settings,
        Node::StreamServer(s) => &mut s.settings,
        _ => return Err(not_here(d)),
    };
    let on_off = || match d.args[0].as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(ConfError::at(
            format!(
                "invalid value \"{}\" in \"{}\" directive, it must be \"on\" or \"off\"",
                d.args[0], d.name
            ),
            &d.src,
        )),
    };
    fn once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
        if slot.is_some() {
            return Err(duplicate(d));
        }
        *slot = Some(v);
        Ok(())
    }
    match d.name.as_str() {
        "proxy_connect_timeout" => once(&mut set.connect_timeout, time_arg(d, 0)?, d),
        "proxy_timeout" => once(&mut set.timeout, time_arg(d, 0)?, d),
        "proxy_connect_race" => once(&mut set.race, super::loc_table::race_arg(d)?, d),
        "proxy_next_upstream_timeout" => once(&mut set.next_timeout, time_arg(d, 0)?, d),
        "proxy_next_upstream" => once(&mut set.next_upstream, on_off()?, d),
        "proxy_half_close" => once(&mut set.half_close, on_off()?, d),
        "proxy_responses" => once(&mut set.responses, super::stream_udp::count(d)?, d),
        "proxy_requests" => once(&mut set.requests, super::stream_udp::count(d)?, d),
        "proxy_ssl" => once(&mut set.proxy_ssl, on_off()?, d),
        "ssl_preread" => once(&mut set.ssl_preread, on_off()?, d),
        "preread_timeout" => once(&mut set.preread_timeout, time_arg(d, 0)?, d),
        "preread_buffer_size" => once(&mut set.preread_buffer_size, size_arg(d, 0)?, d),
        "proxy_protocol" => once(&mut set.proxy_protocol, on_off()?, d),
        "proxy_protocol_timeout" => once(&mut set.proxy_protocol_timeout, time_arg(d, 0)?, d),
        _ => {
            let n = number::<u32>(&d.args[0]).ok_or_else(|| {
                ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src)
            })?;
            once(&mut set.tries, n, d)
        }
    }
}

/// The finished `stream` block: upstreams (with zones and resolvers, as in
/// http), servers with their settings merged and `proxy_pass` tied to an
/// upstream (an implicit one for `host:port`).
pub(super) fn finish(
    st: StreamB,
    http: Option<&Http>,
    paths: &super::Paths,
    warnings: &mut Vec<ConfError>,
) -> Result<Stream, ConfError> {
    let mut top = super::loc::LocB {
        resolver: Some(st.resolver.clone()),
        resolver_timeout: st.resolver_timeout,
        ..Default::default()
    };
    if st.resolver.is_none() {
        top.resolver = None;
    }
    let (mut upstreams, zones) = super::proxy::finish_upstreams(st.upstreams, &top)?;
    if let Some(h) = http {
        if let Some(z) = zones
            .iter()
            .find(|z| h.upstreams.zones.iter().any(|hz| hz.name == z.name))
        {
            return Err(ConfError::at(
                format!(
                    "the shared memory zone \"{}\" is already declared for a different use",
                    z.name
                ),
                &z.src,
            ));
        }
    }
    let mut servers = Vec::with_capacity(st.servers.len());
    let mut access_log_paths = Vec::new();
    let mut loaded = super::ssl::Loaded::default();
    let mut profiles = super::proxy_ssl::Profiles::default();
    let defaults = super::loc::Defaults {
        prefix: paths.prefix.clone(),
        combined: super::http::combined(),
    };
    for mut s in st.servers {
        s.ssl.inherit(&st.ssl);
        let ssl_listen = s.listen.iter().find(|l| l.ssl).map(|l| &l.src);
        let ssl = super::ssl::finish(&s.ssl, ssl_listen, &mut loaded, warnings)?;
        let proxy_ssl = match s.settings.proxy_ssl.or(st.settings.proxy_ssl) {
            Some(true) => {
                s.proxy_ssl.inherit(&st.proxy_ssl);
                let conf = s.proxy_ssl.finish(&defaults);
                Some(profiles.make(&conf, &s.src, warnings)?)
            }
            _ => None,
        };
        let limits = {
            let mut l = s.proxy_ssl.clone();
            l.inherit(&st.proxy_ssl);
            l.finish(&defaults)
        };
        let get = |f: fn(&Settings) -> Option<Duration>, default: Duration| {
            f(&s.settings).or(f(&st.settings)).unwrap_or(default)
        };
        let target = match (s.proxy_pass, s.proxy_pass_var, s.ret) {
            (_, _, Some(t)) => StreamTarget::Return(t),
            (_, Some(t), None) => StreamTarget::Dynamic(t),
            (Some((name, src)), None, None) => {
                StreamTarget::Upstream(upstream_for(&name, &src, &mut upstreams)?)
            }
            (None, None, None) => {
                return Err(ConfError::at(
                    "no handler for server (\"proxy_pass\" or \"return\")",
                    &s.src,
                ));
            }
        };
        if let Some(hc) = s.health_check {
            let i = match &target {
                StreamTarget::Upstream(i) => Some(*i),
                _ => None,
            };
            let timeout = s
                .health_check_timeout
                .or(st.health_check_timeout)
                .unwrap_or(Duration::from_secs(5));
            super::health::attach(hc, i.and_then(|i| upstreams.get_mut(i)), &st.matches, |c| {
                c.connect_timeout = timeout;
                c.read_timeout = timeout;
            })?;
        }
        if s.listen.is_empty() {
            return Err(ConfError::at("no \"listen\" is defined for server", &s.src));
        }
        let access_log = s
            .access_log
            .clone()
            .or_else(|| st.access_log.clone())
            .unwrap_or_default();
        for l in &access_log {
            if !access_log_paths.contains(&l.path) {
                access_log_paths.push(l.path.clone());
            }
        }
        let access = s
            .proxy_ssl
            .access_rules
            .clone()
            .or_else(|| st.proxy_ssl.access_rules.clone())
            .unwrap_or_default();
        servers.push(StreamServer {
            access,
            access_log,
            listen: s.listen,
            target,
            proxy_connect_timeout: get(|x| x.connect_timeout, Duration::from_secs(60)),
            proxy_connect_race: s.settings.race.or(st.settings.race).flatten(),
            proxy_timeout: get(|x| x.timeout, Duration::from_secs(600)),
            proxy_next_upstream: s
                .settings
                .next_upstream
                .or(st.settings.next_upstream)
                .unwrap_or(true),
            proxy_next_upstream_tries: s.settings.tries.or(st.settings.tries).unwrap_or(0),
            proxy_next_upstream_timeout: get(|x| x.next_timeout, Duration::ZERO),
            proxy_half_close: s
                .settings
                .half_close
                .or(st.settings.half_close)
                .unwrap_or(false),
            proxy_responses: s.settings.responses.or(st.settings.responses),
            proxy_requests: s.settings.requests.or(st.settings.requests).unwrap_or(0),
            ssl: std::sync::Arc::new(ssl),
            proxy_ssl,
            ssl_preread: s
                .settings
                .ssl_preread
                .or(st.settings.ssl_preread)
                .unwrap_or(false),
            preread_timeout: get(|x| x.preread_timeout, Duration::from_secs(30)),
            preread_buffer_size: s
                .settings
                .preread_buffer_size
                .or(st.settings.preread_buffer_size)
                .map_or(16 * 1024, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            limit_conn: limits.limit_conn,
            limit_conn_log_level: limits.limit_conn_log_level,
            limit_conn_dry_run: limits.limit_conn_dry_run,
            proxy_protocol_timeout: get(|x| x.proxy_protocol_timeout, Duration::from_secs(30)),
            proxy_protocol: s
                .settings
                .proxy_protocol
                .or(st.settings.proxy_protocol)
                .unwrap_or(false),
            set_real_ip_from: limits.set_real_ip_from,
            more: s
                .more
                .finish(&st.more, st.resolver.as_ref(), st.resolver_timeout),
            src: s.src,
        });
    }
    Ok(Stream {
        servers,
        upstreams: super::model::UpstreamBlocks {
            list: upstreams.into_iter().map(std::sync::Arc::new).collect(),
            zones,
            time_buckets: Vec::new(),
        },
        access_log_paths,
        resolver: st.resolver.map(|r| Resolver {
            timeout: st.resolver_timeout.unwrap_or(r.timeout),
            ..r
        }),
    })
}

/// `proxy_pass NAME` (an upstream) or `proxy_pass HOST:PORT` (resolved now).
fn upstream_for(name: &str, src: &Src, upstreams: &mut Vec<Upstream>) -> Result<usize, ConfError> {
    if let Some(i) = upstreams
        .iter()
        .position(|u| !u.implicit && u.name.eq_ignore_ascii_case(name))
    {
        return Ok(i);
    }
    if let Some(i) = upstreams.iter().position(|u| u.implicit && u.name == name) {
        return Ok(i);
    }
    if !name.starts_with("unix:") && !name.contains(':') {
        return Err(ConfError::at(
            format!("no port in upstream \"{name}\""),
            src,
        ));
    }
    let addrs = super::proxy::parse_peer(name, src, &format!("upstream \"{name}\""))?;
    upstreams.push(Upstream {
        name: name.to_string(),
        servers: vec![UpstreamServer::new(name.to_string(), addrs)],
        balancer: Balancer::RoundRobin,
        keepalive: super::proxy::default_keepalive(),
        ping: None,
        zone: None,
        resolver: None,
        state: None,
        implicit: true,
        health: None,
        queue: None,
        sticky: None,
        src: src.clone(),
    });
    Ok(upstreams.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use crate::conf::model::StreamTarget;
    use std::time::Duration;

    #[test]
    fn stream_block() {
        let (c, _) = try_build(
            "events {} stream { proxy_timeout 5s; \
             upstream b { zone zs 64k; server 127.0.0.1:9001; server 127.0.0.1:9002; } \
             server { listen 127.0.0.1:9000; proxy_pass b; proxy_connect_timeout 1s; } \
             server { listen 127.0.0.1:9003; proxy_pass 127.0.0.1:9004; proxy_half_close on; } \
             server { listen 127.0.0.1:9005; return \"hi\"; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        assert_eq!(st.servers.len(), 3);
        assert!(matches!(st.servers[0].target, StreamTarget::Upstream(0)));
        assert_eq!(st.servers[0].proxy_timeout, Duration::from_secs(5));
        assert_eq!(st.servers[0].proxy_connect_timeout, Duration::from_secs(1));
        assert!(st.servers[0].proxy_next_upstream && !st.servers[0].proxy_half_close);
        assert!(st.servers[1].proxy_half_close);
        assert!(matches!(st.servers[1].target, StreamTarget::Upstream(1)));
        assert!(st.upstreams.list[1].implicit);
        assert_eq!(st.upstreams.zones[0].name, "zs");
        assert!(
            err("events {} stream { server { listen 127.0.0.1:1; proxy_pass nope; } }")
                .contains("no port in upstream \"nope\"")
        );
        assert!(
            err("events {} stream { server { listen 127.0.0.1:1; } }")
                .contains("no handler for server")
        );
        assert!(err("events {} stream { server { listen 127.0.0.1:1; proxy_pass 127.0.0.1:2; return x; } }")
            .contains("is duplicate"));
        assert!(
            err("events {} stream { proxy_half_close maybe; }")
                .contains("it must be \"on\" or \"off\"")
        );
    }

    #[test]
    fn tls_settings_merge_from_the_stream_level() {
        let (c, _) = try_build(
            "events {} stream { ssl_protocols TLSv1.3; ssl_handshake_timeout 5s; \
             proxy_ssl_server_name on; preread_timeout 2s; \
             server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:9001; proxy_ssl on; \
             proxy_ssl_name backend.example; ssl_preread on; preread_buffer_size 4k; } \
             server { listen 127.0.0.1:9002; proxy_pass 127.0.0.1:9001; \
             ssl_handshake_timeout 1s; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        let (a, b) = (&st.servers[0], &st.servers[1]);
        assert_eq!(a.ssl.protocols, vec![crate::conf::ssl::Protocol::Tls13]);
        assert_eq!(a.ssl.handshake_timeout, Duration::from_secs(5));
        assert_eq!(b.ssl.handshake_timeout, Duration::from_secs(1));
        let p = a.proxy_ssl.as_ref().expect("proxy_ssl");
        assert!(p.server_name && p.name.is_some() && !p.verify);
        assert!(b.proxy_ssl.is_none());
        assert!(a.ssl_preread && !b.ssl_preread);
        assert_eq!(
            (a.preread_timeout, a.preread_buffer_size),
            (Duration::from_secs(2), 4096)
        );
        assert_eq!(
            (b.preread_timeout, b.preread_buffer_size),
            (Duration::from_secs(2), 16384)
        );
        assert!(!a.listen[0].ssl);
    }

    #[test]
    fn tls_errors() {
        assert_eq!(
            err("events {}\nstream {\nserver {\nlisten 127.0.0.1:1 ssl;\nreturn x;\n}\n}"),
            "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nlisten unix:/tmp/x.sock ssl;\nreturn x;\n}\n}"),
            "\"ssl\" on unix sockets is not supported yet in /t.conf:4"
        );
        assert_eq!(
            err(
                "events {}\nstream {\nproxy_ssl_verify on;\nserver {\nlisten 127.0.0.1:1;\nproxy_pass 127.0.0.1:2;\nproxy_ssl on;\n}\n}"
            ),
            "no proxy_ssl_trusted_certificate for proxy_ssl_verify in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nssl_preread maybe;\n}"),
            "invalid value \"maybe\" in \"ssl_preread\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\npreread_buffer_size 1x;\n}"),
            "\"preread_buffer_size\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nssl_verify_client maybe;\n}\n}"),
            "invalid value \"maybe\" in \"ssl_verify_client\" directive, it must be \"on\", \"off\", \"optional\" or \"optional_no_ca\" in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_ssl on;\nproxy_ssl off;\n}"),
            "\"proxy_ssl\" directive is duplicate in /t.conf:4"
        );
    }

    #[test]
    fn proxy_protocol_settings() {
        let (c, _) = try_build(
            "events {} stream { proxy_protocol_timeout 5s; set_real_ip_from 10.0.0.0/8; \
             server { listen 127.0.0.1:9000 proxy_protocol; proxy_pass 127.0.0.1:9001; \
             proxy_protocol on; } \
             server { listen 127.0.0.1:9002; proxy_pass 127.0.0.1:9001; \
             proxy_protocol_timeout 1s; set_real_ip_from unix:; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        let (a, b) = (&st.servers[0], &st.servers[1]);
        assert!(a.listen[0].proxy_protocol && !b.listen[0].proxy_protocol);
        assert!(a.proxy_protocol && !b.proxy_protocol);
        assert_eq!(a.proxy_protocol_timeout, Duration::from_secs(5));
        assert_eq!(b.proxy_protocol_timeout, Duration::from_secs(1));
        assert_eq!(a.set_real_ip_from.len(), 1);
        assert!(a.set_real_ip_from[0].contains(Some("10.1.2.3".parse().unwrap())));
        assert!(b.set_real_ip_from[0].contains(None));
        let (c, _) = try_build(
            "events {} stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:9001; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        assert_eq!(
            st.servers[0].proxy_protocol_timeout,
            Duration::from_secs(30)
        );
        assert!(!st.servers[0].proxy_protocol);
        assert_eq!(
            err("events {}\nstream {\nproxy_protocol yes;\n}"),
            "invalid value \"yes\" in \"proxy_protocol\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nproxy_protocol_timeout 1x;\n}\n}"),
            "\"proxy_protocol_timeout\" directive invalid value in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nset_real_ip_from 1.2.3.4/40;\n}"),
            "invalid parameter \"1.2.3.4/40\" in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nlisten 127.0.0.1:1 proxy_protocolx;\n}\n}"),
            "invalid parameter \"proxy_protocolx\" in /t.conf:4"
        );
    }
}
