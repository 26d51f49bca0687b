//! The ssl modules' directives (`ssl_certificate`, `ssl_protocols`,
//! `ssl_ciphers`, sessions, the handshake timeout, client certificates) in
//! the http and server contexts and in the stream and stream server
//! contexts (nginx's http and stream ssl modules share them), merged from
//! the block to its servers as nginx merges them, and the
//! certificates and keys read when the configuration is loaded: by the
//! master at start and reload (workers inherit them), and by `-t`. The only
//! I/O here is reading those files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::SupportedKxGroup;
use rustls::sign::CertifiedKey;
use rustls::{NamedGroup, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use x509_parser::prelude::FromDer;

use super::build::{Args, Builder, HTTP, Node, SRV, SSRV, STREAM, Spec, flag, not_here, set_once};
use super::tree::Directive;
use super::{ConfError, Src};

/// http, server, stream, stream server.
const HS: u8 = HTTP | SRV | STREAM | SSRV;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "ssl_certificate",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_certificate,
    },
    Spec {
        name: "ssl_certificate_key",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_certificate,
    },
    Spec {
        name: "ssl_protocols",
        ctx: HS,
        args: Args::AtLeast(1),
        block: false,
        set: set_protocols,
    },
    Spec {
        name: "ssl_ciphers",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_ciphers,
    },
    Spec {
        name: "ssl_prefer_server_ciphers",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "ssl_session_tickets",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "ssl_handshake_timeout",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "ssl_session_timeout",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_time,
    },
    Spec {
        name: "ssl_session_cache",
        ctx: HS,
        args: Args::AtLeast(1),
        block: false,
        set: set_session_cache,
    },
    Spec {
        name: "ssl_session_ticket_key",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_client_certificate",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_trusted_certificate",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_verify_client",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_verify_client,
    },
    Spec {
        name: "ssl_verify_depth",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_verify_depth,
    },
    Spec {
        name: "ssl_crl",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_key_log",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_stapling",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_stapling,
    },
    Spec {
        name: "ssl_stapling_verify",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "ssl_stapling_file",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_file,
    },
    Spec {
        name: "ssl_dhparam",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_dhparam,
    },
    Spec {
        name: "ssl_conf_command",
        ctx: HS,
        args: Args::Exactly(2),
        block: false,
        set: refuse,
    },
    Spec {
        name: "ssl_password_file",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: refuse,
    },
    Spec {
        name: "ssl_early_data",
        ctx: HTTP | SRV,
        args: Args::Exactly(1),
        block: false,
        set: refuse,
    },
    Spec {
        name: "ssl_ecdh_curve",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_ecdh_curve,
    },
    Spec {
        name: "ssl_buffer_size",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_buffer_size,
    },
    Spec {
        name: "ssl_reject_handshake",
        ctx: HS,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
];

/// `ssl_verify_client`: whether clients are asked for a certificate and
/// what a request without a good one gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyClient {
    #[default]
    Off,
    /// A certificate is required and must verify (else 496 or 495).
    On,
    /// A certificate is asked for; one that is sent must verify.
    Optional,
    /// A certificate is asked for; one whose issuer is unknown is let
    /// through (`$ssl_client_verify` says why it failed).
    OptionalNoCa,
}

/// A protocol version rustls speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

/// `ssl_session_cache`: where sessions are kept for resumption without
/// tickets. `off` and `none` both keep none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionCache {
    /// `builtin[:N]`: N sessions (nginx's default 20480).
    pub builtin: Option<u64>,
    /// `shared:NAME:SIZE`.
    pub shared: Option<(String, u64)>,
}

impl SessionCache {
    /// How many sessions a worker keeps in its own (`builtin`) cache; a
    /// shared zone, when there is one, is used instead.
    pub fn sessions(&self) -> usize {
        self.builtin.unwrap_or(0) as usize
    }
}

/// One server's TLS settings, merged, with its certificates loaded.
#[derive(Debug, Clone)]
pub struct ServerSsl {
    /// Certificate chains with their keys, as `ssl_certificate` and
    /// `ssl_certificate_key` pair them (empty: the server has none).
    pub certs: Vec<Arc<CertifiedKey>>,
    pub protocols: Vec<Protocol>,
    /// The TLS 1.2 suites `ssl_ciphers` selects, in its order.
    pub ciphers: Vec<SupportedCipherSuite>,
    pub prefer_server_ciphers: bool,
    pub handshake_timeout: Duration,
    pub session_timeout: Duration,
    pub session_tickets: bool,
    pub session_cache: SessionCache,
    /// `ssl_session_ticket_key` files' contents (48 or 80 bytes each), in
    /// order: the first encrypts, all decrypt. Empty: the master's keys.
    pub ticket_keys: Vec<Vec<u8>>,
    pub verify_client: VerifyClient,
    pub verify_depth: u32,
    /// `ssl_client_certificate`: CAs that verify clients and that are named
    /// in the CertificateRequest.
    pub client_cas: Vec<CertificateDer<'static>>,
    /// `ssl_trusted_certificate`: CAs that verify clients, not named.
    pub trusted_cas: Vec<CertificateDer<'static>>,
    /// `ssl_ecdh_curve`: the key exchange groups, in order; None: `auto`
    /// (the provider's defaults).
    pub kx_groups: Option<Vec<NamedGroup>>,
    /// `ssl_buffer_size`: the most plaintext in one record.
    pub buffer_size: usize,
    /// `ssl_reject_handshake`: handshakes that pick this server are
    /// refused with an `unrecognized_name` alert.
    pub reject_handshake: bool,
    /// `ssl_crl`: revocation lists client certificates are checked
    /// against (every certificate of the chain, as nginx's
    /// `X509_V_FLAG_CRL_CHECK_ALL`).
    pub crls: Vec<CertificateRevocationListDer<'static>>,
    /// `ssl_key_log`: where the handshakes' secrets are appended.
    pub key_log: Option<Arc<KeyLogFile>>,
}

