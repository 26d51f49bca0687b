//! nginx's charset filter: `charset` adds `; charset=NAME` to the
//! Content-Type of the types in `charset_types`; with `source_charset` (or,
//! under `override_charset on`, the charset a proxied response declares) the
//! body is recoded on its way, by a `charset_map` that joins the two
//! charsets, else with encoding_rs, across piece boundaries.
//! Runs on every response before gzip (`pipeline`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use encoding_rs::{Decoder, Encoder, Encoding};
use http::Response;
use http::header::{self, HeaderValue};

use super::body_filter::{Filter, filtered};
use super::response::{Body, BoxError};
use super::vars::Req;
use crate::conf::charset::CharsetMap;

/// How a body is recoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recoding {
    Rs(&'static Encoding, &'static Encoding),
    /// By a `charset_map`; true: from its target to its source.
    Map(Arc<CharsetMap>, bool),
}

/// The MIME type and the charset parameter of a Content-Type value.
fn split(ct: &str) -> (&str, Option<&str>) {
    let mut parts = ct.split(';');
    let mime = parts.next().unwrap_or("").trim();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"'))
    });
    (mime, charset)
}

/// What the filter does to a response: the Content-Type to write, and the
/// recoding (from, to) if any.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub content_type: Option<String>,
    pub recode: Option<Recoding>,
}

/// nginx's header filter, as a pure function of the configuration, the
/// status and the response's Content-Type. None: the response is left as
/// it is.
pub(crate) fn plan(
    conf: &crate::conf::loc::LocConf,
    status: u16,
    ct: &str,
    proxied: bool,
) -> Option<Plan> {
    let to = conf.charset.as_deref()?;
    if ct.is_empty() {
        return None;
    }
    let (mime, declared) = split(ct);
    if !conf.charset_types.matches(mime) {
        return None;
    }
    let from = match declared {
        // A response that names its charset keeps it, unless a proxied one
        // is to be recoded (`override_charset on`).
        Some(_) if !(proxied && conf.override_charset) => return None,
        Some(d) => Some(d),
        None => conf.source_charset.as_deref(),
    };
    let with = |name: &str| Some(format!("{mime}; charset={name}"));
    let Some(from) = from.filter(|f| !f.eq_ignore_ascii_case(to)) else {
        return Some(Plan {
            content_type: with(to),
            recode: None,
        });
    };
    // nginx sends a redirect it would recode without a charset.
    if status == 301 || status == 302 {
        return Some(Plan {
            content_type: Some(mime.to_string()),
            recode: None,
        });
    }
    if let Some((m, back)) = conf
        .charset_maps
        .iter()
        .find_map(|m| m.joins(from, to).map(|b| (m, b)))
    {
        return Some(Plan {
            content_type: with(to),
            recode: Some(Recoding::Map(m.clone(), back)),
        });
    }
    let (Some(f), Some(t)) = (
        Encoding::for_label(from.as_bytes()),
        Encoding::for_label(to.as_bytes()),
    ) else {
        // Not recodable (only a declared charset can get here: the
        // configured pair is checked at load): passed on as declared.
        return None;
    };
    Some(Plan {
        content_type: with(to),
        recode: (f != t).then_some(Recoding::Rs(f, t)),
    })
}

