//! `sticky cookie|route|learn` in an http `upstream` block (nginx's
//! ngx_http_upstream_sticky_module, open source since 1.29.6): the
//! directive's parameters with nginx's checks and messages. The `route=`
//! parameter of `server` is read in `proxy.rs`; the run time is
//! `upstream::sticky`. No I/O.

use std::time::Duration;

use super::build::{Args, Builder, Node, Spec, UPS, not_here};
use super::tree::Directive;
use super::vars::{self, Template};
use super::{ConfError, values};

pub(super) const TABLE: &[Spec] = &[Spec {
    name: "sticky",
    ctx: UPS,
    args: Args::AtLeast(2),
    block: false,
    set: set_sticky,
}];

/// How requests are bound to a peer.
#[derive(Debug, Clone)]
pub enum Sticky {
    /// `sticky cookie NAME ...`: sluice sets a cookie naming the peer.
    Cookie(StickyCookie),
    /// `sticky route $var ...`: the first non-empty variable names the
    /// peer by its `route=`.
    Route(Vec<Template>),
    /// `sticky learn ...`: sessions the upstream starts, kept in a zone.
    Learn(StickyLearn),
}

impl Sticky {
    /// The variables whose first non-empty value names a peer (cookie,
    /// route) or a session (learn).
    pub fn lookup(&self) -> &[Template] {
        match self {
            Sticky::Cookie(c) => std::slice::from_ref(&c.lookup),
            Sticky::Route(v) => v,
            Sticky::Learn(l) => &l.lookup,
        }
    }
}

/// `expires=`: a time, or `max` (31 Dec 2037 23:55:55 GMT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieExpires {
    Max,
    After(Duration),
}

#[derive(Debug, Clone)]
pub struct StickyCookie {
    pub name: String,
    /// `$cookie_NAME`, where a returning client brings it.
    pub lookup: Template,
    pub expires: Option<CookieExpires>,
    pub domain: Option<Template>,
    pub path: Option<String>,
    pub httponly: bool,
    pub secure: bool,
    /// `samesite=strict|lax|none|$variable`.
    pub samesite: Option<Template>,
}

/// A `create=` variable. `$upstream_cookie_NAME` (a cookie the upstream
/// sets) is read here from the response's `Set-Cookie` lines.
#[derive(Debug, Clone)]
pub enum Create {
    UpstreamCookie(String),
    Var(Template),
}

#[derive(Debug, Clone)]
pub struct StickyLearn {
    pub create: Vec<Create>,
    pub lookup: Vec<Template>,
    pub zone: String,
    pub size: u64,
    /// Sessions not used for this long are removed (10m by default).
    pub timeout: Duration,
    /// `header`: learn once the response head arrived, not at its end.
    pub header: bool,
    /// `sync`: accepted; sluice has no zone_sync (see the man page).
    pub sync: bool,
}

/// The smallest learn zone: nginx's 8 pages.
const MIN_ZONE: u64 = 32 * 1024;

/// The value `samesite=` may have (case-insensitive).
pub fn samesite_ok(v: &str) -> bool {
    ["strict", "lax", "none"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(v))
}

fn set_sticky(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Upstream(u) = n else {
        return Err(not_here(d));
    };
    if u.stream {
        return Err(not_here(d));
    }
    if u.sticky.is_some() {
        return Err(ConfError::at("\"sticky\" directive is duplicate", &d.src));
    }
    let err = |m: String| ConfError::at(m, &d.src);
    // nginx: what the handler returns reads `"sticky" directive ...`; what
    // it logs itself (unknown parameters, variables) stands alone.
    let returned = |m: String| {
        let alone = ["unknown ", "invalid variable", "the closing bracket"];
        if alone.iter().any(|p| m.starts_with(p)) {
            ConfError::at(m, &d.src)
        } else {
            ConfError::at(format!("\"sticky\" directive {m}"), &d.src)
        }
    };
    let sticky = match d.args[0].as_str() {
        "cookie" => Sticky::Cookie(cookie(&d.args[1..]).map_err(returned)?),
        "route" => {
            let mut list = Vec::new();
            for a in &d.args[1..] {
                if !a.starts_with('$') {
                    return Err(err(format!("invalid variable name \"{a}\"")));
                }
                list.push(vars::compile(a).map_err(err)?);
            }
            Sticky::Route(list)
        }
        "learn" => Sticky::Learn(learn(&d.args[1..]).map_err(returned)?),
        other => return Err(err(format!("unknown parameter \"{other}\""))),
    };
    u.sticky = Some((sticky, d.src.clone()));
    Ok(())
}

