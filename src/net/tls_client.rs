//! TLS to upstreams, the client side (rustls, aws-lc-rs provider): the client
//! config of a location's `proxy_ssl_*` settings, made in each worker, with
//! session resumption kept per peer address; the upstream's certificate
//! check as nginx does it (anything goes with `proxy_ssl_verify off`, though
//! the handshake's signature is still checked; else the chain to
//! `proxy_ssl_trusted_certificate` within `proxy_ssl_verify_depth`, then the
//! name); and the handshake on a connected socket, which gives the same
//! `TlsStream` the server side does. No HTTP, no timeouts (the caller's).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    ClientConfig, ClientConnection, ResolvesClientCert, Resumption,
    verify_server_cert_signed_by_trust_anchor, verify_server_name,
};
use rustls::crypto::{WebPkiSupportedAlgorithms, aws_lc_rs as provider};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;

use super::tls::{Stop, TlsStream, drive};
use crate::conf::model::PeerAddr;
use crate::conf::proxy_ssl::{ProxySsl, TrustedCerts};
use crate::conf::ssl::Protocol;

/// Sessions kept per peer for resumption.
const SESSIONS_PER_PEER: usize = 32;
/// Peers with their own config at most; past it the cache starts over
/// (peers that DNS took away are forgotten so).
const PEERS_KEPT: usize = 4096;

/// The upstream's certificate check.
#[derive(Debug)]
struct Verifier {
    /// None: `proxy_ssl_verify off`.
    trusted: Option<Arc<TrustedCerts>>,
    depth: u32,
    algs: WebPkiSupportedAlgorithms,
    /// webpki with `proxy_ssl_crl`'s lists, run after the chain and the
    /// name passed: it says whether a certificate is revoked.
    revocation: Option<Arc<dyn ServerCertVerifier>>,
}

/// A chain longer than `proxy_ssl_verify_depth` allows.
#[derive(Debug)]
struct ChainTooLong;

impl std::fmt::Display for ChainTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("22:certificate chain too long")
    }
}

impl std::error::Error for ChainTooLong {}

fn too_long() -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        ChainTooLong,
    ))))
}

/// The subsets of `all` with at most `k` members, in order (few: a server
/// sends a handful of intermediates).
fn subsets<T: Clone>(all: &[T], k: usize) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new()];
    for x in all {
        let more: Vec<Vec<T>> = out
            .iter()
            .filter(|s| s.len() < k)
            .map(|s| {
                let mut s = s.clone();
                s.push(x.clone());
                s
            })
            .collect();
        out.extend(more);
    }
    out
}

