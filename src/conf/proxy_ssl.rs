//! The proxy modules' `proxy_ssl_*` directives (TLS to upstreams), merged
//! from http to server to location as location settings (and from stream
//! to stream server, kept in the same fields: nginx's stream proxy has the
//! same directives), and the finished
//! client settings ([`ProxySsl`]) of each location that proxies over https
//! (or with variables, which may name https): trusted certificates and the
//! client certificate are read here, when the configuration is loaded (by
//! the master, so workers need no access to key files). The only I/O here
//! is reading those files.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};

use super::build::{
    Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, flag, not_here, number, set_once,
};
use super::loc::{LocB, LocConf};
use super::ssl::{Loaded, Protocol};
use super::tree::Directive;
use super::vars::Template;
use super::{ConfError, Src};

/// http, server, location; stream, stream server.
const HSL: u8 = HTTP | SRV | LOC | STREAM | SSRV;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "proxy_ssl_server_name",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_ssl_verify",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_ssl_session_reuse",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_flag,
    },
    Spec {
        name: "proxy_ssl_name",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_name,
    },
    Spec {
        name: "proxy_ssl_verify_depth",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_verify_depth,
    },
    Spec {
        name: "proxy_ssl_trusted_certificate",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_trusted,
    },
    Spec {
        name: "proxy_ssl_certificate",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_certificate,
    },
    Spec {
        name: "proxy_ssl_certificate_key",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_certificate,
    },
    Spec {
        name: "proxy_ssl_protocols",
        ctx: HSL,
        args: Args::AtLeast(1),
        block: false,
        set: set_protocols,
    },
    Spec {
        name: "proxy_ssl_ciphers",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_ciphers,
    },
    Spec {
        name: "proxy_ssl_crl",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_crl,
    },
    Spec {
        name: "proxy_ssl_key_log",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_key_log,
    },
    Spec {
        name: "proxy_ssl_password_file",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: super::ssl::refuse,
    },
    Spec {
        name: "proxy_ssl_conf_command",
        ctx: HSL,
        args: Args::Exactly(2),
        block: false,
        set: super::ssl::refuse,
    },
];

/// `proxy_ssl_crl`: revocation lists an upstream's chain is checked
/// against.
#[derive(Debug)]
pub struct CrlFile {
    pub path: PathBuf,
    pub crls: Vec<CertificateRevocationListDer<'static>>,
}

/// `proxy_ssl_trusted_certificate`: the CA certificates an upstream's
/// certificate must chain to.
#[derive(Debug)]
pub struct TrustedCerts {
    pub path: PathBuf,
    /// As read, in the file's order.
    pub certs: Vec<CertificateDer<'static>>,
    pub roots: Arc<RootCertStore>,
}

/// A location's TLS client settings, finished.
#[derive(Debug)]
pub struct ProxySsl {
    /// Locations with the same settings share one (and its number): the
    /// keep-alive cache tells connections made with other settings apart
    /// by it.
    pub id: usize,
    /// `proxy_ssl_server_name`: send SNI.
    pub server_name: bool,
    /// `proxy_ssl_name`; None: `$proxy_host`.
    pub name: Option<Template>,
    pub verify: bool,
    pub verify_depth: u32,
    pub trusted: Option<Arc<TrustedCerts>>,
    /// `proxy_ssl_certificate` with its key.
    pub certificate: Option<Arc<CertifiedKey>>,
    pub protocols: Vec<Protocol>,
    /// The TLS 1.2 suites `proxy_ssl_ciphers` selects; None: all of them.
    pub ciphers: Option<Vec<SupportedCipherSuite>>,
    pub session_reuse: bool,
    /// `proxy_ssl_key_log`.
    pub key_log: Option<Arc<super::ssl::KeyLogFile>>,
    /// `proxy_ssl_crl` (checked with `proxy_ssl_verify on`).
    pub crl: Option<Arc<CrlFile>>,
    /// HTTP/2 (`grpc_pass grpcs://`, `proxy_http_version 2`): ALPN offers
    /// `h2`.
    pub h2: bool,
}

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    match n {
        Node::Stream(st) => Ok(&mut st.proxy_ssl),
        Node::StreamServer(s) => Ok(&mut s.proxy_ssl),
        n => n.loc_b().ok_or_else(|| not_here(d)),
    }
}

fn set_flag(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = flag(d)?;
    let l = loc(n, d)?;
    let slot = match d.name.as_str() {
        "proxy_ssl_server_name" => &mut l.proxy_ssl_server_name,
        "proxy_ssl_verify" => &mut l.proxy_ssl_verify,
        _ => &mut l.proxy_ssl_session_reuse,
    };
    set_once(slot, v, d)
}

fn set_name(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = super::vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    set_once(&mut loc(n, d)?.proxy_ssl_name, Some(t), d)
}

fn set_verify_depth(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v: u32 = number(&d.args[0])
        .ok_or_else(|| ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src))?;
    set_once(&mut loc(n, d)?.proxy_ssl_verify_depth, v, d)
}

