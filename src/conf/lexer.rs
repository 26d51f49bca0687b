//! Tokenizer for nginx's configuration syntax, built on nom. No I/O: it takes the
//! text of one file and yields tokens with their line numbers. Words keep `$var`
//! and `${var}` as written (variables are compiled later); quotes and backslash
//! escapes are resolved here exactly as nginx resolves them.

use nom::IResult;
use nom::Parser;
use nom::branch::alt;
use nom::bytes::complete::take_till;
use nom::character::complete::{char, multispace1};
use nom::combinator::{recognize, value};
use nom::multi::many0_count;
use nom::sequence::preceded;

/// One token of the configuration language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A word, quoted or not, with escapes resolved.
    Word(String),
    Semi,
    Open,
    Close,
}

/// A lexical error; the caller adds the file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexError {
    pub line: usize,
    pub message: String,
}

/// Whitespace and `#` comments, any number of them.
fn skip(i: &str) -> IResult<&str, usize> {
    many0_count(alt((
        multispace1,
        recognize(preceded(char('#'), take_till(|c| c == '\n'))),
    )))
    .parse(i)
}

fn punct(i: &str) -> IResult<&str, Tok> {
    alt((
        value(Tok::Semi, char(';')),
        value(Tok::Open, char('{')),
        value(Tok::Close, char('}')),
    ))
    .parse(i)
}

/// nginx's unescaping: `\"`, `\'`, `\\`, `\t`, `\r`, `\n` become the character;
/// any other `\x` is kept as both characters.
fn unescape_into(out: &mut String, c: char) {
    match c {
        '"' | '\'' | '\\' => out.push(c),
        't' => out.push('\t'),
        'r' => out.push('\r'),
        'n' => out.push('\n'),
        other => {
            out.push('\\');
            out.push(other);
        }
    }
}

/// A quoted word; the quote may span lines. Fails (nom error) when unterminated.
fn quoted(i: &str) -> IResult<&str, Tok> {
    let (rest, q) = alt((char('"'), char('\''))).parse(i)?;
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((pos, c)) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some((_, e)) => unescape_into(&mut out, e),
                None => break,
            }
        } else if c == q {
            return Ok((&rest[pos + c.len_utf8()..], Tok::Word(out)));
        } else {
            out.push(c);
        }
    }
    Err(nom::Err::Error(nom::error::Error::new(
        i,
        nom::error::ErrorKind::Char,
    )))
}

/// A bare word: up to whitespace, `;` or `{` — except that `{` right after `$`
/// opens `${var}`, whose `}` belongs to the word.
fn bare(i: &str) -> IResult<&str, Tok> {
    let mut out = String::new();
    let mut prev_dollar = false;
    let mut in_braces = false;
    let mut chars = i.char_indices().peekable();
    let mut end = i.len();
    while let Some(&(pos, c)) = chars.peek() {
        if c == '\\' {
            chars.next();
            match chars.next() {
                Some((_, e)) => unescape_into(&mut out, e),
                None => out.push('\\'),
            }
            prev_dollar = false;
            continue;
        }
        if in_braces {
            if c == '}' {
                in_braces = false;
            }
        } else if c == '{' && prev_dollar {
            in_braces = true;
        } else if c.is_whitespace() || c == ';' || c == '{' {
            end = pos;
            break;
        }
        prev_dollar = c == '$';
        out.push(c);
        chars.next();
    }
    if out.is_empty() && end == 0 {
        return Err(nom::Err::Error(nom::error::Error::new(
            i,
            nom::error::ErrorKind::Alpha,
        )));
    }
    Ok((&i[end..], Tok::Word(out)))
}

/// nginx reads a configuration through a buffer of this many bytes: a
/// token that does not fit in it is refused (`NGX_CONF_BUFFER`).
pub const MAX_TOKEN: usize = 4096;

