//! More stream proxy settings, as nginx's ngx_stream_proxy_module:
//! `proxy_bind ADDRESS | off`, `proxy_buffer_size SIZE` (16k),
//! `proxy_download_rate` / `proxy_upload_rate RATE` (0: no limit; variables
//! allowed as in nginx 1.27) and `proxy_socket_keepalive on | off` (off).
//! `ssl_alpn PROTOCOL ...` (the ALPN protocols a `listen ... ssl` server
//! accepts, as nginx 1.21.4). `resolver` and `resolver_timeout` may be given per stream server too
//! (for `proxy_pass` with variables). And ngx_stream_set_module's `set $NAME VALUE` (stream server only, run
//! in order when a session starts, after realip, before limit_conn). Stream and stream server level; a server takes
//! the stream level's value unless it sets its own. Parsing only.

use super::ConfError;
use super::build::{Args, Builder, Node, SSRV, STREAM, Spec, invalid_value, not_here, set_once};
use super::proxy_more::Bind;
use super::tree::Directive;
use super::values::parse_size;
use super::vars::{self, Template};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "proxy_bind",
        ctx: STREAM | SSRV,
        args: Args::Range(1, 2),
        block: false,
        set: set_bind,
    },
    spec("proxy_buffer_size"),
    spec("proxy_download_rate"),
    spec("proxy_upload_rate"),
    Spec {
        name: "ssl_alpn",
        ctx: STREAM | SSRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_alpn,
    },
    Spec {
        name: "set",
        ctx: SSRV,
        args: Args::Exactly(2),
        block: false,
        set: set_set,
    },
    Spec {
        name: "proxy_socket_keepalive",
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
];

const fn spec(name: &'static str) -> Spec {
    Spec {
        name,
        ctx: STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_size,
    }
}

/// What one level (stream or stream server) set.
#[derive(Default, Clone)]
pub(super) struct MoreB {
    bind: Option<Bind>,
    buffer_size: Option<u64>,
    download_rate: Option<Template>,
    upload_rate: Option<Template>,
    socket_keepalive: Option<bool>,
    sets: Vec<(String, Template)>,
    alpn: Option<Vec<String>>,
    /// A stream server's own `resolver` and `resolver_timeout`.
    pub(super) resolver: Option<super::model::Resolver>,
    pub(super) resolver_timeout: Option<std::time::Duration>,
}

/// A stream server's settings from this file, merged.
#[derive(Debug, Clone)]
pub struct StreamMore {
    /// `proxy_bind`: the local address of upstream connections.
    pub proxy_bind: Bind,
    /// `proxy_buffer_size`: each direction's relay buffer (16k).
    pub proxy_buffer_size: usize,
    /// `proxy_download_rate`: bytes per second read from the upstream.
    pub proxy_download_rate: Option<Template>,
    /// `proxy_upload_rate`: bytes per second read from the client.
    pub proxy_upload_rate: Option<Template>,
    /// `proxy_socket_keepalive`: SO_KEEPALIVE on upstream connections.
    pub proxy_socket_keepalive: bool,
    /// `set $NAME VALUE` lines, in order (the server's own).
    pub set: Vec<(String, Template)>,
    /// `ssl_alpn`: the ALPN protocols offered (none: no ALPN).
    pub ssl_alpn: Vec<String>,
    /// The resolver for `proxy_pass` with variables: the server's, else the
    /// stream block's, with the server's `resolver_timeout` if it has one.
    pub resolver: Option<super::model::Resolver>,
}

impl Default for StreamMore {
    fn default() -> Self {
        StreamMore {
            proxy_bind: Bind::Off,
            proxy_buffer_size: 16 * 1024,
            proxy_download_rate: None,
            proxy_upload_rate: None,
            proxy_socket_keepalive: false,
            set: Vec::new(),
            ssl_alpn: Vec::new(),
            resolver: None,
        }
    }
}