fn cookie(args: &[String]) -> Result<StickyCookie, String> {
    let name = &args[0];
    if name.is_empty() {
        return Err("empty cookie name".into());
    }
    // A name that could not come back in a Cookie header.
    if name
        .bytes()
        .any(|b| b <= b' ' || b >= 0x7f || b"()<>@,;:\\\"/[]?={}".contains(&b))
    {
        return Err(format!("invalid cookie name \"{name}\""));
    }
    let mut c = StickyCookie {
        name: name.clone(),
        lookup: vars::compile(&format!("$cookie_{name}"))?,
        expires: None,
        domain: None,
        path: None,
        httponly: false,
        secure: false,
        samesite: None,
    };
    let dup = |p: &str| format!("parameter \"{p}\" is duplicate");
    for a in &args[1..] {
        if let Some(v) = a.strip_prefix("domain=") {
            if c.domain.is_some() {
                return Err(dup("domain"));
            }
            if v.is_empty() {
                return Err("no value for \"domain\"".into());
            }
            c.domain = Some(vars::compile(v)?);
        } else if let Some(v) = a.strip_prefix("path=") {
            if c.path.is_some() {
                return Err(dup("path"));
            }
            if v.is_empty() {
                return Err("no value for \"path\"".into());
            }
            c.path = Some(v.to_string());
        } else if let Some(v) = a.strip_prefix("expires=") {
            if c.expires.is_some() {
                return Err(dup("expires"));
            }
            c.expires = Some(if v == "max" {
                CookieExpires::Max
            } else {
                CookieExpires::After(
                    values::parse_time(v, false).ok_or("invalid \"expires\" parameter value")?,
                )
            });
        } else if a == "httponly" {
            if c.httponly {
                return Err(dup("httponly"));
            }
            c.httponly = true;
        } else if a == "secure" {
            if c.secure {
                return Err(dup("secure"));
            }
            c.secure = true;
        } else if let Some(v) = a.strip_prefix("samesite=") {
            if c.samesite.is_some() {
                return Err(dup("samesite"));
            }
            let t = vars::compile(v)?;
            if t.as_literal().is_some() && !samesite_ok(v) {
                return Err("invalid \"samesite\" parameter value".into());
            }
            c.samesite = Some(t);
        } else {
            return Err(format!("unknown parameter \"{a}\""));
        }
    }
    Ok(c)
}

