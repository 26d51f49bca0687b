//! `limit_except METHOD ... { ... }` (location): the access rules of the
//! block (`allow`, `deny`, `auth_basic`, `auth_basic_user_file`) apply to
//! the methods it does not list, as nginx; GET lists HEAD too. What the
//! block does not set is the location's. Inherited by nested locations, as
//! nginx's. Pure; the access phase (`http::access_phase`) applies it.

use std::sync::Arc;

use super::ConfError;
use super::allow::{Rule, UserFile};
use super::build::{Args, Builder, LOC, Node, Spec, duplicate, not_here};
use super::loc::LocB;
use super::tree::Directive;
use super::vars::Template;

/// nginx's methods for `limit_except` (`ngx_http_core_limit_except`).
const METHODS: [&str; 14] = [
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "MKCOL",
    "COPY",
    "MOVE",
    "OPTIONS",
    "PROPFIND",
    "PROPPATCH",
    "LOCK",
    "UNLOCK",
    "PATCH",
];

/// The directives the block takes (nginx's access and auth_basic ones).
const INSIDE: [&str; 4] = ["allow", "deny", "auth_basic", "auth_basic_user_file"];

/// One `limit_except` block: the methods it leaves alone, and the block's
/// own settings (None: the location's).
#[derive(Debug, Clone)]
pub struct LimitExcept {
    pub methods: Vec<&'static str>,
    pub access_rules: Option<Arc<Vec<Rule>>>,
    pub auth_basic: Option<Option<Template>>,
    pub auth_basic_user_file: Option<Option<UserFile>>,
}

impl LimitExcept {
    /// Whether the block's rules apply to a request with this method.
    pub fn restricts(&self, method: &str) -> bool {
        !self.methods.contains(&method)
    }
}

pub(super) const TABLE: &[Spec] = &[Spec {
    name: "limit_except",
    ctx: LOC,
    args: Args::AtLeast(1),
    block: true,
    set: set_limit_except,
}];

fn set_limit_except(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let mut methods: Vec<&'static str> = Vec::new();
    for a in &d.args {
        // nginx compares the names without case (`limit_except get`).
        let Some(m) = METHODS.iter().find(|m| m.eq_ignore_ascii_case(a)) else {
            return Err(ConfError::at(format!("invalid method \"{a}\""), &d.src));
        };
        methods.push(m);
        if *m == "GET" {
            methods.push("HEAD");
        }
    }
    let children = d.block.as_deref().unwrap_or_default();
    for c in children {
        if !INSIDE.contains(&c.name.as_str()) {
            // Known elsewhere or not at all: nginx's words for each.
            return Err(ConfError::at(
                format!("\"{}\" directive is not allowed here", c.name),
                &c.src,
            ));
        }
    }
    let mut block = LocB::default();
    b.walk(children, &mut Node::Grpc(&mut block), LOC)?;
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    if l.limit_except.is_some() {
        return Err(duplicate(d));
    }
    l.limit_except = Some(Some(Arc::new(LimitExcept {
        methods,
        access_rules: block.access_rules,
        auth_basic: block.auth_basic,
        auth_basic_user_file: block.auth_basic_user_file,
    })));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err, try_build};

    fn conf(loc: &str) -> String {
        format!("events {{}}\nhttp {{\nserver {{ listen 127.0.0.1:8080;\n{loc} }} }}")
    }

    #[test]
    fn parsed_and_inherited() {
        let (c, _) = try_build(&conf(
            "location / { limit_except GET POST { deny all; } location /in { } }",
        ))
        .unwrap();
        let l = &c.http.as_ref().unwrap().servers[0].locations[0];
        let le = l.conf.limit_except.as_ref().unwrap();
        assert_eq!(le.methods, ["GET", "HEAD", "POST"]);
        assert!(!le.restricts("HEAD") && le.restricts("PUT") && le.restricts("FOO"));
        assert_eq!(le.access_rules.as_ref().unwrap().len(), 1);
        assert!(le.auth_basic.is_none());
        assert!(l.locations[0].conf.limit_except.is_some());
        // Names without case, as nginx reads them.
        let (c, _) =
            try_build(&conf("location / { limit_except get Post { deny all; } }")).unwrap();
        let le = c.http.as_ref().unwrap().servers[0].locations[0]
            .conf
            .limit_except
            .clone();
        assert_eq!(le.unwrap().methods, ["GET", "HEAD", "POST"]);
    }

    #[test]
    fn errors() {
        assert!(
            err(&conf("location / { limit_except FOO { deny all; } }"))
                .contains("invalid method \"FOO\" in /t.conf:4")
        );
        assert!(
            err(&conf("location / {\nlimit_except GET {\nroot /x; } }"))
                .contains("\"root\" directive is not allowed here in /t.conf:6")
        );
        assert!(
            err(&conf("limit_except GET { deny all; }"))
                .contains("\"limit_except\" directive is not allowed here in /t.conf:4")
        );
        assert!(
            err(&conf("location / { limit_except GET; }"))
                .contains("directive \"limit_except\" has no opening \"{\" in /t.conf:4")
        );
        assert!(
            err(&conf(
                "location / { limit_except GET { } limit_except POST { } }"
            ))
            .contains("\"limit_except\" directive is duplicate in /t.conf:4")
        );
    }
}
