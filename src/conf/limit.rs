//! `limit_req_zone`, `limit_req`, `limit_conn_zone`, `limit_conn` and their
//! `_status`, `_log_level` and `_dry_run` settings (http; `limit_conn` and
//! `limit_conn_zone` in stream too), parsed with nginx's checks and
//! messages. Zones are named once per configuration (one namespace, as
//! nginx's shared memory); a `limit_*` directive may name a zone declared
//! further down, and is checked once the file is read. No I/O.

use std::sync::Arc;

use super::build::{Args, Builder, HTTP, LOC, Node, SRV, SSRV, STREAM, Spec, not_here};
use super::loc::LocB;
use super::tree::Directive;
use super::vars::{self, Template};
use super::{ConfError, Src};
use crate::log::Level;

pub(super) const TABLE: &[Spec] = &[
    Spec {
        name: "limit_req_zone",
        ctx: HTTP,
        args: Args::Range(3, 4),
        block: false,
        set: set_zone,
    },
    Spec {
        name: "limit_req",
        ctx: HTTP | SRV | LOC,
        args: Args::Range(1, 3),
        block: false,
        set: set_limit_req,
    },
    Spec {
        name: "limit_req_status",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_status,
    },
    Spec {
        name: "limit_req_log_level",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_log_level,
    },
    Spec {
        name: "limit_req_dry_run",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_dry_run,
    },
    Spec {
        name: "limit_conn_zone",
        ctx: HTTP | STREAM,
        args: Args::Exactly(2),
        block: false,
        set: set_zone,
    },
    Spec {
        name: "limit_conn",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::Exactly(2),
        block: false,
        set: set_limit_conn,
    },
    Spec {
        name: "limit_conn_status",
        ctx: HTTP | SRV | LOC,
        args: Args::Exactly(1),
        block: false,
        set: set_status,
    },
    Spec {
        name: "limit_conn_log_level",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_log_level,
    },
    Spec {
        name: "limit_conn_dry_run",
        ctx: HTTP | SRV | LOC | STREAM | SSRV,
        args: Args::Exactly(1),
        block: false,
        set: set_dry_run,
    },
];

/// What a zone is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneKind {
    /// `limit_req_zone`, with its rate in thousandths of a request per
    /// second.
    Req { rate: u64 },
    /// `limit_conn_zone` in http.
    Conn,
    /// `limit_conn_zone` in stream.
    StreamConn,
}

/// One `limit_req_zone` or `limit_conn_zone`.
#[derive(Debug, Clone)]
pub struct LimitZoneSpec {
    pub name: String,
    pub size: u64,
    pub kind: ZoneKind,
    pub key: Template,
    /// The key as written, compared on reload as nginx does.
    pub key_text: String,
    pub src: Src,
}

/// One `limit_req` line: burst and delay in thousandths of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitReq {
    pub zone: String,
    pub burst: u64,
    pub delay: u64,
}

/// One `limit_conn` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConn {
    pub zone: String,
    pub conn: u32,
}

/// A `limit_req` or `limit_conn` naming a zone, checked once all are known.
#[derive(Debug, Clone)]
pub(super) struct ZoneUse {
    name: String,
    conn: bool,
    stream: bool,
    src: Src,
}

fn at(msg: impl Into<String>, src: &Src) -> ConfError {
    ConfError::at(msg, src)
}

/// `NAME:SIZE` of `zone=NAME:SIZE` (nginx's checks: a size, at least eight
/// pages).
fn zone_arg(arg: &str, whole: &str, src: &Src) -> Result<(String, u64), ConfError> {
    let Some((name, size)) = arg.split_once(':') else {
        return Err(at(format!("invalid zone size \"{whole}\""), src));
    };
    let Some(size) = super::values::parse_size(size) else {
        return Err(at(format!("invalid zone size \"{whole}\""), src));
    };
    if size < 8 * 4096 {
        return Err(at(format!("zone \"{whole}\" is too small"), src));
    }
    Ok((name.to_string(), size))
}

/// nginx's `ngx_atoi`: digits only, positive.
fn positive(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse::<u64>().ok())
        .flatten()
        .filter(|n| *n > 0)
}