impl Verifier {
    /// The chain to a trusted certificate with at most `depth` intermediate
    /// certificates, as nginx built with OpenSSL 1.1.0 or later counts
    /// `proxy_ssl_verify_depth`.
    fn chain(
        &self,
        trusted: &TrustedCerts,
        cert: &ParsedCertificate<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let check = |with: &[CertificateDer<'_>]| {
            verify_server_cert_signed_by_trust_anchor(
                cert,
                &trusted.roots,
                with,
                now,
                self.algs.all,
            )
        };
        check(intermediates)?;
        let k = self.depth as usize;
        if intermediates.len() <= k {
            return Ok(());
        }
        // Some path uses no more than k of them?
        if intermediates.len() > 8 {
            return Err(too_long());
        }
        let short = subsets(intermediates, k)
            .iter()
            .any(|with| check(with).is_ok());
        if short { Ok(()) } else { Err(too_long()) }
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(trusted) = &self.trusted else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        self.chain(trusted, &cert, intermediates, now)?;
        verify_server_name(&cert, server_name)?;
        if let Some(r) = &self.revocation {
            r.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// `proxy_ssl_certificate`: sent whenever the upstream asks for one and
/// its key can sign as the upstream accepts.
#[derive(Debug)]
struct ClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _: &[&[u8]], schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0
            .key
            .choose_scheme(schemes)
            .is_some()
            .then(|| self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A location's client configuration, without resumption (each peer gets
/// its own session store, see [`Clients`]).
pub fn client_config(s: &ProxySsl) -> Result<ClientConfig, rustls::Error> {
    let mut p = provider::default_provider();
    let tls12: Vec<_> = match &s.ciphers {
        Some(c) => c.clone(),
        None => p
            .cipher_suites
            .iter()
            .copied()
            .filter(|c| matches!(c, rustls::SupportedCipherSuite::Tls12(_)))
            .collect(),
    };
    let mut suites = Vec::new();
    if s.protocols.contains(&Protocol::Tls13) {
        suites.extend(crate::conf::ciphers::tls13());
    }
    if s.protocols.contains(&Protocol::Tls12) {
        suites.extend(tls12);
    }
    p.cipher_suites = suites;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = s
        .protocols
        .iter()
        .map(|v| match v {
            Protocol::Tls12 => &rustls::version::TLS12,
            Protocol::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    let revocation = match (&s.crl, &s.trusted) {
        (Some(crl), Some(t)) if s.verify => Some(
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                t.roots.clone(),
                Arc::new(provider::default_provider()),
            )
            .with_crls(crl.crls.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?
                as Arc<dyn ServerCertVerifier>,
        ),
        _ => None,
    };
    let verifier = Arc::new(Verifier {
        trusted: if s.verify { s.trusted.clone() } else { None },
        depth: s.verify_depth,
        algs: p.signature_verification_algorithms,
        revocation,
    });
    let b = ClientConfig::builder_with_provider(Arc::new(p))
        .with_protocol_versions(&versions)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut cfg = match &s.certificate {
        Some(ck) => b.with_client_cert_resolver(Arc::new(ClientCert(ck.clone()))),
        None => b.with_no_client_auth(),
    };
    cfg.enable_sni = s.server_name;
    if let Some(f) = &s.key_log {
        cfg.key_log = Arc::new(super::tls::NssKeyLog(f.clone()));
    }
    if s.h2 {
        cfg.alpn_protocols = vec![b"h2".to_vec()];
    }
    cfg.resumption = Resumption::disabled();
    Ok(cfg)
}

/// The client configurations a worker made: one per location settings
/// (`ProxySsl::id`) and, with `proxy_ssl_session_reuse`, one per peer of
/// those, each with its own session store, so that a session is offered
/// again only to the peer that made it (as nginx keeps a session per peer).
#[derive(Default)]
pub struct Clients {
    made: Mutex<HashMap<ConfigKey, Arc<ClientConfig>>>,
}

/// A location's settings (`ProxySsl::id`), and the peer with a session
/// store of its own (None: the settings' config, without resumption).
type ConfigKey = (usize, Option<PeerAddr>);

impl Clients {
    pub fn new() -> Clients {
        Clients::default()
    }

    /// The configuration for a connection with `s`'s settings to `peer`.
    pub fn config(
        &self,
        s: &ProxySsl,
        peer: &PeerAddr,
    ) -> Result<Arc<ClientConfig>, rustls::Error> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let key = (s.id, s.session_reuse.then(|| peer.clone()));
        if let Some(c) = made.get(&key) {
            return Ok(c.clone());
        }
        let base = match made.get(&(s.id, None)) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(client_config(s)?);
                made.insert((s.id, None), c.clone());
                c
            }
        };
        if !s.session_reuse {
            return Ok(base);
        }
        if made.len() > PEERS_KEPT {
            made.retain(|(_, p), _| p.is_none());
        }
        let mut c = (*base).clone();
        c.resumption = Resumption::in_memory_sessions(SESSIONS_PER_PEER);
        let c = Arc::new(c);
        made.insert(key, c.clone());
        Ok(c)
    }
}

/// The name a handshake uses (for SNI when it is sent, and for the
/// certificate check): `proxy_ssl_name`'s value without a port; an address
/// stands for itself (no SNI is sent for an address, as nginx). None when
/// it is neither a host name nor an address.
pub fn server_name(text: &str) -> Option<ServerName<'static>> {
    let host = match text.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => text.rsplit_once(':').map_or(text, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                text
            }
        }),
    };
    ServerName::try_from(host.to_string()).ok()
}

/// Why a handshake with an upstream failed.
#[derive(Debug)]
pub enum ClientError {
    /// The upstream closed before it ended.
    Closed,
    /// The socket failed.
    Io(io::Error),
    /// TLS itself failed (rustls's words), the certificate check included.
    Tls(rustls::Error),
}

