//! Server-side TLS on an accepted TCP connection (rustls, aws-lc-rs provider):
//! a server's `rustls::ServerConfig` made from its `ssl_*` settings (its
//! certificates chosen by the client's signature schemes, sessions kept for
//! `ssl_session_timeout`), the handshake that picks that config by SNI, and
//! `TlsStream`, which reads and writes through a shared reference as
//! `Stream` does, so that the connection code is the same over TLS. No HTTP.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use rustls::crypto::aws_lc_rs as provider;
use rustls::server::{
    Acceptor, ClientHello, NoServerSessionStorage, ProducesTickets, ResolvesServerCert,
    ServerConfig, ServerSessionMemoryCache, StoresServerSessions,
};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;

use crate::conf::ssl::{Protocol, ServerSsl};
use crate::conf::vars::Var;
pub use crate::net::tls_cache::{SessionZone, SharedSessions};
pub use crate::net::tls_tickets::TicketKeys;
pub use crate::net::tls_verify::{ClientAuth, ClientCert, Verify};

/// The first byte of a TLS handshake record; a byte with the high bit set
/// starts an SSLv2-style hello (not plain HTTP either, as nginx tells them).
pub fn looks_like_tls(first: u8) -> bool {
    first == 0x16 || first & 0x80 != 0
}

/// Picks, among a server's certificates, one whose key signs with the
/// first signature scheme the client offers that any of them can (rustls
/// has already narrowed the schemes to the suites both sides have), so RSA
/// and ECDSA certificates live side by side as in nginx, where the client's
/// preference decides too.
#[derive(Debug)]
struct Certs(Vec<Arc<CertifiedKey>>);

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        hello.signature_schemes().iter().find_map(|scheme| {
            self.0
                .iter()
                .find(|c| c.key.choose_scheme(std::slice::from_ref(scheme)).is_some())
                .cloned()
        })
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Prefixes what it keeps with the time it was made, and refuses it once
/// `lifetime` has passed: rustls itself does not expire sessions.
fn stamp(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + v.len());
    out.extend_from_slice(&now_secs().to_be_bytes());
    out.extend_from_slice(v);
    out
}

fn unstamp(mut v: Vec<u8>, lifetime: u64) -> Option<Vec<u8>> {
    let made = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    if now_secs().saturating_sub(made) > lifetime {
        return None;
    }
    v.drain(..8);
    Some(v)
}

/// Session tickets sealed with keys every worker shares (the master's, or
/// `ssl_session_ticket_key` files'), good for `ssl_session_timeout`.
#[derive(Debug)]
struct Tickets {
    keys: Arc<TicketKeys>,
    lifetime: u32,
    /// Off: tickets are opened, none are issued (the configuration for a
    /// TLS 1.2 client offering a ticket the current key sealed).
    issue: bool,
}

impl ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        self.issue
    }

    fn lifetime(&self) -> u32 {
        self.lifetime
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.keys.seal(&stamp(plain))
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        unstamp(self.keys.open(cipher)?, u64::from(self.lifetime))
    }
}

/// What the master makes for TLS before it forks, shared by the workers of
/// a generation: the `ssl_session_cache shared:` zones by name, and the
/// ticket keys.
#[derive(Debug, Clone, Default)]
pub struct TlsShared {
    pub caches: HashMap<String, Arc<SessionZone>>,
    pub tickets: Option<Arc<TicketKeys>>,
}

/// `ssl_session_cache builtin`: this process's cache, entries good for
/// `ssl_session_timeout`.
#[derive(Debug)]
struct Sessions {
    inner: Arc<ServerSessionMemoryCache>,
    lifetime: u64,
}

impl StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, stamp(&value))
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        unstamp(self.inner.get(key)?, self.lifetime)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        unstamp(self.inner.take(key)?, self.lifetime)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

/// `ssl_key_log`, `proxy_ssl_key_log`: NSS key log lines appended to the
/// file the master opened, each with one write (O_APPEND keeps the
/// workers' lines whole).
#[derive(Debug)]
pub(crate) struct NssKeyLog(pub(crate) Arc<crate::conf::ssl::KeyLogFile>);

