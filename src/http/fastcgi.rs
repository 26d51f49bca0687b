//! `fastcgi_pass`: the exchange with a FastCGI application on a connection
//! the proxy's attempt engine chose (`proxy::run` calls `exchange` for a
//! FastCGI location, so peers, retries, `$upstream_*` and the keep-alive
//! cache are the proxy's). Here: the params nginx builds, the body as STDIN
//! records, the CGI head read from STDOUT (stderr logged as nginx logs
//! it), and the rest of STDOUT as the response body (`ProxyBody`).

use std::future::poll_fn;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

use super::proxy::{Failed, READING, SENDING, head_unsent, timed_out, unanswered, unsent_write};
use super::proxy_plan::Plan;
use super::vars::Req;
use crate::conf::loc::LocConf;
use crate::h1::head::{Mapped, ResponseHead};
use crate::log::Level;
use crate::upstream::Pooled;
use crate::upstream::attempt::Kind;
use crate::upstream::body::Payload;
use crate::upstream::fcgi::{self, Event};
use crate::upstream::h1conn::FcgiError;

/// `$fastcgi_script_name` and `$fastcgi_path_info`: `$uri` split by
/// `fastcgi_split_path_info` (whole when it does not match), with
/// `fastcgi_index` after a name ending in `/`.
pub(super) fn split_path(r: &Req) -> (String, String) {
    let (mut script, info) = match r
        .conf
        .fastcgi_split_path_info
        .as_ref()
        .and_then(|re| re.captures(&r.uri))
    {
        Some(c) => (
            c.get(1).map_or("", |m| m.as_str()).to_string(),
            c.get(2).map_or("", |m| m.as_str()).to_string(),
        ),
        None => (r.uri.clone(), String::new()),
    };
    if script.ends_with('/') {
        if let Some(t) = &r.conf.fastcgi_index {
            script.push_str(&r.eval(t));
        }
    }
    (script, info)
}

/// A request header's param name as nginx makes it: `HTTP_` and the name
/// uppercased with `-` as `_`. None for a name nginx would not pass.
fn http_name(name: &[u8]) -> Option<String> {
    if name.is_empty()
        || !name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    let mut s = String::with_capacity(5 + name.len());
    s.push_str("HTTP_");
    for &b in name {
        s.push(if b == b'-' {
            '_'
        } else {
            char::from(b.to_ascii_uppercase())
        });
    }
    Some(s)
}

/// The request's params: the `fastcgi_param` lines in order (empty ones
/// with `if_not_empty` left out), then, with `fastcgi_pass_request_headers`,
/// one `HTTP_*` param per request header that no `fastcgi_param` named
/// (repeated headers joined with `, `, cookies with `; `, as nginx).
pub(super) fn params(r: &Req, body_len: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for p in r.conf.fastcgi_param.iter() {
        let mut v = r.eval(&p.value);
        // A chunked body was read whole: its length is known now (nginx
        // sets the request's Content-Length the same way).
        if p.name == "CONTENT_LENGTH" && v.is_empty() && body_len > 0 {
            v = body_len.to_string();
        }
        if p.if_not_empty && v.is_empty() {
            continue;
        }
        // The bytes the value stands for: a Latin-1 URI's `SCRIPT_FILENAME`
        // names the file (`octets`).
        out.push((p.name.clone().into_bytes(), crate::octets::into_bytes(v)));
    }
    if r.conf.proxy_pass_request_headers {
        let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
        for (name, value) in r.headers.iter() {
            let Some(key) = http_name(name) else { continue };
            if r.conf.fastcgi_param.iter().any(|p| p.name == key) {
                continue;
            }
            match headers.iter_mut().find(|(k, _)| *k == key) {
                Some((k, v)) => {
                    v.extend_from_slice(if k == "HTTP_COOKIE" { b"; " } else { b", " });
                    v.extend_from_slice(value.as_bytes());
                }
                None => headers.push((key, value.as_bytes().to_vec())),
            }
        }
        out.extend(headers.into_iter().map(|(k, v)| (k.into_bytes(), v)));
    }
    out
}

