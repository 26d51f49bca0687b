//! From tokens to a tree of directives, with `include` spliced in where it stands.
//! Reads files (the main file and includes) and records every file read, in order,
//! for `-T`. Knows nothing of what directives mean: that is `build.rs`'s table.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lexer::{Tok, tokenize};
use super::{ConfError, Src};

/// One directive as written: its name, its arguments and, for a block, its children.
#[derive(Clone, Debug)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub block: Option<Vec<Directive>>,
    pub src: Src,
}

/// The files read while parsing, in the order `-T` dumps them.
#[derive(Default, Debug, Clone)]
pub struct Files {
    pub list: Vec<(PathBuf, String)>,
}

/// Parses text whose directives are in `src_file` (None: the command line, `-g`).
/// `conf_prefix` is where relative `include` paths start.
pub struct TreeParser<'a> {
    pub conf_prefix: &'a Path,
    pub files: &'a mut Files,
    depth: usize,
    /// Blocks open around the current token, across includes.
    nest: usize,
}

/// What a parse produced: the directives read before any error, and the error.
/// Directive errors that come earlier in the file than a syntax error must win,
/// as in nginx, which acts on each directive as it reads it.
pub type Parsed = (Vec<Directive>, Option<ConfError>);

const MAX_INCLUDE_DEPTH: usize = 32;
/// Deeper blocks than any configuration needs; the parser and the directive
/// walk recurse once per block, so the stack stays bounded.
pub const MAX_NESTING: usize = 100;

impl<'a> TreeParser<'a> {
    pub fn new(conf_prefix: &'a Path, files: &'a mut Files) -> Self {
        TreeParser {
            conf_prefix,
            files,
            depth: 0,
            nest: 0,
        }
    }

    /// Reads and parses one file, recording it for `-T`.
    pub fn parse_file(&mut self, path: &Path, from: Option<&Src>) -> Parsed {
        let bytes = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) => {
                let msg = format!(
                    "open() \"{}\" failed ({})",
                    path.display(),
                    crate::log::errno_text(&e)
                );
                let err = match from {
                    Some(s) => ConfError::at(msg, s),
                    None => ConfError::bare(msg),
                };
                return (Vec::new(), Some(err));
            }
        };
        let file = Some(Arc::new(path.to_path_buf()));
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                // Arguments become paths, headers and log text: refuse bytes
                // that are not UTF-8 where they stand.
                let bad = e.utf8_error().valid_up_to();
                let line = 1 + e.as_bytes()[..bad].iter().filter(|&&b| b == b'\n').count();
                let src = Src { file, line };
                return (Vec::new(), Some(ConfError::at("invalid UTF-8 byte", &src)));
            }
        };
        self.files.list.push((path.to_path_buf(), text.clone()));
        self.parse_text(&text, file)
    }

    /// Parses text from `file` (None: the command line).
    pub fn parse_text(&mut self, text: &str, file: Option<Arc<PathBuf>>) -> Parsed {
        let toks = match tokenize(text) {
            Ok(t) => t,
            Err(e) => {
                // Keep what precedes the bad token: parse the good prefix first.
                let src = Src {
                    file: file.clone(),
                    line: e.line,
                };
                return (Vec::new(), Some(ConfError::at(e.message, &src)));
            }
        };
        let mut pos = 0;
        let (dirs, err) = self.block(&toks, &mut pos, &file, false);
        (dirs, err)
    }

    fn block(
        &mut self,
        toks: &[(Tok, usize)],
        pos: &mut usize,
        file: &Option<Arc<PathBuf>>,
        nested: bool,
    ) -> Parsed {
        let mut out: Vec<Directive> = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let src_at = |line: usize| Src {
            file: file.clone(),
            line,
        };
        while *pos < toks.len() {
            let (tok, line) = &toks[*pos];
            *pos += 1;
            match tok {
                Tok::Word(w) => words.push(w.clone()),
                Tok::Semi => {
                    if words.is_empty() {
                        return (out, Some(ConfError::at("unexpected \";\"", &src_at(*line))));
                    }
                    let name = words.remove(0);
                    let args = std::mem::take(&mut words);
                    let src = src_at(*line);
                    if name == "include" {
                        if let Some(e) = self.include(&args, &src, &mut out) {
                            return (out, Some(e));
                        }
                    } else {
                        out.push(Directive {
                            name,
                            args,
                            block: None,
                            src,
                        });
                    }
                }
                Tok::Open => {
                    if words.is_empty() {
                        return (out, Some(ConfError::at("unexpected \"{\"", &src_at(*line))));
                    }
                    if self.nest >= MAX_NESTING {
                        let msg = format!("blocks nested deeper than {MAX_NESTING}");
                        return (out, Some(ConfError::at(msg, &src_at(*line))));
                    }
                    let name = words.remove(0);
                    let args = std::mem::take(&mut words);
                    let src = src_at(*line);
                    self.nest += 1;
                    let (children, err) = self.block(toks, pos, file, true);
                    self.nest -= 1;
                    out.push(Directive {
                        name,
                        args,
                        block: Some(children),
                        src,
                    });
                    if err.is_some() {
                        return (out, err);
                    }
                }
                Tok::Close => {
                    if !words.is_empty() {
                        return (out, Some(ConfError::at("unexpected \"}\"", &src_at(*line))));
                    }
                    if !nested {
                        return (out, Some(ConfError::at("unexpected \"}\"", &src_at(*line))));
                    }
                    return (out, None);
                }
            }
        }
        let last = toks.last().map(|t| t.1).unwrap_or(1);
        if !words.is_empty() {
            let e = ConfError::at(
                "unexpected end of file, expecting \";\" or \"}\"",
                &src_at(last),
            );
            return (out, Some(e));
        }
        if nested {
            let e = ConfError::at("unexpected end of file, expecting \"}\"", &src_at(last));
            return (out, Some(e));
        }
        (out, None)
    }

    /// `include FILE|GLOB;` — a relative path starts at the configuration prefix.
    /// A glob that matches nothing is fine; a plain file that is missing is not.
    fn include(
        &mut self,
        args: &[String],
        src: &Src,
        out: &mut Vec<Directive>,
    ) -> Option<ConfError> {
        if args.len() != 1 {
            return Some(ConfError::at(
                "invalid number of arguments in \"include\" directive",
                src,
            ));
        }
        if self.depth >= MAX_INCLUDE_DEPTH {
            return Some(ConfError::at(
                format!(
                    "include nesting deeper than {MAX_INCLUDE_DEPTH} at \"{}\"",
                    args[0]
                ),
                src,
            ));
        }
        let path = full_name(self.conf_prefix, &args[0]);
        let pattern = path.to_string_lossy().into_owned();
        let is_glob = pattern.contains(['*', '?', '[']);
        let files: Vec<PathBuf> = if is_glob {
            match glob::glob(&pattern) {
                Ok(paths) => {
                    let mut v: Vec<PathBuf> = paths
                        .filter_map(Result::ok)
                        .filter(|p| !p.is_dir())
                        .collect();
                    v.sort();
                    v
                }
                Err(e) => {
                    return Some(ConfError::at(
                        format!("glob() \"{pattern}\" failed ({e})"),
                        src,
                    ));
                }
            }
        } else {
            vec![path]
        };
        for f in files {
            self.depth += 1;
            let (dirs, err) = self.parse_file(&f, Some(src));
            self.depth -= 1;
            out.extend(dirs);
            if err.is_some() {
                return err;
            }
        }
        None
    }
}

