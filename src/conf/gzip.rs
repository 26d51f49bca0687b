//! The gzip module's directives (`gzip`, `gzip_types`, `gzip_min_length`,
//! `gzip_comp_level`, `gzip_proxied`, `gzip_vary`, `gzip_buffers`,
//! `gzip_http_version`, `gzip_disable`, `gzip_static`), parsed into the
//! merged location settings. The filter itself is `http::gzip`. No I/O.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, flag, not_here, number, size_arg};
use super::loc::LocB;
use super::tree::Directive;

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    spec("gzip", Args::Exactly(1)),
    spec("gzip_types", Args::AtLeast(1)),
    spec("gzip_min_length", Args::Exactly(1)),
    spec("gzip_comp_level", Args::Exactly(1)),
    spec("gzip_proxied", Args::AtLeast(1)),
    spec("gzip_vary", Args::Exactly(1)),
    spec("gzip_buffers", Args::Exactly(2)),
    spec("gzip_http_version", Args::Exactly(1)),
    spec("gzip_disable", Args::AtLeast(1)),
    spec("gzip_static", Args::Exactly(1)),
];

const fn spec(name: &'static str, args: Args) -> Spec {
    Spec {
        name,
        ctx: HSL,
        args,
        block: false,
        set: set_gzip,
    }
}

/// `gzip_proxied` conditions as a bit set (nginx's values).
pub mod proxied {
    pub const OFF: u32 = 0x0002;
    pub const EXPIRED: u32 = 0x0004;
    pub const NO_CACHE: u32 = 0x0008;
    pub const NO_STORE: u32 = 0x0010;
    pub const PRIVATE: u32 = 0x0020;
    pub const NO_LAST_MODIFIED: u32 = 0x0040;
    pub const NO_ETAG: u32 = 0x0080;
    pub const AUTH: u32 = 0x0100;
    pub const ANY: u32 = 0x0200;

    pub fn parse(word: &str) -> Option<u32> {
        Some(match word {
            "off" => OFF,
            "expired" => EXPIRED,
            "no-cache" => NO_CACHE,
            "no-store" => NO_STORE,
            "private" => PRIVATE,
            "no_last_modified" => NO_LAST_MODIFIED,
            "no_etag" => NO_ETAG,
            "auth" => AUTH,
            "any" => ANY,
            _ => return None,
        })
    }
}

/// `gzip_types`: the MIME types compressed besides `text/html`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GzipTypes {
    /// `*`: every type.
    pub any: bool,
    /// Lowercased.
    pub types: Vec<String>,
}

impl GzipTypes {
    /// Whether a `Content-Type` (parameters ignored, any case) is compressed.
    pub fn matches(&self, content_type: &str) -> bool {
        if self.any {
            return true;
        }
        let t = content_type.split(';').next().unwrap_or("").trim();
        t.eq_ignore_ascii_case("text/html") || self.types.iter().any(|x| t.eq_ignore_ascii_case(x))
    }
}

/// One `gzip_disable` entry.
#[derive(Debug, Clone)]
pub enum GzipDisable {
    /// `msie6`: MSIE 4 to 6 (6 without SV1), as nginx recognises them.
    Msie6,
    /// A regular expression on `User-Agent`, case ignored.
    Regex(regex::Regex),
}

/// `gzip_static off | on | always`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GzipStatic {
    #[default]
    Off,
    On,
    Always,
}

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    super::build::set_once(slot, v, d)
}

fn invalid(d: &Directive, a: &str) -> ConfError {
    ConfError::at(format!("invalid value \"{a}\""), &d.src)
}