impl rustls::KeyLog for NssKeyLog {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        use std::fmt::Write as _;
        let mut line =
            String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
        line.push_str(label);
        line.push(' ');
        for b in client_random {
            let _ = write!(line, "{b:02x}");
        }
        line.push(' ');
        for b in secret {
            let _ = write!(line, "{b:02x}");
        }
        line.push('\n');
        let _ = (&self.0.file).write(line.as_bytes());
    }
}

/// A server's rustls configurations: one for a handshake that starts
/// afresh, and the two a client resuming a session gets, so that it does
/// as little after the handshake as OpenSSL's servers ask of it: one TLS
/// 1.3 ticket after a resumption (two after a full handshake, as rustls
/// and OpenSSL send), and a TLS 1.2 ticket renewed only when an older key
/// sealed it. They share certificates, sessions and ticket keys; the
/// ClientHello picks one (`pick`).
#[derive(Debug, Clone)]
pub struct ServerTls {
    fresh: Arc<ServerConfig>,
    /// For a hello offering a TLS 1.3 pre-shared key.
    psk: Arc<ServerConfig>,
    /// For a TLS 1.2 hello offering a ticket: it is opened, no new one is
    /// issued (None: tickets are off).
    ticket: Option<(Arc<ServerConfig>, Arc<TicketKeys>)>,
    /// The server speaks TLS 1.3.
    tls13: bool,
}

impl ServerTls {
    /// The configuration for a handshake whose ClientHello message is
    /// `hello` (None: the message could not be kept; a fresh handshake's).
    pub(super) fn pick(&self, hello: Option<&[u8]>) -> &Arc<ServerConfig> {
        let Some(offer) = hello.map(crate::net::preread::resumption) else {
            return &self.fresh;
        };
        if offer.psk {
            return &self.psk;
        }
        match (&self.ticket, offer.ticket) {
            // Only a hello that leaves TLS 1.2 as the one version both
            // speak: the configuration without tickets would answer a TLS
            // 1.3 one with stateful tickets.
            (Some((cfg, keys)), Some(t))
                if keys.sealed_by_current(t) && !(offer.tls13 && self.tls13) =>
            {
                cfg
            }
            _ => &self.fresh,
        }
    }

    /// The same with another ALPN list.
    pub fn with_alpn(&self, alpn: &[&[u8]]) -> ServerTls {
        let with = |c: &Arc<ServerConfig>| {
            let mut c = (**c).clone();
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Arc::new(c)
        };
        ServerTls {
            fresh: with(&self.fresh),
            psk: with(&self.psk),
            ticket: self.ticket.as_ref().map(|(c, k)| (with(c), k.clone())),
            tls13: self.tls13,
        }
    }
}