fn set_zone(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let stream = match n {
        Node::Http(_) => false,
        Node::Stream(_) => true,
        _ => return Err(not_here(d)),
    };
    let req = d.name == "limit_req_zone";
    let key = vars::compile(&d.args[0]).map_err(|m| at(m, &d.src))?;
    let mut zone = None;
    let mut rate = 1000u64;
    for a in &d.args[1..] {
        if let Some(z) = a.strip_prefix("zone=") {
            zone = Some(zone_arg(z, a, &d.src)?);
        } else if let Some(r) = a.strip_prefix("rate=").filter(|_| req) {
            let (num, scale) = if let Some(n) = r.strip_suffix("r/s") {
                (n, 1)
            } else if let Some(n) = r.strip_suffix("r/m") {
                (n, 60)
            } else {
                (r, 1)
            };
            let n = positive(num).ok_or_else(|| at(format!("invalid rate \"{a}\""), &d.src))?;
            rate = n.saturating_mul(1000) / scale;
        } else if req && a == "sync" && d.args.len() == 4 {
            // nginx Plus's cluster sync: the workers share the zone here
            // already; there is no cluster to sync with.
        } else {
            return Err(at(format!("invalid parameter \"{a}\""), &d.src));
        }
    }
    let Some((name, size)) = zone else {
        return Err(at(
            format!("\"{}\" must have \"zone\" parameter", d.name),
            &d.src,
        ));
    };
    let kind = match (req, stream) {
        (true, _) => ZoneKind::Req { rate },
        (false, false) => ZoneKind::Conn,
        (false, true) => ZoneKind::StreamConn,
    };
    if let Some(z) = b.limit_zones.iter().find(|z| z.name == name) {
        let same_use = matches!((z.kind, kind), (ZoneKind::Req { .. }, ZoneKind::Req { .. }))
            || z.kind == kind;
        if !same_use {
            return Err(at(
                format!(
                    "the shared memory zone \"{name}\" is already declared for a different use"
                ),
                &d.src,
            ));
        }
        if z.size != size {
            return Err(at(
                format!(
                    "the size {size} of shared memory zone \"{name}\" conflicts with already declared size {}",
                    z.size
                ),
                &d.src,
            ));
        }
        return Err(at(
            format!(
                "{} \"{name}\" is already bound to key \"{}\"",
                d.name, z.key_text
            ),
            &d.src,
        ));
    }
    b.limit_zones.push(LimitZoneSpec {
        name,
        size,
        kind,
        key,
        key_text: d.args[0].clone(),
        src: d.src.clone(),
    });
    Ok(())
}

fn settings<'a>(n: &'a mut Node<'_>, d: &Directive) -> Result<&'a mut LocB, ConfError> {
    match n {
        Node::Stream(st) => Ok(&mut st.proxy_ssl),
        Node::StreamServer(s) => Ok(&mut s.proxy_ssl),
        other => other.loc_b().ok_or_else(|| not_here(d)),
    }
}

fn stream_node(n: &Node<'_>) -> bool {
    matches!(n, Node::Stream(_) | Node::StreamServer(_))
}

fn set_limit_req(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let mut zone = None;
    let mut burst = 0u64;
    let mut delay = 0u64;
    for a in &d.args {
        if let Some(z) = a.strip_prefix("zone=") {
            zone = Some(z.to_string());
        } else if let Some(v) = a.strip_prefix("burst=") {
            burst =
                positive(v).ok_or_else(|| at(format!("invalid burst value \"{a}\""), &d.src))?;
        } else if let Some(v) = a.strip_prefix("delay=") {
            delay =
                positive(v).ok_or_else(|| at(format!("invalid delay value \"{a}\""), &d.src))?;
        } else if a == "nodelay" {
            // nginx's NGX_MAX_INT_T_VALUE / 1000: never delayed.
            delay = (i64::MAX / 1000) as u64;
        } else {
            return Err(at(format!("invalid parameter \"{a}\""), &d.src));
        }
    }
    let Some(zone) = zone else {
        return Err(at("\"limit_req\" must have \"zone\" parameter", &d.src));
    };
    let l = settings(n, d)?;
    let list = l.limit_req.get_or_insert_with(Vec::new);
    if list.iter().any(|x| x.zone == zone) {
        return Err(at("\"limit_req\" directive is duplicate", &d.src));
    }
    list.push(LimitReq {
        zone: zone.clone(),
        burst: burst.saturating_mul(1000),
        delay: delay.saturating_mul(1000),
    });
    b.limit_uses.push(ZoneUse {
        name: zone,
        conn: false,
        stream: false,
        src: d.src.clone(),
    });
    Ok(())
}

fn set_limit_conn(b: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let stream = stream_node(n);
    let conn = d.args[1]
        .parse::<u32>()
        .ok()
        .filter(|c| *c > 0 && *c <= 65535)
        .ok_or_else(|| {
            at(
                format!("invalid number of connections \"{}\"", d.args[1]),
                &d.src,
            )
        })?;
    let l = settings(n, d)?;
    let list = l.limit_conn.get_or_insert_with(Vec::new);
    if list.iter().any(|x| x.zone == d.args[0]) {
        return Err(at("\"limit_conn\" directive is duplicate", &d.src));
    }
    list.push(LimitConn {
        zone: d.args[0].clone(),
        conn,
    });
    b.limit_uses.push(ZoneUse {
        name: d.args[0].clone(),
        conn: true,
        stream,
        src: d.src.clone(),
    });
    Ok(())
}

fn set_status(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let code = d.args[0]
        .parse::<u16>()
        .map_err(|_| at(format!("\"{}\" directive invalid number", d.name), &d.src))?;
    if !(400..=599).contains(&code) {
        return Err(at("value must be between 400 and 599", &d.src));
    }
    let l = settings(n, d)?;
    let slot = if d.name == "limit_req_status" {
        &mut l.limit_req_status
    } else {
        &mut l.limit_conn_status
    };
    super::build::set_once(slot, code, d)
}