/// Applies the filter to a response.
pub fn filter(r: &Req, mut resp: Response<Body>, proxied: bool) -> Response<Body> {
    // nginx leaves an encoded (compressed) response alone, header too.
    if r.conf.charset.is_none() || resp.headers().contains_key(header::CONTENT_ENCODING) {
        return resp;
    }
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(p) = plan(&r.conf, resp.status().as_u16(), ct, proxied) else {
        return resp;
    };
    let h = resp.headers_mut();
    if let Some(v) = p.content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::CONTENT_TYPE, v);
    }
    let Some(recoding) = p.recode else {
        return resp;
    };
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    let (parts, body) = resp.into_parts();
    let conv = match recoding {
        Recoding::Rs(from, to) => Conv::Rs {
            decoder: from.new_decoder_without_bom_handling(),
            encoder: (to != encoding_rs::UTF_8).then(|| to.new_encoder()),
        },
        Recoding::Map(m, false) => Conv::Bytes(m),
        Recoding::Map(m, true) if !m.utf8 => {
            // nginx's reverse of a one-byte table: ASCII as is, `?` else.
            let mut back: Vec<u8> = (0..=255u8)
                .map(|b| if b < 128 { b } else { b'?' })
                .collect();
            for (src, dst) in m.table.iter().enumerate().skip(128) {
                if let (Some(&d), Ok(s)) = (dst.first(), u8::try_from(src)) {
                    back[usize::from(d)] = s;
                }
            }
            Conv::Reverse(back)
        }
        Recoding::Map(m, true) => {
            let mut back = HashMap::new();
            for (src, dst) in m.table.iter().enumerate().skip(128) {
                let c = std::str::from_utf8(dst).ok().and_then(|s| s.chars().next());
                if let (Some(c), Ok(s)) = (c, u8::try_from(src)) {
                    back.entry(c).or_insert(s);
                }
            }
            Conv::FromUtf8 {
                back,
                pending: Vec::new(),
            }
        }
    };
    Response::from_parts(parts, filtered(body, Recode { conv }))
}

/// The conversion of a body, with what it holds between two pieces.
enum Conv {
    Rs {
        decoder: Decoder,
        /// None: the target is UTF-8, what the decoder writes.
        encoder: Option<Encoder>,
    },
    /// A `charset_map` forwards: each byte to its bytes.
    Bytes(Arc<CharsetMap>),
    /// A one-byte `charset_map` backwards.
    Reverse(Vec<u8>),
    /// A utf-8 `charset_map` backwards: characters to bytes, `&#N;` for one
    /// the map lacks; a sequence cut between pieces waits in `pending`.
    FromUtf8 {
        back: HashMap<char, u8>,
        pending: Vec<u8>,
    },
}

/// A body recoded piece by piece; the decoder keeps a sequence cut between
/// two pieces until the next.
struct Recode {
    conv: Conv,
}

/// Characters to bytes by a map's reverse; invalid UTF-8 becomes `?`.
fn from_utf8(back: &HashMap<char, u8>, pending: &mut Vec<u8>, input: &[u8], last: bool) -> Bytes {
    pending.extend_from_slice(input);
    let mut out = Vec::with_capacity(pending.len());
    let mut rest: &[u8] = pending;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                push_chars(back, s, &mut out);
                rest = &[];
                break;
            }
            Err(e) => {
                let (good, after) = rest.split_at(e.valid_up_to());
                push_chars(back, std::str::from_utf8(good).unwrap_or(""), &mut out);
                match e.error_len() {
                    Some(n) => {
                        out.push(b'?');
                        rest = &after[n.min(after.len())..];
                    }
                    // Cut at the end: wait for the next piece.
                    None if !last => {
                        rest = after;
                        break;
                    }
                    None => {
                        out.push(b'?');
                        rest = &[];
                        break;
                    }
                }
            }
        }
    }
    *pending = rest.to_vec();
    Bytes::from(out)
}

fn push_chars(back: &HashMap<char, u8>, s: &str, out: &mut Vec<u8>) {
    for c in s.chars() {
        match (c.is_ascii(), back.get(&c)) {
            (true, _) => out.push(c as u8),
            (false, Some(&b)) => out.push(b),
            (false, None) => out.extend_from_slice(format!("&#{};", u32::from(c)).as_bytes()),
        }
    }
}

