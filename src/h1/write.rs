//! Heads as written on the wire: the status or request line, then each
//! header with its name in the case it arrived in (`Names`), else in
//! nginx's spelling (`Content-Type`, `ETag`). Writes into the caller's
//! buffer: no allocation per header.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use super::head::Names;

/// Names whose usual spelling is not plain title case (what `special`
/// answers, checked against it in the tests).
#[cfg(test)]
const SPECIAL: [(&str, &str); 8] = [
    ("etag", "ETag"),
    ("www-authenticate", "WWW-Authenticate"),
    ("content-md5", "Content-MD5"),
    ("x-xss-protection", "X-XSS-Protection"),
    ("dnt", "DNT"),
    ("te", "TE"),
    ("x-ua-compatible", "X-UA-Compatible"),
    ("sec-websocket-key", "Sec-WebSocket-Key"),
];

/// The usual spelling of a lowercase name in `SPECIAL`: a `match`, which
/// the compiler turns into a switch on the length, where a scan of the
/// table compared each entry (this runs for every header written).
fn special(lower: &str) -> Option<&'static str> {
    Some(match lower {
        "etag" => "ETag",
        "www-authenticate" => "WWW-Authenticate",
        "content-md5" => "Content-MD5",
        "x-xss-protection" => "X-XSS-Protection",
        "dnt" => "DNT",
        "te" => "TE",
        "x-ua-compatible" => "X-UA-Compatible",
        "sec-websocket-key" => "Sec-WebSocket-Key",
        _ => return None,
    })
}

/// Writes a header name: as it arrived when `names` has it, else title case.
pub fn name(n: &HeaderName, names: Option<&Names>, out: &mut Vec<u8>) {
    if let Some(raw) = names.and_then(|m| m.find(n)) {
        out.extend_from_slice(raw);
        return;
    }
    let s = n.as_str();
    if let Some(spelled) = special(s) {
        out.extend_from_slice(spelled.as_bytes());
        return;
    }
    // Copied whole, then capitalised in place: no capacity check per byte.
    let start = out.len();
    out.extend_from_slice(s.as_bytes());
    if let Some(written) = out.get_mut(start..) {
        title_case(written);
    }
}

/// Upper case at the start and after each dash, eight bytes at a time,
/// then byte by byte for the last few. The name is a `HeaderName`'s:
/// lowercase ASCII (a byte past ASCII would carry into its neighbour).
fn title_case(name: &mut [u8]) {
    const EACH: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x80 * EACH;
    // The high bit of each byte that follows a dash (or starts the name).
    let mut carry: u64 = 0x80;
    let mut chunks = name.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let x = super::head::eight(chunk);
        // Dashes, exactly: a byte is zero after the xor only where it was one.
        let t = x ^ (u64::from(b'-') * EACH);
        let dashes = !(((t & !HIGH) + !HIGH) | t) & HIGH;
        let after = (dashes << 8) | carry;
        carry = dashes >> 56;
        let x = x - ((after & super::head::lowercase_letters(x)) >> 2);
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    let mut up = carry != 0;
    for b in chunks.into_remainder() {
        let c = *b;
        if up {
            *b = c.to_ascii_uppercase();
        }
        up = c == b'-';
    }
}

/// Whether `raw` is how `name` writes `n` by itself (so that a head need
/// not carry it in its `Names`).
pub fn spelled_as_usual(n: &HeaderName, raw: &[u8]) -> bool {
    let s = n.as_str();
    if raw.len() != s.len() {
        return false;
    }
    if let Some(spelled) = special(s) {
        return spelled.as_bytes() == raw;
    }
    // Title case, made on the stack (on the heap for a name past 32 bytes)
    // and compared whole.
    let mut room = [0u8; 32];
    let mut long = Vec::new();
    let usual: &mut [u8] = match room.get_mut(..s.len()) {
        Some(usual) => usual,
        None => {
            long.resize(s.len(), 0);
            &mut long
        }
    };
    usual.copy_from_slice(s.as_bytes());
    title_case(usual);
    usual == raw
}

