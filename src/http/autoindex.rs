//! `autoindex`: the listing of a directory that has no index file, in
//! nginx's HTML layout (names cut at 50 bytes with `..>`, dates, sizes),
//! or as XML, JSON or JSONP. Hidden (dot) files are left out; directories
//! come first, then names in byte order. Called by `static_files` for a
//! URI ending in `/` once no index file was found.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use chrono::{DateTime, Datelike, Timelike, Utc};
use http::Method;
use nix::errno::Errno;

use super::Reply;
use super::response;
use super::vars::Req;
use crate::conf::autoindex::Format;
use crate::log::Level;

/// Where nginx cuts a name in the HTML listing.
const NAME_LEN: usize = 50;

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub dir: bool,
    pub file: bool,
    /// Seconds since the epoch.
    pub mtime: i64,
    pub size: u64,
}

/// Lists the directory `path` (the request's file name, with its slash).
pub fn serve(r: &Req, path: &Path) -> Reply {
    let callback = if r.conf.autoindex_format == Format::Jsonp {
        match jsonp_callback(r) {
            Ok(c) => c,
            Err(()) => return Reply::Status(400),
        }
    } else {
        None
    };
    // nginx names the directory without its final slash.
    let bytes = path.as_os_str().as_bytes();
    let trimmed = if bytes.len() > 1 && bytes.ends_with(b"/") {
        &bytes[..bytes.len() - 1]
    } else {
        bytes
    };
    let dir = Path::new(std::ffi::OsStr::from_bytes(trimmed));
    let entries = match read(r, dir) {
        Ok(e) => e,
        Err(code) => return Reply::Status(code),
    };
    let (ctype, body) = match (r.conf.autoindex_format, callback) {
        (Format::Html, _) => {
            let offset = if r.conf.autoindex_localtime {
                i64::from(chrono::Local::now().offset().local_minus_utc())
            } else {
                0
            };
            (
                "text/html",
                html(&r.uri, &entries, r.conf.autoindex_exact_size, offset),
            )
        }
        (Format::Xml, _) => ("text/xml; charset=utf-8", xml(&entries)),
        (Format::Jsonp, Some(cb)) => ("application/javascript", json(&entries, Some(&cb))),
        _ => ("application/json", json(&entries, None)),
    };
    let body = if r.method == Method::HEAD {
        Vec::new()
    } else {
        body
    };
    let mut resp = response::build(200, Some(ctype), Bytes::from(body), r.conf.server_tokens);
    // The length is the body's (as the connection sets it); a HEAD's
    // answer has none, as nginx's chunked listing has none.
    resp.headers_mut().remove(http::header::CONTENT_LENGTH);
    Reply::Full(resp)
}

/// The `callback` argument of a JSONP listing: None without one; Err
/// (400, logged) when it is longer than 128 or has characters other than
/// letters, digits, `_` and `.`.
fn jsonp_callback(r: &Req) -> Result<Option<String>, ()> {
    let Some(cb) = r.arg("callback").filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    let why = if cb.len() > 128 {
        "too long"
    } else if cb
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return Ok(Some(cb));
    } else {
        "invalid"
    };
    crate::log_conn!(
        Level::Info,
        r.conn.number,
        "client sent {} callback name: \"{}\"{}",
        why,
        cb,
        r.log_context(None)
    );
    Err(())
}

fn read(r: &Req, dir: &Path) -> Result<Vec<Entry>, u16> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            let errno = e.raw_os_error().map(Errno::from_raw);
            let (level, code) = match errno {
                Some(Errno::ENOENT | Errno::ENOTDIR | Errno::ENAMETOOLONG) => (Level::Error, 404),
                Some(Errno::EACCES) => (Level::Error, 403),
                _ => (Level::Crit, 500),
            };
            crate::log_conn!(
                level,
                r.conn.number,
                "opendir() \"{}\" failed ({}){}",
                dir.display(),
                crate::log::errno_text(&e),
                r.log_context(None)
            );
            return Err(code);
        }
    };
    let mut out = Vec::new();
    for de in rd {
        let de = match de {
            Ok(de) => de,
            Err(e) => {
                crate::log_conn!(
                    Level::Crit,
                    r.conn.number,
                    "readdir() \"{}\" failed ({}){}",
                    dir.display(),
                    crate::log::errno_text(&e),
                    r.log_context(None)
                );
                return Err(500);
            }
        };
        let name: OsString = de.file_name();
        if name.as_bytes().first() == Some(&b'.') {
            continue;
        }
        let full = de.path();
        // As nginx: what a link points to, or the link itself when it
        // leads nowhere.
        let meta = match std::fs::metadata(&full) {
            Ok(m) => m,
            Err(e)
                if e.kind() == ErrorKind::NotFound
                    || e.raw_os_error() == Some(Errno::ELOOP as i32) =>
            {
                match std::fs::symlink_metadata(&full) {
                    Ok(m) => m,
                    Err(e) => {
                        crate::log_conn!(
                            Level::Crit,
                            r.conn.number,
                            "lstat() \"{}\" failed ({}){}",
                            full.display(),
                            crate::log::errno_text(&e),
                            r.log_context(None)
                        );
                        return Err(500);
                    }
                }
            }
            Err(e) => {
                crate::log_conn!(
                    Level::Crit,
                    r.conn.number,
                    "stat() \"{}\" failed ({}){}",
                    full.display(),
                    crate::log::errno_text(&e),
                    r.log_context(None)
                );
                if e.kind() == ErrorKind::PermissionDenied {
                    continue;
                }
                return Err(500);
            }
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        out.push(Entry {
            name: name.as_bytes().to_vec(),
            dir: meta.is_dir(),
            file: meta.is_file(),
            mtime,
            size: meta.len(),
        });
    }
    sort(&mut out);
    Ok(out)
}

