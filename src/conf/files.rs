//! Directives of the static file handler that have a table of their own:
//! `max_ranges` (http, server, location), parsed as
//! nginx's core module parses them. The root, alias, index and types
//! directives stay in `loc_table`. Pure.

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, duplicate, not_here, number};
use super::loc::LocB;
use super::tree::Directive;

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[Spec {
    name: "max_ranges",
    ctx: HSL,
    args: Args::Exactly(1),
    block: false,
    set: set_max_ranges,
}];

fn loc<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    n.loc_b().ok_or_else(|| not_here(d))
}

/// `max_ranges NUMBER`.
fn set_max_ranges(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let v: u32 = number(&d.args[0])
        .ok_or_else(|| ConfError::at(format!("\"{}\" directive invalid number", d.name), &d.src))?;
    let l = loc(n, d)?;
    if l.max_ranges.is_some() {
        return Err(duplicate(d));
    }
    l.max_ranges = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    fn in_server(s: &str) -> String {
        format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}")
    }

    #[test]
    fn parsed_and_inherited() {
        let (c, _) = try_build(&in_server(
            "max_ranges 2;\nlocation /a { max_ranges 0; }\nlocation /b { }",
        ))
        .unwrap();
        let s = &c.http.unwrap().servers[0];
        assert_eq!(s.locations[0].conf.max_ranges, 0);
        assert_eq!(s.locations[1].conf.max_ranges, 2);
        let (c, _) = try_build(&in_server("location / { }")).unwrap();
        let l = &c.http.unwrap().servers[0].locations[0].conf;
        assert_eq!(l.max_ranges, u32::MAX);
    }

    #[test]
    fn errors_as_nginx_words_them() {
        let e = |s: &str| err(&in_server(s));
        assert_eq!(
            e("max_ranges -1;"),
            "\"max_ranges\" directive invalid number in /t.conf:4"
        );
        assert_eq!(
            e("max_ranges 1; max_ranges 2;"),
            "\"max_ranges\" directive is duplicate in /t.conf:4"
        );
    }
}
