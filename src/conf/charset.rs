//! The charset module's directives (`charset`, `source_charset`,
//! `charset_types`, `override_charset`), parsed into the merged location
//! settings. The filter itself is `http::charset`; the recoding is
//! encoding_rs's, so `charset_map` blocks are not read (see the man page).
//! No I/O.

use std::sync::Arc;

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, flag, not_here};
use super::loc::LocB;
use super::tree::Directive;

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    spec("charset", Args::Exactly(1)),
    spec("source_charset", Args::Exactly(1)),
    spec("charset_types", Args::AtLeast(1)),
    spec("override_charset", Args::Exactly(1)),
];

const fn spec(name: &'static str, args: Args) -> Spec {
    Spec {
        name,
        ctx: HSL,
        args,
        block: false,
        set: set_charset,
    }
}

/// `charset_types`: the MIME types whose responses get a charset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharsetTypes {
    /// `*`: every type.
    pub any: bool,
    /// Lowercased.
    pub types: Vec<String>,
}

/// nginx's default list.
pub const DEFAULT_TYPES: [&str; 6] = [
    "text/html",
    "text/xml",
    "text/plain",
    "text/vnd.wap.wml",
    "application/javascript",
    "application/rss+xml",
];

impl Default for CharsetTypes {
    fn default() -> CharsetTypes {
        CharsetTypes {
            any: false,
            types: DEFAULT_TYPES.iter().map(|t| t.to_string()).collect(),
        }
    }
}

impl CharsetTypes {
    /// Whether a MIME type (parameters stripped) is in the list.
    pub fn matches(&self, mime: &str) -> bool {
        self.any || self.types.iter().any(|x| mime.eq_ignore_ascii_case(x))
    }
}

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

fn once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    super::build::set_once(slot, v, d)
}

fn set_charset(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    match d.name.as_str() {
        "charset" => {
            let v = (d.args[0] != "off").then(|| d.args[0].clone());
            once(&mut loc(n, d)?.charset, v, d)
        }
        "source_charset" => {
            let v = Some(d.args[0].clone());
            once(&mut loc(n, d)?.source_charset, v, d)
        }
        "override_charset" => {
            let v = flag(d)?;
            once(&mut loc(n, d)?.override_charset, v, d)
        }
        _ => {
            // nginx: a second `charset_types` in one place is a duplicate;
            // the list replaces the default (text/html is not implied).
            let mut t = CharsetTypes {
                any: false,
                types: Vec::new(),
            };
            for a in &d.args {
                if a == "*" {
                    t.any = true;
                } else {
                    t.types.push(a.to_ascii_lowercase());
                }
            }
            once(&mut loc(n, d)?.charset_types, Arc::new(t), d)
        }
    }
}

/// nginx refuses a `charset` and `source_charset` it cannot recode between
/// (it needs a `charset_map`); sluice can recode what encoding_rs knows.
pub fn check(charset: Option<&str>, source: Option<&str>) -> Result<(), String> {
    let (Some(to), Some(from)) = (charset, source) else {
        return Ok(());
    };
    if to.eq_ignore_ascii_case(from) {
        return Ok(());
    }
    let known = |n: &str| encoding_rs::Encoding::for_label(n.as_bytes()).is_some();
    if known(to) && known(from) {
        return Ok(());
    }
    Err(format!(
        "no \"charset_map\" between the charsets \"{from}\" and \"{to}\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_types_and_star() {
        let t = CharsetTypes::default();
        assert!(t.matches("text/html"));
        assert!(t.matches("Application/JavaScript"));
        assert!(!t.matches("image/png"));
        let any = CharsetTypes {
            any: true,
            types: Vec::new(),
        };
        assert!(any.matches("image/png"));
    }

    #[test]
    fn recodable_pairs() {
        assert!(check(Some("utf-8"), Some("koi8-r")).is_ok());
        assert!(check(Some("utf-8"), None).is_ok());
        assert!(check(Some("x-unknown"), Some("x-unknown")).is_ok());
        let e = check(Some("utf-8"), Some("x-unknown")).unwrap_err();
        assert_eq!(
            e,
            "no \"charset_map\" between the charsets \"x-unknown\" and \"utf-8\""
        );
    }
}
