//! `ssl_ciphers`: an OpenSSL cipher string (`HIGH:!aNULL:!MD5`,
//! `ECDHE-ECDSA-AES128-GCM-SHA256:...`) mapped onto the TLS 1.2 suites
//! rustls has, in the order the string gives. TLS 1.3 suites are not
//! chosen here (OpenSSL's cipher list does not touch them either). Pure.

use rustls::SupportedCipherSuite;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;

use crate::net::tls_crypto as t13;

/// What OpenSSL's keywords look at in a suite.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Auth {
    Rsa,
    Ecdsa,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Enc {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20,
}

struct Suite {
    /// The name OpenSSL (and nginx's `$ssl_cipher`) gives it.
    name: &'static str,
    auth: Auth,
    enc: Enc,
    suite: SupportedCipherSuite,
}

/// rustls's TLS 1.2 suites, in the order OpenSSL lists them for `HIGH`
/// (strongest first, ECDSA before RSA).
const SUITES: [Suite; 6] = [
    Suite {
        name: "ECDHE-ECDSA-AES256-GCM-SHA384",
        auth: Auth::Ecdsa,
        enc: Enc::Aes256Gcm,
        suite: cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    },
    Suite {
        name: "ECDHE-RSA-AES256-GCM-SHA384",
        auth: Auth::Rsa,
        enc: Enc::Aes256Gcm,
        suite: cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    },
    Suite {
        name: "ECDHE-ECDSA-CHACHA20-POLY1305",
        auth: Auth::Ecdsa,
        enc: Enc::Chacha20,
        suite: cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    },
    Suite {
        name: "ECDHE-RSA-CHACHA20-POLY1305",
        auth: Auth::Rsa,
        enc: Enc::Chacha20,
        suite: cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    },
    Suite {
        name: "ECDHE-ECDSA-AES128-GCM-SHA256",
        auth: Auth::Ecdsa,
        enc: Enc::Aes128Gcm,
        suite: cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    },
    Suite {
        name: "ECDHE-RSA-AES128-GCM-SHA256",
        auth: Auth::Rsa,
        enc: Enc::Aes128Gcm,
        suite: cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    },
];

/// The TLS 1.3 suites, by the names OpenSSL gives them: always on.
/// (rustls's aws-lc-rs suites with a cheaper HKDF, `net::tls_crypto`.)
const TLS13: [(&str, SupportedCipherSuite); 3] = [
    ("TLS_AES_256_GCM_SHA384", t13::TLS13_AES_256_GCM_SHA384),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        t13::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    ("TLS_AES_128_GCM_SHA256", t13::TLS13_AES_128_GCM_SHA256),
];

/// The name nginx logs for a suite (`$ssl_cipher`).
pub fn openssl_name(s: SupportedCipherSuite) -> &'static str {
    let id = s.suite();
    SUITES
        .iter()
        .find(|x| x.suite.suite() == id)
        .map(|x| x.name)
        .or_else(|| TLS13.iter().find(|x| x.1.suite() == id).map(|x| x.0))
        .unwrap_or("")
}

/// The TLS 1.3 suites, server preference order.
pub fn tls13() -> Vec<SupportedCipherSuite> {
    TLS13.iter().map(|x| x.1).collect()
}

/// What a keyword or name selects among `SUITES` (a bit per suite), None if
/// it is no OpenSSL word sluice knows.
fn select(word: &str) -> Option<u8> {
    let by = |f: &dyn Fn(&Suite) -> bool| {
        SUITES
            .iter()
            .enumerate()
            .filter(|(_, s)| f(s))
            .fold(0u8, |m, (i, _)| m | 1 << i)
    };
    let all = by(&|_| true);
    Some(match word {
        // Every suite rustls has is ECDHE, AEAD, TLSv1.2 and "high".
        "ALL" | "DEFAULT" | "HIGH" | "ECDHE" | "EECDH" | "kECDHE" | "kEECDH" | "ECDH" | "kECDH"
        | "TLSv1.2" | "FIPS" | "SUITEB128" | "SUITEB192" | "SUITEB128ONLY" => all,
        "aRSA" => by(&|s| s.auth == Auth::Rsa),
        "aECDSA" | "ECDSA" => by(&|s| s.auth == Auth::Ecdsa),
        "AES" => by(&|s| s.enc != Enc::Chacha20),
        "AESGCM" => by(&|s| s.enc != Enc::Chacha20),
        "AES128" => by(&|s| s.enc == Enc::Aes128Gcm),
        "AES256" => by(&|s| s.enc == Enc::Aes256Gcm),
        "CHACHA20" => by(&|s| s.enc == Enc::Chacha20),
        // OpenSSL words for what rustls has none of (weak or old suites,
        // other key exchanges, MACs that AEAD suites do not use).
        "MEDIUM"
        | "LOW"
        | "EXPORT"
        | "EXP"
        | "NULL"
        | "eNULL"
        | "aNULL"
        | "COMPLEMENTOFALL"
        | "COMPLEMENTOFDEFAULT"
        | "MD5"
        | "SHA1"
        | "SHA"
        | "SHA256"
        | "SHA384"
        | "RC4"
        | "DES"
        | "3DES"
        | "IDEA"
        | "SEED"
        | "CAMELLIA"
        | "CAMELLIA128"
        | "CAMELLIA256"
        | "ARIA"
        | "ARIA128"
        | "ARIA256"
        | "AESCCM"
        | "AESCCM8"
        | "CCM"
        | "CCM8"
        | "PSK"
        | "kPSK"
        | "aPSK"
        | "ECDHEPSK"
        | "DHEPSK"
        | "RSAPSK"
        | "SRP"
        | "kSRP"
        | "aSRP"
        | "DSS"
        | "aDSS"
        | "DH"
        | "kDH"
        | "DHE"
        | "EDH"
        | "kEDH"
        | "kDHE"
        | "ADH"
        | "AECDH"
        | "aECDH"
        | "kRSA"
        | "RSA"
        | "GOST"
        | "kGOST"
        | "aGOST"
        | "aGOST01"
        | "GOST89MAC"
        | "GOST94"
        | "SSLv3"
        | "TLSv1"
        | "TLSv1.0" => 0,
        _ => {
            if let Some(i) = SUITES.iter().position(|s| s.name == word) {
                1 << i
            } else if TLS13.iter().any(|x| x.0 == word) {
                0
            } else {
                return None;
            }
        }
    })
}