impl MoreB {
    /// The server's values, else the stream level's, else nginx's defaults.
    pub(super) fn finish(
        &self,
        top: &MoreB,
        stream_resolver: Option<&super::model::Resolver>,
        stream_timeout: Option<std::time::Duration>,
    ) -> StreamMore {
        let d = StreamMore::default();
        let resolver = self
            .resolver
            .as_ref()
            .or(stream_resolver)
            .map(|r| super::model::Resolver {
                timeout: self
                    .resolver_timeout
                    .or(stream_timeout)
                    .unwrap_or(r.timeout),
                ..r.clone()
            });
        StreamMore {
            proxy_bind: self
                .bind
                .clone()
                .or_else(|| top.bind.clone())
                .unwrap_or(d.proxy_bind),
            proxy_buffer_size: self
                .buffer_size
                .or(top.buffer_size)
                .map_or(d.proxy_buffer_size, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            proxy_download_rate: self
                .download_rate
                .clone()
                .or_else(|| top.download_rate.clone()),
            proxy_upload_rate: self.upload_rate.clone().or_else(|| top.upload_rate.clone()),
            proxy_socket_keepalive: self
                .socket_keepalive
                .or(top.socket_keepalive)
                .unwrap_or(false),
            set: self.sets.clone(),
            ssl_alpn: self
                .alpn
                .clone()
                .or_else(|| top.alpn.clone())
                .unwrap_or_default(),
            resolver,
        }
    }
}

fn more<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut MoreB, ConfError> {
    match n {
        Node::Stream(st) => Ok(st.more_b()),
        Node::StreamServer(s) => Ok(s.more_b()),
        _ => Err(not_here(d)),
    }
}

/// As http's `proxy_bind` (`conf::proxy_more`): `transparent` is refused.
fn set_bind(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if d.args.len() == 2 {
        if d.args[1] == "transparent" {
            return Err(ConfError::at(
                "\"proxy_bind ... transparent\" is not supported (it needs CAP_NET_ADMIN and IP_TRANSPARENT routing; sluice binds ordinary local addresses only)",
                &d.src,
            ));
        }
        return Err(ConfError::at(
            format!("invalid parameter \"{}\"", d.args[1]),
            &d.src,
        ));
    }
    let v = if d.args[0] == "off" {
        Bind::Off
    } else {
        let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
        if let Some(a) = t.as_literal() {
            if a.parse::<std::net::IpAddr>().is_err() {
                return Err(ConfError::at(format!("invalid address \"{a}\""), &d.src));
            }
        }
        Bind::Addr(t)
    };
    set_once(&mut more(n, d)?.bind, v, d)
}

/// As http's `set`: a name sluice provides itself cannot be set.
fn set_set(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Some(name) = d.args[0].strip_prefix('$').filter(|v| !v.is_empty()) else {
        return Err(ConfError::at(
            format!("invalid variable name \"{}\"", d.args[0]),
            &d.src,
        ));
    };
    if vars::is_builtin(name) {
        return Err(ConfError::at(
            format!("the duplicate \"{name}\" variable"),
            &d.src,
        ));
    }
    let value = vars::compile(&d.args[1]).map_err(|m| ConfError::at(m, &d.src))?;
    more(n, d)?.sets.push((name.to_string(), value));
    Ok(())
}

fn set_alpn(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    // A protocol name is 1 to 255 bytes on the wire.
    if let Some(p) = d.args.iter().find(|p| p.is_empty() || p.len() > 255) {
        return Err(ConfError::at(
            format!("invalid value \"{p}\" in \"ssl_alpn\" directive"),
            &d.src,
        ));
    }
    set_once(&mut more(n, d)?.alpn, d.args.clone(), d)
}

fn set_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = super::build::flag(d)?;
    set_once(&mut more(n, d)?.socket_keepalive, v, d)
}

