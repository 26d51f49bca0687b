//! Message bodies as framed on the wire: a length, chunked (sizes read as
//! nginx reads them, trailers by `httparse::parse_headers`), or
//! until the peer closes. The decoder takes what it can from the
//! connection's buffer and says when it needs more; data comes out as slices
//! of that buffer (no copy). The encoder half writes chunk framing.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// How a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    Length(u64),
    Chunked,
    /// Until the peer closes (a response only).
    Close,
}

/// A `Content-Length` value as nginx reads one: 1 to 18 digits, nothing
/// else (no sign, no spaces, no list). None: invalid.
pub fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// What the decoder took from the buffer.
#[derive(Debug)]
pub enum Piece {
    Data(Bytes),
    Trailers(HeaderMap),
    End,
}

/// Why a body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Bad chunk framing (or a chunk size that overflows).
    Invalid,
    /// The peer closed before the body ended.
    Truncated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Close,
    /// The end was returned.
    Done,
    /// Trailers were returned; the end comes next.
    Ending,
}

/// A chunk-size line or a trailer section longer than this is refused.
const MAX_SIZE_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
}

impl Decoder {
    pub fn new(f: Framing) -> Decoder {
        Decoder {
            state: match f {
                Framing::Empty | Framing::Length(0) => State::Ending,
                Framing::Length(n) => State::Length(n),
                Framing::Chunked => State::Size,
                Framing::Close => State::Close,
            },
        }
    }

    /// A body of no bytes whose end is still to be returned: its end,
    /// taken at once (what `decode` would return first); false, and
    /// nothing done, for any other.
    pub fn end_at_once(&mut self) -> bool {
        let empty = self.state == State::Ending;
        if empty {
            self.state = State::Done;
        }
        empty
    }

    /// The end has been returned.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// All of the body was taken; only its end is still to be returned.
    pub fn is_ending(&self) -> bool {
        self.state == State::Ending
    }

    /// The bytes left, when the framing says.
    pub fn left(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Ending | State::Done => Some(0),
            _ => None,
        }
    }

    /// At least this many bytes are still to come (the rest of the chunk
    /// being read).
    pub fn at_least(&self) -> u64 {
        match self.state {
            State::Length(n) | State::Data(n) => n,
            _ => 0,
        }
    }

    /// The next piece from `buf`; `eof`: the peer has closed and `buf` holds
    /// all there will be. Ok(None): more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<Piece>, BodyError> {
        loop {
            match self.state {
                State::Done => return Ok(Some(Piece::End)),
                State::Ending => {
                    self.state = State::Done;
                    return Ok(Some(Piece::End));
                }
                State::Length(left) => {
                    let Some((data, left)) = take(buf, left, eof)? else {
                        return Ok(None);
                    };
                    self.state = if left == 0 {
                        State::Ending
                    } else {
                        State::Length(left)
                    };
                    return Ok(Some(Piece::Data(data)));
                }
                State::Close => {
                    if buf.is_empty() {
                        if eof {
                            self.state = State::Done;
                            return Ok(Some(Piece::End));
                        }
                        return Ok(None);
                    }
                    return Ok(Some(Piece::Data(buf.split().freeze())));
                }
                State::Size => match chunk_size(buf) {
                    // nginx's bound: the size and the framing after it
                    // must fit in an off_t.
                    Ok(httparse::Status::Complete((_, size))) if size > i64::MAX as u64 - 4 => {
                        return Err(BodyError::Invalid);
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        buf.advance(used);
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::Data(size)
                        };
                    }
                    Ok(httparse::Status::Partial) => return more(buf.len(), MAX_SIZE_LINE, eof),
                    Err(_) => return Err(BodyError::Invalid),
                },
                State::Data(left) => {
                    let Some((data, left)) = take(buf, left, eof)? else {
                        return Ok(None);
                    };
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Some(Piece::Data(data)));
                }
                State::DataEnd => {
                    // CRLF, or a bare LF as nginx takes it.
                    match line_end(buf) {
                        Some(0) => return more(0, 0, eof),
                        Some(n) => buf.advance(n),
                        None => return Err(BodyError::Invalid),
                    }
                    self.state = State::Size;
                }
                State::Trailers => {
                    match line_end(buf) {
                        Some(0) => return more(0, 0, eof),
                        Some(n) => {
                            buf.advance(n);
                            self.state = State::Done;
                            return Ok(Some(Piece::End));
                        }
                        None => {}
                    }
                    let mut slots = [httparse::EMPTY_HEADER; 32];
                    let whole = match httparse::parse_headers(buf, &mut slots) {
                        Ok(httparse::Status::Complete((used, parsed))) => {
                            let mut map = HeaderMap::with_capacity(parsed.len());
                            for h in parsed.iter() {
                                if let (Ok(n), Ok(v)) = (
                                    HeaderName::from_bytes(h.name.as_bytes()),
                                    HeaderValue::from_bytes(h.value),
                                ) {
                                    map.append(n, v);
                                }
                            }
                            Some((used, map))
                        }
                        Ok(httparse::Status::Partial) => None,
                        // Lines httparse refuses (nginx reads no trailer
                        // and skips them all), or more than its slots:
                        // read a line at a time once the section is whole,
                        // those a field cannot hold left out.
                        Err(_) => trailer_lines(buf)?,
                    };
                    if let Some((used, map)) = whole {
                        buf.advance(used);
                        self.state = State::Ending;
                        return Ok(Some(Piece::Trailers(map)));
                    }
                    return more(buf.len(), MAX_TRAILERS, eof);
                }
            }
        }
    }
}

