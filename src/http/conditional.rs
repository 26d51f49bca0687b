//! nginx's not-modified filter (`ngx_http_not_modified_filter_module`):
//! a request's preconditions judged against what a 200 response of
//! sluice's own carries (its `Last-Modified` and `ETag`): a file, an
//! autoindex listing, a `return 200`. Proxied responses pass untouched, as
//! nginx's do without a cache.
//!
//! In nginx's order: `If-Unmodified-Since` (a date the response changed
//! after, a date that does not parse, or no `Last-Modified`: 412), then
//! `If-Match` (`*` matches any response; else one of its tags must be the
//! response's, compared strongly: 412), then, when `If-Modified-Since` or
//! `If-None-Match` is there, 304 unless one of them says "modified".

use http::header;

use super::vars::Req;
use crate::conf::loc::IfModifiedSince;

/// What the request's preconditions make of a 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Whether the request carries any precondition this filter judges (most
/// do not: one scan of the fields, no parsing).
pub fn asked(r: &Req) -> bool {
    r.headers.iter().any(|(n, _)| {
        n.len() >= 8
            && n[..3].eq_ignore_ascii_case(b"if-")
            && [
                "if-match",
                "if-none-match",
                "if-modified-since",
                "if-unmodified-since",
            ]
            .iter()
            .any(|h| n.eq_ignore_ascii_case(h.as_bytes()))
    })
}

/// The verdict for a response last modified at `modified` (seconds since
/// the epoch) with the tag `etag`, either unknown.
pub fn verdict(r: &Req, modified: Option<u64>, etag: Option<&str>) -> Verdict {
    let text = |n| r.headers.get(n).map(|v| v.to_str().unwrap_or(""));
    if let Some(ius) = text(header::IF_UNMODIFIED_SINCE) {
        match (http_time(ius), modified) {
            (Some(t), Some(m)) if t >= m => {}
            _ => return Verdict::Failed,
        }
    }
    if let Some(im) = text(header::IF_MATCH) {
        if !tag_matches(im, etag, false) {
            return Verdict::Failed;
        }
    }
    let ims = text(header::IF_MODIFIED_SINCE);
    let inm = text(header::IF_NONE_MATCH);
    if ims.is_none() && inm.is_none() {
        return Verdict::Send;
    }
    if let Some(ims) = ims {
        let same = modified.is_some_and(|m| unmodified(r.conf.if_modified_since, ims, m));
        if !same {
            return Verdict::Send;
        }
    }
    if let Some(inm) = inm {
        if !tag_matches(inm, etag, true) {
            return Verdict::Send;
        }
    }
    Verdict::NotModified
}

/// Whether `If-Modified-Since: ims` makes a response last modified at
/// `mtime` (seconds) a 304 under `if_modified_since`: `exact` asks for that
/// time, `before` for it or later, `off` never.
pub fn unmodified(mode: IfModifiedSince, ims: &str, mtime: u64) -> bool {
    let Some(t) = http_time(ims) else {
        return false;
    };
    match mode {
        IfModifiedSince::Off => false,
        IfModifiedSince::Exact => t == mtime,
        IfModifiedSince::Before => t >= mtime,
    }
}

/// Whether the list of an `If-Match` (`weak` false) or `If-None-Match`
/// (`weak` true) names `etag`: `*` names any response; a weak comparison
/// ignores `W/` on either side, a strong one takes no weak tag.
pub fn tag_matches(list: &str, etag: Option<&str>, weak: bool) -> bool {
    if list.trim() == "*" {
        return true;
    }
    let Some(etag) = etag.filter(|e| !e.is_empty()) else {
        return false;
    };
    let opaque = |t: &str| -> Option<String> {
        match t.strip_prefix("W/") {
            Some(o) if weak => Some(o.to_string()),
            Some(_) => None,
            None => Some(t.to_string()),
        }
    };
    let Some(ours) = opaque(etag) else {
        return false;
    };
    list.split(',')
        .filter_map(|t| opaque(t.trim_matches([' ', '\t'])))
        .any(|t| t == ours)
}

/// An HTTP date (RFC 9110's preferred form) as seconds since the epoch.
pub fn http_time(v: &str) -> Option<u64> {
    chrono::DateTime::parse_from_rfc2822(v.trim())
        .ok()
        .and_then(|t| u64::try_from(t.timestamp()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_as_nginx_compares_them() {
        let e = Some("\"a-1\"");
        assert!(tag_matches("*", None, false));
        assert!(tag_matches("*", e, true));
        assert!(tag_matches("\"a-1\"", e, false));
        assert!(tag_matches("\"x\", \"a-1\"", e, false));
        assert!(tag_matches("\"x\" ,\t\"a-1\" , \"z\"", e, true));
        assert!(
            !tag_matches("W/\"a-1\"", e, false),
            "strong: a weak tag never"
        );
        assert!(tag_matches("W/\"a-1\"", e, true), "weak: W/ ignored");
        assert!(!tag_matches("\"a-1\"", Some("W/\"a-1\""), false));
        assert!(tag_matches("\"a-1\"", Some("W/\"a-1\""), true));
        assert!(
            !tag_matches("\"a-1\"", None, true),
            "no tag: only * names it"
        );
        assert!(!tag_matches("\"a-2\"", e, true));
        assert!(!tag_matches("", e, true));
    }

    #[test]
    fn if_modified_since_modes() {
        let t = 1_764_558_147; // Mon, 01 Dec 2025 03:02:27 GMT
        let same = "Mon, 01 Dec 2025 03:02:27 GMT";
        let later = "Mon, 01 Dec 2025 04:00:00 GMT";
        assert_eq!(http_time(same), Some(t));
        assert!(unmodified(IfModifiedSince::Exact, same, t));
        assert!(!unmodified(IfModifiedSince::Exact, later, t));
        assert!(unmodified(IfModifiedSince::Before, later, t));
        assert!(!unmodified(IfModifiedSince::Before, same, t + 1));
        assert!(!unmodified(IfModifiedSince::Off, same, t));
        assert!(!unmodified(IfModifiedSince::Before, "yesterday", t));
    }
}