impl ClientError {
    /// nginx's words for it; `name`: the name the certificate was checked
    /// against.
    pub fn text(&self, name: &str) -> String {
        use rustls::Error::InvalidCertificate as Bad;
        match self {
            ClientError::Closed => "peer closed connection in SSL handshake".into(),
            ClientError::Io(e) => {
                format!("SSL_do_handshake() failed ({})", crate::log::errno_text(e))
            }
            ClientError::Tls(Bad(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => format!("upstream SSL certificate does not match \"{name}\""),
            ClientError::Tls(Bad(e)) => {
                format!(
                    "upstream SSL certificate verify error: ({})",
                    verify_reason(e)
                )
            }
            ClientError::Tls(e) => format!("SSL_do_handshake() failed (SSL: {e})"),
        }
    }
}

/// OpenSSL's verify codes and words where there is one, else rustls's.
fn verify_reason(e: &CertificateError) -> String {
    match e {
        CertificateError::UnknownIssuer => "20:unable to get local issuer certificate".into(),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "10:certificate has expired".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "9:certificate is not yet valid".into()
        }
        CertificateError::BadSignature => "7:certificate signature failure".into(),
        CertificateError::Revoked => "23:certificate revoked".into(),
        CertificateError::UnknownRevocationStatus => "3:unable to get certificate CRL".into(),
        CertificateError::ExpiredRevocationList
        | CertificateError::ExpiredRevocationListContext { .. } => "12:CRL has expired".into(),
        CertificateError::Other(o) => o.to_string(),
        other => rustls::Error::InvalidCertificate(other.clone())
            .to_string()
            .trim_start_matches("invalid peer certificate: ")
            .to_string(),
    }
}

/// Runs the client side of a handshake on a connected socket (the caller
/// bounds it in time).
pub async fn connect(
    tcp: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Result<TlsStream, ClientError> {
    let conn = ClientConnection::new(config, name).map_err(ClientError::Tls)?;
    let mut conn = rustls::Connection::from(conn);
    drive(&tcp, &mut conn).await.map_err(|stop| match stop {
        Stop::Io(e) => ClientError::Io(e),
        Stop::Closed => ClientError::Closed,
        Stop::Tls(e) => ClientError::Tls(e),
    })?;
    Ok(TlsStream::new(tcp, conn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_their_port() {
        let n = |t: &str| server_name(t).map(|n| n.to_str().into_owned());
        assert_eq!(
            n("backend.example:8443").as_deref(),
            Some("backend.example")
        );
        assert_eq!(n("backend.example").as_deref(), Some("backend.example"));
        assert_eq!(n("127.0.0.1:443").as_deref(), Some("127.0.0.1"));
        assert_eq!(n("[::1]:443").as_deref(), Some("::1"));
        assert_eq!(n("[::1]").as_deref(), Some("::1"));
        assert_eq!(n("under_score").as_deref(), Some("under_score"));
        assert_eq!(n("bad name"), None);
    }

    #[test]
    fn subsets_up_to_k() {
        assert_eq!(subsets(&[1, 2, 3], 0), vec![Vec::<i32>::new()]);
        assert_eq!(subsets(&[1, 2, 3], 1).len(), 4);
        assert_eq!(subsets(&[1, 2, 3], 2).len(), 7);
    }

    #[test]
    fn failures_read_as_nginx_words_them() {
        let bad = |e| ClientError::Tls(rustls::Error::InvalidCertificate(e));
        assert_eq!(
            bad(CertificateError::UnknownIssuer).text("b"),
            "upstream SSL certificate verify error: (20:unable to get local issuer certificate)"
        );
        assert_eq!(
            bad(CertificateError::NotValidForName).text("b.example"),
            "upstream SSL certificate does not match \"b.example\""
        );
        assert_eq!(
            ClientError::Tls(too_long()).text("b"),
            "upstream SSL certificate verify error: (22:certificate chain too long)"
        );
        assert_eq!(
            ClientError::Closed.text("b"),
            "peer closed connection in SSL handshake"
        );
        assert!(
            ClientError::Tls(rustls::Error::HandshakeNotComplete)
                .text("b")
                .starts_with("SSL_do_handshake() failed (SSL: ")
        );
    }
}
