//! The PROXY protocol (HAProxy's, versions 1 and 2) as nginx reads it on a
//! `listen ... proxy_protocol` address: the header a layer-4 balancer puts
//! before the client's first byte, naming the client. `parse` is pure (the
//! bytes so far in, a verdict out: it rejects as soon as an offending byte
//! is there and asks for more otherwise); `read` peeks at a socket until it
//! says, then takes exactly the header off it, before any TLS. `v1_header`
//! writes the line the stream proxy's `proxy_protocol on` sends upstream.
//! Called by the HTTP accept path and the stream proxy.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::conf::vars::ProxyTlv;

use super::stream::Stream;

/// The longest version 1 header, CRLF included (the protocol's limit).
pub const V1_MAX: usize = 107;
/// The longest version 2 header read (nginx's buffer for it).
pub const MAX_HEADER: usize = 4096;
/// The version 2 signature.
const SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// What a header said about the connection it came before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addrs {
    /// The client's address and port (`$proxy_protocol_addr`, `_port`),
    /// as written (version 1) or printed (version 2).
    pub src_addr: String,
    pub src_port: u16,
    /// The address the client connected to (`$proxy_protocol_server_*`).
    pub dst_addr: String,
    pub dst_port: u16,
    /// A version 2 header's TLVs, unparsed (read when a variable asks).
    pub tlvs: Vec<u8>,
}

/// Why a header was refused; `Display` is nginx's error-log text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// Not a header, or a broken version 1 one: the start of what came (up
    /// to a CR or LF).
    Header(String),
    /// A version 2 signature with another version.
    Version(u8),
    /// A version 2 header longer than `MAX_HEADER`.
    TooLarge,
    /// A version 2 header too short for its addresses (nginx logs nothing).
    Addresses,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broken::Header(t) => write!(f, "broken header: \"{t}\""),
            Broken::Version(v) => write!(f, "unknown PROXY protocol version: {v}"),
            Broken::TooLarge => f.write_str("header is too large"),
            Broken::Addresses => f.write_str("broken PROXY protocol v2 addresses"),
        }
    }
}

impl Broken {
    /// Whether nginx logs it (a version 2 header short of its addresses
    /// closes the connection silently).
    pub fn logged(&self) -> bool {
        !matches!(self, Broken::Addresses)
    }
}

/// What the bytes so far come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A header could still come: more bytes are needed.
    More,
    /// A whole header of `len` bytes; the addresses unless it said none
    /// (`UNKNOWN`, `LOCAL`, a family or transport nginx does not take).
    Done {
        len: usize,
        addrs: Option<Addrs>,
    },
    Broken(Broken),
}

/// Reads a header from the start of `buf`. Pure; never panics.
pub fn parse(buf: &[u8]) -> Parsed {
    let n = buf.len().min(SIG.len());
    if buf[..n] == SIG[..n] && !buf.is_empty() {
        if buf.len() < 16 {
            return Parsed::More;
        }
        return v2(buf);
    }
    let window = &buf[..buf.len().min(V1_MAX)];
    match v1(window) {
        Ok(done) => done,
        Err(Stop::More) if buf.len() < V1_MAX => Parsed::More,
        Err(_) => Parsed::Broken(Broken::Header(shown(window))),
    }
}

/// Why the version 1 reader stopped.
enum Stop {
    More,
    Bad,
}

