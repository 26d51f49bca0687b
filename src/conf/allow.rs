//! The access phase's directives: `allow` and `deny` (http, server,
//! location, stream, stream server), `auth_basic` and
//! `auth_basic_user_file`, and `satisfy` (http, server, location); the
//! rules and how a client address is judged by them (first match wins).
//! The request side is `http::access_phase` and the stream's session
//! start. No I/O.

use std::net::IpAddr;
use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, not_here};
use super::loc::LocB;
use super::tree::Directive;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "allow",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_rule,
    },
    Spec {
        name: "deny",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_rule,
    },
    Spec {
        name: "auth_basic",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_auth_basic,
    },
    Spec {
        name: "auth_basic_user_file",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_auth_basic,
    },
    Spec {
        name: "satisfy",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_satisfy,
    },
];

/// What an `allow` or `deny` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// `all`: every client, unix-socket ones too.
    All,
    /// `unix:`: clients of unix-socket listeners.
    Unix,
    /// An address and its prefix length (host bits cleared).
    Net(IpAddr, u8),
}

/// One `allow` or `deny`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub deny: bool,
    pub addr: Addr,
}

/// `satisfy all | any`: whether every access check must pass, or one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Satisfy {
    #[default]
    All,
    Any,
}

fn mask_v4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn mask_v6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

impl Addr {
    fn matches(&self, client: Option<IpAddr>) -> bool {
        match (self, client) {
            (Addr::All, _) => true,
            (Addr::Unix, None) => true,
            (Addr::Net(IpAddr::V4(n), len), Some(IpAddr::V4(a))) => {
                u32::from(*n) & mask_v4(*len) == u32::from(a) & mask_v4(*len)
            }
            (Addr::Net(IpAddr::V6(n), len), Some(IpAddr::V6(a))) => {
                u128::from(*n) & mask_v6(*len) == u128::from(a) & mask_v6(*len)
            }
            _ => false,
        }
    }
}

/// The first rule that matches the client (None: a unix-socket client)
/// says whether it is allowed; None when no rule matches. An IPv4-mapped
/// IPv6 address is judged by the IPv4 rules, as nginx does.
pub fn allowed(rules: &[Rule], client: Option<IpAddr>) -> Option<bool> {
    let client = client.map(|ip| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    });
    rules
        .iter()
        .find(|r| r.addr.matches(client))
        .map(|r| !r.deny)
}

/// An address or CIDR as nginx's `ngx_ptocidr` reads it; the second value
/// is true when host bits were set (and have been cleared).
fn parse_cidr(a: &str) -> Option<(IpAddr, u8, bool)> {
    let (ip, len) = match a.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (a, None),
    };
    let ip: IpAddr = ip.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => super::build::number::<u8>(l).filter(|l| *l <= max)?,
        None => max,
    };
    Some(match ip {
        IpAddr::V4(v4) => {
            let n = u32::from(v4);
            let m = n & mask_v4(len);
            (IpAddr::V4(m.into()), len, m != n)
        }
        IpAddr::V6(v6) => {
            let n = u128::from(v6);
            let m = n & mask_v6(len);
            (IpAddr::V6(m.into()), len, m != n)
        }
    })
}

/// The level's rules, where the directive is allowed.
fn rules<'a>(n: &'a mut Node<'_>) -> Option<&'a mut LocB> {
    match n {
        Node::Stream(st) => Some(&mut st.proxy_ssl),
        Node::StreamServer(s) => Some(&mut s.proxy_ssl),
        n => n.loc_b(),
    }
}

fn set_rule(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let a = &d.args[0];
    let addr = match a.as_str() {
        "all" => Addr::All,
        "unix:" => Addr::Unix,
        _ => {
            let (ip, len, low) = parse_cidr(a)
                .ok_or_else(|| ConfError::at(format!("invalid parameter \"{a}\""), &d.src))?;
            if low {
                b.warnings.push(ConfError::at(
                    format!("low address bits of {a} are meaningless"),
                    &d.src,
                ));
            }
            Addr::Net(ip, len)
        }
    };
    let l = rules(n).ok_or_else(|| not_here(d))?;
    let mut list = l.access_rules.as_deref().cloned().unwrap_or_default();
    list.push(Rule {
        deny: d.name == "deny",
        addr,
    });
    l.access_rules = Some(Arc::new(list));
    Ok(())
}

/// `auth_basic_user_file`: the file, with variables; a relative result is
/// taken from `conf_prefix` (the configuration file's directory), as nginx
/// does.
#[derive(Debug, Clone)]
pub struct UserFile {
    pub template: super::vars::Template,
    pub conf_prefix: std::path::PathBuf,
}