/// The whole file as tokens with the line each one ends on.
pub fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, LexError> {
    // A NUL would end the word where nginx's C strings end it, and cannot
    // reach a path or a log line: refuse it where it stands.
    if let Some(at) = text.find('\0') {
        return Err(LexError {
            line: 1 + text[..at].bytes().filter(|&b| b == b'\n').count(),
            message: "unexpected NUL byte".into(),
        });
    }
    let mut toks = Vec::new();
    let mut rest = text;
    let mut line = 1usize;
    let advance = |from: &str, to: &str, line: &mut usize| {
        let used = &from[..from.len() - to.len()];
        *line += used.bytes().filter(|&b| b == b'\n').count();
    };
    while let Ok((r, _)) = skip(rest) {
        advance(rest, r, &mut line);
        rest = r;
        if rest.is_empty() {
            break;
        }
        let after_quote = rest.starts_with('"') || rest.starts_with('\'');
        let parsed = if after_quote {
            quoted(rest)
        } else {
            punct(rest).or_else(|_| bare(rest))
        };
        match parsed {
            Ok((r, tok)) => {
                let raw = rest.len() - r.len() - if after_quote { 2 } else { 0 };
                if raw >= MAX_TOKEN && matches!(tok, Tok::Word(_)) {
                    return Err(too_long(rest, after_quote, line));
                }
                advance(rest, r, &mut line);
                rest = r;
                toks.push((tok, line));
                // After a quoted word nginx wants a separator, or the `)`
                // that closes an `if` (`if ($a = "b")`), a word of its own.
                if after_quote {
                    if let Some(c) = rest.chars().next() {
                        if !(c.is_whitespace() || matches!(c, ';' | '{' | '}' | ')')) {
                            return Err(LexError {
                                line,
                                message: format!("unexpected \"{c}\""),
                            });
                        }
                    }
                }
            }
            Err(_) => {
                // Only an unterminated quote can fail here: it runs to end of file.
                if rest.len() > MAX_TOKEN {
                    return Err(too_long(rest, true, line));
                }
                advance(rest, "", &mut line);
                return Err(LexError {
                    line,
                    message: "unexpected end of file, expecting \";\" or \"}\"".into(),
                });
            }
        }
    }
    Ok(toks)
}

/// nginx's words for a token longer than its buffer, at the line it starts.
fn too_long(token: &str, quoted: bool, line: usize) -> LexError {
    let message = if quoted {
        format!(
            "too long parameter, probably missing terminating \"{}\" character",
            &token[..1]
        )
    } else {
        let start: String = token.chars().take(10).collect();
        format!("too long parameter \"{start}...\" started")
    };
    LexError { line, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|(t, _)| t).collect()
    }
    fn w(s: &str) -> Tok {
        Tok::Word(s.into())
    }

    #[test]
    fn basic_directive_and_block() {
        assert_eq!(
            words("events { worker_connections 10; }"),
            vec![
                w("events"),
                Tok::Open,
                w("worker_connections"),
                w("10"),
                Tok::Semi,
                Tok::Close
            ]
        );
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            words(r#"return 200 "a \"b\" c\n";"#),
            vec![w("return"), w("200"), w("a \"b\" c\n"), Tok::Semi]
        );
        // As in nginx, `\;` is not terminated by `;` and keeps its backslash.
        assert_eq!(
            words(r"x 'it\'s' a\;b;"),
            vec![w("x"), w("it's"), w(r"a\;b"), Tok::Semi]
        );
        assert_eq!(words(r"x '\d';"), vec![w("x"), w(r"\d"), Tok::Semi]);
    }

    #[test]
    fn variables_kept() {
        assert_eq!(
            words("return 200 ${host}x$uri;"),
            vec![w("return"), w("200"), w("${host}x$uri"), Tok::Semi]
        );
    }

    #[test]
    fn comments_and_lines() {
        let t = tokenize("# c\na b; # x\n\n c {\n}\n").unwrap();
        assert_eq!(t[0], (w("a"), 2));
        assert_eq!(t[2], (Tok::Semi, 2));
        assert_eq!(t[3], (w("c"), 4));
        assert_eq!(t[5], (Tok::Close, 5));
    }

    #[test]
    fn unterminated_quote() {
        let e = tokenize("a \"b;\n\n").unwrap_err();
        assert!(e.message.contains("unexpected end of file"));
        assert_eq!(e.line, 3);
    }

    #[test]
    fn nul_and_long_tokens() {
        let e = tokenize("a b;\nc d\0e;\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "unexpected NUL byte"));
        let long = "x".repeat(MAX_TOKEN);
        let e = tokenize(&format!("a;\nb {long};")).unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(e.message, "too long parameter \"xxxxxxxxxx...\" started");
        let e = tokenize(&format!("a \"{long}\";")).unwrap_err();
        assert_eq!(
            e.message,
            "too long parameter, probably missing terminating \"\"\" character"
        );
        let e = tokenize(&format!("a '{long};")).unwrap_err();
        assert_eq!(
            e.message,
            "too long parameter, probably missing terminating \"'\" character"
        );
        let fits = "x".repeat(MAX_TOKEN - 1);
        assert!(tokenize(&format!("a {fits} \"{fits}\";")).is_ok());
    }

    #[test]
    fn junk_after_quote() {
        let e = tokenize("a \"b\"c;").unwrap_err();
        assert_eq!(e.message, "unexpected \"c\"");
        // An `if`'s closing parenthesis may follow a quote, as in nginx.
        let toks = tokenize("if ($a = \"b\") {").unwrap();
        assert!(matches!(&toks[4].0, Tok::Word(w) if w == ")"), "{toks:?}");
    }
}