/// A line (or section) not whole yet: Invalid past `most` bytes,
/// Truncated when no more will come, else wait.
fn more(len: usize, most: usize, eof: bool) -> Result<Option<Piece>, BodyError> {
    if len > most {
        Err(BodyError::Invalid)
    } else if eof {
        Err(BodyError::Truncated)
    } else {
        Ok(None)
    }
}

/// The line end at the start of `buf`: Some(2) for CRLF, Some(1) for a
/// bare LF (nginx ends chunk lines there too, as RFC 9112 2.2 allows),
/// Some(0) while it may still be one (nothing yet, or a CR alone); None
/// when it is none.
fn line_end(buf: &[u8]) -> Option<usize> {
    match buf {
        [b'\r', b'\n', ..] => Some(2),
        [b'\n', ..] => Some(1),
        [] | [b'\r'] => Some(0),
        _ => None,
    }
}

/// A chunk-size line as nginx reads it: hex digits (as many as the size
/// fits in, leading zeros too), then its end (CRLF or a bare LF), or an
/// extension (from `;`, a space or a tab: any bytes up to the line's end,
/// where a CR must be followed by LF). Complete((bytes of the line, size)).
fn chunk_size(buf: &[u8]) -> Result<httparse::Status<(usize, u64)>, httparse::InvalidChunkSize> {
    let mut size: u64 = 0;
    let mut digits = 0;
    for &b in buf {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => break,
        };
        // nginx's bound, checked before each digit.
        if size > i64::MAX as u64 / 16 {
            return Err(httparse::InvalidChunkSize);
        }
        size = size * 16 + u64::from(d);
        digits += 1;
    }
    if digits == 0 {
        return if buf.is_empty() {
            Ok(httparse::Status::Partial)
        } else {
            Err(httparse::InvalidChunkSize)
        };
    }
    let rest = &buf[digits..];
    match rest.first() {
        None => return Ok(httparse::Status::Partial),
        Some(b'\r' | b'\n' | b';' | b' ' | b'\t') => {}
        Some(_) => return Err(httparse::InvalidChunkSize),
    }
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'\n' => return Ok(httparse::Status::Complete((digits + i + 1, size))),
            b'\r' => {
                return match rest.get(i + 1) {
                    Some(b'\n') => Ok(httparse::Status::Complete((digits + i + 2, size))),
                    Some(_) => Err(httparse::InvalidChunkSize),
                    None => Ok(httparse::Status::Partial),
                };
            }
            _ => {}
        }
    }
    Ok(httparse::Status::Partial)
}

/// A whole trailer section read a line at a time: its length, and the
/// fields of the lines that hold one (the others left out). None while its
/// empty line has not come; Invalid for a CR not before an LF (nginx's
/// only rule for trailer lines).
fn trailer_lines(buf: &[u8]) -> Result<Option<(usize, HeaderMap)>, BodyError> {
    let mut map = HeaderMap::new();
    let mut at = 0;
    loop {
        let Some(n) = buf[at..].iter().position(|&b| b == b'\n') else {
            // A CR that something other than LF follows, already here.
            let rest = &buf[at..];
            let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
            return if rest.contains(&b'\r') {
                Err(BodyError::Invalid)
            } else {
                Ok(None)
            };
        };
        let line = &buf[at..at + n];
        at += n + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.contains(&b'\r') {
            return Err(BodyError::Invalid);
        }
        if line.is_empty() {
            return Ok(Some((at, map)));
        }
        if let Some(c) = line.iter().position(|&b| b == b':') {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(&line[..c]),
                HeaderValue::from_bytes(line[c + 1..].trim_ascii()),
            ) {
                map.append(name, value);
            }
        }
    }
}

