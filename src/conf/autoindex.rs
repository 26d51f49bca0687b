//! The autoindex module's directives (`autoindex`, `autoindex_exact_size`,
//! `autoindex_format`, `autoindex_localtime`), parsed into the merged
//! location settings. The listing itself is `http::autoindex`. No I/O.

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, flag, not_here, set_once};
use super::loc::LocB;
use super::tree::Directive;

pub(super) const TABLE: &[Spec] = &[
    spec("autoindex"),
    spec("autoindex_exact_size"),
    spec("autoindex_format"),
    spec("autoindex_localtime"),
];

const fn spec(name: &'static str) -> Spec {
    Spec {
        name,
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_autoindex,
    }
}

/// `autoindex_format html | xml | json | jsonp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Html,
    Xml,
    Json,
    Jsonp,
}

fn set_autoindex(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let l: &mut LocB = n.loc_b().ok_or_else(|| not_here(d))?;
    match d.name.as_str() {
        "autoindex" => set_once(&mut l.autoindex, flag(d)?, d),
        "autoindex_exact_size" => set_once(&mut l.autoindex_exact_size, flag(d)?, d),
        "autoindex_localtime" => set_once(&mut l.autoindex_localtime, flag(d)?, d),
        _ => {
            let f = match d.args[0].as_str() {
                "html" => Format::Html,
                "xml" => Format::Xml,
                "json" => Format::Json,
                "jsonp" => Format::Jsonp,
                a => {
                    return Err(ConfError::at(
                        format!("invalid value \"{a}\" in \"{}\" directive", d.name),
                        &d.src,
                    ));
                }
            };
            set_once(&mut l.autoindex_format, f, d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, http_with, try_build};
    use super::*;

    #[test]
    fn values() {
        let (c, _) = try_build(&http_with("")).unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(!l.autoindex && l.autoindex_exact_size && !l.autoindex_localtime);
        assert_eq!(l.autoindex_format, Format::Html);
        let (c, _) = try_build(&http_with(
            "autoindex on; autoindex_exact_size off; autoindex_localtime on; autoindex_format jsonp;",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].conf;
        assert!(l.autoindex && !l.autoindex_exact_size && l.autoindex_localtime);
        assert_eq!(l.autoindex_format, Format::Jsonp);
    }

    #[test]
    fn errors() {
        assert_eq!(
            err(&http_with("autoindex_format yaml;")),
            "invalid value \"yaml\" in \"autoindex_format\" directive in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("autoindex yes;")),
            "invalid value \"yes\" in \"autoindex\" directive, it must be \"on\" or \"off\" in /t.conf:3"
        );
        assert_eq!(
            err(&http_with("autoindex on; autoindex off;")),
            "\"autoindex\" directive is duplicate in /t.conf:3"
        );
    }
}
