//! The `api` location's dashboard: one self-contained HTML page (inline CSS
//! and JavaScript, no other asset) that polls the API's JSON every second.
//! Served at `PREFIX/dashboard.html`, or at the bare prefix to a browser.
//! The page is `dashboard.html` beside this file; only the API's base path
//! is filled in here.

use bytes::Bytes;
use http::Method;

use super::Reply;
use super::response;
use super::status::no_cache;
use super::vars::Req;

const PAGE: &str = include_str!("dashboard.html");

/// The page, its API base the location's prefix (with a final slash).
pub fn page(r: &Req, prefix: &str) -> Reply {
    if r.method != Method::GET && r.method != Method::HEAD {
        return Reply::Status(405);
    }
    let mut resp = response::build(
        200,
        Some("text/html; charset=utf-8"),
        Bytes::from(fill(prefix)),
        r.conf.server_tokens,
    );
    no_cache(&mut resp);
    Reply::Full(resp)
}

/// The page with `__API_BASE__` replaced by the prefix as a JavaScript
/// string; `<` is escaped so that no prefix can end the script element.
fn fill(prefix: &str) -> String {
    let mut base = prefix.to_string();
    if !base.ends_with('/') {
        base.push('/');
    }
    let literal = serde_json::to_string(&base)
        .unwrap_or_else(|_| "\"/\"".into())
        .replace('<', "\\u003c");
    PAGE.replacen("__API_BASE__", &literal, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_is_a_safe_js_string() {
        let p = fill("/st</script>\"x");
        assert!(p.contains("const BASE = \"/st\\u003c/script>\\\"x/\";"));
        assert!(!p.contains("__API_BASE__"));
        assert!(fill("/api/").contains("const BASE = \"/api/\";"));
    }

    #[test]
    fn no_external_assets() {
        assert!(!PAGE.contains("http://") && !PAGE.contains("https://"));
        assert!(!PAGE.contains(" src=") && !PAGE.contains("<link"));
    }
}