/// A server's rustls configurations, with its client-certificate settings
/// when it asks for certificates. `alpn`: the protocols it offers (for
/// stream servers, what `ssl_alpn` lists).
pub fn server_config(
    s: &ServerSsl,
    shared: &TlsShared,
    alpn: &[&[u8]],
) -> Result<(ServerTls, Option<Arc<ClientAuth>>), rustls::Error> {
    let mut p = provider::default_provider();
    let mut suites = Vec::new();
    if s.protocols.contains(&Protocol::Tls13) {
        suites.extend(crate::conf::ciphers::tls13());
    }
    if s.protocols.contains(&Protocol::Tls12) {
        suites.extend(s.ciphers.iter().copied());
    }
    p.cipher_suites = suites;
    if let Some(groups) = &s.kx_groups {
        p.kx_groups = groups
            .iter()
            .filter_map(|g| crate::conf::ssl::kx_group(*g))
            .collect();
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = s
        .protocols
        .iter()
        .map(|v| match v {
            Protocol::Tls12 => &rustls::version::TLS12,
            Protocol::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    let auth = ClientAuth::new(s)?.map(Arc::new);
    let builder =
        ServerConfig::builder_with_provider(Arc::new(p)).with_protocol_versions(&versions)?;
    let builder = match &auth {
        Some(a) => builder.with_client_cert_verifier(a.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_cert_resolver(Arc::new(Certs(s.certs.clone())));
    cfg.ignore_client_order = s.prefer_server_ciphers;
    if let Some(f) = &s.key_log {
        cfg.key_log = Arc::new(NssKeyLog(f.clone()));
    }
    // rustls counts the record's 5-byte header in.
    cfg.max_fragment_size = Some(s.buffer_size + 5);
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let lifetime = s.session_timeout.as_secs();
    let zone = s
        .session_cache
        .shared
        .as_ref()
        .and_then(|(name, _)| shared.caches.get(name));
    let builtin = s.session_cache.sessions();
    cfg.session_storage = match zone {
        Some(z) => Arc::new(SharedSessions {
            zone: z.clone(),
            lifetime,
        }),
        None if builtin > 0 => Arc::new(Sessions {
            inner: ServerSessionMemoryCache::new(builtin),
            lifetime,
        }),
        None => Arc::new(NoServerSessionStorage {}),
    };
    let cached = zone.is_some() || builtin > 0;
    let mut ticket = None;
    if s.session_tickets {
        let keys = if s.ticket_keys.is_empty() {
            match &shared.tickets {
                Some(k) => Some(k.clone()),
                None => TicketKeys::generate().map(Arc::new),
            }
        } else {
            TicketKeys::from_material(&s.ticket_keys).map(Arc::new)
        };
        let keys = keys.ok_or_else(|| rustls::Error::General("no session ticket keys".into()))?;
        let tickets = |issue| Tickets {
            keys: keys.clone(),
            lifetime: u32::try_from(lifetime).unwrap_or(u32::MAX),
            issue,
        };
        let mut open_only = cfg.clone();
        open_only.ticketer = Arc::new(tickets(false));
        ticket = Some((Arc::new(open_only), keys.clone()));
        cfg.ticketer = Arc::new(tickets(true));
    } else if !cached {
        // Nothing to resume with: no TLS 1.3 tickets either.
        cfg.send_tls13_tickets = 0;
    }
    let mut psk = cfg.clone();
    psk.send_tls13_tickets = psk.send_tls13_tickets.min(1);
    let tls = ServerTls {
        fresh: Arc::new(cfg),
        psk: Arc::new(psk),
        ticket,
        tls13: s.protocols.contains(&Protocol::Tls13),
    };
    Ok((tls, auth))
}

/// What the variables tell of a TLS connection.
#[derive(Debug, Clone)]
pub struct Details {
    /// `TLSv1.2`, `TLSv1.3`.
    pub protocol: &'static str,
    /// The suite's OpenSSL name.
    pub cipher: &'static str,
    pub server_name: Option<String>,
    /// The session was resumed.
    pub reused: bool,
    /// The client's certificate, verified (`Verify::None` when it sent
    /// none or none was asked for).
    pub verify: Verify,
    pub client_cert: Option<Box<ClientCert>>,
    /// The protocol ALPN chose (`$ssl_alpn_protocol`).
    pub alpn: Option<String>,
}

impl Details {
    /// The value of an `$ssl_*` variable over this connection (None: `v`
    /// is no such variable). The http and stream modules both use it.
    pub fn value(&self, v: &Var) -> Option<String> {
        let cert = |f: fn(&ClientCert) -> String| self.client_cert.as_deref().map(f);
        Some(match v {
            Var::SslProtocol => self.protocol.to_string(),
            Var::SslCipher => self.cipher.to_string(),
            Var::SslServerName => self.server_name.clone().unwrap_or_default(),
            Var::SslSessionReused => if self.reused { "r" } else { "." }.to_string(),
            Var::SslClientVerify => self.verify.text(),
            Var::SslClientSDn => cert(|x| x.s_dn.clone()).unwrap_or_default(),
            Var::SslClientIDn => cert(|x| x.i_dn.clone()).unwrap_or_default(),
            Var::SslClientSerial => cert(|x| x.serial.clone()).unwrap_or_default(),
            Var::SslClientFingerprint => cert(|x| x.fingerprint.clone()).unwrap_or_default(),
            Var::SslClientEscapedCert => cert(ClientCert::escaped).unwrap_or_default(),
            Var::SslClientCert => cert(ClientCert::tabbed).unwrap_or_default(),
            Var::SslClientRawCert => cert(|x| x.pem.clone()).unwrap_or_default(),
            Var::SslAlpnProtocol => self.alpn.clone().unwrap_or_default(),
            _ => return None,
        })
    }
}

fn details(c: &rustls::Connection, auth: Option<&ClientAuth>) -> Details {
    let chain = c.peer_certificates().filter(|c| !c.is_empty());
    Details {
        verify: auth.map_or(Verify::None, |a| a.verify(chain)),
        client_cert: chain
            .and_then(|c| c.first())
            .map(|c| Box::new(ClientCert::new(c))),
        protocol: match c.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "",
        },
        cipher: c
            .negotiated_cipher_suite()
            .map_or("", crate::conf::ciphers::openssl_name),
        server_name: match c {
            rustls::Connection::Server(s) => s.server_name().map(str::to_owned),
            rustls::Connection::Client(_) => None,
        },
        reused: matches!(c.handshake_kind(), Some(rustls::HandshakeKind::Resumed)),
        alpn: c
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
    }
}

/// The socket as rustls's reader and writer: non-blocking calls that clear
/// tokio's readiness when they would block.
pub(super) struct Raw<'a>(pub(super) &'a TcpStream);

impl Read for Raw<'_> {
    /// A read that did not fill the room clears the socket's readiness (as
    /// `Stream::try_read_buf` does): the next wait goes to the poller, not
    /// to a read that would only say EAGAIN.
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let room = b.len();
        let mut got = None;
        let r = self.0.try_io(tokio::io::Interest::READABLE, || {
            let n = self.0.try_read(b)?;
            got = Some(n);
            if n > 0 && n < room {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match (r, got) {
            (_, Some(n)) => Ok(n),
            (r, None) => r,
        }
    }
}

impl Write for Raw<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.try_write(b)
    }

    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(b)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum HandshakeError {
    /// The client closed before it ended.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// TLS itself failed (rustls's words).
    Tls(rustls::Error),
    /// The server the client asked for has no certificate.
    NoCertificate,
    /// The server the client asked for has `ssl_reject_handshake on`.
    Rejected,
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Closed => f.write_str("peer closed connection in SSL handshake"),
            HandshakeError::Io(e) => write!(
                f,
                "SSL_do_handshake() failed ({})",
                crate::log::errno_text(e)
            ),
            HandshakeError::Tls(e) => write!(f, "SSL_do_handshake() failed (rustls: {e})"),
            HandshakeError::NoCertificate => {
                f.write_str("no \"ssl_certificate\" is defined in server listening on SSL port")
            }
            HandshakeError::Rejected => {
                f.write_str("SSL_do_handshake() failed (handshake rejected)")
            }
        }
    }
}

/// Sends what rustls has to send, waiting for the socket as needed.
pub(super) async fn send_all(
    tcp: &TcpStream,
    mut write: impl FnMut(&mut Raw<'_>) -> io::Result<usize>,
) -> io::Result<()> {
    loop {
        match write(&mut Raw(tcp)) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.writable().await?,
            Err(e) => return Err(e),
        }
    }
}

/// Reads what the socket has into rustls; Ok(false) when the peer closed.
pub(super) async fn recv_some(
    tcp: &TcpStream,
    mut read: impl FnMut(&mut Raw<'_>) -> io::Result<usize>,
) -> io::Result<bool> {
    loop {
        match read(&mut Raw(tcp)) {
            Ok(n) => return Ok(n > 0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.readable().await?,
            Err(e) => return Err(e),
        }
    }
}

/// Runs the server side of a handshake (the caller bounds it in time).
/// `choose` gets the SNI name and gives the configurations of the server
/// it picks, or why there is none (`Rejected`: the `unrecognized_name`
/// alert goes out, as nginx's `ssl_reject_handshake`); the ClientHello
/// picks one of them (`ServerTls::pick`).
pub async fn accept<'c>(
    tcp: TcpStream,
    choose: impl FnOnce(Option<&str>) -> Result<&'c ServerTls, HandshakeError>,
) -> Result<TlsStream, HandshakeError> {
    let mut acceptor = Acceptor::default();
    // The hello's records as they came, for what rustls does not show.
    let mut hello = Some(Vec::new());
    let accepted = loop {
        if !recv_some(&tcp, |r| acceptor.read_tls(&mut Tee(r, &mut hello)))
            .await
            .map_err(HandshakeError::Io)?
        {
            return Err(HandshakeError::Closed);
        }
        match acceptor.accept() {
            Ok(None) => {}
            Ok(Some(a)) => break a,
            Err((e, mut alert)) => {
                let _ = send_all(&tcp, |w| alert.write(w)).await;
                return Err(HandshakeError::Tls(e));
            }
        }
    };
    let tls = match choose(accepted.client_hello().server_name()) {
        Ok(c) => c,
        Err(HandshakeError::Rejected) => {
            // Seven bytes on a socket that has sent nothing yet.
            let _ = tcp.try_write(UNRECOGNIZED_NAME);
            return Err(HandshakeError::Rejected);
        }
        Err(e) => return Err(e),
    };
    let message = hello
        .as_deref()
        .and_then(crate::net::preread::handshake_message);
    let config = tls.pick(message.as_deref()).clone();
    drop((hello, message));
    let conn = match accepted.into_connection(config) {
        Ok(c) => c,
        Err((e, mut alert)) => {
            let _ = send_all(&tcp, |w| alert.write(w)).await;
            return Err(HandshakeError::Tls(e));
        }
    };
    let mut conn = rustls::Connection::from(conn);
    drive(&tcp, &mut conn).await.map_err(|stop| match stop {
        Stop::Io(e) => HandshakeError::Io(e),
        Stop::Closed => HandshakeError::Closed,
        Stop::Tls(e) => HandshakeError::Tls(e),
    })?;
    Ok(TlsStream::new(tcp, conn))
}

/// A reader that keeps a copy of what it reads, up to `HELLO_MAX` bytes
/// (past that, none: a ClientHello that long is answered as one that
/// resumes nothing).
struct Tee<'r, 'a>(&'r mut Raw<'a>, &'r mut Option<Vec<u8>>);

/// The most of a ClientHello's records kept.
const HELLO_MAX: usize = 16 * 1024;

impl Read for Tee<'_, '_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(b)?;
        if let Some(copy) = self.1 {
            if copy.len() + n <= HELLO_MAX {
                copy.extend_from_slice(&b[..n]);
            } else {
                *self.1 = None;
            }
        }
        Ok(n)
    }
}

/// A fatal `unrecognized_name` alert record, in the clear (no keys are
/// agreed yet when it is sent).
const UNRECOGNIZED_NAME: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112];