/// BEGIN_REQUEST and the PARAMS records: what every attempt sends first.
pub(super) fn request_head(r: &Req, body: &Payload) -> Vec<u8> {
    let mut out = Vec::new();
    fcgi::begin_request(&mut out, r.conf.fastcgi_keep_conn);
    let pairs = params(r, body.len());
    fcgi::params(
        &mut out,
        pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
    );
    out
}

/// The response body's side of the exchange: the record reader and what
/// logging stderr needs.
pub(crate) struct Stdout {
    pub(crate) reader: fcgi::Reader,
    pub(crate) number: u64,
    /// The request's log context with the upstream.
    pub(crate) ctx: String,
}

/// The next body bytes from STDOUT for `ProxyBody`: Ok(None) at
/// END_REQUEST; stderr is logged on the way (nginx's "while reading
/// upstream").
pub(crate) fn poll_body(
    c: &mut Pooled,
    out: &mut Stdout,
    cx: &mut Context<'_>,
) -> Poll<Result<Option<Bytes>, crate::upstream::h1conn::ReadError>> {
    loop {
        match c.h1.poll_fcgi(&mut out.reader, cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(Event::Stdout(b))) => return Poll::Ready(Ok(Some(b))),
            Poll::Ready(Ok(Event::Stderr(b))) => {
                log_stderr(out.number, &b, "reading upstream", &out.ctx);
            }
            Poll::Ready(Ok(Event::End { .. })) => return Poll::Ready(Ok(None)),
            Poll::Ready(Err(_)) => {
                return Poll::Ready(Err(crate::upstream::h1conn::ReadError::Truncated));
            }
        }
    }
}

fn log_stderr(number: u64, text: &[u8], stage: &str, ctx: &str) {
    let text = String::from_utf8_lossy(text);
    let text = text.trim_end_matches(['\r', '\n']);
    crate::log_conn!(
        Level::Error,
        number,
        "FastCGI sent in stderr: \"{}\" while {}{}",
        text,
        stage,
        ctx
    );
}

