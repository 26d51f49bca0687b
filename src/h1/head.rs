//! Request and response heads, parsed with `httparse` in place: names and
//! values are slices of the connection's buffer (no copy per header). A
//! request's headers stay a list in the order and case they came in
//! (`Headers`); so do a response's, which go on to the client as received
//! (`AsReceived`) unless the caller puts them in a map
//! (`ResponseHead::map`, their names' case kept beside it in `Names`). The
//! framing rules (one reading of a body's length) are the callers':
//! `http::framing` for requests, for responses `body_of`.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

/// Headers read on the stack before falling back to the heap: left
/// uninitialized (httparse writes the ones it reads), not 2 KiB cleared
/// for each head.
const STACK_HEADERS: usize = 64;

/// Why a head could not be read: the status to answer and nginx's log text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadError {
    pub code: u16,
    pub why: String,
    /// The request line (not a header) was at fault.
    pub in_line: bool,
}

impl HeadError {
    /// The request line at fault.
    pub fn line(code: u16, why: impl Into<String>) -> HeadError {
        HeadError {
            code,
            why: why.into(),
            in_line: true,
        }
    }

    /// A header (or the head as a whole) at fault.
    pub fn header(code: u16, why: impl Into<String>) -> HeadError {
        HeadError {
            code,
            why: why.into(),
            in_line: false,
        }
    }
}

/// A response's header names as they arrived (`Content-type`, `X-ID`), for
/// writing them on in the same case: only those sluice would spell
/// otherwise, so it is empty for most heads and for heads sluice makes.
#[derive(Debug, Clone, Default)]
pub struct Names(pub Vec<Bytes>);

impl Names {
    /// The name as received, or None if it did not arrive.
    pub fn find(&self, name: &HeaderName) -> Option<&[u8]> {
        let want = name.as_str().as_bytes();
        self.0
            .iter()
            .find(|n| n.eq_ignore_ascii_case(want))
            .map(|n| n.as_ref())
    }
}

/// A response's header names in the order they arrived, one per line:
/// kept only when a name comes back after another (the map groups a name's
/// values), so that the head goes on in the upstream's order, as nginx's.
#[derive(Debug, Clone)]
pub struct Order(pub Vec<HeaderName>);

/// A response's reason phrase as the upstream sent it, written on as is.
#[derive(Debug, Clone)]
pub struct Reason(pub Bytes);

/// A request's headers in the order and case they arrived: names and values
/// are slices of the head's bytes (one allocation for the list, none per
/// header). Lookups compare names without case by a scan (a head has few
/// headers, and a scan costs less than hashing each name), but for the
/// `Known` names, which the head finds as it is made.
#[derive(Debug, Clone, Default)]
pub struct Headers {
    head: Bytes,
    spans: Vec<Span>,
    index: Index,
}

/// The header names that the request and response paths ask about for
/// every request (framing, keep-alive, the host): each head finds them
/// once, as it is read, and a lookup of one of them is an array read, not
/// a scan comparing names, as nginx's `headers_in` keeps its known
/// headers (callgrind, `scripts/cost`: these lookups were some 5% of a
/// proxied request's instructions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Host,
    Expect,
    Upgrade,
    Connection,
    ContentLength,
    TransferEncoding,
}

impl Known {
    /// The name, in lowercase.
    pub fn name(self) -> &'static [u8] {
        match self {
            Known::Host => b"host",
            Known::Expect => b"expect",
            Known::Upgrade => b"upgrade",
            Known::Connection => b"connection",
            Known::ContentLength => b"content-length",
            Known::TransferEncoding => b"transfer-encoding",
        }
    }

    /// The known name `name` is, in any case: by its length (no two share
    /// one), then a word compare or three (`Words`).
    #[inline]
    fn of(name: &[u8]) -> Option<Known> {
        let k = match name.len() {
            4 => Known::Host,
            6 => Known::Expect,
            7 => Known::Upgrade,
            10 => Known::Connection,
            14 => Known::ContentLength,
            17 => Known::TransferEncoding,
            _ => return None,
        };
        KNOWN_WORDS[k as usize].match_of(name).then_some(k)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A known name as words to compare a name of its length with: for fewer
/// than eight bytes, its first four and last four as one word (as `short`
/// reads a name); else three words of eight, at the start, at the end, and
/// the eight after the start (or the end's again). `case` holds 0x20 in
/// each letter's place, the one bit in which its two cases differ, and
/// nothing in a `-`'s: a byte matches only a letter's own two cases, or
/// the `-` itself.
struct Words {
    at: [usize; 3],
    want: [u64; 3],
    case: [u64; 3],
}

impl Words {
    const fn of(name: &[u8]) -> Words {
        let n = name.len();
        if n < 8 {
            let (lo, lo_case) = Words::word(name, 0, 4);
            let (hi, hi_case) = Words::word(name, n - 4, 4);
            return Words {
                at: [0; 3],
                want: [lo | hi << 32, 0, 0],
                case: [lo_case | hi_case << 32, 0, 0],
            };
        }
        let mid = if n - 8 < 8 { n - 8 } else { 8 };
        let at = [0, mid, n - 8];
        let (a, ac) = Words::word(name, at[0], 8);
        let (b, bc) = Words::word(name, at[1], 8);
        let (c, cc) = Words::word(name, at[2], 8);
        Words {
            at,
            want: [a, b, c],
            case: [ac, bc, cc],
        }
    }

    /// `len` bytes of `name` from `at` as a little-endian word, and its
    /// letters' case bits.
    const fn word(name: &[u8], at: usize, len: usize) -> (u64, u64) {
        let (mut w, mut case, mut i) = (0u64, 0u64, 0);
        while i < len {
            let b = name[at + i];
            w |= (b as u64) << (8 * i);
            if b.is_ascii_lowercase() {
                case |= 0x20 << (8 * i);
            }
            i += 1;
        }
        (w, case)
    }

    /// Whether `name`, of this name's length, is this name in any case.
    #[inline]
    fn match_of(&self, name: &[u8]) -> bool {
        if name.len() < 8 {
            return short(name) | self.case[0] == self.want[0];
        }
        (0..3).all(|i| {
            let at = self.at[i];
            name.get(at..at + 8)
                .is_some_and(|b| eight(b) | self.case[i] == self.want[i])
        })
    }
}

/// `Known`'s names as `Words`, in its order.
static KNOWN_WORDS: [Words; 6] = [
    Words::of(b"host"),
    Words::of(b"expect"),
    Words::of(b"upgrade"),
    Words::of(b"connection"),
    Words::of(b"content-length"),
    Words::of(b"transfer-encoding"),
];

/// What a head's names are, found when it is made.
#[derive(Debug, Clone, Copy, Default)]
struct Index {
    /// Each known name's first line, counted from 1; 0 when it is absent,
    /// `u8::MAX` when it is looked up by a scan (its line is past what a
    /// `u8` counts, or lines were taken out). A byte, not more: the index
    /// keeps `Headers` and `ResponseHead` small (see `ResponseHead`).
    first: [u8; 6],
    /// The known names that come more than once, a bit each.
    more: u8,
    /// The lengths of the names, a bit each (63 for any longer): a lookup
    /// of a name no header's length matches returns at once, without a
    /// scan (most of the framing headers are absent from most requests).
    lengths: u64,
}

impl Index {
    /// After lines are taken out: every known name is looked up by a scan
    /// (its line may have moved or gone), and the length bits stay, more
    /// than are now there (a bit set for a length no line has any more
    /// only sends a lookup to the scan). Finding the names again would
    /// cost a lookup's worth for each line, for heads that are then
    /// mostly only written out.
    fn forget_lines(&mut self) {
        self.first = [u8::MAX; 6];
        self.more = u8::MAX;
    }

    fn of(head: &[u8], spans: &[Span]) -> Index {
        let mut ix = Index::default();
        for (i, (n, _)) in spans.iter().enumerate() {
            ix.lengths |= 1 << n.len().min(63);
            if let Some(k) = head.get(n.clone()).and_then(Known::of) {
                let first = &mut ix.first[k as usize];
                if *first == 0 {
                    *first = u8::try_from(i + 1).unwrap_or(u8::MAX);
                } else {
                    ix.more |= k.bit();
                }
            }
        }
        ix
    }
}

/// Whether two header names are the same in any ASCII case, as
/// `eq_ignore_ascii_case` says, eight bytes at a time: every lookup of a
/// head's header compares names, and byte by byte that was about 40% of a
/// lookup's cost (callgrind, `scripts/cost`).
#[inline]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && same_length_name(a, b)
}

/// `same_name` for two names of one length.
fn same_length_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    let words = |x: u64, y: u64| same_word(x, y).unwrap_or_else(|| a.eq_ignore_ascii_case(b));
    if n < 8 {
        return words(short(a), short(b));
    }
    // Eight bytes at a time; the last word ends at the end, overlapping
    // the one before it when the length is not a multiple of eight.
    let mut at = 0;
    loop {
        let end = (at + 8).min(n);
        let (Some(x), Some(y)) = (a.get(end - 8..end), b.get(end - 8..end)) else {
            return false;
        };
        if !words(eight(x), eight(y)) {
            return false;
        }
        if end == n {
            return true;
        }
        at = end;
    }
}

/// The names most responses bring, known without `HeaderName::from_bytes`
/// (which lowercases the name into a buffer and then looks it up among all
/// the standard ones): by length, then compared in any case.
fn common_name(raw: &[u8]) -> Option<HeaderName> {
    use http::header::*;
    let candidates: &[HeaderName] = match raw.len() {
        4 => &[DATE, ETAG, VARY],
        6 => &[SERVER],
        7 => &[EXPIRES],
        8 => &[LOCATION],
        10 => &[CONNECTION, SET_COOKIE],
        12 => &[CONTENT_TYPE],
        13 => &[LAST_MODIFIED, CACHE_CONTROL, ACCEPT_RANGES],
        14 => &[CONTENT_LENGTH],
        16 => &[CONTENT_ENCODING],
        17 => &[TRANSFER_ENCODING],
        _ => return None,
    };
    candidates
        .iter()
        .find(|n| same_name(n.as_str().as_bytes(), raw))
        .cloned()
}

/// Eight bytes as a word.
pub(super) fn eight(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(w)
}

/// Fewer than eight bytes as a word, without a copy loop: two overlapping
/// four-byte halves, or the first, middle and last of three or fewer (the
/// same bytes of two names of one length land in the same places).
fn short(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 4 {
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]);
        u64::from(lo) | u64::from(hi) << 32
    } else if n > 0 {
        u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16
    } else {
        0
    }
}

/// Whether two words of ASCII bytes differ only in the case of letters;
/// None for a byte past ASCII (left to the byte-by-byte comparison).
fn same_word(x: u64, y: u64) -> Option<bool> {
    const EACH: u64 = 0x0101_0101_0101_0101;
    let d = x ^ y;
    if d == 0 {
        return Some(true);
    }
    if (x | y) & (0x80 * EACH) != 0 {
        return None;
    }
    if d & !(0x20 * EACH) != 0 {
        return Some(false);
    }
    // The bytes of x that are letters, of either case.
    let letters = lowercase_letters(x | (0x20 * EACH));
    Some(d & !(letters >> 2) == 0)
}

/// The high bit of each byte of `x` that is a lowercase ASCII letter. For
/// words of ASCII bytes: each byte is below 0x80, so the additions carry
/// into no other byte.
pub(super) fn lowercase_letters(x: u64) -> u64 {
    const EACH: u64 = 0x0101_0101_0101_0101;
    let from_a = x.wrapping_add((0x80 - u64::from(b'a')) * EACH);
    let past_z = x.wrapping_add((0x80 - u64::from(b'z') - 1) * EACH);
    from_a & !past_z & !x & (0x80 * EACH)
}

/// A name's bit in `Index::lengths`.
fn length_bit(name: &[u8]) -> u64 {
    1 << name.len().min(63)
}

/// A header's value, as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a>(&'a [u8]);

impl<'a> Value<'a> {
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The value as text, when it is ASCII (obs-text is not text), as
    /// `HeaderValue::to_str` has it.
    pub fn to_str(&self) -> Result<&'a str, NotText> {
        if self.0.is_ascii() {
            std::str::from_utf8(self.0).map_err(|_| NotText)
        } else {
            Err(NotText)
        }
    }
}

/// A header value with bytes past ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotText;

impl PartialEq<&str> for Value<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl Headers {
    /// How many bytes the head took on the wire (request line included).
    pub fn wire_len(&self) -> usize {
        self.head.len()
    }