/// A version 1 line, by nginx's rules: `PROXY UNKNOWN` and anything up to
/// CRLF, or `PROXY TCP4|TCP6 SRC DST SPORT DPORT` with addresses of hex
/// digits, `.` and `:`, ports 0..=65535, ended by CRLF.
fn v1(buf: &[u8]) -> Result<Parsed, Stop> {
    prefix(buf, b"PROXY ")?;
    let r = &buf[6..];
    if r.len() < 7 && b"UNKNOWN".starts_with(r) {
        return Err(Stop::More);
    }
    if r.starts_with(b"UNKNOWN") {
        let at = 6 + 7;
        return match buf[at..].windows(2).position(|w| w == b"\r\n") {
            Some(i) => Ok(Parsed::Done {
                len: at + i + 2,
                addrs: None,
            }),
            None => Err(Stop::More),
        };
    }
    prefix(r, b"TCP")?;
    match r.get(3) {
        None => return Err(Stop::More),
        Some(b'4' | b'6') => {}
        Some(_) => return Err(Stop::Bad),
    }
    prefix(&r[4..], b" ")?;
    let mut p = 6 + 5;
    let src_addr = addr(buf, &mut p)?;
    let dst_addr = addr(buf, &mut p)?;
    let src_port = port(buf, &mut p, b' ')?;
    let dst_port = port(buf, &mut p, b'\r')?;
    match buf.get(p) {
        None => Err(Stop::More),
        Some(b'\n') => Ok(Parsed::Done {
            len: p + 1,
            addrs: Some(Addrs {
                src_addr,
                src_port,
                dst_addr,
                dst_port,
                tlvs: Vec::new(),
            }),
        }),
        Some(_) => Err(Stop::Bad),
    }
}

/// `buf` starts with `want` (More when it is a shorter piece of it).
fn prefix(buf: &[u8], want: &[u8]) -> Result<(), Stop> {
    let n = buf.len().min(want.len());
    if buf[..n] != want[..n] {
        Err(Stop::Bad)
    } else if n < want.len() {
        Err(Stop::More)
    } else {
        Ok(())
    }
}

/// An address up to its space (nginx checks only the characters).
fn addr(buf: &[u8], p: &mut usize) -> Result<String, Stop> {
    let start = *p;
    loop {
        let ch = *buf.get(*p).ok_or(Stop::More)?;
        *p += 1;
        match ch {
            b' ' => break,
            b':' | b'.' | b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {}
            _ => return Err(Stop::Bad),
        }
    }
    Ok(String::from_utf8_lossy(&buf[start..*p - 1]).into_owned())
}

/// A port up to `sep`: digits, at least one, at most 65535.
fn port(buf: &[u8], p: &mut usize, sep: u8) -> Result<u16, Stop> {
    let mut n: u32 = 0;
    let mut digits = 0;
    loop {
        let ch = *buf.get(*p).ok_or(Stop::More)?;
        *p += 1;
        if ch == sep {
            break;
        }
        if !ch.is_ascii_digit() {
            return Err(Stop::Bad);
        }
        n = n * 10 + u32::from(ch - b'0');
        digits += 1;
        if n > 65535 {
            return Err(Stop::Bad);
        }
    }
    if digits == 0 {
        return Err(Stop::Bad);
    }
    u16::try_from(n).map_err(|_| Stop::Bad)
}

/// A version 2 header (`buf` has the signature and 16 bytes at least).
fn v2(buf: &[u8]) -> Parsed {
    let version = buf[12] >> 4;
    if version != 2 {
        return Parsed::Broken(Broken::Version(version));
    }
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > MAX_HEADER {
        return Parsed::Broken(Broken::TooLarge);
    }
    let Some(body) = buf.get(16..len) else {
        return Parsed::More;
    };
    let none = Parsed::Done { len, addrs: None };
    // Only PROXY over a stream transport says something; LOCAL (health
    // checks) and the rest are taken and mean the connection's own peer.
    if buf[12] & 0x0f != 1 || buf[13] & 0x0f != 1 {
        return none;
    }
    let (src, dst, ports, rest): (IpAddr, IpAddr, &[u8], &[u8]) = match buf[13] >> 4 {
        1 => {
            let Some(a) = body.get(..12) else {
                return Parsed::Broken(Broken::Addresses);
            };
            let ip = |b: &[u8]| IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
            (ip(&a[0..4]), ip(&a[4..8]), &a[8..12], &body[12..])
        }
        2 => {
            let Some(a) = body.get(..36) else {
                return Parsed::Broken(Broken::Addresses);
            };
            let ip = |b: &[u8]| {
                let mut o = [0u8; 16];
                o.copy_from_slice(b);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            (ip(&a[0..16]), ip(&a[16..32]), &a[32..36], &body[36..])
        }
        // AF_UNSPEC, AF_UNIX: nothing nginx keeps.
        _ => return none,
    };
    Parsed::Done {
        len,
        addrs: Some(Addrs {
            src_addr: src.to_string(),
            src_port: u16::from_be_bytes([ports[0], ports[1]]),
            dst_addr: dst.to_string(),
            dst_port: u16::from_be_bytes([ports[2], ports[3]]),
            tlvs: rest.to_vec(),
        }),
    }
}

/// What nginx shows of a broken header: up to the first CR or LF, bytes
/// outside printable ASCII as `\xNN` (so the log line stays one line).
fn shown(buf: &[u8]) -> String {
    let end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len());
    let mut s = String::with_capacity(end);
    for &b in &buf[..end] {
        if (0x20..0x7f).contains(&b) && b != b'\\' && b != b'"' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("\\x{b:02X}"));
        }
    }
    s
}

