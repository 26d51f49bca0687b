//! nginx's `map` (http and stream): the directive, the map it builds and the
//! matcher (exact strings ignoring case, `hostnames` masks, regexes in order,
//! `default`), plus what a request needs to evaluate a map lazily (its cache,
//! the nesting guard). Evaluating texts is the caller's (`http::vars`,
//! `stream`), through `Evaluator`. No I/O.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;

use regex::Regex;

use super::build::{Args, Builder, HTTP, Node, STREAM, Spec, not_here};
use super::tree::Directive;
use super::vars::{self, MapVar, Segment, Template, Var};
use super::{ConfError, Src};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "map",
        ctx: HTTP | STREAM,
        args: Args::Exactly(2),
        block: true,
        set: set_map,
    },
    Spec {
        name: "map_hash_max_size",
        ctx: HTTP | STREAM,
        args: Args::Exactly(1),
        block: false,
        set: set_hash_tuning,
    },
    Spec {
        name: "map_hash_bucket_size",
        ctx: HTTP | STREAM,
        args: Args::Exactly(1),
        block: false,
        set: set_hash_tuning,
    },
];

/// nginx's hash sizing: checked as nginx checks it, then ignored with a
/// warning (sluice's maps are sized by themselves).
fn set_hash_tuning(b: &mut Builder, d: &Directive, _: &mut Node<'_>) -> Result<(), ConfError> {
    let ok = if d.name == "map_hash_max_size" {
        super::build::number::<usize>(&d.args[0]).is_some()
    } else {
        super::values::parse_size(&d.args[0]).is_some()
    };
    if !ok {
        return Err(super::build::invalid_value(d));
    }
    b.warnings.push(at(
        format!(
            "the \"{}\" directive is ignored: sluice's maps need no tuning",
            d.name
        ),
        &d.src,
    ));
    Ok(())
}

/// One `map` block, built.
#[derive(Debug)]
pub struct Map {
    /// The text whose value is looked up.
    pub source: Template,
    /// `volatile`: evaluated at each use, never kept for the request.
    pub volatile: bool,
    hostnames: bool,
    values: Vec<Template>,
    /// Lowercased strings (and `.example.com`'s `example.com`).
    exact: HashMap<String, usize>,
    /// `*.example.com` and `.example.com` as `.example.com`, longest first.
    head: Vec<(String, usize)>,
    /// `mail.*` as `mail.`, longest first.
    tail: Vec<(String, usize)>,
    regexes: Vec<(Regex, usize)>,
    /// None: the empty string.
    default: Option<usize>,
    /// `geo` or `split_clients`: looked up there instead.
    special: Option<super::geo::Special>,
}

/// The captures of the regex that matched, for `$N` and named captures in
/// the value (and, named, for the request afterwards).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures {
    /// `$0` .. `$N`; a group that did not take part is empty.
    pub numbered: Vec<String>,
    pub named: Vec<(String, String)>,
}

impl Captures {
    /// What `re` captured in `c`.
    pub fn of(re: &Regex, c: &regex::Captures<'_>) -> Captures {
        Captures {
            numbered: c
                .iter()
                .map(|m| m.map_or_else(String::new, |m| m.as_str().to_string()))
                .collect(),
            named: re
                .capture_names()
                .flatten()
                .map(|n| (n.to_string(), c.name(n).map_or("", |m| m.as_str()).into()))
                .collect(),
        }
    }

