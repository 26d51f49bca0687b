//! nginx's framing rules for HTTP/1 heads, both ways: what makes a client's
//! request head refused (and with which status and log line), and what makes
//! an upstream's response head an invalid header. A message that two parties
//! could frame two ways is refused, never passed on: that is how connections
//! desync and requests are smuggled. Pure functions of a parsed head; the
//! proxy and the connection code call them.

use super::vars::Req;
use crate::h1::body::content_length;
use crate::h1::head::{Headers, Known, Value};

/// A request head nginx refuses: the status, the log reason, and whether the
/// request line (not a header) was at fault (the codec's type).
pub(super) type Problem = crate::h1::head::HeadError;

/// What nginx refuses in a parsed request head, with its status and log
/// reason: the framing rules below, HTTP/1.1 or HTTP/2 without a host,
/// CONNECT, TRACE. (Heads beyond the header buffers are refused while they
/// are read: `h1::head`.)
pub(super) fn request_problem(r: &Req, host_ok: bool) -> Option<Problem> {
    let h = &r.headers;
    let connect = r.method == http::Method::CONNECT;
    // An HTTP/2 CONNECT carries only `:method` and `:authority` (RFC 9113
    // 8.5); nginx refuses it for the `:scheme` it lacks, before anything
    // else.
    if connect && r.version == http::Version::HTTP_2 {
        return Some(Problem::header(400, "client sent no :scheme header"));
    }
    // In nginx's order: what it finds while it reads the line and the
    // fields, then a missing host, then the body's framing.
    if let Some(bad) = fields_problem(r) {
        return Some(bad);
    }
    // nginx asks every version above 1.0 for a host (HTTP/2's `:authority`
    // becomes one), and logs it in HTTP/1.1's words whatever the version.
    let versioned = !matches!(r.version, http::Version::HTTP_09 | http::Version::HTTP_10);
    if host_ok && versioned && h.known(Known::Host).is_none() {
        return Some(Problem::header(
            400,
            "client sent HTTP/1.1 request without \"Host\" header",
        ));
    }
    if let Some(bad) = framing_problem(r) {
        return Some(bad);
    }
    // nginx answers CONNECT (a tunnel it does not make: passed on, it would
    // ask the upstream for one) and TRACE itself, whatever the location
    // does.
    if connect {
        return Some(Problem::header(405, "client sent CONNECT method"));
    }
    if r.method == http::Method::TRACE {
        return Some(Problem::header(405, "client sent TRACE method"));
    }
    None
}

/// What nginx refuses in an HTTP/2 request's `:scheme` and `:path` (the
/// `h2` crate takes an empty scheme, one that starts with a digit, and a
/// path without its leading `/`): a scheme of a letter, then letters,
/// digits, `+`, `-` or `.`; a path that starts with `/`, or `*` for
/// OPTIONS. A path that does not would go upstream as a target no server
/// reads (`GET ?x`). (Without `:authority`, `h2` keeps no scheme to look
/// at.)
pub(super) fn h2_pseudo_problem(method: &http::Method, uri: &http::Uri) -> Option<Problem> {
    let scheme = uri.scheme_str();
    let valid_scheme = |s: &str| {
        !s.is_empty()
            && s.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_alphabetic() || (i > 0 && (b.is_ascii_digit() || b"+-.".contains(&b)))
            })
    };
    if let Some(scheme) = scheme.filter(|s| !valid_scheme(s)) {
        return Some(Problem::line(
            400,
            format!("client sent invalid :scheme header: \"{scheme}\""),
        ));
    }
    let path = uri.path_and_query().map_or("", |p| p.as_str());
    if !(path.starts_with('/') || (path == "*" && method == http::Method::OPTIONS)) {
        return Some(Problem::line(
            400,
            format!("client sent invalid :path header: \"{path}\""),
        ));
    }
    None
}

/// An HTTP/2 request without `:path` (other than CONNECT), as nginx
/// refuses it.
pub(super) fn h2_no_path() -> Problem {
    Problem::header(400, "client sent no :path header")
}

/// A field's value as a log line shows it.
fn text(v: Value<'_>) -> String {
    String::from_utf8_lossy(v.as_bytes()).into_owned()
}

