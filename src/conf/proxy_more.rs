//! Proxy directives that shape what goes up and what comes back without
//! touching the connection logic: `proxy_cookie_domain`, `proxy_cookie_path`,
//! `proxy_cookie_flags` (Set-Cookie rewrites), `proxy_ignore_headers`, `proxy_method`,
//! `proxy_bind` and `proxy_ignore_client_abort`. The rewrites run in `http::proxy_cookie`. No I/O.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, not_here, set_once};
use super::loc::LocB;
use super::tree::Directive;
use super::vars::{self, Template};

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    spec("proxy_cookie_domain", Args::Range(1, 2), set_cookie),
    spec("proxy_cookie_path", Args::Range(1, 2), set_cookie),
    spec("proxy_cookie_flags", Args::Range(1, 4), set_cookie_flags),
    spec("proxy_ignore_headers", Args::AtLeast(1), set_ignore),
    spec("proxy_method", Args::Exactly(1), set_method),
    spec("proxy_bind", Args::Range(1, 2), set_bind),
    spec(
        "proxy_ignore_client_abort",
        Args::Exactly(1),
        set_ignore_abort,
    ),
];

const fn spec(
    name: &'static str,
    args: Args,
    set: fn(&mut Builder, &Directive, &mut Node<'_>) -> Result<(), ConfError>,
) -> Spec {
    Spec {
        name,
        ctx: HSL,
        args,
        block: false,
        set,
    }
}

/// What a cookie rewrite matches.
#[derive(Debug, Clone)]
pub enum CookieMatch {
    /// A domain (case ignored, a leading dot on either side ignored) or a
    /// path prefix; variables allowed.
    Text(Template),
    /// `~` or `~*`: the whole value, with captures for the replacement.
    Regex(regex::Regex),
}

/// One `proxy_cookie_domain` or `proxy_cookie_path` rule.
#[derive(Debug, Clone)]
pub struct CookieRewrite {
    pub pattern: CookieMatch,
    pub replacement: Template,
}

/// `proxy_cookie_flags` flag bits, as nginx names them.
pub mod flag {
    pub const SECURE_ON: u32 = 1 << 0;
    pub const SECURE_OFF: u32 = 1 << 1;
    pub const HTTPONLY_ON: u32 = 1 << 2;
    pub const HTTPONLY_OFF: u32 = 1 << 3;
    pub const SAMESITE_STRICT: u32 = 1 << 4;
    pub const SAMESITE_LAX: u32 = 1 << 5;
    pub const SAMESITE_NONE: u32 = 1 << 6;
    pub const SAMESITE_OFF: u32 = 1 << 7;

    /// The bit of a flag (case ignored, as nginx).
    pub fn parse(name: &str) -> Option<u32> {
        Some(match name.to_ascii_lowercase().as_str() {
            "secure" => SECURE_ON,
            "nosecure" => SECURE_OFF,
            "httponly" => HTTPONLY_ON,
            "nohttponly" => HTTPONLY_OFF,
            "samesite=strict" => SAMESITE_STRICT,
            "samesite=lax" => SAMESITE_LAX,
            "samesite=none" => SAMESITE_NONE,
            "nosamesite" => SAMESITE_OFF,
            _ => return None,
        })
    }
}

/// One `proxy_cookie_flags` rule: the cookies it is for (by name, case
/// ignored; or `~` a regex), and its flags (a flag with variables is
/// read per response; one that names no flag then is ignored, as nginx).
#[derive(Debug, Clone)]
pub struct CookieFlags {
    pub cookie: CookieMatch,
    pub flags: Vec<Template>,
}

/// `proxy_ignore_headers` names as bits.
pub mod ignore {
    pub const X_ACCEL_REDIRECT: u32 = 1 << 0;
    pub const X_ACCEL_EXPIRES: u32 = 1 << 1;
    pub const X_ACCEL_LIMIT_RATE: u32 = 1 << 2;
    pub const X_ACCEL_BUFFERING: u32 = 1 << 3;
    pub const X_ACCEL_CHARSET: u32 = 1 << 4;
    pub const EXPIRES: u32 = 1 << 5;
    pub const CACHE_CONTROL: u32 = 1 << 6;
    pub const SET_COOKIE: u32 = 1 << 7;
    pub const VARY: u32 = 1 << 8;

    /// The bit for a name as nginx spells it (case ignored, as nginx).
    pub fn parse(name: &str) -> Option<u32> {
        Some(match name.to_ascii_lowercase().as_str() {
            "x-accel-redirect" => X_ACCEL_REDIRECT,
            "x-accel-expires" => X_ACCEL_EXPIRES,
            "x-accel-limit-rate" => X_ACCEL_LIMIT_RATE,
            "x-accel-buffering" => X_ACCEL_BUFFERING,
            "x-accel-charset" => X_ACCEL_CHARSET,
            "expires" => EXPIRES,
            "cache-control" => CACHE_CONTROL,
            "set-cookie" => SET_COOKIE,
            "vary" => VARY,
            _ => return None,
        })
    }
}

/// `proxy_bind ADDRESS | off`: the local address of upstream connections.
#[derive(Debug, Clone)]
pub enum Bind {
    Off,
    /// A text with variables, evaluated per request (an empty result binds
    /// nothing).
    Addr(Template),
}

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn compile(d: &Directive, text: &str) -> Result<Template, ConfError> {
    vars::compile(text).map_err(|m| ConfError::at(m, &d.src))
}

fn set_cookie(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let domain = d.name == "proxy_cookie_domain";
    let l = loc(n, d)?;
    let slot = if domain {
        &mut l.proxy_cookie_domain
    } else {
        &mut l.proxy_cookie_path
    };
    if d.args.len() == 1 {
        if d.args[0] != "off" {
            return Err(ConfError::at(
                format!("invalid parameter \"{}\"", d.args[0]),
                &d.src,
            ));
        }
        if slot.is_some() {
            return Err(super::build::duplicate(d));
        }
        *slot = Some(Arc::new(Vec::new()));
        return Ok(());
    }
    // "off" set at this level, then a rule: nginx calls it a duplicate.
    if slot.as_ref().is_some_and(|v| v.is_empty()) {
        return Err(super::build::duplicate(d));
    }
    let (from, to) = (&d.args[0], &d.args[1]);
    // nginx compiles a domain's regex case-insensitive, `~` or `~*`.
    let pattern = if let Some(re) = from.strip_prefix("~*") {
        CookieMatch::Regex(regex_of(d, re, true)?)
    } else if let Some(re) = from.strip_prefix('~') {
        CookieMatch::Regex(regex_of(d, re, domain)?)
    } else {
        let text = if domain {
            from.strip_prefix('.').unwrap_or(from)
        } else {
            from
        };
        CookieMatch::Text(compile(d, text)?)
    };
    let rule = CookieRewrite {
        pattern,
        replacement: compile(d, to)?,
    };
    let mut list = slot.as_deref().cloned().unwrap_or_default();
    list.push(rule);
    *slot = Some(Arc::new(list));
    Ok(())
}

fn set_cookie_flags(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let slot = &mut loc(n, d)?.proxy_cookie_flags;
    if d.args[0] == "off" {
        if d.args.len() > 1 || slot.is_some() {
            return Err(if d.args.len() > 1 {
                ConfError::at(format!("invalid parameter \"{}\"", d.args[1]), &d.src)
            } else {
                super::build::duplicate(d)
            });
        }
        *slot = Some(Arc::new(Vec::new()));
        return Ok(());
    }
    if slot.as_ref().is_some_and(|v| v.is_empty()) {
        return Err(super::build::duplicate(d));
    }
    // nginx matches a cookie's name by a regex with case ignored, as by a
    // name.
    let cookie = match d.args[0].strip_prefix('~') {
        Some(re) => CookieMatch::Regex(regex_of(d, re, true)?),
        None => CookieMatch::Text(compile(d, &d.args[0])?),
    };
    let mut flags = Vec::new();
    for a in &d.args[1..] {
        let t = compile(d, a)?;
        if t.as_literal().is_some_and(|l| flag::parse(l).is_none()) {
            return Err(ConfError::at(format!("invalid parameter \"{a}\""), &d.src));
        }
        flags.push(t);
    }
    let mut list = slot.as_deref().cloned().unwrap_or_default();
    list.push(CookieFlags { cookie, flags });
    *slot = Some(Arc::new(list));
    Ok(())
}

fn regex_of(d: &Directive, re: &str, nocase: bool) -> Result<regex::Regex, ConfError> {
    regex::RegexBuilder::new(re)
        .case_insensitive(nocase)
        .build()
        .map_err(|e| ConfError::at(format!("regex \"{re}\" is invalid: {e}"), &d.src))
}

fn set_ignore(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let mut bits = 0;
    for a in &d.args {
        bits |= ignore::parse(a).ok_or_else(|| {
            ConfError::at(
                format!("invalid value \"{a}\" in \"{}\" directive", d.name),
                &d.src,
            )
        })?;
    }
    set_once(&mut loc(n, d)?.proxy_ignore_headers, bits, d)
}

fn set_method(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = compile(d, &d.args[0])?;
    if let Some(m) = t.as_literal() {
        if m.is_empty()
            || !m
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(ConfError::at(
                format!("invalid method \"{}\"", d.args[0]),
                &d.src,
            ));
        }
    }
    set_once(&mut loc(n, d)?.proxy_method, Some(t), d)
}

