//! `limit_rate`, `limit_rate_after` (the response to the client) and
//! `proxy_limit_rate` (reading from the upstream): sizes per request, with
//! variables allowed as in nginx 1.17 and 1.27. `limit_rate` in an `if`
//! block sets `$limit_rate` when the condition holds. The limits run in
//! `http::rate`. No I/O.

use super::ConfError;
use super::build::{Args, Builder, HTTP, LOC, Node, SRV, Spec, invalid_value, not_here, set_once};
use super::model::Stmt;
use super::rewrite::IF;
use super::tree::Directive;
use super::values::parse_size;
use super::vars::{self, Template};

const HSL: u8 = HTTP | SRV | LOC;

pub(super) const TABLE: &[Spec] = &[
    spec("limit_rate", HSL | IF),
    spec("limit_rate_after", HSL | IF),
    spec("proxy_limit_rate", HSL),
];

const fn spec(name: &'static str, ctx: u8) -> Spec {
    Spec {
        name,
        ctx,
        args: Args::Exactly(1),
        block: false,
        set: set_rate,
    }
}

/// A size with variables: the literal checked now, a text with variables
/// when the request is served (a value that is not a size is then 0).
fn set_rate(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let t = vars::compile(&d.args[0]).map_err(|m| ConfError::at(m, &d.src))?;
    if let Some(lit) = t.as_literal() {
        if parse_size(lit).is_none() {
            return Err(invalid_value(d));
        }
    }
    // In an `if` block: what `set $limit_rate` does there; for
    // `limit_rate_after`, a value no `set` can name (nginx has no variable
    // for it).
    if let Node::If(body) = n {
        let var = match d.name.as_str() {
            "limit_rate" => "limit_rate",
            "limit_rate_after" => AFTER_IN_IF,
            _ => return Err(not_here(d)),
        };
        body.push(Stmt::Set {
            var: var.to_string(),
            value: t,
        });
        return Ok(());
    }
    let l = n.loc_b().ok_or_else(|| not_here(d))?;
    let slot = match d.name.as_str() {
        "limit_rate" => &mut l.limit_rate,
        "limit_rate_after" => &mut l.limit_rate_after,
        _ => &mut l.proxy_limit_rate,
    };
    set_once(slot, Some(t), d)
}

/// Where `limit_rate_after` in an `if` block keeps its value among the
/// request's variables: a name `set $NAME` cannot write.
pub const AFTER_IN_IF: &str = " limit_rate_after";

/// The size a rate setting gives for a request: 0 without one.
pub fn size(t: Option<&Template>, eval: impl Fn(&Template) -> String) -> u64 {
    t.and_then(|t| parse_size(eval(t).trim())).unwrap_or(0)
}

/// The text uses `$limit_rate` (which reads `limit_rate` until set).
pub fn reads_itself(t: &Template) -> bool {
    t.segments
        .iter()
        .any(|s| matches!(s, vars::Segment::Var(vars::Var::User(n)) if n == "limit_rate"))
}