    /// Headers of a head sluice builds (tests, subrequests): each line a
    /// name and a value. A line that is not a valid header is left out.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Headers {
        Headers::from_byte_pairs(pairs.into_iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// The same from bytes (an HTTP/2 request's fields, whose values may
    /// hold obs-text).
    pub fn from_byte_pairs<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Headers {
        Headers::from_byte_pairs_in(pairs, 0, 0)
    }

    /// The same, with room made first for `count` headers whose names and
    /// values take `bytes` together: a head whose size is known (from a
    /// map) grows no buffer, and when the room is just right its text
    /// becomes the `Bytes` without another allocation.
    pub fn from_byte_pairs_in<'a>(
        pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        count: usize,
        bytes: usize,
    ) -> Headers {
        let mut text = Vec::with_capacity(bytes);
        let mut spans = take_spans(count);
        for (n, v) in pairs {
            if n.is_empty() || !n.iter().copied().all(is_token) || !valid_value(v) {
                continue;
            }
            let at = text.len();
            text.extend_from_slice(n);
            let vat = text.len();
            text.extend_from_slice(v);
            spans.push((at..vat, vat..text.len()));
        }
        let index = Index::of(&text, &spans);
        Headers {
            head: Bytes::from(text),
            spans,
            index,
        }
    }

    /// The same from a map (a FastCGI or HTTP/2 response's headers), in the
    /// map's order.
    pub fn from_map(map: &HeaderMap) -> Headers {
        let bytes = map.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
        Headers::from_byte_pairs_in(
            map.iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
            map.len(),
            bytes,
        )
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Each header: its name as received and its value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Value<'_>)> {
        self.spans
            .iter()
            .map(|(n, v)| (&self.head[n.clone()], Value(&self.head[v.clone()])))
    }

    /// The values of every header with this name (any case), in order.
    pub fn get_all<N: AsRef<[u8]>>(&self, name: N) -> Values<'_, N> {
        let known = Known::of(name.as_ref());
        let from = if self.surely_absent(name.as_ref()) {
            Some(usize::MAX)
        } else {
            known.is_none().then_some(0)
        };
        Values {
            h: self,
            name,
            known,
            from,
        }
    }

    /// The first header with this name (any case).
    pub fn get(&self, name: impl AsRef<[u8]>) -> Option<Value<'_>> {
        let name = name.as_ref();
        if self.surely_absent(name) {
            return None;
        }
        match Known::of(name) {
            Some(k) => self.known(k),
            None => self.get_all(name).next(),
        }
    }

    /// The first header with a known name: read from the index.
    #[inline]
    pub fn known(&self, k: Known) -> Option<Value<'_>> {
        match self.index.first[k as usize] {
            0 => None,
            u8::MAX => self.known_all(k).next(),
            line => self.value_at(usize::from(line) - 1),
        }
    }

    /// Every header with a known name, in order: no scan for one that
    /// comes once.
    pub fn known_all(&self, k: Known) -> Values<'_, &'static [u8]> {
        Values {
            h: self,
            name: k.name(),
            known: Some(k),
            from: None,
        }
    }

    /// Whether the known header (`Connection`) holds `token`, as
    /// `has_token`.
    pub fn has_known_token(&self, k: Known, token: &[u8]) -> bool {
        if self.index.more & k.bit() == 0 {
            return self.known(k).is_some_and(|v| list_has(v.0, token));
        }
        self.known_all(k).any(|v| list_has(v.0, token))
    }

    /// The value of the header at `i`.
    #[inline]
    fn value_at(&self, i: usize) -> Option<Value<'_>> {
        self.spans
            .get(i)
            .and_then(|(_, v)| self.head.get(v.clone()))
            .map(Value)
    }

    /// Whether the name at `n` is `want` (any case): lengths first.
    fn named(&self, n: &std::ops::Range<usize>, want: &[u8]) -> bool {
        n.len() == want.len() && self.head.get(n.clone()).is_some_and(|h| same_name(h, want))
    }

    /// Whether a comma-separated list header (`Connection`) holds `token`,
    /// any case, spaces around it ignored: bytes, not text.
    pub fn has_token(&self, name: impl AsRef<[u8]>, token: &[u8]) -> bool {
        match Known::of(name.as_ref()) {
            Some(k) => self.has_known_token(k, token),
            None => self.get_all(name).any(|v| list_has(v.0, token)),
        }
    }

    /// No header has a name of this length.
    fn surely_absent(&self, name: &[u8]) -> bool {
        self.index.lengths & length_bit(name) == 0
    }

    pub fn contains_key(&self, name: impl AsRef<[u8]>) -> bool {
        self.get(name).is_some()
    }

    /// Keeps only the headers `keep` says so (by name as received).
    /// Keeps the lines `keep` says to, given each name and value.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let head = &self.head;
        self.spans
            .retain(|(n, v)| keep(&head[n.clone()], &head[v.clone()]));
        self.index.forget_lines();
    }
}

/// The values of the headers of one name, in order (`Headers::get_all`,
/// `Headers::known_all`): for a `Known` name, the first from the index and
/// the rest by a scan from there only when the name comes again; for
/// another, by a scan of every line (none when no name has its length).
pub struct Values<'a, N> {
    h: &'a Headers,
    name: N,
    known: Option<Known>,
    /// The line to look from; None before the first, `usize::MAX` once
    /// there are no more.
    from: Option<usize>,
}

impl<'a, N: AsRef<[u8]>> Iterator for Values<'a, N> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        let h = self.h;
        let from = match (self.from, self.known) {
            (Some(from), _) => from,
            (None, None) => 0,
            (None, Some(k)) => match h.index.first[k as usize] {
                0 => {
                    self.from = Some(usize::MAX);
                    return None;
                }
                u8::MAX => 0,
                line => {
                    let at = usize::from(line) - 1;
                    let repeated = h.index.more & k.bit() != 0;
                    self.from = Some(if repeated { at + 1 } else { usize::MAX });
                    return h.value_at(at);
                }
            },
        };
        let want = self.name.as_ref();
        let found = h
            .spans
            .get(from..)
            .and_then(|rest| rest.iter().position(|(n, _)| h.named(n, want)));
        match found {
            Some(p) => {
                self.from = Some(from + p + 1);
                h.value_at(from + p)
            }
            None => {
                self.from = Some(usize::MAX);
                None
            }
        }
    }
}

/// Whether a comma-separated list holds `token`, any case, spaces around
/// it ignored.
fn list_has(list: &[u8], token: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// A token character of RFC 9110 5.6.2 (what httparse takes in a name).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header value's bytes as RFC 9110 allows them (and `HeaderValue`):
/// visible characters, spaces, tabs and obs-text; no NUL, CR, LF or DEL.
pub fn valid_value(v: &[u8]) -> bool {
    // Eight bytes at a time: a word with no byte below 0x20 and none that
    // is DEL is valid as it is; one with such a byte (a tab, most likely)
    // is looked at byte by byte.
    const EACH: u64 = 0x0101_0101_0101_0101;
    let below = |x: u64, n: u64| x.wrapping_sub(n * EACH) & !x & (0x80 * EACH) != 0;
    let mut words = v.chunks_exact(8);
    for w in &mut words {
        let x = eight(w);
        if (below(x, 0x20) || below(x ^ (0x7f * EACH), 1)) && !w.iter().all(|&b| value_byte(b)) {
            return false;
        }
    }
    words.remainder().iter().all(|&b| value_byte(b))
}

/// A byte a header value may hold.
fn value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    /// The minor version as sent (`HTTP/1.2` is read as 1.1, as nginx).
    pub headers: Headers,
    /// Bytes the head took, with its final empty line.
    pub len: usize,
    /// Header lines left out because their names hold bytes nginx takes
    /// but a header name cannot (`Fo@o: x`), as sent: the caller logs
    /// them (`ignore_invalid_headers`) or refuses the request.
    pub ignored: Vec<Bytes>,
}

/// A parsed response head. Small enough (128 bytes) that a move of it is
/// a few vector stores, not a call to `memcpy`: it goes by value from the
/// parser through the attempt to the response, and each of those moves
/// was a call (callgrind: some forty `memcpy` calls a proxied request).
/// What only a head put in a map has is boxed apart (`Mapped`).
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub reason: Bytes,
    pub version: Version,
    /// Every header as received: the framing, keep-alive and `X-Accel-*`
    /// ones the client never sees are read here, and `$upstream_http_*`.
    pub raw: Headers,
    pub len: usize,
    /// The headers that go on to the client, once `map` has put them in a
    /// map (None until then: a response whose headers go on as received
    /// never has one).
    pub mapped: Option<Box<Mapped>>,
}

/// A response head's headers put in a map (`ResponseHead::map`).
#[derive(Debug, Default)]
pub struct Mapped {
    pub headers: HeaderMap,
    /// The case of their names as received (`Names`).
    pub names: Names,
    /// Their order, where the map would regroup them.
    pub order: Option<Order>,
}

impl ResponseHead {
    /// Puts the headers `passes` lets on (all of them for a 101, whose
    /// `Upgrade` and `Connection` go on) in the head's map, with the case
    /// of their names (`names`) and, where the map would regroup them,
    /// their order (`order`). The error is nginx's "upstream sent ..." text.
    pub fn map(&mut self, passes: &(dyn Fn(&[u8]) -> bool + Sync)) -> Result<(), String> {
        let all = |_: &[u8]| true;
        let passes = if self.status == StatusCode::SWITCHING_PROTOCOLS {
            &all
        } else {
            passes
        };
        let (mut headers, names, order) = collect(&self.raw.head, &self.raw.spans, passes)
            .map_err(|_| "upstream sent invalid header".to_string())?;
        // One type, the last, unless it is empty (as `AsReceived::pick`).
        if let http::header::Entry::Occupied(mut e) = headers.entry(http::header::CONTENT_TYPE) {
            match e.iter().next_back().cloned() {
                Some(v) if !v.is_empty() => {
                    if e.iter().nth(1).is_some() {
                        e.insert(v);
                    }
                }
                _ => drop(e.remove_entry_mult()),
            }
        }
        self.mapped = Some(Box::new(Mapped {
            headers,
            names,
            order,
        }));
        Ok(())
    }

    /// The headers `map` put in its map; none before it was called.
    pub fn headers(&self) -> &HeaderMap {
        static NONE: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(HeaderMap::new);
        self.mapped.as_ref().map_or(&NONE, |m| &m.headers)
    }
}

/// A response's headers that go on to the client as the upstream sent
/// them, lines in its order and case: what `proxy_hide_header` and the
/// hop-by-hop rules let through, for a location whose configuration
/// changes none of them. The response's own map then holds only what
/// sluice adds (`Server`, `Connection`, `add_header`), written after these.
#[derive(Debug, Clone)]
pub struct AsReceived {
    lines: Headers,
    /// Whether a `Server`, a `Date` or a `Content-Length` line is among
    /// them, found while they were picked.
    pub server: bool,
    pub date: bool,
    pub length: bool,
    /// sluice's own `Server`, written first when the upstream's is not
    /// passed on: kept here, not in the response's map, which would then
    /// be allocated for it alone.
    pub own_server: Option<HeaderValue>,
}

impl AsReceived {
    /// The lines of `raw` that `passes` lets on; of `Content-Type` lines,
    /// the last, unless it is empty (nginx keeps one type, the last).
    pub fn pick(mut raw: Headers, passes: impl Fn(&[u8]) -> bool) -> AsReceived {
        let (mut server, mut date, mut length) = (false, false, false);
        // Content-Type lines kept, and whether the last one is empty.
        let (mut types, mut last_empty) = (0, false);
        raw.retain(|n, v| {
            let mut keep = passes(n);
            if keep {
                match n.len() {
                    4 => date |= same_name(n, b"date"),
                    6 => server |= same_name(n, b"server"),
                    12 if same_name(n, b"content-type") => {
                        last_empty = v.is_empty();
                        keep = !last_empty;
                        types += usize::from(keep);
                    }
                    14 => length |= same_name(n, b"content-length"),
                    _ => {}
                }
            }
            keep
        });
        if types > 1 || (types > 0 && last_empty) {
            // All but the last type go (all, when the last is empty).
            let mut left = if last_empty { types + 1 } else { types };
            raw.retain(|n, _| {
                if n.len() == 12 && same_name(n, b"content-type") {
                    left -= 1;
                    return left == 0;
                }
                true
            });
        }
        AsReceived {
            lines: raw,
            server,
            date,
            length,
            own_server: None,
        }
    }