/// A TLV list that does not add up.
#[derive(Debug, PartialEq, Eq)]
pub struct BrokenTlv;

impl Addrs {
    /// A port as `$proxy_protocol_port` and `_server_port` show it: empty
    /// for 0, as nginx prints only a port above 0.
    pub fn port_text(port: u16) -> String {
        if port == 0 {
            String::new()
        } else {
            port.to_string()
        }
    }

    /// The value of the TLV `key` names (None: not there);
    /// `ssl_verify` in decimal, as nginx.
    pub fn tlv(&self, key: ProxyTlv) -> Result<Option<Vec<u8>>, BrokenTlv> {
        match key {
            ProxyTlv::Top(t) => lookup(&self.tlvs, t),
            ProxyTlv::Ssl(t) => match lookup(&self.tlvs, 0x20)? {
                None => Ok(None),
                Some(ssl) => lookup(ssl.get(5..).ok_or(BrokenTlv)?, t),
            },
            ProxyTlv::SslVerify => match lookup(&self.tlvs, 0x20)? {
                None => Ok(None),
                Some(ssl) => {
                    let v = ssl.get(1..5).ok_or(BrokenTlv)?;
                    let n = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
                    Ok(Some(n.to_string().into_bytes()))
                }
            },
        }
    }
}

/// The first TLV of type `t` in a list (type, 16-bit length, value).
fn lookup(mut list: &[u8], t: u8) -> Result<Option<Vec<u8>>, BrokenTlv> {
    while !list.is_empty() {
        let head = list.get(..3).ok_or(BrokenTlv)?;
        let len = usize::from(u16::from_be_bytes([head[1], head[2]]));
        let value = list.get(3..3 + len).ok_or(BrokenTlv)?;
        if head[0] == t {
            return Ok(Some(value.to_vec()));
        }
        list = &list[3 + len..];
    }
    Ok(None)
}

/// The version 1 line nginx's stream proxy sends upstream: the client's
/// address and the one it connected to, `UNKNOWN` when either is not an
/// IP address (a unix socket); the family is the client's.
pub fn v1_header(client: Option<SocketAddr>, local: Option<SocketAddr>) -> Vec<u8> {
    match (client, local) {
        (Some(c), Some(l)) => format!(
            "PROXY {} {} {} {} {}\r\n",
            if c.is_ipv4() { "TCP4" } else { "TCP6" },
            c.ip(),
            l.ip(),
            c.port(),
            l.port()
        )
        .into_bytes(),
        _ => b"PROXY UNKNOWN\r\n".to_vec(),
    }
}

/// How reading a header ended.
#[derive(Debug)]
pub enum Outcome {
    /// The header was read and taken off the socket.
    Done(Option<Addrs>),
    Broken(Broken),
    /// The client closed (or the socket failed) before sending anything.
    Closed,
    TimedOut,
}