/// A key log file (`ssl_key_log`, `proxy_ssl_key_log`), opened for
/// appending by the master when the configuration is loaded; the workers
/// inherit the descriptor and append NSS key log lines to it.
#[derive(Debug)]
pub struct KeyLogFile {
    pub path: PathBuf,
    pub file: std::fs::File,
}

/// Opens a key log file for appending (created 0600: it holds secrets).
pub(super) fn open_key_log(path: &PathBuf, src: &Src) -> Result<Arc<KeyLogFile>, ConfError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            ConfError::at(
                format!(
                    "open() \"{}\" failed ({})",
                    path.display(),
                    crate::log::errno_text(&e)
                ),
                src,
            )
        })?;
    Ok(Arc::new(KeyLogFile {
        path: path.clone(),
        file,
    }))
}

/// The settings while parsing, one per http or server level.
#[derive(Default, Clone)]
pub(super) struct SslB {
    certificate: Vec<(PathBuf, Src)>,
    certificate_key: Vec<(PathBuf, Src)>,
    protocols: Option<Vec<Protocol>>,
    ciphers: Option<Vec<SupportedCipherSuite>>,
    prefer_server_ciphers: Option<bool>,
    handshake_timeout: Option<Duration>,
    session_timeout: Option<Duration>,
    session_tickets: Option<bool>,
    session_cache: Option<SessionCache>,
    ticket_keys: Option<Vec<(PathBuf, Src)>>,
    client_certificate: Option<(PathBuf, Src)>,
    trusted_certificate: Option<(PathBuf, Src)>,
    verify_client: Option<(VerifyClient, Src)>,
    verify_depth: Option<u32>,
    ecdh_curve: Option<Option<Vec<NamedGroup>>>,
    buffer_size: Option<usize>,
    reject_handshake: Option<bool>,
    crl: Option<(PathBuf, Src)>,
    key_log: Option<(PathBuf, Src)>,
    stapling: Option<(bool, Src)>,
    stapling_verify: Option<bool>,
    stapling_file: Option<(PathBuf, Src)>,
}

fn ssl_b<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut SslB, ConfError> {
    match n {
        Node::Http(h) => Ok(&mut h.ssl),
        Node::Server(s) => Ok(&mut s.ssl),
        Node::Stream(st) => Ok(&mut st.ssl),
        Node::StreamServer(s) => Ok(&mut s.ssl),
        _ => Err(not_here(d)),
    }
}

fn set_certificate(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let a = &d.args[0];
    if a.contains('$') {
        return Err(ConfError::at(
            format!("variables in \"{}\" are not supported", d.name),
            &d.src,
        ));
    }
    if a.starts_with("data:") || a.starts_with("engine:") || a.starts_with("store:") {
        return Err(ConfError::at(
            format!("\"{a}\" in \"{}\": only files are supported", d.name),
            &d.src,
        ));
    }
    // Relative to the configuration's directory, as nginx's.
    let path = super::tree::full_name(&b.paths.conf_prefix(), a);
    let s = ssl_b(n, d)?;
    let list = if d.name == "ssl_certificate" {
        &mut s.certificate
    } else {
        &mut s.certificate_key
    };
    list.push((path, d.src.clone()));
    Ok(())
}

fn set_protocols(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = protocols(b, d)?;
    set_once(&mut ssl_b(n, d)?.protocols, v, d)
}

/// `ssl_protocols`' (and `proxy_ssl_protocols`') list: versions rustls
/// does not speak are warned about and left out.
pub(super) fn protocols(b: &mut Builder, d: &Directive) -> Result<Vec<Protocol>, ConfError> {
    let mut v = Vec::new();
    for a in &d.args {
        match a.as_str() {
            "TLSv1.2" => v.push(Protocol::Tls12),
            "TLSv1.3" => v.push(Protocol::Tls13),
            "SSLv2" | "SSLv3" | "TLSv1" | "TLSv1.1" => b.warnings.push(ConfError::at(
                format!("{a} is not supported (rustls speaks TLSv1.2 and TLSv1.3), ignored"),
                &d.src,
            )),
            _ => {
                return Err(ConfError::at(
                    format!("invalid value \"{a}\" in \"{}\" directive", d.name),
                    &d.src,
                ));
            }
        }
    }
    if v.is_empty() {
        return Err(ConfError::at(
            format!(
                "no protocol in \"{}\" is supported: use TLSv1.2 or TLSv1.3",
                d.name
            ),
            &d.src,
        ));
    }
    v.dedup();
    Ok(v)
}

