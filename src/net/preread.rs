//! `ssl_preread`: what a client's TLS ClientHello says (server name, ALPN
//! protocols, version), read without terminating TLS and without taking the
//! bytes from the socket (peeked, as nginx's preread phase does when it can),
//! so that all of them, the ClientHello included, go to the upstream as they
//! came. rustls's `Acceptor` parses the hello (records reassembled, checked);
//! only the version, which rustls does not show, is read here from the
//! message it accepted. Called by the stream proxy before it connects.

use std::io;
use std::time::Duration;

use rustls::server::Acceptor;

use super::stream::Stream;

/// What the ClientHello says, as nginx's `$ssl_preread_*` show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// `$ssl_preread_server_name`: the SNI name (empty without one).
    pub server_name: String,
    /// `$ssl_preread_alpn_protocols`: the ALPN protocols, comma-separated.
    pub alpn: String,
    /// `$ssl_preread_protocol`: the highest version the hello's
    /// supported_versions extension lists, else its client_version.
    pub protocol: &'static str,
}

/// What the bytes read so far come to.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole ClientHello.
    Hello(Hello),
    /// Not TLS (or no ClientHello rustls can read): the variables stay
    /// empty and the session goes on.
    NotTls,
    /// The start of a ClientHello: more bytes are needed.
    More,
}

/// Parses the bytes a client sent first (pure: a copy is fed to rustls).
pub fn parse(bytes: &[u8]) -> Parsed {
    match bytes.first() {
        None => return Parsed::More,
        // A handshake record; anything else is no TLS nginx reads.
        Some(0x16) => {}
        Some(_) => return Parsed::NotTls,
    }
    let mut acceptor = Acceptor::default();
    let mut rd = bytes;
    loop {
        match acceptor.read_tls(&mut rd) {
            Ok(0) => return Parsed::More,
            Ok(_) => {}
            Err(_) => return Parsed::NotTls,
        }
        match acceptor.accept() {
            Ok(None) => {}
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                let alpn = hello
                    .alpn()
                    .map(|protos| {
                        protos
                            .map(|p| String::from_utf8_lossy(p).into_owned())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                let msg = handshake_message(bytes);
                return Parsed::Hello(Hello {
                    // As the client wrote it (nginx's): rustls's own is
                    // lowercased, without a final dot, none for an address.
                    server_name: msg.as_deref().and_then(sni).unwrap_or_default(),
                    alpn,
                    protocol: msg.as_deref().map_or("", version),
                });
            }
            Err(_) => return Parsed::NotTls,
        }
    }
}

/// The first handshake message, its records' payloads joined (the bytes
/// are a ClientHello rustls has accepted).
pub(super) fn handshake_message(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut msg = Vec::new();
    while b.first() == Some(&0x16) {
        let len = usize::from(u16::from_be_bytes([*b.get(3)?, *b.get(4)?]));
        msg.extend_from_slice(b.get(5..5 + len)?);
        b = &b[5 + len..];
        if let Some(h) = msg.get(1..4) {
            let need = 4 + (usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]));
            if msg.len() >= need {
                msg.truncate(need);
                return Some(msg);
            }
        }
    }
    None
}

/// Reads a ClientHello's fields in order.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}

/// A ClientHello message's extensions, as (type, data) in order; they end
/// early where the message is cut or a length runs past its end.
fn extensions(msg: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut c = Cursor(msg.get(4..).unwrap_or_default());
    let exts = (|| {
        // client_version, random, session id, suites, compressions.
        c.take(2 + 32)?;
        let n = c.u8()?;
        c.take(n)?;
        let n = c.u16()?;
        c.take(n)?;
        let n = c.u8()?;
        c.take(n)?;
        let n = c.u16()?;
        c.take(n)
    })();
    let mut e = Cursor(exts.unwrap_or_default());
    std::iter::from_fn(move || {
        let (t, n) = (e.u16()?, e.u16()?);
        Some((t, e.take(n)?))
    })
}

/// The first host name of a ClientHello message's server_name extension
/// (0), as its bytes are.
fn sni(msg: &[u8]) -> Option<String> {
    let (_, data) = extensions(msg).find(|(t, _)| *t == 0)?;
    let mut c = Cursor(data.get(2..)?);
    loop {
        let kind = c.u8()?;
        let n = c.u16()?;
        let name = c.take(n)?;
        if kind == 0 {
            return Some(crate::octets::text(name).into_owned());
        }
    }
}

