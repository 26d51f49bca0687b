//! The fastcgi module's own directives: `fastcgi_param`, `fastcgi_index`,
//! `fastcgi_split_path_info`, `fastcgi_keep_conn`, `fastcgi_catch_stderr`,
//! `fastcgi_busy_buffers_size` (checked, no effect). `fastcgi_pass` is read
//! with `proxy_pass` (`conf::proxy`); the `fastcgi_*` namesakes of `proxy_*`
//! directives go through `build::side_alias`. Pure.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, invalid_value, set_once};
use super::loc::LocB;
use super::tree::Directive;
use super::values::{parse_flag, parse_size};
use super::vars::{self, Template};

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "fastcgi_param",
        ctx: HSL,
        args: Args::Range(2, 3),
        block: false,
        set: set_param,
    },
    Spec {
        name: "fastcgi_index",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_index,
    },
    Spec {
        name: "fastcgi_split_path_info",
        ctx: LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_split,
    },
    Spec {
        name: "fastcgi_keep_conn",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_keep_conn,
    },
    Spec {
        name: "fastcgi_catch_stderr",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_catch_stderr,
    },
    Spec {
        name: "fastcgi_busy_buffers_size",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_busy,
    },
];

/// One `fastcgi_param` line.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub value: Template,
    /// `if_not_empty`: not sent when the value is empty.
    pub if_not_empty: bool,
}

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| super::build::not_here(d))
}

fn set_param(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let if_not_empty = match d.args.get(2).map(String::as_str) {
        None => false,
        Some("if_not_empty") => true,
        Some(other) => {
            return Err(ConfError::at(
                format!("invalid parameter \"{other}\""),
                &d.src,
            ));
        }
    };
    let value = vars::compile(&d.args[1]).map_err(|m| ConfError::at(m, &d.src))?;
    let l = loc(n, d)?;
    let list = l.fastcgi_param.get_or_insert_with(Arc::default);
    Arc::make_mut(list).push(Param {
        name: d.args[0].clone(),
        value,
        if_not_empty,
    });
    Ok(())
}

fn set_index(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    set_once(&mut loc(n, d)?.fastcgi_index, Some(t), d)
}

fn set_split(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let text = &d.args[0];
    let re = regex::Regex::new(text)
        .map_err(|e| ConfError::at(format!("regex \"{text}\" is invalid: {e}"), &d.src))?;
    if re.captures_len() != 3 {
        return Err(ConfError::at(
            format!("pattern \"{text}\" must have 2 captures"),
            &d.src,
        ));
    }
    set_once(&mut loc(n, d)?.fastcgi_split_path_info, Some(re), d)
}

fn set_keep_conn(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v = parse_flag(&d.args[0]).ok_or_else(|| flag_error(d))?;
    set_once(&mut loc(n, d)?.fastcgi_keep_conn, v, d)
}

fn flag_error(d: &Directive) -> ConfError {
    ConfError::at(
        format!(
            "invalid value \"{}\" in \"{}\" directive, it must be \"on\" or \"off\"",
            d.args[0], d.name
        ),
        &d.src,
    )
}

fn set_catch_stderr(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    loc(n, d)?
        .fastcgi_catch_stderr
        .get_or_insert_with(Vec::new)
        .push(d.args[0].clone());
    Ok(())
}

fn set_busy(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    parse_size(&d.args[0]).ok_or_else(|| invalid_value(d))?;
    loc(n, d)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    fn conf(http: &str, loc: &str) -> String {
        format!(
            "events {{}}\nhttp {{\n{http}\nserver {{ listen 127.0.0.1:8080;\nlocation / {{\n{loc}\n}} }} }}"
        )
    }

    fn location(http: &str, loc: &str) -> std::sync::Arc<crate::conf::loc::LocConf> {
        let (c, _) = try_build(&conf(http, loc)).expect("config");
        c.http.expect("http").servers[0].locations[0].conf.clone()
    }

    #[test]
    fn params_inherit_only_when_a_level_has_none() {
        let l = location(
            "fastcgi_param A 1; fastcgi_param B $uri if_not_empty;",
            "fastcgi_pass 127.0.0.1:9000;",
        );
        assert!(l.fastcgi);
        assert_eq!(l.fastcgi_param.len(), 2);
        assert!(l.fastcgi_param[1].if_not_empty);
        let l = location(
            "fastcgi_param A 1;",
            "fastcgi_pass 127.0.0.1:9000; fastcgi_param C 3;",
        );
        assert_eq!(l.fastcgi_param.len(), 1);
        assert_eq!(l.fastcgi_param[0].name, "C");
    }

    #[test]
    fn aliases_fill_the_proxy_settings_of_a_fastcgi_location() {
        let l = location(
            "fastcgi_read_timeout 7s; proxy_read_timeout 9s;",
            "fastcgi_pass 127.0.0.1:9000; fastcgi_next_upstream error http_500; fastcgi_intercept_errors on; fastcgi_keep_conn on; fastcgi_index index.php;",
        );
        assert_eq!(l.proxy_read_timeout, std::time::Duration::from_secs(7));
        assert!(l.proxy_intercept_errors && l.fastcgi_keep_conn && l.fastcgi_index.is_some());
        // A proxy location keeps the proxy_* values.
        let p = location(
            "fastcgi_read_timeout 7s; proxy_read_timeout 9s;",
            "proxy_pass http://127.0.0.1:1;",
        );
        assert_eq!(p.proxy_read_timeout, std::time::Duration::from_secs(9));
        assert!(!p.fastcgi);
    }

    #[test]
    fn bad_lines_say_where() {
        assert_eq!(
            err(&conf(
                "",
                "fastcgi_pass 127.0.0.1:9000; fastcgi_split_path_info ^(.+)$;"
            )),
            "pattern \"^(.+)$\" must have 2 captures in /t.conf:6"
        );
        assert_eq!(
            err(&conf("fastcgi_param A b c;", "")),
            "invalid parameter \"c\" in /t.conf:3"
        );
        assert_eq!(
            err(&conf("fastcgi_read_timeout x;", "")),
            "\"fastcgi_read_timeout\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err(&conf("", "fastcgi_pass http://127.0.0.1:9000;")),
            "invalid host in upstream \"http://127.0.0.1:9000\" in /t.conf:6"
        );
        assert!(err(&conf("fastcgi_keep_conn maybe;", "")).contains("must be \"on\" or \"off\""));
        assert_eq!(
            err(
                "events {}\nhttp { upstream u { zone z 64k; server 127.0.0.1:1; }\nserver { listen 127.0.0.1:8080;\nlocation / { fastcgi_pass u;\nhealth_check; } } }"
            ),
            "\"health_check\" is not supported with \"fastcgi_pass\" in /t.conf:5"
        );
        assert!(
            err(&conf("", "fastcgi_pass 127.0.0.1:1; proxy_pass http://x;")).contains("duplicate")
        );
    }
}