/// Why a cipher string cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum CipherError {
    /// A cipher (or a word) that rustls has no suite for.
    NoSuite(String),
    /// The string selects nothing.
    NoMatch,
}

/// The TLS 1.2 suites `spec` selects, in its order (OpenSSL's rules:
/// `X` adds, `!X` removes for good, `-X` removes, `+X` moves to the end,
/// `X+Y` is both, `@STRENGTH` sorts).
pub fn parse(spec: &str) -> Result<Vec<SupportedCipherSuite>, CipherError> {
    let mut list: Vec<usize> = Vec::new();
    let mut banned = 0u8;
    for item in spec.split([':', ',', ' ', ';']).filter(|s| !s.is_empty()) {
        if item == "@STRENGTH" {
            let bits = |i: &usize| match SUITES[*i].enc {
                Enc::Aes128Gcm => 128,
                _ => 256,
            };
            list.sort_by_key(|i| std::cmp::Reverse(bits(i)));
            continue;
        }
        if item.starts_with("@SECLEVEL=") {
            continue;
        }
        let (op, words) = match item.as_bytes()[0] {
            b'!' | b'-' | b'+' => (item.as_bytes()[0], &item[1..]),
            _ => (0, item),
        };
        let mut mask = 0xffu8;
        for w in words.split('+') {
            match select(w) {
                Some(m) => mask &= m,
                // Removing what rustls lacks removes nothing.
                None if op == b'!' || op == b'-' => mask = 0,
                None => return Err(CipherError::NoSuite(w.to_string())),
            }
        }
        let hit = |i: usize| mask & (1 << i) != 0;
        match op {
            b'!' => {
                banned |= mask;
                list.retain(|i| !hit(*i));
            }
            b'-' => list.retain(|i| !hit(*i)),
            b'+' => {
                let (moved, kept): (Vec<usize>, Vec<usize>) = list.iter().partition(|i| hit(**i));
                list = kept;
                list.extend(moved);
            }
            _ => {
                for i in 0..SUITES.len() {
                    if hit(i) && banned & (1 << i) == 0 && !list.contains(&i) {
                        list.push(i);
                    }
                }
            }
        }
    }
    if list.is_empty() {
        return Err(CipherError::NoMatch);
    }
    Ok(list.into_iter().map(|i| SUITES[i].suite).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(spec: &str) -> Vec<&'static str> {
        parse(spec).unwrap().into_iter().map(openssl_name).collect()
    }

    #[test]
    fn nginx_default_is_every_suite() {
        assert_eq!(names("HIGH:!aNULL:!MD5").len(), 6);
        assert_eq!(
            names("HIGH:!aNULL:!MD5")[0],
            "ECDHE-ECDSA-AES256-GCM-SHA384"
        );
    }

    #[test]
    fn names_keep_their_order() {
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305"),
            vec![
                "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-ECDSA-CHACHA20-POLY1305"
            ]
        );
    }

    #[test]
    fn operators() {
        assert_eq!(names("aRSA").len(), 3);
        assert_eq!(names("ALL:!aRSA").len(), 3);
        assert!(names("ALL:!aRSA:aRSA").iter().all(|n| n.contains("ECDSA")));
        assert_eq!(names("ALL:-aRSA:aRSA").len(), 6);
        assert_eq!(names("ALL:+AES128")[4], "ECDHE-ECDSA-AES128-GCM-SHA256");
        assert_eq!(names("ECDSA+AES128"), vec!["ECDHE-ECDSA-AES128-GCM-SHA256"]);
        assert_eq!(
            names("AES128:CHACHA20:@STRENGTH")[0],
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        );
        // Removing what rustls lacks is fine; TLS 1.3 names select nothing.
        assert_eq!(
            names("HIGH:!DHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256").len(),
            6
        );
    }

    #[test]
    fn what_rustls_lacks_is_named() {
        assert_eq!(
            parse("ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256"),
            Err(CipherError::NoSuite("DHE-RSA-AES128-GCM-SHA256".into()))
        );
        assert_eq!(
            parse("AES128-SHA"),
            Err(CipherError::NoSuite("AES128-SHA".into()))
        );
        assert_eq!(parse("MEDIUM"), Err(CipherError::NoMatch));
        assert_eq!(parse("HIGH:!HIGH"), Err(CipherError::NoMatch));
    }

    #[test]
    fn openssl_names_of_tls13() {
        assert_eq!(
            openssl_name(cs::TLS13_AES_128_GCM_SHA256),
            "TLS_AES_128_GCM_SHA256"
        );
    }
}