/// Why a handshake stopped short.
pub(super) enum Stop {
    Io(io::Error),
    /// The peer closed.
    Closed,
    Tls(rustls::Error),
}

/// Runs a handshake (a client's or a server's) to its end: rustls's
/// records out, the peer's in; on a TLS error the alert that says why goes
/// out first.
pub(super) async fn drive(tcp: &TcpStream, conn: &mut rustls::Connection) -> Result<(), Stop> {
    loop {
        send_all(tcp, |w| {
            if conn.wants_write() {
                conn.write_tls(w)
            } else {
                Ok(0)
            }
        })
        .await
        .map_err(Stop::Io)?;
        if !conn.is_handshaking() {
            return Ok(());
        }
        if !recv_some(tcp, |r| conn.read_tls(r))
            .await
            .map_err(Stop::Io)?
        {
            return Err(Stop::Closed);
        }
        if let Err(e) = conn.process_new_packets() {
            let _ = conn.write_tls(&mut Raw(tcp));
            return Err(Stop::Tls(e));
        }
    }
}

/// A TLS connection's state beside its socket (it travels with the socket
/// when the connection is parked).
pub struct Session {
    /// The server side of a client's connection, or the client side of one
    /// to an upstream.
    conn: rustls::Connection,
    /// Plaintext taken into rustls by a write that then had to wait for
    /// the socket: reported once it is sent (see `poll_write`).
    owed: usize,
    /// The socket said end of file.
    eof: bool,
}