/// `$ssl_preread_protocol` of a ClientHello message: the highest version
/// its supported_versions extension (43) lists, else its client_version.
/// (nginx says TLSv1.3 whenever the extension is there: the same for
/// clients that list TLSv1.3 there, as OpenSSL's do.)
fn version(msg: &[u8]) -> &'static str {
    for (t, data) in extensions(msg) {
        if t == 43 {
            // The highest version it lists (GREASE values name none).
            let list = data.get(1..).unwrap_or_default();
            return list
                .chunks_exact(2)
                .map(name)
                .filter(|n| !n.is_empty())
                .max_by_key(|n| RANK.iter().position(|r| r == n))
                .unwrap_or("");
        }
    }
    msg.get(4..6).map_or("", name)
}

/// What a ClientHello offers to resume a session with (rustls's accepted
/// hello does not show it).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Resumption<'a> {
    /// A TLS 1.3 pre-shared key (extension 41).
    pub psk: bool,
    /// A TLS 1.2 session ticket (extension 35, not empty).
    pub ticket: Option<&'a [u8]>,
    /// supported_versions (43) lists TLS 1.3.
    pub tls13: bool,
}

/// What a ClientHello message offers to resume with.
pub(super) fn resumption(msg: &[u8]) -> Resumption<'_> {
    let mut r = Resumption::default();
    for (t, data) in extensions(msg) {
        match t {
            41 => r.psk = true,
            35 if !data.is_empty() => r.ticket = Some(data),
            43 => {
                r.tls13 = data
                    .get(1..)
                    .unwrap_or_default()
                    .chunks_exact(2)
                    .any(|v| v == [3, 4])
            }
            _ => {}
        }
    }
    r
}

/// Versions from lowest to highest.
const RANK: [&str; 5] = ["SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];

/// A protocol version's OpenSSL name (empty: not one).
fn name(v: &[u8]) -> &'static str {
    match v {
        [3, 0] => "SSLv3",
        [3, 1] => "TLSv1",
        [3, 2] => "TLSv1.1",
        [3, 3] => "TLSv1.2",
        [3, 4] => "TLSv1.3",
        _ => "",
    }
}

/// Waits until the socket holds more than `seen` bytes and peeks at them
/// all (as many as `buf` takes); the count, `seen` when the peer closed
/// with no more. A peek that sees nothing new clears the readiness, so
/// the next wait is for new bytes, not a spin on old ones.
macro_rules! peek_more {
    ($s:expr, $buf:expr, $seen:expr) => {
        async {
            loop {
                let ready = $s.ready(tokio::io::Interest::READABLE).await?;
                let r = $s.try_io(tokio::io::Interest::READABLE, || {
                    let n = peek($s, $buf)?;
                    if n == $seen && n > 0 {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    Ok(n)
                });
                match r {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if ready.is_read_closed() {
                            return Ok::<usize, io::Error>($seen);
                        }
                    }
                    r => return r,
                }
            }
        }
        .await
    };
}

pub(super) use peek_more;

/// How the preread phase ended.
#[derive(Debug)]
pub enum Outcome {
    /// Read (`Hello`), or not TLS (the default `Hello`, empty): go on;
    /// how many bytes were there (read again by the proxy).
    Done(Option<Hello>, usize),
    /// The client closed (or the socket failed) first.
    Closed,
    /// `preread_buffer_size` bytes came and no whole ClientHello.
    Full,
    /// `preread_timeout` passed first.
    TimedOut,
}

/// Peeks at what the client sent until it is a whole ClientHello, is no
/// TLS, `limit` bytes are there, or `timeout` passes (one deadline for the
/// phase, as nginx's). Nothing is taken from the socket. A TLS stream (its
/// handshake done here) has nothing to peek at: no hello.
pub async fn preread(s: &Stream, limit: usize, timeout: Duration) -> Outcome {
    let mut buf = vec![0u8; limit.max(1)];
    let phase = async {
        let mut seen = 0;
        loop {
            let n = match s {
                Stream::Tcp(t) => peek_more!(t, &mut buf, seen),
                Stream::Unix(u) => peek_more!(u, &mut buf, seen),
                Stream::Tls(_) => return Outcome::Done(None, 0),
            };
            match n {
                Ok(n) if n > seen => seen = n,
                _ => return Outcome::Closed,
            }
            match parse(&buf[..seen]) {
                Parsed::Hello(h) => return Outcome::Done(Some(h), seen),
                Parsed::NotTls => return Outcome::Done(None, seen),
                Parsed::More if seen >= buf.len() => return Outcome::Full,
                Parsed::More => {}
            }
        }
    };
    tokio::time::timeout(timeout, phase)
        .await
        .unwrap_or(Outcome::TimedOut)
}