fn set_gzip(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    match d.name.as_str() {
        "gzip" => {
            let v = flag(d)?;
            once(&mut loc(n, d)?.gzip, v, d)
        }
        "gzip_vary" => {
            let v = flag(d)?;
            once(&mut loc(n, d)?.gzip_vary, v, d)
        }
        "gzip_types" => {
            let l = loc(n, d)?;
            let mut t = l.gzip_types.as_deref().cloned().unwrap_or_default();
            for a in &d.args {
                if a == "*" {
                    t.any = true;
                } else {
                    t.types.push(a.to_ascii_lowercase());
                }
            }
            l.gzip_types = Some(Arc::new(t));
            Ok(())
        }
        "gzip_min_length" => {
            let v = size_arg(d, 0)?;
            once(&mut loc(n, d)?.gzip_min_length, v, d)
        }
        "gzip_comp_level" => {
            let v: u32 =
                number(&d.args[0]).ok_or_else(|| ConfError::at("invalid number", &d.src))?;
            if !(1..=9).contains(&v) {
                return Err(ConfError::at("value must be between 1 and 9", &d.src));
            }
            once(&mut loc(n, d)?.gzip_comp_level, v, d)
        }
        "gzip_proxied" => {
            let mut bits = 0;
            for a in &d.args {
                bits |= proxied::parse(a).ok_or_else(|| invalid(d, a))?;
            }
            once(&mut loc(n, d)?.gzip_proxied, bits, d)
        }
        "gzip_buffers" => {
            let count: u32 = number(&d.args[0])
                .filter(|c| *c > 0)
                .ok_or_else(|| invalid(d, &d.args[0]))?;
            let size = size_arg(d, 1)?;
            if size == 0 {
                return Err(invalid(d, &d.args[1]));
            }
            once(&mut loc(n, d)?.gzip_buffers, (count, size), d)
        }
        "gzip_http_version" => {
            let v = match d.args[0].as_str() {
                "1.0" => 10,
                "1.1" => 11,
                a => return Err(invalid(d, a)),
            };
            once(&mut loc(n, d)?.gzip_http_version, v, d)
        }
        "gzip_disable" => {
            let mut list = Vec::new();
            for a in &d.args {
                if a == "msie6" {
                    list.push(GzipDisable::Msie6);
                    continue;
                }
                let re = regex::RegexBuilder::new(a)
                    .case_insensitive(true)
                    .build()
                    .map_err(|e| ConfError::at(format!("regex \"{a}\" is invalid: {e}"), &d.src))?;
                list.push(GzipDisable::Regex(re));
            }
            let l = loc(n, d)?;
            let mut all = l.gzip_disable.as_deref().cloned().unwrap_or_default();
            all.extend(list);
            l.gzip_disable = Some(Arc::new(all));
            Ok(())
        }
        _ => {
            let v = match d.args[0].as_str() {
                "off" => GzipStatic::Off,
                "on" => GzipStatic::On,
                "always" => GzipStatic::Always,
                a => return Err(invalid(d, a)),
            };
            once(&mut loc(n, d)?.gzip_static, v, d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};
    use super::*;

    #[test]
    fn defaults_and_values() {
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(!l.gzip && !l.gzip_vary);
        assert_eq!(l.gzip_min_length, 20);
        assert_eq!(l.gzip_comp_level, 1);
        assert_eq!(l.gzip_proxied, proxied::OFF);
        assert_eq!(l.gzip_http_version, 11);
        assert!(l.gzip_types.matches("text/html; charset=utf-8"));
        assert!(!l.gzip_types.matches("text/plain"));
        let (c, _) = try_build(&http_with(
            "gzip on; gzip_types text/plain application/JSON; gzip_types text/css;\n\
             gzip_min_length 1k; gzip_comp_level 9; gzip_proxied expired no-cache auth;\n\
             gzip_vary on; gzip_buffers 16 8k; gzip_http_version 1.0;\n\
             gzip_disable msie6 \"Foo\"; gzip_static always;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(l.gzip && l.gzip_vary);
        assert!(l.gzip_types.matches("application/json"));
        assert!(l.gzip_types.matches("TEXT/CSS"));
        assert_eq!(l.gzip_min_length, 1024);
        assert_eq!(l.gzip_comp_level, 9);
        assert_eq!(
            l.gzip_proxied,
            proxied::EXPIRED | proxied::NO_CACHE | proxied::AUTH
        );
        assert_eq!(l.gzip_http_version, 10);
        assert_eq!(l.gzip_disable.len(), 2);
        assert_eq!(l.gzip_static, GzipStatic::Always);
        let (c, _) = try_build(&http_with("gzip_types *;")).unwrap();
        assert!(
            c.http.as_ref().unwrap().servers[0]
                .conf
                .gzip_types
                .matches("image/png")
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("gzip maybe;")),
            "invalid value \"maybe\" in \"gzip\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip_comp_level 10;")),
            "value must be between 1 and 9 in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip_proxied sometimes;")),
            "invalid value \"sometimes\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip_http_version 2.0;")),
            "invalid value \"2.0\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip_static maybe;")),
            "invalid value \"maybe\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip_min_length big;")),
            "\"gzip_min_length\" directive invalid value in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("gzip on; gzip off;")),
            "\"gzip\" directive is duplicate in /t.conf:3"
        );
        assert!(err(&http_with("gzip_disable \"(\";")).starts_with("regex \"(\" is invalid"));
        assert_eq!(
            err(&http_with("gzip_buffers 0 4k;")),
            "invalid value \"0\" in /t.conf:3"
        );
    }
}
