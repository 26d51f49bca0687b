//! `proxy_cookie_domain` and `proxy_cookie_path`: the `domain=` and `path=`
//! attributes of an upstream's `Set-Cookie` lines rewritten by the first
//! rule that matches, as nginx's proxy module does. Called by both proxies
//! on the response head.

use http::HeaderMap;
use http::header::{HeaderValue, SET_COOKIE};

use super::vars::Req;
use crate::conf::map::{Captures, eval_with_captures};
use crate::conf::proxy_more::{CookieMatch, CookieRewrite};

/// Rewrites every `Set-Cookie` of `h` by `r`'s rules.
pub fn rewrite(r: &Req, h: &mut HeaderMap) {
    let (domain, path) = (&r.conf.proxy_cookie_domain, &r.conf.proxy_cookie_path);
    if (domain.is_empty() && path.is_empty()) || !h.contains_key(SET_COOKIE) {
        return;
    }
    let old: Vec<HeaderValue> = h.get_all(SET_COOKIE).iter().cloned().collect();
    h.remove(SET_COOKIE);
    for v in old {
        let new = v
            .to_str()
            .ok()
            .and_then(|s| {
                rewrite_line(s, domain, path, |t, caps| {
                    eval_with_captures(t, caps, |var| r.value(var))
                })
            })
            .and_then(|s| HeaderValue::from_str(&s).ok());
        h.append(SET_COOKIE, new.unwrap_or(v));
    }
}

type Eval<'a> = dyn Fn(&crate::conf::vars::Template, Option<&Captures>) -> String + 'a;

/// The line with its attributes rewritten; None when nothing matched.
fn rewrite_line(
    line: &str,
    domain: &[CookieRewrite],
    path: &[CookieRewrite],
    eval: impl Fn(&crate::conf::vars::Template, Option<&Captures>) -> String,
) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut changed = false;
    // The first part is the cookie itself; attributes follow each ';'.
    for (i, part) in line.split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        let lead = part.len() - part.trim_start().len();
        let attr = &part[lead..];
        let eq = attr.find('=');
        let (rules, domain_attr) = match eq.map(|e| &attr[..e]) {
            Some(n) if i > 0 && n.eq_ignore_ascii_case("domain") => (domain, true),
            Some(n) if i > 0 && n.eq_ignore_ascii_case("path") => (path, false),
            _ => {
                out.push_str(part);
                continue;
            }
        };
        let e = eq.unwrap_or(0) + 1;
        let value = &attr[e..];
        match rewrite_value(value, rules, domain_attr, &eval) {
            Some(new) => {
                out.push_str(&part[..lead + e]);
                out.push_str(&new);
                changed = true;
            }
            None => out.push_str(part),
        }
    }
    changed.then_some(out)
}

fn rewrite_value(
    value: &str,
    rules: &[CookieRewrite],
    domain: bool,
    eval: &Eval<'_>,
) -> Option<String> {
    for rule in rules {
        match &rule.pattern {
            CookieMatch::Regex(re) => {
                let Some(c) = re.captures(value) else {
                    continue;
                };
                let caps = Captures {
                    numbered: c
                        .iter()
                        .map(|m| m.map_or(String::new(), |m| m.as_str().to_string()))
                        .collect(),
                    named: re
                        .capture_names()
                        .flatten()
                        .map(|n| {
                            (
                                n.to_string(),
                                c.name(n).map_or("", |m| m.as_str()).to_string(),
                            )
                        })
                        .collect(),
                };
                return Some(eval(&rule.replacement, Some(&caps)));
            }
            CookieMatch::Text(t) => {
                let pattern = eval(t, None);
                if domain {
                    // A leading dot is kept out of the comparison and kept.
                    let (dot, bare) = match value.strip_prefix('.') {
                        Some(b) => (".", b),
                        None => ("", value),
                    };
                    let pattern = pattern.strip_prefix('.').unwrap_or(&pattern);
                    if bare.eq_ignore_ascii_case(pattern) {
                        return Some(format!("{dot}{}", eval(&rule.replacement, None)));
                    }
                } else if let Some(rest) = value.strip_prefix(pattern.as_str()) {
                    return Some(format!("{}{rest}", eval(&rule.replacement, None)));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::vars::compile;

    fn text(from: &str, to: &str) -> CookieRewrite {
        CookieRewrite {
            pattern: CookieMatch::Text(compile(from).unwrap()),
            replacement: compile(to).unwrap(),
        }
    }

    fn re(from: &str, to: &str) -> CookieRewrite {
        CookieRewrite {
            pattern: CookieMatch::Regex(regex::Regex::new(from).unwrap()),
            replacement: compile(to).unwrap(),
        }
    }

    fn run(line: &str, d: &[CookieRewrite], p: &[CookieRewrite]) -> Option<String> {
        rewrite_line(line, d, p, |t, caps| {
            eval_with_captures(t, caps, |_| String::from("VAR"))
        })
    }

    #[test]
    fn domain_and_path() {
        let d = [text("up.example", "front.example")];
        let p = [text("/app/", "/"), text("/", "/other/")];
        assert_eq!(
            run("a=1; Domain=.UP.example; Path=/app/x; HttpOnly", &d, &p).as_deref(),
            Some("a=1; Domain=.front.example; Path=/x; HttpOnly")
        );
        // The first rule that matches, and only the first.
        assert_eq!(
            run("a=1; path=/z", &d, &p).as_deref(),
            Some("a=1; path=/other/z")
        );
        assert_eq!(run("a=1; domain=other.example", &d, &[]), None);
        // The cookie's own name=value is never an attribute.
        assert_eq!(run("path=/app/", &d, &p), None);
    }

    #[test]
    fn regex_and_variables() {
        let d = [re(r"^(.+)\.internal$", "$1.public"), text("x", "$host")];
        assert_eq!(
            run("a=1; domain=shop.internal", &d, &[]).as_deref(),
            Some("a=1; domain=shop.public")
        );
        assert_eq!(
            run("a=1; domain=x", &d, &[]).as_deref(),
            Some("a=1; domain=VAR")
        );
    }
}
