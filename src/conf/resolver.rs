//! `resolver ADDR[:PORT]... [valid=TIME] [ipv4=on|off] [ipv6=on|off]` and
//! `resolver_timeout`, in http, server, location and upstream (an upstream's
//! own wins for its `resolve` servers). Server addresses that are names are
//! resolved once, at load, as nginx does. Parsing only.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::ConfError;
use super::build::{
    Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, UPS, duplicate, time_arg,
};
use super::model::Resolver;
use super::tree::Directive;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "resolver",
        ctx: HTTP | SRV | LOC | UPS | STREAM | SSRV,
        args: Args::AtLeast(1),
        block: false,
        set: set_resolver,
    },
    Spec {
        name: "resolver_timeout",
        ctx: HTTP | SRV | LOC | UPS | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_resolver_timeout,
    },
];

fn parse(d: &Directive) -> Result<Resolver, ConfError> {
    let mut r = Resolver {
        servers: Vec::new(),
        valid: None,
        ipv4: true,
        ipv6: true,
        timeout: Duration::from_secs(30),
    };
    let invalid = |p: &str| ConfError::at(format!("invalid parameter \"{p}\""), &d.src);
    let on_off = |p: &str, v: &str| match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(invalid(p)),
    };
    for a in &d.args {
        if let Some(v) = a.strip_prefix("valid=") {
            let t = super::values::parse_time(v, false).ok_or_else(|| invalid(a))?;
            r.valid = Some(t);
        } else if let Some(v) = a.strip_prefix("ipv4=") {
            r.ipv4 = on_off(a, v)?;
        } else if let Some(v) = a.strip_prefix("ipv6=") {
            r.ipv6 = on_off(a, v)?;
        } else if a.starts_with("status_zone=") {
            // NGINX Plus's resolver statistics: accepted, not collected.
        } else {
            r.servers.extend(server_addrs(a, d)?);
        }
    }
    if !r.ipv4 && !r.ipv6 {
        return Err(ConfError::at(
            "\"ipv4\" and \"ipv6\" cannot both be \"off\"",
            &d.src,
        ));
    }
    if r.servers.is_empty() {
        return Err(ConfError::at("no name servers defined", &d.src));
    }
    Ok(r)
}

/// `IP`, `IP:PORT`, `[IPv6]:PORT` or a name resolved now; port 53.
fn server_addrs(a: &str, d: &Directive) -> Result<Vec<SocketAddr>, ConfError> {
    if let Ok(ip) = a.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, 53)]);
    }
    let bad = || ConfError::at(format!("host not found in resolver \"{a}\""), &d.src);
    let hp = super::values::split_host_port(a).map_err(|_| bad())?;
    let port = hp.port.unwrap_or(53);
    if let Ok(ip) = hp.host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    (hp.host, port)
        .to_socket_addrs()
        .map(|it| it.collect())
        .map_err(|_| bad())
}

fn set_resolver(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let r = parse(d)?;
    let taken = match n {
        Node::Upstream(u) => u.resolver.replace(r).is_some(),
        Node::Stream(st) => st.resolver.replace(r).is_some(),
        Node::StreamServer(s) => s.more_b().resolver.replace(r).is_some(),
        other => match other.loc_b() {
            Some(l) => l.resolver.replace(Some(r)).is_some(),
            None => return Err(super::build::not_here(d)),
        },
    };
    if taken {
        return Err(duplicate(d));
    }
    Ok(())
}

fn set_resolver_timeout(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = time_arg(d, 0)?;
    let slot = match n {
        Node::Upstream(u) => &mut u.resolver_timeout,
        Node::Stream(st) => &mut st.resolver_timeout,
        Node::StreamServer(s) => &mut s.more_b().resolver_timeout,
        other => match other.loc_b() {
            Some(l) => &mut l.resolver_timeout,
            None => return Err(super::build::not_here(d)),
        },
    };
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(t);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    #[test]
    fn resolver_forms_and_errors() {
        let (c, _) = try_build(
            "events {} http { resolver 127.0.0.1 [::1]:5353 127.0.0.2:53 valid=5s ipv6=off; \
             upstream u { zone z 64k; server a.test resolve; } }",
        )
        .expect("config");
        let u = &c.http.expect("http").upstreams.list[0];
        let r = u.resolver.as_ref().expect("resolver");
        assert_eq!(
            r.servers.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            ["127.0.0.1:53", "[::1]:5353", "127.0.0.2:53"]
        );
        assert_eq!(r.valid, Some(std::time::Duration::from_secs(5)));
        assert!(r.ipv4 && !r.ipv6);
        assert!(
            err("events {} http { resolver 127.0.0.1 ipv4=off ipv6=off; }")
                .contains("\"ipv4\" and \"ipv6\" cannot both be \"off\"")
        );
        assert!(
            err("events {} http { resolver 127.0.0.1 ipv4=maybe; }")
                .contains("invalid parameter \"ipv4=maybe\"")
        );
        assert!(
            err("events {} http { resolver 127.0.0.1; resolver 127.0.0.2; }")
                .contains("\"resolver\" directive is duplicate")
        );
    }

    #[test]
    fn upstream_level_wins_and_timeout_applies() {
        let (c, _) = try_build(
            "events {} http { resolver 127.0.0.1; resolver_timeout 5s; \
             upstream u { zone z 64k; resolver 127.0.0.9:5300; server a.test:8080 resolve; } \
             upstream v { zone z; server b.test resolve; } }",
        )
        .expect("config");
        let h = c.http.expect("http");
        let u = h.upstreams.list[0].resolver.as_ref().expect("u");
        assert_eq!(u.servers[0].to_string(), "127.0.0.9:5300");
        assert_eq!(u.timeout, std::time::Duration::from_secs(5));
        let v = h.upstreams.list[1].resolver.as_ref().expect("v");
        assert_eq!(v.servers[0].to_string(), "127.0.0.1:53");
        assert_eq!(h.upstreams.list[0].servers[0].port, 8080);
        assert_eq!(h.upstreams.list[1].servers[0].port, 80);
        assert!(h.upstreams.list[0].servers[0].addrs.is_empty());
    }

    #[test]
    fn service_needs_resolve_and_no_port() {
        let base = "events {} http { resolver 127.0.0.1; upstream u { zone z 64k; ";
        let (c, _) = try_build(&format!("{base} server s.test service=http resolve; }} }}"))
            .expect("config");
        let line = &c.http.expect("http").upstreams.list[0].servers[0];
        assert_eq!(line.service.as_deref(), Some("http"));
        assert!(line.resolve && !line.weight_set);
        assert!(
            err(&format!("{base} server s.test service=http; }} }}"))
                .contains("requires \"resolve\"")
        );
        assert!(
            err(&format!(
                "{base} server s.test:80 service=http resolve; }} }}"
            ))
            .contains("may not have port")
        );
    }

    #[test]
    fn resolve_needs_a_zone_and_a_resolver() {
        let e = err("events {} http { resolver 127.0.0.1; upstream u { server a.test resolve; } }");
        assert!(
            e.contains("resolving names at run time requires upstream \"u\" in /t.conf:1 to be in shared memory"),
            "{e}"
        );
        let e = err("events {} http { upstream u { zone z 64k; server a.test resolve; } }");
        assert!(
            e.contains("no resolver defined to resolve names at run time in upstream \"u\""),
            "{e}"
        );
    }
}
