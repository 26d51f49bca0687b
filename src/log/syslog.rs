//! Logging to syslog as nginx does: `error_log syslog:server=ADDR[:PORT]
//! [,facility=F][,severity=S][,tag=T][,nohostname] [LEVEL]` and `access_log
//! syslog:...`. Each line is one RFC 3164 datagram, `<PRI>Mmm dd hh:mm:ss
//! HOST TAG: line`, over UDP (port 514 by default) or a unix datagram socket
//! (`server=unix:/dev/log`). The socket is opened on first use in each
//! process and re-opened after a failed send; a line that cannot go is lost.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Mutex;

const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "intern", "lpr", "news", "uucp", "clock", "authpriv",
    "ftp", "ntp", "audit", "alert", "cron", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// nginx's level names, as severities 0 (emerg) to 7 (debug).
const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug",
];

/// Where the datagrams go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Server {
    Inet(SocketAddr),
    Unix(PathBuf),
}

/// A parsed `syslog:` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub server: Server,
    /// 0 (kern) to 23 (local7, the default).
    pub facility: u8,
    /// 0 (emerg) to 7 (debug); `info` by default. Access logs use it; an
    /// error log line goes with its own level's severity, as nginx.
    pub severity: u8,
    /// `nginx` by default.
    pub tag: String,
    pub nohostname: bool,
}

impl Spec {
    /// Parses a target starting with `syslog:`; errors in nginx's words.
    pub fn parse(target: &str) -> Result<Spec, String> {
        let rest = target
            .strip_prefix("syslog:")
            .ok_or_else(|| format!("invalid syslog target \"{target}\""))?;
        let (mut server, mut facility, mut severity, mut tag) = (None, None, None, None);
        let mut nohostname = false;
        for p in rest.split(',') {
            if let Some(v) = p.strip_prefix("server=") {
                if server.is_some() {
                    return Err("duplicate syslog \"server\"".into());
                }
                server = Some(parse_server(v)?);
            } else if let Some(v) = p.strip_prefix("facility=") {
                if facility.is_some() {
                    return Err("duplicate syslog \"facility\"".into());
                }
                let i = FACILITIES.iter().position(|f| *f == v);
                facility = Some(i.ok_or_else(|| format!("unknown syslog facility \"{v}\""))?);
            } else if let Some(v) = p.strip_prefix("severity=") {
                if severity.is_some() {
                    return Err("duplicate syslog \"severity\"".into());
                }
                let i = SEVERITIES.iter().position(|s| *s == v);
                severity = Some(i.ok_or_else(|| format!("unknown syslog severity \"{v}\""))?);
            } else if let Some(v) = p.strip_prefix("tag=") {
                if tag.is_some() {
                    return Err("duplicate syslog \"tag\"".into());
                }
                // RFC 3164: at most 32 alphanumeric characters.
                if v.len() > 32 {
                    return Err("syslog tag length exceeds 32".into());
                }
                if !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(
                        "syslog \"tag\" only allows alphanumeric characters and underscore".into(),
                    );
                }
                tag = Some(v.to_string());
            } else if p == "nohostname" {
                nohostname = true;
            } else {
                return Err(format!("unknown syslog parameter \"{p}\""));
            }
        }
        Ok(Spec {
            server: server.ok_or("no syslog server specified")?,
            facility: facility.map_or(23, |f| f as u8),
            severity: severity.map_or(6, |s| s as u8),
            tag: tag.unwrap_or_else(|| "nginx".into()),
            nohostname,
        })
    }

    /// The datagram for `line` (no newline) at `severity`.
    pub fn datagram(&self, severity: u8, host: &str, now: &str, line: &[u8]) -> Vec<u8> {
        let pri = u32::from(self.facility) * 8 + u32::from(severity.min(7));
        let head = if self.nohostname {
            format!("<{pri}>{now} {}: ", self.tag)
        } else {
            format!("<{pri}>{now} {host} {}: ", self.tag)
        };
        let mut d = Vec::with_capacity(head.len() + line.len());
        d.extend_from_slice(head.as_bytes());
        d.extend_from_slice(line);
        d
    }
}

/// `server=`: `unix:PATH`, `ADDRESS`, `ADDRESS:PORT`, `[IPV6]:PORT` or a
/// host name (its first address, looked up now, as nginx).
fn parse_server(v: &str) -> Result<Server, String> {
    if let Some(p) = v.strip_prefix("unix:") {
        if p.is_empty() {
            return Err(format!(
                "no path in the unix domain socket in syslog server \"{v}\""
            ));
        }
        return Ok(Server::Unix(PathBuf::from(p)));
    }
    let bad_port = || format!("invalid port in syslog server \"{v}\"");
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad_port)?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(bad_port()),
        }
    } else {
        match v.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (v, None),
        }
    };
    let port = match port {
        None => 514,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&n| n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(bad_port)?,
    };
    if host.is_empty() {
        return Err(format!("no host in syslog server \"{v}\""));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(Server::Inet(SocketAddr::new(ip, port)));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(Server::Inet)
        .ok_or_else(|| format!("host not found in syslog server \"{v}\""))
}

enum Sock {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

/// A target's sender.
pub struct Peer {
    spec: Spec,
    host: String,
    sock: Mutex<Option<Sock>>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("spec", &self.spec).finish()
    }
}

