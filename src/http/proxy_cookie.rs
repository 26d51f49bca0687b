//! `proxy_cookie_domain`, `proxy_cookie_path` and `proxy_cookie_flags`: an
//! upstream's `Set-Cookie` lines rewritten as nginx's proxy module does.
//! A line is split at each `;` (quotes mean nothing), spaces around each
//! attribute's name and value dropped; the `domain=` and `path=` values are
//! rewritten by the first rule that matches, the flags by the first
//! `proxy_cookie_flags` rule for the cookie's name; a line that changed is
//! put together again with `; ` between its attributes, one that did not
//! goes as it came. Called by both proxies on the response head.

use std::borrow::Cow;

use http::HeaderMap;
use http::header::{HeaderValue, SET_COOKIE};

use super::vars::Req;
use crate::conf::map::{Captures, eval_with_captures};
use crate::conf::proxy_more::{CookieFlags, CookieMatch, CookieRewrite, flag};

/// Whether `r`'s location rewrites any `Set-Cookie`.
pub fn rewrites_any(r: &crate::conf::loc::LocConf) -> bool {
    !(r.proxy_cookie_domain.is_empty()
        && r.proxy_cookie_path.is_empty()
        && r.proxy_cookie_flags.is_empty())
}

/// Rewrites every `Set-Cookie` of `h` by `r`'s rules.
pub fn rewrite(r: &Req, h: &mut HeaderMap) {
    if !rewrites_any(&r.conf) || !h.contains_key(SET_COOKIE) {
        return;
    }
    let rules = Rules {
        domain: &r.conf.proxy_cookie_domain,
        path: &r.conf.proxy_cookie_path,
        flags: &r.conf.proxy_cookie_flags,
    };
    let old: Vec<HeaderValue> = h.get_all(SET_COOKIE).iter().cloned().collect();
    h.remove(SET_COOKIE);
    for v in old {
        let new = v
            .to_str()
            .ok()
            .and_then(|s| {
                rewrite_line(s, &rules, |t, caps| {
                    eval_with_captures(t, caps, |var| r.value(var))
                })
            })
            .and_then(|s| HeaderValue::from_str(&s).ok());
        h.append(SET_COOKIE, new.unwrap_or(v));
    }
}

type Eval<'a> = dyn Fn(&crate::conf::vars::Template, Option<&Captures>) -> String + 'a;

/// A location's cookie rules.
struct Rules<'a> {
    domain: &'a [CookieRewrite],
    path: &'a [CookieRewrite],
    flags: &'a [CookieFlags],
}

/// One attribute of a line, as nginx splits it; `name` None once a flag
/// took it away.
struct Attr<'a> {
    name: Option<Cow<'a, str>>,
    value: Option<Cow<'a, str>>,
}

fn attrs(line: &str) -> Vec<Attr<'_>> {
    line.split(';')
        .map(|part| {
            let part = part.trim_start_matches(' ');
            match part.split_once('=') {
                Some((n, v)) => Attr {
                    name: Some(n.trim_end_matches(' ').into()),
                    value: Some(v.trim_matches(' ').into()),
                },
                None => Attr {
                    name: Some(part.trim_end_matches(' ').into()),
                    value: None,
                },
            }
        })
        .collect()
}

/// The line rewritten; None when no rule applied (nor a cookie without a
/// value: nginx leaves it).
fn rewrite_line(
    line: &str,
    rules: &Rules<'_>,
    eval: impl Fn(&crate::conf::vars::Template, Option<&Captures>) -> String,
) -> Option<String> {
    let mut list = attrs(line);
    let cookie = list.first().filter(|a| a.value.is_some())?;
    let name = cookie.name.clone().unwrap_or_default().into_owned();
    let mut changed = false;
    for a in list.iter_mut().skip(1) {
        let (Some(n), Some(v)) = (&a.name, &a.value) else {
            continue;
        };
        let (set, domain) = if n.eq_ignore_ascii_case("domain") {
            (rules.domain, true)
        } else if n.eq_ignore_ascii_case("path") {
            (rules.path, false)
        } else {
            continue;
        };
        if let Some(new) = rewrite_value(v, set, domain, &eval) {
            a.value = Some(new.into());
            changed = true;
        }
    }
    if let Some(bits) = flags_for(&name, rules.flags, &eval) {
        edit_flags(&mut list, bits);
        changed = true;
    }
    if !changed {
        return None;
    }
    let mut out = String::with_capacity(line.len() + 16);
    for (i, a) in list.iter().enumerate() {
        let Some(n) = &a.name else { continue };
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(n);
        if let Some(v) = &a.value {
            out.push('=');
            out.push_str(v);
        }
    }
    Some(out)
}

/// The flags of the first `proxy_cookie_flags` rule for cookie `name`;
/// None when none is for it, or its flags come to none.
fn flags_for(name: &str, rules: &[CookieFlags], eval: &Eval<'_>) -> Option<u32> {
    let rule = rules.iter().find(|r| match &r.cookie {
        CookieMatch::Regex(re) => re.is_match(name),
        CookieMatch::Text(t) => eval(t, None).eq_ignore_ascii_case(name),
    })?;
    let bits = rule
        .flags
        .iter()
        .filter_map(|t| flag::parse(&eval(t, None)))
        .fold(0, |a, b| a | b);
    (bits != 0).then_some(bits)
}

