//! Static files (`root`, `alias`, `index`, `types`, `default_type`): GET and
//! HEAD, a directory without its slash redirected, an index file for a
//! directory, 403/404 with nginx's error-log lines, `Last-Modified`, `ETag`,
//! and 304 for `If-None-Match`/`If-Modified-Since`. Large files are streamed.

use std::io::ErrorKind;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::UNIX_EPOCH;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use tokio::io::{AsyncRead, ReadBuf};

use super::Reply;
use super::response::{self, BoxError};
use super::vars::Req;
use crate::log::Level;

/// Files up to this size are read at once; larger ones are streamed.
const WHOLE: u64 = 256 * 1024;
const CHUNK: usize = 64 * 1024;

fn http_date(t: std::time::SystemTime) -> String {
    let dt: chrono::DateTime<chrono::Utc> = t.into();
    dt.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn not_found(r: &Req, what: &str, e: &std::io::Error) -> Reply {
    let code = if e.kind() == ErrorKind::PermissionDenied {
        403
    } else {
        404
    };
    crate::log_conn!(
        Level::Error,
        r.conn.number,
        "{} ({}){}",
        what,
        crate::conf::tree::errno_text(e),
        r.log_context(None)
    );
    Reply::Status(code)
}

pub async fn serve(r: &Req) -> Reply {
    if r.method != Method::GET && r.method != Method::HEAD {
        return Reply::Status(405);
    }
    let path = r.filename();
    if r.uri.ends_with('/') {
        for index in &r.conf.index {
            let p = path.join(index);
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => return send_file(r, &p, m).await,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return not_found(r, &format!("open() \"{}\" failed", p.display()), &e),
            }
        }
        return match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => {
                crate::log_conn!(
                    Level::Error,
                    r.conn.number,
                    "directory index of \"{}\" is forbidden{}",
                    path.display(),
                    r.log_context(None)
                );
                Reply::Status(403)
            }
            Ok(_) => Reply::Status(404),
            Err(e) => {
                let first = r
                    .conf
                    .index
                    .first()
                    .map(|i| path.join(i))
                    .unwrap_or(path.clone());
                not_found(r, &format!("\"{}\" is not found", first.display()), &e)
            }
        };
    }
    match std::fs::metadata(&path) {
        Err(e) => not_found(r, &format!("open() \"{}\" failed", path.display()), &e),
        Ok(m) if m.is_dir() => {
            // A directory without its slash: redirect, as nginx does.
            let port = r.conn.local.map(|a| a.port()).unwrap_or(80);
            let host = if port == 80 {
                r.host.clone()
            } else {
                format!("{}:{port}", r.host)
            };
            let mut loc = format!("http://{host}{}/", r.uri);
            if let Some(a) = &r.args {
                loc.push('?');
                loc.push_str(a);
            }
            Reply::Full(response::redirect(301, &loc, r.conf.server_tokens))
        }
        Ok(m) => send_file(r, &path, m).await,
    }
}