/// One non-blocking peek (0: the peer closed with nothing pending).
pub(super) fn peek(s: &impl std::os::fd::AsFd, buf: &mut [u8]) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    use std::os::fd::AsRawFd;
    recv(
        s.as_fd().as_raw_fd(),
        buf,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls's client writes it.
    fn client_hello(sni: &str, alpn: &[&[u8]], tls13: bool) -> Vec<u8> {
        let versions: &[&'static rustls::SupportedProtocolVersion] = if tls13 {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS12]
        };
        let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = rustls_pki_types::ServerName::try_from(sni.to_string()).unwrap();
        let mut c = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_whole_hello_says_name_alpn_and_version() {
        let b = client_hello("a.test", &[b"h2", b"http/1.1"], true);
        assert_eq!(
            parse(&b),
            Parsed::Hello(Hello {
                server_name: "a.test".into(),
                alpn: "h2,http/1.1".into(),
                protocol: "TLSv1.3",
            })
        );
        let b = client_hello("b.test", &[], false);
        assert_eq!(
            parse(&b),
            Parsed::Hello(Hello {
                server_name: "b.test".into(),
                alpn: String::new(),
                protocol: "TLSv1.2",
            })
        );
    }

    #[test]
    fn every_prefix_asks_for_more() {
        let b = client_hello("a.test", &[b"h2"], true);
        for n in 0..b.len() {
            assert_eq!(parse(&b[..n]), Parsed::More, "{n} bytes");
        }
    }

    #[test]
    fn a_hello_over_several_records_is_read() {
        // The same handshake message cut into records of 100 bytes.
        let b = client_hello("split.test", &[b"x"], true);
        let msg = &b[5..];
        let mut split = Vec::new();
        for chunk in msg.chunks(100) {
            split.extend_from_slice(&[0x16, 3, 1]);
            split.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            split.extend_from_slice(chunk);
        }
        match parse(&split) {
            Parsed::Hello(h) => {
                assert_eq!(
                    (h.server_name.as_str(), h.protocol),
                    ("split.test", "TLSv1.3")
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_bytes_are_not_tls() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Parsed::NotTls);
        assert_eq!(
            parse(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00"),
            Parsed::NotTls
        );
    }

    /// A ClientHello message (no record header) with these extensions.
    fn hello_with(exts: &[(u16, &[u8])]) -> Vec<u8> {
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1, 0];
        msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn what_a_hello_offers_to_resume_with() {
        let fresh = client_hello("a.test", &[], true);
        let msg = handshake_message(&fresh).unwrap();
        assert_eq!(
            resumption(&msg),
            Resumption {
                psk: false,
                ticket: None,
                tls13: true
            }
        );
        let msg = hello_with(&[(35, b"T1"), (43, &[4, 3, 3, 3, 4])]);
        assert_eq!(
            resumption(&msg),
            Resumption {
                psk: false,
                ticket: Some(b"T1"),
                tls13: true
            }
        );
        let msg = hello_with(&[(35, b""), (43, &[2, 3, 3]), (41, b"psk")]);
        assert_eq!(
            resumption(&msg),
            Resumption {
                psk: true,
                ticket: None,
                tls13: false
            }
        );
        // An extension whose length runs past the end is not read.
        let mut cut = hello_with(&[(35, b"T2")]);
        let n = cut.len();
        cut[n - 3] = 9;
        assert_eq!(resumption(&cut), Resumption::default());
        assert_eq!(resumption(&[]), Resumption::default());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse(&b);
            let mut t = vec![0x16, 3, 1];
            t.extend_from_slice(&b);
            let _ = parse(&t);
            let _ = version(&b);
            let _ = resumption(&b);
            let _ = handshake_message(&t);
        }
    }
}
