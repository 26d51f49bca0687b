//! nginx's rewrite module: `return`, `rewrite`, `set`, `if` and `break`, in
//! server and location blocks (and inside `if`), kept in order as a script the
//! request path runs. `if` blocks hold rewrite directives only.

use super::build::{Args, Builder, LOC, Node, SRV, Spec, not_here};
use super::model::{Cond, FileTest, IfConf, Return, RewriteFlag, Stmt};
use super::tree::Directive;
use super::{ConfError, vars};

/// `if` blocks.
pub(super) const IF: u8 = 64;
const SLI: u8 = SRV | LOC | IF;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "return",
        ctx: SLI,
        args: Args::Range(1, 2),
        block: false,
        set: set_return,
    },
    Spec {
        name: "rewrite",
        ctx: SLI,
        args: Args::Range(2, 3),
        block: false,
        set: set_rewrite,
    },
    Spec {
        name: "set",
        ctx: SLI,
        args: Args::Exactly(2),
        block: false,
        set: set_set,
    },
    Spec {
        name: "break",
        ctx: SLI,
        args: Args::Exactly(0),
        block: false,
        set: set_break,
    },
    Spec {
        name: "if",
        ctx: SRV | LOC,
        args: Args::AtLeast(1),
        block: true,
        set: set_if,
    },
];

fn compile(t: &str, d: &Directive) -> Result<vars::Template, ConfError> {
    vars::compile(t).map_err(|m| ConfError::at(m, &d.src))
}

fn push(n: &mut Node<'_>, d: &Directive, s: Stmt) -> Result<(), ConfError> {
    n.script().ok_or_else(|| not_here(d))?.push(s);
    Ok(())
}

fn set_return(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let first = &d.args[0];
    let bad = || ConfError::at(format!("invalid return code \"{first}\""), &d.src);
    let ret = if first.bytes().all(|b| b.is_ascii_digit()) {
        let code: u16 = first.parse().map_err(|_| bad())?;
        if code > 999 {
            return Err(bad());
        }
        Return {
            code,
            text: d.args.get(1).map(|t| compile(t, d)).transpose()?,
        }
    } else {
        let is_url = first.starts_with("http://")
            || first.starts_with("https://")
            || first.starts_with("$scheme");
        if d.args.len() == 2 || !is_url {
            return Err(bad());
        }
        Return {
            code: 302,
            text: Some(compile(first, d)?),
        }
    };
    push(n, d, Stmt::Return(ret))
}

fn set_rewrite(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let regex = regex::Regex::new(&d.args[0])
        .map_err(|e| ConfError::at(format!("regex \"{}\" is invalid: {e}", d.args[0]), &d.src))?;
    let flag = match d.args.get(2).map(String::as_str) {
        None => RewriteFlag::None,
        Some("last") => RewriteFlag::Last,
        Some("break") => RewriteFlag::Break,
        Some("redirect") => RewriteFlag::Redirect,
        Some("permanent") => RewriteFlag::Permanent,
        Some(other) => {
            return Err(ConfError::at(
                format!("invalid parameter \"{other}\""),
                &d.src,
            ));
        }
    };
    // A replacement ending with "?" drops the request's arguments; the
    // "?" itself goes.
    let (text, add_args) = match d.args[1].strip_suffix('?') {
        Some(t) => (t, false),
        None => (d.args[1].as_str(), true),
    };
    let replacement = compile(text, d)?;
    push(
        n,
        d,
        Stmt::Rewrite {
            regex,
            replacement,
            flag,
            add_args,
        },
    )
}

fn set_set(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Some(name) = d.args[0].strip_prefix('$').filter(|v| !v.is_empty()) else {
        return Err(ConfError::at(
            format!("invalid variable name \"{}\"", d.args[0]),
            &d.src,
        ));
    };
    if vars::is_builtin(name) {
        return Err(ConfError::at(
            format!("the duplicate \"{name}\" variable"),
            &d.src,
        ));
    }
    let value = compile(&d.args[1], d)?;
    push(
        n,
        d,
        Stmt::Set {
            var: name.to_string(),
            value,
        },
    )
}

fn set_break(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    push(n, d, Stmt::Break)
}

