//! nginx's URI normalization for location matching and `$uri`: percent-decoding,
//! merging `//` (unless `merge_slashes off`), resolving `/./` and `/../`. A path
//! that climbs above the root, or one that does not start with `/`, is a bad
//! request. Pure.

/// No escape, no `//` and no `/.` in the path: nothing to do. One pass
/// over the bytes.
fn plain(path: &[u8]) -> bool {
    let mut slash = false;
    for &b in path {
        if b == b'%' || (slash && (b == b'/' || b == b'.')) {
            return false;
        }
        slash = b == b'/';
    }
    true
}

/// The normalized path, or None for a request nginx answers with 400.
/// `merge`: `merge_slashes`; without it an empty segment stays one, and a
/// `..` after it takes it away, as nginx's parser does.
pub fn normalize(path: &str, merge: bool) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    // Most paths need nothing done: no escapes, no empty or dot segments.
    if plain(path.as_bytes()) {
        return Some(path.to_string());
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: u8| (b as char).to_digit(16);
            let hi = bytes.get(i + 1).and_then(|&b| hex(b))?;
            let lo = bytes.get(i + 2).and_then(|&b| hex(b))?;
            let v = (hi * 16 + lo) as u8;
            if v == 0 {
                return None;
            }
            decoded.push(v);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    // Bytes that are not UTF-8 are kept (`octets`), as nginx keeps them.
    let text = crate::octets::text(&decoded);
    let mut segs: Vec<&str> = Vec::new();
    let trailing = text.ends_with('/') || text.ends_with("/.") || text.ends_with("/..");
    // The segments after the leading "/"; the last empty one (after a
    // final "/") is `trailing`'s to add back.
    let body = text.get(1..).unwrap_or("");
    let mut parts: Vec<&str> = body.split('/').collect();
    if parts.last() == Some(&"") {
        parts.pop();
    }
    for seg in parts {
        match seg {
            "" if merge => {}
            "." => {}
            ".." => {
                segs.pop()?;
            }
            s => segs.push(s),
        }
    }
    let mut out = String::with_capacity(text.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if trailing || out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// How nginx (1.22) escapes a decoded text it puts in a request target:
/// `Path` as `ngx_escape_uri`'s URI table (controls, space, bytes above
/// 0x7E, and ``"#%<>?\^`{|}``), `Args` the same and `&+;` (a capture a
/// rewrite puts in the arguments).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    Path,
    Args,
}

/// `text` escaped for `part` of a request target, appended to `out`: the
/// bytes it stands for (`octets`), so a Latin-1 `%E9` goes as it came.
pub fn escape_into(text: &str, part: Escape, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in crate::octets::bytes(text).iter() {
        let escaped = b <= 0x20
            || b >= 0x7f
            || b"\"#%<>?\\^`{|}".contains(&b)
            || (part == Escape::Args && b"&+;".contains(&b));
        if escaped {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push(char::from(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// nginx 1.22's tables, as measured beside it (every byte through a
    /// rewrite's path, and through a capture in its arguments).
    #[test]
    fn escapes_as_nginx() {
        use super::{Escape, escape_into};
        let all: String = (1u8..=0x7f).map(char::from).chain(['\u{e9}']).collect();
        let esc = |part| {
            let mut out = String::new();
            escape_into(&all, part, &mut out);
            out.split('%')
                .skip(1)
                .map(|h| u8::from_str_radix(&h[..2], 16).expect("hex"))
                .collect::<Vec<u8>>()
        };
        let mut path: Vec<u8> = (1..=0x20).collect();
        path.extend(b"\"#%<>?\\^`{|}");
        path.extend([0x7f, 0xc3, 0xa9]);
        let mut mine = esc(Escape::Path);
        mine.sort_unstable();
        path.sort_unstable();
        assert_eq!(mine, path);
        path.extend(b"&+;");
        path.sort_unstable();
        let mut mine = esc(Escape::Args);
        mine.sort_unstable();
        assert_eq!(mine, path);
    }

    fn normalize(p: &str) -> Option<String> {
        super::normalize(p, true)
    }

    fn unmerged(p: &str) -> Option<String> {
        super::normalize(p, false)
    }

    #[test]
    fn merge_slashes_off() {
        assert_eq!(unmerged("/a//b").as_deref(), Some("/a//b"));
        assert_eq!(unmerged("//").as_deref(), Some("//"));
        assert_eq!(unmerged("/").as_deref(), Some("/"));
        assert_eq!(unmerged("/a//").as_deref(), Some("/a//"));
        assert_eq!(unmerged("/a%2F%2Fb").as_deref(), Some("/a//b"));
        assert_eq!(unmerged("/a//../b").as_deref(), Some("/a/b"));
        assert_eq!(unmerged("/a/.//b").as_deref(), Some("/a//b"));
        assert_eq!(unmerged("/a//..").as_deref(), Some("/a/"));
        assert_eq!(unmerged("//../../x"), None);
        assert_eq!(unmerged("x"), None);
    }

    proptest! {
        // Hostile paths: never a panic; a result always starts with "/",
        // never holds a "." or ".." segment, and merged has no "//".
        // The one-pass test says what the three `contains` said.
        #[test]
        fn plain_is_three_contains(p in "[a/.%]{0,12}") {
            let want = !p.contains('%') && !p.contains("//") && !p.contains("/.");
            prop_assert_eq!(super::plain(p.as_bytes()), want);
        }

        #[test]
        fn any_path(p in "/[a-z/.%0-9A-F]{0,40}") {
            for merge in [true, false] {
                if let Some(out) = super::normalize(&p, merge) {
                    prop_assert!(out.starts_with('/'));
                    prop_assert!(!out.split('/').any(|s| s == "." || s == ".."));
                    prop_assert!(!merge || !out.contains("//"));
                }
            }
        }
    }

    #[test]
    fn cases() {
        assert_eq!(normalize("/").as_deref(), Some("/"));
        assert_eq!(normalize("/a//b").as_deref(), Some("/a/b"));
        assert_eq!(normalize("/a/./b/").as_deref(), Some("/a/b/"));
        assert_eq!(normalize("/a/../b").as_deref(), Some("/b"));
        assert_eq!(normalize("/a/b/..").as_deref(), Some("/a/"));
        assert_eq!(normalize("/%61%2Fb").as_deref(), Some("/a/b"));
        assert_eq!(normalize("/../x"), None);
        assert_eq!(normalize("/%zz"), None);
        assert_eq!(normalize("/%00"), None);
        assert_eq!(normalize("x"), None);
    }
}
