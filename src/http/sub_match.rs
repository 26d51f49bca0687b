//! The string matcher behind `sub_filter`: replaces the patterns in a body
//! that arrives in pieces, as nginx's sub filter does: ASCII case ignored,
//! the leftmost match first, at one position the first pattern in
//! configuration order, no overlapping matches, `sub_filter_once` per
//! pattern. A match split across pieces is found; only a tail that may
//! still begin a match is held back. No I/O; `sub_filter.rs` drives it.

/// One pattern: lowercased, never empty; its replacement.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub find: Vec<u8>,
    pub replace: Vec<u8>,
}

/// The state of one response body.
#[derive(Debug)]
pub struct Matcher {
    pats: Vec<Pattern>,
    once: bool,
    /// With `once`: patterns already replaced.
    used: Vec<bool>,
    applied: usize,
    /// Bytes that may begin a match still unfinished.
    held: Vec<u8>,
    /// Whether a byte (any case) begins some pattern.
    first: [bool; 256],
}

/// What the patterns make of the text at one position.
enum At {
    /// Pattern k matches here in full.
    Full(usize),
    /// A pattern before any full match may still match: more text needed.
    Wait,
    None,
}

impl Matcher {
    /// `pats` lowercased and non-empty (empty ones are dropped).
    pub fn new(pats: Vec<Pattern>, once: bool) -> Matcher {
        let pats: Vec<Pattern> = pats.into_iter().filter(|p| !p.find.is_empty()).collect();
        let mut first = [false; 256];
        for p in &pats {
            let b = p.find[0];
            first[b as usize] = true;
            first[b.to_ascii_uppercase() as usize] = true;
        }
        Matcher {
            used: vec![false; pats.len()],
            pats,
            once,
            applied: 0,
            held: Vec::new(),
            first,
        }
    }

    /// Nothing left to replace: the rest passes as it is.
    fn done(&self) -> bool {
        self.pats.is_empty() || (self.once && self.applied == self.pats.len())
    }