/// `auth_basic REALM | off` and `auth_basic_user_file FILE`.
fn set_auth_basic(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = super::vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    if d.name == "auth_basic" {
        let realm = (d.args[0] != "off").then_some(t);
        return super::build::set_once(&mut l.auth_basic, realm, d);
    }
    let file = UserFile {
        template: t,
        conf_prefix: b.paths.conf_prefix(),
    };
    super::build::set_once(&mut l.auth_basic_user_file, Some(file), d)
}

fn set_satisfy(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = match d.args[0].as_str() {
        "all" => Satisfy::All,
        "any" => Satisfy::Any,
        a => return Err(ConfError::at(format!("invalid value \"{a}\""), &d.src)),
    };
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    super::build::set_once(&mut l.satisfy, v, d)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    fn rule(deny: bool, a: &str) -> Rule {
        let addr = match a {
            "all" => Addr::All,
            "unix:" => Addr::Unix,
            _ => {
                let (ip, len, _) = parse_cidr(a).unwrap();
                Addr::Net(ip, len)
            }
        };
        Rule { deny, addr }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn first_match_wins() {
        let r = vec![
            rule(true, "192.168.1.1"),
            rule(false, "192.168.1.0/24"),
            rule(false, "2001:db8::/32"),
            rule(false, "unix:"),
            rule(true, "all"),
        ];
        assert_eq!(allowed(&r, ip("192.168.1.1")), Some(false));
        assert_eq!(allowed(&r, ip("192.168.1.2")), Some(true));
        assert_eq!(allowed(&r, ip("192.168.2.1")), Some(false));
        assert_eq!(allowed(&r, ip("2001:db8::1")), Some(true));
        assert_eq!(allowed(&r, ip("2001:db9::1")), Some(false));
        assert_eq!(allowed(&r, ip("::ffff:192.168.1.7")), Some(true));
        assert_eq!(allowed(&r, None), Some(true));
        assert_eq!(allowed(&r[..2], ip("10.0.0.1")), None);
        assert_eq!(allowed(&[rule(false, "0.0.0.0/0")], ip("::1")), None);
        assert_eq!(allowed(&[rule(true, "all")], None), Some(false));
    }

    #[test]
    fn cidr() {
        assert_eq!(
            parse_cidr("10.1.2.3/8"),
            Some((ip("10.0.0.0").unwrap(), 8, true))
        );
        assert_eq!(
            parse_cidr("10.0.0.0/8"),
            Some((ip("10.0.0.0").unwrap(), 8, false))
        );
        assert_eq!(parse_cidr("10.0.0.0/33"), None);
        assert_eq!(parse_cidr("::1/129"), None);
        assert_eq!(parse_cidr("x"), None);
        assert_eq!(parse_cidr("10.0.0.0/"), None);
    }

    #[test]
    fn directives() {
        let (c, w) = try_build(
            "events {} http { deny 10.1.2.3/8; satisfy any;\n\
             server { listen 127.0.0.1:8080; location / { allow all; } location /x { } } }",
        )
        .unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[0].to_string(),
            "low address bits of 10.1.2.3/8 are meaningless in /t.conf:1"
        );
        let s = &c.http.as_ref().unwrap().servers[0];
        assert_eq!(s.conf.satisfy, Satisfy::Any);
        assert_eq!(s.conf.access_rules.len(), 1);
        assert_eq!(*s.locations[0].conf.access_rules, vec![rule(false, "all")]);
        assert_eq!(s.locations[1].conf.access_rules.len(), 1);
        assert_eq!(
            err("events {} http {\nallow 1.2.3.400; }"),
            "invalid parameter \"1.2.3.400\" in /t.conf:2"
        );
        assert_eq!(
            err("events {} http {\nsatisfy some; }"),
            "invalid value \"some\" in /t.conf:2"
        );
        assert_eq!(
            err("events {} http {\nallow; }"),
            "invalid number of arguments in \"allow\" directive in /t.conf:2"
        );
        assert_eq!(
            err("events {}\nallow all;"),
            "\"allow\" directive is not allowed here in /t.conf:2"
        );
        let (c, _) = try_build(
            "events {} stream { deny 127.0.0.2; server { listen 127.0.0.1:9000; return x; }\n\
             server { listen 127.0.0.1:9001; allow unix:; return y; } }",
        )
        .unwrap();
        let st = c.stream.as_ref().unwrap();
        assert_eq!(*st.servers[0].access, vec![rule(true, "127.0.0.2")]);
        assert_eq!(*st.servers[1].access, vec![rule(false, "unix:")]);
    }
}