fn set_log_level(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let level = match d.args[0].as_str() {
        "info" => Level::Info,
        "notice" => Level::Notice,
        "warn" => Level::Warn,
        "error" => Level::Error,
        other => {
            return Err(at(
                format!(
                    "invalid value \"{other}\" in \"{}\" directive, it must be \"info\", \"notice\", \"warn\" or \"error\"",
                    d.name
                ),
                &d.src,
            ));
        }
    };
    let l = settings(n, d)?;
    let slot = if d.name == "limit_req_log_level" {
        &mut l.limit_req_log_level
    } else {
        &mut l.limit_conn_log_level
    };
    super::build::set_once(slot, level, d)
}

fn set_dry_run(_: &mut Builder, d: &Directive, n: &mut Node<'_>) -> Result<(), ConfError> {
    let on = super::build::flag(d)?;
    let l = settings(n, d)?;
    let slot = if d.name == "limit_req_dry_run" {
        &mut l.limit_req_dry_run
    } else {
        &mut l.limit_conn_dry_run
    };
    super::build::set_once(slot, on, d)
}

/// Checks that every zone a `limit_req` or `limit_conn` names was declared
/// for that use (nginx: `zero size shared memory zone`).
pub(super) fn check_uses(zones: &[LimitZoneSpec], uses: &[ZoneUse]) -> Result<(), ConfError> {
    for u in uses {
        let Some(z) = zones.iter().find(|z| z.name == u.name) else {
            return Err(at(
                format!("zero size shared memory zone \"{}\"", u.name),
                &u.src,
            ));
        };
        let fits = match z.kind {
            ZoneKind::Req { .. } => !u.conn,
            ZoneKind::Conn => u.conn && !u.stream,
            ZoneKind::StreamConn => u.conn && u.stream,
        };
        if !fits {
            return Err(at(
                format!(
                    "the shared memory zone \"{}\" is already declared for a different use",
                    u.name
                ),
                &u.src,
            ));
        }
    }
    Ok(())
}

/// The zones of a configuration, shared by its levels.
pub type LimitZones = Arc<Vec<LimitZoneSpec>>;

/// The level a delayed request is logged at: one below `limit_req_log_level`
/// (info stays info), as nginx does.
pub fn delay_level(l: Level) -> Level {
    match l {
        Level::Error => Level::Warn,
        Level::Warn => Level::Notice,
        _ => Level::Info,
    }
}

#[cfg(test)]
mod tests {
    use crate::conf::testutil::try_build;

    fn parse_err(text: &str) -> String {
        try_build(text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    fn e(body: &str) -> String {
        parse_err(&format!(
            "events {{}}\nhttp {{\nlimit_req_zone $binary_remote_addr zone=one:1m rate=1r/s;\n{body}\n}}\n"
        ))
    }

    fn check(body: &str, want: &str) {
        let got = e(body);
        assert!(got.contains(want), "{body}: got {got:?}, want {want:?}");
    }

    #[test]
    fn refusals() {
        check(
            "limit_req_zone $uri zone=two rate=1r/s;",
            "invalid zone size \"zone=two\"",
        );
        check(
            "limit_req_zone $remote_addr zone=two:1k rate=1r/s;",
            "zone \"zone=two:1k\" is too small",
        );
        check(
            "limit_req_zone $remote_addr zone=two:1m rate=0r/s;",
            "invalid rate \"rate=0r/s\"",
        );
        check(
            "limit_req_zone $remote_addr zone=two:1m rate=1r/s x;",
            "invalid parameter \"x\"",
        );
        check(
            "limit_req_zone $remote_addr rate=1r/s rate=2r/s;",
            "\"limit_req_zone\" must have \"zone\" parameter",
        );
        check(
            "limit_req_zone $remote_addr zone=one:1m rate=1r/s;",
            "limit_req_zone \"one\" is already bound to key \"$binary_remote_addr\"",
        );
        check(
            "limit_req_zone $remote_addr zone=one:2m rate=1r/s;",
            "conflicts with already declared size",
        );
        check(
            "limit_conn_zone $remote_addr zone=one:1m;",
            "already declared for a different use",
        );
        check(
            "limit_req burst=5;",
            "\"limit_req\" must have \"zone\" parameter",
        );
        check(
            "limit_req zone=one burst=0;",
            "invalid burst value \"burst=0\"",
        );
        check(
            "limit_req zone=one delay=x;",
            "invalid delay value \"delay=x\"",
        );
        check(
            "limit_req zone=one; limit_req zone=one;",
            "\"limit_req\" directive is duplicate",
        );
        check(
            "limit_req zone=nope;",
            "zero size shared memory zone \"nope\"",
        );
        check("limit_conn one 1;", "already declared for a different use");
        check("limit_req_status 600;", "value must be between 400 and 599");
        check("limit_req_log_level debug;", "invalid value \"debug\"");
        check(
            "limit_conn_zone $remote_addr zone=c:1m; limit_conn c 0;",
            "invalid number of connections \"0\"",
        );
        assert!(e("limit_req zone=one;").is_empty());
    }
}
