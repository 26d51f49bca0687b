//! The FastCGI wire format (`fastcgi_pass`), sans I/O: the records sluice
//! writes (BEGIN_REQUEST as a RESPONDER, PARAMS name-value pairs, STDIN),
//! a reader that takes STDOUT, STDERR and END_REQUEST records out of
//! whatever bytes arrived (records split anywhere, padding skipped, hostile
//! lengths refused), and the CGI response head parser (`Status:`,
//! `Location:`). The HTTP handler (`http::fastcgi`) moves the bytes.

use bytes::{Buf, Bytes, BytesMut};

/// The protocol version sluice speaks (and accepts).
pub const VERSION: u8 = 1;
pub const BEGIN_REQUEST: u8 = 1;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;
const RESPONDER: u16 = 1;
const KEEP_CONN: u8 = 1;
/// Every request on a connection has this id: one request at a time, as
/// nginx (which never multiplexes).
pub const REQUEST_ID: u16 = 1;
/// The largest content one record carries (its length is 16 bits).
const MAX_CONTENT: usize = 0xffff;
/// What sluice puts in one STDIN record: 32 KiB, as nginx's buffers.
pub const STDIN_CHUNK: usize = 32 * 1024;

/// A record's 8-byte header.
fn header(kind: u8, len: usize, padding: u8) -> [u8; 8] {
    let [hi, lo] = (len as u16).to_be_bytes();
    let [ih, il] = REQUEST_ID.to_be_bytes();
    [VERSION, kind, ih, il, hi, lo, padding, 0]
}

/// Padding that makes content of `len` bytes end on 8 bytes, as nginx.
fn padding(len: usize) -> u8 {
    ((8 - len % 8) % 8) as u8
}

/// Appends one record (content at most 64 KiB - 1) with its padding.
fn record(out: &mut Vec<u8>, kind: u8, content: &[u8]) {
    let pad = padding(content.len());
    out.extend_from_slice(&header(kind, content.len(), pad));
    out.extend_from_slice(content);
    out.extend(std::iter::repeat_n(0u8, usize::from(pad)));
}

/// FCGI_BEGIN_REQUEST for a RESPONDER; `keep_conn`: FCGI_KEEP_CONN
/// (`fastcgi_keep_conn on`), else the application closes after the answer.
pub fn begin_request(out: &mut Vec<u8>, keep_conn: bool) {
    let [rh, rl] = RESPONDER.to_be_bytes();
    let flags = if keep_conn { KEEP_CONN } else { 0 };
    record(out, BEGIN_REQUEST, &[rh, rl, flags, 0, 0, 0, 0, 0]);
}

/// A name-value pair's length: one byte below 128, else four with the
/// top bit set. None: too long for the protocol (2^31 bytes or more).
fn pair_length(out: &mut Vec<u8>, n: usize) -> Option<()> {
    if n < 128 {
        out.push(n as u8);
    } else {
        let n = u32::try_from(n).ok().filter(|n| *n < 0x8000_0000)?;
        out.extend_from_slice(&(n | 0x8000_0000).to_be_bytes());
    }
    Some(())
}

/// FCGI_PARAMS records carrying the pairs (cut anywhere into records of at
/// most 64 KiB - 1, as the protocol allows), then the empty one that ends
/// them. A pair too long for the protocol is left out.
pub fn params<'a>(out: &mut Vec<u8>, pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) {
    let mut stream = Vec::new();
    for (name, value) in pairs {
        let start = stream.len();
        if pair_length(&mut stream, name.len())
            .and_then(|()| pair_length(&mut stream, value.len()))
            .is_none()
        {
            stream.truncate(start);
            continue;
        }
        stream.extend_from_slice(name);
        stream.extend_from_slice(value);
    }
    for c in stream.chunks(MAX_CONTENT) {
        record(out, PARAMS, c);
    }
    record(out, PARAMS, &[]);
}