/// `if (COND) { ... }`: the condition arrives as words with parentheses.
fn parse_cond(d: &Directive) -> Result<Cond, ConfError> {
    let mut words: Vec<String> = d.args.clone();
    let invalid = || {
        ConfError::at(
            format!("invalid condition \"{}\"", d.args.join(" ")),
            &d.src,
        )
    };
    // Strip the parentheses, attached or standing alone (a word that was
    // only one goes; a quoted empty word stays: `if ($a = "")`).
    let first = words.first_mut().ok_or_else(invalid)?;
    *first = first.strip_prefix('(').ok_or_else(invalid)?.to_string();
    if words.first().is_some_and(String::is_empty) {
        words.remove(0);
    }
    let last = words.last_mut().ok_or_else(invalid)?;
    *last = last.strip_suffix(')').ok_or_else(invalid)?.to_string();
    if words.len() > 1 && words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    match words.as_slice() {
        [v] if v.starts_with('$') => Ok(Cond::Truthy(compile(v, d)?)),
        [op, p]
            if matches!(
                op.as_str(),
                "-f" | "!-f" | "-d" | "!-d" | "-e" | "!-e" | "-x" | "!-x"
            ) =>
        {
            let negate = op.starts_with('!');
            let test = match op.trim_start_matches('!') {
                "-f" => FileTest::File,
                "-d" => FileTest::Dir,
                "-e" => FileTest::Exists,
                _ => FileTest::Exec,
            };
            Ok(Cond::File {
                test,
                path: compile(p, d)?,
                negate,
            })
        }
        [v, op, rhs] if v.starts_with('$') => {
            let value = compile(v, d)?;
            match op.as_str() {
                "=" => Ok(Cond::Eq {
                    value,
                    text: rhs.clone(),
                    negate: false,
                }),
                "!=" => Ok(Cond::Eq {
                    value,
                    text: rhs.clone(),
                    negate: true,
                }),
                "~" | "~*" | "!~" | "!~*" => {
                    let caseless = op.ends_with('*');
                    let re = if caseless {
                        format!("(?i){rhs}")
                    } else {
                        rhs.clone()
                    };
                    let regex = regex::Regex::new(&re).map_err(|e| {
                        ConfError::at(format!("regex \"{rhs}\" is invalid: {e}"), &d.src)
                    })?;
                    Ok(Cond::Match {
                        value,
                        regex,
                        negate: op.starts_with('!'),
                    })
                }
                _ => Err(ConfError::at(
                    format!("unexpected \"{op}\" in condition"),
                    &d.src,
                )),
            }
        }
        _ => Err(invalid()),
    }
}

/// The location settings an `if` block in a location may hold besides the
/// rewrite module's directives (nginx's `NGX_HTTP_LIF_CONF` ones that
/// sluice has): when the condition holds, the request takes the location's
/// settings with these on top.
const IN_LOCATION_IF: &[&str] = &[
    "add_header",
    "expires",
    "root",
    "access_log",
    "error_page",
    "gzip",
    "charset",
    "source_charset",
    "override_charset",
    "limit_rate",
    "limit_rate_after",
    "sendfile",
    "proxy_pass",
    "fastcgi_pass",
    "grpc_pass",
];

fn set_if(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let cond = parse_cond(d)?;
    let block = d.block.as_deref().unwrap_or_default();
    let settles = |c: &Directive| IN_LOCATION_IF.contains(&c.name.as_str());
    if let Node::Location(parent) = n {
        let rate = |c: &Directive| c.name.starts_with("limit_rate");
        if !parent.is_if && block.iter().any(|c| settles(c) && !rate(c)) {
            let mut il = super::http::LocationB::for_if(parent, d.src.clone());
            for c in block {
                let ctx = if settles(c) { LOC } else { IF };
                b.walk(std::slice::from_ref(c), &mut Node::Location(&mut il), ctx)?;
            }
            let body = std::mem::take(&mut il.script);
            parent.if_locs.push(il);
            let at = parent.if_locs.len() - 1;
            return push(
                n,
                d,
                Stmt::If {
                    cond,
                    body,
                    conf: Some(IfConf::Pending(at)),
                },
            );
        }
    }
    let mut body = Vec::new();
    b.walk(block, &mut Node::If(&mut body), IF)?;
    push(
        n,
        d,
        Stmt::If {
            cond,
            body,
            conf: None,
        },
    )
}

/// The names `set` declares anywhere in the tree: nginx knows them before it
/// compiles any text, so a use may come before the `set`.
pub(super) fn declared(dirs: &[Directive], out: &mut Vec<String>) {
    for d in dirs {
        if d.name == "set" || d.name == "auth_request_set" {
            if let Some(v) = d.args.first().and_then(|a| a.strip_prefix('$')) {
                out.push(v.to_string());
            }
        }
        // A regex's named captures are variables (nginx adds them when it
        // compiles the regex): a location's, a rewrite's, an if's, a server
        // name's, and those of proxy_redirect and proxy_cookie_*. A regex that does not compile is the directive's
        // error, reported when it is read.
        for re in regexes(d) {
            if let Ok(re) = regex::Regex::new(re) {
                out.extend(re.capture_names().flatten().map(String::from));
            }
        }
        if let Some(b) = &d.block {
            declared(b, out);
        }
    }
}

