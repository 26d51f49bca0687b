//! The TLS 1.3 cipher suites sluice offers: rustls's aws-lc-rs suites with
//! their HKDF done over HMAC keys made once per secret.
//!
//! rustls's aws-lc-rs HKDF keeps each extracted secret raw and runs a
//! whole `HKDF()` (extract, then expand, each keying HMAC afresh: 8 hash
//! blocks) for every label the key schedule expands. Here an extracted
//! secret becomes an HMAC key at once, its inner and outer pads hashed a
//! single time, and each expansion only copies that state and hashes the
//! label (2 blocks), as ring does and OpenSSL's key schedule costs. The
//! bytes are the same (RFC 5869, rustls's own `HkdfUsingHmac`); the AEADs,
//! hashes and QUIC keys stay aws-lc-rs's. SHA-384 runs in AWS-LC's generic
//! code on AMD CPUs (its AVX code is for Intel only), so this was a tenth
//! of a new TLS 1.3 connection's cost. Pure.

use aws_lc_rs::hmac as lc;
use rustls::SupportedCipherSuite;
use rustls::Tls13CipherSuite;
use rustls::crypto::CipherSuiteCommon;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;

/// HMAC with one of aws-lc-rs's algorithms, for rustls.
struct LcHmac(lc::Algorithm);

/// A key whose pads are already hashed: signing copies that state.
struct LcKey(lc::Key);

impl Hmac for LcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(LcKey(lc::Key::new(self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len
    }
}

impl Key for LcKey {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut ctx = lc::Context::with_key(&self.0);
        ctx.update(first);
        for m in middle {
            ctx.update(m);
        }
        ctx.update(last);
        Tag::new(ctx.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len
    }
}

static HMAC_SHA256: LcHmac = LcHmac(lc::HMAC_SHA256);
static HMAC_SHA384: LcHmac = LcHmac(lc::HMAC_SHA384);
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

/// rustls's suite `s`, its HKDF replaced.
const fn with_hkdf(
    s: &'static SupportedCipherSuite,
    hkdf: &'static dyn rustls::crypto::tls13::Hkdf,
) -> Tls13CipherSuite {
    let SupportedCipherSuite::Tls13(base) = s else {
        panic!("not a TLS 1.3 suite");
    };
    Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: base.common.suite,
            hash_provider: base.common.hash_provider,
            confidentiality_limit: base.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: base.aead_alg,
        quic: base.quic,
    }
}

static AES_256_GCM_SHA384: Tls13CipherSuite =
    with_hkdf(&cs::TLS13_AES_256_GCM_SHA384, &HKDF_SHA384);
static CHACHA20_POLY1305_SHA256: Tls13CipherSuite =
    with_hkdf(&cs::TLS13_CHACHA20_POLY1305_SHA256, &HKDF_SHA256);
static AES_128_GCM_SHA256: Tls13CipherSuite =
    with_hkdf(&cs::TLS13_AES_128_GCM_SHA256, &HKDF_SHA256);

pub const TLS13_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&AES_256_GCM_SHA384);
pub const TLS13_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&CHACHA20_POLY1305_SHA256);
pub const TLS13_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&AES_128_GCM_SHA256);

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::tls13::{Hkdf, OkmBlock};

    fn expand(h: &dyn Hkdf, salt: Option<&[u8]>, secret: &[u8], info: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![0u8; 100];
        h.extract_from_secret(salt, secret)
            .expand_slice(info, &mut out)
            .unwrap();
        out
    }

    /// The same bytes as rustls's own aws-lc-rs HKDF, for every suite, on
    /// every entry point the key schedule uses.
    #[test]
    fn same_as_rustls() {
        let pairs = [
            (cs::TLS13_AES_256_GCM_SHA384, TLS13_AES_256_GCM_SHA384),
            (
                cs::TLS13_CHACHA20_POLY1305_SHA256,
                TLS13_CHACHA20_POLY1305_SHA256,
            ),
            (cs::TLS13_AES_128_GCM_SHA256, TLS13_AES_128_GCM_SHA256),
        ];
        for (theirs, ours) in pairs {
            let (SupportedCipherSuite::Tls13(t), SupportedCipherSuite::Tls13(o)) = (theirs, ours)
            else {
                panic!("not TLS 1.3");
            };
            assert_eq!(o.common.suite, t.common.suite);
            let (t, o) = (t.hkdf_provider, o.hkdf_provider);
            for salt in [None, Some(&b"salty"[..])] {
                for secret in [&b""[..], b"secret", &[7u8; 200]] {
                    let info: &[&[u8]] = &[b"tls13 ", b"c hs traffic", &[1, 2, 3]];
                    assert_eq!(expand(t, salt, secret, info), expand(o, salt, secret, info));
                }
                let mut a = [0u8; 48];
                let mut b = [0u8; 48];
                let n = t.extract_from_zero_ikm(salt).hash_len();
                t.extract_from_zero_ikm(salt)
                    .expand_slice(&[b"x"], &mut a[..n])
                    .unwrap();
                o.extract_from_zero_ikm(salt)
                    .expand_slice(&[b"x"], &mut b[..n])
                    .unwrap();
                assert_eq!(a, b);
            }
            let okm = OkmBlock::new(&[9u8; 32]);
            assert_eq!(
                t.expander_for_okm(&okm).expand_block(&[b"key"]).as_ref(),
                o.expander_for_okm(&okm).expand_block(&[b"key"]).as_ref()
            );
            assert_eq!(
                t.hmac_sign(&okm, b"finished").as_ref(),
                o.hmac_sign(&okm, b"finished").as_ref()
            );
        }
    }

    /// RFC 5869's test case 1 (SHA-256).
    #[test]
    fn rfc5869_case_1() {
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0u8..=0x0c).collect();
        let info: Vec<u8> = (0xf0u8..=0xf9).collect();
        let mut out = [0u8; 42];
        HKDF_SHA256
            .extract_from_secret(Some(&salt), &ikm)
            .expand_slice(&[&info], &mut out)
            .unwrap();
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }
}
