//! Responses sluice makes itself: nginx's status lines (its reason phrases), its built-in error pages with `sluice` where nginx signs them,
//! and the `Server`/`Date` headers. Pure builders; handlers choose what to send.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, LOCATION, SERVER};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body type of the HTTP server: whole or streamed.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body from bytes in memory.
pub fn full(b: Bytes) -> Body {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// nginx's reason phrase for a status, where it has one.
pub fn reason(code: u16) -> Option<&'static str> {
    Some(match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Time-out",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        416 => "Requested Range Not Satisfiable",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Temporarily Unavailable",
        504 => "Gateway Time-out",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        _ => return None,
    })
}

/// nginx's special pages that differ from the plain `CODE REASON` title.
fn page_title(code: u16) -> Option<String> {
    match code {
        494 => Some("400 Request Header Or Cookie Too Large".into()),
        495 => Some("400 The SSL certificate error".into()),
        496 => Some("400 No required SSL certificate was sent".into()),
        497 => Some("400 The plain HTTP request was sent to HTTPS port".into()),
        // nginx's pages say other words than its status lines.
        302 => Some("302 Found".into()),
        401 => Some("401 Authorization Required".into()),
        _ if code >= 300 && code != 304 => reason(code).map(|r| format!("{code} {r}")),
        _ => None,
    }
}

/// `Server:`; with `server_tokens off`, without the version.
pub fn server_header(tokens: bool) -> HeaderValue {
    if tokens {
        HeaderValue::from_static(concat!("sluice/", env!("CARGO_PKG_VERSION")))
    } else {
        HeaderValue::from_static("sluice")
    }
}

/// The built-in page for an error or redirect status, if nginx has one.
pub fn error_page(code: u16, tokens: bool) -> Option<String> {
    let title = page_title(code)?;
    let h1 = if (494..=497).contains(&code) {
        format!(
            "<center><h1>400 Bad Request</h1></center>\r\n<center>{}</center>",
            &title[4..]
        )
    } else {
        format!("<center><h1>{title}</h1></center>")
    };
    Some(format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n{h1}\r\n<hr><center>{}</center>\r\n</body>\r\n</html>\r\n",
        if tokens {
            concat!("sluice/", env!("CARGO_PKG_VERSION"))
        } else {
            "sluice"
        }
    ))
}

/// A response with nginx's status line, `Server`, and the given body.
pub fn build(code: u16, content_type: Option<&str>, body: Bytes, tokens: bool) -> Response<Body> {
    // The status on the wire: 494–497 are nginx-internal and go out as 400.
    let wire = if (494..=497).contains(&code) {
        400
    } else {
        code
    };
    let status = StatusCode::from_u16(wire).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let len = body.len();
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(SERVER, server_header(tokens));
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(CONTENT_TYPE, ct);
    }
    if wire != 204 && wire != 304 {
        h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    resp
}

/// The built-in response for a status: its page when there is one, else empty.
pub fn status_page(code: u16, tokens: bool) -> Response<Body> {
    match error_page(code, tokens) {
        Some(p) => build(code, Some("text/html"), Bytes::from(p), tokens),
        None => build(code, None, Bytes::new(), tokens),
    }
}

/// A redirect with `Location`; the body is the status's built-in page.
pub fn redirect(code: u16, location: &str, tokens: bool) -> Response<Body> {
    let mut r = status_page(code, tokens);
    if let Ok(v) = HeaderValue::from_bytes(&crate::octets::bytes(location)) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_phrases() {
        assert_eq!(reason(302), Some("Moved Temporarily"));
        assert_eq!(reason(405), Some("Not Allowed"));
        assert_eq!(reason(503), Some("Service Temporarily Unavailable"));
        assert_eq!(reason(504), Some("Gateway Time-out"));
        assert_eq!(reason(299), None);
    }

    #[test]
    fn pages() {
        let p = error_page(404, true).unwrap();
        assert!(p.contains("<title>404 Not Found</title>"));
        assert!(p.contains("<hr><center>sluice/"));
        assert!(
            error_page(404, false)
                .unwrap()
                .contains("<hr><center>sluice</center>")
        );
        assert!(error_page(200, true).is_none());
        assert!(error_page(304, true).is_none());
        assert!(
            error_page(494, true)
                .unwrap()
                .contains("Request Header Or Cookie Too Large")
        );
        let r = status_page(494, true);
        assert_eq!(r.status(), 400);
        let r = redirect(301, "http://x/", true);
        assert_eq!(r.headers()[LOCATION], "http://x/");
        assert!(r.headers().contains_key(CONTENT_LENGTH));
    }
}