fn set_ciphers(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = ciphers(d)?;
    set_once(&mut ssl_b(n, d)?.ciphers, v, d)
}

/// `ssl_ciphers`' (and `proxy_ssl_ciphers`') OpenSSL cipher string as the
/// TLS 1.2 suites rustls has.
pub(super) fn ciphers(d: &Directive) -> Result<Vec<SupportedCipherSuite>, ConfError> {
    let spec = &d.args[0];
    super::ciphers::parse(spec).map_err(|e| {
        ConfError::at(
            match e {
                super::ciphers::CipherError::NoSuite(w) => {
                    format!("cipher \"{w}\" in \"{}\" has no rustls suite", d.name)
                }
                super::ciphers::CipherError::NoMatch => {
                    format!("SSL_CTX_set_cipher_list(\"{spec}\") failed (no cipher match)")
                }
            },
            &d.src,
        )
    })
}

fn set_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = flag(d)?;
    let s = ssl_b(n, d)?;
    let slot = match d.name.as_str() {
        "ssl_prefer_server_ciphers" => &mut s.prefer_server_ciphers,
        "ssl_reject_handshake" => &mut s.reject_handshake,
        "ssl_stapling_verify" => &mut s.stapling_verify,
        _ => &mut s.session_tickets,
    };
    set_once(slot, v, d)
}

fn set_time(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let handshake = d.name == "ssl_handshake_timeout";
    // nginx keeps the handshake timeout in ms, the session timeout in s.
    let v = super::values::parse_time(&d.args[0], handshake)
        .ok_or_else(|| super::build::invalid_value(d))?;
    let s = ssl_b(n, d)?;
    let slot = if handshake {
        &mut s.handshake_timeout
    } else {
        &mut s.session_timeout
    };
    set_once(slot, v, d)
}

/// `ssl_session_ticket_key`, `ssl_client_certificate`,
/// `ssl_trusted_certificate`: a file, relative to the configuration's
/// directory; read when the configuration is finished.
fn set_file(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let a = &d.args[0];
    if a.contains('$') {
        return Err(ConfError::at(
            format!("variables in \"{}\" are not supported", d.name),
            &d.src,
        ));
    }
    let path = super::tree::full_name(&b.paths.conf_prefix(), a);
    let s = ssl_b(n, d)?;
    let v = (path, d.src.clone());
    match d.name.as_str() {
        "ssl_session_ticket_key" => {
            s.ticket_keys.get_or_insert_with(Vec::new).push(v);
            Ok(())
        }
        "ssl_client_certificate" => set_once(&mut s.client_certificate, v, d),
        "ssl_crl" => set_once(&mut s.crl, v, d),
        "ssl_key_log" => set_once(&mut s.key_log, v, d),
        "ssl_stapling_file" => set_once(&mut s.stapling_file, v, d),
        _ => set_once(&mut s.trusted_certificate, v, d),
    }
}

fn set_verify_client(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = match d.args[0].as_str() {
        "off" => VerifyClient::Off,
        "on" => VerifyClient::On,
        "optional" => VerifyClient::Optional,
        "optional_no_ca" => VerifyClient::OptionalNoCa,
        a => {
            return Err(ConfError::at(
                format!(
                    "invalid value \"{a}\" in \"{}\" directive, it must be \"on\", \"off\", \"optional\" or \"optional_no_ca\"",
                    d.name
                ),
                &d.src,
            ));
        }
    };
    set_once(&mut ssl_b(n, d)?.verify_client, (v, d.src.clone()), d)
}

/// `ssl_dhparam`: rustls has no DHE suites, so the parameters would never
/// be used; the file is still read, as nginx reads it, so a missing one
/// fails as there.
fn set_dhparam(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    ssl_b(n, d)?;
    let a = &d.args[0];
    let path = super::tree::full_name(&b.paths.conf_prefix(), a);
    read(&path).map_err(|why| {
        ConfError::at(
            format!(
                "PEM_read_bio_DHparams(\"{}\") failed ({why})",
                path.display()
            ),
            &d.src,
        )
    })?;
    b.warnings.push(ConfError::at(
        "\"ssl_dhparam\" has no effect: rustls offers no DHE cipher suites",
        &d.src,
    ));
    Ok(())
}

/// What sluice refuses with a reason: directives of OpenSSL's own, of
/// encrypted keys, of 0-RTT.
pub(super) fn refuse(_: &mut Builder, d: &Directive, _: &mut Node<'_>) -> Result<(), ConfError> {
    let why = match d.name.as_str() {
        // (`grpc_ssl_*` come here as their `proxy_ssl_*` namesakes.)
        "ssl_conf_command" | "proxy_ssl_conf_command" => {
            "OpenSSL configuration commands have no meaning for rustls"
        }
        "ssl_password_file" | "proxy_ssl_password_file" => {
            "encrypted keys are not supported: decrypt the key (openssl pkey -in KEY -out KEY.plain)"
        }
        _ => "0-RTT (TLS 1.3 early data) is not offered",
    };
    Err(ConfError::at(
        format!("\"{}\" is not supported: {why}", d.name),
        &d.src,
    ))
}