impl Recode {
    fn convert(&mut self, input: &[u8], last: bool) -> Bytes {
        let (decoder, encoder) = match &mut self.conv {
            Conv::Rs { decoder, encoder } => (decoder, encoder),
            Conv::Bytes(m) => {
                let mut out = Vec::with_capacity(input.len() * 2);
                for &b in input {
                    if let Some(t) = m.table.get(usize::from(b)) {
                        out.extend_from_slice(t);
                    }
                }
                return Bytes::from(out);
            }
            Conv::Reverse(t) => {
                return input.iter().map(|&b| t[usize::from(b)]).collect();
            }
            Conv::FromUtf8 { back, pending } => return from_utf8(back, pending, input, last),
        };
        // An empty piece is not given to the decoder: encoding_rs's
        // Shift_JIS forgets a lead byte it holds when fed one (the proptest
        // below found it).
        if input.is_empty() && !last {
            return Bytes::new();
        }
        let mut text = String::with_capacity(
            decoder
                .max_utf8_buffer_length(input.len())
                .unwrap_or(input.len().saturating_mul(3).saturating_add(16)),
        );
        let mut rest = input;
        loop {
            let (res, read, _) = decoder.decode_to_string(rest, &mut text, last);
            rest = &rest[read..];
            match res {
                encoding_rs::CoderResult::InputEmpty => break,
                // The estimate fell short: more room, and on.
                encoding_rs::CoderResult::OutputFull => text.reserve(rest.len() * 3 + 16),
            }
        }
        let Some(enc) = encoder.as_mut() else {
            return Bytes::from(text.into_bytes());
        };
        let mut out = Vec::with_capacity(text.len() + 16);
        let mut rest = text.as_str();
        loop {
            // Characters the target lacks become `&#N;`, as nginx writes them.
            let (res, read, _) = enc.encode_from_utf8_to_vec(rest, &mut out, last);
            rest = &rest[read..];
            match res {
                encoding_rs::CoderResult::InputEmpty => break,
                encoding_rs::CoderResult::OutputFull => {
                    out.reserve(rest.len().saturating_mul(10).max(32));
                }
            }
        }
        Bytes::from(out)
    }
}

impl Filter for Recode {
    /// A body that is recoded keeps its trailers (nginx passes them).
    const TRAILERS: bool = true;

    fn data(&mut self, d: &[u8]) -> Result<Bytes, BoxError> {
        Ok(self.convert(d, false))
    }

