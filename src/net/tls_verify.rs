//! Client certificates (`ssl_verify_client`): the verifier rustls calls in
//! the handshake, which asks for a certificate, checks that the client
//! holds its key and accepts whatever it sends (as nginx, whose OpenSSL
//! callback always succeeds), and the verification proper, run once the
//! handshake is done; its result is kept with the connection and judged per
//! request (495, 496), as nginx does. Also the certificate's fields as the
//! `$ssl_client_*` variables show them (nginx's OpenSSL formats). No I/O.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::conf::ssl::{ServerSsl, VerifyClient};

/// A server's client-certificate settings, made with its rustls config.
pub struct ClientAuth {
    pub mode: VerifyClient,
    depth: u32,
    /// webpki over both CA files; None when there is no CA at all
    /// (`optional_no_ca` alone).
    webpki: Option<Arc<dyn ClientCertVerifier>>,
    /// `ssl_client_certificate`'s subjects, sent in the CertificateRequest.
    hints: Vec<DistinguishedName>,
    /// Every CA certificate, to measure a chain's depth.
    cas: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientAuth({:?}, depth {})", self.mode, self.depth)
    }
}

impl ClientAuth {
    /// None when the server does not ask for certificates.
    pub fn new(s: &ServerSsl) -> Result<Option<ClientAuth>, rustls::Error> {
        if s.verify_client == VerifyClient::Off {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut hints_store = rustls::RootCertStore::empty();
        for c in &s.client_cas {
            hints_store.add(c.clone())?;
        }
        let mut roots = hints_store.clone();
        for c in &s.trusted_cas {
            roots.add(c.clone())?;
        }
        let webpki = if roots.is_empty() {
            None
        } else {
            Some(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .allow_unauthenticated()
                    .with_crls(s.crls.clone())
                    .build()
                    .map_err(|e| rustls::Error::General(e.to_string()))?,
            )
        };
        Ok(Some(ClientAuth {
            mode: s.verify_client,
            depth: s.verify_depth,
            webpki,
            hints: hints_store.subjects(),
            cas: s.client_cas.iter().chain(&s.trusted_cas).cloned().collect(),
            algs: provider.signature_verification_algorithms,
        }))
    }

    /// The verification of what the client sent (None: nothing).
    pub fn verify(&self, chain: Option<&[CertificateDer<'static>]>) -> Verify {
        let Some((end, intermediates)) = chain.and_then(|c| c.split_first()) else {
            return Verify::None;
        };
        let r = match &self.webpki {
            Some(v) => v
                .verify_client_cert(end, intermediates, UnixTime::now())
                .map(|_| ()),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
        };
        match r {
            Ok(()) if signatures_to_root(end, intermediates, &self.cas) > self.depth => {
                Verify::Failed(22, "certificate chain too long")
            }
            Ok(()) => Verify::Success,
            Err(rustls::Error::InvalidCertificate(e)) => {
                let (code, why) = openssl_error(&e, end, intermediates);
                Verify::Failed(code, why)
            }
            Err(_) => Verify::Failed(1, "unspecified certificate verification error"),
        }
    }
}

impl ClientCertVerifier for ClientAuth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    /// Never in the handshake: a request without one gets 496 later.
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    /// Accepts any certificate here; `verify` judges it after the
    /// handshake.
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    /// The client must still prove it holds the certificate's key.
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

/// The outcome of verifying a client's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verify {
    /// No certificate (or none asked for).
    None,
    Success,
    /// OpenSSL's error number and text.
    Failed(i32, &'static str),
}

impl Verify {
    /// `$ssl_client_verify`.
    pub fn text(&self) -> String {
        match self {
            Verify::None => "NONE".into(),
            Verify::Success => "SUCCESS".into(),
            Verify::Failed(_, why) => format!("FAILED:{why}"),
        }
    }

    /// An error `optional_no_ca` lets through (nginx's
    /// `ngx_ssl_verify_error_optional`: the issuer is unknown).
    pub fn no_ca_only(&self) -> bool {
        matches!(self, Verify::Failed(2 | 18..=21 | 27, _))
    }
}

fn self_signed(c: &X509Certificate<'_>) -> bool {
    c.subject().as_raw() == c.issuer().as_raw()
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    X509Certificate::from_der(der).ok().map(|(_, c)| c)
}

/// OpenSSL's number and words for what webpki found.
fn openssl_error(
    e: &CertificateError,
    end: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> (i32, &'static str) {
    match e {
        CertificateError::UnknownIssuer => {
            if parse(end).is_some_and(|c| self_signed(&c)) {
                (18, "self-signed certificate")
            } else if intermediates
                .iter()
                .any(|i| parse(i).is_some_and(|c| self_signed(&c)))
            {
                (19, "self-signed certificate in certificate chain")
            } else {
                (20, "unable to get local issuer certificate")
            }
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            (10, "certificate has expired")
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            (9, "certificate is not yet valid")
        }
        CertificateError::Revoked => (23, "certificate revoked"),
        CertificateError::UnknownRevocationStatus => (3, "unable to get certificate CRL"),
        CertificateError::ExpiredRevocationList
        | CertificateError::ExpiredRevocationListContext { .. } => (12, "CRL has expired"),
        CertificateError::BadSignature => (7, "certificate signature failure"),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            (26, "unsupported certificate purpose")
        }
        _ => (1, "unspecified certificate verification error"),
    }
}

/// How many signatures lie between the client's certificate and a
/// self-signed root, following issuers through what the client sent and
/// the CA files (OpenSSL's chain, which `ssl_verify_depth` bounds: 1 is a
/// certificate a root signed). Bounded; a missing link ends the walk.
fn signatures_to_root(
    end: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    cas: &[CertificateDer<'static>],
) -> u32 {
    let pool: Vec<X509Certificate<'_>> = intermediates
        .iter()
        .map(|c| c.as_ref())
        .chain(cas.iter().map(|c| c.as_ref()))
        .filter_map(parse)
        .collect();
    let Some(mut cur) = parse(end) else {
        return 0;
    };
    let mut n = 0;
    while !self_signed(&cur) && n < 16 {
        let Some(up) = pool
            .iter()
            .find(|c| c.subject().as_raw() == cur.issuer().as_raw())
        else {
            // The anchor itself signed it, as far as we can tell.
            return n + 1;
        };
        n += 1;
        cur = up.clone();
    }
    n
}

/// What the variables show of a client's certificate.
#[derive(Debug, Clone, Default)]
pub struct ClientCert {
    /// `$ssl_client_s_dn`, `$ssl_client_i_dn` (RFC 2253).
    pub s_dn: String,
    pub i_dn: String,
    /// `$ssl_client_serial`: hex, uppercase.
    pub serial: String,
    /// `$ssl_client_fingerprint`: SHA-1, hex, lowercase.
    pub fingerprint: String,
    /// The certificate in PEM.
    pub pem: String,
}

impl ClientCert {
    pub fn new(der: &CertificateDer<'_>) -> ClientCert {
        let fp =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, der.as_ref());
        let mut c = ClientCert {
            fingerprint: hex(fp.as_ref(), false),
            pem: pem(der.as_ref()),
            ..Default::default()
        };
        if let Some(x) = parse(der.as_ref()) {
            c.s_dn = rfc2253(x.subject());
            c.i_dn = rfc2253(x.issuer());
            let raw = x.raw_serial();
            // The DER sign byte is not part of the number.
            let raw = match raw {
                [0, rest @ ..] if !rest.is_empty() => rest,
                r => r,
            };
            c.serial = hex(raw, true);
        }
        c
    }

    /// `$ssl_client_escaped_cert`: the PEM, urlencoded (nginx's
    /// `NGX_ESCAPE_URI_COMPONENT`).
    pub fn escaped(&self) -> String {
        let mut out = String::with_capacity(self.pem.len() * 2);
        for b in self.pem.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }

    /// `$ssl_client_cert` (deprecated in nginx): the PEM with a tab after
    /// each inner newline, no newline at the end.
    pub fn tabbed(&self) -> String {
        self.pem.trim_end_matches('\n').replace('\n', "\n\t")
    }
}

fn hex(b: &[u8], upper: bool) -> String {
    b.iter()
        .map(|x| {
            if upper {
                format!("{x:02X}")
            } else {
                format!("{x:02x}")
            }
        })
        .collect()
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(c.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(c.get(2).copied().unwrap_or(0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn pem(der: &[u8]) -> String {
    let b = base64(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// OpenSSL's short names for the attributes of a name.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.17" => "postalCode",
        "2.5.4.42" => "GN",
        "2.5.4.43" => "initials",
        "2.5.4.44" => "generationQualifier",
        "2.5.4.46" => "dnQualifier",
        "2.5.4.65" => "pseudonym",
        "2.5.4.97" => "organizationIdentifier",
        "1.2.840.113549.1.9.1" => "emailAddress",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return None,
    })
}

/// A name as OpenSSL prints it with `XN_FLAG_RFC2253` (what nginx ≥ 1.11.6
/// gives): the last RDN first, `,` between RDNs and `+` inside one, short
/// names, values escaped as RFC 2253 says with bytes past ASCII as `\XX`
/// of their UTF-8, unknown attributes and values as `#` and their DER in
/// hex.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, atv) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = atv.attr_type().to_id_string();
            let any = atv.attr_value();
            let value = short_name(&oid).and_then(|_| string_value(any.tag().0, any.data));
            match (short_name(&oid), value) {
                (Some(sn), Some(v)) => {
                    out.push_str(sn);
                    out.push('=');
                    escape_2253(&v, &mut out);
                }
                (sn, _) => {
                    out.push_str(sn.unwrap_or(&oid));
                    out.push_str("=#");
                    let mut der = vec![any.tag().0 as u8];
                    push_len(&mut der, any.data.len());
                    der.extend_from_slice(any.data);
                    out.push_str(&hex(&der, true));
                }
            }
        }
    }
    out
}

fn push_len(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let b = n.to_be_bytes();
        let skip = b.iter().take_while(|x| **x == 0).count();
        out.push(0x80 | (b.len() - skip) as u8);
        out.extend_from_slice(&b[skip..]);
    }
}

/// A string value's text, for the string types OpenSSL converts.
fn string_value(tag: u32, data: &[u8]) -> Option<String> {
    match tag {
        // UTF8String
        12 => String::from_utf8(data.to_vec()).ok(),
        // NumericString, PrintableString, T61String, IA5String,
        // VisibleString: one byte a character (T61 read as Latin-1, as
        // OpenSSL does).
        18 | 19 | 20 | 22 | 26 => Some(data.iter().map(|b| *b as char).collect()),
        // UniversalString: UCS-4
        28 => data
            .chunks(4)
            .map(|c| {
                let v = u32::from_be_bytes(c.try_into().ok()?);
                char::from_u32(v)
            })
            .collect(),
        // BMPString: UCS-2
        30 => {
            let units: Vec<u16> = data
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

fn escape_2253(v: &str, out: &mut String) {
    let n = v.chars().count();
    for (i, c) in v.chars().enumerate() {
        let mut utf8 = [0u8; 4];
        for &b in c.encode_utf8(&mut utf8).as_bytes() {
            let special = matches!(b, b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';')
                || (i == 0 && (b == b'#' || b == b' '))
                || (i + 1 == n && b == b' ');
            if special {
                out.push('\\');
                out.push(b as char);
            } else if !(0x20..0x7f).contains(&b) {
                out.push_str(&format!("\\{b:02X}"));
            } else {
                out.push(b as char);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_pem() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        let p = pem(&[0u8; 60]);
        assert!(p.starts_with("-----BEGIN CERTIFICATE-----\nAAAA"));
        assert_eq!(p.lines().nth(1).map(str::len), Some(64));
        let c = ClientCert {
            pem: "-----BEGIN X-----\na+/=\n-----END X-----\n".into(),
            ..Default::default()
        };
        assert_eq!(
            c.escaped(),
            "-----BEGIN%20X-----%0Aa%2B%2F%3D%0A-----END%20X-----%0A"
        );
        assert_eq!(c.tabbed(), "-----BEGIN X-----\n\ta+/=\n\t-----END X-----");
    }

    #[test]
    fn escapes_as_rfc2253() {
        let mut s = String::new();
        escape_2253(" a,b+c\"d\\e<f>g;h #", &mut s);
        assert_eq!(s, "\\ a\\,b\\+c\\\"d\\\\e\\<f\\>g\\;h #");
        s.clear();
        escape_2253("#Café \n", &mut s);
        assert_eq!(s, "\\#Caf\\C3\\A9 \\0A");
        s.clear();
        escape_2253("x ", &mut s);
        assert_eq!(s, "x\\ ");
    }

    #[test]
    fn strings() {
        assert_eq!(string_value(19, b"abc").as_deref(), Some("abc"));
        assert_eq!(string_value(30, &[0, 0x41, 0, 0xe9]).as_deref(), Some("Aé"));
        assert_eq!(string_value(28, &[0, 0, 0, 0x41]).as_deref(), Some("A"));
        assert_eq!(string_value(30, &[0xd8]), None);
        assert_eq!(string_value(4, b"x"), None);
        let mut v = Vec::new();
        push_len(&mut v, 300);
        assert_eq!(v, [0x82, 1, 44]);
    }

    #[test]
    fn errors_let_through_by_optional_no_ca() {
        assert!(Verify::Failed(20, "").no_ca_only());
        assert!(Verify::Failed(18, "").no_ca_only());
        assert!(!Verify::Failed(10, "").no_ca_only());
        assert!(!Verify::Success.no_ca_only());
        assert_eq!(Verify::None.text(), "NONE");
        assert_eq!(Verify::Failed(10, "x").text(), "FAILED:x");
    }
}