fn set_stapling(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = flag(d)?;
    set_once(&mut ssl_b(n, d)?.stapling, (v, d.src.clone()), d)
}

/// `ssl_stapling_file`: a DER OCSP response, stapled as it is.
fn load_ocsp(path: &PathBuf, src: &Src) -> Result<Vec<u8>, ConfError> {
    let err = |why: String| {
        ConfError::at(
            format!("cannot load OCSP response \"{}\": {why}", path.display()),
            src,
        )
    };
    let bytes = read(path).map_err(err)?;
    // An OCSPResponse is a DER SEQUENCE that is the whole file.
    match der(&bytes) {
        Some((0x30, _, [])) => Ok(bytes),
        _ => Err(err(
            "d2i_OCSP_RESPONSE_bio() failed (not a DER OCSP response)".into(),
        )),
    }
}

fn set_verify_depth(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v =
        super::build::number::<u32>(&d.args[0]).ok_or_else(|| super::build::invalid_value(d))?;
    set_once(&mut ssl_b(n, d)?.verify_depth, v, d)
}

/// The key exchange group an OpenSSL group name stands for (OpenSSL
/// compares them without case).
fn named_group(name: &str) -> Option<NamedGroup> {
    let n = name.to_ascii_lowercase();
    Some(match n.as_str() {
        "x25519" => NamedGroup::X25519,
        "prime256v1" | "secp256r1" | "p-256" => NamedGroup::secp256r1,
        "secp384r1" | "p-384" => NamedGroup::secp384r1,
        "secp521r1" | "p-521" => NamedGroup::secp521r1,
        "x448" => NamedGroup::X448,
        "ffdhe2048" => NamedGroup::FFDHE2048,
        "ffdhe3072" => NamedGroup::FFDHE3072,
        "ffdhe4096" => NamedGroup::FFDHE4096,
        "ffdhe6144" => NamedGroup::FFDHE6144,
        "ffdhe8192" => NamedGroup::FFDHE8192,
        "mlkem512" => NamedGroup::MLKEM512,
        "mlkem768" => NamedGroup::MLKEM768,
        "mlkem1024" => NamedGroup::MLKEM1024,
        "secp256r1mlkem768" => NamedGroup::secp256r1MLKEM768,
        "x25519mlkem768" => NamedGroup::X25519MLKEM768,
        _ => return None,
    })
}

/// The provider's key exchange group for `g`, if it has one.
pub fn kx_group(g: NamedGroup) -> Option<&'static dyn SupportedKxGroup> {
    rustls::crypto::aws_lc_rs::ALL_KX_GROUPS
        .iter()
        .find(|k| k.name() == g)
        .copied()
}

/// `ssl_ecdh_curve auto | NAME:NAME...`: OpenSSL's group names as the
/// provider's key exchange groups, in order.
fn set_ecdh_curve(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let spec = &d.args[0];
    let v = if spec == "auto" {
        None
    } else {
        let fail = |why: String| {
            ConfError::at(
                format!("SSL_CTX_set1_curves_list(\"{spec}\") failed ({why})"),
                &d.src,
            )
        };
        let mut groups = Vec::new();
        for name in spec.split(':') {
            let g = named_group(name).ok_or_else(|| fail(format!("unknown group \"{name}\"")))?;
            if kx_group(g).is_none() {
                return Err(fail(format!(
                    "group \"{name}\" is not supported by the TLS library (rustls with aws-lc-rs)"
                )));
            }
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        Some(groups)
    };
    set_once(&mut ssl_b(n, d)?.ecdh_curve, v, d)
}

/// `ssl_buffer_size`: at most 16k (a record holds no more, as OpenSSL's),
/// at least what rustls allows (32 bytes with the record's header).
fn set_buffer_size(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = super::values::parse_size(&d.args[0]).ok_or_else(|| super::build::invalid_value(d))?;
    if v < 27 {
        return Err(ConfError::at(
            format!(
                "\"{}\" must be at least 27 bytes (rustls' smallest record)",
                d.name
            ),
            &d.src,
        ));
    }
    let v = usize::try_from(v).unwrap_or(usize::MAX).min(16384);
    set_once(&mut ssl_b(n, d)?.buffer_size, v, d)
}

fn set_session_cache(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let invalid = |a: &str| ConfError::at(format!("invalid session cache \"{a}\""), &d.src);
    let mut c = SessionCache::default();
    let mut off_or_none = false;
    for a in &d.args {
        match a.as_str() {
            "off" | "none" => off_or_none = true,
            "builtin" => c.builtin = Some(20480),
            _ if a.starts_with("builtin:") => {
                let n = super::build::number::<u64>(&a["builtin:".len()..])
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid(a))?;
                c.builtin = Some(n);
            }
            _ if a.starts_with("shared:") => {
                let rest = &a["shared:".len()..];
                let (name, size) = rest.rsplit_once(':').ok_or_else(|| invalid(a))?;
                if name.is_empty() {
                    return Err(invalid(a));
                }
                let size = super::values::parse_size(size).ok_or_else(|| invalid(a))?;
                if size < 8 * 4096 {
                    return Err(ConfError::at(
                        format!("session cache \"{a}\" is too small"),
                        &d.src,
                    ));
                }
                // One name, one zone: as nginx's shared memory, the same
                // name with another size is an error.
                match b.ssl_zones.iter().find(|(n, _)| n == name) {
                    Some((_, old)) if *old != size => {
                        return Err(ConfError::at(
                            format!(
                                "the size {size} of shared memory zone \"{name}\" conflicts with already declared size {old}"
                            ),
                            &d.src,
                        ));
                    }
                    Some(_) => {}
                    None => b.ssl_zones.push((name.to_string(), size)),
                }
                c.shared = Some((name.to_string(), size));
            }
            _ => return Err(invalid(a)),
        }
    }
    if off_or_none && d.args.len() > 1 {
        return Err(invalid(&d.args[0]));
    }
    set_once(&mut ssl_b(n, d)?.session_cache, c, d)
}