/// The regexes a directive holds whose named captures it sets.
fn regexes(d: &Directive) -> Vec<&str> {
    let args: Vec<&str> = d.args.iter().map(String::as_str).collect();
    match (d.name.as_str(), args.as_slice()) {
        ("location", ["~" | "~*", re]) => vec![re],
        ("location", [a]) => a
            .strip_prefix("~*")
            .or_else(|| a.strip_prefix('~'))
            .into_iter()
            .collect(),
        ("rewrite", [re, ..]) => vec![re],
        // nginx's own example: `proxy_cookie_domain ~\.(?P<sl_domain>...)$
        // $sl_domain;`.
        ("proxy_cookie_domain" | "proxy_cookie_path" | "proxy_redirect", [from, _]) => from
            .strip_prefix("~*")
            .or_else(|| from.strip_prefix('~'))
            .into_iter()
            .collect(),
        ("server_name", names) => names.iter().filter_map(|n| n.strip_prefix('~')).collect(),
        ("if", words) => words
            .windows(2)
            .filter(|w| matches!(w[0], "~" | "~*" | "!~" | "!~*"))
            .map(|w| w[1].strip_suffix(')').unwrap_or(w[1]))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};

    /// The settings of the first server's first location in `http`, and
    /// those of the `if` its script begins with.
    fn location_and_if(
        http: &str,
    ) -> (
        std::sync::Arc<super::super::loc::LocConf>,
        std::sync::Arc<super::super::model::IfBlock>,
    ) {
        use super::super::model::{IfConf, Stmt};
        let (c, _) = try_build(&http_with(http)).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0];
        let Some(Stmt::If {
            conf: Some(IfConf::Ready(ic)),
            ..
        }) = l.script.first()
        else {
            panic!("{:?}", l.script);
        };
        (l.conf.clone(), ic.clone())
    }

    /// An `if` in a location may hold the location's settings nginx takes
    /// there; they sit on top of the location's. At server level, and for
    /// what nginx refuses there, it may not.
    #[test]
    fn settings_in_a_location_if() {
        let (l, ic) = location_and_if(
            "server { listen 127.0.0.1:1; location / { expires 1h; \
             if ($arg_a) { add_header X 1; return 204; } add_header Y 2; } }",
        );
        assert_eq!(ic.conf.add_header.len(), 1);
        assert_eq!(ic.conf.add_header[0].name, "X");
        assert_eq!(l.add_header[0].name, "Y");
        assert_eq!(format!("{:?}", ic.conf.expires), format!("{:?}", l.expires));
        assert!(ic.pass.is_none());
        // A pass of its own, no URI part (nginx's rule).
        let (_, ic) = location_and_if(
            "server { listen 127.0.0.1:1; location / { root /x; \
             if (!-f $request_filename) { proxy_pass http://127.0.0.1:2; break; } } }",
        );
        assert!(ic.pass.as_ref().is_some_and(|p| p.proxy_pass.is_some()));
        assert!(
            err(&http_with(
                "server { listen 127.0.0.1:1; location / { if ($arg_a) { proxy_pass http://127.0.0.1:2/x; } } }"
            ))
            .contains("cannot have URI part")
        );
        for bad in [
            "server { listen 127.0.0.1:1; if ($arg_a) { add_header X 1; } }",
            "server { listen 127.0.0.1:1; location / { if ($arg_a) { try_files $uri =404; } } }",
        ] {
            assert!(
                err(&http_with(bad)).contains("is not allowed here"),
                "{bad}"
            );
        }
    }

    /// A named capture of a location's, a rewrite's, an if's or a server
    /// name's regex is a variable the configuration may use anywhere; a name
    /// no regex makes is not.
    #[test]
    fn named_captures_are_variables() {
        for conf in [
            "server { listen 127.0.0.1:1; location ~ ^/(?<a>.+)$ { return 200 $a; } }",
            "server { listen 127.0.0.1:1; location ~*^/(?P<a>.+)$ { return 200 $a; } }",
            "server { listen 127.0.0.1:1; rewrite ^/(?<a>.+)$ /x; return 200 $a; }",
            "server { listen 127.0.0.1:1; if ($uri ~ (?<a>\\d+)) { return 200 $a; } }",
            "server { listen 127.0.0.1:1; server_name ~^(?<a>.+)\\.t$; return 200 $a; }",
            "add_header X $a; server { listen 127.0.0.1:1; location ~ (?<a>x) { } }",
            "server { listen 127.0.0.1:1; location / { proxy_pass http://127.0.0.1:2; proxy_cookie_domain ~\\.(?P<a>[a-z]+)$ $a; } }",
            "server { listen 127.0.0.1:1; location / { proxy_pass http://127.0.0.1:2; proxy_cookie_path ~*^/(?<a>.*)$ /$a; } }",
            "server { listen 127.0.0.1:1; location / { proxy_pass http://127.0.0.1:2; proxy_redirect ~^http://x/(?<a>.*)$ /$a; } }",
            // A quote before the closing parenthesis, an empty quoted value.
            "server { listen 127.0.0.1:1; if ($request_method = \"POST\") { return 405; } }",
            "server { listen 127.0.0.1:1; if ($arg_a != \"\") { return 204; } if ( $arg_b = \"\" ) { } }",
        ] {
            assert!(try_build(&http_with(conf)).is_ok(), "{conf}");
        }
        let e = err(&http_with(
            "server { listen 127.0.0.1:1; location ~ ^/(?<a>.+)$ { return 200 $b; } }",
        ));
        assert!(e.contains("unknown \"b\" variable"), "{e}");
    }
}