    /// Each line: its name as received and its value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Value<'_>)> {
        self.lines.iter()
    }

    /// Adds its lines to a map (for HTTP/2, which writes maps): a line the
    /// map cannot hold, which `httparse` would not have let through, is
    /// left out.
    pub fn append_to(&self, map: &mut HeaderMap) {
        for (n, v) in self.lines.iter() {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n),
                HeaderValue::from_bytes(v.as_bytes()),
            ) {
                map.append(n, v);
            }
        }
    }

    /// The bytes its lines take on the wire (`name: value\r\n` each).
    pub fn wire_len(&self) -> usize {
        let own = self.own_server.as_ref().map_or(0, |v| 6 + v.len() + 4);
        own + self
            .lines
            .iter()
            .map(|(n, v)| n.len() + v.as_bytes().len() + 4)
            .sum::<usize>()
    }
}

/// Limits a request head must keep, as nginx's buffers set them:
/// the head starts in `first` bytes (`client_header_buffer_size`); a line
/// that does not fit moves to one of `count` buffers of `size` bytes
/// (`large_client_header_buffers`), and a line must fit in one.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub first: usize,
    pub count: usize,
    pub size: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            first: 1024,
            count: 4,
            size: 8192,
        }
    }
}

impl Limits {
    /// The most bytes a head may take.
    pub fn max(&self) -> usize {
        self.first
            .max(self.size)
            .saturating_add(self.count.saturating_mul(self.size))
    }

    /// Checks the head at the start of `buf` (complete or not; what follows
    /// its empty line is not looked at) against the buffers, as nginx fills
    /// them: 414 for a request line that does not fit, 494 for a header line
    /// or a head that does not.
    pub fn check(&self, buf: &[u8]) -> Result<(), HeadError> {
        // What fits the smallest buffer fits, whatever it holds.
        if buf.len() <= self.first.min(self.size) {
            return Ok(());
        }
        let head = &buf[..head_end(buf)];
        let mut cap = self.first;
        let mut used = 0usize;
        let mut large = 0usize;
        for (i, line) in head.split_inclusive(|&b| b == b'\n').enumerate() {
            let first = i == 0;
            let too_long = || {
                if first {
                    HeadError::line(414, "client sent too long URI")
                } else {
                    let shown = &line[..line.len().min(32)];
                    HeadError::header(
                        494,
                        format!(
                            "client sent too long header line: \"{}...\"",
                            String::from_utf8_lossy(shown)
                        ),
                    )
                }
            };
            if line.len() > self.size {
                return Err(too_long());
            }
            if used + line.len() > cap {
                large += 1;
                if large > self.count {
                    return Err(too_long());
                }
                cap = self.size;
                used = 0;
            }
            used += line.len();
        }
        Ok(())
    }
}

/// Where the head in `buf` ends (after its empty line, CRLF or a bare LF
/// as nginx takes both), or all of `buf` when it has not ended yet: what
/// follows (a body, the next request) is not the head's.
fn head_end(buf: &[u8]) -> usize {
    let mut at = 0;
    while let Some(i) = buf[at..].iter().position(|&b| b == b'\n') {
        let rest = &buf[at + i + 1..];
        if rest.starts_with(b"\n") {
            return at + i + 2;
        }
        if rest.starts_with(b"\r\n") {
            return at + i + 3;
        }
        at += i + 1;
    }
    buf.len()
}

/// Where the request line's version is (the line without its CR): the
/// last word, spaces after it left out (nginx reads spaces there).
fn version_word(v: &[u8]) -> std::ops::Range<usize> {
    let end = v.len() - v.iter().rev().take_while(|&&b| b == b' ').count();
    let start = v[..end]
        .iter()
        .rposition(|&b| b == b' ')
        .map_or(0, |i| i + 1);
    start..end
}

/// The version of a complete request line, read as nginx reads it:
/// `HTTP/`, a major version that starts with 1 to 9 (505 as soon as it
/// passes 1: `HTTP/2.0`, `HTTP/11`), a dot, a minor version (at most three
/// digits); `HTTP/1.N` is HTTP/1.1 for N > 0.
fn version_of(line: &[u8]) -> Result<Version, HeadError> {
    let v = line.strip_suffix(b"\r").unwrap_or(line);
    let bad = || HeadError::line(400, "client sent invalid request");
    let too_new = || HeadError::line(505, "client sent invalid version");
    let rest = v[version_word(v)].strip_prefix(b"HTTP/").ok_or_else(bad)?;
    let mut it = rest.iter();
    let mut major = match it.next() {
        Some(&d @ b'1'..=b'9') => u32::from(d - b'0'),
        _ => return Err(bad()),
    };
    loop {
        if major > 1 {
            return Err(too_new());
        }
        match it.next() {
            Some(b'.') => break,
            Some(&d) if d.is_ascii_digit() => major = major * 10 + u32::from(d - b'0'),
            _ => return Err(bad()),
        }
    }
    let mut minor = match it.next() {
        Some(&d) if d.is_ascii_digit() => u32::from(d - b'0'),
        _ => return Err(bad()),
    };
    for &d in it {
        if !d.is_ascii_digit() || minor > 99 {
            return Err(bad());
        }
        minor = minor * 10 + u32::from(d - b'0');
    }
    Ok(if minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    })
}

/// Where a parsed header's name and value lie in the buffer.
type Span = (std::ops::Range<usize>, std::ops::Range<usize>);

/// Where `part`, a slice httparse took from `base`, lies in it. httparse
/// gives an empty part that is not in the buffer for what a line leaves
/// out (the reason of "HTTP/1.1 200" without one): any empty part is an
/// empty span, where subtracting the pointers overflowed (a panic for
/// every response of such an upstream). A part with bytes is always one
/// of the buffer's.
fn span_of(base: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    if part.is_empty() {
        return 0..0;
    }
    let start = part.as_ptr() as usize - base.as_ptr() as usize;
    start..start + part.len()
}

