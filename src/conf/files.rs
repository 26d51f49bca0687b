//! Directives of the static file handler that have a table of their own:
//! `max_ranges` and `disable_symlinks` (http, server, location), parsed as
//! nginx's core module parses them. The root, alias, index and types
//! directives stay in `loc_table`. Pure.

use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, duplicate, not_here, number};
use super::loc::{DisableSymlinks, LocB, Symlinks};
use super::tree::Directive;
use super::{ConfError, vars};

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "max_ranges",
        ctx: HSL,
        args: Args::Exactly(1),
        block: false,
        set: set_max_ranges,
    },
    Spec {
        name: "disable_symlinks",
        ctx: HSL,
        args: Args::Range(1, 2),
        block: false,
        set: set_disable_symlinks,
    },
];

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

/// `disable_symlinks off | on | if_not_owner [from=PART]`: the parameters in
/// any order; a mode is required, and `from=` is refused with `off`.
fn set_disable_symlinks(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let mut mode = None;
    let mut from = None;
    for a in &d.args {
        match a.as_str() {
            "off" => mode = Some(Symlinks::Off),
            "on" => mode = Some(Symlinks::On),
            "if_not_owner" => mode = Some(Symlinks::IfNotOwner),
            _ => match a.strip_prefix("from=") {
                Some(text) => {
                    from = Some(vars::compile(text).map_err(|m| ConfError::at(m, &d.src))?);
                }
                None => {
                    return Err(ConfError::at(format!("invalid parameter \"{a}\""), &d.src));
                }
            },
        }
    }
    let Some(mode) = mode else {
        return Err(ConfError::at(
            format!(
                "\"{}\" must have \"off\", \"on\" or \"if_not_owner\" parameter",
                d.name
            ),
            &d.src,
        ));
    };
    if d.args.len() == 2 {
        if from.is_none() {
            return Err(ConfError::at(
                format!("duplicate parameters \"{} {}\"", d.args[0], d.args[1]),
                &d.src,
            ));
        }
        if mode == Symlinks::Off {
            return Err(ConfError::at(
                "\"from=\" cannot be used with \"off\" parameter",
                &d.src,
            ));
        }
    }
    let l = loc(n, d)?;
    if l.disable_symlinks.is_some() {
        return Err(duplicate(d));
    }
    l.disable_symlinks = Some(DisableSymlinks { mode, from });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::loc::Symlinks;
    use super::super::testutil::{err, try_build};

    fn in_server(s: &str) -> String {
        format!("events {{}}\nhttp {{\nserver {{\n{s}\n}}\n}}")
    }

    #[test]
    fn parsed_and_inherited() {
        let (c, _) = try_build(&in_server(
            "max_ranges 2; disable_symlinks if_not_owner from=$document_root;\n\
             location /a { max_ranges 0; }\nlocation /b { disable_symlinks off; }",
        ))
        .unwrap();
        let s = &c.http.unwrap().servers[0];
        let a = &s.locations[0].conf;
        assert_eq!(a.max_ranges, 0);
        assert_eq!(a.disable_symlinks.mode, Symlinks::IfNotOwner);
        assert!(a.disable_symlinks.from.is_some());
        let b = &s.locations[1].conf;
        assert_eq!(b.max_ranges, 2);
        assert_eq!(b.disable_symlinks.mode, Symlinks::Off);
        assert!(b.disable_symlinks.from.is_none());
    }

    #[test]
    fn defaults() {
        let (c, _) = try_build(&in_server("location / { }")).unwrap();
        let l = &c.http.unwrap().servers[0].locations[0].conf;
        assert_eq!(l.max_ranges, u32::MAX);
        assert_eq!(l.disable_symlinks.mode, Symlinks::Off);
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
        assert_eq!(
            e("disable_symlinks yes;"),
            "invalid parameter \"yes\" in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks from=/a;"),
            "\"disable_symlinks\" must have \"off\", \"on\" or \"if_not_owner\" parameter in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks on off;"),
            "duplicate parameters \"on off\" in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks off from=/a;"),
            "\"from=\" cannot be used with \"off\" parameter in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks on from=$nope;"),
            "unknown \"nope\" variable in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks on from=/a from=/b;"),
            "invalid number of arguments in \"disable_symlinks\" directive in /t.conf:4"
        );
        assert_eq!(
            e("disable_symlinks on; disable_symlinks off;"),
            "\"disable_symlinks\" directive is duplicate in /t.conf:4"
        );
    }
}