/// A file argument: no variables, no `data:` and the like; relative to the
/// configuration's directory.
fn file_arg(b: &Builder, d: &Directive) -> Result<PathBuf, ConfError> {
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
    Ok(super::tree::full_name(&b.paths.conf_prefix(), a))
}

fn set_trusted(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let path = file_arg(b, d)?;
    let trusted = load_trusted(path, &d.src)?;
    set_once(
        &mut loc(n, d)?.proxy_ssl_trusted_certificate,
        Some(Arc::new(trusted)),
        d,
    )
}

/// Reads a PEM bundle of CA certificates.
fn load_trusted(path: PathBuf, src: &Src) -> Result<TrustedCerts, ConfError> {
    let err = |why: String| {
        ConfError::at(
            format!("cannot load certificate \"{}\": {why}", path.display()),
            src,
        )
    };
    let pem = super::ssl::read(&path).map_err(err)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad PEM ({e})")))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    let mut roots = RootCertStore::empty();
    for c in &certs {
        roots
            .add(c.clone())
            .map_err(|e| err(format!("not a usable CA certificate ({e})")))?;
    }
    Ok(TrustedCerts {
        path,
        certs,
        roots: Arc::new(roots),
    })
}

fn set_crl(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let path = file_arg(b, d)?;
    let crls = super::ssl::load_crls(&path, &d.src)?;
    set_once(
        &mut loc(n, d)?.proxy_ssl_crl,
        Some(Arc::new(CrlFile { path, crls })),
        d,
    )
}

fn set_key_log(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let path = file_arg(b, d)?;
    let f = super::ssl::open_key_log(&path, &d.src)?;
    set_once(&mut loc(n, d)?.proxy_ssl_key_log, Some(f), d)
}

fn set_certificate(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let path = file_arg(b, d)?;
    let l = loc(n, d)?;
    let slot = if d.name == "proxy_ssl_certificate" {
        &mut l.proxy_ssl_certificate
    } else {
        &mut l.proxy_ssl_certificate_key
    };
    set_once(slot, Some((path, d.src.clone())), d)
}

fn set_protocols(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = super::ssl::protocols(b, d)?;
    set_once(&mut loc(n, d)?.proxy_ssl_protocols, v, d)
}

fn set_ciphers(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    // nginx's default, DEFAULT, is every suite rustls has.
    let v = super::ssl::ciphers(d)?;
    set_once(&mut loc(n, d)?.proxy_ssl_ciphers, Some(v), d)
}

/// The client settings made so far in one load: equal settings share one
/// [`ProxySsl`], and a client certificate is read once.
#[derive(Default)]
pub(super) struct Profiles {
    made: Vec<(String, Arc<ProxySsl>)>,
    loaded: Loaded,
}

