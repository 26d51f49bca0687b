//! More of `listen`: the `rcvbuf=SIZE` and `sndbuf=SIZE` parameters (http
//! and stream; `SO_RCVBUF` / `SO_SNDBUF` on the listening socket, which
//! accepted connections inherit) and stream's port ranges
//! (`listen 127.0.0.1:12345-12399;`, nginx 1.15.10): one listening socket
//! per port. Parsing only; `net` sets the options.

use super::ConfError;
use super::model::ListenAddr;
use super::tree::Directive;
use super::values::{parse_port, parse_size};

/// `rcvbuf=` and `sndbuf=`: None leaves the system's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bufs {
    pub rcvbuf: Option<usize>,
    pub sndbuf: Option<usize>,
}

/// Takes `p` when it is `rcvbuf=` or `sndbuf=` (false: not one of these).
/// nginx's words for a bad size.
pub(super) fn buf_param(p: &str, bufs: &mut Bufs, d: &Directive) -> Result<bool, ConfError> {
    let (slot, v, name) = if let Some(v) = p.strip_prefix("rcvbuf=") {
        (&mut bufs.rcvbuf, v, "rcvbuf")
    } else if let Some(v) = p.strip_prefix("sndbuf=") {
        (&mut bufs.sndbuf, v, "sndbuf")
    } else {
        return Ok(false);
    };
    let n = parse_size(v)
        .filter(|&n| n > 0 && n <= i32::MAX as u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ConfError::at(format!("invalid {name} \"{v}\""), &d.src))?;
    *slot = Some(n);
    Ok(true)
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
}