impl Peer {
    pub fn new(spec: Spec) -> Peer {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into());
        Peer {
            spec,
            host,
            sock: Mutex::new(None),
        }
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Sends `line` (its trailing newline dropped) at `severity` (None: the
    /// target's own). Never blocks: a datagram that cannot go is dropped.
    pub fn send(&self, severity: Option<u8>, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let now = chrono::Local::now().format("%b %e %H:%M:%S").to_string();
        let d = self.spec.datagram(
            severity.unwrap_or(self.spec.severity),
            &self.host,
            &now,
            line,
        );
        let mut g = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = self.open().ok();
        }
        let sent = match g.as_ref() {
            Some(Sock::Udp(s)) => s.send(&d).map(|_| ()),
            Some(Sock::Unix(s)) => s.send(&d).map(|_| ()),
            None => return,
        };
        // As nginx: a failed send closes the socket; the next line opens a
        // new one (a syslog daemon that was restarted is found again).
        if let Err(e) = sent {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                *g = None;
            }
        }
    }

    fn open(&self) -> std::io::Result<Sock> {
        match &self.spec.server {
            Server::Inet(a) => {
                let any: SocketAddr = if a.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let s = UdpSocket::bind(any)?;
                s.set_nonblocking(true)?;
                s.connect(a)?;
                Ok(Sock::Udp(s))
            }
            Server::Unix(p) => {
                let s = UnixDatagram::unbound()?;
                s.set_nonblocking(true)?;
                s.connect(p)?;
                Ok(Sock::Unix(s))
            }
        }
    }
}

/// A target text that names syslog.
pub fn is_syslog(target: &str) -> bool {
    target.starts_with("syslog:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_nginx() {
        let s = Spec::parse(
            "syslog:server=127.0.0.1:5140,facility=local1,tag=web_1,severity=warn,nohostname",
        )
        .unwrap();
        assert_eq!(s.server, Server::Inet("127.0.0.1:5140".parse().unwrap()));
        assert_eq!(
            (s.facility, s.severity, s.tag.as_str(), s.nohostname),
            (17, 4, "web_1", true)
        );
        let d = Spec::parse("syslog:server=[::1]").unwrap();
        assert_eq!(d.server, Server::Inet("[::1]:514".parse().unwrap()));
        assert_eq!(
            (d.facility, d.severity, d.tag.as_str(), d.nohostname),
            (23, 6, "nginx", false)
        );
        assert_eq!(
            Spec::parse("syslog:server=unix:/dev/log").unwrap().server,
            Server::Unix("/dev/log".into())
        );
        for (bad, why) in [
            ("syslog:facility=local0", "no syslog server specified"),
            (
                "syslog:server=1.2.3.4,server=1.2.3.5",
                "duplicate syslog \"server\"",
            ),
            (
                "syslog:server=1.2.3.4,facility=local9",
                "unknown syslog facility \"local9\"",
            ),
            (
                "syslog:server=1.2.3.4,severity=warning",
                "unknown syslog severity \"warning\"",
            ),
            (
                "syslog:server=1.2.3.4,tag=a-b",
                "syslog \"tag\" only allows alphanumeric characters and underscore",
            ),
            (
                "syslog:server=1.2.3.4,tag=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "syslog tag length exceeds 32",
            ),
            (
                "syslog:server=1.2.3.4,bogus",
                "unknown syslog parameter \"bogus\"",
            ),
            (
                "syslog:server=1.2.3.4:99999",
                "invalid port in syslog server \"1.2.3.4:99999\"",
            ),
            ("syslog:server=", "no host in syslog server \"\""),
            ("syslog:", "unknown syslog parameter \"\""),
        ] {
            assert_eq!(Spec::parse(bad).unwrap_err(), why, "{bad}");
        }
    }

    #[test]
    fn datagram_is_rfc3164() {
        let s = Spec::parse("syslog:server=127.0.0.1").unwrap();
        assert_eq!(
            s.datagram(
                3,
                "h1",
                "Dec  1 09:00:00",
                b"2026/12/01 09:00:00 [error] 1#0: x"
            ),
            b"<187>Dec  1 09:00:00 h1 nginx: 2026/12/01 09:00:00 [error] 1#0: x"
        );
        let n = Spec::parse("syslog:server=127.0.0.1,nohostname,facility=kern,tag=t").unwrap();
        assert_eq!(n.datagram(9, "h1", "T", b"m"), b"<7>T t: m");
    }

    #[test]
    fn sends_datagrams() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        let p = Peer::new(Spec::parse(&format!("syslog:server=127.0.0.1:{port},tag=t")).unwrap());
        p.send(None, b"one line\n");
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(got.starts_with("<190>"), "{got}");
        assert!(got.ends_with(" t: one line"), "{got}");
    }

    #[test]
    fn sends_to_a_unix_socket_and_reopens() {
        let path = std::env::temp_dir().join(format!("sluice-syslog-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let p = Peer::new(
            Spec::parse(&format!("syslog:server=unix:{},nohostname", path.display())).unwrap(),
        );
        // No listener yet: the line is dropped, nothing breaks.
        p.send(Some(3), b"lost\n");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        p.send(Some(3), b"found\n");
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(got.starts_with("<187>"), "{got}");
        assert!(got.ends_with(" nginx: found"), "{got}");
        let _ = std::fs::remove_file(&path);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "syslog:[a-z=,:0-9.\\[\\]_/-]{0,60}") {
            let _ = Spec::parse(&s);
        }
    }
}
