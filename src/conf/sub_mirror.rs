//! The sub and mirror modules' directives: `sub_filter STRING REPLACEMENT`,
//! `sub_filter_types`, `sub_filter_once`, `sub_filter_last_modified`;
//! `mirror URI | off` and `mirror_request_body`, parsed into the merged
//! location settings. The filter is `http::sub_filter`, the subrequests
//! `http::mirror`. No I/O.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, flag, not_here, set_once};
use super::gzip::GzipTypes;
use super::loc::LocB;
use super::tree::Directive;
use super::vars::{self, Template};

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    spec("sub_filter", Args::Exactly(2)),
    spec("sub_filter_types", Args::AtLeast(1)),
    spec("sub_filter_once", Args::Exactly(1)),
    spec("sub_filter_last_modified", Args::Exactly(1)),
    spec("mirror", Args::Exactly(1)),
    spec("mirror_request_body", Args::Exactly(1)),
];

const fn spec(name: &'static str, args: Args) -> Spec {
    Spec {
        name,
        ctx: HSL,
        args,
        block: false,
        set,
    }
}

/// One `sub_filter`: the string searched (variables allowed, as nginx's;
/// lowercased when it has none) and its replacement.
#[derive(Debug, Clone)]
pub struct SubFilter {
    pub find: Template,
    pub replace: Template,
}

/// nginx refuses more than this many patterns in one location.
const MAX_PATTERNS: usize = 255;

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn template(d: &Directive, text: &str) -> Result<Template, ConfError> {
    vars::compile(text).map_err(|m| ConfError::at(m, &d.src))
}

fn set(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    match d.name.as_str() {
        "sub_filter" => {
            if d.args[0].is_empty() {
                return Err(ConfError::at("empty search pattern", &d.src));
            }
            let mut find = template(d, &d.args[0])?;
            // A literal is lowercased once here; one with variables, when
            // a response is filtered.
            if let Some(lit) = find.as_literal() {
                find = Template {
                    segments: vec![vars::Segment::Lit(lit.to_ascii_lowercase())],
                };
            }
            let replace = template(d, &d.args[1])?;
            let l = loc(n, d)?;
            let mut list = l.sub_filter.as_deref().cloned().unwrap_or_default();
            if list.len() == MAX_PATTERNS {
                return Err(ConfError::at(
                    "number of search patterns exceeds 255",
                    &d.src,
                ));
            }
            list.push(SubFilter { find, replace });
            l.sub_filter = Some(Arc::new(list));
            Ok(())
        }
        "sub_filter_types" => {
            let l = loc(n, d)?;
            let mut t = l.sub_filter_types.as_deref().cloned().unwrap_or_default();
            for a in &d.args {
                if a == "*" {
                    t.any = true;
                } else {
                    t.types.push(a.to_ascii_lowercase());
                }
            }
            l.sub_filter_types = Some(Arc::new(t));
            Ok(())
        }
        "sub_filter_once" => {
            let v = flag(d)?;
            set_once(&mut loc(n, d)?.sub_filter_once, v, d)
        }
        "sub_filter_last_modified" => {
            let v = flag(d)?;
            set_once(&mut loc(n, d)?.sub_filter_last_modified, v, d)
        }
        "mirror" => {
            let l = loc(n, d)?;
            let off = d.args[0] == "off";
            match &l.mirror {
                // `off` after anything, or anything after `off`.
                Some(list) if off || list.is_empty() => Err(super::build::duplicate(d)),
                _ if off => {
                    l.mirror = Some(Arc::default());
                    Ok(())
                }
                current => {
                    let mut list: Vec<String> = current.as_deref().cloned().unwrap_or_default();
                    list.push(d.args[0].clone());
                    l.mirror = Some(Arc::new(list));
                    Ok(())
                }
            }
        }
        _ => {
            let v = flag(d)?;
            set_once(&mut loc(n, d)?.mirror_request_body, v, d)
        }
    }
}

/// `sub_filter_types`: `text/html` always, these besides (gzip_types'
/// rule).
pub type SubFilterTypes = GzipTypes;

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};

    #[test]
    fn values() {
        let (c, _) = try_build(&http_with(
            "sub_filter Foo $host; sub_filter bar baz; sub_filter_once off; \
             sub_filter_types text/plain; mirror /m1; mirror /m2; mirror_request_body off;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert_eq!(l.sub_filter.len(), 2);
        assert_eq!(l.sub_filter[0].find.as_literal(), Some("foo"));
        assert!(l.sub_filter[0].replace.as_literal().is_none());
        assert!(!l.sub_filter_once);
        assert!(!l.sub_filter_last_modified);
        assert!(l.sub_filter_types.matches("text/plain; charset=utf-8"));
        assert!(l.sub_filter_types.matches("TEXT/HTML"));
        assert!(!l.sub_filter_types.matches("application/json"));
        assert_eq!(l.mirror.as_slice(), ["/m1".to_string(), "/m2".to_string()]);
        assert!(!l.mirror_request_body);
        let (c, _) = try_build(&http_with("mirror off;")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(l.mirror.is_empty());
        assert!(l.mirror_request_body);
        assert!(l.sub_filter_once);
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("sub_filter \"\" x;")),
            "empty search pattern in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("mirror /a; mirror off;")),
            "\"mirror\" directive is duplicate in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("mirror off; mirror /a;")),
            "\"mirror\" directive is duplicate in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("sub_filter_once maybe;")),
            "invalid value \"maybe\" in \"sub_filter_once\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        let many: String = (0..256).map(|i| format!("sub_filter p{i} r;")).collect();
        assert_eq!(
            err(&http_with(&many)),
            "number of search patterns exceeds 255 in /t.conf:3"
        );
    }
}