/// FCGI_STDIN records for `data` (nothing for no data: the empty record
/// that ends the body is `stdin_end`).
pub fn stdin(out: &mut Vec<u8>, data: &[u8]) {
    for c in data.chunks(STDIN_CHUNK) {
        record(out, STDIN, c);
    }
}

/// The empty FCGI_STDIN record: the request body ends.
pub fn stdin_end(out: &mut Vec<u8>) {
    record(out, STDIN, &[]);
}

/// What the application sent, record by record.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    Stdout(Bytes),
    Stderr(Bytes),
    /// FCGI_END_REQUEST: the application's exit status and the protocol
    /// status (0: request complete).
    End {
        app_status: u32,
        protocol_status: u8,
    },
}

/// Why the application's bytes are not FastCGI: nginx's words for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    Version(u8),
    Type(u8),
    RequestId(u16),
    /// An END_REQUEST shorter than its 8 bytes.
    ShortEnd,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::Version(v) => {
                write!(f, "upstream sent unsupported FastCGI protocol version: {v}")
            }
            Invalid::Type(t) => write!(f, "upstream sent invalid FastCGI record type: {t}"),
            Invalid::RequestId(id) => {
                write!(f, "upstream sent unexpected FastCGI request id: {id}")
            }
            Invalid::ShortEnd => f.write_str("upstream sent invalid FastCGI end request record"),
        }
    }
}

/// Takes records out of the bytes read so far. Holds no bytes itself: a
/// record stays in the caller's buffer until it is whole (at most 8 +
/// 65535 + 255 bytes, so a hostile length cannot make it grow further).
#[derive(Debug, Default)]
pub struct Reader {
    /// END_REQUEST was seen: nothing more belongs to this request.
    pub ended: bool,
}

impl Reader {
    /// The next whole record in `buf` (taken out of it), Ok(None) when more
    /// bytes are needed. Empty STDOUT/STDERR records (the ends of those
    /// streams) and the management records a responder may send are
    /// skipped.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, Invalid> {
        loop {
            if self.ended || buf.len() < 8 {
                return Ok(None);
            }
            let (version, kind) = (buf[0], buf[1]);
            if version != VERSION {
                return Err(Invalid::Version(version));
            }
            let id = u16::from_be_bytes([buf[2], buf[3]]);
            let len = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
            let pad = usize::from(buf[6]);
            if !matches!(kind, STDOUT | STDERR | END_REQUEST) {
                return Err(Invalid::Type(kind));
            }
            if id != REQUEST_ID {
                return Err(Invalid::RequestId(id));
            }
            if buf.len() < 8 + len + pad {
                return Ok(None);
            }
            buf.advance(8);
            let content = buf.split_to(len).freeze();
            buf.advance(pad);
            match kind {
                STDOUT if !content.is_empty() => return Ok(Some(Event::Stdout(content))),
                STDERR if !content.is_empty() => return Ok(Some(Event::Stderr(content))),
                END_REQUEST => {
                    if content.len() < 8 {
                        return Err(Invalid::ShortEnd);
                    }
                    self.ended = true;
                    let app_status =
                        u32::from_be_bytes([content[0], content[1], content[2], content[3]]);
                    return Ok(Some(Event::End {
                        app_status,
                        protocol_status: content[4],
                    }));
                }
                _ => {}
            }
        }
    }
}

/// The CGI response head the application wrote on STDOUT.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CgiHead {
    /// From `Status:`; else 302 with a `Location:`, else 200 (nginx).
    pub status: u16,
    /// The reason phrase `Status:` gave, if any.
    pub reason: Option<String>,
    /// The other header lines, in order, names as written.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Parses the head at the start of `buf`: Ok(Some((head, length))) once
