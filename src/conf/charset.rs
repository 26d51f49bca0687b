//! The charset module's directives (`charset`, `source_charset`,
//! `charset_types`, `override_charset`, and `charset_map` tables), parsed
//! into the merged location settings. The filter itself is `http::charset`;
//! it recodes by a `charset_map` where one joins the two charsets, else with
//! encoding_rs. No I/O.

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
    Spec {
        name: "charset_map",
        ctx: HTTP,
        args: Args::Exactly(2),
        block: true,
        set: set_map,
    },
];

/// A `charset_map FROM TO { ... }` table: FROM is a one-byte charset; TO is
/// one too, or utf-8 (then each byte maps to a UTF-8 sequence).
#[derive(Debug, PartialEq, Eq)]
pub struct CharsetMap {
    pub from: String,
    pub to: String,
    pub utf8: bool,
    /// For each byte of FROM, its bytes in TO. nginx's defaults: ASCII maps
    /// to itself, an unlisted byte to `?`.
    pub table: Vec<Vec<u8>>,
}

impl CharsetMap {
    /// Whether it joins these two charsets, and in which direction: Some(false)
    /// FROM to TO, Some(true) TO to FROM.
    pub fn joins(&self, from: &str, to: &str) -> Option<bool> {
        if self.from.eq_ignore_ascii_case(from) && self.to.eq_ignore_ascii_case(to) {
            Some(false)
        } else if self.from.eq_ignore_ascii_case(to) && self.to.eq_ignore_ascii_case(from) {
            Some(true)
        } else {
            None
        }
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn set_map(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let (from, to) = (
        d.args[0].to_ascii_lowercase(),
        d.args[1].to_ascii_lowercase(),
    );
    let utf8 = to == "utf-8";
    let mut table: Vec<Vec<u8>> = (0..=255u8)
        .map(|b| vec![if b < 128 { b } else { b'?' }])
        .collect();
    for e in d.block.as_deref().unwrap_or_default() {
        let bad = |v: &str| ConfError::at(format!("invalid value \"{v}\""), &e.src);
        if e.block.is_some() || e.args.len() != 1 {
            return Err(ConfError::at("invalid parameters number", &e.src));
        }
        let src = match hex(&e.name).as_deref() {
            Some([b]) => *b,
            _ => return Err(bad(&e.name)),
        };
        let dst = match hex(&e.args[0]) {
            Some(v) if utf8 && v.len() <= 4 && std::str::from_utf8(&v).is_ok() => v,
            Some(v) if !utf8 && v.len() == 1 => v,
            _ => return Err(bad(&e.args[0])),
        };
        table[usize::from(src)] = dst;
    }
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    let mut all = l.charset_maps.as_deref().cloned().unwrap_or_default();
    if all.iter().any(|m| m.joins(&from, &to).is_some()) {
        return Err(ConfError::at(
            format!("duplicate \"charset_map\" between \"{from}\" and \"{to}\""),
            &d.src,
        ));
    }
    all.push(Arc::new(CharsetMap {
        from,
        to,
        utf8,
        table,
    }));
    l.charset_maps = Some(Arc::new(all));
    Ok(())
}

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
            // the list replaces the default, text/html always on it (as
            // nginx's types slot puts the first default type first).
            let mut t = CharsetTypes {
                any: false,
                types: vec!["text/html".to_string()],
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
pub fn check(
    charset: Option<&str>,
    source: Option<&str>,
    maps: &[Arc<CharsetMap>],
) -> Result<(), String> {
    let (Some(to), Some(from)) = (charset, source) else {
        return Ok(());
    };
    if to.eq_ignore_ascii_case(from) || maps.iter().any(|m| m.joins(from, to).is_some()) {
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
        let text = crate::conf::testutil::http_with("charset_types application/json;");
        let (c, _) = crate::conf::testutil::try_build(&text).expect("builds");
        let given = &c.http.expect("http").servers[0].locations[0].conf;
        assert!(given.charset_types.matches("text/html"));
        assert!(given.charset_types.matches("application/json"));
        assert!(!given.charset_types.matches("text/plain"));
    }

    #[test]
    fn hex_values() {
        assert_eq!(hex("E282AC"), Some(vec![0xe2, 0x82, 0xac]));
        assert_eq!(hex("9a"), Some(vec![0x9a]));
        for bad in ["", "9", "zz", "+1", "\u{e9}9"] {
            assert_eq!(hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn recodable_pairs() {
        assert!(check(Some("utf-8"), Some("koi8-r"), &[]).is_ok());
        assert!(check(Some("utf-8"), None, &[]).is_ok());
        assert!(check(Some("x-unknown"), Some("x-unknown"), &[]).is_ok());
        let map = Arc::new(CharsetMap {
            from: "x-unknown".into(),
            to: "utf-8".into(),
            utf8: true,
            table: Vec::new(),
        });
        assert!(check(Some("UTF-8"), Some("x-unknown"), std::slice::from_ref(&map)).is_ok());
        assert!(check(Some("x-unknown"), Some("utf-8"), &[map]).is_ok());
        let e = check(Some("utf-8"), Some("x-unknown"), &[]).unwrap_err();
        assert_eq!(
            e,
            "no \"charset_map\" between the charsets \"x-unknown\" and \"utf-8\""
        );
    }
}