impl Session {
    /// Plaintext is waiting in rustls, or the peer closed: a read would not
    /// wait.
    fn readable(&mut self) -> bool {
        self.eof
            || match self.conn.process_new_packets() {
                Ok(io) => io.plaintext_bytes_to_read() > 0 || io.peer_has_closed(),
                // The read reports it.
                Err(_) => true,
            }
    }
}

/// A TLS connection after its handshake (a client's, or one to an
/// upstream).
pub struct TlsStream {
    tcp: TcpStream,
    /// One connection's reads and writes take turns on it, never across an
    /// await: the lock is not contended.
    st: Mutex<Box<Session>>,
}

/// The most plaintext one read hands out, one record's worth.
const RECORD: usize = 16 * 1024;

impl TlsStream {
    pub(super) fn new(tcp: TcpStream, conn: rustls::Connection) -> TlsStream {
        TlsStream {
            tcp,
            st: Mutex::new(Box::new(Session {
                conn,
                owed: 0,
                eof: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Box<Session>> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the variables show; `auth`: the client-certificate settings
    /// of the server whose config made the handshake.
    pub fn details(&self, auth: Option<&ClientAuth>) -> Details {
        details(&self.lock().conn, auth)
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The handshake chose HTTP/2 (ALPN `h2`).
    pub fn alpn_h2(&self) -> bool {
        self.lock().conn.alpn_protocol() == Some(b"h2")
    }

    /// The socket and the TLS state apart (to park the connection).
    pub fn into_parts(self) -> (TcpStream, Box<Session>) {
        let st = self.st.into_inner().unwrap_or_else(|e| e.into_inner());
        (self.tcp, st)
    }

    pub fn from_parts(tcp: TcpStream, st: Box<Session>) -> TlsStream {
        TlsStream {
            tcp,
            st: Mutex::new(st),
        }
    }

    /// Plaintext is waiting in rustls (what the socket's readiness does
    /// not show).
    pub fn has_buffered(&self) -> bool {
        let mut st = self.lock();
        matches!(st.conn.process_new_packets(), Ok(io) if io.plaintext_bytes_to_read() > 0)
    }

    /// An idle connection is still quiet: open, and no data nor close from
    /// the peer. Records that arrive meanwhile are taken into rustls: a TLS
    /// 1.3 server's session tickets come after the handshake, unasked, and
    /// are no reason to drop the connection. Never waits.
    pub fn quiet(&self) -> bool {
        let mut st = self.lock();
        let st = &mut **st;
        loop {
            match st.conn.process_new_packets() {
                Ok(io) if io.plaintext_bytes_to_read() > 0 || io.peer_has_closed() => {
                    return false;
                }
                Ok(_) => {}
                Err(_) => return false,
            }
            if st.eof {
                return false;
            }
            match st.conn.read_tls(&mut Raw(&self.tcp)) {
                Ok(0) => st.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }

    /// Ends when the peer closes (close_notify, end of file, or a broken
    /// record) before sending data; once it has sent some this never ends.
    /// Records that arrive meanwhile are taken into rustls (their plaintext
    /// stays there for whoever reads next): a client's close_notify comes as
    /// bytes, which a peek alone would take for data.
    pub async fn hung_up(&self) {
        enum Seen {
            Data,
            Closed,
            More,
            Nothing,
        }
        // The socket is read only once it says it is readable: while the
        // request is handled it usually is not, and a read would only say
        // EAGAIN.
        let mut ready = false;
        loop {
            let seen = {
                let mut st = self.lock();
                let st = &mut **st;
                match st.conn.process_new_packets() {
                    Ok(io) if io.plaintext_bytes_to_read() > 0 => Seen::Data,
                    Ok(io) if !io.peer_has_closed() && !st.eof && !ready => Seen::Nothing,
                    Ok(io) if !io.peer_has_closed() && !st.eof => {
                        match st.conn.read_tls(&mut Raw(&self.tcp)) {
                            Ok(0) => {
                                st.eof = true;
                                Seen::More
                            }
                            Ok(_) => Seen::More,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Seen::Nothing,
                            Err(_) => Seen::Closed,
                        }
                    }
                    _ => Seen::Closed,
                }
            };
            match seen {
                Seen::Data => return std::future::pending().await,
                Seen::Closed => return,
                Seen::More => {}
                Seen::Nothing => {
                    if self.tcp.readable().await.is_err() {
                        return;
                    }
                    ready = true;
                }
            }
        }
    }

    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.lock().readable() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Hands the plaintext rustls has to `take` (up to `room` bytes),
    /// reading and decrypting records from the socket first when it has
    /// none: WouldBlock when none is there and the socket has no whole
    /// record; 0 when the peer closed.
    fn try_take(
        &self,
        room: usize,
        mut take: impl FnMut(&mut rustls::Reader<'_>) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if room == 0 {
            return Ok(0);
        }
        let mut st = self.lock();
        let st = &mut **st;
        loop {
            match take(&mut st.conn.reader()) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify, as most clients close.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if st.eof {
                return Ok(0);
            }
            if st.conn.read_tls(&mut Raw(&self.tcp))? == 0 {
                st.eof = true;
            }
            if let Err(e) = st.conn.process_new_packets() {
                let _ = st.conn.write_tls(&mut Raw(&self.tcp));
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // What the records asked to send (a key update's answer) goes
            // now if the socket takes it, else with the next write.
            while st.conn.wants_write() {
                if st.conn.write_tls(&mut Raw(&self.tcp)).is_err() {
                    break;
                }
            }
        }
    }

    /// Plaintext into `buf` (at most `room` bytes) without waiting (see
    /// `try_take`), copying only what there is: no room is zeroed first.
    pub fn try_read_buf<B: bytes::BufMut>(&self, buf: &mut B, room: usize) -> io::Result<usize> {
        let room = room.min(RECORD);
        self.try_take(room, |r| {
            let chunk = std::io::BufRead::fill_buf(r)?;
            let n = chunk.len().min(room);
            buf.put_slice(&chunk[..n]);
            std::io::BufRead::consume(r, n);
            Ok(n)
        })
    }

    /// Sends what rustls holds; Pending until the socket took all of it.
    fn poll_send(&self, st: &mut Session, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while st.conn.wants_write() {
            match st.conn.write_tls(&mut Raw(&self.tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(self.tcp.poll_write_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Encrypts what it takes of `data` and sends it. Ready(n) only once the
    /// records are on the socket, so that nothing written stays in rustls
    /// with no one to flush it: when the socket is full after rustls took
    /// the bytes, they are `owed` and the call is Pending; the retry (with
    /// the same data, as writers retry) reports them once they went out.
    pub fn poll_write(
        &self,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = data.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        let mut st = self.lock();
        let st = &mut **st;
        std::task::ready!(self.poll_send(st, cx))?;
        if st.owed > 0 {
            let n = std::mem::take(&mut st.owed).min(total);
            return Poll::Ready(Ok(n));
        }
        let n = st.conn.writer().write_vectored(data)?;
        match self.poll_send(st, cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(n)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                st.owed = n;
                Poll::Pending
            }
        }
    }

    pub fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.lock();
        self.poll_send(&mut st, cx)
    }

    /// Says close_notify (sent if the socket takes it now).
    pub fn close_notify(&self) {
        let mut st = self.lock();
        st.conn.send_close_notify();
        while st.conn.wants_write() {
            if st.conn.write_tls(&mut Raw(&self.tcp)).is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_expire() {
        let v = stamp(b"abc");
        assert_eq!(unstamp(v.clone(), 10).as_deref(), Some(&b"abc"[..]));
        let mut old = v;
        old[..8].copy_from_slice(&(now_secs() - 11).to_be_bytes());
        assert_eq!(unstamp(old, 10), None);
        assert_eq!(unstamp(vec![1, 2], 10), None);
    }

    #[test]
    fn first_bytes() {
        assert!(looks_like_tls(0x16));
        assert!(looks_like_tls(0x80));
        assert!(!looks_like_tls(b'G'));
    }
}
