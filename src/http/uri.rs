//! nginx's URI normalization for location matching and `$uri`: percent-decoding,
//! merging `//`, resolving `/./` and `/../`. A path that climbs above the root, or
//! one that does not start with `/`, is a bad request. Pure.

/// The normalized path, or None for a request nginx answers with 400.
pub fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    // Most paths need nothing done: no escapes, no empty or dot segments.
    if !path.contains('%') && !path.contains("//") && !path.contains("/.") {
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
    let text = String::from_utf8_lossy(&decoded);
    let mut segs: Vec<&str> = Vec::new();
    let trailing = text.ends_with('/') || text.ends_with("/.") || text.ends_with("/..");
    for seg in text.split('/') {
        match seg {
            "" | "." => {}
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

#[cfg(test)]
mod tests {
    use super::normalize;

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