/// Sends the records (`fastcgi_send_timeout` between writes) and reads
/// the CGI head (`fastcgi_read_timeout` between reads, at most
/// `fastcgi_buffer_size`). The head comes back as an HTTP one, with the
/// body's reader and what of the body came with the head.
pub(super) async fn exchange(
    conn: &mut Pooled,
    r: &Req,
    plan: &mut Plan,
    conf: &LocConf,
) -> Result<(ResponseHead, Box<Stdout>, Bytes), Failed> {
    conn.requests += 1;
    let mut first = plan.head.clone();
    // A small body goes in the same write as the params.
    let small = match &plan.body {
        Payload::Mem(b) if b.len() <= crate::upstream::h1conn::WITH_HEAD => {
            fcgi::stdin(&mut first, b);
            fcgi::stdin_end(&mut first);
            true
        }
        _ => false,
    };
    let timeout = conf.proxy_send_timeout;
    conn.h1
        .send(&first, &Payload::default(), timeout)
        .await
        .map_err(head_unsent)?;
    if !small {
        let mut chunks = plan.body.body();
        loop {
            let piece = match chunks.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    let text = format!("read() failed ({})", crate::log::errno_text(&e));
                    return Err(unanswered(Kind::Error, text, SENDING));
                }
            };
            let mut recs = Vec::with_capacity(piece.len() + 64);
            fcgi::stdin(&mut recs, &piece);
            if let Err(e) = conn.h1.write_more(&recs, timeout).await {
                return Err(unsent_write(&e));
            }
        }
        let mut end = Vec::new();
        fcgi::stdin_end(&mut end);
        if conn.h1.write_more(&end, timeout).await.is_err() {
            return Err(unanswered(Kind::Closed, "writev() failed".into(), SENDING));
        }
    }
    let ctx_url = |r: &Req| r.log_context(Some(&format!("fastcgi://{}", conn.peer)));
    let ctx = ctx_url(r);
    let mut out = Box::new(Stdout {
        reader: fcgi::Reader::default(),
        number: r.conn.number,
        ctx: ctx.clone(),
    });
    let limit = usize::try_from(conf.proxy_buffer_size).unwrap_or(usize::MAX);
    let mut head = BytesMut::new();
    let read = conf.proxy_read_timeout;
    let (cgi, used) = loop {
        let got = tokio::time::timeout(read, poll_fn(|cx| conn.h1.poll_fcgi(&mut out.reader, cx)));
        match got.await {
            Err(_) => return Err(unanswered(Kind::Timeout, timed_out(), READING)),
            Ok(Err(FcgiError::Invalid(e))) => {
                return Err(unanswered(Kind::InvalidHeader, e.to_string(), READING));
            }
            Ok(Err(FcgiError::Closed)) => {
                return Err(unanswered(
                    Kind::Closed,
                    "upstream prematurely closed connection".into(),
                    READING,
                ));
            }
            Ok(Ok(Event::Stderr(b))) => {
                log_stderr(r.conn.number, &b, READING, &ctx);
                let text = String::from_utf8_lossy(&b);
                if conf
                    .fastcgi_catch_stderr
                    .iter()
                    .any(|s| text.contains(s.as_str()))
                {
                    return Err(unanswered(
                        Kind::InvalidHeader,
                        "upstream sent invalid header".into(),
                        READING,
                    ));
                }
            }
            Ok(Ok(Event::End { .. })) => {
                // The application ended with no (complete) head.
                return Err(unanswered(
                    Kind::Closed,
                    "upstream prematurely closed FastCGI stdout".into(),
                    READING,
                ));
            }
            Ok(Ok(Event::Stdout(b))) => {
                head.extend_from_slice(&b);
                match fcgi::parse_head(&head) {
                    Ok(Some(done)) => break done,
                    Ok(None) if head.len() >= limit => {
                        return Err(unanswered(
                            Kind::InvalidHeader,
                            "upstream sent too big header".into(),
                            READING,
                        ));
                    }
                    Ok(None) => {}
                    Err(text) => return Err(unanswered(Kind::InvalidHeader, text, READING)),
                }
            }
        }
    };
    let rest = head.split_off(used).freeze();
    let mut headers = HeaderMap::new();
    for (name, value) in cgi.headers {
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) else {
            return Err(unanswered(
                Kind::InvalidHeader,
                "upstream sent invalid header".into(),
                READING,
            ));
        };
        headers.append(n, v);
    }
    // No protocol switch through FastCGI.
    if cgi.status == 101 {
        return Err(unanswered(
            Kind::InvalidHeader,
            "upstream sent invalid status \"101\"".into(),
            READING,
        ));
    }
    let status = StatusCode::from_u16(cgi.status).map_err(|_| {
        unanswered(
            Kind::InvalidHeader,
            "upstream sent invalid status".into(),
            READING,
        )
    })?;
    let reason = match cgi.reason {
        Some(r) => Bytes::from(r),
        None => Bytes::from_static(super::response::reason(cgi.status).unwrap_or("").as_bytes()),
    };
    let raw = crate::h1::head::Headers::from_map(&headers);
    let head = ResponseHead {
        status,
        reason,
        version: Version::HTTP_11,
        raw,
        len: used,
        mapped: Some(Box::new(Mapped {
            headers,
            ..Mapped::default()
        })),
    };
    Ok((head, out, rest))
}

#[cfg(test)]
mod tests {
    use super::http_name;

    #[test]
    fn header_names_as_nginx_makes_them() {
        assert_eq!(
            http_name(b"X-Forwarded-For").as_deref(),
            Some("HTTP_X_FORWARDED_FOR")
        );
        assert_eq!(http_name(b"host").as_deref(), Some("HTTP_HOST"));
        assert_eq!(http_name(b"a.b"), None);
        assert_eq!(http_name(b""), None);
    }
}
