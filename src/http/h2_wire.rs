//! Estimates of what an HTTP/2 upstream exchange takes on the wire, for
//! `$upstream_bytes_sent` and `$upstream_bytes_received`: the h2 crate does
//! not tell how large its HPACK-encoded HEADERS frames came out, so a header
//! block is counted as HPACK literals without indexing or Huffman coding
//! (an upper bound of the encoded size) plus its 9-byte frame header; DATA
//! frames as their payload plus 9 bytes each. Pure.

use http::{HeaderMap, Request, StatusCode};

/// The header of every HTTP/2 frame.
pub const FRAME_HEAD: u64 = 9;

/// The frame payload size every peer accepts (SETTINGS_MAX_FRAME_SIZE's
/// initial value): the fewest DATA frames a body of a length needs.
const MAX_FRAME: u64 = 16_384;

/// An HPACK integer with an `prefix`-bit prefix (RFC 7541 5.1), in bytes.
fn int_len(n: u64, prefix: u32) -> u64 {
    let max = (1u64 << prefix) - 1;
    if n < max {
        return 1;
    }
    let mut rest = n - max;
    let mut len = 2;
    while rest >= 128 {
        rest >>= 7;
        len += 1;
    }
    len
}

/// One field as a literal without indexing, with a new name (RFC 7541 6.2.2).
fn field(name: &[u8], value: &[u8]) -> u64 {
    1 + int_len(name.len() as u64, 7)
        + name.len() as u64
        + int_len(value.len() as u64, 7)
        + value.len() as u64
}

/// A HEADERS frame carrying `pseudo` fields and `headers`.
pub fn header_block(pseudo: &[(&str, &[u8])], headers: &HeaderMap) -> u64 {
    let p: u64 = pseudo.iter().map(|(n, v)| field(n.as_bytes(), v)).sum();
    let h: u64 = headers
        .iter()
        .map(|(n, v)| field(n.as_str().as_bytes(), v.as_bytes()))
        .sum();
    FRAME_HEAD + p + h
}

/// A body of `len` bytes sent in DATA frames of at most the initial frame
/// size (none for an empty body: END_STREAM goes on the HEADERS frame).
pub fn data(len: u64) -> u64 {
    len + len.div_ceil(MAX_FRAME) * FRAME_HEAD
}

/// A request's HEADERS frame (its four pseudo-headers and its headers) and
/// a body of `body` bytes read whole; a body streamed as it comes is not
/// counted (None).
pub fn request(head: &Request<()>, body: Option<u64>) -> u64 {
    let u = head.uri();
    let pseudo: [(&str, &[u8]); 4] = [
        (":method", head.method().as_str().as_bytes()),
        (":scheme", u.scheme_str().unwrap_or("http").as_bytes()),
        (
            ":authority",
            u.authority().map_or("", |a| a.as_str()).as_bytes(),
        ),
        (
            ":path",
            u.path_and_query().map_or("/", |p| p.as_str()).as_bytes(),
        ),
    ];
    header_block(&pseudo, head.headers()) + body.map_or(0, data)
}

/// A response's HEADERS frame, as the upstream sent it.
pub fn response_head(status: StatusCode, headers: &HeaderMap) -> u64 {
    header_block(&[(":status", status.as_str().as_bytes())], headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(int_len(0, 7), 1);
        assert_eq!(int_len(126, 7), 1);
        assert_eq!(int_len(127, 7), 2);
        assert_eq!(int_len(127 + 127, 7), 2);
        assert_eq!(int_len(127 + 128, 7), 3);
        assert_eq!(int_len(u64::MAX, 7), 11);
    }

    #[test]
    fn blocks_and_data() {
        let mut h = HeaderMap::new();
        h.insert("x-a", http::HeaderValue::from_static("bc"));
        // 9 + (1+1+7+1+3) for :status 200 + (1+1+3+1+2) for x-a: bc.
        assert_eq!(header_block(&[(":status", b"200")], &h), 9 + 13 + 8);
        assert_eq!(data(0), 0);
        assert_eq!(data(1), 10);
        assert_eq!(data(16_384), 16_393);
        assert_eq!(data(16_385), 16_385 + 18);
        assert_eq!(response_head(StatusCode::OK, &h), 30);
        let req = Request::get("http://u:8/p?q").body(()).unwrap();
        // :method GET 13, :scheme http 14, :authority u:8 16, :path /p?q
        // 12, then one DATA frame of 3.
        assert_eq!(request(&req, Some(3)), 9 + 13 + 14 + 16 + 12 + 12);
    }
}