impl SslB {
    /// Takes what this level left unset from `parent` (the certificate
    /// list as a whole, as nginx merges it).
    pub(super) fn inherit(&mut self, parent: &SslB) {
        if self.certificate.is_empty() && self.certificate_key.is_empty() {
            self.certificate = parent.certificate.clone();
            self.certificate_key = parent.certificate_key.clone();
        }
        macro_rules! take {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = parent.$f.clone(); } )* };
        }
        take!(
            protocols,
            ciphers,
            prefer_server_ciphers,
            handshake_timeout,
            session_timeout,
            session_tickets,
            session_cache,
            ticket_keys,
            client_certificate,
            trusted_certificate,
            verify_client,
            verify_depth,
            ecdh_curve,
            buffer_size,
            reject_handshake,
            crl,
            key_log,
            stapling,
            stapling_verify,
            stapling_file
        );
    }
}

/// Certificates read so far in one load, so that a pair inherited by many
/// servers is read once.
#[derive(Default)]
pub(super) struct Loaded(
    HashMap<(PathBuf, PathBuf), Arc<CertifiedKey>>,
    HashMap<PathBuf, Vec<CertificateDer<'static>>>,
);

impl Loaded {
    /// The certificate chain and key of these files, read on first use.
    pub(super) fn pair(
        &mut self,
        cert: &PathBuf,
        key: &PathBuf,
        src: &Src,
        warnings: &mut Vec<ConfError>,
    ) -> Result<Arc<CertifiedKey>, ConfError> {
        let pair = (cert.clone(), key.clone());
        if let Some(ck) = self.0.get(&pair) {
            return Ok(ck.clone());
        }
        let ck = Arc::new(load_pair(cert, key, src, warnings)?);
        self.0.insert(pair, ck.clone());
        Ok(ck)
    }
}

/// A server's settings with nginx's defaults and its certificates loaded.
/// `ssl_src`: its first `listen ... ssl`, which needs a certificate.
pub(super) fn finish(
    s: &SslB,
    ssl_src: Option<&Src>,
    loaded: &mut Loaded,
    warnings: &mut Vec<ConfError>,
) -> Result<ServerSsl, ConfError> {
    let reject_handshake = s.reject_handshake.unwrap_or(false);
    if let Some(src) = ssl_src {
        // A server that refuses every handshake needs no certificate.
        if s.certificate.is_empty() && !reject_handshake {
            return Err(ConfError::at(
                "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive",
                src,
            ));
        }
    }
    let mut certs = Vec::with_capacity(s.certificate.len());
    for (i, (cert, src)) in s.certificate.iter().enumerate() {
        let Some((key, _)) = s.certificate_key.get(i) else {
            return Err(ConfError::at(
                format!(
                    "no \"ssl_certificate_key\" is defined for certificate \"{}\"",
                    cert.display()
                ),
                src,
            ));
        };
        certs.push(loaded.pair(cert, key, src, warnings)?);
    }
    let verify_client = match &s.verify_client {
        Some((v, src))
            if matches!(v, VerifyClient::On | VerifyClient::Optional)
                && s.client_certificate.is_none()
                && s.trusted_certificate.is_none() =>
        {
            return Err(ConfError::at(
                "no ssl_client_certificate or ssl_trusted_certificate for ssl_verify_client",
                src,
            ));
        }
        Some((v, _)) => *v,
        None => VerifyClient::Off,
    };
    let client_cas = load_cas(&s.client_certificate, loaded)?;
    let trusted_cas = load_cas(&s.trusted_certificate, loaded)?;
    let ticket_keys = load_ticket_keys(&s.ticket_keys)?;
    let crls = match &s.crl {
        Some((path, src)) => load_crls(path, src)?,
        None => Vec::new(),
    };
    let mut certs = certs;
    match (&s.stapling, &s.stapling_file) {
        (Some((true, _)), Some((path, src))) => {
            let ocsp = load_ocsp(path, src)?;
            for c in &mut certs {
                let mut ck = (**c).clone();
                ck.ocsp = Some(ocsp.clone());
                *c = Arc::new(ck);
            }
        }
        (Some((true, src)), None) => warnings.push(ConfError::at(
            "\"ssl_stapling\" ignored: stapling is off without \"ssl_stapling_file\" (sluice does not query OCSP responders)",
            src,
        )),
        _ => {}
    }
    let key_log = match &s.key_log {
        Some((path, src)) => Some(open_key_log(path, src)?),
        None => None,
    };
    if let Some((key, src)) = s.certificate_key.get(s.certificate.len()) {
        return Err(ConfError::at(
            format!(
                "no \"ssl_certificate\" is defined for key \"{}\"",
                key.display()
            ),
            src,
        ));
    }
    Ok(ServerSsl {
        certs,
        protocols: s
            .protocols
            .clone()
            .unwrap_or_else(|| vec![Protocol::Tls12, Protocol::Tls13]),
        ciphers: match &s.ciphers {
            Some(c) => c.clone(),
            None => super::ciphers::parse("HIGH:!aNULL:!MD5").unwrap_or_default(),
        },
        prefer_server_ciphers: s.prefer_server_ciphers.unwrap_or(false),
        handshake_timeout: s.handshake_timeout.unwrap_or(Duration::from_secs(60)),
        session_timeout: s.session_timeout.unwrap_or(Duration::from_secs(300)),
        session_tickets: s.session_tickets.unwrap_or(true),
        session_cache: s.session_cache.clone().unwrap_or_default(),
        ticket_keys,
        verify_client,
        verify_depth: s.verify_depth.unwrap_or(1),
        client_cas,
        trusted_cas,
        kx_groups: s.ecdh_curve.clone().flatten(),
        buffer_size: s.buffer_size.unwrap_or(16384),
        reject_handshake,
        crls,
        key_log,
    })
}

