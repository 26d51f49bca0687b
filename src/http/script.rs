//! Runs the rewrite module's directives (`conf::model::Stmt`) for a request:
//! `set`, `if`, `rewrite` (with captures and nginx's argument rules), `break`
//! and `return`, in order, telling the caller how to go on.

use super::vars::Req;
use super::{CloseConnection, Reply, response};
use crate::conf::model::{Cond, FileTest, RewriteFlag, Stmt};

/// What the caller does next.
pub enum Flow {
    /// Go on to the next phase.
    Next,
    /// `break` (or `rewrite ... break`): stop the rewrite directives here.
    Break,
    /// `rewrite ... last`: search the location again for the new URI.
    Last,
    /// `return`, or a redirecting `rewrite`.
    Done(Result<Reply, CloseConnection>),
}

fn test_file(test: FileTest, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(path);
    match test {
        FileTest::File => m.is_ok_and(|m| m.is_file()),
        FileTest::Dir => m.is_ok_and(|m| m.is_dir()),
        FileTest::Exists => m.is_ok(),
        // nginx's ngx_is_exec: the owner's execute bit, whatever the type
        // (a directory too).
        FileTest::Exec => m.is_ok_and(|m| m.permissions().mode() & 0o100 != 0),
    }
}

/// A `rewrite` replacement evaluated: the path, and the arguments after
/// the first `?` in the replacement's own text. A `?` that a capture or a
/// variable brings stays in the path (nginx escapes it there as `%3F`
/// when the URI goes upstream). A capture (`$1`) in the arguments, and
/// in a redirect's path too, is escaped when the client's path had an
/// escape or a `+` in it (nginx's `quoted_uri` and `plus_in_uri`):
/// `/a%26b` matched by `^/(.*)` and written as `/x?p=$1` gives
/// `p=a%26b`, not a second argument; `/a%20b` redirected to `/x/$1` goes
/// to `/x/a%20b`, not to a `Location` with a space.
fn replaced(r: &Req, t: &crate::conf::vars::Template, redirect: bool) -> (String, Option<String>) {
    use crate::conf::vars::{Segment, Var};
    use crate::http::uri::{Escape, escape_into};
    let mut path = String::new();
    let mut args: Option<String> = None;
    let quoted = || r.request_uri.path().bytes().any(|b| b == b'%' || b == b'+');
    for seg in &t.segments {
        match (seg, &mut args) {
            (Segment::Lit(l), None) => match l.split_once('?') {
                Some((p, a)) => {
                    path.push_str(p);
                    args = Some(a.to_string());
                }
                None => path.push_str(l),
            },
            (Segment::Lit(l), Some(a)) => a.push_str(l),
            (Segment::Var(v @ Var::Capture(_)), None) if redirect && quoted() => {
                escape_into(&r.value(v), Escape::Args, &mut path);
            }
            (Segment::Var(v), None) => path.push_str(&r.value(v)),
            (Segment::Var(v @ Var::Capture(_)), Some(a)) if quoted() => {
                escape_into(&r.value(v), Escape::Args, a);
            }
            (Segment::Var(v), Some(a)) => a.push_str(&r.value(v)),
        }
    }
    (path, args)
}