    /// How many bytes are held back, waiting for the next piece.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes the next piece of the body; what is decided goes to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.held.is_empty() {
            let keep = self.scan(data, out);
            self.held.extend_from_slice(&data[keep..]);
            return;
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let keep = self.scan(&buf, out);
        buf.drain(..keep);
        self.held = buf;
    }

    /// The body ended: what was held for a match that did not finish goes
    /// as it is, not searched again for other patterns, as nginx's sub
    /// filter sends what it held (`"fo"` stays `"fo"` with the patterns
    /// `foo` and `o`).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
    }

    /// Writes the decided part of `buf` to `out`, replaced; returns where
    /// the undecided tail begins (`buf.len()` when none).
    fn scan(&mut self, buf: &[u8], out: &mut Vec<u8>) -> usize {
        let mut from = 0;
        let mut i = 0;
        while i < buf.len() && !self.done() {
            if !self.first[buf[i] as usize] {
                i += 1;
                continue;
            }
            match self.at(&buf[i..]) {
                At::Full(k) => {
                    out.extend_from_slice(&buf[from..i]);
                    out.extend_from_slice(&self.pats[k].replace);
                    i += self.pats[k].find.len();
                    from = i;
                    if self.once {
                        self.used[k] = true;
                        self.applied += 1;
                    }
                }
                At::Wait => {
                    out.extend_from_slice(&buf[from..i]);
                    return i;
                }
                At::None => i += 1,
            }
        }
        out.extend_from_slice(&buf[from..]);
        buf.len()
    }

    /// The patterns, in order, at the start of `text`.
    fn at(&self, text: &[u8]) -> At {
        for (k, p) in self.pats.iter().enumerate() {
            if self.once && self.used[k] {
                continue;
            }
            let n = p.find.len().min(text.len());
            let same = text[..n]
                .iter()
                .zip(&p.find[..n])
                .all(|(t, f)| t.to_ascii_lowercase() == *f);
            if !same {
                continue;
            }
            if n == p.find.len() {
                return At::Full(k);
            }
            return At::Wait;
        }
        At::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pats(list: &[(&str, &str)]) -> Vec<Pattern> {
        list.iter()
            .map(|(f, r)| Pattern {
                find: f.to_ascii_lowercase().into_bytes(),
                replace: r.as_bytes().to_vec(),
            })
            .collect()
    }

    fn run_raw(list: &[(&str, &str)], once: bool, pieces: &[&[u8]]) -> Vec<u8> {
        let mut m = Matcher::new(pats(list), once);
        let mut out = Vec::new();
        for p in pieces {
            m.feed(p, &mut out);
        }
        m.finish(&mut out);
        out
    }

    fn run(list: &[(&str, &str)], once: bool, pieces: &[&[u8]]) -> String {
        String::from_utf8_lossy(&run_raw(list, once, pieces)).into_owned()
    }

    /// The definition the streaming matcher must agree with, on the whole
    /// body at once: leftmost position, first pattern in order there; a
    /// pattern that the body ends inside ends the search, its start on
    /// passed as it is.
    fn reference(list: &[Pattern], once: bool, body: &[u8]) -> Vec<u8> {
        let mut used = vec![false; list.len()];
        let mut out = Vec::new();
        let mut i = 0;
        'outer: while i < body.len() {
            for (k, p) in list.iter().enumerate() {
                if p.find.is_empty() || (once && used[k]) {
                    continue;
                }
                let end = i + p.find.len();
                if end > body.len() && p.find.starts_with(&body[i..].to_ascii_lowercase()) {
                    out.extend_from_slice(&body[i..]);
                    break 'outer;
                }
                if end <= body.len() && body[i..end].to_ascii_lowercase() == p.find {
                    out.extend_from_slice(&p.replace);
                    used[k] = true;
                    i = end;
                    continue 'outer;
                }
            }
            out.push(body[i]);
            i += 1;
        }
        out
    }

    #[test]
    fn once_and_all() {
        assert_eq!(run(&[("a", "X")], true, &[b"banana"]), "bXnana");
        assert_eq!(run(&[("a", "X")], false, &[b"banana"]), "bXnXnX");
        // Once is per pattern.
        assert_eq!(run(&[("a", "1"), ("n", "2")], true, &[b"banana"]), "b12ana");
    }

    #[test]
    fn case_is_ignored_in_the_text_not_the_replacement() {
        assert_eq!(
            run(&[("Hello", "Bye")], false, &[b"HELLO hello hElLo"]),
            "Bye Bye Bye"
        );
        // Only ASCII folds, as nginx's tolower.
        assert_eq!(run(&[("é", "e")], false, &["É é".as_bytes()]), "É e");
    }

    #[test]
    fn split_matches_are_found() {
        assert_eq!(
            run(&[("world", "there")], false, &[b"hello wo", b"r", b"ld!"]),
            "hello there!"
        );
        // "aab" in "aaab", split anywhere.
        assert_eq!(run(&[("aab", "X")], false, &[b"a", b"a", b"a", b"b"]), "aX");
        // A prefix that never completes is passed on at the end, as it is
        // (nginx's): not searched again for a shorter pattern.
        assert_eq!(run(&[("world", "X")], false, &[b"hello wor"]), "hello wor");
        assert_eq!(
            run(&[("foo", "X"), ("o", "0")], false, &[b"of", b"o"]),
            "0fo"
        );
        assert_eq!(run(&[("abc", "X"), ("b", "Y")], false, &[b"abab"]), "aYab");
    }

    #[test]
    fn first_pattern_in_order_at_the_leftmost_position() {
        assert_eq!(
            run(&[("abcd", "1"), ("ab", "2")], false, &[b"abcx abcd"]),
            "2cx 1"
        );
        assert_eq!(run(&[("ab", "2"), ("abcd", "1")], false, &[b"abcd"]), "2cd");
        // Leftmost wins over order.
        assert_eq!(run(&[("cd", "1"), ("bc", "2")], false, &[b"abcd"]), "a2d");
        // No overlap: the text after a match is searched anew.
        assert_eq!(run(&[("aa", "X")], false, &[b"aaaaa"]), "XXa");
    }

    #[test]
    fn held_back_only_what_may_still_match() {
        let mut m = Matcher::new(pats(&[("world", "X")]), false);
        let mut out = Vec::new();
        m.feed(b"hello wo", &mut out);
        assert_eq!(out, b"hello ");
        assert_eq!(m.held(), 2);
        m.feed(b"x", &mut out);
        assert_eq!(out, b"hello wox");
        assert_eq!(m.held(), 0);
    }

    #[test]
    fn hostile_input() {
        // Binary, NULs, long runs of a pattern's prefix.
        let body: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        assert_eq!(
            run_raw(&[("\0\u{1}", "")], false, &[&body]).len(),
            4096 - 32
        );
        let run_of_a = vec![b'a'; 10_000];
        let out = run(&[("aaab", "X")], false, &[&run_of_a]);
        assert_eq!(out.len(), 10_000);
        // Empty patterns are dropped rather than matching everywhere.
        assert_eq!(run(&[("", "X")], false, &[b"abc"]), "abc");
    }

    proptest! {
        #[test]
        fn split_equals_whole(
            body in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'A'), Just(b'b'), Just(b'c')], 0..200),
            finds in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')], 1..5), 1..4),
            cuts in proptest::collection::vec(0usize..200, 0..10),
            once in any::<bool>(),
        ) {
            let list: Vec<Pattern> = finds
                .iter()
                .enumerate()
                .map(|(k, f)| Pattern { find: f.clone(), replace: format!("<{k}>").into_bytes() })
                .collect();
            let mut whole = Vec::new();
            let mut m = Matcher::new(list.clone(), once);
            m.feed(&body, &mut whole);
            m.finish(&mut whole);
            prop_assert_eq!(&whole, &reference(&list, once, &body));

            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut split = Vec::new();
            let mut m = Matcher::new(list, once);
            let mut at = 0;
            for c in cuts {
                m.feed(&body[at..c], &mut split);
                at = c;
            }
            m.feed(&body[at..], &mut split);
            m.finish(&mut split);
            prop_assert_eq!(split, whole);
        }
    }
}