/// The certificates of a CA file (`ssl_client_certificate`,
/// `ssl_trusted_certificate`), each read once per load.
fn load_cas(
    f: &Option<(PathBuf, Src)>,
    loaded: &mut Loaded,
) -> Result<Vec<CertificateDer<'static>>, ConfError> {
    let Some((path, src)) = f else {
        return Ok(Vec::new());
    };
    if let Some(v) = loaded.1.get(path) {
        return Ok(v.clone());
    }
    let err = |why: String| {
        ConfError::at(
            format!(
                "SSL_CTX_load_verify_locations(\"{}\") failed ({why})",
                path.display()
            ),
            src,
        )
    };
    let pem = read(path).map_err(err)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    // Each must be a certificate that can be a trust anchor.
    let mut store = rustls::RootCertStore::empty();
    for c in &certs {
        store
            .add(c.clone())
            .map_err(|e| err(format!("bad certificate: {e}")))?;
    }
    loaded.1.insert(path.clone(), certs.clone());
    Ok(certs)
}

/// A file of PEM certificate revocation lists (`ssl_crl`,
/// `proxy_ssl_crl`), at least one.
pub(super) fn load_crls(
    path: &PathBuf,
    src: &Src,
) -> Result<Vec<CertificateRevocationListDer<'static>>, ConfError> {
    let err = |why: String| {
        ConfError::at(
            format!(
                "X509_LOOKUP_load_file(\"{}\") failed ({why})",
                path.display()
            ),
            src,
        )
    };
    let pem = read(path).map_err(err)?;
    let crls = CertificateRevocationListDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad PEM: {e}")))?;
    if crls.is_empty() {
        return Err(err("no CRL in the file".into()));
    }
    // Each must parse as a CRL webpki can use.
    for c in &crls {
        x509_parser::revocation_list::CertificateRevocationList::from_der(c.as_ref())
            .map_err(|e| err(format!("bad CRL: {e}")))?;
    }
    Ok(crls)
}

/// `ssl_session_ticket_key` files: 80 or 48 bytes each, as nginx's.
fn load_ticket_keys(files: &Option<Vec<(PathBuf, Src)>>) -> Result<Vec<Vec<u8>>, ConfError> {
    let mut keys = Vec::new();
    for (path, src) in files.iter().flatten() {
        let buf = read(path).map_err(|why| {
            ConfError::at(
                format!("cannot read ticket key \"{}\": {why}", path.display()),
                src,
            )
        })?;
        if buf.len() != 80 && buf.len() != 48 {
            return Err(ConfError::at(
                format!("\"{}\" must be 80 or 48 bytes", path.display()),
                src,
            ));
        }
        keys.push(buf);
    }
    Ok(keys)
}

pub(super) fn read(path: &PathBuf) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("open() failed ({})", crate::log::errno_text(&e)))
}