/// Writes one header line, `Name: value\r\n`.
pub fn header(n: &HeaderName, v: &HeaderValue, names: Option<&Names>, out: &mut Vec<u8>) {
    name(n, names, out);
    out.extend_from_slice(b": ");
    out.extend_from_slice(v.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes one header line as received: name and value as they are.
pub fn raw_header(n: &[u8], v: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(n);
    out.extend_from_slice(b": ");
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
}

/// Writes the headers, a line each.
pub fn headers(h: &HeaderMap, names: Option<&Names>, out: &mut Vec<u8>) {
    for (n, v) in h {
        header(n, v, names, out);
    }
}

/// `HTTP/1.1 CODE REASON\r\n` (sluice answers in HTTP/1.1 always, as nginx).
pub fn status_line(status: StatusCode, reason: Option<&[u8]>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(r) => out.extend_from_slice(r),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

/// `METHOD TARGET HTTP/1.x\r\n`.
pub fn request_line(method: &Method, target: &[u8], version: Version, out: &mut Vec<u8>) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(if version == Version::HTTP_10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
}

/// Today's `Date:` value, formatted once a second per thread. The wall
/// clock is read only when the second it was formatted for has passed by
/// the task's clock (`net::clock`), not once per response.
pub fn date(out: &mut Vec<u8>) {
    today(|t| out.extend_from_slice(t.as_bytes()));
}

/// The same as a header value (an HTTP/2 response's): shared, not copied.
pub fn date_value() -> HeaderValue {
    today(HeaderValue::clone)
}

fn today<R>(f: impl FnOnce(&HeaderValue) -> R) -> R {
    use std::cell::RefCell;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
    struct Cached {
        /// Until when (by the monotonic clock) `text` is today's second.
        until: Option<Instant>,
        secs: u64,
        text: HeaderValue,
    }
    thread_local! {
        static CACHE: RefCell<Cached> = const {
            RefCell::new(Cached { until: None, secs: u64::MAX, text: HeaderValue::from_static("") })
        };
    }
    let mono = crate::net::clock::now();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.until.is_none_or(|u| mono >= u) {
            let now = SystemTime::now();
            let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
            if c.secs != since.as_secs() {
                let t: chrono::DateTime<chrono::Utc> = now.into();
                let text = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
                if let Ok(v) = HeaderValue::from_str(&text) {
                    c.text = v;
                    c.secs = since.as_secs();
                }
            }
            let left = Duration::from_nanos(1_000_000_000 - u64::from(since.subsec_nanos()));
            c.until = mono.checked_add(left);
        }
        f(&c.text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::header::HeaderValue;

    /// The word-at-a-time title case is the byte loop's, for names of every
    /// length up to 24 made of letters, dashes and other token bytes.
    #[test]
    fn title_case_is_the_byte_loop() {
        let slow = |n: &[u8]| {
            let mut up = true;
            n.iter()
                .map(|&c| {
                    let b = if up { c.to_ascii_uppercase() } else { c };
                    up = c == b'-';
                    b
                })
                .collect::<Vec<u8>>()
        };
        let alphabet = b"a-z0_.m-`{";
        let mut seed = 7u32;
        for len in 0..=24 {
            for _ in 0..200 {
                let name: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        alphabet[(seed >> 16) as usize % alphabet.len()]
                    })
                    .collect();
                let mut fast = name.clone();
                title_case(&mut fast);
                assert_eq!(fast, slow(&name), "{:?}", String::from_utf8_lossy(&name));
            }
        }
    }

    #[test]
    fn date_as_text_and_as_value() {
        let mut d = Vec::new();
        date(&mut d);
        let v = date_value();
        // Both from the same second, unless one just passed.
        if v.as_bytes() != &d[..] {
            d.clear();
            date(&mut d);
        }
        assert_eq!(v.as_bytes(), &d[..]);
        assert_eq!(d.len(), "Wed, 02 Dec 2026 05:41:52 GMT".len());
        assert!(d.ends_with(b" GMT"));
    }

    #[test]
    fn names_keep_their_case() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("1"));
        h.insert("etag", HeaderValue::from_static("\"a\""));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        let names = Names(vec![Bytes::from_static(b"X-REQUEST-id")]);
        let mut out = Vec::new();
        headers(&h, Some(&names), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "X-REQUEST-id: 1\r\nETag: \"a\"\r\nContent-Type: text/plain\r\n"
        );
        let mut out = Vec::new();
        status_line(
            StatusCode::from_u16(302).unwrap(),
            Some(b"Moved Temporarily"),
            &mut out,
        );
        request_line(&Method::GET, b"/x", Version::HTTP_10, &mut out);
        date(&mut out);
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("HTTP/1.1 302 Moved Temporarily\r\nGET /x HTTP/1.0\r\n"),
            "{s}"
        );
        assert!(s.ends_with(" GMT"), "{s}");
    }

    /// `special` knows the table's names, each spelled as the table has it,
    /// and no others.
    #[test]
    fn special_spellings() {
        for (lower, spelled) in SPECIAL {
            assert_eq!(special(lower), Some(spelled));
            let n = HeaderName::from_static(lower);
            assert!(spelled_as_usual(&n, spelled.as_bytes()));
            // Its title case is not how it is written.
            let mut title = Vec::new();
            let mut up = true;
            for b in lower.bytes() {
                title.push(if up { b.to_ascii_uppercase() } else { b });
                up = b == b'-';
            }
            assert!(!spelled_as_usual(&n, &title), "{lower}");
        }
        assert_eq!(special("content-type"), None);
        let ct = HeaderName::from_static("content-type");
        assert!(spelled_as_usual(&ct, b"Content-Type"));
        assert!(!spelled_as_usual(&ct, b"content-type"));
        assert!(!spelled_as_usual(&ct, b"Content-Typ"));
        assert!(!spelled_as_usual(&ct, b"Content-TypeX"));
        // Past the 32 bytes of room on the stack.
        let long = HeaderName::from_static("x-a-name-longer-than-thirty-two-bytes");
        assert!(spelled_as_usual(
            &long,
            b"X-A-Name-Longer-Than-Thirty-Two-Bytes"
        ));
        assert!(!spelled_as_usual(
            &long,
            b"x-a-name-longer-than-thirty-two-bytes"
        ));
    }

    proptest::proptest! {
        /// Without the client's spelling a name is written in title case
        /// (each letter after a dash or at the start upper-cased), appended
        /// to what the buffer held, and `spelled_as_usual` says so.
        #[test]
        fn title_case_is_appended(lower in "[a-z0-9][a-z0-9-]{0,30}", before in "[ -~]{0,8}") {
            let n = HeaderName::from_bytes(lower.as_bytes()).unwrap();
            let mut out = before.as_bytes().to_vec();
            name(&n, None, &mut out);
            proptest::prop_assert!(out.starts_with(before.as_bytes()));
            let written = &out[before.len()..];
            if let Some((_, spelled)) = SPECIAL.iter().find(|(l, _)| *l == lower) {
                proptest::prop_assert_eq!(written, spelled.as_bytes());
            } else {
                let mut want = Vec::new();
                let mut up = true;
                for b in lower.bytes() {
                    want.push(if up { b.to_ascii_uppercase() } else { b });
                    up = b == b'-';
                }
                proptest::prop_assert_eq!(written, &want[..]);
            }
            proptest::prop_assert!(spelled_as_usual(&n, written));
        }
    }
}