fn learn(args: &[String]) -> Result<StickyLearn, String> {
    let mut zone: Option<(String, u64)> = None;
    let mut timeout = None;
    let (mut create, mut lookup) = (Vec::new(), Vec::new());
    let (mut header, mut sync) = (false, false);
    for a in args {
        if let Some(v) = a.strip_prefix("zone=") {
            if zone.is_some() {
                return Err("duplicate zone".into());
            }
            let (name, size) = v.split_once(':').ok_or("zone size is not specified")?;
            if name.is_empty() {
                return Err("zone name is not specified".into());
            }
            let size = values::parse_size(size).ok_or("invalid zone size")?;
            if size < MIN_ZONE {
                return Err("zone is too small".into());
            }
            zone = Some((name.to_string(), size));
        } else if let Some(v) = a.strip_prefix("timeout=") {
            if timeout.is_some() {
                return Err("duplicate timeout".into());
            }
            timeout = Some(
                values::parse_time(v, true)
                    .filter(|t| !t.is_zero())
                    .ok_or("invalid timeout")?,
            );
        } else if let Some(v) = a.strip_prefix("create=") {
            if !v.starts_with('$') {
                return Err("missing variable in the \"create\" parameter".into());
            }
            create.push(match v.strip_prefix("$upstream_cookie_") {
                Some(name) if !name.is_empty() && !name.contains(['$', '{']) => {
                    Create::UpstreamCookie(name.to_string())
                }
                _ => Create::Var(vars::compile(v)?),
            });
        } else if let Some(v) = a.strip_prefix("lookup=") {
            if !v.starts_with('$') {
                return Err("missing variable in the \"lookup\" parameter".into());
            }
            lookup.push(vars::compile(v)?);
        } else if a == "header" {
            header = true;
        } else if a == "sync" {
            sync = true;
        } else {
            return Err(format!("unknown parameter \"{a}\""));
        }
    }
    if lookup.is_empty() {
        return Err("\"lookup\" parameter is not specified".into());
    }
    if create.is_empty() {
        return Err("\"create\" parameter is not specified".into());
    }
    let (zone, size) = zone.ok_or("\"zone\" parameter is not specified")?;
    Ok(StickyLearn {
        create,
        lookup,
        zone,
        size,
        timeout: timeout.unwrap_or(Duration::from_secs(600)),
        header,
        sync,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    fn ups(body: &str) -> String {
        format!(
            "events {{}} http {{ upstream u {{ server 127.0.0.1:1 route=a; server 127.0.0.1:2; {body} }} \
             server {{ listen 127.0.0.1:1; location / {{ proxy_pass http://u; }} }} }}"
        )
    }

    #[test]
    fn cookie_parameters() {
        let (c, _) = try_build(&ups(
            "sticky cookie srv_id expires=1h domain=.example.com path=/ httponly secure samesite=lax;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let Some(Sticky::Cookie(k)) = &u.sticky else {
            panic!("no cookie");
        };
        assert_eq!(k.name, "srv_id");
        assert_eq!(
            k.expires,
            Some(CookieExpires::After(Duration::from_secs(3600)))
        );
        assert_eq!(k.path.as_deref(), Some("/"));
        assert!(k.httponly && k.secure);
        assert_eq!(u.servers[0].route.as_deref(), Some("a"));
        assert_eq!(u.servers[1].route, None);
    }

    #[test]
    fn learn_defaults() {
        let (c, _) = try_build(&ups(
            "sticky learn create=$upstream_cookie_sid lookup=$cookie_sid zone=s:1m;",
        ))
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let Some(Sticky::Learn(l)) = &u.sticky else {
            panic!("no learn");
        };
        assert_eq!(l.timeout, Duration::from_secs(600));
        assert_eq!(l.size, 1 << 20);
        assert!(matches!(&l.create[0], Create::UpstreamCookie(n) if n == "sid"));
        assert!(!l.header);
    }

    #[test]
    fn errors_as_nginx_words_them() {
        for (text, want) in [
            ("sticky cookie;", "invalid number of arguments"),
            ("sticky foo bar;", "unknown parameter \"foo\""),
            (
                "sticky cookie a; sticky cookie b;",
                "\"sticky\" directive is duplicate",
            ),
            (
                "sticky cookie a expires=x;",
                "\"sticky\" directive invalid \"expires\" parameter value",
            ),
            (
                "sticky cookie a samesite=bad;",
                "\"sticky\" directive invalid \"samesite\" parameter value",
            ),
            (
                "sticky cookie a path=/ path=/x;",
                "\"sticky\" directive parameter \"path\" is duplicate",
            ),
            (
                "sticky cookie a domain=;",
                "\"sticky\" directive no value for \"domain\"",
            ),
            ("sticky cookie a foo;", "unknown parameter \"foo\""),
            (
                "sticky route cookie_x;",
                "invalid variable name \"cookie_x\"",
            ),
            (
                "sticky learn lookup=$cookie_a zone=z:1m;",
                "\"sticky\" directive \"create\" parameter is not specified",
            ),
            (
                "sticky learn create=$cookie_a zone=z:1m;",
                "\"sticky\" directive \"lookup\" parameter is not specified",
            ),
            (
                "sticky learn create=$cookie_a lookup=$cookie_a;",
                "\"sticky\" directive \"zone\" parameter is not specified",
            ),
            (
                "sticky learn create=$cookie_a lookup=$cookie_a zone=z:1k;",
                "\"sticky\" directive zone is too small",
            ),
            (
                "sticky learn create=$cookie_a lookup=$cookie_a zone=z;",
                "\"sticky\" directive zone size is not specified",
            ),
            (
                "sticky learn create=x lookup=$cookie_a zone=z:1m;",
                "\"sticky\" directive missing variable in the \"create\"",
            ),
            (
                "sticky learn create=$cookie_a lookup=$cookie_a zone=z:1m timeout=0;",
                "\"sticky\" directive invalid timeout",
            ),
        ] {
            let e = err(&ups(text));
            assert!(
                e.contains(&format!("[emerg] {want}"))
                    || e.contains(&format!(": {want}"))
                    || e.starts_with(want),
                "{text}: {e}"
            );
            assert!(e.contains("/t.conf:1"), "{text}: {e}");
        }
        for (server, want) in [
            ("route=", "invalid parameter \"route=\""),
            (
                "route=0123456789abcdef0123456789abcdefX",
                "invalid parameter \"route=0123456789abcdef0123456789abcdefX\"",
            ),
        ] {
            let e = err(&format!(
                "events {{}} http {{ upstream u {{ server 127.0.0.1:1 {server}; }} }}"
            ));
            assert!(e.contains(want), "{server}: {e}");
        }
        let e = err("events {} stream { upstream s { server 127.0.0.1:1; sticky cookie a; } }");
        assert!(
            e.contains("\"sticky\" directive is not allowed here"),
            "{e}"
        );
        // One learn zone per upstream.
        let e = err("events {} http { upstream a { server 127.0.0.1:1; \
             sticky learn create=$cookie_a lookup=$cookie_a zone=z:1m; } \
             upstream b { server 127.0.0.1:1; \
             sticky learn create=$cookie_a lookup=$cookie_a zone=z:1m; } }");
        assert!(
            e.contains("sticky zone \"z\" is already used in upstream \"a\""),
            "{e}"
        );
    }

    #[test]
    fn a_balancer_after_sticky_replaces_it() {
        // nginx: the balancer directive takes over (and warns).
        let (c, w) = try_build(&ups("sticky cookie a; hash $uri;")).expect("config");
        assert!(
            w.iter()
                .any(|w| w.message.contains("load balancing method redefined"))
        );
        assert!(c.http.expect("http").upstreams.list[0].sticky.is_none());
        let (c, w) = try_build(&ups("hash $uri; sticky cookie a;")).expect("config");
        assert!(w.is_empty(), "{w:?}");
        assert!(c.http.expect("http").upstreams.list[0].sticky.is_some());
    }
}