/// Reads a certificate chain and its key, and checks that they belong
/// together; an expired certificate is a warning.
fn load_pair(
    cert: &PathBuf,
    key: &PathBuf,
    src: &Src,
    warnings: &mut Vec<ConfError>,
) -> Result<CertifiedKey, ConfError> {
    let cert_err = |why: String| {
        ConfError::at(
            format!("cannot load certificate \"{}\": {why}", cert.display()),
            src,
        )
    };
    let key_err = |why: String| {
        ConfError::at(
            format!("cannot load certificate key \"{}\": {why}", key.display()),
            src,
        )
    };
    let pem = read(cert).map_err(cert_err)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(format!("bad PEM ({e})")))?;
    if chain.is_empty() {
        return Err(cert_err("no certificate in the file".into()));
    }
    let pem = read(key).map_err(key_err)?;
    if pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED") {
        return Err(key_err(
            "encrypted keys are not supported (sluice has no \"ssl_password_file\")".into(),
        ));
    }
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| key_err(format!("bad PEM ({e})")))?;
    let signer = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der)
        .map_err(|e| key_err(format!("unsupported key ({e})")))?;
    let ck = CertifiedKey::new(chain, signer);
    match ck.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(ConfError::at(
                format!(
                    "SSL_CTX_use_PrivateKey(\"{}\") failed (key values mismatch with certificate \"{}\")",
                    key.display(),
                    cert.display()
                ),
                src,
            ));
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(e) => return Err(cert_err(e.to_string())),
    }
    if let Some(end) = ck.cert.first().and_then(|c| not_after(c.as_ref())) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if end < now {
            warnings.push(ConfError::at(
                format!("certificate \"{}\" has expired", cert.display()),
                src,
            ));
        }
    }
    Ok(ck)
}