/// Directories first, then by name, byte by byte.
pub fn sort(entries: &mut [Entry]) {
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
}

fn escape_html(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            _ => out.push(b),
        }
    }
}

/// nginx's URI-component escaping: all but letters, digits, `-._~`.
fn escape_component(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

fn escape_json(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
}

fn utc(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(t, 0).unwrap_or_default()
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// nginx's size column without `autoindex_exact_size`: rounded K, M, G.
fn human_size(n: u64) -> String {
    const K: u64 = 1024;
    let (size, scale) = if n > K * K * K - 1 {
        (
            n / (K * K * K) + u64::from(n % (K * K * K) > K * K * K / 2 - 1),
            'G',
        )
    } else if n > K * K - 1 {
        (n / (K * K) + u64::from(n % (K * K) > K * K / 2 - 1), 'M')
    } else if n > 9999 {
        (n / K + u64::from(n % K > 511), 'K')
    } else {
        return format!(" {n:6}");
    };
    format!("{size:6}{scale}")
}

/// The HTML listing; `offset`: seconds added to each time
/// (`autoindex_localtime`).
pub fn html(uri: &str, entries: &[Entry], exact: bool, offset: i64) -> Vec<u8> {
    let mut b = Vec::with_capacity(256 + entries.len() * 160);
    // The bytes the URI stands for (`octets`), as nginx writes them.
    let uri = crate::octets::bytes(uri);
    b.extend_from_slice(b"<html>\r\n<head><title>Index of ");
    escape_html(&uri, &mut b);
    b.extend_from_slice(b"</title></head>\r\n<body>\r\n<h1>Index of ");
    escape_html(&uri, &mut b);
    b.extend_from_slice(b"</h1><hr><pre><a href=\"../\">../</a>\r\n");
    for e in entries {
        b.extend_from_slice(b"<a href=\"");
        escape_component(&e.name, &mut b);
        if e.dir {
            b.push(b'/');
        }
        b.extend_from_slice(b"\">");
        let mut len = e.name.len();
        if len > NAME_LEN {
            escape_html(&e.name[..NAME_LEN - 3], &mut b);
            b.extend_from_slice(b"..&gt;</a>");
        } else {
            escape_html(&e.name, &mut b);
            if e.dir && len < NAME_LEN {
                b.push(b'/');
                len += 1;
            }
            b.extend_from_slice(b"</a>");
            b.resize(b.len() + (NAME_LEN - len), b' ');
        }
        let t = utc(e.mtime + offset);
        b.extend_from_slice(
            format!(
                " {:02}-{}-{} {:02}:{:02} ",
                t.day(),
                MONTHS[t.month0() as usize],
                t.year(),
                t.hour(),
                t.minute()
            )
            .as_bytes(),
        );
        let size = match (exact, e.dir) {
            (true, true) => format!("{:>19}", "-"),
            (true, false) => format!("{:19}", e.size),
            (false, true) => format!("{:>7}", "-"),
            (false, false) => human_size(e.size),
        };
        b.extend_from_slice(size.as_bytes());
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(b"</pre><hr></body>\r\n</html>\r\n");
    b
}

pub fn xml(entries: &[Entry]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"<?xml version=\"1.0\"?>\r\n<list>\r\n");
    for e in entries {
        let kind = if e.dir {
            "directory"
        } else if e.file {
            "file"
        } else {
            "other"
        };
        let t = utc(e.mtime).format("%Y-%m-%dT%H:%M:%SZ");
        b.extend_from_slice(format!("<{kind} mtime=\"{t}\"").as_bytes());
        if e.file {
            b.extend_from_slice(format!(" size=\"{}\"", e.size).as_bytes());
        }
        b.push(b'>');
        escape_html(&e.name, &mut b);
        b.extend_from_slice(format!("</{kind}>\r\n").as_bytes());
    }
    b.extend_from_slice(b"</list>\r\n");
    b
}

pub fn json(entries: &[Entry], callback: Option<&str>) -> Vec<u8> {
    let mut b = Vec::new();
    if let Some(cb) = callback {
        b.extend_from_slice(format!("/* callback */\r\n{cb}(").as_bytes());
    }
    b.push(b'[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        b.extend_from_slice(b"\r\n{ \"name\":\"");
        escape_json(&e.name, &mut b);
        let kind = if e.dir {
            "directory"
        } else if e.file {
            "file"
        } else {
            "other"
        };
        let t = utc(e.mtime).format("%a, %d %b %Y %H:%M:%S GMT");
        b.extend_from_slice(format!("\", \"type\":\"{kind}\", \"mtime\":\"{t}\"").as_bytes());
        if e.file {
            b.extend_from_slice(format!(", \"size\":{}", e.size).as_bytes());
        }
        b.extend_from_slice(b" }");
    }
    b.extend_from_slice(b"\r\n]");
    if callback.is_some() {
        b.extend_from_slice(b");");
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, dir: bool, size: u64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            dir,
            file: !dir,
            mtime: 1_764_558_147, // 01-Dec-2025 03:02:27
            size,
        }
    }

    #[test]
    fn sizes_as_nginx_rounds_them() {
        assert_eq!(human_size(0), "      0");
        assert_eq!(human_size(9999), "   9999");
        assert_eq!(human_size(12000), "    12K");
        assert_eq!(human_size(3_000_000), "     3M");
        assert_eq!(human_size(1_572_864), "     2M");
        assert_eq!(human_size(5 << 30), "     5G");
    }

    #[test]
    fn html_layout() {
        let mut v = vec![
            e("a.txt", false, 3),
            e("dir1", true, 0),
            e(&"l".repeat(60), false, 0),
            e(&"d".repeat(50), true, 0),
            e(&"w".repeat(49), true, 0),
            e("x<y>&\"z", false, 12000),
        ];
        sort(&mut v);
        let out = String::from_utf8(html("/s/", &v, true, 0)).unwrap();
        let lines: Vec<&str> = out.split("\r\n").collect();
        assert_eq!(lines[0], "<html>");
        assert_eq!(lines[1], "<head><title>Index of /s/</title></head>");
        assert_eq!(
            lines[3],
            "<h1>Index of /s/</h1><hr><pre><a href=\"../\">../</a>"
        );
        let d50 = "d".repeat(50);
        assert_eq!(
            lines[4],
            format!("<a href=\"{d50}/\">{d50}</a> 01-Dec-2025 03:02                   -")
        );
        assert_eq!(
            lines[5],
            format!(
                "<a href=\"dir1/\">dir1/</a>{} 01-Dec-2025 03:02                   -",
                " ".repeat(45)
            )
        );
        let w = "w".repeat(49);
        assert_eq!(
            lines[6],
            format!("<a href=\"{w}/\">{w}/</a> 01-Dec-2025 03:02                   -")
        );
        assert_eq!(
            lines[7],
            format!(
                "<a href=\"a.txt\">a.txt</a>{} 01-Dec-2025 03:02                   3",
                " ".repeat(45)
            )
        );
        assert_eq!(
            lines[8],
            format!(
                "<a href=\"{l60}\">{l47}..&gt;</a> 01-Dec-2025 03:02                   0",
                l60 = "l".repeat(60),
                l47 = "l".repeat(47)
            )
        );
        assert_eq!(
            lines[9],
            format!(
                "<a href=\"x%3Cy%3E%26%22z\">x&lt;y&gt;&amp;&quot;z</a>{} 01-Dec-2025 03:02               12000",
                " ".repeat(43)
            )
        );
        assert_eq!(lines[10], "</pre><hr></body>");
        let out = String::from_utf8(html("/s/", &v[..2], false, 3600)).unwrap();
        assert!(out.contains("</a> 01-Dec-2025 04:02       -\r\n"), "{out}");
    }

    #[test]
    fn xml_and_json() {
        let v = vec![e("d", true, 0), e("a\"b", false, 7)];
        assert_eq!(
            String::from_utf8(xml(&v)).unwrap(),
            "<?xml version=\"1.0\"?>\r\n<list>\r\n\
             <directory mtime=\"2025-12-01T03:02:27Z\">d</directory>\r\n\
             <file mtime=\"2025-12-01T03:02:27Z\" size=\"7\">a&quot;b</file>\r\n</list>\r\n"
        );
        assert_eq!(
            String::from_utf8(json(&v, Some("cb"))).unwrap(),
            "/* callback */\r\ncb([\r\n\
             { \"name\":\"d\", \"type\":\"directory\", \"mtime\":\"Mon, 01 Dec 2025 03:02:27 GMT\" },\r\n\
             { \"name\":\"a\\\"b\", \"type\":\"file\", \"mtime\":\"Mon, 01 Dec 2025 03:02:27 GMT\", \"size\":7 }\r\n]);"
        );
        assert_eq!(String::from_utf8(json(&[], None)).unwrap(), "[\r\n]");
    }
}
