//! Helpers for variables that read response headers: `$upstream_cookie_NAME`
//! is the value of the cookie NAME that one of the upstream's `Set-Cookie`
//! headers sets, found as nginx finds it (the first header whose text starts
//! with NAME, any case, then `=`; the value up to the first `;`, spaces
//! around `=` skipped).

/// The value `Set-Cookie: NAME=value; ...` gives NAME in `headers`.
pub fn set_cookie_value(headers: &crate::h1::head::Headers, name: &str) -> Option<String> {
    headers
        .get_all(http::header::SET_COOKIE)
        .find_map(|v| cookie_in(v.as_bytes(), name.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn cookie_in<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    if name.len() >= line.len() || !line[..name.len()].eq_ignore_ascii_case(name) {
        return None;
    }
    let rest = trim_spaces(&line[name.len()..]);
    let rest = trim_spaces(rest.strip_prefix(b"=")?);
    let end = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
    Some(&rest[..end])
}

fn trim_spaces(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|&&c| c == b' ').count();
    &b[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> crate::h1::head::Headers {
        crate::h1::head::Headers::from_pairs(lines.iter().map(|l| ("Set-Cookie", *l)))
    }

    #[test]
    fn finds_as_nginx() {
        let h = headers(&["sid=abc; Path=/; HttpOnly", "Lang = en ;x=y", "idx=1"]);
        assert_eq!(set_cookie_value(&h, "sid").as_deref(), Some("abc"));
        assert_eq!(set_cookie_value(&h, "SID").as_deref(), Some("abc"));
        assert_eq!(set_cookie_value(&h, "lang").as_deref(), Some("en "));
        assert_eq!(set_cookie_value(&h, "id"), None);
        // Only the first pair of a header names its cookie.
        assert_eq!(set_cookie_value(&h, "x"), None);
        assert_eq!(set_cookie_value(&h, "Path"), None);
        assert_eq!(
            set_cookie_value(&headers(&["a="]), "a").as_deref(),
            Some("")
        );
        assert_eq!(set_cookie_value(&headers(&["a"]), "a"), None);
        assert_eq!(set_cookie_value(&headers(&[]), "a"), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(line in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
                        name in "[a-zA-Z_]{0,8}") {
            let _ = cookie_in(&line, name.as_bytes());
        }
    }
}
