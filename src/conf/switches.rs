//! nginx's http core on/off switches that change how sluice builds its own
//! responses: the redirect switches (`absolute_redirect`,
//! `port_in_redirect`, `server_name_in_redirect`), `merge_slashes`,
//! `chunked_transfer_encoding`, `recursive_error_pages`,
//! `client_body_in_file_only` and `auth_delay`. Each sets one
//! merged location setting (`loc::LocConf`) once per level. Pure.

use super::ConfError;
use super::build::{
    Args, Builder, HTTP, LOC, Node, SRV, Spec, duplicate, flag, not_here, time_arg,
};
use super::loc::BodyInFile;
use super::tree::Directive;

const HSL: u8 = HTTP | SRV | LOC;

const fn switch(name: &'static str, ctx: u8) -> Spec {
    Spec {
        name,
        ctx,
        args: Args::Exactly(1),
        block: false,
        set: set_switch,
    }
}

pub(super) const TABLE: &[Spec] = &[
    switch("absolute_redirect", HSL),
    switch("port_in_redirect", HSL),
    switch("server_name_in_redirect", HSL),
    // nginx reads it from the server the request's address chose, before
    // any location: no location level.
    switch("merge_slashes", HTTP | SRV),
    switch("recursive_error_pages", HSL),
    switch("chunked_transfer_encoding", HSL),
    Spec {
        name: "client_body_in_file_only",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_body_in_file,
    },
    Spec {
        name: "auth_delay",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_auth_delay,
    },
];

fn set_auth_delay(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = time_arg(d, 0)?;
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    if l.auth_delay.is_some() {
        return Err(duplicate(d));
    }
    l.auth_delay = Some(v);
    Ok(())
}

fn set_body_in_file(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = match d.args[0].as_str() {
        "off" => BodyInFile::Off,
        "on" => BodyInFile::On,
        "clean" => BodyInFile::Clean,
        other => {
            return Err(ConfError::at(
                format!(
                    "invalid value \"{other}\" in \"{}\" directive, it must be \"on\", \"clean\" or \"off\"",
                    d.name
                ),
                &d.src,
            ));
        }
    };
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    if l.client_body_in_file_only.is_some() {
        return Err(duplicate(d));
    }
    l.client_body_in_file_only = Some(v);
    Ok(())
}

fn set_switch(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = flag(d)?;
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    let slot = match d.name.as_str() {
        "absolute_redirect" => &mut l.absolute_redirect,
        "port_in_redirect" => &mut l.port_in_redirect,
        "server_name_in_redirect" => &mut l.server_name_in_redirect,
        "merge_slashes" => &mut l.merge_slashes,
        "chunked_transfer_encoding" => &mut l.chunked_transfer_encoding,
        _ => &mut l.recursive_error_pages,
    };
    if slot.is_some() {
        return Err(duplicate(d));
    }
    *slot = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};

    #[test]
    fn defaults_and_inheritance() {
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0].conf;
        assert!(l.absolute_redirect && l.port_in_redirect && !l.server_name_in_redirect);
        assert!(l.merge_slashes && !l.recursive_error_pages && l.chunked_transfer_encoding);
        let (c, _) = try_build(&http_with(
            "port_in_redirect off; server_name_in_redirect on; absolute_redirect off;\n\
             merge_slashes off; recursive_error_pages on; chunked_transfer_encoding off;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0].conf;
        assert!(!l.absolute_redirect && !l.port_in_redirect && l.server_name_in_redirect);
        assert!(!l.merge_slashes && l.recursive_error_pages && !l.chunked_transfer_encoding);
    }

    #[test]
    fn body_in_file() {
        use super::BodyInFile;
        let (c, _) = try_build(&http_with("client_body_in_file_only clean;")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0].conf;
        assert_eq!(l.client_body_in_file_only, BodyInFile::Clean);
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0].conf;
        assert_eq!(l.client_body_in_file_only, BodyInFile::Off);
        assert_eq!(l.auth_delay, std::time::Duration::ZERO);
        let (c, _) = try_build(&http_with("auth_delay 1500ms;")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0].conf;
        assert_eq!(l.auth_delay, std::time::Duration::from_millis(1500));
        assert!(
            err(&http_with("auth_delay soon;"))
                .contains("\"auth_delay\" directive invalid value in /t.conf:3")
        );
        assert_eq!(
            err(&http_with("client_body_in_file_only yes;")),
            "invalid value \"yes\" in \"client_body_in_file_only\" directive, it must be \"on\", \"clean\" or \"off\" in /t.conf:3"
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("absolute_redirect yes;")),
            "invalid value \"yes\" in \"absolute_redirect\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        assert!(
            err(&http_with("port_in_redirect on; port_in_redirect off;"))
                .contains("\"port_in_redirect\" directive is duplicate in /t.conf:3")
        );
        assert!(err(
            "events {}\nhttp {\nserver { listen 127.0.0.1:8080;\nlocation / { merge_slashes off; } } }"
        )
        .contains("\"merge_slashes\" directive is not allowed here in /t.conf:4"));
        assert!(err(&http_with("server_name_in_redirect on off;")).contains(
            "invalid number of arguments in \"server_name_in_redirect\" directive in /t.conf:3"
        ));
    }
}
