//! The auth_request module's directives: `auth_request URI | off` and
//! `auth_request_set $VAR VALUE`, parsed into the merged location settings.
//! The subrequest itself is `http::pipeline`'s. No I/O.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, not_here, set_once};
use super::loc::LocB;
use super::tree::Directive;
use super::vars::{self, Template};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "auth_request",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_auth_request,
    },
    Spec {
        name: "auth_request_set",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(2),
        block: false,
        set: set_auth_request_set,
    },
];

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn set_auth_request(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = match d.args[0].as_str() {
        "off" => None,
        uri => Some(uri.to_string()),
    };
    set_once(&mut loc(n, d)?.auth_request, v, d)
}

fn set_auth_request_set(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
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
    let value: Template = vars::compile(&d.args[1]).map_err(|m| ConfError::at(m, &d.src))?;
    let l = loc(n, d)?;
    let mut list = l.auth_request_set.as_deref().cloned().unwrap_or_default();
    list.push((name.to_string(), value));
    l.auth_request_set = Some(Arc::new(list));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};

    #[test]
    fn values() {
        let (c, _) = try_build(&http_with(
            "auth_request /auth; auth_request_set $user $upstream_http_x_user; add_header X-User $user;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert_eq!(l.auth_request.as_deref(), Some("/auth"));
        assert_eq!(l.auth_request_set.len(), 1);
        let (c, _) = try_build(&http_with("auth_request off;")).unwrap();
        assert!(
            c.http.as_ref().unwrap().servers[0]
                .conf
                .auth_request
                .is_none()
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("auth_request_set user $host;")),
            "invalid variable name \"user\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("auth_request_set $host x;")),
            "the duplicate \"host\" variable in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("auth_request /a; auth_request /b;")),
            "\"auth_request\" directive is duplicate in /t.conf:3"
        );
    }
}