/// Peeks at what the client sent until `parse` has a verdict or `timeout`
/// passes (one deadline for the header, as nginx's timer), then takes the
/// header's bytes off the socket: what follows stays for TLS or HTTP. A
/// client that closes part-way has sent a broken header.
pub async fn read(s: &mut Stream, timeout: Duration) -> Outcome {
    use super::preread::{peek, peek_more};
    let mut buf = vec![0u8; MAX_HEADER];
    let phase = async {
        let mut seen = 0;
        loop {
            let n = match &*s {
                Stream::Tcp(t) => peek_more!(t, &mut buf, seen),
                Stream::Unix(u) => peek_more!(u, &mut buf, seen),
                // The header comes before any TLS.
                Stream::Tls(_) => return Outcome::Done(None),
            };
            match n {
                Ok(n) if n > seen => seen = n,
                _ if seen == 0 => return Outcome::Closed,
                _ => {
                    return match parse(&buf[..seen]) {
                        Parsed::Broken(b) => Outcome::Broken(b),
                        _ => Outcome::Broken(Broken::Header(shown(&buf[..seen.min(V1_MAX)]))),
                    };
                }
            }
            match parse(&buf[..seen]) {
                Parsed::More => {}
                Parsed::Broken(b) => return Outcome::Broken(b),
                Parsed::Done { len, addrs } => {
                    use tokio::io::AsyncReadExt;
                    let mut taken = vec![0u8; len];
                    return match s.read_exact(&mut taken).await {
                        Ok(_) => Outcome::Done(addrs),
                        Err(_) => Outcome::Closed,
                    };
                }
            }
        }
    };
    tokio::time::timeout(timeout, phase)
        .await
        .unwrap_or(Outcome::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1ok(line: &str) -> Addrs {
        match parse(line.as_bytes()) {
            Parsed::Done {
                len,
                addrs: Some(a),
            } if len == line.len() => a,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    fn broken(b: &[u8]) -> Broken {
        match parse(b) {
            Parsed::Broken(x) => x,
            other => panic!("{b:?}: {other:?}"),
        }
    }

    fn v2hdr(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut v = SIG.to_vec();
        v.push(ver_cmd);
        v.push(fam);
        v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn inet4_body(tlvs: &[u8]) -> Vec<u8> {
        let mut b = vec![192, 0, 2, 1, 198, 51, 100, 2, 0x30, 0x39, 0x01, 0xbb];
        b.extend_from_slice(tlvs);
        b
    }

    #[test]
    fn v1_tcp4_and_tcp6() {
        let a = v1ok("PROXY TCP4 192.0.2.1 198.51.100.2 12345 443\r\n");
        assert_eq!(
            (
                a.src_addr.as_str(),
                a.src_port,
                a.dst_addr.as_str(),
                a.dst_port
            ),
            ("192.0.2.1", 12345, "198.51.100.2", 443)
        );
        let a = v1ok("PROXY TCP6 2001:db8::1 ::1 1 65535\r\n");
        assert_eq!((a.src_addr.as_str(), a.dst_port), ("2001:db8::1", 65535));
        // nginx checks the characters only, and takes leading zeros.
        let a = v1ok("PROXY TCP4 ::1 1.2.3.4 0080 0\r\n");
        assert_eq!((a.src_addr.as_str(), a.src_port), ("::1", 80));
        // What follows the header is not the header's.
        let line = "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET / HTTP/1.0\r\n\r\n";
        assert!(matches!(
            parse(line.as_bytes()),
            Parsed::Done { len: 32, .. }
        ));
    }

    #[test]
    fn v1_unknown_says_nothing() {
        for l in [
            "PROXY UNKNOWN\r\n",
            "PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY UNKNOWNxyz\r\n",
        ] {
            assert_eq!(
                parse(l.as_bytes()),
                Parsed::Done {
                    len: l.len(),
                    addrs: None
                },
                "{l}"
            );
        }
    }

    #[test]
    fn v1_broken_lines() {
        for (l, shown) in [
            ("GET / HTTP/1.1\r\n", "GET / HTTP/1.1"),
            (
                "PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
                "PROXY TCP5 1.2.3.4 5.6.7.8 1 2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 99999",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8  2\r\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8  2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 ",
            ),
            (
                "PROXY TCP4 host 5.6.7.8 1 2\r\n",
                "PROXY TCP4 host 5.6.7.8 1 2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 2",
            ),
            (
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
                "PROXY TCP4 1.2.3.4 5.6.7.8 1 2",
            ),
            (
                "proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
                "proxy TCP4 1.2.3.4 5.6.7.8 1 2",
            ),
            ("PROXY \r\n", "PROXY "),
        ] {
            assert_eq!(broken(l.as_bytes()), Broken::Header(shown.into()), "{l:?}");
        }
        assert_eq!(
            broken(b"\x16\x03\x01\x00"),
            Broken::Header("\\x16\\x03\\x01\\x00".into())
        );
    }

    #[test]
    fn v1_too_long() {
        // 107 bytes with its CRLF is the limit.
        let mut l = String::from("PROXY UNKNOWN ");
        while l.len() < V1_MAX - 2 {
            l.push('x');
        }
        l.push_str("\r\n");
        assert_eq!(l.len(), V1_MAX);
        assert!(matches!(parse(l.as_bytes()), Parsed::Done { len: 107, .. }));
        let long = l.replacen("UNKNOWN ", "UNKNOWN xx", 1);
        assert!(matches!(broken(long.as_bytes()), Broken::Header(_)));
        // No CRLF within 107 bytes: broken however much more would come.
        let mut l = String::from("PROXY UNKNOWN ");
        l.push_str(&"y".repeat(200));
        assert!(matches!(broken(l.as_bytes()), Broken::Header(s) if s.len() == V1_MAX));
        // Ports with many leading zeros run past the limit too.
        let l = format!("PROXY TCP4 1.2.3.4 5.6.7.8 {}1 2\r\n", "0".repeat(90));
        assert!(matches!(broken(l.as_bytes()), Broken::Header(_)));
    }

    #[test]
    fn v1_prefixes_ask_for_more() {
        let l = b"PROXY TCP6 2001:db8::1 2001:db8::2 65535 65535\r\n";
        for n in 0..l.len() {
            assert_eq!(parse(&l[..n]), Parsed::More, "{n}");
        }
        // But a wrong byte is seen at once.
        assert!(matches!(parse(b"PROXY TCP4 1.2.3.4x"), Parsed::Broken(_)));
        assert!(matches!(
            parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1a"),
            Parsed::Broken(_)
        ));
        assert!(matches!(parse(b"PROXY UNKNOWN"), Parsed::More));
        assert!(matches!(parse(b"PROXY UNK"), Parsed::More));
        assert!(matches!(parse(b"PROXY UNX"), Parsed::Broken(_)));
        assert!(matches!(parse(b"G"), Parsed::Broken(_)));
    }

    #[test]
    fn v2_inet_and_inet6() {
        let h = v2hdr(0x21, 0x11, &inet4_body(&[]));
        let Parsed::Done {
            len,
            addrs: Some(a),
        } = parse(&h)
        else {
            panic!()
        };
        assert_eq!(len, 28);
        assert_eq!(
            (
                a.src_addr.as_str(),
                a.src_port,
                a.dst_addr.as_str(),
                a.dst_port
            ),
            ("192.0.2.1", 12345, "198.51.100.2", 443)
        );
        let mut b = vec![0x20, 0x01, 0x0d, 0xb8];
        b.extend_from_slice(&[0; 11]);
        b.push(1);
        b.extend_from_slice(&[0; 10]);
        b.extend_from_slice(&[0xff, 0xff, 10, 0, 0, 1]);
        b.extend_from_slice(&[0, 80, 0, 81]);
        let h = v2hdr(0x21, 0x21, &b);
        let Parsed::Done { addrs: Some(a), .. } = parse(&h) else {
            panic!()
        };
        assert_eq!(
            (
                a.src_addr.as_str(),
                a.src_port,
                a.dst_addr.as_str(),
                a.dst_port
            ),
            ("2001:db8::1", 80, "::ffff:10.0.0.1", 81)
        );
    }

    #[test]
    fn v2_local_unspec_unix_and_dgram_say_nothing() {
        for (vc, fam, body) in [
            (0x20, 0x11, inet4_body(&[])), // LOCAL
            (0x21, 0x00, vec![]),          // UNSPEC
            (0x21, 0x31, vec![0; 216]),    // AF_UNIX
            (0x21, 0x12, inet4_body(&[])), // DGRAM
            (0x2f, 0x11, inet4_body(&[])), // another command: nginx takes it
        ] {
            let h = v2hdr(vc, fam, &body);
            assert_eq!(
                parse(&h),
                Parsed::Done {
                    len: h.len(),
                    addrs: None
                }
            );
        }
    }

    #[test]
    fn v2_broken() {
        assert_eq!(
            broken(&v2hdr(0x11, 0x11, &inet4_body(&[]))),
            Broken::Version(1)
        );
        assert_eq!(broken(&v2hdr(0x31, 0x11, &[])), Broken::Version(3));
        assert_eq!(broken(&v2hdr(0x21, 0x11, &[1, 2, 3])), Broken::Addresses);
        assert_eq!(broken(&v2hdr(0x21, 0x21, &[0; 35])), Broken::Addresses);
        let big = v2hdr(0x21, 0x11, &vec![0; MAX_HEADER - 16 + 1]);
        assert_eq!(broken(&big[..20]), Broken::TooLarge);
        let max = v2hdr(0x21, 0x11, &inet4_body(&vec![0; MAX_HEADER - 28]));
        assert!(matches!(
            parse(&max),
            Parsed::Done {
                len: MAX_HEADER,
                ..
            }
        ));
        // A wrong signature is no version 2, and no version 1 either.
        let mut h = v2hdr(0x21, 0x11, &inet4_body(&[]));
        h[11] = b'X';
        assert!(matches!(broken(&h), Broken::Header(_)));
        assert_eq!(
            Broken::Version(3).to_string(),
            "unknown PROXY protocol version: 3"
        );
        assert_eq!(
            Broken::Header("x".into()).to_string(),
            "broken header: \"x\""
        );
    }

    #[test]
    fn v2_prefixes_ask_for_more() {
        let h = v2hdr(0x21, 0x11, &inet4_body(&[1, 0, 2, b'h', b'2']));
        for n in 1..h.len() {
            assert_eq!(parse(&h[..n]), Parsed::More, "{n}");
        }
    }

    #[test]
    fn v2_tlvs() {
        let mut ssl = vec![0x01, 0, 0, 0, 7];
        ssl.extend_from_slice(&[0x21, 0, 7]);
        ssl.extend_from_slice(b"TLSv1.3");
        ssl.extend_from_slice(&[0x22, 0, 4]);
        ssl.extend_from_slice(b"user");
        let mut tlvs = vec![0x01, 0, 2, b'h', b'2', 0x02, 0, 5];
        tlvs.extend_from_slice(b"a.test");
        tlvs.truncate(8 + 5);
        tlvs.extend_from_slice(&[0xea, 0, 3, b'v', b'p', b'c', 0x20]);
        tlvs.extend_from_slice(&(ssl.len() as u16).to_be_bytes());
        tlvs.extend_from_slice(&ssl);
        let h = v2hdr(0x21, 0x11, &inet4_body(&tlvs));
        let Parsed::Done { addrs: Some(a), .. } = parse(&h) else {
            panic!()
        };
        let get = |n: &str| {
            a.tlv(ProxyTlv::from_name(n).unwrap())
                .unwrap()
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(get("alpn").as_deref(), Some("h2"));
        assert_eq!(get("0x01").as_deref(), Some("h2"));
        assert_eq!(get("authority").as_deref(), Some("a.tes"));
        assert_eq!(get("0xEA").as_deref(), Some("vpc"));
        assert_eq!(get("0xea").as_deref(), Some("vpc"));
        assert_eq!(get("ssl_version").as_deref(), Some("TLSv1.3"));
        assert_eq!(get("ssl_0x21").as_deref(), Some("TLSv1.3"));
        assert_eq!(get("ssl_cn").as_deref(), Some("user"));
        assert_eq!(get("ssl_verify").as_deref(), Some("7"));
        assert_eq!(get("unique_id"), None);
        assert_eq!(get("ssl_cipher"), None);
        assert!(ProxyTlv::from_name("nope").is_none());
        assert!(ProxyTlv::from_name("0x100").is_none());
        assert!(ProxyTlv::from_name("0x").is_none());
    }

    #[test]
    fn truncated_tlvs_are_broken_when_read() {
        for tlvs in [&[0x01u8][..], &[0x01, 0], &[0x01, 0, 5, b'a']] {
            let h = v2hdr(0x21, 0x11, &inet4_body(tlvs));
            let Parsed::Done { addrs: Some(a), .. } = parse(&h) else {
                panic!()
            };
            assert_eq!(a.tlv(ProxyTlv::Top(0x05)), Err(BrokenTlv), "{tlvs:?}");
        }
        let h = v2hdr(0x21, 0x11, &inet4_body(&[0x20, 0, 2, 1, 0]));
        let Parsed::Done { addrs: Some(a), .. } = parse(&h) else {
            panic!()
        };
        assert_eq!(a.tlv(ProxyTlv::SslVerify), Err(BrokenTlv));
        assert_eq!(a.tlv(ProxyTlv::Ssl(0x21)), Err(BrokenTlv));
    }

    #[test]
    fn writes_nginx_v1_lines() {
        let c: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let l: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(
            v1_header(Some(c), Some(l)),
            b"PROXY TCP4 192.0.2.1 127.0.0.1 5000 8080\r\n"
        );
        let c6: SocketAddr = "[2001:db8::1]:5".parse().unwrap();
        assert_eq!(
            v1_header(Some(c6), Some(l)),
            b"PROXY TCP6 2001:db8::1 127.0.0.1 5 8080\r\n"
        );
        assert_eq!(v1_header(None, Some(l)), b"PROXY UNKNOWN\r\n");
        // What it writes reads back.
        let a = v1ok("PROXY TCP4 192.0.2.1 127.0.0.1 5000 8080\r\n");
        assert_eq!(a.src_port, 5000);
    }

    /// Valid headers of every kind, for the split test.
    fn valid() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            (
                any::<[u8; 4]>(),
                any::<[u8; 4]>(),
                any::<u16>(),
                any::<u16>()
            )
                .prop_map(|(s, d, sp, dp)| format!(
                    "PROXY TCP4 {} {} {sp} {dp}\r\n",
                    Ipv4Addr::from(s),
                    Ipv4Addr::from(d)
                )
                .into_bytes()),
            (
                any::<[u8; 16]>(),
                any::<[u8; 16]>(),
                any::<u16>(),
                any::<u16>()
            )
                .prop_map(|(s, d, sp, dp)| format!(
                    "PROXY TCP6 {} {} {sp} {dp}\r\n",
                    Ipv6Addr::from(s),
                    Ipv6Addr::from(d)
                )
                .into_bytes()),
            proptest::collection::vec(0x20u8..0x7f, 0..80).prop_map(|t| {
                let mut v = b"PROXY UNKNOWN".to_vec();
                v.extend_from_slice(&t);
                v.extend_from_slice(b"\r\n");
                v
            }),
            (0u8..3, proptest::collection::vec(any::<u8>(), 36..300))
                .prop_map(|(fam, body)| v2hdr(0x21, (fam << 4) | 1, &body)),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse(&b);
            let mut t = b"PROXY TCP4 ".to_vec();
            t.extend_from_slice(&b);
            let _ = parse(&t);
            let mut t = SIG.to_vec();
            t.extend_from_slice(&b);
            if let Parsed::Done { addrs: Some(a), len } = parse(&t) {
                proptest::prop_assert!(len <= t.len());
                for k in [ProxyTlv::Top(1), ProxyTlv::Ssl(0x21), ProxyTlv::SslVerify] {
                    let _ = a.tlv(k);
                }
            }
        }

        #[test]
        fn split_headers_parse_as_whole(
            h in valid(),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..50),
            cut in 0usize..400,
        ) {
            let mut all = h.clone();
            all.extend_from_slice(&tail);
            let whole = parse(&all);
            let Parsed::Done { len, .. } = &whole else {
                return Err(proptest::test_runner::TestCaseError::fail(format!("{whole:?}")));
            };
            proptest::prop_assert_eq!(*len, h.len());
            // Every prefix short of the header asks for more; the header
            // alone, or with any tail, is the same header.
            let cut = cut % h.len();
            proptest::prop_assert_eq!(parse(&all[..cut]), Parsed::More);
            proptest::prop_assert_eq!(parse(&h), whole.clone());
        }
    }
}
