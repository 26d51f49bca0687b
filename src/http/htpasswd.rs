//! Basic authentication's pure parts: the credentials in an `Authorization:
//! Basic` header (as nginx's `ngx_http_auth_basic_user` reads them), the
//! password field of a user in an htpasswd file (nginx's line reading:
//! `#` comments, `user:password[:comment]`), and checking a password
//! against it in the formats nginx takes: `{PLAIN}`, `{SHA}`, `{SSHA}` and
//! crypt(3) strings (`$apr1$`, `$1$`, `$2y$`, `$5$`, `$6$`, DES) through
//! the crypt3_rs crate. No I/O.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Standard base64, padding optional (nginx's `ngx_decode_base64`).
const B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// bcrypt costs above this are refused (2^16 rounds take seconds).
const MAX_BCRYPT_COST: u32 = 16;
/// SHA-crypt `rounds=` above this are refused.
const MAX_SHA_ROUNDS: u64 = 1_000_000;

/// The user and password of `Authorization: Basic ...`; None for no
/// header, another scheme, bad base64, no `:` or an empty user.
pub fn basic_credentials(header: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    if header.len() < 6 || !header[..6].eq_ignore_ascii_case(b"Basic ") {
        return None;
    }
    let mut enc = &header[6..];
    while let [b' ', rest @ ..] = enc {
        enc = rest;
    }
    if enc.is_empty() {
        return None;
    }
    let raw = B64.decode(enc).ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    if colon == 0 {
        return None;
    }
    Some((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

/// The password field of `user` in an htpasswd file: the first line whose
/// name is `user`, up to a `:`, CR or LF. Lines starting with `#` are
/// comments.
pub fn find<'a>(file: &'a [u8], user: &[u8]) -> Option<&'a [u8]> {
    for line in file.split(|&b| b == b'\n') {
        if line.first() == Some(&b'#') {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if &line[..colon] != user {
            continue;
        }
        let rest = &line[colon + 1..];
        let end = rest
            .iter()
            .position(|&b| b == b':' || b == b'\r')
            .unwrap_or(rest.len());
        return Some(&rest[..end]);
    }
    None
}

fn sha1(parts: &[&[u8]]) -> Vec<u8> {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    for p in parts {
        ctx.update(p);
    }
    ctx.finish().as_ref().to_vec()
}

/// Whether a crypt(3) string asks for more work than sluice does.
fn too_costly(hash: &str) -> bool {
    if let Some(rest) = hash
        .strip_prefix("$2y$")
        .or_else(|| hash.strip_prefix("$2a$"))
        .or_else(|| hash.strip_prefix("$2b$"))
    {
        let cost: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return cost.parse::<u32>().map_or(true, |c| c > MAX_BCRYPT_COST);
    }
    for p in ["$5$rounds=", "$6$rounds="] {
        if let Some(rest) = hash.strip_prefix(p) {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return n.parse::<u64>().map_or(true, |n| n > MAX_SHA_ROUNDS);
        }
    }
    false
}

/// Whether `password` matches the stored field. Anything that does not
/// read as a known format does not match.
pub fn verify(password: &[u8], stored: &[u8]) -> bool {
    if let Some(plain) = stored.strip_prefix(b"{PLAIN}") {
        return plain == password;
    }
    if let Some(enc) = stored.strip_prefix(b"{SHA}") {
        return B64.decode(enc).is_ok_and(|want| want == sha1(&[password]));
    }
    if let Some(enc) = stored.strip_prefix(b"{SSHA}") {
        let Ok(raw) = B64.decode(enc) else {
            return false;
        };
        if raw.len() < 20 {
            return false;
        }
        let (digest, salt) = raw.split_at(20);
        return sha1(&[password, salt]) == digest;
    }
    let Ok(hash) = std::str::from_utf8(stored) else {
        return false;
    };
    if hash.is_empty() || too_costly(hash) {
        return false;
    }
    // crypt3_rs reads SHA-crypt only with "rounds=": the default, 5000,
    // written out gives the same checksum.
    for p in ["$5$", "$6$"] {
        if let Some(rest) = hash.strip_prefix(p) {
            if !rest.starts_with("rounds=") {
                let full = format!("{p}rounds=5000${rest}");
                return crypt3_rs::unix::verify(password, &full);
            }
        }
    }
    crypt3_rs::unix::verify(password, hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn credentials() {
        let h = format!("Basic {}", B64.encode("alice:s3:cret"));
        assert_eq!(
            basic_credentials(h.as_bytes()),
            Some((b"alice".to_vec(), b"s3:cret".to_vec()))
        );
        let h = format!("basic   {}", B64.encode("bob:").trim_end_matches('='));
        assert_eq!(
            basic_credentials(h.as_bytes()),
            Some((b"bob".to_vec(), Vec::new()))
        );
        for bad in [
            "".to_string(),
            "Bearer x".into(),
            "Basic ".into(),
            "Basic !!!".into(),
            format!("Basic {}", B64.encode("nocolon")),
            format!("Basic {}", B64.encode(":pw")),
        ] {
            assert_eq!(basic_credentials(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn lines() {
        let f =
            b"# alice:commented\nbob:{PLAIN}b\r\nalice:{PLAIN}a:comment\ncarol\n:x\nalice:second\n";
        assert_eq!(find(f, b"alice"), Some(&b"{PLAIN}a"[..]));
        assert_eq!(find(f, b"bob"), Some(&b"{PLAIN}b"[..]));
        assert_eq!(find(f, b"carol"), None);
        assert_eq!(find(f, b"# alice"), None);
        assert_eq!(find(b"dave:pw", b"dave"), Some(&b"pw"[..]));
    }

    #[test]
    fn formats() {
        // Made with htpasswd(1) and openssl passwd for the password "password".
        let ok: &[&str] = &[
            "{PLAIN}password",
            "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=",
            "$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00",
            "$1$5pZSV9va$azfrPr6af3Fc7dLblQXVa0",
            "$2y$05$nC6nErr9XZJuMJ57WyCob.EuZEjylDt2KaHfbfOtyb.EgL1I2jCVa",
            "bGVh02xkuGli2",
            "$5$abcdefgh$ZLdkj8mkc2XVSrPVjskDAgZPGjtj1VGVaa1aUkrMTU/",
            "$6$abcdefgh$yVfUwsw5T.JApa8POvClA1pQ5peiq97DUNyXCZN5IrF.BMSkiaLQ5kvpuEm/VQ1Tvh/KV2TcaWh8qinoW5dhA1",
            "$5$rounds=1000$abcdefgh$GEazsRB0Tipk2UJZtYJM/eHHRMtwea4Vnto3YxMbrG0",
        ];
        for h in ok {
            assert!(verify(b"password", h.as_bytes()), "{h}");
            assert!(!verify(b"Password", h.as_bytes()), "{h}");
        }
        // {SSHA}: SHA-1 of password and salt, then the salt.
        let mut raw = sha1(&[b"password", b"salt"]);
        raw.extend_from_slice(b"salt");
        let ssha = format!("{{SSHA}}{}", B64.encode(&raw));
        assert!(verify(b"password", ssha.as_bytes()));
        assert!(!verify(b"other", ssha.as_bytes()));
        for bad in [
            "",
            "{SHA}!!",
            "{SSHA}AAAA",
            "$9$x$y",
            "$2y$31$aaaa",
            "\u{fffd}",
        ] {
            assert!(!verify(b"password", bad.as_bytes()), "{bad}");
        }
    }

    proptest! {
        /// Hostile files and headers never panic.
        #[test]
        fn arbitrary_lines_never_panic(
            file in proptest::collection::vec(any::<u8>(), 0..512),
            user in proptest::collection::vec(any::<u8>(), 0..16),
            pass in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            if let Some(stored) = find(&file, &user) {
                let _ = verify(&pass, stored);
            }
            let _ = basic_credentials(&file);
        }

        /// Stored fields shaped like the known formats never panic.
        #[test]
        fn arbitrary_hashes_never_panic(
            prefix in prop_oneof![
                Just(""), Just("{PLAIN}"), Just("{SHA}"), Just("{SSHA}"),
                Just("$apr1$"), Just("$1$"), Just("$2y$05$"), Just("$5$"), Just("$6$"),
                Just("$5$rounds="), Just("_"),
            ],
            rest in "[ -~]{0,64}",
            pass in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let _ = verify(&pass, format!("{prefix}{rest}").as_bytes());
        }
    }
}