impl Profiles {
    /// The TLS client settings of a location that proxies over https.
    /// `src`: its `proxy_pass`, where a missing file is reported.
    pub(super) fn make(
        &mut self,
        c: &LocConf,
        src: &Src,
        warnings: &mut Vec<ConfError>,
    ) -> Result<Arc<ProxySsl>, ConfError> {
        if c.proxy_ssl_verify && c.proxy_ssl_trusted_certificate.is_none() {
            return Err(ConfError::at(
                "no proxy_ssl_trusted_certificate for proxy_ssl_verify",
                src,
            ));
        }
        let certificate = match (&c.proxy_ssl_certificate, &c.proxy_ssl_certificate_key) {
            (None, _) => None,
            (Some((cert, src)), None) => {
                return Err(ConfError::at(
                    format!(
                        "no \"proxy_ssl_certificate_key\" is defined for certificate \"{}\"",
                        cert.display()
                    ),
                    src,
                ));
            }
            (Some((cert, src)), Some((key, _))) => {
                Some(self.loaded.pair(cert, key, src, warnings)?)
            }
        };
        // What tells two locations' settings apart.
        let sig = format!(
            "{} {:?} {} {} {:?} {:?} {:?} {:?} {:?} {} {} {:?} {:?}",
            c.proxy_ssl_server_name,
            c.proxy_ssl_name,
            c.proxy_ssl_verify,
            c.proxy_ssl_verify_depth,
            c.proxy_ssl_trusted_certificate.as_ref().map(|t| &t.path),
            c.proxy_ssl_certificate.as_ref().map(|p| &p.0),
            c.proxy_ssl_certificate_key.as_ref().map(|p| &p.0),
            c.proxy_ssl_protocols,
            c.proxy_ssl_ciphers,
            c.proxy_ssl_session_reuse,
            c.proxy_http_version,
            c.proxy_ssl_crl.as_ref().map(|f| &f.path),
            c.proxy_ssl_key_log.as_ref().map(|f| &f.path),
        );
        if let Some((_, p)) = self.made.iter().find(|(s, _)| *s == sig) {
            return Ok(p.clone());
        }
        let p = Arc::new(ProxySsl {
            id: self.made.len() + 1,
            server_name: c.proxy_ssl_server_name,
            name: c.proxy_ssl_name.clone(),
            verify: c.proxy_ssl_verify,
            verify_depth: c.proxy_ssl_verify_depth,
            trusted: c.proxy_ssl_trusted_certificate.clone(),
            certificate,
            protocols: c.proxy_ssl_protocols.clone(),
            ciphers: c.proxy_ssl_ciphers.clone(),
            session_reuse: c.proxy_ssl_session_reuse,
            crl: c.proxy_ssl_crl.clone(),
            key_log: c.proxy_ssl_key_log.clone(),
            h2: c.proxy_http_version == 20,
        });
        self.made.push((sig, p.clone()));
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    #[test]
    fn directives_defaults_and_sharing() {
        let (c, _) = try_build(
            "events {}\nhttp {\nproxy_ssl_server_name on;\nserver {\n\
             location /a { proxy_pass https://127.0.0.1; }\n\
             location /b { proxy_pass https://127.0.0.1:8443; proxy_ssl_name $host;\n\
             proxy_ssl_protocols TLSv1.3; proxy_ssl_session_reuse off; proxy_ssl_verify_depth 3;\n\
             proxy_ssl_ciphers ECDHE-RSA-AES128-GCM-SHA256; }\n\
             location /c { proxy_pass http://127.0.0.1; }\n\
             location /d { proxy_pass https://127.0.0.1/x; }\n\
             location /e { proxy_pass http://$host; }\n}\n}",
        )
        .unwrap();
        let h = c.http.unwrap();
        let l = &h.servers[0].locations;
        let a = l[0].conf.proxy_ssl.clone().unwrap();
        assert!(a.server_name && a.session_reuse && !a.verify);
        assert_eq!((a.verify_depth, a.name.is_none()), (1, true));
        assert_eq!(a.protocols, vec![Protocol::Tls12, Protocol::Tls13]);
        assert!(a.ciphers.is_none() && a.certificate.is_none());
        let b = l[1].conf.proxy_ssl.clone().unwrap();
        assert!(!b.session_reuse && b.name.is_some());
        assert_eq!(
            (b.verify_depth, b.protocols.as_slice()),
            (3, &[Protocol::Tls13][..])
        );
        assert_eq!(b.ciphers.as_ref().map(Vec::len), Some(1));
        assert!(l[2].conf.proxy_ssl.is_none(), "plain http");
        // The same settings: one profile.
        let d = l[3].conf.proxy_ssl.clone().unwrap();
        assert!(Arc::ptr_eq(&a, &d) && a.id != b.id);
        // Variables may name https.
        assert!(l[4].conf.proxy_ssl.is_some());
        // https://127.0.0.1 is port 443, not http://127.0.0.1's upstream.
        let (pa, pc) = (
            l[0].proxy_pass.as_ref().unwrap(),
            l[2].proxy_pass.as_ref().unwrap(),
        );
        assert!(pa.ssl && !pc.ssl);
        assert_eq!((pa.proxy_port, pc.proxy_port), (443, 80));
        assert_ne!(pa.upstream, pc.upstream);
        assert_eq!(l[3].proxy_pass.as_ref().unwrap().upstream, pa.upstream);
    }

    #[test]
    fn errors() {
        let e = |s: &str| {
            err(&format!(
                "events {{}}\nhttp {{\nserver {{\nlocation / {{ proxy_pass https://127.0.0.1;\n{s}\n}}\n}}\n}}"
            ))
        };
        assert_eq!(
            e("proxy_ssl_verify on;"),
            "no proxy_ssl_trusted_certificate for proxy_ssl_verify in /t.conf:4"
        );
        assert_eq!(
            e("proxy_ssl_certificate /nonexistent/c.pem;"),
            "no \"proxy_ssl_certificate_key\" is defined for certificate \"/nonexistent/c.pem\" in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_certificate /nonexistent/c.pem; proxy_ssl_certificate_key k.pem;"),
            "cannot load certificate \"/nonexistent/c.pem\": open() failed (2: No such file or directory) in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_trusted_certificate /nonexistent/ca.pem;"),
            "cannot load certificate \"/nonexistent/ca.pem\": open() failed (2: No such file or directory) in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_verify_depth x;"),
            "\"proxy_ssl_verify_depth\" directive invalid number in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_protocols TLSv1.4;"),
            "invalid value \"TLSv1.4\" in \"proxy_ssl_protocols\" directive in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_ciphers DHE-RSA-AES256-GCM-SHA384;"),
            "cipher \"DHE-RSA-AES256-GCM-SHA384\" in \"proxy_ssl_ciphers\" has no rustls suite in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_server_name on; proxy_ssl_server_name off;"),
            "\"proxy_ssl_server_name\" directive is duplicate in /t.conf:5"
        );
        assert_eq!(
            e("proxy_ssl_name $x$;"),
            err("events {}\nhttp {\nserver {\nlocation / {\nreturn 200 $x$;\n}\n}\n}")
        );
    }
}