    /// What the decoder held back (a cut sequence) ends here.
    fn end(&mut self) -> Result<Bytes, BoxError> {
        Ok(self.convert(&[], true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::loc::LocConf;

    fn conf(charset: Option<&str>, source: Option<&str>, over: bool) -> LocConf {
        let mut c = (*super::super::vars::tests::req().conf).clone();
        c.charset = charset.map(str::to_string);
        c.source_charset = source.map(str::to_string);
        c.override_charset = over;
        c
    }

    #[test]
    fn adds_the_charset_to_listed_types_only() {
        let c = conf(Some("utf-8"), None, false);
        let p = plan(&c, 200, "text/html", false).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert!(p.recode.is_none());
        assert!(plan(&c, 200, "image/png", false).is_none());
        assert!(plan(&c, 200, "", false).is_none());
        assert!(plan(&conf(None, None, false), 200, "text/html", false).is_none());
    }

    #[test]
    fn a_declared_charset_stays_unless_overridden() {
        let c = conf(Some("utf-8"), Some("koi8-r"), false);
        assert!(plan(&c, 200, "text/html; charset=windows-1251", true).is_none());
        let c = conf(Some("utf-8"), None, true);
        let p = plan(&c, 200, "text/html; charset=windows-1251", true).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(
            p.recode,
            Some(Recoding::Rs(encoding_rs::WINDOWS_1251, encoding_rs::UTF_8))
        );
        // Not a proxied response: kept.
        assert!(plan(&c, 200, "text/html; charset=windows-1251", false).is_none());
    }

    #[test]
    fn source_charset_recodes_but_not_redirects() {
        let c = conf(Some("utf-8"), Some("koi8-r"), false);
        let p = plan(&c, 200, "text/plain", false).unwrap();
        assert_eq!(
            p.recode,
            Some(Recoding::Rs(encoding_rs::KOI8_R, encoding_rs::UTF_8))
        );
        let p = plan(&c, 302, "text/html", false).unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/html"));
        assert!(p.recode.is_none());
        let same = conf(Some("utf-8"), Some("UTF-8"), false);
        assert!(
            plan(&same, 200, "text/html", false)
                .unwrap()
                .recode
                .is_none()
        );
    }

    #[test]
    fn recodes_across_pieces() {
        let mut r = Recode {
            conv: Conv::Rs {
                decoder: encoding_rs::UTF_8.new_decoder_without_bom_handling(),
                encoder: Some(encoding_rs::KOI8_R.new_encoder()),
            },
        };
        // "Привет" in UTF-8, cut inside a character; then one koi8-r lacks.
        let s = "Привет €".as_bytes();
        let mut out = r.convert(&s[..3], false).to_vec();
        out.extend_from_slice(&r.convert(&s[3..], false));
        out.extend_from_slice(&r.convert(&[], true));
        assert_eq!(out, b"\xf0\xd2\xc9\xd7\xc5\xd4 &#8364;");
        let mut back = Recode {
            conv: Conv::Rs {
                decoder: encoding_rs::KOI8_R.new_decoder_without_bom_handling(),
                encoder: None,
            },
        };
        assert_eq!(&back.convert(b"\xf0\xd2\xc9", true)[..], "При".as_bytes());
    }

    #[test]
    fn a_utf8_map_backwards_across_pieces() {
        let mut back = HashMap::new();
        back.insert('\u{20ac}', 0x80u8);
        let mut pending = Vec::new();
        let s = "a\u{20ac}\u{44f}".as_bytes();
        let mut out = from_utf8(&back, &mut pending, &s[..2], false).to_vec();
        assert_eq!(pending.len(), 1, "a cut sequence waits");
        out.extend_from_slice(&from_utf8(&back, &mut pending, &s[2..], false));
        out.extend_from_slice(&from_utf8(&back, &mut pending, b"\xff", true));
        assert_eq!(out, b"a\x80&#1103;?");
        assert!(pending.is_empty());
        // Hostile input: truncated at the very end.
        assert_eq!(&from_utf8(&back, &mut pending, b"\xe2\x82", true)[..], b"?");
    }

    fn rs(from: &'static Encoding, to: &'static Encoding) -> Recode {
        Recode {
            conv: Conv::Rs {
                decoder: from.new_decoder_without_bom_handling(),
                encoder: (to != encoding_rs::UTF_8).then(|| to.new_encoder()),
            },
        }
    }

    /// The body in pieces cut at `cuts`, recoded.
    fn pieces(r: &mut Recode, bytes: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let (mut out, mut at) = (Vec::new(), 0);
        for c in cuts {
            out.extend_from_slice(&r.convert(&bytes[at..c], false));
            at = c;
        }
        out.extend_from_slice(&r.convert(&bytes[at..], false));
        out.extend_from_slice(&r.convert(&[], true));
        out
    }

    #[test]
    fn a_held_lead_byte_survives_an_empty_piece() {
        let mut r = rs(encoding_rs::SHIFT_JIS, encoding_rs::UTF_8);
        assert_eq!(pieces(&mut r, &[0x41, 0x9b], &[2]), "A\u{fffd}".as_bytes());
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Any upstream bytes, cut anywhere: the same as in one piece, and
        /// never a panic (encoding_rs both ways, and a map backwards).
        #[test]
        fn any_bytes_recode_the_same_however_cut(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            for (from, to) in [
                (encoding_rs::UTF_8, encoding_rs::KOI8_R),
                (encoding_rs::KOI8_R, encoding_rs::UTF_8),
                (encoding_rs::SHIFT_JIS, encoding_rs::UTF_8),
            ] {
                let whole = pieces(&mut rs(from, to), &bytes, &[]);
                prop_assert_eq!(pieces(&mut rs(from, to), &bytes, &cuts), whole);
            }
            let mut back = HashMap::new();
            back.insert('\u{20ac}', 0x80u8);
            let mut m = Recode {
                    conv: Conv::FromUtf8 { back: back.clone(), pending: Vec::new() },
            };
            let mut one = Recode {
                    conv: Conv::FromUtf8 { back, pending: Vec::new() },
            };
            prop_assert_eq!(pieces(&mut m, &bytes, &cuts), pieces(&mut one, &bytes, &[]));
        }
    }
}