/// nginx's unescaping of a redirect's text (`NGX_UNESCAPE_REDIRECT`):
/// before the first `?`, an escape of a printable byte above `%` is
/// decoded (`%41` is `A`; `%20`, `%23` and `%25` stay), and one of `?`
/// written with a hex letter (`%3F`) is decoded and ends the unescaping;
/// after the `?`, all goes as it is. A malformed escape loses bytes, as in
/// nginx (`%zz` gives `zz`, `%4z` nothing).
fn unescape_redirect(s: &str) -> String {
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let hex = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'?' {
            out.extend_from_slice(&b[i..]);
            break;
        }
        if c != b'%' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(hi) = b.get(i + 1).copied().and_then(hex) else {
            // `%` then no hex digit: that byte goes, the `%` does not.
            if let Some(&n) = b.get(i + 1) {
                out.push(n);
            }
            i += 2;
            continue;
        };
        let Some(&second) = b.get(i + 2) else {
            break;
        };
        let Some(lo) = hex(second) else {
            i += 3;
            continue;
        };
        let v = hi << 4 | lo;
        if v == b'?' && !second.is_ascii_digit() {
            out.push(v);
            out.extend_from_slice(&b[i + 3..]);
            break;
        }
        if v > b'%' && v < 0x7f {
            out.push(v);
        } else {
            out.extend_from_slice(&b[i..i + 3]);
        }
        i += 3;
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Whether a replacement redirects whatever its flag, as nginx decides
/// when it reads it: it starts with `http://`, `https://` or `$scheme`.
fn redirects(t: &crate::conf::vars::Template) -> bool {
    use crate::conf::vars::{Segment, Var};
    match t.segments.first() {
        Some(Segment::Lit(l)) => l.starts_with("http://") || l.starts_with("https://"),
        Some(Segment::Var(v)) => matches!(v, Var::Scheme),
        None => false,
    }
}

fn holds(cond: &Cond, r: &mut Req) -> bool {
    match cond {
        Cond::Truthy(t) => {
            let v = r.eval(t);
            !(v.is_empty() || v == "0")
        }
        Cond::Eq {
            value,
            text,
            negate,
        } => (r.eval(value) == *text) != *negate,
        Cond::Match {
            value,
            regex,
            negate,
        } => {
            let v = r.eval(value);
            match regex.captures(&v) {
                // A match sets the captures, negated or not, as in nginx.
                Some(c) => {
                    r.set_captures(regex, &c);
                    !*negate
                }
                None => {
                    r.forget_captures();
                    *negate
                }
            }
        }
        Cond::File { test, path, negate } => test_file(*test, &r.eval(path)) != *negate,
    }
}

/// The `Location` of a redirect sluice makes, as nginx's header filter
/// completes a relative one: with `absolute_redirect` a path gets scheme,
/// host (the server's first name with `server_name_in_redirect`, else the
/// request's host, else the address it came to) and the port the request
/// came to (left out when it is the scheme's, or with `port_in_redirect
/// off`). Anything but a path is left as written.
pub fn absolute(r: &Req, path: &str) -> String {
    if !path.starts_with('/') || !r.conf.absolute_redirect {
        return path.to_string();
    }
    // https over TLS, its default port left out as http's is.
    let (scheme, default) = if r.conn.tls().is_some() {
        ("https", 443)
    } else {
        ("http", 80)
    };
    let port = r.conn.local.map(|a| a.port()).unwrap_or(default);
    let host = if r.conf.server_name_in_redirect {
        r.server_name.to_string()
    } else if r.host_given {
        r.host.clone()
    } else {
        match r.conn.local {
            Some(a) if a.is_ipv6() => format!("[{}]", a.ip()),
            Some(a) => a.ip().to_string(),
            // A unix socket has no address to name: the server's name.
            None => r.host.clone(),
        }
    };
    if port == default || !r.conf.port_in_redirect {
        format!("{scheme}://{host}{path}")
    } else {
        format!("{scheme}://{host}:{port}{path}")
    }
}

pub fn run(stmts: &[Stmt], r: &mut Req) -> Flow {
    for s in stmts {
        match s {
            Stmt::Return(ret) => return Flow::Done(super::do_return(ret, r)),
            Stmt::Set { var, value } => {
                let v = r.eval(value);
                r.set_var(var, v);
            }
            Stmt::Break => return Flow::Break,
            Stmt::If { cond, body, conf } => {
                if holds(cond, r) {
                    // An `if` with settings: the request takes them (the
                    // last such `if` that holds wins, as in nginx).
                    if let Some(crate::conf::model::IfConf::Ready(b)) = conf {
                        r.conf = b.conf.clone();
                        if let Some(p) = &b.pass {
                            r.if_pass = Some(p.clone());
                        }
                    }
                    match run(body, r) {
                        Flow::Next => {}
                        other => return other,
                    }
                }
            }
            Stmt::Rewrite {
                regex,
                replacement,
                flag,
                add_args,
            } => {
                let uri = r.uri.clone();
                let Some(c) = regex.captures(&uri) else {
                    r.forget_captures();
                    continue;
                };
                r.set_captures(regex, &c);
                let redirect = matches!(flag, RewriteFlag::Redirect | RewriteFlag::Permanent)
                    || redirects(replacement);
                let (new_path, new_args) = replaced(r, replacement, redirect);
                let new = match &new_args {
                    Some(a) => format!("{new_path}?{a}"),
                    None => new_path.clone(),
                };
                let tokens = r.conf.server_tokens;
                if r.conf.rewrite_log {
                    crate::log_conn!(
                        crate::log::Level::Notice,
                        r.conn.number,
                        "\"{}\" matches \"{}\", rewritten to \"{}\"{}",
                        regex.as_str(),
                        uri,
                        new,
                        r.log_context(None)
                    );
                }
                let old = r.args.as_deref().filter(|a| *add_args && !a.is_empty());
                if redirect {
                    let code = if *flag == RewriteFlag::Permanent {
                        301
                    } else {
                        302
                    };
                    // As nginx's end of a redirecting rewrite: the text
                    // unescaped for a Location, then the old arguments.
                    let mut target = unescape_redirect(&new);
                    if let Some(old) = old {
                        target.push(if new_args.is_some() { '&' } else { '?' });
                        target.push_str(old);
                    }
                    let target = absolute(r, &target);
                    return Flow::Done(Ok(Reply::Full(response::redirect(code, &target, tokens))));
                }
                // New arguments come first and the old ones follow, unless the
                // replacement ends with "?".
                let (path, args) = match (new_args, old) {
                    (Some(a), Some(old)) => (new_path, Some(format!("{a}&{old}"))),
                    (Some(a), None) if a.is_empty() => (new_path, None),
                    (Some(a), None) => (new_path, Some(a)),
                    (None, Some(old)) => (new_path, Some(old.to_string())),
                    (None, None) => (new_path, None),
                };
                r.uri = path;
                r.args = args;
                r.uri_changed = true;
                match flag {
                    RewriteFlag::Last => return Flow::Last,
                    RewriteFlag::Break => return Flow::Break,
                    // A redirect went above.
                    RewriteFlag::None | RewriteFlag::Redirect | RewriteFlag::Permanent => {}
                }
            }
        }
    }
    Flow::Next
}

#[cfg(test)]
mod tests {
    use super::unescape_redirect;

    /// nginx 1.22's `NGX_UNESCAPE_REDIRECT`, measured beside it through
    /// `rewrite ... redirect` (t/http_nginx_rewrite_differential.t).
    #[test]
    fn redirect_unescaping() {
        assert_eq!(unescape_redirect("/to/%20sp"), "/to/%20sp");
        assert_eq!(unescape_redirect("/to/%3F?x=1"), "/to/??x=1");
        assert_eq!(unescape_redirect("/to/%26%3F%23%25"), "/to/&?%23%25");
        assert_eq!(unescape_redirect("/a%41%7e%7F%e9"), "/aA~%7F%e9");
        assert_eq!(unescape_redirect("/x?%41"), "/x?%41");
        // Malformed escapes lose bytes as nginx's do.
        assert_eq!(unescape_redirect("/%zz/%4z/%"), "/zz//");
        assert_eq!(unescape_redirect("/%4"), "/");
    }
}