fn set_ignore_abort(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = super::build::flag(d)?;
    set_once(&mut loc(n, d)?.proxy_ignore_client_abort, v, d)
}

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
        let t = compile(d, &d.args[0])?;
        if let Some(a) = t.as_literal() {
            if a.parse::<std::net::IpAddr>().is_err() {
                return Err(ConfError::at(format!("invalid address \"{a}\""), &d.src));
            }
        }
        Bind::Addr(t)
    };
    set_once(&mut loc(n, d)?.proxy_bind, v, d)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};
    use super::*;

    #[test]
    fn values() {
        let (c, _) = try_build(&http_with(
            "proxy_cookie_domain .Example.org $host; proxy_cookie_domain ~^(.*)\\.net$ $1.org;\n\
             proxy_cookie_path /one/ /two/; proxy_ignore_headers X-Accel-Redirect Vary;\n\
             proxy_method HEAD; proxy_bind 127.0.0.2;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert_eq!(l.proxy_cookie_domain.len(), 2);
        assert!(
            matches!(&l.proxy_cookie_domain[0].pattern, CookieMatch::Text(t) if t.as_literal() == Some("Example.org"))
        );
        assert_eq!(l.proxy_cookie_path.len(), 1);
        assert_eq!(
            l.proxy_ignore_headers,
            ignore::X_ACCEL_REDIRECT | ignore::VARY
        );
        assert!(l.proxy_method.is_some());
        assert!(matches!(l.proxy_bind, Bind::Addr(_)));
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(l.proxy_cookie_domain.is_empty() && l.proxy_ignore_headers == 0);
        assert!(l.proxy_method.is_none() && matches!(l.proxy_bind, Bind::Off));
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("proxy_cookie_path on;")),
            "invalid parameter \"on\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with(
                "proxy_cookie_path off; proxy_cookie_path /a /b;"
            )),
            "\"proxy_cookie_path\" directive is duplicate in /t.conf:3"
        );
        assert!(err(&http_with("proxy_cookie_domain ~( x;")).starts_with("regex \"(\" is invalid"));
        assert_eq!(
            err(&http_with("proxy_cookie_flags sid secure bogus;")),
            "invalid parameter \"bogus\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with(
                "proxy_cookie_flags off; proxy_cookie_flags sid secure;"
            )),
            "\"proxy_cookie_flags\" directive is duplicate in /t.conf:3"
        );
        assert!(
            err(&http_with(
                "proxy_cookie_flags a secure httponly nosamesite nosecure;"
            ))
            .starts_with("invalid number of arguments in \"proxy_cookie_flags\"")
        );
        assert!(
            err(&http_with("proxy_cookie_flags ~( secure;")).starts_with("regex \"(\" is invalid")
        );
        // A flag with variables is read per response.
        assert!(try_build(&http_with("proxy_cookie_flags $host $host;")).is_ok());
        assert_eq!(
            err(&http_with("proxy_ignore_headers X-Foo;")),
            "invalid value \"X-Foo\" in \"proxy_ignore_headers\" directive in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("proxy_method \"GE T\";")),
            "invalid method \"GE T\" in /t.conf:3"
        );
        assert!(err(&http_with("proxy_bind 127.0.0.1 transparent;")).contains("not supported"));
        assert_eq!(
            err(&http_with("proxy_bind localhost;")),
            "invalid address \"localhost\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("proxy_bind off; proxy_bind off;")),
            "\"proxy_bind\" directive is duplicate in /t.conf:3"
        );
    }
}