/// `proxy_buffer_size` takes a plain size; the rates a size with variables
/// (a value that is no size when a session starts counts as 0, no limit).
fn set_size(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let m = more(n, d)?;
    if d.name == "proxy_buffer_size" {
        let v = parse_size(&d.args[0])
            .filter(|&v| v > 0)
            .ok_or_else(|| invalid_value(d))?;
        return set_once(&mut m.buffer_size, v, d);
    }
    let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    if let Some(lit) = t.as_literal() {
        if parse_size(lit).is_none() {
            return Err(invalid_value(d));
        }
    }
    let slot = if d.name == "proxy_download_rate" {
        &mut m.download_rate
    } else {
        &mut m.upload_rate
    };
    set_once(slot, t, d)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    #[test]
    fn merge_and_defaults() {
        let (c, _) = try_build(
            "events {} stream { proxy_buffer_size 4k; proxy_download_rate 16k; ssl_alpn h2 http/1.1; \
             server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:9001; \
             proxy_bind 127.0.0.2; proxy_upload_rate $remote_port; \
             proxy_socket_keepalive on; set $up \"x$remote_addr\"; } \
             server { listen 127.0.0.1:9002; proxy_pass 127.0.0.1:9001; \
             proxy_buffer_size 1m; proxy_download_rate 0; ssl_alpn x; } }",
        )
        .expect("config");
        let st = c.stream.expect("stream");
        let (a, b) = (&st.servers[0].more, &st.servers[1].more);
        assert_eq!(a.proxy_buffer_size, 4096);
        assert_eq!(b.proxy_buffer_size, 1 << 20);
        assert!(matches!(&a.proxy_bind, Bind::Addr(t) if t.as_literal() == Some("127.0.0.2")));
        assert!(matches!(b.proxy_bind, Bind::Off));
        let lit = |t: &Option<Template>| t.as_ref().and_then(|t| t.as_literal().map(String::from));
        assert_eq!(lit(&a.proxy_download_rate).as_deref(), Some("16k"));
        assert_eq!(lit(&b.proxy_download_rate).as_deref(), Some("0"));
        assert!(a.proxy_upload_rate.is_some() && b.proxy_upload_rate.is_none());
        assert!(a.proxy_socket_keepalive && !b.proxy_socket_keepalive);
        assert_eq!(a.set.len(), 1);
        assert_eq!(a.set[0].0, "up");
        assert_eq!(a.ssl_alpn, ["h2", "http/1.1"]);
        assert_eq!(b.ssl_alpn, ["x"]);
        let (c, _) = try_build(
            "events {} stream { server { listen 127.0.0.1:9000; proxy_pass 127.0.0.1:9001; } }",
        )
        .expect("config");
        let d = &c.stream.expect("stream").servers[0].more;
        assert_eq!(d.proxy_buffer_size, 16384);
        assert!(d.proxy_download_rate.is_none() && matches!(d.proxy_bind, Bind::Off));
    }

    #[test]
    fn errors() {
        assert_eq!(
            err("events {}\nstream {\nproxy_bind 127.0.0.1 transparent;\n}"),
            "\"proxy_bind ... transparent\" is not supported (it needs CAP_NET_ADMIN and IP_TRANSPARENT routing; sluice binds ordinary local addresses only) in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nproxy_bind nowhere;\n}\n}"),
            "invalid address \"nowhere\" in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_bind 1.2.3.4 x;\n}"),
            "invalid parameter \"x\" in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_buffer_size 0;\n}"),
            "\"proxy_buffer_size\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_download_rate fast;\n}"),
            "\"proxy_download_rate\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_upload_rate 1k;\nproxy_upload_rate 2k;\n}"),
            "\"proxy_upload_rate\" directive is duplicate in /t.conf:4"
        );
        assert!(
            err("events {}\nstream {\nproxy_socket_keepalive yes;\n}").ends_with("in /t.conf:3")
        );
        assert_eq!(
            err("events {}\nstream {\nserver {\nset $remote_addr x;\n}\n}"),
            "the duplicate \"remote_addr\" variable in /t.conf:4"
        );
        assert_eq!(
            err("events {}\nstream {\nset $a x;\n}"),
            "\"set\" directive is not allowed here in /t.conf:3"
        );
        assert_eq!(
            err("events {}\nstream {\nproxy_bind $nope;\n}"),
            "unknown \"nope\" variable in /t.conf:3"
        );
    }
}