/// Up to `left` bytes of data from `buf`, and how many are left after
/// them. Ok(None): none there yet; Truncated when none will come.
fn take(buf: &mut BytesMut, left: u64, eof: bool) -> Result<Option<(Bytes, u64)>, BodyError> {
    if buf.is_empty() {
        return if eof {
            Err(BodyError::Truncated)
        } else {
            Ok(None)
        };
    }
    let n = (buf.len() as u64).min(left) as usize;
    Ok(Some((buf.split_to(n).freeze(), left - n as u64)))
}

/// The size line of a chunk of `len` bytes.
pub fn chunk_head(len: usize, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(out, "{len:x}\r\n");
}

/// The last chunk, with trailers if any.
pub fn last_chunk(trailers: Option<&HeaderMap>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n");
    if let Some(t) = trailers {
        super::write::headers(t, None, out);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `input` fed in the given pieces; the data, the trailers, and
    /// how it ended.
    fn run(
        f: Framing,
        pieces: &[&[u8]],
        eof: bool,
    ) -> (Vec<u8>, usize, Result<bool, BodyError>, usize) {
        let mut d = Decoder::new(f);
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut trailers = 0;
        let mut fed = 0;
        loop {
            let last = fed == pieces.len();
            match d.decode(&mut buf, last && eof) {
                Ok(Some(Piece::Data(b))) => {
                    assert!(!b.is_empty());
                    data.extend_from_slice(&b);
                }
                Ok(Some(Piece::Trailers(t))) => trailers += t.len(),
                Ok(Some(Piece::End)) => return (data, trailers, Ok(true), buf.len()),
                Ok(None) if last => return (data, trailers, Ok(false), buf.len()),
                Ok(None) => {
                    buf.extend_from_slice(pieces[fed]);
                    fed += 1;
                }
                Err(e) => return (data, trailers, Err(e), buf.len()),
            }
        }
    }

    #[test]
    fn chunked() {
        let body: &[u8] = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-Sum: 9\r\n\r\nNEXT";
        let (data, t, end, left) = run(Framing::Chunked, &[body], false);
        assert_eq!(
            (data.as_slice(), t, end, left),
            (&b"Wikipedia"[..], 1, Ok(true), 4)
        );
        let (_, _, end, _) = run(Framing::Chunked, &[b"ffffffffffffffffffff\r\n"], false);
        assert_eq!(end, Err(BodyError::Invalid));
        let (_, _, end, _) = run(Framing::Chunked, &[b"zz\r\n"], false);
        assert_eq!(end, Err(BodyError::Invalid));
        let (_, _, end, _) = run(Framing::Chunked, &[b"3\r\nabcX\r\n"], false);
        assert_eq!(end, Err(BodyError::Invalid));
        let (_, _, end, _) = run(Framing::Chunked, &[b"3\r\nab"], true);
        assert_eq!(end, Err(BodyError::Truncated));
        let (_, _, end, _) = run(Framing::Chunked, &[b"0\r\n\r\n"], false);
        assert_eq!(end, Ok(true));
    }

    /// Lines may end in a bare LF, as nginx reads them: the size line (its
    /// extension ends there too), after the data, the trailers and the
    /// last line; in any pieces, as with CRLF. A CR not before an LF is
    /// still refused.
    #[test]
    fn chunk_lines_may_end_in_lf() {
        let body: &[u8] = b"4\nWiki\n5;ext\npedia\r\n0\nX-Sum: 9\n\nNEXT";
        for cut in 0..=body.len() {
            for cut2 in cut..=body.len() {
                let pieces = [&body[..cut], &body[cut..cut2], &body[cut2..]];
                let (data, t, end, _) = run(Framing::Chunked, &pieces, false);
                assert_eq!(
                    (data.as_slice(), t, end),
                    (&b"Wikipedia"[..], 1, Ok(true)),
                    "{cut} {cut2}"
                );
            }
        }
        let (_, _, _, left) = run(Framing::Chunked, &[body], false);
        assert_eq!(left, 4);
        // The extension ends at the LF: what follows is data.
        let (data, _, end, _) = run(Framing::Chunked, &[b"2;a\nbc\r\n0\n\n"], false);
        assert_eq!((data.as_slice(), end), (&b"bc"[..], Ok(true)));
        for bad in [
            &b"4\rx\n"[..],
            b"4\r\nbody\rX",
            b"4\r\nbodyX\n",
            b"\n",
            b"4x\n",
            b"4 \rx\n",
            b"\r\n",
            b";x\r\n",
            b" 4\r\n",
        ] {
            let (_, _, end, _) = run(Framing::Chunked, &[bad], false);
            assert_eq!(end, Err(BodyError::Invalid), "{bad:?}");
        }
        let (_, _, end, _) = run(Framing::Chunked, &[b"4\nbody\r"], true);
        assert_eq!(end, Err(BodyError::Truncated));
        // Trailer lines a field cannot hold are left out (nginx reads no
        // trailer), in any pieces; the others pass.
        let body: &[u8] = b"0\r\nX y\r\nX-Ok: 1\r\n: z\r\n folded\nX-\x01: 2\r\n\r\nNEXT";
        for cut in 0..=body.len() {
            let (_, t, end, _) = run(Framing::Chunked, &[&body[..cut], &body[cut..]], false);
            assert_eq!((t, end), (1, Ok(true)), "{cut}");
        }
        // But a CR not before an LF is refused there, as nginx does.
        for bad in [
            &b"0\r\n\rT: x\r\n\r\n"[..],
            b"0\r\nT\r: x\r\n\r\n",
            b"0\r\nX y\r\nT:\r x\r\n\r\n",
        ] {
            for cut in 0..=bad.len() {
                let (_, _, end, _) = run(Framing::Chunked, &[&bad[..cut], &bad[cut..]], false);
                assert_eq!(end, Err(BodyError::Invalid), "{bad:?} {cut}");
            }
        }
        // As nginx: a space or tab starts an extension too, and a size may
        // have more digits than 16 (leading zeros) while it fits.
        for ok in [
            &b"4 x\nbody\r\n0\r\n\r\n"[..],
            b"4\t;a=b\r\nbody\r\n0\r\n\r\n",
            b"000000000000000000004\r\nbody\r\n0\r\n\r\n",
        ] {
            let (data, _, end, _) = run(Framing::Chunked, &[ok], false);
            assert_eq!((data.as_slice(), end), (&b"body"[..], Ok(true)), "{ok:?}");
        }
    }

    #[test]
    fn content_lengths() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"04"), Some(4));
        assert_eq!(
            content_length(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"-1",
            b"+4",
            b"4 ",
            b"4, 4",
            b"0x4",
            b"1000000000000000000",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn length_and_close() {
        let (data, _, end, left) = run(Framing::Length(3), &[b"ab", b"cde"], false);
        assert_eq!((data.as_slice(), end, left), (&b"abc"[..], Ok(true), 2));
        let (_, _, end, _) = run(Framing::Length(3), &[b"ab"], true);
        assert_eq!(end, Err(BodyError::Truncated));
        let (data, _, end, _) = run(Framing::Close, &[b"ab", b"c"], true);
        assert_eq!((data.as_slice(), end), (&b"abc"[..], Ok(true)));
        let (data, _, end, _) = run(Framing::Empty, &[b"x"], false);
        assert_eq!((data.len(), end), (0, Ok(true)));
    }

    fn encode(data: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for d in data.iter().filter(|d| !d.is_empty()) {
            chunk_head(d.len(), &mut out);
            out.extend_from_slice(d);
            out.extend_from_slice(b"\r\n");
        }
        let mut t = HeaderMap::new();
        t.insert("x-t", HeaderValue::from_static("v"));
        last_chunk(Some(&t), &mut out);
        out
    }

    proptest! {
        /// Whatever the splits, a chunked body decodes to what was encoded,
        /// and arbitrary bytes never panic the decoder.
        #[test]
        fn chunked_round_trip_in_any_pieces(
            data in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6),
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let wire = encode(&data);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut pieces = Vec::new();
            let mut at = 0;
            for c in cuts {
                pieces.push(&wire[at..c]);
                at = c;
            }
            pieces.push(&wire[at..]);
            let (got, trailers, end, left) = run(Framing::Chunked, &pieces, false);
            prop_assert_eq!(got, data.concat());
            prop_assert_eq!(trailers, 1);
            prop_assert_eq!(end, Ok(true));
            prop_assert_eq!(left, 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), eof in any::<bool>()) {
            for f in [Framing::Chunked, Framing::Length(100), Framing::Close] {
                let _ = run(f, &[&bytes], eof);
            }
        }
    }
}
