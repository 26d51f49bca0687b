//! For the head parsers' property tests: heads with hostile bytes put
//! anywhere, and a head fed in pieces as the connections' loops read it.

use bytes::BytesMut;
use proptest::prelude::*;
use proptest::sample::Index;

/// Up to four bytes that break heads (NUL, CR, LF, space, colon, tab, DEL,
/// any), each with where it goes.
pub(crate) fn hostile() -> impl Strategy<Value = Vec<(Index, u8)>> {
    proptest::collection::vec(
        (
            any::<Index>(),
            prop_oneof![
                Just(0u8),
                Just(b'\r'),
                Just(b'\n'),
                Just(b' '),
                Just(b':'),
                Just(b'\t'),
                Just(0x7f),
                any::<u8>()
            ],
        ),
        0..4,
    )
}

/// `first` (a request or status line), the fields `headers`, the empty
/// line and `tail`, with the `hostile` bytes put in.
pub(crate) fn head(
    first: &str,
    headers: &[(String, String)],
    tail: &[u8],
    hostile: &[(Index, u8)],
) -> Vec<u8> {
    let mut w = format!("{first}\r\n").into_bytes();
    for (n, v) in headers {
        w.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    w.extend_from_slice(b"\r\n");
    w.extend_from_slice(tail);
    for (at, b) in hostile {
        let i = at.index(w.len() + 1);
        w.insert(i, *b);
    }
    w
}

/// `wire` added to a buffer in pieces of the sizes `cuts` gives in turn,
/// `step` looking at all that came after each: its first answer, or None
/// once all came without one.
pub(crate) fn in_pieces<T>(
    wire: &[u8],
    cuts: &[usize],
    mut step: impl FnMut(&mut BytesMut) -> Option<T>,
) -> Option<T> {
    let mut buf = BytesMut::new();
    let (mut at, mut pieces) = (0, cuts.iter().cycle());
    while at < wire.len() {
        let n = (*pieces.next().unwrap_or(&1)).clamp(1, wire.len() - at);
        buf.extend_from_slice(&wire[at..at + n]);
        at += n;
        if let Some(got) = step(&mut buf) {
            return Some(got);
        }
    }
    None
}
