//! Byte ranges as nginx's range filter serves them: the `Range` header
//! parsed with nginx's rules (spaces, suffix and open ranges, 416 for bad
//! syntax or nothing satisfiable, the whole file when there are more ranges
//! than `max_ranges` or they add up to more than the file), `If-Range`, and
//! the layout of a `multipart/byteranges` body. Pure: the static file
//! handler reads the file and sends what this module lays out.

use bytes::Bytes;

/// Bytes `start..end` of the file (end excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

impl Span {
    pub fn len(self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }
}

/// What a `Range` header asks of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable header, too many ranges, or ranges larger in sum than the
    /// file: 200 with the whole file.
    Whole,
    /// 206 with these parts, in the order asked (one: a plain body; more: a
    /// multipart body).
    Parts(Vec<Span>),
    /// 416 with `Content-Range: bytes */SIZE`.
    Unsatisfiable,
}

/// The largest offset nginx's `off_t` holds.
const MAX_OFF: u64 = i64::MAX as u64;

/// Parses a `Range` header for a file of `size` bytes. A header not
/// starting `bytes=` (without case) or with nothing after it is ignored, as
/// are more ranges than `max_ranges`.
pub fn parse(value: &[u8], size: u64, max_ranges: u32) -> Ranges {
    if value.len() < 7 || !value[..6].eq_ignore_ascii_case(b"bytes=") {
        return Ranges::Whole;
    }
    let b = &value[6..];
    let at = |p: usize| b.get(p).copied().unwrap_or(0);
    let size = size.min(MAX_OFF);
    let mut p = 0;
    let mut spans = Vec::new();
    let mut total: u64 = 0;
    loop {
        let mut start: u64 = 0;
        let end: u64;
        while at(p) == b' ' {
            p += 1;
        }
        let suffix = at(p) == b'-';
        let mut open = false;
        if suffix {
            p += 1;
        } else {
            if !at(p).is_ascii_digit() {
                return Ranges::Unsatisfiable;
            }
            match digits(b, &mut p) {
                Some(n) => start = n,
                None => return Ranges::Unsatisfiable,
            }
            while at(p) == b' ' {
                p += 1;
            }
            if at(p) != b'-' {
                return Ranges::Unsatisfiable;
            }
            p += 1;
            while at(p) == b' ' {
                p += 1;
            }
            open = at(p) == b',' || p >= b.len();
        }
        if open {
            end = size;
        } else {
            if !at(p).is_ascii_digit() {
                return Ranges::Unsatisfiable;
            }
            let Some(n) = digits(b, &mut p) else {
                return Ranges::Unsatisfiable;
            };
            while at(p) == b' ' {
                p += 1;
            }
            if at(p) != b',' && p < b.len() {
                return Ranges::Unsatisfiable;
            }
            // Inclusive last byte to an excluded end, clamped to the file;
            // a suffix of N is the last N bytes.
            let last = if suffix {
                start = size.saturating_sub(n);
                size.checked_sub(1)
            } else {
                Some(n)
            };
            end = match last {
                Some(l) if l < size => l + 1,
                _ => size,
            };
        }
        if start < end {
            let len = end - start;
            if total > MAX_OFF - len {
                return Ranges::Unsatisfiable;
            }
            total += len;
            spans.push(Span { start, end });
            if spans.len() as u64 > u64::from(max_ranges) {
                return Ranges::Whole;
            }
        } else if start == 0 {
            return Ranges::Whole;
        }
        if at(p) != b',' {
            break;
        }
        p += 1;
    }
    if spans.is_empty() {
        return Ranges::Unsatisfiable;
    }
    if total > size {
        return Ranges::Whole;
    }
    Ranges::Parts(spans)
}

/// A run of digits at `*p` as a number no larger than nginx's `off_t`.
fn digits(b: &[u8], p: &mut usize) -> Option<u64> {
    let mut n: u64 = 0;
    while let Some(&c) = b.get(*p).filter(|c| c.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        if n > MAX_OFF {
            return None;
        }
        *p += 1;
    }
    Some(n)
}