/// nginx's edit: a flag the line has is kept (or made the value asked
/// for), or taken away by its `no` form; one asked for that it lacks is
/// added at the end, in the order Secure, HttpOnly, SameSite.
fn edit_flags(list: &mut Vec<Attr<'_>>, mut bits: u32) {
    use flag::*;
    let samesite = [
        (SAMESITE_STRICT, "Strict"),
        (SAMESITE_LAX, "Lax"),
        (SAMESITE_NONE, "None"),
    ];
    for a in list.iter_mut().skip(1) {
        let Some(n) = &a.name else { continue };
        let on_off = if n.eq_ignore_ascii_case("secure") {
            Some((SECURE_ON, SECURE_OFF))
        } else if n.eq_ignore_ascii_case("httponly") {
            Some((HTTPONLY_ON, HTTPONLY_OFF))
        } else {
            None
        };
        if let Some((on, off)) = on_off {
            if bits & on != 0 {
                bits &= !on;
            } else if bits & off != 0 {
                a.name = None;
            }
            continue;
        }
        if !n.eq_ignore_ascii_case("samesite") {
            continue;
        }
        match samesite.iter().find(|(b, _)| bits & b != 0) {
            Some(&(b, word)) => {
                bits &= !b;
                if !a
                    .value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case(word))
                {
                    a.name = Some("SameSite".into());
                    a.value = Some(word.into());
                }
            }
            None if bits & SAMESITE_OFF != 0 => a.name = None,
            None => {}
        }
    }
    if bits & SECURE_ON != 0 {
        list.push(Attr {
            name: Some("Secure".into()),
            value: None,
        });
    }
    if bits & HTTPONLY_ON != 0 {
        list.push(Attr {
            name: Some("HttpOnly".into()),
            value: None,
        });
    }
    if let Some(&(_, word)) = samesite.iter().find(|(b, _)| bits & b != 0) {
        list.push(Attr {
            name: Some("SameSite".into()),
            value: Some(word.into()),
        });
    }
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

    fn flags(cookie: &str, list: &[&str]) -> CookieFlags {
        CookieFlags {
            cookie: match cookie.strip_prefix('~') {
                Some(r) => CookieMatch::Regex(
                    regex::RegexBuilder::new(r)
                        .case_insensitive(true)
                        .build()
                        .unwrap(),
                ),
                None => CookieMatch::Text(compile(cookie).unwrap()),
            },
            flags: list.iter().map(|f| compile(f).unwrap()).collect(),
        }
    }

    fn with(
        line: &str,
        d: &[CookieRewrite],
        p: &[CookieRewrite],
        f: &[CookieFlags],
    ) -> Option<String> {
        let rules = Rules {
            domain: d,
            path: p,
            flags: f,
        };
        rewrite_line(line, &rules, |t, caps| {
            eval_with_captures(t, caps, |_| String::from("VAR"))
        })
    }

    fn run(line: &str, d: &[CookieRewrite], p: &[CookieRewrite]) -> Option<String> {
        with(line, d, p, &[])
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

    /// nginx splits at every `;` and puts a changed line together again
    /// with `; `, spaces around names and values gone; a cookie without a
    /// value is left alone.
    #[test]
    fn split_and_joined_as_nginx() {
        let d = [text("x.org", "y.org")];
        assert_eq!(
            run("a=1;Domain = x.org ;Max-Age=5", &d, &[]).as_deref(),
            Some("a=1; Domain=y.org; Max-Age=5")
        );
        assert_eq!(
            run("a=\"q;domain=x.org\"; domain=x.org", &d, &[]).as_deref(),
            Some("a=\"q; domain=x.org\"; domain=y.org")
        );
        assert_eq!(run("flag; domain=x.org", &d, &[]), None);
        assert_eq!(run("a=1;domain=z.org", &d, &[]), None);
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

    #[test]
    fn flags_as_nginx_edits_them() {
        let f = [
            flags("sid", &["secure", "httponly", "samesite=strict"]),
            flags("~^T", &["nosecure", "nosamesite"]),
            flags("~", &["samesite=lax"]),
        ];
        // Added at the end, in nginx's order.
        assert_eq!(
            with("SID=1; Path=/", &[], &[], &f).as_deref(),
            Some("SID=1; Path=/; Secure; HttpOnly; SameSite=Strict")
        );
        // Kept where they are; a SameSite of another value made the one
        // asked for.
        assert_eq!(
            with("sid=1;secure; samesite=none;HTTPONLY", &[], &[], &f).as_deref(),
            Some("sid=1; secure; SameSite=Strict; HTTPONLY")
        );
        // Taken away.
        assert_eq!(
            with("tok=1; Secure; SameSite=Lax; Path=/", &[], &[], &f).as_deref(),
            Some("tok=1; Path=/")
        );
        // The first rule for the name, and only it.
        assert_eq!(
            with("other=1", &[], &[], &f).as_deref(),
            Some("other=1; SameSite=Lax")
        );
        // A flag that names none (from a variable) is no flag: nothing
        // changes.
        assert_eq!(with("v=1", &[], &[], &[flags("v", &["$host"])]), None);
    }
}
