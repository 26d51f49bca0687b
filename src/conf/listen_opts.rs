//! More of `listen`: socket parameters (http and stream) and stream's port
//! ranges (`listen 127.0.0.1:12345-12399;`, nginx 1.15.10: one listening
//! socket per port). `rcvbuf=SIZE`, `sndbuf=SIZE` (SO_RCVBUF / SO_SNDBUF),
//! `so_keepalive=on|off|[idle]:[intvl]:[cnt]` (accepted connections inherit
//! them) and `ipv6only=on|off` are applied by `net`; `deferred` (http),
//! `fastopen=N` and `bind` are checked and have no effect. Parsing only.

use std::time::Duration;

use super::ConfError;
use super::model::ListenAddr;
use super::tree::Directive;
use super::values::{parse_port, parse_size, parse_time};

/// The socket options a `listen` asks for; None leaves the system's (or
/// sluice's) default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockParams {
    pub rcvbuf: Option<usize>,
    pub sndbuf: Option<usize>,
    pub keepalive: Option<SoKeepalive>,
    /// `ipv6only=`: sluice's default is on (an IPv6 socket is IPv6-only).
    pub ipv6only: Option<bool>,
}

/// `so_keepalive=`: off, on (the system's timers) or some of TCP_KEEPIDLE,
/// TCP_KEEPINTVL, TCP_KEEPCNT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoKeepalive {
    pub on: bool,
    pub idle: Option<Duration>,
    pub interval: Option<Duration>,
    pub count: Option<u32>,
}

/// Takes `p` when it is one of the parameters above (false: not one of
/// these). `http` allows `deferred`. nginx's words for a bad value.
pub(super) fn sock_param(
    p: &str,
    sock: &mut SockParams,
    http: bool,
    d: &Directive,
) -> Result<bool, ConfError> {
    let bad = |what: &str, v: &str| ConfError::at(format!("invalid {what} \"{v}\""), &d.src);
    if let Some((name, v)) = p.split_once('=') {
        match name {
            "rcvbuf" | "sndbuf" => {
                let n = parse_size(v)
                    .filter(|&n| n > 0 && n <= i32::MAX as u64)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad(name, v))?;
                if name == "rcvbuf" {
                    sock.rcvbuf = Some(n);
                } else {
                    sock.sndbuf = Some(n);
                }
            }
            "so_keepalive" => {
                sock.keepalive = Some(so_keepalive(v).ok_or_else(|| {
                    ConfError::at(format!("invalid so_keepalive value: \"{p}\""), &d.src)
                })?);
            }
            "ipv6only" => {
                sock.ipv6only = Some(match v {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(ConfError::at(
                            format!("invalid ipv6only flags \"{v}\""),
                            &d.src,
                        ));
                    }
                });
            }
            "fastopen" => {
                v.parse::<i32>().map_err(|_| bad("fastopen", v))?;
            }
            _ => return Ok(false),
        }
        return Ok(true);
    }
    Ok(p == "bind" || (http && p == "deferred"))
}

fn so_keepalive(v: &str) -> Option<SoKeepalive> {
    match v {
        "on" | "off" => {
            return Some(SoKeepalive {
                on: v == "on",
                idle: None,
                interval: None,
                count: None,
            });
        }
        _ => {}
    }
    let mut parts = v.split(':');
    let (idle, interval, count) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let time = |t: &str| -> Option<Option<Duration>> {
        if t.is_empty() {
            return Some(None);
        }
        parse_time(t, false).filter(|d| d.as_secs() > 0).map(Some)
    };
    let k = SoKeepalive {
        on: true,
        idle: time(idle)?,
        interval: time(interval)?,
        count: match count {
            "" => None,
            c => Some(c.parse::<u32>().ok().filter(|&n| n > 0)?),
        },
    };
    (k.idle.is_some() || k.interval.is_some() || k.count.is_some()).then_some(k)
}

/// Stream's `listen` address: a port range (`[HOST:]FIRST-LAST`) gives one
/// address per port, anything else is parsed as http's `listen` address.
pub(super) fn stream_addrs(a: &str) -> Result<Vec<ListenAddr>, String> {
    let Some((host, ports)) = range(a) else {
        return super::http::parse_listen_addr(a);
    };
    let (first, last) = ports
        .split_once('-')
        .and_then(|(f, l)| Some((parse_port(f)?, parse_port(l)?)))
        .ok_or_else(|| format!("invalid port in \"{a}\""))?;
    if last < first {
        return Err(format!("invalid port range in \"{a}\""));
    }
    let mut out = Vec::new();
    for port in first..=last {
        let one = match host {
            Some(h) => format!("{h}:{port}"),
            None => port.to_string(),
        };
        out.extend(super::http::parse_listen_addr(&one)?);
    }
    Ok(out)
}

/// The host (if any) and the port part of `a`, when that part is a range.
fn range(a: &str) -> Option<(Option<&str>, &str)> {
    if a.starts_with("unix:") {
        return None;
    }
    let (host, ports) = match a.rsplit_once(':') {
        // `[::1]` alone has colons but no port.
        Some((h, p)) if !p.contains(']') => (Some(h), p),
        _ => (None, a),
    };
    (ports.contains('-') && ports.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
        .then_some((host, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(a: &str) -> Vec<String> {
        stream_addrs(a)
            .unwrap()
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    #[test]
    fn ranges() {
        assert_eq!(
            ports("127.0.0.1:9000-9002"),
            ["127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"]
        );
        assert_eq!(ports("9000-9001"), ["0.0.0.0:9000", "0.0.0.0:9001"]);
        assert_eq!(ports("[::1]:9000-9001"), ["[::1]:9000", "[::1]:9001"]);
        assert_eq!(ports("127.0.0.1:9000-9000"), ["127.0.0.1:9000"]);
        assert_eq!(ports("127.0.0.1:9000"), ["127.0.0.1:9000"]);
        assert_eq!(ports("[::1]"), ["[::1]:80"]);
        for bad in [
            "127.0.0.1:9-",
            "127.0.0.1:-9",
            "1-2-3",
            "0-5",
            "5-70000",
            "a:1-2x",
        ] {
            assert!(stream_addrs(bad).is_err(), "{bad}");
        }
        assert_eq!(
            stream_addrs("127.0.0.1:9002-9000").unwrap_err(),
            "invalid port range in \"127.0.0.1:9002-9000\""
        );
    }

    #[test]
    fn keepalive_values() {
        let k = so_keepalive("30m::10").unwrap();
        assert_eq!(
            (k.on, k.idle, k.interval, k.count),
            (true, Some(Duration::from_secs(1800)), None, Some(10))
        );
        assert!(!so_keepalive("off").unwrap().on);
        assert_eq!(
            so_keepalive(":5s:").unwrap().interval,
            Some(Duration::from_secs(5))
        );
        for bad in ["::", "1:2", "1:2:3:4", "x::", "::0", "yes", ""] {
            assert!(so_keepalive(bad).is_none(), "{bad}");
        }
    }
}
