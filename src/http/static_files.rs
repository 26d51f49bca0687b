//! Static files (`root`, `alias`, `index`, `types`, `default_type`): GET and
//! HEAD, a directory without its slash redirected, an index file for a
//! directory, 403/404 with nginx's error-log lines, `Last-Modified`, `ETag`,
//! 304 for `If-None-Match`/`If-Modified-Since`, byte ranges (`range`) and
//! `disable_symlinks` (`open_file`). Each file is opened once and served from
//! that descriptor; large bodies are streamed.

use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::future::Future;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use nix::errno::Errno;

use super::Reply;
use super::open_file::{self, OpenError};
use super::range::{self, Piece, Ranges, Span};
use super::response::{self, BoxError};
use super::vars::Req;
use crate::conf::gzip::GzipStatic;
use crate::conf::loc::Symlinks;
use crate::log::Level;

/// Files up to this size are read at once; larger ones are streamed.
const WHOLE: u64 = 256 * 1024;
const CHUNK: usize = 64 * 1024;

fn http_date(t: std::time::SystemTime) -> String {
    let dt: chrono::DateTime<chrono::Utc> = t.into();
    dt.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

fn not_found(r: &Req, what: &str, e: &std::io::Error) -> Reply {
    // A link refused by disable_symlinks is ELOOP (EMLINK on some systems).
    let refused = e
        .raw_os_error()
        .map(Errno::from_raw)
        .is_some_and(|n| matches!(n, Errno::ELOOP | Errno::EMLINK));
    let code = if e.kind() == ErrorKind::PermissionDenied || refused {
        403
    } else {
        404
    };
    if code != 404 || r.conf.log_not_found {
        crate::log_conn!(
            Level::Error,
            r.conn.number,
            "{} ({}){}",
            what,
            crate::log::errno_text(e),
            r.log_context(None)
        );
    }
    Reply::Status(code)
}

/// Opens a file the request maps to under `disable_symlinks` (its `from=`
/// worked out for this path), with what `fstat` says of it.
pub(super) fn open(r: &Req, path: &Path) -> Result<(File, Metadata), OpenError> {
    let ds = &r.conf.disable_symlinks;
    let (mode, from) = match &ds.from {
        Some(t) if ds.mode != Symlinks::Off => {
            open_file::checked_part(ds.mode, path.as_os_str().as_bytes(), r.eval(t).as_bytes())
        }
        _ => (ds.mode, 0),
    };
    let f = open_file::open_file(path, mode, from)?;
    let m = f.metadata().map_err(|err| OpenError {
        err,
        call: "fstat()",
    })?;
    Ok((f, m))
}

fn open_failed(r: &Req, path: &Path, e: &OpenError) -> Reply {
    not_found(
        r,
        &format!("{} \"{}\" failed", e.call, path.display()),
        &e.err,
    )
}

pub async fn serve(r: &Req) -> Reply {
    // POST is looked up as GET is (a missing file is 404, a directory
    // without its slash a redirect) and refused where a file would be
    // sent, as nginx's static handler does.
    if r.method != Method::GET && r.method != Method::HEAD && r.method != Method::POST {
        return Reply::Status(405);
    }
    let path = r.filename();
    if r.uri.ends_with('/') {
        for index in &r.conf.index {
            let p = path.join(index);
            match open(r, &p) {
                Ok((f, m)) if m.is_file() => return send_file(r, &p, index, f, m, false).await,
                Ok(_) => continue,
                Err(e) if e.err.kind() == ErrorKind::NotFound => continue,
                Err(e) => return open_failed(r, &p, &e),
            }
        }
        return match open(r, &path) {
            Ok((_, m)) if m.is_dir() && r.conf.autoindex && r.method != Method::POST => {
                super::autoindex::serve(r, &path)
            }
            Ok((_, m)) if m.is_dir() => {
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
                not_found(r, &format!("\"{}\" is not found", first.display()), &e.err)
            }
        };
    }
    let mut vary = false;
    if r.conf.gzip_static != GzipStatic::Off {
        match gzip_static(r, &path).await {
            Static::Served(reply) => return reply,
            Static::Declined { vary: v } => vary = v,
        }
    }
    let mut reply = plain(r, &path).await;
    if let (true, Reply::Full(resp)) = (vary, &mut reply) {
        resp.extensions_mut().insert(super::gzip::Vary);
    }
    reply
}

/// What `gzip_static` made of a request.
enum Static {
    Served(Reply),
    /// The plain file is served; with `vary`, `gzip_vary` applies to it.
    Declined {
        vary: bool,
    },
}

/// `gzip_static`: the file's `.gz` beside it, sent with `Content-Encoding:
/// gzip` to a client that takes gzip (`on`) or to any (`always`), as
/// nginx's gzip_static handler does.
async fn gzip_static(r: &Req, path: &Path) -> Static {
    let on = r.conf.gzip_static == GzipStatic::On;
    let ok = !on || super::gzip::client_ok(r, &http::HeaderMap::new());
    if !r.conf.gzip_vary && !ok {
        return Static::Declined { vary: false };
    }
    let mut gz = path.as_os_str().to_owned();
    gz.push(".gz");
    let gz = std::path::PathBuf::from(gz);
    let (f, m) = match open(r, &gz) {
        Ok(x) => x,
        Err(e) => {
            let errno = e.err.raw_os_error().map(Errno::from_raw);
            if !matches!(
                errno,
                Some(Errno::ENOENT | Errno::ENOTDIR | Errno::ENAMETOOLONG)
            ) {
                let level = if matches!(errno, Some(Errno::EACCES | Errno::ELOOP | Errno::EMLINK)) {
                    Level::Error
                } else {
                    Level::Crit
                };
                crate::log_conn!(
                    level,
                    r.conn.number,
                    "{} \"{}\" failed ({}){}",
                    e.call,
                    gz.display(),
                    crate::log::errno_text(&e.err),
                    r.log_context(None)
                );
            }
            return Static::Declined { vary: false };
        }
    };
    if !ok {
        return Static::Declined { vary: on };
    }
    if m.is_dir() {
        return Static::Declined { vary: on };
    }
    if !m.is_file() {
        crate::log_conn!(
            Level::Crit,
            r.conn.number,
            "\"{}\" is not a regular file{}",
            gz.display(),
            r.log_context(None)
        );
        return Static::Served(Reply::Status(404));
    }
    let mut reply = send_file(r, path, &r.uri, f, m, true).await;
    if let Reply::Full(resp) = &mut reply {
        resp.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        if on {
            resp.extensions_mut().insert(super::gzip::Vary);
        }
    }
    Static::Served(reply)
}

/// A URI without the final slash: its file, or a directory's redirect.
async fn plain(r: &Req, path: &Path) -> Reply {
    let path = path.to_path_buf();
    match open(r, &path) {
        Err(e) => open_failed(r, &path, &e),
        Ok((_, m)) if m.is_dir() => {
            // A directory without its slash: redirect, as nginx does, the
            // path escaped (a space, `#`, `?`, a Latin-1 byte: `%E9`).
            let mut path = String::with_capacity(r.uri.len() + 8);
            super::uri::escape_into(&r.uri, super::uri::Escape::Path, &mut path);
            path.push('/');
            let mut loc = super::script::absolute(r, &path);
            if let Some(a) = &r.args {
                loc.push('?');
                loc.push_str(a);
            }
            Reply::Full(response::redirect(301, &loc, r.conf.server_tokens))
        }
        Ok((_, m)) if !m.is_file() => {
            crate::log_conn!(
                Level::Crit,
                r.conn.number,
                "\"{}\" is not a regular file{}",
                path.display(),
                r.log_context(None)
            );
            Reply::Status(404)
        }
        Ok((f, m)) => send_file(r, &path, &r.uri, f, m, false).await,
    }
}

/// Each multipart response gets the next number as its boundary, as nginx
/// takes its temp-file counter (nginx shares it between workers; sluice
/// counts per worker).
static BOUNDARY: AtomicU64 = AtomicU64::new(0);

/// The extension nginx takes a type from: after the last `.` of the last
/// segment, not one that starts it (`/.profile` has none).
fn exten(name: &str) -> Option<&str> {
    let last = &name[name.rfind('/').map_or(0, |i| i + 1)..];
    match last.rfind('.') {
        Some(i) if i > 0 => Some(&last[i + 1..]),
        _ => None,
    }
}

/// Sends an open file; `path` names it in errors, `uri` its type (the
/// URI's extension, as nginx's, whatever file an `alias` names; an index
/// file's own). `gz`: it is a `gzip_static` `.gz`, sent as it is.
async fn send_file(r: &Req, path: &Path, uri: &str, file: File, meta: Metadata, gz: bool) -> Reply {
    if r.method == Method::POST {
        return Reply::Status(405);
    }
    let tokens = r.conf.server_tokens;
    let size = meta.len();
    let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
    let secs = mtime
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // `etag off`: none sent, and If-None-Match and If-Range's tags match
    // nothing.
    let etag = if r.conf.etag {
        format!("\"{secs:x}-{size:x}\"")
    } else {
        String::new()
    };
    let last_modified = http_date(mtime);
    // nginx's not-modified filter, on the 200 this would be (before a
    // range makes it a 206).
    let not_modified = match super::conditional::verdict(
        r,
        Some(secs),
        Some(etag.as_str()).filter(|e| !e.is_empty()),
    ) {
        super::conditional::Verdict::Failed => return Reply::Status(412),
        super::conditional::Verdict::NotModified => true,
        super::conditional::Verdict::Send => false,
    };
    let ctype = exten(uri)
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
        // A `gzip_static` file serves no ranges and says so (nginx's
        // gzip_static handler does not allow them).
        let mut ranges = if gz {
            None
        } else {
            ranges(r, size, &etag, secs)
        };
        if !gz && r.conf.gzip && matches!(ranges, Some(Ranges::Parts(_) | Ranges::Unsatisfiable)) {
            // nginx's range filter gives way when gzip compresses the 200.
            let mut h = http::HeaderMap::new();
            for (n, v) in [
                (header::LAST_MODIFIED, &last_modified),
                (header::ETAG, &etag),
            ] {
                if let Ok(v) = HeaderValue::from_str(v) {
                    h.insert(n, v);
                }
            }
            if super::gzip::would_compress(r, &ctype, size, &h) {
                ranges = Some(Ranges::Whole);
            }
        }
        // Nor does it serve ranges of a body sub_filter rewrites (its
        // length is unknown by then).
        if matches!(ranges, Some(Ranges::Parts(_) | Ranges::Unsatisfiable))
            && size > 0
            && !r.conf.sub_filter.is_empty()
            && r.conf.sub_filter_types.matches(&ctype)
        {
            ranges = Some(Ranges::Whole);
        }
        let (code, content_type, pieces, content_range) = match &ranges {
            Some(Ranges::Unsatisfiable) => {
                let mut resp = response::status_page(416, tokens);
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    resp.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                return Reply::Full(resp);
            }
            Some(Ranges::Parts(spans)) if spans.len() == 1 => (
                206,
                ctype,
                vec![Piece::File(spans[0])],
                Some(format!(
                    "bytes {}-{}/{size}",
                    spans[0].start,
                    spans[0].end - 1
                )),
            ),
            Some(Ranges::Parts(spans)) => {
                let boundary = BOUNDARY.fetch_add(1, Ordering::Relaxed);
                let (ct, pieces) = range::multipart(spans, size, &ctype, boundary);
                (206, ct, pieces, None)
            }
            _ => (
                200,
                ctype,
                vec![Piece::File(Span {
                    start: 0,
                    end: size,
                })],
                None,
            ),
        };
        let len: u64 = pieces.iter().map(Piece::len).sum();
        let body = if r.method == Method::HEAD {
            response::full(Bytes::new())
        } else {
            match body(file, pieces) {
                Ok(b) => b,
                Err(e) => {
                    return not_found(r, &format!("pread() \"{}\" failed", path.display()), &e);
                }
            }
        };
        let ct = (!content_type.is_empty()).then_some(content_type.as_str());
        let mut resp = response::build(code, ct, Bytes::new(), tokens);
        *resp.body_mut() = body;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if code == 200 && ranges.is_some() {
            h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        }
        if let Some(v) = content_range.and_then(|v| HeaderValue::from_str(&v).ok()) {
            h.insert(header::CONTENT_RANGE, v);
        }
        resp
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    if r.conf.etag {
        if let Ok(v) = HeaderValue::from_str(&etag) {
            h.insert(header::ETAG, v);
        }
    }
    Reply::Full(resp)
}

/// What nginx's range filter makes of the request: None when ranges are
/// off (`max_ranges 0`, HTTP/0.9: no `Accept-Ranges` either), else the
/// `Range` header's parts, or the whole file when `If-Range` names another
/// version of it.
fn ranges(r: &Req, size: u64, etag: &str, mtime: u64) -> Option<Ranges> {
    if r.conf.max_ranges == 0 || r.version == Version::HTTP_09 {
        return None;
    }
    let Some(range) = r.headers.get(header::RANGE) else {
        return Some(Ranges::Whole);
    };
    // An `add_header` Last-Modified or ETag replaces the file's before
    // nginx's range filter compares `If-Range` with it.
    let mut etag = std::borrow::Cow::Borrowed(etag);
    let mut mtime = i64::try_from(mtime).unwrap_or(-1);
    for h in &r.conf.add_header {
        if h.name.eq_ignore_ascii_case("last-modified") {
            mtime = range::http_time(&r.eval(&h.value)).unwrap_or(-1);
        } else if h.name.eq_ignore_ascii_case("etag") {
            etag = std::borrow::Cow::Owned(r.eval(&h.value));
        }
    }
    let current = r
        .headers
        .get(header::IF_RANGE)
        .is_none_or(|v| range::if_range_matches(v.as_bytes(), &etag, mtime));
    if !current {
        return Some(Ranges::Whole);
    }
    Some(range::parse(range.as_bytes(), size, r.conf.max_ranges))
}

/// The body: read at once when its file bytes are few, else streamed.
fn body(file: File, pieces: Vec<Piece>) -> std::io::Result<response::Body> {
    let from_file: u64 = pieces
        .iter()
        .filter(|p| matches!(p, Piece::File(_)))
        .map(Piece::len)
        .sum();
    if from_file > WHOLE {
        return Ok(PiecesBody::new(file, pieces).boxed());
    }
    let total: u64 = pieces.iter().map(Piece::len).sum();
    let mut buf = Vec::with_capacity(total as usize);
    for p in pieces {
        match p {
            Piece::Text(t) => buf.extend_from_slice(&t),
            Piece::File(s) => {
                let at = buf.len();
                buf.resize(at + s.len() as usize, 0);
                file.read_exact_at(&mut buf[at..], s.start)?;
            }
        }
    }
    Ok(response::full(Bytes::from(buf)))
}

/// A body streamed from pieces of text and spans of an open file, each
/// span read in chunks off the worker's thread.
struct PiecesBody {
    file: Arc<File>,
    pieces: VecDeque<Piece>,
    left: u64,
    reading: Option<tokio::task::JoinHandle<std::io::Result<Vec<u8>>>>,
}

impl PiecesBody {
    fn new(file: File, pieces: Vec<Piece>) -> Self {
        let left = pieces.iter().map(Piece::len).sum();
        PiecesBody {
            file: Arc::new(file),
            pieces: pieces.into(),
            left,
            reading: None,
        }
    }
}

impl HttpBody for PiecesBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if let Some(h) = self.reading.as_mut() {
                let read = match Pin::new(h).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => r,
                };
                self.reading = None;
                let buf = match read {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
                    Err(e) => return Poll::Ready(Some(Err(Box::new(e)))),
                };
                if buf.is_empty() {
                    // The file shrank under us: end here rather than hang.
                    self.left = 0;
                    self.pieces.clear();
                    return Poll::Ready(Some(Err("file truncated while sending".into())));
                }
                let n = buf.len() as u64;
                self.left -= n;
                if let Some(Piece::File(s)) = self.pieces.front_mut() {
                    s.start += n;
                    if s.is_empty() {
                        self.pieces.pop_front();
                    }
                }
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))));
            }
            match self.pieces.pop_front() {
                None => return Poll::Ready(None),
                Some(Piece::Text(t)) => {
                    self.left -= t.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(t))));
                }
                Some(Piece::File(s)) if s.is_empty() => continue,
                Some(Piece::File(s)) => {
                    let file = self.file.clone();
                    let want = s.len().min(CHUNK as u64) as usize;
                    self.pieces.push_front(Piece::File(s));
                    self.reading = Some(tokio::task::spawn_blocking(move || {
                        let mut buf = vec![0; want];
                        let n = file.read_at(&mut buf, s.start)?;
                        buf.truncate(n);
                        Ok(buf)
                    }));
                }
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