/// the empty line that ends it is there, Ok(None) when more is needed, Err
/// with nginx's words for a head that is not one.
pub fn parse_head(buf: &[u8]) -> Result<Option<(CgiHead, usize)>, String> {
    let mut head = CgiHead::default();
    let mut pos = 0;
    let mut status: Option<(u16, Option<String>)> = None;
    loop {
        let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let mut line = &buf[pos..pos + nl];
        pos += nl + 1;
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err("upstream sent invalid header".into());
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.is_empty()
            || !name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("upstream sent invalid header".into());
        }
        let name = String::from_utf8_lossy(name).into_owned();
        if name.eq_ignore_ascii_case("status") {
            let text = String::from_utf8_lossy(value);
            let code = text
                .get(..3)
                .and_then(|c| c.parse::<u16>().ok())
                .filter(|c| (100..=999).contains(c) && text.len() >= 3);
            let Some(code) = code else {
                return Err(format!("upstream sent invalid status \"{text}\""));
            };
            let reason = text[3..].trim();
            status = Some((code, (!reason.is_empty()).then(|| reason.to_string())));
            continue;
        }
        head.headers.push((name, value.to_vec()));
    }
    let location = head
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("location"));
    (head.status, head.reason) = match status {
        Some((c, r)) => (c, r),
        None if location => (302, None),
        None => (200, None),
    };
    Ok(Some((head, pos)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A record as an application writes it.
    fn rec(kind: u8, content: &[u8], pad: u8) -> Vec<u8> {
        let mut v = vec![1, kind, 0, 1];
        v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        v.extend_from_slice(&[pad, 0]);
        v.extend_from_slice(content);
        v.extend(std::iter::repeat_n(0, usize::from(pad)));
        v
    }

    fn end() -> Vec<u8> {
        rec(END_REQUEST, &[0, 0, 0, 7, 0, 0, 0, 0], 0)
    }

    fn read_all(bytes: &[u8], step: usize) -> Result<Vec<Event>, Invalid> {
        let mut r = Reader::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in bytes.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            while let Some(e) = r.next(&mut buf)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    #[test]
    fn begin_params_stdin_are_as_nginx_writes_them() {
        let mut out = Vec::new();
        begin_request(&mut out, true);
        assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
        let mut p = Vec::new();
        let long = [b'v'; 200];
        params(&mut p, [(&b"A"[..], &b"bc"[..]), (&b"LONG"[..], &long[..])]);
        // Content: 1+1+1+2 + 1+4+4+200 = 214, padded to 216, then the
        // empty record.
        assert_eq!(&p[..8], &[1, PARAMS, 0, 1, 0, 214, 2, 0]);
        assert_eq!(&p[8..13], &[1, 2, b'A', b'b', b'c']);
        assert_eq!(&p[13..18], &[4, 0x80, 0, 0, 200]);
        assert_eq!(p.len(), 8 + 216 + 8);
        assert_eq!(&p[8 + 216..], &[1, PARAMS, 0, 1, 0, 0, 0, 0]);
        let mut s = Vec::new();
        stdin(&mut s, &vec![b'x'; STDIN_CHUNK + 3]);
        stdin_end(&mut s);
        assert_eq!(&s[..8], &[1, STDIN, 0, 1, 0x80, 0, 0, 0]);
        let second = 8 + STDIN_CHUNK;
        assert_eq!(&s[second..second + 8], &[1, STDIN, 0, 1, 0, 3, 5, 0]);
        assert_eq!(s.len(), second + 16 + 8);
    }

    #[test]
    fn huge_params_are_cut_into_records() {
        let mut p = Vec::new();
        let big = vec![b'x'; 70_000];
        params(&mut p, [(&b"BIG"[..], &big[..])]);
        assert_eq!(&p[..8], &[1, PARAMS, 0, 1, 0xff, 0xff, 1, 0]);
        let second = 8 + 0xffff + 1;
        let rest = 1 + 4 + 3 + 70_000 - 0xffff;
        assert_eq!(&p[second + 4..second + 6], &(rest as u16).to_be_bytes());
    }

    #[test]
    fn reader_takes_records_split_anywhere() {
        let mut bytes = rec(STDOUT, b"Status: 404\r\n\r\nno", 6);
        bytes.extend(rec(STDERR, b"oops", 4));
        bytes.extend(rec(STDOUT, b"", 0));
        bytes.extend(end());
        bytes.extend(rec(STDOUT, b"after the end", 0));
        for step in 1..bytes.len() {
            let got = read_all(&bytes, step).expect("valid");
            assert_eq!(
                got,
                vec![
                    Event::Stdout(Bytes::from_static(b"Status: 404\r\n\r\nno")),
                    Event::Stderr(Bytes::from_static(b"oops")),
                    Event::End {
                        app_status: 7,
                        protocol_status: 0
                    },
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn reader_refuses_what_is_not_fastcgi() {
        let mut v2 = rec(STDOUT, b"x", 0);
        v2[0] = 2;
        assert_eq!(read_all(&v2, 100), Err(Invalid::Version(2)));
        assert_eq!(
            read_all(b"HTTP/1.1 200 OK\r\n", 100),
            Err(Invalid::Version(b'H'))
        );
        assert_eq!(read_all(&rec(9, b"", 0), 100), Err(Invalid::Type(9)));
        let mut other = rec(STDOUT, b"x", 0);
        other[3] = 2;
        assert_eq!(read_all(&other, 100), Err(Invalid::RequestId(2)));
        assert_eq!(
            read_all(&rec(END_REQUEST, b"1234", 0), 100),
            Err(Invalid::ShortEnd)
        );
        assert_eq!(
            Invalid::Version(2).to_string(),
            "upstream sent unsupported FastCGI protocol version: 2"
        );
    }

    #[test]
    fn cgi_heads() {
        let (h, n) = parse_head(b"Status: 404 Not Here\r\nX-A: 1\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.reason.as_deref(), n),
            (404, Some("Not Here"), 32)
        );
        assert_eq!(h.headers, vec![("X-A".to_string(), b"1".to_vec())]);
        let (h, _) = parse_head(b"Location: /x\n\n").unwrap().unwrap();
        assert_eq!(h.status, 302);
        let (h, n) = parse_head(b"Content-Type: text/plain\n\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, n), (200, 26));
        assert_eq!(parse_head(b"Content-Type: text/plain\r\n"), Ok(None));
        assert!(parse_head(b"no colon here\r\n\r\n").is_err());
        assert!(parse_head(b"Status: abc\r\n\r\n").is_err());
        assert!(parse_head(b"Status: 42\r\n\r\n").is_err());
        assert!(parse_head(b"Bad Name: x\r\n\r\n").is_err());
    }

    proptest! {
        /// Any bytes, in any pieces: the reader never panics, never holds
        /// more than one record's worth, and the head parser likewise.
        #[test]
        fn hostile_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2000), step in 1usize..64) {
            let mut r = Reader::default();
            let mut buf = BytesMut::new();
            for piece in bytes.chunks(step) {
                buf.extend_from_slice(piece);
                loop {
                    match r.next(&mut buf) {
                        Ok(Some(_)) => continue,
                        Ok(None) => break,
                        Err(_) => return Ok(()),
                    }
                }
                prop_assert!(buf.len() < 8 + 0xffff + 0xff + 64);
            }
            let _ = parse_head(&bytes);
        }

        /// Valid records with hostile lengths, paddings and contents, cut
        /// at every byte: the same events as read whole.
        #[test]
        fn records_split_at_every_byte(
            parts in proptest::collection::vec((0u8..3, proptest::collection::vec(any::<u8>(), 0..300), any::<u8>()), 0..6)
        ) {
            let mut bytes = Vec::new();
            for (k, content, pad) in &parts {
                let kind = [STDOUT, STDERR, STDOUT][usize::from(*k)];
                bytes.extend(rec(kind, content, *pad));
            }
            bytes.extend(end());
            let whole = read_all(&bytes, bytes.len()).expect("valid");
            for step in 1..16 {
                prop_assert_eq!(&read_all(&bytes, step).expect("valid"), &whole);
            }
            // Truncated: never the END event.
            let cut = &bytes[..bytes.len() - 1];
            let got = read_all(cut, 7).expect("valid so far");
            let ended = got.iter().any(|e| matches!(e, Event::End { .. }));
            prop_assert!(!ended, "an END_REQUEST from a truncated record");
        }
    }
}