/// The request fields nginx takes once (`ngx_http_process_unique_header_line`
/// in nginx 1.22), lower case and as its log line shows them.
const UNIQUE: [(&str, &str); 8] = [
    ("content-length", "Content-Length"),
    ("transfer-encoding", "Transfer-Encoding"),
    ("expect", "Expect"),
    ("authorization", "Authorization"),
    ("if-modified-since", "If-Modified-Since"),
    ("if-unmodified-since", "If-Unmodified-Since"),
    ("if-range", "If-Range"),
    ("content-range", "Content-Range"),
];

/// nginx's rules for what frames a request and picks its server, the
/// ones it applies while it reads the head: a method in upper case, one
/// `Host`, one of each of `UNIQUE` (among them `Content-Length` and
/// `Transfer-Encoding`; `framing_problem` has the rest). A request that
/// breaks them is answered 400 and its connection closed: a front proxy
/// that framed it the other way must not get a second request out of its
/// body.
fn fields_problem(r: &Req) -> Option<Problem> {
    let h = &r.headers;
    if !r
        .method
        .as_str()
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
    {
        return Some(Problem::line(400, "client sent invalid method"));
    }
    let twice = |name: Known| {
        let mut all = h.known_all(name);
        let first = all.next()?;
        all.next().map(|second| (text(first), text(second)))
    };
    if let Some((first, second)) = twice(Known::Host) {
        return Some(Problem::header(
            400,
            format!(
                "client sent duplicate host header: \"Host: {second}\", previous value: \"Host: {first}\""
            ),
        ));
    }
    // The fields nginx takes once (its unique header lines): a second is
    // refused, the first found in the head's order.
    let mut seen: [Option<Value<'_>>; UNIQUE.len()] = [None; UNIQUE.len()];
    for (name, value) in h.iter() {
        let Some(i) = UNIQUE
            .iter()
            .position(|(lower, _)| name.eq_ignore_ascii_case(lower.as_bytes()))
        else {
            continue;
        };
        if let Some(first) = seen[i] {
            let shown = UNIQUE[i].1;
            return Some(Problem::header(
                400,
                format!(
                    "client sent duplicate header line: \"{shown}: {}\", previous value: \"{shown}: {}\"",
                    text(value),
                    text(first)
                ),
            ));
        }
        seen[i] = Some(value);
    }
    None
}

/// nginx's rules for a request body's framing, applied once the head is
/// read: a `Content-Length` that is a number, a `Transfer-Encoding` only
/// in HTTP/1.1, exactly `chunked` (else 501), and never beside a
/// `Content-Length`.
fn framing_problem(r: &Req) -> Option<Problem> {
    let h = &r.headers;
    if let Some(cl) = h.known(Known::ContentLength) {
        if content_length(cl.as_bytes()).is_none() {
            return Some(Problem::header(
                400,
                "client sent invalid \"Content-Length\" header",
            ));
        }
    }
    if let Some(te) = h.known(Known::TransferEncoding) {
        if r.version == http::Version::HTTP_10 {
            return Some(Problem::header(
                400,
                "client sent HTTP/1.0 request with \"Transfer-Encoding\" header",
            ));
        }
        // A coding nginx does not know is a 501 before the length beside
        // it is looked at, as nginx orders the two.
        if !te.as_bytes().eq_ignore_ascii_case(b"chunked") {
            return Some(Problem::header(
                501,
                format!(
                    "client sent unknown \"Transfer-Encoding\": \"{}\"",
                    text(te)
                ),
            ));
        }
        if h.known(Known::ContentLength).is_some() {
            return Some(Problem::header(
                400,
                "client sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time",
            ));
        }
    }
    None
}

/// nginx's rules for the upstream's framing headers: one `Content-Length`
/// that is a number, one `Transfer-Encoding` that is exactly `chunked`, never
/// both. Anything else is an invalid header (502, the connection not
/// reused): a response the client could read two ways desyncs its
/// connection. The message is nginx's error-log text.
pub(super) fn upstream_framing(h: &Headers) -> Result<(), String> {
    let mut lengths = h.known_all(Known::ContentLength);
    if let Some(first) = lengths.next() {
        if let Some(second) = lengths.next() {
            return Err(format!(
                "upstream sent duplicate header line: \"Content-Length: {}\", previous value: \"Content-Length: {}\"",
                text(second),
                text(first)
            ));
        }
        if content_length(first.as_bytes()).is_none() {
            return Err(format!(
                "upstream sent invalid \"Content-Length\" header: \"Content-Length: {}\"",
                text(first)
            ));
        }
    }
    let mut codings = h.known_all(Known::TransferEncoding);
    if let Some(first) = codings.next() {
        if let Some(second) = codings.next() {
            return Err(format!(
                "upstream sent duplicate header line: \"Transfer-Encoding: {}\", previous value: \"Transfer-Encoding: {}\"",
                text(second),
                text(first)
            ));
        }
        if h.known(Known::ContentLength).is_some() {
            return Err(
                "upstream sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time"
                    .to_string(),
            );
        }
        if !first.as_bytes().eq_ignore_ascii_case(b"chunked") {
            return Err(format!(
                "upstream sent unknown \"Transfer-Encoding\": \"{}\"",
                text(first)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        let head =
            |lines: &[(&str, &str)]| upstream_framing(&Headers::from_pairs(lines.iter().copied()));
        assert!(head(&[]).is_ok());
        assert!(head(&[("content-length", "5")]).is_ok());
        assert!(head(&[("transfer-encoding", "chunked")]).is_ok());
        assert!(head(&[("transfer-encoding", "Chunked")]).is_ok());
        let both = head(&[("content-length", "5"), ("transfer-encoding", "chunked")]);
        assert_eq!(
            both.unwrap_err(),
            "upstream sent \"Content-Length\" and \"Transfer-Encoding\" headers at the same time"
        );
        assert_eq!(
            head(&[("transfer-encoding", "gzip, chunked")]).unwrap_err(),
            "upstream sent unknown \"Transfer-Encoding\": \"gzip, chunked\""
        );
        assert!(head(&[("transfer-encoding", "chunked, chunked")]).is_err());
        assert!(head(&[("transfer-encoding", "identity")]).is_err());
        assert!(
            head(&[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked")
            ])
            .unwrap_err()
            .starts_with("upstream sent duplicate header line")
        );
        // Even equal lengths twice: nginx refuses the duplicate.
        assert_eq!(
            head(&[("content-length", "5"), ("content-length", "5")]).unwrap_err(),
            "upstream sent duplicate header line: \"Content-Length: 5\", previous value: \"Content-Length: 5\""
        );
        for bad in [
            "",
            "-1",
            "+5",
            " 5",
            "5 ",
            "0x10",
            "1234567890123456789",
            "5, 5",
        ] {
            assert!(head(&[("content-length", bad)]).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(crate::proptest_cases(512)))]
        /// Whatever framing headers an upstream sends, a response is let
        /// through only when one reading of its length exists.
        #[test]
        fn framing_passes_only_one_reading(
            lengths in proptest::collection::vec("[0-9a-z ,+-]{0,20}", 0..3),
            codings in proptest::collection::vec("(chunked|Chunked|gzip|identity| |,){0,3}", 0..3),
        ) {
            let h = Headers::from_pairs(
                lengths
                    .iter()
                    .map(|v| ("content-length", v.as_str()))
                    .chain(codings.iter().map(|v| ("transfer-encoding", v.as_str()))),
            );
            let cl: Vec<_> = h.known_all(Known::ContentLength).collect();
            let te: Vec<_> = h.known_all(Known::TransferEncoding).collect();
            if upstream_framing(&h).is_ok() {
                proptest::prop_assert!(cl.len() + te.len() <= 1);
                if let Some(v) = cl.first() {
                    proptest::prop_assert!(std::str::from_utf8(v.as_bytes())
                        .ok()
                        .and_then(|t| t.parse::<u64>().ok())
                        .is_some());
                }
                if let Some(v) = te.first() {
                    proptest::prop_assert!(v.as_bytes().eq_ignore_ascii_case(b"chunked"));
                }
            }
        }
    }
}