/// One DER element: (tag, contents, rest).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let v = b[..n].iter().fold(0usize, |v, x| v << 8 | *x as usize);
        b = &b[n..];
        v
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// A certificate's notAfter, in seconds since the epoch.
fn not_after(cert: &[u8]) -> Option<i64> {
    let (_, certificate, _) = der(cert)?;
    let (_, tbs, _) = der(certificate)?;
    let (tag, _, mut rest) = der(tbs)?;
    // version [0] is optional; then serial, signature, issuer, validity.
    if tag != 0xa0 {
        rest = tbs;
    }
    for _ in 0..3 {
        rest = der(rest)?.2;
    }
    let (_, validity, _) = der(rest)?;
    let (_, _, after) = der(validity)?;
    let (tag, t, _) = der(after)?;
    asn1_time(tag, t)
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn asn1_time(tag: u8, t: &[u8]) -> Option<i64> {
    let t = std::str::from_utf8(t).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if t.len() == 12 => {
            let y: i64 = t[..2].parse().ok()?;
            (if y < 50 { 2000 + y } else { 1900 + y }, &t[2..])
        }
        0x18 if t.len() == 14 => (t[..4].parse().ok()?, &t[4..]),
        _ => return None,
    };
    let n = |i: usize| rest.get(i..i + 2)?.parse::<i64>().ok();
    let (month, day, h, m, s) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days * 86400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    #[test]
    fn times() {
        assert_eq!(asn1_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(asn1_time(0x17, b"240229120000Z"), Some(1709208000));
        assert_eq!(asn1_time(0x18, b"20500101000000Z"), Some(2524608000));
        assert_eq!(asn1_time(0x18, b"2050"), None);
    }

    #[test]
    fn directives_and_defaults() {
        let (c, w) = try_build(
            "events {}\nhttp {\nssl_protocols TLSv1 TLSv1.3;\nssl_session_timeout 10m;\n\
             server { ssl_ciphers ECDHE-RSA-AES128-GCM-SHA256; ssl_session_cache builtin:100 shared:S:1m;\n\
             ssl_handshake_timeout 1500ms; ssl_session_tickets off; ssl_prefer_server_ciphers on; }\n\
             server { }\n}",
        )
        .unwrap();
        assert_eq!(w.len(), 1);
        assert!(w[0].to_string().starts_with("TLSv1 is not supported"));
        let h = c.http.unwrap();
        let a = &h.servers[0].ssl;
        assert_eq!(a.protocols, vec![Protocol::Tls13]);
        assert_eq!(a.ciphers.len(), 1);
        assert_eq!(a.session_cache.sessions(), 100);
        assert_eq!(a.session_cache.shared, Some(("S".to_string(), 1 << 20)));
        assert_eq!(a.handshake_timeout, Duration::from_millis(1500));
        assert_eq!(a.session_timeout, Duration::from_secs(600));
        assert!(!a.session_tickets && a.prefer_server_ciphers);
        let b = &h.servers[1].ssl;
        assert_eq!(b.ciphers.len(), 6);
        assert_eq!(b.session_cache.sessions(), 0);
        assert_eq!(b.handshake_timeout, Duration::from_secs(60));
        assert!(b.session_tickets && !b.prefer_server_ciphers);
        assert!(b.certs.is_empty());
        assert_eq!(b.verify_client, VerifyClient::Off);
        assert_eq!(b.verify_depth, 1);
        assert!(b.ticket_keys.is_empty() && b.client_cas.is_empty());
        assert_eq!((b.kx_groups.clone(), b.buffer_size), (None, 16384));
        assert!(!b.reject_handshake && b.crls.is_empty() && b.key_log.is_none());
    }

    #[test]
    fn groups_in_order() {
        let (c, _) = try_build(
            "events {}\nhttp {\nssl_ecdh_curve X25519MLKEM768:P-384:x25519:X25519;\n\
             ssl_buffer_size 64k;\nserver { }\n}",
        )
        .unwrap();
        let s = &c.http.unwrap().servers[0].ssl;
        assert_eq!(
            s.kx_groups,
            Some(vec![
                NamedGroup::X25519MLKEM768,
                NamedGroup::secp384r1,
                NamedGroup::X25519
            ])
        );
        assert_eq!(s.buffer_size, 16384);
    }

    #[test]
    fn errors() {
        let e = |s: &str| err(&format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}"));
        assert_eq!(
            e("listen 127.0.0.1:1 ssl;"),
            "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive in /t.conf:4"
        );
        assert_eq!(
            e("ssl_ciphers HIGH:DHE-RSA-AES256-GCM-SHA384;"),
            "cipher \"DHE-RSA-AES256-GCM-SHA384\" in \"ssl_ciphers\" has no rustls suite in /t.conf:4"
        );
        assert_eq!(
            e("ssl_ciphers MEDIUM;"),
            "SSL_CTX_set_cipher_list(\"MEDIUM\") failed (no cipher match) in /t.conf:4"
        );
        assert_eq!(
            e("ssl_protocols TLSv1.4;"),
            "invalid value \"TLSv1.4\" in \"ssl_protocols\" directive in /t.conf:4"
        );
        assert_eq!(
            e("ssl_protocols TLSv1.1;"),
            "no protocol in \"ssl_protocols\" is supported: use TLSv1.2 or TLSv1.3 in /t.conf:4"
        );
        assert_eq!(
            e("ssl_session_cache shared:x;"),
            "invalid session cache \"shared:x\" in /t.conf:4"
        );
        assert_eq!(
            e("ssl_session_cache shared:x:1k;"),
            "session cache \"shared:x:1k\" is too small in /t.conf:4"
        );
        assert_eq!(
            e("ssl_session_cache off builtin;"),
            "invalid session cache \"off\" in /t.conf:4"
        );
        assert_eq!(
            e("ssl_certificate /nonexistent/c.pem;\nssl_certificate_key /nonexistent/k.pem;"),
            "cannot load certificate \"/nonexistent/c.pem\": open() failed (2: No such file or directory) in /t.conf:4"
        );
        assert_eq!(
            e("ssl_certificate /nonexistent/c.pem;"),
            "no \"ssl_certificate_key\" is defined for certificate \"/nonexistent/c.pem\" in /t.conf:4"
        );
        assert_eq!(
            e("ssl_certificate $ssl_server_name.pem;"),
            "variables in \"ssl_certificate\" are not supported in /t.conf:4"
        );
        assert_eq!(
            e("ssl_session_cache shared:S:1m;\n}\nserver {\nssl_session_cache shared:S:2m;"),
            "the size 2097152 of shared memory zone \"S\" conflicts with already declared size 1048576 in /t.conf:7"
        );
        assert_eq!(
            e("ssl_verify_client maybe;"),
            "invalid value \"maybe\" in \"ssl_verify_client\" directive, it must be \"on\", \"off\", \"optional\" or \"optional_no_ca\" in /t.conf:4"
        );
        assert_eq!(
            e("ssl_verify_client optional;"),
            "no ssl_client_certificate or ssl_trusted_certificate for ssl_verify_client in /t.conf:4"
        );
        assert_eq!(
            e("ssl_verify_depth -1;"),
            "\"ssl_verify_depth\" directive invalid value in /t.conf:4"
        );
        assert_eq!(
            e("ssl_client_certificate /nonexistent/ca.pem;"),
            "SSL_CTX_load_verify_locations(\"/nonexistent/ca.pem\") failed (open() failed (2: No such file or directory)) in /t.conf:4"
        );
        assert_eq!(
            e("ssl_session_ticket_key /proc/self/stat;"),
            "\"/proc/self/stat\" must be 80 or 48 bytes in /t.conf:4"
        );
        assert_eq!(
            e("ssl_ecdh_curve prime256v1:brainpoolP256r1;"),
            "SSL_CTX_set1_curves_list(\"prime256v1:brainpoolP256r1\") failed (unknown group \"brainpoolP256r1\") in /t.conf:4"
        );
        assert_eq!(
            e("ssl_ecdh_curve secp521r1;"),
            "SSL_CTX_set1_curves_list(\"secp521r1\") failed (group \"secp521r1\" is not supported by the TLS library (rustls with aws-lc-rs)) in /t.conf:4"
        );
        assert_eq!(
            e("ssl_buffer_size 1x;"),
            "\"ssl_buffer_size\" directive invalid value in /t.conf:4"
        );
        assert_eq!(
            e("ssl_early_data on;"),
            "\"ssl_early_data\" is not supported: 0-RTT (TLS 1.3 early data) is not offered in /t.conf:4"
        );
        assert_eq!(
            e("ssl_handshake_timeout 1x;"),
            "\"ssl_handshake_timeout\" directive invalid value in /t.conf:4"
        );
    }
}
