//! The headers module's `expires` directive: `expires [modified] TIME |
//! epoch | max | off | @TIME`, with variables allowed (the value is then
//! parsed per request, and an invalid one adds nothing, as in nginx). What
//! the headers become is `http::expires`. No I/O.

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, not_here, set_once};
use super::loc::LocB;
use super::tree::Directive;
use super::vars::{self, Template};

pub(super) const TABLE: &[Spec] = &[Spec {
    name: "expires",
    ctx: HTTP | SRV | LOC,
    args: Args::Range(1, 2),
    block: false,
    set: set_expires,
}];

/// What `Expires` and `Cache-Control` become (nginx's `ngx_http_expires_t`
/// with its time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expires {
    #[default]
    Off,
    /// `Expires` at the epoch's first second, `Cache-Control: no-cache`.
    Epoch,
    /// The end of 2037 and ten years' `max-age`.
    Max,
    /// Now plus this many seconds (negative: in the past, `no-cache`).
    Access(i64),
    /// The response's `Last-Modified` plus this many seconds (now plus, for
    /// a response without one).
    Modified(i64),
    /// The next time the local clock shows this many seconds past midnight.
    Daily(i64),
}

/// The directive as configured: a fixed value, or a text with variables
/// parsed for each request (`modified` said on the directive).
#[derive(Debug, Clone)]
pub enum ExpiresConf {
    Fixed(Expires),
    Var { modified: bool, value: Template },
}

impl Default for ExpiresConf {
    fn default() -> Self {
        ExpiresConf::Fixed(Expires::Off)
    }
}

/// Parses one value (nginx's `ngx_http_parse_expires`); the error is the
/// message nginx gives.
pub fn parse(value: &str, modified: bool) -> Result<Expires, &'static str> {
    if !modified {
        match value {
            "epoch" => return Ok(Expires::Epoch),
            "max" => return Ok(Expires::Max),
            "off" => return Ok(Expires::Off),
            _ => {}
        }
    }
    let (daily, minus, rest) = if let Some(r) = value.strip_prefix('@') {
        if modified {
            return Err("daily time cannot be used with \"modified\" parameter");
        }
        (true, false, r)
    } else if let Some(r) = value.strip_prefix('+') {
        (false, false, r)
    } else if let Some(r) = value.strip_prefix('-') {
        (false, true, r)
    } else {
        (false, false, value)
    };
    let secs = super::values::parse_time(rest, false)
        .ok_or("invalid value")?
        .as_secs();
    let secs = i64::try_from(secs).map_err(|_| "invalid value")?;
    if daily && secs > 24 * 60 * 60 {
        return Err("daily time value must be less than 24 hours");
    }
    let secs = if minus { -secs } else { secs };
    Ok(if daily {
        Expires::Daily(secs)
    } else if modified {
        Expires::Modified(secs)
    } else {
        Expires::Access(secs)
    })
}

fn set_expires(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let modified = d.args.len() == 2;
    if modified && d.args[0] != "modified" {
        return Err(ConfError::at(
            format!("\"{}\" directive invalid value", d.name),
            &d.src,
        ));
    }
    let text = &d.args[d.args.len() - 1];
    let t = vars::compile(text).map_err(|m| ConfError::at(m, &d.src))?;
    let v = if t.as_literal().is_some() {
        let e = parse(text, modified)
            .map_err(|m| ConfError::at(format!("\"{}\" directive {m}", d.name), &d.src))?;
        ExpiresConf::Fixed(e)
    } else {
        ExpiresConf::Var { modified, value: t }
    };
    let l: &mut LocB = n.loc_b().ok_or_else(|| not_here(d))?;
    set_once(&mut l.expires, v, d)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse("epoch", false), Ok(Expires::Epoch));
        assert_eq!(parse("max", false), Ok(Expires::Max));
        assert_eq!(parse("off", false), Ok(Expires::Off));
        assert_eq!(parse("1h", false), Ok(Expires::Access(3600)));
        assert_eq!(parse("+1d", false), Ok(Expires::Access(86400)));
        assert_eq!(parse("-1", false), Ok(Expires::Access(-1)));
        assert_eq!(parse("0", false), Ok(Expires::Access(0)));
        assert_eq!(parse("1y", false), Ok(Expires::Access(365 * 86400)));
        assert_eq!(parse("30m", true), Ok(Expires::Modified(1800)));
        assert_eq!(parse("@15h30m", false), Ok(Expires::Daily(55800)));
        assert_eq!(parse("max", true), Err("invalid value"));
        assert_eq!(
            parse("@1h", true),
            Err("daily time cannot be used with \"modified\" parameter")
        );
        assert_eq!(
            parse("@25h", false),
            Err("daily time value must be less than 24 hours")
        );
        assert_eq!(parse("soon", false), Err("invalid value"));
        assert_eq!(parse("", false), Err("invalid value"));
    }

    #[test]
    fn directive() {
        let (c, _) = try_build(&http_with("expires modified 1h;")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(matches!(
            l.expires,
            ExpiresConf::Fixed(Expires::Modified(3600))
        ));
        let (c, _) = try_build(&http_with("expires $arg_e;")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(matches!(
            l.expires,
            ExpiresConf::Var {
                modified: false,
                ..
            }
        ));
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(matches!(l.expires, ExpiresConf::Fixed(Expires::Off)));
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("expires soon;")),
            "\"expires\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("expires later 1h;")),
            "\"expires\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("expires modified @1h;")),
            "\"expires\" directive daily time cannot be used with \"modified\" parameter in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("expires @25h;")),
            "\"expires\" directive daily time value must be less than 24 hours in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("expires 1h; expires 2h;")),
            "\"expires\" directive is duplicate in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("expires 1 2 3;")),
            "invalid number of arguments in \"expires\" directive in /t.conf:3"
        );
    }
}