fn spans(base: &[u8], parsed: &[httparse::Header<'_>]) -> Vec<Span> {
    let mut spans = take_spans(parsed.len());
    spans.extend(
        parsed
            .iter()
            .map(|h| (span_of(base, h.name.as_bytes()), span_of(base, h.value))),
    );
    spans
}

thread_local! {
    /// Span lists given back by dropped heads, for the next heads: a head
    /// read costs no allocation for its list. Per thread, as `h1::pool`.
    static FREE_SPANS: std::cell::RefCell<Vec<Vec<Span>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The most headers a span list kept for reuse has room for (a list
/// grown for a huge head goes back to the allocator).
const MOST_SPANS: usize = 128;

/// An empty span list with room for `n`.
fn take_spans(n: usize) -> Vec<Span> {
    super::pool::reuse(&FREE_SPANS, n)
}

impl Drop for Headers {
    fn drop(&mut self) {
        super::pool::keep(&FREE_SPANS, std::mem::take(&mut self.spans), MOST_SPANS);
    }
}

/// The request's headers over its head's bytes. Their values are not
/// checked again: httparse takes in a value exactly the bytes
/// `valid_value` does (a tab, 0x20 to 0x7E, 0x80 and up) and refuses the
/// head at any other (`accepted_request_values_are_valid`), as for
/// responses (scripts/cost: some 200 instructions a request).
fn request_headers(head: Bytes, spans: Vec<Span>) -> Headers {
    let index = Index::of(&head, &spans);
    Headers { head, spans, index }
}

/// Turns the headers' spans into the map and the names, slicing `head`:
/// only the headers `passes` lets on, asked with the name as received (the
/// others stay in the head's `raw` list; httparse has checked their names
/// and values already, as it checks every header's).
fn collect(
    head: &Bytes,
    spans: &[Span],
    passes: &(dyn Fn(&[u8]) -> bool + Sync),
) -> Result<(HeaderMap, Names, Option<Order>), HeadError> {
    let mut map = HeaderMap::with_capacity(spans.len());
    let mut names = Vec::new();
    let mut last: Option<HeaderName> = None;
    let mut interleaved = false;
    for (n, v) in spans {
        let raw = &head[n.clone()];
        let bad = || {
            HeadError::header(
                400,
                format!(
                    "client sent invalid header line: \"{}\"",
                    String::from_utf8_lossy(raw)
                ),
            )
        };
        if !passes(raw) {
            continue;
        }
        let name = match common_name(raw) {
            Some(name) => name,
            None => HeaderName::from_bytes(raw).map_err(|_| bad())?,
        };
        let value = HeaderValue::from_maybe_shared(head.slice(v.clone())).map_err(|_| bad())?;
        // Only the names written otherwise than sluice would write them.
        if !super::write::spelled_as_usual(&name, raw) {
            names.push(head.slice(n.clone()));
        }
        // A name seen before, but not just before: the map alone would
        // write its values together.
        let again = last.as_ref() == Some(&name);
        last = Some(name.clone());
        if map.append(name, value) && !again {
            interleaved = true;
        }
    }
    let order = interleaved.then(|| {
        Order(
            spans
                .iter()
                .filter_map(|(n, _)| HeaderName::from_bytes(&head[n.clone()]).ok())
                .collect(),
        )
    });
    Ok((map, Names(names), order))
}

fn invalid_header(buf: &[u8]) -> HeadError {
    // The line at fault is the last one httparse reached; name it as nginx.
    let line = buf
        .split(|&b| b == b'\n')
        .skip(1)
        .find(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            !l.is_empty()
                && (l[0] == b' '
                    || l[0] == b'\t'
                    || l.iter().any(|&b| b == 0 || b == b'\r')
                    || httparse::parse_headers(
                        &[l, b"\r\n\r\n"].concat(),
                        &mut [httparse::EMPTY_HEADER; 1],
                    )
                    .is_err())
        })
        .unwrap_or(b"");
    let shown = &line[..line.len().min(32)];
    HeadError::header(
        400,
        format!(
            "client sent invalid header line: \"{}\"",
            String::from_utf8_lossy(shown).trim_end()
        ),
    )
}

/// Parses a request head at the start of `buf` and takes it from there
/// (the names and values stay slices of it). Ok(None): incomplete, nothing
/// taken (the caller checks `Limits` and reads more).
pub fn parse_request(buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
    let mut stack = [const { MaybeUninit::uninit() }; STACK_HEADERS];
    let mut heap;
    let mut slots: &mut [MaybeUninit<httparse::Header<'_>>] = &mut stack;
    let mut config = httparse::ParserConfig::default();
    config.allow_multiple_spaces_in_request_line_delimiters(true);
    loop {
        let mut req = httparse::Request::new(&mut []);
        match config.parse_request_with_uninit_headers(&mut req, buf, slots) {
            Ok(httparse::Status::Partial) => return Ok(None),
            Ok(httparse::Status::Complete(len)) => {
                let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
                    .map_err(|_| HeadError::line(400, "client sent invalid method"))?;
                let path = span_of(buf, req.path.unwrap_or("").as_bytes());
                let version = if req.version == Some(0) {
                    Version::HTTP_10
                } else {
                    Version::HTTP_11
                };
                let spans = spans(buf, req.headers);
                let head = buf.split_to(len).freeze();
                let uri = Uri::from_maybe_shared(head.slice(path.clone()))
                    .or_else(|_| Uri::from_maybe_shared(escape_target(&head[path])))
                    .map_err(|_| HeadError::line(400, "client sent invalid request"))?;
                let headers = request_headers(head, spans);
                return Ok(Some(RequestHead {
                    method,
                    uri,
                    version,
                    headers,
                    len,
                    ignored: Vec::new(),
                }));
            }
            Err(httparse::Error::TooManyHeaders) => {
                // No count limit of its own (nginx has none): as many as the
                // head could hold.
                let most = buf.len() / 4 + 1;
                if slots.len() >= most {
                    return Err(HeadError::header(494, "client sent too large request"));
                }
                heap = vec![MaybeUninit::uninit(); most];
                slots = &mut heap;
            }
            // Spaces after the version, the line not ended yet: read once
            // it is (httparse stops at the first space).
            Err(_) if version_pending(buf) => return Ok(None),
            // A version with more digits than httparse reads ("HTTP/1.01",
            // HTTP/1.1 to nginx), the line not ended yet: read once it is,
            // as the whole line is (a 400 here refused, in pieces, what
            // the whole line passed).
            Err(httparse::Error::NewLine) if version_digits_pending(buf) => return Ok(None),
            Err(e) if e == httparse::Error::Version || odd_version(buf) => {
                let Some(line_end) = buf.iter().position(|&b| b == b'\n') else {
                    // The line is not complete: a version is still arriving.
                    return Ok(None);
                };
                // Rewritten below only when the version is the odd part
                // ("HTTP/1.2", or spaces after it): a line whose version is
                // already 1.0 or 1.1 is wrong before it ("GET /a b
                // HTTP/1.1"), and would be parsed again as it is, for ever.
                if !odd_version(buf) {
                    return Err(HeadError::line(400, "client sent invalid request"));
                }
                let line = &buf[..line_end];
                // nginx reads the line from its start: a wrong method or
                // target is found before the version is.
                before_version(line)?;
                // Read again with the version as httparse takes it:
                // HTTP/1.N as HTTP/1.1 (nginx too), spaces after it gone.
                let version = version_of(line)?;
                let v = line.strip_suffix(b"\r").unwrap_or(line);
                let at = version_word(v).start;
                let Some(shift) = (v.len() - at).checked_sub(8) else {
                    return Err(HeadError::line(400, "client sent invalid request"));
                };
                let mut fixed = BytesMut::with_capacity(buf.len());
                fixed.extend_from_slice(&buf[..at]);
                fixed.extend_from_slice(if version == Version::HTTP_10 {
                    b"HTTP/1.0"
                } else {
                    b"HTTP/1.1"
                });
                fixed.extend_from_slice(&buf[v.len()..]);
                return parse_rewritten(buf, fixed, parse_request, |len| len + shift);
            }
            Err(httparse::Error::HeaderName) if in_headers(buf) => {
                return match without_odd_names(buf, false) {
                    Some(kept) => parse_kept(buf, kept),
                    None => Err(invalid_header(buf)),
                };
            }
            Err(httparse::Error::HeaderValue | httparse::Error::NewLine) if in_headers(buf) => {
                return Err(invalid_header(buf));
            }
            Err(httparse::Error::Token) => {
                // A target with bytes that are not UTF-8 (httparse reads
                // the target as text; nginx takes any byte above 0x7F):
                // read with them percent-encoded.
                if let Some(t) = undecodable_target(buf) {
                    return parse_encoded(buf, t);
                }
                if !in_headers(buf) {
                    return Err(HeadError::line(400, "client sent invalid method"));
                }
                return Err(HeadError::line(400, "client sent invalid request"));
            }
            Err(_) => return Err(HeadError::line(400, "client sent invalid request")),
        }
    }
}

/// A target with bytes nginx takes as they are but a URI may only hold
/// percent-encoded (`"`, `<`, `>`, `` ` ``, `{`, `}`, `|`, `^`, `\\`, and
/// any byte above 0x7F), which the `http` crate's URI refuses in some
/// parts (and httparse in all, when they are not UTF-8): those bytes
/// percent-encoded, the rest as sent. Decoded,
/// the path is the same, so locations match as nginx's do; `$request_uri`
/// and the target passed upstream carry the encoded form (nginx's carry
/// the raw bytes).
fn escape_target(target: &[u8]) -> Bytes {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(target.len() + 16);
    for &b in target {
        if b >= 0x80 || b"\"<>`{}|^\\".contains(&b) {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
    Bytes::from(out)
}

/// Where the request line's target is, when it is whole (a space after
/// it) and holds bytes that are not UTF-8.
fn undecodable_target(buf: &[u8]) -> Option<std::ops::Range<usize>> {
    // httparse skips empty lines before a request line, as nginx does.
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let line = &buf[start..];
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let method = line.iter().position(|&b| b == b' ')?;
    let from = method + line[method..].iter().position(|&b| b != b' ')?;
    let len = line[from..].iter().position(|&b| b == b' ')?;
    let target = &line[from..from + len];
    (target.iter().any(|&b| b >= 0x80) && std::str::from_utf8(target).is_err())
        .then_some(start + from..start + from + len)
}

/// Parses the head in `buf` with the target at `t` percent-encoded (see
/// [`escape_target`]), and takes the head's bytes as sent from `buf`.
fn parse_encoded(
    buf: &mut BytesMut,
    t: std::ops::Range<usize>,
) -> Result<Option<RequestHead>, HeadError> {
    let encoded = escape_target(&buf[t.clone()]);
    let grown = encoded.len() - t.len();
    let mut fixed = BytesMut::with_capacity(buf.len() + grown);
    fixed.extend_from_slice(&buf[..t.start]);
    fixed.extend_from_slice(&encoded);
    fixed.extend_from_slice(&buf[t.end..]);
    // The encoded target is ASCII: this path is not taken again.
    parse_rewritten(buf, fixed, parse_request, |len| len - grown)
}

/// The head's lines so far without those whose names nginx reads but
/// flags invalid (any byte above a space other than DEL, with one that is
/// not a token character: `Fo@o`, `X(y)`); they go into `ignored`. In a
/// `response`, also without a line that starts with `HTTP/`, which nginx
/// skips ("IIS may send the duplicate HTTP/1.1 ... lines"). None when
/// there is no such line (the error is another one). A line still
/// arriving is left out: the head is then incomplete.
fn without_odd_names(buf: &[u8], response: bool) -> Option<Kept> {
    // httparse skips empty lines before the request line, as nginx does.
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let line_end = start + buf[start..].iter().position(|&b| b == b'\n')? + 1;
    let mut kept = Kept {
        head: BytesMut::with_capacity(buf.len() + 8),
        left_out: 0,
        added: 0,
        changed: false,
        ignored: Vec::new(),
    };
    kept.head.extend_from_slice(&buf[..line_end]);
    let mut at = line_end;
    while let Some(n) = buf[at..].iter().position(|&b| b == b'\n') {
        let whole = &buf[at..at + n + 1];
        at += n + 1;
        let line = whole.strip_suffix(b"\n").unwrap_or(whole);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            kept.head.extend_from_slice(whole);
            return Some(kept).filter(|k| k.changed);
        }
        if response && line.starts_with(b"HTTP/") {
            kept.changed = true;
            kept.left_out += whole.len();
            continue;
        }
        let colon = line.iter().position(|&b| b == b':');
        let name = colon.map_or(line, |c| &line[..c]);
        let odd = odd_name(name);
        if colon.is_none() && !odd && name.iter().all(|&b| is_token(b)) {
            // A name alone on its line: a field with an empty value, as
            // nginx reads it.
            kept.head.extend_from_slice(line);
            kept.head.extend_from_slice(b":");
            kept.head.extend_from_slice(&whole[line.len()..]);
            kept.added += 1;
            kept.changed = true;
        } else if odd {
            kept.changed = true;
            kept.left_out += whole.len();
            let shown = line.trim_ascii_end();
            kept.ignored.push(Bytes::copy_from_slice(shown));
        } else {
            kept.head.extend_from_slice(whole);
        }
    }
    // The line still arriving, when it may become one of those (its name
    // so far odd, or a token with no colon yet): the lines before it are
    // read without it (the head is not complete).
    let tail = &buf[at..];
    let tail = tail.strip_suffix(b"\r").unwrap_or(tail);
    let colon = tail.iter().position(|&b| b == b':');
    let name = colon.map_or(tail, |c| &tail[..c]);
    let pending = odd_name(name)
        || (colon.is_none() && !name.is_empty() && name.iter().all(|&b| is_token(b)))
        || (response && tail.starts_with(b"HTTP/"));
    Some(kept).filter(|k| k.changed || pending)
}

/// A name nginx reads but flags invalid: no space, control byte or DEL,
/// and a byte that is not a token character.
fn odd_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| b > b' ' && b != 0x7f)
        && name.iter().any(|&b| !is_token(b))
}

/// A head's lines with the odd-named ones left out, and names alone on
/// their lines given a colon.
struct Kept {
    head: BytesMut,
    /// The bytes of the lines left out.
    left_out: usize,
    /// The colons added.
    added: usize,
    /// Whether a line was left out or given a colon.
    changed: bool,
    ignored: Vec<Bytes>,
}

impl Kept {
    /// The bytes a head parsed from the kept lines took as sent.
    fn sent_len(&self, parsed: usize) -> usize {
        parsed + self.left_out - self.added
    }
}

/// Parses the head from `kept`'s lines and takes the head's bytes as sent
/// (with the lines left out) from `buf`.
fn parse_kept(buf: &mut BytesMut, mut kept: Kept) -> Result<Option<RequestHead>, HeadError> {
    // The kept lines have no odd name: this path is not taken again.
    let head = std::mem::take(&mut kept.head);
    let parsed = parse_rewritten(buf, head, parse_request, |len| kept.sent_len(len))?;
    Ok(parsed.map(|mut head| {
        head.ignored.append(&mut kept.ignored);
        head
    }))
}

/// A parsed head's length on the wire, for [`parse_rewritten`].
trait WireLen {
    fn wire_len(&mut self) -> &mut usize;
}

impl WireLen for RequestHead {
    fn wire_len(&mut self) -> &mut usize {
        &mut self.len
    }
}

impl WireLen for ResponseHead {
    fn wire_len(&mut self) -> &mut usize {
        &mut self.len
    }
}

/// Parses (with `parse`) the head of `fixed`, a copy of `buf`'s rewritten
/// where httparse could not read it, and takes the head's bytes as sent
/// from `buf`: `sent` gives their length from the length read in `fixed`.
/// The rewrite has left nothing to rewrite: `parse` does not come back
/// here for the same fault.
fn parse_rewritten<H: WireLen, E>(
    buf: &mut BytesMut,
    mut fixed: BytesMut,
    parse: fn(&mut BytesMut) -> Result<Option<H>, E>,
    sent: impl FnOnce(usize) -> usize,
) -> Result<Option<H>, E> {
    match parse(&mut fixed)? {
        Some(mut head) => {
            let len = head.wire_len();
            *len = sent(*len);
            let _ = buf.split_to(*len);
            Ok(Some(head))
        }
        None => Ok(None),
    }
}

/// What nginx finds in a request line before its version: a method of
/// upper-case letters, `_` and `-`, then one target (spaces around it)
/// that is a path or starts with a scheme.
fn before_version(line: &[u8]) -> Result<(), HeadError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let method = parts.next().unwrap_or(b"");
    if method.is_empty()
        || !method
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
    {
        return Err(HeadError::line(400, "client sent invalid method"));
    }
    let target = parts.next().unwrap_or(b"");
    if parts.count() != 1
        || !matches!(target.first(), Some(b) if *b == b'/' || b.is_ascii_alphabetic())
    {
        return Err(HeadError::line(400, "client sent invalid request"));
    }
    Ok(())
}

/// The request line is complete and its version is not plainly 1.0 or 1.1
/// (httparse stops at `HTTP/1.10` with another error), or has spaces after
/// it.
fn odd_version(buf: &[u8]) -> bool {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let line = &buf[..end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let at = version_word(line);
    let spaces_after = at.end < line.len();
    let v = &line[at];
    v.starts_with(b"HTTP/") && (spaces_after || (v != b"HTTP/1.0" && v != b"HTTP/1.1"))
}

/// The request line is still arriving and its last word, so far, is a
/// version: what follows `HTTP/`, and whether spaces came after it (a CR
/// after the word is not yet told from the line's end).
fn arriving_version(buf: &[u8]) -> Option<(&[u8], bool)> {
    if in_headers(buf) {
        return None;
    }
    let line = buf.strip_suffix(b"\r").unwrap_or(buf);
    let at = version_word(line);
    let spaces_after = at.end < line.len();
    line[at].strip_prefix(b"HTTP/").map(|v| (v, spaces_after))
}

/// The request line is still arriving and ends, so far, in a version
/// with spaces after it.
fn version_pending(buf: &[u8]) -> bool {
    arriving_version(buf).is_some_and(|(_, spaces)| spaces)
}

/// The request line is still arriving and ends, so far, in `HTTP/` and
/// digits and dots.
fn version_digits_pending(buf: &[u8]) -> bool {
    arriving_version(buf)
        .is_some_and(|(v, spaces)| !spaces && v.iter().all(|&b| b.is_ascii_digit() || b == b'.'))
}

/// Whether the request line is complete (an error is then a header's).
fn in_headers(buf: &[u8]) -> bool {
    buf.contains(&b'\n')
}

/// Parses a response head at the start of `buf` and takes it from there;
/// Ok(None): incomplete. The error is nginx's "upstream sent ..." text.
/// The headers are in `raw`; `ResponseHead::map` puts those that go on in
/// a map when the caller needs one.
pub fn parse_response(buf: &mut BytesMut) -> Result<Option<ResponseHead>, String> {
    let mut stack = [const { MaybeUninit::uninit() }; STACK_HEADERS];
    let mut heap;
    let mut slots: &mut [MaybeUninit<httparse::Header<'_>>] = &mut stack;
    loop {
        let mut resp = httparse::Response::new(&mut []);
        // "HTTP/1.1  200 OK": more than one space between the parts of the
        // status line, which nginx reads.
        let mut config = httparse::ParserConfig::default();
        config.allow_multiple_spaces_in_response_status_delimiters(true);
        match config.parse_response_with_uninit_headers(&mut resp, buf, slots) {
            Ok(httparse::Status::Partial) => return Ok(None),
            Ok(httparse::Status::Complete(len)) => {
                let status = StatusCode::from_u16(resp.code.unwrap_or(0))
                    .map_err(|_| "upstream sent no valid HTTP/1.0 header".to_string())?;
                let reason = span_of(buf, resp.reason.unwrap_or("").as_bytes());
                let version = if resp.version == Some(0) {
                    Version::HTTP_10
                } else {
                    Version::HTTP_11
                };
                let spans = spans(buf, resp.headers);
                let head = buf.split_to(len).freeze();
                let index = Index::of(&head, &spans);
                return Ok(Some(ResponseHead {
                    status,
                    reason: head.slice(reason),
                    version,
                    raw: Headers { head, spans, index },
                    len,
                    mapped: None,
                }));
            }
            Err(httparse::Error::TooManyHeaders) => {
                let most = buf.len() / 4 + 1;
                if slots.len() >= most {
                    return Err("upstream sent too big header".into());
                }
                heap = vec![MaybeUninit::uninit(); most];
                slots = &mut heap;
            }
            Err(httparse::Error::Status) => {
                // A reason with control bytes, which nginx takes (any byte
                // but CR and LF): read with the code's own reason.
                return match odd_reason(buf) {
                    OddReason::Wait => Ok(None),
                    OddReason::Invalid => Err("upstream sent no valid HTTP/1.0 header".into()),
                    OddReason::Fixed { line, sent } => {
                        let new = line.len();
                        let mut fixed = BytesMut::from(&line[..]);
                        fixed.extend_from_slice(&buf[sent..]);
                        parse_rewritten(buf, fixed, parse_response, |len| len - new + sent)
                    }
                };
            }
            Err(httparse::Error::Version) => {
                return Err("upstream sent no valid HTTP/1.0 header".into());
            }
            // A name nginx reads (and passes on) but a header name cannot
            // hold: the line is left out, the response goes on.
            Err(httparse::Error::HeaderName) => {
                let Some(mut kept) = without_odd_names(buf, true) else {
                    return Err("upstream sent invalid header".into());
                };
                let head = std::mem::take(&mut kept.head);
                return parse_rewritten(buf, head, parse_response, |len| kept.sent_len(len));
            }
            Err(_) => return Err("upstream sent invalid header".into()),
        }
    }
}

/// What [`odd_reason`] makes of a status line httparse refused.
enum OddReason {
    /// The line is not whole yet, and may become one with an odd reason.
    Wait,
    Invalid,
    /// The line as `HTTP/1.x CODE REASON`, the code's own reason in place
    /// of the odd one, and the length of the line as sent.
    Fixed {
        line: Vec<u8>,
        sent: usize,
    },
}

/// A status line whose reason phrase holds control bytes, which nginx reads
/// (its reason takes any byte but CR and LF, and a CR only before the LF):
/// `HTTP/1.0` or `HTTP/1.1`, spaces, three digits, a space, the reason.
/// Other faults stay invalid.
fn odd_reason(buf: &[u8]) -> OddReason {
    let end = buf.iter().position(|&b| b == b'\n');
    // Whole or not yet: a CR last may be the line's end arriving.
    let line = &buf[..end.unwrap_or(buf.len())];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(rest) = line
        .strip_prefix(b"HTTP/1.1")
        .or_else(|| line.strip_prefix(b"HTTP/1.0"))
    else {
        return OddReason::Invalid;
    };
    let spaces = rest.iter().take_while(|&&b| b == b' ').count();
    let rest = &rest[spaces..];
    let whole = spaces > 0
        && rest.len() > 4
        && rest[..3].iter().all(u8::is_ascii_digit)
        && rest[3] == b' '
        && !rest.contains(&b'\r');
    match end {
        _ if !whole => OddReason::Invalid,
        None => OddReason::Wait,
        Some(e) => {
            let code = StatusCode::from_bytes(&rest[..3]).ok();
            let reason = code.and_then(|c| c.canonical_reason()).unwrap_or("");
            let mut fixed = Vec::with_capacity(line.len() + 16);
            fixed.extend_from_slice(&line[..8]);
            fixed.push(b' ');
            fixed.extend_from_slice(&rest[..3]);
            fixed.push(b' ');
            fixed.extend_from_slice(reason.as_bytes());
            fixed.extend_from_slice(b"\r\n");
            OddReason::Fixed {
                line: fixed,
                sent: e + 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_request(&mut BytesMut::from(s.as_bytes()))
    }

    fn resp(s: &[u8]) -> Result<Option<ResponseHead>, String> {
        let mut h = parse_response(&mut BytesMut::from(s))?;
        if let Some(h) = h.as_mut() {
            h.map(&|_| true)?;
        }
        Ok(h)
    }

    /// Bytes nginx takes in a target but a URI holds only encoded are taken
    /// percent-encoded; a target the `http` crate takes as it is stays so.
    #[test]
    fn a_target_with_bytes_only_an_encoded_uri_holds_is_taken_encoded() {
        let target = |raw: &[u8]| {
            let mut b = BytesMut::from(&b"GET "[..]);
            b.extend_from_slice(raw);
            b.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
            let head = parse_request(&mut b)
                .unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(raw)))
                .expect("whole");
            assert!(b.is_empty());
            head.uri.to_string()
        };
        assert_eq!(target(b"/a?q={\"x\":1}"), "/a?q=%7B%22x%22:1%7D");
        assert_eq!(
            target(b"/caf\xc3\xa9?q=\"\xc3\xa9\""),
            "/caf%C3%A9?q=%22%C3%A9%22"
        );
        assert_eq!(target(b"/a<b>`"), "/a%3Cb%3E%60");
        assert_eq!(target(b"/a%3Cb?x=%zz"), "/a%3Cb?x=%zz");
        assert_eq!(target(b"/a{b}|c"), "/a{b}|c");
        // Not UTF-8 (httparse reads the target as text; nginx takes it):
        // encoded too, with what a URI refuses beside it.
        assert_eq!(target(b"/caf\xe9"), "/caf%E9");
        assert_eq!(target(b"/\xff\xfe?q=\xc3<"), "/%FF%FE?q=%C3%3C");
        // Not a byte a target may hold at all: refused.
        for bad in [&b"/a\x7fb"[..], b"/a\x01b", b"/caf\xe9\x01"] {
            let mut b = BytesMut::from(&b"GET "[..]);
            b.extend_from_slice(bad);
            b.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
            assert_eq!(parse_request(&mut b).err().map(|e| e.code), Some(400));
        }
    }

    /// A target that is not UTF-8, read with its bytes encoded: in pieces,
    /// after empty lines, before a pipelined request (which stays whole),
    /// and with an odd version too.
    #[test]
    fn an_undecodable_target_is_read_encoded() {
        let mut b = BytesMut::new();
        for piece in [
            &b"\r\nGET /caf\xe9"[..],
            b" HTTP/1.1\r\nHo",
            b"st: a\r\n\r\nGET /n",
        ] {
            assert!(parse_request(&mut b).expect("no error").is_none());
            b.extend_from_slice(piece);
        }
        let head = parse_request(&mut b).expect("no error").expect("whole");
        assert_eq!(head.uri.to_string(), "/caf%E9");
        assert_eq!(
            head.len,
            b"\r\nGET /caf\xe9 HTTP/1.1\r\nHost: a\r\n\r\n".len()
        );
        assert_eq!(&b[..], b"GET /n");
        let mut b = BytesMut::from(&b"GET  /\xe9\xff  HTTP/1.3\r\nHost: a\r\n\r\n"[..]);
        let head = parse_request(&mut b).expect("no error").expect("whole");
        assert_eq!(head.uri.to_string(), "/%E9%FF");
        assert!(b.is_empty());
        // A method that is not UTF-8 is still the method's fault.
        let mut b = BytesMut::from(&b"G\xe9T /\xe9 HTTP/1.1\r\nHost: a\r\n\r\n"[..]);
        assert_eq!(parse_request(&mut b).err().map(|e| e.code), Some(400));
    }

    /// A line wrong before a version that is already 1.0 or 1.1 (a space in
    /// the target) is refused: it was once rewritten into itself and parsed
    /// again without end, until the worker's stack overflowed.
    #[test]
    fn a_line_wrong_before_a_right_version_is_refused() {
        for line in [
            "GET /a b HTTP/1.1",
            "GET /a b HTTP/1.0",
            "GET /a b c HTTP/1.1",
            "GET  /a  b  HTTP/1.1",
        ] {
            let e = req(&format!("{line}\r\nHost: x\r\n\r\n"))
                .map(|_| ())
                .unwrap_err();
            assert_eq!(e.code, 400, "{line}");
        }
        // An odd version is still read as 1.1, once.
        let h = req("GET /a HTTP/1.2\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.version, Version::HTTP_11);
        // Its digits arriving one by one: each part waits for the line's
        // end, where a digit past httparse's "HTTP/1.0" was once a 400
        // (the split property found it).
        let wire = b"GET /a HTTP/1.01\r\nHost: x\r\n\r\n";
        for n in 1..wire.len() {
            waits(&wire[..n], parse_request);
        }
        let h = req("GET /a HTTP/1.01\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.version, Version::HTTP_11);
        // A minor version past 999 is refused once the line is whole (as
        // nginx, leading zeros are no digits of the number).
        waits(b"GET /a HTTP/1.1000", parse_request);
        assert_eq!(
            req("GET /a HTTP/1.1000\r\n\r\n")
                .map(|_| ())
                .unwrap_err()
                .code,
            400
        );
        let h = req("GET /a HTTP/1.0001\r\nHost: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(
            req("GET /a b HTTP/1.2\r\nHost: x\r\n\r\n")
                .map(|_| ())
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn common_names_are_from_bytes_names() {
        for n in [
            "date",
            "ETag",
            "VARY",
            "Server",
            "expires",
            "Location",
            "connection",
            "Set-Cookie",
            "Content-Type",
            "last-modified",
            "Cache-Control",
            "Accept-Ranges",
            "CONTENT-LENGTH",
            "content-encoding",
            "Transfer-Encoding",
            "keep-alive",
            "x-date",
            "dat",
            "Vary2",
        ] {
            let known = common_name(n.as_bytes());
            let parsed = HeaderName::from_bytes(n.as_bytes()).ok();
            assert!(known.is_none() || known == parsed, "{n}");
        }
        assert_eq!(
            common_name(b"Content-Type"),
            Some(http::header::CONTENT_TYPE)
        );
        assert_eq!(common_name(b"Content-Typf"), None);
        assert_eq!(common_name(b"x-custom-thing"), None);
    }

    #[test]
    fn same_name_is_eq_ignore_ascii_case() {
        let bytes: Vec<u8> = (0u8..=255).collect();
        let names: [&[u8]; 12] = [
            b"connection",
            b"CONNECTION",
            b"Connection",
            b"content-length",
            b"Content-Length",
            b"x^y",
            b"x~y",
            b"a@b[c`d{e",
            b"A`B{C@D[E",
            b"host",
            b"date",
            b"",
        ];
        for a in names {
            for b in names {
                assert_eq!(same_name(a, b), a.eq_ignore_ascii_case(b), "{a:?} {b:?}");
            }
        }
        // Every pair of bytes, in names of each kind of length (short,
        // words, a word and a tail), first, in the middle and last.
        for len in [1usize, 2, 3, 5, 8, 13, 16] {
            for at in [0, len / 2, len - 1] {
                for &x in &bytes {
                    for &y in &bytes {
                        let mut a = vec![b'k'; len];
                        let mut b = a.clone();
                        a[at] = x;
                        b[at] = y;
                        let want = a.eq_ignore_ascii_case(&b);
                        assert_eq!(same_name(&a, &b), want, "{len} {at} {x} {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn sized_pairs_are_the_same_headers_whatever_the_room() {
        let pairs: [(&[u8], &[u8]); 4] = [
            (b"Host", b"x"),
            (b"bad name", b"dropped"),
            (b"X-A", b"1\x802"),
            (b"x-a", b""),
        ];
        let plain = Headers::from_byte_pairs(pairs);
        let exact = 4 + 1 + 3 + 3 + 3;
        for (count, bytes) in [(0, 0), (3, exact), (1, 2), (10, 1000)] {
            let h = Headers::from_byte_pairs_in(pairs, count, bytes);
            assert!(h.iter().eq(plain.iter()), "{count} {bytes}");
            assert_eq!(h.wire_len(), exact);
            assert_eq!(h.get_all("x-a").count(), 2);
        }
    }

    #[test]
    fn requests() {
        let h = req("GET /a?b HTTP/1.1\r\nHost: x\r\nX-Case: 1\r\nx-case: 2\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!(h.method, Method::GET);
        assert_eq!(h.uri, "/a?b");
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.headers.get_all("x-case").count(), 2);
        assert_eq!(h.headers.len(), 3);
        // Names keep their case and order; lookups ignore case.
        let names: Vec<&[u8]> = h.headers.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Host"[..], b"X-Case", b"x-case"]);
        assert_eq!(
            h.headers.get("X-CASE").map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        assert_eq!(h.headers.get(http::header::HOST), Some(Value(b"x")));
        assert!(!h.headers.contains_key("x-cas"));
        assert_eq!(h.len, 52);
        assert!(req("GET / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
        assert!(req("GET / HTT").unwrap().is_none());
        // HTTP/1.N is HTTP/1.1; 2.0 is 505; garbage is 400.
        let h = req("GET / HTTP/1.2\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.version, h.len), (Version::HTTP_11, 27));
        let h = req("GET / HTTP/1.10\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.version, h.len), (Version::HTTP_11, 28));
        assert_eq!(req("GET / HTTP/2.0\r\n\r\n").unwrap_err().code, 505);
        assert_eq!(req("GET  /  HTTP/10.1\r\n\r\n").unwrap_err().code, 505);
        // As nginx: spaces after the version, a major past 1 without a
        // dot (505), a minor of zeros (1.0), at most three minor digits.
        for (line, version) in [
            ("GET / HTTP/1.1 ", Version::HTTP_11),
            ("GET / HTTP/1.0   ", Version::HTTP_10),
            ("GET / HTTP/1.00", Version::HTTP_10),
            ("GET / HTTP/1.100 ", Version::HTTP_11),
        ] {
            let wire = format!("{line}\r\nHost: x\r\n\r\n");
            let h = req(&wire).unwrap().unwrap();
            assert_eq!((h.version, h.len), (version, wire.len()), "{line}");
        }
        for (line, code) in [
            ("GET / HTTP/1.1\r", 400),
            ("GET / HTTP/1.1 \r", 400),
            ("GET / HTTP/11", 505),
            ("GET / HTTP/20", 505),
            ("GET / HTTP/2", 505),
            ("GET / HTTP/1.1000", 400),
            ("GET / HTTP/0.9", 400),
            ("GET / HTTP/1", 400),
            ("GET / HTTP/1.", 400),
            ("GET / HTTP/1.1 x", 400),
        ] {
            let e = req(&format!("{line}\r\nHost: x\r\n\r\n")).unwrap_err();
            assert_eq!(e.code, code, "{line}");
        }
        // What comes before the version is found first, as nginx reads.
        for (line, why) in [
            ("get / HTTP/2.0", "client sent invalid method"),
            ("G@T / HTTP/1.2", "client sent invalid method"),
            ("GET /a b HTTP/2.0", "client sent invalid request"),
            ("GET HTTP/2.0", "client sent invalid request"),
            ("GET * HTTP/2.0", "client sent invalid request"),
            ("GET ../a HTTP/1.2", "client sent invalid request"),
        ] {
            let e = req(&format!("{line}\r\nHost: x\r\n\r\n")).unwrap_err();
            assert_eq!((e.code, e.why.as_ref()), (400, why), "{line}");
        }
        let h = req("M-SEARCH_X /a HTTP/1.5\r\nHost: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.method.as_str(), h.version),
            ("M-SEARCH_X", Version::HTTP_11)
        );
        assert_eq!(req("GET / FTP/1.0\r\n\r\n").unwrap_err().code, 400);
        assert_eq!(req("\x16\x03\x01\r\n\r\n").unwrap_err().code, 400);
        let h = req("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.version, Version::HTTP_10);
    }

    #[test]
    fn hostile_heads() {
        for bad in [
            "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        ] {
            let e = req(bad).unwrap_err();
            assert_eq!((e.code, e.in_line), (400, false), "{bad:?}: {e:?}");
        }
        // Many headers: no fixed count limit.
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..300 {
            many.push_str(&format!("X-{i}: v\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(req(&many).unwrap().unwrap().headers.len(), 300);
    }

    /// A reason phrase with control bytes (nginx takes any byte but CR and
    /// LF there) is read, with the code's own reason in its place; other
    /// faults of the line stay invalid.
    #[test]
    fn odd_reasons_are_read_with_the_codes_own() {
        for (wire, reason) in [
            (
                &b"HTTP/1.1 200 \x00OK\r\nContent-Length: 2\r\n\r\nokrest"[..],
                "OK",
            ),
            (b"HTTP/1.0  204 N\x0b Content\nX-A: 1\n\nrest", "No Content"),
            (
                b"HTTP/1.1 299 a\x7fb\r\nContent-Length: 2\r\n\r\nokrest",
                "",
            ),
        ] {
            let mut buf = BytesMut::from(wire);
            let h = resp_in(&mut buf).unwrap_or_else(|e| panic!("{wire:?}: {e}"));
            assert_eq!(&h.reason[..], reason.as_bytes(), "{wire:?}");
            assert_eq!(h.len, wire.len() - buf.len(), "{wire:?}");
            assert!(buf.ends_with(b"rest"), "{wire:?}");
            assert!(buf.len() <= 6, "{wire:?}");
        }
        waits(b"HTTP/1.1 200 \x01O", parse_response);
        waits(b"HTTP/1.1 200 \x01OK\r", parse_response);
        for bad in [
            &b"HTTP/1.1 200 O\rK\r\n\r\n"[..],
            b"HTTP/1.1 2x0 \x01\r\n\r\n",
            b"HTTP/1.1 099 \x01\r\n\r\n",
            b"HTTP/1.2 200 \x01\r\n\r\n",
            b"HTTP/1.1\t200 \x01\r\n\r\n",
        ] {
            assert!(parse_response(&mut BytesMut::from(bad)).is_err(), "{bad:?}");
        }
    }

    fn resp_in(buf: &mut BytesMut) -> Result<ResponseHead, String> {
        parse_response(buf)?.ok_or_else(|| "incomplete".to_string())
    }

    /// `parse` on a head still arriving: nothing yet, and nothing taken.
    fn waits<T, E: std::fmt::Debug>(
        cut: &[u8],
        parse: impl Fn(&mut BytesMut) -> Result<Option<T>, E>,
    ) {
        let mut buf = BytesMut::from(cut);
        assert!(parse(&mut buf).unwrap().is_none(), "{cut:?}");
        assert_eq!(buf.len(), cut.len(), "{cut:?}");
    }

    /// A response line that starts with `HTTP/` after the status line
    /// (IIS's duplicate status line) is left out, as nginx skips it; in a
    /// request it is a bad header name still.
    #[test]
    fn duplicate_status_lines_in_responses_are_skipped() {
        let wire =
            "HTTP/1.1 200 OK\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\n\r\nokrest";
        let mut buf = BytesMut::from(wire.as_bytes());
        let h = parse_response(&mut buf).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::OK);
        let names: Vec<&[u8]> = h.raw.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Content-Length"[..], b"X-A"]);
        assert_eq!(h.len, wire.len() - 6);
        assert_eq!(&buf[..], b"okrest");
        waits(b"HTTP/1.1 200 OK\r\nHTTP/1.", parse_response);
        waits(
            b"HTTP/1.1 200 OK\r\nHTTP/1.1 200 OK\r\nX-A: 1\r\n",
            parse_response,
        );
        assert!(req("GET / HTTP/1.1\r\nHost: a\r\nHTTP/1.1 200 OK\r\n\r\n").is_err());
    }

    /// A name with bytes nginx reads but flags invalid (`@`, `(`, `{`,
    /// obs-text) leaves its line out, the rest of the head read as sent;
    /// a space, control byte or DEL in a name is still a 400.
    #[test]
    fn odd_names_are_left_out_with_their_lines() {
        let wire =
            "GET / HTTP/1.1\r\nHost: a\r\nFo@o: x \r\nX(y):z\nX-Ok: y\r\n{\u{e9}}: w\r\n\r\nrest";
        let mut buf = BytesMut::from(wire.as_bytes());
        let h = parse_request(&mut buf).unwrap().unwrap();
        let names: Vec<&[u8]> = h.headers.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Host"[..], b"X-Ok"]);
        let ignored: Vec<&[u8]> = h.ignored.iter().map(|l| &l[..]).collect();
        assert_eq!(
            ignored,
            [&b"Fo@o: x"[..], b"X(y):z", "{\u{e9}}: w".as_bytes()]
        );
        assert_eq!(h.len, wire.len() - 4);
        assert_eq!(&buf[..], b"rest");
        // Still arriving: nothing taken, whether the odd line is whole yet
        // or not.
        waits(b"GET / HTTP/1.1\r\nFo@", parse_request);
        waits(b"GET / HTTP/1.1\r\nFo@o: x\r\nHost: a\r\n", parse_request);
        for bad in [
            "GET / HTTP/1.1\r\nFo@o : x\r\n\r\n",
            "GET / HTTP/1.1\r\nFo@ o: x\r\n\r\n",
            "GET / HTTP/1.1\r\nFo@\x7fo: x\r\n\r\n",
            "GET / HTTP/1.1\r\nFo@o: x\r\nBad Name: y\r\n\r\n",
            "GET / HTTP/1.1\r\nFo@o: x\r\nHost: a\0b\r\n\r\n",
        ] {
            let e = req(bad).unwrap_err();
            assert_eq!((e.code, e.in_line), (400, false), "{bad:?}: {e:?}");
        }
        // A name alone on its line: a field with an empty value (nginx);
        // one nginx flags invalid is left out.
        let wire = "GET / HTTP/1.1\r\nHost: a\r\nX-Foo\r\nX@Bar\r\nX-Baz\n\r\n";
        let h = req(wire).unwrap().unwrap();
        let fields: Vec<(&[u8], &[u8])> =
            h.headers.iter().map(|(n, v)| (n, v.as_bytes())).collect();
        assert_eq!(
            fields,
            [(&b"Host"[..], &b"a"[..]), (b"X-Foo", b""), (b"X-Baz", b"")]
        );
        assert_eq!((h.len, h.ignored.len()), (wire.len(), 1));
        assert!(req("GET / HTTP/1.1\r\nX-Foo\r\nX-B").unwrap().is_none());
        let b = b"HTTP/1.1 200 OK\r\nX-Foo\r\nContent-Length: 2\r\n\r\nok";
        let mut buf = BytesMut::from(&b[..]);
        let h = parse_response(&mut buf).unwrap().unwrap();
        assert_eq!((&buf[..], h.len, h.raw.len()), (&b"ok"[..], b.len() - 2, 2));
        // With an odd version and an odd name both.
        let h = req("GET / HTTP/1.2\r\nFo@o: x\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.headers.len(), h.ignored.len()), (1, 1));
    }

    #[test]
    fn a_head_ends_at_its_empty_line_with_or_without_cr() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"), 27);
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\nbody"), 24);
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\r\nbody"), 25);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), 25);
        assert_eq!(head_end(b""), 0);
        assert_eq!(head_end(b"\n"), 1);
    }

    #[test]
    fn limits_as_nginx_buffers() {
        let l = Limits {
            first: 1024,
            count: 2,
            size: 1024,
        };
        let long_line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(1100));
        assert_eq!(l.check(long_line.as_bytes()).unwrap_err().code, 414);
        // Even incomplete: the line is already too long.
        assert_eq!(
            l.check(&long_line.as_bytes()[..1050]).unwrap_err().code,
            414
        );
        let long_header = format!("GET / HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(1100));
        let e = l.check(long_header.as_bytes()).unwrap_err();
        assert_eq!(e.code, 494);
        assert!(e.why.contains("\"Cookie: ccc"), "{}", e.why);
        // Lines that each fit but fill more than the buffers.
        let mut big = String::from("GET / HTTP/1.1\r\n");
        for _ in 0..5 {
            big.push_str(&format!("X: {}\r\n", "v".repeat(600)));
        }
        assert_eq!(l.check(big.as_bytes()).unwrap_err().code, 494);
        let mut fits = String::from("GET / HTTP/1.1\r\n");
        for _ in 0..3 {
            fits.push_str(&format!("X: {}\r\n", "v".repeat(600)));
        }
        l.check(fits.as_bytes()).unwrap();
        // What follows the head's empty line (a body) is not the head's.
        for end in ["\r\n\r\n", "\n\n"] {
            let with_body = format!("POST / HTTP/1.1{end}{}", "x".repeat(5000));
            l.check(with_body.as_bytes()).unwrap();
        }
        assert!(l.max() >= 3072);
    }

    #[test]
    fn responses() {
        let b = b"HTTP/1.1 404 Gone Away\r\nContent-Length: 3\r\n\r\nabc";
        let mut buf = BytesMut::from(&b[..]);
        let h = parse_response(&mut buf).unwrap().unwrap();
        assert_eq!(&buf[..], b"abc");
        assert_eq!(h.status, 404);
        assert_eq!(&h.reason[..], b"Gone Away");
        assert_eq!(h.len, b.len() - 3);
        assert!(resp(b"HTTP/1.1 200 OK\r\n").unwrap().is_none());
        assert!(resp(b"SSH-2.0\r\n\r\n").is_err());
        assert!(resp(b"HTTP/1.1 200 OK\r\nA : b\r\n\r\n").is_err());
        // A name nginx passes on but a header name cannot hold: its line
        // is left out, the rest read as sent; a space in a name is still
        // an error.
        let b = b"HTTP/1.1 200 OK\r\nFo@o: x\r\nContent-Length: 3\r\n(y): z\r\n\r\nabc";
        let mut buf = BytesMut::from(&b[..]);
        let h = parse_response(&mut buf).unwrap().unwrap();
        assert_eq!((&buf[..], h.len), (&b"abc"[..], b.len() - 3));
        let names: Vec<&[u8]> = h.raw.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Content-Length"[..]]);
        let part = b"HTTP/1.1 200 OK\r\nFo@o: x\r\nContent-";
        assert!(resp(part).unwrap().is_none());
        assert!(resp(b"HTTP/1.1 200 OK\r\nFo@o: x\r\nA b: c\r\n\r\n").is_err());
    }

    /// A dropped head's span list serves the next head read on the
    /// thread; one grown for a huge head is not kept.
    #[test]
    fn span_lists_are_reused() {
        let kept = || FREE_SPANS.with(|f| f.borrow().len());
        let a = req("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\r\n")
            .unwrap()
            .unwrap();
        let ptr = a.headers.spans.as_ptr();
        drop(a);
        let before = kept();
        let b = req("GET / HTTP/1.1\r\nHost: b\r\n\r\n").unwrap().unwrap();
        assert_eq!(b.headers.spans.as_ptr(), ptr);
        assert_eq!(kept(), before - 1);
        assert_eq!(b.headers.get("host").map(|v| v.as_bytes()), Some(&b"b"[..]));
        drop(b);
        let many: String = (0..MOST_SPANS + 1)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let big = req(&format!("GET / HTTP/1.1\r\n{many}\r\n"))
            .unwrap()
            .unwrap();
        assert_eq!(big.headers.len(), MOST_SPANS + 1);
        let before = kept();
        drop(big);
        assert_eq!(kept(), before, "a list grown past MOST_SPANS");
    }

    /// List tokens are found whole, in any case and any of the lines.
    #[test]
    fn list_tokens() {
        let h = Headers::from_pairs([
            ("Connection", "keep-alive , Upgrade"),
            ("connection", "  CLOSE"),
            ("X", "closed, notclose"),
        ]);
        assert!(h.has_token("connection", b"upgrade"));
        assert!(h.has_token("Connection", b"close"));
        assert!(h.has_token("connection", b"keep-alive"));
        assert!(!h.has_token("x", b"close"));
        assert!(!h.has_token("y", b"close"));
        assert!(!h.has_token("connection", b"keep"));
    }

    /// Of an upstream's `Content-Type` lines, one goes on, the last, and
    /// none when the last is empty (nginx's one type), both in the map and
    /// as received.
    #[test]
    fn one_content_type_the_last() {
        let cases: [(&[&str], Option<&str>); 6] = [
            (&["a/b"], Some("a/b")),
            (&["a/b", "c/d"], Some("c/d")),
            (&["a/b", "", "c/d"], Some("c/d")),
            (&["a/b", ""], None),
            (&[""], None),
            (&[], None),
        ];
        for (types, want) in cases {
            let mut head = String::from("HTTP/1.1 200 OK\r\nX-A: 1\r\n");
            for t in types {
                head.push_str(&format!("Content-Type: {t}\r\nX-B: 2\r\n"));
            }
            head.push_str("\r\n");
            let parsed = || {
                parse_response(&mut BytesMut::from(head.as_bytes()))
                    .expect("parses")
                    .expect("whole")
            };
            let mut mapped = parsed();
            mapped.map(&|_: &[u8]| true).expect("maps");
            let got: Vec<&[u8]> = mapped
                .headers()
                .get_all("content-type")
                .iter()
                .map(|v| v.as_bytes())
                .collect();
            assert_eq!(
                got,
                want.map(str::as_bytes).into_iter().collect::<Vec<_>>(),
                "{types:?}"
            );
            let lines = AsReceived::pick(parsed().raw, |_| true);
            let got: Vec<&[u8]> = lines
                .iter()
                .filter(|(n, _)| same_name(n, b"content-type"))
                .map(|(_, v)| v.as_bytes())
                .collect();
            assert_eq!(
                got,
                want.map(str::as_bytes).into_iter().collect::<Vec<_>>(),
                "{types:?}"
            );
            assert_eq!(
                lines.iter().count(),
                1 + types.len() + usize::from(want.is_some())
            );
        }
    }

    /// Only the headers `passes` lets on go into the map (all of them for
    /// a 101); the raw list keeps every one, and a bad value is refused in
    /// a header left out as in any other.
    #[test]
    fn response_headers_left_out_stay_raw() {
        let passes =
            |n: &[u8]| !n.eq_ignore_ascii_case(b"connection") && !n.eq_ignore_ascii_case(b"date");
        let parse = |b: &[u8]| {
            let mut h = parse_response(&mut BytesMut::from(b))?;
            if let Some(h) = h.as_mut() {
                h.map(&passes)?;
            }
            Ok::<_, String>(h)
        };
        let h = parse(b"HTTP/1.1 200 OK\r\nDate: d\r\nX-A: 1\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        let kept: Vec<&str> = h.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(kept, vec!["x-a"]);
        assert_eq!(h.raw.len(), 3);
        assert_eq!(
            h.raw.get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
        assert_eq!(h.raw.get("DATE").map(|v| v.as_bytes()), Some(&b"d"[..]));
        let up = parse(b"HTTP/1.1 101 Switching\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(up.headers().contains_key("connection"));
        // A name or value httparse refuses is refused in a header left out
        // too: nothing checks them again.
        for bad in [
            &b"HTTP/1.1 200 OK\r\nDate: a\x01b\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nDate: a\x00b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nDate: a\x7fb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nDate: a\rb\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nDate : ab\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{}", bad.escape_ascii());
        }
        // One nginx reads but a name cannot hold is left out whole.
        let h = parse(b"HTTP/1.1 200 OK\r\nDa(te: ab\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.raw.is_empty() && h.headers().is_empty());
    }

    /// Status lines nginx reads: no reason, an empty one, wide spaces.
    #[test]
    fn status_lines_nginx_reads() {
        for (line, reason) in [
            (&b"HTTP/1.1 200\r\n"[..], &b""[..]),
            (b"HTTP/1.1 200 \r\n", b""),
            (b"HTTP/1.1  200  OK\r\n", b"OK"),
            (b"HTTP/1.0 404 Not Found\r\n", b"Not Found"),
        ] {
            let mut b = line.to_vec();
            b.extend_from_slice(b"X-E:\r\nContent-Length: 2\r\n\r\nok");
            let h = resp(&b)
                .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(line)))
                .expect("whole");
            assert_eq!(&h.reason[..], reason, "{:?}", String::from_utf8_lossy(line));
            assert_eq!(h.raw.get("x-e").map(|v| v.as_bytes().len()), Some(0));
            assert_eq!(h.len, b.len() - 2);
        }
    }

    /// The order of the upstream's lines is kept only when a name comes
    /// back after another; the case of a name is kept only when it is not
    /// how sluice writes it.
    #[test]
    fn response_order_and_names() {
        let order = |b: &[u8]| {
            let h = resp(b).unwrap().unwrap();
            h.mapped.and_then(|m| m.order).map(|o| {
                o.0.iter()
                    .map(|n| n.as_str().to_string())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            order(b"HTTP/1.1 200 OK\r\nA: 1\r\nA: 2\r\nB: 3\r\n\r\n"),
            None
        );
        assert_eq!(
            order(b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
            None
        );
        assert_eq!(
            order(b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\na: 3\r\n\r\n"),
            Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
        );
        let h = resp(b"HTTP/1.1 200 OK\r\nContent-Type: x\r\netag: 1\r\nETag: 2\r\nx-one: 1\r\nX-Two: 2\r\n\r\n")
            .unwrap()
            .unwrap();
        let kept: Vec<&[u8]> = h
            .mapped
            .as_ref()
            .map_or(&[][..], |m| &m.names.0[..])
            .iter()
            .map(|b| &b[..])
            .collect();
        assert_eq!(kept, vec![&b"etag"[..], b"x-one"]);
    }

    use proptest::prelude::*;

    type Parsed = (String, String, usize, Vec<(String, Vec<u8>)>);

    /// The outcome of a parse, comparable.
    fn outcome(b: &[u8]) -> Option<Result<Parsed, u16>> {
        match parse_request(&mut BytesMut::from(b)) {
            Ok(None) => None,
            Ok(Some(h)) => Some(Ok(parsed(&h))),
            Err(e) => Some(Err(e.code)),
        }
    }

    /// What a parsed head says: method, target, length, the fields as sent.
    fn parsed(h: &RequestHead) -> Parsed {
        (
            h.method.to_string(),
            h.uri.to_string(),
            h.len,
            h.headers
                .iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        v.as_bytes().to_vec(),
                    )
                })
                .collect(),
        )
    }

    const KNOWN: [Known; 6] = [
        Known::Host,
        Known::Expect,
        Known::Upgrade,
        Known::Connection,
        Known::ContentLength,
        Known::TransferEncoding,
    ];

    proptest! {
        /// `valid_value`, eight bytes at a time, says what a byte-by-byte
        /// check says, for values of any bytes and ones mostly visible.
        #[test]
        fn valid_value_by_words(
            any_bytes in proptest::collection::vec(any::<u8>(), 0..40),
            mostly in proptest::collection::vec(prop_oneof![8 => 0x20u8..0x7f, 1 => Just(b'\t'), 1 => any::<u8>()], 0..40),
        ) {
            for v in [&any_bytes, &mostly] {
                prop_assert_eq!(valid_value(v), v.iter().all(|&b| value_byte(b)));
            }
        }
    }

    /// Each byte that may not be in a value, at each place of a value
    /// longer than a word, is found; a tab, obs-text and DEL's neighbours
    /// pass.
    #[test]
    fn valid_value_each_place() {
        for at in 0..20 {
            for b in 0..=255u8 {
                let mut v = vec![b'a'; 20];
                v[at] = b;
                assert_eq!(valid_value(&v), value_byte(b), "{b:#x} at {at}");
            }
        }
    }

    /// A response head is moved by value from the parser to the response:
    /// kept at 128 bytes, the most a move copies with inline stores
    /// rather than a call to `memcpy` (see `ResponseHead`).
    #[test]
    fn response_head_moves_inline() {
        assert!(
            std::mem::size_of::<ResponseHead>() <= 128,
            "{}",
            std::mem::size_of::<ResponseHead>()
        );
    }

    /// A name is a known one exactly when it is that name in some case:
    /// each known name with every byte in turn replaced by each of the 256
    /// (a `-` by CR, which differs from it in the case bit only, too).
    #[test]
    fn known_names_by_words() {
        for k in KNOWN {
            assert_eq!(Known::of(k.name()), Some(k));
            assert_eq!(Known::of(&k.name().to_ascii_uppercase()), Some(k));
            for at in 0..k.name().len() {
                for b in 0..=255u8 {
                    let mut n = k.name().to_vec();
                    n[at] = b;
                    let same = n.eq_ignore_ascii_case(k.name());
                    assert_eq!(
                        Known::of(&n),
                        same.then_some(k),
                        "{:?}",
                        String::from_utf8_lossy(&n)
                    );
                }
            }
        }
        for n in [
            &b""[..],
            b"hos",
            b"hosts",
            b"x-host",
            b"content-lengt",
            b"transfer-encodings",
        ] {
            assert_eq!(Known::of(n), None);
        }
    }

    /// A name that comes more than once: `known` gives the first,
    /// `known_all` and `has_known_token` every one; a line past what the
    /// index counts is found by the scan.
    #[test]
    fn known_repeated_and_far() {
        let h = Headers::from_pairs([
            ("Connection", "keep-alive"),
            ("X", "1"),
            ("connection", "Close"),
        ]);
        assert_eq!(
            h.known(Known::Connection).map(|v| v.as_bytes()),
            Some(&b"keep-alive"[..])
        );
        assert_eq!(h.known_all(Known::Connection).count(), 2);
        assert!(h.has_known_token(Known::Connection, b"close"));
        assert!(h.has_token("CONNECTION", b"keep-alive"));
        assert!(!h.has_known_token(Known::Upgrade, b"close"));
        let mut lines: Vec<(String, String)> =
            (0..70_000).map(|i| ("x".into(), i.to_string())).collect();
        lines.push(("Host".into(), "far".into()));
        let h = Headers::from_pairs(lines.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        assert_eq!(
            h.known(Known::Host).map(|v| v.as_bytes()),
            Some(&b"far"[..])
        );
        assert_eq!(h.get("host").map(|v| v.as_bytes()), Some(&b"far"[..]));
    }

    proptest! {
        /// Lookups by name find what a plain scan finds, in any case, for
        /// names of lengths present and absent, after `retain` too.
        #[test]
        fn lookups_match_a_scan(
            lines in proptest::collection::vec((0usize..16, any::<bool>(), "[ -~]{0,6}"), 0..8),
            drop_name in 0usize..16,
        ) {
            // Names of the same length, and two past the last length bit.
            const NAMES: [&str; 16] = [
                "te", "host", "expect", "cookie", "upgrade", "connection", "keep-alive",
                "content-length", "transfer-encoding", "x-a", "tf", "hosts", "accept", "connectiox",
                "x-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "x-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
            ];
            let spelled: Vec<(String, String)> = lines
                .iter()
                .map(|(i, upper, v)| {
                    let n = if *upper { NAMES[*i].to_ascii_uppercase() } else { NAMES[*i].to_string() };
                    (n, v.clone())
                })
                .collect();
            let mut h = Headers::from_pairs(spelled.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            let check = |h: &Headers, kept: &[(String, String)]| -> Result<(), TestCaseError> {
                for name in NAMES {
                    for asked in [name.to_string(), name.to_ascii_uppercase()] {
                        let scan: Vec<&[u8]> = kept
                            .iter()
                            .filter(|(n, _)| n.eq_ignore_ascii_case(&asked))
                            .map(|(_, v)| v.as_bytes())
                            .collect();
                        let all: Vec<&[u8]> = h.get_all(asked.as_str()).map(|v| v.as_bytes()).collect();
                        prop_assert_eq!(&all, &scan);
                        prop_assert_eq!(h.get(asked.as_str()).map(|v| v.as_bytes()), scan.first().copied());
                        prop_assert_eq!(h.contains_key(asked.as_str()), !scan.is_empty());
                    }
                }
                for k in KNOWN {
                    let name = std::str::from_utf8(k.name()).unwrap_or_default();
                    let scan: Vec<&[u8]> = kept
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_bytes())
                        .collect();
                    let all: Vec<&[u8]> = h.known_all(k).map(|v| v.as_bytes()).collect();
                    prop_assert_eq!(&all, &scan);
                    prop_assert_eq!(h.known(k).map(|v| v.as_bytes()), scan.first().copied());
                }
                Ok(())
            };
            check(&h, &spelled)?;
            h.retain(|n, _| !n.eq_ignore_ascii_case(NAMES[drop_name].as_bytes()));
            let kept: Vec<(String, String)> = spelled
                .iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case(NAMES[drop_name]))
                .cloned()
                .collect();
            check(&h, &kept)?;
        }
    }

    proptest! {
        /// A head read in pieces (each prefix as it grows) is either not yet
        /// complete or parses as the whole does; arbitrary bytes never panic.
        #[test]
        fn pieces_parse_as_the_whole(
            path in "/[a-z0-9%?=&./-]{0,20}",
            headers in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,8}", "[ -~]{0,12}"), 0..6),
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut wire = format!("GET {path} HTTP/1.1\r\n").into_bytes();
            for (n, v) in &headers {
                wire.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(&tail);
            let whole = outcome(&wire);
            prop_assert!(whole.is_some());
            for cut in 0..wire.len() {
                let part = outcome(&wire[..cut]);
                prop_assert!(part.is_none() || part == whole, "cut {cut}: {part:?} vs {whole:?}");
            }
        }

        /// Whatever request head is accepted, hostile bytes in its values
        /// included, has only values `valid_value` and a map take: the
        /// parser checks them, once (`request_headers`). A head with any
        /// other byte in a value is refused with a 400.
        #[test]
        fn accepted_request_values_are_valid(
            values in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![9 => 0x20u8..0x7f, 2 => 0x80u8..=0xff, 1 => Just(b'\t'), 2 => any::<u8>()],
                    0..12,
                ),
                1..5,
            ),
        ) {
            let mut wire = b"GET / HTTP/1.1\r\n".to_vec();
            for (i, v) in values.iter().enumerate() {
                wire.extend_from_slice(format!("X-{i}: ").as_bytes());
                wire.extend_from_slice(v);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"Host: h\r\n\r\n");
            let expected = values
                .iter()
                .all(|v| v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)));
            // A CR or LF in a value ends its line early: what follows may
            // read as a line of its own, or end the head.
            let line_break = values.iter().any(|v| v.iter().any(|&b| b == b'\r' || b == b'\n'));
            match parse_request(&mut BytesMut::from(&wire[..])) {
                Ok(Some(h)) => {
                    prop_assert!(expected || line_break, "accepted {:?}", wire.escape_ascii().to_string());
                    for (_, v) in h.headers.iter() {
                        prop_assert!(valid_value(v.as_bytes()));
                        prop_assert!(HeaderValue::from_bytes(v.as_bytes()).is_ok());
                    }
                }
                Ok(None) => prop_assert!(false, "incomplete: {:?}", wire.escape_ascii().to_string()),
                Err(e) => {
                    prop_assert!(!expected || line_break, "refused {:?}: {e:?}", wire.escape_ascii().to_string());
                    prop_assert_eq!(e.code, 400);
                }
            }
        }

        /// Whatever response head `httparse` accepts, hostile bytes in its
        /// names and values included, also goes into a map: the lines
        /// written on as received (`AsReceived`) are never ones a map would
        /// have refused. The lines picked are the lines the map holds, with
        /// their flags, and go into a map whole.
        #[test]
        fn accepted_response_lines_map(
            lines in proptest::collection::vec(
                (
                    prop_oneof![
                        4 => "[!#$%&'*+.^_`|~0-9A-Za-z-]{1,8}".prop_map(String::into_bytes),
                        1 => proptest::collection::vec(any::<u8>(), 1..8),
                    ],
                    proptest::collection::vec(
                        prop_oneof![9 => 0x20u8..0x7f, 2 => 0x80u8..=0xff, 1 => Just(b'\t'), 1 => any::<u8>()],
                        0..12,
                    ),
                ),
                1..6,
            ),
            hidden in any::<u8>(),
        ) {
            let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
            for (n, v) in &lines {
                wire.extend_from_slice(n);
                wire.extend_from_slice(b": ");
                wire.extend_from_slice(v);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(b"Server: s\r\ncontent-length: 0\r\n\r\n");
            let Ok(Some(mut h)) = parse_response(&mut BytesMut::from(&wire[..])) else {
                return Ok(());
            };
            // Every name whose first byte is `hidden`'s is left out.
            let passes = |n: &[u8]| n.first() != Some(&hidden);
            let picked = AsReceived::pick(h.raw.clone(), passes);
            prop_assert!(h.map(&passes).is_ok(), "{}", wire.escape_ascii());
            let mut as_map: Vec<(String, Vec<u8>)> = h
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                .collect();
            let mut as_lines: Vec<(String, Vec<u8>)> = picked
                .iter()
                .map(|(n, v)| (String::from_utf8_lossy(n).to_ascii_lowercase(), v.as_bytes().to_vec()))
                .collect();
            // The map groups a name's values; compare as sets of lines.
            as_map.sort();
            as_lines.sort();
            prop_assert_eq!(as_map, as_lines);
            prop_assert_eq!(picked.server, h.headers().contains_key("server"));
            prop_assert_eq!(picked.length, h.headers().contains_key("content-length"));
            prop_assert_eq!(picked.date, h.headers().contains_key("date"));
            let mut map = HeaderMap::new();
            picked.append_to(&mut map);
            prop_assert_eq!(map.len(), h.headers().len());
        }

        /// Request lines of tokens, spaces and versions in any order end
        /// (refused, incomplete or parsed): none is parsed again for ever.
        #[test]
        fn request_lines_of_any_shape_end(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("GET"), Just("/a"), Just("b"), Just(" "), Just("  "),
                    Just("HTTP/1.1"), Just("HTTP/1.0"), Just("HTTP/1.2"), Just("HTTP/1.10"),
                    Just("HTTP/2.0"), Just("\r"), Just("\t"), Just("?"), Just("%")
                ],
                0..12,
            )
        ) {
            let line: String = parts.concat();
            let _ = req(&format!("{line}\r\nHost: x\r\n\r\n"));
            let _ = req(&format!("\r\n{line}\r\n\r\n"));
        }

        /// The connection's loop (the buffers' check, then the parser, on
        /// all that came so far), fed a head in pieces of any sizes, takes
        /// what it takes whole: the same request, or a refusal where the
        /// whole is refused, or still waiting where the whole is incomplete.
        /// The heads are well formed ones with hostile bytes put anywhere,
        /// or arbitrary bytes; the limits nginx's defaults or tiny ones. No
        /// way of cutting a head makes it read otherwise (a desync).
        #[test]
        fn the_loop_reads_pieces_as_the_whole(
            path in "/[a-z0-9%?=&./-]{0,20}",
            headers in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,8}", "[ -~]{0,12}"), 0..6),
            hostile in crate::h1::splits::hostile(),
            noise in proptest::collection::vec(any::<u8>(), 0..200),
            arbitrary in any::<bool>(),
            cuts in proptest::collection::vec(1usize..40, 1..40),
            tiny in any::<bool>(),
        ) {
            use crate::h1::splits;
            let wire = if arbitrary {
                noise
            } else {
                splits::head(&format!("GET {path} HTTP/1.1"), &headers, b"", &hostile)
            };
            let limits = if tiny {
                Limits { first: 16, count: 2, size: 32 }
            } else {
                Limits::default()
            };
            let step = |buf: &mut BytesMut| -> Option<Result<Parsed, u16>> {
                if let Err(e) = limits.check(buf) {
                    return Some(Err(e.code));
                }
                match parse_request(buf) {
                    Ok(None) => None,
                    Ok(Some(h)) => Some(Ok(parsed(&h))),
                    Err(e) => Some(Err(e.code)),
                }
            };
            let whole = step(&mut BytesMut::from(&wire[..]));
            let got = splits::in_pieces(&wire, &cuts, step);
            match (&whole, &got) {
                (Some(Ok(w)), Some(Ok(g))) => prop_assert_eq!(w, g),
                (Some(Err(_)), Some(Err(_))) | (None, None) => {}
                _ => prop_assert!(false, "{}: whole {whole:?}, in pieces {got:?}", wire.escape_ascii()),
            }
        }

        #[test]
        fn arbitrary_heads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = outcome(&bytes);
            let _ = resp(&bytes);
            let _ = Limits { first: 16, count: 2, size: 32 }.check(&bytes);
        }
    }
}