/// Whether `If-Range` names this version of the file: a value ending in
/// `"` is compared with the ETag byte for byte, anything else is read as a
/// date and compared with the modification time.
pub fn if_range_matches(value: &[u8], etag: &str, mtime: i64) -> bool {
    if value.len() >= 2 && value.last() == Some(&b'"') {
        return value == etag.as_bytes();
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(http_time)
        .is_some_and(|t| t == mtime)
}

/// An HTTP date in any of the three forms HTTP allows (RFC 1123, RFC 850,
/// asctime), as seconds since the epoch.
pub fn http_time(s: &str) -> Option<i64> {
    use chrono::NaiveDateTime;
    let s = s.trim();
    [
        "%a, %d %b %Y %H:%M:%S GMT",
        "%A, %d-%b-%y %H:%M:%S GMT",
        "%a %b %e %H:%M:%S %Y",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .map(|t| t.and_utc().timestamp())
}

/// One piece of a response body: text made here, or a span of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(Bytes),
    File(Span),
}

impl Piece {
    pub fn len(&self) -> u64 {
        match self {
            Piece::Text(t) => t.len() as u64,
            Piece::File(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// nginx prints the boundary zero-padded to the width of its atomic
/// counter: 20 digits on a 64-bit system.
pub const BOUNDARY_WIDTH: usize = 20;

/// A `multipart/byteranges` body as nginx lays it out: each part opens with
/// CRLF, `--BOUNDARY`, its `Content-Type` (when the file has one) and
/// `Content-Range`, and a blank line; the body ends with CRLF
/// `--BOUNDARY--` CRLF. Returns the response's `Content-Type` and the
/// pieces.
pub fn multipart(spans: &[Span], size: u64, ctype: &str, boundary: u64) -> (String, Vec<Piece>) {
    let w = BOUNDARY_WIDTH;
    let mut pieces = Vec::with_capacity(spans.len() * 2 + 1);
    for s in spans {
        let mut head = format!("\r\n--{boundary:0w$}\r\n");
        if !ctype.is_empty() {
            head.push_str(&format!("Content-Type: {ctype}\r\n"));
        }
        head.push_str(&format!(
            "Content-Range: bytes {}-{}/{size}\r\n\r\n",
            s.start,
            s.end - 1
        ));
        pieces.push(Piece::Text(Bytes::from(head)));
        pieces.push(Piece::File(*s));
    }
    pieces.push(Piece::Text(Bytes::from(format!(
        "\r\n--{boundary:0w$}--\r\n"
    ))));
    (
        format!("multipart/byteranges; boundary={boundary:0w$}"),
        pieces,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// nginx-tests' range.t file: 100 lines of "X%03dXXXXXX".
    const SIZE: u64 = 1000;

    fn show(r: Ranges) -> String {
        match r {
            Ranges::Whole => "200".into(),
            Ranges::Unsatisfiable => "416".into(),
            Ranges::Parts(v) => v
                .iter()
                .map(|s| format!("{}-{}", s.start, s.end - 1))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    fn p(h: &str) -> String {
        show(parse(h.as_bytes(), SIZE, u32::MAX))
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-8"), "0-8");
        assert_eq!(p("bytes=-10"), "990-999");
        assert_eq!(p("bytes=990-"), "990-999");
        assert_eq!(p("bytes=990-1990"), "990-999");
        assert_eq!(p("bytes=0-10001"), "0-999");
        assert_eq!(p("bytes=-2000"), "0-999");
        assert_eq!(p("BYTES=1-2"), "1-2");
        assert_eq!(p("bytes=  1 -  2  "), "1-2");
        assert_eq!(p("bytes=5- "), "5-999");
    }

    #[test]
    fn several_ranges() {
        assert_eq!(p("bytes=0-9, -10, 10-19"), "0-9,990-999,10-19");
        // Ranges past the end are dropped when others remain.
        assert_eq!(p("bytes=0-9, -10, 100000-, 10-19"), "0-9,990-999,10-19");
        assert_eq!(p("bytes=5-2,1-1"), "1-1");
        // Overlapping ranges are served as asked while they add up to no
        // more than the file.
        assert_eq!(p("bytes=0-9,5-14"), "0-9,5-14");
        assert_eq!(p("bytes=0-10001, 0-0"), "200");
    }

    #[test]
    fn unsatisfiable() {
        for h in [
            "bytes=100000-",
            "bytes=1000-",
            "bytes=alpha",
            "bytes=10-alpha",
            "bytes=10",
            "bytes=10-11 12-",
            "bytes=5-2",
            "bytes=-0",
            "bytes= ",
            "bytes=,",
            "bytes=1-2,",
            "bytes=\t1-2",
            "bytes=99999999999999999999-",
            "bytes=0-99999999999999999999",
        ] {
            assert_eq!(p(h), "416", "{h}");
        }
    }

    #[test]
    fn ignored() {
        for h in ["items=1-2", "bytes=", "bytes", "", "bite=0-1"] {
            assert_eq!(p(h), "200", "{h}");
        }
        // An empty file: a range from 0 gets the (empty) whole.
        assert_eq!(show(parse(b"bytes=0-", 0, 10)), "200");
        assert_eq!(show(parse(b"bytes=-5", 0, 10)), "200");
        assert_eq!(show(parse(b"bytes=1-", 0, 10)), "416");
    }

    #[test]
    fn max_ranges() {
        let m = |h: &str, n| show(parse(h.as_bytes(), SIZE, n));
        assert_eq!(m("bytes=0-9, -10", 2), "0-9,990-999");
        assert_eq!(m("bytes=0-9, -10, 10000-", 2), "0-9,990-999");
        assert_eq!(m("bytes=0-9, -10, 10-19", 2), "200");
        assert_eq!(m("bytes=0-9", 1), "0-9");
    }

    #[test]
    fn if_range() {
        let etag = "\"5f5e1000-3e8\"";
        // Sun, 13 Sep 2020 12:26:40 GMT
        let mtime = 1_600_000_000;
        assert!(if_range_matches(etag.as_bytes(), etag, mtime));
        assert!(!if_range_matches(b"\"other\"", etag, mtime));
        assert!(!if_range_matches(b"W/\"5f5e1000-3e8\"", etag, mtime));
        assert!(if_range_matches(
            b"Sun, 13 Sep 2020 12:26:40 GMT",
            etag,
            mtime
        ));
        assert!(if_range_matches(
            b"Sunday, 13-Sep-20 12:26:40 GMT",
            etag,
            mtime
        ));
        assert!(if_range_matches(b"Sun Sep 13 12:26:40 2020", etag, mtime));
        assert!(!if_range_matches(
            b"Sun, 13 Sep 2020 12:26:41 GMT",
            etag,
            mtime
        ));
        assert!(!if_range_matches(b"yesterday", etag, mtime));
    }

    #[test]
    fn multipart_as_nginx() {
        let spans = [Span { start: 0, end: 2 }, Span { start: 8, end: 10 }];
        let (ct, pieces) = multipart(&spans, 10, "text/plain", 7);
        assert_eq!(ct, "multipart/byteranges; boundary=00000000000000000007");
        let file = b"0123456789";
        let body: Vec<u8> = pieces
            .iter()
            .flat_map(|p| match p {
                Piece::Text(t) => t.to_vec(),
                Piece::File(s) => file[s.start as usize..s.end as usize].to_vec(),
            })
            .collect();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "\r\n--00000000000000000007\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01\
             \r\n--00000000000000000007\r\nContent-Type: text/plain\r\nContent-Range: bytes 8-9/10\r\n\r\n89\
             \r\n--00000000000000000007--\r\n"
        );
        let (_, pieces) = multipart(&spans, 10, "", 7);
        assert_eq!(
            pieces[0],
            Piece::Text(Bytes::from_static(
                b"\r\n--00000000000000000007\r\nContent-Range: bytes 0-1/10\r\n\r\n"
            ))
        );
    }

    /// Range headers built from the pieces nginx's parser cares about.
    fn header() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            (0u64..3000, 0u64..3000).prop_map(|(a, b)| format!("{a}-{b}")),
            (0u64..3000).prop_map(|a| format!("{a}-")),
            (0u64..3000).prop_map(|n| format!("-{n}")),
            "[ 0-9,\\-a]{0,6}",
        ];
        (
            prop_oneof![Just("bytes="), Just("Bytes="), Just("items="), Just("")],
            prop::collection::vec((part, "[ ]{0,2}"), 0..6),
        )
            .prop_map(|(unit, parts)| {
                let v: Vec<String> = parts.into_iter().map(|(p, s)| format!("{s}{p}")).collect();
                format!("{unit}{}", v.join(","))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::proptest_cases(256)))]
        #[test]
        fn any_header_never_panics(h in prop::collection::vec(any::<u8>(), 0..40), size in 0u64..5000, max in 0u32..8) {
            let _ = parse(&h, size, max);
        }

        #[test]
        fn parts_lie_within_the_file(h in header(), size in 0u64..3000, max in 1u32..8) {
            if let Ranges::Parts(spans) = parse(h.as_bytes(), size, max) {
                prop_assert!(!spans.is_empty());
                prop_assert!(spans.len() as u32 <= max);
                prop_assert!(spans.iter().map(|s| s.len()).sum::<u64>() <= size);
                for s in &spans {
                    prop_assert!(s.start < s.end && s.end <= size, "{:?} of {}", s, size);
                }
            }
        }

        #[test]
        fn multipart_length_is_what_is_sent(h in header(), size in 1u64..3000, boundary in any::<u64>(), ct in "[a-z/]{0,12}") {
            if let Ranges::Parts(spans) = parse(h.as_bytes(), size, u32::MAX) {
                let (_, pieces) = multipart(&spans, size, &ct, boundary);
                let file: Vec<u8> = (0..size).map(|i| i as u8).collect();
                let sent: Vec<u8> = pieces.iter().flat_map(|p| match p {
                    Piece::Text(t) => t.to_vec(),
                    Piece::File(s) => file[s.start as usize..s.end as usize].to_vec(),
                }).collect();
                let announced: u64 = pieces.iter().map(Piece::len).sum();
                prop_assert_eq!(announced, sent.len() as u64);
                let closing = format!("\r\n--{boundary:020}--\r\n");
                prop_assert!(sent.ends_with(closing.as_bytes()));
            }
        }
    }
}