/// A relative path taken from `prefix`; an absolute one as it is.
pub fn full_name(prefix: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        // "./x" is "x" under the prefix, written without the dot.
        prefix.join(p.strip_prefix(".").unwrap_or(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Parsed {
        let mut files = Files::default();
        let mut p = TreeParser::new(Path::new("/nonexistent"), &mut files);
        p.parse_text(text, Some(Arc::new(PathBuf::from("/t.conf"))))
    }

    #[test]
    fn nested_blocks() {
        let (d, e) = parse("a 1;\nb {\n c 2 3;\n d { }\n}\n");
        assert!(e.is_none());
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "b");
        let kids = d[1].block.as_ref().unwrap();
        assert_eq!(kids[0].args, vec!["2", "3"]);
        assert_eq!(kids[0].src.line, 3);
        assert!(kids[1].block.as_ref().unwrap().is_empty());
    }

    #[test]
    fn syntax_errors_with_lines() {
        let (_, e) = parse("a {\n b;\n");
        assert_eq!(
            e.unwrap().to_string(),
            "unexpected end of file, expecting \"}\" in /t.conf:2"
        );
        let (_, e) = parse("a;\n}\n");
        assert_eq!(e.unwrap().to_string(), "unexpected \"}\" in /t.conf:2");
        let (_, e) = parse("a b");
        assert_eq!(
            e.unwrap().to_string(),
            "unexpected end of file, expecting \";\" or \"}\" in /t.conf:1"
        );
        let (d, e) = parse("a;\n;\n");
        assert_eq!(d.len(), 1);
        assert_eq!(e.unwrap().to_string(), "unexpected \";\" in /t.conf:2");
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = "a {".repeat(MAX_NESTING) + &"}".repeat(MAX_NESTING);
        assert!(parse(&ok).1.is_none());
        let deep = "a {\n".repeat(100_000);
        let e = parse(&deep).1.unwrap().to_string();
        assert_eq!(
            e,
            format!("blocks nested deeper than {MAX_NESTING} in /t.conf:101")
        );
    }

    #[test]
    fn bytes_that_are_not_utf8() {
        let dir = std::env::temp_dir().join(format!("sluice-tree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.conf");
        std::fs::write(&f, b"a;\nb \xff;\n").unwrap();
        let mut files = Files::default();
        let mut p = TreeParser::new(&dir, &mut files);
        let e = p.parse_file(&f, None).1.unwrap().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(e, format!("invalid UTF-8 byte in {}:2", f.display()));
    }

    #[test]
    fn include_missing_file() {
        let (_, e) = parse("include /nonexistent/x.conf;");
        let s = e.unwrap().to_string();
        assert!(
            s.starts_with("open() \"/nonexistent/x.conf\" failed (2: No such file or directory)"),
            "{s}"
        );
        assert!(s.ends_with("in /t.conf:1"), "{s}");
        let (d, e) = parse("include /nonexistent/*.conf;");
        assert!(e.is_none() && d.is_empty());
    }
}
