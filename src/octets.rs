//! Text that keeps bytes which are not UTF-8. nginx works on a URI's bytes:
//! `/caf%E9` (Latin-1) is the path `/caf\xE9`, sent upstream as `/caf%E9`
//! and opened as that file name. sluice's decoded URI is a `String`; a byte
//! of the decoded path that is not part of valid UTF-8 is kept in it as one
//! of 128 code points of the last private-use plane (U+10FF80–U+10FFFF:
//! byte `b` is U+10FF00 + `b`), and turned back into that byte where the
//! text leaves as bytes: the path sent upstream, a file's name, a header,
//! a body, a log line. So that this is a bijection, a client's own
//! (valid) UTF-8 for one of those code points is kept as its four bytes.
//! Pure.

use std::borrow::Cow;

/// The code point that stands for byte 0 (only 0x80–0xFF are ever kept).
const BASE: u32 = 0x10_FF00;

/// The lowest code point that stands for a byte.
const FIRST: u32 = BASE + 0x80;

/// Each such code point's UTF-8 begins with this byte (as do others): text
/// without it holds none, and is its own bytes.
const LEAD: u8 = 0xF4;

/// The byte `c` stands for, if it stands for one.
pub fn byte(c: char) -> Option<u8> {
    let v = u32::from(c);
    (v >= FIRST).then(|| (v - BASE) as u8)
}

/// The code point that stands for `b` (0x80–0xFF).
fn stand_in(b: u8) -> char {
    char::from_u32(BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// `b` as text: valid UTF-8 as itself, every other byte as the code point
/// that stands for it.
pub fn text(b: &[u8]) -> Cow<'_, str> {
    if !b.contains(&LEAD) {
        if let Ok(s) = std::str::from_utf8(b) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if byte(c).is_some() {
                let mut buf = [0u8; 4];
                out.extend(c.encode_utf8(&mut buf).bytes().map(stand_in));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().map(|&b| stand_in(b)));
    }
    Cow::Owned(out)
}

/// The bytes `s` stands for (the inverse of `text`).
pub fn bytes(s: &str) -> Cow<'_, [u8]> {
    if !s.as_bytes().contains(&LEAD) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        match byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// The same, owned: `s`'s own buffer when it stands for no byte.
pub fn into_bytes(s: String) -> Vec<u8> {
    if holds_bytes(&s) {
        bytes(&s).into_owned()
    } else {
        s.into_bytes()
    }
}

/// `s` with each byte it holds that is not UTF-8 percent-encoded (`%E9`),
/// for a request line, which takes no raw byte from sluice.
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !holds_bytes(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match byte(c) {
            Some(b) => out.push_str(&format!("%{b:02X}")),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether `s` holds a byte that is not UTF-8.
pub fn holds_bytes(s: &str) -> bool {
    s.as_bytes().contains(&LEAD) && s.chars().any(|c| byte(c).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn latin1_and_utf8() {
        assert_eq!(text(b"/caf\xc3\xa9"), "/caf\u{e9}");
        let t = text(b"/caf\xe9");
        assert_eq!(t.chars().count(), 5);
        assert_eq!(t.chars().last().and_then(byte), Some(0xe9));
        assert_eq!(&*bytes(&t), b"/caf\xe9");
        // A lone lead byte, a truncated sequence, a byte that is never UTF-8.
        for raw in [&b"\xf4"[..], b"a\xf4\x8f", b"\xff\xfe", b"\xc3"] {
            assert_eq!(&*bytes(&text(raw)), raw);
        }
        // A client's own U+10FFE9 stays four bytes, not one.
        let own = "\u{10FFE9}".as_bytes();
        let t = text(own);
        assert_eq!(t.chars().count(), 4);
        assert_eq!(&*bytes(&t), own);
        assert!(!holds_bytes("/caf\u{e9} \u{1F600}"));
        assert!(holds_bytes(&text(b"\xe9")));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(2000)))]

        /// Any bytes come back as they were, and valid UTF-8 without the
        /// stand-ins is its own text.
        #[test]
        fn round_trip(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let t = text(&raw);
            prop_assert_eq!(&*bytes(&t), &raw[..]);
            if let Ok(s) = std::str::from_utf8(&raw) {
                if !s.chars().any(|c| byte(c).is_some()) {
                    prop_assert_eq!(&*text(&raw), s);
                }
            }
        }

        #[test]
        fn utf8_with_stand_ins_round_trips(s in "[a\u{e9}\u{10FF80}-\u{10FFFF}/%]{0,16}") {
            let t = text(s.as_bytes());
            prop_assert_eq!(&*bytes(&t), s.as_bytes());
        }
    }
}
