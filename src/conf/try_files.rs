//! `try_files file ... uri | =code` (server and location) and `internal`
//! (location). Neither is inherited by nested locations, as in nginx. Pure.

use super::ConfError;
use super::build::{Args, Builder, LOC, Node, SRV, Spec, duplicate, not_here};
use super::tree::Directive;
use super::vars::{self, Template};

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "try_files",
        ctx: SRV | LOC,
        args: Args::AtLeast(2),
        block: false,
        set: set_try_files,
    },
    Spec {
        name: "internal",
        ctx: LOC,
        args: Args::Exactly(0),
        block: false,
        set: set_internal,
    },
];

/// `try_files`: the paths tried in order, then what happens when none exists.
#[derive(Debug, Clone)]
pub struct TryFiles {
    /// Each with whether it names a directory (written with a final `/`).
    pub files: Vec<(Template, bool)>,
    pub last: TryLast,
}

#[derive(Debug, Clone)]
pub enum TryLast {
    /// An internal redirect to the URI (its own `?args`, else none) or to a
    /// named location.
    Uri(Template),
    /// `=code`.
    Code(u16),
}

fn set_try_files(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let slot = match n {
        Node::Server(s) => &mut s.try_files,
        Node::Location(l) => &mut l.try_files,
        _ => return Err(not_here(d)),
    };
    if slot.is_some() {
        return Err(duplicate(d));
    }
    let compile = |t: &str| vars::compile(t).map_err(|m| ConfError::at(m, &d.src));
    let (last, files) = d.args.split_last().ok_or_else(|| not_here(d))?;
    let mut tried = Vec::with_capacity(files.len());
    for f in files {
        let (text, dir) = match f.strip_suffix('/') {
            Some(t) => (t, true),
            None => (f.as_str(), false),
        };
        tried.push((compile(text)?, dir));
    }
    let last = match last.strip_prefix('=') {
        Some(code) => match super::build::number::<u16>(code) {
            Some(c) if c <= 999 => TryLast::Code(c),
            _ => {
                return Err(ConfError::at(format!("invalid code \"{code}\""), &d.src));
            }
        },
        None => TryLast::Uri(compile(last)?),
    };
    *slot = Some(std::sync::Arc::new(TryFiles { files: tried, last }));
    Ok(())
}

fn set_internal(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let Node::Location(l) = n else {
        return Err(not_here(d));
    };
    if l.internal {
        return Err(duplicate(d));
    }
    l.internal = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};
    use super::*;

    #[test]
    fn try_files_parsed() {
        let (c, _) = try_build(
            "events {} http { server { listen 127.0.0.1:8080; try_files $uri =404;
             location / { try_files $uri $uri/ /index.php?$args; }
             location /i { internal; }
             location /n { try_files /x @fallback; } location @fallback { return 204; } } }",
        )
        .unwrap();
        let s = &c.http.as_ref().unwrap().servers[0];
        assert!(matches!(
            s.try_files.as_ref().map(|t| &t.last),
            Some(TryLast::Code(404))
        ));
        let t = s.locations[0].try_files.as_ref().unwrap();
        assert_eq!(t.files.len(), 2);
        assert!(!t.files[0].1 && t.files[1].1);
        assert!(s.locations[1].internal && !s.locations[0].internal);
        assert!(s.locations[1].try_files.is_none());
    }

    #[test]
    fn try_files_errors() {
        assert_eq!(
            err("events {} http { server { location / { try_files $uri =40x; } } }"),
            "invalid code \"40x\" in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { server { location / { try_files $uri =1000; } } }"),
            "invalid code \"1000\" in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { server { location / { try_files $uri; } } }"),
            "invalid number of arguments in \"try_files\" directive in /t.conf:1"
        );
        assert_eq!(
            err(
                "events {} http { server { location / { try_files $uri =404; try_files $uri =403; } } }"
            ),
            "\"try_files\" directive is duplicate in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { server { internal; } }"),
            "\"internal\" directive is not allowed here in /t.conf:1"
        );
        assert_eq!(
            err("events {} http { server { location / { try_files $nosuch =404; } } }"),
            "unknown \"nosuch\" variable in /t.conf:1"
        );
    }
}