    pub fn named(&self, name: &str) -> Option<&str> {
        self.named
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Map {
    /// A `geo` or `split_clients` variable's map.
    pub(super) fn special(source: Template, special: super::geo::Special) -> Map {
        Map {
            source,
            volatile: false,
            hostnames: false,
            values: Vec::new(),
            exact: HashMap::new(),
            head: Vec::new(),
            tail: Vec::new(),
            regexes: Vec::new(),
            default: None,
            special: Some(special),
        }
    }

    /// The value `source` maps to, nginx's order: an exact string (case
    /// ignored), the longest `*.`/`.` mask, the longest `.*` mask, the first
    /// regex that matches (not tried on an empty source), the default. None
    /// stands for the empty string (no `default`).
    pub fn find(&self, source: &str) -> (Option<&Template>, Option<Captures>) {
        let source = match source.strip_suffix('.') {
            Some(s) if self.hostnames => s,
            _ => source,
        };
        let low = source.to_ascii_lowercase();
        let fixed = self.exact.get(&low).copied().or_else(|| {
            self.head
                .iter()
                .find(|(sfx, _)| low.len() > sfx.len() && low.ends_with(sfx.as_str()))
                .or_else(|| {
                    self.tail
                        .iter()
                        .find(|(pfx, _)| low.starts_with(pfx.as_str()))
                })
                .map(|(_, i)| *i)
        });
        if let Some(i) = fixed {
            return (self.values.get(i), None);
        }
        if !source.is_empty() {
            for (re, i) in &self.regexes {
                let Some(c) = re.captures(source) else {
                    continue;
                };
                // A regex without groups leaves `$1` to the last one that had.
                let caps = (re.captures_len() > 1).then(|| Captures::of(re, &c));
                return (self.values.get(*i), caps);
            }
        }
        (self.default.and_then(|i| self.values.get(i)), None)
    }
}

/// A map being read: the entries so far, checked as nginx's hash checks them.
#[derive(Default)]
struct MapB {
    hostnames: bool,
    volatile: bool,
    values: Vec<Template>,
    exact: HashMap<String, usize>,
    head: Vec<(String, usize)>,
    tail: Vec<(String, usize)>,
    regexes: Vec<(Regex, usize)>,
    default: Option<usize>,
}

/// Why an entry's key was refused (nginx's `NGX_DECLINED` and `NGX_BUSY`).
#[derive(Debug, PartialEq, Eq)]
enum KeyError {
    Invalid,
    Conflict(String),
}

impl MapB {
    /// Adds a string or, with `hostnames`, a mask.
    fn add_key(&mut self, key: &str, value: usize) -> Result<(), KeyError> {
        let key = key.to_ascii_lowercase();
        if self.hostnames {
            let stars = key.matches('*').count();
            if stars > 1 || key.contains("..") || key.contains('\0') {
                return Err(KeyError::Invalid);
            }
            if key.len() > 1 && key.starts_with('.') {
                // `.example.com`: `example.com` itself and every name under it.
                let bare = &key[1..];
                if self.exact.contains_key(bare) {
                    return Err(KeyError::Conflict(key));
                }
                Self::add_mask(&mut self.head, key.clone(), value)?;
                self.exact.insert(bare.to_string(), value);
                return Ok(());
            }
            if key.len() > 2 {
                if let Some(rest) = key.strip_prefix('*') {
                    if rest.starts_with('.') {
                        return Self::add_mask(&mut self.head, rest.to_string(), value);
                    }
                }
                if let Some(rest) = key.strip_suffix('*') {
                    if rest.ends_with('.') {
                        return Self::add_mask(&mut self.tail, rest.to_string(), value);
                    }
                }
            }
            if stars > 0 {
                return Err(KeyError::Invalid);
            }
        }
        if self.exact.contains_key(&key) {
            return Err(KeyError::Conflict(key));
        }
        self.exact.insert(key, value);
        Ok(())
    }

    fn add_mask(list: &mut Vec<(String, usize)>, m: String, value: usize) -> Result<(), KeyError> {
        if list.iter().any(|(k, _)| *k == m) {
            // `*.example.com` and `.example.com` are one mask to nginx.
            return Err(KeyError::Conflict(m));
        }
        list.push((m, value));
        Ok(())
    }

    fn finish(mut self, source: Template) -> Map {
        // Longest first; two masks of one length never both match.
        self.head.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        self.tail.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        Map {
            source,
            volatile: self.volatile,
            hostnames: self.hostnames,
            values: self.values,
            exact: self.exact,
            head: self.head,
            tail: self.tail,
            regexes: self.regexes,
            default: self.default,
            special: None,
        }
    }
}

fn at(msg: impl Into<String>, src: &Src) -> ConfError {
    ConfError::at(msg, src)
}

/// A map (or `proxy_redirect`) regex, after its `~`: `*` first ignores case.
pub(super) fn regex(pattern: &str) -> Result<Regex, String> {
    let (caseless, p) = match pattern.strip_prefix('*') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let re = if caseless {
        format!("(?i){p}")
    } else {
        p.to_string()
    };
    Regex::new(&re).map_err(|e| {
        // One line, as nginx's PCRE messages are: the parser's own reason
        // without its picture of the pattern.
        let text = e.to_string();
        let why = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(&text);
        format!("regex \"{p}\" is invalid: {why}")
    })
}

fn set_map(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    if !matches!(n, Node::Http(_) | Node::Stream(_)) {
        return Err(not_here(d));
    }
    let Some(name) = d.args[1].strip_prefix('$') else {
        return Err(at(
            format!("invalid variable name \"{}\"", d.args[1]),
            &d.src,
        ));
    };
    if vars::is_builtin(name) {
        return Err(at(format!("the duplicate \"{name}\" variable"), &d.src));
    }
    let slot = vars::map_var(name)
        .ok_or_else(|| at(format!("invalid variable name \"{}\"", d.args[1]), &d.src))?;
    let source = vars::compile(&d.args[0]).map_err(|m| at(m, &d.src))?;
    let mut m = MapB::default();
    for e in d.block.as_deref().unwrap_or_default() {
        entry(&mut m, e)?;
    }
    b.maps.push((slot, m.finish(source)));
    Ok(())
}

/// One line of a map block: `hostnames;`, `volatile;`, `default VALUE;`,
/// `~REGEX VALUE;`, `~*REGEX VALUE;` or `STRING VALUE;` (`\` escapes a
/// string that reads as one of the others). `include` was spliced in.
fn entry(m: &mut MapB, e: &Directive) -> Result<(), ConfError> {
    if e.block.is_some() {
        return Err(at("unexpected \"{\"", &e.src));
    }
    if e.args.is_empty() && e.name == "hostnames" {
        m.hostnames = true;
        return Ok(());
    }
    if e.args.is_empty() && e.name == "volatile" {
        m.volatile = true;
        return Ok(());
    }
    if e.args.len() != 1 {
        return Err(at("invalid number of the map parameters", &e.src));
    }
    let value = vars::compile(&e.args[0]).map_err(|msg| at(msg, &e.src))?;
    let index = m.values.len();
    if e.name == "default" {
        if m.default.is_some() {
            return Err(at("duplicate default map parameter", &e.src));
        }
        m.values.push(value);
        m.default = Some(index);
        return Ok(());
    }
    if let Some(pattern) = e.name.strip_prefix('~') {
        let re = regex(pattern).map_err(|msg| at(msg, &e.src))?;
        if let Some(n) = re.capture_names().flatten().find(|n| vars::is_builtin(n)) {
            return Err(at(format!("the duplicate \"{n}\" variable"), &e.src));
        }
        m.values.push(value);
        m.regexes.push((re, index));
        return Ok(());
    }
    let key = e.name.strip_prefix('\\').unwrap_or(&e.name);
    m.add_key(key, index).map_err(|k| match k {
        KeyError::Invalid => at(format!("invalid hostname or wildcard \"{key}\""), &e.src),
        KeyError::Conflict(k) => at(format!("conflicting parameter \"{k}\""), &e.src),
    })?;
    m.values.push(value);
    Ok(())
}

/// The `map` variables of the http and stream blocks, and the named captures
/// of map regexes (variables too): nginx knows them before it compiles any
/// text, so a use may come before the block.
pub(super) fn declared(
    dirs: &[Directive],
    http: &mut Vec<String>,
    stream: &mut Vec<String>,
    captures: &mut Vec<String>,
) {
    for top in dirs {
        let out = match top.name.as_str() {
            "http" => &mut *http,
            "stream" => &mut *stream,
            _ => continue,
        };
        for d in top
            .block
            .iter()
            .flatten()
            .filter(|d| matches!(d.name.as_str(), "map" | "geo" | "split_clients"))
        {
            // geo's variable is its last argument.
            let var = if d.name == "geo" {
                d.args.last()
            } else {
                d.args.get(1)
            };
            let Some(name) = var.and_then(|a| a.strip_prefix('$')) else {
                continue;
            };
            out.push(name.to_string());
            for e in d.block.iter().flatten() {
                if let Some(re) = e.name.strip_prefix('~').and_then(|p| regex(p).ok()) {
                    captures.extend(re.capture_names().flatten().map(str::to_string));
                }
            }
        }
    }
}

/// Gives each declared `map` variable its map; a later block for the same
/// variable replaces an earlier one, as in nginx.
pub(super) fn fill(maps: Vec<(std::sync::Arc<MapVar>, Map)>) {
    let mut done: Vec<usize> = Vec::new();
    for (slot, map) in maps.into_iter().rev() {
        if done.contains(&slot.index) {
            continue;
        }
        done.push(slot.index);
        let _ = slot.map.set(map);
    }
}

/// A request's (or stream session's) map results, kept until it ends, and
/// the named captures map regexes set. Empty until a map is used.
#[derive(Debug, Default)]
pub struct MapCache {
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    values: Vec<(usize, String)>,
    named: Vec<(String, String)>,
}

impl MapCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of a named capture a map regex set.
    pub fn named(&self, name: &str) -> Option<String> {
        self.lock()
            .named
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

/// What a request or session gives map evaluation.
pub trait Evaluator {
    fn maps(&self) -> &MapCache;
    /// `t` evaluated, with `caps` (when given) standing for `$N` and named
    /// captures.
    fn text(&self, t: &Template, caps: Option<&Captures>) -> String;
    /// A value `set` gave the variable, which then wins over the map.
    fn assigned(&self, _name: &str) -> Option<String> {
        None
    }
    /// Logs nginx's `cycle while evaluating variable`.
    fn cycle(&self, name: &str);
}

/// How many map evaluations may nest, as nginx's `ngx_http_variable_depth`.
const MAX_DEPTH: u32 = 100;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// A cycle was met below the outermost evaluation: every map on the way
    /// out gives the empty string and keeps nothing.
    static CYCLE: Cell<bool> = const { Cell::new(false) };
}

struct Nested;

impl Nested {
    fn enter() -> Option<Nested> {
        DEPTH.with(|d| {
            if d.get() >= MAX_DEPTH {
                return None;
            }
            d.set(d.get() + 1);
            Some(Nested)
        })
    }

    /// Whether a cycle was met inside this evaluation; the outermost one
    /// clears the mark.
    fn failed(&self) -> bool {
        let failed = CYCLE.with(Cell::get);
        if failed && DEPTH.with(Cell::get) == 1 {
            CYCLE.with(|c| c.set(false));
        }
        failed
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The value of a `map` variable: from the cache, else its source evaluated,
/// looked up and its value evaluated (kept unless `volatile`). A map that
/// uses itself, directly or not, gives the empty string, and the error is
/// logged once.
pub fn value(ev: &impl Evaluator, var: &MapVar) -> String {
    if let Some(v) = ev.assigned(&var.name) {
        return v;
    }
    let Some(map) = var.map.get() else {
        return String::new();
    };
    if !map.volatile {
        let c = ev.maps().lock();
        if let Some((_, v)) = c.values.iter().find(|(i, _)| *i == var.index) {
            return v.clone();
        }
    }
    if CYCLE.with(Cell::get) {
        // Unwinding from a cycle: nothing more is evaluated.
        return String::new();
    }
    let Some(nested) = Nested::enter() else {
        if !CYCLE.with(|c| c.replace(true)) {
            ev.cycle(&var.name);
        }
        return String::new();
    };
    let source = ev.text(&map.source, None);
    let (value, caps) = match &map.special {
        Some(sp) => {
            let forwarded = sp.forwarded().map(|t| ev.text(t, None));
            (sp.find(&source, forwarded.as_deref()), None)
        }
        None => map.find(&source),
    };
    if let Some(c) = &caps {
        let mut cache = ev.maps().lock();
        for (n, v) in &c.named {
            match cache.named.iter_mut().find(|(k, _)| k == n) {
                Some(slot) => slot.1 = v.clone(),
                None => cache.named.push((n.clone(), v.clone())),
            }
        }
    }
    let v = value.map_or_else(String::new, |t| ev.text(t, caps.as_ref()));
    if nested.failed() {
        return String::new();
    }
    if !map.volatile {
        let mut c = ev.maps().lock();
        if !c.values.iter().any(|(i, _)| *i == var.index) {
            c.values.push((var.index, v.clone()));
        }
    }
    v
}

/// Evaluates `t` segment by segment: `caps` first for `$N` and named
/// captures, `value` for every other variable.
pub fn eval_with_captures(
    t: &Template,
    caps: Option<&Captures>,
    value: impl Fn(&Var) -> String,
) -> String {
    let mut out = String::new();
    for s in &t.segments {
        match s {
            Segment::Lit(l) => out.push_str(l),
            Segment::Var(v) => {
                let local = caps.and_then(|c| match v {
                    Var::Capture(i) => Some(c.numbered.get(*i).map_or("", |s| s.as_str())),
                    Var::User(n) => c.named(n),
                    _ => None,
                });
                match local {
                    Some(l) => out.push_str(l),
                    None => out.push_str(&value(v)),
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Template {
        vars::compile(s).unwrap()
    }

    fn build(hostnames: bool, entries: &[(&str, &str)]) -> Map {
        let _names = vars::declare(vec!["rest".into(), "d".into()]);
        let mut m = MapB {
            hostnames,
            ..Default::default()
        };
        for (k, v) in entries {
            let e = Directive {
                name: k.to_string(),
                args: vec![v.to_string()],
                block: None,
                src: Src {
                    file: None,
                    line: 1,
                },
            };
            entry(&mut m, &e).unwrap();
        }
        m.finish(lit("$host"))
    }

    fn get(m: &Map, s: &str) -> String {
        match m.find(s) {
            (Some(t), caps) => eval_with_captures(t, caps.as_ref(), |_| "?".into()),
            (None, _) => "<none>".into(),
        }
    }

    #[test]
    fn exact_ignores_case_and_default() {
        let m = build(false, &[("Foo", "1"), ("", "empty"), ("default", "d")]);
        assert_eq!(get(&m, "foo"), "1");
        assert_eq!(get(&m, "FOO"), "1");
        assert_eq!(get(&m, ""), "empty");
        assert_eq!(get(&m, "bar"), "d");
        let m = build(false, &[("a", "1")]);
        assert_eq!(get(&m, "b"), "<none>");
        // Without `hostnames`, masks are plain strings.
        let m = build(false, &[("*.example.com", "1")]);
        assert_eq!(get(&m, "*.EXAMPLE.com"), "1");
        assert_eq!(get(&m, "www.example.com"), "<none>");
    }

    #[test]
    fn escaped_keywords() {
        let m = build(
            false,
            &[("\\default", "1"), ("\\~x", "2"), ("default", "3")],
        );
        assert_eq!(get(&m, "default"), "1");
        assert_eq!(get(&m, "~x"), "2");
        assert_eq!(get(&m, "y"), "3");
    }

    #[test]
    fn hostnames_precedence() {
        let m = build(
            true,
            &[
                ("~^www", "re"),
                ("*.example.com", "star"),
                ("*.a.example.com", "longer"),
                (".example.org", "dot"),
                ("www.example.*", "tail"),
                ("www.*", "short-tail"),
                ("mail.example.com", "exact"),
            ],
        );
        assert_eq!(get(&m, "mail.example.com"), "exact");
        assert_eq!(get(&m, "Mail.Example.COM."), "exact");
        assert_eq!(get(&m, "x.example.com"), "star");
        assert_eq!(get(&m, "x.y.example.com"), "star");
        assert_eq!(get(&m, "x.a.example.com"), "longer");
        assert_eq!(get(&m, "example.com"), "<none>");
        assert_eq!(get(&m, "example.org"), "dot");
        assert_eq!(get(&m, "x.example.org"), "dot");
        // A prefix mask wins over a suffix mask, a suffix mask over a regex.
        assert_eq!(get(&m, "www.example.com"), "star");
        assert_eq!(get(&m, "www.example.net"), "tail");
        assert_eq!(get(&m, "www.other.net"), "short-tail");
        assert_eq!(get(&m, "www.example"), "short-tail");
        assert_eq!(get(&m, "www"), "re");
        assert_eq!(get(&m, "wwwx"), "re");
    }

    #[test]
    fn regexes_in_order_with_captures() {
        let m = build(
            false,
            &[
                ("~^/a/(?<rest>.*)$", "a:$rest:$1"),
                ("~*^/A", "second"),
                ("~^/b(x)?", "b[$1]"),
                ("/a/exact", "exact"),
            ],
        );
        assert_eq!(get(&m, "/a/exact"), "exact");
        assert_eq!(get(&m, "/a/zz"), "a:zz:zz");
        assert_eq!(get(&m, "/aB"), "second");
        assert_eq!(get(&m, "/b"), "b[]");
        assert_eq!(get(&m, "/bx"), "b[x]");
        // A regex is never tried on an empty source.
        let m = build(false, &[("~.*", "any")]);
        assert_eq!(get(&m, ""), "<none>");
        assert_eq!(get(&m, "x"), "any");
        // Without groups, `$1` is the caller's.
        let m = build(false, &[("~^x", "[$1]")]);
        assert_eq!(get(&m, "x"), "[?]");
    }

    fn refuse(hostnames: bool, entries: &[(&str, &str)]) -> String {
        let mut m = MapB {
            hostnames,
            ..Default::default()
        };
        for (k, v) in entries {
            let e = Directive {
                name: k.to_string(),
                args: v.split_whitespace().map(str::to_string).collect(),
                block: None,
                src: Src {
                    file: None,
                    line: 7,
                },
            };
            if let Err(err) = entry(&mut m, &e) {
                return err.to_string();
            }
        }
        panic!("accepted");
    }

    #[test]
    fn refusals() {
        let starts = |e: &[(&str, &str)], h: bool, msg: &str| {
            let got = refuse(h, e);
            assert!(got.starts_with(msg), "{got}");
        };
        starts(
            &[("a", "1"), ("A", "2")],
            false,
            "conflicting parameter \"a\"",
        );
        starts(
            &[("default", "1"), ("default", "2")],
            false,
            "duplicate default map parameter",
        );
        starts(
            &[("a", "1 2")],
            false,
            "invalid number of the map parameters",
        );
        starts(
            &[("default", "")],
            false,
            "invalid number of the map parameters",
        );
        starts(&[("~(", "1")], false, "regex \"(\" is invalid");
        starts(
            &[("~(?<host>x)", "1")],
            false,
            "the duplicate \"host\" variable",
        );
        starts(
            &[(".example.com", "1"), ("*.example.com", "2")],
            true,
            "conflicting parameter \".example.com\"",
        );
        starts(
            &[("example.com", "1"), (".example.com", "2")],
            true,
            "conflicting parameter \".example.com\"",
        );
        starts(
            &[("*.*.com", "1")],
            true,
            "invalid hostname or wildcard \"*.*.com\"",
        );
        starts(&[("a..com", "1")], true, "invalid hostname or wildcard");
        starts(
            &[("*example.com", "1")],
            true,
            "invalid hostname or wildcard",
        );
        starts(&[("x", "$nope")], false, "unknown \"nope\" variable");
    }

    struct Fake {
        cache: MapCache,
        source: std::cell::Cell<u32>,
    }

    impl Evaluator for Fake {
        fn maps(&self) -> &MapCache {
            &self.cache
        }
        fn text(&self, t: &Template, caps: Option<&Captures>) -> String {
            eval_with_captures(t, caps, |v| match v {
                Var::Host => {
                    self.source.set(self.source.get() + 1);
                    "www.example.com".into()
                }
                Var::Map(m) => value(self, m),
                _ => String::new(),
            })
        }
        fn cycle(&self, _: &str) {}
    }

    #[test]
    fn cached_unless_volatile() {
        for (volatile, evaluated) in [(false, 1), (true, 3)] {
            let mut m = build(false, &[("~^www\\.(?<d>.*)", "$d")]);
            m.volatile = volatile;
            let var = MapVar {
                name: "x".into(),
                index: 0,
                map: std::sync::OnceLock::new(),
            };
            var.map.set(m).unwrap();
            let f = Fake {
                cache: MapCache::default(),
                source: Default::default(),
            };
            for _ in 0..3 {
                assert_eq!(value(&f, &var), "example.com");
            }
            assert_eq!(f.source.get(), evaluated);
            assert_eq!(f.cache.named("d").as_deref(), Some("example.com"));
        }
    }

    #[test]
    fn a_cycle_ends() {
        // A map whose value is itself: nested until the guard stops it.
        let var = std::sync::Arc::new(MapVar {
            name: "x".into(),
            index: 0,
            map: std::sync::OnceLock::new(),
        });
        let mut m = MapB::default();
        let itself = Template {
            segments: vec![
                Segment::Lit("a".into()),
                Segment::Var(Var::Map(var.clone())),
            ],
        };
        m.values.push(itself.clone());
        m.default = Some(0);
        // Used twice at each level (source and value): unwinding must not
        // evaluate both sides again at every level.
        var.map.set(m.finish(itself)).unwrap();
        let f = Fake {
            cache: MapCache::default(),
            source: Default::default(),
        };
        assert_eq!(value(&f, &var), "");
        DEPTH.with(|d| assert_eq!(d.get(), 0));
        CYCLE.with(|c| assert!(!c.get()));
        assert!(f.cache.lock().values.is_empty());
    }

    #[test]
    fn in_the_configuration() {
        use super::super::testutil::{err, try_build};
        let (c, w) = try_build(
            "events {} http { map_hash_bucket_size 64; \
             server { listen 127.0.0.1:1; return 200 $m; } \
             map $uri $m { default first; } map $uri $m { default second; } } \
             stream { map $remote_addr $s { default 127.0.0.1:2; } \
             server { listen 127.0.0.1:3; proxy_pass $s; } }",
        )
        .expect("config");
        assert!(
            w[0].to_string()
                .contains("\"map_hash_bucket_size\" directive is ignored")
        );
        let http = c.http.expect("http");
        let ret = http.servers[0].script.iter().find_map(|s| match s {
            crate::conf::model::Stmt::Return(r) => r.text.clone(),
            _ => None,
        });
        let Some(Segment::Var(Var::Map(m))) = ret.expect("return").segments.first().cloned() else {
            panic!("not a map variable");
        };
        // The later block for a variable wins, as in nginx.
        assert_eq!(get(m.map.get().expect("built"), "/"), "second");
        let st = c.stream.expect("stream");
        assert!(matches!(
            st.servers[0].target,
            crate::conf::model::StreamTarget::Dynamic(_)
        ));
        // The http block's maps are not the stream block's.
        assert_eq!(
            err("events {} http { map $uri $h { } } \
                 stream { server { listen 127.0.0.1:1; return $h; } }"),
            "unknown \"h\" variable in /t.conf:1"
        );
        assert_eq!(
            err("events {} http {\nmap $uri $host { } }"),
            "the duplicate \"host\" variable in /t.conf:2"
        );
        assert_eq!(
            err("events {} http { map_hash_max_size 1k; }"),
            "\"map_hash_max_size\" directive invalid value in /t.conf:1"
        );
        assert_eq!(
            err("events {} map $a $b { }"),
            "\"map\" directive is not allowed here in /t.conf:1"
        );
    }
}