async fn send_file(r: &Req, path: &Path, meta: std::fs::Metadata) -> Reply {
    let tokens = r.conf.server_tokens;
    let size = meta.len();
    let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
    let secs = mtime
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let etag = format!("\"{secs:x}-{size:x}\"");
    let last_modified = http_date(mtime);
    let not_modified = match r
        .headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
        Some(inm) => inm.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t == etag || t.strip_prefix("W/") == Some(etag.as_str())
        }),
        None => r
            .headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ims| ims == last_modified),
    };
    let ctype = path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(|e| r.conf.types.get(&e.to_ascii_lowercase()))
        .cloned()
        .unwrap_or_else(|| r.conf.default_type.clone());
    let mut resp = if not_modified {
        let mut resp = Response::new(response::full(Bytes::new()));
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp.headers_mut()
            .insert(header::SERVER, response::server_header(tokens));
        resp
    } else {
        // One byte range, as nginx serves it; If-Range must name this file.
        let if_range_ok = r
            .headers
            .get(header::IF_RANGE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v == etag || v == last_modified);
        let range = match r.headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
            Some(spec) if if_range_ok => match parse_range(spec, size) {
                Range::Whole => None,
                Range::Part(a, b) => Some((a, b)),
                Range::Unsatisfiable => {
                    let mut resp = response::status_page(416, tokens);
                    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                        resp.headers_mut().insert(header::CONTENT_RANGE, v);
                    }
                    return Reply::Full(resp);
                }
            },
            _ => None,
        };
        let (start, len) = match range {
            Some((a, b)) => (a, b - a + 1),
            None => (0, size),
        };
        let body = if r.method == Method::HEAD {
            response::full(Bytes::new())
        } else if len <= WHOLE {
            match read_part(path, start, len) {
                Ok(b) => response::full(Bytes::from(b)),
                Err(e) => {
                    return not_found(r, &format!("open() \"{}\" failed", path.display()), &e);
                }
            }
        } else {
            match tokio::fs::File::open(path).await {
                Ok(mut f) => {
                    use tokio::io::AsyncSeekExt;
                    if start > 0 {
                        if let Err(e) = f.seek(std::io::SeekFrom::Start(start)).await {
                            return not_found(
                                r,
                                &format!("lseek() \"{}\" failed", path.display()),
                                &e,
                            );
                        }
                    }
                    FileBody { file: f, left: len }.boxed()
                }
                Err(e) => {
                    return not_found(r, &format!("open() \"{}\" failed", path.display()), &e);
                }
            }
        };
        let code = if range.is_some() { 206 } else { 200 };
        let mut resp = response::build(code, Some(&ctype), Bytes::new(), tokens);
        *resp.body_mut() = body;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Some((a, b)) = range {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {a}-{b}/{size}")) {
                h.insert(header::CONTENT_RANGE, v);
            }
        }
        resp
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    Reply::Full(resp)
}

enum Range {
    Whole,
    /// First and last byte, inclusive.
    Part(u64, u64),
    Unsatisfiable,
}

/// `bytes=A-B`, `bytes=A-` or `bytes=-N`. Several ranges, or a syntax sluice
/// does not take, mean the whole file (a server may ignore Range).
fn parse_range(spec: &str, size: u64) -> Range {
    let Some(set) = spec.trim().strip_prefix("bytes=") else {
        return Range::Whole;
    };
    if set.contains(',') {
        return Range::Whole;
    }
    let Some((a, b)) = set.trim().split_once('-') else {
        return Range::Whole;
    };
    let num = |s: &str| s.trim().parse::<u64>().ok();
    match (a.trim().is_empty(), num(a), num(b)) {
        (true, _, Some(n)) if n > 0 && size > 0 => Range::Part(size.saturating_sub(n), size - 1),
        (true, _, _) => Range::Unsatisfiable,
        (false, Some(a), _) if a >= size => Range::Unsatisfiable,
        (false, Some(a), None) if b.trim().is_empty() => Range::Part(a, size - 1),
        (false, Some(a), Some(b)) if b >= a => Range::Part(a, b.min(size - 1)),
        _ => Range::Whole,
    }
}

/// Reads `len` bytes of a file from `start`.
fn read_part(path: &Path, start: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(path)?;
    f.seek(std::io::SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity(len as usize);
    f.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

/// A file streamed in chunks.
struct FileBody {
    file: tokio::fs::File,
    left: u64,
}

impl HttpBody for FileBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let want = (self.left as usize).min(CHUNK);
        let mut buf = BytesMut::zeroed(want);
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut self.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    // The file shrank under us: end here rather than hang.
                    self.left = 0;
                    return Poll::Ready(Some(Err("file truncated while sending".into())));
                }
                buf.truncate(n);
                self.left -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(buf.freeze()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let part = |s: &str, n: u64| match parse_range(s, n) {
            Range::Part(a, b) => format!("{a}-{b}"),
            Range::Whole => "whole".into(),
            Range::Unsatisfiable => "416".into(),
        };
        assert_eq!(part("bytes=0-4", 10), "0-4");
        assert_eq!(part("bytes=5-", 10), "5-9");
        assert_eq!(part("bytes=-3", 10), "7-9");
        assert_eq!(part("bytes=-30", 10), "0-9");
        assert_eq!(part("bytes=8-100", 10), "8-9");
        assert_eq!(part("bytes=10-", 10), "416");
        assert_eq!(part("bytes=0-1,3-4", 10), "whole");
        assert_eq!(part("bytes=5-2", 10), "whole");
        assert_eq!(part("items=1-2", 10), "whole");
    }
}
